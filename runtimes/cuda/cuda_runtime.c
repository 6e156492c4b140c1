/* cuda_runtime.c: gpuq-cuda-runtime, a real runtime for one NVIDIA GPU that
 * speaks the runtime protocol v1 (docs/protocol-runtime.md) on stdin/stdout.
 *
 * It needs the NVIDIA driver only, not the CUDA toolkit: libcuda.so.1 is
 * opened with dlopen at start, the few driver-API entry points it uses are
 * declared below by hand, and the one kernel is PTX text in this file that
 * the driver JIT-compiles for whatever GPU it finds.
 *
 * - load: allocates the model's "weights" (the vram_mb hint, default 1024 MB)
 *   with cuMemAlloc and fills them with cuMemsetD8, so the memory is really
 *   resident; oom when the GPU has less free memory than that.
 * - run: renders a Julia set (constant, zoom and palette drawn from the seed
 *   and the prompt; iteration depth from steps) in row bands, reporting
 *   progress and honouring cancel between bands, and answers the PNG inline
 *   when the agent offered that and it fits ($GPUQ_RESULT_INLINE_MAX), else
 *   writes <id>.png into the output directory.
 * - If libcuda cannot be opened ($GPUQ_CUDA_LIBRARY names another library to
 *   open instead) or any CUDA set-up step fails, the runtime still says hello
 *   and answers ping, and every load and run gets an error of class cuda that
 *   says why.
 *
 * Threads: the main thread reads stdin and answers ping/cancel/shutdown at
 * once; one CUDA thread owns the context and works through load, unload and
 * run requests in arrival order. Messages to stdout (a line, or an inline
 * result's line and bytes) are serialised by a mutex. */
#include <dlfcn.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/output.h"

#define RT_PROTOCOL 1
#define RT_NAME "gpuq-cuda-runtime"
#define RT_VERSION "0.1.0"
#define RT_LINE_MAX (1 << 20)
#define RT_ID_MAX 128
#define RT_MAX_MODELS 32
#define RT_MAX_QUEUED 256
#define RT_DEFAULT_VRAM_MB 1024
#define RT_BANDS 8
#define RT_MIB (1024ull * 1024ull)

/* --- the CUDA driver API, as much of it as we use ------------------------ */

typedef int CUresult;
typedef int CUdevice;
typedef struct gpuq_cu_context *CUcontext;
typedef struct gpuq_cu_module *CUmodule;
typedef struct gpuq_cu_function *CUfunction;
typedef struct gpuq_cu_stream *CUstream;
typedef unsigned long long CUdeviceptr;

enum {
    GPUQ_CUDA_SUCCESS = 0,
    GPUQ_CUDA_ERROR_OUT_OF_MEMORY = 2,
};
enum {
    GPUQ_CU_CTX_SCHED_BLOCKING_SYNC = 0x04, /* sleep in cuCtxSynchronize, do not spin */
};
enum { /* CUjit_option values (an int-sized enum in the driver's ABI) */
    GPUQ_CU_JIT_INFO_LOG_BUFFER = 3,
    GPUQ_CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
    GPUQ_CU_JIT_ERROR_LOG_BUFFER = 5,
    GPUQ_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
};

typedef CUresult (*cu_init_fn)(unsigned int flags);
typedef CUresult (*cu_device_get_fn)(CUdevice *dev, int ordinal);
typedef CUresult (*cu_device_get_name_fn)(char *name, int len, CUdevice dev);
typedef CUresult (*cu_ctx_create_fn)(CUcontext *ctx, unsigned int flags, CUdevice dev);
typedef CUresult (*cu_module_load_data_fn)(CUmodule *mod, const void *image);
typedef CUresult (*cu_module_load_data_ex_fn)(CUmodule *mod, const void *image, unsigned int nopts,
                                              int *opts, void **values);
typedef CUresult (*cu_module_get_function_fn)(CUfunction *fn, CUmodule mod, const char *name);
typedef CUresult (*cu_mem_alloc_fn)(CUdeviceptr *ptr, size_t bytes);
typedef CUresult (*cu_mem_free_fn)(CUdeviceptr ptr);
typedef CUresult (*cu_memcpy_dtoh_fn)(void *dst, CUdeviceptr src, size_t bytes);
typedef CUresult (*cu_mem_get_info_fn)(size_t *free_bytes, size_t *total_bytes);
typedef CUresult (*cu_memset_d8_fn)(CUdeviceptr dst, unsigned char value, size_t n);
typedef CUresult (*cu_launch_kernel_fn)(CUfunction fn, unsigned int gx, unsigned int gy,
                                        unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shared_bytes, CUstream stream,
                                        void **params, void **extra);
typedef CUresult (*cu_ctx_synchronize_fn)(void);
typedef CUresult (*cu_get_error_text_fn)(CUresult err, const char **text);

static struct {
    void *lib;
    cu_init_fn init;
    cu_device_get_fn device_get;
    cu_device_get_name_fn device_get_name;
    cu_ctx_create_fn ctx_create;
    cu_module_load_data_fn module_load_data;
    cu_module_load_data_ex_fn module_load_data_ex; /* optional: gives the JIT's error log */
    cu_module_get_function_fn module_get_function;
    cu_mem_alloc_fn mem_alloc;
    cu_mem_free_fn mem_free;
    cu_memcpy_dtoh_fn memcpy_dtoh;
    cu_mem_get_info_fn mem_get_info;
    cu_memset_d8_fn memset_d8;
    cu_launch_kernel_fn launch_kernel;
    cu_ctx_synchronize_fn ctx_synchronize;
    cu_get_error_text_fn get_error_name;   /* optional */
    cu_get_error_text_fn get_error_string; /* optional */
} cu;

/* --- the kernel ---------------------------------------------------------- */

/* gpuq_julia(out, width, height, row0, rows, maxit, cre, cim, scale, ph0, ph1, ph2)
 *
 * One thread per pixel of rows [row0, row0 + rows) of a width x height RGB
 * image at out (3 bytes a pixel, row-major). z starts at the pixel's point
 * ((x - width/2) * scale, (y - height/2) * scale) and iterates z = z^2 + c
 * with c = cre + i*cim, at most maxit times, until |z|^2 > 256.
 *   escaped: t = 0.22 * sqrt(max(0, n + 1 - log2(log2|z|))) (the smooth
 *            iteration count), brightness 1;
 *   inside:  t = 0.3 * |z|^2 + 0.5, brightness 0.35.
 * Channel k is 255 * brightness * (0.5 + 0.5 * cos(2*pi * frac(t + ph_k))).
 * Float constants are written as IEEE-754 bit patterns (0fXXXXXXXX). */
static const char julia_ptx[] =
    ".version 6.0\n"
    ".target sm_52\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry gpuq_julia(\n"
    "    .param .u64 p_out,\n"
    "    .param .u32 p_width,\n"
    "    .param .u32 p_height,\n"
    "    .param .u32 p_row0,\n"
    "    .param .u32 p_rows,\n"
    "    .param .u32 p_maxit,\n"
    "    .param .f32 p_cre,\n"
    "    .param .f32 p_cim,\n"
    "    .param .f32 p_scale,\n"
    "    .param .f32 p_ph0,\n"
    "    .param .f32 p_ph1,\n"
    "    .param .f32 p_ph2\n"
    ")\n"
    "{\n"
    "    .reg .pred %p<4>;\n"
    "    .reg .b32 %r<24>;\n"
    "    .reg .f32 %f<40>;\n"
    "    .reg .b64 %rd<8>;\n"
    "\n"
    "    ld.param.u32 %r1, [p_width];\n"
    "    ld.param.u32 %r2, [p_height];\n"
    "    ld.param.u32 %r3, [p_row0];\n"
    "    ld.param.u32 %r4, [p_rows];\n"
    "    ld.param.u32 %r5, [p_maxit];\n"
    /* x = ctaid.x * ntid.x + tid.x; band row = ctaid.y * ntid.y + tid.y */
    "    mov.u32 %r6, %ctaid.x;\n"
    "    mov.u32 %r7, %ntid.x;\n"
    "    mov.u32 %r8, %tid.x;\n"
    "    mad.lo.u32 %r9, %r6, %r7, %r8;\n"
    "    mov.u32 %r6, %ctaid.y;\n"
    "    mov.u32 %r7, %ntid.y;\n"
    "    mov.u32 %r8, %tid.y;\n"
    "    mad.lo.u32 %r10, %r6, %r7, %r8;\n"
    "    setp.ge.u32 %p1, %r9, %r1;\n"
    "    @%p1 bra $L_done;\n"
    "    setp.ge.u32 %p1, %r10, %r4;\n"
    "    @%p1 bra $L_done;\n"
    "    add.u32 %r11, %r10, %r3;\n" /* y */
    "    setp.ge.u32 %p1, %r11, %r2;\n"
    "    @%p1 bra $L_done;\n"
    "\n"
    "    ld.param.f32 %f1, [p_cre];\n"
    "    ld.param.f32 %f2, [p_cim];\n"
    "    ld.param.f32 %f3, [p_scale];\n"
    "    cvt.rn.f32.u32 %f4, %r9;\n"
    "    cvt.rn.f32.u32 %f5, %r1;\n"
    "    fma.rn.f32 %f6, %f5, 0fBF000000, %f4;\n" /* x - width/2 */
    "    mul.f32 %f8, %f6, %f3;\n"                /* zr */
    "    cvt.rn.f32.u32 %f4, %r11;\n"
    "    cvt.rn.f32.u32 %f5, %r2;\n"
    "    fma.rn.f32 %f7, %f5, 0fBF000000, %f4;\n" /* y - height/2 */
    "    mul.f32 %f9, %f7, %f3;\n"                /* zi */
    "    mov.u32 %r12, 0;\n"                      /* n */
    "\n"
    "$L_loop:\n"
    "    mul.f32 %f10, %f8, %f8;\n" /* zr^2 */
    "    mul.f32 %f11, %f9, %f9;\n" /* zi^2 */
    "    add.f32 %f12, %f10, %f11;\n"
    "    setp.gt.f32 %p2, %f12, 0f43800000;\n" /* |z|^2 > 256 */
    "    @%p2 bra $L_escaped;\n"
    "    setp.ge.u32 %p3, %r12, %r5;\n"
    "    @%p3 bra $L_inside;\n"
    "    mul.f32 %f13, %f8, %f9;\n"
    "    fma.rn.f32 %f9, %f13, 0f40000000, %f2;\n" /* zi = 2 zr zi + cim */
    "    sub.f32 %f14, %f10, %f11;\n"
    "    add.f32 %f8, %f14, %f1;\n" /* zr = zr^2 - zi^2 + cre */
    "    add.u32 %r12, %r12, 1;\n"
    "    bra $L_loop;\n"
    "\n"
    "$L_escaped:\n"
    "    lg2.approx.f32 %f15, %f12;\n"
    "    mul.f32 %f15, %f15, 0f3F000000;\n" /* log2 |z| (> 4) */
    "    lg2.approx.f32 %f16, %f15;\n"
    "    cvt.rn.f32.u32 %f17, %r12;\n"
    "    add.f32 %f17, %f17, 0f3F800000;\n"
    "    sub.f32 %f17, %f17, %f16;\n" /* smooth iteration count */
    "    max.f32 %f17, %f17, 0f00000000;\n"
    "    sqrt.approx.f32 %f17, %f17;\n"
    "    mul.f32 %f18, %f17, 0f3E6147AE;\n" /* t = 0.22 * sqrt(...) */
    "    mov.f32 %f19, 0f3F800000;\n"       /* brightness 1 */
    "    bra $L_colour;\n"
    "\n"
    "$L_inside:\n"
    "    fma.rn.f32 %f18, %f12, 0f3E99999A, 0f3F000000;\n" /* t = 0.3 |z|^2 + 0.5 */
    "    mov.f32 %f19, 0f3EB33333;\n"                      /* brightness 0.35 */
    "\n"
    "$L_colour:\n"
    /* byte index (y * width + x) * 3, 64-bit */
    "    mul.wide.u32 %rd1, %r11, %r1;\n"
    "    cvt.u64.u32 %rd2, %r9;\n"
    "    add.u64 %rd3, %rd1, %rd2;\n"
    "    mul.lo.u64 %rd4, %rd3, 3;\n"
    "    ld.param.u64 %rd5, [p_out];\n"
    "    cvta.to.global.u64 %rd6, %rd5;\n"
    "    add.u64 %rd7, %rd6, %rd4;\n"
    /* red */
    "    ld.param.f32 %f20, [p_ph0];\n"
    "    add.f32 %f21, %f18, %f20;\n"
    "    cvt.rmi.f32.f32 %f22, %f21;\n"
    "    sub.f32 %f21, %f21, %f22;\n"       /* frac */
    "    mul.f32 %f21, %f21, 0f40C90FDB;\n" /* 2 pi */
    "    cos.approx.f32 %f21, %f21;\n"
    "    fma.rn.f32 %f21, %f21, 0f3F000000, 0f3F000000;\n"
    "    mul.f32 %f21, %f21, %f19;\n"
    "    mul.f32 %f21, %f21, 0f437F0000;\n"
    "    max.f32 %f21, %f21, 0f00000000;\n"
    "    min.f32 %f21, %f21, 0f437F0000;\n"
    "    cvt.rni.u32.f32 %r13, %f21;\n"
    "    st.global.u8 [%rd7], %r13;\n"
    /* green */
    "    ld.param.f32 %f23, [p_ph1];\n"
    "    add.f32 %f24, %f18, %f23;\n"
    "    cvt.rmi.f32.f32 %f25, %f24;\n"
    "    sub.f32 %f24, %f24, %f25;\n"
    "    mul.f32 %f24, %f24, 0f40C90FDB;\n"
    "    cos.approx.f32 %f24, %f24;\n"
    "    fma.rn.f32 %f24, %f24, 0f3F000000, 0f3F000000;\n"
    "    mul.f32 %f24, %f24, %f19;\n"
    "    mul.f32 %f24, %f24, 0f437F0000;\n"
    "    max.f32 %f24, %f24, 0f00000000;\n"
    "    min.f32 %f24, %f24, 0f437F0000;\n"
    "    cvt.rni.u32.f32 %r14, %f24;\n"
    "    st.global.u8 [%rd7+1], %r14;\n"
    /* blue */
    "    ld.param.f32 %f26, [p_ph2];\n"
    "    add.f32 %f27, %f18, %f26;\n"
    "    cvt.rmi.f32.f32 %f28, %f27;\n"
    "    sub.f32 %f27, %f27, %f28;\n"
    "    mul.f32 %f27, %f27, 0f40C90FDB;\n"
    "    cos.approx.f32 %f27, %f27;\n"
    "    fma.rn.f32 %f27, %f27, 0f3F000000, 0f3F000000;\n"
    "    mul.f32 %f27, %f27, %f19;\n"
    "    mul.f32 %f27, %f27, 0f437F0000;\n"
    "    max.f32 %f27, %f27, 0f00000000;\n"
    "    min.f32 %f27, %f27, 0f437F0000;\n"
    "    cvt.rni.u32.f32 %r15, %f27;\n"
    "    st.global.u8 [%rd7+2], %r15;\n"
    "\n"
    "$L_done:\n"
    "    ret;\n"
    "}\n";

#define JULIA_BLOCK 16 /* 16 x 16 threads a block */

/* --- shared state ---------------------------------------------------------- */

enum task_kind { TASK_LOAD, TASK_UNLOAD, TASK_RUN };

/* One request for the CUDA thread. Plain C fields only: no JSON crosses
 * threads. */
struct task {
    struct task *next;
    enum task_kind kind;
    char id[RT_ID_MAX];
    char model[RT_ID_MAX];
    int64_t vram_mb; /* load: the hint, 0 when absent */
    int width, height, steps;
    uint64_t seed; /* run: seed and prompt folded together */
    char output_dir[PATH_MAX];
};

static struct {
    pthread_mutex_t mu; /* guards everything in this struct */
    pthread_cond_t cv;
    struct task *head, *tail;
    int nqueued;
    bool quitting;
    char current[RT_ID_MAX]; /* id of the run the CUDA thread is on, "" if none */
    bool cancel_current;
    bool done; /* the CUDA thread has returned */
} q = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* Held for each whole message written to stdout: a line, or an inline
 * result's line and its bytes, so that a pong or a log line from the main
 * thread never lands inside a picture. */
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

/* The largest result the agent takes inline ($GPUQ_RESULT_INLINE_MAX, 0: files
 * only). Set in main before the CUDA thread starts; read-only after. */
static size_t inline_max;

/* Owned by the CUDA thread. */
struct model {
    char name[RT_ID_MAX];
    CUdeviceptr ptr;
    size_t bytes;
    int64_t vram_mb; /* reported */
};

static struct {
    bool ready;
    char why[4096]; /* why CUDA is unusable, when !ready */
    char device_name[256];
    CUcontext ctx;
    CUmodule module;
    CUfunction julia;
    struct model models[RT_MAX_MODELS];
    int nmodels;
    struct rt_bytes png; /* the encoded picture, reused from run to run */
} gpu;

/* --- output ---------------------------------------------------------------- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Writes one JSON object as one line to stdout (any thread). */
static void emit(json_t *msg)
{
    if (!msg)
        return;
    char *s = json_dumps(msg, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(msg);
    if (!s)
        return;
    pthread_mutex_lock(&out_mu);
    fputs(s, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&out_mu);
    free(s);
}

/* Writes a result whose PNG follows its line (rt_emit_inline), as one
 * message under out_mu. */
static void emit_inline(const char *id, int64_t run_ms, const void *data, size_t len)
{
    pthread_mutex_lock(&out_mu);
    rt_emit_inline(stdout, id, "image/png", run_ms, data, len);
    pthread_mutex_unlock(&out_mu);
}

static void emit_error(const char *id, const char *cls, const char *message)
{
    emit(json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "id", id, "class", cls, "message",
                   message));
}

/* A log message for the agent's log (as a protocol line, not on stderr,
 * which the agent would log a second time). */
static void say(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const char *level, const char *fmt, ...)
{
    char m[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    emit(json_pack("{s:s, s:s, s:s}", "type", "log", "level", level, "message", m));
}

/* --- CUDA set-up --------------------------------------------------------- */

/* Names of the errors most likely here, for drivers (or the toolkit's stub
 * library) whose cuGetErrorName is missing or fails. */
static const struct {
    CUresult code;
    const char *name, *text;
} cu_known_errors[] = {
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {34, "CUDA_ERROR_STUB_LIBRARY",
     "libcuda.so.1 is the CUDA toolkit's stub, not the NVIDIA driver's library"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "the device is busy or unavailable"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for the device"},
    {218, "CUDA_ERROR_INVALID_PTX", "the PTX JIT compilation failed"},
    {221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "the PTX JIT compiler library was not found"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
     "the PTX was compiled with an unsupported toolchain"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* "what: CUDA_ERROR_X (text)" for a failed call. */
static void cu_describe(char *out, size_t len, const char *what, CUresult rc)
{
    const char *name = NULL, *text = NULL;
    if (cu.get_error_name && cu.get_error_name(rc, &name) != GPUQ_CUDA_SUCCESS)
        name = NULL;
    if (cu.get_error_string && cu.get_error_string(rc, &text) != GPUQ_CUDA_SUCCESS)
        text = NULL;
    for (size_t i = 0; i < sizeof cu_known_errors / sizeof cu_known_errors[0]; i++)
        if (cu_known_errors[i].code == rc) {
            if (!name)
                name = cu_known_errors[i].name;
            if (!text)
                text = cu_known_errors[i].text;
        }
    if (name && text)
        snprintf(out, len, "%s: %s (%s)", what, name, text);
    else if (name || text)
        snprintf(out, len, "%s: %s (CUDA error %d)", what, name ? name : text, rc);
    else
        snprintf(out, len, "%s: CUDA error %d", what, rc);
}

/* Stores dlsym(sym) into *slot (a function pointer of size size). */
static int resolve(const char *sym, void *slot, size_t size, bool required)
{
    void *p = dlsym(cu.lib, sym);
    if (!p) {
        if (required)
            snprintf(gpu.why, sizeof gpu.why,
                     "the CUDA driver library lacks %s (the NVIDIA driver is too old?)", sym);
        return required ? -1 : 0;
    }
    memcpy(slot, &p, size);
    return 0;
}

#define RESOLVE(field, sym, required)                                             \
    do {                                                                          \
        _Static_assert(sizeof cu.field == sizeof(void *), "function pointer size"); \
        if (resolve(sym, (void *)&cu.field, sizeof cu.field, required) != 0)      \
            return -1;                                                            \
    } while (0)

/* Opens the driver library: $GPUQ_CUDA_LIBRARY (a name or a path) if set,
 * else libcuda.so.1 as the dynamic loader finds it. */
static int open_libcuda(void)
{
    const char *name = getenv("GPUQ_CUDA_LIBRARY");
    if (!name || !name[0])
        name = "libcuda.so.1";
    cu.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!cu.lib) {
        const char *e = dlerror();
        snprintf(gpu.why, sizeof gpu.why, "CUDA unavailable: %s (is the NVIDIA driver installed?)",
                 e ? e : name);
        return -1;
    }
    RESOLVE(init, "cuInit", true);
    RESOLVE(device_get, "cuDeviceGet", true);
    RESOLVE(device_get_name, "cuDeviceGetName", true);
    RESOLVE(ctx_create, "cuCtxCreate_v2", true);
    RESOLVE(module_load_data, "cuModuleLoadData", true);
    RESOLVE(module_load_data_ex, "cuModuleLoadDataEx", false);
    RESOLVE(module_get_function, "cuModuleGetFunction", true);
    RESOLVE(mem_alloc, "cuMemAlloc_v2", true);
    RESOLVE(mem_free, "cuMemFree_v2", true);
    RESOLVE(memcpy_dtoh, "cuMemcpyDtoH_v2", true);
    RESOLVE(mem_get_info, "cuMemGetInfo_v2", true);
    RESOLVE(memset_d8, "cuMemsetD8_v2", true);
    RESOLVE(launch_kernel, "cuLaunchKernel", true);
    RESOLVE(ctx_synchronize, "cuCtxSynchronize", true);
    RESOLVE(get_error_name, "cuGetErrorName", false);
    RESOLVE(get_error_string, "cuGetErrorString", false);
    return 0;
}

/* JIT-compiles the kernel; on failure gpu.why carries the JIT's error log. */
static int load_kernel(void)
{
    CUresult rc;
    char errlog[2048] = "";
    if (cu.module_load_data_ex) {
        int opts[2] = {GPUQ_CU_JIT_ERROR_LOG_BUFFER, GPUQ_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
        void *vals[2] = {errlog, (void *)(uintptr_t)sizeof errlog};
        rc = cu.module_load_data_ex(&gpu.module, julia_ptx, 2, opts, vals);
    } else {
        rc = cu.module_load_data(&gpu.module, julia_ptx);
    }
    if (rc != GPUQ_CUDA_SUCCESS) {
        char m[512];
        cu_describe(m, sizeof m, "cuModuleLoadData (JIT of the kernel's PTX)", rc);
        errlog[sizeof errlog - 1] = '\0';
        snprintf(gpu.why, sizeof gpu.why, "%s%s%s", m, errlog[0] ? ": " : "", errlog);
        return -1;
    }
    rc = cu.module_get_function(&gpu.julia, gpu.module, "gpuq_julia");
    if (rc != GPUQ_CUDA_SUCCESS) {
        cu_describe(gpu.why, sizeof gpu.why, "cuModuleGetFunction(gpuq_julia)", rc);
        return -1;
    }
    return 0;
}

/* Runs on the CUDA thread; the context it creates is current there only. */
static void gpu_init(void)
{
    int64_t t0 = now_ms();
    if (open_libcuda() != 0) {
        say("error", "%s", gpu.why);
        return;
    }
    CUresult rc = cu.init(0);
    if (rc != GPUQ_CUDA_SUCCESS) {
        cu_describe(gpu.why, sizeof gpu.why, "cuInit", rc);
        say("error", "%s", gpu.why);
        return;
    }
    CUdevice dev;
    if ((rc = cu.device_get(&dev, 0)) != GPUQ_CUDA_SUCCESS) {
        cu_describe(gpu.why, sizeof gpu.why, "cuDeviceGet(0)", rc);
        say("error", "%s", gpu.why);
        return;
    }
    if (cu.device_get_name(gpu.device_name, (int)sizeof gpu.device_name, dev) != GPUQ_CUDA_SUCCESS)
        snprintf(gpu.device_name, sizeof gpu.device_name, "CUDA device 0");
    gpu.device_name[sizeof gpu.device_name - 1] = '\0';
    if ((rc = cu.ctx_create(&gpu.ctx, GPUQ_CU_CTX_SCHED_BLOCKING_SYNC, dev)) != GPUQ_CUDA_SUCCESS) {
        cu_describe(gpu.why, sizeof gpu.why, "cuCtxCreate", rc);
        say("error", "%s", gpu.why);
        return;
    }
    if (load_kernel() != 0) {
        say("error", "%s", gpu.why);
        return;
    }
    size_t free_b = 0, total_b = 0;
    cu.mem_get_info(&free_b, &total_b);
    gpu.ready = true;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    say("info",
        "%s (CUDA_VISIBLE_DEVICES=%s): %llu of %llu MiB free; kernel JIT-compiled, "
        "ready in %lld ms",
        gpu.device_name, vis ? vis : "unset", (unsigned long long)(free_b / RT_MIB),
        (unsigned long long)(total_b / RT_MIB), (long long)(now_ms() - t0));
}

/* --- load / unload ----------------------------------------------------------- */

/* A failed operation: the error class and message to answer with. */
struct failure {
    const char *cls;
    char message[4096];
};

static void fail_cuda(struct failure *f, const char *what, CUresult rc)
{
    f->cls = rc == GPUQ_CUDA_ERROR_OUT_OF_MEMORY ? "oom" : "cuda";
    cu_describe(f->message, sizeof f->message, what, rc);
}

static struct model *find_model(const char *name)
{
    for (int i = 0; i < gpu.nmodels; i++)
        if (strcmp(gpu.models[i].name, name) == 0)
            return &gpu.models[i];
    return NULL;
}

/* Makes model resident with vram_mb (0: the default) of device memory,
 * allocated and written. Returns it, or NULL with *f filled. */
static struct model *load_model(const char *name, int64_t vram_mb, int64_t *load_ms,
                                struct failure *f)
{
    *load_ms = 0;
    struct model *m = find_model(name);
    if (m)
        return m;
    if (!gpu.ready) {
        f->cls = "cuda";
        snprintf(f->message, sizeof f->message, "%s", gpu.why);
        return NULL;
    }
    if (gpu.nmodels >= RT_MAX_MODELS) {
        f->cls = "internal";
        snprintf(f->message, sizeof f->message, "too many models resident (%d)", RT_MAX_MODELS);
        return NULL;
    }
    if (vram_mb <= 0)
        vram_mb = RT_DEFAULT_VRAM_MB;
    int64_t t0 = now_ms();
    size_t bytes = (size_t)vram_mb * RT_MIB;
    size_t free_b = 0, total_b = 0;
    CUresult rc = cu.mem_get_info(&free_b, &total_b);
    if (rc != GPUQ_CUDA_SUCCESS) {
        fail_cuda(f, "cuMemGetInfo", rc);
        return NULL;
    }
    if (bytes > free_b) {
        f->cls = "oom";
        snprintf(f->message, sizeof f->message,
                 "CUDA out of memory loading %s: needs %lld MB, %llu MB free of %llu MB", name,
                 (long long)vram_mb, (unsigned long long)(free_b / RT_MIB),
                 (unsigned long long)(total_b / RT_MIB));
        return NULL;
    }
    CUdeviceptr ptr = 0;
    if ((rc = cu.mem_alloc(&ptr, bytes)) != GPUQ_CUDA_SUCCESS) {
        char what[256];
        snprintf(what, sizeof what, "cuMemAlloc(%lld MB) for %s (%llu MB were free)",
                 (long long)vram_mb, name, (unsigned long long)(free_b / RT_MIB));
        fail_cuda(f, what, rc);
        return NULL;
    }
    /* Touch every byte, so the memory is really in use (NVML shows it). */
    if ((rc = cu.memset_d8(ptr, 0x5a, bytes)) != GPUQ_CUDA_SUCCESS ||
        (rc = cu.ctx_synchronize()) != GPUQ_CUDA_SUCCESS) {
        fail_cuda(f, "cuMemsetD8 (writing the weights)", rc);
        cu.mem_free(ptr);
        return NULL;
    }
    /* Measured: what free memory dropped by, when that is plausible (other
     * processes on the GPU move it too). */
    int64_t measured = vram_mb;
    size_t free_after = 0;
    if (cu.mem_get_info(&free_after, &total_b) == GPUQ_CUDA_SUCCESS && free_after < free_b) {
        int64_t d = (int64_t)((free_b - free_after + RT_MIB - 1) / RT_MIB);
        if (d >= vram_mb && d <= 2 * vram_mb)
            measured = d;
    }
    m = &gpu.models[gpu.nmodels++];
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->ptr = ptr;
    m->bytes = bytes;
    m->vram_mb = measured;
    *load_ms = now_ms() - t0;
    return m;
}

static void do_load(const struct task *t)
{
    struct failure f = {0};
    int64_t load_ms = 0;
    struct model *m = load_model(t->model, t->vram_mb, &load_ms, &f);
    if (!m) {
        emit_error(t->id, f.cls, f.message);
        return;
    }
    emit(json_pack("{s:s, s:s, s:s, s:I, s:I}", "type", "loaded", "id", t->id, "model", m->name,
                   "vram_mb", (json_int_t)m->vram_mb, "load_ms", (json_int_t)load_ms));
}

static void do_unload(const struct task *t)
{
    struct model *m = find_model(t->model);
    if (m) {
        CUresult rc = cu.mem_free(m->ptr);
        if (rc != GPUQ_CUDA_SUCCESS) {
            char msg[512];
            cu_describe(msg, sizeof msg, "cuMemFree", rc);
            say("warn", "unloading %s: %s", m->name, msg);
        }
        *m = gpu.models[--gpu.nmodels];
    }
    emit(json_pack("{s:s, s:s, s:s}", "type", "unloaded", "id", t->id, "model", t->model));
}

/* --- run ------------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *state)
{
    uint64_t x = (*state += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static float unit(uint64_t *state)
{
    return (float)((double)(splitmix(state) >> 11) / 9007199254740992.0);
}

/* The kernel's picture parameters, drawn from the seed. */
struct julia_params {
    float cre, cim, zoom, ph[3];
};

static struct julia_params julia_from_seed(uint64_t seed)
{
    /* Julia constants near the Mandelbrot set's boundary, whose sets are
     * connected or nearly so (spirals, dendrites, rabbits); the seed picks
     * one, nudges it, and picks the zoom and the palette's phases. */
    static const float consts[][2] = {
        {-0.8f, 0.156f},     {-0.7269f, 0.1889f}, {0.285f, 0.01f},   {-0.4f, 0.6f},
        {-0.835f, -0.2321f}, {-0.70176f, -0.3842f}, {0.355f, 0.355f}, {-0.54f, 0.54f},
        {0.37f, 0.1f},       {-0.162f, 1.04f},    {-0.123f, 0.745f}, {0.3f, -0.49f},
    };
    uint64_t s = seed;
    struct julia_params p;
    size_t n = sizeof consts / sizeof consts[0];
    size_t k = (size_t)(splitmix(&s) % n);
    p.cre = consts[k][0] + 0.01f * (unit(&s) - 0.5f);
    p.cim = consts[k][1] + 0.01f * (unit(&s) - 0.5f);
    p.zoom = 1.0f + 0.6f * unit(&s);
    for (int i = 0; i < 3; i++)
        p.ph[i] = unit(&s);
    return p;
}

/* True when the run in progress was cancelled or the runtime is stopping. */
static bool should_stop(bool *quitting)
{
    pthread_mutex_lock(&q.mu);
    bool stop = q.cancel_current || q.quitting;
    *quitting = q.quitting;
    pthread_mutex_unlock(&q.mu);
    return stop;
}

static void do_run(const struct task *t)
{
    int64_t t0 = now_ms();
    struct failure f = {0};
    int64_t load_ms = 0;
    /* The agent loads before it runs; should it not have, load the default. */
    struct model *m = load_model(t->model, 0, &load_ms, &f);
    if (!m) {
        emit_error(t->id, f.cls, f.message);
        return;
    }
    int w = t->width, h = t->height;
    size_t bytes = (size_t)w * (size_t)h * 3;
    unsigned char *px = malloc(bytes);
    if (!px) {
        emit_error(t->id, "internal", "out of host memory for the image");
        return;
    }
    CUdeviceptr out = 0;
    CUresult rc = cu.mem_alloc(&out, bytes);
    if (rc != GPUQ_CUDA_SUCCESS) {
        fail_cuda(&f, "cuMemAlloc (output image)", rc);
        emit_error(t->id, f.cls, f.message);
        free(px);
        return;
    }
    struct julia_params jp = julia_from_seed(t->seed);
    unsigned int uw = (unsigned int)w, uh = (unsigned int)h;
    unsigned int maxit = (unsigned int)t->steps * 24u;
    float scale = 2.4f / jp.zoom / (float)(w < h ? w : h);
    unsigned int band = (uh + RT_BANDS - 1) / RT_BANDS;
    bool failed = false, quitting = false;
    for (unsigned int row0 = 0; row0 < uh && !failed; row0 += band) {
        if (should_stop(&quitting)) {
            if (!quitting)
                emit_error(t->id, "cancelled", "cancelled");
            failed = true;
            break;
        }
        unsigned int rows = uh - row0 < band ? uh - row0 : band;
        CUdeviceptr dout = out;
        void *args[] = {&dout, &uw,    &uh,   &row0,     &rows,     &maxit,
                        &jp.cre, &jp.cim, &scale, &jp.ph[0], &jp.ph[1], &jp.ph[2]};
        unsigned int grid_x = (uw + JULIA_BLOCK - 1) / JULIA_BLOCK;
        unsigned int grid_y = (rows + JULIA_BLOCK - 1) / JULIA_BLOCK;
        rc = cu.launch_kernel(gpu.julia, grid_x, grid_y, 1, JULIA_BLOCK, JULIA_BLOCK, 1, 0, NULL,
                              args, NULL);
        if (rc != GPUQ_CUDA_SUCCESS) {
            fail_cuda(&f, "cuLaunchKernel(gpuq_julia)", rc);
            failed = true;
        } else if ((rc = cu.ctx_synchronize()) != GPUQ_CUDA_SUCCESS) {
            fail_cuda(&f, "cuCtxSynchronize (running gpuq_julia)", rc);
            failed = true;
        }
        if (failed) {
            emit_error(t->id, f.cls, f.message);
            break;
        }
        if (row0 + rows < uh)
            emit(json_pack("{s:s, s:s, s:s, s:f}", "type", "progress", "id", t->id, "phase",
                           "generating", "progress", (double)(row0 + rows) / (double)uh));
    }
    if (!failed && (rc = cu.memcpy_dtoh(px, out, bytes)) != GPUQ_CUDA_SUCCESS) {
        fail_cuda(&f, "cuMemcpyDtoH (output image)", rc);
        emit_error(t->id, f.cls, f.message);
        failed = true;
    }
    cu.mem_free(out);
    if (failed) {
        free(px);
        return;
    }

    /* Encoded once into the buffer the CUDA thread keeps; then inline when
     * the agent offered it and the picture fits, else a file as before. */
    int enc = rt_png_encode(&gpu.png, w, h, px, RT_PNG_FAST);
    free(px);
    if (enc != 0) {
        emit_error(t->id, "internal", "could not encode the output PNG (out of host memory)");
        return;
    }
    if (gpu.png.len <= inline_max) {
        emit_inline(t->id, now_ms() - t0, gpu.png.p, gpu.png.len);
        return;
    }
    char path[PATH_MAX + RT_ID_MAX + 16];
    if (rt_write_bytes(t->output_dir, t->id, gpu.png.p, gpu.png.len, path, sizeof path) != 0) {
        char msg[sizeof path + 128];
        snprintf(msg, sizeof msg, "could not write %s: %s", path, strerror(errno));
        emit_error(t->id, "internal", msg);
        return;
    }
    emit(json_pack("{s:s, s:s, s:[{s:s, s:s}], s:I}", "type", "result", "id", t->id, "outputs",
                   "path", path, "content_type", "image/png", "run_ms",
                   (json_int_t)(now_ms() - t0)));
}

/* --- the CUDA thread ------------------------------------------------------------ */

static void *cuda_thread(void *arg)
{
    (void)arg;
    gpu_init();
    for (;;) {
        pthread_mutex_lock(&q.mu);
        while (!q.head && !q.quitting)
            pthread_cond_wait(&q.cv, &q.mu);
        if (q.quitting) {
            pthread_mutex_unlock(&q.mu);
            break;
        }
        struct task *t = q.head;
        q.head = t->next;
        if (!q.head)
            q.tail = NULL;
        q.nqueued--;
        snprintf(q.current, sizeof q.current, "%s", t->kind == TASK_RUN ? t->id : "");
        q.cancel_current = false;
        pthread_mutex_unlock(&q.mu);

        switch (t->kind) {
        case TASK_LOAD:
            do_load(t);
            break;
        case TASK_UNLOAD:
            do_unload(t);
            break;
        case TASK_RUN:
            if (!gpu.ready)
                emit_error(t->id, "cuda", gpu.why);
            else
                do_run(t);
            break;
        }
        free(t);
        pthread_mutex_lock(&q.mu);
        q.current[0] = '\0';
        q.cancel_current = false;
        pthread_mutex_unlock(&q.mu);
    }
    pthread_mutex_lock(&q.mu);
    q.done = true;
    pthread_cond_broadcast(&q.cv);
    pthread_mutex_unlock(&q.mu);
    return NULL;
}

/* --- the main thread: stdin ----------------------------------------------------- */

static bool enqueue(struct task *t)
{
    pthread_mutex_lock(&q.mu);
    if (q.nqueued >= RT_MAX_QUEUED) {
        pthread_mutex_unlock(&q.mu);
        return false;
    }
    t->next = NULL;
    if (q.tail)
        q.tail->next = t;
    else
        q.head = t;
    q.tail = t;
    q.nqueued++;
    pthread_cond_signal(&q.cv);
    pthread_mutex_unlock(&q.mu);
    return true;
}

/* An integer parameter (integers and finite reals taken), clamped to lo..hi. */
static int64_t param_int(json_t *params, const char *key, int64_t dflt, int64_t lo, int64_t hi)
{
    json_t *v = json_object_get(params, key);
    double x;
    if (json_is_integer(v))
        x = (double)json_integer_value(v);
    else if (json_is_real(v) && isfinite(json_real_value(v)))
        x = json_real_value(v);
    else
        return dflt;
    return x < (double)lo ? lo : x > (double)hi ? hi : (int64_t)x;
}

static struct task *new_task(enum task_kind kind, const char *id, const char *model)
{
    struct task *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->kind = kind;
    snprintf(t->id, sizeof t->id, "%s", id);
    snprintf(t->model, sizeof t->model, "%s", model);
    return t;
}

static void submit(struct task *t, const char *id)
{
    if (!t) {
        emit_error(id, "internal", "out of memory");
    } else if (!enqueue(t)) {
        free(t);
        emit_error(id, "internal", "too many requests queued");
    }
}

static void handle_load(json_t *msg, const char *id)
{
    const char *model = json_string_value(json_object_get(msg, "model"));
    if (!model || !model[0] || strlen(model) >= RT_ID_MAX) {
        emit_error(id, "bad_input", "load: model missing or too long");
        return;
    }
    struct task *t = new_task(TASK_LOAD, id, model);
    if (t) {
        json_t *v = json_object_get(msg, "vram_mb");
        if (json_is_integer(v) && json_integer_value(v) > 0)
            t->vram_mb = json_integer_value(v);
        else if (json_is_real(v) && json_real_value(v) >= 1 && json_real_value(v) < 1e9)
            t->vram_mb = (int64_t)json_real_value(v);
        if (t->vram_mb > (int64_t)1 << 30)
            t->vram_mb = (int64_t)1 << 30; /* 1 PiB: the GPU refuses it, nothing overflows */
    }
    submit(t, id);
}

static void handle_unload(json_t *msg, const char *id)
{
    const char *model = json_string_value(json_object_get(msg, "model"));
    if (!model || strlen(model) >= RT_ID_MAX) {
        emit(json_pack("{s:s, s:s, s:s}", "type", "unloaded", "id", id, "model",
                       model ? model : ""));
        return;
    }
    submit(new_task(TASK_UNLOAD, id, model), id);
}

static void handle_run(json_t *msg, const char *id)
{
    const char *model = json_string_value(json_object_get(msg, "model"));
    const char *outdir = json_string_value(json_object_get(msg, "output_dir"));
    json_t *params = json_object_get(msg, "params");
    if (!model || !model[0] || strlen(model) >= RT_ID_MAX || !outdir || !outdir[0] ||
        strlen(outdir) >= PATH_MAX - RT_ID_MAX - 16 || (params && !json_is_object(params))) {
        emit_error(id, "bad_input", "run: model, output_dir and an object of params are required");
        return;
    }
    struct task *t = new_task(TASK_RUN, id, model);
    if (t) {
        snprintf(t->output_dir, sizeof t->output_dir, "%s", outdir);
        t->width = (int)param_int(params, "width", 512, 64, 4096);
        t->height = (int)param_int(params, "height", 512, 64, 4096);
        t->steps = (int)param_int(params, "steps", 20, 1, 500);
        json_t *sv = json_object_get(params, "seed");
        uint64_t seed = 0;
        if (json_is_integer(sv))
            seed = (uint64_t)json_integer_value(sv);
        else if (json_is_real(sv) && isfinite(json_real_value(sv)))
            seed = (uint64_t)(int64_t)json_real_value(sv);
        uint64_t s = seed;
        t->seed = splitmix(&s) ^ rt_hash_str(json_string_value(json_object_get(params, "prompt")));
    }
    submit(t, id);
}

static void handle_cancel(const char *id)
{
    pthread_mutex_lock(&q.mu);
    struct task *prev = NULL, *t = q.head;
    while (t && !(t->kind == TASK_RUN && strcmp(t->id, id) == 0)) {
        prev = t;
        t = t->next;
    }
    if (t) { /* not started: drop it */
        if (prev)
            prev->next = t->next;
        else
            q.head = t->next;
        if (q.tail == t)
            q.tail = prev;
        q.nqueued--;
    } else if (q.current[0] && strcmp(q.current, id) == 0) {
        q.cancel_current = true; /* answered at the next band boundary */
    }
    pthread_mutex_unlock(&q.mu);
    if (t) {
        free(t);
        emit_error(id, "cancelled", "cancelled before it started");
    }
}

/* Returns false when the runtime should exit. */
static bool handle_line(const char *line, size_t len)
{
    json_error_t jerr;
    json_t *msg = json_loadb(line, len, 0, &jerr);
    if (!json_is_object(msg)) {
        json_decref(msg);
        say("warn", "ignored a line that is not a JSON object");
        return true;
    }
    const char *type = json_string_value(json_object_get(msg, "type"));
    const char *id = json_string_value(json_object_get(msg, "id"));
    bool go_on = true;
    if (!type) {
        say("warn", "ignored a message without type");
    } else if (strcmp(type, "shutdown") == 0) {
        go_on = false;
    } else if (!id || !id[0] || strlen(id) >= RT_ID_MAX) {
        say("warn", "ignored a %s message without a valid id", type);
    } else if (strcmp(type, "ping") == 0) {
        emit(json_pack("{s:s, s:s}", "type", "pong", "id", id));
    } else if (strcmp(type, "load") == 0) {
        handle_load(msg, id);
    } else if (strcmp(type, "unload") == 0) {
        handle_unload(msg, id);
    } else if (strcmp(type, "run") == 0) {
        handle_run(msg, id);
    } else if (strcmp(type, "cancel") == 0) {
        handle_cancel(id);
    } else {
        say("warn", "ignored a message of unknown type");
    }
    json_decref(msg);
    return go_on;
}

/* Stops the CUDA thread: it finishes at most the band it is on. If it is
 * stuck in the driver, exit without it. */
static int stop_cuda_thread(pthread_t th)
{
    pthread_mutex_lock(&q.mu);
    q.quitting = true;
    pthread_cond_broadcast(&q.cv);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    int rc = 0;
    while (!q.done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&q.cv, &q.mu, &until);
    bool done = q.done;
    pthread_mutex_unlock(&q.mu);
    pthread_mutex_lock(&out_mu);
    fflush(stdout);
    pthread_mutex_unlock(&out_mu);
    if (!done)
        _exit(0);
    pthread_join(th, NULL);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " RT_NAME " [--ptx | --version | --help]\n"
            "  A gpuq runtime (protocol v1, docs/protocol-runtime.md) for one NVIDIA GPU,\n"
            "  device 0 as CUDA_VISIBLE_DEVICES shows it; speaks JSON lines on stdin/stdout.\n"
            "  Opens libcuda.so.1, or $GPUQ_CUDA_LIBRARY (a name or a path) when set.\n"
            "  --ptx   print the kernel's PTX (for checking it with ptxas) and exit\n");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--ptx") == 0) {
            fputs(julia_ptx, stdout);
            return 0;
        }
        if (strcmp(argv[i], "--version") == 0) {
            puts(RT_NAME " " RT_VERSION);
            return 0;
        }
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    json_object_seed(0); /* before any thread uses jansson */
    inline_max = rt_inline_max();
    emit(json_pack("{s:s, s:i, s:s, s:s}", "type", "hello", "protocol", RT_PROTOCOL, "runtime",
                   RT_NAME, "version", RT_VERSION));

    pthread_t th;
    int err = pthread_create(&th, NULL, cuda_thread, NULL);
    if (err != 0) {
        say("error", "cannot start the CUDA thread: %s", strerror(err));
        return 1;
    }

    char *buf = malloc(RT_LINE_MAX);
    if (!buf) {
        say("error", "out of memory for the input buffer");
        stop_cuda_thread(th);
        return 1;
    }
    size_t len = 0;
    bool discarding = false, go_on = true;
    while (go_on) {
        ssize_t n = read(STDIN_FILENO, buf + len, RT_LINE_MAX - len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            break; /* stdin closed: exit */
        len += (size_t)n;
        size_t start = 0;
        for (size_t i = 0; i < len && go_on; i++) {
            if (buf[i] != '\n')
                continue;
            if (!discarding)
                go_on = handle_line(buf + start, i - start);
            discarding = false;
            start = i + 1;
        }
        if (!go_on)
            break;
        memmove(buf, buf + start, len - start);
        len -= start;
        if (len == RT_LINE_MAX) {
            say("warn", "discarding an over-long input line");
            discarding = true;
            len = 0;
        }
    }
    free(buf);
    return stop_cuda_thread(th);
}
