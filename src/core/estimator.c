/* estimator.c: rolling per-cell statistics behind estimator.h. Cells live in a
 * hash map keyed by (model, bucket, class); bucket -1 holds the model's figure
 * over all sizes on that class and class -1 over all classes. */
#include "core/estimator.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/hashmap.h"

struct cell {
    int64_t n;
    double rate; /* seconds per unit of work at nominal speed */
};

struct cell_key {
    int32_t model, bucket, cls;
};

struct model_est {
    double prior_rate; /* 0 = no prior */
    int64_t nload;
    double load_s;
};

struct estimator {
    struct hashmap cells;
    struct model_est *models;
    int nmodels;
};

struct estimator *estimator_create(void)
{
    struct estimator *e = xcalloc(1, sizeof(*e));
    hashmap_init(&e->cells);
    return e;
}

void estimator_destroy(struct estimator *e)
{
    if (!e)
        return;
    size_t pos = 0;
    void *v;
    while (hashmap_next(&e->cells, &pos, NULL, NULL, &v))
        free(v);
    hashmap_fini(&e->cells);
    free(e->models);
    free(e);
}

double estimator_work(uint32_t width, uint32_t height, uint32_t steps, uint32_t frames)
{
    double px = (width && height) ? (double)width * (double)height : 1.0;
    return px * (steps ? steps : 1) * (frames ? frames : 1);
}

int estimator_bucket(double work)
{
    if (work <= 1.0)
        return 0;
    return (int)floor(log2(work));
}

static struct model_est *model_at(struct estimator *e, int model)
{
    if (model < 0)
        return NULL;
    if (model >= e->nmodels) {
        int n = model + 8;
        e->models = xrealloc(e->models, (size_t)n * sizeof(*e->models));
        memset(e->models + e->nmodels, 0, (size_t)(n - e->nmodels) * sizeof(*e->models));
        e->nmodels = n;
    }
    return &e->models[model];
}

static const struct model_est *model_get(const struct estimator *e, int model)
{
    return (model >= 0 && model < e->nmodels) ? &e->models[model] : NULL;
}

static struct cell *cell_get(const struct estimator *e, int model, int bucket, int cls)
{
    struct cell_key k = {model, bucket, cls};
    return hashmap_get(&e->cells, &k, sizeof(k));
}

static void cell_add(struct estimator *e, int model, int bucket, int cls, double rate)
{
    struct cell_key k = {model, bucket, cls};
    struct cell *c = hashmap_get(&e->cells, &k, sizeof(k));
    if (!c) {
        c = xcalloc(1, sizeof(*c));
        hashmap_put(&e->cells, &k, sizeof(k), c);
    }
    c->n++;
    double alpha = c->n < ESTIMATOR_WINDOW ? 1.0 / (double)c->n : 1.0 / ESTIMATOR_WINDOW;
    c->rate += alpha * (rate - c->rate);
}

void estimator_set_prior(struct estimator *e, int model, double run_s, double ref_work)
{
    struct model_est *m = model_at(e, model);
    if (m && run_s > 0)
        m->prior_rate = run_s / (ref_work >= 1.0 ? ref_work : 1.0);
}

double estimator_run_s(const struct estimator *e, int model, int gpu_class, double work)
{
    if (work < 1.0)
        work = 1.0;
    const struct cell *c = NULL;
    if (gpu_class >= 0) {
        c = cell_get(e, model, estimator_bucket(work), gpu_class);
        if (!c)
            c = cell_get(e, model, -1, gpu_class);
    }
    if (!c)
        c = cell_get(e, model, estimator_bucket(work), -1);
    if (!c)
        c = cell_get(e, model, -1, -1);
    if (c)
        return c->rate * work;
    const struct model_est *m = model_get(e, model);
    if (m && m->prior_rate > 0)
        return m->prior_rate * work;
    return ESTIMATOR_DEFAULT_RUN_S;
}

double estimator_prior_run_s(const struct estimator *e, int model, double work)
{
    const struct model_est *m = model_get(e, model);
    if (m && m->prior_rate > 0)
        return m->prior_rate * (work < 1.0 ? 1.0 : work);
    return ESTIMATOR_DEFAULT_RUN_S;
}

void estimator_observe_run(struct estimator *e, int model, int gpu_class, double work,
                           double run_s_nominal)
{
    if (model < 0 || !(run_s_nominal >= 0) || !isfinite(run_s_nominal))
        return;
    if (work < 1.0)
        work = 1.0;
    double rate = run_s_nominal / work;
    int b = estimator_bucket(work);
    if (gpu_class >= 0) {
        cell_add(e, model, b, gpu_class, rate);
        cell_add(e, model, -1, gpu_class, rate);
    }
    cell_add(e, model, b, -1, rate);
    cell_add(e, model, -1, -1, rate);
}

int64_t estimator_samples(const struct estimator *e, int model)
{
    const struct cell *c = cell_get(e, model, -1, -1);
    return c ? c->n : 0;
}

double estimator_load_s(const struct estimator *e, int model, double prior_s)
{
    const struct model_est *m = model_get(e, model);
    if (m && m->nload > 0)
        return m->load_s;
    return prior_s;
}

void estimator_observe_load(struct estimator *e, int model, double load_s)
{
    struct model_est *m = model_at(e, model);
    if (!m || !(load_s > 0) || !isfinite(load_s))
        return;
    m->nload++;
    double alpha = m->nload < ESTIMATOR_WINDOW ? 1.0 / (double)m->nload : 1.0 / ESTIMATOR_WINDOW;
    m->load_s += alpha * (load_s - m->load_s);
}
