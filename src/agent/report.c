/* report.c: job outcomes and progress to the head (see report.h). */
#include "agent/report.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/log.h"

#define REPORT_TIMEOUT_MS 30000L
#define REPORT_TRIES 4

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Retries transport failures and 5xx answers with short growing pauses. */
static long post_json(struct worker *w, const char *path, json_t *body, int tries)
{
    long status = 0;
    for (int i = 0; i < tries; i++) {
        json_t *answer = NULL;
        status = 0;
        int rc = http_json(&w->hc, path, json_incref(body), REPORT_TIMEOUT_MS, &status, &answer);
        json_decref(answer);
        if (rc == 0 && status < 500)
            break;
        if (i + 1 < tries)
            nap_ms(100 << (2 * i));
    }
    json_decref(body);
    return status;
}

long report_progress(struct worker *w, const struct job *j, const char *phase, double progress,
                     const char *message)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/agent/jobs/%s/progress", j->job_id);
    json_t *body = json_pack("{s:i, s:s, s:I, s:s, s:f, s:s}", "protocol", AGENT_PROTOCOL,
                             "worker_id", w->id, "attempt", (json_int_t)j->attempt, "phase", phase,
                             "progress", progress, "message", message ? message : "");
    return post_json(w, path, body, 1);
}

long report_complete(struct worker *w, const struct job *j, const char *content_type,
                     const void *data, size_t len, int64_t load_ms, int64_t run_ms, bool cold)
{
    char path[512];
    snprintf(path, sizeof path,
             "/v1/agent/jobs/%s/complete?worker_id=%s&attempt=%lld&load_ms=%lld&run_ms=%lld&cold=%d",
             j->job_id, w->id, (long long)j->attempt, (long long)load_ms, (long long)run_ms,
             cold ? 1 : 0);
    long status = 0;
    for (int i = 0; i < REPORT_TRIES; i++) {
        status = 0;
        int rc = http_call(&w->hc, "POST", path, content_type, data, len, REPORT_TIMEOUT_MS,
                           &status);
        if (rc == 0 && status < 500)
            break;
        if (i + 1 < REPORT_TRIES)
            nap_ms(100 << (2 * i));
    }
    if (status != 200)
        log_warn("agent", "worker %s: complete of job %s attempt %lld answered %ld", w->id,
                 j->job_id, (long long)j->attempt, status);
    return status;
}

long report_fail(struct worker *w, const struct job *j, const char *cls, const char *message)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/agent/jobs/%s/fail", j->job_id);
    log_warn("agent", "worker %s: job %s attempt %lld failed: %s: %s", w->id, j->job_id,
             (long long)j->attempt, cls, message);
    json_t *body = json_pack("{s:i, s:s, s:I, s:s, s:s}", "protocol", AGENT_PROTOCOL, "worker_id",
                             w->id, "attempt", (json_int_t)j->attempt, "class", cls, "message",
                             message);
    return post_json(w, path, body, REPORT_TRIES);
}

long report_deregister(struct worker *w)
{
    json_t *body = json_pack("{s:i, s:s}", "protocol", AGENT_PROTOCOL, "worker_id", w->id);
    return post_json(w, "/v1/agent/deregister", body, REPORT_TRIES);
}
