/* fake_cuda.c: a fake libcuda.so.1 for tests (built as
 * build/tests/fakes/libcuda.so.1). It exports the driver-API calls
 * gpuq-cuda-runtime looks up, so that the runtime's whole path — load, the
 * banded run, encoding, inline or file results, cancel, ping during a run —
 * can be exercised on a machine without a GPU, through the runtime's real
 * dlopen ($GPUQ_CUDA_LIBRARY = this file). No kernel runs: cuLaunchKernel
 * fills the band it is given with a picture computed on the CPU from the
 * kernel's arguments — smooth ramps whose phase follows the Julia constant
 * and palette (so seeds differ), plus a little per-pixel noise so that a large picture
 * does not deflate to almost nothing.
 *
 * Device memory is host memory up to 64 MiB an allocation; larger ones (the
 * "weights" a load asks for) are only counted, never touched, so a test may
 * "load" 8000 MB. Environment:
 *   FAKE_CUDA_MEM_MB (16384)  device memory: allocations past it fail with
 *                             CUDA_ERROR_OUT_OF_MEMORY;
 *   FAKE_CUDA_BAND_MS (0)     how long each kernel launch "runs" (a run has
 *                             8 bands), to keep a run in flight;
 *   FAKE_CUDA_FAIL_INIT       when set, cuInit answers CUDA_ERROR_NO_DEVICE. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
    OK = 0,
    ERR_INVALID_VALUE = 1,
    ERR_OUT_OF_MEMORY = 2,
    ERR_NOT_INITIALIZED = 3,
    ERR_NO_DEVICE = 100,
    ERR_INVALID_IMAGE = 200,
    ERR_NOT_FOUND = 500,
};

#define BACKED_MAX ((size_t)64 << 20)
#define MAX_ALLOCS 256
/* Handles of unbacked allocations. A backed allocation's handle is its host
 * address, below 2^57 on 64-bit Linux (2^47 without 5-level paging); these
 * start at 2^63, so the two ranges never overlap. (From 0x7f0000000000, a
 * malloc'd band buffer could land inside a "loaded" 8000 MB, and its launch
 * was answered 700.) */
#define UNBACKED_BASE 0x8000000000000000ull

static struct alloc {
    CUdeviceptr ptr; /* 0: free slot */
    size_t bytes;
    void *host; /* NULL when unbacked */
} allocs[MAX_ALLOCS];
static size_t used_bytes;
static uint64_t next_unbacked = UNBACKED_BASE;
static int inited;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int dummy_ctx, dummy_module, dummy_function;

static long long env_num(const char *name, long long dflt)
{
    const char *v = getenv(name);
    return v && v[0] ? strtoll(v, NULL, 0) : dflt;
}

static size_t total_bytes(void)
{
    long long mb = env_num("FAKE_CUDA_MEM_MB", 16384);
    return (size_t)(mb < 0 ? 0 : mb) << 20;
}

/* The allocation holding [p, p + n), or NULL. */
static struct alloc *find(CUdeviceptr p, size_t n)
{
    for (int i = 0; i < MAX_ALLOCS; i++) {
        struct alloc *a = &allocs[i];
        if (a->ptr && p >= a->ptr && n <= a->bytes && p - a->ptr <= a->bytes - n)
            return a;
    }
    return NULL;
}

EXPORT CUresult cuInit(unsigned int flags)
{
    (void)flags;
    if (getenv("FAKE_CUDA_FAIL_INIT"))
        return ERR_NO_DEVICE;
    inited = 1;
    return OK;
}

EXPORT CUresult cuDeviceGet(int *dev, int ordinal)
{
    if (!inited)
        return ERR_NOT_INITIALIZED;
    if (ordinal != 0)
        return 101; /* CUDA_ERROR_INVALID_DEVICE */
    *dev = 0;
    return OK;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, int dev)
{
    (void)dev;
    if (len > 0)
        snprintf(name, (size_t)len, "Fake CUDA GPU");
    return OK;
}

EXPORT CUresult cuCtxCreate_v2(void **ctx, unsigned int flags, int dev)
{
    (void)flags;
    (void)dev;
    *ctx = &dummy_ctx;
    return OK;
}

EXPORT CUresult cuModuleLoadData(void **mod, const void *image)
{
    if (!image || !strstr(image, ".entry gpuq_julia("))
        return ERR_INVALID_IMAGE;
    *mod = &dummy_module;
    return OK;
}

EXPORT CUresult cuModuleLoadDataEx(void **mod, const void *image, unsigned int nopts, int *opts,
                                   void **values)
{
    (void)nopts;
    (void)opts;
    (void)values;
    return cuModuleLoadData(mod, image);
}

EXPORT CUresult cuModuleGetFunction(void **fn, void *mod, const char *name)
{
    if (mod != &dummy_module || strcmp(name, "gpuq_julia") != 0)
        return ERR_NOT_FOUND;
    *fn = &dummy_function;
    return OK;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes)
{
    if (!bytes)
        return ERR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    CUresult rc = ERR_OUT_OF_MEMORY;
    struct alloc *slot = NULL;
    for (int i = 0; i < MAX_ALLOCS && !slot; i++)
        if (!allocs[i].ptr)
            slot = &allocs[i];
    if (slot && used_bytes <= total_bytes() && bytes <= total_bytes() - used_bytes) {
        void *host = bytes <= BACKED_MAX ? malloc(bytes) : NULL;
        if (host || bytes > BACKED_MAX) {
            slot->host = host;
            slot->bytes = bytes;
            if (host) {
                slot->ptr = (CUdeviceptr)(uintptr_t)host;
            } else {
                slot->ptr = next_unbacked;
                next_unbacked += (bytes + 0xfffff) & ~0xfffffull;
            }
            used_bytes += bytes;
            *ptr = slot->ptr;
            rc = OK;
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr)
{
    pthread_mutex_lock(&mu);
    struct alloc *a = find(ptr, 1);
    CUresult rc = ERR_INVALID_VALUE;
    if (a && a->ptr == ptr) {
        free(a->host);
        used_bytes -= a->bytes;
        memset(a, 0, sizeof *a);
        rc = OK;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    pthread_mutex_lock(&mu);
    *total = total_bytes();
    *free_bytes = used_bytes < *total ? *total - used_bytes : 0;
    pthread_mutex_unlock(&mu);
    return OK;
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n)
{
    pthread_mutex_lock(&mu);
    struct alloc *a = find(dst, n);
    if (a && a->host)
        memset((unsigned char *)a->host + (dst - a->ptr), value, n);
    pthread_mutex_unlock(&mu);
    return a ? OK : ERR_INVALID_VALUE;
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
    pthread_mutex_lock(&mu);
    struct alloc *a = find(src, n);
    int ok = a && a->host;
    if (ok)
        memcpy(dst, (unsigned char *)a->host + (src - a->ptr), n);
    pthread_mutex_unlock(&mu);
    return ok ? OK : ERR_INVALID_VALUE;
}

/* The arguments gpuq_julia takes, in its order (cuda_runtime.c). */
EXPORT CUresult cuLaunchKernel(void *fn, unsigned int gx, unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by, unsigned int bz,
                               unsigned int shared, void *stream, void **params, void **extra)
{
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)stream;
    (void)extra;
    if (fn != &dummy_function || !params)
        return ERR_INVALID_VALUE;
    CUdeviceptr out = *(CUdeviceptr *)params[0];
    unsigned int w = *(unsigned int *)params[1], h = *(unsigned int *)params[2];
    unsigned int row0 = *(unsigned int *)params[3], rows = *(unsigned int *)params[4];
    uint32_t bits[3]; /* the Julia constant and the first palette phase */
    memcpy(&bits[0], params[6], 4);
    memcpy(&bits[1], params[7], 4);
    memcpy(&bits[2], params[9], 4);
    if (row0 >= h || rows > h - row0)
        return ERR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct alloc *a = find(out, (size_t)w * h * 3);
    if (!a || !a->host) {
        pthread_mutex_unlock(&mu);
        return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
    }
    unsigned char *px = (unsigned char *)a->host + (out - a->ptr);
    uint32_t phase = 2166136261u; /* FNV-1a of those bits: each seed its own picture */
    for (int i = 0; i < 3; i++)
        phase = (phase ^ bits[i]) * 16777619u;
    phase ^= phase >> 13;
    for (unsigned int y = row0; y < row0 + rows; y++)
        for (unsigned int x = 0; x < w; x++) {
            unsigned char *p = px + ((size_t)y * w + x) * 3;
            uint32_t n = (x * 2654435761u) ^ (y * 2246822519u) ^ phase;
            n ^= n >> 15;
            p[0] = (unsigned char)(x * 256 / w + phase + (n & 7));
            p[1] = (unsigned char)(y * 256 / h + (phase >> 8) + (n >> 3 & 7));
            p[2] = (unsigned char)((x + y) / 3 + (phase >> 16));
        }
    pthread_mutex_unlock(&mu);
    long long ms = env_num("FAKE_CUDA_BAND_MS", 0);
    if (ms > 0) {
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
    }
    return OK;
}

EXPORT CUresult cuCtxSynchronize(void)
{
    return OK;
}

EXPORT CUresult cuGetErrorName(CUresult err, const char **name)
{
    (void)err;
    (void)name;
    return ERR_INVALID_VALUE; /* the runtime falls back to its own table */
}

EXPORT CUresult cuGetErrorString(CUresult err, const char **text)
{
    (void)err;
    (void)text;
    return ERR_INVALID_VALUE;
}
