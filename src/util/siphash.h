/* siphash: SipHash-1-3 (Aumasson & Bernstein), for hash tables whose keys
 * an agent, an upstream or a policy author chooses: under a random key no
 * one outside the process knows, no one can aim collisions at one bucket.
 * Not a MAC: the 1-3 rounds are for tables, as in Rust's and Python's. */
#ifndef SLUICE_UTIL_SIPHASH_H
#define SLUICE_UTIL_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

struct siphash_key {
    uint64_t k0, k1;
};

/* A random key (getrandom(); without entropy yet, early at boot, one made
 * from the clocks and <salt>'s address, still unpredictable across runs). */
void siphash_random_key(struct siphash_key *k, const void *salt);

/* SipHash-1-3 of the <len> bytes at <in> under <k>, 64 bits. */
uint64_t siphash13(const struct siphash_key *k, const void *in, size_t len);

#endif
