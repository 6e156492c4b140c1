/* gpu_sim.c: simulated GPUs for hosts without NVML (R23). Each GPU follows a
 * first-order thermal model: its temperature moves towards
 * ambient + heat × busy with time constant tau, and at/above throttle_c the
 * GPU reports a software thermal slowdown with its SM clock held to 80 %. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/err.h"
#include "gpu/gpu.h"

/* Invariant: n == number of entries in shapes/temp/last_ns; temp_c within
 * [ambient, ambient + heat] once sampled. */
struct sim_ctx {
    int n;
    struct gpu_sim_shape *shapes;
    double *temp_c;
    int64_t *last_ns; /* 0: never sampled */
};

void gpu_sim_shape_default(struct gpu_sim_shape *s)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "Simulated GeForce RTX 5090");
    s->vram_mb = 32607;
    s->ambient_c = 35;
    s->heat_c = 40; /* 75 °C at full load: the seed's cooled cluster */
    s->tau_s = 20;
    s->throttle_c = 83;
    s->idle_w = 30;
    s->max_w = 575;
    s->clock_mhz = 2407;
}

static int sim_count(void *ctx)
{
    return ((struct sim_ctx *)ctx)->n;
}

static int sim_info(void *ctx, int index, struct gpu_info *out)
{
    struct sim_ctx *c = ctx;
    memset(out, 0, sizeof *out);
    out->index = index;
    snprintf(out->name, sizeof out->name, "%s", c->shapes[index].name);
    snprintf(out->uuid, sizeof out->uuid, "GPU-sim-%08x-0000-4000-8000-%012d",
             (unsigned)(0x5eed0000u + (unsigned)index), index);
    out->vram_total_mb = c->shapes[index].vram_mb;
    return 0;
}

static int sim_read(void *ctx, int index, const struct gpu_load *load, int64_t now_ns,
                    struct gpu_telemetry *out)
{
    struct sim_ctx *c = ctx;
    const struct gpu_sim_shape *s = &c->shapes[index];
    double busy = load ? load->busy : 0;
    if (busy < 0)
        busy = 0;
    if (busy > 1)
        busy = 1;
    double target = s->ambient_c + s->heat_c * busy;
    if (c->last_ns[index] == 0) {
        c->temp_c[index] = s->ambient_c;
    } else if (now_ns > c->last_ns[index]) {
        double dt = (double)(now_ns - c->last_ns[index]) / 1e9;
        double tau = s->tau_s > 0 ? s->tau_s : 1e-9;
        c->temp_c[index] += (target - c->temp_c[index]) * (1.0 - exp(-dt / tau));
    }
    c->last_ns[index] = now_ns;

    memset(out, 0, sizeof *out);
    out->temp_c = c->temp_c[index];
    out->vram_total_mb = s->vram_mb;
    int64_t used = load ? load->vram_used_mb : 0;
    if (used < 0)
        used = 0;
    if (used > s->vram_mb)
        used = s->vram_mb;
    out->vram_used_mb = used;
    out->vram_free_mb = s->vram_mb - used;
    out->util_pct = (int)lround(busy * 100);
    bool hot = out->temp_c >= s->throttle_c;
    out->throttle = busy == 0 ? GPU_THR_IDLE : 0;
    if (hot)
        out->throttle |= GPU_THR_SW_THERMAL;
    out->sm_clock_mhz = hot ? (int)lround(s->clock_mhz * 0.8) : s->clock_mhz;
    out->power_w = s->idle_w + (s->max_w - s->idle_w) * busy * (hot ? 0.85 : 1.0);
    out->health = GPU_HEALTH_OK;
    return 0;
}

static void sim_close(void *ctx)
{
    struct sim_ctx *c = ctx;
    free(c->shapes);
    free(c->temp_c);
    free(c->last_ns);
    free(c);
}

static const struct gpu_ops sim_ops = {
    .kind = "sim", .count = sim_count, .info = sim_info, .read = sim_read, .close = sim_close,
};

int gpu_sim_open(const struct gpu_sim_shape *shapes, int n, struct gpu_source *out)
{
    if (n < 1 || n > GPU_MAX || !shapes)
        return GPUQ_EINVAL;
    struct sim_ctx *c = xcalloc(1, sizeof *c);
    c->n = n;
    c->shapes = xcalloc((size_t)n, sizeof *c->shapes);
    memcpy(c->shapes, shapes, (size_t)n * sizeof *shapes);
    c->temp_c = xcalloc((size_t)n, sizeof *c->temp_c);
    c->last_ns = xcalloc((size_t)n, sizeof *c->last_ns);
    out->ops = &sim_ops;
    out->ctx = c;
    return 0;
}
