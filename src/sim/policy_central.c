/* policy_central.c: the two references with one shared queue, the floor and
 * the textbook baseline gpuq's figures are read against:
 *  - shared-fifo: one FIFO for the whole fleet (seed 002's "naive approach":
 *    the first available GPU picks a job up). A GPU with a free slot takes
 *    the oldest waiting job it can run; an arriving job with a free GPU
 *    starts at once (a warm one first, then the fastest). Loads, evictions
 *    and VRAM count as for every other policy. On identical GPUs with one
 *    model this is exactly M/M/c (or M/G/c): the queue the closed forms of
 *    tests/integration/test_sim.py describe.
 *  - oracle: the same queue in a world without loads — every model resident
 *    on every GPU, VRAM never in the way (policy.all_warm). No router can
 *    beat it by much: its figures are the floor each report is divided by.
 *  - oracle-prio: the oracle's world, but the queue serves the interactive
 *    lane first (a strict priority queue, not preemptive: a running batch job
 *    finishes), oldest first within a lane. gpuq keeps interactive users
 *    fast while batch floods, so a batch model's tail under gpuq is read
 *    against this floor, not the oracle's, which serves everyone in arrival
 *    order. With one lane it is the oracle; on identical GPUs with one
 *    exponential run time it is the non-preemptive priority M/M/c queue
 *    (tests/integration/test_sim_baselines.py checks both). A reference, not
 *    a rule of gpuq: gpuq's order lives in src/core.
 * The queue is kept per capability (oldest head first across the ones a GPU
 * serves), which is one FIFO as each GPU sees it. A job no GPU can ever hold
 * is refused at once, as in policy_base.c. */
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "sim/sim.h"

/* The shared queue's state is one sim_capq: a FIFO per capability; tried
 * marks the GPUs whose start failed for the arriving job. */

/* gpu can run job now or later: alive, its capability, VRAM that can hold its
 * model at all (the oracle too: it runs the same jobs), not a GPU that failed
 * it. */
static bool central_ok(const struct sim *s, int gpu, const struct sim_job *j)
{
    if (!s->gpus[gpu].alive || !sim_gpu_has_cap(s, gpu, j->cap))
        return false;
    if (!sim_gpu_fits(s, gpu, s->wl->caps[j->cap].model))
        return false;
    return !sim_excluded(s, j, gpu);
}

static void central_arrive(struct sim *s, int job)
{
    struct sim_capq *st = s->pstate;
    struct sim_job *j = &s->jobs[job];
    if (!sim_job_runnable(s, j)) {
        sim_job_refused(s, job);
        return;
    }
    int64_t t0 = clock_mono_ns();
    int model = s->wl->caps[j->cap].model;
    bool started = false;
    /* Older jobs of its capability go first. */
    if (st->head[j->cap] < 0) {
        memset(st->tried, 0, (size_t)s->ngpus * sizeof(bool));
        for (;;) {
            int best = -1;
            for (int g = 0; g < s->ngpus; g++) {
                if (st->tried[g] || !sim_gpu_has_slot(s, g) || !central_ok(s, g, j))
                    continue;
                if (best < 0) {
                    best = g;
                    continue;
                }
                bool wg = sim_gpu_warm(s, g, model), wb = sim_gpu_warm(s, best, model);
                if (wg != wb ? wg : sim_gpu_speed(s, g) > sim_gpu_speed(s, best))
                    best = g;
            }
            if (best < 0)
                break;
            if (sim_start(s, best, job)) {
                started = true;
                break;
            }
            st->tried[best] = true;
        }
    }
    sim_record_decision(s, (double)(clock_mono_ns() - t0) / 1e3);
    if (started)
        return;
    sim_capq_push(s, st, job);
}

/* a goes before b in the shared queue: the oldest first, and for
 * oracle-prio the interactive lane before the batch lane. */
static bool central_before(const struct sim *s, const struct sim_job *a, const struct sim_job *b)
{
    if (s->pol->lane_first) {
        enum sched_lane la = s->wl->caps[a->cap].lane, lb = s->wl->caps[b->cap].lane;
        if (la != lb)
            return la == SCHED_LANE_INTERACTIVE;
    }
    return a->submit_t < b->submit_t;
}

/* A free slot takes the first job it can start, across its capabilities. */
static void central_free(struct sim *s, int gpu)
{
    struct sim_capq *st = s->pstate;
    const struct wl_gpu *spec = s->gpus[gpu].spec;
    bool skip[SCHED_MAX_CAPS];
    memset(skip, 0, sizeof(skip));
    while (sim_gpu_has_slot(s, gpu)) {
        int64_t t0 = clock_mono_ns();
        int best = -1, bk = -1;
        for (int k = 0; k < spec->ncaps; k++) {
            int h = st->head[spec->caps[k]];
            if (skip[k] || h < 0)
                continue;
            if (!central_ok(s, gpu, &s->jobs[h])) {
                skip[k] = true;
                continue;
            }
            if (best < 0 || central_before(s, &s->jobs[h], &s->jobs[best])) {
                best = h;
                bk = k;
            }
        }
        if (best < 0)
            break;
        bool ok = sim_start(s, gpu, best);
        sim_record_decision(s, (double)(clock_mono_ns() - t0) / 1e3);
        if (!ok) { /* its model waits for VRAM running jobs hold */
            skip[bk] = true;
            continue;
        }
        sim_capq_pop(s, st, s->jobs[best].cap);
    }
}

const struct policy policy_shared_fifo = {
    .name = "shared-fifo",
    .init = sim_capq_attach,
    .fini = sim_capq_detach,
    .arrive = central_arrive,
    .gpu_free = central_free,
};

const struct policy policy_oracle = {
    .name = "oracle",
    .all_warm = true,
    .init = sim_capq_attach,
    .fini = sim_capq_detach,
    .arrive = central_arrive,
    .gpu_free = central_free,
};

const struct policy policy_oracle_prio = {
    .name = "oracle-prio",
    .all_warm = true,
    .lane_first = true,
    .init = sim_capq_attach,
    .fini = sim_capq_detach,
    .arrive = central_arrive,
    .gpu_free = central_free,
};
