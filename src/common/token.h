/* token.h: secrets. Random API keys and worker tokens, and their SHA-256 hex
 * digests, which are what the store keeps. */
#ifndef GPUQ_TOKEN_H
#define GPUQ_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#define TOKEN_HASH_HEX 65 /* 64 hex digits + NUL */

/* token_random fills out (size >= 40) with prefix + 32 random base62 chars
 * (about 190 bits) from getrandom(2). Returns 0 or GPUQ_EIO. */
int token_random(const char *prefix, char *out, size_t size);
/* token_hash writes the SHA-256 of s as lowercase hex into out. */
void token_hash(const char *s, char out[TOKEN_HASH_HEX]);
/* hex_lower writes n bytes as 2n lowercase hex digits plus a NUL into out
 * (2n + 1 bytes). */
void hex_lower(const uint8_t *in, size_t n, char *out);
/* random_u64 returns 64 bits from getrandom(2). */
uint64_t random_u64(void);
/* token_equal compares two equal-length strings in constant time. */
int token_equal(const char *a, const char *b);

#endif
