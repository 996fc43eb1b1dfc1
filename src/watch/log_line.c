/* log_line: the decision log's lines (see log_jsonl.h, log_jsonl_int.h).
 *
 * Each egress event and alert as one line of JSON, keys in SPEC.md's
 * order, strings escaped (UTF-8 checked, control characters \u00XX); a
 * line that cannot be had whole is written with its long strings cut and
 * named in a last "cut" field, never dropped. Pure functions of the event:
 * safe on any thread; no I/O. */
#include "watch/log_jsonl_int.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/units.h"
#include "util/utf8.h"
#include "util/word8.h"

/* A cut line's strings take at most this many bytes of JSON each (quotes
 * aside), the keys of those cut named in a last "cut" field: ten strings
 * of an agent_egress line, their keys and the field fit in LINE_STACK. */
#define CUT_FIELD_MAX 256
/* The most strings a line has (agent_egress: ten). */
#define LINE_STRINGS 12

/* ---------------------------------------------------------------- format */

struct out {
    char *p;
    size_t cap;
    size_t len;                    /* would-be length, may exceed cap */
    size_t field_max;              /* bytes a string's JSON may take: SIZE_MAX, or CUT_FIELD_MAX */
    const char *key;               /* the key of the string put next (PUT_KEY) */
    const char *cut[LINE_STRINGS]; /* the keys of the strings cut */
    size_t ncut;
};

/* An out on <buf> (<cap> bytes, a NUL kept room for) whose strings take
 * <field_max> bytes of JSON at most. */
static struct out out_on(char *buf, size_t cap, size_t field_max)
{
    struct out o = {.p = buf, .cap = cap > 0 ? cap - 1 : 0, .field_max = field_max};
    return o;
}

static void put(struct out *o, const char *s, size_t n)
{
    /* The common case first, as its own memcpy(): with <n> known when
     * compiled (the keys), the compiler makes it a few moves, where the
     * clamped length of the other case is copied byte by byte. */
    if (o->len <= o->cap && n <= o->cap - o->len) {
        memcpy(o->p + o->len, s, n);
    } else if (o->len < o->cap) {
        size_t room = o->cap - o->len;
        memcpy(o->p + o->len, s, n < room ? n : room);
    }
    o->len += n;
}

static void puts_lit(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

static void put_u64(struct out *o, uint64_t v)
{
    char buf[FORMAT_UINT_MAX];
    put(o, buf, format_uint(buf, v, 0));
}

/* Printable ASCII but for " and \\: a JSON string's bytes as they are.
 * A byte per byte value (one load a byte: every string of every line is
 * scanned with it); 0x20-0x7e are 1 but for 0x22 and 0x5c. */
static const unsigned char json_plain_tab[256] = {
    /* 0x00 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    /* 0x10 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    /* 0x20 */ 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 0x30 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 0x40 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 0x50 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
    /* 0x60 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 0x70 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0,
    /* 0x80-0xff: 0 */
};

static bool json_plain(unsigned char c)
{
    return json_plain_tab[c] != 0;
}

/* True when <n> more bytes keep the string begun at <from> (its opening
 * quote's end) within o->field_max; else the string is marked cut, under
 * the key PUT_KEY put last. */
static bool str_room(struct out *o, size_t from, size_t n)
{
    if (o->len - from + n <= o->field_max)
        return true;
    if (o->ncut < LINE_STRINGS && o->key != NULL)
        o->cut[o->ncut++] = o->key;
    return false;
}

/* put_str()'s way for a string that is not all plain bytes, or not
 * within room or o->field_max: <s> (<n> bytes) as a JSON string, cut after
 * o->field_max bytes of JSON (between two characters: never inside an
 * escape nor a UTF-8 sequence). A run of plain bytes is copied at once;
 * UTF-8 is looked at only from a byte past ASCII on. Never inlined: in
 * put_str() its registers and its stack (saved and restored at every
 * call, about 20 instructions) cost every string what only a few need. */
__attribute__((noinline)) static void put_str_escaped(struct out *o, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;

    put(o, "\"", 1);
    size_t from = o->len;
    for (size_t i = 0;;) {
        size_t run = i;
        while (json_plain(p[run])) /* the NUL at <n> is not plain */
            run++;
        if (run > i) {
            if (!str_room(o, from, run - i)) {
                put(o, s + i, o->field_max - (o->len - from)); /* ASCII: cut anywhere */
                break;
            }
            put(o, s + i, run - i);
            i = run;
        }
        unsigned char c = p[i];
        if (c == '\0')
            break;
        /* The next character's JSON (<piece>, <len> bytes; <in> bytes of <s>). */
        char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 0xf]};
        const char *piece = e;
        size_t len = sizeof(e), in = 1;
        if (c == '"') {
            piece = "\\\"", len = 2;
        } else if (c == '\\') {
            piece = "\\\\", len = 2;
        } else if (c == '\n') {
            piece = "\\n", len = 2;
        } else if (c == '\r') {
            piece = "\\r", len = 2;
        } else if (c == '\t') {
            piece = "\\t", len = 2;
        } else if (c >= 0x20 && c != 0x7f) {
            size_t seq = utf8_seq(p + i, n - i);
            if (seq == 0) {
                piece = "\\ufffd";
            } else if (seq == 3 && p[i] == 0xe2 && p[i + 1] == 0x80 &&
                       (p[i + 2] == 0xa8 || p[i + 2] == 0xa9)) {
                /* U+2028/U+2029 are valid JSON but end lines in JavaScript. */
                piece = p[i + 2] == 0xa8 ? "\\u2028" : "\\u2029";
                in = 3;
            } else {
                piece = s + i, len = seq, in = seq;
            }
        } /* else a control character: \u00XX */
        if (!str_room(o, from, len))
            break;
        put(o, piece, len);
        i += in;
    }
    put(o, "\"", 1);
}

/* Copies to <d> the bytes of <s> (<n> of them) when all are plain (what a
 * JSON string carries as it is), eight at a time, as they are tested:
 * returns <n> then, else how many it copied, a plain start of <s>. The
 * last word is read where it ends at <n> (overlapping the one before), a
 * string under 8 bytes as two 4-byte halves or its first, middle and last
 * byte: never a byte past <n>. */
static size_t json_plain_copy(char *d, const char *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x = word8_load(s + i);
        if (!word8_json_plain(x))
            return i;
        memcpy(d + i, &x, 8);
    }
    if (i == n)
        return n;
    if (n >= 8) {
        uint64_t x = word8_load(s + n - 8);
        if (!word8_json_plain(x))
            return i;
        memcpy(d + n - 8, &x, 8);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        if (!word8_json_plain((uint64_t)a << 32 | b))
            return 0;
        memcpy(d, &a, 4);
        memcpy(d + n - 4, &b, 4);
    } else {
        unsigned char a = (unsigned char)s[0], b = (unsigned char)s[n / 2];
        unsigned char c = (unsigned char)s[n - 1];
        /* the word's other five bytes: 'A's, plain */
        if (!word8_json_plain(0x4141414141000000u | (uint64_t)a << 16 | (uint64_t)b << 8 | c))
            return 0;
        d[0] = (char)a, d[n / 2] = (char)b, d[n - 1] = (char)c;
    }
    return n;
}

/* Writes <s> as a JSON string (with quotes), or null; cut after
 * o->field_max bytes of JSON (put_str_escaped()). Nearly every string of a
 * line is all plain bytes and short (an id, an agent, a host, an address:
 * 4 to 16 bytes): those are tested and copied a word at a time, quotes
 * around, with no call but strlen(). */
static void put_str(struct out *o, const char *s)
{
    if (s == NULL) {
        put(o, "null", 4);
        return;
    }
    size_t n = strlen(s);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    if (n <= o->field_max && room >= 2 && n <= room - 2) {
        char *d = o->p + o->len;
        if (json_plain_copy(d + 1, s, n) == n) {
            d[0] = '"';
            d[n + 1] = '"';
            o->len += n + 2;
            return;
        }
    }
    put_str_escaped(o, s, n); /* writes again what the copy put */
}

/* ,"key": in one copy of a length known when compiled (keys are literals);
 * <key> is the one a string cut after it is named by (struct out.cut). */
#define PUT_KEY(o, name)                                                                           \
    ((o)->key = (name), put((o), ",\"" name "\":", sizeof(",\"" name "\":") - 1))

/* The cut line's last field, "cut":["path",...], when strings were cut. */
static void put_cut(struct out *o)
{
    if (o->ncut == 0)
        return;
    PUT_KEY(o, "cut");
    put(o, "[", 1);
    for (size_t i = 0; i < o->ncut; i++) {
        if (i > 0)
            put(o, ",", 1);
        put_str(o, o->cut[i]);
    }
    put(o, "]", 1);
}

/* Ends the line in <out> (<cap> bytes) that <o> formatted: its "cut"
 * field, if any, its end, the NUL. Returns its would-be length. */
static size_t out_end(struct out *o, char *out, size_t cap)
{
    put_cut(o);
    put(o, "}\n", 2);
    if (cap > 0)
        out[o->len < cap ? o->len : cap - 1] = '\0';
    return o->len;
}

static void put_ts(struct out *o, const struct timespec *ts)
{
    /* The calendar fields of the last second seen (per thread: the
     * formatter stays safe to call from any thread). */
    static _Thread_local time_t last_sec = -1;
    static _Thread_local char last_buf[27];
    struct tm tm;
    char buf[40];
    time_t t = ts->tv_sec;
    long ms = ts->tv_nsec / 1000000;

    if (ms < 0 || ms > 999)
        ms = 0;
    if (t == last_sec) {
        memcpy(buf, last_buf, 26);
        format_uint(buf + 21, (uint64_t)ms, 3);
        put(o, buf, 26);
        return;
    }
    if (gmtime_r(&t, &tm) == NULL) {
        memset(&tm, 0, sizeof(tm));
        tm.tm_year = 70;
        tm.tm_mday = 1;
    }
    long year = tm.tm_year + 1900L;
    if (year < 0 || year > 9999) {
        int n = snprintf(buf, sizeof(buf), "\"%04ld-%02d-%02dT%02d:%02d:%02d.%03ldZ\"", year,
                         tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
        if (n > 0)
            put(o, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
        return;
    }
    /* "YYYY-MM-DDThh:mm:ss.mmmZ", quoted: by hand, it is on every line */
    memcpy(buf, "\"0000-00-00T00:00:00.000Z\"", 26);
    format_uint(buf + 1, (uint64_t)year, 4);
    format_uint(buf + 6, (uint64_t)tm.tm_mon + 1, 2);
    format_uint(buf + 9, (uint64_t)tm.tm_mday, 2);
    format_uint(buf + 12, (uint64_t)tm.tm_hour, 2);
    format_uint(buf + 15, (uint64_t)tm.tm_min, 2);
    format_uint(buf + 18, (uint64_t)tm.tm_sec, 2);
    memcpy(last_buf, buf, 26);
    last_sec = t;
    format_uint(buf + 21, (uint64_t)ms, 3);
    put(o, buf, 26);
}

static void put_tier(struct out *o, enum tier t)
{
    if (t < TIER_0 || t > TIER_3)
        puts_lit(o, "null");
    else
        put_u64(o, (uint64_t)t);
}

/* log_jsonl_format() with each string cut after <field_max> bytes of JSON. */
static size_t format_event(const struct egress_event *ev, char *out, size_t cap, size_t field_max)
{
    struct out o = out_on(out, cap, field_max);

    puts_lit(&o, "{\"ts\":");
    put_ts(&o, &ev->ts);
    PUT_KEY(&o, "event");
    if (ev->kind == EVENT_EGRESS_END)
        put(&o, "\"agent_egress_end\"", 18);
    else
        put(&o, "\"agent_egress\"", 14);
    PUT_KEY(&o, "id");
    put_str(&o, ev->id);
    PUT_KEY(&o, "agent");
    put_str(&o, ev->agent);
    if (ev->kind == EVENT_EGRESS_END) {
        PUT_KEY(&o, "host");
        put_str(&o, ev->host);
        PUT_KEY(&o, "tier");
        put_tier(&o, ev->tier);
        PUT_KEY(&o, "status");
        if (ev->status > 0)
            put_u64(&o, (uint64_t)ev->status);
        else
            puts_lit(&o, "null");
        PUT_KEY(&o, "bytes_up");
        put_u64(&o, ev->bytes_up);
        PUT_KEY(&o, "bytes_down");
        put_u64(&o, ev->bytes_down);
        PUT_KEY(&o, "ms");
        put_u64(&o, ev->ms);
    } else {
        PUT_KEY(&o, "method");
        put_str(&o, ev->method);
        PUT_KEY(&o, "scheme");
        put_str(&o, ev->scheme);
        PUT_KEY(&o, "host");
        put_str(&o, ev->host);
        PUT_KEY(&o, "port");
        if (ev->port != 0)
            put_u64(&o, ev->port);
        else
            puts_lit(&o, "null");
        PUT_KEY(&o, "path");
        put_str(&o, ev->path);
        PUT_KEY(&o, "tier");
        put_tier(&o, ev->tier);
        PUT_KEY(&o, "rule");
        if (ev->rule != NULL) {
            put(&o, "\"rules[", 7);
            put_u64(&o, ev->rule->index);
            put(&o, "]\"", 2);
        } else {
            puts_lit(&o, "null");
        }
        PUT_KEY(&o, "owner");
        put_str(&o, ev->owner);
        PUT_KEY(&o, "decision");
        put_str(&o, verdict_name(ev->verdict));
        PUT_KEY(&o, "reason");
        put_str(&o, ev->reason == REASON_NONE ? NULL : reason_name(ev->reason));
        PUT_KEY(&o, "ip");
        put_str(&o, ev->ip);
    }
    return out_end(&o, out, cap);
}

size_t log_jsonl_format(const struct egress_event *ev, char *out, size_t cap)
{
    return format_event(ev, out, cap, SIZE_MAX);
}

/* Formats the line of <ev> into <stack> (LINE_STACK bytes)
 * or, when it is longer, into a heap buffer of its size. Returns the line
 * (the caller frees it when it is not <stack>), its length in <*n>. A line
 * that can have no heap buffer (past LINE_MAX_LEN, or no memory) is
 * formatted cut into <stack> (CUT_FIELD_MAX): its decision is logged, not
 * dropped. NULL only when the cut line does not fit either (none does). */
char *log_line_format(const struct egress_event *ev, char *stack, size_t *n)
{
    *n = format_event(ev, stack, LINE_STACK, SIZE_MAX);
    if (*n < LINE_STACK)
        return stack;
    char *line = *n < LINE_MAX_LEN ? malloc(*n + 1) : NULL;
    char *out = line != NULL ? line : stack;
    size_t cap = line != NULL ? *n + 1 : LINE_STACK;
    *n = format_event(ev, out, cap, line != NULL ? SIZE_MAX : CUT_FIELD_MAX);
    if (*n < cap)
        return out;
    free(line);
    return NULL;
}

/* log_jsonl_format_alert()'s line with each string cut after <field_max>
 * bytes of JSON. */
static size_t format_alert(const struct alert *a, char *out, size_t cap, size_t field_max)
{
    struct out o = out_on(out, cap, field_max);

    puts_lit(&o, "{\"ts\":");
    put_ts(&o, &a->ts);
    PUT_KEY(&o, "event");
    put_str(&o, "alert");
    PUT_KEY(&o, "kind");
    put_str(&o, alert_kind_name(a->kind));
    PUT_KEY(&o, "severity");
    put_str(&o, alert_severity_name(a->severity));
    PUT_KEY(&o, "agent");
    put_str(&o, a->agent);
    PUT_KEY(&o, "host");
    put_str(&o, a->host);
    PUT_KEY(&o, "tier");
    put_tier(&o, a->tier);
    PUT_KEY(&o, "id");
    put_str(&o, a->id);
    PUT_KEY(&o, "detail");
    put_str(&o, a->detail);
    PUT_KEY(&o, "count");
    put_u64(&o, a->count > 0 ? a->count : 1);
    return out_end(&o, out, cap);
}

size_t log_jsonl_format_alert(const struct alert *a, char *out, size_t cap)
{
    size_t n = format_alert(a, out, cap, SIZE_MAX);
    if (n < cap)
        return n;
    return format_alert(a, out, cap, CUT_FIELD_MAX); /* as a decision line that cannot be whole */
}
