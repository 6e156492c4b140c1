/* stubs_routes.c: the head operations and HTTP calls api/routes.c links
 * against but admission never reaches (handlers only). fuzz_routes runs
 * admission alone, so each of these aborts: reaching one is a harness bug.
 * Deliberately without the real headers: only the symbols matter here. */
#include <stdlib.h>

#define UNREACHED(name)                                                                        \
    void name(void);                                                                           \
    void name(void)                                                                            \
    {                                                                                          \
        abort();                                                                               \
    }

UNREACHED(fleet_api_asset)
UNREACHED(fleet_api_events)
UNREACHED(fleet_api_get)
UNREACHED(head_admit)
UNREACHED(head_admit_batch)
UNREACHED(head_cancel)
UNREACHED(head_check_servable)
UNREACHED(head_complete)
UNREACHED(head_fail)
UNREACHED(head_get)
UNREACHED(head_job_annotate)
UNREACHED(head_job_copy)
UNREACHED(head_job_cost)
UNREACHED(head_job_promote)
UNREACHED(head_job_trace)
UNREACHED(head_jobs_list)
UNREACHED(head_metrics)
UNREACHED(head_pause)
UNREACHED(head_pauses)
UNREACHED(head_progress)
UNREACHED(head_readiness)
UNREACHED(head_resubmit)
UNREACHED(head_result_read)
UNREACHED(head_submit)
UNREACHED(head_tenant_add)
UNREACHED(head_tenant_by_name)
UNREACHED(head_tenant_change)
UNREACHED(head_tenant_name)
UNREACHED(head_tenants_list)
UNREACHED(head_unwatch)
UNREACHED(head_watch)
UNREACHED(head_worker_deregister)
UNREACHED(head_worker_drain)
UNREACHED(head_worker_heartbeat)
UNREACHED(head_worker_poll)
UNREACHED(head_worker_register)
UNREACHED(head_worker_token_add)
UNREACHED(head_worker_undrain)
UNREACHED(head_workers_list)
UNREACHED(http_body)
UNREACHED(http_defer)
UNREACHED(http_req_hold)
UNREACHED(http_req_release)
UNREACHED(http_resume)
UNREACHED(http_stream_wake)
UNREACHED(inputs_check)
UNREACHED(inputs_read)
UNREACHED(inputs_upload)
UNREACHED(name)
UNREACHED(route_backlog_get)
UNREACHED(route_batch_delete)
UNREACHED(route_batch_get)
UNREACHED(route_batch_list)
UNREACHED(route_batch_post)
UNREACHED(route_capacity_get)
