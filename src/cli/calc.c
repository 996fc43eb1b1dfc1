/* sluice calc: back-of-the-envelope figures for the people writing policies.
 *
 * `sluice calc retries`: how far retries multiply load when every layer of
 * a call chain retries on its own. With L layers each making up to a
 * attempts, one request at the top becomes up to a^L at the bottom (3
 * layers of 3 attempts: 27x). A retry budget b per layer (retries at most
 * a fraction b of the requests) bounds each layer to (1 + b) times its
 * input (and never more than a), so the chain to min(a, 1 + b)^L: 1.33x
 * for 10% over 3 layers; a budget that allows more retries than the
 * attempts do changes nothing (a^L). */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "util/text_json.h"
#include "util/units.h"

#define CALC_MAX_LAYERS   20
#define CALC_MAX_ATTEMPTS 100
#define CALC_MAX_RPS      1e12
/* DBL_MIN is 2.2250738585072014e-308 */
#define TOO_SMALL "too small to compute with (the smallest is about 2.225e-308)"

static const char retries_synopsis[] = "retries --layers N --attempts N [--budget RATIO] [--rps N]";

/* parse_num()'s results besides 0 and -1 (not a plain decimal). */
#define NUM_TINY (-2) /* positive, but under DBL_MIN: strtod() underflows */
#define NUM_HUGE (-3) /* over DBL_MAX: strtod() overflows */

/* Parses a plain decimal number ("0.1", "250"); with <pct>, "10%" too.
 * Returns 0, -1 when <s> is not one, NUM_TINY or NUM_HUGE when it is one
 * that no double holds. */
static int parse_num(const char *s, bool pct, double *out)
{
    bool nonzero = false;
    if (s == NULL || *s == '\0')
        return -1;
    for (const char *p = s; *p != '\0'; p++) {
        if (!((*p >= '0' && *p <= '9') || *p == '.' || (pct && *p == '%' && p[1] == '\0')))
            return -1; /* no signs, exponents, hex, inf or nan */
        nonzero |= *p >= '1' && *p <= '9';
    }
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || (errno != 0 && errno != ERANGE))
        return -1;
    if (*end == '%') {
        v /= 100.0;
        end++;
    }
    if (*end != '\0')
        return -1;
    if (!isfinite(v) || v > DBL_MAX)
        return NUM_HUGE;
    if (nonzero && v < DBL_MIN) /* 0, or a subnormal that lost its digits */
        return NUM_TINY;
    *out = v;
    return 0;
}

/* "27", "1.33", "2.6e+40", "0.00133": a figure as people read it. */
static void format_x(double v, char *buf, size_t cap)
{
    if (v >= 1e15 || (v > 0 && v < 1)) { /* two decimals would print 0.001 as 0 */
        snprintf(buf, cap, "%.3g", v);
        return;
    }
    snprintf(buf, cap, "%.2f", v);
    char *dot = strchr(buf, '.');
    if (dot == NULL)
        return;
    size_t n = strlen(buf);
    while (n > 0 && buf[n - 1] == '0')
        buf[--n] = '\0';
    if (n > 0 && buf[n - 1] == '.')
        buf[n - 1] = '\0';
}

static int retries_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int retries_error(const char *fmt, ...)
{
    va_list ap;
    fputs("sluice calc: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fprintf(stderr, "usage: sluice calc %s\n", retries_synopsis);
    return EXIT_USAGE;
}

/* retries_error() for an argument as given, "BEFORE'RAW'AFTER", <raw> shown
 * \ooo (text_shown()): what the caller passes may hold a line end or a
 * terminal escape (a file name a glob expanded), which must not write lines
 * of its own into standard error. */
static int retries_refused(const char *before, const char *raw, const char *after)
{
    char *shown = text_shown(raw);
    int rc = retries_error("%s'%s'%s", before, shown, after);
    free(shown);
    return rc;
}

static int calc_retries(int argc, char **argv)
{
    static const char *const flags[] = {"--layers", "--attempts", "--budget", "--rps"};
    bool seen[sizeof(flags) / sizeof(flags[0])] = {false};
    long layers = 0, attempts = 0;
    double budget = -1, rps = -1;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
            return command_help(&cmd_calc);
        /* "--layers=3" as the other commands (getopt_long) take it */
        const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        size_t len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
        size_t f = 0;
        while (f < sizeof(flags) / sizeof(flags[0]) &&
               (strncmp(arg, flags[f], len) != 0 || flags[f][len] != '\0'))
            f++;
        if (f == sizeof(flags) / sizeof(flags[0]))
            return retries_refused("unknown argument ", arg, "");
        const char *opt = flags[f];
        if (seen[f])
            return retries_error("%s given twice", opt);
        seen[f] = true;
        if (eq == NULL && i + 1 >= argc)
            return retries_error("%s needs a value", opt);
        const char *v = eq != NULL ? eq + 1 : argv[++i];
        char why_num[64]; /* what is wrong with a number given */
        if (strcmp(opt, "--layers") == 0) {
            if (parse_int_option(v, 1, CALC_MAX_LAYERS, &layers, why_num, sizeof(why_num)) < 0)
                return retries_refused("--layers: ", v, why_num);
        } else if (strcmp(opt, "--attempts") == 0) {
            if (parse_int_option(v, 1, CALC_MAX_ATTEMPTS, &attempts, why_num, sizeof(why_num)) < 0)
                return retries_refused("--attempts: ", v, why_num);
        } else if (strcmp(opt, "--budget") == 0) {
            int rc = parse_num(v, true, &budget);
            if (rc == NUM_TINY)
                return retries_refused("--budget: ", v,
                                       " is " TOO_SMALL "; write 0 for no retries");
            if (rc == NUM_HUGE || (rc == 0 && budget > 1))
                return retries_refused("--budget: ", v,
                                       " is more than 1 (a ratio from 0 to 1: 0.1 or 10%)");
            if (rc < 0)
                return retries_refused("--budget: ", v,
                                       " is not a ratio from 0 to 1 written as a decimal (0.1) "
                                       "or a percentage (10%)");
        } else {
            int rc = parse_num(v, false, &rps);
            if (rc == NUM_TINY)
                return retries_refused("--rps: ", v, " is " TOO_SMALL);
            if (rc == NUM_HUGE || (rc == 0 && rps > CALC_MAX_RPS))
                return retries_refused("--rps: ", v, " is more than 1e+12 requests a second");
            if (rc == 0 && rps <= 0)
                return retries_refused("--rps: ", v,
                                       " is not a positive number of requests a second");
            if (rc < 0)
                return retries_refused("--rps: ", v,
                                       " is not a positive number of requests a second written "
                                       "as a decimal (100 or 0.5)");
        }
    }
    if (layers == 0)
        return retries_error("%s", "--layers is required");
    if (attempts == 0)
        return retries_error("%s", "--attempts is required");

    double worst = pow((double)attempts, (double)layers);
    char wx[64], bx[64] = "", load[64], bload[64];
    format_x(worst, wx, sizeof(wx));
    printf("retry amplification: %ld layer%s, up to %ld attempt%s at each\n", layers,
           layers == 1 ? "" : "s", attempts, attempts == 1 ? "" : "s");
    printf("  worst case, every layer retrying every failure: %ld^%ld = %sx\n", attempts, layers,
           wx);
    double with_budget = worst;
    if (budget >= 0) {
        bool capped = 1.0 + budget >= (double)attempts; /* more retries than attempts allow */
        with_budget = pow(capped ? (double)attempts : 1.0 + budget, (double)layers);
        format_x(with_budget, bx, sizeof(bx));
        char pct[32];
        format_x(budget * 100.0, pct, sizeof(pct));
        if (capped)
            printf("  with a %s%% retry budget at each layer: min(%ld, 1 + %g)^%ld = %ld^%ld = %sx "
                   "(the attempts are the limit)\n",
                   pct, attempts, budget, layers, attempts, layers, bx);
        else
            printf("  with a %s%% retry budget at each layer: (1 + %g)^%ld = %sx\n", pct, budget,
                   layers, bx);
    }
    if (rps > 0) {
        format_x(rps * worst, load, sizeof(load));
        char in[64];
        format_x(rps, in, sizeof(in));
        printf("  %s requests/s at the top: the bottom layer sees up to %s requests/s", in, load);
        if (budget >= 0) {
            format_x(rps * with_budget, bload, sizeof(bload));
            printf(" (%s requests/s with the budget)", bload);
        }
        printf(" while it is failing\n");
    }
    /* with one attempt a layer nothing retries: 1x, which no budget beats */
    char cost[96];
    if (attempts == 1)
        snprintf(cost, sizeof(cost), "at most 1.1x");
    else
        snprintf(cost, sizeof(cost), "1.1x, not %sx", wx);
    printf("recommendation:\n"
           "  - retry at one layer only (the one closest to the caller); every other layer "
           "fails fast and passes the error up\n"
           "  - give that layer a retry budget: retries at most 10%% of its requests "
           "(--budget 0.1), so an outage costs %s\n"
           "  - back off with full jitter: sleep = random(0, min(cap, base * 2^attempt)), "
           "e.g. base 100 ms, cap 10 s\n"
           "  - honour Retry-After (sluice's 429 rate_limited says how long to wait)\n",
           cost);
    return EXIT_OK;
}

static int calc_main(int argc, char **argv)
{
    if (argc < 2) {
        fputs("sluice calc: which calculation? (retries)\n", stderr);
        return command_usage(&cmd_calc);
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
        return command_help(&cmd_calc);
    if (strcmp(argv[1], "retries") == 0)
        return calc_retries(argc - 1, argv + 1);
    return command_arg_error(&cmd_calc, "unknown calculation ", argv[1], " (known: retries)");
}

const struct command cmd_calc = {
    .name = "calc",
    .synopsis = "retries --layers N --attempts N [--budget RATIO] [--rps N]",
    .summary = "back-of-the-envelope figures: how far retries amplify load",
    .help = "retries: the worst-case load amplification when each of N layers of a call chain\n"
            "retries on its own: attempts^layers (3 layers of 3 attempts: 27x). With --budget\n"
            "RATIO (0..1, or a percentage such as 10%), each layer's retries are capped at that\n"
            "fraction of its requests: min(attempts, 1 + RATIO)^layers (10% over 3 layers:\n"
            "1.33x). With --rps N, the peak requests a second the bottom layer sees for N a\n"
            "second at the top.\n"
            "Ends with a recommendation: retry at one layer, retry budgets, full-jitter backoff\n"
            "(sleep = random(0, min(cap, base * 2^attempt))).\n"
            "\n"
            "  --layers N     layers that each retry, 1 to 20\n"
            "  --attempts N   attempts each layer makes, the first included, 1 to 100\n"
            "  --budget RATIO retry budget per layer, 0 to 1\n"
            "  --rps N        requests a second offered at the top\n"
            "\n"
            "Exit status: 0, or 2 on a missing, invalid or repeated argument.\n",
    .main = calc_main,
};
