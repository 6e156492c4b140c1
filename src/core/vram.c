/* vram.c: priority-weighted LRU eviction planning (see vram.h). Quadratic in the
 * number of resident models, which is bounded by a GPU's handful of models. */
#include "core/vram.h"

#include "common/err.h"

bool vram_evicts_before(const struct vram_model *a, const struct vram_model *b)
{
    /* Utility (1) before generation (0): higher class value goes first. */
    if (a->cls != b->cls)
        return a->cls == MODEL_UTILITY;
    return a->last_used_ns < b->last_used_ns;
}

int vram_plan_evictions(const struct vram_model *models, int n, int64_t free_mb, int64_t need_mb,
                        int *victims, int *nvictims)
{
    if (!nvictims || n < 0 || (n > 0 && (!models || !victims)) || need_mb < 0)
        return GPUQ_EINVAL;
    *nvictims = 0;
    if (need_mb <= free_mb)
        return 0;
    int64_t avail = free_mb;
    for (int i = 0; i < n; i++)
        if (!models[i].pinned && models[i].vram_mb > 0)
            avail += models[i].vram_mb;
    if (avail < need_mb)
        return GPUQ_ENOSPC;

    /* Repeatedly pick the first victim by policy among those not yet chosen. */
    int count = 0;
    int64_t have = free_mb;
    while (have < need_mb) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            if (models[i].pinned)
                continue;
            bool taken = false;
            for (int k = 0; k < count; k++)
                if (victims[k] == i) {
                    taken = true;
                    break;
                }
            if (taken)
                continue;
            if (best < 0 || vram_evicts_before(&models[i], &models[best]))
                best = i;
        }
        if (best < 0) /* cannot happen: avail >= need_mb */
            return GPUQ_ENOSPC;
        victims[count++] = best;
        if (models[best].vram_mb > 0)
            have += models[best].vram_mb;
    }
    *nvictims = count;
    return 0;
}
