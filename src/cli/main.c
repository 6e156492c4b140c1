/* main.c: gpuq, the command-line client of gpuqd. Finds the command (one or
 * two words, e.g. "submit" or "tenant add") and hands it the other arguments. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/paths.h"

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
    {"batch", "submit", cmd_batch_submit, "submit a JSONL file of jobs as one batch (--wait)"},
    {"batch", "get", cmd_batch_get, "show a batch: jobs per state, ETA of its last job"},
    {"batch", "cancel", cmd_batch_cancel, "cancel every unfinished job of a batch"},
    {"batch", "ls", cmd_batch_ls, "list your batches"},
    {"backlog", NULL, cmd_backlog, "work waiting in GPU-seconds per capability, lane, tenant"},
    {"capacity", NULL, cmd_capacity, "GPU-seconds a minute each batch tenant can be promised"},
    {"scale", NULL, cmd_scale, "the autoscaling advisor: recommendation, cold starts (admin)"},
    {"result", NULL, cmd_result, "download a succeeded job's result (-o FILE, --out DIR)"},
    {"wait", NULL, cmd_wait, "follow a job to its end; the exit status tells the outcome"},
    {"tenant", "add", cmd_tenant_add, "create a tenant and print its API key (admin)"},
    {"tenant", "ls", cmd_tenant_ls, "list tenants (admin)"},
    {"tenant", "rm", cmd_tenant_rm, "remove a tenant; its key stops working (admin)"},
    {"key", "revoke", cmd_key_revoke, "revoke a tenant's API key (admin)"},
    {"key", "rotate", cmd_key_rotate, "give a tenant a new API key, printed once (admin)"},
    {"worker-token", "add", cmd_worker_token_add, "create a worker token for agents (admin)"},
    {"worker-token", "ls", cmd_worker_token_ls, "list worker tokens: id, name (admin)"},
    {"worker-token", "revoke", cmd_worker_token_revoke,
     "revoke a worker token by id or name; its agents get 401 (admin)"},
    {"workers", NULL, cmd_workers, "list workers: state, temperature, VRAM, models, load"},
    {"drain", NULL, cmd_drain, "drain a worker (admin; same as worker drain)"},
    {"worker", "drain", cmd_worker_drain, "drain a worker: no new jobs, stays registered (admin)"},
    {"worker", "undrain", cmd_worker_undrain, "undo a drain: the worker takes jobs again (admin)"},
    {"pause", NULL, cmd_pause, "pause a capability or lane: its queued jobs wait (admin)"},
    {"resume", NULL, cmd_resume, "resume a paused capability or lane (admin)"},
    {"pauses", NULL, cmd_pauses, "list what is paused (admin)"},
    {"promote", NULL, cmd_promote, "move a queued job to the front of its queue (admin)"},
    {"resubmit", NULL, cmd_resubmit, "run a dead, failed or expired job again (admin)"},
    {"top", NULL, cmd_top, "the fleet live in the terminal: GPUs, queues, decisions (q quits)"},
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
    char data[1024];
    paths_default_data(data, sizeof data);
    fprintf(f, "\nglobal flags: --url URL (or $GPUQ_URL, default %s), --key KEY (or $GPUQ_KEY),\n"
               "  --json (machine-readable output). gpuq --version prints the version.\n"
               "Admin commands take --key, else $GPUQ_ADMIN_KEY, else DATA/admin.key, else\n"
               "  $GPUQ_KEY; DATA is " PATHS_DATA_HELP "\n"
               "  (now %s).\n"
               "exit status: 0 ok, 1 refused by the server or job failed, 2 usage, 3 server "
               "unreachable;\n"
               "  gpuq wait: 4 failed, 5 dead, 6 expired, 7 cancelled, 8 --timeout ran out\n",
            CLI_DEFAULT_URL, data);
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
        if (strcmp(argv[w], "--version") == 0 || strcmp(argv[w], "-V") == 0) {
            printf("gpuq %s\n", GPUQ_VERSION);
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
