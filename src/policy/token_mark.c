/* token_mark: a keyed mark of a secret, the same for the whole process. */
#include "policy/token_mark.h"

#include <pthread.h>
#include <stdbool.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

static unsigned char mark_key[32];
static bool mark_key_drawn;
static pthread_mutex_t mark_key_lock = PTHREAD_MUTEX_INITIALIZER;

/* True once the key is drawn: at the first mark, or at a later one when
 * the random bytes were not there before (that load failed; this one may
 * not). */
static bool have_mark_key(void)
{
    pthread_mutex_lock(&mark_key_lock);
    if (!mark_key_drawn)
        mark_key_drawn = RAND_bytes(mark_key, (int)sizeof(mark_key)) == 1;
    bool drawn = mark_key_drawn;
    pthread_mutex_unlock(&mark_key_lock);
    return drawn;
}

int token_mark(const void *secret, size_t len, unsigned char out[TOKEN_MARK_LEN])
{
    unsigned int n = 0;
    if (have_mark_key() &&
        HMAC(EVP_sha256(), mark_key, (int)sizeof(mark_key), secret, len, out, &n) != NULL &&
        n == TOKEN_MARK_LEN)
        return 0;
    OPENSSL_cleanse(out, TOKEN_MARK_LEN);
    return -1;
}
