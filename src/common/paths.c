/* paths.c: the default data directory (see paths.h). */
#include "common/paths.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/err.h"

static int put(char *out, size_t size, const char *a, const char *b)
{
    int n = snprintf(out, size, "%s%s", a, b);
    return n < 0 || (size_t)n >= size ? GPUQ_EINVAL : 0;
}

int paths_default_data(char *out, size_t size)
{
    const char *v = getenv("GPUQ_DATA");
    if (v && *v)
        return put(out, size, v, "");
    v = getenv("XDG_DATA_HOME");
    if (v && *v == '/')
        return put(out, size, v, "/gpuq");
    v = getenv("HOME");
    if (v && *v)
        return put(out, size, v, "/.local/share/gpuq");
    put(out, size, "gpuq-data", "");
    return GPUQ_ENOENT;
}
