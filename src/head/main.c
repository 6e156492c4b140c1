/* main.c: gpuqd — the head daemon. Parses flags and the config file, opens the
 * store, recovers jobs, starts the dispatcher and the HTTP API, writes
 * DATA/head.url when ready, and shuts down cleanly on SIGTERM/SIGINT. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/routes.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "common/timer.h"
#include "head/datadir.h"
#include "head/dispatch.h"
#include "head/ops.h"

#define MOD "gpuqd"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gpuqd [--listen HOST:PORT] [--data DIR] [--config FILE] [--log-level LEVEL]\n"
            "  --listen     address to serve the API on (default 127.0.0.1:7070; port 0 = any)\n"
            "  --data       directory for the store and the admin key (default ./gpuq-data)\n"
            "  --config     INI file with settings (see docs/configuration.md)\n"
            "  --log-level  debug | info | warn | error (default info)\n"
            "The admin key is $GPUQ_ADMIN_KEY, or DATA/admin.key (created on first start).\n");
}

static void load_tenant(void *arg, const struct tenant_rec *t)
{
    tenants_add(arg, t);
}

static void load_token(void *arg, const struct token_rec *t)
{
    tenants_add_token(arg, t);
}

static int split_listen(const char *listen, char *host, size_t hsize, int *port)
{
    const char *colon = strrchr(listen, ':');
    if (!colon)
        return -1;
    size_t hl = (size_t)(colon - listen);
    if (listen[0] == '[' && hl >= 2 && listen[hl - 1] == ']') {
        listen++;
        hl -= 2;
    }
    if (hl == 0 || hl >= hsize)
        return -1;
    memcpy(host, listen, hl);
    host[hl] = '\0';
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p < 0 || p > 65535 || end == colon + 1)
        return -1;
    *port = (int)p;
    return 0;
}

int main(int argc, char **argv)
{
    static struct head h;
    config_defaults(&h.cfg);
    const char *listen = NULL, *data = NULL, *config = NULL;
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'}, {"data", required_argument, NULL, 'd'},
        {"config", required_argument, NULL, 'c'}, {"log-level", required_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'l': listen = optarg; break;
        case 'd': data = optarg; break;
        case 'c': config = optarg; break;
        case 'v':
            if (!strcmp(optarg, "debug")) log_set_level(LOG_DEBUG);
            else if (!strcmp(optarg, "info")) log_set_level(LOG_INFO);
            else if (!strcmp(optarg, "warn")) log_set_level(LOG_WARN);
            else if (!strcmp(optarg, "error")) log_set_level(LOG_ERROR);
            else {
                fprintf(stderr, "gpuqd: --log-level: must be debug, info, warn or error\n");
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gpuqd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    char err[512];
    if (config && config_load(&h.cfg, config, err, sizeof err)) {
        fprintf(stderr, "gpuqd: config: %s\n", err);
        return 2;
    }
    if (listen)
        snprintf(h.cfg.listen, sizeof h.cfg.listen, "%s", listen);
    if (data)
        snprintf(h.cfg.data_dir, sizeof h.cfg.data_dir, "%s", data);
    if (!h.cfg.data_dir[0])
        snprintf(h.cfg.data_dir, sizeof h.cfg.data_dir, "gpuq-data");
    char host[128];
    int port;
    if (split_listen(h.cfg.listen, host, sizeof host, &port)) {
        fprintf(stderr, "gpuqd: --listen: expected HOST:PORT, got '%s'\n", h.cfg.listen);
        return 2;
    }
    if (datadir_create(h.cfg.data_dir, err, sizeof err)) {
        fprintf(stderr, "gpuqd: %s\n", err);
        return 1;
    }
    /* Before anything reads or writes the directory: one head per data directory. */
    struct datadir_lock lock;
    if (datadir_lock(h.cfg.data_dir, &lock, err, sizeof err)) {
        fprintf(stderr, "gpuqd: %s\n", err);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* every thread inherits: main waits for them */

    if (datadir_admin_key(h.cfg.data_dir, h.admin_hash, err, sizeof err)) {
        log_error(MOD, "%s", err);
        return 1;
    }
    char dbpath[600];
    snprintf(dbpath, sizeof dbpath, "%s/gpuq.db", h.cfg.data_dir);
    struct store_sqlite_options so = {.path = dbpath, .synchronous_full = h.cfg.synchronous_full};
    if (store_sqlite_open(&so, &h.store, err, sizeof err)) {
        log_error(MOD, "store: %s", err);
        return 1;
    }
    h.jobs = jobs_create();
    h.tenants = tenants_create();
    h.registry = registry_create();
    h.committer = committer_create(h.store);
    h.timers = timers_create();
    h.disp = dispatcher_create(&h);
    if (h.store->ops->load_tenants(h.store, load_tenant, h.tenants) ||
        h.store->ops->load_tokens(h.store, load_token, h.tenants) || head_recover(&h)) {
        log_error(MOD, "cannot load state from the store");
        return 1;
    }
    struct http_options ho = {
        .host = host,
        .port = port,
        .threads = h.cfg.http_threads,
        .max_connections = h.cfg.max_connections,
        .connection_timeout_s = h.cfg.connection_timeout_s,
        .body_limit = routes_body_limit,
        .handler = routes_handle,
        .app = &h,
    };
    if (http_start(&ho, &h.http, err, sizeof err)) {
        log_error(MOD, "%s", err);
        return 1;
    }
    atomic_store(&h.ready, true);
    char url[256];
    snprintf(url, sizeof url, strchr(host, ':') ? "http://[%s]:%d\n" : "http://%s:%d\n", host,
             http_port(h.http));
    if (datadir_write_file(h.cfg.data_dir, "head.url", url, 0644))
        log_warn(MOD, "cannot write %s/head.url: %s", h.cfg.data_dir, strerror(errno));
    url[strcspn(url, "\n")] = '\0';
    log_info(MOD, "serving on %s (store %s, synchronous=%s)", url, dbpath,
             h.cfg.synchronous_full ? "full" : "normal");

    int sig = 0;
    sigwait(&sigs, &sig);
    log_info(MOD, "signal %d: shutting down", sig);
    atomic_store(&h.stopping, true);
    atomic_store(&h.ready, false);
    /* Answer every suspended connection (agents' polls, long-polls, streams),
     * then stop serving; commits in flight still complete and answer. */
    dispatcher_stop(h.disp);
    jobs_shutdown(h.jobs);
    http_stop(h.http);
    timers_destroy(h.timers);
    dispatcher_destroy(h.disp);
    committer_destroy(h.committer);
    store_close(h.store);
    registry_destroy(h.registry);
    tenants_destroy(h.tenants);
    jobs_destroy(h.jobs);
    datadir_remove_file(h.cfg.data_dir, "head.url");
    log_info(MOD, "stopped");
    datadir_unlock(&lock);
    return 0;
}
