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
};

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
