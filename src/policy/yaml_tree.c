#include "policy/yaml_tree.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "util/xalloc.h"

#define YTREE_DEPTH_LIMIT 64
#define YAML_STR_TAG      "tag:yaml.org,2002:str"

/* Bytes of the field path an error names ("rules[3].host"), NUL included,
 * and characters of a key it shows. */
#define FIELD_MAX    384
#define KEY_SHOW_MAX 64

struct builder {
    struct ytree *t;
    struct diag *d;
    int max_depth;
    size_t stack[YTREE_DEPTH_LIMIT];
    /* A mapping's last key, for the field path: its text at key_off in
     * t->text, or none (a key that is not a scalar). */
    size_t key_off[YTREE_DEPTH_LIMIT];
    size_t key_len[YTREE_DEPTH_LIMIT];
    bool key_ok[YTREE_DEPTH_LIMIT];
    int sp;
    int documents;
};

static int mark_line(const yaml_mark_t *m)
{
    return m->line >= (size_t)INT_MAX ? INT_MAX : (int)m->line + 1;
}

/* Appends <key> (<len> bytes, hostile) to <out> as a message shows it:
 * printable ASCII, '?' for any other byte, at most KEY_SHOW_MAX of them. */
static size_t put_key(char *out, size_t o, const char *key, size_t len)
{
    if (o > 0 && o < FIELD_MAX - 1)
        out[o++] = '.';
    for (size_t i = 0; i < len && o < FIELD_MAX - 1; i++) {
        unsigned char ch = (unsigned char)key[i];
        if (i == KEY_SHOW_MAX) {
            o += (size_t)snprintf(out + o, FIELD_MAX - o, "...");
            break;
        }
        out[o++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    out[o < FIELD_MAX ? o : FIELD_MAX - 1] = '\0';
    return o < FIELD_MAX ? o : FIELD_MAX - 1;
}

/* The field path of the node about to be added ("rules[3].host"), as the
 * loader names fields, into <out> (FIELD_MAX bytes): so that an error the
 * tree refuses a node with (an anchor, a tag, a NUL byte, nesting) names
 * where it is. A mapping key is named by itself when it is a scalar whose
 * text is known (<key>, <len>), else by its mapping. */
static void node_field(const struct builder *b, const char *key, size_t len, char *out)
{
    size_t o = 0;
    out[0] = '\0';
    for (int l = 0; l < b->sp; l++) {
        const struct ynode *n = &b->t->nodes[b->stack[l]];
        bool last = l == b->sp - 1;
        size_t child = last ? n->count : n->count - 1; /* the one being read */
        if (n->kind == YNODE_SEQUENCE) {
            int w = snprintf(out + o, FIELD_MAX - o, "[%zu]", child);
            o = w > 0 && (size_t)w < FIELD_MAX - o ? o + (size_t)w : FIELD_MAX - 1;
        } else if (child % 2 == 1 && b->key_ok[l]) {
            o = put_key(out, o, b->t->text + b->key_off[l], b->key_len[l]);
        } else {
            /* a key: itself when known; a value under a key that is not a
             * scalar: its mapping */
            if (last && child % 2 == 0 && key != NULL)
                put_key(out, o, key, len);
            return;
        }
    }
}

/* An error about the node about to be added (<key>: its text when it is a
 * scalar, else NULL), naming its field. */
__attribute__((format(printf, 5, 6))) static void
node_error(struct builder *b, int line, const char *key, size_t len, const char *fmt, ...)
{
    char field[FIELD_MAX];
    char msg[256];
    node_field(b, key, len, field);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    diag_error(b->d, line, field, "%s", msg);
}

static struct ynode *add_node(struct builder *b, enum ynode_kind kind, int line)
{
    struct ytree *t = b->t;
    if (t->nnodes >= YTREE_MAX_NODES) {
        diag_error(b->d, line, "", "too many YAML nodes (at most %u)", YTREE_MAX_NODES);
        return NULL;
    }
    if (t->nnodes == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 64;
        t->nodes = xreallocarray(t->nodes, t->cap, sizeof(*t->nodes));
    }
    if (b->sp > 0) {
        struct ynode *parent = &t->nodes[b->stack[b->sp - 1]];
        parent->count++;
        /* a mapping's key: on_scalar() records a scalar one's text */
        if (parent->kind == YNODE_MAPPING && parent->count % 2 == 1)
            b->key_ok[b->sp - 1] = false;
    }
    struct ynode *n = &t->nodes[t->nnodes++];
    memset(n, 0, sizeof(*n));
    n->kind = kind;
    n->line = line;
    n->size = 1;
    n->str = "";
    return n;
}

static void add_text(struct ytree *t, const char *s, size_t len)
{
    if (t->tcap - t->tlen < len + 1) {
        size_t want = t->tlen + len + 1;
        size_t cap = t->tcap ? t->tcap : 256;
        while (cap < want)
            cap *= 2;
        t->text = xreallocarray(t->text, cap, 1);
        t->tcap = cap;
    }
    memcpy(t->text + t->tlen, s, len);
    t->text[t->tlen + len] = '\0';
    t->tlen += len + 1;
}

/* Anchors, aliases and tags (other than !!str) are refused. <key>, <len>:
 * a scalar's text, for the field an error names. Returns 0 or -1. */
static int check_props(struct builder *b, const yaml_char_t *anchor, const yaml_char_t *tag,
                       int line, bool *quoted, const char *key, size_t len)
{
    if (anchor != NULL) {
        node_error(b, line, key, len, "anchors and aliases are not supported");
        return -1;
    }
    if (tag == NULL)
        return 0;
    if (quoted != NULL && strcmp((const char *)tag, YAML_STR_TAG) == 0) {
        *quoted = true;
        return 0;
    }
    node_error(b, line, key, len, "YAML tags are not supported");
    return -1;
}

static int on_scalar(struct builder *b, const yaml_event_t *ev)
{
    int line = mark_line(&ev->start_mark);
    bool quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    const char *value = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    if (check_props(b, ev->data.scalar.anchor, ev->data.scalar.tag, line, &quoted, value, len) != 0)
        return -1;
    if (memchr(value, '\0', len) != NULL) {
        node_error(b, line, NULL, 0, "a string contains a NUL byte");
        return -1;
    }
    struct ynode *n = add_node(b, YNODE_SCALAR, line);
    if (n == NULL)
        return -1;
    n->quoted = quoted;
    n->len = (uint32_t)len; /* at most the file's size: see ytree_parse() */
    if (b->sp > 0 && !b->key_ok[b->sp - 1]) {
        const struct ynode *parent = &b->t->nodes[b->stack[b->sp - 1]];
        if (parent->kind == YNODE_MAPPING && parent->count % 2 == 1) {
            b->key_off[b->sp - 1] = b->t->tlen;
            b->key_len[b->sp - 1] = len;
            b->key_ok[b->sp - 1] = true;
        }
    }
    add_text(b->t, value, len);
    return 0;
}

static int on_start(struct builder *b, const yaml_event_t *ev, enum ynode_kind kind)
{
    int line = mark_line(&ev->start_mark);
    const yaml_char_t *anchor, *tag;
    if (kind == YNODE_SEQUENCE) {
        anchor = ev->data.sequence_start.anchor;
        tag = ev->data.sequence_start.tag;
    } else {
        anchor = ev->data.mapping_start.anchor;
        tag = ev->data.mapping_start.tag;
    }
    if (check_props(b, anchor, tag, line, NULL, NULL, 0) != 0)
        return -1;
    if (b->sp >= b->max_depth) {
        node_error(b, line, NULL, 0, "nesting deeper than %d levels", b->max_depth);
        return -1;
    }
    if (add_node(b, kind, line) == NULL)
        return -1;
    b->key_ok[b->sp] = false;
    b->stack[b->sp++] = b->t->nnodes - 1;
    return 0;
}

static void on_end(struct builder *b)
{
    if (b->sp == 0)
        return; /* libyaml never sends an unbalanced end */
    size_t idx = b->stack[--b->sp];
    b->t->nodes[idx].size = (uint32_t)(b->t->nnodes - idx);
}

/* Handles one event. Returns 1 at the end of the stream, 0 to go on, -1 on error. */
static int on_event(struct builder *b, const yaml_event_t *ev)
{
    switch (ev->type) {
    case YAML_STREAM_END_EVENT:
        return 1;
    case YAML_DOCUMENT_START_EVENT:
        if (b->documents++ > 0) {
            diag_error(b->d, mark_line(&ev->start_mark), "",
                       "multiple documents are not supported");
            return -1;
        }
        return 0;
    case YAML_ALIAS_EVENT:
        node_error(b, mark_line(&ev->start_mark), NULL, 0, "aliases are not supported");
        return -1;
    case YAML_SCALAR_EVENT:
        return on_scalar(b, ev);
    case YAML_SEQUENCE_START_EVENT:
        return on_start(b, ev, YNODE_SEQUENCE);
    case YAML_MAPPING_START_EVENT:
        return on_start(b, ev, YNODE_MAPPING);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        on_end(b);
        return 0;
    default:
        return 0;
    }
}

/* The line of a reader error (a byte that is not UTF-8), which libyaml
 * gives as an offset into <buf> alone, its problem_mark left at the start.
 * Lines end as libyaml's marks count them: LF, CR LF, CR, NEL, LS, PS. */
static int offset_line(const char *buf, size_t len, size_t offset)
{
    const unsigned char *p = (const unsigned char *)buf;
    int line = 1;
    if (offset > len)
        offset = len;
    for (size_t i = 0; i < offset && line < INT_MAX; i++)
        if (p[i] == '\n' || (p[i] == '\r' && (i + 1 >= len || p[i + 1] != '\n')) ||
            (p[i] == 0xc2 && i + 1 < offset && p[i + 1] == 0x85) ||
            (p[i] == 0xe2 && i + 2 < offset && p[i + 1] == 0x80 &&
             (p[i + 2] == 0xa8 || p[i + 2] == 0xa9)))
            line++;
    return line;
}

static void syntax_error(struct builder *b, const yaml_parser_t *parser, const char *buf,
                         size_t len)
{
    if (parser->error == YAML_MEMORY_ERROR) {
        diag_error(b->d, 0, "", "out of memory while reading YAML");
        return;
    }
    const char *problem = parser->problem ? parser->problem : "unreadable input";
    int line = parser->error == YAML_READER_ERROR ? offset_line(buf, len, parser->problem_offset)
                                                  : mark_line(&parser->problem_mark);
    /* At the end of a file without a final line end the mark is on the
     * line after the last (libyaml's scanner ends the stream with a line
     * break of its own): the file's last line is named instead (UTF-16
     * never gets here: reviewable_text() refuses it). */
    int last = offset_line(buf, len, len);
    if (line > last)
        line = last;
    diag_error(b->d, line, "", "YAML syntax error: %s", problem);
}

/* The name of the line break at <p> (<left> bytes) that libyaml ends a
 * line at and a reviewer's tools do not, or NULL: a CR not followed by LF,
 * NEL, LS, PS (YAML 1.1's breaks). git diff, GitHub and most editors show
 * "# note<NEL>  - host: evil.test<NEL>    tier: 0" as one comment line, and
 * the rule in it would load unseen. */
static const char *odd_break(const unsigned char *p, size_t left)
{
    if (p[0] == '\r' && (left < 2 || p[1] != '\n'))
        return "a CR without an LF after it";
    if (p[0] == 0xc2 && left >= 2 && p[1] == 0x85)
        return "U+0085 (NEL)";
    if (p[0] == 0xe2 && left >= 3 && p[1] == 0x80 && p[2] == 0xa8)
        return "U+2028 (LINE SEPARATOR)";
    if (p[0] == 0xe2 && left >= 3 && p[1] == 0x80 && p[2] == 0xa9)
        return "U+2029 (PARAGRAPH SEPARATOR)";
    return NULL;
}

/* Refuses a file that the YAML reader and the person who reviews it would
 * read as different lines: UTF-16 (git diff shows it as binary, so its
 * change is never read) or one with a line break other than LF and CR LF.
 * The line named is counted in LFs, as the reviewer's tools number it.
 * Returns 0, or -1 after reporting. */
static int reviewable_text(const char *buf, size_t len, struct diag *d)
{
    const unsigned char *u = (const unsigned char *)buf;
    if (len >= 2 && ((u[0] == 0xff && u[1] == 0xfe) || (u[0] == 0xfe && u[1] == 0xff))) {
        diag_error(d, 1, "",
                   "the file is UTF-16 (it starts with a UTF-16 byte order mark): git diff and "
                   "code review show it as binary, so a change to it is never read; write it "
                   "in UTF-8");
        return -1;
    }
    int line = 1;
    for (size_t i = 0; i < len; i++) {
        const char *what = odd_break(u + i, len - i);
        if (what != NULL) {
            diag_error(d, line, "",
                       "a line break other than LF or CR LF: %s, where YAML ends a line and "
                       "git diff and most editors do not, so what sluice reads is not what a "
                       "reviewer sees; end every line with LF",
                       what);
            return -1;
        }
        if (u[i] == '\n' && line < INT_MAX)
            line++;
    }
    return 0;
}

/* Points every scalar at its text; scalars were stored in node order. */
static void fix_strings(struct ytree *t)
{
    size_t off = 0;
    for (size_t i = 0; i < t->nnodes; i++) {
        struct ynode *n = &t->nodes[i];
        if (n->kind != YNODE_SCALAR)
            continue;
        n->str = t->text + off;
        off += n->len + 1;
    }
}

int ytree_parse(struct ytree *t, const char *buf, size_t len, int max_depth, struct diag *d)
{
    struct builder b = {.t = t, .d = d, .max_depth = max_depth};
    if (b.max_depth < 1 || b.max_depth > YTREE_DEPTH_LIMIT)
        b.max_depth = YTREE_DEPTH_LIMIT;
    memset(t, 0, sizeof(*t));
    if (len > UINT32_MAX) {
        diag_error(d, 0, "", "the YAML text is larger than %u bytes", UINT32_MAX);
        return -1;
    }
    if (reviewable_text(buf, len, d) != 0)
        return -1;

    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        fatal("out of memory initialising the YAML parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    int rc = 0;
    while (rc == 0) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            syntax_error(&b, &parser, buf, len);
            rc = -1;
            break;
        }
        rc = on_event(&b, &ev);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    if (rc < 0)
        return -1;
    fix_strings(t);
    return 0;
}

void ytree_free(struct ytree *t)
{
    if (t == NULL)
        return;
    free(t->nodes);
    free(t->text);
    memset(t, 0, sizeof(*t));
}

const struct ynode *ytree_root(const struct ytree *t)
{
    return t->nnodes > 0 ? &t->nodes[0] : NULL;
}

const struct ynode *ynode_first(const struct ynode *n)
{
    return n->kind != YNODE_SCALAR && n->count > 0 ? n + 1 : NULL;
}

const struct ynode *ynode_next(const struct ynode *parent, const struct ynode *child)
{
    const struct ynode *next = child + child->size;
    return next < parent + parent->size ? next : NULL;
}

bool ynode_is_null(const struct ynode *n)
{
    if (n->kind != YNODE_SCALAR || n->quoted)
        return false;
    return n->len == 0 || strcmp(n->str, "~") == 0 || strcmp(n->str, "null") == 0 ||
           strcmp(n->str, "Null") == 0 || strcmp(n->str, "NULL") == 0;
}
