/* committer.c: the group-commit thread (see committer.h). */
#include "store/committer.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"

#define MOD "committer"
#define MAX_BATCH 4096
/* How long after the last lazy op an idle committer still wakes by itself
 * every lazy delay (see wait_for_work). */
#define LAZY_WATCH_NS (1 * NS_PER_S)

struct committer {
    struct store *store;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work;   /* signalled when ops arrive or on stop */
    atomic_bool idle;      /* the thread waits on work (written under lock; read lock-free too) */
    struct commit_op *head, *tail;
    int eager;             /* queued ops that are not lazy */
    int64_t lazy_due_ns;   /* earliest due time of the queued lazy ops; 0: none */
    int64_t sleep_until_ns; /* while idle: when it wakes by itself; 0: not before an op */
    int64_t lazy_seen_ns;   /* when the last lazy op was queued */
    int64_t lazy_delay_ns;  /* that op's delay */
    bool stopping;
    struct committer_stats stats; /* under lock, but for healthy: read from `healthy` */
    atomic_bool healthy;          /* false from a failed batch or probe to the next success */
    committer_observe_fn observe; /* set before the first op (committer_set_observer) */
    void *observe_arg;
};

/* Records the outcome of a batch or probe; logs the transitions only. */
static void set_health(struct committer *c, int err)
{
    int64_t now = clock_mono_ns();
    pthread_mutex_lock(&c->lock);
    bool was = c->stats.healthy;
    int64_t since = c->stats.unhealthy_since_ns;
    if (err) {
        c->stats.failed_batches++;
        if (was) {
            c->stats.healthy = false;
            c->stats.last_error = err;
            c->stats.unhealthy_since_ns = now;
        }
    } else if (!was) {
        c->stats.healthy = true;
        c->stats.last_error = 0;
        c->stats.unhealthy_since_ns = 0;
    }
    atomic_store(&c->healthy, c->stats.healthy);
    pthread_mutex_unlock(&c->lock);
    if (err && was)
        log_error(MOD, "the store cannot write (%s): not ready; probing every %d ms",
                  gpuq_strerror(err), COMMITTER_PROBE_MS);
    else if (!err && !was)
        log_info(MOD, "the store writes again after %lld ms: ready",
                 (long long)((now - since) / NS_PER_MS));
}

/* The probe's one write: the results row of job 0, which no job has. */
static int probe_apply(struct store *s, struct commit_op *op)
{
    (void)op;
    return s->ops->result_put(s, 0, "application/x-gpuq-probe", "", 0);
}

/* Applies the batch in one transaction. Returns 0 when every op applied. */
static int apply_all(struct committer *c, struct commit_op *batch, bool savepoints)
{
    struct store *s = c->store;
    int err = s->ops->begin(s);
    if (err)
        return err;
    for (struct commit_op *op = batch; op; op = op->next) {
        if (!savepoints) {
            op->rc = op->apply(s, op);
            if (op->rc) {
                s->ops->rollback(s);
                return op->rc;
            }
            continue;
        }
        err = s->ops->savepoint(s);
        if (err) {
            s->ops->rollback(s);
            return err;
        }
        op->rc = op->apply(s, op);
        err = s->ops->release(s, op->rc == 0);
        if (err) {
            s->ops->rollback(s);
            return err;
        }
    }
    return s->ops->commit(s);
}

static void run_batch(struct committer *c, struct commit_op *batch, int n)
{
    int64_t t0 = clock_mono_ns();
    int err = apply_all(c, batch, false);
    if (err && err != GPUQ_EIO) {
        /* One op refused its write (e.g. a unique key): redo with one savepoint per op so
         * only that op fails. */
        err = apply_all(c, batch, true);
    }
    pthread_mutex_lock(&c->lock);
    c->stats.batches++;
    c->stats.ops += n;
    if (n > c->stats.max_batch)
        c->stats.max_batch = n;
    pthread_mutex_unlock(&c->lock);
    if (c->observe)
        c->observe(c->observe_arg, n, clock_mono_ns() - t0);
    if (err)
        log_warn(MOD, "batch of %d operations failed: %s", n, gpuq_strerror(err));
    set_health(c, err);
    struct commit_op *next;
    for (struct commit_op *op = batch; op; op = next) {
        next = op->next;
        if (err)
            op->rc = err;
        if (op->rc) {
            pthread_mutex_lock(&c->lock);
            c->stats.failed_ops++;
            pthread_mutex_unlock(&c->lock);
        }
        /* One targeted wake-up per waiter: no herd on a shared condition. */
        if (op->done)
            op->done(op, op->rc);
        else
            sem_post(&op->finished);
    }
}

/* Runs the probe transaction (lock not held). */
static void probe(struct committer *c)
{
    struct commit_op op = {.apply = probe_apply};
    int err = apply_all(c, &op, false);
    pthread_mutex_lock(&c->lock);
    c->stats.probes++;
    pthread_mutex_unlock(&c->lock);
    set_health(c, err);
}

/* The queue holds work to start now: an op that is not lazy, a lazy op that
 * is due, or anything while unhealthy (a lazy op then acts as the probe).
 * Lock held, c->head set. */
static bool work_due(struct committer *c)
{
    return c->eager > 0 || !c->stats.healthy || clock_mono_ns() >= c->lazy_due_ns;
}

static struct timespec mono_timespec(int64_t ns)
{
    struct timespec ts = {.tv_sec = ns / NS_PER_S, .tv_nsec = ns % NS_PER_S};
    return ts;
}

/* Waits for work, lock held. False when it is time to probe instead. */
static bool wait_for_work(struct committer *c)
{
    struct timespec until;
    bool timed = false;
    while (!c->stopping && !(c->head && work_due(c))) {
        c->idle = true;
        c->sleep_until_ns = 0;
        int64_t now;
        if (c->head) {
            /* Only lazy ops, not due yet: sleep until the first is (or an op comes). */
            c->sleep_until_ns = c->lazy_due_ns;
            struct timespec due = mono_timespec(c->lazy_due_ns);
            pthread_cond_timedwait(&c->work, &c->lock, &due);
            timed = false;
        } else if (c->stats.healthy && c->lazy_delay_ns > 0 &&
                   (now = clock_mono_ns()) - c->lazy_seen_ns < LAZY_WATCH_NS) {
            /* Lazy ops came lately: look again after one's delay, so that
             * queueing the next need not wake this thread (see enqueue). */
            c->sleep_until_ns = now + c->lazy_delay_ns;
            struct timespec tick = mono_timespec(c->sleep_until_ns);
            pthread_cond_timedwait(&c->work, &c->lock, &tick);
            timed = false;
        } else if (c->stats.healthy) {
            pthread_cond_wait(&c->work, &c->lock);
            timed = false;
        } else {
            if (!timed) {
                until = mono_timespec(clock_mono_ns() + (int64_t)COMMITTER_PROBE_MS * NS_PER_MS);
                timed = true;
            }
            if (pthread_cond_timedwait(&c->work, &c->lock, &until) != 0 && !c->head &&
                !c->stopping) {
                c->idle = false;
                return false;
            }
        }
        c->idle = false;
    }
    return true;
}

static void *committer_main(void *arg)
{
    struct committer *c = arg;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        if (!wait_for_work(c)) {
            pthread_mutex_unlock(&c->lock);
            probe(c);
            pthread_mutex_lock(&c->lock);
            continue;
        }
        if (!c->head && c->stopping)
            break;
        struct commit_op *batch = c->head, *last = batch;
        int n = 1, eager = batch->lazy_due_ns == 0;
        while (last->next && n < MAX_BATCH) {
            last = last->next;
            n++;
            eager += last->lazy_due_ns == 0;
        }
        c->head = last->next;
        if (!c->head)
            c->tail = NULL;
        last->next = NULL;
        c->eager -= eager;
        c->lazy_due_ns = 0;
        for (struct commit_op *op = c->head; op; op = op->next) /* past MAX_BATCH only */
            if (op->lazy_due_ns && (!c->lazy_due_ns || op->lazy_due_ns < c->lazy_due_ns))
                c->lazy_due_ns = op->lazy_due_ns;
        pthread_mutex_unlock(&c->lock);
        run_batch(c, batch, n);
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

struct committer *committer_create(struct store *s)
{
    struct committer *c = xcalloc(1, sizeof *c);
    c->store = s;
    c->stats.healthy = true;
    atomic_init(&c->healthy, true);
    atomic_init(&c->idle, false);
    pthread_mutex_init(&c->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->work, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&c->thread, NULL, committer_main, c) != 0) {
        log_error(MOD, "cannot start the committer thread");
        abort();
    }
    pthread_setname_np(c->thread, "committer");
    return c;
}

void committer_destroy(struct committer *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->stopping = true;
    pthread_cond_signal(&c->work);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->thread, NULL);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->work);
    free(c);
}

/* Queues op (lock held); returns whether the committer must be woken, which
 * the caller does after unlocking (see wake). */
static bool enqueue(struct committer *c, struct commit_op *op)
{
    op->next = NULL;
    op->rc = 0;
    if (!op->done)
        sem_init(&op->finished, 0, 0);
    if (c->tail)
        c->tail->next = op;
    else
        c->head = op;
    c->tail = op;
    if (!op->lazy_due_ns)
        c->eager++;
    else if (!c->lazy_due_ns || op->lazy_due_ns < c->lazy_due_ns)
        c->lazy_due_ns = op->lazy_due_ns;
    /* A lazy op due no sooner than an idle committer wakes by itself is
     * left to that wake: an early job's insert and assignment then cost
     * the committer no wake-up each (it wakes for the job's result). */
    return c->idle &&
           (!op->lazy_due_ns || !c->sleep_until_ns || op->lazy_due_ns < c->sleep_until_ns);
}

int committer_wait(struct committer *c, struct commit_op *op)
{
    (void)c;
    while (sem_wait(&op->finished) != 0)
        ;
    sem_destroy(&op->finished);
    return op->rc;
}

int committer_run(struct committer *c, struct commit_op *op)
{
    op->done = NULL;
    committer_submit(c, op);
    return committer_wait(c, op);
}

/* Wakes the committer, after the lock is let go: woken under it, the thread
 * would only block on the lock again, a second wake-up. It looks at the
 * queue under the lock before it sleeps, so none is lost. */
static void wake(struct committer *c, bool needed)
{
    if (needed)
        pthread_cond_signal(&c->work);
}

void committer_submit(struct committer *c, struct commit_op *op)
{
    op->lazy_due_ns = 0;
    pthread_mutex_lock(&c->lock);
    bool w = enqueue(c, op);
    pthread_mutex_unlock(&c->lock);
    wake(c, w);
}

void committer_submit_lazy(struct committer *c, struct commit_op *op, int64_t delay_ns)
{
    int64_t now = clock_mono_ns();
    int64_t due = now + (delay_ns > 0 ? delay_ns : 0);
    op->lazy_due_ns = due > 0 ? due : 1;
    pthread_mutex_lock(&c->lock);
    c->lazy_seen_ns = now;
    c->lazy_delay_ns = delay_ns > 0 ? delay_ns : 0;
    bool w = enqueue(c, op);
    pthread_mutex_unlock(&c->lock);
    wake(c, w);
}

void committer_hurry(struct committer *c)
{
    bool w = false;
    pthread_mutex_lock(&c->lock);
    if (c->head && c->lazy_due_ns > 1) {
        c->lazy_due_ns = 1; /* due: work_due compares with the clock */
        w = c->idle;
    }
    pthread_mutex_unlock(&c->lock);
    wake(c, w);
}

void committer_get_stats(struct committer *c, struct committer_stats *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    pthread_mutex_unlock(&c->lock);
}

bool committer_idle(struct committer *c)
{
    return atomic_load_explicit(&c->idle, memory_order_relaxed);
}

bool committer_healthy(struct committer *c)
{
    return atomic_load(&c->healthy);
}

void committer_set_observer(struct committer *c, committer_observe_fn fn, void *arg)
{
    pthread_mutex_lock(&c->lock);
    c->observe = fn;
    c->observe_arg = arg;
    pthread_mutex_unlock(&c->lock);
}
