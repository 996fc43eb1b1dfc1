/* test_check: `sluice check` (cli/check.c) judges the file it reads. It
 * reads regular files only; a check of the path (stat()) and then an open()
 * of it could judge one file and read another that was put at the path
 * between the two: a FIFO that holds it, a device read up to the cap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <fcntl.h>

#include "cli/commands.h"

/* stat() and open() are interposed for this program: the first of them
 * that names <swap_path> is done, then <swap_with> (a symbolic link) is
 * renamed over that path, as another process could do at that moment. */
static const char *swap_path;
static const char *swap_with;
static bool swapped;

static void swap_after(const char *path)
{
    if (swap_path == NULL || swapped || strcmp(path, swap_path) != 0)
        return;
    swapped = true;
    assert_int_equal(rename(swap_with, swap_path), 0);
}

int stat(const char *restrict path, struct stat *restrict st)
{
    int (*real)(const char *restrict, struct stat *restrict) =
        (int (*)(const char *restrict, struct stat *restrict))dlsym(RTLD_NEXT, "stat");
    int r = real(path, st);
    swap_after(path);
    return r;
}

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, unsigned);
        va_end(ap);
    }
    int (*real)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    int fd = real(path, flags, mode);
    swap_after(path);
    return fd;
}

/* Runs `sluice check <path>` with standard output into <out> (<cap>
 * bytes); returns its exit status. */
static int run_check(char *path, char *out, size_t cap)
{
    char name[] = "check";
    char *argv[] = {name, path, NULL};
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    FILE *f = tmpfile();
    assert_true(saved >= 0 && f != NULL);
    assert_true(dup2(fileno(f), STDOUT_FILENO) >= 0);
    int rc = cmd_check.main(2, argv);
    fflush(stdout);
    assert_true(dup2(saved, STDOUT_FILENO) >= 0);
    close(saved);
    rewind(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
    return rc;
}

/* A regular file when check opens it, /dev/zero at its path from then on:
 * the file opened is the one judged and read. The stat() before the open
 * judged the regular file, then the load opened the path again and read
 * /dev/zero (exit 1, a policy error about a character device). */
static void test_file_replaced_after_it_is_judged(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_check.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], link[256], out[4096];
    snprintf(path, sizeof(path), "%s/policy.yaml", dir);
    snprintf(link, sizeof(link), "%s/zero", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("version: 1\nrules:\n  - {host: a.example.test, tier: 0}\n", f);
    fclose(f);
    assert_int_equal(symlink("/dev/zero", link), 0);

    swap_path = path;
    swap_with = link;
    swapped = false;
    int rc = run_check(path, out, sizeof(out));
    swap_path = NULL;
    assert_true(swapped);
    if (rc != 0)
        print_message("--- check's output:\n%s", out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "policy.yaml: 1 rule,"));

    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_replaced_after_it_is_judged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
