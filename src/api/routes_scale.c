/* routes_scale.c: GET /v1/scale (admin) — the autoscaling advisor's latest
 * recommendation with its arithmetic, the backlog it saw per capability and
 * lane, the cold starts learned per GPU class, and the recent hook runs. */
#include "api/routes_ext.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/json.h"
#include "common/alloc.h"
#include "head/scale.h"

static const char *action_name(enum advisor_action a)
{
    return a == ADVISOR_UP ? "up" : a == ADVISOR_DOWN ? "down" : "hold";
}

/* A number, or null when it is not finite (utilization with no GPU). */
static void put_num(struct buf *out, const char *key, double v)
{
    if (isfinite(v))
        buf_printf(out, ",\"%s\":%.4f", key, v);
    else
        buf_printf(out, ",\"%s\":null", key);
}

static void put_rec(struct buf *out, const struct scale_view *v)
{
    const struct advisor_rec *r = &v->rec;
    buf_printf(out, ",\"recommendation\":{\"action\":\"%s\",\"class\":", action_name(r->action));
    json_put_string(out, r->cls);
    buf_printf(out, ",\"count\":%d,\"workers\":[", r->action == ADVISOR_DOWN ? r->count : 0);
    for (int i = 0; r->action == ADVISOR_DOWN && i < r->count; i++) {
        buf_puts(out, i ? "," : "");
        json_put_string(out, r->release[i]);
    }
    buf_puts(out, "],\"reason\":");
    json_put_string(out, r->reason);
    put_num(out, "backlog_gpu_s", r->backlog_gpu_s);
    put_num(out, "throughput", r->throughput);
    put_num(out, "cold_start_s", r->cold_start_s);
    put_num(out, "k", r->k);
    buf_printf(out, ",\"lane\":\"%s\"", r->lane == ADVISOR_LANE_INTERACTIVE ? "interactive"
                                         : r->lane == ADVISOR_LANE_BATCH     ? "batch"
                                         : r->lane == ADVISOR_LANE_BOTH      ? "both"
                                                                             : "none");
    put_num(out, "backlog_interactive_gpu_s", r->backlog_interactive_gpu_s);
    put_num(out, "backlog_batch_gpu_s", r->backlog_batch_gpu_s);
    put_num(out, "threshold_gpu_s", r->threshold_gpu_s);
    put_num(out, "load", r->load);
    put_num(out, "utilization_before", r->util_before);
    put_num(out, "utilization_after", r->util_after);
    put_num(out, "cooldown_left_s", r->cooldown_left_s);
    buf_printf(out, ",\"gpus\":%d,\"pending\":%d,\"max_gpus\":%d,\"at_ms\":%lld}", r->gpus,
               r->pending, r->max_gpus, (long long)v->rec_ms);
}

void route_scale_get(const struct route_call *c)
{
    struct scale_view *v = xcalloc(1, sizeof *v);
    scale_view(c->h, v);
    const struct advisor_policy *p = &v->policy;
    struct buf *out = &c->resp->body;
    buf_reset(out);
    buf_printf(out,
               "{\"enabled\":%s,\"dry_run\":%s,\"settings\":{\"k\":%g,\"k_interactive\":%g,"
               "\"target_utilization\":%g,"
               "\"down_utilization\":%g,\"max_gpus\":%d,\"min_gpus\":%d,\"max_step\":%d,"
               "\"idle_release_s\":%g,\"cooldown_s\":%g,\"cold_start_prior_s\":%g,"
               "\"cold_start_alpha\":%g}",
               v->enabled ? "true" : "false", v->dry_run ? "true" : "false", p->k_batch,
               p->k_interactive,
               p->up_utilization, p->down_utilization, p->max_gpus, p->min_gpus, p->max_step,
               p->idle_release_s, p->cooldown_s, p->cold_start_prior_s, p->alpha);
    if (v->enabled) {
        buf_puts(out, ",\"class\":");
        json_put_string(out, v->up_class);
        if (v->have_rec)
            put_rec(out, v);
        else
            buf_puts(out, ",\"recommendation\":null");
        buf_puts(out, ",\"backlog\":[");
        for (int i = 0; i < v->ndemands; i++) {
            buf_printf(out, "%s{\"capability\":", i ? "," : "");
            json_put_string(out, v->demands[i].capability);
            buf_printf(out, ",\"lane\":\"%s\",\"gpu_s\":%.3f}",
                       v->demands[i].lane == SCHED_LANE_BATCH ? "batch" : "interactive",
                       v->demands[i].backlog_gpu_s);
        }
        buf_puts(out, "],\"cold_starts\":[");
        for (int i = 0; i < v->nclasses; i++) {
            const struct advisor_class_info *ci = &v->classes[i];
            buf_printf(out, "%s{\"class\":", i ? "," : "");
            json_put_string(out, ci->cls);
            buf_printf(out,
                       ",\"cold_start_s\":%.3f,\"learned\":%s,\"last_s\":%.3f,\"samples\":%d,"
                       "\"pending\":%d}",
                       ci->cold_start_s, ci->samples ? "true" : "false", ci->last_s,
                       ci->samples, ci->pending);
        }
        buf_puts(out, "],\"hooks\":[");
        for (int i = 0; i < v->nhooks; i++) {
            const struct scale_hook_info *hk = &v->hooks[i];
            buf_printf(out, "%s{\"action\":\"%s\",\"class\":", i ? "," : "", hk->action);
            json_put_string(out, hk->cls);
            buf_printf(out, ",\"count\":%d,\"workers\":", hk->count);
            json_put_string(out, hk->workers);
            buf_printf(out, ",\"started_ms\":%lld,\"running\":%s", (long long)hk->started_ms,
                       hk->running ? "true" : "false");
            if (!hk->running)
                buf_printf(out, ",\"exit_code\":%d,\"signal\":%d,\"timed_out\":%s,\"seconds\":%.3f",
                           hk->exit_code, hk->signal, hk->timed_out ? "true" : "false",
                           hk->seconds);
            buf_puts(out, ",\"output\":");
            json_put_string(out, hk->output);
            buf_puts(out, "}");
        }
        buf_printf(out, "],\"actions\":{\"up\":%lld,\"down\":%lld}", (long long)v->ups,
                   (long long)v->downs);
    }
    buf_puts(out, "}");
    free(v);
    route_reply_json(c, 200);
}
