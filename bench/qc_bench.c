/* qc_bench.c: the agent's output check on one picture, N times — the
 * driver bench/qc-ir compiles against src/agent/qc.c of each revision it
 * compares. The picture is written by the runtimes' own encoder
 * (runtimes/common/output.c, RT_PNG_FAST: 8-bit RGB, Sub filter, zlib level
 * 1): a gradient with noise, so it compresses about as poorly as the sim's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "agent/qc.h"
#include "runtimes/common/output.h"

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
    struct rt_bytes o = {0};
    if (rt_png_encode(&o, w, h, px, RT_PNG_FAST) != 0)
        return 1;
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
