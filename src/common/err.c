/* err.c: names of the project's error codes. */
#include "err.h"

const char *gpuq_strerror(int err)
{
    switch (err) {
    case GPUQ_OK: return "ok";
    case GPUQ_EINVAL: return "invalid argument";
    case GPUQ_ENOENT: return "not found";
    case GPUQ_EEXIST: return "already exists";
    case GPUQ_ENOSPC: return "no space";
    case GPUQ_EAGAIN: return "try again";
    case GPUQ_ESTALE: return "stale attempt";
    case GPUQ_EIO: return "i/o error";
    case GPUQ_ECONFLICT: return "conflict";
    case GPUQ_EPERM: return "permission denied";
    case GPUQ_ESTALE_EPOCH: return "stale epoch";
    default: return "unknown error";
    }
}
