/* vram.h: the VRAM eviction policy (R24), shared by the agent's VRAM manager
 * and the scheduler's cold-GPU scoring so both agree on what a load costs.
 * Policy: priority-weighted LRU — unpinned utility models are evicted before
 * generation models, then least recently used first; pinned models stay. Pure. */
#ifndef GPUQ_CORE_VRAM_H
#define GPUQ_CORE_VRAM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/types.h"

/* One resident model as the policy sees it. name is borrowed (may be NULL). */
struct vram_model {
    const char *name;
    int64_t vram_mb;
    enum model_class cls;
    bool pinned;
    int64_t last_used_ns; /* caller's monotonic clock; 0 = unknown (oldest) */
};

/* vram_plan_evictions: which resident models to evict so that need_mb fits in
 * free_mb + evicted. Victims in eviction order: unpinned utility models before
 * generation models, then least recently used (ties: lower index first).
 * Writes indexes into victims (capacity n) and the count to *nvictims.
 * Returns 0, or GPUQ_ENOSPC if it cannot fit even after evicting every unpinned
 * model (then *nvictims = 0); GPUQ_EINVAL on bad arguments. Evicts nothing when
 * the model already fits. */
int vram_plan_evictions(const struct vram_model *models, int n, int64_t free_mb, int64_t need_mb,
                        int *victims, int *nvictims);

/* vram_evicts_before: true when model a is evicted before model b by the policy
 * (both unpinned). Exposed so callers can order their own lists the same way. */
bool vram_evicts_before(const struct vram_model *a, const struct vram_model *b);

#endif
