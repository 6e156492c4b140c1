/* fuzz_routes.c: libFuzzer harness for the HTTP API's path resolution and
 * admission (api/routes.c routes_admit: splitting the path, matching the route
 * table, the {id} segment, authentication by caller kind, the body limit). The
 * HTTP server and the head are replaced by the small fakes below. The first
 * byte picks the method and who calls; the rest is the (decoded) path. Every
 * path must be admitted with one of the documented body limits, or answered
 * with a 4xx/503 whose body is a valid JSON error; a 405 carries Allow. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz.h"
#include "api/http.h"
#include "api/routes.h"
#include "head/head.h"

/* The fake request the fake HTTP accessors below read. */
struct http_req {
    const char *method;
    const char *path;
    const char *authorization;
    void *data;
    void (*free_fn)(void *data);
};

static enum caller_kind fake_caller;

const char *http_method(const struct http_req *r)
{
    return r->method;
}

const char *http_path(const struct http_req *r)
{
    return r->path;
}

const char *http_header(const struct http_req *r, const char *name)
{
    return strcasecmp(name, "Authorization") == 0 ? r->authorization : NULL;
}

const char *http_query(const struct http_req *r, const char *name)
{
    (void)r;
    (void)name;
    return NULL;
}

void http_req_set_data(struct http_req *r, void *data, void (*free_fn)(void *data))
{
    r->data = data;
    r->free_fn = free_fn;
}

void *http_req_data(const struct http_req *r)
{
    return r->data;
}

void http_resp_header(struct http_resp *resp, const char *name, const char *fmt, ...)
{
    CHECK(resp->nheaders < HTTP_MAX_HEADERS);
    va_list ap;
    va_start(ap, fmt);
    resp->header_names[resp->nheaders] = name;
    vsnprintf(resp->header_values[resp->nheaders], sizeof resp->header_values[0], fmt, ap);
    va_end(ap);
    resp->nheaders++;
}

void head_authenticate(struct head *h, const char *bearer, struct caller *out)
{
    (void)h;
    memset(out, 0, sizeof *out);
    out->kind = bearer && !strcmp(bearer, "fuzz-key") ? fake_caller : CALLER_NONE;
    if (out->kind == CALLER_TENANT) {
        out->tenant.id = 1;
        snprintf(out->tenant.name, sizeof out->tenant.name, "fuzz");
    }
}

static const char *header(const struct http_resp *resp, const char *name)
{
    for (int i = 0; i < resp->nheaders; i++)
        if (!strcasecmp(resp->header_names[i], name))
            return resp->header_values[i];
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const methods[] = {"GET", "POST", "DELETE", "PUT", "HEAD", "get"};
    static struct head *h;
    if (!h) {
        h = calloc(1, sizeof *h);
        config_defaults(&h->cfg);
    }
    if (size < 1)
        return 0;
    fake_caller = (enum caller_kind)(data[0] / 8 % 4);
    char *path = malloc(size);
    memcpy(path, data + 1, size - 1);
    path[size - 1] = '\0';
    struct http_req req = {
        .method = methods[data[0] % 8 % 6],
        .path = path,
        .authorization = fake_caller == CALLER_NONE ? NULL : "Bearer fuzz-key",
    };
    struct http_resp resp;
    memset(&resp, 0, sizeof resp);
    buf_init(&resp.body);

    int64_t limit = routes_admit(h, &req, &resp);
    if (limit == HTTP_ADMIT_ANSWERED) {
        CHECK(resp.status == 400 || resp.status == 401 || resp.status == 403 ||
              resp.status == 404 || resp.status == 405 || resp.status == 503);
        CHECK(resp.content_type && strstr(resp.content_type, "json"));
        json_error_t jerr;
        json_t *root = json_loadb(resp.body.data, resp.body.len, 0, &jerr);
        CHECK(root != NULL);
        CHECK(json_is_string(json_object_get(json_object_get(root, "error"), "code")));
        json_decref(root);
        if (resp.status == 405)
            CHECK(header(&resp, "Allow") != NULL);
    } else {
        /* Admitted: nothing answered yet, and the limit is one of the documented four. */
        CHECK(resp.status == 0 && resp.body.len == 0);
        CHECK(limit == 1024 || limit == h->cfg.max_body_bytes ||
              limit == h->cfg.max_result_bytes || limit == h->cfg.max_input_bytes ||
              limit == h->cfg.max_batch_body_bytes);
        if (limit == h->cfg.max_batch_body_bytes && limit != h->cfg.max_body_bytes)
            CHECK(fake_caller == CALLER_TENANT);
        if (limit == h->cfg.max_result_bytes && limit != h->cfg.max_body_bytes)
            CHECK(fake_caller == CALLER_WORKER);
        if (limit == h->cfg.max_input_bytes && limit != h->cfg.max_body_bytes)
            CHECK(fake_caller == CALLER_TENANT);
    }
    if (req.free_fn)
        req.free_fn(req.data);
    buf_fini(&resp.body);
    free(path);
    return 0;
}
