/* report.c: computes and prints the figures of report.h. */
#include "sim/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double report_percentile(double *v, int n, double p)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    int k = (int)ceil(p * n) - 1;
    if (k < 0)
        k = 0;
    if (k >= n)
        k = n - 1;
    return v[k];
}

/* Lane latency p99, per-tenant delivered work and 429s, Retry-After accuracy. */
static void tenant_figures(const struct sim *s, struct report *r)
{
    const struct workload *wl = s->wl;
    double *lat = xmalloc((size_t)(s->njobs + 1) * sizeof(double));
    for (int lane = 0; lane < 2; lane++) {
        int n = 0;
        for (int i = 0; i < s->njobs; i++) {
            const struct sim_job *j = &s->jobs[i];
            if (j->done && (int)wl->caps[j->cap].lane == lane)
                lat[n++] = j->finish_t - j->submit_t;
        }
        r->nlane[lane] = n;
        r->lane_p99[lane] = n ? report_percentile(lat, n, 0.99) : -1;
    }
    free(lat);
    /* Contention: while every stream of batch work was on. */
    double t0 = 0, t1 = s->now;
    int nbatch = 0;
    for (int k = 0; k < wl->nstreams; k++) {
        const struct wl_stream *st = &wl->streams[k];
        bool batch = true;
        for (int c = 0; c < wl->ncaps; c++)
            if (st->capw[c] > 0 && wl->caps[c].lane != SCHED_LANE_BATCH)
                batch = false;
        if (!batch)
            continue;
        if (nbatch == 0 || st->start_s > t0)
            t0 = st->start_s;
        if (nbatch == 0 || st->stop_s < t1)
            t1 = st->stop_s;
        nbatch++;
    }
    r->contention_t0 = t0;
    r->contention_t1 = t1;
    r->ntenants = wl->ntenants;
    for (int t = 0; t < wl->ntenants; t++)
        r->tenants[t].name = wl->tenants[t].name;
    for (int i = 0; i < s->njobs; i++) {
        const struct sim_job *j = &s->jobs[i];
        if (j->tenant < 0)
            continue;
        struct tenant_report *tr = &r->tenants[j->tenant];
        tr->jobs++;
        tr->n429 += j->n429;
        if (j->rejected)
            tr->rejected++;
        if (!j->done)
            continue;
        tr->completed++;
        tr->delivered_gpu_s += j->base_run_s;
        if (j->start_t >= t0 && j->start_t < t1)
            tr->contention_gpu_s += j->base_run_s;
    }
    r->has_admission = wl->admission;
    r->adm = s->adm;
    r->ra_accuracy = s->adm.retries > 0 ? (double)s->adm.in_window / (double)s->adm.retries : -1;
}

void report_make(const struct sim *s, struct report *r)
{
    memset(r, 0, sizeof(*r));
    const struct workload *wl = s->wl;
    r->policy = s->pol->name;
    r->ncaps = wl->ncaps;
    double *lat = xmalloc((size_t)(s->njobs + 1) * sizeof(double));
    double *sd = xmalloc((size_t)(s->njobs + 1) * sizeof(double));
    double makespan = wl->duration_s;
    for (int i = 0; i < s->njobs; i++)
        if (s->jobs[i].done && s->jobs[i].finish_t > makespan)
            makespan = s->jobs[i].finish_t;
    if (s->now > makespan)
        makespan = s->now;
    r->makespan_s = makespan;
    for (int c = 0; c < wl->ncaps; c++) {
        struct cap_report *cr = &r->caps[c];
        r->cap_names[c] = wl->caps[c].name;
        cr->slo_s = wl->caps[c].slo_s;
        int n = 0, met = 0;
        double sum = 0, wsum = 0;
        for (int i = 0; i < s->njobs; i++) {
            const struct sim_job *j = &s->jobs[i];
            if (j->cap != c)
                continue;
            cr->jobs++;
            if (j->failed || j->dead)
                continue;
            /* Unfinished jobs count with the latency they had at the stop. */
            double l = (j->done ? j->finish_t : s->now) - j->submit_t;
            if (j->done) {
                cr->completed++;
                if (cr->slo_s <= 0 || l <= cr->slo_s)
                    met++;
                wsum += l - j->service_s;
            }
            lat[n] = l;
            sd[n] = j->min_run_s > 0 ? l / j->min_run_s : 0;
            sum += l;
            n++;
        }
        cr->mean = n ? sum / n : 0;
        cr->wait_mean = cr->completed ? wsum / cr->completed : 0;
        cr->p50 = report_percentile(lat, n, 0.50);
        cr->p95 = report_percentile(lat, n, 0.95);
        cr->p99 = report_percentile(lat, n, 0.99);
        cr->sd_p50 = report_percentile(sd, n, 0.50);
        cr->sd_p99 = report_percentile(sd, n, 0.99);
        cr->slo_attainment = cr->jobs ? (double)met / cr->jobs : 1.0;
    }
    free(lat);
    free(sd);
    double busy = 0, slots = 0;
    for (int g = 0; g < s->ngpus; g++) {
        busy += s->gpus[g].busy_time;
        slots += s->gpus[g].spec->concurrency;
    }
    for (int i = 0; i < s->njobs; i++) {
        if (s->jobs[i].done)
            r->completed++;
        else if (s->jobs[i].failed || s->jobs[i].dead)
            r->failed++;
        else
            r->unfinished++;
        if (s->jobs[i].dead)
            r->dead++;
        if (s->jobs[i].rejected)
            r->rejected++;
    }
    r->jobs_lost = r->unfinished;
    r->retries_on_failed_gpu = s->retries_on_failed_gpu;
    r->preemptions = s->preemptions;
    r->preempted_gpu_s = s->preempted_gpu_s;
    r->ngpus = s->ngpus;
    r->gpus = xcalloc((size_t)(s->ngpus ? s->ngpus : 1), sizeof(*r->gpus));
    for (int g = 0; g < s->ngpus; g++) {
        const struct sim_gpu *gp = &s->gpus[g];
        r->gpus[g] = (struct gpu_report){gp->spec->id, gp->attempts, gp->failures,
                                         gp->before_quarantine, gp->quarantines};
    }
    double *err = xmalloc((size_t)(s->njobs + 1) * sizeof(double));
    for (int lane = 0; lane < 2; lane++) {
        int n = 0;
        for (int i = 0; i < s->njobs; i++) {
            const struct sim_job *j = &s->jobs[i];
            if (j->eta_pred >= 0)
                r->has_eta = true;
            if (j->eta_pred < 0 || !j->done || (int)wl->caps[j->cap].lane != lane)
                continue;
            double actual = j->finish_t - j->admit_t;
            if (actual > 0)
                err[n++] = fabs(j->eta_pred - actual) / actual;
        }
        r->eta[lane].n = n;
        r->eta[lane].p50 = report_percentile(err, n, 0.50);
        r->eta[lane].p90 = report_percentile(err, n, 0.90);
    }
    free(err);
    tenant_figures(s, r);
    r->throughput_per_hour = r->completed / (makespan / 3600.0);
    r->utilization = slots > 0 ? busy / (slots * makespan) : 0;
    int64_t acc = s->m.hits + s->m.misses;
    r->cache_hit_ratio = acc ? (double)s->m.hits / (double)acc : 1.0;
    r->cold_loads = s->m.cold_loads;
    r->evictions = s->m.evictions;
    double *d = xmalloc((size_t)(s->m.ndec + 1) * sizeof(double));
    memcpy(d, s->m.decision_us, (size_t)s->m.ndec * sizeof(double));
    r->decision_p50_us = report_percentile(d, (int)s->m.ndec, 0.50);
    r->decision_p99_us = report_percentile(d, (int)s->m.ndec, 0.99);
    free(d);
}

static double ratio(double x, double floor)
{
    return floor > 0 ? x / floor : -1;
}

void report_vs_oracle(struct report *r, const struct report *o)
{
    r->has_vs = true;
    for (int c = 0; c < r->ncaps; c++) {
        const struct cap_report *a = &r->caps[c], *b = &o->caps[c];
        r->vs[c] = (struct cap_vs){ratio(a->p50, b->p50), ratio(a->p95, b->p95),
                                   ratio(a->p99, b->p99), ratio(a->sd_p99, b->sd_p99),
                                   ratio(a->slo_attainment, b->slo_attainment)};
    }
    r->vs_cache_hit = ratio(r->cache_hit_ratio, o->cache_hit_ratio);
}

void report_fini(struct report *r)
{
    free(r->gpus);
    r->gpus = NULL;
}

static json_t *num(double v)
{
    /* Four decimals: readable, and identical runs print identical text. */
    return json_real(round(v * 1e4) / 1e4);
}

json_t *report_json(const struct report *r, bool with_timing)
{
    json_t *o = json_object();
    json_t *lat = json_object(), *sd = json_object(), *slo = json_object();
    json_t *extra = json_object();
    for (int c = 0; c < r->ncaps; c++) {
        const struct cap_report *cr = &r->caps[c];
        json_t *l = json_object();
        json_object_set_new(l, "p50", num(cr->p50));
        json_object_set_new(l, "p95", num(cr->p95));
        json_object_set_new(l, "p99", num(cr->p99));
        json_object_set_new(lat, r->cap_names[c], l);
        json_t *s = json_object();
        json_object_set_new(s, "p50", num(cr->sd_p50));
        json_object_set_new(s, "p99", num(cr->sd_p99));
        json_object_set_new(sd, r->cap_names[c], s);
        json_object_set_new(slo, r->cap_names[c], num(cr->slo_attainment));
        json_t *e = json_object();
        json_object_set_new(e, "jobs", json_integer(cr->jobs));
        json_object_set_new(e, "completed", json_integer(cr->completed));
        json_object_set_new(e, "latency_mean", num(cr->mean));
        json_object_set_new(e, "wait_mean", num(cr->wait_mean));
        json_object_set_new(extra, r->cap_names[c], e);
    }
    json_object_set_new(o, "latency", lat);
    json_object_set_new(o, "slowdown", sd);
    json_object_set_new(o, "throughput_per_hour", num(r->throughput_per_hour));
    json_object_set_new(o, "utilization", num(r->utilization));
    json_object_set_new(o, "cache_hit_ratio", num(r->cache_hit_ratio));
    json_object_set_new(o, "cold_loads", json_integer(r->cold_loads));
    json_object_set_new(o, "slo_attainment", slo);
    json_object_set_new(o, "completed", json_integer(r->completed));
    json_object_set_new(o, "failed", json_integer(r->failed));
    if (with_timing) {
        json_t *d = json_object();
        json_object_set_new(d, "p50", num(r->decision_p50_us));
        json_object_set_new(d, "p99", num(r->decision_p99_us));
        json_object_set_new(o, "decision_us", d);
    }
    json_object_set_new(o, "unfinished", json_integer(r->unfinished));
    json_object_set_new(o, "rejected", json_integer(r->rejected));
    if (r->has_vs) {
        json_t *v = json_object();
        for (int c = 0; c < r->ncaps; c++) {
            const struct cap_vs *x = &r->vs[c];
            json_t *e = json_object();
            json_object_set_new(e, "p50", x->p50 >= 0 ? num(x->p50) : json_null());
            json_object_set_new(e, "p95", x->p95 >= 0 ? num(x->p95) : json_null());
            json_object_set_new(e, "p99", x->p99 >= 0 ? num(x->p99) : json_null());
            json_object_set_new(e, "slowdown_p99", x->sd_p99 >= 0 ? num(x->sd_p99) : json_null());
            json_object_set_new(e, "slo_attainment", x->slo >= 0 ? num(x->slo) : json_null());
            json_object_set_new(v, r->cap_names[c], e);
        }
        json_object_set_new(v, "cache_hit_ratio",
                            r->vs_cache_hit >= 0 ? num(r->vs_cache_hit) : json_null());
        json_object_set_new(o, "vs_oracle", v);
    }
    json_object_set_new(o, "evictions", json_integer(r->evictions));
    json_object_set_new(o, "makespan_s", num(r->makespan_s));
    json_object_set_new(o, "per_capability", extra);
    json_object_set_new(o, "dead", json_integer(r->dead));
    json_object_set_new(o, "jobs_lost", json_integer(r->jobs_lost));
    json_object_set_new(o, "retries_on_failed_gpu", json_integer(r->retries_on_failed_gpu));
    json_object_set_new(o, "preemptions", json_integer(r->preemptions));
    json_object_set_new(o, "preempted_gpu_s", num(r->preempted_gpu_s));
    if (r->has_eta) {
        json_t *e = json_object();
        const char *lanes[2] = {"interactive", "batch"};
        for (int l = 0; l < 2; l++) {
            if (r->eta[l].n == 0) {
                json_object_set_new(e, lanes[l], json_null());
                continue;
            }
            json_t *p = json_object();
            json_object_set_new(p, "p50", num(r->eta[l].p50));
            json_object_set_new(p, "p90", num(r->eta[l].p90));
            json_object_set_new(p, "jobs", json_integer(r->eta[l].n));
            json_object_set_new(e, lanes[l], p);
        }
        json_object_set_new(o, "eta_error", e);
    } else {
        json_object_set_new(o, "eta_error", json_null());
    }
    json_t *gpus = json_object();
    for (int g = 0; g < r->ngpus; g++) {
        json_t *x = json_object();
        json_object_set_new(x, "attempts", json_integer(r->gpus[g].attempts));
        json_object_set_new(x, "failures", json_integer(r->gpus[g].failures));
        json_object_set_new(x, "jobs_before_quarantine",
                            json_integer(r->gpus[g].before_quarantine));
        json_object_set_new(x, "quarantines", json_integer(r->gpus[g].quarantines));
        json_object_set_new(gpus, r->gpus[g].id, x);
    }
    json_object_set_new(o, "gpus", gpus);
    json_t *lp = json_object();
    const char *lanes2[2] = {"interactive", "batch"};
    for (int l = 0; l < 2; l++)
        json_object_set_new(lp, lanes2[l], r->nlane[l] ? num(r->lane_p99[l]) : json_null());
    json_object_set_new(o, "lane_latency_p99", lp);
    if (r->ntenants > 0) {
        json_t *ts = json_object();
        for (int t = 0; t < r->ntenants; t++) {
            const struct tenant_report *tr = &r->tenants[t];
            json_t *x = json_object();
            json_object_set_new(x, "jobs", json_integer(tr->jobs));
            json_object_set_new(x, "completed", json_integer(tr->completed));
            json_object_set_new(x, "rejected", json_integer(tr->rejected));
            json_object_set_new(x, "http_429", json_integer(tr->n429));
            json_object_set_new(x, "delivered_gpu_s", num(tr->delivered_gpu_s));
            json_object_set_new(x, "contention_gpu_s", num(tr->contention_gpu_s));
            json_object_set_new(ts, tr->name, x);
        }
        json_object_set_new(o, "tenants", ts);
        json_t *w = json_object();
        json_object_set_new(w, "from_s", num(r->contention_t0));
        json_object_set_new(w, "to_s", num(r->contention_t1));
        json_object_set_new(o, "contention_window", w);
    }
    if (r->has_admission) {
        json_t *a = json_object();
        json_object_set_new(a, "http_429", json_integer(r->adm.n429));
        json_object_set_new(a, "retries", json_integer(r->adm.retries));
        json_object_set_new(a, "retries_in_window", json_integer(r->adm.in_window));
        json_object_set_new(a, "probes_at_0_75", json_integer(r->adm.probes));
        json_object_set_new(a, "refused_at_0_75", json_integer(r->adm.early_refused));
        json_object_set_new(a, "clients_refused", json_integer(r->adm.clients_refused));
        json_object_set_new(a, "admitted_on_first_retry", json_integer(r->adm.first_ok));
        json_object_set_new(a, "rejected", json_integer(r->adm.rejected));
        json_object_set_new(a, "retry_after_accuracy",
                            r->ra_accuracy >= 0 ? num(r->ra_accuracy) : json_null());
        json_object_set_new(o, "admission", a);
    }
    return o;
}

void report_table(FILE *f, const struct report *r, int n)
{
    fprintf(f, "%-28s", "");
    for (int i = 0; i < n; i++)
        fprintf(f, " %13s", r[i].policy);
    fprintf(f, "\n");
#define ROW(label, expr, fmt)                                                                      \
    do {                                                                                           \
        fprintf(f, "%-28s", label);                                                                \
        for (int i = 0; i < n; i++)                                                                \
            fprintf(f, " %13" fmt, expr);                                                          \
        fprintf(f, "\n");                                                                          \
    } while (0)
    for (int c = 0; c < r[0].ncaps; c++) {
        char label[96];
        const char *cap = r[0].cap_names[c];
        snprintf(label, sizeof(label), "%.14s p50/p99 s", cap);
        fprintf(f, "%-28s", label);
        for (int i = 0; i < n; i++) {
            char cell[32];
            snprintf(cell, sizeof(cell), "%.1f/%.1f", r[i].caps[c].p50, r[i].caps[c].p99);
            fprintf(f, " %13s", cell);
        }
        fprintf(f, "\n");
        snprintf(label, sizeof(label), "%.14s p95 s", cap);
        ROW(label, r[i].caps[c].p95, ".1f");
        snprintf(label, sizeof(label), "%.14s slowdown p99", cap);
        ROW(label, r[i].caps[c].sd_p99, ".2f");
        snprintf(label, sizeof(label), "%.14s SLO %.0fs met", cap, r[0].caps[c].slo_s);
        ROW(label, r[i].caps[c].slo_attainment, ".3f");
    }
    ROW("throughput/h", r[i].throughput_per_hour, ".0f");
    ROW("utilization", r[i].utilization, ".3f");
    ROW("cache hit ratio", r[i].cache_hit_ratio, ".4f");
    ROW("cold loads", (long long)r[i].cold_loads, "lld");
    ROW("completed", r[i].completed, "d");
    ROW("failed", r[i].failed, "d");
    ROW("unfinished", r[i].unfinished, "d");
    ROW("rejected (never fits)", r[i].rejected, "d");
    ROW("dead-lettered", r[i].dead, "d");
    ROW("retries on a failed GPU", (long long)r[i].retries_on_failed_gpu, "lld");
    ROW("preemptions", (long long)r[i].preemptions, "lld");
    ROW("preempted GPU-s", r[i].preempted_gpu_s, ".1f");
    for (int l = 0; l < 2; l++) {
        char label[64];
        snprintf(label, sizeof(label), "ETA error %s p50/p90", l == 0 ? "interactive" : "batch");
        fprintf(f, "%-28s", label);
        for (int i = 0; i < n; i++) {
            char cell[32];
            if (r[i].has_eta && r[i].eta[l].n > 0)
                snprintf(cell, sizeof(cell), "%.3f/%.3f", r[i].eta[l].p50, r[i].eta[l].p90);
            else
                snprintf(cell, sizeof(cell), "-");
            fprintf(f, " %13s", cell);
        }
        fprintf(f, "\n");
    }
    ROW("interactive p99 s", r[i].lane_p99[0], ".2f");
    ROW("batch p99 s", r[i].lane_p99[1], ".2f");
    for (int t = 0; t < r[0].ntenants; t++) {
        char label[96];
        snprintf(label, sizeof(label), "%.14s GPU-s (contention)", r[0].tenants[t].name);
        ROW(label, r[i].tenants[t].contention_gpu_s, ".0f");
        snprintf(label, sizeof(label), "%.14s 429s", r[0].tenants[t].name);
        ROW(label, (long long)r[i].tenants[t].n429, "lld");
    }
    if (r[0].has_admission)
        ROW("Retry-After accuracy", r[i].ra_accuracy, ".3f");
    ROW("decision p50 us", r[i].decision_p50_us, ".2f");
    ROW("decision p99 us", r[i].decision_p99_us, ".2f");
    if (r[0].has_vs) {
        fprintf(f, "ratio to oracle (latency: lower is better; SLO, cache: higher)\n");
#define VSROW(label, expr)                                                                         \
    do {                                                                                           \
        fprintf(f, "%-28s", label);                                                                \
        for (int i = 0; i < n; i++) {                                                              \
            double v = (expr);                                                                     \
            if (v >= 0)                                                                            \
                fprintf(f, " %13.3f", v);                                                          \
            else                                                                                   \
                fprintf(f, " %13s", "-");                                                          \
        }                                                                                          \
        fprintf(f, "\n");                                                                          \
    } while (0)
        for (int c = 0; c < r[0].ncaps; c++) {
            char label[96];
            const char *cap = r[0].cap_names[c];
            snprintf(label, sizeof(label), "%.14s p50 /oracle", cap);
            VSROW(label, r[i].vs[c].p50);
            snprintf(label, sizeof(label), "%.14s p95 /oracle", cap);
            VSROW(label, r[i].vs[c].p95);
            snprintf(label, sizeof(label), "%.14s p99 /oracle", cap);
            VSROW(label, r[i].vs[c].p99);
            snprintf(label, sizeof(label), "%.14s slowdown99 /or", cap);
            VSROW(label, r[i].vs[c].sd_p99);
            snprintf(label, sizeof(label), "%.14s SLO /oracle", cap);
            VSROW(label, r[i].vs[c].slo);
        }
        VSROW("cache hit /oracle", r[i].vs_cache_hit);
#undef VSROW
    }
#undef ROW
}
