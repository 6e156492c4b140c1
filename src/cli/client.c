/* client.c: libcurl wrapper of the gpuq CLI (see client.h). */
#include "client.h"

#include <ctype.h>
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/alloc.h"
#include "common/err.h"

#define CONNECT_TIMEOUT_S 10L

struct sink {
    struct client_resp *r;
    FILE *out;          /* when set, a 200 answer's bytes go here */
    CURL *curl;
    int write_failed;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct sink *s = arg;
    size_t len = size * n;
    if (s->out) {
        long status = 0;
        curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
        if (status == 200) {
            if (fwrite(p, 1, len, s->out) != len) {
                s->write_failed = 1;
                return 0;
            }
            return len;
        }
    }
    buf_append(&s->r->body, p, len);
    return len;
}

/* Copies the value of header "name:" in line into out, trimmed. */
static void header_value(const char *line, size_t len, const char *name, char *out,
                         size_t outlen)
{
    size_t nl = strlen(name);
    if (len <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
        return;
    const char *v = line + nl + 1;
    const char *end = line + len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && isspace((unsigned char)end[-1]))
        end--;
    size_t vl = (size_t)(end - v);
    if (vl >= outlen)
        vl = outlen - 1;
    memcpy(out, v, vl);
    out[vl] = '\0';
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct sink *s = arg;
    size_t len = size * n;
    if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        /* A new answer (e.g. after 100 Continue): forget the previous headers. */
        s->r->content_type[0] = '\0';
        s->r->retry_after[0] = '\0';
    }
    header_value(p, len, "Content-Type", s->r->content_type, sizeof s->r->content_type);
    header_value(p, len, "Retry-After", s->r->retry_after, sizeof s->r->retry_after);
    return len;
}

int client_init(struct client *c, const char *url, const char *key)
{
    memset(c, 0, sizeof *c);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
        return GPUQ_EIO;
    c->curl = curl_easy_init();
    if (!c->curl)
        return GPUQ_EIO;
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        n--;
    c->base = xstrndup(url, n);
    if (key && *key) {
        struct buf b;
        buf_init(&b);
        buf_printf(&b, "Authorization: Bearer %s", key);
        c->auth = buf_steal(&b);
    }
    return 0;
}

void client_fini(struct client *c)
{
    if (c->curl)
        curl_easy_cleanup(c->curl);
    if (c->auth) {
        /* The key is a secret: do not leave it in freed memory. */
        memset(c->auth, 0, strlen(c->auth));
        free(c->auth);
    }
    free(c->base);
    memset(c, 0, sizeof *c);
    curl_global_cleanup();
}

void client_resp_init(struct client_resp *r)
{
    memset(r, 0, sizeof *r);
    buf_init(&r->body);
}

void client_resp_fini(struct client_resp *r)
{
    buf_fini(&r->body);
}

static int perform(struct client *c, const char *cmd, const char *method, const char *path,
                   const char *body, size_t body_len, const char *ctype, long timeout_s,
                   FILE *out, struct client_resp *r)
{
    CURL *h = c->curl;
    struct buf url;
    buf_init(&url);
    buf_printf(&url, "%s%s", c->base, path);

    r->status = 0;
    buf_reset(&r->body);
    r->content_type[0] = '\0';
    r->retry_after[0] = '\0';
    struct sink sink = {.r = r, .out = out, .curl = h};

    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url.data);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, timeout_s);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &sink);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "gpuq-cli/1");
    if (strcmp(method, "GET") == 0)
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);

    struct curl_slist *hdrs = NULL;
    if (c->auth)
        hdrs = curl_slist_append(hdrs, c->auth);
    hdrs = curl_slist_append(hdrs, "Accept: application/json");
    hdrs = curl_slist_append(hdrs, "Expect:");
    if (body) {
        struct buf ct;
        buf_init(&ct);
        buf_printf(&ct, "Content-Type: %s", ctype);
        hdrs = curl_slist_append(hdrs, ct.data);
        buf_fini(&ct);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)body_len);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);

    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(hdrs);

    int ret = 0;
    if (sink.write_failed) {
        fprintf(stderr, "gpuq %s: writing the output failed\n", cmd);
        ret = GPUQ_EIO;
    } else if (rc != CURLE_OK) {
        fprintf(stderr, "gpuq %s: cannot reach %s: %s\n", cmd, c->base,
                curl_easy_strerror(rc));
        ret = GPUQ_EIO;
    }
    buf_fini(&url);
    return ret;
}

int client_request(struct client *c, const char *cmd, const char *method, const char *path,
                   json_t *body, long timeout_s, struct client_resp *r)
{
    char *text = NULL;
    if (body) {
        text = json_dumps(body, JSON_COMPACT);
        if (!text)
            abort();
    }
    int rc = perform(c, cmd, method, path, text, text ? strlen(text) : 0, "application/json",
                     timeout_s, NULL, r);
    free(text);
    return rc;
}

int client_upload(struct client *c, const char *cmd, const char *path, const void *data,
                  size_t len, const char *content_type, long timeout_s, struct client_resp *r)
{
    return perform(c, cmd, "POST", path, data, len, content_type, timeout_s, NULL, r);
}

int client_download(struct client *c, const char *cmd, const char *path, FILE *out,
                    struct client_resp *r)
{
    return perform(c, cmd, "GET", path, NULL, 0, NULL, 600, out, r);
}

json_t *client_json(const char *cmd, const struct client_resp *r)
{
    json_error_t jerr;
    json_t *v = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, &jerr);
    if (!v || !json_is_object(v)) {
        fprintf(stderr, "gpuq %s: the server answered HTTP %ld with something that is not a "
                        "JSON object: %.200s\n",
                cmd, r->status, r->body.data ? r->body.data : "");
        json_decref(v);
        return NULL;
    }
    return v;
}

void client_print_error(const char *cmd, const struct client_resp *r)
{
    json_error_t jerr;
    json_t *v = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, &jerr);
    json_t *e = v ? json_object_get(v, "error") : NULL;
    if (json_is_object(e)) {
        const char *code = json_string_value(json_object_get(e, "code"));
        const char *msg = json_string_value(json_object_get(e, "message"));
        const char *field = json_string_value(json_object_get(e, "field"));
        fprintf(stderr, "gpuq %s: %s: %s", cmd, code ? code : "error", msg ? msg : "");
        if (field && *field)
            fprintf(stderr, " (field %s, HTTP %ld)", field, r->status);
        else
            fprintf(stderr, " (HTTP %ld)", r->status);
    } else {
        fprintf(stderr, "gpuq %s: HTTP %ld", cmd, r->status);
        if (r->body.len)
            fprintf(stderr, ": %.200s", r->body.data);
    }
    if (r->retry_after[0])
        fprintf(stderr, "; retry after %s s", r->retry_after);
    fputc('\n', stderr);
    json_decref(v);
}

char *client_escape(const char *s)
{
    static const char safe[] = "-._~";
    struct buf b;
    buf_init(&b);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || strchr(safe, *p))
            buf_append(&b, p, 1);
        else
            buf_printf(&b, "%%%02X", *p);
    }
    if (!b.data)
        buf_append(&b, "", 0);
    return buf_steal(&b);
}
