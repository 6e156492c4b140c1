/* alloc.c: malloc wrappers that abort on failure. */
#include "alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

/* jemalloc's control call: resolved in a process that runs on jemalloc,
 * NULL in any other (weak). */
extern int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen)
    __attribute__((weak));

static void oom(size_t n)
{
    fprintf(stderr, "gpuq: out of memory allocating %zu bytes\n", n);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        oom(count * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = xmalloc(len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

void alloc_release_free(void)
{
    if (mallctl) {
        /* 4096 is MALLCTL_ARENAS_ALL: every arena. */
        mallctl("arena.4096.purge", NULL, NULL, NULL, 0);
        return;
    }
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}
