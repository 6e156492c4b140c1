/* gpu.c: the backend-neutral helpers over a gpu_source. */
#include "gpu/gpu.h"

#include <string.h>

#include "common/err.h"

int gpu_count(const struct gpu_source *s)
{
    return s->ops->count(s->ctx);
}

int gpu_info(const struct gpu_source *s, int index, struct gpu_info *out)
{
    if (index < 0 || index >= gpu_count(s))
        return GPUQ_ENOENT;
    return s->ops->info(s->ctx, index, out);
}

int gpu_read(const struct gpu_source *s, int index, const struct gpu_load *load, int64_t now_ns,
             struct gpu_telemetry *out)
{
    if (index < 0 || index >= gpu_count(s))
        return GPUQ_ENOENT;
    return s->ops->read(s->ctx, index, load, now_ns, out);
}

void gpu_close(struct gpu_source *s)
{
    if (s->ops && s->ops->close)
        s->ops->close(s->ctx);
    s->ops = NULL;
    s->ctx = NULL;
}

static const struct {
    uint64_t bit;
    const char *name;
} throttle_names[] = {
    {GPU_THR_IDLE, "gpu_idle"},
    {GPU_THR_APP_CLOCKS, "app_clocks"},
    {GPU_THR_SW_POWER, "sw_power_cap"},
    {GPU_THR_HW_SLOWDOWN, "hw_slowdown"},
    {GPU_THR_SYNC_BOOST, "sync_boost"},
    {GPU_THR_SW_THERMAL, "sw_thermal"},
    {GPU_THR_HW_THERMAL, "hw_thermal"},
    {GPU_THR_HW_POWER_BRAKE, "hw_power_brake"},
    {GPU_THR_DISPLAY_CLOCKS, "display_clocks"},
};

int gpu_throttle_names(uint64_t bits, const char **names, int max)
{
    int n = 0;
    for (size_t i = 0; i < sizeof throttle_names / sizeof throttle_names[0] && n < max; i++)
        if (bits & throttle_names[i].bit)
            names[n++] = throttle_names[i].name;
    return n;
}

const char *gpu_health_name(enum gpu_health h)
{
    switch (h) {
    case GPU_HEALTH_OK:
        return "ok";
    case GPU_HEALTH_DEGRADED:
        return "degraded";
    case GPU_HEALTH_FAILED:
        return "failed";
    }
    return "failed";
}

bool gpu_throttling(uint64_t bits)
{
    return (bits & (GPU_THR_SW_POWER | GPU_THR_HW_SLOWDOWN | GPU_THR_SW_THERMAL |
                    GPU_THR_HW_THERMAL | GPU_THR_HW_POWER_BRAKE)) != 0;
}
