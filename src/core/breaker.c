/* breaker.c: the per-GPU circuit breaker behind breaker.h — counts the GPU's
 * own failures in a sliding window, quarantines it (OPEN) for a cool-down,
 * lets one probe job through (HALF_OPEN), and closes again on the probe's
 * success or reopens for twice as long on its failure. Pure. */
#include "core/breaker.h"

#include <stdio.h>
#include <string.h>

#define NS_PER_S 1000000000LL

void breaker_policy_defaults(struct breaker_policy *p)
{
    memset(p, 0, sizeof(*p));
    p->failures = 3;
    p->window_ns = 60 * NS_PER_S;
    p->cooldown_ns = 60 * NS_PER_S;
    p->max_cooldown_ns = 15 * 60 * NS_PER_S;
    p->window_attempts = 10;
}

void breaker_init(struct breaker *b)
{
    memset(b, 0, sizeof(*b));
    b->state = BREAKER_CLOSED;
    snprintf(b->reason, sizeof(b->reason), "closed: no recent failures");
}

const char *breaker_state_name(enum breaker_state s)
{
    switch (s) {
    case BREAKER_CLOSED: return "closed";
    case BREAKER_OPEN: return "open";
    case BREAKER_HALF_OPEN: return "half_open";
    }
    return "unknown";
}

/* Whether error_class (NULL: none) is one of the n classes. */
static bool class_in(const char *error_class, const char *const *classes, size_t n)
{
    for (size_t i = 0; error_class && i < n; i++)
        if (strcmp(error_class, classes[i]) == 0)
            return true;
    return false;
}

bool breaker_counts(const char *error_class)
{
    static const char *const gpu_faults[] = {"oom", "cuda", "crash", "hang", "qc", "lease", "lost"};
    return class_in(error_class, gpu_faults, sizeof(gpu_faults) / sizeof(gpu_faults[0]));
}

bool breaker_restarts(const char *error_class)
{
    static const char *const restarting[] = {"crash", "hang", "oom", "cuda"};
    return class_in(error_class, restarting, sizeof(restarting) / sizeof(restarting[0]));
}

static int64_t first_cooldown(const struct breaker_policy *p)
{
    return p->cooldown_ns > 0 ? p->cooldown_ns : 60 * NS_PER_S;
}

static int64_t max_cooldown(const struct breaker_policy *p)
{
    int64_t m = p->max_cooldown_ns > 0 ? p->max_cooldown_ns : 15 * 60 * NS_PER_S;
    return m < first_cooldown(p) ? first_cooldown(p) : m;
}

/* Drops failures older than the window. */
static void window_trim(const struct breaker_policy *p, struct breaker *b, int64_t now_ns)
{
    int k = 0;
    while (k < b->nfail && b->fail_ns[k] <= now_ns - p->window_ns)
        k++;
    if (k > 0) {
        memmove(b->fail_ns, b->fail_ns + k, (size_t)(b->nfail - k) * sizeof(b->fail_ns[0]));
        b->nfail -= k;
    }
}

static void window_add(struct breaker *b, int64_t now_ns)
{
    if (b->nfail == BREAKER_MAX_WINDOW) {
        memmove(b->fail_ns, b->fail_ns + 1, (size_t)(b->nfail - 1) * sizeof(b->fail_ns[0]));
        b->nfail--;
    }
    /* Keep ascending even if a caller's clock steps back. */
    if (b->nfail > 0 && now_ns < b->fail_ns[b->nfail - 1])
        now_ns = b->fail_ns[b->nfail - 1];
    b->fail_ns[b->nfail++] = now_ns;
}

/* Remembers one counted attempt's outcome; returns the failures among the
 * last `n` remembered (n clamped to BREAKER_MAX_ATTEMPTS). */
static int attempts_add(struct breaker *b, bool failed, int n)
{
    b->outcomes = (b->outcomes << 1) | (failed ? 1u : 0u);
    if (b->nattempts < BREAKER_MAX_ATTEMPTS)
        b->nattempts++;
    if (n > b->nattempts)
        n = b->nattempts;
    uint64_t mask = n >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1);
    uint64_t v = b->outcomes & mask;
    int c = 0;
    while (v) {
        v &= v - 1;
        c++;
    }
    return c;
}

static void open_for(struct breaker *b, int64_t cooldown_ns, int64_t now_ns)
{
    b->state = BREAKER_OPEN;
    b->cooldown_ns = cooldown_ns;
    b->open_until_ns = now_ns + cooldown_ns;
    b->probe_inflight = false;
    b->nfail = 0;
    b->outcomes = 0;
    b->nattempts = 0;
    b->trips++;
}

enum breaker_event breaker_record(const struct breaker_policy *p, struct breaker *b, bool ok,
                                  const char *error_class, int64_t now_ns)
{
    bool counts = !ok && breaker_counts(error_class);
    if (!ok && breaker_restarts(error_class))
        b->restart_ns = now_ns;
    switch (b->state) {
    case BREAKER_CLOSED: {
        if (p->failures <= 0 || (!ok && !counts))
            return BREAKER_EV_NONE; /* off, or the caller's fault: says nothing of the GPU */
        int n = p->window_attempts > BREAKER_MAX_ATTEMPTS ? BREAKER_MAX_ATTEMPTS
                                                          : p->window_attempts;
        int recent = attempts_add(b, counts, n > 0 ? n : 1);
        if (!counts)
            return BREAKER_EV_NONE;
        window_trim(p, b, now_ns);
        window_add(b, now_ns);
        bool by_time = b->nfail >= p->failures;
        bool by_count = n > 0 && recent >= p->failures;
        if (!by_time && !by_count)
            return BREAKER_EV_NONE;
        open_for(b, first_cooldown(p), now_ns);
        if (by_time)
            snprintf(b->reason, sizeof(b->reason),
                     "quarantined: %d failures within %.0f s (last: %s); cool-down %.0f s",
                     p->failures, (double)p->window_ns / NS_PER_S, error_class,
                     (double)b->cooldown_ns / NS_PER_S);
        else
            snprintf(b->reason, sizeof(b->reason),
                     "quarantined: %d of the last %d attempts failed (last: %s); "
                     "cool-down %.0f s",
                     recent, n, error_class, (double)b->cooldown_ns / NS_PER_S);
        return BREAKER_EV_OPENED;
    }
    case BREAKER_HALF_OPEN:
        if (ok) {
            b->state = BREAKER_CLOSED;
            b->probe_inflight = false;
            b->nfail = 0;
            b->outcomes = 0;
            b->nattempts = 0;
            b->cooldown_ns = 0;
            b->open_until_ns = 0;
            snprintf(b->reason, sizeof(b->reason), "recovered: the probe job succeeded");
            return BREAKER_EV_CLOSED;
        }
        if (!counts) {
            /* Not the GPU's fault: the probe says nothing; allow another. */
            b->probe_inflight = false;
            return BREAKER_EV_NONE;
        }
        {
            int64_t next = b->cooldown_ns > 0 ? b->cooldown_ns * 2 : first_cooldown(p);
            if (next > max_cooldown(p))
                next = max_cooldown(p);
            open_for(b, next, now_ns);
            snprintf(b->reason, sizeof(b->reason),
                     "quarantined again: the probe job failed (%s); cool-down %.0f s",
                     error_class, (double)b->cooldown_ns / NS_PER_S);
        }
        return BREAKER_EV_OPENED;
    case BREAKER_OPEN:
        return BREAKER_EV_NONE; /* attempts started before the quarantine ending now */
    }
    return BREAKER_EV_NONE;
}

enum breaker_event breaker_tick(const struct breaker_policy *p, struct breaker *b,
                                int64_t now_ns)
{
    (void)p;
    if (b->state != BREAKER_OPEN || now_ns < b->open_until_ns)
        return BREAKER_EV_NONE;
    b->state = BREAKER_HALF_OPEN;
    b->probe_inflight = false;
    snprintf(b->reason, sizeof(b->reason),
             "probing: cool-down of %.0f s over, one probe job allowed",
             (double)b->cooldown_ns / NS_PER_S);
    return BREAKER_EV_PROBING;
}

void breaker_assigned(struct breaker *b)
{
    if (b->state == BREAKER_HALF_OPEN)
        b->probe_inflight = true;
}

void breaker_apply(struct breaker *b, struct worker_info *w)
{
    switch (b->state) {
    case BREAKER_CLOSED:
        break;
    case BREAKER_OPEN:
        w->healthy = false;
        break;
    case BREAKER_HALF_OPEN:
        w->concurrency = 1;
        w->ahead = 0; /* one probe, nothing held behind it */
        if (b->probe_inflight)
            w->draining = true;
        break;
    }
    if (b->restart_ns > w->reported_ns)
        w->draining = true;
    else
        b->restart_ns = 0;
}

bool breaker_awaits_report(const struct breaker *b)
{
    return b->restart_ns != 0;
}

int64_t breaker_next_due_ns(const struct breaker *b)
{
    return b->state == BREAKER_OPEN ? b->open_until_ns : 0;
}
