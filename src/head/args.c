/* args.c: gpuqd's flags (see args.h). */
#include "head/args.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/paths.h"

static void usage(FILE *f)
{
    char data[1024];
    paths_default_data(data, sizeof data);
    fprintf(f,
            "usage: gpuqd [--listen HOST:PORT] [--data DIR] [--config FILE] [--log-level LEVEL]\n"
            "             [--print-config] [--check-config] [--version]\n"
            "  --listen     address to serve the API on (default 127.0.0.1:7070; port 0 = any)\n"
            "  --data       directory for the store and the admin key; one gpuqd at a time\n"
            "               may use it (default: " PATHS_DATA_HELP ";\n"
            "               now %s)\n"
            "  --config     INI file with settings (see docs/configuration.md)\n"
            "  --log-level  debug | info | warn | error (default info)\n"
            "  --print-config  print the effective configuration (the file, the flags and\n"
            "               every default) as an INI file gpuqd accepts, and exit\n"
            "  --check-config  read --config FILE, report the first error, exit 0 if valid\n"
            "The admin key is $GPUQ_ADMIN_KEY, or DATA/admin.key (created on first start).\n",
            data);
}

static int split_listen(const char *listen, struct listen_addr *out)
{
    const char *colon = strrchr(listen, ':');
    if (!colon)
        return -1;
    size_t hl = (size_t)(colon - listen);
    if (listen[0] == '[' && hl >= 2 && listen[hl - 1] == ']') {
        listen++;
        hl -= 2;
    }
    if (hl == 0 || hl >= sizeof out->host)
        return -1;
    memcpy(out->host, listen, hl);
    out->host[hl] = '\0';
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p < 0 || p > 65535 || end == colon + 1)
        return -1;
    out->port = (int)p;
    return 0;
}

static int parse_level(const char *s)
{
    static const struct {
        const char *name;
        enum log_level level;
    } levels[] = {{"debug", LOG_DEBUG}, {"info", LOG_INFO}, {"warn", LOG_WARN},
                  {"error", LOG_ERROR}};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        if (!strcmp(s, levels[i].name)) {
            log_set_level(levels[i].level);
            return 0;
        }
    }
    return -1;
}

int args_parse(int argc, char **argv, struct head_config *cfg, struct listen_addr *addr)
{
    config_defaults(cfg);
    const char *listen = NULL, *data = NULL, *config = NULL;
    int print_config = 0;
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'}, {"data", required_argument, NULL, 'd'},
        {"config", required_argument, NULL, 'c'}, {"log-level", required_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},         {"print-config", no_argument, NULL, 'p'},
        {"version", no_argument, NULL, 'V'},      {"check-config", no_argument, NULL, 'C'},
        {NULL, 0, NULL, 0},
    };
    int c;
    bool check = false;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'l': listen = optarg; break;
        case 'd': data = optarg; break;
        case 'c': config = optarg; break;
        case 'v':
            if (parse_level(optarg)) {
                fprintf(stderr, "gpuqd: --log-level: must be debug, info, warn or error\n");
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        case 'p': print_config = 1; break;
        case 'C': check = true; break;
        case 'V': printf("gpuqd %s\n", GPUQ_VERSION); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gpuqd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    char err[512];
    if (config && config_load(cfg, config, err, sizeof err)) {
        fprintf(stderr, "gpuqd: config: %s\n", err);
        return 2;
    }
    if (check) {
        printf("%s: valid\n", config ? config : "(no --config: the defaults)");
        return 0;
    }
    if (listen)
        snprintf(cfg->listen, sizeof cfg->listen, "%s", listen);
    if (data)
        snprintf(cfg->data_dir, sizeof cfg->data_dir, "%s", data);
    if (!cfg->data_dir[0])
        paths_default_data(cfg->data_dir, sizeof cfg->data_dir);
    if (split_listen(cfg->listen, addr)) {
        fprintf(stderr, "gpuqd: --listen: expected HOST:PORT, got '%s'\n", cfg->listen);
        return 2;
    }
    if (print_config) {
        if (config_print(cfg, stdout) || fflush(stdout)) {
            fprintf(stderr, "gpuqd: --print-config: cannot write the configuration\n");
            return 1;
        }
        return 0;
    }
    return ARGS_RUN;
}
