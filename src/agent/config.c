/* config.c: gpuq-agent's settings (see config.h and docs/agent-config.md). */
#include "agent/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "common/ini.h"

static void add_caps(char caps[][AGENT_NAME_MAX], int *ncaps, const char *list)
{
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '\t')
            p++;
        size_t n = strcspn(p, " ,\t");
        if (n == 0)
            break;
        if (n < AGENT_NAME_MAX && *ncaps < AGENT_MAX_CAPS) {
            bool dup = false;
            for (int i = 0; i < *ncaps; i++)
                if (strlen(caps[i]) == n && strncmp(caps[i], p, n) == 0)
                    dup = true;
            if (!dup) {
                memcpy(caps[*ncaps], p, n);
                caps[*ncaps][n] = '\0';
                (*ncaps)++;
            }
        }
        p += n;
    }
}

/* Splits a comma/space list; fails on an item too long or too many items. */
static int split_list(const char *list, char items[][AGENT_NAME_MAX], int max, int *n, char *err,
                      size_t errlen)
{
    *n = 0;
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '\t')
            p++;
        size_t len = strcspn(p, " ,\t");
        if (len == 0)
            break;
        if (len >= AGENT_NAME_MAX || *n >= max) {
            snprintf(err, errlen, "list item too long or too many items");
            return -1;
        }
        memcpy(items[*n], p, len);
        items[*n][len] = '\0';
        (*n)++;
        p += len;
    }
    return 0;
}

static void builtin_model(struct agent_config *c, const char *name, int64_t vram, int64_t load,
                          enum model_class cls, bool pinned, const char *caps)
{
    struct agent_model *m = &c->models[c->nmodels++];
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->vram_mb = vram;
    m->load_ms = load;
    m->cls = cls;
    m->pinned = pinned;
    add_caps(m->caps, &m->ncaps, caps);
}

void agent_config_defaults(struct agent_config *cfg, const char *argv0)
{
    memset(cfg, 0, sizeof *cfg);
    const char *slash = argv0 ? strrchr(argv0, '/') : NULL;
    if (slash)
        snprintf(cfg->runtime, sizeof cfg->runtime, "%.*s/gpuq-sim-runtime",
                 (int)(slash - argv0), argv0);
    else
        snprintf(cfg->runtime, sizeof cfg->runtime, "gpuq-sim-runtime");
    if (gethostname(cfg->host, sizeof cfg->host) != 0 || !cfg->host[0])
        snprintf(cfg->host, sizeof cfg->host, "localhost");
    cfg->host[sizeof cfg->host - 1] = '\0';
    snprintf(cfg->nvml_library, sizeof cfg->nvml_library, "libnvidia-ml.so.1");
    cfg->nvml = true;
    cfg->concurrency = 1;
    cfg->heartbeat_ms = 2000;
    cfg->telemetry_ms = 250;
    cfg->ping_interval_ms = 1000;
    cfg->ping_timeout_ms = 10000;
    cfg->poll_wait_s = 5;
    cfg->progress_ms = 250;
    cfg->warmup = true;
    cfg->restart_min_ms = 200;
    cfg->restart_max_ms = 10000;
    cfg->hello_timeout_ms = 30000;
    cfg->load_timeout_ms = 600000;
    cfg->max_line_bytes = 65536;
    cfg->max_output_bytes = 256ll << 20;
    cfg->qc = true;
    cfg->qc_min_variance = 4.0;
    cfg->outbox_max_jobs = 32;
    cfg->outbox_max_bytes = 1ll << 30;
    cfg->outbox_retry_min_ms = 200;
    cfg->outbox_retry_max_ms = 5000;
    cfg->outbox_batch = true;
    cfg->early_assign = true;
    cfg->group_poll = true;
    cfg->assign_ahead = true;
    cfg->outbox_memory_bytes = 64 << 10;
    cfg->flood_bad_lines = 100;
    cfg->flood_window_ms = 1000;
    gpu_sim_shape_default(&cfg->sim_shape);
    /* The seeds' models (the same names and figures as gpuqd's defaults): image
     * generation ~22 GB loading in ~4.8 s, video 28 GB, utility models 1–2 GB.
     * Only image-v2 is pinned, so a 32 GB GPU offers image.fast and the
     * utilities; a [gpu.N] section can pin other models instead. */
    builtin_model(cfg, "image-v2", 22000, 4800, MODEL_GENERATION, true, "image.fast");
    builtin_model(cfg, "image-hq", 24000, 6000, MODEL_GENERATION, false, "image.hq");
    builtin_model(cfg, "video", 28000, 9000, MODEL_GENERATION, false, "video");
    builtin_model(cfg, "upscale", 1500, 800, MODEL_UTILITY, false, "upscale");
    builtin_model(cfg, "bg-remove", 1000, 600, MODEL_UTILITY, false, "bg-remove");
}

/* Parse state: the config plus whether the built-in models were replaced. */
struct parse_state {
    struct agent_config *cfg;
    bool models_replaced;
};

#define SET_INT(field, lo, hi)                                                                    \
    do {                                                                                          \
        long long v_;                                                                             \
        if (ini_int(value, lo, hi, &v_)) {                                                        \
            snprintf(err, errlen, "%s: must be an integer in %lld..%lld", key, (long long)(lo),   \
                     (long long)(hi));                                                            \
            return 1;                                                                             \
        }                                                                                         \
        field = v_;                                                                               \
    } while (0)
#define SET_DBL(field, lo, hi)                                                                    \
    do {                                                                                          \
        if (ini_double(value, lo, hi, &field)) {                                                  \
            snprintf(err, errlen, "%s: must be a number in %g..%g", key, (double)(lo),            \
                     (double)(hi));                                                               \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)
#define SET_BOOL(field)                                                                           \
    do {                                                                                          \
        int b_;                                                                                   \
        if (ini_bool(value, &b_)) {                                                               \
            snprintf(err, errlen, "%s: must be true or false", key);                              \
            return 1;                                                                             \
        }                                                                                         \
        field = b_ != 0;                                                                          \
    } while (0)
#define SET_STR(field)                                                                            \
    do {                                                                                          \
        if (strlen(value) >= sizeof(field)) {                                                     \
            snprintf(err, errlen, "%s: too long", key);                                           \
            return 1;                                                                             \
        }                                                                                         \
        snprintf(field, sizeof(field), "%s", value);                                              \
    } while (0)

static int shape_key(struct gpu_sim_shape *s, const char *key, const char *value, char *err,
                     size_t errlen, bool *known)
{
    *known = true;
    if (strcmp(key, "name") == 0 || strcmp(key, "sim_name") == 0)
        SET_STR(s->name);
    else if (strcmp(key, "vram_mb") == 0 || strcmp(key, "sim_vram_mb") == 0)
        SET_INT(s->vram_mb, 1024, 1 << 24);
    else if (strcmp(key, "ambient_c") == 0 || strcmp(key, "sim_ambient_c") == 0)
        SET_DBL(s->ambient_c, -20, 100);
    else if (strcmp(key, "heat_c") == 0 || strcmp(key, "sim_heat_c") == 0)
        SET_DBL(s->heat_c, 0, 150);
    else if (strcmp(key, "tau_s") == 0 || strcmp(key, "sim_tau_s") == 0)
        SET_DBL(s->tau_s, 0.001, 3600);
    else if (strcmp(key, "throttle_c") == 0 || strcmp(key, "sim_throttle_c") == 0)
        SET_DBL(s->throttle_c, 0, 150);
    else if (strcmp(key, "idle_w") == 0 || strcmp(key, "sim_idle_w") == 0)
        SET_DBL(s->idle_w, 0, 5000);
    else if (strcmp(key, "max_w") == 0 || strcmp(key, "sim_max_w") == 0)
        SET_DBL(s->max_w, 0, 5000);
    else if (strcmp(key, "clock_mhz") == 0 || strcmp(key, "sim_clock_mhz") == 0)
        SET_INT(s->clock_mhz, 1, 10000);
    else
        *known = false;
    return 0;
}

static int agent_key(struct agent_config *c, const char *key, const char *value, char *err,
                     size_t errlen)
{
    if (strcmp(key, "runtime") == 0)
        SET_STR(c->runtime);
    else if (strcmp(key, "host") == 0)
        SET_STR(c->host);
    else if (strcmp(key, "work_dir") == 0)
        SET_STR(c->work_dir);
    else if (strcmp(key, "nvml_library") == 0)
        SET_STR(c->nvml_library);
    else if (strcmp(key, "nvml") == 0)
        SET_BOOL(c->nvml);
    else if (strcmp(key, "sim_gpus") == 0)
        SET_INT(c->sim_gpus, 0, GPU_MAX);
    else if (strcmp(key, "concurrency") == 0)
        SET_INT(c->concurrency, 1, 64);
    else if (strcmp(key, "heartbeat_ms") == 0)
        SET_INT(c->heartbeat_ms, 50, 600000);
    else if (strcmp(key, "telemetry_ms") == 0)
        SET_INT(c->telemetry_ms, 20, 60000);
    else if (strcmp(key, "ping_interval_ms") == 0)
        SET_INT(c->ping_interval_ms, 20, 600000);
    else if (strcmp(key, "ping_timeout_ms") == 0)
        SET_INT(c->ping_timeout_ms, 50, 3600000);
    else if (strcmp(key, "poll_wait_s") == 0)
        SET_INT(c->poll_wait_s, 1, 60);
    else if (strcmp(key, "progress_ms") == 0)
        SET_INT(c->progress_ms, 0, 600000);
    else if (strcmp(key, "warmup") == 0)
        SET_BOOL(c->warmup);
    else if (strcmp(key, "restart_min_ms") == 0)
        SET_INT(c->restart_min_ms, 1, 3600000);
    else if (strcmp(key, "restart_max_ms") == 0)
        SET_INT(c->restart_max_ms, 1, 3600000);
    else if (strcmp(key, "hello_timeout_ms") == 0)
        SET_INT(c->hello_timeout_ms, 50, 3600000);
    else if (strcmp(key, "load_timeout_ms") == 0)
        SET_INT(c->load_timeout_ms, 50, 86400000);
    else if (strcmp(key, "max_line_bytes") == 0)
        SET_INT(c->max_line_bytes, 1024, 64 << 20);
    else if (strcmp(key, "max_output_bytes") == 0)
        SET_INT(c->max_output_bytes, 1024, 1ll << 34);
    else if (strcmp(key, "vram_reserve_mb") == 0)
        SET_INT(c->vram_reserve_mb, 0, 1 << 24);
    else if (strcmp(key, "qc") == 0)
        SET_BOOL(c->qc);
    else if (strcmp(key, "qc_min_variance") == 0)
        SET_DBL(c->qc_min_variance, 0, 1e9);
    else if (strcmp(key, "outbox_max_jobs") == 0)
        SET_INT(c->outbox_max_jobs, 1, 128);
    else if (strcmp(key, "outbox_max_bytes") == 0)
        SET_INT(c->outbox_max_bytes, 1 << 20, 1ll << 40);
    else if (strcmp(key, "outbox_retry_min_ms") == 0)
        SET_INT(c->outbox_retry_min_ms, 1, 60000);
    else if (strcmp(key, "outbox_retry_max_ms") == 0)
        SET_INT(c->outbox_retry_max_ms, 1, 600000);
    else if (strcmp(key, "outbox_batch") == 0)
        SET_BOOL(c->outbox_batch);
    else if (strcmp(key, "early_assign") == 0)
        SET_BOOL(c->early_assign);
    else if (strcmp(key, "group_poll") == 0)
        SET_BOOL(c->group_poll);
    else if (strcmp(key, "assign_ahead") == 0)
        SET_BOOL(c->assign_ahead);
    else if (strcmp(key, "sched_batch") == 0)
        SET_BOOL(c->sched_batch);
    else if (strcmp(key, "outbox_memory_bytes") == 0)
        SET_INT(c->outbox_memory_bytes, 0, 1 << 20);
    else if (strcmp(key, "flood_bad_lines") == 0)
        SET_INT(c->flood_bad_lines, 1, 100000000);
    else if (strcmp(key, "flood_window_ms") == 0)
        SET_INT(c->flood_window_ms, 10, 600000);
    else {
        snprintf(err, errlen, "unknown setting [agent] %s", key);
        return 1;
    }
    return 0;
}

static struct agent_model *model_section(struct parse_state *ps, const char *name, char *err,
                                         size_t errlen)
{
    struct agent_config *c = ps->cfg;
    if (!ps->models_replaced) {
        c->nmodels = 0;
        ps->models_replaced = true;
    }
    if (!name[0] || strlen(name) >= AGENT_NAME_MAX) {
        snprintf(err, errlen, "model name empty or too long");
        return NULL;
    }
    for (int i = 0; i < c->nmodels; i++)
        if (strcmp(c->models[i].name, name) == 0)
            return &c->models[i];
    if (c->nmodels >= AGENT_MAX_MODELS) {
        snprintf(err, errlen, "too many models (max %d)", AGENT_MAX_MODELS);
        return NULL;
    }
    struct agent_model *m = &c->models[c->nmodels++];
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->vram_mb = 1000;
    m->load_ms = 1000;
    m->cls = MODEL_GENERATION;
    return m;
}

static int model_key(struct agent_model *m, const char *key, const char *value, char *err,
                     size_t errlen)
{
    if (strcmp(key, "vram_mb") == 0)
        SET_INT(m->vram_mb, 1, 1 << 24);
    else if (strcmp(key, "load_ms") == 0)
        SET_INT(m->load_ms, 0, 86400000);
    else if (strcmp(key, "pinned") == 0)
        SET_BOOL(m->pinned);
    else if (strcmp(key, "class") == 0) {
        if (strcmp(value, "generation") == 0)
            m->cls = MODEL_GENERATION;
        else if (strcmp(value, "utility") == 0)
            m->cls = MODEL_UTILITY;
        else {
            snprintf(err, errlen, "class: must be generation or utility");
            return 1;
        }
    } else if (strcmp(key, "capabilities") == 0) {
        if (split_list(value, m->caps, AGENT_MAX_CAPS, &m->ncaps, err, errlen))
            return 1;
    } else {
        snprintf(err, errlen, "unknown setting [model.%s] %s", m->name, key);
        return 1;
    }
    return 0;
}

static int gpu_key(struct agent_config *c, struct agent_gpu_cfg *g, const char *key,
                   const char *value, char *err, size_t errlen)
{
    if (strcmp(key, "capabilities") == 0)
        return split_list(value, g->caps, AGENT_MAX_CAPS, &g->ncaps, err, errlen) ? 1 : 0;
    if (strcmp(key, "pinned") == 0) {
        g->pinned_set = true;
        return split_list(value, g->pinned, AGENT_MAX_MODELS, &g->npinned, err, errlen) ? 1 : 0;
    }
    if (strcmp(key, "concurrency") == 0) {
        SET_INT(g->concurrency, 1, 64);
        return 0;
    }
    if (!g->shape_set) {
        g->shape = c->sim_shape;
        g->shape_set = true;
    }
    bool known;
    if (shape_key(&g->shape, key, value, err, errlen, &known))
        return 1;
    if (!known) {
        snprintf(err, errlen, "unknown setting [gpu.N] %s", key);
        return 1;
    }
    return 0;
}

static int on_setting(void *arg, const char *section, const char *key, const char *value, int line,
                      char *err, size_t errlen)
{
    (void)line;
    struct parse_state *ps = arg;
    struct agent_config *c = ps->cfg;
    if (strcmp(section, "agent") == 0 || section[0] == '\0')
        return agent_key(c, key, value, err, errlen);
    if (strcmp(section, "sim") == 0) {
        bool known;
        if (shape_key(&c->sim_shape, key, value, err, errlen, &known))
            return 1;
        if (!known) {
            snprintf(err, errlen, "unknown setting [sim] %s", key);
            return 1;
        }
        return 0;
    }
    if (strncmp(section, "model.", 6) == 0) {
        const char *name = section + 6;
        while (*name == ' ')
            name++;
        struct agent_model *m = model_section(ps, name, err, errlen);
        return m ? model_key(m, key, value, err, errlen) : 1;
    }
    if (strncmp(section, "gpu.", 4) == 0) {
        long long idx;
        if (ini_int(section + 4, 0, GPU_MAX - 1, &idx)) {
            snprintf(err, errlen, "[gpu.N]: N must be 0..%d", GPU_MAX - 1);
            return 1;
        }
        return gpu_key(c, &c->gpus[idx], key, value, err, errlen);
    }
    snprintf(err, errlen, "unknown section [%s]", section);
    return 1;
}

static int validate(struct agent_config *c, char *err, size_t errlen)
{
    if (c->restart_max_ms < c->restart_min_ms) {
        snprintf(err, errlen, "restart_max_ms must be >= restart_min_ms");
        return GPUQ_EINVAL;
    }
    if (c->outbox_retry_max_ms < c->outbox_retry_min_ms) {
        snprintf(err, errlen, "outbox_retry_max_ms must be >= outbox_retry_min_ms");
        return GPUQ_EINVAL;
    }
    if (c->nmodels == 0) {
        snprintf(err, errlen, "no model configured");
        return GPUQ_EINVAL;
    }
    for (int g = 0; g < GPU_MAX; g++)
        for (int i = 0; i < c->gpus[g].npinned; i++)
            if (!agent_config_model(c, c->gpus[g].pinned[i])) {
                snprintf(err, errlen, "[gpu.%d] pinned: unknown model %s", g,
                         c->gpus[g].pinned[i]);
                return GPUQ_EINVAL;
            }
    return 0;
}

int agent_config_parse_string(struct agent_config *cfg, const char *text, char *err,
                              size_t errlen)
{
    struct parse_state ps = {.cfg = cfg};
    int rc = ini_parse_string(text, "config", on_setting, &ps, err, errlen);
    return rc ? rc : validate(cfg, err, errlen);
}

int agent_config_load(struct agent_config *cfg, const char *path, char *err, size_t errlen)
{
    struct parse_state ps = {.cfg = cfg};
    int rc = ini_parse_file(path, on_setting, &ps, err, errlen);
    return rc ? rc : validate(cfg, err, errlen);
}

const struct agent_model *agent_config_model(const struct agent_config *cfg, const char *name)
{
    for (int i = 0; i < cfg->nmodels; i++)
        if (strcmp(cfg->models[i].name, name) == 0)
            return &cfg->models[i];
    return NULL;
}

static bool gpu_pins(const struct agent_config *cfg, int index, const struct agent_model *m)
{
    const struct agent_gpu_cfg *g = &cfg->gpus[index];
    if (!g->pinned_set)
        return m->pinned;
    for (int i = 0; i < g->npinned; i++)
        if (strcmp(g->pinned[i], m->name) == 0)
            return true;
    return false;
}

static bool cap_allowed(const struct agent_gpu_cfg *g, const char *cap)
{
    if (g->ncaps == 0)
        return true;
    for (int i = 0; i < g->ncaps; i++)
        if (strcmp(g->caps[i], cap) == 0)
            return true;
    return false;
}

void agent_config_view(const struct agent_config *cfg, int index, int64_t vram_total_mb,
                       struct agent_worker_view *out)
{
    memset(out, 0, sizeof *out);
    const struct agent_gpu_cfg *g = &cfg->gpus[index];
    out->concurrency = g->concurrency > 0 ? g->concurrency : cfg->concurrency;
    out->ahead = cfg->assign_ahead ? 1 : 0;
    int64_t budget = vram_total_mb - cfg->vram_reserve_mb;
    int64_t pinned_mb = 0;
    /* Pinned models first: they stay resident, so the rest must fit beside them. */
    for (int i = 0; i < cfg->nmodels; i++) {
        const struct agent_model *m = &cfg->models[i];
        if (!gpu_pins(cfg, index, m) || pinned_mb + m->vram_mb > budget)
            continue;
        pinned_mb += m->vram_mb;
        out->pinned[out->nmodels] = true;
        out->model_idx[out->nmodels++] = i;
    }
    for (int i = 0; i < cfg->nmodels; i++) {
        const struct agent_model *m = &cfg->models[i];
        if (gpu_pins(cfg, index, m) || pinned_mb + m->vram_mb > budget)
            continue;
        bool any = false;
        for (int k = 0; k < m->ncaps; k++)
            any |= cap_allowed(g, m->caps[k]);
        if (!any && m->ncaps > 0)
            continue;
        out->model_idx[out->nmodels++] = i;
    }
    for (int j = 0; j < out->nmodels; j++) {
        const struct agent_model *m = &cfg->models[out->model_idx[j]];
        for (int k = 0; k < m->ncaps; k++)
            if (cap_allowed(g, m->caps[k]))
                add_caps(out->caps, &out->ncaps, m->caps[k]);
    }
}

void agent_config_sim_shape(const struct agent_config *cfg, int index, struct gpu_sim_shape *out)
{
    *out = cfg->gpus[index].shape_set ? cfg->gpus[index].shape : cfg->sim_shape;
}
