/* qc_bench.c: the agent's output check on one picture, N times — the
 * driver bench/qc-ir compiles against src/agent/qc.c of each revision it
 * compares. The picture is written as the runtimes write theirs
 * (runtimes/common/output.c: 8-bit RGB, Sub filter, zlib level 1): a
 * gradient with noise, so it compresses about as poorly as the sim's. */
#include <png.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/qc.h"

struct out {
    unsigned char *p;
    size_t len, cap;
};

static void on_write(png_structp png, png_bytep data, png_size_t n)
{
    struct out *o = png_get_io_ptr(png);
    if (o->len + n > o->cap) {
        o->cap = (o->len + n) * 2;
        o->p = realloc(o->p, o->cap);
        if (!o->p)
            png_error(png, "out of memory");
    }
    memcpy(o->p + o->len, data, n);
    o->len += n;
}

static void on_flush(png_structp png)
{
    (void)png;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: qc_bench WIDTH HEIGHT IMAGES\n");
        return 2;
    }
    int w = atoi(argv[1]), h = atoi(argv[2]), n = atoi(argv[3]);
    if (w < 1 || h < 1 || w > 8192 || h > 8192 || n < 1) {
        fprintf(stderr, "qc_bench: WIDTH and HEIGHT 1..8192, IMAGES >= 1\n");
        return 2;
    }
    size_t bytes = (size_t)w * (size_t)h * 3;
    unsigned char *px = malloc(bytes);
    if (!px)
        return 1;
    uint32_t r = 1;
    for (size_t i = 0; i < bytes; i++) {
        r = r * 1103515245u + 12345u;
        px[i] = (unsigned char)((size_t)((i / 3) % (size_t)w) * 127 / (size_t)w + (r >> 24) % 64);
    }
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info)
        return 1;
    struct out o = {0};
    if (setjmp(png_jmpbuf(png)))
        return 1;
    png_set_write_fn(png, &o, on_write, on_flush);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_compression_level(png, 1);
    png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_SUB);
    png_write_info(png, info);
    for (int y = 0; y < h; y++)
        png_write_row(png, px + (size_t)y * (size_t)w * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    double v = 0, sum = 0;
    for (int i = 0; i < n; i++) {
        if (qc_png_variance(o.p, o.len, &v) != 0) {
            fprintf(stderr, "qc_bench: the check refused the picture\n");
            return 1;
        }
        sum += v;
    }
    printf("%dx%d %zu bytes variance %.3f\n", w, h, o.len, sum / n);
    free(o.p);
    free(px);
    return 0;
}
