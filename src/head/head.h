/* head.h: gpuqd's state — configuration, store and committer, the live job
 * table, tenants, the worker registry and the dispatcher — and the
 * operations the API layer calls. Each part has its own lock; the
 * scheduler's state belongs to the dispatcher thread alone. */
#ifndef GPUQ_HEAD_HEAD_H
#define GPUQ_HEAD_HEAD_H

#include <stdatomic.h>
#include <stdbool.h>

#include "common/token.h"
#include "head/config.h"
#include "head/jobs.h"
#include "head/registry.h"
#include "head/tenants.h"
#include "store/committer.h"
#include "store/store.h"

struct dispatcher;
struct http_server;
struct timers;

struct head {
    struct head_config cfg;
    struct store *store;
    struct committer *committer;
    struct jobs *jobs;
    struct tenants *tenants;
    struct registry *registry;
    struct dispatcher *disp;
    struct http_server *http;
    struct timers *timers;
    char admin_hash[TOKEN_HASH_HEX];
    atomic_bool ready;
    atomic_bool stopping;
};

/* Who is calling, after authentication. */
enum caller_kind { CALLER_NONE, CALLER_TENANT, CALLER_ADMIN, CALLER_WORKER };

struct caller {
    enum caller_kind kind;
    struct tenant_rec tenant; /* CALLER_TENANT */
};

/* head_authenticate classifies a bearer credential (NULL = none). */
void head_authenticate(struct head *h, const char *bearer, struct caller *out);

/* Persist a job update and apply it to memory. rec is the new full record of
 * an existing job; the caller holds j->busy (see jobs.h). Returns 0 or the
 * store's error (memory unchanged). */
int head_commit_job(struct head *h, struct hjob *j, const struct job_rec *rec);

/* Job lifecycle operations used by the API and the dispatcher. */
/* Sends a job back to the queue (its worker died or it failed and will be retried). */
void head_requeue(struct head *h, uint64_t job_id, const char *exclude_worker);

#endif
