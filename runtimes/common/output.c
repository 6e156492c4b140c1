/* output.c: see output.h. */
#include "output.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

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

int rt_write_png(const char *dir, const char *id, int w, int h, const unsigned char *px,
                 char *path, size_t size)
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
    char tmp[4096];
    if ((size_t)snprintf(path, size, "%s/%s.png", dir, safe) >= size ||
        (size_t)snprintf(tmp, sizeof tmp, "%s/.%s.png.tmp", dir, safe) >= sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (png_write_rgb(tmp, w, h, px) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        errno = e;
        return -1;
    }
    return 0;
}
