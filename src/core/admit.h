/* admit.h: admission and fair share (R7, R10, R11, R13) — whether a job may
 * enter the queue now, and in which order the batch lane's tenants are served.
 * Pure and deterministic like the scheduler: no I/O, no clocks, no threads;
 * every call takes `now` (monotonic nanoseconds) from its caller. gpuqd (the
 * submit path) and gpuq-sim call the same functions.
 *
 * Units: work is estimated GPU-seconds on a nominal GPU (admit_job_cost: the
 * estimator's run time plus the expected model load). Throughput is GPU-seconds
 * delivered per second.
 *
 * Rules, in the order admit_decide checks them:
 * 1. Too large (a 4xx, not a 429): a job whose own cost exceeds its lane's wait
 *    bound, or a batch job whose cost exceeds its tenant's token-bucket burst,
 *    could never be admitted; it is refused for good, naming why.
 * 2. Per-key concurrency cap: a tenant may have at most max_inflight jobs
 *    admitted and not yet ended (0 = no cap).
 * 3. Token bucket (batch lane only): a tenant's bucket holds up to burst_gpu_s
 *    and refills at rate_gpu_s_per_min; a job takes its cost from it. Too few
 *    tokens: 429, Retry-After = the time the bucket needs to hold the cost.
 * 4. Lane wait bound: the job's estimated wait must stay within max_wait_s of
 *    its lane. Interactive: the lane's queued work (plus rooms promised to
 *    refused clients, see below) over the lane's throughput. Batch: the
 *    tenant's own queued work over its fair share of the batch throughput
 *    (throughput x weight / sum of the weights of tenants with work queued,
 *    itself included) — so a flooding tenant fills only its own share of the
 *    queue and never locks another tenant out. Over the bound: 429 with
 *    Retry-After = the time that much work needs to drain at that rate.
 *
 * Honest Retry-After: a refusal books the job's room at the time it was
 *    given (admit_refuse); later requests see the booked work as if queued, so
 *    a second refused client is sent after the first instead of at the same
 *    instant. Rooms are planned in line: a new one no earlier than the latest
 *    room plus its own cost at the rate now (when the rate rose since, the
 *    excess alone would put it at the latest room's instant, and a crowd
 *    admitted at once overruns the bound together). Retry-After is told in
 *    whole seconds rounded up (what the header can say; verdict.room_s is the
 *    planned time before rounding, and the next room is planned after that,
 *    so rounding does not pile up along the line); the room is due at the
 *    time told. A booking is held until its time plus booking_grace_s; a
 *    retry that names its booking (admit_request.booking, e.g. a hash of the
 *    client's idempotency key) and comes at its time (within the grace; a
 *    millisecond early counts as on time) is admitted: the promise is kept
 *    even when the queue drained slower than estimated (the bound governs new
 *    requests). One that comes early is told the rest of its wait.
 *
 * Measured throughput (per lane): the GPU-seconds delivered while work waited
 *    over the seconds work waited, both decayed over 5 throughput windows of
 *    such busy time — so an idle spell neither dilutes nor forgets it, and a
 *    promise minutes or hours ahead does not ride a minute's swing of the
 *    interactive load beside it. Used once the lane has had work waiting 5
 *    windows; until then the nominal figure (admit_capacity), which the
 *    measured one follows in proportion when the fleet changes.
 *
 * Fair share (virtual-time fair queuing, start-time tags): each tenant has a
 *    virtual finish F; a batch job admitted at virtual time V gets the tag
 *    S = max(V, F) and moves F to S + tag_s / weight (the job's nominal work,
 *    else its cost). The scheduler serves the
 *    batch lane in tag order (job_spec.order_ns = the tag); V is the largest
 *    tag that started (admit_dequeued). Under contention each tenant receives
 *    GPU-seconds in proportion to its weight; an idle tenant accumulates no
 *    credit (its F is raised to V when it comes back).
 *
 * What the head (and the simulator) calls, when:
 *   at start and on configuration: admit_create(policy), admit_tenant_set per
 *     [tenant.NAME]; when the fleet changes: admit_capacity (nominal GPU-seconds
 *     per second that can serve each lane: the sum of the usable GPUs' speeds x
 *     slots; interactive counts every GPU that serves it, batch the unreserved
 *     ones).
 *   on submit, before storing anything: cost = admit_job_cost(...);
 *     admit_decide(&req) → ADMIT_OK: admit_accept (gives order_ns for the job's
 *     job_spec), then store and queue the job; if the store fails,
 *     admit_dequeued + admit_ended (as a cancel) undo it. ADMIT_RETRY:
 *     admit_refuse (books the room) and answer 429 with Retry-After =
 *     retry_after_s (already whole seconds). ADMIT_TOO_LARGE: answer 4xx
 *     with why.
 *   when a job leaves the queue (it starts running, or is cancelled while
 *     queued): admit_dequeued(cost, order_ns).
 *   when a job ends (any outcome, cancel included): admit_ended(delivered =
 *     its cost when it ran to success, else 0); delivered work drives the
 *     measured throughput.
 *   for the API: admit_backlog_each (backlog per capability, lane, tenant),
 *     admit_throughput, admit_tenant_budget (R13 capacity per batch tenant).
 * Ownership: struct admit owns copies of what is passed in; one thread at a
 * time (the head holds a mutex around it). */
#ifndef GPUQ_CORE_ADMIT_H
#define GPUQ_CORE_ADMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/sched.h"
#include "core/types.h"

#define ADMIT_LANES 2

/* One tenant's terms. name "" is the default for tenants not configured. */
struct admit_tenant_policy {
    char name[SCHED_NAME_MAX];
    double weight;             /* fair-share weight among batch tenants; > 0; default 1 */
    double rate_gpu_s_per_min; /* token bucket refill (batch lane); 0 = no limit; default 0 */
    double burst_gpu_s;        /* bucket size; 0 = one minute of rate; default 0 */
    int max_inflight;          /* jobs admitted and not ended; 0 = no cap; default 0 */
};

struct admit_policy {
    /* Per lane (enum sched_lane): estimated wait beyond which submits get 429;
     * 0 = no bound. Defaults: interactive 600 s, batch 14400 s (4 h). */
    double max_wait_s[ADMIT_LANES];
    /* GPU-seconds per second assumed for a lane while none is known (no GPU
     * registered yet); default 8. */
    double assumed_capacity;
    double min_retry_s;      /* Retry-After floor; default 1 */
    double booking_grace_s;  /* a booked room is held this long past its time; default 10 */
    double throughput_tau_s; /* measured throughput spans 5 of these of busy time; default 60 */
    struct admit_tenant_policy tenant_default; /* weight 1, no rate, no cap */
};

struct admit_request {
    const char *tenant;     /* name; NULL or "" = the default tenant */
    const char *capability; /* for the backlog figures */
    enum sched_lane lane;
    double cost_s;          /* estimated GPU-seconds (admit_job_cost); >= 0 */
    uint64_t booking;       /* nonzero: identifies a client's retry (its key's hash) */
    /* The job's nominal work for its fair-share tag (sched_nominal_cost: the
     * configured prior, a unit that does not move as the estimate learns);
     * 0 = cost_s. Tags charged at the moving estimate inflate the early
     * tags of whichever tenant came first and drift the shares. */
    double tag_s;
};

enum admit_outcome {
    ADMIT_OK = 0,
    ADMIT_RETRY = 1,     /* 429: wait retry_after_s and submit again */
    ADMIT_TOO_LARGE = 2, /* 4xx: never admissible as it stands */
};

enum admit_reason {
    ADMIT_R_NONE = 0,
    ADMIT_R_LANE_WAIT,   /* estimated wait over the lane's bound */
    ADMIT_R_RATE,        /* the tenant's GPU-second rate (token bucket) */
    ADMIT_R_INFLIGHT,    /* the tenant's concurrency cap */
    ADMIT_R_JOB_COST,    /* one job costs more than the lane's bound */
    ADMIT_R_BURST,       /* one job costs more than the tenant's bucket holds */
};

struct admit_verdict {
    enum admit_outcome outcome;
    enum admit_reason reason;
    double retry_after_s;   /* ADMIT_RETRY: when to come back, in whole seconds
                               (>= min_retry_s): the header's value */
    double room_s;          /* ADMIT_RETRY: when the room is planned, before that
                               rounding (<= retry_after_s) */
    double wait_s;          /* estimated wait of this job if admitted now */
    double bound_s;         /* the lane's bound */
    double backlog_gpu_s;   /* queued work the wait was computed from */
    double throughput;      /* GPU-seconds per second it drains at */
    char why[200];          /* one line a person can read */
};

struct admit;

void admit_policy_defaults(struct admit_policy *p);
struct admit *admit_create(const struct admit_policy *p);
void admit_destroy(struct admit *a);

/* Adds or replaces a tenant's terms (name "" changes the default). GPUQ_EINVAL
 * on weight <= 0 or a negative rate, burst or cap. */
int admit_tenant_set(struct admit *a, const struct admit_tenant_policy *tp);
/* admit_tenant_get: the terms that apply to tenant (the default if not set). */
void admit_tenant_get(const struct admit *a, const char *tenant, struct admit_tenant_policy *out);

/* Nominal throughput of a lane's GPUs (GPU-seconds per second); used until
 * and unless the measured figure is established (lane busy 5 windows). A
 * change scales the measured figure by new / old nominal.
 * While a lane's throughput is 0 (no GPU yet), waits are computed as if
 * assumed_capacity served it. */
int admit_capacity(struct admit *a, enum sched_lane lane, double gpu_s_per_s, int64_t now);

/* The estimated cost of a job: run time plus the expected model load. */
double admit_job_cost(double run_s, double expected_load_s);

/* The verdict for req now; changes nothing. */
int admit_decide(const struct admit *a, const struct admit_request *req, int64_t now,
                 struct admit_verdict *v);
/* Records an admitted job (queued work, tokens, in-flight count; consumes its
 * booking) and gives its dispatch order key for job_spec.order_ns (the
 * fair-queuing tag for batch; for interactive, now). */
int admit_accept(struct admit *a, const struct admit_request *req, int64_t now,
                 int64_t *order_ns);
/* Records a refusal v (ADMIT_RETRY) of req: books its room at now + v->retry_after_s. */
int admit_refuse(struct admit *a, const struct admit_request *req, const struct admit_verdict *v,
                 int64_t now);
/* Takes back an admission that came to nothing (the job was not stored, or a
 * batch it belonged to was refused as a whole): its queued work, in-flight
 * count and backlog entry, the tokens it took (up to the bucket's size), and
 * its tenant's virtual finish when its tag was the tenant's latest — so undo
 * the jobs of a batch in reverse order of admission. order_ns: what
 * admit_accept gave. */
void admit_undo(struct admit *a, const struct admit_request *req, int64_t order_ns,
                int64_t now);
/* How honest a Retry-After was: the seconds by which req's estimated wait
 * would exceed its lane's bound now if it were judged on the queue alone —
 * the work queued and the rooms booked for clients due before it (its own
 * booking and later ones left out), and the tokens its tenant holds. <= 0:
 * room is there now. Changes nothing. */
int admit_room(const struct admit *a, const struct admit_request *req, int64_t now,
               double *excess_s);
/* A job left the queue (started, or cancelled while waiting). */
void admit_dequeued(struct admit *a, const char *tenant, const char *capability,
                    enum sched_lane lane, double cost_s, int64_t order_ns, int64_t now);
/* A job ended; delivered_gpu_s > 0 feeds the lane's measured throughput when
 * work of the lane is still queued (delivered while work waited). */
void admit_ended(struct admit *a, const char *tenant, enum sched_lane lane,
                 double delivered_gpu_s, int64_t now);

/* Throughput used for lane now (measured when established, else nominal). */
double admit_throughput(const struct admit *a, enum sched_lane lane, int64_t now);
/* The rate for ETAs (sched_lane_rate): what lane delivered while its work
 * waited, over one throughput_tau_s of such time, once it has had work
 * waiting that long (*measured true, when given); until then
 * admit_throughput (*measured false). admit_throughput averages five
 * windows so that a Retry-After minutes ahead holds; an ETA is read again
 * on every look at the job, so it follows the interactive load beside batch
 * within one. */
double admit_eta_rate(const struct admit *a, enum sched_lane lane, int64_t now, bool *measured);
/* Queued GPU-seconds: capability NULL = all, lane < 0 = both, tenant NULL = all. */
double admit_backlog(const struct admit *a, const char *capability, int lane, const char *tenant);
/* Calls fn for each (capability, lane, tenant) with queued work or jobs. */
void admit_backlog_each(const struct admit *a,
                        void (*fn)(const char *capability, enum sched_lane lane,
                                   const char *tenant, double gpu_s, int jobs, void *arg),
                        void *arg);
/* R13: GPU-seconds per minute a batch tenant can be promised when every
 * configured tenant (and the default, once) wants its share: batch throughput
 * x 60 x weight / sum of weights of the tenants set with admit_tenant_set
 * (plus this tenant if it is not one of them). */
double admit_tenant_budget(const struct admit *a, const char *tenant, int64_t now);

#endif
