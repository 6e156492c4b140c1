/* cmd_ops.c: the everyday commands beside submit — result and wait — and the
 * operator's controls: worker drain/undrain, tenant removal, key revocation
 * and rotation, pausing a capability or a lane, and moving a job to the front
 * of its queue. A rotated key is printed once, on stdout alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/render.h"
#include "cli/wait.h"

static const char *const lanes[] = {"interactive", "batch", NULL};

static struct opt no_opts[] = {{0}};

/* Sends METHOD PREFIX/ARG[/SUFFIX], ARG the first positional argument escaped. */
static int call_on_arg(struct cli *c, const char *method, const char *prefix, const char *suffix,
                       json_t **v)
{
    char *e = client_escape(c->pos[0]);
    char path[512];
    snprintf(path, sizeof path, "%s/%s%s%s", prefix, e, suffix ? "/" : "", suffix ? suffix : "");
    free(e);
    return cli_call(c, method, path, NULL, CLI_REQUEST_TIMEOUT_S, v);
}

/* ---- result and wait ---- */

static struct opt result_opts[] = {
    {.name = "output", .arg = "FILE", .help = "save the result to FILE (also -o FILE)"},
    {.name = "out", .arg = "DIR", .help = "save the result as DIR/ID.EXT (default: .)"},
    {0},
};

int cmd_result(int argc, char **argv)
{
    struct cli c = {0};
    const char *usage = "result ID [-o FILE | --out DIR]";
    int rc = cli_start(&c, "result", usage,
                       "Downloads the result of a succeeded job to ID.EXT (EXT from its type), "
                       "FILE or DIR/ID.EXT, and prints the file name. A job not succeeded "
                       "exits as `gpuq wait` does for its state (1 while it is queued or "
                       "running).",
                       result_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    struct opt *file = opts_find(result_opts, "output"), *dir = opts_find(result_opts, "out");
    json_t *job = NULL;
    if ((rc = cli_want_args(&c, 1, 1, usage)) != CLI_OK)
        goto out;
    if (opts_given(file) && opts_given(dir)) {
        fprintf(stderr, "gpuq result: --output and --out: give one\n");
        rc = CLI_EUSAGE;
        goto out;
    }
    if ((rc = call_on_arg(&c, "GET", "/v1/jobs", NULL, &job)) != CLI_OK)
        goto out;
    const char *state = json_string_value(json_object_get(job, "state"));
    const json_t *result = json_object_get(job, "result");
    if (!state || strcmp(state, "succeeded") != 0) {
        fprintf(stderr, "gpuq result: job %s is %s; no result%s\n", c.pos[0],
                state ? state : "in an unknown state",
                state && (!strcmp(state, "queued") || !strcmp(state, "running"))
                    ? " yet (gpuq wait ID)"
                    : "");
        rc = wait_outcome_code(state);
        if (rc == CLI_OK)
            rc = CLI_EREFUSED;
        goto out;
    }
    if (!json_is_object(result)) {
        fprintf(stderr, "gpuq result: job %s succeeded but its result is no longer kept\n",
                c.pos[0]);
        rc = CLI_EREFUSED;
        goto out;
    }
    char path[1024];
    wait_result_path(c.pos[0], json_string_value(json_object_get(result, "content_type")),
                     opts_given(file) ? file->value : NULL, dir->value, path, sizeof path);
    if ((rc = wait_download(&c, c.pos[0], path)) == CLI_OK)
        printf("%s\n", path);
out:
    json_decref(job);
    cli_finish(&c);
    return rc;
}

static struct opt wait_opts[] = {
    {.name = "timeout", .arg = "S", .help = "give up waiting after S seconds (exit 8)"},
    {0},
};

int cmd_wait(int argc, char **argv)
{
    struct cli c = {0};
    const char *usage = "wait ID [--timeout S]";
    int rc = cli_start(&c, "wait", usage,
                       "Follows a job to its end, showing its progress on stderr (a bar on a "
                       "terminal). Exit status by outcome: 0 succeeded, 4 failed, 5 dead, "
                       "6 expired, 7 cancelled, 8 still going when --timeout ran out.",
                       wait_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    double timeout = 0;
    struct opt *o = opts_find(wait_opts, "timeout");
    json_t *job = NULL;
    if ((rc = cli_want_args(&c, 1, 1, usage)) != CLI_OK)
        goto out;
    if (opts_given(o)) {
        long long s;
        if (opts_int(c.cmd, o, 1, 86400LL * 365, &s) < 0) {
            rc = CLI_EUSAGE;
            goto out;
        }
        timeout = (double)s;
    }
    if ((rc = wait_job(&c, c.pos[0], timeout, &job)) != CLI_OK)
        goto out;
    const char *state = json_string_value(json_object_get(job, "state"));
    rc = wait_outcome_code(state);
    if (c.json) {
        cli_print_json(job);
    } else if (rc != CLI_OK) {
        const json_t *err = json_object_get(job, "error");
        char cls[64], msg[512];
        if (json_is_object(err))
            fprintf(stderr, "gpuq wait: job %s %s: %s: %s\n", c.pos[0], state,
                    render_str(err, "class", cls, sizeof cls),
                    render_str(err, "message", msg, sizeof msg));
    }
out:
    json_decref(job);
    cli_finish(&c);
    return rc;
}

/* ---- admin: workers ---- */

static int worker_change(int argc, char **argv, const char *cmd, const char *verb,
                         const char *about, const char *done)
{
    struct cli c = {.admin = 1};
    char usage[64];
    snprintf(usage, sizeof usage, "%s WORKER", cmd);
    int rc = cli_start(&c, cmd, usage, about, no_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    json_t *v = NULL;
    if ((rc = cli_want_args(&c, 1, 1, usage)) == CLI_OK &&
        (rc = call_on_arg(&c, "POST", "/v1/workers", verb, &v)) == CLI_OK) {
        if (c.json)
            cli_print_json(v);
        else
            printf("worker %s: %s\n", c.pos[0], done);
    }
    json_decref(v);
    cli_finish(&c);
    return rc;
}

int cmd_worker_drain(int argc, char **argv)
{
    return worker_change(argc, argv, "worker drain", "drain",
                         "Drains a worker: it takes no new jobs and finishes those it holds; "
                         "it stays registered, idle, until `gpuq worker undrain`.",
                         "draining");
}

int cmd_worker_undrain(int argc, char **argv)
{
    return worker_change(argc, argv, "worker undrain", "undrain",
                         "Undoes a drain: the worker takes jobs again.", "taking jobs again");
}

/* ---- admin: tenants and keys ---- */

int cmd_tenant_rm(int argc, char **argv)
{
    struct cli c = {.admin = 1};
    const char *usage = "tenant rm NAME";
    int rc = cli_start(&c, "tenant rm", usage,
                       "Removes a tenant: its key stops working at once. Jobs it already "
                       "submitted still run and are kept for the retention period.",
                       no_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    json_t *v = NULL;
    if ((rc = cli_want_args(&c, 1, 1, usage)) == CLI_OK &&
        (rc = call_on_arg(&c, "DELETE", "/v1/tenants", NULL, &v)) == CLI_OK) {
        if (c.json)
            cli_print_json(v);
        else
            printf("tenant %s: removed\n", c.pos[0]);
    }
    json_decref(v);
    cli_finish(&c);
    return rc;
}

int cmd_key_revoke(int argc, char **argv)
{
    struct cli c = {.admin = 1};
    const char *usage = "key revoke TENANT";
    int rc = cli_start(&c, "key revoke", usage,
                       "Revokes a tenant's API key: it stops working at once; the tenant and "
                       "its jobs stay. `gpuq key rotate TENANT` gives it a new one.",
                       no_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    json_t *v = NULL;
    if ((rc = cli_want_args(&c, 1, 1, usage)) == CLI_OK &&
        (rc = call_on_arg(&c, "DELETE", "/v1/tenants", "key", &v)) == CLI_OK) {
        if (c.json)
            cli_print_json(v);
        else
            printf("tenant %s: key revoked\n", c.pos[0]);
    }
    json_decref(v);
    cli_finish(&c);
    return rc;
}

int cmd_key_rotate(int argc, char **argv)
{
    struct cli c = {.admin = 1};
    const char *usage = "key rotate TENANT";
    int rc = cli_start(&c, "key rotate", usage,
                       "Gives a tenant a new API key and prints it (shown this once only); the "
                       "old key stops working at once. The tenant's jobs stay its own.",
                       no_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    json_t *v = NULL;
    if ((rc = cli_want_args(&c, 1, 1, usage)) == CLI_OK &&
        (rc = call_on_arg(&c, "POST", "/v1/tenants", "key", &v)) == CLI_OK) {
        if (c.json) {
            cli_print_json(v);
        } else {
            char key[256];
            printf("%s\n", render_str(v, "key", key, sizeof key));
            fprintf(stderr, "tenant %s: new key above, shown only once; the old one no longer "
                            "works\n", c.pos[0]);
            memset(key, 0, sizeof key);
        }
    }
    json_decref(v);
    cli_finish(&c);
    return rc;
}

/* ---- admin: pause, resume, promote ---- */

static struct opt pause_opts[] = {
    {.name = "capability", .arg = "CAP", .help = "the capability whose queued jobs wait"},
    {.name = "lane", .arg = "L", .help = "interactive | batch: that lane, in every capability"},
    {0},
};

/* Prints what is paused now, from a {"capabilities":[…],"lanes":[…]} answer. */
static void print_pauses(const json_t *v)
{
    const char *names[] = {"capabilities", "lanes"};
    int any = 0;
    for (size_t k = 0; k < 2; k++) {
        const json_t *a = json_object_get(v, names[k]);
        size_t i;
        const json_t *x;
        json_array_foreach(a, i, x) {
            printf("paused %s %s\n", k ? "lane" : "capability", json_string_value(x));
            any = 1;
        }
    }
    if (!any)
        printf("nothing paused\n");
}

static int pause_change(int argc, char **argv, const char *cmd, const char *about)
{
    struct cli c = {.admin = 1};
    char usage[96];
    snprintf(usage, sizeof usage, "%s (--capability CAP | --lane interactive|batch)", cmd);
    int rc = cli_start(&c, cmd, usage, about, pause_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    struct opt *cap = opts_find(pause_opts, "capability"), *lane = opts_find(pause_opts, "lane");
    json_t *v = NULL;
    if ((rc = cli_want_args(&c, 0, 0, usage)) != CLI_OK)
        goto out;
    if (opts_given(cap) == opts_given(lane)) {
        fprintf(stderr, "gpuq %s: give one of --capability CAP or --lane L\n", cmd);
        rc = CLI_EUSAGE;
        goto out;
    }
    if (opts_given(lane) && opts_choice(cmd, lane, lanes) < 0) {
        rc = CLI_EUSAGE;
        goto out;
    }
    char *e = client_escape(opts_given(cap) ? cap->value : lane->value);
    char path[512];
    snprintf(path, sizeof path, "/v1/%s/%s/%s", opts_given(cap) ? "capabilities" : "lanes", e,
             cmd);
    free(e);
    if ((rc = cli_call(&c, "POST", path, NULL, CLI_REQUEST_TIMEOUT_S, &v)) == CLI_OK) {
        if (c.json)
            cli_print_json(v);
        else
            print_pauses(v);
    }
out:
    json_decref(v);
    cli_finish(&c);
    return rc;
}

int cmd_pause(int argc, char **argv)
{
    return pause_change(argc, argv, "pause",
                        "Pauses a capability or a lane: its queued jobs wait (their ETA gives "
                        "way to a waiting reason); running jobs finish. Lasts until `gpuq "
                        "resume` or a restart of gpuqd. Prints what is paused.");
}

int cmd_resume(int argc, char **argv)
{
    return pause_change(argc, argv, "resume",
                        "Resumes a paused capability or lane: its queued jobs are placed "
                        "again. Prints what is still paused.");
}

int cmd_pauses(int argc, char **argv)
{
    struct cli c = {.admin = 1};
    int rc = cli_start(&c, "pauses", "pauses", "Lists the paused capabilities and lanes.",
                       no_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    json_t *v = NULL;
    if ((rc = cli_want_args(&c, 0, 0, "pauses")) == CLI_OK &&
        (rc = cli_call(&c, "GET", "/v1/pauses", NULL, CLI_REQUEST_TIMEOUT_S, &v)) == CLI_OK) {
        if (c.json)
            cli_print_json(v);
        else
            print_pauses(v);
    }
    json_decref(v);
    cli_finish(&c);
    return rc;
}

int cmd_promote(int argc, char **argv)
{
    struct cli c = {.admin = 1};
    const char *usage = "promote ID";
    int rc = cli_start(&c, "promote", usage,
                       "Moves a queued job to the front of its queue: it is placed before every "
                       "other job of its lane (interactive still goes before batch).",
                       no_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    json_t *v = NULL;
    if ((rc = cli_want_args(&c, 1, 1, usage)) == CLI_OK &&
        (rc = call_on_arg(&c, "POST", "/v1/jobs", "promote", &v)) == CLI_OK) {
        if (c.json) {
            cli_print_json(v);
        } else {
            char line[512];
            render_progress(v, line, sizeof line);
            printf("%s (front of its queue)\n", line);
        }
    }
    json_decref(v);
    cli_finish(&c);
    return rc;
}
