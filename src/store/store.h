/* store.h: the durable store behind the head, as a table of operations so that
 * a backend is one sibling file (store_sqlite.c now; PostgreSQL later).
 *
 * Threading: writes happen only on the committer thread (commit.h), inside
 * store_begin/store_commit. Reads (store_job_list, store_result_get,
 * store_job_get) may come from any thread; a backend serializes them on its
 * own read connection. Durability: store_commit returns 0 only when the
 * transaction is on stable storage (for SQLite: WAL + synchronous=FULL). */
#ifndef GPUQ_STORE_H
#define GPUQ_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "store/records.h"

struct store;

struct store_list_filter {
    int64_t tenant_id;      /* required */
    int state;              /* -1 = any */
    const char *capability; /* NULL = any */
    uint64_t before_id;     /* 0 = from the newest */
    int limit;
};

typedef void (*store_job_cb)(void *arg, struct job_rec *job); /* callee owns job->params_json */
typedef void (*store_tenant_cb)(void *arg, const struct tenant_rec *t);
typedef void (*store_token_cb)(void *arg, const struct token_rec *t);
typedef void (*store_served_cb)(void *arg, const char *capability, const char *model);
typedef void (*store_batch_cb)(void *arg, struct batch_rec *b); /* callee owns b->job_ids */

struct store_ops {
    const char *name;
    void (*close)(struct store *s);
    int (*begin)(struct store *s);
    int (*commit)(struct store *s);
    int (*rollback)(struct store *s);
    int (*savepoint)(struct store *s);
    int (*release)(struct store *s, int ok); /* ok: keep the op's writes; else undo them */
    int (*job_insert)(struct store *s, const struct job_rec *j);
    int (*job_update)(struct store *s, const struct job_rec *j);
    int (*result_put)(struct store *s, uint64_t job_id, const char *type, const void *data,
                      size_t len);
    int (*result_get)(struct store *s, uint64_t job_id, char *type, size_t type_size,
                      void **data, size_t *len);
    int (*tenant_insert)(struct store *s, struct tenant_rec *t); /* sets t->id */
    int (*token_insert)(struct store *s, struct token_rec *t);
    /* Revokes worker token id for good: its row stays (its id is never reused)
     * with a hash no token matches, and load_tokens skips it. GPUQ_ENOENT if
     * there is no such live token. */
    int (*token_revoke)(struct store *s, int64_t id);
    /* Rewrites a tenant's name and key hash (by id): a rotated or revoked key,
     * or a removed tenant (tenants.h: TENANT_REMOVED). Its id is never reused. */
    int (*tenant_update)(struct store *s, const struct tenant_rec *t);
    /* An ended attempt of a job (replaces one with the same number). */
    int (*attempt_put)(struct store *s, uint64_t job_id, const struct lc_attempt *a);
    /* A (capability, model) pair a worker declared (kept once). */
    int (*served_put)(struct store *s, const char *capability, const char *model);
    int (*load_served)(struct store *s, store_served_cb cb, void *arg);
    /* A batch (R6): its id, tenant and job ids, written in the same commit as its jobs. */
    int (*batch_insert)(struct store *s, const struct batch_rec *b);
    int (*load_batches)(struct store *s, store_batch_cb cb, void *arg);
    int (*load_tenants)(struct store *s, store_tenant_cb cb, void *arg);
    int (*load_tokens)(struct store *s, store_token_cb cb, void *arg);
    /* Jobs not terminal, and terminal ones finished at or after since_ms
     * (those older by id than every result stored since then excepted), in
     * id order. Job reads come with their attempt history. */
    int (*load_jobs)(struct store *s, int64_t since_ms, store_job_cb cb, void *arg);
    int (*job_get)(struct store *s, uint64_t id, struct job_rec *out);
    /* The job of tenant_id with idempotency key key (not empty), or
     * GPUQ_ENOENT; out NULL: only whether there is one. */
    int (*job_find_idem)(struct store *s, int64_t tenant_id, const char *key,
                         struct job_rec *out);
    int (*job_list)(struct store *s, const struct store_list_filter *f, store_job_cb cb,
                    void *arg);
    int (*max_job_id)(struct store *s, uint64_t *out);
    /* Deletes at most limit results stored before cutoff_ms (wall), oldest
     * first; *deleted: how many. */
    int (*prune_results)(struct store *s, int64_t cutoff_ms, int limit, int *deleted);
    /* Inputs (uploads a job names in params.inputs). input_get reads any
     * thread; data NULL: the record only, else *data (malloc'd) gets the bytes. */
    int (*input_put)(struct store *s, const struct input_rec *r, const void *data, size_t len);
    int (*input_get)(struct store *s, const char *id, struct input_rec *out, void **data,
                     size_t *len);
    /* Job job_id names upload id (of tenant_id) as input name: GPUQ_ENOENT if the
     * tenant has no such upload (never uploaded, another tenant's, or deleted). */
    int (*input_link)(struct store *s, uint64_t job_id, int64_t tenant_id, const char *name,
                      const char *id);
    /* Unlinks jobs finished before jobs_cutoff_ms from their inputs, then deletes
     * uploads made before unused_cutoff_ms that no job names (*deleted: how many). */
    int (*prune_inputs)(struct store *s, int64_t jobs_cutoff_ms, int64_t unused_cutoff_ms,
                        int *deleted);
};

struct store {
    const struct store_ops *ops;
};

struct store_sqlite_options {
    const char *path;
    int synchronous_full; /* 1: FULL (default, durable); 0: NORMAL */
    /* Bytes of zeros the WAL gets on disk before SQLite opens it, when it is
     * shorter (store_sqlite.c, wal_preallocate); 0: none. gpuqd passes
     * STORE_WAL_PREALLOC_BYTES unless [store] wal_preallocate = false. */
    long long wal_prealloc_bytes;
};

/* One checkpoint's worth of WAL (the committer checkpoints when the WAL holds
 * this many frames): 4000 frames of a 4096-byte page and its 24-byte frame
 * header, plus the 32-byte WAL header. */
#define STORE_WAL_CHECKPOINT_PAGES 4000
#define STORE_WAL_PREALLOC_BYTES (STORE_WAL_CHECKPOINT_PAGES * (4096LL + 24) + 32)

/* store_sqlite_open opens (creating and migrating) the SQLite store. On error
 * returns GPUQ_EIO with a message in err. */
int store_sqlite_open(const struct store_sqlite_options *opt, struct store **out, char *err,
                      size_t errlen);

/* Thin inline wrappers so callers read naturally. */
static inline void store_close(struct store *s) { s->ops->close(s); }

/* job_rec_free_fields frees what a job record owns (params_json, attempts). */
void job_rec_free_fields(struct job_rec *j);

#endif
