/* head.c: what the head does to jobs and workers — submit, cancel, resubmit,
 * the agent's progress/complete/fail, leases and timeouts on the dispatcher's
 * tick, reconciliation of heartbeats and restarts — and authentication.
 *
 * A job's life changes only through core/lifecycle.h (lc_*): this file only
 * applies its answers — memory, the store (the job and the attempt that
 * ended, in one commit), the scheduler (through the dispatcher's messages),
 * the worker (its cancel list). Every change follows the rule in jobs.h:
 * memory and the commit queue under the table lock, waiters woken and callers
 * answered once the commit is done. No function here waits for an fsync. */
#include "head/ops.h"
#include "head/ops_admin.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "head/admission.h"
#include "head/dispatch.h"
#include "head/inputs.h"
#include "head/retention.h"
#include "head/scale.h"
#include "head/metrics.h"
#include "head/trace.h"

#define MOD "head"

/* The hash of a presented key, remembered per thread for the last key: a
 * client on a keep-alive connection presents the same key on every request,
 * and its SHA-256 was a fortieth of a submit's instructions. Only the
 * key-to-hash step is remembered: who the hash belongs to is looked up every
 * time, so a revoked key stops working at once. The keys are compared in
 * time independent of where they differ (no hint of the previous caller's
 * key). */
static void bearer_hash(const char *bearer, char hash[TOKEN_HASH_HEX])
{
    static _Thread_local char last_key[257];
    static _Thread_local size_t last_len; /* 0: none yet */
    static _Thread_local char last_hash[TOKEN_HASH_HEX];
    size_t len = strlen(bearer); /* <= 256 (the caller checked) */
    if (last_len && len == last_len) {
        unsigned char diff = 0;
        for (size_t i = 0; i < len; i++)
            diff |= (unsigned char)(bearer[i] ^ last_key[i]);
        if (!diff) {
            memcpy(hash, last_hash, TOKEN_HASH_HEX);
            return;
        }
    }
    token_hash(bearer, hash);
    memcpy(last_key, bearer, len + 1);
    last_len = len;
    memcpy(last_hash, hash, TOKEN_HASH_HEX);
}

void head_authenticate(struct head *h, const char *bearer, struct caller *out)
{
    memset(out, 0, sizeof *out);
    out->kind = CALLER_NONE;
    if (!bearer || !*bearer || strlen(bearer) > 256)
        return;
    char hash[TOKEN_HASH_HEX];
    bearer_hash(bearer, hash);
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

static struct lc_now now_lc(void)
{
    struct lc_now n = {clock_mono_ns(), clock_wall_ms()};
    return n;
}

/* A job write on its way to the store: the job's new record and, when an
 * attempt ended with this change, that attempt — in one transaction. */
struct job_op {
    struct commit_op op;
    struct head *h;
    bool insert;
    struct job_rec rec;        /* snapshot; owns params_json; no attempts */
    bool has_ended;
    struct lc_attempt ended;
    const void *result;        /* complete: output bytes (borrowed: the request waits) */
    size_t result_len;
    bool requeue;              /* queued again: hand it to the scheduler when done (either way) */
    head_done_fn done;         /* the caller's answer, once done */
    void *done_arg;
    bool flag;                 /* passed to done */
    int64_t load_ms, run_ms;   /* complete: measured times for the estimator */
    /* submit: the 201 needs the commit and the first ETA; with the dispatch
     * overlapping the commit (early) they come in either order, and the
     * second to come answers. */
    bool early;
    bool to_end;               /* answered at the job's end (POST /v1/jobs?wait=) */
    _Atomic int pending;       /* halves still to come */
    int commit_rc;
    int eta_rc;
    double eta_start_s, eta_finish_s;
    char eta_why[160];
};

static int job_op_apply(struct store *s, struct commit_op *op)
{
    struct job_op *o = (struct job_op *)op;
    int rc = o->insert ? s->ops->job_insert(s, &o->rec) : s->ops->job_update(s, &o->rec);
    if (!rc && o->insert)
        rc = inputs_link(s, &o->rec);
    if (!rc && o->has_ended)
        rc = s->ops->attempt_put(s, o->rec.id, &o->ended);
    if (!rc && o->result)
        rc = s->ops->result_put(s, o->rec.id, o->rec.result_type, o->result, o->result_len);
    return rc;
}

static void job_op_free(struct job_op *o)
{
    job_rec_free_fields(&o->rec);
    free(o);
}

static struct job_op *job_op_new(struct head *h, const struct hjob *j)
{
    struct job_op *o = xcalloc(1, sizeof *o);
    o->op.apply = job_op_apply;
    o->h = h;
    o->rec = j->rec;
    o->rec.params_json = xstrdup(j->rec.params_json ? j->rec.params_json : "{}");
    o->rec.attempts = NULL;
    o->rec.nattempts = 0;
    return o;
}

/* Wakes the job's waiters and copies it out (out may be NULL). */
static void wake(struct head *h, uint64_t id, struct job_rec *out)
{
    jobs_lock(h->jobs);
    struct hjob *j = jobs_find(h->jobs, id);
    if (j) {
        jobs_changed(h->jobs, j);
        if (out)
            job_rec_copy(out, &j->rec);
    }
    jobs_unlock(h->jobs);
}

/* The end of an ordinary change. A job queued again goes back to the
 * scheduler even when the store failed: memory says queued, and a restart
 * re-queues what the store still calls running. */
static void job_op_done(struct commit_op *op, int rc)
{
    struct job_op *o = (struct job_op *)op;
    struct head *h = o->h;
    if (rc)
        log_error(MOD, "job %llu: change not stored: %s", (unsigned long long)o->rec.id,
                  gpuq_strerror(rc));
    struct job_rec out = {0};
    wake(h, o->rec.id, o->done ? &out : NULL);
    if (o->requeue)
        dispatcher_job_add(h->disp, &o->rec);
    if (o->done)
        o->done(o->done_arg, rc, &out, o->flag);
    job_rec_free_fields(&out);
    job_op_free(o);
}

/* An attempt of j ended (lock held): its history, its scheduler slot, its
 * worker's inflight count and breaker (cls NULL: no verdict on the worker),
 * and the worker told to stop it when abort. */
static void attempt_ended(struct head *h, struct hjob *j, const struct lc_attempt *a,
                          const char *cls, bool abort)
{
    job_rec_add_attempt(&j->rec, a);
    dispatcher_job_finished(h->disp, j->rec.id, a->worker, false, cls, 0, 0);
    if (abort)
        registry_add_cancel(h->registry, a->worker, j->rec.id, a->n);
}

/* What a transition shows in metrics and the job's trace (lock held). */
static void observe_change(const struct hjob *j, const struct lc_attempt *ended)
{
    if (ended) {
        trace_attempt_ended(&j->rec, ended);
        if (ended->error_class[0] && strcmp(ended->error_class, "cancelled") != 0)
            metrics_attempt_failed(ended->error_class, j->rec.lc.state == LC_QUEUED);
    }
    if (lc_terminal(j->rec.lc.state)) {
        trace_finished(&j->rec);
        metrics_job_finished(&j->rec, 0);
    }
}

/* After a transition of j (lock held): the record's derived fields, the timed
 * list, and the commit op carrying the job and the ended attempt. The caller
 * may set the op's answer, then submits it. */
static struct job_op *changed(struct head *h, struct hjob *j, const struct lc_attempt *ended)
{
    enum lc_state st = j->rec.lc.state;
    if (st != LC_RUNNING) {
        j->rec.phase = PHASE_NONE;
        if (st == LC_QUEUED)
            j->rec.progress = 0;
    }
    if (lc_terminal(st) && !j->rec.finished_ms)
        j->rec.finished_ms = clock_wall_ms();
    if (st == LC_QUEUED)
        j->rec.finished_ms = 0;
    if (ended && ended->error_class[0]) {
        snprintf(j->rec.error_class, sizeof j->rec.error_class, "%s", ended->error_class);
        snprintf(j->rec.error_message, sizeof j->rec.error_message, "%s", ended->error);
    }
    observe_change(j, ended);
    jobs_retrack(h->jobs, j);
    struct job_op *o = job_op_new(h, j);
    if (ended) {
        o->ended = *ended;
        o->has_ended = true;
    }
    o->requeue = st == LC_QUEUED;
    o->op.done = job_op_done;
    return o;
}

static void log_transition(uint64_t id, const struct lc_attempt *a, const struct lc_job *lc)
{
    log_warn(MOD, "job %llu attempt %d on %s ended %s%s%s: now %s (%d failure(s))",
             (unsigned long long)id, a->n, a->worker, lc_outcome_name(a->outcome),
             a->error_class[0] ? " / " : "", a->error_class, lc_state_name(lc->state),
             lc->failures);
}

/* ---- submit, read, cancel, resubmit ---- */

static void fill_eta(struct head *h, struct job_rec *r, int rc, double start_s, double finish_s,
                     const char *why);

/* Both halves of a submit are in: the 201 goes out with the job's first ETA,
 * or the store's error. */
static void submit_answer(struct job_op *o)
{
    struct head *h = o->h;
    if (o->commit_rc) {
        o->done(o->done_arg, o->commit_rc, NULL, false);
        job_op_free(o);
        return;
    }
    struct job_rec out = {0};
    jobs_lock(h->jobs);
    struct hjob *j = jobs_find(h->jobs, o->rec.id);
    job_rec_copy(&out, j ? &j->rec : &o->rec);
    if (j)
        jobs_freeze(h->jobs, j); /* queued, nobody waits: it rests compactly (jobs.h) */
    jobs_unlock(h->jobs);
    fill_eta(h, &out, o->eta_rc, o->eta_start_s, o->eta_finish_s, o->eta_why);
    trace_queued(out.id, o->eta_rc == 0 ? o->eta_start_s : -1, o->eta_finish_s,
                 out.waiting_reason[0] ? out.waiting_reason : o->eta_why);
    o->done(o->done_arg, 0, &out, false);
    job_rec_free_fields(&out);
    job_op_free(o);
}

/* The dispatcher took the new job and placed or queued it. */
static void submit_eta(void *arg, int rc, double start_s, double finish_s, const char *why)
{
    struct job_op *o = arg;
    o->eta_rc = rc;
    o->eta_start_s = start_s;
    o->eta_finish_s = finish_s;
    snprintf(o->eta_why, sizeof o->eta_why, "%s", why);
    if (atomic_fetch_sub(&o->pending, 1) == 1)
        submit_answer(o);
}

/* An early job whose insert failed leaves the scheduler, and its worker if
 * one has it: nothing of it was stored, so nothing of it may run (lock held). */
static void submit_unwind(struct head *h, struct hjob *j)
{
    const struct lc_job *lc = &j->rec.lc;
    if (lc->state == LC_RUNNING) {
        registry_add_cancel(h->registry, lc->worker, j->rec.id, lc->attempt);
        dispatcher_job_finished(h->disp, j->rec.id, lc->worker, false, NULL, 0, 0);
    } else {
        dispatcher_job_cancel(h->disp, j->rec.id);
    }
}

static void submit_done(struct commit_op *op, int rc)
{
    struct job_op *o = (struct job_op *)op;
    struct head *h = o->h;
    jobs_lock(h->jobs);
    struct hjob *j = jobs_find(h->jobs, o->rec.id);
    if (rc == 0) {
        jobs_mark_committed(h->jobs, j);
        jobs_changed(h->jobs, j);
        trace_admitted(j->rec.id, o->to_end);
        metrics_job_submitted(&j->rec);
    } else if (j) {
        if (o->early)
            submit_unwind(h, j);
        jobs_remove(h->jobs, j);
    }
    jobs_unlock(h->jobs);
    o->commit_rc = rc;
    if (rc != 0 && o->rec.admitted)
        admission_undo(h->admission, o->rec.tenant_name, &o->rec); /* nothing was stored */
    if (rc == 0 && !o->early) { /* the dispatcher's turn: answered by submit_eta */
        dispatcher_job_add_eta(h->disp, &o->rec, submit_eta, o, false);
        return;
    }
    if (atomic_fetch_sub(&o->pending, 1) == 1)
        submit_answer(o);
}

/* Whether the new job goes to the dispatcher while its insert commits, not
 * after: its assignment, progress and result all queue behind the insert in
 * the committer, so none is stored without it, and if the insert fails
 * (submit_unwind) its worker is told to drop it and the head no longer knows
 * it, so its outcome is refused. A crash before the insert is durable loses
 * only a job nobody was answered for; its outcome, from an earlier boot, is
 * refused by the epoch fence.
 *
 * Only while the committer is idle: then the insert's fsync is the whole
 * wait, and the job runs during it. Under load a commit is always running,
 * and jobs reach the dispatcher a committed batch at a time, which places
 * and hands them out in fewer rounds and polls: early, each submit cost the
 * dispatcher a round, and 48 connections' jobs/s fell 4-25% (bench/peers/
 * e2e-cpu). Not while the store is failing (the job would run for nothing),
 * nor for a job naming uploads (its link may fail alone). */
static bool submit_early(struct head *h, const struct job_rec *rec)
{
    return committer_idle(h->committer) && committer_healthy(h->committer) &&
           !inputs_named(rec->params_json);
}

/* Answers a submit whose idempotency key names the job first (a copy the
 * caller frees): that job, or 409 when the body differs. No lock held. */
static void idem_replay(struct head *h, struct job_rec *rec, struct job_rec *first,
                        head_done_fn done, void *arg)
{
    struct job_rec none = {0};
    int rc = strcmp(first->body_hash, rec->body_hash) ? GPUQ_ECONFLICT : 0;
    if (rec->admitted) /* a concurrent twin got in first: this one adds nothing */
        admission_undo(h->admission, rec->tenant_name, rec);
    done(arg, rc, rc ? &none : first, rc == 0);
}

/* For a key that is not in memory (finished jobs leave it, jobs_sweep, and
 * a restart loads only those within keep_finished_s): answers from the
 * store — its job, 409, or the store's error when it cannot say — and
 * returns true; false when the store has no job with the key either. No
 * lock held. */
static bool idem_answered_by_store(struct head *h, struct job_rec *rec, head_done_fn done,
                                   void *arg)
{
    struct job_rec first = {0};
    int rc = h->store->ops->job_find_idem(h->store, rec->tenant_id, rec->idem_key, &first);
    if (rc == GPUQ_ENOENT)
        return false;
    if (rc == 0) {
        idem_replay(h, rec, &first, done, arg);
    } else { /* unknown whether a first job exists: accept nothing */
        log_warn(MOD, "looking up an idempotency key of tenant %lld in the store: %s",
                 (long long)rec->tenant_id, gpuq_strerror(rc));
        if (rec->admitted)
            admission_undo(h->admission, rec->tenant_name, rec);
        done(arg, rc, &first, false);
    }
    job_rec_free_fields(&first);
    return true;
}

/* Whether the store holds a job with rec's idempotency key (an error counts
 * as no: admission's answer stands). */
static bool idem_stored(struct head *h, const struct job_rec *rec)
{
    return h->store->ops->job_find_idem(h->store, rec->tenant_id, rec->idem_key, NULL) == 0;
}

void head_submit(struct head *h, struct job_rec *rec, bool to_end, head_done_fn done, void *arg)
{
    bool asked_store = false;
    jobs_lock(h->jobs);
    for (;;) {
        struct hjob *prev = rec->idem_key[0]
                                ? jobs_find_idem(h->jobs, rec->tenant_id, rec->idem_key)
                                : NULL;
        if (!prev && rec->idem_key[0] && !asked_store) {
            /* Not in memory: asked of the store, without the table lock. A
             * job with the key that the store lacks now is not yet durable,
             * so it cannot have left memory when the loop looks again. */
            jobs_unlock(h->jobs);
            asked_store = true;
            if (idem_answered_by_store(h, rec, done, arg))
                return;
            jobs_lock(h->jobs);
            continue;
        }
        if (!prev)
            break;
        if (!prev->committed) {
            /* The first request with this key is still committing (a fraction of one
             * fsync): wait for it. Rare — only concurrent retries get here. */
            uint64_t v = prev->version;
            jobs_wait(h->jobs, prev, v, clock_mono_ns() + 10 * NS_PER_S);
            continue;
        }
        struct job_rec first = {0};
        job_rec_copy(&first, &prev->rec);
        jobs_unlock(h->jobs);
        idem_replay(h, rec, &first, done, arg);
        job_rec_free_fields(&first);
        return;
    }
    rec->id = jobs_next_id(h->jobs);
    lc_init(&rec->lc, rec->lc.deadline_ms, rec->lc.timeout_ms);
    rec->created_ms = clock_wall_ms();
    if (rec->admitted)
        admission_bind(h->admission, rec->tenant_name, rec);
    struct hjob *j = jobs_insert(h->jobs, rec);
    trace_accepted(&j->rec);
    struct job_op *o = job_op_new(h, j);
    o->insert = true;
    o->op.done = submit_done;
    o->done = done;
    o->done_arg = arg;
    o->early = submit_early(h, rec);
    o->to_end = to_end;
    o->pending = o->early ? 2 : 1; /* not early: the commit posts the job, then the ETA answers */
    if (o->early && to_end) {
        /* Nobody is answered before the job's result is durable, and that
         * commit, queued after this one, carries it: a short job costs one
         * fsync. Only when early: otherwise the job reaches the dispatcher
         * at this commit, which must not wait. A crash before it loses a
         * job nobody was answered for, as for any submit. */
        committer_submit_lazy(h->committer, &o->op, LAZY_COMMIT_DELAY_MS * NS_PER_MS);
    } else {
        committer_submit(h->committer, &o->op);
    }
    /* After the insert is queued: an assignment of the job queues behind it.
     * Under the table lock: a failed insert's unwind comes after this add.
     * (A dispatcher that is stopping calls submit_eta here, which takes no
     * lock, and the commit's half, which is still to come, answers.) */
    bool early = o->early; /* o may be answered and gone once the lock is let go */
    if (early)
        dispatcher_job_add_eta(h->disp, &j->rec, submit_eta, o, true);
    jobs_unlock(h->jobs);
    if (early)
        dispatcher_run(h->disp);
}

int head_admit(struct head *h, const struct tenant_rec *t, struct job_rec *rec,
               struct admit_verdict *v)
{
    memset(v, 0, sizeof *v);
    if (rec->idem_key[0]) {
        jobs_lock(h->jobs);
        bool replay = jobs_find_idem(h->jobs, rec->tenant_id, rec->idem_key) != NULL;
        jobs_unlock(h->jobs);
        if (replay) {
            v->outcome = ADMIT_OK;
            return 0;
        }
    }
    snprintf(rec->tenant_name, sizeof rec->tenant_name, "%s", t ? t->name : "");
    int rc = admission_admit(h->admission, rec->tenant_name, rec,
                             admission_booking(rec->tenant_id, rec->idem_key), v);
    if (rc == 0 && v->outcome != ADMIT_OK && rec->idem_key[0] && idem_stored(h, rec)) {
        /* A replay of a job that left memory: it adds nothing, so nothing
         * refuses it; head_submit answers it from the store. */
        memset(v, 0, sizeof *v);
        v->outcome = ADMIT_OK;
        return 0;
    }
    rec->admitted = rc == 0 && v->outcome == ADMIT_OK;
    if (rc == 0 && v->outcome == ADMIT_RETRY)
        metrics_count_429(rec->lane);
    return rc;
}

int head_admit_batch(struct head *h, const struct tenant_rec *t, struct job_rec *recs, int n,
                     struct admit_verdict *v, int *index)
{
    memset(v, 0, sizeof *v);
    *index = -1;
    for (int i = 0; i < n; i++) {
        recs[i].idem_key[0] = '\0'; /* no booking: the batch is one request */
        int rc = head_admit(h, t, &recs[i], v);
        if (rc == 0 && v->outcome == ADMIT_OK)
            continue;
        for (int k = i - 1; k >= 0; k--) /* latest first: each tag is taken back */
            head_admit_undo(h, &recs[k]);
        *index = i;
        return rc;
    }
    return 0;
}

void head_admit_undo(struct head *h, const struct job_rec *rec)
{
    if (rec->admitted)
        admission_undo(h->admission, rec->tenant_name, rec);
}

/* Finds a visible job of this tenant (tenant_id < 0: any). Lock held. */
static struct hjob *find_visible(struct head *h, int64_t tenant_id, uint64_t id)
{
    struct hjob *j = jobs_find(h->jobs, id);
    if (!j || !j->committed || (tenant_id >= 0 && j->rec.tenant_id != tenant_id))
        return NULL;
    return j;
}

/* What a reader sees beyond the record: the scheduler's ETA (the core's one
 * sched_job_eta) and, when the job cannot start now, why. */
static void fill_eta(struct head *h, struct job_rec *r, int rc, double start_s, double finish_s,
                     const char *why)
{
    r->eta_start_ms = r->eta_finish_ms = 0;
    r->waiting_reason[0] = '\0';
    if (r->lc.state != LC_QUEUED && r->lc.state != LC_RUNNING)
        return;
    if (r->lc.state == LC_QUEUED &&
        head_served_reason(h, r->capability, r->model, r->waiting_reason,
                           sizeof r->waiting_reason))
        return;
    int64_t now = clock_wall_ms();
    if (rc == 0 && start_s >= 0) {
        r->eta_start_ms = now + (int64_t)(start_s * 1000);
        r->eta_finish_ms = now + (int64_t)(finish_s * 1000);
    } else if (r->lc.state == LC_QUEUED && why[0]) {
        snprintf(r->waiting_reason, sizeof r->waiting_reason, "%s", why);
    } else if (r->lc.state == LC_QUEUED) {
        snprintf(r->waiting_reason, sizeof r->waiting_reason,
                 "no %s GPU can take it now (none ready: draining, quarantined or gone)",
                 r->capability);
    }
}

static void annotate(struct head *h, struct job_rec *r)
{
    double start_s = -1, finish_s = -1;
    char why[160] = "";
    int rc = GPUQ_ENOENT;
    if (r->lc.state == LC_QUEUED || r->lc.state == LC_RUNNING)
        rc = dispatcher_job_eta(h->disp, r->id, &start_s, &finish_s, why, sizeof why);
    fill_eta(h, r, rc, start_s, finish_s, why);
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
    annotate(h, out);
    return 0;
}

void head_job_copy(const struct hjob *j, struct job_rec *out, uint64_t *version)
{
    job_rec_copy(out, &j->rec);
    if (version)
        *version = j->version;
}

void head_job_annotate(struct head *h, struct job_rec *r)
{
    annotate(h, r);
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
    *watching = !job_state_terminal(job_rec_state(&j->rec)) && !jobs_stopping(h->jobs) &&
                (since == 0 || since == j->version);
    if (*watching)
        jobs_watch(h->jobs, j, w);
    if (*watching && j->completing) /* its result may wait for a commit someone waits on */
        committer_hurry(h->committer);
    head_job_copy(j, out, version);
    jobs_unlock(h->jobs);
    annotate(h, out);
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

/* Answers at once (not found, conflict) with the job as it is. */
static void answer_now(struct head *h, struct hjob *j, int rc, head_done_fn done, void *arg)
{
    struct job_rec out = {0};
    if (j)
        job_rec_copy(&out, &j->rec);
    jobs_unlock(h->jobs);
    done(arg, rc, j ? &out : NULL, false);
    job_rec_free_fields(&out);
}

void head_cancel(struct head *h, int64_t tenant_id, uint64_t id, head_done_fn done, void *arg)
{
    jobs_lock(h->jobs);
    struct hjob *j = find_visible(h, tenant_id, id);
    if (!j) {
        answer_now(h, NULL, GPUQ_ENOENT, done, arg);
        return;
    }
    bool was_running = false;
    struct lc_attempt a;
    /* completing: its result is being stored — too late to cancel. */
    if (j->completing || lc_cancel(&j->rec.lc, now_lc(), &was_running, &a)) {
        answer_now(h, j, GPUQ_ECONFLICT, done, arg);
        return;
    }
    snprintf(j->rec.error_class, sizeof j->rec.error_class, "cancelled");
    snprintf(j->rec.error_message, sizeof j->rec.error_message, "cancelled by the client");
    if (was_running) {
        snprintf(a.error, sizeof a.error, "cancelled by the client");
        attempt_ended(h, j, &a, "cancelled", true);
    } else {
        dispatcher_job_cancel(h->disp, id);
    }
    struct job_op *o = changed(h, j, was_running ? &a : NULL);
    o->done = done;
    o->done_arg = arg;
    committer_submit(h->committer, &o->op);
    jobs_unlock(h->jobs);
}

void head_resubmit(struct head *h, uint64_t id, head_done_fn done, void *arg)
{
    jobs_lock(h->jobs);
    struct hjob *j = find_visible(h, -1, id);
    if (!j) {
        answer_now(h, NULL, GPUQ_ENOENT, done, arg);
        return;
    }
    /* A deadline still ahead is kept; a passed one would expire it at once. */
    int64_t deadline = j->rec.lc.deadline_ms > clock_wall_ms() ? j->rec.lc.deadline_ms : 0;
    if (lc_resubmit(&j->rec.lc, deadline)) {
        answer_now(h, j, GPUQ_ECONFLICT, done, arg);
        return;
    }
    log_info(MOD, "job %llu re-submitted by the admin after %d attempt(s)",
             (unsigned long long)id, j->rec.lc.attempt);
    j->rec.error_class[0] = '\0';
    j->rec.error_message[0] = '\0';
    struct job_op *o = changed(h, j, NULL);
    o->done = done;
    o->done_arg = arg;
    committer_submit(h->committer, &o->op);
    jobs_unlock(h->jobs);
}

/* ---- the agent's reports, fenced by (worker, attempt) ---- */

/* The job must be running this attempt on this worker, handed out under the
 * epoch the report names (if it names one): lc_fence_epoch. Lock held. */
static int fence(struct head *h, uint64_t id, const char *worker, int attempt, uint64_t epoch,
                 struct hjob **out)
{
    struct hjob *j = jobs_find(h->jobs, id);
    if (!j) /* it may be uncommitted: dispatched early (submit_early) */
        return GPUQ_ENOENT;
    int rc = lc_fence_epoch(&j->rec.lc, worker, attempt, epoch);
    if (rc)
        return rc;
    if (j->completing)
        return GPUQ_EAGAIN; /* its result is being committed */
    *out = j;
    return 0;
}

int head_progress(struct head *h, uint64_t id, const char *worker, int attempt, uint64_t epoch,
                  enum job_phase phase, double progress)
{
    jobs_lock(h->jobs);
    struct hjob *j;
    int rc = fence(h, id, worker, attempt, epoch, &j);
    if (rc) {
        jobs_unlock(h->jobs);
        return rc;
    }
    /* Progress renews the lease; it is not persisted (a restart re-runs the job). */
    lc_renew(&h->cfg.lifecycle, &j->rec.lc, worker, attempt, now_lc());
    trace_progress(id, attempt, j->rec.phase, j->rec.progress, phase, progress);
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
            j->rec.lc = o->rec.lc;
            j->rec.phase = o->rec.phase;
            j->rec.progress = o->rec.progress;
            j->rec.finished_ms = o->rec.finished_ms;
            memcpy(j->rec.result_type, o->rec.result_type, sizeof j->rec.result_type);
            j->rec.result_bytes = o->rec.result_bytes;
            job_rec_add_attempt(&j->rec, &o->ended);
            jobs_retrack(h->jobs, j);
            jobs_changed(h->jobs, j);
            trace_finished(&j->rec);
            metrics_job_finished(&j->rec, o->run_ms);
        }
        job_rec_copy(&out, &j->rec);
    }
    jobs_unlock(h->jobs);
    /* Not stored: the job stays running on this attempt; the agent retries the
     * completion while it still reports the attempt (its lease holds). */
    if (rc == 0)
        dispatcher_job_finished(h->disp, o->rec.id, o->ended.worker, true, "",
                                o->load_ms * NS_PER_MS, o->run_ms * NS_PER_MS);
    o->done(o->done_arg, rc, &out, false);
    job_rec_free_fields(&out);
    job_op_free(o);
}

void head_complete(struct head *h, uint64_t id, const char *worker, int attempt, uint64_t epoch,
                   const char *content_type, const void *data, size_t len, int64_t load_ms,
                   int64_t run_ms, head_done_fn done, void *arg)
{
    struct job_rec out = {0};
    jobs_lock(h->jobs);
    struct hjob *j;
    int rc = fence(h, id, worker, attempt, epoch, &j);
    if (rc == GPUQ_ESTALE) {
        struct hjob *prev = jobs_find(h->jobs, id);
        if (prev->rec.lc.state == LC_SUCCEEDED && prev->rec.lc.attempt == attempt &&
            !strcmp(prev->rec.lc.worker, worker)) {
            /* A retried request for a result already accepted: not accepted twice. */
            job_rec_copy(&out, &prev->rec);
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
    struct lc_now now = now_lc();
    lc_succeed(&o->rec.lc, worker, attempt, now, &o->ended);
    o->has_ended = true;
    o->rec.phase = PHASE_NONE;
    o->rec.progress = 1.0;
    o->rec.finished_ms = now.wall_ms;
    o->rec.error_class[0] = '\0';
    o->rec.error_message[0] = '\0';
    snprintf(o->rec.result_type, sizeof o->rec.result_type, "%s", content_type);
    o->rec.result_bytes = (int64_t)len;
    o->result = data;
    o->result_len = len;
    o->load_ms = load_ms;
    o->run_ms = run_ms;
    o->op.done = complete_done;
    o->done = done;
    o->done_arg = arg;
    char wid[sizeof o->ended.worker];
    memcpy(wid, o->ended.worker, sizeof wid);
    /* Nobody waits on the job's end yet — no long-poll, stream or thread, and
     * no POST ?wait (whose job's insert would still be queued): its result
     * rides with the next commit someone does wait on, within
     * LAZY_COMMIT_DELAY_MS, so a client submitting jobs back to back does
     * not wait behind the results' commits. A watch that comes meanwhile
     * hurries it (head_watch); the agent's answer waits for it either way. */
    if (!j->committed || jobs_awaited(j))
        committer_submit(h->committer, &o->op); /* o may be gone once unlocked */
    else
        committer_submit_lazy(h->committer, &o->op, LAZY_COMMIT_DELAY_MS * NS_PER_MS);
    jobs_unlock(h->jobs);
    /* The worker's slot need not wait for this commit: clients see the job
     * succeed only from complete_done, once the result is durable. */
    dispatcher_job_released(h->disp, id, wid, load_ms * NS_PER_MS, run_ms * NS_PER_MS);
}

void head_fail(struct head *h, uint64_t id, const char *worker, int attempt, uint64_t epoch,
               const char *cls, const char *message, head_done_fn done, void *arg)
{
    jobs_lock(h->jobs);
    struct hjob *j;
    int rc = fence(h, id, worker, attempt, epoch, &j);
    if (rc) {
        jobs_unlock(h->jobs);
        done(arg, rc, NULL, false);
        return;
    }
    struct lc_attempt a;
    enum lc_next next;
    lc_fail(&h->cfg.lifecycle, &j->rec.lc, worker, attempt, cls, message, now_lc(), &a, &next);
    log_transition(id, &a, &j->rec.lc);
    attempt_ended(h, j, &a, cls, false);
    struct job_op *o = changed(h, j, &a);
    o->done = done;
    o->done_arg = arg;
    o->flag = next == LC_NEXT_RETRY;
    committer_submit(h->committer, &o->op);
    jobs_unlock(h->jobs);
}

/* ---- what the head finds out itself: lost attempts, leases, deadlines ---- */

/* Ends j's running attempt as lost (lock held; j running, not completing). */
static void lose_locked(struct head *h, struct hjob *j, const char *reason, struct lc_now now)
{
    struct lc_attempt a;
    enum lc_next next;
    if (lc_lost(&h->cfg.lifecycle, &j->rec.lc, reason, now, &a, &next))
        return;
    log_transition(j->rec.id, &a, &j->rec.lc);
    attempt_ended(h, j, &a, "lost", true);
    committer_submit(h->committer, &changed(h, j, &a)->op);
}

void head_lost(struct head *h, uint64_t job_id, const char *worker, const char *reason)
{
    jobs_lock(h->jobs);
    struct hjob *j = jobs_find(h->jobs, job_id);
    if (j && j->committed && !j->completing && j->rec.lc.state == LC_RUNNING &&
        !strcmp(j->rec.lc.worker, worker))
        lose_locked(h, j, reason, now_lc());
    jobs_unlock(h->jobs);
}

int head_preempt(struct head *h, uint64_t job_id, const char *worker, uint64_t for_job,
                 double lost_gpu_s, const char *reason)
{
    jobs_lock(h->jobs);
    struct hjob *j = jobs_find(h->jobs, job_id);
    struct lc_attempt a;
    int rc = GPUQ_ESTALE;
    if (j && j->committed && !j->completing &&
        lc_preempt(&j->rec.lc, worker, j->rec.lc.attempt, reason, now_lc(), &a) == 0) {
        struct buf line;
        buf_init(&line);
        buf_printf(&line,
                   "{\"event\":\"preemption\",\"job\":\"%llu\",\"for_job\":\"%llu\","
                   "\"worker\":\"%s\",\"attempt\":%d,\"lost_gpu_s\":%.3f,\"reason\":\"",
                   (unsigned long long)job_id, (unsigned long long)for_job, worker, a.n,
                   lost_gpu_s);
        for (const char *c = reason; *c; c++)
            if (*c == '"' || *c == '\\')
                buf_printf(&line, "\\%c", *c);
            else if ((unsigned char)*c >= 0x20)
                buf_append(&line, c, 1);
        buf_puts(&line, "\"}");
        log_json(line.data);
        buf_fini(&line);
        attempt_ended(h, j, &a, NULL, true);
        committer_submit(h->committer, &changed(h, j, &a)->op);
        rc = 0;
    }
    jobs_unlock(h->jobs);
    return rc;
}

void head_held_started(struct head *h, uint64_t job_id)
{
    struct lc_now now = now_lc();
    jobs_lock(h->jobs);
    struct hjob *j = jobs_find(h->jobs, job_id);
    if (j && lc_begin(&h->cfg.lifecycle, &j->rec.lc, now) == 0) {
        j->rec.started_ms = now.wall_ms;
        jobs_retrack(h->jobs, j);
    }
    jobs_unlock(h->jobs);
}

/* Ends j's running attempt without blame (lc_requeue, for reason); the job
 * is queued again once that is stored. abort: its worker is told to drop the
 * attempt (the cancel list). Lock held. */
static void requeue_locked(struct head *h, struct hjob *j, const char *reason, bool abort)
{
    struct lc_attempt a;
    if (lc_requeue(&j->rec.lc, reason, now_lc(), &a) == 0) {
        attempt_ended(h, j, &a, NULL, abort);
        committer_submit(h->committer, &changed(h, j, &a)->op);
    }
}

void head_held_take_back(struct head *h, uint64_t job_id)
{
    jobs_lock(h->jobs);
    struct hjob *j = jobs_find(h->jobs, job_id);
    if (j && j->committed && !j->completing)
        requeue_locked(h, j, "its GPU failed before it started (held ahead)", true);
    jobs_unlock(h->jobs);
}

void head_assign_failed(struct head *h, uint64_t job_id, const char *worker, int attempt)
{
    jobs_lock(h->jobs);
    struct hjob *j = jobs_find(h->jobs, job_id);
    if (j && !j->completing && lc_fence(&j->rec.lc, worker, attempt) == 0)
        requeue_locked(h, j, "the assignment could not be stored", false);
    jobs_unlock(h->jobs);
}

/* After a recovery that handed the scheduler many jobs: the messages that
 * carried them were freed by the dispatcher, in between memory that stays,
 * and the allocator keeps such holes resident. Once every one of them is
 * surely handled, the free pages go back to the system (one trim).
 * head_tick runs on the dispatcher thread after the round's messages: the
 * tick that finds 1 marks 2; a later tick's round took its messages after
 * that, so recovery's were all handled by then. One head per process. */
static _Atomic int trim_state; /* 0 none; 1 asked by head_recover; 2 armed */

static void trim_after_recovery(void)
{
    int st = atomic_load(&trim_state);
    if (st == 1) {
        atomic_store(&trim_state, 2);
    } else if (st == 2) {
        atomic_store(&trim_state, 0);
        alloc_release_free();
    }
}

void head_tick(struct head *h)
{
    trim_after_recovery();
    inputs_tick(h);
    retention_tick(h);
    struct lc_now now = now_lc();
    jobs_lock(h->jobs);
    struct hjob *next_j;
    for (struct hjob *j = jobs_timed_first(h->jobs); j; j = next_j) {
        next_j = jobs_timed_next(j);
        if (!j->committed || j->completing)
            continue;
        bool was_running = j->rec.lc.state == LC_RUNNING;
        struct lc_attempt a = {0};
        enum lc_next next;
        lc_check(&h->cfg.lifecycle, &j->rec.lc, now, &a, &next);
        if (next == LC_NEXT_NONE)
            continue;
        if (was_running) {
            log_transition(j->rec.id, &a, &j->rec.lc);
            attempt_ended(h, j, &a, a.error_class, true);
        } else {
            log_warn(MOD, "job %llu: its deadline passed while queued: expired",
                     (unsigned long long)j->rec.id);
            snprintf(j->rec.error_class, sizeof j->rec.error_class, "deadline");
            snprintf(j->rec.error_message, sizeof j->rec.error_message,
                     "its deadline passed before it could run");
            dispatcher_job_cancel(h->disp, j->rec.id);
        }
        committer_submit(h->committer, &changed(h, j, was_running ? &a : NULL)->op);
    }
    jobs_unlock(h->jobs);
    scale_tick(h);
}

void head_stalled(struct head *h, int64_t gap_ns)
{
    log_warn(MOD, "the head stood still for %lld ms: leases and worker TTLs extended by as much",
             (long long)(gap_ns / NS_PER_MS));
    registry_shift(h->registry, gap_ns);
    jobs_lock(h->jobs);
    for (struct hjob *j = jobs_timed_first(h->jobs); j; j = jobs_timed_next(j))
        lc_shift(&j->rec.lc, gap_ns);
    jobs_unlock(h->jobs);
}

/* ---- workers: registration, heartbeats, the catalog of what they serve ---- */

/* A pair to remember in the store. */
struct served_op {
    struct commit_op op;
    char cap[SCHED_NAME_MAX], model[SCHED_NAME_MAX];
};

static int served_apply(struct store *s, struct commit_op *op)
{
    struct served_op *o = (struct served_op *)op;
    return s->ops->served_put(s, o->cap, o->model);
}

static void served_done(struct commit_op *op, int rc)
{
    struct served_op *o = (struct served_op *)op;
    if (rc)
        log_warn(MOD, "served pair (%s, %s) not stored: %s", o->cap, o->model,
                 gpuq_strerror(rc));
    free(o);
}

/* Adds the worker's capabilities × declared models to the catalog; new pairs are stored. */
static void learn_served(struct head *h, const struct worker_rec *w)
{
    pthread_mutex_lock(&h->catalog_lock);
    for (int c = 0; c < w->ncaps; c++) {
        for (int m = 0; m < w->nmodels; m++) {
            if (!catalog_add(h->catalog, w->caps[c], w->models[m].name))
                continue;
            struct served_op *o = xcalloc(1, sizeof *o);
            o->op.apply = served_apply;
            o->op.done = served_done;
            snprintf(o->cap, sizeof o->cap, "%s", w->caps[c]);
            snprintf(o->model, sizeof o->model, "%s", w->models[m].name);
            committer_submit(h->committer, &o->op);
        }
    }
    pthread_mutex_unlock(&h->catalog_lock);
}

bool head_served_reason(struct head *h, const char *cap, const char *model, char *why,
                        size_t size)
{
    pthread_mutex_lock(&h->catalog_lock);
    bool unserved = catalog_why_unserved(h->catalog, cap, model, why, size);
    pthread_mutex_unlock(&h->catalog_lock);
    return unserved;
}

int head_check_servable(struct head *h, const char *cap, const char *model, char *msg,
                        size_t size)
{
    pthread_mutex_lock(&h->catalog_lock);
    int rc = catalog_admit(h->catalog, cap, model, h->cfg.allow_unserved, msg, size);
    pthread_mutex_unlock(&h->catalog_lock);
    return rc;
}

void head_worker_register(struct head *h, const struct worker_rec *w)
{
    bool restarted = false;
    registry_register(h->registry, w, clock_mono_ns(), &restarted);
    log_info(MOD, "worker %s registered (host %s, gpu %d %s, %lld MB)", w->id, w->host,
             w->gpu_index, w->gpu_name, (long long)w->tel.vram_total_mb);
    learn_served(h, w);
    if (restarted) {
        /* A new incarnation (the agent restarted): whatever the old one ran is gone. */
        log_warn(MOD, "worker %s restarted (incarnation %s): its running jobs are re-queued",
                 w->id, w->incarnation);
        struct lc_now now = now_lc();
        jobs_lock(h->jobs);
        struct hjob *next_j;
        for (struct hjob *j = jobs_timed_first(h->jobs); j; j = next_j) {
            next_j = jobs_timed_next(j);
            if (j->committed && !j->completing && j->rec.lc.state == LC_RUNNING &&
                !strcmp(j->rec.lc.worker, w->id))
                lose_locked(h, j, "its worker restarted", now);
        }
        jobs_unlock(h->jobs);
    }
    dispatcher_worker_update(h->disp, w->id);
    scale_worker_ready(h, w);
}

/* Compares the worker's report of what it runs with the head's view: reported
 * attempts renew their lease; one the head holds current but the report omits
 * (past the grace of an assignment in flight) is lost; a reported attempt that
 * is not current any more is cancelled on the worker. */
static void reconcile(struct head *h, const struct worker_rec *hb)
{
    struct lc_now now = now_lc();
    jobs_lock(h->jobs);
    for (int i = 0; i < hb->nrunning; i++) {
        struct hjob *j = jobs_find(h->jobs, hb->running[i].job_id);
        if (j && lc_renew(&h->cfg.lifecycle, &j->rec.lc, hb->id, hb->running[i].attempt, now) == 0)
            continue;
        bool accepted = j && j->rec.lc.state == LC_SUCCEEDED &&
                        j->rec.lc.attempt == hb->running[i].attempt;
        if (!accepted && !(j && j->completing))
            registry_add_cancel(h->registry, hb->id, hb->running[i].job_id,
                                hb->running[i].attempt);
    }
    struct hjob *next_j;
    for (struct hjob *j = jobs_timed_first(h->jobs); j; j = next_j) {
        next_j = jobs_timed_next(j);
        if (!j->committed || j->completing || j->rec.lc.state != LC_RUNNING ||
            strcmp(j->rec.lc.worker, hb->id))
            continue;
        bool reported = false;
        for (int i = 0; i < hb->nrunning && !reported; i++)
            reported = hb->running[i].job_id == j->rec.id &&
                       hb->running[i].attempt == j->rec.lc.attempt;
        if (lc_orphaned(&h->cfg.lifecycle, &j->rec.lc, hb->id, reported, now.mono_ns))
            lose_locked(h, j, "its worker no longer reports it", now);
    }
    jobs_unlock(h->jobs);
}

int head_worker_heartbeat(struct head *h, const struct worker_rec *hb, bool *drain,
                          struct reg_attempt *cancels, int *ncancels)
{
    /* Reconcile first: cancels it adds go out with this answer. */
    struct worker_rec known;
    if (registry_get(h->registry, hb->id, &known))
        return GPUQ_ENOENT;
    reconcile(h, hb);
    int rc = registry_heartbeat(h->registry, hb, clock_mono_ns(), drain, cancels, ncancels);
    if (!rc)
        dispatcher_worker_update(h->disp, hb->id);
    if (!rc && hb->state == WORKER_READY && known.state != WORKER_READY) {
        known.state = WORKER_READY;
        scale_worker_ready(h, &known);
    }
    return rc;
}

/* ---- recovery at start ---- */

struct recover_ctx {
    struct head *h;
    int queued, requeued, finished;
    struct dispatch_adds adds; /* queued jobs for the scheduler, handed over in chunks */
};

static void recover_job(void *arg, struct job_rec *rec)
{
    struct recover_ctx *c = arg;
    struct head *h = c->h;
    jobs_lock(h->jobs);
    if (rec->lc.state == LC_QUEUED) {
        dispatcher_adds_put(h->disp, &c->adds, rec); /* copies what the scheduler needs */
        if (jobs_insert_at_rest(h->jobs, rec)) {
            c->queued++;
            jobs_unlock(h->jobs);
            return;
        }
    }
    struct hjob *j = jobs_insert(h->jobs, rec);
    jobs_mark_committed(h->jobs, j);
    if (j->rec.lc.state == LC_RUNNING) {
        /* Its agent may still run it; a completion for this attempt is refused
         * once it is re-queued, and the job runs again: at least once, accepted once. */
        struct lc_attempt a;
        j->rec.lc.started_ms = j->rec.started_ms;
        lc_requeue(&j->rec.lc, "the head restarted", now_lc(), &a);
        job_rec_add_attempt(&j->rec, &a);
        struct job_op *o = changed(h, j, &a);
        /* To the scheduler in recovery's batch, in store order with the
         * queued jobs, not once the re-queue is stored: else it arrives after
         * the jobs queued behind it and an agent polling at once gets those
         * first. The re-queue is ahead of any assignment on the committer. */
        o->requeue = false;
        dispatcher_adds_put(h->disp, &c->adds, &j->rec);
        committer_submit(h->committer, &o->op);
        c->requeued++;
    } else if (j->rec.lc.state == LC_QUEUED) {
        c->queued++; /* handed to the scheduler above */
    } else {
        c->finished++;
    }
    jobs_unlock(h->jobs);
}

static void recover_served(void *arg, const char *cap, const char *model)
{
    struct head *h = arg;
    catalog_add(h->catalog, cap, model);
}

int head_recover(struct head *h)
{
    if (!h->catalog) { /* lives as long as the process */
        pthread_mutex_init(&h->catalog_lock, NULL);
        h->catalog = catalog_create();
    }
    uint64_t max_id = 0;
    int rc = h->store->ops->max_job_id(h->store, &max_id);
    if (rc)
        return rc;
    jobs_lock(h->jobs);
    jobs_set_next_id(h->jobs, max_id + 1);
    jobs_unlock(h->jobs);
    pthread_mutex_lock(&h->catalog_lock);
    rc = h->store->ops->load_served(h->store, recover_served, h);
    pthread_mutex_unlock(&h->catalog_lock);
    if (rc)
        return rc;
    struct recover_ctx c = {h, 0, 0, 0, {NULL, 0, 0}};
    /* Finished jobs come back for what is left of their keep_finished_s
     * (an hour at most): older ones would leave at the first sweep. Reads
     * of the others, and replays of their keys, go to the store. */
    int keep_s = h->cfg.keep_finished_s < 3600 ? h->cfg.keep_finished_s : 3600;
    int64_t since = clock_wall_ms() - (int64_t)keep_s * 1000;
    rc = h->store->ops->load_jobs(h->store, since, recover_job, &c);
    dispatcher_adds_post(h->disp, &c.adds);
    if (rc)
        return rc;
    size_t full, at_rest;
    jobs_lock(h->jobs);
    jobs_memory(h->jobs, &full, &at_rest);
    jobs_unlock(h->jobs);
    log_info(MOD,
             "recovered %d queued and %d running (re-queued) jobs; %d recent finished; "
             "%zu held at rest (compact), %zu in full",
             c.queued, c.requeued, c.finished, at_rest, full);
    if (c.queued + c.requeued > 0)
        atomic_store(&trim_state, 1);
    return 0;
}
