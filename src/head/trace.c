/* trace.c: per-job traces (see trace.h). Each job's steps are JSON objects
 * rendered when they happen, kept in arrival order; the jobs' traces form a
 * list oldest first, from which the byte budget evicts. */
#include "head/trace.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/hashmap.h"
#include "head/metrics.h"

/* One job's trace. Invariants: steps[0..n) in arrival order; bytes is the sum
 * of their lengths plus the struct; n <= T.max_steps + 1 (the finish may
 * exceed the cap by one). */
struct jtrace {
    uint64_t id;
    char **steps;
    int n, cap;
    int dropped;
    size_t bytes;
    int64_t eta_finish_ms;     /* first ETA (wall); 0 = none */
    int last_evictions;        /* of the latest placement: the model load's evictions */
    struct jtrace *older, *newer;
};

static struct {
    pthread_mutex_t lock;
    struct hashmap map;        /* job id → struct jtrace */
    struct jtrace *oldest, *newest;
    size_t bytes;              /* <= max_bytes, but for the newest trace alone */
    size_t max_bytes;
    int max_steps;
    int64_t ntraces, evicted;
} T = {.lock = PTHREAD_MUTEX_INITIALIZER, .max_bytes = TRACE_MAX_BYTES,
       .max_steps = TRACE_MAX_STEPS};

void trace_set_limits(int64_t max_bytes, int max_steps)
{
    pthread_mutex_lock(&T.lock);
    if (max_bytes > 0)
        T.max_bytes = (size_t)max_bytes;
    if (max_steps > 0)
        T.max_steps = max_steps;
    pthread_mutex_unlock(&T.lock);
}

void trace_stats(int64_t *bytes, int64_t *traces, int64_t *evicted)
{
    pthread_mutex_lock(&T.lock);
    *bytes = (int64_t)T.bytes;
    *traces = T.ntraces;
    *evicted = T.evicted;
    pthread_mutex_unlock(&T.lock);
}

static void jtrace_free(struct jtrace *t)
{
    for (int i = 0; i < t->n; i++)
        free(t->steps[i]);
    free(t->steps);
    free(t);
}

static void unlink_trace(struct jtrace *t)
{
    if (t->older)
        t->older->newer = t->newer;
    else
        T.oldest = t->newer;
    if (t->newer)
        t->newer->older = t->older;
    else
        T.newest = t->older;
    hashmap_del_u64(&T.map, t->id);
    T.bytes -= t->bytes;
    T.ntraces--;
}

/* The trace of id (lock held), created when create. */
static struct jtrace *get(uint64_t id, bool create)
{
    struct jtrace *t = hashmap_get_u64(&T.map, id);
    if (t || !create)
        return t;
    t = xcalloc(1, sizeof *t);
    t->id = id;
    t->bytes = sizeof *t;
    T.bytes += t->bytes;
    T.ntraces++;
    hashmap_put_u64(&T.map, id, t);
    t->older = T.newest;
    if (T.newest)
        T.newest->newer = t;
    else
        T.oldest = t;
    T.newest = t;
    return t;
}

static bool is_step(const char *step_json, const char *name)
{
    const char *p = strstr(step_json, ",\"step\":\"");
    size_t n = strlen(name);
    return p && !strncmp(p + 9, name, n) && p[9 + n] == '"';
}

static int64_t step_at(const char *step_json)
{
    return strtoll(step_json + strlen("{\"at_ms\":"), NULL, 10);
}

/* Appends a step (lock held): b holds its members after "step"; it is closed
 * here. before_placed: it goes before the placements at the end of the list
 * (the queued step: the dispatcher places a job before its ETA is answered). */
static void insert(struct jtrace *t, struct buf *b, bool always, bool before_placed)
{
    buf_puts(b, "}");
    if (t->n >= T.max_steps && !always) {
        t->dropped++;
        return;
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 8;
        t->steps = xrealloc(t->steps, (size_t)t->cap * sizeof *t->steps);
    }
    size_t len = b->len + 1;
    int at = t->n;
    while (before_placed && at > 0 && is_step(t->steps[at - 1], "placed"))
        at--;
    memmove(&t->steps[at + 1], &t->steps[at], (size_t)(t->n - at) * sizeof *t->steps);
    t->steps[at] = buf_steal(b);
    t->n++;
    t->bytes += len;
    T.bytes += len;
    while (T.bytes > T.max_bytes && T.oldest && T.oldest != t) {
        struct jtrace *old = T.oldest;
        unlink_trace(old);
        T.evicted++;
        jtrace_free(old);
    }
}

static void append(struct jtrace *t, struct buf *b, bool always)
{
    insert(t, b, always, false);
}

static void step_start(struct buf *b, int64_t at_ms, const char *step)
{
    buf_init(b);
    buf_printf(b, "{\"at_ms\":%lld,\"step\":\"%s\"", (long long)at_ms, step);
}

static void put_str(struct buf *b, const char *key, const char *val)
{
    buf_printf(b, ",\"%s\":", key);
    json_put_string(b, val);
}

/* Takes the lock and finds (or creates) the trace t of id; the caller unlocks.
 * The map starts zeroed: an empty map (hashmap_init's state). */
#define WITH_TRACE(id, create, t)                                                             \
    pthread_mutex_lock(&T.lock);                                                              \
    struct jtrace *t = get(id, create);                                                       \
    if (t)

void trace_accepted(const struct job_rec *r)
{
    WITH_TRACE(r->id, true, t)
    {
        struct buf b;
        step_start(&b, r->created_ms, "accepted");
        put_str(&b, "capability", r->capability);
        put_str(&b, "model", r->model);
        buf_printf(&b, ",\"lane\":\"%s\",\"tier\":\"%s\",\"cost_s\":%.3f",
                   job_lane_name(r->lane), job_tier_name(r->tier), r->cost_s);
        append(t, &b, false);
        buf_fini(&b);
    }
    pthread_mutex_unlock(&T.lock);
}

void trace_admitted(uint64_t id)
{
    WITH_TRACE(id, true, t)
    {
        struct buf b;
        step_start(&b, clock_wall_ms(), "admitted");
        buf_puts(&b, ",\"detail\":\"stored durably; 201 sent\"");
        append(t, &b, false);
        buf_fini(&b);
    }
    pthread_mutex_unlock(&T.lock);
}

void trace_queued(uint64_t id, double start_s, double finish_s, const char *why)
{
    int64_t now = clock_wall_ms();
    WITH_TRACE(id, true, t)
    {
        int first_placed = t->n;
        while (first_placed > 0 && is_step(t->steps[first_placed - 1], "placed"))
            first_placed--;
        struct buf b;
        step_start(&b, first_placed < t->n ? step_at(t->steps[first_placed]) : now, "queued");
        if (start_s >= 0) {
            buf_printf(&b, ",\"eta_start_s\":%.3f,\"eta_finish_s\":%.3f", start_s, finish_s);
            if (!t->eta_finish_ms)
                t->eta_finish_ms = now + (int64_t)(finish_s * 1000);
        } else if (why && *why) {
            put_str(&b, "waiting_reason", why);
        }
        insert(t, &b, false, true);
        buf_fini(&b);
    }
    pthread_mutex_unlock(&T.lock);
}

void trace_placed(uint64_t id, const char *worker, const struct sched_explain *why)
{
    int64_t now = clock_wall_ms();
    WITH_TRACE(id, true, t)
    {
        struct buf b;
        step_start(&b, now, "placed");
        put_str(&b, "worker", worker);
        put_str(&b, "reason", why->reason);
        buf_printf(&b, ",\"scored\":%d,\"filtered\":{\"capability\":%d,\"vram\":%d,\"busy\":%d,"
                       "\"unhealthy\":%d},\"candidates\":[",
                   why->ncandidates, why->filtered_capability, why->filtered_vram,
                   why->filtered_busy, why->filtered_unhealthy);
        t->last_evictions = 0;
        for (int i = 0; i < why->nkept; i++) {
            const struct sched_candidate *c = &why->cand[i];
            if (!strcmp(c->worker_id, worker))
                t->last_evictions = c->evictions;
            buf_puts(&b, i ? ",{\"worker\":" : "{\"worker\":");
            json_put_string(&b, c->worker_id);
            buf_printf(&b,
                       ",\"score_s\":%.3f,\"wait_s\":%.3f,\"load_s\":%.3f,\"run_s\":%.3f,"
                       "\"thermal\":%.2f,\"warm\":%s,\"evictions\":%d}",
                       c->score_s, c->wait_s, c->load_s, c->run_s, c->thermal_factor,
                       c->warm ? "true" : "false", c->evictions);
        }
        buf_puts(&b, "]");
        append(t, &b, false);
        buf_fini(&b);
    }
    pthread_mutex_unlock(&T.lock);
}

void trace_assigned(uint64_t id, const char *worker, int attempt)
{
    int64_t now = clock_wall_ms();
    WITH_TRACE(id, true, t)
    {
        struct buf b;
        step_start(&b, now, "assigned");
        put_str(&b, "worker", worker);
        buf_printf(&b, ",\"attempt\":%d", attempt);
        append(t, &b, false);
        buf_fini(&b);
    }
    pthread_mutex_unlock(&T.lock);
}

void trace_progress(uint64_t id, int attempt, enum job_phase old_phase, double old_progress,
                    enum job_phase phase, double progress)
{
    const char *step = NULL;
    if (phase != old_phase && phase == PHASE_LOADING)
        step = "model_load";
    else if (phase != old_phase && phase == PHASE_GENERATING)
        step = "started";
    else if ((int)(progress * 4) > (int)(old_progress * 4))
        step = "progress";
    if (!step)
        return;
    int64_t now = clock_wall_ms();
    WITH_TRACE(id, true, t)
    {
        struct buf b;
        step_start(&b, now, step);
        buf_printf(&b, ",\"attempt\":%d,\"progress\":%.3f", attempt, progress);
        if (phase == PHASE_LOADING && old_phase != PHASE_LOADING)
            buf_printf(&b, ",\"evictions\":%d", t->last_evictions);
        append(t, &b, false);
        buf_fini(&b);
    }
    pthread_mutex_unlock(&T.lock);
}

static void put_attempt(struct buf *b, const struct lc_attempt *a)
{
    buf_printf(b, ",\"attempt\":%d", a->n);
    put_str(b, "worker", a->worker);
    buf_printf(b, ",\"outcome\":\"%s\"", lc_outcome_name(a->outcome));
    if (a->error_class[0])
        put_str(b, "error_class", a->error_class);
    if (a->error[0])
        put_str(b, "error", a->error);
}

void trace_attempt_ended(const struct job_rec *r, const struct lc_attempt *a)
{
    WITH_TRACE(r->id, true, t)
    {
        struct buf b;
        bool retry = r->lc.state == LC_QUEUED;
        step_start(&b, a->ended_ms ? a->ended_ms : clock_wall_ms(),
                   retry ? "retry" : "attempt_ended");
        put_attempt(&b, a);
        append(t, &b, false);
        buf_fini(&b);
    }
    pthread_mutex_unlock(&T.lock);
}

static void put_finished(struct buf *b, const struct job_rec *r)
{
    buf_printf(b, ",\"state\":\"%s\"", job_state_name(job_rec_state(r)));
    if (job_rec_state(r) == JOB_SUCCEEDED)
        return; /* an earlier attempt's error stays in the record: not this outcome's */
    if (r->error_class[0])
        put_str(b, "error_class", r->error_class);
    if (r->error_message[0])
        put_str(b, "error", r->error_message);
}

void trace_finished(const struct job_rec *r)
{
    int64_t at = r->finished_ms ? r->finished_ms : clock_wall_ms();
    int64_t eta = 0;
    WITH_TRACE(r->id, true, t)
    {
        struct buf b;
        step_start(&b, at, "finished");
        put_finished(&b, r);
        if (job_rec_state(r) == JOB_SUCCEEDED && t->eta_finish_ms) {
            eta = t->eta_finish_ms;
            buf_printf(&b, ",\"eta_error_s\":%.3f", (double)(at - eta) / 1e3);
        }
        append(t, &b, true);
        buf_fini(&b);
    }
    pthread_mutex_unlock(&T.lock);
    if (eta)
        metrics_eta_error((double)(at - eta) / 1e3);
}

/* Steps rebuilt from the record (the store's view) before 'before_ms'. */
static void render_from_record(const struct job_rec *r, int64_t before_ms, bool finish,
                               struct buf *out, bool *first)
{
    struct buf b;
#define EMIT()                                                                                \
    do {                                                                                      \
        buf_puts(&b, ",\"source\":\"store\"}");                                               \
        buf_puts(out, *first ? "" : ",");                                                     \
        buf_append(out, b.data, b.len);                                                       \
        *first = false;                                                                       \
        buf_fini(&b);                                                                         \
    } while (0)
    step_start(&b, r->created_ms, "accepted");
    put_str(&b, "capability", r->capability);
    put_str(&b, "model", r->model);
    buf_printf(&b, ",\"lane\":\"%s\"", job_lane_name(r->lane));
    EMIT();
    for (int i = 0; i < r->nattempts; i++) {
        const struct lc_attempt *a = &r->attempts[i];
        if (before_ms && a->ended_ms >= before_ms)
            break;
        if (a->started_ms) {
            step_start(&b, a->started_ms, "assigned");
            put_str(&b, "worker", a->worker);
            buf_printf(&b, ",\"attempt\":%d", a->n);
            EMIT();
        }
        bool retry = a->outcome != LC_OUT_OK &&
                     (i + 1 < r->nattempts || !lc_terminal(r->lc.state));
        step_start(&b, a->ended_ms, retry ? "retry" : "attempt_ended");
        put_attempt(&b, a);
        EMIT();
    }
    if (finish && lc_terminal(r->lc.state)) {
        step_start(&b, r->finished_ms, "finished");
        put_finished(&b, r);
        EMIT();
    }
#undef EMIT
}

void trace_render(const struct job_rec *r, struct buf *out)
{
    buf_printf(out, "{\"job\":\"%llu\",\"state\":\"%s\",\"steps\":[", (unsigned long long)r->id,
               job_state_name(job_rec_state(r)));
    bool first = true;
    const char *source = "memory";
    int dropped = 0;
    pthread_mutex_lock(&T.lock);
    struct jtrace *t = get(r->id, false);
    bool whole = t && t->n > 0 && is_step(t->steps[0], "accepted");
    if (!whole) {
        /* Restarted, or evicted: the store's history first, then what we saw since. */
        int64_t before = 0;
        if (t && t->n > 0)
            before = step_at(t->steps[0]);
        render_from_record(r, before, !t, out, &first);
        source = t ? "store+memory" : "store";
    }
    if (t) {
        for (int i = 0; i < t->n; i++) {
            buf_puts(out, first ? "" : ",");
            buf_puts(out, t->steps[i]);
            first = false;
        }
        dropped = t->dropped;
    }
    pthread_mutex_unlock(&T.lock);
    buf_printf(out, "],\"dropped\":%d,\"source\":\"%s\"}", dropped, source);
}
