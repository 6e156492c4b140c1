/* records.c: names of job states, phases, lanes and tiers, their parsers,
 * and deep copies of job records. */
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/err.h"
#include "store/records.h"
#include "store/store.h"

_Static_assert(JOB_DEAD == 5 && JOB_EXPIRED == 6 && JOB_NSTATES == LC_EXPIRED + 1,
               "job states are the lifecycle's");
static const char *const phase_names[] = {"", "assigned", "loading", "generating"};
static const char *const lane_names[] = {"interactive", "batch"};
static const char *const tier_names[] = {"paid", "free"};

const char *job_state_name(enum job_state s)
{
    return lc_state_name((enum lc_state)s);
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
    enum lc_state v;
    int rc = lc_state_parse(s, &v);
    if (!rc)
        *out = (enum job_state)v;
    return rc;
}

bool job_state_terminal(enum job_state s)
{
    return lc_terminal((enum lc_state)s);
}

void job_rec_free_fields(struct job_rec *j)
{
    free(j->params_json);
    j->params_json = NULL;
    free(j->attempts);
    j->attempts = NULL;
    j->nattempts = 0;
}

void job_rec_copy(struct job_rec *dst, const struct job_rec *src)
{
    *dst = *src;
    dst->params_json = xstrdup(src->params_json ? src->params_json : "{}");
    dst->attempts = NULL;
    if (src->nattempts > 0) {
        dst->attempts = xmalloc((size_t)src->nattempts * sizeof *dst->attempts);
        memcpy(dst->attempts, src->attempts, (size_t)src->nattempts * sizeof *dst->attempts);
    }
}

void job_rec_add_attempt(struct job_rec *j, const struct lc_attempt *a)
{
    j->attempts = xrealloc(j->attempts, (size_t)(j->nattempts + 1) * sizeof *j->attempts);
    j->attempts[j->nattempts++] = *a;
}

enum lc_outcome job_outcome_parse(const char *s)
{
    for (int o = LC_OUT_RUNNING; o <= LC_OUT_PREEMPTED; o++)
        if (!strcmp(s, lc_outcome_name((enum lc_outcome)o)))
            return (enum lc_outcome)o;
    return LC_OUT_LOST;
}
