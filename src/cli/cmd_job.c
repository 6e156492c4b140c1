/* cmd_job.c: the job commands of gpuq: submit (and --wait), get, ls, cancel. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cli.h"
#include "cli/render.h"
#include "cli/wait.h"
#include "common/alloc.h"
#include "common/buf.h"
#include "common/clock.h"

static const char *const lanes[] = {"interactive", "batch", NULL};
static const char *const tiers[] = {"paid", "free", NULL};
static const char *const states[] = {"queued", "running", "succeeded", "failed", "cancelled",
                                     "dead",   "expired", NULL};

/* A --param value: the JSON it is when it parses as JSON (12, 0.5, true,
 * null, "s", [1,2], {"k":1}), else the text as a string. */
static json_t *param_value(const char *v)
{
    json_t *j = json_loads(v, JSON_DECODE_ANY, NULL);
    return j ? j : json_string(v);
}

/* The parameters the head knows (docs/api); any other --param goes to
 * params.extra, which the head passes to the runtime untouched. */
static const char *const known_params[] = {"prompt", "negative_prompt", "width", "height",
                                           "steps",  "frames",          "seed",  "guidance",
                                           "fault",  "sim_ms",          NULL};

static bool known_param(const char *key)
{
    for (const char *const *k = known_params; *k; k++)
        if (!strcmp(*k, key))
            return true;
    return false;
}

/* Adds --NAME as an integer params[key] when given. */
static int put_int_param(const char *cmd, struct opt *table, const char *flag, const char *key,
                         json_t *params)
{
    struct opt *o = opts_find(table, flag);
    if (!opts_given(o))
        return 0;
    long long n;
    if (opts_int(cmd, o, INT64_MIN / 2, INT64_MAX / 2, &n) < 0)
        return CLI_EUSAGE;
    json_object_set_new(params, key, json_integer(n));
    return 0;
}

static struct opt submit_opts[] = {
    {.name = "capability", .arg = "CAP", .help = "capability tag, e.g. image.fast (required)"},
    {.name = "model", .arg = "M", .help = "model (default: the capability's default)"},
    {.name = "prompt", .arg = "P", .help = "prompt text"},
    {.name = "negative-prompt", .arg = "P", .help = "negative prompt text"},
    {.name = "width", .arg = "W", .help = "width in pixels (64..4096, multiple of 8)"},
    {.name = "height", .arg = "H", .help = "height in pixels (64..4096, multiple of 8)"},
    {.name = "steps", .arg = "S", .help = "sampling steps (1..500)"},
    {.name = "frames", .arg = "F", .help = "video frames (0..1000)"},
    {.name = "seed", .arg = "N", .help = "random seed"},
    {.name = "param", .arg = "K=V",
     .help = "any other parameter (V as JSON if it parses; unknown K go to params.extra)",
     .repeat = 1},
    {.name = "input", .arg = "NAME=FILE",
     .help = "upload FILE and hand it to the runtime as input NAME (e.g. image=in.png)",
     .repeat = 1},
    {.name = "lane", .arg = "L", .help = "interactive | batch (default interactive)"},
    {.name = "priority", .arg = "T", .help = "paid | free (default: the tenant's tier)"},
    {.name = "idempotency-key", .arg = "K",
     .help = "a retried submit with K returns the first job"},
    {.name = "deadline", .arg = "MS", .help = "deadline, Unix ms (or +MS from now)"},
    {.name = "wait", .help = "wait for the job to end, showing progress, and download its result"},
    {.name = "timeout", .arg = "S", .help = "with --wait: give up waiting after S seconds"},
    {.name = "output", .arg = "FILE",
     .help = "with --wait: where to save the result (default ID.png; also -o FILE)"},
    {.name = "out", .arg = "DIR", .help = "with --wait: save the result as DIR/ID.EXT"},
    {0},
};

/* Builds the POST /v1/jobs body from the flags; an exit code on error. */
static int build_submit_body(const char *cmd, json_t **out)
{
    struct opt *t = submit_opts;
    json_t *body = json_object();
    json_t *params = json_object();
    int rc = CLI_EUSAGE;
    struct opt *o = opts_find(t, "capability");
    if (!opts_given(o) || !*o->value) {
        fprintf(stderr, "gpuq %s: --capability is required (e.g. --capability image.fast)\n",
                cmd);
        goto fail;
    }
    json_object_set_new(body, "capability", json_string(o->value));
    if (opts_given(o = opts_find(t, "model")))
        json_object_set_new(body, "model", json_string(o->value));
    if (opts_given(o = opts_find(t, "prompt")))
        json_object_set_new(params, "prompt", json_string(o->value));
    if (opts_given(o = opts_find(t, "negative-prompt")))
        json_object_set_new(params, "negative_prompt", json_string(o->value));
    if (put_int_param(cmd, t, "width", "width", params) ||
        put_int_param(cmd, t, "height", "height", params) ||
        put_int_param(cmd, t, "steps", "steps", params) ||
        put_int_param(cmd, t, "frames", "frames", params) ||
        put_int_param(cmd, t, "seed", "seed", params))
        goto fail;
    o = opts_find(t, "param");
    for (size_t i = 0; i < o->nvalues; i++) {
        const char *kv = o->values[i];
        const char *eq = strchr(kv, '=');
        if (!eq || eq == kv) {
            fprintf(stderr, "gpuq %s: --param: expected KEY=VALUE, got '%s'\n", cmd, kv);
            goto fail;
        }
        char *key = xstrndup(kv, (size_t)(eq - kv));
        if (known_param(key)) {
            json_object_set_new(params, key, param_value(eq + 1));
        } else {
            json_t *extra = json_object_get(params, "extra");
            if (!extra)
                json_object_set_new(params, "extra", extra = json_object());
            json_object_set_new(extra, key, param_value(eq + 1));
        }
        free(key);
    }
    if (json_object_size(params) > 0)
        json_object_set(body, "params", params);
    if (opts_given(o = opts_find(t, "lane"))) {
        if (opts_choice(cmd, o, lanes) < 0)
            goto fail;
        json_object_set_new(body, "lane", json_string(o->value));
    }
    if (opts_given(o = opts_find(t, "priority"))) {
        if (opts_choice(cmd, o, tiers) < 0)
            goto fail;
        json_object_set_new(body, "priority", json_string(o->value));
    }
    if (opts_given(o = opts_find(t, "idempotency-key")))
        json_object_set_new(body, "idempotency_key", json_string(o->value));
    if (opts_given(o = opts_find(t, "deadline"))) {
        long long ms;
        int relative = o->value[0] == '+';
        struct opt tmp = *o;
        tmp.value = o->value + relative;
        if (opts_int(cmd, &tmp, 0, INT64_MAX / 2, &ms) < 0)
            goto fail;
        if (relative)
            ms += clock_wall_ms();
        json_object_set_new(body, "deadline", json_integer(ms));
    }
    json_decref(params);
    *out = body;
    return CLI_OK;
fail:
    json_decref(params);
    json_decref(body);
    return rc;
}

/* The media type of an input file, by its name's extension. */
static const char *input_type(const char *path)
{
    static const char *const map[][2] = {{".png", "image/png"},   {".jpg", "image/jpeg"},
                                         {".jpeg", "image/jpeg"}, {".webp", "image/webp"},
                                         {".mp4", "video/mp4"},   {".json", "application/json"},
                                         {".txt", "text/plain"}};
    const char *dot = strrchr(path, '.');
    for (size_t i = 0; dot && i < sizeof map / sizeof map[0]; i++)
        if (!strcasecmp(dot, map[i][0]))
            return map[i][1];
    return "application/octet-stream";
}

/* Reads a whole file (malloc'd); NULL after printing why. */
static char *read_file(const char *cmd, const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "gpuq %s: --input: cannot open %s: %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    struct buf b;
    buf_init(&b);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        buf_append(&b, chunk, n);
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "gpuq %s: --input: cannot read %s\n", cmd, path);
        buf_fini(&b);
        return NULL;
    }
    *len = b.len;
    char *data = b.data ? b.data : xstrdup("");
    return data;
}

/* --input NAME=FILE: uploads each file (POST /v1/inputs) and names the upload
 * in the body's params.inputs. An exit code on error. */
static int attach_inputs(struct cli *c, json_t *body)
{
    struct opt *o = opts_find(submit_opts, "input");
    for (size_t i = 0; i < o->nvalues; i++) {
        const char *kv = o->values[i];
        const char *eq = strchr(kv, '=');
        if (!eq || eq == kv || !eq[1]) {
            fprintf(stderr, "gpuq %s: --input: expected NAME=FILE, got '%s'\n", c->cmd, kv);
            return CLI_EUSAGE;
        }
        size_t len = 0;
        char *data = read_file(c->cmd, eq + 1, &len);
        if (!data)
            return CLI_EUSAGE;
        struct client_resp r;
        client_resp_init(&r);
        int rc = client_upload(&c->http, c->cmd, "/v1/inputs", data, len, input_type(eq + 1),
                               CLI_REQUEST_TIMEOUT_S, &r);
        free(data);
        if (rc < 0) {
            client_resp_fini(&r);
            return CLI_EUNREACHABLE;
        }
        json_t *up = r.status == 201 ? client_json(c->cmd, &r) : NULL;
        if (r.status != 201)
            client_print_error(c->cmd, &r);
        client_resp_fini(&r);
        const char *id = json_string_value(json_object_get(up, "id"));
        if (!id) {
            json_decref(up);
            return CLI_EREFUSED;
        }
        json_t *params = json_object_get(body, "params");
        if (!params)
            json_object_set_new(body, "params", params = json_object());
        json_t *inputs = json_object_get(params, "inputs");
        if (!inputs)
            json_object_set_new(params, "inputs", inputs = json_object());
        char *name = xstrndup(kv, (size_t)(eq - kv));
        json_object_set_new(inputs, name, json_string(id));
        free(name);
        json_decref(up);
    }
    return CLI_OK;
}

/* Waits for a submitted job, prints the outcome and downloads the result. */
static int submit_wait(struct cli *c, const char *id)
{
    double timeout = 0;
    struct opt *o = opts_find(submit_opts, "timeout");
    if (opts_given(o)) {
        long long s;
        if (opts_int(c->cmd, o, 1, 86400 * 365, &s) < 0)
            return CLI_EUSAGE;
        timeout = (double)s;
    }
    json_t *job = NULL;
    int rc = wait_job(c, id, timeout, &job);
    if (rc != CLI_OK)
        return rc;
    const char *state = json_string_value(json_object_get(job, "state"));
    const json_t *result = json_object_get(job, "result");
    char path[1024] = "";
    if (strcmp(state, "succeeded") == 0 && json_is_object(result)) {
        o = opts_find(submit_opts, "output");
        const char *ct = json_string_value(json_object_get(result, "content_type"));
        wait_result_path(id, ct, opts_given(o) ? o->value : NULL,
                         opts_find(submit_opts, "out")->value, path, sizeof path);
        rc = wait_download(c, id, path);
        if (rc == CLI_OK)
            fprintf(stderr, "wrote %s\n", path);
    } else if (strcmp(state, "succeeded") != 0) {
        const json_t *err = json_object_get(job, "error");
        char cls[64], msg[512];
        if (json_is_object(err))
            fprintf(stderr, "gpuq %s: job %s %s: %s: %s\n", c->cmd, id, state,
                    render_str(err, "class", cls, sizeof cls),
                    render_str(err, "message", msg, sizeof msg));
        else
            fprintf(stderr, "gpuq %s: job %s %s\n", c->cmd, id, state);
        rc = CLI_EREFUSED;
    }
    if (c->json) {
        if (path[0] && rc == CLI_OK)
            json_object_set_new(job, "output_file", json_string(path));
        cli_print_json(job);
    } else if (path[0] && rc == CLI_OK) {
        printf("%s\n", path);
    }
    json_decref(job);
    return rc;
}

int cmd_submit(int argc, char **argv)
{
    struct cli c = {0};
    int rc = cli_start(&c, "submit",
                       "submit --capability CAP [--model M] [--prompt P] [--width W --height H "
                       "--steps S --frames F --seed N] [--param K=V …] [--input NAME=FILE …] "
                       "[--lane L] [--priority T] "
                       "[--idempotency-key K] [--deadline MS] [--wait [--output FILE | --out DIR]]",
                       "Submits a generation job. Prints the job id (with --json the job); with "
                       "--wait follows it to the end, printing progress to stderr, and saves its "
                       "result.",
                       submit_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    if (c.npos > 0) {
        fprintf(stderr, "gpuq submit: unexpected argument '%s'\n", c.pos[0]);
        cli_finish(&c);
        return CLI_EUSAGE;
    }
    int waiting = opts_given(opts_find(submit_opts, "wait"));
    const char *const need_wait[] = {"output", "out", "timeout"};
    for (size_t i = 0; i < sizeof need_wait / sizeof need_wait[0]; i++) {
        if (!waiting && opts_given(opts_find(submit_opts, need_wait[i]))) {
            fprintf(stderr, "gpuq submit: --%s needs --wait (or later: gpuq result ID --%s)\n",
                    need_wait[i], need_wait[i]);
            cli_finish(&c);
            return CLI_EUSAGE;
        }
    }
    if (opts_given(opts_find(submit_opts, "output")) && opts_given(opts_find(submit_opts, "out"))) {
        fprintf(stderr, "gpuq submit: --output and --out: give one\n");
        cli_finish(&c);
        return CLI_EUSAGE;
    }
    json_t *body = NULL;
    if ((rc = build_submit_body(c.cmd, &body)) != CLI_OK ||
        (rc = attach_inputs(&c, body)) != CLI_OK) {
        json_decref(body);
        cli_finish(&c);
        return rc;
    }
    json_t *job = NULL;
    rc = cli_call(&c, "POST", "/v1/jobs", body, CLI_REQUEST_TIMEOUT_S, &job);
    json_decref(body);
    if (rc != CLI_OK) {
        cli_finish(&c);
        return rc;
    }
    char id[128];
    render_str(job, "id", id, sizeof id);
    if (waiting) {
        char line[512];
        render_progress(job, line, sizeof line);
        fprintf(stderr, "submitted %s\n", line);
        rc = submit_wait(&c, id);
    } else if (c.json) {
        cli_print_json(job);
    } else {
        /* The id alone on stdout (ID=$(gpuq submit …) works); the estimate on stderr. */
        char line[512];
        render_progress(job, line, sizeof line);
        printf("%s\n", id);
        fprintf(stderr, "submitted %s\n", line);
    }
    json_decref(job);
    cli_finish(&c);
    return rc;
}

static struct opt no_opts[] = {{0}};

/* Runs a command that takes exactly one positional ID. */
static int start_with_id(struct cli *c, const char *cmd, const char *usage, const char *about,
                         struct opt *table, int argc, char **argv, char **eid)
{
    int rc = cli_start(c, cmd, usage, about, table, argc, argv);
    if (rc != CLI_OK)
        return rc;
    if (c->npos != 1) {
        fprintf(stderr, "gpuq %s: %s (usage: gpuq %s)\n", cmd,
                c->npos ? "expected one job id" : "missing job id", usage);
        cli_finish(c);
        return CLI_EUSAGE;
    }
    *eid = client_escape(c->pos[0]);
    return CLI_OK;
}

int cmd_get(int argc, char **argv)
{
    struct cli c = {0};
    char *eid = NULL;
    int rc = start_with_id(&c, "get", "get ID", "Shows a job: state, progress, ETA, result.",
                           no_opts, argc, argv, &eid);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    char path[256];
    snprintf(path, sizeof path, "/v1/jobs/%s", eid);
    json_t *job = NULL;
    rc = cli_call(&c, "GET", path, NULL, CLI_REQUEST_TIMEOUT_S, &job);
    if (rc == CLI_OK) {
        if (c.json)
            cli_print_json(job);
        else
            render_job(stdout, job);
    }
    json_decref(job);
    free(eid);
    cli_finish(&c);
    return rc;
}

int cmd_cancel(int argc, char **argv)
{
    struct cli c = {0};
    char *eid = NULL;
    int rc = start_with_id(&c, "cancel", "cancel ID",
                           "Cancels a queued or running job (a running job is aborted on its GPU).",
                           no_opts, argc, argv, &eid);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    char path[256];
    snprintf(path, sizeof path, "/v1/jobs/%s", eid);
    json_t *job = NULL;
    rc = cli_call(&c, "DELETE", path, NULL, CLI_REQUEST_TIMEOUT_S, &job);
    if (rc == CLI_OK) {
        if (c.json) {
            cli_print_json(job);
        } else {
            char st[32];
            const char *state = render_str(job, "state", st, sizeof st);
            printf("job %s: %s\n", c.pos[0], strcmp(state, "-") ? state : "cancelled");
        }
    }
    json_decref(job);
    free(eid);
    cli_finish(&c);
    return rc;
}

static struct opt ls_opts[] = {
    {.name = "state", .arg = "S",
     .help = "queued | running | succeeded | failed | cancelled | dead | expired"},
    {.name = "capability", .arg = "C", .help = "only jobs of this capability"},
    {.name = "limit", .arg = "N", .help = "at most N jobs (1..500, default 50)"},
    {.name = "after", .arg = "CURSOR",
     .help = "the page after CURSOR (printed by the previous page)"},
    {0},
};

int cmd_ls(int argc, char **argv)
{
    struct cli c = {0};
    int rc = cli_start(&c, "ls", "ls [--state S] [--capability C] [--limit N] [--after CURSOR]",
                       "Lists your jobs, newest first.", ls_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    struct buf q;
    buf_init(&q);
    buf_puts(&q, "/v1/jobs");
    char sep = '?';
    const char *names[] = {"state", "capability", "limit", "after"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        struct opt *o = opts_find(ls_opts, names[i]);
        if (!opts_given(o))
            continue;
        long long n;
        if ((strcmp(names[i], "state") == 0 && opts_choice(c.cmd, o, states) < 0) ||
            (strcmp(names[i], "limit") == 0 && opts_int(c.cmd, o, 1, 500, &n) < 0)) {
            rc = CLI_EUSAGE;
            goto out;
        }
        char *v = client_escape(o->value);
        buf_printf(&q, "%c%s=%s", sep, names[i], v);
        free(v);
        sep = '&';
    }
    if (c.npos > 0) {
        fprintf(stderr, "gpuq ls: unexpected argument '%s'\n", c.pos[0]);
        rc = CLI_EUSAGE;
        goto out;
    }
    json_t *page = NULL;
    rc = cli_call(&c, "GET", q.data, NULL, CLI_REQUEST_TIMEOUT_S, &page);
    if (rc == CLI_OK) {
        if (c.json) {
            cli_print_json(page);
        } else {
            render_jobs_table(stdout, json_object_get(page, "jobs"));
            char next[128];
            if (strcmp(render_str(page, "next", next, sizeof next), "-") != 0 && next[0])
                fprintf(stderr, "more: gpuq ls --after %s\n", next);
        }
    }
    json_decref(page);
out:
    buf_fini(&q);
    cli_finish(&c);
    return rc;
}
