/* rtproto.c: runtime protocol v1 parsing and formatting (see rtproto.h). */
#include "agent/rtproto.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/lineio.h"
#include "common/alloc.h"
#include "common/err.h"

/* Copies a JSON string field into dst; false if present but not a string or
 * too long (absent is fine unless required). */
static int get_str(json_t *o, const char *key, char *dst, size_t size, int required, char *err,
                   size_t errlen)
{
    json_t *v = json_object_get(o, key);
    dst[0] = '\0';
    if (!v) {
        if (required) {
            snprintf(err, errlen, "missing field %s", key);
            return -1;
        }
        return 0;
    }
    if (!json_is_string(v) || json_string_length(v) >= size) {
        snprintf(err, errlen, "field %s: not a string or longer than %zu", key, size - 1);
        return -1;
    }
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    if (strlen(dst) != json_string_length(v)) {
        snprintf(err, errlen, "field %s: contains NUL", key);
        return -1;
    }
    return 0;
}

static int64_t get_i64(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (json_is_integer(v) && json_integer_value(v) >= 0)
        return json_integer_value(v);
    if (json_is_real(v) && json_real_value(v) >= 0 && json_real_value(v) < 1e15)
        return (int64_t)json_real_value(v);
    return -1;
}

static const struct {
    const char *name;
    enum rt_type type;
} types[] = {
    {"hello", RT_HELLO},   {"loaded", RT_LOADED}, {"unloaded", RT_UNLOADED},
    {"progress", RT_PROGRESS}, {"result", RT_RESULT}, {"error", RT_ERROR},
    {"pong", RT_PONG},     {"log", RT_LOG},
};

int rt_parse(const char *line, size_t len, struct rt_msg *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->vram_mb = out->run_ms = out->load_ms = out->inline_bytes = -1;
    json_error_t jerr;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    int rc = GPUQ_EINVAL;
    if (!o) {
        snprintf(err, errlen, "not JSON: %s", jerr.text);
        return GPUQ_EINVAL;
    }
    if (!json_is_object(o)) {
        snprintf(err, errlen, "not a JSON object");
        goto fail;
    }
    char type[16];
    if (get_str(o, "type", type, sizeof type, 1, err, errlen))
        goto fail;
    size_t i;
    for (i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(types[i].name, type) == 0)
            break;
    if (i == sizeof types / sizeof types[0]) {
        snprintf(err, errlen, "unknown message type");
        goto fail;
    }
    out->type = types[i].type;
    bool need_id = out->type != RT_HELLO && out->type != RT_LOG;
    if (get_str(o, "id", out->id, sizeof out->id, need_id, err, errlen))
        goto fail;
    if (get_str(o, "model", out->model, sizeof out->model, 0, err, errlen))
        goto fail;
    if (get_str(o, "message", out->message, sizeof out->message, 0, err, errlen)) {
        /* An over-long message is only truncated, not refused. */
        const char *m = json_string_value(json_object_get(o, "message"));
        if (!m)
            goto fail;
        snprintf(out->message, sizeof out->message, "%s", m);
    }
    out->vram_mb = get_i64(o, "vram_mb");
    out->run_ms = get_i64(o, "run_ms");
    out->load_ms = get_i64(o, "load_ms");

    switch (out->type) {
    case RT_HELLO: {
        json_t *p = json_object_get(o, "protocol");
        if (!json_is_integer(p)) {
            snprintf(err, errlen, "hello: missing integer protocol");
            goto fail;
        }
        out->protocol = (int)json_integer_value(p);
        if (get_str(o, "runtime", out->runtime, sizeof out->runtime, 0, err, errlen))
            goto fail;
        break;
    }
    case RT_PROGRESS: {
        json_t *p = json_object_get(o, "progress");
        if (!json_is_number(p) || !isfinite(json_number_value(p)) ||
            json_number_value(p) < 0 || json_number_value(p) > 1) {
            snprintf(err, errlen, "progress: must be a number in [0, 1]");
            goto fail;
        }
        out->progress = json_number_value(p);
        if (get_str(o, "phase", out->phase, sizeof out->phase, 0, err, errlen))
            goto fail;
        if (!out->phase[0])
            snprintf(out->phase, sizeof out->phase, "generating");
        if (strcmp(out->phase, "generating") != 0 && strcmp(out->phase, "loading") != 0) {
            snprintf(err, errlen, "progress: phase must be loading or generating");
            goto fail;
        }
        break;
    }
    case RT_RESULT: {
        json_t *outs = json_object_get(o, "outputs");
        if (!json_is_array(outs) || json_array_size(outs) < 1) {
            snprintf(err, errlen, "result: outputs must be a non-empty array");
            goto fail;
        }
        json_t *first = json_array_get(outs, 0);
        if (!json_is_object(first)) {
            snprintf(err, errlen, "result: outputs[0] must be an object");
            goto fail;
        }
        json_t *nb = json_object_get(first, "bytes");
        if (nb) { /* inline: the bytes follow the line */
            out->unframed = 1;
            if (!json_is_integer(nb) || json_integer_value(nb) < 0) {
                snprintf(err, errlen, "result: outputs[0].bytes must be a non-negative integer");
                goto fail;
            }
            if (json_object_get(first, "path")) {
                snprintf(err, errlen, "result: outputs[0] has both bytes and path");
                goto fail;
            }
            out->unframed = 0;
            out->inline_bytes = json_integer_value(nb);
        }
        if ((!nb &&
             get_str(first, "path", out->out_path, sizeof out->out_path, 1, err, errlen)) ||
            get_str(first, "content_type", out->content_type, sizeof out->content_type, 0, err,
                    errlen))
            goto fail;
        if (!out->content_type[0])
            snprintf(out->content_type, sizeof out->content_type, "application/octet-stream");
        for (const char *c = out->content_type; *c; c++)
            if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e) {
                snprintf(err, errlen, "result: content_type has invalid characters");
                goto fail;
            }
        break;
    }
    case RT_ERROR: {
        if (get_str(o, "class", out->cls, sizeof out->cls, 1, err, errlen))
            goto fail;
        static const char *ok[] = {"oom", "cuda", "bad_input", "internal", "cancelled"};
        bool known = false;
        for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++)
            known |= strcmp(out->cls, ok[k]) == 0;
        if (!known)
            snprintf(out->cls, sizeof out->cls, "internal");
        break;
    }
    case RT_LOG:
        if (get_str(o, "level", out->level, sizeof out->level, 0, err, errlen))
            snprintf(out->level, sizeof out->level, "info");
        break;
    default:
        break;
    }
    rc = 0;
fail:
    json_decref(o);
    return rc;
}

void rt_frame_start(struct rt_frame *f, const struct rt_msg *m, int skip)
{
    rt_frame_reset(f);
    f->active = 1;
    f->skip = skip;
    f->want = m->inline_bytes > 0 ? (size_t)m->inline_bytes : 0;
    f->have = 0;
    f->data = skip ? NULL : xmalloc(f->want + 1);
    f->msg = *m;
}

int rt_frame_fill(struct rt_frame *f, struct line_reader *lr)
{
    if (!f->active)
        return 0;
    while (f->have < f->want) {
        size_t k = line_reader_take(lr, f->data ? f->data + f->have : NULL, f->want - f->have);
        if (k == 0)
            return 0;
        f->have += k;
    }
    return 1;
}

char *rt_frame_take(struct rt_frame *f, size_t *len)
{
    char *d = f->data;
    if (d)
        d[f->have] = '\0';
    *len = f->have;
    f->data = NULL;
    f->active = 0;
    return d;
}

void rt_frame_reset(struct rt_frame *f)
{
    free(f->data);
    f->data = NULL;
    f->active = f->skip = 0;
    f->want = f->have = 0;
}

static void put(struct buf *b, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (s) {
        buf_puts(b, s);
        buf_append(b, "\n", 1);
        free(s);
    }
}

void rt_fmt_load(struct buf *b, const char *id, const char *model, int64_t vram_mb,
                 int64_t load_ms)
{
    put(b, json_pack("{s:s, s:s, s:s, s:I, s:I}", "type", "load", "id", id, "model", model,
                     "vram_mb", (json_int_t)vram_mb, "load_ms", (json_int_t)load_ms));
}

void rt_fmt_unload(struct buf *b, const char *id, const char *model)
{
    put(b, json_pack("{s:s, s:s, s:s}", "type", "unload", "id", id, "model", model));
}

void rt_fmt_run(struct buf *b, const char *id, const char *model, const char *capability,
                json_t *params, const char *output_dir, int warmup)
{
    put(b, json_pack("{s:s, s:s, s:s, s:s, s:O, s:s, s:b}", "type", "run", "id", id, "model",
                     model, "capability", capability, "params", params ? params : json_null(),
                     "output_dir", output_dir, "warmup", warmup));
}

void rt_fmt_cancel(struct buf *b, const char *id)
{
    put(b, json_pack("{s:s, s:s}", "type", "cancel", "id", id));
}

void rt_fmt_ping(struct buf *b, const char *id)
{
    put(b, json_pack("{s:s, s:s}", "type", "ping", "id", id));
}

void rt_fmt_shutdown(struct buf *b)
{
    put(b, json_pack("{s:s}", "type", "shutdown"));
}
