/* preempt.c: preemption of batch work for interactive jobs, behind
 * preempt.h — which interactive job has waited too long and which running
 * batch job gives up its GPU for it. */
#include "core/preempt.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "core/sched_int.h"

/* w could run j: a usable member of j's capability that can hold its model
 * and is not excluded by it (while the exclusion binds). */
static bool can_run(const struct sched *s, const struct sworker *w, const struct sjob *j,
                    bool excl_binds)
{
    if (!sched_worker_live(w))
        return false;
    if (sched_worker_cap_slot(w, j->cap) < 0 || !sched_worker_can_hold(s, w, j->model))
        return false;
    return !(excl_binds && sched_job_excludes(j, w->info.id));
}

static bool has_free_slot(const struct sworker *w)
{
    return w->nrunning + w->nplaced < w->info.concurrency;
}

static int64_t est_ns(const struct sjob *j)
{
    return (int64_t)((j->est_load_s + j->est_run_s) * 1e9);
}

/* When w next frees a slot for another job: the earliest estimated end of its
 * running jobs (now when one is overdue or a slot is free), after the job it
 * holds ahead (which takes the first slot that frees). */
static int64_t frees_at(const struct sworker *w, int64_t now)
{
    const struct sjob *held = w->placed_head && w->placed_head->ahead ? w->placed_head : NULL;
    if (w->nrunning < w->info.concurrency)
        return held ? now + est_ns(held) : now;
    int64_t best = INT64_MAX;
    for (const struct sjob *r = w->run_head; r; r = r->next) {
        int64_t end = r->est_start_ns + est_ns(r);
        if (end < best)
            best = end;
    }
    if (best < now)
        best = now;
    return held ? best + est_ns(held) : best;
}

struct pick {
    struct sjob *victim;
    struct sworker *w;
    double cost, lost_s, load_s, done_s; /* done_s: j's load and run there */
};

/* How long j would take on w once it starts there: its model's load when w
 * does not hold it, and its run at w's speed now (a slow or throttled GPU
 * serves it later). */
static double service_s(const struct sched *s, const struct sworker *w, const struct sjob *j)
{
    double speed = sched_worker_speed(w);
    double load_s = sched_worker_holds(w, j->model) ? 0 : sched_model_load_s(s, j->model);
    return load_s + j->cost_s / (speed > 0 ? speed : 1.0);
}

/* The best victim on w for interactive job j, folded into *best. */
static void consider(const struct sched *s, struct sworker *w, const struct sjob *j, int64_t now,
                     struct pick *best)
{
    double load_s = sched_worker_holds(w, j->model) ? 0 : sched_model_load_s(s, j->model);
    double speed = sched_worker_speed(w);
    double done_s = service_s(s, w, j);
    /* Rule 16: only where j's model is resident. A preemption that must
     * then load the model throws away the batch job's work and pushes out
     * another model, whose next job may preempt in turn: on zoo-nofit
     * (12 models, 16 GPUs; seeds 1..10, medians) preempt_after_s 10 took
     * image.sdxl to p50 / p99 / SLO 22.2 / 90 s / 0.105 and the cache hit
     * ratio to 0.60 (14,940 cold loads), 20 s to 16.7 / 74 s / 0.474 (hit
     * 0.74); warm GPUs only: 5.80 / 26.6 / 0.794 and 5.17 / 23.6 / 0.833,
     * hit 0.925-0.926 (preemption off: 5.07 / 22.5 / 0.847). One model
     * (b2b-flood): every GPU holds it, unchanged. */
    if (load_s > 0)
        return;
    /* A GPU that holds a job ahead starts that one in the slot a victim
     * frees: no victim there. */
    if (w->placed_head && w->placed_head->ahead)
        return;
    for (struct sjob *r = w->run_head; r; r = r->next) {
        if (r->spec.lane != SCHED_LANE_BATCH || r->preempting)
            continue;
        double elapsed = (double)(now - r->est_start_ns) / 1e9;
        if (elapsed < 0)
            elapsed = 0;
        double left = r->est_load_s + r->est_run_s - elapsed;
        if (left <= load_s)
            continue; /* it ends before the interactive model could be loaded */
        double lost = elapsed * (speed > 0 ? speed : 1.0);
        /* What it costs: the work thrown away, plus the interactive job's
         * load and run there, weighed 10:1 — the user waiting on the
         * interactive job comes first (b2b-flood: the victim chosen at 1:1
         * left interactive p99 at 1.105x the no-flood run over 8 seeds, at
         * 10:1 1.073x); among GPUs that serve it alike, the least work lost. */
        double cost = lost + 10 * done_s;
        if (!best->victim || cost < best->cost - 1e-9 ||
            (cost <= best->cost + 1e-9 &&
             (w->seq < best->w->seq || (w == best->w && r->spec.id < best->victim->spec.id)))) {
            best->victim = r;
            best->w = w;
            best->cost = cost;
            best->lost_s = lost;
            best->load_s = load_s;
            best->done_s = done_s;
        }
    }
}

/* Tries to find a victim for interactive job j (queued, or placed on
 * on_worker). Returns true and fills *out when the rule calls for one. */
static bool try_job(struct sched *s, struct sjob *j, struct sworker *on_worker, int64_t now,
                    struct sched_preempt *out)
{
    double bound = s->cfg.preempt_after_s;
    double waited = (double)(now - j->spec.submit_ns) / 1e9;
    if (waited < 0)
        waited = 0;
    bool binds = j->spec.nexclude > 0 && sched_exclusion_binds(s, j);
    int64_t first_free = INT64_MAX;
    double natural_s = INFINITY; /* j's completion from now without preempting */
    struct pick best = {0};
    for (int i = 0; i < s->nworkers; i++) {
        struct sworker *w = s->workers[i];
        if (!can_run(s, w, j, binds))
            continue;
        if (has_free_slot(w) || (w == on_worker && w->nrunning < w->info.concurrency))
            return false; /* it can start (or move) without taking anything from anyone */
        int64_t f = frees_at(w, now);
        if (w == on_worker) {
            sched_project(s, w, now); /* its start behind the jobs placed before it */
            if (j->est_start_ns > f)
                f = j->est_start_ns;
        }
        if (f < first_free)
            first_free = f;
        double done = (double)(f - now) / 1e9 + service_s(s, w, j);
        if (done < natural_s)
            natural_s = done;
        /* A placed job freed a GPU elsewhere moves there (late binding). */
        consider(s, w, j, now, &best);
    }
    if (first_free == INT64_MAX || !best.victim)
        return false;
    /* Preempt when j would wait longer than the bound, or would finish later
     * than on the victim's GPU by more than the bound (the first GPU to free
     * is slow or throttled). */
    double wait = waited + (double)(first_free - now) / 1e9;
    if (wait <= bound && natural_s - best.done_s <= bound)
        return false;
    /* The slot the victim frees is j's: j goes to the victim's GPU, ahead of
     * the batch jobs placed there, or a placed batch job would take it. */
    if (sched_bind_front(s, j, best.w, now) != 0)
        return false;
    memset(out, 0, sizeof(*out));
    out->victim = best.victim->spec.id;
    out->for_job = j->spec.id;
    snprintf(out->worker, sizeof(out->worker), "%s", best.w->info.id);
    out->waited_s = waited;
    out->wait_s = wait;
    out->lost_s = best.lost_s;
    out->load_s = best.load_s;
    snprintf(out->reason, sizeof(out->reason),
             "preempted for interactive job %llu (%.40s), which would wait %.2f s (> %.2f s); "
             "%.2f GPU-s of this attempt lost",
             (unsigned long long)j->spec.id, s->caps[j->cap].name, wait, bound, best.lost_s);
    best.victim->preempting = true;
    j->preempted_for = true;
    return true;
}

int sched_preempt_pick(struct sched *s, int64_t now, struct sched_preempt *out)
{
    if (!s || !out)
        return GPUQ_EINVAL;
    if (!(s->cfg.preempt_after_s > 0) || s->nrunning == 0)
        return 0;
    /* Interactive jobs placed behind a full GPU. */
    for (int i = 0; i < s->nworkers; i++) {
        struct sworker *w = s->workers[i];
        if (!w->placed_head || w->nrunning < w->info.concurrency)
            continue;
        for (struct sjob *j = w->placed_head; j; j = j->next)
            if (j->spec.lane == SCHED_LANE_INTERACTIVE && !j->preempted_for && !j->ahead &&
                try_job(s, j, w, now, out))
                return 1;
    }
    /* The interactive head of each (capability, model) queue. */
    unsigned skip = s->paused_lanes | (1u << SCHED_LANE_BATCH);
    for (int k = 0; k < s->nqueues; k++) {
        struct squeue *q = &s->queues[k];
        if (q->q.count == 0 || s->caps[q->cap].nqueued_interactive == 0 ||
            s->caps[q->cap].paused || sched_parked(s, q))
            continue;
        struct sjob *j = job_queue_peek_lanes(&q->q, skip);
        if (j && !j->preempted_for && try_job(s, j, NULL, now, out))
            return 1;
    }
    return 0;
}
