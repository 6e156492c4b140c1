/* tenants.c: the in-memory tenant and worker-token tables (see tenants.h). */
#include "head/tenants.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/token.h"

struct tenants {
    pthread_rwlock_t lock;
    struct tenant_rec *v;
    int n, cap;
    struct token_rec *tok;
    int ntok, captok;
};

struct tenants *tenants_create(void)
{
    struct tenants *t = xcalloc(1, sizeof *t);
    pthread_rwlock_init(&t->lock, NULL);
    return t;
}

void tenants_destroy(struct tenants *t)
{
    if (!t)
        return;
    free(t->v);
    free(t->tok);
    pthread_rwlock_destroy(&t->lock);
    free(t);
}

void tenants_add(struct tenants *t, const struct tenant_rec *rec)
{
    pthread_rwlock_wrlock(&t->lock);
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 16;
        t->v = xrealloc(t->v, (size_t)t->cap * sizeof *t->v);
    }
    t->v[t->n++] = *rec;
    pthread_rwlock_unlock(&t->lock);
}

void tenants_add_token(struct tenants *t, const struct token_rec *rec)
{
    pthread_rwlock_wrlock(&t->lock);
    if (t->ntok == t->captok) {
        t->captok = t->captok ? t->captok * 2 : 16;
        t->tok = xrealloc(t->tok, (size_t)t->captok * sizeof *t->tok);
    }
    t->tok[t->ntok++] = *rec;
    pthread_rwlock_unlock(&t->lock);
}

void tenants_replace(struct tenants *t, const struct tenant_rec *rec)
{
    bool removed = strncmp(rec->name, TENANT_REMOVED, strlen(TENANT_REMOVED)) == 0;
    pthread_rwlock_wrlock(&t->lock);
    for (int i = 0; i < t->n; i++) {
        if (t->v[i].id != rec->id)
            continue;
        if (removed)
            t->v[i] = t->v[--t->n];
        else
            t->v[i] = *rec;
        break;
    }
    pthread_rwlock_unlock(&t->lock);
}

static void load_tenant(void *arg, const struct tenant_rec *rec)
{
    if (strncmp(rec->name, TENANT_REMOVED, strlen(TENANT_REMOVED)) != 0)
        tenants_add(arg, rec);
}

static void load_token(void *arg, const struct token_rec *rec)
{
    tenants_add_token(arg, rec);
}

int tenants_load(struct tenants *t, struct store *s)
{
    int rc = s->ops->load_tenants(s, load_tenant, t);
    return rc ? rc : s->ops->load_tokens(s, load_token, t);
}

/* Finds a tenant by a predicate; copies it out. */
static bool find(struct tenants *t, bool (*match)(const struct tenant_rec *, const void *),
                 const void *arg, struct tenant_rec *out)
{
    bool found = false;
    pthread_rwlock_rdlock(&t->lock);
    for (int i = 0; i < t->n && !found; i++) {
        if (match(&t->v[i], arg)) {
            if (out)
                *out = t->v[i];
            found = true;
        }
    }
    pthread_rwlock_unlock(&t->lock);
    return found;
}

static bool match_hash(const struct tenant_rec *r, const void *arg)
{
    return token_equal(r->key_hash, arg);
}

static bool match_name(const struct tenant_rec *r, const void *arg)
{
    return !strcmp(r->name, arg);
}

static bool match_id(const struct tenant_rec *r, const void *arg)
{
    return r->id == *(const int64_t *)arg;
}

bool tenants_by_hash(struct tenants *t, const char *key_hash, struct tenant_rec *out)
{
    return find(t, match_hash, key_hash, out);
}

bool tenants_by_name(struct tenants *t, const char *name, struct tenant_rec *out)
{
    return find(t, match_name, name, out);
}

bool tenants_by_id(struct tenants *t, int64_t id, struct tenant_rec *out)
{
    return find(t, match_id, &id, out);
}

bool tenants_token_ok(struct tenants *t, const char *token_hash)
{
    bool ok = false;
    pthread_rwlock_rdlock(&t->lock);
    for (int i = 0; i < t->ntok && !ok; i++)
        ok = token_equal(t->tok[i].token_hash, token_hash);
    pthread_rwlock_unlock(&t->lock);
    return ok;
}

int tenants_tokens_list(struct tenants *t, struct token_rec *out, int max)
{
    pthread_rwlock_rdlock(&t->lock);
    int n = t->ntok < max ? t->ntok : max;
    if (n > 0)
        memcpy(out, t->tok, (size_t)n * sizeof *out);
    pthread_rwlock_unlock(&t->lock);
    return n;
}

bool tenants_token_remove(struct tenants *t, int64_t id)
{
    bool found = false;
    pthread_rwlock_wrlock(&t->lock);
    for (int i = 0; i < t->ntok; i++) {
        if (t->tok[i].id != id)
            continue;
        memmove(&t->tok[i], &t->tok[i + 1], (size_t)(t->ntok - i - 1) * sizeof *t->tok);
        t->ntok--;
        found = true;
        break;
    }
    pthread_rwlock_unlock(&t->lock);
    return found;
}

int tenants_list(struct tenants *t, struct tenant_rec *out, int max)
{
    pthread_rwlock_rdlock(&t->lock);
    int n = t->n < max ? t->n : max;
    if (n > 0) /* t->v is NULL while there are none */
        memcpy(out, t->v, (size_t)n * sizeof *out);
    pthread_rwlock_unlock(&t->lock);
    return n;
}
