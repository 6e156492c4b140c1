/* scale.c: the autoscaling advisor in gpuqd and its hook runner (see scale.h). */
#include "head/scale.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "head/admission.h"
#include "head/dispatch.h"
#include "head/ops.h"

#define MOD "scale"
#define MAX_HOOKS 16
#define MAX_QUEUED_MODELS 64

extern char **environ;

/* Copies src into dst[size], cut to fit (GPU names are longer than class names). */
static void copy_cut(char *dst, size_t size, const char *src)
{
    size_t n = strnlen(src, size - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* A hook in flight. Invariant: used ⇔ pid > 0; fd >= 0 until it is reaped. */
struct hook {
    bool used;
    pid_t pid;
    int fd;
    int64_t start_ns, deadline_ns;
    bool killed;
    int count;
    enum advisor_action action;
    struct scale_hook_info info;
    size_t nout;
};

/* What the head knows of a worker for scaling. */
struct seen {
    char id[SCHED_NAME_MAX];
    char incarnation[64];
    int64_t last_busy_ns;   /* registration, or the last tick it ran something */
    bool ready_seen;        /* its first ready report was counted */
    bool released;          /* a scale-down named it */
    bool present;           /* in the registry at the last tick */
};

struct scale {
    pthread_mutex_t lock;
    struct advisor *adv;
    bool dry_run;
    char cls_setting[SCHED_NAME_MAX];
    char up_cmd[1024], down_cmd[1024];
    int hook_timeout_s;
    int64_t interval_ns, next_ns;
    char url[256];
    struct hook hooks[MAX_HOOKS];
    struct scale_hook_info done[SCALE_HOOKS_KEPT]; /* newest first */
    int ndone;
    struct seen *seen;
    int nseen, capseen;
    bool have_rec;
    struct advisor_rec rec;
    char up_class[SCHED_NAME_MAX];
    int64_t rec_ms;
    struct advisor_demand demands[SCALE_MAX_DEMANDS];
    int ndemands;
    int64_t ups, downs;
};

struct scale *scale_create(const struct head_config *cfg)
{
    if (!cfg->scale_enabled)
        return NULL;
    struct advisor *adv = advisor_create(&cfg->scale);
    if (!adv)
        return NULL;
    struct scale *s = xcalloc(1, sizeof *s);
    pthread_mutex_init(&s->lock, NULL);
    s->adv = adv;
    s->dry_run = cfg->scale_dry_run;
    snprintf(s->cls_setting, sizeof s->cls_setting, "%s", cfg->scale_class);
    snprintf(s->up_cmd, sizeof s->up_cmd, "%s", cfg->scale_up_cmd);
    snprintf(s->down_cmd, sizeof s->down_cmd, "%s", cfg->scale_down_cmd);
    s->hook_timeout_s = cfg->scale_hook_timeout_s;
    s->interval_ns = (int64_t)cfg->scale_interval_ms * 1000000;
    for (int i = 0; i < MAX_HOOKS; i++)
        s->hooks[i].fd = -1;
    log_info(MOD, "advisor on%s: k_batch %g, k_interactive %g, target utilization %.2f, down %.2f, max %d GPUs, "
             "idle release %.0f s, cool-down %.0f s, cold start prior %.0f s",
             s->dry_run ? " (dry run)" : "", cfg->scale.k_batch,
             cfg->scale.k_interactive, cfg->scale.up_utilization,
             cfg->scale.down_utilization, cfg->scale.max_gpus, cfg->scale.idle_release_s,
             cfg->scale.cooldown_s, cfg->scale.cold_start_prior_s);
    return s;
}

void scale_destroy(struct scale *s)
{
    if (!s)
        return;
    for (int i = 0; i < MAX_HOOKS; i++)
        if (s->hooks[i].used && s->hooks[i].fd >= 0)
            close(s->hooks[i].fd);
    advisor_destroy(s->adv);
    free(s->seen);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void scale_set_url(struct scale *s, const char *url)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    snprintf(s->url, sizeof s->url, "%s", url);
    pthread_mutex_unlock(&s->lock);
}

/* ---- the hook runner ---- */

/* Appends what the hook wrote so far (the tail is kept). */
static void drain_output(struct hook *hk)
{
    char b[512];
    for (;;) {
        ssize_t n = read(hk->fd, b, sizeof b);
        if (n <= 0)
            return;
        char *o = hk->info.output;
        size_t cap = sizeof hk->info.output - 1;
        for (ssize_t i = 0; i < n; i++) {
            if (hk->nout == cap) { /* keep the tail */
                memmove(o, o + cap / 2, cap - cap / 2);
                hk->nout = cap - cap / 2;
            }
            char c = b[i];
            o[hk->nout++] = c == '\n' || c == '\r' || c == '\t' ? ' ' : c;
        }
        o[hk->nout] = '\0';
    }
}

static struct hook *hook_for_class(struct scale *s, const char *cls)
{
    for (int i = 0; i < MAX_HOOKS; i++)
        if (s->hooks[i].used && !strcmp(s->hooks[i].info.cls, cls))
            return &s->hooks[i];
    return NULL;
}

/* Starts /bin/sh -c cmd with env; 0, or GPUQ_EIO / GPUQ_ENOSPC. Everything the
 * child needs is built before fork: after it, only async-signal-safe calls. */
static int spawn(struct scale *s, const char *cmd, const char *action, const char *cls,
                 int count, const char *workers, const char *reason, struct hook **out)
{
    struct hook *hk = NULL;
    for (int i = 0; i < MAX_HOOKS && !hk; i++)
        if (!s->hooks[i].used)
            hk = &s->hooks[i];
    if (!hk)
        return GPUQ_ENOSPC;
    char e_action[64], e_cls[128], e_count[64], e_workers[600], e_reason[560], e_url[300];
    snprintf(e_action, sizeof e_action, "GPUQ_SCALE_ACTION=%s", action);
    snprintf(e_cls, sizeof e_cls, "GPUQ_SCALE_CLASS=%s", cls);
    snprintf(e_count, sizeof e_count, "GPUQ_SCALE_COUNT=%d", count);
    snprintf(e_workers, sizeof e_workers, "GPUQ_SCALE_WORKERS=%s", workers);
    snprintf(e_reason, sizeof e_reason, "GPUQ_SCALE_REASON=%s", reason);
    snprintf(e_url, sizeof e_url, "GPUQ_HEAD_URL=%s", s->url);
    char *ours[] = {e_action, e_cls, e_count, e_workers, e_reason, e_url};
    size_t nours = sizeof ours / sizeof ours[0], nenv = 0;
    while (environ[nenv])
        nenv++;
    char **envp = xcalloc(nenv + nours + 1, sizeof *envp);
    size_t k = 0;
    for (size_t i = 0; i < nenv; i++)
        if (strncmp(environ[i], "GPUQ_SCALE_", 11) && strncmp(environ[i], "GPUQ_HEAD_URL=", 14))
            envp[k++] = environ[i];
    for (size_t i = 0; i < nours; i++)
        envp[k++] = ours[i];
    char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC)) {
        free(envp);
        return GPUQ_EIO;
    }
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    long maxfd = sysconf(_SC_OPEN_MAX);
    if (maxfd < 0 || maxfd > 65536)
        maxfd = 65536;
    sigset_t none;
    sigemptyset(&none);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        if (devnull >= 0)
            dup2(devnull, 0);
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        for (int fd = 3; fd < maxfd; fd++)
            close(fd);
        signal(SIGPIPE, SIG_DFL);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execve("/bin/sh", argv, envp);
        _exit(127);
    }
    int err = errno;
    free(envp);
    close(pfd[1]);
    if (devnull >= 0)
        close(devnull);
    if (pid < 0) {
        close(pfd[0]);
        log_warn(MOD, "cannot start the %s hook: %s", action, strerror(err));
        return GPUQ_EIO;
    }
    setpgid(pid, pid); /* also in the parent: no race with the kill below */
    fcntl(pfd[0], F_SETFL, fcntl(pfd[0], F_GETFL) | O_NONBLOCK);
    memset(hk, 0, sizeof *hk);
    hk->used = true;
    hk->pid = pid;
    hk->fd = pfd[0];
    hk->start_ns = clock_mono_ns();
    hk->deadline_ns = hk->start_ns + (int64_t)s->hook_timeout_s * 1000000000LL;
    hk->count = count;
    hk->action = !strcmp(action, "up") ? ADVISOR_UP : ADVISOR_DOWN;
    struct scale_hook_info *in = &hk->info;
    snprintf(in->action, sizeof in->action, "%s", action);
    snprintf(in->cls, sizeof in->cls, "%s", cls);
    in->count = count;
    snprintf(in->workers, sizeof in->workers, "%s", workers);
    in->started_ms = clock_wall_ms();
    in->running = true;
    log_info(MOD, "%s hook started (pid %d): class %s, count %d%s%s", action, (int)pid, cls,
             count, workers[0] ? ", workers " : "", workers);
    *out = hk;
    return 0;
}

static void keep_done(struct scale *s, const struct scale_hook_info *info)
{
    memmove(s->done + 1, s->done, (SCALE_HOOKS_KEPT - 1) * sizeof s->done[0]);
    s->done[0] = *info;
    if (s->ndone < SCALE_HOOKS_KEPT)
        s->ndone++;
}

/* Reads, reaps, and kills hooks past their timeout. Never blocks. */
static void poll_hooks(struct scale *s, int64_t now)
{
    for (int i = 0; i < MAX_HOOKS; i++) {
        struct hook *hk = &s->hooks[i];
        if (!hk->used)
            continue;
        drain_output(hk);
        int st = 0;
        pid_t r = waitpid(hk->pid, &st, WNOHANG);
        if (r == 0) {
            if (now >= hk->deadline_ns && !hk->killed) {
                log_warn(MOD, "%s hook (pid %d, class %s) still running after %d s: killed",
                         hk->info.action, (int)hk->pid, hk->info.cls, s->hook_timeout_s);
                kill(-hk->pid, SIGKILL);
                kill(hk->pid, SIGKILL);
                hk->killed = true;
                hk->info.timed_out = true;
            }
            continue;
        }
        struct scale_hook_info *in = &hk->info;
        in->running = false;
        in->seconds = (double)(now - hk->start_ns) / 1e9;
        if (r < 0) {
            in->exit_code = -1;
        } else if (WIFEXITED(st)) {
            in->exit_code = WEXITSTATUS(st);
        } else {
            in->exit_code = -1;
            in->signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
        }
        close(hk->fd);
        hk->fd = -1;
        bool ok = in->exit_code == 0;
        if (ok)
            log_info(MOD, "%s hook (class %s, count %d) exited 0 after %.1f s; output: %s",
                     in->action, in->cls, in->count, in->seconds, in->output);
        else
            log_warn(MOD, "%s hook (class %s, count %d) failed after %.1f s (%s %d); output: %s",
                     in->action, in->cls, in->count, in->seconds,
                     in->timed_out ? "timed out, signal" : in->signal ? "signal" : "exit status",
                     in->signal ? in->signal : in->exit_code, in->output);
        if (!ok && hk->action == ADVISOR_UP)
            advisor_provision_failed(s->adv, in->cls, hk->count);
        keep_done(s, in);
        hk->used = false;
        hk->pid = 0;
    }
}

/* ---- inputs ---- */

struct demand_ctx {
    struct advisor_demand *d;
    int n;
};

static void add_backlog(const char *cap, enum sched_lane lane, const char *tenant, double gpu_s,
                        int jobs, void *arg)
{
    (void)tenant;
    (void)jobs;
    struct demand_ctx *c = arg;
    for (int i = 0; i < c->n; i++) {
        if (c->d[i].lane == (int)lane && !strcmp(c->d[i].capability, cap ? cap : "")) {
            c->d[i].backlog_gpu_s += gpu_s;
            return;
        }
    }
    if (c->n == SCALE_MAX_DEMANDS - 1) /* the last entry carries the throughput */
        return;
    struct advisor_demand *d = &c->d[c->n++];
    memset(d, 0, sizeof *d);
    snprintf(d->capability, sizeof d->capability, "%s", cap ? cap : "");
    d->lane = (int)lane;
    d->backlog_gpu_s = gpu_s;
}

struct models_ctx {
    char names[MAX_QUEUED_MODELS][SCHED_NAME_MAX];
    int n;
};

static void queued_model(void *arg, const struct hjob *j)
{
    struct models_ctx *c = arg;
    if (j->rec.lc.state != LC_QUEUED || !j->rec.model[0])
        return;
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->names[i], j->rec.model))
            return;
    if (c->n < MAX_QUEUED_MODELS)
        snprintf(c->names[c->n++], SCHED_NAME_MAX, "%s", j->rec.model);
}

static struct seen *seen_get(struct scale *s, const char *id, int64_t now)
{
    for (int i = 0; i < s->nseen; i++)
        if (!strcmp(s->seen[i].id, id))
            return &s->seen[i];
    if (s->nseen == s->capseen) {
        s->capseen = s->capseen ? 2 * s->capseen : 16;
        s->seen = xrealloc(s->seen, (size_t)s->capseen * sizeof *s->seen);
    }
    struct seen *w = &s->seen[s->nseen++];
    memset(w, 0, sizeof *w);
    snprintf(w->id, sizeof w->id, "%s", id);
    w->last_busy_ns = now;
    return w;
}

/* The class a scale-up asks for: the setting, else the GPU name most workers
 * report, else "gpu". */
static void pick_class(const struct scale *s, const struct worker_rec *ws, int n, char *out)
{
    if (s->cls_setting[0]) {
        snprintf(out, SCHED_NAME_MAX, "%s", s->cls_setting);
        return;
    }
    int best = -1, best_n = 0;
    for (int i = 0; i < n; i++) {
        int c = 0;
        for (int j = 0; j < n; j++)
            c += !strcmp(ws[i].gpu_name, ws[j].gpu_name);
        if (c > best_n && ws[i].gpu_name[0]) {
            best = i;
            best_n = c;
        }
    }
    copy_cut(out, SCHED_NAME_MAX, best >= 0 ? ws[best].gpu_name : "gpu");
}

/* ---- acting ---- */

static void act(struct head *h, struct scale *s, const struct advisor_rec *r, int64_t now)
{
    const char *action = r->action == ADVISOR_UP ? "up" : "down";
    const char *cmd = r->action == ADVISOR_UP ? s->up_cmd : s->down_cmd;
    char workers[512] = "", cls[SCHED_NAME_MAX];
    snprintf(cls, sizeof cls, "%s", r->cls);
    int count = r->count;
    if (r->action == ADVISOR_DOWN) {
        size_t off = 0;
        for (int i = 0; i < r->count; i++)
            off += (size_t)snprintf(workers + off, off < sizeof workers ? sizeof workers - off : 0,
                                    "%s%s", i ? " " : "", r->release[i]);
        /* The class of the first one named (the hook gets one class per call). */
        struct worker_rec w;
        if (registry_get(h->registry, r->release[0], &w) == 0 && w.gpu_name[0])
            copy_cut(cls, sizeof cls, w.gpu_name);
    }
    if (hook_for_class(s, cls)) {
        log_info(MOD, "%s for class %s waits: a hook for it is still running", action, cls);
        return;
    }
    if (s->dry_run || !cmd[0]) {
        log_info(MOD, "%s%s: %s", s->dry_run ? "dry run, not acted on: " : "no hook configured: ",
                 action, r->reason);
        struct advisor_rec quiet = *r;
        advisor_acted(s->adv, &quiet, now); /* the cool-down, so it is not logged every tick */
        if (r->action == ADVISOR_UP)
            advisor_provision_failed(s->adv, r->cls, r->count);
        r->action == ADVISOR_UP ? s->ups++ : s->downs++;
        return;
    }
    log_info(MOD, "scale %s: %s", action, r->reason);
    struct hook *hk;
    if (spawn(s, cmd, action, cls, count, workers, r->reason, &hk))
        return;
    advisor_acted(s->adv, r, now);
    r->action == ADVISOR_UP ? s->ups++ : s->downs++;
    if (r->action == ADVISOR_DOWN) {
        for (int i = 0; i < r->count; i++) {
            for (int k = 0; k < s->nseen; k++)
                if (!strcmp(s->seen[k].id, r->release[i]))
                    s->seen[k].released = true;
            /* No new work lands on it while the hook releases it. */
            if (registry_request_drain(h->registry, r->release[i]) == 0)
                dispatcher_worker_update(h->disp, r->release[i]);
        }
    }
}

void scale_tick(struct head *h)
{
    struct scale *s = h->scale;
    if (!s)
        return;
    int64_t now = clock_mono_ns();
    pthread_mutex_lock(&s->lock);
    poll_hooks(s, now);
    bool due = now >= s->next_ns;
    if (due)
        s->next_ns = now + s->interval_ns;
    pthread_mutex_unlock(&s->lock);
    if (!due)
        return;

    /* Inputs, gathered with no scale lock held. */
    struct advisor_demand *dem = xcalloc(SCALE_MAX_DEMANDS, sizeof *dem);
    struct demand_ctx dc = {dem, 0};
    admission_backlog_each(h->admission, add_backlog, &dc);
    struct models_ctx *mc = xcalloc(1, sizeof *mc);
    jobs_lock(h->jobs);
    jobs_foreach(h->jobs, queued_model, mc);
    jobs_unlock(h->jobs);
    struct worker_rec *ws = NULL;
    int nw = head_workers_list(h, &ws);

    pthread_mutex_lock(&s->lock);
    struct advisor_gpu *g = xcalloc((size_t)nw + 1, sizeof *g);
    int busy = 0;
    for (int i = 0; i < s->nseen; i++)
        s->seen[i].present = false;
    for (int i = 0; i < nw; i++) {
        const struct worker_rec *w = &ws[i];
        struct seen *sw = seen_get(s, w->id, now);
        sw->present = true;
        snprintf(g[i].id, sizeof g[i].id, "%s", w->id);
        copy_cut(g[i].cls, sizeof g[i].cls, w->gpu_name);
        g[i].busy = w->nrunning > 0 || w->inflight > 0;
        if (g[i].busy)
            sw->last_busy_ns = now;
        busy += g[i].busy;
        g[i].idle_s = g[i].busy ? 0 : (double)(now - sw->last_busy_ns) / 1e9;
        g[i].draining = w->state == WORKER_DRAINING || w->drain_requested || sw->released;
        /* Protected: it holds (loaded, or pinned) a model queued work needs. */
        for (int m = 0; m < w->nmodels && !g[i].protected_model; m++) {
            if (!w->models[m].loaded && !w->models[m].pinned)
                continue;
            for (int q = 0; q < mc->n && !g[i].protected_model; q++)
                g[i].protected_model = !strcmp(mc->names[q], w->models[m].name);
        }
    }
    int w = 0; /* forget workers that left */
    for (int i = 0; i < s->nseen; i++)
        if (s->seen[i].present)
            s->seen[w++] = s->seen[i];
    s->nseen = w;
    /* Throughput: each busy GPU delivers about one nominal GPU-second a second. */
    struct advisor_demand *run = &dem[dc.n];
    memset(run, 0, sizeof *run);
    run->lane = -1;
    run->throughput = busy;
    pick_class(s, ws, nw, s->up_class);
    struct advisor_input in = {.demands = dem, .ndemands = dc.n + 1, .gpus = g, .ngpus = nw,
                               .speed = 1, .up_class = s->up_class};
    struct advisor_rec r;
    if (advisor_decide(s->adv, &in, now, &r) == 0) {
        s->rec = r;
        s->have_rec = true;
        s->rec_ms = clock_wall_ms();
        memcpy(s->demands, dem, (size_t)dc.n * sizeof *dem);
        s->ndemands = dc.n;
        if (r.action != ADVISOR_HOLD)
            act(h, s, &r, now);
    }
    pthread_mutex_unlock(&s->lock);
    free(g);
    free(ws);
    free(mc);
    free(dem);
}

void scale_worker_ready(struct head *h, const struct worker_rec *w)
{
    struct scale *s = h->scale;
    if (!s || w->state != WORKER_READY)
        return;
    int64_t now = clock_mono_ns();
    pthread_mutex_lock(&s->lock);
    struct seen *sw = seen_get(s, w->id, now);
    if (strcmp(sw->incarnation, w->incarnation)) {
        snprintf(sw->incarnation, sizeof sw->incarnation, "%s", w->incarnation);
        sw->ready_seen = false;
    }
    if (!sw->ready_seen) {
        sw->ready_seen = true;
        sw->last_busy_ns = now; /* idle time counts from being ready */
        double learned;
        char cls[SCHED_NAME_MAX];
        copy_cut(cls, sizeof cls, w->gpu_name[0] ? w->gpu_name : "gpu");
        if (advisor_worker_ready(s->adv, cls, now, &learned) == 0)
            log_info(MOD, "worker %s (%s) ready %.1f s after its provision request: cold start "
                     "of %s now %.1f s", w->id, cls, learned, cls,
                     advisor_cold_start(s->adv, cls));
    }
    pthread_mutex_unlock(&s->lock);
}

void scale_view(struct head *h, struct scale_view *out)
{
    memset(out, 0, sizeof *out);
    struct scale *s = h->scale;
    out->enabled = s != NULL;
    out->policy = h->cfg.scale;
    out->dry_run = h->cfg.scale_dry_run;
    if (!s)
        return;
    int64_t now = clock_mono_ns();
    pthread_mutex_lock(&s->lock);
    snprintf(out->up_class, sizeof out->up_class, "%s", s->up_class);
    out->have_rec = s->have_rec;
    out->rec = s->rec;
    out->rec_ms = s->rec_ms;
    memcpy(out->demands, s->demands, (size_t)s->ndemands * sizeof s->demands[0]);
    out->ndemands = s->ndemands;
    out->nclasses = advisor_classes(s->adv, now, out->classes, ADVISOR_MAX_CLASSES);
    for (int i = 0; i < MAX_HOOKS && out->nhooks < SCALE_HOOKS_KEPT; i++)
        if (s->hooks[i].used)
            out->hooks[out->nhooks++] = s->hooks[i].info;
    for (int i = 0; i < s->ndone && out->nhooks < SCALE_HOOKS_KEPT; i++)
        out->hooks[out->nhooks++] = s->done[i];
    out->ups = s->ups;
    out->downs = s->downs;
    pthread_mutex_unlock(&s->lock);
}
