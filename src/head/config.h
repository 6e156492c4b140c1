/* config.h: gpuqd's settings — one INI file (docs/configuration.md), every
 * knob with a documented default. Command-line flags override the file. */
#ifndef GPUQ_HEAD_CONFIG_H
#define GPUQ_HEAD_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/admit.h"
#include "core/advisor.h"
#include "core/breaker.h"
#include "core/lifecycle.h"
#include "core/sched.h"

#define CONFIG_MAX_MODELS 64
#define CONFIG_MAX_CAPS 64
#define CONFIG_MAX_TENANTS 64

/* [capability.NAME] max_gpus: a fan-out cap (R14, sched_cap_limit); slo_s:
 * its latency objective (sched_cap_slo). */
struct fanout_config {
    char name[SCHED_NAME_MAX];
    int max_gpus;                /* 0 = none */
    double slo_s;                /* 0 = none */
};

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
    int cpu;                     /* the one CPU every gpuqd thread runs on; -1 (default): any */
    int sched_batch;             /* 1: every thread under SCHED_BATCH; 0 (default): as started */
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
    int wal_preallocate;         /* 1 = the WAL's first checkpoint's worth written as zeros (default) */
    /* [jobs] */
    int allow_unserved;          /* accept a (capability, model) no worker declared; default 0 */
    int64_t max_result_bytes;    /* default 64 MiB */
    int result_retention_h;      /* results kept this long after finishing; default 168 */
    int keep_finished_s;         /* a finished job stays in memory this long; default 600 */
    int keep_finished_max;       /* and the newest this many at most; default 100000 */
    int result_retention_s;      /* > 0: replaces result_retention_h (short ones, tests); 0 */
    int max_wait_s;              /* longest long-poll; default 60 */
    int64_t max_input_bytes;     /* one uploaded input file (POST /v1/inputs); default 32 MiB */
    int max_extra_bytes;         /* params.extra serialized; default 16384 */
    int input_unused_s;          /* an upload no job names is deleted after; default 86400 */
    int max_batch_jobs;          /* jobs in one POST /v1/batches; default 10000 */
    int64_t max_batch_body_bytes; /* a POST /v1/batches body; default 16 MiB */
    /* [workers] */
    int heartbeat_ms;            /* default 2000 */
    int ttl_ms;                  /* silent longer than this → removed; default 15000 */
    /* [lifecycle] max_attempts (also [jobs] max_attempts), lease_ms, orphan_grace_ms */
    struct lc_policy lifecycle;
    /* [breaker] failures, window_ms, window_attempts, cooldown_ms, max_cooldown_ms */
    struct breaker_policy breaker;
    /* [scheduler] */
    struct sched_config sched;
    /* [capacity] */
    int max_gpus;                /* the fleet's maximum size (R13); 0 (default) = GPUs registered */
    int capacity_window_s;       /* throughput measured over this much past; default 300 */
    /* [admission] lane bounds, Retry-After, default tenant terms (core/admit.h) */
    struct admit_policy admit;
    int reserved_gpus;           /* the first N workers to register serve interactive only
                                    (batch borrows them when interactive is idle); default 0 */
    /* [tenant.NAME] weight, rate_gpu_s_per_min, burst_gpu_s, max_inflight */
    struct admit_tenant_policy tenants[CONFIG_MAX_TENANTS];
    int ntenants;
    /* [capability.NAME] max_gpus */
    struct fanout_config fanout[CONFIG_MAX_CAPS];
    int nfanout;
    /* [capabilities] name = default model; [model.NAME] vram_mb, load_ms, class */
    struct cap_config caps[CONFIG_MAX_CAPS];
    int ncaps;
    struct model_info models[CONFIG_MAX_MODELS];
    /* Run-time prior of models[i]: seconds for a default-size job (1024x1024,
     * 30 steps) on a nominal GPU, until measurements replace it. */
    double run_s[CONFIG_MAX_MODELS];
    int nmodels;
    /* [scale] the autoscaling advisor (head/scale.h; its terms: core/advisor.h) */
    int scale_enabled;           /* default 0 (false) */
    int scale_dry_run;           /* decisions only logged; default 0 */
    struct advisor_policy scale; /* k, target/down utilization, max/min GPUs, times */
    char scale_class[SCHED_NAME_MAX]; /* class a scale-up asks for; "" = the most common */
    char scale_up_cmd[1024];     /* shell command run to add GPUs; "" = none */
    char scale_down_cmd[1024];   /* shell command run to release GPUs; "" = none */
    int scale_hook_timeout_s;    /* a hook still running then is killed; default 60 */
    int scale_interval_ms;       /* the advisor runs this often; default 1000 */
};

/* config_defaults fills cfg with every default, including the seeds' fleet of
 * capabilities and models (image.fast/image-v2, image.hq, video, upscale, bg-remove). */
void config_defaults(struct head_config *cfg);
/* config_load applies the file at path over cfg. GPUQ_EINVAL/ENOENT with err set. */
int config_load(struct head_config *cfg, const char *path, char *err, size_t errlen);
/* config_print writes cfg as an INI file that config_load reads back into the
 * same settings (every key, defaults included). GPUQ_EIO if writing failed. */
int config_print(const struct head_config *cfg, FILE *f);
const struct cap_config *config_cap(const struct head_config *cfg, const char *name);
const struct model_info *config_model(const struct head_config *cfg, const char *name);

#endif
