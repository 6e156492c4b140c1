/* poller.c: the assignment long-polls (docs/protocol-worker.md). A worker
 * asks the head for work only while it is registered, ready, not draining
 * and holds fewer jobs than its slots plus the one it may hold ahead
 * (assign_ahead: the head hands that one only shortly before a slot frees,
 * so it need not poll then) and the agent's outbox is not full, and hands
 * what it gets to the controller. It polls with early=1: the head answers
 * before the assignment is durable and names its epoch, which each
 * assignment keeps and every report of it echoes (an older head ignores
 * early and names none); and with max=what it may still hold, so one answer
 * can fill a worker that runs several jobs at once.
 *
 * Group polls (`group_poll`, with a head that offers `poll_workers`): each
 * worker has a poller thread, but the one that polls first also asks, in the
 * same request (?with=), for every other worker that could poll at that
 * moment and marks them `polling`, so their own threads wait; the answer's
 * assignments go to the workers they name. A worker whose result waits in
 * the outbox behind another request waits too (at most GATE_MS), until the
 * outbox sends it: the head gives it no work before that result arrives
 * anyway, and the workers freed by one batch of results then poll as one.
 * When the outbox is idle the result leaves at once and the worker polls at
 * once, as without groups (one job at a time gains nothing from a wait). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "agent/agent.h"
#include "agent/inputs.h"
#include "common/clock.h"
#include "common/log.h"

#define MOD "agent"
/* Longest a worker waits for its result to leave before it polls anyway. */
#define GATE_MS 100
/* How long the outbox stays full before a worker says it takes no work. */
#define FULL_SAY_MS 1000

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

static bool grouped(struct agent *a)
{
    return a->cfg.early_assign && a->cfg.group_poll && atomic_load(&a->poll_workers) > 1;
}

/* How many more jobs w may hold: its free slots, and the job it may hold
 * ahead. [w->mu] */
static int room_locked(const struct worker *w)
{
    return w->view.concurrency + w->view.ahead - w->held;
}

/* Whether w may ask for work now (its own poll or a group's), bar the outbox. [w->mu] */
static bool may_poll_locked(const struct worker *w)
{
    return w->registered && !w->deregistered && w->state == WS_READY && !w->drain &&
           !w->head_drain && room_locked(w) > 0 && !w->polling;
}

/* Whether v may join a poll now: it may poll and no result of it waits
 * behind another report. [v->mu] */
static bool joinable_locked(struct agent *a, const struct worker *v)
{
    return may_poll_locked(v) && !outbox_waits_behind(&a->outbox, v->id);
}

/* Wakes pollers, from index `from` on. one: only the first worker that may
 * poll now (it then gathers the others); else every one whose poller waits,
 * each to ask for itself. Only workers whose poller waits are looked at: one
 * that does not will poll by itself. No wake is lost: a poller sets
 * poll_waiting before it asks the outbox whether its result has left (or
 * whether it is full), under the outbox's lock, which the outbox also held
 * to mark that result sent (or to see room) before its hook comes here. */
static void wake_pollers(struct agent *a, int from, bool one)
{
    for (int i = from; i < a->nworkers; i++) {
        struct worker *v = a->workers[i];
        if (!atomic_load(&v->poll_waiting))
            continue;
        pthread_mutex_lock(&v->mu);
        bool can = !one || joinable_locked(a, v);
        if (can)
            pthread_cond_signal(&v->cv);
        pthread_mutex_unlock(&v->mu);
        if (can && one)
            return;
    }
}

void poller_slot_freed_locked(struct worker *w)
{
    struct agent *a = w->agent;
    if (grouped(a) && may_poll_locked(w)) {
        atomic_store(&w->poll_waiting, true); /* before the outbox is asked (see wake_pollers) */
        if (outbox_waits_behind(&a->outbox, w->id))
            return;
    }
    pthread_cond_broadcast(&w->cv);
}

/* The outbox's hook: results are leaving, so workers that waited for theirs
 * may poll. One is woken and asks for all of them (woken together, each
 * would race the others to lead and the group would split). */
void poller_outbox_sent(void *arg)
{
    wake_pollers(arg, 0, true);
}

/* The outbox's other hook: it had been full, so workers took no work, and
 * now has room. With group polls one is woken and asks for all (as above);
 * without, each that waits is woken to ask for itself. */
void poller_outbox_room(void *arg)
{
    wake_pollers(arg, 0, grouped(arg));
}

/* A group poll's members: the leader first, each with what it may still hold
 * (free slots, and the job it may hold ahead). */
struct group {
    struct worker *w[GPU_MAX];
    int free[GPU_MAX];
    int n;
};

/* Adds to g (after its leader) every other worker that may poll now and has
 * no result waiting behind another report, marking each as polling; up to
 * the head's poll_workers. */
static void gather(struct agent *a, struct group *g)
{
    int most = atomic_load(&a->poll_workers);
    int i = 0;
    for (; i < a->nworkers && g->n < most && g->n < GPU_MAX; i++) {
        struct worker *v = a->workers[i];
        if (v == g->w[0] || !atomic_load(&v->poll_waiting))
            continue;
        pthread_mutex_lock(&v->mu);
        if (joinable_locked(a, v)) {
            v->polling = true;
            g->w[g->n] = v;
            g->free[g->n++] = room_locked(v);
        }
        pthread_mutex_unlock(&v->mu);
    }
    wake_pollers(a, i, true); /* one past the poll's room leads the next */
}

static void put_path(char *path, size_t size, struct agent *a, const struct group *g)
{
    int n = snprintf(path, size, "/v1/agent/assignments?worker_id=%s&wait=%d%s", g->w[0]->id,
                     a->cfg.poll_wait_s, a->cfg.early_assign ? "&early=1" : "");
    /* Early polls ask for all they may hold (a head without early
     * assignments ignores max and hands one). */
    if (a->cfg.early_assign && g->free[0] > 1)
        n += snprintf(path + n, size - (size_t)n, "&max=%d", g->free[0] < 16 ? g->free[0] : 16);
    for (int i = 1; i < g->n && (size_t)n < size; i++)
        n += snprintf(path + n, size - (size_t)n, "%s%s:%d", i == 1 ? "&with=" : ",",
                      g->w[i]->id, g->free[i] < 16 ? g->free[i] : 16);
}

/* The member an assignment names (an answer to a poll for one worker may
 * name none: an older head's). */
static int member_of(const struct group *g, json_t *item)
{
    const char *id = json_string_value(json_object_get(item, "worker_id"));
    if (!id)
        return g->n == 1 ? 0 : -1;
    for (int i = 0; i < g->n; i++)
        if (strcmp(g->w[i]->id, id) == 0)
            return i;
    return -1;
}

/* Hands the answer's assignments to the members they name and ends the poll
 * for every member: each may poll again (the leader's caller holds none of
 * their locks). */
static void deliver(struct group *g, json_t *list)
{
    size_t k;
    json_t *item;
    json_array_foreach(list, k, item)
    {
        if (json_is_object(item) && member_of(g, item) < 0)
            log_warn(MOD, "worker %s: the head's answer names worker %s, not in the poll; ignored",
                     g->w[0]->id, json_string_value(json_object_get(item, "worker_id")));
    }
    for (int i = 0; i < g->n; i++) {
        struct worker *v = g->w[i];
        int got = 0;
        pthread_mutex_lock(&v->mu);
        json_array_foreach(list, k, item)
        {
            if (json_is_object(item) && member_of(g, item) == i) {
                json_array_append(v->pending, item);
                v->held++;
                got++;
            }
        }
        v->polling = false;
        /* A member whose slots are now full need not poll: its poller
         * waits on, and is woken when a slot frees. Its controller is woken
         * for new work, and when draining (it waits for no poll to be out). */
        if (may_poll_locked(v))
            pthread_cond_broadcast(&v->cv);
        bool wake = got || i == 0 || v->drain;
        pthread_mutex_unlock(&v->mu);
        if (wake)
            worker_wake(v);
    }
}

void *poller_main(void *arg)
{
    struct worker *w = arg;
    struct agent *a = w->agent;
    struct http_client hc;
    http_client_init(&hc, a->head_url, a->token);
    int errors = 0;
    char path[256 + GPU_MAX * (AGENT_NAME_MAX + 4)];
    bool said_full = false;
    int64_t full_since = 0;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int64_t gated_since = 0;
        for (;;) {
            if (w->state == WS_DONE)
                break;
            bool can = may_poll_locked(w);
            /* Set before the outbox is asked (see wake_pollers). */
            atomic_store(&w->poll_waiting, can);
            /* A full outbox: results wait for the head; take no new work
             * meanwhile. Under load it fills and empties many times a second
             * (its hook wakes this thread when it has room): said only once
             * it has stayed full for FULL_SAY_MS. */
            bool full = outbox_full(&a->outbox);
            if (can && full) {
                int64_t now = clock_mono_ns();
                if (!full_since)
                    full_since = now;
                if (!said_full && now - full_since >= FULL_SAY_MS * NS_PER_MS) {
                    log_warn(MOD, "worker %s: outbox full for %d ms "
                                  "(outbox_max_jobs/outbox_max_bytes); taking no new work "
                                  "until the head takes the results",
                             w->id, FULL_SAY_MS);
                    said_full = true;
                }
            } else if (!full) {
                full_since = 0;
                if (said_full)
                    log_info(MOD, "worker %s: outbox has room again; taking work", w->id);
                said_full = false;
            }
            int wait_ms = can && full ? 100 : 1000;
            if (can && !full && grouped(a) && outbox_waits_behind(&a->outbox, w->id)) {
                int64_t now = clock_mono_ns();
                if (!gated_since)
                    gated_since = now;
                int64_t left_ms = GATE_MS - (now - gated_since) / NS_PER_MS;
                if (left_ms > 0) {
                    can = false;
                    wait_ms = (int)left_ms;
                }
            }
            if (can && !full)
                break;
            timed_wait(w, wait_ms);
        }
        atomic_store(&w->poll_waiting, false);
        if (w->state == WS_DONE)
            break;
        struct group g = {.w = {w}, .free = {room_locked(w)}, .n = 1};
        w->polling = true;
        pthread_mutex_unlock(&w->mu);
        if (grouped(a))
            gather(a, &g);
        put_path(path, sizeof path, a, &g);

        long status = 0;
        json_t *answer = NULL;
        int rc = http_json(&hc, path, NULL, (long)a->cfg.poll_wait_s * 1000 + 15000, &status,
                           &answer);
        json_t *list = json_object_get(answer, "assignments");
        json_t *epoch = json_object_get(answer, "epoch");
        bool ok = rc == 0 && status == 200 && json_is_array(list);
        if (ok) {
            size_t k;
            json_t *it;
            json_array_foreach(list, k, it)
            {
                if (!json_is_object(it))
                    continue;
                if (json_is_string(epoch))
                    json_object_set(it, "epoch", epoch);
                int m = member_of(&g, it);
                if (m >= 0) /* it runs from files */
                    agent_inputs_fetch(&hc, a->cfg.work_dir, g.w[m]->id, it);
            }
        }
        const char *field =
            json_string_value(json_object_get(json_object_get(answer, "error"), "field"));
        deliver(&g, ok ? list : NULL);

        pthread_mutex_lock(&w->mu);
        int pause_ms = 0;
        if (rc != 0 || status >= 500) {
            errors++;
            pause_ms = errors < 5 ? 100 * errors : 1000;
            if (errors == 1 || errors % 20 == 0)
                log_warn(MOD, "worker %s: assignment poll failed (%s %ld)", w->id,
                         rc ? "unreachable" : "status", status);
        } else if (ok || status == 204) {
            errors = 0;
        } else if (status == 404 || status == 401) {
            /* The head forgot us (or our token): re-register before polling
             * again. A group member it forgot (field "with") re-registers
             * through its heartbeat; the leader just waits a little. */
            if (!field || strcmp(field, "with") != 0)
                w->registered = false;
            pause_ms = 200;
        } else {
            errors++;
            pause_ms = 500;
            log_warn(MOD, "worker %s: assignment poll answered %ld", w->id, status);
        }
        pthread_mutex_unlock(&w->mu);
        json_decref(answer);
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
