/* lat.h: a latency recorder for the benchmarks: keeps every sample (bounded
 * count) and reports nearest-rank percentiles. */
#ifndef GPUQ_BENCH_LAT_H
#define GPUQ_BENCH_LAT_H

#include <stddef.h>
#include <stdint.h>

#define LAT_MAX_SAMPLES (16u * 1024 * 1024)

/* Invariant: n <= cap <= LAT_MAX_SAMPLES; dropped counts samples past the cap. */
struct lat {
    int64_t *ns;
    size_t n, cap;
    uint64_t dropped;
};

void lat_init(struct lat *l);
void lat_fini(struct lat *l);
void lat_add(struct lat *l, int64_t ns);
/* lat_pct returns the p-th percentile (0 < p <= 100) in ns, 0 when empty.
 * Sorts the samples in place. */
int64_t lat_pct(struct lat *l, double p);

#endif
