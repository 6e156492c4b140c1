/* ops_observe.c: the observing operations of ops_observe.h — authorization of
 * a scrape, and the tenant scope of a trace (the same as every job read). */
#include "head/ops_observe.h"

#include "head/metrics.h"
#include "head/ops.h"
#include "head/trace.h"

bool head_metrics(struct head *h, const char *bearer, struct buf *out)
{
    if (!metrics_authorized(h, bearer))
        return false;
    metrics_render(h, out);
    return true;
}

int head_job_trace(struct head *h, int64_t tenant_id, uint64_t id, struct buf *out)
{
    struct job_rec r;
    int rc = head_get(h, tenant_id, id, NULL, &r);
    if (rc)
        return rc;
    trace_render(&r, out);
    job_rec_free_fields(&r);
    return 0;
}
