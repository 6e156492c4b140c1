/* advisor.c: the autoscaling advisor and the learned cold starts (see advisor.h). */
#include "core/advisor.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

#define NS_S 1e9

/* A provision request not yet answered by a ready worker. */
struct pending_req {
    char cls[SCHED_NAME_MAX];
    int64_t t_ns;
};

/* A class's learned cold start. Invariant: samples == 0 ⇔ mean unset. */
struct class_stat {
    char cls[SCHED_NAME_MAX];
    double mean_s, last_s;
    int samples;
};

/* Invariant: npending <= ADVISOR_MAX_PENDING, pending oldest first;
 * nclasses <= ADVISOR_MAX_CLASSES. */
struct advisor {
    struct advisor_policy p;
    struct pending_req pending[ADVISOR_MAX_PENDING];
    int npending;
    struct class_stat classes[ADVISOR_MAX_CLASSES];
    int nclasses;
    bool acted;
    int64_t last_action_ns;
};

void advisor_policy_defaults(struct advisor_policy *p)
{
    memset(p, 0, sizeof *p);
    p->k_batch = 2;
    p->k_interactive = 0.25;
    p->up_utilization = 0.8;
    p->down_utilization = 0.5;
    p->max_gpus = 8;
    p->min_gpus = 0;
    p->max_step = 0;
    p->idle_release_s = 120;
    p->cooldown_s = 300;
    p->cold_start_prior_s = 180;
    p->alpha = 0.3;
    p->pending_timeout_s = 1200;
}

int advisor_policy_check(const struct advisor_policy *p, char *why, size_t size)
{
    const char *bad = NULL;
    if (!(p->k_batch > 0))
        bad = "k_batch: must be > 0";
    else if (!(p->k_interactive > 0))
        bad = "k_interactive: must be > 0";
    else if (!(p->up_utilization > 0 && p->up_utilization <= 1))
        bad = "target_utilization: must be in (0, 1]";
    else if (!(p->down_utilization > 0 && p->down_utilization < p->up_utilization))
        bad = "down_utilization: must be > 0 and under target_utilization";
    else if (p->max_gpus < 0 || p->min_gpus < 0 || p->min_gpus > p->max_gpus)
        bad = "min_gpus/max_gpus: need 0 <= min_gpus <= max_gpus";
    else if (p->max_step < 0)
        bad = "max_step: must be >= 0";
    else if (!(p->idle_release_s >= 0) || !(p->cooldown_s >= 0) ||
             !(p->pending_timeout_s > 0))
        bad = "idle_release_s/cooldown_s/pending_timeout_s: must be >= 0 (timeout > 0)";
    else if (!(p->cold_start_prior_s > 0))
        bad = "cold_start_prior_s: must be > 0";
    else if (!(p->alpha > 0 && p->alpha <= 1))
        bad = "cold_start_alpha: must be in (0, 1]";
    if (!bad)
        return 0;
    if (why && size)
        snprintf(why, size, "%s", bad);
    return GPUQ_EINVAL;
}

struct advisor *advisor_create(const struct advisor_policy *p)
{
    if (advisor_policy_check(p, NULL, 0))
        return NULL;
    struct advisor *a = calloc(1, sizeof *a);
    if (a)
        a->p = *p;
    return a;
}

void advisor_destroy(struct advisor *a)
{
    free(a);
}

const struct advisor_policy *advisor_policy(const struct advisor *a)
{
    return &a->p;
}

static const struct class_stat *find_class(const struct advisor *a, const char *cls)
{
    for (int i = 0; i < a->nclasses; i++)
        if (!strcmp(a->classes[i].cls, cls))
            return &a->classes[i];
    return NULL;
}

double advisor_cold_start(const struct advisor *a, const char *cls)
{
    const struct class_stat *c = cls ? find_class(a, cls) : NULL;
    return c && c->samples ? c->mean_s : a->p.cold_start_prior_s;
}

static bool pending_live(const struct advisor *a, const struct pending_req *r, int64_t now)
{
    return (double)(now - r->t_ns) / NS_S <= a->p.pending_timeout_s;
}

int advisor_pending(const struct advisor *a, int64_t now)
{
    int n = 0;
    for (int i = 0; i < a->npending; i++)
        n += pending_live(a, &a->pending[i], now);
    return n;
}

/* Drops requests past their timeout. */
static void prune(struct advisor *a, int64_t now)
{
    int w = 0;
    for (int i = 0; i < a->npending; i++)
        if (pending_live(a, &a->pending[i], now))
            a->pending[w++] = a->pending[i];
    a->npending = w;
}

void advisor_provisioned(struct advisor *a, const char *cls, int count, int64_t now)
{
    prune(a, now);
    for (int i = 0; i < count; i++) {
        if (a->npending == ADVISOR_MAX_PENDING) { /* the oldest goes */
            memmove(a->pending, a->pending + 1, (ADVISOR_MAX_PENDING - 1) * sizeof a->pending[0]);
            a->npending--;
        }
        struct pending_req *r = &a->pending[a->npending++];
        snprintf(r->cls, sizeof r->cls, "%s", cls ? cls : "");
        r->t_ns = now;
    }
}

static void drop_pending(struct advisor *a, int i)
{
    memmove(a->pending + i, a->pending + i + 1,
            (size_t)(a->npending - i - 1) * sizeof a->pending[0]);
    a->npending--;
}

void advisor_provision_failed(struct advisor *a, const char *cls, int count)
{
    for (int i = 0; i < a->npending && count > 0;) {
        if (!strcmp(a->pending[i].cls, cls)) {
            drop_pending(a, i);
            count--;
        } else {
            i++;
        }
    }
}

static struct class_stat *get_class(struct advisor *a, const char *cls)
{
    for (int i = 0; i < a->nclasses; i++)
        if (!strcmp(a->classes[i].cls, cls))
            return &a->classes[i];
    if (a->nclasses == ADVISOR_MAX_CLASSES)
        return NULL;
    struct class_stat *c = &a->classes[a->nclasses++];
    memset(c, 0, sizeof *c);
    snprintf(c->cls, sizeof c->cls, "%s", cls);
    return c;
}

int advisor_worker_ready(struct advisor *a, const char *cls, int64_t now, double *learned_s)
{
    prune(a, now);
    int pick = -1;
    for (int i = 0; i < a->npending && pick < 0; i++)
        if (!strcmp(a->pending[i].cls, cls))
            pick = i;
    if (pick < 0 && a->npending > 0)
        pick = 0;
    if (pick < 0)
        return GPUQ_ENOENT;
    double s = (double)(now - a->pending[pick].t_ns) / NS_S;
    if (s < 0)
        s = 0;
    drop_pending(a, pick);
    struct class_stat *c = get_class(a, cls);
    if (c) {
        c->mean_s = c->samples ? a->p.alpha * s + (1 - a->p.alpha) * c->mean_s : s;
        c->last_s = s;
        c->samples++;
    }
    if (learned_s)
        *learned_s = s;
    return 0;
}

int advisor_classes(const struct advisor *a, int64_t now, struct advisor_class_info *out,
                    int max)
{
    int n = 0;
    for (int i = 0; i < a->nclasses && n < max; i++, n++) {
        memset(&out[n], 0, sizeof out[n]);
        snprintf(out[n].cls, sizeof out[n].cls, "%s", a->classes[i].cls);
        out[n].cold_start_s = advisor_cold_start(a, a->classes[i].cls);
        out[n].last_s = a->classes[i].last_s;
        out[n].samples = a->classes[i].samples;
    }
    for (int i = 0; i < a->npending; i++) {
        if (!pending_live(a, &a->pending[i], now))
            continue;
        int j;
        for (j = 0; j < n; j++)
            if (!strcmp(out[j].cls, a->pending[i].cls))
                break;
        if (j == n) {
            if (n == max)
                continue;
            memset(&out[n], 0, sizeof out[n]);
            snprintf(out[n].cls, sizeof out[n].cls, "%s", a->pending[i].cls);
            out[n].cold_start_s = a->p.cold_start_prior_s;
            n++;
        }
        out[j].pending++;
    }
    return n;
}

void advisor_acted(struct advisor *a, const struct advisor_rec *rec, int64_t now)
{
    if (rec->action == ADVISOR_HOLD)
        return;
    a->acted = true;
    a->last_action_ns = now;
    if (rec->action == ADVISOR_UP)
        advisor_provisioned(a, rec->cls, rec->count, now);
}

/* ---- the decision ---- */

static int by_idle_desc(const void *x, const void *y)
{
    const struct advisor_gpu *const *a = x, *const *b = y;
    if ((*a)->idle_s != (*b)->idle_s)
        return (*a)->idle_s < (*b)->idle_s ? 1 : -1;
    return strcmp((*a)->id, (*b)->id);
}

static double util_of(double load, int gpus, double speed)
{
    if (gpus > 0)
        return load / (gpus * speed);
    return load > 0 ? INFINITY : 0;
}

/* Writes u for a reason: a number, or "∞" without a GPU. */
static const char *fmt_util(char *b, size_t n, double u)
{
    if (isfinite(u))
        snprintf(b, n, "%.2f", u);
    else
        snprintf(b, n, "inf (no GPU)");
    return b;
}

/* Writes r's reason (cut to fit). */
static void say(struct advisor_rec *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct advisor_rec *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof r->reason, fmt, ap);
    va_end(ap);
}

static const char *lane_name(enum advisor_lane l)
{
    static const char *const names[] = {"no lane", "interactive", "batch", "both lanes"};
    return names[l];
}

/* Writes both lanes' arithmetic: "interactive 60.0 GPU-s > k_interactive 0.25 x
 * C 180 s = 45.0; batch 0.0 GPU-s <= k_batch 2 x C 180 s = 360.0". */
static const char *fmt_lanes(char *b, size_t n, const struct advisor_rec *r)
{
    snprintf(b, n,
             "interactive backlog %.1f GPU-s %s k_interactive %.3g x cold start %.3g s = %.1f; "
             "batch backlog %.1f GPU-s %s k_batch %.3g x %.3g s = %.1f",
             r->backlog_interactive_gpu_s,
             r->backlog_interactive_gpu_s > r->threshold_interactive_gpu_s ? ">" : "<=",
             r->k_interactive, r->cold_start_s, r->threshold_interactive_gpu_s,
             r->backlog_batch_gpu_s, r->backlog_batch_gpu_s > r->threshold_batch_gpu_s ? ">" : "<=",
             r->k_batch, r->cold_start_s, r->threshold_batch_gpu_s);
    return b;
}

static void decide_down(const struct advisor *a, const struct advisor_input *in,
                        struct advisor_rec *r)
{
    const struct advisor_policy *p = &a->p;
    char ub[32], ua[32], lb[300];
    if (r->pending > 0) {
        say(r,
                 "hold: %d GPU(s) requested and not ready yet; utilization %s", r->pending,
                 fmt_util(ub, sizeof ub, r->util_before));
        return;
    }
    const struct advisor_gpu **idle = calloc((size_t)in->ngpus + 1, sizeof *idle);
    if (!idle) {
        say(r, "hold: out of memory");
        return;
    }
    int nidle = 0, nprot = 0;
    for (int i = 0; i < in->ngpus; i++) {
        const struct advisor_gpu *g = &in->gpus[i];
        if (g->draining || g->busy || g->idle_s <= p->idle_release_s)
            continue;
        if (g->protected_model) {
            nprot++;
            continue;
        }
        idle[nidle++] = g;
    }
    qsort(idle, (size_t)nidle, sizeof *idle, by_idle_desc);
    int m = 0;
    while (m < nidle && m < ADVISOR_MAX_RELEASE) {
        int left = r->gpus - m - 1;
        if (left < p->min_gpus)
            break;
        double u = util_of(r->load, left, r->speed);
        if (u > p->down_utilization)
            break;
        snprintf(r->release[m], SCHED_NAME_MAX, "%s", idle[m]->id);
        m++;
    }
    free(idle);
    if (m == 0) {
        if (nidle > 0)
            say(r,
                     "hold: %d GPU(s) idle over %.0f s, but releasing one would leave "
                     "utilization over %.2f (or under min_gpus %d); utilization %s",
                     nidle, p->idle_release_s, p->down_utilization, p->min_gpus,
                     fmt_util(ub, sizeof ub, r->util_before));
        else
            say(r,
                     "hold: utilization %s; %s; no GPU idle over %.0f s%s",
                     fmt_util(ub, sizeof ub, r->util_before), fmt_lanes(lb, sizeof lb, r),
                     p->idle_release_s,
                     nprot ? " (idle ones hold a model queued work needs)" : "");
        return;
    }
    r->action = ADVISOR_DOWN;
    r->count = m;
    r->util_after = util_of(r->load, r->gpus - m, r->speed);
    say(r,
             "release %d GPU(s) idle over %.0f s: %s; utilization %s -> %s (<= %.2f) with "
             "%d GPU(s)",
             m, p->idle_release_s, fmt_lanes(lb, sizeof lb, r),
             fmt_util(ub, sizeof ub, r->util_before), fmt_util(ua, sizeof ua, r->util_after),
             p->down_utilization, r->gpus - m);
}

int advisor_decide(const struct advisor *a, const struct advisor_input *in, int64_t now,
                   struct advisor_rec *r)
{
    memset(r, 0, sizeof *r);
    if (!in->up_class || !in->up_class[0] || in->ndemands < 0 || in->ngpus < 0 ||
        (in->ndemands && !in->demands) || (in->ngpus && !in->gpus))
        return GPUQ_EINVAL;
    const struct advisor_policy *p = &a->p;
    for (int i = 0; i < in->ndemands; i++) {
        const struct advisor_demand *d = &in->demands[i];
        if (!(d->backlog_gpu_s >= 0) || !(d->throughput >= 0))
            return GPUQ_EINVAL;
        if (d->lane == SCHED_LANE_INTERACTIVE)
            r->backlog_interactive_gpu_s += d->backlog_gpu_s;
        else
            r->backlog_batch_gpu_s += d->backlog_gpu_s;
        r->throughput += d->throughput;
    }
    r->backlog_gpu_s = r->backlog_interactive_gpu_s + r->backlog_batch_gpu_s;
    for (int i = 0; i < in->ngpus; i++)
        r->gpus += !in->gpus[i].draining;
    snprintf(r->cls, sizeof r->cls, "%s", in->up_class);
    r->pending = advisor_pending(a, now);
    r->max_gpus = p->max_gpus;
    r->k_interactive = p->k_interactive;
    r->k_batch = p->k_batch;
    r->speed = in->speed > 0 ? in->speed : 1.0;
    r->cold_start_s = advisor_cold_start(a, in->up_class);
    r->threshold_interactive_gpu_s = p->k_interactive * r->cold_start_s;
    r->threshold_batch_gpu_s = p->k_batch * r->cold_start_s;
    r->load = r->throughput + r->backlog_interactive_gpu_s / r->threshold_interactive_gpu_s +
              r->backlog_batch_gpu_s / r->threshold_batch_gpu_s;
    int n = r->gpus + r->pending;
    r->util_before = util_of(r->load, n, r->speed);
    r->util_after = r->util_before;
    double since = a->acted ? (double)(now - a->last_action_ns) / NS_S : INFINITY;
    r->cooldown_left_s = since < p->cooldown_s ? p->cooldown_s - since : 0;
    char ub[32], ua[32], lb[300];

    bool over_i = r->backlog_interactive_gpu_s > r->threshold_interactive_gpu_s;
    bool over_b = r->backlog_batch_gpu_s > r->threshold_batch_gpu_s;
    r->lane = (over_i ? ADVISOR_LANE_INTERACTIVE : 0) | (over_b ? ADVISOR_LANE_BATCH : 0);
    bool inter_only = r->lane == ADVISOR_LANE_INTERACTIVE;
    r->k = inter_only ? r->k_interactive : r->k_batch;
    r->threshold_gpu_s = inter_only ? r->threshold_interactive_gpu_s : r->threshold_batch_gpu_s;
    fmt_lanes(lb, sizeof lb, r);

    /* With no GPU at all, any queued work is worth one: it would wait forever. */
    bool starved = n == 0 && r->backlog_gpu_s > 0;
    bool worth = over_i || over_b || starved;
    bool hot = r->util_before > p->up_utilization;
    if (worth && hot) {
        if (r->cooldown_left_s > 0) {
            say(r,
                     "hold: cooling down (%.0f s left) though %s; utilization %s > %.2f",
                     r->cooldown_left_s, lb, fmt_util(ub, sizeof ub, r->util_before),
                     p->up_utilization);
            return 0;
        }
        int want = (int)ceil(r->load / (p->up_utilization * r->speed) - 1e-9) - n;
        int pay = (int)floor(r->backlog_interactive_gpu_s / r->threshold_interactive_gpu_s) +
                  (int)floor(r->backlog_batch_gpu_s / r->threshold_batch_gpu_s);
        if (starved && pay < 1)
            pay = 1;
        int room = p->max_gpus - n;
        int add = want;
        const char *limit = "to bring utilization to the target";
        if (add > pay) {
            add = pay;
            limit = "one per k cold starts of its lane's backlog";
        }
        if (p->max_step > 0 && add > p->max_step) {
            add = p->max_step;
            limit = "max_step";
        }
        if (add > room) {
            add = room;
            limit = "the maximum fleet size";
        }
        if (add <= 0) {
            say(r,
                     "hold: at the maximum fleet size (%d GPU(s) with %d pending, max %d) "
                     "though %s; utilization %s > %.2f",
                     r->gpus, r->pending, p->max_gpus, lb,
                     fmt_util(ub, sizeof ub, r->util_before), p->up_utilization);
            return 0;
        }
        r->action = ADVISOR_UP;
        r->count = add;
        r->util_after = util_of(r->load, n + add, r->speed);
        say(r,
                 "add %d %s GPU(s) for %s (%s): %s; load %.3f GPU-s/s (throughput %.3f + "
                 "backlogs over k cold starts); utilization %s -> %s with %d GPU(s) "
                 "(%d pending, max %d)",
                 add, in->up_class, starved && !r->lane ? "work no GPU can serve"
                                                        : lane_name(r->lane),
                 limit, lb, r->load, r->throughput, fmt_util(ub, sizeof ub, r->util_before),
                 fmt_util(ua, sizeof ua, r->util_after), n + add, r->pending, p->max_gpus);
        return 0;
    }
    if (worth) { /* the queue is long, but the fleet on hand (or coming) keeps up */
        say(r,
                 "hold: %s, but utilization %s <= target %.2f with %d GPU(s) (%d pending)", lb,
                 fmt_util(ub, sizeof ub, r->util_before), p->up_utilization, r->gpus,
                 r->pending);
        return 0;
    }
    if (r->cooldown_left_s > 0) {
        say(r, "hold: cooling down (%.0f s left); %s; "
                 "utilization %s", r->cooldown_left_s, lb, fmt_util(ub, sizeof ub, r->util_before));
        return 0;
    }
    decide_down(a, in, r);
    return 0;
}
