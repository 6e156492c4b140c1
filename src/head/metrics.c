/* metrics.c: gpuqd's Prometheus metrics (see metrics.h, docs/metrics.md).
 *
 * Event metrics are series in fixed tables, one per family: a series is found
 * by its label values (hash, then linear probing) and claimed once with a
 * compare-and-swap, so bumping one is a few atomic adds and never a lock.
 * Gauges are read at scrape time: queue depths and backlogs and jobs by state
 * from counters the job table keeps as jobs change state (a copy of a few
 * groups under its lock, never a pass over the jobs), GPUs copied out under
 * the registry lock and formatted after it is released, the scheduler's and
 * the committer's statistics. Scrapes run one at a time and keep their
 * scratch space. */
#include "head/metrics.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/hashmap.h"
#include "common/token.h"
#include "head/dispatch.h"
#include "head/head.h"
#include "head/ops_admin.h"
#include "head/trace.h"

#ifndef GPUQ_VERSION
#define GPUQ_VERSION "unknown"
#endif

#define MAX_LABELS 4
#define LABEL_MAX 64
#define MAX_SERIES 512 /* per family; more distinct label sets share one "other" series */
#define MAX_BUCKETS 16

enum family_kind { FAM_COUNTER, FAM_HISTOGRAM };

/* One labelled series. Invariant: state goes 0 (free) → 1 (being claimed) →
 * 2 (ready) once; labels are written before state becomes 2 and never after.
 * buckets[i] counts observations in (bound[i-1], bound[i]] (not cumulative);
 * buckets[nbounds] those above the last bound. sum is in units of 1/scale. */
struct series {
    atomic_int state;
    char labels[MAX_LABELS][LABEL_MAX];
    atomic_uint_fast64_t value; /* counter: its value; histogram: the count */
    atomic_uint_fast64_t sum;
    atomic_uint_fast64_t buckets[MAX_BUCKETS + 1];
};

struct family {
    const char *name;
    const char *help;
    enum family_kind kind;
    int nlabels;
    const char *label_names[MAX_LABELS];
    const double *bounds; /* histograms: upper bounds, increasing */
    int nbounds;
    double scale;         /* histograms: sum units per value unit */
    _Atomic(struct series *) series; /* MAX_SERIES, allocated on first use */
};

/* Job times: 0.1 s to 1 h. */
static const double job_bounds[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800,
                                    3600};
/* A scheduler decision: 1 µs to 100 ms. */
static const double decision_bounds[] = {1e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
                                         1e-3, 5e-3, 1e-2, 1e-1};
/* A group commit: 0.1 ms to 1 s. */
static const double commit_bounds[] = {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
                                       5e-2, 0.1, 0.25, 1};
static const double batch_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};

#define NB(a) ((int)(sizeof a / sizeof a[0]))
#define JOB_LABELS 3, {"capability", "model", "lane"}

static struct family f_submitted = {"gpuq_jobs_submitted_total", "Jobs accepted (durable).",
                                    FAM_COUNTER, JOB_LABELS, NULL, 0, 0, NULL};
static struct family f_finished = {"gpuq_jobs_finished_total",
                                   "Jobs that reached a terminal state, by state.", FAM_COUNTER,
                                   4, {"capability", "model", "lane", "state"}, NULL, 0, 0, NULL};
static struct family f_latency = {
    "gpuq_job_latency_seconds", "Submit to finish of succeeded jobs.", FAM_HISTOGRAM,
    JOB_LABELS, job_bounds, NB(job_bounds), 1e6, NULL};
static struct family f_wait = {
    "gpuq_job_wait_seconds", "Submit to first assignment to a GPU.", FAM_HISTOGRAM, JOB_LABELS,
    job_bounds, NB(job_bounds), 1e6, NULL};
static struct family f_run = {
    "gpuq_job_run_seconds", "Run time of succeeded attempts, as the agent measured it.",
    FAM_HISTOGRAM, JOB_LABELS, job_bounds, NB(job_bounds), 1e6, NULL};
static struct family f_failures = {"gpuq_attempt_failures_total",
                                   "Attempts that ended in failure, by error class.", FAM_COUNTER,
                                   1, {"class"}, NULL, 0, 0, NULL};
static struct family f_retries = {"gpuq_job_retries_total",
                                  "Failed attempts whose job was queued again.", FAM_COUNTER, 0,
                                  {0}, NULL, 0, 0, NULL};
static struct family f_dead = {"gpuq_dead_letters_total",
                               "Jobs that used their attempt budget and went dead.", FAM_COUNTER,
                               0, {0}, NULL, 0, 0, NULL};
static struct family f_429 = {"gpuq_http_throttled_total",
                              "Requests refused with 429 Too Many Requests, by lane.", FAM_COUNTER,
                              1, {"lane"}, NULL, 0, 0, NULL};
static struct family f_eta = {
    "gpuq_eta_error_seconds", "Absolute error of the finish time predicted at submit.",
    FAM_HISTOGRAM, 0, {0}, job_bounds, NB(job_bounds), 1e6, NULL};
static struct family f_decision = {
    "gpuq_scheduler_decision_seconds", "Time the scheduler took per placement.", FAM_HISTOGRAM,
    0, {0}, decision_bounds, NB(decision_bounds), 1e9, NULL};
static struct family f_loads = {"gpuq_model_loads_total",
                                "Placements on a GPU that must load the job's model (cold).",
                                FAM_COUNTER, 0, {0}, NULL, 0, 0, NULL};
static struct family f_warm = {"gpuq_model_warm_placements_total",
                               "Placements on a GPU that has the job's model loaded (warm).",
                               FAM_COUNTER, 0, {0}, NULL, 0, 0, NULL};
static struct family f_evictions = {"gpuq_model_evictions_total",
                                    "Models evicted to make room for the placed jobs' models.",
                                    FAM_COUNTER, 0, {0}, NULL, 0, 0, NULL};
static struct family f_commit = {
    "gpuq_store_commit_seconds", "Group commit latency (one transaction and fsync).",
    FAM_HISTOGRAM, 0, {0}, commit_bounds, NB(commit_bounds), 1e9, NULL};
static struct family f_batch = {
    "gpuq_store_commit_batch_size", "Operations per group commit.", FAM_HISTOGRAM, 0, {0},
    batch_bounds, NB(batch_bounds), 1, NULL};
static struct family f_poll = {
    "gpuq_agent_poll_workers",
    "Workers one agent's assignment poll asked for (a group poll: several).",
    FAM_HISTOGRAM, 0, {0}, batch_bounds, NB(batch_bounds), 1, NULL};

/* In the order they are rendered. */
static struct family *const event_families[] = {
    &f_submitted, &f_finished, &f_latency, &f_wait, &f_run, &f_failures, &f_retries, &f_dead,
    &f_429, &f_eta, &f_decision, &f_loads, &f_warm, &f_evictions, &f_commit, &f_batch,
    &f_poll,
};

/* The family's series table, allocated on first use. */
static struct series *family_series(struct family *f)
{
    static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
    struct series *s = atomic_load_explicit(&f->series, memory_order_acquire);
    if (s)
        return s;
    pthread_mutex_lock(&init_lock); /* once per family per process */
    s = atomic_load_explicit(&f->series, memory_order_acquire);
    if (!s) {
        s = xcalloc(MAX_SERIES, sizeof *s);
        atomic_store_explicit(&f->series, s, memory_order_release);
    }
    pthread_mutex_unlock(&init_lock);
    return s;
}

static bool labels_equal(const struct series *s, const char *const *vals, int n)
{
    for (int i = 0; i < n; i++)
        if (strncmp(s->labels[i], vals[i], LABEL_MAX - 1) != 0)
            return false;
    return true;
}

/* The series of these label values, claimed on first use. When the table is
 * full, the last slot (labels "other") takes the observation. */
static struct series *series_get(struct family *f, const char *const *vals)
{
    struct series *tab = family_series(f);
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < f->nlabels; i++) {
        h = (h ^ hashmap_hash(vals[i], strnlen(vals[i], LABEL_MAX - 1))) * 1099511628211ull;
    }
    size_t start = (size_t)(h % (MAX_SERIES - 1));
    for (size_t k = 0; k < MAX_SERIES - 1; k++) {
        struct series *s = &tab[(start + k) % (MAX_SERIES - 1)];
        int st = atomic_load_explicit(&s->state, memory_order_acquire);
        if (st == 0) {
            int expect = 0;
            if (atomic_compare_exchange_strong(&s->state, &expect, 1)) {
                for (int i = 0; i < f->nlabels; i++)
                    snprintf(s->labels[i], LABEL_MAX, "%s", vals[i]);
                atomic_store_explicit(&s->state, 2, memory_order_release);
                return s;
            }
            st = expect;
        }
        while (st == 1) { /* another thread is writing its labels: a few instructions */
            sched_yield();
            st = atomic_load_explicit(&s->state, memory_order_acquire);
        }
        if (labels_equal(s, vals, f->nlabels))
            return s;
    }
    struct series *other = &tab[MAX_SERIES - 1];
    int expect = 0;
    if (atomic_compare_exchange_strong(&other->state, &expect, 1)) {
        for (int i = 0; i < f->nlabels; i++)
            snprintf(other->labels[i], LABEL_MAX, "other");
        atomic_store_explicit(&other->state, 2, memory_order_release);
    }
    return other;
}

static void count(struct family *f, const char *const *vals, uint64_t n)
{
    atomic_fetch_add_explicit(&series_get(f, vals)->value, n, memory_order_relaxed);
}

static void observe_n(struct family *f, const char *const *vals, double v, uint64_t n)
{
    struct series *s = series_get(f, vals);
    int b = 0;
    while (b < f->nbounds && v > f->bounds[b])
        b++;
    atomic_fetch_add_explicit(&s->buckets[b], n, memory_order_relaxed);
    double units = v > 0 ? v * f->scale * (double)n : 0;
    atomic_fetch_add_explicit(&s->sum, (uint64_t)(units + 0.5), memory_order_relaxed);
    atomic_fetch_add_explicit(&s->value, n, memory_order_relaxed);
}

static const char *const no_labels[1] = {""};

/* ---- events ---- */

void metrics_count_429(enum job_lane lane)
{
    const char *v[] = {job_lane_name(lane)};
    count(&f_429, v, 1);
}

void metrics_agent_poll(int workers)
{
    observe_n(&f_poll, no_labels, workers, 1);
}

void metrics_job_submitted(const struct job_rec *r)
{
    const char *v[] = {r->capability, r->model, job_lane_name(r->lane)};
    count(&f_submitted, v, 1);
}

void metrics_job_assigned(const struct job_rec *r, int64_t now_ms)
{
    if (r->lc.attempt != 1)
        return;
    const char *v[] = {r->capability, r->model, job_lane_name(r->lane)};
    int64_t ms = now_ms - r->created_ms;
    observe_n(&f_wait, v, ms > 0 ? (double)ms / 1e3 : 0, 1);
}

void metrics_job_finished(const struct job_rec *r, int64_t run_ms)
{
    const char *v[] = {r->capability, r->model, job_lane_name(r->lane),
                       job_state_name(job_rec_state(r))};
    count(&f_finished, v, 1);
    if (job_rec_state(r) == JOB_DEAD)
        count(&f_dead, no_labels, 1);
    if (job_rec_state(r) != JOB_SUCCEEDED)
        return;
    int64_t ms = r->finished_ms - r->created_ms;
    observe_n(&f_latency, v, ms > 0 ? (double)ms / 1e3 : 0, 1);
    if (run_ms <= 0 && r->started_ms > 0)
        run_ms = r->finished_ms - r->started_ms;
    observe_n(&f_run, v, run_ms > 0 ? (double)run_ms / 1e3 : 0, 1);
}

void metrics_attempt_failed(const char *cls, bool retried)
{
    const char *v[] = {cls && *cls ? cls : "unknown"};
    count(&f_failures, v, 1);
    if (retried)
        count(&f_retries, no_labels, 1);
}

void metrics_eta_error(double err_s)
{
    observe_n(&f_eta, no_labels, err_s < 0 ? -err_s : err_s, 1);
}

void metrics_decisions(int placed, int64_t ns)
{
    if (placed <= 0)
        return;
    observe_n(&f_decision, no_labels, (double)ns / 1e9 / placed, (uint64_t)placed);
}

void metrics_placement(bool warm, int evictions)
{
    count(warm ? &f_warm : &f_loads, no_labels, 1);
    if (evictions > 0)
        count(&f_evictions, no_labels, (uint64_t)evictions);
}

void metrics_store_commit(void *arg, int n, int64_t ns)
{
    (void)arg;
    observe_n(&f_commit, no_labels, (double)ns / 1e9, 1);
    observe_n(&f_batch, no_labels, n, 1);
}

/* ---- rendering ---- */

/* A label value in the exposition format: \, " and newline escaped. */
static void put_value(struct buf *b, const char *s)
{
    for (;;) {
        size_t n = strcspn(s, "\\\"\n"); /* runs without escapes in one append */
        buf_append(b, s, n);
        s += n;
        if (!*s)
            return;
        buf_puts(b, *s == '\\' ? "\\\\" : *s == '"' ? "\\\"" : "\\n");
        s++;
    }
}

static void header(struct buf *b, const char *name, const char *type, const char *help)
{
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{k1="v1",...,extra_k="extra_v"} — extra may be NULL. */
static void put_series_name(struct buf *b, const char *name, const char *suffix,
                            const struct family *f, const struct series *s, const char *extra_k,
                            const char *extra_v)
{
    buf_printf(b, "%s%s", name, suffix);
    if (f->nlabels == 0 && !extra_k)
        return;
    buf_puts(b, "{");
    for (int i = 0; i < f->nlabels; i++) {
        buf_printf(b, "%s%s=\"", i ? "," : "", f->label_names[i]);
        put_value(b, s->labels[i]);
        buf_puts(b, "\"");
    }
    if (extra_k) {
        buf_printf(b, "%s%s=\"%s\"", f->nlabels ? "," : "", extra_k, extra_v);
    }
    buf_puts(b, "}");
}

static void render_family(struct buf *b, struct family *f)
{
    header(b, f->name, f->kind == FAM_COUNTER ? "counter" : "histogram", f->help);
    struct series *tab = family_series(f);
    bool any = false;
    for (int i = 0; i < MAX_SERIES; i++) {
        struct series *s = &tab[i];
        if (atomic_load_explicit(&s->state, memory_order_acquire) != 2)
            continue;
        any = true;
        if (f->kind == FAM_COUNTER) {
            put_series_name(b, f->name, "", f, s, NULL, NULL);
            buf_printf(b, " %llu\n", (unsigned long long)atomic_load(&s->value));
            continue;
        }
        uint64_t cum = 0;
        for (int k = 0; k <= f->nbounds; k++) {
            cum += atomic_load_explicit(&s->buckets[k], memory_order_relaxed);
            char le[32];
            if (k < f->nbounds)
                snprintf(le, sizeof le, "%g", f->bounds[k]);
            else
                snprintf(le, sizeof le, "+Inf");
            put_series_name(b, f->name, "_bucket", f, s, "le", le);
            buf_printf(b, " %llu\n", (unsigned long long)cum);
        }
        put_series_name(b, f->name, "_sum", f, s, NULL, NULL);
        buf_printf(b, " %.9g\n", (double)atomic_load(&s->sum) / f->scale);
        put_series_name(b, f->name, "_count", f, s, NULL, NULL);
        /* The buckets' total, so that count equals the +Inf bucket even mid-update. */
        buf_printf(b, " %llu\n", (unsigned long long)cum);
    }
    if (!any && f->nlabels == 0) { /* an unlabelled metric shows from the start */
        struct series zero = {0};
        if (f->kind == FAM_COUNTER) {
            buf_printf(b, "%s 0\n", f->name);
            return;
        }
        for (int k = 0; k <= f->nbounds; k++) {
            char le[32];
            if (k < f->nbounds)
                snprintf(le, sizeof le, "%g", f->bounds[k]);
            else
                snprintf(le, sizeof le, "+Inf");
            put_series_name(b, f->name, "_bucket", f, &zero, "le", le);
            buf_puts(b, " 0\n");
        }
        buf_printf(b, "%s_sum 0\n%s_count 0\n", f->name, f->name);
    }
}

/* A scrape writes ~15 lines per GPU: numbers go through buf_put_int and
 * buf_put_fixed (common/buf.c), not printf. */

/* Scrapes run one at a time; their scratch space is kept between them. */
static pthread_mutex_t scrape_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t last_body_len;

/* ---- queues: counters the job table keeps as jobs change state ---- */

static struct jobs_queue *q_scratch;
static int q_cap;

static void put_queue_labels(struct buf *b, const char *name, const struct jobs_queue *q,
                             const char *tenant)
{
    buf_puts(b, name);
    buf_puts(b, "{capability=\"");
    put_value(b, q->capability);
    buf_puts(b, "\",lane=\"");
    buf_puts(b, job_lane_name(q->lane));
    buf_puts(b, "\",tenant=\"");
    put_value(b, tenant);
    buf_puts(b, "\"} ");
}

static void render_queues(struct head *h, struct buf *b)
{
    long long states[JOB_NSTATES];
    int n = jobs_queue_stats(h->jobs, states, &q_scratch, &q_cap);

    header(b, "gpuq_jobs", "gauge", "Jobs the head holds in memory, by state.");
    for (int s = 0; s < JOB_NSTATES; s++) {
        buf_printf(b, "gpuq_jobs{state=\"%s\"} ", job_state_name((enum job_state)s));
        buf_put_int(b, states[s]);
        buf_append(b, "\n", 1);
    }
    size_t full, at_rest;
    jobs_lock(h->jobs);
    jobs_memory(h->jobs, &full, &at_rest);
    jobs_unlock(h->jobs);
    header(b, "gpuq_jobs_at_rest", "gauge",
           "Queued jobs held compactly in memory (nobody waits on them; issue 20).");
    buf_puts(b, "gpuq_jobs_at_rest ");
    buf_put_int(b, (int64_t)at_rest);
    buf_append(b, "\n", 1);
    /* Tenant names once per group (a lookup each), then two families. */
    char(*tenants)[REC_NAME_MAX] = n ? xcalloc((size_t)n, REC_NAME_MAX) : NULL;
    for (int i = 0; i < n; i++) {
        if (i > 0 && q_scratch[i].tenant_id == q_scratch[i - 1].tenant_id)
            memcpy(tenants[i], tenants[i - 1], REC_NAME_MAX);
        else
            head_tenant_name(h, q_scratch[i].tenant_id, tenants[i], REC_NAME_MAX);
    }
    header(b, "gpuq_queue_depth_jobs", "gauge", "Queued jobs per capability, lane and tenant.");
    for (int i = 0; i < n; i++) {
        put_queue_labels(b, "gpuq_queue_depth_jobs", &q_scratch[i], tenants[i]);
        buf_put_int(b, q_scratch[i].depth);
        buf_append(b, "\n", 1);
    }
    header(b, "gpuq_queue_backlog_gpu_seconds", "gauge",
           "Estimated GPU-seconds of queued jobs (the scheduler's cost estimate).");
    for (int i = 0; i < n; i++) {
        put_queue_labels(b, "gpuq_queue_backlog_gpu_seconds", &q_scratch[i], tenants[i]);
        buf_put_fixed(b, (double)q_scratch[i].backlog_ms / 1e3, 3);
        buf_append(b, "\n", 1);
    }
    free(tenants);
}

/* ---- GPUs: copied out under the registry lock, formatted after ---- */

/* What a scrape shows of one worker. models indexes g_models. */
struct gpu_snap {
    char id[SCHED_NAME_MAX];
    char host[128];
    char name[128];
    char uuid[96];
    int gpu_index;
    const char *state;
    struct telemetry tel;
    int inflight;
    long long hits, misses;
    int64_t trips;
    int model0, nmodels;
};

static struct gpu_snap *g_snap;
static int g_n, g_cap;
static char (*g_models)[SCHED_NAME_MAX];
static int g_nmodels, g_capmodels;

static void snap_worker(void *arg, const struct worker_rec *w)
{
    (void)arg;
    if (g_n == g_cap) {
        g_cap = g_cap ? g_cap * 2 : 64;
        g_snap = xrealloc(g_snap, (size_t)g_cap * sizeof *g_snap);
    }
    struct gpu_snap *s = &g_snap[g_n++];
    memcpy(s->id, w->id, sizeof s->id);
    memcpy(s->host, w->host, sizeof s->host);
    memcpy(s->name, w->gpu_name, sizeof s->name);
    memcpy(s->uuid, w->gpu_uuid, sizeof s->uuid);
    s->gpu_index = w->gpu_index;
    s->state = w->breaker != BREAKER_CLOSED                           ? "quarantined"
               : w->state == WORKER_DRAINING || w->drain_requested ? "draining"
               : w->state == WORKER_WARMING                         ? "warming"
                                                                    : "ready";
    s->tel = w->tel;
    s->inflight = w->inflight;
    s->hits = w->cache_hits;
    s->misses = w->cache_misses;
    s->trips = w->breaker_trips;
    s->model0 = g_nmodels;
    s->nmodels = 0;
    for (int m = 0; m < w->nmodels; m++) {
        if (!w->models[m].loaded)
            continue;
        if (g_nmodels == g_capmodels) {
            g_capmodels = g_capmodels ? g_capmodels * 2 : 64;
            g_models = xrealloc(g_models, (size_t)g_capmodels * sizeof *g_models);
        }
        memcpy(g_models[g_nmodels++], w->models[m].name, SCHED_NAME_MAX);
        s->nmodels++;
    }
}

/* Per-GPU families, in the order they are rendered. */
enum {
    G_INFO, G_STATE, G_TEMP, G_VRAM_USED, G_VRAM_TOTAL, G_UTIL, G_POWER, G_THROTTLE, G_MODEL,
    G_INFLIGHT, G_HITS, G_MISSES, G_BREAKER_TRIPS, G_N
};

static const struct {
    const char *name, *type, *help;
} gpu_fams[G_N] = {
    {"gpuq_gpu_info", "gauge", "One per registered GPU (worker), with its host and model."},
    {"gpuq_gpu_state", "gauge",
     "1, labelled with the GPU's current state: ready, warming, draining or quarantined."},
    {"gpuq_gpu_temperature_celsius", "gauge", "GPU temperature."},
    {"gpuq_gpu_memory_used_bytes", "gauge", "VRAM in use."},
    {"gpuq_gpu_memory_total_bytes", "gauge", "VRAM in all."},
    {"gpuq_gpu_utilization_ratio", "gauge", "GPU utilization, 0 to 1."},
    {"gpuq_gpu_power_watts", "gauge", "GPU power draw."},
    {"gpuq_gpu_throttled", "gauge", "1 for each active throttle reason of the GPU."},
    {"gpuq_gpu_model_loaded", "gauge", "1 for each model resident in the GPU's memory."},
    {"gpuq_gpu_jobs_inflight", "gauge", "Attempts assigned to the GPU and not yet ended."},
    {"gpuq_model_cache_hits_total", "counter", "Jobs that found their model loaded (agent)."},
    {"gpuq_model_cache_misses_total", "counter", "Jobs that had to load their model (agent)."},
    {"gpuq_gpu_quarantines_total", "counter", "Times the GPU's circuit breaker opened."},
};

/* name{worker="id" — the caller closes the braces. */
static void gput(struct buf *b, int fam, const struct gpu_snap *s)
{
    buf_puts(b, gpu_fams[fam].name);
    buf_puts(b, "{worker=\"");
    put_value(b, s->id);
    buf_append(b, "\"", 1);
}

/* name{worker="id"} v\n with an integer value. */
static void gint(struct buf *b, int fam, const struct gpu_snap *s, long long v)
{
    gput(b, fam, s);
    buf_append(b, "} ", 2);
    buf_put_int(b, v);
    buf_append(b, "\n", 1);
}

static void gfixed(struct buf *b, int fam, const struct gpu_snap *s, double v, int decimals)
{
    gput(b, fam, s);
    buf_append(b, "} ", 2);
    buf_put_fixed(b, v, decimals);
    buf_append(b, "\n", 1);
}

static void render_gpu_family(struct buf *b, int fam)
{
    header(b, gpu_fams[fam].name, gpu_fams[fam].type, gpu_fams[fam].help);
    for (int i = 0; i < g_n; i++) {
        const struct gpu_snap *s = &g_snap[i];
        const struct telemetry *t = &s->tel;
        switch (fam) {
        case G_INFO:
            gput(b, fam, s);
            buf_puts(b, ",host=\"");
            put_value(b, s->host);
            buf_puts(b, "\",gpu=\"");
            buf_put_int(b, s->gpu_index);
            buf_puts(b, "\",name=\"");
            put_value(b, s->name);
            buf_puts(b, "\",uuid=\"");
            put_value(b, s->uuid);
            buf_puts(b, "\"} 1\n");
            break;
        case G_STATE:
            gput(b, fam, s);
            buf_puts(b, ",state=\"");
            buf_puts(b, s->state);
            buf_puts(b, "\"} 1\n");
            break;
        case G_TEMP: gfixed(b, fam, s, t->temp_c, 1); break;
        case G_VRAM_USED: gint(b, fam, s, (long long)t->vram_used_mb * 1048576LL); break;
        case G_VRAM_TOTAL: gint(b, fam, s, (long long)t->vram_total_mb * 1048576LL); break;
        case G_UTIL: gfixed(b, fam, s, t->util_pct / 100.0, 3); break;
        case G_POWER: gfixed(b, fam, s, t->power_w, 1); break;
        case G_THROTTLE:
            for (const char *p = t->throttle; *p;) {
                size_t n = strcspn(p, ",");
                if (n > 0 && n < 64) {
                    char reason[64];
                    memcpy(reason, p, n);
                    reason[n] = '\0';
                    gput(b, fam, s);
                    buf_puts(b, ",reason=\"");
                    put_value(b, reason);
                    buf_puts(b, "\"} 1\n");
                }
                p += n;
                if (*p == ',')
                    p++;
            }
            break;
        case G_MODEL:
            for (int m = 0; m < s->nmodels; m++) {
                gput(b, fam, s);
                buf_puts(b, ",model=\"");
                put_value(b, g_models[s->model0 + m]);
                buf_puts(b, "\"} 1\n");
            }
            break;
        case G_INFLIGHT: gint(b, fam, s, s->inflight); break;
        case G_HITS: gint(b, fam, s, s->hits); break;
        case G_MISSES: gint(b, fam, s, s->misses); break;
        case G_BREAKER_TRIPS: gint(b, fam, s, (long long)s->trips); break;
        }
    }
}

static void render_gpus(struct head *h, struct buf *b)
{
    g_n = 0;
    g_nmodels = 0;
    registry_foreach(h->registry, snap_worker, NULL); /* the lock is held for the copy only */
    header(b, "gpuq_workers", "gauge", "Registered GPUs (workers).");
    buf_puts(b, "gpuq_workers ");
    buf_put_int(b, g_n);
    buf_append(b, "\n", 1);
    for (int f = 0; f < G_N; f++)
        render_gpu_family(b, f);
}

static void render_head(struct head *h, struct buf *b)
{
    header(b, "gpuq_build_info", "gauge", "Always 1; the version of gpuqd that answers.");
    buf_printf(b, "gpuq_build_info{version=\"%s\"} 1\n", GPUQ_VERSION);
    struct dispatch_stats ds;
    dispatcher_get_stats(h->disp, &ds);
    header(b, "gpuq_scheduler_jobs", "gauge",
           "Jobs the scheduler holds, by state (queued, placed on a GPU, running).");
    buf_printf(b, "gpuq_scheduler_jobs{state=\"queued\"} %d\n", ds.sched.queued);
    buf_printf(b, "gpuq_scheduler_jobs{state=\"placed\"} %d\n", ds.sched.placed);
    buf_printf(b, "gpuq_scheduler_jobs{state=\"running\"} %d\n", ds.sched.running);
    header(b, "gpuq_scheduler_backlog_gpu_seconds", "gauge",
           "Estimated GPU-seconds of queued and placed work.");
    buf_printf(b, "gpuq_scheduler_backlog_gpu_seconds %.3f\n", ds.sched.backlog_s);
    header(b, "gpuq_scheduler_decisions_total", "counter", "Placements the scheduler made.");
    buf_printf(b, "gpuq_scheduler_decisions_total %lld\n", (long long)ds.sched.decisions);
    header(b, "gpuq_scheduler_moves_total", "counter",
           "Placements moved to a GPU that finishes sooner (late binding).");
    buf_printf(b, "gpuq_scheduler_moves_total %lld\n", (long long)ds.sched.moves);
    header(b, "gpuq_scheduler_holds_total", "counter",
           "Decisions that kept a job queued for a busy but better GPU.");
    buf_printf(b, "gpuq_scheduler_holds_total %lld\n", (long long)ds.sched.holds);
    header(b, "gpuq_scheduler_held_ahead_total", "counter",
           "Jobs handed to a busy GPU to start the moment a slot frees there "
           "(scheduler.assign_ahead_s).");
    buf_printf(b, "gpuq_scheduler_held_ahead_total %lld\n", (long long)ds.sched.handed_ahead);
    header(b, "gpuq_scheduler_started_ahead_total", "counter",
           "Jobs held ahead that started when a slot freed.");
    buf_printf(b, "gpuq_scheduler_started_ahead_total %lld\n", (long long)ds.sched.started_ahead);
    header(b, "gpuq_workers_ready", "gauge", "GPUs ready for work.");
    buf_printf(b, "gpuq_workers_ready %d\n", ds.ready_workers);
    struct committer_stats cs;
    committer_get_stats(h->committer, &cs);
    header(b, "gpuq_store_healthy", "gauge", "1 while the store commits, 0 after a failure.");
    buf_printf(b, "gpuq_store_healthy %d\n", cs.healthy ? 1 : 0);
    header(b, "gpuq_store_failed_batches_total", "counter", "Group commits that failed.");
    buf_printf(b, "gpuq_store_failed_batches_total %lld\n", cs.failed_batches);
    int64_t tbytes, ntraces, evicted;
    trace_stats(&tbytes, &ntraces, &evicted);
    header(b, "gpuq_trace_memory_bytes", "gauge",
           "Memory the jobs' traces hold ([metrics] trace_max_bytes bounds it).");
    buf_printf(b, "gpuq_trace_memory_bytes %lld\n", (long long)tbytes);
    header(b, "gpuq_traces", "gauge", "Jobs whose trace is in memory.");
    buf_printf(b, "gpuq_traces %lld\n", (long long)ntraces);
    header(b, "gpuq_traces_evicted_total", "counter",
           "Traces dropped, oldest first, to stay within trace_max_bytes.");
    buf_printf(b, "gpuq_traces_evicted_total %lld\n", (long long)evicted);
}

void metrics_render(struct head *h, struct buf *out)
{
    pthread_mutex_lock(&scrape_lock);
    buf_reserve(out, last_body_len + last_body_len / 8); /* one allocation, no regrowth */
    render_head(h, out);
    render_queues(h, out);
    render_gpus(h, out);
    for (size_t i = 0; i < sizeof event_families / sizeof event_families[0]; i++)
        render_family(out, event_families[i]);
    last_body_len = out->len;
    pthread_mutex_unlock(&scrape_lock);
}

bool metrics_authorized(const struct head *h, const char *bearer)
{
    if (!h->cfg.metrics_token[0])
        return true;
    if (!bearer || strlen(bearer) > 256)
        return false;
    char want[TOKEN_HASH_HEX], got[TOKEN_HASH_HEX];
    token_hash(h->cfg.metrics_token, want);
    token_hash(bearer, got);
    return token_equal(want, got);
}
