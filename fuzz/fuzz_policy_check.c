/* fuzz_policy_check: what `sluice check` does with a policy file, on
 * arbitrary bytes: the load that keeps a partial policy, the date's lint
 * (of the rules that parsed, for a partial one), the note about the
 * reach, and the report in both formats. fuzz_policy_load checks the
 * loader; this checks what the report makes of a hostile file's text.
 * Invariants: the JSON report is one JSON object whose "ok" is false
 * exactly when the findings hold an error (or, strict, a warning), and
 * whose lists of errors and warnings hold one entry per finding; the text report holds
 * no control byte but its line ends (a host, owner or reason holding an
 * escape sequence or a carriage return would rewrite the terminal it is
 * read on) and no "(null)"; nothing leaks (ASan). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "policy/lint.h"
#include "policy/policy.h"
#include "policy/report.h"
#include "util/env.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* 2026-12-07, a fixed day: a grant's lint must not change with the clock. */
#define TODAY 20794

static void check(int cond)
{
    if (!cond)
        abort();
}

/* The report of <p> (NULL: failed) in <format>, as a NUL-terminated string
 * the caller frees. */
static char *report(enum report_format format, const struct policy *p, const struct diag *d,
                    int warn_days, bool strict, size_t *len)
{
    char *text = NULL;
    FILE *out = open_memstream(&text, len);
    check(out != NULL);
    report_write(out, format, "fuzz.yaml", p, d, TODAY, warn_days, strict);
    check(!ferror(out));
    check(fclose(out) == 0);
    return text;
}

static void check_json(const char *text, size_t len, const struct diag *d, bool strict)
{
    json_error_t err;
    json_t *doc = json_loadb(text, len, 0, &err);
    check(doc != NULL && json_is_object(doc));
    bool failed = diag_has_errors(d) || (strict && diag_fails_strict(d));
    check(json_is_boolean(json_object_get(doc, "ok")));
    check(json_is_true(json_object_get(doc, "ok")) == !failed);
    size_t errors = 0, warnings = 0;
    for (size_t i = 0; i < d->count; i++) {
        errors += d->entries[i].level == DIAG_ERROR;
        warnings += d->entries[i].level == DIAG_WARNING;
    }
    check(json_array_size(json_object_get(doc, "errors")) == errors);
    check(json_array_size(json_object_get(doc, "warnings")) == warnings);
    json_decref(doc);
}

static void check_text(const char *text, size_t len, bool null_in)
{
    check(strlen(text) == len);
    /* a finding names what it is about: a rule of a partial policy without
     * a pattern is none the lint looks at (glibc prints NULL as "(null)"),
     * when the file spells no "null" (nor an escape that could) itself */
    check(null_in || strstr(text, "(null)") == NULL);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        check(c == '\n' || (c >= 0x20 && c != 0x7f));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setenv("SLUICE_FUZZ_TOKEN", "fuzz-secret", 0);
    env_tz_pin(); /* as sluice's main() */
    /* a report of a policy that reaches many rules is long: bounded here as
     * the test suite bounds it (report_reach_max()) */
    setenv("SLUICE_TEST_REPORT_REACH_MAX", "200", 0);
    struct diag d;
    diag_init(&d, "fuzz.yaml");
    struct policy *p =
        policy_load_buffer_flags("fuzz.yaml", (const char *)data, size,
                                 POLICY_LOAD_SECRETS_OPTIONAL | POLICY_LOAD_KEEP_PARTIAL, &d);
    bool partial = p != NULL && diag_has_errors(&d);
    int warn_days = LINT_DEFAULT_WARN_DAYS;
    if (p != NULL) {
        warn_days = lint_warn_days(p);
        policy_lint(p, TODAY, warn_days, &d); /* of a partial one, the rules that parsed */
        if (!partial)
            report_note_reach(p, &d);
    }
    const struct policy *shown = partial ? NULL : p;
    bool strict = size > 0 && (data[size - 1] & 1);
    size_t len = 0;
    char *json = report(REPORT_JSON, shown, &d, warn_days, strict, &len);
    check_json(json, len, &d, strict);
    free(json);
    char *text = report(REPORT_TEXT, shown, &d, warn_days, !strict, &len);
    check_text(text, len,
               memmem(data, size, "null", 4) != NULL || memchr(data, '\\', size) != NULL);
    free(text);
    policy_free(p);
    diag_free(&d);
    return 0;
}
