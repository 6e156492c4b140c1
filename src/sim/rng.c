/* rng.c: xoshiro256** and the distributions of rng.h. */
#include "sim/rng.h"

#include <math.h>

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

void rng_seed(struct rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rng_uniform(struct rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

double rng_exp(struct rng *r, double mean)
{
    return -mean * log1p(-rng_uniform(r));
}

double rng_normal(struct rng *r)
{
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Marsaglia-Tsang for shape >= 1; boost for shape < 1. */
static double gamma_shape(struct rng *r, double k)
{
    if (k < 1.0) {
        double u = rng_uniform(r);
        return gamma_shape(r, k + 1.0) * pow(u < 1e-300 ? 1e-300 : u, 1.0 / k);
    }
    double d = k - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = rng_normal(r), v = 1.0 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = rng_uniform(r);
        if (u < 1.0 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
            return d * v;
    }
}

double rng_gamma_mean_cv(struct rng *r, double mean, double cv)
{
    if (cv <= 0)
        return mean;
    double k = 1.0 / (cv * cv);
    return gamma_shape(r, k) * mean / k;
}

double rng_lognormal_mean_cv(struct rng *r, double mean, double cv)
{
    if (cv <= 0)
        return mean;
    double s2 = log(1.0 + cv * cv);
    double mu = log(mean) - s2 / 2.0;
    return exp(mu + sqrt(s2) * rng_normal(r));
}
