/* test_runtime.c: runtime processes — spawned with CUDA_VISIBLE_DEVICES in
 * their own process group, fed through a pipe, killed as a group; and the
 * restart backoff. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/runtime.h"
#include "common/err.h"

static size_t read_all(int fd, char *buf, size_t size)
{
    size_t n = 0;
    ssize_t r;
    while (n + 1 < size && (r = read(fd, buf + n, size - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    return n;
}

/* Processes of process group pgid that are not zombies. */
static int live_in_group(pid_t pgid)
{
    int n = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = '\0';
        char *rp = strrchr(buf, ')');
        char st;
        int ppid, pgrp;
        if (rp && sscanf(rp + 1, " %c %d %d", &st, &ppid, &pgrp) == 3 && pgrp == pgid && st != 'Z')
            n++;
    }
    if (d)
        closedir(d);
    return n;
}

static void test_env_and_pipes(void **state)
{
    (void)state;
    struct runtime_proc p;
    char e1[] = "CUDA_VISIBLE_DEVICES=3";
    char e2[] = "GPUQ_WORKER_ID=h-gpu3";
    char *env[] = {e1, e2, NULL};
    assert_int_equal(runtime_spawn("sh -c 'echo \"$CUDA_VISIBLE_DEVICES $GPUQ_WORKER_ID\"; cat'", env, &p),
                     0);
    assert_true(p.pid > 0);
    const char *msg = "{\"type\":\"ping\",\"id\":\"p1\"}\n";
    assert_int_equal(runtime_write(&p, msg, strlen(msg), 1000), 0);
    runtime_close_stdin(&p);
    char out[256];
    read_all(p.out_fd, out, sizeof out);
    assert_string_equal(out, "3 h-gpu3\n{\"type\":\"ping\",\"id\":\"p1\"}\n");
    int status;
    runtime_wait(&p, 2000, 0, &status);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(p.pid, 0);
    assert_int_equal(p.out_fd, -1);
}

static void test_kill_group_and_stuck_writer(void **state)
{
    (void)state;
    struct runtime_proc p;
    /* A runtime that never reads its stdin and has a child of its own. */
    assert_int_equal(runtime_spawn("sleep 30 & exec sleep 30", NULL, &p), 0);
    static char big[1 << 20];
    memset(big, 'x', sizeof big);
    assert_int_equal(runtime_write(&p, big, sizeof big, 100), GPUQ_EAGAIN);
    pid_t pgid = p.pid;
    int status;
    runtime_wait(&p, 100, 1, &status);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    /* Nothing of its group is left running (zombies waiting for init to reap
     * them do not count). */
    int left = 1;
    for (int i = 0; i < 200 && (left = live_in_group(pgid)) > 0; i++)
        usleep(5000);
    assert_int_equal(left, 0);
    char desc[64];
    runtime_describe_status(status, desc, sizeof desc);
    assert_non_null(strstr(desc, "signal 9"));
}

static void test_backoff(void **state)
{
    (void)state;
    assert_int_equal(runtime_backoff_ms(0, 200, 10000), 0);
    assert_int_equal(runtime_backoff_ms(1, 200, 10000), 200);
    assert_int_equal(runtime_backoff_ms(2, 200, 10000), 400);
    assert_int_equal(runtime_backoff_ms(6, 200, 10000), 6400);
    assert_int_equal(runtime_backoff_ms(7, 200, 10000), 10000);
    assert_int_equal(runtime_backoff_ms(1000, 200, 10000), 10000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_and_pipes),
        cmocka_unit_test(test_kill_group_and_stuck_writer),
        cmocka_unit_test(test_backoff),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
