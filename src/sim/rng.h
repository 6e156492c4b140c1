/* rng.h: the simulator's deterministic random numbers (xoshiro256** seeded by
 * splitmix64) and the distributions workloads use. Same seed, same stream. */
#ifndef GPUQ_SIM_RNG_H
#define GPUQ_SIM_RNG_H

#include <stdint.h>

struct rng {
    uint64_t s[4];
};

void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_next(struct rng *r);
double rng_uniform(struct rng *r); /* [0, 1) */
double rng_exp(struct rng *r, double mean);
double rng_normal(struct rng *r);
/* Gamma with the given mean and coefficient of variation (cv > 0). */
double rng_gamma_mean_cv(struct rng *r, double mean, double cv);
/* Lognormal with the given mean and coefficient of variation (cv >= 0). */
double rng_lognormal_mean_cv(struct rng *r, double mean, double cv);

#endif
