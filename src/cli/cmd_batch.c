/* cmd_batch.c: the batch commands of gpuq — batch submit FILE.jsonl (one job
 * per line, --wait to follow it with a progress bar on a terminal, plain
 * lines otherwise), batch get, batch cancel, batch ls — and the fleet views:
 * backlog (GPU-seconds of work waiting) and capacity (admin). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/render.h"
#include "common/alloc.h"
#include "common/clock.h"

#define BATCH_POLL_MS 500
#define BATCH_BAR_WIDTH 30

static const char *const state_names[] = {"queued", "running", "succeeded", "failed",
                                          "cancelled", "dead", "expired"};
#define NSTATES (sizeof state_names / sizeof state_names[0])

static struct opt no_opts[] = {{0}};

/* The batch's counts as one line: "1000 jobs: 3 succeeded, 997 queued". */
static void counts_line(const json_t *b, char *out, size_t size)
{
    json_t *counts = json_object_get(b, "counts");
    double total = 0;
    render_num(b, "total", &total);
    size_t used = (size_t)snprintf(out, size, "%.0f jobs:", total);
    int first = 1;
    for (size_t i = 0; i < NSTATES && used < size; i++) {
        double n = 0;
        if (render_num(counts, state_names[i], &n) || n == 0)
            continue;
        used += (size_t)snprintf(out + used, size - used, "%s %.0f %s", first ? "" : ",", n,
                                 state_names[i]);
        first = 0;
    }
}

/* "ETA 12 s" or why there is none; "" when the batch is done. */
static void eta_text(const json_t *b, char *out, size_t size)
{
    out[0] = '\0';
    double unfinished = 0, finish_ms = 0;
    render_num(b, "unfinished", &unfinished);
    if (unfinished == 0)
        return;
    if (render_num(json_object_get(b, "eta"), "finish_ms", &finish_ms) == 0) {
        double s = (finish_ms - (double)clock_wall_ms()) / 1000.0;
        snprintf(out, size, "ETA %.0f s", s > 0 ? s : 0);
        return;
    }
    char why[200];
    snprintf(out, size, "no ETA: %s", render_str(b, "eta_reason", why, sizeof why));
}

static void print_batch(const json_t *b)
{
    char id[32], line[256], eta[256];
    counts_line(b, line, sizeof line);
    eta_text(b, eta, sizeof eta);
    printf("batch %s: %s%s%s\n", render_str(b, "id", id, sizeof id), line, eta[0] ? "; " : "",
           eta);
}

/* Failed, cancelled, dead or expired jobs in the batch. */
static int bad_count(const json_t *b)
{
    json_t *counts = json_object_get(b, "counts");
    double n = 0, sum = 0;
    for (size_t i = 3; i < NSTATES; i++)
        if (render_num(counts, state_names[i], &n) == 0)
            sum += n;
    return (int)sum;
}

/* Reads FILE ('-': stdin): one JSON job per line; blank lines and '#' lines
 * are skipped. lines[i] gets the line number of job i. NULL after printing why. */
static json_t *read_jobs(const char *cmd, const char *path, int **lines)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f) {
        fprintf(stderr, "gpuq %s: cannot open %s\n", cmd, path);
        return NULL;
    }
    json_t *jobs = json_array();
    size_t cap = 64;
    *lines = xcalloc(cap, sizeof **lines);
    char *buf = NULL;
    size_t bsize = 0;
    ssize_t n;
    int lineno = 0;
    while ((n = getline(&buf, &bsize, f)) >= 0) {
        lineno++;
        const char *p = buf;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\n' || *p == '\r' || *p == '\0' || *p == '#')
            continue;
        json_error_t je;
        json_t *job = json_loads(p, JSON_REJECT_DUPLICATES, &je);
        if (!job || !json_is_object(job)) {
            fprintf(stderr, "gpuq %s: %s:%d: %s\n", cmd, path, lineno,
                    job ? "a job must be a JSON object" : je.text);
            json_decref(job);
            json_decref(jobs);
            jobs = NULL;
            break;
        }
        if (json_array_size(jobs) == cap) {
            cap *= 2;
            *lines = xrealloc(*lines, cap * sizeof **lines);
        }
        (*lines)[json_array_size(jobs)] = lineno;
        json_array_append_new(jobs, job);
    }
    free(buf);
    if (f != stdin)
        fclose(f);
    if (jobs && json_array_size(jobs) == 0) {
        fprintf(stderr, "gpuq %s: %s holds no job\n", cmd, path);
        json_decref(jobs);
        jobs = NULL;
    }
    if (!jobs) {
        free(*lines);
        *lines = NULL;
    }
    return jobs;
}

/* A refused batch: every per-job error with its file line. */
static void print_refusal(const char *cmd, const char *path, const struct client_resp *r,
                          const int *lines, size_t njobs)
{
    json_t *body = client_json(cmd, r);
    json_t *errors = body ? json_object_get(body, "errors") : NULL;
    if (!json_is_array(errors)) {
        json_decref(body);
        client_print_error(cmd, r);
        return;
    }
    client_print_error(cmd, r);
    size_t i;
    json_t *e;
    json_array_foreach(errors, i, e) {
        double idx = -1;
        char msg[300];
        render_num(e, "index", &idx);
        int line = idx >= 0 && (size_t)idx < njobs ? lines[(size_t)idx] : 0;
        fprintf(stderr, "  %s:%d (job %.0f): %s\n", path, line, idx,
                render_str(e, "message", msg, sizeof msg));
    }
    json_decref(body);
}

/* Follows the batch until no job is left unfinished: a bar on a terminal,
 * a plain line per change otherwise. 0 when it ended, else the exit code. */
static int follow(struct cli *c, const char *id, long timeout_s, json_t **last)
{
    char path[128], prev[256] = "";
    snprintf(path, sizeof path, "/v1/batches/%s", id);
    int tty = isatty(STDERR_FILENO);
    int64_t deadline = clock_mono_ns() + (int64_t)timeout_s * 1000000000LL;
    for (;;) {
        json_t *b = NULL;
        int rc = cli_call(c, "GET", path, NULL, CLI_REQUEST_TIMEOUT_S, &b);
        if (rc != CLI_OK)
            return rc;
        double total = 0, unfinished = 0;
        render_num(b, "total", &total);
        render_num(b, "unfinished", &unfinished);
        char line[256], eta[256];
        counts_line(b, line, sizeof line);
        eta_text(b, eta, sizeof eta);
        if (tty) {
            int done = total > 0 ? (int)((total - unfinished) * BATCH_BAR_WIDTH / total) : 0;
            char bar[BATCH_BAR_WIDTH + 1];
            for (int i = 0; i < BATCH_BAR_WIDTH; i++)
                bar[i] = i < done ? '#' : '.';
            bar[BATCH_BAR_WIDTH] = '\0';
            fprintf(stderr, "\r\033[K[%s] %.0f/%.0f done %s", bar, total - unfinished, total,
                    eta);
            fflush(stderr);
        } else if (strcmp(line, prev)) {
            fprintf(stderr, "batch %s: %s\n", id, line);
            snprintf(prev, sizeof prev, "%s", line);
        }
        if (unfinished == 0) {
            if (tty)
                fputc('\n', stderr);
            *last = b;
            return CLI_OK;
        }
        json_decref(b);
        if (timeout_s > 0 && clock_mono_ns() > deadline) {
            if (tty)
                fputc('\n', stderr);
            fprintf(stderr, "gpuq %s: batch %s not finished after %ld s\n", c->cmd, id,
                    timeout_s);
            return CLI_EREFUSED;
        }
        struct timespec ts = {0, BATCH_POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static struct opt submit_opts[] = {
    {.name = "wait", .help = "follow the batch until every job has ended"},
    {.name = "timeout", .arg = "S", .help = "with --wait: give up after S seconds (default none)"},
    {0},
};

int cmd_batch_submit(int argc, char **argv)
{
    struct cli c = {0};
    const char *usage = "batch submit FILE.jsonl [--wait] [--timeout S]";
    int rc = cli_start(&c, "batch submit", usage,
                       "Submits the jobs of FILE (one JSON job per line, as for POST /v1/jobs;\n"
                       "'-' reads stdin) as one batch. Nothing is queued unless every job is\n"
                       "valid; refusals name the file's line. Prints the batch id.",
                       submit_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    int *lines = NULL;
    json_t *jobs = NULL, *body = NULL, *b = NULL;
    long long timeout = 0;
    struct opt *to = opts_find(submit_opts, "timeout");
    if (c.npos != 1) {
        fprintf(stderr, "gpuq %s: expected one file (usage: gpuq %s)\n", c.cmd, usage);
        rc = CLI_EUSAGE;
        goto out;
    }
    if (opts_given(to) && opts_int(c.cmd, to, 1, 86400 * 30, &timeout) < 0) {
        rc = CLI_EUSAGE;
        goto out;
    }
    jobs = read_jobs(c.cmd, c.pos[0], &lines);
    if (!jobs) {
        rc = CLI_EUSAGE;
        goto out;
    }
    size_t njobs = json_array_size(jobs);
    body = json_object();
    json_object_set(body, "jobs", jobs);
    struct client_resp r;
    client_resp_init(&r);
    if (client_request(&c.http, c.cmd, "POST", "/v1/batches", body, CLI_REQUEST_TIMEOUT_S, &r)) {
        client_resp_fini(&r);
        rc = CLI_EUNREACHABLE;
        goto out;
    }
    if (r.status != 201) {
        print_refusal(c.cmd, c.pos[0], &r, lines, njobs);
        client_resp_fini(&r);
        rc = CLI_EREFUSED;
        goto out;
    }
    b = client_json(c.cmd, &r);
    client_resp_fini(&r);
    if (!b) {
        rc = CLI_EREFUSED;
        goto out;
    }
    char id[32];
    render_str(b, "id", id, sizeof id);
    if (!opts_given(opts_find(submit_opts, "wait"))) {
        if (c.json) {
            cli_print_json(b);
        } else {
            printf("%s\n", id);
            fprintf(stderr, "batch %s: %zu jobs queued\n", id, njobs);
        }
        goto out;
    }
    json_t *last = NULL;
    rc = follow(&c, id, (long)timeout, &last);
    if (rc == CLI_OK) {
        if (c.json)
            cli_print_json(last);
        else
            print_batch(last);
        rc = bad_count(last) ? CLI_EREFUSED : CLI_OK;
    }
    json_decref(last);
out:
    json_decref(b);
    json_decref(body);
    json_decref(jobs);
    free(lines);
    cli_finish(&c);
    return rc;
}

/* A batch command taking one id: GET or DELETE /v1/batches/ID, printed. */
static int batch_one(int argc, char **argv, const char *cmd, const char *method,
                     const char *about)
{
    struct cli c = {0};
    char usage[64];
    snprintf(usage, sizeof usage, "%s ID", cmd);
    int rc = cli_start(&c, cmd, usage, about, no_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    if (c.npos != 1) {
        fprintf(stderr, "gpuq %s: %s (usage: gpuq %s)\n", cmd,
                c.npos ? "expected one batch id" : "missing batch id", usage);
        cli_finish(&c);
        return CLI_EUSAGE;
    }
    char *eid = client_escape(c.pos[0]);
    char path[256];
    snprintf(path, sizeof path, "/v1/batches/%s", eid);
    json_t *b = NULL;
    rc = cli_call(&c, method, path, NULL, CLI_REQUEST_TIMEOUT_S, &b);
    if (rc == CLI_OK) {
        if (c.json)
            cli_print_json(b);
        else
            print_batch(b);
    }
    json_decref(b);
    free(eid);
    cli_finish(&c);
    return rc;
}

int cmd_batch_get(int argc, char **argv)
{
    return batch_one(argc, argv, "batch get", "GET",
                     "Shows a batch: jobs per state and the ETA of its last job.");
}

int cmd_batch_cancel(int argc, char **argv)
{
    return batch_one(argc, argv, "batch cancel", "DELETE",
                     "Cancels every unfinished job of a batch (running ones are aborted).");
}

int cmd_batch_ls(int argc, char **argv)
{
    struct cli c = {0};
    int rc = cli_start(&c, "batch ls", "batch ls", "Lists your batches, newest first.", no_opts,
                       argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    json_t *page = NULL;
    rc = cli_call(&c, "GET", "/v1/batches", NULL, CLI_REQUEST_TIMEOUT_S, &page);
    if (rc == CLI_OK) {
        if (c.json) {
            cli_print_json(page);
        } else {
            size_t i;
            json_t *b;
            json_array_foreach(json_object_get(page, "batches"), i, b) print_batch(b);
        }
    }
    json_decref(page);
    cli_finish(&c);
    return rc;
}

/* ---- backlog and capacity ---- */

static void print_entries(const json_t *v, const char *key, const char *title)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(v, key), i, e) {
        char name[128];
        double gpu_s = 0, q = 0, r = 0;
        render_num(e, "gpu_s", &gpu_s);
        render_num(e, "queued", &q);
        render_num(e, "running", &r);
        printf("%-11s %-24s %12.1f %8.0f %8.0f\n", title, render_str(e, "name", name, sizeof name),
               gpu_s, q, r);
    }
}

int cmd_backlog(int argc, char **argv)
{
    struct cli c = {0};
    int rc = cli_start(&c, "backlog", "backlog",
                       "Shows the work not yet done in GPU-seconds and jobs, per capability,\n"
                       "lane and tenant (a tenant sees its own; the admin sees everyone's).",
                       no_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    json_t *v = NULL;
    rc = cli_call(&c, "GET", "/v1/backlog", NULL, CLI_REQUEST_TIMEOUT_S, &v);
    if (rc == CLI_OK) {
        if (c.json) {
            cli_print_json(v);
        } else {
            double gpu_s = 0, q = 0, r = 0;
            render_num(v, "gpu_s", &gpu_s);
            render_num(v, "queued", &q);
            render_num(v, "running", &r);
            printf("%-11s %-24s %12s %8s %8s\n", "BY", "NAME", "GPU-SECONDS", "QUEUED",
                   "RUNNING");
            printf("%-11s %-24s %12.1f %8.0f %8.0f\n", "total", "-", gpu_s, q, r);
            print_entries(v, "capabilities", "capability");
            print_entries(v, "lanes", "lane");
            print_entries(v, "tenants", "tenant");
        }
    }
    json_decref(v);
    cli_finish(&c);
    return rc;
}

int cmd_capacity(int argc, char **argv)
{
    struct cli c = {0};
    c.admin = 1;
    int rc = cli_start(&c, "capacity", "capacity",
                       "Shows the capacity budget (admin): the GPU-seconds of work per minute\n"
                       "each batch tenant can be promised, and the figures it comes from.",
                       no_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    json_t *v = NULL;
    rc = cli_call(&c, "GET", "/v1/capacity", NULL, CLI_REQUEST_TIMEOUT_S, &v);
    if (rc == CLI_OK) {
        if (c.json) {
            cli_print_json(v);
        } else {
            double g = 0, res = 0, thr = 0, speed = 0, fleet = 0, inter = 0, batch = 0;
            char from[32], measured[8];
            render_num(v, "max_gpus", &g);
            render_num(v, "reserved_gpus", &res);
            render_num(v, "throughput_gpu_s_per_s", &thr);
            render_num(v, "speed", &speed);
            render_num(v, "fleet_gpu_s_per_min", &fleet);
            render_num(v, "interactive_gpu_s_per_min", &inter);
            render_num(v, "batch_gpu_s_per_min", &batch);
            printf("fleet: %.0f GPUs (%s), %.0f reserved for interactive\n", g,
                   render_str(v, "max_gpus_from", from, sizeof from), res);
            printf("measured: %.3f GPU-s/s delivered, speed %.3f (%s)\n", thr, speed,
                   strcmp(render_str(v, "speed_measured", measured, sizeof measured), "true")
                       ? "nominal: nothing measured yet"
                       : "measured");
            printf("per minute: fleet %.1f, interactive %.1f, batch %.1f GPU-s\n", fleet, inter,
                   batch);
            printf("%-24s %8s %16s\n", "TENANT", "WEIGHT", "GPU-S/MIN");
            size_t i;
            json_t *t;
            json_array_foreach(json_object_get(v, "tenants"), i, t) {
                char name[128];
                double w = 0, per = 0;
                render_num(t, "weight", &w);
                render_num(t, "gpu_s_per_min", &per);
                printf("%-24s %8g %16.1f\n", render_str(t, "name", name, sizeof name), w, per);
            }
        }
    }
    json_decref(v);
    cli_finish(&c);
    return rc;
}
