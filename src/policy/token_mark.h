/* token_mark: what tells, across reloads, whether an agent's token is
 * still the one a client presented. */
#ifndef SLUICE_POLICY_TOKEN_MARK_H
#define SLUICE_POLICY_TOKEN_MARK_H

#include <stddef.h>

#define TOKEN_MARK_LEN 32

/* The HMAC-SHA-256 of the <len> bytes of <secret> under a key drawn once
 * for the process, into <out>: the same secret gets the same mark in every
 * policy this process loads, where each policy's token_digest is under a
 * key of its own. An open tunnel keeps the mark of the agent its secret
 * named, and a reload compares it with the agent's mark in the new
 * policy: a token rotated away from it (a leaked one) is told, though the
 * secret itself was wiped once read. Never written anywhere; the key
 * cannot be had outside the process, so a mark is no more use for
 * guessing than the digests. Returns 0, or -1 when OpenSSL fails (no
 * random bytes, or the HMAC: <out> then wiped). Thread-safe (the reload
 * thread computes marks while the loop compares them). */
int token_mark(const void *secret, size_t len, unsigned char out[TOKEN_MARK_LEN]);

#endif
