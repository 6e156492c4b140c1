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

struct report {
    const char *policy;
    int ncaps;
    const char *cap_names[64];
    struct cap_report caps[64];
    double throughput_per_hour, utilization, cache_hit_ratio;
    int64_t cold_loads, evictions;
    int completed, failed, unfinished;
    double decision_p50_us, decision_p99_us;
    double makespan_s;
};

void report_make(const struct sim *s, struct report *r);
/* report_json: the object for one policy (caller decrefs). with_timing=false
 * leaves decision_us out (wall-clock figures differ between identical runs). */
json_t *report_json(const struct report *r, bool with_timing);
void report_table(FILE *f, const struct report *r, int n);
double report_percentile(double *v, int n, double p); /* sorts v */

#endif
