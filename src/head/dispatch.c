/* dispatch.c: the dispatcher (see dispatch.h): the scheduler, the
 * per-worker circuit breakers, agents' long-polls, and the tick that drives
 * leases, timeouts and deadlines (head_tick) and breaker cool-downs, which
 * stays on the dispatcher's own thread. */
#include "head/dispatch.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/hashmap.h"
#include "common/err.h"
#include "common/log.h"
#include "common/timer.h"
#include "core/preempt.h"
#include "head/admission.h"
#include "head/head.h"
#include "head/fleet.h"
#include "head/metrics.h"
#include "head/trace.h"

#define MOD "dispatch"
#define MAX_EXPIRE 64
#define LIFECYCLE_TICK_NS (100 * NS_PER_MS)
/* The loop runs at least every tick; later than two ticks means the process
 * stood still (or could not run), and the time beyond that is forgiven. */
#define STALL_SLACK_NS (2 * LIFECYCLE_TICK_NS)

enum dmsg_kind {
    M_JOB_ADD, M_JOB_CANCEL, M_JOB_FINISHED, M_JOB_RELEASED, M_WORKER_UPDATE, M_WORKER_REMOVE,
    M_POLL,
    M_KICK, /* nothing to apply: run a round (after a pause, resume or promotion) */
    M_JOBS_ADD, /* many queued jobs at once (recovery): specs[0..nspecs) */
};

/* A waiting long-poll of one worker. Shared by the dispatcher and the timer
 * (refs == 2 while both hold it). State moves waiting → claimed → done (the
 * answer goes out with the job), or waiting → abandoned (the poll timed out
 * first: the answer goes out empty). The answer callback runs exactly once. */
struct poller {
    struct dispatch_poll_worker ws[DISPATCH_POLL_WORKERS]; /* each max 1..DISPATCH_POLL_MAX */
    int nws;
    pthread_mutex_t lock;
    int refs;
    enum { P_WAITING, P_CLAIMED, P_DONE, P_ABANDONED } state;
    void (*answer)(void *arg, int rc, const struct job_rec *recs, int n);
    void *arg;
    bool early; /* answered before the assignment is durable (dispatcher_poll) */
    bool many;  /* early and may take more than one: answered once, from copies */
    struct poller *next;
};

struct dmsg {
    enum dmsg_kind kind;
    struct job_spec spec;
    char exclude[LC_MAX_FAILED][SCHED_NAME_MAX]; /* spec.exclude points here */
    uint64_t job_id;
    char worker_id[SCHED_NAME_MAX];
    bool ok;
    bool verdict;                 /* JOB_FINISHED: the attempt's end says something of the worker */
    int64_t at_ns;                /* JOB_FINISHED: when its end was heard (before any later report) */
    dispatch_eta_fn eta_fn;       /* JOB_ADD: answered with the job's ETA once dispatched */
    void *eta_arg;
    int eta_rc;                   /* JOB_ADD: the ETA, read under the scheduler lock */
    double eta_start_s, eta_finish_s;
    char eta_why[160];
    char cls[LC_CLASS_MAX];
    int64_t load_ns, run_ns;
    struct poller *poller;
    struct job_spec *specs;       /* JOBS_ADD: owned; none has exclusions */
    int nspecs;
    struct dmsg *next;
};

struct dispatcher {
    struct head *h;
    struct sched *sched;
    pthread_rwlock_t sched_lock; /* written by the dispatcher thread, read for cost estimates */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct dmsg *head, *tail;
    bool stopping;
    bool idle;                   /* the thread waits on wake */
    /* A round runs under round_lock: on the dispatcher thread, or on a
     * request's thread while that one sleeps (run_here). */
    pthread_mutex_t round_lock;
    atomic_int npollers; /* polls in the list below: a round run here may answer one */
    /* under round_lock: */
    int64_t last_publish_ns;
    struct poller *pollers;
    struct dmsg *eta_pending;    /* added jobs whose ETA is answered after this round */
    int64_t next_expiry_ns;
    int64_t next_tick_ns;
    int64_t last_loop_ns;        /* when the loop last ran (stall detection) */
    struct hashmap breakers;     /* worker id → struct breaker (kept when a worker leaves) */
    struct hashmap lanes;        /* worker id → struct lane_share (admission capacity, R8) */
    int nreserved;               /* workers in the reserved interactive pool */
    char losing[SCHED_NAME_MAX]; /* the worker sched_worker_remove reports lost jobs of */
    /* published under lock: */
    struct dispatch_stats stats;
};

/* A worker's part of the lanes' capacity. reserved is decided once, when the
 * worker is first seen: the first [admission] reserved_gpus workers. */
struct lane_share {
    double gpu_s_per_s; /* speed x slots while usable, else 0 */
    bool reserved;
};

static void poller_unref(struct poller *p)
{
    pthread_mutex_lock(&p->lock);
    int left = --p->refs;
    pthread_mutex_unlock(&p->lock);
    if (left == 0) {
        pthread_mutex_destroy(&p->lock);
        free(p);
    }
}

static void poller_finish(struct poller *p, int rc, const struct job_rec *recs, int n);

static bool run_here(struct dispatcher *d);

/* How a message reaches a sleeping dispatcher: woken (WAKE), by a round run
 * here when possible (RUN_HERE: the caller holds no lock), or not yet
 * (LATER: the caller calls dispatcher_run once it holds no lock). */
enum post_how { WAKE, RUN_HERE, LATER };

static void post_how(struct dispatcher *d, struct dmsg *m, enum post_how how)
{
    m->next = NULL;
    pthread_mutex_lock(&d->lock);
    if (d->stopping) {
        pthread_mutex_unlock(&d->lock);
        if (m->kind == M_POLL)
            poller_finish(m->poller, GPUQ_EAGAIN, NULL, 0);
        if (m->eta_fn)
            m->eta_fn(m->eta_arg, GPUQ_EAGAIN, -1, -1, "");
        free(m->specs);
        free(m);
        return;
    }
    if (d->tail)
        d->tail->next = m;
    else
        d->head = m;
    d->tail = m;
    bool wake = d->idle;
    pthread_mutex_unlock(&d->lock);
    /* After the unlock: woken under it, the dispatcher would only block on
     * the lock again, a second wake-up. It looks at the queue under the lock
     * before it sleeps, so none is lost. */
    if (wake && how != LATER && !(how == RUN_HERE && run_here(d)))
        pthread_cond_signal(&d->wake);
}

static void post(struct dispatcher *d, struct dmsg *m) { post_how(d, m, WAKE); }

/* excl holds the excluded workers (the failed set) spec->exclude points at (kept by the caller). */
static void spec_from_rec(const struct job_rec *rec, struct job_spec *spec,
                          char (*excl)[SCHED_NAME_MAX])
{
    memset(spec, 0, sizeof *spec);
    spec->id = rec->id;
    snprintf(spec->capability, sizeof spec->capability, "%s", rec->capability);
    snprintf(spec->model, sizeof spec->model, "%s", rec->model);
    spec->lane = rec->lane == LANE_BATCH ? SCHED_LANE_BATCH : SCHED_LANE_INTERACTIVE;
    spec->tier = rec->tier == TIER_FREE ? SCHED_TIER_FREE : SCHED_TIER_PAID;
    spec->width = rec->width;
    spec->height = rec->height;
    spec->steps = rec->steps;
    spec->frames = rec->frames;
    spec->submit_ns = clock_mono_of_wall_ms(rec->created_ms);
    spec->order_ns = rec->order_ns;
    const char(*list)[SCHED_NAME_MAX];
    int n;
    lc_exclusions(&rec->lc, &list, &n);
    for (int i = 0; i < n; i++)
        snprintf(excl[i], SCHED_NAME_MAX, "%s", list[i]);
    spec->exclude = (const char(*)[SCHED_NAME_MAX])excl;
    spec->nexclude = n;
}

void dispatcher_job_add(struct dispatcher *d, const struct job_rec *rec)
{
    struct dmsg *m = xcalloc(1, sizeof *m);
    m->kind = M_JOB_ADD;
    spec_from_rec(rec, &m->spec, m->exclude);
    post(d, m);
}

void dispatcher_adds_put(struct dispatcher *d, struct dispatch_adds *a, const struct job_rec *rec)
{
    const char(*list)[SCHED_NAME_MAX];
    int n;
    lc_exclusions(&rec->lc, &list, &n);
    if (n > 0) { /* its exclusions live in a message of its own */
        dispatcher_job_add(d, rec);
        return;
    }
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 1024;
        a->specs = xrealloc(a->specs, (size_t)a->cap * sizeof *a->specs);
    }
    char none[1][SCHED_NAME_MAX];
    spec_from_rec(rec, &a->specs[a->n], none);
    a->specs[a->n].exclude = NULL;
    a->n++;
    if (a->n >= DISPATCH_ADDS_CHUNK)
        dispatcher_adds_post(d, a);
}

void dispatcher_adds_post(struct dispatcher *d, struct dispatch_adds *a)
{
    if (a->n == 0)
        return;
    struct dmsg *m = xcalloc(1, sizeof *m);
    m->kind = M_JOBS_ADD;
    m->specs = a->specs;
    m->nspecs = a->n;
    a->specs = NULL;
    a->n = a->cap = 0;
    post(d, m);
}

void dispatcher_job_add_eta(struct dispatcher *d, const struct job_rec *rec, dispatch_eta_fn fn,
                            void *arg, bool later)
{
    struct dmsg *m = xcalloc(1, sizeof *m);
    m->kind = M_JOB_ADD;
    spec_from_rec(rec, &m->spec, m->exclude);
    m->eta_fn = fn;
    m->eta_arg = arg;
    post_how(d, m, later ? LATER : WAKE);
}

void dispatcher_job_cancel(struct dispatcher *d, uint64_t job_id)
{
    struct dmsg *m = xcalloc(1, sizeof *m);
    m->kind = M_JOB_CANCEL;
    m->job_id = job_id;
    post(d, m);
}

void dispatcher_job_finished(struct dispatcher *d, uint64_t job_id, const char *worker_id,
                             bool ok, const char *cls, int64_t load_ns, int64_t run_ns)
{
    struct dmsg *m = xcalloc(1, sizeof *m);
    m->kind = M_JOB_FINISHED;
    m->job_id = job_id;
    snprintf(m->worker_id, sizeof m->worker_id, "%s", worker_id);
    m->ok = ok;
    m->verdict = cls != NULL;
    m->at_ns = clock_mono_ns();
    snprintf(m->cls, sizeof m->cls, "%s", cls ? cls : "");
    m->load_ns = load_ns;
    m->run_ns = run_ns;
    post(d, m);
}

void dispatcher_job_released(struct dispatcher *d, uint64_t job_id, const char *worker_id,
                             int64_t load_ns, int64_t run_ns)
{
    struct dmsg *m = xcalloc(1, sizeof *m);
    m->kind = M_JOB_RELEASED;
    m->job_id = job_id;
    snprintf(m->worker_id, sizeof m->worker_id, "%s", worker_id);
    m->ok = true;
    m->load_ns = load_ns;
    m->run_ns = run_ns;
    post(d, m);
}

void dispatcher_worker_update(struct dispatcher *d, const char *worker_id)
{
    struct dmsg *m = xcalloc(1, sizeof *m);
    m->kind = M_WORKER_UPDATE;
    snprintf(m->worker_id, sizeof m->worker_id, "%s", worker_id);
    post(d, m);
}

void dispatcher_worker_remove(struct dispatcher *d, const char *worker_id)
{
    struct dmsg *m = xcalloc(1, sizeof *m);
    m->kind = M_WORKER_REMOVE;
    snprintf(m->worker_id, sizeof m->worker_id, "%s", worker_id);
    post(d, m);
}

static void poller_timeout(void *arg)
{
    struct poller *p = arg;
    pthread_mutex_lock(&p->lock);
    bool mine = p->state == P_WAITING;
    if (mine)
        p->state = P_ABANDONED;
    pthread_mutex_unlock(&p->lock);
    if (mine)
        p->answer(p->arg, GPUQ_EAGAIN, NULL, 0);
    poller_unref(p);
}

void dispatcher_poll(struct dispatcher *d, const struct dispatch_poll_worker *ws, int nws,
                     int64_t deadline_ns, bool early, dispatch_answer_fn answer, void *arg)
{
    struct poller *p = xcalloc(1, sizeof *p);
    p->early = early;
    p->nws = early ? (nws < DISPATCH_POLL_WORKERS ? nws : DISPATCH_POLL_WORKERS) : 1;
    for (int i = 0; i < p->nws; i++) {
        p->ws[i] = ws[i];
        int max = early ? ws[i].max : 1;
        p->ws[i].max = max < 1 ? 1 : max < DISPATCH_POLL_MAX ? max : DISPATCH_POLL_MAX;
        p->many = p->many || p->ws[i].max > 1 || i > 0;
    }
    pthread_mutex_init(&p->lock, NULL);
    p->refs = 2;
    p->state = P_WAITING;
    p->answer = answer;
    p->arg = arg;
    timers_add(d->h->timers, deadline_ns, poller_timeout, p);
    struct dmsg *m = xcalloc(1, sizeof *m);
    m->kind = M_POLL;
    m->poller = p;
    post_how(d, m, RUN_HERE);
}

/* The dispatcher's side ends: answer with rc (and the jobs) unless the timer did. */
static void poller_finish(struct poller *p, int rc, const struct job_rec *recs, int n)
{
    pthread_mutex_lock(&p->lock);
    bool mine = p->state == P_WAITING || p->state == P_CLAIMED;
    if (mine)
        p->state = P_DONE;
    pthread_mutex_unlock(&p->lock);
    if (mine)
        p->answer(p->arg, rc, recs, n);
    poller_unref(p);
}

/* An assignment being committed: the poller gets the job once it is durable,
 * or (an early poller) got it already and poller is NULL. */
struct assign_op {
    struct commit_op op;
    struct dispatcher *d;
    struct poller *poller;
    struct job_rec rec;
};

static int assign_apply(struct store *s, struct commit_op *op)
{
    struct assign_op *a = (struct assign_op *)op;
    return s->ops->job_update(s, &a->rec);
}

static void assign_done(struct commit_op *op, int rc)
{
    struct assign_op *a = (struct assign_op *)op;
    struct head *h = a->d->h;
    if (rc) {
        /* Not durable: the agent never sees it; the job goes back to the queue. */
        log_warn(MOD, "assignment of job %llu not stored (%s); re-queued",
                 (unsigned long long)a->rec.id, gpuq_strerror(rc));
        head_assign_failed(h, a->rec.id, a->rec.lc.worker, a->rec.lc.attempt);
        if (a->poller)
            poller_finish(a->poller, GPUQ_EAGAIN, NULL, 0);
    } else {
        jobs_lock(h->jobs);
        struct hjob *j = jobs_find(h->jobs, a->rec.id);
        if (j)
            jobs_changed(h->jobs, j);
        jobs_unlock(h->jobs);
        admission_job_state(h->admission, a->rec.id, JOB_RUNNING);
        if (a->poller) {
            trace_assigned(a->rec.id, a->rec.lc.worker, a->rec.lc.attempt, clock_wall_ms());
            poller_finish(a->poller, 0, &a->rec, 1);
        }
    }
    job_rec_free_fields(&a->rec);
    free(a);
}

/* Makes the job running on the poller's worker: memory and the commit queue
 * now (under the table lock, see jobs.h); the poller gets it once durable. */
static struct breaker *breaker_of(struct dispatcher *d, const char *worker_id);
static void refresh_worker(struct dispatcher *d, const char *id, int64_t now);
static void publish_capacity(struct dispatcher *d);

static bool assign(struct dispatcher *d, struct poller *p, const char *worker_id, uint64_t job_id,
                   struct job_rec *copy)
{
    struct head *h = d->h;
    bool ok = false;
    jobs_lock(h->jobs);
    struct hjob *j = jobs_find(h->jobs, job_id);
    struct lc_now now = {clock_mono_ns(), clock_wall_ms()};
    if (j && lc_assign_in(&h->cfg.lifecycle, &j->rec.lc, worker_id, h->boot_epoch, now) == 0) {
        j->rec.phase = PHASE_ASSIGNED;
        j->rec.progress = 0;
        j->rec.started_ms = now.wall_ms;
        metrics_job_assigned(&j->rec, now.wall_ms);
        jobs_retrack(h->jobs, j);
        registry_inflight(h->registry, worker_id, +1);
        breaker_assigned(breaker_of(d, worker_id));
        struct assign_op *a = xcalloc(1, sizeof *a);
        a->rec = j->rec;
        a->rec.params_json = xstrdup(j->rec.params_json ? j->rec.params_json : "{}");
        a->rec.attempts = NULL;
        a->rec.nattempts = 0;
        a->op.apply = assign_apply;
        a->op.done = assign_done;
        a->d = d;
        a->poller = p;
        if (p->early) {
            /* The agent echoes the head's epoch on every outcome of it, so
             * it need not wait for this commit: if the head dies first, the
             * stored job is still queued and runs again, and this attempt's
             * outcomes, from an earlier boot, are refused (lc_fence_epoch).
             * Answered before the op is queued and under the table lock (or,
             * several to one poll, from copies after it is queued), so no
             * outcome of it can reach the committer ahead of it. Traced now,
             * in its place among the job's steps: the commit may come after
             * the job's own result. */
            trace_assigned(j->rec.id, worker_id, j->rec.lc.attempt, now.wall_ms);
            if (copy)
                job_rec_copy(copy, &a->rec);
            else
                poller_finish(p, 0, &a->rec, 1);
            a->poller = NULL;
            /* Nobody waits on this commit, so it waits for company: the
             * next commit someone waits on (a submit, or this job's own
             * result) carries it, or it goes alone after
             * LAZY_COMMIT_DELAY_MS. A short job's result then needs one
             * fsync, not the assignment's and then its own. */
            committer_submit_lazy(h->committer, &a->op, LAZY_COMMIT_DELAY_MS * NS_PER_MS);
        } else {
            committer_submit(h->committer, &a->op);
        }
        ok = true;
    }
    jobs_unlock(h->jobs);
    if (!ok) {
        /* Cancelled (or gone) after it was queued: free its slot and look again. */
        sched_job_finished(d->sched, job_id, false, 0, 0, clock_mono_ns());
    }
    return ok;
}

/* Puts a job the scheduler handed out, but nobody took, back in its queue. */
static void readd(struct dispatcher *d, uint64_t job_id, int64_t now)
{
    struct job_spec spec;
    char excl[LC_MAX_FAILED][SCHED_NAME_MAX];
    bool found = false;
    jobs_lock(d->h->jobs);
    struct hjob *j = jobs_find(d->h->jobs, job_id);
    if (j && j->rec.lc.state == LC_QUEUED) {
        spec_from_rec(&j->rec, &spec, excl);
        found = true;
    }
    jobs_unlock(d->h->jobs);
    if (found)
        sched_job_add(d->sched, &spec, now);
}

/* Takes what the scheduler placed on one of a poll's workers, up to its max
 * (and the answer's room): a poll taking one is answered by assign(), one
 * that may take several (p->many) gathers copies into got. Returns how many
 * it took; *gone when the poll gave up meanwhile. */
static int serve_worker(struct dispatcher *d, struct poller *p,
                        const struct dispatch_poll_worker *w, struct job_rec *got, int room,
                        int64_t now, bool *gone)
{
    int taken = 0;
    uint64_t job_id;
    while (taken < w->max && taken < room && sched_take(d->sched, w->id, now, &job_id) == 0) {
        pthread_mutex_lock(&p->lock);
        bool claimed = p->state == P_CLAIMED;
        if (p->state != P_WAITING && !(claimed && p->many)) {
            pthread_mutex_unlock(&p->lock);
            /* The poll gave up just now: put the job back. */
            sched_job_finished(d->sched, job_id, false, 0, 0, now);
            readd(d, job_id, now);
            *gone = true;
            break;
        }
        p->state = P_CLAIMED;
        pthread_mutex_unlock(&p->lock);
        if (assign(d, p, w->id, job_id, p->many ? &got[taken] : NULL)) {
            taken++;
            struct breaker *b = hashmap_get_str(&d->breakers, w->id);
            if (b && b->state == BREAKER_HALF_OPEN)
                refresh_worker(d, w->id, now); /* the probe holds its one slot */
        } else if (!claimed) {
            pthread_mutex_lock(&p->lock);
            p->state = P_WAITING;
            pthread_mutex_unlock(&p->lock);
        }
    }
    return taken;
}

/* Serves waiting pollers that have work. */
static void serve_pollers(struct dispatcher *d, int64_t now)
{
    for (struct poller **pp = &d->pollers; *pp;) {
        struct poller *p = *pp;
        pthread_mutex_lock(&p->lock);
        bool abandoned = p->state == P_ABANDONED;
        pthread_mutex_unlock(&p->lock);
        if (abandoned) {
            *pp = p->next;
            atomic_fetch_sub(&d->npollers, 1);
            poller_unref(p);
            continue;
        }
        /* A poll that may take several (an early one asking for more than
         * one, or naming several workers) takes what the scheduler placed on
         * each of its workers, up to each one's max, and is answered once
         * with all of them. */
        struct job_rec got[DISPATCH_POLL_MAX];
        int ngot = 0;
        bool gone = false;
        for (int i = 0; i < p->nws && !gone && ngot < DISPATCH_POLL_MAX; i++) {
            ngot += serve_worker(d, p, &p->ws[i], got + ngot, DISPATCH_POLL_MAX - ngot, now, &gone);
            if (!p->many && ngot > 0)
                break;
        }
        if (p->many && ngot > 0) {
            poller_finish(p, 0, got, ngot);
            for (int i = 0; i < ngot; i++)
                job_rec_free_fields(&got[i]);
        }
        if (ngot > 0) {
            /* Answered (early), or the committer's callback now holds the
             * dispatcher's reference. */
            *pp = p->next;
            atomic_fetch_sub(&d->npollers, 1);
        } else {
            pp = &p->next;
        }
    }
}

/* Appends a core-written reason inside a JSON string of a log line: quotes
 * and backslashes escaped, control characters left out. */
static void put_reason(struct buf *b, const char *reason)
{
    for (const char *c = reason; *c; c++) {
        if (*c == '"' || *c == '\\')
            buf_printf(b, "\\%c", *c);
        else if ((unsigned char)*c >= 0x20)
            buf_append(b, c, 1);
    }
}

static void on_placed(uint64_t job_id, const char *worker_id, const struct sched_explain *why,
                      void *arg)
{
    struct dispatcher *d = arg;
    struct buf b;
    buf_init(&b);
    buf_printf(&b, "{\"event\":\"placement\",\"job\":\"%llu\",\"worker\":\"%s\",\"reason\":\"",
               (unsigned long long)job_id, worker_id);
    put_reason(&b, why->reason);
    buf_printf(&b, "\",\"scored\":%d,\"candidates\":", why->ncandidates);
    /* The candidates are written once, here, and the trace copies the text. */
    size_t cands_at = b.len;
    trace_candidates_json(&b, why);
    size_t cands_len = b.len - cands_at;
    buf_puts(&b, "}");
    log_json(b.data);
    fleet_note_placement(d->h->fleet, job_id, worker_id, why, clock_wall_ms());
    d->stats.decisions++;
    trace_placed(job_id, worker_id, why, b.data + cands_at, cands_len);
    buf_fini(&b);
    const struct sched_candidate *won = sched_explain_candidate(why, worker_id);
    if (won)
        metrics_placement(won->warm, won->evictions);
}

static void on_lost(uint64_t job_id, void *arg)
{
    struct dispatcher *d = arg;
    head_lost(d->h, job_id, d->losing, "its worker left (silent past its TTL, or deregistered)");
}

static void remove_worker(struct dispatcher *d, const char *id, int64_t now)
{
    snprintf(d->losing, sizeof d->losing, "%.*s", SCHED_NAME_MAX - 1, id);
    sched_worker_remove(d->sched, id, now, on_lost, d);
    d->losing[0] = '\0';
    struct lane_share *ls = hashmap_del_str(&d->lanes, id);
    if (ls) {
        if (ls->reserved)
            d->nreserved--; /* the next worker to register takes its place */
        free(ls);
        publish_capacity(d);
    }
}

/* Tells admission what became of a job the scheduler let go of. */
static void admission_follow(struct dispatcher *d, uint64_t job_id)
{
    enum job_state st = JOB_CANCELLED;
    jobs_lock(d->h->jobs);
    struct hjob *j = jobs_find(d->h->jobs, job_id);
    if (j)
        st = (enum job_state)j->rec.lc.state;
    jobs_unlock(d->h->jobs);
    admission_job_state(d->h->admission, job_id, st);
}

static struct breaker *breaker_of(struct dispatcher *d, const char *worker_id)
{
    struct breaker *b = hashmap_get_str(&d->breakers, worker_id);
    if (!b) {
        b = xcalloc(1, sizeof *b);
        breaker_init(b);
        hashmap_put_str(&d->breakers, worker_id, b);
    }
    return b;
}

/* Logs a breaker's transition as one JSON line, then publishes it. */
static void breaker_event(struct dispatcher *d, const char *worker_id, const struct breaker *b,
                          enum breaker_event ev)
{
    if (ev == BREAKER_EV_NONE) {
        registry_set_breaker(d->h->registry, worker_id, b);
        return;
    }
    static const char *const names[] = {"", "quarantine", "probe", "recovered"};
    struct buf line;
    buf_init(&line);
    buf_printf(&line, "{\"event\":\"%s\",\"worker\":\"%s\",\"trips\":%lld,\"reason\":\"",
               names[ev], worker_id, (long long)b->trips);
    put_reason(&line, b->reason);
    buf_puts(&line, "\"}");
    log_json(line.data); /* announced before anyone can see the new state */
    buf_fini(&line);
    registry_set_breaker(d->h->registry, worker_id, b);
}

/* The lanes' nominal capacity for admission: interactive may use every
 * usable worker, batch the unreserved ones. */
static void publish_capacity(struct dispatcher *d)
{
    double inter = 0, batch = 0;
    size_t pos = 0;
    void *v;
    while (hashmap_next(&d->lanes, &pos, NULL, NULL, &v)) {
        const struct lane_share *ls = v;
        inter += ls->gpu_s_per_s;
        if (!ls->reserved)
            batch += ls->gpu_s_per_s;
    }
    admission_capacity(d->h->admission, inter, batch);
}

static void refresh_worker(struct dispatcher *d, const char *id, int64_t now)
{
    struct worker_info info;
    if (registry_get_info(d->h->registry, id, now, &info))
        return;
    struct breaker *b = hashmap_get_str(&d->breakers, id);
    if (b)
        breaker_apply(b, &info);
    struct lane_share *ls = hashmap_get_str(&d->lanes, id);
    if (!ls) {
        ls = xcalloc(1, sizeof *ls);
        ls->reserved = d->nreserved < d->h->cfg.reserved_gpus;
        if (ls->reserved) {
            d->nreserved++;
            log_info(MOD, "worker %s is in the reserved interactive pool (%d of %d)", id,
                     d->nreserved, d->h->cfg.reserved_gpus);
        }
        hashmap_put_str(&d->lanes, id, ls);
    }
    info.reserved = ls->reserved;
    double share = info.healthy && !info.draining
                       ? (info.speed > 0 ? info.speed : 1.0) * info.concurrency
                       : 0;
    if (share != ls->gpu_s_per_s) {
        ls->gpu_s_per_s = share;
        publish_capacity(d);
    }
    sched_worker_update(d->sched, &info, now);
}

/* Breaker cool-downs: an open breaker past its cool-down lets one probe through. */
static void tick_breakers(struct dispatcher *d, int64_t now)
{
    size_t pos = 0;
    const void *key;
    size_t klen;
    void *val;
    while (hashmap_next(&d->breakers, &pos, &key, &klen, &val)) {
        struct breaker *b = val;
        enum breaker_event ev = breaker_tick(&d->h->cfg.breaker, b, now);
        if (ev == BREAKER_EV_NONE)
            continue;
        char id[SCHED_NAME_MAX];
        snprintf(id, sizeof id, "%.*s", (int)(klen < SCHED_NAME_MAX - 1 ? klen : SCHED_NAME_MAX - 1),
                 (const char *)key);
        breaker_event(d, id, b, ev);
        refresh_worker(d, id, now);
    }
}

/* What became of jobs workers held ahead this round (core/sched.h): one
 * started (a slot freed there), or is taken back (its GPU failed before it
 * started). */
static void follow_held(struct dispatcher *d)
{
    uint64_t id;
    enum sched_held_what what;
    while (sched_held_news(d->sched, &id, &what)) {
        if (what == SCHED_HELD_STARTED)
            head_held_started(d->h, id);
        else
            head_held_take_back(d->h, id);
    }
}

/* Handles one message; false when it kept m (to answer later). */
static bool handle(struct dispatcher *d, struct dmsg *m, int64_t now)
{
    switch (m->kind) {
    case M_JOB_ADD:
        if (sched_job_add(d->sched, &m->spec, now))
            log_warn(MOD, "scheduler refused job %llu", (unsigned long long)m->spec.id);
        if (m->eta_fn) {
            m->next = d->eta_pending;
            d->eta_pending = m;
            return false;
        }
        break;
    case M_JOBS_ADD:
        for (int i = 0; i < m->nspecs; i++)
            if (sched_job_add(d->sched, &m->specs[i], now))
                log_warn(MOD, "scheduler refused job %llu", (unsigned long long)m->specs[i].id);
        free(m->specs);
        m->specs = NULL;
        break;
    case M_JOB_CANCEL:
        sched_job_cancel(d->sched, m->job_id, now);
        admission_follow(d, m->job_id);
        break;
    case M_JOB_FINISHED:
        sched_job_finished(d->sched, m->job_id, m->ok, m->load_ns, m->run_ns, now);
        admission_follow(d, m->job_id);
        registry_inflight(d->h->registry, m->worker_id, -1);
        if (m->verdict) {
            struct breaker *b = breaker_of(d, m->worker_id);
            /* Stamped when heard: a report of the worker after it (a poll
             * that follows the answer to this one) postdates it. */
            enum breaker_event ev =
                breaker_record(&d->h->cfg.breaker, b, m->ok, m->cls, m->at_ns);
            breaker_event(d, m->worker_id, b, ev);
        }
        refresh_worker(d, m->worker_id, now);
        break;
    case M_JOB_RELEASED:
        /* Only the scheduler's slot (and what the run teaches): the job's end
         * for admission, the registry and the breaker comes with
         * M_JOB_FINISHED once it is durable, whose sched_job_finished then
         * finds the job gone and changes nothing. */
        sched_job_finished(d->sched, m->job_id, m->ok, m->load_ns, m->run_ns, now);
        refresh_worker(d, m->worker_id, now);
        break;
    case M_WORKER_UPDATE:
        refresh_worker(d, m->worker_id, now);
        break;
    case M_WORKER_REMOVE:
        remove_worker(d, m->worker_id, now);
        break;
    case M_POLL:
        /* Its agent asks for work only for a ready worker: one that waited
         * for a report after its runtime's restart takes work again. */
        for (int i = 0; i < m->poller->nws; i++) {
            struct breaker *b = hashmap_get_str(&d->breakers, m->poller->ws[i].id);
            if (b && breaker_awaits_report(b))
                refresh_worker(d, m->poller->ws[i].id, now);
        }
        m->poller->next = d->pollers;
        d->pollers = m->poller;
        atomic_fetch_add(&d->npollers, 1);
        break;
    case M_KICK:
        break;
    }
    return true;
}

/* Preemption (core/preempt.h): the core picks, the head carries it out —
 * the victim's attempt ends preempted and its worker is told to stop it
 * (the cancel list, as for a cancelled job); its slot is freed here when the
 * attempt's end comes back as M_JOB_FINISHED, and the job is queued again
 * once the change is stored. */
static void preempt_round(struct dispatcher *d, int64_t now)
{
    struct sched_preempt p;
    for (int n = 0; n < 16 && sched_preempt_pick(d->sched, now, &p) == 1; n++)
        head_preempt(d->h, p.victim, p.worker, p.for_job, p.lost_s, p.reason);
}

/* Reads the ETA of each job added this round, now that it is placed or
 * queued (scheduler lock held); returns them, taken off the pending list. */
static struct dmsg *read_etas(struct dispatcher *d, int64_t now)
{
    for (struct dmsg *m = d->eta_pending; m; m = m->next) {
        m->eta_why[0] = '\0';
        m->eta_rc = sched_job_eta(d->sched, m->spec.id, now, &m->eta_start_s, &m->eta_finish_s);
        if (!m->eta_rc && m->eta_start_s < 0)
            sched_job_parked(d->sched, m->spec.id, m->eta_why, sizeof m->eta_why);
    }
    struct dmsg *got = d->eta_pending;
    d->eta_pending = NULL;
    return got;
}

/* Answers them, with no lock held: an answer may read the scheduler again
 * (a submit that waits for its job's end watches it, which reads its ETA). */
static void answer_etas(struct dmsg *etas)
{
    struct dmsg *next;
    for (struct dmsg *m = etas; m; m = next) {
        next = m->next;
        m->eta_fn(m->eta_arg, m->eta_rc, m->eta_start_s, m->eta_finish_s, m->eta_why);
        free(m);
    }
}

static void expire_workers(struct dispatcher *d, int64_t now)
{
    char ids[MAX_EXPIRE][SCHED_NAME_MAX];
    int n = registry_expire(d->h->registry, now, (int64_t)d->h->cfg.ttl_ms * NS_PER_MS, ids,
                            MAX_EXPIRE);
    for (int i = 0; i < n; i++) {
        log_warn(MOD, "worker %s silent for more than %d ms: removed, its jobs re-queued", ids[i],
                 d->h->cfg.ttl_ms);
        remove_worker(d, ids[i], now);
    }
}

static void publish(struct dispatcher *d)
{
    struct sched_stats st;
    sched_stats(d->sched, &st);
    int ready = registry_count_ready(d->h->registry);
    pthread_mutex_lock(&d->lock);
    d->stats.sched = st;
    d->stats.ready_workers = ready;
    pthread_mutex_unlock(&d->lock);
}

/* One round: the messages in batch (taken from the queue, in order), the
 * timed duties that are due, a placement, the pollers served and the ETAs
 * answered. round_lock held. */
static void run_round(struct dispatcher *d, struct dmsg *batch, int64_t now)
{
    int64_t stall = lc_stall_ns(d->last_loop_ns, now, STALL_SLACK_NS);
    d->last_loop_ns = now;
    if (stall > 0)
        head_stalled(d->h, stall); /* before any lease or TTL is judged */
    pthread_rwlock_wrlock(&d->sched_lock);
    struct dmsg *next;
    for (struct dmsg *m = batch; m; m = next) {
        next = m->next;
        if (handle(d, m, now))
            free(m);
    }
    if (now >= d->next_expiry_ns) {
        expire_workers(d, now);
        d->next_expiry_ns = now + NS_PER_S / 2;
    }
    if (now >= d->next_tick_ns) {
        head_tick(d->h);
        tick_breakers(d, now);
        if (d->h->admission) {
            bool measured;
            double r = admission_eta_rate(d->h->admission, SCHED_LANE_BATCH, &measured);
            sched_lane_rate(d->sched, SCHED_LANE_BATCH, r, measured);
        }
        d->next_tick_ns = now + LIFECYCLE_TICK_NS;
    }
    int64_t t0 = clock_mono_ns();
    int placed = sched_dispatch(d->sched, now, on_placed, d);
    if (placed > 0) {
        int64_t took = clock_mono_ns() - t0;
        d->stats.decision_us_last = (double)took / 1e3 / placed;
        metrics_decisions(placed, took);
    }
    if (d->h->cfg.sched.preempt_after_s > 0)
        preempt_round(d, now);
    serve_pollers(d, now);
    follow_held(d);
    struct dmsg *etas = read_etas(d, now);
    sched_refresh(d->sched, now); /* ETA reads then share the lock */
    pthread_rwlock_unlock(&d->sched_lock);
    answer_etas(etas);
    if (now - d->last_publish_ns > 100 * NS_PER_MS || placed) {
        publish(d);
        d->last_publish_ns = now;
    }
}

/* Takes the queue and runs a round on it. round_lock held. */
static void take_and_run(struct dispatcher *d, int64_t now)
{
    pthread_mutex_lock(&d->lock);
    struct dmsg *batch = d->stopping ? NULL : d->head;
    if (batch)
        d->head = d->tail = NULL;
    bool stopping = d->stopping;
    pthread_mutex_unlock(&d->lock);
    if (!stopping) /* else dispatcher_stop answers what is queued */
        run_round(d, batch, now);
}

/* Runs a round on the calling thread (a request's, holding no lock) while
 * the dispatcher thread sleeps: the request's message is handled without
 * waking that thread, and a poll it answers goes out from the thread that
 * serves it. Not when another round runs or one of the thread's timed
 * duties is due (those stay on it). Returns whether it ran. */
static bool run_here(struct dispatcher *d)
{
    if (pthread_mutex_trylock(&d->round_lock) != 0)
        return false;
    int64_t now = clock_mono_ns();
    bool ran = now < d->next_tick_ns && now < d->next_expiry_ns;
    if (ran)
        take_and_run(d, now);
    pthread_mutex_unlock(&d->round_lock);
    return ran;
}

void dispatcher_run(struct dispatcher *d)
{
    pthread_mutex_lock(&d->lock);
    bool wake = d->idle && d->head;
    pthread_mutex_unlock(&d->lock);
    /* Only when a poll waits, which the job may go to now: else the round
     * would only queue it, and with a deep queue costs this request's
     * thread what the dispatcher's would spend beside it. */
    if (wake && !(atomic_load(&d->npollers) > 0 && run_here(d)))
        pthread_cond_signal(&d->wake);
}

static void *dispatcher_main(void *arg)
{
    struct dispatcher *d = arg;
    pthread_mutex_lock(&d->lock);
    while (!d->stopping) {
        if (!d->head) {
            int64_t wake = clock_mono_ns() + LIFECYCLE_TICK_NS;
            struct timespec ts = {.tv_sec = wake / NS_PER_S, .tv_nsec = wake % NS_PER_S};
            d->idle = true;
            pthread_cond_timedwait(&d->wake, &d->lock, &ts);
            d->idle = false;
        }
        pthread_mutex_unlock(&d->lock);
        pthread_mutex_lock(&d->round_lock);
        take_and_run(d, clock_mono_ns());
        pthread_mutex_unlock(&d->round_lock);
        pthread_mutex_lock(&d->lock);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

struct dispatcher *dispatcher_create(struct head *h)
{
    struct dispatcher *d = xcalloc(1, sizeof *d);
    d->h = h;
    d->sched = sched_create(&h->cfg.sched);
    hashmap_init(&d->breakers);
    hashmap_init(&d->lanes);
    for (int i = 0; i < h->cfg.nfanout; i++) {
        sched_cap_limit(d->sched, h->cfg.fanout[i].name, h->cfg.fanout[i].max_gpus);
        sched_cap_slo(d->sched, h->cfg.fanout[i].name, h->cfg.fanout[i].slo_s);
    }
    for (int i = 0; i < h->cfg.nmodels; i++) {
        sched_model_set(d->sched, &h->cfg.models[i]);
        sched_model_prior(d->sched, h->cfg.models[i].name, h->cfg.run_s[i], 1024, 1024, 30, 0);
    }
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->round_lock, NULL);
    pthread_rwlock_init(&d->sched_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->wake, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&d->thread, NULL, dispatcher_main, d) != 0) {
        log_error(MOD, "cannot start the dispatcher thread");
        abort();
    }
    pthread_setname_np(d->thread, "dispatcher");
    return d;
}

void dispatcher_stop(struct dispatcher *d)
{
    pthread_mutex_lock(&d->lock);
    if (d->stopping) {
        pthread_mutex_unlock(&d->lock);
        return;
    }
    d->stopping = true;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->thread, NULL);
    pthread_mutex_lock(&d->round_lock); /* a round on a request's thread ends first */
    for (struct poller *p = d->pollers, *next; p; p = next) {
        next = p->next;
        poller_finish(p, GPUQ_EAGAIN, NULL, 0);
    }
    d->pollers = NULL;
    atomic_store(&d->npollers, 0);
    for (struct dmsg *m = d->head, *next; m; m = next) {
        next = m->next;
        if (m->kind == M_POLL)
            poller_finish(m->poller, GPUQ_EAGAIN, NULL, 0);
        if (m->eta_fn)
            m->eta_fn(m->eta_arg, GPUQ_EAGAIN, -1, -1, "");
        free(m->specs);
        free(m);
    }
    d->head = d->tail = NULL;
    pthread_mutex_unlock(&d->round_lock);
}

void dispatcher_destroy(struct dispatcher *d)
{
    if (!d)
        return;
    dispatcher_stop(d);
    sched_destroy(d->sched);
    size_t pos = 0;
    const void *key;
    size_t klen;
    void *val;
    while (hashmap_next(&d->breakers, &pos, &key, &klen, &val))
        free(val);
    hashmap_fini(&d->breakers);
    pos = 0;
    while (hashmap_next(&d->lanes, &pos, &key, &klen, &val))
        free(val);
    hashmap_fini(&d->lanes);
    pthread_rwlock_destroy(&d->sched_lock);
    pthread_mutex_destroy(&d->lock);
    pthread_mutex_destroy(&d->round_lock);
    pthread_cond_destroy(&d->wake);
    free(d);
}

int dispatcher_job_eta(struct dispatcher *d, uint64_t job_id, double *start_s, double *finish_s,
                       char *why, size_t size)
{
    /* sched_job_eta writes only to refresh a stale projection: readers share
     * the lock while every projection is fresh (the dispatcher refreshes them
     * at the end of each round), else take it alone. */
    pthread_rwlock_rdlock(&d->sched_lock);
    if (!sched_fresh(d->sched)) {
        pthread_rwlock_unlock(&d->sched_lock);
        pthread_rwlock_wrlock(&d->sched_lock);
    }
    int rc = sched_job_eta(d->sched, job_id, clock_mono_ns(), start_s, finish_s);
    why[0] = '\0';
    if (!rc && *start_s < 0)
        sched_job_parked(d->sched, job_id, why, size);
    pthread_rwlock_unlock(&d->sched_lock);
    return rc;
}

static void kick(struct dispatcher *d)
{
    struct dmsg *m = xcalloc(1, sizeof *m);
    m->kind = M_KICK;
    post(d, m);
}

int dispatcher_pause(struct dispatcher *d, const char *cap, int lane, bool paused)
{
    pthread_rwlock_wrlock(&d->sched_lock);
    int rc = sched_pause(d->sched, cap, lane, paused);
    pthread_rwlock_unlock(&d->sched_lock);
    if (!rc)
        kick(d);
    return rc;
}

int dispatcher_paused(struct dispatcher *d, char (*caps)[SCHED_NAME_MAX], int max,
                      unsigned *lanes)
{
    pthread_rwlock_rdlock(&d->sched_lock);
    int n = sched_paused(d->sched, caps, max, lanes);
    pthread_rwlock_unlock(&d->sched_lock);
    return n;
}

int dispatcher_job_promote(struct dispatcher *d, uint64_t job_id)
{
    pthread_rwlock_wrlock(&d->sched_lock);
    int rc = sched_job_promote(d->sched, job_id, clock_mono_ns());
    pthread_rwlock_unlock(&d->sched_lock);
    if (!rc)
        kick(d);
    return rc;
}

double dispatcher_estimate_cost(struct dispatcher *d, const struct job_rec *rec, double *nominal_s)
{
    struct job_spec spec;
    char excl[LC_MAX_FAILED][SCHED_NAME_MAX];
    spec_from_rec(rec, &spec, excl);
    pthread_rwlock_rdlock(&d->sched_lock);
    double cost = sched_estimate_cost(d->sched, &spec);
    if (nominal_s)
        *nominal_s = sched_nominal_cost(d->sched, &spec);
    pthread_rwlock_unlock(&d->sched_lock);
    return cost;
}

void dispatcher_get_stats(struct dispatcher *d, struct dispatch_stats *out)
{
    pthread_mutex_lock(&d->lock);
    *out = d->stats;
    pthread_mutex_unlock(&d->lock);
}
