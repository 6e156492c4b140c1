/* output.c: see output.h. */
#include "output.h"

#include <errno.h>
#include <jansson.h>
#include <png.h>
#include <poll.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

uint64_t rt_hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; s && *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
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

static void mem_write(png_structp png, png_bytep data, png_size_t n)
{
    struct rt_bytes *b = png_get_io_ptr(png);
    if (!reserve(b, b->len + n))
        png_error(png, "out of memory");
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void mem_flush(png_structp png)
{
    (void)png;
}

int rt_png_encode(struct rt_bytes *out, int w, int h, const unsigned char *px,
                  struct rt_png_how how)
{
    if (w < 1 || h < 1 || w > 1 << 14 || h > 1 << 14 || how.zlib_level < 0 ||
        how.zlib_level > 9)
        return -1;
    out->len = 0;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        return -1;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return -1;
    }
    png_set_write_fn(png, out, mem_write, mem_flush);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_compression_level(png, how.zlib_level);
    png_set_filter(png, PNG_FILTER_TYPE_BASE, how.sub_filter ? PNG_FILTER_SUB : PNG_FILTER_NONE);
    png_write_info(png, info);
    for (int y = 0; y < h; y++)
        png_write_row(png, (png_const_bytep)(px + (size_t)y * (size_t)w * 3));
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return 0;
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

/* Writes every byte of iov[0..n) to fd, waiting while a non-blocking fd is
 * full. 0, or -1 with errno set. */
static int write_all(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
                return -1;
            continue;
        }
        if (w < 0)
            return -1;
        for (; n > 0 && (size_t)w >= iov->iov_len; iov++, n--)
            w -= (ssize_t)iov->iov_len;
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

int rt_emit_inline(FILE *out, const char *id, const char *content_type, int64_t run_ms,
                   const void *data, size_t len)
{
    /* The line through jansson, as every other line the runtimes write. */
    json_t *msg = json_pack("{s:s, s:s, s:[{s:I, s:s}], s:I}", "type", "result", "id", id,
                            "outputs", "bytes", (json_int_t)len, "content_type", content_type,
                            "run_ms", (json_int_t)(run_ms < 0 ? 0 : run_ms));
    char *line = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    json_decref(msg);
    if (!line)
        return -1;
    /* The line and its bytes leave in one write, past stdio's buffer: through
     * it a 12 KB result left in three (the buffer's 4 KiB, the rest, the
     * tail), and each woke the agent's controller to read a part. */
    int rc = fflush(out) == 0 ? 0 : -1;
    if (rc == 0) {
        static char nl[] = "\n";
        struct iovec iov[3] = {{line, strlen(line)}, {nl, 1}, {(void *)data, len}};
        rc = write_all(fileno(out), iov, 3);
    }
    free(line);
    return rc;
}
