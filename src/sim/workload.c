/* workload.c: loads and validates a workload JSON file (docs/sim-workload.md).
 * The only jansson user of the simulator. */
#include "sim/workload.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

struct ctx {
    char *err;
    int errlen;
    bool failed;
};

__attribute__((format(printf, 2, 3))) static void fail(struct ctx *c, const char *fmt, ...)
{
    if (c->failed)
        return;
    c->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, (size_t)c->errlen, fmt, ap);
    va_end(ap);
}

/* num: optional number field with a default and bounds. */
static double num(struct ctx *c, json_t *o, const char *where, const char *key, double def,
                  double lo, double hi)
{
    json_t *v = o ? json_object_get(o, key) : NULL;
    if (!v)
        return def;
    if (!json_is_number(v)) {
        fail(c, "%s.%s: must be a number", where, key);
        return def;
    }
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        fail(c, "%s.%s: %g is out of range [%g, %g]", where, key, d, lo, hi);
        return def;
    }
    return d;
}

static const char *str(struct ctx *c, json_t *o, const char *where, const char *key,
                       const char *def)
{
    json_t *v = o ? json_object_get(o, key) : NULL;
    if (!v)
        return def;
    if (!json_is_string(v) || json_string_length(v) == 0 ||
        json_string_length(v) >= SCHED_NAME_MAX) {
        fail(c, "%s.%s: must be a non-empty string shorter than %d", where, key, SCHED_NAME_MAX);
        return def;
    }
    return json_string_value(v);
}

static int find_model(const struct workload *w, const char *name)
{
    for (int i = 0; i < w->nmodels; i++)
        if (strcmp(w->models[i].name, name) == 0)
            return i;
    return -1;
}

static int find_cap(const struct workload *w, const char *name)
{
    for (int i = 0; i < w->ncaps; i++)
        if (strcmp(w->caps[i].name, name) == 0)
            return i;
    return -1;
}

static void load_models(struct ctx *c, struct workload *w, json_t *arr)
{
    if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > 256) {
        fail(c, "models: must be a non-empty array (at most 256)");
        return;
    }
    w->nmodels = (int)json_array_size(arr);
    w->models = xcalloc((size_t)w->nmodels, sizeof(*w->models));
    for (int i = 0; i < w->nmodels && !c->failed; i++) {
        json_t *o = json_array_get(arr, (size_t)i);
        char where[48];
        snprintf(where, sizeof(where), "models[%d]", i);
        struct wl_model *m = &w->models[i];
        const char *name = str(c, o, where, "name", NULL);
        if (!name) {
            fail(c, "%s.name: required", where);
            return;
        }
        snprintf(m->name, sizeof(m->name), "%s", name);
        m->vram_mb = (int64_t)num(c, o, where, "vram_mb", -1, 0, 1e7);
        if (m->vram_mb < 0)
            fail(c, "%s.vram_mb: required", where);
        json_t *ls = json_object_get(o, "load_s");
        if (json_is_array(ls) && json_array_size(ls) == 2 &&
            json_is_number(json_array_get(ls, 0)) && json_is_number(json_array_get(ls, 1))) {
            m->load_lo_s = json_number_value(json_array_get(ls, 0));
            m->load_hi_s = json_number_value(json_array_get(ls, 1));
        } else {
            m->load_lo_s = m->load_hi_s = num(c, o, where, "load_s", 5.0, 0, 3600);
        }
        if (!(m->load_lo_s >= 0 && m->load_hi_s >= m->load_lo_s && m->load_hi_s <= 3600))
            fail(c, "%s.load_s: must be a number or [lo, hi] with 0 <= lo <= hi <= 3600", where);
        const char *cls = str(c, o, where, "class", "generation");
        if (cls && strcmp(cls, "utility") == 0)
            m->cls = MODEL_UTILITY;
        else if (cls && strcmp(cls, "generation") == 0)
            m->cls = MODEL_GENERATION;
        else
            fail(c, "%s.class: must be \"generation\" or \"utility\"", where);
        json_t *p = json_object_get(o, "pinned");
        if (p && !json_is_boolean(p))
            fail(c, "%s.pinned: must be true or false", where);
        m->pinned = json_is_true(p);
    }
}

static void load_size(struct ctx *c, json_t *o, const char *where, struct wl_size *s)
{
    s->width = (uint32_t)num(c, o, where, "width", 0, 0, 65536);
    s->height = (uint32_t)num(c, o, where, "height", 0, 0, 65536);
    s->steps = (uint32_t)num(c, o, where, "steps", 0, 0, 10000);
    s->frames = (uint32_t)num(c, o, where, "frames", 0, 0, 100000);
    s->weight = num(c, o, where, "weight", 1.0, 0, 1e9);
}

static void load_caps(struct ctx *c, struct workload *w, json_t *arr)
{
    if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > 64) {
        fail(c, "capabilities: must be a non-empty array (at most 64)");
        return;
    }
    w->ncaps = (int)json_array_size(arr);
    w->caps = xcalloc((size_t)w->ncaps, sizeof(*w->caps));
    for (int i = 0; i < w->ncaps && !c->failed; i++) {
        json_t *o = json_array_get(arr, (size_t)i);
        char where[48];
        snprintf(where, sizeof(where), "capabilities[%d]", i);
        struct wl_cap *k = &w->caps[i];
        const char *name = str(c, o, where, "name", NULL);
        const char *model = str(c, o, where, "model", NULL);
        if (!name || !model) {
            fail(c, "%s: name and model are required", where);
            return;
        }
        snprintf(k->name, sizeof(k->name), "%s", name);
        k->model = find_model(w, model);
        if (k->model < 0)
            fail(c, "%s.model: no model named \"%s\"", where, model);
        k->weight = num(c, o, where, "weight", 1.0, 0, 1e9);
        k->run_s = num(c, o, where, "run_s", -1, 1e-6, 1e6);
        if (k->run_s <= 0)
            fail(c, "%s.run_s: required (mean seconds at the reference size)", where);
        k->cv = num(c, o, where, "cv", 0.1, 0, 10);
        const char *dist = str(c, o, where, "dist", "lognormal");
        if (dist && strcmp(dist, "exp") == 0)
            k->dist_exp = true;
        else if (!dist || strcmp(dist, "lognormal") != 0)
            fail(c, "%s.dist: must be \"lognormal\" or \"exp\"", where);
        char w2[96];
        snprintf(w2, sizeof(w2), "%s.ref", where);
        load_size(c, json_object_get(o, "ref"), w2, &k->ref);
        json_t *sz = json_object_get(o, "sizes");
        if (sz) {
            if (!json_is_array(sz) || json_array_size(sz) == 0 ||
                json_array_size(sz) > WL_MAX_SIZES) {
                fail(c, "%s.sizes: must be an array of 1 to %d sizes", where, WL_MAX_SIZES);
                return;
            }
            k->nsizes = (int)json_array_size(sz);
            for (int s = 0; s < k->nsizes; s++) {
                snprintf(w2, sizeof(w2), "%s.sizes[%d]", where, s);
                load_size(c, json_array_get(sz, (size_t)s), w2, &k->sizes[s]);
            }
        } else {
            k->sizes[0] = k->ref;
            k->sizes[0].weight = 1;
            k->nsizes = 1;
        }
        k->slo_s = num(c, o, where, "slo_s", 0, 0, 1e9);
        const char *lane = str(c, o, where, "lane", "interactive");
        if (lane && strcmp(lane, "batch") == 0)
            k->lane = SCHED_LANE_BATCH;
        else if (lane && strcmp(lane, "interactive") == 0)
            k->lane = SCHED_LANE_INTERACTIVE;
        else
            fail(c, "%s.lane: must be \"interactive\" or \"batch\"", where);
    }
}

static void load_cooling(struct ctx *c, json_t *profiles, json_t *v, const char *where,
                         struct wl_cooling *out)
{
    /* Built-in profiles; a workload may override or add to them. */
    struct wl_cooling good = {35, 38, 90}, poor = {45, 45, 90};
    json_t *o = v;
    if (!v || json_is_string(v)) {
        const char *name = v ? json_string_value(v) : "good";
        o = profiles ? json_object_get(profiles, name) : NULL;
        if (!o) {
            if (strcmp(name, "good") == 0) {
                *out = good;
                return;
            }
            if (strcmp(name, "poor") == 0) {
                *out = poor;
                return;
            }
            fail(c, "%s.cooling: no cooling profile \"%s\"", where, name);
            return;
        }
    }
    if (!json_is_object(o)) {
        fail(c, "%s.cooling: must be a profile name or an object", where);
        return;
    }
    out->ambient_c = num(c, o, where, "ambient_c", 35, -50, 150);
    out->rise_c = num(c, o, where, "rise_c", 38, 0, 200);
    out->tau_s = num(c, o, where, "tau_s", 90, 0.1, 1e6);
}

static void load_gpu_faults(struct ctx *c, json_t *o, const char *where,
                            struct wl_gpu_faults *f)
{
    char fw[64];
    snprintf(fw, sizeof(fw), "%.40s.faults", where);
    if (o && !json_is_object(o)) {
        fail(c, "%s: must be an object", fw);
        return;
    }
    f->fail_share = num(c, o, fw, "fail_share", 0, 0, 1);
    f->hang_share = num(c, o, fw, "hang_share", 0, 0, 1);
    if (f->fail_share + f->hang_share > 1)
        fail(c, "%s: fail_share + hang_share must be at most 1", fw);
    f->speed_factor = num(c, o, fw, "speed_factor", 1.0, 0.01, 100);
    const char *cls = str(c, o, fw, "fail_class", "cuda");
    if (cls && strlen(cls) >= sizeof(f->fail_class))
        fail(c, "%s.fail_class: at most %zu characters", fw, sizeof(f->fail_class) - 1);
    else
        snprintf(f->fail_class, sizeof(f->fail_class), "%s", cls ? cls : "cuda");
}

/* fleet[].pinned: models this GPU keeps resident for good (seed 003's
 * per-worker pinning): preloaded at boot, never evicted. A model pinned here
 * is added to preload when it is not there already. */
static void load_pinned(struct ctx *c, const struct workload *w, json_t *pin, const char *where,
                        struct wl_gpu *g)
{
    if (!pin || c->failed)
        return;
    if (!json_is_array(pin)) {
        fail(c, "%s.pinned: must be an array of model names", where);
        return;
    }
    int64_t sum = 0;
    for (int k = 0; k < g->npreload; k++)
        sum += w->models[g->preload[k]].vram_mb;
    for (size_t k = 0; k < json_array_size(pin); k++) {
        json_t *v = json_array_get(pin, k);
        int mi = json_is_string(v) ? find_model(w, json_string_value(v)) : -1;
        if (mi < 0) {
            fail(c, "%s.pinned[%zu]: unknown model", where, k);
            return;
        }
        int at = -1;
        for (int p = 0; p < g->npreload; p++)
            if (g->preload[p] == mi)
                at = p;
        if (at < 0) {
            if (g->npreload >= SCHED_MAX_LOADED) {
                fail(c, "%s.pinned[%zu]: more than %d models on one GPU", where, k,
                     SCHED_MAX_LOADED);
                return;
            }
            at = g->npreload++;
            g->preload[at] = mi;
            sum += w->models[mi].vram_mb;
        }
        g->pin[at] = true;
    }
    if (sum > g->vram_mb)
        fail(c, "%s.pinned: models need %lld MB, the GPU has %lld", where, (long long)sum,
             (long long)g->vram_mb);
}

static void load_fleet(struct ctx *c, struct workload *w, json_t *arr, json_t *profiles)
{
    if (!json_is_array(arr) || json_array_size(arr) == 0) {
        fail(c, "fleet: must be a non-empty array");
        return;
    }
    int total = 0;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *cnt = json_object_get(json_array_get(arr, i), "count");
        int n = cnt ? (int)json_integer_value(cnt) : 1;
        if (n < 1 || n > 100000) {
            fail(c, "fleet[%zu].count: must be an integer from 1 to 100000", i);
            return;
        }
        total += n;
    }
    if (total > 100000) {
        fail(c, "fleet: at most 100000 GPUs");
        return;
    }
    w->gpus = xcalloc((size_t)total, sizeof(*w->gpus));
    for (size_t i = 0; i < json_array_size(arr) && !c->failed; i++) {
        json_t *o = json_array_get(arr, i);
        char where[48];
        snprintf(where, sizeof(where), "fleet[%zu]", i);
        json_t *cnt = json_object_get(o, "count");
        int n = cnt ? (int)json_integer_value(cnt) : 1;
        const char *id = str(c, o, where, "id", "gpu");
        struct wl_gpu proto;
        memset(&proto, 0, sizeof(proto));
        snprintf(proto.gpu_class, sizeof(proto.gpu_class), "%s",
                 str(c, o, where, "gpu_class", "gpu"));
        proto.vram_mb = (int64_t)num(c, o, where, "vram_mb", -1, 1, 1e7);
        if (proto.vram_mb <= 0)
            fail(c, "%s.vram_mb: required", where);
        proto.speed = num(c, o, where, "speed", 1.0, 0.01, 100);
        proto.concurrency = (int)num(c, o, where, "concurrency", 1, 1, 64);
        load_cooling(c, profiles, json_object_get(o, "cooling"), where, &proto.cooling);
        json_t *caps = json_object_get(o, "caps");
        if (caps) {
            if (!json_is_array(caps) || json_array_size(caps) > SCHED_MAX_CAPS) {
                fail(c, "%s.caps: must be an array of at most %d names", where, SCHED_MAX_CAPS);
                return;
            }
            for (size_t k = 0; k < json_array_size(caps); k++) {
                json_t *v = json_array_get(caps, k);
                int ci = json_is_string(v) ? find_cap(w, json_string_value(v)) : -1;
                if (ci < 0) {
                    fail(c, "%s.caps[%zu]: unknown capability", where, k);
                    return;
                }
                proto.caps[proto.ncaps++] = ci;
            }
        } else {
            if (w->ncaps > SCHED_MAX_CAPS) {
                fail(c, "%s.caps: required when there are more than %d capabilities", where,
                     SCHED_MAX_CAPS);
                return;
            }
            for (int k = 0; k < w->ncaps; k++)
                proto.caps[proto.ncaps++] = k;
        }
        load_gpu_faults(c, json_object_get(o, "faults"), where, &proto.faults);
        json_t *pre = json_object_get(o, "preload");
        if (pre) {
            if (!json_is_array(pre) || json_array_size(pre) > SCHED_MAX_LOADED) {
                fail(c, "%s.preload: must be an array of model names", where);
                return;
            }
            int64_t sum = 0;
            for (size_t k = 0; k < json_array_size(pre); k++) {
                json_t *v = json_array_get(pre, k);
                int mi = json_is_string(v) ? find_model(w, json_string_value(v)) : -1;
                if (mi < 0) {
                    fail(c, "%s.preload[%zu]: unknown model", where, k);
                    return;
                }
                sum += w->models[mi].vram_mb;
                proto.preload[proto.npreload++] = mi;
            }
            if (sum > proto.vram_mb)
                fail(c, "%s.preload: models need %lld MB, the GPU has %lld", where,
                     (long long)sum, (long long)proto.vram_mb);
        }
        load_pinned(c, w, json_object_get(o, "pinned"), where, &proto);
        for (int k = 0; k < n; k++) {
            struct wl_gpu *g = &w->gpus[w->ngpus++];
            *g = proto;
            if (n == 1)
                snprintf(g->id, sizeof(g->id), "%s", id);
            else
                snprintf(g->id, sizeof(g->id), "%.50s%d", id, k);
        }
    }
    for (int i = 0; i < w->ngpus && !c->failed; i++)
        for (int k = 0; k < i; k++)
            if (strcmp(w->gpus[i].id, w->gpus[k].id) == 0) {
                fail(c, "fleet: duplicate GPU id \"%s\"", w->gpus[i].id);
                break;
            }
}

static void load_trace_file(struct ctx *c, struct workload *w, const char *dir,
                            const char *file)
{
    char path[2200];
    if (file[0] == '/')
        snprintf(path, sizeof(path), "%.2000s", file);
    else
        snprintf(path, sizeof(path), "%.1000s/%.1000s", dir, file);
    FILE *f = fopen(path, "r");
    if (!f) {
        fail(c, "arrivals.trace_file: cannot open %s", path);
        return;
    }
    int cap = 1024;
    w->trace = xmalloc((size_t)cap * sizeof(double));
    double t;
    while (fscanf(f, "%lf", &t) == 1) {
        if (w->ntrace == cap) {
            cap *= 2;
            w->trace = xrealloc(w->trace, (size_t)cap * sizeof(double));
        }
        w->trace[w->ntrace++] = t;
    }
    fclose(f);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void load_arrivals(struct ctx *c, struct workload *w, json_t *o, const char *dir)
{
    if (!json_is_object(o)) {
        fail(c, "arrivals: required object");
        return;
    }
    const char *p = str(c, o, "arrivals", "process", "poisson");
    if (!p)
        return;
    if (strcmp(p, "poisson") == 0)
        w->process = WL_POISSON;
    else if (strcmp(p, "gamma") == 0)
        w->process = WL_GAMMA;
    else if (strcmp(p, "trace") == 0)
        w->process = WL_TRACE;
    else {
        fail(c, "arrivals.process: must be poisson, gamma or trace");
        return;
    }
    w->rate_per_s = num(c, o, "arrivals", "rate_per_s", 0, 0, 1e7);
    w->arrival_cv = num(c, o, "arrivals", "cv", 1.0, 0.01, 100);
    if (w->process != WL_TRACE && !(w->rate_per_s > 0))
        fail(c, "arrivals.rate_per_s: required and > 0");
    json_t *d = json_object_get(o, "diurnal");
    if (d) {
        w->diurnal_period_s = num(c, d, "arrivals.diurnal", "period_s", 86400, 1, 1e9);
        json_t *pts = json_object_get(d, "points");
        if (!json_is_array(pts) || json_array_size(pts) < 1 ||
            json_array_size(pts) > WL_MAX_POINTS) {
            fail(c, "arrivals.diurnal.points: must be 1 to %d [t_s, multiplier] pairs",
                 WL_MAX_POINTS);
            return;
        }
        for (size_t i = 0; i < json_array_size(pts); i++) {
            json_t *pt = json_array_get(pts, i);
            if (!json_is_array(pt) || json_array_size(pt) != 2 ||
                !json_is_number(json_array_get(pt, 0)) || !json_is_number(json_array_get(pt, 1)) ||
                json_number_value(json_array_get(pt, 1)) < 0 ||
                (i > 0 && json_number_value(json_array_get(pt, 0)) <= w->diurnal_t[i - 1])) {
                fail(c, "arrivals.diurnal.points[%zu]: must be [t_s, multiplier >= 0], t rising",
                     i);
                return;
            }
            w->diurnal_t[i] = json_number_value(json_array_get(pt, 0));
            w->diurnal_m[i] = json_number_value(json_array_get(pt, 1));
            w->ndiurnal++;
        }
    }
    if (w->process == WL_TRACE) {
        json_t *tr = json_object_get(o, "trace");
        const char *file = str(c, o, "arrivals", "trace_file", NULL);
        if (json_is_array(tr)) {
            w->ntrace = (int)json_array_size(tr);
            w->trace = xmalloc((size_t)(w->ntrace ? w->ntrace : 1) * sizeof(double));
            for (int i = 0; i < w->ntrace; i++) {
                json_t *v = json_array_get(tr, (size_t)i);
                if (!json_is_number(v) || json_number_value(v) < 0) {
                    fail(c, "arrivals.trace[%d]: must be a number >= 0 (seconds)", i);
                    return;
                }
                w->trace[i] = json_number_value(v);
            }
        } else if (file) {
            load_trace_file(c, w, dir, file);
        } else {
            fail(c, "arrivals.trace: a trace needs \"trace\" (array) or \"trace_file\"");
            return;
        }
        qsort(w->trace, (size_t)w->ntrace, sizeof(double), cmp_double);
    }
}

static void load_faults(struct ctx *c, struct workload *w, json_t *o)
{
    w->p_oom = num(c, o, "faults", "oom", 0, 0, 1);
    w->p_stuck = num(c, o, "faults", "stuck", 0, 0, 1);
    w->p_corrupt = num(c, o, "faults", "corrupt", 0, 0, 1);
    w->stuck_timeout_s = num(c, o, "faults", "stuck_timeout_s", 120, 0.001, 1e6);
    w->restart_s = num(c, o, "faults", "restart_s", 10, 0, 1e6);
    w->retries = (int)num(c, o, "faults", "retries", 3, 0, 100);
    json_t *gl = o ? json_object_get(o, "gpu_loss") : NULL;
    if (!gl)
        return;
    if (!json_is_array(gl)) {
        fail(c, "faults.gpu_loss: must be an array");
        return;
    }
    w->nlosses = (int)json_array_size(gl);
    w->losses = xcalloc((size_t)(w->nlosses ? w->nlosses : 1), sizeof(*w->losses));
    for (int i = 0; i < w->nlosses && !c->failed; i++) {
        json_t *e = json_array_get(gl, (size_t)i);
        char where[48];
        snprintf(where, sizeof(where), "faults.gpu_loss[%d]", i);
        const char *id = str(c, e, where, "gpu", NULL);
        w->losses[i].gpu = -1;
        for (int g = 0; id && g < w->ngpus; g++)
            if (strcmp(w->gpus[g].id, id) == 0)
                w->losses[i].gpu = g;
        if (w->losses[i].gpu < 0)
            fail(c, "%s.gpu: no GPU with that id", where);
        w->losses[i].at_s = num(c, e, where, "at_s", 0, 0, 1e9);
        w->losses[i].down_s = num(c, e, where, "down_s", 1e18, 0, 1e18);
    }
}

static void load_sched(struct ctx *c, struct workload *w, json_t *o, json_t *base)
{
    struct sched_config *s = &w->sched;
    sched_config_defaults(s);
    s->queue_depth = (int)num(c, o, "scheduler", "queue_depth", s->queue_depth, 1, 64);
    s->hot_temp_c = num(c, o, "scheduler", "hot_temp_c", s->hot_temp_c, -50, 200);
    s->hot_penalty = num(c, o, "scheduler", "hot_penalty", s->hot_penalty, 1, 100);
    s->move_margin_s = num(c, o, "scheduler", "move_margin_s", s->move_margin_s, 0, 1e6);
    s->evict_weight = num(c, o, "scheduler", "evict_weight", s->evict_weight, 0, 100);
    s->headroom_wait_s = num(c, o, "scheduler", "headroom_wait_s", s->headroom_wait_s, 0, 3600);
    s->headroom_share = num(c, o, "scheduler", "headroom_share", s->headroom_share, 0, 0.999);
    s->headroom_window_s =
        num(c, o, "scheduler", "headroom_window_s", s->headroom_window_s, 1, 86400);
    s->preempt_after_s = num(c, o, "scheduler", "preempt_after_s", s->preempt_after_s, 0, 3600);
    json_t *pr = o ? json_object_get(o, "priors") : NULL;
    w->priors = pr ? json_is_true(pr) : true;
    json_t *stt = o ? json_object_get(o, "stable_tags") : NULL;
    w->stable_tags = stt ? json_is_true(stt) : true;
    json_t *fo = o ? json_object_get(o, "fanout") : NULL;
    if (fo) {
        const char *k;
        json_t *v;
        json_object_foreach(fo, k, v)
        {
            int ci = find_cap(w, k);
            if (ci < 0 || !json_is_integer(v) || json_integer_value(v) < 0) {
                fail(c, "scheduler.fanout.%s: unknown capability or not an integer >= 0", k);
                return;
            }
            w->fanout[ci] = (int)json_integer_value(v);
        }
    }
    w->affinity_max_depth = (int)num(c, base, "baselines", "affinity_max_queue_depth", 3, 1, 1000);
    struct breaker_policy *b = &w->breaker;
    breaker_policy_defaults(b);
    json_t *bo = o ? json_object_get(o, "breaker") : NULL;
    const char *bw = "scheduler.breaker";
    b->failures = (int)num(c, bo, bw, "failures", b->failures, 0, BREAKER_MAX_WINDOW);
    b->window_ns = (int64_t)(num(c, bo, bw, "window_s", (double)b->window_ns / 1e9, 0.001, 1e6) * 1e9);
    b->cooldown_ns =
        (int64_t)(num(c, bo, bw, "cooldown_s", (double)b->cooldown_ns / 1e9, 0.001, 1e6) * 1e9);
    b->max_cooldown_ns = (int64_t)(num(c, bo, bw, "max_cooldown_s",
                                       (double)b->max_cooldown_ns / 1e9, 0.001, 1e7) *
                                   1e9);
    b->window_attempts = (int)num(c, bo, bw, "window_attempts", b->window_attempts, 0,
                                  BREAKER_MAX_ATTEMPTS);
}

/* Mean run time of one arrival of capability weights capw on a speed-1.0 GPU. */
static double mean_run_s(const struct workload *w, const double *capw)
{
    double sw = 0, sr = 0;
    for (int k = 0; k < w->ncaps; k++) {
        if (capw[k] <= 0)
            continue;
        const struct wl_cap *c = &w->caps[k];
        double szw = 0, szr = 0, ref = (double)(c->ref.width ? c->ref.width : 1) *
                                        (c->ref.height ? c->ref.height : 1) *
                                        (c->ref.steps ? c->ref.steps : 1) *
                                        (c->ref.frames ? c->ref.frames : 1);
        for (int z = 0; z < c->nsizes; z++) {
            const struct wl_size *sz = &c->sizes[z];
            double work = (double)(sz->width ? sz->width : 1) * (sz->height ? sz->height : 1) *
                          (sz->steps ? sz->steps : 1) * (sz->frames ? sz->frames : 1);
            szw += sz->weight;
            szr += sz->weight * work / ref;
        }
        sw += capw[k];
        sr += capw[k] * c->run_s * (szw > 0 ? szr / szw : 1);
    }
    return sw > 0 ? sr / sw : 0;
}

/* tenants[]: {name, weight, rate_gpu_s_per_min, burst_gpu_s, max_inflight}. */
static void load_tenants(struct ctx *c, struct workload *w, json_t *arr)
{
    if (!arr)
        return;
    if (!json_is_array(arr) || json_array_size(arr) > WL_MAX_TENANTS) {
        fail(c, "tenants: must be an array of at most %d objects", WL_MAX_TENANTS);
        return;
    }
    for (size_t i = 0; i < json_array_size(arr) && !c->failed; i++) {
        json_t *o = json_array_get(arr, i);
        char where[32];
        snprintf(where, sizeof(where), "tenants[%zu]", i);
        struct admit_tenant_policy *t = &w->tenants[w->ntenants];
        memset(t, 0, sizeof(*t));
        const char *name = str(c, o, where, "name", NULL);
        if (!name) {
            fail(c, "%s.name: required", where);
            return;
        }
        snprintf(t->name, sizeof(t->name), "%s", name);
        t->weight = num(c, o, where, "weight", 1, 1e-6, 1e6);
        t->rate_gpu_s_per_min = num(c, o, where, "rate_gpu_s_per_min", 0, 0, 1e9);
        t->burst_gpu_s = num(c, o, where, "burst_gpu_s", 0, 0, 1e12);
        t->max_inflight = (int)num(c, o, where, "max_inflight", 0, 0, 1e9);
        w->ntenants++;
    }
}

/* streams[]: {tenant, capabilities {name: weight}, rate_per_s | load, process,
 * cv, start_s, stop_s}. load: the stream's work as a share of the fleet's
 * capacity (sum of speed x slots), converted to a rate. */
static void load_streams(struct ctx *c, struct workload *w, json_t *arr)
{
    if (!json_is_array(arr) || json_array_size(arr) == 0 ||
        json_array_size(arr) > WL_MAX_STREAMS) {
        fail(c, "streams: must be an array of 1 to %d objects", WL_MAX_STREAMS);
        return;
    }
    double capacity = 0;
    for (int g = 0; g < w->ngpus; g++)
        capacity += w->gpus[g].speed * w->gpus[g].concurrency;
    for (size_t i = 0; i < json_array_size(arr) && !c->failed; i++) {
        json_t *o = json_array_get(arr, i);
        char where[32];
        snprintf(where, sizeof(where), "streams[%zu]", i);
        struct wl_stream *st = &w->streams[w->nstreams];
        memset(st, 0, sizeof(*st));
        const char *tn = str(c, o, where, "tenant", NULL);
        st->tenant = -1;
        for (int t = 0; tn && t < w->ntenants; t++)
            if (strcmp(w->tenants[t].name, tn) == 0)
                st->tenant = t;
        if (st->tenant < 0) {
            fail(c, "%s.tenant: must name one of tenants[]", where);
            return;
        }
        json_t *cw = json_object_get(o, "capabilities");
        const char *k;
        json_t *v;
        if (!json_is_object(cw) || json_object_size(cw) == 0) {
            fail(c, "%s.capabilities: required object {capability: weight}", where);
            return;
        }
        json_object_foreach(cw, k, v)
        {
            int ci = find_cap(w, k);
            if (ci < 0 || !json_is_number(v) || json_number_value(v) < 0) {
                fail(c, "%s.capabilities.%s: unknown capability or not a number >= 0", where, k);
                return;
            }
            st->capw[ci] = json_number_value(v);
        }
        const char *p = str(c, o, where, "process", "poisson");
        if (p && strcmp(p, "poisson") == 0)
            st->process = WL_POISSON;
        else if (p && strcmp(p, "gamma") == 0)
            st->process = WL_GAMMA;
        else {
            fail(c, "%s.process: must be poisson or gamma", where);
            return;
        }
        st->cv = num(c, o, where, "cv", 1.0, 0.01, 100);
        st->start_s = num(c, o, where, "start_s", 0, 0, 1e9);
        st->stop_s = num(c, o, where, "stop_s", w->duration_s, 0, 1e9);
        if (st->stop_s > w->duration_s)
            st->stop_s = w->duration_s;
        double load = num(c, o, where, "load", 0, 0, 1e6);
        st->rate_per_s = num(c, o, where, "rate_per_s", 0, 0, 1e7);
        if (load > 0) {
            double run = mean_run_s(w, st->capw);
            st->rate_per_s = run > 0 ? load * capacity / run : 0;
        }
        if (!(st->rate_per_s > 0) && !c->failed) {
            fail(c, "%s: needs rate_per_s or load > 0", where);
            return;
        }
        w->nstreams++;
    }
}

/* admission: {max_wait_s {interactive, batch}, min_retry_s, booking_grace_s,
 * throughput_tau_s}; scheduler.reserved: the first N GPUs serve interactive. */
static void load_admission(struct ctx *c, struct workload *w, json_t *o, json_t *sched)
{
    admit_policy_defaults(&w->admit);
    json_t *rv = sched ? json_object_get(sched, "reserved") : NULL;
    if (rv) {
        if (!json_is_integer(rv) || json_integer_value(rv) < 0 ||
            json_integer_value(rv) > w->ngpus) {
            fail(c, "scheduler.reserved: must be an integer in [0, %d] (GPUs)", w->ngpus);
            return;
        }
        for (int g = 0; g < (int)json_integer_value(rv); g++)
            w->gpus[g].reserved = true;
    }
    if (!o)
        return;
    if (!json_is_object(o)) {
        fail(c, "admission: must be an object");
        return;
    }
    w->admission = true;
    json_t *mw = json_object_get(o, "max_wait_s");
    struct admit_policy *a = &w->admit;
    a->max_wait_s[SCHED_LANE_INTERACTIVE] = num(c, mw, "admission.max_wait_s", "interactive",
                                                a->max_wait_s[SCHED_LANE_INTERACTIVE], 0, 1e9);
    a->max_wait_s[SCHED_LANE_BATCH] = num(c, mw, "admission.max_wait_s", "batch",
                                          a->max_wait_s[SCHED_LANE_BATCH], 0, 1e9);
    a->min_retry_s = num(c, o, "admission", "min_retry_s", a->min_retry_s, 0.001, 1e6);
    a->booking_grace_s = num(c, o, "admission", "booking_grace_s", a->booking_grace_s, 0, 1e6);
    a->throughput_tau_s = num(c, o, "admission", "throughput_tau_s", a->throughput_tau_s, 1, 1e6);
}

struct workload *workload_load(const char *path, char *err, int errlen)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        snprintf(err, (size_t)errlen, "%s:%d: %s", path, jerr.line, jerr.text);
        return NULL;
    }
    struct ctx c = {err, errlen, false};
    struct workload *w = xcalloc(1, sizeof(*w));
    if (!json_is_object(root)) {
        fail(&c, "workload: must be a JSON object");
        goto fail;
    }
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof(dir), ".");
    snprintf(w->name, sizeof(w->name), "%s", str(&c, root, "workload", "name", "workload"));
    w->seed = (uint64_t)num(&c, root, "workload", "seed", 1, 0, 9007199254740992.0);
    w->duration_s = num(&c, root, "workload", "duration_s", 3600, 1, 1e9);
    load_models(&c, w, json_object_get(root, "models"));
    if (!c.failed)
        load_caps(&c, w, json_object_get(root, "capabilities"));
    if (!c.failed)
        load_fleet(&c, w, json_object_get(root, "fleet"), json_object_get(root, "cooling"));
    json_t *streams = json_object_get(root, "streams");
    if (!c.failed)
        load_tenants(&c, w, json_object_get(root, "tenants"));
    if (!c.failed && streams)
        load_streams(&c, w, streams);
    else if (!c.failed)
        load_arrivals(&c, w, json_object_get(root, "arrivals"), dir);
    if (!c.failed)
        load_admission(&c, w, json_object_get(root, "admission"),
                       json_object_get(root, "scheduler"));
    json_t *th = json_object_get(root, "thermal");
    w->throttle_c = num(&c, th, "thermal", "throttle_c", 83, -50, 200);
    w->throttle_speed = num(&c, th, "thermal", "throttle_speed", 0.8, 0.01, 1);
    if (!c.failed)
        load_faults(&c, w, json_object_get(root, "faults"));
    if (!c.failed)
        load_sched(&c, w, json_object_get(root, "scheduler"), json_object_get(root, "baselines"));
    if (c.failed)
        goto fail;
    json_decref(root);
    return w;
fail:
    json_decref(root);
    workload_destroy(w);
    return NULL;
}

void workload_destroy(struct workload *w)
{
    if (!w)
        return;
    free(w->models);
    free(w->caps);
    free(w->gpus);
    free(w->trace);
    free(w->losses);
    free(w);
}

double workload_diurnal(const struct workload *w, double t)
{
    if (w->ndiurnal == 0)
        return 1.0;
    double p = w->diurnal_period_s > 0 ? fmod(t, w->diurnal_period_s) : t;
    if (p <= w->diurnal_t[0])
        return w->diurnal_m[0];
    for (int i = 1; i < w->ndiurnal; i++)
        if (p <= w->diurnal_t[i]) {
            double f = (p - w->diurnal_t[i - 1]) / (w->diurnal_t[i] - w->diurnal_t[i - 1]);
            return w->diurnal_m[i - 1] + f * (w->diurnal_m[i] - w->diurnal_m[i - 1]);
        }
    return w->diurnal_m[w->ndiurnal - 1];
}

double workload_diurnal_max(const struct workload *w)
{
    double m = w->ndiurnal ? 0 : 1.0;
    for (int i = 0; i < w->ndiurnal; i++)
        if (w->diurnal_m[i] > m)
            m = w->diurnal_m[i];
    return m;
}
