/* fleet_scale.c: `gpuq-sim scale` — a fleet that grows and shrinks over a day
 * of traffic, driven by the production autoscaling advisor (core/advisor.h)
 * or by a baseline, with cold starts drawn from a distribution and every
 * GPU-second billed from its provision request to its release.
 *
 *   gpuq-sim scale --workload bench/workloads/diurnal.json [--policy NAME|all] [--json]
 *
 * Policies: advisor (gpuq's), fixed (a fleet at peak size all day),
 * queue-length (scale on the number of queued jobs alone), util80 (add a GPU
 * while utilization > 80%, release idle ones under 50%).
 *
 * The model is deliberately small: one job per GPU at a time, interactive
 * jobs before batch ones, FIFO within a lane, no model loading; time advances
 * in steps of one second. Every policy sees the same jobs and the same
 * cold-start draws (in request order). Workload file (JSON):
 *   {"name", "seed", "hours", "max_gpus", "initial_gpus",
 *    "cold_start_s": {"min", "max"},                       uniform
 *    "interactive": {"trough_per_s", "peak_per_s", "peak_hour", "run_s", "run_cv"},
 *    "batch": [{"at_hour", "jobs", "over_s", "run_s", "run_cv"}],
 *    "advisor": {advisor settings by their [scale] names}} */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/advisor.h"
#include "sim/rng.h"

#define NS 1000000000LL
#define TICK_S 10

enum lane { L_INTER = 0, L_BATCH = 1 };

struct sjob {
    double arrive, run_s, finish;
    int lane;
};

struct scale_wl {
    char name[64];
    unsigned long long seed;
    double hours;
    int max_gpus, initial_gpus;
    double cs_min, cs_max;
    double i_trough, i_peak, i_peak_h, i_run, i_cv;
    struct { double at_h, over_s, run_s, cv; int jobs; } batch[8];
    int nbatch;
    struct advisor_policy adv;
};

enum gstate { G_STARTING, G_READY, G_GONE };

struct sgpu {
    enum gstate st;
    double requested, ready_at, gone_at, last_busy;
    int job;            /* -1 idle */
    double job_end;
};

struct fleet {
    const struct scale_wl *wl;
    struct sjob *jobs;
    int njobs;
    struct sgpu *g;
    int ng, capg;
    int *q[2];          /* queued job indices per lane, FIFO */
    int qh[2], qt[2];
    struct rng cs_rng;  /* cold-start draws */
    double now;
    int ups, downs, added, released;
    double last_action;
    struct advisor *adv;
};

struct result {
    const char *policy;
    double gpu_hours, i_p50, i_p99, batch_done_s, peak_gpus;
    int ups, downs, added, released, unfinished;
};

/* ---- the workload ---- */

static double num(json_t *o, const char *k, double def)
{
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : def;
}

static int load_wl(const char *path, struct scale_wl *w, char *err, size_t n)
{
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o) {
        snprintf(err, n, "%s:%d: %s", path, je.line, je.text);
        return -1;
    }
    memset(w, 0, sizeof *w);
    snprintf(w->name, sizeof w->name, "%s",
             json_string_value(json_object_get(o, "name")) ?: "workload");
    w->seed = (unsigned long long)num(o, "seed", 1);
    w->hours = num(o, "hours", 24);
    w->max_gpus = (int)num(o, "max_gpus", 16);
    w->initial_gpus = (int)num(o, "initial_gpus", 1);
    json_t *cs = json_object_get(o, "cold_start_s");
    w->cs_min = num(cs, "min", 120);
    w->cs_max = num(cs, "max", 240);
    json_t *in = json_object_get(o, "interactive");
    w->i_trough = num(in, "trough_per_s", 0.2);
    w->i_peak = num(in, "peak_per_s", 1.0);
    w->i_peak_h = num(in, "peak_hour", 14);
    w->i_run = num(in, "run_s", 6);
    w->i_cv = num(in, "run_cv", 0.5);
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(o, "batch"), i, b) {
        if (w->nbatch == 8)
            break;
        w->batch[w->nbatch].at_h = num(b, "at_hour", 15);
        w->batch[w->nbatch].jobs = (int)num(b, "jobs", 100);
        w->batch[w->nbatch].over_s = num(b, "over_s", 600);
        w->batch[w->nbatch].run_s = num(b, "run_s", 60);
        w->batch[w->nbatch].cv = num(b, "run_cv", 0.3);
        w->nbatch++;
    }
    advisor_policy_defaults(&w->adv);
    w->adv.max_gpus = w->max_gpus;
    json_t *a = json_object_get(o, "advisor");
    w->adv.k_batch = num(a, "k", w->adv.k_batch);
    w->adv.k_batch = num(a, "k_batch", w->adv.k_batch);
    w->adv.k_interactive = num(a, "k_interactive", w->adv.k_interactive);
    w->adv.up_utilization = num(a, "target_utilization", w->adv.up_utilization);
    w->adv.down_utilization = num(a, "down_utilization", w->adv.down_utilization);
    w->adv.min_gpus = (int)num(a, "min_gpus", w->adv.min_gpus);
    w->adv.idle_release_s = num(a, "idle_release_s", w->adv.idle_release_s);
    w->adv.cooldown_s = num(a, "cooldown_s", w->adv.cooldown_s);
    w->adv.cold_start_prior_s = num(a, "cold_start_prior_s", w->adv.cold_start_prior_s);
    json_decref(o);
    char why[160];
    if (w->max_gpus < 1 || w->initial_gpus < 0 || w->initial_gpus > w->max_gpus) {
        snprintf(err, n, "%s: need 0 <= initial_gpus <= max_gpus, max_gpus >= 1", path);
        return -1;
    }
    if (!(w->cs_min > 0 && w->cs_max >= w->cs_min)) {
        snprintf(err, n, "%s: cold_start_s: need 0 < min <= max", path);
        return -1;
    }
    if (advisor_policy_check(&w->adv, why, sizeof why)) {
        snprintf(err, n, "%s: advisor.%s", path, why);
        return -1;
    }
    return 0;
}

static int by_arrival(const void *x, const void *y)
{
    const struct sjob *a = x, *b = y;
    return a->arrive < b->arrive ? -1 : a->arrive > b->arrive;
}

static struct sjob *make_jobs(const struct scale_wl *w, int *n)
{
    struct rng r;
    rng_seed(&r, w->seed);
    int cap = 1024, k = 0;
    struct sjob *v = malloc((size_t)cap * sizeof *v);
    double end = w->hours * 3600, t = 0;
    /* Interactive: a Poisson stream whose rate follows a cosine over the day
     * (thinning against the peak rate). */
    for (;;) {
        t += rng_exp(&r, 1.0 / w->i_peak);
        if (t >= end)
            break;
        double phase = 2 * M_PI * (t / 3600 - w->i_peak_h) / 24;
        double rate = w->i_trough + (w->i_peak - w->i_trough) * (0.5 + 0.5 * cos(phase));
        if (rng_uniform(&r) * w->i_peak > rate)
            continue;
        if (k == cap)
            v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
        v[k++] = (struct sjob){t, rng_gamma_mean_cv(&r, w->i_run, w->i_cv), -1, L_INTER};
    }
    for (int b = 0; b < w->nbatch; b++) {
        for (int j = 0; j < w->batch[b].jobs; j++) {
            if (k == cap)
                v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            double at = w->batch[b].at_h * 3600 + rng_uniform(&r) * w->batch[b].over_s;
            v[k++] = (struct sjob){at, rng_gamma_mean_cv(&r, w->batch[b].run_s, w->batch[b].cv),
                                   -1, L_BATCH};
        }
    }
    qsort(v, (size_t)k, sizeof *v, by_arrival);
    *n = k;
    return v;
}

/* ---- the fleet ---- */

static int add_gpu(struct fleet *f, double ready_at)
{
    if (f->ng == f->capg) {
        f->capg = f->capg ? 2 * f->capg : 64;
        f->g = realloc(f->g, (size_t)f->capg * sizeof *f->g);
    }
    f->g[f->ng] = (struct sgpu){ready_at <= f->now ? G_READY : G_STARTING, f->now, ready_at, 0,
                                ready_at, -1, 0};
    return f->ng++;
}

static int count(const struct fleet *f, enum gstate st, bool busy_only)
{
    int n = 0;
    for (int i = 0; i < f->ng; i++)
        n += f->g[i].st == st && (!busy_only || f->g[i].job >= 0);
    return n;
}

static void provision(struct fleet *f, int n)
{
    for (int i = 0; i < n; i++) {
        double cs = f->wl->cs_min + rng_uniform(&f->cs_rng) * (f->wl->cs_max - f->wl->cs_min);
        add_gpu(f, f->now + cs);
    }
    f->ups++;
    f->added += n;
    f->last_action = f->now;
}

static void release(struct fleet *f, int i)
{
    f->g[i].st = G_GONE;
    f->g[i].gone_at = f->now;
    f->released++;
}

static double queued_gpu_s(const struct fleet *f, int lane)
{
    double s = 0;
    for (int i = f->qh[lane]; i < f->qt[lane]; i++)
        s += f->jobs[f->q[lane][i]].run_s;
    return s;
}

static int queued(const struct fleet *f)
{
    return f->qt[0] - f->qh[0] + f->qt[1] - f->qh[1];
}

/* ---- policies (every TICK_S) ---- */

static void pol_advisor(struct fleet *f)
{
    struct advisor_demand d[2];
    memset(d, 0, sizeof d);
    for (int l = 0; l < 2; l++) {
        snprintf(d[l].capability, sizeof d[l].capability, "sim");
        d[l].lane = l;
        d[l].backlog_gpu_s = queued_gpu_s(f, l);
    }
    d[0].throughput = count(f, G_READY, true);
    struct advisor_gpu *g = calloc((size_t)f->ng + 1, sizeof *g);
    int *idx = calloc((size_t)f->ng + 1, sizeof *idx);
    int n = 0;
    for (int i = 0; i < f->ng; i++) {
        if (f->g[i].st != G_READY)
            continue;
        snprintf(g[n].id, sizeof g[n].id, "%d", i);
        snprintf(g[n].cls, sizeof g[n].cls, "sim");
        g[n].busy = f->g[i].job >= 0;
        g[n].idle_s = g[n].busy ? 0 : f->now - f->g[i].last_busy;
        idx[n++] = i;
    }
    struct advisor_input in = {d, 2, g, n, 1, "sim"};
    struct advisor_rec r;
    int64_t now = (int64_t)(f->now * NS);
    if (advisor_decide(f->adv, &in, now, &r) == 0 && r.action != ADVISOR_HOLD) {
        advisor_acted(f->adv, &r, now);
        if (r.action == ADVISOR_UP) {
            provision(f, r.count);
        } else {
            for (int k = 0; k < r.count; k++)
                release(f, atoi(r.release[k]));
            f->downs++;
            f->last_action = f->now;
        }
    }
    free(g);
    free(idx);
}

/* Releases up to max idle GPUs idle longer than idle_s; returns how many. */
static int release_idle(struct fleet *f, double idle_s, int max)
{
    int done = 0;
    for (int i = 0; i < f->ng && done < max; i++)
        if (f->g[i].st == G_READY && f->g[i].job < 0 && f->now - f->g[i].last_busy > idle_s) {
            release(f, i);
            done++;
        }
    return done;
}

/* Queue length alone: enough GPUs for the jobs running plus one per two
 * queued, at once; idle GPUs released after 60 s with the queue empty. */
static void pol_queue(struct fleet *f)
{
    int have = count(f, G_READY, false) + count(f, G_STARTING, false);
    int want = count(f, G_READY, true) + (queued(f) + 1) / 2;
    if (want > f->wl->max_gpus)
        want = f->wl->max_gpus;
    if (want > have) {
        provision(f, want - have);
    } else if (queued(f) == 0 && release_idle(f, 60, have)) {
        f->downs++;
    }
}

/* Utilization: one more GPU while busy/ready > 0.8 (60 s apart); one idle GPU
 * released after 300 s while under 0.5. */
static void pol_util(struct fleet *f)
{
    int ready = count(f, G_READY, false), starting = count(f, G_STARTING, false);
    double u = ready ? (double)count(f, G_READY, true) / ready : (queued(f) ? 1 : 0);
    if (u > 0.8 && starting == 0 && ready < f->wl->max_gpus && f->now - f->last_action >= 60)
        provision(f, 1);
    else if (u < 0.5 && release_idle(f, 300, 1))
        f->downs++;
}

static void pol_fixed(struct fleet *f)
{
    (void)f;
}

struct spol {
    const char *name;
    void (*tick)(struct fleet *f);
    bool fixed;
};

static const struct spol policies[] = {
    {"advisor", pol_advisor, false},
    {"fixed", pol_fixed, true},
    {"queue-length", pol_queue, false},
    {"util80", pol_util, false},
};
#define NPOLS ((int)(sizeof policies / sizeof policies[0]))

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static void run(const struct scale_wl *wl, const struct sjob *jobs, int njobs,
                const struct spol *p, struct result *res)
{
    struct fleet f;
    memset(&f, 0, sizeof f);
    f.wl = wl;
    f.jobs = malloc((size_t)njobs * sizeof *f.jobs);
    memcpy(f.jobs, jobs, (size_t)njobs * sizeof *jobs);
    f.njobs = njobs;
    for (int l = 0; l < 2; l++)
        f.q[l] = malloc((size_t)njobs * sizeof(int));
    rng_seed(&f.cs_rng, wl->seed ^ 0x5ca1e);
    f.last_action = -1e9;
    f.adv = advisor_create(&wl->adv);
    int n0 = p->fixed ? wl->max_gpus : wl->initial_gpus;
    for (int i = 0; i < n0; i++)
        add_gpu(&f, 0);
    double end = wl->hours * 3600, peak = n0;
    int next = 0, done = 0;
    double first_batch = -1, last_batch = 0;
    for (f.now = 0; done < njobs && f.now < end + 12 * 3600; f.now += 1) {
        while (next < njobs && f.jobs[next].arrive <= f.now) {
            int l = f.jobs[next].lane;
            f.q[l][f.qt[l]++] = next;
            if (l == L_BATCH && first_batch < 0)
                first_batch = f.jobs[next].arrive;
            next++;
        }
        for (int i = 0; i < f.ng; i++) {
            struct sgpu *g = &f.g[i];
            if (g->st == G_STARTING && g->ready_at <= f.now) {
                g->st = G_READY;
                g->last_busy = f.now;
                if (!p->fixed)
                    advisor_worker_ready(f.adv, "sim", (int64_t)(f.now * NS), NULL);
            }
            if (g->st != G_READY)
                continue;
            if (g->job >= 0 && g->job_end <= f.now) {
                f.jobs[g->job].finish = g->job_end;
                if (f.jobs[g->job].lane == L_BATCH && g->job_end > last_batch)
                    last_batch = g->job_end;
                g->job = -1;
                g->last_busy = f.now;
                done++;
            }
        }
        for (int i = 0; i < f.ng; i++) {
            struct sgpu *g = &f.g[i];
            if (g->st != G_READY || g->job >= 0)
                continue;
            int l = f.qh[L_INTER] < f.qt[L_INTER] ? L_INTER
                    : f.qh[L_BATCH] < f.qt[L_BATCH] ? L_BATCH : -1;
            if (l < 0)
                break;
            g->job = f.q[l][f.qh[l]++];
            g->job_end = f.now + f.jobs[g->job].run_s;
            g->last_busy = f.now;
        }
        if ((long)f.now % TICK_S == 0)
            p->tick(&f);
        int live = count(&f, G_READY, false) + count(&f, G_STARTING, false);
        if (live > peak)
            peak = live;
    }
    /* Billing: from the provision request (or the start) to the release or the end. */
    double stop = f.now > end ? f.now : end, gpu_s = 0;
    for (int i = 0; i < f.ng; i++)
        gpu_s += (f.g[i].st == G_GONE ? f.g[i].gone_at : stop) - f.g[i].requested;
    double *lat = malloc((size_t)njobs * sizeof *lat);
    int nl = 0, unfinished = 0;
    for (int i = 0; i < njobs; i++) {
        if (f.jobs[i].finish < 0)
            unfinished++;
        else if (f.jobs[i].lane == L_INTER)
            lat[nl++] = f.jobs[i].finish - f.jobs[i].arrive;
    }
    qsort(lat, (size_t)nl, sizeof *lat, cmp_d);
    memset(res, 0, sizeof *res);
    res->policy = p->name;
    res->gpu_hours = gpu_s / 3600;
    res->i_p50 = nl ? lat[nl / 2] : 0;
    res->i_p99 = nl ? lat[(int)(0.99 * (nl - 1))] : 0;
    res->batch_done_s = first_batch >= 0 ? last_batch - first_batch : 0;
    res->peak_gpus = peak;
    res->ups = f.ups;
    res->downs = f.downs;
    res->added = f.added;
    res->released = f.released;
    res->unfinished = unfinished;
    free(lat);
    advisor_destroy(f.adv);
    free(f.q[0]);
    free(f.q[1]);
    free(f.g);
    free(f.jobs);
}

int fleet_scale_main(int argc, char **argv);

int fleet_scale_main(int argc, char **argv)
{
    const char *wpath = NULL, *pname = "all";
    bool json = false;
    static const struct option opts[] = {
        {"workload", required_argument, NULL, 'w'}, {"policy", required_argument, NULL, 'p'},
        {"json", no_argument, NULL, 'j'},           {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "w:p:jh", opts, NULL)) != -1) {
        if (c == 'w')
            wpath = optarg;
        else if (c == 'p')
            pname = optarg;
        else if (c == 'j')
            json = true;
        else {
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: gpuq-sim scale --workload FILE [--policy NAME|all] [--json]\n"
                    "  NAME: advisor, fixed, queue-length, util80\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (!wpath) {
        fprintf(stderr, "gpuq-sim scale: --workload FILE is required\n");
        return 2;
    }
    struct scale_wl wl;
    char err[512];
    if (load_wl(wpath, &wl, err, sizeof err)) {
        fprintf(stderr, "gpuq-sim scale: %s\n", err);
        return 1;
    }
    int njobs;
    struct sjob *jobs = make_jobs(&wl, &njobs);
    struct result res[NPOLS];
    int nr = 0;
    for (int i = 0; i < NPOLS; i++)
        if (!strcmp(pname, "all") || !strcmp(pname, policies[i].name))
            run(&wl, jobs, njobs, &policies[i], &res[nr++]);
    if (nr == 0) {
        fprintf(stderr, "gpuq-sim scale: --policy: unknown policy \"%s\"\n", pname);
        free(jobs);
        return 2;
    }
    double days = wl.hours / 24;
    if (json) {
        json_t *o = json_object();
        for (int i = 0; i < nr; i++)
            json_object_set_new(
                o, res[i].policy,
                json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:i,s:i,s:i}", "gpu_hours", res[i].gpu_hours,
                          "interactive_p50_s", res[i].i_p50, "interactive_p99_s", res[i].i_p99,
                          "batch_completion_s", res[i].batch_done_s, "peak_gpus",
                          res[i].peak_gpus, "actions_per_day", (res[i].ups + res[i].downs) / days,
                          "gpus_added", res[i].added, "gpus_released", res[i].released,
                          "unfinished", res[i].unfinished));
        char *t = json_dumps(o, JSON_INDENT(2));
        printf("%s\n", t);
        free(t);
        json_decref(o);
    } else {
        printf("workload %s: %d jobs over %.0f h, max %d GPUs, cold start %.0f-%.0f s\n",
               wl.name, njobs, wl.hours, wl.max_gpus, wl.cs_min, wl.cs_max);
        printf("%-13s %10s %8s %10s %10s %12s %6s %10s %8s\n", "POLICY", "GPU-HOURS", "vs FIXED",
               "INT P50 S", "INT P99 S", "BATCH DONE S", "PEAK", "ACTIONS/D", "ADDED");
        double fixed_h = 0;
        for (int i = 0; i < nr; i++)
            if (!strcmp(res[i].policy, "fixed"))
                fixed_h = res[i].gpu_hours;
        for (int i = 0; i < nr; i++) {
            char ratio[16] = "-";
            if (fixed_h > 0)
                snprintf(ratio, sizeof ratio, "%.2f", res[i].gpu_hours / fixed_h);
            printf("%-13s %10.1f %8s %10.2f %10.2f %12.0f %6.0f %10.1f %8d%s\n", res[i].policy,
                   res[i].gpu_hours, ratio, res[i].i_p50, res[i].i_p99, res[i].batch_done_s,
                   res[i].peak_gpus, (res[i].ups + res[i].downs) / days, res[i].added,
                   res[i].unfinished ? " (unfinished jobs)" : "");
        }
    }
    free(jobs);
    return 0;
}
