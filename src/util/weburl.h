/* weburl: the http:// and https:// URLs of webhook sinks, parsed one way for
 * the policy loader (so `sluice check` refuses what `serve` could not use)
 * and for the sink itself, and the label that names a sink on standard
 * error and in metrics without the secrets a URL often carries: a
 * user:password@ before the host, a token in the path or the query.
 *
 * A webhook URL is http[s]://HOST[:PORT][/PATH][?QUERY][#FRAGMENT] with HOST
 * an ASCII name (labels of letters, digits, '-' and '_', one final dot
 * allowed), an IPv4 literal written a.b.c.d (no other spelling: the sink's
 * resolver, libevent's, would read 0127.0.0.1 as 127.0.0.1 where the C
 * library reads 87.0.0.1, and ask DNS for 127.1) or an [IPv6] literal
 * without a zone. A user name or password
 * (USER[:PASSWORD]@HOST) is refused: the sink would not send it, and every
 * message about the URL would have to hide it. */
#ifndef SLUICE_UTIL_WEBURL_H
#define SLUICE_UTIL_WEBURL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WEBURL_HOST_MAX 253
/* Why a URL with USER:PASSWORD@ before its host is refused. */
#define WEBURL_NO_USERINFO                                                                         \
    "a user name or password in the URL (USER:PASSWORD@ before the host) is not supported: "       \
    "sluice would not send it"
/* Why a host that is an IPv4 address in another spelling than a.b.c.d is
 * refused: libevent's resolver reads 0127.0.0.1 as 127.0.0.1 where the C
 * library, curl and browsers read 87.0.0.1, and asks DNS for 127.1. */
#define WEBURL_BAD_IPV4                                                                            \
    "bad host: an IPv4 address is written a.b.c.d, four decimal numbers from 0 to 255 without "    \
    "leading zeros"

/* Parts of a parsed URL, each a span of the URL's own text (borrowed). */
struct weburl {
    bool https;
    const char *host; /* without [brackets]; 1..WEBURL_HOST_MAX bytes */
    size_t host_len;
    const char *hostport; /* HOST[:PORT] as written, brackets included: the Host header */
    size_t hostport_len;
    const char *target; /* [/PATH][?QUERY] without the fragment, maybe empty: the
                           request target is "/" followed by this when it does not
                           start with '/' */
    size_t target_len;
    uint16_t port; /* as written, else 443 or 80 */
};

/* Parses the NUL-terminated <url> into <u> (spans of <url>). Returns 0, or
 * -1 with <*why> set to a static text that quotes nothing of the URL
 * ("not an http:// or https:// URL", "bad host", "bad port", "unterminated
 * [IPv6] host", WEBURL_NO_USERINFO, WEBURL_BAD_IPV4). */
int weburl_parse(const char *url, struct weburl *u, const char **why);
/* Whether <url> is written with the https:// scheme (as weburl_parse()
 * reads it; the rest unchecked). */
bool weburl_is_https(const char *url);

/* Returns (malloc'd; NULL when out of memory) how <url> is shown on
 * standard error and in metrics, for any text, URL or not: <url> itself
 * when it has no user name or password, no path but "/" and neither query
 * nor fragment; otherwise <url> without its USER:PASSWORD@ and without its
 * path, followed by "/...#" and the first 8 hex digits of the SHA-256 of
 * the whole <url>, which tells sinks apart without showing a secret
 * ("https://hooks.slack.com/...#1f2e3d4c"). No path segment is shown: the
 * first may be the credential (Telegram's /bot<TOKEN>/sendMessage), or
 * the only one (an ntfy topic, a healthchecks.io UUID). Either is written
 * as text_shown() writes text (a control character, C1's included, and
 * the backslash as \ooo): what comes before the path may hold a terminal
 * escape. */
char *weburl_label(const char *url);

/* Returns (malloc'd; NULL when out of memory) the key the state store files
 * the queued alerts of the <listing>th sink of <url> under: "sha256:" and
 * the 64 hex digits of the SHA-256 of the whole <url> (the first 8 are its
 * label's), followed by " (listing N)" for a listing N > 1. Never the URL:
 * its path or query is often the sink's credential, read from the
 * environment so that it is in no file, and the store is one. */
char *weburl_store_key(const char *url, unsigned listing);
/* For <old>, a key a store made before these keys filed alerts under (the
 * URL, or "URL (listing N)": a URL holds no space), returns its
 * weburl_store_key() (malloc'd); NULL, <*nomem> false, when <old> is no
 * such key (it does not start with http:// or https://), or NULL with
 * <*nomem> true when out of memory. */
char *weburl_store_key_of_old(const char *old, bool *nomem);

#endif
