/* log.c: structured log lines on stderr, one write(2) per line. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"

static enum log_level min_level = LOG_INFO;

static const char *level_names[] = {"debug", "info", "warn", "error"};

void log_set_level(enum log_level lvl)
{
    min_level = lvl;
}

/* Appends s as a JSON string body (without quotes), escaping what JSON needs. */
static void append_escaped(struct buf *b, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            buf_printf(b, "\\%c", c);
        else if (c < 0x20)
            buf_printf(b, "\\u%04x", c);
        else
            buf_append(b, s, 1);
    }
}

static void write_line(struct buf *b)
{
    buf_append(b, "\n", 1);
    ssize_t off = 0;
    while ((size_t)off < b->len) {
        ssize_t n = write(STDERR_FILENO, b->data + off, b->len - (size_t)off);
        if (n <= 0)
            break;
        off += n;
    }
}

void log_msg(enum log_level lvl, const char *mod, const char *fmt, ...)
{
    if (lvl < min_level)
        return;
    struct buf msg, line;
    buf_init(&msg);
    buf_init(&line);
    va_list ap;
    va_start(ap, fmt);
    buf_vprintf(&msg, fmt, ap);
    va_end(ap);
    int64_t ms = clock_wall_ms();
    buf_printf(&line, "{\"ts\":%lld.%03lld,\"level\":\"%s\",\"mod\":\"", (long long)(ms / 1000),
               (long long)(ms % 1000), level_names[lvl]);
    append_escaped(&line, mod);
    buf_puts(&line, "\",\"msg\":\"");
    append_escaped(&line, msg.data ? msg.data : "");
    buf_puts(&line, "\"}");
    write_line(&line);
    buf_fini(&msg);
    buf_fini(&line);
}

void log_json(const char *obj)
{
    struct buf line;
    buf_init(&line);
    buf_puts(&line, obj);
    write_line(&line);
    buf_fini(&line);
}
