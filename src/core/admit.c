/* admit.c: admission and fair share behind admit.h — tenants (terms, token
 * bucket, virtual finish, in-flight count), pools of queued work (the
 * interactive lane; each tenant's share of the batch lane) with the rooms
 * booked for refused clients, the measured throughput per lane, and the
 * backlog per (capability, lane, tenant). */
#include "core/admit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/err.h"
#include "common/hashmap.h"

/* A room promised to a refused client: planned at plan_ns, due at due_ns (the
 * time the client was told: plan_ns rounded up to whole seconds, so less
 * than a second later), held until expire_ns.
 * Consumed when the client's retry (same key) is admitted. */
struct booking {
    uint64_t key;
    double cost_s;
    int64_t plan_ns, due_ns, expire_ns;
    bool consumed;
};

/* Queued work that drains at one rate: the interactive lane, or one tenant's
 * share of the batch lane. Invariants: booked_s = sum of cost_s of the
 * bookings in ring[head..head+n) not consumed; their plan_ns never decrease
 * (each new one is planned no earlier than horizon_ns, which only grows);
 * their due_ns may, by under a second. */
struct pool {
    double queued_s;
    int queued_jobs;
    struct booking *ring;
    int head, n, cap;
    double booked_s;
    int64_t horizon_ns; /* planned time of the latest booking */
};

struct tenant {
    struct admit_tenant_policy p;
    bool configured;
    double tokens;       /* at tokens_ns */
    int64_t tokens_ns;
    double vfinish;      /* virtual finish tag, GPU-seconds per unit weight */
    int inflight;
    struct pool batch;
};

/* Backlog figure of one (capability, lane, tenant). */
struct bl_entry {
    char cap[SCHED_NAME_MAX];
    enum sched_lane lane;
    int tenant;
    double gpu_s;
    int jobs;
};

/* The measured throughput of a lane is what it delivers while it has work
 * waiting (queued_jobs > 0): delivered GPU-seconds over busy seconds, both
 * decayed over busy time (not wall time), so an idle spell neither dilutes
 * nor forgets it. Invariant: acc and busy are as of clock_ns. */
struct lane_state {
    double nominal;      /* GPU-seconds per second from the fleet */
    double acc;          /* decayed GPU-seconds delivered while busy */
    double busy;         /* decayed busy seconds */
    double acc_f, busy_f; /* the same over one window (admit_eta_rate) */
    double busy_total;   /* busy seconds since the fleet's figure was set */
    int64_t clock_ns;
    int queued_jobs;
};

struct admit {
    struct admit_policy p;
    struct tenant *tenants;
    int ntenants, captenants;
    struct hashmap tenant_ix;     /* name → index + 1 */
    struct pool interactive;
    struct lane_state lanes[ADMIT_LANES];
    double vtime;                 /* largest started tag, GPU-seconds per unit weight */
    struct bl_entry *bl;
    int nbl, capbl;
    struct hashmap bl_ix;         /* "cap\x1flane\x1ftenant" → index + 1 */
    struct hashmap bookings;      /* key → pool (for retries naming their booking) */
};

static const double NS = 1e9;
/* A retry this close before its room's time is on time. */
static const int64_t DUE_SLACK_NS = 1000000;

void admit_policy_defaults(struct admit_policy *p)
{
    memset(p, 0, sizeof(*p));
    p->max_wait_s[SCHED_LANE_INTERACTIVE] = 600;
    p->assumed_capacity = 8;
    p->max_wait_s[SCHED_LANE_BATCH] = 14400;
    p->min_retry_s = 1;
    p->booking_grace_s = 10;
    p->throughput_tau_s = 60;
    p->tenant_default.weight = 1;
}

struct admit *admit_create(const struct admit_policy *p)
{
    struct admit *a = xcalloc(1, sizeof(*a));
    if (p)
        a->p = *p;
    else
        admit_policy_defaults(&a->p);
    for (int l = 0; l < ADMIT_LANES; l++) {
        if (!(a->p.max_wait_s[l] >= 0))
            a->p.max_wait_s[l] = 0;
    }
    if (!(a->p.min_retry_s > 0))
        a->p.min_retry_s = 1;
    if (!(a->p.booking_grace_s >= 0))
        a->p.booking_grace_s = 0;
    if (!(a->p.assumed_capacity > 0))
        a->p.assumed_capacity = 1;
    if (!(a->p.throughput_tau_s > 0))
        a->p.throughput_tau_s = 60;
    if (!(a->p.tenant_default.weight > 0))
        a->p.tenant_default.weight = 1;
    a->p.tenant_default.name[0] = '\0';
    hashmap_init(&a->tenant_ix);
    hashmap_init(&a->bl_ix);
    hashmap_init(&a->bookings);
    return a;
}

void admit_destroy(struct admit *a)
{
    if (!a)
        return;
    for (int i = 0; i < a->ntenants; i++)
        free(a->tenants[i].batch.ring);
    free(a->interactive.ring);
    free(a->tenants);
    free(a->bl);
    hashmap_fini(&a->tenant_ix);
    hashmap_fini(&a->bl_ix);
    hashmap_fini(&a->bookings);
    free(a);
}

/* ---- tenants ------------------------------------------------------------ */

static const char *tname(const char *t)
{
    return t ? t : "";
}

static int tenant_find(const struct admit *a, const char *name)
{
    void *v = hashmap_get_str(&a->tenant_ix, tname(name));
    return v ? (int)(intptr_t)v - 1 : -1;
}

static double bucket_size(const struct admit_tenant_policy *p)
{
    if (p->rate_gpu_s_per_min <= 0)
        return 0;
    return p->burst_gpu_s > 0 ? p->burst_gpu_s : p->rate_gpu_s_per_min;
}

/* The tenant's index, created with the default terms on first use. */
static int tenant_get(struct admit *a, const char *name, int64_t now)
{
    int ix = tenant_find(a, name);
    if (ix >= 0)
        return ix;
    if (a->ntenants == a->captenants) {
        a->captenants = a->captenants ? a->captenants * 2 : 8;
        a->tenants = xrealloc(a->tenants, (size_t)a->captenants * sizeof(*a->tenants));
    }
    struct tenant *t = &a->tenants[a->ntenants];
    memset(t, 0, sizeof(*t));
    t->p = a->p.tenant_default;
    snprintf(t->p.name, sizeof(t->p.name), "%s", tname(name));
    t->tokens = bucket_size(&t->p);
    t->tokens_ns = now;
    hashmap_put_str(&a->tenant_ix, t->p.name, (void *)(intptr_t)(a->ntenants + 1));
    return a->ntenants++;
}

int admit_tenant_set(struct admit *a, const struct admit_tenant_policy *tp)
{
    if (!a || !tp || !(tp->weight > 0) || !isfinite(tp->weight) ||
        !(tp->rate_gpu_s_per_min >= 0) || !(tp->burst_gpu_s >= 0) || tp->max_inflight < 0)
        return GPUQ_EINVAL;
    if (!tp->name[0]) {
        a->p.tenant_default = *tp;
        for (int i = 0; i < a->ntenants; i++)
            if (!a->tenants[i].configured) {
                char name[SCHED_NAME_MAX];
                memcpy(name, a->tenants[i].p.name, sizeof(name));
                a->tenants[i].p = *tp;
                memcpy(a->tenants[i].p.name, name, sizeof(name));
            }
        return 0;
    }
    int ix = tenant_get(a, tp->name, 0);
    struct tenant *t = &a->tenants[ix];
    double old_size = bucket_size(&t->p);
    t->p = *tp;
    t->p.name[SCHED_NAME_MAX - 1] = '\0';
    t->configured = true;
    if (bucket_size(&t->p) != old_size)
        t->tokens = bucket_size(&t->p);
    return 0;
}

void admit_tenant_get(const struct admit *a, const char *tenant, struct admit_tenant_policy *out)
{
    int ix = tenant_find(a, tenant);
    if (ix >= 0) {
        *out = a->tenants[ix].p;
        return;
    }
    *out = a->p.tenant_default;
    snprintf(out->name, sizeof(out->name), "%s", tname(tenant));
}

/* Tokens in t's bucket at now (refilled, capped at the bucket's size). */
static double tokens_at(const struct tenant *t, int64_t now)
{
    double size = bucket_size(&t->p);
    double dt = now > t->tokens_ns ? (double)(now - t->tokens_ns) / NS : 0;
    double v = t->tokens + dt * t->p.rate_gpu_s_per_min / 60.0;
    return v < size ? v : size;
}

/* ---- throughput --------------------------------------------------------- */

int admit_capacity(struct admit *a, enum sched_lane lane, double gpu_s_per_s, int64_t now)
{
    (void)now;
    if (!a || (lane != SCHED_LANE_INTERACTIVE && lane != SCHED_LANE_BATCH) ||
        !(gpu_s_per_s >= 0) || !isfinite(gpu_s_per_s))
        return GPUQ_EINVAL;
    struct lane_state *ls = &a->lanes[lane];
    /* The fleet changed: what was measured scales with it (the lane keeps
     * its measured share of the nominal figure). */
    if (ls->nominal > 0) {
        ls->acc *= gpu_s_per_s / ls->nominal;
        ls->acc_f *= gpu_s_per_s / ls->nominal;
    } else {
        ls->acc = ls->busy = ls->busy_total = ls->acc_f = ls->busy_f = 0;
    }
    ls->nominal = gpu_s_per_s;
    return 0;
}

/* The measured throughput averages over this many windows
 * (throughput_tau_s) of busy time, and is used once the lane has had work
 * waiting that long. A Retry-After reaches minutes to hours ahead; one
 * window (a minute) of deliveries swings by a third or more with the
 * interactive load beside it, and a promise made at a high swing comes due
 * before its room. */
#define TPUT_WINDOWS 5.0

static double tput_tau(const struct admit *a)
{
    return a->p.throughput_tau_s * TPUT_WINDOWS;
}

/* ls's sums advanced to now: busy seconds accrue (and both sums decay) only
 * while work waits. Returns the busy seconds in all. */
static double lane_sums(const struct lane_state *ls, double tau, int64_t now, double *acc,
                        double *busy)
{
    double dt = ls->queued_jobs > 0 && now > ls->clock_ns ? (double)(now - ls->clock_ns) / NS : 0;
    double f = exp(-dt / tau);
    *acc = ls->acc * f;
    *busy = ls->busy * f + tau * (1 - f);
    return ls->busy_total + dt;
}

/* lane_sums of the one-window pair (acc_f, busy_f). */
static double lane_sums_fast(const struct lane_state *ls, double tau, int64_t now, double *acc,
                             double *busy)
{
    struct lane_state f = *ls;
    f.acc = ls->acc_f;
    f.busy = ls->busy_f;
    return lane_sums(&f, tau, now, acc, busy);
}

static void lane_advance(struct admit *a, struct lane_state *ls, int64_t now)
{
    lane_sums_fast(ls, a->p.throughput_tau_s, now, &ls->acc_f, &ls->busy_f);
    ls->busy_total = lane_sums(ls, tput_tau(a), now, &ls->acc, &ls->busy);
    if (now > ls->clock_ns)
        ls->clock_ns = now;
}

double admit_throughput(const struct admit *a, enum sched_lane lane, int64_t now)
{
    if (!a || (lane != SCHED_LANE_INTERACTIVE && lane != SCHED_LANE_BATCH))
        return 0;
    const struct lane_state *ls = &a->lanes[lane];
    double tau = tput_tau(a), acc, busy;
    double total = lane_sums(ls, tau, now, &acc, &busy);
    /* Measured once the lane has had work waiting for the whole span: then
     * what it delivered is what it can deliver. */
    if (total >= tau && acc > 0 && busy > 0)
        return acc / busy;
    return ls->nominal;
}

double admit_eta_rate(const struct admit *a, enum sched_lane lane, int64_t now, bool *measured)
{
    if (measured)
        *measured = false;
    if (!a || (lane != SCHED_LANE_INTERACTIVE && lane != SCHED_LANE_BATCH))
        return 0;
    const struct lane_state *ls = &a->lanes[lane];
    double tau = a->p.throughput_tau_s, acc, busy;
    double total = lane_sums_fast(ls, tau, now, &acc, &busy);
    if (total >= tau && acc > 0 && busy > 0) {
        if (measured)
            *measured = true;
        return acc / busy;
    }
    return admit_throughput(a, lane, now);
}

/* ---- pools and bookings ------------------------------------------------- */

static const struct pool *pool_of(const struct admit *a, int tix, enum sched_lane lane)
{
    if (lane == SCHED_LANE_INTERACTIVE || tix < 0)
        return &a->interactive;
    return &a->tenants[tix].batch;
}

/* Booked work still held at now (rooms whose time plus grace has not passed,
 * not yet taken), and of it the part due at or before now. */
static double pool_booked(const struct pool *p, int64_t now, double *due_now)
{
    double b = p->booked_s, d = 0;
    for (int i = 0; i < p->n; i++) {
        const struct booking *bk = &p->ring[(p->head + i) % p->cap];
        if (bk->plan_ns > now)
            break;
        if (bk->due_ns > now)
            continue;
        if (bk->consumed)
            continue;
        if (bk->expire_ns <= now)
            b -= bk->cost_s;
        else
            d += bk->cost_s;
    }
    if (due_now)
        *due_now = d;
    return b > 0 ? b : 0;
}

/* Drops expired and consumed bookings from the front. */
static void pool_purge(struct admit *a, struct pool *p, int64_t now)
{
    while (p->n > 0) {
        struct booking *bk = &p->ring[p->head];
        if (!bk->consumed && bk->expire_ns > now)
            break;
        if (!bk->consumed) {
            p->booked_s -= bk->cost_s;
            if (bk->key)
                hashmap_del_u64(&a->bookings, bk->key);
        }
        p->head = (p->head + 1) % p->cap;
        p->n--;
    }
    if (p->n == 0 || p->booked_s < 0)
        p->booked_s = 0;
}

static struct booking *booking_find(const struct admit *a, const struct pool *p, uint64_t key)
{
    if (!key || hashmap_get_u64(&a->bookings, key) != p)
        return NULL;
    for (int i = 0; i < p->n; i++) {
        struct booking *bk = &p->ring[(p->head + i) % p->cap];
        if (bk->key == key && !bk->consumed)
            return bk;
    }
    return NULL;
}

/* ---- backlog figures ---------------------------------------------------- */

static struct bl_entry *bl_get(struct admit *a, const char *cap, enum sched_lane lane, int tix)
{
    char key[3 * SCHED_NAME_MAX];
    snprintf(key, sizeof(key), "%s\x1f%d\x1f%d", cap ? cap : "", (int)lane, tix);
    void *v = hashmap_get_str(&a->bl_ix, key);
    if (v)
        return &a->bl[(intptr_t)v - 1];
    if (a->nbl == a->capbl) {
        a->capbl = a->capbl ? a->capbl * 2 : 16;
        a->bl = xrealloc(a->bl, (size_t)a->capbl * sizeof(*a->bl));
    }
    struct bl_entry *e = &a->bl[a->nbl];
    memset(e, 0, sizeof(*e));
    snprintf(e->cap, sizeof(e->cap), "%s", cap ? cap : "");
    e->lane = lane;
    e->tenant = tix;
    hashmap_put_str(&a->bl_ix, key, (void *)(intptr_t)(a->nbl + 1));
    return &a->bl[a->nbl++];
}

double admit_backlog(const struct admit *a, const char *capability, int lane, const char *tenant)
{
    if (!a)
        return 0;
    int tix = tenant ? tenant_find(a, tenant) : -1;
    if (tenant && tix < 0)
        return 0;
    double sum = 0;
    for (int i = 0; i < a->nbl; i++) {
        const struct bl_entry *e = &a->bl[i];
        if ((capability && strcmp(e->cap, capability) != 0) || (lane >= 0 && (int)e->lane != lane) ||
            (tenant && e->tenant != tix))
            continue;
        sum += e->gpu_s;
    }
    return sum > 0 ? sum : 0;
}

void admit_backlog_each(const struct admit *a,
                        void (*fn)(const char *capability, enum sched_lane lane,
                                   const char *tenant, double gpu_s, int jobs, void *arg),
                        void *arg)
{
    if (!a || !fn)
        return;
    for (int i = 0; i < a->nbl; i++) {
        const struct bl_entry *e = &a->bl[i];
        if (e->jobs > 0)
            fn(e->cap, e->lane, a->tenants[e->tenant].p.name, e->gpu_s > 0 ? e->gpu_s : 0,
               e->jobs, arg);
    }
}

/* ---- verdicts ----------------------------------------------------------- */

double admit_job_cost(double run_s, double expected_load_s)
{
    double c = (run_s > 0 ? run_s : 0) + (expected_load_s > 0 ? expected_load_s : 0);
    return isfinite(c) ? c : 0;
}

/* Sum of the weights of batch tenants that want service (work queued or
 * booked), plus tix's own. */
static double active_weight(const struct admit *a, int tix, int64_t now)
{
    double w = 0;
    for (int i = 0; i < a->ntenants; i++) {
        const struct tenant *t = &a->tenants[i];
        if (i == tix || t->batch.queued_jobs > 0 || pool_booked(&t->batch, now, NULL) > 0)
            w += t->p.weight;
    }
    if (tix < 0)
        w += a->p.tenant_default.weight;
    return w;
}

/* The rate tix's pool drains at in lane. */
static double pool_rate(const struct admit *a, int tix, enum sched_lane lane, int64_t now)
{
    double thr = admit_throughput(a, lane, now);
    if (!(thr > 0))
        thr = a->p.assumed_capacity; /* no GPU known yet */
    if (lane == SCHED_LANE_INTERACTIVE)
        return thr;
    double w = tix >= 0 ? a->tenants[tix].p.weight : a->p.tenant_default.weight;
    double sum = active_weight(a, tix, now);
    return sum > 0 ? thr * w / sum : thr;
}

/* s, at least min_retry_s (and finite). */
static double clamp_retry(const struct admit *a, double s)
{
    if (!(s >= a->p.min_retry_s) || !isfinite(s))
        s = isfinite(s) && s > a->p.min_retry_s ? s : a->p.min_retry_s;
    return s;
}

/* A refusal's times: the room planned in room_s (at least min_retry_s), and
 * the Retry-After told, that rounded up to whole seconds — what the header
 * can say — so the room is due at the very time the client comes back (a
 * fraction under a microsecond is float noise, not a second more). Later
 * rooms are planned after room_s, not after the rounded time: rounding each
 * one up would space them by up to a second more than they drain. */
static void set_retry(const struct admit *a, struct admit_verdict *v, double s)
{
    v->room_s = clamp_retry(a, s);
    v->retry_after_s = ceil(v->room_s - 1e-6);
}

int admit_decide(const struct admit *a, const struct admit_request *req, int64_t now,
                 struct admit_verdict *v)
{
    if (!a || !req || !v || !(req->cost_s >= 0) || !isfinite(req->cost_s) ||
        (req->lane != SCHED_LANE_INTERACTIVE && req->lane != SCHED_LANE_BATCH))
        return GPUQ_EINVAL;
    memset(v, 0, sizeof(*v));
    const char *lane_name = req->lane == SCHED_LANE_BATCH ? "batch" : "interactive";
    int tix = tenant_find(a, req->tenant);
    struct admit_tenant_policy tp;
    admit_tenant_get(a, req->tenant, &tp);
    const struct tenant *t = tix >= 0 ? &a->tenants[tix] : NULL;
    double bound = a->p.max_wait_s[req->lane];
    v->bound_s = bound;
    v->outcome = ADMIT_OK;

    /* 1. Never admissible. */
    if (bound > 0 && req->cost_s > bound) {
        v->outcome = ADMIT_TOO_LARGE;
        v->reason = ADMIT_R_JOB_COST;
        snprintf(v->why, sizeof(v->why),
                 "the job's estimated cost, %.0f GPU-seconds, exceeds the %s lane's wait bound "
                 "of %.0f s",
                 req->cost_s, lane_name, bound);
        return 0;
    }
    double size = bucket_size(&tp);
    if (req->lane == SCHED_LANE_BATCH && size > 0 && req->cost_s > size) {
        v->outcome = ADMIT_TOO_LARGE;
        v->reason = ADMIT_R_BURST;
        snprintf(v->why, sizeof(v->why),
                 "the job's estimated cost, %.0f GPU-seconds, exceeds tenant %.60s's burst of "
                 "%.0f GPU-seconds",
                 req->cost_s, tp.name, size);
        return 0;
    }

    const struct pool *p = pool_of(a, tix, req->lane);
    double rate = pool_rate(a, tix, req->lane, now);
    v->throughput = rate;
    v->backlog_gpu_s = p->queued_s;
    /* Work booked for other refused clients that this request must let go
     * first: for a retry with a booking, those due before it; for a new
     * request, every one still held. */
    const struct booking *own = booking_find(a, p, req->booking);
    double due_now = 0;
    double booked = pool_booked(p, now, &due_now);
    if (own) {
        if (own->due_ns > now + DUE_SLACK_NS) {
            v->outcome = ADMIT_RETRY;
            v->reason = ADMIT_R_LANE_WAIT;
            set_retry(a, v, (double)(own->due_ns - now) / NS);
            snprintf(v->why, sizeof(v->why), "the room booked for this retry is due in %.1f s",
                     (double)(own->due_ns - now) / NS);
            return 0;
        }
        /* Its room is due: the promise is kept (the wait bound governs new
         * requests; the room was booked against it). */
        double ahead = p->queued_s + (due_now > own->cost_s ? due_now - own->cost_s : 0);
        v->wait_s = rate > 0 ? ahead / rate : 0;
        snprintf(v->why, sizeof(v->why),
                 "admitted: the room booked for this retry; estimated wait %.1f s", v->wait_s);
        return 0;
    }

    /* 2. Concurrency cap. */
    if (tp.max_inflight > 0 && t && t->inflight >= tp.max_inflight) {
        v->outcome = ADMIT_RETRY;
        v->reason = ADMIT_R_INFLIGHT;
        double per = p->queued_jobs > 0 ? p->queued_s / p->queued_jobs : req->cost_s;
        set_retry(a, v, rate > 0 ? per / rate : a->p.min_retry_s);
        snprintf(v->why, sizeof(v->why), "tenant %.60s has %d jobs in flight, its cap", tp.name,
                 t->inflight);
        return 0;
    }

    /* 3. Token bucket. */
    if (req->lane == SCHED_LANE_BATCH && size > 0) {
        double tok = t ? tokens_at(t, now) : size;
        double need = req->cost_s + booked - tok;
        if (need > 0) {
            v->outcome = ADMIT_RETRY;
            v->reason = ADMIT_R_RATE;
            set_retry(a, v, need / (tp.rate_gpu_s_per_min / 60.0));
            snprintf(v->why, sizeof(v->why),
                     "tenant %.60s's rate of %.0f GPU-seconds per minute is spent; %.0f of the "
                     "%.0f needed are available",
                     tp.name, tp.rate_gpu_s_per_min, tok > 0 ? tok : 0, req->cost_s);
            return 0;
        }
    }

    /* 4. Lane wait bound. */
    double ahead = p->queued_s + booked;
    v->wait_s = rate > 0 ? ahead / rate : (ahead > 0 ? INFINITY : 0);
    if (bound > 0 && ahead + req->cost_s > bound * rate) {
        double excess = ahead + req->cost_s - bound * rate;
        double ra = rate > 0 ? excess / rate : bound;
        if (p->horizon_ns > now && rate > 0) {
            double after = (double)(p->horizon_ns - now) / NS + req->cost_s / rate;
            if (after > ra)
                ra = after;
        }
        v->outcome = ADMIT_RETRY;
        v->reason = ADMIT_R_LANE_WAIT;
        set_retry(a, v, ra);
        if (req->lane == SCHED_LANE_BATCH)
            snprintf(v->why, sizeof(v->why),
                     "tenant %.60s's estimated wait in the batch lane, %.0f s, exceeds the bound "
                     "of %.0f s (%.0f GPU-seconds queued at %.2f GPU-seconds/s, its share)",
                     tp.name, v->wait_s, bound, ahead, rate);
        else
            snprintf(v->why, sizeof(v->why),
                     "the estimated wait in the interactive lane, %.0f s, exceeds the bound of "
                     "%.0f s (%.0f GPU-seconds queued at %.2f GPU-seconds/s)",
                     v->wait_s, bound, ahead, rate);
        return 0;
    }
    snprintf(v->why, sizeof(v->why), "admitted: estimated wait %.1f s within the %s bound",
             v->wait_s, lane_name);
    return 0;
}

static void lane_queued(struct admit *a, enum sched_lane lane, int delta, int64_t now)
{
    struct lane_state *ls = &a->lanes[lane];
    lane_advance(a, ls, now);
    ls->queued_jobs += delta;
    if (ls->queued_jobs < 0)
        ls->queued_jobs = 0;
}

/* What a job's fair-share tag is charged: its nominal work when given. */
static double tag_cost(const struct admit_request *req)
{
    return req->tag_s > 0 ? req->tag_s : req->cost_s;
}

int admit_accept(struct admit *a, const struct admit_request *req, int64_t now, int64_t *order_ns)
{
    if (!a || !req || !(req->cost_s >= 0) || !isfinite(req->cost_s) ||
        (req->lane != SCHED_LANE_INTERACTIVE && req->lane != SCHED_LANE_BATCH))
        return GPUQ_EINVAL;
    int tix = tenant_get(a, req->tenant, now);
    struct tenant *t = &a->tenants[tix];
    struct pool *p = req->lane == SCHED_LANE_BATCH ? &t->batch : &a->interactive;
    struct booking *own = booking_find(a, p, req->booking);
    if (own) {
        own->consumed = true;
        p->booked_s -= own->cost_s;
        hashmap_del_u64(&a->bookings, own->key);
    }
    pool_purge(a, p, now);
    if (req->lane == SCHED_LANE_BATCH && bucket_size(&t->p) > 0) {
        t->tokens = tokens_at(t, now) - req->cost_s;
        t->tokens_ns = now;
    }
    t->inflight++;
    p->queued_s += req->cost_s;
    p->queued_jobs++;
    struct bl_entry *e = bl_get(a, req->capability, req->lane, tix);
    e->gpu_s += req->cost_s;
    e->jobs++;
    lane_queued(a, req->lane, +1, now);
    int64_t order = now;
    if (req->lane == SCHED_LANE_BATCH) {
        double s = t->vfinish > a->vtime ? t->vfinish : a->vtime;
        t->vfinish = s + tag_cost(req) / t->p.weight;
        order = (int64_t)llround(s * NS) + 1; /* 0 means "no tag" to the scheduler */
    }
    if (order_ns)
        *order_ns = order;
    return 0;
}

int admit_refuse(struct admit *a, const struct admit_request *req, const struct admit_verdict *v,
                 int64_t now)
{
    if (!a || !req || !v || v->outcome != ADMIT_RETRY ||
        (req->lane != SCHED_LANE_INTERACTIVE && req->lane != SCHED_LANE_BATCH))
        return GPUQ_EINVAL;
    if (v->reason == ADMIT_R_INFLIGHT)
        return 0; /* a slot frees when a job ends: nothing to book */
    int tix = tenant_get(a, req->tenant, now);
    struct pool *p =
        req->lane == SCHED_LANE_BATCH ? &a->tenants[tix].batch : &a->interactive;
    pool_purge(a, p, now);
    if (booking_find(a, p, req->booking))
        return 0; /* came back early: keeps the room it has */
    if (p->n == p->cap) {
        int ncap = p->cap ? p->cap * 2 : 16;
        struct booking *r = xcalloc((size_t)ncap, sizeof(*r));
        for (int i = 0; i < p->n; i++)
            r[i] = p->ring[(p->head + i) % p->cap];
        free(p->ring);
        p->ring = r;
        p->cap = ncap;
        p->head = 0;
    }
    double room = v->room_s > 0 && v->room_s <= v->retry_after_s ? v->room_s : v->retry_after_s;
    int64_t plan = now + (int64_t)llround(room * NS);
    if (plan < p->horizon_ns)
        plan = p->horizon_ns;
    int64_t due = now + (int64_t)llround(v->retry_after_s * NS);
    if (due < plan)
        due = plan;
    struct booking *bk = &p->ring[(p->head + p->n) % p->cap];
    bk->key = req->booking;
    bk->cost_s = req->cost_s;
    bk->plan_ns = plan;
    bk->due_ns = due;
    bk->expire_ns = due + (int64_t)llround(a->p.booking_grace_s * NS);
    bk->consumed = false;
    p->n++;
    p->booked_s += req->cost_s;
    p->horizon_ns = plan;
    if (req->booking)
        hashmap_put_u64(&a->bookings, req->booking, p);
    return 0;
}

void admit_undo(struct admit *a, const struct admit_request *req, int64_t order_ns,
                int64_t now)
{
    if (!a || !req || !(req->cost_s >= 0) || !isfinite(req->cost_s) ||
        (req->lane != SCHED_LANE_INTERACTIVE && req->lane != SCHED_LANE_BATCH))
        return;
    int tix = tenant_get(a, req->tenant, now);
    struct tenant *t = &a->tenants[tix];
    struct pool *p = req->lane == SCHED_LANE_BATCH ? &t->batch : &a->interactive;
    p->queued_s -= req->cost_s;
    if (--p->queued_jobs <= 0) {
        p->queued_jobs = 0;
        p->queued_s = 0;
    }
    struct bl_entry *e = bl_get(a, req->capability, req->lane, tix);
    e->gpu_s -= req->cost_s;
    if (--e->jobs <= 0) {
        e->jobs = 0;
        e->gpu_s = 0;
    }
    lane_queued(a, req->lane, -1, now);
    if (t->inflight > 0)
        t->inflight--;
    if (req->lane != SCHED_LANE_BATCH)
        return;
    double size = bucket_size(&t->p);
    if (size > 0) {
        double tok = tokens_at(t, now) + req->cost_s;
        t->tokens = tok < size ? tok : size;
        t->tokens_ns = now;
    }
    /* The tag was S = max(V, F) and F moved to S + cost / weight: take F back
     * when this job's finish is still the tenant's latest. */
    if (order_ns > 0) {
        double s = (double)(order_ns - 1) / NS;
        double f = s + tag_cost(req) / t->p.weight;
        if (fabs(t->vfinish - f) <= 1e-6 * (fabs(f) + 1))
            t->vfinish = s;
    }
}

int admit_room(const struct admit *a, const struct admit_request *req, int64_t now,
               double *excess_s)
{
    if (!a || !req || !excess_s || !(req->cost_s >= 0) ||
        (req->lane != SCHED_LANE_INTERACTIVE && req->lane != SCHED_LANE_BATCH))
        return GPUQ_EINVAL;
    int tix = tenant_find(a, req->tenant);
    const struct pool *p = pool_of(a, tix, req->lane);
    double rate = pool_rate(a, tix, req->lane, now);
    const struct booking *own = booking_find(a, p, req->booking);
    double ahead = p->queued_s;
    for (int i = 0; i < p->n; i++) {
        const struct booking *bk = &p->ring[(p->head + i) % p->cap];
        if (bk == own)
            break;
        if (!bk->consumed && bk->expire_ns > now)
            ahead += bk->cost_s;
    }
    double bound = a->p.max_wait_s[req->lane];
    double ex = -INFINITY;
    if (bound > 0 && rate > 0)
        ex = (ahead + req->cost_s - bound * rate) / rate;
    struct admit_tenant_policy tp;
    admit_tenant_get(a, req->tenant, &tp);
    double size = bucket_size(&tp);
    if (req->lane == SCHED_LANE_BATCH && size > 0) {
        double tok = tix >= 0 ? tokens_at(&a->tenants[tix], now) : size;
        double need = (req->cost_s - tok) / (tp.rate_gpu_s_per_min / 60.0);
        if (need > ex)
            ex = need;
    }
    *excess_s = ex;
    return 0;
}

void admit_dequeued(struct admit *a, const char *tenant, const char *capability,
                    enum sched_lane lane, double cost_s, int64_t order_ns, int64_t now)
{
    if (!a || (lane != SCHED_LANE_INTERACTIVE && lane != SCHED_LANE_BATCH))
        return;
    int tix = tenant_get(a, tenant, now);
    struct pool *p = lane == SCHED_LANE_BATCH ? &a->tenants[tix].batch : &a->interactive;
    p->queued_s -= cost_s;
    p->queued_jobs--;
    if (p->queued_jobs <= 0) {
        p->queued_jobs = 0;
        p->queued_s = 0;
    }
    struct bl_entry *e = bl_get(a, capability, lane, tix);
    e->gpu_s -= cost_s;
    e->jobs--;
    if (e->jobs <= 0) {
        e->jobs = 0;
        e->gpu_s = 0;
    }
    lane_queued(a, lane, -1, now);
    if (lane == SCHED_LANE_BATCH && order_ns > 0) {
        double tag = (double)(order_ns - 1) / NS;
        if (tag > a->vtime)
            a->vtime = tag;
    }
    pool_purge(a, p, now);
}

void admit_ended(struct admit *a, const char *tenant, enum sched_lane lane,
                 double delivered_gpu_s, int64_t now)
{
    if (!a || (lane != SCHED_LANE_INTERACTIVE && lane != SCHED_LANE_BATCH))
        return;
    int tix = tenant_get(a, tenant, now);
    if (a->tenants[tix].inflight > 0)
        a->tenants[tix].inflight--;
    struct lane_state *ls = &a->lanes[lane];
    lane_advance(a, ls, now);
    /* Only work delivered while more waited tells what the lane can do. */
    if (delivered_gpu_s > 0 && isfinite(delivered_gpu_s) && ls->queued_jobs > 0) {
        ls->acc += delivered_gpu_s;
        ls->acc_f += delivered_gpu_s;
    }
}

double admit_tenant_budget(const struct admit *a, const char *tenant, int64_t now)
{
    if (!a)
        return 0;
    struct admit_tenant_policy tp;
    admit_tenant_get(a, tenant, &tp);
    double sum = 0;
    bool seen = false;
    for (int i = 0; i < a->ntenants; i++)
        if (a->tenants[i].configured) {
            sum += a->tenants[i].p.weight;
            seen = seen || strcmp(a->tenants[i].p.name, tp.name) == 0;
        }
    if (!seen)
        sum += tp.weight;
    double thr = admit_throughput(a, SCHED_LANE_BATCH, now);
    double share = thr * 60.0 * tp.weight / sum;
    if (tp.rate_gpu_s_per_min > 0 && tp.rate_gpu_s_per_min < share)
        share = tp.rate_gpu_s_per_min;
    return share;
}
