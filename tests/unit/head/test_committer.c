/* test_committer.c: lazy operations of the group committer (store/committer.h)
 * on a store that only counts: a lazy op rides in the transaction of the next
 * op someone waits on, in queue order; alone it commits once its delay is
 * over; stopping commits it at once. And when the committer reads as idle.
 * Waits are on the ops' own completions, bounded; the long delays are never
 * waited out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <sched.h>
#include <semaphore.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "store/committer.h"

#define LONG_NS (60 * NS_PER_S) /* a delay no test waits out */

/* The counting store: transactions committed, and the order ops applied in. */
struct fake {
    struct store s;
    int commits;
    int order[8];
    int napplied;
};

static struct fake *fk(struct store *s) { return (struct fake *)s; }
static int f_begin(struct store *s) { (void)s; return 0; }
static int f_commit(struct store *s) { fk(s)->commits++; return 0; }
static int f_rollback(struct store *s) { (void)s; return 0; }
static int f_savepoint(struct store *s) { (void)s; return 0; }
static int f_release(struct store *s, int ok) { (void)s; (void)ok; return 0; }
static const struct store_ops fake_ops = {.name = "fake", .begin = f_begin, .commit = f_commit,
                                          .rollback = f_rollback, .savepoint = f_savepoint,
                                          .release = f_release};

/* An op that records its number when applied, and posts `done_sem` when done. */
struct nop {
    struct commit_op op;
    int num;
    int batch_commits; /* the store's commit count when done ran */
    int rc;
    sem_t done_sem;
};

static int nop_apply(struct store *s, struct commit_op *op)
{
    struct fake *f = fk(s);
    f->order[f->napplied++] = ((struct nop *)op)->num;
    return 0;
}

static struct fake *g_fake;

static void nop_done(struct commit_op *op, int rc)
{
    struct nop *n = (struct nop *)op;
    n->rc = rc;
    n->batch_commits = g_fake->commits;
    sem_post(&n->done_sem);
}

static void nop_init(struct nop *n, int num)
{
    memset(n, 0, sizeof *n);
    n->num = num;
    n->rc = -1;
    n->op.apply = nop_apply;
    n->op.done = nop_done;
    sem_init(&n->done_sem, 0, 0);
}

/* Waits (bounded, 10 s) for sem; false if it was never posted. */
static bool sem_wait_10s(sem_t *sem)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    while (sem_timedwait(sem, &ts) != 0)
        if (errno == ETIMEDOUT)
            return false;
    return true;
}

/* Waits for n's done; false if it never came. */
static bool wait_done(struct nop *n)
{
    return sem_wait_10s(&n->done_sem);
}

static struct committer *start(struct fake *f)
{
    memset(f, 0, sizeof *f);
    f->s.ops = &fake_ops;
    g_fake = f;
    return committer_create(&f->s);
}

static void lazy_rides_with_the_next_waited_op(void **state)
{
    (void)state;
    struct fake f;
    struct committer *c = start(&f);
    struct nop lazy, eager;
    nop_init(&lazy, 1);
    nop_init(&eager, 2);
    committer_submit_lazy(c, &lazy.op, LONG_NS);
    committer_submit(c, &eager.op);
    assert_true(wait_done(&eager));
    assert_true(wait_done(&lazy));
    /* One transaction for both, in the order they were submitted. */
    assert_int_equal(f.commits, 1);
    assert_int_equal(f.napplied, 2);
    assert_int_equal(f.order[0], 1);
    assert_int_equal(f.order[1], 2);
    assert_int_equal(lazy.rc, 0);
    assert_int_equal(eager.rc, 0);
    committer_destroy(c);
}

static void lazy_alone_commits_after_its_delay(void **state)
{
    (void)state;
    struct fake f;
    struct committer *c = start(&f);
    struct nop lazy;
    nop_init(&lazy, 1);
    int64_t t0 = clock_mono_ns();
    committer_submit_lazy(c, &lazy.op, 20 * NS_PER_MS);
    assert_true(wait_done(&lazy));
    assert_true(clock_mono_ns() - t0 >= 20 * NS_PER_MS);
    assert_int_equal(lazy.rc, 0);
    assert_int_equal(lazy.batch_commits, 1);
    committer_destroy(c);
}

/* Once lazy ops have come, an idle committer wakes by itself every lazy
 * delay and queueing a lazy op does not wake it (unless it is due before
 * then): each still commits at its time, not before, and none is left. */
static void lazy_ops_commit_on_time_while_the_committer_wakes_by_itself(void **state)
{
    (void)state;
    struct fake f;
    struct committer *c = start(&f);
    struct nop a, far, near, d;
    nop_init(&a, 1);
    nop_init(&far, 2);
    nop_init(&near, 3);
    nop_init(&d, 4);
    committer_submit_lazy(c, &a.op, 20 * NS_PER_MS);
    assert_true(wait_done(&a));
    /* Due long after the committer's next look: left to it. Then one due
     * before that look: it must be woken for it, and takes both. */
    committer_submit_lazy(c, &far.op, LONG_NS);
    int64_t t0 = clock_mono_ns();
    committer_submit_lazy(c, &near.op, 5 * NS_PER_MS);
    assert_true(wait_done(&near));
    assert_true(clock_mono_ns() - t0 >= 5 * NS_PER_MS);
    assert_true(wait_done(&far));
    assert_int_equal(near.batch_commits, 2);
    assert_int_equal(far.batch_commits, 2);
    /* Due no sooner than the committer looks again: it commits at its time. */
    t0 = clock_mono_ns();
    committer_submit_lazy(c, &d.op, 20 * NS_PER_MS);
    assert_true(wait_done(&d));
    assert_true(clock_mono_ns() - t0 >= 20 * NS_PER_MS);
    assert_int_equal(d.batch_commits, 3);
    assert_int_equal(f.napplied, 4);
    committer_destroy(c);
}

static void lazy_ops_keep_their_order_after_a_commit(void **state)
{
    (void)state;
    struct fake f;
    struct committer *c = start(&f);
    struct nop first, lazy1, lazy2, waited;
    nop_init(&first, 1);
    nop_init(&lazy1, 2);
    nop_init(&lazy2, 3);
    nop_init(&waited, 4);
    committer_submit(c, &first.op);
    assert_true(wait_done(&first));
    committer_submit_lazy(c, &lazy1.op, LONG_NS);
    committer_submit_lazy(c, &lazy2.op, LONG_NS);
    committer_submit(c, &waited.op);
    assert_true(wait_done(&waited));
    assert_true(wait_done(&lazy1));
    assert_true(wait_done(&lazy2));
    assert_int_equal(f.commits, 2);
    assert_int_equal(f.napplied, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(f.order[i], i + 1);
    assert_int_equal(lazy1.batch_commits, 2);
    assert_int_equal(lazy2.batch_commits, 2);
    committer_destroy(c);
}

static void stopping_commits_lazy_ops_at_once(void **state)
{
    (void)state;
    struct fake f;
    struct committer *c = start(&f);
    struct nop lazy;
    nop_init(&lazy, 1);
    committer_submit_lazy(c, &lazy.op, LONG_NS);
    committer_destroy(c); /* returns only once the thread is done */
    assert_true(wait_done(&lazy));
    assert_int_equal(lazy.rc, 0);
    assert_int_equal(f.commits, 1);
}

/* An op whose apply posts `entered`, then holds the committer thread until
 * the test posts `gate`. */
struct gated {
    struct nop n;
    sem_t entered, gate;
};

static int gated_apply(struct store *s, struct commit_op *op)
{
    struct gated *g = (struct gated *)op;
    sem_post(&g->entered);
    sem_wait(&g->gate);
    return nop_apply(s, op);
}

/* Polls committer_idle until it reads `want` (bounded, 10 s). */
static bool idle_becomes(struct committer *c, bool want)
{
    int64_t until = clock_mono_ns() + 10 * NS_PER_S;
    while (committer_idle(c) != want)
        if (clock_mono_ns() > until)
            return false;
        else
            sched_yield();
    return true;
}

/* committer_idle, which the head reads to hand a job to the dispatcher while
 * its insert commits: true while the thread waits (even with a lazy op not
 * yet due), false while a transaction runs. */
static void idle_only_while_nothing_is_to_commit(void **state)
{
    (void)state;
    struct fake f;
    struct committer *c = start(&f);
    assert_true(idle_becomes(c, true));
    struct gated g;
    nop_init(&g.n, 1);
    g.n.op.apply = gated_apply;
    sem_init(&g.entered, 0, 0);
    sem_init(&g.gate, 0, 0);
    committer_submit(c, &g.n.op);
    assert_true(sem_wait_10s(&g.entered));
    assert_false(committer_idle(c)); /* in the transaction, until the gate opens */
    sem_post(&g.gate);
    assert_true(wait_done(&g.n));
    assert_true(idle_becomes(c, true));
    struct nop lazy;
    nop_init(&lazy, 2);
    committer_submit_lazy(c, &lazy.op, LONG_NS);
    assert_true(idle_becomes(c, true));
    assert_int_equal(f.commits, 1);
    committer_destroy(c);
    assert_true(wait_done(&lazy));
    assert_int_equal(f.commits, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lazy_rides_with_the_next_waited_op),
        cmocka_unit_test(lazy_alone_commits_after_its_delay),
        cmocka_unit_test(lazy_ops_commit_on_time_while_the_committer_wakes_by_itself),
        cmocka_unit_test(lazy_ops_keep_their_order_after_a_commit),
        cmocka_unit_test(stopping_commits_lazy_ops_at_once),
        cmocka_unit_test(idle_only_while_nothing_is_to_commit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
