/* batches.h: batches (R6) — many jobs submitted at once under one id, their
 * progress, the ETA of their last job, and cancelling what is left of them.
 *
 * A batch is all-or-nothing: its jobs and the batch row are written in one
 * commit (one transaction), so a batch is either wholly durable — every job
 * queued — or absent; the answer goes out after that commit. Jobs of a batch
 * are ordinary jobs afterwards (GET /v1/jobs/{id} works on each).
 *
 * These are head operations the API calls (like ops.h). Batches live in memory
 * (a sorted array under its own lock, loaded from the store at start); the
 * lock order is the batches lock, then the jobs table lock, never the reverse. */
#ifndef GPUQ_HEAD_BATCHES_H
#define GPUQ_HEAD_BATCHES_H

#include <stdbool.h>
#include <stdint.h>

#include "head/head.h"

struct batches;

struct batches *batches_create(void);
void batches_destroy(struct batches *b);
/* Loads the stored batches into h->batches (created here if NULL). */
int head_batches_recover(struct head *h);

/* The answer of a batch submit: rc 0 and the new batch's id once every job
 * is durable; or the store's error (nothing was queued). */
typedef void (*head_batch_done_fn)(void *arg, int rc, uint64_t batch_id);

/* Submits recs[0..n) (validated and normalized by the API, each with its
 * cost_s) as one batch of tenant_id. Takes each record's params_json. */
void head_batch_submit(struct head *h, int64_t tenant_id, struct job_rec *recs, int n,
                       head_batch_done_fn done, void *arg);

/* What a reader sees of a batch. */
struct batch_job {
    uint64_t id;
    enum job_state state;
};
struct batch_view {
    uint64_t id;
    int64_t tenant_id;
    int64_t created_ms;
    int njobs;
    int counts[JOB_NSTATES];     /* jobs per state */
    int unfinished;              /* queued + running */
    double cost_s;               /* estimated GPU-seconds of its unfinished jobs */
    /* ETA of its last job (wall ms): the latest finish among unfinished jobs;
     * 0 when all have finished or when one of them has no ETA (eta_why says why). */
    int64_t eta_finish_ms;
    char eta_why[200];
    struct batch_job *jobs;      /* njobs entries, submission order; malloc'd (caller frees) */
};
/* tenant_id < 0: any tenant (admin). GPUQ_ENOENT: no such batch for this caller.
 * with_jobs false: counts only — jobs stays NULL and no ETA is asked for. */
int head_batch_get(struct head *h, int64_t tenant_id, uint64_t id, bool with_jobs,
                   struct batch_view *out);
void batch_view_free(struct batch_view *v);

/* Cancels every unfinished job of the batch; done(arg, rc, n) with n the jobs
 * cancelled, once each cancel is stored. GPUQ_ENOENT at once: no such batch. */
typedef void (*head_batch_cancel_fn)(void *arg, int rc, int ncancelled);
void head_batch_cancel(struct head *h, int64_t tenant_id, uint64_t id, head_batch_cancel_fn done,
                       void *arg);

/* The ids of the batches of tenant_id (< 0: all), newest first, at most limit,
 * older than before_id (0: from the newest). Returns the count; *out malloc'd. */
int head_batch_list(struct head *h, int64_t tenant_id, uint64_t before_id, int limit,
                    uint64_t **out);

#endif
