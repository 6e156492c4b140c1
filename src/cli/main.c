/* main.c: gpuq, the command-line client of gpuqd. Finds the command (one or
 * two words, e.g. "submit" or "tenant add") and hands it the other arguments. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

struct command {
    const char *word1, *word2; /* word2 NULL for one-word commands */
    int (*run)(int argc, char **argv);
    const char *summary;
};

static const struct command commands[] = {
    {"submit", NULL, cmd_submit, "submit a job (--wait: follow it and download the result)"},
    {"get", NULL, cmd_get, "show a job"},
    {"trace", NULL, cmd_trace, "show a job's trace: every step, as a timeline"},
    {"ls", NULL, cmd_ls, "list your jobs"},
    {"cancel", NULL, cmd_cancel, "cancel a queued or running job"},
    {"tenant", "add", cmd_tenant_add, "create a tenant and print its API key (admin)"},
    {"tenant", "ls", cmd_tenant_ls, "list tenants (admin)"},
    {"worker-token", "add", cmd_worker_token_add, "create a worker token for agents (admin)"},
    {"workers", NULL, cmd_workers, "list workers: state, temperature, VRAM, models, load"},
    {"drain", NULL, cmd_drain, "drain a worker (admin)"},
    {"resubmit", NULL, cmd_resubmit, "run a dead, failed or expired job again (admin)"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: gpuq COMMAND [flags]   (gpuq COMMAND --help for its flags)\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++) {
        char name[48];
        snprintf(name, sizeof name, "%s%s%s", commands[i].word1, commands[i].word2 ? " " : "",
                 commands[i].word2 ? commands[i].word2 : "");
        fprintf(f, "  %-20s %s\n", name, commands[i].summary);
    }
    fprintf(f, "\nglobal flags: --url URL (or $GPUQ_URL, default %s), --key KEY (or $GPUQ_KEY),\n"
               "  --json (machine-readable output). Admin commands without a key read\n"
               "  $GPUQ_DATA/admin.key (default ~/.local/share/gpuq/admin.key).\n"
               "exit status: 0 ok, 1 refused by the server or job failed, 2 usage, 3 server "
               "unreachable\n",
            CLI_DEFAULT_URL);
}

/* Global flags that take a value, so that their value is not taken for the
 * command word (gpuq --url http://… ls). */
static int takes_value(const char *a)
{
    return strcmp(a, "--url") == 0 || strcmp(a, "--key") == 0;
}

int main(int argc, char **argv)
{
    /* Find the first word that is neither a flag nor a flag's value. */
    int w = 1;
    while (w < argc && argv[w][0] == '-') {
        if (strcmp(argv[w], "--help") == 0 || strcmp(argv[w], "-h") == 0) {
            usage(stdout);
            return CLI_OK;
        }
        w += takes_value(argv[w]) ? 2 : 1;
    }
    if (w >= argc) {
        usage(stderr);
        return CLI_EUSAGE;
    }
    const char *word1 = argv[w];
    if (strcmp(word1, "help") == 0) {
        if (w + 1 < argc) {
            /* gpuq help submit → gpuq submit --help */
            for (size_t i = 0; i < NCOMMANDS; i++) {
                if (strcmp(commands[i].word1, argv[w + 1]) != 0)
                    continue;
                if (commands[i].word2 && !(w + 2 < argc && strcmp(commands[i].word2,
                                                                  argv[w + 2]) == 0))
                    continue;
                char help[] = "--help";
                char *hargv[] = {help};
                return commands[i].run(1, hargv);
            }
        }
        usage(stdout);
        return CLI_OK;
    }
    const struct command *cmd = NULL;
    int nwords = 1;
    int group = 0;
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (strcmp(commands[i].word1, word1) != 0)
            continue;
        group = 1;
        if (!commands[i].word2) {
            cmd = &commands[i];
            break;
        }
        if (w + 1 < argc && strcmp(commands[i].word2, argv[w + 1]) == 0) {
            cmd = &commands[i];
            nwords = 2;
            break;
        }
    }
    if (!cmd) {
        if (group)
            fprintf(stderr, "gpuq %s: expected a subcommand:", word1);
        else
            fprintf(stderr, "gpuq: unknown command '%s'; commands:", word1);
        for (size_t i = 0; i < NCOMMANDS; i++) {
            if (group && strcmp(commands[i].word1, word1) != 0)
                continue;
            if (group)
                fprintf(stderr, " %s", commands[i].word2);
            else
                fprintf(stderr, " %s%s%s", commands[i].word1, commands[i].word2 ? " " : "",
                        commands[i].word2 ? commands[i].word2 : "");
        }
        fprintf(stderr, " (see gpuq --help)\n");
        return CLI_EUSAGE;
    }
    /* The command gets every argument but its words: flags before the
     * command (gpuq --json ls) count as well as those after it. */
    char *rest[argc > 0 ? argc : 1];
    int n = 0;
    for (int i = 1; i < argc; i++)
        if (i < w || i >= w + nwords)
            rest[n++] = argv[i];
    return cmd->run(n, rest);
}
