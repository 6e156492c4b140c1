/* runtime.h: one runtime process — spawned through /bin/sh in its own process
 * group with CUDA_VISIBLE_DEVICES and the GPUQ_* variables set, talked to over
 * two pipes, and killed as a group. The supervision policy (when to restart,
 * backoff) lives in worker.c; this file only does processes. */
#ifndef GPUQ_AGENT_RUNTIME_H
#define GPUQ_AGENT_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Invariant: pid > 0 iff the process was spawned and not yet reaped; the fds
 * are -1 when closed. in_fd is non-blocking. */
struct runtime_proc {
    pid_t pid;
    int in_fd;  /* we write the runtime's stdin */
    int out_fd; /* we read the runtime's stdout */
};

void runtime_proc_init(struct runtime_proc *p);
/* runtime_spawn starts `/bin/sh -c "exec CMD"` with env = environ + extra
 * (NULL-terminated "K=V" list). 0 or GPUQ_EIO. */
int runtime_spawn(const char *cmd, char *const extra_env[], struct runtime_proc *p);
/* runtime_write writes all of data, waiting at most timeout_ms for a runtime
 * that does not read. 0, GPUQ_EAGAIN (timed out: it is not reading) or GPUQ_EIO. */
int runtime_write(struct runtime_proc *p, const char *data, size_t len, int timeout_ms);
/* runtime_close_stdin closes our end of its stdin (EOF tells it to stop). */
void runtime_close_stdin(struct runtime_proc *p);
/* runtime_wait reaps the process within timeout_ms, SIGKILLing its group
 * first if kill_first or when the time runs out. Closes the fds. Writes the
 * wait status to *status (may be NULL). */
void runtime_wait(struct runtime_proc *p, int timeout_ms, int kill_first, int *status);
/* runtime_backoff_ms: delay before restart number `failures` (1-based):
 * min, 2·min, 4·min … capped at max. */
int64_t runtime_backoff_ms(int failures, int64_t min_ms, int64_t max_ms);
/* runtime_describe_status writes "exit 3" / "signal 9 (Killed)". */
void runtime_describe_status(int status, char *out, size_t size);

#endif
