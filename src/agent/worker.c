/* worker.c: one GPU's controller — supervises its runtime process (spawn,
 * hello, ping, restart with backoff, kill when hung), warms up pinned models
 * before the worker is ready (R25), makes each job's model resident through
 * the VRAM manager (R24), runs jobs on the runtime and reports their outcome
 * to the head, and drains (R26). See agent.h for threads and locking. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/inputs.h"
#include "agent/qc.h"
#include "agent/outbox.h"
#include "agent/report.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "core/breaker.h"

#define MOD "agent"

static const struct agent_config *cfg_of(const struct worker *w)
{
    return &w->agent->cfg;
}

void worker_wake(struct worker *w)
{
    char c = 1;
    ssize_t n = write(w->wake[1], &c, 1);
    (void)n; /* a full pipe already wakes it */
}

double worker_busy_locked(const struct worker *w)
{
    int running = 0;
    for (int i = 0; i < WORKER_MAX_JOBS; i++)
        if (w->jobs[i].used && w->jobs[i].phase == JOB_RUNNING)
            running++;
    int conc = w->view.concurrency > 0 ? w->view.concurrency : 1;
    return running >= conc ? 1.0 : (double)running / conc;
}

static void set_state(struct worker *w, enum worker_state s)
{
    pthread_mutex_lock(&w->mu);
    bool changed = w->state != s;
    w->state = s;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (changed)
        monitor_kick(w->agent);
}

static void runtime_lost_as(struct worker *w, const char *cls, const char *what, const char *why);

/* Bad runtime lines are logged at most BAD_LOG_BURST at once and
 * BAD_LOG_PER_S a second after that (a token bucket); the others are counted
 * and the count shown with the next line logged. */
#define BAD_LOG_BURST 10.0
#define BAD_LOG_PER_S 2.0

/* A line the runtime should not have written. More than flood_bad_lines of
 * them within flood_window_ms is a flood: the runtime is killed (its running
 * jobs fail "crash"), restarted with backoff, and the worker reported
 * degraded for FLOOD_DEGRADED_MS. */
static void note_bad_line(struct worker *w, const char *why, const char *line, size_t len)
{
    const struct agent_config *c = cfg_of(w);
    int64_t now = clock_mono_ns();
    pthread_mutex_lock(&w->mu);
    uint64_t n = ++w->bad_lines;
    pthread_mutex_unlock(&w->mu);

    if (now - w->bad_window_ns >= (int64_t)c->flood_window_ms * NS_PER_MS) {
        w->bad_window_ns = now;
        w->bad_window_lines = 0;
    }
    w->bad_window_lines++;

    w->log_tokens += (double)(now - w->log_tokens_ns) / (double)NS_PER_S * BAD_LOG_PER_S;
    if (w->log_tokens > BAD_LOG_BURST)
        w->log_tokens = BAD_LOG_BURST;
    w->log_tokens_ns = now;
    if (w->log_tokens >= 1.0) {
        w->log_tokens -= 1.0;
        /* Show a bounded, printable prefix of the offending line. */
        char shown[81];
        size_t k = 0;
        for (size_t i = 0; line && i < len && k < sizeof shown - 1; i++) {
            unsigned char ch = (unsigned char)line[i];
            shown[k++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
        }
        shown[k] = '\0';
        char more[64] = "";
        if (w->log_suppressed)
            snprintf(more, sizeof more, "; %llu more not logged",
                     (unsigned long long)w->log_suppressed);
        log_warn(MOD, "worker %s: bad runtime line (%s; %llu so far%s): %s", w->id, why,
                 (unsigned long long)n, more, shown);
        w->log_suppressed = 0;
    } else {
        w->log_suppressed++;
    }

    if (w->bad_window_lines > c->flood_bad_lines && w->rt.pid > 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "it flooded its output with over %d bad lines within %d ms",
                 c->flood_bad_lines, c->flood_window_ms);
        pthread_mutex_lock(&w->mu);
        w->degraded_until_ns = now + (int64_t)FLOOD_DEGRADED_MS * NS_PER_MS;
        pthread_mutex_unlock(&w->mu);
        log_warn(MOD, "worker %s: runtime flood: %d bad lines within %d ms (%llu not logged); "
                      "killing it",
                 w->id, w->bad_window_lines, c->flood_window_ms,
                 (unsigned long long)w->log_suppressed);
        w->bad_window_lines = 0;
        w->log_suppressed = 0;
        runtime_lost_as(w, "crash", "was killed", msg);
        monitor_kick(w->agent);
    }
}

/* --- jobs ------------------------------------------------------------------ */

static struct job *job_find_rid(struct worker *w, const char *rid)
{
    for (int i = 0; i < WORKER_MAX_JOBS; i++)
        if (w->jobs[i].used && strcmp(w->jobs[i].rid, rid) == 0)
            return &w->jobs[i];
    return NULL;
}

static int count_jobs(const struct worker *w, bool warmup)
{
    int n = 0;
    for (int i = 0; i < WORKER_MAX_JOBS; i++)
        if (w->jobs[i].used && w->jobs[i].warmup == warmup)
            n++;
    return n;
}

static void take_assignment_at(struct worker *w, json_t *a, int64_t adopted_ns);

/* Takes a job out (under mu), releasing its model; then takes its successor,
 * if it has one, into the slot. */
static void job_remove(struct worker *w, struct job *j)
{
    json_t *succ = j->successor;
    j->successor = NULL;
    /* Its input files, if any (the poller wrote them before the job came, and
     * only for a job whose params name inputs: the others have no directory
     * to look for, which was one failed opendir per job). A successor runs
     * under the same runtime id, from the same files: they stay for it. */
    if (!j->warmup && !succ && json_object_get(j->params, "inputs"))
        agent_inputs_cleanup(cfg_of(w)->work_dir, w->id, j->rid);
    pthread_mutex_lock(&w->mu);
    if (j->phase == JOB_RUNNING) {
        int vi = vram_mgr_find(&w->vram, j->model);
        if (vi >= 0) {
            if (w->vram.e[vi].in_use > 0)
                w->vram.e[vi].in_use--;
            w->vram.e[vi].last_used_ns = clock_mono_ns();
        }
    }
    if (!j->warmup && w->held > 0)
        w->held--;
    json_decref(j->params);
    memset(j, 0, sizeof *j);
    poller_slot_freed_locked(w);
    pthread_mutex_unlock(&w->mu);
    if (succ) {
        const char *e = json_string_value(json_object_get(succ, "epoch"));
        log_info(MOD, "worker %s: the cancelled copy has left; running the assignment of "
                      "epoch %s",
                 w->id, e ? e : "(none)");
        take_assignment_at(w, succ, clock_mono_ns());
        json_decref(succ);
    }
}

static void job_fail(struct worker *w, struct job *j, const char *cls, const char *message)
{
    if (j->warmup) {
        log_warn(MOD, "worker %s: warm-up of %s failed: %s: %s", w->id, j->model, cls, message);
        w->warm_failed = true;
    } else {
        log_warn(MOD, "worker %s: job %s attempt %lld failed: %s: %s", w->id, j->job_id,
                 (long long)j->attempt, cls, message);
        /* Queued before the job leaves, so a heartbeat always lists the attempt. */
        outbox_put_fail(&w->agent->outbox, w->id, j->job_id, j->attempt, j->epoch, cls, message,
                        clock_mono_ns());
    }
    job_remove(w, j);
}

static bool valid_id(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n >= max)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

/* The model a capability runs on this worker when the head names none. */
static const char *default_model(const struct worker *w, const char *cap)
{
    const struct agent_config *c = cfg_of(w);
    for (int i = 0; i < w->view.nmodels; i++) {
        const struct agent_model *m = &c->models[w->view.model_idx[i]];
        for (int k = 0; k < m->ncaps; k++)
            if (strcmp(m->caps[k], cap) == 0)
                return m->name;
    }
    return NULL;
}

static bool offers_model(const struct worker *w, const char *name)
{
    for (int i = 0; i < w->view.nmodels; i++)
        if (strcmp(cfg_of(w)->models[w->view.model_idx[i]].name, name) == 0)
            return true;
    return false;
}

/* An assignment for an attempt this worker already holds (same job, same
 * attempt number). With the same epoch it is the same assignment sent twice:
 * keep the first. With another epoch it comes from a head that restarted
 * (kill -9) before it stored the first assignment: the new head re-queued the
 * job and handed out the same attempt number again, here. The copy already
 * running is adopted: it takes the new epoch, so its progress and outcome are
 * reported (and fenced) as the new head's attempt.
 *
 * Why adopting is right rather than stopping the old copy and starting
 * again: the epoch fence is there so that a report of the dead head's
 * attempt cannot pass for the new head's one when the two are different runs
 * (another worker, or a copy the agent let go). Here both are the same job
 * with the same params, on the same worker, under the same runtime id
 * (<job_id>.<attempt>), and the agent never runs two copies of one runtime
 * id, so the running copy is exactly the run the new head asked for, only
 * started earlier; its result is as good as a fresh run's, and keeping it
 * saves the work done (and a cancel the runtime may be slow to honour).
 * Reporting under the old epoch instead is refused 409 stale_attempt, so the
 * head would notice only when the attempt went missing from the heartbeats
 * (orphan grace) or its lease ran out. An outcome of the old copy already in
 * the outbox is not touched: it keeps the old epoch and is refused; that copy
 * had left the worker, so the new assignment runs as a fresh job.
 *
 * A copy the head already asked to abort (its heartbeat listed the attempt
 * before the new head handed it out, so it was stale then) cannot be
 * adopted: the runtime is ending it. The new assignment waits as its
 * successor and runs, in the same slot and under the same runtime id, once
 * the old copy has left (job_remove) — from the old copy's input files,
 * which are the same uploads (the poller could not fetch them again over the
 * files of the same runtime id). Called on the controller thread. */
static void adopt_or_drop(struct worker *w, struct job *old, json_t *a, const char *epoch)
{
    const char *was = old->epoch[0] ? old->epoch : "(none)";
    const char *now = epoch[0] ? epoch : "(none)";
    if (strcmp(old->epoch, epoch) == 0 || old->warmup) {
        log_warn(MOD, "worker %s: duplicate assignment %s", w->id, old->rid);
        return;
    }
    if (old->cancel) {
        log_info(MOD, "worker %s: assignment %s under epoch %s: the head restarted; the copy of "
                      "epoch %s is being cancelled, the new one runs when it has left",
                 w->id, old->rid, now, was);
        if (json_object_get(old->params, "inputs"))
            json_object_del(a, "input_error");
        json_decref(old->successor);
        old->successor = json_incref(a);
        return;
    }
    log_info(MOD, "worker %s: assignment %s under epoch %s: the head restarted; adopting the "
                  "copy started under epoch %s",
             w->id, old->rid, now, was);
    pthread_mutex_lock(&w->mu);
    snprintf(old->epoch, sizeof old->epoch, "%s", epoch);
    old->adopted_ns = clock_mono_ns();
    pthread_mutex_unlock(&w->mu);
}

/* Turns one assignment object from the head into a held job; refuses (and
 * logs) malformed ones. adopted_ns: nonzero for a successor (see
 * adopt_or_drop), which a cancel drawn before then must not touch either. */
static void take_assignment_at(struct worker *w, json_t *a, int64_t adopted_ns)
{
    json_t *jid = json_object_get(a, "job_id");
    char job_id[64] = "";
    if (json_is_string(jid) && json_string_length(jid) < sizeof job_id)
        snprintf(job_id, sizeof job_id, "%s", json_string_value(jid));
    else if (json_is_integer(jid))
        snprintf(job_id, sizeof job_id, "%lld", (long long)json_integer_value(jid));
    json_t *att = json_object_get(a, "attempt");
    const char *cap = json_string_value(json_object_get(a, "capability"));
    const char *model = json_string_value(json_object_get(a, "model"));
    json_t *params = json_object_get(a, "params");
    if (!valid_id(job_id, sizeof job_id) || !json_is_integer(att) || json_integer_value(att) < 0) {
        log_error(MOD, "worker %s: refused an assignment without a valid job_id/attempt", w->id);
        return;
    }
    struct job *j = NULL;
    for (int i = 0; i < WORKER_MAX_JOBS && !j; i++)
        if (!w->jobs[i].used)
            j = &w->jobs[i];
    if (!j) {
        log_error(MOD, "worker %s: no room for job %s", w->id, job_id);
        return;
    }
    char rid[RT_ID_MAX];
    snprintf(rid, sizeof rid, "%s.%lld", job_id, (long long)json_integer_value(att));
    const char *epoch = json_string_value(json_object_get(a, "epoch"));
    if (epoch && strlen(epoch) >= sizeof j->epoch)
        epoch = NULL;
    struct job *old = job_find_rid(w, rid);
    if (old) {
        adopt_or_drop(w, old, a, epoch ? epoch : "");
        return;
    }
    struct job nj;
    memset(&nj, 0, sizeof nj);
    nj.used = true;
    snprintf(nj.job_id, sizeof nj.job_id, "%s", job_id);
    nj.attempt = json_integer_value(att);
    if (epoch)
        snprintf(nj.epoch, sizeof nj.epoch, "%s", epoch);
    snprintf(nj.rid, sizeof nj.rid, "%s", rid);
    snprintf(nj.capability, sizeof nj.capability, "%s", cap ? cap : "");
    if ((!model || !model[0]) && cap)
        model = default_model(w, cap);
    snprintf(nj.model, sizeof nj.model, "%s", model ? model : "");
    nj.params = json_is_object(params) ? json_incref(params) : json_object();
    nj.phase = JOB_NEW;
    nj.assigned_ns = clock_mono_ns();
    nj.adopted_ns = adopted_ns;
    pthread_mutex_lock(&w->mu);
    *j = nj;
    w->held++;
    pthread_mutex_unlock(&w->mu);
    const char *in_cls, *in_msg;
    agent_inputs_error(a, &in_cls, &in_msg);
    if (in_cls) {
        job_fail(w, j, in_cls, in_msg ? in_msg : "its inputs could not be fetched");
        return;
    }
    if (!model || !model[0] || strlen(model) >= AGENT_NAME_MAX || !offers_model(w, model)) {
        char msg[256];
        snprintf(msg, sizeof msg, "model %.64s is not configured on worker %s",
                 model ? model : "(none)", w->id);
        job_fail(w, j, "bad_input", msg);
    }
}

/* --- the runtime ----------------------------------------------------------- */

static int send_line(struct worker *w, struct buf *b)
{
    int rc = runtime_write(&w->rt, b->data, b->len, cfg_of(w)->ping_timeout_ms);
    buf_reset(b);
    return rc;
}

static void runtime_lost(struct worker *w, const char *cls, const char *why);

/* A write to the runtime failed: it is not reading (hang) or it is gone (crash). */
static void write_failed(struct worker *w, int rc)
{
    if (rc == GPUQ_EAGAIN)
        runtime_lost(w, "hang", "not reading its input");
    else
        runtime_lost(w, "crash", "the runtime exited (its input is closed)");
}

/* The largest result a runtime may send inline: never more than a small
 * result the outbox keeps in memory, nor than an output may be at all. */
static int64_t inline_max(const struct agent_config *c)
{
    int64_t n = RT_INLINE_MAX;
    if (c->max_output_bytes < n)
        n = c->max_output_bytes;
    if (c->outbox_memory_bytes < n)
        n = c->outbox_memory_bytes;
    return n;
}

static void spawn_runtime(struct worker *w)
{
    const struct agent_config *c = cfg_of(w);
    char e_cuda[64], e_idx[64], e_wid[128], e_vram[64], e_uuid[160], e_out[PATH_MAX + 32];
    snprintf(e_cuda, sizeof e_cuda, "CUDA_VISIBLE_DEVICES=%d", w->index);
    snprintf(e_idx, sizeof e_idx, "GPUQ_GPU_INDEX=%d", w->index);
    snprintf(e_wid, sizeof e_wid, "GPUQ_WORKER_ID=%s", w->id);
    snprintf(e_vram, sizeof e_vram, "GPUQ_VRAM_TOTAL_MB=%lld", (long long)w->gpu.vram_total_mb);
    snprintf(e_uuid, sizeof e_uuid, "GPUQ_GPU_UUID=%s", w->gpu.uuid);
    snprintf(e_out, sizeof e_out, "GPUQ_OUTPUT_DIR=%s", w->out_dir);
    char e_inl[64];
    snprintf(e_inl, sizeof e_inl, "GPUQ_RESULT_INLINE_MAX=%lld", (long long)inline_max(c));
    char *env[] = {e_cuda, e_idx, e_wid, e_vram, e_uuid, e_out, e_inl, NULL};
    int64_t now = clock_mono_ns();
    if (runtime_spawn(c->runtime, env, &w->rt) != 0) {
        w->failures++;
        int64_t d = runtime_backoff_ms(w->failures, c->restart_min_ms, c->restart_max_ms);
        log_error(MOD, "worker %s: cannot start runtime: %s; retry in %lld ms", w->id,
                  strerror(errno), (long long)d);
        w->restart_at_ns = now + d * NS_PER_MS;
        return;
    }
    log_info(MOD, "worker %s: runtime started (pid %d, CUDA_VISIBLE_DEVICES=%d)", w->id,
             (int)w->rt.pid, w->index);
    w->rts = RTS_STARTING;
    w->hello_deadline_ns = now + (int64_t)c->hello_timeout_ms * NS_PER_MS;
    line_reader_reset(&w->lr);
    rt_frame_reset(&w->frame);
    w->ping_sent_ns = 0;
    w->next_ping_ns = now + (int64_t)c->ping_interval_ms * NS_PER_MS;
    w->load_rid[0] = '\0';
    w->warm_started = false;
    w->warm_failed = false;
    w->bad_window_ns = now;
    w->bad_window_lines = 0;
}

/* The runtime is gone or must go: kill it, fail what it was doing with cls,
 * forget its VRAM, and schedule a restart with backoff. Jobs it had not been
 * given stay held and run on the restarted runtime, unless it was lost twice
 * in a row (then they go back to the head too). what: "died", "hung and
 * was killed" … for the jobs' error message. */
static void runtime_lost(struct worker *w, const char *cls, const char *why)
{
    runtime_lost_as(w, cls, strcmp(cls, "hang") == 0 ? "hung and was killed" : "died", why);
}

static void runtime_lost_as(struct worker *w, const char *cls, const char *what, const char *why)
{
    const struct agent_config *c = cfg_of(w);
    int status = 0;
    pid_t pid = w->rt.pid;
    runtime_wait(&w->rt, 1000, 1, &status);
    char st[64];
    runtime_describe_status(status, st, sizeof st);
    w->failures++;
    int64_t delay = runtime_backoff_ms(w->failures, c->restart_min_ms, c->restart_max_ms);
    log_error(MOD, "worker %s: runtime pid %d lost (%s: %s; %s); restart %d in %lld ms", w->id,
              (int)pid, cls, why, st, w->failures, (long long)delay);
    w->rts = RTS_DOWN;
    w->restart_at_ns = clock_mono_ns() + delay * NS_PER_MS;
    w->load_rid[0] = '\0';
    w->ping_sent_ns = 0;
    /* Out of the ready state first: the slots freed below must not let the
     * poller ask for work while the runtime is down. */
    if (w->state == WS_READY)
        set_state(w, WS_WARMING);
    /* Lost again with no job done since the last loss, the runtime may not
     * come back: the jobs it was never given go back to the head as well, to
     * run elsewhere, instead of waiting on its restarts (a poll answered just
     * as it died can still hand it one). */
    bool hand_back = w->failures >= 2;
    char msg[300], never[340];
    snprintf(msg, sizeof msg, "runtime on %s %s: %s", w->id, what, why);
    if (hand_back)
        snprintf(never, sizeof never, "%s (again; the job had not started)", msg);
    for (int i = 0; i < WORKER_MAX_JOBS; i++) {
        struct job *j = &w->jobs[i];
        if (!j->used)
            continue;
        if (j->warmup) {
            job_remove(w, j);
        } else if (j->phase != JOB_NEW) {
            j->phase = JOB_NEW; /* it no longer holds a model */
            job_fail(w, j, cls, msg);
        } else if (hand_back) {
            job_fail(w, j, cls, never);
        }
    }
    pthread_mutex_lock(&w->mu);
    vram_mgr_clear(&w->vram);
    w->runtime_restarts++;
    w->failures_seen = w->failures;
    pthread_mutex_unlock(&w->mu);
}

/* --- VRAM and running ------------------------------------------------------ */

static void start_run(struct worker *w, struct job *j, bool hit)
{
    struct buf b;
    buf_init(&b);
    rt_fmt_run(&b, j->rid, j->model, j->capability, j->params, w->out_dir, j->warmup);
    pthread_mutex_lock(&w->mu);
    int vi = vram_mgr_find(&w->vram, j->model);
    if (vi >= 0) {
        w->vram.e[vi].in_use++;
        w->vram.e[vi].last_used_ns = clock_mono_ns();
    }
    if (!j->warmup) {
        if (hit)
            w->vram.hits++;
        else
            w->vram.misses++;
    }
    j->phase = JOB_RUNNING;
    j->run_start_ns = clock_mono_ns();
    pthread_mutex_unlock(&w->mu);
    int rc = send_line(w, &b);
    buf_fini(&b);
    if (rc != 0)
        write_failed(w, rc);
}

static void start_load(struct worker *w, struct job *j, const struct agent_model *m)
{
    int victims[AGENT_MAX_MODELS], nv = 0;
    int rc = vram_mgr_plan(&w->vram, m->vram_mb, victims, &nv);
    if (rc == GPUQ_EAGAIN)
        return; /* wait for running jobs to release their models */
    if (rc != 0) {
        char msg[200];
        snprintf(msg, sizeof msg, "model %s (%lld MB) does not fit beside the pinned models on %s",
                 m->name, (long long)m->vram_mb, w->id);
        job_fail(w, j, "oom", msg);
        return;
    }
    struct buf b;
    buf_init(&b);
    /* Unload victims in policy order; indexes shift as we remove, so collect names. */
    char names[AGENT_MAX_MODELS][AGENT_NAME_MAX];
    for (int i = 0; i < nv; i++)
        snprintf(names[i], AGENT_NAME_MAX, "%s", w->vram.e[victims[i]].name);
    for (int i = 0; i < nv; i++) {
        char id[32];
        snprintf(id, sizeof id, "u%llu", (unsigned long long)++w->seq);
        rt_fmt_unload(&b, id, names[i]);
        pthread_mutex_lock(&w->mu);
        vram_mgr_remove(&w->vram, vram_mgr_find(&w->vram, names[i]));
        pthread_mutex_unlock(&w->mu);
        log_info(MOD, "worker %s: evicting %s to load %s", w->id, names[i], m->name);
    }
    snprintf(w->load_rid, sizeof w->load_rid, "l%llu", (unsigned long long)++w->seq);
    snprintf(w->load_model, sizeof w->load_model, "%s", m->name);
    w->load_started_ns = clock_mono_ns();
    rt_fmt_load(&b, w->load_rid, m->name, m->vram_mb, m->load_ms);
    j->phase = JOB_LOADING;
    j->cold = true;
    rc = send_line(w, &b);
    buf_fini(&b);
    if (rc != 0) {
        write_failed(w, rc);
        return;
    }
    if (!j->warmup) {
        char msg[120];
        snprintf(msg, sizeof msg, "loading %s", m->name);
        outbox_put_progress(&w->agent->outbox, w->id, j->job_id, j->attempt, j->epoch, "loading",
                            0.0, msg, clock_mono_ns());
    }
}

/* Starts job j (phase JOB_NEW): runs it when its model is resident, joins
 * the load of its model in progress, or starts that load; it stays JOB_NEW
 * while another model loads. */
static void start_new(struct worker *w, struct job *j)
{
    if (vram_mgr_find(&w->vram, j->model) >= 0) {
        start_run(w, j, !j->cold);
        return;
    }
    if (w->load_rid[0]) {
        if (strcmp(w->load_model, j->model) == 0) {
            j->phase = JOB_LOADING;
            j->cold = true;
        }
        return;
    }
    const struct agent_model *m = agent_config_model(cfg_of(w), j->model);
    if (!m) {
        job_fail(w, j, "bad_input", "model is not configured");
        return;
    }
    start_load(w, j, m);
}

/* Moves held jobs forward: run what has its model resident; start at most one
 * load at a time for the first job that needs one. The head's jobs start in
 * the order they came, at most one per slot: a job held ahead (the head's
 * `ahead`, docs/protocol-worker.md) waits for a slot to free. Warm-up jobs
 * start at once. */
static void advance(struct worker *w)
{
    if (w->rts != RTS_UP)
        return;
    struct job *fresh[WORKER_MAX_JOBS];
    int nfresh = 0, active = 0;
    for (int i = 0; i < WORKER_MAX_JOBS && w->rts == RTS_UP; i++) {
        struct job *j = &w->jobs[i];
        if (!j->used)
            continue;
        if (j->cancel && j->phase != JOB_RUNNING) {
            job_remove(w, j);
            continue;
        }
        if (j->phase == JOB_LOADING && vram_mgr_find(&w->vram, j->model) >= 0)
            start_run(w, j, false);
        if (j->phase != JOB_NEW) {
            active += !j->warmup;
        } else if (j->warmup) {
            start_new(w, j);
        } else {
            /* In the order they came (by assigned_ns). */
            int k = nfresh++;
            for (; k > 0 && fresh[k - 1]->assigned_ns > j->assigned_ns; k--)
                fresh[k] = fresh[k - 1];
            fresh[k] = j;
        }
    }
    for (int k = 0; k < nfresh && active < w->view.concurrency && w->rts == RTS_UP; k++) {
        struct job *j = fresh[k];
        start_new(w, j);
        active += j->used && j->phase != JOB_NEW;
    }
}

static bool is_pinned_here(const struct worker *w, const char *model)
{
    for (int i = 0; i < w->view.nmodels; i++)
        if (w->view.pinned[i] && strcmp(cfg_of(w)->models[w->view.model_idx[i]].name, model) == 0)
            return true;
    return false;
}

static void on_loaded(struct worker *w, const struct rt_msg *m)
{
    const struct agent_model *am = agent_config_model(cfg_of(w), w->load_model);
    int64_t now = clock_mono_ns();
    int64_t took = now - w->load_started_ns;
    if (am) {
        int64_t mb = m->vram_mb > 0 ? m->vram_mb : am->vram_mb;
        pthread_mutex_lock(&w->mu);
        vram_mgr_add(&w->vram, am->name, mb, am->cls, is_pinned_here(w, am->name), now);
        pthread_mutex_unlock(&w->mu);
    }
    log_info(MOD, "worker %s: loaded %s in %lld ms", w->id, w->load_model,
             (long long)(took / NS_PER_MS));
    for (int i = 0; i < WORKER_MAX_JOBS; i++) {
        struct job *j = &w->jobs[i];
        if (j->used && j->phase == JOB_LOADING && strcmp(j->model, w->load_model) == 0)
            j->load_ns = took;
    }
    w->load_rid[0] = '\0';
}

static void on_load_error(struct worker *w, const struct rt_msg *m)
{
    char msg[700];
    snprintf(msg, sizeof msg, "loading %s: %s", w->load_model, m->message);
    for (int i = 0; i < WORKER_MAX_JOBS; i++) {
        struct job *j = &w->jobs[i];
        if (j->used && j->phase == JOB_LOADING && strcmp(j->model, w->load_model) == 0)
            job_fail(w, j, m->cls, msg);
    }
    w->load_rid[0] = '\0';
}

/* Takes the output file the runtime named: it must be a regular file inside
 * this worker's output directory, at most max_output_bytes. It is read into
 * *data (for the quality check). A small one (outbox_memory_bytes) is then
 * removed: its bytes travel from memory, keep is "". A larger one is first
 * moved into the agent's outbox folder as keep (the outbox sends it from
 * there, so a runtime reusing a file name cannot overwrite a result not yet
 * delivered). On failure the file is removed. */
static int take_output(struct worker *w, const struct job *j, const char *path, char *keep,
                       size_t keeplen, char **data, size_t *len, char *why, size_t whylen)
{
    size_t dl = strlen(w->out_dir);
    if (strncmp(path, w->out_dir, dl) != 0 || path[dl] != '/' || strstr(path, "/../") ||
        strchr(path + dl + 1, '/')) {
        snprintf(why, whylen, "output path outside the output directory");
        return GPUQ_EINVAL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        snprintf(why, whylen, "cannot open output: %s", strerror(errno));
        return GPUQ_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > cfg_of(w)->max_output_bytes) {
        snprintf(why, whylen, "output is not a regular file or larger than max_output_bytes");
        close(fd);
        unlink(path);
        return GPUQ_EINVAL;
    }
    bool small = st.st_size <= cfg_of(w)->outbox_memory_bytes;
    if (small)
        keep[0] = '\0';
    else
        snprintf(keep, keeplen, "%.3000s/outbox/%s-%s", cfg_of(w)->work_dir, w->id, j->rid);
    if (!small && rename(path, keep) != 0) {
        snprintf(why, whylen, "cannot move output to the outbox: %s", strerror(errno));
        close(fd);
        unlink(path);
        return GPUQ_EIO;
    }
    size_t n = (size_t)st.st_size;
    char *p = read_exact(fd, n);
    close(fd);
    if (small) /* it lives on in memory only */
        unlink(path);
    if (!p) {
        if (!small)
            unlink(keep);
        snprintf(why, whylen, "short read of output");
        return GPUQ_EIO;
    }
    *data = p;
    *len = n;
    return 0;
}

/* A result: its bytes in data (inline, owned, at most inline_max so kept in
 * memory), or (data NULL) in the file the message names. */
static void on_result(struct worker *w, struct job *j, const struct rt_msg *m, char *data,
                      size_t len)
{
    int64_t now = clock_mono_ns();
    int64_t run_ms = (now - j->run_start_ns) / NS_PER_MS;
    char why[200];
    char keep[PATH_MAX];
    keep[0] = '\0';
    if (!data &&
        take_output(w, j, m->out_path, keep, sizeof keep, &data, &len, why, sizeof why) != 0) {
        job_fail(w, j, "internal", why);
        return;
    }
    if (j->warmup) {
        log_info(MOD, "worker %s: warm-up of %s done in %lld ms", w->id, j->model,
                 (long long)run_ms);
        free(data);
        if (keep[0])
            unlink(keep);
        job_remove(w, j);
        return;
    }
    const struct agent_config *c = cfg_of(w);
    if (c->qc && strcmp(m->content_type, "image/png") == 0) {
        double var = 0;
        const char *bad = NULL;
        char msg[160];
        if (qc_png_variance(data, len, &var) != 0) {
            bad = "restarting after an undecodable output";
            snprintf(msg, sizeof msg, "output is not a decodable PNG");
        } else if (var < c->qc_min_variance) {
            bad = "restarting after a corrupted output";
            snprintf(msg, sizeof msg, "output pixel variance %.3f below %.3f (solid colour)", var,
                     c->qc_min_variance);
        }
        if (bad) {
            free(data);
            if (keep[0])
                unlink(keep);
            job_fail(w, j, "qc", msg);
            runtime_lost(w, "qc", bad);
            return;
        }
    }
    /* Queued, not sent: the head's answer is the outbox's business, and this
     * worker's slot is free at once. A small result goes from memory. */
    if (keep[0]) {
        free(data);
        outbox_put_complete(&w->agent->outbox, w->id, j->job_id, j->attempt, j->epoch, keep,
                            m->content_type, (int64_t)len, j->load_ns / NS_PER_MS, run_ms, j->cold,
                            now);
    } else {
        outbox_put_complete_data(&w->agent->outbox, w->id, j->job_id, j->attempt, j->epoch, data,
                                 m->content_type, (int64_t)len, j->load_ns / NS_PER_MS, run_ms,
                                 j->cold, now);
    }
    w->failures = 0;
    pthread_mutex_lock(&w->mu);
    w->failures_seen = 0;
    pthread_mutex_unlock(&w->mu);
    job_remove(w, j);
}

static void on_job_error(struct worker *w, struct job *j, const struct rt_msg *m)
{
    /* R27: a CUDA context after OOM or a CUDA error is not trusted. The
     * classes come from the core, whose list the head relies on too (after
     * them it gives the worker nothing new until it reports again). */
    bool restart = breaker_restarts(m->cls);
    char cls[16];
    snprintf(cls, sizeof cls, "%s", m->cls);
    job_fail(w, j, cls, m->message[0] ? m->message : cls);
    if (restart)
        runtime_lost(w, cls, "restarting after a failed job");
}

static void on_line(struct worker *w, const char *line, size_t len)
{
    struct rt_msg m;
    char err[160];
    if (rt_parse(line, len, &m, err, sizeof err) != 0) {
        note_bad_line(w, err, line, len);
        if (m.inline_bytes >= 0) /* refused, but framed: drop its bytes */
            rt_frame_start(&w->frame, &m, 1);
        else if (m.unframed && w->rt.pid > 0) /* what follows cannot be read */
            runtime_lost(w, "internal", err);
        return;
    }
    int64_t now = clock_mono_ns();
    if (w->rts == RTS_STARTING) {
        if (m.type != RT_HELLO) {
            note_bad_line(w, "expected hello first", line, len);
            return;
        }
        if (m.protocol != RT_PROTOCOL) {
            log_error(MOD, "worker %s: runtime speaks protocol %d, we speak %d", w->id,
                      m.protocol, RT_PROTOCOL);
            runtime_lost(w, "internal", "protocol version mismatch");
            return;
        }
        log_info(MOD, "worker %s: runtime %s ready (protocol %d)", w->id,
                 m.runtime[0] ? m.runtime : "(unnamed)", m.protocol);
        w->rts = RTS_UP;
        return;
    }
    switch (m.type) {
    case RT_HELLO:
        note_bad_line(w, "second hello", line, len);
        return;
    case RT_LOG:
        log_msg(strcmp(m.level, "error") == 0  ? LOG_ERROR
                : strcmp(m.level, "warn") == 0 ? LOG_WARN
                                               : LOG_INFO,
                "runtime", "worker %s: %s", w->id, m.message);
        return;
    case RT_PONG:
        if (w->ping_sent_ns && strcmp(m.id, w->ping_id) == 0)
            w->ping_sent_ns = 0;
        else
            note_bad_line(w, "pong for no outstanding ping", line, len);
        return;
    case RT_UNLOADED:
        return;
    case RT_LOADED:
    case RT_ERROR:
        if (w->load_rid[0] && strcmp(m.id, w->load_rid) == 0) {
            if (m.type == RT_LOADED)
                on_loaded(w, &m);
            else
                on_load_error(w, &m);
            return;
        }
        if (m.type == RT_LOADED) {
            note_bad_line(w, "loaded for an unknown id", line, len);
            return;
        }
        break;
    default:
        break;
    }
    struct job *j = job_find_rid(w, m.id);
    if (!j || j->phase != JOB_RUNNING) {
        note_bad_line(w, "message for an unknown or idle job id", line, len);
        if (m.type == RT_RESULT && m.inline_bytes >= 0)
            rt_frame_start(&w->frame, &m, 1);
        return;
    }
    if (m.type == RT_RESULT && m.inline_bytes >= 0) {
        int64_t max = inline_max(cfg_of(w));
        if (m.inline_bytes > max) {
            snprintf(err, sizeof err,
                     "result: outputs[0].bytes %lld is over the inline limit of %lld",
                     (long long)m.inline_bytes, (long long)max);
            job_fail(w, j, "internal", err);
            rt_frame_start(&w->frame, &m, 1); /* its bytes are dropped */
            note_bad_line(w, err, line, len);  /* last: a flood kills the runtime */
            return;
        }
        rt_frame_start(&w->frame, &m, 0); /* on_result once its bytes are in */
        return;
    }
    if (m.type == RT_PROGRESS) {
        if (!j->warmup && now - j->progress_post_ns >= (int64_t)cfg_of(w)->progress_ms * NS_PER_MS) {
            j->progress_post_ns = now;
            outbox_put_progress(&w->agent->outbox, w->id, j->job_id, j->attempt, j->epoch,
                                "generating", m.progress, NULL, now);
        }
    } else if (m.type == RT_RESULT) {
        on_result(w, j, &m, NULL, 0);
    } else if (m.type == RT_ERROR) {
        on_job_error(w, j, &m);
    }
}

/* An inline result's bytes are all in: the job takes them, unless they were
 * being dropped or the job is no longer running. */
static void on_frame(struct worker *w)
{
    int skip = w->frame.skip;
    size_t len;
    char *data = rt_frame_take(&w->frame, &len);
    struct job *j = skip ? NULL : job_find_rid(w, w->frame.msg.id);
    if (!j || j->phase != JOB_RUNNING) {
        free(data);
        return;
    }
    on_result(w, j, &w->frame.msg, data, len);
}

/* Reads what the runtime wrote; false when it closed its stdout (died). */
static bool read_runtime(struct worker *w)
{
    for (;;) {
        size_t room;
        char *p = line_reader_space(&w->lr, &room);
        ssize_t n = read(w->rt.out_fd, p, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        if (n <= 0)
            return false;
        line_reader_added(&w->lr, (size_t)n);
        char *line;
        size_t len;
        enum line_result r;
        while (w->rt.pid > 0) {
            if (w->frame.active) {
                if (!rt_frame_fill(&w->frame, &w->lr))
                    break;
                on_frame(w);
                continue;
            }
            if ((r = line_reader_next(&w->lr, &line, &len)) == LINE_NONE)
                break;
            if (r == LINE_TOO_LONG)
                note_bad_line(w, "line longer than max_line_bytes", NULL, 0);
            else
                on_line(w, line, len);
        }
        /* One read per wake-up keeps the loop responsive to timers. */
        return w->rt.pid > 0 || w->rts == RTS_DOWN;
    }
}

/* --- control loop ---------------------------------------------------------- */

static void start_warmup(struct worker *w)
{
    w->warm_started = true;
    if (!cfg_of(w)->warmup)
        return;
    for (int i = 0; i < w->view.nmodels; i++) {
        if (!w->view.pinned[i])
            continue;
        const struct agent_model *m = &cfg_of(w)->models[w->view.model_idx[i]];
        struct job *j = NULL;
        for (int k = 0; k < WORKER_MAX_JOBS && !j; k++)
            if (!w->jobs[k].used)
                j = &w->jobs[k];
        if (!j)
            return;
        pthread_mutex_lock(&w->mu);
        memset(j, 0, sizeof *j);
        j->used = true;
        j->warmup = true;
        snprintf(j->job_id, sizeof j->job_id, "warmup");
        snprintf(j->rid, sizeof j->rid, "warmup-%llu", (unsigned long long)++w->seq);
        snprintf(j->model, sizeof j->model, "%s", m->name);
        snprintf(j->capability, sizeof j->capability, "%s", m->ncaps ? m->caps[0] : "warmup");
        j->params = json_pack("{s:s, s:i, s:i, s:i, s:i}", "prompt", "gpuq warm-up", "width", 256,
                              "height", 256, "steps", 1, "seed", 1);
        j->phase = JOB_NEW;
        j->assigned_ns = clock_mono_ns();
        pthread_mutex_unlock(&w->mu);
    }
}

static void take_inbox(struct worker *w, bool *drain)
{
    pthread_mutex_lock(&w->mu);
    json_t *pending = w->pending;
    w->pending = json_array();
    struct job_ref cancels[WORKER_MAX_CANCELS];
    int nc = w->ncancels;
    memcpy(cancels, w->cancels, sizeof cancels);
    w->ncancels = 0;
    *drain = w->drain;
    /* Assignments in flight count as held until taken; take_assignment_at re-adds. */
    w->held -= (int)json_array_size(pending);
    pthread_mutex_unlock(&w->mu);
    size_t i;
    json_t *a;
    json_array_foreach(pending, i, a) take_assignment_at(w, a, 0);
    json_decref(pending);
    for (int k = 0; k < nc; k++) {
        for (int q = 0; q < WORKER_MAX_JOBS; q++) {
            struct job *j = &w->jobs[q];
            if (!j->used || j->warmup || strcmp(j->job_id, cancels[k].job_id) != 0 ||
                j->attempt != cancels[k].attempt)
                continue;
            /* A heartbeat built before this copy was adopted listed it under
             * the dead head's epoch; the restarted head, not having handed
             * the attempt out yet, judged it stale. That verdict is not about
             * the adopted copy: skip it. Skipping is safe: heartbeats keep
             * listing the attempt, so a cancel that still holds comes again
             * (the head cancels every stale attempt still listed). */
            if (j->adopted_ns && cancels[k].listed_ns < j->adopted_ns) {
                log_info(MOD, "worker %s: job %s attempt %lld: cancel drawn before its adoption "
                              "ignored",
                         w->id, j->job_id, (long long)j->attempt);
                continue;
            }
            log_info(MOD, "worker %s: cancelling job %s attempt %lld", w->id, j->job_id,
                     (long long)j->attempt);
            j->cancel = true;
            if (j->phase == JOB_RUNNING && w->rts == RTS_UP) {
                struct buf b;
                buf_init(&b);
                rt_fmt_cancel(&b, j->rid);
                int rc = send_line(w, &b);
                if (rc != 0) {
                    buf_fini(&b);
                    write_failed(w, rc);
                    break;
                }
                buf_fini(&b);
            }
        }
    }
}

static int64_t min_deadline(int64_t a, int64_t b)
{
    return a == 0 ? b : b == 0 ? a : a < b ? a : b;
}

/* Supervision timers: hello, ping, load timeouts. */
static void check_timers(struct worker *w, int64_t now)
{
    const struct agent_config *c = cfg_of(w);
    if (w->rts == RTS_STARTING && now >= w->hello_deadline_ns) {
        runtime_lost(w, "hang", "no hello in time");
        return;
    }
    if (w->rts != RTS_UP)
        return;
    if (w->ping_sent_ns && now - w->ping_sent_ns >= (int64_t)c->ping_timeout_ms * NS_PER_MS) {
        char why[96];
        snprintf(why, sizeof why, "no answer to ping within %d ms", c->ping_timeout_ms);
        runtime_lost(w, "hang", why);
        return;
    }
    if (w->load_rid[0] && now - w->load_started_ns >= (int64_t)c->load_timeout_ms * NS_PER_MS) {
        runtime_lost(w, "hang", "model load took longer than load_timeout_ms");
        return;
    }
    if (!w->ping_sent_ns && now >= w->next_ping_ns) {
        snprintf(w->ping_id, sizeof w->ping_id, "p%llu", (unsigned long long)++w->seq);
        struct buf b;
        buf_init(&b);
        rt_fmt_ping(&b, w->ping_id);
        w->ping_sent_ns = now;
        w->next_ping_ns = now + (int64_t)c->ping_interval_ms * NS_PER_MS;
        int rc = send_line(w, &b);
        buf_fini(&b);
        if (rc != 0)
            write_failed(w, rc);
    }
}

static void shutdown_runtime(struct worker *w)
{
    if (w->rt.pid <= 0)
        return;
    struct buf b;
    buf_init(&b);
    rt_fmt_shutdown(&b);
    runtime_write(&w->rt, b.data, b.len, 200);
    buf_fini(&b);
    runtime_close_stdin(&w->rt);
    int status;
    runtime_wait(&w->rt, 3000, 0, &status);
    w->rts = RTS_DOWN;
}

static void *controller_main(void *arg)
{
    struct worker *w = arg;
    const struct agent_config *c = cfg_of(w);
    w->restart_at_ns = clock_mono_ns();
    for (;;) {
        bool drain;
        take_inbox(w, &drain);
        int64_t now = clock_mono_ns();
        if (w->rts == RTS_DOWN && now >= w->restart_at_ns && !(drain && count_jobs(w, false) == 0))
            spawn_runtime(w);
        check_timers(w, clock_mono_ns());
        if (w->rts == RTS_UP && !w->warm_started)
            start_warmup(w);
        if (w->rts == RTS_UP && w->state == WS_WARMING && w->warm_started &&
            count_jobs(w, true) == 0) {
            if (w->warm_failed) { /* R25: a worker that cannot run its pinned models is not ready */
                runtime_lost(w, "warmup", "a pinned model failed its warm-up");
            } else {
                log_info(MOD, "worker %s: warm-up done, ready", w->id);
                set_state(w, WS_READY);
            }
        }
        advance(w);

        /* The head's drain: say once when the last job is done. */
        pthread_mutex_lock(&w->mu);
        bool head_drained = w->head_drain && count_jobs(w, false) == 0;
        pthread_mutex_unlock(&w->mu);
        if (head_drained && !w->said_drained)
            log_info(MOD, "worker %s: drained; idle and registered until undrained", w->id);
        w->said_drained = head_drained;

        if (drain) {
            pthread_mutex_lock(&w->mu);
            bool idle = count_jobs(w, false) == 0 && !w->polling &&
                        json_array_size(w->pending) == 0 &&
                        outbox_outcomes_for(&w->agent->outbox, w->id, NULL, NULL, 0) == 0;
            pthread_mutex_unlock(&w->mu);
            if (idle)
                break;
        }

        int64_t deadline = 0;
        if (w->rts == RTS_DOWN)
            deadline = w->restart_at_ns;
        else if (w->rts == RTS_STARTING)
            deadline = w->hello_deadline_ns;
        else {
            deadline = w->ping_sent_ns ? w->ping_sent_ns + (int64_t)c->ping_timeout_ms * NS_PER_MS
                                       : w->next_ping_ns;
            if (w->load_rid[0])
                deadline = min_deadline(deadline, w->load_started_ns +
                                                      (int64_t)c->load_timeout_ms * NS_PER_MS);
        }
        int64_t wait_ms = deadline ? (deadline - clock_mono_ns()) / NS_PER_MS + 1 : 1000;
        if (wait_ms < 0)
            wait_ms = 0;
        if (wait_ms > 1000)
            wait_ms = 1000;
        struct pollfd pfd[2] = {{.fd = w->wake[0], .events = POLLIN},
                                {.fd = w->rt.out_fd, .events = POLLIN}};
        int nfds = w->rt.out_fd >= 0 ? 2 : 1;
        int pr = poll(pfd, (nfds_t)nfds, (int)wait_ms);
        if (pr < 0 && errno != EINTR)
            break;
        if (pr <= 0)
            continue;
        if (pfd[0].revents) {
            char tmp[64];
            while (read(w->wake[0], tmp, sizeof tmp) > 0)
                ;
        }
        if (nfds == 2 && pfd[1].revents && w->rt.out_fd >= 0) {
            if (!read_runtime(w) && w->rt.pid > 0)
                runtime_lost(w, "crash", "the runtime exited");
        }
    }

    /* Drained: stop the runtime, leave the routing table. */
    log_info(MOD, "worker %s: drained; deregistering", w->id);
    shutdown_runtime(w);
    pthread_mutex_lock(&w->mu);
    bool registered = w->registered;
    w->deregistered = true;
    pthread_mutex_unlock(&w->mu);
    if (registered)
        report_deregister(w);
    set_state(w, WS_DONE);
    return NULL;
}

/* --- lifecycle ------------------------------------------------------------- */

static void sanitize(char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '_' || *s == '.'))
            *s = '-';
}

struct worker *worker_create(struct agent *a, int index, const struct gpu_info *gpu)
{
    struct worker *w = xcalloc(1, sizeof *w);
    w->agent = a;
    w->index = index;
    w->gpu = *gpu;
    snprintf(w->id, sizeof w->id, "%.50s-gpu%d", a->cfg.host, index);
    sanitize(w->id);
    agent_config_view(&a->cfg, index, gpu->vram_total_mb, &w->view);
    snprintf(w->out_dir, sizeof w->out_dir, "%.4000s/gpu%d", a->cfg.work_dir, index);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->wake[0] = w->wake[1] = -1;
    w->pending = json_array();
    w->state = WS_WARMING;
    vram_mgr_init(&w->vram, gpu->vram_total_mb, a->cfg.vram_reserve_mb);
    runtime_proc_init(&w->rt);
    line_reader_init(&w->lr, (size_t)a->cfg.max_line_bytes);
    http_client_init(&w->hc, a->head_url, a->token);
    return w;
}

int worker_start(struct worker *w)
{
    if (mkdir(w->out_dir, 0700) != 0 && errno != EEXIST) {
        log_error(MOD, "worker %s: cannot create %s: %s", w->id, w->out_dir, strerror(errno));
        return GPUQ_EIO;
    }
    if (pipe2(w->wake, O_CLOEXEC | O_NONBLOCK) != 0)
        return GPUQ_EIO;
    if (pthread_create(&w->ctl_thread, NULL, controller_main, w) != 0)
        return GPUQ_EIO;
    if (pthread_create(&w->poll_thread, NULL, poller_main, w) != 0)
        return GPUQ_EIO;
    char name[16]; /* the kernel's limit, with the NUL */
    snprintf(name, sizeof name, "ctl-gpu%d", w->index);
    pthread_setname_np(w->ctl_thread, name);
    snprintf(name, sizeof name, "poll-gpu%d", w->index);
    pthread_setname_np(w->poll_thread, name);
    return 0;
}

void worker_request_drain(struct worker *w)
{
    pthread_mutex_lock(&w->mu);
    bool was = w->drain;
    w->drain = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (!was) {
        log_info(MOD, "worker %s: draining", w->id);
        monitor_kick(w->agent);
    }
    worker_wake(w);
}

void worker_set_head_drain(struct worker *w, bool on)
{
    pthread_mutex_lock(&w->mu);
    bool was = w->head_drain;
    w->head_drain = on;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (was == on)
        return;
    if (on)
        log_info(MOD, "worker %s: draining (asked by the head): no new work", w->id);
    else
        log_info(MOD, "worker %s: undrained by the head: taking work again", w->id);
    monitor_kick(w->agent);
    worker_wake(w);
}

void worker_join(struct worker *w)
{
    pthread_join(w->ctl_thread, NULL);
    pthread_join(w->poll_thread, NULL);
}

void worker_destroy(struct worker *w)
{
    if (!w)
        return;
    for (int i = 0; i < WORKER_MAX_JOBS; i++) {
        json_decref(w->jobs[i].params);
        json_decref(w->jobs[i].successor);
    }
    json_decref(w->pending);
    if (w->wake[0] >= 0)
        close(w->wake[0]);
    if (w->wake[1] >= 0)
        close(w->wake[1]);
    rmdir(w->out_dir);
    line_reader_fini(&w->lr);
    rt_frame_reset(&w->frame);
    http_client_fini(&w->hc);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}
