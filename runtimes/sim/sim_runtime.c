/* sim_runtime.c: gpuq-sim-runtime, the simulated model runtime for tests and
 * demos. It speaks the runtime protocol v1 (docs/protocol-runtime.md) on
 * stdin/stdout like a real runtime, but "loads" models by waiting their load
 * time, "runs" jobs by waiting a run time computed from model and size, keeps
 * VRAM accounts against the GPU's size, and answers with real PNG outputs
 * (inline after the result line when the agent offers it, else a file). Faults
 * are injected by job parameter ("fault": oom|crash|hang|solid|bad_input|cuda|
 * garbage|flood), by flag (--fault KIND [--fault-rate P]) or one-shot by file
 * (--fault-file: the next job takes it). One fault acts at start instead:
 * "exit" (by flag, or while the fault file says "exit") makes the runtime
 * exit at once, before its hello, every time it starts.
 *
 * One thread, one poll loop: several jobs may run at once (timers); stdin is
 * read in bounded lines. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/output.h"
#include "png_art.h"

#define SIM_PROTOCOL 1
#define SIM_LINE_MAX (1 << 20)
#define SIM_MAX_OPS 256
#define SIM_MAX_MODELS 64
#define SIM_MAX_STEP_RULES 32

enum op_kind { OP_LOAD, OP_RUN };

/* A pending load or run. Invariant: used ops have id set; due_ns >= start_ns. */
struct op {
    bool used;
    enum op_kind kind;
    char id[128];
    char model[128];
    int64_t vram_mb;
    int64_t start_ns, due_ns;
    int64_t next_progress_ns; /* 0: no more progress lines */
    json_t *params;           /* run: owned */
    char output_dir[PATH_MAX];
    char fault[32];
    bool has_input;           /* run: params.inputs named a file */
    uint64_t input_hash;      /* its FNV-1a 64 (drawn into the output) */
};

struct resident {
    char name[128];
    int64_t vram_mb;
};

struct step_rule {
    char model[128];
    double step_ms;
};

static struct {
    double scale;
    double step_ms;
    struct step_rule rules[SIM_MAX_STEP_RULES];
    int nrules;
    char fault[32];
    double fault_rate;
    const char *fault_file;
    const char *record;       /* --record: every run message is appended here */
    int64_t vram_total_mb;
    uint64_t rng;
    struct op ops[SIM_MAX_OPS];
    struct resident models[SIM_MAX_MODELS];
    int nmodels;
    size_t inline_max;   /* results up to this size go inline (0: files only) */
    struct png_art art;  /* drawing buffers, reused */
    struct rt_bytes png; /* the encoded picture, reused */
    /* What sim.png was drawn from; all zero while it holds nothing (no
     * picture is 0 pixels wide, so no run matches it). */
    struct picture_key {
        int64_t w, h;
        uint64_t seed, input_hash;
        bool has_input, solid;
    } png_key;
} sim;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double rand01(void)
{
    sim.rng ^= sim.rng << 13;
    sim.rng ^= sim.rng >> 7;
    sim.rng ^= sim.rng << 17;
    return (double)(sim.rng >> 11) / 9007199254740992.0;
}

/* Writes one JSON object as one line to stdout. */
static void emit(json_t *msg)
{
    char *s = json_dumps(msg, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(msg);
    if (!s)
        return;
    fputs(s, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    free(s);
}

static void emit_error(const char *id, const char *cls, const char *message)
{
    emit(json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "id", id, "class", cls, "message",
                   message));
}

static void say(const char *level, const char *message)
{
    emit(json_pack("{s:s, s:s, s:s}", "type", "log", "level", level, "message", message));
}

static struct resident *find_model(const char *name)
{
    for (int i = 0; i < sim.nmodels; i++)
        if (strcmp(sim.models[i].name, name) == 0)
            return &sim.models[i];
    return NULL;
}

static int64_t vram_used(void)
{
    int64_t used = 0;
    for (int i = 0; i < sim.nmodels; i++)
        used += sim.models[i].vram_mb;
    return used;
}

static struct op *new_op(void)
{
    for (int i = 0; i < SIM_MAX_OPS; i++)
        if (!sim.ops[i].used) {
            memset(&sim.ops[i], 0, sizeof sim.ops[i]);
            sim.ops[i].used = true;
            return &sim.ops[i];
        }
    return NULL;
}

static void free_op(struct op *o)
{
    json_decref(o->params);
    memset(o, 0, sizeof *o);
}

static double step_ms_for(const char *model)
{
    for (int i = 0; i < sim.nrules; i++)
        if (strcmp(sim.rules[i].model, model) == 0)
            return sim.rules[i].step_ms;
    return sim.step_ms;
}

static int64_t param_int(json_t *params, const char *key, int64_t dflt, int64_t lo, int64_t hi)
{
    json_t *v = json_object_get(params, key);
    if (!json_is_integer(v))
        return dflt;
    int64_t x = json_integer_value(v);
    return x < lo ? lo : x > hi ? hi : x;
}

/* The first word of the fault file, or "" (without taking it). */
static void peek_fault_file(char *fault, size_t size)
{
    fault[0] = '\0';
    FILE *f = sim.fault_file ? fopen(sim.fault_file, "r") : NULL;
    if (!f)
        return;
    char line[64] = "";
    if (fgets(line, sizeof line, f)) {
        line[strcspn(line, " \r\n")] = '\0';
        snprintf(fault, size, "%s", line);
    }
    fclose(f);
}

/* One-shot faults: whoever renames the file first takes it. "exit" is not a
 * job's fault: it stays for the next start. */
static void take_fault_file(char *fault, size_t size)
{
    if (!sim.fault_file)
        return;
    char peek[64];
    peek_fault_file(peek, sizeof peek);
    if (strcmp(peek, "exit") == 0)
        return;
    char claimed[PATH_MAX];
    snprintf(claimed, sizeof claimed, "%s.%d", sim.fault_file, (int)getpid());
    if (rename(sim.fault_file, claimed) != 0)
        return;
    FILE *f = fopen(claimed, "r");
    if (f) {
        char line[64] = "";
        if (fgets(line, sizeof line, f)) {
            line[strcspn(line, " \r\n")] = '\0';
            snprintf(fault, size, "%s", line);
        }
        fclose(f);
    }
    remove(claimed);
}

static void handle_load(json_t *msg, const char *id)
{
    const char *model = json_string_value(json_object_get(msg, "model"));
    if (!model || !model[0] || strlen(model) >= 128) {
        emit_error(id, "bad_input", "load: model missing or too long");
        return;
    }
    if (find_model(model)) {
        emit(json_pack("{s:s, s:s, s:s, s:I}", "type", "loaded", "id", id, "model", model,
                       "vram_mb", (json_int_t)find_model(model)->vram_mb));
        return;
    }
    json_int_t vram = json_integer_value(json_object_get(msg, "vram_mb"));
    json_int_t load_ms = json_integer_value(json_object_get(msg, "load_ms"));
    if (vram <= 0)
        vram = 1000;
    if (load_ms < 0)
        load_ms = 0;
    if (vram_used() + vram > sim.vram_total_mb || sim.nmodels >= SIM_MAX_MODELS) {
        char m[256];
        snprintf(m, sizeof m, "CUDA out of memory loading %s (%lld MB; %lld of %lld MB used)",
                 model, (long long)vram, (long long)vram_used(), (long long)sim.vram_total_mb);
        emit_error(id, "oom", m);
        return;
    }
    struct op *o = new_op();
    if (!o) {
        emit_error(id, "internal", "too many operations");
        return;
    }
    o->kind = OP_LOAD;
    snprintf(o->id, sizeof o->id, "%s", id);
    snprintf(o->model, sizeof o->model, "%s", model);
    o->vram_mb = vram;
    o->start_ns = now_ns();
    o->due_ns = o->start_ns + (int64_t)((double)load_ms * sim.scale * 1e6);
}

static void handle_unload(json_t *msg, const char *id)
{
    const char *model = json_string_value(json_object_get(msg, "model"));
    struct resident *r = model ? find_model(model) : NULL;
    if (r) {
        *r = sim.models[--sim.nmodels];
    }
    emit(json_pack("{s:s, s:s, s:s}", "type", "unloaded", "id", id, "model", model ? model : ""));
}

/* A crash or a hang: what a broken CUDA context or a stuck kernel looks like. */
static void crash_now(void)
{
    say("error", "simulated crash");
    signal(SIGABRT, SIG_DFL);
    abort();
}

static void hang_now(void)
{
    say("error", "simulated hang: not reading or answering anything from now on");
    for (;;)
        pause();
}

/* Garbage on stdout: what a runtime printing debug output or corrupt frames
 * would do. The agent must survive it and still take the real answer. */
static void emit_garbage(const char *id)
{
    fputs("this is not json\n", stdout);
    fputs("{\"type\":\"result\",\"id\":\"no-such-job\",\"outputs\":[{\"path\":\"/etc/passwd\","
          "\"content_type\":\"image/png\"}]}\n",
          stdout);
    fprintf(stdout, "{\"type\":\"result\",\"id\":\"%s\",\"outputs\":[]}\n", id);
    fputs("{\"type\":\"progress\"}\n", stdout);
    fputs("[1,2,3]\n", stdout);
    fputs("{\"type\":\"teleport\",\"id\":\"x\"}\n", stdout);
    size_t huge = 3u << 20; /* 3 MiB in one line */
    for (size_t i = 0; i < huge; i += 64)
        fputs("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", stdout);
    fputc('\n', stdout);
    fputs("\x01\x02\xff\xfe binary\n", stdout);
    fprintf(stdout, "{\"type\":\"progress\",\"id\":\"%s\",\"progress\":7.5}\n", id);
    fflush(stdout);
}

/* A flood: a runtime stuck printing debug output in a tight loop. It never
 * answers again; it stops only when killed or when its stdout is closed. */
static void flood_now(void)
{
    say("error", "simulated flood: printing garbage until stopped");
    signal(SIGPIPE, SIG_DFL);
    for (;;) {
        if (fputs("garbage garbage garbage\n", stdout) == EOF)
            _exit(1);
    }
}

#define SIM_INPUT_MAX (256LL << 20)

/* The input a run derives its picture from: params.inputs.image, else the
 * first of params.inputs (local paths, given by the agent). 0 with *has false
 * when there is none; -1 (error sent) when it cannot be read. */
static int read_input(json_t *params, const char *id, bool *has, uint64_t *hash)
{
    *has = false;
    json_t *in = json_object_get(params, "inputs");
    if (!json_is_object(in) || json_object_size(in) == 0)
        return 0;
    json_t *v = json_object_get(in, "image");
    if (!v) {
        void *it = json_object_iter(in);
        v = it ? json_object_iter_value(it) : NULL;
    }
    const char *path = json_string_value(v);
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        char m[PATH_MAX + 64];
        snprintf(m, sizeof m, "input: cannot open %s", path ? path : "(not a path)");
        emit_error(id, "bad_input", m);
        return -1;
    }
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the file's bytes */
    unsigned char buf[65536];
    size_t n;
    long long total = 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0 && total <= SIM_INPUT_MAX) {
        for (size_t i = 0; i < n; i++)
            h = (h ^ buf[i]) * 1099511628211ull;
        total += (long long)n;
    }
    bool bad = ferror(f) || total > SIM_INPUT_MAX;
    fclose(f);
    if (bad) {
        emit_error(id, "bad_input", "input: unreadable or larger than 256 MiB");
        return -1;
    }
    *has = true;
    *hash = h;
    return 0;
}

/* --record: the run message as received, one JSON line. */
static void record_run(json_t *msg)
{
    if (!sim.record)
        return;
    FILE *f = fopen(sim.record, "a");
    if (!f)
        return;
    char *s = json_dumps(msg, JSON_COMPACT);
    if (s)
        fprintf(f, "%s\n", s);
    free(s);
    fclose(f);
}

/* Draws the input's hash into the picture: bit i (most significant first) of
 * the 64 is pixel i of the rows read left to right, white for 1, black for 0. */
static void draw_input_hash(unsigned char *px, int w, int h, uint64_t hash)
{
    for (int i = 0; i < 64 && i < w * h; i++) {
        unsigned char v = (hash >> (63 - i)) & 1 ? 255 : 0;
        unsigned char *p = px + ((size_t)(i / w) * (size_t)w + (size_t)(i % w)) * 3;
        p[0] = p[1] = p[2] = v;
    }
}

static void handle_run(json_t *msg, const char *id)
{
    record_run(msg);
    const char *model = json_string_value(json_object_get(msg, "model"));
    const char *outdir = json_string_value(json_object_get(msg, "output_dir"));
    json_t *params = json_object_get(msg, "params");
    if (!model || !outdir || strlen(outdir) >= PATH_MAX - 160 ||
        (params && !json_is_object(params))) {
        emit_error(id, "bad_input", "run: model, output_dir and params are required");
        return;
    }
    if (!find_model(model)) {
        emit_error(id, "internal", "run: model not loaded");
        return;
    }
    char fault[32] = "";
    const char *pf = json_string_value(json_object_get(params, "fault"));
    if (pf)
        snprintf(fault, sizeof fault, "%s", pf);
    if (!fault[0] && sim.fault[0] && (sim.fault_rate >= 1 || rand01() < sim.fault_rate))
        snprintf(fault, sizeof fault, "%s", sim.fault);
    if (!fault[0] && !json_is_true(json_object_get(msg, "warmup")))
        take_fault_file(fault, sizeof fault);

    if (strcmp(fault, "crash") == 0)
        crash_now();
    if (strcmp(fault, "hang") == 0)
        hang_now();
    if (strcmp(fault, "bad_input") == 0) {
        emit_error(id, "bad_input", "simulated: the runtime refused the parameters");
        return;
    }
    if (strcmp(fault, "garbage") == 0)
        emit_garbage(id);
    if (strcmp(fault, "flood") == 0)
        flood_now();
    bool has_input;
    uint64_t input_hash = 0;
    if (read_input(params, id, &has_input, &input_hash))
        return;

    int64_t w = param_int(params, "width", 1024, 64, 4096);
    int64_t h = param_int(params, "height", 1024, 64, 4096);
    int64_t steps = param_int(params, "steps", 30, 1, 500);
    int64_t frames = param_int(params, "frames", 0, 0, 1000);
    double run_ms;
    json_t *sm = json_object_get(params, "sim_ms");
    if (json_is_integer(sm) && json_integer_value(sm) >= 0)
        run_ms = (double)json_integer_value(sm);
    else
        run_ms = step_ms_for(model) * (double)steps * (double)(w * h) / (1024.0 * 1024.0) *
                 (frames > 16 ? (double)frames / 16.0 : 1.0) * sim.scale;

    struct op *o = new_op();
    if (!o) {
        emit_error(id, "internal", "too many operations");
        return;
    }
    o->kind = OP_RUN;
    snprintf(o->id, sizeof o->id, "%s", id);
    snprintf(o->model, sizeof o->model, "%s", model);
    snprintf(o->output_dir, sizeof o->output_dir, "%s", outdir);
    snprintf(o->fault, sizeof o->fault, "%s", fault);
    o->params = params ? json_incref(params) : json_object();
    o->has_input = has_input;
    o->input_hash = input_hash;
    o->start_ns = now_ns();
    o->due_ns = o->start_ns + (int64_t)(run_ms * 1e6);
    if (strcmp(fault, "oom") == 0 || strcmp(fault, "cuda") == 0)
        o->due_ns = o->start_ns + (o->due_ns - o->start_ns) / 2; /* dies mid-inference */
    o->next_progress_ns = run_ms >= 40 ? o->start_ns + (o->due_ns - o->start_ns) / 4 : 0;
}

static void handle_cancel(const char *id)
{
    for (int i = 0; i < SIM_MAX_OPS; i++) {
        struct op *o = &sim.ops[i];
        if (o->used && o->kind == OP_RUN && strcmp(o->id, id) == 0) {
            emit_error(id, "cancelled", "cancelled");
            free_op(o);
            return;
        }
    }
}

/* Returns false when the runtime should exit. */
static bool handle_line(const char *line, size_t len)
{
    json_error_t jerr;
    json_t *msg = json_loadb(line, len, 0, &jerr);
    if (!json_is_object(msg)) {
        json_decref(msg);
        say("warn", "ignored a line that is not a JSON object");
        return true;
    }
    const char *type = json_string_value(json_object_get(msg, "type"));
    const char *id = json_string_value(json_object_get(msg, "id"));
    if (!type) {
        say("warn", "ignored a message without type");
    } else if (strcmp(type, "shutdown") == 0) {
        json_decref(msg);
        return false;
    } else if (!id || strlen(id) >= 128) {
        say("warn", "ignored a message without a valid id");
    } else if (strcmp(type, "ping") == 0) {
        emit(json_pack("{s:s, s:s}", "type", "pong", "id", id));
    } else if (strcmp(type, "load") == 0) {
        handle_load(msg, id);
    } else if (strcmp(type, "unload") == 0) {
        handle_unload(msg, id);
    } else if (strcmp(type, "run") == 0) {
        handle_run(msg, id);
    } else if (strcmp(type, "cancel") == 0) {
        handle_cancel(id);
    } else {
        say("warn", "ignored a message of unknown type");
    }
    json_decref(msg);
    return true;
}

static bool same_picture(const struct picture_key *a, const struct picture_key *b)
{
    return a->w == b->w && a->h == b->h && a->seed == b->seed && a->input_hash == b->input_hash &&
           a->has_input == b->has_input && a->solid == b->solid;
}

static void finish_run(struct op *o)
{
    if (strcmp(o->fault, "oom") == 0) {
        emit_error(o->id, "oom", "CUDA out of memory (simulated) mid-inference");
        return;
    }
    if (strcmp(o->fault, "cuda") == 0) {
        emit_error(o->id, "cuda", "CUDA error: an illegal memory access was encountered (simulated)");
        return;
    }
    int64_t w = param_int(o->params, "width", 1024, 64, 4096) / 8;
    int64_t h = param_int(o->params, "height", 1024, 64, 4096) / 8;
    w = w < 16 ? 16 : w > 256 ? 256 : w;
    h = h < 16 ? 16 : h > 256 ? 256 : h;
    uint64_t seed = rt_hash_str(json_string_value(json_object_get(o->params, "prompt"))) ^
                    (uint64_t)param_int(o->params, "seed", 0, 0, INT64_MAX) ^ rt_hash_str(o->model);
    bool solid = strcmp(o->fault, "solid") == 0;
    if (o->has_input)
        seed ^= o->input_hash;
    char path[PATH_MAX + 160];
    /* The same arguments draw the same bytes: a repeat (a zero-duration
     * benchmark job, a client's retry) sends the last picture again rather
     * than drawing it on the host's CPU, which a GPU's runtime would not use. */
    struct picture_key key = {w, h, seed, o->has_input ? o->input_hash : 0, o->has_input, solid};
    if (!same_picture(&key, &sim.png_key)) {
        sim.png_key = (struct picture_key){0};
        unsigned char *px = png_art_draw(&sim.art, (int)w, (int)h, seed, solid);
        if (px && o->has_input && !solid)
            draw_input_hash(px, (int)w, (int)h, o->input_hash);
        if (!px || rt_png_encode(&sim.png, (int)w, (int)h, px, RT_PNG_STORED) != 0) {
            emit_error(o->id, "internal", "could not encode the output PNG");
            return;
        }
        sim.png_key = key;
    }
    int64_t run_ms = (now_ns() - o->start_ns) / 1000000;
    /* Inline when the agent offered it and the picture fits; else a file. */
    if (sim.png.len <= sim.inline_max) {
        rt_emit_inline(stdout, o->id, "image/png", run_ms, sim.png.p, sim.png.len);
        return;
    }
    if (rt_write_bytes(o->output_dir, o->id, sim.png.p, sim.png.len, path, sizeof path) != 0) {
        emit_error(o->id, "internal", "could not write the output PNG");
        return;
    }
    emit(json_pack("{s:s, s:s, s:[{s:s, s:s}], s:I}", "type", "result", "id", o->id, "outputs",
                   "path", path, "content_type", "image/png", "run_ms", (json_int_t)run_ms));
}

/* Fires due timers; returns the poll timeout in ms until the next one (-1 none). */
static int run_timers(void)
{
    int64_t now = now_ns();
    int64_t next = INT64_MAX;
    for (int i = 0; i < SIM_MAX_OPS; i++) {
        struct op *o = &sim.ops[i];
        if (!o->used)
            continue;
        if (o->kind == OP_RUN && o->next_progress_ns && o->next_progress_ns <= now &&
            o->due_ns > now) {
            double p = (double)(now - o->start_ns) / (double)(o->due_ns - o->start_ns);
            emit(json_pack("{s:s, s:s, s:s, s:f}", "type", "progress", "id", o->id, "phase",
                           "generating", "progress", p));
            o->next_progress_ns += (o->due_ns - o->start_ns) / 4;
        }
        if (o->due_ns <= now) {
            if (o->kind == OP_LOAD) {
                if (sim.nmodels < SIM_MAX_MODELS && !find_model(o->model)) {
                    snprintf(sim.models[sim.nmodels].name, 128, "%s", o->model);
                    sim.models[sim.nmodels].vram_mb = o->vram_mb;
                    sim.nmodels++;
                }
                emit(json_pack("{s:s, s:s, s:s, s:I, s:I}", "type", "loaded", "id", o->id,
                               "model", o->model, "vram_mb", (json_int_t)o->vram_mb, "load_ms",
                               (json_int_t)((now - o->start_ns) / 1000000)));
            } else {
                finish_run(o);
            }
            free_op(o);
            continue;
        }
        if (o->due_ns < next)
            next = o->due_ns;
        if (o->kind == OP_RUN && o->next_progress_ns && o->next_progress_ns < next)
            next = o->next_progress_ns;
    }
    if (next == INT64_MAX)
        return -1;
    int64_t ms = (next - now + 999999) / 1000000;
    return ms > 60000 ? 60000 : (int)ms;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: gpuq-sim-runtime [--scale F] [--step-ms MS] [--model NAME=STEP_MS]...\n"
            "                        [--fault oom|crash|hang|solid|bad_input|cuda|garbage|flood|exit]\n"
            "                        [--fault-rate P] [--fault-file PATH] [--vram-mb MB] [--seed N]\n"
            "                        [--record FILE]\n");
}

int main(int argc, char **argv)
{
    /* The picture and its PNG now live in buffers kept from job to job
     * (sim.art, sim.png), but a job's JSON still comes and goes. With
     * glibc's default 128 KiB trim threshold a heap that grew once (a large
     * picture, the libpng encoder this runtime used before) was shrunk with
     * brk and grown again per job: a TLB shootdown and fresh page faults,
     * half the runtime's CPU on short jobs (perf, make bench). Keeping up to
     * 8 MiB of free heap costs nothing a job would not take again. */
    mallopt(M_TRIM_THRESHOLD, 8 << 20);
    mallopt(M_TOP_PAD, 1 << 20);
    sim.scale = 1.0;
    sim.step_ms = 80; /* 30 steps at 1024x1024: 2.4 s, the seeds' image time */
    sim.fault_rate = 1.0;
    sim.rng = 0x2545f4914f6cdd1dull ^ (uint64_t)getpid();
    sim.inline_max = rt_inline_max();
    const char *env_vram = getenv("GPUQ_VRAM_TOTAL_MB");
    sim.vram_total_mb = env_vram ? atoll(env_vram) : 32607;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0) {
            usage();
            return 0;
        }
        if (!v) {
            usage();
            return 2;
        }
        i++;
        if (strcmp(a, "--scale") == 0) {
            sim.scale = atof(v);
        } else if (strcmp(a, "--step-ms") == 0) {
            sim.step_ms = atof(v);
        } else if (strcmp(a, "--model") == 0) {
            const char *eq = strchr(v, '=');
            if (!eq || eq == v || (size_t)(eq - v) >= 128 || sim.nrules >= SIM_MAX_STEP_RULES) {
                usage();
                return 2;
            }
            struct step_rule *r = &sim.rules[sim.nrules++];
            snprintf(r->model, sizeof r->model, "%.*s", (int)(eq - v), v);
            r->step_ms = atof(eq + 1);
        } else if (strcmp(a, "--fault") == 0) {
            snprintf(sim.fault, sizeof sim.fault, "%s", v);
        } else if (strcmp(a, "--fault-rate") == 0) {
            sim.fault_rate = atof(v);
        } else if (strcmp(a, "--fault-file") == 0) {
            sim.fault_file = v;
        } else if (strcmp(a, "--vram-mb") == 0) {
            sim.vram_total_mb = atoll(v);
        } else if (strcmp(a, "--record") == 0) {
            sim.record = v;
        } else if (strcmp(a, "--seed") == 0) {
            sim.rng = (uint64_t)atoll(v) | 1;
        } else {
            usage();
            return 2;
        }
    }
    if (sim.scale < 0 || !isfinite(sim.scale) || sim.step_ms < 0 || sim.vram_total_mb <= 0) {
        usage();
        return 2;
    }
    char start_fault[64] = "";
    peek_fault_file(start_fault, sizeof start_fault);
    if (strcmp(start_fault, "exit") == 0 ||
        (strcmp(sim.fault, "exit") == 0 && (sim.fault_rate >= 1 || rand01() < sim.fault_rate))) {
        fprintf(stderr, "gpuq-sim-runtime: simulated exit at start\n");
        return 3;
    }
    signal(SIGPIPE, SIG_IGN);
    emit(json_pack("{s:s, s:i, s:s, s:s}", "type", "hello", "protocol", SIM_PROTOCOL, "runtime",
                   "gpuq-sim-runtime", "version", "0.1.0"));

    char *buf = malloc(SIM_LINE_MAX);
    size_t len = 0;
    bool discarding = false;
    if (!buf)
        return 1;
    for (;;) {
        int timeout = run_timers();
        struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
        int pr = poll(&pfd, 1, timeout);
        if (pr < 0 && errno != EINTR)
            break;
        if (pr <= 0)
            continue;
        ssize_t n = read(STDIN_FILENO, buf + len, SIM_LINE_MAX - len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            break; /* the agent closed our stdin: exit */
        len += (size_t)n;
        size_t start = 0;
        for (size_t i = 0; i < len; i++) {
            if (buf[i] != '\n')
                continue;
            if (!discarding && !handle_line(buf + start, i - start)) {
                free(buf);
                return 0;
            }
            discarding = false;
            start = i + 1;
        }
        memmove(buf, buf + start, len - start);
        len -= start;
        if (len == SIM_LINE_MAX) {
            say("warn", "discarding an over-long input line");
            discarding = true;
            len = 0;
        }
    }
    free(buf);
    return 0;
}
