/* http_resp.c: incremental HTTP/1.1 response parsing for the load generator. */
#include "http_resp.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/err.h"

void http_resp_init(struct http_resp *r)
{
    memset(r, 0, sizeof *r);
    buf_init(&r->chunked);
}

void http_resp_fini(struct http_resp *r)
{
    buf_fini(&r->chunked);
}

static const char *find_crlf(const char *p, const char *end)
{
    for (; p + 1 < end; p++)
        if (p[0] == '\r' && p[1] == '\n')
            return p;
    return NULL;
}

/* Parses a chunked body starting at p; 1 complete, 0 more needed, <0 bad. */
static int parse_chunked(const char *p, const char *end, struct http_resp *r, const char *start)
{
    buf_reset(&r->chunked);
    for (;;) {
        const char *eol = find_crlf(p, end);
        if (!eol)
            return (end - p) > 32 ? GPUQ_EINVAL : 0;
        char *num_end;
        unsigned long size = strtoul(p, &num_end, 16);
        if (num_end == p || size > (64ul << 20))
            return GPUQ_EINVAL;
        p = eol + 2;
        if (size == 0) {
            /* Skip trailers up to the empty line. */
            for (;;) {
                eol = find_crlf(p, end);
                if (!eol)
                    return 0;
                if (eol == p) {
                    r->consumed = (size_t)(eol + 2 - start);
                    r->body = r->chunked.data ? r->chunked.data : "";
                    r->body_len = r->chunked.len;
                    return 1;
                }
                p = eol + 2;
            }
        }
        if ((size_t)(end - p) < size + 2)
            return 0;
        buf_append(&r->chunked, p, size);
        p += size + 2;
    }
}

int http_resp_parse(const char *in, size_t len, struct http_resp *r)
{
    const char *end = in + len;
    const char *hdr_end = NULL;
    for (const char *p = in; p + 3 < end; p++) {
        if (p[0] == '\r' && p[1] == '\n' && p[2] == '\r' && p[3] == '\n') {
            hdr_end = p;
            break;
        }
    }
    if (!hdr_end)
        return len > HTTP_RESP_MAX_HEAD ? GPUQ_EINVAL : 0;
    if (len < 12 || strncmp(in, "HTTP/1.", 7) != 0)
        return GPUQ_EINVAL;
    r->status = atoi(in + 9);
    r->close = strncmp(in, "HTTP/1.0", 8) == 0;
    long long clen = -1;
    int chunked = 0;
    const char *line = find_crlf(in, end) + 2;
    while (line < hdr_end) {
        const char *eol = find_crlf(line, hdr_end + 2);
        const char *colon = memchr(line, ':', (size_t)(eol - line));
        if (colon) {
            size_t nl = (size_t)(colon - line);
            const char *v = colon + 1;
            while (v < eol && (*v == ' ' || *v == '\t'))
                v++;
            if (nl == 14 && strncasecmp(line, "Content-Length", 14) == 0)
                clen = strtoll(v, NULL, 10);
            else if (nl == 17 && strncasecmp(line, "Transfer-Encoding", 17) == 0)
                chunked = strncasecmp(v, "chunked", 7) == 0;
            else if (nl == 10 && strncasecmp(line, "Connection", 10) == 0)
                r->close = strncasecmp(v, "close", 5) == 0;
        }
        line = eol + 2;
    }
    const char *body = hdr_end + 4;
    if (chunked)
        return parse_chunked(body, end, r, in);
    if (clen < 0) {
        /* No length: only bodiless answers are supported (204, 304, 1xx). */
        if (r->status == 204 || r->status == 304 || r->status < 200)
            clen = 0;
        else
            return GPUQ_EINVAL;
    }
    if (clen > (64ll << 20))
        return GPUQ_EINVAL;
    if ((size_t)(end - body) < (size_t)clen)
        return 0;
    r->body = body;
    r->body_len = (size_t)clen;
    r->consumed = (size_t)(body - in) + (size_t)clen;
    return 1;
}
