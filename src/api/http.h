/* http.h: the HTTP server, the only place that knows libmicrohttpd. A small
 * pool of event-loop threads (epoll) serves every connection; no handler
 * blocks. A handler that cannot answer at once — a submit waiting for its
 * group commit, a long-poll — calls http_defer: the connection is suspended
 * (it costs no thread and no timeout) until someone fills its response and
 * calls http_resume, from any thread. A streamed body (server-sent events)
 * says HTTP_STREAM_WAIT when it has nothing; its owner calls
 * http_stream_wake when it may. Each request is admitted (http_admit_fn) before
 * its body is read: bodies are bounded per request; idle clients time out,
 * slow ones are dropped at a deadline, and connections are capped per client
 * address and in all. Framing the client got wrong (conflicting or invalid
 * Content-Length, Transfer-Encoding other than chunked) is one clean 400. */
#ifndef GPUQ_API_HTTP_H
#define GPUQ_API_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

struct http_req;

enum { HTTP_STREAM_DATA = 0, HTTP_STREAM_END = 1, HTTP_STREAM_WAIT = 2 };

/* A streamed body: next() appends data to out (HTTP_STREAM_DATA), says the
 * stream ended (HTTP_STREAM_END), has nothing now (HTTP_STREAM_WAIT: it must
 * arrange a later http_stream_wake(req)), or drops the client (negative).
 * free(arg) runs when the connection is done with the stream. */
struct http_stream {
    int (*next)(void *arg, struct http_req *req, struct buf *out);
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

/* Admission: runs once per request as soon as its method, path and headers are
 * in, before any byte of its body is read. Returns the body limit in bytes
 * (>= 0) to go on — a larger Content-Length is answered 413 at once — or
 * HTTP_ADMIT_ANSWERED after filling resp (a 401, 404, 405...): that answer is
 * sent at once and the body is never read (the connection then closes if a
 * body was announced). It may attach data to the request (http_req_set_data)
 * for the handler. */
#define HTTP_ADMIT_ANSWERED (-1)
typedef int64_t (*http_admit_fn)(void *app, struct http_req *req, struct http_resp *resp);
/* The handler runs once the whole body (within its limit) is in. */
typedef void (*http_handler_fn)(void *app, struct http_req *req, struct http_resp *resp);

struct http_options {
    const char *host;          /* numeric IPv4/IPv6 address */
    int port;                  /* 0 = any free port */
    int threads;               /* event-loop threads */
    int max_connections;
    int max_connections_per_address; /* 0 = no cap */
    int connection_timeout_s;  /* idle time allowed */
    /* Deadlines, however steadily a client trickles bytes: the request line
     * and headers within header_timeout_s (counted from the accept, or from the
     * request line on a kept-alive connection), the whole body within
     * body_timeout_s of the headers. A client past one is dropped. 0 = none. */
    int header_timeout_s;
    int body_timeout_s;
    http_admit_fn admit;
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

/* The application's per-request data; free_fn(data) runs when the request's
 * memory goes (after the answer is sent and every holder released it). */
void http_req_set_data(struct http_req *r, void *data, void (*free_fn)(void *data));
void *http_req_data(const struct http_req *r);

void http_resp_header(struct http_resp *resp, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Deferred answers: inside the handler, http_defer(req, finish, arg) suspends
 * the connection; later, from any thread, call http_resume(req) exactly once.
 * Then finish(arg, resp), if not NULL, runs on an event-loop thread to fill the
 * response (or the resumer filled http_req_resp(req) itself). The request
 * (body included) stays valid until the answer is sent. http_req_hold/release
 * keep the request's memory alive for an owner that may touch it after that
 * (a timer, a waiter list). */
void http_defer(struct http_req *req, void (*finish)(void *arg, struct http_resp *resp),
                void *arg);
struct http_resp *http_req_resp(struct http_req *req);
void http_resume(struct http_req *req);
void http_req_hold(struct http_req *req);
void http_req_release(struct http_req *req);
/* A stream that returned HTTP_STREAM_WAIT may have data now. */
void http_stream_wake(struct http_req *req);

#endif
