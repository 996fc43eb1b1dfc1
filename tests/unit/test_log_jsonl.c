/* Unit tests for watch/log_jsonl.c: exact lines (SPEC.md's examples), key
 * order, escaping of hostile bytes, and the non-blocking writer (files,
 * pipes that stop reading, the pending cap, rotation, a vanished reader). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "stderr_capture.h"

/* A write's pieces measured (writev_longest, writev_mid_line). */
static void measure_write(const struct iovec *iov, size_t n);
/* The unit's writev() calls, counted (counted_writev, below). */
static ssize_t counted_writev(int fd, const struct iovec *iov, int n);
#define writev counted_writev
/* The unit's sendmsg() calls (a socket's writes), measured as writev()'s
 * (counted_sendmsg, below). */
static ssize_t counted_sendmsg(int fd, const struct msghdr *msg, int flags);
#define sendmsg counted_sendmsg
/* The unit's poll() calls, whose waits a test can sum (timed_poll, below). */
static int timed_poll(struct pollfd *fds, nfds_t n, int timeout);
#define poll timed_poll
/* log_jsonl_wait()'s seam: test_no_wake_up_is_lost's writer round. */
struct file_writer;
static void wait_seam(struct file_writer *fw, uint64_t seq);
#define LOG_JSONL_WAIT_SEAM(fw, seq) wait_seam((fw), (seq))
/* The unit's threads: none can be started while threads_refused is set (a
 * pids cgroup at its limit, RLIMIT_NPROC). */
#define quiet_thread_create refusable_thread_create
/* the unit under test, internals included: its files (log_jsonl_int.h) */
#include "watch/log_drain.c"
#include "watch/log_fd.c"
#include "watch/log_jsonl.c"
#include "watch/log_line.c"
#include "watch/log_reopen.c"
#include "watch/log_writer.c"
#undef quiet_thread_create
#undef writev
#undef sendmsg
#undef poll
/* The real one, whose declaration the renaming above took (the header's
 * guard keeps it from coming again). */
int quiet_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg);

static _Atomic bool threads_refused;

int refusable_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg)
{
    return threads_refused ? EAGAIN : quiet_thread_create(thread, fn, arg);
}

/* Atomic: the writer thread of a file log writes them too (one left to
 * itself by test_close_while_a_write_waits, while later tests run). */
static _Atomic unsigned writev_calls;
/* Of the writes asked for: the longest, and how many did not end a line. */
static _Atomic size_t writev_longest;
static _Atomic unsigned writev_mid_line;

/* When >= 0, a writev() says so with a byte on writev_entered_fd, then
 * waits for a byte on writev_gate_fd: a write that waits in the kernel (a
 * hung NFS server), for the writer thread's tests. */
static _Atomic int writev_gate_fd = -1;
static _Atomic int writev_entered_fd = -1;
/* When >= 0, a writev() to this descriptor fails with EAGAIN, counted: a
 * regular file on a FUSE or network file system that would block. */
static _Atomic int writev_eagain_fd = -1;

/* While poll_budget_ms >= 0, the waits the unit asks of poll() on the thread
 * poll_thread are summed in poll_asked_ms: a flush given <budget> ms that
 * nothing can end early (a full pipe nobody reads) asks no more in all,
 * whatever the load, as each wait it asks for lasts at least that long.
 * One that would go past the budget, or wait for ever, fails the test at
 * once rather than hang it. */
static int poll_budget_ms = -1;
static long poll_asked_ms;
static pthread_t poll_thread;

static int timed_poll(struct pollfd *fds, nfds_t n, int timeout)
{
    if (poll_budget_ms >= 0 && pthread_equal(pthread_self(), poll_thread)) {
        if (timeout < 0 || poll_asked_ms + timeout > poll_budget_ms) {
            int given = poll_budget_ms;
            poll_budget_ms = -1; /* the tests after this one's failure poll freely */
            fail_msg("poll() asked to wait %d ms after %ld ms, with %d ms given", timeout,
                     poll_asked_ms, given);
        }
        poll_asked_ms += timeout;
    }
    return poll(fds, n, timeout);
}

static ssize_t counted_writev(int fd, const struct iovec *iov, int n)
{
    if (writev_gate_fd >= 0) {
        char b = 0;
        assert_int_equal(write(writev_entered_fd, &b, 1), 1);
        (void)!read(writev_gate_fd, &b, 1); /* a byte, or the gate closed: go */
    }
    if (fd == writev_eagain_fd) {
        writev_calls++;
        errno = EAGAIN;
        return -1;
    }
    writev_calls++;
    measure_write(iov, (size_t)n);
    return writev(fd, iov, n);
}

/* <iov>'s <n> pieces: their length in all, and whether they end a line. */
static void measure_write(const struct iovec *iov, size_t n)
{
    size_t total = 0;
    char last = '\n';
    for (size_t i = 0; i < n; i++) {
        total += iov[i].iov_len;
        if (iov[i].iov_len > 0)
            last = ((const char *)iov[i].iov_base)[iov[i].iov_len - 1];
    }
    writev_longest = total > writev_longest ? total : writev_longest;
    writev_mid_line += last != '\n';
}

static ssize_t counted_sendmsg(int fd, const struct msghdr *msg, int flags)
{
    measure_write(msg->msg_iov, msg->msg_iovlen);
    return sendmsg(fd, msg, flags);
}

static struct timespec spec_ts(int sec, long ms)
{
    struct tm tm = {
        .tm_year = 2026 - 1900, .tm_mon = 10, .tm_mday = 30, .tm_hour = 19, .tm_sec = sec};
    struct timespec ts = {timegm(&tm), ms * 1000000 + 999999};
    return ts;
}

static struct rule rule3 = {.index = 3};

static struct egress_event spec_egress(void)
{
    struct egress_event ev = {
        .kind = EVENT_EGRESS,
        .ts = spec_ts(0, 123),
        .id = "c17.1",
        .agent = "ci-bot",
        .method = "CONNECT",
        .scheme = "https",
        .host = "api.github.com",
        .port = 443,
        .path = NULL,
        .tier = TIER_3,
        .rule = &rule3,
        .owner = "chaysen",
        .verdict = VERDICT_ALLOW,
        .reason = REASON_NONE,
        .ip = "140.82.112.6",
    };
    return ev;
}

/* The agent_egress_end line of SPEC.md's example (spec_line2). */
static struct egress_event spec_end(void)
{
    struct egress_event ev = {
        .kind = EVENT_EGRESS_END,
        .ts = spec_ts(2, 456),
        .id = "c17.1",
        .agent = "ci-bot",
        .host = "api.github.com",
        .tier = TIER_3,
        .status = 200,
        .bytes_up = 1234,
        .bytes_down = 5678,
        .ms = 2333,
    };
    return ev;
}

static const char spec_line1[] =
    "{\"ts\":\"2026-11-30T19:00:00.123Z\",\"event\":\"agent_egress\",\"id\":\"c17.1\","
    "\"agent\":\"ci-bot\",\"method\":\"CONNECT\",\"scheme\":\"https\",\"host\":\"api.github.com\","
    "\"port\":443,\"path\":null,\"tier\":3,\"rule\":\"rules[3]\",\"owner\":\"chaysen\","
    "\"decision\":\"allow\",\"reason\":null,\"ip\":\"140.82.112.6\"}\n";

static const char spec_line2[] =
    "{\"ts\":\"2026-11-30T19:00:02.456Z\",\"event\":\"agent_egress_end\",\"id\":\"c17.1\","
    "\"agent\":\"ci-bot\",\"host\":\"api.github.com\",\"tier\":3,\"status\":200,"
    "\"bytes_up\":1234,\"bytes_down\":5678,\"ms\":2333}\n";

static void test_spec_lines(void **state)
{
    (void)state;
    char buf[1024];
    struct egress_event ev = spec_egress();

    size_t n = log_jsonl_format(&ev, buf, sizeof(buf));
    assert_string_equal(buf, spec_line1);
    assert_int_equal(n, strlen(spec_line1));

    struct egress_event end = spec_end();
    n = log_jsonl_format(&end, buf, sizeof(buf));
    assert_string_equal(buf, spec_line2);
    assert_int_equal(n, strlen(spec_line2));
}

static void test_nulls_and_deny(void **state)
{
    (void)state;
    char buf[1024];
    struct egress_event ev = {
        .kind = EVENT_EGRESS,
        .ts = {0, 5000000},
        .id = "c1.1",
        .agent = "default",
        .tier = TIER_NONE,
        .verdict = VERDICT_DENY,
        .reason = REASON_BAD_REQUEST,
    };
    log_jsonl_format(&ev, buf, sizeof(buf));
    assert_string_equal(buf, "{\"ts\":\"1970-01-01T00:00:00.005Z\",\"event\":\"agent_egress\","
                             "\"id\":\"c1.1\",\"agent\":\"default\",\"method\":null,"
                             "\"scheme\":null,\"host\":null,\"port\":null,\"path\":null,"
                             "\"tier\":null,\"rule\":null,\"owner\":null,\"decision\":\"deny\","
                             "\"reason\":\"bad_request\",\"ip\":null}\n");

    ev.verdict = VERDICT_REPORT;
    ev.reason = REASON_NOT_IN_POLICY;
    ev.method = "GET";
    ev.scheme = "http";
    ev.host = "evil.test";
    ev.port = 80;
    ev.path = "/";
    ev.tier = TIER_0;
    log_jsonl_format(&ev, buf, sizeof(buf));
    assert_non_null(strstr(buf, "\"port\":80,\"path\":\"/\",\"tier\":0,\"rule\":null"));
    assert_non_null(strstr(buf, "\"decision\":\"report\",\"reason\":\"not_in_policy\""));

    struct egress_event end = {
        .kind = EVENT_EGRESS_END, .id = "c1.1", .agent = "a", .tier = TIER_NONE};
    log_jsonl_format(&end, buf, sizeof(buf));
    assert_string_equal(buf, "{\"ts\":\"1970-01-01T00:00:00.000Z\",\"event\":\"agent_egress_end\","
                             "\"id\":\"c1.1\",\"agent\":\"a\",\"host\":null,\"tier\":null,"
                             "\"status\":null,\"bytes_up\":0,\"bytes_down\":0,\"ms\":0}\n");
    end.bytes_up = UINT64_MAX;
    log_jsonl_format(&end, buf, sizeof(buf));
    assert_non_null(strstr(buf, "\"bytes_up\":18446744073709551615,"));
}

/* Formats an event whose path is <path> and returns the JSON text of the
 * path value (between "path": and ,"tier"). */
static void path_json(const char *path, char *out, size_t outlen)
{
    char buf[4096];
    struct egress_event ev = spec_egress();
    ev.path = path;
    log_jsonl_format(&ev, buf, sizeof(buf));
    char *start = strstr(buf, "\"path\":");
    char *end = strstr(buf, ",\"tier\":");
    assert_non_null(start);
    assert_non_null(end);
    start += 7;
    assert_true((size_t)(end - start) < outlen);
    memcpy(out, start, (size_t)(end - start));
    out[end - start] = '\0';
}

static void test_escaping(void **state)
{
    (void)state;
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"/plain?a=1&b=2", "\"/plain?a=1&b=2\""},
        {"quote\"back\\slash", "\"quote\\\"back\\\\slash\""},
        {"nl\ncr\rtab\t", "\"nl\\ncr\\rtab\\t\""},
        {"\x01\x1f\x7f\x08\x0c", "\"\\u0001\\u001f\\u007f\\u0008\\u000c\""},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
         "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\""},
        {"bad\xff\xfe", "\"bad\\ufffd\\ufffd\""},
        {"overlong\xc0\xaf", "\"overlong\\ufffd\\ufffd\""},
        {"overlong3\xe0\x80\xaf", "\"overlong3\\ufffd\\ufffd\\ufffd\""},
        {"surrogate\xed\xa0\x80", "\"surrogate\\ufffd\\ufffd\\ufffd\""},
        {"toobig\xf4\x90\x80\x80", "\"toobig\\ufffd\\ufffd\\ufffd\\ufffd\""},
        {"f5\xf5\x80\x80\x80", "\"f5\\ufffd\\ufffd\\ufffd\\ufffd\""},
        {"cut\xe2\x82", "\"cut\\ufffd\\ufffd\""},
        {"lone\x80x", "\"lone\\ufffdx\""},
        {"ls\xe2\x80\xa8ps\xe2\x80\xa9", "\"ls\\u2028ps\\u2029\""},
        {"max\xf4\x8f\xbf\xbf", "\"max\xf4\x8f\xbf\xbf\""},
        {"", "\"\""},
    };
    char got[512];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        path_json(cases[i].in, got, sizeof(got));
        if (strcmp(got, cases[i].want) != 0)
            fail_msg("case %zu: got %s want %s", i, got, cases[i].want);
    }
}

/* Every line is valid JSON whatever the bytes, and parses back to the
 * documented keys in the documented order. */
static void test_parse_back(void **state)
{
    (void)state;
    static const char *const keys[] = {"ts",     "event", "id",       "agent",  "method",
                                       "scheme", "host",  "port",     "path",   "tier",
                                       "rule",   "owner", "decision", "reason", "ip"};
    char hostile[256];
    char buf[4096];
    struct egress_event ev = spec_egress();

    for (int i = 0; i < 255; i++)
        hostile[i] = (char)(i + 1);
    hostile[255] = '\0';
    ev.path = hostile;
    ev.method = "G\"E\\T\n";
    ev.agent = "\xff\xfe agent";
    log_jsonl_format(&ev, buf, sizeof(buf));
    assert_non_null(strchr(buf, '\n'));
    assert_ptr_equal(strchr(buf, '\n'), buf + strlen(buf) - 1);
    for (const char *p = buf; *p != '\n'; p++)
        assert_true((unsigned char)*p >= 0x20);

    json_error_t jerr;
    json_t *o = json_loads(buf, JSON_REJECT_DUPLICATES, &jerr);
    if (o == NULL)
        fail_msg("not JSON: %s: %s", jerr.text, buf);
    /* jansson keeps object keys in insertion (= document) order. */
    size_t k = 0;
    for (void *it = json_object_iter(o); it != NULL; it = json_object_iter_next(o, it), k++) {
        assert_true(k < sizeof(keys) / sizeof(keys[0]));
        assert_string_equal(json_object_iter_key(it), keys[k]);
    }
    assert_int_equal(k, sizeof(keys) / sizeof(keys[0]));
    assert_string_equal(json_string_value(json_object_get(o, "method")), "G\"E\\T\n");
    assert_string_equal(json_string_value(json_object_get(o, "agent")),
                        "\xef\xbf\xbd\xef\xbf\xbd agent");
    const char *p = json_string_value(json_object_get(o, "path"));
    assert_non_null(p);
    /* Bytes 1..127 come back as themselves; each of 128..255 as U+FFFD. */
    assert_memory_equal(p, hostile, 127);
    for (int i = 0; i < 128; i++)
        assert_memory_equal(p + 127 + 3 * i, "\xef\xbf\xbd", 3);
    assert_int_equal(strlen(p), 127 + 3 * 128);
    assert_true(json_is_null(json_object_get(o, "reason")));
    assert_int_equal(json_integer_value(json_object_get(o, "port")), 443);
    json_decref(o);
}

static void test_truncation(void **state)
{
    (void)state;
    struct egress_event ev = spec_egress();
    char small[16];
    memset(small, 'x', sizeof(small));
    size_t n = log_jsonl_format(&ev, small, sizeof(small));
    assert_int_equal(n, strlen(spec_line1));
    assert_int_equal(small[15], '\0');
    assert_memory_equal(small, spec_line1, 15);
    /* cap 0 writes nothing. */
    char one = 'y';
    assert_int_equal(log_jsonl_format(&ev, &one, 0), strlen(spec_line1));
    assert_int_equal(one, 'y');
    /* cap == length: the newline is cut, the result says so. */
    char *exact = malloc(n);
    assert_int_equal(log_jsonl_format(&ev, exact, n), n);
    assert_int_equal(exact[n - 1], '\0');
    free(exact);
    /* A long escaped path goes past the stack buffer of the writer. */
    char *path = malloc(20001);
    memset(path, '\x01', 20000);
    path[20000] = '\0';
    ev.path = path;
    n = log_jsonl_format(&ev, NULL, 0);
    assert_int_equal(n, strlen(spec_line1) - 4 + 2 + 6 * 20000);
    free(path);
}

/* ------------------------------------------------------------- writer */

static char tmpdir[64];

static int setup_dir(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/sluice-test-log.XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

static int teardown_dir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = malloc(1 << 20);
    *len = fread(buf, 1, (1 << 20) - 1, f);
    buf[*len] = '\0';
    fclose(f);
    return buf;
}

/* Opens a log on the file <name> in the test's folder, its path in <path>
 * (<cap> bytes). */
static struct log_jsonl *open_on_file(struct event_base *base, const char *name, char *path,
                                      size_t cap)
{
    char *err = NULL;
    snprintf(path, cap, "%s/%s", tmpdir, name);
    struct log_jsonl *l = log_jsonl_open(base, path, 0, &err);
    assert_non_null(l);
    assert_null(err);
    return l;
}

static void test_file(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[128];
    struct log_jsonl *l = open_on_file(base, "decisions.jsonl", path, sizeof(path));
    struct egress_event ev = spec_egress();
    /* One line written first: once it is in the file, the writer thread
     * has had its first round and sleeps, so the lines below wait for the
     * round's end as on a running gateway. Without it a thread that starts
     * late takes them in its first round, and the third fits (1 run in 150
     * on a loaded core, seen in a CI rehearsal). */
    log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    /* Room for two lines: the third, while they wait for the round's end
     * (the loop does not turn here), is dropped, and the log is told
     * unwritable (/healthz) until all that waits is written. */
    log_jsonl_set_pending_max(l, 2 * strlen(spec_line1));
    for (int i = 0; i < 3; i++)
        log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_dropped(l), 1);
    assert_string_equal(log_jsonl_error(l), OVER_CAP_TEXT);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    assert_null(log_jsonl_error(l));
    log_jsonl_set_pending_max(l, 0);
    size_t len;
    char *got = slurp(path, &len);
    assert_int_equal(len, 3 * strlen(spec_line1));
    assert_memory_equal(got, spec_line1, strlen(spec_line1));
    free(got);

    /* Rotation: rename, reopen, the next line goes to a new file. */
    char rotated[160];
    snprintf(rotated, sizeof(rotated), "%s.1", path);
    assert_int_equal(rename(path, rotated), 0);
    assert_int_equal(log_jsonl_reopen(l), 0);
    log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    got = slurp(path, &len);
    assert_int_equal(len, strlen(spec_line1));
    free(got);
    got = slurp(rotated, &len);
    assert_int_equal(len, 3 * strlen(spec_line1));
    free(got);

    /* A reopen that fails keeps the old descriptor. */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(chmod(tmpdir, 0500), 0);
    if (geteuid() != 0) {
        assert_int_equal(log_jsonl_reopen(l), -1);
        log_jsonl_on_event(&ev, l); /* goes to the unlinked file, no crash */
        assert_int_equal(log_jsonl_flush(l, 1000), 0);
    }
    assert_int_equal(chmod(tmpdir, 0700), 0);

    /* A long line (past the writer's stack buffer) is written whole. */
    char *long_path = malloc(10001);
    memset(long_path, 'p', 10000);
    long_path[10000] = '\0';
    ev.path = long_path;
    assert_int_equal(log_jsonl_reopen(l), 0);
    log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    got = slurp(path, &len);
    assert_int_equal(len, strlen(spec_line1) - 4 + 10002);
    free(got);
    free(long_path);

    assert_int_equal(log_jsonl_dropped(l), 1); /* the one over the cap, above */
    assert_int_equal(log_jsonl_close(l), 1);   /* what run's summary is told */
    assert_int_equal(log_jsonl_close(NULL), 0);
    event_base_free(base);
}

/* A string of <n> bytes, <c> each, but for <head> at its start. */
static char *repeated(const char *head, char c, size_t n)
{
    char *s = malloc(n + 1);
    assert_non_null(s);
    memset(s, c, n);
    memcpy(s, head, strlen(head));
    s[n] = '\0';
    return s;
}

/* The string <key> of <o> (a JSON object), or "(not a string)". */
static const char *json_str(const json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v != NULL ? v : "(not a string)";
}

/* A line too long for a heap buffer of its own (past LINE_MAX_LEN: no
 * request of the gate's makes one; the same way goes a line whose buffer
 * no memory is left for) was dropped, its decision unlogged, counted but
 * told nowhere else. It is written cut instead: each string at most 256
 * bytes of JSON, cut between two characters (never inside an escape or a
 * UTF-8 sequence), the keys cut named in a last "cut" field. */
static void test_a_line_too_long_is_written_cut(void **state)
{
    size_t big = 17u * 1024 * 1024;
    char *long_path = repeated("/", 'p', big);
    (void)state;
    struct event_base *base = event_base_new();
    char path[128];
    struct log_jsonl *l = open_on_file(base, "cut.jsonl", path, sizeof(path));
    char *owner = repeated("", '\x01', 1024); /* 6 bytes of JSON each */
    char *host = malloc(401);
    for (int i = 0; i < 200; i++)
        memcpy(host + 2 * i, "\xc3\xa9", 2); /* U+00E9, 2 bytes each */
    host[400] = '\0';
    struct egress_event ev = spec_egress();
    ev.method = "GET";
    ev.scheme = "http";
    ev.path = long_path;
    ev.owner = owner;
    ev.host = host;
    ev.verdict = VERDICT_DENY;
    ev.reason = REASON_NOT_IN_POLICY;
    log_jsonl_on_event(&ev, l);
    char *detail = repeated("", 'd', big);
    struct alert a = {.kind = ALERT_FIRST_CONTACT,
                      .severity = SEVERITY_INFO,
                      .agent = "ci-bot",
                      .host = "api.github.com",
                      .tier = TIER_NONE,
                      .id = "c17.1",
                      .detail = detail};
    char alert_line[8192]; /* watch.c's ALERT_LINE_MAX */
    size_t alert_n = log_jsonl_format_alert(&a, alert_line, sizeof(alert_line));
    assert_true(alert_n < sizeof(alert_line));
    log_jsonl_write_line(l, alert_line, alert_n);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    assert_int_equal(log_jsonl_dropped(l), 0);
    assert_null(log_jsonl_error(l));

    size_t len;
    char *got = slurp(path, &len);
    char *nl = memchr(got, '\n', len);
    assert_non_null(nl);
    assert_true((size_t)(nl - got) < LINE_STACK);
    json_error_t jerr;
    json_t *line = json_loadb(got, (size_t)(nl - got), 0, &jerr);
    assert_non_null(line);
    assert_string_equal(json_str(line, "event"), "agent_egress");
    assert_string_equal(json_str(line, "id"), "c17.1");
    assert_string_equal(json_str(line, "decision"), "deny");
    assert_string_equal(json_str(line, "reason"), "not_in_policy");
    assert_int_equal(strlen(json_str(line, "path")), 256);
    assert_memory_equal(json_str(line, "path"), long_path, 256);
    assert_int_equal(strlen(json_str(line, "owner")), 42); /* 42 escapes: 252 bytes */
    assert_int_equal(strlen(json_str(line, "host")), 256); /* 128 characters whole */
    json_t *cut = json_object_get(line, "cut");
    assert_int_equal(json_array_size(cut), 3);
    assert_string_equal(json_string_value(json_array_get(cut, 0)), "host");
    assert_string_equal(json_string_value(json_array_get(cut, 1)), "path");
    assert_string_equal(json_string_value(json_array_get(cut, 2)), "owner");
    json_decref(line);

    json_t *alert = json_loadb(nl + 1, len - (size_t)(nl + 1 - got), 0, &jerr);
    assert_non_null(alert);
    assert_string_equal(json_str(alert, "event"), "alert");
    assert_int_equal(strlen(json_str(alert, "detail")), 256);
    assert_int_equal(json_array_size(json_object_get(alert, "cut")), 1);
    json_decref(alert);
    free(got);
    free(detail);
    free(host);
    free(owner);
    free(long_path);
    log_jsonl_close(l);
    event_base_free(base);
}

/* A file gets whole lines at each write, also when many lines wait (the end
 * lines of a busy loop round, more than the DRAIN_IOV pieces of the buffer
 * hold): an external truncate between two writes (logrotate's copytruncate)
 * then never leaves half a line at the start of the truncated file. */
static void test_file_writes_end_at_a_line(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[128];
    struct log_jsonl *l = open_on_file(base, "round.jsonl", path, sizeof(path));
    struct egress_event end = spec_end();
    const size_t lines = 2000;
    for (size_t i = 0; i < lines; i++) /* one round: they wait for its end */
        log_jsonl_on_event(&end, l);
    writev_mid_line = 0;
    event_base_loop(base, EVLOOP_NONBLOCK); /* the round's end: the writer thread woken */
    assert_int_equal(log_jsonl_flush(l, 10000), 0);
    assert_int_equal(log_jsonl_pending_bytes(l), 0);
    assert_int_equal(writev_mid_line, 0);
    size_t len;
    char *got = slurp(path, &len);
    assert_int_equal(len, lines * strlen(spec_line2));
    for (size_t off = 0; off < len; off += strlen(spec_line2))
        assert_memory_equal(got + off, spec_line2, strlen(spec_line2));
    free(got);
    log_jsonl_close(l);
    event_base_free(base);
}

/* A write a full file took part of (here RLIMIT_FSIZE: EFBIG, as a full
 * disk's ENOSPC), then logrotate's copytruncate: the file is truncated in
 * place (the same inode, no reopen). The line goes whole to the truncated
 * file once writes go through, not its rest alone: the file starts at a
 * line's start. */
static void test_truncated_file_gets_a_cut_line_whole(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[128];
    struct log_jsonl *l = open_on_file(base, "truncated.jsonl", path, sizeof(path));
    const size_t line = strlen(spec_line1);
    struct rlimit was, small;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
    small = was;
    small.rlim_cur = line + line / 2; /* the second line half fits */
    void (*xfsz)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    log_jsonl_write_line(l, spec_line1, line);
    log_jsonl_write_line(l, spec_line1, line);
    event_base_loop(base, EVLOOP_NONBLOCK); /* the round's end: handed to the writer */
    /* The writer thread writes them: until its write past the limit fails
     * (its retry is a second away). */
    for (int i = 0; i < 10000 && log_jsonl_error(l) == NULL; i++)
        usleep(1000);
    assert_non_null(log_jsonl_error(l));
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
    signal(SIGXFSZ, xfsz);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, line + line / 2); /* half of the second line */
    assert_int_equal(truncate(path, 0), 0);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    size_t len;
    char *got = slurp(path, &len);
    assert_int_equal(len, line);
    assert_memory_equal(got, spec_line1, line);
    free(got);
    log_jsonl_close(l);
    event_base_free(base);
}

/* Opens a log on <name> whose writes wait, once the writer thread is in
 * one (<*entered> read), until the gate's write end (<*gate>) is closed. */
static struct log_jsonl *open_gated(struct event_base *base, const char *name, char *path,
                                    size_t cap, int *gate, int *entered)
{
    int g[2], e[2];
    assert_int_equal(pipe(g), 0);
    assert_int_equal(pipe(e), 0);
    struct log_jsonl *l = open_on_file(base, name, path, cap);
    assert_non_null(l->fw); /* a regular file: its writes are the thread's */
    writev_gate_fd = g[0];
    writev_entered_fd = e[1];
    *gate = g[1];
    *entered = e[0];
    return l;
}

/* The threads of this process. */
static int threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* A file write that waits in the kernel (a hung NFS server, the inode lock
 * another process holds) waits on the writer thread, never on the loop:
 * the loop's appends return meanwhile, their lines wait in memory (the cap
 * applies, what is past it dropped and counted) and go, in order, once the
 * write returns. */
static void test_file_write_waits_off_the_loop(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[128];
    int gate, entered;
    struct log_jsonl *l = open_gated(base, "stuck.jsonl", path, sizeof(path), &gate, &entered);
    struct egress_event ev = spec_egress(), end = spec_end();
    const size_t n1 = strlen(spec_line1), n2 = strlen(spec_line2);
    char b;
    log_jsonl_on_event(&ev, l);
    event_base_loop(base, EVLOOP_NONBLOCK);    /* the round's end: handed over */
    assert_int_equal(read(entered, &b, 1), 1); /* the thread waits in writev() */
    for (int i = 0; i < 10; i++) {
        log_jsonl_on_event(&end, l);
        log_jsonl_on_event(&ev, l);
    }
    event_base_loop(base, EVLOOP_NONBLOCK);
    assert_int_equal(log_jsonl_pending_bytes(l), n1 + 10 * (n1 + n2));
    log_jsonl_set_pending_max(l, log_jsonl_pending_bytes(l) + n1); /* room for one */
    log_jsonl_on_event(&ev, l);
    log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_dropped(l), 1);
    assert_int_equal(log_jsonl_flush(l, 20), -1); /* the write still waits */
    close(gate);                                  /* it returns */
    assert_int_equal(log_jsonl_flush(l, 10000), 0);
    size_t len;
    char *got = slurp(path, &len);
    assert_int_equal(len, 12 * n1 + 10 * n2);
    assert_memory_equal(got, spec_line1, n1);
    for (size_t i = 0, off = n1; i < 10; i++, off += n1 + n2) {
        assert_memory_equal(got + off, spec_line2, n2);
        assert_memory_equal(got + off + n2, spec_line1, n1);
    }
    assert_memory_equal(got + n1 + 10 * (n1 + n2), spec_line1, n1);
    free(got);
    assert_int_equal(log_jsonl_dropped(l), 1);
    log_jsonl_close(l);
    writev_gate_fd = writev_entered_fd = -1;
    close(entered);
    event_base_free(base);
}

static int written_calls;

static void count_written(void *arg)
{
    (void)arg;
    written_calls++;
}

/* Write-ahead: lines are numbered as handed over; log_jsonl_wait() says
 * no while the thread's write of a line waits, and the loop's callback
 * runs once it returned, once for all the lines its round wrote. */
static void test_wait_says_when_a_line_is_in_the_file(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[128];
    int gate, entered;
    struct log_jsonl *l = open_gated(base, "ahead.jsonl", path, sizeof(path), &gate, &entered);
    struct egress_event ev = spec_egress();
    char b;
    written_calls = 0;
    log_jsonl_on_written(l, count_written, NULL);
    assert_int_equal(log_jsonl_seq(l), 0);
    assert_true(log_jsonl_wait(l, 0)); /* nothing to wait for */
    log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_seq(l), 1);
    assert_false(log_jsonl_wait(l, 1));        /* not handed over before the round's end */
    event_base_loop(base, EVLOOP_NONBLOCK);    /* the round's end */
    assert_int_equal(read(entered, &b, 1), 1); /* the thread waits in writev() */
    assert_false(log_jsonl_wait(l, 1));
    for (int i = 0; i < 5; i++)
        log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_seq(l), 6);
    assert_false(log_jsonl_wait(l, 6));
    event_base_loop(base, EVLOOP_NONBLOCK);
    assert_int_equal(written_calls, 0); /* not while the write waits */
    close(gate);                        /* it returns */
    while (!log_jsonl_wait(l, 6)) {     /* line 1, then 2 to 6 in a round */
        int before = written_calls;
        event_base_loop(base, EVLOOP_ONCE); /* the thread's wake-up */
        assert_true(written_calls > before);
    }
    /* The thread may have written all six before the loop's first look
     * (the loop then did not wait): the wake-up that line 1 asked for is
     * pending still, and runs now. */
    event_base_loop(base, EVLOOP_NONBLOCK);
    assert_true(written_calls >= 1 && written_calls <= 2);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 6 * strlen(spec_line1)); /* in the file, not in memory */
    log_jsonl_close(l);
    writev_gate_fd = writev_entered_fd = -1;
    close(entered);
    event_base_free(base);
}

/* When set, log_jsonl_wait() lets the writer write the line it found
 * unwritten and end its round (the thread waiting for more) before it
 * takes the lock: the window where a wake-up can be lost, made wide. */
static bool seam_lets_writer_finish;

/* How long the seam waits for the writer's round to end: far more than a
 * round takes on a loaded machine. Giving up sooner, silently, would leave
 * the window unexercised rather than fail. */
#define SEAM_WAIT_MS 10000

static void wait_seam(struct file_writer *fw, uint64_t seq)
{
    if (!seam_lets_writer_finish)
        return;
    /* Line <seq> if it was handed over; else the writer can write only up
     * to the last handed over (the rest waits for the loop's next turn). */
    uint64_t written = seq < fw->handed ? seq : fw->handed;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        pthread_mutex_lock(&fw->mu);
        bool idle = fw->waiting && fw->incoming_lines == 0;
        pthread_mutex_unlock(&fw->mu);
        if (idle && atomic_load(&fw->gate) >= written)
            return;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long ms =
            (now.tv_sec - start.tv_sec) * 1000LL + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (ms > SEAM_WAIT_MS) {
            seam_lets_writer_finish = false; /* the tests after this one run without it */
            fail_msg("the writer did not write line %llu and end its round within %d ms",
                     (unsigned long long)written, SEAM_WAIT_MS);
        }
        usleep(100);
    }
}

static bool wake_guard_fired;

static void wake_guard(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    wake_guard_fired = true;
}

/* Waits for line <seq> as the gateway does, asking again only once woken
 * (the callback); false when <guard> (armed here) fired first. */
static bool woken_for(struct event_base *base, struct log_jsonl *l, uint64_t seq,
                      struct event *guard)
{
    struct timeval ten_s = {10, 0};
    bool woken = false;
    evtimer_add(guard, &ten_s);
    while (!woken && !wake_guard_fired) {
        int before = written_calls;
        event_base_loop(base, EVLOOP_ONCE);
        woken = written_calls > before && log_jsonl_wait(l, seq);
    }
    evtimer_del(guard);
    return woken;
}

/* Rounds of the race between the loop's check and the writer's round. */
#define WAKE_ROUNDS 5000

/* Appends 1 to 3 decision lines (one loop round's), the number drawn from
 * <*seed>. */
static void append_some(struct log_jsonl *l, unsigned *seed)
{
    const struct egress_event ev = spec_egress();
    int lines = 1 + (int)((*seed = *seed * 1103515245u + 12345u) >> 16) % 3;
    for (int j = 0; j < lines; j++)
        log_jsonl_on_event(&ev, l);
}

/* No wake-up is lost, neither the writer's nor the loop's. Lines are handed
 * over at a loop round's end (on_flush), while the writer waits or while it
 * writes the lines of the round before (every fourth round hands over
 * twice without waiting in between). The loop checks a line the writer is
 * writing at that moment, at varying points of the writer's round (a spin
 * of varying length between the hand-over and the check; every other
 * round, the seam lets the writer end its round between the loop's first
 * look and its lock), or, as the gateway mostly does, before the round's
 * end has handed the line over (every fourth round, the wake-up asked for
 * first); each time it either finds the line written or is woken once it
 * is. A lost wake-up of either side leaves the loop waiting for a line
 * with no later line to wake it: the guard (a hang guard, not a claim on
 * time) fires then. */
static void test_no_wake_up_is_lost(void **state)
{
    struct event_base *base = event_base_new();
    struct event *guard = evtimer_new(base, wake_guard, NULL);
    char path[128];
    struct log_jsonl *l = open_on_file(base, "race.jsonl", path, sizeof(path));
    unsigned waited = 0, asked_first = 0, seed = 1;
    (void)state;
    assert_non_null(l->fw);
    log_jsonl_on_written(l, count_written, NULL);
    wake_guard_fired = false;
    for (int i = 0; i < WAKE_ROUNDS && !wake_guard_fired; i++) {
        append_some(l, &seed);
        if (i % 4 == 2) { /* the gateway's order: the wait asked before the round's end */
            uint64_t seq = log_jsonl_seq(l);
            assert_false(log_jsonl_wait(l, seq)); /* not handed over yet */
            asked_first++;
            assert_true(woken_for(base, l, seq, guard)); /* its first turn hands it over */
            continue;
        }
        if (i % 4 == 3) { /* a round handed over, the next one while it is written */
            event_base_loop(base, EVLOOP_NONBLOCK);
            append_some(l, &seed);
        }
        event_base_loop(base, EVLOOP_NONBLOCK); /* the round's end: handed over */
        uint64_t seq = log_jsonl_seq(l);
        for (volatile unsigned spin = (seed >> 8) % 4096; spin > 0; spin--)
            continue;
        seam_lets_writer_finish = i % 2 == 1;
        bool open = log_jsonl_wait(l, seq);
        seam_lets_writer_finish = false;
        if (!open) {
            waited++;
            assert_true(woken_for(base, l, seq, guard)); /* else lost: never woken */
        }
    }
    assert_false(wake_guard_fired);
    assert_true(waited > 0); /* the race was run at all */
    assert_int_equal(asked_first, WAKE_ROUNDS / 4);
    assert_int_equal(log_jsonl_flush(l, 10000), 0);
    event_free(guard);
    log_jsonl_close(l);
    event_base_free(base);
}

/* Waits until <fw> waits for lines, all taken (a hang guard: 10 s). */
static void wait_writer_idle(struct file_writer *fw)
{
    bool idle = false;
    for (int i = 0; i < 100000 && !idle; i++) {
        pthread_mutex_lock(&fw->mu);
        idle = fw->waiting && fw->incoming_lines == 0;
        pthread_mutex_unlock(&fw->mu);
        if (!idle)
            usleep(100);
    }
    assert_true(idle);
}

/* The lines of one loop round, decision lines as well as end lines, wake
 * the waiting writer once, at the round's end, and go in one write; the
 * decision that asked for its wake-up is let go by that write. */
static void test_a_round_wakes_the_writer_once(void **state)
{
    struct event_base *base = event_base_new();
    struct event *guard = evtimer_new(base, wake_guard, NULL);
    char path[128];
    struct log_jsonl *l = open_on_file(base, "round-wake.jsonl", path, sizeof(path));
    struct egress_event ev = spec_egress(), end = spec_end();
    (void)state;
    assert_non_null(l->fw);
    written_calls = 0;
    log_jsonl_on_written(l, count_written, NULL);
    wait_writer_idle(l->fw);
    uint32_t kicks = atomic_load(&l->fw->wake_word); /* the writer's wake-ups so far */
    writev_calls = 0;
    for (int i = 0; i < 3; i++) {
        log_jsonl_on_event(&ev, l);
        log_jsonl_on_event(&end, l);
    }
    uint64_t seq = log_jsonl_seq(l);
    assert_int_equal(seq, 6);
    assert_int_equal(atomic_load(&l->fw->wake_word), kicks); /* none while the round runs */
    assert_false(log_jsonl_wait(l, 5)); /* the last decision asks for its wake-up */
    wake_guard_fired = false;
    assert_true(woken_for(base, l, 5, guard)); /* the round's end, then the write */
    assert_int_equal(atomic_load(&l->fw->wake_word), kicks + 1);
    assert_int_equal(writev_calls, 1); /* the six lines together */
    assert_int_equal(written_calls, 1);
    assert_int_equal(log_jsonl_flush(l, 10000), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 3 * (strlen(spec_line1) + strlen(spec_line2)));
    event_free(guard);
    log_jsonl_close(l);
    event_base_free(base);
}

/* A write that fails (a full disk; here the file-size limit) lets what
 * waits go, as the error policy says (a log that cannot be written does not
 * stop traffic): the waiting loop is woken, and log_jsonl_wait() says yes
 * while writes fail; its lines wait in memory and go once a write can. */
static void test_wait_lets_go_when_a_write_fails(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[128];
    struct log_jsonl *l = open_on_file(base, "failing.jsonl", path, sizeof(path));
    struct egress_event ev = spec_egress();
    struct rlimit was, none;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
    none = was;
    none.rlim_cur = 0;
    void (*xfsz)(int) = signal(SIGXFSZ, SIG_IGN);
    written_calls = 0;
    log_jsonl_on_written(l, count_written, NULL);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &none), 0);
    log_jsonl_on_event(&ev, l);
    assert_false(log_jsonl_wait(l, 1)); /* not handed over before the round's end */
    struct event *guard = evtimer_new(base, wake_guard, NULL);
    wake_guard_fired = false;
    assert_true(woken_for(base, l, 1, guard)); /* handed over, woken by the failed write */
    assert_int_equal(written_calls, 1);
    event_free(guard);
    assert_true(log_jsonl_wait(l, 1));
    assert_non_null(log_jsonl_error(l));
    log_jsonl_on_event(&ev, l);
    assert_true(log_jsonl_wait(l, 2)); /* while writes fail */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
    signal(SIGXFSZ, xfsz);
    assert_int_equal(log_jsonl_flush(l, 10000), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 2 * strlen(spec_line1));
    log_jsonl_close(l);
    event_base_free(base);
}

/* log_jsonl_close() while the thread's write waits: it returns (the stop
 * is not held), naming the lines not written, and leaves the log to the
 * thread, which frees it once its write returns. */
static void test_close_while_a_write_waits(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[128];
    int gate, entered;
    int before = threads();
    struct log_jsonl *l =
        open_gated(base, "stuck-close.jsonl", path, sizeof(path), &gate, &entered);
    struct egress_event ev = spec_egress();
    char b;
    log_jsonl_on_event(&ev, l);
    event_base_loop(base, EVLOOP_NONBLOCK); /* the round's end: handed over */
    assert_int_equal(read(entered, &b, 1), 1);
    log_jsonl_on_event(&ev, l);
    log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_flush(l, 20), -1);
    /* "3 line(s) ... not written at exit", and so counted as lost */
    assert_int_equal(log_jsonl_close(l), 3);
    /* Left to itself, the thread writes its one line once the gate
     * closes, frees the log and ends. */
    close(gate);
    for (int i = 0; i < 10000 && threads() > before; i++)
        usleep(1000);
    assert_int_equal(threads(), before);
    writev_gate_fd = writev_entered_fd = -1;
    close(entered);
    event_base_free(base);
}

static void test_open_fails(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char *err = NULL;
    struct log_jsonl *l = log_jsonl_open(base, "/nonexistent-dir/x/log.jsonl", 0, &err);
    assert_null(l);
    assert_non_null(err);
    assert_non_null(strstr(err, "/nonexistent-dir/x/log.jsonl"));
    free(err);
    event_base_free(base);
}

/* A regular file whose writer thread cannot be started is not opened: the
 * event loop writing it would stop the whole gateway whenever the file
 * system does not answer (/healthz and SIGTERM with it). */
static void test_file_without_a_writer_thread_is_refused(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[128], *err = NULL;
    snprintf(path, sizeof(path), "%s/no-writer.jsonl", tmpdir);
    threads_refused = true;
    struct log_jsonl *l = log_jsonl_open(base, path, 0, &err);
    threads_refused = false;
    assert_null(l);
    assert_non_null(err);
    assert_non_null(strstr(err, "no-writer.jsonl: cannot open log (its writer thread cannot be "
                                "started: written on the event loop, a file system that does "
                                "not answer would stop the gateway): Resource temporarily "
                                "unavailable"));
    free(err);
    event_base_free(base);
}

/* Makes the FIFO <name> in the test's folder, its path in <path>. */
static void make_fifo(const char *name, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", tmpdir, name);
    assert_int_equal(mkfifo(path, 0600), 0);
}

/* A log on the FIFO <name>, made in the test's folder (its path in <path>),
 * whose reader is <*rd>. */
static struct log_jsonl *open_on_fifo(struct event_base *base, const char *name, char *path,
                                      size_t cap, int *rd)
{
    char *err = NULL;
    make_fifo(name, path, cap);
    *rd = open(path, O_RDONLY | O_NONBLOCK);
    assert_true(*rd >= 0);
    struct log_jsonl *l = log_jsonl_open(base, path, 0, &err);
    assert_non_null(l);
    return l;
}

/* A FIFO no one reads cannot be opened without waiting (ENXIO): the
 * error says so, not only "No such device or address". */
static void test_fifo_without_reader_is_named(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[128], *err = NULL;
    make_fifo("unread.fifo", path, sizeof(path));
    struct log_jsonl *l = log_jsonl_open(base, path, 0, &err);
    assert_null(l);
    assert_non_null(err);
    assert_non_null(strstr(err, "unread.fifo: cannot open log (a FIFO no one reads: start its "
                                "reader first): No such device or address"));
    free(err);
    event_base_free(base);
}

/* A log on the FIFO <name> (its path in <path>) whose path is then a
 * regular file, reopened with no thread to be had: the loop writes it. */
static struct log_jsonl *open_loop_written(struct event_base *base, const char *name, char *path,
                                           size_t cap)
{
    int rd;
    struct log_jsonl *l = open_on_fifo(base, name, path, cap, &rd);
    assert_int_equal(unlink(path), 0);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600); /* a regular file now */
    assert_true(fd >= 0);
    close(fd);
    threads_refused = true;
    assert_int_equal(log_jsonl_reopen(l), 0);
    threads_refused = false;
    close(rd);
    assert_null(l->fw);
    return l;
}

/* A FIFO log whose path is a regular file at a reopen, no writer thread to
 * be had for it (threads refused): the loop writes the file, the only
 * descriptor left, and says it is unhealthy until a reopen starts its
 * thread; it looks at the file's link count too, as a writer does: a file
 * deleted meanwhile is told, until the reopen. */
static void test_a_reopen_to_a_file_without_a_writer_thread(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[128];
    struct log_jsonl *l = open_loop_written(base, "then-a-file", path, sizeof(path));
    const char *no_writer = "its writer thread cannot be started: the event loop writes its "
                            "file, and a file system that does not answer would stop the gateway "
                            "(send SIGHUP to try again)";
    assert_non_null(log_jsonl_error(l));
    assert_string_equal(log_jsonl_error(l), no_writer);
    struct egress_event ev = spec_egress();
    log_jsonl_on_event(&ev, l);
    size_t len;
    char *got = slurp(path, &len);
    assert_int_equal(len, strlen(spec_line1)); /* written by the loop, at once */
    free(got);
    /* Deleted: told once a write finds it so, a look at most once a second
     * (lines written until then, 3 s at most). */
    assert_int_equal(unlink(path), 0);
    const char *unlinked = "its file was deleted or moved: send SIGHUP to reopen";
    struct timespec until = monotonic_after(3000);
    while (!passed(&until) &&
           (log_jsonl_error(l) == NULL || strcmp(log_jsonl_error(l), unlinked) != 0)) {
        log_jsonl_on_event(&ev, l);
        poll(NULL, 0, 20);
    }
    assert_string_equal(log_jsonl_error(l), unlinked);
    /* The reopen, a thread to be had now: the path's new file, its writer. */
    assert_int_equal(log_jsonl_reopen(l), 0);
    assert_non_null(l->fw);
    assert_null(log_jsonl_error(l));
    log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    got = slurp(path, &len);
    assert_int_equal(len, strlen(spec_line1));
    free(got);
    assert_int_equal(log_jsonl_dropped(l), 0);
    assert_int_equal(log_jsonl_close(l), 0); /* every line written */
    event_base_free(base);
}

/* The loop-written file of the test above, whose writes fail with EAGAIN
 * (a FUSE or network file system that would block). poll() says such a
 * file is always writable, so the exit's flush retried at once: about a
 * hundred thousand writev() calls a second, a core spent until its time
 * was out. Its retries, as the loop's own, now come every LOOP_AGAIN_MS;
 * the line waits and goes once the file takes it. */
static void test_a_loop_written_file_that_would_block_is_retried_paced(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[128];
    struct log_jsonl *l = open_loop_written(base, "then-a-blocking-file", path, sizeof(path));
    writev_eagain_fd = l->fd;
    struct egress_event ev = spec_egress();
    log_jsonl_on_event(&ev, l); /* meets EAGAIN: waits in <pending> */
    assert_int_equal(log_jsonl_pending_bytes(l), strlen(spec_line1));
    /* The loop's retries: one a LOOP_AGAIN_MS, 3 or 4 in 350 ms */
    writev_calls = 0;
    struct timeval run = {0, 350000};
    event_base_loopexit(base, &run);
    event_base_dispatch(base);
    unsigned loop_calls = writev_calls;
    assert_in_range(loop_calls, 1, 5);
    /* The flush's: as many in its 350 ms, not one after another */
    writev_calls = 0;
    assert_int_equal(log_jsonl_flush(l, 350), -1);
    unsigned flush_calls = writev_calls;
    print_message("writev() calls in 350 ms: %u by the loop, %u by the flush\n", loop_calls,
                  flush_calls);
    assert_in_range(flush_calls, 1, 6);
    writev_eagain_fd = -1;
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    size_t len;
    char *got = slurp(path, &len);
    assert_int_equal(len, strlen(spec_line1));
    assert_memory_equal(got, spec_line1, len);
    free(got);
    assert_int_equal(log_jsonl_dropped(l), 0);
    log_jsonl_close(l);
    event_base_free(base);
}

/* LOG_JSONL_NO_LINKS (run's log and alerts files): a symbolic link as the
 * file or as a folder on its way is refused, at the open and at a reopen,
 * and nothing is created at the link's target. */
static void test_no_links(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char real[128], target[128], link_file[128], link_dir[128], via_dir[160], *err = NULL;
    snprintf(real, sizeof(real), "%s/real", tmpdir);
    snprintf(target, sizeof(target), "%s/real/target.jsonl", tmpdir);
    snprintf(link_file, sizeof(link_file), "%s/file-link.jsonl", tmpdir);
    snprintf(link_dir, sizeof(link_dir), "%s/dir-link", tmpdir);
    snprintf(via_dir, sizeof(via_dir), "%s/dir-link/target.jsonl", tmpdir);
    assert_int_equal(mkdir(real, 0700), 0);
    assert_int_equal(symlink(target, link_file), 0);
    assert_int_equal(symlink(real, link_dir), 0);

    struct log_jsonl *l = log_jsonl_open(base, link_file, LOG_JSONL_NO_LINKS, &err);
    assert_null(l);
    assert_non_null(err);
    assert_non_null(strstr(err, "a symbolic link on its path is refused"));
    free(err);
    err = NULL;
    l = log_jsonl_open(base, via_dir, LOG_JSONL_NO_LINKS, &err);
    assert_null(l);
    free(err);
    err = NULL;
    assert_int_equal(access(target, F_OK), -1);

    /* Without the flag a link is followed (serve's --log may be one). */
    l = log_jsonl_open(base, via_dir, 0, &err);
    assert_non_null(l);
    log_jsonl_close(l);
    assert_int_equal(unlink(target), 0);

    /* A file replaced by a link after the open: the reopen refuses it and
     * the log keeps its descriptor. */
    char path[128];
    snprintf(path, sizeof(path), "%s/plain.jsonl", tmpdir);
    l = log_jsonl_open(base, path, LOG_JSONL_NO_LINKS, &err);
    assert_non_null(l);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(symlink(target, path), 0);
    assert_int_equal(log_jsonl_reopen(l), -1);
    assert_int_equal(access(target, F_OK), -1);
    log_jsonl_close(l);

    unlink(path);
    unlink(link_file);
    unlink(link_dir);
    rmdir(real);
    event_base_free(base);
}

/* Opens the log on standard output redirected to a fresh pipe; returns the
 * read end. Standard output is restored before returning. */
static struct log_jsonl *open_on_pipe(struct event_base *base, int *rd)
{
    int p[2], saved;
    char *err = NULL;
    assert_int_equal(pipe(p), 0);
    fflush(stdout);
    saved = dup(STDOUT_FILENO);
    assert_true(saved >= 0);
    assert_int_equal(dup2(p[1], STDOUT_FILENO), STDOUT_FILENO);
    struct log_jsonl *l = log_jsonl_open(base, "-", 0, &err);
    assert_int_equal(dup2(saved, STDOUT_FILENO), STDOUT_FILENO);
    close(saved);
    close(p[1]);
    assert_non_null(l);
    *rd = p[0];
    return l;
}

struct reader {
    int fd;
    size_t got;
    size_t lines;
    struct event *ev;
};

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct reader *r = arg;
    char buf[65536];
    (void)what;
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) {
        event_del(r->ev);
        return;
    }
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] == '\n')
            r->lines++;
    r->got += (size_t)n;
}

static void stop_loop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

static void test_pipe_never_blocks(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    int rd;
    struct log_jsonl *l = open_on_pipe(base, &rd);
    struct egress_event ev = spec_egress();
    const size_t line = strlen(spec_line1);
    /* Nobody reads: far more than a pipe holds (64 KiB) must not block. */
    const size_t lines = 4000;
    for (size_t i = 0; i < lines; i++)
        log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_dropped(l), 0);
    /* Our own standard output stayed blocking. */
    assert_int_equal(fcntl(STDOUT_FILENO, F_GETFL) & O_NONBLOCK, 0);

    /* Now read on the loop: the EV_WRITE event drains the rest, in order. */
    struct reader r = {.fd = rd};
    assert_int_equal(fcntl(rd, F_SETFL, O_NONBLOCK), 0);
    r.ev = event_new(base, rd, EV_READ | EV_PERSIST, on_readable, &r);
    event_add(r.ev, NULL);
    struct event *t = evtimer_new(base, stop_loop, base);
    for (int spin = 0; spin < 200 && r.got < lines * line; spin++) {
        struct timeval tv = {0, 10000};
        evtimer_add(t, &tv);
        event_base_dispatch(base);
    }
    assert_int_equal(r.got, lines * line);
    assert_int_equal(r.lines, lines);
    assert_int_equal(log_jsonl_flush(l, 0), 0);
    event_free(t);
    event_free(r.ev);
    log_jsonl_close(l);
    close(rd);
    event_base_free(base);
}

static void read_all(int rd, char *buf, size_t cap, size_t *got);

/* Standard output a unix stream socket that standard error shares
 * (systemd's StandardOutput=journal: standard error is the same stream):
 * the relay writes sluice's messages onto it between the log's writes.
 * Lines that waited went out in one send of the whole backlog, which
 * stopped where the socket's room ended, mid-line, and a message written
 * then landed inside that line. They go in sends of whole lines of at most
 * PIPE_BUF bytes now, each of which the socket takes whole or not at all. */
static void test_socket_gets_whole_lines_up_to_pipe_buf(void **state)
{
    (void)state;
    static const char msg[] = "sluice: a message\n";
    struct event_base *base = event_base_new();
    int sv[2], small = 16384, saved;
    char *err = NULL;
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
    fflush(stdout);
    saved = dup(STDOUT_FILENO);
    assert_int_equal(dup2(sv[1], STDOUT_FILENO), STDOUT_FILENO);
    struct log_jsonl *l = log_jsonl_open(base, "-", 0, &err);
    assert_int_equal(dup2(saved, STDOUT_FILENO), STDOUT_FILENO);
    close(saved);
    assert_non_null(l);
    const size_t line = strlen(spec_line1), lines = 600;
    size_t cap = lines * (line + sizeof(msg)) + 1, got = 0, msgs = 0;
    char *buf = malloc(cap);
    writev_longest = 0;
    writev_mid_line = 0;
    for (size_t i = 0; i < lines; i++) /* more than the socket holds: some wait */
        log_jsonl_write_line(l, spec_line1, line);
    assert_true(log_jsonl_pending_bytes(l) > PIPE_BUF);
    assert_int_equal(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
    for (int i = 0; i < 1000 && log_jsonl_pending_bytes(l) > 0; i++) {
        read_all(sv[0], buf, cap - 1, &got);
        log_jsonl_flush(l, 0);
        read_all(sv[0], buf, cap - 1, &got);
        /* the other writer (the relay's blocking write of a message) */
        msgs += send(sv[1], msg, sizeof(msg) - 1, MSG_DONTWAIT) == (ssize_t)sizeof(msg) - 1;
    }
    assert_int_equal(log_jsonl_pending_bytes(l), 0);
    read_all(sv[0], buf, cap - 1, &got);
    buf[got] = '\0';
    size_t seen = 0, seen_msgs = 0;
    for (char *p = buf, *nl; (nl = strchr(p, '\n')) != NULL; p = nl + 1) {
        size_t n = (size_t)(nl + 1 - p);
        if (n == sizeof(msg) - 1 && memcmp(p, msg, n) == 0)
            seen_msgs++;
        else if (n == line && memcmp(p, spec_line1, n) == 0)
            seen++;
        else
            fail_msg("a line cut by the other writer: %.*s", (int)(n < 300 ? n : 300), p);
    }
    assert_int_equal(seen, lines);
    assert_int_equal(seen_msgs, msgs);
    assert_true(writev_longest <= PIPE_BUF);
    assert_int_equal(writev_mid_line, 0);
    free(buf);
    log_jsonl_close(l);
    close(sv[0]);
    close(sv[1]);
    event_base_free(base);
}

/* Lines that waited for a pipe go out in writes of whole lines of at most
 * PIPE_BUF bytes, each atomic: another writer to the same pipe (standard
 * error with `2>&1`) cannot land inside a line. */
static void test_pipe_gets_whole_lines_up_to_pipe_buf(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    int rd;
    struct log_jsonl *l = open_on_pipe(base, &rd);
    const size_t line = strlen(spec_line1), lines = 600;
    char *buf = malloc(lines * line + 1);
    size_t got = 0;
    writev_longest = 0;
    writev_mid_line = 0;
    for (size_t i = 0; i < lines; i++) /* more than the pipe holds: some wait */
        log_jsonl_write_line(l, spec_line1, line);
    assert_true(log_jsonl_pending_bytes(l) > PIPE_BUF);
    assert_int_equal(fcntl(rd, F_SETFL, O_NONBLOCK), 0);
    for (int i = 0; i < 1000 && got < lines * line; i++) {
        read_all(rd, buf, lines * line, &got);
        log_jsonl_flush(l, 0);
    }
    read_all(rd, buf, lines * line, &got);
    assert_int_equal(got, lines * line);
    for (size_t off = 0; off < got; off += line)
        assert_memory_equal(buf + off, spec_line1, line);
    assert_true(writev_longest <= PIPE_BUF);
    assert_int_equal(writev_mid_line, 0);
    free(buf);
    log_jsonl_close(l);
    close(rd);
    event_base_free(base);
}

/* libevent's allocations fail while this is set (event_set_mem_functions(),
 * first thing in main()): a buffer that cannot grow, as when memory runs
 * out. */
static _Atomic bool libevent_nomem;

static void *failing_malloc(size_t n)
{
    return libevent_nomem ? NULL : malloc(n);
}

static void *failing_realloc(void *p, size_t n)
{
    return libevent_nomem ? NULL : realloc(p, n);
}

/* Hands <ev>'s line to <l> while libevent has no memory: the line is
 * dropped, the first, and the log says so (/healthz said ok). */
static void append_without_memory(struct log_jsonl *l, const struct egress_event *ev)
{
    libevent_nomem = true;
    log_jsonl_on_event(ev, l);
    libevent_nomem = false;
    assert_int_equal(log_jsonl_dropped(l), 1);
    assert_non_null(log_jsonl_error(l));
    assert_string_equal(log_jsonl_error(l), NOMEM_TEXT);
}

/* A line dropped for want of memory (no room to append it to what waits)
 * was counted in sluice_log_dropped_lines_total only: /healthz said ok
 * while a decision went unlogged. The log says so now, until what waits
 * after it is written: on a file (its writer thread's) and on a pipe (the
 * loop's). */
static void test_a_line_dropped_for_want_of_memory_makes_the_log_unhealthy(void **state)
{
    struct egress_event ev = spec_egress();
    char path[128];
    (void)state;
    struct event_base *base = event_base_new();
    struct log_jsonl *l = open_on_file(base, "nomem.jsonl", path, sizeof(path));
    log_jsonl_on_event(&ev, l); /* then written: nothing holds a buffer */
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    append_without_memory(l, &ev);
    log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    assert_null(log_jsonl_error(l)); /* memory back, and all that waited is written */
    size_t len;
    free(slurp(path, &len));
    assert_int_equal(len, 2 * strlen(spec_line1));
    log_jsonl_close(l);

    /* The loop's: a line that must wait (the pipe is full) and cannot. */
    int rd;
    l = open_on_pipe(base, &rd);
    for (int i = 0; i < 100000 && log_jsonl_pending_bytes(l) == 0; i++)
        log_jsonl_on_event(&ev, l);
    assert_true(log_jsonl_pending_bytes(l) > 0);
    assert_null(log_jsonl_error(l));              /* a reader behind: nothing lost */
    char *long_path = repeated("/", 'p', 100000); /* past the room the buffer has */
    ev.path = long_path;
    append_without_memory(l, &ev);
    free(long_path);
    log_jsonl_close(l);
    close(rd);
    event_base_free(base);
}

static void test_pending_cap_and_flush(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    int rd;
    struct log_jsonl *l = open_on_pipe(base, &rd);
    struct egress_event ev = spec_egress();
    const size_t line = strlen(spec_line1);

    log_jsonl_set_pending_max(l, 10 * line);
    /* Fill the pipe, then 10 more lines pending, then drops. */
    size_t sent = 0;
    while (log_jsonl_dropped(l) == 0 && sent < 100000) {
        assert_null(log_jsonl_error(l)); /* a reader behind, nothing lost yet */
        log_jsonl_on_event(&ev, l);
        sent++;
    }
    assert_int_equal(log_jsonl_dropped(l), 1);
    assert_string_equal(log_jsonl_error(l), OVER_CAP_TEXT); /* /healthz: lines are lost */
    for (int i = 0; i < 5; i++)
        log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_dropped(l), 6);
    /* Flush cannot finish while nobody reads: it gives up in time, its
     * waits within the 100 ms it is given (counted, not timed: a loaded
     * machine only lengthens each), and not before them (a lower bound on
     * the clock, which load only raises). */
    struct timespec a, b;
    poll_thread = pthread_self();
    poll_asked_ms = 0;
    poll_budget_ms = 100;
    clock_gettime(CLOCK_MONOTONIC, &a);
    assert_int_equal(log_jsonl_flush(l, 100), -1);
    clock_gettime(CLOCK_MONOTONIC, &b);
    poll_budget_ms = -1;
    long ms = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
    assert_true(ms >= 90);
    assert_true(poll_asked_ms > 0); /* it waited for room, rather than spin */

    /* Read everything in a child-free way: drain the pipe while flushing. */
    char buf[65536];
    size_t got = 0;
    assert_int_equal(fcntl(rd, F_SETFL, O_NONBLOCK), 0);
    for (int spin = 0; spin < 1000; spin++) {
        ssize_t n;
        while ((n = read(rd, buf, sizeof(buf))) > 0)
            got += (size_t)n;
        if (log_jsonl_flush(l, 10) == 0) {
            while ((n = read(rd, buf, sizeof(buf))) > 0)
                got += (size_t)n;
            break;
        }
    }
    assert_int_equal(got, (sent - 1) * line);
    assert_null(log_jsonl_error(l)); /* all that waited is written */
    log_jsonl_set_pending_max(l, 0);
    log_jsonl_close(l);
    close(rd);
    event_base_free(base);
}

/* How many times <said> holds <what>. */
static int times_said(const char *said, const char *what)
{
    int n = 0;
    for (const char *p = said; (p = strstr(p, what)) != NULL; p += strlen(what))
        n++;
    return n;
}

/* Lines dropped past the cap (a stalled log shipper on `--log -`, a file
 * that does not take its writes) are told on standard error at the first
 * drop of a spell, once until all that waited is written, on the loop's
 * pipe and on a file's writer alike: /healthz and /metrics told them, a
 * serve without --admin nobody until its exit. */
static void test_drops_are_told_on_stderr_once_a_spell(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct egress_event ev = spec_egress();
    const size_t line = strlen(spec_line1);
    static char said[8192];
    struct stderr_capture cap;
    const char told[] = "sluice: log (stdout): " OVER_CAP_TEXT "\n";

    /* a pipe nobody reads: its lines wait on the loop */
    int rd;
    struct log_jsonl *l = open_on_pipe(base, &rd);
    log_jsonl_set_pending_max(l, 10 * line);
    stderr_capture_begin(&cap);
    for (int spell = 0; spell < 2; spell++) {
        for (int i = 0; i < 100000 && log_jsonl_dropped(l) < 5 * (uint64_t)(spell + 1); i++)
            log_jsonl_on_event(&ev, l);
        /* the reader takes all that waits: the spell ends */
        assert_int_equal(fcntl(rd, F_SETFL, O_NONBLOCK), 0);
        char buf[65536];
        for (int i = 0; i < 1000 && log_jsonl_flush(l, 10) != 0; i++)
            while (read(rd, buf, sizeof(buf)) > 0)
                ;
        assert_null(log_jsonl_error(l));
    }
    stderr_capture_end(&cap, said, sizeof(said));
    assert_int_equal(times_said(said, told), 2);
    log_jsonl_set_pending_max(l, 0);
    log_jsonl_close(l);
    close(rd);

    /* a file whose write waits in the kernel: its writer thread's */
    char path[128];
    int gate, entered;
    char b;
    l = open_gated(base, "told.jsonl", path, sizeof(path), &gate, &entered);
    log_jsonl_on_event(&ev, l);
    event_base_loop(base, EVLOOP_NONBLOCK);    /* handed over */
    assert_int_equal(read(entered, &b, 1), 1); /* the thread waits in writev() */
    log_jsonl_set_pending_max(l, 3 * line);
    stderr_capture_begin(&cap);
    for (int i = 0; i < 6; i++)
        log_jsonl_on_event(&ev, l);
    event_base_loop(base, EVLOOP_NONBLOCK);
    stderr_capture_end(&cap, said, sizeof(said));
    assert_int_equal(log_jsonl_dropped(l), 4);
    char file_told[256];
    snprintf(file_told, sizeof(file_told), "sluice: log %s: " OVER_CAP_TEXT "\n", path);
    assert_int_equal(times_said(said, file_told), 1);
    close(gate); /* the write returns */
    assert_int_equal(log_jsonl_flush(l, 10000), 0);
    log_jsonl_set_pending_max(l, 0);
    log_jsonl_close(l);
    writev_gate_fd = writev_entered_fd = -1;
    close(entered);
    unlink(path);
    event_base_free(base);
}

/* The messages a log tells on standard error show its path as the open's
 * refusal does, each control character \ooo: a path holding a line end
 * (a name an operator's template made) wrote a line of its own there, a
 * "sluice: ..." line no one said. Here a link so named to /dev/full: its
 * failed write, its lines dropped past the cap, those not written at exit. */
static void test_messages_show_the_path_escaped(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[256], said[8192];
    snprintf(path, sizeof(path), "%s/full\nsluice: forged", tmpdir);
    (void)unlink(path);
    assert_int_equal(symlink("/dev/full", path), 0);
    char *err = NULL;
    struct log_jsonl *l = log_jsonl_open(base, path, 0, &err);
    assert_non_null(l);
    struct egress_event ev = spec_egress();
    struct stderr_capture cap;
    stderr_capture_begin(&cap);
    log_jsonl_set_pending_max(l, 2 * strlen(spec_line1));
    for (int i = 0; i < 3; i++)
        log_jsonl_on_event(&ev, l);
    log_jsonl_close(l);
    stderr_capture_end(&cap, said, sizeof(said));
    assert_null(strstr(said, "\nsluice: forged"));
    assert_non_null(strstr(said, "full\\012sluice: forged: write failed: "));
    assert_non_null(strstr(said, "full\\012sluice: forged: lines are dropped"));
    assert_non_null(strstr(said, "full\\012sluice: forged: 2 line(s)"));
    assert_int_equal(unlink(path), 0);
    event_base_free(base);
}

static void test_reader_gone(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    int rd;
    struct log_jsonl *l = open_on_pipe(base, &rd);
    struct egress_event ev = spec_egress();
    close(rd);
    /* EPIPE (SIGPIPE ignored): lines are counted as dropped, no crash. */
    log_jsonl_on_event(&ev, l);
    log_jsonl_on_event(&ev, l);
    log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_dropped(l), 3);
    assert_int_equal(log_jsonl_flush(l, 100), 0);
    /* Reopening standard output is a no-op. */
    assert_int_equal(log_jsonl_reopen(l), 0);
    log_jsonl_close(l);
    event_base_free(base);
}

/* A named FIFO whose reader leaves can get another (a log shipper that
 * restarts and opens it again): EPIPE there is not the end, as on an
 * anonymous pipe. The lines wait, the error is told, and once a reader is
 * back they are written, in order, none dropped. */
static void test_fifo_reader_that_comes_back(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[128];
    int rd;
    struct log_jsonl *l = open_on_fifo(base, "decisions.fifo", path, sizeof(path), &rd);
    struct egress_event ev = spec_egress();
    char buf[4096];
    log_jsonl_on_event(&ev, l);
    assert_int_equal(read(rd, buf, sizeof(buf)), (ssize_t)strlen(spec_line1));
    close(rd); /* the reader is gone */
    log_jsonl_on_event(&ev, l);
    log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_dropped(l), 0);
    assert_int_equal(log_jsonl_pending_bytes(l), 2 * strlen(spec_line1));
    assert_string_equal(log_jsonl_error(l), "its reader is gone");
    rd = open(path, O_RDONLY | O_NONBLOCK); /* and back */
    assert_true(rd >= 0);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    assert_null(log_jsonl_error(l));
    assert_int_equal(read(rd, buf, sizeof(buf)), (ssize_t)(2 * strlen(spec_line1)));
    assert_memory_equal(buf + strlen(spec_line1), spec_line1, strlen(spec_line1));
    assert_int_equal(log_jsonl_dropped(l), 0);
    close(rd);
    log_jsonl_close(l);
    event_base_free(base);
}

/* A device that refuses every write (ENOSPC): lines wait, the error is
 * told, its retries go through a timer (epoll refuses /dev/full), and a
 * log that is not failing tells nothing. */
static void test_disk_full(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char *err = NULL;
    struct log_jsonl *l = log_jsonl_open(base, "/dev/full", 0, &err);
    assert_non_null(l);
    assert_false(l->pollable);
    assert_null(log_jsonl_error(l));
    struct egress_event ev = spec_egress();
    log_jsonl_on_event(&ev, l);
    log_jsonl_on_event(&ev, l);
    assert_string_equal(log_jsonl_error(l), strerror(ENOSPC));
    assert_int_equal(log_jsonl_pending_bytes(l), 2 * strlen(spec_line1));
    assert_int_equal(log_jsonl_dropped(l), 0);
    /* a timer retries (no EV_WRITE on a descriptor epoll refuses): the
     * retry timer, which every failed write arms */
    assert_true(event_pending(l->retry, EV_TIMEOUT, NULL));
    assert_false(event_pending(l->wev, EV_WRITE, NULL));
    log_jsonl_close(l);

    int rd;
    l = open_on_pipe(base, &rd);
    assert_true(l->pollable);
    log_jsonl_on_event(&ev, l);
    assert_null(log_jsonl_error(l));
    assert_int_equal(log_jsonl_pending_bytes(l), 0);
    log_jsonl_close(l);
    close(rd);
    event_base_free(base);
}

/* A terminal that hung up (the one serve was started in, closed: its
 * SIGHUP only reloads) fails every write with EIO, and epoll calls it
 * writable for ever: the retry waits for its timer rather than writing
 * again at every turn of the loop. */
static void test_hung_up_terminal_is_retried_by_a_timer(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    assert_true(master >= 0);
    assert_int_equal(grantpt(master), 0);
    assert_int_equal(unlockpt(master), 0);
    char *err = NULL;
    struct log_jsonl *l = log_jsonl_open(base, ptsname(master), 0, &err);
    assert_non_null(l);
    assert_true(l->pollable);
    close(master); /* the terminal hangs up */
    struct egress_event ev = spec_egress();
    log_jsonl_on_event(&ev, l);
    assert_string_equal(log_jsonl_error(l), strerror(EIO));
    /* 100 turns of the loop, each ended by a timer due at once: without
     * the fix, each wrote again (the retry's timer is 1 s: it may come
     * once on a slow machine) */
    unsigned before = writev_calls;
    for (int i = 0; i < 100; i++) {
        struct timeval now = {0, 0};
        assert_int_equal(event_base_once(base, -1, EV_TIMEOUT, stop_loop, base, &now), 0);
        event_base_loop(base, EVLOOP_ONCE);
    }
    assert_in_range(writev_calls - before, 0, 2);
    assert_int_equal(log_jsonl_pending_bytes(l), strlen(spec_line1));
    log_jsonl_close(l);
    event_base_free(base);
}

/* A write that stopped mid-line (a pipe or disk that took part of it),
 * then a rotation: the new file gets that line whole, not its tail, so its
 * first line parses like every other. */
#define FIFO_LINES 40

/* An event whose line is longer than PIPE_BUF (its path), formatted into
 * <line> (LONG_LINE_CAP bytes); returns the line's length. On a pipe only
 * such a line can stop mid-line: shorter ones go in writes of whole lines
 * of at most PIPE_BUF bytes, which the kernel takes whole or not at all. */
#define LONG_LINE_CAP 8192
static struct egress_event long_egress(char *line, size_t *len)
{
    static char path[5001];
    memset(path, 'p', sizeof(path) - 1);
    path[0] = '/';
    struct egress_event ev = spec_egress();
    ev.path = path;
    *len = log_jsonl_format(&ev, line, LONG_LINE_CAP);
    assert_true(*len > PIPE_BUF && *len < LONG_LINE_CAP);
    return ev;
}

/* A log on a FIFO at <path> whose write stopped mid-line: FIFO_LINES long
 * lines (long_egress) were logged while nobody read, then the reader took
 * pages (read into <buf>, <*got> bytes) and the writes of the lines waiting
 * filled them. Returns the log; <*rd> the reader. */
static struct log_jsonl *fifo_log_mid_line(struct event_base *base, const char *path, int *rd,
                                           char *buf, size_t *got)
{
    char *err = NULL, line[LONG_LINE_CAP];
    size_t len;
    assert_int_equal(mkfifo(path, 0600), 0);
    *rd = open(path, O_RDONLY | O_NONBLOCK);
    assert_true(*rd >= 0);
    struct log_jsonl *l = log_jsonl_open(base, path, 0, &err);
    assert_non_null(l);
    struct egress_event ev = long_egress(line, &len);
    for (size_t i = 0; i < FIFO_LINES; i++)
        log_jsonl_on_event(&ev, l);
    /* Where a write stops depends on how the kernel fills the pipe's pages:
     * the reader takes a page at a time until one stopped mid-line. */
    *got = 0;
    for (int i = 0; i < 20 && (i == 0 || l->line_sent == 0); i++) {
        ssize_t n = read(*rd, buf + *got, 4096);
        assert_int_equal(n, 4096);
        *got += (size_t)n;
        assert_int_equal(log_jsonl_flush(l, 0), -1);
    }
    assert_true(l->line_sent > 0); /* the FIFO holds part of a line */
    return l;
}

/* Reads what <rd> has into <buf> (<cap> bytes) from <*got> on. */
static void read_all(int rd, char *buf, size_t cap, size_t *got)
{
    ssize_t n;
    while (*got < cap && (n = read(rd, buf + *got, cap - *got)) > 0)
        *got += (size_t)n;
}

/* A decision line that nothing waits before goes out from the formatter's
 * buffer; one longer than the pipe holds is written in part, and the rest
 * waits in <pending> (the whole line, from where the write stopped) until
 * the reader makes room: the reader gets the line once, whole. */
static void test_a_line_written_in_part_keeps_its_rest(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char want[LONG_LINE_CAP], buf[2 * LONG_LINE_CAP];
    size_t line, got = 0;
    int rd;
    struct egress_event ev = long_egress(want, &line);
    struct log_jsonl *l = open_on_pipe(base, &rd);
    int room = fcntl(rd, F_SETPIPE_SZ, 4096);
    assert_true(room >= 4096);
    if ((size_t)room >= line) { /* the kernel's least pipe is a line's size */
        log_jsonl_close(l);
        close(rd);
        event_base_free(base);
        skip();
    }
    writev_calls = 0;
    log_jsonl_on_event(&ev, l);
    assert_int_equal(writev_calls, 1);
    assert_int_equal(log_jsonl_pending_bytes(l), line - (size_t)room);
    assert_int_equal(fcntl(rd, F_SETFL, O_NONBLOCK), 0);
    for (int i = 0; i < 1000 && got < line; i++) {
        read_all(rd, buf, sizeof(buf), &got);
        log_jsonl_flush(l, 0);
    }
    read_all(rd, buf, sizeof(buf), &got);
    assert_int_equal(got, line);
    assert_memory_equal(buf, want, line);
    assert_int_equal(log_jsonl_pending_bytes(l), 0);
    assert_int_equal(log_jsonl_dropped(l), 0);
    log_jsonl_close(l);
    close(rd);
    event_base_free(base);
}

/* A write that stopped mid-line, then a rotation: the new file gets that
 * line whole, not its tail, so its first line parses like every other. */
static void test_reopen_after_a_partial_line(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char want[LONG_LINE_CAP];
    size_t line;
    (void)long_egress(want, &line);
    const size_t cap = FIFO_LINES * line;
    char path[128], *buf = malloc(cap);
    int rd;
    size_t got;
    snprintf(path, sizeof(path), "%s/fifo.jsonl", tmpdir);
    struct log_jsonl *l = fifo_log_mid_line(base, path, &rd, buf, &got);
    read_all(rd, buf, cap, &got);
    close(rd);
    assert_true(got % line != 0); /* the FIFO got part of a line */
    assert_int_equal(log_jsonl_pending_bytes(l), cap - got);
    assert_int_equal(unlink(path), 0); /* rotated: the path names a new file */
    assert_int_equal(log_jsonl_reopen(l), 0);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    size_t len;
    char *file = slurp(path, &len);
    assert_int_equal(len, (FIFO_LINES - got / line) * line);
    for (size_t off = 0; off < len; off += line)
        assert_memory_equal(file + off, want, line);
    assert_int_equal(log_jsonl_dropped(l), 0);
    free(file);
    free(buf);
    log_jsonl_close(l);
    event_base_free(base);
}

/* Writes <text> as the whole of the file <path>. */
static void put_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

/* A file that ends inside a line (its last write cut short: a full disk
 * at the last stop, a SIGKILL in the middle of a write): the log's first
 * line went on at that half line, and the two made one line no reader
 * parses, the new decision lost with it. A line end comes first now, at
 * the open and at a SIGHUP's reopen of another file; a file that ends a
 * line gets none. */
static void test_a_file_that_ends_mid_line_gets_a_line_end_first(void **state)
{
    (void)state;
    static const char half[] = "{\"ts\":\"2026-11-30T19:00:00.123Z\",\"event\":\"agent_eg";
    struct event_base *base = event_base_new();
    const size_t line = strlen(spec_line1);
    char path[128], rotated[160], want[2 * LONG_LINE_CAP];
    size_t len;
    snprintf(path, sizeof(path), "%s/cut.jsonl", tmpdir);
    put_file(path, half);
    struct log_jsonl *l = open_on_file(base, "cut.jsonl", path, sizeof(path));
    log_jsonl_write_line(l, spec_line1, line);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    snprintf(want, sizeof(want), "%s\n%s", half, spec_line1);
    char *file = slurp(path, &len);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(file, want, len);
    free(file);
    /* rotated: a new file that ends mid-line at the path */
    snprintf(rotated, sizeof(rotated), "%s.1", path);
    assert_int_equal(rename(path, rotated), 0);
    put_file(path, half);
    assert_int_equal(log_jsonl_reopen(l), 0);
    log_jsonl_write_line(l, spec_line1, line);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    file = slurp(path, &len);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(file, want, len);
    free(file);
    /* the same file again (a SIGHUP for a reload): it ends a line */
    assert_int_equal(log_jsonl_reopen(l), 0);
    log_jsonl_write_line(l, spec_line1, line);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    file = slurp(path, &len);
    assert_int_equal(len, strlen(want) + line);
    assert_memory_equal(file + strlen(want), spec_line1, line);
    free(file);
    log_jsonl_close(l);
    unlink(rotated);
    unlink(path);
    event_base_free(base);
}

/* The same, but SIGHUP finds the path naming the same file (a policy
 * reload, no rotation): the write goes on where it stopped, mid-line. */
static void test_reopen_of_the_same_file_goes_on_mid_line(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char want[LONG_LINE_CAP];
    size_t line;
    (void)long_egress(want, &line);
    const size_t cap = FIFO_LINES * line;
    char path[128], *buf = malloc(cap);
    int rd;
    size_t got;
    snprintf(path, sizeof(path), "%s/fifo-same.jsonl", tmpdir);
    struct log_jsonl *l = fifo_log_mid_line(base, path, &rd, buf, &got);
    assert_int_equal(log_jsonl_reopen(l), 0);
    for (int i = 0; i < 1000 && got < cap; i++) {
        read_all(rd, buf, cap, &got);
        log_jsonl_flush(l, 0);
    }
    read_all(rd, buf, cap, &got);
    close(rd);
    assert_int_equal(got, cap);
    for (size_t off = 0; off < got; off += line)
        assert_memory_equal(buf + off, want, line);
    free(buf);
    log_jsonl_close(l);
    event_base_free(base);
}

/* Runs <base> until <l>'s background reopen, and the one it queued, are
 * over (each round waits for the reopen's "done" byte). */
static void run_reopens(struct event_base *base, struct log_jsonl *l)
{
    for (int i = 0; i < 100 && (l->job != NULL || l->reopen_queued); i++)
        event_base_loop(base, EVLOOP_ONCE);
    assert_null(l->job);
    assert_false(l->reopen_queued);
}

/* SIGHUP's reopen runs on a thread: the lines that come meanwhile wait, in
 * order, and go to the new file once the loop has it; a second request
 * while one runs queues one more, not a second thread. */
static void test_reopen_soon_keeps_lines_for_the_new_file(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[128], rotated[160];
    struct log_jsonl *l = open_on_file(base, "soon.jsonl", path, sizeof(path));
    struct egress_event ev = spec_egress(), end = spec_end();
    log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    snprintf(rotated, sizeof(rotated), "%s.1", path);
    assert_int_equal(rename(path, rotated), 0);
    /* A regular file's reopen is its writer thread's: the lines handed
     * over meanwhile go, in order, to the new file. */
    assert_non_null(l->fw);
    log_jsonl_reopen_soon(l, NULL);
    log_jsonl_on_event(&ev, l);
    log_jsonl_on_event(&end, l);
    log_jsonl_reopen_soon(l, NULL);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    size_t len;
    char *got;
    log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    got = slurp(path, &len);
    assert_int_equal(len, 2 * strlen(spec_line1) + strlen(spec_line2));
    assert_memory_equal(got, spec_line1, strlen(spec_line1));
    assert_memory_equal(got + strlen(spec_line1), spec_line2, strlen(spec_line2));
    assert_memory_equal(got + strlen(spec_line1) + strlen(spec_line2), spec_line1,
                        strlen(spec_line1));
    free(got);
    got = slurp(rotated, &len);
    assert_int_equal(len, strlen(spec_line1));
    free(got);
    assert_int_equal(log_jsonl_dropped(l), 0);
    log_jsonl_close(l);
    event_base_free(base);
}

/* A background reopen that fails keeps the old descriptor: the lines that
 * waited go there, in order. */
static void test_reopen_soon_that_fails_keeps_the_old_file(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char dir[128], moved[160], path[192], old[224];
    snprintf(dir, sizeof(dir), "%s/soon-dir", tmpdir);
    snprintf(moved, sizeof(moved), "%s.old", dir);
    snprintf(path, sizeof(path), "%s/log.jsonl", dir);
    snprintf(old, sizeof(old), "%s/log.jsonl", moved);
    assert_int_equal(mkdir(dir, 0700), 0);
    char *err = NULL;
    struct log_jsonl *l = log_jsonl_open(base, path, 0, &err);
    assert_non_null(l);
    /* The folder moves away and a file takes its name: ENOTDIR. */
    assert_int_equal(rename(dir, moved), 0);
    int f = open(dir, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(f >= 0);
    close(f);
    struct egress_event ev = spec_egress(), end = spec_end();
    log_jsonl_reopen_soon(l, NULL);
    log_jsonl_on_event(&ev, l);
    log_jsonl_on_event(&end, l);
    run_reopens(base, l);
    assert_int_equal(log_jsonl_flush(l, 1000), 0);
    size_t len;
    char *got = slurp(old, &len);
    assert_int_equal(len, strlen(spec_line1) + strlen(spec_line2));
    assert_memory_equal(got, spec_line1, strlen(spec_line1));
    free(got);
    log_jsonl_close(l);
    event_base_free(base);
}

/* A SIGHUP's reopen with no thread to be had for its open (threads
 * refused) is refused, the descriptor in use kept, as a reload is: run on
 * the loop, an open() the file system does not answer (a path on a hung
 * NFS server) stopped the gateway. Here the FIFO's lines go on to its
 * reader, not to the regular file that took the path. */
static void test_reopen_soon_without_a_thread_keeps_the_old_descriptor(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[128], moved[160];
    int rd;
    struct log_jsonl *l = open_on_fifo(base, "hup.fifo", path, sizeof(path), &rd);
    snprintf(moved, sizeof(moved), "%s.1", path);
    assert_int_equal(rename(path, moved), 0);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    close(fd);
    threads_refused = true;
    log_jsonl_reopen_soon(l, NULL);
    threads_refused = false;
    assert_null(l->job);
    struct egress_event ev = spec_egress();
    log_jsonl_on_event(&ev, l);
    char buf[4096];
    assert_int_equal(read(rd, buf, sizeof(buf)), (ssize_t)strlen(spec_line1));
    size_t len;
    char *got = slurp(path, &len);
    assert_int_equal(len, 0);
    free(got);
    assert_null(log_jsonl_error(l));
    close(rd);
    log_jsonl_close(l);
    event_base_free(base);
}

/* At exit, log_jsonl_flush() waits for a reopen that runs (in its time)
 * and writes what waited to the file it opened; a close right after a
 * request, the thread done or not, frees everything. */
static void test_flush_and_close_during_a_reopen(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char path[128], rotated[160];
    struct log_jsonl *l = open_on_file(base, "exit.jsonl", path, sizeof(path));
    snprintf(rotated, sizeof(rotated), "%s.1", path);
    assert_int_equal(rename(path, rotated), 0);
    struct egress_event ev = spec_egress();
    log_jsonl_reopen_soon(l, NULL);
    log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_flush(l, 10000), 0);
    assert_null(l->job);
    size_t len;
    char *got = slurp(path, &len);
    assert_int_equal(len, strlen(spec_line1));
    free(got);
    log_jsonl_reopen_soon(l, NULL);
    log_jsonl_on_event(&ev, l);
    log_jsonl_close(l);
    event_base_free(base);
}

static void test_unwritten_at_close(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    int rd;
    struct log_jsonl *l = open_on_pipe(base, &rd);
    struct egress_event ev = spec_egress();
    for (int i = 0; i < 3000; i++)
        log_jsonl_on_event(&ev, l);
    assert_int_equal(log_jsonl_dropped(l), 0);
    /* Closing with lines pending reports them (on stderr) rather than
     * blocking; the test checks it returns and frees everything. */
    log_jsonl_close(l);
    close(rd);
    event_base_free(base);
}

int main(void)
{
    event_set_mem_functions(failing_malloc, failing_realloc, free);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_lines),
        cmocka_unit_test(test_nulls_and_deny),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_parse_back),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_file),
        cmocka_unit_test(test_a_line_too_long_is_written_cut),
        cmocka_unit_test(test_a_line_dropped_for_want_of_memory_makes_the_log_unhealthy),
        cmocka_unit_test(test_file_writes_end_at_a_line),
        cmocka_unit_test(test_truncated_file_gets_a_cut_line_whole),
        cmocka_unit_test(test_file_write_waits_off_the_loop),
        cmocka_unit_test(test_wait_says_when_a_line_is_in_the_file),
        cmocka_unit_test(test_no_wake_up_is_lost),
        cmocka_unit_test(test_a_round_wakes_the_writer_once),
        cmocka_unit_test(test_wait_lets_go_when_a_write_fails),
        cmocka_unit_test(test_close_while_a_write_waits),
        cmocka_unit_test(test_open_fails),
        cmocka_unit_test(test_file_without_a_writer_thread_is_refused),
        cmocka_unit_test(test_fifo_without_reader_is_named),
        cmocka_unit_test(test_a_reopen_to_a_file_without_a_writer_thread),
        cmocka_unit_test(test_a_loop_written_file_that_would_block_is_retried_paced),
        cmocka_unit_test(test_pipe_never_blocks),
        cmocka_unit_test(test_pipe_gets_whole_lines_up_to_pipe_buf),
        cmocka_unit_test(test_socket_gets_whole_lines_up_to_pipe_buf),
        cmocka_unit_test(test_pending_cap_and_flush),
        cmocka_unit_test(test_drops_are_told_on_stderr_once_a_spell),
        cmocka_unit_test(test_messages_show_the_path_escaped),
        cmocka_unit_test(test_no_links),
        cmocka_unit_test(test_reader_gone),
        cmocka_unit_test(test_fifo_reader_that_comes_back),
        cmocka_unit_test(test_disk_full),
        cmocka_unit_test(test_hung_up_terminal_is_retried_by_a_timer),
        cmocka_unit_test(test_a_line_written_in_part_keeps_its_rest),
        cmocka_unit_test(test_reopen_after_a_partial_line),
        cmocka_unit_test(test_reopen_of_the_same_file_goes_on_mid_line),
        cmocka_unit_test(test_a_file_that_ends_mid_line_gets_a_line_end_first),
        cmocka_unit_test(test_reopen_soon_keeps_lines_for_the_new_file),
        cmocka_unit_test(test_reopen_soon_that_fails_keeps_the_old_file),
        cmocka_unit_test(test_reopen_soon_without_a_thread_keeps_the_old_descriptor),
        cmocka_unit_test(test_flush_and_close_during_a_reopen),
        cmocka_unit_test(test_unwritten_at_close),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
