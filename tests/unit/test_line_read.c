/* test_line_read: util/line_read.h's lines, read from memory: whole ones
 * as getline() gives them, one over the bound skipped (and said to be)
 * without its bytes held, the next line after it intact, and the budget
 * that stops a read within an endless line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/line_read.h"

/* A stream over text in memory, and what line_read() fills. */
struct reader {
    FILE *f;
    char *buf;
    size_t cap, kept;
    bool over;
};

/* Opens <r> on <text> (<len> bytes, NULs allowed). */
static void reader_open(struct reader *r, char *text, size_t len)
{
    memset(r, 0, sizeof(*r));
    r->f = fmemopen(text, len, "r");
    assert_non_null(r->f);
}

static void reader_close(struct reader *r)
{
    free(r->buf);
    fclose(r->f);
}

/* line_read() of the next line of <r>, bounded by <max>, within <budget>. */
static ssize_t next(struct reader *r, size_t max, size_t budget)
{
    return line_read(r->f, &r->buf, &r->cap, max, budget, &r->kept, &r->over);
}

static void lines_come_whole_with_their_ends(void **state)
{
    (void)state;
    static char text[] = "ab\n\nc\0d\nlast";
    struct reader r;
    reader_open(&r, text, sizeof(text) - 1);
    assert_int_equal(next(&r, 16, 1000), 3);
    assert_int_equal(r.kept, 3);
    assert_false(r.over);
    assert_string_equal(r.buf, "ab\n");
    assert_int_equal(next(&r, 16, 1000), 1);
    assert_string_equal(r.buf, "\n");
    assert_int_equal(next(&r, 16, 1000), 4);
    assert_int_equal(r.kept, 4); /* the NUL is kept: the length says where the line ends */
    assert_memory_equal(r.buf, "c\0d\n", 4);
    assert_int_equal(next(&r, 16, 1000), 4);
    assert_string_equal(r.buf, "last"); /* the last line, without its end */
    assert_int_equal(next(&r, 16, 1000), -1);
    reader_close(&r);
}

static void a_line_over_the_bound_is_skipped_and_said(void **state)
{
    (void)state;
    static char text[] = "12345678\n123456789\nok\n";
    struct reader r;
    reader_open(&r, text, sizeof(text) - 1);
    assert_int_equal(next(&r, 9, 1000), 9);
    assert_false(r.over); /* 9 bytes, its end included: at the bound */
    assert_int_equal(next(&r, 9, 1000), 10);
    assert_true(r.over);
    assert_int_equal(r.kept, 0);
    assert_string_equal(r.buf, "");
    assert_true(r.cap <= 10); /* never grown past the bound */
    assert_int_equal(next(&r, 9, 1000), 3);
    assert_false(r.over);
    assert_string_equal(r.buf, "ok\n");
    reader_close(&r);
}

static void the_budget_stops_a_read_within_a_line(void **state)
{
    (void)state;
    static char text[] = "0123456789012345678901234567890123456789\nnext\n";
    struct reader r;
    reader_open(&r, text, sizeof(text) - 1);
    assert_int_equal(next(&r, 8, 20), 20);
    assert_true(r.over);
    /* the rest is the stream's: the caller that set the budget reads no more */
    assert_int_equal(getc(r.f), '0');
    reader_close(&r);
}

/* No bound but the budget: <max> SIZE_MAX. Its buffer's limit, max + 1,
 * wrapped to 0: the first byte's realloc() to 0 bytes freed the buffer,
 * and the line was read as the stream's end (-1), the caller left with
 * the freed buffer to free again. */
static void no_bound_but_the_budget(void **state)
{
    (void)state;
    static char text[] = "abc\nd";
    struct reader r;
    reader_open(&r, text, sizeof(text) - 1);
    assert_int_equal(next(&r, SIZE_MAX, 1000), 4);
    assert_false(r.over);
    assert_string_equal(r.buf, "abc\n");
    assert_int_equal(next(&r, SIZE_MAX, 1000), 1);
    assert_string_equal(r.buf, "d");
    assert_int_equal(next(&r, SIZE_MAX, 1000), -1);
    reader_close(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lines_come_whole_with_their_ends),
        cmocka_unit_test(a_line_over_the_bound_is_skipped_and_said),
        cmocka_unit_test(the_budget_stops_a_read_within_a_line),
        cmocka_unit_test(no_bound_but_the_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
