/* config.c: defaults and the INI reader for gpuqd's settings. */
#include "head/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
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
    cfg->cpu = -1;
    cfg->connection_timeout_s = 30;
    cfg->max_connections_per_address = 64;
    cfg->header_timeout_s = 10;
    cfg->body_timeout_s = 60;
    cfg->max_body_bytes = 65536;
    cfg->trace_max_bytes = 64LL << 20;
    cfg->trace_max_steps = 64;
    cfg->synchronous_full = 1;
    cfg->wal_preallocate = 1;
    lc_policy_defaults(&cfg->lifecycle);
    breaker_policy_defaults(&cfg->breaker);
    cfg->max_result_bytes = 64LL << 20;
    cfg->result_retention_h = 168;
    cfg->keep_finished_s = 600;
    cfg->keep_finished_max = 100000;
    cfg->max_wait_s = 60;
    cfg->max_input_bytes = 32LL << 20;
    cfg->max_extra_bytes = 16384;
    cfg->input_unused_s = 86400;
    cfg->heartbeat_ms = 2000;
    cfg->ttl_ms = 15000;
    cfg->max_batch_jobs = 10000;
    cfg->max_batch_body_bytes = 16LL << 20;
    cfg->max_gpus = 0;
    cfg->capacity_window_s = 300;
    sched_config_defaults(&cfg->sched);
    admit_policy_defaults(&cfg->admit);
    advisor_policy_defaults(&cfg->scale);
    cfg->scale_hook_timeout_s = 60;
    cfg->scale_interval_ms = 1000;
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

/* ---- the settings table: one row per key, shared by the reader and the printer ---- */

/* How a key's value is stored. */
enum key_type {
    KT_INT,     /* int, an integer in lo..hi */
    KT_I64,     /* int64_t, an integer in lo..hi */
    KT_MS_NS,   /* int64_t nanoseconds, written in milliseconds lo..hi */
    KT_DOUBLE,  /* double in lo..hi */
    KT_STR,     /* char[size], lo..size-1 bytes (lo 0: empty means the default) */
    KT_TOKEN,   /* char[size]: empty (none), or lo..size-1 bytes without blanks */
    KT_CHOICE,  /* int: 1 for the word yes, 0 for the word no */
};

/* A setting. Invariant: (section, key) pairs are unique; an alias (print 0)
 * writes the same field as an earlier row and is not printed. */
struct key_def {
    const char *section, *key;
    enum key_type type;
    size_t off;
    long long lo, hi;          /* KT_INT, KT_I64, KT_MS_NS */
    double dlo, dhi;           /* KT_DOUBLE */
    size_t size;               /* KT_STR */
    const char *yes, *no;      /* KT_CHOICE */
    int print;
};

#define F(field) offsetof(struct head_config, field)
#define K_INT(sec, name, field, lo_, hi_)                                                      \
    {.section = sec, .key = name, .type = KT_INT, .off = F(field), .lo = lo_, .hi = hi_,       \
     .print = 1}
#define K_I64(sec, name, field, lo_, hi_)                                                      \
    {.section = sec, .key = name, .type = KT_I64, .off = F(field), .lo = lo_, .hi = hi_,       \
     .print = 1}
#define K_MS(sec, name, field, lo_, hi_)                                                       \
    {.section = sec, .key = name, .type = KT_MS_NS, .off = F(field), .lo = lo_, .hi = hi_,     \
     .print = 1}
#define K_DBL(sec, name, field, lo_, hi_)                                                      \
    {.section = sec, .key = name, .type = KT_DOUBLE, .off = F(field), .dlo = lo_, .dhi = hi_,  \
     .print = 1}
#define K_STR(sec, name, field, min)                                                           \
    {.section = sec, .key = name, .type = KT_STR, .off = F(field), .lo = min,                  \
     .size = sizeof(((struct head_config *)0)->field), .print = 1}
#define K_TOKEN(sec, name, field, min)                                                         \
    {.section = sec, .key = name, .type = KT_TOKEN, .off = F(field), .lo = min,                \
     .size = sizeof(((struct head_config *)0)->field), .print = 1}
#define K_CHOICE(sec, name, field, y, n)                                                       \
    {.section = sec, .key = name, .type = KT_CHOICE, .off = F(field), .yes = y, .no = n,       \
     .print = 1}

static const struct key_def keys[] = {
    K_STR("server", "listen", listen, 1),
    K_STR("server", "data", data_dir, 0),
    K_INT("server", "max_connections", max_connections, 4, 100000),
    K_INT("server", "threads", http_threads, 1, 64),
    K_INT("server", "cpu", cpu, -1, 4095),
    K_CHOICE("server", "sched_batch", sched_batch, "true", "false"),
    K_INT("server", "connection_timeout_s", connection_timeout_s, 1, 3600),
    K_INT("server", "max_connections_per_address", max_connections_per_address, 0, 100000),
    K_INT("server", "header_timeout_s", header_timeout_s, 1, 3600),
    K_INT("server", "body_timeout_s", body_timeout_s, 1, 86400),
    K_I64("server", "max_body_bytes", max_body_bytes, 1024, 16 << 20),
    K_TOKEN("metrics", "token", metrics_token, 16),
    K_I64("metrics", "trace_max_bytes", trace_max_bytes, 4096, 1LL << 36),
    K_INT("metrics", "trace_max_steps", trace_max_steps, 8, 4096),
    K_CHOICE("store", "synchronous", synchronous_full, "full", "normal"),
    K_CHOICE("store", "wal_preallocate", wal_preallocate, "true", "false"),
    K_INT("jobs", "max_attempts", lifecycle.max_attempts, 1, 100),
    K_CHOICE("jobs", "allow_unserved", allow_unserved, "true", "false"),
    K_I64("jobs", "max_result_bytes", max_result_bytes, 1024, 1LL << 32),
    K_INT("jobs", "result_retention_h", result_retention_h, 1, 24 * 365),
    K_INT("jobs", "result_retention_s", result_retention_s, 0, 86400 * 365),
    K_INT("jobs", "keep_finished_s", keep_finished_s, 10, 86400 * 365),
    K_INT("jobs", "keep_finished_max", keep_finished_max, 100, 100000000),
    K_INT("jobs", "max_wait_s", max_wait_s, 1, 3600),
    K_INT("jobs", "max_batch_jobs", max_batch_jobs, 1, 100000),
    K_I64("jobs", "max_batch_body_bytes", max_batch_body_bytes, 1024, 1LL << 30),
    K_I64("jobs", "max_input_bytes", max_input_bytes, 1024, 1LL << 30),
    K_INT("jobs", "max_extra_bytes", max_extra_bytes, 256, 1 << 20),
    K_INT("jobs", "input_unused_s", input_unused_s, 1, 86400 * 365),
    K_INT("workers", "heartbeat_ms", heartbeat_ms, 50, 600000),
    K_INT("workers", "ttl_ms", ttl_ms, 100, 3600000),
    K_INT("lifecycle", "max_attempts", lifecycle.max_attempts, 1, 100),
    K_MS("lifecycle", "lease_ms", lifecycle.lease_ns, 100, 86400000),
    K_MS("lifecycle", "orphan_grace_ms", lifecycle.orphan_grace_ns, 0, 3600000),
    K_INT("breaker", "failures", breaker.failures, 0, BREAKER_MAX_WINDOW),
    K_MS("breaker", "window_ms", breaker.window_ns, 100, 86400000),
    K_INT("breaker", "window_attempts", breaker.window_attempts, 0, BREAKER_MAX_ATTEMPTS),
    K_MS("breaker", "cooldown_ms", breaker.cooldown_ns, 10, 86400000),
    K_MS("breaker", "max_cooldown_ms", breaker.max_cooldown_ns, 10, 86400000),
    K_INT("scheduler", "queue_depth", sched.queue_depth, 0, 64),
    K_DBL("scheduler", "hot_temp_c", sched.hot_temp_c, 0, 150),
    K_DBL("scheduler", "hot_penalty", sched.hot_penalty, 1, 100),
    K_DBL("scheduler", "move_margin_s", sched.move_margin_s, 0, 3600),
    K_DBL("scheduler", "evict_weight", sched.evict_weight, 0, 100),
    K_DBL("scheduler", "headroom_wait_s", sched.headroom_wait_s, 0, 3600),
    K_DBL("scheduler", "headroom_share", sched.headroom_share, 0, 0.999),
    K_DBL("scheduler", "headroom_window_s", sched.headroom_window_s, 1, 86400),
    K_DBL("scheduler", "preempt_after_s", sched.preempt_after_s, 0, 3600),
    K_DBL("scheduler", "assign_ahead_s", sched.assign_ahead_s, 0, 3600),
    K_INT("scheduler", "free_tier_every", sched.free_tier_every, 1, 1000),
    K_INT("capacity", "max_gpus", max_gpus, 0, 100000),
    K_INT("capacity", "window_s", capacity_window_s, 10, 86400),
    K_DBL("admission", "interactive_max_wait_s", admit.max_wait_s[SCHED_LANE_INTERACTIVE], 0, 1e7),
    K_DBL("admission", "batch_max_wait_s", admit.max_wait_s[SCHED_LANE_BATCH], 0, 1e7),
    K_DBL("admission", "min_retry_s", admit.min_retry_s, 0.001, 3600),
    K_DBL("admission", "booking_grace_s", admit.booking_grace_s, 0, 3600),
    K_DBL("admission", "throughput_window_s", admit.throughput_tau_s, 1, 86400),
    K_INT("admission", "reserved_gpus", reserved_gpus, 0, 100000),
    K_DBL("admission", "assumed_capacity", admit.assumed_capacity, 0.001, 1e6),
    K_DBL("admission", "default_weight", admit.tenant_default.weight, 0.000001, 1e6),
    K_DBL("admission", "default_rate_gpu_s_per_min", admit.tenant_default.rate_gpu_s_per_min, 0,
          1e12),
    K_DBL("admission", "default_burst_gpu_s", admit.tenant_default.burst_gpu_s, 0, 1e12),
    K_INT("admission", "default_max_inflight", admit.tenant_default.max_inflight, 0, 1000000000),
    K_CHOICE("scale", "enabled", scale_enabled, "true", "false"),
    K_CHOICE("scale", "dry_run", scale_dry_run, "true", "false"),
    K_DBL("scale", "k", scale.k_batch, 0.01, 1000),
    K_DBL("scale", "k_batch", scale.k_batch, 0.01, 1000),
    K_DBL("scale", "k_interactive", scale.k_interactive, 0.01, 1000),
    K_DBL("scale", "target_utilization", scale.up_utilization, 0.01, 1),
    K_DBL("scale", "down_utilization", scale.down_utilization, 0.001, 0.999),
    K_INT("scale", "max_gpus", scale.max_gpus, 0, 100000),
    K_INT("scale", "min_gpus", scale.min_gpus, 0, 100000),
    K_INT("scale", "max_step", scale.max_step, 0, 100000),
    K_DBL("scale", "idle_release_s", scale.idle_release_s, 0, 1e7),
    K_DBL("scale", "cooldown_s", scale.cooldown_s, 0, 1e7),
    K_DBL("scale", "cold_start_prior_s", scale.cold_start_prior_s, 0.001, 1e6),
    K_DBL("scale", "cold_start_alpha", scale.alpha, 0.001, 1),
    K_DBL("scale", "pending_timeout_s", scale.pending_timeout_s, 1, 1e7),
    K_STR("scale", "class", scale_class, 0),
    K_STR("scale", "scale_up_cmd", scale_up_cmd, 0),
    K_STR("scale", "scale_down_cmd", scale_down_cmd, 0),
    K_INT("scale", "hook_timeout_s", scale_hook_timeout_s, 1, 86400),
    K_INT("scale", "interval_ms", scale_interval_ms, 50, 3600000),
};
#define NKEYS (sizeof keys / sizeof keys[0])

/* [jobs] max_attempts is an alias of [lifecycle] max_attempts: printed once. */
static bool printed_key(const struct key_def *k)
{
    return k->print && !(!strcmp(k->section, "jobs") && !strcmp(k->key, "max_attempts"));
}

static const struct key_def *find_key(const char *section, const char *key)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (!strcmp(keys[i].section, section) && !strcmp(keys[i].key, key))
            return &keys[i];
    return NULL;
}

static bool known_section(const char *section)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (!strcmp(keys[i].section, section))
            return true;
    return false;
}

/* Stores value into the field k names; 1 with err set (naming section, key, reason) if bad. */
static int set_key(struct head_config *cfg, const struct key_def *k, const char *value, char *err,
                   size_t errlen)
{
    char *field = (char *)cfg + k->off;
    long long v;
    switch (k->type) {
    case KT_INT:
    case KT_I64:
    case KT_MS_NS:
        if (ini_int(value, k->lo, k->hi, &v)) {
            snprintf(err, errlen, "%s.%s: must be an integer in %lld..%lld", k->section, k->key,
                     k->lo, k->hi);
            return 1;
        }
        if (k->type == KT_INT)
            *(int *)field = (int)v;
        else if (k->type == KT_I64)
            *(int64_t *)field = v;
        else
            *(int64_t *)field = v * 1000000;
        return 0;
    case KT_DOUBLE:
        if (ini_double(value, k->dlo, k->dhi, (double *)field)) {
            snprintf(err, errlen, "%s.%s: must be a number in %g..%g", k->section, k->key, k->dlo,
                     k->dhi);
            return 1;
        }
        return 0;
    case KT_STR:
        if (strlen(value) < (size_t)k->lo || strlen(value) >= k->size) {
            snprintf(err, errlen, "%s.%s: must be %lld..%zu characters", k->section, k->key,
                     k->lo, k->size - 1);
            return 1;
        }
        snprintf(field, k->size, "%s", value);
        return 0;
    case KT_TOKEN: {
        size_t n = strlen(value);
        if (n > 0 && (n < (size_t)k->lo || n >= k->size || strcspn(value, " \t") != n)) {
            snprintf(err, errlen,
                     "%s.%s: must be empty (none) or %lld..%zu characters without spaces",
                     k->section, k->key, k->lo, k->size - 1);
            return 1;
        }
        snprintf(field, k->size, "%s", value);
        return 0;
    }
    case KT_CHOICE:
        if (strcmp(value, k->yes) && strcmp(value, k->no)) {
            snprintf(err, errlen, "%s.%s: must be %s or %s", k->section, k->key, k->yes, k->no);
            return 1;
        }
        *(int *)field = !strcmp(value, k->yes);
        return 0;
    }
    return 1;
}

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
    long long v;
    if (!strcmp(key, "vram_mb") || !strcmp(key, "load_ms")) {
        bool vram = key[0] == 'v';
        long long lo = vram ? 1 : 0, hi = vram ? 1 << 22 : 3600000;
        if (ini_int(value, lo, hi, &v)) {
            snprintf(err, errlen, "%s.%s: must be an integer in %lld..%lld", section, key, lo, hi);
            return 1;
        }
        if (vram)
            m->vram_mb = v;
        else
            m->load_ms = v;
        return 0;
    }
    if (!strcmp(key, "run_s")) {
        if (ini_double(value, 0.001, 86400, &cfg->run_s[m - cfg->models])) {
            snprintf(err, errlen, "%s.run_s: must be a number in 0.001..86400", section);
            return 1;
        }
        return 0;
    }
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

/* A number in lo..hi from value; 1 with err set naming section.key if not. */
static int parse_num(const char *section, const char *key, const char *value, double lo,
                     double hi, double *out, char *err, size_t errlen)
{
    char *end;
    double d = strtod(value, &end);
    if (end == value || *end || !(d >= lo && d <= hi)) {
        snprintf(err, errlen, "%s.%s: must be a number in %g..%g", section, key, lo, hi);
        return 1;
    }
    *out = d;
    return 0;
}

/* [tenant.NAME]: a tenant's admission terms (core/admit.h). */
static int set_tenant(struct head_config *cfg, const char *name, const char *section,
                      const char *key, const char *value, char *err, size_t errlen)
{
    if (!name[0] || strlen(name) >= SCHED_NAME_MAX) {
        snprintf(err, errlen, "%s: tenant name must be 1..%d characters", section,
                 SCHED_NAME_MAX - 1);
        return 1;
    }
    struct admit_tenant_policy *t = NULL;
    for (int i = 0; i < cfg->ntenants && !t; i++)
        if (!strcmp(cfg->tenants[i].name, name))
            t = &cfg->tenants[i];
    if (!t) {
        if (cfg->ntenants == CONFIG_MAX_TENANTS) {
            snprintf(err, errlen, "%s: too many tenants (max %d)", section, CONFIG_MAX_TENANTS);
            return 1;
        }
        t = &cfg->tenants[cfg->ntenants++];
        *t = cfg->admit.tenant_default;
        snprintf(t->name, sizeof t->name, "%s", name);
    }
    double d;
    if (!strcmp(key, "weight"))
        return parse_num(section, key, value, 0.000001, 1e6, &t->weight, err, errlen);
    if (!strcmp(key, "rate_gpu_s_per_min"))
        return parse_num(section, key, value, 0, 1e12, &t->rate_gpu_s_per_min, err, errlen);
    if (!strcmp(key, "burst_gpu_s"))
        return parse_num(section, key, value, 0, 1e12, &t->burst_gpu_s, err, errlen);
    if (!strcmp(key, "max_inflight")) {
        if (parse_num(section, key, value, 0, 1e9, &d, err, errlen))
            return 1;
        if (d != (double)(int)d) {
            snprintf(err, errlen, "%s.%s: must be an integer in 0..1000000000", section, key);
            return 1;
        }
        t->max_inflight = (int)d;
        return 0;
    }
    snprintf(err, errlen, "%s.%s: unknown setting (weight, rate_gpu_s_per_min, burst_gpu_s, "
             "max_inflight)", section, key);
    return 1;
}

/* [capability.NAME] max_gpus: a fan-out cap (R14); slo_s: its latency
 * objective, submit to finish (docs/scheduler.md rule 9). */
static int set_fanout(struct head_config *cfg, const char *name, const char *section,
                      const char *key, const char *value, char *err, size_t errlen)
{
    if (!name[0] || strlen(name) >= SCHED_NAME_MAX) {
        snprintf(err, errlen, "%s: capability name must be 1..%d characters", section,
                 SCHED_NAME_MAX - 1);
        return 1;
    }
    bool slo = !strcmp(key, "slo_s");
    if (strcmp(key, "max_gpus") && !slo) {
        snprintf(err, errlen, "%s.%s: unknown setting (max_gpus, slo_s)", section, key);
        return 1;
    }
    double d;
    if (parse_num(section, key, value, 0, slo ? 1e6 : 100000, &d, err, errlen))
        return 1;
    if (!slo && d != (double)(int)d) {
        snprintf(err, errlen, "%s.%s: must be an integer in 0..100000", section, key);
        return 1;
    }
    struct fanout_config *f = NULL;
    for (int i = 0; i < cfg->nfanout && !f; i++)
        if (!strcmp(cfg->fanout[i].name, name))
            f = &cfg->fanout[i];
    if (!f) {
        if (cfg->nfanout == CONFIG_MAX_CAPS) {
            snprintf(err, errlen, "%s: too many capabilities (max %d)", section, CONFIG_MAX_CAPS);
            return 1;
        }
        f = &cfg->fanout[cfg->nfanout++];
        snprintf(f->name, sizeof f->name, "%s", name);
    }
    if (slo)
        f->slo_s = d;
    else
        f->max_gpus = (int)d;
    return 0;
}

static int on_setting(void *arg, const char *section, const char *key, const char *value,
                      int line, char *err, size_t errlen)
{
    (void)line;
    struct head_config *cfg = arg;
    const struct key_def *k = find_key(section, key);
    if (k)
        return set_key(cfg, k, value, err, errlen);
    if (known_section(section)) {
        snprintf(err, errlen, "%s.%s: unknown setting", section, key);
        return 1;
    }
    if (!strcmp(section, "capabilities")) {
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
    }
    if (!strncmp(section, "model.", 6))
        return set_model(cfg, section + 6, section, key, value, err, errlen);
    if (!strncmp(section, "tenant.", 7))
        return set_tenant(cfg, section + 7, section, key, value, err, errlen);
    if (!strncmp(section, "capability.", 11))
        return set_fanout(cfg, section + 11, section, key, value, err, errlen);
    snprintf(err, errlen, "[%s]: unknown section", section);
    return 1;
}

/* A double written so that reading it back gives the same double. */
static void put_double(FILE *f, double d)
{
    char b[40];
    snprintf(b, sizeof b, "%.15g", d);
    if (strtod(b, NULL) != d)
        snprintf(b, sizeof b, "%.17g", d);
    fputs(b, f);
}

/* A string value, quoted when the reader would otherwise cut or trim it. */
static void put_str(FILE *f, const char *v)
{
    bool quote = !v[0] || strpbrk(v, "#;\"") || v[0] == ' ' || v[0] == '\t' ||
                 v[strlen(v) - 1] == ' ' || v[strlen(v) - 1] == '\t';
    fprintf(f, quote ? "\"%s\"" : "%s", v);
}

int config_print(const struct head_config *cfg, FILE *f)
{
    fputs("# gpuqd's effective configuration (gpuqd --print-config); docs/configuration.md\n",
          f);
    const char *section = NULL;
    for (size_t i = 0; i < NKEYS; i++) {
        const struct key_def *k = &keys[i];
        if (!printed_key(k))
            continue;
        if (!section || strcmp(section, k->section)) {
            fprintf(f, "%s[%s]\n", section ? "\n" : "", k->section);
            section = k->section;
        }
        const char *field = (const char *)cfg + k->off;
        fprintf(f, "%s = ", k->key);
        switch (k->type) {
        case KT_INT: fprintf(f, "%d", *(const int *)field); break;
        case KT_I64: fprintf(f, "%lld", (long long)*(const int64_t *)field); break;
        case KT_MS_NS: fprintf(f, "%lld", (long long)(*(const int64_t *)field / 1000000)); break;
        case KT_DOUBLE: put_double(f, *(const double *)field); break;
        case KT_STR:
        case KT_TOKEN: put_str(f, field); break;
        case KT_CHOICE: fputs(*(const int *)field ? k->yes : k->no, f); break;
        }
        fputc('\n', f);
    }
    fputs("\n[capabilities]\n", f);
    for (int i = 0; i < cfg->ncaps; i++)
        fprintf(f, "%s = %s\n", cfg->caps[i].name, cfg->caps[i].default_model);
    for (int i = 0; i < cfg->nmodels; i++) {
        const struct model_info *m = &cfg->models[i];
        fprintf(f, "\n[model.%s]\nvram_mb = %lld\nload_ms = %lld\nclass = %s\nrun_s = ", m->name,
                (long long)m->vram_mb, (long long)m->load_ms,
                m->cls == MODEL_UTILITY ? "utility" : "generation");
        put_double(f, cfg->run_s[i]);
        fputc('\n', f);
    }
    for (int i = 0; i < cfg->ntenants; i++) {
        const struct admit_tenant_policy *t = &cfg->tenants[i];
        fprintf(f, "\n[tenant.%s]\nweight = ", t->name);
        put_double(f, t->weight);
        fputs("\nrate_gpu_s_per_min = ", f);
        put_double(f, t->rate_gpu_s_per_min);
        fputs("\nburst_gpu_s = ", f);
        put_double(f, t->burst_gpu_s);
        fprintf(f, "\nmax_inflight = %d\n", t->max_inflight);
    }
    for (int i = 0; i < cfg->nfanout; i++) {
        fprintf(f, "\n[capability.%s]\nmax_gpus = %d\nslo_s = ", cfg->fanout[i].name,
                cfg->fanout[i].max_gpus);
        put_double(f, cfg->fanout[i].slo_s);
        fputc('\n', f);
    }
    return ferror(f) ? GPUQ_EIO : 0;
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
    char why[160];
    if (advisor_policy_check(&cfg->scale, why, sizeof why)) {
        snprintf(err, errlen, "%s: scale.%s", path, why);
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
