/* cmd_trace.c: `gpuq trace ID` — a job's trace (GET /v1/jobs/{id}/trace) as a
 * timeline: one line per step, its time relative to the first step, the step,
 * and what it says (worker, attempt, reason, candidates, error). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static struct opt trace_opts[] = {{0}};

static const char *str(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static double num(const json_t *o, const char *key)
{
    return json_number_value(json_object_get(o, key));
}

/* What one step says, after its time and name. */
static void describe(FILE *f, const json_t *s)
{
    const char *step = str(s, "step");
    int attempt = (int)json_integer_value(json_object_get(s, "attempt"));
    if (!strcmp(step, "accepted")) {
        fprintf(f, "%s / %s, %s lane", str(s, "capability"), str(s, "model"), str(s, "lane"));
        if (json_object_get(s, "cost_s"))
            fprintf(f, ", est. %.1f GPU-s", num(s, "cost_s"));
    } else if (!strcmp(step, "admitted")) {
        fprintf(f, "%s", str(s, "detail"));
    } else if (!strcmp(step, "queued")) {
        if (json_object_get(s, "eta_start_s"))
            fprintf(f, "ETA: starts in %.1f s, finishes in %.1f s", num(s, "eta_start_s"),
                    num(s, "eta_finish_s"));
        else
            fprintf(f, "waiting: %s", str(s, "waiting_reason"));
    } else if (!strcmp(step, "placed")) {
        fprintf(f, "on %s: %s", str(s, "worker"), str(s, "reason"));
        const json_t *cands = json_object_get(s, "candidates");
        size_t i;
        const json_t *c;
        fprintf(f, " [%d scored", (int)json_integer_value(json_object_get(s, "scored")));
        json_array_foreach(cands, i, c)
        {
            fprintf(f, "%s %s %.2fs%s", i ? "," : ":", str(c, "worker"), num(c, "score_s"),
                    json_is_true(json_object_get(c, "warm")) ? " warm" : "");
        }
        fprintf(f, "]");
    } else if (!strcmp(step, "assigned")) {
        fprintf(f, "attempt %d on %s", attempt, str(s, "worker"));
    } else if (!strcmp(step, "model_load")) {
        fprintf(f, "attempt %d loads its model (%d eviction(s))", attempt,
                (int)json_integer_value(json_object_get(s, "evictions")));
    } else if (!strcmp(step, "started") || !strcmp(step, "progress")) {
        fprintf(f, "attempt %d at %.0f%%", attempt, num(s, "progress") * 100);
    } else if (!strcmp(step, "retry") || !strcmp(step, "attempt_ended")) {
        fprintf(f, "attempt %d on %s: %s", attempt, str(s, "worker"), str(s, "outcome"));
        if (*str(s, "error_class"))
            fprintf(f, ": %s: %s", str(s, "error_class"), str(s, "error"));
        if (!strcmp(step, "retry"))
            fprintf(f, " (queued again)");
    } else if (!strcmp(step, "finished")) {
        fprintf(f, "%s", str(s, "state"));
        if (*str(s, "error_class"))
            fprintf(f, ": %s: %s", str(s, "error_class"), str(s, "error"));
        if (json_object_get(s, "eta_error_s"))
            fprintf(f, " (%+.1f s from its first ETA)", num(s, "eta_error_s"));
    }
    if (!strcmp(str(s, "source"), "store"))
        fprintf(f, "  (from the store)");
}

static void render_trace(FILE *f, const json_t *t)
{
    const json_t *steps = json_object_get(t, "steps");
    fprintf(f, "job %s: %s, %zu step(s)\n", str(t, "job"), str(t, "state"),
            json_array_size(steps));
    double t0 = json_array_size(steps) ? num(json_array_get(steps, 0), "at_ms") : 0;
    size_t i;
    const json_t *s;
    json_array_foreach(steps, i, s)
    {
        char rel[32];
        snprintf(rel, sizeof rel, "+%.3fs", (num(s, "at_ms") - t0) / 1000.0);
        fprintf(f, "  %-10s %-13s ", rel, str(s, "step"));
        describe(f, s);
        fputc('\n', f);
    }
    long long dropped = json_integer_value(json_object_get(t, "dropped"));
    if (dropped > 0)
        fprintf(f, "  (%lld more step(s) not kept)\n", dropped);
}

int cmd_trace(int argc, char **argv)
{
    struct cli c = {0};
    int rc = cli_start(&c, "trace", "trace ID",
                       "Shows a job's trace as a timeline: accepted, queued, each placement "
                       "with its candidates, assigned, model load, started, progress, each "
                       "retry with its error, finished.",
                       trace_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    if (c.npos != 1) {
        fprintf(stderr, "gpuq trace: %s (usage: gpuq trace ID)\n",
                c.npos ? "expected one job id" : "missing job id");
        cli_finish(&c);
        return CLI_EUSAGE;
    }
    char *eid = client_escape(c.pos[0]);
    char path[256];
    snprintf(path, sizeof path, "/v1/jobs/%s/trace", eid);
    json_t *t = NULL;
    rc = cli_call(&c, "GET", path, NULL, CLI_REQUEST_TIMEOUT_S, &t);
    if (rc == CLI_OK) {
        if (c.json)
            cli_print_json(t);
        else
            render_trace(stdout, t);
    }
    json_decref(t);
    free(eid);
    cli_finish(&c);
    return rc;
}
