/* advisor.h: the autoscaling advisor — when to add GPUs of a class, and which
 * idle GPUs to release — and the cold start learned per GPU class. Pure like
 * the scheduler: no I/O, no clocks, no threads; `now` (nanoseconds, any
 * monotonic origin) comes from the caller. gpuqd (head/scale.c) and gpuq-sim
 * (sim/fleet_scale.c) drive the same functions.
 *
 * Units: work is GPU-seconds on a nominal GPU (admission's backlog); a GPU
 * delivers `speed` GPU-seconds of work per second (1 when not measured).
 *
 * Scale-up (the seed's rule: a GPU is worth its cold start C only when the
 * queue holds more than k x C of work), judged per lane: batch work can wait
 * k_batch (2) cold starts; interactive work cannot, so its k_interactive is
 * small (0.25):
 *   Bi, Bb = the interactive and batch backlogs (sums over capabilities;
 *            a demand whose lane is not interactive counts as batch)
 *   Ti, Tb = k_interactive x C, k_batch x C   (the lanes' thresholds)
 *   n      = GPUs serving now + GPUs requested and not ready yet
 *   load   = throughput + Bi / Ti + Bb / Tb  (work arriving, plus each
 *            backlog cleared over its lane's k cold starts), GPU-s per second
 *   u      = load / (n x speed)          (utilization before)
 *   Up only when Bi > Ti or Bb > Tb (or n = 0 and Bi + Bb > 0: work nothing
 *   can serve), u > up_utilization, and the cool-down since the
 *   last action has passed. N = the GPUs that bring u to up_utilization or
 *   under, at most floor(Bi / Ti) + floor(Bb / Tb) (each new GPU must have
 *   its lane's k cold starts of work waiting for it), at most max_step, and
 *   n + N <= max_gpus. u_after = load / ((n + N) x speed). The
 *   recommendation names the lane that drove it (rec.lane).
 * Scale-down: GPUs idle (nothing running) longer than idle_release_s, while
 *   no GPU is pending, Bi <= Ti and Bb <= Tb, the cool-down has passed, and the
 *   utilization after releasing them stays at or under down_utilization
 *   (lower than up_utilization: the gap between the two thresholds is the
 *   hysteresis). Never a GPU that holds a pinned or hot (loaded) model
 *   while work for it is queued (the caller flags it: `protected_model`).
 *   Never below
 *   min_gpus. Oldest-idle first.
 * Every recommendation carries its arithmetic as `reason`.
 *
 * Cold start: the time from a provision request (advisor_provisioned) to the
 *   new worker's first ready heartbeat (advisor_worker_ready), per GPU class
 *   (the GPU name its agent reports): an exponentially weighted mean (weight
 *   alpha for the newest), starting from the first observation; until a class
 *   has one, cold_start_prior_s. A request not answered within
 *   pending_timeout_s stops counting as capacity on the way.
 *
 * Ownership: struct advisor owns its state; one thread at a time. */
#ifndef GPUQ_CORE_ADVISOR_H
#define GPUQ_CORE_ADVISOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/sched.h"

#define ADVISOR_MAX_CLASSES 32
#define ADVISOR_MAX_PENDING 256
#define ADVISOR_MAX_RELEASE 64

/* Invariant (advisor_policy_check): k_batch > 0, k_interactive > 0; 0 < down_utilization <
 * up_utilization <= 1; max_gpus >= min_gpus >= 0; times >= 0; 0 < alpha <= 1. */
struct advisor_policy {
    double k_batch;            /* batch backlog must exceed k_batch x cold start; default 2 */
    double k_interactive;      /* the same for interactive backlog; default 0.25 */
    double up_utilization;     /* target utilization: scale up past it; default 0.8 */
    double down_utilization;   /* release only while utilization stays under; default 0.5 */
    int max_gpus;              /* the fleet's maximum size (budget); default 8 */
    int min_gpus;              /* never release below; default 0 */
    int max_step;              /* GPUs one scale-up may request; 0 = no cap; default 0 */
    double idle_release_s;     /* idle longer than this → may be released; default 120
                                * (bench/scale-sim: 300 costs ~18 GPU-h a day more, same p99) */
    double cooldown_s;         /* no action this soon after the last one; default 300 */
    double cold_start_prior_s; /* a class's cold start until measured; default 180 */
    double alpha;              /* weight of the newest cold start observed; default 0.3 */
    double pending_timeout_s;  /* a request not ready by then is dropped; default 1200 */
};

/* One (capability, lane)'s demand. Invariant: backlog_gpu_s, throughput >= 0. */
struct advisor_demand {
    char capability[SCHED_NAME_MAX];
    int lane;                  /* enum sched_lane */
    double backlog_gpu_s;      /* queued work */
    double throughput;         /* GPU-seconds per second delivered recently */
};

/* One GPU of the fleet as the caller sees it now. */
struct advisor_gpu {
    char id[SCHED_NAME_MAX];
    char cls[SCHED_NAME_MAX];  /* GPU class (the name its agent reports) */
    bool busy;                 /* runs or loads something */
    double idle_s;             /* seconds since it last ran something (0 when busy) */
    bool protected_model;      /* holds a pinned or loaded model that queued work needs */
    bool draining;             /* on its way out: not counted */
};

struct advisor_input {
    const struct advisor_demand *demands;
    int ndemands;
    const struct advisor_gpu *gpus;
    int ngpus;
    double speed;              /* work GPU-s per GPU per second; <= 0 means 1 */
    const char *up_class;      /* the class a scale-up provisions */
};

enum advisor_action { ADVISOR_HOLD = 0, ADVISOR_UP = 1, ADVISOR_DOWN = 2 };
/* Which lane's backlog drove a recommendation. */
enum advisor_lane { ADVISOR_LANE_NONE = 0, ADVISOR_LANE_INTERACTIVE = 1, ADVISOR_LANE_BATCH = 2,
                    ADVISOR_LANE_BOTH = 3 };

struct advisor_rec {
    enum advisor_action action;
    char cls[SCHED_NAME_MAX];  /* ADVISOR_UP: the class to add */
    int count;                 /* GPUs to add or release */
    char release[ADVISOR_MAX_RELEASE][SCHED_NAME_MAX]; /* ADVISOR_DOWN: worker ids */
    enum advisor_lane lane;    /* the lane(s) over their threshold (NONE: neither) */
    /* the arithmetic; k and threshold_gpu_s are the driving lane's (batch's
     * when neither or both lanes drive) */
    double backlog_gpu_s, throughput, cold_start_s, k, threshold_gpu_s;
    double backlog_interactive_gpu_s, backlog_batch_gpu_s;
    double k_interactive, k_batch, threshold_interactive_gpu_s, threshold_batch_gpu_s;
    double speed, load, util_before, util_after;
    int gpus, pending, max_gpus;
    double cooldown_left_s;
    char reason[512];
};

struct advisor_class_info {
    char cls[SCHED_NAME_MAX];
    double cold_start_s;       /* the mean, or the prior while samples = 0 */
    double last_s;             /* the latest observation (0: none) */
    int samples;
    int pending;               /* provision requests not yet ready */
};

struct advisor;

void advisor_policy_defaults(struct advisor_policy *p);
/* 0, or GPUQ_EINVAL with why naming the field and the reason. */
int advisor_policy_check(const struct advisor_policy *p, char *why, size_t size);
/* NULL when p breaks its invariant. */
struct advisor *advisor_create(const struct advisor_policy *p);
void advisor_destroy(struct advisor *a);
const struct advisor_policy *advisor_policy(const struct advisor *a);

/* The recommendation for in now; changes nothing. GPUQ_EINVAL on bad input
 * (negative figures, a missing up_class). */
int advisor_decide(const struct advisor *a, const struct advisor_input *in, int64_t now,
                   struct advisor_rec *out);
/* The caller acted on rec (ran the hook, or logged it in dry-run): starts the
 * cool-down; ADVISOR_UP records count provision requests of rec->cls. */
void advisor_acted(struct advisor *a, const struct advisor_rec *rec, int64_t now);
/* Records provision requests made outside a recommendation. */
void advisor_provisioned(struct advisor *a, const char *cls, int count, int64_t now);
/* count requests of cls will not come (the hook failed): dropped, oldest first. */
void advisor_provision_failed(struct advisor *a, const char *cls, int count);
/* A new worker of class cls sent its first ready heartbeat: the oldest pending
 * request (of cls, else of any class) is matched and its time is learned as
 * cls's cold start. *learned_s gets it; GPUQ_ENOENT when nothing was pending
 * (the worker was not provisioned by us; nothing learned). */
int advisor_worker_ready(struct advisor *a, const char *cls, int64_t now, double *learned_s);
/* The cold start of cls: its mean, or the prior. */
double advisor_cold_start(const struct advisor *a, const char *cls);
/* Requests still pending (timed-out ones dropped as of now). */
int advisor_pending(const struct advisor *a, int64_t now);
/* Copies up to max classes known (observed or pending); returns the count. */
int advisor_classes(const struct advisor *a, int64_t now, struct advisor_class_info *out,
                    int max);

#endif
