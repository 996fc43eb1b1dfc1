/* bucket: a token bucket with Firecracker's semantics.
 *
 * A bucket holds up to <size> tokens and refills from empty to full in
 * <refill_ns>, continuously: the refill is computed lazily, from the time
 * elapsed since the last update, whenever the bucket is used. A fraction of
 * a token earned is carried to the next update as a remainder (integer
 * arithmetic on token-nanoseconds, 128-bit where a product can exceed 64
 * bits), so no token is lost or invented, however the calls are spaced. A
 * bucket starts full. <one_time_burst> is an extra pool of tokens that is
 * spent first and never refills.
 *
 * A bucket whose size is 0 is off: every take succeeds and nothing waits.
 *
 * A take may go into debt (bucket_force: bytes that have already moved):
 * the debt is paid from the refill before the bucket holds tokens again.
 *
 * Time is a monotonic clock in nanoseconds supplied by the caller, so the
 * arithmetic is a pure function of its inputs. A clock that does not advance
 * refills nothing; a time earlier than the last update counts as no time
 * (the last update is not moved back); a gap of any length (even
 * UINT64_MAX ns) fills the bucket and cannot overflow.
 *
 * No allocation: a struct bucket is a plain value. */
#ifndef SLUICE_SHAPE_BUCKET_H
#define SLUICE_SHAPE_BUCKET_H

#include <stdbool.h>
#include <stdint.h>

struct bucket {
    uint64_t size;      /* capacity in tokens; 0 = off */
    uint64_t refill_ns; /* time to refill <size> tokens from empty (>= 1) */
    uint64_t budget;    /* tokens held, <= size */
    uint64_t burst;     /* one-time burst tokens left */
    uint64_t debt;      /* tokens owed (bucket_force beyond what was held) */
    uint64_t rem;       /* carried fraction: token-nanoseconds, < refill_ns */
    uint64_t last_ns;   /* time of the last update */
};

/* Makes <b> a full bucket of <size> tokens refilled in <refill_ns> (0 is
 * taken as 1 ns) plus <one_time_burst> extra tokens, as of <now_ns>. */
void bucket_init(struct bucket *b, uint64_t size, uint64_t one_time_burst, uint64_t refill_ns,
                 uint64_t now_ns);
/* Gives <b> a new size and refill time (a policy reload) without granting
 * tokens: what it holds is kept, clamped to the new size, and the one-time
 * burst left is clamped to <one_time_burst>. A bucket that was off starts
 * full, like a new one. */
void bucket_reconfigure(struct bucket *b, uint64_t size, uint64_t one_time_burst,
                        uint64_t refill_ns, uint64_t now_ns);
/* True when <b> is off (size 0). */
bool bucket_is_off(const struct bucket *b);
/* Brings <b> up to <now_ns>: adds what the elapsed time earned. */
void bucket_refill(struct bucket *b, uint64_t now_ns);
/* Tokens that can be taken now (burst included); UINT64_MAX when off. */
uint64_t bucket_available(struct bucket *b, uint64_t now_ns);
/* Takes <n> tokens if they are all there (returns true), else takes none. */
bool bucket_take(struct bucket *b, uint64_t n, uint64_t now_ns);
/* Takes <n> tokens whatever is there; what is missing becomes debt. */
void bucket_force(struct bucket *b, uint64_t n, uint64_t now_ns);
/* Nanoseconds from <now_ns> until <n> tokens can be taken: 0 when they can
 * now (or the bucket is off). <n> beyond what the bucket can ever hold at
 * once (size plus burst left) is taken as that much. Saturates at
 * UINT64_MAX. */
uint64_t bucket_wait_ns(struct bucket *b, uint64_t n, uint64_t now_ns);
/* True when <b> owes tokens at <now_ns>: a bucket_force() beyond what it
 * held that the refill has not paid back yet. */
bool bucket_in_debt(struct bucket *b, uint64_t now_ns);
/* Nanoseconds from <now_ns> until <b> is full and out of debt (its
 * one-time burst aside, which never refills): 0 when it is, or off. Rounded
 * up; saturates at UINT64_MAX. */
uint64_t bucket_full_in_ns(struct bucket *b, uint64_t now_ns);
/* Takes up to <n> of the tokens <b> holds, never its one-time burst, never
 * into debt: a bucket made anew brought down to what an old one held. */
void bucket_drain(struct bucket *b, uint64_t n, uint64_t now_ns);
/* True when <b> is as a fresh bucket of its configuration would be at
 * <now_ns> (full, burst intact, no debt): forgetting it loses nothing. */
bool bucket_at_rest(struct bucket *b, uint64_t one_time_burst, uint64_t now_ns);

#endif
