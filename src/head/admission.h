/* admission.h: gpuqd's side of admission (core/admit.h) — one struct admit
 * under its own mutex, the jobs it counts (id → tenant, capability, lane,
 * cost, fair-queuing tag, queued or running), and the fleet's capacity per
 * lane. The submit path asks admission_admit before anything is stored; the
 * dispatcher reports what happens to counted jobs (admission_job_state) and
 * the fleet (admission_capacity).
 *
 * Locking: its mutex is a leaf — taken with no other head lock held and
 * releasing before any is taken. */
#ifndef GPUQ_HEAD_ADMISSION_H
#define GPUQ_HEAD_ADMISSION_H

#include <stdint.h>

#include "core/admit.h"
#include "head/config.h"
#include "store/records.h"

struct admission;

struct admission *admission_create(const struct head_config *cfg);
void admission_destroy(struct admission *a);

/* The verdict for rec (capability, lane, cost_s set) of tenant now. On
 * ADMIT_OK the job is counted and rec->order_ns gets its dispatch order;
 * admission_bind must then follow (with the job's id) or admission_undo.
 * booking: a retry's key (admission_booking), 0 = none. */
int admission_admit(struct admission *a, const char *tenant, struct job_rec *rec,
                    uint64_t booking, struct admit_verdict *v);
/* The key of a client's retry: tenant and idempotency key; 0 without a key. */
uint64_t admission_booking(int64_t tenant_id, const char *idem_key);
/* The admitted job got its id. */
void admission_bind(struct admission *a, const char *tenant, const struct job_rec *rec);
/* An admitted job was not stored after all (store failure, idempotent replay,
 * a batch refused as a whole): admit_undo gives back its tokens and tag too;
 * undo a batch's jobs latest first. */
void admission_undo(struct admission *a, const char *tenant, const struct job_rec *rec);
/* What became of a counted job: JOB_RUNNING leaves the queue; a terminal
 * state ends it (delivered work counts when it succeeded); JOB_QUEUED (a
 * retry after a failed attempt) changes nothing. Unknown ids are ignored. */
void admission_job_state(struct admission *a, uint64_t job_id, enum job_state state);
/* The throughput admission works with for a lane now (GPU-seconds per
 * second: measured while work waits, else nominal). */
double admission_throughput(struct admission *a, enum sched_lane lane);
/* The rate batch ETAs assume (sched_lane_rate): admit_eta_rate. */
double admission_eta_rate(struct admission *a, enum sched_lane lane, bool *measured);
/* The fleet's nominal throughput per lane (GPU-seconds per second). */
void admission_capacity(struct admission *a, double interactive, double batch);

/* Figures for the API: the backlog per (capability, lane, tenant), the lane
 * throughput used, a tenant's promised GPU-seconds per minute. */
void admission_backlog_each(struct admission *a,
                            void (*fn)(const char *capability, enum sched_lane lane,
                                       const char *tenant, double gpu_s, int jobs, void *arg),
                            void *arg);

#endif
