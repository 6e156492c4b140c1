/* sched_int.h: the scheduler's internal state, shared by sched.c (state
 * transitions), sched_score.c (projection and scoring) and sched_explain.c.
 * Not for use outside src/core. */
#ifndef GPUQ_CORE_SCHED_INT_H
#define GPUQ_CORE_SCHED_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/hashmap.h"
#include "common/heap.h"
#include "core/estimator.h"
#include "core/job.h"
#include "core/queue.h"
#include "core/sched.h"

#define SCHED_DEFAULT_LOAD_MS 5000
/* Projection of resident models may hold the loaded ones plus one per queued job. */
#define SCHED_PROJ_MAX (SCHED_MAX_LOADED + 8)

struct smodel {
    struct model_info info;
    bool configured; /* set by sched_model_set (else learned from a report) */
    bool interactive; /* an interactive job was ever submitted for it (rule 17) */
    /* Usable workers, and those of them that can hold it, counted at fleet
     * version homes_ver (0 = never; sched_score.c: model_scarcity). */
    int homes, usable;
    uint64_t homes_ver;
};

/* A capability: its queue, its workers with room ("open"), fan-out state.
 * Invariants: open[] holds exactly the member workers for which worker_open()
 * holds, each once; usable <= members; occupied = members with cap_jobs > 0. */
/* An entry of a capability's heap of full workers, by when they next free a
 * slot. Stale when ver differs from the worker's (it changed since). */
struct full_entry {
    int64_t ready_ns;
    uint64_t seq;
    uint32_t ver;
    struct sworker *w;
};

/* The waiting jobs of one (capability, model) pair. A capability's jobs are
 * split by model so that a model no worker can take now never holds up the
 * jobs of another (no head-of-line blocking across models). A queue whose
 * model no usable member of the capability can hold is parked: dispatch skips
 * it until the fleet changes (parked_ver != sched.fleet_ver), then looks
 * again. Invariant: cost_s = sum of its jobs' cost_s. */
struct squeue {
    int cap, model;
    struct job_queue q;
    double cost_s;
    uint64_t parked_ver; /* fleet version at which it was found unservable; 0 = never */
    /* Demand (all lanes): arrivals and their nominal GPU-seconds, decayed
     * over cfg.headroom_window_s, as of d_ns (sched_score.c: eviction_cost). */
    double d_count, d_work;
    int64_t d_ns;
};

struct scap {
    char name[SCHED_NAME_MAX];
    struct heap full; /* lazy min-heap of full (usable, not open) member workers */
    int nqueued;      /* its jobs waiting, over all its models' queues */
    int nqueued_interactive; /* of them, interactive (a reserved GPU lends to batch only at 0) */
    struct sworker **open;
    int nopen, capopen;
    int members, usable;
    int occupied;
    int max_gpus; /* fan-out cap, 0 = none */
    double slo_s; /* latency objective, submit to finish; 0 = none */
    bool interactive; /* an interactive job was ever submitted to it (rule 13) */
    int64_t batch_start_ns; /* when a batch job of it last started (rule 10); 0 = never */
    bool paused;  /* by an admin: its queued jobs are not placed */
    /* Interactive arrivals (core/headroom.h): count and nominal GPU-seconds,
     * decayed over cfg.headroom_window_s, as of ia_ns; and the same over
     * several of those windows (the load a batch ETA forecasts: headroom.c,
     * sched_headroom_batch_rate). */
    double ia_count, ia_work;
    double ia_count_l, ia_work_l;
    int64_t ia_first_ns; /* the first interactive arrival */
    int64_t ia_ns;
};

/* A worker (one GPU). Invariants: nplaced/nrunning count the placed/run
 * lists; open_pos[k] is w's index in caps[k]'s open list or -1; cap_jobs[k]
 * counts placed + running jobs of caps[k]; loaded_model[i] indexes
 * info.loaded[i]'s model. The projection (slots, proj_*, ready_ns, all_free_ns,
 * placed jobs' est_start_ns) is valid while !dirty. */
struct sworker {
    struct worker_info info;
    uint64_t seq; /* registration order: last tie-break */
    uint32_t ver; /* bumped whenever its full_entry would change */
    bool alive;   /* registered (false while being removed) */
    int ix;       /* index in sched.workers */
    int caps[SCHED_MAX_CAPS];
    int ncaps;
    int open_pos[SCHED_MAX_CAPS];
    int cap_jobs[SCHED_MAX_CAPS];
    int loaded_model[SCHED_MAX_LOADED];
    int gpu_class;
    double learned_speed;
    struct sjob *placed_head, *placed_tail;
    int nplaced;
    struct sjob *run_head;
    int nrunning;
    /* projection */
    bool dirty;
    int64_t *slots; /* nslots >= concurrency */
    int nslots;
    int proj_model[SCHED_PROJ_MAX];
    int64_t proj_vram[SCHED_PROJ_MAX];
    int64_t proj_used[SCHED_PROJ_MAX];
    bool proj_pinned[SCHED_PROJ_MAX];
    bool proj_inuse[SCHED_PROJ_MAX];
    int nproj;
    int64_t proj_free_mb;
    int64_t ready_ns;    /* a new job could start (absolute, may be < now) */
    int64_t overdue_ns;  /* the earliest projected end of a running job: from then on
                            the projection is stale (sched_project_now) */
    int64_t all_free_ns; /* every slot is free */
};

struct sched {
    struct sched_config cfg;
    struct smodel *models;
    int nmodels, capmodels;
    struct scap *caps;
    int ncaps, capcaps;
    struct sworker **workers;
    int nworkers, capworkers;
    uint64_t next_worker_seq;
    int nclasses;
    struct squeue *queues;
    int nqueues, capqueues;
    uint64_t fleet_ver; /* bumped when workers or models change what can be served */
    struct hashmap model_ix, cap_ix, class_ix, worker_ix, jobs, queue_ix;
    struct estimator *est;
    int nqueued, nplaced, nrunning;
    int nexcl_placed;          /* placed jobs with on_excluded set */
    uint64_t excl_checked_ver; /* fleet_ver at the last look at those jobs */
    double backlog_s;
    /* What became of jobs held ahead, not yet collected by
     * sched_held_news, oldest first. */
    struct held_news {
        uint64_t job_id;
        enum sched_held_what what;
    } *news;
    int nnews, capnews;
    int64_t decisions, moves, holds;
    int64_t handed_ahead, started_ahead;
    int64_t now; /* latest `now` seen (projection base for bookkeeping) */
    unsigned paused_lanes; /* bit 1 << lane: that lane's queued jobs are not placed */
    int64_t npromoted;     /* jobs moved to the front so far (orders the next one first) */
    struct sched_explain why; /* last explanation (valid until next mutation) */
    /* The fastest open worker of the capability being decided (sched_decide;
     * 0 elsewhere): rule 7 weighs displacement on slower GPUs less. */
    double speed_ref;
    /* Why the interactive headroom last kept a batch job off a GPU (for the
     * explanation of a batch job no GPU took); "" when it did not. */
    char headroom_why[160];
    /* The GPU-seconds per second a lane's queued work drains at
     * (sched_lane_rate; 0 = not known): batch ETAs do not assume more.
     * Measured, or the lane's nominal figure (then the headroom caps it). */
    double lane_rate[2];
    bool lane_measured[2];
    /* Cost caches (no rule reads them; each is exact while its key holds):
     * idle_bits: bit i is set for every worker i that may have a free slot
     * and nothing placed (late binding's candidates, sched_dispatch step 1):
     * set whenever a worker may become one (a placed or running job leaves
     * it, a report), cleared by dispatch when it finds it is not — so that a
     * decision does not walk all 1,000 workers to find the few free ones. */
    uint64_t *idle_bits;
    int idle_words;
    /* The dispatch round's per-queue "skip" marks (reused, not allocated per
     * dispatch). */
    bool *blocked;
    int capblocked;
    /* Run-time estimates of the job being decided, per GPU class
     * (sched_decide; run_memo_job NULL elsewhere): the estimator does not
     * change during a decision, and a decision asks the same (model, class,
     * work) of every worker of a class. Valid where run_memo_gen[class] ==
     * run_memo_cur. */
    const struct sjob *run_memo_job;
    double *run_memo;
    uint64_t *run_memo_gen;
    uint64_t run_memo_cur;
    int caprunmemo;
};

int sched_model_index(struct sched *s, const char *name, int64_t vram_hint);
/* sched_queue_servable: some alive, usable member worker of q's capability can
 * hold q's model (one pass over the workers). */
bool sched_queue_servable(const struct sched *s, const struct squeue *q);
/* sched_parked: q was found unservable and the fleet has not changed since. */
bool sched_parked(const struct sched *s, const struct squeue *q);
/* w is registered, healthy and not draining: work may go to it. */
static inline bool sched_worker_live(const struct sworker *w)
{
    return w->alive && w->info.healthy && !w->info.draining;
}

/* w reports model loaded. */
static inline bool sched_worker_holds(const struct sworker *w, int model)
{
    for (int i = 0; i < w->info.nloaded; i++)
        if (w->loaded_model[i] == model)
            return true;
    return false;
}

int sched_worker_cap_slot(const struct sworker *w, int cap);
void sched_worker_sync_open(struct sched *s, struct sworker *w);
/* sched_unplace takes a placed job off its worker (it is then in no list). */
void sched_unplace(struct sched *s, struct sjob *j);
/* sched_commit places j on w with the estimates of candidate c. */
void sched_commit(struct sched *s, struct sjob *j, struct sworker *w,
                  const struct sched_candidate *c);

/* sched_bind_front: places interactive job j (queued, or placed elsewhere)
 * on w ahead of the batch jobs placed there, with w's estimates for it; the
 * preemption that frees a slot of w is then for j. GPUQ_EAGAIN when w cannot
 * take it. */
int sched_bind_front(struct sched *s, struct sjob *j, struct sworker *w, int64_t now);

/* sched_full_top: the usable full worker of cap that frees soonest, or NULL. */
struct sworker *sched_full_top(struct sched *s, int cap);

/* sched_work_ahead: GPU-seconds queued ahead of queued job j in dispatch
 * order in the queues of the capabilities marked in shares (indexed by
 * capability). */
double sched_work_ahead(const struct sched *s, const struct sjob *j, const bool *shares);
/* headroom.c: sched_headroom_note counts an interactive arrival of c;
 * sched_headroom_blocks: starting a batch job on w now would leave fewer
 * GPUs free of batch than the interactive headroom of a capability of w
 * (why, when given, gets the reason). */
struct scap;
void sched_headroom_note(struct sched *s, struct scap *c, double cost_s, int64_t now);
bool sched_headroom_blocks(const struct sched *s, const struct sworker *w, int64_t now, char *why,
                           size_t n);
/* sched_headroom_batch_rate: the GPU-seconds per second batch work of
 * capability cap can have while the headroom rule holds now — the speeds
 * of its usable GPUs but the best ones sched_headroom_blocks keeps free of
 * batch, less the interactive work that overflows the headroom onto them,
 * for the interactive load forecast over a few headroom windows and
 * averaged over that load's spread (the headroom is a step function of
 * it); -1 while cap has no headroom (no interactive load measured). A batch ETA
 * assumes no more (sched.c: eta_queued): beside interactive work, the
 * headroom, not the GPUs' count, sets batch's rate. */
double sched_headroom_batch_rate(const struct sched *s, int cap, int64_t now);

/* sched_score.c */
/* sched_reason_printf: vsnprintf into r (n bytes, truncated), the same
 * bytes; the formats of the reasons (%s, %d, %.0f-%.2f, %%) without printf's
 * cost, any other through vsnprintf. */
__attribute__((format(printf, 3, 4))) void sched_reason_printf(char *r, size_t n, const char *fmt,
                                                                ...);
/* sched_demand_note counts an arrival of cost_s nominal GPU-seconds in q. */
void sched_demand_note(const struct sched *s, struct squeue *q, double cost_s, int64_t now);

double sched_model_load_s(const struct sched *s, int model);
double sched_worker_speed(const struct sworker *w); /* measured, else learned */
void sched_project(struct sched *s, struct sworker *w, int64_t now);
/* sched_project_now: sched_project, also redone once a running job has run
 * past its estimate (its end moves); for the mutating paths only (dispatch,
 * moves), so that sched_fresh keeps holding for readers of ETAs. */
void sched_project_now(struct sched *s, struct sworker *w, int64_t now);
/* sched_score_one: scores j on w; returns 0, or a reason code it was filtered
 * (SCORE_F_*). */
enum { SCORE_OK = 0, SCORE_F_CAP, SCORE_F_VRAM, SCORE_F_BUSY, SCORE_F_UNHEALTHY, SCORE_F_EXCLUDED };
/* sched_worker_can_hold: model fits w's VRAM beside its pinned models (always
 * true for no model). */
bool sched_worker_can_hold(const struct sched *s, const struct sworker *w, int model);
/* sched_job_excludes: worker_id is in j's exclusion list. */
bool sched_job_excludes(const struct sjob *j, const char *worker_id);
/* sched_exclusion_binds: another usable member worker could take j, so its
 * excluded workers must be avoided (else they may serve it). */
bool sched_exclusion_binds(const struct sched *s, const struct sjob *j);
int sched_score_one(struct sched *s, struct sworker *w, const struct sjob *j, int64_t now,
                    struct sched_candidate *c);
/* true when a ranks before b (lower completion time, then load ratio, speed, order). */
bool sched_cand_better(const struct sched_candidate *a, uint64_t aseq,
                       const struct sched_candidate *b, uint64_t bseq);
/* sched_batch_urgent: j is a batch job that would miss its capability's
 * objective by waiting longer (rule 13): dispatch orders it with the
 * interactive lane by submission, and it queues on a GPU like an
 * interactive job. */
bool sched_batch_urgent(const struct sched *s, const struct sjob *j, int64_t now);

/* sched_decide: the best open worker for j, with the explanation in why; NULL
 * when none can take it now. */
struct sworker *sched_decide(struct sched *s, struct sjob *j, int64_t now,
                             struct sched_explain *why);
/* sched_rebalance_one: late binding — free worker w takes the placed job that
 * gains most by moving; reports through placed when given. */
bool sched_rebalance_one(struct sched *s, struct sworker *w, int64_t now,
                         void (*placed)(uint64_t, const char *, const struct sched_explain *,
                                        void *),
                         void *arg);

#endif
