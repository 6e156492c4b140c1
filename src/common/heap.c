/* heap.c: array-backed binary min-heap (see heap.h). */
#include "common/heap.h"

#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

void heap_init(struct heap *h, size_t elem_size, heap_cmp_fn cmp)
{
    memset(h, 0, sizeof(*h));
    h->elem_size = elem_size;
    h->cmp = cmp;
}

void heap_fini(struct heap *h)
{
    free(h->data);
    h->data = NULL;
    h->len = h->cap = 0;
}

static void *at(const struct heap *h, size_t i)
{
    return h->data + i * h->elem_size;
}

static void swap(struct heap *h, size_t a, size_t b)
{
    char tmp[256];
    size_t n = h->elem_size;
    char *pa = at(h, a), *pb = at(h, b);
    while (n > 0) {
        size_t k = n < sizeof(tmp) ? n : sizeof(tmp);
        memcpy(tmp, pa, k);
        memcpy(pa, pb, k);
        memcpy(pb, tmp, k);
        pa += k;
        pb += k;
        n -= k;
    }
}

void heap_push(struct heap *h, const void *elem)
{
    if (h->len == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->data = xrealloc(h->data, h->cap * h->elem_size);
    }
    size_t i = h->len++;
    memcpy(at(h, i), elem, h->elem_size);
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h->cmp(at(h, p), at(h, i)) <= 0)
            break;
        swap(h, p, i);
        i = p;
    }
}

bool heap_pop(struct heap *h, void *out)
{
    if (h->len == 0)
        return false;
    if (out)
        memcpy(out, at(h, 0), h->elem_size);
    h->len--;
    if (h->len == 0)
        return true;
    memcpy(at(h, 0), at(h, h->len), h->elem_size);
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->len && h->cmp(at(h, l), at(h, m)) < 0)
            m = l;
        if (r < h->len && h->cmp(at(h, r), at(h, m)) < 0)
            m = r;
        if (m == i)
            break;
        swap(h, i, m);
        i = m;
    }
    return true;
}

const void *heap_peek(const struct heap *h)
{
    return h->len ? h->data : NULL;
}

size_t heap_len(const struct heap *h)
{
    return h->len;
}
