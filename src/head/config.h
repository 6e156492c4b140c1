/* config.h: gpuqd's settings — one INI file (docs/configuration.md), every
 * knob with a documented default. Command-line flags override the file. */
#ifndef GPUQ_HEAD_CONFIG_H
#define GPUQ_HEAD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "core/breaker.h"
#include "core/lifecycle.h"
#include "core/sched.h"

#define CONFIG_MAX_MODELS 64
#define CONFIG_MAX_CAPS 64

struct cap_config {
    char name[SCHED_NAME_MAX];
    char default_model[SCHED_NAME_MAX];
};

struct head_config {
    /* [server] */
    char listen[128];            /* HOST:PORT; default 127.0.0.1:7070 */
    char data_dir[512];
    int max_connections;         /* max concurrent connections; default 1024 */
    int http_threads;            /* event-loop threads serving them; default 2 */
    int connection_timeout_s;    /* idle client timeout; default 30 */
    int max_connections_per_address; /* from one client address; default 64, 0 = no cap */
    int header_timeout_s;        /* request line and headers due within; default 10 */
    int body_timeout_s;          /* whole body due within, after the headers; default 60 */
    int64_t max_body_bytes;      /* JSON request bodies; default 65536 */
    /* [metrics] token: a bearer token /metrics requires ("" = open; default) */
    char metrics_token[128];
    int64_t trace_max_bytes;     /* [metrics] all jobs' traces in memory; default 64 MiB */
    int trace_max_steps;         /* [metrics] steps kept per job; default 64 */
    /* [store] */
    int synchronous_full;        /* 1 = FULL (default), 0 = NORMAL (not durable on power loss) */
    /* [jobs] */
    int allow_unserved;          /* accept a (capability, model) no worker declared; default 0 */
    int64_t max_result_bytes;    /* default 64 MiB */
    int result_retention_h;      /* results kept this long after finishing; default 168 */
    int max_wait_s;              /* longest long-poll; default 60 */
    /* [workers] */
    int heartbeat_ms;            /* default 2000 */
    int ttl_ms;                  /* silent longer than this → removed; default 15000 */
    /* [lifecycle] max_attempts (also [jobs] max_attempts), lease_ms, orphan_grace_ms */
    struct lc_policy lifecycle;
    /* [breaker] failures, window_ms, window_attempts, cooldown_ms, max_cooldown_ms */
    struct breaker_policy breaker;
    /* [scheduler] */
    struct sched_config sched;
    /* [capabilities] name = default model; [model.NAME] vram_mb, load_ms, class */
    struct cap_config caps[CONFIG_MAX_CAPS];
    int ncaps;
    struct model_info models[CONFIG_MAX_MODELS];
    /* Run-time prior of models[i]: seconds for a default-size job (1024x1024,
     * 30 steps) on a nominal GPU, until measurements replace it. */
    double run_s[CONFIG_MAX_MODELS];
    int nmodels;
};

/* config_defaults fills cfg with every default, including the seeds' fleet of
 * capabilities and models (image.fast/image-v2, image.hq, video, upscale, bg-remove). */
void config_defaults(struct head_config *cfg);
/* config_load applies the file at path over cfg. GPUQ_EINVAL/ENOENT with err set. */
int config_load(struct head_config *cfg, const char *path, char *err, size_t errlen);
const struct cap_config *config_cap(const struct head_config *cfg, const char *name);
const struct model_info *config_model(const struct head_config *cfg, const char *name);

#endif
