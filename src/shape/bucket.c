#include "shape/bucket.h"

typedef unsigned __int128 u128;

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

void bucket_init(struct bucket *b, uint64_t size, uint64_t one_time_burst, uint64_t refill_ns,
                 uint64_t now_ns)
{
    b->size = size;
    b->refill_ns = refill_ns > 0 ? refill_ns : 1;
    b->budget = size;
    b->burst = size > 0 ? one_time_burst : 0;
    b->debt = 0;
    b->rem = 0;
    b->last_ns = now_ns;
}

bool bucket_is_off(const struct bucket *b)
{
    return b->size == 0;
}

void bucket_refill(struct bucket *b, uint64_t now_ns)
{
    if (b->size == 0 || now_ns <= b->last_ns)
        return; /* off, or no time has passed (or the clock went back) */
    uint64_t elapsed = now_ns - b->last_ns;
    b->last_ns = now_ns;
    uint64_t missing = sat_add(b->debt, b->size - b->budget);
    if (missing == 0) {
        b->rem = 0; /* a full bucket earns nothing */
        return;
    }
    /* (2^64-1)^2 + (2^64-1) < 2^128: no overflow. */
    u128 acc = (u128)elapsed * b->size + b->rem;
    u128 earned = acc / b->refill_ns;
    if (earned >= missing) {
        b->budget = b->size;
        b->debt = 0;
        b->rem = 0;
        return;
    }
    uint64_t e = (uint64_t)earned; /* < missing, so it fits */
    b->rem = (uint64_t)(acc % b->refill_ns);
    if (e >= b->debt) {
        e -= b->debt;
        b->debt = 0;
        b->budget += e; /* < size - budget + debt: stays within size */
    } else {
        b->debt -= e;
    }
}

void bucket_reconfigure(struct bucket *b, uint64_t size, uint64_t one_time_burst,
                        uint64_t refill_ns, uint64_t now_ns)
{
    if (b->size == 0 || size == 0) {
        bucket_init(b, size, one_time_burst, refill_ns, now_ns);
        return;
    }
    bucket_refill(b, now_ns);
    if (now_ns > b->last_ns)
        b->last_ns = now_ns;
    b->size = size;
    b->refill_ns = refill_ns > 0 ? refill_ns : 1;
    if (b->budget > size)
        b->budget = size;
    if (b->burst > one_time_burst)
        b->burst = one_time_burst;
    b->rem = 0; /* less than one token, in the old units */
}

uint64_t bucket_available(struct bucket *b, uint64_t now_ns)
{
    if (b->size == 0)
        return UINT64_MAX;
    bucket_refill(b, now_ns);
    if (b->debt > 0)
        return 0;
    return sat_add(b->burst, b->budget);
}

bool bucket_take(struct bucket *b, uint64_t n, uint64_t now_ns)
{
    if (b->size == 0)
        return true;
    bucket_refill(b, now_ns);
    if (b->debt > 0)
        return n == 0;
    if (n <= b->burst) {
        b->burst -= n;
        return true;
    }
    if (n - b->burst > b->budget)
        return false;
    b->budget -= n - b->burst;
    b->burst = 0;
    return true;
}

void bucket_force(struct bucket *b, uint64_t n, uint64_t now_ns)
{
    if (b->size == 0)
        return;
    bucket_refill(b, now_ns);
    uint64_t k = n < b->burst ? n : b->burst;
    b->burst -= k;
    n -= k;
    k = n < b->budget ? n : b->budget;
    b->budget -= k;
    n -= k;
    b->debt = sat_add(b->debt, n);
}

uint64_t bucket_wait_ns(struct bucket *b, uint64_t n, uint64_t now_ns)
{
    if (b->size == 0)
        return 0;
    bucket_refill(b, now_ns);
    uint64_t cap = sat_add(b->size, b->burst);
    if (n > cap)
        n = cap;
    uint64_t avail = b->debt > 0 ? 0 : sat_add(b->burst, b->budget);
    if (n <= avail)
        return 0;
    uint64_t need = sat_add(b->debt, n - avail);
    u128 tn = (u128)need * b->refill_ns; /* < 2^128 */
    if (tn <= b->rem)
        return 0; /* cannot happen (rem < refill_ns <= tn), kept for safety */
    u128 t = (tn - b->rem + b->size - 1) / b->size;
    return t > UINT64_MAX ? UINT64_MAX : (uint64_t)t;
}

uint64_t bucket_full_in_ns(struct bucket *b, uint64_t now_ns)
{
    if (b->size == 0)
        return 0;
    bucket_refill(b, now_ns);
    uint64_t need = sat_add(b->debt, b->size - b->budget);
    if (need == 0)
        return 0;
    u128 tn = (u128)need * b->refill_ns; /* > rem: rem < refill_ns <= tn */
    u128 t = (tn - b->rem + b->size - 1) / b->size;
    return t > UINT64_MAX ? UINT64_MAX : (uint64_t)t;
}

void bucket_drain(struct bucket *b, uint64_t n, uint64_t now_ns)
{
    if (b->size == 0)
        return;
    bucket_refill(b, now_ns);
    b->budget -= n < b->budget ? n : b->budget;
}

bool bucket_in_debt(struct bucket *b, uint64_t now_ns)
{
    bucket_refill(b, now_ns);
    return b->debt > 0;
}

bool bucket_at_rest(struct bucket *b, uint64_t one_time_burst, uint64_t now_ns)
{
    if (b->size == 0)
        return true;
    bucket_refill(b, now_ns);
    return b->debt == 0 && b->budget == b->size && b->burst == one_time_burst;
}
