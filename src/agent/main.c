/* main.c: gpuq-agent — one per GPU host. Discovers GPUs (NVML via dlopen, or
 * simulated), starts one worker per GPU (runtime process, VRAM manager,
 * supervision) and the monitor (telemetry, register, heartbeat), and drains
 * gracefully on SIGTERM/SIGINT: no new assignments, inflight jobs finish,
 * workers deregister, then it exits 0. A second signal stops at once. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/inputs.h"
#include "agent/report.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"

#define MOD "agent"

static void usage(FILE *f)
{
    fprintf(f, "usage: gpuq-agent --head URL --worker-token TOKEN [--config FILE] "
               "[--sim-gpus N] [--verbose]\n"
               "       gpuq-agent --check-config FILE | --version\n"
               "  TOKEN may also come from $GPUQ_WORKER_TOKEN (better: it stays out of ps).\n"
               "  --check-config  read FILE, report the first error, exit 0 when it is valid\n"
               "  Runtime outputs go to work_dir (config; default $TMPDIR/gpuq-agent-PID,\n"
               "  removed at exit). See docs/agent-config.md.\n");
}

static int discover(struct agent *a)
{
    struct agent_config *c = &a->cfg;
    char err[512] = "";
    if (c->sim_gpus == 0 && c->nvml) {
        int rc = gpu_nvml_open(c->nvml_library, &a->gpus, err, sizeof err);
        if (rc == 0) {
            log_info(MOD, "NVML: %d GPU(s) through %s", gpu_count(&a->gpus), c->nvml_library);
            return 0;
        }
        log_info(MOD, "NVML unavailable (%s); simulating GPUs", err);
    }
    int n = c->sim_gpus > 0 ? c->sim_gpus : 1;
    struct gpu_sim_shape shapes[GPU_MAX];
    for (int i = 0; i < n; i++)
        agent_config_sim_shape(c, i, &shapes[i]);
    log_info(MOD, "simulating %d GPU(s)", n);
    return gpu_sim_open(shapes, n, &a->gpus);
}

/* The outbox folder holds results not yet delivered. What an earlier run left
 * there belongs to its incarnation, whose jobs the head re-queues: remove it. */
static int prepare_outbox_dir(const char *work_dir)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%.4000s/outbox", work_dir);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "gpuq-agent: cannot create %s: %s\n", dir, strerror(errno));
        return GPUQ_EIO;
    }
    DIR *d = opendir(dir);
    if (!d)
        return GPUQ_EIO;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0)
            removed++;
    }
    closedir(d);
    if (removed)
        log_info(MOD, "removed %d undelivered result(s) of an earlier run from %s", removed, dir);
    return 0;
}

int main(int argc, char **argv)
{
    static struct agent agent;
    struct agent *a = &agent;
    const char *config_path = NULL;
    const char *head = NULL;
    const char *token = getenv("GPUQ_WORKER_TOKEN");
    int sim_gpus = -1;
    static const struct option opts[] = {
        {"head", required_argument, NULL, 'h'},       {"worker-token", required_argument, NULL, 't'},
        {"config", required_argument, NULL, 'c'},     {"sim-gpus", required_argument, NULL, 's'},
        {"verbose", no_argument, NULL, 'v'},          {"help", no_argument, NULL, 'H'},
        {"version", no_argument, NULL, 'V'},
        {"check-config", required_argument, NULL, 'C'},
        {NULL, 0, NULL, 0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'h':
            head = optarg;
            break;
        case 't':
            token = optarg;
            break;
        case 'c':
            config_path = optarg;
            break;
        case 's': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > GPU_MAX) {
                fprintf(stderr, "gpuq-agent: --sim-gpus must be 1..%d\n", GPU_MAX);
                return 2;
            }
            sim_gpus = (int)v;
            break;
        }
        case 'v':
            log_set_level(LOG_DEBUG);
            break;
        case 'H':
            usage(stdout);
            return 0;
        case 'V':
            printf("gpuq-agent %s\n", GPUQ_VERSION);
            return 0;
        case 'C': {
            char err[600];
            agent_config_defaults(&a->cfg, argv[0]);
            if (agent_config_load(&a->cfg, optarg, err, sizeof err) != 0) {
                fprintf(stderr, "gpuq-agent: %s\n", err);
                return 2;
            }
            printf("%s: valid\n", optarg);
            return 0;
        }
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!head || !token || !token[0] || optind != argc) {
        usage(stderr);
        return 2;
    }
    if (strlen(head) >= sizeof a->head_url || strlen(token) >= sizeof a->token ||
        strncmp(head, "http://", 7) != 0) {
        fprintf(stderr, "gpuq-agent: --head must be an http:// URL; token at most %zu bytes\n",
                sizeof a->token - 1);
        return 2;
    }
    snprintf(a->head_url, sizeof a->head_url, "%s", head);
    snprintf(a->token, sizeof a->token, "%s", token);

    agent_config_defaults(&a->cfg, argv[0]);
    if (config_path) {
        char err[600];
        if (agent_config_load(&a->cfg, config_path, err, sizeof err) != 0) {
            fprintf(stderr, "gpuq-agent: %s\n", err);
            return 2;
        }
    }
    if (sim_gpus > 0)
        a->cfg.sim_gpus = sim_gpus;
    bool own_work_dir = false;
    if (!a->cfg.work_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(a->cfg.work_dir, sizeof a->cfg.work_dir, "%s/gpuq-agent-%d",
                 tmp && tmp[0] ? tmp : "/tmp", (int)getpid());
        own_work_dir = true;
    }
    if (mkdir(a->cfg.work_dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "gpuq-agent: cannot create %s: %s\n", a->cfg.work_dir, strerror(errno));
        return 1;
    }

    agent_inputs_reset(a->cfg.work_dir);
    if (prepare_outbox_dir(a->cfg.work_dir) != 0)
        return 1;

    /* Signals: ignore SIGPIPE (dead runtimes, dropped connections); every
     * thread blocks SIGTERM/SIGINT and main takes them with sigtimedwait. */
    signal(SIGPIPE, SIG_IGN);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    /* Also before any thread: each inherits it. Runtimes start under the
     * normal policy whatever the agent's (runtime.c). */
    if (a->cfg.sched_batch && sched_setscheduler(0, SCHED_BATCH, &(struct sched_param){0}))
        log_warn(MOD, "sched_batch: the agent stays under the normal policy (%s)",
                 strerror(errno));

    http_global_init();
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    agent_make_incarnation(a->incarnation);
    log_info(MOD, "incarnation %s", a->incarnation);
    http_client_init(&a->outbox_hc, a->head_url, a->token);
    outbox_init(&a->outbox, a->cfg.outbox_max_jobs, a->cfg.outbox_max_bytes,
                a->cfg.outbox_retry_min_ms, a->cfg.outbox_retry_max_ms, report_send,
                &a->outbox_hc);
    if (a->cfg.outbox_batch)
        outbox_set_batch(&a->outbox, report_send_batch);
    if (pthread_create(&a->outbox_thread, NULL, outbox_main, &a->outbox) != 0) {
        fprintf(stderr, "gpuq-agent: cannot start the outbox thread\n");
        return 1;
    }
    pthread_setname_np(a->outbox_thread, "outbox");
    if (discover(a) != 0) {
        fprintf(stderr, "gpuq-agent: no GPU source\n");
        return 1;
    }
    a->nworkers = gpu_count(&a->gpus);
    for (int i = 0; i < a->nworkers; i++) {
        struct gpu_info info;
        if (gpu_info(&a->gpus, i, &info) != 0) {
            fprintf(stderr, "gpuq-agent: cannot read GPU %d\n", i);
            return 1;
        }
        a->workers[i] = worker_create(a, i, &info);
        log_info(MOD, "GPU %d: %s %s, %lld MB, %d capabilities, concurrency %d", i, info.name,
                 info.uuid, (long long)info.vram_total_mb, a->workers[i]->view.ncaps,
                 a->workers[i]->view.concurrency);
    }
    outbox_set_on_send(&a->outbox, poller_outbox_sent, a);
    outbox_set_on_room(&a->outbox, poller_outbox_room, a);
    for (int i = 0; i < a->nworkers; i++)
        if (worker_start(a->workers[i]) != 0) {
            fprintf(stderr, "gpuq-agent: cannot start worker %d\n", i);
            return 1;
        }
    pthread_create(&a->monitor_thread, NULL, monitor_main, a);
    pthread_setname_np(a->monitor_thread, "monitor");

    int signals = 0;
    for (;;) {
        bool all_done = true;
        for (int i = 0; i < a->nworkers; i++) {
            pthread_mutex_lock(&a->workers[i]->mu);
            all_done &= a->workers[i]->state == WS_DONE;
            pthread_mutex_unlock(&a->workers[i]->mu);
        }
        if (all_done)
            break;
        struct timespec ts = {0, 100 * 1000 * 1000};
        int sig = sigtimedwait(&sigs, NULL, &ts);
        if (sig <= 0)
            continue;
        signals++;
        if (signals == 1) {
            log_info(MOD, "signal %d: draining every worker", sig);
            for (int i = 0; i < a->nworkers; i++)
                worker_request_drain(a->workers[i]);
        } else {
            log_warn(MOD, "second signal: stopping now");
            for (int i = 0; i < a->nworkers; i++)
                if (a->workers[i]->rt.pid > 0)
                    kill(-a->workers[i]->rt.pid, SIGKILL);
            _exit(1);
        }
    }
    for (int i = 0; i < a->nworkers; i++)
        worker_join(a->workers[i]);
    pthread_mutex_lock(&a->mu);
    a->stop = true;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->monitor_thread, NULL);
    /* Every worker waited for its outcomes to be delivered before it deregistered. */
    outbox_stop(&a->outbox);
    pthread_join(a->outbox_thread, NULL);
    outbox_fini(&a->outbox);
    http_client_fini(&a->outbox_hc);
    for (int i = 0; i < a->nworkers; i++)
        worker_destroy(a->workers[i]);
    gpu_close(&a->gpus);
    if (own_work_dir) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%.4000s/outbox", a->cfg.work_dir);
        rmdir(dir);
        rmdir(a->cfg.work_dir);
    }
    log_info(MOD, "all workers drained; bye");
    return 0;
}
