/* capacity.c: the capacity budget and the backlog tally (see capacity.h). */
#include "core/capacity.h"

#include <stdio.h>
#include <string.h>

#include "common/err.h"

int capacity_plan(const struct capacity_input *in, struct capacity_plan *out)
{
    memset(out, 0, sizeof *out);
    if (in->max_gpus < 0 || in->reserved_gpus < 0 || !(in->window_s > 0) || in->busy_s < 0 ||
        in->work_s < 0 || in->done_busy_s < 0 || in->interactive_busy_s < 0 || in->ntenants < 0 ||
        in->ntenants > CAPACITY_MAX_TENANTS)
        return GPUQ_EINVAL;
    double wsum = 0;
    for (int i = 0; i < in->ntenants; i++) {
        if (!(in->weights[i] > 0))
            return GPUQ_EINVAL;
        wsum += in->weights[i];
    }
    out->throughput = in->busy_s / in->window_s;
    out->speed = 1.0;
    if (in->done_busy_s > 0 && in->work_s > 0) {
        out->speed = in->work_s / in->done_busy_s;
        out->measured = 1;
    }
    out->fleet_per_min = in->max_gpus * out->speed * 60.0;
    int reserved = in->reserved_gpus < in->max_gpus ? in->reserved_gpus : in->max_gpus;
    double held = reserved * out->speed * 60.0;
    double used = in->interactive_busy_s / in->window_s * out->speed * 60.0;
    out->interactive_per_min = used > held ? used : held;
    if (out->interactive_per_min > out->fleet_per_min)
        out->interactive_per_min = out->fleet_per_min;
    out->batch_per_min = out->fleet_per_min - out->interactive_per_min;
    for (int i = 0; i < in->ntenants; i++)
        out->tenant_per_min[i] = out->batch_per_min * in->weights[i] / wsum;
    return 0;
}

void backlog_init(struct backlog *b)
{
    memset(b, 0, sizeof *b);
    snprintf(b->by_lane[0].key, sizeof b->by_lane[0].key, "interactive");
    snprintf(b->by_lane[1].key, sizeof b->by_lane[1].key, "batch");
}

/* The entry of key in t (n used), added if new; past the limit, "other". */
static struct backlog_entry *entry(struct backlog_entry *t, int *n, const char *key)
{
    for (int i = 0; i < *n; i++)
        if (!strcmp(t[i].key, key))
            return &t[i];
    if (*n == BACKLOG_MAX_KEYS) {
        struct backlog_entry *last = &t[BACKLOG_MAX_KEYS - 1];
        snprintf(last->key, sizeof last->key, "other");
        return last;
    }
    struct backlog_entry *e = &t[(*n)++];
    snprintf(e->key, sizeof e->key, "%s", key);
    return e;
}

static void count(struct backlog_entry *e, double gpu_s, int queued, int running)
{
    e->gpu_s += gpu_s;
    e->queued += queued;
    e->running += running;
}

static void add(struct backlog *b, const char *cap, int lane_batch, const char *tenant,
                double gpu_s, int queued, int running)
{
    count(entry(b->by_cap, &b->ncap, cap), gpu_s, queued, running);
    count(&b->by_lane[lane_batch ? 1 : 0], gpu_s, queued, running);
    count(entry(b->by_tenant, &b->ntenant, tenant), gpu_s, queued, running);
    b->gpu_s += gpu_s;
    b->queued += queued;
    b->running += running;
}

void backlog_add(struct backlog *b, const char *cap, int lane_batch, const char *tenant,
                 double cost_s, int running, double progress)
{
    if (progress < 0)
        progress = 0;
    if (progress > 1)
        progress = 1;
    double left = cost_s > 0 ? cost_s * (running ? 1.0 - progress : 1.0) : 0;
    add(b, cap, lane_batch, tenant, left, !running, !!running);
}

void backlog_add_queued(struct backlog *b, const char *cap, int lane_batch, const char *tenant,
                        double gpu_s, int n)
{
    add(b, cap, lane_batch, tenant, gpu_s > 0 ? gpu_s : 0, n, 0);
}
