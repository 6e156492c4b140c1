/* routes_batch.c: the batch routes (R6, docs/api): POST /v1/batches (all or
 * nothing: every job is validated like a POST /v1/jobs body; any invalid job
 * refuses the whole batch with each error named by its index; otherwise every
 * job and the batch are committed together before the 201), GET
 * /v1/batches/{id} (progress, ETA of the last job, the jobs), DELETE
 * /v1/batches/{id} (cancel every unfinished job), GET /v1/batches (list). */
#include "api/routes_ext.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"
#include "head/batches.h"
#include "head/ops.h"

/* At most this many per-job errors are listed in a refusal (the count is exact). */
#define BATCH_MAX_ERRORS 100

void route_reply_json(const struct route_call *c, int status)
{
    c->resp->status = status;
    c->resp->content_type = "application/json";
}

void route_fail(const struct route_call *c, int status, const char *code, const char *field,
                const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    route_failv(c->resp, status, code, field, fmt, ap);
    va_end(ap);
}

static void fail_store(const struct route_call *c, int rc)
{
    if (rc == GPUQ_EIO)
        route_fail(c, 503, "unavailable", NULL,
                   "the store could not commit the batch; nothing was queued; retry later");
    else
        route_fail(c, 500, "internal", NULL, "%s", gpuq_strerror(rc));
}

/* The tenant scope: the tenant's own batches, or any for the admin. */
static int64_t scope(const struct route_call *c)
{
    return c->who->kind == CALLER_TENANT ? c->who->tenant.id : -1;
}

/* ---- submit ---- */

struct parse_ctx {
    const struct route_call *c;
    struct job_rec *recs;      /* n parsed so far (valid ones only while nerr == 0) */
    int n, slots;
    int nerr;
    struct buf errors;         /* rendered [{"index",...}] entries */
    int status;                /* the refusal's status: 400 unless every error says otherwise */
};

static void add_error(struct parse_ctx *p, int index, const struct api_error *e)
{
    if (p->nerr == 0)
        p->status = e->status;
    else if (p->status != e->status)
        p->status = 400;
    if (p->nerr++ >= BATCH_MAX_ERRORS)
        return;
    buf_printf(&p->errors, "%s{\"index\":%d,\"code\":", p->nerr > 1 ? "," : "", index);
    json_put_string(&p->errors, e->code);
    buf_puts(&p->errors, ",\"field\":");
    json_put_string(&p->errors, e->field);
    buf_puts(&p->errors, ",\"message\":");
    json_put_string(&p->errors, e->message);
    buf_puts(&p->errors, "}");
}

static int parse_one(void *arg, int index, const char *text, size_t len)
{
    struct parse_ctx *p = arg;
    const struct route_call *c = p->c;
    struct job_rec rec;
    struct api_error err;
    if (len > (size_t)c->h->cfg.max_body_bytes) {
        api_error_set(&err, 413, "too_large", "body",
                      "a job of a batch is larger than server.max_body_bytes (%lld bytes)",
                      (long long)c->h->cfg.max_body_bytes);
        add_error(p, index, &err);
        return 0;
    }
    if (json_parse_job(text, len, &c->h->cfg, &c->who->tenant, NULL, clock_wall_ms(), &rec,
                       &err)) {
        add_error(p, index, &err);
        return 0;
    }
    char why[160];
    if (rec.idem_key[0]) {
        api_error_set(&err, 400, "invalid_field", "idempotency_key",
                      "idempotency_key: not accepted inside a batch");
        add_error(p, index, &err);
    } else if (head_check_servable(c->h, rec.capability, rec.model, why, sizeof why)) {
        api_error_set(&err, 400, "invalid_field", "model", "%s", why);
        add_error(p, index, &err);
    }
    if (p->nerr) {
        job_rec_free_fields(&rec);
        return 0;
    }
    if (p->n == p->slots) { /* cannot happen: the body bounds the count */
        job_rec_free_fields(&rec);
        api_error_set(&err, 400, "invalid_field", "jobs", "jobs: too many for the body's size");
        add_error(p, index, &err);
        return 0;
    }
    head_job_cost(c->h, &rec);
    p->recs[p->n++] = rec;
    return 0;
}

/* A batch's answer once committed: the batch as it is now. */
struct batch_later {
    struct head *h;
    struct http_req *req;
    struct caller who;
    int rc;
    uint64_t id;
    int ncancelled;
};

static void render_view(const struct route_call *c, const struct batch_view *v, bool with_jobs);

static void render_later(struct batch_later *l, struct http_resp *resp, int status)
{
    struct route_call c = {l->h, &l->who, l->req, resp, l->id};
    struct batch_view v;
    if (head_batch_get(l->h, scope(&c), l->id, true, &v)) {
        route_fail(&c, 404, "not_found", "id", "no batch %llu", (unsigned long long)l->id);
        return;
    }
    render_view(&c, &v, true);
    batch_view_free(&v);
    route_reply_json(&c, status);
}

static void submit_finish(void *arg, struct http_resp *resp)
{
    struct batch_later *l = arg;
    struct route_call c = {l->h, &l->who, l->req, resp, 0};
    if (l->rc) {
        fail_store(&c, l->rc);
    } else {
        render_later(l, resp, 201);
        http_resp_header(resp, "Location", "/v1/batches/%llu", (unsigned long long)l->id);
    }
    free(l);
}


/* Admission, all or nothing (head_admit_batch): true when it refused the
 * batch and answered (429 with Retry-After, or 422), nothing stored. */
static bool refused(const struct route_call *c, struct job_rec *recs, int n)
{
    struct admit_verdict v;
    int index;
    if (head_admit_batch(c->h, &c->who->tenant, recs, n, &v, &index) != 0 ||
        v.outcome == ADMIT_OK)
        return false;
    buf_reset(&c->resp->body);
    json_render_refusal(&c->resp->body, &v, job_lane_name(recs[index].lane),
                        recs[index].cost_s);
    c->resp->body.len--; /* reopen the object: the first job that did not fit */
    buf_printf(&c->resp->body, ",\"index\":%d}", index);
    if (v.outcome == ADMIT_RETRY) {
        long long after = (long long)ceil(v.retry_after_s);
        http_resp_header(c->resp, "Retry-After", "%lld", after > 0 ? after : 1);
    }
    route_reply_json(c, v.outcome == ADMIT_RETRY ? 429 : 422);
    return true;
}

static void submit_done(void *arg, int rc, uint64_t id)
{
    struct batch_later *l = arg;
    l->rc = rc;
    l->id = id;
    http_resume(l->req);
}

void route_batch_post(const struct route_call *c)
{
    size_t len;
    const char *body = http_body(c->req, &len);
    int max = c->h->cfg.max_batch_jobs;
    struct parse_ctx p = {.c = c, .recs = NULL, .status = 400};
    buf_init(&p.errors);
    /* One slot per job the body can hold: each job's text is at least "{}". */
    size_t slots = len / 3 + 1 < (size_t)max ? len / 3 + 1 : (size_t)max;
    p.recs = xcalloc(slots, sizeof *p.recs);
    p.slots = (int)slots;
    int n = 0;
    struct api_error err;
    int rc = json_parse_batch(body, len, max, parse_one, &p, &n, &err);
    if (rc) {
        buf_reset(&c->resp->body);
        json_render_error(&c->resp->body, &err);
        route_reply_json(c, err.status);
    } else if (p.nerr) {
        struct buf *out = &c->resp->body;
        buf_reset(out);
        buf_printf(out, "{\"error\":{\"code\":\"invalid_batch\",\"field\":\"jobs\",\"message\":"
                        "\"%d of %d jobs are invalid; nothing was queued (see errors)\"},"
                        "\"errors\":[%s]}",
                   p.nerr, n, p.errors.data ? p.errors.data : "");
        route_reply_json(c, p.status);
    } else if (refused(c, p.recs, p.n)) {
        for (int i = 0; i < p.n; i++)
            job_rec_free_fields(&p.recs[i]);
    } else {
        struct batch_later *l = xcalloc(1, sizeof *l);
        l->h = c->h;
        l->req = c->req;
        l->who = *c->who;
        http_defer(c->req, submit_finish, l);
        head_batch_submit(c->h, c->who->tenant.id, p.recs, p.n, submit_done, l);
    }
    for (int i = 0; i < p.n; i++)
        job_rec_free_fields(&p.recs[i]);
    free(p.recs);
    buf_fini(&p.errors);
}

/* ---- read ---- */

static void render_view(const struct route_call *c, const struct batch_view *v, bool with_jobs)
{
    struct buf *out = &c->resp->body;
    buf_reset(out);
    char name[REC_NAME_MAX];
    const char *tenant = c->who->kind == CALLER_TENANT
                             ? c->who->tenant.name
                             : head_tenant_name(c->h, v->tenant_id, name, sizeof name);
    buf_printf(out, "{\"id\":\"%llu\",\"tenant\":", (unsigned long long)v->id);
    json_put_string(out, tenant);
    buf_printf(out, ",\"created_ms\":%lld,\"total\":%d,\"counts\":{", (long long)v->created_ms,
               v->njobs);
    for (int s = 0; s < JOB_NSTATES; s++)
        buf_printf(out, "%s\"%s\":%d", s ? "," : "", job_state_name((enum job_state)s),
                   v->counts[s]);
    buf_printf(out, "},\"unfinished\":%d,\"done\":%s,\"backlog_gpu_s\":%.3f", v->unfinished,
               v->unfinished ? "false" : "true", v->cost_s);
    if (v->eta_finish_ms)
        buf_printf(out, ",\"eta\":{\"finish_ms\":%lld},\"eta_reason\":null",
                   (long long)v->eta_finish_ms);
    else {
        buf_puts(out, ",\"eta\":null,\"eta_reason\":");
        if (v->eta_why[0])
            json_put_string(out, v->eta_why);
        else
            buf_puts(out, v->unfinished ? "null" : "\"every job has finished\"");
    }
    if (with_jobs) {
        buf_puts(out, ",\"jobs\":[");
        for (int i = 0; i < v->njobs; i++)
            buf_printf(out, "%s{\"id\":\"%llu\",\"state\":\"%s\"}", i ? "," : "",
                       (unsigned long long)v->jobs[i].id, job_state_name(v->jobs[i].state));
        buf_puts(out, "]");
    }
    buf_puts(out, "}");
}

void route_batch_get(const struct route_call *c)
{
    struct batch_view v;
    if (head_batch_get(c->h, scope(c), c->id, true, &v)) {
        route_fail(c, 404, "not_found", "id", "no batch %llu", (unsigned long long)c->id);
        return;
    }
    render_view(c, &v, true);
    batch_view_free(&v);
    route_reply_json(c, 200);
}

/* ---- cancel ---- */

static void cancel_finish(void *arg, struct http_resp *resp)
{
    struct batch_later *l = arg;
    struct route_call c = {l->h, &l->who, l->req, resp, l->id};
    if (l->rc == GPUQ_ENOENT)
        route_fail(&c, 404, "not_found", "id", "no batch %llu", (unsigned long long)l->id);
    else if (l->rc)
        fail_store(&c, l->rc);
    else
        render_later(l, resp, 200);
    free(l);
}

static void cancel_done(void *arg, int rc, int ncancelled)
{
    struct batch_later *l = arg;
    l->rc = rc;
    l->ncancelled = ncancelled;
    http_resume(l->req);
}

void route_batch_delete(const struct route_call *c)
{
    struct batch_later *l = xcalloc(1, sizeof *l);
    l->h = c->h;
    l->req = c->req;
    l->who = *c->who;
    l->id = c->id;
    http_defer(c->req, cancel_finish, l);
    head_batch_cancel(c->h, scope(c), c->id, cancel_done, l);
}

/* ---- list ---- */

static bool query_u64(const struct route_call *c, const char *name, uint64_t lo, uint64_t hi,
                      uint64_t *out)
{
    const char *v = http_query(c->req, name);
    if (!v)
        return true;
    bool ok = *v != '\0' && strlen(v) <= 20;
    for (const char *p = v; ok && *p; p++)
        ok = *p >= '0' && *p <= '9';
    unsigned long long x = 0;
    if (ok) {
        errno = 0;
        x = strtoull(v, NULL, 10);
        ok = errno == 0 && x >= lo && x <= hi;
    }
    if (!ok) {
        route_fail(c, 400, "invalid_field", name, "%s: must be an integer in %llu..%llu", name,
                   (unsigned long long)lo, (unsigned long long)hi);
        return false;
    }
    *out = x;
    return true;
}

void route_batch_list(const struct route_call *c)
{
    uint64_t limit = 50, after = 0;
    if (!query_u64(c, "limit", 1, 500, &limit) || !query_u64(c, "after", 0, UINT64_MAX, &after))
        return;
    uint64_t *ids;
    int n = head_batch_list(c->h, scope(c), after, (int)limit, &ids);
    struct buf rows;
    buf_init(&rows);
    for (int i = 0; i < n; i++) {
        struct batch_view v;
        if (head_batch_get(c->h, scope(c), ids[i], false, &v))
            continue;
        render_view(c, &v, false); /* into resp body, then moved into rows */
        buf_printf(&rows, "%s%s", rows.len ? "," : "", c->resp->body.data);
    }
    struct buf *out = &c->resp->body;
    buf_reset(out);
    buf_printf(out, "{\"batches\":[%s]", rows.data ? rows.data : "");
    if (n == (int)limit)
        buf_printf(out, ",\"next\":\"%llu\"}", (unsigned long long)ids[n - 1]);
    else
        buf_puts(out, ",\"next\":null}");
    buf_fini(&rows);
    free(ids);
    route_reply_json(c, 200);
}
