/* test_breaker.c: the per-GPU circuit breaker with scripted time — it opens
 * after N counted failures within the window, old failures fall out of the
 * window, the caller's faults do not count, one probe at a time when
 * half-open, a failed probe doubles the cool-down up to the ceiling, a
 * successful one closes it, and what the scheduler sees (breaker_apply);
 * the attempt-count rule (failures of the last window_attempts attempts)
 * opens it whatever the pace of the failures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "core/breaker.h"

#define SEC 1000000000LL

static struct breaker_policy pol(void)
{
    struct breaker_policy p;
    breaker_policy_defaults(&p);
    return p;
}

static void test_defaults_and_counting_classes(void **state)
{
    (void)state;
    struct breaker_policy p = pol();
    assert_int_equal(p.failures, 3);
    assert_true(p.window_ns == 60 * SEC);
    assert_true(p.cooldown_ns == 60 * SEC);
    assert_true(p.max_cooldown_ns == 900 * SEC);
    assert_int_equal(p.window_attempts, 10);
    const char *gpu[] = {"oom", "cuda", "crash", "hang", "qc", "lease", "lost"};
    for (size_t i = 0; i < sizeof(gpu) / sizeof(gpu[0]); i++)
        assert_true(breaker_counts(gpu[i]));
    assert_false(breaker_counts("bad_input"));
    assert_false(breaker_counts("cancelled"));
    assert_false(breaker_counts("timeout"));
    assert_false(breaker_counts(NULL));
    assert_string_equal(breaker_state_name(BREAKER_HALF_OPEN), "half_open");
}

/* A fault after which the agent restarts the runtime makes the worker take
 * nothing new until it reports again later than the fault, whatever the
 * breaker's state; other failures and successes do not. */
static void test_restarting_runtime_takes_nothing_until_reported(void **state)
{
    (void)state;
    const char *restarting[] = {"crash", "hang", "oom", "cuda"};
    const char *not_restarting[] = {"qc", "lease", "lost", "bad_input", "cancelled", "timeout"};
    for (size_t i = 0; i < sizeof(restarting) / sizeof(restarting[0]); i++)
        assert_true(breaker_restarts(restarting[i]));
    for (size_t i = 0; i < sizeof(not_restarting) / sizeof(not_restarting[0]); i++)
        assert_false(breaker_restarts(not_restarting[i]));
    assert_false(breaker_restarts(NULL));

    struct breaker_policy p = pol();
    struct breaker b;
    breaker_init(&b);
    struct worker_info w;
    memset(&w, 0, sizeof(w));
    w.concurrency = 1;
    w.healthy = true;
    w.reported_ns = 10 * SEC;
    assert_int_equal(breaker_record(&p, &b, false, "qc", 11 * SEC), BREAKER_EV_NONE);
    breaker_apply(&b, &w);
    assert_false(w.draining); /* a failed quality check leaves the runtime up */
    assert_false(breaker_awaits_report(&b));
    assert_int_equal(breaker_record(&p, &b, false, "crash", 12 * SEC), BREAKER_EV_NONE);
    assert_true(breaker_awaits_report(&b));
    breaker_apply(&b, &w);
    assert_true(w.healthy);
    assert_true(w.draining); /* its last report is from before the crash */
    assert_int_equal(b.state, BREAKER_CLOSED);
    w.draining = false;
    w.reported_ns = 12 * SEC - 1;
    breaker_apply(&b, &w);
    assert_true(w.draining);
    w.draining = false;
    w.reported_ns = 12 * SEC; /* the agent reported since (the simulator's, at once) */
    breaker_apply(&b, &w);
    assert_false(w.draining);
    assert_false(breaker_awaits_report(&b)); /* the wait is over */
    w.reported_ns = 11 * SEC; /* an older report seen later changes nothing */
    breaker_apply(&b, &w);
    assert_false(w.draining);
    assert_true(w.healthy);
    /* A success after the restart does not hide a later crash. */
    assert_int_equal(breaker_record(&p, &b, true, NULL, 13 * SEC), BREAKER_EV_NONE);
    assert_int_equal(breaker_record(&p, &b, false, "hang", 14 * SEC), BREAKER_EV_OPENED);
    breaker_apply(&b, &w);
    assert_false(w.healthy);
    assert_true(w.draining);
}

static void test_opens_after_n_in_window(void **state)
{
    (void)state;
    struct breaker_policy p = pol();
    struct breaker b;
    breaker_init(&b);
    assert_int_equal(breaker_record(&p, &b, false, "cuda", 1 * SEC), BREAKER_EV_NONE);
    assert_int_equal(breaker_record(&p, &b, true, NULL, 2 * SEC), BREAKER_EV_NONE);
    assert_int_equal(breaker_record(&p, &b, false, "oom", 3 * SEC), BREAKER_EV_NONE);
    assert_int_equal(b.state, BREAKER_CLOSED);
    assert_int_equal(breaker_record(&p, &b, false, "cuda", 4 * SEC), BREAKER_EV_OPENED);
    assert_int_equal(b.state, BREAKER_OPEN);
    assert_true(b.trips == 1);
    assert_true(b.open_until_ns == 64 * SEC);
    assert_true(breaker_next_due_ns(&b) == 64 * SEC);
    assert_non_null(strstr(b.reason, "quarantined"));
    assert_non_null(strstr(b.reason, "cuda"));
    /* Results of attempts started before the quarantine change nothing. */
    assert_int_equal(breaker_record(&p, &b, false, "cuda", 5 * SEC), BREAKER_EV_NONE);
    assert_int_equal(breaker_record(&p, &b, true, NULL, 6 * SEC), BREAKER_EV_NONE);
    assert_int_equal(b.state, BREAKER_OPEN);
}

static void test_old_failures_fall_out_and_non_counting(void **state)
{
    (void)state;
    struct breaker_policy p = pol();
    p.window_attempts = 0; /* the time window alone */
    struct breaker b;
    breaker_init(&b);
    breaker_record(&p, &b, false, "cuda", 0);
    breaker_record(&p, &b, false, "cuda", 30 * SEC);
    /* 61 s: the first is out of the window, two remain. */
    assert_int_equal(breaker_record(&p, &b, false, "cuda", 61 * SEC), BREAKER_EV_NONE);
    assert_int_equal(b.nfail, 2);
    /* The caller's faults never count. */
    for (int i = 0; i < 10; i++) {
        assert_int_equal(breaker_record(&p, &b, false, "bad_input", 62 * SEC), BREAKER_EV_NONE);
        assert_int_equal(breaker_record(&p, &b, false, "timeout", 62 * SEC), BREAKER_EV_NONE);
        assert_int_equal(breaker_record(&p, &b, false, "cancelled", 62 * SEC), BREAKER_EV_NONE);
    }
    assert_int_equal(b.state, BREAKER_CLOSED);
    assert_int_equal(breaker_record(&p, &b, false, "lease", 63 * SEC), BREAKER_EV_OPENED);
    /* failures = 0: never opens. */
    p.failures = 0;
    struct breaker n;
    breaker_init(&n);
    for (int i = 0; i < 50; i++)
        assert_int_equal(breaker_record(&p, &n, false, "cuda", i * SEC), BREAKER_EV_NONE);
}

/* Records `n` successes, 100 s apart from t (never two failures in 60 s). */
static int64_t oks(const struct breaker_policy *p, struct breaker *b, int n, int64_t t)
{
    for (int i = 0; i < n; i++) {
        assert_int_equal(breaker_record(p, b, true, NULL, t), BREAKER_EV_NONE);
        t += 100 * SEC;
    }
    return t;
}

static void test_attempt_rule_opens_at_any_pace(void **state)
{
    (void)state;
    struct breaker_policy p = pol();
    struct breaker b;
    breaker_init(&b);
    /* F ok×4 F ok×4 F: the last 10 attempts hold only 2 failures. */
    int64_t t = 0;
    assert_int_equal(breaker_record(&p, &b, false, "cuda", t), BREAKER_EV_NONE);
    t = oks(&p, &b, 4, t + 100 * SEC);
    assert_int_equal(breaker_record(&p, &b, false, "cuda", t), BREAKER_EV_NONE);
    t = oks(&p, &b, 4, t + 100 * SEC);
    assert_int_equal(breaker_record(&p, &b, false, "cuda", t), BREAKER_EV_NONE);
    assert_int_equal(b.state, BREAKER_CLOSED);
    /* ok×3 F: the failures at attempts 6, 11 and 15 are 3 of the last 10. */
    t = oks(&p, &b, 3, t + 100 * SEC);
    assert_int_equal(breaker_record(&p, &b, false, "oom", t), BREAKER_EV_OPENED);
    assert_int_equal(b.state, BREAKER_OPEN);
    assert_non_null(strstr(b.reason, "3 of the last 10 attempts"));
    assert_non_null(strstr(b.reason, "oom"));
    assert_int_equal(b.nattempts, 0);
    /* A probe's success forgets the history: two more failures do not reopen it. */
    assert_int_equal(breaker_tick(&p, &b, t + 60 * SEC), BREAKER_EV_PROBING);
    breaker_assigned(&b);
    assert_int_equal(breaker_record(&p, &b, true, NULL, t + 70 * SEC), BREAKER_EV_CLOSED);
    t += 200 * SEC;
    assert_int_equal(breaker_record(&p, &b, false, "cuda", t), BREAKER_EV_NONE);
    assert_int_equal(breaker_record(&p, &b, false, "cuda", t + 100 * SEC), BREAKER_EV_NONE);
    assert_int_equal(b.state, BREAKER_CLOSED);
}

static void test_attempt_rule_spread_failures_and_caller_faults(void **state)
{
    (void)state;
    struct breaker_policy p = pol();
    struct breaker b;
    breaker_init(&b);
    /* One failure in every 6 attempts, slowly: never 3 within 10 attempts. */
    int64_t t = 0;
    for (int r = 0; r < 30; r++) {
        assert_int_equal(breaker_record(&p, &b, false, "crash", t), BREAKER_EV_NONE);
        t = oks(&p, &b, 5, t + 100 * SEC);
    }
    assert_int_equal(b.state, BREAKER_CLOSED);
    assert_true(b.trips == 0);
    /* The caller's faults are not attempts: they push no failure out. */
    breaker_init(&b);
    t = 0;
    assert_int_equal(breaker_record(&p, &b, false, "cuda", t), BREAKER_EV_NONE);
    t = oks(&p, &b, 7, t + 100 * SEC);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(breaker_record(&p, &b, false, "bad_input", t), BREAKER_EV_NONE);
        assert_int_equal(breaker_record(&p, &b, false, "timeout", t), BREAKER_EV_NONE);
        t += 100 * SEC;
    }
    assert_int_equal(breaker_record(&p, &b, false, "cuda", t), BREAKER_EV_NONE);
    assert_int_equal(breaker_record(&p, &b, false, "cuda", t + 100 * SEC), BREAKER_EV_OPENED);
    /* window_attempts = 0: the same history never opens it. */
    p.window_attempts = 0;
    breaker_init(&b);
    t = 0;
    for (int i = 0; i < 20; i++) {
        assert_int_equal(breaker_record(&p, &b, false, "cuda", t), BREAKER_EV_NONE);
        t += 100 * SEC;
    }
    /* A window larger than remembered is clamped, not out of bounds. */
    p.window_attempts = 1000;
    breaker_init(&b);
    t = oks(&p, &b, 100, 0);
    assert_int_equal(breaker_record(&p, &b, false, "cuda", t), BREAKER_EV_NONE);
    assert_int_equal(b.nattempts, BREAKER_MAX_ATTEMPTS);
}

static void trip(const struct breaker_policy *p, struct breaker *b, int64_t t)
{
    for (int i = 0; i < p->failures; i++)
        breaker_record(p, b, false, "crash", t);
    assert_int_equal(b->state, BREAKER_OPEN);
}

static void test_half_open_single_probe_and_backoff(void **state)
{
    (void)state;
    struct breaker_policy p = pol();
    p.max_cooldown_ns = 200 * SEC;
    struct breaker b;
    breaker_init(&b);
    trip(&p, &b, 0);
    struct worker_info w;
    memset(&w, 0, sizeof(w));
    w.concurrency = 4;
    w.healthy = true;
    breaker_apply(&b, &w);
    assert_false(w.healthy);
    assert_int_equal(breaker_tick(&p, &b, 59 * SEC), BREAKER_EV_NONE);
    assert_int_equal(breaker_tick(&p, &b, 60 * SEC), BREAKER_EV_PROBING);
    assert_int_equal(b.state, BREAKER_HALF_OPEN);
    assert_true(breaker_next_due_ns(&b) == 0);
    w.healthy = true;
    breaker_apply(&b, &w);
    assert_true(w.healthy);
    assert_false(w.draining);
    assert_int_equal(w.concurrency, 1);
    breaker_assigned(&b);
    assert_true(b.probe_inflight);
    breaker_apply(&b, &w);
    assert_true(w.draining); /* nothing more while the probe runs */
    /* The probe fails: open for twice as long. */
    assert_int_equal(breaker_record(&p, &b, false, "cuda", 70 * SEC), BREAKER_EV_OPENED);
    assert_true(b.cooldown_ns == 120 * SEC);
    assert_true(b.open_until_ns == 190 * SEC);
    assert_true(b.trips == 2);
    assert_non_null(strstr(b.reason, "probe"));
    /* Again: 240 s would pass the 200 s ceiling. */
    assert_int_equal(breaker_tick(&p, &b, 190 * SEC), BREAKER_EV_PROBING);
    breaker_assigned(&b);
    assert_int_equal(breaker_record(&p, &b, false, "cuda", 191 * SEC), BREAKER_EV_OPENED);
    assert_true(b.cooldown_ns == 200 * SEC);
    /* A probe that ends for the caller's reasons proves nothing: another. */
    assert_int_equal(breaker_tick(&p, &b, 391 * SEC), BREAKER_EV_PROBING);
    breaker_assigned(&b);
    assert_int_equal(breaker_record(&p, &b, false, "bad_input", 392 * SEC), BREAKER_EV_NONE);
    assert_int_equal(b.state, BREAKER_HALF_OPEN);
    assert_false(b.probe_inflight);
    /* The probe succeeds: closed, and the next quarantine starts at the
     * first cool-down again. */
    breaker_assigned(&b);
    assert_int_equal(breaker_record(&p, &b, true, NULL, 393 * SEC), BREAKER_EV_CLOSED);
    assert_int_equal(b.state, BREAKER_CLOSED);
    assert_non_null(strstr(b.reason, "recovered"));
    w.healthy = true;
    w.draining = false;
    w.concurrency = 4;
    w.reported_ns = 393 * SEC; /* its agent reported after the failed probes */
    breaker_apply(&b, &w);
    assert_true(w.healthy && !w.draining && w.concurrency == 4);
    trip(&p, &b, 400 * SEC);
    assert_true(b.cooldown_ns == 60 * SEC);
    assert_true(b.trips == 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_counting_classes),
        cmocka_unit_test(test_restarting_runtime_takes_nothing_until_reported),
        cmocka_unit_test(test_opens_after_n_in_window),
        cmocka_unit_test(test_old_failures_fall_out_and_non_counting),
        cmocka_unit_test(test_half_open_single_probe_and_backoff),
        cmocka_unit_test(test_attempt_rule_opens_at_any_pace),
        cmocka_unit_test(test_attempt_rule_spread_failures_and_caller_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
