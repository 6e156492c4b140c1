/* buf.h: a growable byte buffer, always NUL-terminated after its data.
 * Invariant: data is NULL and len == cap == 0, or len < cap and data[len] == 0.
 * The buffer owns data; buf_fini frees it, buf_steal hands it to the caller. */
#ifndef GPUQ_BUF_H
#define GPUQ_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct buf {
    char *data;
    size_t len;
    size_t cap;
};

void buf_init(struct buf *b);
void buf_fini(struct buf *b);
void buf_reset(struct buf *b);
void buf_reserve(struct buf *b, size_t extra);
void buf_append(struct buf *b, const void *p, size_t n);
void buf_puts(struct buf *b, const char *s);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_vprintf(struct buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* fmt_fixed writes what printf("%.*f", prec, x) writes for prec 0..3 (the
 * exact binary value rounded to nearest, ties to even), without printf, and
 * returns its length (no NUL); 0 where it leaves it to printf (prec out of
 * range, x not finite or |x| >= 1e12). printf's float path was most of the
 * cost of the placement explanation the head writes for every job. */
#define FMT_FIXED_MAX 48
size_t fmt_fixed(char out[FMT_FIXED_MAX], double x, int prec);
/* buf_put_fixed appends x as printf("%.*f", prec, x) would. */
void buf_put_fixed(struct buf *b, double x, int prec);
/* buf_put_int appends v in decimal (what printf's %lld writes), without
 * printf: metrics scrapes and job answers write many integers. */
void buf_put_int(struct buf *b, long long v);
/* buf_steal returns the data (caller frees) and leaves the buffer empty. */
char *buf_steal(struct buf *b);

#endif
