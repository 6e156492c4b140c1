/* qc.c: output quality check on PNG outputs (see qc.h). */
#include "agent/qc.h"

#include <png.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

int qc_png_variance(const void *data, size_t len, double *variance)
{
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&img, data, len))
        return GPUQ_EINVAL;
    if ((uint64_t)img.width * img.height > (64u << 20) || img.width == 0 || img.height == 0) {
        png_image_free(&img);
        return GPUQ_EINVAL;
    }
    img.format = PNG_FORMAT_GRAY;
    size_t n = (size_t)img.width * img.height;
    unsigned char *px = malloc(n);
    if (!px) {
        png_image_free(&img);
        return GPUQ_EINVAL;
    }
    if (!png_image_finish_read(&img, NULL, px, 0, NULL)) {
        png_image_free(&img);
        free(px);
        return GPUQ_EINVAL;
    }
    double sum = 0, sum2 = 0;
    for (size_t i = 0; i < n; i++) {
        sum += px[i];
        sum2 += (double)px[i] * px[i];
    }
    double mean = sum / (double)n;
    double v = sum2 / (double)n - mean * mean;
    *variance = v < 0 ? 0 : v;
    free(px);
    png_image_free(&img);
    return 0;
}
