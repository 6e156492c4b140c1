/* records.c: names of job states, phases, lanes and tiers, and their parsers. */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "store/records.h"
#include "store/store.h"

static const char *const state_names[] = {"queued", "running", "succeeded", "failed", "cancelled"};
static const char *const phase_names[] = {"", "assigned", "loading", "generating"};
static const char *const lane_names[] = {"interactive", "batch"};
static const char *const tier_names[] = {"paid", "free"};

const char *job_state_name(enum job_state s)
{
    return (unsigned)s < 5 ? state_names[s] : "unknown";
}

const char *job_phase_name(enum job_phase p)
{
    return (unsigned)p < 4 ? phase_names[p] : "";
}

const char *job_lane_name(enum job_lane l)
{
    return (unsigned)l < 2 ? lane_names[l] : "unknown";
}

const char *job_tier_name(enum job_tier t)
{
    return (unsigned)t < 2 ? tier_names[t] : "unknown";
}

static int parse_name(const char *s, const char *const *names, int n, int *out)
{
    for (int i = 0; i < n; i++) {
        if (!strcmp(s, names[i])) {
            *out = i;
            return 0;
        }
    }
    return GPUQ_EINVAL;
}

int job_lane_parse(const char *s, enum job_lane *out)
{
    int v;
    int rc = parse_name(s, lane_names, 2, &v);
    if (!rc)
        *out = (enum job_lane)v;
    return rc;
}

int job_tier_parse(const char *s, enum job_tier *out)
{
    int v;
    int rc = parse_name(s, tier_names, 2, &v);
    if (!rc)
        *out = (enum job_tier)v;
    return rc;
}

int job_state_parse(const char *s, enum job_state *out)
{
    int v;
    int rc = parse_name(s, state_names, 5, &v);
    if (!rc)
        *out = (enum job_state)v;
    return rc;
}

bool job_state_terminal(enum job_state s)
{
    return s == JOB_SUCCEEDED || s == JOB_FAILED || s == JOB_CANCELLED;
}

void job_rec_free_fields(struct job_rec *j)
{
    free(j->params_json);
    j->params_json = NULL;
}
