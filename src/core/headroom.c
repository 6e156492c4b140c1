/* headroom.c: the adaptive interactive headroom behind headroom.h — Erlang C,
 * the measured interactive load per capability, and the rule that keeps
 * enough good GPUs free of batch work. */
#include "core/headroom.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/err.h"
#include "core/sched_int.h"

double headroom_p_wait(int c, double a, double service_s, double t)
{
    if (!(a > 0))
        return 0;
    if (c <= 0 || (double)c <= a)
        return 1;
    /* Erlang B by the stable recurrence, then Erlang C from it. */
    double b = 1;
    for (int n = 1; n <= c; n++)
        b = a * b / ((double)n + a * b);
    double pc = (double)c * b / ((double)c - a * (1 - b));
    if (pc > 1)
        pc = 1;
    if (!(t > 0) || !(service_s > 0))
        return pc;
    return pc * exp(-((double)c - a) * t / service_s);
}

/* headroom_servers, searching from c = from: P(wait) falls as c grows and
 * rises with a, so a caller stepping a upwards may start at the last answer. */
static int servers_from(double a, double service_s, double t, double share, int max_c, int from)
{
    if (!(a > 0) || !(share < 1))
        return 0;
    for (int c = from > 0 ? from : 0; c <= max_c; c++)
        if (headroom_p_wait(c, a, service_s, t) <= share)
            return c;
    return max_c + 1;
}

int headroom_servers(double a, double service_s, double t, double share, int max_c)
{
    return servers_from(a, service_s, t, share, max_c, 0);
}

/* A batch ETA prices the work of the lane's whole bound ahead, not the next
 * headroom window: it forecasts the interactive load from this many windows
 * of history. On bench/admission-live the headroom's one window (12 s there)
 * read 1.72 Erlangs on seed 11 and 2.32 on seed 7 as the flood began, while
 * the next 20 s offered 2.09 and 2.20; three windows read 1.80 and 2.26. */
#define HEADROOM_FORECAST_WINDOWS 3.0

/* Decays the capability's interactive figures to now: over one headroom
 * window (n, work), and over HEADROOM_FORECAST_WINDOWS (nl, workl; either
 * may be NULL). */
static void ia_decay2(const struct sched *s, const struct scap *c, int64_t now, double *n,
                      double *work, double *nl, double *workl)
{
    double f = 1, fl = 1;
    if (now > c->ia_ns && s->cfg.headroom_window_s > 0) {
        double dt = (double)(now - c->ia_ns) / 1e9;
        f = exp(-dt / s->cfg.headroom_window_s);
        fl = exp(-dt / (s->cfg.headroom_window_s * HEADROOM_FORECAST_WINDOWS));
    }
    *n = c->ia_count * f;
    *work = c->ia_work * f;
    if (nl)
        *nl = c->ia_count_l * fl;
    if (workl)
        *workl = c->ia_work_l * fl;
}

static void ia_decay(const struct sched *s, const struct scap *c, int64_t now, double *n,
                     double *work)
{
    ia_decay2(s, c, now, n, work, NULL, NULL);
}

void sched_headroom_note(struct sched *s, struct scap *c, double cost_s, int64_t now)
{
    double n, work, nl, workl;
    ia_decay2(s, c, now, &n, &work, &nl, &workl);
    double add = cost_s > 0 ? cost_s : 0;
    c->ia_count = n + 1;
    c->ia_work = work + add;
    if (c->ia_count_l <= 0)
        c->ia_first_ns = now;
    c->ia_count_l = nl + 1;
    c->ia_work_l = workl + add;
    if (now > c->ia_ns)
        c->ia_ns = now;
}

/* Offered load (Erlangs) and mean service time of cap's interactive jobs. */
static void ia_load(const struct sched *s, const struct scap *c, int64_t now, double *a,
                    double *svc)
{
    double n, work;
    ia_decay(s, c, now, &n, &work);
    double win = s->cfg.headroom_window_s > 0 ? s->cfg.headroom_window_s : 1;
    *a = work / win;
    *svc = n > 0 ? work / n : 0;
}

static int cap_headroom(const struct sched *s, const struct scap *c, int64_t now, double *a,
                        double *svc)
{
    ia_load(s, c, now, a, svc);
    if (!(s->cfg.headroom_share > 0))
        return 0;
    /* Interactive counts as idle once less than one arrival's weight is left
     * in the window (the last one came more than a window ago), or while it
     * offers less than headroom_share Erlangs (a trickle that keeps less
     * than that share of one GPU busy): no headroom then, and no reserved
     * floor — the reserved pool's own rule (lend while no interactive job
     * waits) covers a trickle. */
    double n, work;
    ia_decay(s, c, now, &n, &work);
    if (n < exp(-1.0) || *a < s->cfg.headroom_share)
        return 0;
    return headroom_servers(*a, *svc, s->cfg.headroom_wait_s, s->cfg.headroom_share,
                            c->members);
}

int sched_headroom_get(const struct sched *s, const char *cap, int64_t now,
                       struct headroom_figures *out)
{
    if (!s || !cap || !out)
        return GPUQ_EINVAL;
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < s->ncaps; i++)
        if (strcmp(s->caps[i].name, cap) == 0) {
            out->gpus = cap_headroom(s, &s->caps[i], now, &out->erlangs, &out->service_s);
            return 0;
        }
    return GPUQ_ENOENT;
}

/* How good w is for an interactive job: its speed, divided by the hot
 * penalty when it runs hot (the scheduler's own thermal factor). */
static double quality(const struct sched *s, const struct sworker *w)
{
    double q = sched_worker_speed(w);
    if (w->info.temp_c >= s->cfg.hot_temp_c && s->cfg.hot_penalty > 0)
        q /= s->cfg.hot_penalty;
    return q;
}

/* m is free of batch work now, or its batch work ends within horizon_ns. */
static bool batch_free_soon(const struct sworker *m, int64_t horizon_ns)
{
    for (const struct sjob *j = m->placed_head; j; j = j->next)
        if (j->spec.lane == SCHED_LANE_BATCH)
            return false;
    for (const struct sjob *j = m->run_head; j; j = j->next) {
        if (j->spec.lane != SCHED_LANE_BATCH)
            continue;
        int64_t end = j->est_start_ns + (int64_t)llround((j->est_load_s + j->est_run_s) * 1e9);
        if (end > horizon_ns)
            return false;
    }
    return true;
}

bool sched_headroom_blocks(const struct sched *s, const struct sworker *w, int64_t now,
                           char *why, size_t n)
{
    if (!(s->cfg.headroom_share > 0))
        return false;
    int64_t horizon = now + (int64_t)llround(s->cfg.headroom_wait_s * 1e9);
    double qw = quality(s, w);
    for (int k = 0; k < w->ncaps; k++) {
        const struct scap *c = &s->caps[w->caps[k]];
        double a, svc;
        int need = cap_headroom(s, c, now, &a, &svc);
        if (need <= 0)
            continue;
        /* The reserved pool is the floor while interactive work comes in. */
        int reserved = 0, spare = 0, usable = 0;
        for (int i = 0; i < s->nworkers; i++) {
            const struct sworker *m = s->workers[i];
            if (!sched_worker_live(m) || sched_worker_cap_slot(m, w->caps[k]) < 0)
                continue;
            usable++;
            if (m->info.reserved)
                reserved++;
            if (m != w && quality(s, m) >= qw - 1e-9 && batch_free_soon(m, horizon))
                spare++;
        }
        if (need < reserved)
            need = reserved;
        /* No starvation: the headroom never takes a capability's last GPU
         * from batch (with one GPU, the reserved pool's rule alone holds). */
        if (need > usable - 1)
            need = usable - 1;
        if (spare < need) {
            if (why)
                snprintf(why, n,
                         "interactive headroom: %s needs %d GPUs free of batch (%.2f Erlangs, "
                         "%.2f s each); %d as good as this one are",
                         c->name, need, a, svc, spare);
            return true;
        }
    }
    return false;
}

static int quality_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Batch's rate on the usable GPUs q (quality, speed pairs, best first) beside
 * an interactive load of a Erlangs of svc seconds each, as
 * sched_headroom_blocks counts: the best `need` usable GPUs (never fewer than
 * the reserved pool, never the last one) stay free of batch, and batch runs
 * on the others at their speed, less the interactive jobs that find every
 * headroom GPU busy (Erlang C: past preempt_after_s when preemption is on)
 * and run on batch's GPUs. The batch work a preemption throws away is not
 * counted: with the stop delivered within the bound it is small, and
 * counting half a batch job per preemption made bench/admission-live's batch
 * ETAs late (median error 0.179, bias +0.168; 0.085 and +0.013 without the
 * term, in back-to-back runs). Batch never gets less than a tenth of its
 * GPUs' speed here: the slots between still come its way. */
static double rate_beside(const struct sched *s, const struct scap *c, const double *q,
                          int usable, int reserved, double a, double svc, int *from)
{
    int need = servers_from(a, svc, s->cfg.headroom_wait_s, s->cfg.headroom_share, c->members,
                            *from);
    *from = need;
    if (need < reserved)
        need = reserved;
    if (need > usable - 1)
        need = usable - 1;
    double speed = 0;
    for (int k = need > 0 ? need : 0; k < usable; k++)
        speed += q[2 * k + 1];
    double t = s->cfg.preempt_after_s > 0 ? s->cfg.preempt_after_s : 0;
    double over = need > 0 ? headroom_p_wait(need, a, svc, t) : 1;
    double rate = speed - over * a;
    return rate > speed / 10 ? rate : speed / 10;
}

double sched_headroom_batch_rate(const struct sched *s, int cap, int64_t now)
{
    if (!s || cap < 0 || cap >= s->ncaps)
        return -1;
    const struct scap *c = &s->caps[cap];
    double a, svc;
    if (cap_headroom(s, c, now, &a, &svc) <= 0)
        return -1;
    int usable = 0, reserved = 0;
    double *q = xcalloc((size_t)(s->nworkers > 0 ? s->nworkers : 1), 2 * sizeof(double));
    for (int i = 0; i < s->nworkers; i++) {
        const struct sworker *m = s->workers[i];
        if (!sched_worker_live(m) || sched_worker_cap_slot(m, cap) < 0)
            continue;
        q[2 * usable] = quality(s, m);
        q[2 * usable + 1] = sched_worker_speed(m);
        usable++;
        if (m->info.reserved)
            reserved++;
    }
    if (usable <= 0) {
        free(q);
        return -1;
    }
    qsort(q, (size_t)usable, 2 * sizeof(double), quality_desc);
    /* The forecast load: the longer history (HEADROOM_FORECAST_WINDOWS), over
     * the part of it since the first arrival (a stream younger than the span
     * has not filled it). */
    double n, work, nl, workl;
    ia_decay2(s, c, now, &n, &work, &nl, &workl);
    double span = s->cfg.headroom_window_s * HEADROOM_FORECAST_WINDOWS;
    double fill = 1;
    if (now > c->ia_first_ns)
        fill = 1 - exp(-((double)(now - c->ia_first_ns) / 1e9) / span);
    if (workl > 0 && nl > 0 && fill > 0.05) {
        a = workl / (span * fill);
        svc = workl / nl;
    }
    /* The headroom keeps `need` GPUs from a step function of its one-window
     * load, which counts about n arrivals: a Poisson stream spreads it by
     * about a / sqrt(n), so near a step `need` flips between neighbours for
     * the whole flood. Batch's rate is its mean over that spread (a normal,
     * -2..+2 sigma), not its value at the one load read now: on
     * bench/admission-live, 1.72 Erlangs (seed 11) priced 4 GPUs for batch
     * and 2.32 (seed 7) 3, while both floods ran beside about 2.1-2.2. */
    double sd = n > 1 ? a / sqrt(n) : 0;
    double sum = 0, wsum = 0;
    int from = 0; /* the loads rise with k: so does the headroom */
    for (int k = -8; k <= 8; k++) {
        double z = k / 4.0, x = a + z * sd;
        if (!(x > 0))
            continue;
        double w = exp(-z * z / 2);
        sum += w * rate_beside(s, c, q, usable, reserved, x, svc, &from);
        wsum += w;
    }
    free(q);
    return wsum > 0 ? sum / wsum : -1; /* a > 0 here: z = 0 always counts */
}
