/* http_resp.h: an incremental parser of HTTP/1.1 responses for the load
 * generator: status, Content-Length or chunked body, Connection: close. It
 * reads from the connection's input buffer and never allocates, except to
 * de-chunk a chunked body. */
#ifndef GPUQ_BENCH_HTTP_RESP_H
#define GPUQ_BENCH_HTTP_RESP_H

#include <stddef.h>

#include "common/buf.h"

#define HTTP_RESP_MAX_HEAD 16384

struct http_resp {
    int status;
    int close;            /* the server will close the connection after this */
    const char *body;     /* into the input, or chunked.data */
    size_t body_len;
    size_t consumed;      /* bytes of the input this response used */
    struct buf chunked;   /* de-chunked body, when the body was chunked */
};

void http_resp_init(struct http_resp *r);
void http_resp_fini(struct http_resp *r);

/* http_resp_parse looks for one complete response at the start of in[0..len).
 * Returns 1 when complete (r filled), 0 when more bytes are needed, or
 * GPUQ_EINVAL for a malformed or oversized response. */
int http_resp_parse(const char *in, size_t len, struct http_resp *r);

#endif
