/* test_lifecycle.c: a job's life with scripted time — every transition and
 * refusal, fencing of stale attempts, lease renewal and expiry, execution
 * timeouts, deadlines while queued and running, the retry budget ending in the
 * dead letter, bad_input failing at once, the failed set (grows, dedups,
 * bounded), requeue without blame, resubmit, the orphan grace, and the boot
 * epoch fence across a head restart. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "core/lifecycle.h"

#define SEC 1000000000LL

static struct lc_now at(double s)
{
    return (struct lc_now){(int64_t)(s * 1e9), 1700000000000LL + (int64_t)(s * 1000)};
}

static struct lc_policy pol(void)
{
    struct lc_policy p;
    lc_policy_defaults(&p);
    return p;
}

static void test_defaults_and_names(void **state)
{
    (void)state;
    struct lc_policy p = pol();
    assert_int_equal(p.max_attempts, 3);
    assert_true(p.lease_ns == 30 * SEC);
    assert_true(p.orphan_grace_ns == 10 * SEC);
    for (int s = LC_QUEUED; s <= LC_EXPIRED; s++) {
        enum lc_state back;
        assert_int_equal(lc_state_parse(lc_state_name((enum lc_state)s), &back), 0);
        assert_int_equal(back, s);
    }
    enum lc_state x;
    assert_int_equal(lc_state_parse("zombie", &x), GPUQ_EINVAL);
    assert_string_equal(lc_state_name(LC_DEAD), "dead");
    assert_string_equal(lc_outcome_name(LC_OUT_LEASE), "lease_expired");
    assert_false(lc_terminal(LC_QUEUED));
    assert_false(lc_terminal(LC_RUNNING));
    assert_true(lc_terminal(LC_SUCCEEDED) && lc_terminal(LC_FAILED) &&
                lc_terminal(LC_CANCELLED) && lc_terminal(LC_DEAD) && lc_terminal(LC_EXPIRED));
}

static void test_assign_succeed_and_refusals(void **state)
{
    (void)state;
    struct lc_policy p = pol();
    struct lc_job j;
    lc_init(&j, 0, 0);
    assert_int_equal(j.state, LC_QUEUED);
    struct lc_attempt a;
    /* Nothing runs yet: every fenced call is stale. */
    assert_int_equal(lc_succeed(&j, "gpu0", 1, at(0), &a), GPUQ_ESTALE);
    assert_int_equal(lc_assign(&p, &j, "", at(0)), GPUQ_EINVAL);
    assert_int_equal(lc_assign(&p, &j, "gpu0", at(1)), 0);
    assert_int_equal(j.state, LC_RUNNING);
    assert_int_equal(j.attempt, 1);
    assert_string_equal(j.worker, "gpu0");
    assert_true(j.lease_until_ns == 31 * SEC);
    assert_true(j.run_deadline_ns == 0);
    assert_int_equal(lc_assign(&p, &j, "gpu1", at(1)), GPUQ_ECONFLICT);
    /* Fencing: wrong worker, wrong attempt. */
    assert_int_equal(lc_fence(&j, "gpu0", 1), 0);
    assert_int_equal(lc_fence(&j, "gpu1", 1), GPUQ_ESTALE);
    assert_int_equal(lc_fence(&j, "gpu0", 2), GPUQ_ESTALE);
    assert_int_equal(lc_succeed(&j, "gpu0", 2, at(2), &a), GPUQ_ESTALE);
    assert_int_equal(lc_succeed(&j, "gpu0", 1, at(3), &a), 0);
    assert_int_equal(j.state, LC_SUCCEEDED);
    assert_int_equal(a.n, 1);
    assert_int_equal(a.outcome, LC_OUT_OK);
    assert_string_equal(a.worker, "gpu0");
    assert_true(a.ended_ms - a.started_ms == 2000);
    assert_string_equal(a.error_class, "");
    assert_true(j.lease_until_ns == 0);
    /* Terminal: no second result, no cancel, no requeue, no resubmit. */
    assert_int_equal(lc_succeed(&j, "gpu0", 1, at(4), &a), GPUQ_ESTALE);
    bool was;
    assert_int_equal(lc_cancel(&j, at(4), &was, &a), GPUQ_ECONFLICT);
    assert_int_equal(lc_requeue(&j, "drain", at(4), &a), GPUQ_ECONFLICT);
    assert_int_equal(lc_resubmit(&j, 0), GPUQ_ECONFLICT);
    enum lc_next n;
    assert_int_equal(lc_lost(&p, &j, "gone", at(4), &a, &n), GPUQ_ECONFLICT);
}

static void test_stale_attempt_refused_after_retry(void **state)
{
    (void)state;
    struct lc_policy p = pol();
    struct lc_job j;
    lc_init(&j, 0, 0);
    struct lc_attempt a;
    enum lc_next n;
    assert_int_equal(lc_assign(&p, &j, "gpu0", at(0)), 0);
    assert_int_equal(lc_fail(&p, &j, "gpu0", 1, "cuda", "illegal address", at(1), &a, &n), 0);
    assert_int_equal(n, LC_NEXT_RETRY);
    assert_int_equal(j.state, LC_QUEUED);
    assert_int_equal(a.outcome, LC_OUT_ERROR);
    assert_string_equal(a.error_class, "cuda");
    assert_string_equal(a.error, "illegal address");
    /* Same worker, re-assigned: attempt 2. The late report of attempt 1 is
     * refused, as is a failure for it. */
    assert_int_equal(lc_assign(&p, &j, "gpu0", at(2)), 0);
    assert_int_equal(j.attempt, 2);
    assert_int_equal(lc_succeed(&j, "gpu0", 1, at(3), &a), GPUQ_ESTALE);
    assert_int_equal(lc_fail(&p, &j, "gpu0", 1, "cuda", "x", at(3), &a, &n), GPUQ_ESTALE);
    assert_int_equal(n, LC_NEXT_NONE);
    assert_int_equal(lc_renew(&p, &j, "gpu0", 1, at(3)), GPUQ_ESTALE);
    assert_int_equal(j.state, LC_RUNNING);
    assert_int_equal(lc_succeed(&j, "gpu0", 2, at(4), &a), 0);
    assert_int_equal(a.n, 2);
}

/* A head hands out attempt 1 early and dies before storing it: the stored job
 * is still queued at attempt 0, so the next boot hands out attempt 1 again,
 * to the same worker. Only the epoch tells the dead boot's reports apart. */
static void test_epoch_fences_an_attempt_number_handed_out_twice(void **state)
{
    (void)state;
    struct lc_policy p = pol();
    const uint64_t boot_a = 0xa1, boot_b = 0xb2;
    struct lc_job stored, j;
    lc_init(&stored, 0, 0);
    j = stored;
    assert_int_equal(lc_assign_in(&p, &j, "gpu0", boot_a, at(0)), 0);
    assert_int_equal(j.attempt, 1);
    assert_int_equal(lc_fence_epoch(&j, "gpu0", 1, boot_a), 0);
    /* The restart: back to what the store holds, handed out under boot B. */
    j = stored;
    assert_int_equal(lc_assign_in(&p, &j, "gpu0", boot_b, at(5)), 0);
    assert_int_equal(j.attempt, 1);
    /* (worker, attempt) alone cannot tell them apart... */
    assert_int_equal(lc_fence(&j, "gpu0", 1), 0);
    /* ...the epoch does: boot A's report is refused, boot B's passes. */
    assert_int_equal(lc_fence_epoch(&j, "gpu0", 1, boot_a), GPUQ_ESTALE_EPOCH);
    assert_int_equal(lc_fence_epoch(&j, "gpu0", 1, boot_b), 0);
    /* A report naming no epoch (an agent on durable assignments) is fenced
     * by (worker, attempt) only. */
    assert_int_equal(lc_fence_epoch(&j, "gpu0", 1, 0), 0);
    assert_int_equal(lc_fence_epoch(&j, "gpu0", 2, 0), GPUQ_ESTALE);
    /* The epoch is checked first; with the right one the attempt still counts. */
    assert_int_equal(lc_fence_epoch(&j, "gpu1", 1, boot_a), GPUQ_ESTALE_EPOCH);
    assert_int_equal(lc_fence_epoch(&j, "gpu1", 1, boot_b), GPUQ_ESTALE);
    assert_int_equal(lc_fence_epoch(&j, "gpu0", 2, boot_b), GPUQ_ESTALE);
    /* Once it ended, a retried report of it under boot B is a plain stale
     * attempt (the shell may recognise a duplicate), boot A's still the epoch. */
    struct lc_attempt a;
    assert_int_equal(lc_succeed(&j, "gpu0", 1, at(6), &a), 0);
    assert_int_equal(lc_fence_epoch(&j, "gpu0", 1, boot_b), GPUQ_ESTALE);
    assert_int_equal(lc_fence_epoch(&j, "gpu0", 1, boot_a), GPUQ_ESTALE_EPOCH);
    /* A shell without boots (lc_assign: epoch 0) refuses any named epoch. */
    struct lc_job s;
    lc_init(&s, 0, 0);
    assert_int_equal(lc_assign(&p, &s, "gpu0", at(0)), 0);
    assert_int_equal(lc_fence_epoch(&s, "gpu0", 1, 0), 0);
    assert_int_equal(lc_fence_epoch(&s, "gpu0", 1, boot_b), GPUQ_ESTALE_EPOCH);
}

static void test_epoch_parse(void **state)
{
    (void)state;
    uint64_t e = 7;
    assert_int_equal(lc_epoch_parse("9f2c41d07ab3e865", &e), 0);
    assert_true(e == 0x9f2c41d07ab3e865ULL);
    assert_int_equal(lc_epoch_parse("00000000000000A1", &e), 0);
    assert_true(e == 0xa1);
    e = 7;
    /* Empty, over 16 digits, not hex, all zeros (no boot draws 0: it means
     * "none" to lc_fence_epoch), missing: refused, *out untouched. */
    assert_int_equal(lc_epoch_parse("", &e), GPUQ_EINVAL);
    assert_int_equal(lc_epoch_parse("0123456789abcdef0", &e), GPUQ_EINVAL);
    assert_int_equal(lc_epoch_parse("9f2c41d07ab3e86g", &e), GPUQ_EINVAL);
    assert_int_equal(lc_epoch_parse("-1", &e), GPUQ_EINVAL);
    assert_int_equal(lc_epoch_parse("0000000000000000", &e), GPUQ_EINVAL);
    assert_int_equal(lc_epoch_parse(NULL, &e), GPUQ_EINVAL);
    assert_true(e == 7);
}

static void test_lease_renew_and_expiry(void **state)
{
    (void)state;
    struct lc_policy p = pol();
    p.lease_ns = 10 * SEC;
    struct lc_job j;
    lc_init(&j, 0, 0);
    struct lc_attempt a;
    enum lc_next n;
    assert_int_equal(lc_assign(&p, &j, "gpu0", at(0)), 0);
    assert_true(lc_next_due_ns(&j, NULL) == 10 * SEC);
    lc_check(&p, &j, at(9), &a, &n);
    assert_int_equal(n, LC_NEXT_NONE);
    assert_int_equal(lc_renew(&p, &j, "gpu0", 1, at(8)), 0);
    assert_true(lc_next_due_ns(&j, NULL) == 18 * SEC);
    /* A renewal never shortens the lease. */
    assert_int_equal(lc_renew(&p, &j, "gpu0", 1, at(5)), 0);
    assert_true(j.lease_until_ns == 18 * SEC);
    lc_check(&p, &j, at(17.9), &a, &n);
    assert_int_equal(n, LC_NEXT_NONE);
    assert_int_equal(j.state, LC_RUNNING);
    lc_check(&p, &j, at(18), &a, &n);
    assert_int_equal(n, LC_NEXT_RETRY);
    assert_int_equal(j.state, LC_QUEUED);
    assert_int_equal(a.outcome, LC_OUT_LEASE);
    assert_string_equal(a.error_class, "lease");
    assert_int_equal(j.failures, 1);
    assert_true(lc_failed_on(&j, "gpu0"));
    assert_true(lc_next_due_ns(&j, NULL) == 0);
    /* The silent worker comes back with its result: refused. */
    assert_int_equal(lc_succeed(&j, "gpu0", 1, at(19), &a), GPUQ_ESTALE);
}

static void test_execution_timeout_does_not_blame(void **state)
{
    (void)state;
    struct lc_policy p = pol();
    struct lc_job j;
    lc_init(&j, 0, 5000);
    struct lc_attempt a;
    enum lc_next n;
    assert_int_equal(lc_assign(&p, &j, "gpu0", at(10)), 0);
    assert_true(j.run_deadline_ns == 15 * SEC);
    assert_true(lc_next_due_ns(&j, NULL) == 15 * SEC);
    lc_check(&p, &j, at(14.99), &a, &n);
    assert_int_equal(n, LC_NEXT_NONE);
    lc_check(&p, &j, at(15), &a, &n);
    assert_int_equal(n, LC_NEXT_RETRY);
    assert_int_equal(a.outcome, LC_OUT_TIMEOUT);
    assert_string_equal(a.error_class, "timeout");
    assert_int_equal(j.failures, 1);
    assert_int_equal(j.nfailed, 0); /* the caller's limit, not the GPU's fault */
}

static void test_deadline_queued_and_running(void **state)
{
    (void)state;
    struct lc_policy p = pol();
    struct lc_job q, r;
    int64_t dl = at(100).wall_ms;
    lc_init(&q, dl, 0);
    lc_init(&r, dl, 0);
    struct lc_attempt a;
    enum lc_next n;
    int64_t dms = 0;
    lc_next_due_ns(&q, &dms);
    assert_true(dms == dl);
    lc_check(&p, &q, at(99), &a, &n);
    assert_int_equal(n, LC_NEXT_NONE);
    lc_check(&p, &q, at(100), &a, &n);
    assert_int_equal(n, LC_NEXT_EXPIRED);
    assert_int_equal(q.state, LC_EXPIRED);
    /* Running: ends with outcome deadline; the caller aborts it. */
    assert_int_equal(lc_assign(&p, &r, "gpu0", at(90)), 0);
    lc_check(&p, &r, at(101), &a, &n);
    assert_int_equal(n, LC_NEXT_EXPIRED);
    assert_int_equal(r.state, LC_EXPIRED);
    assert_int_equal(a.outcome, LC_OUT_DEADLINE);
    assert_int_equal(a.n, 1);
    assert_int_equal(r.nfailed, 0);
    /* A failure reported after the deadline ends expired, not retried. */
    struct lc_job f;
    lc_init(&f, dl, 0);
    assert_int_equal(lc_assign(&p, &f, "gpu0", at(50)), 0);
    assert_int_equal(lc_fail(&p, &f, "gpu0", 1, "oom", "", at(100.5), &a, &n), 0);
    assert_int_equal(n, LC_NEXT_EXPIRED);
    assert_int_equal(f.state, LC_EXPIRED);
    /* Expired jobs can be resubmitted with a new deadline. */
    assert_int_equal(lc_resubmit(&f, at(500).wall_ms), 0);
    assert_int_equal(f.state, LC_QUEUED);
    assert_true(f.deadline_ms == at(500).wall_ms);
}

static void test_retry_budget_dead_letter(void **state)
{
    (void)state;
    struct lc_policy p = pol();
    struct lc_job j;
    lc_init(&j, 0, 0);
    struct lc_attempt a;
    enum lc_next n;
    const char *w[] = {"gpu0", "gpu1", "gpu2"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(lc_assign(&p, &j, w[i], at(i * 10)), 0);
        assert_int_equal(lc_fail(&p, &j, w[i], i + 1, "crash", "runtime exited", at(i * 10 + 1),
                                 &a, &n),
                         0);
        assert_int_equal(n, i < 2 ? LC_NEXT_RETRY : LC_NEXT_DEAD);
    }
    assert_int_equal(j.state, LC_DEAD);
    assert_int_equal(j.failures, 3);
    assert_int_equal(j.nfailed, 3);
    assert_int_equal(lc_assign(&p, &j, "gpu3", at(40)), GPUQ_ECONFLICT);
    /* Resubmit: budget and failed set reset, attempt numbers keep growing. */
    assert_int_equal(lc_resubmit(&j, 0), 0);
    assert_int_equal(j.state, LC_QUEUED);
    assert_int_equal(j.failures, 0);
    assert_int_equal(j.nfailed, 0);
    assert_false(lc_failed_on(&j, "gpu0"));
    assert_int_equal(lc_assign(&p, &j, "gpu0", at(50)), 0);
    assert_int_equal(j.attempt, 4);
    assert_int_equal(lc_succeed(&j, "gpu0", 3, at(51), &a), GPUQ_ESTALE);
    assert_int_equal(lc_succeed(&j, "gpu0", 4, at(51), &a), 0);
}

static void test_bad_input_fails_at_once(void **state)
{
    (void)state;
    struct lc_policy p = pol();
    struct lc_job j;
    lc_init(&j, 0, 0);
    struct lc_attempt a;
    enum lc_next n;
    assert_int_equal(lc_assign(&p, &j, "gpu0", at(0)), 0);
    assert_int_equal(lc_fail(&p, &j, "gpu0", 1, "bad_input", "width: too large", at(1), &a, &n),
                     0);
    assert_int_equal(n, LC_NEXT_FAILED);
    assert_int_equal(j.state, LC_FAILED);
    assert_int_equal(j.nfailed, 0);
    assert_int_equal(lc_resubmit(&j, 0), 0);
    assert_int_equal(j.state, LC_QUEUED);
}

static void test_failed_set_grows_dedups_bounded(void **state)
{
    (void)state;
    struct lc_policy p = pol();
    p.max_attempts = 100;
    struct lc_job j;
    lc_init(&j, 0, 0);
    struct lc_attempt a;
    enum lc_next n;
    const char (*list)[SCHED_NAME_MAX];
    int cnt;
    lc_exclusions(&j, &list, &cnt);
    assert_int_equal(cnt, 0);
    assert_null(list);
    /* gpu0 twice, then gpu1: the set is {gpu0, gpu1}, oldest first. */
    const char *seq[] = {"gpu0", "gpu0", "gpu1"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(lc_assign(&p, &j, seq[i], at(i)), 0);
        assert_int_equal(lc_fail(&p, &j, seq[i], j.attempt, "cuda", "", at(i + 0.5), &a, &n), 0);
    }
    lc_exclusions(&j, &list, &cnt);
    assert_int_equal(cnt, 2);
    assert_string_equal(list[0], "gpu0");
    assert_string_equal(list[1], "gpu1");
    assert_int_equal(j.failures, 3);
    /* Cancelled is not the GPU's fault. */
    assert_int_equal(lc_assign(&p, &j, "gpu9", at(5)), 0);
    assert_int_equal(lc_fail(&p, &j, "gpu9", j.attempt, "cancelled", "", at(6), &a, &n), 0);
    assert_false(lc_failed_on(&j, "gpu9"));
    /* Lost counts on its worker. */
    assert_int_equal(lc_assign(&p, &j, "gpu2", at(7)), 0);
    assert_int_equal(lc_lost(&p, &j, "worker left", at(8), &a, &n), 0);
    assert_int_equal(n, LC_NEXT_RETRY);
    assert_int_equal(a.outcome, LC_OUT_LOST);
    assert_true(lc_failed_on(&j, "gpu2"));
    /* Bounded: the oldest is forgotten past LC_MAX_FAILED. */
    for (int i = 0; i < LC_MAX_FAILED; i++) {
        char id[16];
        snprintf(id, sizeof(id), "x%d", i);
        assert_int_equal(lc_assign(&p, &j, id, at(10 + i)), 0);
        assert_int_equal(lc_fail(&p, &j, id, j.attempt, "oom", "", at(10.5 + i), &a, &n), 0);
    }
    assert_int_equal(j.nfailed, LC_MAX_FAILED);
    assert_false(lc_failed_on(&j, "gpu0"));
    assert_true(lc_failed_on(&j, "x0"));
    assert_string_equal(j.failed[LC_MAX_FAILED - 1], "x7");
}

static void test_requeue_counts_no_failure(void **state)
{
    (void)state;
    struct lc_policy p = pol();
    struct lc_job j;
    lc_init(&j, 0, 0);
    struct lc_attempt a;
    assert_int_equal(lc_requeue(&j, "drain", at(0), &a), GPUQ_ECONFLICT);
    assert_int_equal(lc_assign(&p, &j, "gpu0", at(0)), 0);
    assert_int_equal(lc_requeue(&j, "head restart", at(1), &a), 0);
    assert_int_equal(j.state, LC_QUEUED);
    assert_int_equal(j.failures, 0);
    assert_int_equal(j.nfailed, 0);
    assert_int_equal(a.outcome, LC_OUT_REQUEUED);
    assert_string_equal(a.error, "head restart");
    assert_int_equal(lc_assign(&p, &j, "gpu0", at(2)), 0);
    assert_int_equal(j.attempt, 2);
}

static void test_cancel_queued_and_running(void **state)
{
    (void)state;
    struct lc_policy p = pol();
    struct lc_job q, r;
    lc_init(&q, 0, 0);
    lc_init(&r, 0, 0);
    bool was = true;
    struct lc_attempt a;
    assert_int_equal(lc_cancel(&q, at(1), &was, &a), 0);
    assert_false(was);
    assert_int_equal(q.state, LC_CANCELLED);
    assert_int_equal(lc_assign(&p, &r, "gpu0", at(1)), 0);
    assert_int_equal(lc_cancel(&r, at(2), &was, &a), 0);
    assert_true(was);
    assert_int_equal(a.outcome, LC_OUT_CANCELLED);
    assert_int_equal(r.state, LC_CANCELLED);
    assert_int_equal(lc_succeed(&r, "gpu0", 1, at(3), &a), GPUQ_ESTALE);
}

static void test_orphan_grace(void **state)
{
    (void)state;
    struct lc_policy p = pol();
    struct lc_job j;
    lc_init(&j, 0, 0);
    assert_false(lc_orphaned(&p, &j, "gpu0", false, 100 * SEC));
    assert_int_equal(lc_assign(&p, &j, "gpu0", at(100)), 0);
    /* Within the grace the assignment may still be in flight. */
    assert_false(lc_orphaned(&p, &j, "gpu0", false, 105 * SEC));
    assert_false(lc_orphaned(&p, &j, "gpu0", true, 200 * SEC));
    assert_false(lc_orphaned(&p, &j, "gpu1", false, 200 * SEC));
    assert_true(lc_orphaned(&p, &j, "gpu0", false, 111 * SEC));
    struct lc_attempt a;
    enum lc_next n;
    assert_int_equal(lc_lost(&p, &j, "not in the worker's report", at(111), &a, &n), 0);
    assert_int_equal(n, LC_NEXT_RETRY);
}

/* The head itself stood still: silence during the stall does not end a lease;
 * the execution timeout keeps counting (the run went on). */
static void test_stall_shifts_the_lease_not_the_timeout(void **state)
{
    (void)state;
    struct lc_policy p = pol();
    assert_true(lc_stall_ns(0, 50 * SEC, SEC) == 0);            /* never checked yet */
    assert_true(lc_stall_ns(10 * SEC, 10 * SEC + SEC / 2, SEC) == 0); /* on time */
    assert_true(lc_stall_ns(10 * SEC, 19 * SEC, SEC) == 8 * SEC);
    struct lc_job j;
    lc_init(&j, 0, 0);
    assert_int_equal(lc_assign(&p, &j, "gpu0", at(0)), 0);
    /* Frozen from t=1 s to t=45 s: past the 30 s lease. */
    int64_t gap = lc_stall_ns(at(1).mono_ns, at(45).mono_ns, SEC);
    lc_shift(&j, gap);
    struct lc_attempt a;
    enum lc_next next;
    lc_check(&p, &j, at(45), &a, &next);
    assert_int_equal(next, LC_NEXT_NONE);
    assert_int_equal(j.state, LC_RUNNING);
    /* Silent past the shifted lease (30 s + a 43 s stall): it ends. */
    lc_check(&p, &j, at(30 + 43 - 1), &a, &next);
    assert_int_equal(next, LC_NEXT_NONE);
    lc_check(&p, &j, at(30 + 43 + 1), &a, &next);
    assert_int_equal(next, LC_NEXT_RETRY);
    assert_int_equal(a.outcome, LC_OUT_LEASE);
    /* The timeout does not move. */
    struct lc_job t;
    lc_init(&t, 0, 20000);
    assert_int_equal(lc_assign(&p, &t, "gpu1", at(0)), 0);
    lc_shift(&t, 40 * SEC);
    lc_check(&p, &t, at(21), &a, &next);
    assert_int_equal(a.outcome, LC_OUT_TIMEOUT);
    /* Only a running attempt has a lease to move. */
    struct lc_job q;
    lc_init(&q, 0, 0);
    lc_shift(&q, 5 * SEC);
    assert_true(q.lease_until_ns == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_names),
        cmocka_unit_test(test_assign_succeed_and_refusals),
        cmocka_unit_test(test_stale_attempt_refused_after_retry),
        cmocka_unit_test(test_epoch_fences_an_attempt_number_handed_out_twice),
        cmocka_unit_test(test_epoch_parse),
        cmocka_unit_test(test_lease_renew_and_expiry),
        cmocka_unit_test(test_execution_timeout_does_not_blame),
        cmocka_unit_test(test_deadline_queued_and_running),
        cmocka_unit_test(test_retry_budget_dead_letter),
        cmocka_unit_test(test_bad_input_fails_at_once),
        cmocka_unit_test(test_failed_set_grows_dedups_bounded),
        cmocka_unit_test(test_requeue_counts_no_failure),
        cmocka_unit_test(test_cancel_queued_and_running),
        cmocka_unit_test(test_orphan_grace),
        cmocka_unit_test(test_stall_shifts_the_lease_not_the_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
