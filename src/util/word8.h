/* word8: questions about the 8 bytes of a 64-bit word at once, for scans
 * that look at a run of bytes a word at a time and at single bytes only
 * where a word says one of them is of interest (Bit Twiddling Hacks'
 * haszero/hasless). Each says whether SOME byte is such, never which one,
 * so the byte order a word was loaded in does not matter. */
#ifndef SLUICE_UTIL_WORD8_H
#define SLUICE_UTIL_WORD8_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define WORD8_ONES  0x0101010101010101u
#define WORD8_HIGHS 0x8080808080808080u

/* The 8 bytes at <p> (any alignment). */
static inline uint64_t word8_load(const void *p)
{
    uint64_t x;
    memcpy(&x, p, sizeof(x));
    return x;
}

/* Whether a byte of <x> is below <n> (1 to 128). A byte at or above 0x80
 * keeps its high bit out of the result (~x), and a borrow out of a byte
 * that is below <n> only marks bytes above it wrongly: whether any is
 * marked is exact. */
static inline bool word8_has_below(uint64_t x, unsigned char n)
{
    return ((x - WORD8_ONES * n) & ~x & WORD8_HIGHS) != 0;
}

/* Whether a byte of <x> is <c>. */
static inline bool word8_has(uint64_t x, unsigned char c)
{
    return word8_has_below(x ^ (WORD8_ONES * c), 1);
}

/* Whether a byte of <x> is at or above 0x80 (not ASCII). */
static inline bool word8_has_high(uint64_t x)
{
    return (x & WORD8_HIGHS) != 0;
}

/* Whether every byte of <x> is one a JSON string carries as it is:
 * printable ASCII (0x20-0x7e) but " and \\. Each term sets the high bit of
 * a byte that is not: below 0x20 (the first), 0x7f and above (the second;
 * 0xff by the first), " or \\ (zero once XORed, minus one). A plain byte
 * neither borrows from nor carries into the byte after it, so the first
 * byte that is not plain is always marked (bytes after it may be marked
 * wrongly): whether any is marked is exact. */
static inline bool word8_json_plain(uint64_t x)
{
    uint64_t odd = (x - WORD8_ONES * 0x20) | (x + WORD8_ONES) |
                   ((x ^ (WORD8_ONES * '"')) - WORD8_ONES) |
                   ((x ^ (WORD8_ONES * '\\')) - WORD8_ONES);
    return (odd & WORD8_HIGHS) == 0;
}

#endif
