/* test_qc.c: output QC — a solid-colour PNG has no variance and fails; a
 * picture passes; bytes that are not a PNG are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <png.h>

#include "agent/qc.h"
#include "common/err.h"

static void *make_png(int w, int h, int solid, size_t *len)
{
    unsigned char *px = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h * 3; i++)
        px[i] = solid ? 0x40 : (unsigned char)((i * 37) ^ (i >> 5));
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)w;
    img.height = (png_uint_32)h;
    img.format = PNG_FORMAT_RGB;
    png_alloc_size_t size = 0;
    assert_true(png_image_write_to_memory(&img, NULL, &size, 0, px, 0, NULL));
    void *out = malloc(size);
    assert_true(png_image_write_to_memory(&img, out, &size, 0, px, 0, NULL));
    free(px);
    *len = size;
    return out;
}

static void test_variance(void **state)
{
    (void)state;
    size_t len;
    double v = -1;
    void *solid = make_png(32, 16, 1, &len);
    assert_int_equal(qc_png_variance(solid, len, &v), 0);
    assert_true(v < 1e-9);
    free(solid);
    void *pic = make_png(32, 16, 0, &len);
    assert_int_equal(qc_png_variance(pic, len, &v), 0);
    assert_true(v > 100);
    /* Truncated and garbage inputs are refused, not crashed on. */
    assert_int_equal(qc_png_variance(pic, len / 2, &v), GPUQ_EINVAL);
    free(pic);
    assert_int_equal(qc_png_variance("not a png at all", 16, &v), GPUQ_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_variance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
