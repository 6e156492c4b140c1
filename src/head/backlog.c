/* backlog.c: the backlog and capacity figures of the head (see backlog.h). */
#include "head/backlog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "head/ops.h"

struct backlog_ctx {
    int64_t tenant_id;
    struct backlog *b;
    struct tenant_rec *tenants; /* read before the jobs lock is taken */
    int ntenants;
};

static const char *tenant_of(struct backlog_ctx *c, int64_t id)
{
    for (int i = 0; i < c->ntenants; i++)
        if (c->tenants[i].id == id)
            return c->tenants[i].name;
    return "?";
}

/* Queued work from the job table's per-(capability, lane, tenant) counters
 * (the figures /metrics and the fleet view show); running jobs, with what is
 * left of them by their progress, from the timed list. No pass over the jobs. */
void head_backlog(struct head *h, int64_t tenant_id, struct backlog *out)
{
    backlog_init(out);
    struct backlog_ctx c = {.tenant_id = tenant_id, .b = out};
    c.ntenants = head_tenants_list(h, &c.tenants);
    long long states[JOB_NSTATES];
    struct jobs_queue *groups = NULL;
    int cap = 0;
    int n = jobs_queue_stats(h->jobs, states, &groups, &cap);
    for (int i = 0; i < n; i++) {
        const struct jobs_queue *g = &groups[i];
        if (g->depth <= 0 || (tenant_id >= 0 && g->tenant_id != tenant_id))
            continue;
        backlog_add_queued(out, g->capability, g->lane == LANE_BATCH, tenant_of(&c, g->tenant_id),
                           (double)g->backlog_ms / 1000.0, (int)g->depth);
    }
    free(groups);
    jobs_lock(h->jobs);
    for (struct hjob *j = jobs_timed_first(h->jobs); j; j = jobs_timed_next(j)) {
        const struct job_rec *r = &j->rec;
        if (!j->committed || r->lc.state != LC_RUNNING ||
            (tenant_id >= 0 && r->tenant_id != tenant_id))
            continue;
        backlog_add(out, r->capability, r->lane == LANE_BATCH, tenant_of(&c, r->tenant_id),
                    r->cost_s, 1, r->progress);
    }
    jobs_unlock(h->jobs);
    free(c.tenants);
}

struct busy_ctx {
    int64_t now_ms, from_ms;
    struct capacity_input *in;
};

static void busy_job(void *arg, const struct hjob *j)
{
    struct busy_ctx *c = arg;
    const struct job_rec *r = &j->rec;
    if (!r->started_ms)
        return;
    int64_t end = r->lc.state == LC_RUNNING ? c->now_ms : r->finished_ms;
    if (end <= 0 || end < c->from_ms)
        return;
    int64_t start = r->started_ms > c->from_ms ? r->started_ms : c->from_ms;
    double s = end > start ? (double)(end - start) / 1000.0 : 0;
    c->in->busy_s += s;
    if (r->lane == LANE_INTERACTIVE)
        c->in->interactive_busy_s += s;
    if (r->lc.state == LC_SUCCEEDED && r->finished_ms > r->started_ms && r->cost_s > 0) {
        c->in->done_busy_s += (double)(r->finished_ms - r->started_ms) / 1000.0;
        c->in->work_s += r->cost_s;
    }
}

int head_capacity(struct head *h, struct capacity_report *out)
{
    memset(out, 0, sizeof *out);
    struct capacity_input *in = &out->in;
    struct worker_rec *ws = NULL;
    out->gpus_registered = head_workers_list(h, &ws);
    free(ws);
    out->max_gpus_set = h->cfg.max_gpus > 0;
    in->max_gpus = out->max_gpus_set ? h->cfg.max_gpus : out->gpus_registered;
    in->reserved_gpus = h->cfg.reserved_gpus; /* [admission] reserved_gpus */
    in->window_s = h->cfg.capacity_window_s;
    int64_t now = clock_wall_ms();
    struct busy_ctx bc = {now, now - (int64_t)h->cfg.capacity_window_s * 1000, in};
    jobs_lock(h->jobs);
    jobs_foreach(h->jobs, busy_job, &bc);
    jobs_unlock(h->jobs);

    /* Every tenant may send batch work: its weight is its [tenant.NAME] weight,
     * else [admission] default_weight. */
    struct tenant_rec *ts = NULL;
    int nt = head_tenants_list(h, &ts);
    for (int i = 0; i < nt && in->ntenants < CAPACITY_MAX_TENANTS; i++) {
        double w = h->cfg.admit.tenant_default.weight;
        for (int k = 0; k < h->cfg.ntenants; k++)
            if (!strcmp(h->cfg.tenants[k].name, ts[i].name))
                w = h->cfg.tenants[k].weight;
        snprintf(out->tenants[in->ntenants], REC_NAME_MAX, "%s", ts[i].name);
        in->weights[in->ntenants++] = w;
    }
    free(ts);
    return capacity_plan(in, &out->plan);
}
