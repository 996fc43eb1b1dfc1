/* test_word8: each question util/word8.h asks of a word, against the
 * same question asked of its bytes one at a time: every byte value at
 * every position, alone among bytes that do not answer it, and every pair
 * of values at every pair of positions (a borrow out of one byte must not
 * hide or make up an answer in another). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/word8.h"

/* A question of a word and of one byte; <arg> is its n or c. */
struct question {
    const char *name;
    unsigned char arg;
    bool (*word)(uint64_t x, unsigned char arg);
    bool (*byte)(unsigned char b, unsigned char arg);
};

static bool below_word(uint64_t x, unsigned char n)
{
    return word8_has_below(x, n);
}

static bool below_byte(unsigned char b, unsigned char n)
{
    return b < n;
}

static bool equal_word(uint64_t x, unsigned char c)
{
    return word8_has(x, c);
}

static bool equal_byte(unsigned char b, unsigned char c)
{
    return b == c;
}

static bool high_word(uint64_t x, unsigned char unused)
{
    (void)unused;
    return word8_has_high(x);
}

static bool high_byte(unsigned char b, unsigned char unused)
{
    (void)unused;
    return b >= 0x80;
}

static bool unplain_word(uint64_t x, unsigned char unused)
{
    (void)unused;
    return !word8_json_plain(x);
}

static bool unplain_byte(unsigned char b, unsigned char unused)
{
    (void)unused;
    return b < 0x20 || b > 0x7e || b == '"' || b == '\\';
}

static const struct question questions[] = {
    {"below", 1, below_word, below_byte},
    {"below", 0x20, below_word, below_byte},
    {"below", 0x21, below_word, below_byte},
    {"below", 0x7f, below_word, below_byte},
    {"below", 0x80, below_word, below_byte},
    {"equal", 0x00, equal_word, equal_byte},
    {"equal", '\r', equal_word, equal_byte},
    {"equal", 0x7f, equal_word, equal_byte},
    {"equal", 0x80, equal_word, equal_byte},
    {"equal", 0xff, equal_word, equal_byte},
    {"equal", ':', equal_word, equal_byte},
    {"high", 0, high_word, high_byte},
    {"json_unplain", 0, unplain_word, unplain_byte},
};

/* The answer byte by byte. */
static bool truth(const struct question *q, const unsigned char b[8])
{
    for (int i = 0; i < 8; i++)
        if (q->byte(b[i], q->arg))
            return true;
    return false;
}

static void check(const struct question *q, const unsigned char b[8])
{
    uint64_t x;
    memcpy(&x, b, 8);
    if (q->word(x, q->arg) != truth(q, b))
        fail_msg("%s 0x%02x: %02x %02x %02x %02x %02x %02x %02x %02x", q->name, q->arg, b[0], b[1],
                 b[2], b[3], b[4], b[5], b[6], b[7]);
}

/* A byte that does not answer <q>: the background of the words tried. */
static unsigned char quiet_byte(const struct question *q, unsigned char want)
{
    for (unsigned v = want;; v = (v + 1) & 0xff)
        if (!q->byte((unsigned char)v, q->arg))
            return (unsigned char)v;
}

static void test_one_byte(void **state)
{
    (void)state;
    static const unsigned char backgrounds[] = {'a', ' ', 0x7e, 0x80, 0xff, 0x00, 0x21};
    for (size_t k = 0; k < sizeof(questions) / sizeof(questions[0]); k++) {
        const struct question *q = &questions[k];
        for (size_t g = 0; g < sizeof(backgrounds); g++) {
            unsigned char bg = quiet_byte(q, backgrounds[g]);
            for (int pos = 0; pos < 8; pos++)
                for (unsigned v = 0; v < 256; v++) {
                    unsigned char b[8];
                    memset(b, bg, 8);
                    b[pos] = (unsigned char)v;
                    check(q, b);
                }
        }
    }
}

static void test_two_bytes(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(questions) / sizeof(questions[0]); k++) {
        const struct question *q = &questions[k];
        unsigned char bg = quiet_byte(q, 'a');
        for (int i = 0; i < 8; i++)
            for (int j = i + 1; j < 8; j++)
                for (unsigned v = 0; v < 256; v++)
                    for (unsigned w = 0; w < 256; w++) {
                        unsigned char b[8];
                        memset(b, bg, 8);
                        b[i] = (unsigned char)v;
                        b[j] = (unsigned char)w;
                        check(q, b);
                    }
    }
}

static void test_load(void **state)
{
    (void)state;
    /* any alignment, the bytes in memory order */
    const unsigned char s[] = "x01234567";
    uint64_t x = word8_load(s + 1), y;
    memcpy(&y, "01234567", 8);
    assert_true(x == y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_byte),
        cmocka_unit_test(test_two_bytes),
        cmocka_unit_test(test_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
