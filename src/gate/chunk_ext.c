/* chunk_ext: the grammar of a chunk's extensions (see chunk_ext.h). */
#include "gate/chunk_ext.h"

#include <stdbool.h>

#include "gate/http1.h"

enum {
    E_NAME_WAIT = CHUNK_EXT_START, /* BWS before a name, after ';' */
    E_NAME,                        /* a name's tchars */
    E_NAME_DONE,                   /* BWS after a name: '=', ';' or the CR next */
    E_VALUE_WAIT,                  /* BWS after '=' */
    E_TOKEN,                       /* a token value's tchars */
    E_QUOTED,                      /* inside a quoted-string */
    E_QUOTED_PAIR,                 /* after a backslash in a quoted-string */
    E_VALUE_DONE,                  /* BWS after a value: ';' or the CR next */
};

static bool is_ws(unsigned char ch)
{
    return ch == ' ' || ch == '\t';
}

/* qdtext: HTAB, SP, VCHAR but '"' and '\', obs-text. */
static bool is_qdtext(unsigned char ch)
{
    return ch == '\t' || (ch >= 0x20 && ch != 0x7f && ch != '"' && ch != '\\');
}

/* A byte in or after a word, a name or a token value (<in> the state in
 * it, <done> after it): more of its tchars while in it, blanks to its end,
 * '=' after a name, then the next extension or the line's end. A
 * quoted-string's end is the word's (<done> then). */
static enum chunk_ext_step after_word(unsigned char *state, unsigned char ch, unsigned char in,
                                      unsigned char done)
{
    if (*state == in && http1_is_tchar(ch))
        return CHUNK_EXT_ON;
    if (is_ws(ch))
        *state = done;
    else if (ch == '=' && done == E_NAME_DONE)
        *state = E_VALUE_WAIT;
    else if (ch == ';')
        *state = E_NAME_WAIT;
    else
        return ch == '\r' ? CHUNK_EXT_END : CHUNK_EXT_BAD;
    return CHUNK_EXT_ON;
}

enum chunk_ext_step chunk_ext_step(unsigned char *state, unsigned char ch)
{
    switch (*state) {
    case E_NAME_WAIT:
        if (http1_is_tchar(ch))
            *state = E_NAME;
        return http1_is_tchar(ch) || is_ws(ch) ? CHUNK_EXT_ON : CHUNK_EXT_BAD;
    case E_NAME:
    case E_NAME_DONE:
        return after_word(state, ch, E_NAME, E_NAME_DONE);
    case E_VALUE_WAIT:
        if (ch == '"')
            *state = E_QUOTED;
        else if (http1_is_tchar(ch))
            *state = E_TOKEN;
        else if (!is_ws(ch))
            return CHUNK_EXT_BAD;
        return CHUNK_EXT_ON;
    case E_QUOTED:
        if (ch == '"')
            *state = E_VALUE_DONE;
        else if (ch == '\\')
            *state = E_QUOTED_PAIR;
        else if (!is_qdtext(ch))
            return CHUNK_EXT_BAD; /* a CR too: the quote is still open */
        return CHUNK_EXT_ON;
    case E_QUOTED_PAIR:
        /* HTAB, SP, VCHAR, obs-text */
        if (ch != '\t' && (ch < 0x20 || ch == 0x7f))
            return CHUNK_EXT_BAD;
        *state = E_QUOTED;
        return CHUNK_EXT_ON;
    case E_TOKEN:
    case E_VALUE_DONE:
        return after_word(state, ch, E_TOKEN, E_VALUE_DONE);
    default:
        return CHUNK_EXT_BAD;
    }
}
