/* lineio.h: bounded line splitting for bytes read from a runtime's stdout,
 * and the whole read of an output file it wrote (read_exact).
 * Lines longer than max are not kept: the reader reports one overlong line and
 * skips to the next newline, so a runtime can never make the agent grow
 * without bound. Invariant: len <= max; while skipping, len == 0. */
#ifndef GPUQ_AGENT_LINEIO_H
#define GPUQ_AGENT_LINEIO_H

#include <stdbool.h>
#include <stddef.h>

struct line_reader {
    char *buf; /* max + 1 bytes */
    size_t len, max;
    bool skipping;   /* inside an overlong line */
    size_t pos;      /* scan position for the next line in buf[0..len) */
};

enum line_result { LINE_NONE = 0, LINE_OK = 1, LINE_TOO_LONG = 2 };

void line_reader_init(struct line_reader *r, size_t max);
void line_reader_fini(struct line_reader *r);
void line_reader_reset(struct line_reader *r);
/* line_reader_space: where to read into and how much room there is (> 0). */
char *line_reader_space(struct line_reader *r, size_t *room);
/* line_reader_added: n bytes were written at line_reader_space. */
void line_reader_added(struct line_reader *r, size_t n);
/* line_reader_next: LINE_OK with the next complete line (NUL-terminated, no
 * newline, valid until the next call) in *line and *len; LINE_TOO_LONG once per
 * overlong line; LINE_NONE when more bytes are needed. */
enum line_result line_reader_next(struct line_reader *r, char **line, size_t *len);

/* line_reader_take: moves up to n bytes that follow the last line returned
 * (raw bytes framed by a length, e.g. an inline result) to dst, or drops them
 * when dst is NULL. Returns how many; 0 when more must be read first. */
size_t line_reader_take(struct line_reader *r, void *dst, size_t n);

/* read_exact: reads exactly n bytes from fd (an output file a runtime wrote)
 * into a new buffer of n + 1 bytes, NUL-terminated, that the caller frees.
 * NULL on a read error or when the file ends before n bytes. */
char *read_exact(int fd, size_t n);

#endif
