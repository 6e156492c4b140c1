/* cmd_tokens.c: `gpuq worker-token ls` and `gpuq worker-token revoke ID|NAME`
 * (admin). Listing never shows a token's secret: only its id, name and age.
 * start_tokens returns CLI_OK with the client open (the caller finishes it),
 * or an exit code (-1: help printed) with nothing left open. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/render.h"

static struct opt tok_opts[] = {{0}};

static int start_tokens(struct cli *c, const char *cmd, const char *usage, const char *about,
                        int argc, char **argv, size_t npos)
{
    c->admin = 1;
    int rc = cli_start(c, cmd, usage, about, tok_opts, argc, argv);
    if (rc != CLI_OK)
        return rc;
    if ((rc = cli_want_args(c, npos, npos, usage)) != CLI_OK)
        cli_finish(c);
    return rc;
}

int cmd_worker_token_ls(int argc, char **argv)
{
    struct cli c = {0};
    int rc = start_tokens(&c, "worker-token ls", "worker-token ls",
                          "Lists the worker tokens that work (id, name, created); never "
                          "their secrets.",
                          argc, argv, 0);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    json_t *v = NULL;
    rc = cli_call(&c, "GET", "/v1/worker-tokens", NULL, CLI_REQUEST_TIMEOUT_S, &v);
    if (rc == CLI_OK && c.json) {
        cli_print_json(v);
    } else if (rc == CLI_OK) {
        json_t *list = json_object_get(v, "worker_tokens");
        size_t i;
        json_t *t;
        printf("%-8s %-32s %s\n", "ID", "NAME", "CREATED_MS");
        json_array_foreach(list, i, t)
        {
            printf("%-8lld %-32s %lld\n", (long long)json_integer_value(json_object_get(t, "id")),
                   json_string_value(json_object_get(t, "name")),
                   (long long)json_integer_value(json_object_get(t, "created_ms")));
        }
    }
    json_decref(v);
    cli_finish(&c);
    return rc;
}

/* The id of the token arg names: a number is an id; a name must name exactly one. */
static int resolve(struct cli *c, const char *arg, long long *id)
{
    char *end;
    long long n = strtoll(arg, &end, 10);
    if (*arg && !*end && n > 0) {
        *id = n;
        return CLI_OK;
    }
    json_t *v = NULL;
    int rc = cli_call(c, "GET", "/v1/worker-tokens", NULL, CLI_REQUEST_TIMEOUT_S, &v);
    if (rc != CLI_OK)
        return rc;
    int found = 0;
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(v, "worker_tokens"), i, t)
    {
        const char *name = json_string_value(json_object_get(t, "name"));
        if (name && !strcmp(name, arg)) {
            *id = json_integer_value(json_object_get(t, "id"));
            found++;
        }
    }
    json_decref(v);
    if (found == 1)
        return CLI_OK;
    if (found == 0)
        fprintf(stderr, "gpuq worker-token revoke: no worker token named '%s' (gpuq "
                        "worker-token ls lists them)\n", arg);
    else
        fprintf(stderr, "gpuq worker-token revoke: %d worker tokens are named '%s': give the "
                        "id (gpuq worker-token ls)\n", found, arg);
    return CLI_EREFUSED;
}

int cmd_worker_token_revoke(int argc, char **argv)
{
    struct cli c = {0};
    const char *usage = "worker-token revoke ID|NAME";
    int rc = start_tokens(&c, "worker-token revoke", usage,
                          "Revokes a worker token: agents using it are refused (401) from "
                          "their next request on.",
                          argc, argv, 1);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    long long id = 0;
    json_t *v = NULL;
    if ((rc = resolve(&c, c.pos[0], &id)) == CLI_OK) {
        char path[64];
        snprintf(path, sizeof path, "/v1/worker-tokens/%lld", id);
        rc = cli_call(&c, "DELETE", path, NULL, CLI_REQUEST_TIMEOUT_S, &v);
    }
    if (rc == CLI_OK && c.json)
        cli_print_json(v);
    else if (rc == CLI_OK)
        printf("worker token %lld (%s) revoked: agents using it are refused from now on\n", id,
               json_string_value(json_object_get(v, "name")));
    json_decref(v);
    cli_finish(&c);
    return rc;
}
