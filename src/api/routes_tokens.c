/* routes_tokens.c: GET /v1/worker-tokens (the live worker tokens, never their
 * secrets) and DELETE /v1/worker-tokens/{id} (revoke one: the agents using it
 * get 401 from their next request on). Admin only (routes.c's table). */
#include "api/routes_ext.h"

#include <stdlib.h>

#include "api/json.h"
#include "common/err.h"
#include "head/worker_tokens.h"

static void put_token(struct buf *out, const struct token_rec *t)
{
    buf_printf(out, "{\"id\":%lld,\"name\":", (long long)t->id);
    json_put_string(out, t->name);
    buf_printf(out, ",\"created_ms\":%lld}", (long long)t->created_ms);
}

void route_worker_tokens_list(const struct route_call *c)
{
    struct token_rec *v;
    int n = head_worker_tokens_list(c->h, &v);
    struct buf *out = &c->resp->body;
    buf_reset(out);
    buf_puts(out, "{\"worker_tokens\":[");
    for (int i = 0; i < n; i++) {
        if (i)
            buf_puts(out, ",");
        put_token(out, &v[i]);
    }
    buf_puts(out, "]}");
    free(v);
    route_reply_json(c, 200);
}

void route_worker_token_revoke(const struct route_call *c)
{
    struct token_rec t;
    int rc = head_worker_token_revoke(c->h, (int64_t)c->id, &t);
    if (rc == GPUQ_ENOENT) {
        route_fail(c, 404, "not_found", "id", "no worker token %llu (never made, or revoked)",
                   (unsigned long long)c->id);
        return;
    }
    if (rc) {
        route_fail(c, 503, "store_unavailable", NULL,
                   "the revocation could not be stored (%s): the token still works",
                   gpuq_strerror(rc));
        return;
    }
    struct buf *out = &c->resp->body;
    buf_reset(out);
    put_token(out, &t);
    out->len--; /* reopen the object */
    buf_puts(out, ",\"revoked\":true}");
    route_reply_json(c, 200);
}
