/* png_art.c: draws the sim runtime's pictures (written by ../common/output.c). */
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

unsigned char *png_art_draw(int w, int h, uint64_t seed, bool solid)
{
    if (w < 1 || h < 1 || w > 4096 || h > 4096)
        return NULL;
    unsigned char *px = malloc((size_t)w * (size_t)h * 3);
    if (!px)
        return NULL;
    uint64_t r = mix(seed);
    double fx = 0.02 + (double)(r & 0xff) / 2000.0;
    double fy = 0.02 + (double)((r >> 8) & 0xff) / 2000.0;
    double ph[3] = {(double)((r >> 16) & 0xff) / 40.0, (double)((r >> 24) & 0xff) / 40.0,
                    (double)((r >> 32) & 0xff) / 40.0};
    /* The pattern is a sum of a column wave, a row wave and a ring wave; the
     * first two are tabulated and the ring's phase shifts use
     * sin(a + b) = sin a cos b + cos a sin b, so a pixel costs one sin/cos
     * pair, not nine (zero-duration benchmark jobs spend their time here). */
    double *colw = malloc(sizeof(double) * 3 * (size_t)w);
    double *roww = malloc(sizeof(double) * 3 * (size_t)h);
    if (!colw || !roww) {
        free(colw);
        free(roww);
        free(px);
        return NULL;
    }
    for (int x = 0; x < w; x++)
        for (int k = 0; k < 3; k++)
            colw[x * 3 + k] = 60 * sin(x * fx * (k + 1) + ph[k]);
    for (int y = 0; y < h; y++)
        for (int k = 0; k < 3; k++)
            roww[y * 3 + k] = 50 * cos(y * fy * (3 - k) + ph[(k + 1) % 3]);
    double sph[3], cph[3];
    for (int k = 0; k < 3; k++) {
        sph[k] = sin(ph[k]);
        cph[k] = cos(ph[k]);
    }
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            unsigned char *p = px + ((size_t)y * (size_t)w + (size_t)x) * 3;
            if (solid) {
                p[0] = (unsigned char)(r & 0xff);
                p[1] = (unsigned char)((r >> 8) & 0xff);
                p[2] = (unsigned char)((r >> 16) & 0xff);
                continue;
            }
            double d = sqrt((double)((x - w / 2) * (x - w / 2) + (y - h / 2) * (y - h / 2)));
            double sd = sin(d * 0.15), cd = cos(d * 0.15);
            uint64_t n = mix(seed ^ ((uint64_t)x << 20) ^ (uint64_t)y) & 0x1f;
            for (int k = 0; k < 3; k++) {
                double v = 127.5 + colw[x * 3 + k] + roww[y * 3 + k] +
                           15 * (sd * cph[k] + cd * sph[k]);
                int iv = (int)v + (int)n - 16;
                p[k] = (unsigned char)(iv < 0 ? 0 : iv > 255 ? 255 : iv);
            }
        }
    }
    free(colw);
    free(roww);
    return px;
}
