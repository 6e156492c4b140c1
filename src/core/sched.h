/* sched.h: the scheduler — the one interface through which gpuqd and gpuq-sim
 * place jobs on GPUs. Pure and deterministic: no I/O, no clocks, no threads;
 * every call takes `now` (monotonic nanoseconds) from its caller.
 *
 * Model of the world:
 * - models: name → VRAM footprint, load time prior, class (generation|utility).
 * - workers: one per GPU (id, capabilities, VRAM, concurrency, loaded models,
 *   telemetry). Refreshed by the caller from registrations and heartbeats.
 * - jobs: queued (global per-capability queues), placed (in one worker's
 *   bounded queue, not started: may still move — late binding, R20), running
 *   (taken by the worker; holds a slot until finished).
 *
 * Lanes (R8): interactive jobs go before batch jobs everywhere — in the
 * queues, and in each worker's placed list (an interactive job is placed
 * ahead of any batch job not yet started). Batch jobs bind late: one is placed
 * only on a worker with a free slot (it starts at once), so no interactive job
 * ever queues behind a batch job that has not started.
 *
 * Flow: sched_job_add → sched_dispatch places queued jobs into worker queues,
 * one decision (with explanation) each → sched_take hands a worker its next
 * placed job (it becomes running) → sched_job_finished frees the slot and
 * feeds the estimator. sched_worker_remove sends a lost worker's placed jobs
 * back to the queue and reports its running ones through the callback.
 *
 * Ownership: struct sched owns copies of everything passed in; pointers it
 * returns (explanations) are valid until the next call that mutates it.
 * One thread owns a struct sched (DESIGN.md: one owner for scheduling state). */
#ifndef GPUQ_CORE_SCHED_H
#define GPUQ_CORE_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/types.h"

#define SCHED_NAME_MAX 64     /* ids, capability tags, model names (incl. NUL) */
#define SCHED_MAX_CAPS 16     /* capabilities per worker */
#define SCHED_MAX_LOADED 16   /* models resident on one GPU */
#define SCHED_EXPLAIN_MAX 16  /* scored candidates kept in one explanation */

/* enum sched_lane, enum sched_tier, enum model_class live in core/types.h. */

/* What the caller knows of a model (config or workload). */
struct model_info {
    char name[SCHED_NAME_MAX];
    int64_t vram_mb;      /* resident footprint */
    int64_t load_ms;      /* prior for the load time until measured */
    enum model_class cls;
};

/* A model resident on a GPU, as the agent reports it. */
struct loaded_model {
    char name[SCHED_NAME_MAX];
    int64_t vram_mb;
    bool pinned;
    int64_t last_used_ns; /* caller's monotonic clock; 0 = unknown */
};

/* A worker (one GPU) as the caller sees it now. */
struct worker_info {
    char id[SCHED_NAME_MAX];
    char gpu_class[SCHED_NAME_MAX];   /* e.g. "NVIDIA GeForce RTX 5090" */
    char caps[SCHED_MAX_CAPS][SCHED_NAME_MAX];
    int ncaps;
    int concurrency;                  /* slots; >= 1 */
    int64_t vram_total_mb;
    int64_t vram_free_mb;
    struct loaded_model loaded[SCHED_MAX_LOADED];
    int nloaded;
    double temp_c;
    bool throttling;                  /* clocks held down (thermal or power) */
    double speed;                     /* measured relative speed; 1.0 = nominal, 0 = unknown */
    bool healthy;
    bool draining;                    /* takes nothing new */
    /* In the reserved interactive pool (R8): a batch job may start here only
     * while no interactive job of its capabilities waits, and only on a free
     * slot, so the GPU is back to interactive work at the batch job's end. */
    bool reserved;
    /* Jobs it holds beyond its slots, each started the moment a slot frees
     * (0 or 1): sched_take may hand it its next job while every slot is
     * taken, so the GPU does not idle between jobs for the round trip of
     * its next request. */
    int ahead;
    /* When its agent last reported it (monotonic ns, the caller's clock):
     * breaker_apply compares it with a runtime restart (core/breaker.h). */
    int64_t reported_ns;
};

/* What the scheduler needs of a job. */
struct job_spec {
    uint64_t id;
    char capability[SCHED_NAME_MAX];
    char model[SCHED_NAME_MAX];
    enum sched_lane lane;
    enum sched_tier tier;
    uint32_t width, height, steps, frames; /* 0 = not given */
    int64_t submit_ns;
    /* Dispatch order within its lane and tier, smaller first: the batch
     * lane's fair-queuing tag from admit_accept (core/admit.h); 0 = submit_ns. */
    int64_t order_ns;
    /* Retry: workers to avoid (those that failed the job). Borrowed for the
     * call: sched_job_add copies them. The scheduler avoids every one of them
     * while another worker of the capability that is alive, healthy, not
     * draining, large enough for the model and not excluded exists; otherwise
     * it may use an excluded one rather than strand the job. */
    const char (*exclude)[SCHED_NAME_MAX];
    int nexclude;
};

/* One scored (or rejected) candidate of a decision. */
struct sched_candidate {
    char worker_id[SCHED_NAME_MAX];
    double score_s;      /* estimated completion time, seconds from now (lower wins) */
    double wait_s;       /* until a slot frees */
    double load_s;       /* model load incl. evictions; 0 when warm */
    double run_s;        /* estimated run time on this GPU */
    double thermal_factor;
    double load_ratio;   /* inflight / concurrency */
    bool warm;
    int evictions;
    double evict_penalty_s; /* reload cost of the models it would evict (added to score_s) */
    double speed;        /* effective speed used for run_s */
};

/* Why a decision came out as it did (R21). */
struct sched_explain {
    uint64_t job_id;
    char winner[SCHED_NAME_MAX]; /* empty: no GPU could take it (stays queued) */
    char reason[160];            /* one line a person can read */
    int ncandidates;             /* candidates scored (may exceed SCHED_EXPLAIN_MAX) */
    int nkept;                   /* entries in cand[], best first */
    struct sched_candidate cand[SCHED_EXPLAIN_MAX];
    int filtered_capability, filtered_vram, filtered_busy, filtered_unhealthy;
};

/* sched_explain_candidate: the scored entry of worker in why (the winner's,
 * given the winner), or NULL when it was not among the kept candidates. */
const struct sched_candidate *sched_explain_candidate(const struct sched_explain *why,
                                                      const char *worker);

struct sched_config {
    int queue_depth;             /* placed-but-not-started jobs per worker (R20); default 2 */
    double hot_temp_c;           /* at/above: thermal penalty applies; default 80 */
    double hot_penalty;          /* multiplier on the wait of a hot GPU; default 2.0 */
    double move_margin_s;        /* late binding moves a job only if it finishes this much
                                    sooner; default 0.25 */
    double evict_weight;         /* weight of evicted models' reload time in the score;
                                    default 1.0 (0 = pure completion time) */
    int free_tier_every;         /* the free tier gets one pick in N when both wait; default 4 */
    /* Interactive headroom (core/headroom.h): a batch job starts on a GPU
     * only while enough GPUs stay free of batch that an interactive job
     * waits longer than headroom_wait_s with a probability of at most
     * headroom_share (Erlang C on the measured interactive load, decayed over
     * headroom_window_s). Defaults 2 s, 0.15, 120 s; headroom_share 0 =
     * off (only the reserved pool's rule). */
    double headroom_wait_s;
    double headroom_share;
    double headroom_window_s;
    /* Preemption (core/preempt.h): an interactive job that would wait longer
     * than this for a GPU running batch work takes that GPU; the batch job is
     * stopped and queued again without blame. Default 0 (off). */
    double preempt_after_s;
    /* A worker that holds a job ahead (worker_info.ahead) is handed its next
     * placed job while its slots are taken only when a running job there is
     * expected to end within this many seconds. That job can no longer move
     * to a GPU that frees sooner, and an interactive job placed there later
     * starts after it: the window bounds both. Default 0.25; 0 = never. */
    double assign_ahead_s;
};

struct sched;

/* sched_config_defaults fills cfg with the documented defaults. */
void sched_config_defaults(struct sched_config *cfg);
struct sched *sched_create(const struct sched_config *cfg);
void sched_destroy(struct sched *s);

/* Models. Adding an existing name replaces its info. */
int sched_model_set(struct sched *s, const struct model_info *m);

/* sched_model_prior: run-time prior for a model — run_s seconds at ref_work
 * (width x height x steps x frames, factors 1 when absent) on a nominal GPU,
 * used until measurements arrive. Optional (default prior: 1 s). */
int sched_model_prior(struct sched *s, const char *model, double run_s, uint32_t width,
                      uint32_t height, uint32_t steps, uint32_t frames);
/* sched_cap_limit: fan-out cap (R14) — while other capabilities have work
 * waiting, jobs of cap occupy at most max_gpus GPUs (0 = no cap). */
int sched_cap_limit(struct sched *s, const char *cap, int max_gpus);
/* sched_cap_slo: cap's latency objective, submit to finish, in seconds (0 =
 * none; it is the default). A job with one waits for a GPU that holds its
 * model rather than push out a model in demand while that still finishes
 * it within the objective's slack share (sched_score.c, rule 9). */
int sched_cap_slo(struct sched *s, const char *cap, double slo_s);

/* Workers: add or refresh; removing returns placed jobs to the queue and
 * calls lost(job_id, arg) for each job running there (caller re-queues or
 * fails them). */
int sched_worker_update(struct sched *s, const struct worker_info *w, int64_t now);
int sched_worker_remove(struct sched *s, const char *worker_id, int64_t now,
                        void (*lost)(uint64_t job_id, void *arg), void *arg);

/* Jobs. */
/* sched_estimate_cost: estimated GPU-seconds for the job on a nominal GPU (R7). */
double sched_estimate_cost(const struct sched *s, const struct job_spec *j);
/* sched_nominal_cost: the job's nominal work in GPU-seconds from its model's
 * configured prior (run_s x size factor) alone — a unit that does not move as
 * the estimator learns, for fair-share tags (admit_request.tag_s). */
double sched_nominal_cost(const struct sched *s, const struct job_spec *j);
/* sched_expected_load_s: the model load the job should expect — 0 when a
 * usable worker of its capability has its model resident, else the model's
 * load time (measured, else its prior). */
double sched_expected_load_s(const struct sched *s, const struct job_spec *j);
int sched_job_add(struct sched *s, const struct job_spec *j, int64_t now);
/* Removes a queued/placed job; a running job is only forgotten (the caller aborts it). */
int sched_job_cancel(struct sched *s, uint64_t job_id, int64_t now);
/* A job's run ended (any outcome): frees its slot; on success feeds the estimator. */
int sched_job_finished(struct sched *s, uint64_t job_id, bool ok, int64_t load_ns,
                       int64_t run_ns, int64_t now);

/* sched_pause: an admin pauses (paused true) or resumes a capability (cap
 * non-NULL: all its lanes) or a lane in every capability (cap NULL, lane an
 * enum sched_lane). Queued jobs of a paused capability or lane are not placed
 * (they are parked, with a reason); placed and running ones go on.
 * sched_paused lists what is paused: cap names into caps (up to max), the
 * lane bits into *lanes; returns the count of paused capabilities. */
int sched_pause(struct sched *s, const char *cap, int lane, bool paused);
int sched_paused(const struct sched *s, char (*caps)[SCHED_NAME_MAX], int max, unsigned *lanes);
/* sched_job_promote moves a queued job to the front of its lane: it is
 * dispatched before every other job of that lane (the latest promoted first);
 * interactive still goes before batch. 0 for a placed or running job (it is
 * past the queue already); GPUQ_ENOENT for a job the scheduler does not hold. */
int sched_job_promote(struct sched *s, uint64_t job_id, int64_t now);

/* Dispatch: place queued jobs into worker queues. Calls placed(job_id,
 * worker_id, explain, arg) for each placement; returns how many were placed. */
int sched_dispatch(struct sched *s, int64_t now,
                   void (*placed)(uint64_t job_id, const char *worker_id,
                                  const struct sched_explain *why, void *arg),
                   void *arg);
/* sched_take: the worker asks for work. Gives its next placed job (now running)
 * in *job_id, or returns GPUQ_EAGAIN when it has none. A worker whose slots
 * are all taken and that may hold a job ahead (worker_info.ahead,
 * sched_config.assign_ahead_s) is given its next placed job to hold: it stays
 * placed there, first, until a slot frees (a running job there finishes or
 * is cancelled, or the worker reports more slots), when it counts as
 * started; sched_held_news tells when. */
int sched_take(struct sched *s, const char *worker_id, int64_t now, uint64_t *job_id);
enum sched_held_what { SCHED_HELD_STARTED = 1, SCHED_HELD_TAKE_BACK = 2 };
/* sched_held_news: what became of a job held ahead since the last call,
 * oldest first: its id in *job_id, what in *what, and 1; 0 when nothing.
 *   SCHED_HELD_STARTED: its worker freed a slot, so it runs from now.
 *   SCHED_HELD_TAKE_BACK: its worker's GPU failed (unhealthy, quarantined)
 *     before it started: like a placed job there (R20), it is the caller's
 *     to take back — end the attempt without blame, tell the worker to drop
 *     it, queue the job again — and to report ended (sched_job_finished), as
 *     any attempt's end. A draining worker keeps it (a drain finishes what
 *     the worker holds).
 * A job that ended meanwhile is not reported. A caller whose workers hold
 * jobs ahead calls it after each change to the scheduler, until 0. */
int sched_held_news(struct sched *s, uint64_t *job_id, enum sched_held_what *what);

/* Introspection for ETAs and metrics. */
struct sched_stats {
    int queued, placed, running, workers;
    double backlog_s;            /* estimated GPU-seconds of queued + placed work */
    int64_t decisions, moves;    /* placements made; late-binding moves among them */
    int64_t holds;               /* decisions that kept a job queued for a full, better GPU */
    int64_t handed_ahead;        /* jobs handed to a busy worker to hold (sched_take) */
    int64_t started_ahead;       /* of those, started when a slot freed */
};
void sched_stats(const struct sched *s, struct sched_stats *out);
/* sched_job_eta: estimated seconds from now until the job starts and finishes
 * (R12), the one ETA gpuqd shows and gpuq-sim measures. Both are -1 (unknown)
 * when no usable worker can hold the job's model (a parked job; see
 * sched_job_parked). Running: its start plus estimated load and run; placed:
 * its worker's projection (running jobs' estimated ends, then the jobs placed
 * before it); queued: the slots of the usable workers that can hold its
 * model free at their projected times (plus the model's load on a worker
 * that will not have it) and then work at their speeds, and the job starts
 * running once they have worked off the jobs queued ahead of it in dispatch
 * order (higher lane/tier, or earlier in the same) in every capability that
 * shares one of those workers; it finishes one run later at their mean speed.
 * Cost: running O(1); placed O(jobs placed on its worker) at most, usually
 * O(1) (the projection is cached until the worker changes); queued
 * O(W x (C log(W x C) + K) + Q log n) for W workers of its capability with C
 * slots and K capabilities each, Q (capability, model) queues and n jobs in
 * the longest of them (the queues keep their cost by order key in trees:
 * core/queue.h) — microseconds for hundreds of
 * GPUs, so it can be called on every read of a job. GPUQ_ENOENT for a job it
 * does not hold. */
int sched_job_eta(const struct sched *s, uint64_t job_id, int64_t now, double *start_s,
                  double *finish_s);
/* sched_refresh brings every worker's projection up to date (those changed
 * since they were last projected); after it, and until the next call that
 * mutates s, sched_fresh is true and sched_job_eta / sched_job_parked write
 * nothing: callers may then run them concurrently under a shared lock.
 * sched_fresh is O(workers). */
void sched_refresh(struct sched *s, int64_t now);
/* sched_lane_rate: the GPU-seconds per second a lane's queued work drains
 * at, 0 = not known: measured (admission's admit_eta_rate: core/admit.h), or
 * else the lane's nominal figure (measured false). A batch job's ETA then
 * assumes the work ahead of it (queued ahead in dispatch order, and batch
 * work already placed or running on the GPUs that could take it) drains no
 * faster: the slots of every usable GPU overstate batch's rate beside
 * interactive work, the reserved pool and its headroom. A nominal figure is
 * further capped by the GPUs the interactive headroom leaves batch now
 * (core/headroom.h), which a measured one already shows. */
int sched_lane_rate(struct sched *s, enum sched_lane lane, double gpu_s_per_s, bool measured);
bool sched_fresh(const struct sched *s);
/* sched_job_parked: true when the job waits because no usable worker of its
 * capability can hold its model (every capable worker is gone, unhealthy,
 * draining or quarantined, or too small); reason (>= 160 bytes, may be NULL)
 * gets one readable line, e.g. "no ready worker serves model video for
 * image.fast". Such jobs do not hold up other jobs; they are looked at again
 * when the fleet changes. */
bool sched_job_parked(const struct sched *s, uint64_t job_id, char *reason, size_t n);

#endif
