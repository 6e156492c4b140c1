/* policy_gpuq.c: the gpuq policy in the simulator — the production scheduler
 * core (src/core/sched.h) driven with simulated time. The simulator plays the
 * head (job add/finish, dispatch) and the agents (take, telemetry, VRAM). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "sim/sim.h"

struct gpuq_state {
    struct sched *sched;
};

static int64_t ns(double t)
{
    return (int64_t)(t * 1e9);
}

static void fill_worker(struct sim *s, int gpu, struct worker_info *w)
{
    const struct sim_gpu *g = &s->gpus[gpu];
    const struct wl_gpu *spec = g->spec;
    memset(w, 0, sizeof(*w));
    snprintf(w->id, sizeof(w->id), "%s", spec->id);
    snprintf(w->gpu_class, sizeof(w->gpu_class), "%s", spec->gpu_class);
    for (int k = 0; k < spec->ncaps; k++)
        snprintf(w->caps[w->ncaps++], SCHED_NAME_MAX, "%s", s->wl->caps[spec->caps[k]].name);
    w->concurrency = spec->concurrency;
    w->vram_total_mb = spec->vram_mb;
    w->vram_free_mb = g->free_mb;
    for (int i = 0; i < g->nres; i++) {
        struct loaded_model *lm = &w->loaded[w->nloaded++];
        const struct wl_model *m = &s->wl->models[g->res[i].model];
        snprintf(lm->name, sizeof(lm->name), "%s", m->name);
        lm->vram_mb = m->vram_mb;
        lm->pinned = g->res[i].pinned;
        lm->last_used_ns = ns(g->res[i].last_used);
    }
    w->temp_c = sim_gpu_temp(s, gpu);
    w->throttling = g->throttling;
    /* The measured speed score (operator-measured throughput x clocks now). */
    w->speed = sim_gpu_speed(s, gpu);
    w->healthy = g->alive;
}

static void update(struct sim *s, int gpu)
{
    struct gpuq_state *st = s->pstate;
    struct worker_info w;
    fill_worker(s, gpu, &w);
    sched_worker_update(st->sched, &w, ns(s->now));
}

static int job_index(uint64_t id)
{
    return (int)(id - 1);
}

/* Hand each GPU with a free slot what the core placed there. */
static void feed(struct sim *s)
{
    struct gpuq_state *st = s->pstate;
    for (int g = 0; g < s->ngpus; g++) {
        struct sim_gpu *gp = &s->gpus[g];
        /* A job taken but blocked on VRAM held by running jobs starts first. */
        while (gp->head >= 0 && sim_gpu_has_slot(s, g) && sim_start(s, g, gp->head))
            sim_gpu_dequeue(s, g);
        while (gp->head < 0 && sim_gpu_has_slot(s, g)) {
            uint64_t id;
            if (sched_take(st->sched, gp->spec->id, ns(s->now), &id) != 0)
                break;
            int j = job_index(id);
            if (!sim_start(s, g, j)) {
                sim_gpu_enqueue(s, g, j);
                break;
            }
        }
    }
}

static void kick(struct sim *s)
{
    struct gpuq_state *st = s->pstate;
    int64_t t0 = clock_mono_ns();
    int n = sched_dispatch(st->sched, ns(s->now), NULL, NULL);
    int64_t dt = clock_mono_ns() - t0;
    if (n > 0) {
        double per = (double)dt / 1e3 / n;
        for (int i = 0; i < n; i++)
            sim_record_decision(s, per);
    }
    feed(s);
}

static void g_init(struct sim *s)
{
    struct gpuq_state *st = xcalloc(1, sizeof(*st));
    s->pstate = st;
    st->sched = sched_create(&s->wl->sched);
    for (int i = 0; i < s->wl->nmodels; i++) {
        const struct wl_model *m = &s->wl->models[i];
        struct model_info mi;
        memset(&mi, 0, sizeof(mi));
        snprintf(mi.name, sizeof(mi.name), "%s", m->name);
        mi.vram_mb = m->vram_mb;
        mi.load_ms = (int64_t)((m->load_lo_s + m->load_hi_s) / 2 * 1000);
        mi.cls = m->cls;
        sched_model_set(st->sched, &mi);
    }
    for (int c = 0; c < s->wl->ncaps; c++) {
        const struct wl_cap *k = &s->wl->caps[c];
        if (s->wl->priors)
            sched_model_prior(st->sched, s->wl->models[k->model].name, k->run_s, k->ref.width,
                              k->ref.height, k->ref.steps, k->ref.frames);
        if (s->wl->fanout[c] > 0)
            sched_cap_limit(st->sched, k->name, s->wl->fanout[c]);
    }
    for (int g = 0; g < s->ngpus; g++)
        update(s, g);
}

static void g_fini(struct sim *s)
{
    struct gpuq_state *st = s->pstate;
    sched_destroy(st->sched);
    free(st);
}

static void g_arrive(struct sim *s, int job)
{
    struct gpuq_state *st = s->pstate;
    const struct sim_job *j = &s->jobs[job];
    const struct wl_cap *c = &s->wl->caps[j->cap];
    struct job_spec spec;
    memset(&spec, 0, sizeof(spec));
    spec.id = j->id;
    snprintf(spec.capability, sizeof(spec.capability), "%s", c->name);
    snprintf(spec.model, sizeof(spec.model), "%s", s->wl->models[c->model].name);
    spec.lane = c->lane;
    spec.tier = SCHED_TIER_PAID;
    spec.width = j->size.width;
    spec.height = j->size.height;
    spec.steps = j->size.steps;
    spec.frames = j->size.frames;
    spec.submit_ns = ns(j->submit_t);
    char excl[1][SCHED_NAME_MAX];
    if (j->last_gpu >= 0 && sim_excluded(s, j, j->last_gpu)) {
        snprintf(excl[0], sizeof(excl[0]), "%s", s->gpus[j->last_gpu].spec->id);
        spec.exclude = (const char(*)[SCHED_NAME_MAX])excl;
        spec.nexclude = 1;
    }
    sched_job_add(st->sched, &spec, ns(s->now));
    kick(s);
}

static void g_job_end(struct sim *s, int job, int gpu, bool ok, double load_s, double run_s)
{
    (void)gpu;
    struct gpuq_state *st = s->pstate;
    sched_job_finished(st->sched, s->jobs[job].id, ok, ns(load_s), ns(run_s), ns(s->now));
}

static void g_free(struct sim *s, int gpu)
{
    update(s, gpu);
    kick(s);
}

static void g_changed(struct sim *s, int gpu)
{
    update(s, gpu);
}

static void lost_noop(uint64_t id, void *arg)
{
    (void)id;
    (void)arg;
}

static void g_down(struct sim *s, int gpu)
{
    struct gpuq_state *st = s->pstate;
    sched_worker_remove(st->sched, s->gpus[gpu].spec->id, ns(s->now), lost_noop, NULL);
    /* Jobs it had taken but not started go back as new arrivals. */
    int j;
    while ((j = sim_gpu_dequeue(s, gpu)) >= 0)
        g_arrive(s, j);
}

static void g_up(struct sim *s, int gpu)
{
    update(s, gpu);
}

const struct policy policy_gpuq = {
    .name = "gpuq",
    .init = g_init,
    .fini = g_fini,
    .arrive = g_arrive,
    .gpu_free = g_free,
    .job_end = g_job_end,
    .gpu_down = g_down,
    .gpu_up = g_up,
    .gpu_changed = g_changed,
};
