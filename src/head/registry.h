/* registry.h: the workers (one per GPU) that agents registered, with their
 * latest telemetry, loaded models and running attempts. The HTTP threads
 * update it from registrations and heartbeats; the dispatcher reads it to
 * refresh the scheduler and expires workers silent past their TTL (R22).
 * Thread-safe (one mutex). */
#ifndef GPUQ_HEAD_REGISTRY_H
#define GPUQ_HEAD_REGISTRY_H

#include <stdbool.h>
#include <stdint.h>

#include "core/breaker.h"
#include "core/sched.h"

#define REG_MAX_MODELS 32
#define REG_MAX_RUNNING 256
#define REG_MAX_CANCELS 64

enum worker_state { WORKER_WARMING = 0, WORKER_READY = 1, WORKER_DRAINING = 2 };

struct reg_model {
    char name[SCHED_NAME_MAX];
    int64_t vram_mb;
    int64_t load_ms;
    enum model_class cls;
    bool pinned;
    bool loaded;
    int64_t last_used_ms_ago;
};

struct reg_attempt {
    uint64_t job_id;
    int attempt;
};

struct telemetry {
    double temp_c;
    int64_t vram_total_mb, vram_used_mb, vram_free_mb;
    double util_pct, power_w;
    int sm_clock_mhz;
    char throttle[128];       /* comma-separated reasons; "" = none */
    char health[16];          /* ok | degraded | failed */
};

struct worker_rec {
    char id[SCHED_NAME_MAX];
    char incarnation[64];     /* the agent's boot id ("" = not given) */
    char host[128];
    int gpu_index;
    char gpu_name[128];
    char gpu_uuid[96];
    char caps[SCHED_MAX_CAPS][SCHED_NAME_MAX];
    int ncaps;
    int concurrency;
    int ahead;                /* jobs it holds beyond its slots (0 or 1; sched.h) */
    enum worker_state state;
    bool drain_requested;     /* by an admin: told to the agent in heartbeat answers */
    struct telemetry tel;
    struct reg_model models[REG_MAX_MODELS]; /* declared models; loaded marks residency */
    int nmodels;
    struct reg_attempt running[REG_MAX_RUNNING]; /* as the agent last reported */
    int nrunning;
    struct reg_attempt cancels[REG_MAX_CANCELS]; /* to tell the agent */
    int ncancels;
    long long cache_hits, cache_misses;
    int64_t registered_ms;
    int64_t last_seen_ns;
    int64_t last_poll_ns;     /* its latest assignment poll (registry_polled) */
    int inflight;             /* attempts the head assigned and has not seen end */
    /* The dispatcher's circuit breaker for this worker, as last published. */
    enum breaker_state breaker;
    char breaker_reason[160];
    int64_t breaker_trips;
};

struct registry;

struct registry *registry_create(void);
void registry_destroy(struct registry *r);

/* Adds or replaces a worker (keeps drain_requested, inflight and the breaker).
 * *restarted: the id was known under another incarnation. */
void registry_register(struct registry *r, const struct worker_rec *w, int64_t now_ns,
                       bool *restarted);
/* Applies a heartbeat: fields state, tel, models' loaded flags, running, cache.
 * Returns GPUQ_ENOENT for an unknown worker. Copies out the drain flag and the
 * pending cancels (which are then cleared). */
int registry_heartbeat(struct registry *r, const struct worker_rec *hb, int64_t now_ns,
                       bool *drain, struct reg_attempt *cancels, int *ncancels);
int registry_remove(struct registry *r, const char *id);
int registry_request_drain(struct registry *r, const char *id);
/* Clears an admin's drain request; GPUQ_ENOENT for an unknown worker. */
int registry_cancel_drain(struct registry *r, const char *id);
void registry_add_cancel(struct registry *r, const char *id, uint64_t job_id, int attempt);
void registry_inflight(struct registry *r, const char *id, int delta);
/* Publishes the worker's breaker (the dispatcher's) for readers. */
void registry_set_breaker(struct registry *r, const char *id, const struct breaker *b);
/* Copies one worker out. */
int registry_get(struct registry *r, const char *id, struct worker_rec *out);
/* An assignment poll names the worker, which its agent sends only while the
 * worker is ready: remembered as its latest report beside its heartbeats
 * (worker_info.reported_ns). Returns whether the worker is registered. */
bool registry_polled(struct registry *r, const char *id, int64_t now_ns);
/* The scheduler's view of one worker (without copying the record out);
 * GPUQ_ENOENT for an unknown worker. */
int registry_get_info(struct registry *r, const char *id, int64_t now_ns, struct worker_info *out);
/* Copies up to max workers; returns the count. */
int registry_list(struct registry *r, struct worker_rec *out, int max);
int registry_count(struct registry *r);
/* Calls fn for every worker with the registry locked (fn must not call the registry). */
void registry_foreach(struct registry *r, void (*fn)(void *arg, const struct worker_rec *w),
                      void *arg);
/* Workers ready for work (not warming, not draining). */
int registry_count_ready(struct registry *r);
/* Moves every worker's last-seen time gap_ns later: the head itself stood
 * still for that long (lc_stall_ns), so silence then does not count toward
 * the TTL. */
void registry_shift(struct registry *r, int64_t gap_ns);
/* Ids of workers silent since before now - ttl_ns (up to max); they are removed. */
int registry_expire(struct registry *r, int64_t now_ns, int64_t ttl_ns,
                    char (*ids)[SCHED_NAME_MAX], int max);

#endif
