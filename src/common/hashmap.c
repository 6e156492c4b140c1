/* hashmap.c: linear-probing hash map with FNV-1a hashing and a 64-bit mix
 * (see hashmap.h). Short keys (<= 16 bytes) live inline in the slot. */
#include "common/hashmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

#define INLINE_KEY 16

enum slot_state { SLOT_EMPTY = 0, SLOT_LIVE = 1, SLOT_DEAD = 2 };

/* 32 bytes: maps with an entry per job (the scheduler's, admission's) hold
 * two to three slots a job, so each byte here counts (issue 20). The slot
 * keeps the hash's low 32 bits (what indexes and compares use; a table never
 * has 2^32 slots) and the key's length in 30 bits (keys are names and ids:
 * hashmap_put refuses a key of 1 GiB or more). */
#define KEY_MAX ((size_t)1 << 30)

struct hashmap_slot {
    void *val;
    union {
        char inl[INLINE_KEY];
        char *heap;
    } k;
    uint32_t hash;
    uint32_t klen : 30;
    uint32_t state : 2;
};
_Static_assert(sizeof(struct hashmap_slot) == 32, "a slot stays 32 bytes");

static const char *slot_key(const struct hashmap_slot *s)
{
    return s->klen <= INLINE_KEY ? s->k.inl : s->k.heap;
}

uint64_t hashmap_hash(const void *key, size_t klen)
{
    const unsigned char *p = key;
    uint64_t h = UINT64_C(1469598103934665603);
    for (size_t i = 0; i < klen; i++) {
        h ^= p[i];
        h *= UINT64_C(1099511628211);
    }
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    return h;
}

void hashmap_init(struct hashmap *m)
{
    memset(m, 0, sizeof(*m));
}

void hashmap_fini(struct hashmap *m)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].state == SLOT_LIVE && m->slots[i].klen > INLINE_KEY)
            free(m->slots[i].k.heap);
    free(m->slots);
    memset(m, 0, sizeof(*m));
}

static struct hashmap_slot *find(const struct hashmap *m, const void *key, size_t klen,
                                 uint32_t h)
{
    if (m->cap == 0)
        return NULL;
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        struct hashmap_slot *s = &m->slots[i];
        if (s->state == SLOT_EMPTY)
            return NULL;
        if (s->state == SLOT_LIVE && s->hash == h && s->klen == klen &&
            memcmp(slot_key(s), key, klen) == 0)
            return s;
    }
}

static void grow(struct hashmap *m)
{
    size_t ncap = m->cap ? m->cap : 16;
    while ((m->count + 1) * 4 >= ncap * 3)
        ncap *= 2;
    struct hashmap_slot *old = m->slots;
    size_t ocap = m->cap;
    m->slots = xcalloc(ncap, sizeof(*m->slots));
    m->cap = ncap;
    m->used = m->count;
    size_t mask = ncap - 1;
    for (size_t i = 0; i < ocap; i++) {
        if (old[i].state != SLOT_LIVE)
            continue;
        size_t j = old[i].hash & mask;
        while (m->slots[j].state != SLOT_EMPTY)
            j = (j + 1) & mask;
        m->slots[j] = old[i];
    }
    free(old);
}

void *hashmap_put(struct hashmap *m, const void *key, size_t klen, void *val)
{
    if (klen >= KEY_MAX) {
        fprintf(stderr, "gpuq: hashmap key of %zu bytes (limit %zu)\n", klen, KEY_MAX - 1);
        abort();
    }
    uint32_t h = (uint32_t)hashmap_hash(key, klen);
    struct hashmap_slot *s = find(m, key, klen, h);
    if (s) {
        void *prev = s->val;
        s->val = val;
        return prev;
    }
    if ((m->used + 1) * 4 >= m->cap * 3)
        grow(m);
    size_t mask = m->cap - 1;
    size_t i = h & mask;
    while (m->slots[i].state == SLOT_LIVE)
        i = (i + 1) & mask;
    s = &m->slots[i];
    if (s->state == SLOT_EMPTY)
        m->used++;
    s->state = SLOT_LIVE;
    s->hash = h;
    s->val = val;
    s->klen = (uint32_t)klen & (KEY_MAX - 1);
    if (klen <= INLINE_KEY) {
        memcpy(s->k.inl, key, klen);
    } else {
        s->k.heap = xmalloc(klen);
        memcpy(s->k.heap, key, klen);
    }
    m->count++;
    return NULL;
}

void *hashmap_get(const struct hashmap *m, const void *key, size_t klen)
{
    struct hashmap_slot *s = find(m, key, klen, (uint32_t)hashmap_hash(key, klen));
    return s ? s->val : NULL;
}

void *hashmap_del(struct hashmap *m, const void *key, size_t klen)
{
    struct hashmap_slot *s = find(m, key, klen, (uint32_t)hashmap_hash(key, klen));
    if (!s)
        return NULL;
    void *val = s->val;
    if (s->klen > INLINE_KEY)
        free(s->k.heap);
    s->state = SLOT_DEAD;
    s->val = NULL;
    m->count--;
    return val;
}

void *hashmap_put_str(struct hashmap *m, const char *key, void *val)
{
    return hashmap_put(m, key, strlen(key), val);
}

void *hashmap_get_str(const struct hashmap *m, const char *key)
{
    return hashmap_get(m, key, strlen(key));
}

void *hashmap_del_str(struct hashmap *m, const char *key)
{
    return hashmap_del(m, key, strlen(key));
}

void *hashmap_put_u64(struct hashmap *m, uint64_t key, void *val)
{
    return hashmap_put(m, &key, sizeof(key), val);
}

void *hashmap_get_u64(const struct hashmap *m, uint64_t key)
{
    return hashmap_get(m, &key, sizeof(key));
}

void *hashmap_del_u64(struct hashmap *m, uint64_t key)
{
    return hashmap_del(m, &key, sizeof(key));
}

bool hashmap_next(const struct hashmap *m, size_t *pos, const void **key, size_t *klen,
                  void **val)
{
    for (size_t i = *pos; i < m->cap; i++) {
        const struct hashmap_slot *s = &m->slots[i];
        if (s->state != SLOT_LIVE)
            continue;
        if (key)
            *key = slot_key(s);
        if (klen)
            *klen = s->klen;
        if (val)
            *val = s->val;
        *pos = i + 1;
        return true;
    }
    *pos = m->cap;
    return false;
}
