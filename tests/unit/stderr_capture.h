/* stderr_capture: what the code under test of a unit test writes to
 * standard error, caught in a temporary file. Include after <cmocka.h>. */
#ifndef SLUICE_TESTS_STDERR_CAPTURE_H
#define SLUICE_TESTS_STDERR_CAPTURE_H

#include <stdio.h>
#include <unistd.h>

/* Standard error goes to a temporary file until stderr_capture_end(). */
struct stderr_capture {
    FILE *file;
    int saved;
};

static inline void stderr_capture_begin(struct stderr_capture *c)
{
    c->file = tmpfile();
    assert_non_null(c->file);
    fflush(stderr);
    c->saved = dup(2);
    assert_true(c->saved >= 0);
    assert_true(dup2(fileno(c->file), 2) == 2);
}

/* Puts standard error back and copies what it got into <said>. */
static inline void stderr_capture_end(struct stderr_capture *c, char *said, size_t cap)
{
    fflush(stderr);
    assert_true(dup2(c->saved, 2) == 2);
    close(c->saved);
    rewind(c->file);
    size_t n = fread(said, 1, cap - 1, c->file);
    said[n] = '\0';
    fclose(c->file);
}

#endif
