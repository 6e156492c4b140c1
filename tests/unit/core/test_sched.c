/* test_sched.c: the scheduler's rules with scripted state and time — affinity
 * vs cold loads by completion time, thermal penalty, measured speed, mixed
 * VRAM, utility bursts that must not evict the generation model, late binding
 * (moves to a GPU that frees, and off a failed one), retries that leave the
 * GPU that failed them once another can run them, explanations, lost
 * workers, load-ratio tie-break, queue tiers, long jobs that wait for their
 * model's GPU rather than push out a model in demand and take the slower GPU
 * when they must, jobs that start now on an idle cold GPU rather than
 * wait within as long again, jobs with a latency objective that wait for
 * their model's GPU while that keeps them in time, batch jobs that starve
 * behind the interactive headroom, batch jobs that leave a model few
 * GPUs can hold to its jobs (and its last copy even when starving), and
 * batch jobs near their objective that go with the interactive lane. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "core/headroom.h"
#include "core/preempt.h"
#include "core/queue.h"
#include "core/sched_int.h"
#include "core/sched.h"

#define S(x) ((int64_t)((x) * 1e9))

/* mk_sched: the defaults, spelled out (two placed jobs per GPU, R20;
 * eviction weight 1); mk_sched_cfg: a given config (late binding only). */
static struct sched *mk_sched_cfg(const struct sched_config *cfg);

static struct sched *mk_sched(void)
{
    struct sched_config cfg;
    sched_config_defaults(&cfg);
    cfg.queue_depth = 2;
    cfg.evict_weight = 1.0;
    return mk_sched_cfg(&cfg);
}

static struct sched *mk_sched_cfg(const struct sched_config *cfg)
{
    struct sched *s = sched_create(cfg);
    struct model_info models[] = {
        {"image-v2", 22528, 5000, MODEL_GENERATION},
        {"image-hq", 8192, 4000, MODEL_GENERATION},
        {"video", 28672, 10000, MODEL_GENERATION},
        {"rembg", 1536, 1500, MODEL_UTILITY},
    };
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
        assert_int_equal(sched_model_set(s, &models[i]), 0);
    assert_int_equal(sched_model_prior(s, "image-v2", 2.5, 1024, 1024, 8, 0), 0);
    assert_int_equal(sched_model_prior(s, "image-hq", 6.0, 1024, 1024, 30, 0), 0);
    assert_int_equal(sched_model_prior(s, "video", 75, 0, 0, 0, 0), 0);
    assert_int_equal(sched_model_prior(s, "rembg", 0.5, 0, 0, 0, 0), 0);
    return s;
}

static void mk_worker(struct worker_info *w, const char *id, int64_t vram)
{
    memset(w, 0, sizeof(*w));
    snprintf(w->id, sizeof(w->id), "%s", id);
    snprintf(w->gpu_class, sizeof(w->gpu_class), "RTX 5090");
    const char *caps[] = {"image.fast", "image.hq", "video", "rembg"};
    for (int i = 0; i < 4; i++)
        snprintf(w->caps[w->ncaps++], SCHED_NAME_MAX, "%s", caps[i]);
    w->concurrency = 1;
    w->vram_total_mb = vram;
    w->vram_free_mb = vram;
    w->temp_c = 50;
    w->speed = 1.0;
    w->healthy = true;
}

static void load(struct worker_info *w, const char *model, int64_t mb)
{
    struct loaded_model *lm = &w->loaded[w->nloaded++];
    snprintf(lm->name, sizeof(lm->name), "%s", model);
    lm->vram_mb = mb;
    w->vram_free_mb -= mb;
}

static void mk_job(struct job_spec *j, uint64_t id, const char *cap, const char *model, int scale)
{
    memset(j, 0, sizeof(*j));
    j->id = id;
    snprintf(j->capability, sizeof(j->capability), "%s", cap);
    snprintf(j->model, sizeof(j->model), "%s", model);
    if (strcmp(model, "image-v2") == 0) {
        j->width = 1024 * (uint32_t)scale;
        j->height = 1024;
        j->steps = 8;
    }
}

/* Records the last placement and counts placements per worker. */
struct rec {
    uint64_t job;
    char worker[SCHED_NAME_MAX];
    struct sched_explain why;
    int n;
    int per_worker[4]; /* by the digit at the end of the id */
};

static void on_placed(uint64_t job, const char *worker, const struct sched_explain *why, void *arg)
{
    struct rec *r = arg;
    r->job = job;
    snprintf(r->worker, sizeof(r->worker), "%s", worker);
    r->why = *why;
    r->n++;
    size_t l = strlen(worker);
    if (l && worker[l - 1] >= '0' && worker[l - 1] <= '3')
        r->per_worker[worker[l - 1] - '0']++;
}

static void add(struct sched *s, uint64_t id, const char *cap, const char *model, int scale,
                int64_t now)
{
    struct job_spec j;
    mk_job(&j, id, cap, model, scale);
    j.submit_ns = now;
    assert_int_equal(sched_job_add(s, &j, now), 0);
}

/* Video is asked for (a job comes and goes), so its model is in demand. */
static void ask_for_video(struct sched *s)
{
    add(s, 100, "video", "video", 1, 0);
    assert_int_equal(sched_job_cancel(s, 100, 0), 0);
}

/* gpu0 (64 GiB) holding image-v2 and `model`, running image job 1 since 0. */
static void gpu0_runs_image(struct sched *s, const char *model, int mib, struct rec *r)
{
    struct worker_info w;
    mk_worker(&w, "gpu0", 65536);
    load(&w, "image-v2", 22528);
    load(&w, model, mib);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    uint64_t id;
    add(s, 1, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, r), 1);
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    assert_int_equal(id, 1);
}

/* A batch job of one image's scale, submitted and added at t. */
static void add_batch(struct sched *s, uint64_t id, const char *cap, const char *model, int64_t t)
{
    struct job_spec j;
    mk_job(&j, id, cap, model, 1);
    j.lane = SCHED_LANE_BATCH;
    j.submit_ns = t;
    assert_int_equal(sched_job_add(s, &j, t), 0);
}

/* A 6 s batch image-hq job (1024x1024, 30 steps) submitted at 0. */
static void add_batch_hq(struct sched *s, uint64_t id)
{
    struct job_spec j;
    mk_job(&j, id, "image.hq", "image-hq", 1);
    j.width = 1024;
    j.height = 1024;
    j.steps = 30;
    j.lane = SCHED_LANE_BATCH;
    j.submit_ns = 0;
    assert_int_equal(sched_job_add(s, &j, 0), 0);
}

static const struct sched_candidate *cand_of(const struct sched_explain *why, const char *id)
{
    for (int i = 0; i < why->nkept; i++)
        if (strcmp(why->cand[i].worker_id, id) == 0)
            return &why->cand[i];
    return NULL;
}

/* Two GPUs: gpu0 warm (image-v2), gpu1 empty. */
static struct sched *warm_and_cold(void)
{
    struct sched *s = mk_sched();
    struct worker_info w;
    mk_worker(&w, "gpu0", 32768);
    load(&w, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    mk_worker(&w, "gpu1", 32768);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    return s;
}

static void test_affinity_beats_idle_cold_when_warm_frees_sooner(void **state)
{
    (void)state;
    struct sched *s = warm_and_cold();
    struct rec r = {0};
    uint64_t id;
    add(s, 1, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu0");
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    /* 1.5 s later gpu0 frees in ~1 s; a load on gpu1 costs 5 s. */
    add(s, 2, "image.fast", "image-v2", 1, S(1.5));
    assert_int_equal(sched_dispatch(s, S(1.5), on_placed, &r), 1);
    assert_int_equal(r.job, 2);
    assert_string_equal(r.worker, "gpu0");
    assert_string_equal(r.why.winner, "gpu0");
    const struct sched_candidate *w = cand_of(&r.why, "gpu0"), *c = cand_of(&r.why, "gpu1");
    assert_non_null(w);
    assert_non_null(c);
    assert_true(w->warm);
    assert_false(c->warm);
    assert_float_equal(w->wait_s, 1.0, 1e-6);
    assert_float_equal(c->load_s, 5.0, 1e-6);
    assert_true(w->score_s < c->score_s);
    assert_non_null(strstr(r.why.reason, "warm"));
    sched_destroy(s);
}

static void test_cold_gpu_wins_when_wait_is_longer(void **state)
{
    (void)state;
    struct sched *s = warm_and_cold();
    struct rec r = {0};
    uint64_t id;
    add(s, 1, "image.fast", "image-v2", 16, 0); /* 16x the pixels: ~40 s */
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu0");
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    add(s, 2, "image.fast", "image-v2", 1, S(1));
    assert_int_equal(sched_dispatch(s, S(1), on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu1");
    const struct sched_candidate *w = cand_of(&r.why, "gpu1");
    assert_false(w->warm);
    assert_float_equal(w->score_s, 5.0 + 2.5, 1e-6);
    assert_non_null(strstr(r.why.reason, "cold load"));
    sched_destroy(s);
}

static void test_hot_gpu_penalized_and_throttled_speed_used(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info a, b;
    mk_worker(&a, "gpu0", 32768);
    load(&a, "image-v2", 22528);
    mk_worker(&b, "gpu1", 32768);
    load(&b, "image-v2", 22528);
    a.temp_c = 85;
    assert_int_equal(sched_worker_update(s, &a, 0), 0);
    assert_int_equal(sched_worker_update(s, &b, 0), 0);
    struct rec r = {0};
    uint64_t id;
    /* Both busy with a 2.5 s job since t=0. */
    add(s, 1, "image.fast", "image-v2", 1, 0);
    add(s, 2, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 2);
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    assert_int_equal(sched_take(s, "gpu1", 0, &id), 0);
    add(s, 3, "image.fast", "image-v2", 1, S(1));
    assert_int_equal(sched_dispatch(s, S(1), on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu1");
    const struct sched_candidate *hot = cand_of(&r.why, "gpu0");
    assert_float_equal(hot->thermal_factor, 2.0, 1e-9);
    assert_float_equal(hot->score_s, 1.5 * 2 + 2.5, 1e-6);

    /* Idle, both warm: the throttled GPU's measured speed lengthens its run. */
    struct sched *s2 = mk_sched();
    a.temp_c = 84;
    a.throttling = true;
    a.speed = 0.8;
    assert_int_equal(sched_worker_update(s2, &a, 0), 0);
    assert_int_equal(sched_worker_update(s2, &b, 0), 0);
    struct rec r2 = {0};
    add(s2, 1, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s2, 0, on_placed, &r2), 1);
    assert_string_equal(r2.worker, "gpu1");
    assert_float_equal(cand_of(&r2.why, "gpu0")->run_s, 2.5 / 0.8, 1e-6);
    sched_destroy(s2);
    sched_destroy(s);
}

static void test_mixed_vram_eviction_and_filter(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info a, b;
    mk_worker(&a, "gpu0", 32768);
    load(&a, "video", 28672); /* image-v2 (22 GB) cannot share with it */
    mk_worker(&b, "gpu1", 16384); /* too small for image-v2 at all */
    assert_int_equal(sched_worker_update(s, &a, 0), 0);
    assert_int_equal(sched_worker_update(s, &b, 0), 0);
    struct rec r = {0};
    /* A video job was asked for (and cancelled): the model has demand. */
    add(s, 9, "video", "video", 1, 0);
    assert_int_equal(sched_job_cancel(s, 9, 0), 0);
    add(s, 1, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu0");
    assert_int_equal(r.why.filtered_vram, 1);
    assert_int_equal(r.why.ncandidates, 1);
    const struct sched_candidate *c = &r.why.cand[0];
    assert_false(c->warm);
    assert_int_equal(c->evictions, 1);
    assert_float_equal(c->load_s, 5.0, 1e-6);
    /* Evicting the video model costs its 10 s reload as the slowdown it adds
     * to a 75 s video job, in this 2.5 s job's seconds: 10 x 2.5 / 75. */
    assert_float_equal(c->evict_penalty_s, 10.0 * 2.5 / 75, 1e-6);
    /* The core mirrors the agent: after the take, video is gone, image-v2 resident. */
    uint64_t id;
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    add(s, 2, "video", "video", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_false(r.why.cand[0].warm);
    sched_destroy(s);
}

static void test_utility_burst_does_not_evict_generation_model(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info a, b;
    mk_worker(&a, "gpu0", 32768);
    load(&a, "image-v2", 22528);
    load(&a, "image-hq", 8192);
    a.vram_free_mb = 1000; /* full: a utility needs a generation model gone */
    mk_worker(&b, "gpu1", 32768);
    load(&b, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &a, 0), 0);
    assert_int_equal(sched_worker_update(s, &b, 0), 0);
    /* The generation models are in demand (jobs asked for them). */
    add(s, 100, "image.fast", "image-v2", 1, 0);
    add(s, 101, "image.hq", "image-hq", 1, 0);
    assert_int_equal(sched_job_cancel(s, 100, 0), 0);
    assert_int_equal(sched_job_cancel(s, 101, 0), 0);
    for (uint64_t i = 1; i <= 8; i++)
        add(s, i, "rembg", "rembg", 1, 0);
    struct rec r = {0};
    int64_t now = 0;
    int done = 0;
    for (int round = 0; round < 20 && done < 8; round++) {
        sched_dispatch(s, now, on_placed, &r);
        uint64_t id;
        assert_int_equal(sched_take(s, "gpu0", now, &id), GPUQ_EAGAIN);
        if (sched_take(s, "gpu1", now, &id) == 0) {
            now += S(round == 0 ? 2.0 : 0.5); /* first run pays the 1.5 s load */
            assert_int_equal(
                sched_job_finished(s, id, true, round == 0 ? S(1.5) : 0, S(0.5), now), 0);
            done++;
        }
    }
    assert_int_equal(done, 8);
    assert_int_equal(r.per_worker[0], 0);
    assert_int_equal(r.per_worker[1], 8);
    struct sched_stats st;
    sched_stats(s, &st);
    assert_true(st.holds > 0);
    sched_destroy(s);
}

static void test_late_binding_moves_to_a_gpu_that_frees(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info a, b;
    mk_worker(&a, "gpu0", 32768);
    load(&a, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &a, 0), 0);
    struct rec r = {0};
    uint64_t id;
    add(s, 1, "image.fast", "image-v2", 16, 0);
    add(s, 2, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 2);
    assert_int_equal(r.job, 2);
    assert_string_equal(r.worker, "gpu0"); /* behind the 40 s job: the only GPU */
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    assert_int_equal(id, 1);
    /* A warm GPU joins: the placed job moves to it before starting. */
    mk_worker(&b, "gpu1", 32768);
    load(&b, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &b, S(1)), 0);
    assert_int_equal(sched_dispatch(s, S(1), on_placed, &r), 1);
    assert_int_equal(r.job, 2);
    assert_string_equal(r.worker, "gpu1");
    assert_non_null(strstr(r.why.reason, "late binding"));
    assert_int_equal(sched_take(s, "gpu1", S(1), &id), 0);
    assert_int_equal(id, 2);
    struct sched_stats st;
    sched_stats(s, &st);
    assert_int_equal(st.moves, 1);
    sched_destroy(s);
}

static void test_late_binding_off_a_failed_gpu(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info a, b;
    mk_worker(&a, "gpu0", 32768);
    load(&a, "image-v2", 22528);
    mk_worker(&b, "gpu1", 32768);
    assert_int_equal(sched_worker_update(s, &a, 0), 0);
    assert_int_equal(sched_worker_update(s, &b, 0), 0);
    struct rec r = {0};
    add(s, 1, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu0");
    /* gpu0 turns unhealthy before taking it: the job goes back and on to gpu1. */
    a.healthy = false;
    assert_int_equal(sched_worker_update(s, &a, S(0.1)), 0);
    struct sched_stats st;
    sched_stats(s, &st);
    assert_int_equal(st.queued, 1);
    assert_int_equal(st.placed, 0);
    assert_int_equal(sched_dispatch(s, S(0.1), on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu1");
    assert_int_equal(r.why.filtered_unhealthy, 1);
    sched_destroy(s);
}

static void on_lost(uint64_t id, void *arg)
{
    uint64_t *out = arg;
    *out = id;
}

static void test_worker_remove_reports_running_requeues_placed(void **state)
{
    (void)state;
    struct sched *s = warm_and_cold();
    struct rec r = {0};
    uint64_t id, lost = 0;
    add(s, 1, "image.fast", "image-v2", 1, 0);
    add(s, 2, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 2);
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    assert_int_equal(id, 1);
    struct sched_stats st;
    sched_stats(s, &st);
    assert_int_equal(st.running, 1);
    assert_int_equal(sched_worker_remove(s, "gpu0", S(1), on_lost, &lost), 0);
    assert_int_equal(lost, 1);
    sched_stats(s, &st);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.workers, 1);
    assert_int_equal(st.queued + st.placed, 1);
    /* The lost job may come back (retry) under the same id, avoiding gpu0. */
    struct job_spec j;
    mk_job(&j, 1, "image.fast", "image-v2", 1);
    const char excl[1][SCHED_NAME_MAX] = {"gpu0"};
    j.exclude = excl;
    j.nexclude = 1;
    assert_int_equal(sched_job_add(s, &j, S(1)), 0);
    assert_int_equal(sched_job_add(s, &j, S(1)), GPUQ_EEXIST);
    sched_dispatch(s, S(1), on_placed, &r);
    assert_int_equal(sched_take(s, "gpu1", S(1), &id), 0);
    assert_int_equal(sched_worker_remove(s, "nope", 0, NULL, NULL), GPUQ_ENOENT);
    sched_destroy(s);
}

static void test_explanation_lists_every_candidate(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info w;
    for (int i = 0; i < 7; i++) {
        char id[16];
        snprintf(id, sizeof(id), "g%d", i);
        mk_worker(&w, id, 32768);
        if (i % 2 == 0)
            load(&w, "image-v2", 22528);
        w.temp_c = 60 + i * 4;
        if (i == 5)
            w.healthy = false;
        if (i == 6) {
            w.ncaps = 1;
            snprintf(w.caps[0], SCHED_NAME_MAX, "video");
        }
        assert_int_equal(sched_worker_update(s, &w, 0), 0);
    }
    struct rec r = {0};
    add(s, 1, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_int_equal(r.why.job_id, 1);
    assert_int_equal(r.why.ncandidates, 5);
    assert_int_equal(r.why.nkept, 5);
    assert_int_equal(r.why.filtered_unhealthy, 1);
    assert_int_equal(r.why.filtered_capability, 1);
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof(id), "g%d", i);
        assert_non_null(cand_of(&r.why, id));
        if (i > 0)
            assert_true(r.why.cand[i - 1].score_s <= r.why.cand[i].score_s);
    }
    assert_string_equal(r.why.winner, r.why.cand[0].worker_id);
    assert_true(r.why.cand[0].warm);
    assert_true(strlen(r.why.reason) > 0);
    /* Nothing can take a capability no GPU has: the job stays queued, explained. */
    add(s, 2, "audio", "", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 0);
    struct sched_stats st;
    sched_stats(s, &st);
    assert_int_equal(st.queued, 1);
    sched_destroy(s);
}

static void test_load_ratio_breaks_ties(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info a, b;
    mk_worker(&a, "gpu0", 32768);
    load(&a, "image-v2", 22528);
    a.concurrency = 2;
    mk_worker(&b, "gpu1", 32768);
    load(&b, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &a, 0), 0);
    assert_int_equal(sched_worker_update(s, &b, 0), 0);
    struct rec r = {0};
    uint64_t id;
    add(s, 1, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu0"); /* full tie: registration order */
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    /* gpu0 has a free slot (same completion time) but load ratio 0.5 vs 0. */
    add(s, 2, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu1");
    assert_non_null(strstr(r.why.reason, "tie"));
    sched_destroy(s);
}

static void test_estimates_learn_from_finished_runs(void **state)
{
    (void)state;
    struct sched *s = warm_and_cold();
    struct job_spec j;
    mk_job(&j, 99, "image.fast", "image-v2", 1);
    assert_float_equal(sched_estimate_cost(s, &j), 2.5, 1e-9);
    uint64_t id;
    int64_t now = 0;
    for (uint64_t i = 1; i <= 30; i++) {
        add(s, i, "image.fast", "image-v2", 1, now);
        sched_dispatch(s, now, NULL, NULL);
        assert_int_equal(sched_take(s, "gpu0", now, &id), 0);
        now += S(4);
        assert_int_equal(sched_job_finished(s, id, true, 0, S(4), now), 0);
    }
    assert_float_equal(sched_estimate_cost(s, &j), 4.0, 0.05);
    /* Twice the pixels: twice the estimate. */
    mk_job(&j, 100, "image.fast", "image-v2", 2);
    assert_float_equal(sched_estimate_cost(s, &j), 8.0, 0.1);
    double st, fin;
    add(s, 200, "image.fast", "image-v2", 1, now);
    sched_dispatch(s, now, NULL, NULL);
    assert_int_equal(sched_job_eta(s, 200, now, &st, &fin), 0);
    assert_float_equal(st, 0, 1e-9);
    assert_float_equal(fin, 4.0, 0.05);
    assert_int_equal(sched_job_finished(s, 200, true, 0, 1, now), GPUQ_ECONFLICT);
    assert_int_equal(sched_job_cancel(s, 200, now), 0);
    assert_int_equal(sched_job_cancel(s, 200, now), GPUQ_ENOENT);
    sched_destroy(s);
}

static void test_queue_paid_first_free_not_starved(void **state)
{
    (void)state;
    struct job_queue q;
    job_queue_init(&q, 4);
    struct sjob jobs[12];
    memset(jobs, 0, sizeof(jobs));
    for (int i = 0; i < 12; i++) {
        jobs[i].spec.id = (uint64_t)i;
        jobs[i].spec.tier = i < 8 ? SCHED_TIER_PAID : SCHED_TIER_FREE;
        jobs[i].spec.lane = SCHED_LANE_INTERACTIVE;
        job_queue_push(&q, &jobs[i]);
    }
    struct sjob batch;
    memset(&batch, 0, sizeof(batch));
    batch.spec.id = 100;
    batch.spec.lane = SCHED_LANE_BATCH;
    job_queue_push(&q, &batch);
    int order[13];
    for (int i = 0; i < 13; i++) {
        struct sjob *j = job_queue_peek(&q);
        order[i] = (int)j->spec.id;
        job_queue_served(&q, j);
    }
    assert_null(job_queue_peek(&q));
    /* Three paid, one free, three paid, one free..., batch last. */
    int want[13] = {0, 1, 2, 8, 3, 4, 5, 9, 6, 7, 10, 11, 100};
    for (int i = 0; i < 13; i++)
        assert_int_equal(order[i], want[i]);
}

static void test_bad_input(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info w;
    mk_worker(&w, "gpu0", 32768);
    w.concurrency = 0;
    assert_int_equal(sched_worker_update(s, &w, 0), GPUQ_EINVAL);
    struct job_spec j;
    mk_job(&j, 1, "", "image-v2", 1);
    assert_int_equal(sched_job_add(s, &j, 0), GPUQ_EINVAL);
    uint64_t id;
    assert_int_equal(sched_take(s, "ghost", 0, &id), GPUQ_ENOENT);
    assert_int_equal(sched_job_finished(s, 42, true, 0, 0, 0), GPUQ_ENOENT);
    sched_destroy(s);
}


static void add_excl(struct sched *s, uint64_t id, const char (*ex)[SCHED_NAME_MAX], int n,
                     int64_t now)
{
    struct job_spec j;
    mk_job(&j, id, "image.fast", "image-v2", 1);
    j.submit_ns = now;
    j.exclude = ex;
    j.nexclude = n;
    assert_int_equal(sched_job_add(s, &j, now), 0);
}

static void test_exclusion_list_avoids_every_failed_worker(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info w;
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof(id), "gpu%d", i);
        mk_worker(&w, id, 32768);
        if (i < 2)
            load(&w, "image-v2", 22528); /* gpu0, gpu1 warm: they would win */
        assert_int_equal(sched_worker_update(s, &w, 0), 0);
    }
    struct rec r = {0};
    {
        /* The list is borrowed: gone after the call, the copy stays. */
        char ex[2][SCHED_NAME_MAX] = {"gpu0", "gpu1"};
        add_excl(s, 1, (const char(*)[SCHED_NAME_MAX])ex, 2, 0);
        memset(ex, 0, sizeof(ex));
    }
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu2");
    /* gpu2 is busy (running and its queue full): the job excluding gpu0 and
     * gpu1 waits for it rather than run again where it failed. */
    uint64_t id;
    assert_int_equal(sched_take(s, "gpu2", 0, &id), 0);
    add(s, 2, "image.fast", "image-v2", 1, 0);
    add(s, 3, "image.fast", "image-v2", 1, 0);
    const char ex01[2][SCHED_NAME_MAX] = {"gpu0", "gpu1"};
    add_excl(s, 4, ex01, 2, S(1));
    add_excl(s, 5, ex01, 2, S(1));
    add_excl(s, 6, ex01, 2, S(1));
    r.n = 0;
    sched_dispatch(s, S(1), on_placed, &r);
    int onex = 0;
    for (uint64_t k = 4; k <= 6; k++) {
        double st, fin;
        assert_int_equal(sched_job_eta(s, k, S(1), &st, &fin), 0);
    }
    /* Jobs 4 and 5 fill gpu2's queue; 6 stays queued though gpu0/gpu1 are free. */
    struct sched_stats stats;
    sched_stats(s, &stats);
    assert_int_equal(stats.queued, 1);
    for (int i = 0; i < 2; i++) {
        char wid[16];
        snprintf(wid, sizeof(wid), "gpu%d", i);
        uint64_t got;
        while (sched_take(s, wid, S(1), &got) == 0) {
            assert_true(got == 2 || got == 3);
            onex++;
        }
    }
    assert_int_equal(onex, 2);
    /* gpu2 becomes unhealthy: nothing else can take job 6 (or 4, 5, sent
     * back), so the excluded workers may serve them rather than strand them. */
    mk_worker(&w, "gpu2", 32768);
    w.healthy = false;
    assert_int_equal(sched_worker_update(s, &w, S(2)), 0);
    assert_int_equal(sched_job_finished(s, 2, true, 0, S(1), S(2)), 0);
    assert_int_equal(sched_job_finished(s, 3, true, 0, S(1), S(2)), 0);
    r.n = 0;
    sched_dispatch(s, S(2), on_placed, &r);
    assert_int_equal(r.n, 3);
    sched_stats(s, &stats);
    assert_int_equal(stats.queued, 0);
    sched_destroy(s);
}

static void test_exclusion_ignores_a_worker_too_small(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info w;
    mk_worker(&w, "gpu0", 32768);
    load(&w, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    mk_worker(&w, "gpu1", 16384); /* cannot hold image-v2 */
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    const char ex[1][SCHED_NAME_MAX] = {"gpu0"};
    add_excl(s, 1, ex, 1, 0);
    struct rec r = {0};
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu0");
    struct job_spec bad;
    mk_job(&bad, 2, "image.fast", "image-v2", 1);
    bad.nexclude = 1; /* no list */
    assert_int_equal(sched_job_add(s, &bad, 0), GPUQ_EINVAL);
    sched_destroy(s);
}

/* The reported bug, with scripted time: a job fails on gpu-a while gpu-a is
 * the only worker of its capability, so its retry goes back to gpu-a; gpu-b
 * registers before gpu-a starts it. The retry must move to gpu-b, though
 * gpu-b is cold and gpu-a warm (no completion-time gain would move it). */
static void test_retry_leaves_failed_gpu_when_another_registers(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info a, b;
    mk_worker(&a, "gpu-a", 32768);
    load(&a, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &a, 0), 0);
    struct rec r = {0};
    uint64_t id;
    add(s, 1, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_int_equal(sched_take(s, "gpu-a", 0, &id), 0);
    assert_int_equal(id, 1);
    assert_int_equal(sched_job_finished(s, 1, false, 0, S(1), S(1)), 0);
    /* The retry: gpu-a failed it, but nothing else can take it. */
    const char ex[1][SCHED_NAME_MAX] = {"gpu-a"};
    struct job_spec j;
    mk_job(&j, 1, "image.fast", "image-v2", 1);
    j.exclude = ex;
    j.nexclude = 1;
    assert_int_equal(sched_job_add(s, &j, S(1)), 0);
    assert_int_equal(sched_dispatch(s, S(1), on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu-a");
    /* gpu-b registers (empty: a cold load) before gpu-a takes the retry. */
    mk_worker(&b, "gpu-b", 32768);
    assert_int_equal(sched_worker_update(s, &b, S(2)), 0);
    r.n = 0;
    assert_int_equal(sched_dispatch(s, S(2), on_placed, &r), 1);
    assert_int_equal(r.job, 1);
    assert_string_equal(r.worker, "gpu-b");
    assert_non_null(strstr(r.why.reason, "retry moved off gpu-a"));
    assert_int_equal(sched_take(s, "gpu-a", S(2), &id), GPUQ_EAGAIN);
    assert_int_equal(sched_take(s, "gpu-b", S(2), &id), 0);
    assert_int_equal(id, 1);
    struct sched_stats st;
    sched_stats(s, &st);
    assert_int_equal(st.moves, 1);
    assert_int_equal(st.placed + st.queued, 0);
    sched_destroy(s);
}

/* The same when gpu-a asks for work before the next dispatch, when gpu-b
 * comes back from quarantine (unhealthy -> healthy) rather than registering,
 * and when gpu-b is busy: the retry waits for it rather than run on gpu-a,
 * while gpu-a still takes the jobs that did not fail there. */
static void test_failed_gpu_does_not_take_retry_another_could_run(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info a, b;
    mk_worker(&a, "gpu-a", 32768);
    load(&a, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &a, 0), 0);
    mk_worker(&b, "gpu-b", 32768);
    load(&b, "image-v2", 22528);
    b.healthy = false; /* quarantined */
    assert_int_equal(sched_worker_update(s, &b, 0), 0);
    struct rec r = {0};
    const char ex[1][SCHED_NAME_MAX] = {"gpu-a"};
    add_excl(s, 1, ex, 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu-a");
    /* gpu-b recovers with a long job running: it is busy for ~40 s. */
    b.healthy = true;
    assert_int_equal(sched_worker_update(s, &b, S(1)), 0);
    add(s, 2, "image.fast", "image-v2", 16, S(1));
    uint64_t id;
    /* gpu-a asks first: it must not start the retry another GPU can run. */
    assert_int_equal(sched_take(s, "gpu-a", S(1), &id), GPUQ_EAGAIN);
    struct sched_stats st;
    sched_stats(s, &st);
    assert_int_equal(st.queued, 2);
    assert_int_equal(st.placed, 0);
    /* Dispatch (oldest first): the retry goes to gpu-b, job 2 too. */
    r.n = 0;
    assert_int_equal(sched_dispatch(s, S(1), on_placed, &r), 2);
    assert_int_equal(sched_take(s, "gpu-b", S(1), &id), 0);
    assert_int_equal(id, 1);
    /* gpu-b is now busy with the retry; job 2 may move to gpu-a (late
     * binding) — it never failed there. */
    assert_int_equal(sched_take(s, "gpu-a", S(1), &id), 0);
    assert_int_equal(id, 2);
    /* Another retry that failed on gpu-a arrives while gpu-b runs a job and
     * gpu-a is idle: it waits on gpu-b. */
    add_excl(s, 3, ex, 1, S(2));
    r.n = 0;
    assert_int_equal(sched_dispatch(s, S(2), on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu-b");
    assert_int_equal(sched_take(s, "gpu-a", S(2), &id), GPUQ_EAGAIN);
    sched_destroy(s);
}

/* The fallback stays: while the failed GPU is the only usable one (the
 * other is quarantined, draining, or too small for the model), the retry
 * runs there rather than wait forever, and heartbeats that change nothing do
 * not send it back. */
static void test_retry_falls_back_to_failed_gpu_when_only_usable(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info a, b, c;
    mk_worker(&a, "gpu-a", 32768);
    load(&a, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &a, 0), 0);
    mk_worker(&b, "gpu-b", 32768);
    b.healthy = false;
    assert_int_equal(sched_worker_update(s, &b, 0), 0);
    mk_worker(&c, "gpu-c", 16384); /* cannot hold image-v2 */
    assert_int_equal(sched_worker_update(s, &c, 0), 0);
    struct rec r = {0};
    const char ex[1][SCHED_NAME_MAX] = {"gpu-a"};
    add_excl(s, 1, ex, 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu-a");
    /* gpu-b goes from quarantined to draining: still unusable. */
    b.healthy = true;
    b.draining = true;
    assert_int_equal(sched_worker_update(s, &b, S(1)), 0);
    assert_int_equal(sched_worker_update(s, &a, S(1)), 0);
    assert_int_equal(sched_worker_update(s, &c, S(1)), 0);
    r.n = 0;
    assert_int_equal(sched_dispatch(s, S(1), on_placed, &r), 0);
    uint64_t id;
    assert_int_equal(sched_take(s, "gpu-a", S(1), &id), 0);
    assert_int_equal(id, 1);
    /* A retry queued while gpu-a is busy and nothing else usable is placed
     * on gpu-a too (behind the running job). */
    add_excl(s, 2, ex, 1, S(2));
    assert_int_equal(sched_dispatch(s, S(2), on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu-a");
    assert_int_equal(sched_job_finished(s, 1, true, 0, S(1), S(3)), 0);
    assert_int_equal(sched_take(s, "gpu-a", S(3), &id), 0);
    assert_int_equal(id, 2);
    struct sched_stats st;
    sched_stats(s, &st);
    assert_int_equal(st.moves, 0);
    sched_destroy(s);
}

static void test_unservable_model_does_not_block_its_capability(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info w;
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof(id), "gpu%d", i);
        mk_worker(&w, id, 24576); /* too small for video (28 GB) */
        load(&w, "image-v2", 22528);
        assert_int_equal(sched_worker_update(s, &w, 0), 0);
    }
    /* Oldest first: the image.fast job asking for video comes before the others. */
    add(s, 1, "image.fast", "video", 1, 0);
    for (uint64_t id = 2; id <= 4; id++)
        add(s, id, "image.fast", "image-v2", 1, S(1));
    struct rec r = {0};
    assert_int_equal(sched_dispatch(s, S(1), on_placed, &r), 3);
    double st, fin;
    assert_int_equal(sched_job_eta(s, 1, S(1), &st, &fin), 0);
    assert_true(st == -1 && fin == -1);
    char why[160];
    assert_true(sched_job_parked(s, 1, why, sizeof(why)));
    assert_string_equal(why, "no ready worker serves model video for image.fast");
    assert_false(sched_job_parked(s, 2, why, sizeof(why)));
    /* Later jobs keep flowing while it waits. */
    uint64_t id;
    assert_int_equal(sched_take(s, "gpu0", S(1), &id), 0);
    assert_int_equal(sched_job_finished(s, id, true, 0, S(2.5), S(3.5)), 0);
    add(s, 5, "image.fast", "image-v2", 1, S(4));
    r.n = 0;
    sched_dispatch(s, S(4), on_placed, &r);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.job, 5);
    /* A GPU that can hold video joins: the parked job is looked at again. */
    mk_worker(&w, "gpu2", 81920);
    assert_int_equal(sched_worker_update(s, &w, S(5)), 0);
    assert_false(sched_job_parked(s, 1, NULL, 0));
    r.n = 0;
    sched_dispatch(s, S(5), on_placed, &r);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.job, 1);
    assert_string_equal(r.worker, "gpu2");
    assert_int_equal(sched_job_eta(s, 1, S(5), &st, &fin), 0);
    assert_true(st >= 0 && fin > 10); /* cold video load + 75 s run */
    sched_destroy(s);
}

static void test_drained_only_capable_worker_parks_then_resumes(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info w;
    mk_worker(&w, "gpu0", 32768);
    w.ncaps = 1; /* image.fast only */
    load(&w, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    struct worker_info v;
    mk_worker(&v, "vid0", 81920);
    v.ncaps = 0;
    snprintf(v.caps[v.ncaps++], SCHED_NAME_MAX, "video");
    v.draining = true;
    assert_int_equal(sched_worker_update(s, &v, 0), 0);
    add(s, 1, "video", "video", 1, 0);
    add(s, 2, "image.fast", "image-v2", 1, S(1));
    struct rec r = {0};
    assert_int_equal(sched_dispatch(s, S(1), on_placed, &r), 1);
    assert_int_equal(r.job, 2);
    char why[160];
    assert_true(sched_job_parked(s, 1, why, sizeof(why)));
    assert_non_null(strstr(why, "no ready worker serves video"));
    double st, fin;
    assert_int_equal(sched_job_eta(s, 1, S(1), &st, &fin), 0);
    assert_true(st == -1 && fin == -1);
    /* A heartbeat that changes nothing keeps it parked without another look. */
    assert_int_equal(sched_worker_update(s, &w, S(2)), 0);
    assert_int_equal(sched_dispatch(s, S(2), on_placed, &r), 0);
    v.draining = false;
    assert_int_equal(sched_worker_update(s, &v, S(3)), 0);
    r.n = 0;
    assert_int_equal(sched_dispatch(s, S(3), on_placed, &r), 1);
    assert_string_equal(r.worker, "vid0");
    sched_destroy(s);
}

static void test_eta_running_placed_queued(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info w;
    mk_worker(&w, "gpu0", 32768);
    load(&w, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    for (uint64_t id = 1; id <= 5; id++)
        add(s, id, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, NULL, NULL), 2); /* queue depth 2 */
    uint64_t id;
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    assert_int_equal(id, 1);
    double st, fin;
    /* Running: 2.5 s prior at the reference size, warm. */
    assert_int_equal(sched_job_eta(s, 1, S(1), &st, &fin), 0);
    assert_float_equal(st, 0, 1e-6);
    assert_float_equal(fin, 1.5, 1e-6);
    /* Placed behind it. */
    assert_int_equal(sched_job_eta(s, 2, S(1), &st, &fin), 0);
    assert_float_equal(st, 1.5, 1e-6);
    assert_float_equal(fin, 4.0, 1e-6);
    /* Queued: after the placed job 3 starts at 2.5+2.5 ... each 2.5 s later. */
    for (uint64_t k = 3; k <= 5; k++) {
        assert_int_equal(sched_job_eta(s, k, S(1), &st, &fin), 0);
        assert_float_equal(st, 4.0 + 2.5 * (double)(k - 3), 1e-6);
        assert_float_equal(fin, st + 2.5, 1e-6);
    }
    /* A second, twice as fast GPU joins: the queued work spreads over both
     * (its slot is free now, gpu0's at 4.0). Job 3 starts at once there;
     * job 4 after job 3's 2.5 GPU-seconds at speed 2 (1.25 s); job 5 after
     * 5 GPU-seconds: 2 x t = 5 → 2.5 s. */
    mk_worker(&w, "gpu1", 32768);
    load(&w, "image-v2", 22528);
    w.speed = 2.0;
    assert_int_equal(sched_worker_update(s, &w, S(1)), 0);
    double want[] = {0, 1.25, 2.5};
    for (uint64_t k = 3; k <= 5; k++) {
        assert_int_equal(sched_job_eta(s, k, S(1), &st, &fin), 0);
        assert_float_equal(st, want[k - 3], 1e-6);
    }
    /* Overran: a running job past its estimate is due now, not in the past. */
    assert_int_equal(sched_job_eta(s, 1, S(10), &st, &fin), 0);
    assert_float_equal(fin, 0, 1e-9);
    assert_int_equal(sched_job_eta(s, 99, S(1), &st, &fin), GPUQ_ENOENT);
    sched_destroy(s);
}

/* A queued job's ETA counts the work queued ahead of it in every capability
 * that shares its workers (dispatch is oldest-first across them), and a
 * worker without the model opens to it only after loading it. */
static void test_eta_counts_shared_work_and_cold_load(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info w;
    mk_worker(&w, "gpu0", 32768);
    load(&w, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    add(s, 1, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, NULL, NULL), 1);
    uint64_t id;
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    /* Queued, not dispatched: an image.hq job, then an image.fast one. */
    add(s, 2, "image.hq", "image-hq", 1, S(0.5));
    add(s, 3, "image.fast", "image-v2", 1, S(0.6));
    struct job_spec hq;
    mk_job(&hq, 2, "image.hq", "image-hq", 1);
    double c2 = sched_estimate_cost(s, &hq);
    assert_true(c2 > 0);
    double st, fin;
    /* gpu0 frees at 2.5 s; the image.hq job ahead takes c2 of it first. */
    assert_int_equal(sched_job_eta(s, 3, S(1), &st, &fin), 0);
    assert_float_equal(st, 1.5 + c2, 1e-6);
    assert_float_equal(fin, st + 2.5, 1e-6);
    /* An idle GPU without image-v2 joins: its slot opens after the 5 s load.
     * Water-filling from now (1 s): gpu0 at 1.5, gpu1 at 5. */
    mk_worker(&w, "gpu1", 32768);
    assert_int_equal(sched_worker_update(s, &w, S(1)), 0);
    double want = c2 <= 3.5 ? 1.5 + c2 : 5 + (c2 - 3.5) / 2;
    assert_int_equal(sched_job_eta(s, 3, S(1), &st, &fin), 0);
    assert_float_equal(st, want, 1e-6);
    assert_float_equal(fin, st + 2.5, 1e-6);
    /* The image.hq job itself: nothing ahead, no GPU has image-hq: the
     * earliest slot plus its 4 s load (gpu1: 1 s + 4 s from now → 4 s). */
    assert_int_equal(sched_job_eta(s, 2, S(1), &st, &fin), 0);
    assert_float_equal(st, 4.0, 1e-6);
    assert_float_equal(fin, 4.0 + c2, 1e-6);
    sched_destroy(s);
}

/* The default binds late only: a job is placed where it starts at once;
 * while every GPU is busy it waits in the shared queue, and the first GPU
 * to free takes it (an M/M/c queue: Erlang C's mean wait). */
static void test_default_binds_only_where_it_starts(void **state)
{
    (void)state;
    struct sched_config cfg;
    sched_config_defaults(&cfg);
    cfg.queue_depth = 0;
    struct sched *s = mk_sched_cfg(&cfg);
    struct worker_info w;
    for (int i = 0; i < 2; i++) {
        char id[8];
        snprintf(id, sizeof(id), "gpu%d", i);
        mk_worker(&w, id, 32768);
        load(&w, "image-v2", 22528);
        assert_int_equal(sched_worker_update(s, &w, 0), 0);
    }
    struct rec r = {0};
    uint64_t id;
    for (uint64_t j = 1; j <= 3; j++)
        add(s, j, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 2);
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    assert_int_equal(sched_take(s, "gpu1", 0, &id), 0);
    struct sched_stats st;
    sched_stats(s, &st);
    assert_int_equal(st.queued, 1);
    assert_int_equal(st.placed, 0);
    /* gpu1 finishes first (before its estimate): it takes job 3. */
    assert_int_equal(sched_job_finished(s, 2, true, 0, S(2.4), S(2.4)), 0);
    assert_int_equal(sched_dispatch(s, S(2.4), on_placed, &r), 1);
    assert_int_equal(r.job, 3);
    assert_string_equal(r.worker, "gpu1");
    sched_destroy(s);
}

/* A running job past its estimate is not projected to end "now": the GPU
 * that frees first takes the job placed behind it (before, both looked as
 * free, the move gained nothing, and the job waited beside an idle GPU). */
static void test_idle_gpu_takes_job_placed_behind_an_overdue_one(void **state)
{
    (void)state;
    struct sched *s = mk_sched(); /* two placed per GPU */
    struct worker_info w;
    for (int i = 0; i < 2; i++) {
        char id[8];
        snprintf(id, sizeof(id), "gpu%d", i);
        mk_worker(&w, id, 32768);
        load(&w, "image-v2", 22528);
        assert_int_equal(sched_worker_update(s, &w, 0), 0);
    }
    struct rec r = {0};
    uint64_t id;
    for (uint64_t j = 1; j <= 3; j++)
        add(s, j, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 3);
    assert_int_equal(r.job, 3);
    char behind[SCHED_NAME_MAX], other[SCHED_NAME_MAX];
    snprintf(behind, sizeof(behind), "%s", r.worker);
    snprintf(other, sizeof(other), "%s", strcmp(r.worker, "gpu0") == 0 ? "gpu1" : "gpu0");
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    assert_int_equal(sched_take(s, "gpu1", 0, &id), 0);
    /* The other GPU ends on time; at that moment job 3 gains nothing by
     * moving (its GPU is due to free as well). */
    uint64_t done = strcmp(other, "gpu0") == 0 ? 1 : 2;
    assert_int_equal(sched_job_finished(s, done, true, 0, S(2.5), S(2.5)), 0);
    assert_int_equal(sched_dispatch(s, S(2.5), on_placed, &r), 0);
    /* 2 s later the job ahead of it still runs: the idle GPU takes job 3. */
    assert_int_equal(sched_dispatch(s, S(4.5), on_placed, &r), 1);
    assert_int_equal(r.job, 3);
    assert_string_equal(r.worker, other);
    assert_non_null(strstr(r.why.reason, "late binding"));
    sched_destroy(s);
}

/* Late binding looks only at the GPUs that may be idle (sched.idle_bits): a
 * GPU found full loses its mark, and must get it back when a report gives
 * it a free slot — else the job placed behind a long one would stay there. */
static void test_late_binding_sees_a_gpu_freed_by_a_report(void **state)
{
    (void)state;
    struct sched *s = mk_sched(); /* two placed per GPU */
    struct worker_info w[2];
    for (int i = 0; i < 2; i++) {
        char id[8];
        snprintf(id, sizeof(id), "gpu%d", i);
        mk_worker(&w[i], id, 32768);
        load(&w[i], "image-v2", 22528);
        assert_int_equal(sched_worker_update(s, &w[i], 0), 0);
    }
    struct rec r = {0};
    uint64_t id;
    add(s, 1, "image.fast", "image-v2", 16, 0); /* 40 s each */
    add(s, 2, "image.fast", "image-v2", 16, 0);
    add(s, 3, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 3);
    assert_int_equal(r.job, 3);
    int behind = strcmp(r.worker, "gpu0") == 0 ? 0 : 1, other = 1 - behind;
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    assert_int_equal(sched_take(s, "gpu1", 0, &id), 0);
    /* Both GPUs busy: job 3 has nowhere better to go; both lose their mark. */
    assert_int_equal(sched_dispatch(s, S(1), on_placed, &r), 0);
    /* The other GPU now reports two slots: it takes job 3 at once. */
    w[other].concurrency = 2;
    assert_int_equal(sched_worker_update(s, &w[other], S(2)), 0);
    assert_int_equal(sched_dispatch(s, S(2), on_placed, &r), 1);
    assert_int_equal(r.job, 3);
    assert_string_equal(r.worker, w[other].id);
    assert_non_null(strstr(r.why.reason, "late binding"));
    sched_destroy(s);
}

/* The reasons are written without printf where they can be: the bytes must
 * be printf's, rounding (ties to even on the exact binary value), signs,
 * truncation and the formats it leaves to vsnprintf included. */
/* Every format passed here takes (string, double, int, double). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static void check_reason(size_t n, const char *fmt, double x, int d, const char *str)
{
    char want[200], got[200];
    memset(got, 'x', sizeof(got));
    snprintf(want, n, fmt, str, x, d, x);
    sched_reason_printf(got, n, fmt, str, x, d, x);
    if (strcmp(want, got) != 0)
        fail_msg("fmt \"%s\" n %zu x %.17g: printf \"%s\", reason \"%s\"", fmt, n, x, want, got);
}
#pragma GCC diagnostic pop

static void test_reason_text_is_printfs(void **state)
{
    (void)state;
    const char *fmts[] = {"%s: %.2fs (%d) %.2f", "%s %.1f %d%% %.0f", "%s%.0f x%d %.1f",
                          "a %s b %.2f c %d d %.2e"}; /* the last through vsnprintf */
    const double fixed[] = {0, -0.0, 0.5, 1.5, 2.5, 0.125, 0.375, 0.005, 0.015, 0.025, 1.005,
                            2.675, -0.004, -0.005, -1.5, 0.045, 1e-300, 9.995, 99.995,
                            123456.785, 1e12, 9999999999999.0, 1e13, 1e300, 4.35, 0.05,
                            0.15, 0.25, 0.35, 1.0 / 3, 2.0 / 3, 59.999, 3.14159};
    const size_t sizes[] = {200, 160, 12, 5, 2, 1};
    for (size_t f = 0; f < sizeof(fmts) / sizeof(fmts[0]); f++)
        for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++)
            for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
                check_reason(sizes[z], fmts[f], fixed[i], (int)i - 5, "gpu12");
    /* Many values near every rounding boundary: k / 200 (the ties of %.2f,
     * mostly not exact in binary) and a few ulps around them, and random
     * magnitudes. */
    uint64_t r = 88172645463325252ULL;
    for (int k = -20000; k <= 20000; k++) {
        double t = k / 200.0;
        for (int u = -2; u <= 2; u++) {
            double x = t;
            for (int m = 0; m < (u < 0 ? -u : u); m++)
                x = nextafter(x, u < 0 ? -INFINITY : INFINITY);
            check_reason(200, fmts[0], x, k, "w");
            check_reason(200, fmts[1], x, k, "w");
        }
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        double y = (double)(r >> 11) / (double)(1ULL << 53) * pow(10, (double)(k % 16));
        check_reason(200, fmts[0], k < 0 ? -y : y, k, "w");
        check_reason(200, fmts[2], y, k, "w");
    }
    check_reason(200, "%s nan %.2f %d %.1f", NAN, 1, "w");
    check_reason(200, "%s inf %.2f %d %.1f", -INFINITY, 1, "w");
}

/* A fast GPU frees in `at` - 2.5 s after job 1 started there; a slower warm
 * one (0.8) is idle. Job 2 arrives at `at`. */
static void start_now_case(double at, const char *want, bool starts_now)
{
    struct sched *s = mk_sched();
    struct worker_info w;
    mk_worker(&w, "gpu0", 32768);
    load(&w, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    mk_worker(&w, "gpu1", 32768);
    load(&w, "image-v2", 22528);
    w.speed = 0.8;
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    struct rec r = {0};
    uint64_t id;
    add(s, 1, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu0"); /* both idle: the faster */
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    add(s, 2, "image.fast", "image-v2", 1, S(at));
    assert_int_equal(sched_dispatch(s, S(at), on_placed, &r), 1);
    assert_int_equal(r.job, 2);
    assert_string_equal(r.worker, want);
    assert_int_equal(strstr(r.why.reason, "starts now") != NULL, starts_now);
    sched_destroy(s);
}

/* Start now: waiting 0.5 s for the fast GPU finishes at 3.0 s, the idle slow
 * one at 3.125 s — within the wait, so the job starts at once there (and
 * the fast GPU stays free for the next job). Waiting 0.05 s (2.55 s) is
 * clearly better: the job waits for the fast GPU. */
static void test_start_now_within_the_wait(void **state)
{
    (void)state;
    start_now_case(2.0, "gpu1", true);
    start_now_case(2.45, "gpu0", false);
}

/* Rule 8: start now on a cold GPU even where the load pushes out a model
 * in demand. gpu0 holds image-v2 and runs job 1 (0-2.5 s); gpu1 holds
 * video, which was asked for. Job 2 waits 2.5 s for gpu0 (finishes at
 * 5.0 s) rather than load on gpu1: 5 + 2.5 + 10 x 2.5 / 75 (video's reload,
 * as the slowdown of its next job) = 7.83 s, more than 5.0 + 2.5. Job 3
 * would wait 5.0 s (finishing at 7.5 s): gpu1's 7.83 s is within that wait,
 * so it loads image-v2 there and starts at once (before, a cold GPU whose
 * load evicts a model in demand never started now: job 3 queued on gpu0). */
static void test_start_now_on_a_cold_gpu_in_demand(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info w;
    mk_worker(&w, "gpu0", 32768);
    load(&w, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    mk_worker(&w, "gpu1", 32768);
    load(&w, "video", 28672);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    struct rec r = {0};
    uint64_t id;
    add(s, 100, "video", "video", 1, 0);
    assert_int_equal(sched_job_cancel(s, 100, 0), 0);
    add(s, 1, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu0");
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    add(s, 2, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu0");
    const struct sched_candidate *cold = cand_of(&r.why, "gpu1");
    assert_non_null(cold);
    assert_float_equal(cold->evict_penalty_s, 10.0 * 2.5 / 75, 1e-6);
    assert_float_equal(cold->score_s, 5 + 2.5 + 10.0 * 2.5 / 75, 1e-6);
    add(s, 3, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_int_equal(r.job, 3);
    assert_string_equal(r.worker, "gpu1");
    assert_false(r.why.cand[0].warm);
    assert_true(r.why.cand[0].evict_penalty_s > 0);
    assert_non_null(strstr(r.why.reason, "starts now (cold load)"));
    sched_destroy(s);
}

/* gpu0 runs a 75 s video job (from 0); gpu1 holds image-v2. A second video
 * job arrives at `at`. With image demand (image_demand), loading video on
 * gpu1 would keep the image jobs off it for the rest of the video run: the
 * job waits for gpu0, the video GPU, unless that wait is longer than the
 * load and the displaced image time. Without image demand it loads at once. */
static void long_job_case(double at, bool image_demand, const char *want)
{
    struct sched *s = mk_sched();
    struct worker_info w;
    mk_worker(&w, "gpu0", 32768);
    load(&w, "video", 28672);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    mk_worker(&w, "gpu1", 32768);
    load(&w, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    struct rec r = {0};
    uint64_t id;
    if (image_demand) {
        add(s, 100, "image.fast", "image-v2", 1, 0);
        assert_int_equal(sched_job_cancel(s, 100, 0), 0);
    }
    add(s, 1, "video", "video", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu0");
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    add(s, 2, "video", "video", 1, S(at));
    assert_int_equal(sched_dispatch(s, S(at), on_placed, &r), 1);
    assert_int_equal(r.job, 2);
    assert_string_equal(r.worker, want);
    const struct sched_candidate *c = cand_of(&r.why, "gpu1");
    assert_false(c->warm);
    /* Reload of image-v2 (5 s, paid in full by a longer job) plus the part
     * of the 75 s run beyond one 2.5 s image job. */
    assert_float_equal(c->evict_penalty_s, image_demand ? 5.0 + (75 - 2.5) : 0, 1e-6);
    sched_destroy(s);
}

/* A long job does not load onto the GPU of a model in demand while a GPU
 * holding its own model frees within the displaced time: at 40 s, waiting
 * for gpu0 finishes at 110 s against 10 + 75 + 77.5 = 162.5 s on gpu1
 * (weighing only the reload, 90 s: it loaded). */
static void test_long_job_waits_rather_than_displace_a_model_in_demand(void **state)
{
    (void)state;
    long_job_case(40, true, "gpu0");
    /* At 0 waiting for gpu0 scores best (150 s vs 162.5 s), but 162.5 s is
     * within its 75 s wait: rule 8 starts it now on gpu1. */
    long_job_case(0, true, "gpu1");
    long_job_case(40, false, "gpu1"); /* nothing displaced: 85 s vs 110 s */
}

/* Rule 7: a long job that must push out a model in demand takes the slower
 * GPU, leaving the fast one to the short jobs. Both GPUs hold image-v2 and
 * image jobs were asked for; on the fast gpu0 the video job finishes at
 * 10 + 75 + 5 + 72.5 = 162.5 s, on gpu1 (0.8) at 10 + 93.75 + 5 + 91.25 x
 * 0.8^4 = 146.1 s (weighing displacement alike on both: 200 s, gpu0). The
 * next image job still gets the fast GPU. */
static void test_long_job_leaves_the_fast_gpu_to_short_jobs(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info w;
    mk_worker(&w, "gpu0", 32768);
    load(&w, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    mk_worker(&w, "gpu1", 32768);
    load(&w, "image-v2", 22528);
    w.speed = 0.8;
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    struct rec r = {0};
    uint64_t id;
    add(s, 100, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_job_cancel(s, 100, 0), 0);
    add(s, 1, "video", "video", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu1");
    const struct sched_candidate *slow = cand_of(&r.why, "gpu1"), *fast = cand_of(&r.why, "gpu0");
    assert_float_equal(fast->evict_penalty_s, 5.0 + (75 - 2.5), 1e-6);
    assert_float_equal(slow->evict_penalty_s, 5.0 + (93.75 - 2.5) * 0.4096, 1e-6);
    assert_float_equal(slow->score_s, 10 + 93.75 + 5.0 + 91.25 * 0.4096, 1e-6);
    assert_int_equal(sched_take(s, "gpu1", 0, &id), 0);
    add(s, 2, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu0");
    sched_destroy(s);
}

/* Rule 9, the start-now side: the setup of long_job_case at 0 s (gpu0 runs
 * a 75 s video job, gpu1 holds image-v2 in demand). Waiting for gpu0
 * finishes the second video job at 150 s; rule 8 would start it now on
 * gpu1 (162.5 s, within the 75 s wait). With video's objective at 240 s,
 * 150 s is within 0.75 of it (180 s): it waits for gpu0 and gpu1 keeps
 * image-v2. At 180 s (135 s) waiting no longer keeps it in time: gpu1. */
static void slo_start_now_case(double slo_s, const char *want)
{
    struct sched *s = mk_sched();
    assert_int_equal(sched_cap_slo(s, "video", slo_s), 0);
    struct worker_info w;
    mk_worker(&w, "gpu0", 32768);
    load(&w, "video", 28672);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    mk_worker(&w, "gpu1", 32768);
    load(&w, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    struct rec r = {0};
    uint64_t id;
    add(s, 100, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_job_cancel(s, 100, 0), 0);
    add(s, 1, "video", "video", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    add(s, 2, "video", "video", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_int_equal(r.job, 2);
    assert_string_equal(r.worker, want);
    sched_destroy(s);
}

static void test_slo_long_job_waits_for_its_model_while_in_time(void **state)
{
    (void)state;
    slo_start_now_case(240, "gpu0");
    slo_start_now_case(180, "gpu1");
    slo_start_now_case(0, "gpu1"); /* no objective: rule 8 */
}

/* Rule 9, the hold side (late binding only: gpu0, running video, is not
 * open). Jobs 2-4 are video, queued behind job 1 on gpu0; gpu1 holds
 * image-v2 in demand. Loading on gpu1 finishes job 2 at 10 + 75 + 5 + 72.5
 * = 162.5 s; waiting for gpu0 at 150 s, but the two jobs behind it would
 * wait for gpu0 too (+150 s), so the plain hold lets it load. With video's
 * objective at 240 s, 150 s is within 0.75 of it: it stays queued for gpu0
 * and takes it when gpu0 frees. */
static void test_slo_hold_for_the_gpu_that_holds_the_model(void **state)
{
    (void)state;
    for (int with_slo = 0; with_slo <= 1; with_slo++) {
        struct sched_config cfg;
        sched_config_defaults(&cfg);
        cfg.queue_depth = 0;
        cfg.evict_weight = 1.0;
        struct sched *s = mk_sched_cfg(&cfg);
        if (with_slo)
            assert_int_equal(sched_cap_slo(s, "video", 240), 0);
        struct worker_info w;
        mk_worker(&w, "gpu0", 32768);
        load(&w, "video", 28672);
        assert_int_equal(sched_worker_update(s, &w, 0), 0);
        mk_worker(&w, "gpu1", 32768);
        load(&w, "image-v2", 22528);
        assert_int_equal(sched_worker_update(s, &w, 0), 0);
        struct rec r = {0};
        uint64_t id;
        add(s, 100, "image.fast", "image-v2", 1, 0);
        assert_int_equal(sched_job_cancel(s, 100, 0), 0);
        add(s, 1, "video", "video", 1, 0);
        assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
        assert_string_equal(r.worker, "gpu0");
        assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
        for (uint64_t k = 2; k <= 4; k++)
            add(s, k, "video", "video", 1, 0);
        struct sched_stats st;
        if (!with_slo) {
            assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
            assert_int_equal(r.job, 2);
            assert_string_equal(r.worker, "gpu1");
        } else {
            assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 0);
            sched_stats(s, &st);
            assert_true(st.holds > 0);
            assert_int_equal(sched_job_finished(s, 1, true, 0, S(75), S(75)), 0);
            assert_int_equal(sched_dispatch(s, S(75), on_placed, &r), 1);
            assert_int_equal(r.job, 2);
            assert_string_equal(r.worker, "gpu0");
        }
        sched_destroy(s);
    }
}

/* A batch job's ETA assumes the work ahead of it drains no faster than the
 * batch lane's measured rate (sched_lane_rate): one GPU's slot says the 11
 * jobs of 2.5 s ahead (10 batch, and the interactive job that goes first)
 * start it in about 25 s (the first is running); at a measured 0.5 GPU-s/s,
 * 55 s.
 * Interactive ETAs are not capped by batch's rate. */
static void test_batch_eta_at_measured_lane_rate(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info w;
    mk_worker(&w, "gpu0", 32768);
    load(&w, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    for (uint64_t id = 1; id <= 11; id++) {
        struct job_spec j;
        mk_job(&j, id, "image.fast", "image-v2", 1);
        j.lane = SCHED_LANE_BATCH;
        assert_int_equal(sched_job_add(s, &j, 0), 0);
    }
    struct job_spec ij;
    mk_job(&ij, 20, "image.fast", "image-v2", 1);
    ij.lane = SCHED_LANE_INTERACTIVE;
    assert_int_equal(sched_job_add(s, &ij, 0), 0);
    double st0, fin0, ist0, ifin0;
    assert_int_equal(sched_job_eta(s, 11, 0, &st0, &fin0), 0);
    assert_int_equal(sched_job_eta(s, 20, 0, &ist0, &ifin0), 0);
    assert_true(st0 > 20 && st0 < 30);
    assert_int_equal(sched_lane_rate(s, SCHED_LANE_BATCH, 0.5, true), 0);
    double st1, fin1, ist1, ifin1;
    assert_int_equal(sched_job_eta(s, 11, 0, &st1, &fin1), 0);
    assert_int_equal(sched_job_eta(s, 20, 0, &ist1, &ifin1), 0);
    assert_true(st1 > 50 && st1 < 60); /* 11 x 2.5 GPU-s ahead (the interactive job first) */
    assert_float_equal(ist1, ist0, 1e-9);
    assert_int_equal(sched_lane_rate(s, SCHED_LANE_BATCH, -1, true), GPUQ_EINVAL);
    sched_destroy(s);
}

/* A batch job that has waited more than twice its run starts where the
 * interactive headroom would keep it off. Four GPUs (gpu0 best for
 * interactive) hold image-v2 after 20 s of 0.4 s image jobs arriving every
 * 0.1 s, so image.fast needs three GPUs free of batch (strict headroom).
 * A video batch job takes gpu3, the worst (three as good stay free); a
 * rembg batch job (0.5 s run) is then refused every other GPU — until it
 * has waited over 1 s, when it takes one, and the explanation says why.
 * Without the rule it would wait as long as image jobs keep coming. */
/* Four GPUs (gpu0 best for interactive) that hold image-v2 after 20 s of
 * 0.4 s image jobs arriving every 0.1 s, so image.fast needs three GPUs free
 * of batch (strict headroom); all idle at the time returned. */
static struct sched *busy_image_fleet(int64_t *t0_out)
{
    struct sched_config cfg;
    sched_config_defaults(&cfg);
    cfg.headroom_window_s = 100;
    cfg.headroom_wait_s = 1;
    cfg.headroom_share = 0.01;
    struct sched *s = mk_sched_cfg(&cfg);
    struct worker_info w;
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "gpu%d", i);
        mk_worker(&w, id, 65536);
        load(&w, "image-v2", 22528);
        w.speed = 1.0 - 0.01 * i;
        assert_int_equal(sched_worker_update(s, &w, 0), 0);
    }
    /* Image jobs of 0.4 s every 0.1 s: four GPUs' worth. */
    uint64_t ring[4] = {0}, got;
    int64_t started[4] = {0};
    for (int k = 0; k < 200; k++) {
        int64_t t = S(0.1) * k;
        if (ring[k % 4])
            assert_int_equal(sched_job_finished(s, ring[k % 4], true, 0, S(0.4), t), 0);
        add(s, 100 + (uint64_t)k, "image.fast", "image-v2", 1, t);
        assert_int_equal(sched_dispatch(s, t, NULL, NULL), 1);
        got = 0;
        for (int i = 0; i < 4 && !got; i++) {
            char gid[16];
            snprintf(gid, sizeof gid, "gpu%d", i);
            if (sched_take(s, gid, t, &got) != 0)
                got = 0;
        }
        assert_int_equal(got, 100 + (uint64_t)k);
        ring[k % 4] = got;
        started[k % 4] = t;
    }
    int64_t t0 = S(20);
    for (int i = 0; i < 4; i++)
        assert_int_equal(sched_job_finished(s, ring[i], true, 0, t0 - started[i], t0), 0);
    *t0_out = t0;
    return s;
}

/* busy_image_fleet with batch job 1 (video) placed on gpu3 and running
 * there: the start of the headroom tests below. */
static struct sched *video_running_on_gpu3(int64_t *t0_out, struct rec *r)
{
    struct sched *s = busy_image_fleet(t0_out);
    int64_t t0 = *t0_out;
    uint64_t got;
    add_batch(s, 1, "video", "video", t0);
    assert_int_equal(sched_dispatch(s, t0, on_placed, r), 1);
    assert_string_equal(r->worker, "gpu3");
    assert_int_equal(sched_take(s, "gpu3", t0, &got), 0);
    return s;
}

static void test_starving_batch_job_passes_the_headroom(void **state)
{
    (void)state;
    int64_t t0;
    struct rec r = {0};
    struct sched *s = video_running_on_gpu3(&t0, &r);
    add_batch(s, 2, "rembg", "rembg", t0);
    assert_int_equal(sched_dispatch(s, t0, on_placed, &r), 0);
    assert_int_equal(sched_dispatch(s, t0 + S(0.9), on_placed, &r), 0);
    struct headroom_figures hf;
    assert_int_equal(sched_headroom_get(s, "image.fast", t0 + S(1.1), &hf), 0);
    assert_true(hf.gpus >= 3); /* the headroom alone would still refuse it */
    assert_int_equal(sched_dispatch(s, t0 + S(1.1), on_placed, &r), 1);
    assert_int_equal(r.job, 2);
    assert_string_not_equal(r.worker, "gpu3");
    assert_non_null(strstr(r.why.reason, "starving"));
    sched_destroy(s);
}

/* Rule 10 waives the headroom only for a capability that starves, not for a
 * job waiting its turn: on busy_image_fleet, rembg batch jobs 3 and 4
 * (0.5 s runs) come first and take gpu3 in turn, 4 starting at 0.9 s; job 2
 * has waited over twice its run at 1.1 s but a rembg batch job started
 * 0.2 s before, so it still waits. At 1.5 s no rembg batch job has started
 * for over one run: now it passes the headroom. Without the gap it would be
 * placed at 1.1 s. */
static void test_batch_job_behind_its_own_capability_is_not_starving(void **state)
{
    (void)state;
    int64_t t0;
    struct sched *s = busy_image_fleet(&t0);
    uint64_t got;
    struct rec r = {0};
    struct job_spec j;
    for (uint64_t id = 3; id <= 4; id++) {
        mk_job(&j, id, "rembg", "rembg", 1);
        j.lane = SCHED_LANE_BATCH;
        j.submit_ns = t0 - S(0.01) * (int64_t)(5 - id); /* ahead of job 2 */
        assert_int_equal(sched_job_add(s, &j, t0), 0);
    }
    add_batch(s, 2, "rembg", "rembg", t0);
    assert_int_equal(sched_dispatch(s, t0, on_placed, &r), 1);
    assert_int_equal(r.job, 3);
    assert_string_equal(r.worker, "gpu3");
    assert_int_equal(sched_take(s, "gpu3", t0, &got), 0);
    assert_int_equal(sched_job_finished(s, 3, true, 0, S(0.9), t0 + S(0.9)), 0);
    assert_int_equal(sched_dispatch(s, t0 + S(0.9), on_placed, &r), 1);
    assert_int_equal(r.job, 4);
    assert_string_equal(r.worker, "gpu3");
    assert_int_equal(sched_take(s, "gpu3", t0 + S(0.9), &got), 0);
    assert_int_equal(sched_dispatch(s, t0 + S(1.1), on_placed, &r), 0);
    assert_int_equal(sched_dispatch(s, t0 + S(1.5), on_placed, &r), 1);
    assert_int_equal(r.job, 2);
    assert_string_not_equal(r.worker, "gpu3");
    assert_non_null(strstr(r.why.reason, "starving"));
    sched_destroy(s);
}

/* Rule 17: a batch job whose model no interactive job uses passes the
 * headroom on a GPU that already holds that model, unless an interactive
 * model is pinned there. On busy_image_fleet a video batch job takes gpu3
 * (the worst: three as good stay free); then gpu1 holds video too, beside
 * image-v2 pinned. A rembg batch job (batch-only, but resident nowhere) and
 * an image-v2 batch job (image.fast's model, resident everywhere) are
 * refused every GPU, and so is a second video job: gpu1 is kept for
 * image-v2. Once image-v2 is no longer pinned there, the video job takes
 * gpu1, where it needs no load and pushes nothing out. Without the rule it
 * waits with the others. */
static void gpu1_holds_video(struct sched *s, bool pin_image, int64_t t)
{
    struct worker_info w;
    mk_worker(&w, "gpu1", 65536);
    load(&w, "image-v2", 22528);
    w.loaded[0].pinned = pin_image;
    load(&w, "video", 28672);
    w.speed = 0.99;
    assert_int_equal(sched_worker_update(s, &w, t), 0);
}

static void test_batch_only_model_passes_the_headroom_where_resident(void **state)
{
    (void)state;
    int64_t t0;
    struct rec r = {0};
    struct sched *s = video_running_on_gpu3(&t0, &r);
    gpu1_holds_video(s, true, t0);
    add_batch(s, 2, "rembg", "rembg", t0);
    add_batch(s, 3, "image.fast", "image-v2", t0);
    add_batch(s, 4, "video", "video", t0);
    assert_int_equal(sched_dispatch(s, t0, on_placed, &r), 0);
    gpu1_holds_video(s, false, t0 + S(0.1));
    assert_int_equal(sched_dispatch(s, t0 + S(0.1), on_placed, &r), 1);
    assert_int_equal(r.job, 4);
    assert_string_equal(r.worker, "gpu1");
    assert_true(cand_of(&r.why, "gpu1")->warm);
    sched_destroy(s);
}

/* A batch job does not push out a model in demand that few GPUs can hold.
 * gpu0 and gpu2 (32 GB) are the only GPUs of four that can hold video, and
 * hold it; gpu1 and gpu3 (24 GB) run image jobs. A batch image-hq job (6 s)
 * would have to evict video from gpu0: it waits instead — until it starves
 * (over 12 s), when it loads there (video stays on gpu2, rule 12). Without
 * the rule it would evict video at once. */
static void test_batch_leaves_a_scarce_model_in_demand(void **state)
{
    (void)state;
    struct sched_config cfg;
    sched_config_defaults(&cfg);
    cfg.headroom_window_s = 100000; /* video's demand does not fade here */
    struct sched *s = mk_sched_cfg(&cfg);
    struct worker_info w;
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "gpu%d", i);
        mk_worker(&w, id, i % 2 == 0 ? 32768 : 24576);
        if (i % 2 == 0)
            load(&w, "video", 28672);
        else
            load(&w, "image-v2", 22528);
        assert_int_equal(sched_worker_update(s, &w, 0), 0);
    }
    struct rec r = {0};
    uint64_t id;
    ask_for_video(s);
    add(s, 1, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu1");
    assert_int_equal(sched_take(s, "gpu1", 0, &id), 0);
    add(s, 3, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu3");
    assert_int_equal(sched_take(s, "gpu3", 0, &id), 0);
    add_batch_hq(s, 2);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 0);
    assert_int_equal(sched_dispatch(s, S(11), on_placed, &r), 0);
    assert_int_equal(sched_dispatch(s, S(13), on_placed, &r), 1);
    assert_int_equal(r.job, 2);
    assert_string_equal(r.worker, "gpu0");
    assert_int_equal(r.why.cand[0].evictions, 1);
    assert_non_null(strstr(r.why.reason, "starving"));
    sched_destroy(s);
}

/* Rule 12: a starving batch job still leaves a scarce model in demand one
 * home. gpu0 (32 GB) is the only GPU that can hold video, and holds it;
 * gpu1 (24 GB) runs an image job. A batch image-hq job that starves (over
 * 12 s) does not evict video from gpu0, its last home: it waits for gpu1.
 * Without the rule it would load on gpu0 at 13 s. */
static void test_starving_batch_leaves_a_scarce_model_one_home(void **state)
{
    (void)state;
    struct sched_config cfg;
    sched_config_defaults(&cfg);
    cfg.headroom_window_s = 100000; /* video's demand does not fade here */
    struct sched *s = mk_sched_cfg(&cfg);
    struct worker_info w;
    mk_worker(&w, "gpu0", 32768);
    load(&w, "video", 28672);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    mk_worker(&w, "gpu1", 24576);
    load(&w, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    struct rec r = {0};
    uint64_t id;
    ask_for_video(s);
    add(s, 1, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu1");
    assert_int_equal(sched_take(s, "gpu1", 0, &id), 0);
    add_batch_hq(s, 2);
    assert_int_equal(sched_dispatch(s, S(13), on_placed, &r), 0);
    assert_int_equal(sched_dispatch(s, S(20), on_placed, &r), 0);
    assert_int_equal(sched_job_finished(s, 1, true, 0, S(21), S(21)), 0);
    assert_int_equal(sched_dispatch(s, S(21), on_placed, &r), 1);
    assert_int_equal(r.job, 2);
    assert_string_equal(r.worker, "gpu1");
    assert_non_null(strstr(r.why.reason, "starving"));
    sched_destroy(s);
}

/* Rule 13: a batch job that would miss its objective by waiting longer goes
 * with the interactive lane. One GPU holds image-v2 and rembg and runs image
 * jobs (2.5 s) back to back; a batch rembg job (0.5 s, objective 3 s) waits
 * while image jobs are placed. At 2 s (2 + 0.5 > 0.75 x 3) it queues on the
 * GPU like an interactive job, behind the image job placed before it and
 * ahead of the one submitted after, and starts second. Without the rule it
 * starts only once no image job is placed there. */
static void test_urgent_batch_job_goes_with_the_interactive_lane(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    assert_int_equal(sched_cap_slo(s, "rembg", 3), 0);
    assert_int_equal(sched_cap_slo(s, "image.fast", 10), 0);
    struct rec r = {0};
    uint64_t id;
    gpu0_runs_image(s, "rembg", 1536, &r);
    add_batch(s, 2, "rembg", "rembg", 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 0);
    add(s, 3, "image.fast", "image-v2", 1, S(1));
    assert_int_equal(sched_dispatch(s, S(1), on_placed, &r), 1);
    assert_int_equal(r.job, 3);
    assert_int_equal(sched_dispatch(s, S(1.5), on_placed, &r), 0); /* not urgent yet */
    assert_int_equal(sched_dispatch(s, S(2), on_placed, &r), 1);
    assert_int_equal(r.job, 2);
    assert_string_equal(r.worker, "gpu0");
    add(s, 4, "image.fast", "image-v2", 1, S(3.5));
    assert_int_equal(sched_dispatch(s, S(3.5), on_placed, &r), 0); /* the GPU's queue is full */
    assert_int_equal(sched_job_finished(s, 1, true, 0, S(4), S(4)), 0);
    assert_int_equal(sched_take(s, "gpu0", S(4), &id), 0);
    assert_int_equal(id, 3);
    assert_int_equal(sched_dispatch(s, S(4), on_placed, &r), 1);
    assert_int_equal(r.job, 4);
    assert_int_equal(sched_job_finished(s, 3, true, 0, S(2.5), S(6.5)), 0);
    assert_int_equal(sched_take(s, "gpu0", S(6.5), &id), 0);
    assert_int_equal(id, 2);
    sched_destroy(s);
}

/* Rule 13, on a busy GPU: an urgent batch job does not queue where it would
 * take the slot of a scarce model in demand. gpu0 (64 GB) is the only GPU
 * that can hold video, and holds it with rembg and image-v2; gpu1 (24 GB)
 * holds image-v2; both run image jobs. An urgent batch rembg job would
 * finish sooner behind gpu0's job (warm) than behind gpu1's (a 1.5 s load),
 * but queues on gpu1: rembg fits both GPUs, video only gpu0. Without the
 * rule it queues on gpu0. */
static void test_urgent_batch_job_leaves_a_scarce_models_gpu(void **state)
{
    (void)state;
    struct sched_config cfg;
    sched_config_defaults(&cfg);
    cfg.queue_depth = 2;
    cfg.headroom_window_s = 100000; /* video's demand does not fade here */
    struct sched *s = mk_sched_cfg(&cfg);
    assert_int_equal(sched_cap_slo(s, "rembg", 3), 0);
    assert_int_equal(sched_cap_slo(s, "image.fast", 10), 0);
    struct worker_info w;
    mk_worker(&w, "gpu0", 65536);
    load(&w, "video", 28672);
    load(&w, "rembg", 1536);
    load(&w, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    mk_worker(&w, "gpu1", 24576);
    load(&w, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    struct rec r = {0};
    uint64_t id;
    ask_for_video(s);
    add(s, 1, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_int_equal(sched_take(s, r.worker, 0, &id), 0);
    add(s, 3, "image.fast", "image-v2", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_int_equal(sched_take(s, r.worker, 0, &id), 0);
    add_batch(s, 2, "rembg", "rembg", 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 0);
    assert_int_equal(sched_dispatch(s, S(2), on_placed, &r), 1);
    assert_int_equal(r.job, 2);
    assert_string_equal(r.worker, "gpu1");
    assert_false(r.why.cand[0].warm);
    sched_destroy(s);
}

/* Rule 14: a scarce model's second home. video fits only the two 32 GB GPUs
 * of four (gpu0 holds it and runs a 75 s video job; gpu1 holds image-v2,
 * in demand); the two 24 GB GPUs run image jobs. At 60 s, video job 2
 * would finish on gpu0 at 90 s, and on gpu1 at 162.5 s (a 10 s load, its
 * run, image-v2's reload and the image jobs it keeps off gpu1). Alone, it
 * is held for gpu0. With two more video jobs behind it, gpu0 alone would
 * serve them in 150 s more, so it loads video on gpu1 now. Without the
 * rule the backlog was shared over every full GPU (3, two of which cannot
 * hold video), 50 s, and it was held. */
static void second_home_case(int behind, bool loads)
{
    struct sched_config cfg;
    sched_config_defaults(&cfg);
    cfg.queue_depth = 0;
    cfg.evict_weight = 1.0;
    cfg.headroom_window_s = 100000; /* image-v2's demand does not fade here */
    struct sched *s = mk_sched_cfg(&cfg);
    struct worker_info w;
    const char *ids[] = {"gpu2", "gpu3", "gpu0", "gpu1"};
    for (int i = 0; i < 4; i++) {
        mk_worker(&w, ids[i], i < 2 ? 24576 : 32768);
        if (i == 2)
            load(&w, "video", 28672);
        else
            load(&w, "image-v2", 22528);
        assert_int_equal(sched_worker_update(s, &w, 0), 0);
    }
    struct rec r = {0};
    uint64_t id;
    add(s, 10, "image.fast", "image-v2", 1, 0);
    add(s, 11, "image.fast", "image-v2", 1, 0);
    add(s, 1, "video", "video", 1, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 3);
    assert_int_equal(sched_take(s, "gpu2", 0, &id), 0);
    assert_int_equal(sched_take(s, "gpu3", 0, &id), 0);
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    assert_int_equal(id, 1);
    for (int k = 0; k <= behind; k++)
        add(s, 2 + (uint64_t)k, "video", "video", 1, S(60));
    if (loads) {
        assert_int_equal(sched_dispatch(s, S(60), on_placed, &r), 1);
        assert_int_equal(r.job, 2);
        assert_string_equal(r.worker, "gpu1");
        assert_false(r.why.cand[0].warm);
    } else {
        assert_int_equal(sched_dispatch(s, S(60), on_placed, &r), 0);
        struct sched_stats st;
        sched_stats(s, &st);
        assert_true(st.holds > 0);
    }
    sched_destroy(s);
}

static void test_scarce_model_backlog_loads_a_second_home(void **state)
{
    (void)state;
    second_home_case(0, false);
    second_home_case(2, true);
}

/* Rule 15: a long batch job that would miss its objective even if it
 * started now queues on a busy GPU. gpu0 holds image-v2 and video and runs
 * image jobs back to back (objective 10 s); a batch video job (75 s,
 * objective 120 s) is longer than any interactive objective, so rule 13
 * only orders it (urgent from 15 s) and it waits for a free slot, which
 * never comes while image jobs are placed. Past 45 s (45 + 75 > 120) it
 * queues behind the running image job. Without the rule it still waits. */
static void test_late_long_batch_job_queues(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    assert_int_equal(sched_cap_slo(s, "image.fast", 10), 0);
    assert_int_equal(sched_cap_slo(s, "video", 120), 0);
    struct rec r = {0};
    uint64_t id;
    gpu0_runs_image(s, "video", 28672, &r);
    add_batch(s, 2, "video", "video", 0);
    assert_int_equal(sched_dispatch(s, S(20), on_placed, &r), 0); /* urgent, not late */
    add(s, 3, "image.fast", "image-v2", 1, S(40));
    assert_int_equal(sched_dispatch(s, S(40), on_placed, &r), 1);
    assert_int_equal(r.job, 3);
    assert_int_equal(sched_job_finished(s, 1, true, 0, S(44), S(44)), 0);
    assert_int_equal(sched_take(s, "gpu0", S(44), &id), 0);
    assert_int_equal(id, 3);
    assert_int_equal(sched_dispatch(s, S(44), on_placed, &r), 0); /* 44 + 75 < 120 */
    assert_int_equal(sched_dispatch(s, S(46), on_placed, &r), 1);
    assert_int_equal(r.job, 2);
    assert_string_equal(r.worker, "gpu0");
    sched_destroy(s);
}

/* Rule 16: preemption only where the interactive job's model is resident.
 * gpu0 holds image-v2 and runs a 20 s interactive image job; gpu1 holds
 * video and runs a batch video job. An image job placed behind gpu0's job
 * would wait 17 s more (bound 1 s), but preempting the video job would mean
 * loading image-v2 on gpu1 (pushing out video): no preemption. With image-v2
 * also on gpu1, the video job is preempted for it. Without the rule the
 * video job is preempted in both cases. */
static void preempt_warm_case(bool gpu1_holds_image, bool preempts)
{
    struct sched_config cfg;
    sched_config_defaults(&cfg);
    cfg.headroom_share = 0; /* the headroom plays no part here */
    cfg.preempt_after_s = 1.0;
    struct sched *s = mk_sched_cfg(&cfg);
    struct worker_info w;
    mk_worker(&w, "gpu0", 32768);
    load(&w, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    mk_worker(&w, "gpu1", gpu1_holds_image ? 65536 : 32768);
    load(&w, "video", 28672);
    if (gpu1_holds_image)
        load(&w, "image-v2", 22528);
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    struct rec r = {0};
    uint64_t id;
    add(s, 1, "image.fast", "image-v2", 8, 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu0");
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    struct job_spec j;
    mk_job(&j, 2, "video", "video", 1);
    j.lane = SCHED_LANE_BATCH;
    assert_int_equal(sched_job_add(s, &j, 0), 0);
    assert_int_equal(sched_dispatch(s, 0, on_placed, &r), 1);
    assert_string_equal(r.worker, "gpu1");
    assert_int_equal(sched_take(s, "gpu1", 0, &id), 0);
    add(s, 3, "image.fast", "image-v2", 1, S(1));
    sched_dispatch(s, S(1), on_placed, &r);
    struct sched_preempt p;
    if (preempts) {
        assert_int_equal(sched_preempt_pick(s, S(3), &p), 1);
        assert_int_equal(p.victim, 2);
        assert_int_equal(p.for_job, 3);
        assert_string_equal(p.worker, "gpu1");
    } else {
        assert_int_equal(sched_preempt_pick(s, S(3), &p), 0);
    }
    sched_destroy(s);
}

static void test_preempt_only_where_the_model_is_resident(void **state)
{
    (void)state;
    preempt_warm_case(false, false);
    preempt_warm_case(true, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_affinity_beats_idle_cold_when_warm_frees_sooner),
        cmocka_unit_test(test_cold_gpu_wins_when_wait_is_longer),
        cmocka_unit_test(test_hot_gpu_penalized_and_throttled_speed_used),
        cmocka_unit_test(test_mixed_vram_eviction_and_filter),
        cmocka_unit_test(test_utility_burst_does_not_evict_generation_model),
        cmocka_unit_test(test_late_binding_moves_to_a_gpu_that_frees),
        cmocka_unit_test(test_late_binding_off_a_failed_gpu),
        cmocka_unit_test(test_worker_remove_reports_running_requeues_placed),
        cmocka_unit_test(test_explanation_lists_every_candidate),
        cmocka_unit_test(test_load_ratio_breaks_ties),
        cmocka_unit_test(test_estimates_learn_from_finished_runs),
        cmocka_unit_test(test_queue_paid_first_free_not_starved),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_exclusion_list_avoids_every_failed_worker),
        cmocka_unit_test(test_exclusion_ignores_a_worker_too_small),
        cmocka_unit_test(test_retry_leaves_failed_gpu_when_another_registers),
        cmocka_unit_test(test_failed_gpu_does_not_take_retry_another_could_run),
        cmocka_unit_test(test_retry_falls_back_to_failed_gpu_when_only_usable),
        cmocka_unit_test(test_unservable_model_does_not_block_its_capability),
        cmocka_unit_test(test_drained_only_capable_worker_parks_then_resumes),
        cmocka_unit_test(test_eta_running_placed_queued),
        cmocka_unit_test(test_eta_counts_shared_work_and_cold_load),
        cmocka_unit_test(test_default_binds_only_where_it_starts),
        cmocka_unit_test(test_idle_gpu_takes_job_placed_behind_an_overdue_one),
        cmocka_unit_test(test_late_binding_sees_a_gpu_freed_by_a_report),
        cmocka_unit_test(test_reason_text_is_printfs),
        cmocka_unit_test(test_start_now_within_the_wait),
        cmocka_unit_test(test_start_now_on_a_cold_gpu_in_demand),
        cmocka_unit_test(test_slo_long_job_waits_for_its_model_while_in_time),
        cmocka_unit_test(test_slo_hold_for_the_gpu_that_holds_the_model),
        cmocka_unit_test(test_long_job_waits_rather_than_displace_a_model_in_demand),
        cmocka_unit_test(test_long_job_leaves_the_fast_gpu_to_short_jobs),
        cmocka_unit_test(test_batch_eta_at_measured_lane_rate),
        cmocka_unit_test(test_starving_batch_job_passes_the_headroom),
        cmocka_unit_test(test_batch_only_model_passes_the_headroom_where_resident),
        cmocka_unit_test(test_batch_job_behind_its_own_capability_is_not_starving),
        cmocka_unit_test(test_batch_leaves_a_scarce_model_in_demand),
        cmocka_unit_test(test_starving_batch_leaves_a_scarce_model_one_home),
        cmocka_unit_test(test_urgent_batch_job_goes_with_the_interactive_lane),
        cmocka_unit_test(test_urgent_batch_job_leaves_a_scarce_models_gpu),
        cmocka_unit_test(test_scarce_model_backlog_loads_a_second_home),
        cmocka_unit_test(test_late_long_batch_job_queues),
        cmocka_unit_test(test_preempt_only_where_the_model_is_resident),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
