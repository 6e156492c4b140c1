/* scale.h: gpuqd's side of autoscaling — it gathers the advisor's inputs
 * (admission's backlog per capability and lane, the registry's GPUs, how long
 * each has been idle, the models queued work needs), runs core/advisor.h every
 * [scale] interval_ms from the dispatcher's tick, and acts on a decision by
 * running the configured hook (scale_up_cmd / scale_down_cmd) through a small
 * process runner: /bin/sh -c CMD in its own process group, its output read
 * through a pipe, reaped without blocking, killed after hook_timeout_s, never
 * more than one in flight per GPU class. dry_run only logs. The first ready
 * heartbeat of each worker feeds the learned cold start (not persisted: a
 * restarted head starts again from cold_start_prior_s).
 *
 * Hook environment: GPUQ_SCALE_ACTION (up | down), GPUQ_SCALE_CLASS,
 * GPUQ_SCALE_COUNT, GPUQ_SCALE_WORKERS (down: worker ids, space-separated),
 * GPUQ_SCALE_REASON, GPUQ_HEAD_URL.
 *
 * Locking: one mutex, a leaf (taken with no other head lock held, except that
 * the tick gathers its inputs before taking it). */
#ifndef GPUQ_HEAD_SCALE_H
#define GPUQ_HEAD_SCALE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/advisor.h"
#include "head/head.h"

#define SCALE_MAX_DEMANDS 64
#define SCALE_HOOKS_KEPT 8

/* A hook run, finished or in flight. */
struct scale_hook_info {
    char action[8];              /* up | down */
    char cls[SCHED_NAME_MAX];
    int count;
    char workers[512];           /* down: the ids given */
    int64_t started_ms;          /* wall clock */
    bool running;
    bool timed_out;              /* killed at hook_timeout_s */
    int exit_code;               /* exit status; -1 when killed by a signal */
    int signal;                  /* the signal that ended it (0: none) */
    double seconds;
    char output[1024];           /* the tail of stdout and stderr */
};

/* What GET /v1/scale shows. */
struct scale_view {
    bool enabled, dry_run;
    struct advisor_policy policy;
    char up_class[SCHED_NAME_MAX];
    bool have_rec;
    struct advisor_rec rec;      /* the latest recommendation */
    int64_t rec_ms;
    struct advisor_demand demands[SCALE_MAX_DEMANDS];
    int ndemands;
    struct advisor_class_info classes[ADVISOR_MAX_CLASSES];
    int nclasses;
    struct scale_hook_info hooks[SCALE_HOOKS_KEPT]; /* newest first */
    int nhooks;
    int64_t ups, downs;          /* actions taken (hooks run or, dry-run, logged) */
};

struct scale;

/* NULL when [scale] enabled = false. */
struct scale *scale_create(const struct head_config *cfg);
void scale_destroy(struct scale *s);
/* The head's URL, given to hooks as GPUQ_HEAD_URL. */
void scale_set_url(struct scale *s, const char *url);
/* From head_tick (the dispatcher thread): reaps hooks; every interval_ms
 * gathers the inputs, decides, and acts. */
void scale_tick(struct head *h);
/* A worker said it is ready (registration or heartbeat): the first time for
 * this incarnation, the cold start is learned if a provision was pending. */
void scale_worker_ready(struct head *h, const struct worker_rec *w);
void scale_view(struct head *h, struct scale_view *out);

#endif
