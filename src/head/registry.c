/* registry.c: the worker registry (see registry.h). */
#include "head/registry.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"

struct registry {
    pthread_mutex_t lock;
    struct worker_rec **v;
    int n, cap;
};

struct registry *registry_create(void)
{
    struct registry *r = xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    return r;
}

void registry_destroy(struct registry *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n; i++)
        free(r->v[i]);
    free(r->v);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

static int find(struct registry *r, const char *id)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->v[i]->id, id))
            return i;
    return -1;
}

void registry_register(struct registry *r, const struct worker_rec *w, int64_t now_ns,
                       bool *restarted)
{
    *restarted = false;
    pthread_mutex_lock(&r->lock);
    int i = find(r, w->id);
    if (i < 0) {
        if (r->n == r->cap) {
            r->cap = r->cap ? r->cap * 2 : 16;
            r->v = xrealloc(r->v, (size_t)r->cap * sizeof *r->v);
        }
        i = r->n++;
        r->v[i] = xcalloc(1, sizeof *r->v[i]);
    } else {
        struct worker_rec *old = r->v[i];
        *restarted = w->incarnation[0] && strcmp(old->incarnation, w->incarnation) != 0;
        bool drain = old->drain_requested;
        int inflight = old->inflight;
        enum breaker_state br = old->breaker;
        int64_t trips = old->breaker_trips;
        char reason[sizeof old->breaker_reason];
        memcpy(reason, old->breaker_reason, sizeof reason);
        *old = *w;
        old->drain_requested = drain;
        old->inflight = inflight;
        old->breaker = br;
        old->breaker_trips = trips;
        memcpy(old->breaker_reason, reason, sizeof reason);
        r->v[i]->last_seen_ns = now_ns;
        pthread_mutex_unlock(&r->lock);
        return;
    }
    *r->v[i] = *w;
    r->v[i]->last_seen_ns = now_ns;
    pthread_mutex_unlock(&r->lock);
}

int registry_heartbeat(struct registry *r, const struct worker_rec *hb, int64_t now_ns,
                       bool *drain, struct reg_attempt *cancels, int *ncancels)
{
    pthread_mutex_lock(&r->lock);
    int i = find(r, hb->id);
    if (i < 0) {
        pthread_mutex_unlock(&r->lock);
        return GPUQ_ENOENT;
    }
    struct worker_rec *w = r->v[i];
    w->state = hb->state;
    w->tel = hb->tel;
    /* Residency: declared models are marked loaded or not; models the agent
     * reports that were not declared are added. */
    for (int m = 0; m < w->nmodels; m++)
        w->models[m].loaded = false;
    for (int k = 0; k < hb->nmodels; k++) {
        int m;
        for (m = 0; m < w->nmodels; m++)
            if (!strcmp(w->models[m].name, hb->models[k].name))
                break;
        if (m == w->nmodels) {
            if (w->nmodels == REG_MAX_MODELS)
                continue;
            w->models[w->nmodels++] = hb->models[k];
        }
        w->models[m].loaded = true;
        w->models[m].pinned = hb->models[k].pinned;
        if (hb->models[k].vram_mb > 0)
            w->models[m].vram_mb = hb->models[k].vram_mb;
        w->models[m].last_used_ms_ago = hb->models[k].last_used_ms_ago;
    }
    memcpy(w->running, hb->running, sizeof w->running);
    w->nrunning = hb->nrunning;
    w->cache_hits = hb->cache_hits;
    w->cache_misses = hb->cache_misses;
    w->last_seen_ns = now_ns;
    *drain = w->drain_requested;
    *ncancels = w->ncancels;
    memcpy(cancels, w->cancels, (size_t)w->ncancels * sizeof *cancels);
    w->ncancels = 0;
    pthread_mutex_unlock(&r->lock);
    return 0;
}

int registry_remove(struct registry *r, const char *id)
{
    pthread_mutex_lock(&r->lock);
    int i = find(r, id);
    if (i >= 0) {
        free(r->v[i]);
        r->v[i] = r->v[--r->n];
    }
    pthread_mutex_unlock(&r->lock);
    return i >= 0 ? 0 : GPUQ_ENOENT;
}

int registry_request_drain(struct registry *r, const char *id)
{
    pthread_mutex_lock(&r->lock);
    int i = find(r, id);
    if (i >= 0)
        r->v[i]->drain_requested = true;
    pthread_mutex_unlock(&r->lock);
    return i >= 0 ? 0 : GPUQ_ENOENT;
}

int registry_cancel_drain(struct registry *r, const char *id)
{
    pthread_mutex_lock(&r->lock);
    int i = find(r, id);
    if (i >= 0)
        r->v[i]->drain_requested = false;
    pthread_mutex_unlock(&r->lock);
    return i >= 0 ? 0 : GPUQ_ENOENT;
}

void registry_add_cancel(struct registry *r, const char *id, uint64_t job_id, int attempt)
{
    pthread_mutex_lock(&r->lock);
    int i = find(r, id);
    for (int k = 0; i >= 0 && k < r->v[i]->ncancels; k++)
        if (r->v[i]->cancels[k].job_id == job_id && r->v[i]->cancels[k].attempt == attempt)
            i = -1; /* already pending */
    if (i >= 0 && r->v[i]->ncancels < REG_MAX_CANCELS) {
        struct worker_rec *w = r->v[i];
        w->cancels[w->ncancels].job_id = job_id;
        w->cancels[w->ncancels].attempt = attempt;
        w->ncancels++;
    }
    pthread_mutex_unlock(&r->lock);
}

void registry_inflight(struct registry *r, const char *id, int delta)
{
    pthread_mutex_lock(&r->lock);
    int i = find(r, id);
    if (i >= 0) {
        r->v[i]->inflight += delta;
        if (r->v[i]->inflight < 0)
            r->v[i]->inflight = 0;
    }
    pthread_mutex_unlock(&r->lock);
}

void registry_set_breaker(struct registry *r, const char *id, const struct breaker *b)
{
    pthread_mutex_lock(&r->lock);
    int i = find(r, id);
    if (i >= 0) {
        r->v[i]->breaker = b->state;
        r->v[i]->breaker_trips = b->trips;
        snprintf(r->v[i]->breaker_reason, sizeof r->v[i]->breaker_reason, "%s", b->reason);
    }
    pthread_mutex_unlock(&r->lock);
}

int registry_get(struct registry *r, const char *id, struct worker_rec *out)
{
    pthread_mutex_lock(&r->lock);
    int i = find(r, id);
    if (i >= 0)
        *out = *r->v[i];
    pthread_mutex_unlock(&r->lock);
    return i >= 0 ? 0 : GPUQ_ENOENT;
}

bool registry_polled(struct registry *r, const char *id, int64_t now_ns)
{
    pthread_mutex_lock(&r->lock);
    int i = find(r, id);
    if (i >= 0)
        r->v[i]->last_poll_ns = now_ns;
    pthread_mutex_unlock(&r->lock);
    return i >= 0;
}

int registry_list(struct registry *r, struct worker_rec *out, int max)
{
    pthread_mutex_lock(&r->lock);
    int n = r->n < max ? r->n : max;
    for (int i = 0; i < n; i++)
        out[i] = *r->v[i];
    pthread_mutex_unlock(&r->lock);
    return n;
}

int registry_count(struct registry *r)
{
    pthread_mutex_lock(&r->lock);
    int n = r->n;
    pthread_mutex_unlock(&r->lock);
    return n;
}

int registry_count_ready(struct registry *r)
{
    pthread_mutex_lock(&r->lock);
    int n = 0;
    for (int i = 0; i < r->n; i++)
        n += r->v[i]->state == WORKER_READY && !r->v[i]->drain_requested;
    pthread_mutex_unlock(&r->lock);
    return n;
}

void registry_shift(struct registry *r, int64_t gap_ns)
{
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->n; i++)
        r->v[i]->last_seen_ns += gap_ns;
    pthread_mutex_unlock(&r->lock);
}

int registry_expire(struct registry *r, int64_t now_ns, int64_t ttl_ns,
                    char (*ids)[SCHED_NAME_MAX], int max)
{
    int n = 0;
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->n && n < max;) {
        if (now_ns - r->v[i]->last_seen_ns > ttl_ns) {
            snprintf(ids[n++], SCHED_NAME_MAX, "%s", r->v[i]->id);
            free(r->v[i]);
            r->v[i] = r->v[--r->n];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&r->lock);
    return n;
}

/* The scheduler's view of a worker. */
static void worker_info(const struct worker_rec *w, int64_t now_ns, struct worker_info *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->id, sizeof out->id, "%s", w->id);
    snprintf(out->gpu_class, sizeof out->gpu_class, "%.63s", w->gpu_name);
    out->ncaps = w->ncaps;
    memcpy(out->caps, w->caps, sizeof out->caps);
    out->concurrency = w->concurrency > 0 ? w->concurrency : 1;
    out->ahead = w->ahead;
    out->reported_ns = w->last_poll_ns > w->last_seen_ns ? w->last_poll_ns : w->last_seen_ns;
    out->vram_total_mb = w->tel.vram_total_mb;
    out->vram_free_mb = w->tel.vram_free_mb;
    for (int m = 0; m < w->nmodels && out->nloaded < SCHED_MAX_LOADED; m++) {
        if (!w->models[m].loaded)
            continue;
        struct loaded_model *lm = &out->loaded[out->nloaded++];
        snprintf(lm->name, sizeof lm->name, "%s", w->models[m].name);
        lm->vram_mb = w->models[m].vram_mb;
        lm->pinned = w->models[m].pinned;
        lm->last_used_ns = now_ns - w->models[m].last_used_ms_ago * NS_PER_MS;
    }
    out->temp_c = w->tel.temp_c;
    out->throttling = strstr(w->tel.throttle, "thermal") != NULL ||
                      strstr(w->tel.throttle, "power") != NULL;
    out->speed = 0;
    out->healthy = strcmp(w->tel.health, "failed") != 0;
    out->draining = w->state != WORKER_READY || w->drain_requested;
}

int registry_get_info(struct registry *r, const char *id, int64_t now_ns, struct worker_info *out)
{
    pthread_mutex_lock(&r->lock);
    int i = find(r, id);
    if (i >= 0)
        worker_info(r->v[i], now_ns, out);
    pthread_mutex_unlock(&r->lock);
    return i >= 0 ? 0 : GPUQ_ENOENT;
}

void registry_foreach(struct registry *r, void (*fn)(void *arg, const struct worker_rec *w),
                      void *arg)
{
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->n; i++)
        fn(arg, r->v[i]);
    pthread_mutex_unlock(&r->lock);
}
