/* utf8: strict UTF-8 (RFC 3629), one decoder for every place that checks
 * text from the outside: host names before IDNA, JSON strings the log,
 * sluice check and sluice audit write.
 *
 * Owns nothing: pure functions over the caller's bytes (utf8_lossy()'s
 * result is the caller's). */
#ifndef SLUICE_UTIL_UTF8_H
#define SLUICE_UTIL_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Length (1 to 4) of the valid UTF-8 sequence at <s>, which has <n> > 0
 * bytes left, or 0 when the bytes there are not one: no overlong forms,
 * no surrogates, nothing above U+10FFFF, no sequence cut short. */
size_t utf8_seq(const unsigned char *s, size_t n);

/* True when the <len> bytes at <s> are all valid UTF-8 sequences. */
bool utf8_valid(const unsigned char *s, size_t len);

/* A copy of the NUL-terminated <s> in which each byte that starts no valid
 * sequence is U+FFFD: text that a JSON writer takes whatever its bytes (a
 * file or mount name in another encoding). The caller frees it; never
 * NULL (xmalloc). */
char *utf8_lossy(const char *s);

/* True when a cut of <s> before s[i] falls between two characters: s[i]
 * is no UTF-8 sequence's continuation byte (utf8_cut_middle()'s default). */
bool utf8_between(const char *s, size_t i);

/* Writes the <n> bytes of <s> into <out> with their middle given way to
 * "...": about their first <head> and their last <tail> bytes kept, each
 * side giving up the bytes up to where <between> (NULL: utf8_between())
 * says a cut falls between two characters. <out>, which has room for
 * head + 3 + tail bytes and a NUL, may be <s> itself; <n> must be at
 * least head + tail. Returns the length written (NUL-terminated): one
 * cutter for every message whose path keeps its start and end. */
size_t utf8_cut_middle(char *out, const char *s, size_t n, size_t head, size_t tail,
                       bool (*between)(const char *s, size_t i));

#endif
