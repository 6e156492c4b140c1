/* queue.c: per-capability priority queue, FIFO by order key (see queue.h). */
#include "core/queue.h"

#include <string.h>

static int list_of(const struct sjob *j)
{
    return (int)j->spec.lane * 2 + (int)j->spec.tier;
}

void job_queue_init(struct job_queue *q, int free_every)
{
    memset(q, 0, sizeof(*q));
    q->free_every = free_every >= 2 ? free_every : 2;
}

void job_queue_push(struct job_queue *q, struct sjob *j)
{
    int l = list_of(j);
    j->qlist = l;
    /* In order of sjob_order: from the tail, as most jobs arrive in order (a
     * fair-queuing tag of a light tenant may go further forward). */
    struct sjob *after = q->tail[l];
    while (after && sjob_order(after) > sjob_order(j))
        after = after->prev;
    j->prev = after;
    j->next = after ? after->next : q->head[l];
    if (j->next)
        j->next->prev = j;
    else
        q->tail[l] = j;
    if (after)
        after->next = j;
    else
        q->head[l] = j;
    q->count++;
}

void job_queue_push_front(struct job_queue *q, struct sjob *j)
{
    int l = list_of(j);
    j->qlist = l;
    j->prev = NULL;
    j->next = q->head[l];
    if (q->head[l])
        q->head[l]->prev = j;
    else
        q->tail[l] = j;
    q->head[l] = j;
    q->count++;
}

void job_queue_remove(struct job_queue *q, struct sjob *j)
{
    int l = j->qlist;
    if (j->prev)
        j->prev->next = j->next;
    else
        q->head[l] = j->next;
    if (j->next)
        j->next->prev = j->prev;
    else
        q->tail[l] = j->prev;
    j->prev = j->next = NULL;
    q->count--;
}

struct sjob *job_queue_peek(const struct job_queue *q)
{
    return job_queue_peek_lanes(q, 0);
}

struct sjob *job_queue_peek_lanes(const struct job_queue *q, unsigned skip)
{
    for (int lane = 0; lane < 2; lane++) {
        if (skip & (1u << lane))
            continue;
        struct sjob *paid = q->head[lane * 2 + SCHED_TIER_PAID];
        struct sjob *free_ = q->head[lane * 2 + SCHED_TIER_FREE];
        if (!paid && !free_)
            continue;
        if (!paid)
            return free_;
        if (!free_)
            return paid;
        /* Both wait: the free tier gets one pick in free_every. */
        return (q->picks[lane] % (unsigned)q->free_every) == (unsigned)(q->free_every - 1) ? free_
                                                                                         : paid;
    }
    return NULL;
}

void job_queue_served(struct job_queue *q, struct sjob *j)
{
    q->picks[j->spec.lane]++;
    job_queue_remove(q, j);
}
