#include "util/xalloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Noreturn void fatal(const char *fmt, ...)
{
    va_list ap;
    fputs("sluice: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        fatal("out of memory allocating %zu bytes", n);
    return p;
}

void *xcalloc(size_t nmemb, size_t size)
{
    void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
    if (p == NULL)
        fatal("out of memory allocating %zu x %zu bytes", nmemb, size);
    return p;
}

void *xreallocarray(void *p, size_t nmemb, size_t size)
{
    if (size != 0 && nmemb > SIZE_MAX / size)
        fatal("allocation of %zu x %zu bytes overflows", nmemb, size);
    size_t n = nmemb * size;
    void *q = realloc(p, n != 0 ? n : 1);
    if (q == NULL)
        fatal("out of memory allocating %zu x %zu bytes", nmemb, size);
    return q;
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = xmalloc(len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

char *xvasprintf(const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        fatal("bad format string");
    char *p = xmalloc((size_t)n + 1);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    return p;
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *p = xvasprintf(fmt, ap);
    va_end(ap);
    return p;
}
