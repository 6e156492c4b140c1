/* catalog.c: the served (capability, model) pairs behind catalog.h — an
 * ordered array of pairs with a hash index on "cap\x1fmodel" and one on the
 * capability alone. */
#include "core/catalog.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/err.h"
#include "common/hashmap.h"
#include "core/sched.h"

struct pair {
    char cap[SCHED_NAME_MAX];
    char model[SCHED_NAME_MAX];
};

/* Invariant: pairs[0..n) are distinct and each has a non-empty model; by_pair
 * maps "cap\x1fmodel" of each to its index + 1; caps holds every capability
 * added (with or without a model). */
struct catalog {
    struct pair *pairs;
    int n, cap;
    struct hashmap by_pair;
    struct hashmap caps;
};

struct catalog *catalog_create(void)
{
    struct catalog *c = xcalloc(1, sizeof(*c));
    hashmap_init(&c->by_pair);
    hashmap_init(&c->caps);
    return c;
}

void catalog_destroy(struct catalog *c)
{
    if (!c)
        return;
    hashmap_fini(&c->by_pair);
    hashmap_fini(&c->caps);
    free(c->pairs);
    free(c);
}

static void cut(char *dst, const char *src)
{
    snprintf(dst, SCHED_NAME_MAX, "%s", src ? src : "");
}

/* The index key of a pair; SCHED_NAME_MAX * 2 always fits both names. */
static size_t pair_key(char *key, const char *cap, const char *model)
{
    char a[SCHED_NAME_MAX], b[SCHED_NAME_MAX];
    cut(a, cap);
    cut(b, model);
    return (size_t)snprintf(key, 2 * SCHED_NAME_MAX, "%s\x1f%s", a, b);
}

bool catalog_add(struct catalog *c, const char *cap, const char *model)
{
    if (!c || !cap || !cap[0])
        return false;
    char name[SCHED_NAME_MAX];
    cut(name, cap);
    bool new_cap = !hashmap_get_str(&c->caps, name);
    if (new_cap)
        hashmap_put_str(&c->caps, name, (void *)(intptr_t)1);
    if (!model || !model[0])
        return new_cap;
    char key[2 * SCHED_NAME_MAX];
    size_t klen = pair_key(key, cap, model);
    if (hashmap_get(&c->by_pair, key, klen))
        return false;
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 8;
        c->pairs = xrealloc(c->pairs, (size_t)c->cap * sizeof(*c->pairs));
    }
    cut(c->pairs[c->n].cap, cap);
    cut(c->pairs[c->n].model, model);
    c->n++;
    hashmap_put(&c->by_pair, key, klen, (void *)(intptr_t)c->n);
    return true;
}

bool catalog_has_cap(const struct catalog *c, const char *cap)
{
    if (!c || !cap || !cap[0])
        return false;
    char name[SCHED_NAME_MAX];
    cut(name, cap);
    return hashmap_get_str(&c->caps, name) != NULL;
}

bool catalog_serves(const struct catalog *c, const char *cap, const char *model)
{
    if (!model || !model[0])
        return catalog_has_cap(c, cap);
    if (!c || !cap || !cap[0])
        return false;
    char key[2 * SCHED_NAME_MAX];
    size_t klen = pair_key(key, cap, model);
    return hashmap_get(&c->by_pair, key, klen) != NULL;
}

bool catalog_why_unserved(const struct catalog *c, const char *cap, const char *model, char *why,
                          size_t size)
{
    if (catalog_serves(c, cap, model))
        return false;
    if (c->n == 0)
        snprintf(why, size, "no worker has registered yet");
    else
        snprintf(why, size, "no worker serves model %s for %s", model, cap);
    return true;
}

int catalog_admit(const struct catalog *c, const char *cap, const char *model,
                  bool allow_unserved, char *msg, size_t size)
{
    if (c->n == 0 || allow_unserved || catalog_serves(c, cap, model))
        return 0;
    snprintf(msg, size, "model: no worker serves model %s for %s", model, cap);
    return GPUQ_ENOENT;
}

int catalog_list(const struct catalog *c, void (*fn)(const char *cap, const char *model, void *arg),
                 void *arg)
{
    if (!c)
        return 0;
    for (int i = 0; fn && i < c->n; i++)
        fn(c->pairs[i].cap, c->pairs[i].model, arg);
    return c->n;
}
