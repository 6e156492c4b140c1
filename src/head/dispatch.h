/* dispatch.h: the dispatcher — the owner of the scheduler's state
 * (core/sched.h). Other threads hand it messages; it places jobs, hands
 * assignments to agents' waiting long-polls, expires silent workers and
 * publishes queue figures, in rounds: on its own thread, or, while that
 * sleeps, on the thread of a request that handed it a message (an agent's
 * poll, dispatcher_run), one round at a time. An assignment is committed to
 * the store before the agent sees it (early polls: see dispatcher_poll). */
#ifndef GPUQ_HEAD_DISPATCH_H
#define GPUQ_HEAD_DISPATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/sched.h"
#include "store/records.h"

struct head;
struct dispatcher;

struct dispatcher *dispatcher_create(struct head *h);
/* Stops the thread and releases every waiting poll (they return GPUQ_EAGAIN);
 * later calls are dropped. Call before stopping the HTTP server. */
void dispatcher_stop(struct dispatcher *d);
void dispatcher_destroy(struct dispatcher *d);

void dispatcher_job_add(struct dispatcher *d, const struct job_rec *rec);
/* Many queued jobs at once (recovery of a deep queue): dispatcher_adds_put
 * collects a job (one with exclusions goes on its own, as dispatcher_job_add)
 * and hands the collected ones over every DISPATCH_ADDS_CHUNK jobs, in one
 * message; dispatcher_adds_post hands over the rest (call it at the end). Per
 * job that is a spec in an array instead of a message and a lock round trip. */
#define DISPATCH_ADDS_CHUNK 8192
struct dispatch_adds {
    struct job_spec *specs;
    int n, cap;
};
void dispatcher_adds_put(struct dispatcher *d, struct dispatch_adds *a, const struct job_rec *rec);
void dispatcher_adds_post(struct dispatcher *d, struct dispatch_adds *a);
/* As dispatcher_job_add, then fn(arg, rc, start_s, finish_s, why) with the job's
 * ETA (sched_job_eta) once the round that takes it placed what it could (fn
 * must not call the dispatcher's locking readers). At shutdown: rc
 * GPUQ_EAGAIN. later: the dispatcher is not woken for it; the caller, which
 * may hold locks now, calls dispatcher_run once it holds none. */
typedef void (*dispatch_eta_fn)(void *arg, int rc, double start_s, double finish_s,
                                const char *why);
void dispatcher_job_add_eta(struct dispatcher *d, const struct job_rec *rec, dispatch_eta_fn fn,
                            void *arg, bool later);
/* Sees to what is queued: while the dispatcher thread sleeps and a poll
 * waits, runs a round on the calling thread (which holds no lock; the
 * round's callbacks run on it), unless another round runs or a timed duty of
 * the thread is due; otherwise it wakes the thread. */
void dispatcher_run(struct dispatcher *d);
void dispatcher_job_cancel(struct dispatcher *d, uint64_t job_id);
/* An attempt on worker_id ended: frees its slot, lowers the worker's inflight
 * count, and (cls non-NULL: "" for success) records it on the worker's breaker. */
void dispatcher_job_finished(struct dispatcher *d, uint64_t job_id, const char *worker_id,
                             bool ok, const char *cls, int64_t load_ns, int64_t run_ns);
/* A successful attempt's result reached the head and waits for its commit:
 * frees the worker's slot in the scheduler now (the agent freed it when it
 * queued the result) and learns the run's times, so the worker's next job
 * does not wait for this commit. Nothing else: dispatcher_job_finished
 * follows once the result is durable (and, if it never is, the attempt's
 * retried report or its lease ends it as before). */
void dispatcher_job_released(struct dispatcher *d, uint64_t job_id, const char *worker_id,
                             int64_t load_ns, int64_t run_ns);
/* The registry changed for this worker (registered, heartbeat). */
void dispatcher_worker_update(struct dispatcher *d, const char *worker_id);
/* The worker left (deregistered): placed jobs go back to the queue, running ones are re-queued. */
void dispatcher_worker_remove(struct dispatcher *d, const char *worker_id);

/* Most assignments one early poll is answered with, and most workers it
 * may name (an agent's group poll). */
#define DISPATCH_POLL_MAX 16
#define DISPATCH_POLL_WORKERS 16

/* A worker an agent's poll asks for, and the most assignments it may take. */
struct dispatch_poll_worker {
    char id[SCHED_NAME_MAX];
    int max;
};

/* An agent's long-poll: answer(arg, 0, recs, 1) once the worker has a
 * durable assignment, or answer(arg, GPUQ_EAGAIN, NULL, 0) at deadline_ns
 * (monotonic) or shutdown. Exactly once, from the committer, dispatcher or
 * timer thread, or from the caller's (dispatcher_run: the caller holds no
 * lock); recs are valid during the call only. early: answer as soon as
 * the assignment is made and queued for commit, without waiting for it to be
 * durable (from the round) — only for agents that echo the head's
 * epoch on every outcome (see struct head). An early poll may name several
 * workers (1..DISPATCH_POLL_WORKERS; without early only ws[0] counts, max 1):
 * it is answered once any of them has work, with what the scheduler has
 * placed on each at that moment, up to its max and DISPATCH_POLL_MAX in all;
 * each rec names its worker (rec.lc.worker). */
typedef void (*dispatch_answer_fn)(void *arg, int rc, const struct job_rec *recs, int n);
void dispatcher_poll(struct dispatcher *d, const struct dispatch_poll_worker *ws, int nws,
                     int64_t deadline_ns, bool early, dispatch_answer_fn answer, void *arg);

/* The core's ETA of a queued or running job (sched_job_eta): seconds from now;
 * start_s < 0 when no GPU can take it now, with why (sched_job_parked; size
 * >= 160) saying so. GPUQ_ENOENT if the scheduler has no such job. */
int dispatcher_job_eta(struct dispatcher *d, uint64_t job_id, double *start_s, double *finish_s,
                       char *why, size_t size);

/* An admin's pause or resume (sched_pause), a listing of what is paused
 * (sched_paused), and moving a queued job to the front (sched_job_promote):
 * applied at once under the scheduler's lock, then the dispatcher runs a
 * round. */
int dispatcher_pause(struct dispatcher *d, const char *cap, int lane, bool paused);
int dispatcher_paused(struct dispatcher *d, char (*caps)[SCHED_NAME_MAX], int max,
                      unsigned *lanes);
int dispatcher_job_promote(struct dispatcher *d, uint64_t job_id);

/* Estimated GPU-seconds of the job on a nominal GPU (R7), from measured history. */
/* The job's estimated GPU-seconds; *nominal_s (when given) gets its nominal
 * work from the model's prior alone (sched_nominal_cost). */
double dispatcher_estimate_cost(struct dispatcher *d, const struct job_rec *rec, double *nominal_s);

struct dispatch_stats {
    struct sched_stats sched;
    int ready_workers;
    long long decisions;
    double decision_us_last;
};
void dispatcher_get_stats(struct dispatcher *d, struct dispatch_stats *out);

#endif
