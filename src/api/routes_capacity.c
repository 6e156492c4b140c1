/* routes_capacity.c: GET /v1/backlog (R7: work not yet done, in GPU-seconds
 * and jobs, per capability, lane and tenant — a tenant sees its own, the admin
 * everyone's) and GET /v1/capacity (R13, admin: the GPU-seconds per minute
 * each batch tenant can be promised, and the figures it comes from). */
#include "api/routes_ext.h"

#include <stdio.h>
#include <stdlib.h>

#include "api/json.h"
#include "common/alloc.h"
#include "head/backlog.h"

static void put_entries(struct buf *out, const char *name, const struct backlog_entry *e, int n)
{
    buf_printf(out, ",\"%s\":[", name);
    for (int i = 0; i < n; i++) {
        buf_printf(out, "%s{\"name\":", i ? "," : "");
        json_put_string(out, e[i].key);
        buf_printf(out, ",\"gpu_s\":%.3f,\"queued\":%d,\"running\":%d}", e[i].gpu_s, e[i].queued,
                   e[i].running);
    }
    buf_puts(out, "]");
}

void route_backlog_get(const struct route_call *c)
{
    struct backlog *b = xcalloc(1, sizeof *b);
    head_backlog(c->h, c->who->kind == CALLER_TENANT ? c->who->tenant.id : -1, b);
    struct buf *out = &c->resp->body;
    buf_reset(out);
    buf_printf(out, "{\"gpu_s\":%.3f,\"queued\":%d,\"running\":%d", b->gpu_s, b->queued,
               b->running);
    put_entries(out, "capabilities", b->by_cap, b->ncap);
    put_entries(out, "lanes", b->by_lane, 2);
    put_entries(out, "tenants", b->by_tenant, b->ntenant);
    buf_puts(out, "}");
    free(b);
    route_reply_json(c, 200);
}

void route_capacity_get(const struct route_call *c)
{
    struct capacity_report *r = xcalloc(1, sizeof *r);
    if (head_capacity(c->h, r)) {
        route_fail(c, 500, "internal", NULL, "the capacity settings make no plan");
        free(r);
        return;
    }
    const struct capacity_input *in = &r->in;
    const struct capacity_plan *p = &r->plan;
    struct buf *out = &c->resp->body;
    buf_reset(out);
    buf_printf(out,
               "{\"max_gpus\":%d,\"max_gpus_from\":\"%s\",\"gpus_registered\":%d,"
               "\"reserved_gpus\":%d,\"window_s\":%.0f,\"throughput_gpu_s_per_s\":%.4f,"
               "\"speed\":%.4f,\"speed_measured\":%s,\"fleet_gpu_s_per_min\":%.3f,"
               "\"interactive_gpu_s_per_min\":%.3f,\"batch_gpu_s_per_min\":%.3f,\"tenants\":[",
               in->max_gpus, r->max_gpus_set ? "setting" : "registered", r->gpus_registered,
               in->reserved_gpus, in->window_s, p->throughput, p->speed,
               p->measured ? "true" : "false", p->fleet_per_min, p->interactive_per_min,
               p->batch_per_min);
    for (int i = 0; i < in->ntenants; i++) {
        buf_printf(out, "%s{\"name\":", i ? "," : "");
        json_put_string(out, r->tenants[i]);
        buf_printf(out, ",\"weight\":%g,\"gpu_s_per_min\":%.3f}", in->weights[i],
                   p->tenant_per_min[i]);
    }
    buf_puts(out, "]}");
    free(r);
    route_reply_json(c, 200);
}
