/* http.c: libmicrohttpd glue (see http.h): an epoll thread pool with
 * suspend/resume for deferred answers and waiting streams, a watchdog that
 * holds slow clients to their header and body deadlines, and strict framing. */
#include "api/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"

#define MOD "http"
/* Bytes of each connection's libmicrohttpd memory pool (see http_start). */
#define HTTP_POOL_BYTES (16 * 1024)

/* One open connection as the watchdog sees it. Invariant: on the server's
 * watch list from MHD's "started" notice to its "closed" one, which MHD gives
 * before it closes fd — so the watchdog, under the list's lock, only ever
 * shuts down a socket that is still this connection's. deadline_ns = 0: none
 * (a request being handled or answered; the idle timeout still applies). */
struct conn_watch {
    int fd;
    int64_t deadline_ns;
    const char *waiting;  /* "headers" or "body", for the log */
    bool dropped;
    struct conn_watch *prev, *next;
};

struct http_server {
    struct MHD_Daemon *mhd;
    struct http_options opt;
    int port;
    /* Connections suspended now: MHD must not be stopped with any. Counted
     * lock-free; the lock and condition serve only http_stop's wait. */
    atomic_int suspended;
    atomic_bool stopping;
    pthread_mutex_t lock;
    pthread_cond_t idle;
    /* The watchdog: watch list, its thread, and its stop signal. */
    pthread_mutex_t wlock;
    pthread_cond_t wcond;
    struct conn_watch *watched;
    pthread_t watchdog;
    bool watchdog_started;
    bool watchdog_stop;
};

/* Per-request state, from the first call of the access handler until MHD is
 * done with the connection's request and every holder released it. */
struct http_req {
    struct http_server *srv;
    struct MHD_Connection *conn;
    const char *method;
    const char *url;
    struct buf body;
    int64_t limit;
    bool too_large;
    bool handled;          /* the handler ran */
    bool deferred;         /* answered later through http_resume */
    bool sent;             /* a response was queued */
    bool finished;         /* finish ran */
    void (*finish)(void *arg, struct http_resp *resp);
    void *finish_arg;
    atomic_int refs;       /* MHD's one + holders' */
    void *data;            /* the application's (http_req_set_data) */
    void (*data_free)(void *data);
    struct http_resp resp;
    pthread_mutex_t lock;  /* resumes and stream wake-ups */
    bool stream_suspended;
    bool wake_pending;
    /* A deferred answer suspends the connection only on the handler's second
     * call (see on_request); under lock: */
    bool answer_suspended; /* the connection is suspended for its answer */
    bool answer_ready;     /* http_resume was called: the next call answers */
};

static void resp_init(struct http_resp *resp);
static void resp_fini(struct http_resp *resp);

void http_req_hold(struct http_req *req)
{
    atomic_fetch_add(&req->refs, 1);
}

void http_req_release(struct http_req *req)
{
    if (atomic_fetch_sub(&req->refs, 1) != 1)
        return;
    resp_fini(&req->resp);
    buf_fini(&req->body);
    if (req->data_free)
        req->data_free(req->data);
    pthread_mutex_destroy(&req->lock);
    free(req);
}

void http_req_set_data(struct http_req *r, void *data, void (*free_fn)(void *data))
{
    r->data = data;
    r->data_free = free_fn;
}

void *http_req_data(const struct http_req *r)
{
    return r->data;
}

static void count_suspended(struct http_server *srv, int delta)
{
    if (atomic_fetch_add(&srv->suspended, delta) + delta != 0 || !atomic_load(&srv->stopping))
        return;
    pthread_mutex_lock(&srv->lock);
    pthread_cond_broadcast(&srv->idle);
    pthread_mutex_unlock(&srv->lock);
}

void http_defer(struct http_req *req, void (*finish)(void *arg, struct http_resp *resp),
                void *arg)
{
    req->deferred = true;
    req->finish = finish;
    req->finish_arg = arg;
    count_suspended(req->srv, 1);
}

static void run_finish(struct http_req *req)
{
    if (req->finished)
        return;
    req->finished = true;
    if (req->finish)
        req->finish(req->finish_arg, &req->resp);
}

struct http_resp *http_req_resp(struct http_req *req)
{
    return &req->resp;
}

void http_resume(struct http_req *req)
{
    struct http_server *srv = req->srv; /* req may be gone once resumed */
    http_req_hold(req);
    pthread_mutex_lock(&req->lock);
    req->answer_ready = true; /* the handler's next call answers */
    if (req->answer_suspended) {
        req->answer_suspended = false;
        MHD_resume_connection(req->conn);
    }
    pthread_mutex_unlock(&req->lock);
    http_req_release(req);
    count_suspended(srv, -1);
}

void http_stream_wake(struct http_req *req)
{
    pthread_mutex_lock(&req->lock);
    if (req->stream_suspended) {
        req->stream_suspended = false;
        MHD_resume_connection(req->conn);
        count_suspended(req->srv, -1);
    } else {
        req->wake_pending = true;
    }
    pthread_mutex_unlock(&req->lock);
}

const char *http_method(const struct http_req *r)
{
    return r->method;
}

const char *http_path(const struct http_req *r)
{
    return r->url;
}

const char *http_header(const struct http_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *http_query(const struct http_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *http_body(const struct http_req *r, size_t *len)
{
    *len = r->body.len;
    return r->body.data ? r->body.data : "";
}

void http_resp_header(struct http_resp *resp, const char *name, const char *fmt, ...)
{
    if (resp->nheaders == HTTP_MAX_HEADERS)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(resp->header_values[resp->nheaders], sizeof resp->header_values[0], fmt, ap);
    va_end(ap);
    resp->header_names[resp->nheaders++] = name;
}

/* Streams: MHD pulls; we hand out bytes from a buffer that next() refills.
 * With nothing to send, the connection is suspended until http_stream_wake. */
struct stream_state {
    struct http_stream s;
    struct http_req *req; /* held */
    struct buf pending;
    size_t off;
    int ended;
};

static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct stream_state *st = cls;
    while (st->off >= st->pending.len) {
        if (st->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        buf_reset(&st->pending);
        st->off = 0;
        int rc = st->s.next(st->s.arg, st->req, &st->pending);
        if (rc < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (rc == HTTP_STREAM_END)
            st->ended = 1;
        if (rc == HTTP_STREAM_WAIT && st->pending.len == 0) {
            struct http_req *req = st->req;
            pthread_mutex_lock(&req->lock);
            if (req->wake_pending) {
                req->wake_pending = false;
                pthread_mutex_unlock(&req->lock);
                continue;
            }
            req->stream_suspended = true;
            count_suspended(req->srv, 1);
            MHD_suspend_connection(req->conn);
            pthread_mutex_unlock(&req->lock);
            return 0;
        }
    }
    size_t n = st->pending.len - st->off;
    if (n > max)
        n = max;
    memcpy(out, st->pending.data + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    struct stream_state *st = cls;
    if (st->s.free)
        st->s.free(st->s.arg);
    buf_fini(&st->pending);
    http_req_release(st->req);
    free(st);
}

/* Whether the client has shut its sending side with nothing left unread: a
 * deferred answer then closes the connection. (MHD, which was not reading
 * while the answer was prepared, may have let that end-of-stream edge pass
 * and would otherwise keep the connection until the idle timeout.) */
static bool peer_done_sending(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    char c;
    return ci && recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static enum MHD_Result send_resp(struct http_req *req)
{
    struct MHD_Connection *conn = req->conn;
    struct http_resp *resp = &req->resp;
    struct MHD_Response *r;
    req->sent = true;
    if (resp->stream.next) {
        struct stream_state *st = xcalloc(1, sizeof *st);
        st->s = resp->stream;
        st->req = req;
        http_req_hold(req);
        buf_init(&st->pending);
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, st,
                                              stream_free);
        resp->stream.next = NULL;
    } else {
        size_t len = resp->body.len;
        char *data = buf_steal(&resp->body);
        r = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
    }
    if (!r)
        return MHD_NO;
    if (resp->content_type)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, resp->content_type);
    for (int i = 0; i < resp->nheaders; i++)
        MHD_add_response_header(r, resp->header_names[i], resp->header_values[i]);
    if (req->deferred && peer_done_sending(conn))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    return ret;
}

static void resp_init(struct http_resp *resp)
{
    memset(resp, 0, sizeof *resp);
    buf_init(&resp->body);
    resp->status = 500;
}

static void resp_fini(struct http_resp *resp)
{
    buf_fini(&resp->body);
    if (resp->stream.next && resp->stream.free)
        resp->stream.free(resp->stream.arg);
}

static enum MHD_Result send_too_large(struct http_req *req)
{
    struct http_resp *resp = &req->resp;
    resp->status = 413;
    resp->content_type = "application/json";
    buf_printf(&resp->body,
               "{\"error\":{\"code\":\"too_large\",\"message\":\"request body exceeds %lld bytes\","
               "\"field\":\"body\"}}",
               (long long)req->limit);
    return send_resp(req);
}

/* Sets the connection's deadline: secs from now (0 = no deadline). */
static void watch_set(struct http_server *srv, struct MHD_Connection *conn, int secs,
                      const char *waiting)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct conn_watch *w = ci ? ci->socket_context : NULL;
    if (!w)
        return;
    pthread_mutex_lock(&srv->wlock);
    w->deadline_ns = secs > 0 ? clock_mono_ns() + (int64_t)secs * 1000000000LL : 0;
    w->waiting = waiting;
    pthread_mutex_unlock(&srv->wlock);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct http_server *srv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct conn_watch *w = xcalloc(1, sizeof *w);
        w->fd = ci ? ci->connect_fd : -1;
        w->waiting = "headers";
        if (srv->opt.header_timeout_s > 0)
            w->deadline_ns = clock_mono_ns() + (int64_t)srv->opt.header_timeout_s * 1000000000LL;
        pthread_mutex_lock(&srv->wlock);
        w->next = srv->watched;
        if (w->next)
            w->next->prev = w;
        srv->watched = w;
        pthread_mutex_unlock(&srv->wlock);
        *socket_context = w;
        return;
    }
    struct conn_watch *w = *socket_context;
    if (!w)
        return;
    pthread_mutex_lock(&srv->wlock);
    if (w->prev)
        w->prev->next = w->next;
    else
        srv->watched = w->next;
    if (w->next)
        w->next->prev = w->prev;
    pthread_mutex_unlock(&srv->wlock);
    *socket_context = NULL;
    free(w);
}

/* The request line is in: its headers are due within header_timeout_s. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void)uri;
    struct http_server *srv = cls;
    watch_set(srv, conn, srv->opt.header_timeout_s, "headers");
    return NULL;
}

/* Every 100 ms: a connection past its deadline has its socket shut down; MHD
 * then sees the end of it on its own thread and closes it as usual. */
static void *watchdog_main(void *arg)
{
    struct http_server *srv = arg;
    pthread_mutex_lock(&srv->wlock);
    while (!srv->watchdog_stop) {
        int64_t now = clock_mono_ns();
        int headers = 0, body = 0, idle = 0; /* one log line a pass, not one a client */
        for (struct conn_watch *w = srv->watched; w; w = w->next) {
            if (w->dropped || !w->deadline_ns || w->deadline_ns > now || w->fd < 0)
                continue;
            w->dropped = true;
            shutdown(w->fd, SHUT_RDWR);
            if (!strcmp(w->waiting, "headers"))
                headers++;
            else if (!strcmp(w->waiting, "body"))
                body++;
            else
                idle++;
        }
        if (headers + body + idle)
            log_info(MOD, "dropped slow clients at their deadline: %d sending headers, %d a body, "
                     "%d no next request", headers, body, idle);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&srv->wcond, &srv->wlock, &ts);
    }
    pthread_mutex_unlock(&srv->wlock);
    return NULL;
}

static enum MHD_Result send_bad_framing(struct http_req *req, const char *field, const char *msg)
{
    struct http_resp *resp = &req->resp;
    resp_fini(resp);
    resp_init(resp);
    resp->status = 400;
    resp->content_type = "application/json";
    buf_printf(&resp->body,
               "{\"error\":{\"code\":\"invalid_field\",\"message\":\"%s\",\"field\":\"%s\"}}",
               msg, field);
    req->handled = true;
    return send_resp(req);
}

struct framing {
    int ncl;
    bool cl_invalid;
    bool cl_differ;
    uint64_t cl;
    int nte;
    bool te_not_chunked;
};

static bool strict_uint(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!*s)
        return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return true;
}

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    (void)kind;
    struct framing *f = cls;
    if (!key || !value)
        return MHD_YES;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        uint64_t v;
        if (!strict_uint(value, &v))
            f->cl_invalid = true;
        else if (f->ncl && v != f->cl)
            f->cl_differ = true;
        else
            f->cl = v;
        f->ncl++;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        f->nte++;
        if (strcasecmp(value, "chunked"))
            f->te_not_chunked = true;
    }
    return MHD_YES;
}

/* RFC 9112 §6: the body's length must be unambiguous. False after answering. */
static bool check_framing(struct http_req *req, enum MHD_Result *ret)
{
    struct framing f = {0};
    MHD_get_connection_values(req->conn, MHD_HEADER_KIND, framing_header, &f);
    const char *field = NULL, *msg = NULL;
    if (f.cl_invalid) {
        field = "Content-Length";
        msg = "Content-Length: must be a decimal number of bytes";
    } else if (f.cl_differ) {
        field = "Content-Length";
        msg = "Content-Length: given more than once with different values";
    } else if (f.nte && f.ncl) {
        field = "Transfer-Encoding";
        msg = "Transfer-Encoding and Content-Length: send one, not both";
    } else if (f.nte > 1 || f.te_not_chunked) {
        field = "Transfer-Encoding";
        msg = "Transfer-Encoding: only chunked is accepted";
    }
    if (!field)
        return true;
    *ret = send_bad_framing(req, field, msg);
    return false;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    (void)version;
    struct http_server *srv = cls;
    struct http_req *req = *con_cls;
    if (!req) {
        req = xcalloc(1, sizeof *req);
        req->srv = srv;
        req->conn = conn;
        req->method = method;
        req->url = url;
        atomic_init(&req->refs, 1);
        pthread_mutex_init(&req->lock, NULL);
        resp_init(&req->resp);
        buf_init(&req->body);
        *con_cls = req;
        /* The headers are in: the body is due within body_timeout_s. */
        watch_set(srv, conn, srv->opt.body_timeout_s, "body");
        enum MHD_Result fret;
        if (!check_framing(req, &fret))
            return fret;
        /* Admission (auth, route, limit) before a byte of the body is read. */
        req->limit = srv->opt.admit(srv->opt.app, req, &req->resp);
        if (req->limit < 0) {
            req->handled = true;
            return send_resp(req);
        }
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            errno = 0;
            long long n = strtoll(cl, &end, 10);
            if (errno || end == cl || n > req->limit) {
                req->too_large = 1;
                return send_too_large(req);
            }
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (req->sent) { /* answered before the body: drop it */
            *upload_size = 0;
            return MHD_YES;
        }
        if (!req->too_large && req->body.len + *upload_size > (size_t)req->limit)
            req->too_large = 1;
        if (!req->too_large)
            buf_append(&req->body, upload_data, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (req->sent)
        return MHD_YES;
    if (req->too_large)
        return send_too_large(req);
    if (req->handled) {
        /* A deferred answer. Suspending in the call that ran the handler would
         * leave MHD's event-loop state at "read" (it is not updated for a
         * suspended connection), so on resume MHD would read first — and a
         * client that half-closed after a complete request would have its
         * connection closed, unanswered. So that call returns with no answer;
         * MHD marks the connection as waiting on the application and calls
         * again on its next loop turn: here, where suspending is safe. */
        pthread_mutex_lock(&req->lock);
        if (!req->answer_ready) {
            req->answer_suspended = true;
            MHD_suspend_connection(conn);
            pthread_mutex_unlock(&req->lock);
            return MHD_YES;
        }
        pthread_mutex_unlock(&req->lock);
        run_finish(req);
        return send_resp(req);
    }
    req->handled = true;
    watch_set(srv, conn, 0, NULL); /* the whole request is in */
    srv->opt.handler(srv->opt.app, req, &req->resp);
    if (req->deferred)
        return MHD_YES;
    return send_resp(req);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct http_server *srv = cls;
    /* Kept alive, the next request line may idle as long as a client may; then
     * its headers are held to their deadline again (on_uri). */
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && srv->opt.header_timeout_s > 0)
        watch_set(srv, conn, srv->opt.connection_timeout_s + srv->opt.header_timeout_s,
                  "next request");
    struct http_req *req = *con_cls;
    if (!req)
        return;
    *con_cls = NULL;
    if (req->deferred) /* the client left before its answer was sent: let the owner free */
        run_finish(req);
    http_req_release(req);
}

/* fmt is libmicrohttpd's own format string. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    log_debug(MOD, "%s", msg);
}

/* URLs and query values reach the application as sent, still %-escaped (MHD
 * alone turns '+' into ' ' in query values): routes decode them strictly, as
 * a decoded %00 would cut the C string short and invalid UTF-8 would pass. */
static size_t keep_escaped(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    return strlen(s);
}

static void server_free(struct http_server *srv)
{
    if (srv->watchdog_started) {
        pthread_mutex_lock(&srv->wlock);
        srv->watchdog_stop = true;
        pthread_cond_signal(&srv->wcond);
        pthread_mutex_unlock(&srv->wlock);
        pthread_join(srv->watchdog, NULL);
    }
    pthread_mutex_destroy(&srv->wlock);
    pthread_cond_destroy(&srv->wcond);
    pthread_mutex_destroy(&srv->lock);
    pthread_cond_destroy(&srv->idle);
    free(srv);
}

int http_start(const struct http_options *opt, struct http_server **out, char *err, size_t errlen)
{
    struct http_server *srv = xcalloc(1, sizeof *srv);
    srv->opt = *opt;
    pthread_mutex_init(&srv->lock, NULL);
    pthread_cond_init(&srv->idle, NULL);
    pthread_mutex_init(&srv->wlock, NULL);
    pthread_cond_init(&srv->wcond, NULL);
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t slen;
    unsigned flags = MHD_USE_EPOLL | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, opt->host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)opt->port);
        slen = sizeof *a4;
    } else if (inet_pton(AF_INET6, opt->host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)opt->port);
        slen = sizeof *a6;
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, errlen, "listen: '%s' is not a numeric IPv4 or IPv6 address", opt->host);
        server_free(srv);
        return GPUQ_EINVAL;
    }
    (void)slen;
    /* Each connection's memory pool holds one request's line and headers (the
     * body is copied out as it arrives, on_request) and the response's headers.
     * libmicrohttpd zeroes the whole pool between requests, so its size is paid
     * on every request: 64 KiB was a quarter of gpuqd's instructions per job.
     * 16 KiB holds the documented 8 KiB of headers in 100 fields (docs/api,
     * test_front_door measures it); beyond the pool MHD answers 431 and closes. */
    srv->mhd = MHD_start_daemon(
        flags, (uint16_t)opt->port, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, &ss,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)opt->connection_timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)opt->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)opt->max_connections_per_address,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv, MHD_OPTION_URI_LOG_CALLBACK, on_uri, srv,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(opt->threads > 0 ? opt->threads : 2), MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)HTTP_POOL_BYTES, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, srv, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, srv,
        MHD_OPTION_UNESCAPE_CALLBACK, keep_escaped, NULL, MHD_OPTION_END);
    if (!srv->mhd) {
        snprintf(err, errlen, "cannot listen on %s:%d (address in use or not local?)", opt->host,
                 opt->port);
        server_free(srv);
        return GPUQ_EIO;
    }
    if (pthread_create(&srv->watchdog, NULL, watchdog_main, srv)) {
        snprintf(err, errlen, "cannot start the connection watchdog");
        MHD_stop_daemon(srv->mhd);
        server_free(srv);
        return GPUQ_EIO;
    }
    pthread_setname_np(srv->watchdog, "http-watchdog");
    srv->watchdog_started = true;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : opt->port;
    *out = srv;
    return 0;
}

int http_port(const struct http_server *s)
{
    return s->port;
}

void http_stop(struct http_server *s)
{
    if (!s)
        return;
    /* Every owner of a suspended connection answers at shutdown (the caller made
     * sure of it); wait for them, boundedly, before MHD may be stopped. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    atomic_store(&s->stopping, true);
    pthread_mutex_lock(&s->lock);
    while (atomic_load(&s->suspended) > 0)
        if (pthread_cond_timedwait(&s->idle, &s->lock, &ts))
            break;
    int left = atomic_load(&s->suspended);
    pthread_mutex_unlock(&s->lock);
    if (left)
        log_warn(MOD, "%d connections still suspended at stop", left);
    MHD_stop_daemon(s->mhd);
    server_free(s);
}
