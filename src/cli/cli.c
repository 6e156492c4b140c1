/* cli.c: the context every gpuq command starts from: global flags, where the
 * server is and which key to present, and the common request/print steps. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/paths.h"

static struct opt global_opts[] = {
    {.name = "url", .arg = "URL", .help = "server URL (default $GPUQ_URL or " CLI_DEFAULT_URL ")"},
    {.name = "key", .arg = "KEY",
     .help = "API key (default $GPUQ_KEY; admin commands: $GPUQ_ADMIN_KEY, then DATA/admin.key, "
             "then $GPUQ_KEY)"},
    {.name = "json", .help = "print machine-readable JSON on stdout"},
    {.name = "help", .help = "show this help"},
    {0},
};

/* Reads the admin key from DATA/admin.key (DATA: paths_default_data) into
 * out and the file's path into path; 0 or GPUQ_ENOENT. */
static int read_admin_key(char *out, size_t outlen, char *path, size_t pathlen)
{
    char data[900];
    paths_default_data(data, sizeof data);
    snprintf(path, pathlen, "%s/admin.key", data);
    FILE *f = fopen(path, "r");
    if (!f)
        return GPUQ_ENOENT;
    size_t n = fread(out, 1, outlen - 1, f);
    fclose(f);
    out[n] = '\0';
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' '))
        out[--n] = '\0';
    return n > 0 ? 0 : GPUQ_ENOENT;
}

/* Picks the key to present and says where it came from (for messages).
 * --key wins; an admin command then takes $GPUQ_ADMIN_KEY, then
 * DATA/admin.key, and only then $GPUQ_KEY; other commands take $GPUQ_KEY. */
static const char *pick_key(struct cli *c, const char *flag, char *admin_key, size_t size)
{
    if (flag && *flag) {
        snprintf(c->key_source, sizeof c->key_source, "--key");
        return flag;
    }
    const char *v;
    if (c->admin) {
        if ((v = getenv("GPUQ_ADMIN_KEY")) && *v) {
            snprintf(c->key_source, sizeof c->key_source, "$GPUQ_ADMIN_KEY");
            return v;
        }
        char path[1024];
        if (read_admin_key(admin_key, size, path, sizeof path) == 0) {
            snprintf(c->key_source, sizeof c->key_source, "%.200s", path);
            return admin_key;
        }
    }
    if ((v = getenv("GPUQ_KEY")) && *v) {
        snprintf(c->key_source, sizeof c->key_source, "$GPUQ_KEY");
        return v;
    }
    return NULL;
}

int cli_start(struct cli *c, const char *cmd, const char *usage, const char *about,
              struct opt *table, int argc, char **argv)
{
    c->cmd = cmd;
    for (struct opt *o = global_opts; o->name; o++) {
        o->nvalues = 0;
        o->value = NULL;
    }
    struct opt *tables[] = {table, global_opts, NULL};
    if (opts_parse(cmd, tables, argc, argv, c->pos, CLI_MAX_POS, &c->npos) < 0)
        return CLI_EUSAGE;
    if (opts_given(opts_find(global_opts, "help"))) {
        printf("usage: gpuq %s\n\n%s\n\n", usage, about);
        if (table && table->name) {
            printf("flags:\n");
            opts_print_help(table);
        }
        printf("global flags:\n");
        opts_print_help(global_opts);
        return -1;
    }
    c->json = opts_given(opts_find(global_opts, "json"));

    const char *url = opts_find(global_opts, "url")->value;
    if (!url)
        url = getenv("GPUQ_URL");
    if (!url || !*url)
        url = CLI_DEFAULT_URL;
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
        fprintf(stderr, "gpuq %s: --url: expected http://HOST:PORT, got '%s'\n", cmd, url);
        return CLI_EUSAGE;
    }
    snprintf(c->url, sizeof c->url, "%s", url);

    char admin_key[256] = "";
    const char *key = pick_key(c, opts_find(global_opts, "key")->value, admin_key,
                               sizeof admin_key);
    if (!key) {
        if (c->admin)
            fprintf(stderr, "gpuq %s: no admin key: set GPUQ_ADMIN_KEY, pass --key, or run "
                            "where DATA/admin.key is readable (DATA: " PATHS_DATA_HELP
                            "); $GPUQ_KEY is tried last\n",
                    cmd);
        else
            fprintf(stderr, "gpuq %s: no API key: set GPUQ_KEY or pass --key (an admin "
                            "creates one with: gpuq tenant add NAME)\n", cmd);
        return CLI_EUSAGE;
    }
    int rc = client_init(&c->http, c->url, key);
    memset(admin_key, 0, sizeof admin_key);
    if (rc < 0) {
        fprintf(stderr, "gpuq %s: cannot start the HTTP client\n", cmd);
        return CLI_EUNREACHABLE;
    }
    return CLI_OK;
}

int cli_want_args(struct cli *c, size_t lo, size_t hi, const char *usage)
{
    if (c->npos >= lo && c->npos <= hi)
        return CLI_OK;
    if (c->npos < lo)
        fprintf(stderr, "gpuq %s: missing argument (usage: gpuq %s)\n", c->cmd, usage);
    else
        fprintf(stderr, "gpuq %s: unexpected argument '%s' (usage: gpuq %s)\n", c->cmd,
                c->pos[hi], usage);
    return CLI_EUSAGE;
}

void cli_finish(struct cli *c)
{
    client_fini(&c->http);
}

int cli_call(struct cli *c, const char *method, const char *path, json_t *body,
             long timeout_s, json_t **out)
{
    struct client_resp r;
    client_resp_init(&r);
    *out = NULL;
    int rc = client_request(&c->http, c->cmd, method, path, body, timeout_s, &r);
    if (rc < 0) {
        client_resp_fini(&r);
        return CLI_EUNREACHABLE;
    }
    if (r.status < 200 || r.status >= 300) {
        client_print_error(c->cmd, &r);
        if (r.status == 403 && c->admin)
            fprintf(stderr, "gpuq %s: the key used came from %s, which is not the admin key; "
                            "pass the admin key with GPUQ_ADMIN_KEY=... or --key, or run where "
                            "DATA/admin.key is readable (DATA: " PATHS_DATA_HELP ")\n",
                    c->cmd, c->key_source);
        client_resp_fini(&r);
        return CLI_EREFUSED;
    }
    if (r.body.len == 0) {
        *out = json_object();
    } else {
        *out = client_json(c->cmd, &r);
        if (!*out) {
            client_resp_fini(&r);
            return CLI_EREFUSED;
        }
    }
    client_resp_fini(&r);
    return CLI_OK;
}

void cli_print_json(const json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (s) {
        puts(s);
        free(s);
    }
}
