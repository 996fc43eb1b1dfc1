/* chunk_ext: the grammar of a chunk's extensions (RFC 9112 7.1.1), read a
 * byte at a time by the chunked framer (chunked.c):
 *
 *   chunk-ext     = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
 *   chunk-ext-val = token / quoted-string
 *
 * The framer forwards extensions unchanged, so it holds them to the
 * grammar: an origin (or agent) that reads a quoted-string on past a CR,
 * or takes a quote in a token for the start of one, would end the
 * chunk-size line elsewhere than the gateway and frame the rest of the
 * body its own way. Whitespace before the CR is taken (as after the size).
 * The state is one byte of plain data. */
#ifndef SLUICE_GATE_CHUNK_EXT_H
#define SLUICE_GATE_CHUNK_EXT_H

/* The state right after a ';' of a chunk-size line. */
#define CHUNK_EXT_START 0

enum chunk_ext_step {
    CHUNK_EXT_ON = 0,   /* the byte belongs to the extensions */
    CHUNK_EXT_END = 1,  /* the byte is the CR that ends them */
    CHUNK_EXT_BAD = -1, /* the byte breaks the grammar */
};

/* Takes <ch>, the next byte of the extensions, in <*state>. */
enum chunk_ext_step chunk_ext_step(unsigned char *state, unsigned char ch);

#endif
