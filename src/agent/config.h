/* config.h: gpuq-agent's settings — defaults, the INI file (docs/agent-config.md)
 * and the per-GPU view derived from them (which models, capabilities and pinned
 * models each worker has). Plain data: one struct agent_config, filled once at
 * start and read-only afterwards. */
#ifndef GPUQ_AGENT_CONFIG_H
#define GPUQ_AGENT_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/types.h"
#include "gpu/gpu.h"

#define AGENT_NAME_MAX 64
#define AGENT_MAX_MODELS 32
#define AGENT_MAX_CAPS 16
#define AGENT_CMD_MAX 2048

/* A model the runtime can load. Invariant: name non-empty, vram_mb > 0. */
struct agent_model {
    char name[AGENT_NAME_MAX];
    int64_t vram_mb;
    int64_t load_ms;
    enum model_class cls;
    bool pinned; /* default for every GPU; a [gpu.N] pinned list overrides */
    char caps[AGENT_MAX_CAPS][AGENT_NAME_MAX];
    int ncaps;
};

/* Per-GPU overrides from a [gpu.N] section. Zero/empty means "the default". */
struct agent_gpu_cfg {
    char caps[AGENT_MAX_CAPS][AGENT_NAME_MAX]; /* restricts capabilities */
    int ncaps;
    char pinned[AGENT_MAX_MODELS][AGENT_NAME_MAX];
    int npinned;
    bool pinned_set;
    int concurrency;
    struct gpu_sim_shape shape; /* simulated GPU N */
    bool shape_set;
};

struct agent_config {
    char runtime[AGENT_CMD_MAX]; /* shell command; default: gpuq-sim-runtime beside the agent */
    char host[AGENT_NAME_MAX];   /* default: hostname */
    char work_dir[PATH_MAX];     /* runtime outputs; default: $TMPDIR/gpuq-agent-<pid> */
    char nvml_library[PATH_MAX]; /* default: libnvidia-ml.so.1 */
    bool nvml;                   /* try NVML at all (default true) */
    int sim_gpus;                /* > 0: simulate this many GPUs (no NVML); default 0 = auto */
    int concurrency;             /* jobs at once per GPU; default 1 */
    int heartbeat_ms;            /* until the head's register answer says; default 2000 */
    int busy_heartbeat_ms;       /* from the head (preemption on): while a worker holds
                                  * work; 0 = heartbeat_ms */
    int telemetry_ms;            /* local GPU sampling period; default 250 */
    int ping_interval_ms;        /* default 1000 */
    int ping_timeout_ms;         /* unanswered ping → kill and restart; default 10000 */
    int poll_wait_s;             /* assignment long-poll; default 5 */
    int progress_ms;             /* minimum gap between progress posts; default 250 */
    bool warmup;                 /* synthetic job per pinned model before ready; default true */
    int restart_min_ms;          /* backoff after a runtime death; default 200 */
    int restart_max_ms;          /* default 10000 */
    int hello_timeout_ms;        /* runtime must say hello within; default 30000 */
    int load_timeout_ms;         /* one model load; default 600000 */
    int max_line_bytes;          /* runtime output line cap; default 65536 */
    int64_t max_output_bytes;    /* result size cap; default 256 MiB */
    int64_t vram_reserve_mb;     /* kept free for activations; default 0 */
    bool qc;                     /* output quality check; default true */
    double qc_min_variance;      /* PNG pixel variance below which output fails qc; default 4.0 */
    int outbox_max_jobs;         /* outcomes waiting before no new work is taken; default 32 */
    int64_t outbox_max_bytes;    /* result bytes waiting before the same; default 1 GiB */
    int outbox_retry_min_ms;     /* first retry of an undelivered outcome; default 200 */
    int outbox_retry_max_ms;     /* retry backoff cap; default 5000 */
    bool outbox_batch;           /* small results delivered in batches; default true */
    bool early_assign;           /* polls with early=1 (assignments before durable); default true */
    bool group_poll;             /* one early poll asks for several workers (with=); default true */
    bool assign_ahead;           /* each worker holds one job beyond its slots; default true */
    bool sched_batch;            /* the agent's threads under SCHED_BATCH; default false */
    int64_t outbox_memory_bytes; /* results up to this size wait in memory, not a file; 65536 */
    int flood_bad_lines;         /* more bad runtime lines than this within… ; default 100 */
    int flood_window_ms;         /* …this window is a flood: kill and restart; default 1000 */
    struct gpu_sim_shape sim_shape; /* [sim] defaults for every simulated GPU */
    struct agent_model models[AGENT_MAX_MODELS];
    int nmodels;
    struct agent_gpu_cfg gpus[GPU_MAX];
};

/* What one worker (GPU) offers, derived from the config and its VRAM. */
struct agent_worker_view {
    int model_idx[AGENT_MAX_MODELS]; /* into config->models; models that fit */
    int nmodels;
    bool pinned[AGENT_MAX_MODELS];   /* parallel to model_idx */
    char caps[AGENT_MAX_CAPS][AGENT_NAME_MAX];
    int ncaps;
    int concurrency;
    int ahead; /* jobs held beyond its slots, started when one frees (0 or 1) */
};

/* agent_config_defaults fills cfg with every default (and the built-in model
 * table used when the file names no model); argv0 locates gpuq-sim-runtime. */
void agent_config_defaults(struct agent_config *cfg, const char *argv0);
/* agent_config_load reads path (INI) over the defaults. 0 or GPUQ_EINVAL/ENOENT
 * with "FILE:LINE: reason" in err. The first [model.NAME] section replaces the
 * built-in model table. */
int agent_config_load(struct agent_config *cfg, const char *path, char *err, size_t errlen);
int agent_config_parse_string(struct agent_config *cfg, const char *text, char *err,
                              size_t errlen);
/* agent_config_model finds a model by name, or NULL. */
const struct agent_model *agent_config_model(const struct agent_config *cfg, const char *name);
/* agent_config_view: what GPU index with vram_total_mb offers. */
void agent_config_view(const struct agent_config *cfg, int index, int64_t vram_total_mb,
                       struct agent_worker_view *out);
/* agent_config_sim_shape: the shape of simulated GPU index. */
void agent_config_sim_shape(const struct agent_config *cfg, int index, struct gpu_sim_shape *out);

#endif
