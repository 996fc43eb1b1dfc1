/* text_json: a JSON string of any text, valid UTF-8 or not, and a line of
 * a text report that no text can break.
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

/* A copy of <s> for a text report, each control character (a byte below
 * 0x20, 0x7f, a C1 control U+0080 to U+009F) and the backslash written
 * \ooo, as mountinfo writes them: a mount point or a file name holding a
 * line end (\012) or a terminal escape cannot write lines of its own into
 * the report ("result: 0 errors"), nor rub out the ones before it. The
 * caller frees it; never NULL (xmalloc). A byte 0x80 to 0x9f that is no
 * part of a valid UTF-8 sequence (Latin-1 text) is escaped too: a terminal
 * reading 8-bit controls takes 0x85 for a line end, 0x9b for an escape. */
char *text_shown(const char *s);

/* As text_shown(), into <out> of <outlen> bytes (cut at the end, never
 * within an escape or a UTF-8 sequence, when it is too short; 4 x
 * strlen(s) + 1 always fits): for a server's loop, which goes on when
 * memory runs out. Returns the length. */
size_t text_shown_into(char *out, size_t outlen, const char *s);

/* As text_shown(), into <out> of <outlen> bytes; when it is longer, its
 * middle gives way to "..." (between two characters, never within an
 * escape or a UTF-8 sequence): a path keeps its start and its end, the
 * file's name, where a cut at the end kept neither the name nor what a
 * message said after it. Returns the length. */
size_t text_shown_fit(char *out, size_t outlen, const char *s);

#endif
