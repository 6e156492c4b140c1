/* report.h: the figures of one simulation run — latency and slowdown
 * percentiles and SLO attainment per capability, throughput, utilization,
 * cache hits, cold loads, failures, decision cost — and their JSON and table
 * forms (docs/sim-workload.md describes the fields). */
#ifndef GPUQ_SIM_REPORT_H
#define GPUQ_SIM_REPORT_H

#include <jansson.h>
#include <stdio.h>

#include "sim/sim.h"

struct cap_report {
    int jobs, completed;
    double p50, p95, p99, mean;  /* latency, seconds */
    double sd_p50, sd_p99;       /* slowdown */
    double wait_mean;            /* latency minus the final attempt's load and run */
    double slo_s, slo_attainment;
};

struct gpu_report {
    const char *id;
    int64_t attempts, failures, before_quarantine;
    int quarantines;
};

/* ETA error at submit, |predicted - actual| / actual latency, per lane. */
struct eta_report {
    int n;               /* jobs with a prediction that finished; 0 = none */
    double p50, p90;
};

/* Per tenant (workloads with tenants): delivered work in nominal GPU-seconds
 * (the jobs' base run times), overall and while every batch stream was on. */
struct tenant_report {
    const char *name;
    int jobs, completed, rejected;
    int64_t n429;
    double delivered_gpu_s, contention_gpu_s;
};

/* One figure of a policy divided by the oracle's on the same arrivals
 * (report_vs_oracle); -1 where the oracle's figure is 0. */
struct cap_vs {
    double p50, p95, p99, sd_p99, slo;
};

struct report {
    const char *policy;
    int ncaps;
    const char *cap_names[64];
    struct cap_report caps[64];
    double throughput_per_hour, utilization, cache_hit_ratio;
    int64_t cold_loads, evictions;
    int completed, failed, unfinished;
    int rejected;                    /* refused: no GPU of the fleet can ever run them */
    int dead, jobs_lost;             /* dead-lettered; accepted but neither done nor ended */
    int64_t retries_on_failed_gpu;
    int64_t preemptions;     /* batch attempts stopped for an interactive job */
    double preempted_gpu_s;  /* the GPU-seconds they had used (lost) */
    bool has_eta;                    /* the policy predicts ETAs (gpuq) */
    struct eta_report eta[2];        /* by enum sched_lane */
    struct gpu_report *gpus;         /* owned: report_fini frees */
    int ngpus;
    double decision_p50_us, decision_p99_us;
    double makespan_s;
    double lane_p99[2];              /* latency p99 of finished jobs per lane; -1 = none */
    int nlane[2];
    int ntenants;
    struct tenant_report tenants[WL_MAX_TENANTS];
    double contention_t0, contention_t1; /* the window of contention_gpu_s */
    bool has_admission;
    struct sim_adm adm;
    double ra_accuracy;              /* retries admitted at the time given, no room at 0.75 of it */
    bool has_vs;                     /* vs[] and vs_cache_hit are set */
    struct cap_vs vs[64];
    double vs_cache_hit;
};

void report_make(const struct sim *s, struct report *r);
void report_fini(struct report *r);
/* report_vs_oracle: each figure of r as a ratio to the oracle's (the floor:
 * no loads, one shared queue), for the table and the JSON. */
void report_vs_oracle(struct report *r, const struct report *oracle);
/* report_json: the object for one policy (caller decrefs). with_timing=false
 * leaves decision_us out (wall-clock figures differ between identical runs). */
json_t *report_json(const struct report *r, bool with_timing);
void report_table(FILE *f, const struct report *r, int n);
double report_percentile(double *v, int n, double p); /* sorts v */

#endif
