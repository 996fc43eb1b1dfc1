/* text_json: a JSON string of any text, valid UTF-8 or not.
 *
 * json_string() refuses text that is not UTF-8 (a file name, a mount point
 * named in Latin-1), and a key set from its NULL result vanishes from a
 * report. The reports of `sluice check` and `sluice audit` build their
 * strings here instead. */
#ifndef SLUICE_UTIL_TEXT_JSON_H
#define SLUICE_UTIL_TEXT_JSON_H

#include <jansson.h>

/* A new JSON string of <s> (a reference the caller owns): <s> itself when
 * it is UTF-8, else with each byte that starts no valid sequence replaced
 * by U+FFFD (utf8_lossy()), or "?" when even that cannot be made. NULL only
 * when memory runs out. */
json_t *text_json(const char *s);

#endif
