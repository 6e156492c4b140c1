/* cmd_admin.c: the admin commands of gpuq: tenants, worker tokens, the worker
 * list and drain. A newly created key or token is printed once, on stdout
 * alone (so KEY=$(gpuq tenant add acme) works); nothing else prints secrets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/render.h"

static const char *const tiers[] = {"paid", "free", NULL};

static struct opt no_opts[] = {{0}};

/* cli_start for an admin command (one that may fall back to DATA/admin.key). */
static int start_admin(struct cli *c, const char *cmd, const char *usage, const char *about,
                       struct opt *table, int argc, char **argv)
{
    c->admin = 1;
    return cli_start(c, cmd, usage, about, table, argc, argv);
}

static struct opt tenant_add_opts[] = {
    {.name = "tier", .arg = "T", .help = "paid | free (default paid)"},
    {0},
};

int cmd_tenant_add(int argc, char **argv)
{
    struct cli c = {0};
    const char *usage = "tenant add NAME [--tier paid|free]";
    int rc = start_admin(&c, "tenant add", usage,
                         "Creates a tenant and prints its API key (shown this once only).",
                         tenant_add_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    if ((rc = cli_want_args(&c, 1, 1, usage)) != CLI_OK)
        goto out;
    json_t *body = json_object();
    json_object_set_new(body, "name", json_string(c.pos[0]));
    struct opt *tier = opts_find(tenant_add_opts, "tier");
    if (opts_given(tier)) {
        if (opts_choice(c.cmd, tier, tiers) < 0) {
            json_decref(body);
            rc = CLI_EUSAGE;
            goto out;
        }
        json_object_set_new(body, "tier", json_string(tier->value));
    }
    json_t *t = NULL;
    rc = cli_call(&c, "POST", "/v1/tenants", body, CLI_REQUEST_TIMEOUT_S, &t);
    json_decref(body);
    if (rc == CLI_OK) {
        if (c.json) {
            cli_print_json(t);
        } else {
            char name[128], tr[32], key[256];
            printf("%s\n", render_str(t, "key", key, sizeof key));
            fprintf(stderr, "created tenant %s (tier %s); the key above is shown only once\n",
                    render_str(t, "name", name, sizeof name), render_str(t, "tier", tr, sizeof tr));
            memset(key, 0, sizeof key);
        }
    }
    json_decref(t);
out:
    cli_finish(&c);
    return rc;
}

int cmd_tenant_ls(int argc, char **argv)
{
    struct cli c = {0};
    int rc = start_admin(&c, "tenant ls", "tenant ls", "Lists the tenants.", no_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    json_t *v = NULL;
    if ((rc = cli_want_args(&c, 0, 0, "tenant ls")) == CLI_OK &&
        (rc = cli_call(&c, "GET", "/v1/tenants", NULL, CLI_REQUEST_TIMEOUT_S, &v)) == CLI_OK) {
        if (c.json)
            cli_print_json(v);
        else
            render_tenants_table(stdout, json_object_get(v, "tenants"));
    }
    json_decref(v);
    cli_finish(&c);
    return rc;
}

int cmd_worker_token_add(int argc, char **argv)
{
    struct cli c = {0};
    const char *usage = "worker-token add [NAME]";
    int rc = start_admin(&c, "worker-token add", usage,
                         "Creates a token for gpuq-agent (--worker-token) and prints it (shown "
                         "this once only).",
                         no_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    if ((rc = cli_want_args(&c, 0, 1, usage)) != CLI_OK)
        goto out;
    json_t *body = json_object();
    json_object_set_new(body, "name", json_string(c.npos ? c.pos[0] : "agents"));
    json_t *t = NULL;
    rc = cli_call(&c, "POST", "/v1/worker-tokens", body, CLI_REQUEST_TIMEOUT_S, &t);
    json_decref(body);
    if (rc == CLI_OK) {
        if (c.json) {
            cli_print_json(t);
        } else {
            char name[128], tok[256];
            printf("%s\n", render_str(t, "token", tok, sizeof tok));
            fprintf(stderr, "created worker token %s; the token above is shown only once\n",
                    render_str(t, "name", name, sizeof name));
            memset(tok, 0, sizeof tok);
        }
    }
    json_decref(t);
out:
    cli_finish(&c);
    return rc;
}

int cmd_workers(int argc, char **argv)
{
    struct cli c = {0};
    int rc = start_admin(&c, "workers", "workers",
                         "Lists the workers (one per GPU): state, temperature, VRAM, loaded models "
                         "and inflight/concurrency (+ the job it may hold ahead).",
                         no_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    json_t *v = NULL;
    if ((rc = cli_want_args(&c, 0, 0, "workers")) == CLI_OK &&
        (rc = cli_call(&c, "GET", "/v1/workers", NULL, CLI_REQUEST_TIMEOUT_S, &v)) == CLI_OK) {
        if (c.json)
            cli_print_json(v);
        else
            render_workers_table(stdout, json_object_get(v, "workers"));
    }
    json_decref(v);
    cli_finish(&c);
    return rc;
}

/* POSTs an empty body to PREFIX/ID/SUFFIX, ID the first positional argument
 * (escaped); *v gets the answer. */
static int post_on_id(struct cli *c, const char *prefix, const char *suffix, json_t **v)
{
    char *eid = client_escape(c->pos[0]);
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s", prefix, eid, suffix);
    free(eid);
    return cli_call(c, "POST", path, NULL, CLI_REQUEST_TIMEOUT_S, v);
}

int cmd_resubmit(int argc, char **argv)
{
    struct cli c = {0};
    const char *usage = "resubmit ID";
    int rc = start_admin(&c, "resubmit", usage,
                         "Runs a dead, failed or expired job again, with a fresh retry budget "
                         "(its attempt history is kept).",
                         no_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    json_t *v = NULL;
    if ((rc = cli_want_args(&c, 1, 1, usage)) == CLI_OK &&
        (rc = post_on_id(&c, "/v1/jobs", "resubmit", &v)) == CLI_OK) {
        if (c.json) {
            cli_print_json(v);
        } else {
            char st[32];
            printf("job %s: %s\n", c.pos[0], render_str(v, "state", st, sizeof st));
        }
    }
    json_decref(v);
    cli_finish(&c);
    return rc;
}

int cmd_drain(int argc, char **argv)
{
    struct cli c = {0};
    const char *usage = "drain WORKER";
    int rc = start_admin(&c, "drain", usage,
                         "Drains a worker: it takes no new jobs and finishes those it holds; it "
                         "stays registered, idle, until `gpuq worker undrain`.",
                         no_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    json_t *v = NULL;
    if ((rc = cli_want_args(&c, 1, 1, usage)) == CLI_OK &&
        (rc = post_on_id(&c, "/v1/workers", "drain", &v)) == CLI_OK) {
        if (c.json)
            cli_print_json(v);
        else
            printf("worker %s: draining\n", c.pos[0]);
    }
    json_decref(v);
    cli_finish(&c);
    return rc;
}
