/* vram_mgr.c: a GPU's resident models and eviction planning (see vram_mgr.h). */
#include "agent/vram_mgr.h"

#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "core/vram.h"

void vram_mgr_init(struct vram_mgr *m, int64_t total_mb, int64_t reserve_mb)
{
    memset(m, 0, sizeof *m);
    m->total_mb = total_mb;
    m->reserve_mb = reserve_mb;
}

void vram_mgr_clear(struct vram_mgr *m)
{
    m->n = 0;
}

int vram_mgr_find(const struct vram_mgr *m, const char *name)
{
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->e[i].name, name) == 0)
            return i;
    return -1;
}

int64_t vram_mgr_used(const struct vram_mgr *m)
{
    int64_t used = 0;
    for (int i = 0; i < m->n; i++)
        used += m->e[i].vram_mb;
    return used;
}

int64_t vram_mgr_free(const struct vram_mgr *m)
{
    int64_t f = m->total_mb - m->reserve_mb - vram_mgr_used(m);
    return f < 0 ? 0 : f;
}

static int plan(const struct vram_mgr *m, int64_t need_mb, bool busy_stays, int *victims,
                int *nvictims)
{
    struct vram_model vm[AGENT_MAX_MODELS];
    for (int i = 0; i < m->n; i++) {
        vm[i].name = m->e[i].name;
        vm[i].vram_mb = m->e[i].vram_mb;
        vm[i].cls = m->e[i].cls;
        vm[i].pinned = m->e[i].pinned || (busy_stays && m->e[i].in_use > 0);
        vm[i].last_used_ns = m->e[i].last_used_ns;
    }
    return vram_plan_evictions(vm, m->n, vram_mgr_free(m), need_mb, victims, nvictims);
}

int vram_mgr_plan(const struct vram_mgr *m, int64_t need_mb, int *victims, int *nvictims)
{
    *nvictims = 0;
    int rc = plan(m, need_mb, true, victims, nvictims);
    if (rc != GPUQ_ENOSPC)
        return rc;
    int tmp[AGENT_MAX_MODELS], ntmp = 0;
    if (plan(m, need_mb, false, tmp, &ntmp) == 0)
        return GPUQ_EAGAIN;
    return GPUQ_ENOSPC;
}

int vram_mgr_add(struct vram_mgr *m, const char *name, int64_t vram_mb, enum model_class cls,
                 bool pinned, int64_t now_ns)
{
    int i = vram_mgr_find(m, name);
    if (i < 0) {
        if (m->n >= AGENT_MAX_MODELS)
            return GPUQ_ENOSPC;
        i = m->n++;
        memset(&m->e[i], 0, sizeof m->e[i]);
        snprintf(m->e[i].name, sizeof m->e[i].name, "%s", name);
    }
    m->e[i].vram_mb = vram_mb;
    m->e[i].cls = cls;
    m->e[i].pinned = pinned;
    m->e[i].last_used_ns = now_ns;
    return 0;
}

void vram_mgr_remove(struct vram_mgr *m, int idx)
{
    if (idx < 0 || idx >= m->n)
        return;
    memmove(&m->e[idx], &m->e[idx + 1], (size_t)(m->n - idx - 1) * sizeof m->e[0]);
    m->n--;
}
