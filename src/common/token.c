/* token.c: random tokens (getrandom) and SHA-256 (nettle). */
#include "token.h"

#include <nettle/sha2.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "err.h"

static int fill_random(void *p, size_t n)
{
    uint8_t *b = p;
    while (n > 0) {
        ssize_t got = getrandom(b, n, 0);
        if (got <= 0)
            return GPUQ_EIO;
        b += got;
        n -= (size_t)got;
    }
    return 0;
}

int token_random(const char *prefix, char *out, size_t size)
{
    static const char alphabet[] =
        "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    size_t plen = strlen(prefix);
    if (size < plen + 33)
        return GPUQ_EINVAL;
    uint8_t raw[32];
    if (fill_random(raw, sizeof raw))
        return GPUQ_EIO;
    memcpy(out, prefix, plen);
    for (size_t i = 0; i < 32; i++) {
        /* 248 = 4 * 62: reject the tail so every character is equally likely. */
        while (raw[i] >= 248) {
            if (fill_random(&raw[i], 1))
                return GPUQ_EIO;
        }
        out[plen + i] = alphabet[raw[i] % 62];
    }
    out[plen + 32] = '\0';
    return 0;
}

void token_hash(const char *s, char out[TOKEN_HASH_HEX])
{
    struct sha256_ctx ctx;
    uint8_t digest[SHA256_DIGEST_SIZE];
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(s), (const uint8_t *)s);
    sha256_digest(&ctx, sizeof digest, digest);
    hex_lower(digest, sizeof digest, out);
}

/* A table, not snprintf("%02x"): this runs once per authenticated request, and
 * 32 printf calls cost several times the SHA-256 itself. */
void hex_lower(const uint8_t *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 0x0f];
    }
    out[2 * n] = '\0';
}

uint64_t random_u64(void)
{
    uint64_t v = 0;
    if (fill_random(&v, sizeof v))
        return 0;
    return v;
}

int token_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned diff = (unsigned)(la ^ lb);
    size_t n = la < lb ? la : lb;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)a[i] ^ (unsigned char)b[i];
    return diff == 0;
}
