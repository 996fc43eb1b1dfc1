/* fuzz_alert_env: the search variables' values that run's caller passes its
 * `exec` alert programs (box/alert_env.c), as the kept entries are made of
 * them. The first byte chooses the variable (of search_vars[]); the rest,
 * up to its first NUL, is the value. An entry counts as one the command
 * can change when it holds "w" (a stand-in for reach_can_change()).
 *
 * Invariants: the kept value is, in order, exactly the value's entries
 * (parted at any byte of the variable's separators) that are absolute,
 * shorter than PATH_MAX and not changeable, joined by the variable's join
 * byte, with ";;" after them exactly when the variable's ";;" stands for
 * its default path and the value held one; no kept entry is relative,
 * empty or changeable; filtering the kept value again keeps it as it is
 * (a fixed point).
 * Includes the .c to reach search_vars[] and kept_value(). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/box/alert_env.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define INPUT_MAX 16384

static void check(int cond)
{
    if (!cond)
        abort();
}

static bool holds_w(const char *entry, const void *ctx)
{
    (void)ctx;
    return strchr(entry, 'w') != NULL;
}

/* The kept entries of <value> as the header says, written by another walk. */
static char *reference(const struct search_var *v, const char *value)
{
    size_t n = strlen(value);
    char *out = malloc(n + 4);
    check(out != NULL);
    size_t o = 0, start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && strchr(v->seps, value[i]) == NULL)
            continue;
        size_t len = i - start;
        const char *e = value + start;
        bool keep = len > 0 && len < PATH_MAX && e[0] == '/' && memchr(e, 'w', len) == NULL;
        if (keep) {
            if (o > 0)
                out[o++] = v->join;
            memcpy(out + o, e, len);
            o += len;
        }
        start = i + 1;
    }
    if (v->default_mark && strstr(value, ";;") != NULL) {
        memcpy(out + o, ";;", 2);
        o += 2;
    }
    out[o] = '\0';
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > INPUT_MAX)
        return 0;
    const struct search_var *v =
        &search_vars[data[0] % (sizeof(search_vars) / sizeof(search_vars[0]))];
    char *value = malloc(size);
    check(value != NULL);
    memcpy(value, data + 1, size - 1);
    value[size - 1] = '\0';

    char *kept = kept_value(v, value, holds_w, NULL);
    check(kept != NULL);
    char *want = reference(v, value);
    check(strcmp(kept, want) == 0);

    /* Filtered again: as it is. */
    char *again = kept_value(v, kept, holds_w, NULL);
    check(again != NULL && strcmp(again, kept) == 0);

    free(again);
    free(want);
    free(kept);
    free(value);
    return 0;
}
