/* poller.c: a worker's assignment long-poll (docs/protocol-worker.md). It asks
 * the head for work only while the worker is registered, ready, not draining
 * and has a free slot (so no job waits here that the head could still move
 * elsewhere) and the agent's outbox is not full, and hands what it gets to
 * the controller. It polls with early=1: the head answers before the
 * assignment is durable and names its epoch, which each assignment keeps and
 * every report of it echoes (an older head ignores early and names none); and
 * with max=the free slots, so one answer can fill a worker that runs several
 * jobs at once. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "agent/agent.h"
#include "agent/inputs.h"
#include "common/log.h"

#define MOD "agent"

static void timed_wait(struct worker *w, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
}

void *poller_main(void *arg)
{
    struct worker *w = arg;
    struct agent *a = w->agent;
    struct http_client hc;
    http_client_init(&hc, a->head_url, a->token);
    int errors = 0;
    char path[256];
    bool said_full = false;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        for (;;) {
            if (w->state == WS_DONE)
                break;
            bool can = w->registered && !w->deregistered && w->state == WS_READY && !w->drain &&
                       !w->head_drain &&
                       w->held < w->view.concurrency;
            /* A full outbox: results wait for the head; take no new work meanwhile. */
            bool full = outbox_full(&a->outbox);
            if (can && full != said_full) {
                if (full)
                    log_warn(MOD, "worker %s: outbox full (outbox_max_jobs/outbox_max_bytes); "
                                  "taking no new work until the head takes the results",
                             w->id);
                else
                    log_info(MOD, "worker %s: outbox has room again; taking work", w->id);
                said_full = full;
            }
            if (can && !full)
                break;
            timed_wait(w, can && full ? 100 : 1000);
        }
        if (w->state == WS_DONE)
            break;
        /* Early polls ask for every free slot's worth (a head without
         * early assignments ignores max and hands one). */
        int free_slots = w->view.concurrency - w->held;
        snprintf(path, sizeof path, "/v1/agent/assignments?worker_id=%s&wait=%d%s", w->id,
                 a->cfg.poll_wait_s, a->cfg.early_assign ? "&early=1" : "");
        if (a->cfg.early_assign && free_slots > 1)
            snprintf(path + strlen(path), sizeof path - strlen(path), "&max=%d",
                     free_slots < 16 ? free_slots : 16);
        w->polling = true;
        pthread_mutex_unlock(&w->mu);

        long status = 0;
        json_t *answer = NULL;
        int rc = http_json(&hc, path, NULL, (long)a->cfg.poll_wait_s * 1000 + 15000, &status,
                           &answer);
        json_t *list = json_object_get(answer, "assignments");
        json_t *epoch = json_object_get(answer, "epoch");
        if (rc == 0 && status == 200 && json_is_array(list)) {
            size_t k;
            json_t *it;
            json_array_foreach(list, k, it)
            {
                if (!json_is_object(it))
                    continue;
                if (json_is_string(epoch))
                    json_object_set(it, "epoch", epoch);
                agent_inputs_fetch(&hc, a->cfg.work_dir, w->id, it); /* it runs from files */
            }
        }

        pthread_mutex_lock(&w->mu);
        w->polling = false;
        int pause_ms = 0;
        if (rc != 0 || status >= 500) {
            errors++;
            pause_ms = errors < 5 ? 100 * errors : 1000;
            if (errors == 1 || errors % 20 == 0)
                log_warn(MOD, "worker %s: assignment poll failed (%s %ld)", w->id,
                         rc ? "unreachable" : "status", status);
        } else if (status == 200 && json_is_array(list)) {
            errors = 0;
            size_t i;
            json_t *item;
            json_array_foreach(list, i, item)
            {
                if (json_is_object(item)) {
                    json_array_append(w->pending, item);
                    w->held++;
                }
            }
        } else if (status == 204) {
            errors = 0;
        } else if (status == 404 || status == 401) {
            /* The head forgot us (or our token): re-register before polling again. */
            w->registered = false;
            pause_ms = 200;
        } else {
            errors++;
            pause_ms = 500;
            log_warn(MOD, "worker %s: assignment poll answered %ld", w->id, status);
        }
        pthread_mutex_unlock(&w->mu);
        json_decref(answer);
        worker_wake(w);
        if (status == 404)
            monitor_kick(a);
        pthread_mutex_lock(&w->mu);
        if (pause_ms && w->state != WS_DONE)
            timed_wait(w, pause_ms);
    }
    pthread_mutex_unlock(&w->mu);
    http_client_fini(&hc);
    return NULL;
}
