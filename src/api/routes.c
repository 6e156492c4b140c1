/* routes.c: the HTTP API — client, admin and agent routes (docs/api,
 * docs/protocol-worker.md). One table lists every route (method, path
 * pattern, handler, who may call, body kind); 404, 405 with `Allow`, 401 and
 * 403 follow from it and are answered before a byte of the body is read, with
 * a body limit that depends on the route and on who calls. Handlers parse,
 * call the head's operations (head/ops.h — nothing else of the head), and
 * render the answer. Errors always have the shape {"error":{"code","message","field"}}. */
#include "api/routes.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/fleet_api.h"
#include "api/json.h"
#include "api/routes_ext.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "common/timer.h"
#include "core/lifecycle.h"
#include "head/inputs.h"
#include "head/ops.h"

#define MOD "api"
#define MAX_PATH_PARTS 8
#define SSE_KEEPALIVE_S 15
#define MAX_LIST_WORKERS 4096

struct route;

/* One request, from admission to its handler (the request's data in http.c). */
struct ctx {
    struct head *h;
    struct http_req *req;
    struct http_resp *resp;
    struct caller who;
    const char *method;
    const struct route *route;
    uint64_t id;               /* the {id} of the path, parsed */
    const char *param;         /* the {name} of the path */
    /* The path's segments, each decoded strictly (routes_decode) into decbuf;
     * a segment that cannot be has bad[i] (why) set and parts[i] raw: it
     * matches only a placeholder, which then answers 400. */
    char *parts[MAX_PATH_PARTS];
    const char *bad[MAX_PATH_PARTS];
    int nparts;
    char pathbuf[512];
    char decbuf[512];
};

static void reply_json(struct ctx *c, int status)
{
    c->resp->status = status;
    c->resp->content_type = "application/json";
}

static void fail(struct ctx *c, int status, const char *code, const char *field, const char *fmt,
                 ...) __attribute__((format(printf, 5, 6)));

void route_failv(struct http_resp *resp, int status, const char *code, const char *field,
                 const char *fmt, va_list ap)
{
    struct api_error e;
    char msg[256];
    vsnprintf(msg, sizeof msg, fmt, ap);
    api_error_set(&e, status, code, field, "%s", msg);
    buf_reset(&resp->body);
    json_render_error(&resp->body, &e);
    resp->status = status;
    resp->content_type = "application/json";
}

static void fail(struct ctx *c, int status, const char *code, const char *field, const char *fmt,
                 ...)
{
    va_list ap;
    va_start(ap, fmt);
    route_failv(c->resp, status, code, field, fmt, ap);
    va_end(ap);
}

static void fail_api(struct ctx *c, const struct api_error *e)
{
    buf_reset(&c->resp->body);
    json_render_error(&c->resp->body, e);
    reply_json(c, e->status);
}

static void fail_store(struct ctx *c, int rc)
{
    if (rc == GPUQ_EIO)
        fail(c, 503, "unavailable", NULL, "the store could not commit the change; retry later");
    else if (rc == GPUQ_EAGAIN)
        fail(c, 503, "unavailable", NULL, "the same change is being committed; retry later");
    else
        fail(c, 500, "internal", NULL, "%s", gpuq_strerror(rc));
}

static int hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

int routes_decode(const char *in, size_t n, char *out, size_t size, const char **why)
{
    if (size < n + 1) {
        *why = "is too long";
        return GPUQ_EINVAL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[i] != '%') {
            out[k++] = in[i];
            continue;
        }
        int hi = i + 2 < n ? hex_digit(in[i + 1]) : -1;
        int lo = i + 2 < n ? hex_digit(in[i + 2]) : -1;
        if (hi < 0 || lo < 0) {
            *why = "has a '%' not followed by two hex digits";
            return GPUQ_EINVAL;
        }
        out[k++] = (char)(hi << 4 | lo);
        i += 2;
    }
    out[k] = '\0';
    for (size_t i = 0; i < k; i++) {
        unsigned char ch = (unsigned char)out[i];
        if (ch == 0) {
            *why = "contains a NUL byte (%00)";
            return GPUQ_EINVAL;
        }
        if (ch < 0x20 || ch == 0x7f) {
            *why = "contains a control character";
            return GPUQ_EINVAL;
        }
    }
    if (!json_utf8_valid(out, k)) {
        *why = "is not valid UTF-8";
        return GPUQ_EINVAL;
    }
    return 0;
}

/* A job id: a positive decimal number as the API writes it (digits only, no
 * sign, space or leading zero), within 64 bits. */
static bool parse_id(struct ctx *c, const char *s, uint64_t *out)
{
    if (!json_job_id(s, out)) {
        fail(c, 400, "invalid_field", "id",
             "id: '%.40s' is not a job id (a positive decimal number)", s);
        return false;
    }
    return true;
}

/* Reads query parameter name, decoded strictly into out (size bytes): *val is
 * out, or NULL if the parameter is absent. False (400 sent, naming it) if it
 * cannot be decoded or is too long. */
static bool query_get(struct ctx *c, const char *name, char *out, size_t size, const char **val)
{
    const char *raw = http_query(c->req, name);
    *val = NULL;
    if (!raw)
        return true;
    const char *why;
    if (routes_decode(raw, strlen(raw), out, size, &why)) {
        fail(c, 400, "invalid_field", name, "%s: %s", name, why);
        return false;
    }
    *val = out;
    return true;
}

/* Reads an optional integer query parameter within [lo, hi]; false (reply sent) if malformed. */
static bool query_int(struct ctx *c, const char *name, long long lo, long long hi,
                      long long *out)
{
    char buf[32];
    const char *v;
    if (!query_get(c, name, buf, sizeof buf, &v))
        return false;
    if (!v)
        return true;
    /* Plain decimal: an optional '-' and digits (strtoll alone takes spaces and '+'). */
    const char *d = v[0] == '-' ? v + 1 : v;
    bool ok = *d != '\0';
    for (const char *p = d; ok && *p; p++)
        ok = *p >= '0' && *p <= '9';
    long long x = 0;
    if (ok) {
        errno = 0;
        x = strtoll(v, NULL, 10);
        ok = errno == 0 && x >= lo && x <= hi;
    }
    if (!ok) {
        fail(c, 400, "invalid_field", name, "%s: must be an integer in %lld..%lld", name, lo, hi);
        return false;
    }
    *out = x;
    return true;
}

static const char *tenant_name(struct ctx *c, int64_t tenant_id, char *buf, size_t size)
{
    if (c->who.kind == CALLER_TENANT)
        return c->who.tenant.name;
    return head_tenant_name(c->h, tenant_id, buf, size);
}

static void render_job(struct ctx *c, int status, const struct job_rec *j)
{
    char name[REC_NAME_MAX];
    buf_reset(&c->resp->body);
    json_render_job(&c->resp->body, j, tenant_name(c, j->tenant_id, name, sizeof name));
    reply_json(c, status);
}

/* The tenant scope of a job call: the tenant's own, or any for the admin. */
static bool job_scope(struct ctx *c, int64_t *tenant_id)
{
    if (c->who.kind == CALLER_TENANT) {
        *tenant_id = c->who.tenant.id;
        return true;
    }
    if (c->who.kind == CALLER_ADMIN) {
        *tenant_id = -1;
        return true;
    }
    fail(c, 403, "forbidden", NULL, "this key cannot use the jobs API");
    return false;
}

/* ---- client routes ---- */

/* An answer that comes later (a commit, a long-poll): what the finishing
 * callback needs to render it on the event-loop thread. */
struct long_poll;
static void long_poll_unref(struct long_poll *p);

struct later {
    struct head *h;
    struct http_req *req;
    struct caller who;
    uint64_t id;           /* the job the request names (0: a new one) */
    int rc;
    bool flag;             /* head_done_fn's flag */
    struct job_rec job;    /* owned */
    struct admin_answer admin; /* tenant / worker-token adds; its secret wiped at free */
    struct buf body;       /* pre-rendered answer (agent polls) */
    char worker[SCHED_NAME_MAX]; /* the polling agent's worker_id (its 404) */
    const char *field;     /* the poll's 404: the parameter naming that worker */
    struct long_poll *poll; /* a job's long-poll, answered through this (one ref) */
};

static struct later *later_new(struct ctx *c)
{
    struct later *l = xcalloc(1, sizeof *l);
    l->h = c->h;
    l->req = c->req;
    l->who = c->who;
    buf_init(&l->body);
    return l;
}

static void later_free(struct later *l)
{
    memset(l->admin.secret, 0, sizeof l->admin.secret);
    job_rec_free_fields(&l->job);
    buf_fini(&l->body);
    if (l->poll)
        long_poll_unref(l->poll);
    free(l);
}

/* A ctx to render a later answer with the same helpers as a direct one. */
static void later_ctx(struct later *l, struct http_resp *resp, struct ctx *c)
{
    memset(c, 0, sizeof *c);
    c->h = l->h;
    c->req = l->req;
    c->resp = resp;
    c->who = l->who;
}

/* GET /v1/jobs/{id}?wait=S[&until=end], and POST /v1/jobs?wait=S once its
 * job is stored: a long-poll on a suspended connection. Whichever comes first — the job's watcher firing or the timer —
 * answers (the won flag); the struct lives until both the timer and the
 * connection are done with it. until=end: the watcher fires only when the job
 * ends (struct job_watch), so a client waiting for the outcome sends one
 * request, answered as soon as the outcome is durable. */
struct long_poll {
    struct job_watch w;    /* first: fire gets it */
    struct later *l;       /* l->id: the job */
    int64_t tenant_id;
    long long wait_s;
    atomic_bool won;
    atomic_int refs;       /* the connection's (l->poll) + the timer's */
};

static void long_poll_unref(struct long_poll *p)
{
    if (atomic_fetch_sub(&p->refs, 1) == 1)
        free(p);
}

static void long_poll_fire(struct job_watch *w, struct hjob *j)
{
    struct long_poll *p = (struct long_poll *)w;
    if (atomic_exchange(&p->won, true))
        return;
    head_job_copy(j, &p->l->job, NULL);
    http_resume(p->l->req);
}

static void long_poll_timeout(void *arg)
{
    struct long_poll *p = arg;
    if (!atomic_exchange(&p->won, true)) {
        head_unwatch(p->l->h, p->l->id, &p->w);
        p->l->rc = head_get(p->l->h, p->tenant_id, p->l->id, NULL, &p->l->job);
        http_resume(p->l->req);
    }
    long_poll_unref(p);
}

static struct long_poll *long_poll_new(struct later *l, int64_t tenant_id, bool until_end,
                                       long long wait_s)
{
    struct long_poll *p = xcalloc(1, sizeof *p);
    p->l = l;
    p->tenant_id = tenant_id;
    p->wait_s = wait_s;
    p->w.fire = long_poll_fire;
    p->w.until_end = until_end;
    atomic_init(&p->refs, 2);
    return p;
}

/* Watches l->id (changed since version; 0: its end only, or any change, as
 * p->w.until_end says) for up to p->wait_s; answers now if it has changed
 * or is gone. The connection is deferred; no lock held. Once the watcher is
 * linked, l may be answered and freed at any moment (by a submit's commit
 * callback, this runs off the connection's thread): only p, which the timer's
 * reference keeps, is used after. */
static void long_poll_arm(struct long_poll *p, uint64_t version)
{
    struct later *l = p->l;
    struct timers *timers = l->h->timers;
    bool watching;
    struct job_rec now;
    int rc = head_watch(l->h, p->tenant_id, l->id, version, &p->w, &watching, &now, NULL);
    if (rc || !watching) { /* it changed already, or is gone: answer now */
        l->rc = rc;
        if (!rc) {
            job_rec_free_fields(&l->job);
            l->job = now;
        }
        atomic_store(&p->won, true);
        long_poll_unref(p); /* no timer */
        http_resume(l->req);
        return;
    }
    job_rec_free_fields(&now); /* the watcher copies the job as it will be */
    timers_add(timers, clock_mono_ns() + p->wait_s * NS_PER_S, long_poll_timeout, p);
}

/* head_done_fn: keep the answer, wake the connection. A submit that waits
 * for its job's end (POST /v1/jobs?wait=S) watches the job instead, now that
 * it is durable, and is answered by the watch. */
static void later_done(void *arg, int rc, struct job_rec *job, bool flag)
{
    struct later *l = arg;
    l->rc = rc;
    l->flag = flag;
    if (l->poll && !rc && job) {
        l->id = job->id;
        long_poll_arm(l->poll, 0);
        return;
    }
    free(l->poll); /* not armed: nothing else holds it */
    l->poll = NULL;
    if (job) { /* taken: the caller's record keeps nothing it would free */
        l->job = *job;
        job->params_json = NULL;
        job->attempts = NULL;
        job->nattempts = 0;
    }
    http_resume(l->req);
}

static void submit_finish(void *arg, struct http_resp *resp)
{
    struct later *l = arg;
    struct ctx c;
    later_ctx(l, resp, &c);
    if (l->rc == GPUQ_ECONFLICT)
        fail(&c, 409, "conflict", "idempotency_key",
             "idempotency_key: already used for a different request");
    else if (l->rc == GPUQ_ENOENT) /* an input deleted between the check and the commit */
        fail(&c, 400, "invalid_field", "params.inputs",
             "params.inputs: an upload it names is gone; upload it again");
    else if (l->rc)
        fail_store(&c, l->rc);
    else {
        if (l->poll)
            head_job_annotate(l->h, &l->job);
        render_job(&c, l->flag ? 200 : 201, &l->job);
        http_resp_header(resp, "Location", "/v1/jobs/%llu", (unsigned long long)l->job.id);
    }
    later_free(l);
}

/* Admission refused the job (nothing was stored): 429 with Retry-After (whole
 * seconds, rounded up) when waiting helps, 422 when it never will. */
static void refuse_admission(struct ctx *c, const struct job_rec *rec,
                             const struct admit_verdict *v)
{
    buf_reset(&c->resp->body);
    json_render_refusal(&c->resp->body, v, job_lane_name(rec->lane), rec->cost_s);
    if (v->outcome == ADMIT_RETRY) {
        long long after = (long long)ceil(v->retry_after_s);
        http_resp_header(c->resp, "Retry-After", "%lld", after > 0 ? after : 1);
    }
    reply_json(c, v->outcome == ADMIT_RETRY ? 429 : 422);
}

/* The answer is sent once the job is durable (group commit); the connection
 * waits suspended meanwhile, holding no thread. */
static void post_job(struct ctx *c)
{
    size_t len;
    const char *body = http_body(c->req, &len);
    struct job_rec rec;
    struct api_error err;
    long long wait = 0;
    if (!query_int(c, "wait", 0, c->h->cfg.max_wait_s, &wait))
        return;
    if (json_parse_job(body, len, &c->h->cfg, &c->who.tenant, http_header(c->req, "Idempotency-Key"),
                       clock_wall_ms(), &rec, &err)) {
        fail_api(c, &err);
        return;
    }
    char why[160];
    if (head_check_servable(c->h, rec.capability, rec.model, why, sizeof why)) {
        fail(c, 400, "invalid_field", "model", "%s", why);
        job_rec_free_fields(&rec);
        return;
    }
    char field[64], msg[256];
    int irc = inputs_check(c->h, rec.tenant_id, rec.params_json, field, sizeof field, msg,
                           sizeof msg);
    if (irc) {
        if (irc == GPUQ_ENOENT)
            fail(c, 400, "invalid_field", field, "%s", msg);
        else
            fail_store(c, irc);
        job_rec_free_fields(&rec);
        return;
    }
    head_job_cost(c->h, &rec);
    struct admit_verdict v;
    if (head_admit(c->h, &c->who.tenant, &rec, &v) == 0 && v.outcome != ADMIT_OK) {
        refuse_admission(c, &rec, &v);
        job_rec_free_fields(&rec);
        return;
    }
    struct later *l = later_new(c);
    if (wait > 0)
        l->poll = long_poll_new(l, rec.tenant_id, true, wait);
    http_defer(c->req, submit_finish, l);
    head_submit(c->h, &rec, wait > 0, later_done, l);
    job_rec_free_fields(&rec);
}

static void not_found_job(struct ctx *c, uint64_t id)
{
    fail(c, 404, "not_found", "id", "no job %llu", (unsigned long long)id);
}

static void job_answer(struct ctx *c, int rc, uint64_t id, const struct job_rec *j)
{
    if (rc == GPUQ_ENOENT)
        not_found_job(c, id);
    else if (rc)
        fail_store(c, rc);
    else
        render_job(c, 200, j);
}

static void long_poll_finish(void *arg, struct http_resp *resp)
{
    struct later *l = arg;
    struct ctx c;
    later_ctx(l, resp, &c);
    if (!l->rc)
        head_job_annotate(l->h, &l->job);
    job_answer(&c, l->rc, l->id, &l->job);
    later_free(l);
}

static void get_job(struct ctx *c)
{
    uint64_t id = c->id;
    int64_t tenant;
    long long wait = 0;
    if (!job_scope(c, &tenant) || !query_int(c, "wait", 0, c->h->cfg.max_wait_s, &wait))
        return;
    char ubuf[16];
    const char *until;
    if (!query_get(c, "until", ubuf, sizeof ubuf, &until))
        return;
    if (until && strcmp(until, "end") != 0) {
        fail(c, 400, "invalid_field", "until", "until: \"end\" (answer when the job ends), or "
                                               "leave it out (answer on any change)");
        return;
    }
    struct job_rec j;
    uint64_t version = 0;
    int rc = head_get(c->h, tenant, id, &version, &j);
    if (rc || wait == 0 || job_state_terminal(job_rec_state(&j))) {
        job_answer(c, rc, id, &j);
        if (!rc)
            job_rec_free_fields(&j);
        return;
    }
    job_rec_free_fields(&j);
    struct later *l = later_new(c);
    l->id = id;
    l->poll = long_poll_new(l, tenant, until != NULL, wait);
    http_defer(c->req, long_poll_finish, l);
    /* until=end: a change since head_get does not matter, only an end (which
     * head_watch sees under the table lock). */
    long_poll_arm(l->poll, until ? 0 : version);
}

static void change_finish(void *arg, struct http_resp *resp)
{
    struct later *l = arg;
    struct ctx c;
    later_ctx(l, resp, &c);
    if (l->rc == GPUQ_ENOENT)
        not_found_job(&c, l->id);
    else if (l->rc == GPUQ_ECONFLICT)
        fail(&c, 409, "conflict", "state", "job %llu cannot do that now (it is %s)",
             (unsigned long long)l->id, job_state_name(job_rec_state(&l->job)));
    else if (l->rc)
        fail_store(&c, l->rc);
    else
        render_job(&c, 200, &l->job);
    later_free(l);
}

/* Cancel: answered once the cancel is stored (the connection waits suspended). */
static void delete_job(struct ctx *c)
{
    uint64_t id = c->id;
    int64_t tenant;
    if (!job_scope(c, &tenant))
        return;
    struct later *l = later_new(c);
    l->id = id;
    http_defer(c->req, change_finish, l);
    head_cancel(c->h, tenant, id, later_done, l);
}

/* Admin: a dead, failed or expired job runs again. */
static void resubmit_job(struct ctx *c)
{
    uint64_t id = c->id;
    struct later *l = later_new(c);
    l->id = id;
    http_defer(c->req, change_finish, l);
    head_resubmit(c->h, id, later_done, l);
}

static void get_result(struct ctx *c)
{
    uint64_t id = c->id;
    int64_t tenant;
    if (!job_scope(c, &tenant))
        return;
    struct head_result res;
    int rc = head_result_read(c->h, tenant, id, &res);
    if (rc) {
        job_answer(c, rc, id, NULL);
        return;
    }
    if (res.state != JOB_SUCCEEDED) {
        fail(c, 404, "not_found", "result", "job %llu has no result (it is %s)",
             (unsigned long long)id, job_state_name(res.state));
        return;
    }
    if (!res.kept) { /* deleted by the retention sweep (head/retention.h) */
        fail(c, 410, "gone", "result",
             "the result of job %llu was deleted: results are kept for [jobs] "
             "result_retention_h after the job finished",
             (unsigned long long)id);
        return;
    }
    const char *type = res.type;
    buf_reset(&c->resp->body);
    buf_append(&c->resp->body, res.data, res.len);
    free(res.data);
    c->resp->status = 200;
    /* The agent's declared type, from a fixed set; anything else is served as bytes. */
    static const char *const types[] = {"image/png", "image/jpeg", "image/webp", "video/mp4",
                                        "application/json", "text/plain", NULL};
    c->resp->content_type = "application/octet-stream";
    for (const char *const *t = types; *t; t++)
        if (!strcmp(type, *t))
            c->resp->content_type = *t;
}

/* Server-sent events: the job on every change, until it ends, with a comment
 * line every SSE_KEEPALIVE_S so proxies keep the stream open. The stream waits
 * suspended; the job's watcher and the keep-alive timer wake it. */
struct sse {
    struct job_watch w;    /* first: fire gets it */
    struct head *h;
    struct http_req *req;  /* held */
    uint64_t id;
    int64_t tenant_id;
    char tenant[REC_NAME_MAX];
    uint64_t version;
    bool sent_any;
    pthread_mutex_t lock;
    bool linked;           /* w is on the job's watch list */
    bool keepalive_due;
    bool closed;           /* the connection is done with the stream */
    atomic_int refs;       /* the stream's + the timer's */
};

static void sse_unref(struct sse *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    http_req_release(s->req);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static void sse_fire(struct job_watch *w, struct hjob *j)
{
    (void)j;
    struct sse *s = (struct sse *)w;
    pthread_mutex_lock(&s->lock);
    s->linked = false;
    pthread_mutex_unlock(&s->lock);
    http_stream_wake(s->req);
}

static void sse_keepalive(void *arg)
{
    struct sse *s = arg;
    pthread_mutex_lock(&s->lock);
    bool closed = s->closed;
    s->keepalive_due = true;
    pthread_mutex_unlock(&s->lock);
    if (!closed)
        http_stream_wake(s->req);
    sse_unref(s);
}

static void sse_arm_keepalive(struct sse *s)
{
    atomic_fetch_add(&s->refs, 1);
    timers_add(s->h->timers, clock_mono_ns() + SSE_KEEPALIVE_S * NS_PER_S, sse_keepalive, s);
}

static int sse_next(void *arg, struct http_req *req, struct buf *out)
{
    (void)req;
    struct sse *s = arg;
    if (atomic_load(&s->h->stopping))
        return HTTP_STREAM_END;
    pthread_mutex_lock(&s->lock);
    bool linked = s->linked, keepalive = s->keepalive_due;
    s->keepalive_due = false;
    if (!linked)
        s->linked = true; /* before head_watch links it: a fire may follow at once */
    pthread_mutex_unlock(&s->lock);
    if (linked) {
        if (!keepalive)
            return HTTP_STREAM_WAIT;
        buf_puts(out, ": keepalive\n\n");
        sse_arm_keepalive(s);
        return HTTP_STREAM_DATA;
    }
    struct job_rec j;
    uint64_t version;
    bool watching;
    int rc = head_watch(s->h, s->tenant_id, s->id, s->sent_any ? s->version : 0, &s->w,
                        &watching, &j, &version);
    if (!watching) {
        pthread_mutex_lock(&s->lock);
        s->linked = false;
        pthread_mutex_unlock(&s->lock);
    }
    if (rc)
        return HTTP_STREAM_END;
    bool changed = !s->sent_any || version != s->version;
    if (changed) {
        buf_puts(out, "event: state\ndata: ");
        json_render_job(out, &j, s->tenant);
        buf_puts(out, "\n\n");
        s->version = version;
        s->sent_any = true;
    } else if (keepalive) {
        buf_puts(out, ": keepalive\n\n");
    }
    if (keepalive)
        sse_arm_keepalive(s);
    bool ended = job_state_terminal(job_rec_state(&j));
    job_rec_free_fields(&j);
    if (ended)
        return HTTP_STREAM_END;
    return out->len ? HTTP_STREAM_DATA : HTTP_STREAM_WAIT;
}

static void sse_free(void *arg)
{
    struct sse *s = arg;
    pthread_mutex_lock(&s->lock);
    s->closed = true;
    bool linked = s->linked;
    pthread_mutex_unlock(&s->lock);
    if (linked)
        head_unwatch(s->h, s->id, &s->w);
    sse_unref(s);
}

static void get_events(struct ctx *c)
{
    uint64_t id = c->id;
    int64_t tenant;
    if (!job_scope(c, &tenant))
        return;
    struct job_rec j;
    int rc = head_get(c->h, tenant, id, NULL, &j);
    if (rc) {
        job_answer(c, rc, id, NULL);
        return;
    }
    struct sse *s = xcalloc(1, sizeof *s);
    s->h = c->h;
    s->req = c->req;
    http_req_hold(c->req);
    s->id = id;
    s->tenant_id = tenant;
    s->w.fire = sse_fire;
    pthread_mutex_init(&s->lock, NULL);
    atomic_init(&s->refs, 1);
    char name[REC_NAME_MAX];
    snprintf(s->tenant, sizeof s->tenant, "%s", tenant_name(c, j.tenant_id, name, sizeof name));
    job_rec_free_fields(&j);
    sse_arm_keepalive(s);
    c->resp->status = 200;
    c->resp->content_type = "text/event-stream";
    http_resp_header(c->resp, "Cache-Control", "no-cache");
    c->resp->stream.next = sse_next;
    c->resp->stream.free = sse_free;
    c->resp->stream.arg = s;
}

struct list_ctx {
    struct buf *out;
    int n;
    uint64_t last_id;
    const char *tenant;
};

static void list_row(void *arg, struct job_rec *j)
{
    struct list_ctx *l = arg;
    if (l->n++)
        buf_puts(l->out, ",");
    json_render_job(l->out, j, l->tenant);
    l->last_id = j->id;
    job_rec_free_fields(j);
}

static void list_jobs(struct ctx *c)
{
    struct store_list_filter f = {.state = -1, .limit = 50};
    struct tenant_rec t;
    if (c->who.kind == CALLER_TENANT) {
        t = c->who.tenant;
    } else if (c->who.kind == CALLER_ADMIN) {
        char nbuf[REC_NAME_MAX * 4];
        const char *name;
        if (!query_get(c, "tenant", nbuf, sizeof nbuf, &name))
            return;
        if (!name) {
            fail(c, 400, "missing_field", "tenant", "tenant: the admin must name a tenant");
            return;
        }
        if (!head_tenant_by_name(c->h, name, &t)) {
            fail(c, 404, "not_found", "tenant", "no tenant '%.64s'", name);
            return;
        }
    } else {
        fail(c, 403, "forbidden", NULL, "this key cannot list jobs");
        return;
    }
    f.tenant_id = t.id;
    long long limit = 50, after = 0;
    if (!query_int(c, "limit", 1, 500, &limit) ||
        !query_int(c, "after", 0, INT64_MAX, &after))
        return;
    f.limit = (int)limit;
    f.before_id = (uint64_t)after;
    char sbuf[32], cbuf[SCHED_NAME_MAX * 4];
    const char *state, *cap;
    if (!query_get(c, "state", sbuf, sizeof sbuf, &state) ||
        !query_get(c, "capability", cbuf, sizeof cbuf, &cap))
        return;
    if (state) {
        enum job_state s;
        if (job_state_parse(state, &s)) {
            fail(c, 400, "invalid_field", "state",
                 "state: one of queued, running, succeeded, failed, cancelled, dead, expired");
            return;
        }
        f.state = s;
    }
    if (cap && strlen(cap) >= SCHED_NAME_MAX) {
        fail(c, 400, "invalid_field", "capability", "capability: too long");
        return;
    }
    f.capability = cap;
    struct buf *out = &c->resp->body;
    buf_reset(out);
    buf_puts(out, "{\"jobs\":[");
    struct list_ctx l = {out, 0, 0, t.name};
    int rc = head_jobs_list(c->h, &f, list_row, &l);
    if (rc) {
        fail_store(c, rc);
        return;
    }
    if (l.n == f.limit)
        buf_printf(out, "],\"next\":\"%llu\"}", (unsigned long long)l.last_id);
    else
        buf_puts(out, "],\"next\":null}");
    reply_json(c, 200);
}

/* ---- admin routes ---- */

/* head_admin_done_fn: keep the answer (secret included, wiped at free), wake the connection. */
static void admin_done(void *arg, const struct admin_answer *a)
{
    struct later *l = arg;
    l->admin = *a;
    l->rc = a->rc;
    http_resume(l->req);
}

static void post_tenant_finish(void *arg, struct http_resp *resp)
{
    struct later *l = arg;
    struct ctx c;
    later_ctx(l, resp, &c);
    const struct tenant_rec *t = &l->admin.tenant;
    if (l->rc == GPUQ_EEXIST) {
        fail(&c, 409, "conflict", "name", "name: tenant '%s' exists", t->name);
    } else if (l->rc) {
        fail_store(&c, l->rc);
    } else {
        struct buf *out = &resp->body;
        buf_puts(out, "{\"name\":");
        json_put_string(out, t->name);
        buf_printf(out, ",\"tier\":\"%s\",\"key\":\"%s\",\"created_ms\":%lld}",
                   job_tier_name(t->tier), l->admin.secret, (long long)t->created_ms);
        reply_json(&c, 201);
    }
    later_free(l);
}

/* The answer waits, suspended, until the tenant is durable (no thread waits on the fsync). */
static void post_tenant(struct ctx *c)
{
    size_t len;
    const char *body = http_body(c->req, &len);
    char name[REC_NAME_MAX];
    enum job_tier tier;
    struct api_error err;
    if (json_parse_tenant(body, len, name, sizeof name, &tier, &err)) {
        fail_api(c, &err);
        return;
    }
    struct later *l = later_new(c);
    http_defer(c->req, post_tenant_finish, l);
    head_tenant_add(c->h, name, tier, admin_done, l);
}

static void list_tenants(struct ctx *c)
{
    struct tenant_rec *v;
    int n = head_tenants_list(c->h, &v);
    struct buf *out = &c->resp->body;
    buf_puts(out, "{\"tenants\":[");
    for (int i = 0; i < n; i++) {
        buf_puts(out, i ? ",{\"name\":" : "{\"name\":");
        json_put_string(out, v[i].name);
        buf_printf(out, ",\"tier\":\"%s\",\"created_ms\":%lld}", job_tier_name(v[i].tier),
                   (long long)v[i].created_ms);
    }
    buf_puts(out, "]}");
    free(v);
    reply_json(c, 200);
}

static void post_worker_token_finish(void *arg, struct http_resp *resp)
{
    struct later *l = arg;
    struct ctx c;
    later_ctx(l, resp, &c);
    if (l->rc) {
        fail_store(&c, l->rc);
    } else {
        struct buf *out = &resp->body;
        buf_printf(out, "{\"id\":%lld,\"name\":", (long long)l->admin.token.id);
        json_put_string(out, l->admin.token.name);
        buf_printf(out, ",\"token\":\"%s\"}", l->admin.secret);
        reply_json(&c, 201);
    }
    later_free(l);
}

static void post_worker_token(struct ctx *c)
{
    size_t len;
    const char *body = http_body(c->req, &len);
    char name[REC_NAME_MAX];
    struct api_error err;
    if (json_parse_token(body, len, name, sizeof name, &err)) {
        fail_api(c, &err);
        return;
    }
    struct later *l = later_new(c);
    http_defer(c->req, post_worker_token_finish, l);
    head_worker_token_add(c->h, name, admin_done, l);
}

static void list_workers(struct ctx *c)
{
    struct worker_rec *v;
    int n = head_workers_list(c->h, &v);
    int64_t now = clock_mono_ns();
    struct buf *out = &c->resp->body;
    buf_puts(out, "{\"workers\":[");
    for (int i = 0; i < n; i++) {
        if (i)
            buf_puts(out, ",");
        json_render_worker(out, &v[i], now);
    }
    buf_puts(out, "]}");
    free(v);
    reply_json(c, 200);
}

/* POST /v1/workers/{id}/drain and /undrain. */
static void set_drain(struct ctx *c, bool drain)
{
    const char *id = c->param;
    if (drain ? head_worker_drain(c->h, id) : head_worker_undrain(c->h, id)) {
        fail(c, 404, "not_found", "id", "no worker '%.64s'", id);
        return;
    }
    buf_printf(&c->resp->body, "{\"worker_id\":");
    json_put_string(&c->resp->body, id);
    buf_printf(&c->resp->body, ",\"drain_requested\":%s}", drain ? "true" : "false");
    reply_json(c, 200);
}

static void drain_worker(struct ctx *c)
{
    set_drain(c, true);
}

static void undrain_worker(struct ctx *c)
{
    set_drain(c, false);
}

/* The answer to a tenant's removal, key revocation or rotation, once durable. */
static void tenant_change_finish(void *arg, struct http_resp *resp)
{
    struct later *l = arg;
    struct ctx c;
    later_ctx(l, resp, &c);
    const struct admin_answer *a = &l->admin;
    struct buf *out = &resp->body;
    if (l->rc == GPUQ_ENOENT) {
        fail(&c, 404, "not_found", "name", "no tenant '%.64s'", a->name);
    } else if (l->rc) {
        fail_store(&c, l->rc);
    } else {
        buf_puts(out, "{\"name\":");
        json_put_string(out, a->name);
        if (a->secret[0])
            buf_printf(out, ",\"tier\":\"%s\",\"key\":\"%s\"}", job_tier_name(a->tenant.tier),
                       a->secret);
        else if (l->flag)
            buf_puts(out, ",\"removed\":true}");
        else
            buf_puts(out, ",\"key_revoked\":true}");
        reply_json(&c, 200);
    }
    later_free(l);
}

static void tenant_change(struct ctx *c, enum head_tenant_change change)
{
    struct later *l = later_new(c);
    l->flag = change == HEAD_TENANT_REMOVE;
    http_defer(c->req, tenant_change_finish, l);
    head_tenant_change(c->h, c->param, change, admin_done, l);
}

static void delete_tenant(struct ctx *c)
{
    tenant_change(c, HEAD_TENANT_REMOVE);
}

static void revoke_key(struct ctx *c)
{
    tenant_change(c, HEAD_KEY_REVOKE);
}

static void rotate_key(struct ctx *c)
{
    tenant_change(c, HEAD_KEY_ROTATE);
}

/* {"capabilities":[…],"lanes":[…]}: what is paused now. */
static void render_pauses(struct ctx *c)
{
    enum { MAX_PAUSED = 256 };
    char(*caps)[SCHED_NAME_MAX] = xcalloc(MAX_PAUSED, SCHED_NAME_MAX);
    unsigned lanes = 0;
    struct buf *out = &c->resp->body;
    int n = head_pauses(c->h, caps, MAX_PAUSED, &lanes);
    buf_puts(out, "{\"capabilities\":[");
    for (int i = 0; i < n; i++) {
        if (i)
            buf_puts(out, ",");
        json_put_string(out, caps[i]);
    }
    free(caps);
    buf_printf(out, "],\"lanes\":[%s%s%s]}", lanes & 1 ? "\"interactive\"" : "",
               lanes == 3 ? "," : "", lanes & 2 ? "\"batch\"" : "");
    reply_json(c, 200);
}

static void pause_change(struct ctx *c, bool is_cap, bool paused)
{
    int lane = -1;
    if (!is_cap) {
        if (!strcmp(c->param, "interactive"))
            lane = 0;
        else if (!strcmp(c->param, "batch"))
            lane = 1;
        else {
            fail(c, 404, "not_found", "lane", "lane: 'interactive' or 'batch', not '%.64s'",
                 c->param);
            return;
        }
    } else if (!*c->param || strlen(c->param) >= SCHED_NAME_MAX) {
        fail(c, 400, "invalid_field", "capability", "capability: 1..%d bytes",
             SCHED_NAME_MAX - 1);
        return;
    }
    int rc = head_pause(c->h, is_cap ? c->param : NULL, lane, paused);
    if (rc) {
        fail(c, 500, "internal", NULL, "%s", gpuq_strerror(rc));
        return;
    }
    render_pauses(c);
}

static void pause_capability(struct ctx *c)
{
    pause_change(c, true, true);
}

static void resume_capability(struct ctx *c)
{
    pause_change(c, true, false);
}

static void pause_lane(struct ctx *c)
{
    pause_change(c, false, true);
}

static void resume_lane(struct ctx *c)
{
    pause_change(c, false, false);
}

static void list_pauses(struct ctx *c)
{
    render_pauses(c);
}

static void promote_job(struct ctx *c)
{
    struct job_rec j;
    int rc = head_job_promote(c->h, c->id, &j);
    if (rc == GPUQ_EINVAL) {
        fail(c, 409, "conflict", "id", "job %llu is not queued; only queued jobs move",
             (unsigned long long)c->id);
        return;
    }
    if (rc == GPUQ_ENOENT) {
        not_found_job(c, c->id);
        return;
    }
    if (rc) {
        fail_store(c, rc);
        return;
    }
    render_job(c, 200, &j);
    job_rec_free_fields(&j);
}

/* ---- agent routes ---- */

static void agent_register(struct ctx *c)
{
    size_t len;
    const char *body = http_body(c->req, &len);
    struct worker_rec *w = xcalloc(1, sizeof *w);
    struct api_error err;
    if (json_parse_register(body, len, w, &err)) {
        fail_api(c, &err);
        free(w);
        return;
    }
    head_worker_register(c->h, w);
    buf_puts(&c->resp->body, "{\"worker_id\":");
    json_put_string(&c->resp->body, w->id);
    /* poll_workers: an early assignment poll may name this many workers
     * (?with=), so an agent asks for several GPUs in one request. */
    buf_printf(&c->resp->body, ",\"heartbeat_ms\":%d,\"ttl_ms\":%d,\"poll_workers\":%d",
               c->h->cfg.heartbeat_ms, c->h->cfg.ttl_ms, DISPATCH_POLL_WORKERS);
    /* With preemption on, a preempted attempt's stop reaches its worker on
     * the next heartbeat: while a worker holds work, the agent beats at the
     * preemption bound (at least 20 ms, at most heartbeat_ms) so the GPU is
     * handed to the interactive job about that soon, not heartbeat_ms later.
     * The floor bounds the beat's cost; it was 50 ms, twice the bound of a
     * fleet scaled to a tenth (bench/admission-live), whose slowest
     * interactive jobs then waited 45-70 ms for a 25 ms bound. */
    double pre = c->h->cfg.sched.preempt_after_s;
    if (pre > 0) {
        long long ms = (long long)(pre * 1000);
        if (ms < 20)
            ms = 20;
        if (ms > c->h->cfg.heartbeat_ms)
            ms = c->h->cfg.heartbeat_ms;
        buf_printf(&c->resp->body, ",\"busy_heartbeat_ms\":%lld", ms);
    }
    buf_puts(&c->resp->body, "}");
    free(w);
    reply_json(c, 200);
}

static void agent_heartbeat(struct ctx *c)
{
    size_t len;
    const char *body = http_body(c->req, &len);
    struct worker_rec *w = xcalloc(1, sizeof *w);
    struct api_error err;
    if (json_parse_heartbeat(body, len, w, &err)) {
        fail_api(c, &err);
        free(w);
        return;
    }
    bool drain = false;
    struct reg_attempt cancels[REG_MAX_CANCELS];
    int ncancels = 0;
    if (head_worker_heartbeat(c->h, w, &drain, cancels, &ncancels)) {
        fail(c, 404, "not_found", "worker_id", "worker '%s' is not registered; register again",
             w->id);
        free(w);
        return;
    }
    free(w);
    struct buf *out = &c->resp->body;
    buf_printf(out, "{\"drain\":%s,\"cancel\":[", drain ? "true" : "false");
    for (int i = 0; i < ncancels; i++)
        buf_printf(out, "%s{\"job_id\":\"%llu\",\"attempt\":%d}", i ? "," : "",
                   (unsigned long long)cancels[i].job_id, cancels[i].attempt);
    buf_puts(out, "]}");
    reply_json(c, 200);
}

/* The dispatcher's answer to an agent's long-poll: rendered at once (rec is
 * only lent), sent from the event loop. */
static void poll_answer(void *arg, int rc, const struct job_rec *recs, int n)
{
    struct later *l = arg;
    l->rc = rc;
    if (!rc) {
        buf_puts(&l->body, "{");
        if (l->flag) /* early: the agent echoes it on the attempt's outcomes */
            buf_printf(&l->body, "\"epoch\":\"%s\",", l->h->epoch);
        buf_puts(&l->body, "\"assignments\":[");
        for (int i = 0; i < n; i++) {
            if (i)
                buf_puts(&l->body, ",");
            json_render_assignment(&l->body, &recs[i]);
        }
        buf_puts(&l->body, "]}");
    }
    http_resume(l->req);
}

static void poll_finish(void *arg, struct http_resp *resp)
{
    struct later *l = arg;
    if (l->rc == GPUQ_ENOENT) {
        struct ctx c;
        later_ctx(l, resp, &c);
        fail(&c, 404, "not_found", l->field, "%s: worker '%.64s' is not registered", l->field,
             l->worker);
    } else if (l->rc) {
        resp->status = 204;
    } else {
        struct buf t = resp->body;
        resp->body = l->body;
        l->body = t;
        resp->status = 200;
        resp->content_type = "application/json";
    }
    later_free(l);
}

/* An early poll's ?with=ID:N,ID:N...: more workers it asks for (an agent's
 * group poll), each with the most assignments it may take, after ws[0].
 * Adds them to ws (*nws); false (reply sent) when malformed. */
static bool query_with(struct ctx *c, struct dispatch_poll_worker *ws, int *nws)
{
    char buf[DISPATCH_POLL_WORKERS * (SCHED_NAME_MAX + 4)];
    const char *v;
    if (!query_get(c, "with", buf, sizeof buf, &v))
        return false;
    for (const char *p = v; p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        size_t idlen = colon ? (size_t)(colon - p) : 0;
        const char *n = colon ? colon + 1 : p + len;
        long max = 0;
        for (const char *d = n; d < p + len && max <= DISPATCH_POLL_MAX; d++)
            max = isdigit((unsigned char)*d) ? max * 10 + (*d - '0') : DISPATCH_POLL_MAX + 1;
        if (*nws == DISPATCH_POLL_WORKERS) {
            fail(c, 400, "invalid_field", "with", "with: at most %d workers in one poll",
                 DISPATCH_POLL_WORKERS);
            return false;
        }
        /* A worker id as registration takes it (json_is_name); one too long
         * for w->id is left empty, which json_is_name refuses. */
        struct dispatch_poll_worker *w = &ws[*nws];
        snprintf(w->id, sizeof w->id, "%.*s", (int)(idlen < sizeof w->id ? idlen : 0), p);
        if (!json_is_name(w->id, SCHED_NAME_MAX - 1, true) || max < 1 ||
            max > DISPATCH_POLL_MAX) {
            fail(c, 400, "invalid_field", "with",
                 "with: a comma-separated list of WORKER_ID:N, N in 1..%d", DISPATCH_POLL_MAX);
            return false;
        }
        w->max = (int)max;
        for (int i = 0; i < *nws; i++)
            if (!strcmp(ws[i].id, w->id)) {
                fail(c, 400, "invalid_field", "with", "with: worker '%s' is named twice", w->id);
                return false;
            }
        (*nws)++;
        p = end ? end + 1 : NULL;
    }
    return true;
}

static void agent_assignments(struct ctx *c)
{
    char wbuf[SCHED_NAME_MAX * 4];
    const char *worker;
    long long wait = 30;
    if (!query_get(c, "worker_id", wbuf, sizeof wbuf, &worker))
        return;
    if (!worker || !*worker || strlen(worker) >= SCHED_NAME_MAX) {
        fail(c, 400, "missing_field", "worker_id", "worker_id: required");
        return;
    }
    long long early = 0, max = 1;
    if (!query_int(c, "wait", 0, 60, &wait) || !query_int(c, "early", 0, 1, &early) ||
        !query_int(c, "max", 1, DISPATCH_POLL_MAX, &max))
        return;
    struct dispatch_poll_worker ws[DISPATCH_POLL_WORKERS];
    int nws = 1;
    snprintf(ws[0].id, sizeof ws[0].id, "%s", worker);
    ws[0].max = (int)max;
    if (!query_with(c, ws, &nws))
        return;
    if (nws > 1 && !early) {
        fail(c, 400, "invalid_field", "with", "with: only with early=1");
        return;
    }
    /* early=1 only from an agent that echoes the epoch: without an epoch no
     * boot can be told from another. */
    early = early && c->h->epoch[0];
    struct later *l = later_new(c);
    l->flag = early;
    http_defer(c->req, poll_finish, l);
    int unknown = 0;
    int rc = head_worker_poll(c->h, ws, nws, clock_mono_ns() + wait * NS_PER_S, early, &unknown,
                              poll_answer, l);
    if (rc) { /* not registered: answer was not called */
        snprintf(l->worker, sizeof l->worker, "%s", ws[unknown].id);
        l->field = unknown ? "with" : "worker_id";
        l->rc = rc;
        http_resume(c->req);
    }
}

static void fenced_error(struct ctx *c, int rc, uint64_t id)
{
    if (rc == GPUQ_ESTALE_EPOCH)
        fail(c, 409, "stale_attempt", "epoch",
             "epoch: job %llu was assigned by an earlier run of the head; it runs again",
             (unsigned long long)id);
    else if (rc == GPUQ_ESTALE)
        fail(c, 409, "stale_attempt", "attempt",
             "attempt: not the current attempt of job %llu on this worker",
             (unsigned long long)id);
    else if (rc == GPUQ_ENOENT)
        fail(c, 404, "not_found", "id", "no job %llu", (unsigned long long)id);
    else
        fail_store(c, rc);
}

/* The optional ?epoch= of an agent's report into *epoch (0: none given):
 * false (reply sent) when it is malformed. Whether it names the attempt's
 * boot is the core's fence (lc_fence_epoch, through the head). */
static bool query_epoch(struct ctx *c, uint64_t *epoch)
{
    char buf[32];
    const char *s;
    *epoch = 0;
    if (!query_get(c, "epoch", buf, sizeof buf, &s))
        return false;
    if (s && lc_epoch_parse(s, epoch)) {
        fail(c, 400, "invalid_field", "epoch", "epoch: 1 to 16 hex digits, as the head sent it");
        return false;
    }
    return true;
}

static void agent_progress(struct ctx *c)
{
    uint64_t id = c->id;
    size_t len;
    const char *body = http_body(c->req, &len);
    struct agent_msg m;
    struct api_error err;
    if (json_parse_progress(body, len, &m, &err)) {
        fail_api(c, &err);
        return;
    }
    uint64_t epoch;
    if (!query_epoch(c, &epoch))
        return;
    int rc = head_progress(c->h, id, m.worker_id, m.attempt, epoch, m.phase, m.progress);
    if (rc) {
        fenced_error(c, rc, id);
        return;
    }
    buf_puts(&c->resp->body, "{\"ok\":true}");
    reply_json(c, 200);
}

/* The answer to a fenced agent call once the head is done: 200 with the
 * operation's flag under its name, or the fenced error. */
static void fenced_finish(struct later *l, struct http_resp *resp, const char *flag_name)
{
    struct ctx c;
    later_ctx(l, resp, &c);
    if (l->rc) {
        fenced_error(&c, l->rc, l->id);
    } else {
        buf_printf(&resp->body, "{\"ok\":true,\"%s\":%s}", flag_name,
                   l->flag ? "true" : "false");
        reply_json(&c, 200);
    }
    later_free(l);
}

static void complete_finish(void *arg, struct http_resp *resp)
{
    fenced_finish(arg, resp, "duplicate");
}

static void agent_complete(struct ctx *c)
{
    uint64_t id = c->id;
    char wbuf[SCHED_NAME_MAX * 4];
    const char *worker;
    long long attempt = 0, load_ms = 0, run_ms = 0;
    if (!query_get(c, "worker_id", wbuf, sizeof wbuf, &worker))
        return;
    if (!worker || !*worker || strlen(worker) >= SCHED_NAME_MAX) {
        fail(c, 400, "missing_field", "worker_id", "worker_id: required");
        return;
    }
    if (!query_int(c, "attempt", 1, 1000000, &attempt) ||
        !query_int(c, "load_ms", 0, 86400000, &load_ms) ||
        !query_int(c, "run_ms", 0, 86400000, &run_ms))
        return;
    if (attempt == 0) {
        fail(c, 400, "missing_field", "attempt", "attempt: required");
        return;
    }
    uint64_t epoch;
    if (!query_epoch(c, &epoch))
        return;
    const char *type = http_header(c->req, "Content-Type");
    if (!type || !*type || strlen(type) >= REC_NAME_MAX) {
        fail(c, 400, "invalid_field", "Content-Type", "Content-Type: the output's media type");
        return;
    }
    size_t len;
    const char *body = http_body(c->req, &len);
    struct later *l = later_new(c);
    l->id = id;
    http_defer(c->req, complete_finish, l);
    /* The body stays valid while the connection waits for the commit. */
    head_complete(c->h, id, worker, (int)attempt, epoch, type, body, len, load_ms, run_ms,
                  later_done, l);
}

static void fail_finish(void *arg, struct http_resp *resp)
{
    fenced_finish(arg, resp, "retried");
}

static void agent_fail(struct ctx *c)
{
    uint64_t id = c->id;
    size_t len;
    const char *body = http_body(c->req, &len);
    struct agent_msg m;
    struct api_error err;
    if (json_parse_fail(body, len, &m, &err)) {
        fail_api(c, &err);
        return;
    }
    uint64_t epoch;
    if (!query_epoch(c, &epoch))
        return;
    struct later *l = later_new(c);
    l->id = id;
    http_defer(c->req, fail_finish, l);
    head_fail(c->h, id, m.worker_id, m.attempt, epoch, m.cls, m.message, later_done, l);
}

static void agent_deregister(struct ctx *c)
{
    size_t len;
    const char *body = http_body(c->req, &len);
    struct agent_msg m;
    struct api_error err;
    if (json_parse_deregister(body, len, &m, &err)) {
        fail_api(c, &err);
        return;
    }
    if (head_worker_deregister(c->h, m.worker_id)) {
        fail(c, 404, "not_found", "worker_id", "worker '%s' is not registered", m.worker_id);
        return;
    }
    buf_puts(&c->resp->body, "{\"ok\":true}");
    reply_json(c, 200);
}

/* ---- inputs (uploads jobs name in params.inputs) ---- */

static void render_input(struct buf *out, const struct input_rec *r)
{
    buf_printf(out, "{\"id\":\"%s\",\"bytes\":%lld,\"content_type\":", r->id,
               (long long)r->bytes);
    json_put_string(out, r->content_type);
    buf_printf(out, ",\"sha256\":\"%s\",\"created_ms\":%lld}", r->sha256,
               (long long)r->created_ms);
}

/* inputs_done_fn: the answer rendered at once (r is only lent). */
static void upload_stored(void *arg, int rc, const struct input_rec *r)
{
    struct later *l = arg;
    l->rc = rc;
    if (!rc)
        render_input(&l->body, r);
    http_resume(l->req);
}

static void upload_finish(void *arg, struct http_resp *resp)
{
    struct later *l = arg;
    struct ctx c;
    later_ctx(l, resp, &c);
    if (l->rc) {
        fail_store(&c, l->rc);
    } else {
        buf_append(&resp->body, l->body.data, l->body.len);
        reply_json(&c, 201);
    }
    later_free(l);
}

/* A media type as sent: a token "type/subtype", parameters allowed, printable ASCII. */
static bool media_type_ok(const char *t)
{
    if (!t || !*t || strlen(t) >= REC_NAME_MAX || !strchr(t, '/'))
        return false;
    for (const char *p = t; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            return false;
    return true;
}

/* POST /v1/inputs: the body is the file; 201 once it is durable. */
static void post_input(struct ctx *c)
{
    const char *type = http_header(c->req, "Content-Type");
    if (!type || !*type)
        type = "application/octet-stream";
    if (!media_type_ok(type)) {
        fail(c, 400, "invalid_field", "Content-Type",
             "Content-Type: a media type (type/subtype) of under %d printable bytes",
             REC_NAME_MAX);
        return;
    }
    size_t len;
    const char *body = http_body(c->req, &len);
    if (len == 0) {
        fail(c, 400, "missing_field", "body", "body: the file to upload (it is empty)");
        return;
    }
    struct later *l = later_new(c);
    http_defer(c->req, upload_finish, l);
    /* The body stays valid while the connection waits for the commit. */
    inputs_upload(c->h, c->who.tenant.id, type, body, len, upload_stored, l);
}

/* GET /v1/inputs/{name}: an upload's record, for its tenant only. */
static void get_input(struct ctx *c)
{
    struct input_rec r;
    int rc = json_input_id(c->param) ? inputs_read(c->h, c->param, &r, NULL, NULL)
                                     : GPUQ_ENOENT;
    if (!rc && r.tenant_id != c->who.tenant.id)
        rc = GPUQ_ENOENT;
    if (rc == GPUQ_ENOENT) {
        fail(c, 404, "not_found", "id", "no upload %.40s", c->param);
        return;
    }
    if (rc) {
        fail_store(c, rc);
        return;
    }
    render_input(&c->resp->body, &r);
    reply_json(c, 200);
}

/* GET /v1/agent/inputs/{name}: an upload's bytes, for the agent running a job naming it. */
static void agent_input(struct ctx *c)
{
    struct input_rec r;
    void *data = NULL;
    size_t len = 0;
    int rc = json_input_id(c->param) ? inputs_read(c->h, c->param, &r, &data, &len)
                                     : GPUQ_ENOENT;
    if (rc == GPUQ_ENOENT) {
        fail(c, 404, "not_found", "id", "no upload %.40s", c->param);
        return;
    }
    if (rc) {
        fail_store(c, rc);
        return;
    }
    buf_reset(&c->resp->body);
    buf_append(&c->resp->body, data, len);
    free(data);
    c->resp->status = 200;
    c->resp->content_type = "application/octet-stream";
    http_resp_header(c->resp, "X-Input-Sha256", "%s", r.sha256);
}

/* ---- the fleet and the dashboard (api/fleet_api.c) ---- */

static void get_fleet(struct ctx *c)
{
    fleet_api_get(c->h, c->who.kind == CALLER_TENANT ? c->who.tenant.id : -1, c->resp);
}

static void get_fleet_events(struct ctx *c)
{
    fleet_api_events(c->h, c->who.kind == CALLER_TENANT ? c->who.tenant.id : -1, c->req,
                     c->resp);
}

static void get_web(struct ctx *c)
{
    if (fleet_api_asset(c->param ? c->param : "", c->resp))
        fail(c, 404, "not_found", "path", "no such file");
}

/* ---- health ---- */

static void get_healthz(struct ctx *c)
{
    buf_puts(&c->resp->body, "{\"ok\":true}");
    reply_json(c, 200);
}

static void get_readyz(struct ctx *c)
{
    char why[200];
    if (head_readiness(c->h, why, sizeof why)) {
        buf_puts(&c->resp->body, "{\"ready\":true}");
        reply_json(c, 200);
    } else {
        fail(c, 503, "unavailable", NULL, "%s", why);
    }
}

/* ---- observing: /metrics (docs/metrics.md), a job's trace ---- */

static const char *bearer(struct http_req *req);

static void get_metrics(struct ctx *c)
{
    if (!head_metrics(c->h, bearer(c->req), &c->resp->body)) {
        fail(c, 401, "unauthorized", "Authorization",
             "Authorization: /metrics needs 'Bearer <the [metrics] token>'");
        return;
    }
    c->resp->status = 200;
    c->resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

static void get_trace(struct ctx *c)
{
    int64_t tenant;
    if (!job_scope(c, &tenant))
        return;
    int rc = head_job_trace(c->h, tenant, c->id, &c->resp->body);
    if (rc) {
        job_answer(c, rc, c->id, NULL);
        return;
    }
    reply_json(c, 200);
}

/* ---- the route table ---- */

/* Who may call a route: a set of caller kinds. */
#define ANYONE (1u << CALLER_NONE | 1u << CALLER_TENANT | 1u << CALLER_ADMIN | 1u << CALLER_WORKER)
#define TENANT (1u << CALLER_TENANT)
#define ADMIN (1u << CALLER_ADMIN)
#define WORKER (1u << CALLER_WORKER)

/* The body a route reads: none (a stray small one is tolerated and ignored),
 * a JSON document (max_body_bytes), a job's output (max_result_bytes), an
 * uploaded input (max_input_bytes), or a batch of jobs (max_batch_body_bytes). */
enum body_kind { BODY_NONE, BODY_JSON, BODY_RESULT, BODY_INPUT, BODY_BATCH };
#define BODY_NONE_LIMIT 1024

/* A route. Invariant: (method, path) pairs are unique; a path segment "{id}"
 * matches a job id (parsed into ctx.id, 400 when malformed), "{name}" any
 * one segment (ctx.param); denied is the 403 message for a caller of another kind. */
struct route {
    const char *method;
    const char *path;
    void (*handler)(struct ctx *c);
    unsigned callers;
    enum body_kind body;
    const char *denied;
};

/* Handlers in other files (routes_ext.h), called with the admitted request. */
#define EXT_ROUTE(name)                                                                        \
    static void name(struct ctx *c)                                                            \
    {                                                                                          \
        route_##name(&(struct route_call){c->h, &c->who, c->req, c->resp, c->id});             \
    }
EXT_ROUTE(batch_post)
EXT_ROUTE(batch_get)
EXT_ROUTE(batch_delete)
EXT_ROUTE(batch_list)
EXT_ROUTE(backlog_get)
EXT_ROUTE(capacity_get)
EXT_ROUTE(scale_get)
EXT_ROUTE(worker_tokens_list)
EXT_ROUTE(worker_token_revoke)
EXT_ROUTE(agent_outcomes)

static const struct route routes[] = {
    {"GET", "/healthz", get_healthz, ANYONE, BODY_NONE, NULL},
    {"GET", "/readyz", get_readyz, ANYONE, BODY_NONE, NULL},
    /* the dashboard (its files need no key; the page asks for one) */
    {"GET", "", get_web, ANYONE, BODY_NONE, NULL},
    {"GET", "/ui/{name}", get_web, ANYONE, BODY_NONE, NULL},
    {"GET", "/v1/fleet", get_fleet, TENANT | ADMIN, BODY_NONE, "this key cannot see the fleet"},
    {"GET", "/v1/fleet/events", get_fleet_events, TENANT | ADMIN, BODY_NONE,
     "this key cannot see the fleet"},
    {"GET", "/metrics", get_metrics, ANYONE, BODY_NONE, NULL},
    /* client */
    {"POST", "/v1/jobs", post_job, TENANT, BODY_JSON, "jobs are submitted with a tenant's key"},
    {"GET", "/v1/jobs", list_jobs, TENANT | ADMIN, BODY_NONE, "this key cannot list jobs"},
    {"GET", "/v1/jobs/{id}", get_job, TENANT | ADMIN, BODY_NONE,
     "this key cannot use the jobs API"},
    {"DELETE", "/v1/jobs/{id}", delete_job, TENANT | ADMIN, BODY_NONE,
     "this key cannot use the jobs API"},
    {"GET", "/v1/jobs/{id}/events", get_events, TENANT | ADMIN, BODY_NONE,
     "this key cannot use the jobs API"},
    {"GET", "/v1/jobs/{id}/result", get_result, TENANT | ADMIN, BODY_NONE,
     "this key cannot use the jobs API"},
    {"GET", "/v1/jobs/{id}/trace", get_trace, TENANT | ADMIN, BODY_NONE,
     "this key cannot use the jobs API"},
    {"POST", "/v1/jobs/{id}/resubmit", resubmit_job, ADMIN, BODY_NONE,
     "re-submitting a job needs the admin key"},
    {"POST", "/v1/inputs", post_input, TENANT, BODY_INPUT,
     "inputs are uploaded with a tenant's key"},
    {"GET", "/v1/inputs/{name}", get_input, TENANT, BODY_NONE, "uploads are read by their tenant"},
    {"POST", "/v1/batches", batch_post, TENANT, BODY_BATCH,
     "batches are submitted with a tenant's key"},
    {"GET", "/v1/batches", batch_list, TENANT | ADMIN, BODY_NONE, "this key cannot list batches"},
    {"GET", "/v1/batches/{id}", batch_get, TENANT | ADMIN, BODY_NONE,
     "this key cannot use the batches API"},
    {"DELETE", "/v1/batches/{id}", batch_delete, TENANT | ADMIN, BODY_NONE,
     "this key cannot use the batches API"},
    {"GET", "/v1/backlog", backlog_get, TENANT | ADMIN, BODY_NONE,
     "this key cannot read the backlog"},
    /* admin */
    {"GET", "/v1/capacity", capacity_get, ADMIN, BODY_NONE,
     "the capacity budget needs the admin key"},
    {"GET", "/v1/scale", scale_get, ADMIN, BODY_NONE, "the autoscaling advisor needs the admin key"},
    {"POST", "/v1/tenants", post_tenant, ADMIN, BODY_JSON, "this call needs the admin key"},
    {"GET", "/v1/tenants", list_tenants, ADMIN, BODY_NONE, "this call needs the admin key"},
    {"POST", "/v1/worker-tokens", post_worker_token, ADMIN, BODY_JSON,
     "this call needs the admin key"},
    {"GET", "/v1/worker-tokens", worker_tokens_list, ADMIN, BODY_NONE,
     "this call needs the admin key"},
    {"DELETE", "/v1/worker-tokens/{id}", worker_token_revoke, ADMIN, BODY_NONE,
     "this call needs the admin key"},
    {"GET", "/v1/workers", list_workers, TENANT | ADMIN, BODY_NONE,
     "this key cannot list workers"},
    {"POST", "/v1/workers/{name}/drain", drain_worker, ADMIN, BODY_NONE,
     "this call needs the admin key"},
    {"POST", "/v1/workers/{name}/undrain", undrain_worker, ADMIN, BODY_NONE,
     "this call needs the admin key"},
    {"DELETE", "/v1/tenants/{name}", delete_tenant, ADMIN, BODY_NONE,
     "this call needs the admin key"},
    {"POST", "/v1/tenants/{name}/key", rotate_key, ADMIN, BODY_NONE,
     "this call needs the admin key"},
    {"DELETE", "/v1/tenants/{name}/key", revoke_key, ADMIN, BODY_NONE,
     "this call needs the admin key"},
    {"GET", "/v1/pauses", list_pauses, ADMIN, BODY_NONE, "this call needs the admin key"},
    {"POST", "/v1/capabilities/{name}/pause", pause_capability, ADMIN, BODY_NONE,
     "this call needs the admin key"},
    {"POST", "/v1/capabilities/{name}/resume", resume_capability, ADMIN, BODY_NONE,
     "this call needs the admin key"},
    {"POST", "/v1/lanes/{name}/pause", pause_lane, ADMIN, BODY_NONE,
     "this call needs the admin key"},
    {"POST", "/v1/lanes/{name}/resume", resume_lane, ADMIN, BODY_NONE,
     "this call needs the admin key"},
    {"POST", "/v1/jobs/{id}/promote", promote_job, ADMIN, BODY_NONE,
     "this call needs the admin key"},
    /* agents (docs/protocol-worker.md) */
    {"POST", "/v1/agent/register", agent_register, WORKER, BODY_JSON,
     "agent calls need a worker token"},
    {"POST", "/v1/agent/heartbeat", agent_heartbeat, WORKER, BODY_JSON,
     "agent calls need a worker token"},
    {"GET", "/v1/agent/assignments", agent_assignments, WORKER, BODY_NONE,
     "agent calls need a worker token"},
    {"POST", "/v1/agent/deregister", agent_deregister, WORKER, BODY_JSON,
     "agent calls need a worker token"},
    {"POST", "/v1/agent/jobs/{id}/progress", agent_progress, WORKER, BODY_JSON,
     "agent calls need a worker token"},
    {"POST", "/v1/agent/jobs/{id}/complete", agent_complete, WORKER, BODY_RESULT,
     "agent calls need a worker token"},
    {"POST", "/v1/agent/jobs/{id}/fail", agent_fail, WORKER, BODY_JSON,
     "agent calls need a worker token"},
    {"POST", "/v1/agent/outcomes", agent_outcomes, WORKER, BODY_RESULT,
     "agent calls need a worker token"},
    {"GET", "/v1/agent/inputs/{name}", agent_input, WORKER, BODY_NONE,
     "agent calls need a worker token"},
};
#define NROUTES (sizeof routes / sizeof routes[0])

/* True when the route's path pattern matches the request's segments. */
static bool path_matches(const struct route *r, const struct ctx *c)
{
    const char *p = r->path;
    for (int i = 0; i < c->nparts; i++) {
        if (*p != '/')
            return false;
        p++;
        size_t n = strcspn(p, "/");
        if (!(p[0] == '{' && p[n - 1] == '}') &&
            (c->bad[i] || strncmp(p, c->parts[i], n) != 0 || c->parts[i][n] != '\0'))
            return false;
        p += n;
    }
    return *p == '\0';
}

/* Fills ctx.id / ctx.param from the matched route's placeholders; false (400 sent) if bad. */
static bool bind_params(struct ctx *c)
{
    const char *p = c->route->path;
    for (int i = 0; i < c->nparts; i++) {
        p++;
        size_t n = strcspn(p, "/");
        if (c->bad[i]) { /* both placeholders name a job's or a worker's id */
            fail(c, 400, "invalid_field", "id", "id: the path segment %s", c->bad[i]);
            return false;
        }
        if (!strncmp(p, "{id}", n) && n == 4) {
            if (!parse_id(c, c->parts[i], &c->id))
                return false;
        } else if (!strncmp(p, "{name}", n) && n == 6) {
            c->param = c->parts[i];
        }
        p += n;
    }
    return true;
}

/* Splits the raw (still %-escaped) path on '/' and decodes each segment. */
static bool split_path(struct ctx *c, const char *url)
{
    if (strlen(url) >= sizeof c->pathbuf)
        return false;
    snprintf(c->pathbuf, sizeof c->pathbuf, "%s", url);
    char *save = NULL;
    size_t used = 0;
    for (char *p = strtok_r(c->pathbuf, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
        if (c->nparts == MAX_PATH_PARTS)
            return false;
        char *dec = c->decbuf + used;
        const char *why = NULL;
        size_t n = strlen(p);
        if (routes_decode(p, n, dec, sizeof c->decbuf - used, &why)) {
            c->bad[c->nparts] = why;
            c->parts[c->nparts++] = p;
            continue;
        }
        used += strlen(dec) + 1;
        c->parts[c->nparts++] = dec;
    }
    return true;
}

static const char *bearer(struct http_req *req)
{
    const char *auth = http_header(req, "Authorization");
    if (!auth || strncasecmp(auth, "Bearer ", 7))
        return NULL;
    return auth + 7;
}

/* Finds the route; false after answering 404, or 405 with the Allow header. */
static bool find_route(struct ctx *c)
{
    char allow[128] = "";
    size_t used = 0;
    for (size_t i = 0; i < NROUTES; i++) {
        if (!path_matches(&routes[i], c))
            continue;
        if (!strcmp(routes[i].method, c->method)) {
            c->route = &routes[i];
            return true;
        }
        used += (size_t)snprintf(allow + used, sizeof allow - used, "%s%s", used ? ", " : "",
                                 routes[i].method);
        if (used >= sizeof allow)
            used = sizeof allow - 1;
    }
    if (!used) {
        for (int i = 0; i < c->nparts; i++)
            if (c->bad[i]) {
                fail(c, 400, "invalid_field", "path", "path: segment %d %s", i + 1,
                     c->bad[i]);
                return false;
            }
        fail(c, 404, "not_found", "path", "no such route");
        return false;
    }
    fail(c, 405, "method_not_allowed", "method", "method %.16s not allowed here; allowed: %s",
         c->method, allow);
    http_resp_header(c->resp, "Allow", "%s", allow);
    return false;
}

static int64_t body_limit(const struct ctx *c)
{
    const struct head_config *cfg = &c->h->cfg;
    switch (c->route->body) {
    case BODY_RESULT:
        /* Only an authenticated agent may send an output's size. */
        return c->who.kind == CALLER_WORKER ? cfg->max_result_bytes : cfg->max_body_bytes;
    case BODY_JSON:
        return c->who.kind == CALLER_NONE ? BODY_NONE_LIMIT : cfg->max_body_bytes;
    case BODY_INPUT:
        return c->who.kind == CALLER_TENANT ? cfg->max_input_bytes : cfg->max_body_bytes;
    case BODY_BATCH:
        return c->who.kind == CALLER_TENANT ? cfg->max_batch_body_bytes : cfg->max_body_bytes;
    case BODY_NONE:
    default:
        return BODY_NONE_LIMIT;
    }
}

static void ctx_free(void *arg)
{
    free(arg);
}

/* http_admit_fn: route, authenticate and bound the body before it is read. */
int64_t routes_admit(void *app, struct http_req *req, struct http_resp *resp)
{
    struct ctx *c = xcalloc(1, sizeof *c);
    c->h = app;
    c->req = req;
    c->resp = resp;
    c->method = http_method(req);
    http_req_set_data(req, c, ctx_free);
    if (!split_path(c, http_path(req))) {
        fail(c, 404, "not_found", "path", "no such route");
        return HTTP_ADMIT_ANSWERED;
    }
    if (!find_route(c))
        return HTTP_ADMIT_ANSWERED;
    if (c->route->callers != ANYONE) {
        if (atomic_load(&c->h->stopping)) {
            fail(c, 503, "unavailable", NULL, "the head is shutting down");
            return HTTP_ADMIT_ANSWERED;
        }
        head_authenticate(c->h, bearer(req), &c->who);
        if (c->who.kind == CALLER_NONE) {
            fail(c, 401, "unauthorized", "Authorization",
                 "Authorization: a valid 'Bearer <key>' is required");
            return HTTP_ADMIT_ANSWERED;
        }
        if (!(c->route->callers & (1u << c->who.kind))) {
            fail(c, 403, "forbidden", NULL, "%s", c->route->denied);
            return HTTP_ADMIT_ANSWERED;
        }
    }
    if (!bind_params(c))
        return HTTP_ADMIT_ANSWERED;
    return body_limit(c);
}

/* http_handler_fn: the admitted request, its body in. */
void routes_handle(void *app, struct http_req *req, struct http_resp *resp)
{
    (void)app;
    struct ctx *c = http_req_data(req);
    c->resp = resp;
    c->route->handler(c);
}
