/* sim.c: the discrete-event engine — arrival generation, simulated GPUs (slot
 * phases, model loads and evictions through the core's VRAM policy, thermal
 * model, faults), and the event loop that calls the policy's hooks. */
#include "sim/sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "core/vram.h"

/* ---- arrivals ----------------------------------------------------------- */

static double size_work(const struct wl_size *z)
{
    double px = (z->width && z->height) ? (double)z->width * z->height : 1.0;
    return px * (z->steps ? z->steps : 1) * (z->frames ? z->frames : 1);
}

static int pick_weighted(struct rng *r, const double *w, int n)
{
    double total = 0;
    for (int i = 0; i < n; i++)
        total += w[i];
    double u = rng_uniform(r) * total;
    for (int i = 0; i < n; i++) {
        if (u < w[i])
            return i;
        u -= w[i];
    }
    return n - 1;
}

struct arrival {
    double t;
    int stream;
};

static int arrival_cmp(const void *a, const void *b)
{
    const struct arrival *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->stream - y->stream;
}

/* The merged arrival times of every stream, in time order, with the stream
 * of each. Replaces *times; returns how many. */
static int stream_times(const struct workload *wl, struct rng *r, double **times, int **stream)
{
    int n = 0, cap = 1024;
    struct arrival *a = xmalloc((size_t)cap * sizeof(*a));
    for (int k = 0; k < wl->nstreams; k++) {
        const struct wl_stream *st = &wl->streams[k];
        double t = st->start_s;
        for (;;) {
            double mean = 1.0 / st->rate_per_s;
            t += st->process == WL_POISSON ? rng_exp(r, mean) : rng_gamma_mean_cv(r, mean, st->cv);
            if (t >= st->stop_s)
                break;
            if (n == cap) {
                cap *= 2;
                a = xrealloc(a, (size_t)cap * sizeof(*a));
            }
            a[n++] = (struct arrival){t, k};
        }
    }
    qsort(a, (size_t)n, sizeof(*a), arrival_cmp);
    free(*times);
    *times = xmalloc((size_t)(n ? n : 1) * sizeof(double));
    *stream = xmalloc((size_t)(n ? n : 1) * sizeof(int));
    for (int i = 0; i < n; i++) {
        (*times)[i] = a[i].t;
        (*stream)[i] = a[i].stream;
    }
    free(a);
    return n;
}

struct sim_job *sim_make_jobs(const struct workload *wl, uint64_t seed, int *njobs)
{
    struct rng r;
    rng_seed(&r, seed);
    int cap = 1024, n = 0;
    double *times = xmalloc((size_t)cap * sizeof(double));
    if (wl->process == WL_TRACE) {
        free(times);
        cap = wl->ntrace > 0 ? wl->ntrace : 1;
        times = xmalloc((size_t)cap * sizeof(double));
        for (int i = 0; i < wl->ntrace; i++)
            times[n++] = wl->trace[i];
    } else {
        double mmax = workload_diurnal_max(wl);
        double lmax = wl->rate_per_s * (mmax > 0 ? mmax : 1);
        double t = 0;
        for (;;) {
            double gap = wl->process == WL_POISSON ? rng_exp(&r, 1.0 / lmax)
                                                   : rng_gamma_mean_cv(&r, 1.0 / lmax,
                                                                       wl->arrival_cv);
            t += gap;
            if (t >= wl->duration_s)
                break;
            if (wl->ndiurnal && rng_uniform(&r) * mmax > workload_diurnal(wl, t))
                continue; /* thinning: the rate curve */
            if (n == cap) {
                cap *= 2;
                times = xrealloc(times, (size_t)cap * sizeof(double));
            }
            times[n++] = t;
        }
    }
    int *stream = NULL;
    if (wl->nstreams > 0)
        n = stream_times(wl, &r, &times, &stream);
    struct sim_job *jobs = xcalloc((size_t)(n ? n : 1), sizeof(*jobs));
    double wcap[64];
    for (int c = 0; c < wl->ncaps; c++)
        wcap[c] = wl->caps[c].weight;
    for (int i = 0; i < n; i++) {
        struct sim_job *j = &jobs[i];
        j->id = (uint64_t)i + 1;
        j->submit_t = times[i];
        j->admit_t = times[i];
        j->tenant = stream ? wl->streams[stream[i]].tenant : -1;
        j->cap = pick_weighted(&r, stream ? wl->streams[stream[i]].capw : wcap, wl->ncaps);
        const struct wl_cap *c = &wl->caps[j->cap];
        double wsz[WL_MAX_SIZES];
        for (int k = 0; k < c->nsizes; k++)
            wsz[k] = c->sizes[k].weight;
        j->size = c->sizes[pick_weighted(&r, wsz, c->nsizes)];
        double scale = size_work(&j->size) / size_work(&c->ref);
        double noise = c->dist_exp ? rng_exp(&r, 1.0) : rng_lognormal_mean_cv(&r, 1.0, c->cv);
        j->base_run_s = c->run_s * scale * noise;
        for (int a = 0; a < SIM_MAX_ATTEMPTS; a++) {
            j->fault_u[a] = rng_uniform(&r);
            j->fault_frac[a] = rng_uniform(&r);
        }
        double best = 0;
        for (int g = 0; g < wl->ngpus; g++)
            for (int k = 0; k < wl->gpus[g].ncaps; k++)
                if (wl->gpus[g].caps[k] == j->cap && wl->gpus[g].speed > best)
                    best = wl->gpus[g].speed;
        j->min_run_s = j->base_run_s / (best > 0 ? best : 1);
        lc_init(&j->lc, 0, 0);
        j->eta_pred = -1;
        j->next = -1;
    }
    free(times);
    free(stream);
    *njobs = n;
    return jobs;
}

/* ---- events ------------------------------------------------------------- */

static int ev_cmp(const void *a, const void *b)
{
    const struct sim_event *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->seq < y->seq ? -1 : (x->seq > y->seq ? 1 : 0);
}

static void push_ev(struct sim *s, double t, int type, int a, int b, uint32_t gen)
{
    struct sim_event e = {t, s->seq++, type, a, b, gen};
    heap_push(&s->events, &e);
}

/* ---- GPUs --------------------------------------------------------------- */

static void temp_advance(struct sim *s, struct sim_gpu *g)
{
    double dt = s->now - g->temp_t;
    if (dt <= 0)
        return;
    const struct wl_cooling *c = &g->spec->cooling;
    double util = (double)g->busy / g->spec->concurrency;
    double eq = c->ambient_c + c->rise_c * util;
    g->temp = eq + (g->temp - eq) * exp(-dt / c->tau_s);
    g->temp_t = s->now;
    g->throttling = g->temp >= s->wl->throttle_c;
}

double sim_gpu_temp(struct sim *s, int gpu)
{
    temp_advance(s, &s->gpus[gpu]);
    return s->gpus[gpu].temp;
}

double sim_gpu_speed(const struct sim *s, int gpu)
{
    const struct sim_gpu *g = &s->gpus[gpu];
    return g->spec->speed * (g->throttling ? s->wl->throttle_speed : 1.0);
}

bool sim_gpu_has_slot(const struct sim *s, int gpu)
{
    const struct sim_gpu *g = &s->gpus[gpu];
    if (!g->alive)
        return false;
    for (int i = 0; i < g->spec->concurrency; i++)
        if (g->slots[i].phase == SLOT_IDLE)
            return true;
    return false;
}

bool sim_gpu_has_cap(const struct sim *s, int gpu, int cap)
{
    const struct wl_gpu *g = s->gpus[gpu].spec;
    for (int k = 0; k < g->ncaps; k++)
        if (g->caps[k] == cap)
            return true;
    return false;
}

bool sim_excluded(const struct sim *s, const struct sim_job *j, int gpu)
{
    if (!lc_failed_on(&j->lc, s->gpus[gpu].spec->id))
        return false;
    for (int g = 0; g < s->ngpus; g++)
        if (g != gpu && s->gpus[g].alive && sim_gpu_has_cap(s, g, j->cap) &&
            !lc_failed_on(&j->lc, s->gpus[g].spec->id))
            return true;
    return false;
}

void sim_note_quarantine(struct sim *s, int gpu)
{
    s->gpus[gpu].quarantines++;
}

struct lc_now sim_lc_now(const struct sim *s)
{
    return (struct lc_now){(int64_t)(s->now * 1e9), (int64_t)(s->now * 1e3)};
}

static int res_find(const struct sim_gpu *g, int model)
{
    for (int i = 0; i < g->nres; i++)
        if (g->res[i].model == model)
            return i;
    return -1;
}

bool sim_gpu_warm(const struct sim *s, int gpu, int model)
{
    return res_find(&s->gpus[gpu], model) >= 0;
}

/* The GPU pins the model (fleet[].pinned): it stays pinned when it comes
 * back after a runtime restart cleared it. */
static bool gpu_pins(const struct sim_gpu *g, int model)
{
    for (int k = 0; k < g->spec->npreload; k++)
        if (g->spec->preload[k] == model && g->spec->pin[k])
            return true;
    return false;
}

bool sim_gpu_fits(const struct sim *s, int gpu, int model)
{
    const struct sim_gpu *g = &s->gpus[gpu];
    int64_t room = g->spec->vram_mb;
    for (int i = 0; i < g->nres; i++)
        if (g->res[i].pinned && g->res[i].model != model)
            room -= s->wl->models[g->res[i].model].vram_mb;
    return s->wl->models[model].vram_mb <= room;
}

bool sim_job_runnable(const struct sim *s, const struct sim_job *j)
{
    int model = s->wl->caps[j->cap].model;
    for (int g = 0; g < s->ngpus; g++)
        if (sim_gpu_has_cap(s, g, j->cap) && sim_gpu_fits(s, g, model))
            return true;
    return false;
}

static bool model_in_use(const struct sim *s, const struct sim_gpu *g, int model)
{
    for (int i = 0; i < g->spec->concurrency; i++) {
        const struct sim_slot *sl = &g->slots[i];
        if ((sl->phase == SLOT_LOADING || sl->phase == SLOT_RUNNING) &&
            s->wl->caps[s->jobs[sl->job].cap].model == model)
            return true;
    }
    return false;
}

static void changed(struct sim *s, int gpu)
{
    if (s->pol->gpu_changed)
        s->pol->gpu_changed(s, gpu);
}

void sim_gpu_enqueue(struct sim *s, int gpu, int job)
{
    struct sim_gpu *g = &s->gpus[gpu];
    s->jobs[job].next = -1;
    if (g->tail >= 0)
        s->jobs[g->tail].next = job;
    else
        g->head = job;
    g->tail = job;
    g->qlen++;
}

int sim_gpu_dequeue(struct sim *s, int gpu)
{
    struct sim_gpu *g = &s->gpus[gpu];
    int j = g->head;
    if (j < 0)
        return -1;
    g->head = s->jobs[j].next;
    if (g->head < 0)
        g->tail = -1;
    s->jobs[j].next = -1;
    g->qlen--;
    return j;
}

enum sim_fault { FAULT_NONE, FAULT_FAIL, FAULT_HANG, FAULT_QC };

/* A uniform draw in [0, 1) fixed by (job, attempt, gpu, what): the same for
 * every policy that starts that attempt there, whatever the event order. */
static double draw(uint64_t job, int attempt, int gpu, int what)
{
    uint64_t x = job * UINT64_C(0x9E3779B97F4A7C15) ^ ((uint64_t)(uint32_t)attempt << 40) ^
                 ((uint64_t)(uint32_t)gpu << 8) ^ (uint64_t)(uint32_t)what;
    x ^= x >> 30;
    x *= UINT64_C(0xBF58476D1CE4E5B9);
    x ^= x >> 27;
    x *= UINT64_C(0x94D049BB133111EB);
    x ^= x >> 31;
    return (double)(x >> 11) / 9007199254740992.0;
}

/* The fault of attempt a (0-based) of j on gpu: the workload-wide draws first
 * (oom, stuck, corrupt), then the GPU's own (fleet[].faults). */
static enum sim_fault job_fault(const struct sim *s, const struct sim_job *j, int a, int gpu,
                                char cls[16])
{
    double u = j->fault_u[a % SIM_MAX_ATTEMPTS];
    const struct workload *wl = s->wl;
    snprintf(cls, 16, "%s", "");
    if (u < wl->p_oom) {
        snprintf(cls, 16, "oom");
        return FAULT_FAIL;
    }
    if (u < wl->p_oom + wl->p_stuck)
        return FAULT_HANG;
    if (u < wl->p_oom + wl->p_stuck + wl->p_corrupt) {
        snprintf(cls, 16, "qc");
        return FAULT_QC;
    }
    const struct wl_gpu_faults *f = &s->gpus[gpu].spec->faults;
    double v = draw(j->id, a, gpu, 1);
    if (v < f->fail_share) {
        snprintf(cls, 16, "%s", f->fail_class);
        return FAULT_FAIL;
    }
    if (v < f->fail_share + f->hang_share)
        return FAULT_HANG;
    return FAULT_NONE;
}

/* Schedules an EV_LEASE for the attempt in (gpu, slot) at the moment the core
 * says its lease (or execution timeout) runs out. */
static void schedule_lease(struct sim *s, int gpu, int slot)
{
    struct sim_slot *sl = &s->gpus[gpu].slots[slot];
    int64_t due = lc_next_due_ns(&s->jobs[sl->job].lc, NULL);
    if (due > 0)
        push_ev(s, (double)due / 1e9, EV_LEASE, gpu, slot, sl->gen);
}

/* Schedules the end of the running phase: the full run, cut short by a
 * failure part-way, or never for a hung attempt: it stops renewing its lease
 * from here, and an EV_LEASE ends it exactly when the lease runs out. */
static void schedule_run(struct sim *s, int gpu, int slot)
{
    struct sim_slot *sl = &s->gpus[gpu].slots[slot];
    const struct sim_job *j = &s->jobs[sl->job];
    if (sl->fault == FAULT_HANG) {
        schedule_lease(s, gpu, slot);
        return;
    }
    double run = sl->run_s;
    if (sl->fault == FAULT_FAIL)
        run *= j->fault_frac[(j->lc.attempt - 1) % SIM_MAX_ATTEMPTS];
    sl->phase_end = s->now + run;
    push_ev(s, sl->phase_end, EV_PHASE_END, gpu, slot, sl->gen);
}

bool sim_start(struct sim *s, int gpu, int job)
{
    struct sim_gpu *g = &s->gpus[gpu];
    if (!g->alive)
        return false;
    int slot = -1;
    for (int i = 0; i < g->spec->concurrency; i++)
        if (g->slots[i].phase == SLOT_IDLE) {
            slot = i;
            break;
        }
    if (slot < 0)
        return false;
    struct sim_job *j = &s->jobs[job];
    int model = s->wl->caps[j->cap].model;
    const struct wl_model *m = &s->wl->models[model];
    int r = res_find(g, model);
    double load_s = 0;
    bool warm = r >= 0 || s->pol->all_warm;
    if (s->pol->all_warm) {
        s->m.hits++;
    } else if (!warm) {
        struct vram_model vm[SCHED_MAX_LOADED];
        for (int i = 0; i < g->nres; i++) {
            const struct wl_model *rm = &s->wl->models[g->res[i].model];
            vm[i] = (struct vram_model){rm->name, rm->vram_mb, rm->cls,
                                        g->res[i].pinned || model_in_use(s, g, g->res[i].model),
                                        (int64_t)(g->res[i].last_used * 1e9)};
        }
        int victims[SCHED_MAX_LOADED], nv = 0;
        if (vram_plan_evictions(vm, g->nres, g->free_mb, m->vram_mb, victims, &nv) != 0)
            return false;
        if (g->nres - nv >= SCHED_MAX_LOADED)
            return false;
        bool gone[SCHED_MAX_LOADED] = {false};
        for (int k = 0; k < nv; k++) {
            gone[victims[k]] = true;
            g->free_mb += s->wl->models[g->res[victims[k]].model].vram_mb;
        }
        int n = 0;
        for (int i = 0; i < g->nres; i++)
            if (!gone[i])
                g->res[n++] = g->res[i];
        g->nres = n;
        s->m.evictions += nv;
        g->res[g->nres++] =
            (struct sim_resident){model, s->now, m->pinned || gpu_pins(g, model)};
        g->free_mb -= m->vram_mb;
        load_s = m->load_lo_s + (m->load_hi_s - m->load_lo_s) * rng_uniform(&s->rng);
        s->m.cold_loads++;
        s->m.misses++;
    } else {
        g->res[r].last_used = s->now;
        s->m.hits++;
    }
    temp_advance(s, g);
    double speed = sim_gpu_speed(s, gpu) * g->spec->faults.speed_factor;
    const char *wid = g->spec->id;
    if (lc_failed_on(&j->lc, wid))
        s->retries_on_failed_gpu++;
    if (lc_assign(&s->lcp, &j->lc, wid, sim_lc_now(s)) != 0)
        abort(); /* a job starts only from QUEUED: a simulator bug */
    g->attempts++;
    if (g->quarantines == 0)
        g->before_quarantine++;
    g->busy++;
    struct sim_slot *sl = &g->slots[slot];
    sl->job = job;
    sl->gen++;
    sl->load_s = load_s;
    sl->run_s = j->base_run_s / speed;
    sl->started = s->now;
    sl->warm = warm;
    sl->fault = job_fault(s, j, j->lc.attempt - 1, gpu, sl->cls);
    if (j->lc.attempt == 1)
        j->start_t = s->now;
    if (load_s > 0) {
        sl->phase = SLOT_LOADING;
        sl->phase_end = s->now + load_s;
        push_ev(s, sl->phase_end, EV_PHASE_END, gpu, slot, sl->gen);
    } else {
        sl->phase = SLOT_RUNNING;
        schedule_run(s, gpu, slot);
    }
    changed(s, gpu);
    return true;
}

static void slot_release(struct sim *s, struct sim_gpu *g, struct sim_slot *sl)
{
    temp_advance(s, g);
    g->busy_time += s->now - sl->started;
    g->busy--;
    sl->phase = SLOT_IDLE;
    sl->job = -1;
}

int sim_preempt(struct sim *s, int job, const char *reason)
{
    for (int gpu = 0; gpu < s->ngpus; gpu++) {
        struct sim_gpu *g = &s->gpus[gpu];
        for (int k = 0; k < g->spec->concurrency; k++) {
            struct sim_slot *sl = &g->slots[k];
            if (sl->job != job || (sl->phase != SLOT_LOADING && sl->phase != SLOT_RUNNING))
                continue;
            struct sim_job *j = &s->jobs[job];
            if (lc_preempt(&j->lc, g->spec->id, j->lc.attempt, reason, sim_lc_now(s), NULL))
                return -1;
            s->preemptions++;
            s->preempted_gpu_s += s->now - sl->started;
            slot_release(s, g, sl);
            sl->gen++; /* its phase end will not come */
            changed(s, gpu);
            return gpu;
        }
    }
    return -1;
}

/* What the lifecycle decided after a failed attempt: retry through the
 * policy, or the job ends (dead-lettered, failed, expired). */
static void after_failure(struct sim *s, int job, enum lc_next next)
{
    struct sim_job *j = &s->jobs[job];
    if (next == LC_NEXT_RETRY) {
        s->pol->arrive(s, job);
        return;
    }
    if (next == LC_NEXT_DEAD)
        j->dead = true;
    else
        j->failed = true;
    j->finish_t = s->now;
    s->outstanding--;
}

/* The attempt in slot ended in failure (the lifecycle already knows): the
 * runtime restarts — its VRAM is cleared (models still used by other slots
 * stay), the slot is out for restart_s — and the policy hears of it. */
static void slot_failed(struct sim *s, int gpu, int slot, const char *cls)
{
    struct sim_gpu *g = &s->gpus[gpu];
    struct sim_slot *sl = &g->slots[slot];
    int job = sl->job;
    double load_s = sl->phase == SLOT_LOADING ? s->now - sl->started : sl->load_s;
    double run_s = sl->phase == SLOT_LOADING ? 0 : s->now - sl->started - sl->load_s;
    slot_release(s, g, sl);
    g->failures++;
    int n = 0;
    for (int i = 0; i < g->nres; i++) {
        if (model_in_use(s, g, g->res[i].model))
            g->res[n++] = g->res[i];
        else
            g->free_mb += s->wl->models[g->res[i].model].vram_mb;
    }
    g->nres = n;
    if (s->pol->job_end)
        s->pol->job_end(s, job, gpu, false, cls, load_s, run_s);
    sl->phase = SLOT_RESTART;
    sl->job = -1;
    sl->gen++;
    push_ev(s, s->now + s->wl->restart_s, EV_PHASE_END, gpu, slot, sl->gen);
    changed(s, gpu);
}

static void run_end(struct sim *s, int gpu, int slot)
{
    struct sim_gpu *g = &s->gpus[gpu];
    struct sim_slot *sl = &g->slots[slot];
    int job = sl->job;
    struct sim_job *j = &s->jobs[job];
    double load_s = sl->load_s, run_s = s->now - sl->started - sl->load_s;
    int model = s->wl->caps[j->cap].model;
    int r = res_find(g, model);
    if (r >= 0)
        g->res[r].last_used = s->now;
    if (sl->fault != FAULT_NONE) {
        char cls[16];
        snprintf(cls, sizeof(cls), "%s", sl->cls);
        enum lc_next next = LC_NEXT_NONE;
        lc_fail(&s->lcp, &j->lc, g->spec->id, j->lc.attempt, cls, "simulated fault",
                sim_lc_now(s), NULL, &next);
        slot_failed(s, gpu, slot, cls);
        after_failure(s, job, next);
        return;
    }
    slot_release(s, g, sl);
    lc_succeed(&j->lc, g->spec->id, j->lc.attempt, sim_lc_now(s), NULL);
    j->done = true;
    j->finish_t = s->now;
    j->service_s = load_s + run_s;
    s->outstanding--;
    if (s->pol->job_end)
        s->pol->job_end(s, job, gpu, true, "", load_s, run_s);
    changed(s, gpu);
    if (s->pol->gpu_free)
        s->pol->gpu_free(s, gpu);
}

/* Leases: running attempts that make progress renew theirs (the agent's
 * heartbeat); a hung one stops, and its EV_LEASE ends it when its lease runs
 * out. The check here is a backstop for anything else lc_check decides. */
static void check_leases(struct sim *s)
{
    struct lc_now now = sim_lc_now(s);
    for (int gpu = 0; gpu < s->ngpus; gpu++) {
        struct sim_gpu *g = &s->gpus[gpu];
        if (!g->alive)
            continue;
        for (int k = 0; k < g->spec->concurrency; k++) {
            struct sim_slot *sl = &g->slots[k];
            if (sl->phase != SLOT_LOADING && sl->phase != SLOT_RUNNING)
                continue;
            struct sim_job *j = &s->jobs[sl->job];
            if (sl->fault != FAULT_HANG || sl->phase == SLOT_LOADING)
                lc_renew(&s->lcp, &j->lc, g->spec->id, j->lc.attempt, now);
            enum lc_next next = LC_NEXT_NONE;
            lc_check(&s->lcp, &j->lc, now, NULL, &next);
            if (next == LC_NEXT_NONE)
                continue;
            int job = sl->job;
            slot_failed(s, gpu, k, "lease");
            after_failure(s, job, next);
        }
    }
}

/* EV_LEASE: ends the attempt if the core says its time is up; otherwise (it
 * was renewed since, or float rounding put us a hair early) waits for the
 * new due time. */
static void lease_due(struct sim *s, int gpu, int slot, uint32_t gen)
{
    struct sim_gpu *g = &s->gpus[gpu];
    struct sim_slot *sl = &g->slots[slot];
    if (!g->alive || sl->gen != gen || (sl->phase != SLOT_LOADING && sl->phase != SLOT_RUNNING))
        return;
    struct sim_job *j = &s->jobs[sl->job];
    int64_t due = lc_next_due_ns(&j->lc, NULL);
    if (due <= 0)
        return;
    struct lc_now now = sim_lc_now(s);
    if (now.mono_ns < due && due - now.mono_ns <= 1000)
        now.mono_ns = due; /* the event time was due / 1e9, rounded */
    enum lc_next next = LC_NEXT_NONE;
    lc_check(&s->lcp, &j->lc, now, NULL, &next);
    if (next == LC_NEXT_NONE) {
        schedule_lease(s, gpu, slot);
        return;
    }
    int job = sl->job;
    slot_failed(s, gpu, slot, "lease");
    after_failure(s, job, next);
}

static void phase_end(struct sim *s, int gpu, int slot, uint32_t gen)
{
    struct sim_gpu *g = &s->gpus[gpu];
    struct sim_slot *sl = &g->slots[slot];
    if (!g->alive || sl->gen != gen)
        return;
    if (sl->phase == SLOT_RESTART) {
        sl->phase = SLOT_IDLE;
        changed(s, gpu);
        if (s->pol->gpu_free)
            s->pol->gpu_free(s, gpu);
        return;
    }
    if (sl->phase == SLOT_LOADING) {
        sl->phase = SLOT_RUNNING;
        schedule_run(s, gpu, slot);
        return;
    }
    if (sl->phase == SLOT_RUNNING)
        run_end(s, gpu, slot);
}

static void gpu_down(struct sim *s, int gpu)
{
    struct sim_gpu *g = &s->gpus[gpu];
    if (!g->alive)
        return;
    int lost[64], nlost = 0;
    for (int i = 0; i < g->spec->concurrency; i++) {
        struct sim_slot *sl = &g->slots[i];
        if (sl->phase == SLOT_LOADING || sl->phase == SLOT_RUNNING) {
            if (nlost < 64)
                lost[nlost++] = sl->job;
            slot_release(s, g, sl);
        }
        sl->phase = SLOT_IDLE;
        sl->job = -1;
        sl->gen++;
    }
    g->alive = false;
    g->nres = 0;
    g->free_mb = g->spec->vram_mb;
    if (s->pol->gpu_down)
        s->pol->gpu_down(s, gpu);
    for (int k = 0; k < nlost; k++) {
        enum lc_next next = LC_NEXT_NONE;
        lc_lost(&s->lcp, &s->jobs[lost[k]].lc, "its GPU went away", sim_lc_now(s), NULL, &next);
        after_failure(s, lost[k], next);
    }
}

static void gpu_preload(struct sim *s, struct sim_gpu *g)
{
    g->nres = 0;
    g->free_mb = g->spec->vram_mb;
    for (int k = 0; k < g->spec->npreload; k++) {
        int m = g->spec->preload[k];
        g->res[g->nres++] =
            (struct sim_resident){m, s->now, s->wl->models[m].pinned || g->spec->pin[k]};
        g->free_mb -= s->wl->models[m].vram_mb;
    }
}

static void gpu_up(struct sim *s, int gpu)
{
    struct sim_gpu *g = &s->gpus[gpu];
    if (g->alive)
        return;
    g->alive = true;
    gpu_preload(s, g); /* warm-up before it announces itself (R25) */
    if (s->pol->gpu_up)
        s->pol->gpu_up(s, gpu);
    if (s->pol->gpu_free)
        s->pol->gpu_free(s, gpu);
}

void sim_record_decision(struct sim *s, double us)
{
    if (s->m.ndec == s->m.capdec) {
        s->m.capdec = s->m.capdec ? s->m.capdec * 2 : 4096;
        s->m.decision_us = xrealloc(s->m.decision_us, (size_t)s->m.capdec * sizeof(double));
    }
    s->m.decision_us[s->m.ndec++] = us;
}

void sim_push_job_event(struct sim *s, double t, int type, int job)
{
    push_ev(s, t, type, job, 0, 0);
}

void sim_job_refused(struct sim *s, int job)
{
    struct sim_job *j = &s->jobs[job];
    j->rejected = true;
    j->failed = true;
    j->finish_t = s->now;
    s->outstanding--;
    s->adm.rejected++;
}

#define TICK_S 5.0

void sim_run(struct sim *s, const struct workload *wl, const struct policy *pol,
             const struct sim_job *jobs, int njobs, uint64_t seed)
{
    memset(s, 0, sizeof(*s));
    s->wl = wl;
    s->pol = pol;
    rng_seed(&s->rng, seed ^ UINT64_C(0x5eed5eed));
    s->njobs = njobs;
    s->jobs = xmalloc((size_t)(njobs ? njobs : 1) * sizeof(*s->jobs));
    memcpy(s->jobs, jobs, (size_t)njobs * sizeof(*s->jobs));
    s->ngpus = wl->ngpus;
    s->gpus = xcalloc((size_t)s->ngpus, sizeof(*s->gpus));
    for (int i = 0; i < s->ngpus; i++) {
        struct sim_gpu *g = &s->gpus[i];
        g->spec = &wl->gpus[i];
        g->alive = true;
        g->slots = xcalloc((size_t)g->spec->concurrency, sizeof(*g->slots));
        for (int k = 0; k < g->spec->concurrency; k++)
            g->slots[k].job = -1;
        g->temp = g->spec->cooling.ambient_c;
        g->head = g->tail = -1;
        gpu_preload(s, g);
    }
    heap_init(&s->events, sizeof(struct sim_event), ev_cmp);
    for (int i = 0; i < njobs; i++)
        push_ev(s, s->jobs[i].submit_t, EV_ARRIVAL, i, 0, 0);
    for (int i = 0; i < wl->nlosses; i++) {
        push_ev(s, wl->losses[i].at_s, EV_GPU_DOWN, wl->losses[i].gpu, 0, 0);
        if (wl->losses[i].down_s < 1e17)
            push_ev(s, wl->losses[i].at_s + wl->losses[i].down_s, EV_GPU_UP, wl->losses[i].gpu,
                    0, 0);
    }
    push_ev(s, TICK_S, EV_TICK, 0, 0, 0);
    lc_policy_defaults(&s->lcp);
    s->lcp.max_attempts = wl->retries + 1;
    s->lcp.lease_ns = (int64_t)(wl->stuck_timeout_s * 1e9);
    s->outstanding = njobs;
    s->end_t = wl->duration_s * 20 + 36000;
    if (pol->init)
        pol->init(s);
    int arrivals_left = njobs;
    struct sim_event e;
    while (heap_pop(&s->events, &e)) {
        if (e.t > s->end_t)
            break;
        s->now = e.t;
        switch (e.type) {
        case EV_ARRIVAL:
            arrivals_left--;
            pol->arrive(s, e.a);
            break;
        case EV_PHASE_END:
            phase_end(s, e.a, e.b, e.gen);
            break;
        case EV_GPU_DOWN:
            gpu_down(s, e.a);
            break;
        case EV_GPU_UP:
            gpu_up(s, e.a);
            break;
        case EV_LEASE:
            lease_due(s, e.a, e.b, e.gen);
            break;
        case EV_RETRY:
            pol->arrive(s, e.a);
            break;
        case EV_PROBE:
            if (pol->probe)
                pol->probe(s, e.a);
            break;
        case EV_TICK:
            for (int g = 0; g < s->ngpus; g++) {
                bool was = s->gpus[g].throttling;
                double before = s->gpus[g].temp;
                temp_advance(s, &s->gpus[g]);
                if (was != s->gpus[g].throttling || fabs(before - s->gpus[g].temp) > 0.5)
                    changed(s, g);
            }
            check_leases(s);
            if (pol->tick)
                pol->tick(s);
            if (arrivals_left > 0 || s->outstanding > 0)
                push_ev(s, s->now + TICK_S, EV_TICK, 0, 0, 0);
            break;
        }
        if (arrivals_left == 0 && s->outstanding == 0)
            break;
    }
    for (int g = 0; g < s->ngpus; g++) {
        struct sim_gpu *gp = &s->gpus[g];
        for (int k = 0; k < gp->spec->concurrency; k++)
            if (gp->slots[k].phase == SLOT_LOADING || gp->slots[k].phase == SLOT_RUNNING)
                gp->busy_time += s->now - gp->slots[k].started;
    }
    if (pol->fini)
        pol->fini(s);
}

void sim_fini(struct sim *s)
{
    for (int i = 0; i < s->ngpus; i++)
        free(s->gpus[i].slots);
    free(s->gpus);
    free(s->jobs);
    free(s->m.decision_us);
    heap_fini(&s->events);
}

void sim_capq_init(const struct sim *s, struct sim_capq *q)
{
    q->head = xmalloc((size_t)s->wl->ncaps * sizeof(int));
    q->tail = xmalloc((size_t)s->wl->ncaps * sizeof(int));
    q->tried = xcalloc((size_t)s->ngpus, sizeof(bool));
    q->n = 0;
    for (int c = 0; c < s->wl->ncaps; c++)
        q->head[c] = q->tail[c] = -1;
}

void sim_capq_fini(struct sim_capq *q)
{
    free(q->head);
    free(q->tail);
    free(q->tried);
}

void sim_capq_attach(struct sim *s)
{
    struct sim_capq *q = xcalloc(1, sizeof(*q));
    sim_capq_init(s, q);
    s->pstate = q;
}

void sim_capq_detach(struct sim *s)
{
    sim_capq_fini(s->pstate);
    free(s->pstate);
    s->pstate = NULL;
}

void sim_capq_push(struct sim *s, struct sim_capq *q, int job)
{
    int c = s->jobs[job].cap;
    s->jobs[job].next = -1;
    if (q->tail[c] >= 0)
        s->jobs[q->tail[c]].next = job;
    else
        q->head[c] = job;
    q->tail[c] = job;
    q->n++;
}

void sim_capq_pop(struct sim *s, struct sim_capq *q, int cap)
{
    int job = q->head[cap];
    q->head[cap] = s->jobs[job].next;
    if (q->head[cap] < 0)
        q->tail[cap] = -1;
    s->jobs[job].next = -1;
    q->n--;
}
