/* png_art.c: draws the sim runtime's pictures (encoded by ../common/output.c). */
#include "png_art.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64: a small, good integer mixer for per-seed colours. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A channel's value clamped to 0..255. The waves keep it within
 * 127.5 ± 125 before the noise of -16..15, far inside the table's range;
 * the branches outside it are never taken but keep any value safe. */
static unsigned char clamp_lut[1024];

static void clamp_init(void)
{
    for (int i = 0; i < 1024; i++) {
        int v = i - 512;
        clamp_lut[i] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

static inline unsigned char clamp8(int v)
{
    if (v < -512 || v >= 512)
        return v < 0 ? 0 : 255;
    return clamp_lut[v + 512];
}

/* Grows *p to hold n elements of size sz; false when memory runs out. */
static bool grow(void **p, size_t *cap, size_t n, size_t sz)
{
    if (n <= *cap)
        return true;
    void *q = realloc(*p, n * sz);
    if (!q)
        return false;
    *p = q;
    *cap = n;
    return true;
}

void png_art_free(struct png_art *a)
{
    free(a->px);
    free(a->colw);
    free(a->roww);
    free(a->ring);
    memset(a, 0, sizeof *a);
}

unsigned char *png_art_draw(struct png_art *a, int w, int h, uint64_t seed, bool solid)
{
    if (w < 1 || h < 1 || w > 4096 || h > 4096)
        return NULL;
    /* The ring wave depends on a pixel's distance from the centre only, so
     * it is tabulated once for |dx| <= dy (the other seven eighths are its
     * mirror images): about w*h/8 sin/cos pairs instead of w*h. */
    int m = (w > h ? w : h) / 2 + 1;
    if (!grow((void **)&a->px, &a->px_cap, (size_t)w * (size_t)h * 3, 1) ||
        !grow((void **)&a->colw, &a->colw_cap, (size_t)w * 3, sizeof(double)) ||
        !grow((void **)&a->roww, &a->roww_cap, (size_t)h * 3, sizeof(double)) ||
        !grow((void **)&a->ring, &a->ring_cap, (size_t)m * (size_t)m * 3, sizeof(double)))
        return NULL;
    unsigned char *px = a->px;
    if (!clamp_lut[1023])
        clamp_init();
    uint64_t r = mix(seed);
    if (solid) {
        for (size_t i = 0; i < (size_t)w * (size_t)h; i++) {
            px[i * 3] = (unsigned char)(r & 0xff);
            px[i * 3 + 1] = (unsigned char)((r >> 8) & 0xff);
            px[i * 3 + 2] = (unsigned char)((r >> 16) & 0xff);
        }
        return px;
    }
    double fx = 0.02 + (double)(r & 0xff) / 2000.0;
    double fy = 0.02 + (double)((r >> 8) & 0xff) / 2000.0;
    double ph[3] = {(double)((r >> 16) & 0xff) / 40.0, (double)((r >> 24) & 0xff) / 40.0,
                    (double)((r >> 32) & 0xff) / 40.0};
    /* The pattern is a sum of a column wave, a row wave and a ring wave; the
     * first two are tabulated and the ring's phase shifts use
     * sin(a + b) = sin a cos b + cos a sin b, so a pixel costs no sin/cos at
     * all (zero-duration benchmark jobs spend their time here). */
    double *colw = a->colw, *roww = a->roww, *ring = a->ring;
    double sph[3], cph[3];
    for (int k = 0; k < 3; k++) {
        sph[k] = sin(ph[k]);
        cph[k] = cos(ph[k]);
    }
    /* A channel is ((127.5 + column) + row) + ring, in that order as ever:
     * the first sum is tabulated per column, the ring term per distance. */
    for (int x = 0; x < w; x++)
        for (int k = 0; k < 3; k++)
            colw[x * 3 + k] = 127.5 + 60 * sin(x * fx * (k + 1) + ph[k]);
    for (int y = 0; y < h; y++)
        for (int k = 0; k < 3; k++)
            roww[y * 3 + k] = 50 * cos(y * fy * (3 - k) + ph[(k + 1) % 3]);
    int mx = w / 2 + 1, my = h / 2 + 1; /* |dx| <= w/2, |dy| <= h/2 */
    for (int b = 0; b < m; b++) {
        for (int c = 0; c <= b; c++) {
            bool used = (c < mx && b < my) || (b < mx && c < my);
            if (!used)
                continue;
            double d = sqrt((double)(c * c + b * b));
            double sd = sin(d * 0.15), cd = cos(d * 0.15);
            double *e1 = ring + ((size_t)b * (size_t)m + (size_t)c) * 3;
            double *e2 = ring + ((size_t)c * (size_t)m + (size_t)b) * 3;
            for (int k = 0; k < 3; k++)
                e1[k] = e2[k] = 15 * (sd * cph[k] + cd * sph[k]);
        }
    }
    for (int y = 0; y < h; y++) {
        int dy = abs(y - h / 2);
        const double *rrow = ring + (size_t)dy * (size_t)m * 3;
        const double *rw = roww + y * 3;
        unsigned char *p = px + (size_t)y * (size_t)w * 3;
        for (int x = 0; x < w; x++, p += 3) {
            const double *rg = rrow + (size_t)abs(x - w / 2) * 3;
            const double *cw = colw + x * 3;
            int n = (int)(mix(seed ^ ((uint64_t)x << 20) ^ (uint64_t)y) & 0x1f) - 16;
            p[0] = clamp8((int)(cw[0] + rw[0] + rg[0]) + n);
            p[1] = clamp8((int)(cw[1] + rw[1] + rg[1]) + n);
            p[2] = clamp8((int)(cw[2] + rw[2] + rg[2]) + n);
        }
    }
    return px;
}
