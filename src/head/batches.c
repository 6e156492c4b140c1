/* batches.c: batches of jobs (see batches.h): one commit for a batch and all
 * its jobs, progress and ETA read from the live job table, cancel by job. */
#include "head/batches.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "head/admission.h"
#include "head/dispatch.h"
#include "head/metrics.h"
#include "head/ops.h"
#include "head/trace.h"

#define MOD "batch"

/* The batches in memory. Invariant: v[0..n) sorted by id, ids unique; next_id
 * exceeds every id in v and in the store. */
struct batches {
    pthread_mutex_t lock;
    struct batch_rec *v;
    size_t n, cap;
    uint64_t next_id;
};

struct batches *batches_create(void)
{
    struct batches *b = xcalloc(1, sizeof *b);
    pthread_mutex_init(&b->lock, NULL);
    b->next_id = 1;
    return b;
}

void batches_destroy(struct batches *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->n; i++)
        free(b->v[i].job_ids);
    free(b->v);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

/* Appends rec (ids increase, so the array stays sorted); takes rec->job_ids. Lock held. */
static void add_locked(struct batches *b, struct batch_rec *rec)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 64;
        b->v = xrealloc(b->v, b->cap * sizeof *b->v);
    }
    b->v[b->n++] = *rec;
    rec->job_ids = NULL;
    if (rec->id >= b->next_id)
        b->next_id = rec->id + 1;
}

/* The batch of this id visible to tenant_id (< 0: any), or NULL. Lock held. */
static struct batch_rec *find_locked(struct batches *b, int64_t tenant_id, uint64_t id)
{
    size_t lo = 0, hi = b->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b->v[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == b->n || b->v[lo].id != id)
        return NULL;
    if (tenant_id >= 0 && b->v[lo].tenant_id != tenant_id)
        return NULL;
    return &b->v[lo];
}

static void recover_batch(void *arg, struct batch_rec *rec)
{
    struct batches *b = arg;
    add_locked(b, rec);
    free(rec->job_ids);
}

int head_batches_recover(struct head *h)
{
    if (!h->batches)
        h->batches = batches_create();
    pthread_mutex_lock(&h->batches->lock);
    int rc = h->store->ops->load_batches(h->store, recover_batch, h->batches);
    size_t n = h->batches->n;
    pthread_mutex_unlock(&h->batches->lock);
    if (!rc)
        log_info(MOD, "recovered %zu batches", n);
    return rc;
}

/* ---- submit: the jobs and the batch row in one commit ---- */

struct batch_op {
    struct commit_op op;
    struct head *h;
    struct batch_rec rec;
    struct job_rec *jobs;       /* snapshots as inserted; own their params_json */
    head_batch_done_fn done;
    void *done_arg;
};

static int batch_op_apply(struct store *s, struct commit_op *op)
{
    struct batch_op *o = (struct batch_op *)op;
    for (int i = 0; i < o->rec.njobs; i++) {
        int rc = s->ops->job_insert(s, &o->jobs[i]);
        if (rc)
            return rc;
    }
    return s->ops->batch_insert(s, &o->rec);
}

static void batch_op_free(struct batch_op *o)
{
    for (int i = 0; i < o->rec.njobs; i++)
        job_rec_free_fields(&o->jobs[i]);
    free(o->jobs);
    free(o->rec.job_ids);
    free(o);
}

static void batch_op_done(struct commit_op *op, int rc)
{
    struct batch_op *o = (struct batch_op *)op;
    struct head *h = o->h;
    uint64_t id = o->rec.id;
    int n = o->rec.njobs;
    pthread_mutex_lock(&h->batches->lock);
    jobs_lock(h->jobs);
    for (int i = 0; i < n; i++) {
        struct hjob *j = jobs_find(h->jobs, o->jobs[i].id);
        if (!j)
            continue;
        if (rc == 0) {
            jobs_mark_committed(h->jobs, j);
            jobs_changed(h->jobs, j);
            trace_admitted(j->rec.id, false);
            metrics_job_submitted(&j->rec);
        } else {
            jobs_remove(h->jobs, j);
        }
    }
    jobs_unlock(h->jobs);
    if (rc == 0)
        add_locked(h->batches, &o->rec);
    pthread_mutex_unlock(&h->batches->lock);
    if (rc == 0) {
        for (int i = 0; i < n; i++)
            dispatcher_job_add(h->disp, &o->jobs[i]);
        log_info(MOD, "batch %llu of tenant %lld: %d jobs queued", (unsigned long long)id,
                 (long long)o->rec.tenant_id, n);
    } else {
        for (int i = n - 1; i >= 0; i--) /* latest first (core/admit.h: admit_undo) */
            head_admit_undo(h, &o->jobs[i]);
        log_error(MOD, "batch of %d jobs not stored: %s", n, gpuq_strerror(rc));
    }
    o->done(o->done_arg, rc, rc == 0 ? id : 0);
    batch_op_free(o);
}

void head_batch_submit(struct head *h, int64_t tenant_id, struct job_rec *recs, int n,
                       head_batch_done_fn done, void *arg)
{
    struct batch_op *o = xcalloc(1, sizeof *o);
    o->op.apply = batch_op_apply;
    o->op.done = batch_op_done;
    o->h = h;
    o->done = done;
    o->done_arg = arg;
    o->jobs = xcalloc((size_t)n, sizeof *o->jobs);
    o->rec.job_ids = xcalloc((size_t)n, sizeof *o->rec.job_ids);
    o->rec.tenant_id = tenant_id;
    o->rec.created_ms = clock_wall_ms();
    o->rec.njobs = n;
    pthread_mutex_lock(&h->batches->lock);
    o->rec.id = h->batches->next_id++;
    pthread_mutex_unlock(&h->batches->lock);
    jobs_lock(h->jobs);
    for (int i = 0; i < n; i++) {
        struct job_rec *r = &recs[i];
        r->id = jobs_next_id(h->jobs);
        r->tenant_id = tenant_id;
        r->idem_key[0] = '\0'; /* batch jobs have no idempotency key of their own */
        lc_init(&r->lc, r->lc.deadline_ms, r->lc.timeout_ms);
        r->created_ms = o->rec.created_ms;
        o->jobs[i] = *r;
        o->jobs[i].params_json = xstrdup(r->params_json ? r->params_json : "{}");
        o->jobs[i].attempts = NULL;
        o->jobs[i].nattempts = 0;
        o->rec.job_ids[i] = r->id;
        if (r->admitted)
            admission_bind(h->admission, r->tenant_name, r);
        jobs_insert(h->jobs, r); /* invisible (committed false) until the commit is done */
        trace_accepted(r);
    }
    committer_submit(h->committer, &o->op);
    jobs_unlock(h->jobs);
}

/* ---- progress ---- */

void batch_view_free(struct batch_view *v)
{
    free(v->jobs);
    v->jobs = NULL;
}

int head_batch_get(struct head *h, int64_t tenant_id, uint64_t id, bool with_jobs,
                   struct batch_view *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&h->batches->lock);
    struct batch_rec *b = find_locked(h->batches, tenant_id, id);
    if (!b) {
        pthread_mutex_unlock(&h->batches->lock);
        return GPUQ_ENOENT;
    }
    out->id = b->id;
    out->tenant_id = b->tenant_id;
    out->created_ms = b->created_ms;
    out->njobs = b->njobs;
    uint64_t *ids = xmalloc((size_t)b->njobs * sizeof *ids);
    memcpy(ids, b->job_ids, (size_t)b->njobs * sizeof *ids);
    pthread_mutex_unlock(&h->batches->lock);

    out->jobs = xcalloc((size_t)out->njobs, sizeof *out->jobs);
    uint64_t *open = xmalloc((size_t)out->njobs * sizeof *open);
    int nopen = 0;
    int missing = 0;
    jobs_lock(h->jobs);
    for (int i = 0; i < out->njobs; i++) {
        struct hjob *j = jobs_find(h->jobs, ids[i]);
        out->jobs[i].id = ids[i];
        if (!j) {
            out->jobs[i].state = JOB_NSTATES; /* swept from memory: read below */
            missing++;
            continue;
        }
        enum job_state st = job_rec_state(&j->rec);
        out->jobs[i].state = st;
        if (!job_state_terminal(st)) {
            open[nopen++] = ids[i];
            out->cost_s += j->rec.cost_s;
        }
    }
    jobs_unlock(h->jobs);
    for (int i = 0; missing && i < out->njobs; i++) {
        if (out->jobs[i].state != JOB_NSTATES)
            continue;
        /* Finished long ago and swept from memory (finished jobs only are swept). */
        struct job_rec r;
        out->jobs[i].state = JOB_CANCELLED;
        if (h->store->ops->job_get(h->store, ids[i], &r) == 0) {
            out->jobs[i].state = job_rec_state(&r);
            job_rec_free_fields(&r);
        }
    }
    for (int i = 0; i < out->njobs; i++)
        out->counts[out->jobs[i].state]++;
    out->unfinished = out->counts[JOB_QUEUED] + out->counts[JOB_RUNNING];

    /* The ETA of the last job: the latest finish the scheduler gives. */
    int64_t now = clock_wall_ms();
    for (int i = 0; with_jobs && i < nopen; i++) {
        double start_s = -1, finish_s = -1;
        char why[160] = "";
        int rc = dispatcher_job_eta(h->disp, open[i], &start_s, &finish_s, why, sizeof why);
        if (rc == 0 && start_s >= 0) {
            int64_t f = now + (int64_t)(finish_s * 1000);
            if (f > out->eta_finish_ms)
                out->eta_finish_ms = f;
            continue;
        }
        if (rc == GPUQ_ENOENT)
            continue; /* it ended meanwhile */
        snprintf(out->eta_why, sizeof out->eta_why, "job %llu has no ETA: %s",
                 (unsigned long long)open[i], why[0] ? why : "no GPU can take it now");
        break;
    }
    if (out->eta_why[0])
        out->eta_finish_ms = 0;
    free(open);
    free(ids);
    if (!with_jobs)
        batch_view_free(out);
    return 0;
}

/* ---- cancel ---- */

struct batch_cancel {
    pthread_mutex_t lock;
    int pending, cancelled;
    head_batch_cancel_fn done;
    void *arg;
};

/* One answer of head_cancel; the last one answers the caller. */
static void cancel_one(void *arg, int rc, struct job_rec *job, bool flag)
{
    (void)job;
    (void)flag;
    struct batch_cancel *bc = arg;
    pthread_mutex_lock(&bc->lock);
    if (rc == 0)
        bc->cancelled++;
    bool last = --bc->pending == 0;
    pthread_mutex_unlock(&bc->lock);
    if (!last)
        return;
    bc->done(bc->arg, 0, bc->cancelled);
    pthread_mutex_destroy(&bc->lock);
    free(bc);
}

void head_batch_cancel(struct head *h, int64_t tenant_id, uint64_t id, head_batch_cancel_fn done,
                       void *arg)
{
    pthread_mutex_lock(&h->batches->lock);
    struct batch_rec *b = find_locked(h->batches, tenant_id, id);
    if (!b) {
        pthread_mutex_unlock(&h->batches->lock);
        done(arg, GPUQ_ENOENT, 0);
        return;
    }
    int n = b->njobs;
    int64_t owner = b->tenant_id;
    uint64_t *ids = xmalloc((size_t)n * sizeof *ids);
    memcpy(ids, b->job_ids, (size_t)n * sizeof *ids);
    pthread_mutex_unlock(&h->batches->lock);

    /* Only unfinished jobs are asked; a job that ends meanwhile answers ECONFLICT. */
    int nopen = 0;
    jobs_lock(h->jobs);
    for (int i = 0; i < n; i++) {
        struct hjob *j = jobs_find(h->jobs, ids[i]);
        if (j && !job_state_terminal(job_rec_state(&j->rec)))
            ids[nopen++] = ids[i];
    }
    jobs_unlock(h->jobs);
    if (nopen == 0) {
        free(ids);
        done(arg, 0, 0);
        return;
    }
    struct batch_cancel *bc = xcalloc(1, sizeof *bc);
    pthread_mutex_init(&bc->lock, NULL);
    bc->pending = nopen + 1; /* one held until every cancel is handed out */
    bc->done = done;
    bc->arg = arg;
    log_info(MOD, "batch %llu: cancelling %d unfinished jobs", (unsigned long long)id, nopen);
    for (int i = 0; i < nopen; i++)
        head_cancel(h, owner, ids[i], cancel_one, bc);
    free(ids);
    cancel_one(bc, GPUQ_ECONFLICT, NULL, false);
}

/* ---- list ---- */

int head_batch_list(struct head *h, int64_t tenant_id, uint64_t before_id, int limit,
                    uint64_t **out)
{
    *out = NULL;
    int n = 0;
    pthread_mutex_lock(&h->batches->lock);
    struct batches *b = h->batches;
    *out = xcalloc((size_t)(limit > 0 ? limit : 1), sizeof **out);
    for (size_t i = b->n; i-- > 0 && n < limit;) {
        if (before_id && b->v[i].id >= before_id)
            continue;
        if (tenant_id >= 0 && b->v[i].tenant_id != tenant_id)
            continue;
        (*out)[n++] = b->v[i].id;
    }
    pthread_mutex_unlock(&h->batches->lock);
    return n;
}
