#include "policy/yaml_tree.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "util/xalloc.h"

#define YTREE_DEPTH_LIMIT 64
#define YAML_STR_TAG      "tag:yaml.org,2002:str"

struct builder {
    struct ytree *t;
    struct diag *d;
    int max_depth;
    size_t stack[YTREE_DEPTH_LIMIT];
    int sp;
    int documents;
};

static int mark_line(const yaml_mark_t *m)
{
    return m->line >= (size_t)INT_MAX ? INT_MAX : (int)m->line + 1;
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
    if (b->sp > 0)
        t->nodes[b->stack[b->sp - 1]].count++;
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

/* Anchors, aliases and tags (other than !!str) are refused. Returns 0 or -1. */
static int check_props(struct builder *b, const yaml_char_t *anchor, const yaml_char_t *tag,
                       int line, bool *quoted)
{
    if (anchor != NULL) {
        diag_error(b->d, line, "", "anchors and aliases are not supported");
        return -1;
    }
    if (tag == NULL)
        return 0;
    if (quoted != NULL && strcmp((const char *)tag, YAML_STR_TAG) == 0) {
        *quoted = true;
        return 0;
    }
    diag_error(b->d, line, "", "YAML tags are not supported");
    return -1;
}

static int on_scalar(struct builder *b, const yaml_event_t *ev)
{
    int line = mark_line(&ev->start_mark);
    bool quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    if (check_props(b, ev->data.scalar.anchor, ev->data.scalar.tag, line, &quoted) != 0)
        return -1;
    const char *value = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    if (memchr(value, '\0', len) != NULL) {
        diag_error(b->d, line, "", "a string contains a NUL byte");
        return -1;
    }
    struct ynode *n = add_node(b, YNODE_SCALAR, line);
    if (n == NULL)
        return -1;
    n->quoted = quoted;
    n->len = len;
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
    if (check_props(b, anchor, tag, line, NULL) != 0)
        return -1;
    if (b->sp >= b->max_depth) {
        diag_error(b->d, line, "", "nesting deeper than %d levels", b->max_depth);
        return -1;
    }
    if (add_node(b, kind, line) == NULL)
        return -1;
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
        diag_error(b->d, mark_line(&ev->start_mark), "", "aliases are not supported");
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

static void syntax_error(struct builder *b, const yaml_parser_t *parser)
{
    if (parser->error == YAML_MEMORY_ERROR) {
        diag_error(b->d, 0, "", "out of memory while reading YAML");
        return;
    }
    const char *problem = parser->problem ? parser->problem : "unreadable input";
    diag_error(b->d, mark_line(&parser->problem_mark), "", "YAML syntax error: %s", problem);
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

    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        fatal("out of memory initialising the YAML parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    int rc = 0;
    while (rc == 0) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            syntax_error(&b, &parser);
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
