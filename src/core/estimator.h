/* estimator.h: run-time and load-time estimates from measured history (R17).
 * Run times are kept as seconds per unit of work at nominal speed (speed 1.0),
 * per model x size bucket x GPU class, as a rolling mean (plain mean for the
 * first samples, then an exponentially weighted one). Lookups fall back from
 * the exact cell to the model on that GPU class, to the model on any class, to
 * the caller's prior, to a 1-second default. Load times are kept per model.
 * Models and GPU classes are small integer indexes owned by the caller. Pure. */
#ifndef GPUQ_CORE_ESTIMATOR_H
#define GPUQ_CORE_ESTIMATOR_H

#include <stdint.h>

struct estimator;

#define ESTIMATOR_DEFAULT_RUN_S 1.0
#define ESTIMATOR_WINDOW 20 /* samples after which the mean becomes a rolling one */

struct estimator *estimator_create(void);
void estimator_destroy(struct estimator *e);

/* estimator_work: the size measure of a job: pixels x steps x frames, each
 * factor 1 when not given. */
double estimator_work(uint32_t width, uint32_t height, uint32_t steps, uint32_t frames);
int estimator_bucket(double work);

/* Prior: run_s seconds at ref_work on a nominal GPU (until data arrives). */
void estimator_set_prior(struct estimator *e, int model, double run_s, double ref_work);
/* Estimated seconds at nominal speed for work on gpu_class (-1 = any). */
double estimator_run_s(const struct estimator *e, int model, int gpu_class, double work);
/* estimator_prior_run_s: the prior alone for work (no measurement counted):
 * a figure that does not move as runs are observed. */
double estimator_prior_run_s(const struct estimator *e, int model, double work);
/* A measured run, already normalized to nominal speed (run x speed). */
void estimator_observe_run(struct estimator *e, int model, int gpu_class, double work,
                           double run_s_nominal);
/* Samples seen for the model (any class, any size). */
int64_t estimator_samples(const struct estimator *e, int model);

double estimator_load_s(const struct estimator *e, int model, double prior_s);
void estimator_observe_load(struct estimator *e, int model, double load_s);

#endif
