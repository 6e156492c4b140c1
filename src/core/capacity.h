/* capacity.h: the capacity budget (R13) and the backlog tally (R7) — pure
 * arithmetic, no I/O, no clock.
 *
 * Capacity: how many GPU-seconds of work per minute each batch tenant can be
 * promised. Work is counted as jobs are costed at submit (estimated GPU-seconds
 * on a nominal GPU, sched_estimate_cost), so a promise compares directly with
 * the cost of the jobs a tenant submits and with admission's budgets.
 *
 *   speed        = work_s / done_busy_s over the measured window: nominal
 *                  GPU-seconds of work one real GPU-second delivers (model
 *                  loads, slower GPUs and estimate bias included); 1 with no
 *                  completed work measured.
 *   fleet        = max_gpus × speed                  (work GPU-s per second)
 *   interactive  = reserved_gpus × speed, or what interactive work measurably
 *                  used (interactive_busy_s / window_s × speed), if more
 *   batch        = max(0, fleet − interactive) × 60  (work GPU-s per minute)
 *   tenant i     = batch × weight_i / Σ weights
 *
 * Backlog: GPU-seconds of work not yet done and job counts, per capability,
 * per lane and per tenant (queued jobs count their whole cost, running ones
 * the part their progress has not covered). */
#ifndef GPUQ_CORE_CAPACITY_H
#define GPUQ_CORE_CAPACITY_H

#include <stdint.h>

#include "core/sched.h"

#define CAPACITY_MAX_TENANTS 256

/* What the shell measured. Invariant: counts and seconds >= 0; window_s > 0. */
struct capacity_input {
    int max_gpus;              /* the fleet's maximum size */
    int reserved_gpus;         /* GPUs held for interactive work */
    double window_s;           /* the measurement window */
    double busy_s;             /* GPU-seconds GPUs spent running jobs in the window */
    double done_busy_s;        /* GPU-seconds the jobs that succeeded in the window ran */
    double work_s;             /* the estimated cost (GPU-s) of those jobs */
    double interactive_busy_s; /* the part of busy_s spent on interactive jobs */
    int ntenants;
    double weights[CAPACITY_MAX_TENANTS]; /* batch tenants' allocations, each > 0 */
};

struct capacity_plan {
    double throughput;        /* busy_s / window_s: GPU-seconds per second delivered */
    double speed;             /* work GPU-s per busy GPU-s (1 when unmeasured) */
    int measured;             /* 1 when speed comes from measurements */
    double fleet_per_min;     /* max_gpus × speed × 60 */
    double interactive_per_min; /* set aside for interactive work */
    double batch_per_min;     /* what batch tenants share */
    double tenant_per_min[CAPACITY_MAX_TENANTS]; /* each batch tenant's promise */
};

/* GPUQ_EINVAL when in breaks its invariant (a weight <= 0, window <= 0, too
 * many tenants, negative counts). */
int capacity_plan(const struct capacity_input *in, struct capacity_plan *out);

/* ---- backlog ---- */

#define BACKLOG_MAX_KEYS 256

struct backlog_entry {
    char key[SCHED_NAME_MAX];  /* capability, lane or tenant name */
    double gpu_s;              /* work not yet done */
    int queued, running;
};

/* Invariant: entries unique by key, at most BACKLOG_MAX_KEYS per table (more
 * keys fold into "other"); totals equal the sums of each table. */
struct backlog {
    struct backlog_entry by_cap[BACKLOG_MAX_KEYS], by_lane[2], by_tenant[BACKLOG_MAX_KEYS];
    int ncap, ntenant;
    double gpu_s;
    int queued, running;
};

void backlog_init(struct backlog *b);
/* Adds one unfinished job: running with progress in 0..1, or queued. */
void backlog_add(struct backlog *b, const char *cap, int lane_batch, const char *tenant,
                 double cost_s, int running, double progress);
/* Adds n queued jobs of one (capability, lane, tenant) holding gpu_s of work. */
void backlog_add_queued(struct backlog *b, const char *cap, int lane_batch, const char *tenant,
                        double gpu_s, int n);

#endif
