/* fleet.h: the fleet at a glance — what the dashboard and `gpuq top` show.
 * fleet_view copies one consistent-enough snapshot out of the head (each part
 * under its own lock, taken one after the other): every GPU with its
 * telemetry, state, loaded models and the attempts running there; the queues
 * and their backlog per (capability, lane); the recent placement decisions
 * with their reasons; each tenant's usage. A view is plain data: the API
 * renders it.
 *
 * The recent decisions are a bounded ring (struct fleet) the dispatcher
 * appends to on every placement; readers copy it out. Thread-safe.
 *
 * Cost: a view never walks the queued jobs. Queue depths and backlogs come
 * from the job table's counters (jobs_queue_stats, O(queue groups)); only the
 * running jobs are visited (the job table's timed list), to put them on their
 * GPUs' cards. The event streams share their snapshots: head_fleet_shared
 * collects the fleet once per tick for every connected stream and renders it
 * once per scope (admin, or each tenant with a stream open).
 *
 * Scope: a view taken for a tenant (tenant_id >= 0) shows every GPU (the
 * fleet is shared) but names only that tenant's jobs: another tenant's
 * running job is shown as busy, without id, capability or model; decisions
 * and usage list its own jobs only. The queues' totals are shown to all. */
#ifndef GPUQ_HEAD_FLEET_H
#define GPUQ_HEAD_FLEET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/sched.h"
#include "head/registry.h"
#include "store/records.h"

struct head;
struct fleet;

#define FLEET_RING 32          /* recent decisions kept */
#define FLEET_GPU_JOBS 8       /* running attempts shown per GPU */
#define FLEET_GPU_MODELS 16    /* loaded models shown per GPU */
#define FLEET_MAX_QUEUES 64    /* (capability, lane) rows */
#define FLEET_MAX_TENANTS 64   /* tenants with queued or running work */

struct fleet *fleet_create(void);
void fleet_destroy(struct fleet *f);

/* The dispatcher placed job_id on worker_id (why: the scheduler's explanation).
 * wall_ms: when, for display. Dispatcher thread; takes the ring's lock only. */
void fleet_note_placement(struct fleet *f, uint64_t job_id, const char *worker_id,
                          const struct sched_explain *why, int64_t wall_ms);

/* A job running on a GPU. Shown in full only to the admin and to its own
 * tenant (fleet_job_visible); to another tenant, only phase and progress. */
struct fleet_job {
    uint64_t id;
    int64_t tenant_id;
    char capability[REC_NAME_MAX];
    char model[REC_NAME_MAX];
    enum job_phase phase;
    double progress;           /* 0..1 */
    int64_t started_ms;        /* wall */
};

struct fleet_model {
    char name[SCHED_NAME_MAX];
    int64_t vram_mb;
    bool pinned;
};

/* One GPU. state: "ready", "warming", "draining", "quarantined" or "probing". */
struct fleet_gpu {
    char id[SCHED_NAME_MAX];
    char host[128];
    int gpu_index;
    char gpu_name[128];
    const char *state;         /* static string */
    char breaker_reason[160];
    struct telemetry tel;
    int concurrency, inflight;
    struct fleet_model models[FLEET_GPU_MODELS];
    int nmodels;               /* loaded models (at most FLEET_GPU_MODELS shown) */
    struct fleet_job jobs[FLEET_GPU_JOBS];
    int njobs;                 /* shown (the first FLEET_GPU_JOBS found) */
    int nrunning;              /* jobs the head has running there */
    int64_t last_seen_ms_ago;
};

/* Work waiting or running for one (capability, lane). backlog_s: estimated
 * GPU-seconds of the queued jobs (their cost_s). */
struct fleet_queue {
    char capability[REC_NAME_MAX];
    enum job_lane lane;
    int queued, running;
    double backlog_s;
};

struct fleet_decision {
    uint64_t job_id;
    int64_t tenant_id;         /* -1: unknown (the job is gone from memory) */
    int64_t wall_ms;
    char worker[SCHED_NAME_MAX];
    char reason[160];
    int scored;                /* candidates scored */
    double score_s;            /* the winner's estimated completion, seconds */
    bool warm;                 /* the winner had the model loaded */
};

struct fleet_tenant {
    int64_t id;
    char name[REC_NAME_MAX];
    int queued, running;
    double backlog_s;
};

/* Invariant: every count is the number of filled entries of its array;
 * gpus is sorted by id, queues by (capability, lane), decisions newest first.
 * decisions and tenants hold only what the scope may see; gpus hold every
 * job (fleet_job_visible says what to show). */
struct fleet_view {
    int64_t tenant_id;         /* the scope it was taken for; -1: everything (admin) */
    int64_t wall_ms;
    struct fleet_gpu *gpus;    /* owned unless gpus_shared (another view's) */
    bool gpus_shared;
    int ngpus;
    struct fleet_queue queues[FLEET_MAX_QUEUES];
    int nqueues;
    bool queues_truncated;
    struct fleet_decision decisions[FLEET_RING];
    int ndecisions;
    struct fleet_tenant tenants[FLEET_MAX_TENANTS];
    int ntenants;
    int queued, running;       /* totals over the queues */
    double backlog_s;
};

/* Fills *out (fleet_view_free releases it) as seen by tenant_id (-1: admin).
 * Part of the head's operations (head/ops.h) for the API. */
void head_fleet_view(struct head *h, int64_t tenant_id, struct fleet_view *out);
void fleet_view_free(struct fleet_view *v);

/* May the scope of v see j's id, capability and model? */
static inline bool fleet_job_visible(const struct fleet_view *v, const struct fleet_job *j)
{
    return v->tenant_id < 0 || j->tenant_id == v->tenant_id;
}

/* A rendered snapshot, shared by every stream of one scope. gen changes
 * whenever the text does (a stream sends a snapshot when gen differs from the
 * last it sent). Immutable once published; refs counts its holders. */
struct fleet_text {
    atomic_int refs;
    uint64_t gen;
    size_t len;
    char data[];
};

struct buf;
typedef void (*fleet_render_fn)(struct buf *out, const struct fleet_view *v);

/* The snapshot of scope tenant_id (-1: admin) for tick (a count of stream
 * periods on the monotonic clock): the first caller in a tick collects the
 * fleet (for every scope at once), the first caller of each scope renders it
 * with render; the others get the same text. The caller releases it with
 * fleet_text_unref. At most FLEET_SCOPES scopes are kept (the one unused the
 * longest is dropped). Any thread; callers in one tick wait for one another. */
#define FLEET_SCOPES 16
struct fleet_text *head_fleet_shared(struct head *h, int64_t tenant_id, int64_t tick,
                                     fleet_render_fn render);
void fleet_text_unref(struct fleet_text *t);

#endif
