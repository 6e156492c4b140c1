/* retention.c: the result retention sweep (retention.h) and the sweep of
 * finished jobs out of memory. One result pass at a time: `running` is set
 * while a pass is with the committer; `next_ns` says when the next may start
 * (monotonic). One head per process, like the input sweep. */
#include "head/retention.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "head/head.h"
#include "head/jobs.h"
#include "store/committer.h"

#define MOD "retention"

struct prune_op {
    struct commit_op op;      /* first: the committer hands it back */
    int64_t cutoff_ms;
    int64_t interval_ns;
    int deleted;
};

static atomic_bool running;
static _Atomic int64_t next_sweep_ns;
static _Atomic int64_t last_sweep_ns;
static _Atomic int64_t next_ns;

int64_t retention_ms(const struct head_config *cfg)
{
    if (cfg->result_retention_s > 0)
        return (int64_t)cfg->result_retention_s * 1000;
    return (int64_t)cfg->result_retention_h * 3600 * 1000;
}

/* A pass every half retention, within [1 s, RETENTION_MAX_INTERVAL_S]. */
static int64_t interval_ns(const struct head_config *cfg)
{
    int64_t ms = retention_ms(cfg) / 2;
    if (ms < 1000)
        ms = 1000;
    if (ms > RETENTION_MAX_INTERVAL_S * 1000)
        ms = RETENTION_MAX_INTERVAL_S * 1000;
    return ms * NS_PER_MS;
}

static int prune_apply(struct store *s, struct commit_op *op)
{
    struct prune_op *p = (struct prune_op *)op;
    return s->ops->prune_results(s, p->cutoff_ms, RETENTION_BATCH, &p->deleted);
}

static void prune_done(struct commit_op *op, int rc)
{
    struct prune_op *p = (struct prune_op *)op;
    int64_t now = clock_mono_ns();
    if (rc) {
        log_warn(MOD, "result sweep failed: %s", gpuq_strerror(rc));
        p->deleted = 0;
    } else if (p->deleted) {
        log_info(MOD, "result sweep: %d result(s) past retention deleted", p->deleted);
    }
    /* A full batch: more are waiting, so the next tick goes on with them. */
    atomic_store(&next_ns, p->deleted == RETENTION_BATCH ? now : now + p->interval_ns);
    free(p);
    atomic_store(&running, false);
}

/* Finished jobs leave memory after keep_finished_s; reads of them, and
 * replays of their idempotency keys, go to the store. A pass a minute at
 * most, or, once more than keep_finished_max are in memory, at the next
 * tick (but one a second at most: jobs somebody waits on stay, and may be
 * what is over), which also lets the oldest go down to four fifths of the
 * max: under a flood the passes come seconds apart, each over a bounded
 * number of jobs. */
static void sweep_memory(struct head *h, int64_t now)
{
    long long max = h->cfg.keep_finished_max;
    jobs_lock(h->jobs);
    bool over = jobs_finished(h->jobs) > max;
    jobs_unlock(h->jobs);
    if (now < atomic_load(&next_sweep_ns) &&
        !(over && now >= atomic_load(&last_sweep_ns) + NS_PER_S))
        return;
    atomic_store(&last_sweep_ns, now);
    int64_t keep_ns = (int64_t)h->cfg.keep_finished_s * NS_PER_S;
    atomic_store(&next_sweep_ns, now + (keep_ns < 60 * NS_PER_S ? keep_ns / 2 + NS_PER_S
                                                                : 60 * NS_PER_S));
    int64_t wall = clock_wall_ms();
    jobs_lock(h->jobs);
    int n = jobs_sweep(h->jobs, wall - (int64_t)h->cfg.keep_finished_s * 1000, max - max / 5);
    jobs_unlock(h->jobs);
    if (n)
        log_debug(MOD, "%d finished job(s) left memory (kept in the store)", n);
}

void retention_tick(struct head *h)
{
    int64_t now = clock_mono_ns();
    sweep_memory(h, now);
    int64_t due = atomic_load(&next_ns);
    if (due == 0) { /* the first tick: the first pass soon after start */
        atomic_store(&next_ns, now + NS_PER_S);
        return;
    }
    if (now < due || atomic_exchange(&running, true))
        return;
    struct prune_op *p = xcalloc(1, sizeof *p);
    p->op.apply = prune_apply;
    p->op.done = prune_done;
    p->cutoff_ms = clock_wall_ms() - retention_ms(&h->cfg);
    p->interval_ns = interval_ns(&h->cfg);
    committer_submit(h->committer, &p->op);
}

