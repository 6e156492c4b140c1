/* cmd_scale.c: gpuq scale (admin) — the autoscaling advisor's current
 * recommendation and its arithmetic, the cold starts learned per GPU class,
 * and the recent scale hooks (GET /v1/scale). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/render.h"

static struct opt scale_opts[] = {{0}};

/* A number from v, "-" when absent or null. */
static const char *num(const json_t *v, const char *key, int prec, char *b, size_t n)
{
    json_t *x = json_object_get(v, key);
    if (!json_is_number(x))
        return "-";
    snprintf(b, n, "%.*f", prec, json_number_value(x));
    return b;
}

static void print_scale(const json_t *v)
{
    if (!json_is_true(json_object_get(v, "enabled"))) {
        printf("autoscaling advisor: off ([scale] enabled = false)\n");
        return;
    }
    char cls[128], b1[32], b2[32], b3[32], b4[32];
    printf("autoscaling advisor: on%s, scale-up class %s\n",
           json_is_true(json_object_get(v, "dry_run")) ? " (dry run: decisions only logged)" : "",
           render_str(v, "class", cls, sizeof cls));
    json_t *r = json_object_get(v, "recommendation");
    if (json_is_object(r)) {
        char action[16], reason[512];
        render_str(r, "action", action, sizeof action);
        printf("recommendation: %s", action);
        double count = 0;
        render_num(r, "count", &count);
        if (strcmp(action, "hold"))
            printf(" %.0f", count);
        printf("\n  %s\n", render_str(r, "reason", reason, sizeof reason));
        printf("  backlog %s GPU-s, threshold %s GPU-s (k x cold start %s s), throughput %s\n",
               num(r, "backlog_gpu_s", 1, b1, sizeof b1),
               num(r, "threshold_gpu_s", 1, b2, sizeof b2),
               num(r, "cold_start_s", 1, b3, sizeof b3),
               num(r, "throughput", 2, b4, sizeof b4));
        double g = 0, p = 0, m = 0;
        render_num(r, "gpus", &g);
        render_num(r, "pending", &p);
        render_num(r, "max_gpus", &m);
        printf("  utilization %s -> %s; %.0f GPUs, %.0f pending, max %.0f\n",
               num(r, "utilization_before", 2, b1, sizeof b1),
               num(r, "utilization_after", 2, b2, sizeof b2), g, p, m);
        size_t i;
        json_t *w;
        json_array_foreach(json_object_get(r, "workers"), i, w)
            printf("  release: %s\n", json_string_value(w));
    } else {
        printf("recommendation: none yet\n");
    }
    printf("%-24s %12s %8s %10s %8s\n", "GPU CLASS", "COLD START S", "SAMPLES", "LAST S",
           "PENDING");
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(v, "cold_starts"), i, c) {
        double cs = 0, n = 0, last = 0, pend = 0;
        render_num(c, "cold_start_s", &cs);
        render_num(c, "samples", &n);
        render_num(c, "last_s", &last);
        render_num(c, "pending", &pend);
        printf("%-24s %12.1f %8.0f %10.1f %8.0f%s\n", render_str(c, "class", cls, sizeof cls),
               cs, n, last, pend, n > 0 ? "" : "  (prior)");
    }
    json_t *h;
    json_array_foreach(json_object_get(v, "hooks"), i, h) {
        char action[16], out[1100];
        double count = 0, code = 0, secs = 0;
        render_num(h, "count", &count);
        render_num(h, "exit_code", &code);
        render_num(h, "seconds", &secs);
        bool running = json_is_true(json_object_get(h, "running"));
        printf("hook %s %s x%.0f: ", render_str(h, "action", action, sizeof action),
               render_str(h, "class", cls, sizeof cls), count);
        if (running)
            printf("running");
        else if (json_is_true(json_object_get(h, "timed_out")))
            printf("killed after its timeout (%.1f s)", secs);
        else
            printf("exit %.0f after %.1f s", code, secs);
        printf("; %s\n", render_str(h, "output", out, sizeof out));
    }
}

int cmd_scale(int argc, char **argv)
{
    struct cli c = {0};
    c.admin = 1;
    int rc = cli_start(&c, "scale", "scale",
                       "Shows the autoscaling advisor (admin): its current recommendation and\n"
                       "the arithmetic behind it, the cold starts learned per GPU class, and\n"
                       "the recent scale hooks.",
                       scale_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    json_t *v = NULL;
    rc = cli_call(&c, "GET", "/v1/scale", NULL, CLI_REQUEST_TIMEOUT_S, &v);
    if (rc == CLI_OK) {
        if (c.json)
            cli_print_json(v);
        else
            print_scale(v);
    }
    json_decref(v);
    cli_finish(&c);
    return rc;
}
