/* runtime.c: spawning, feeding and killing runtime processes (see runtime.h). */
#include "agent/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"

extern char **environ;

void runtime_proc_init(struct runtime_proc *p)
{
    p->pid = 0;
    p->in_fd = p->out_fd = -1;
}

int runtime_spawn(const char *cmd, char *const extra_env[], struct runtime_proc *p)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    int rc = GPUQ_EIO;
    char **envp = NULL;
    char *script = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    bool fa_init = false, attr_init = false;
    runtime_proc_init(p);
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0)
        goto fail;

    size_t nenv = 0, nextra = 0;
    while (environ[nenv])
        nenv++;
    while (extra_env && extra_env[nextra])
        nextra++;
    envp = xcalloc(nenv + nextra + 1, sizeof *envp);
    size_t k = 0;
    for (size_t i = 0; i < nenv; i++) {
        bool overridden = false;
        for (size_t j = 0; j < nextra; j++) {
            const char *eq = strchr(extra_env[j], '=');
            size_t n = eq ? (size_t)(eq - extra_env[j]) + 1 : strlen(extra_env[j]);
            if (strncmp(environ[i], extra_env[j], n) == 0)
                overridden = true;
        }
        if (!overridden)
            envp[k++] = environ[i];
    }
    for (size_t j = 0; j < nextra; j++)
        envp[k++] = extra_env[j];
    envp[k] = NULL;

    script = xmalloc(strlen(cmd) + 6);
    sprintf(script, "exec %s", cmd);
    char *argv[] = {"/bin/sh", "-c", script, NULL};

    posix_spawn_file_actions_init(&fa);
    fa_init = true;
    posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawnattr_init(&attr);
    attr_init = true;
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGCHLD);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setpgroup(&attr, 0);
    /* The normal policy: the agent's own (sched_batch) is for its threads. */
    posix_spawnattr_setschedpolicy(&attr, SCHED_OTHER);
    posix_spawnattr_setschedparam(&attr, &(struct sched_param){0});
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                        POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSCHEDULER);
    pid_t pid;
    int e = posix_spawn(&pid, "/bin/sh", &fa, &attr, argv, envp);
    if (e != 0) {
        errno = e;
        goto fail;
    }
    close(in[0]);
    close(out[1]);
    in[0] = out[1] = -1;
    fcntl(in[1], F_SETFL, fcntl(in[1], F_GETFL) | O_NONBLOCK);
    p->pid = pid;
    p->in_fd = in[1];
    p->out_fd = out[0];
    in[1] = out[0] = -1;
    rc = 0;
fail:
    if (fa_init)
        posix_spawn_file_actions_destroy(&fa);
    if (attr_init)
        posix_spawnattr_destroy(&attr);
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
    }
    free(envp);
    free(script);
    return rc;
}

int runtime_write(struct runtime_proc *p, const char *data, size_t len, int timeout_ms)
{
    if (p->in_fd < 0)
        return GPUQ_EIO;
    int64_t deadline = clock_mono_ns() + (int64_t)timeout_ms * NS_PER_MS;
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(p->in_fd, data + off, len - off);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN)
            return GPUQ_EIO;
        int64_t left = deadline - clock_mono_ns();
        if (left <= 0)
            return GPUQ_EAGAIN;
        struct pollfd pfd = {.fd = p->in_fd, .events = POLLOUT};
        poll(&pfd, 1, (int)(left / NS_PER_MS) + 1);
    }
    return 0;
}

void runtime_close_stdin(struct runtime_proc *p)
{
    if (p->in_fd >= 0)
        close(p->in_fd);
    p->in_fd = -1;
}

void runtime_wait(struct runtime_proc *p, int timeout_ms, int kill_first, int *status)
{
    int st = 0;
    if (p->pid > 0) {
        if (kill_first)
            kill(-p->pid, SIGKILL);
        int64_t deadline = clock_mono_ns() + (int64_t)timeout_ms * NS_PER_MS;
        bool killed = kill_first;
        for (;;) {
            /* Peek without reaping, so that the group id stays ours while we
             * kill what is left in the group. */
            siginfo_t si;
            memset(&si, 0, sizeof si);
            int r = waitid(P_PID, (id_t)p->pid, &si, WEXITED | WNOHANG | WNOWAIT);
            if ((r == 0 && si.si_pid == p->pid) || (r < 0 && errno != EINTR))
                break;
            if (!killed && clock_mono_ns() > deadline) {
                kill(-p->pid, SIGKILL);
                killed = true;
            }
            struct timespec ts = {0, 2 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        kill(-p->pid, SIGKILL);
        while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR)
            ;
    }
    if (status)
        *status = st;
    runtime_close_stdin(p);
    if (p->out_fd >= 0)
        close(p->out_fd);
    runtime_proc_init(p);
}

int64_t runtime_backoff_ms(int failures, int64_t min_ms, int64_t max_ms)
{
    if (failures < 1)
        return 0;
    int64_t d = min_ms;
    for (int i = 1; i < failures && d < max_ms; i++)
        d *= 2;
    return d > max_ms ? max_ms : d;
}

void runtime_describe_status(int status, char *out, size_t size)
{
    if (WIFEXITED(status))
        snprintf(out, size, "exit %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, size, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(out, size, "status %d", status);
}
