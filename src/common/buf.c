/* buf.c: growable byte buffer. */
#include "buf.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

void buf_init(struct buf *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void buf_fini(struct buf *b)
{
    free(b->data);
    buf_init(b);
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void buf_reserve(struct buf *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    b->data = xrealloc(b->data, cap);
    b->cap = cap;
}

void buf_append(struct buf *b, const void *p, size_t n)
{
    buf_reserve(b, n);
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void buf_puts(struct buf *b, const char *s)
{
    buf_append(b, s, strlen(s));
}

/* One vsnprintf when the result fits the room already there (most calls, on
 * a buffer that has grown once), a second only when the buffer must grow:
 * measuring first doubled the cost of every formatted line. */
void buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    if (b->cap < b->len + 64)
        buf_reserve(b, 64);
    size_t room = b->cap - b->len;
    int n = vsnprintf(b->data + b->len, room, fmt, ap);
    if (n >= 0 && (size_t)n >= room) {
        buf_reserve(b, (size_t)n);
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
    }
    va_end(ap2);
    if (n < 0) {
        b->data[b->len] = '\0';
        return;
    }
    b->len += (size_t)n;
}

void buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    buf_vprintf(b, fmt, ap);
    va_end(ap);
}

char *buf_steal(struct buf *b)
{
    char *p = b->data;
    if (!p)
        p = xstrdup("");
    buf_init(b);
    return p;
}

size_t fmt_fixed(char out[FMT_FIXED_MAX], double x, int prec)
{
    static const double scale[] = {1, 10, 100, 1000};
    static const uint64_t pow10[] = {1, 10, 100, 1000};
    /* Below 1e12, |x| * 1000 < 2^50: the product's fraction and 0.5 are
     * multiples of its ulp, so rounding the product can never cross the half
     * (rounding is monotonic), and the exact rounding error (fma) decides
     * only an exact tie in the product: printf's nearest, ties to even, on
     * the exact binary value. */
    if (!isfinite(x) || fabs(x) >= 1e12 || prec < 0 || prec > 3)
        return 0;
    double a = fabs(x);
    double p = a * scale[prec];
    double err = fma(a, scale[prec], -p);
    double fl = floor(p);
    double f = p - fl;
    uint64_t q = (uint64_t)fl;
    if (f > 0.5 || (f == 0.5 && (err > 0 || (err == 0 && (q & 1)))))
        q++;
    char tmp[FMT_FIXED_MAX];
    int k = (int)sizeof tmp;
    uint64_t ip = q / pow10[prec], fp = q % pow10[prec];
    for (int d = 0; d < prec; d++) {
        tmp[--k] = (char)('0' + fp % 10);
        fp /= 10;
    }
    if (prec > 0)
        tmp[--k] = '.';
    do {
        tmp[--k] = (char)('0' + ip % 10);
        ip /= 10;
    } while (ip);
    if (signbit(x))
        tmp[--k] = '-';
    size_t n = sizeof tmp - (size_t)k;
    memcpy(out, tmp + k, n);
    return n;
}

void buf_put_int(struct buf *b, long long v)
{
    char tmp[24];
    char *e = tmp + sizeof tmp, *p = e;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    buf_append(b, p, (size_t)(e - p));
}

void buf_put_fixed(struct buf *b, double x, int prec)
{
    char tmp[FMT_FIXED_MAX];
    size_t n = fmt_fixed(tmp, x, prec);
    if (n)
        buf_append(b, tmp, n);
    else
        buf_printf(b, "%.*f", prec, x);
}
