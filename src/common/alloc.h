/* alloc.h: allocation that aborts on out-of-memory, so callers never check. */
#ifndef GPUQ_ALLOC_H
#define GPUQ_ALLOC_H

#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* The allocator's free pages back to the system: every jemalloc arena purged
 * when the process runs on jemalloc (gpuqd links it: meson.build), else
 * glibc's heaps trimmed. For after a burst whose memory is all freed. */
void alloc_release_free(void);

#endif
