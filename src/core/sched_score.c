/* sched_score.c: how good a GPU is for a job — the projection of each worker's
 * near future (slots, resident models after its placed jobs), the estimated
 * completion time of a job there (R16-R19), the decision over a capability's
 * open workers with its explanation (R21), and late-binding moves (R20). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "core/sched_int.h"
#include "core/vram.h"

/* The explanation is written for every decision (R21) and printf's
 * exact float formatting was a quarter of a decision's instructions at
 * 1,000 GPUs (bench/sched-ir). reason_put_fixed writes what printf("%.Nf")
 * writes for N <= 2 through fmt_fixed (common/buf.c), or returns false
 * where printf must (not finite, too large). */
struct reason_buf {
    char *p;
    size_t n, len; /* len: the length untruncated, as vsnprintf returns */
};

static void reason_put(struct reason_buf *b, const char *src, size_t k)
{
    size_t at = b->len < b->n - 1 ? b->len : b->n - 1;
    size_t room = b->n - 1 - at;
    memcpy(b->p + at, src, k < room ? k : room);
    b->len += k;
}

static bool reason_put_fixed(struct reason_buf *b, double x, int prec)
{
    char tmp[FMT_FIXED_MAX];
    size_t k = fmt_fixed(tmp, x, prec);
    if (k)
        reason_put(b, tmp, k);
    return k > 0;
}

/* reason_fast: the formats the reasons use (%s, %d, %.Nf with N <= 2, %%)
 * without printf; false at anything else (then nothing is promised of r). */
static bool reason_fast(char *r, size_t n, const char *fmt, va_list ap)
{
    struct reason_buf b = {r, n, 0};
    for (const char *c = fmt; *c;) {
        if (*c != '%') {
            const char *e = strchr(c, '%');
            size_t k = e ? (size_t)(e - c) : strlen(c);
            reason_put(&b, c, k);
            c += k;
            continue;
        }
        if (c[1] == '%') {
            reason_put(&b, "%", 1);
            c += 2;
        } else if (c[1] == 's') {
            const char *str = va_arg(ap, const char *);
            if (!str)
                return false;
            reason_put(&b, str, strlen(str));
            c += 2;
        } else if (c[1] == 'd') {
            long long v = va_arg(ap, int);
            char tmp[24];
            int k = (int)sizeof(tmp);
            unsigned long long u = v < 0 ? (unsigned long long)-v : (unsigned long long)v;
            do {
                tmp[--k] = (char)('0' + u % 10);
                u /= 10;
            } while (u);
            if (v < 0)
                tmp[--k] = '-';
            reason_put(&b, tmp + k, sizeof(tmp) - (size_t)k);
            c += 2;
        } else if (c[1] == '.' && c[2] >= '0' && c[2] <= '2' && c[3] == 'f') {
            if (!reason_put_fixed(&b, va_arg(ap, double), c[2] - '0'))
                return false;
            c += 4;
        } else {
            return false;
        }
    }
    b.p[b.len < b.n - 1 ? b.len : b.n - 1] = '\0';
    return true;
}

void sched_reason_printf(char *r, size_t n, const char *fmt, ...)
{
    if (n == 0)
        return;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    if (!reason_fast(r, n, fmt, ap))
        vsnprintf(r, n, fmt, again);
    va_end(again);
    va_end(ap);
}

/* reason_printf writes a one-line reason, truncated to fit (by design). */
#define reason_printf sched_reason_printf

static double ns_to_s(int64_t ns)
{
    return (double)ns / 1e9;
}

static int64_t s_to_ns(double s)
{
    return (int64_t)llround(s * 1e9);
}

static void sort_slots(int64_t *a, int n)
{
    for (int i = 1; i < n; i++) {
        int64_t v = a[i];
        int k = i - 1;
        while (k >= 0 && a[k] > v) {
            a[k + 1] = a[k];
            k--;
        }
        a[k + 1] = v;
    }
}

static int proj_find(const struct sworker *w, int model)
{
    for (int i = 0; i < w->nproj; i++)
        if (w->proj_model[i] == model)
            return i;
    return -1;
}

static double model_load_s(const struct sched *s, int model)
{
    const struct smodel *m = &s->models[model];
    return estimator_load_s(s->est, model, (double)m->info.load_ms / 1000.0);
}

double sched_model_load_s(const struct sched *s, int model)
{
    return model_load_s(s, model);
}

double sched_worker_speed(const struct sworker *w)
{
    return w->info.speed > 0 ? w->info.speed : w->learned_speed;
}

static double demand_decay(const struct sched *s, const struct squeue *q, int64_t now);

/* The decayed count of jobs that asked for model (and, in *work when given,
 * their GPU-seconds) over its queues; below DEMAND_MIN it is not in demand
 * (no job within about one demand window). */
#define DEMAND_MIN exp(-1.0)

static double model_demand(const struct sched *s, int model, int64_t now, double *work)
{
    double n = 0, wk = 0;
    for (int k = 0; k < s->nqueues; k++) {
        const struct squeue *q = &s->queues[k];
        if (q->model != model)
            continue;
        double f = demand_decay(s, q, now);
        n += q->d_count * f;
        wk += q->d_work * f;
    }
    if (work)
        *work = wk;
    return n;
}

/* How scarce a model's homes are: usable workers ÷ those that can hold it
 * (1 when every one can). Recounted only when the fleet changes. */
static double model_scarcity(struct sched *s, int model)
{
    struct smodel *m = &s->models[model];
    if (m->homes_ver != s->fleet_ver) {
        m->homes = m->usable = 0;
        for (int i = 0; i < s->nworkers; i++) {
            const struct sworker *w = s->workers[i];
            if (!sched_worker_live(w))
                continue;
            m->usable++;
            if (sched_worker_can_hold(s, w, model))
                m->homes++;
        }
        m->homes_ver = s->fleet_ver;
    }
    return m->homes > 0 ? (double)m->usable / m->homes : 1.0;
}

/* Whether any job asked for model within the demand window. */
static bool model_in_demand(const struct sched *s, int model, int64_t now)
{
    return model_demand(s, model, now, NULL) >= DEMAND_MIN;
}

/* The cost of evicting model, in seconds of the job (of run_s) that would
 * evict it: the victim's reload, paid by its next job, as the slowdown it adds
 * there (reload / the victim's mean job) times this job's run — a 10 s video
 * reload before a 75 s video job weighs 0.33 s against a 2.5 s image job,
 * while a 7 s reload before a 6 s job weighs about this job's whole run. A
 * model no job asked for within the demand window costs nothing to evict.
 * Utility models count half; x evict_weight. (Flat reloads kept idle video
 * models resident while image jobs queued on seed7; evict_weight 0 made
 * zoo.json thrash: this weighs both.) */
static double eviction_cost(const struct sched *s, int model, int for_model, double run_s,
                            double speed, int64_t now)
{
    const struct smodel *m = &s->models[model];
    double w = m->info.cls == MODEL_UTILITY ? 0.5 : 1.0;
    double work;
    double n = model_demand(s, model, now, &work);
    if (n < DEMAND_MIN)
        return 0;
    double load = model_load_s(s, model);
    double victim_run = work / n;
    double share = victim_run > run_s ? run_s / victim_run : 1.0;
    /* R24's priority: a utility model's job pays a generation model's whole
     * reload (a burst of small jobs must not push out the main model). */
    if (m->info.cls != MODEL_UTILITY && s->models[for_model].info.cls == MODEL_UTILITY)
        share = 1.0;
    /* A job longer than the victim's keeps the victim's jobs off this GPU
     * for the rest of its run: that part of its run, beyond one victim job,
     * is GPU time the victim's demand loses (seed7: a 75 s video job that
     * loads onto an image GPU rather than wait for a video GPU takes that
     * GPU from the image jobs; weighing only the reload, gpuq loaded video
     * on 2x the GPUs affinity-ect did and image.fast waited). */
    double displaced = run_s > victim_run ? run_s - victim_run : 0;
    /* Speed goes to the short jobs (rule 7): the displaced time weighs less
     * on a GPU slower than the decision's fastest, so a long job that must
     * load takes a slow GPU and leaves the fast ones to the many short jobs
     * that feel a 25% slower run as much per job as it does. */
    if (displaced > 0 && s->speed_ref > speed) {
        double r = speed / s->speed_ref;
        displaced *= r * r * r * r;
    }
    return w * s->cfg.evict_weight * (load * share + displaced);
}

/* Plans loading model on w's projected residents. Returns 0 and fills victims
 * (indexes into proj) or a negative code; in_use_blocks tells whether only
 * models in use by running/placed jobs stand in the way. */
static int plan_load(const struct sched *s, const struct sworker *w, int model, int *victims,
                     int *nv, bool *in_use_blocks)
{
    struct vram_model vm[SCHED_PROJ_MAX];
    for (int i = 0; i < w->nproj; i++) {
        const struct smodel *m = &s->models[w->proj_model[i]];
        vm[i] = (struct vram_model){m->info.name, w->proj_vram[i], m->info.cls,
                                    w->proj_pinned[i] || w->proj_inuse[i], w->proj_used[i]};
    }
    int64_t need = s->models[model].info.vram_mb;
    *in_use_blocks = false;
    int rc = vram_plan_evictions(vm, w->nproj, w->proj_free_mb, need, victims, nv);
    if (rc == 0)
        return 0;
    for (int i = 0; i < w->nproj; i++)
        vm[i].pinned = w->proj_pinned[i];
    rc = vram_plan_evictions(vm, w->nproj, w->proj_free_mb, need, victims, nv);
    if (rc == 0)
        *in_use_blocks = true;
    return rc;
}

static void proj_apply(const struct sched *s, struct sworker *w, int model, const int *victims,
                       int nv, int64_t at)
{
    bool gone[SCHED_PROJ_MAX] = {false};
    for (int k = 0; k < nv; k++) {
        gone[victims[k]] = true;
        w->proj_free_mb += w->proj_vram[victims[k]];
    }
    int n = 0;
    for (int i = 0; i < w->nproj; i++) {
        if (gone[i])
            continue;
        w->proj_model[n] = w->proj_model[i];
        w->proj_vram[n] = w->proj_vram[i];
        w->proj_used[n] = w->proj_used[i];
        w->proj_pinned[n] = w->proj_pinned[i];
        w->proj_inuse[n] = w->proj_inuse[i];
        n++;
    }
    w->nproj = n;
    if (n < SCHED_PROJ_MAX) {
        w->proj_model[n] = model;
        w->proj_vram[n] = s->models[model].info.vram_mb;
        w->proj_used[n] = at;
        w->proj_pinned[n] = false;
        w->proj_inuse[n] = true;
        w->proj_free_mb -= w->proj_vram[n];
        w->nproj++;
    }
}

/* When a running job is expected to end. One past its estimate has not
 * ended "now": it is expected to run on about as long again as it has
 * overrun (at least 1 ms, at most its whole estimate). Projecting it to end
 * at once would make its GPU look as free as an idle one, so an idle GPU
 * would not take the job placed behind it (late binding saw no gain) and
 * sat idle while that job waited — the M/M/c excess over Erlang C. */
static int64_t overdue_end(const struct sjob *r, int64_t now)
{
    int64_t total = s_to_ns(r->est_load_s + r->est_run_s);
    int64_t end = r->est_start_ns + total;
    if (end > now)
        return end;
    int64_t over = now - end;
    if (over > total)
        over = total;
    return now + (over > 1000000 ? over : 1000000);
}

void sched_project(struct sched *s, struct sworker *w, int64_t now)
{
    if (!w->dirty)
        return;
    int conc = w->info.concurrency;
    for (int i = 0; i < conc; i++)
        w->slots[i] = now;
    /* Residents as reported. */
    int64_t used = 0;
    w->nproj = 0;
    for (int i = 0; i < w->info.nloaded && w->nproj < SCHED_PROJ_MAX; i++) {
        int n = w->nproj++;
        w->proj_model[n] = w->loaded_model[i];
        w->proj_vram[n] = w->info.loaded[i].vram_mb;
        w->proj_used[n] = w->info.loaded[i].last_used_ns;
        w->proj_pinned[n] = w->info.loaded[i].pinned;
        w->proj_inuse[n] = false;
        used += w->proj_vram[n];
    }
    w->proj_free_mb = w->info.vram_free_mb;
    if (w->proj_free_mb > w->info.vram_total_mb - used)
        w->proj_free_mb = w->info.vram_total_mb - used;
    if (w->proj_free_mb < 0)
        w->proj_free_mb = 0;
    /* Running jobs hold slots until their estimated end. */
    int k = 0;
    w->overdue_ns = INT64_MAX;
    for (struct sjob *r = w->run_head; r; r = r->next) {
        int64_t end = overdue_end(r, now);
        if (end < w->overdue_ns)
            w->overdue_ns = end;
        if (k < conc)
            w->slots[k++] = end;
        int p = proj_find(w, r->model);
        if (p >= 0)
            w->proj_inuse[p] = true;
    }
    sort_slots(w->slots, conc);
    /* Placed jobs start in order, each on the earliest free slot. */
    for (struct sjob *j = w->placed_head; j; j = j->next) {
        int64_t t = w->slots[0];
        double load = 0;
        int p = j->spec.model[0] ? proj_find(w, j->model) : 0;
        if (p < 0) {
            int victims[SCHED_PROJ_MAX], nv = 0;
            bool blocked = false;
            if (plan_load(s, w, j->model, victims, &nv, &blocked) == 0) {
                if (blocked)
                    t = w->slots[conc - 1];
                proj_apply(s, w, j->model, victims, nv, t);
            }
            load = model_load_s(s, j->model);
        } else if (j->spec.model[0]) {
            w->proj_inuse[p] = true;
        }
        j->est_load_s = load;
        j->est_start_ns = t;
        w->slots[0] = t + s_to_ns(load + j->est_run_s);
        sort_slots(w->slots, conc);
    }
    w->ready_ns = w->slots[0];
    w->all_free_ns = w->slots[conc - 1];
    w->dirty = false;
}

/* ---- demand -------------------------------------------------------------
 * Each (capability, model) queue counts its arrivals (all lanes) and their
 * nominal GPU-seconds, decayed over headroom_window_s: how often its model is
 * asked for, and its mean job. Eviction weighs a victim by it (eviction_cost). */
static double demand_decay(const struct sched *s, const struct squeue *q, int64_t now)
{
    if (now <= q->d_ns || !(s->cfg.headroom_window_s > 0))
        return 1;
    return exp(-((double)(now - q->d_ns) / 1e9) / s->cfg.headroom_window_s);
}

void sched_demand_note(const struct sched *s, struct squeue *q, double cost_s, int64_t now)
{
    double f = demand_decay(s, q, now);
    q->d_count = q->d_count * f + 1;
    q->d_work = q->d_work * f + (cost_s > 0 ? cost_s : 0);
    if (now > q->d_ns)
        q->d_ns = now;
}

void sched_project_now(struct sched *s, struct sworker *w, int64_t now)
{
    if (!w->dirty && w->nrunning > 0 && now >= w->overdue_ns)
        w->dirty = true;
    sched_project(s, w, now);
}

bool sched_worker_can_hold(const struct sched *s, const struct sworker *w, int model)
{
    if (!s->models[model].info.name[0])
        return true;
    int64_t pinned_other = 0;
    for (int i = 0; i < w->info.nloaded; i++)
        if (w->info.loaded[i].pinned && w->loaded_model[i] != model)
            pinned_other += w->info.loaded[i].vram_mb;
    return s->models[model].info.vram_mb <= w->info.vram_total_mb - pinned_other;
}

bool sched_job_excludes(const struct sjob *j, const char *worker_id)
{
    for (int i = 0; i < j->spec.nexclude; i++)
        if (strcmp(j->spec.exclude[i], worker_id) == 0)
            return true;
    return false;
}

/* Exclusions bind while some worker could still take the job without them:
 * a member of its capability, usable, large enough for its model and not
 * excluded. Costs one pass over the workers; only jobs with exclusions that
 * meet an excluded worker pay it. */
bool sched_exclusion_binds(const struct sched *s, const struct sjob *j)
{
    for (int i = 0; i < s->nworkers; i++) {
        const struct sworker *w = s->workers[i];
        if (w->alive && w->info.healthy && !w->info.draining &&
            sched_worker_cap_slot(w, j->cap) >= 0 && sched_worker_can_hold(s, w, j->model) &&
            !sched_job_excludes(j, w->info.id))
            return true;
    }
    return false;
}

static double worker_speed(const struct sworker *w)
{
    return w->info.speed > 0 ? w->info.speed : w->learned_speed;
}

static double thermal_factor(const struct sched *s, const struct sworker *w)
{
    return w->info.temp_c >= s->cfg.hot_temp_c ? s->cfg.hot_penalty : 1.0;
}

static bool fanout_blocks(const struct sched *s, const struct sworker *w, const struct sjob *j)
{
    const struct scap *c = &s->caps[j->cap];
    if (c->max_gpus <= 0 || c->occupied < c->max_gpus)
        return false;
    int k = sched_worker_cap_slot(w, j->cap);
    if (k >= 0 && w->cap_jobs[k] > 0)
        return false; /* already one of its GPUs */
    /* Busy fleet: at least as much work as GPUs. */
    return s->nqueued + s->nplaced + s->nrunning >= s->nworkers;
}

/* A batch job that has waited more than STARVE_AFTER_RUNS times its own
 * (nominal) run starts on any GPU with a free slot, interactive headroom or
 * not. The headroom keeps batch off the GPUs as good as the one asked for,
 * so on a busy mixed fleet batch got only the slowest GPUs: on zoo-nofit
 * (80% load, bursty) video, which fits only the 32 and 48 GB GPUs, got the
 * four 0.9 ones, fell behind for the whole run and waited up to 2,000 s
 * for a 60 s job (p99 1,225 s, median of seeds 1..10). A job's wait only
 * grows, so the rule cannot flap for a job; 1 / 2 / 3 / 5 runs traded
 * video p99 274 / 330 / 369 / 482 s against image.sdxl SLO attainment
 * 0.806 / 0.837 / 0.857 / 0.861 (oracle 0.817). A queue-level hysteresis
 * (starving from 2 runs until the oldest has waited under 1) gave no
 * higher cache hit ratio and a lower SLO (seeds 1..4: 0.912 / 0.774
 * against 0.920 / 0.817). The reserved pool still lends only when no
 * interactive job waits: an operator set it. */
#define STARVE_AFTER_RUNS 2.0
/* ... and only while no batch job of its capability has started for
 * STARVE_GAP_RUNS of its runs: it is the capability that starves, not a job
 * waiting its turn in a batch flood. Under a flood every batch job has
 * waited many runs, and the rule alone let them all past the headroom:
 * bench/admission-sim's interactive p99 ratio went to 1.107-1.134 on seeds
 * 1, 2, 11, 13 (1.030-1.073 with this gap, as without the rule). Gaps of
 * 1 / 0.5 / 0.25 runs: flood seed 11 1.058 / 1.115 / 1.128; zoo-nofit video
 * p99 377 / 350 / 361 s (306 s with no gap, 1,225 s without the rule). */
#define STARVE_GAP_RUNS 1.0

static bool batch_starving(const struct sched *s, const struct sjob *j, int64_t now)
{
    if (j->spec.lane != SCHED_LANE_BATCH || j->cost_s <= 0)
        return false;
    double limit_s = STARVE_AFTER_RUNS * j->cost_s;
    int64_t last = s->caps[j->cap].batch_start_ns;
    return ns_to_s(now - j->spec.submit_ns) > limit_s &&
           (last == 0 || ns_to_s(now - last) > STARVE_GAP_RUNS * j->cost_s);
}

/* Rule 13: a batch job goes with the interactive lane once waiting any
 * longer would take it past URGENT_SHARE of its capability's objective
 * (submit to finish; its age plus its nominal run): dispatch orders it
 * among the interactive jobs by submission, and it queues on a GPU like
 * one, ahead of the batch jobs placed there. Batch otherwise starts only on
 * a free slot after every interactive job: in a burst no slot frees, and on
 * zoo-nofit transcribe (8 s, objective 40 s) waited 150-184 s in seed 1
 * while 500-600 interactive jobs started, p99 86.5 s (median of seeds
 * 1..10) against the oracle's 36.8 s, whose one FIFO serves it in arrival
 * order. 0.75 is rule 9's share (SLO_SHARE): the rest is margin for a run
 * that is late. */
#define URGENT_SHARE 0.75

bool sched_batch_urgent(const struct sched *s, const struct sjob *j, int64_t now)
{
    if (j->spec.lane != SCHED_LANE_BATCH || !(j->cost_s > 0))
        return false;
    double slo = s->caps[j->cap].slo_s;
    return slo > 0 && ns_to_s(now - j->spec.submit_ns) + j->cost_s > URGENT_SHARE * slo;
}

/* Rule 13's queueing: an urgent batch job queues on a busy GPU only when its
 * run is no longer than the longest objective of an interactive capability
 * (the jobs queued behind it wait at most that); a longer one is ordered
 * with the interactive lane but still starts only on a free slot. On
 * zoo-nofit urgent video (60 s) queued in front of image jobs: every
 * interactive model's p99 rose (the within-bound count fell from 7-10 to
 * 5-8 of 10 seeds for all 9 short ones).
 * Rule 15: a longer one queues too once it would miss its objective even if
 * it started now (age + run past LATE_SHARE of the objective): waiting on
 * for a free slot no longer keeps it in time, it only makes the miss larger,
 * and in a burst no slot frees while interactive jobs are placed on every
 * GPU. On zoo-nofit, with rule 14 (video: 60 s, objective 300 s; seeds
 * 1..10, medians): video p99 369.5 -> 322.7 s, image.sdxl p50 / p99 / SLO
 * 5.15 / 22.8 / 0.825 -> 5.07 / 22.5 / 0.847; seeds 11..20, not tuned on:
 * video 339.3 -> 313.7 s, image.sdxl 5.05 / 23.1 / 0.855 -> 4.95 / 20.8 /
 * 0.868. Shares 0.9 / 0.95 / 1.2 gave video 314 / 323 / 362 s and
 * image.sdxl p99 25.6 / 25.2 / 22.3 s (seeds 1..10). */
#define LATE_SHARE 1.0

static bool urgent_queues(const struct sched *s, const struct sjob *j, int64_t now)
{
    if (!sched_batch_urgent(s, j, now))
        return false;
    double lim = 0;
    for (int k = 0; k < s->ncaps; k++)
        if (s->caps[k].interactive && s->caps[k].slo_s > lim)
            lim = s->caps[k].slo_s;
    if (j->cost_s <= lim)
        return true;
    double slo = s->caps[j->cap].slo_s;
    return ns_to_s(now - j->spec.submit_ns) + j->cost_s > LATE_SHARE * slo;
}

/* Batch binds late (R8): a batch job goes only to a worker with a free slot,
 * where it starts at once; on a reserved worker, only while no interactive
 * job of the worker's capabilities waits; on any worker, only while the
 * interactive headroom (core/headroom.h) stays free of batch without it. It
 * is lent at a job boundary and returns at the next: a batch job ends, the
 * GPU takes interactive work first. */
/* A batch job (not starving) does not load where it would push out a model
 * in demand that at most 1 / SCARCE_HOMES of the usable GPUs can hold: that
 * model's jobs have nowhere else to go, and batch can wait. On zoo-nofit
 * the 40 GB llm-70b fits only the four 48 GB GPUs, which video (28 GB) also
 * fits; the two cannot share one, and video loading there made chat.large
 * reload llm-70b (15-20 s) for 121 of its 649 jobs (seed 1), p99 90 s. */
#define SCARCE_HOMES 2.0

/* Rule 17: a batch job whose model no interactive job uses passes the
 * headroom on a GPU that already holds that model, unless an interactive
 * model is pinned there. The headroom keeps GPUs free of batch so that an
 * interactive job finds one ready; a GPU holding a batch-only model serves
 * interactive jobs only beside it or after a load, and refusing the next
 * batch job there only sends the job, once it starves (rule 10), to a GPU
 * it must load onto, pushing out interactive models. On zoo-nofit video
 * (28 GB) fills a 32 GB GPU. bench/sched-table, medians: image.sdxl p50 /
 * p99 / SLO 5.07 / 22.5 / 0.847 -> 4.81 / 21.6 / 0.864, hit 0.927 -> 0.941,
 * cold loads 1,554 -> 1,259, video within max(5x run, oracle p99) in 1 -> 5
 * of 10 seeds (seeds 1..10); seeds 11..20 4.95 / 20.8 / 0.868 -> 4.53 /
 * 17.9 / 0.909. A pinned interactive model marks a GPU an operator keeps
 * for that model, which it serves warm beside the batch one: on
 * seed003-box video shares two GPUs with pinned image-v2, and without the
 * exception seeds 11..20 fell from 10 to 9 of 10 best on all three
 * (image.fast p99 8.7 -> 9.4 s). Leaving out every GPU that holds an
 * interactive generation model instead lost most of the zoo's gain (model-
 * seeds within the bound 105 -> 95 of 120), as did counting only models
 * over half the GPU's VRAM (94). Waiving the headroom for every warm batch
 * job (also where interactive jobs share its model) broke
 * bench/admission-sim's flood, where they do: interactive p99 ratio 1.041
 * -> 1.115 (seed 1), 1.058 -> 1.125 (seed 11), over its 1.10 target; with
 * the batch-only condition its figures are unchanged. */
static bool batch_only_resident(const struct sched *s, const struct sworker *w,
                                const struct sjob *j)
{
    if (j->model < 0 || s->models[j->model].interactive || !sched_worker_holds(w, j->model))
        return false;
    for (int i = 0; i < w->info.nloaded; i++)
        if (w->info.loaded[i].pinned && s->models[w->loaded_model[i]].interactive)
            return false;
    return true;
}

static bool batch_blocked(struct sched *s, const struct sworker *w, const struct sjob *j,
                          int64_t now)
{
    /* Rule 13: an urgent job queues on a busy GPU, but not on one that holds
     * a scarce model in demand when its own model has more homes (rule 12's
     * comparison): it would take that model's only slots. On zoo-nofit urgent
     * transcribe queued on the GPUs that hold llm-70b: chat.large p99 62.2 s
     * with this, 67.6 s without (seeds 1..10, medians). */
    bool urgent = urgent_queues(s, j, now);
    bool full = w->nrunning + w->nplaced >= w->info.concurrency;
    if (!urgent && full)
        return true;
    if (urgent && full)
        for (int i = 0; i < w->info.nloaded; i++) {
            int m = w->loaded_model[i];
            if (m != j->model && model_scarcity(s, m) >= SCARCE_HOMES &&
                model_scarcity(s, j->model) < model_scarcity(s, m) && model_in_demand(s, m, now))
                return true;
        }
    if (w->info.reserved)
        for (int k = 0; k < w->ncaps; k++)
            if (s->caps[w->caps[k]].nqueued_interactive > 0)
                return true;
    if (batch_starving(s, j, now) || sched_batch_urgent(s, j, now))
        return false;
    if (batch_only_resident(s, w, j))
        return false;
    return sched_headroom_blocks(s, w, now, s->headroom_why, sizeof(s->headroom_why));
}

/* Rule 12: no job pushes out the last resident copy of a scarce model in
 * demand (rule 11's) when it has GPUs of its own that the scarce model
 * cannot use — not even a starving batch job, which rule 11 lets through:
 * the scarce model's jobs would all wait behind its run and a reload
 * (15-20 s for llm-70b on zoo-nofit), while the job itself can wait for a
 * GPU the scarce model cannot use. In a per-job trace of zoo-nofit seed 1,
 * chat.large's slowest jobs waited 60-76 s while starving video ran on all
 * four GPUs that can hold llm-70b, then reloaded it. A job whose model has
 * no more homes than the victim (it may have nowhere else) is not held by
 * it. Reads what the workers report loaded: one pass over the workers, paid
 * only where a load would push out a scarce model in demand. */
static bool resident_elsewhere(const struct sched *s, int model, const struct sworker *w)
{
    for (int i = 0; i < s->nworkers; i++) {
        const struct sworker *o = s->workers[i];
        if (o != w && sched_worker_live(o) && sched_worker_holds(o, model))
            return true;
    }
    return false;
}

/* j's estimated run on w at nominal speed: the estimator's figure, asked once
 * per GPU class in a decision (sched.run_memo; the same figure). */
static double run_nominal_s(struct sched *s, const struct sworker *w, const struct sjob *j)
{
    int k = w->gpu_class;
    if (s->run_memo_job != j || k < 0 || k >= s->caprunmemo)
        return estimator_run_s(s->est, j->model, k, j->work);
    if (s->run_memo_gen[k] != s->run_memo_cur) {
        s->run_memo[k] = estimator_run_s(s->est, j->model, k, j->work);
        s->run_memo_gen[k] = s->run_memo_cur;
    }
    return s->run_memo[k];
}

/* The candidate's worker id, as snprintf("%s") would write it, without
 * formatting: scored for every open worker of a decision. */
static void copy_id(char *dst, const char *src)
{
    size_t n = strnlen(src, SCHED_NAME_MAX - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

int sched_score_one(struct sched *s, struct sworker *w, const struct sjob *j, int64_t now,
                    struct sched_candidate *c)
{
    memset(c, 0, sizeof(*c));
    copy_id(c->worker_id, w->info.id);
    if (!w->info.healthy || w->info.draining)
        return SCORE_F_UNHEALTHY;
    if (sched_worker_cap_slot(w, j->cap) < 0)
        return SCORE_F_CAP;
    bool has_model = j->spec.model[0] != '\0';
    if (!sched_worker_can_hold(s, w, j->model))
        return SCORE_F_VRAM;
    if (sched_job_excludes(j, w->info.id) && sched_exclusion_binds(s, j))
        return SCORE_F_EXCLUDED;
    if (fanout_blocks(s, w, j))
        return SCORE_F_BUSY;
    if (j->spec.lane == SCHED_LANE_BATCH && batch_blocked(s, w, j, now))
        return SCORE_F_BUSY;
    sched_project_now(s, w, now);
    int64_t start = w->ready_ns;
    c->warm = !has_model || proj_find(w, j->model) >= 0;
    if (!c->warm) {
        int victims[SCHED_PROJ_MAX], nv = 0;
        bool blocked = false;
        if (plan_load(s, w, j->model, victims, &nv, &blocked) != 0)
            return SCORE_F_VRAM;
        if (blocked)
            start = w->all_free_ns;
        c->evictions = nv;
        c->speed = worker_speed(w);
        c->run_s = run_nominal_s(s, w, j) / c->speed;
        bool may_push_scarce = j->spec.lane != SCHED_LANE_BATCH || batch_starving(s, j, now);
        for (int k = 0; k < nv; k++) {
            int victim = w->proj_model[victims[k]];
            double e = eviction_cost(s, victim, j->model, c->run_s, worker_speed(w), now);
            if (e > 0 && model_scarcity(s, victim) >= SCARCE_HOMES &&
                (!may_push_scarce ||
                 (model_scarcity(s, j->model) < model_scarcity(s, victim) &&
                  !resident_elsewhere(s, victim, w))))
                return SCORE_F_BUSY;
            c->evict_penalty_s += e;
        }
        c->load_s = model_load_s(s, j->model);
    }
    c->speed = worker_speed(w);
    c->run_s = run_nominal_s(s, w, j) / c->speed;
    c->wait_s = start > now ? ns_to_s(start - now) : 0;
    c->thermal_factor = thermal_factor(s, w);
    c->load_ratio = (double)(w->nrunning + w->nplaced) / (double)w->info.concurrency;
    c->score_s = c->wait_s * c->thermal_factor + c->load_s + c->run_s + c->evict_penalty_s;
    return SCORE_OK;
}

/* Completion times within a millisecond count as a tie (R19 breaks it). */
#define TIE_S 1e-3

bool sched_cand_better(const struct sched_candidate *a, uint64_t aseq,
                       const struct sched_candidate *b, uint64_t bseq)
{
    if (fabs(a->score_s - b->score_s) > TIE_S)
        return a->score_s < b->score_s;
    if (a->load_ratio != b->load_ratio)
        return a->load_ratio < b->load_ratio;
    if (a->speed != b->speed)
        return a->speed > b->speed;
    return aseq < bseq;
}

static void explain_reason(struct sched_explain *why)
{
    const struct sched_candidate *b = &why->cand[0];
    char *r = why->reason;
    size_t n = sizeof(why->reason);
    if (why->nkept == 1) {
        reason_printf(r, n, "only candidate: %s, est. finish %.2fs%s", b->warm ? "warm" : "cold load",
                 b->score_s, b->thermal_factor > 1 ? " (hot)" : "");
        return;
    }
    const struct sched_candidate *o = &why->cand[1];
    const struct sched_candidate *warm_alt = NULL;
    for (int i = 1; i < why->nkept; i++)
        if (why->cand[i].warm) {
            warm_alt = &why->cand[i];
            break;
        }
    if (fabs(b->score_s - o->score_s) <= TIE_S)
        reason_printf(r, n, "tie at %.2fs with %s: load ratio %.2f vs %.2f, speed %.2f vs %.2f",
                 b->score_s, o->worker_id, b->load_ratio, o->load_ratio, b->speed, o->speed);
    else if (b->warm && !o->warm)
        reason_printf(r, n, "model warm: %.2fs beats cold load on %s (%.2fs)", b->score_s,
                 o->worker_id, o->score_s);
    else if (!b->warm && warm_alt)
        reason_printf(r, n, "cold load %.2fs finishes at %.2fs, sooner than waiting for warm %s (%.2fs)",
                 b->load_s, b->score_s, warm_alt->worker_id, warm_alt->score_s);
    else if (o->thermal_factor > b->thermal_factor)
        reason_printf(r, n, "earliest completion %.2fs; %s is hot (x%.1f on wait, %.2fs)", b->score_s,
                 o->worker_id, o->thermal_factor, o->score_s);
    else
        reason_printf(r, n, "earliest estimated completion %.2fs (%s: wait %.2fs load %.2fs run %.2fs);"
                       " next %s %.2fs",
                 b->score_s, b->warm ? "warm" : "cold", b->wait_s, b->load_s, b->run_s,
                 o->worker_id, o->score_s);
}

/* Rule 9: a job whose capability has a latency objective waits for a GPU
 * that holds its model, rather than load where that pushes out a model in
 * demand, while waiting still finishes it within SLO_SHARE of the objective
 * (counted from its submission): the rest is margin for estimates that run
 * late. (seed7, seeds 1..20: shares 0.5 / 0.75 / 0.9 / 1 gave 17 / 17 / 17
 * / 15 seeds best on all three; at 1 zoo-nofit's p50 rose 3.91 -> 4.03 s.) */
#define SLO_SHARE 0.75

/* The latest finish, in seconds from now, that keeps j within SLO_SHARE of
 * its capability's objective; 0 when it has none (or is already past it). */
static double slo_finish_s(const struct sched *s, const struct sjob *j, int64_t now)
{
    double slo = s->caps[j->cap].slo_s;
    if (!(slo > 0))
        return 0;
    double age = now > j->spec.submit_ns ? ns_to_s(now - j->spec.submit_ns) : 0;
    double lim = slo * SLO_SHARE - age;
    return lim > 0 ? lim : 0;
}

/* Full GPUs looked at when a decision would load a model (sched_decide). */
#define HOLD_SCAN 32

static struct sworker *decide(struct sched *s, struct sjob *j, int64_t now,
                              struct sched_explain *why)
{
    const struct scap *cap = &s->caps[j->cap];
    memset(why, 0, sizeof(*why));
    why->job_id = j->spec.id;
    why->filtered_capability = s->nworkers - cap->members;
    why->filtered_unhealthy = cap->members - cap->usable;
    why->filtered_busy = cap->usable - cap->nopen;
    uint64_t kept_seq[SCHED_EXPLAIN_MAX];
    struct sworker *kept_w[SCHED_EXPLAIN_MAX];
    struct sched_candidate c;
    s->headroom_why[0] = '\0';
    s->speed_ref = 0;
    for (int i = 0; i < cap->nopen; i++) {
        double sp = worker_speed(cap->open[i]);
        if (sp > s->speed_ref)
            s->speed_ref = sp;
    }
    for (int i = 0; i < cap->nopen; i++) {
        struct sworker *w = cap->open[i];
        int rc = sched_score_one(s, w, j, now, &c);
        if (rc == SCORE_F_VRAM) {
            why->filtered_vram++;
            continue;
        } else if (rc == SCORE_F_BUSY) {
            why->filtered_busy++;
            continue;
        } else if (rc != SCORE_OK) {
            why->filtered_unhealthy++;
            continue;
        }
        why->ncandidates++;
        /* Insert into the kept list, best first. */
        int pos = why->nkept;
        while (pos > 0 && sched_cand_better(&c, w->seq, &why->cand[pos - 1], kept_seq[pos - 1]))
            pos--;
        if (pos >= SCHED_EXPLAIN_MAX)
            continue;
        int last = why->nkept < SCHED_EXPLAIN_MAX ? why->nkept : SCHED_EXPLAIN_MAX - 1;
        for (int k = last; k > pos; k--) {
            why->cand[k] = why->cand[k - 1];
            kept_seq[k] = kept_seq[k - 1];
            kept_w[k] = kept_w[k - 1];
        }
        why->cand[pos] = c;
        kept_seq[pos] = w->seq;
        kept_w[pos] = w;
        if (why->nkept < SCHED_EXPLAIN_MAX)
            why->nkept++;
    }
    if (why->nkept == 0 && j->spec.lane == SCHED_LANE_BATCH && s->headroom_why[0]) {
        reason_printf(why->reason, sizeof(why->reason), "%s", s->headroom_why);
        return NULL;
    }
    if (why->nkept == 0) {
        reason_printf(why->reason, sizeof(why->reason),
                 "no GPU can take it now (capability %d, vram %d, busy %d, unhealthy %d)",
                 why->filtered_capability, why->filtered_vram, why->filtered_busy,
                 why->filtered_unhealthy);
        return NULL;
    }
    /* Late binding the other way: when a GPU whose queue is full would still
     * finish the job clearly sooner than any open one, keep the job queued
     * for it rather than commit it to a worse GPU (a cold load, an eviction).
     * The jobs queued behind this one will want the same full GPUs, so their
     * share of that backlog counts against holding (else a growing queue
     * would wait for warm GPUs forever instead of loading a cold one). */
    double slack = slo_finish_s(s, j, now);
    bool hold = false, slo_hold = false, scored = false;
    int nhomes = 0;
    struct sched_candidate fc;
    struct sworker *fw = sched_full_top(s, j->cap);
    if (fw && !why->cand[0].warm && j->spec.model[0]) {
        /* The best open GPU must load the model: the full GPU to wait for
         * is the one that would finish it soonest among those that hold it
         * (the one that frees first may hold another model). Looked for
         * among the first HOLD_SCAN current entries of the capability's heap
         * of full GPUs (near its top: those that free soonest, roughly) —
         * bounded, so that a decision that would load stays cheap on a large
         * fleet (every full GPU: decision p99 234 us at 1,000 GPUs). */
        struct sched_candidate tc;
        struct sworker *best = NULL;
        const struct heap *h = &cap->full;
        int valid = 0;
        for (size_t i = 0; i < h->len && i < 8 * HOLD_SCAN && valid < HOLD_SCAN; i++) {
            const struct full_entry *e =
                (const struct full_entry *)(const void *)(h->data + i * h->elem_size);
            struct sworker *w = e->w;
            if (e->ver != w->ver) /* stale: w changed since */
                continue;
            valid++;
            int k = sched_worker_cap_slot(w, j->cap);
            if (!w->alive || k < 0 || w->open_pos[k] >= 0 || !w->info.healthy ||
                w->info.draining)
                continue;
            sched_project_now(s, w, now);
            if (proj_find(w, j->model) < 0)
                continue;
            if (sched_score_one(s, w, j, now, &tc) != SCORE_OK || !tc.warm)
                continue;
            nhomes++;
            if (!best || tc.score_s < fc.score_s) {
                best = w;
                fc = tc;
            }
        }
        fw = best;
        scored = best != NULL;
    }
    if (fw && (scored || sched_score_one(s, fw, j, now, &fc) == SCORE_OK)) {
        /* Rule 14: a scarce model's second home. Its queue waits for the
         * GPUs that hold it, not for every full GPU of the capability: on
         * zoo-nofit llm-70b fits only the four L40S and one of them often
         * holds it, so the backlog shared over all 16 looked small, and
         * chat.large jobs queued 5-8 deep behind that one GPU (p99 62 s,
         * oracle 50 s) while the other L40S took image and video jobs.
         * Shared over its homes, a backlog that one GPU cannot serve makes
         * the next job load the model on a second GPU once the wait it
         * saves pays for the load; as the backlog drains, the hold returns
         * (and rule 2's demand weight keeps the new home from being pushed
         * out at once). Only for a scarce model (rule 11's): for the others
         * any full GPU may soon take the model, and sharing over homes made
         * image.sdxl's p99 21.4 -> 27.9 s. nhomes counts the homes among
         * the HOLD_SCAN full GPUs looked at, so it stays bounded. */
        bool scarce = scored && model_scarcity(s, j->model) >= SCARCE_HOMES;
        int nfull = scarce ? nhomes : cap->usable - cap->nopen;
        int behind = j->state == SJOB_QUEUED ? s->queues[j->qix].q.count - 1 : 0;
        double backlog = behind > 0 ? behind * fc.run_s / (nfull > 0 ? nfull : 1) : 0;
        hold = fc.score_s + backlog + s->cfg.move_margin_s < why->cand[0].score_s;
        /* Rule 14 too: rule 9 holds a scarce model's job for its home only
         * while the queue behind it also finishes in time there. */
        if (!hold && scored && why->cand[0].evict_penalty_s > 0 &&
            fc.score_s + (scarce ? backlog : 0) <= slack)
            slo_hold = true;
    }
    if (slo_hold) {
        s->holds++;
        reason_printf(why->reason, sizeof(why->reason),
                      "held for %s (holds its model): finishes at %.2fs, within %.0f%% of its"
                      " %.0fs objective; %s would push out a model in demand",
                      fw->info.id, fc.score_s, SLO_SHARE * 100, cap->slo_s,
                      why->cand[0].worker_id);
        return NULL;
    }
    if (hold) {
        s->holds++;
        reason_printf(why->reason, sizeof(why->reason),
                      "held in queue: %s (queue full) finishes at %.2fs, best open %s at %.2fs",
                      fw->info.id, fc.score_s, why->cand[0].worker_id, why->cand[0].score_s);
        return NULL;
    }
    /* Start now: a job that would wait for the best GPU takes a GPU where it
     * starts at once when that finishes it within that wait of the best. The
     * wait counts twice: this job's, and the next job's — the one the busy
     * GPU's slot would have served, which now waits or goes elsewhere —
     * while the idle GPU's time is lost if no one takes it. A cold GPU too,
     * even where the load pushes out a model in demand: its score already
     * carries that eviction's cost (rule 2) and, for a long job, the time it
     * keeps that model's jobs off the GPU (rule 6). Left out before rule 6
     * (zoo's cache hit fell 0.94 -> 0.86), that kept image jobs queued on
     * seed7 while the slow GPUs sat idle holding video; with it, seed7 SLO
     * 0.925 -> 0.941, best on all three in 5 -> 10 of 10 seeds, zoo hit
     * 0.945 -> 0.936 (docs/scheduler.md, rule 8). */
    const struct sched_candidate *b = &why->cand[0];
    for (int i = 1; b->wait_s > 0 && i < why->nkept; i++) {
        const struct sched_candidate *o = &why->cand[i];
        if (o->wait_s > 0 || o->score_s > b->score_s + b->wait_s)
            continue;
        if (!o->warm && o->evict_penalty_s > 0 && b->score_s <= slack)
            continue; /* rule 9: waiting keeps it within its objective */
        struct sched_candidate oc = *o, bc = *b;
        struct sworker *ow = kept_w[i];
        uint64_t os = kept_seq[i];
        for (int k = i; k > 0; k--) {
            why->cand[k] = why->cand[k - 1];
            kept_w[k] = kept_w[k - 1];
            kept_seq[k] = kept_seq[k - 1];
        }
        why->cand[0] = oc;
        kept_w[0] = ow;
        kept_seq[0] = os;
        copy_id(why->winner, oc.worker_id);
        reason_printf(why->reason, sizeof(why->reason),
                      "starts now%s: finishes at %.2fs, within the %.2fs wait for %s (%.2fs)",
                      oc.warm ? "" : " (cold load)", oc.score_s, bc.wait_s, bc.worker_id,
                      bc.score_s);
        return ow;
    }
    copy_id(why->winner, why->cand[0].worker_id);
    explain_reason(why);
    if (batch_starving(s, j, now)) {
        char r[sizeof(why->reason)];
        snprintf(r, sizeof(r), "%s", why->reason);
        reason_printf(why->reason, sizeof(why->reason),
                      "starving: waited %.1fs, over %.0fx its %.1fs run (headroom and scarce"
                      " models waived): %s",
                      ns_to_s(now - j->spec.submit_ns), STARVE_AFTER_RUNS, j->cost_s, r);
    }
    return kept_w[0];
}

/* Rule 7's reference speed holds for one decision only: moves and front
 * binding score one GPU against a placed job's own estimate, so none there. */
struct sworker *sched_decide(struct sched *s, struct sjob *j, int64_t now,
                             struct sched_explain *why)
{
    if (s->caprunmemo < s->nclasses) {
        int n = s->nclasses + 8;
        s->run_memo = xrealloc(s->run_memo, (size_t)n * sizeof(*s->run_memo));
        s->run_memo_gen = xrealloc(s->run_memo_gen, (size_t)n * sizeof(*s->run_memo_gen));
        memset(s->run_memo_gen + s->caprunmemo, 0,
               (size_t)(n - s->caprunmemo) * sizeof(*s->run_memo_gen));
        s->caprunmemo = n;
    }
    s->run_memo_cur++;
    s->run_memo_job = j;
    struct sworker *w = decide(s, j, now, why);
    s->run_memo_job = NULL;
    s->speed_ref = 0;
    return w;
}

bool sched_rebalance_one(struct sched *s, struct sworker *f, int64_t now,
                         void (*placed)(uint64_t, const char *, const struct sched_explain *,
                                        void *),
                         void *arg)
{
    if (s->nplaced == 0 || !f->info.healthy || f->info.draining)
        return false;
    struct sjob *best = NULL;
    struct sched_candidate best_new, best_old, c;
    double best_gain = s->cfg.move_margin_s;
    for (int i = 0; i < s->nworkers; i++) {
        struct sworker *v = s->workers[i];
        if (v == f || v->nplaced == 0)
            continue;
        sched_project_now(s, v, now);
        double tf = thermal_factor(s, v);
        for (struct sjob *j = v->placed_head; j; j = j->next) {
            if (j->ahead || sched_worker_cap_slot(f, j->cap) < 0)
                continue; /* one held ahead is its worker's */
            double wait = j->est_start_ns > now ? ns_to_s(j->est_start_ns - now) : 0;
            double cur = wait * tf + j->est_load_s + j->est_run_s;
            if (cur <= best_gain)
                continue;
            if (sched_score_one(s, f, j, now, &c) != SCORE_OK)
                continue;
            double gain = cur - c.score_s;
            if (gain > best_gain) {
                best_gain = gain;
                best = j;
                best_new = c;
                memset(&best_old, 0, sizeof(best_old));
                snprintf(best_old.worker_id, sizeof(best_old.worker_id), "%s", v->info.id);
                best_old.score_s = cur;
                best_old.wait_s = wait;
                best_old.load_s = j->est_load_s;
                best_old.run_s = j->est_run_s;
                best_old.thermal_factor = tf;
                best_old.warm = j->est_load_s == 0;
                best_old.speed = j->est_speed;
                best_old.load_ratio =
                    (double)(v->nrunning + v->nplaced) / (double)v->info.concurrency;
            }
        }
    }
    if (!best)
        return false;
    struct sched_explain *why = &s->why;
    memset(why, 0, sizeof(*why));
    why->job_id = best->spec.id;
    why->ncandidates = 2;
    why->nkept = 2;
    why->cand[0] = best_new;
    why->cand[1] = best_old;
    copy_id(why->winner, f->info.id);
    reason_printf(why->reason, sizeof(why->reason),
             "late binding: moved from %s, est. finish %.2fs instead of %.2fs", best_old.worker_id,
             best_new.score_s, best_old.score_s);
    sched_unplace(s, best);
    sched_commit(s, best, f, &best_new);
    s->moves++;
    if (placed)
        placed(best->spec.id, f->info.id, why, arg);
    return true;
}
