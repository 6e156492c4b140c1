/* policy_base.c: the baseline routers gpuq is measured against, written from
 * the seeds' descriptions so their behaviour (not their transport) is what
 * the simulator compares:
 *  - rr: a round-robin load balancer in front of per-GPU FIFO workers
 *    (Celery/RabbitMQ/LB as seed 000 describes them);
 *  - least-loaded: the GPU with the shortest queue (running + waiting);
 *  - affinity: seed 002's three-priority router (model loaded and queue below
 *    the max depth; else most free VRAM that fits; else least busy);
 *  - affinity-ect: seed 002's full router — the same three priorities, with
 *    GPUs compared by estimated completion time (its rolling per-model
 *    duration estimates) and a 2x penalty on the wait of a GPU at 80 C, read
 *    from the state each GPU publishes every 5 s;
 *  - pick-worker: seed 003's pick_worker (warm workers with a free slot, else
 *    any with a free slot, by load ratio then speed score; else queue per
 *    capability and retry as workers free up), with its fan-out caps.
 * All see the same GPUs, with the same VRAM manager (the core's eviction
 * policy) and retries that avoid the GPU that failed. To be honest
 * baselines, none sends a job to a GPU that can never hold its model, and a
 * job no GPU can ever run is refused at once rather than left to block a
 * queue (shared-fifo and oracle live in policy_central.c). */
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "sim/sim.h"

/* A GPU the job may be sent to: alive, with its capability, able to hold its
 * model at all (VRAM less pinned models), and not one that failed it. */
static bool eligible(const struct sim *s, int gpu, const struct sim_job *j)
{
    if (!s->gpus[gpu].alive || !sim_gpu_has_cap(s, gpu, j->cap) ||
        !sim_gpu_fits(s, gpu, s->wl->caps[j->cap].model))
        return false;
    return !sim_excluded(s, j, gpu);
}

/* A job no GPU of the fleet can ever run ends refused now (reported as
 * rejected), instead of waiting forever at the head of some queue. */
static bool refuse_unrunnable(struct sim *s, int job)
{
    if (sim_job_runnable(s, &s->jobs[job]))
        return false;
    sim_job_refused(s, job);
    return true;
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
    if (refuse_unrunnable(s, job))
        return;
    int cap = s->jobs[job].cap, model = s->wl->caps[cap].model;
    if (gpu < 0) { /* no eligible GPU at all: retry ignoring the exclusion */
        for (int g = 0; g < s->ngpus; g++)
            if (s->gpus[g].alive && sim_gpu_has_cap(s, g, cap) && sim_gpu_fits(s, g, model)) {
                gpu = g;
                break;
            }
    }
    if (gpu < 0) {
        /* Nothing alive can run it: park it on its first capable GPU. */
        for (int g = 0; g < s->ngpus && gpu < 0; g++)
            if (sim_gpu_has_cap(s, g, cap) && sim_gpu_fits(s, g, model))
                gpu = g;
        if (gpu < 0)
            return; /* unreachable: refuse_unrunnable found one */
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

/* ---- affinity-ect (seed 002's full router) ------------------------------ */

/* What a GPU publishes every 5 s (seed 002: "loaded models, queue depth,
 * current VRAM usage, temperature"), with the router's completion-time
 * estimate of its backlog; between two publications the router adds what it
 * routed there itself. It never reads a running job's true end. */
struct ect_gpu {
    bool *loaded;       /* per model */
    int depth;          /* running + waiting */
    int64_t free_mb;
    double temp;
    double backlog_s;   /* estimated seconds of work left: running + waiting */
};

struct ect_state {
    struct ect_gpu *g;
    double *est;        /* per capability: rolling mean run at the reference size */
    double next_pub;    /* when the GPUs publish next */
};

#define ECT_HOT_C 80.0     /* seed 002: "a GPU at 80C gets a 2x weight penalty" */
#define ECT_HOT_PENALTY 2.0
#define ECT_PUBLISH_S 5.0  /* seed 002: state published every 5 seconds */
#define ECT_ALPHA 0.1      /* weight of a new sample in the rolling mean */

static double job_work(const struct wl_size *z)
{
    return (double)(z->width ? z->width : 1) * (z->height ? z->height : 1) *
           (z->steps ? z->steps : 1) * (z->frames ? z->frames : 1);
}

/* Estimated run time of job: its capability's rolling mean scaled to the
 * job's size (seed 002: "historical data by model and resolution"). */
static double ect_run_est(const struct sim *s, const struct ect_state *st, const struct sim_job *j)
{
    const struct wl_cap *c = &s->wl->caps[j->cap];
    return st->est[j->cap] * job_work(&j->size) / job_work(&c->ref);
}

static double ect_load_est(const struct sim *s, int model)
{
    const struct wl_model *m = &s->wl->models[model];
    return (m->load_lo_s + m->load_hi_s) / 2;
}

static void ect_publish(struct sim *s)
{
    struct ect_state *st = s->pstate;
    for (int gi = 0; gi < s->ngpus; gi++) {
        struct sim_gpu *g = &s->gpus[gi];
        struct ect_gpu *e = &st->g[gi];
        memset(e->loaded, 0, (size_t)s->wl->nmodels * sizeof(bool));
        for (int r = 0; r < g->nres; r++)
            e->loaded[g->res[r].model] = true;
        e->depth = g->busy + g->qlen;
        e->free_mb = g->free_mb;
        e->temp = sim_gpu_temp(s, gi);
        double work = 0;
        for (int k = 0; k < g->spec->concurrency; k++) {
            const struct sim_slot *sl = &g->slots[k];
            if (sl->phase != SLOT_LOADING && sl->phase != SLOT_RUNNING)
                continue;
            const struct sim_job *j = &s->jobs[sl->job];
            double total = ect_run_est(s, st, j) +
                           (sl->warm ? 0 : ect_load_est(s, s->wl->caps[j->cap].model));
            double left = total - (s->now - sl->started);
            work += left > 0 ? left : 0;
        }
        for (int j = g->head; j >= 0; j = s->jobs[j].next)
            work += ect_run_est(s, st, &s->jobs[j]);
        e->backlog_s = work / g->spec->concurrency;
    }
    st->next_pub = s->now + ECT_PUBLISH_S;
}

static void ect_init(struct sim *s)
{
    struct ect_state *st = xcalloc(1, sizeof(*st));
    st->g = xcalloc((size_t)s->ngpus, sizeof(*st->g));
    for (int g = 0; g < s->ngpus; g++)
        st->g[g].loaded = xcalloc((size_t)s->wl->nmodels, sizeof(bool));
    st->est = xmalloc((size_t)s->wl->ncaps * sizeof(double));
    for (int c = 0; c < s->wl->ncaps; c++)
        st->est[c] = s->wl->caps[c].run_s; /* the same priors gpuq is given */
    s->pstate = st;
    ect_publish(s);
}

static void ect_fini(struct sim *s)
{
    struct ect_state *st = s->pstate;
    for (int g = 0; g < s->ngpus; g++)
        free(st->g[g].loaded);
    free(st->g);
    free(st->est);
    free(st);
}

static void ect_tick(struct sim *s)
{
    struct ect_state *st = s->pstate;
    if (s->now >= st->next_pub - 1e-9)
        ect_publish(s);
}

static void ect_job_end(struct sim *s, int job, int gpu, bool ok, const char *cls, double load_s,
                        double run_s)
{
    (void)gpu;
    (void)cls;
    (void)load_s;
    struct ect_state *st = s->pstate;
    const struct sim_job *j = &s->jobs[job];
    if (!ok || run_s <= 0)
        return;
    double ref = run_s * job_work(&s->wl->caps[j->cap].ref) / job_work(&j->size);
    st->est[j->cap] += ECT_ALPHA * (ref - st->est[j->cap]);
}

/* Estimated completion of job on gpu from the published state: the wait
 * (x2 when hot), the load when the model is not there, the run. */
static double ect_score(const struct sim *s, const struct ect_state *st, int gpu,
                        const struct sim_job *j)
{
    const struct ect_gpu *e = &st->g[gpu];
    int model = s->wl->caps[j->cap].model;
    double wait = e->backlog_s * (e->temp >= ECT_HOT_C ? ECT_HOT_PENALTY : 1.0);
    return wait + (e->loaded[model] ? 0 : ect_load_est(s, model)) + ect_run_est(s, st, j);
}

static void ect_arrive(struct sim *s, int job)
{
    int64_t t0 = clock_mono_ns();
    struct ect_state *st = s->pstate;
    const struct sim_job *j = &s->jobs[job];
    int model = s->wl->caps[j->cap].model;
    int gpu = -1;
    double best = 0;
    /* Priority 1: model loaded and room in its queue — the soonest done. */
    for (int g = 0; g < s->ngpus; g++) {
        if (!eligible(s, g, j) || !st->g[g].loaded[model] ||
            st->g[g].depth >= s->wl->affinity_max_depth)
            continue;
        double sc = ect_score(s, st, g, j);
        if (gpu < 0 || sc < best) {
            gpu = g;
            best = sc;
        }
    }
    /* Priority 2: the most free VRAM, if the model fits without evicting. */
    if (gpu < 0) {
        int most = -1;
        for (int g = 0; g < s->ngpus; g++)
            if (eligible(s, g, j) && (most < 0 || st->g[g].free_mb > st->g[most].free_mb))
                most = g;
        if (most >= 0 && st->g[most].free_mb >= s->wl->models[model].vram_mb)
            gpu = most;
    }
    /* Priority 3: the soonest done (will evict). */
    if (gpu < 0)
        for (int g = 0; g < s->ngpus; g++) {
            if (!eligible(s, g, j))
                continue;
            double sc = ect_score(s, st, g, j);
            if (gpu < 0 || sc < best) {
                gpu = g;
                best = sc;
            }
        }
    /* The router knows what it sent: its own view moves until the next
     * publication. */
    if (gpu >= 0) {
        struct ect_gpu *e = &st->g[gpu];
        e->depth++;
        e->backlog_s += (ect_run_est(s, st, j) + (e->loaded[model] ? 0 : ect_load_est(s, model))) /
                        s->gpus[gpu].spec->concurrency;
        if (!e->loaded[model]) {
            e->loaded[model] = true;
            e->free_mb -= s->wl->models[model].vram_mb;
        }
    }
    sim_record_decision(s, (double)(clock_mono_ns() - t0) / 1e3);
    fifo_route(s, job, gpu);
}

const struct policy policy_affinity_ect = {
    .name = "affinity-ect",
    .init = ect_init,
    .fini = ect_fini,
    .arrive = ect_arrive,
    .gpu_free = fifo_free,
    .gpu_down = fifo_down,
    .tick = ect_tick,
    .job_end = ect_job_end,
};

/* ---- pick-worker (seed 003) --------------------------------------------- */

/* pick-worker's state is one sim_capq: per-capability FIFOs of jobs no
 * worker could take (Redis streams); tried marks the GPUs whose start failed
 * in this try. */

/* Seed 003's capability fan-out: a capability with a cap (scheduler.fanout,
 * "video jobs have all 7 when the platform is quiet and 3 when it is busy")
 * takes a GPU not already running it only while fewer than the cap run it,
 * once the platform is busy (at least as many jobs in flight or waiting as
 * GPUs alive). */
static bool pw_fanout_blocks(const struct sim *s, int gpu, int cap)
{
    const struct sim_capq *st = s->pstate;
    int limit = s->wl->fanout[cap];
    if (limit <= 0)
        return false;
    int using = 0, inflight = 0, alive = 0;
    bool here = false;
    for (int g = 0; g < s->ngpus; g++) {
        const struct sim_gpu *gp = &s->gpus[g];
        if (!gp->alive)
            continue;
        alive++;
        inflight += gp->busy;
        bool runs = false;
        for (int k = 0; k < gp->spec->concurrency; k++)
            if ((gp->slots[k].phase == SLOT_LOADING || gp->slots[k].phase == SLOT_RUNNING) &&
                s->jobs[gp->slots[k].job].cap == cap)
                runs = true;
        using += runs;
        if (g == gpu)
            here = runs;
    }
    if (here || using < limit)
        return false;
    return inflight + st->n >= alive;
}

static int pick_worker(struct sim *s, const struct sim_job *j)
{
    const struct sim_capq *st = s->pstate;
    int model = s->wl->caps[j->cap].model;
    int best = -1;
    double best_ratio = 0, best_score = 0;
    for (int pass = 0; pass < 2 && best < 0; pass++) {
        for (int g = 0; g < s->ngpus; g++) {
            if (st->tried[g] || !sim_gpu_has_slot(s, g) || !eligible(s, g, j))
                continue;
            if (pass == 0 && !sim_gpu_warm(s, g, model))
                continue;
            if (pw_fanout_blocks(s, g, j->cap))
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

/* Dispatches job to the worker pick_worker names. A worker that cannot take
 * it after all (its VRAM is held by running jobs) is passed over for the
 * next pick_worker names, as the dispatcher would on the worker's refusal. */
static bool pw_try(struct sim *s, int job)
{
    struct sim_capq *st = s->pstate;
    int64_t t0 = clock_mono_ns();
    bool ok = false;
    memset(st->tried, 0, (size_t)s->ngpus * sizeof(bool));
    for (;;) {
        int g = pick_worker(s, &s->jobs[job]);
        if (g < 0)
            break;
        if (sim_start(s, g, job)) {
            ok = true;
            break;
        }
        st->tried[g] = true;
    }
    sim_record_decision(s, (double)(clock_mono_ns() - t0) / 1e3);
    return ok;
}

static void pw_arrive(struct sim *s, int job)
{
    struct sim_capq *st = s->pstate;
    if (refuse_unrunnable(s, job))
        return;
    /* Behind others of its capability it waits its turn (a stream is FIFO). */
    if (st->head[s->jobs[job].cap] >= 0 || !pw_try(s, job))
        sim_capq_push(s, st, job);
}

static void pw_free(struct sim *s, int gpu)
{
    (void)gpu;
    struct sim_capq *st = s->pstate;
    int ncaps = s->wl->ncaps;
    /* Drain the streams, oldest head first, while workers take them; a
     * stream whose head no worker takes now waits, the others go on. */
    bool stuck[64];
    memset(stuck, 0, sizeof(stuck));
    for (;;) {
        int best = -1;
        for (int c = 0; c < ncaps; c++) {
            int h = st->head[c];
            if (h >= 0 && !stuck[c] && (best < 0 || s->jobs[h].submit_t < s->jobs[best].submit_t))
                best = h;
        }
        if (best < 0)
            break;
        int c = s->jobs[best].cap;
        if (!pw_try(s, best)) {
            stuck[c] = true;
            continue;
        }
        sim_capq_pop(s, st, c);
    }
}

const struct policy policy_pick_worker = {
    .name = "pick-worker",
    .init = sim_capq_attach,
    .fini = sim_capq_detach,
    .arrive = pw_arrive,
    .gpu_free = pw_free,
};
