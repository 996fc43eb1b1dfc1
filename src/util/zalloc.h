/* zalloc: zeroed memory for what the data path makes and frees on every
 * connection (a connection's upstream connect, its tunnel, its flow), or
 * on a new agent's first request (its shaping entries: shape/quota.c,
 * which takes a reload's index of rates here too, so that its unit test,
 * which replaces this function, can fail each allocation of a reload; so
 * do the watch's alert sinks, the exec sinks' runner among them).
 *
 * glibc's calloc() (before 2.41) takes no chunk from the thread's cache
 * (tcache), which malloc() does: a calloc() goes through _int_malloc()
 * every time (about 250 instructions), while the free() of a structure
 * made per connection leaves a chunk of its size in that cache for the
 * next. malloc() and a memset() take it. */
#ifndef SLUICE_UTIL_ZALLOC_H
#define SLUICE_UTIL_ZALLOC_H

#include <stddef.h>

/* Returns <n> bytes (n > 0), all zero, or NULL when out of memory; the
 * caller frees them with free(). */
void *zalloc(size_t n);

/* A copy of the string <text> through zalloc() (strdup() that a unit test
 * can fail), or NULL when out of memory; the caller frees it. */
char *zalloc_text(const char *text);

#endif
