/* render.c: human-readable output of jobs, tenants and workers. */
#include "render.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/err.h"

const char *render_str(const json_t *obj, const char *key, char *buf, size_t len)
{
    const json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (json_is_string(v))
        snprintf(buf, len, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, len, "%g", json_real_value(v));
    else if (json_is_true(v))
        snprintf(buf, len, "true");
    else if (json_is_false(v))
        snprintf(buf, len, "false");
    else
        snprintf(buf, len, "-");
    return buf;
}

int render_num(const json_t *obj, const char *key, double *out)
{
    const json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!json_is_number(v))
        return GPUQ_ENOENT;
    *out = json_number_value(v);
    return 0;
}

/* Formats a Unix-ms time as local "YYYY-MM-DD HH:MM:SS". */
static const char *fmt_time(const json_t *obj, const char *key, char *buf, size_t len)
{
    double ms;
    if (render_num(obj, key, &ms) < 0 || ms <= 0) {
        snprintf(buf, len, "-");
        return buf;
    }
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
    return buf;
}

/* Formats an estimate ("in 1.2s"), "now" when it is due or past. */
static const char *fmt_eta(double ms, char *buf, size_t len)
{
    double d = (ms - (double)clock_wall_ms()) / 1000.0;
    if (d < 0.05)
        snprintf(buf, len, "now");
    else
        snprintf(buf, len, "in %.1fs", d);
    return buf;
}

void render_bar(const json_t *job, char *out, size_t len)
{
    out[0] = '\0';
    const char *st = json_string_value(json_object_get(job, "state"));
    double p;
    if (!st || strcmp(st, "running") != 0 || render_num(job, "progress", &p) < 0 || p <= 0)
        return;
    if (p > 1)
        p = 1;
    char bar[21];
    int filled = (int)(p * 20 + 0.5);
    for (int i = 0; i < 20; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[20] = '\0';
    snprintf(out, len, " [%s]", bar);
}

void render_job(FILE *f, const json_t *job)
{
    char a[256], b[256], c[256];
    fprintf(f, "id          %s\n", render_str(job, "id", a, sizeof a));
    const char *state = render_str(job, "state", a, sizeof a);
    const char *phase = render_str(job, "phase", b, sizeof b);
    double progress = 0;
    fprintf(f, "state       %s", state);
    if (strcmp(phase, "-") != 0) {
        fprintf(f, " (%s", phase);
        if (render_num(job, "progress", &progress) == 0 && progress > 0)
            fprintf(f, ", %.0f%%", progress * 100);
        fprintf(f, ")");
    }
    fprintf(f, "\n");
    fprintf(f, "tenant      %s\n", render_str(job, "tenant", a, sizeof a));
    fprintf(f, "capability  %s\n", render_str(job, "capability", a, sizeof a));
    fprintf(f, "model       %s\n", render_str(job, "model", a, sizeof a));
    fprintf(f, "lane        %s, priority %s\n", render_str(job, "lane", a, sizeof a),
            render_str(job, "priority", b, sizeof b));
    const json_t *params = json_object_get(job, "params");
    if (json_is_object(params) && json_object_size(params) > 0) {
        char *p = json_dumps(params, JSON_COMPACT | JSON_PRESERVE_ORDER);
        fprintf(f, "params      %s\n", p ? p : "-");
        free(p);
    }
    fprintf(f, "attempt     %s", render_str(job, "attempt", a, sizeof a));
    double failures;
    if (render_num(job, "failures", &failures) == 0 && failures > 0)
        fprintf(f, " (%.0f failed)", failures);
    fprintf(f, "\n");
    fprintf(f, "worker      %s\n", render_str(job, "worker_id", a, sizeof a));
    double cost;
    if (render_num(job, "cost_s", &cost) == 0)
        fprintf(f, "cost        %.2f GPU-s\n", cost);
    fprintf(f, "created     %s\n", fmt_time(job, "created_ms", a, sizeof a));
    fprintf(f, "started     %s\n", fmt_time(job, "started_ms", a, sizeof a));
    fprintf(f, "finished    %s\n", fmt_time(job, "finished_ms", a, sizeof a));
    const json_t *eta = json_object_get(job, "eta");
    double s_ms, f_ms;
    const char *st = json_string_value(json_object_get(job, "state"));
    bool live = st && (strcmp(st, "queued") == 0 || strcmp(st, "running") == 0);
    if (live && json_is_object(eta) && render_num(eta, "start_ms", &s_ms) == 0 &&
        render_num(eta, "finish_ms", &f_ms) == 0)
        fprintf(f, "eta         start %s, finish %s\n", fmt_eta(s_ms, a, sizeof a),
                fmt_eta(f_ms, b, sizeof b));
    const json_t *why = json_object_get(job, "waiting_reason");
    if (json_is_string(why))
        fprintf(f, "waiting     %s\n", json_string_value(why));
    const json_t *res = json_object_get(job, "result");
    if (json_is_object(res))
        fprintf(f, "result      %s, %s bytes (%s)\n", render_str(res, "content_type", a, sizeof a),
                render_str(res, "bytes", b, sizeof b), render_str(res, "url", c, sizeof c));
    const json_t *err = json_object_get(job, "error");
    if (json_is_object(err))
        fprintf(f, "error       %s: %s\n", render_str(err, "class", a, sizeof a),
                render_str(err, "message", b, sizeof b));
    const json_t *attempts = json_object_get(job, "attempts");
    if (json_is_array(attempts) && json_array_size(attempts) > 0) {
        fprintf(f, "attempts\n");
        size_t i;
        const json_t *t;
        json_array_foreach(attempts, i, t) {
            char n[16], w[80], out[32], cls[32], msg[256];
            fprintf(f, "  #%-3s %-20s %-14s %-10s %s  %s\n", render_str(t, "n", n, sizeof n),
                    render_str(t, "worker", w, sizeof w), render_str(t, "outcome", out, sizeof out),
                    render_str(t, "error_class", cls, sizeof cls),
                    fmt_time(t, "started_ms", a, sizeof a), render_str(t, "error", msg, sizeof msg));
        }
    }
}

void render_jobs_table(FILE *f, const json_t *jobs)
{
    fprintf(f, "%-10s %-10s %-11s %-18s %-16s %-12s %-5s %s\n", "ID", "STATE", "PHASE",
            "CAPABILITY", "MODEL", "LANE", "PRIO", "CREATED");
    size_t i;
    const json_t *j;
    json_array_foreach(jobs, i, j) {
        char id[64], st[32], ph[32], cap[64], model[64], lane[32], prio[32], created[32];
        fprintf(f, "%-10s %-10s %-11s %-18s %-16s %-12s %-5s %s\n",
                render_str(j, "id", id, sizeof id), render_str(j, "state", st, sizeof st),
                render_str(j, "phase", ph, sizeof ph), render_str(j, "capability", cap, sizeof cap),
                render_str(j, "model", model, sizeof model),
                render_str(j, "lane", lane, sizeof lane),
                render_str(j, "priority", prio, sizeof prio),
                fmt_time(j, "created_ms", created, sizeof created));
    }
}

void render_tenants_table(FILE *f, const json_t *tenants)
{
    fprintf(f, "%-24s %-6s %s\n", "NAME", "TIER", "CREATED");
    size_t i;
    const json_t *t;
    json_array_foreach(tenants, i, t) {
        char name[128], tier[32], created[32];
        fprintf(f, "%-24s %-6s %s\n", render_str(t, "name", name, sizeof name),
                render_str(t, "tier", tier, sizeof tier),
                fmt_time(t, "created_ms", created, sizeof created));
    }
}

/* Names of the loaded models, comma-separated; entries may be strings or
 * objects with a "name". */
static const char *models_list(const json_t *models, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    size_t i;
    const json_t *m;
    json_array_foreach(models, i, m) {
        const char *name = json_is_string(m) ? json_string_value(m)
                                             : json_string_value(json_object_get(m, "name"));
        if (!name)
            continue;
        int n = snprintf(buf + used, len - used, "%s%s", used ? "," : "", name);
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
    if (!buf[0])
        snprintf(buf, len, "-");
    return buf;
}

void render_workers_table(FILE *f, const json_t *workers)
{
    fprintf(f, "%-22s %-9s %6s %17s %-8s %s\n", "ID", "STATE", "TEMP", "VRAM USED/TOTAL",
            "INFLIGHT", "LOADED MODELS");
    size_t i;
    const json_t *w;
    json_array_foreach(workers, i, w) {
        char id[128], st[32], temp[16], vram[48], infl[32], models[512], a[32], b[32];
        const json_t *tel = json_object_get(w, "telemetry");
        const json_t *gpu = json_object_get(w, "gpu");
        double t, used, total;
        if (render_num(tel, "temp_c", &t) == 0)
            snprintf(temp, sizeof temp, "%.0fC", t);
        else
            snprintf(temp, sizeof temp, "-");
        if (render_num(tel, "vram_total_mb", &total) < 0 &&
            render_num(gpu, "vram_total_mb", &total) < 0)
            total = NAN;
        if (render_num(tel, "vram_used_mb", &used) < 0)
            used = NAN;
        if (isnan(used) && isnan(total))
            snprintf(vram, sizeof vram, "-");
        else if (isnan(used))
            snprintf(vram, sizeof vram, "-/%.0f MiB", total);
        else if (isnan(total))
            snprintf(vram, sizeof vram, "%.0f/- MiB", used);
        else
            snprintf(vram, sizeof vram, "%.0f/%.0f MiB", used, total);
        /* inflight/slots, and "+1" when it may hold a job ahead (inflight
         * counts the attempts the head has not seen end: a held job, and
         * finished ones whose results are on their way, too). */
        double ahead = 0;
        int n = snprintf(infl, sizeof infl, "%s/%s", render_str(w, "inflight", a, sizeof a),
                         render_str(w, "concurrency", b, sizeof b));
        if (render_num(w, "ahead", &ahead) == 0 && ahead > 0 && n > 0 && (size_t)n < sizeof infl)
            snprintf(infl + n, sizeof infl - (size_t)n, "+%.0f", ahead);
        fprintf(f, "%-22s %-9s %6s %17s %-8s %s\n", render_str(w, "id", id, sizeof id),
                render_str(w, "state", st, sizeof st), temp, vram, infl,
                models_list(json_object_get(w, "loaded_models"), models, sizeof models));
        /* A quarantined or probing GPU says why, on the line below it. */
        const json_t *brk = json_object_get(w, "breaker");
        const char *why = json_string_value(json_object_get(brk, "reason"));
        if (strcmp(st, "quarantined") == 0 || strcmp(st, "probing") == 0)
            fprintf(f, "%-22s   %s\n", "", why && *why ? why : "(no reason given)");
    }
}

void render_progress(const json_t *job, char *out, size_t len)
{
    char id[64], st[32], ph[32], tmp[64];
    size_t used = 0;
    int n = snprintf(out, len, "job %s: %s", render_str(job, "id", id, sizeof id),
                     render_str(job, "state", st, sizeof st));
    if (n > 0)
        used = (size_t)n < len ? (size_t)n : len - 1;
    render_str(job, "phase", ph, sizeof ph);
    double progress;
    if (strcmp(ph, "-") != 0 && used < len) {
        n = snprintf(out + used, len - used, " (%s)", ph);
        if (n > 0)
            used += (size_t)n < len - used ? (size_t)n : len - used - 1;
    }
    if (strcmp(st, "running") == 0 && render_num(job, "progress", &progress) == 0 &&
        progress > 0 && used < len) {
        n = snprintf(out + used, len - used, " %.0f%%", progress * 100);
        if (n > 0)
            used += (size_t)n < len - used ? (size_t)n : len - used - 1;
    }
    const json_t *eta = json_object_get(job, "eta");
    double s_ms;
    const json_t *why = json_object_get(job, "waiting_reason");
    if (strcmp(st, "queued") == 0 && json_is_object(eta) &&
        render_num(eta, "start_ms", &s_ms) == 0 && used < len)
        snprintf(out + used, len - used, ", estimated start %s", fmt_eta(s_ms, tmp, sizeof tmp));
    else if (strcmp(st, "queued") == 0 && json_is_string(why) && used < len)
        snprintf(out + used, len - used, ", waiting: %s", json_string_value(why));
}
