/* cli.h: what the gpuq commands share: the context built from the global
 * flags (--url, --key, --json), the exit codes, and the commands themselves.
 *
 * Exit codes: 0 done; 1 the server refused the request or the job ended
 * failed/cancelled; 2 usage error; 3 the server could not be reached. */
#ifndef GPUQ_CLI_H
#define GPUQ_CLI_H

#include <jansson.h>

#include "cli/client.h"
#include "cli/opts.h"

#define CLI_OK 0
#define CLI_EREFUSED 1
#define CLI_EUSAGE 2
#define CLI_EUNREACHABLE 3

#define CLI_DEFAULT_URL "http://127.0.0.1:7070"
#define CLI_REQUEST_TIMEOUT_S 60L
#define CLI_MAX_POS 8

struct cli {
    const char *cmd;        /* "submit", "tenant add", … for messages */
    int json;               /* --json: machine-readable output on stdout */
    int admin;              /* the command is an admin one (may use DATA/admin.key) */
    char url[1024];
    char key_source[256];   /* where the key came from: "--key", "$GPUQ_KEY", a file */
    struct client http;
    const char *pos[CLI_MAX_POS]; /* positional arguments */
    size_t npos;
};

/* cli_start parses the command's flags (and the global ones), prints help for
 * --help, resolves URL and key and opens the client. Returns CLI_OK, -1 when
 * help was printed (exit 0), or an exit code. */
int cli_start(struct cli *c, const char *cmd, const char *usage, const char *about,
              struct opt *table, int argc, char **argv);
void cli_finish(struct cli *c);
/* cli_want_args: CLI_OK when lo..hi positional arguments were given; else
 * says which is missing or unexpected, with the usage, and returns CLI_EUSAGE. */
int cli_want_args(struct cli *c, size_t lo, size_t hi, const char *usage);

/* cli_call sends a request and returns its JSON answer in *out when the
 * status is expected_lo..expected_hi; otherwise prints the error and returns
 * the exit code. */
int cli_call(struct cli *c, const char *method, const char *path, json_t *body,
             long timeout_s, json_t **out);

/* cli_print_json prints v on stdout, indented. */
void cli_print_json(const json_t *v);

/* The commands: each returns an exit code. */
int cmd_submit(int argc, char **argv);
int cmd_get(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_cancel(int argc, char **argv);
int cmd_tenant_add(int argc, char **argv);
int cmd_tenant_ls(int argc, char **argv);
int cmd_worker_token_add(int argc, char **argv);
int cmd_worker_token_ls(int argc, char **argv);
int cmd_worker_token_revoke(int argc, char **argv);
int cmd_workers(int argc, char **argv);
int cmd_drain(int argc, char **argv);
int cmd_resubmit(int argc, char **argv);
int cmd_batch_submit(int argc, char **argv);
int cmd_batch_get(int argc, char **argv);
int cmd_batch_cancel(int argc, char **argv);
int cmd_batch_ls(int argc, char **argv);
int cmd_backlog(int argc, char **argv);
int cmd_capacity(int argc, char **argv);
int cmd_scale(int argc, char **argv); /* cmd_scale.c */
int cmd_top(int argc, char **argv);
/* cmd_ops.c */
int cmd_result(int argc, char **argv);
int cmd_wait(int argc, char **argv);
int cmd_worker_drain(int argc, char **argv);
int cmd_worker_undrain(int argc, char **argv);
int cmd_tenant_rm(int argc, char **argv);
int cmd_key_revoke(int argc, char **argv);
int cmd_key_rotate(int argc, char **argv);
int cmd_pause(int argc, char **argv);
int cmd_resume(int argc, char **argv);
int cmd_pauses(int argc, char **argv);
int cmd_promote(int argc, char **argv);

#endif
