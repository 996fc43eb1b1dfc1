/* log_same: whether two log paths (--log and --alerts) name one file.
 *
 * Compared as strings, `--log a.jsonl --alerts ./a.jsonl` (a symbolic or a
 * hard link to it, /dev/stdout beside `--log -`) opened the file twice: two
 * writers, two pending queues, two sets of log gauges for one file, and a
 * SIGHUP reopening it twice. What the paths name is compared instead, as
 * log_jsonl_open() resolves them. */
#ifndef SLUICE_WATCH_LOG_SAME_H
#define SLUICE_WATCH_LOG_SAME_H

#include <stdbool.h>

/* True when the log paths <a> and <b> (NULL or "-": standard output) name
 * one file: equal strings, or the same file (st_dev and st_ino) once
 * resolved as log_jsonl_open() opens them with <flags> (LOG_JSONL_NO_LINKS:
 * a path through a symbolic link names nothing here, the open refuses it).
 * Looks, never opens for reading or writing: creates nothing, waits for no
 * FIFO's reader. */
bool log_same_file(const char *a, const char *b, unsigned flags);

#endif
