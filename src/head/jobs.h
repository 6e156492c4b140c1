/* jobs.h: the head's live table of jobs — the in-memory view of what the store
 * has committed, with a condition per job that long-polls and event streams
 * wait on. Jobs enter after their insert is durable; every change is applied
 * here only after the store committed it.
 *
 * Ordering: a writer changes a job here and hands its new record to the
 * committer while holding the table lock, so the store sees the changes in
 * the order memory did; waiters are woken (jobs_changed) once the change is
 * durable; the writer answers its caller after that too. A job inserted but
 * not yet durable has committed == false and is invisible to readers.
 *
 * Locking: one mutex for the table. jobs_lock/jobs_unlock bracket any access
 * to a struct hjob; a pointer from jobs_find is valid while the lock is held
 * (memory is bounded by the retention sweep, which drops finished jobs
 * nobody waits on). */
#ifndef GPUQ_HEAD_JOBS_H
#define GPUQ_HEAD_JOBS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "store/records.h"

struct hjob;

/* A waiter on a suspended connection (long-poll, event stream): fire runs once,
 * with the table lock held, when the job changes; w is unlinked before. */
struct job_watch {
    void (*fire)(struct job_watch *w, struct hjob *j);
    struct job_watch *next;
    /* Fires only when the job ends (a terminal state), is removed, or the
     * table shuts down; other changes leave it watching. A client that waits
     * for the outcome then needs one request, not one per change. */
    bool until_end;
};

struct hjob {
    struct job_rec rec;
    struct job_watch *watchers;
    uint64_t version;       /* bumped on every change; waiters compare */
    int waiters;            /* threads waiting on changed */
    pthread_cond_t changed;
    bool committed;         /* its insert is durable */
    bool completing;        /* a result is being committed: it shows once durable */
    bool timed;             /* on the timed list (jobs_retrack) */
    /* What the table's counts hold for this job (jobs_retrack keeps them equal
     * to committed/state): acct_state -1 = not counted; acct_queue >= 0 the
     * queue group it is counted in while queued, with acct_cost_ms. */
    int8_t acct_state;
    int acct_queue;
    int64_t acct_cost_ms;
    struct hjob *next;      /* hash chain */
    struct hjob *tprev, *tnext; /* timed list */
};

struct jobs;

struct jobs *jobs_create(void);
void jobs_destroy(struct jobs *t);

void jobs_lock(struct jobs *t);
void jobs_unlock(struct jobs *t);

/* With the lock held: */
struct hjob *jobs_find(struct jobs *t, uint64_t id);
/* Idempotency: the job of (tenant, key), or NULL. */
struct hjob *jobs_find_idem(struct jobs *t, int64_t tenant_id, const char *key);
/* Inserts a copy of rec (taking ownership of rec->params_json and attempts). */
struct hjob *jobs_insert(struct jobs *t, struct job_rec *rec);
/* Bumps the version and wakes waiters and watchers. */
void jobs_changed(struct jobs *t, struct hjob *j);
/* Waits until j's version differs from version or deadline (CLOCK_MONOTONIC ns)
 * passes. Returns true if it changed. */
bool jobs_wait(struct jobs *t, struct hjob *j, uint64_t version, int64_t deadline_ns);
/* Watchers (lock held): jobs_watch links w; jobs_unwatch unlinks it and says
 * whether it was still linked (false: it fired, or is firing). */
void jobs_watch(struct jobs *t, struct hjob *j, struct job_watch *w);
bool jobs_unwatch(struct jobs *t, struct hjob *j, struct job_watch *w);
/* Whether anyone waits on j (jobs_wait) or watches it (lock held). */
static inline bool jobs_awaited(const struct hjob *j)
{
    return j->waiters || j->watchers;
}
/* True once jobs_shutdown ran: watch nothing new. */
bool jobs_stopping(struct jobs *t);
/* Removes a job whose insert failed to commit. */
void jobs_remove(struct jobs *t, struct hjob *j);
/* Drops finished jobs that nobody waits on, finished before cutoff_ms, and
 * with max_finished >= 0 the oldest of them beyond max_finished as well
 * (those that finished in the same millisecond as the last one beyond it go
 * with it). Reads fall back to the store, and so does a replay of an
 * idempotency key (head_submit). Puts queued jobs that qualify at rest
 * (jobs_freeze). Returns how many it dropped. Lock held. */
int jobs_sweep(struct jobs *t, int64_t cutoff_ms, long long max_finished);
/* Finished jobs in memory (succeeded, failed, cancelled, dead, expired; lock held). */
long long jobs_finished(struct jobs *t);
/* Wakes every waiter and watcher for good: jobs_wait returns at once from now on. */
void jobs_shutdown(struct jobs *t);
/* Calls fn for every committed job (lock held; fn must not change the table —
 * nor call jobs_find, which brings a resting job back in full). Resting jobs
 * are shown through one scratch struct hjob, valid during the call only. */
void jobs_foreach(struct jobs *t, void (*fn)(void *arg, const struct hjob *j), void *arg);

/* The timed list: every job whose life time alone can change — running
 * (lease, timeout, deadline) or queued with a deadline. jobs_retrack puts j on
 * it or takes it off after a change of state or of committed (lock held), and
 * brings the counts of jobs_queue_stats up to date. */
void jobs_retrack(struct jobs *t, struct hjob *j);
/* A job's insert is durable: it becomes visible and counted (lock held). */
void jobs_mark_committed(struct jobs *t, struct hjob *j);
/* The first job of the timed list and the next (lock held; NULL at the end). */
struct hjob *jobs_timed_first(struct jobs *t);
struct hjob *jobs_timed_next(struct hjob *j);

/* Queued jobs of one (capability, lane, tenant), kept as jobs change state. */
struct jobs_queue {
    char capability[REC_NAME_MAX];
    enum job_lane lane;
    int64_t tenant_id;
    long long depth;        /* committed jobs queued */
    int64_t backlog_ms;     /* the sum of their cost_s, in ms */
};

/* Copies the counts of committed jobs by state and every queue group seen
 * since start (empty ones too) into *v, grown as needed (*cap its capacity;
 * the caller frees *v). Takes the table lock for the copy only: O(groups),
 * never a pass over the jobs. Returns the number of groups. */
int jobs_queue_stats(struct jobs *t, long long states[JOB_NSTATES], struct jobs_queue **v,
                     int *cap);

/* Jobs at rest. A queued job nobody waits on or watches, never attempted,
 * not on the timed list, is kept compactly (about a sixth of a struct hjob:
 * names interned, no fixed-size buffers for what such a job leaves empty);
 * that is how a deep queue fits in memory (issue 20: <= 1 KiB a queued job).
 * It stays in the counts as queued. jobs_find brings it back in full, so to
 * callers it is an ordinary job; the pointer is then valid while the lock is
 * held, as always. jobs_freeze puts j at rest if it qualifies (lock held; j
 * is freed: the caller drops its pointer) and says whether it did;
 * jobs_sweep puts every qualifying job at rest; jobs_foreach shows jobs at
 * rest too. jobs_memory: how many jobs are held in full and at rest. */
bool jobs_freeze(struct jobs *t, struct hjob *j);
/* Recovery: a job the store holds goes straight to rest, counted, if it
 * qualifies — no struct hjob is made — taking what rec owns; false (rec
 * untouched) when it does not: jobs_insert it. */
bool jobs_insert_at_rest(struct jobs *t, struct job_rec *rec);
void jobs_memory(struct jobs *t, size_t *full, size_t *at_rest);

/* Assigns job ids: ids are unique and increasing across restarts. */
void jobs_set_next_id(struct jobs *t, uint64_t next);
uint64_t jobs_next_id(struct jobs *t);

#endif
