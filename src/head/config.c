/* config.c: defaults and the INI reader for gpuqd's settings. */
#include "head/config.h"

#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/ini.h"

static void add_cap(struct head_config *cfg, const char *name, const char *model)
{
    for (int i = 0; i < cfg->ncaps; i++) {
        if (!strcmp(cfg->caps[i].name, name)) {
            snprintf(cfg->caps[i].default_model, SCHED_NAME_MAX, "%s", model);
            return;
        }
    }
    if (cfg->ncaps == CONFIG_MAX_CAPS)
        return;
    struct cap_config *c = &cfg->caps[cfg->ncaps++];
    snprintf(c->name, sizeof c->name, "%s", name);
    snprintf(c->default_model, sizeof c->default_model, "%s", model);
}

static struct model_info *get_model(struct head_config *cfg, const char *name)
{
    for (int i = 0; i < cfg->nmodels; i++)
        if (!strcmp(cfg->models[i].name, name))
            return &cfg->models[i];
    if (cfg->nmodels == CONFIG_MAX_MODELS)
        return NULL;
    struct model_info *m = &cfg->models[cfg->nmodels++];
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->vram_mb = 1000;
    m->load_ms = 1000;
    m->cls = MODEL_GENERATION;
    cfg->run_s[m - cfg->models] = 1.0;
    return m;
}

static void add_model(struct head_config *cfg, const char *name, int64_t vram_mb, int64_t load_ms,
                      enum model_class cls, double run_s)
{
    struct model_info *m = get_model(cfg, name);
    m->vram_mb = vram_mb;
    m->load_ms = load_ms;
    m->cls = cls;
    cfg->run_s[m - cfg->models] = run_s;
}

void config_defaults(struct head_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->listen, sizeof cfg->listen, "127.0.0.1:7070");
    cfg->max_connections = 1024;
    cfg->http_threads = 2;
    cfg->connection_timeout_s = 30;
    cfg->max_connections_per_address = 64;
    cfg->header_timeout_s = 10;
    cfg->body_timeout_s = 60;
    cfg->max_body_bytes = 65536;
    cfg->trace_max_bytes = 64LL << 20;
    cfg->trace_max_steps = 64;
    cfg->synchronous_full = 1;
    lc_policy_defaults(&cfg->lifecycle);
    breaker_policy_defaults(&cfg->breaker);
    cfg->max_result_bytes = 64LL << 20;
    cfg->result_retention_h = 168;
    cfg->max_wait_s = 60;
    cfg->heartbeat_ms = 2000;
    cfg->ttl_ms = 15000;
    sched_config_defaults(&cfg->sched);
    /* The seeds' cluster (seed 002/003): sizes and load times of its models. */
    add_model(cfg, "image-v2", 22000, 4800, MODEL_GENERATION, 2.5);
    add_model(cfg, "image-hq", 24000, 6000, MODEL_GENERATION, 6.0);
    add_model(cfg, "video", 28000, 9000, MODEL_GENERATION, 75.0);
    add_model(cfg, "upscale", 1500, 800, MODEL_UTILITY, 0.6);
    add_model(cfg, "bg-remove", 1000, 600, MODEL_UTILITY, 0.4);
    add_cap(cfg, "image.fast", "image-v2");
    add_cap(cfg, "image.hq", "image-hq");
    add_cap(cfg, "video", "video");
    add_cap(cfg, "upscale", "upscale");
    add_cap(cfg, "bg-remove", "bg-remove");
}

/* An integer setting in lo..hi, stored times scale. */
#define SET_INT_SCALED(field, lo, hi, scale)                                                   \
    do {                                                                                       \
        long long v_;                                                                          \
        if (ini_int(value, lo, hi, &v_)) {                                                     \
            snprintf(err, errlen, "%s.%s: must be an integer in %lld..%lld", section, key,     \
                     (long long)(lo), (long long)(hi));                                        \
            return 1;                                                                          \
        }                                                                                      \
        field = (int64_t)v_ * (scale);                                                         \
        return 0;                                                                              \
    } while (0)

#define SET_INT(field, lo, hi) SET_INT_SCALED(field, lo, hi, 1)
/* A setting in milliseconds kept in nanoseconds. */
#define SET_INT_NS(field, lo, hi) SET_INT_SCALED(field, lo, hi, 1000000)

/* A setting that is one of two words: the first sets field to 1, the second to 0. */
#define SET_CHOICE(field, yes, no)                                                             \
    do {                                                                                       \
        if (strcmp(value, yes) && strcmp(value, no)) {                                         \
            snprintf(err, errlen, "%s.%s: must be %s or %s", section, key, yes, no);           \
            return 1;                                                                          \
        }                                                                                      \
        field = !strcmp(value, yes);                                                           \
        return 0;                                                                              \
    } while (0)

#define SET_DOUBLE(field, lo, hi)                                                              \
    do {                                                                                       \
        if (ini_double(value, lo, hi, &field)) {                                               \
            snprintf(err, errlen, "%s.%s: must be a number in %g..%g", section, key,           \
                     (double)(lo), (double)(hi));                                              \
            return 1;                                                                          \
        }                                                                                      \
        return 0;                                                                              \
    } while (0)

static int set_model(struct head_config *cfg, const char *model, const char *section,
                     const char *key, const char *value, char *err, size_t errlen)
{
    if (strlen(model) == 0 || strlen(model) >= SCHED_NAME_MAX) {
        snprintf(err, errlen, "%s: model name must be 1..%d characters", section,
                 SCHED_NAME_MAX - 1);
        return 1;
    }
    struct model_info *m = get_model(cfg, model);
    if (!m) {
        snprintf(err, errlen, "%s: too many models (max %d)", section, CONFIG_MAX_MODELS);
        return 1;
    }
    if (!strcmp(key, "vram_mb"))
        SET_INT(m->vram_mb, 1, 1 << 22);
    if (!strcmp(key, "load_ms"))
        SET_INT(m->load_ms, 0, 3600000);
    if (!strcmp(key, "run_s"))
        SET_DOUBLE(cfg->run_s[m - cfg->models], 0.001, 86400);
    if (!strcmp(key, "class")) {
        if (!strcmp(value, "generation"))
            m->cls = MODEL_GENERATION;
        else if (!strcmp(value, "utility"))
            m->cls = MODEL_UTILITY;
        else {
            snprintf(err, errlen, "%s.class: must be generation or utility", section);
            return 1;
        }
        return 0;
    }
    snprintf(err, errlen, "%s.%s: unknown setting", section, key);
    return 1;
}

static int on_setting(void *arg, const char *section, const char *key, const char *value,
                      int line, char *err, size_t errlen)
{
    (void)line;
    struct head_config *cfg = arg;
    if (!strcmp(section, "server")) {
        if (!strcmp(key, "listen")) {
            snprintf(cfg->listen, sizeof cfg->listen, "%s", value);
            return 0;
        }
        if (!strcmp(key, "data")) {
            snprintf(cfg->data_dir, sizeof cfg->data_dir, "%s", value);
            return 0;
        }
        if (!strcmp(key, "max_connections"))
            SET_INT(cfg->max_connections, 4, 100000);
        if (!strcmp(key, "threads"))
            SET_INT(cfg->http_threads, 1, 64);
        if (!strcmp(key, "connection_timeout_s"))
            SET_INT(cfg->connection_timeout_s, 1, 3600);
        if (!strcmp(key, "max_connections_per_address"))
            SET_INT(cfg->max_connections_per_address, 0, 100000);
        if (!strcmp(key, "header_timeout_s"))
            SET_INT(cfg->header_timeout_s, 1, 3600);
        if (!strcmp(key, "body_timeout_s"))
            SET_INT(cfg->body_timeout_s, 1, 86400);
        if (!strcmp(key, "max_body_bytes"))
            SET_INT(cfg->max_body_bytes, 1024, 16 << 20);
    } else if (!strcmp(section, "metrics")) {
        if (!strcmp(key, "token")) {
            size_t n = strlen(value);
            bool bad = n < 16 || n >= sizeof cfg->metrics_token || strcspn(value, " \t") != n;
            if (n > 0 && bad) {
                snprintf(err, errlen,
                         "metrics.token: must be empty (open) or 16..%zu characters without "
                         "spaces",
                         sizeof cfg->metrics_token - 1);
                return GPUQ_EINVAL;
            }
            snprintf(cfg->metrics_token, sizeof cfg->metrics_token, "%s", value);
            return 0;
        }
        if (!strcmp(key, "trace_max_bytes"))
            SET_INT(cfg->trace_max_bytes, 4096, 1LL << 36);
        if (!strcmp(key, "trace_max_steps"))
            SET_INT(cfg->trace_max_steps, 8, 4096);
    } else if (!strcmp(section, "store")) {
        if (!strcmp(key, "synchronous"))
            SET_CHOICE(cfg->synchronous_full, "full", "normal");
    } else if (!strcmp(section, "jobs")) {
        if (!strcmp(key, "max_attempts"))
            SET_INT(cfg->lifecycle.max_attempts, 1, 100);
        if (!strcmp(key, "allow_unserved"))
            SET_CHOICE(cfg->allow_unserved, "true", "false");
        if (!strcmp(key, "max_result_bytes"))
            SET_INT(cfg->max_result_bytes, 1024, 1LL << 32);
        if (!strcmp(key, "result_retention_h"))
            SET_INT(cfg->result_retention_h, 1, 24 * 365);
        if (!strcmp(key, "max_wait_s"))
            SET_INT(cfg->max_wait_s, 1, 3600);
    } else if (!strcmp(section, "workers")) {
        if (!strcmp(key, "heartbeat_ms"))
            SET_INT(cfg->heartbeat_ms, 50, 600000);
        if (!strcmp(key, "ttl_ms"))
            SET_INT(cfg->ttl_ms, 100, 3600000);
    } else if (!strcmp(section, "lifecycle")) {
        if (!strcmp(key, "max_attempts"))
            SET_INT(cfg->lifecycle.max_attempts, 1, 100);
        if (!strcmp(key, "lease_ms"))
            SET_INT_NS(cfg->lifecycle.lease_ns, 100, 86400000);
        if (!strcmp(key, "orphan_grace_ms"))
            SET_INT_NS(cfg->lifecycle.orphan_grace_ns, 0, 3600000);
    } else if (!strcmp(section, "breaker")) {
        if (!strcmp(key, "failures"))
            SET_INT(cfg->breaker.failures, 0, BREAKER_MAX_WINDOW);
        if (!strcmp(key, "window_ms"))
            SET_INT_NS(cfg->breaker.window_ns, 100, 86400000);
        if (!strcmp(key, "window_attempts"))
            SET_INT(cfg->breaker.window_attempts, 0, BREAKER_MAX_ATTEMPTS);
        if (!strcmp(key, "cooldown_ms"))
            SET_INT_NS(cfg->breaker.cooldown_ns, 10, 86400000);
        if (!strcmp(key, "max_cooldown_ms"))
            SET_INT_NS(cfg->breaker.max_cooldown_ns, 10, 86400000);
    } else if (!strcmp(section, "scheduler")) {
        if (!strcmp(key, "queue_depth"))
            SET_INT(cfg->sched.queue_depth, 0, 64);
        if (!strcmp(key, "hot_temp_c"))
            SET_DOUBLE(cfg->sched.hot_temp_c, 0, 150);
        if (!strcmp(key, "hot_penalty"))
            SET_DOUBLE(cfg->sched.hot_penalty, 1, 100);
    } else if (!strcmp(section, "capabilities")) {
        if (strlen(key) >= SCHED_NAME_MAX || strlen(value) == 0 ||
            strlen(value) >= SCHED_NAME_MAX) {
            snprintf(err, errlen, "capabilities.%s: names must be 1..%d characters", key,
                     SCHED_NAME_MAX - 1);
            return 1;
        }
        if (cfg->ncaps == CONFIG_MAX_CAPS && !config_cap(cfg, key)) {
            snprintf(err, errlen, "capabilities: too many (max %d)", CONFIG_MAX_CAPS);
            return 1;
        }
        add_cap(cfg, key, value);
        return 0;
    } else if (!strncmp(section, "model.", 6)) {
        return set_model(cfg, section + 6, section, key, value, err, errlen);
    } else {
        snprintf(err, errlen, "[%s]: unknown section", section);
        return 1;
    }
    snprintf(err, errlen, "%s.%s: unknown setting", section, key);
    return 1;
}

int config_load(struct head_config *cfg, const char *path, char *err, size_t errlen)
{
    int rc = ini_parse_file(path, on_setting, cfg, err, errlen);
    if (rc)
        return rc;
    for (int i = 0; i < cfg->ncaps; i++) {
        if (!config_model(cfg, cfg->caps[i].default_model)) {
            snprintf(err, errlen, "%s: capabilities.%s names model '%s', which has no [model.%s]",
                     path, cfg->caps[i].name, cfg->caps[i].default_model,
                     cfg->caps[i].default_model);
            return GPUQ_EINVAL;
        }
    }
    if (cfg->breaker.max_cooldown_ns < cfg->breaker.cooldown_ns) {
        snprintf(err, errlen, "%s: breaker.max_cooldown_ms must be at least breaker.cooldown_ms",
                 path);
        return GPUQ_EINVAL;
    }
    if (cfg->ttl_ms <= cfg->heartbeat_ms) {
        snprintf(err, errlen, "%s: workers.ttl_ms must exceed workers.heartbeat_ms", path);
        return GPUQ_EINVAL;
    }
    return 0;
}

const struct cap_config *config_cap(const struct head_config *cfg, const char *name)
{
    for (int i = 0; i < cfg->ncaps; i++)
        if (!strcmp(cfg->caps[i].name, name))
            return &cfg->caps[i];
    return NULL;
}

const struct model_info *config_model(const struct head_config *cfg, const char *name)
{
    for (int i = 0; i < cfg->nmodels; i++)
        if (!strcmp(cfg->models[i].name, name))
            return &cfg->models[i];
    return NULL;
}
