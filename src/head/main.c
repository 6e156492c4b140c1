/* main.c: gpuqd's composition root — nothing but creating the parts, wiring
 * them, starting them, and stopping them in order on SIGTERM/SIGINT. What
 * each part does lives in its own file: flags (args.c), the data directory
 * and its one-head lock (datadir.c), the store, committer, tenants, registry,
 * job table, dispatcher (src/head, src/store) and the HTTP API (src/api). */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "api/routes.h"
#include "common/log.h"
#include "common/timer.h"
#include "head/args.h"
#include "head/admission.h"
#include "head/datadir.h"
#include "head/batches.h"
#include "head/dispatch.h"
#include "head/fleet.h"
#include "head/metrics.h"
#include "head/ops.h"
#include "head/scale.h"
#include "head/trace.h"

#define MOD "gpuqd"

/* A fresh boot epoch (see struct head): 64 random bits, so no two boots of
 * one data directory share one. The clock stands in if the kernel's random
 * source fails, which only weakens it to "differs from the last boot". */
static void head_new_epoch(struct head *h)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    }
    if (v == 0) /* 0 means "no epoch" to the core (lc_fence_epoch) */
        v = 1;
    h->boot_epoch = v;
    snprintf(h->epoch, sizeof h->epoch, "%016llx", (unsigned long long)v);
}

int main(int argc, char **argv)
{
    static struct head h;
    struct listen_addr addr;
    int status = args_parse(argc, argv, &h.cfg, &addr);
    if (status != ARGS_RUN)
        return status;
    char err[512];
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
    if (h.cfg.cpu >= 0) { /* before any thread: each inherits it (docs/configuration.md) */
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(h.cfg.cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set)) {
            log_error(MOD, "server.cpu: gpuqd may not run on CPU %d (%s)", h.cfg.cpu,
                      strerror(errno));
            return 1;
        }
    }
    /* Also before any thread. A woken SCHED_BATCH thread does not preempt the
     * one that woke it, nor any other process (docs/configuration.md). */
    if (h.cfg.sched_batch && sched_setscheduler(0, SCHED_BATCH, &(struct sched_param){0}))
        log_warn(MOD, "server.sched_batch: gpuqd stays under the normal policy (%s)",
                 strerror(errno));

    if (datadir_admin_key(h.cfg.data_dir, h.admin_hash, err, sizeof err)) {
        log_error(MOD, "%s", err);
        return 1;
    }
    char dbpath[600];
    snprintf(dbpath, sizeof dbpath, "%s/gpuq.db", h.cfg.data_dir);
    struct store_sqlite_options so = {
        .path = dbpath,
        .synchronous_full = h.cfg.synchronous_full,
        .wal_prealloc_bytes = h.cfg.wal_preallocate ? STORE_WAL_PREALLOC_BYTES : 0,
    };
    if (store_sqlite_open(&so, &h.store, err, sizeof err)) {
        log_error(MOD, "store: %s", err);
        return 1;
    }
    trace_set_limits(h.cfg.trace_max_bytes, h.cfg.trace_max_steps);
    head_new_epoch(&h);
    h.jobs = jobs_create();
    h.tenants = tenants_create();
    h.registry = registry_create();
    h.committer = committer_create(h.store);
    committer_set_observer(h.committer, metrics_store_commit, NULL);
    h.timers = timers_create();
    h.admission = admission_create(&h.cfg);
    h.fleet = fleet_create();
    h.scale = scale_create(&h.cfg);
    h.disp = dispatcher_create(&h);
    if (tenants_load(h.tenants, h.store) || head_recover(&h) || head_batches_recover(&h)) {
        log_error(MOD, "cannot load state from the store");
        return 1;
    }
    struct http_options ho = {
        .host = addr.host,
        .port = addr.port,
        .threads = h.cfg.http_threads,
        .max_connections = h.cfg.max_connections,
        .connection_timeout_s = h.cfg.connection_timeout_s,
        .max_connections_per_address = h.cfg.max_connections_per_address,
        .header_timeout_s = h.cfg.header_timeout_s,
        .body_timeout_s = h.cfg.body_timeout_s,
        .admit = routes_admit,
        .handler = routes_handle,
        .app = &h,
    };
    if (http_start(&ho, &h.http, err, sizeof err)) {
        log_error(MOD, "%s", err);
        return 1;
    }
    atomic_store(&h.ready, true);
    char url[256];
    snprintf(url, sizeof url, strchr(addr.host, ':') ? "http://[%s]:%d\n" : "http://%s:%d\n",
             addr.host, http_port(h.http));
    if (datadir_write_file(h.cfg.data_dir, "head.url", url, 0644))
        log_warn(MOD, "cannot write %s/head.url: %s", h.cfg.data_dir, strerror(errno));
    url[strcspn(url, "\n")] = '\0';
    scale_set_url(h.scale, url);
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
    fleet_destroy(h.fleet);
    scale_destroy(h.scale);
    jobs_destroy(h.jobs);
    batches_destroy(h.batches);
    datadir_remove_file(h.cfg.data_dir, "head.url");
    log_info(MOD, "stopped");
    datadir_unlock(&lock);
    return 0;
}
