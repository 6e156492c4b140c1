/* policy_gpuq.c: the gpuq policy in the simulator — the production scheduler
 * core (src/core/sched.h) and per-GPU circuit breakers (src/core/breaker.h)
 * driven with simulated time; retries avoid every GPU in the job's failed set
 * (src/core/lifecycle.h). The simulator plays the head (job add/finish,
 * dispatch, quarantine, admission with core/admit.h) and the agents (take,
 * telemetry, VRAM); refused clients honour Retry-After. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "core/admit.h"
#include "core/breaker.h"
#include "core/preempt.h"
#include "sim/sim.h"

/* Invariant: br[g] is GPU g's breaker; fill_worker applies it to what the
 * scheduler sees. */
struct gpuq_state {
    struct sched *sched;
    struct breaker_policy bp;
    struct breaker *br;
    bool probe_started; /* a half-open GPU took its probe during this feed */
    struct admit *adm;  /* admission (NULL when the workload has none) */
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
    w->reserved = spec->reserved;
    w->reported_ns = ns(s->now); /* a simulated agent reports at once */
    struct gpuq_state *st = s->pstate;
    breaker_apply(&st->br[gpu], w);
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

/* A job started on g: on a half-open GPU it is the probe, and the GPU takes
 * nothing more until it ends. */
static void started(struct sim *s, int g)
{
    struct gpuq_state *st = s->pstate;
    if (st->br[g].state != BREAKER_HALF_OPEN)
        return;
    breaker_assigned(&st->br[g]);
    update(s, g);
    st->probe_started = true;
}

static const char *tenant_name(const struct sim *s, const struct sim_job *j)
{
    return j->tenant >= 0 ? s->wl->tenants[j->tenant].name : "";
}

/* A job left the queue (taken by its GPU): admission's backlog drops. */
static void left_queue(struct sim *s, int job)
{
    struct gpuq_state *st = s->pstate;
    struct sim_job *j = &s->jobs[job];
    if (!st->adm || !j->in_queue)
        return;
    j->in_queue = false;
    const struct wl_cap *c = &s->wl->caps[j->cap];
    admit_dequeued(st->adm, tenant_name(s, j), c->name, c->lane, j->cost_s, j->order_ns,
                   ns(s->now));
}

/* Hand each GPU with a free slot what the core placed there. */
static void feed(struct sim *s)
{
    struct gpuq_state *st = s->pstate;
    for (int g = 0; g < s->ngpus; g++) {
        struct sim_gpu *gp = &s->gpus[g];
        /* A job taken but blocked on VRAM held by running jobs starts first. */
        while (gp->head >= 0 && sim_gpu_has_slot(s, g) && sim_start(s, g, gp->head)) {
            sim_gpu_dequeue(s, g);
            started(s, g);
        }
        while (gp->head < 0 && sim_gpu_has_slot(s, g)) {
            uint64_t id;
            if (sched_take(st->sched, gp->spec->id, ns(s->now), &id) != 0)
                break;
            int j = job_index(id);
            left_queue(s, j);
            if (!sim_start(s, g, j)) {
                sim_gpu_enqueue(s, g, j);
                break;
            }
            started(s, g);
        }
    }
}

static void spec_of(const struct sim *s, int job, struct job_spec *spec);

/* Preemption (core/preempt.h), carried out as gpuqd does: the victim's
 * attempt ends preempted (no blame, budget untouched), its slot is freed and
 * it is queued again under its old order key; then dispatch runs again. */
static bool preempt(struct sim *s)
{
    struct gpuq_state *st = s->pstate;
    bool any = false;
    struct sched_preempt p;
    for (int n = 0; n < 16 && sched_preempt_pick(st->sched, ns(s->now), &p) == 1; n++) {
        int job = job_index(p.victim);
        if (sim_preempt(s, job, p.reason) < 0)
            continue;
        sched_job_finished(st->sched, p.victim, false, 0, 0, ns(s->now));
        struct job_spec spec;
        spec_of(s, job, &spec);
        sched_job_add(st->sched, &spec, ns(s->now));
        any = true;
    }
    return any;
}

static void kick(struct sim *s)
{
    struct gpuq_state *st = s->pstate;
    for (int round = 0; round < 3; round++) {
        int64_t t0 = clock_mono_ns();
        int n = sched_dispatch(st->sched, ns(s->now), NULL, NULL);
        int64_t dt = clock_mono_ns() - t0;
        if (n > 0) {
            double per = (double)dt / 1e3 / n;
            for (int i = 0; i < n; i++)
                sim_record_decision(s, per);
        }
        st->probe_started = false;
        feed(s);
        /* A probe start sends the jobs placed behind it back to the queue;
         * a preemption frees a slot for an interactive job. */
        if (!st->probe_started && !preempt(s))
            break;
    }
}

static void g_init(struct sim *s)
{
    struct gpuq_state *st = xcalloc(1, sizeof(*st));
    s->pstate = st;
    st->sched = sched_create(&s->wl->sched);
    st->bp = s->wl->breaker;
    st->br = xcalloc((size_t)s->ngpus, sizeof(*st->br));
    for (int g = 0; g < s->ngpus; g++)
        breaker_init(&st->br[g]);
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
        if (k->slo_s > 0)
            sched_cap_slo(st->sched, k->name, k->slo_s);
    }
    for (int g = 0; g < s->ngpus; g++)
        update(s, g);
    if (s->wl->admission) {
        st->adm = admit_create(&s->wl->admit);
        for (int t = 0; t < s->wl->ntenants; t++)
            admit_tenant_set(st->adm, &s->wl->tenants[t]);
        /* Nominal capacity per lane: interactive on every GPU that serves an
         * interactive capability, batch on the unreserved ones. */
        double cap[2] = {0, 0};
        for (int g = 0; g < s->ngpus; g++) {
            const struct wl_gpu *gs = &s->wl->gpus[g];
            bool inter = false, batch = false;
            for (int k = 0; k < gs->ncaps; k++) {
                inter = inter || s->wl->caps[gs->caps[k]].lane == SCHED_LANE_INTERACTIVE;
                batch = batch || s->wl->caps[gs->caps[k]].lane == SCHED_LANE_BATCH;
            }
            if (inter)
                cap[SCHED_LANE_INTERACTIVE] += gs->speed * gs->concurrency;
            if (batch && !gs->reserved)
                cap[SCHED_LANE_BATCH] += gs->speed * gs->concurrency;
        }
        admit_capacity(st->adm, SCHED_LANE_INTERACTIVE, cap[SCHED_LANE_INTERACTIVE], 0);
        admit_capacity(st->adm, SCHED_LANE_BATCH, cap[SCHED_LANE_BATCH], 0);
    }
}

static void g_fini(struct sim *s)
{
    struct gpuq_state *st = s->pstate;
    admit_destroy(st->adm);
    sched_destroy(st->sched);
    free(st->br);
    free(st);
}

/* Admission of a new (or retried) client's job: true when admitted; else
 * the client comes back after Retry-After, or the job is refused for good. */
static bool admission(struct sim *s, int job, const struct job_spec *spec)
{
    struct gpuq_state *st = s->pstate;
    struct sim_job *j = &s->jobs[job];
    const struct wl_cap *c = &s->wl->caps[j->cap];
    if (j->n429 == 0) {
        j->cost_s = admit_job_cost(sched_estimate_cost(st->sched, spec),
                                   sched_expected_load_s(st->sched, spec));
        j->tag_s = s->wl->stable_tags ? sched_nominal_cost(st->sched, spec) : 0;
    }
    struct admit_request req = {tenant_name(s, j), c->name, c->lane, j->cost_s, j->id,
                                j->tag_s};
    struct admit_verdict v;
    int64_t now = ns(s->now);
    admit_decide(st->adm, &req, now, &v);
    bool retry = j->n429 > 0;
    if (retry)
        s->adm.retries++;
    if (v.outcome == ADMIT_TOO_LARGE) {
        sim_job_refused(s, job);
        return false;
    }
    if (v.outcome == ADMIT_RETRY) {
        admit_refuse(st->adm, &req, &v, now);
        if (j->n429 == 0)
            s->adm.clients_refused++;
        j->n429++;
        s->adm.n429++;
        j->ra_s = v.retry_after_s;
        j->probe_room = false;
        j->probed = false;
        sim_push_job_event(s, s->now + 0.75 * v.retry_after_s, EV_PROBE, job);
        sim_push_job_event(s, s->now + v.retry_after_s, EV_RETRY, job);
        return false;
    }
    if (retry) {
        /* Honest: judged on the queue alone (admit_room), not on the booking
         * that admits this client anyway: room is there by 1.25 x the time
         * given (what is left over the bound drains within 0.25 x of it), and
         * was not yet there at 0.75 x (the probe). */
        double excess = 0;
        admit_room(st->adm, &req, now, &excess);
        if (excess <= 0.25 * j->ra_s && !(j->probed && j->probe_room))
            s->adm.in_window++;
        if (j->n429 == 1)
            s->adm.first_ok++;
    }
    admit_accept(st->adm, &req, now, &j->order_ns);
    j->admitted = true;
    j->in_queue = true;
    j->admit_t = s->now;
    return true;
}

/* Was there room for the refused client already at 0.75 x its Retry-After,
 * judged on the queue alone (its own booking and later ones left out)? */
static void g_probe(struct sim *s, int job)
{
    struct gpuq_state *st = s->pstate;
    struct sim_job *j = &s->jobs[job];
    if (!st->adm || j->admitted || j->rejected)
        return;
    const struct wl_cap *c = &s->wl->caps[j->cap];
    struct admit_request req = {tenant_name(s, j), c->name, c->lane, j->cost_s, j->id};
    double excess = 0;
    admit_room(st->adm, &req, ns(s->now), &excess);
    j->probed = true;
    j->probe_room = excess <= 0;
    s->adm.probes++;
    if (!j->probe_room)
        s->adm.early_refused++;
}

/* The scheduler's view of a simulated job. */
static void spec_of(const struct sim *s, int job, struct job_spec *spec)
{
    const struct sim_job *j = &s->jobs[job];
    const struct wl_cap *c = &s->wl->caps[j->cap];
    memset(spec, 0, sizeof(*spec));
    spec->id = j->id;
    snprintf(spec->capability, sizeof(spec->capability), "%s", c->name);
    snprintf(spec->model, sizeof(spec->model), "%s", s->wl->models[c->model].name);
    spec->lane = c->lane;
    spec->tier = SCHED_TIER_PAID;
    spec->width = j->size.width;
    spec->height = j->size.height;
    spec->steps = j->size.steps;
    spec->frames = j->size.frames;
    spec->submit_ns = ns(j->submit_t);
    spec->order_ns = j->order_ns;
    lc_exclusions(&j->lc, &spec->exclude, &spec->nexclude);
}

static void g_arrive(struct sim *s, int job)
{
    struct gpuq_state *st = s->pstate;
    const struct sim_job *j = &s->jobs[job];
    struct job_spec spec;
    spec_of(s, job, &spec);
    bool first = j->lc.attempt == 0 && j->eta_pred < 0 && !j->admitted;
    if (st->adm && !j->admitted && !admission(s, job, &spec))
        return;
    spec.order_ns = j->order_ns;
    sched_job_add(st->sched, &spec, ns(s->now));
    kick(s);
    /* The ETA a caller would see right after submitting (first arrival only). */
    if (first) {
        double start_s, finish_s;
        if (sched_job_eta(st->sched, j->id, ns(s->now), &start_s, &finish_s) == 0 &&
            finish_s >= 0)
            s->jobs[job].eta_pred = finish_s;
    }
}

static void g_job_end(struct sim *s, int job, int gpu, bool ok, const char *cls, double load_s,
                      double run_s)
{
    struct gpuq_state *st = s->pstate;
    sched_job_finished(st->sched, s->jobs[job].id, ok, ns(load_s), ns(run_s), ns(s->now));
    if (st->adm && ok)
        admit_ended(st->adm, tenant_name(s, &s->jobs[job]), s->wl->caps[s->jobs[job].cap].lane,
                    s->jobs[job].cost_s, ns(s->now));
    enum breaker_event ev = breaker_record(&st->bp, &st->br[gpu], ok, cls, ns(s->now));
    if (ev == BREAKER_EV_OPENED)
        sim_note_quarantine(s, gpu);
    if (ev != BREAKER_EV_NONE)
        update(s, gpu);
}

static void g_tick(struct sim *s)
{
    struct gpuq_state *st = s->pstate;
    bool any = false;
    for (int g = 0; g < s->ngpus; g++)
        if (breaker_tick(&st->bp, &st->br[g], ns(s->now)) != BREAKER_EV_NONE) {
            update(s, g);
            any = true;
        }
    /* The headroom rule depends on time (the measured interactive load
     * decays): batch work held back is looked at again every tick, as
     * gpuqd's dispatcher does on its own tick. */
    struct sched_stats ss;
    sched_stats(st->sched, &ss);
    if (st->adm) { /* batch ETAs at the measured rate, as gpuqd's tick does */
        bool measured;
        double r = admit_eta_rate(st->adm, SCHED_LANE_BATCH, ns(s->now), &measured);
        sched_lane_rate(st->sched, SCHED_LANE_BATCH, r, measured);
    }
    if (any || ss.queued > 0)
        kick(s);
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
    .tick = g_tick,
    .probe = g_probe,
};
