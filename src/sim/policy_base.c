/* policy_base.c: the baseline routers gpuq is measured against, written from
 * the seeds' descriptions so their behaviour (not their transport) is what
 * the simulator compares:
 *  - rr: a round-robin load balancer in front of per-GPU FIFO workers
 *    (Celery/RabbitMQ/LB as seed 000 describes them);
 *  - least-loaded: the GPU with the shortest queue (running + waiting);
 *  - affinity: seed 002's three-priority router (model loaded and queue below
 *    the max depth; else most free VRAM that fits; else least busy);
 *  - pick-worker: seed 003's pick_worker (warm workers with a free slot, else
 *    any with a free slot, by load ratio then speed score; else queue per
 *    capability and retry as workers free up).
 * All see the same GPUs, with the same VRAM manager (the core's eviction
 * policy) and retries that avoid the GPU that failed. */
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "sim/sim.h"

static bool eligible(const struct sim *s, int gpu, const struct sim_job *j)
{
    if (!s->gpus[gpu].alive || !sim_gpu_has_cap(s, gpu, j->cap))
        return false;
    return !sim_excluded(s, j, gpu);
}

static int depth(const struct sim *s, int gpu)
{
    return s->gpus[gpu].busy + s->gpus[gpu].qlen;
}

/* Starts what the GPU's FIFO allows (head first, strictly in order). */
static void fifo_drain(struct sim *s, int gpu)
{
    struct sim_gpu *g = &s->gpus[gpu];
    while (g->head >= 0 && sim_gpu_has_slot(s, gpu)) {
        if (!sim_start(s, gpu, g->head))
            break;
        sim_gpu_dequeue(s, gpu);
    }
}

static void fifo_route(struct sim *s, int job, int gpu)
{
    if (gpu < 0) { /* no eligible GPU at all: retry ignoring the exclusion */
        for (int g = 0; g < s->ngpus; g++)
            if (s->gpus[g].alive && sim_gpu_has_cap(s, g, s->jobs[job].cap)) {
                gpu = g;
                break;
            }
    }
    if (gpu < 0) {
        /* Nothing alive can run it: park it on its first capable GPU. */
        for (int g = 0; g < s->ngpus && gpu < 0; g++)
            if (sim_gpu_has_cap(s, g, s->jobs[job].cap))
                gpu = g;
        if (gpu < 0)
            return;
    }
    sim_gpu_enqueue(s, gpu, job);
    fifo_drain(s, gpu);
}

static void fifo_free(struct sim *s, int gpu)
{
    fifo_drain(s, gpu);
}

/* A lost GPU's waiting jobs are routed again. */
static void fifo_down(struct sim *s, int gpu)
{
    int j;
    int moved[4096], n = 0;
    while ((j = sim_gpu_dequeue(s, gpu)) >= 0) {
        if (n < 4096)
            moved[n++] = j;
        else
            s->pol->arrive(s, j);
    }
    for (int k = 0; k < n; k++)
        s->pol->arrive(s, moved[k]);
}

/* Dead GPUs hold parked jobs: when one comes back, its FIFO drains. */

/* ---- rr ----------------------------------------------------------------- */

struct rr_state {
    int next;
};

static void rr_init(struct sim *s)
{
    s->pstate = xcalloc(1, sizeof(struct rr_state));
}

static void rr_fini(struct sim *s)
{
    free(s->pstate);
}

static void rr_arrive(struct sim *s, int job)
{
    int64_t t0 = clock_mono_ns();
    struct rr_state *st = s->pstate;
    int gpu = -1;
    for (int k = 0; k < s->ngpus; k++) {
        int g = (st->next + k) % s->ngpus;
        if (eligible(s, g, &s->jobs[job])) {
            gpu = g;
            st->next = (g + 1) % s->ngpus;
            break;
        }
    }
    sim_record_decision(s, (double)(clock_mono_ns() - t0) / 1e3);
    fifo_route(s, job, gpu);
}

const struct policy policy_rr = {
    .name = "rr",
    .init = rr_init,
    .fini = rr_fini,
    .arrive = rr_arrive,
    .gpu_free = fifo_free,
    .gpu_down = fifo_down,
};

/* ---- least-loaded ------------------------------------------------------- */

static void ll_arrive(struct sim *s, int job)
{
    int64_t t0 = clock_mono_ns();
    int gpu = -1;
    for (int g = 0; g < s->ngpus; g++)
        if (eligible(s, g, &s->jobs[job]) && (gpu < 0 || depth(s, g) < depth(s, gpu)))
            gpu = g;
    sim_record_decision(s, (double)(clock_mono_ns() - t0) / 1e3);
    fifo_route(s, job, gpu);
}

const struct policy policy_least_loaded = {
    .name = "least-loaded",
    .arrive = ll_arrive,
    .gpu_free = fifo_free,
    .gpu_down = fifo_down,
};

/* ---- affinity (seed 002) ------------------------------------------------ */

static void aff_arrive(struct sim *s, int job)
{
    int64_t t0 = clock_mono_ns();
    const struct sim_job *j = &s->jobs[job];
    int model = s->wl->caps[j->cap].model;
    int gpu = -1;
    /* Priority 1: model loaded and room in its queue. */
    for (int g = 0; g < s->ngpus && gpu < 0; g++)
        if (eligible(s, g, j) && sim_gpu_warm(s, g, model) &&
            depth(s, g) < s->wl->affinity_max_depth)
            gpu = g;
    /* Priority 2: the most free VRAM, if the model fits without evicting. */
    if (gpu < 0) {
        int best = -1;
        for (int g = 0; g < s->ngpus; g++)
            if (eligible(s, g, j) && (best < 0 || s->gpus[g].free_mb > s->gpus[best].free_mb))
                best = g;
        if (best >= 0 && s->gpus[best].free_mb >= s->wl->models[model].vram_mb)
            gpu = best;
    }
    /* Priority 3: least busy (will evict). */
    if (gpu < 0)
        for (int g = 0; g < s->ngpus; g++)
            if (eligible(s, g, j) && (gpu < 0 || depth(s, g) < depth(s, gpu)))
                gpu = g;
    sim_record_decision(s, (double)(clock_mono_ns() - t0) / 1e3);
    fifo_route(s, job, gpu);
}

const struct policy policy_affinity = {
    .name = "affinity",
    .arrive = aff_arrive,
    .gpu_free = fifo_free,
    .gpu_down = fifo_down,
};

/* ---- pick-worker (seed 003) --------------------------------------------- */

struct pw_state {
    /* Per-capability FIFO of jobs no worker could take (Redis streams). */
    int *head, *tail;
};

static void pw_init(struct sim *s)
{
    struct pw_state *st = xcalloc(1, sizeof(*st));
    st->head = xmalloc((size_t)s->wl->ncaps * sizeof(int));
    st->tail = xmalloc((size_t)s->wl->ncaps * sizeof(int));
    for (int c = 0; c < s->wl->ncaps; c++)
        st->head[c] = st->tail[c] = -1;
    s->pstate = st;
}

static void pw_fini(struct sim *s)
{
    struct pw_state *st = s->pstate;
    free(st->head);
    free(st->tail);
    free(st);
}

static int pick_worker(struct sim *s, const struct sim_job *j, bool allow_excluded)
{
    int model = s->wl->caps[j->cap].model;
    int best = -1;
    double best_ratio = 0, best_score = 0;
    for (int pass = 0; pass < 2 && best < 0; pass++) {
        for (int g = 0; g < s->ngpus; g++) {
            if (!sim_gpu_has_slot(s, g) || !sim_gpu_has_cap(s, g, j->cap))
                continue;
            if (!allow_excluded && sim_excluded(s, j, g))
                continue;
            if (pass == 0 && !sim_gpu_warm(s, g, model))
                continue;
            double ratio = (double)s->gpus[g].busy / s->gpus[g].spec->concurrency;
            double score = sim_gpu_speed(s, g);
            if (best < 0 || ratio < best_ratio || (ratio == best_ratio && score > best_score)) {
                best = g;
                best_ratio = ratio;
                best_score = score;
            }
        }
    }
    return best;
}

static void pw_push(struct sim *s, int job)
{
    struct pw_state *st = s->pstate;
    int c = s->jobs[job].cap;
    s->jobs[job].next = -1;
    if (st->tail[c] >= 0)
        s->jobs[st->tail[c]].next = job;
    else
        st->head[c] = job;
    st->tail[c] = job;
}

static bool pw_try(struct sim *s, int job)
{
    int64_t t0 = clock_mono_ns();
    int g = pick_worker(s, &s->jobs[job], false);
    sim_record_decision(s, (double)(clock_mono_ns() - t0) / 1e3);
    return g >= 0 && sim_start(s, g, job);
}

static void pw_arrive(struct sim *s, int job)
{
    struct pw_state *st = s->pstate;
    /* Behind others of its capability it waits its turn (a stream is FIFO). */
    if (st->head[s->jobs[job].cap] >= 0 || !pw_try(s, job))
        pw_push(s, job);
}

static void pw_free(struct sim *s, int gpu)
{
    (void)gpu;
    struct pw_state *st = s->pstate;
    /* Drain the streams, oldest head first, while workers take them. */
    bool progress = true;
    while (progress) {
        progress = false;
        int best = -1;
        for (int c = 0; c < s->wl->ncaps; c++) {
            int h = st->head[c];
            if (h >= 0 && (best < 0 || s->jobs[h].submit_t < s->jobs[best].submit_t)) {
                /* only heads some worker can take now */
                if (pick_worker(s, &s->jobs[h], false) >= 0)
                    best = h;
            }
        }
        if (best >= 0 && pw_try(s, best)) {
            int c = s->jobs[best].cap;
            st->head[c] = s->jobs[best].next;
            if (st->head[c] < 0)
                st->tail[c] = -1;
            progress = true;
        }
    }
}

const struct policy policy_pick_worker = {
    .name = "pick-worker",
    .init = pw_init,
    .fini = pw_fini,
    .arrive = pw_arrive,
    .gpu_free = pw_free,
};
