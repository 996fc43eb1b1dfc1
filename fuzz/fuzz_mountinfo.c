/* fuzz_mountinfo: mountinfo_parse() and justify_parse() on any bytes.
 * Invariants: on success every entry has its line number in order, an
 * absolute mount point, option strings without spaces, and a mount point
 * no longer than the input; re-encoding the decoded mount points and
 * parsing again gives the same entries (a round trip); a failure always
 * fills the message with "line N: ". justify_parse() never reports more bad
 * lines than the input has lines, and every path it keeps is absolute and
 * found by justify_find() (the index by path holds each entry). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "box/mountinfo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes <s> escaped as the kernel does into <out>; returns the length. */
static size_t escape(const char *s, char *out, size_t cap)
{
    size_t o = 0;
    for (; *s != '\0' && o + 5 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\\' || c < 0x20 || c == 0x7f) {
            snprintf(out + o, cap - o, "\\%03o", c);
            o += 4;
        } else {
            out[o++] = (char)c;
        }
    }
    out[o] = '\0';
    return o;
}

static void round_trip(const struct mountinfo *mi)
{
    size_t cap = 64;
    for (size_t i = 0; i < mi->n; i++) {
        const struct mountinfo_entry *e = &mi->v[i];
        cap +=
            4 * (strlen(e->root) + strlen(e->mount_point) + strlen(e->fstype) + strlen(e->source)) +
            strlen(e->mount_opts) + strlen(e->optional) + strlen(e->super_opts) + 64;
    }
    char *buf = malloc(cap);
    char *tmp = malloc(cap);
    if (buf == NULL || tmp == NULL)
        abort();
    size_t off = 0;
    for (size_t i = 0; i < mi->n; i++) {
        const struct mountinfo_entry *e = &mi->v[i];
        int n =
            snprintf(buf + off, cap - off, "%u %u %u:%u ", e->id, e->parent, e->major, e->minor);
        off += (size_t)n;
        escape(e->root, tmp, cap);
        off += (size_t)snprintf(buf + off, cap - off, "%s ", tmp);
        escape(e->mount_point, tmp, cap);
        off += (size_t)snprintf(buf + off, cap - off, "%s %s%s%s - ", tmp, e->mount_opts,
                                e->optional[0] ? " " : "", e->optional);
        escape(e->fstype, tmp, cap);
        off += (size_t)snprintf(buf + off, cap - off, "%s ", tmp);
        escape(e->source, tmp, cap);
        off += (size_t)snprintf(buf + off, cap - off, "%s %s\n", tmp, e->super_opts);
    }
    struct mountinfo again;
    char err[256];
    if (mountinfo_parse(buf, off, &again, err, sizeof(err)) != 0 || again.n != mi->n)
        abort();
    for (size_t i = 0; i < mi->n; i++) {
        const struct mountinfo_entry *a = &mi->v[i], *b = &again.v[i];
        if (a->id != b->id || a->parent != b->parent || a->major != b->major ||
            a->minor != b->minor || strcmp(a->root, b->root) != 0 ||
            strcmp(a->mount_point, b->mount_point) != 0 ||
            strcmp(a->mount_opts, b->mount_opts) != 0 || strcmp(a->optional, b->optional) != 0 ||
            strcmp(a->fstype, b->fstype) != 0 || strcmp(a->source, b->source) != 0 ||
            strcmp(a->super_opts, b->super_opts) != 0 ||
            mountinfo_is_writable(a) != mountinfo_is_writable(b))
            abort();
    }
    mountinfo_free(&again);
    free(buf);
    free(tmp);
}

static size_t count_lines(const uint8_t *data, size_t size)
{
    size_t n = size > 0 ? 1 : 0;
    for (size_t i = 0; i < size; i++)
        n += data[i] == '\n';
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mountinfo mi;
    char err[256] = "";
    if (mountinfo_parse((const char *)data, size, &mi, err, sizeof(err)) == 0) {
        unsigned last = 0;
        for (size_t i = 0; i < mi.n; i++) {
            const struct mountinfo_entry *e = &mi.v[i];
            if (e->line <= last || e->mount_point[0] != '/' || strlen(e->mount_point) > size ||
                strchr(e->mount_opts, ' ') != NULL || strchr(e->super_opts, ' ') != NULL)
                abort();
            last = e->line;
            (void)mountinfo_is_covered(&mi, e);
        }
        round_trip(&mi);
    } else if (strncmp(err, "line ", 5) != 0) {
        abort();
    }
    mountinfo_free(&mi);

    struct justify j;
    int bad = justify_parse((const char *)data, size, &j, NULL, NULL);
    if (bad > 0 && (size_t)bad > count_lines(data, size))
        abort();
    for (size_t i = 0; i < j.n; i++)
        if (j.v[i].path[0] != '/' || j.v[i].reason[0] == '\0' ||
            justify_find(&j, j.v[i].path) != &j.v[i])
            abort();
    justify_free(&j);
    return 0;
}
