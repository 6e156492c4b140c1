/* report.c: one try at delivering a queued report, and deregister (see report.h). */
#include "agent/report.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/err.h"
#include "common/log.h"

#define REPORT_TIMEOUT_MS 30000L   /* a result upload */
#define SMALL_TIMEOUT_MS 10000L    /* a failure or progress report */
#define DEREGISTER_TRIES 4

/* The result's bytes: those the item holds (small results), or read from the
 * file the outbox owns into *owned (its size was checked when queued); NULL
 * when the file cannot be read. The caller frees *owned. */
static int read_file(const char *path, int64_t expect, char **data, size_t *len);
static const char *result_bytes(const struct outbox_item *it, char **owned, size_t *len)
{
    *owned = NULL;
    if (it->data) {
        *len = (size_t)it->bytes;
        return it->data;
    }
    return read_file(it->path, it->bytes, owned, len) == 0 ? *owned : NULL;
}

static int read_file(const char *path, int64_t expect, char **data, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return GPUQ_EIO;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size != expect) {
        close(fd);
        return GPUQ_EIO;
    }
    size_t n = (size_t)st.st_size;
    char *p = read_exact(fd, n);
    close(fd);
    if (!p)
        return GPUQ_EIO;
    *data = p;
    *len = n;
    return 0;
}

int report_send(void *ctx, const struct outbox_item *it, long *status)
{
    struct http_client *hc = ctx;
    char path[512];
    *status = 0;
    if (it->kind == OUTBOX_COMPLETE) {
        char *owned = NULL;
        size_t len = 0;
        const char *data = result_bytes(it, &owned, &len);
        if (!data) {
            /* The file is gone or changed under us: the result cannot be
             * delivered; say so as a failure of the attempt instead. */
            log_error("agent", "worker %s: result file of job %s attempt %lld unreadable (%s)",
                      it->worker_id, it->job_id, (long long)it->attempt, it->path);
            json_t *body = json_pack("{s:i, s:s, s:I, s:s, s:s}", "protocol", AGENT_PROTOCOL,
                                     "worker_id", it->worker_id, "attempt",
                                     (json_int_t)it->attempt, "class", "internal", "message",
                                     "the agent lost the result file before delivering it");
            snprintf(path, sizeof path, "/v1/agent/jobs/%s/fail%s%s", it->job_id,
                     it->epoch[0] ? "?epoch=" : "", it->epoch);
            json_t *answer = NULL;
            int rc = http_json(hc, path, body, REPORT_TIMEOUT_MS, status, &answer);
            json_decref(answer);
            return rc;
        }
        snprintf(path, sizeof path,
                 "/v1/agent/jobs/%s/complete?worker_id=%s&attempt=%lld&load_ms=%lld&run_ms=%lld"
                 "&cold=%d%s%s",
                 it->job_id, it->worker_id, (long long)it->attempt, (long long)it->load_ms,
                 (long long)it->run_ms, it->cold ? 1 : 0, it->epoch[0] ? "&epoch=" : "",
                 it->epoch);
        int rc = http_call(hc, "POST", path, it->content_type, data, len, REPORT_TIMEOUT_MS,
                           status);
        free(owned);
        return rc;
    }
    json_t *body;
    if (it->kind == OUTBOX_FAIL) {
        snprintf(path, sizeof path, "/v1/agent/jobs/%s/fail%s%s", it->job_id,
                 it->epoch[0] ? "?epoch=" : "", it->epoch);
        body = json_pack("{s:i, s:s, s:I, s:s, s:s}", "protocol", AGENT_PROTOCOL, "worker_id",
                         it->worker_id, "attempt", (json_int_t)it->attempt, "class", it->cls,
                         "message", it->message);
    } else {
        snprintf(path, sizeof path, "/v1/agent/jobs/%s/progress%s%s", it->job_id,
                 it->epoch[0] ? "?epoch=" : "", it->epoch);
        body = json_pack("{s:i, s:s, s:I, s:s, s:f, s:s}", "protocol", AGENT_PROTOCOL,
                         "worker_id", it->worker_id, "attempt", (json_int_t)it->attempt, "phase",
                         it->cls, "progress", it->progress, "message", it->message);
    }
    json_t *answer = NULL;
    int rc = http_json(hc, path, body, SMALL_TIMEOUT_MS, status, &answer);
    json_decref(answer);
    return rc;
}

/* Appends one item's header object to the batch and gives its bytes (held
 * by the item, or read from its file into *owned); false when the file
 * cannot be read (the item then goes alone, where the single path reports
 * the loss). */
static bool batch_add(json_t *list, const struct outbox_item *it, const char **data,
                      size_t *len, char **owned)
{
    *data = result_bytes(it, owned, len);
    if (!*data)
        return false;
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:I, s:I, s:I, s:b}", "job_id", it->job_id,
                          "worker_id", it->worker_id, "attempt", (json_int_t)it->attempt,
                          "content_type", it->content_type, "bytes", (json_int_t)*len,
                          "load_ms", (json_int_t)it->load_ms, "run_ms", (json_int_t)it->run_ms,
                          "cold", it->cold);
    if (it->epoch[0])
        json_object_set_new(o, "epoch", json_string(it->epoch));
    json_array_append_new(list, o);
    return true;
}

int report_send_batch(void *ctx, struct outbox_item *const *items, int n, long *status,
                      long *statuses)
{
    struct http_client *hc = ctx;
    *status = 0;
    int sent[OUTBOX_BATCH_MAX]; /* request position → items index */
    const char *data[OUTBOX_BATCH_MAX];
    size_t lens[OUTBOX_BATCH_MAX];
    char *owned[OUTBOX_BATCH_MAX];
    int nsent = 0;
    size_t total = 0;
    json_t *root = json_pack("{s:i, s:[]}", "protocol", AGENT_PROTOCOL, "outcomes");
    json_t *list = json_object_get(root, "outcomes");
    for (int i = 0; i < n && i < OUTBOX_BATCH_MAX; i++) {
        statuses[i] = 0;
        if (batch_add(list, items[i], &data[nsent], &lens[nsent], &owned[nsent])) {
            total += lens[nsent];
            sent[nsent++] = i;
        } else {
            statuses[i] = OUTBOX_SEND_ALONE;
        }
    }
    if (nsent == 0) {
        json_decref(root);
        *status = 200;
        return 0;
    }
    /* Compact JSON holds no newline: the first '\n' ends the header. The
     * results' bytes are copied once, straight into the request body. */
    char *head = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    struct buf body;
    buf_init(&body);
    buf_reserve(&body, strlen(head) + 1 + total);
    buf_puts(&body, head);
    buf_append(&body, "\n", 1);
    free(head);
    for (int k = 0; k < nsent; k++) {
        buf_append(&body, data[k], lens[k]);
        free(owned[k]);
    }
    int rc = http_call(hc, "POST", "/v1/agent/outcomes", "application/x-gpuq-outcomes",
                       body.data, body.len, REPORT_TIMEOUT_MS, status);
    buf_fini(&body);
    if (rc != 0 || *status != 200)
        return rc;
    json_t *answer = json_loadb(hc->resp.data, hc->resp.len, 0, NULL);
    json_t *results = json_object_get(answer, "results");
    for (int k = 0; k < nsent; k++) {
        json_t *r = json_array_get(results, (size_t)k);
        const struct outbox_item *it = items[sent[k]];
        const char *jid = json_string_value(json_object_get(r, "job_id"));
        json_t *st = json_object_get(r, "status");
        /* An answer that does not name this item is no verdict: it is tried again. */
        if (jid && !strcmp(jid, it->job_id) && json_is_integer(st))
            statuses[sent[k]] = (long)json_integer_value(st);
    }
    json_decref(answer);
    return 0;
}

long report_deregister(struct worker *w)
{
    long status = 0;
    for (int i = 0; i < DEREGISTER_TRIES; i++) {
        json_t *body = json_pack("{s:i, s:s}", "protocol", AGENT_PROTOCOL, "worker_id", w->id);
        json_t *answer = NULL;
        status = 0;
        int rc = http_json(&w->hc, "/v1/agent/deregister", body, REPORT_TIMEOUT_MS, &status,
                           &answer);
        json_decref(answer);
        if (rc == 0 && status < 500)
            break;
        struct timespec ts = {0, (100L << (2 * i)) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return status;
}
