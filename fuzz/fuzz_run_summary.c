/* fuzz_run_summary: util/line_read.c and run's reader of the decision log
 * for its summary (tally_log()), on any file, as anyone who can append to
 * a --log or --alerts file may write it. The first two bytes choose
 * line_read()'s bound on a line (0 to 255, or none) and its budget (1 to
 * 256 bytes, or none); the rest is the file, read from a memfd.
 *
 * Invariants of line_read(): the lines it gives take the file's bytes in
 * order, each to its '\n' (the last one may have none), and no more than
 * the budget in all; a line is kept whole (its bytes, NUL-terminated, in
 * a buffer never larger than the bound and its NUL) exactly when it is no
 * longer than the bound, else it is said over and nothing is kept; the
 * stream is left right after the bytes it took.
 * Invariants of tally_log(): the file reads; no count is above the lines
 * the file has, the allowed of tiers 0 to 3 are among the allowed; no line
 * is too long to count, nothing is cut; the same file read from the start
 * of a line counts as its rest alone, and a line that holds no JSON text
 * added anywhere changes nothing.
 * Includes the .c to reach tally_log(). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../src/cli/run.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define INPUT_MAX 65536

static void check(int cond)
{
    if (!cond)
        abort();
}

/* A memfd that holds <n> bytes of <d>, at offset 0; -1 when none could be made. */
static int file_of(const char *d, size_t n)
{
    int fd = memfd_create("fuzz_run_summary", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, d + off, n - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    if (lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void check_line_read(const char *d, size_t n, size_t max, size_t budget)
{
    int fd = file_of(d, n);
    if (fd < 0)
        return;
    FILE *f = fdopen(fd, "r");
    if (f == NULL) {
        close(fd);
        return;
    }
    char *buf = NULL;
    size_t cap = 0, at = 0, kept;
    bool over;
    ssize_t took;
    while (at < budget && (took = line_read(f, &buf, &cap, max, budget - at, &kept, &over)) > 0) {
        size_t t = (size_t)took;
        check(t <= budget - at && t <= n - at);
        const char *lf = memchr(d + at, '\n', n - at);
        size_t line = lf != NULL ? (size_t)(lf - (d + at)) + 1 : n - at;
        /* the line to its end, or to the end of the budget */
        check(t == line || (t < line && t == budget - at));
        check(buf != NULL && (max == SIZE_MAX || cap <= max + 1));
        if (t > max) {
            check(over && kept == 0);
        } else {
            check(!over && kept == t && memcmp(buf, d + at, t) == 0);
        }
        check(buf[kept] == '\0');
        at += t;
    }
    /* nothing more when the file or the budget is through */
    check(at == n || at == budget);
    check(ftello(f) == (off_t)at);
    free(buf);
    fclose(f);
}

static size_t lines_of(const char *d, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += d[i] == '\n';
    return k + (n > 0 && d[n - 1] != '\n');
}

static struct tally tally_of(const char *d, size_t n, off_t start)
{
    struct tally t = {0};
    int fd = file_of(d, n);
    if (fd < 0)
        abort();
    tally_log(fd, start, &t);
    close(fd);
    return t;
}

static bool same_tally(const struct tally *a, const struct tally *b)
{
    return memcmp(a->allowed, b->allowed, sizeof(a->allowed)) == 0 &&
           a->allowed_total == b->allowed_total && a->denied == b->denied &&
           a->reported == b->reported && a->alerts == b->alerts && a->read_ok == b->read_ok &&
           a->cut == b->cut && a->overlong == b->overlong;
}

static void check_tally(const char *d, size_t n, size_t pick)
{
    struct tally t = tally_of(d, n, 0);
    size_t lines = lines_of(d, n);
    check(t.read_ok && !t.cut && t.overlong == 0);
    check(t.allowed_total + t.denied + t.reported <= lines && t.alerts <= lines);
    check(t.allowed[0] + t.allowed[1] + t.allowed[2] + t.allowed[3] <= t.allowed_total);

    /* From the start of a line chosen by <pick>: its rest alone. */
    size_t start = n > 0 ? pick % (n + 1) : 0;
    while (start > 0 && d[start - 1] != '\n')
        start--;
    struct tally from = tally_of(d, n, (off_t)start);
    struct tally rest = tally_of(d + start, n - start, 0);
    check(same_tally(&from, &rest));

    /* A line of no JSON text, added at that line's start, counts for nothing. */
    static const char junk[] = "{\"event\": \"alert\", \"decision\": \"allow\"\n";
    char *more = malloc(n + sizeof(junk));
    check(more != NULL);
    memcpy(more, d, start);
    memcpy(more + start, junk, sizeof(junk) - 1);
    memcpy(more + start + sizeof(junk) - 1, d + start, n - start);
    size_t mn = n + sizeof(junk) - 1;
    /* a last line without its '\n' would be joined to the junk line */
    if (start == n && n > 0 && d[n - 1] != '\n') {
        free(more);
        return;
    }
    struct tally with = tally_of(more, mn, 0);
    check(same_tally(&t, &with));
    free(more);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size > INPUT_MAX)
        return 0;
    size_t max = data[0] == 0xff ? SIZE_MAX : data[0];
    size_t budget = data[1] == 0xff ? SIZE_MAX : (size_t)data[1] + 1;
    const char *d = (const char *)data + 2;
    size_t n = size - 2;
    check_line_read(d, n, max, budget);
    check_tally(d, n, (size_t)data[0] << 8 | data[1]);
    return 0;
}
