/* ops_admin.c: readiness, workers, tenants, worker tokens, results and job
 * lists for the API layer (see ops_admin.h). The admin calls that commit go
 * through the committer asynchronously: their callers' connections wait
 * suspended, holding no thread. */
#include "head/ops_admin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "head/dispatch.h"
#include "head/metrics.h"
#include "head/ops.h"
#include "head/tenants.h"

#define MOD "head"
#define MAX_LIST 4096

bool head_readiness(struct head *h, char *reason, size_t size)
{
    if (atomic_load(&h->stopping)) {
        snprintf(reason, size, "the head is shutting down");
        return false;
    }
    if (!atomic_load(&h->ready)) {
        snprintf(reason, size, "the head is starting");
        return false;
    }
    if (!committer_healthy(h->committer)) {
        struct committer_stats st;
        committer_get_stats(h->committer, &st);
        if (!st.healthy) {
            int64_t ms = st.unhealthy_since_ns ? (clock_mono_ns() - st.unhealthy_since_ns) /
                                                     NS_PER_MS
                                               : 0;
            snprintf(reason, size,
                     "the store cannot write (%s) for %lld ms; writes are answered 503",
                     gpuq_strerror(st.last_error), (long long)ms);
            return false;
        }
    }
    snprintf(reason, size, "ready");
    return true;
}

/* ---- workers ---- */

/* head_worker_register and head_worker_heartbeat live in head.c: they
 * reconcile the worker's report and incarnation with the jobs' lifecycle. */

int head_worker_poll(struct head *h, const struct dispatch_poll_worker *ws, int nws,
                     int64_t deadline_ns, bool early, int *unknown, dispatch_answer_fn answer,
                     void *arg)
{
    int64_t now = clock_mono_ns();
    for (int i = 0; i < nws; i++)
        if (!registry_polled(h->registry, ws[i].id, now)) {
            *unknown = i;
            return GPUQ_ENOENT;
        }
    metrics_agent_poll(nws);
    dispatcher_poll(h->disp, ws, nws, deadline_ns, early, answer, arg);
    return 0;
}

int head_worker_deregister(struct head *h, const char *worker_id)
{
    if (registry_remove(h->registry, worker_id))
        return GPUQ_ENOENT;
    dispatcher_worker_remove(h->disp, worker_id);
    log_info(MOD, "worker %s deregistered", worker_id);
    return 0;
}

int head_worker_drain(struct head *h, const char *worker_id)
{
    if (registry_request_drain(h->registry, worker_id))
        return GPUQ_ENOENT;
    dispatcher_worker_update(h->disp, worker_id);
    log_info(MOD, "worker %s: drain requested", worker_id);
    return 0;
}

int head_worker_undrain(struct head *h, const char *worker_id)
{
    if (registry_cancel_drain(h->registry, worker_id))
        return GPUQ_ENOENT;
    dispatcher_worker_update(h->disp, worker_id);
    log_info(MOD, "worker %s: drain undone", worker_id);
    return 0;
}

/* ---- pauses and promotion ---- */

int head_pause(struct head *h, const char *cap, int lane, bool paused)
{
    int rc = dispatcher_pause(h->disp, cap, lane, paused);
    if (!rc)
        log_info(MOD, "%s %s %s by the admin", cap ? "capability" : "lane",
                 cap ? cap : (lane == SCHED_LANE_BATCH ? "batch" : "interactive"),
                 paused ? "paused" : "resumed");
    return rc;
}

int head_pauses(struct head *h, char (*caps)[SCHED_NAME_MAX], int max, unsigned *lanes)
{
    return dispatcher_paused(h->disp, caps, max, lanes);
}

int head_job_promote(struct head *h, uint64_t id, struct job_rec *out)
{
    struct job_rec j;
    int rc = head_get(h, -1, id, NULL, &j);
    if (rc)
        return rc;
    bool queued = job_rec_state(&j) == JOB_QUEUED;
    job_rec_free_fields(&j);
    if (!queued)
        return GPUQ_EINVAL;
    rc = dispatcher_job_promote(h->disp, id);
    if (rc)
        return rc;
    log_info(MOD, "job %llu moved to the front of its queue by the admin",
             (unsigned long long)id);
    return head_get(h, -1, id, NULL, out);
}

int head_workers_list(struct head *h, struct worker_rec **out)
{
    *out = xcalloc(MAX_LIST, sizeof **out);
    return registry_list(h->registry, *out, MAX_LIST);
}

/* ---- tenants and worker tokens ---- */

/* A tenant or token insert, or a tenant's change (key, removal), on its way
 * to the store. */
struct admin_op {
    struct commit_op op;
    struct head *h;
    bool is_token;
    bool is_update;            /* a.tenant replaces the tenant of its id */
    enum head_tenant_change change;
    struct admin_answer a;
    head_admin_done_fn done;
    void *arg;
};

static int admin_op_apply(struct store *s, struct commit_op *op)
{
    struct admin_op *o = (struct admin_op *)op;
    if (o->is_update)
        return s->ops->tenant_update(s, &o->a.tenant);
    return o->is_token ? s->ops->token_insert(s, &o->a.token)
                       : s->ops->tenant_insert(s, &o->a.tenant);
}

/* On the committer thread: the key works from now on, then the caller hears. */
static void admin_op_done(struct commit_op *op, int rc)
{
    struct admin_op *o = (struct admin_op *)op;
    o->a.rc = rc;
    if (!rc && o->is_update) {
        static const char *const what[] = {"removed", "key revoked", "key rotated"};
        tenants_replace(o->h->tenants, &o->a.tenant);
        log_info(MOD, "tenant '%s': %s", o->a.name, what[o->change]);
    } else if (!rc && o->is_token) {
        tenants_add_token(o->h->tenants, &o->a.token);
        log_info(MOD, "worker token '%s' created", o->a.token.name);
    } else if (!rc) {
        tenants_add(o->h->tenants, &o->a.tenant);
        log_info(MOD, "tenant '%s' (%s) created", o->a.tenant.name,
                 job_tier_name(o->a.tenant.tier));
    }
    if (rc) /* nothing was stored: the secret was never usable; forget it */
        memset(o->a.secret, 0, sizeof o->a.secret);
    o->done(o->arg, &o->a);
    memset(o->a.secret, 0, sizeof o->a.secret);
    free(o);
}

static void admin_op_fail(struct admin_op *o, int rc)
{
    o->a.rc = rc;
    memset(o->a.secret, 0, sizeof o->a.secret);
    o->done(o->arg, &o->a);
    free(o);
}

void head_tenant_add(struct head *h, const char *name, enum job_tier tier,
                     head_admin_done_fn done, void *arg)
{
    struct admin_op *o = xcalloc(1, sizeof *o);
    o->op.apply = admin_op_apply;
    o->op.done = admin_op_done;
    o->h = h;
    o->done = done;
    o->arg = arg;
    snprintf(o->a.tenant.name, sizeof o->a.tenant.name, "%s", name);
    o->a.tenant.tier = tier;
    if (tenants_by_name(h->tenants, name, NULL)) {
        admin_op_fail(o, GPUQ_EEXIST);
        return;
    }
    if (token_random("gq_", o->a.secret, sizeof o->a.secret)) {
        admin_op_fail(o, GPUQ_EIO);
        return;
    }
    token_hash(o->a.secret, o->a.tenant.key_hash);
    o->a.tenant.created_ms = clock_wall_ms();
    committer_submit(h->committer, &o->op);
}

void head_worker_token_add(struct head *h, const char *name, head_admin_done_fn done,
                           void *arg)
{
    struct admin_op *o = xcalloc(1, sizeof *o);
    o->op.apply = admin_op_apply;
    o->op.done = admin_op_done;
    o->h = h;
    o->is_token = true;
    o->done = done;
    o->arg = arg;
    snprintf(o->a.token.name, sizeof o->a.token.name, "%s", name);
    if (token_random("gw_", o->a.secret, sizeof o->a.secret)) {
        admin_op_fail(o, GPUQ_EIO);
        return;
    }
    token_hash(o->a.secret, o->a.token.token_hash);
    o->a.token.created_ms = clock_wall_ms();
    committer_submit(h->committer, &o->op);
}

void head_tenant_change(struct head *h, const char *name, enum head_tenant_change change,
                        head_admin_done_fn done, void *arg)
{
    struct admin_op *o = xcalloc(1, sizeof *o);
    o->op.apply = admin_op_apply;
    o->op.done = admin_op_done;
    o->h = h;
    o->is_update = true;
    o->change = change;
    o->done = done;
    o->arg = arg;
    snprintf(o->a.name, sizeof o->a.name, "%s", name);
    if (!tenants_by_name(h->tenants, name, &o->a.tenant)) {
        admin_op_fail(o, GPUQ_ENOENT);
        return;
    }
    struct tenant_rec *t = &o->a.tenant;
    if (change == HEAD_TENANT_REMOVE) {
        snprintf(t->name, sizeof t->name, TENANT_REMOVED "%lld", (long long)t->id);
        snprintf(t->key_hash, sizeof t->key_hash, TENANT_REMOVED "%lld", (long long)t->id);
    } else if (change == HEAD_KEY_REVOKE) {
        snprintf(t->key_hash, sizeof t->key_hash, TENANT_REVOKED "%lld", (long long)t->id);
    } else {
        if (token_random("gq_", o->a.secret, sizeof o->a.secret)) {
            admin_op_fail(o, GPUQ_EIO);
            return;
        }
        token_hash(o->a.secret, t->key_hash);
    }
    committer_submit(h->committer, &o->op);
}

int head_tenants_list(struct head *h, struct tenant_rec **out)
{
    *out = xcalloc(MAX_LIST, sizeof **out);
    return tenants_list(h->tenants, *out, MAX_LIST);
}

bool head_tenant_by_name(struct head *h, const char *name, struct tenant_rec *out)
{
    return tenants_by_name(h->tenants, name, out);
}

const char *head_tenant_name(struct head *h, int64_t tenant_id, char *buf, size_t size)
{
    struct tenant_rec t;
    snprintf(buf, size, "%s", tenants_by_id(h->tenants, tenant_id, &t) ? t.name : "?");
    return buf;
}

/* ---- jobs: reads ---- */

void head_job_cost(struct head *h, struct job_rec *rec)
{
    rec->cost_s = dispatcher_estimate_cost(h->disp, rec, &rec->tag_s);
}

int head_jobs_list(struct head *h, const struct store_list_filter *f, store_job_cb cb, void *arg)
{
    return h->store->ops->job_list(h->store, f, cb, arg);
}

int head_result_read(struct head *h, int64_t tenant_id, uint64_t id, struct head_result *out)
{
    memset(out, 0, sizeof *out);
    struct job_rec j;
    int rc = head_get(h, tenant_id, id, NULL, &j);
    if (rc)
        return rc;
    out->state = job_rec_state(&j);
    job_rec_free_fields(&j);
    if (out->state != JOB_SUCCEEDED)
        return 0;
    rc = h->store->ops->result_get(h->store, id, out->type, sizeof out->type, &out->data,
                                   &out->len);
    if (rc == GPUQ_ENOENT) { /* pruned after its retention */
        out->data = NULL;
        out->len = 0;
        return 0;
    }
    out->kept = rc == 0;
    return rc;
}

/* ---- figures ---- */

void head_get_stats(struct head *h, struct head_stats *out)
{
    memset(out, 0, sizeof *out);
    committer_get_stats(h->committer, &out->commit);
    out->workers = registry_count(h->registry);
    out->ready_workers = registry_count_ready(h->registry);
}
