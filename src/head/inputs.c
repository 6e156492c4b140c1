/* inputs.c: uploads and the jobs that name them (see inputs.h). */
#include "head/inputs.h"

#include <jansson.h>
#include <nettle/sha2.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "common/token.h"
#include "head/retention.h"

#define MOD "inputs"

/* An upload on its way to the store. */
struct upload_op {
    struct commit_op op;      /* first: the committer hands it back */
    struct input_rec rec;
    const void *data;         /* borrowed: the request waits for done */
    size_t len;
    inputs_done_fn done;
    void *arg;
};

static int upload_apply(struct store *s, struct commit_op *op)
{
    struct upload_op *u = (struct upload_op *)op;
    return s->ops->input_put(s, &u->rec, u->data, u->len);
}

static void upload_done(struct commit_op *op, int rc)
{
    struct upload_op *u = (struct upload_op *)op;
    if (rc)
        log_error(MOD, "upload of %lld bytes not stored: %s", (long long)u->len,
                  gpuq_strerror(rc));
    u->done(u->arg, rc, &u->rec);
    free(u);
}

static void sha256_hex(const void *data, size_t len, char out[REC_HASH_HEX])
{
    struct sha256_ctx ctx;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_init(&ctx);
    sha256_update(&ctx, len, data);
    sha256_digest(&ctx, sizeof d, d);
    hex_lower(d, sizeof d, out);
}

void inputs_upload(struct head *h, int64_t tenant_id, const char *content_type,
                   const void *data, size_t len, inputs_done_fn done, void *arg)
{
    struct upload_op *u = xcalloc(1, sizeof *u);
    u->op.apply = upload_apply;
    u->op.done = upload_done;
    u->data = data;
    u->len = len;
    u->done = done;
    u->arg = arg;
    uint64_t a = random_u64(), b = random_u64();
    snprintf(u->rec.id, sizeof u->rec.id, "in_%016llx%016llx", (unsigned long long)a,
             (unsigned long long)b);
    u->rec.tenant_id = tenant_id;
    snprintf(u->rec.content_type, sizeof u->rec.content_type, "%s", content_type);
    u->rec.bytes = (int64_t)len;
    sha256_hex(data, len, u->rec.sha256);
    u->rec.created_ms = clock_wall_ms();
    committer_submit(h->committer, &u->op);
}

/* The document is json_parse_job's compact dump, where a key "inputs" at any
 * depth reads "inputs": verbatim (the encoder escapes no ASCII letter), so a
 * document without that text names no uploads; one with it (even inside a
 * string) may. */
bool inputs_named(const char *params_json)
{
    return params_json && strstr(params_json, "\"inputs\":");
}

/* params.inputs of a normalized params document (NULL if none). Caller decrefs root.
 * Most jobs name no inputs, and parsing the document twice per submit (the
 * check, then the link in the commit) was a sixth of gpuqd's instructions per
 * submit: a document that inputs_named says names none is not parsed. */
static json_t *params_inputs(const char *params_json, json_t **root)
{
    *root = NULL;
    if (!inputs_named(params_json))
        return NULL;
    *root = json_loads(params_json, 0, NULL);
    json_t *in = json_object_get(*root, "inputs");
    return json_is_object(in) ? in : NULL;
}

int inputs_check(struct head *h, int64_t tenant_id, const char *params_json, char *field,
                 size_t fsize, char *msg, size_t msize)
{
    json_t *root;
    json_t *in = params_inputs(params_json, &root);
    const char *name;
    json_t *v;
    int rc = 0;
    json_object_foreach(in, name, v) {
        const char *id = json_string_value(v);
        struct input_rec r;
        rc = id ? h->store->ops->input_get(h->store, id, &r, NULL, NULL) : GPUQ_ENOENT;
        if (!rc && r.tenant_id != tenant_id)
            rc = GPUQ_ENOENT; /* another tenant's upload is as good as none */
        if (rc) {
            snprintf(field, fsize, "params.inputs.%.32s", name);
            if (rc == GPUQ_ENOENT)
                snprintf(msg, msize, "%s: no upload %.40s (uploads are per tenant and deleted "
                                     "when unused)", field, id ? id : "");
            else
                snprintf(msg, msize, "%s: the store could not be read", field);
            break;
        }
    }
    json_decref(root);
    return rc;
}

int inputs_link(struct store *s, const struct job_rec *rec)
{
    json_t *root;
    json_t *in = params_inputs(rec->params_json, &root);
    const char *name;
    json_t *v;
    int rc = 0;
    json_object_foreach(in, name, v) {
        const char *id = json_string_value(v);
        rc = id ? s->ops->input_link(s, rec->id, rec->tenant_id, name, id) : GPUQ_ENOENT;
        if (rc)
            break;
    }
    json_decref(root);
    return rc;
}

int inputs_read(struct head *h, const char *id, struct input_rec *r, void **data, size_t *len)
{
    return h->store->ops->input_get(h->store, id, r, data, len);
}

/* ---- the sweep ---- */

#define SWEEP_MAX_INTERVAL_S 300

struct sweep_op {
    struct commit_op op;
    struct head *h;
    int64_t jobs_cutoff_ms, unused_cutoff_ms;
    int deleted;
};

static atomic_bool sweeping;
static _Atomic int64_t next_sweep_ns;

static int sweep_apply(struct store *s, struct commit_op *op)
{
    struct sweep_op *w = (struct sweep_op *)op;
    return s->ops->prune_inputs(s, w->jobs_cutoff_ms, w->unused_cutoff_ms, &w->deleted);
}

static void sweep_done(struct commit_op *op, int rc)
{
    struct sweep_op *w = (struct sweep_op *)op;
    if (rc)
        log_warn(MOD, "input sweep failed: %s", gpuq_strerror(rc));
    else if (w->deleted)
        log_info(MOD, "input sweep: %d upload(s) deleted", w->deleted);
    free(w);
    atomic_store(&sweeping, false);
}

void inputs_tick(struct head *h)
{
    int64_t now = clock_mono_ns();
    int64_t due = atomic_load(&next_sweep_ns);
    int interval_s = h->cfg.input_unused_s / 2;
    interval_s = interval_s < 1 ? 1 : interval_s > SWEEP_MAX_INTERVAL_S ? SWEEP_MAX_INTERVAL_S
                                                                        : interval_s;
    if (due == 0) { /* the first tick: the first sweep after one interval */
        atomic_store(&next_sweep_ns, now + interval_s * NS_PER_S);
        return;
    }
    if (now < due || atomic_exchange(&sweeping, true))
        return;
    atomic_store(&next_sweep_ns, now + interval_s * NS_PER_S);
    struct sweep_op *w = xcalloc(1, sizeof *w);
    w->op.apply = sweep_apply;
    w->op.done = sweep_done;
    w->h = h;
    int64_t wall = clock_wall_ms();
    w->jobs_cutoff_ms = wall - retention_ms(&h->cfg);
    w->unused_cutoff_ms = wall - (int64_t)h->cfg.input_unused_s * 1000;
    committer_submit(h->committer, &w->op);
}
