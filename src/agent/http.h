/* http.h: the agent's HTTP client to the head — one libcurl easy handle per
 * thread (keep-alive), bearer-token auth, bounded response bodies, JSON in
 * and out. The token is kept only inside the curl header list, never logged. */
#ifndef GPUQ_AGENT_HTTP_H
#define GPUQ_AGENT_HTTP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/buf.h"

#define HTTP_MAX_RESPONSE (16 << 20)

/* Invariant: curl != NULL after http_client_init until fini. */
struct http_client {
    void *curl;
    void *headers; /* struct curl_slist *: Authorization + Accept */
    char base[512];
    struct buf resp;
};

/* curl_global_init once per process, before any thread starts. */
void http_global_init(void);
void http_client_init(struct http_client *h, const char *base_url, const char *token);
void http_client_fini(struct http_client *h);

/* http_call: method on base+path with an optional body of content_type.
 * Returns 0 with the HTTP status in *status and the response body in
 * h->resp, or GPUQ_EIO when no HTTP answer came (refused, timed out) or the
 * answer was larger than HTTP_MAX_RESPONSE. */
int http_call(struct http_client *h, const char *method, const char *path,
              const char *content_type, const void *body, size_t len, long timeout_ms,
              long *status);

/* http_download: GET base+path into out, at most max bytes. Returns 0 with
 * the status in *status (the body, whatever the status, is in out), or
 * GPUQ_EIO when no complete answer came or it was larger than max. */
int http_download(struct http_client *h, const char *path, FILE *out, int64_t max,
                  long timeout_ms, long *status);

/* http_json: POST (body != NULL; the reference is stolen) or GET (body NULL)
 * and parse a JSON object answer into *answer (NULL when the body is empty or
 * not a JSON object; caller decrefs). */
int http_json(struct http_client *h, const char *path, json_t *body, long timeout_ms,
              long *status, json_t **answer);

#endif
