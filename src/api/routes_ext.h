/* routes_ext.h: route handlers that live outside routes.c (batches, backlog,
 * capacity). routes.c's table names them through one-line wrappers; each
 * handler gets the request as routes.c admitted it (route, caller, path id)
 * and answers like every other route: JSON, errors shaped
 * {"error":{"code","message","field"}}. */
#ifndef GPUQ_API_ROUTES_EXT_H
#define GPUQ_API_ROUTES_EXT_H

#include <stdarg.h>
#include <stdint.h>

#include "api/http.h"
#include "head/head.h"

/* One admitted request. who is authenticated; id is the path's {id} (0: none). */
struct route_call {
    struct head *h;
    const struct caller *who;
    struct http_req *req;
    struct http_resp *resp;
    uint64_t id;
};

/* routes_batch.c (docs/api: batches) */
void route_batch_post(const struct route_call *c);
void route_batch_get(const struct route_call *c);
void route_batch_delete(const struct route_call *c);
void route_batch_list(const struct route_call *c);

/* routes_capacity.c (docs/api: backlog, capacity) */
void route_backlog_get(const struct route_call *c);
void route_capacity_get(const struct route_call *c);

/* routes_scale.c (docs/api: scale) */
void route_scale_get(const struct route_call *c);

/* routes_tokens.c (docs/api: worker tokens) */
void route_worker_tokens_list(const struct route_call *c);
void route_worker_token_revoke(const struct route_call *c);

/* routes_agent.c (docs/protocol-worker.md: outcomes) */
void route_agent_outcomes(const struct route_call *c);

/* Shared answers (routes_batch.c). */
void route_fail(const struct route_call *c, int status, const char *code, const char *field,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void route_reply_json(const struct route_call *c, int status);
/* The error answer (docs/api): {"error": {code, field, message}} with status
 * (routes.c; every route module answers its errors through it). */
void route_failv(struct http_resp *resp, int status, const char *code, const char *field,
                 const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

#endif
