/* lat.c: latency samples and percentiles. */
#include "lat.h"

#include <math.h>
#include <stdlib.h>

#include "common/alloc.h"

void lat_init(struct lat *l)
{
    l->ns = NULL;
    l->n = l->cap = 0;
    l->dropped = 0;
}

void lat_fini(struct lat *l)
{
    free(l->ns);
    lat_init(l);
}

void lat_add(struct lat *l, int64_t ns)
{
    if (l->n == l->cap) {
        if (l->cap >= LAT_MAX_SAMPLES) {
            l->dropped++;
            return;
        }
        l->cap = l->cap ? l->cap * 2 : 4096;
        l->ns = xrealloc(l->ns, l->cap * sizeof l->ns[0]);
    }
    l->ns[l->n++] = ns;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int64_t lat_pct(struct lat *l, double p)
{
    if (l->n == 0)
        return 0;
    qsort(l->ns, l->n, sizeof l->ns[0], cmp_i64);
    size_t rank = (size_t)ceil(p / 100.0 * (double)l->n);
    if (rank < 1)
        rank = 1;
    if (rank > l->n)
        rank = l->n;
    return l->ns[rank - 1];
}
