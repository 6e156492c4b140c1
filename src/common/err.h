/* err.h: the project's error codes. Functions return 0 or one of these
 * (negative) and give results through out-parameters. */
#ifndef GPUQ_ERR_H
#define GPUQ_ERR_H

enum gpuq_err {
    GPUQ_OK = 0,
    GPUQ_EINVAL = -1,    /* bad input: a field is missing, of the wrong type or out of range */
    GPUQ_ENOENT = -2,    /* no such object */
    GPUQ_EEXIST = -3,    /* already exists */
    GPUQ_ENOSPC = -4,    /* a bounded container is full */
    GPUQ_EAGAIN = -5,    /* nothing now; try again later */
    GPUQ_ESTALE = -6,    /* a fenced operation names an old attempt */
    GPUQ_EIO = -7,       /* storage or system failure */
    GPUQ_ECONFLICT = -8, /* the request conflicts with the current state */
    GPUQ_EPERM = -9,     /* not allowed for this caller */
    GPUQ_ESTALE_EPOCH = -10, /* a fenced operation names an attempt of an earlier boot (epoch) */
};

/* gpuq_strerror returns a static, human-readable name for an error code. */
const char *gpuq_strerror(int err);

#endif
