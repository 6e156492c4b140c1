/* queue.c: per-capability priority queue, FIFO by order key, and each list's
 * cost tree (see queue.h). */
#include "core/queue.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static int list_of(const struct sjob *j)
{
    return (int)j->spec.lane * 2 + (int)j->spec.tier;
}

/* ---- cost trees: treaps by (order key, id), the pointer last ---------- */

static bool key_less(const struct sjob *a, const struct sjob *b)
{
    int64_t oa = sjob_order(a), ob = sjob_order(b);
    if (oa != ob)
        return oa < ob;
    if (a->spec.id != b->spec.id)
        return a->spec.id < b->spec.id;
    return (uintptr_t)a < (uintptr_t)b;
}

static uint32_t prio_of(uint64_t id)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdULL;
    id ^= id >> 33;
    id *= 0xc4ceb9fe1a85ec53ULL;
    id ^= id >> 33;
    return (uint32_t)id;
}

static double tsum(const struct sjob *t)
{
    return t ? t->tsum : 0;
}

static void tfix(struct sjob *t)
{
    t->tsum = tsum(t->tleft) + t->cost_s + tsum(t->tright);
}

/* Splits t into the nodes before n (*l) and the others (*r). */
static void tsplit(struct sjob *t, const struct sjob *n, struct sjob **l, struct sjob **r)
{
    if (!t) {
        *l = *r = NULL;
    } else if (key_less(t, n)) {
        tsplit(t->tright, n, &t->tright, r);
        tfix(t);
        *l = t;
    } else {
        tsplit(t->tleft, n, l, &t->tleft);
        tfix(t);
        *r = t;
    }
}

/* Joins a and b, every key of a below every key of b. */
static struct sjob *tmerge(struct sjob *a, struct sjob *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (a->tprio >= b->tprio) {
        a->tright = tmerge(a->tright, b);
        tfix(a);
        return a;
    }
    b->tleft = tmerge(a, b->tleft);
    tfix(b);
    return b;
}

static struct sjob *tinsert(struct sjob *t, struct sjob *n)
{
    if (!t)
        return n;
    if (n->tprio > t->tprio) {
        tsplit(t, n, &n->tleft, &n->tright);
        tfix(n);
        return n;
    }
    if (key_less(n, t))
        t->tleft = tinsert(t->tleft, n);
    else
        t->tright = tinsert(t->tright, n);
    tfix(t);
    return t;
}

static struct sjob *tremove(struct sjob *t, struct sjob *n)
{
    if (!t)
        return NULL; /* not there: cannot happen while the invariant holds */
    if (t == n)
        return tmerge(n->tleft, n->tright);
    if (key_less(n, t))
        t->tleft = tremove(t->tleft, n);
    else
        t->tright = tremove(t->tright, n);
    tfix(t);
    return t;
}

static void tree_add(struct job_queue *q, struct sjob *j)
{
    j->tleft = j->tright = NULL;
    j->tprio = prio_of(j->spec.id);
    j->tsum = j->cost_s;
    q->root[j->qlist] = tinsert(q->root[j->qlist], j);
}

double job_queue_cost(const struct job_queue *q, int l)
{
    return l >= 0 && l < JOB_QUEUE_LISTS ? tsum(q->root[l]) : 0;
}

double job_queue_cost_ahead(const struct job_queue *q, int l, int64_t order, uint64_t id)
{
    if (l < 0 || l >= JOB_QUEUE_LISTS)
        return 0;
    double sum = 0;
    for (const struct sjob *t = q->root[l]; t;) {
        int64_t o = sjob_order(t);
        if (o < order || (o == order && t->spec.id < id)) {
            sum += tsum(t->tleft) + t->cost_s;
            t = t->tright;
        } else {
            t = t->tleft;
        }
    }
    return sum;
}

/* ---- lists -------------------------------------------------------------- */

void job_queue_init(struct job_queue *q, int free_every)
{
    memset(q, 0, sizeof(*q));
    q->free_every = free_every >= 2 ? free_every : 2;
}

void job_queue_push(struct job_queue *q, struct sjob *j)
{
    int l = list_of(j);
    j->qlist = l;
    /* In order of sjob_order, after equal keys: behind the last job of the
     * list whose key is not above j's, found in the cost tree (a fair-queuing
     * tag of a light tenant may go far forward: no walk from the tail). */
    int64_t key = sjob_order(j);
    struct sjob *after = NULL;
    /* Most jobs come in order (a restart adds a million so): behind the tail
     * when its key is not above j's, without the descent's cache misses. */
    if (q->tail[l] && sjob_order(q->tail[l]) <= key)
        after = q->tail[l];
    for (struct sjob *t = after ? NULL : q->root[l]; t;) {
        if (sjob_order(t) <= key) {
            after = t;
            t = t->tright;
        } else {
            t = t->tleft;
        }
    }
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
    tree_add(q, j);
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
    tree_add(q, j);
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
    q->root[l] = tremove(q->root[l], j);
    j->tleft = j->tright = NULL;
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
