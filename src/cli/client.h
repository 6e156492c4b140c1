/* client.h: the gpuq CLI's HTTP client: one keep-alive libcurl handle bound to
 * a base URL and a bearer key, JSON in and out, and the printing of the API's
 * error objects. The key is sent in the Authorization header only; it is
 * never printed. */
#ifndef GPUQ_CLI_CLIENT_H
#define GPUQ_CLI_CLIENT_H

#include <jansson.h>
#include <stdio.h>

#include "common/buf.h"

struct client {
    char *base;    /* base URL without a trailing '/', owned */
    char *auth;    /* "Authorization: Bearer …" or NULL, owned */
    void *curl;    /* CURL *, owned */
};

/* A response. body holds the bytes unless they were streamed to a file. */
struct client_resp {
    long status;
    struct buf body;
    char content_type[128];
    char retry_after[32];
};

/* client_init binds c to url and key (key may be NULL). 0 or GPUQ_EIO. */
int client_init(struct client *c, const char *url, const char *key);
void client_fini(struct client *c);

void client_resp_init(struct client_resp *r);
void client_resp_fini(struct client_resp *r);

/* client_request sends METHOD base+path with body (JSON, may be NULL) and
 * waits at most timeout_s for the answer. Returns 0 once an HTTP answer of any
 * status came back (in r), or GPUQ_EIO when the server could not be reached
 * (after printing "gpuq CMD: cannot reach URL: reason"). */
int client_request(struct client *c, const char *cmd, const char *method, const char *path,
                   json_t *body, long timeout_s, struct client_resp *r);

/* client_upload POSTs len bytes of content_type (a file) to base+path; returns
 * as client_request. */
int client_upload(struct client *c, const char *cmd, const char *path, const void *data,
                  size_t len, const char *content_type, long timeout_s, struct client_resp *r);

/* client_download GETs base+path; a 200 answer's bytes are written to out,
 * any other answer's bytes land in r->body. Same returns as client_request. */
int client_download(struct client *c, const char *cmd, const char *path, FILE *out,
                    struct client_resp *r);

/* client_json parses r's body as a JSON object; NULL (after printing why)
 * when it is not one. The caller owns the result. */
json_t *client_json(const char *cmd, const struct client_resp *r);

/* client_print_error prints the API error in r as
 * "gpuq CMD: CODE: MESSAGE (field FIELD, HTTP STATUS)" to stderr. */
void client_print_error(const char *cmd, const struct client_resp *r);

/* client_escape returns s percent-encoded for a path segment or query value;
 * the caller frees it. */
char *client_escape(const char *s);

#endif
