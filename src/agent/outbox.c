/* outbox.c: the agent's queue of reports to the head (see outbox.h). */
#include "agent/outbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"

#define MOD "agent"

void outbox_init(struct outbox *ob, int max_items, int64_t max_bytes, int64_t min_delay_ms,
                 int64_t max_delay_ms, outbox_send_fn send, void *ctx)
{
    memset(ob, 0, sizeof *ob);
    pthread_mutex_init(&ob->mu, NULL);
    pthread_cond_init(&ob->cv, NULL);
    ob->max_items = max_items > 0 ? max_items : 1;
    ob->max_bytes = max_bytes > 0 ? max_bytes : 1;
    ob->min_delay_ms = min_delay_ms > 0 ? min_delay_ms : 1;
    ob->max_delay_ms = max_delay_ms >= ob->min_delay_ms ? max_delay_ms : ob->min_delay_ms;
    ob->send = send;
    ob->ctx = ctx;
}

static void item_free(struct outbox_item *it)
{
    if (it->kind == OUTBOX_COMPLETE && it->path[0])
        unlink(it->path);
    free(it->data);
    free(it);
}

void outbox_fini(struct outbox *ob)
{
    struct outbox_item *it = ob->first;
    while (it) {
        struct outbox_item *next = it->next;
        if (it->kind != OUTBOX_PROGRESS)
            log_warn(MOD, "worker %s: stopping with the outcome of job %s attempt %lld "
                          "undelivered",
                     it->worker_id, it->job_id, (long long)it->attempt);
        item_free(it);
        it = next;
    }
    ob->first = ob->last = NULL;
    pthread_mutex_destroy(&ob->mu);
    pthread_cond_destroy(&ob->cv);
}

static bool same_attempt(const struct outbox_item *it, const char *worker_id, const char *job_id,
                         int64_t attempt)
{
    return it->attempt == attempt && strcmp(it->job_id, job_id) == 0 &&
           strcmp(it->worker_id, worker_id) == 0;
}

/* Unlinks it from the list (under mu); prev is its predecessor or NULL. */
static void unlink_item(struct outbox *ob, struct outbox_item *prev, struct outbox_item *it)
{
    if (prev)
        prev->next = it->next;
    else
        ob->first = it->next;
    if (ob->last == it)
        ob->last = prev;
    it->next = NULL;
    if (it->kind != OUTBOX_PROGRESS) {
        ob->items--;
        if (it->kind == OUTBOX_COMPLETE)
            ob->bytes -= it->bytes;
    }
}

/* Drops progress of the attempt that is not being sent (under mu). */
static void drop_progress(struct outbox *ob, const char *worker_id, const char *job_id,
                          int64_t attempt)
{
    struct outbox_item *prev = NULL, *it = ob->first;
    while (it) {
        struct outbox_item *next = it->next;
        if (it->kind == OUTBOX_PROGRESS && !it->sending &&
            same_attempt(it, worker_id, job_id, attempt)) {
            unlink_item(ob, prev, it);
            item_free(it);
        } else {
            prev = it;
        }
        it = next;
    }
}

static void push(struct outbox *ob, struct outbox_item *it)
{
    pthread_mutex_lock(&ob->mu);
    if (it->kind != OUTBOX_PROGRESS) {
        drop_progress(ob, it->worker_id, it->job_id, it->attempt);
        ob->items++;
        ob->bytes += it->kind == OUTBOX_COMPLETE ? it->bytes : 0;
    }
    if (ob->last)
        ob->last->next = it;
    else
        ob->first = it;
    ob->last = it;
    ob->pushed++;
    pthread_mutex_unlock(&ob->mu);
    /* After the unlock: woken under it, the outbox thread would only block
     * on the lock again. It looks at the queue under the lock before it
     * sleeps, so no item is missed. */
    pthread_cond_broadcast(&ob->cv);
}

static struct outbox_item *item_new(enum outbox_kind kind, const char *worker_id,
                                    const char *job_id, int64_t attempt, const char *epoch,
                                    int64_t now)
{
    struct outbox_item *it = xcalloc(1, sizeof *it);
    it->kind = kind;
    snprintf(it->epoch, sizeof it->epoch, "%s", epoch ? epoch : "");
    snprintf(it->worker_id, sizeof it->worker_id, "%s", worker_id);
    snprintf(it->job_id, sizeof it->job_id, "%s", job_id);
    it->attempt = attempt;
    it->due_ns = now;
    return it;
}

/* A completion whose result is in the file at path, or (path NULL) in data. */
static void put_complete(struct outbox *ob, const char *worker_id, const char *job_id,
                         int64_t attempt, const char *epoch, const char *path, char *data,
                         const char *content_type, int64_t bytes, int64_t load_ms,
                         int64_t run_ms, bool cold, int64_t now)
{
    struct outbox_item *it = item_new(OUTBOX_COMPLETE, worker_id, job_id, attempt, epoch, now);
    if (path)
        snprintf(it->path, sizeof it->path, "%s", path);
    it->data = data;
    snprintf(it->content_type, sizeof it->content_type, "%s", content_type);
    it->bytes = bytes;
    it->load_ms = load_ms;
    it->run_ms = run_ms;
    it->cold = cold;
    push(ob, it);
}

void outbox_put_complete(struct outbox *ob, const char *worker_id, const char *job_id,
                         int64_t attempt, const char *epoch, const char *path,
                         const char *content_type, int64_t bytes, int64_t load_ms, int64_t run_ms,
                         bool cold, int64_t now)
{
    put_complete(ob, worker_id, job_id, attempt, epoch, path, NULL, content_type, bytes, load_ms,
                 run_ms, cold, now);
}

void outbox_put_complete_data(struct outbox *ob, const char *worker_id, const char *job_id,
                              int64_t attempt, const char *epoch, char *data,
                              const char *content_type, int64_t bytes, int64_t load_ms,
                              int64_t run_ms, bool cold, int64_t now)
{
    put_complete(ob, worker_id, job_id, attempt, epoch, NULL, data, content_type, bytes, load_ms,
                 run_ms, cold, now);
}

void outbox_put_fail(struct outbox *ob, const char *worker_id, const char *job_id,
                     int64_t attempt, const char *epoch, const char *cls, const char *message,
                     int64_t now)
{
    struct outbox_item *it = item_new(OUTBOX_FAIL, worker_id, job_id, attempt, epoch, now);
    snprintf(it->cls, sizeof it->cls, "%s", cls);
    snprintf(it->message, sizeof it->message, "%s", message);
    push(ob, it);
}

void outbox_put_progress(struct outbox *ob, const char *worker_id, const char *job_id,
                         int64_t attempt, const char *epoch, const char *phase, double progress,
                         const char *message, int64_t now)
{
    pthread_mutex_lock(&ob->mu);
    for (struct outbox_item *it = ob->first; it; it = it->next) {
        if (same_attempt(it, worker_id, job_id, attempt) && !it->sending) {
            if (it->kind == OUTBOX_PROGRESS) { /* coalesce: the newest wins */
                snprintf(it->cls, sizeof it->cls, "%s", phase);
                snprintf(it->message, sizeof it->message, "%s", message ? message : "");
                it->progress = progress;
                pthread_mutex_unlock(&ob->mu);
                return;
            }
        }
        if (same_attempt(it, worker_id, job_id, attempt) && it->kind != OUTBOX_PROGRESS) {
            pthread_mutex_unlock(&ob->mu); /* its outcome is queued: too late */
            return;
        }
    }
    pthread_mutex_unlock(&ob->mu);
    struct outbox_item *it = item_new(OUTBOX_PROGRESS, worker_id, job_id, attempt, epoch, now);
    snprintf(it->cls, sizeof it->cls, "%s", phase);
    snprintf(it->message, sizeof it->message, "%s", message ? message : "");
    it->progress = progress;
    push(ob, it);
}

static bool full_locked(const struct outbox *ob)
{
    return ob->items >= ob->max_items || ob->bytes >= ob->max_bytes;
}

bool outbox_full(struct outbox *ob)
{
    pthread_mutex_lock(&ob->mu);
    bool full = full_locked(ob);
    ob->full_seen = ob->full_seen || full;
    pthread_mutex_unlock(&ob->mu);
    return full;
}

int outbox_outcomes_for(struct outbox *ob, const char *worker_id, char (*ids)[OUTBOX_ID_MAX],
                        int64_t *attempts, int max)
{
    int n = 0;
    pthread_mutex_lock(&ob->mu);
    for (struct outbox_item *it = ob->first; it; it = it->next) {
        if (it->kind == OUTBOX_PROGRESS || strcmp(it->worker_id, worker_id) != 0)
            continue;
        if (ids && attempts && n < max) {
            snprintf(ids[n], OUTBOX_ID_MAX, "%s", it->job_id);
            attempts[n] = it->attempt;
        }
        n++;
    }
    pthread_mutex_unlock(&ob->mu);
    return n;
}

bool outbox_waits_behind(struct outbox *ob, const char *worker_id)
{
    bool unsent = false, out = false;
    pthread_mutex_lock(&ob->mu);
    for (struct outbox_item *it = ob->first; it && !(unsent && out); it = it->next) {
        out = out || it->sending;
        unsent = unsent || (it->kind != OUTBOX_PROGRESS && !it->sending && it->tries == 0 &&
                            strcmp(it->worker_id, worker_id) == 0);
    }
    pthread_mutex_unlock(&ob->mu);
    return unsent && out;
}

void outbox_stats(struct outbox *ob, struct outbox_stats *out)
{
    pthread_mutex_lock(&ob->mu);
    out->items = ob->items;
    out->bytes = ob->bytes;
    out->delivered = ob->delivered;
    out->dropped = ob->dropped;
    out->retries = ob->retries;
    pthread_mutex_unlock(&ob->mu);
}

enum outbox_verdict outbox_verdict(enum outbox_kind kind, int rc, long status)
{
    if (kind == OUTBOX_PROGRESS)
        return rc == 0 && status >= 200 && status < 300 ? OUTBOX_DONE : OUTBOX_DROP;
    if (rc != 0)
        return OUTBOX_RETRY;
    if (status >= 200 && status < 300)
        return OUTBOX_DONE;
    if (status == 409 || status == 404 || status == 400 || status == 413)
        return OUTBOX_DROP;
    return OUTBOX_RETRY; /* 5xx, 401, 403, 408, 429 …: the head may yet take it */
}

int64_t outbox_delay_ms(int tries, int64_t min_ms, int64_t max_ms)
{
    int64_t d = min_ms;
    for (int i = 1; i < tries && d < max_ms; i++)
        d *= 2;
    return d > max_ms ? max_ms : d;
}

static const char *kind_name(enum outbox_kind k)
{
    return k == OUTBOX_COMPLETE ? "complete" : k == OUTBOX_FAIL ? "fail" : "progress";
}

/* Logs a final or retried answer for an outcome (not under mu). */
static void log_answer(const struct outbox_item *it, enum outbox_verdict v, int rc, long status,
                       int64_t delay_ms)
{
    const char *what = kind_name(it->kind);
    if (v == OUTBOX_DONE) {
        if (it->tries > 0)
            log_info(MOD, "worker %s: %s of job %s attempt %lld delivered after %d retries",
                     it->worker_id, what, it->job_id, (long long)it->attempt, it->tries);
    } else if (v == OUTBOX_DROP) {
        const char *why = status == 409   ? "the attempt was fenced off (stale)"
                          : status == 404 ? "the head does not know the job"
                          : status == 413 ? "the result is larger than the head accepts"
                                          : "the head refused the report as malformed";
        log_warn(MOD, "worker %s: %s of job %s attempt %lld dropped: %s (HTTP %ld)",
                 it->worker_id, what, it->job_id, (long long)it->attempt, why, status);
    } else if (it->tries == 1 || (it->tries & (it->tries - 1)) == 0) {
        /* The first failure and then every power of two: bounded noise. */
        log_warn(MOD, "worker %s: %s of job %s attempt %lld not delivered (%s %ld); try %d, "
                      "next in %lld ms",
                 it->worker_id, what, it->job_id, (long long)it->attempt,
                 rc ? "unreachable" : "HTTP", status, it->tries, (long long)delay_ms);
    }
}

void outbox_set_batch(struct outbox *ob, outbox_send_batch_fn fn)
{
    pthread_mutex_lock(&ob->mu);
    ob->send_batch = fn;
    pthread_mutex_unlock(&ob->mu);
}

void outbox_set_on_send(struct outbox *ob, void (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&ob->mu);
    ob->on_send = fn;
    ob->on_send_arg = arg;
    pthread_mutex_unlock(&ob->mu);
}

void outbox_set_on_room(struct outbox *ob, void (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&ob->mu);
    ob->on_room = fn;
    ob->on_room_arg = arg;
    pthread_mutex_unlock(&ob->mu);
}

static bool batchable(const struct outbox *ob, const struct outbox_item *it)
{
    return ob->send_batch && !ob->batch_off && it->kind == OUTBOX_COMPLETE && !it->alone &&
           it->bytes <= OUTBOX_INLINE_MAX;
}

/* Settles one answered item (under mu): due again later, or out of the list. */
static void settle_locked(struct outbox *ob, struct outbox_item *it, enum outbox_verdict v,
                          int64_t due_ns, bool failed_try)
{
    it->sending = false;
    if (v == OUTBOX_RETRY) {
        it->due_ns = due_ns;
        if (failed_try)
            ob->retries++;
        return;
    }
    struct outbox_item *prev = NULL;
    for (struct outbox_item *p = ob->first; p && p != it; p = p->next)
        prev = p;
    unlink_item(ob, prev, it);
    if (it->kind != OUTBOX_PROGRESS) {
        if (v == OUTBOX_DONE)
            ob->delivered++;
        else
            ob->dropped++;
    }
    item_free(it);
}

/* The head answered: what waited on it need not wait longer (under mu). */
static void head_is_back_locked(struct outbox *ob, int64_t now)
{
    for (struct outbox_item *p = ob->first; p; p = p->next)
        if (p->due_ns > now)
            p->due_ns = now;
}

/* One request for the batch items[0..n) (all marked sending). Called without
 * mu; returns holding it, like the single path in outbox_step. */
static void step_batch(struct outbox *ob, struct outbox_item **items, int n, int64_t now)
{
    long status = 0;
    long statuses[OUTBOX_BATCH_MAX] = {0};
    int rc = ob->send_batch(ob->ctx, items, n, &status, statuses);
    if (rc != 0)
        status = 0;
    bool unknown = rc == 0 && (status == 404 || status == 405);
    if (unknown)
        log_warn(MOD, "the head does not take batched results (HTTP %ld); sending them one "
                      "by one",
                 status);
    else if (rc == 0 && (status == 400 || status == 413))
        log_warn(MOD, "the head refused a batch of %d results (HTTP %ld); sending them one "
                      "by one",
                 n, status);
    enum outbox_verdict v[OUTBOX_BATCH_MAX];
    int64_t delay[OUTBOX_BATCH_MAX];
    for (int i = 0; i < n; i++) {
        struct outbox_item *it = items[i];
        delay[i] = 0;
        if (rc == 0 && status == 200 && statuses[i] != OUTBOX_SEND_ALONE)
            v[i] = outbox_verdict(it->kind, 0, statuses[i]);
        else if (rc == 0 && status == 200)
            v[i] = OUTBOX_RETRY; /* alone, at once */
        else if (unknown || (rc == 0 && (status == 400 || status == 413)))
            v[i] = OUTBOX_RETRY; /* again at once, by itself */
        else
            v[i] = outbox_verdict(it->kind, rc, status);
        bool at_once = (rc == 0 && status == 200 && statuses[i] == OUTBOX_SEND_ALONE) ||
                       unknown || (rc == 0 && (status == 400 || status == 413));
        if (v[i] == OUTBOX_RETRY && !at_once) {
            it->tries++;
            delay[i] = outbox_delay_ms(it->tries, ob->min_delay_ms, ob->max_delay_ms);
        }
        if (!at_once)
            log_answer(it, v[i], rc, rc == 0 && status == 200 ? statuses[i] : status, delay[i]);
        if (at_once)
            it->alone = !unknown; /* an older head: batch_off covers every item */
    }
    pthread_mutex_lock(&ob->mu);
    if (unknown)
        ob->batch_off = true;
    /* The head answered: others waiting need not wait longer — but an item
     * it answered 5xx itself keeps its backoff (settled after this). */
    if (rc == 0 && status > 0 && status < 500)
        head_is_back_locked(ob, now);
    for (int i = 0; i < n; i++) /* delay 0: not a failed try, only another way to travel */
        settle_locked(ob, items[i], v[i], now + delay[i] * NS_PER_MS, delay[i] > 0);
    pthread_cond_broadcast(&ob->cv);
}

int64_t outbox_step(struct outbox *ob, int64_t now, bool *tried)
{
    *tried = false;
    pthread_mutex_lock(&ob->mu);
    struct outbox_item *it = ob->first;
    while (it && (it->sending || it->due_ns > now))
        it = it->next;
    if (it && batchable(ob, it)) {
        struct outbox_item *items[OUTBOX_BATCH_MAX];
        int n = 0;
        int64_t bytes = 0;
        for (struct outbox_item *p = it; p && n < OUTBOX_BATCH_MAX; p = p->next) {
            if (p->sending || p->due_ns > now || !batchable(ob, p))
                continue;
            if (n > 0 && bytes + p->bytes > OUTBOX_BATCH_BYTES)
                break;
            p->sending = true;
            bytes += p->bytes;
            items[n++] = p;
        }
        void (*on_send)(void *) = ob->on_send;
        void *on_send_arg = ob->on_send_arg;
        pthread_mutex_unlock(&ob->mu);
        if (on_send)
            on_send(on_send_arg);
        step_batch(ob, items, n, now);
        *tried = true;
    } else if (it) {
        it->sending = true;
        void (*on_send)(void *) = ob->on_send;
        void *on_send_arg = ob->on_send_arg;
        pthread_mutex_unlock(&ob->mu);
        if (on_send && it->kind != OUTBOX_PROGRESS)
            on_send(on_send_arg);
        long status = 0;
        int rc = ob->send(ob->ctx, it, &status);
        if (rc != 0)
            status = 0;
        enum outbox_verdict v = outbox_verdict(it->kind, rc, status);
        int64_t delay = 0;
        if (v == OUTBOX_RETRY) {
            it->tries++;
            delay = outbox_delay_ms(it->tries, ob->min_delay_ms, ob->max_delay_ms);
        }
        if (it->kind != OUTBOX_PROGRESS)
            log_answer(it, v, rc, status, delay);
        *tried = true;
        pthread_mutex_lock(&ob->mu);
        settle_locked(ob, it, v, now + delay * NS_PER_MS, true);
        if (rc == 0 && status > 0 && status < 500) /* the head is back */
            head_is_back_locked(ob, now);
        pthread_cond_broadcast(&ob->cv);
    }
    int64_t next = INT64_MAX;
    for (struct outbox_item *p = ob->first; p; p = p->next)
        if (!p->sending && p->due_ns < next)
            next = p->due_ns;
    /* A worker that found it full took no work and sleeps until woken (or
     * 100 ms): wake them once the head's answers leave room. */
    void (*on_room)(void *) = NULL;
    if (ob->full_seen && !full_locked(ob)) {
        ob->full_seen = false;
        on_room = ob->on_room;
    }
    void *on_room_arg = ob->on_room_arg;
    pthread_mutex_unlock(&ob->mu);
    if (on_room)
        on_room(on_room_arg);
    return next;
}

void *outbox_main(void *arg)
{
    struct outbox *ob = arg;
    pthread_mutex_lock(&ob->mu);
    while (!ob->stop) {
        uint64_t seen = ob->pushed;
        pthread_mutex_unlock(&ob->mu);
        bool tried;
        int64_t next = outbox_step(ob, clock_mono_ns(), &tried);
        pthread_mutex_lock(&ob->mu);
        /* A report queued while the step ran (its wake-up came before this
         * thread waited) is looked at now, not after the wait. */
        if (tried || ob->stop || ob->pushed != seen)
            continue;
        /* Nothing due: sleep until the next item is, or a new one comes. */
        int64_t wait_ns = next == INT64_MAX ? 1000 * NS_PER_MS : next - clock_mono_ns();
        if (wait_ns <= 0)
            continue;
        if (wait_ns > 1000 * NS_PER_MS)
            wait_ns = 1000 * NS_PER_MS;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += wait_ns / NS_PER_S;
        ts.tv_nsec += wait_ns % NS_PER_S;
        if (ts.tv_nsec >= NS_PER_S) {
            ts.tv_sec++;
            ts.tv_nsec -= NS_PER_S;
        }
        pthread_cond_timedwait(&ob->cv, &ob->mu, &ts);
    }
    pthread_mutex_unlock(&ob->mu);
    return NULL;
}

void outbox_stop(struct outbox *ob)
{
    pthread_mutex_lock(&ob->mu);
    ob->stop = true;
    pthread_cond_broadcast(&ob->cv);
    pthread_mutex_unlock(&ob->mu);
}
