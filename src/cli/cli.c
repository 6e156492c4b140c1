/* cli.c: the context every gpuq command starts from: global flags, where the
 * server is and which key to present, and the common request/print steps. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

static struct opt global_opts[] = {
    {.name = "url", .arg = "URL", .help = "server URL (default $GPUQ_URL or " CLI_DEFAULT_URL ")"},
    {.name = "key", .arg = "KEY", .help = "API key (default $GPUQ_KEY)"},
    {.name = "json", .help = "print machine-readable JSON on stdout"},
    {.name = "help", .help = "show this help"},
    {0},
};

/* Reads the admin key from $GPUQ_DATA/admin.key (default
 * ~/.local/share/gpuq/admin.key) into out; 0 or GPUQ_ENOENT. */
static int read_admin_key(char *out, size_t outlen)
{
    char path[1024];
    const char *data = getenv("GPUQ_DATA");
    const char *home = getenv("HOME");
    if (data && *data)
        snprintf(path, sizeof path, "%s/admin.key", data);
    else if (home && *home)
        snprintf(path, sizeof path, "%s/.local/share/gpuq/admin.key", home);
    else
        return GPUQ_ENOENT;
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

    const char *key = opts_find(global_opts, "key")->value;
    if (!key)
        key = getenv("GPUQ_KEY");
    char admin_key[256] = "";
    if ((!key || !*key) && c->admin && read_admin_key(admin_key, sizeof admin_key) == 0)
        key = admin_key;
    if (!key || !*key) {
        fprintf(stderr, "gpuq %s: no API key: set GPUQ_KEY or pass --key%s\n", cmd,
                c->admin ? " (or run where $GPUQ_DATA/admin.key is readable)"
                         : " (an admin creates one with: gpuq tenant add NAME)");
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
