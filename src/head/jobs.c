/* jobs.c: the in-memory job table (see jobs.h): a chained hash on the id for
 * the jobs held in full (struct hjob), a second one for the queued jobs at
 * rest held compactly (struct cjob), and a third on (tenant, idempotency key). */
#include "head/jobs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/token.h"
#include "store/store.h"

struct idem_entry {
    int64_t tenant_id;
    uint64_t job_id;
    struct idem_entry *next;
    char key[REC_IDEM_MAX];
};

/* Jobs at rest live in slabs: big blocks filled in order, each freed when
 * its last job leaves. So they are dense — no allocator header each, and no
 * interleaving with the short-lived allocations made around them (the
 * scheduler's messages on a restart), whose holes would otherwise stay
 * resident between them. Slabs are mapped on their own (not from the
 * allocator's heap) so an empty one goes back to the system at once. */
#define SLAB_BYTES (1u << 20)
/* Slabs are mapped at a multiple of SLAB_BYTES, and a job at rest starts in
 * the first SLAB_BYTES of its slab (a larger slab holds one job), so a job
 * finds its slab from its own address: it keeps no pointer to it. */
#define SLAB_OF(c) ((struct slab *)((uintptr_t)(c) & ~(uintptr_t)(SLAB_BYTES - 1)))

struct slab {
    struct slab *prev, *next;
    size_t size;                /* of the mapping */
    size_t used, live;          /* bytes handed out; jobs still in it */
    _Alignas(16) char data[];
};

/* Whose a job at rest is: its tenant, capability and model, shared by every
 * job at rest with the same ones (interned in jobs.whos; few distinct). */
struct cwho {
    int64_t tenant_id;
    const char *capability, *model, *tenant_name; /* into text */
    char text[];
};

/* A queued job at rest, in about a tenth of a struct hjob: only what such a
 * job can hold (freezable and rec_restable say which jobs qualify: every
 * other field of their record is zero or empty). Its tenant and names are
 * one interned struct cwho. The idempotency key is kept only when there is
 * one, and the body hash (as 32 bytes) only with it: the hash is compared
 * only when a request replays the key (head_submit), and the store, which
 * keeps it, is never written it again (no update sets it), so a job without
 * a key comes back with an empty body_hash. Counted in the table's counts
 * as queued (acct_*), never on the timed list, nobody waits on it. */
struct cjob {
    uint64_t id;
    const struct cwho *who;     /* interned (jobs.whos) */
    uint32_t width, height, steps, frames;
    int64_t timeout_ms, created_ms, order_ns; /* deadline_ms is 0 (rec_restable) */
    double cost_s, tag_s;
    int32_t acct_queue;
    uint32_t idem_at;           /* the idempotency key's offset in text; 0 = none */
    uint32_t version;           /* a job with a larger version stays in full */
    uint8_t lane, tier;
    bool admitted : 1, has_hash : 1, has_params : 1;
    struct cjob *next;          /* hash chain */
    /* params_json ("" when none), NUL, then with an idempotency key: the key,
     * NUL, and the body hash as 32 bytes when has_hash. */
    char text[];
};

struct jobs {
    pthread_mutex_t lock;
    struct hjob **buckets;
    size_t nbuckets, count;
    struct cjob **cbuckets;     /* the jobs at rest (struct cjob), by id */
    size_t ncbuckets, ccount;
    struct slab *slabs;         /* newest first; slabs->used grows */
    struct hashmap whos;        /* interned struct cwho, by tenant id and names */
    const struct cwho *last_who; /* the one intern_who found last */
    struct idem_entry **ibuckets;
    size_t nibuckets, icount;
    uint64_t next_id;
    bool stopping;
    struct hjob *timed;     /* timed list head (see jobs.h) */
    /* Counts of committed jobs (see hjob.acct_*): by state, and the queue
     * groups, found by their packed key in qmap (value: index + 1). */
    long long states[JOB_NSTATES];
    struct jobs_queue *queues;
    int nqueues, capqueues;
    struct hashmap qmap;
};

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x *= UINT64_C(0xc4ceb9fe1a85ec53);
    x ^= x >> 33;
    return x;
}

static uint64_t idem_hash(int64_t tenant_id, const char *key)
{
    uint64_t h = UINT64_C(1469598103934665603) ^ (uint64_t)tenant_id;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * UINT64_C(1099511628211);
    return mix64(h);
}

struct jobs *jobs_create(void)
{
    struct jobs *t = xcalloc(1, sizeof *t);
    pthread_mutex_init(&t->lock, NULL);
    t->nbuckets = 1024;
    t->buckets = xcalloc(t->nbuckets, sizeof *t->buckets);
    t->nibuckets = 256;
    t->ibuckets = xcalloc(t->nibuckets, sizeof *t->ibuckets);
    t->ncbuckets = 1024;
    t->cbuckets = xcalloc(t->ncbuckets, sizeof *t->cbuckets);
    t->next_id = 1;
    hashmap_init(&t->qmap);
    hashmap_init(&t->whos);
    return t;
}

static void timed_unlink(struct jobs *t, struct hjob *j)
{
    if (!j->timed)
        return;
    if (j->tprev)
        j->tprev->tnext = j->tnext;
    else
        t->timed = j->tnext;
    if (j->tnext)
        j->tnext->tprev = j->tprev;
    j->tprev = j->tnext = NULL;
    j->timed = false;
}

/* What a queued job of cost_s adds to its queue group's backlog (ms). A job
 * at rest holds no copy: it is this of its cost_s. */
static int64_t cost_ms_of(double cost_s)
{
    return cost_s > 0 ? (int64_t)(cost_s * 1000 + 0.5) : 0;
}

/* The index of r's queue group, created on first use. */
static int queue_of(struct jobs *t, const struct job_rec *r)
{
    char key[REC_NAME_MAX + 1 + sizeof(int64_t)];
    size_t n = strnlen(r->capability, REC_NAME_MAX - 1);
    memcpy(key, r->capability, n);
    key[n++] = (char)r->lane;
    memcpy(key + n, &r->tenant_id, sizeof r->tenant_id);
    n += sizeof r->tenant_id;
    uintptr_t at = (uintptr_t)hashmap_get(&t->qmap, key, n);
    if (at)
        return (int)(at - 1);
    if (t->nqueues == t->capqueues) {
        t->capqueues = t->capqueues ? t->capqueues * 2 : 16;
        t->queues = xrealloc(t->queues, (size_t)t->capqueues * sizeof *t->queues);
    }
    struct jobs_queue *q = &t->queues[t->nqueues];
    memset(q, 0, sizeof *q);
    memcpy(q->capability, r->capability, n - 1 - sizeof r->tenant_id);
    q->lane = r->lane;
    q->tenant_id = r->tenant_id;
    hashmap_put(&t->qmap, key, n, (void *)(uintptr_t)(t->nqueues + 1));
    return t->nqueues++;
}

/* Brings the counts up to date with j (gone: j leaves the table). */
static void account(struct jobs *t, struct hjob *j, bool gone)
{
    int st = j->committed && !gone && (unsigned)j->rec.lc.state < JOB_NSTATES
                 ? (int)j->rec.lc.state
                 : -1;
    if (st == j->acct_state)
        return;
    if (j->acct_state >= 0)
        t->states[j->acct_state]--;
    if (j->acct_queue >= 0) {
        t->queues[j->acct_queue].depth--;
        t->queues[j->acct_queue].backlog_ms -= j->acct_cost_ms;
        j->acct_queue = -1;
    }
    j->acct_state = (int8_t)st;
    if (st < 0)
        return;
    t->states[st]++;
    if (st == LC_QUEUED) {
        j->acct_queue = queue_of(t, &j->rec);
        j->acct_cost_ms = cost_ms_of(j->rec.cost_s);
        t->queues[j->acct_queue].depth++;
        t->queues[j->acct_queue].backlog_ms += j->acct_cost_ms;
    }
}

int jobs_queue_stats(struct jobs *t, long long states[JOB_NSTATES], struct jobs_queue **v,
                     int *cap)
{
    pthread_mutex_lock(&t->lock);
    int n = t->nqueues;
    if (n > *cap) {
        *v = xrealloc(*v, (size_t)n * sizeof **v);
        *cap = n;
    }
    if (n)
        memcpy(*v, t->queues, (size_t)n * sizeof **v);
    memcpy(states, t->states, sizeof t->states);
    pthread_mutex_unlock(&t->lock);
    return n;
}

void jobs_retrack(struct jobs *t, struct hjob *j)
{
    account(t, j, false);
    bool want = j->rec.lc.state == LC_RUNNING ||
                (j->rec.lc.state == LC_QUEUED && j->rec.lc.deadline_ms > 0);
    if (want == j->timed)
        return;
    if (!want) {
        timed_unlink(t, j);
        return;
    }
    j->tprev = NULL;
    j->tnext = t->timed;
    if (t->timed)
        t->timed->tprev = j;
    t->timed = j;
    j->timed = true;
}

struct hjob *jobs_timed_first(struct jobs *t)
{
    return t->timed;
}

struct hjob *jobs_timed_next(struct hjob *j)
{
    return j->tnext;
}

static void free_job(struct hjob *j)
{
    job_rec_free_fields(&j->rec);
    pthread_cond_destroy(&j->changed);
    free(j);
}

void jobs_destroy(struct jobs *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nbuckets; i++) {
        struct hjob *j = t->buckets[i], *next;
        for (; j; j = next) {
            next = j->next;
            free_job(j);
        }
    }
    for (size_t i = 0; i < t->nibuckets; i++) {
        struct idem_entry *e = t->ibuckets[i], *next;
        for (; e; e = next) {
            next = e->next;
            free(e);
        }
    }
    for (struct slab *b = t->slabs, *next; b; b = next) {
        next = b->next;
        munmap(b, b->size);
    }
    size_t pos = 0;
    void *who;
    while (hashmap_next(&t->whos, &pos, NULL, NULL, &who))
        free(who);
    free(t->buckets);
    free(t->ibuckets);
    free(t->cbuckets);
    free(t->queues);
    hashmap_fini(&t->qmap);
    hashmap_fini(&t->whos);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

void jobs_lock(struct jobs *t)
{
    pthread_mutex_lock(&t->lock);
}

void jobs_unlock(struct jobs *t)
{
    pthread_mutex_unlock(&t->lock);
}

static struct hjob *thaw(struct jobs *t, struct cjob **pc);

struct hjob *jobs_find(struct jobs *t, uint64_t id)
{
    for (struct hjob *j = t->buckets[mix64(id) & (t->nbuckets - 1)]; j; j = j->next)
        if (j->rec.id == id)
            return j;
    for (struct cjob **pc = &t->cbuckets[mix64(id) & (t->ncbuckets - 1)]; *pc; pc = &(*pc)->next)
        if ((*pc)->id == id)
            return thaw(t, pc);
    return NULL;
}

struct hjob *jobs_find_idem(struct jobs *t, int64_t tenant_id, const char *key)
{
    uint64_t h = idem_hash(tenant_id, key) & (t->nibuckets - 1);
    for (struct idem_entry *e = t->ibuckets[h]; e; e = e->next)
        if (e->tenant_id == tenant_id && !strcmp(e->key, key))
            return jobs_find(t, e->job_id);
    return NULL;
}

static void grow(struct jobs *t)
{
    size_t n = t->nbuckets * 2;
    struct hjob **b = xcalloc(n, sizeof *b);
    for (size_t i = 0; i < t->nbuckets; i++) {
        struct hjob *j = t->buckets[i], *next;
        for (; j; j = next) {
            next = j->next;
            size_t h = mix64(j->rec.id) & (n - 1);
            j->next = b[h];
            b[h] = j;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = n;
}

static void grow_idem(struct jobs *t)
{
    size_t n = t->nibuckets * 2;
    struct idem_entry **b = xcalloc(n, sizeof *b);
    for (size_t i = 0; i < t->nibuckets; i++) {
        struct idem_entry *e = t->ibuckets[i], *next;
        for (; e; e = next) {
            next = e->next;
            size_t h = idem_hash(e->tenant_id, e->key) & (n - 1);
            e->next = b[h];
            b[h] = e;
        }
    }
    free(t->ibuckets);
    t->ibuckets = b;
    t->nibuckets = n;
}

/* Indexes a new job's idempotency key and moves next_id past its id. */
static void index_rec(struct jobs *t, const struct job_rec *r)
{
    if (r->idem_key[0]) {
        if (t->icount + 1 > t->nibuckets)
            grow_idem(t);
        struct idem_entry *e = xcalloc(1, sizeof *e);
        e->tenant_id = r->tenant_id;
        e->job_id = r->id;
        memcpy(e->key, r->idem_key, sizeof e->key);
        size_t ih = idem_hash(e->tenant_id, e->key) & (t->nibuckets - 1);
        e->next = t->ibuckets[ih];
        t->ibuckets[ih] = e;
        t->icount++;
    }
    if (r->id >= t->next_id)
        t->next_id = r->id + 1;
}

/* A new struct hjob, linked in the id hash (not yet counted: acct_state -1). */
static struct hjob *hot_new(struct jobs *t)
{
    if (t->count + 1 > t->nbuckets)
        grow(t);
    struct hjob *j = xcalloc(1, sizeof *j);
    j->acct_state = -1;
    j->acct_queue = -1;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->changed, &ca);
    pthread_condattr_destroy(&ca);
    return j;
}

static void hot_link(struct jobs *t, struct hjob *j)
{
    size_t h = mix64(j->rec.id) & (t->nbuckets - 1);
    j->next = t->buckets[h];
    t->buckets[h] = j;
    t->count++;
}

struct hjob *jobs_insert(struct jobs *t, struct job_rec *rec)
{
    struct hjob *j = hot_new(t);
    j->rec = *rec;
    rec->params_json = NULL;
    rec->attempts = NULL;
    rec->nattempts = 0;
    hot_link(t, j);
    index_rec(t, &j->rec);
    jobs_retrack(t, j);
    return j;
}

/* ---- jobs at rest (struct cjob) ---- */

/* The struct cwho of r's tenant, capability and model, made on first use. */
static const struct cwho *lookup_who(struct jobs *t, const struct job_rec *r)
{
    size_t nc = strnlen(r->capability, REC_NAME_MAX - 1);
    size_t nm = strnlen(r->model, REC_NAME_MAX - 1);
    size_t nt = strnlen(r->tenant_name, REC_NAME_MAX - 1);
    char key[sizeof(int64_t) + 3 * REC_NAME_MAX];
    size_t n = 0;
    memcpy(key, &r->tenant_id, sizeof r->tenant_id);
    n += sizeof r->tenant_id;
    memcpy(key + n, r->capability, nc);
    key[n + nc] = '\0';
    n += nc + 1;
    memcpy(key + n, r->model, nm);
    key[n + nm] = '\0';
    n += nm + 1;
    memcpy(key + n, r->tenant_name, nt);
    key[n + nt] = '\0';
    n += nt + 1;
    struct cwho *w = hashmap_get(&t->whos, key, n);
    if (w)
        return w;
    size_t names = n - sizeof r->tenant_id;
    w = xmalloc(sizeof *w + names);
    w->tenant_id = r->tenant_id;
    memcpy(w->text, key + sizeof r->tenant_id, names);
    w->capability = w->text;
    w->model = w->text + nc + 1;
    w->tenant_name = w->text + nc + 1 + nm + 1;
    hashmap_put(&t->whos, key, n, w);
    return w;
}

/* The interned struct cwho of r's tenant, capability and model. Runs of
 * jobs share one (a restart puts a million at rest): the last one found is
 * tried first, without hashing. */
static const struct cwho *intern_who(struct jobs *t, const struct job_rec *r)
{
    const struct cwho *last = t->last_who;
    if (last && last->tenant_id == r->tenant_id && !strcmp(last->capability, r->capability) &&
        !strcmp(last->model, r->model) && !strcmp(last->tenant_name, r->tenant_name))
        return last;
    t->last_who = lookup_who(t, r);
    return t->last_who;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The body hash as 32 bytes: true when it is 64 lowercase hex digits (what
 * the API writes); then hex_of gives back the same text. */
static bool hash_pack(const char *hex, uint8_t out[32])
{
    for (int i = 0; i < 32; i++) {
        int hi = hexval(hex[2 * i]), lo = hi < 0 ? -1 : hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return hex[64] == '\0';
}

static void hash_unpack(const uint8_t in[32], char hex[REC_HASH_HEX])
{
    hex_lower(in, 32, hex);
}

/* Whether a committed job with record r can rest as a struct cjob with
 * nothing lost: queued and never attempted, and every field a cjob leaves
 * out zero or empty. */
static bool rec_restable(const struct job_rec *r)
{
    const struct lc_job *lc = &r->lc;
    uint8_t hash[32];
    return lc->state == LC_QUEUED && lc->attempt == 0 && lc->failures == 0 && !lc->worker[0] &&
           lc->nfailed == 0 && lc->assigned_ns == 0 && lc->started_ms == 0 &&
           lc->lease_until_ns == 0 && lc->run_deadline_ns == 0 && lc->deadline_ms == 0 &&
           r->phase == PHASE_NONE && r->progress == 0 && !r->error_class[0] &&
           !r->error_message[0] && !r->result_type[0] && r->result_bytes == 0 &&
           r->started_ms == 0 && r->finished_ms == 0 && r->eta_start_ms == 0 &&
           r->eta_finish_ms == 0 && !r->waiting_reason[0] && r->nattempts == 0 &&
           !r->attempts &&
           (!r->idem_key[0] || !r->body_hash[0] || hash_pack(r->body_hash, hash));
}

/* ... and j besides: committed, counted as queued, nobody waiting on or
 * watching it, not on the timed list (a queued job there has a deadline). */
static bool freezable(const struct hjob *j)
{
    return j->committed && !j->completing && !j->timed && !jobs_awaited(j) &&
           j->version <= UINT32_MAX &&
           j->acct_state == LC_QUEUED && j->acct_cost_ms == cost_ms_of(j->rec.cost_s) &&
           rec_restable(&j->rec);
}

static void grow_cold(struct jobs *t)
{
    size_t n = t->ncbuckets * 2;
    struct cjob **b = xcalloc(n, sizeof *b);
    for (size_t i = 0; i < t->ncbuckets; i++) {
        struct cjob *c = t->cbuckets[i], *next;
        for (; c; c = next) {
            next = c->next;
            size_t h = mix64(c->id) & (n - 1);
            c->next = b[h];
            b[h] = c;
        }
    }
    free(t->cbuckets);
    t->cbuckets = b;
    t->ncbuckets = n;
}

/* Unlinks j from the id hash (it is there). */
static void hot_unlink(struct jobs *t, struct hjob *j)
{
    struct hjob **pj = &t->buckets[mix64(j->rec.id) & (t->nbuckets - 1)];
    while (*pj != j)
        pj = &(*pj)->next;
    *pj = j->next;
    t->count--;
}

/* A slab of size bytes (a multiple of the page size) at a multiple of
 * SLAB_BYTES (see SLAB_OF), its pages made present at once where the kernel
 * can (a restart fills slab after slab). */
static struct slab *slab_map(size_t size)
{
    size_t span = size + SLAB_BYTES;
    char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "gpuq: out of memory mapping %zu bytes\n", span);
        abort();
    }
    char *at = (char *)(((uintptr_t)p + SLAB_BYTES - 1) & ~(uintptr_t)(SLAB_BYTES - 1));
    if (at > p)
        munmap(p, (size_t)(at - p));
    if (p + span > at + size)
        munmap(at + size, (size_t)(p + span - (at + size)));
#ifdef MADV_POPULATE_WRITE
    (void)madvise(at, size, MADV_POPULATE_WRITE); /* a hint: faults fill it otherwise */
#endif
    return (struct slab *)at;
}

/* Room for n bytes at rest (8-aligned: a cjob holds nothing wider), in the
 * newest slab or a new one; the cjob header zeroed. */
static struct cjob *slab_alloc(struct jobs *t, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    struct slab *b = t->slabs;
    if (!b || b->used + n > SLAB_BYTES - sizeof *b) {
        if (b && b->live == 0) { /* empty (emptied while newest): not kept behind */
            t->slabs = b->next;
            if (t->slabs)
                t->slabs->prev = NULL;
            munmap(b, b->size);
        }
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t size = n + sizeof *b > SLAB_BYTES ? (n + sizeof *b + page - 1) / page * page
                                                 : SLAB_BYTES;
        b = slab_map(size);
        b->size = size;
        b->prev = NULL;
        b->next = t->slabs;
        b->used = b->live = 0;
        if (t->slabs)
            t->slabs->prev = b;
        t->slabs = b;
    }
    struct cjob *c = (struct cjob *)(b->data + b->used);
    b->used += n;
    b->live++;
    memset(c, 0, sizeof *c);
    return c;
}

/* A job left rest: its slab goes once empty (the newest stays to be filled). */
static void slab_release(struct jobs *t, struct cjob *c)
{
    struct slab *b = SLAB_OF(c);
    if (--b->live > 0)
        return;
    if (b == t->slabs) {
        b->used = 0; /* empty: filled again from the start */
        return;
    }
    if (b->prev)
        b->prev->next = b->next;
    if (b->next)
        b->next->prev = b->prev;
    munmap(b, b->size);
}

/* A cjob for r (rec_restable), linked in the cold hash, with the counts it
 * carries; one allocation, params and key in its tail. */
static struct cjob *cold_add(struct jobs *t, const struct job_rec *r, uint64_t version,
                             int acct_queue)
{
    if (t->ccount + 1 > t->ncbuckets)
        grow_cold(t);
    size_t plen = r->params_json ? strlen(r->params_json) : 0;
    size_t klen = r->idem_key[0] ? strnlen(r->idem_key, REC_IDEM_MAX - 1) + 1 : 0;
    bool hash = klen && r->body_hash[0];
    struct cjob *c = slab_alloc(t, sizeof *c + plen + 1 + klen + (hash ? 32 : 0));
    c->id = r->id;
    c->who = intern_who(t, r);
    c->has_params = r->params_json != NULL;
    memcpy(c->text, r->params_json ? r->params_json : "", plen + 1);
    if (klen) {
        c->idem_at = (uint32_t)(plen + 1);
        memcpy(c->text + c->idem_at, r->idem_key, klen - 1);
        c->text[c->idem_at + klen - 1] = '\0';
    }
    c->width = r->width;
    c->height = r->height;
    c->steps = r->steps;
    c->frames = r->frames;
    c->timeout_ms = r->lc.timeout_ms;
    c->created_ms = r->created_ms;
    c->order_ns = r->order_ns;
    c->cost_s = r->cost_s;
    c->tag_s = r->tag_s;
    c->version = (uint32_t)version;
    c->acct_queue = acct_queue;
    c->lane = (uint8_t)r->lane;
    c->tier = (uint8_t)r->tier;
    c->admitted = r->admitted;
    c->has_hash = hash;
    if (hash)
        hash_pack(r->body_hash, (uint8_t *)c->text + c->idem_at + klen);
    size_t h = mix64(c->id) & (t->ncbuckets - 1);
    c->next = t->cbuckets[h];
    t->cbuckets[h] = c;
    t->ccount++;
    return c;
}

bool jobs_freeze(struct jobs *t, struct hjob *j)
{
    if (!freezable(j))
        return false;
    cold_add(t, &j->rec, j->version, j->acct_queue);
    hot_unlink(t, j);
    free_job(j);
    return true;
}

bool jobs_insert_at_rest(struct jobs *t, struct job_rec *rec)
{
    if (!rec_restable(rec))
        return false;
    int q = queue_of(t, rec);
    int64_t cost_ms = cost_ms_of(rec->cost_s);
    cold_add(t, rec, 0, q);
    t->states[LC_QUEUED]++;
    t->queues[q].depth++;
    t->queues[q].backlog_ms += cost_ms;
    index_rec(t, rec);
    job_rec_free_fields(rec);
    return true;
}

/* snprintf(dst, size, "%s", src) without the formatting machinery: this
 * runs for every resting job a jobs_foreach shows. */
static void copy_str(char *dst, size_t size, const char *src)
{
    size_t n = strnlen(src, size - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* The record a cjob stands for, into r (zeroed by the caller once: only the
 * fields a cjob holds are written). params_json points into c (borrowed). */
static void cold_fill(const struct cjob *c, struct job_rec *r)
{
    r->id = c->id;
    r->tenant_id = c->who->tenant_id;
    copy_str(r->capability, sizeof r->capability, c->who->capability);
    copy_str(r->model, sizeof r->model, c->who->model);
    copy_str(r->tenant_name, sizeof r->tenant_name, c->who->tenant_name);
    r->params_json = c->has_params ? (char *)c->text : NULL;
    copy_str(r->idem_key, sizeof r->idem_key, c->idem_at ? c->text + c->idem_at : "");
    if (c->has_hash)
        hash_unpack((const uint8_t *)c->text + c->idem_at + strlen(c->text + c->idem_at) + 1,
                    r->body_hash);
    else
        r->body_hash[0] = '\0';
    r->width = c->width;
    r->height = c->height;
    r->steps = c->steps;
    r->frames = c->frames;
    r->lane = (enum job_lane)c->lane;
    r->tier = (enum job_tier)c->tier;
    r->lc.state = LC_QUEUED;
    r->lc.deadline_ms = 0;
    r->lc.timeout_ms = c->timeout_ms;
    r->created_ms = c->created_ms;
    r->order_ns = c->order_ns;
    r->cost_s = c->cost_s;
    r->tag_s = c->tag_s;
    r->admitted = c->admitted;
}

/* Brings the job at *pc back in full (its counts carry over unchanged). */
static struct hjob *thaw(struct jobs *t, struct cjob **pc)
{
    struct cjob *c = *pc;
    *pc = c->next;
    t->ccount--;
    struct hjob *j = hot_new(t);
    cold_fill(c, &j->rec);
    if (j->rec.params_json)
        j->rec.params_json = xstrdup(j->rec.params_json);
    j->committed = true;
    j->version = c->version;
    j->acct_state = LC_QUEUED;
    j->acct_queue = c->acct_queue;
    j->acct_cost_ms = cost_ms_of(c->cost_s);
    hot_link(t, j);
    slab_release(t, c);
    return j;
}

void jobs_memory(struct jobs *t, size_t *full, size_t *at_rest)
{
    *full = t->count;
    *at_rest = t->ccount;
}

static void fire_watchers(struct hjob *j)
{
    struct job_watch *w = j->watchers, *next;
    j->watchers = NULL;
    for (; w; w = next) {
        next = w->next;
        w->next = NULL;
        w->fire(w, j);
    }
}

/* A change: fires the watchers, but keeps the until_end ones while the job
 * has not ended. */
static void fire_changed(struct hjob *j)
{
    if (!job_state_terminal(job_rec_state(&j->rec))) {
        struct job_watch **pw = &j->watchers, *keep = NULL, **kt = &keep;
        while (*pw) {
            struct job_watch *w = *pw;
            if (w->until_end) {
                *pw = w->next;
                w->next = NULL;
                *kt = w;
                kt = &w->next;
            } else {
                pw = &w->next;
            }
        }
        fire_watchers(j);
        *kt = j->watchers; /* fire never adds watchers, but stay correct if one did */
        j->watchers = keep;
        return;
    }
    fire_watchers(j);
}

void jobs_mark_committed(struct jobs *t, struct hjob *j)
{
    j->committed = true;
    jobs_retrack(t, j);
}

void jobs_changed(struct jobs *t, struct hjob *j)
{
    (void)t;
    j->version++;
    if (j->waiters)
        pthread_cond_broadcast(&j->changed);
    fire_changed(j);
}

void jobs_watch(struct jobs *t, struct hjob *j, struct job_watch *w)
{
    (void)t;
    w->next = j->watchers;
    j->watchers = w;
}

bool jobs_unwatch(struct jobs *t, struct hjob *j, struct job_watch *w)
{
    (void)t;
    for (struct job_watch **pw = &j->watchers; *pw; pw = &(*pw)->next) {
        if (*pw == w) {
            *pw = w->next;
            w->next = NULL;
            return true;
        }
    }
    return false;
}

bool jobs_stopping(struct jobs *t)
{
    return t->stopping;
}

static struct timespec to_timespec(int64_t ns)
{
    struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    return ts;
}

bool jobs_wait(struct jobs *t, struct hjob *j, uint64_t version, int64_t deadline_ns)
{
    struct timespec ts = to_timespec(deadline_ns);
    j->waiters++;
    while (j->version == version && !t->stopping) {
        if (pthread_cond_timedwait(&j->changed, &t->lock, &ts) == ETIMEDOUT)
            break;
    }
    j->waiters--;
    return j->version != version;
}

static void unlink_idem(struct jobs *t, const struct hjob *j)
{
    size_t h = idem_hash(j->rec.tenant_id, j->rec.idem_key) & (t->nibuckets - 1);
    for (struct idem_entry **pe = &t->ibuckets[h]; *pe; pe = &(*pe)->next) {
        if ((*pe)->job_id == j->rec.id) {
            struct idem_entry *e = *pe;
            *pe = e->next;
            free(e);
            t->icount--;
            return;
        }
    }
}

long long jobs_finished(struct jobs *t)
{
    long long n = 0;
    for (int st = 0; st < JOB_NSTATES; st++)
        if (job_state_terminal((enum job_state)st))
            n += t->states[st];
    return n;
}

/* Whether j may leave memory by jobs_sweep (lock held). */
static bool droppable(const struct hjob *j)
{
    return j->committed && job_state_terminal(job_rec_state(&j->rec)) && !jobs_awaited(j);
}

/* The k-th smallest (0-based) of v[0..n), k < n; reorders v (Hoare's
 * partition: after one, v[lo..j] <= pivot <= v[i..hi], and what lies
 * between j and i equals the pivot). */
static int64_t kth_smallest(int64_t *v, size_t n, size_t k)
{
    long lo = 0, hi = (long)n - 1, want = (long)k;
    while (lo < hi) {
        int64_t pivot = v[lo + (hi - lo) / 2];
        long i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j) {
                int64_t tmp = v[i];
                v[i++] = v[j];
                v[j--] = tmp;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            return v[want];
    }
    return v[want];
}

/* The cutoff that leaves at most max of the droppable finished jobs: the
 * finish time just after the oldest one past max (lock held); INT64_MIN
 * when they are max or fewer. One pass gathers their finish times (the
 * finished jobs in memory bound their count). */
static int64_t count_cutoff(struct jobs *t, long long max)
{
    size_t cap = (size_t)jobs_finished(t), m = 0;
    if ((long long)cap <= max)
        return INT64_MIN;
    int64_t *v = xmalloc(cap * sizeof *v);
    for (size_t i = 0; i < t->nbuckets; i++)
        for (struct hjob *j = t->buckets[i]; j && m < cap; j = j->next)
            if (droppable(j))
                v[m++] = j->rec.finished_ms;
    int64_t cut = INT64_MIN;
    /* Those finished at or before the (m - max)-th oldest's time go: at
     * least m - max of them (more when others finished in the same ms). */
    if ((long long)m > max)
        cut = kth_smallest(v, m, m - (size_t)max - 1) + 1;
    free(v);
    return cut;
}

int jobs_sweep(struct jobs *t, int64_t cutoff_ms, long long max_finished)
{
    int dropped = 0;
    if (max_finished >= 0) {
        int64_t cut = count_cutoff(t, max_finished);
        if (cut > cutoff_ms)
            cutoff_ms = cut;
    }
    for (size_t i = 0; i < t->nbuckets; i++) {
        for (struct hjob **pj = &t->buckets[i]; *pj;) {
            struct hjob *j = *pj;
            if (droppable(j) && j->rec.finished_ms < cutoff_ms) {
                *pj = j->next;
                if (j->rec.idem_key[0])
                    unlink_idem(t, j);
                timed_unlink(t, j);
                account(t, j, true);
                free_job(j);
                t->count--;
                dropped++;
            } else if (jobs_freeze(t, j)) {
                /* at rest now: *pj is already j's successor */
            } else {
                pj = &j->next;
            }
        }
    }
    return dropped;
}

void jobs_remove(struct jobs *t, struct hjob *j)
{
    fire_watchers(j);
    for (struct hjob **pj = &t->buckets[mix64(j->rec.id) & (t->nbuckets - 1)]; *pj;
         pj = &(*pj)->next) {
        if (*pj == j) {
            *pj = j->next;
            if (j->rec.idem_key[0])
                unlink_idem(t, j);
            timed_unlink(t, j);
            account(t, j, true);
            t->count--;
            if (j->waiters) {
                /* Someone waits on it (an idempotent replay): let them see it gone first. */
                j->rec.lc.state = LC_FAILED;
                j->version++;
                pthread_cond_broadcast(&j->changed);
                j->next = NULL;
                return; /* leaked deliberately: rare, and waiters still hold it */
            }
            free_job(j);
            return;
        }
    }
}

void jobs_shutdown(struct jobs *t)
{
    pthread_mutex_lock(&t->lock);
    t->stopping = true;
    for (size_t i = 0; i < t->nbuckets; i++) {
        for (struct hjob *j = t->buckets[i]; j; j = j->next) {
            if (j->waiters)
                pthread_cond_broadcast(&j->changed);
            fire_watchers(j);
        }
    }
    pthread_mutex_unlock(&t->lock);
}

void jobs_foreach(struct jobs *t, void (*fn)(void *arg, const struct hjob *j), void *arg)
{
    for (size_t i = 0; i < t->nbuckets; i++)
        for (struct hjob *j = t->buckets[i]; j; j = j->next)
            if (j->committed)
                fn(arg, j);
    if (!t->ccount)
        return;
    /* Jobs at rest are shown to fn through one scratch struct hjob: every
     * field a cjob leaves out is zero in all of them. */
    struct hjob *tmp = xcalloc(1, sizeof *tmp);
    tmp->committed = true;
    tmp->acct_state = LC_QUEUED;
    for (size_t i = 0; i < t->ncbuckets; i++) {
        for (struct cjob *c = t->cbuckets[i]; c; c = c->next) {
            cold_fill(c, &tmp->rec);
            tmp->version = c->version;
            tmp->acct_queue = c->acct_queue;
            tmp->acct_cost_ms = cost_ms_of(c->cost_s);
            fn(arg, tmp);
        }
    }
    free(tmp);
}

void jobs_set_next_id(struct jobs *t, uint64_t next)
{
    if (next > t->next_id)
        t->next_id = next;
}

uint64_t jobs_next_id(struct jobs *t)
{
    return t->next_id++;
}
