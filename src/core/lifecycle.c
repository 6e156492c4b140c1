/* lifecycle.c: a job's life after placement, behind lifecycle.h — legal
 * transitions, fencing by attempt number, leases, the retry budget, the set of
 * workers that failed the job, dead-lettering, deadlines and timeouts. Pure:
 * every call takes the caller's time. */
#include "core/lifecycle.h"

#include <stdio.h>
#include <string.h>

#include "common/err.h"

#define LC_DEFAULT_MAX_ATTEMPTS 3
#define LC_DEFAULT_LEASE_NS (30LL * 1000000000LL)
#define LC_DEFAULT_ORPHAN_GRACE_NS (10LL * 1000000000LL)

void lc_policy_defaults(struct lc_policy *p)
{
    memset(p, 0, sizeof(*p));
    p->max_attempts = LC_DEFAULT_MAX_ATTEMPTS;
    p->lease_ns = LC_DEFAULT_LEASE_NS;
    p->orphan_grace_ns = LC_DEFAULT_ORPHAN_GRACE_NS;
}

static const char *const state_names[] = {
    [LC_QUEUED] = "queued",       [LC_RUNNING] = "running", [LC_SUCCEEDED] = "succeeded",
    [LC_FAILED] = "failed",       [LC_CANCELLED] = "cancelled", [LC_DEAD] = "dead",
    [LC_EXPIRED] = "expired",
};

const char *lc_state_name(enum lc_state s)
{
    if ((int)s < 0 || (size_t)s >= sizeof(state_names) / sizeof(state_names[0]))
        return "unknown";
    return state_names[s];
}

int lc_state_parse(const char *s, enum lc_state *out)
{
    if (!s || !out)
        return GPUQ_EINVAL;
    for (size_t i = 0; i < sizeof(state_names) / sizeof(state_names[0]); i++)
        if (strcmp(s, state_names[i]) == 0) {
            *out = (enum lc_state)i;
            return 0;
        }
    return GPUQ_EINVAL;
}

const char *lc_outcome_name(enum lc_outcome o)
{
    switch (o) {
    case LC_OUT_RUNNING: return "running";
    case LC_OUT_OK: return "ok";
    case LC_OUT_ERROR: return "error";
    case LC_OUT_LEASE: return "lease_expired";
    case LC_OUT_LOST: return "lost";
    case LC_OUT_TIMEOUT: return "timeout";
    case LC_OUT_DEADLINE: return "deadline";
    case LC_OUT_CANCELLED: return "cancelled";
    case LC_OUT_REQUEUED: return "requeued";
    case LC_OUT_PREEMPTED: return "preempted";
    }
    return "unknown";
}

bool lc_terminal(enum lc_state s)
{
    return s == LC_SUCCEEDED || s == LC_FAILED || s == LC_CANCELLED || s == LC_DEAD ||
           s == LC_EXPIRED;
}

void lc_init(struct lc_job *j, int64_t deadline_ms, int64_t timeout_ms)
{
    memset(j, 0, sizeof(*j));
    j->state = LC_QUEUED;
    j->deadline_ms = deadline_ms > 0 ? deadline_ms : 0;
    j->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
}

static int64_t lease_of(const struct lc_policy *p)
{
    return p && p->lease_ns > 0 ? p->lease_ns : LC_DEFAULT_LEASE_NS;
}

static int max_attempts_of(const struct lc_policy *p)
{
    return p && p->max_attempts > 0 ? p->max_attempts : LC_DEFAULT_MAX_ATTEMPTS;
}

/* A lease end is always > 0 while RUNNING (the invariant), even at time 0. */
static int64_t lease_end(const struct lc_policy *p, int64_t now_ns)
{
    int64_t end = now_ns + lease_of(p);
    return end > 0 ? end : 1;
}

int lc_assign(const struct lc_policy *p, struct lc_job *j, const char *worker,
              struct lc_now now)
{
    return lc_assign_in(p, j, worker, 0, now);
}

/* The running attempt starts now: its start time, lease and execution
 * timeout count from now. */
static void start_clock(const struct lc_policy *p, struct lc_job *j, struct lc_now now)
{
    j->started_ms = now.wall_ms;
    j->lease_until_ns = lease_end(p, now.mono_ns);
    j->run_deadline_ns = j->timeout_ms > 0 ? now.mono_ns + j->timeout_ms * 1000000LL : 0;
}

int lc_assign_in(const struct lc_policy *p, struct lc_job *j, const char *worker,
                 uint64_t epoch, struct lc_now now)
{
    if (!j || !worker || !worker[0])
        return GPUQ_EINVAL;
    if (j->state != LC_QUEUED)
        return GPUQ_ECONFLICT;
    j->state = LC_RUNNING;
    j->attempt++;
    snprintf(j->worker, sizeof(j->worker), "%s", worker);
    j->assigned_ns = now.mono_ns;
    start_clock(p, j, now);
    j->epoch = epoch;
    return 0;
}

int lc_begin(const struct lc_policy *p, struct lc_job *j, struct lc_now now)
{
    if (!j)
        return GPUQ_EINVAL;
    if (j->state != LC_RUNNING)
        return GPUQ_ECONFLICT;
    start_clock(p, j, now);
    return 0;
}

int lc_fence(const struct lc_job *j, const char *worker, int attempt)
{
    if (!j || !worker || j->state != LC_RUNNING || attempt != j->attempt ||
        strcmp(worker, j->worker) != 0)
        return GPUQ_ESTALE;
    return 0;
}

int lc_fence_epoch(const struct lc_job *j, const char *worker, int attempt, uint64_t epoch)
{
    if (j && epoch != 0 && epoch != j->epoch)
        return GPUQ_ESTALE_EPOCH;
    return lc_fence(j, worker, attempt);
}

int lc_epoch_parse(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    size_t n = 0;
    for (; s && s[n]; n++) {
        char c = s[n];
        int d = c >= '0' && c <= '9' ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0 || n >= 16)
            return GPUQ_EINVAL;
        v = v << 4 | (uint64_t)d;
    }
    if (n == 0 || v == 0)
        return GPUQ_EINVAL;
    *out = v;
    return 0;
}

int lc_renew(const struct lc_policy *p, struct lc_job *j, const char *worker, int attempt,
             struct lc_now now)
{
    int rc = lc_fence(j, worker, attempt);
    if (rc)
        return rc;
    int64_t end = lease_end(p, now.mono_ns);
    if (end > j->lease_until_ns)
        j->lease_until_ns = end;
    return 0;
}

/* Ends the running attempt: fills *ended (when given) and clears the
 * RUNNING-only fields. The caller sets the new state. */
static void end_attempt(struct lc_job *j, enum lc_outcome out, const char *cls, const char *msg,
                        struct lc_now now, struct lc_attempt *ended)
{
    if (ended) {
        memset(ended, 0, sizeof(*ended));
        ended->n = j->attempt;
        snprintf(ended->worker, sizeof(ended->worker), "%s", j->worker);
        ended->started_ms = j->started_ms;
        ended->ended_ms = now.wall_ms;
        ended->outcome = out;
        snprintf(ended->error_class, sizeof(ended->error_class), "%s", cls ? cls : "");
        snprintf(ended->error, sizeof(ended->error), "%s", msg ? msg : "");
    }
    j->assigned_ns = 0;
    j->started_ms = 0;
    j->lease_until_ns = 0;
    j->run_deadline_ns = 0;
}

/* Adds worker to the failed set: distinct ids, oldest first; when full the
 * oldest is forgotten. */
static void failed_add(struct lc_job *j, const char *worker)
{
    if (!worker[0] || lc_failed_on(j, worker))
        return;
    if (j->nfailed == LC_MAX_FAILED) {
        memmove(j->failed[0], j->failed[1], (size_t)(LC_MAX_FAILED - 1) * sizeof(j->failed[0]));
        j->nfailed--;
    }
    snprintf(j->failed[j->nfailed], sizeof(j->failed[0]), "%s", worker);
    j->nfailed++;
}

static bool blames_worker(const char *cls)
{
    return strcmp(cls, "bad_input") != 0 && strcmp(cls, "cancelled") != 0 &&
           strcmp(cls, "timeout") != 0;
}

static bool deadline_passed(const struct lc_job *j, struct lc_now now)
{
    return j->deadline_ms > 0 && now.wall_ms >= j->deadline_ms;
}

/* The running attempt failed (cls, outcome out): blame, count, and decide
 * what comes next. */
static void fail_running(const struct lc_policy *p, struct lc_job *j, enum lc_outcome out,
                         const char *cls, const char *msg, struct lc_now now,
                         struct lc_attempt *ended, enum lc_next *next)
{
    if (!cls || !cls[0])
        cls = "internal";
    if (blames_worker(cls))
        failed_add(j, j->worker);
    j->failures++;
    end_attempt(j, out, cls, msg, now, ended);
    enum lc_next n;
    if (strcmp(cls, "bad_input") == 0) {
        j->state = LC_FAILED;
        n = LC_NEXT_FAILED;
    } else if (deadline_passed(j, now)) {
        j->state = LC_EXPIRED;
        n = LC_NEXT_EXPIRED;
    } else if (j->failures >= max_attempts_of(p)) {
        j->state = LC_DEAD;
        n = LC_NEXT_DEAD;
    } else {
        j->state = LC_QUEUED;
        n = LC_NEXT_RETRY;
    }
    if (next)
        *next = n;
}

int lc_succeed(struct lc_job *j, const char *worker, int attempt, struct lc_now now,
               struct lc_attempt *ended)
{
    int rc = lc_fence(j, worker, attempt);
    if (rc)
        return rc;
    end_attempt(j, LC_OUT_OK, "", "", now, ended);
    j->state = LC_SUCCEEDED;
    return 0;
}

int lc_fail(const struct lc_policy *p, struct lc_job *j, const char *worker, int attempt,
            const char *cls, const char *message, struct lc_now now, struct lc_attempt *ended,
            enum lc_next *next)
{
    if (next)
        *next = LC_NEXT_NONE;
    int rc = lc_fence(j, worker, attempt);
    if (rc)
        return rc;
    fail_running(p, j, LC_OUT_ERROR, cls, message, now, ended, next);
    return 0;
}

int lc_lost(const struct lc_policy *p, struct lc_job *j, const char *reason, struct lc_now now,
            struct lc_attempt *ended, enum lc_next *next)
{
    if (next)
        *next = LC_NEXT_NONE;
    if (!j)
        return GPUQ_EINVAL;
    if (j->state != LC_RUNNING)
        return GPUQ_ECONFLICT;
    fail_running(p, j, LC_OUT_LOST, "lost", reason, now, ended, next);
    return 0;
}

int lc_requeue(struct lc_job *j, const char *reason, struct lc_now now,
               struct lc_attempt *ended)
{
    if (!j)
        return GPUQ_EINVAL;
    if (j->state != LC_RUNNING)
        return GPUQ_ECONFLICT;
    end_attempt(j, LC_OUT_REQUEUED, "", reason, now, ended);
    j->state = LC_QUEUED;
    return 0;
}

int lc_preempt(struct lc_job *j, const char *worker, int attempt, const char *reason,
               struct lc_now now, struct lc_attempt *ended)
{
    int rc = lc_fence(j, worker, attempt);
    if (rc)
        return rc;
    end_attempt(j, LC_OUT_PREEMPTED, "", reason, now, ended);
    j->state = LC_QUEUED;
    return 0;
}

int lc_cancel(struct lc_job *j, struct lc_now now, bool *was_running, struct lc_attempt *ended)
{
    if (was_running)
        *was_running = false;
    if (!j)
        return GPUQ_EINVAL;
    if (lc_terminal(j->state))
        return GPUQ_ECONFLICT;
    if (j->state == LC_RUNNING) {
        if (was_running)
            *was_running = true;
        end_attempt(j, LC_OUT_CANCELLED, "cancelled", "cancelled", now, ended);
    }
    j->state = LC_CANCELLED;
    return 0;
}

void lc_check(const struct lc_policy *p, struct lc_job *j, struct lc_now now,
              struct lc_attempt *ended, enum lc_next *next)
{
    enum lc_next n = LC_NEXT_NONE;
    if (!j || (j->state != LC_QUEUED && j->state != LC_RUNNING)) {
        if (next)
            *next = n;
        return;
    }
    if (deadline_passed(j, now)) {
        if (j->state == LC_RUNNING)
            end_attempt(j, LC_OUT_DEADLINE, "deadline", "the job's deadline passed while it ran",
                        now, ended);
        j->state = LC_EXPIRED;
        n = LC_NEXT_EXPIRED;
    } else if (j->state == LC_RUNNING) {
        bool lease_out = now.mono_ns >= j->lease_until_ns;
        bool timed_out = j->run_deadline_ns > 0 && now.mono_ns >= j->run_deadline_ns;
        /* Both due: the one that came first decides. */
        if (timed_out && (!lease_out || j->run_deadline_ns <= j->lease_until_ns)) {
            char msg[LC_MESSAGE_MAX];
            snprintf(msg, sizeof(msg), "ran past its execution timeout of %lld ms",
                     (long long)j->timeout_ms);
            fail_running(p, j, LC_OUT_TIMEOUT, "timeout", msg, now, ended, &n);
        } else if (lease_out) {
            char msg[LC_MESSAGE_MAX];
            snprintf(msg, sizeof(msg), "lease expired: no heartbeat or progress for %.1f s",
                     (double)lease_of(p) / 1e9);
            fail_running(p, j, LC_OUT_LEASE, "lease", msg, now, ended, &n);
        }
    }
    if (next)
        *next = n;
}

int64_t lc_next_due_ns(const struct lc_job *j, int64_t *deadline_ms)
{
    if (deadline_ms)
        *deadline_ms = j && !lc_terminal(j->state) ? j->deadline_ms : 0;
    if (!j || j->state != LC_RUNNING)
        return 0;
    int64_t due = j->lease_until_ns;
    if (j->run_deadline_ns > 0 && j->run_deadline_ns < due)
        due = j->run_deadline_ns;
    return due;
}

bool lc_orphaned(const struct lc_policy *p, const struct lc_job *j, const char *worker,
                 bool reported, int64_t now_ns)
{
    if (!j || !worker || reported || j->state != LC_RUNNING || strcmp(worker, j->worker) != 0)
        return false;
    int64_t grace = p && p->orphan_grace_ns >= 0 ? p->orphan_grace_ns
                                                 : LC_DEFAULT_ORPHAN_GRACE_NS;
    return now_ns - j->assigned_ns > grace;
}

int64_t lc_stall_ns(int64_t last_check_ns, int64_t now_ns, int64_t period_ns)
{
    if (last_check_ns <= 0 || now_ns - last_check_ns <= period_ns)
        return 0;
    return now_ns - last_check_ns - period_ns;
}

void lc_shift(struct lc_job *j, int64_t gap_ns)
{
    if (j && j->state == LC_RUNNING && gap_ns > 0)
        j->lease_until_ns += gap_ns;
}

int lc_resubmit(struct lc_job *j, int64_t new_deadline_ms)
{
    if (!j)
        return GPUQ_EINVAL;
    if (j->state != LC_DEAD && j->state != LC_FAILED && j->state != LC_EXPIRED)
        return GPUQ_ECONFLICT;
    j->state = LC_QUEUED;
    j->failures = 0;
    j->nfailed = 0;
    memset(j->failed, 0, sizeof(j->failed));
    j->deadline_ms = new_deadline_ms > 0 ? new_deadline_ms : 0;
    j->assigned_ns = 0;
    j->started_ms = 0;
    j->lease_until_ns = 0;
    j->run_deadline_ns = 0;
    return 0;
}

bool lc_failed_on(const struct lc_job *j, const char *worker)
{
    if (!j || !worker)
        return false;
    for (int i = 0; i < j->nfailed; i++)
        if (strcmp(j->failed[i], worker) == 0)
            return true;
    return false;
}

void lc_exclusions(const struct lc_job *j, const char (**list)[SCHED_NAME_MAX], int *n)
{
    if (!j || j->nfailed == 0) {
        *list = NULL;
        *n = 0;
        return;
    }
    *list = (const char(*)[SCHED_NAME_MAX])j->failed;
    *n = j->nfailed;
}
