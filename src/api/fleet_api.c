/* fleet_api.c: the fleet over HTTP (fleet_api.h) — its JSON rendering, the
 * event stream that pushes it when it changes, and the dashboard's embedded
 * files. The stream is driven by one timer per connection, FLEET_SSE_HZ times
 * a second, on tick boundaries shared by every connection (multiples of the
 * period on the monotonic clock): each tick takes its scope's snapshot for
 * that tick (head_fleet_shared: collected once and rendered once per scope,
 * whatever the number of streams) and sends it only if it changed since the
 * last one sent (a comment line every FLEET_SSE_KEEPALIVE_S otherwise), so
 * an idle fleet sends nothing and a busy one at most FLEET_SSE_HZ a second. */
#include "api/fleet_api.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "api/json.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/timer.h"
#include "head/fleet.h"
#include "head/head.h"

#define FLEET_SSE_KEEPALIVE_S 15

static void put_telemetry(struct buf *out, const struct telemetry *t)
{
    buf_printf(out,
               ",\"temp_c\":%.1f,\"util_pct\":%.1f,\"power_w\":%.1f,\"vram_used_mb\":%lld,"
               "\"vram_total_mb\":%lld,\"health\":",
               t->temp_c, t->util_pct, t->power_w, (long long)t->vram_used_mb,
               (long long)t->vram_total_mb);
    json_put_string(out, t->health);
    buf_puts(out, ",\"throttle\":");
    json_put_string(out, t->throttle);
}

static void put_gpu(struct buf *out, const struct fleet_view *v, const struct fleet_gpu *g)
{
    buf_puts(out, "{\"id\":");
    json_put_string(out, g->id);
    buf_puts(out, ",\"host\":");
    json_put_string(out, g->host);
    buf_printf(out, ",\"index\":%d,\"name\":", g->gpu_index);
    json_put_string(out, g->gpu_name);
    buf_printf(out, ",\"state\":\"%s\",\"state_reason\":", g->state);
    json_put_string(out, g->breaker_reason);
    put_telemetry(out, &g->tel);
    buf_printf(out, ",\"concurrency\":%d,\"inflight\":%d,\"running\":%d,\"models\":[",
               g->concurrency, g->inflight, g->nrunning);
    for (int i = 0; i < g->nmodels; i++) {
        buf_puts(out, i ? ",{\"name\":" : "{\"name\":");
        json_put_string(out, g->models[i].name);
        buf_printf(out, ",\"vram_mb\":%lld,\"pinned\":%s}", (long long)g->models[i].vram_mb,
                   g->models[i].pinned ? "true" : "false");
    }
    buf_puts(out, "],\"jobs\":[");
    for (int i = 0; i < g->njobs; i++) {
        const struct fleet_job *j = &g->jobs[i];
        buf_puts(out, i ? ",{" : "{");
        if (fleet_job_visible(v, j)) {
            buf_printf(out, "\"id\":\"%llu\",\"capability\":", (unsigned long long)j->id);
            json_put_string(out, j->capability);
            buf_puts(out, ",\"model\":");
            json_put_string(out, j->model);
        } else {
            buf_puts(out, "\"id\":null,\"capability\":null,\"model\":null");
        }
        buf_printf(out, ",\"phase\":\"%s\",\"progress\":%.3f,\"started_ms\":%lld}",
                   job_phase_name(j->phase), j->progress, (long long)j->started_ms);
    }
    buf_puts(out, "]}"); /* no last-seen age: it would differ on every render */
}

void fleet_api_render(struct buf *out, const struct fleet_view *v)
{
    buf_printf(out, "{\"scope\":\"%s\",\"gpus\":[", v->tenant_id < 0 ? "admin" : "tenant");
    for (int i = 0; i < v->ngpus; i++) {
        if (i)
            buf_puts(out, ",");
        put_gpu(out, v, &v->gpus[i]);
    }
    buf_puts(out, "],\"queues\":[");
    for (int i = 0; i < v->nqueues; i++) {
        const struct fleet_queue *q = &v->queues[i];
        buf_puts(out, i ? ",{\"capability\":" : "{\"capability\":");
        json_put_string(out, q->capability);
        buf_printf(out, ",\"lane\":\"%s\",\"queued\":%d,\"running\":%d,\"backlog_s\":%.1f}",
                   job_lane_name(q->lane), q->queued, q->running, q->backlog_s);
    }
    buf_printf(out,
               "],\"queues_truncated\":%s,\"totals\":{\"queued\":%d,\"running\":%d,"
               "\"backlog_s\":%.1f},\"decisions\":[",
               v->queues_truncated ? "true" : "false", v->queued, v->running, v->backlog_s);
    for (int i = 0; i < v->ndecisions; i++) {
        const struct fleet_decision *d = &v->decisions[i];
        buf_printf(out, "%s{\"job\":\"%llu\",\"time_ms\":%lld,\"worker\":", i ? "," : "",
                   (unsigned long long)d->job_id, (long long)d->wall_ms);
        json_put_string(out, d->worker);
        buf_puts(out, ",\"reason\":");
        json_put_string(out, d->reason);
        buf_printf(out, ",\"scored\":%d,\"score_s\":%.3f,\"warm\":%s}", d->scored, d->score_s,
                   d->warm ? "true" : "false");
    }
    buf_puts(out, "],\"tenants\":[");
    for (int i = 0; i < v->ntenants; i++) {
        const struct fleet_tenant *t = &v->tenants[i];
        buf_puts(out, i ? ",{\"name\":" : "{\"name\":");
        json_put_string(out, t->name);
        buf_printf(out, ",\"queued\":%d,\"running\":%d,\"backlog_s\":%.1f}", t->queued,
                   t->running, t->backlog_s);
    }
    buf_puts(out, "]}");
}

void fleet_api_get(struct head *h, int64_t tenant_id, struct http_resp *resp)
{
    struct fleet_view v;
    head_fleet_view(h, tenant_id, &v);
    buf_reset(&resp->body);
    fleet_api_render(&resp->body, &v);
    buf_printf(&resp->body, "\n");
    fleet_view_free(&v);
    resp->status = 200;
    resp->content_type = "application/json";
    http_resp_header(resp, "Cache-Control", "no-store");
}

/* One connected stream. refs: the connection's and the tick timer's. */
struct fleet_sse {
    struct head *h;
    struct http_req *req;      /* held */
    int64_t tenant_id;
    pthread_mutex_t lock;
    bool tick_due;             /* a tick came since next last looked */
    bool closed;               /* the connection is done with the stream */
    /* event-loop side (one next() at a time): */
    uint64_t last_gen;         /* of the last snapshot sent */
    bool sent_any;
    int64_t last_sent_ns;
    atomic_int refs;
};

static void sse_unref(struct fleet_sse *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    http_req_release(s->req);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

#define SSE_PERIOD_NS (NS_PER_S / FLEET_SSE_HZ)

/* The next tick boundary: every stream's timer fires on the same ones, so the
 * first of them collects the fleet and the others share it. */
static int64_t next_tick_ns(void)
{
    return (clock_mono_ns() / SSE_PERIOD_NS + 1) * SSE_PERIOD_NS;
}

static void sse_tick(void *arg)
{
    struct fleet_sse *s = arg;
    pthread_mutex_lock(&s->lock);
    bool closed = s->closed;
    s->tick_due = true;
    pthread_mutex_unlock(&s->lock);
    if (closed) {
        sse_unref(s);
        return;
    }
    http_stream_wake(s->req);
    if (atomic_load(&s->h->stopping)) { /* next() ends the stream; no more ticks */
        sse_unref(s);
        return;
    }
    timers_add(s->h->timers, next_tick_ns(), sse_tick, s);
}

static int sse_next(void *arg, struct http_req *req, struct buf *out)
{
    (void)req;
    struct fleet_sse *s = arg;
    if (atomic_load(&s->h->stopping))
        return HTTP_STREAM_END;
    pthread_mutex_lock(&s->lock);
    bool due = s->tick_due;
    s->tick_due = false;
    pthread_mutex_unlock(&s->lock);
    if (!due && s->sent_any)
        return HTTP_STREAM_WAIT;
    int64_t t = clock_mono_ns();
    struct fleet_text *now = head_fleet_shared(s->h, s->tenant_id, t / SSE_PERIOD_NS,
                                               fleet_api_render);
    if (!s->sent_any || now->gen != s->last_gen) {
        buf_puts(out, "event: fleet\ndata: ");
        buf_append(out, now->data, now->len);
        buf_puts(out, "\n\n");
        s->last_gen = now->gen;
        s->sent_any = true;
        s->last_sent_ns = t;
    } else if (t - s->last_sent_ns >= FLEET_SSE_KEEPALIVE_S * NS_PER_S) {
        buf_puts(out, ": keepalive\n\n");
        s->last_sent_ns = t;
    }
    fleet_text_unref(now);
    return out->len ? HTTP_STREAM_DATA : HTTP_STREAM_WAIT;
}

static void sse_free(void *arg)
{
    struct fleet_sse *s = arg;
    pthread_mutex_lock(&s->lock);
    s->closed = true;
    pthread_mutex_unlock(&s->lock);
    sse_unref(s);
}

void fleet_api_events(struct head *h, int64_t tenant_id, struct http_req *req,
                      struct http_resp *resp)
{
    struct fleet_sse *s = xcalloc(1, sizeof *s);
    s->h = h;
    s->req = req;
    http_req_hold(req);
    s->tenant_id = tenant_id;
    pthread_mutex_init(&s->lock, NULL);
    atomic_init(&s->refs, 2);
    timers_add(h->timers, next_tick_ns(), sse_tick, s);
    resp->status = 200;
    resp->content_type = "text/event-stream";
    http_resp_header(resp, "Cache-Control", "no-cache");
    resp->stream.next = sse_next;
    resp->stream.free = sse_free;
    resp->stream.arg = s;
}

int fleet_api_asset(const char *name, struct http_resp *resp)
{
    if (!*name)
        name = "index.html";
    for (size_t i = 0; i < web_nassets; i++) {
        if (strcmp(web_assets[i].name, name))
            continue;
        buf_reset(&resp->body);
        buf_append(&resp->body, web_assets[i].data, web_assets[i].len);
        resp->status = 200;
        resp->content_type = web_assets[i].content_type;
        /* Everything the page needs is served from here: nothing else may load. */
        http_resp_header(resp, "Content-Security-Policy",
                         "default-src 'none'; script-src 'self'; style-src 'self'; "
                         "connect-src 'self'; img-src 'self' data:");
        http_resp_header(resp, "X-Content-Type-Options", "nosniff");
        http_resp_header(resp, "Cache-Control", "no-cache");
        return 0;
    }
    return GPUQ_ENOENT;
}
