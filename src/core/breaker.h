/* breaker.h: the per-GPU circuit breaker (R30). A worker whose attempts keep
 * failing is quarantined: it takes no work for a cool-down, then one probe job
 * (half-open); the probe's success closes the breaker, its failure opens it
 * again for twice as long (up to a ceiling). Every change carries a reason a
 * person can read, for the log, metrics and the worker's view.
 *
 *   CLOSED ──failures within window, or failures of the last window_attempts──▶ OPEN
 *                                                               (quarantined)
 *   OPEN ──cool-down passed, breaker_allows──▶ HALF_OPEN (one probe at a time)
 *   HALF_OPEN ──probe ok──▶ CLOSED          HALF_OPEN ──probe fails──▶ OPEN
 *
 * Pure: the caller passes `now` (monotonic ns). Which failures count is decided
 * here (breaker_counts): the GPU's own faults (oom, cuda, crash, hang, qc,
 * lease, lost), not the caller's (bad_input, cancelled, timeout). */
#ifndef GPUQ_CORE_BREAKER_H
#define GPUQ_CORE_BREAKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/sched.h"

#define BREAKER_MAX_WINDOW 32   /* failures remembered within the window */
#define BREAKER_MAX_ATTEMPTS 64 /* attempts remembered for the attempt-count rule */

enum breaker_state { BREAKER_CLOSED = 0, BREAKER_OPEN, BREAKER_HALF_OPEN };

enum breaker_event {
    BREAKER_EV_NONE = 0,
    BREAKER_EV_OPENED,     /* quarantined */
    BREAKER_EV_PROBING,    /* cool-down over: one probe job allowed */
    BREAKER_EV_CLOSED,     /* recovered */
};

struct breaker_policy {
    int failures;             /* failures within window that open it; default 3 (0 = never) */
    int64_t window_ns;        /* default 60 s */
    int64_t cooldown_ns;      /* first quarantine; default 60 s, doubled per failed probe */
    int64_t max_cooldown_ns;  /* default 15 min */
    /* Attempt-count rule: also open when at least `failures` of the last
     * `window_attempts` counted attempts (ok, or failed by the GPU's fault) on
     * the worker failed, however long they took. Default 10 (0 = rule off;
     * at most BREAKER_MAX_ATTEMPTS). Makes quarantine independent of load:
     * the time window alone lets a slow trickle of failures through. */
    int window_attempts;
};

/* Invariants: nfail <= BREAKER_MAX_WINDOW, fail_ns[] ascending; open_until_ns
 * meaningful in OPEN only; probe_inflight only in HALF_OPEN; nattempts <=
 * BREAKER_MAX_ATTEMPTS, bit i of `outcomes` (i < nattempts) is 1 when the
 * i-th most recent counted attempt failed; both reset when it opens or closes. */
struct breaker {
    enum breaker_state state;
    int64_t fail_ns[BREAKER_MAX_WINDOW];
    int nfail;
    int64_t open_until_ns;
    int64_t cooldown_ns;      /* the current one (doubles on a failed probe) */
    bool probe_inflight;
    int64_t trips;            /* times it opened */
    uint64_t outcomes;        /* recent attempts, newest in bit 0: 1 = failed */
    int nattempts;            /* how many bits of `outcomes` are meaningful */
    char reason[160];         /* why it is in its state now */
    /* When an attempt ended in a fault after which the agent restarts the
     * GPU's runtime (breaker_restarts); 0 = none awaits the worker's next
     * report. Until then it takes nothing new (breaker_apply). */
    int64_t restart_ns;
};

void breaker_policy_defaults(struct breaker_policy *p);
void breaker_init(struct breaker *b);
const char *breaker_state_name(enum breaker_state s);

/* breaker_counts: whether a failure of this class is the GPU's fault. */
bool breaker_counts(const char *error_class);

/* breaker_restarts: whether the agent restarts the GPU's runtime after a
 * failure of this class (crash, hang; oom and cuda, whose CUDA context is not
 * trusted after them: R27). The agent decides its restarts with it too. */
bool breaker_restarts(const char *error_class);

/* breaker_record: an attempt on this worker ended (ok, or failed with cls).
 * Returns the transition it caused; b->reason says why. A failure that
 * restarts the runtime also sets b->restart_ns, whatever the state. */
enum breaker_event breaker_record(const struct breaker_policy *p, struct breaker *b, bool ok,
                                  const char *error_class, int64_t now_ns);

/* breaker_tick: OPEN past its cool-down → HALF_OPEN (BREAKER_EV_PROBING). */
enum breaker_event breaker_tick(const struct breaker_policy *p, struct breaker *b,
                                int64_t now_ns);

/* breaker_assigned: a job was given to this worker (in HALF_OPEN, it is the probe). */
void breaker_assigned(struct breaker *b);

/* breaker_apply: what the scheduler may see of the worker — OPEN: not healthy;
 * HALF_OPEN: one slot, and none while the probe runs. Whatever the state,
 * draining while its runtime restarts: from b->restart_ns until a report of
 * the worker at or after it (w->reported_ns: a heartbeat, which says whether
 * the runtime is back, or a poll, which an agent sends only for a ready
 * worker), which ends the wait (restart_ns back to 0). Without that, a retry
 * could be handed to a GPU whose runtime just died with it, on the strength
 * of a report from before the death, such as a poll sent while the job ran. */
void breaker_apply(struct breaker *b, struct worker_info *w);

/* breaker_awaits_report: a runtime restart waits for the worker's next
 * report (the caller then passes each report to breaker_apply). */
bool breaker_awaits_report(const struct breaker *b);

/* breaker_next_due_ns: when breaker_tick could next change it (0 = never). */
int64_t breaker_next_due_ns(const struct breaker *b);

#endif
