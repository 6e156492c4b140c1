/* trace.c: per-job traces (see trace.h). A job's first steps are kept as
 * values and rendered when read; later ones are JSON objects rendered when
 * they happen, kept in arrival order. The jobs' traces form a list oldest
 * first, from which the byte budget evicts; the budget counts what they take
 * from the allocator. */
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

/* One job's trace, kept small because every queued job has one (issue 20:
 * memory per queued job). The first three steps — accepted, admitted,
 * queued — are the same for every job but for a few values, so they are held
 * as those values (the prelude) and rendered when the trace is read; the
 * capability and model come from the job's record then (a job never changes
 * them). Later steps are rendered JSON objects, packed one after another
 * (each NUL-terminated) in one exactly sized buffer; a queued job has none.
 * Invariants: n counts every step held (prelude and text); ntext of them are
 * in text, len bytes in all; cost is what this trace takes from the budget;
 * n <= T.max_steps + 1 (the finish may exceed the cap by one). */
struct jtrace {
    uint64_t id;
    struct jtrace *newer;      /* the age list, oldest first (evicted from there only) */
    struct jtrace *hnext;      /* hash chain (T.buckets) */
    char *text;                /* ntext steps, each NUL-terminated; NULL when none */
    uint32_t len;              /* bytes of text */
    uint16_t n, ntext;
    uint16_t dropped;          /* steps over the cap (saturates) */
    int16_t last_evictions;    /* of the latest placement: the model load's evictions */
    uint8_t lane, tier;        /* accepted */
    uint8_t flags;             /* P_*: which prelude steps are held, and how */
    /* The prelude's times: base_ms is the first held step's (accepted's when
     * held); the others are ms after it. */
    int32_t admitted_off, queued_off;
    int64_t base_ms;
    int64_t eta_finish_ms;     /* first ETA (wall); 0 = none */
    double cost_s;             /* accepted: the job's estimated cost */
    double eta_start_s, eta_finish_s; /* queued with an ETA (why NULL) */
    const char *why;           /* queued without an ETA: its waiting reason, or NULL */
};
/* 104 bytes: one 112-byte allocation for a queued job's whole trace. */
_Static_assert(sizeof(struct jtrace) <= 104, "a queued job's trace fits 112 bytes");

enum {
    P_ACCEPTED = 1, /* the prelude's steps, in their order (P_ACCEPTED << i) */
    P_ADMITTED = 2,
    P_QUEUED = 4,
    P_HAS_ETA = 8,    /* queued: with an ETA (else why, or nothing) */
    P_WHY_OWNED = 16, /* why is this trace's own copy (not interned) */
    P_TO_END = 32,    /* admitted: its submit is answered at the job's end (?wait) */
};

/* Waiting reasons repeat ("no GPU with capability ..."): the first
 * REASONS_MAX distinct ones are interned, shared by every trace; others are
 * copied per trace. */
#define REASONS_MAX 256

static struct {
    pthread_mutex_t lock;
    struct jtrace **buckets;   /* by id; nbuckets a power of two (or 0) */
    size_t nbuckets;
    struct hashmap reasons;    /* interned waiting reasons (text → itself) */
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

/* What an allocation of n bytes holds of memory (the allocator's header and
 * rounding, as glibc's malloc does it), so that the budget bounds what the
 * traces really take, not only their text. */
static size_t chunk(size_t n)
{
    size_t c = (n + sizeof(size_t) + 15) & ~(size_t)15;
    return c < 32 ? 32 : c;
}

/* What t takes from the budget: its allocations, and its share of the hash
 * table (one bucket pointer). Callers add the change to T.bytes. */
static size_t cost_of(const struct jtrace *t)
{
    size_t c = chunk(sizeof *t) + sizeof(struct jtrace *);
    if (t->text)
        c += chunk(t->len);
    if (t->why && (t->flags & P_WHY_OWNED))
        c += chunk(strlen(t->why) + 1);
    return c;
}

static uint64_t id_hash(uint64_t x)
{
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    return x;
}

static struct jtrace **bucket_of(uint64_t id)
{
    return &T.buckets[id_hash(id) & (T.nbuckets - 1)];
}

/* The table doubles once it holds more traces than buckets. */
static void grow_buckets(void)
{
    size_t n = T.nbuckets ? T.nbuckets * 2 : 1024;
    struct jtrace **old = T.buckets;
    size_t oldn = T.nbuckets;
    T.buckets = xcalloc(n, sizeof *T.buckets);
    T.nbuckets = n;
    for (size_t i = 0; i < oldn; i++) {
        for (struct jtrace *t = old[i], *next; t; t = next) {
            next = t->hnext;
            struct jtrace **b = bucket_of(t->id);
            t->hnext = *b;
            *b = t;
        }
    }
    free(old);
}

static void jtrace_free(struct jtrace *t)
{
    if (t->flags & P_WHY_OWNED)
        free((char *)t->why);
    free(t->text);
    free(t);
}

/* Takes the oldest trace t out (lock held). */
static void unlink_oldest(struct jtrace *t)
{
    T.oldest = t->newer;
    if (!T.oldest)
        T.newest = NULL;
    struct jtrace **pt = bucket_of(t->id);
    while (*pt != t)
        pt = &(*pt)->hnext;
    *pt = t->hnext;
    T.bytes -= cost_of(t);
    T.ntraces--;
}

/* The trace of id (lock held), created when create. */
static struct jtrace *get(uint64_t id, bool create)
{
    if (T.nbuckets) {
        for (struct jtrace *t = *bucket_of(id); t; t = t->hnext)
            if (t->id == id)
                return t;
    }
    if (!create)
        return NULL;
    if ((size_t)T.ntraces + 1 > T.nbuckets)
        grow_buckets();
    struct jtrace *t = xcalloc(1, sizeof *t);
    t->id = id;
    T.bytes += cost_of(t);
    T.ntraces++;
    struct jtrace **b = bucket_of(id);
    t->hnext = *b;
    *b = t;
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

/* Drops the oldest traces but t until the budget holds (lock held). */
static void evict_for(struct jtrace *t)
{
    while (T.bytes > T.max_bytes && T.oldest && T.oldest != t) {
        struct jtrace *old = T.oldest;
        unlink_oldest(old);
        T.evicted++;
        jtrace_free(old);
    }
}

/* Room for one more step in t (lock held): false (counted as dropped) when
 * t is at the cap and the step is not one that is always kept. */
static bool room(struct jtrace *t, bool always)
{
    if (t->n >= T.max_steps && !always) {
        if (t->dropped < UINT16_MAX)
            t->dropped++;
        return false;
    }
    return true;
}

/* Appends a step to the text (lock held): b holds its members after "step";
 * it is closed here. */
static void append(struct jtrace *t, struct buf *b, bool always)
{
    buf_puts(b, "}");
    if (!room(t, always))
        return;
    size_t len = b->len + 1, old = cost_of(t);
    t->text = xrealloc(t->text, t->len + len);
    memcpy(t->text + t->len, b->data, len);
    t->len += (uint32_t)len;
    t->ntext++;
    t->n++;
    T.bytes = T.bytes - old + cost_of(t);
    evict_for(t);
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

/* Takes the lock and finds (or creates) the trace t of id; the caller unlocks. */
#define WITH_TRACE(id, create, t)                                                             \
    pthread_mutex_lock(&T.lock);                                                              \
    struct jtrace *t = get(id, create);                                                       \
    if (t)

static int32_t clamp_off(int64_t ms)
{
    return ms > INT32_MAX ? INT32_MAX : ms < INT32_MIN ? INT32_MIN : (int32_t)ms;
}

/* When prelude step i (0 accepted, 1 admitted, 2 queued) happened; 0 when
 * it is not held. */
static int64_t prelude_at(const struct jtrace *t, int i)
{
    if (!(t->flags & (P_ACCEPTED << i)))
        return 0;
    return t->base_ms + (i == 0 ? 0 : i == 1 ? t->admitted_off : t->queued_off);
}

/* Prelude step i happened at when (lock held). */
static void prelude_step(struct jtrace *t, int i, int64_t when)
{
    if ((t->flags & (P_ACCEPTED << i)) || !room(t, false))
        return; /* each happens once a job; a second one would be a bug, kept out */
    if (!(t->flags & (P_ACCEPTED | P_ADMITTED | P_QUEUED))) {
        t->base_ms = when;
    } else if (i == 0) { /* accepted is the base: the others move by the difference */
        t->admitted_off = clamp_off(t->admitted_off + (t->base_ms - when));
        t->queued_off = clamp_off(t->queued_off + (t->base_ms - when));
        t->base_ms = when;
    }
    if (i == 1)
        t->admitted_off = clamp_off(when - t->base_ms);
    else if (i == 2)
        t->queued_off = clamp_off(when - t->base_ms);
    t->flags |= (uint8_t)(P_ACCEPTED << i);
    t->n++;
    evict_for(t);
}

void trace_accepted(const struct job_rec *r)
{
    WITH_TRACE(r->id, true, t)
    {
        t->lane = (uint8_t)r->lane;
        t->tier = (uint8_t)r->tier;
        t->cost_s = r->cost_s;
        prelude_step(t, 0, r->created_ms);
    }
    pthread_mutex_unlock(&T.lock);
}

void trace_admitted(uint64_t id, bool to_end)
{
    WITH_TRACE(id, true, t)
    {
        if (to_end)
            t->flags |= P_TO_END;
        prelude_step(t, 1, clock_wall_ms());
    }
    pthread_mutex_unlock(&T.lock);
}

/* A waiting reason as this trace keeps it (lock held): interned while there
 * are few distinct ones, else copied. */
static const char *keep_reason(struct jtrace *t, const char *why)
{
    char *v = hashmap_get_str(&T.reasons, why);
    if (v)
        return v;
    if (T.reasons.count < REASONS_MAX) {
        v = xstrdup(why);
        hashmap_put_str(&T.reasons, v, v);
        return v;
    }
    t->flags |= P_WHY_OWNED;
    return xstrdup(why);
}

void trace_queued(uint64_t id, double start_s, double finish_s, const char *why)
{
    int64_t now = clock_wall_ms();
    WITH_TRACE(id, true, t)
    {
        /* The dispatcher may place a job before its ETA is answered: the queued
         * step then takes the time of the first of those placements (it is
         * shown before them). */
        int64_t at = 0;
        const char *p = t->text, *end = t->text + t->len;
        for (; p && p < end; p += strlen(p) + 1) {
            if (!is_step(p, "placed"))
                at = 0;
            else if (!at)
                at = step_at(p);
        }
        if (!(t->flags & P_QUEUED)) {
            if (start_s >= 0) {
                t->flags |= P_HAS_ETA;
                t->eta_start_s = start_s;
                t->eta_finish_s = finish_s;
                if (!t->eta_finish_ms)
                    t->eta_finish_ms = now + (int64_t)(finish_s * 1000);
            } else if (why && *why) {
                size_t old = cost_of(t);
                t->why = keep_reason(t, why);
                T.bytes = T.bytes - old + cost_of(t);
            }
        }
        prelude_step(t, 2, at ? at : now);
    }
    pthread_mutex_unlock(&T.lock);
}

/* Prelude step i, rendered (lock held; the step is held); r the job's record. */
static void render_prelude(const struct jtrace *t, int i, const struct job_rec *r,
                           struct buf *out, bool *first)
{
    struct buf b;
    int64_t at = prelude_at(t, i);
    if (i == 0) {
        step_start(&b, at, "accepted");
        put_str(&b, "capability", r->capability);
        put_str(&b, "model", r->model);
        buf_printf(&b, ",\"lane\":\"%s\",\"tier\":\"%s\",\"cost_s\":%.3f",
                   job_lane_name((enum job_lane)t->lane),
                   job_tier_name((enum job_tier)t->tier), t->cost_s);
    } else if (i == 1) {
        step_start(&b, at, "admitted");
        buf_puts(&b, ",\"detail\":\"stored durably; 201 sent");
        buf_puts(&b, t->flags & P_TO_END ? " when the job ends or the wait runs out\"" : "\"");
    } else {
        step_start(&b, at, "queued");
        if (t->flags & P_HAS_ETA)
            buf_printf(&b, ",\"eta_start_s\":%.3f,\"eta_finish_s\":%.3f", t->eta_start_s,
                       t->eta_finish_s);
        else if (t->why)
            put_str(&b, "waiting_reason", t->why);
    }
    buf_puts(&b, "}");
    buf_puts(out, *first ? "" : ",");
    buf_append(out, b.data, b.len);
    *first = false;
    buf_fini(&b);
}

/* When t's first step happened (0: none held). */
static int64_t first_at(const struct jtrace *t)
{
    for (int i = 0; i < 3; i++)
        if (t->flags & (P_ACCEPTED << i))
            return prelude_at(t, i);
    return t->ntext ? step_at(t->text) : 0;
}

void trace_candidates_json(struct buf *b, const struct sched_explain *why)
{
    buf_puts(b, "[");
    for (int i = 0; i < why->nkept; i++) {
        const struct sched_candidate *c = &why->cand[i];
        buf_puts(b, i ? ",{\"worker\":" : "{\"worker\":");
        json_put_string(b, c->worker_id);
        /* What printf's %.3f / %.2f wrote, without printf (buf_put_fixed). */
        buf_puts(b, ",\"score_s\":");
        buf_put_fixed(b, c->score_s, 3);
        buf_puts(b, ",\"wait_s\":");
        buf_put_fixed(b, c->wait_s, 3);
        buf_puts(b, ",\"load_s\":");
        buf_put_fixed(b, c->load_s, 3);
        buf_puts(b, ",\"run_s\":");
        buf_put_fixed(b, c->run_s, 3);
        buf_puts(b, ",\"thermal\":");
        buf_put_fixed(b, c->thermal_factor, 2);
        buf_puts(b, ",\"load_ratio\":");
        buf_put_fixed(b, c->load_ratio, 2);
        buf_printf(b, ",\"warm\":%s,\"evictions\":%d}", c->warm ? "true" : "false",
                   c->evictions);
    }
    buf_puts(b, "]");
}

void trace_placed(uint64_t id, const char *worker, const struct sched_explain *why,
                  const char *cands, size_t cands_len)
{
    int64_t now = clock_wall_ms();
    const struct sched_candidate *won = sched_explain_candidate(why, worker);
    int e = won ? won->evictions : 0;
    int16_t evictions = (int16_t)(e > INT16_MAX ? INT16_MAX : e);
    WITH_TRACE(id, true, t)
    {
        struct buf b;
        step_start(&b, now, "placed");
        put_str(&b, "worker", worker);
        put_str(&b, "reason", why->reason);
        buf_printf(&b, ",\"scored\":%d,\"filtered\":{\"capability\":%d,\"vram\":%d,\"busy\":%d,"
                       "\"unhealthy\":%d},\"candidates\":",
                   why->ncandidates, why->filtered_capability, why->filtered_vram,
                   why->filtered_busy, why->filtered_unhealthy);
        buf_append(&b, cands, cands_len);
        t->last_evictions = evictions;
        append(t, &b, false);
        buf_fini(&b);
    }
    pthread_mutex_unlock(&T.lock);
}

void trace_assigned(uint64_t id, const char *worker, int attempt, int64_t at_ms)
{
    WITH_TRACE(id, true, t)
    {
        struct buf b;
        step_start(&b, at_ms, "assigned");
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
    bool whole = t && (t->flags & P_ACCEPTED);
    if (!whole) {
        /* Restarted, or evicted: the store's history first, then what we saw since. */
        int64_t before = t ? first_at(t) : 0;
        render_from_record(r, before, !t, out, &first);
        source = t ? "store+memory" : "store";
    }
    if (t) {
        /* Steps in time order. A job dispatched while its insert commits
         * (head.c, submit_early) is admitted after it is placed, or even
         * assigned: its admitted step goes where it happened. Ties keep the
         * prelude first, and the prelude in its own order. */
        int order[3], np = 0;
        for (int i = 0; i < 3; i++) {
            if (!(t->flags & (P_ACCEPTED << i)))
                continue;
            int k = np++;
            for (; k > 0 && prelude_at(t, order[k - 1]) > prelude_at(t, i); k--)
                order[k] = order[k - 1];
            order[k] = i;
        }
        int next = 0;
        for (const char *p = t->text, *end = t->text + t->len; p && p < end;
             p += strlen(p) + 1) {
            while (next < np && prelude_at(t, order[next]) <= step_at(p))
                render_prelude(t, order[next++], r, out, &first);
            buf_puts(out, first ? "" : ",");
            buf_puts(out, p);
            first = false;
        }
        while (next < np)
            render_prelude(t, order[next++], r, out, &first);
        dropped = t->dropped;
    }
    pthread_mutex_unlock(&T.lock);
    buf_printf(out, "],\"dropped\":%d,\"source\":\"%s\"}", dropped, source);
}
