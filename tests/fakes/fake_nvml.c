/* fake_nvml.c: a fake libnvidia-ml.so.1 for tests. It exports the NVML calls
 * gpuq-agent looks up (versioned names only where the real library has them)
 * and answers with values from the environment, so a test can prove that what
 * NVML says reaches the head's worker list through the real dlopen path:
 *   FAKE_NVML_GPUS (default 2), FAKE_NVML_NAME ("Fake NVML GPU"),
 *   FAKE_NVML_MEM_MB (24576), FAKE_NVML_USED_MB (1234), FAKE_NVML_TEMP (61),
 *   FAKE_NVML_UTIL (42), FAKE_NVML_POWER_MW (123456), FAKE_NVML_CLOCK (1965),
 *   FAKE_NVML_THROTTLE (0x20: sw_thermal), FAKE_NVML_FAIL_INIT (unset).
 * GPU i reports temperature TEMP + i and UUID GPU-fake-000i. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvml_ret;
typedef struct fake_dev *nvml_dev;
struct nvml_memory {
    unsigned long long total, free, used;
};
struct nvml_utilization {
    unsigned int gpu, memory;
};

struct fake_dev {
    unsigned int index;
};
static struct fake_dev devs[16];
static int inited;

static long long env_num(const char *name, long long dflt)
{
    const char *v = getenv(name);
    return v && v[0] ? strtoll(v, NULL, 0) : dflt;
}

static unsigned int ngpus(void)
{
    long long n = env_num("FAKE_NVML_GPUS", 2);
    return n < 0 ? 0 : n > 16 ? 16 : (unsigned int)n;
}

EXPORT nvml_ret nvmlInit_v2(void)
{
    if (getenv("FAKE_NVML_FAIL_INIT"))
        return 9; /* NVML_ERROR_DRIVER_NOT_LOADED */
    inited = 1;
    for (unsigned int i = 0; i < 16; i++)
        devs[i].index = i;
    return 0;
}

EXPORT nvml_ret nvmlShutdown(void)
{
    inited = 0;
    return 0;
}

EXPORT nvml_ret nvmlDeviceGetCount_v2(unsigned int *n)
{
    if (!inited)
        return 1; /* NVML_ERROR_UNINITIALIZED */
    *n = ngpus();
    return 0;
}

EXPORT nvml_ret nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvml_dev *d)
{
    if (!inited || i >= ngpus())
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *d = &devs[i];
    return 0;
}

EXPORT nvml_ret nvmlDeviceGetName(nvml_dev d, char *name, unsigned int len)
{
    (void)d;
    const char *n = getenv("FAKE_NVML_NAME");
    snprintf(name, len, "%s", n ? n : "Fake NVML GPU");
    return 0;
}

EXPORT nvml_ret nvmlDeviceGetUUID(nvml_dev d, char *uuid, unsigned int len)
{
    snprintf(uuid, len, "GPU-fake-%04u", d->index);
    return 0;
}

EXPORT nvml_ret nvmlDeviceGetMemoryInfo(nvml_dev d, struct nvml_memory *m)
{
    (void)d;
    unsigned long long mb = 1024ull * 1024ull;
    m->total = (unsigned long long)env_num("FAKE_NVML_MEM_MB", 24576) * mb;
    m->used = (unsigned long long)env_num("FAKE_NVML_USED_MB", 1234) * mb;
    m->free = m->total - m->used;
    return 0;
}

EXPORT nvml_ret nvmlDeviceGetTemperature(nvml_dev d, int sensor, unsigned int *t)
{
    if (sensor != 0)
        return 2;
    *t = (unsigned int)env_num("FAKE_NVML_TEMP", 61) + d->index;
    return 0;
}

EXPORT nvml_ret nvmlDeviceGetUtilizationRates(nvml_dev d, struct nvml_utilization *u)
{
    (void)d;
    u->gpu = (unsigned int)env_num("FAKE_NVML_UTIL", 42);
    u->memory = 10;
    return 0;
}

EXPORT nvml_ret nvmlDeviceGetPowerUsage(nvml_dev d, unsigned int *mw)
{
    (void)d;
    *mw = (unsigned int)env_num("FAKE_NVML_POWER_MW", 123456);
    return 0;
}

EXPORT nvml_ret nvmlDeviceGetCurrentClocksThrottleReasons(nvml_dev d, unsigned long long *r)
{
    (void)d;
    *r = (unsigned long long)env_num("FAKE_NVML_THROTTLE", 0x20);
    return 0;
}

EXPORT nvml_ret nvmlDeviceGetClockInfo(nvml_dev d, int type, unsigned int *mhz)
{
    (void)d;
    if (type != 1)
        return 2;
    *mhz = (unsigned int)env_num("FAKE_NVML_CLOCK", 1965);
    return 0;
}
