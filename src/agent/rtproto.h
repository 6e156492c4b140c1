/* rtproto.h: the runtime line protocol v1 (docs/protocol-runtime.md) — parsing
 * what a runtime writes (bounded and validated: a bad line is an error, never
 * a crash) and formatting what the agent sends. */
#ifndef GPUQ_AGENT_RTPROTO_H
#define GPUQ_AGENT_RTPROTO_H

#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

#define RT_PROTOCOL 1
#define RT_ID_MAX 96
/* The largest result a runtime may send inline (docs/protocol-runtime.md);
 * the agent offers min(this, max_output_bytes, outbox_memory_bytes) in
 * $GPUQ_RESULT_INLINE_MAX. */
#define RT_INLINE_MAX 65536

enum rt_type {
    RT_HELLO,
    RT_LOADED,
    RT_UNLOADED,
    RT_PROGRESS,
    RT_RESULT,
    RT_ERROR,
    RT_PONG,
    RT_LOG,
};

/* One message from a runtime. Strings are NUL-terminated and truncated to
 * their arrays; fields not in the message are zero/empty (vram_mb, run_ms,
 * load_ms: -1 when absent). For RT_ERROR, cls is one of oom, cuda,
 * bad_input, internal, cancelled (anything else becomes internal). */
struct rt_msg {
    enum rt_type type;
    char id[RT_ID_MAX];
    int protocol;
    char runtime[64];
    char model[64];
    char phase[16];
    double progress;
    char cls[16];
    char message[512];
    char level[8];
    char out_path[PATH_MAX];
    char content_type[96];
    int64_t vram_mb, run_ms, load_ms;
    /* RT_RESULT: -1 when the output is the file out_path; else the number
     * of raw bytes that follow this line (outputs[0].bytes). */
    int64_t inline_bytes;
    /* Set, with a parse error, when a result line had an outputs[0].bytes
     * that is not a valid length: the bytes after it cannot be framed. */
    int unframed;
};

struct line_reader;

/* An inline result being read: the header line's message, then want bytes.
 * Invariant: active ⇒ have <= want, and data holds have bytes (data is NULL
 * when skip: the bytes are read and dropped). */
struct rt_frame {
    int active, skip;
    size_t want, have;
    char *data;
    struct rt_msg msg;
};

/* rt_frame_start begins reading m->inline_bytes bytes (kept, or dropped if
 * skip). rt_frame_fill takes what lr holds of them: 1 when the frame is
 * complete (then take data with rt_frame_take), 0 when more must be read.
 * rt_frame_take hands over the bytes (malloc'd, NUL-terminated, the caller
 * frees) and ends the frame; rt_frame_reset drops a frame. */
void rt_frame_start(struct rt_frame *f, const struct rt_msg *m, int skip);
int rt_frame_fill(struct rt_frame *f, struct line_reader *lr);
char *rt_frame_take(struct rt_frame *f, size_t *len);
void rt_frame_reset(struct rt_frame *f);

/* rt_parse: 0, or GPUQ_EINVAL with the reason in err (not JSON, unknown type,
 * missing/invalid field). */
int rt_parse(const char *line, size_t len, struct rt_msg *out, char *err, size_t errlen);

/* Formatters append one complete line (with '\n') to b. */
void rt_fmt_load(struct buf *b, const char *id, const char *model, int64_t vram_mb,
                 int64_t load_ms);
void rt_fmt_unload(struct buf *b, const char *id, const char *model);
/* params is borrowed (may be NULL). */
void rt_fmt_run(struct buf *b, const char *id, const char *model, const char *capability,
                json_t *params, const char *output_dir, int warmup);
void rt_fmt_cancel(struct buf *b, const char *id);
void rt_fmt_ping(struct buf *b, const char *id);
void rt_fmt_shutdown(struct buf *b);

#endif
