/* sched_bench.c: the scheduler's decision cost at scale (issue 3 target:
 * p99 <= 50 us at 1,000 GPUs and 100,000 queued jobs). Steady state: GPUs
 * finish jobs one at a time; each time, the GPU takes its next placed job, a
 * new job arrives (the queue stays full), and dispatch places what fits.
 * Reported: per-decision wall time p50/p99/max, and the ratio to the same loop
 * on the seeds' 7-GPU box with 100 queued jobs, measured in the same run.
 * What a decision has to weigh is there: latency objectives on every
 * capability (rules 9 and 13), a batch lane (video and upscale: the
 * interactive headroom, rules 10-13) and a scarce model (video fits only the
 * quarter of the GPUs with 48 GB: rules 11 and 12).
 * Instructions per dispatch, steady on a noisy machine where wall time is
 * not: bench/sched-ir runs this under callgrind, collecting only the big
 * fleet's measured dispatches (dispatch_big), one count per dispatch.
 *   gpuq-bench-sched [gpus] [queued] [decisions] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "core/sched.h"

static const char *caps[] = {"image.fast", "image.hq", "video", "upscale"};
static const char *models[] = {"image-v2", "image-hq", "video", "upscale"};
static const int64_t vram[] = {22528, 8192, 28672, 1024};
static const double slo_s[] = {6, 30, 20, 10};
static const enum sched_lane lanes[] = {SCHED_LANE_INTERACTIVE, SCHED_LANE_INTERACTIVE,
                                        SCHED_LANE_BATCH, SCHED_LANE_BATCH};

/* CPU time of this thread: the decision's own cost, without preemption by
 * other processes on a shared machine. */
static int64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t next_id = 1;
static uint64_t rng = 88172645463325252ULL;

static uint64_t xorshift(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* The capability of each job by id (what the GPUs took is counted by kind). */
static unsigned char *kind_of;
static size_t nkind;

static void add_job(struct sched *s, int64_t now)
{
    struct job_spec j;
    memset(&j, 0, sizeof(j));
    j.id = next_id++;
    uint64_t r = xorshift() % 100;
    int k = r < 85 ? 0 : r < 92 ? 1 : r < 94 ? 2 : 3;
    snprintf(j.capability, sizeof(j.capability), "%s", caps[k]);
    snprintf(j.model, sizeof(j.model), "%s", models[k]);
    j.width = j.height = 1024;
    j.steps = 8;
    j.lane = lanes[k];
    if (j.id >= nkind) {
        size_t n = nkind ? nkind * 2 : 1024;
        while (n <= j.id)
            n *= 2;
        kind_of = realloc(kind_of, n);
        if (!kind_of)
            abort();
        nkind = n;
    }
    kind_of[j.id] = (unsigned char)k;
    j.submit_ns = now;
    if (sched_job_add(s, &j, now) != 0)
        abort();
}

/* The dispatches whose cost is reported, and only they: functions of their
 * own so that callgrind can collect just these (--toggle-collect), the big
 * fleet's apart from the 7-GPU box's. */
__attribute__((noinline)) static int dispatch_small(struct sched *s, int64_t now)
{
    return sched_dispatch(s, now, NULL, NULL);
}

__attribute__((noinline)) static int dispatch_big(struct sched *s, int64_t now)
{
    return sched_dispatch(s, now, NULL, NULL);
}

struct result {
    double p50, p99, max, cpu_p50, cpu_p99;
    int n;
};

static struct result run(int ngpus, int queued, int decisions,
                         int (*measured)(struct sched *, int64_t))
{
    struct sched_config cfg;
    sched_config_defaults(&cfg);
    struct sched *s = sched_create(&cfg);
    for (int k = 0; k < 4; k++) {
        struct model_info m;
        memset(&m, 0, sizeof(m));
        snprintf(m.name, sizeof(m.name), "%s", models[k]);
        m.vram_mb = vram[k];
        m.load_ms = 5000;
        m.cls = k == 3 ? MODEL_UTILITY : MODEL_GENERATION;
        sched_model_set(s, &m);
        sched_cap_slo(s, caps[k], slo_s[k]);
    }
    /* The backlog arrived over the time the fleet takes to serve it (1.5
     * slots per GPU, 2.5 s runs): its oldest jobs have waited past their
     * objectives, as a real backlog's would (rules 9 and 13 apply). */
    int64_t gap = (int64_t)(2.5e9 / (1.5 * ngpus));
    int64_t now = -(int64_t)queued * gap;
    for (int g = 0; g < ngpus; g++) {
        struct worker_info w;
        memset(&w, 0, sizeof(w));
        snprintf(w.id, sizeof(w.id), "gpu%d", g);
        snprintf(w.gpu_class, sizeof(w.gpu_class), "class%d", g % 3);
        for (int k = 0; k < 4; k++)
            snprintf(w.caps[w.ncaps++], SCHED_NAME_MAX, "%s", caps[k]);
        w.concurrency = 1 + g % 2;
        w.vram_total_mb = g % 4 == 0 ? 49152 : 24576;
        snprintf(w.loaded[0].name, SCHED_NAME_MAX, "%s", g % 8 == 0 ? "video" : "image-v2");
        w.loaded[0].vram_mb = g % 8 == 0 ? 28672 : 22528;
        w.nloaded = 1;
        w.vram_free_mb = w.vram_total_mb - w.loaded[0].vram_mb;
        w.temp_c = 60 + g % 30;
        w.speed = 0.8 + 0.1 * (g % 4);
        w.healthy = true;
        sched_worker_update(s, &w, now);
    }
    for (int i = 0; i < queued; i++, now += gap)
        add_job(s, now);
    /* Fill: every GPU gets its running jobs and bounded queue. */
    sched_dispatch(s, now, NULL, NULL);
    uint64_t *running = calloc((size_t)ngpus * 2, sizeof(uint64_t));
    for (int g = 0; g < ngpus; g++) {
        char id[32];
        snprintf(id, sizeof(id), "gpu%d", g);
        for (int k = 0; k < 1 + g % 2; k++)
            if (sched_take(s, id, now, &running[g * 2 + k]) != 0)
                running[g * 2 + k] = 0;
    }
    sched_dispatch(s, now, NULL, NULL);
    double *us = malloc((size_t)decisions * 2 * sizeof(double));
    double *cpu = malloc((size_t)decisions * 2 * sizeof(double));
    /* Every measured dispatch, also those that place nothing (a job held for
     * a busier GPU that suits it better, a queue that cannot start): a GPU
     * freed and a job arrived either way, and that cost is the scheduler's. */
    double *per_dispatch = malloc((size_t)decisions * 4 * sizeof(double));
    int nd = 0, nidle = 0;
    int taken[4] = {0, 0, 0, 0};
    int n = 0;
    for (int i = 0; n < decisions && i < decisions * 4; i++) {
        int g = (int)(xorshift() % (uint64_t)ngpus);
        int k = (int)(xorshift() % (uint64_t)(1 + g % 2));
        char id[32];
        snprintf(id, sizeof(id), "gpu%d", g);
        now += 1000000; /* 1 ms between completions */
        if (running[g * 2 + k])
            sched_job_finished(s, running[g * 2 + k], true, 0, 2500000000LL, now);
        running[g * 2 + k] = 0;
        sched_take(s, id, now, &running[g * 2 + k]);
        if (running[g * 2 + k])
            taken[kind_of[running[g * 2 + k]]]++;
        add_job(s, now);
        int64_t c0 = cpu_ns();
        int64_t t0 = clock_mono_ns();
        int placed = measured(s, now);
        int64_t dt = clock_mono_ns() - t0;
        int64_t dc = cpu_ns() - c0;
        per_dispatch[nd++] = (double)dt / 1e3;
        if (placed == 0)
            nidle++;
        for (int p = 0; p < placed && n < decisions; p++) {
            cpu[n] = (double)dc / 1e3 / placed;
            us[n++] = (double)dt / 1e3 / placed;
        }
    }
    struct sched_stats st;
    sched_stats(s, &st);
    qsort(us, (size_t)n, sizeof(double), cmp_d);
    qsort(cpu, (size_t)n, sizeof(double), cmp_d);
    qsort(per_dispatch, (size_t)nd, sizeof(double), cmp_d);
    struct result r = {0, 0, 0, 0, 0, n};
    if (n > 0) {
        r.p50 = us[n / 2];
        r.p99 = us[(int)(n * 0.99)];
        r.max = us[n - 1];
        r.cpu_p50 = cpu[n / 2];
        r.cpu_p99 = cpu[(int)(n * 0.99)];
    }
    printf("  %5d GPUs, %6d queued (now %d queued, %d placed, %d running): %d decisions\n"
           "    wall p50 %.2f us, p99 %.2f us, max %.2f us; thread CPU p50 %.2f us, p99 %.2f us\n",
           ngpus, queued, st.queued, st.placed, st.running, n, r.p50, r.p99, r.max, r.cpu_p50,
           r.cpu_p99);
    printf("    started while measured: %s %d, %s %d, %s %d (batch), %s %d (batch)\n", caps[0],
           taken[0], caps[1], taken[1], caps[2], taken[2], caps[3], taken[3]);
    if (nd > 0)
        printf("    per dispatch (a GPU freed, a job arrived): %d dispatches, %d placed nothing;"
               " wall p50 %.2f us, p99 %.2f us, max %.2f us\n",
               nd, nidle, per_dispatch[nd / 2], per_dispatch[(int)(nd * 0.99)],
               per_dispatch[nd - 1]);
    free(per_dispatch);
    free(us);
    free(cpu);
    free(running);
    sched_destroy(s);
    return r;
}

int main(int argc, char **argv)
{
    int gpus = argc > 1 ? atoi(argv[1]) : 1000;
    int queued = argc > 2 ? atoi(argv[2]) : 100000;
    int decisions = argc > 3 ? atoi(argv[3]) : 20000;
    if (gpus < 1 || queued < 1 || decisions < 1) {
        fprintf(stderr, "usage: gpuq-bench-sched [gpus] [queued] [decisions]\n");
        return 2;
    }
    printf("scheduler decision cost (sched_dispatch wall time per placement)\n");
    struct result base = run(7, 100, decisions, dispatch_small);
    struct result big = run(gpus, queued, decisions, dispatch_big);
    printf("decision_us p99 at %d GPUs / %d queued: wall %.2f, CPU %.2f (target <= 50);"
           " %.1fx (CPU) the 7-GPU box\n",
           gpus, queued, big.p99, big.cpu_p99, base.cpu_p99 > 0 ? big.cpu_p99 / base.cpu_p99 : 0);
    return 0;
}
