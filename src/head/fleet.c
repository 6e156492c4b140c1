/* fleet.c: the fleet view (fleet.h) — copied out of the registry, the job
 * table and the ring of recent decisions, each under its own lock in turn
 * (registry, then jobs, then the ring; never two at once). */
#include "head/fleet.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "head/head.h"

/* The ring: decisions[(next - 1 - i) % FLEET_RING] is the i-th newest, for
 * i < count. Guarded by lock. */
struct fleet {
    pthread_mutex_t lock;
    struct fleet_decision ring[FLEET_RING];
    int next;
    int count;
};

struct fleet *fleet_create(void)
{
    struct fleet *f = xcalloc(1, sizeof *f);
    pthread_mutex_init(&f->lock, NULL);
    return f;
}

void fleet_destroy(struct fleet *f)
{
    if (!f)
        return;
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
            for (int i = 0; i < why->nkept; i++)
                if (!strcmp(why->cand[i].worker_id, worker_id)) {
                    d->score_s = why->cand[i].score_s;
                    d->warm = why->cand[i].warm;
                    break;
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
    fj->visible = v->tenant_id < 0 || r->tenant_id == v->tenant_id;
    if (fj->visible) {
        fj->id = r->id;
        snprintf(fj->capability, sizeof fj->capability, "%s", r->capability);
        snprintf(fj->model, sizeof fj->model, "%s", r->model);
    }
}

static struct fleet_queue *queue_row(struct fleet_view *v, const struct job_rec *r)
{
    for (int i = 0; i < v->nqueues; i++)
        if (v->queues[i].lane == r->lane && !strcmp(v->queues[i].capability, r->capability))
            return &v->queues[i];
    if (v->nqueues == FLEET_MAX_QUEUES) {
        v->queues_truncated = true;
        return NULL;
    }
    struct fleet_queue *q = &v->queues[v->nqueues++];
    snprintf(q->capability, sizeof q->capability, "%s", r->capability);
    q->lane = r->lane;
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

static void tally_job(void *arg, const struct hjob *j)
{
    struct fleet_view *v = arg;
    const struct job_rec *r = &j->rec;
    bool queued = r->lc.state == LC_QUEUED, running = r->lc.state == LC_RUNNING;
    if (!queued && !running)
        return;
    struct fleet_queue *q = queue_row(v, r);
    if (q) {
        q->queued += queued;
        q->running += running;
        q->backlog_s += queued ? r->cost_s : 0;
    }
    if (running)
        attach_job(v, r);
    v->queued += queued;
    v->running += running;
    v->backlog_s += queued ? r->cost_s : 0;
    if (v->tenant_id >= 0 && r->tenant_id != v->tenant_id)
        return;
    struct fleet_tenant *t = tenant_row(v, r->tenant_id);
    if (t) {
        t->queued += queued;
        t->running += running;
        t->backlog_s += queued ? r->cost_s : 0;
    }
}

static int queue_cmp(const void *a, const void *b)
{
    const struct fleet_queue *x = a, *y = b;
    int c = strcmp(x->capability, y->capability);
    return c ? c : (int)x->lane - (int)y->lane;
}

void head_fleet_view(struct head *h, int64_t tenant_id, struct fleet_view *v)
{
    memset(v, 0, sizeof *v);
    v->tenant_id = tenant_id;
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

    /* The ring first (its own lock), then the job table for scope and usage. */
    if (h->fleet) {
        pthread_mutex_lock(&h->fleet->lock);
        for (int i = 0; i < h->fleet->count; i++) {
            int k = (h->fleet->next - 1 - i + 2 * FLEET_RING) % FLEET_RING;
            v->decisions[v->ndecisions++] = h->fleet->ring[k];
        }
        pthread_mutex_unlock(&h->fleet->lock);
    }

    jobs_lock(h->jobs);
    jobs_foreach(h->jobs, tally_job, v);
    int kept = 0;
    for (int i = 0; i < v->ndecisions; i++) {
        struct fleet_decision *d = &v->decisions[i];
        struct hjob *j = jobs_find(h->jobs, d->job_id);
        d->tenant_id = j ? j->rec.tenant_id : -1;
        if (tenant_id < 0 || d->tenant_id == tenant_id)
            v->decisions[kept++] = *d;
    }
    v->ndecisions = kept;
    jobs_unlock(h->jobs);
    free(ws);

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

void fleet_view_free(struct fleet_view *v)
{
    free(v->gpus);
    v->gpus = NULL;
    v->ngpus = 0;
}
