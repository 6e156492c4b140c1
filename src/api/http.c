/* http.c: libmicrohttpd glue (see http.h). */
#include "api/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/alloc.h"
#include "common/err.h"
#include "common/log.h"

#define MOD "http"

struct http_server {
    struct MHD_Daemon *mhd;
    struct http_options opt;
    int port;
};

/* Per-request state, from the first call of the access handler to completion. */
struct http_req {
    struct http_server *srv;
    struct MHD_Connection *conn;
    const char *method;
    const char *url;
    struct buf body;
    int64_t limit;
    int too_large;
};

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

/* Streams: MHD pulls; we hand out bytes from a buffer that next() refills. */
struct stream_state {
    struct http_stream s;
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
        int rc = st->s.next(st->s.arg, &st->pending);
        if (rc < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (rc == 1)
            st->ended = 1;
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
    free(st);
}

static enum MHD_Result send_resp(struct MHD_Connection *conn, struct http_resp *resp)
{
    struct MHD_Response *r;
    if (resp->stream.next) {
        struct stream_state *st = xcalloc(1, sizeof *st);
        st->s = resp->stream;
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

static enum MHD_Result send_too_large(struct MHD_Connection *conn, int64_t limit)
{
    struct http_resp resp;
    resp_init(&resp);
    resp.status = 413;
    resp.content_type = "application/json";
    buf_printf(&resp.body,
               "{\"error\":{\"code\":\"too_large\",\"message\":\"request body exceeds %lld bytes\","
               "\"field\":\"body\"}}",
               (long long)limit);
    enum MHD_Result ret = send_resp(conn, &resp);
    resp_fini(&resp);
    return ret;
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
        buf_init(&req->body);
        req->limit = srv->opt.body_limit(srv->opt.app, method, url);
        *con_cls = req;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoll(cl, NULL, 10) > req->limit)
            req->too_large = 1;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!req->too_large && req->body.len + *upload_size > (size_t)req->limit)
            req->too_large = 1;
        if (!req->too_large)
            buf_append(&req->body, upload_data, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (req->too_large)
        return send_too_large(conn, req->limit);
    struct http_resp resp;
    resp_init(&resp);
    srv->opt.handler(srv->opt.app, req, &resp);
    enum MHD_Result ret = send_resp(conn, &resp);
    resp_fini(&resp);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    struct http_req *req = *con_cls;
    if (!req)
        return;
    buf_fini(&req->body);
    free(req);
    *con_cls = NULL;
}

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

int http_start(const struct http_options *opt, struct http_server **out, char *err, size_t errlen)
{
    struct http_server *srv = xcalloc(1, sizeof *srv);
    srv->opt = *opt;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t slen;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ERROR_LOG;
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
        free(srv);
        return GPUQ_EINVAL;
    }
    (void)slen;
    srv->mhd = MHD_start_daemon(
        flags, (uint16_t)opt->port, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, &ss,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)opt->connection_timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)opt->max_connections,
        MHD_OPTION_THREAD_STACK_SIZE, (size_t)(256 * 1024), MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(64 * 1024), MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, srv, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, srv, MHD_OPTION_END);
    if (!srv->mhd) {
        snprintf(err, errlen, "cannot listen on %s:%d (address in use or not local?)", opt->host,
                 opt->port);
        free(srv);
        return GPUQ_EIO;
    }
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
    MHD_stop_daemon(s->mhd);
    free(s);
}
