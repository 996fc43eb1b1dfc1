/* query: a URL's query as the servers behind the gateway read it: its
 * parameters split on '&' and on ';' (Rack splits on both), a name's
 * bytes decoded ("%XX" a byte, '+' a space) before it is looked up. The
 * gate's checks of a query (method_override.c's _method, max_forwards.c's
 * TRACE echo) read it so, not as sent. */
#ifndef SLUICE_UTIL_QUERY_H
#define SLUICE_UTIL_QUERY_H

#include <stdbool.h>
#include <stddef.h>

/* Whether <c> ends a query parameter: '&' or ';'. */
static inline bool query_is_separator(char c)
{
    return c == '&' || c == ';';
}

/* The byte of a query parameter's name (<n>, <len> bytes) at <n>[*i], as
 * a framework decodes it: "%XX" a byte, '+' a space, any other byte (a '%'
 * without two hex digits) itself. Moves *i past it; *i < len. */
int query_name_byte(const char *n, size_t len, size_t *i);

/* Whether the parameter name <n> (<len> bytes, as sent) holds <word>
 * (lower case) once decoded, in any case: "api_%6Bey" holds "key". */
bool query_name_holds(const char *n, size_t len, const char *word);

/* Whether the parameter name <n> (<len> bytes, as sent) is <word> (lower
 * case) once decoded, in any case, whole: "%73IG" is "sig", "design" is
 * not. For words too short to be looked for inside other names. */
bool query_name_is(const char *n, size_t len, const char *word);

#endif
