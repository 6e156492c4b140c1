/* vram_mgr.h: one GPU's resident models as the agent accounts them (R24).
 * Decides what to evict before a load with the core's priority-weighted LRU
 * policy (core/vram.h); pinned models stay, and so do models a running job is
 * using. Counts model-cache hits and misses. Not thread-safe: the worker's
 * controller owns it (others read copies under the worker lock).
 * Invariant: n <= AGENT_MAX_MODELS; names unique; sum of vram_mb <= what was
 * planned to fit in total_mb - reserve_mb. */
#ifndef GPUQ_AGENT_VRAM_MGR_H
#define GPUQ_AGENT_VRAM_MGR_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/config.h"
#include "core/types.h"

struct vram_entry {
    char name[AGENT_NAME_MAX];
    int64_t vram_mb;
    enum model_class cls;
    bool pinned;
    int64_t last_used_ns;
    int in_use; /* running jobs using it */
};

struct vram_mgr {
    int64_t total_mb, reserve_mb;
    struct vram_entry e[AGENT_MAX_MODELS];
    int n;
    uint64_t hits, misses;
};

void vram_mgr_init(struct vram_mgr *m, int64_t total_mb, int64_t reserve_mb);
/* vram_mgr_clear forgets every resident model (the runtime died). */
void vram_mgr_clear(struct vram_mgr *m);
int vram_mgr_find(const struct vram_mgr *m, const char *name);
int64_t vram_mgr_used(const struct vram_mgr *m);
int64_t vram_mgr_free(const struct vram_mgr *m);
/* vram_mgr_plan: which resident models (indexes, eviction order) to unload so
 * that need_mb fits. 0; GPUQ_EAGAIN when it would fit once running jobs release
 * their models; GPUQ_ENOSPC when it cannot fit beside the pinned models. */
int vram_mgr_plan(const struct vram_mgr *m, int64_t need_mb, int *victims, int *nvictims);
/* vram_mgr_add records a resident model (replaces one of the same name). */
int vram_mgr_add(struct vram_mgr *m, const char *name, int64_t vram_mb, enum model_class cls,
                 bool pinned, int64_t now_ns);
/* vram_mgr_remove drops entry idx (indexes above it shift down). */
void vram_mgr_remove(struct vram_mgr *m, int idx);

#endif
