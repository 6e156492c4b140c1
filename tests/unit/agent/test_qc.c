/* test_qc.c: output QC — a solid-colour PNG has no variance and fails; a
 * picture passes; bytes that are not a PNG, truncated or corrupted PNGs are
 * refused. The direct decode (qc_png_variance) must agree with libpng's
 * reader (qc_png_variance_reference) on every format, filter and picture. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>
#include <png.h>
#include <zlib.h>

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

/* Black, solid and blank (white) frames of every format score 0 — below any
 * threshold — through the direct decode as through libpng. */
static void test_black_and_blank_fail(void **state)
{
    (void)state;
    const int ctypes[] = {0, 2, 3, 6};
    const enum pic pics[] = {PIC_BLACK, PIC_SOLID};
    for (size_t c = 0; c < 4; c++)
        for (size_t p = 0; p < 2; p++)
            for (int il = 0; il < 2; il++) {
                size_t len;
                double v = -1;
                void *png = make_png_ex(64, 64, ctypes[c], -1, il, pics[p], &len);
                assert_int_equal(qc_png_variance(png, len, &v), 0);
                assert_true(v < 1e-9);
                free(png);
            }
}

/* The direct decode and libpng agree, picture by picture, on every filter,
 * every colour type (some of which go to libpng anyway) and interlacing. */
static void test_agrees_with_libpng(void **state)
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
                        assert_int_equal(qc_png_variance_reference(png, len, &want), 0);
                        /* Grey exactly; RGB through the same linear-light
                         * weighting, up to rounding: libpng's tables round
                         * differently, a level here and there (palette,
                         * alpha and interlaced are libpng's own, exactly). */
                        double tol = ctypes[c] == 2 ? 0.05 * want + 0.25 : 1e-9;
                        if (want > 0 && fabs(got - want) / want > worst)
                            worst = fabs(got - want) / want;
                        if (got < want - tol || got > want + tol)
                            fail_msg("type %d filter %d picture %d size %dx%d interlace %d: "
                                     "direct %.4f, libpng %.4f",
                                     ctypes[c], f, pic, sizes[s][0], sizes[s][1], il, got, want);
                        free(png);
                    }
    print_message("largest relative difference from libpng: %.5f\n", worst);
}

/* Corrupt PNGs are refused: every truncation, a flipped bit in the image
 * data (the chunk's CRC) and one with its CRC recomputed (zlib's Adler-32 or
 * the filter bytes), a wrong signature, an IHDR that lies about the size. */
static void test_corrupt_refused(void **state)
{
    (void)state;
    size_t len;
    double v;
    unsigned char *png = make_png_ex(64, 64, 2, 1, 0, PIC_ART, &len);
    unsigned char *bad = malloc(len);
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
        /* The CRC made right again: zlib or the unfilter must catch it. */
        uint32_t crc = (uint32_t)crc32(0, bad + idat + 4, (uInt)ilen + 4);
        unsigned char *c = bad + idat + 8 + ilen;
        c[0] = (unsigned char)(crc >> 24);
        c[1] = (unsigned char)(crc >> 16);
        c[2] = (unsigned char)(crc >> 8);
        c[3] = (unsigned char)crc;
        double rv = 0;
        int want = qc_png_variance_reference(bad, len, &rv);
        int got = qc_png_variance(bad, len, &v);
        assert_int_equal(got, want);
        if (want == 0) /* libpng decoded it: the same picture */
            assert_true(v > rv - 0.05 * rv - 0.25 && v < rv + 0.05 * rv + 0.25);
    }
    memcpy(bad, png, len);
    bad[1] = 'Q';
    assert_int_equal(qc_png_variance(bad, len, &v), GPUQ_EINVAL);
    memcpy(bad, png, len);
    bad[8 + 8 + 7] = 65; /* height 64 → 65: the data runs short */
    uint32_t crc = (uint32_t)crc32(0, bad + 12, 17);
    bad[8 + 8 + 13] = (unsigned char)(crc >> 24);
    bad[8 + 8 + 14] = (unsigned char)(crc >> 16);
    bad[8 + 8 + 15] = (unsigned char)(crc >> 8);
    bad[8 + 8 + 16] = (unsigned char)crc;
    assert_int_equal(qc_png_variance(bad, len, &v), GPUQ_EINVAL);
    free(bad);
    free(png);
}

/* Random damage inside the image data with each CRC made right again (so
 * the stream, its checksum or the filter bytes must catch it): the check
 * refuses exactly what libpng refuses, and what both decode scores alike. */
static void test_mutations_agree(void **state)
{
    (void)state;
    uint32_t seed = 12345;
    for (int f = -1; f <= 4; f++) {
        size_t len;
        unsigned char *png = make_png_ex(16, 12, f < 0 ? 0 : 2, f, 0, PIC_ART, &len);
        unsigned char *bad = malloc(len);
        size_t idat = 8 + 25;
        while (memcmp(png + idat + 4, "IDAT", 4) != 0)
            idat += 12 + ((size_t)png[idat] << 24 | (size_t)png[idat + 1] << 16 |
                          (size_t)png[idat + 2] << 8 | png[idat + 3]);
        size_t ilen = (size_t)png[idat] << 24 | (size_t)png[idat + 1] << 16 |
                      (size_t)png[idat + 2] << 8 | png[idat + 3];
        for (int k = 0; k < 300; k++) {
            memcpy(bad, png, len);
            for (int m = 0; m <= k % 3; m++) {
                seed = seed * 1103515245u + 12345u;
                bad[idat + 8 + (seed >> 8) % ilen] = (unsigned char)(seed >> 3);
            }
            uint32_t crc = (uint32_t)crc32(0, bad + idat + 4, (uInt)ilen + 4);
            unsigned char *c = bad + idat + 8 + ilen;
            c[0] = (unsigned char)(crc >> 24);
            c[1] = (unsigned char)(crc >> 16);
            c[2] = (unsigned char)(crc >> 8);
            c[3] = (unsigned char)crc;
            double got = -1, want = -2;
            int rg = qc_png_variance(bad, len, &got);
            int rw = qc_png_variance_reference(bad, len, &want);
            assert_int_equal(rg, rw);
            if (rw == 0 && (got < want - 0.05 * want - 0.25 || got > want + 0.05 * want + 0.25))
                fail_msg("mutation %d filter %d: direct %.4f, libpng %.4f", k, f, got, want);
        }
        free(bad);
        free(png);
    }
}

/* What runtimes write (8-bit RGB or grey, any filter) is decoded directly,
 * not by libpng; other formats and every damaged input are left to libpng. */
static void test_direct_path_taken(void **state)
{
    (void)state;
    size_t len;
    double v;
    for (int f = -1; f <= 4; f++) {
        void *rgb = make_png_ex(64, 64, 2, f, 0, PIC_ART, &len);
        assert_int_equal(qc_png_variance_direct(rgb, len, &v), 0);
        assert_int_equal(qc_png_variance_direct(rgb, len - 1, &v), GPUQ_EAGAIN);
        free(rgb);
        void *grey = make_png_ex(64, 64, 0, f, 0, PIC_ART, &len);
        assert_int_equal(qc_png_variance_direct(grey, len, &v), 0);
        free(grey);
    }
    /* Past 64 MiB of filtered data (4,800 × 4,700 RGB): libpng, row by row. */
    void *big = make_png_ex(4800, 4700, 2, 0, 0, PIC_BLACK, &len);
    assert_int_equal(qc_png_variance_direct(big, len, &v), GPUQ_EAGAIN);
    v = -1;
    assert_int_equal(qc_png_variance(big, len, &v), 0);
    assert_true(v < 1e-9);
    free(big);
    const int others[][2] = {{3, 0}, {6, 0}, {2, 1}, {0, 1}}; /* colour type, interlace */
    for (size_t i = 0; i < 4; i++) {
        void *png = make_png_ex(16, 16, others[i][0], 1, others[i][1], PIC_ART, &len);
        assert_int_equal(qc_png_variance_direct(png, len, &v), GPUQ_EAGAIN);
        free(png);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_variance),
        cmocka_unit_test(test_black_and_blank_fail),
        cmocka_unit_test(test_agrees_with_libpng),
        cmocka_unit_test(test_corrupt_refused),
        cmocka_unit_test(test_direct_path_taken),
        cmocka_unit_test(test_mutations_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
