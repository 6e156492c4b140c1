/* png_art.c: draws the sim runtime's PNG outputs with libpng's simplified API. */
#include "png_art.h"

#include <math.h>
#include <png.h>
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

int png_art_write(const char *path, int w, int h, uint64_t seed, bool solid)
{
    if (w < 1 || h < 1 || w > 4096 || h > 4096)
        return -1;
    unsigned char *px = malloc((size_t)w * (size_t)h * 3);
    if (!px)
        return -1;
    uint64_t r = mix(seed);
    double fx = 0.02 + (double)(r & 0xff) / 2000.0;
    double fy = 0.02 + (double)((r >> 8) & 0xff) / 2000.0;
    double ph[3] = {(double)((r >> 16) & 0xff) / 40.0, (double)((r >> 24) & 0xff) / 40.0,
                    (double)((r >> 32) & 0xff) / 40.0};
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
            uint64_t n = mix(seed ^ ((uint64_t)x << 20) ^ (uint64_t)y) & 0x1f;
            for (int k = 0; k < 3; k++) {
                double v = 127.5 + 60 * sin(x * fx * (k + 1) + ph[k]) +
                           50 * cos(y * fy * (3 - k) + ph[(k + 1) % 3]) +
                           15 * sin(d * 0.15 + ph[k]);
                int iv = (int)v + (int)n - 16;
                p[k] = (unsigned char)(iv < 0 ? 0 : iv > 255 ? 255 : iv);
            }
        }
    }
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)w;
    img.height = (png_uint_32)h;
    img.format = PNG_FORMAT_RGB;
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) {
        free(px);
        return -1;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    int ok = png_image_write_to_file(&img, tmp, 0, px, 0, NULL);
    png_image_free(&img);
    free(px);
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}
