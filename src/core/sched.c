/* sched.c: the scheduler behind sched.h — state (models, capabilities, workers,
 * jobs), placement by estimated completion time, late binding and
 * explanations. Scoring of one candidate lives in sched_score.c; this file
 * owns the state transitions.
 *
 * Cost model: a decision scores only the workers of the job's capability that
 * have room in their bounded queue ("open" workers, kept per capability), so a
 * saturated fleet of 1,000 GPUs costs a handful of comparisons per decision no
 * matter how many jobs wait. */
#include "core/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/err.h"
#include "core/sched_int.h"
#include "core/vram.h"

void sched_config_defaults(struct sched_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->queue_depth = 2;
    cfg->hot_temp_c = 80.0;
    cfg->hot_penalty = 2.0;
    cfg->move_margin_s = 0.25;
    cfg->evict_weight = 1.0;
    cfg->free_tier_every = 4;
    cfg->headroom_wait_s = 2.0;
    cfg->headroom_share = 0.15;
    cfg->headroom_window_s = 120;
    cfg->preempt_after_s = 0;
    cfg->assign_ahead_s = 0.25;
}

struct sched *sched_create(const struct sched_config *cfg)
{
    struct sched *s = xcalloc(1, sizeof(*s));
    if (cfg)
        s->cfg = *cfg;
    else
        sched_config_defaults(&s->cfg);
    if (s->cfg.queue_depth < 0)
        s->cfg.queue_depth = 0;
    if (!(s->cfg.hot_penalty >= 1.0))
        s->cfg.hot_penalty = 1.0;
    if (!(s->cfg.move_margin_s >= 0))
        s->cfg.move_margin_s = 0;
    if (!(s->cfg.evict_weight >= 0))
        s->cfg.evict_weight = 0;
    if (s->cfg.free_tier_every < 2)
        s->cfg.free_tier_every = 4;
    if (!(s->cfg.headroom_wait_s >= 0))
        s->cfg.headroom_wait_s = 0;
    if (!(s->cfg.headroom_share >= 0 && s->cfg.headroom_share < 1))
        s->cfg.headroom_share = 0;
    if (!(s->cfg.headroom_window_s > 0))
        s->cfg.headroom_window_s = 120;
    if (!(s->cfg.preempt_after_s >= 0))
        s->cfg.preempt_after_s = 0;
    if (!(s->cfg.assign_ahead_s >= 0) || !isfinite(s->cfg.assign_ahead_s))
        s->cfg.assign_ahead_s = 0;
    hashmap_init(&s->model_ix);
    hashmap_init(&s->cap_ix);
    hashmap_init(&s->class_ix);
    hashmap_init(&s->worker_ix);
    hashmap_init(&s->jobs);
    hashmap_init(&s->queue_ix);
    s->fleet_ver = 1;
    s->est = estimator_create();
    return s;
}

/* A job's memory: the struct, its exclusion list and its moved_off. */
static void sjob_free(struct sjob *j)
{
    free((void *)j->spec.exclude);
    free(j->moved_off);
    free(j);
}

void sched_destroy(struct sched *s)
{
    if (!s)
        return;
    size_t pos = 0;
    void *v;
    while (hashmap_next(&s->jobs, &pos, NULL, NULL, &v))
        sjob_free(v);
    for (int i = 0; i < s->nworkers; i++) {
        free(s->workers[i]->slots);
        free(s->workers[i]);
    }
    for (int i = 0; i < s->ncaps; i++) {
        free(s->caps[i].open);
        heap_fini(&s->caps[i].full);
    }
    free(s->queues);
    free(s->idle_bits);
    free(s->blocked);
    free(s->run_memo);
    free(s->run_memo_gen);
    free(s->news);
    hashmap_fini(&s->queue_ix);
    free(s->workers);
    free(s->caps);
    free(s->models);
    hashmap_fini(&s->model_ix);
    hashmap_fini(&s->cap_ix);
    hashmap_fini(&s->class_ix);
    hashmap_fini(&s->worker_ix);
    hashmap_fini(&s->jobs);
    estimator_destroy(s->est);
    free(s);
}

/* ---- interning ---------------------------------------------------------- */

static void copy_name(char *dst, const char *src)
{
    snprintf(dst, SCHED_NAME_MAX, "%s", src ? src : "");
}

int sched_model_index(struct sched *s, const char *name, int64_t vram_hint)
{
    void *v = hashmap_get_str(&s->model_ix, name);
    if (v)
        return (int)(intptr_t)v - 1;
    if (s->nmodels == s->capmodels) {
        s->capmodels = s->capmodels ? s->capmodels * 2 : 16;
        s->models = xrealloc(s->models, (size_t)s->capmodels * sizeof(*s->models));
    }
    struct smodel *m = &s->models[s->nmodels];
    memset(m, 0, sizeof(*m));
    copy_name(m->info.name, name);
    m->info.vram_mb = vram_hint > 0 ? vram_hint : 0;
    m->info.load_ms = name[0] ? SCHED_DEFAULT_LOAD_MS : 0;
    m->info.cls = MODEL_GENERATION;
    hashmap_put_str(&s->model_ix, m->info.name, (void *)(intptr_t)(s->nmodels + 1));
    return s->nmodels++;
}

static int full_cmp(const void *a, const void *b)
{
    const struct full_entry *x = a, *y = b;
    if (x->ready_ns != y->ready_ns)
        return x->ready_ns < y->ready_ns ? -1 : 1;
    return x->seq < y->seq ? -1 : (x->seq > y->seq ? 1 : 0);
}

static int cap_index(struct sched *s, const char *name, bool create)
{
    void *v = hashmap_get_str(&s->cap_ix, name);
    if (v)
        return (int)(intptr_t)v - 1;
    if (!create)
        return -1;
    if (s->ncaps == s->capcaps) {
        s->capcaps = s->capcaps ? s->capcaps * 2 : 16;
        s->caps = xrealloc(s->caps, (size_t)s->capcaps * sizeof(*s->caps));
    }
    struct scap *c = &s->caps[s->ncaps];
    memset(c, 0, sizeof(*c));
    copy_name(c->name, name);
    heap_init(&c->full, sizeof(struct full_entry), full_cmp);
    hashmap_put_str(&s->cap_ix, c->name, (void *)(intptr_t)(s->ncaps + 1));
    return s->ncaps++;
}

/* The queue of (cap, model), created on first use. */
static int queue_index(struct sched *s, int cap, int model)
{
    uint64_t key = ((uint64_t)(uint32_t)cap << 32) | (uint32_t)model;
    void *v = hashmap_get_u64(&s->queue_ix, key);
    if (v)
        return (int)(intptr_t)v - 1;
    if (s->nqueues == s->capqueues) {
        s->capqueues = s->capqueues ? s->capqueues * 2 : 16;
        s->queues = xrealloc(s->queues, (size_t)s->capqueues * sizeof(*s->queues));
    }
    struct squeue *q = &s->queues[s->nqueues];
    memset(q, 0, sizeof(*q));
    q->cap = cap;
    q->model = model;
    job_queue_init(&q->q, s->cfg.free_tier_every);
    hashmap_put_u64(&s->queue_ix, key, (void *)(intptr_t)(s->nqueues + 1));
    return s->nqueues++;
}

static int class_index(struct sched *s, const char *name)
{
    void *v = hashmap_get_str(&s->class_ix, name);
    if (v)
        return (int)(intptr_t)v - 1;
    int ix = s->nclasses++;
    hashmap_put_str(&s->class_ix, name, (void *)(intptr_t)(ix + 1));
    return ix;
}

int sched_model_set(struct sched *s, const struct model_info *m)
{
    if (!s || !m || !m->name[0] || m->vram_mb < 0 || m->load_ms < 0)
        return GPUQ_EINVAL;
    int ix = sched_model_index(s, m->name, m->vram_mb);
    s->models[ix].info = *m;
    s->models[ix].info.name[SCHED_NAME_MAX - 1] = '\0';
    s->models[ix].configured = true;
    s->fleet_ver++;
    for (int i = 0; i < s->nworkers; i++)
        s->workers[i]->dirty = true;
    return 0;
}

int sched_model_prior(struct sched *s, const char *model, double run_s, uint32_t width,
                      uint32_t height, uint32_t steps, uint32_t frames)
{
    if (!s || !model || !model[0] || !(run_s > 0) || !isfinite(run_s))
        return GPUQ_EINVAL;
    int ix = sched_model_index(s, model, 0);
    estimator_set_prior(s->est, ix, run_s, estimator_work(width, height, steps, frames));
    return 0;
}

int sched_cap_limit(struct sched *s, const char *cap, int max_gpus)
{
    if (!s || !cap || !cap[0] || max_gpus < 0)
        return GPUQ_EINVAL;
    int ci = cap_index(s, cap, true);
    s->caps[ci].max_gpus = max_gpus;
    return 0;
}

int sched_cap_slo(struct sched *s, const char *cap, double slo_s)
{
    if (!s || !cap || !cap[0] || !(slo_s >= 0) || slo_s > 1e9)
        return GPUQ_EINVAL;
    int ci = cap_index(s, cap, true);
    s->caps[ci].slo_s = slo_s;
    return 0;
}

/* ---- worker membership and open lists ---------------------------------- */

static bool worker_usable(const struct sworker *w)
{
    return w->info.healthy && !w->info.draining;
}

static bool worker_open(const struct sched *s, const struct sworker *w)
{
    if (!worker_usable(w))
        return false;
    /* queue_depth 0: late binding only — a job is bound to a GPU when a slot
     * is free for it there (it starts at once); until then it waits in the
     * shared queue, and the first GPU that frees takes the best waiting job. */
    if (s->cfg.queue_depth == 0)
        return w->nplaced + w->nrunning < w->info.concurrency;
    return w->nplaced < s->cfg.queue_depth;
}

static void full_rebuild(struct sched *s, int cap)
{
    struct scap *c = &s->caps[cap];
    c->full.len = 0;
    for (int i = 0; i < s->nworkers; i++) {
        struct sworker *w = s->workers[i];
        if (worker_usable(w) && !worker_open(s, w) && sched_worker_cap_slot(w, cap) >= 0) {
            struct full_entry e = {w->ready_ns, w->seq, w->ver, w};
            heap_push(&c->full, &e);
        }
    }
}

static void full_push(struct sched *s, struct sworker *w)
{
    w->ver++;
    sched_project(s, w, s->now);
    for (int k = 0; k < w->ncaps; k++) {
        struct scap *c = &s->caps[w->caps[k]];
        if (heap_len(&c->full) > (size_t)(4 * c->members + 64)) {
            full_rebuild(s, w->caps[k]);
            continue;
        }
        struct full_entry e = {w->ready_ns, w->seq, w->ver, w};
        heap_push(&c->full, &e);
    }
}

struct sworker *sched_full_top(struct sched *s, int cap)
{
    struct scap *c = &s->caps[cap];
    for (;;) {
        const struct full_entry *e = heap_peek(&c->full);
        if (!e)
            return NULL;
        if (e->ver == e->w->ver && worker_usable(e->w) && !worker_open(s, e->w))
            return e->w;
        heap_pop(&c->full, NULL);
    }
}

/* Keeps w's membership in each of its capabilities' open lists in step with
 * worker_open(); call after anything that may change it. */
void sched_worker_sync_open(struct sched *s, struct sworker *w)
{
    bool open = worker_open(s, w);
    if (!open && worker_usable(w) && w->alive)
        full_push(s, w);
    else
        w->ver++;
    for (int k = 0; k < w->ncaps; k++) {
        struct scap *c = &s->caps[w->caps[k]];
        if (open && w->open_pos[k] < 0) {
            if (c->nopen == c->capopen) {
                c->capopen = c->capopen ? c->capopen * 2 : 16;
                c->open = xrealloc(c->open, (size_t)c->capopen * sizeof(*c->open));
            }
            w->open_pos[k] = c->nopen;
            c->open[c->nopen++] = w;
        } else if (!open && w->open_pos[k] >= 0) {
            int p = w->open_pos[k];
            struct sworker *last = c->open[--c->nopen];
            c->open[p] = last;
            for (int q = 0; q < last->ncaps; q++)
                if (last->caps[q] == w->caps[k])
                    last->open_pos[q] = p;
            w->open_pos[k] = -1;
        }
    }
}

static void worker_leave_caps(struct sched *s, struct sworker *w)
{
    bool saved_h = w->info.healthy;
    w->info.healthy = false; /* forces it out of every open list */
    sched_worker_sync_open(s, w);
    w->info.healthy = saved_h;
    for (int k = 0; k < w->ncaps; k++) {
        struct scap *c = &s->caps[w->caps[k]];
        c->members--;
        if (worker_usable(w))
            c->usable--;
    }
}

static void worker_join_caps(struct sched *s, struct sworker *w)
{
    for (int k = 0; k < w->ncaps; k++) {
        struct scap *c = &s->caps[w->caps[k]];
        c->members++;
        if (worker_usable(w))
            c->usable++;
        w->open_pos[k] = -1;
    }
    sched_worker_sync_open(s, w);
}

int sched_worker_cap_slot(const struct sworker *w, int cap)
{
    for (int k = 0; k < w->ncaps; k++)
        if (w->caps[k] == cap)
            return k;
    return -1;
}

/* Counts of jobs per capability on w, and GPUs occupied per capability (R14). */
static void worker_cap_jobs(struct sched *s, struct sworker *w, int cap, int delta)
{
    int k = sched_worker_cap_slot(w, cap);
    if (k < 0)
        return;
    int before = w->cap_jobs[k];
    w->cap_jobs[k] += delta;
    if (before == 0 && w->cap_jobs[k] > 0)
        s->caps[cap].occupied++;
    else if (before > 0 && w->cap_jobs[k] == 0)
        s->caps[cap].occupied--;
}

static struct sworker *worker_find(const struct sched *s, const char *id)
{
    return hashmap_get_str(&s->worker_ix, id);
}

/* ---- job list helpers --------------------------------------------------- */

/* idle_mark: w may now have a free slot and nothing placed — a candidate for
 * late binding (sched.idle_bits). Called wherever that can start to hold: a
 * placed or running job leaves w, or w reports (concurrency, health). */
static void idle_mark(struct sched *s, const struct sworker *w)
{
    int word = w->ix / 64;
    if (word >= s->idle_words) {
        int n = word + 1 > 2 * s->idle_words ? word + 1 : 2 * s->idle_words;
        s->idle_bits = xrealloc(s->idle_bits, (size_t)n * sizeof(*s->idle_bits));
        memset(s->idle_bits + s->idle_words, 0,
               (size_t)(n - s->idle_words) * sizeof(*s->idle_bits));
        s->idle_words = n;
    }
    s->idle_bits[word] |= (uint64_t)1 << (w->ix % 64);
}

/* idle_next: the first worker index >= i marked in idle_bits, or -1. Read
 * afresh each call: a move in late binding may mark a later worker. */
static int idle_next(const struct sched *s, int i)
{
    int word = i / 64;
    if (i < 0 || word >= s->idle_words)
        return -1;
    uint64_t bits = s->idle_bits[word] & (~(uint64_t)0 << (i % 64));
    while (!bits) {
        if (++word >= s->idle_words)
            return -1;
        bits = s->idle_bits[word];
    }
    return word * 64 + __builtin_ctzll(bits);
}

static void placed_unlink(struct sched *s, struct sjob *j)
{
    struct sworker *w = j->w;
    if (j->prev)
        j->prev->next = j->next;
    else
        w->placed_head = j->next;
    if (j->next)
        j->next->prev = j->prev;
    else
        w->placed_tail = j->prev;
    j->prev = j->next = NULL;
    w->nplaced--;
    s->nplaced--;
    if (j->on_excluded) {
        j->on_excluded = false;
        s->nexcl_placed--;
    }
    worker_cap_jobs(s, w, j->cap, -1);
    w->dirty = true;
    j->w = NULL;
    idle_mark(s, w);
    sched_worker_sync_open(s, w);
}

/* Appends j to w's placed jobs — an interactive job (or an urgent batch
 * one, rule 13) ahead of every other batch job placed there (none of them
 * has started), so it never waits behind one, bar one w already holds
 * ahead (it starts first, whatever is placed). */
static void placed_append(struct sched *s, struct sworker *w, struct sjob *j)
{
    j->w = w;
    j->state = SJOB_PLACED;
    struct sjob *after = w->placed_tail;
    if (j->spec.lane == SCHED_LANE_INTERACTIVE || sched_batch_urgent(s, j, s->now))
        while (after && !after->ahead && after->spec.lane == SCHED_LANE_BATCH &&
               !sched_batch_urgent(s, after, s->now))
            after = after->prev;
    j->prev = after;
    j->next = after ? after->next : w->placed_head;
    if (j->next)
        j->next->prev = j;
    else
        w->placed_tail = j;
    if (after)
        after->next = j;
    else
        w->placed_head = j;
    w->nplaced++;
    s->nplaced++;
    if (j->spec.nexclude > 0 && sched_job_excludes(j, w->info.id)) {
        j->on_excluded = true;
        s->nexcl_placed++;
    }
    worker_cap_jobs(s, w, j->cap, +1);
    w->dirty = true;
    sched_worker_sync_open(s, w);
}

static void running_unlink(struct sched *s, struct sjob *j)
{
    struct sworker *w = j->w;
    if (j->prev)
        j->prev->next = j->next;
    else
        w->run_head = j->next;
    if (j->next)
        j->next->prev = j->prev;
    j->prev = j->next = NULL;
    w->nrunning--;
    s->nrunning--;
    worker_cap_jobs(s, w, j->cap, -1);
    w->dirty = true;
    j->w = NULL;
    idle_mark(s, w);
}

static void queue_job(struct sched *s, struct sjob *j, bool front)
{
    struct squeue *q = &s->queues[j->qix];
    j->state = SJOB_QUEUED;
    j->w = NULL;
    if (front)
        job_queue_push_front(&q->q, j);
    else
        job_queue_push(&q->q, j);
    q->cost_s += j->cost_s;
    s->caps[j->cap].nqueued++;
    if (j->spec.lane == SCHED_LANE_INTERACTIVE)
        s->caps[j->cap].nqueued_interactive++;
    s->nqueued++;
}

/* Takes a queued job out of its queue (served, or cancelled). */
static void unqueue_job(struct sched *s, struct sjob *j, bool served)
{
    struct squeue *q = &s->queues[j->qix];
    if (served)
        job_queue_served(&q->q, j);
    else
        job_queue_remove(&q->q, j);
    q->cost_s -= j->cost_s;
    if (q->q.count == 0)
        q->cost_s = 0; /* no drift from rounding */
    s->caps[j->cap].nqueued--;
    if (j->spec.lane == SCHED_LANE_INTERACTIVE)
        s->caps[j->cap].nqueued_interactive--;
    s->nqueued--;
}

static void held_news(struct sched *s, const struct sjob *j, enum sched_held_what what)
{
    if (s->nnews == s->capnews) {
        s->capnews = s->capnews ? 2 * s->capnews : 8;
        s->news = xrealloc(s->news, (size_t)s->capnews * sizeof(*s->news));
    }
    s->news[s->nnews].job_id = j->spec.id;
    s->news[s->nnews++].what = what;
}

/* Sends every placed (not started) job of w back to its queue, oldest first,
 * but one w holds ahead: w has it (see take_back_held; when w leaves,
 * sched_worker_remove reports it lost, as it does a running one). */
static void requeue_placed(struct sched *s, struct sworker *w)
{
    while (w->placed_tail && !w->placed_tail->ahead) {
        struct sjob *j = w->placed_tail;
        placed_unlink(s, j);
        queue_job(s, j, true);
    }
}

/* w's GPU failed (or is quarantined): a job it holds ahead has not started
 * and leaves it, like one only placed there (R20), reported once for the
 * caller to take back (sched_held_news). A draining w keeps it: a drain
 * finishes what the worker holds. */
static void take_back_held(struct sched *s, struct sworker *w)
{
    struct sjob *held = w->placed_head;
    if (held && held->ahead && !held->taking_back) {
        held->taking_back = true;
        held_news(s, held, SCHED_HELD_TAKE_BACK);
    }
}

static void start_held(struct sched *s, struct sworker *w, int64_t now);

/* A retry is placed on a worker that failed it only while no other worker
 * could take it (sched_exclusion_binds was false). When the fleet changes so
 * that one could — a worker registers, recovers from quarantine, stops
 * draining, gains room — such jobs go back to the front of their queue, and
 * dispatch places them on a worker they do not exclude, waiting for it if it
 * is busy rather than run again where they failed (sched_score_one filters the
 * excluded ones). Looks only when such jobs exist and the fleet changed since
 * the last look (nothing else can make an exclusion bind): O(1) otherwise. */
static void release_excluded(struct sched *s)
{
    if (s->nexcl_placed == 0 || s->excl_checked_ver == s->fleet_ver)
        return;
    s->excl_checked_ver = s->fleet_ver;
    for (int i = 0; i < s->nworkers && s->nexcl_placed > 0; i++) {
        struct sworker *w = s->workers[i];
        /* Back to front, each pushed to the queue's front: order kept. */
        for (struct sjob *j = w->placed_tail, *prev; j; j = prev) {
            prev = j->prev;
            if (!j->on_excluded || j->ahead || !sched_exclusion_binds(s, j))
                continue;
            free(j->moved_off);
            j->moved_off = xstrdup(w->info.id);
            placed_unlink(s, j);
            queue_job(s, j, true);
        }
    }
}

static void forget_job(struct sched *s, struct sjob *j)
{
    /* A held job that ended before what became of it was collected: its
     * news (a take-back, then its start, may both wait) is about an attempt
     * that is over, and the id may come back for the next one. */
    int kept = 0;
    for (int i = 0; i < s->nnews; i++)
        if (s->news[i].job_id != j->spec.id)
            s->news[kept++] = s->news[i];
    s->nnews = kept;
    s->backlog_s -= (j->state != SJOB_RUNNING) ? j->cost_s : 0;
    hashmap_del_u64(&s->jobs, j->spec.id);
    sjob_free(j);
}

/* ---- workers ------------------------------------------------------------ */

static void worker_map_loaded(struct sched *s, struct sworker *w)
{
    for (int i = 0; i < w->info.nloaded; i++)
        w->loaded_model[i] = sched_model_index(s, w->info.loaded[i].name,
                                               w->info.loaded[i].vram_mb);
}

static void see_now(struct sched *s, int64_t now)
{
    if (now > s->now)
        s->now = now;
}

static int64_t pinned_mb(const struct worker_info *w)
{
    int64_t mb = 0;
    for (int i = 0; i < w->nloaded && i < SCHED_MAX_LOADED; i++)
        if (w->loaded[i].pinned)
            mb += w->loaded[i].vram_mb;
    return mb;
}

/* Whether a refresh changes which (capability, model) pairs the worker could
 * serve: its capabilities, its VRAM, what is pinned there. */
static bool serving_shape_differs(const struct worker_info *a, const struct worker_info *b)
{
    if (a->ncaps != b->ncaps || a->vram_total_mb != b->vram_total_mb ||
        pinned_mb(a) != pinned_mb(b))
        return true;
    for (int k = 0; k < a->ncaps; k++)
        if (strncmp(a->caps[k], b->caps[k], SCHED_NAME_MAX) != 0)
            return true;
    return false;
}

int sched_worker_update(struct sched *s, const struct worker_info *wi, int64_t now)
{
    if (s)
        see_now(s, now);
    if (!s || !wi || !wi->id[0] || wi->ncaps < 0 || wi->ncaps > SCHED_MAX_CAPS ||
        wi->nloaded < 0 || wi->nloaded > SCHED_MAX_LOADED || wi->concurrency < 1 ||
        wi->vram_total_mb < 0)
        return GPUQ_EINVAL;
    struct sworker *w = worker_find(s, wi->id);
    bool fresh = !w;
    if (fresh) {
        w = xcalloc(1, sizeof(*w));
        w->seq = s->next_worker_seq++;
        w->learned_speed = 1.0;
        w->alive = true;
        if (s->nworkers == s->capworkers) {
            s->capworkers = s->capworkers ? s->capworkers * 2 : 16;
            s->workers = xrealloc(s->workers, (size_t)s->capworkers * sizeof(*s->workers));
        }
        w->ix = s->nworkers;
        s->workers[s->nworkers++] = w;
    } else {
        worker_leave_caps(s, w);
    }
    bool was_usable = !fresh && worker_usable(w);
    bool reshaped = fresh || serving_shape_differs(&w->info, wi);
    w->info = *wi;
    w->info.id[SCHED_NAME_MAX - 1] = '\0';
    if (fresh)
        hashmap_put_str(&s->worker_ix, w->info.id, w);
    /* Capabilities: intern; cap_jobs follow their capability. */
    int old_jobs[SCHED_MAX_CAPS], old_caps[SCHED_MAX_CAPS], old_n = w->ncaps;
    memcpy(old_jobs, w->cap_jobs, sizeof(old_jobs));
    memcpy(old_caps, w->caps, sizeof(old_caps));
    w->ncaps = 0;
    for (int k = 0; k < wi->ncaps; k++) {
        if (!wi->caps[k][0])
            continue;
        char name[SCHED_NAME_MAX];
        copy_name(name, wi->caps[k]);
        int c = cap_index(s, name, true);
        if (sched_worker_cap_slot(w, c) >= 0)
            continue;
        w->caps[w->ncaps] = c;
        w->cap_jobs[w->ncaps] = 0;
        for (int q = 0; q < old_n; q++)
            if (old_caps[q] == c)
                w->cap_jobs[w->ncaps] = old_jobs[q];
        w->ncaps++;
    }
    for (int q = 0; q < old_n; q++)
        if (old_jobs[q] > 0 && sched_worker_cap_slot(w, old_caps[q]) < 0)
            s->caps[old_caps[q]].occupied--;
    worker_map_loaded(s, w);
    w->gpu_class = class_index(s, w->info.gpu_class);
    if (!(w->info.speed >= 0) || !isfinite(w->info.speed))
        w->info.speed = 0;
    if (w->nslots < w->info.concurrency) {
        w->slots = xrealloc(w->slots, (size_t)w->info.concurrency * sizeof(*w->slots));
        w->nslots = w->info.concurrency;
    }
    w->dirty = true;
    idle_mark(s, w);
    worker_join_caps(s, w);
    if (reshaped || was_usable != worker_usable(w))
        s->fleet_ver++; /* parked queues get another look */
    /* Late binding on failure: a worker that stops taking work gives back
     * what it has not started (R20). */
    if (!worker_usable(w) && (was_usable || fresh))
        requeue_placed(s, w);
    if (!w->info.healthy)
        take_back_held(s, w);
    start_held(s, w, now); /* it reports more slots: what it holds starts */
    return 0;
}

int sched_worker_remove(struct sched *s, const char *worker_id, int64_t now,
                        void (*lost)(uint64_t job_id, void *arg), void *arg)
{
    if (!s || !worker_id)
        return GPUQ_EINVAL;
    see_now(s, now);
    struct sworker *w = worker_find(s, worker_id);
    if (!w)
        return GPUQ_ENOENT;
    requeue_placed(s, w);
    while (w->run_head || w->placed_head) {
        struct sjob *j = w->run_head ? w->run_head : w->placed_head; /* held ahead */
        uint64_t id = j->spec.id;
        if (j->state == SJOB_RUNNING)
            running_unlink(s, j);
        else
            placed_unlink(s, j);
        forget_job(s, j);
        if (lost)
            lost(id, arg);
    }
    worker_leave_caps(s, w);
    for (int k = 0; k < w->ncaps; k++)
        if (w->cap_jobs[k] > 0)
            s->caps[w->caps[k]].occupied--;
    hashmap_del_str(&s->worker_ix, w->info.id);
    w->alive = false;
    s->fleet_ver++; /* fewer homes for its models (model_scarcity) */
    int ix = w->ix;
    s->workers[ix] = s->workers[--s->nworkers];
    s->workers[ix]->ix = ix;
    idle_mark(s, s->workers[ix]); /* its bit moves with it */
    for (int k = 0; k < w->ncaps; k++)
        full_rebuild(s, w->caps[k]); /* drops entries that point at w */
    free(w->slots);
    free(w);
    return 0;
}

/* ---- jobs --------------------------------------------------------------- */

static void job_resolve(struct sched *s, struct sjob *j)
{
    j->model = sched_model_index(s, j->spec.model, 0);
    j->work = estimator_work(j->spec.width, j->spec.height, j->spec.steps, j->spec.frames);
}

double sched_estimate_cost(const struct sched *s, const struct job_spec *j)
{
    if (!s || !j)
        return 0;
    void *v = hashmap_get_str(&s->model_ix, j->model);
    int model = v ? (int)(intptr_t)v - 1 : -1;
    double work = estimator_work(j->width, j->height, j->steps, j->frames);
    return estimator_run_s(s->est, model, -1, work);
}

double sched_nominal_cost(const struct sched *s, const struct job_spec *j)
{
    if (!s || !j)
        return 0;
    void *v = hashmap_get_str(&s->model_ix, j->model);
    int model = v ? (int)(intptr_t)v - 1 : -1;
    double work = estimator_work(j->width, j->height, j->steps, j->frames);
    return estimator_prior_run_s(s->est, model, work);
}

double sched_expected_load_s(const struct sched *s, const struct job_spec *j)
{
    if (!s || !j || !j->model[0])
        return 0;
    void *mv = hashmap_get_str(&s->model_ix, j->model);
    void *cv = hashmap_get_str(&s->cap_ix, j->capability);
    if (!mv)
        return 0;
    int model = (int)(intptr_t)mv - 1;
    int cap = cv ? (int)(intptr_t)cv - 1 : -1;
    for (int i = 0; i < s->nworkers; i++) {
        const struct sworker *w = s->workers[i];
        if (worker_usable(w) && (cap < 0 || sched_worker_cap_slot(w, cap) >= 0) &&
            sched_worker_holds(w, model))
            return 0;
    }
    return sched_model_load_s(s, model);
}

int sched_job_add(struct sched *s, const struct job_spec *spec, int64_t now)
{
    if (s)
        see_now(s, now);
    if (!s || !spec || !spec->capability[0] ||
        (spec->lane != SCHED_LANE_INTERACTIVE && spec->lane != SCHED_LANE_BATCH) ||
        (spec->tier != SCHED_TIER_PAID && spec->tier != SCHED_TIER_FREE) ||
        spec->nexclude < 0 || (spec->nexclude > 0 && !spec->exclude))
        return GPUQ_EINVAL;
    if (hashmap_get_u64(&s->jobs, spec->id))
        return GPUQ_EEXIST;
    struct sjob *j = xcalloc(1, sizeof(*j));
    j->spec = *spec;
    j->spec.capability[SCHED_NAME_MAX - 1] = '\0';
    j->spec.model[SCHED_NAME_MAX - 1] = '\0';
    j->spec.exclude = NULL;
    j->spec.nexclude = 0;
    if (spec->nexclude > 0) {
        char(*excl)[SCHED_NAME_MAX] = xcalloc((size_t)spec->nexclude, sizeof(*excl));
        for (int i = 0; i < spec->nexclude; i++) {
            size_t n = strnlen(spec->exclude[i], SCHED_NAME_MAX - 1);
            memcpy(excl[i], spec->exclude[i], n);
            excl[i][n] = '\0';
        }
        j->spec.exclude = (const char(*)[SCHED_NAME_MAX])excl;
        j->spec.nexclude = spec->nexclude;
    }
    j->cap = cap_index(s, j->spec.capability, true);
    job_resolve(s, j);
    j->qix = queue_index(s, j->cap, j->model);
    j->cost_s = estimator_run_s(s->est, j->model, -1, j->work);
    sched_demand_note(s, &s->queues[j->qix], j->cost_s, now);
    s->backlog_s += j->cost_s;
    if (j->spec.lane == SCHED_LANE_INTERACTIVE) {
        sched_headroom_note(s, &s->caps[j->cap], j->cost_s, now);
        s->caps[j->cap].interactive = true;
        if (j->model >= 0)
            s->models[j->model].interactive = true;
    }
    hashmap_put_u64(&s->jobs, j->spec.id, j);
    queue_job(s, j, false);
    return 0;
}

int sched_job_cancel(struct sched *s, uint64_t job_id, int64_t now)
{
    if (!s)
        return GPUQ_EINVAL;
    see_now(s, now);
    struct sjob *j = hashmap_get_u64(&s->jobs, job_id);
    if (!j)
        return GPUQ_ENOENT;
    if (j->state == SJOB_QUEUED) {
        unqueue_job(s, j, false);
    } else if (j->state == SJOB_PLACED) {
        placed_unlink(s, j);
    } else {
        struct sworker *w = j->w;
        running_unlink(s, j);
        sched_worker_sync_open(s, w);
        start_held(s, w, now); /* its worker stops it and starts what it holds */
    }
    forget_job(s, j);
    return 0;
}

int sched_job_finished(struct sched *s, uint64_t job_id, bool ok, int64_t load_ns, int64_t run_ns,
                       int64_t now)
{
    if (!s)
        return GPUQ_EINVAL;
    see_now(s, now);
    struct sjob *j = hashmap_get_u64(&s->jobs, job_id);
    if (!j)
        return GPUQ_ENOENT;
    if (j->state == SJOB_PLACED && j->ahead) {
        /* Held ahead, it ended before it started (cancelled, failed at its
         * load, its worker lost): no run to learn from. */
        placed_unlink(s, j);
        forget_job(s, j);
        return 0;
    }
    if (j->state != SJOB_RUNNING)
        return GPUQ_ECONFLICT;
    struct sworker *w = j->w;
    if (ok && run_ns > 0) {
        double run_s = (double)run_ns / 1e9;
        double speed = j->est_speed > 0 ? j->est_speed : 1.0;
        estimator_observe_run(s->est, j->model, w->gpu_class, j->work, run_s * speed);
        if (w->info.speed <= 0 && j->est_run_s > 0) {
            /* No measured speed from the caller: learn this GPU's from how its
             * runs compare with the estimate. */
            double ratio = j->est_run_s / run_s * w->learned_speed;
            if (ratio > 0.1 && ratio < 10)
                w->learned_speed += 0.1 * (ratio - w->learned_speed);
        }
    }
    if (ok && load_ns > 0)
        estimator_observe_load(s->est, j->model, (double)load_ns / 1e9);
    running_unlink(s, j);
    sched_worker_sync_open(s, w);
    forget_job(s, j);
    start_held(s, w, now);
    return 0;
}

/* The agent will load the job's model when it starts: mirror that in our view
 * of w (the next heartbeat brings the truth). */
static void assume_loaded(struct sched *s, struct sworker *w, const struct sjob *j, int64_t now)
{
    if (!j->spec.model[0])
        return;
    for (int i = 0; i < w->info.nloaded; i++)
        if (w->loaded_model[i] == j->model) {
            w->info.loaded[i].last_used_ns = now;
            return;
        }
    const struct smodel *m = &s->models[j->model];
    struct vram_model vm[SCHED_MAX_LOADED];
    for (int i = 0; i < w->info.nloaded; i++) {
        const struct smodel *lm = &s->models[w->loaded_model[i]];
        vm[i] = (struct vram_model){lm->info.name, w->info.loaded[i].vram_mb, lm->info.cls,
                                    w->info.loaded[i].pinned, w->info.loaded[i].last_used_ns};
        for (struct sjob *r = w->run_head; r; r = r->next)
            if (r->model == w->loaded_model[i])
                vm[i].pinned = true;
    }
    int victims[SCHED_MAX_LOADED], nv = 0;
    if (vram_plan_evictions(vm, w->info.nloaded, w->info.vram_free_mb, m->info.vram_mb, victims,
                            &nv) != 0)
        return;
    bool gone[SCHED_MAX_LOADED] = {false};
    for (int k = 0; k < nv; k++) {
        gone[victims[k]] = true;
        w->info.vram_free_mb += w->info.loaded[victims[k]].vram_mb;
    }
    int n = 0;
    for (int i = 0; i < w->info.nloaded; i++)
        if (!gone[i]) {
            w->info.loaded[n] = w->info.loaded[i];
            w->loaded_model[n] = w->loaded_model[i];
            n++;
        }
    w->info.nloaded = n;
    if (n < SCHED_MAX_LOADED) {
        struct loaded_model *lm = &w->info.loaded[n];
        memset(lm, 0, sizeof(*lm));
        copy_name(lm->name, m->info.name);
        lm->vram_mb = m->info.vram_mb;
        lm->last_used_ns = now;
        w->loaded_model[n] = j->model;
        w->info.nloaded++;
        w->info.vram_free_mb -= m->info.vram_mb;
    }
}

/* Moves j, placed first on w, to w's running jobs. */
static void start_job(struct sched *s, struct sworker *w, struct sjob *j, int64_t now)
{
    sched_project(s, w, now);
    placed_unlink(s, j);
    j->ahead = j->taking_back = false;
    s->backlog_s -= j->cost_s;
    j->w = w;
    j->state = SJOB_RUNNING;
    j->est_start_ns = now;
    j->prev = NULL;
    j->next = w->run_head;
    if (w->run_head)
        w->run_head->prev = j;
    w->run_head = j;
    w->nrunning++;
    s->nrunning++;
    worker_cap_jobs(s, w, j->cap, +1);
    if (j->spec.lane == SCHED_LANE_BATCH)
        s->caps[j->cap].batch_start_ns = now;
    assume_loaded(s, w, j, now);
    w->dirty = true;
    sched_worker_sync_open(s, w);
}

/* A slot of w is free: the job it holds ahead has started there (its worker
 * starts it by itself), noted for sched_held_news. */
static void start_held(struct sched *s, struct sworker *w, int64_t now)
{
    while (w->nrunning < w->info.concurrency && w->placed_head && w->placed_head->ahead) {
        struct sjob *j = w->placed_head;
        held_news(s, j, SCHED_HELD_STARTED);
        s->started_ahead++;
        start_job(s, w, j, now);
    }
}

int sched_held_news(struct sched *s, uint64_t *job_id, enum sched_held_what *what)
{
    if (!s || !job_id || !what || s->nnews == 0)
        return 0;
    *job_id = s->news[0].job_id;
    *what = s->news[0].what;
    memmove(s->news, s->news + 1, (size_t)(--s->nnews) * sizeof(*s->news));
    return 1;
}

/* w's slots are all taken: hands it its first placed job to hold ahead, when
 * it may hold one, holds none and a running job there is expected to end
 * within assign_ahead_s. A reserved GPU takes a batch job only on a free
 * slot (worker_info.reserved), so it holds none. */
static int hand_ahead(struct sched *s, struct sworker *w, int64_t now, uint64_t *job_id)
{
    struct sjob *j = w->placed_head;
    if (!j || j->ahead || w->info.ahead < 1 || w->info.reserved || !(s->cfg.assign_ahead_s > 0))
        return GPUQ_EAGAIN;
    sched_project_now(s, w, now);
    if (w->overdue_ns - now > (int64_t)(s->cfg.assign_ahead_s * 1e9))
        return GPUQ_EAGAIN;
    j->ahead = true;
    s->handed_ahead++;
    *job_id = j->spec.id;
    return 0;
}

int sched_take(struct sched *s, const char *worker_id, int64_t now, uint64_t *job_id)
{
    if (!s || !worker_id || !job_id)
        return GPUQ_EINVAL;
    see_now(s, now);
    struct sworker *w = worker_find(s, worker_id);
    if (!w)
        return GPUQ_ENOENT;
    if (!worker_usable(w))
        return GPUQ_EAGAIN;
    /* A retry placed here while this worker was the only one for it, which
     * another could now take, is not this worker's to start. */
    release_excluded(s);
    if (w->nrunning >= w->info.concurrency)
        return hand_ahead(s, w, now, job_id);
    if (!w->placed_head)
        sched_rebalance_one(s, w, now, NULL, NULL);
    struct sjob *j = w->placed_head;
    if (!j)
        return GPUQ_EAGAIN;
    start_job(s, w, j, now);
    *job_id = j->spec.id;
    return 0;
}

/* ---- dispatch ----------------------------------------------------------- */

bool sched_queue_servable(const struct sched *s, const struct squeue *q)
{
    for (int i = 0; i < s->nworkers; i++) {
        const struct sworker *w = s->workers[i];
        if (w->alive && worker_usable(w) && sched_worker_cap_slot(w, q->cap) >= 0 &&
            sched_worker_can_hold(s, w, q->model))
            return true;
    }
    return false;
}

bool sched_parked(const struct sched *s, const struct squeue *q)
{
    return q->parked_ver != 0 && q->parked_ver == s->fleet_ver;
}

/* Why a parked job waits, in words. */
static void park_reason(const struct sched *s, const struct sjob *j, char *r, size_t n)
{
    const struct scap *c = &s->caps[j->cap];
    if (c->usable == 0)
        snprintf(r, n, "no ready worker serves %.48s (%d registered, none healthy and not draining)",
                 c->name, c->members);
    else if (j->spec.model[0])
        snprintf(r, n, "no ready worker serves model %.48s for %.48s", j->spec.model, c->name);
    else
        snprintf(r, n, "no ready worker serves %.48s", c->name);
}

/* Places j on the winner of why (already decided) and reports it. */
static void place(struct sched *s, struct sjob *j, struct sworker *w,
                  const struct sched_candidate *c)
{
    placed_append(s, w, j);
    j->est_load_s = c->load_s;
    j->est_run_s = c->run_s;
    j->est_speed = c->speed;
    s->decisions++;
}

void sched_commit(struct sched *s, struct sjob *j, struct sworker *w,
                  const struct sched_candidate *c)
{
    place(s, j, w, c);
}

void sched_unplace(struct sched *s, struct sjob *j)
{
    placed_unlink(s, j);
}

int sched_bind_front(struct sched *s, struct sjob *j, struct sworker *w, int64_t now)
{
    if (j->state == SJOB_PLACED && j->w == w)
        return 0;
    if (j->ahead)
        return GPUQ_ECONFLICT; /* its worker holds it */
    struct sched_candidate c;
    if (sched_score_one(s, w, j, now, &c) != SCORE_OK)
        return GPUQ_EAGAIN;
    if (j->state == SJOB_PLACED)
        placed_unlink(s, j);
    else if (j->state == SJOB_QUEUED)
        unqueue_job(s, j, true);
    else
        return GPUQ_ECONFLICT;
    place(s, j, w, &c);
    return 0;
}

/* Dispatch order across queue heads: lane (an urgent batch job counts as
 * interactive, rule 13), tier, order key — across real lanes, submission
 * (a batch job's order key may be a fair-queuing tag). */
static bool dispatch_before(const struct sched *s, const struct sjob *h, const struct sjob *b,
                            int64_t now)
{
    int hl = sched_batch_urgent(s, h, now) ? SCHED_LANE_INTERACTIVE : (int)h->spec.lane;
    int bl = sched_batch_urgent(s, b, now) ? SCHED_LANE_INTERACTIVE : (int)b->spec.lane;
    if (hl != bl)
        return hl < bl;
    if (h->spec.tier != b->spec.tier)
        return h->spec.tier < b->spec.tier;
    int64_t ho = sjob_order(h), bo = sjob_order(b);
    if (h->spec.lane != b->spec.lane) {
        ho = h->spec.submit_ns;
        bo = b->spec.submit_ns;
    }
    if (ho != bo)
        return ho < bo;
    return h->spec.id < b->spec.id;
}

const struct sched_candidate *sched_explain_candidate(const struct sched_explain *why,
                                                      const char *worker)
{
    for (int i = 0; why && worker && i < why->nkept; i++)
        if (!strcmp(why->cand[i].worker_id, worker))
            return &why->cand[i];
    return NULL;
}

int sched_dispatch(struct sched *s, int64_t now,
                   void (*placed)(uint64_t job_id, const char *worker_id,
                                  const struct sched_explain *why, void *arg),
                   void *arg)
{
    if (!s)
        return GPUQ_EINVAL;
    see_now(s, now);
    int n = 0;
    /* 0. Retries placed on a worker that failed them go back to the queue
     * once another worker could take them. */
    release_excluded(s);
    /* 1. Late binding: a GPU that has a free slot and nothing to start takes a
     * placed job that would finish sooner here. */
    if (s->nplaced > 0) {
        /* In worker order, as a walk over every worker would, but only over
         * the marked ones (sched.idle_bits): a worker found not idle loses
         * its mark until a job leaves it or it reports. */
        for (int i = idle_next(s, 0); i >= 0 && i < s->nworkers; i = idle_next(s, i + 1)) {
            struct sworker *w = s->workers[i];
            if (w->placed_head || w->nrunning >= w->info.concurrency || !worker_usable(w)) {
                s->idle_bits[i / 64] &= ~((uint64_t)1 << (i % 64));
                continue;
            }
            if (sched_rebalance_one(s, w, now, placed, arg))
                n++;
        }
    }
    /* 2. Queued jobs, oldest-first across the (capability, model) queues; a
     * queue whose head cannot be placed now is skipped for the rest of this
     * round, and one whose model no usable worker can hold is parked until
     * the fleet changes — neither holds up other models' jobs. */
    if (s->nqueued == 0)
        return n;
    if (s->capblocked < s->nqueues) {
        s->capblocked = s->nqueues * 2;
        s->blocked = xrealloc(s->blocked, (size_t)s->capblocked * sizeof(bool));
    }
    bool *blocked = s->blocked;
    memset(blocked, 0, (size_t)s->nqueues * sizeof(bool));
    for (;;) {
        struct sjob *best = NULL;
        for (int k = 0; k < s->nqueues; k++) {
            struct squeue *q = &s->queues[k];
            if (blocked[k] || q->q.count == 0)
                continue;
            if (s->caps[q->cap].nopen == 0 || s->caps[q->cap].paused || sched_parked(s, q)) {
                blocked[k] = true;
                continue;
            }
            struct sjob *h = job_queue_peek_lanes(&q->q, s->paused_lanes);
            if (!h) { /* only paused lanes wait here */
                blocked[k] = true;
                continue;
            }
            if (!best || dispatch_before(s, h, best, now))
                best = h;
        }
        if (!best)
            break;
        struct sched_explain *why = &s->why;
        struct sworker *w = sched_decide(s, best, now, why);
        struct squeue *q = &s->queues[best->qix];
        if (!w) {
            blocked[best->qix] = true;
            if (why->nkept == 0 && !sched_queue_servable(s, q)) {
                q->parked_ver = s->fleet_ver;
                park_reason(s, best, why->reason, sizeof(why->reason));
            }
            continue;
        }
        q->parked_ver = 0;
        if (best->moved_off) {
            /* A late-binding move off a worker that failed it. */
            char r[sizeof(why->reason)];
            snprintf(r, sizeof(r), "%s", why->reason);
            snprintf(why->reason, sizeof(why->reason), "retry moved off %.40s (failed it): %.80s",
                     best->moved_off, r);
            free(best->moved_off);
            best->moved_off = NULL;
            s->moves++;
        }
        unqueue_job(s, best, true);
        place(s, best, w, &why->cand[0]);
        n++;
        if (placed)
            placed(best->spec.id, w->info.id, why, arg);
    }
    return n;
}

/* ---- introspection ------------------------------------------------------ */

void sched_stats(const struct sched *s, struct sched_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!s)
        return;
    out->queued = s->nqueued;
    out->placed = s->nplaced;
    out->running = s->nrunning;
    out->workers = s->nworkers;
    out->backlog_s = s->backlog_s > 0 ? s->backlog_s : 0;
    out->decisions = s->decisions;
    out->moves = s->moves;
    out->holds = s->holds;
    out->handed_ahead = s->handed_ahead;
    out->started_ahead = s->started_ahead;
}

/* Work (nominal GPU-seconds) queued ahead of j in dispatch order (lane, tier,
 * then order key and id, as sched_dispatch takes them) among the queues of the
 * capabilities marked in `shares` — those with a worker in common with j's
 * (they draw on the same slots). From the queues' cost trees: O(Q log n) for
 * Q queues, whatever the depth. */
double sched_work_ahead(const struct sched *s, const struct sjob *j, const bool *shares)
{
    double ahead = 0;
    int64_t order = sjob_order(j);
    for (int k = 0; k < s->nqueues; k++) {
        const struct squeue *q = &s->queues[k];
        if (!shares[q->cap] || q->q.count == 0)
            continue;
        for (int l = 0; l < j->qlist && l < JOB_QUEUE_LISTS; l++)
            ahead += job_queue_cost(&q->q, l);
        ahead += job_queue_cost_ahead(&q->q, j->qlist, order, j->spec.id);
    }
    return ahead;
}

struct eta_slot {
    int64_t free_ns;
    double speed;
};

static int eta_slot_cmp(const void *a, const void *b)
{
    const struct eta_slot *x = a, *y = b;
    return x->free_ns < y->free_ns ? -1 : x->free_ns > y->free_ns;
}

/* A queued job's start: the slots of the workers that could run it free up at
 * their projected times and then work at their speed; the job starts when
 * together they have worked off the work queued ahead of it (water-filling
 * over the slots' free times). Unknown (-1) when no usable worker can hold
 * its model. */
static int eta_queued(struct sched *s, struct sjob *j, int64_t now, double *start_s,
                      double *finish_s)
{
    const struct squeue *q = &s->queues[j->qix];
    if (sched_parked(s, q))
        return 0; /* unknown */
    int nslots = 0, cap_slots = 0;
    struct eta_slot *sl = NULL;
    bool warm = !j->spec.model[0];
    double speed_sum = 0, on_workers = 0;
    int nw = 0;
    bool *shares = xcalloc((size_t)(s->ncaps > 0 ? s->ncaps : 1), sizeof(bool));
    shares[j->cap] = true;
    for (int i = 0; i < s->nworkers; i++) {
        struct sworker *w = s->workers[i];
        if (!worker_usable(w) || sched_worker_cap_slot(w, j->cap) < 0 ||
            !sched_worker_can_hold(s, w, j->model))
            continue;
        for (int c = 0; c < w->ncaps; c++)
            shares[w->caps[c]] = true;
        sched_project(s, w, now);
        double sp = sched_worker_speed(w);
        /* A worker that will not have the model once its placed jobs ran
         * must load it first: its slots open to this job that much later
         * (the dispatcher weighs the same cost when it holds a job for a
         * busy warm worker rather than loading an idle cold one). */
        bool has = !j->spec.model[0];
        for (int m = 0; m < w->nproj && !has; m++)
            has = w->proj_model[m] == j->model;
        int64_t shift = has ? 0 : (int64_t)(sched_model_load_s(s, j->model) * 1e9);
        for (int k = 0; k < w->info.concurrency; k++) {
            if (nslots == cap_slots) {
                cap_slots = cap_slots ? cap_slots * 2 : 16;
                sl = xrealloc(sl, (size_t)cap_slots * sizeof(*sl));
            }
            sl[nslots].free_ns = (w->slots[k] > now ? w->slots[k] : now) + shift;
            sl[nslots].speed = sp;
            nslots++;
        }
        warm = warm || has;
        speed_sum += sp;
        nw++;
        /* Batch work already on the worker goes before j too: at the lane's
         * rate it counts beside the queued work (below). */
        for (const struct sjob *p = w->placed_head; p; p = p->next)
            if (p->spec.lane == SCHED_LANE_BATCH)
                on_workers += p->cost_s;
        for (const struct sjob *r = w->run_head; r; r = r->next) {
            if (r->spec.lane != SCHED_LANE_BATCH)
                continue;
            double left_s = (double)(r->est_start_ns - now) / 1e9 + r->est_load_s + r->est_run_s;
            if (left_s > 0)
                on_workers += left_s * sp;
        }
    }
    if (nslots == 0) {
        free(sl);
        free(shares);
        return 0;
    }
    qsort(sl, (size_t)nslots, sizeof(*sl), eta_slot_cmp);
    double ahead = sched_work_ahead(s, j, shares);
    free(shares);
    /* Capacity worked off by time t is sum over freed slots of speed x (t - free). */
    double t = 0, rate = 0, left = ahead;
    for (int k = 0; k < nslots; k++) {
        double f = (double)(sl[k].free_ns - now) / 1e9;
        if (rate > 0) {
            if (rate * (f - t) >= left)
                break;
            left -= rate * (f - t);
        }
        t = f;
        rate += sl[k].speed;
        if (left <= 0)
            break;
    }
    if (left > 0)
        t += left / rate;
    free(sl);
    /* Batch drains no faster than the lane's rate: the water-filling above
     * gives it every usable slot. Until that rate is measured, it is the
     * lane's nominal one, and no more than the GPUs the interactive
     * headroom leaves batch (a measured rate has the headroom in it). */
    if (j->spec.lane == SCHED_LANE_BATCH) {
        double lr = s->lane_rate[SCHED_LANE_BATCH];
        if (!s->lane_measured[SCHED_LANE_BATCH]) {
            double hr = sched_headroom_batch_rate(s, j->cap, now);
            if (hr > 0 && (!(lr > 0) || hr < lr))
                lr = hr;
        }
        if (lr > 0 && (ahead + on_workers) / lr > t)
            t = (ahead + on_workers) / lr;
    }
    (void)warm; /* the load is in the slots' shift */
    double run = j->cost_s / (speed_sum / nw);
    *start_s = t > 0 ? t : 0;
    *finish_s = *start_s + run;
    return 0;
}

int sched_lane_rate(struct sched *s, enum sched_lane lane, double gpu_s_per_s, bool measured)
{
    if (!s || (lane != SCHED_LANE_INTERACTIVE && lane != SCHED_LANE_BATCH) ||
        !(gpu_s_per_s >= 0) || !isfinite(gpu_s_per_s))
        return GPUQ_EINVAL;
    s->lane_rate[lane] = gpu_s_per_s;
    s->lane_measured[lane] = measured && gpu_s_per_s > 0;
    return 0;
}

/* A queued job an admin's pause holds back; why in r. */
static bool job_paused(const struct sched *s, const struct sjob *j, char *r, size_t n)
{
    const char *lane = j->spec.lane == SCHED_LANE_BATCH ? "batch" : "interactive";
    if (s->caps[j->cap].paused) {
        if (r && n > 0)
            snprintf(r, n, "capability %.48s is paused by an admin (gpuq resume)",
                     s->caps[j->cap].name);
        return true;
    }
    if (s->paused_lanes & (1u << j->spec.lane)) {
        if (r && n > 0)
            snprintf(r, n, "the %s lane is paused by an admin (gpuq resume)", lane);
        return true;
    }
    return false;
}

int sched_pause(struct sched *s, const char *cap, int lane, bool paused)
{
    if (!s || (!cap && (lane < 0 || lane > 1)))
        return GPUQ_EINVAL;
    if (cap) {
        int ci = cap_index(s, cap, true); /* may move s->caps */
        s->caps[ci].paused = paused;
    } else if (paused) {
        s->paused_lanes |= 1u << lane;
    } else {
        s->paused_lanes &= ~(1u << lane);
    }
    return 0;
}

int sched_paused(const struct sched *s, char (*caps)[SCHED_NAME_MAX], int max, unsigned *lanes)
{
    int n = 0;
    for (int i = 0; s && i < s->ncaps; i++)
        if (s->caps[i].paused && n < max)
            memcpy(caps[n++], s->caps[i].name, SCHED_NAME_MAX);
    *lanes = s ? s->paused_lanes : 0;
    return n;
}

int sched_job_promote(struct sched *s, uint64_t job_id, int64_t now)
{
    if (!s)
        return GPUQ_EINVAL;
    see_now(s, now);
    struct sjob *j = hashmap_get_u64(&s->jobs, job_id);
    if (!j)
        return GPUQ_ENOENT;
    if (j->state != SJOB_QUEUED)
        return 0;
    unqueue_job(s, j, false);
    /* Before every submit time, the latest promoted first. */
    j->spec.submit_ns = INT64_MIN / 4 - s->npromoted++;
    queue_job(s, j, true);
    return 0;
}

bool sched_job_parked(const struct sched *s, uint64_t job_id, char *reason, size_t n)
{
    if (!s)
        return false;
    struct sjob *j = hashmap_get_u64(&s->jobs, job_id);
    if (!j || j->state != SJOB_QUEUED)
        return false;
    if (job_paused(s, j, reason, n))
        return true;
    const struct squeue *q = &s->queues[j->qix];
    if (!sched_parked(s, q) && sched_queue_servable(s, q))
        return false;
    if (reason && n > 0)
        park_reason(s, j, reason, n);
    return true;
}

void sched_refresh(struct sched *s, int64_t now)
{
    if (!s)
        return;
    see_now(s, now);
    for (int i = 0; i < s->nworkers; i++)
        sched_project(s, s->workers[i], s->now);
}

bool sched_fresh(const struct sched *s)
{
    for (int i = 0; s && i < s->nworkers; i++)
        if (s->workers[i]->dirty)
            return false;
    return s != NULL;
}

int sched_job_eta(const struct sched *cs, uint64_t job_id, int64_t now, double *start_s,
                  double *finish_s)
{
    if (!cs || !start_s || !finish_s)
        return GPUQ_EINVAL;
    struct sched *s = (struct sched *)cs; /* projection caches only */
    struct sjob *j = hashmap_get_u64(&s->jobs, job_id);
    *start_s = *finish_s = -1;
    if (!j)
        return GPUQ_ENOENT;
    if (j->state == SJOB_RUNNING) {
        *start_s = 0;
        double end = (double)(j->est_start_ns - now) / 1e9 + j->est_load_s + j->est_run_s;
        *finish_s = end > 0 ? end : 0;
        return 0;
    }
    if (j->state == SJOB_PLACED) {
        sched_project(s, j->w, now);
        double st = (double)(j->est_start_ns - now) / 1e9;
        *start_s = st > 0 ? st : 0;
        *finish_s = *start_s + j->est_load_s + j->est_run_s;
        return 0;
    }
    if (job_paused(s, j, NULL, 0))
        return 0; /* no estimate while paused: sched_job_parked says why */
    return eta_queued(s, j, now, start_s, finish_s);
}
