/* worker_tokens.c: worker token listing and revocation (worker_tokens.h). */
#include "head/worker_tokens.h"

#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/err.h"
#include "common/log.h"
#include "head/head.h"
#include "head/tenants.h"
#include "store/committer.h"

#define MOD "tokens"
#define TOKENS_MAX_LIST 4096 /* listed at most */

struct revoke_op {
    struct commit_op op;      /* first: the committer hands it back */
    int64_t id;
};

static int revoke_apply(struct store *s, struct commit_op *op)
{
    return s->ops->token_revoke(s, ((struct revoke_op *)op)->id);
}

int head_worker_tokens_list(struct head *h, struct token_rec **out)
{
    *out = xcalloc(TOKENS_MAX_LIST, sizeof **out);
    return tenants_tokens_list(h->tenants, *out, TOKENS_MAX_LIST);
}

static bool find_token(struct head *h, int64_t id, struct token_rec *out)
{
    struct token_rec *v;
    int n = head_worker_tokens_list(h, &v);
    bool found = false;
    for (int i = 0; i < n && !found; i++)
        if (v[i].id == id) {
            *out = v[i];
            found = true;
        }
    free(v);
    return found;
}

int head_worker_token_revoke(struct head *h, int64_t id, struct token_rec *out)
{
    memset(out, 0, sizeof *out);
    if (!find_token(h, id, out))
        return GPUQ_ENOENT;
    struct revoke_op o = {.op.apply = revoke_apply, .id = id};
    int rc = committer_run(h->committer, &o.op);
    if (rc)
        return rc;
    tenants_token_remove(h->tenants, id);
    log_info(MOD, "worker token %lld '%s' revoked", (long long)id, out->name);
    return 0;
}
