/* args.h: gpuqd's command line — flags over the config file over defaults. */
#ifndef GPUQ_HEAD_ARGS_H
#define GPUQ_HEAD_ARGS_H

#include <stddef.h>

#include "head/config.h"

#define ARGS_RUN (-1)

/* Where to listen, from cfg->listen ("HOST:PORT", "[V6]:PORT"). */
struct listen_addr {
    char host[128];
    int port;
};

/* Fills cfg (defaults, then --config FILE, then the other flags) and addr,
 * and sets the log level. Returns ARGS_RUN to go on, or the status to exit
 * with (0 after --help; 2 after a message on stderr). */
int args_parse(int argc, char **argv, struct head_config *cfg, struct listen_addr *addr);

#endif
