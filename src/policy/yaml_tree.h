/* yaml_tree: a small, bounded tree built from libyaml's event API.
 *
 * The policy loader never walks libyaml's document API: a hostile file could
 * make it build an unbounded graph (aliases, deep nesting). This module
 * builds a flat, pre-order array of nodes instead, with a depth cap, a node
 * cap and no anchors, aliases, tags or second documents, and records each
 * node's 1-based line and whether a scalar was quoted (so "null" and "true"
 * written in quotes stay strings). Everything is owned by the struct ytree
 * and freed by ytree_free(). */
#ifndef SLUICE_POLICY_YAML_TREE_H
#define SLUICE_POLICY_YAML_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/diag.h"

/* At most this many nodes (4 Mi, 32 bytes each: 128 MiB, the array's
 * last doubling holding 192 MiB at once). A policy of POLICY_MAX_BYTES
 * (16 MiB) written to make one node a byte ("x: {a,a,a,...}": a key and a
 * null value for every two bytes) stops here, while 800,000 rules of the
 * shortest kind ("{host: a.b, tier: 0},", five nodes in 21 bytes) fit. */
#define YTREE_MAX_NODES (1u << 22)

enum ynode_kind { YNODE_SCALAR, YNODE_SEQUENCE, YNODE_MAPPING };

/* Children of a container follow it in the array; a child's next sibling is
 * at child + child->size. A mapping's children alternate key, value.
 * Every scalar of the file is one: the fields are as narrow as the file's
 * size allows (ytree_parse() refuses more than UINT32_MAX bytes). */
struct ynode {
    const char *str; /* scalar: NUL-terminated, no NUL inside; else "" */
    int line;        /* 1-based */
    uint32_t size;   /* nodes in this subtree, itself included */
    uint32_t count;  /* direct children (a mapping: twice its pairs) */
    uint32_t len;    /* scalar: bytes in <str> */
    uint8_t kind;    /* enum ynode_kind */
    bool quoted;     /* scalar written in any non-plain style */
};

struct ytree {
    struct ynode *nodes; /* owned; nodes[0] is the root when nnodes > 0 */
    size_t nnodes;
    size_t cap;
    char *text; /* owned: every scalar's bytes, each NUL-terminated */
    size_t tlen;
    size_t tcap;
};

/* Parses <len> bytes of <buf> (not necessarily terminated) into <t>, which
 * the caller frees with ytree_free() whatever the result. Returns 0, or -1
 * after reporting one error to <d> ("YAML syntax error: ...", aliases,
 * tags, nesting deeper than <max_depth>, a second document, more than
 * YTREE_MAX_NODES nodes, more than UINT32_MAX bytes). */
int ytree_parse(struct ytree *t, const char *buf, size_t len, int max_depth, struct diag *d);

void ytree_free(struct ytree *t);

/* The document's root node, or NULL for an empty stream. */
const struct ynode *ytree_root(const struct ytree *t);

/* Iteration over a container's children:
 *   for (c = ynode_first(n); c != NULL; c = ynode_next(n, c)) */
const struct ynode *ynode_first(const struct ynode *n);
const struct ynode *ynode_next(const struct ynode *parent, const struct ynode *child);

/* True for a plain scalar that YAML reads as null: "", "~", "null". */
bool ynode_is_null(const struct ynode *n);

#endif
