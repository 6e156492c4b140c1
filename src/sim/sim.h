/* sim.h: the discrete-event simulator — simulated GPUs (slots, resident
 * models, temperature), jobs, events, and the policy interface through which
 * gpuq (the production core) and the baselines route jobs. Time is in
 * simulated seconds (double); the core sees it as nanoseconds.
 * One struct sim runs one policy over one pre-generated arrival list, so every
 * policy sees the same jobs (arrival times, sizes, run-time draws, faults). */
#ifndef GPUQ_SIM_SIM_H
#define GPUQ_SIM_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "common/heap.h"
#include "core/lifecycle.h"
#include "core/sched.h"
#include "sim/rng.h"
#include "sim/workload.h"

#define SIM_MAX_ATTEMPTS 8

/* A job of the arrival list. Its life after arrival (attempts, retries, the
 * GPUs that failed it, dead-lettering) is a struct lc_job driven through the
 * production lifecycle (core/lifecycle.h) for every policy. Invariant:
 * finish_t >= submit_t once done, dead or failed; at most one of those. */
struct sim_job {
    uint64_t id;
    int cap;
    double submit_t;
    struct wl_size size;
    double base_run_s;                    /* run time on a speed-1.0 GPU, unthrottled */
    double fault_u[SIM_MAX_ATTEMPTS];     /* per-attempt draws deciding faults */
    double fault_frac[SIM_MAX_ATTEMPTS];  /* when in the run a fault strikes */
    double min_run_s;                     /* on the fastest GPU with the capability, warm */
    /* outcome */
    struct lc_job lc;
    bool done, dead, failed;              /* succeeded; dead-lettered; failed otherwise */
    double eta_pred;                      /* predicted latency at submit (gpuq); -1 none */
    double start_t, finish_t;
    double service_s;                     /* load + run of the attempt that finished it */
    int next;                             /* baselines: link in a GPU's FIFO (-1 = end) */
    /* tenants and admission (gpuq with an `admission` workload) */
    int tenant;                           /* index into the workload's tenants; -1 = none */
    double admit_t;                       /* admitted at (submit_t unless refused first) */
    double cost_s;                        /* estimated GPU-seconds given to admission */
    double tag_s;         /* nominal work charged to its fair-share tag */
    int64_t order_ns;                     /* fair-queuing tag of a batch job */
    bool admitted, in_queue;              /* in_queue: counted in admission's backlog */
    bool rejected;                        /* refused for good (too large) */
    int n429;                             /* 429s this client got */
    double ra_s;                          /* the last Retry-After it was given */
    bool probe_room;                      /* the probe at 0.75 x Retry-After found room */
    bool probed;                          /* that probe ran */
};

/* Admission figures: 429s, and how the Retry-After given held up, judged on
 * the queue alone (core/admit.h: admit_room), not on the booking that admits
 * a client coming back at its time anyway. Per Retry-After given (retries):
 * in_window when room was not there yet at 0.75 x the time given (the probe:
 * early_refused) and was there by 1.25 x (at the retry, the wait left over
 * the bound is at most 0.25 x the time given). Per refused client: first_ok
 * when its first retry was admitted. */
struct sim_adm {
    int64_t n429, retries, in_window, early_refused, probes;
    int64_t clients_refused, first_ok;
    int rejected;
};

enum slot_phase { SLOT_IDLE = 0, SLOT_LOADING, SLOT_RUNNING, SLOT_RESTART };

struct sim_slot {
    enum slot_phase phase;
    int job;           /* -1 when idle */
    uint32_t gen;      /* bumped to cancel this slot's pending events */
    double phase_end;
    double load_s, run_s;
    double started;
    bool warm;
    int fault;         /* enum sim_fault of the attempt in this slot */
    char cls[16];      /* its error class when it fails */
};

struct sim_resident {
    int model;
    double last_used;
    bool pinned;
};

struct sim_gpu {
    const struct wl_gpu *spec;
    bool alive;
    struct sim_slot *slots;
    int busy;               /* slots not idle */
    struct sim_resident res[SCHED_MAX_LOADED];
    int nres;
    int64_t free_mb;
    double temp, temp_t;    /* temperature at time temp_t */
    bool throttling;
    double busy_time;       /* slot-seconds loading or running */
    int head, tail, qlen;   /* baselines: FIFO of jobs waiting for this GPU */
    int restarting;         /* runtime restarts in progress */
    int64_t attempts;       /* attempts started on it */
    int64_t failures;       /* of them, ended in failure */
    int64_t before_quarantine; /* attempts started before its first quarantine */
    int quarantines;        /* times its breaker opened (gpuq) */
};

/* EV_LEASE: the lease of the attempt in (gpu, slot) may run out now (its
 * lc_next_due_ns); stale when the slot's gen moved on. */
/* EV_RETRY: a refused client submits again (policy arrive); EV_PROBE: the
 * policy checks whether it would have been admitted (policy probe). */
enum ev_type { EV_ARRIVAL, EV_PHASE_END, EV_GPU_DOWN, EV_GPU_UP, EV_TICK, EV_LEASE, EV_RETRY,
               EV_PROBE };

struct sim_event {
    double t;
    uint64_t seq;
    int type;
    int a, b;      /* arrival: job; phase end, lease: gpu, slot; gpu down/up: gpu */
    uint32_t gen;
};

struct sim;

/* A routing policy. Baselines keep jobs in per-GPU FIFOs or their own queue;
 * gpuq drives the core scheduler. All hooks are optional except arrive. */
struct policy {
    const char *name;
    /* The oracle's world: every model resident on every GPU, loads free and
     * VRAM never in the way (sim_start treats every start as warm). */
    bool all_warm;
    /* The shared queue serves the interactive lane first (oracle-prio). */
    bool lane_first;
    void (*init)(struct sim *s);
    void (*fini)(struct sim *s);
    /* A job needs a GPU (new, or retried: its lc_job lists the GPUs that failed it). */
    void (*arrive)(struct sim *s, int job);
    /* A GPU has a free slot (or came back): give it work. */
    void (*gpu_free)(struct sim *s, int gpu);
    /* A run ended on gpu: ok, or failed with error class cls. */
    void (*job_end)(struct sim *s, int job, int gpu, bool ok, const char *cls, double load_s,
                    double run_s);
    /* Every TICK_S of simulated time. */
    void (*tick)(struct sim *s);
    void (*gpu_down)(struct sim *s, int gpu);
    void (*gpu_up)(struct sim *s, int gpu);
    /* A GPU's models, temperature or health changed. */
    void (*gpu_changed)(struct sim *s, int gpu);
    /* EV_PROBE for a refused job (admission). */
    void (*probe)(struct sim *s, int job);
};

struct sim_metrics {
    int64_t hits, misses, cold_loads, evictions;
    int64_t decisions;
    double *decision_us; /* per decision wall time */
    int64_t ndec, capdec;
};

struct sim {
    const struct workload *wl;
    const struct policy *pol;
    struct rng rng;        /* policy-side randomness (load times) */
    struct sim_job *jobs;
    int njobs;
    struct sim_gpu *gpus;
    int ngpus;
    struct heap events;
    uint64_t seq;
    double now;
    double end_t;          /* hard stop */
    int outstanding;       /* jobs neither done nor failed */
    struct lc_policy lcp;  /* retry budget, lease (the workload's stuck timeout) */
    int64_t retries_on_failed_gpu; /* attempts started on a GPU that had failed that job */
    int64_t preemptions;   /* batch attempts stopped for an interactive job */
    double preempted_gpu_s; /* slot-seconds those attempts had used (work lost) */
    struct sim_metrics m;
    struct sim_adm adm;
    void *pstate;          /* policy state */
};

/* sim_push: schedules an event (EV_RETRY, EV_PROBE) for job at t. */
void sim_push_job_event(struct sim *s, double t, int type, int job);
/* sim_job_refused: the job ends refused for good (too large) now. */
void sim_job_refused(struct sim *s, int job);

/* Per-capability FIFOs of waiting jobs (linked through sim_job.next) for the
 * baselines that keep one queue per capability (pick-worker's streams, the
 * shared queue), with a per-GPU scratch mark of GPUs tried for one job. */
struct sim_capq {
    int *head, *tail; /* per capability; -1 = empty */
    int n;            /* jobs queued in all */
    bool *tried;      /* per GPU */
};
void sim_capq_init(const struct sim *s, struct sim_capq *q);
void sim_capq_fini(struct sim_capq *q);
/* policy init/fini for the baselines whose whole state is one sim_capq
 * (s->pstate). */
void sim_capq_attach(struct sim *s);
void sim_capq_detach(struct sim *s);
void sim_capq_push(struct sim *s, struct sim_capq *q, int job);
/* Takes the head of capability cap's FIFO off it (it must have one). */
void sim_capq_pop(struct sim *s, struct sim_capq *q, int cap);

/* sim_make_jobs: the arrival list of a workload (deterministic in seed). */
struct sim_job *sim_make_jobs(const struct workload *wl, uint64_t seed, int *njobs);

/* sim_run: runs pol over a copy of jobs. The caller frees with sim_fini. */
void sim_run(struct sim *s, const struct workload *wl, const struct policy *pol,
             const struct sim_job *jobs, int njobs, uint64_t seed);
void sim_fini(struct sim *s);

/* For policies: put job on gpu's FIFO / start what can start on gpu. */
void sim_gpu_enqueue(struct sim *s, int gpu, int job);
int sim_gpu_dequeue(struct sim *s, int gpu);
/* sim_start: starts job on a free slot of gpu now (loading its model first if
 * needed). Returns false when it cannot start now (no slot, or its model needs
 * VRAM that running jobs hold). */
bool sim_start(struct sim *s, int gpu, int job);
/* sim_preempt: stops the running attempt of job (core/preempt.h): its slot is
 * freed at once (its model stays resident), the lifecycle ends the attempt
 * as preempted (no failure counted) and the time it had used is counted as
 * lost. Returns the GPU it ran on, or -1 when the job is not running. The
 * policy then queues the job again. */
int sim_preempt(struct sim *s, int job, const char *reason);
bool sim_gpu_has_slot(const struct sim *s, int gpu);
bool sim_gpu_has_cap(const struct sim *s, int gpu, int cap);
bool sim_gpu_warm(const struct sim *s, int gpu, int model);
/* sim_gpu_fits: the model can ever be resident on gpu — its VRAM, less the
 * pinned models other than it, holds it (what running jobs hold frees up). */
bool sim_gpu_fits(const struct sim *s, int gpu, int model);
/* sim_job_runnable: some GPU of the fleet (alive or not) has the job's
 * capability and can ever hold its model; a job with none can never run. */
bool sim_job_runnable(const struct sim *s, const struct sim_job *j);
/* Effective speed now (hardware x throttle). */
double sim_gpu_speed(const struct sim *s, int gpu);
double sim_gpu_temp(struct sim *s, int gpu);
/* A retry avoids every GPU that failed it (lc_failed_on), while another alive
 * GPU with its capability has not failed it. */
bool sim_excluded(const struct sim *s, const struct sim_job *j, int gpu);
/* The policy quarantined gpu (its breaker opened). */
void sim_note_quarantine(struct sim *s, int gpu);
struct lc_now sim_lc_now(const struct sim *s);
void sim_record_decision(struct sim *s, double us);

extern const struct policy policy_gpuq, policy_rr, policy_least_loaded, policy_affinity,
    policy_pick_worker, policy_affinity_ect, policy_shared_fifo, policy_oracle,
    policy_oracle_prio;

#endif
