/* chunked: an incremental framer for chunked message bodies (see chunked.h).
 *
 *   chunked-body = *chunk last-chunk trailer-section CRLF
 *   chunk        = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
 *   last-chunk   = 1*("0") [ chunk-ext ] CRLF
 */
#include "gate/chunked.h"

#include <stdbool.h>

#include "gate/chunk_ext.h"
#include "gate/http1.h"
#include "util/hex.h"

enum {
    S_SIZE,          /* reading hex digits of a chunk size */
    S_SIZE_WS,       /* BWS after the size, before ';' or CR */
    S_EXT,           /* inside chunk extensions, until CR (chunk_ext.c) */
    S_SIZE_LF,       /* the LF ending the size line */
    S_DATA,          /* chunk data */
    S_DATA_CR,       /* the CR after chunk data */
    S_DATA_LF,       /* the LF after chunk data */
    S_TRAILER_START, /* start of a trailer line, or the final CRLF */
    S_TRAILER_NAME,  /* a trailer field name, until ':' */
    S_TRAILER_VALUE, /* a trailer field value, until CR */
    S_TRAILER_LF,    /* the LF ending a trailer line */
    S_FINAL_LF,      /* the LF of the final CRLF */
    S_DONE,
    S_ERROR,
};

void chunked_init(struct chunked *c)
{
    c->state = S_SIZE;
    c->remaining = 0;
    c->ndigits = 0;
    c->line_len = 0;
    c->trailer_len = 0;
    c->total = 0;
    c->trailer_at = 0;
    c->ext = CHUNK_EXT_START;
    c->why = NULL;
    c->max_digits = CHUNKED_MAX_DIGITS;
    c->max_size = (uint64_t)INT64_MAX;
}

void chunked_init_request(struct chunked *c)
{
    chunked_init(c);
    c->max_digits = CHUNKED_REQUEST_MAX_DIGITS;
    c->max_size = CHUNKED_REQUEST_MAX_SIZE;
}

/* HT, SP, VCHAR, obs-text: what may appear in a trailer field value. */
static bool is_text(unsigned char ch)
{
    return ch == '\t' || (ch >= 0x20 && ch != 0x7f);
}

static int fail(struct chunked *c, const char *why, size_t at, size_t *consumed)
{
    c->state = S_ERROR;
    c->why = why;
    *consumed = at;
    return CHUNKED_ERROR;
}

int chunked_feed(struct chunked *c, const char *data, size_t len, size_t *consumed)
{
    return chunked_feed_data(c, data, len, consumed, NULL, NULL);
}

int chunked_feed_data(struct chunked *c, const char *data, size_t len, size_t *consumed,
                      chunked_data_fn emit, void *arg)
{
    if (c->state == S_DONE || c->state == S_ERROR) {
        *consumed = 0;
        return c->state == S_DONE ? CHUNKED_DONE : CHUNKED_ERROR;
    }
    size_t i = 0;
    while (i < len) {
        unsigned char ch = (unsigned char)data[i];
        if (c->state == S_DATA) {
            size_t avail = len - i;
            size_t n = c->remaining < avail ? (size_t)c->remaining : avail;
            if (emit != NULL && emit(arg, data + i, n) < 0)
                return fail(c, "out of memory", i, consumed);
            c->remaining -= n;
            i += n;
            c->total += n;
            if (c->remaining == 0)
                c->state = S_DATA_CR;
            continue;
        }
        if ((c->state == S_SIZE || c->state == S_SIZE_WS || c->state == S_EXT) &&
            ++c->line_len > CHUNKED_MAX_LINE)
            return fail(c, "chunk-size line too long", i, consumed);
        if (c->state >= S_TRAILER_START && c->state <= S_FINAL_LF &&
            ++c->trailer_len > CHUNKED_MAX_TRAILERS)
            return fail(c, "trailer section too large", i, consumed);
        switch (c->state) {
        case S_SIZE: {
            int d = hex_digit_value(ch);
            if (d >= 0) {
                if (c->ndigits == c->max_digits)
                    return fail(c, "chunk size too long", i, consumed);
                if (c->remaining > (c->max_size - (uint64_t)d) / 16)
                    return fail(c, "chunk size too large", i, consumed);
                c->remaining = c->remaining * 16 + (uint64_t)d;
                c->ndigits++;
                break;
            }
            if (c->ndigits == 0)
                return fail(c, "invalid chunk size", i, consumed);
            if (ch == ' ' || ch == '\t')
                c->state = S_SIZE_WS;
            else if (ch == ';')
                c->state = S_EXT;
            else if (ch == '\r')
                c->state = S_SIZE_LF;
            else
                return fail(c, "invalid chunk size", i, consumed);
            break;
        }
        case S_SIZE_WS:
            if (ch == ';')
                c->state = S_EXT;
            else if (ch == '\r')
                c->state = S_SIZE_LF;
            else if (ch != ' ' && ch != '\t')
                return fail(c, "invalid chunk size", i, consumed);
            break;
        case S_EXT: {
            enum chunk_ext_step step = chunk_ext_step(&c->ext, ch);
            if (step == CHUNK_EXT_BAD)
                return fail(c, "invalid chunk extension", i, consumed);
            if (step == CHUNK_EXT_END)
                c->state = S_SIZE_LF;
            break;
        }
        case S_SIZE_LF:
            if (ch != '\n')
                return fail(c, "CR without LF in chunk-size line", i, consumed);
            if (c->remaining == 0) {
                c->state = S_TRAILER_START;
                c->trailer_len = 0;
                c->trailer_at = c->total + 1; /* this LF included */
            } else {
                c->state = S_DATA;
            }
            break;
        case S_DATA_CR:
            if (ch != '\r')
                return fail(c, "missing CRLF after chunk data", i, consumed);
            c->state = S_DATA_LF;
            break;
        case S_DATA_LF:
            if (ch != '\n')
                return fail(c, "missing CRLF after chunk data", i, consumed);
            c->state = S_SIZE;
            c->remaining = 0;
            c->ndigits = 0;
            c->line_len = 0;
            c->ext = CHUNK_EXT_START;
            break;
        case S_TRAILER_START:
            if (ch == '\r')
                c->state = S_FINAL_LF;
            else if (http1_is_tchar(ch))
                c->state = S_TRAILER_NAME;
            else
                return fail(c, "invalid trailer field", i, consumed);
            break;
        case S_TRAILER_NAME:
            if (ch == ':')
                c->state = S_TRAILER_VALUE;
            else if (!http1_is_tchar(ch))
                return fail(c, "invalid trailer field", i, consumed);
            break;
        case S_TRAILER_VALUE:
            if (ch == '\r')
                c->state = S_TRAILER_LF;
            else if (!is_text(ch))
                return fail(c, "invalid trailer field", i, consumed);
            break;
        case S_TRAILER_LF:
            if (ch != '\n')
                return fail(c, "CR without LF in trailer", i, consumed);
            c->state = S_TRAILER_START;
            break;
        case S_FINAL_LF:
            if (ch != '\n')
                return fail(c, "CR without LF at end of body", i, consumed);
            c->state = S_DONE;
            c->total++;
            *consumed = i + 1;
            return CHUNKED_DONE;
        default:
            return fail(c, "internal state", i, consumed);
        }
        c->total++;
        i++;
    }
    *consumed = len;
    return CHUNKED_MORE;
}
