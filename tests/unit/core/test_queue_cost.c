/* test_queue_cost.c: the queues' incremental cost bookkeeping (the per-list
 * cost trees behind job_queue_cost / job_queue_cost_ahead, and the
 * scheduler's work ahead of a queued job built on them) agrees with a sum
 * from scratch over the FIFO lists, after every step of long random sequences
 * of adds, placements, starts, ends, cancels, promotions and lost workers;
 * and, once the projections are refreshed, ETA reads change nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/queue.h"
#include "core/sched.h"
#include "core/sched_int.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

static bool before(const struct sjob *o, const struct sjob *j)
{
    return sjob_order(o) < sjob_order(j) ||
           (sjob_order(o) == sjob_order(j) && o->spec.id < j->spec.id);
}

/* From scratch: the cost of list l, and of its jobs before (order, id) of j. */
static double scratch_list(const struct job_queue *q, int l, const struct sjob *j)
{
    double sum = 0;
    for (const struct sjob *o = q->head[l]; o; o = o->next)
        if (!j || before(o, j))
            sum += o->cost_s;
    return sum;
}

static void check_queue(const struct job_queue *q, struct sjob *jobs, const bool *in, int n)
{
    int count = 0;
    for (int l = 0; l < JOB_QUEUE_LISTS; l++) {
        for (const struct sjob *o = q->head[l]; o; o = o->next)
            count++;
        assert_true(fabs(job_queue_cost(q, l) - scratch_list(q, l, NULL)) < 1e-6);
    }
    assert_int_equal(count, q->count);
    for (int i = 0; i < n; i++) {
        if (!in[i])
            continue;
        struct sjob *j = &jobs[i];
        double want = scratch_list(q, j->qlist, j);
        double got = job_queue_cost_ahead(q, j->qlist, sjob_order(j), j->spec.id);
        assert_true(fabs(got - want) < 1e-6);
    }
}

/* The job_queue alone: pushes (in order and out of order), pushes to the
 * front, removals and serves. */
static void test_queue_random(void **state)
{
    (void)state;
    enum { N = 400 };
    static struct sjob jobs[N];
    bool in[N] = {false};
    struct job_queue q;
    job_queue_init(&q, 4);
    memset(jobs, 0, sizeof(jobs));
    for (int i = 0; i < N; i++) {
        jobs[i].spec.id = (uint64_t)i + 1;
        jobs[i].spec.lane = (enum sched_lane)rnd(2);
        jobs[i].spec.tier = (enum sched_tier)rnd(2);
        jobs[i].cost_s = 0.5 + rnd(1000) / 100.0;
    }
    for (int step = 0; step < 6000; step++) {
        int i = (int)rnd(N);
        struct sjob *j = &jobs[i];
        if (!in[i]) {
            /* Mostly arrival order; some tags further forward; equal keys too. */
            j->spec.submit_ns = step * 10 - (rnd(4) == 0 ? (int64_t)rnd(500) : 0);
            j->spec.order_ns = rnd(5) == 0 ? (int64_t)rnd(30000) : 0;
            if (rnd(8) == 0)
                job_queue_push_front(&q, j);
            else
                job_queue_push(&q, j);
            in[i] = true;
        } else if (rnd(2) == 0) {
            job_queue_remove(&q, j);
            in[i] = false;
        } else {
            struct sjob *h = job_queue_peek(&q);
            assert_non_null(h);
            job_queue_served(&q, h);
            in[h - jobs] = false;
        }
        if (step % 7 == 0)
            check_queue(&q, jobs, in, N);
    }
    check_queue(&q, jobs, in, N);
}

/* Pushes keep each list in order of key, equal keys in arrival order, however
 * far forward a key goes (a light tenant's fair-queuing tag). */
static void test_queue_push_order(void **state)
{
    (void)state;
    enum { N = 3000 };
    static struct sjob jobs[N];
    struct job_queue q;
    job_queue_init(&q, 4);
    memset(jobs, 0, sizeof(jobs));
    for (int i = 0; i < N; i++) {
        jobs[i].spec.id = (uint64_t)i + 1;
        jobs[i].spec.lane = SCHED_LANE_BATCH;
        jobs[i].cost_s = 1;
        /* A heavy tenant's tags climb; every 10th job's tag is far back. */
        jobs[i].spec.order_ns = i % 10 == 0 ? (int64_t)rnd(N) * 5 + 1 : (int64_t)i * 10 + 1;
        job_queue_push(&q, &jobs[i]);
    }
    int n = 0;
    int l = SCHED_LANE_BATCH * 2 + SCHED_TIER_PAID;
    for (const struct sjob *o = q.head[l]; o; o = o->next, n++)
        if (o->next) {
            assert_true(sjob_order(o) <= sjob_order(o->next));
            if (sjob_order(o) == sjob_order(o->next))
                assert_true(o->spec.id < o->next->spec.id);
        }
    assert_int_equal(n, N);
    assert_ptr_equal(q.tail[l]->next, NULL);
    assert_true(fabs(job_queue_cost(&q, l) - N) < 1e-9);
}

/* ---- the scheduler's work ahead ----------------------------------------- */

static const char *const caps[] = {"image.fast", "image.hq", "video"};
static const char *const models[] = {"image-v2", "image-hq", "video"};

static void mk_worker(struct worker_info *w, int k)
{
    memset(w, 0, sizeof(*w));
    snprintf(w->id, sizeof(w->id), "gpu%d", k);
    snprintf(w->gpu_class, sizeof(w->gpu_class), "RTX 5090");
    /* Workers share some capabilities, not all. */
    for (int c = 0; c < 3; c++)
        if (c == k % 3 || c == (k + 1) % 3)
            snprintf(w->caps[w->ncaps++], SCHED_NAME_MAX, "%s", caps[c]);
    w->concurrency = 1 + k % 2;
    w->vram_total_mb = 81920;
    w->vram_free_mb = 81920;
    w->temp_c = 50;
    w->speed = 1.0;
    w->healthy = true;
}

static void lost_cb(uint64_t id, void *arg)
{
    (void)id;
    (void)arg;
}

/* Work ahead of j from scratch: every job of a marked capability's queues in
 * a higher list, or in j's list with a smaller (order key, id). */
static double scratch_ahead(const struct sched *s, const struct sjob *j, const bool *shares)
{
    double sum = 0;
    for (int k = 0; k < s->nqueues; k++) {
        const struct squeue *q = &s->queues[k];
        if (!shares[q->cap])
            continue;
        for (int l = 0; l < j->qlist; l++)
            sum += scratch_list(&q->q, l, NULL);
        sum += scratch_list(&q->q, j->qlist, j);
    }
    return sum;
}

static void check_sched(struct sched *s, int64_t now)
{
    bool all[64], own[64];
    assert_true(s->ncaps <= 64);
    /* Once refreshed, ETA reads write nothing (gpuqd runs them under a shared lock). */
    sched_refresh(s, now);
    assert_true(sched_fresh(s));
    size_t pos = 0;
    void *v;
    int queued = 0;
    while (hashmap_next(&s->jobs, &pos, NULL, NULL, &v)) {
        struct sjob *j = v;
        if (j->state != SJOB_QUEUED)
            continue;
        queued++;
        for (int c = 0; c < s->ncaps; c++) {
            all[c] = true;
            own[c] = c == j->cap;
        }
        assert_true(fabs(sched_work_ahead(s, j, all) - scratch_ahead(s, j, all)) < 1e-6);
        assert_true(fabs(sched_work_ahead(s, j, own) - scratch_ahead(s, j, own)) < 1e-6);
        double st, fin;
        assert_int_equal(sched_job_eta(s, j->spec.id, now, &st, &fin), 0);
    }
    assert_int_equal(queued, s->nqueued);
    assert_true(sched_fresh(s));
}

static void test_sched_random(void **state)
{
    (void)state;
    struct sched_config cfg;
    sched_config_defaults(&cfg);
    struct sched *s = sched_create(&cfg);
    for (int m = 0; m < 3; m++) {
        struct model_info mi = {"", 8192 * (m + 1), 4000, MODEL_GENERATION};
        snprintf(mi.name, sizeof(mi.name), "%s", models[m]);
        assert_int_equal(sched_model_set(s, &mi), 0);
        assert_int_equal(sched_model_prior(s, models[m], 1.0 + m, 0, 0, 0, 0), 0);
    }
    enum { W = 4 };
    bool up[W] = {false};
    int64_t now = 1000000000;
    uint64_t next_id = 1;
    for (int step = 0; step < 4000; step++) {
        now += (int64_t)rnd(200) * 1000000;
        uint32_t op = rnd(100);
        if (op < 45) { /* add */
            struct job_spec js;
            memset(&js, 0, sizeof(js));
            js.id = next_id++;
            int c = (int)rnd(3);
            snprintf(js.capability, sizeof(js.capability), "%s", caps[c]);
            snprintf(js.model, sizeof(js.model), "%s", models[rnd(4) == 0 ? rnd(3) : (uint32_t)c]);
            js.lane = (enum sched_lane)rnd(2);
            js.tier = (enum sched_tier)rnd(2);
            js.steps = 1 + rnd(40);
            js.submit_ns = now - (rnd(5) == 0 ? (int64_t)rnd(1000) * 1000000 : 0);
            js.order_ns = js.lane == SCHED_LANE_BATCH && rnd(2) ? now + (int64_t)rnd(5000) : 0;
            assert_int_equal(sched_job_add(s, &js, now), 0);
        } else if (op < 55) { /* workers come and go (placed jobs go back to the front) */
            int k = (int)rnd(W);
            if (up[k] && rnd(3) == 0) {
                char id[16];
                snprintf(id, sizeof(id), "gpu%d", k);
                assert_int_equal(sched_worker_remove(s, id, now, lost_cb, NULL), 0);
                up[k] = false;
            } else {
                struct worker_info w;
                mk_worker(&w, k);
                w.healthy = rnd(6) != 0;
                assert_int_equal(sched_worker_update(s, &w, now), 0);
                up[k] = true;
            }
        } else if (op < 70) { /* dispatch, then workers start what they have */
            sched_dispatch(s, now, NULL, NULL);
            for (int k = 0; k < W; k++) {
                char id[16];
                snprintf(id, sizeof(id), "gpu%d", k);
                uint64_t jid;
                if (up[k] && rnd(2))
                    sched_take(s, id, now, &jid);
            }
        } else if (op < 85 && next_id > 1) { /* a job ends or is cancelled */
            uint64_t id = 1 + rnd((uint32_t)(next_id - 1));
            struct sjob *j = hashmap_get_u64(&s->jobs, id);
            if (j && j->state == SJOB_RUNNING && rnd(2))
                sched_job_finished(s, id, rnd(4) != 0, 0, (int64_t)(1 + rnd(3)) * 1000000000,
                                   now);
            else if (j)
                sched_job_cancel(s, id, now);
        } else if (next_id > 1) { /* promotion */
            sched_job_promote(s, 1 + rnd((uint32_t)(next_id - 1)), now);
        }
        if (step % 5 == 0)
            check_sched(s, now);
    }
    check_sched(s, now);
    sched_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_random),
        cmocka_unit_test(test_queue_push_order),
        cmocka_unit_test(test_sched_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
