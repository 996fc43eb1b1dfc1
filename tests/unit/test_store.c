/* Unit tests for state/store_sqlite.c: round trips of every table, batched
 * writes, a missing directory, a corrupt database moved aside, an unusable
 * path, and a store that cannot be written. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <linux/capability.h>
#include <sqlite3.h>

/* Includes the .c to count the key comparisons of the queued writes'
 * coalescing (coalesced_writes_find_theirs_at_once). */
static unsigned long key_compares;

static int counted_strcmp(const char *a, const char *b)
{
    key_compares++;
    return strcmp(a, b);
}

#define strcmp counted_strcmp
#include "../../src/state/store_owners.c"
#include "../../src/state/store_queue.c"
#include "../../src/state/store_read.c"
#include "../../src/state/store_schema.c"
#include "../../src/state/store_sqlite.c"
#undef strcmp

#include "util/units.h"
#include "util/utf8.h"
#include "watch/store_opener.h"

#include "stderr_capture.h"

struct seen {
    int n;
    char text[4][64];
    int64_t num[4];
    double d[4];
};

static void on_contact(const char *agent, const char *host, int64_t ms, void *arg)
{
    struct seen *s = arg;
    if (s->n < 4) {
        snprintf(s->text[s->n], sizeof(s->text[0]), "%s %s", agent, host);
        s->num[s->n] = ms;
    }
    s->n++;
}

static void on_baseline(const char *agent, const struct store_baseline *b, void *arg)
{
    struct seen *s = arg;
    if (s->n < 4) {
        snprintf(s->text[s->n], sizeof(s->text[0]), "%s", agent);
        s->d[s->n] = b->req_avg + b->bytes_avg;
        s->num[s->n] = b->minute;
    }
    s->n++;
}

static void on_queue(int64_t id, const char *sink, const char *body, int attempts, void *arg)
{
    struct seen *s = arg;
    if (s->n < 4) {
        snprintf(s->text[s->n], sizeof(s->text[0]), "%s %s %d", sink, body, attempts);
        s->num[s->n] = id;
    }
    s->n++;
}

/* Takes <r> (store_queue_read_take()) as the loop's ticks would, waiting
 * between them for the writer's thread (the loop never does): its rows to
 * <fn>, its outcome into <got>. */
static int take_with(struct store *s, struct store_read *r, store_queue_fn fn, void *arg,
                     struct store_read_got *got)
{
    int rc = 1;
    for (int i = 0; i < 10000 && (rc = store_queue_read_take(s, r, fn, arg, got)) > 0; i++)
        usleep(1000);
    return rc;
}

/* Reads webhook <sink>'s oldest queue rows, at most <limit>, as the
 * gateway does (store_queue_read(): on the writer's thread), each to <fn>;
 * the sink's count of rows into <*count> when not NULL. Returns the number
 * of rows, or -1. */
static int read_queue(struct store *s, const char *sink, int limit, store_queue_fn fn, void *arg,
                      int64_t *count)
{
    struct store_read *r = store_queue_read(s, sink, limit, SIZE_MAX, false);
    assert_non_null(r);
    struct store_read_got got = {0};
    int rc = take_with(s, r, fn, arg, &got);
    assert_true(rc <= 0); /* 1: the writer never ran it (10 s) */
    if (count != NULL)
        *count = got.count;
    return rc < 0 ? -1 : got.rows;
}

/* Webhook <sink>'s count of queue rows, as /metrics shows it. */
static int64_t queue_count(struct store *s, const char *sink)
{
    int64_t n = -1;
    assert_int_equal(read_queue(s, sink, 0, on_queue, NULL, &n), 0); /* no row: no call */
    return n;
}

static void on_counter(const char *name, uint64_t v, void *arg)
{
    struct seen *s = arg;
    if (s->n < 4) {
        snprintf(s->text[s->n], sizeof(s->text[0]), "%s", name);
        s->num[s->n] = (int64_t)v;
    }
    s->n++;
}

/* SQLite's syncs of the database file (sluice.db, not its -wal), counted
 * by the thread that makes them: these definitions take the place of
 * libc's for libsqlite3 too (the executable's symbols come first), then
 * make the system call themselves. The database file is synced by
 * checkpoints only; the log's header is also synced by the writer when it
 * starts the log again after a whole checkpoint (SQLite's
 * synchronous=NORMAL), which these do not count. */
static atomic_int syncs_on_main, syncs_elsewhere;

static void count_sync(int fd)
{
    char link[64], path[4096];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n <= 0)
        return;
    path[n] = '\0';
    size_t len = (size_t)n, suffix = strlen("/" STORE_FILE);
    if (len < suffix || strcmp(path + len - suffix, "/" STORE_FILE) != 0)
        return;
    if (syscall(SYS_gettid) == getpid())
        atomic_fetch_add(&syncs_on_main, 1);
    else
        atomic_fetch_add(&syncs_elsewhere, 1);
}

int fsync(int fd)
{
    count_sync(fd);
    return (int)syscall(SYS_fsync, fd);
}

int fdatasync(int fd)
{
    count_sync(fd);
    return (int)syscall(SYS_fdatasync, fd);
}

/* The wall clock as the code under test reads it: <realtime_ahead_s>
 * ahead of the kernel's, as after the wall clock was stepped back that far
 * once a deadline was reckoned on it (NTP, date -s): a wait the kernel
 * times on the wall clock then lasts that much longer. The system's clock
 * is the machine's, not a test's to step. */
static atomic_llong realtime_ahead_s;

int clock_gettime(clockid_t clock, struct timespec *ts)
{
    int rc = (int)syscall(SYS_clock_gettime, clock, ts);
    if (rc == 0 && clock == CLOCK_REALTIME)
        ts->tv_sec += (time_t)atomic_load(&realtime_ahead_s);
    return rc;
}

/* The log's writes (SQLite's pwrite64 on sluice.db-wal): counted when the
 * test's own thread (the event loop's, in the gateway) makes one, and held
 * while the gate is closed when another thread does, as a file system that
 * does not answer holds them. */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_closed;
static int gate_held; /* writes waiting at the gate now; under gate_mu */
static atomic_int wal_writes_on_main;

static bool is_wal(int fd)
{
    char link[64], path[4096];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n <= 0)
        return false;
    path[n] = '\0';
    size_t len = (size_t)n, suffix = strlen("/" STORE_FILE "-wal");
    return len >= suffix && strcmp(path + len - suffix, "/" STORE_FILE "-wal") == 0;
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    if (is_wal(fd) && syscall(SYS_gettid) == getpid()) {
        atomic_fetch_add(&wal_writes_on_main, 1);
    } else if (is_wal(fd)) {
        pthread_mutex_lock(&gate_mu);
        gate_held++;
        pthread_cond_broadcast(&gate_cond);
        while (gate_closed)
            pthread_cond_wait(&gate_cond, &gate_mu);
        gate_held--;
        pthread_mutex_unlock(&gate_mu);
    }
    return syscall(SYS_pwrite64, fd, buf, n, off);
}

static void gate_close(void)
{
    pthread_mutex_lock(&gate_mu);
    gate_closed = true;
    pthread_mutex_unlock(&gate_mu);
}

/* Waits (a hang guard of 60 s) until a write is held at the gate. */
static void gate_wait_held(void)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_mutex_lock(&gate_mu);
    while (gate_held == 0 && pthread_cond_timedwait(&gate_cond, &gate_mu, &until) == 0)
        ;
    int held = gate_held;
    pthread_mutex_unlock(&gate_mu);
    assert_true(held > 0);
}

static void gate_open(void)
{
    pthread_mutex_lock(&gate_mu);
    gate_closed = false;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_mu);
}

static char dir[64];

/* time() is interposed for this program: while <pinned_now> is not 0, it
 * reads that second (the store names the copies it moves aside by it). */
static time_t pinned_now;

time_t time(time_t *tloc)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    time_t now = pinned_now != 0 ? pinned_now : ts.tv_sec;
    if (tloc != NULL)
        *tloc = now;
    return now;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/sluice-store-XXXXXX");
    return mkdtemp(dir) != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    pinned_now = 0; /* a test that failed with the clock held lets it go */
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* store_flush() as the loop's ticks run it, waiting (the loop never does)
 * for the writer between them: the outcome of a commit of every write
 * queued before the call. */
static int flush(struct store *s)
{
    store_writer_wait(s->writer, INT64_MAX); /* the batch it holds */
    store_flush(s);                          /* collected; the rest handed over */
    store_writer_wait(s->writer, INT64_MAX);
    return store_flush(s); /* its outcome */
}

static struct store *open_ok(const char *d)
{
    char *err = NULL, *warn = NULL;
    struct store *s = store_open(d, &err, &warn);
    assert_non_null(s);
    assert_null(err);
    assert_null(warn);
    return s;
}

/* The commits past the log's checkpoint size: the checkpoint, and with it
 * the database file's syncs, runs on the checkpointer's thread, none on
 * the thread that commits (the event loop's). */
static void checkpoints_are_off_the_commit_thread(void **state)
{
    (void)state;
    struct store *s = open_ok(dir);
    atomic_store(&syncs_on_main, 0);
    atomic_store(&syncs_elsewhere, 0);
    char host[320];
    for (int round = 0; round < 100; round++) { /* about 6 MB of rows: past 1000 pages */
        for (int i = 0; i < 200; i++) {
            snprintf(host, sizeof(host), "%0300d.h%d.test", i, round);
            assert_int_equal(store_put_contact(s, "ci", host, i), 0);
        }
        assert_int_equal(flush(s), 0);
    }
    for (int i = 0; i < 1000 && atomic_load(&syncs_elsewhere) == 0; i++)
        usleep(10 * 1000); /* at most 10 s for the thread to wake and sync */
    assert_int_equal(atomic_load(&syncs_on_main), 0);
    assert_true(atomic_load(&syncs_elsewhere) > 0);
    store_close(s);
    s = open_ok(dir); /* every row there after the close's own checkpoint */
    struct seen seen = {0};
    assert_int_equal(store_load_contacts(s, on_contact, &seen), 100 * 200);
    store_close(s);
}

static off_t wal_size(void)
{
    char wal[128];
    struct stat st;
    snprintf(wal, sizeof(wal), "%s/%s-wal", dir, STORE_FILE);
    assert_int_equal(stat(wal, &st), 0);
    return st.st_size;
}

/* A burst of writes (100,000 first contacts: one batch, one transaction)
 * grows the log past its checkpoint size, as it must: a transaction's
 * pages are not checkpointed before its commit. Once checkpointed, the
 * commit that starts the log again cuts it to STORE_WAL_LIMIT: before, the
 * log kept its size of the burst (measured: 12.9 MB, and as much after
 * 200 commits and checkpoints since) for as long as the gateway ran. The
 * commits that follow wait for the checkpointer, not for a time. */
static void the_log_shrinks_after_a_burst(void **state)
{
    (void)state;
    struct store *s = open_ok(dir);
    char host[64];
    for (int i = 0; i < 100000; i++) {
        snprintf(host, sizeof(host), "h%d.a-host-of-a-usual-length.burst.example.test", i);
        assert_int_equal(store_put_contact(s, "ci", host, i), 0);
    }
    assert_int_equal(flush(s), 0);
    assert_int_equal(store_dropped(s), 0);
    off_t burst = wal_size();
    if (burst <= 2 * STORE_WAL_LIMIT)
        fail_msg("the burst left a log of %lld bytes only", (long long)burst);
    off_t now = burst;
    for (int i = 0; i < 2000 && (now = wal_size()) > STORE_WAL_LIMIT; i++) {
        assert_int_equal(store_put_counter(s, "alerts.x", (uint64_t)i), 0);
        assert_int_equal(flush(s), 0);
        usleep(5 * 1000); /* the checkpointer's turn */
    }
    if (now > STORE_WAL_LIMIT)
        fail_msg("the log: %lld bytes after the burst, %lld after the commits since (limit %d)",
                 (long long)burst, (long long)now, STORE_WAL_LIMIT);
    store_close(s);
    s = open_ok(dir);
    struct seen seen = {0};
    assert_int_equal(store_load_contacts(s, on_contact, &seen), 100000);
    store_close(s);
}

/* The rows of webhooks no longer configured are kept up to a cap in all,
 * the newest: a sink removed (or renamed: a URL whose secret was rotated)
 * left its rows for ever. 6 rows each for the configured sink a and the
 * removed b and c, interleaved, a cap of 4: a keeps its 6, and of b's and
 * c's the newest 4 are left (2 each), the 8 older deleted. */
static void rows_of_unconfigured_sinks_are_kept_up_to_a_cap(void **state)
{
    (void)state;
    struct store *s = open_ok(dir);
    int64_t last[3] = {0};
    for (int i = 0; i < 6; i++)
        for (int k = 0; k < 3; k++)
            last[k] = store_queue_add(s, k == 0 ? "a" : k == 1 ? "b" : "c", "{}");
    assert_int_equal(flush(s), 0);
    const char *const configured[] = {"a"};
    assert_int_equal(store_trim_unconfigured(s, configured, 1, 4), 8);
    struct seen seen = {0};
    assert_int_equal(store_count_queue(s, on_counter, &seen), 3); /* sink, rows */
    assert_string_equal(seen.text[0], "a");
    assert_int_equal(seen.num[0], 6);
    assert_int_equal(seen.num[1] + seen.num[2], 4);
    assert_int_equal(seen.num[1], 2);
    memset(&seen, 0, sizeof(seen));
    assert_int_equal(read_queue(s, "c", 10, on_queue, &seen, NULL), 2);
    assert_int_equal(seen.num[1], last[2]); /* the newest of them */
    assert_int_equal(store_trim_unconfigured(s, configured, 1, 4), 0);
    assert_int_equal(store_trim_unconfigured(s, NULL, 0, 0), 10); /* none configured */
    store_close(s);
}

static void round_trip(void **state)
{
    (void)state;
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/var", dir); /* missing: created */
    struct store *s = open_ok(sub);
    assert_false(store_dirty(s));
    assert_int_equal(store_put_contact(s, "ci", "a.test", 42), 0);
    assert_int_equal(store_put_contact(s, "ci", "a.test", 43), 0); /* first one wins */
    struct store_baseline b = {.req_avg = 1.5, .bytes_avg = 2, .since_ms = 7, .minute = 9};
    assert_int_equal(store_put_baseline(s, "ci", &b), 0);
    b.minute = 10; /* coalesced with the pending one */
    assert_int_equal(store_put_baseline(s, "ci", &b), 0);
    assert_int_equal(store_put_counter(s, "alerts.x", 5), 0);
    assert_int_equal(store_put_counter(s, "alerts.x", 6), 0);
    int64_t q1 = store_queue_add(s, "sink:h/", "{\"a\":1}");
    int64_t q2 = store_queue_add(s, "sink:h/", "{\"a\":2}");
    assert_true(q1 > 0 && q2 == q1 + 1);
    assert_int_equal(store_queue_del(s, "sink:h/", q1), 0); /* in the same batch as its insert */
    assert_int_equal(store_queue_attempts(s, q2, 3), 0);
    assert_true(store_dirty(s));
    assert_int_equal(flush(s), 0);
    assert_false(store_dirty(s));
    assert_int_equal(flush(s), 0); /* nothing to do */
    store_close(s);

    s = open_ok(sub);
    struct seen seen = {0};
    assert_int_equal(store_load_contacts(s, on_contact, &seen), 1);
    assert_string_equal(seen.text[0], "ci a.test");
    assert_int_equal(seen.num[0], 42);
    memset(&seen, 0, sizeof(seen));
    assert_int_equal(store_load_baselines(s, 4096, on_baseline, &seen), 1);
    assert_int_equal(seen.num[0], 10);
    assert_true(seen.d[0] > 3.4 && seen.d[0] < 3.6);
    memset(&seen, 0, sizeof(seen));
    assert_int_equal(read_queue(s, "sink:h/", 10, on_queue, &seen, NULL), 1);
    assert_string_equal(seen.text[0], "sink:h/ {\"a\":2} 3");
    assert_int_equal(seen.num[0], q2);
    memset(&seen, 0, sizeof(seen));
    assert_int_equal(store_load_counters(s, on_counter, &seen), 1);
    assert_int_equal(seen.num[0], 6);
    /* ids keep growing across a restart */
    assert_true(store_queue_add(s, "sink:h/", "{}") > q2);
    assert_int_equal(store_dropped(s), 0);
    assert_non_null(strstr(store_shown(s), "/var/sluice.db"));
    store_close(s); /* commits on close */
    s = open_ok(sub);
    memset(&seen, 0, sizeof(seen));
    assert_int_equal(read_queue(s, "sink:h/", 10, on_queue, &seen, NULL), 2);
    store_close(s);
    store_close(NULL);
}

static void write_text(const char *path, const char *text, int times)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < times; i++)
        fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void corrupt_is_moved_aside(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, STORE_FILE);
    write_text(path, "this is not a database at all\n", 200);
    char *err = NULL, *warn = NULL;
    struct store *s = store_open(dir, &err, &warn);
    assert_non_null(s);
    assert_null(err);
    assert_non_null(warn);
    assert_non_null(strstr(warn, "corrupt"));
    assert_non_null(strstr(warn, "moved to"));
    free(warn);
    assert_int_equal(store_put_contact(s, "a", "b", 1), 0);
    assert_int_equal(flush(s), 0);
    store_close(s);
    char pat[160];
    glob_t g;
    snprintf(pat, sizeof(pat), "%s/%s.corrupt-*", dir, STORE_FILE);
    assert_int_equal(glob(pat, 0, NULL, &g), 0);
    assert_true(g.gl_pathc >= 1);
    globfree(&g);
}

/* The rollback journal a corrupt store left follows it aside, as its -wal
 * and -shm do: the copy is the store as it was, journal included. Left
 * behind, it was the new store's to find: SQLite, opening the new (empty)
 * sluice.db, deleted it as a stray, so the copy lost it. */
static void a_corrupt_store_s_journal_follows_it_aside(void **state)
{
    (void)state;
    char path[128], journal[160];
    snprintf(path, sizeof(path), "%s/%s", dir, STORE_FILE);
    snprintf(journal, sizeof(journal), "%s-journal", path);
    write_text(path, "this is not a database at all\n", 200);
    /* its header zeroed, as journal_mode=PERSIST leaves one: not hot, so
     * the corrupt store's open leaves it (a hot one it plays back) */
    FILE *f = fopen(journal, "w");
    assert_non_null(f);
    assert_int_equal(fwrite("\0\0\0\0the corrupt store's journal", 1, 32, f), 32);
    assert_int_equal(fclose(f), 0);
    char *err = NULL, *warn = NULL;
    struct store *s = store_open(dir, &err, &warn);
    assert_non_null(s);
    assert_null(err);
    assert_non_null(warn);
    free(warn);
    store_close(s);
    char pat[160];
    glob_t g;
    snprintf(pat, sizeof(pat), "%s.corrupt-*-journal", path);
    int found = glob(pat, 0, NULL, &g);
    if (found != 0)
        fail_msg("no %s (left behind: %s)", pat, access(journal, F_OK) == 0 ? "yes" : "deleted");
    assert_int_equal(g.gl_pathc, 1);
    char buf[40] = "";
    assert_non_null(f = fopen(g.gl_pathv[0], "r"));
    assert_int_equal(fread(buf, 1, sizeof(buf), f), 32);
    fclose(f);
    assert_memory_equal(buf, "\0\0\0\0the corrupt store's journal", 32);
    globfree(&g);
    assert_int_equal(access(journal, F_OK), -1);
}

/* A store SQLite opens but PRAGMA quick_check finds broken (a page's
 * cell count overwritten) is moved aside with quick_check's own finding
 * as the reason: it said "another row available", SQLite's word for the
 * row the check returned, which tells the operator nothing. */
static void a_store_failing_its_check_says_what_the_check_found(void **state)
{
    (void)state;
    struct store *s = open_ok(dir);
    assert_int_equal(store_put_contact(s, "a", "b", 1), 0);
    assert_int_equal(flush(s), 0);
    store_close(s); /* checkpointed into sluice.db, the log removed */
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, STORE_FILE);
    sqlite3 *db;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT rootpage, (SELECT page_size FROM "
                                        "pragma_page_size) FROM sqlite_master WHERE name = "
                                        "'first_contact'",
                                        -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    long page = sqlite3_column_int64(st, 0), size = sqlite3_column_int64(st, 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    /* the b-tree page header's cell count (bytes 3 and 4): 5 cells */
    assert_int_equal(fseek(f, (page - 1) * size + 3, SEEK_SET), 0);
    assert_int_equal(fwrite("\x00\x05", 1, 2, f), 2);
    assert_int_equal(fclose(f), 0);
    char *err = NULL, *warn = NULL;
    s = store_open(dir, &err, &warn);
    assert_non_null(s);
    assert_null(err);
    assert_non_null(warn);
    if (strstr(warn, "corrupt (PRAGMA quick_check: *** in database main ***") == NULL)
        fail_msg("the warning: %s", warn);
    assert_null(strstr(warn, "another row available"));
    free(warn);
    store_close(s);
}

/* Whether the file at <path> starts with <text>. */
static bool starts_with_text(const char *path, const char *text)
{
    char buf[64] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strncmp(buf, text, strlen(text)) == 0;
}

/* Stores found corrupt in the same second (a gateway restarted in a loop)
 * each keep their copy: both were moved to sluice.db.corrupt-<unix time>,
 * the second rename replacing the first. The store's clock is held at one
 * second for both (time() interposed), whose name is taken beforehand: the
 * moves meet taken names however long they take (the names of ten seconds
 * taken from the test's clock held only while the moves ran within them). */
static void corrupt_stores_moved_aside_in_one_second_are_kept(void **state)
{
    (void)state;
    char path[128], aside[160];
    snprintf(path, sizeof(path), "%s/%s", dir, STORE_FILE);
    pinned_now = 1700000000;
    snprintf(aside, sizeof(aside), "%s.corrupt-%ld", path, (long)pinned_now);
    write_text(aside, "an earlier copy\n", 1);
    for (int round = 0; round < 2; round++) {
        write_text(path, round == 0 ? "not a database, the first\n" : "not a database, again\n",
                   200);
        char *err = NULL, *warn = NULL;
        struct store *s = store_open(dir, &err, &warn);
        assert_non_null(s);
        assert_null(err);
        assert_non_null(warn);
        assert_null(strstr(warn, "could not move"));
        free(warn);
        store_close(s);
    }
    pinned_now = 0;
    char pat[160];
    glob_t g;
    snprintf(pat, sizeof(pat), "%s.corrupt-*", path);
    assert_int_equal(glob(pat, 0, NULL, &g), 0);
    assert_int_equal(g.gl_pathc, 3);
    globfree(&g);
    /* each under the next free name of that second */
    assert_true(starts_with_text(aside, "an earlier copy"));
    snprintf(aside, sizeof(aside), "%s.corrupt-1700000000.1", path);
    assert_true(starts_with_text(aside, "not a database, the first"));
    snprintf(aside, sizeof(aside), "%s.corrupt-1700000000.2", path);
    assert_true(starts_with_text(aside, "not a database, again"));
}

static sqlite3 *other_connection(const char *sql);
static char *query_text(const char *sql);

/* A store whose meta says another schema (a newer sluice's, its queue with
 * a column this one does not fill) is not used, nor moved aside: before,
 * it was opened as schema 1 and every commit then failed ("NOT NULL
 * constraint failed"), the writes piling up until they were dropped. */
static void another_schema_is_not_used(void **state)
{
    (void)state;
    store_close(open_ok(dir));
    sqlite3 *db =
        other_connection("UPDATE meta SET value = '2' WHERE key = 'schema';"
                         "ALTER TABLE alert_queue ADD COLUMN origin TEXT NOT NULL DEFAULT '';"
                         "INSERT INTO first_contact VALUES('a', 'h', 1);");
    sqlite3_close(db);
    char *err = NULL, *warn = NULL;
    assert_null(store_open(dir, &err, &warn));
    assert_null(warn);
    assert_non_null(err);
    assert_non_null(strstr(err, "schema 2"));
    assert_non_null(strstr(err, "this sluice knows schema 1"));
    free(err);
    /* left as it was: still schema 2, its row there, nothing moved aside */
    char *v = query_text("SELECT (SELECT value FROM meta WHERE key = 'schema') || ' ' ||"
                         " (SELECT count(*) FROM first_contact)");
    assert_string_equal(v, "2 1");
    free(v);
    char pat[160];
    glob_t g;
    snprintf(pat, sizeof(pat), "%s/%s.corrupt-*", dir, STORE_FILE);
    assert_int_equal(glob(pat, 0, NULL, &g), GLOB_NOMATCH);
    /* schema 1 again: used */
    sqlite3_close(other_connection("UPDATE meta SET value = '1' WHERE key = 'schema'"));
    store_close(open_ok(dir));

    /* meta under a name of other case is meta (SQLite's names are
     * case-blind): its schema is read, where it was taken for none (a new
     * store) and the store failed on writing schema 1 into it */
    sqlite3_close(other_connection("CREATE TABLE Meta2(key TEXT PRIMARY KEY, value TEXT);"
                                   "INSERT INTO Meta2 SELECT key, '2' FROM meta;"
                                   "DROP TABLE meta; ALTER TABLE Meta2 RENAME TO Meta"));
    err = NULL;
    warn = NULL;
    assert_null(store_open(dir, &err, &warn));
    assert_non_null(err);
    assert_non_null(strstr(err, "schema 2"));
    free(err);
}

/* A store whose queue's last id cannot be read is not used: the next
 * alert's id would start at 1 again, and INSERT OR REPLACE would write
 * the new alerts over the ones stored. The read is made to fail with a
 * view in the queue's place whose rows cannot be computed (an integer
 * overflow), as an I/O error or a lost lock would make it fail. */
static void a_queue_whose_last_id_cannot_be_read_is_not_used(void **state)
{
    (void)state;
    store_close(open_ok(dir));
    /* read_next_qid() on a connection of its own: store_open() refuses the
     * view before (a_view_in_place_of_a_table_is_not_used) */
    struct store s = {
        .db = other_connection("DROP TABLE alert_queue;"
                               "CREATE VIEW alert_queue(id, sink, body, attempts, created_ms)"
                               " AS SELECT abs(-9223372036854775807 - 1), '', '', 0, 0"
                               " FROM meta;")};
    char *why = NULL;
    assert_int_not_equal(read_next_qid(&s, &why), SQLITE_OK);
    assert_non_null(why);
    assert_non_null(strstr(why, "cannot read the alert queue"));
    assert_non_null(strstr(why, "integer overflow"));
    free(why);
    sqlite3_close(s.db);
}

/* A view in the place of one of sluice's tables is not used: CREATE TABLE
 * IF NOT EXISTS took it for the table, and the store was used, every
 * commit failing ("cannot modify first_contact because it is a view") until
 * its writes were dropped. */
static void a_view_in_place_of_a_table_is_not_used(void **state)
{
    (void)state;
    store_close(open_ok(dir));
    sqlite3_close(other_connection("DROP TABLE first_contact;"
                                   "CREATE VIEW First_Contact(agent, host, first_ms)"
                                   " AS SELECT 'a', 'h', 1"));
    char *err = NULL, *warn = NULL;
    assert_null(store_open(dir, &err, &warn));
    assert_null(warn);
    assert_non_null(err);
    assert_non_null(strstr(err, "first_contact is a view, not a table"));
    free(err);
}

/* The queue ids a store hands out are above 0 and above the highest
 * stored, whatever ids a store edited by hand holds: one whose highest id
 * was negative handed out ids from there, and the webhook takes an id of 0
 * or less for an alert not in the store: it never deleted the row written
 * under it (nor is such a row read back: the queue is read from id 1), and
 * a stop counted the alert as lost; one whose highest id was the largest
 * SQLite holds overflowed the next. Such a store is not used; a negative
 * one starts its ids at 1. */
static void queue_ids_stay_positive_whatever_the_store_holds(void **state)
{
    (void)state;
    store_close(open_ok(dir));
    sqlite3_close(other_connection("INSERT INTO alert_queue VALUES(-5, 's', 'b', 0, 0)"));
    struct store *s = open_ok(dir);
    assert_int_equal(store_queue_add(s, "s", "x"), 1);
    store_close(s);

    sqlite3_close(
        other_connection("INSERT INTO alert_queue VALUES(9223372036854775807, 's', 'b', 0, 0)"));
    char *err = NULL, *warn = NULL;
    assert_null(store_open(dir, &err, &warn));
    assert_null(warn);
    assert_non_null(err);
    assert_non_null(strstr(err, "no queue ids are left"));
    free(err);
}

/* A directory every user can write (a sticky one too, such as /tmp) is not
 * used: any user could put a store of their own there (first contacts that
 * keep an agent's alerts quiet), a symbolic link in place of sluice.db (a
 * gateway started as root then creates its files where that points), or
 * take sluice.lock first. */
static void a_world_writable_directory_is_not_used(void **state)
{
    (void)state;
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/shared", dir);
    static const mode_t modes[] = {0777, 01777, 0757};
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        assert_int_equal(mkdir(sub, 0700), 0);
        assert_int_equal(chmod(sub, modes[i]), 0);
        char *err = NULL, *warn = NULL;
        assert_null(store_open(sub, &err, &warn));
        assert_non_null(err);
        assert_non_null(strstr(err, "writable by every user"));
        free(err);
        char path[160];
        snprintf(path, sizeof(path), "%s/%s", sub, STORE_FILE);
        assert_int_equal(access(path, F_OK), -1); /* nothing made there */
        snprintf(path, sizeof(path), "%s/sluice.lock", sub);
        assert_int_equal(access(path, F_OK), -1);
        assert_int_equal(rmdir(sub), 0);
    }
    /* group-writable, or the owner's alone: used */
    assert_int_equal(mkdir(sub, 0700), 0);
    assert_int_equal(chmod(sub, 0770), 0);
    store_close(open_ok(sub));
}

#define OTHER_UID 65534 /* nobody: a user other than the test's (root) */

/* store_open_as() fails for <d>, its message holding <a> and <b>, and
 * makes nothing in <d>. */
static void refused(const char *d, uid_t user, const char *a, const char *b)
{
    char path[200];
    snprintf(path, sizeof(path), "%s/sluice.lock", d);
    int before = access(path, F_OK);
    char *err = NULL, *warn = NULL;
    assert_null(store_open_as(d, user, &err, &warn));
    assert_non_null(err);
    if (strstr(err, a) == NULL || strstr(err, b) == NULL)
        fail_msg("'%s' lacks '%s' or '%s'", err, a, b);
    free(err);
    assert_int_equal(access(path, F_OK), before);
}

/* store_open_as() opens the store in <d> for --user <user>, without a word. */
static void used_as(const char *d, uid_t user)
{
    char *err = NULL, *warn = NULL;
    struct store *s = store_open_as(d, user, &err, &warn);
    assert_non_null(s);
    assert_null(err);
    assert_null(warn);
    store_close(s);
}

/* A state directory another user owns is not used, as one writable by
 * every user is not: that user could put a store of their own in it (a root
 * gateway given --state /tmp/x that user made beforehand); before, it was
 * used. One the --user user owns is used. Ownership is simulated with
 * chown, so the test needs root. */
static void a_directory_another_user_owns_is_not_used(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/theirs", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(chown(sub, OTHER_UID, OTHER_UID), 0);
    refused(sub, 0, "the state directory is owned by ", "(uid 65534)");
    used_as(sub, OTHER_UID); /* the user the gateway serves as may own it */
    assert_int_equal(chown(sub, 0, 0), 0);
    /* the store's files, another user's: not used either */
    static const char *const files[] = {"sluice.db", "sluice.db-wal", "sluice.db-shm",
                                        "sluice.lock"};
    for (size_t k = 0; k < sizeof(files) / sizeof(files[0]); k++) {
        char path[200];
        snprintf(path, sizeof(path), "%s/%s", sub, files[k]);
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        close(fd);
        assert_int_equal(chown(path, OTHER_UID, OTHER_UID), 0);
        refused(sub, 0, path, "(uid 65534), not by root");
        assert_int_equal(chown(path, 0, 0), 0);
        assert_int_equal(chmod(path, 0666), 0);
        refused(sub, OTHER_UID, path, ": writable by every user (mode 0666)");
        assert_int_equal(unlink(path), 0);
    }
    /* a store of the --user user's: used */
    store_close(open_ok(sub));
    char db[200];
    snprintf(db, sizeof(db), "%s/%s", sub, STORE_FILE);
    assert_int_equal(chown(db, OTHER_UID, OTHER_UID), 0);
    used_as(sub, OTHER_UID);
    refused(sub, 0, db, "(uid 65534), not by root");
}

/* A directory on the way to the state directory that another user owns,
 * or that every user may write without the sticky bit, lets that user move
 * the state directory away and put one of theirs in its place: not used.
 * Under a sticky one (/tmp) it is. */
static void a_parent_another_user_controls_is_not_used(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    char parent[128], sub[160];
    snprintf(parent, sizeof(parent), "%s/p", dir);
    snprintf(sub, sizeof(sub), "%s/state", parent);
    assert_int_equal(mkdir(parent, 0755), 0);
    assert_int_equal(mkdir(sub, 0750), 0);
    assert_int_equal(chmod(parent, 0777), 0);
    refused(sub, 0, "/p, on the way to the state directory, is writable by every user (mode 0777)",
            "without the sticky bit");
    assert_int_equal(chmod(parent, 01777), 0);
    store_close(open_ok(sub));
    assert_int_equal(chmod(parent, 0755), 0);
    assert_int_equal(chown(parent, OTHER_UID, OTHER_UID), 0);
    refused(sub, 0, "/p, on the way to the state directory, is owned by ", "move");
    used_as(sub, OTHER_UID);
    assert_int_equal(chown(parent, 0, 0), 0);
}

/* Makes <levels> folders below <top>, each named with 60 'é' (120 bytes of
 * UTF-8), into <out>; the last one gets <mode>. */
static void deep_folders(const char *top, int levels, mode_t mode, char *out, size_t outlen)
{
    char name[121];
    for (int i = 0; i < 60; i++)
        memcpy(name + 2 * i, "\xc3\xa9", 2);
    name[120] = '\0';
    snprintf(out, outlen, "%s", top);
    for (int i = 0; i < levels; i++) {
        size_t n = strlen(out);
        assert_true(n + 1 + strlen(name) < outlen);
        snprintf(out + n, outlen - n, "/%s", name);
        assert_int_equal(mkdir(out, 0755), 0);
    }
    assert_int_equal(chmod(out, mode), 0);
}

/* <err> is whole UTF-8, says <start> first and ends with <remedy>. */
static void said_whole(const char *err, const char *start, const char *remedy)
{
    size_t n = strlen(err), r = strlen(remedy);
    if (!utf8_valid((const unsigned char *)err, n) || strncmp(err, start, strlen(start)) != 0 ||
        n < r || strcmp(err + n - r, remedy) != 0)
        fail_msg("'%s' (%zu bytes) is cut: it should start '%s' and end '%s'", err, n, start,
                 remedy);
}

/* The store's messages were cut at 1024 bytes (msg()'s buffer): a state
 * directory with a long path lost the remedy at the message's end, and
 * the cut could fall within a UTF-8 sequence. A message now holds the
 * whole of a path up to the bound serve's standard error takes whole
 * (PIPE_BUF, with serve's words around it); past it, the middle goes,
 * "..." in its place, never within a UTF-8 sequence. */
static void long_paths_keep_the_remedy(void **state)
{
    (void)state;
    char deep[2048], link[128], *err = NULL, *warn = NULL;
    /* 12 levels: about 1.5 KB, the path said once */
    deep_folders(dir, 12, 0777, deep, sizeof(deep));
    assert_null(store_open(deep, &err, &warn));
    assert_non_null(err);
    said_whole(err, deep,
               ": another user could put a store of their own or a symbolic link "
               "there; use a directory of sluice's own");
    assert_null(strstr(err, "..."));
    free(err);
    /* reached through a link, a parent every user may write: the path
     * three times, about 4.5 KB, past the bound */
    assert_int_equal(chmod(deep, 0755), 0);
    char *cut = strrchr(deep, '/');
    *cut = '\0';
    assert_int_equal(chmod(deep, 0777), 0);
    *cut = '/';
    snprintf(link, sizeof(link), "%s/link", dir);
    assert_int_equal(symlink(deep, link), 0);
    err = NULL;
    assert_null(store_open(link, &err, &warn));
    assert_non_null(err);
    char start[256];
    snprintf(start, sizeof(start), "%s (resolved: %s", link, dir);
    said_whole(err, start,
               "without the sticky bit: any user could move the state directory away "
               "and put one of their own in its place; use a state directory whose "
               "every parent is root's or the gateway's");
    assert_non_null(strstr(err, "..."));
    assert_true(strlen(err) <= 3072);
    free(err);
}

static void unusable_paths(void **state)
{
    (void)state;
    char *err = NULL, *warn = NULL;
    char file[128];
    assert_null(store_open("", &err, &warn));
    assert_non_null(err);
    free(err);
    assert_null(store_open(NULL, &err, &warn));
    free(err);
    snprintf(file, sizeof(file), "%s/plain", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    assert_null(store_open(file, &err, &warn)); /* not a directory */
    assert_non_null(strstr(err, "not a directory"));
    free(err);
    char deep[160];
    snprintf(deep, sizeof(deep), "%s/no/such/parent", dir);
    assert_null(store_open(deep, &err, &warn));
    assert_non_null(strstr(err, "cannot create"));
    free(err);
}

/* A second connection to the store in <dir>, as another process would
 * open it (the sqlite3 shell, a backup), after running <sql> on it. */
static sqlite3 *other_connection(const char *sql)
{
    char path[128];
    sqlite3 *db;
    snprintf(path, sizeof(path), "%s/%s", dir, STORE_FILE);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    return db;
}

/* The first column of the first row <sql> gives, as text, read through a
 * connection of its own; the caller frees it. */
static char *query_text(const char *sql)
{
    sqlite3 *db = other_connection("SELECT 1");
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    const char *t = (const char *)sqlite3_column_text(st, 0);
    assert_non_null(t);
    char *v = strdup(t);
    assert_non_null(v);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* The default VFS, wrapped to count its sleeps: SQLite's busy handler
 * waits for a lock in xSleep() calls, so none is a lock not waited for. */
static sqlite3_vfs *real_vfs;
static sqlite3_vfs sleep_counting_vfs;
static atomic_int vfs_sleeps;

static int counted_sleep(sqlite3_vfs *vfs, int us)
{
    (void)vfs;
    atomic_fetch_add(&vfs_sleeps, 1);
    return real_vfs->xSleep(real_vfs, us);
}

/* Makes the wrapper the default VFS (<on>), or the real one again. */
static void count_vfs_sleeps(bool on)
{
    if (on) {
        real_vfs = sqlite3_vfs_find(NULL);
        assert_non_null(real_vfs);
        sleep_counting_vfs = *real_vfs;
        sleep_counting_vfs.zName = "sleep-counting";
        sleep_counting_vfs.xSleep = counted_sleep;
        assert_int_equal(sqlite3_vfs_register(&sleep_counting_vfs, 1), SQLITE_OK);
    } else {
        assert_int_equal(sqlite3_vfs_register(real_vfs, 1), SQLITE_OK);
        assert_int_equal(sqlite3_vfs_unregister(&sleep_counting_vfs), SQLITE_OK);
    }
}

static void write_failure_keeps_writes(void **state)
{
    (void)state;
    count_vfs_sleeps(true); /* before the store's connections open */
    struct store *s = open_ok(dir);
    /* another connection holds the write lock: the commit fails and the
     * writes stay queued; once the lock goes they are committed */
    sqlite3 *db = other_connection("BEGIN EXCLUSIVE");
    assert_int_equal(store_put_contact(s, "a", "b", 1), 0);
    /* From the loop, a flush does not wait for the lock (SQLite's busy
     * handler would sleep 200 ms in all): it fails at once, no sleep, and
     * is tried again on the next tick. (Timed, under 150 ms, it failed
     * whenever the writer's thread waited that long for a core.) */
    atomic_store(&vfs_sleeps, 0);
    assert_int_equal(flush(s), -1);
    assert_int_equal(atomic_load(&vfs_sleeps), 0);
    assert_true(store_dirty(s));
    assert_int_equal(flush(s), -1); /* reported once, still kept */
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(flush(s), 0);
    assert_false(store_dirty(s));
    sqlite3_close(db);
    struct seen seen = {0};
    assert_int_equal(store_load_contacts(s, on_contact, &seen), 1);
    store_close(s);
    count_vfs_sleeps(false);
}

/* A store opened while another process holds the write lock (the sqlite3
 * shell, a backup) is opened all the same: what it holds is read, and its
 * writes wait for the lock like those of a store opened before it. */
static void opened_while_another_process_writes(void **state)
{
    (void)state;
    struct store *s = open_ok(dir);
    assert_int_equal(store_put_contact(s, "a", "b", 1), 0);
    store_close(s);
    sqlite3 *db = other_connection("BEGIN EXCLUSIVE");
    s = open_ok(dir);
    struct seen seen = {0};
    assert_int_equal(store_load_contacts(s, on_contact, &seen), 1);
    assert_string_equal(seen.text[0], "a b");
    assert_int_equal(store_put_contact(s, "a", "c", 2), 0);
    assert_int_equal(flush(s), -1); /* locked: kept for the next tick */
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(flush(s), 0);
    seen.n = 0;
    assert_int_equal(store_load_contacts(s, on_contact, &seen), 2);
    store_close(s);
}

static void on_contact_count(const char *agent, const char *host, int64_t ms, void *arg)
{
    (void)agent;
    (void)ms;
    int *n = arg;
    if (strcmp(host, "h0") == 0 || strcmp(host, "h9998") == 0)
        *n += 1000000; /* one of the oldest tenth, which had to go */
    (*n)++;
}

/* A store that stays locked past STORE_PENDING_MAX writes drops the oldest
 * tenth at once (not one write per new write, each moving the whole queue),
 * counts them, and commits the rest once the lock goes. */
static void over_the_cap_the_oldest_tenth_goes(void **state)
{
    (void)state;
    struct store *s = open_ok(dir);
    char host[32];
    sqlite3 *db = other_connection("BEGIN EXCLUSIVE");
    int64_t lost = store_queue_add(s, "sink:127.0.0.1:9/h", "{}"); /* the oldest write */
    assert_true(lost > 0);
    for (int i = 0; i < STORE_PENDING_MAX; i++) {
        snprintf(host, sizeof(host), "h%d", i);
        assert_int_equal(store_put_contact(s, "a", host, 1), 0);
    }
    assert_int_equal(store_dropped(s), STORE_PENDING_MAX / 10);
    assert_int_equal(store_pending(s), STORE_PENDING_MAX - STORE_PENDING_MAX / 10 + 1);
    assert_true(store_queue_lost(s, lost)); /* its queue row was among them */
    int64_t kept = store_queue_add(s, "sink:127.0.0.1:9/h", "{}");
    assert_false(store_queue_lost(s, kept));
    assert_int_equal(flush(s), -1); /* locked: tried again at the next call */
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(flush(s), 0);
    sqlite3_close(db);
    int n = 0;
    assert_int_equal(store_load_contacts(s, on_contact_count, &n),
                     STORE_PENDING_MAX - STORE_PENDING_MAX / 10 + 1);
    assert_int_equal(n, STORE_PENDING_MAX - STORE_PENDING_MAX / 10 + 1);
    store_close(s);
}

/* Alerts of many KiB (an alert line is up to 8 KiB) against a store that
 * stays locked: far fewer than STORE_PENDING_MAX writes hold hundreds of
 * MiB, so the text they hold is capped too. Past STORE_PENDING_BYTES the
 * oldest go, counted, the newest is kept, and the rest commit once the
 * lock goes. */
static void over_the_bytes_cap_the_oldest_go(void **state)
{
    (void)state;
    struct store *s = open_ok(dir);
    const char *sink = "sink:127.0.0.1:9/h";
    size_t len = 8000;
    char *body = malloc(len + 1);
    assert_non_null(body);
    memset(body, 'x', len);
    body[len] = '\0';
    sqlite3 *db = other_connection("BEGIN EXCLUSIVE");
    int64_t first = store_queue_add(s, sink, body);
    assert_true(first > 0);
    /* twice the cap's worth: without a cap, every one of them waits */
    size_t n = 2 * (size_t)STORE_PENDING_BYTES / len;
    int64_t last = 0;
    for (size_t i = 0; i < n; i++) {
        last = store_queue_add(s, sink, body);
        assert_true(last > 0);
        assert_true(store_pending_bytes(s) <= STORE_PENDING_BYTES);
    }
    assert_true(store_dropped(s) > 0);
    assert_true(store_pending(s) < n);
    assert_true(store_queue_lost(s, first));
    assert_false(store_queue_lost(s, last));
    size_t kept = store_pending(s);
    assert_int_equal(store_dropped(s) + kept, n + 1);
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(flush(s), 0);
    sqlite3_close(db);
    assert_int_equal(store_pending_bytes(s), 0);
    assert_int_equal(queue_count(s, sink), (int64_t)kept);
    free(body);
    store_close(s);
}

/* A commit that fails after it began (here a trigger stands in for a full
 * disk: every queued write ran, then all rolled back) is not redone at each
 * tick: the next try waits 1 s, doubling. */
static void a_commit_failing_past_the_lock_backs_off(void **state)
{
    (void)state;
    struct store *s = open_ok(dir);
    sqlite3 *db = other_connection("CREATE TRIGGER full BEFORE INSERT ON first_contact "
                                   "BEGIN SELECT RAISE(ABORT, 'disk full (test)'); END");
    assert_int_equal(store_put_contact(s, "a", "b", 1), 0);
    assert_int_equal(flush(s), -1);
    assert_int_equal(sqlite3_exec(db, "DROP TRIGGER full", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(flush(s), -1); /* not tried: the backoff runs */
    assert_int_equal(store_pending(s), 1);
    struct timespec pause = {1, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
    assert_int_equal(flush(s), 0);
    assert_false(store_dirty(s));
    store_close(s);
}

/* Root writes any file whatever its mode (CAP_DAC_OVERRIDE): to see what a
 * gateway running as a user sees, the test's thread sets those
 * capabilities aside while it opens a store, and takes them back after
 * (they stay in its permitted set). Not root: nothing to set aside. */
static void dac_override(bool on)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0)
        return;
    uint32_t bits = (1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH);
    d[0].effective = on ? d[0].effective | (bits & d[0].permitted) : d[0].effective & ~bits;
    assert_int_equal(syscall(SYS_capset, &h, d), 0);
}

static struct store *open_as_a_user(char **err, char **warn)
{
    dac_override(false);
    struct store *s = store_open(dir, err, warn);
    dac_override(true);
    return s;
}

/* A store sluice cannot write (sluice.db mode 0444, or a read-only
 * directory) is reported at open, and serve runs with memory only: SQLite
 * opens such a file read-only without a word, and before, the store was
 * used until its first commit failed, every write then kept for retry
 * until dropped. */
static void a_read_only_store_is_not_used(void **state)
{
    (void)state;
    char path[128], *err = NULL, *warn = NULL;
    snprintf(path, sizeof(path), "%s/%s", dir, STORE_FILE);
    struct store *s = open_ok(dir);
    assert_int_equal(store_put_contact(s, "a", "b", 1), 0);
    store_close(s);
    assert_int_equal(chmod(path, 0444), 0);
    s = open_as_a_user(&err, &warn);
    assert_null(s);
    assert_null(warn);
    assert_non_null(err);
    assert_non_null(strstr(err, "cannot open the state store"));
    assert_non_null(strstr(err, "read-only"));
    free(err);
    /* a directory sluice cannot write: no write-ahead log can be made */
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(chmod(dir, 0555), 0);
    s = open_as_a_user(&err, &warn);
    assert_int_equal(chmod(dir, 0700), 0);
    assert_null(s);
    assert_non_null(err);
    assert_non_null(strstr(err, "cannot open the state store"));
    free(err);
    /* writable again: used, its row still there */
    s = open_ok(dir);
    struct seen seen = {0};
    assert_int_equal(store_load_contacts(s, on_contact, &seen), 1);
    store_close(s);
}

/* A FIFO in place of sluice.db-wal, a directory in place of sluice.db-shm:
 * SQLite opened the store all the same, and then failed every commit of
 * the run ("disk I/O error (Illegal seek)", "attempt to write a readonly
 * database"), the writes kept until dropped or lost at exit. Said at the
 * open, as for a store that cannot be written. */
static void a_store_file_that_is_not_a_regular_file_is_not_used(void **state)
{
    (void)state;
    static const struct {
        const char *file, *kind;
        bool fifo;
    } odd[] = {{STORE_FILE "-wal", "(a FIFO)", true}, {STORE_FILE "-shm", "(a directory)", false}};
    char path[128], *err = NULL, *warn = NULL;
    struct store *s = open_ok(dir);
    assert_int_equal(store_put_contact(s, "a", "b", 1), 0);
    store_close(s);
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, odd[i].file);
        unlink(path);
        assert_int_equal(odd[i].fifo ? mkfifo(path, 0640) : mkdir(path, 0750), 0);
        s = store_open(dir, &err, &warn);
        if (s != NULL) /* as before: say what its commit does */
            fail_msg("opened with %s %s; store_put_contact + store_sync: %d", odd[i].file,
                     odd[i].kind, store_put_contact(s, "a", "c", 2) == 0 ? store_sync(s) : -2);
        assert_null(warn);
        assert_non_null(err);
        assert_non_null(strstr(err, odd[i].file));
        assert_non_null(strstr(err, "not a regular file"));
        assert_non_null(strstr(err, odd[i].kind));
        free(err);
        assert_int_equal(odd[i].fifo ? unlink(path) : rmdir(path), 0);
    }
    /* gone: used, its row still there */
    s = open_ok(dir);
    struct seen seen = {0};
    assert_int_equal(store_load_contacts(s, on_contact, &seen), 1);
    store_close(s);
}

/* A counter past INT64_MAX (one a store edited by hand started near it):
 * SQLite's integers are signed, and the value was stored as a negative
 * one, read back as 0 at the next start. Stored as INT64_MAX, the most a
 * row holds. */
static void a_counter_past_what_sqlite_holds_is_kept_at_its_most(void **state)
{
    (void)state;
    struct store *s = open_ok(dir);
    assert_int_equal(store_put_counter(s, "alerts.first_contact", (uint64_t)INT64_MAX + 1), 0);
    store_close(s);
    s = open_ok(dir);
    struct seen seen = {0};
    assert_int_equal(store_load_counters(s, on_counter, &seen), 1);
    assert_int_equal(seen.num[0], INT64_MAX);
    store_close(s);
}

/* A store that cannot be opened for want of room (a full disk, here a
 * RLIMIT_FSIZE below the 32 KiB of its shared memory file) said "disk I/O
 * error", SQLite's word for any failed system call: the reason, the
 * system's error, is said too. */
static void a_store_without_room_says_why(void **state)
{
    (void)state;
    struct store *s = open_ok(dir);
    assert_int_equal(store_put_contact(s, "a", "b", 1), 0);
    store_close(s);
    struct rlimit old, low;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    low = old;
    low.rlim_cur = 16384;
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &low), 0);
    char *err = NULL, *warn = NULL;
    s = store_open(dir, &err, &warn);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, was);
    assert_null(s);
    assert_null(warn);
    assert_non_null(err);
    assert_non_null(strstr(err, "cannot open the state store"));
    assert_non_null(strstr(err, strerror(EFBIG)));
    free(err);
    /* room again: used, its row still there */
    s = open_ok(dir);
    struct seen seen = {0};
    assert_int_equal(store_load_contacts(s, on_contact, &seen), 1);
    store_close(s);
}

/* Flushes <s> with RLIMIT_FSIZE at the size of its log, which then
 * cannot grow (SIGXFSZ ignored meanwhile), standard error into <said> (<n>
 * bytes); returns flush()'s. */
static int flush_without_room(struct store *s, char *said, size_t n)
{
    char wal[128];
    snprintf(wal, sizeof(wal), "%s/sluice.db-wal", dir);
    struct stat st;
    assert_int_equal(stat(wal, &st), 0);
    struct rlimit old, low;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    low = old;
    low.rlim_cur = (rlim_t)st.st_size;
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &low), 0);
    struct stderr_capture capture;
    stderr_capture_begin(&capture);
    int rc = flush(s);
    stderr_capture_end(&capture, said, n);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, was);
    return rc;
}

/* Flushes <s> once a failed commit's backoff (1 s) has run. */
static int flush_after_backoff(struct store *s)
{
    struct timespec pause = {1, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
    return flush(s);
}

/* A commit that fails in a system call says which (docs/SPEC.md: "where
 * a system call failed, the message ends with the system's error after
 * SQLite's"): a log past RLIMIT_FSIZE, as a full disk, was told as a bare
 * "disk I/O error", which leaves the operator to guess. */
static void a_commit_without_room_says_why(void **state)
{
    (void)state;
    struct store *s = open_ok(dir);
    assert_int_equal(store_put_contact(s, "a", "b", 1), 0);
    assert_int_equal(flush(s), 0);
    static char host[20000];
    memset(host, 'h', sizeof(host) - 1);
    assert_int_equal(store_put_contact(s, "a", host, 2), 0);
    char said[4096];
    int rc = flush_without_room(s, said, sizeof(said));
    assert_int_equal(rc, -1);
    char want[128];
    snprintf(want, sizeof(want), "cannot write: disk I/O error (%s)", strerror(EFBIG));
    if (strstr(said, want) == NULL)
        fail_msg("standard error said: %s", said);
    /* room again: the kept write goes, once the backoff has run */
    assert_int_equal(flush_after_backoff(s), 0);
    struct seen seen = {0};
    assert_int_equal(store_load_contacts(s, on_contact, &seen), 2);
    store_close(s);
}

/* The default VFS, wrapped so that, while armed, each read that succeeds
 * leaves errno at ENOENT (as any successful call may leave what an earlier
 * one failed with) and each write fails with an I/O error of no system
 * call: SQLite's "disk I/O error" and an errno no failed call set. */
static sqlite3_vfs *stale_real_vfs;
static sqlite3_vfs stale_errno_vfs;
/* The real methods of each kind of file (the database's, its log's, a
 * temporary one's may differ), each with its copy, xRead and xWrite ours. */
enum { STALE_KINDS = 4 };
static const sqlite3_io_methods *stale_real_methods[STALE_KINDS];
static sqlite3_io_methods stale_methods[STALE_KINDS];
static atomic_bool stale_armed;
static atomic_int stale_reads; /* the reads that left ENOENT while armed */

/* The real methods of <f>, whose methods are one of our copies. */
static const sqlite3_io_methods *stale_real(sqlite3_file *f)
{
    return stale_real_methods[f->pMethods - stale_methods];
}

static int stale_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off)
{
    int rc = stale_real(f)->xRead(f, buf, n, off);
    if (rc == SQLITE_OK && atomic_load(&stale_armed)) {
        errno = ENOENT;
        atomic_fetch_add(&stale_reads, 1);
    }
    return rc;
}

static int stale_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off)
{
    if (atomic_load(&stale_armed))
        return SQLITE_IOERR_WRITE;
    return stale_real(f)->xWrite(f, buf, n, off);
}

/* The real VFS's files, their methods but xRead and xWrite its own: the
 * real file is the whole of <f>, only its methods pointer changed. Opened
 * on the loop's and the writer's threads alike: the lock keeps the table
 * whole. */
static int stale_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *f, int flags, int *out)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    (void)vfs;
    int rc = stale_real_vfs->xOpen(stale_real_vfs, name, f, flags, out);
    if (f->pMethods == NULL)
        return rc;
    pthread_mutex_lock(&lock);
    size_t i = 0;
    while (i < STALE_KINDS && stale_real_methods[i] != NULL && stale_real_methods[i] != f->pMethods)
        i++;
    if (i < STALE_KINDS && stale_real_methods[i] == NULL) {
        stale_methods[i] = *f->pMethods;
        stale_methods[i].xRead = stale_read;
        stale_methods[i].xWrite = stale_write;
        stale_real_methods[i] = f->pMethods;
    }
    pthread_mutex_unlock(&lock);
    if (i == STALE_KINDS) { /* more kinds than thought: not wrapped, not armed */
        f->pMethods->xClose(f);
        return SQLITE_CANTOPEN;
    }
    f->pMethods = &stale_methods[i];
    return rc;
}

/* While armed, no system error to give (the real VFS's gives errno,
 * whatever it is); the real VFS's otherwise. */
static int stale_last_error(sqlite3_vfs *vfs, int n, char *buf)
{
    (void)vfs;
    if (atomic_load(&stale_armed))
        return 0;
    return stale_real_vfs->xGetLastError(stale_real_vfs, n, buf);
}

/* The stale-errno VFS made the default, unarmed (the store opened then
 * uses it); stale_vfs_unregister() puts the real one back. */
static void stale_vfs_register(void)
{
    stale_real_vfs = sqlite3_vfs_find(NULL);
    assert_non_null(stale_real_vfs);
    stale_errno_vfs = *stale_real_vfs;
    stale_errno_vfs.zName = "stale-errno";
    stale_errno_vfs.xOpen = stale_open;
    stale_errno_vfs.xGetLastError = stale_last_error;
    atomic_store(&stale_armed, false);
    assert_int_equal(sqlite3_vfs_register(&stale_errno_vfs, 1), SQLITE_OK);
}

static void stale_vfs_unregister(void)
{
    atomic_store(&stale_armed, false);
    assert_int_equal(sqlite3_vfs_register(stale_real_vfs, 1), SQLITE_OK);
    assert_int_equal(sqlite3_vfs_unregister(&stale_errno_vfs), SQLITE_OK);
}

/* The last flush of <s>, armed: standard error into <said> (<n> bytes),
 * then <s> closed and the real VFS back, before a failure ends the test;
 * returns flush()'s. */
static int stale_last_flush(struct store *s, char *said, size_t n)
{
    atomic_store(&stale_armed, true);
    struct stderr_capture capture;
    stderr_capture_begin(&capture);
    int rc = flush(s);
    stderr_capture_end(&capture, said, n);
    atomic_store(&stale_armed, false);
    store_close(s);
    stale_vfs_unregister();
    return rc;
}

/* Fails unless <said> tells a commit's "disk I/O error" without naming
 * <stale>, the system's error no call of that commit had. */
static void assert_told_without(const char *said, const char *stale)
{
    if (strstr(said, "cannot write: disk I/O error") == NULL || strstr(said, stale) != NULL)
        fail_msg("standard error said: %s", said);
}

/* A commit that fails with no system error after a statement of its batch
 * left errno set (here a read, at the batch's BEGIN or its statements)
 * names no system error: errno was cleared only before BEGIN, so the
 * failure was told with the leftover one, "disk I/O error (No such file or
 * directory)", an error no call of the commit had. */
static void a_commit_failure_names_no_leftover_errno(void **state)
{
    (void)state;
    stale_vfs_register();
    struct store *s = open_ok(dir);
    assert_int_equal(store_put_contact(s, "a", "b", 1), 0);
    assert_int_equal(flush(s), 0);
    /* another connection's commit: the writer reads the pages again */
    sqlite3_close(other_connection("INSERT INTO first_contact VALUES('o', 'h', 1)"));
    assert_int_equal(store_put_contact(s, "a", "c", 2), 0);
    atomic_store(&stale_reads, 0);
    char said[4096];
    assert_int_equal(stale_last_flush(s, said, sizeof(said)), -1);
    assert_true(atomic_load(&stale_reads) > 0); /* errno was left, before the COMMIT */
    assert_told_without(said, strerror(ENOENT));
}

/* SQLite keeps the system's error it records for a connection (a
 * statement's failing step: a batch bigger than its page cache, written
 * into the log mid-statement, past RLIMIT_FSIZE) until it records another,
 * and records none for a COMMIT's failing write of the log: a later commit
 * failing with no system error was told with the earlier one's, "disk I/O
 * error (File too large)", long after room was back. */
static void a_later_failure_names_no_earlier_recorded_error(void **state)
{
    (void)state;
    stale_vfs_register();
    struct store *s = open_ok(dir);
    assert_int_equal(store_put_contact(s, "a", "b", 1), 0);
    assert_int_equal(flush(s), 0);
    /* more than SQLite's page cache (2 MiB): spilled within a statement */
    static char host[20000];
    enum { HOSTS = 160 };
    memset(host, 'h', sizeof(host) - 1);
    for (int i = 0; i < HOSTS; i++) {
        snprintf(host, 8, "%07d", i);
        host[7] = 'h';
        assert_int_equal(store_put_contact(s, "a", host, 2), 0);
    }
    char said[4096];
    int rc = flush_without_room(s, said, sizeof(said));
    char want[128];
    snprintf(want, sizeof(want), "disk I/O error (%s)", strerror(EFBIG));
    if (rc != -1 || strstr(said, want) == NULL)
        fail_msg("standard error said: %s", said);
    /* room again: the kept batch goes, once the backoff has run */
    assert_int_equal(flush_after_backoff(s), 0);
    /* a commit whose write of the log fails with no system error */
    assert_int_equal(store_put_contact(s, "a", "c", 3), 0);
    assert_int_equal(stale_last_flush(s, said, sizeof(said)), -1);
    assert_told_without(said, strerror(EFBIG));
}

/* Whether the SQLite database at <path> has a table named <table>. */
static bool has_table(const char *path, const char *table)
{
    sqlite3 *db;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE name = ?1", -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    bool found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    sqlite3_close(db);
    return found;
}

/* A sluice.db that is a symbolic link is not followed: the gateway (root
 * when it opens its files) wrote its tables into the link's target,
 * another program's database, or made a database wherever the link
 * pointed. The lock and the checkpointer's connection already refused
 * links. Reported, and the store is not used. */
static void a_symbolic_link_in_place_of_the_database_is_not_followed(void **state)
{
    (void)state;
    char other[128], made[128], link[128], *err = NULL, *warn = NULL;
    snprintf(other, sizeof(other), "%s/app.db", dir);
    snprintf(made, sizeof(made), "%s/made.db", dir);
    snprintf(link, sizeof(link), "%s/state", dir);
    assert_int_equal(mkdir(link, 0750), 0);
    snprintf(link, sizeof(link), "%s/state/%s", dir, STORE_FILE);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(other, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE users(name TEXT)", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    char state_dir[128];
    snprintf(state_dir, sizeof(state_dir), "%s/state", dir);
    const char *const targets[] = {other, made};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(symlink(targets[i], link), 0);
        struct store *s = store_open(state_dir, &err, &warn);
        if (s != NULL)
            store_close(s);
        assert_null(s);
        assert_null(warn);
        assert_non_null(err);
        assert_non_null(strstr(err, "cannot open the state store"));
        assert_non_null(strstr(err, "symbolic link"));
        free(err);
        assert_int_equal(unlink(link), 0);
    }
    assert_false(has_table(other, "meta"));
    assert_int_equal(access(made, F_OK), -1);
    /* the link gone: a store of its own is made there */
    store_close(open_ok(state_dir));
}

/* store_files_private() makes sluice.db STORE_FILE_MODE and takes other
 * users' permissions from the store's regular files only: a symbolic link
 * in place of one is not followed (its target keeps its mode; the opener
 * refuses the link), and a FIFO neither holds the call up nor is changed. */
static void store_files_change_regular_files_only(void **state)
{
    (void)state;
    char st[128], target[128], path[192];
    snprintf(st, sizeof(st), "%s/state", dir);
    snprintf(target, sizeof(target), "%s/target", dir);
    assert_int_equal(mkdir(st, 0755), 0);
    mode_t old = umask(022);
    FILE *f = fopen(target, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(chmod(target, 0644), 0);
    snprintf(path, sizeof(path), "%s/%s-wal", st, STORE_FILE);
    assert_int_equal(symlink(target, path), 0);
    snprintf(path, sizeof(path), "%s/%s-shm", st, STORE_FILE);
    assert_int_equal(mkfifo(path, 0644), 0);
    snprintf(path, sizeof(path), "%s/%s", st, STORE_LOCK_FILE);
    assert_non_null(f = fopen(path, "w"));
    fclose(f);
    assert_int_equal(chmod(path, 0666), 0);
    /* a rollback journal holds pages of the store (first contacts, alert
     * bodies): another user's read of it is one of the store */
    snprintf(path, sizeof(path), "%s/%s-journal", st, STORE_FILE);
    assert_non_null(f = fopen(path, "w"));
    fclose(f);
    assert_int_equal(chmod(path, 0644), 0);
    char *why = NULL;
    assert_int_equal(store_files_private(st, &why), 0);
    assert_null(why);
    umask(old);
    struct stat sb;
    snprintf(path, sizeof(path), "%s/%s", st, STORE_FILE);
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    assert_int_equal(sb.st_mode & 07777, STORE_FILE_MODE);
    assert_int_equal(lstat(target, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0644);
    snprintf(path, sizeof(path), "%s/%s-shm", st, STORE_FILE);
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    assert_int_equal(sb.st_mode & 07777, 0644);
    snprintf(path, sizeof(path), "%s/%s", st, STORE_LOCK_FILE);
    assert_int_equal(lstat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0660);
    snprintf(path, sizeof(path), "%s/%s-journal", st, STORE_FILE);
    assert_int_equal(lstat(path, &sb), 0);
    if ((sb.st_mode & 07777) != 0640)
        fail_msg("%s-journal: mode %04o, not 0640", STORE_FILE, (unsigned)(sb.st_mode & 07777));
}

/* A state directory reached through symbolic links the operator put on its
 * path (/var/lib/sluice -> /data/sluice, or a link further up) is used:
 * SQLite's SQLITE_OPEN_NOFOLLOW refused every link on the path, and the
 * store ran from memory, its first contacts forgotten at each restart. The
 * directory is resolved once and the store kept there; a link in it, in
 * place of sluice.db, is still not followed, and the message names the
 * directory as given and resolved. */
static void a_state_directory_reached_through_a_link_is_used(void **state)
{
    (void)state;
    char real[128], up[128], via[128], linked[160], db[192], *err = NULL, *warn = NULL;
    snprintf(real, sizeof(real), "%s/data", dir);
    assert_int_equal(mkdir(real, 0750), 0);
    snprintf(via, sizeof(via), "%s/state", dir); /* the link to the directory */
    assert_int_equal(symlink(real, via), 0);
    snprintf(up, sizeof(up), "%s/up", dir); /* and one above it */
    assert_int_equal(symlink(dir, up), 0);
    snprintf(linked, sizeof(linked), "%s/state", up);
    const char *const given[] = {via, linked};
    for (size_t i = 0; i < 2; i++) {
        struct store *s = open_ok(given[i]);
        snprintf(db, sizeof(db), "%s/%s", real, STORE_FILE);
        assert_string_equal(store_shown(s), db);
        assert_int_equal(store_put_contact(s, "ci", i == 0 ? "a.test" : "b.test", 1), 0);
        store_close(s); /* written */
        s = open_ok(given[i]);
        struct seen seen = {0};
        assert_int_equal(store_load_contacts(s, on_contact, &seen), (int)i + 1);
        store_close(s);
    }
    struct stat st;
    assert_int_equal(lstat(db, &st), 0);
    assert_true(S_ISREG(st.st_mode));

    /* a sluice.db that is a link, in the linked directory, is not followed */
    char other[128];
    snprintf(other, sizeof(other), "%s/app.db", dir);
    assert_int_equal(rename(db, other), 0);
    assert_int_equal(symlink(other, db), 0);
    assert_null(store_open(linked, &err, &warn));
    assert_null(warn);
    assert_non_null(err);
    assert_non_null(strstr(err, "cannot open the state store"));
    assert_non_null(strstr(err, "it is a symbolic link, not followed"));
    char named[400];
    snprintf(named, sizeof(named), "%s (resolved: %s)", linked, real);
    assert_non_null(strstr(err, named));
    free(err);
    err = NULL;
    /* nor is a lock that is a link */
    assert_int_equal(unlink(db), 0);
    char lock[192];
    snprintf(lock, sizeof(lock), "%s/sluice.lock", real);
    assert_int_equal(unlink(lock), 0);
    assert_int_equal(symlink(other, lock), 0);
    assert_null(store_open(via, &err, &warn));
    assert_non_null(err);
    assert_non_null(strstr(err, "cannot open the state lock"));
    free(err);
    assert_int_equal(unlink(lock), 0);

    /* a link to a directory that does not exist: said, and nothing made there */
    char dangling[128], missing[128];
    snprintf(missing, sizeof(missing), "%s/missing", dir);
    snprintf(dangling, sizeof(dangling), "%s/dangling", dir);
    assert_int_equal(symlink(missing, dangling), 0);
    err = NULL;
    assert_null(store_open(dangling, &err, &warn));
    assert_non_null(err);
    assert_non_null(strstr(err, "it is a symbolic link to a directory that does not exist"));
    free(err);
    assert_int_equal(access(missing, F_OK), -1);
}

/* One gateway per store: a second open of the same directory fails while
 * the first holds it (their queue ids would collide), and succeeds after;
 * the failure says the store is held, so that the caller tries again (an
 * overlapping restart). */
static void one_gateway_per_store(void **state)
{
    (void)state;
    char *err = NULL, *warn = NULL;
    enum store_held held = STORE_FREE;
    struct store *s = open_ok(dir);
    assert_null(store_open_try(dir, 0, &err, &warn, &held));
    assert_non_null(err);
    assert_non_null(strstr(err, "in use by another sluice gateway"));
    assert_int_equal(held, STORE_HELD_GATEWAY);
    free(err);
    store_close(s);
    s = open_ok(dir);
    store_close(s);
}

/* A store another gateway's sluice.lock holds is taken, for /healthz, for
 * an old gateway's that drains (the longest --grace, and a minute): past
 * that, a second gateway holds it. A database lock is never a
 * predecessor's. */
static void a_store_another_gateway_holds_is_a_predecessors_for_a_while(void **state)
{
    (void)state;
    struct store *s = open_ok(dir);
    struct store_opener *o = store_opener_start(dir, 0, 16, STORE_HELD_GATEWAY);
    assert_non_null(o);
    uint64_t now = monotonic_ms();
    assert_true(store_opener_waits_for_predecessor(o, now));
    assert_true(store_opener_waits_for_predecessor(o, now + STORE_OPENER_PREDECESSOR_MS - 60000));
    assert_false(store_opener_waits_for_predecessor(o, now + STORE_OPENER_PREDECESSOR_MS));
    store_opener_free(o);
    o = store_opener_start(dir, 0, 16, STORE_HELD_DB);
    assert_non_null(o);
    assert_false(store_opener_waits_for_predecessor(o, monotonic_ms()));
    store_opener_free(o);
    store_close(s);
}

struct ids {
    int n;
    bool other; /* a row of another sink came */
    int64_t id[16];
};

static void on_queue_ids(int64_t id, const char *sink, const char *body, int attempts, void *arg)
{
    struct ids *s = arg;
    (void)body;
    (void)attempts;
    if (strcmp(sink, "sink:a/") != 0)
        s->other = true;
    if (s->n < 16)
        s->id[s->n] = id;
    s->n++;
}

/* A webhook's sweep reads only the rows it has room for: the rows of its
 * sink, oldest first, at most <limit>, whatever else the
 * queue holds (an agent can queue hundreds of thousands of alerts while a
 * webhook is down; the sweep used to read them all, on the loop). */
static void queue_rows_of_a_sink_up_to_a_limit(void **state)
{
    (void)state;
    struct store *s = open_ok(dir);
    int64_t first = 0;
    for (int i = 0; i < 50000; i++) {
        int64_t id = store_queue_add(s, i % 2 == 0 ? "sink:b/" : "sink:a/", "{}");
        if (i == 1)
            first = id;
    }
    assert_int_equal(flush(s), 0);
    struct ids seen = {0};
    assert_int_equal(read_queue(s, "sink:a/", 10, on_queue_ids, &seen, NULL), 10);
    assert_int_equal(seen.n, 10); /* read 10 rows, not 50,000 */
    assert_false(seen.other);
    for (int i = 0; i < 10; i++)
        assert_int_equal(seen.id[i], first + 2 * i); /* the oldest, in order */
    seen = (struct ids){0};
    assert_int_equal(read_queue(s, "sink:c/", 10, on_queue_ids, &seen, NULL), 0);
    assert_int_equal(read_queue(s, "sink:a/", 0, on_queue_ids, &seen, NULL), 0);
    assert_int_equal(seen.n, 0);
    store_close(s);
    /* a store made before the index gets it at its next open; opened while
     * another process holds the lock, it opens all the same without */
    sqlite3 *db = other_connection("DROP INDEX alert_queue_sink; BEGIN EXCLUSIVE");
    s = open_ok(dir);
    seen = (struct ids){0};
    assert_int_equal(read_queue(s, "sink:a/", 3, on_queue_ids, &seen, NULL), 3);
    assert_false(seen.other);
    assert_int_equal(seen.id[2], first + 4);
    store_close(s);
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    s = open_ok(dir);
    store_close(s);
    char *v = query_text("SELECT count(*) FROM sqlite_master WHERE type = 'index' "
                         "AND name = 'alert_queue_sink'");
    assert_string_equal(v, "1");
    free(v);
}

struct per_sink {
    int n;
    char sink[4][16];
    uint64_t rows[4];
};

static void on_queued(const char *sink, uint64_t rows, void *arg)
{
    struct per_sink *p = arg;
    if (p->n < 4) {
        snprintf(p->sink[p->n], sizeof(p->sink[p->n]), "%s", sink);
        p->rows[p->n] = rows;
    }
    p->n++;
}

/* The rows each sink has waiting, counted (for what the start says of
 * sinks no longer configured) without reading the rows themselves. */
static void queue_counted_per_sink(void **state)
{
    (void)state;
    struct store *s = open_ok(dir);
    struct per_sink seen = {0};
    assert_int_equal(store_count_queue(s, on_queued, &seen), 0);
    assert_int_equal(seen.n, 0);
    int64_t del = 0;
    for (int i = 0; i < 9; i++) {
        int64_t id = store_queue_add(s, i < 3 ? "sink:a/" : i < 8 ? "sink:b/" : "sink:c/", "{}");
        if (i == 4)
            del = id;
    }
    assert_int_equal(store_queue_del(s, "sink:b/", del), 0);
    assert_int_equal(flush(s), 0);
    assert_int_equal(store_count_queue(s, on_queued, &seen), 3);
    assert_int_equal(seen.n, 3);
    assert_string_equal(seen.sink[0], "sink:a/");
    assert_int_equal(seen.rows[0], 3);
    assert_string_equal(seen.sink[1], "sink:b/");
    assert_int_equal(seen.rows[1], 4);
    assert_string_equal(seen.sink[2], "sink:c/");
    assert_int_equal(seen.rows[2], 1);
    store_close(s);
}

static void on_counter_check(const char *name, uint64_t v, void *arg)
{
    int *bad = arg;
    unsigned long i = strtoul(name + 1, NULL, 10);
    if (name[0] == 'k' ? v != 2 * i + 1 : name[0] == 'c' ? v != 7 : true)
        (*bad)++;
}

struct rows {
    int n;
    int64_t id[4];
    char body[4][16];
};

static void on_row(int64_t id, const char *sink, const char *body, int attempts, void *arg)
{
    struct rows *r = arg;
    (void)sink;
    (void)attempts;
    if (r->n < 4) {
        r->id[r->n] = id;
        snprintf(r->body[r->n], sizeof(r->body[0]), "%s", body);
    }
    r->n++;
}

static int64_t rows_in_db(const char *where)
{
    char sql[160];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM alert_queue WHERE %s", where);
    char *t = query_text(sql);
    int64_t n = strtoll(t, NULL, 10);
    free(t);
    return n;
}

/* A commit whose write() of the log the file system holds (here the gate)
 * holds the writer's thread only: the loop's flush hands the batch over and
 * returns, queues more, hands nothing more over while the writer holds
 * one, and reads the queue as the writes not yet committed leave it. A row
 * added in one batch and deleted in the next is deleted after it was added.
 * No write of the log is made on the loop's thread. */
static void a_stuck_commit_holds_the_writer_not_the_loop(void **state)
{
    (void)state;
    const char *sink = "sink:127.0.0.1:9/h";
    struct store *s = open_ok(dir);
    atomic_store(&wal_writes_on_main, 0);
    int64_t first = store_queue_add(s, sink, "first");
    assert_true(first > 0);
    gate_close();
    assert_int_equal(store_flush(s), 0); /* handed over */
    gate_wait_held();                    /* the writer is inside its write() */
    assert_int_equal(store_queue_del(s, sink, first), 0);
    int64_t second = store_queue_add(s, sink, "second");
    assert_int_equal(store_flush(s), 0); /* returns: the writer holds its batch */
    assert_true(store_writer_holding(s->writer));
    assert_true(store_dirty(s));
    assert_int_equal(store_pending(s), 3); /* one in the writer's hands, two queued */
    assert_true(store_queue_unwritten(s, first));
    assert_true(store_queue_unwritten(s, second));
    /* (a read meanwhile: a_read_waits_on_the_writers_thread_not_the_loop) */
    gate_open();
    assert_int_equal(flush(s), 0);
    assert_false(store_dirty(s));
    assert_false(store_queue_unwritten(s, first));
    assert_false(store_queue_unwritten(s, second));
    assert_int_equal(rows_in_db("id = 1"), 0);
    assert_int_equal(rows_in_db("id = 2"), 1);
    struct rows r = {0};
    int64_t count = -1;
    assert_int_equal(read_queue(s, sink, 10, on_row, &r, &count), 1);
    assert_int_equal(r.id[0], second);
    assert_int_equal(count, 1);
    assert_int_equal(atomic_load(&wal_writes_on_main), 0);
    store_close(s);
}

/* sluice_webhook_queue counts a sink's rows as the writes not yet
 * committed leave them: a committed row whose deletion waits is not
 * counted (it was: the count stayed one up per alert delivered since the
 * last commit), a row added and deleted before any commit counts nothing,
 * and another sink's deletion takes nothing from this one's. */
static void count_leaves_out_deletions_that_wait(void **state)
{
    (void)state;
    const char *sink = "sink:127.0.0.1:9/h", *other = "sink:127.0.0.1:9/o";
    struct store *s = open_ok(dir);
    int64_t a = store_queue_add(s, sink, "a");
    store_queue_add(s, sink, "b");
    store_queue_add(s, sink, "c");
    int64_t o = store_queue_add(s, other, "o");
    assert_int_equal(flush(s), 0);
    assert_int_equal(queue_count(s, sink), 3);
    assert_int_equal(store_queue_del(s, sink, a), 0); /* committed row, deletion queued */
    assert_int_equal(queue_count(s, sink), 2);
    int64_t d = store_queue_add(s, sink, "d");
    assert_int_equal(queue_count(s, sink), 3);
    assert_int_equal(store_queue_del(s, sink, d), 0); /* added and deleted, both queued */
    assert_int_equal(store_queue_del(s, other, o), 0);
    assert_int_equal(queue_count(s, sink), 2);
    assert_int_equal(queue_count(s, other), 0);
    assert_int_equal(flush(s), 0);
    assert_int_equal(queue_count(s, sink), 2);
    assert_int_equal(rows_in_db("1"), 2);
    store_close(s);
}

/* take_with(), the rows into <rows>. */
static int take(struct store *s, struct store_read *r, struct rows *rows,
                struct store_read_got *got)
{
    return take_with(s, r, on_row, rows, got);
}

/* Takes <r> and checks it gave <n> rows, the last <last>, and counted
 * <count>; returns whether the sink has no row past them. */
static bool read_gives(struct store *s, struct store_read *r, int n, int64_t last, int64_t count)
{
    struct rows rows = {0};
    struct store_read_got got;
    assert_int_equal(take(s, r, &rows, &got), 0);
    assert_int_equal(rows.n, n);
    assert_int_equal(got.rows, n);
    assert_int_equal(rows.id[n - 1], last);
    assert_int_equal(got.count, count);
    return got.all;
}

/* The webhook's read of the queue goes to the writer's thread: behind a
 * commit the file system holds, it waits there, and the loop neither waits
 * for it nor gets it (the take says so and returns); once the commit ends,
 * the rows are those the writes queued meanwhile leave (a row added is
 * read, one deleted is not) and the count is the rows left. */
static void a_read_waits_on_the_writers_thread_not_the_loop(void **state)
{
    (void)state;
    const char *sink = "sink:127.0.0.1:9/h";
    struct store *s = open_ok(dir);
    int64_t first = store_queue_add(s, sink, "first");
    assert_int_equal(flush(s), 0);
    int64_t second = store_queue_add(s, sink, "second");
    gate_close();
    assert_int_equal(store_flush(s), 0); /* handed over */
    gate_wait_held();                    /* the writer is inside its write() */
    struct store_read *r = store_queue_read(s, sink, 10, SIZE_MAX, false);
    assert_non_null(r);
    struct rows rows = {0};
    struct store_read_got got;
    for (int i = 0; i < 20; i++) { /* 20 ticks: the read waits behind the commit */
        assert_int_equal(store_queue_read_take(s, r, on_row, &rows, &got), 1);
        usleep(1000);
    }
    assert_int_equal(rows.n, 0);
    assert_int_equal(store_queue_del(s, sink, first), 0);
    int64_t third = store_queue_add(s, sink, "third");
    gate_open();
    assert_true(read_gives(s, r, 2, third, 2));
    assert_true(second < third);
    assert_int_equal(flush(s), 0);
    store_close(s);
}

/* A read that ran before a batch the loop has collected since did not see
 * that batch's rows, which memory no longer holds either: it is read again,
 * and the row is not missed. A read that ran after a batch the loop has
 * not collected yet sees its rows, which memory still holds: each is read
 * and counted once. */
static void a_read_knows_which_commits_it_saw(void **state)
{
    (void)state;
    const char *sink = "sink:127.0.0.1:9/h";
    struct store *s = open_ok(dir);
    int64_t a = store_queue_add(s, sink, "a"); /* queued, not handed over */
    struct store_read *r = store_queue_read(s, sink, 10, SIZE_MAX, false);
    for (int i = 0; i < 10000 && r->state != READ_DONE; i++) {
        usleep(1000);
        reads_move(s);
    }
    assert_int_equal(r->state, READ_DONE); /* it ran before a's commit */
    assert_int_equal(flush(s), 0);         /* a committed and collected */
    assert_true(read_gives(s, r, 1, a, 1));
    int64_t b = store_queue_add(s, sink, "b");
    assert_int_equal(store_flush(s), 0);
    store_writer_wait(s->writer, INT64_MAX); /* committed, not collected */
    r = store_queue_read(s, sink, 10, SIZE_MAX, false);
    assert_true(read_gives(s, r, 2, b, 2));
    assert_int_equal(flush(s), 0);
    store_close(s);
}

/* A read brings the sink's oldest rows, the limit's worth once those whose
 * deletion waits are left out, and says whether more follow; reads
 * cancelled while waiting their turn or in the thread's hands are freed
 * (ASan: no leak). */
static void a_read_brings_its_limit_and_cancels(void **state)
{
    (void)state;
    const char *sink = "sink:127.0.0.1:9/h";
    struct store *s = open_ok(dir);
    int64_t id[6];
    for (int i = 0; i < 6; i++)
        id[i] = store_queue_add(s, sink, "x");
    assert_int_equal(flush(s), 0);
    assert_int_equal(store_queue_del(s, sink, id[0]), 0);
    assert_int_equal(store_queue_del(s, sink, id[1]), 0);
    struct store_read *r = store_queue_read(s, sink, 3, SIZE_MAX, false);
    assert_false(read_gives(s, r, 3, id[4], 4)); /* id[2] to id[4]; id[5] follows */
    gate_close();
    store_queue_add(s, sink, "y");
    assert_int_equal(store_flush(s), 0);
    gate_wait_held();
    struct store_read *held = store_queue_read(s, sink, 3, SIZE_MAX, false);
    struct store_read *waiting = store_queue_read(s, "sink:127.0.0.1:9/o", 3, SIZE_MAX, false);
    assert_int_equal(held->state, READ_HELD);
    assert_int_equal(waiting->state, READ_WAITING);
    store_queue_read_cancel(s, waiting);
    store_queue_read_cancel(s, held);
    gate_open();
    assert_int_equal(flush(s), 0);
    store_close(s);
}

/* A read holds at most its bytes of bodies: it stops before the row that
 * would pass them (the sink's rows are then not all), the first too unless
 * it may take one over, read alone however long. Rows whose deletion
 * waits are passed over, neither held nor counted: a sink that just
 * delivered a memory's worth of alerts read them all again. */
static void a_read_holds_at_most_its_bytes(void **state)
{
    (void)state;
    const char *sink = "sink:127.0.0.1:9/h";
    struct store *s = open_ok(dir);
    char body[101];
    memset(body, 'x', 100);
    body[100] = '\0';
    int64_t id[5];
    for (int i = 0; i < 5; i++)
        id[i] = store_queue_add(s, sink, body);
    assert_int_equal(flush(s), 0);
    struct store_read *r = store_queue_read(s, sink, 10, 250, false);
    assert_false(read_gives(s, r, 2, id[1], 5));
    r = store_queue_read(s, sink, 10, 50, false); /* not even the first */
    struct rows rows = {0};
    struct store_read_got got;
    assert_int_equal(take(s, r, &rows, &got), 0);
    assert_int_equal(rows.n, 0);
    assert_false(got.all);
    r = store_queue_read(s, sink, 10, 50, true); /* the first alone */
    assert_false(read_gives(s, r, 1, id[0], 5));
    assert_int_equal(store_queue_del(s, sink, id[0]), 0);
    assert_int_equal(store_queue_del(s, sink, id[1]), 0);
    r = store_queue_read(s, sink, 10, 250, false);
    for (int i = 0; i < 10000 && r->state != READ_DONE; i++) {
        usleep(1000);
        reads_move(s);
    }
    assert_int_equal(r->state, READ_DONE);
    assert_int_equal(r->nrows, 2); /* id[2] and id[3]: the deleted ones not held */
    assert_false(read_gives(s, r, 2, id[3], 3));
    r = store_queue_read(s, sink, 10, 300, false); /* room for all */
    assert_true(read_gives(s, r, 3, id[4], 3));
    assert_int_equal(flush(s), 0);
    store_close(s);
}

/* A batch that comes back uncommitted (the lock another process holds)
 * goes back before the writes queued meanwhile: the deletion of a row
 * queued while the writer held its insertion still comes after it. */
static void a_batch_back_from_the_writer_keeps_its_place(void **state)
{
    (void)state;
    const char *sink = "sink:127.0.0.1:9/h";
    struct store *s = open_ok(dir);
    sqlite3 *db = other_connection("BEGIN EXCLUSIVE");
    int64_t id = store_queue_add(s, sink, "x");
    assert_int_equal(store_flush(s), 0); /* handed over: the writer finds the lock */
    assert_int_equal(store_queue_del(s, sink, id), 0);
    assert_int_equal(flush(s), -1);
    struct rows r = {0};
    assert_int_equal(read_queue(s, sink, 10, on_row, &r, NULL), 0);
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(flush(s), 0);
    assert_int_equal(rows_in_db("1"), 0);
    store_close(s);
}

/* Reads standard error's <fd> (a file) from its start into <buf>. */
static void read_back(int fd, char *buf, size_t n)
{
    ssize_t got = pread(fd, buf, n - 1, 0);
    buf[got > 0 ? got : 0] = '\0';
}

/* At the stop, a writer stuck in its commit is waited for only while it
 * moves: store_sync() fails, the alert rows it holds count as unwritten
 * (the webhooks name them as lost), and store_close() says what was not
 * written instead of waiting for ever. */
static void a_writer_stuck_at_the_stop_is_reported(void **state)
{
    (void)state;
    const char *sink = "sink:127.0.0.1:9/h";
    struct store *s = open_ok(dir);
    int64_t id = store_queue_add(s, sink, "x");
    gate_close();
    store_flush(s);
    gate_wait_held();
    assert_int_equal(store_put_contact(s, "a", "b", 1), 0);
    assert_int_equal(store_sync(s), -1);
    assert_true(store_queue_unwritten(s, id));
    char path[96], text[1024];
    snprintf(path, sizeof(path), "%s/stderr", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600), saved = dup(2);
    assert_true(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, 2);
    store_close(s); /* not waited for again */
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    read_back(fd, text, sizeof(text));
    close(fd);
    assert_non_null(strstr(text, "2 write(s) not written at exit: the writer's commit has not "
                                 "moved for 2000 ms"));
    gate_open(); /* the abandoned writer ends its commit and its thread */
}

/* The stop's wait for a writer stuck in the file system is timed on the
 * monotonic clock: timed on the wall clock, a step back of the wall clock
 * during the wait stretched it by the step (an hour's step, an hour more
 * before the stop gave up on the writer, where it gives up after 2000 ms
 * without a statement). Here the wall clock stands 20 s off. */
static void a_wall_clock_step_does_not_stretch_the_writers_wait(void **state)
{
    (void)state;
    struct store *s = open_ok(dir);
    assert_int_equal(store_put_contact(s, "a", "b", 1), 0);
    gate_close();
    store_flush(s);
    gate_wait_held();
    atomic_store(&realtime_ahead_s, 20);
    uint64_t t0 = monotonic_ms();
    bool ended = store_writer_wait(s->writer, (int64_t)monotonic_ms() + 300);
    uint64_t waited = monotonic_ms() - t0;
    atomic_store(&realtime_ahead_s, 0);
    gate_open();
    assert_false(ended); /* the commit is still held */
    if (waited >= 5000)
        fail_msg("a wait of 300 ms took %llu ms", (unsigned long long)waited);
    assert_int_equal(flush(s), 0);
    store_close(s);
}

/* While the store is locked, a counter or baseline written twice waits as
 * one write, which commits the last value. */
static void coalescing_while_locked(void **state)
{
    (void)state;
    struct store *s = open_ok(dir);
    sqlite3 *db = other_connection("BEGIN EXCLUSIVE");
    struct store_baseline b = {.req_avg = 1, .minute = 1};
    assert_int_equal(store_put_counter(s, "alerts.x", 1), 0);
    assert_int_equal(store_put_baseline(s, "ci", &b), 0);
    assert_int_equal(store_put_contact(s, "ci", "a.test", 1), 0);
    assert_int_equal(store_put_counter(s, "alerts.x", 2), 0);
    b.minute = 2;
    assert_int_equal(store_put_baseline(s, "ci", &b), 0);
    assert_int_equal(store_put_baseline(s, "alerts.x", &b), 0); /* a baseline is not a counter */
    assert_int_equal(store_pending(s), 4);
    assert_int_equal(flush(s), -1);
    /* The batch is in the writer's hands again (retried at each tick):
     * the new value is a write of its own... */
    assert_true(store_writer_holding(s->writer));
    assert_int_equal(store_put_counter(s, "alerts.x", 3), 0);
    assert_int_equal(store_pending(s), 5);
    /* ...and once the batch comes back, its older copy goes: still one */
    assert_int_equal(flush(s), -1);
    assert_int_equal(store_pending(s), 4);
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(flush(s), 0);
    assert_int_equal(store_put_counter(s, "alerts.x", 4), 0); /* after a commit: a new write */
    assert_int_equal(store_pending(s), 1);
    assert_int_equal(flush(s), 0);
    struct seen seen = {0};
    assert_int_equal(store_load_counters(s, on_counter, &seen), 1);
    assert_string_equal(seen.text[0], "alerts.x");
    assert_int_equal(seen.num[0], 4);
    memset(&seen, 0, sizeof(seen));
    assert_int_equal(store_load_baselines(s, 4096, on_baseline, &seen), 2);
    assert_int_equal(seen.num[0] + seen.num[1], 4); /* ci and alerts.x, both minute 2 */
    store_close(s);
}

/* 50,000 counters written twice each while the store is locked, and the
 * cap's drop after: each put finds its pending write at once (a few key
 * comparisons, where it used to compare with every pending write: an
 * alert storm against a locked store went quadratic), the last value wins,
 * a write the cap dropped is queued anew when written again, and one it
 * kept (moved in the queue) is still found. */
static void coalesced_writes_find_theirs_at_once(void **state)
{
    (void)state;
    enum { N = 50000 };
    struct store *s = open_ok(dir);
    sqlite3 *db = other_connection("BEGIN EXCLUSIVE");
    char name[32];
    assert_int_equal(store_put_counter(s, "c0", 1), 0); /* among the oldest tenth */
    key_compares = 0;
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "k%d", i);
        assert_int_equal(store_put_counter(s, name, 2 * (uint64_t)i), 0);
    }
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "k%d", i);
        assert_int_equal(store_put_counter(s, name, 2 * (uint64_t)i + 1), 0);
    }
    assert_true(key_compares < 4ul * N); /* a scan made over a billion */
    assert_int_equal(store_pending(s), N + 1);
    for (int i = 0; i < STORE_PENDING_MAX - N; i++) { /* past the cap: the oldest tenth goes */
        snprintf(name, sizeof(name), "h%d", i);
        assert_int_equal(store_put_contact(s, "a", name, 1), 0);
    }
    assert_int_equal(store_dropped(s), STORE_PENDING_MAX / 10);
    /* the cap dropped c0 and k0..k9998: their next values are new writes;
     * the others moved in ops and are still found */
    size_t pending = store_pending(s);
    assert_int_equal(store_put_counter(s, "c0", 7), 0);
    assert_int_equal(store_put_counter(s, "k0", 1), 0);
    assert_int_equal(store_pending(s), pending + 2);
    assert_int_equal(store_put_counter(s, "k9999", 2 * 9999 + 1), 0);
    assert_int_equal(store_put_counter(s, "k49999", 2 * 49999 + 1), 0);
    assert_int_equal(store_pending(s), pending + 2);
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(flush(s), 0);
    int bad = 0;
    assert_int_equal(store_load_counters(s, on_counter_check, &bad), 2 + N - 9999);
    assert_int_equal(bad, 0);
    store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(checkpoints_are_off_the_commit_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(corrupt_is_moved_aside, setup, teardown),
        cmocka_unit_test_setup_teardown(the_log_shrinks_after_a_burst, setup, teardown),
        cmocka_unit_test_setup_teardown(rows_of_unconfigured_sinks_are_kept_up_to_a_cap, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_corrupt_store_s_journal_follows_it_aside, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_store_failing_its_check_says_what_the_check_found, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(corrupt_stores_moved_aside_in_one_second_are_kept, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(another_schema_is_not_used, setup, teardown),
        cmocka_unit_test_setup_teardown(a_queue_whose_last_id_cannot_be_read_is_not_used, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_view_in_place_of_a_table_is_not_used, setup, teardown),
        cmocka_unit_test_setup_teardown(queue_ids_stay_positive_whatever_the_store_holds, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_world_writable_directory_is_not_used, setup, teardown),
        cmocka_unit_test_setup_teardown(unusable_paths, setup, teardown),
        cmocka_unit_test_setup_teardown(long_paths_keep_the_remedy, setup, teardown),
        cmocka_unit_test_setup_teardown(a_directory_another_user_owns_is_not_used, setup, teardown),
        cmocka_unit_test_setup_teardown(a_parent_another_user_controls_is_not_used, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(write_failure_keeps_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(opened_while_another_process_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(one_gateway_per_store, setup, teardown),
        cmocka_unit_test_setup_teardown(a_store_another_gateway_holds_is_a_predecessors_for_a_while,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(a_read_only_store_is_not_used, setup, teardown),
        cmocka_unit_test_setup_teardown(a_counter_past_what_sqlite_holds_is_kept_at_its_most, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_store_file_that_is_not_a_regular_file_is_not_used, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_symbolic_link_in_place_of_the_database_is_not_followed,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(store_files_change_regular_files_only, setup, teardown),
        cmocka_unit_test_setup_teardown(a_state_directory_reached_through_a_link_is_used, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_store_without_room_says_why, setup, teardown),
        cmocka_unit_test_setup_teardown(a_commit_without_room_says_why, setup, teardown),
        cmocka_unit_test_setup_teardown(a_later_failure_names_no_earlier_recorded_error, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_commit_failure_names_no_leftover_errno, setup, teardown),
        cmocka_unit_test_setup_teardown(over_the_cap_the_oldest_tenth_goes, setup, teardown),
        cmocka_unit_test_setup_teardown(over_the_bytes_cap_the_oldest_go, setup, teardown),
        cmocka_unit_test_setup_teardown(a_commit_failing_past_the_lock_backs_off, setup, teardown),
        cmocka_unit_test_setup_teardown(queue_rows_of_a_sink_up_to_a_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(queue_counted_per_sink, setup, teardown),
        cmocka_unit_test_setup_teardown(count_leaves_out_deletions_that_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(a_read_waits_on_the_writers_thread_not_the_loop, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_read_knows_which_commits_it_saw, setup, teardown),
        cmocka_unit_test_setup_teardown(a_read_brings_its_limit_and_cancels, setup, teardown),
        cmocka_unit_test_setup_teardown(a_read_holds_at_most_its_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(a_stuck_commit_holds_the_writer_not_the_loop, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_batch_back_from_the_writer_keeps_its_place, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_writer_stuck_at_the_stop_is_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(a_wall_clock_step_does_not_stretch_the_writers_wait, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(coalescing_while_locked, setup, teardown),
        cmocka_unit_test_setup_teardown(coalesced_writes_find_theirs_at_once, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
