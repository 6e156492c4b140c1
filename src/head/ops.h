/* ops.h: the operations on jobs and workers that the API layer calls. All return 0 or a
 * negative GPUQ_E*: ENOENT (no such job for this caller), ECONFLICT (state
 * forbids it, or an idempotency key reused with another body), ESTALE (a
 * fenced call names an attempt that is not current), EIO (the store failed:
 * nothing was acknowledged). Records copied out own their params_json. */
#ifndef GPUQ_HEAD_OPS_H
#define GPUQ_HEAD_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/admit.h"
#include "head/head.h"

/* The answer of an asynchronous operation: rc, and the job as it now is (the
 * callee owns out->params_json). Runs on whichever thread finished the work. */
typedef void (*head_done_fn)(void *arg, int rc, struct job_rec *out, bool flag);

/* rec: validated and normalized by the API (id, state, times are set here).
 * Takes rec->params_json. done(flag = existing: an idempotent replay returned the
 * first job) runs once the job is durable, or at once for a replay or error.
 * to_end: the caller answers only once the job has ended (POST /v1/jobs?wait=),
 * so nobody is told of the job before its result is durable, and its insert
 * may wait for company, like an early assignment's commit. */
void head_submit(struct head *h, struct job_rec *rec, bool to_end, head_done_fn done,
                 void *arg);
/* head_admit: admission's verdict (core/admit.h) for a new job of tenant t —
 * rec with capability, lane and cost_s set — before anything is stored. 0 with
 * v filled. ADMIT_OK counts the job (rec->admitted; head_submit then binds it
 * to its id, or undoes it when nothing is stored); ADMIT_RETRY is the 429 with
 * v->retry_after_s, ADMIT_TOO_LARGE the 4xx. A replay of a job already
 * submitted with the same idempotency key is admitted without being counted. */
int head_admit(struct head *h, const struct tenant_rec *t, struct job_rec *rec,
               struct admit_verdict *v);
/* head_admit_batch: all or nothing for recs[0..n) of tenant t. 0 with v: ADMIT_OK
 * when every job was admitted (each counted, bound by head_batch_submit);
 * else the first job's refusal that did not fit, *index naming it, and none is
 * counted. Retry-After is when that job would fit. */
int head_admit_batch(struct head *h, const struct tenant_rec *t, struct job_rec *recs, int n,
                     struct admit_verdict *v, int *index);
/* Undoes the admission of an admitted job that is not stored after all. */
void head_admit_undo(struct head *h, const struct job_rec *rec);
/* The job as it is now. tenant_id < 0: any tenant (admin). *version (if not
 * NULL) gets its version, for head_watch; 0 for a job read from the store. */
int head_get(struct head *h, int64_t tenant_id, uint64_t id, uint64_t *version,
             struct job_rec *out);
/* Fills what a reader sees beyond the record: eta_* (the scheduler's ETA) and
 * waiting_reason. head_get and head_watch do it; watchers copying a job with
 * head_job_copy call it after releasing the table lock. */
void head_job_annotate(struct head *h, struct job_rec *r);
/* done(rc, job): ENOENT, ECONFLICT (already ended, or storing its result), or
 * 0 once the cancel is stored (a running attempt is aborted on its worker). */
void head_cancel(struct head *h, int64_t tenant_id, uint64_t id, head_done_fn done, void *arg);
/* Admin: a dead, failed or expired job runs again (lc_resubmit): done as cancel's. */
void head_resubmit(struct head *h, uint64_t id, head_done_fn done, void *arg);
/* 0 when a worker serves (cap, model), none ever registered, or jobs.allow_unserved;
 * else GPUQ_ENOENT with msg saying so ("model: no worker serves model …"). */
int head_check_servable(struct head *h, const char *cap, const char *model, char *msg,
                        size_t size);
/* True (why filled) when no worker serves (cap, model) now. */
bool head_served_reason(struct head *h, const char *cap, const char *model, char *why,
                        size_t size);

/* Long-polls and event streams on suspended connections. head_watch links w to
 * the job (visible to tenant_id; < 0: any) and returns 0 with *watching true,
 * unless the job already ended (then *watching is false) — either way out gets
 * the job as it is now and *version its version. Not found: GPUQ_ENOENT.
 * w->fire runs with the table lock held; it may copy the job with head_job_copy.
 * With since != 0, a job whose version differs from since is not watched. */
int head_watch(struct head *h, int64_t tenant_id, uint64_t id, uint64_t since,
               struct job_watch *w, bool *watching, struct job_rec *out, uint64_t *version);
/* Unlinks w; true if it was still linked (it will not fire). */
bool head_unwatch(struct head *h, uint64_t id, struct job_watch *w);
/* Copies a job (params included) — under the table lock, e.g. inside fire. */
void head_job_copy(const struct hjob *j, struct job_rec *out, uint64_t *version);

/* Agent side, fenced by (worker, attempt) and the echoed boot epoch (0: the
 * report names none) through lc_fence_epoch: one naming an earlier boot is
 * GPUQ_ESTALE_EPOCH. */
int head_progress(struct head *h, uint64_t id, const char *worker, int attempt, uint64_t epoch,
                  enum job_phase phase, double progress);
/* done(flag = duplicate: this attempt's result was already accepted, a retried
 * request) runs once the result is durable. data must stay valid until then. */
void head_complete(struct head *h, uint64_t id, const char *worker, int attempt, uint64_t epoch,
                   const char *content_type, const void *data, size_t len, int64_t load_ms,
                   int64_t run_ms, head_done_fn done, void *arg);
/* lc_fail: retried elsewhere while the budget lasts (never bad_input), else
 * dead (or failed/expired). done(flag = retried) runs once stored; fencing
 * errors answer at once. */
void head_fail(struct head *h, uint64_t id, const char *worker, int attempt, uint64_t epoch,
               const char *cls, const char *message, head_done_fn done, void *arg);

/* head_worker_register and head_worker_heartbeat (ops_admin.h) are defined in
 * head.c: registration with a new incarnation loses (re-queues) what the
 * earlier one ran and adds the worker's pairs to the catalog; a heartbeat's
 * running list is reconciled (renew, lost, stale → cancel). */

/* Recovery at start: load jobs from the store into memory and the scheduler. */
int head_recover(struct head *h);

/* Readiness, workers, tenants, results: the rest of what the API may call. */
#include "head/ops_admin.h"
/* The fleet at a glance: head_fleet_view. */
#include "head/fleet.h"
#include "head/ops_observe.h"

#endif
