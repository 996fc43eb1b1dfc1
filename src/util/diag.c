#include "util/diag.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"
#include "util/xalloc.h"

void diag_init(struct diag *d, const char *file)
{
    memset(d, 0, sizeof(*d));
    d->file = file;
}

void diag_free(struct diag *d)
{
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->count; i++) {
        free(d->entries[i].field);
        free(d->entries[i].message);
    }
    free(d->entries);
    d->entries = NULL;
    d->count = d->cap = d->errors = d->warnings = 0;
    d->unlisted_errors = d->unlisted_warnings = 0;
}

static void diag_add(struct diag *d, enum diag_level level, int line, const char *field,
                     const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

static void diag_add(struct diag *d, enum diag_level level, int line, const char *field,
                     const char *fmt, va_list ap)
{
    if (d->count == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 8;
        d->entries = xreallocarray(d->entries, d->cap, sizeof(*d->entries));
    }
    struct diag_entry *e = &d->entries[d->count++];
    e->level = level;
    e->line = line;
    e->field = xstrdup(field ? field : "");
    e->message = xvasprintf(fmt, ap);
    if (level == DIAG_ERROR)
        d->errors++;
    else
        d->warnings++;
}

void diag_error(struct diag *d, int line, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_add(d, DIAG_ERROR, line, field, fmt, ap);
    va_end(ap);
}

void diag_warning(struct diag *d, int line, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_add(d, DIAG_WARNING, line, field, fmt, ap);
    va_end(ap);
}

void diag_unlisted(struct diag *d, enum diag_level level, size_t n, const char *tail)
{
    const char *plural = n == 1 ? "" : "s";
    if (level == DIAG_ERROR) {
        d->unlisted_errors += n;
        diag_error(d, 0, "", "%zu more error%s not listed%s", n, plural, tail);
    } else {
        d->unlisted_warnings += n;
        diag_warning(d, 0, "", "%zu more warning%s not listed%s", n, plural, tail);
    }
}

size_t diag_total(const struct diag *d, enum diag_level level)
{
    size_t listed = level == DIAG_ERROR ? d->errors : d->warnings;
    size_t unlisted = level == DIAG_ERROR ? d->unlisted_errors : d->unlisted_warnings;
    return unlisted > 0 ? listed - 1 + unlisted : listed;
}

bool diag_has_errors(const struct diag *d)
{
    return d->errors > 0;
}

bool diag_fails_strict(const struct diag *d)
{
    return d->warnings > d->unset_secrets + d->absent_programs;
}

const struct diag_entry *diag_first_error(const struct diag *d)
{
    for (size_t i = 0; i < d->count; i++)
        if (d->entries[i].level == DIAG_ERROR)
            return &d->entries[i];
    return NULL;
}

void diag_format_warnings(const struct diag *d, char *out, size_t outlen)
{
    static const char more[] = "warning: ... and %zu more warning%s (sluice check lists them)\n";
    char line[1024];
    size_t used = 0, left = d->warnings;
    /* Room kept for the closing count: the longest it can be. */
    size_t reserve = sizeof(more) + 20;
    if (outlen == 0)
        return;
    out[0] = '\0';
    for (size_t i = 0; i < d->count; i++) {
        const struct diag_entry *e = &d->entries[i];
        if (e->level != DIAG_WARNING)
            continue;
        diag_format(d, e, line, sizeof(line));
        size_t n = strlen("warning: ") + strlen(line) + 1;
        bool last = left == 1;
        if (used + n + (last ? 0 : reserve) >= outlen)
            break;
        used += (size_t)snprintf(out + used, outlen - used, "warning: %s\n", line);
        left--;
    }
    if (left > 0 && used < outlen)
        snprintf(out + used, outlen - used, more, left, left == 1 ? "" : "s");
}

/* What follows the file's name in diag_format()'s text, ":line: field:
 * message", into <out> (snprintf()'s return: its whole length). */
static int format_after_file(const struct diag_entry *e, char *out, size_t outlen)
{
    if (e->line > 0 && e->field[0] != '\0')
        return snprintf(out, outlen, ":%d: %s: %s", e->line, e->field, e->message);
    if (e->line > 0)
        return snprintf(out, outlen, ":%d: %s", e->line, e->message);
    if (e->field[0] != '\0')
        return snprintf(out, outlen, ": %s: %s", e->field, e->message);
    return snprintf(out, outlen, ": %s", e->message);
}

/* The least of a file's name kept when its middle gives way. */
#define FILE_KEPT_MIN 16

void diag_format(const struct diag *d, const struct diag_entry *e, char *out, size_t outlen)
{
    const char *file = d->file ? d->file : "-";
    if (outlen == 0)
        return;
    size_t flen = strlen(file), after = (size_t)format_after_file(e, NULL, 0);
    size_t used = flen;
    if (flen + after < outlen || after + 3 + FILE_KEPT_MIN >= outlen) {
        snprintf(out, outlen, "%s", file); /* whole, or cut at the end with the rest */
        used = strlen(out);
    } else {
        /* A policy path runs to PATH_MAX: cut at the end, the message lost
         * its line, field and what is wrong. The path's middle gives way
         * ("..."), between two UTF-8 characters. */
        size_t keep = outlen - 1 - after - 3;
        used = utf8_cut_middle(out, file, flen, keep / 2, keep - keep / 2, NULL);
    }
    if (used < outlen - 1)
        format_after_file(e, out + used, outlen - used);
    else
        out[outlen - 1] = '\0';
}
