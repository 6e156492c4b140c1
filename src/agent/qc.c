/* qc.c: output quality check on PNG outputs (see qc.h).
 *
 * Every result a runtime returns is decoded here, so the decode is on each
 * job's path. libpng's simplified reader fed zlib one row at a time: with
 * less than 258 bytes of room per call, inflate never takes its fast loop,
 * and each image also paid libpng's set-up (structures, gamma tables built
 * with pow). That was three quarters of the agent's instructions per job.
 *
 * So the images runtimes write (8-bit, not interlaced, grey or RGB, without
 * transparency) are decoded here directly: the chunks are walked with their
 * CRCs checked, every IDAT goes through one inflate into a buffer that holds
 * the whole filtered image (inflate's fast loop), the rows are unfiltered in
 * place and the luminance summed in integers. Anything else — other formats
 * (palette, alpha, 16-bit, interlaced), and every input this decoder finds
 * wrong in any way — goes to libpng exactly as before, so what libpng
 * refuses (truncated, corrupt, not a PNG) is still refused, by libpng itself.
 *
 * Luminance matches libpng's PNG_FORMAT_GRAY: grey samples as they are; an
 * RGB colour converted to linear light, weighted (Rec. 709, as libpng) and
 * encoded back to 8-bit sRGB, through tables built once. */
#include "agent/qc.h"

#include <math.h>
#include <png.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/err.h"

#define QC_MAX_PIXELS (64u << 20)
/* The direct decode holds the whole filtered image: past this (an RGB
 * picture of about 22 megapixels) libpng's row-by-row read is used, so the
 * check's memory stays near what it was. */
#define QC_DIRECT_MAX_BYTES ((size_t)64 << 20)

/* The reference path: libpng's simplified reader (any PNG it can read). */
static int variance_libpng(const void *data, size_t len, double *variance)
{
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&img, data, len))
        return GPUQ_EINVAL;
    if ((uint64_t)img.width * img.height > QC_MAX_PIXELS || img.width == 0 || img.height == 0) {
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

/* Per channel, an 8-bit sRGB sample's linear value (16-bit) already
 * multiplied by libpng's Rec. 709 weight (in 1/32768; the three sum to
 * 32768), so a pixel's linear luminance is three look-ups and two adds; and
 * linear luminance (16-bit) back to 8-bit sRGB. */
static uint32_t lin_r[256], lin_g[256], lin_b[256];
static uint8_t to_srgb[65536];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* libpng takes sRGB as a plain power of 2.2 (PNG_GAMMA_sRGB), not the
 * piecewise sRGB curve: the same here, so the two agree. */
static double srgb_decode(double v)
{
    return pow(v, 2.2);
}

static double srgb_encode(double v)
{
    return pow(v, 1 / 2.2);
}

static void build_tables(void)
{
    for (int i = 0; i < 256; i++) {
        uint32_t lin = (uint32_t)lround(srgb_decode(i / 255.0) * 65535.0);
        lin_r[i] = 6968u * lin;
        lin_g[i] = 23434u * lin;
        lin_b[i] = 2366u * lin;
    }
    for (int i = 0; i < 65536; i++)
        to_srgb[i] = (uint8_t)lround(srgb_encode(i / 65535.0) * 255.0);
}

static inline unsigned luma_rgb(unsigned r, unsigned g, unsigned b)
{
    return to_srgb[(lin_r[r] + lin_g[g] + lin_b[b] + 16384u) >> 15];
}

static inline uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline unsigned paeth(unsigned a, unsigned b, unsigned c)
{
    int p = (int)a + (int)b - (int)c;
    int pa = abs(p - (int)a), pb = abs(p - (int)b), pc = abs(p - (int)c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* Undoes one row's filter in place; prev is the row above (unfiltered) or
 * NULL for the first. false on an unknown filter type. */
static bool unfilter(unsigned ft, unsigned char *row, const unsigned char *prev, size_t n,
                     size_t bpp)
{
    switch (ft) {
    case 0:
        return true;
    case 1:
        for (size_t i = bpp; i < n; i++)
            row[i] = (unsigned char)(row[i] + row[i - bpp]);
        return true;
    case 2:
        if (prev)
            for (size_t i = 0; i < n; i++)
                row[i] = (unsigned char)(row[i] + prev[i]);
        return true;
    case 3:
        for (size_t i = 0; i < n; i++) {
            unsigned a = i >= bpp ? row[i - bpp] : 0, b = prev ? prev[i] : 0;
            row[i] = (unsigned char)(row[i] + ((a + b) >> 1));
        }
        return true;
    case 4:
        for (size_t i = 0; i < n; i++) {
            unsigned a = i >= bpp ? row[i - bpp] : 0, b = prev ? prev[i] : 0;
            unsigned c = prev && i >= bpp ? prev[i - bpp] : 0;
            row[i] = (unsigned char)(row[i] + paeth(a, b, c));
        }
        return true;
    default:
        return false;
    }
}

enum { FAST_OK, FAST_DEFER };

/* The direct decode. FAST_DEFER for anything it does not take: the caller
 * then asks libpng, which decodes or refuses it as it always has. */
static int variance_fast(const unsigned char *d, size_t len, double *variance)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len < 8 + 25 || memcmp(d, sig, 8) != 0)
        return FAST_DEFER;
    uint32_t w = 0, h = 0;
    unsigned ctype = 0, channels = 0;
    unsigned char *img = NULL;
    size_t rowbytes = 0, need = 0;
    z_stream zs;
    bool z_open = false, z_end = false, seen_idat = false, seen_iend = false;
    int verdict = FAST_DEFER;
    size_t off = 8;
    bool first = true;
    while (!seen_iend) {
        if (len - off < 12)
            goto out;
        uint32_t clen = be32(d + off);
        const unsigned char *type = d + off + 4, *body = d + off + 8;
        if (clen > len - off - 12)
            goto out;
        bool critical = !(type[0] & 0x20);
        if (critical && (uint32_t)crc32(0, type, clen + 4) != be32(body + clen))
            goto out;
        if (first != (memcmp(type, "IHDR", 4) == 0))
            goto out;
        if (first) {
            if (clen != 13)
                goto out;
            w = be32(body);
            h = be32(body + 4);
            ctype = body[9];
            channels = ctype == 0 ? 1 : ctype == 2 ? 3 : 0;
            if (w == 0 || h == 0 || w > 0x7fffffff || h > 0x7fffffff ||
                (uint64_t)w * h > QC_MAX_PIXELS || body[8] != 8 || channels == 0 ||
                body[10] != 0 || body[11] != 0 || body[12] != 0)
                goto out; /* other formats (and wrong headers) are libpng's */
            rowbytes = (size_t)w * channels;
            need = (rowbytes + 1) * h;
            if (need > QC_DIRECT_MAX_BYTES)
                goto out; /* libpng streams it row by row instead */
            first = false;
        } else if (memcmp(type, "tRNS", 4) == 0) {
            goto out; /* transparency: libpng composes it */
        } else if (memcmp(type, "IDAT", 4) == 0) {
            if (z_end)
                goto out;
            if (!z_open) {
                img = malloc(need);
                if (!img)
                    goto out;
                memset(&zs, 0, sizeof zs);
                if (inflateInit(&zs) != Z_OK)
                    goto out;
                z_open = true;
                zs.next_out = img;
                zs.avail_out = (uInt)need;
            }
            seen_idat = true;
            zs.next_in = (Bytef *)body;
            zs.avail_in = clen;
            while (zs.avail_in > 0) {
                int zr = inflate(&zs, Z_NO_FLUSH);
                if (zr == Z_STREAM_END) {
                    z_end = true;
                    break;
                }
                if (zr != Z_OK)
                    goto out; /* corrupt or too much data */
            }
            if (z_end && zs.avail_in > 0)
                goto out; /* data past the stream's end */
        } else if (memcmp(type, "IEND", 4) == 0) {
            seen_iend = true;
        } else if (critical) {
            goto out; /* a critical chunk we do not know */
        } else if (seen_idat && !z_end) {
            goto out; /* IDATs must be consecutive */
        }
        off += 12 + (size_t)clen;
    }
    if (!z_end || zs.avail_out != 0)
        goto out;
    pthread_once(&tables_once, build_tables);
    uint64_t sum = 0, sum2 = 0;
    unsigned char *prev = NULL;
    for (uint32_t y = 0; y < h; y++) {
        unsigned char *row = img + (size_t)y * (rowbytes + 1);
        if (!unfilter(row[0], row + 1, prev, rowbytes, channels))
            goto out;
        prev = row + 1;
        const unsigned char *p = row + 1;
        if (ctype == 0) {
            for (uint32_t x = 0; x < w; x++) {
                sum += p[x];
                sum2 += (uint32_t)p[x] * p[x];
            }
        } else {
            for (uint32_t x = 0; x < w; x++, p += 3) {
                unsigned v = luma_rgb(p[0], p[1], p[2]);
                sum += v;
                sum2 += v * v;
            }
        }
    }
    double n = (double)w * (double)h;
    double mean = (double)sum / n;
    double v = (double)sum2 / n - mean * mean;
    *variance = v < 0 ? 0 : v;
    verdict = FAST_OK;
out:
    if (z_open)
        inflateEnd(&zs);
    free(img);
    return verdict;
}

int qc_png_variance(const void *data, size_t len, double *variance)
{
    if (variance_fast(data, len, variance) == FAST_OK)
        return 0;
    return variance_libpng(data, len, variance);
}

int qc_png_variance_direct(const void *data, size_t len, double *variance)
{
    return variance_fast(data, len, variance) == FAST_OK ? 0 : GPUQ_EAGAIN;
}

int qc_png_variance_reference(const void *data, size_t len, double *variance)
{
    return variance_libpng(data, len, variance);
}
