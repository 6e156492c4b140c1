/* backlog.h: what the head measures of its fleet for the backlog view (R7) and
 * the capacity budget (R13): it gathers the figures from the job table, the
 * registry and the settings, and leaves the arithmetic to core/capacity.h.
 * Head operations the API calls (like ops.h). */
#ifndef GPUQ_HEAD_BACKLOG_H
#define GPUQ_HEAD_BACKLOG_H

#include "core/capacity.h"
#include "head/head.h"

/* The backlog of unfinished jobs of tenant_id (< 0: every tenant). */
void head_backlog(struct head *h, int64_t tenant_id, struct backlog *out);

struct capacity_report {
    struct capacity_input in;
    struct capacity_plan plan;
    int gpus_registered;           /* GPUs registered now */
    int max_gpus_set;              /* 1: capacity.max_gpus set; 0: the registered count */
    char tenants[CAPACITY_MAX_TENANTS][REC_NAME_MAX]; /* names of in.weights[i] */
};
/* 0, or GPUQ_EINVAL when the settings make no plan (capacity_plan's reasons). */
int head_capacity(struct head *h, struct capacity_report *out);

#endif
