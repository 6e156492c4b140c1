/* lineio.c: bounded line splitting and whole reads (see lineio.h). */
#include "agent/lineio.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"

void line_reader_init(struct line_reader *r, size_t max)
{
    memset(r, 0, sizeof *r);
    r->max = max < 16 ? 16 : max;
    r->buf = xmalloc(r->max + 1);
}

void line_reader_fini(struct line_reader *r)
{
    free(r->buf);
    memset(r, 0, sizeof *r);
}

void line_reader_reset(struct line_reader *r)
{
    r->len = r->pos = 0;
    r->skipping = false;
}

/* Drops the consumed prefix buf[0..pos). */
static void compact(struct line_reader *r)
{
    if (r->pos == 0)
        return;
    memmove(r->buf, r->buf + r->pos, r->len - r->pos);
    r->len -= r->pos;
    r->pos = 0;
}

char *line_reader_space(struct line_reader *r, size_t *room)
{
    compact(r);
    *room = r->max - r->len;
    if (*room == 0) { /* cannot happen: next() discards a full buffer */
        r->len = 0;
        r->skipping = true;
        *room = r->max;
    }
    return r->buf + r->len;
}

void line_reader_added(struct line_reader *r, size_t n)
{
    r->len += n;
}

enum line_result line_reader_next(struct line_reader *r, char **line, size_t *len)
{
    for (;;) {
        char *start = r->buf + r->pos;
        size_t avail = r->len - r->pos;
        char *nl = memchr(start, '\n', avail);
        if (!nl) {
            if (r->skipping) {
                r->len = r->pos = 0;
                return LINE_NONE;
            }
            if (avail >= r->max) { /* a full buffer without newline: overlong */
                r->len = r->pos = 0;
                r->skipping = true;
                return LINE_TOO_LONG;
            }
            return LINE_NONE;
        }
        size_t n = (size_t)(nl - start);
        r->pos += n + 1;
        if (r->skipping) {
            r->skipping = false;
            continue;
        }
        *nl = '\0';
        if (n > 0 && start[n - 1] == '\r')
            start[--n] = '\0';
        *line = start;
        *len = n;
        return LINE_OK;
    }
}

size_t line_reader_take(struct line_reader *r, void *dst, size_t n)
{
    size_t avail = r->len - r->pos;
    size_t k = n < avail ? n : avail;
    if (dst && k)
        memcpy(dst, r->buf + r->pos, k);
    r->pos += k;
    return k;
}

char *read_exact(int fd, size_t n)
{
    char *p = xmalloc(n + 1);
    size_t off = 0;
    while (off < n) {
        ssize_t r = read(fd, p + off, n - off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(p);
            return NULL;
        }
        off += (size_t)r;
    }
    p[n] = '\0';
    return p;
}
