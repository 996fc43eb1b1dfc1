/* xalloc: allocation that cannot return NULL.
 *
 * Used at start-up and for small control-path allocations (policy loading,
 * diagnostics). An allocation failure there is fatal: the process has not
 * started serving. The data path (gate) uses plain malloc and closes the one
 * connection that could not get memory. */
#ifndef SLUICE_UTIL_XALLOC_H
#define SLUICE_UTIL_XALLOC_H

#include <stdarg.h>
#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t nmemb, size_t size);
void *xreallocarray(void *p, size_t nmemb, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* Returns a new string formatted like vsnprintf; the caller frees it. */
char *xvasprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "sluice: <message>" on standard error and exits with status 2. */
_Noreturn void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
