/* admission.c: the head's admission state behind admission.h — core/admit.h
 * driven with the monotonic clock, and the table of counted jobs. */
#include "head/admission.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/hashmap.h"

/* A counted job. Invariant: in admit's queued work exactly while !running.
 * One per admitted job, queued ones included: small (issue 20) — its names
 * are interned in struct admission, not copied. */
struct counted {
    const char *tenant;
    const char *capability;
    enum sched_lane lane;
    double cost_s;
    int64_t order_ns;
    bool running;
};

struct admission {
    pthread_mutex_t lock;
    struct admit *admit;
    struct hashmap jobs; /* id → struct counted */
    struct hashmap names; /* interned tenant and capability names (owned) */
};

/* The one copy of name (lock held); kept for the life of the process, like
 * the tenants and capabilities it names. */
static const char *intern(struct admission *a, const char *name)
{
    char name_cut[SCHED_NAME_MAX];
    snprintf(name_cut, sizeof name_cut, "%s", name ? name : "");
    char *v = hashmap_get_str(&a->names, name_cut);
    if (!v) {
        v = xstrdup(name_cut);
        hashmap_put_str(&a->names, v, v);
    }
    return v;
}

static enum sched_lane lane_of(const struct job_rec *rec)
{
    return rec->lane == LANE_BATCH ? SCHED_LANE_BATCH : SCHED_LANE_INTERACTIVE;
}

struct admission *admission_create(const struct head_config *cfg)
{
    struct admission *a = xcalloc(1, sizeof *a);
    pthread_mutex_init(&a->lock, NULL);
    a->admit = admit_create(&cfg->admit);
    for (int i = 0; i < cfg->ntenants; i++)
        admit_tenant_set(a->admit, &cfg->tenants[i]);
    hashmap_init(&a->jobs);
    hashmap_init(&a->names);
    return a;
}

void admission_destroy(struct admission *a)
{
    if (!a)
        return;
    size_t pos = 0;
    void *v;
    while (hashmap_next(&a->jobs, &pos, NULL, NULL, &v))
        free(v);
    hashmap_fini(&a->jobs);
    pos = 0;
    while (hashmap_next(&a->names, &pos, NULL, NULL, &v))
        free(v);
    hashmap_fini(&a->names);
    admit_destroy(a->admit);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

uint64_t admission_booking(int64_t tenant_id, const char *idem_key)
{
    if (!idem_key || !idem_key[0])
        return 0;
    char key[160];
    int n = snprintf(key, sizeof key, "%lld\x1f%s", (long long)tenant_id, idem_key);
    uint64_t h = hashmap_hash(key, (size_t)(n < (int)sizeof key ? n : (int)sizeof key - 1));
    return h ? h : 1;
}

static struct admit_request request(const char *tenant, const struct job_rec *rec,
                                    uint64_t booking)
{
    struct admit_request r = {tenant, rec->capability, lane_of(rec), rec->cost_s, booking,
                              rec->tag_s};
    return r;
}

int admission_admit(struct admission *a, const char *tenant, struct job_rec *rec,
                    uint64_t booking, struct admit_verdict *v)
{
    struct admit_request r = request(tenant, rec, booking);
    int64_t now = clock_mono_ns();
    pthread_mutex_lock(&a->lock);
    int rc = admit_decide(a->admit, &r, now, v);
    if (rc == 0 && v->outcome == ADMIT_OK)
        rc = admit_accept(a->admit, &r, now, &rec->order_ns);
    else if (rc == 0 && v->outcome == ADMIT_RETRY)
        admit_refuse(a->admit, &r, v, now);
    pthread_mutex_unlock(&a->lock);
    return rc;
}

void admission_bind(struct admission *a, const char *tenant, const struct job_rec *rec)
{
    struct counted *c = xcalloc(1, sizeof *c);
    c->lane = lane_of(rec);
    c->cost_s = rec->cost_s;
    c->order_ns = rec->order_ns;
    pthread_mutex_lock(&a->lock);
    c->tenant = intern(a, tenant);
    c->capability = intern(a, rec->capability);
    free(hashmap_put_u64(&a->jobs, rec->id, c));
    pthread_mutex_unlock(&a->lock);
}

void admission_undo(struct admission *a, const char *tenant, const struct job_rec *rec)
{
    int64_t now = clock_mono_ns();
    pthread_mutex_lock(&a->lock);
    free(hashmap_del_u64(&a->jobs, rec->id));
    struct admit_request r = request(tenant, rec, 0);
    admit_undo(a->admit, &r, rec->order_ns, now); /* tokens and fair-share tag back too */
    pthread_mutex_unlock(&a->lock);
}

void admission_job_state(struct admission *a, uint64_t job_id, enum job_state state)
{
    if (!a || state == JOB_QUEUED)
        return;
    int64_t now = clock_mono_ns();
    pthread_mutex_lock(&a->lock);
    struct counted *c = hashmap_get_u64(&a->jobs, job_id);
    if (c) {
        if (!c->running) {
            admit_dequeued(a->admit, c->tenant, c->capability, c->lane, c->cost_s, c->order_ns,
                           now);
            c->running = true;
        }
        if (state != JOB_RUNNING) {
            admit_ended(a->admit, c->tenant, c->lane, state == JOB_SUCCEEDED ? c->cost_s : 0,
                        now);
            hashmap_del_u64(&a->jobs, job_id);
            free(c);
        }
    }
    pthread_mutex_unlock(&a->lock);
}

double admission_throughput(struct admission *a, enum sched_lane lane)
{
    pthread_mutex_lock(&a->lock);
    double r = admit_throughput(a->admit, lane, clock_mono_ns());
    pthread_mutex_unlock(&a->lock);
    return r;
}

double admission_eta_rate(struct admission *a, enum sched_lane lane, bool *measured)
{
    int64_t now = clock_mono_ns();
    pthread_mutex_lock(&a->lock);
    double r = admit_eta_rate(a->admit, lane, now, measured);
    pthread_mutex_unlock(&a->lock);
    return r;
}

void admission_capacity(struct admission *a, double interactive, double batch)
{
    int64_t now = clock_mono_ns();
    pthread_mutex_lock(&a->lock);
    admit_capacity(a->admit, SCHED_LANE_INTERACTIVE, interactive, now);
    admit_capacity(a->admit, SCHED_LANE_BATCH, batch, now);
    pthread_mutex_unlock(&a->lock);
}

void admission_backlog_each(struct admission *a,
                            void (*fn)(const char *capability, enum sched_lane lane,
                                       const char *tenant, double gpu_s, int jobs, void *arg),
                            void *arg)
{
    pthread_mutex_lock(&a->lock);
    admit_backlog_each(a->admit, fn, arg);
    pthread_mutex_unlock(&a->lock);
}

