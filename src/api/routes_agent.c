/* routes_agent.c: POST /v1/agent/outcomes (docs/protocol-worker.md) — several
 * completions in one request. One request per result made the agent's
 * deliveries a chain of round trips, each waiting for its own commit; here
 * every result of the batch goes to the committer at once, so they share one
 * transaction (one fsync), and the answer lists each item's verdict once all
 * of them are final. Each item is exactly what a single complete would be
 * (the same head_complete: fencing, duplicate detection, durability before
 * the 200), so a batch changes no guarantee.
 *
 * Body: one line of JSON (the header; the agent writes it compact, so it
 * holds no newline), a '\n', then the results' bytes back to back in the
 * header's order, each item's "bytes" long. The bytes travel raw (no base64)
 * and stay in the request body, which lives until the answer is sent. */
#include "api/routes_ext.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json.h"
#include "common/alloc.h"
#include "common/err.h"
#include "core/lifecycle.h"
#include "head/ops.h"

/* Most results one request carries (the agent sends fewer). */
#define OUTCOMES_MAX 256
#define LIMIT_MS 86400000LL

struct outcome {
    struct outcomes *batch;
    uint64_t id;
    int attempt;
    char worker[SCHED_NAME_MAX];
    char type[REC_NAME_MAX];
    const char *data;
    size_t len;
    int64_t load_ms, run_ms;
    uint64_t epoch; /* echoed by the agent (0: none); fenced by the core (lc_fence_epoch) */
    int rc;
    bool duplicate;
};

struct outcomes {
    struct head *h;
    struct http_req *req;
    atomic_int pending; /* items not yet answered, plus one while submitting */
    int n;
    struct outcome items[];
};

/* Refuses the request naming outcomes[i].field (i < 0: a field of the header). */
static int bad(const struct route_call *c, int i, const char *field, const char *why)
{
    char name[64];
    if (i >= 0)
        snprintf(name, sizeof name, "outcomes[%d].%s", i, field);
    else
        snprintf(name, sizeof name, "%s", field);
    route_fail(c, 400, "invalid_field", name, "%s: %s", name, why);
    return GPUQ_EINVAL;
}

static int get_int(const struct route_call *c, json_t *o, int i, const char *key, bool required,
                   long long lo, long long hi, long long *out)
{
    json_t *v = json_object_get(o, key);
    if (!v) {
        if (required)
            return bad(c, i, key, "required");
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        char why[96];
        snprintf(why, sizeof why, "an integer from %lld to %lld", lo, hi);
        return bad(c, i, key, why);
    }
    *out = json_integer_value(v);
    return 0;
}

static int get_str(const struct route_call *c, json_t *o, int i, const char *key, char *out,
                   size_t size)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v))
        return bad(c, i, key, "required, a string");
    size_t n = json_string_length(v);
    if (n == 0 || n >= size || memchr(json_string_value(v), '\0', n)) {
        char why[64];
        snprintf(why, sizeof why, "1 to %zu bytes", size - 1);
        return bad(c, i, key, why);
    }
    memcpy(out, json_string_value(v), n + 1);
    return 0;
}

/* One item of the header into it; its bytes start at *off in data[0..len). */
static int parse_item(const struct route_call *c, json_t *o, int i, const char *data, size_t len,
                      size_t *off, struct outcome *it)
{
    static const char *const keys[] = {"job_id", "worker_id", "attempt", "content_type", "bytes",
                                       "load_ms", "run_ms", "cold", "epoch", NULL};
    if (!json_is_object(o))
        return bad(c, i, "job_id", "each outcome is an object");
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        bool known = false;
        for (const char *const *p = keys; *p && !known; p++)
            known = !strcmp(*p, k);
        if (!known)
            return bad(c, i, k, "unknown field");
    }
    json_t *jid = json_object_get(o, "job_id");
    if (!json_is_string(jid) || !json_job_id(json_string_value(jid), &it->id))
        return bad(c, i, "job_id", "required, a job id (a positive decimal number as a string)");
    long long attempt = 0, bytes = 0, load_ms = 0, run_ms = 0;
    int rc;
    if ((rc = get_str(c, o, i, "worker_id", it->worker, sizeof it->worker)) ||
        (rc = get_int(c, o, i, "attempt", true, 1, 1000000, &attempt)) ||
        (rc = get_str(c, o, i, "content_type", it->type, sizeof it->type)) ||
        (rc = get_int(c, o, i, "bytes", true, 0, (long long)(len - *off), &bytes)) ||
        (rc = get_int(c, o, i, "load_ms", false, 0, LIMIT_MS, &load_ms)) ||
        (rc = get_int(c, o, i, "run_ms", false, 0, LIMIT_MS, &run_ms)))
        return rc;
    json_t *cold = json_object_get(o, "cold");
    if (cold && !json_is_boolean(cold))
        return bad(c, i, "cold", "a boolean");
    json_t *epoch = json_object_get(o, "epoch");
    it->epoch = 0;
    if (epoch && (!json_is_string(epoch) ||
                  strlen(json_string_value(epoch)) != json_string_length(epoch) ||
                  lc_epoch_parse(json_string_value(epoch), &it->epoch)))
        return bad(c, i, "epoch", "1 to 16 hex digits, as the head sent it");
    it->attempt = (int)attempt;
    it->load_ms = load_ms;
    it->run_ms = run_ms;
    it->data = data + *off;
    it->len = (size_t)bytes;
    *off += (size_t)bytes;
    return 0;
}

static void outcomes_free(struct outcomes *b)
{
    free(b);
}

/* head_done_fn of one item: the last answer wakes the connection. */
static void item_done(void *arg, int rc, struct job_rec *job, bool flag)
{
    (void)job;
    struct outcome *it = arg;
    it->rc = rc;
    it->duplicate = flag;
    if (atomic_fetch_sub(&it->batch->pending, 1) == 1)
        http_resume(it->batch->req);
}

static void put_error(struct buf *out, int rc, const struct outcome *it)
{
    const char *code = "internal";
    char msg[160];
    snprintf(msg, sizeof msg, "%s", gpuq_strerror(rc));
    int status = 500;
    if (rc == GPUQ_ESTALE_EPOCH) {
        status = 409;
        code = "stale_attempt";
        snprintf(msg, sizeof msg,
                 "epoch: job %llu was assigned by an earlier run of the head; it runs again",
                 (unsigned long long)it->id);
    } else if (rc == GPUQ_ESTALE) {
        status = 409;
        code = "stale_attempt";
        snprintf(msg, sizeof msg, "attempt: not the current attempt of job %llu on this worker",
                 (unsigned long long)it->id);
    } else if (rc == GPUQ_ENOENT) {
        status = 404;
        code = "not_found";
        snprintf(msg, sizeof msg, "no job %llu", (unsigned long long)it->id);
    } else if (rc == GPUQ_EAGAIN) {
        status = 503;
        code = "busy";
        snprintf(msg, sizeof msg, "the job's result is being committed; retry");
    } else if (rc == GPUQ_EIO) {
        status = 503;
        code = "unavailable";
        snprintf(msg, sizeof msg, "the store could not commit the result; retry later");
    }
    buf_printf(out, "\"status\":%d,\"error\":{\"code\":\"%s\",\"message\":", status, code);
    json_put_string(out, msg);
    buf_puts(out, "}");
}

static void outcomes_finish(void *arg, struct http_resp *resp)
{
    struct outcomes *b = arg;
    struct buf *out = &resp->body;
    buf_puts(out, "{\"results\":[");
    for (int i = 0; i < b->n; i++) {
        const struct outcome *it = &b->items[i];
        buf_printf(out, "%s{\"job_id\":\"%llu\",\"attempt\":%d,", i ? "," : "",
                   (unsigned long long)it->id, it->attempt);
        if (it->rc)
            put_error(out, it->rc, it);
        else
            buf_printf(out, "\"status\":200,\"duplicate\":%s", it->duplicate ? "true" : "false");
        buf_puts(out, "}");
    }
    buf_puts(out, "]}");
    resp->status = 200;
    resp->content_type = "application/json";
    outcomes_free(b);
}

void route_agent_outcomes(const struct route_call *c)
{
    size_t len;
    const char *body = http_body(c->req, &len);
    const char *nl = body ? memchr(body, '\n', len) : NULL;
    if (!nl) {
        bad(c, -1, "body", "a JSON header line, a newline, then the results' bytes");
        return;
    }
    json_error_t jerr;
    json_t *root = json_loadb(body, (size_t)(nl - body), 0, &jerr);
    if (!json_is_object(root)) {
        json_decref(root);
        bad(c, -1, "body", "the header line is not a JSON object");
        return;
    }
    json_t *proto = json_object_get(root, "protocol");
    json_t *list = json_object_get(root, "outcomes");
    if (!json_is_integer(proto) || json_integer_value(proto) != 1) {
        json_decref(root);
        bad(c, -1, "protocol", "this head speaks protocol 1");
        return;
    }
    size_t n = json_array_size(list);
    if (!json_is_array(list) || n == 0 || n > OUTCOMES_MAX) {
        json_decref(root);
        bad(c, -1, "outcomes", "an array of 1 to 256 outcomes");
        return;
    }
    struct outcomes *b = xcalloc(1, sizeof *b + n * sizeof b->items[0]);
    b->h = c->h;
    b->req = c->req;
    b->n = (int)n;
    const char *data = nl + 1;
    size_t dlen = len - (size_t)(nl + 1 - body), off = 0;
    for (size_t i = 0; i < n; i++) {
        b->items[i].batch = b;
        if (parse_item(c, json_array_get(list, i), (int)i, data, dlen, &off, &b->items[i])) {
            json_decref(root);
            outcomes_free(b);
            return;
        }
    }
    json_decref(root);
    if (off != dlen) {
        outcomes_free(b);
        bad(c, -1, "bytes", "the items' bytes do not add up to the body after the header");
        return;
    }
    atomic_init(&b->pending, (int)n + 1);
    http_defer(c->req, outcomes_finish, b);
    /* All go to the committer before any answer can complete the batch, so
     * they share its next transaction. The body outlives the commits. */
    for (size_t i = 0; i < n; i++) {
        struct outcome *it = &b->items[i];
        head_complete(c->h, it->id, it->worker, it->attempt, it->epoch, it->type, it->data,
                      it->len, it->load_ms, it->run_ms, item_done, it);
    }
    if (atomic_fetch_sub(&b->pending, 1) == 1)
        http_resume(c->req);
}
