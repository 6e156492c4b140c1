/* timer.c: the timer thread (see timer.h): a binary min-heap of deadlines. */
#include "timer.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "alloc.h"
#include "clock.h"
#include "heap.h"
#include "log.h"

struct timer_entry {
    int64_t deadline;
    void (*fire)(void *arg);
    void *arg;
};

struct timers {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct heap heap; /* of struct timer_entry, earliest deadline first */
    bool stopping;
};

static int by_deadline(const void *a, const void *b)
{
    const struct timer_entry *x = a, *y = b;
    return (x->deadline > y->deadline) - (x->deadline < y->deadline);
}

static void *timers_main(void *arg)
{
    struct timers *t = arg;
    pthread_mutex_lock(&t->lock);
    for (;;) {
        const struct timer_entry *top = heap_peek(&t->heap);
        if (t->stopping && !top)
            break;
        if (!top) {
            pthread_cond_wait(&t->cond, &t->lock);
            continue;
        }
        int64_t now = clock_mono_ns();
        if (!t->stopping && top->deadline > now) {
            int64_t d = top->deadline;
            struct timespec ts = {.tv_sec = d / NS_PER_S, .tv_nsec = d % NS_PER_S};
            pthread_cond_timedwait(&t->cond, &t->lock, &ts);
            continue;
        }
        struct timer_entry e;
        heap_pop(&t->heap, &e);
        pthread_mutex_unlock(&t->lock);
        e.fire(e.arg);
        pthread_mutex_lock(&t->lock);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

struct timers *timers_create(void)
{
    struct timers *t = xcalloc(1, sizeof *t);
    pthread_mutex_init(&t->lock, NULL);
    heap_init(&t->heap, sizeof(struct timer_entry), by_deadline);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&t->thread, NULL, timers_main, t) != 0) {
        log_error("timer", "cannot start the timer thread");
        abort();
    }
    pthread_setname_np(t->thread, "timers");
    return t;
}

void timers_destroy(struct timers *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    t->stopping = true;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    heap_fini(&t->heap);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cond);
    free(t);
}

void timers_add(struct timers *t, int64_t deadline_ns, void (*fire)(void *arg), void *arg)
{
    pthread_mutex_lock(&t->lock);
    const struct timer_entry *top = heap_peek(&t->heap);
    bool earliest = !top || deadline_ns < top->deadline;
    struct timer_entry e = {deadline_ns, fire, arg};
    heap_push(&t->heap, &e);
    if (earliest)
        pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
}
