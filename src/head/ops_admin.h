/* ops_admin.h: the head's operations besides a job's life (ops.h) — readiness,
 * workers (the agents' register/heartbeat/poll/deregister, and the admin's
 * list and drain), tenants and worker tokens, reading results and listing
 * jobs. With ops.h it is the whole of what the API layer may call: the API
 * never reaches the registry, tenants, committer or store itself.
 *
 * Calls that commit answer through a callback once durable, so that no HTTP
 * thread waits for an fsync; the callback runs on the committer thread (or at
 * once, on the caller's thread, for an answer that needs no commit). */
#ifndef GPUQ_HEAD_OPS_ADMIN_H
#define GPUQ_HEAD_OPS_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "head/dispatch.h"
#include "head/head.h"

/* ---- readiness ---- */

/* True when the head serves and its store can write; else false with why in
 * reason ("starting", "shutting down", "the store cannot write ..."). */
bool head_readiness(struct head *h, char *reason, size_t size);

/* ---- workers ---- */

/* An agent registers a worker (replacing one of the same id). */
void head_worker_register(struct head *h, const struct worker_rec *w);
/* A heartbeat: GPUQ_ENOENT for a worker not registered. Gives the drain flag
 * and the attempts to cancel (at most REG_MAX_CANCELS). */
int head_worker_heartbeat(struct head *h, const struct worker_rec *hb, bool *drain,
                          struct reg_attempt *cancels, int *ncancels);
/* The agent's long-poll for ws[0..nws) (see dispatcher_poll): GPUQ_ENOENT at
 * once (answer not called) when one is not registered, *unknown its index. */
int head_worker_poll(struct head *h, const struct dispatch_poll_worker *ws, int nws,
                     int64_t deadline_ns, bool early, int *unknown, dispatch_answer_fn answer,
                     void *arg);
int head_worker_deregister(struct head *h, const char *worker_id);
/* The admin asks a worker to drain (told to its agent in heartbeat answers). */
int head_worker_drain(struct head *h, const char *worker_id);
/* The admin undoes a drain: the worker takes work again (its agent hears
 * drain:false in the next heartbeat answer). GPUQ_ENOENT for no such worker. */
int head_worker_undrain(struct head *h, const char *worker_id);
/* Copies the workers into *out (malloc'd; the caller frees); returns the count. */
int head_workers_list(struct head *h, struct worker_rec **out);

/* ---- tenants and worker tokens ---- */

/* The answer of an admin call that commits. rc: 0, GPUQ_EEXIST (the name is
 * taken), GPUQ_EIO (not stored: nothing changed). secret: the new key or token,
 * shown this once and never kept (only its hash is). */
struct admin_answer {
    int rc;
    char name[REC_NAME_MAX];   /* head_tenant_change: the tenant's name as asked */
    struct tenant_rec tenant;
    struct token_rec token;
    char secret[64];
};
typedef void (*head_admin_done_fn)(void *arg, const struct admin_answer *a);

/* Creates a tenant with a fresh API key; done runs once it is durable (and
 * the key usable), or at once on a conflict. */
void head_tenant_add(struct head *h, const char *name, enum job_tier tier,
                     head_admin_done_fn done, void *arg);
/* Creates a worker token; done as for head_tenant_add. */
void head_worker_token_add(struct head *h, const char *name, head_admin_done_fn done,
                           void *arg);
/* Changes a tenant: removes it (its key stops working; its id is never
 * reused), revokes its key, or gives it a new key (a.secret, shown once).
 * done as for head_tenant_add; rc GPUQ_ENOENT for no such tenant. */
enum head_tenant_change { HEAD_TENANT_REMOVE, HEAD_KEY_REVOKE, HEAD_KEY_ROTATE };
void head_tenant_change(struct head *h, const char *name, enum head_tenant_change change,
                        head_admin_done_fn done, void *arg);
/* Copies the tenants into *out (malloc'd; the caller frees); returns the count. */
int head_tenants_list(struct head *h, struct tenant_rec **out);
bool head_tenant_by_name(struct head *h, const char *name, struct tenant_rec *out);
/* The tenant's name into buf ("?" if none); returns buf. */
const char *head_tenant_name(struct head *h, int64_t tenant_id, char *buf, size_t size);

/* ---- pauses and promotion (admin) ---- */

/* Pauses or resumes a capability (cap non-NULL) or a lane in every
 * capability (cap NULL; lane an enum sched_lane): see sched_pause. Lasts
 * until resumed or the head restarts. */
int head_pause(struct head *h, const char *cap, int lane, bool paused);
/* What is paused: capability names into caps (up to max; returns how many)
 * and lane bits (1 << lane) into *lanes. */
int head_pauses(struct head *h, char (*caps)[SCHED_NAME_MAX], int max, unsigned *lanes);
/* Moves a queued job to the front of its lane (sched_job_promote) and copies
 * it into *out (the caller frees its fields with job_rec_free_fields).
 * GPUQ_ENOENT: no such job; GPUQ_EINVAL: not queued. */
int head_job_promote(struct head *h, uint64_t id, struct job_rec *out);

/* ---- jobs: reads the store answers ---- */

/* Sets rec->cost_s (estimated GPU-seconds) and rec->tag_s (nominal work, for
 * its fair-share tag) of a job about to be submitted. */
void head_job_cost(struct head *h, struct job_rec *rec);
/* Lists a tenant's jobs, newest first (f->tenant_id required). */
int head_jobs_list(struct head *h, const struct store_list_filter *f, store_job_cb cb, void *arg);

/* A job's output. 0 when the job exists for this caller (tenant_id < 0: any):
 * then out->state is its state, and for a succeeded job whose result is still
 * kept, out->kept, out->data (malloc'd or NULL; the caller frees), out->len, out->type.
 * GPUQ_ENOENT: no such job; GPUQ_EIO: the store failed. */
struct head_result {
    enum job_state state;
    char type[REC_NAME_MAX];
    bool kept;                 /* false: no result (not succeeded, or no longer kept) */
    void *data;
    size_t len;
};
int head_result_read(struct head *h, int64_t tenant_id, uint64_t id, struct head_result *out);

/* ---- figures ---- */

struct head_stats {
    struct committer_stats commit;
    int workers, ready_workers;
};
void head_get_stats(struct head *h, struct head_stats *out);

#endif
