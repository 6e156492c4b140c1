/* workload.h: a simulation workload — fleet, models, capabilities, arrival
 * process, thermal model, faults, scheduler settings — as loaded from the JSON
 * format documented in docs/sim-workload.md. The loader validates every field
 * and names the one it rejects. workload_destroy frees everything. */
#ifndef GPUQ_SIM_WORKLOAD_H
#define GPUQ_SIM_WORKLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/admit.h"
#include "core/breaker.h"
#include "core/sched.h"

#define WL_MAX_SIZES 8
#define WL_MAX_POINTS 64
#define WL_MAX_TENANTS 16
#define WL_MAX_STREAMS 16

struct wl_model {
    char name[SCHED_NAME_MAX];
    int64_t vram_mb;
    double load_lo_s, load_hi_s; /* load time uniform in [lo, hi] */
    enum model_class cls;
    bool pinned;                 /* pinned wherever it is preloaded */
};

struct wl_size {
    uint32_t width, height, steps, frames;
    double weight;
};

struct wl_cap {
    char name[SCHED_NAME_MAX];
    int model;            /* index into models */
    double weight;        /* share of arrivals */
    double run_s;         /* mean run time at ref size on a speed-1.0 GPU */
    double cv;            /* run-time variability (lognormal), or exponential when dist_exp */
    bool dist_exp;
    struct wl_size ref;
    struct wl_size sizes[WL_MAX_SIZES];
    int nsizes;
    double slo_s;         /* latency objective (submit to finish) */
    enum sched_lane lane;
};

struct wl_cooling {
    double ambient_c, rise_c, tau_s; /* equilibrium = ambient + rise x utilization */
};

/* Faults of one GPU (fleet[].faults), drawn per attempt on it. */
struct wl_gpu_faults {
    double fail_share;        /* share of attempts that fail part-way */
    char fail_class[16];      /* their error class ("cuda" by default) */
    double hang_share;        /* share of attempts that hang (end by lease expiry) */
    double speed_factor;      /* hidden slowdown: runs take 1/speed_factor as long (1 = none) */
};

struct wl_gpu {
    char id[SCHED_NAME_MAX];
    char gpu_class[SCHED_NAME_MAX];
    int64_t vram_mb;
    double speed;
    int concurrency;
    struct wl_cooling cooling;
    int caps[SCHED_MAX_CAPS];
    int ncaps;
    int preload[SCHED_MAX_LOADED];
    bool pin[SCHED_MAX_LOADED]; /* preload[k] pinned on this GPU (fleet[].pinned) */
    int npreload;
    struct wl_gpu_faults faults;
    bool reserved; /* in the reserved interactive pool (scheduler.reserved) */
};

enum wl_process { WL_POISSON, WL_GAMMA, WL_TRACE };

/* One arrival stream of a tenant (streams[]): its own process and rate, active
 * in [start_s, stop_s), picking capabilities by capw (index = capability). */
struct wl_stream {
    int tenant;           /* index into tenants */
    enum wl_process process;
    double rate_per_s, cv;
    double start_s, stop_s;
    double capw[64];
};

struct wl_gpu_loss {
    int gpu;
    double at_s, down_s;
};

struct workload {
    char name[SCHED_NAME_MAX];
    uint64_t seed;
    double duration_s;
    struct wl_model *models;
    int nmodels;
    struct wl_cap *caps;
    int ncaps;
    struct wl_gpu *gpus;
    int ngpus;
    /* arrivals */
    enum wl_process process;
    double rate_per_s, arrival_cv;
    double diurnal_period_s;
    double diurnal_t[WL_MAX_POINTS], diurnal_m[WL_MAX_POINTS];
    int ndiurnal;
    double *trace;
    int ntrace;
    /* thermal */
    double throttle_c, throttle_speed;
    /* faults */
    double p_oom, p_stuck, p_corrupt;
    double stuck_timeout_s, restart_s;
    int retries;
    struct wl_gpu_loss *losses;
    int nlosses;
    /* scheduler (gpuq policy) and baselines */
    struct sched_config sched;
    int fanout[64]; /* per capability index, 0 = none */
    bool priors;    /* give gpuq the workload's run times as priors */
    bool stable_tags; /* fair-share tags charged at the nominal work (the prior), not the
                         moving estimate; scheduler.stable_tags, default true */
    int affinity_max_depth;
    struct breaker_policy breaker; /* gpuq's per-GPU circuit breaker (scheduler.breaker) */
    /* tenants and streams (several arrival streams replace `arrivals`) */
    struct admit_tenant_policy tenants[WL_MAX_TENANTS];
    int ntenants;
    struct wl_stream streams[WL_MAX_STREAMS];
    int nstreams;
    /* admission (gpuq only): on when the workload has an `admission` object */
    bool admission;
    struct admit_policy admit;
};

/* workload_load parses path; on error returns NULL and writes a message that
 * names the field into err. */
struct workload *workload_load(const char *path, char *err, int errlen);
void workload_destroy(struct workload *w);
/* Rate multiplier of the diurnal curve at time t (1 when none). */
double workload_diurnal(const struct workload *w, double t);
double workload_diurnal_max(const struct workload *w);

#endif
