/* tenants.h: who may call — tenants with their hashed API keys, and the
 * hashed worker tokens of agents — held in memory after the store made them
 * durable. Keys are looked up by their SHA-256; the keys themselves are
 * never stored or logged. Thread-safe. */
#ifndef GPUQ_HEAD_TENANTS_H
#define GPUQ_HEAD_TENANTS_H

#include <stdbool.h>

#include "store/records.h"
#include "store/store.h"

struct tenants;

/* A removed tenant keeps its row (so that its id is never given to another)
 * under the name and key hash TENANT_REMOVED "<id>", which no key matches and
 * no tenant name may take; a revoked key is TENANT_REVOKED "<id>". */
#define TENANT_REMOVED "removed:"
#define TENANT_REVOKED "revoked:"

struct tenants *tenants_create(void);
void tenants_destroy(struct tenants *t);
/* Adds every tenant and worker token the store holds (at start). 0 or the store's error. */
int tenants_load(struct tenants *t, struct store *s);
void tenants_add(struct tenants *t, const struct tenant_rec *rec);
void tenants_add_token(struct tenants *t, const struct token_rec *rec);
/* By key hash; copies the tenant into out. */
/* Replaces the tenant of rec->id with rec (a new or revoked key), or drops it
 * when rec is removed (TENANT_REMOVED). */
void tenants_replace(struct tenants *t, const struct tenant_rec *rec);
bool tenants_by_hash(struct tenants *t, const char *key_hash, struct tenant_rec *out);
bool tenants_by_name(struct tenants *t, const char *name, struct tenant_rec *out);
bool tenants_by_id(struct tenants *t, int64_t id, struct tenant_rec *out);
bool tenants_token_ok(struct tenants *t, const char *token_hash);
/* Copies up to max live worker tokens into out (oldest first); returns how many. */
int tenants_tokens_list(struct tenants *t, struct token_rec *out, int max);
/* Drops worker token id (revoked): it authenticates nothing from now on.
 * False if there was none. */
bool tenants_token_remove(struct tenants *t, int64_t id);
/* Copies up to max tenants into out; returns how many. */
int tenants_list(struct tenants *t, struct tenant_rec *out, int max);

#endif
