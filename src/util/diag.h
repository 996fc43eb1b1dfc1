/* diag: the diagnostics a parser collects while it reads a file.
 *
 * Owns: a growing list of errors and warnings, each with file, line and
 * field, formatted HAProxy-style as "file:line: field: what is wrong".
 * Parsers report every problem they find instead of stopping at the first,
 * so `sluice check` can list them all; `serve` prints the first error. */
#ifndef SLUICE_UTIL_DIAG_H
#define SLUICE_UTIL_DIAG_H

#include <stdbool.h>
#include <stddef.h>

enum diag_level { DIAG_ERROR, DIAG_WARNING };

struct diag_entry {
    enum diag_level level;
    int line;    /* 0 when the problem is about the whole file */
    char *field; /* dotted path such as "rules[3].expires"; may be "" */
    char *message;
};

struct diag {
    const char *file;           /* borrowed; names the file in every message */
    struct diag_entry *entries; /* owned */
    size_t count;
    size_t cap;
    size_t errors;
    size_t warnings;
    /* Of the warnings, those about a secret's variable not set where the
     * file is checked (a CI job without the secrets): about the place, not
     * the file, so --strict does not fail on them (diag_fails_strict()). */
    size_t unset_secrets;
    /* Likewise, those about an exec alert program that cannot be run here
     * (policy/exec_programs.h): a CI job has not the programs installed. */
    size_t absent_programs;
    /* Findings past a parser's cap, counted but not listed: each kind's are
     * told by one closing entry of that kind ("N more warnings not
     * listed"), set with diag_unlisted(). */
    size_t unlisted_errors, unlisted_warnings;
};

/* Prepares <d> to collect diagnostics about <file> (borrowed, must outlive d). */
void diag_init(struct diag *d, const char *file);
/* Frees every entry; <d> may be reused after diag_init(). Accepts NULL. */
void diag_free(struct diag *d);

void diag_error(struct diag *d, int line, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void diag_warning(struct diag *d, int line, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Records that <n> findings of <level> past a cap were counted, not listed,
 * and adds the one closing entry of that level that says so: "<n> more
 * errors not listed<tail>" (<n> > 0; <tail> such as " (the first 1000 are)"). */
void diag_unlisted(struct diag *d, enum diag_level level, size_t n, const char *tail);
/* How many findings of <level> there are: those listed, less the closing
 * entry diag_unlisted() adds, plus those it counts. */
size_t diag_total(const struct diag *d, enum diag_level level);

bool diag_has_errors(const struct diag *d);
/* True when <d> holds a warning that `check --strict` fails on: any but
 * those counted in unset_secrets and absent_programs. */
bool diag_fails_strict(const struct diag *d);
/* Returns the first error, or NULL. */
const struct diag_entry *diag_first_error(const struct diag *d);

/* Formats <e> as "file:line: field: message" into <out> (always terminated). */
void diag_format(const struct diag *d, const struct diag_entry *e, char *out, size_t outlen);

/* Formats every warning as "warning: file:line: field: message\n" into
 * <out> (always terminated; "" when there is none). What does not fit ends
 * in one line that counts the warnings left out. */
void diag_format_warnings(const struct diag *d, char *out, size_t outlen);

#endif
