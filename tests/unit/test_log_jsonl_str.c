/* test_log_jsonl_str: the decision log's string writer, put_str(), whose
 * strings of plain bytes are tested and copied a word at a time, against
 * the byte loop it was (put_str_escaped(), which it still calls for the
 * rest). The same output to the byte, the same length, the same keys
 * named cut, and nothing written past what the byte loop wrote: for every
 * byte value alone and at every position of strings of 1 to 40 bytes, for
 * invalid UTF-8 (lone continuation bytes, overlong encodings, surrogates,
 * code points past U+10FFFF, sequences cut short), for U+2028 and U+2029,
 * around the cut lines' 256-byte limit, into buffers with too little
 * room, and for 300,000 random strings made of such pieces. Strings and
 * buffers are heap blocks of their exact size: the sanitizer build sees a
 * read or a write a byte past either. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "watch/log_line.c" /* the unit under test, internals included */

/* The reference: put_str_escaped(), the byte loop put_str() was until
 * the word copy came before it (823b8cb's put_str(), its strlen() moved
 * to the start), which put_str() now calls for what it does not copy. */
static void ref_put_str(struct out *o, const char *s)
{
    if (s == NULL)
        put(o, "null", 4);
    else
        put_str_escaped(o, s, strlen(s));
}

/* Buffer sizes tried (the out's cap is one less: its NUL), the bytes put
 * before the string, and the field limits (none, a cut line's, small). */
static const size_t caps[] = {1, 2, 3, 5, 9, 17, 64, 258, 259, 300, 2048};
static const size_t leads[] = {0, 1, 7};
static const size_t field_maxes[] = {SIZE_MAX, CUT_FIELD_MAX, 0, 1, 5, 6, 7, 12};

static size_t compared; /* put_str() calls compared, for the message */

/* Puts <s> with both writers into <cap>-byte heap buffers filled alike,
 * after <lead> bytes, cut at <field_max>; fails on any difference. */
static void compare_one(const char *s, size_t cap, size_t lead, size_t field_max)
{
    char *a = malloc(cap), *b = malloc(cap);
    assert_non_null(a);
    assert_non_null(b);
    memset(a, '#', cap);
    memset(b, '#', cap);
    struct out oa = out_on(a, cap, field_max), ob = out_on(b, cap, field_max);
    oa.key = ob.key = "path";
    for (size_t i = 0; i < lead; i++) {
        put(&oa, "x", 1);
        put(&ob, "x", 1);
    }
    put_str(&oa, s);
    ref_put_str(&ob, s);
    compared++;
    if (oa.len != ob.len || oa.ncut != ob.ncut || memcmp(a, b, cap) != 0) {
        size_t shown = ob.len < cap ? ob.len : cap - 1;
        fail_msg("string of %zu bytes, cap %zu, lead %zu, field_max %zu: length %zu against "
                 "%zu, cut %zu against %zu, reference %.*s",
                 s != NULL ? strlen(s) : 0, cap, lead, field_max, oa.len, ob.len, oa.ncut, ob.ncut,
                 (int)shown, b);
    }
    free(a);
    free(b);
}

/* <s> (<n> bytes, no NUL among them) in a heap block of n + 1 bytes, put
 * both ways under every size, lead and limit. */
static void compare(const char *s, size_t n)
{
    char *copy = malloc(n + 1);
    assert_non_null(copy);
    memcpy(copy, s, n);
    copy[n] = '\0';
    for (size_t c = 0; c < sizeof(caps) / sizeof(caps[0]); c++)
        for (size_t l = 0; l < sizeof(leads) / sizeof(leads[0]); l++)
            for (size_t f = 0; f < sizeof(field_maxes) / sizeof(field_maxes[0]); f++)
                compare_one(copy, caps[c], leads[l], field_maxes[f]);
    free(copy);
}

static void test_null_and_empty(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(caps) / sizeof(caps[0]); c++)
        for (size_t f = 0; f < sizeof(field_maxes) / sizeof(field_maxes[0]); f++)
            compare_one(NULL, caps[c], 0, field_maxes[f]);
    compare("", 0);
}

/* Every byte value at every position of plain strings of 1 to 40 bytes:
 * each word of the copy, its last (overlapping) word, the 4-byte halves
 * and the 1-3 byte strings each meet it. */
static void test_every_byte_everywhere(void **state)
{
    (void)state;
    char s[40];
    for (size_t n = 1; n <= sizeof(s); n++)
        for (size_t pos = 0; pos < n; pos++)
            for (unsigned v = 1; v < 256; v++) {
                for (size_t i = 0; i < n; i++)
                    s[i] = (char)('a' + i % 26);
                s[pos] = (char)v;
                /* one size and limit of each kind, not all: 40 x 40 x 255 */
                char *copy = malloc(n + 1);
                assert_non_null(copy);
                memcpy(copy, s, n);
                copy[n] = '\0';
                compare_one(copy, 2048, 1, SIZE_MAX);
                compare_one(copy, 2048, 0, 7);
                compare_one(copy, 17, 0, SIZE_MAX);
                free(copy);
            }
}

/* The pieces strings are made of: plain text, each special byte, UTF-8
 * valid and not. */
static const char *const pieces[] = {
    "a",
    "/path",
    "0123456789abcdef",
    " ",
    "~",
    "\"",
    "\\",
    "\n",
    "\r",
    "\t",
    "\x01",
    "\x1f",
    "\x7f",
    "\x80",
    "\xbf",
    "\xc0",
    "\xc1",
    "\xff",
    "\xfe",
    "\xc3\xa9",         /* U+00E9 */
    "\xc2\x80",         /* U+0080, the least 2-byte */
    "\xdf\xbf",         /* U+07FF */
    "\xe2\x82\xac",     /* U+20AC */
    "\xe2\x80\xa8",     /* U+2028 */
    "\xe2\x80\xa9",     /* U+2029 */
    "\xe2\x80\xa7",     /* U+2027, beside them */
    "\xe2\x80\xaa",     /* U+202A */
    "\xef\xbf\xbf",     /* U+FFFF */
    "\xf0\x9f\x98\x80", /* U+1F600 */
    "\xf4\x8f\xbf\xbf", /* U+10FFFF */
    "\xc0\xaf",         /* overlong '/' */
    "\xe0\x80\xaf",     /* overlong, 3 bytes */
    "\xf0\x80\x80\xaf", /* overlong, 4 bytes */
    "\xed\xa0\x80",     /* a surrogate, U+D800 */
    "\xed\xbf\xbf",     /* U+DFFF */
    "\xf4\x90\x80\x80", /* past U+10FFFF */
    "\xf5\x80\x80\x80", /* F5: never a lead byte */
    "\xe2\x82",         /* cut short */
    "\xf0\x9f\x98",     /* cut short */
    "\xe2",             /* a lead byte alone */
};
#define NPIECES (sizeof(pieces) / sizeof(pieces[0]))

/* Every piece alone and every pair, behind plain bytes of 0 to 9 (each
 * place in a word and its tail). */
static void test_pieces_and_pairs(void **state)
{
    (void)state;
    char s[64];
    for (size_t i = 0; i < NPIECES; i++)
        for (size_t j = 0; j <= NPIECES; j++)
            for (size_t pad = 0; pad < 10; pad += 3) {
                size_t n = 0;
                memset(s, 'p', pad);
                n = pad;
                memcpy(s + n, pieces[i], strlen(pieces[i]));
                n += strlen(pieces[i]);
                if (j < NPIECES) {
                    memcpy(s + n, pieces[j], strlen(pieces[j]));
                    n += strlen(pieces[j]);
                }
                compare(s, n);
            }
}

/* Strings of 240 to 270 bytes, plain or with an escape, a UTF-8 sequence
 * or U+2028 where the cut lines' limit (CUT_FIELD_MAX bytes of JSON) falls. */
static void test_around_the_cut_limit(void **state)
{
    (void)state;
    static const char *const at[] = {
        "", "\"", "\x01", "\xc3\xa9", "\xe2\x80\xa8", "\xff", "\xf0\x9f\x98\x80"};
    char s[300];
    for (size_t n = 240; n <= 270; n++)
        for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++)
            for (size_t pos = 240; pos < n; pos += 3) {
                memset(s, 'c', n);
                size_t len = strlen(at[k]);
                if (pos + len > n)
                    continue;
                memcpy(s + pos, at[k], len);
                compare(s, n);
            }
}

/* xorshift64: the same strings on every run. */
static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* 300,000 strings of up to 300 bytes: random pieces, random bytes. */
static void test_random_strings(void **state)
{
    (void)state;
    char s[320] = {0};
    for (int round = 0; round < 300000; round++) {
        size_t n = 0, want = next() % 300;
        while (n < want) {
            uint64_t r = next();
            if (r % 4 == 0) {
                s[n++] = (char)(1 + (r >> 8) % 255); /* any byte but NUL */
                continue;
            }
            const char *p = pieces[(r >> 8) % NPIECES];
            size_t len = strlen(p);
            if (n + len > sizeof(s))
                break;
            memcpy(s + n, p, len);
            n += len;
        }
        char *copy = malloc(n + 1);
        assert_non_null(copy);
        memcpy(copy, s, n);
        copy[n] = '\0';
        uint64_t r = next();
        compare_one(copy, caps[r % (sizeof(caps) / sizeof(caps[0]))], (r >> 8) % 3,
                    field_maxes[(r >> 16) % (sizeof(field_maxes) / sizeof(field_maxes[0]))]);
        free(copy);
    }
    print_message("%zu strings compared in all\n", compared);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_and_empty),   cmocka_unit_test(test_every_byte_everywhere),
        cmocka_unit_test(test_pieces_and_pairs), cmocka_unit_test(test_around_the_cut_limit),
        cmocka_unit_test(test_random_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
