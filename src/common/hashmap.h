/* hashmap.h: an open-addressing hash map from byte-string keys to pointers.
 * The map copies keys and borrows values (the caller owns what values point
 * to). Invariant: count < cap * 3/4, cap is a power of two (or 0); deleted slots
 * are tombstones until the next resize. Not thread-safe. */
#ifndef GPUQ_HASHMAP_H
#define GPUQ_HASHMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hashmap_slot;

struct hashmap {
    struct hashmap_slot *slots;
    size_t cap;   /* slots allocated */
    size_t count; /* live entries */
    size_t used;  /* live + tombstones */
};

void hashmap_init(struct hashmap *m);
/* hashmap_fini frees the map's storage (keys), not the values. */
void hashmap_fini(struct hashmap *m);

/* hashmap_put inserts or replaces; returns the previous value or NULL. */
void *hashmap_put(struct hashmap *m, const void *key, size_t klen, void *val);
void *hashmap_get(const struct hashmap *m, const void *key, size_t klen);
/* hashmap_del removes the key; returns its value or NULL when absent. */
void *hashmap_del(struct hashmap *m, const void *key, size_t klen);

/* Convenience for NUL-terminated string keys and 64-bit integer keys. */
void *hashmap_put_str(struct hashmap *m, const char *key, void *val);
void *hashmap_get_str(const struct hashmap *m, const char *key);
void *hashmap_del_str(struct hashmap *m, const char *key);
void *hashmap_put_u64(struct hashmap *m, uint64_t key, void *val);
void *hashmap_get_u64(const struct hashmap *m, uint64_t key);
void *hashmap_del_u64(struct hashmap *m, uint64_t key);

/* hashmap_next iterates: start with *pos = 0; returns false at the end. The
 * map must not be modified during iteration. */
bool hashmap_next(const struct hashmap *m, size_t *pos, const void **key, size_t *klen,
                  void **val);

uint64_t hashmap_hash(const void *key, size_t klen);

#endif
