/* output.c: see output.h. */
#include "output.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

uint64_t rt_hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; s && *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Writes 8-bit RGB rows with fast settings: compression level 1 and the Sub
 * filter only (libpng's defaults try every filter on every row at level 6,
 * which costs more than drawing the picture). */
static int png_write_rgb(const char *path, int w, int h, const unsigned char *px)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        fclose(f);
        return -1;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        return -1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_compression_level(png, 1);
    png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_SUB);
    png_write_info(png, info);
    for (int y = 0; y < h; y++)
        png_write_row(png, (png_const_bytep)(px + (size_t)y * (size_t)w * 3));
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return fclose(f) == 0 ? 0 : -1;
}

/* Makes DIR/ID.png and DIR/.ID.png.tmp from an id (made filename-safe). */
static int out_paths(const char *dir, const char *id, char *path, size_t size, char *tmp,
                     size_t tmpsize)
{
    char safe[RT_OUTPUT_ID_MAX];
    size_t k = 0;
    for (size_t i = 0; id[i] && k + 1 < sizeof safe; i++) {
        char c = id[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_' || (c == '.' && k > 0);
        safe[k++] = ok ? c : '_';
    }
    safe[k] = '\0';
    if ((size_t)snprintf(path, size, "%s/%s.png", dir, safe) >= size ||
        (size_t)snprintf(tmp, tmpsize, "%s/.%s.png.tmp", dir, safe) >= tmpsize) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

int rt_write_png(const char *dir, const char *id, int w, int h, const unsigned char *px,
                 char *path, size_t size)
{
    char tmp[4096];
    if (out_paths(dir, id, path, size, tmp, sizeof tmp) != 0)
        return -1;
    if (png_write_rgb(tmp, w, h, px) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

int rt_write_bytes(const char *dir, const char *id, const void *data, size_t len, char *path,
                   size_t size)
{
    char tmp[4096];
    if (out_paths(dir, id, path, size, tmp, sizeof tmp) != 0)
        return -1;
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(data, 1, len, f) == len;
    if (f && fclose(f) != 0)
        ok = false;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

static bool reserve(struct rt_bytes *b, size_t n)
{
    if (n <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < n)
        cap *= 2;
    unsigned char *p = realloc(b->p, cap);
    if (!p)
        return false;
    b->p = p;
    b->cap = cap;
    return true;
}

static void be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Closes the chunk whose length field is at start: its length and CRC. */
static void end_chunk(struct rt_bytes *b, size_t start)
{
    size_t n = b->len - start - 8;
    be32(b->p + start, (uint32_t)n);
    uLong crc = crc32(0L, b->p + start + 4, (uInt)(n + 4));
    be32(b->p + b->len, (uint32_t)crc);
    b->len += 4;
}

#define STORED_MAX 65535u /* a stored deflate block's largest payload */

int rt_png_stored(struct rt_bytes *out, int w, int h, const unsigned char *px)
{
    if (w < 1 || h < 1 || w > 1 << 14 || h > 1 << 14)
        return -1;
    size_t row = (size_t)w * 3, raw = (size_t)h * (row + 1);
    size_t blocks = (raw + STORED_MAX - 1) / STORED_MAX;
    /* signature, IHDR (25), IDAT framing (12) + zlib (2 + 5 a block + 4), IEND (12) */
    if (!reserve(out, 8 + 25 + 12 + 2 + raw + 5 * blocks + 4 + 12))
        return -1;
    unsigned char *p = out->p;
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    memcpy(p, sig, 8);
    out->len = 8;
    memcpy(p + out->len + 4, "IHDR", 4);
    be32(p + out->len + 8, (uint32_t)w);
    be32(p + out->len + 12, (uint32_t)h);
    p[out->len + 16] = 8; /* depth */
    p[out->len + 17] = 2; /* RGB */
    p[out->len + 18] = p[out->len + 19] = p[out->len + 20] = 0;
    out->len += 21;
    end_chunk(out, 8);
    size_t idat = out->len;
    memcpy(p + idat + 4, "IDAT", 4);
    out->len += 8;
    p[out->len++] = 0x78; /* zlib: deflate, 32 KiB window, no dictionary */
    p[out->len++] = 0x01; /* (0x7801 % 31 == 0) */
    uLong adler = adler32(0L, Z_NULL, 0);
    size_t left = raw, in_block = 0;
    static const unsigned char filter_none = 0;
    /* Rows (a filter byte, then the pixels) cut into blocks of STORED_MAX. */
    for (int y = 0; y < h; y++) {
        const unsigned char *src[2] = {&filter_none, px + (size_t)y * row};
        size_t len[2] = {1, row};
        for (int part = 0; part < 2; part++) {
            const unsigned char *s = src[part];
            size_t n = len[part];
            while (n > 0) {
                if (in_block == 0) {
                    size_t blen = left < STORED_MAX ? left : STORED_MAX;
                    p[out->len++] = left == blen; /* BFINAL on the last, BTYPE 00 */
                    p[out->len++] = (unsigned char)(blen & 0xff);
                    p[out->len++] = (unsigned char)(blen >> 8);
                    p[out->len++] = (unsigned char)(~blen & 0xff);
                    p[out->len++] = (unsigned char)((~blen >> 8) & 0xff);
                    in_block = blen;
                }
                size_t k = n < in_block ? n : in_block;
                memcpy(p + out->len, s, k);
                adler = adler32(adler, s, (uInt)k);
                out->len += k;
                s += k;
                n -= k;
                in_block -= k;
                left -= k;
            }
        }
    }
    be32(p + out->len, (uint32_t)adler);
    out->len += 4;
    end_chunk(out, idat);
    size_t iend = out->len;
    memcpy(p + iend + 4, "IEND", 4);
    out->len += 8;
    end_chunk(out, iend);
    return 0;
}

size_t rt_inline_max(void)
{
    const char *v = getenv("GPUQ_RESULT_INLINE_MAX");
    if (!v || !*v)
        return 0;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    if (*end || v[0] == '-')
        return 0;
    return n > (64ull << 20) ? (size_t)64 << 20 : (size_t)n;
}

/* Appends s as a JSON string (quotes included) to f. */
static void put_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

int rt_emit_inline(FILE *out, const char *id, const char *content_type, int64_t run_ms,
                   const void *data, size_t len)
{
    fputs("{\"type\":\"result\",\"id\":", out);
    put_json_str(out, id);
    fprintf(out, ",\"outputs\":[{\"bytes\":%zu,\"content_type\":", len);
    put_json_str(out, content_type);
    fprintf(out, "}],\"run_ms\":%lld}\n", (long long)(run_ms < 0 ? 0 : run_ms));
    fwrite(data, 1, len, out);
    return fflush(out) == 0 && !ferror(out) ? 0 : -1;
}
