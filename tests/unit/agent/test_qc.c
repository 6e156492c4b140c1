/* test_qc.c: output QC — a solid-colour PNG has no variance and fails; a
 * picture passes; bytes that are not a PNG, truncated or corrupted PNGs are
 * refused. Scores are libpng's own grey conversion (its simplified reader,
 * asked for PNG_FORMAT_GRAY: the check as it was first written) up to
 * rounding, on every format, filter and picture. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>
#include <png.h>

#include "agent/qc.h"
#include "common/err.h"

/* Pictures: what a runtime draws, a black frame, near-solid noise of ±1 and
 * ±2 levels (the edge of the default threshold), a gradient. */
enum pic { PIC_ART, PIC_SOLID, PIC_BLACK, PIC_NOISE1, PIC_NOISE2, PIC_GRADIENT };

static unsigned char sample(enum pic p, int i, int x, int y)
{
    uint32_t r = (uint32_t)i * 2654435761u;
    r ^= r >> 15;
    switch (p) {
    case PIC_ART:
        return (unsigned char)((i * 37) ^ (i >> 5));
    case PIC_SOLID:
        return 0x40;
    case PIC_BLACK:
        return 0;
    case PIC_NOISE1:
        return (unsigned char)(128 + (int)(r % 3) - 1);
    case PIC_NOISE2:
        return (unsigned char)(128 + (int)(r % 5) - 2);
    default:
        return (unsigned char)(x * 4 + y);
    }
}

/* A PNG written by libpng's own writer: colour type ctype (0 grey, 2 RGB,
 * 3 palette, 6 RGBA), one filter (or all, filter < 0), interlaced or not. */
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
    }
    memcpy(o->p + o->len, data, n);
    o->len += n;
}

static void on_flush(png_structp png)
{
    (void)png;
}

static void *make_png_ex(int w, int h, int ctype, int filter, int interlace, enum pic pic,
                         size_t *len)
{
    int ch = ctype == 2 ? 3 : ctype == 6 ? 4 : 1;
    unsigned char *px = malloc((size_t)w * h * ch);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < ch; c++) {
                int i = (y * w + x) * ch + c;
                px[i] = ctype == 6 && c == 3 ? 255 : sample(pic, i, x, y);
                if (ctype == 3)
                    px[i] = (unsigned char)(px[i] % 16);
            }
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    assert_non_null(info);
    struct out o = {0};
    if (setjmp(png_jmpbuf(png)))
        fail_msg("libpng could not write the test picture");
    png_set_write_fn(png, &o, on_write, on_flush);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, ctype,
                 interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (ctype == 3) {
        png_color pal[16];
        for (int i = 0; i < 16; i++) {
            pal[i].red = (png_byte)(i * 16);
            pal[i].green = (png_byte)(255 - i * 9);
            pal[i].blue = (png_byte)(i * i);
        }
        png_set_PLTE(png, info, pal, 16);
    }
    png_set_compression_level(png, 1);
    png_set_filter(png, PNG_FILTER_TYPE_BASE,
                   filter < 0    ? PNG_ALL_FILTERS
                   : filter == 0 ? PNG_FILTER_NONE
                   : filter == 1 ? PNG_FILTER_SUB
                   : filter == 2 ? PNG_FILTER_UP
                   : filter == 3 ? PNG_FILTER_AVG
                                 : PNG_FILTER_PAETH);
    png_write_info(png, info);
    int passes = png_set_interlace_handling(png);
    for (int p = 0; p < passes; p++)
        for (int y = 0; y < h; y++)
            png_write_row(png, px + (size_t)y * w * ch);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(px);
    *len = o.len;
    return o.p;
}

static void *make_png(int w, int h, int solid, size_t *len)
{
    return make_png_ex(w, h, 2, 1, 0, solid ? PIC_SOLID : PIC_ART, len);
}

/* The reference score: libpng's simplified reader converts to grey. */
static int reference_variance(const void *data, size_t len, double *variance)
{
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&img, data, len))
        return GPUQ_EINVAL;
    img.format = PNG_FORMAT_GRAY;
    size_t n = (size_t)img.width * img.height;
    unsigned char *px = calloc(n, 1); /* alpha is composed onto black */
    assert_non_null(px);
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
    *variance = sum2 / (double)n - mean * mean;
    free(px);
    png_image_free(&img);
    return 0;
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
    assert_int_equal(qc_png_variance("", 0, &v), GPUQ_EINVAL);
}

/* Black, solid and blank (white) frames of every format score 0 — below any
 * threshold — interlaced or not, and so does a black frame of the size real
 * outputs have (1024 × 1024 RGB). */
static void test_black_and_blank_fail(void **state)
{
    (void)state;
    const int ctypes[] = {0, 2, 3, 6};
    const enum pic pics[] = {PIC_BLACK, PIC_SOLID};
    size_t len;
    double v = -1;
    for (size_t c = 0; c < 4; c++)
        for (size_t p = 0; p < 2; p++)
            for (int il = 0; il < 2; il++) {
                void *png = make_png_ex(64, 64, ctypes[c], -1, il, pics[p], &len);
                v = -1;
                assert_int_equal(qc_png_variance(png, len, &v), 0);
                assert_true(v < 1e-9);
                free(png);
            }
    void *big = make_png_ex(1024, 1024, 2, 0, 0, PIC_BLACK, &len);
    v = -1;
    assert_int_equal(qc_png_variance(big, len, &v), 0);
    assert_true(v < 1e-9);
    free(big);
}

/* Scores agree with libpng's grey conversion, picture by picture, on every
 * filter, every colour type and interlacing. */
static void test_agrees_with_reference(void **state)
{
    (void)state;
    const int ctypes[] = {0, 2, 3, 6};
    const int sizes[][2] = {{1, 1}, {3, 7}, {64, 64}, {200, 9}};
    double worst = 0;
    for (size_t c = 0; c < 4; c++)
        for (int f = -1; f <= 4; f++)
            for (int pic = PIC_ART; pic <= PIC_GRADIENT; pic++)
                for (size_t s = 0; s < 4; s++)
                    for (int il = 0; il < 2; il++) {
                        size_t len;
                        double got = -1, want = -2;
                        void *png = make_png_ex(sizes[s][0], sizes[s][1], ctypes[c], f, il,
                                                (enum pic)pic, &len);
                        assert_int_equal(qc_png_variance(png, len, &got), 0);
                        assert_int_equal(reference_variance(png, len, &want), 0);
                        /* Grey exactly; colour through the same linear-light
                         * weighting, up to rounding: libpng's tables round
                         * differently, a level here and there. */
                        double tol = ctypes[c] == 0 ? 1e-9 : 0.05 * want + 0.25;
                        if (want > 0 && fabs(got - want) / want > worst)
                            worst = fabs(got - want) / want;
                        if (got < want - tol || got > want + tol)
                            fail_msg("type %d filter %d picture %d size %dx%d interlace %d: "
                                     "check %.4f, libpng's grey %.4f",
                                     ctypes[c], f, pic, sizes[s][0], sizes[s][1], il, got, want);
                        free(png);
                    }
    print_message("largest relative difference from libpng's grey: %.5f\n", worst);
}

/* PNG's CRC-32 (bit by bit: a test's few chunks), to make a damaged chunk's
 * CRC right again so that the checks behind it are reached. */
static uint32_t crc32_png(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
}

static void put_crc(unsigned char *chunk, size_t clen)
{
    uint32_t crc = crc32_png(chunk + 4, clen + 4);
    unsigned char *c = chunk + 8 + clen;
    c[0] = (unsigned char)(crc >> 24);
    c[1] = (unsigned char)(crc >> 16);
    c[2] = (unsigned char)(crc >> 8);
    c[3] = (unsigned char)crc;
}

/* Corrupt PNGs are refused: every truncation, a flipped bit in the image
 * data (the chunk's CRC) and the same with the CRC made right (zlib's
 * Adler-32, the stream itself, or data left over), a wrong signature, an
 * IHDR that lies about the size. */
static void test_corrupt_refused(void **state)
{
    (void)state;
    size_t len;
    double v;
    unsigned char *png = make_png_ex(64, 64, 2, 1, 0, PIC_ART, &len);
    unsigned char *bad = malloc(len);
    double clean = -1;
    assert_int_equal(qc_png_variance(png, len, &clean), 0);
    for (size_t cut = 0; cut < len - 12; cut += 7) /* short of IEND */
        assert_int_equal(qc_png_variance(png, cut, &v), GPUQ_EINVAL);
    /* The first IDAT: after the 8-byte signature and the 25-byte IHDR. */
    size_t idat = 8 + 25;
    while (memcmp(png + idat + 4, "IDAT", 4) != 0)
        idat += 12 + ((size_t)png[idat] << 24 | (size_t)png[idat + 1] << 16 |
                      (size_t)png[idat + 2] << 8 | png[idat + 3]);
    size_t ilen = (size_t)png[idat] << 24 | (size_t)png[idat + 1] << 16 |
                  (size_t)png[idat + 2] << 8 | png[idat + 3];
    for (size_t at = 2; at < ilen; at += ilen / 9 + 1) {
        memcpy(bad, png, len);
        bad[idat + 8 + at] ^= 0x10;
        assert_int_equal(qc_png_variance(bad, len, &v), GPUQ_EINVAL);
        /* Some flips give another stream for the same pixels (its Adler-32
         * matches): those alone may pass, scored as the clean picture. */
        put_crc(bad + idat, ilen);
        v = -1;
        if (qc_png_variance(bad, len, &v) != GPUQ_EINVAL && v != clean)
            fail_msg("a bit flipped at %zu of the image data, CRC made right: scored %.4f, "
                     "the clean picture %.4f", at, v, clean);
    }
    memcpy(bad, png, len);
    bad[1] = 'Q';
    assert_int_equal(qc_png_variance(bad, len, &v), GPUQ_EINVAL);
    memcpy(bad, png, len);
    bad[8 + 8 + 7] = 65; /* height 64 → 65: the data runs short */
    put_crc(bad + 8, 13);
    assert_int_equal(qc_png_variance(bad, len, &v), GPUQ_EINVAL);
    memcpy(bad, png, len);
    bad[8 + 8 + 7] = 63; /* height 64 → 63: a row's data left over */
    put_crc(bad + 8, 13);
    assert_int_equal(qc_png_variance(bad, len, &v), GPUQ_EINVAL);
    free(bad);
    free(png);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_variance),
        cmocka_unit_test(test_black_and_blank_fail),
        cmocka_unit_test(test_agrees_with_reference),
        cmocka_unit_test(test_corrupt_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
