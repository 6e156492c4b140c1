/* nvml.c: real GPUs through NVML, loaded at run time with dlopen so that the
 * same binary runs where there is no NVIDIA driver (R23). We declare only the
 * few NVML types and calls we use; versioned symbols are tried first
 * (nvmlInit_v2, …) and optional calls may be missing from the library. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/err.h"
#include "gpu/gpu.h"

/* Our minimal NVML declarations (ABI as documented by NVIDIA). */
typedef int nvml_ret;
typedef struct nvml_device *nvml_dev;
struct nvml_memory {
    unsigned long long total, free, used; /* bytes */
};
struct nvml_utilization {
    unsigned int gpu, memory; /* percent */
};
#define NVML_OK 0
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_TEMPERATURE_GPU 0
#define NVML_CLOCK_SM 1
#define NVML_NAME_LEN 96

/* Invariant: init, shutdown, count, handle, memory are non-NULL once opened;
 * the others may be NULL (optional). devs has n entries. */
struct nvml_ctx {
    void *dl;
    nvml_ret (*init)(void);
    nvml_ret (*shutdown)(void);
    nvml_ret (*count)(unsigned int *);
    nvml_ret (*handle)(unsigned int, nvml_dev *);
    nvml_ret (*name)(nvml_dev, char *, unsigned int);
    nvml_ret (*uuid)(nvml_dev, char *, unsigned int);
    nvml_ret (*memory)(nvml_dev, struct nvml_memory *);
    nvml_ret (*temperature)(nvml_dev, int, unsigned int *);
    nvml_ret (*utilization)(nvml_dev, struct nvml_utilization *);
    nvml_ret (*power)(nvml_dev, unsigned int *);
    nvml_ret (*throttle)(nvml_dev, unsigned long long *);
    nvml_ret (*clock)(nvml_dev, int, unsigned int *);
    int n;
    nvml_dev devs[GPU_MAX];
};

/* Looks up the first of the given symbol names the library has. */
static void *sym_first(void *dl, const char *a, const char *b)
{
    void *p = dlsym(dl, a);
    if (!p && b)
        p = dlsym(dl, b);
    return p;
}

static int nvml_count(void *ctx)
{
    return ((struct nvml_ctx *)ctx)->n;
}

static void copy_name(char *dst, size_t size, const char *src)
{
    size_t k = 0;
    for (size_t i = 0; src[i] && k + 1 < size; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[k++] = (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\') ? (char)ch : '?';
    }
    dst[k] = '\0';
}

static int nvml_info(void *ctx, int index, struct gpu_info *out)
{
    struct nvml_ctx *c = ctx;
    nvml_dev d = c->devs[index];
    char buf[NVML_NAME_LEN + 1];
    memset(out, 0, sizeof *out);
    out->index = index;
    memset(buf, 0, sizeof buf);
    if (c->name && c->name(d, buf, NVML_NAME_LEN) == NVML_OK)
        copy_name(out->name, sizeof out->name, buf);
    else
        snprintf(out->name, sizeof out->name, "NVIDIA GPU %d", index);
    memset(buf, 0, sizeof buf);
    if (c->uuid && c->uuid(d, buf, NVML_NAME_LEN) == NVML_OK)
        copy_name(out->uuid, sizeof out->uuid, buf);
    else
        snprintf(out->uuid, sizeof out->uuid, "GPU-unknown-%d", index);
    struct nvml_memory mem;
    if (c->memory(d, &mem) != NVML_OK || mem.total == 0)
        return GPUQ_EIO;
    out->vram_total_mb = (int64_t)(mem.total / (1024 * 1024));
    return 0;
}

/* Notes a failed optional read: a lost GPU has failed, anything else degrades. */
static void note(struct gpu_telemetry *out, nvml_ret r)
{
    if (r == NVML_ERROR_GPU_IS_LOST)
        out->health = GPU_HEALTH_FAILED;
    else if (out->health == GPU_HEALTH_OK)
        out->health = GPU_HEALTH_DEGRADED;
}

static int nvml_read(void *ctx, int index, const struct gpu_load *load, int64_t now_ns,
                     struct gpu_telemetry *out)
{
    (void)load;
    (void)now_ns;
    struct nvml_ctx *c = ctx;
    nvml_dev d = c->devs[index];
    memset(out, 0, sizeof *out);
    out->temp_c = out->power_w = -1;
    out->util_pct = out->sm_clock_mhz = -1;
    out->health = GPU_HEALTH_OK;

    struct nvml_memory mem;
    nvml_ret r = c->memory(d, &mem);
    if (r == NVML_OK && mem.total > 0 && mem.used <= mem.total) {
        out->vram_total_mb = (int64_t)(mem.total / (1024 * 1024));
        out->vram_used_mb = (int64_t)(mem.used / (1024 * 1024));
        out->vram_free_mb = out->vram_total_mb - out->vram_used_mb;
    } else {
        note(out, r == NVML_OK ? 1 : r);
    }
    unsigned int v = 0;
    if (c->temperature) {
        r = c->temperature(d, NVML_TEMPERATURE_GPU, &v);
        if (r == NVML_OK && v < 200)
            out->temp_c = v;
        else
            note(out, r);
    }
    if (c->utilization) {
        struct nvml_utilization u;
        r = c->utilization(d, &u);
        if (r == NVML_OK && u.gpu <= 100)
            out->util_pct = (int)u.gpu;
        else
            note(out, r);
    }
    if (c->power) {
        r = c->power(d, &v); /* milliwatts */
        if (r == NVML_OK && v < 10000000u)
            out->power_w = v / 1000.0;
        /* Many boards do not report power: not a health problem. */
        else if (r == NVML_ERROR_GPU_IS_LOST)
            note(out, r);
    }
    if (c->throttle) {
        unsigned long long bits = 0;
        r = c->throttle(d, &bits);
        if (r == NVML_OK)
            out->throttle = bits & 0x1ffull;
        else if (r == NVML_ERROR_GPU_IS_LOST)
            note(out, r);
    }
    if (c->clock) {
        r = c->clock(d, NVML_CLOCK_SM, &v);
        if (r == NVML_OK && v < 100000)
            out->sm_clock_mhz = (int)v;
    }
    return 0;
}

static void nvml_close(void *ctx)
{
    struct nvml_ctx *c = ctx;
    if (c->shutdown)
        c->shutdown();
    if (c->dl)
        dlclose(c->dl);
    free(c);
}

static const struct gpu_ops nvml_ops = {
    .kind = "nvml", .count = nvml_count, .info = nvml_info, .read = nvml_read, .close = nvml_close,
};

int gpu_nvml_open(const char *lib, struct gpu_source *out, char *err, size_t errlen)
{
    int rc = GPUQ_ENOENT;
    struct nvml_ctx *c = xcalloc(1, sizeof *c);
    bool inited = false;
    const char *path = lib && lib[0] ? lib : "libnvidia-ml.so.1";
    c->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!c->dl) {
        const char *why = dlerror();
        snprintf(err, errlen, "dlopen %s: %s", path, why ? why : "failed");
        goto fail;
    }
    c->init = (nvml_ret(*)(void))sym_first(c->dl, "nvmlInit_v2", "nvmlInit");
    c->shutdown = (nvml_ret(*)(void))sym_first(c->dl, "nvmlShutdown", NULL);
    c->count = (nvml_ret(*)(unsigned int *))sym_first(c->dl, "nvmlDeviceGetCount_v2",
                                                      "nvmlDeviceGetCount");
    c->handle = (nvml_ret(*)(unsigned int, nvml_dev *))sym_first(
        c->dl, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
    c->memory = (nvml_ret(*)(nvml_dev, struct nvml_memory *))sym_first(
        c->dl, "nvmlDeviceGetMemoryInfo", NULL);
    c->name = (nvml_ret(*)(nvml_dev, char *, unsigned int))sym_first(c->dl, "nvmlDeviceGetName",
                                                                     NULL);
    c->uuid = (nvml_ret(*)(nvml_dev, char *, unsigned int))sym_first(c->dl, "nvmlDeviceGetUUID",
                                                                     NULL);
    c->temperature = (nvml_ret(*)(nvml_dev, int, unsigned int *))sym_first(
        c->dl, "nvmlDeviceGetTemperature", NULL);
    c->utilization = (nvml_ret(*)(nvml_dev, struct nvml_utilization *))sym_first(
        c->dl, "nvmlDeviceGetUtilizationRates", NULL);
    c->power = (nvml_ret(*)(nvml_dev, unsigned int *))sym_first(c->dl, "nvmlDeviceGetPowerUsage",
                                                              NULL);
    c->throttle = (nvml_ret(*)(nvml_dev, unsigned long long *))sym_first(
        c->dl, "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons");
    c->clock = (nvml_ret(*)(nvml_dev, int, unsigned int *))sym_first(c->dl,
                                                                     "nvmlDeviceGetClockInfo",
                                                                     NULL);
    if (!c->init || !c->shutdown || !c->count || !c->handle || !c->memory) {
        snprintf(err, errlen, "%s lacks a required NVML symbol", path);
        goto fail;
    }
    nvml_ret r = c->init();
    if (r != NVML_OK) {
        snprintf(err, errlen, "nvmlInit failed: %d", r);
        rc = GPUQ_EIO;
        goto fail;
    }
    inited = true;
    unsigned int n = 0;
    r = c->count(&n);
    if (r != NVML_OK) {
        snprintf(err, errlen, "nvmlDeviceGetCount failed: %d", r);
        rc = GPUQ_EIO;
        goto fail;
    }
    if (n == 0) {
        snprintf(err, errlen, "NVML found no GPU");
        goto fail;
    }
    if (n > GPU_MAX)
        n = GPU_MAX;
    for (unsigned int i = 0; i < n; i++) {
        if (c->handle(i, &c->devs[i]) != NVML_OK) {
            snprintf(err, errlen, "nvmlDeviceGetHandleByIndex(%u) failed", i);
            rc = GPUQ_EIO;
            goto fail;
        }
    }
    c->n = (int)n;
    out->ops = &nvml_ops;
    out->ctx = c;
    return 0;
fail:
    if (inited)
        c->shutdown();
    if (c->dl)
        dlclose(c->dl);
    free(c);
    return rc;
}
