/* http.h: the HTTP server, the only place that knows libmicrohttpd. One
 * thread per connection (keep-alive): a handler may block — a long-poll waits
 * on a condition variable, a stream's reader blocks until it has data — and
 * other connections go on. Bodies are bounded; idle clients time out. */
#ifndef GPUQ_API_HTTP_H
#define GPUQ_API_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

struct http_req;

/* A streamed body: next() blocks until it appended data to out (return 0), the
 * stream ended (return 1), or the client should be dropped (negative). */
struct http_stream {
    int (*next)(void *arg, struct buf *out);
    void (*free)(void *arg);
    void *arg;
};

#define HTTP_MAX_HEADERS 4

struct http_resp {
    int status;
    const char *content_type;  /* static string */
    struct buf body;           /* owned; sent when stream.next is NULL */
    struct http_stream stream;
    const char *header_names[HTTP_MAX_HEADERS];
    char header_values[HTTP_MAX_HEADERS][128];
    int nheaders;
};

/* Limits the body of a request as soon as its method and path are known. */
typedef int64_t (*http_body_limit_fn)(void *app, const char *method, const char *url);
typedef void (*http_handler_fn)(void *app, struct http_req *req, struct http_resp *resp);

struct http_options {
    const char *host;          /* numeric IPv4/IPv6 address */
    int port;                  /* 0 = any free port */
    int max_connections;
    int connection_timeout_s;
    http_body_limit_fn body_limit;
    http_handler_fn handler;
    void *app;
};

struct http_server;

int http_start(const struct http_options *opt, struct http_server **out, char *err, size_t errlen);
int http_port(const struct http_server *s);
void http_stop(struct http_server *s);

/* Request accessors (valid during the handler). */
const char *http_method(const struct http_req *r);
const char *http_path(const struct http_req *r);
const char *http_header(const struct http_req *r, const char *name);
const char *http_query(const struct http_req *r, const char *name);
const char *http_body(const struct http_req *r, size_t *len);

void http_resp_header(struct http_resp *resp, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
