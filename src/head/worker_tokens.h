/* worker_tokens.h: listing and revoking the worker tokens agents authenticate
 * with (they are created by head_worker_token_add, ops_admin.h). A revoked
 * token is refused (401) from the agent's next request on: it leaves the
 * in-memory table once the store holds the revocation. Its row stays in the
 * store under a hash no token matches, so its id is never given again. */
#ifndef GPUQ_HEAD_WORKER_TOKENS_H
#define GPUQ_HEAD_WORKER_TOKENS_H

#include <stdint.h>

#include "store/records.h"

struct head;

/* Copies the live tokens (no secrets: id, name, created_ms) into *out
 * (malloc'd; the caller frees); returns the count. */
int head_worker_tokens_list(struct head *h, struct token_rec **out);

/* Revokes token id and waits until that is durable. 0 (*out: the token it
 * was), GPUQ_ENOENT (no such live token) or the store's error (nothing
 * changed). Blocks the calling thread for one commit. */
int head_worker_token_revoke(struct head *h, int64_t id, struct token_rec *out);

#endif
