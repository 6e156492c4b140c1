/* heap.h: a binary min-heap of fixed-size elements ordered by a caller's
 * comparison (e.g. the simulator's event queue by time, then sequence number).
 * Invariant: for every i > 0, cmp(elem[(i-1)/2], elem[i]) <= 0. The heap owns
 * its storage and copies elements in and out. */
#ifndef GPUQ_HEAP_H
#define GPUQ_HEAP_H

#include <stdbool.h>
#include <stddef.h>

typedef int (*heap_cmp_fn)(const void *a, const void *b);

struct heap {
    char *data;
    size_t elem_size;
    size_t len;
    size_t cap;
    heap_cmp_fn cmp;
};

void heap_init(struct heap *h, size_t elem_size, heap_cmp_fn cmp);
void heap_fini(struct heap *h);
void heap_push(struct heap *h, const void *elem);
/* heap_pop copies the smallest element to out (may be NULL); false if empty. */
bool heap_pop(struct heap *h, void *out);
/* heap_peek returns the smallest element in place, or NULL if empty. */
const void *heap_peek(const struct heap *h);
size_t heap_len(const struct heap *h);

#endif
