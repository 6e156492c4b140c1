/* head.h: gpuqd's state — configuration, store and committer, the live job
 * table, tenants, the worker registry, the catalog of served pairs and the
 * dispatcher — and the operations the API layer calls. Each part has its own
 * lock; the scheduler's state and the breakers belong to the dispatcher
 * thread alone. */
#ifndef GPUQ_HEAD_HEAD_H
#define GPUQ_HEAD_HEAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "common/token.h"
#include "core/catalog.h"
#include "head/config.h"
#include "head/jobs.h"
#include "head/registry.h"
#include "head/tenants.h"
#include "store/committer.h"
#include "store/store.h"

/* A commit nobody waits on yet — an early assignment's, or the insert of a
 * job whose submit answers only at its end — waits at most this long for a
 * commit to share (committer_submit_lazy): short enough that watchers see it
 * durable soon, long enough to cover a short job's run and its result's trip,
 * whose commit then carries it (one fsync, not two). */
#define LAZY_COMMIT_DELAY_MS 10

struct admission;
struct batches;
struct dispatcher;
struct fleet;
struct scale;
struct http_server;
struct timers;

struct head {
    struct head_config cfg;
    struct store *store;
    struct committer *committer;
    struct jobs *jobs;
    struct tenants *tenants;
    struct registry *registry;
    struct dispatcher *disp;
    struct http_server *http;
    struct timers *timers;
    struct batches *batches;     /* head/batches.h */
    struct admission *admission; /* head/admission.h: verdicts at submit, lanes' capacity */
    struct fleet *fleet;          /* recent decisions, for the fleet view (fleet.h) */
    struct scale *scale;          /* the autoscaling advisor (scale.h); NULL: off */
    /* (capability, model) pairs workers declared, persisted; guarded by catalog_lock. */
    pthread_mutex_t catalog_lock;
    struct catalog *catalog;
    char admin_hash[TOKEN_HASH_HEX];
    /* This process's boot: boot_epoch random and nonzero at start, epoch the
     * same as 16 hex digits (0 and "" in tests that build a head by hand).
     * Every attempt this boot hands out carries it (lc_assign_in). Agents
     * that poll with early=1 get assignments before they are durable, tagged
     * with it, and echo it on every outcome: one naming an earlier boot is
     * refused by the core's fence (lc_fence_epoch), so an attempt number a
     * crashed head handed out but never stored cannot be fenced in twice. */
    uint64_t boot_epoch;
    char epoch[17];
    atomic_bool ready;
    atomic_bool stopping;
};

/* Who is calling, after authentication. */
enum caller_kind { CALLER_NONE, CALLER_TENANT, CALLER_ADMIN, CALLER_WORKER };

struct caller {
    enum caller_kind kind;
    struct tenant_rec tenant; /* CALLER_TENANT */
};

/* head_authenticate classifies a bearer credential (NULL = none). */
void head_authenticate(struct head *h, const char *bearer, struct caller *out);


/* What the dispatcher tells the head (its thread; no scheduler lock is taken). */
/* The attempt running on worker is gone (the worker left): lc_lost. */
void head_lost(struct head *h, uint64_t job_id, const char *worker, const char *reason);
/* An assignment could not be stored: the attempt is taken back without blame. */
void head_assign_failed(struct head *h, uint64_t job_id, const char *worker, int attempt);
/* A job its worker held ahead (core/sched.h, sched_held_news) started there:
 * its attempt's start time, lease and execution timeout count from now. */
void head_held_started(struct head *h, uint64_t job_id);
/* Its worker's GPU failed before it started the job it held ahead: the
 * attempt ends requeued (no failure counted), the worker is told to
 * drop it (the cancel list), and the job is queued again once stored. */
void head_held_take_back(struct head *h, uint64_t job_id);
/* The scheduler preempted job_id's running attempt on worker for interactive
 * job for_job (core/preempt.h): the attempt ends preempted (no failure
 * counted, retry budget untouched), the worker is told to stop it, the job is
 * queued again, and one JSON line is logged. 0, or GPUQ_ESTALE when the job no
 * longer runs there (it ended meanwhile). */
int head_preempt(struct head *h, uint64_t job_id, const char *worker, uint64_t for_job,
                 double lost_gpu_s, const char *reason);
/* Applies what time alone decides (leases, timeouts, deadlines) to every timed job. */
void head_tick(struct head *h);
/* The head stood still for gap_ns (lc_stall_ns: stopped, paused, swapping):
 * running attempts' leases and workers' TTLs move that much later, so nobody
 * is blamed for a silence the head could not have heard. Dispatcher thread. */
void head_stalled(struct head *h, int64_t gap_ns);

#endif
