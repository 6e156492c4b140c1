/* queue.h: one capability's queue of waiting jobs, ordered by lane then tier
 * then order key (sjob_order: the fair-queuing tag, else arrival). Interactive always goes before batch (R8); within a lane the
 * paid tier goes first, but every free_every-th pick serves the free tier when
 * it waits, so the lower tier is never starved (R9).
 * Besides the FIFO lists, each list's jobs are in a tree by (order key, id)
 * whose nodes sum their subtree's cost_s (a treap, priorities from the job id),
 * so the work ahead of any job in a list is O(log n) (job_queue_cost_ahead).
 * Invariant: count = total of the four FIFO lists; jobs are linked through
 * sjob.prev/next and job->qlist names their list; root[l] holds exactly the
 * jobs of list l, and a job's cost_s and order key do not change while it is
 * queued. Borrows the jobs. */
#ifndef GPUQ_CORE_QUEUE_H
#define GPUQ_CORE_QUEUE_H

#include "core/job.h"

#define JOB_QUEUE_LISTS 4

struct job_queue {
    struct sjob *head[JOB_QUEUE_LISTS], *tail[JOB_QUEUE_LISTS];
    struct sjob *root[JOB_QUEUE_LISTS]; /* each list's tree by (order key, id) */
    int count;
    unsigned picks[2]; /* per lane: picks made, drives the free-tier share */
    int free_every;    /* >= 2 */
};

void job_queue_init(struct job_queue *q, int free_every);
/* job_queue_push inserts by order key (after equal keys); push_front puts a job back at the head of its list
 * (a placed job returning keeps its place ahead of newer arrivals). */
void job_queue_push(struct job_queue *q, struct sjob *j);
void job_queue_push_front(struct job_queue *q, struct sjob *j);
void job_queue_remove(struct job_queue *q, struct sjob *j);
/* job_queue_peek returns the job the queue would serve next, or NULL. */
struct sjob *job_queue_peek(const struct job_queue *q);
/* job_queue_peek_lanes: the same, leaving out the lanes whose bit (1 << lane)
 * is set in skip (paused lanes). */
struct sjob *job_queue_peek_lanes(const struct job_queue *q, unsigned skip);
/* job_queue_served records that the peeked job was taken (removes it). */
void job_queue_served(struct job_queue *q, struct sjob *j);
/* job_queue_cost: cost_s summed over list l (lane * 2 + tier); O(1). */
double job_queue_cost(const struct job_queue *q, int l);
/* job_queue_cost_ahead: cost_s summed over the jobs of list l whose (order
 * key, id) is below (order, id); O(log n) expected. */
double job_queue_cost_ahead(const struct job_queue *q, int l, int64_t order, uint64_t id);

#endif
