/* lifecycle.h: a job's whole life after placement — its states and the legal
 * transitions between them, attempts (the attempt number is the fencing
 * token), per-attempt leases, the retry budget, the set of every worker that
 * failed the job, dead-lettering, deadlines and execution timeouts.
 *
 * Pure and deterministic like the rest of src/core: no I/O, no clocks. Every
 * call takes the caller's time as a struct lc_now (monotonic nanoseconds for
 * leases and timeouts, wall milliseconds for deadlines and the history shown
 * to people). gpuqd and gpuq-sim both keep one struct lc_job per job and
 * change it only through these functions.
 *
 * States and transitions:
 *
 *   QUEUED ──lc_assign──▶ RUNNING ──lc_succeed──▶ SUCCEEDED
 *     ▲                     │ lc_fail / lc_lost / lc_check (lease, timeout)
 *     └──── retry ◀─────────┤──▶ DEAD     (retry budget spent: dead letter)
 *                           │──▶ FAILED   (not retryable: bad_input)
 *   QUEUED|RUNNING ──lc_check(deadline)──▶ EXPIRED
 *   QUEUED|RUNNING ──lc_cancel──▶ CANCELLED
 *   RUNNING ──lc_requeue (head restart, drain)──▶ QUEUED   (no failure counted)
 *   RUNNING ──lc_preempt (an interactive job needs the GPU)──▶ QUEUED (no failure counted)
 *   DEAD|FAILED|EXPIRED ──lc_resubmit (admin)──▶ QUEUED    (budget and history reset)
 *
 * Invariants: state RUNNING ⇔ worker non-empty and attempt >= 1 and
 * lease_until_ns > 0; failures <= attempt; nfailed <= LC_MAX_FAILED and
 * failed[] holds distinct worker ids, oldest first. */
#ifndef GPUQ_CORE_LIFECYCLE_H
#define GPUQ_CORE_LIFECYCLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/sched.h"

#define LC_MAX_FAILED 8       /* workers remembered as having failed a job */
#define LC_CLASS_MAX 16       /* error class, incl. NUL */
#define LC_MESSAGE_MAX 256    /* error message, incl. NUL */

/* Values are stable: they are persisted (store/records.h uses the same numbers). */
enum lc_state {
    LC_QUEUED = 0,
    LC_RUNNING = 1,
    LC_SUCCEEDED = 2,
    LC_FAILED = 3,    /* not retryable (bad_input), or an internal refusal */
    LC_CANCELLED = 4,
    LC_DEAD = 5,      /* dead-lettered: the retry budget is spent */
    LC_EXPIRED = 6,   /* its deadline passed before it finished */
};

/* How an attempt ended. */
enum lc_outcome {
    LC_OUT_RUNNING = 0,   /* not ended */
    LC_OUT_OK,
    LC_OUT_ERROR,         /* the agent reported a failure (class says which) */
    LC_OUT_LEASE,         /* the lease ran out: no heartbeat or progress from its worker */
    LC_OUT_LOST,          /* the worker left, restarted, or no longer reports it */
    LC_OUT_TIMEOUT,       /* ran past the job's execution timeout */
    LC_OUT_DEADLINE,      /* the job's deadline passed while it ran */
    LC_OUT_CANCELLED,
    LC_OUT_REQUEUED,      /* taken back without blame (head restart, drain) */
    LC_OUT_PREEMPTED,     /* stopped so an interactive job could have its GPU (no blame) */
};

/* What the caller must do after a transition. */
enum lc_next {
    LC_NEXT_NONE = 0,     /* nothing changed (or nothing to do) */
    LC_NEXT_RETRY,        /* back to QUEUED: hand it to the scheduler again */
    LC_NEXT_DEAD,         /* dead-lettered */
    LC_NEXT_FAILED,       /* ended failed */
    LC_NEXT_EXPIRED,      /* ended expired */
    LC_NEXT_ABORT,        /* with any of the above for a RUNNING job: tell its worker to stop */
};

struct lc_now {
    int64_t mono_ns;      /* monotonic: leases, timeouts */
    int64_t wall_ms;      /* wall clock: deadlines, history */
};

struct lc_policy {
    int max_attempts;       /* failed attempts allowed before dead-lettering; default 3 */
    int64_t lease_ns;       /* an attempt's lease, renewed by heartbeats and progress; default 30 s */
    int64_t orphan_grace_ns; /* a running job missing from its worker's report is orphaned
                                only when assigned longer ago than this; default 10 s */
};

/* One attempt, as it ended (for the history the shells keep and show). */
struct lc_attempt {
    int n;                               /* attempt number (1-based) */
    char worker[SCHED_NAME_MAX];
    int64_t started_ms, ended_ms;        /* wall */
    enum lc_outcome outcome;
    char error_class[LC_CLASS_MAX];      /* "" on success */
    char error[LC_MESSAGE_MAX];
};

struct lc_job {
    enum lc_state state;
    int attempt;                         /* attempts made; the current one while RUNNING */
    int failures;                        /* attempts that ended in failure (counts to the budget) */
    char worker[SCHED_NAME_MAX];         /* RUNNING: its worker; else the last one ("" none) */
    int nfailed;
    char failed[LC_MAX_FAILED][SCHED_NAME_MAX]; /* workers an attempt failed on */
    int64_t deadline_ms;                 /* wall; 0 = none */
    int64_t timeout_ms;                  /* per-attempt execution timeout; 0 = none */
    /* RUNNING only (not persisted: a restarted head re-queues running jobs) */
    int64_t assigned_ns;                 /* monotonic, when lc_assign ran */
    int64_t started_ms;                  /* wall, when lc_assign ran */
    int64_t lease_until_ns;              /* monotonic */
    int64_t run_deadline_ns;             /* monotonic; 0 = no timeout */
    /* The boot epoch of the shell that handed the current (or last) attempt
     * out (lc_assign_in; 0 = none). Not persisted: a head that restarts draws
     * a new epoch and re-queues what ran, so an attempt number a crashed head
     * handed out but never stored may be handed out again, and only the
     * epoch tells the two apart (lc_fence_epoch). */
    uint64_t epoch;
};

void lc_policy_defaults(struct lc_policy *p);

const char *lc_state_name(enum lc_state s);
int lc_state_parse(const char *s, enum lc_state *out);
const char *lc_outcome_name(enum lc_outcome o);
bool lc_terminal(enum lc_state s);

/* lc_init: a new job, QUEUED. */
void lc_init(struct lc_job *j, int64_t deadline_ms, int64_t timeout_ms);

/* lc_assign: QUEUED → RUNNING on worker with the next attempt number (the
 * fencing token, in j->attempt) and a fresh lease. GPUQ_ECONFLICT when not
 * QUEUED. */
int lc_assign(const struct lc_policy *p, struct lc_job *j, const char *worker,
              struct lc_now now);

/* lc_assign_in: lc_assign by a shell that lives in boot epochs (gpuqd draws a
 * nonzero one at each start): the attempt carries epoch, and lc_fence_epoch
 * refuses any report that names another. lc_assign is lc_assign_in with 0. */
int lc_assign_in(const struct lc_policy *p, struct lc_job *j, const char *worker,
                 uint64_t epoch, struct lc_now now);

/* lc_begin: a RUNNING attempt that waited on its worker until a slot freed
 * there (held ahead, core/sched.h) starts now: its start time, lease and
 * execution timeout count from now. GPUQ_ECONFLICT when not RUNNING. */
int lc_begin(const struct lc_policy *p, struct lc_job *j, struct lc_now now);

/* lc_fence: 0 when (worker, attempt) is the job's current running attempt,
 * GPUQ_ESTALE otherwise. */
int lc_fence(const struct lc_job *j, const char *worker, int attempt);

/* lc_fence_epoch: lc_fence for a report that echoes the epoch its attempt was
 * handed out under (0: the report names none, as from an agent that waits
 * for durable assignments; then only (worker, attempt) count). A named epoch
 * other than the attempt's is GPUQ_ESTALE_EPOCH, checked first: the report
 * comes from an earlier boot, whose attempt number may equal the current
 * one's. Otherwise as lc_fence. */
int lc_fence_epoch(const struct lc_job *j, const char *worker, int attempt, uint64_t epoch);

/* lc_epoch_parse: an echoed epoch as the head wrote it (1 to 16 hex digits,
 * not all zero, which no boot draws) into *out. GPUQ_EINVAL otherwise. */
int lc_epoch_parse(const char *s, uint64_t *out);

/* lc_renew: a heartbeat or progress for the attempt — fenced, extends the lease. */
int lc_renew(const struct lc_policy *p, struct lc_job *j, const char *worker, int attempt,
             struct lc_now now);

/* lc_succeed: fenced RUNNING → SUCCEEDED; fills *ended. */
int lc_succeed(struct lc_job *j, const char *worker, int attempt, struct lc_now now,
               struct lc_attempt *ended);

/* lc_fail: the worker reports the attempt failed with cls ("oom", "cuda",
 * "crash", "hang", "qc", "bad_input", "internal", "cancelled", …). Fenced.
 * The worker joins the failed set (except for bad_input and cancelled, which
 * are not the GPU's fault); then: bad_input → FAILED; a deadline already
 * passed → EXPIRED; failures >= max_attempts → DEAD; else → QUEUED (retry).
 * Fills *ended and *next. */
int lc_fail(const struct lc_policy *p, struct lc_job *j, const char *worker, int attempt,
            const char *cls, const char *message, struct lc_now now, struct lc_attempt *ended,
            enum lc_next *next);

/* lc_lost: the running attempt is gone without a report — its worker left or
 * restarted, or no longer reports it (outcome LC_OUT_LOST), counted like a
 * failure on that worker. GPUQ_ECONFLICT when not RUNNING. */
int lc_lost(const struct lc_policy *p, struct lc_job *j, const char *reason, struct lc_now now,
            struct lc_attempt *ended, enum lc_next *next);

/* lc_requeue: RUNNING → QUEUED without blame (head restart, drain): the
 * attempt ends LC_OUT_REQUEUED, no failure counted, no worker excluded. */
int lc_requeue(struct lc_job *j, const char *reason, struct lc_now now,
               struct lc_attempt *ended);

/* lc_preempt: the scheduler stopped the running attempt (worker, attempt —
 * fenced like every other end) to give its GPU to an interactive job
 * (core/preempt.h): RUNNING → QUEUED, the attempt ends LC_OUT_PREEMPTED with
 * reason as its message; no failure counted, no worker excluded, the retry
 * budget untouched. GPUQ_ESTALE when (worker, attempt) is not the running
 * attempt. */
int lc_preempt(struct lc_job *j, const char *worker, int attempt, const char *reason,
               struct lc_now now, struct lc_attempt *ended);

/* lc_cancel: QUEUED|RUNNING → CANCELLED. *was_running says whether a worker
 * must be told to abort (then *ended describes the attempt). GPUQ_ECONFLICT
 * when already terminal. */
int lc_cancel(struct lc_job *j, struct lc_now now, bool *was_running, struct lc_attempt *ended);

/* lc_check: applies what time alone decides. For a QUEUED or RUNNING job past
 * its deadline → EXPIRED (RUNNING: *next = LC_NEXT_EXPIRED and the attempt ends
 * LC_OUT_DEADLINE; the caller aborts it on its worker). For a RUNNING job
 * whose lease ran out → as lc_fail with outcome LC_OUT_LEASE (class "lease");
 * past its execution timeout → as lc_fail with outcome LC_OUT_TIMEOUT (class
 * "timeout", which does not blame the worker). *ended is filled when an
 * attempt ended. *next is LC_NEXT_NONE when nothing was due. */
void lc_check(const struct lc_policy *p, struct lc_job *j, struct lc_now now,
              struct lc_attempt *ended, enum lc_next *next);

/* lc_next_due_ns: the earliest monotonic time at which lc_check could change
 * the job (lease end, timeout), or 0 when nothing is timed. Deadlines are
 * wall-clock: *deadline_ms gets the job's deadline (0 = none). */
int64_t lc_next_due_ns(const struct lc_job *j, int64_t *deadline_ms);

/* lc_orphaned: the job runs on worker, the worker's latest report does not
 * list it, and it was assigned longer than the grace ago (an assignment in
 * flight is not yet in the report). The caller then calls lc_lost. */
bool lc_orphaned(const struct lc_policy *p, const struct lc_job *j, const char *worker,
                 bool reported, int64_t now_ns);

/* lc_stall_ns: how long the caller itself stood still between two of its
 * checks (SIGSTOP, a paused VM, heavy swapping): the part of the gap since
 * last_check_ns beyond period_ns, the longest a check may normally be late.
 * 0 when checks came on time. During a stall no heartbeat or progress could be
 * heard, so silence then is not the worker's fault: see lc_shift. */
int64_t lc_stall_ns(int64_t last_check_ns, int64_t now_ns, int64_t period_ns);

/* lc_shift: after a stall of gap_ns, a running attempt's lease ends that much
 * later (its execution timeout does not move: the run went on meanwhile). */
void lc_shift(struct lc_job *j, int64_t gap_ns);

/* lc_resubmit: an admin re-runs a DEAD, FAILED or EXPIRED job: QUEUED with its
 * budget and failed set reset (attempt numbers keep growing, so fencing still
 * refuses anything from an old attempt). GPUQ_ECONFLICT otherwise. */
int lc_resubmit(struct lc_job *j, int64_t new_deadline_ms);

/* lc_failed_on: true if an attempt of the job failed on worker. */
bool lc_failed_on(const struct lc_job *j, const char *worker);

/* lc_exclusions: the workers the scheduler must avoid for this job (its
 * failed set), as a job_spec expects them. */
void lc_exclusions(const struct lc_job *j, const char (**list)[SCHED_NAME_MAX], int *n);

#endif
