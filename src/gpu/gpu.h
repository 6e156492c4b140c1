/* gpu.h: vendor-neutral GPU discovery and telemetry for the agent (R23).
 * A gpu_source is one backend behind a small ops table: NVML loaded with
 * dlopen (nvml.c) or simulated GPUs with a thermal model (gpu_sim.c).
 * Sources are read from one thread at a time (the agent's telemetry thread);
 * the values they return are plain copies owned by the caller. */
#ifndef GPUQ_GPU_H
#define GPUQ_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GPU_NAME_MAX 96
#define GPU_MAX 64 /* GPUs one agent drives */

/* Clock-throttle reasons, bit for bit the NVML ones (so nvml.c copies them). */
enum gpu_throttle {
    GPU_THR_IDLE = 0x1,
    GPU_THR_APP_CLOCKS = 0x2,
    GPU_THR_SW_POWER = 0x4,
    GPU_THR_HW_SLOWDOWN = 0x8,
    GPU_THR_SYNC_BOOST = 0x10,
    GPU_THR_SW_THERMAL = 0x20,
    GPU_THR_HW_THERMAL = 0x40,
    GPU_THR_HW_POWER_BRAKE = 0x80,
    GPU_THR_DISPLAY_CLOCKS = 0x100,
};

enum gpu_health { GPU_HEALTH_OK = 0, GPU_HEALTH_DEGRADED = 1, GPU_HEALTH_FAILED = 2 };

/* What a GPU is. vram_total_mb > 0. */
struct gpu_info {
    int index;
    char name[GPU_NAME_MAX];
    char uuid[GPU_NAME_MAX];
    int64_t vram_total_mb;
};

/* One sample. Fields a backend cannot read are -1 (temp_c, power_w, util_pct,
 * sm_clock_mhz) and the sample's health says degraded. */
struct gpu_telemetry {
    double temp_c;
    int64_t vram_total_mb, vram_used_mb, vram_free_mb;
    int util_pct;
    double power_w;
    uint64_t throttle; /* enum gpu_throttle bits */
    int sm_clock_mhz;
    enum gpu_health health;
};

/* What the agent knows of a GPU's load, fed to simulated GPUs (real ones
 * measure it themselves). */
struct gpu_load {
    double busy;          /* 0..1: share of the GPU's slots running a job */
    int64_t vram_used_mb; /* resident models as the agent accounts them */
};

struct gpu_ops {
    const char *kind; /* "nvml" | "sim" */
    int (*count)(void *ctx);
    int (*info)(void *ctx, int index, struct gpu_info *out);
    int (*read)(void *ctx, int index, const struct gpu_load *load, int64_t now_ns,
                struct gpu_telemetry *out);
    void (*close)(void *ctx);
};

struct gpu_source {
    const struct gpu_ops *ops;
    void *ctx;
};

/* Shape of one simulated GPU (the sim's thermal model, R23). */
struct gpu_sim_shape {
    char name[GPU_NAME_MAX];
    int64_t vram_mb;     /* default 32607 (RTX 5090) */
    double ambient_c;    /* idle temperature; default 35 */
    double heat_c;       /* rise at full load; default 40 (75 °C: no throttling) */
    double tau_s;        /* thermal time constant; default 20 */
    double throttle_c;   /* throttles at/above; default 83 */
    double idle_w, max_w; /* power; default 30 / 575 */
    int clock_mhz;       /* nominal SM clock; default 2407 */
};

/* gpu_sim_shape_default fills a shape with the documented defaults. */
void gpu_sim_shape_default(struct gpu_sim_shape *s);

/* gpu_nvml_open dlopens lib (NULL: "libnvidia-ml.so.1"), initialises NVML and
 * finds at least one GPU. Returns 0, or GPUQ_ENOENT when the library or GPUs
 * are absent (err says why), GPUQ_EIO when NVML fails. */
int gpu_nvml_open(const char *lib, struct gpu_source *out, char *err, size_t errlen);

/* gpu_sim_open makes n simulated GPUs of the given shapes (copied). */
int gpu_sim_open(const struct gpu_sim_shape *shapes, int n, struct gpu_source *out);

/* Helpers over a source. */
int gpu_count(const struct gpu_source *s);
int gpu_info(const struct gpu_source *s, int index, struct gpu_info *out);
int gpu_read(const struct gpu_source *s, int index, const struct gpu_load *load, int64_t now_ns,
             struct gpu_telemetry *out);
void gpu_close(struct gpu_source *s);

/* gpu_throttle_names writes the reasons' names ("sw_thermal", …) into names
 * (at most max) and returns how many. Names are static strings. */
int gpu_throttle_names(uint64_t bits, const char **names, int max);
/* gpu_health_name: "ok" | "degraded" | "failed". */
const char *gpu_health_name(enum gpu_health h);
/* gpu_throttling: true when the reasons hold clocks down (thermal or power). */
bool gpu_throttling(uint64_t bits);

#endif
