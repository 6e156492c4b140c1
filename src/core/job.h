/* job.h: a job as the scheduler core holds it (internal to src/core).
 * Invariant: state says which list links it — QUEUED: its (capability,
 * model) job_queue; PLACED: worker->placed (FIFO, not started, may move); RUNNING:
 * worker->running. w is NULL exactly when QUEUED. */
#ifndef GPUQ_CORE_JOB_H
#define GPUQ_CORE_JOB_H

#include <stdbool.h>
#include <stdint.h>

#include "core/sched.h"

enum sjob_state { SJOB_QUEUED = 0, SJOB_PLACED = 1, SJOB_RUNNING = 2 };

struct sworker;

struct sjob {
    /* spec.exclude is the job's own copy of the exclusion list (freed with
     * the job), or NULL. Every queued job pays for this struct (issue 20:
     * memory per queued job), which fits a 320-byte allocator class. */
    struct job_spec spec;
    int cap;              /* capability index */
    int model;            /* model index */
    int qix;              /* its (capability, model) queue in sched.queues */
    enum sjob_state state;
    double work;          /* size measure: pixels x steps x frames (>= 1) */
    double cost_s;        /* estimated GPU-seconds on a nominal GPU, at add time */
    struct sworker *w;    /* placed on / running on */
    struct sjob *prev, *next;
    uint8_t qlist;        /* QUEUED: which priority list (lane * 2 + tier) */
    /* Flags in one byte (every queued job pays for this struct). */
    /* PLACED on a worker in its exclusion list (only when no other could
     * take it at the time); counted in sched.nexcl_placed. */
    bool on_excluded : 1;
    /* Preemption (core/preempt.h): RUNNING batch job picked as a victim (its
     * end is on its way: not picked again); interactive job a victim was
     * already picked for (one preemption per job). */
    bool preempting : 1;
    bool preempted_for : 1;
    /* PLACED first on its worker and already handed to it (sched_take, "held
     * ahead"): the worker starts it when a slot frees. It stays first, and
     * no other worker may take it. */
    bool ahead : 1;
    /* Held ahead on a worker whose GPU then failed: reported for
     * the caller to take back (sched_held_news), once. */
    bool taking_back : 1;
    /* QUEUED: its node in the list's tree by order key (queue.c): children,
     * heap priority, and the cost_s summed over its subtree. */
    uint32_t tprio;
    struct sjob *tleft, *tright;
    double tsum;
    /* Estimates on w, set at placement/projection. */
    double est_load_s, est_run_s, est_speed;
    int64_t est_start_ns; /* projected (PLACED) or actual (RUNNING) start */
    /* QUEUED again after being taken off such a worker (see on_excluded): its
     * id (owned), for the explanation of the next placement; NULL otherwise.
     * A pointer, not a buffer: one job in many ever has one, and every queued
     * job pays for this struct (issue 20: memory per queued job). */
    char *moved_off;
};
/* A byte over and the allocator serves every queued job from its next class
 * (jemalloc's 384 bytes; bench/README.md, "jemalloc"). */
_Static_assert(sizeof(struct sjob) <= 320, "struct sjob: every queued job pays for it");

/* sjob_order: the job's dispatch order key within its lane and tier. */
static inline int64_t sjob_order(const struct sjob *j)
{
    return j->spec.order_ns ? j->spec.order_ns : j->spec.submit_ns;
}

#endif
