/* query: a URL's query as servers read it (query.h). */
#include "util/query.h"

#include <ctype.h>

#include "util/hex.h"

int query_name_byte(const char *n, size_t len, size_t *i)
{
    int c = (unsigned char)n[*i], hi, lo;
    if (c == '%' && *i + 2 < len && (hi = hex_digit_value((unsigned char)n[*i + 1])) >= 0 &&
        (lo = hex_digit_value((unsigned char)n[*i + 2])) >= 0) {
        *i += 3;
        return hi * 16 + lo;
    }
    *i += 1;
    return c == '+' ? ' ' : c;
}

bool query_name_holds(const char *n, size_t len, const char *word)
{
    /* From each byte as sent: one inside a "%XX" starts no decoded byte,
     * but a match from there holds the word all the same. */
    for (size_t s = 0; s < len; s++) {
        size_t i = s, k = 0;
        while (word[k] != '\0' && i < len && tolower(query_name_byte(n, len, &i)) == word[k])
            k++;
        if (word[k] == '\0')
            return true;
    }
    return false;
}

bool query_name_is(const char *n, size_t len, const char *word)
{
    size_t i = 0, k = 0;
    while (word[k] != '\0' && i < len && tolower(query_name_byte(n, len, &i)) == word[k])
        k++;
    return word[k] == '\0' && i == len;
}
