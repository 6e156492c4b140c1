/* qc.c: output quality check on PNG outputs (see qc.h).
 *
 * Every result a runtime returns is decoded here, so the decode is on each
 * job's path. libpng does the decoding (chunks, CRCs, inflate with its
 * Adler-32, unfiltering, interlacing), with its checks as it sets them by
 * default. What made the check costly before was not libpng's decoding but
 * what the simplified reader adds to it: asked for grey, it builds gamma
 * tables with pow for every image and converts every pixel through them.
 * So libpng is asked for no colour transform at all, only for the raw 8-bit
 * samples (palettes expanded to RGB, low bit depths expanded to 8, 16-bit
 * samples cut to their high byte), read a row at a time into one buffer,
 * and the luminance is computed here through tables built once per process.
 *
 * Luminance is libpng's PNG_FORMAT_GRAY: grey samples as they are; an RGB
 * colour converted to linear light, weighted (Rec. 709, as libpng) and
 * encoded back to 8-bit sRGB. Transparency (an alpha channel, or tRNS made
 * into one) is composed onto black in linear light. */
#include "agent/qc.h"

#include <math.h>
#include <png.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

#define QC_MAX_PIXELS (64u << 20)

/* Per channel, an 8-bit sRGB sample's linear value (16-bit) already
 * multiplied by libpng's Rec. 709 weight (in 1/32768; the three sum to
 * 32768), so a pixel's linear luminance is three look-ups and two adds; and
 * linear luminance (16-bit) back to 8-bit sRGB. */
static uint32_t lin_r[256], lin_g[256], lin_b[256];
static uint16_t lin[256];
static uint8_t to_srgb[65536];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* libpng takes sRGB as a plain power of 2.2 (PNG_GAMMA_sRGB), not the
 * piecewise sRGB curve: the same here, so scores match libpng's grey. */
static void build_tables(void)
{
    for (int i = 0; i < 256; i++) {
        lin[i] = (uint16_t)lround(pow(i / 255.0, 2.2) * 65535.0);
        lin_r[i] = 6968u * lin[i];
        lin_g[i] = 23434u * lin[i];
        lin_b[i] = 2366u * lin[i];
    }
    for (int i = 0; i < 65536; i++)
        to_srgb[i] = (uint8_t)lround(pow(i / 65535.0, 1 / 2.2) * 255.0);
}

static inline unsigned luma_rgb(unsigned r, unsigned g, unsigned b)
{
    return to_srgb[(lin_r[r] + lin_g[g] + lin_b[b] + 16384u) >> 15];
}

/* A linear luminance (16-bit) times alpha/255, back to 8-bit sRGB. */
static inline unsigned over_black(uint32_t linear, unsigned a)
{
    return to_srgb[(linear * a + 127u) / 255u];
}

/* libpng reads from the output held in memory. */
struct src {
    const unsigned char *p;
    size_t len, off;
};

static void on_read(png_structp png, png_bytep out, png_size_t n)
{
    struct src *s = png_get_io_ptr(png);
    if (n > s->len - s->off)
        png_error(png, "truncated");
    memcpy(out, s->p + s->off, n);
    s->off += n;
}

/* Errors end the decode (the caller refuses the output); neither errors nor
 * warnings are printed: a bad output is reported once, by the agent. */
static void on_error(png_structp png, png_const_charp msg)
{
    (void)msg;
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

/* Sums one row's luminance; channels is 1..4 as libpng delivers them. */
static void sum_row(const unsigned char *p, uint32_t w, int channels, uint64_t *sum,
                    uint64_t *sum2)
{
    uint64_t s = 0, s2 = 0;
    switch (channels) {
    case 1:
        for (uint32_t x = 0; x < w; x++) {
            s += p[x];
            s2 += (uint32_t)p[x] * p[x];
        }
        break;
    case 2:
        for (uint32_t x = 0; x < w; x++, p += 2) {
            unsigned v = over_black(lin[p[0]], p[1]);
            s += v;
            s2 += v * v;
        }
        break;
    case 3:
        for (uint32_t x = 0; x < w; x++, p += 3) {
            unsigned v = luma_rgb(p[0], p[1], p[2]);
            s += v;
            s2 += v * v;
        }
        break;
    default:
        for (uint32_t x = 0; x < w; x++, p += 4) {
            uint32_t l = (lin_r[p[0]] + lin_g[p[1]] + lin_b[p[2]] + 16384u) >> 15;
            unsigned v = over_black(l, p[3]);
            s += v;
            s2 += v * v;
        }
        break;
    }
    *sum += s;
    *sum2 += s2;
}

/* The decode proper, apart so that nothing it changes after setjmp lives in
 * its frame: the buffer goes through *buf for the caller to free. */
static int decode(png_structp png, png_infop info, unsigned char **buf, double *variance)
{
    if (setjmp(png_jmpbuf(png)))
        return GPUQ_EINVAL;
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if (w == 0 || h == 0 || (uint64_t)w * h > QC_MAX_PIXELS)
        return GPUQ_EINVAL;
    int ctype = png_get_color_type(png, info);
    if (ctype == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_valid(png, info, PNG_INFO_tRNS))
        png_set_tRNS_to_alpha(png);
    png_set_strip_16(png);
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int channels = png_get_channels(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    if (channels < 1 || channels > 4 || rowbytes != (size_t)w * (size_t)channels)
        return GPUQ_EINVAL;
    /* Not interlaced: one row's buffer, reused. Interlaced: the passes fill
     * the whole image in place, so it is held whole. */
    size_t rows = passes > 1 ? h : 1;
    *buf = malloc(rowbytes * rows);
    if (!*buf)
        return GPUQ_EINVAL;
    pthread_once(&tables_once, build_tables);
    uint64_t sum = 0, sum2 = 0;
    if (passes > 1) {
        for (int p = 0; p < passes; p++)
            for (png_uint_32 y = 0; y < h; y++)
                png_read_row(png, *buf + (size_t)y * rowbytes, NULL);
        for (png_uint_32 y = 0; y < h; y++)
            sum_row(*buf + (size_t)y * rowbytes, w, channels, &sum, &sum2);
    } else {
        for (png_uint_32 y = 0; y < h; y++) {
            png_read_row(png, *buf, NULL);
            sum_row(*buf, w, channels, &sum, &sum2);
        }
    }
    /* The rest of the stream and the chunks after it: zlib's Adler-32 and
     * every CRC up to IEND are checked, a truncated file refused. */
    png_read_end(png, NULL);
    double n = (double)w * (double)h;
    double mean = (double)sum / n;
    double v = (double)sum2 / n - mean * mean;
    *variance = v < 0 ? 0 : v;
    return 0;
}

int qc_png_variance(const void *data, size_t len, double *variance)
{
    if (len < 8 || png_sig_cmp((png_const_bytep)data, 0, 8) != 0)
        return GPUQ_EINVAL;
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, on_error, on_warning);
    if (!png)
        return GPUQ_EINVAL;
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return GPUQ_EINVAL;
    }
    struct src s = {data, len, 0};
    png_set_read_fn(png, &s, on_read);
    /* libpng reads some damage as "benign" and by default only warns:
     * image data left over after the last row (an IHDR that claims fewer
     * rows than were written), a zlib check failing only once the last row
     * is out. An output damaged so is refused like any other. */
    png_set_benign_errors(png, 0);
    unsigned char *buf = NULL;
    int rc = decode(png, info, &buf, variance);
    free(buf);
    png_destroy_read_struct(&png, &info, NULL);
    return rc;
}
