/* fleet.c: the fleet view (fleet.h) — copied out of the registry, the job
 * table and the ring of recent decisions, each under its own lock in turn
 * (registry, then jobs, then the ring; never two at once). */
#include "head/fleet.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/clock.h"
#include "head/head.h"

/* One scope's rendered snapshot: text is the one of tick. */
struct fleet_scope {
    int64_t tenant_id;
    int64_t tick;
    struct fleet_text *text;   /* NULL: a free slot */
};

/* The ring: decisions[(next - 1 - i) % FLEET_RING] is the i-th newest, for
 * i < count. Guarded by lock.
 * The streams' shared snapshots, guarded by shared_lock (taken before the
 * registry's, the ring's and the job table's locks, never after): all is the
 * fleet collected for tick all_tick (valid when all_ok); scopes[] its
 * renderings; gen the last generation given to a text. */
struct fleet {
    pthread_mutex_t lock;
    struct fleet_decision ring[FLEET_RING];
    int next;
    int count;

    pthread_mutex_t shared_lock;
    struct fleet_view all;
    bool all_ok;
    int64_t all_tick;
    struct fleet_scope scopes[FLEET_SCOPES];
    uint64_t gen;
};

struct fleet *fleet_create(void)
{
    struct fleet *f = xcalloc(1, sizeof *f);
    pthread_mutex_init(&f->lock, NULL);
    pthread_mutex_init(&f->shared_lock, NULL);
    return f;
}

void fleet_destroy(struct fleet *f)
{
    if (!f)
        return;
    for (int i = 0; i < FLEET_SCOPES; i++)
        if (f->scopes[i].text)
            fleet_text_unref(f->scopes[i].text);
    if (f->all_ok)
        fleet_view_free(&f->all);
    pthread_mutex_destroy(&f->shared_lock);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

void fleet_note_placement(struct fleet *f, uint64_t job_id, const char *worker_id,
                          const struct sched_explain *why, int64_t wall_ms)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    struct fleet_decision *d = &f->ring[f->next];
    memset(d, 0, sizeof *d);
    d->job_id = job_id;
    d->tenant_id = -1;
    d->wall_ms = wall_ms;
    snprintf(d->worker, sizeof d->worker, "%s", worker_id);
    snprintf(d->reason, sizeof d->reason, "%s", why ? why->reason : "");
    if (why) {
        d->scored = why->ncandidates;
        if (why->nkept > 0) {
            d->score_s = why->cand[0].score_s;
            d->warm = why->cand[0].warm;
            /* cand[] is best first, but say what the winner scored. */
            const struct sched_candidate *won = sched_explain_candidate(why, worker_id);
            if (won) {
                d->score_s = won->score_s;
                d->warm = won->warm;
            }
        }
    }
    f->next = (f->next + 1) % FLEET_RING;
    if (f->count < FLEET_RING)
        f->count++;
    pthread_mutex_unlock(&f->lock);
}

static int worker_cmp(const void *a, const void *b)
{
    return strcmp(((const struct worker_rec *)a)->id, ((const struct worker_rec *)b)->id);
}

static const char *gpu_state(const struct worker_rec *w)
{
    if (w->breaker == BREAKER_OPEN)
        return "quarantined";
    if (w->breaker == BREAKER_HALF_OPEN)
        return "probing";
    if (w->state == WORKER_DRAINING || w->drain_requested)
        return "draining";
    if (w->state == WORKER_WARMING)
        return "warming";
    return "ready";
}

static void gpu_from_worker(struct fleet_gpu *g, const struct worker_rec *w, int64_t now_ns)
{
    memset(g, 0, sizeof *g);
    snprintf(g->id, sizeof g->id, "%s", w->id);
    snprintf(g->host, sizeof g->host, "%s", w->host);
    snprintf(g->gpu_name, sizeof g->gpu_name, "%s", w->gpu_name);
    snprintf(g->breaker_reason, sizeof g->breaker_reason, "%s", w->breaker_reason);
    g->gpu_index = w->gpu_index;
    g->state = gpu_state(w);
    g->tel = w->tel;
    g->concurrency = w->concurrency;
    g->inflight = w->inflight;
    for (int i = 0; i < w->nmodels && g->nmodels < FLEET_GPU_MODELS; i++) {
        if (!w->models[i].loaded)
            continue;
        struct fleet_model *m = &g->models[g->nmodels++];
        snprintf(m->name, sizeof m->name, "%s", w->models[i].name);
        m->vram_mb = w->models[i].vram_mb;
        m->pinned = w->models[i].pinned;
    }
    g->last_seen_ms_ago = (now_ns - w->last_seen_ns) / 1000000;
}

static int gpu_key_cmp(const void *key, const void *g)
{
    return strcmp(key, ((const struct fleet_gpu *)g)->id);
}

/* A running job shown on its GPU's card (as the head assigned it: no wait
 * for the agent's next heartbeat). gpus is sorted by id. */
static void attach_job(struct fleet_view *v, const struct job_rec *r)
{
    struct fleet_gpu *g = bsearch(r->lc.worker, v->gpus, (size_t)v->ngpus, sizeof *v->gpus,
                                  gpu_key_cmp);
    if (!g)
        return;
    g->nrunning++;
    if (g->njobs == FLEET_GPU_JOBS)
        return;
    struct fleet_job *fj = &g->jobs[g->njobs++];
    memset(fj, 0, sizeof *fj);
    fj->phase = r->phase;
    fj->progress = r->progress;
    fj->started_ms = r->lc.started_ms;
    fj->id = r->id;
    fj->tenant_id = r->tenant_id;
    snprintf(fj->capability, sizeof fj->capability, "%s", r->capability);
    snprintf(fj->model, sizeof fj->model, "%s", r->model);
}

static struct fleet_queue *queue_row(struct fleet_view *v, const char *capability,
                                     enum job_lane lane)
{
    for (int i = 0; i < v->nqueues; i++)
        if (v->queues[i].lane == lane && !strcmp(v->queues[i].capability, capability))
            return &v->queues[i];
    if (v->nqueues == FLEET_MAX_QUEUES) {
        v->queues_truncated = true;
        return NULL;
    }
    struct fleet_queue *q = &v->queues[v->nqueues++];
    snprintf(q->capability, sizeof q->capability, "%s", capability);
    q->lane = lane;
    return q;
}

static struct fleet_tenant *tenant_row(struct fleet_view *v, int64_t tenant_id)
{
    for (int i = 0; i < v->ntenants; i++)
        if (v->tenants[i].id == tenant_id)
            return &v->tenants[i];
    if (v->ntenants == FLEET_MAX_TENANTS)
        return NULL;
    struct fleet_tenant *t = &v->tenants[v->ntenants++];
    t->id = tenant_id;
    return t;
}

static int queue_cmp(const void *a, const void *b)
{
    const struct fleet_queue *x = a, *y = b;
    int c = strcmp(x->capability, y->capability);
    return c ? c : (int)x->lane - (int)y->lane;
}

/* The queued work, from the job table's counters (no pass over the jobs). */
static void collect_queued(struct head *h, struct fleet_view *v)
{
    long long states[JOB_NSTATES];
    struct jobs_queue *groups = NULL;
    int cap = 0;
    int n = jobs_queue_stats(h->jobs, states, &groups, &cap);
    for (int i = 0; i < n; i++) {
        const struct jobs_queue *g = &groups[i];
        if (g->depth <= 0)
            continue;
        double backlog_s = (double)g->backlog_ms / 1000.0;
        struct fleet_queue *q = queue_row(v, g->capability, g->lane);
        if (q) {
            q->queued += (int)g->depth;
            q->backlog_s += backlog_s;
        }
        v->queued += (int)g->depth;
        v->backlog_s += backlog_s;
        struct fleet_tenant *t = tenant_row(v, g->tenant_id);
        if (t) {
            t->queued += (int)g->depth;
            t->backlog_s += backlog_s;
        }
    }
    free(groups);
}

/* The running jobs (the timed list holds every one) and the decisions'
 * tenants, under the job table's lock. */
static void collect_running(struct head *h, struct fleet_view *v)
{
    jobs_lock(h->jobs);
    for (struct hjob *j = jobs_timed_first(h->jobs); j; j = jobs_timed_next(j)) {
        const struct job_rec *r = &j->rec;
        if (!j->committed || r->lc.state != LC_RUNNING)
            continue;
        struct fleet_queue *q = queue_row(v, r->capability, r->lane);
        if (q)
            q->running++;
        v->running++;
        struct fleet_tenant *t = tenant_row(v, r->tenant_id);
        if (t)
            t->running++;
        attach_job(v, r);
    }
    for (int i = 0; i < v->ndecisions; i++) {
        struct hjob *j = jobs_find(h->jobs, v->decisions[i].job_id);
        v->decisions[i].tenant_id = j ? j->rec.tenant_id : -1;
    }
    jobs_unlock(h->jobs);
}

/* Everything, unscoped: every decision and tenant. */
static void fleet_collect(struct head *h, struct fleet_view *v)
{
    memset(v, 0, sizeof *v);
    v->tenant_id = -1;
    v->wall_ms = clock_wall_ms();
    int64_t now_ns = clock_mono_ns();

    int n = registry_count(h->registry);
    struct worker_rec *ws = xcalloc((size_t)n + 1, sizeof *ws);
    n = registry_list(h->registry, ws, n);
    qsort(ws, (size_t)n, sizeof *ws, worker_cmp);
    v->gpus = xcalloc((size_t)n + 1, sizeof *v->gpus);
    v->ngpus = n;
    for (int i = 0; i < n; i++)
        gpu_from_worker(&v->gpus[i], &ws[i], now_ns);
    free(ws);

    if (h->fleet) { /* the ring (its own lock) */
        pthread_mutex_lock(&h->fleet->lock);
        for (int i = 0; i < h->fleet->count; i++) {
            int k = (h->fleet->next - 1 - i + 2 * FLEET_RING) % FLEET_RING;
            v->decisions[v->ndecisions++] = h->fleet->ring[k];
        }
        pthread_mutex_unlock(&h->fleet->lock);
    }
    collect_queued(h, v);
    collect_running(h, v);

    qsort(v->queues, (size_t)v->nqueues, sizeof v->queues[0], queue_cmp);
    for (int i = 0; i < v->ntenants; i++) {
        struct tenant_rec tr;
        if (tenants_by_id(h->tenants, v->tenants[i].id, &tr))
            snprintf(v->tenants[i].name, sizeof v->tenants[i].name, "%s", tr.name);
        else
            snprintf(v->tenants[i].name, sizeof v->tenants[i].name, "#%lld",
                     (long long)v->tenants[i].id);
    }
}

/* Narrows v to what tenant_id may see (< 0: nothing to narrow). */
static void narrow(struct fleet_view *v, int64_t tenant_id)
{
    v->tenant_id = tenant_id;
    if (tenant_id < 0)
        return;
    int kept = 0;
    for (int i = 0; i < v->ndecisions; i++)
        if (v->decisions[i].tenant_id == tenant_id)
            v->decisions[kept++] = v->decisions[i];
    v->ndecisions = kept;
    kept = 0;
    for (int i = 0; i < v->ntenants; i++)
        if (v->tenants[i].id == tenant_id)
            v->tenants[kept++] = v->tenants[i];
    v->ntenants = kept;
}

void head_fleet_view(struct head *h, int64_t tenant_id, struct fleet_view *v)
{
    fleet_collect(h, v);
    narrow(v, tenant_id);
}

void fleet_view_free(struct fleet_view *v)
{
    if (!v->gpus_shared)
        free(v->gpus);
    v->gpus = NULL;
    v->ngpus = 0;
}

void fleet_text_unref(struct fleet_text *t)
{
    if (t && atomic_fetch_sub(&t->refs, 1) == 1)
        free(t);
}

/* The slot of tenant_id: its own, else a free one, else the one unused the
 * longest (its text dropped). shared_lock held. */
static struct fleet_scope *scope_slot(struct fleet *f, int64_t tenant_id)
{
    struct fleet_scope *pick = NULL;
    for (int i = 0; i < FLEET_SCOPES; i++) {
        struct fleet_scope *sc = &f->scopes[i];
        if (sc->text && sc->tenant_id == tenant_id)
            return sc;
        if (!pick || (pick->text && (!sc->text || sc->tick < pick->tick)))
            pick = sc;
    }
    if (pick->text)
        fleet_text_unref(pick->text);
    memset(pick, 0, sizeof *pick);
    pick->tenant_id = tenant_id;
    return pick;
}

struct fleet_text *head_fleet_shared(struct head *h, int64_t tenant_id, int64_t tick,
                                     fleet_render_fn render)
{
    struct fleet *f = h->fleet;
    pthread_mutex_lock(&f->shared_lock);
    if (!f->all_ok || f->all_tick != tick) {
        if (f->all_ok)
            fleet_view_free(&f->all);
        fleet_collect(h, &f->all);
        f->all_ok = true;
        f->all_tick = tick;
    }
    struct fleet_scope *sc = scope_slot(f, tenant_id);
    if (!sc->text || sc->tick != tick) {
        struct fleet_view v = f->all; /* a shallow copy: the GPUs stay all's */
        v.gpus_shared = true;
        narrow(&v, tenant_id);
        struct buf b;
        buf_init(&b);
        render(&b, &v);
        if (!sc->text || sc->text->len != b.len || memcmp(sc->text->data, b.data, b.len)) {
            struct fleet_text *t = xmalloc(sizeof *t + b.len + 1);
            atomic_init(&t->refs, 1);
            t->gen = ++f->gen;
            t->len = b.len;
            memcpy(t->data, b.data ? b.data : "", b.len);
            t->data[b.len] = 0;
            fleet_text_unref(sc->text);
            sc->text = t;
        }
        sc->tick = tick;
        buf_fini(&b);
    }
    struct fleet_text *t = sc->text;
    atomic_fetch_add(&t->refs, 1);
    pthread_mutex_unlock(&f->shared_lock);
    return t;
}

