/* agent.h: gpuq-agent's shared state — the agent (one per host) and its
 * workers (one per GPU). Threads per worker: a controller (owns the runtime
 * process, the job state machine and the VRAM manager; worker.c) and a poller
 * (long-polls the head for assignments; poller.c). One monitor thread per
 * agent samples telemetry and registers/heartbeats every worker (monitor.c);
 * one outbox thread per agent delivers job outcomes and progress (outbox.c),
 * so a controller never waits for the head.
 *
 * Locking: worker.mu guards the fields marked [mu]; the controller is the only
 * writer of jobs[] and vram (under mu) so that it may read them without it.
 * Lock order: worker.mu before outbox.mu (the outbox takes no other lock).
 * Never call HTTP or write to a runtime while holding a lock. */
#ifndef GPUQ_AGENT_AGENT_H
#define GPUQ_AGENT_AGENT_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/config.h"
#include "agent/http.h"
#include "agent/lineio.h"
#include "agent/outbox.h"
#include "agent/rtproto.h"
#include "agent/runtime.h"
#include "agent/vram_mgr.h"
#include "gpu/gpu.h"

#define AGENT_PROTOCOL 1
#define WORKER_MAX_JOBS 80 /* concurrency (<= 64) + warm-up jobs */
#define WORKER_MAX_CANCELS 32
/* Most (job_id, attempt) pairs one heartbeat reports: held jobs, assignments
 * not yet taken and outcomes waiting in the outbox. */
#define AGENT_MAX_RUNNING_REPORT 256
#define AGENT_INCARNATION_LEN 16
/* A worker whose runtime flooded stays "degraded" this long after the flood. */
#define FLOOD_DEGRADED_MS 10000

enum worker_state { WS_WARMING, WS_READY, WS_DONE };
enum job_phase { JOB_NEW, JOB_LOADING, JOB_RUNNING };

/* A job the worker holds: assigned by the head (or a warm-up job), until its
 * outcome is reported. Invariant: used ⇒ rid unique among used jobs. */
struct job {
    bool used;
    bool warmup;
    char job_id[64];
    int64_t attempt;
    char epoch[20];      /* the head's epoch the assignment came with ("" none): echoed */
    char rid[RT_ID_MAX]; /* id in the runtime protocol: "<job_id>.<attempt>" */
    char model[AGENT_NAME_MAX];
    char capability[AGENT_NAME_MAX];
    json_t *params; /* owned */
    enum job_phase phase;
    bool cold;             /* this job waited for its model's load */
    bool cancel;           /* the head asked to abort it */
    int64_t assigned_ns;   /* when the agent got it */
    int64_t load_ns;       /* time spent loading its model */
    int64_t run_start_ns;  /* sent to the runtime */
    int64_t progress_post_ns;
    int64_t adopted_ns; /* when it took a restarted head's epoch (0: never); see adopt_or_drop */
    json_t *successor;  /* owned: the same attempt under a new epoch, run once this copy,
                         * being cancelled, has left (see adopt_or_drop) */
};

struct job_ref {
    char job_id[64];
    int64_t attempt;
    int64_t listed_ns; /* the listing this cancel may be about was built by then */
};

enum rt_status { RTS_DOWN, RTS_STARTING, RTS_UP };

struct agent;

struct worker {
    struct agent *agent;
    int index;
    char id[AGENT_NAME_MAX];
    struct gpu_info gpu;
    struct agent_worker_view view;
    char out_dir[PATH_MAX];
    pthread_t ctl_thread, poll_thread;
    int wake[2]; /* self-pipe: wakes the controller's poll */

    pthread_mutex_t mu;
    pthread_cond_t cv;                          /* poller waits for a slot */
    enum worker_state state;                    /* [mu] */
    bool drain;                                 /* [mu] draining to exit (SIGTERM) */
    bool head_drain;                            /* [mu] the head's drain: idle, registered */
    bool said_drained;                          /* controller only: logged the head's drain done */
    bool registered, deregistered;              /* [mu] */
    bool polling;                               /* [mu] a long-poll is out (its own or a group's) */
    /* Its poller waits though it may ask for work (its result waits behind
     * another report, or the outbox is full): set under mu, read without it by whoever would
     * wake it or ask for it (poller.c). */
    atomic_bool poll_waiting;
    /* [mu] when the last heartbeat body was built. A heartbeat's answer
     * carries cancels drawn from its own listing or from the head's events
     * since the one before; they are dated by the one before (see
     * take_inbox: a cancel older than an adoption is not about the adopted
     * copy). */
    int64_t hb_listed_ns;
    json_t *pending;                            /* [mu] assignments not yet taken */
    struct job_ref cancels[WORKER_MAX_CANCELS]; /* [mu] */
    int ncancels;                               /* [mu] */
    int held;                                   /* [mu] head jobs held by the controller */
    struct gpu_telemetry tel;                   /* [mu] latest sample */
    bool tel_valid;                             /* [mu] */
    struct job jobs[WORKER_MAX_JOBS];           /* written under mu by the controller */
    struct vram_mgr vram;                       /* written under mu by the controller */
    int64_t runtime_restarts;                   /* [mu] */
    uint64_t bad_lines;                         /* [mu] runtime lines refused */
    int failures_seen;                          /* [mu] copy of failures */
    int64_t degraded_until_ns;                  /* [mu] health "degraded" until (flood) */

    /* Controller only. */
    struct http_client hc;
    struct runtime_proc rt;
    enum rt_status rts;
    struct line_reader lr;
    struct rt_frame frame;   /* an inline result being read (rtproto.h) */
    int failures;            /* consecutive runtime deaths without a success */
    int64_t restart_at_ns;   /* when DOWN: next spawn */
    int64_t hello_deadline_ns;
    bool warm_started;
    bool warm_failed;      /* a warm-up job failed: not ready; restart the runtime */
    uint64_t seq;            /* ids for load/unload/ping */
    char ping_id[32];
    int64_t ping_sent_ns;    /* 0: none outstanding */
    int64_t next_ping_ns;
    char load_rid[RT_ID_MAX]; /* "" when no load is in progress */
    char load_model[AGENT_NAME_MAX];
    int64_t load_started_ns;
    /* Bad runtime lines: flood window and log rate limit (a token bucket). */
    int64_t bad_window_ns;   /* start of the current flood window */
    int bad_window_lines;    /* bad lines in it */
    double log_tokens;       /* bad lines we may still log */
    int64_t log_tokens_ns;   /* when log_tokens was last refilled */
    uint64_t log_suppressed; /* bad lines not logged since the last one logged */
};

struct agent {
    struct agent_config cfg;
    char head_url[512];
    char token[256];
    char incarnation[AGENT_INCARNATION_LEN + 1]; /* random boot id, hex */
    struct gpu_source gpus;
    int nworkers;
    struct worker *workers[GPU_MAX];
    pthread_t monitor_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool kick; /* [mu] heartbeat now */
    bool stop; /* [mu] monitor exits */
    atomic_bool incarnation_refused; /* the head refused the field: sent no more */
    atomic_int poll_workers;         /* most workers one poll may name (the head's; 1: none) */
    struct outbox outbox;
    pthread_t outbox_thread;
    struct http_client outbox_hc; /* the outbox thread's */
};

/* worker.c */
struct worker *worker_create(struct agent *a, int index, const struct gpu_info *gpu);
void worker_destroy(struct worker *w);
int worker_start(struct worker *w);
void worker_join(struct worker *w);
/* worker_request_drain: finish what it holds, take nothing new, deregister. */
void worker_request_drain(struct worker *w);
/* worker_set_head_drain: the head's drain flag (heartbeat answers). On: take
 * nothing new, finish what it holds, stay registered; off: take work again. */
void worker_set_head_drain(struct worker *w, bool on);
void worker_wake(struct worker *w);
/* worker_busy: share of slots running a job (0..1), for the sim thermal model. */
double worker_busy_locked(const struct worker *w);

/* agent_make_incarnation: AGENT_INCARNATION_LEN random hex chars (from
 * /dev/urandom; the clock and pid if it cannot be read) into out. */
void agent_make_incarnation(char out[AGENT_INCARNATION_LEN + 1]);

/* poller.c */
void *poller_main(void *arg);
/* poller_slot_freed_locked: a slot of w freed (under w->mu): wakes its
 * poller, unless it would only wait for w's result to leave (it waits
 * behind another report; the outbox's hook wakes it then). */
void poller_slot_freed_locked(struct worker *w);
/* poller_outbox_sent: the outbox's hook (arg: struct agent *): results are
 * leaving, so workers that waited for theirs may poll. */
void poller_outbox_sent(void *arg);
/* poller_outbox_room: the outbox's hook (arg: struct agent *) when it has
 * room again after workers found it full: they may poll at once. */
void poller_outbox_room(void *arg);

/* monitor.c */
void *monitor_main(void *arg);
void monitor_kick(struct agent *a);
/* monitor_register_body / heartbeat body builders (for tests). Call with w->mu held. */
json_t *monitor_register_body_locked(const struct worker *w);
json_t *monitor_heartbeat_body_locked(const struct worker *w, int64_t now_ns);

#endif
