/* head.c: what the head does to jobs — submit, cancel, requeue, the agent's
 * progress/complete/fail with attempt fencing, retries — and authentication.
 * Every change follows the rule in jobs.h: memory and the commit queue under
 * the table lock, waiters woken and callers answered once durable. */
#include "head/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "head/dispatch.h"

#define MOD "head"

void head_authenticate(struct head *h, const char *bearer, struct caller *out)
{
    memset(out, 0, sizeof *out);
    out->kind = CALLER_NONE;
    if (!bearer || !*bearer || strlen(bearer) > 256)
        return;
    char hash[TOKEN_HASH_HEX];
    token_hash(bearer, hash);
    if (token_equal(hash, h->admin_hash)) {
        out->kind = CALLER_ADMIN;
        return;
    }
    if (tenants_by_hash(h->tenants, hash, &out->tenant)) {
        out->kind = CALLER_TENANT;
        return;
    }
    if (tenants_token_ok(h->tenants, hash))
        out->kind = CALLER_WORKER;
}

/* A job write on its way to the store. */
struct job_op {
    struct commit_op op;
    struct head *h;
    bool insert;
    struct job_rec rec;        /* snapshot; params_json borrowed (immutable) or owned */
    bool own_params;
    const void *result;        /* complete: output bytes (borrowed: the writer waits) */
    size_t result_len;
    bool requeue;              /* async requeue: hand to the dispatcher once durable */
    head_done_fn done;         /* async submit / complete: the caller's answer */
    void *done_arg;
    int64_t load_ms, run_ms;   /* complete: measured times for the estimator */
};

static int job_op_apply(struct store *s, struct commit_op *op)
{
    struct job_op *o = (struct job_op *)op;
    int rc = o->insert ? s->ops->job_insert(s, &o->rec) : s->ops->job_update(s, &o->rec);
    if (!rc && o->result)
        rc = s->ops->result_put(s, o->rec.id, o->rec.result_type, o->result, o->result_len);
    return rc;
}

static void wake(struct head *h, uint64_t id)
{
    jobs_lock(h->jobs);
    struct hjob *j = jobs_find(h->jobs, id);
    if (j)
        jobs_changed(h->jobs, j);
    jobs_unlock(h->jobs);
}

static void job_op_free(struct job_op *o)
{
    if (o->own_params)
        free(o->rec.params_json);
    free(o);
}

static void job_op_done_async(struct commit_op *op, int rc)
{
    struct job_op *o = (struct job_op *)op;
    if (rc)
        log_error(MOD, "job %llu: change not stored: %s", (unsigned long long)o->rec.id,
                  gpuq_strerror(rc));
    wake(o->h, o->rec.id);
    if (o->requeue && !rc)
        dispatcher_job_add(o->h->disp, &o->rec);
    job_op_free(o);
}

static struct job_op *job_op_new(struct head *h, const struct hjob *j)
{
    struct job_op *o = xcalloc(1, sizeof *o);
    o->op.apply = job_op_apply;
    o->h = h;
    o->rec = j->rec;
    o->rec.params_json = xstrdup(j->rec.params_json ? j->rec.params_json : "{}");
    o->own_params = true;
    return o;
}

/* Waits for an op submitted under the table lock (now released); wakes waiters. */
static int job_op_wait(struct head *h, struct job_op *o)
{
    int rc = committer_wait(h->committer, &o->op);
    wake(h, o->rec.id);
    job_op_free(o);
    return rc;
}

static void eta_for(struct head *h, struct job_rec *rec)
{
    struct dispatch_stats st;
    dispatcher_get_stats(h->disp, &st);
    int workers = st.ready_workers > 0 ? st.ready_workers : 1;
    double wait_s = st.sched.backlog_s / workers;
    int64_t now = clock_wall_ms();
    rec->eta_start_ms = now + (int64_t)(wait_s * 1000);
    rec->eta_finish_ms = rec->eta_start_ms + (int64_t)(rec->cost_s * 1000);
}

static void copy_out(const struct job_rec *src, struct job_rec *out)
{
    *out = *src;
    out->params_json = xstrdup(src->params_json ? src->params_json : "{}");
}

static void submit_done(struct commit_op *op, int rc)
{
    struct job_op *o = (struct job_op *)op;
    struct head *h = o->h;
    struct job_rec out = {0};
    jobs_lock(h->jobs);
    struct hjob *j = jobs_find(h->jobs, o->rec.id);
    if (rc == 0) {
        j->committed = true;
        jobs_changed(h->jobs, j);
        copy_out(&j->rec, &out);
    } else if (j) {
        jobs_remove(h->jobs, j);
    }
    jobs_unlock(h->jobs);
    if (rc == 0)
        dispatcher_job_add(h->disp, &o->rec);
    o->done(o->done_arg, rc, &out, false);
    job_rec_free_fields(&out);
    job_op_free(o);
}

void head_submit(struct head *h, struct job_rec *rec, head_done_fn done, void *arg)
{
    jobs_lock(h->jobs);
    for (;;) {
        struct hjob *prev = rec->idem_key[0]
                                ? jobs_find_idem(h->jobs, rec->tenant_id, rec->idem_key)
                                : NULL;
        if (!prev)
            break;
        if (!prev->committed) {
            /* The first request with this key is still committing (a fraction of one
             * fsync): wait for it. Rare — only concurrent retries get here. */
            uint64_t v = prev->version;
            jobs_wait(h->jobs, prev, v, clock_mono_ns() + 10 * NS_PER_S);
            continue;
        }
        struct job_rec out = {0};
        int rc = strcmp(prev->rec.body_hash, rec->body_hash) ? GPUQ_ECONFLICT : 0;
        if (!rc)
            copy_out(&prev->rec, &out);
        jobs_unlock(h->jobs);
        done(arg, rc, &out, rc == 0);
        job_rec_free_fields(&out);
        return;
    }
    rec->id = jobs_next_id(h->jobs);
    rec->state = JOB_QUEUED;
    rec->created_ms = clock_wall_ms();
    eta_for(h, rec);
    struct hjob *j = jobs_insert(h->jobs, rec);
    struct job_op *o = job_op_new(h, j);
    o->insert = true;
    o->op.done = submit_done;
    o->done = done;
    o->done_arg = arg;
    committer_submit(h->committer, &o->op);
    jobs_unlock(h->jobs);
}

/* Finds a visible job of this tenant (tenant_id < 0: any). Lock held. */
static struct hjob *find_visible(struct head *h, int64_t tenant_id, uint64_t id)
{
    struct hjob *j = jobs_find(h->jobs, id);
    if (!j || !j->committed || (tenant_id >= 0 && j->rec.tenant_id != tenant_id))
        return NULL;
    return j;
}

int head_get(struct head *h, int64_t tenant_id, uint64_t id, uint64_t *version,
             struct job_rec *out)
{
    jobs_lock(h->jobs);
    struct hjob *j = find_visible(h, tenant_id, id);
    if (!j) {
        jobs_unlock(h->jobs);
        /* Not in memory (swept after retention): the store has it. */
        struct job_rec rec;
        int rc = h->store->ops->job_get(h->store, id, &rec);
        if (rc)
            return rc;
        if (tenant_id >= 0 && rec.tenant_id != tenant_id) {
            job_rec_free_fields(&rec);
            return GPUQ_ENOENT;
        }
        *out = rec;
        if (version)
            *version = 0;
        return 0;
    }
    head_job_copy(j, out, version);
    jobs_unlock(h->jobs);
    return 0;
}

void head_job_copy(const struct hjob *j, struct job_rec *out, uint64_t *version)
{
    copy_out(&j->rec, out);
    if (version)
        *version = j->version;
}

int head_watch(struct head *h, int64_t tenant_id, uint64_t id, uint64_t since,
               struct job_watch *w, bool *watching, struct job_rec *out, uint64_t *version)
{
    jobs_lock(h->jobs);
    struct hjob *j = find_visible(h, tenant_id, id);
    if (!j) {
        jobs_unlock(h->jobs);
        /* Finished long ago (swept from memory): the store has it, and it won't change. */
        *watching = false;
        if (version)
            *version = 0;
        int rc = h->store->ops->job_get(h->store, id, out);
        if (!rc && tenant_id >= 0 && out->tenant_id != tenant_id) {
            job_rec_free_fields(out);
            rc = GPUQ_ENOENT;
        }
        return rc;
    }
    *watching = !job_state_terminal(j->rec.state) && !jobs_stopping(h->jobs) &&
                (since == 0 || since == j->version);
    if (*watching)
        jobs_watch(h->jobs, j, w);
    head_job_copy(j, out, version);
    jobs_unlock(h->jobs);
    return 0;
}

bool head_unwatch(struct head *h, uint64_t id, struct job_watch *w)
{
    jobs_lock(h->jobs);
    struct hjob *j = jobs_find(h->jobs, id);
    bool linked = j && jobs_unwatch(h->jobs, j, w);
    jobs_unlock(h->jobs);
    return linked;
}

int head_cancel(struct head *h, int64_t tenant_id, uint64_t id, struct job_rec *out)
{
    jobs_lock(h->jobs);
    struct hjob *j = find_visible(h, tenant_id, id);
    if (!j) {
        jobs_unlock(h->jobs);
        return GPUQ_ENOENT;
    }
    if (job_state_terminal(j->rec.state) || j->completing) { /* completing: too late */
        copy_out(&j->rec, out);
        jobs_unlock(h->jobs);
        return GPUQ_ECONFLICT;
    }
    bool was_running = j->rec.state == JOB_RUNNING;
    char worker[REC_NAME_MAX];
    snprintf(worker, sizeof worker, "%s", j->rec.worker_id);
    int attempt = j->rec.attempt;
    j->rec.state = JOB_CANCELLED;
    j->rec.phase = PHASE_NONE;
    j->rec.finished_ms = clock_wall_ms();
    snprintf(j->rec.error_class, sizeof j->rec.error_class, "cancelled");
    snprintf(j->rec.error_message, sizeof j->rec.error_message, "cancelled by the client");
    struct job_op *o = job_op_new(h, j);
    committer_submit(h->committer, &o->op);
    copy_out(&j->rec, out);
    jobs_unlock(h->jobs);
    dispatcher_job_cancel(h->disp, id);
    if (was_running)
        registry_add_cancel(h->registry, worker, id, attempt);
    return job_op_wait(h, o);
}

/* Fencing: the job must be running this attempt on this worker. Lock held. */
static int fence(struct head *h, uint64_t id, const char *worker, int attempt, struct hjob **out)
{
    struct hjob *j = jobs_find(h->jobs, id);
    if (!j || !j->committed)
        return GPUQ_ENOENT;
    if (j->rec.state != JOB_RUNNING || j->rec.attempt != attempt ||
        strcmp(j->rec.worker_id, worker) != 0)
        return GPUQ_ESTALE;
    if (j->completing)
        return GPUQ_EAGAIN; /* its result is being committed */
    *out = j;
    return 0;
}

int head_progress(struct head *h, uint64_t id, const char *worker, int attempt,
                  enum job_phase phase, double progress)
{
    jobs_lock(h->jobs);
    struct hjob *j;
    int rc = fence(h, id, worker, attempt, &j);
    if (rc) {
        jobs_unlock(h->jobs);
        return rc;
    }
    /* Progress is not persisted (a restart re-runs the job anyway); waiters see it now. */
    j->rec.phase = phase;
    j->rec.progress = progress;
    jobs_changed(h->jobs, j);
    jobs_unlock(h->jobs);
    return 0;
}

static void complete_done(struct commit_op *op, int rc)
{
    struct job_op *o = (struct job_op *)op;
    struct head *h = o->h;
    struct job_rec out = {0};
    jobs_lock(h->jobs);
    struct hjob *j = jobs_find(h->jobs, o->rec.id);
    if (j) {
        j->completing = false;
        if (rc == 0) { /* durable now: clients may see it */
            j->rec.state = o->rec.state;
            j->rec.phase = o->rec.phase;
            j->rec.progress = o->rec.progress;
            j->rec.finished_ms = o->rec.finished_ms;
            memcpy(j->rec.result_type, o->rec.result_type, sizeof j->rec.result_type);
            j->rec.result_bytes = o->rec.result_bytes;
            jobs_changed(h->jobs, j);
        }
        copy_out(&j->rec, &out);
    }
    jobs_unlock(h->jobs);
    dispatcher_job_finished(h->disp, o->rec.id, o->rec.worker_id, rc == 0,
                            o->load_ms * NS_PER_MS, o->run_ms * NS_PER_MS);
    o->done(o->done_arg, rc, &out, false);
    job_rec_free_fields(&out);
    job_op_free(o);
}

void head_complete(struct head *h, uint64_t id, const char *worker, int attempt,
                   const char *content_type, const void *data, size_t len, int64_t load_ms,
                   int64_t run_ms, head_done_fn done, void *arg)
{
    struct job_rec out = {0};
    jobs_lock(h->jobs);
    struct hjob *j;
    int rc = fence(h, id, worker, attempt, &j);
    if (rc == GPUQ_ESTALE) {
        struct hjob *prev = jobs_find(h->jobs, id);
        if (prev->rec.state == JOB_SUCCEEDED && prev->rec.attempt == attempt &&
            !strcmp(prev->rec.worker_id, worker)) {
            /* A retried request for a result already accepted: not accepted twice. */
            copy_out(&prev->rec, &out);
            jobs_unlock(h->jobs);
            done(arg, 0, &out, true);
            job_rec_free_fields(&out);
            return;
        }
    }
    if (rc) {
        jobs_unlock(h->jobs);
        done(arg, rc, &out, false);
        return;
    }
    /* The job stays running in memory until the result is durable (complete_done). */
    j->completing = true;
    struct job_op *o = job_op_new(h, j);
    o->rec.state = JOB_SUCCEEDED;
    o->rec.phase = PHASE_NONE;
    o->rec.progress = 1.0;
    o->rec.finished_ms = clock_wall_ms();
    snprintf(o->rec.result_type, sizeof o->rec.result_type, "%s", content_type);
    o->rec.result_bytes = (int64_t)len;
    o->result = data;
    o->result_len = len;
    o->load_ms = load_ms;
    o->run_ms = run_ms;
    o->op.done = complete_done;
    o->done = done;
    o->done_arg = arg;
    committer_submit(h->committer, &o->op);
    jobs_unlock(h->jobs);
}

/* Requeue, lock held: the job goes back to the queue (memory now, store async). */
static void requeue_locked(struct head *h, struct hjob *j, const char *exclude_worker)
{
    j->rec.state = JOB_QUEUED;
    j->rec.phase = PHASE_NONE;
    j->rec.progress = 0;
    snprintf(j->rec.exclude_worker, sizeof j->rec.exclude_worker, "%s",
             exclude_worker ? exclude_worker : "");
    struct job_op *o = job_op_new(h, j);
    o->op.done = job_op_done_async;
    o->requeue = true;
    committer_submit(h->committer, &o->op);
}

void head_requeue(struct head *h, uint64_t job_id, const char *exclude_worker)
{
    jobs_lock(h->jobs);
    struct hjob *j = jobs_find(h->jobs, job_id);
    if (j && j->rec.state == JOB_RUNNING && !j->completing)
        requeue_locked(h, j, exclude_worker);
    jobs_unlock(h->jobs);
}

int head_fail(struct head *h, uint64_t id, const char *worker, int attempt, const char *cls,
              const char *message, bool *retried)
{
    *retried = false;
    jobs_lock(h->jobs);
    struct hjob *j;
    int rc = fence(h, id, worker, attempt, &j);
    if (rc) {
        jobs_unlock(h->jobs);
        return rc;
    }
    snprintf(j->rec.error_class, sizeof j->rec.error_class, "%s", cls);
    snprintf(j->rec.error_message, sizeof j->rec.error_message, "%s", message ? message : "");
    bool retry = strcmp(cls, "bad_input") != 0 && strcmp(cls, "cancelled") != 0 &&
                 j->rec.attempt < h->cfg.max_attempts;
    struct job_op *o;
    if (retry) {
        log_warn(MOD, "job %llu attempt %d failed on %s (%s): retrying elsewhere",
                 (unsigned long long)id, attempt, worker, cls);
        j->rec.state = JOB_QUEUED;
        j->rec.phase = PHASE_NONE;
        j->rec.progress = 0;
        snprintf(j->rec.exclude_worker, sizeof j->rec.exclude_worker, "%s", worker);
    } else {
        log_warn(MOD, "job %llu failed on %s after %d attempt(s): %s", (unsigned long long)id,
                 worker, attempt, cls);
        j->rec.state = JOB_FAILED;
        j->rec.phase = PHASE_NONE;
        j->rec.finished_ms = clock_wall_ms();
    }
    o = job_op_new(h, j);
    committer_submit(h->committer, &o->op);
    struct job_rec snapshot = o->rec;
    jobs_unlock(h->jobs);
    dispatcher_job_finished(h->disp, id, worker, false, 0, 0);
    if (retry)
        dispatcher_job_add(h->disp, &snapshot);
    *retried = retry;
    return job_op_wait(h, o);
}

struct recover_ctx {
    struct head *h;
    int queued, requeued, finished;
};

static void recover_job(void *arg, struct job_rec *rec)
{
    struct recover_ctx *c = arg;
    struct head *h = c->h;
    jobs_lock(h->jobs);
    struct hjob *j = jobs_insert(h->jobs, rec);
    j->committed = true;
    if (j->rec.state == JOB_RUNNING) {
        /* Its agent may still run it; a completion for this attempt would be refused
         * once it is re-queued, and the job runs again: at least once, accepted once. */
        requeue_locked(h, j, "");
        c->requeued++;
    } else if (j->rec.state == JOB_QUEUED) {
        dispatcher_job_add(h->disp, &j->rec);
        c->queued++;
    } else {
        c->finished++;
    }
    jobs_unlock(h->jobs);
}

int head_recover(struct head *h)
{
    uint64_t max_id = 0;
    int rc = h->store->ops->max_job_id(h->store, &max_id);
    if (rc)
        return rc;
    jobs_lock(h->jobs);
    jobs_set_next_id(h->jobs, max_id + 1);
    jobs_unlock(h->jobs);
    struct recover_ctx c = {h, 0, 0, 0};
    int64_t since = clock_wall_ms() - 3600 * 1000;
    rc = h->store->ops->load_jobs(h->store, since, recover_job, &c);
    if (rc)
        return rc;
    log_info(MOD, "recovered %d queued and %d running (re-queued) jobs; %d recent finished",
             c.queued, c.requeued, c.finished);
    return 0;
}
