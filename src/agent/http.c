/* http.c: libcurl-based client to the head (see http.h). */
#include "agent/http.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

void http_global_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct buf *b = arg;
    size_t n = size * nmemb;
    if (b->len + n > HTTP_MAX_RESPONSE)
        return 0; /* aborts the transfer */
    buf_append(b, ptr, n);
    return n;
}

void http_client_init(struct http_client *h, const char *base_url, const char *token)
{
    memset(h, 0, sizeof *h);
    snprintf(h->base, sizeof h->base, "%s", base_url);
    size_t bl = strlen(h->base);
    while (bl > 0 && h->base[bl - 1] == '/')
        h->base[--bl] = '\0';
    buf_init(&h->resp);
    CURL *c = curl_easy_init();
    if (!c) {
        fprintf(stderr, "gpuq-agent: curl_easy_init failed\n");
        abort();
    }
    char auth[600];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    struct curl_slist *hdrs = curl_slist_append(NULL, auth);
    hdrs = curl_slist_append(hdrs, "Accept: application/json");
    hdrs = curl_slist_append(hdrs, "Expect:"); /* no 100-continue round trip */
    memset(auth, 0, sizeof auth);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &h->resp);
    h->curl = c;
    h->headers = hdrs;
}

void http_client_fini(struct http_client *h)
{
    if (h->curl)
        curl_easy_cleanup(h->curl);
    if (h->headers)
        curl_slist_free_all(h->headers);
    buf_fini(&h->resp);
    memset(h, 0, sizeof *h);
}

int http_call(struct http_client *h, const char *method, const char *path,
              const char *content_type, const void *body, size_t len, long timeout_ms,
              long *status)
{
    CURL *c = h->curl;
    char url[1024];
    snprintf(url, sizeof url, "%s%s", h->base, path);
    buf_reset(&h->resp);
    struct curl_slist *hdrs = h->headers;
    struct curl_slist *extra = NULL;
    if (content_type) {
        char ct[160];
        snprintf(ct, sizeof ct, "Content-Type: %s", content_type);
        /* A private list: the shared one stays as it is for the next call. */
        for (struct curl_slist *p = hdrs; p; p = p->next)
            extra = curl_slist_append(extra, p->data);
        extra = curl_slist_append(extra, ct);
        hdrs = extra;
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, NULL);
    } else {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? len : 0));
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, strcmp(method, "POST") ? method : NULL);
    }
    CURLcode rc = curl_easy_perform(c);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->headers);
    if (extra)
        curl_slist_free_all(extra);
    if (rc != CURLE_OK)
        return GPUQ_EIO;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    return 0;
}

int http_json(struct http_client *h, const char *path, json_t *body, long timeout_ms,
              long *status, json_t **answer)
{
    *answer = NULL;
    int rc;
    if (body) {
        char *s = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        if (!s)
            return GPUQ_EINVAL;
        rc = http_call(h, "POST", path, "application/json", s, strlen(s), timeout_ms, status);
        free(s);
    } else {
        rc = http_call(h, "GET", path, NULL, NULL, 0, timeout_ms, status);
    }
    if (rc)
        return rc;
    if (h->resp.len > 0) {
        json_t *j = json_loadb(h->resp.data, h->resp.len, 0, NULL);
        if (json_is_object(j))
            *answer = j;
        else
            json_decref(j);
    }
    return 0;
}

/* A download's sink: the file and what it may still take. */
struct sink {
    FILE *out;
    int64_t left;
};

static size_t on_file_data(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct sink *k = arg;
    size_t n = size * nmemb;
    if ((int64_t)n > k->left)
        return 0; /* aborts the transfer */
    k->left -= (int64_t)n;
    return fwrite(ptr, 1, n, k->out);
}

int http_download(struct http_client *h, const char *path, FILE *out, int64_t max,
                  long timeout_ms, long *status)
{
    CURL *c = h->curl;
    char url[1024];
    snprintf(url, sizeof url, "%s%s", h->base, path);
    struct sink k = {out, max};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->headers);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, NULL);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_file_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &k);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &h->resp);
    if (rc != CURLE_OK || fflush(out) != 0 || ferror(out))
        return GPUQ_EIO;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    return 0;
}
