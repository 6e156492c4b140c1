/* test_rt_output.c: what the shipped runtimes hand the agent
 * (runtimes/common/output.c) — the one PNG encoder, in each of its settings,
 * decodes with libpng to exactly the pixels given (one deflate block or
 * several) and uses the row filter it was asked for; the file writer leaves
 * what it was given; an inline result is a line the agent parses followed by
 * exactly its bytes. */
#include <png.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "../../../runtimes/common/output.h"
#include "agent/qc.h"
#include "agent/rtproto.h"

static unsigned char *noise(int w, int h, uint32_t seed)
{
    size_t n = (size_t)w * (size_t)h * 3;
    unsigned char *px = malloc(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        px[i] = (unsigned char)(seed >> 24);
    }
    return px;
}

/* Decodes an RGB PNG with libpng; asserts its size and pixels. */
static void assert_png_pixels(const void *data, size_t len, int w, int h,
                              const unsigned char *px)
{
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    assert_true(png_image_begin_read_from_memory(&img, data, len));
    assert_int_equal(img.width, w);
    assert_int_equal(img.height, h);
    img.format = PNG_FORMAT_RGB;
    unsigned char *out = malloc(PNG_IMAGE_SIZE(img));
    assert_true(png_image_finish_read(&img, NULL, out, 0, NULL));
    assert_memory_equal(out, px, (size_t)w * (size_t)h * 3);
    free(out);
}

/* Smooth horizontal and vertical ramps: what a cheap deflate shrinks well. */
static unsigned char *ramps(int w, int h)
{
    unsigned char *px = malloc((size_t)w * (size_t)h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            unsigned char *p = px + ((size_t)y * (size_t)w + (size_t)x) * 3;
            p[0] = (unsigned char)(x * 255 / w);
            p[1] = (unsigned char)(y * 255 / h);
            p[2] = (unsigned char)((x + y) / 4);
        }
    return px;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Inflates the PNG's IDAT chunks and asserts that every one of its h rows
 * (of 1 + w*3 bytes) starts with the filter type `filter`. */
static void assert_row_filters(const unsigned char *png, size_t len, int w, int h, int filter)
{
    size_t raw_len = (size_t)h * (1 + (size_t)w * 3);
    unsigned char *raw = malloc(raw_len);
    z_stream z;
    memset(&z, 0, sizeof z);
    assert_int_equal(inflateInit(&z), Z_OK);
    z.next_out = raw;
    z.avail_out = (uInt)raw_len;
    int zrc = Z_OK;
    for (size_t off = 8; off + 12 <= len;) { /* after the signature: chunks */
        uint32_t n = be32(png + off);
        assert_true(off + 12 + n <= len);
        if (memcmp(png + off + 4, "IDAT", 4) == 0 && zrc == Z_OK) {
            z.next_in = (unsigned char *)(png + off + 8);
            z.avail_in = n;
            zrc = inflate(&z, Z_NO_FLUSH);
            assert_true(zrc == Z_OK || zrc == Z_STREAM_END);
        }
        off += 12 + n;
    }
    assert_int_equal(zrc, Z_STREAM_END);
    assert_int_equal(z.total_out, raw_len);
    inflateEnd(&z);
    for (int y = 0; y < h; y++) {
        assert_int_equal(raw[(size_t)y * (1 + (size_t)w * 3)], filter);
    }
    free(raw);
}

static void test_png_decodes_to_the_same_pixels(void **state)
{
    (void)state;
    /* 256x256: 196,864 raw bytes, four stored blocks; 1x1 the smallest. */
    const int sizes[][2] = {{1, 1}, {64, 64}, {16, 256}, {256, 256}, {300, 7}};
    const struct rt_png_how hows[] = {RT_PNG_STORED, RT_PNG_FAST};
    struct rt_bytes b = {0};
    for (size_t k = 0; k < sizeof hows / sizeof hows[0]; k++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            int w = sizes[i][0], h = sizes[i][1];
            unsigned char *px = i % 2 ? noise(w, h, (uint32_t)i + 1) : ramps(w, h);
            assert_int_equal(rt_png_encode(&b, w, h, px, hows[k]), 0); /* b is reused */
            assert_png_pixels(b.p, b.len, w, h, px);
            /* 1: Sub; a one-pixel-wide row has nothing to its left, and
             * libpng writes it unfiltered (0: None), which is the same. */
            assert_row_filters(b.p, b.len, w, h, hows[k].sub_filter && w > 1 ? 1 : 0);
            double var;
            assert_int_equal(qc_png_variance(b.p, b.len, &var), 0); /* the agent's check */
            free(px);
        }
    free(b.p);
}

static void test_png_settings_and_sizes(void **state)
{
    (void)state;
    struct rt_bytes b = {0};
    unsigned char *px = ramps(256, 256);
    /* Stored: never smaller than the raw rows; fast: a fraction of them. */
    size_t raw = 256 * (1 + 256 * 3);
    assert_int_equal(rt_png_encode(&b, 256, 256, px, RT_PNG_STORED), 0);
    assert_true(b.len > raw);
    assert_int_equal(rt_png_encode(&b, 256, 256, px, RT_PNG_FAST), 0);
    assert_true(b.len < raw / 4);
    assert_int_equal(rt_png_encode(&b, 0, 5, px, RT_PNG_FAST), -1);
    assert_int_equal(rt_png_encode(&b, 5, (1 << 14) + 1, px, RT_PNG_FAST), -1);
    assert_int_equal(rt_png_encode(&b, 5, 5, px, (struct rt_png_how){.zlib_level = 10}), -1);
    assert_int_equal(rt_png_encode(&b, 5, 5, px, (struct rt_png_how){.zlib_level = -1}), -1);
    free(px);
    free(b.p);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *d = malloc((size_t)n + 1);
    assert_int_equal(fread(d, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return d;
}

static void test_files_hold_what_was_written(void **state)
{
    (void)state;
    char dir[] = "/tmp/gpuq-rt-output.XXXXXX";
    assert_non_null(mkdtemp(dir));
    unsigned char *px = noise(33, 20, 9);
    char path[4200];
    size_t len;
    struct rt_bytes b = {0};
    assert_int_equal(rt_png_encode(&b, 33, 20, px, RT_PNG_FAST), 0);
    assert_int_equal(rt_write_bytes(dir, "7.1", b.p, b.len, path, sizeof path), 0);
    char *d = slurp(path, &len);
    assert_int_equal(len, b.len);
    assert_png_pixels(d, len, 33, 20, px);
    free(d);
    free(b.p);
    unlink(path);
    const char bytes[] = "not\na picture\0at all";
    assert_int_equal(rt_write_bytes(dir, "../8.1", bytes, sizeof bytes, path, sizeof path), 0);
    assert_non_null(strstr(path, "/_._8.1.png")); /* the id made filename-safe */
    d = slurp(path, &len);
    assert_int_equal(len, sizeof bytes);
    assert_memory_equal(d, bytes, sizeof bytes);
    free(d);
    unlink(path);
    free(px);
    assert_int_equal(rmdir(dir), 0);
}

static void test_inline_result_is_a_line_then_its_bytes(void **state)
{
    (void)state;
    FILE *f = tmpfile();
    const char bytes[] = "\n\x89PNG\n\0tail";
    assert_int_equal(rt_emit_inline(f, "4\"2.1", "image/png", 12, bytes, sizeof bytes), 0);
    rewind(f);
    char buf[512];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    char *nl = memchr(buf, '\n', n);
    assert_non_null(nl);
    struct rt_msg m;
    char err[160];
    assert_int_equal(rt_parse(buf, (size_t)(nl - buf), &m, err, sizeof err), 0);
    assert_int_equal(m.type, RT_RESULT);
    assert_string_equal(m.id, "4\"2.1");
    assert_int_equal(m.inline_bytes, sizeof bytes);
    assert_int_equal(m.run_ms, 12);
    assert_int_equal(n - (size_t)(nl + 1 - buf), sizeof bytes);
    assert_memory_equal(nl + 1, bytes, sizeof bytes);
}

/* A result larger than stdio's buffer leaves in one write, so the agent's
 * controller wakes once to read it, not once a part. A packet socket keeps
 * each write apart: the first packet holds the whole message, line and
 * bytes, and some stdio output written before it stays in its own. */
static void test_inline_result_leaves_in_one_write(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    FILE *f = fdopen(sv[0], "w");
    assert_non_null(f);
    size_t len = 12432; /* the size of the simulated runtime's default PNG */
    unsigned char *bytes = malloc(len);
    assert_non_null(bytes);
    for (size_t i = 0; i < len; i++)
        bytes[i] = (unsigned char)(i * 7);
    fputs("{\"type\":\"progress\"}\n", f); /* buffered by stdio, not yet written */
    assert_int_equal(rt_emit_inline(f, "9.1", "image/png", 3, bytes, len), 0);
    static char pkt[65536];
    ssize_t n = recv(sv[1], pkt, sizeof pkt, 0);
    assert_int_equal(n, (ssize_t)strlen("{\"type\":\"progress\"}\n"));
    n = recv(sv[1], pkt, sizeof pkt, 0);
    assert_true(n > (ssize_t)len);
    char *nl = memchr(pkt, '\n', (size_t)n);
    assert_non_null(nl);
    struct rt_msg m;
    char err[160];
    assert_int_equal(rt_parse(pkt, (size_t)(nl - pkt), &m, err, sizeof err), 0);
    assert_int_equal(m.inline_bytes, len);
    assert_int_equal((size_t)n - (size_t)(nl + 1 - pkt), len);
    assert_memory_equal(nl + 1, bytes, len);
    fclose(f);
    close(sv[1]);
    free(bytes);
}

static void test_inline_offer_from_the_environment(void **state)
{
    (void)state;
    unsetenv("GPUQ_RESULT_INLINE_MAX");
    assert_int_equal(rt_inline_max(), 0);
    setenv("GPUQ_RESULT_INLINE_MAX", "65536", 1);
    assert_int_equal(rt_inline_max(), 65536);
    setenv("GPUQ_RESULT_INLINE_MAX", "-5", 1);
    assert_int_equal(rt_inline_max(), 0);
    setenv("GPUQ_RESULT_INLINE_MAX", "12k", 1);
    assert_int_equal(rt_inline_max(), 0);
    unsetenv("GPUQ_RESULT_INLINE_MAX");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_png_decodes_to_the_same_pixels),
        cmocka_unit_test(test_png_settings_and_sizes),
        cmocka_unit_test(test_files_hold_what_was_written),
        cmocka_unit_test(test_inline_result_is_a_line_then_its_bytes),
        cmocka_unit_test(test_inline_result_leaves_in_one_write),
        cmocka_unit_test(test_inline_offer_from_the_environment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
