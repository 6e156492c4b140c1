/* committer.h: group commit. Many writers hand the committer thread small
 * operations; it applies every waiting operation in one transaction and one
 * fsync, then releases them all. A lone operation commits at once; under
 * load, batches grow while the previous fsync runs, so fsyncs per operation
 * shrink. A 2xx that depends on an operation is sent only after it returns 0.
 *
 * An operation whose apply fails is undone alone (the batch is retried with
 * one savepoint per operation) and reports its error; the others commit.
 *
 * Health: a batch that fails as a whole (the store cannot write: disk full,
 * I/O error) makes the committer unhealthy. While unhealthy and idle it probes
 * every COMMITTER_PROBE_MS with a tiny write transaction (it rewrites the
 * results row of job 0, which no job has: job ids start at 1); the first
 * batch or probe that commits makes it healthy again. The committer only
 * reports its health: operations submitted meanwhile are still tried, and
 * fail with the store's error while it cannot write.
 *
 * Lazy operations (committer_submit_lazy) are writes nobody waits on, whose
 * loss in a crash is already allowed for (an early assignment: the agent has
 * the job before its commit, docs/protocol-worker.md). They keep their place
 * in the queue but start no transaction of their own until their delay runs
 * out: the next operation that is waited on commits them with it in its
 * transaction. So a fast job's assignment rides in its result's commit
 * instead of an fsync of its own that the result would queue behind; and a
 * result no client waits on yet (its agent's answer does wait, but loses
 * nothing: the agent reports again until answered) rides in the next submit's
 * commit, so a client submitting back to back does not queue behind results.
 * committer_hurry makes them due when someone starts waiting. */
#ifndef GPUQ_STORE_COMMITTER_H
#define GPUQ_STORE_COMMITTER_H

#include <semaphore.h>
#include <stdbool.h>
#include <stdint.h>

#include "store/store.h"

struct commit_op {
    /* Writes this operation's rows; runs on the committer thread inside a transaction. */
    int (*apply)(struct store *s, struct commit_op *op);
    /* Async operations only: called on the committer thread after the commit (or failure).
     * The op may be freed inside. NULL for operations waited on with committer_run. */
    void (*done)(struct commit_op *op, int rc);
    void *arg;
    /* private */
    int rc;
    int64_t lazy_due_ns;       /* 0, or (lazy) when it must be committed by, monotonic */
    sem_t finished;            /* posted once, for ops waited on with committer_wait */
    struct commit_op *next;
};

#define COMMITTER_PROBE_MS 500

struct committer_stats {
    long long batches, ops, failed_ops;
    int max_batch;
    long long failed_batches, probes;
    bool healthy;
    int last_error;              /* of the failure that made it unhealthy; 0 while healthy */
    int64_t unhealthy_since_ns;  /* monotonic; 0 while healthy */
};

struct committer;

struct committer *committer_create(struct store *s);
/* Commits what is pending, stops the thread, frees. The store stays open. */
void committer_destroy(struct committer *c);
/* Submits op and waits until it is durable (0) or failed (negative GPUQ_E*). */
int committer_run(struct committer *c, struct commit_op *op);
/* Submits op. With op->done set, done is called when it is durable or failed;
 * with op->done NULL the submitter must call committer_wait. */
void committer_submit(struct committer *c, struct commit_op *op);
/* Submits an async op (done set) lazily: it is committed with the next
 * non-lazy op's batch, or after delay_ns at the latest (at once while the
 * committer is unhealthy). Queue order is kept either way. */
void committer_submit_lazy(struct committer *c, struct commit_op *op, int64_t delay_ns);
/* Makes the lazy ops queued now due at once (someone started waiting on one). */
void committer_hurry(struct committer *c);
/* Waits for an op submitted with done == NULL; returns its result. */
int committer_wait(struct committer *c, struct commit_op *op);
void committer_get_stats(struct committer *c, struct committer_stats *out);
/* fn(arg, n, ns) runs on the committer thread after each batch: n operations
 * committed (or failed) in ns, fsync included. Set it before the first submit. */
typedef void (*committer_observe_fn)(void *arg, int n, int64_t ns);
void committer_set_observer(struct committer *c, committer_observe_fn fn, void *arg);
/* True while the committer thread waits for work: nothing it must commit now
 * is queued, so an op submitted now starts a transaction at once (lock-free;
 * any thread; a hint, already old when read). */
bool committer_idle(struct committer *c);
/* True unless the last batch or probe failed (lock-free; any thread). */
bool committer_healthy(struct committer *c);

#endif
