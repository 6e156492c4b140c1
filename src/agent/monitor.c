/* monitor.c: the agent's GPU state tracker and head link for worker
 * membership — samples every GPU's telemetry several times a second (NVML or
 * the simulation), registers each worker with the head and heartbeats it
 * (state, telemetry, loaded models, running jobs, cache counters), and acts on
 * the answers: drain, cancel, re-register after a 404 (R22, R23). Every
 * register carries the agent's incarnation (a random boot id), so the head
 * can tell a restarted agent from the same one registering again. */
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/token.h"

#define MOD "agent"
#define HB_TIMEOUT_MS 10000L

void agent_make_incarnation(char out[AGENT_INCARNATION_LEN + 1])
{
    unsigned char raw[AGENT_INCARNATION_LEN / 2];
    size_t got = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    while (fd >= 0 && got < sizeof raw) {
        ssize_t n = read(fd, raw + got, sizeof raw - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (fd >= 0)
        close(fd);
    if (got < sizeof raw) { /* no /dev/urandom: the clock and pid still differ per boot */
        uint64_t x = (uint64_t)clock_mono_ns() ^ ((uint64_t)clock_wall_ms() << 20) ^
                     ((uint64_t)getpid() << 40);
        for (size_t i = 0; i < sizeof raw; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            raw[i] = (unsigned char)x;
        }
    }
    hex_lower(raw, sizeof raw, out); /* AGENT_INCARNATION_LEN digits and a NUL */
}

void monitor_kick(struct agent *a)
{
    pthread_mutex_lock(&a->mu);
    a->kick = true;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static const char *state_name(const struct worker *w)
{
    if (w->drain || w->head_drain || w->state == WS_DONE)
        return "draining";
    return w->state == WS_READY ? "ready" : "warming";
}

json_t *monitor_register_body_locked(const struct worker *w)
{
    const struct agent_config *c = &w->agent->cfg;
    json_t *caps = json_array();
    for (int i = 0; i < w->view.ncaps; i++)
        json_array_append_new(caps, json_string(w->view.caps[i]));
    json_t *models = json_array();
    for (int i = 0; i < w->view.nmodels; i++) {
        const struct agent_model *m = &c->models[w->view.model_idx[i]];
        json_array_append_new(
            models, json_pack("{s:s, s:I, s:I, s:s, s:b, s:b}", "name", m->name, "vram_mb",
                              (json_int_t)m->vram_mb, "load_ms", (json_int_t)m->load_ms, "class",
                              m->cls == MODEL_UTILITY ? "utility" : "generation", "pinned",
                              w->view.pinned[i], "loaded", vram_mgr_find(&w->vram, m->name) >= 0));
    }
    json_t *body = json_pack(
        "{s:i, s:s, s:s, s:{s:i, s:s, s:s, s:I}, s:o, s:i, s:o}", "protocol", AGENT_PROTOCOL,
        "worker_id", w->id, "host", c->host, "gpu", "index", w->index, "name", w->gpu.name,
        "uuid", w->gpu.uuid, "vram_total_mb", (json_int_t)w->gpu.vram_total_mb, "capabilities",
        caps, "concurrency", w->view.concurrency, "models", models);
    if (!atomic_load(&w->agent->incarnation_refused))
        json_object_set_new(body, "incarnation", json_string(w->agent->incarnation));
    if (w->view.ahead > 0)
        json_object_set_new(body, "ahead", json_integer(w->view.ahead));
    return body;
}

/* A register field a head older than this agent refuses (400 naming it) is
 * dropped for good, once, and the register sent again: without
 * "incarnation" a restart of this agent is noticed only by the head's TTL;
 * without "ahead" no worker holds a job beyond its slots. */
static bool drop_refused_field(struct agent *a, long status, const json_t *answer)
{
    const char *field =
        json_string_value(json_object_get(json_object_get(answer, "error"), "field"));
    if (status != 400 || !field)
        return false;
    if (strcmp(field, "incarnation") == 0 && !atomic_exchange(&a->incarnation_refused, true)) {
        log_warn(MOD, "the head does not accept \"incarnation\"; registering without it");
        return true;
    }
    if (strcmp(field, "ahead") == 0) {
        bool held = false; /* whether any worker still held ahead: warned once */
        for (int i = 0; i < a->nworkers; i++) {
            pthread_mutex_lock(&a->workers[i]->mu);
            held |= a->workers[i]->view.ahead > 0;
            a->workers[i]->view.ahead = 0;
            pthread_mutex_unlock(&a->workers[i]->mu);
        }
        if (held)
            log_warn(MOD, "the head does not accept \"ahead\"; registering without it (no "
                          "job is held ahead of a free slot)");
        return true;
    }
    return false;
}

/* Appends {job_id, attempt} to list unless it is there already or full. */
static void add_running(json_t *list, const char *job_id, int64_t attempt)
{
    if (json_array_size(list) >= AGENT_MAX_RUNNING_REPORT)
        return;
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        if (json_integer_value(json_object_get(e, "attempt")) == attempt &&
            strcmp(json_string_value(json_object_get(e, "job_id")), job_id) == 0)
            return;
    }
    json_array_append_new(list, json_pack("{s:s, s:I}", "job_id", job_id, "attempt",
                                          (json_int_t)attempt));
}

static json_t *telemetry_json(const struct gpu_telemetry *t)
{
    json_t *o = json_object();
    json_object_set_new(o, "temp_c", t->temp_c >= 0 ? json_real(round(t->temp_c * 10) / 10)
                                                    : json_null());
    json_object_set_new(o, "vram_total_mb", json_integer(t->vram_total_mb));
    json_object_set_new(o, "vram_used_mb", json_integer(t->vram_used_mb));
    json_object_set_new(o, "vram_free_mb", json_integer(t->vram_free_mb));
    json_object_set_new(o, "util_pct", t->util_pct >= 0 ? json_integer(t->util_pct) : json_null());
    json_object_set_new(o, "power_w", t->power_w >= 0 ? json_real(round(t->power_w * 10) / 10)
                                                      : json_null());
    const char *names[16];
    int n = gpu_throttle_names(t->throttle, names, 16);
    json_t *reasons = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(reasons, json_string(names[i]));
    json_object_set_new(o, "throttle_reasons", reasons);
    json_object_set_new(o, "sm_clock_mhz",
                        t->sm_clock_mhz >= 0 ? json_integer(t->sm_clock_mhz) : json_null());
    json_object_set_new(o, "health", json_string(gpu_health_name(t->health)));
    return o;
}

json_t *monitor_heartbeat_body_locked(const struct worker *w, int64_t now_ns)
{
    json_t *loaded = json_array();
    for (int i = 0; i < w->vram.n; i++) {
        const struct vram_entry *e = &w->vram.e[i];
        int64_t ago = e->last_used_ns ? (now_ns - e->last_used_ns) / NS_PER_MS : 0;
        json_array_append_new(loaded, json_pack("{s:s, s:I, s:b, s:I}", "name", e->name,
                                                "vram_mb", (json_int_t)e->vram_mb, "pinned",
                                                e->pinned, "last_used_ms_ago",
                                                (json_int_t)(ago < 0 ? 0 : ago)));
    }
    /* Every attempt this worker answers for: held by its controller, handed
     * over by the poller but not yet taken, or finished with the outcome
     * still in the outbox (so the head does not take those away). */
    json_t *running = json_array();
    for (int i = 0; i < WORKER_MAX_JOBS; i++) {
        const struct job *j = &w->jobs[i];
        if (j->used && !j->warmup)
            add_running(running, j->job_id, j->attempt);
    }
    size_t pi;
    json_t *pa;
    json_array_foreach(w->pending, pi, pa)
    {
        json_t *jid = json_object_get(pa, "job_id");
        json_t *att = json_object_get(pa, "attempt");
        char id[64];
        if (json_is_string(jid) && json_string_length(jid) < sizeof id)
            snprintf(id, sizeof id, "%s", json_string_value(jid));
        else if (json_is_integer(jid))
            snprintf(id, sizeof id, "%lld", (long long)json_integer_value(jid));
        else
            continue;
        if (json_is_integer(att))
            add_running(running, id, json_integer_value(att));
    }
    char(*ids)[OUTBOX_ID_MAX] = xcalloc(AGENT_MAX_RUNNING_REPORT, sizeof *ids);
    int64_t *attempts = xcalloc(AGENT_MAX_RUNNING_REPORT, sizeof *attempts);
    int n = outbox_outcomes_for(&w->agent->outbox, w->id, ids, attempts,
                                AGENT_MAX_RUNNING_REPORT);
    for (int i = 0; i < n && i < AGENT_MAX_RUNNING_REPORT; i++)
        add_running(running, ids[i], attempts[i]);
    free(ids);
    free(attempts);
    struct gpu_telemetry t = w->tel;
    if (!w->tel_valid) {
        memset(&t, 0, sizeof t);
        t.temp_c = t.power_w = -1;
        t.util_pct = t.sm_clock_mhz = -1;
        t.vram_total_mb = w->gpu.vram_total_mb;
        t.vram_free_mb = w->gpu.vram_total_mb;
    }
    /* A runtime that keeps dying makes the GPU degraded in the head's eyes. */
    if (t.health == GPU_HEALTH_OK && (w->failures_seen >= 3 || w->degraded_until_ns > now_ns))
        t.health = GPU_HEALTH_DEGRADED;
    return json_pack("{s:i, s:s, s:s, s:o, s:o, s:o, s:{s:I, s:I}}", "protocol", AGENT_PROTOCOL,
                     "worker_id", w->id, "state", state_name(w), "telemetry", telemetry_json(&t),
                     "loaded_models", loaded, "running", running, "cache", "hits",
                     (json_int_t)w->vram.hits, "misses", (json_int_t)w->vram.misses);
}

static void sample(struct agent *a, int64_t now)
{
    for (int i = 0; i < a->nworkers; i++) {
        struct worker *w = a->workers[i];
        struct gpu_load load;
        pthread_mutex_lock(&w->mu);
        load.busy = worker_busy_locked(w);
        load.vram_used_mb = vram_mgr_used(&w->vram);
        pthread_mutex_unlock(&w->mu);
        struct gpu_telemetry t;
        int rc = gpu_read(&a->gpus, w->index, &load, now, &t);
        pthread_mutex_lock(&w->mu);
        if (rc == 0) {
            w->tel = t;
            w->tel_valid = true;
        } else {
            w->tel.health = GPU_HEALTH_DEGRADED;
        }
        pthread_mutex_unlock(&w->mu);
    }
}

static void do_register(struct agent *a, struct worker *w, struct http_client *hc)
{
    pthread_mutex_lock(&w->mu);
    json_t *body = monitor_register_body_locked(w);
    pthread_mutex_unlock(&w->mu);
    long status = 0;
    json_t *answer = NULL;
    int rc = http_json(hc, "/v1/agent/register", body, HB_TIMEOUT_MS, &status, &answer);
    /* An older head refuses one unknown field at a time: at most both go. */
    for (int tries = 0; rc == 0 && tries < 2 && drop_refused_field(a, status, answer); tries++) {
        pthread_mutex_lock(&w->mu);
        body = monitor_register_body_locked(w);
        pthread_mutex_unlock(&w->mu);
        json_decref(answer);
        answer = NULL;
        rc = http_json(hc, "/v1/agent/register", body, HB_TIMEOUT_MS, &status, &answer);
    }
    if (rc == 0 && status == 200) {
        json_t *hb = json_object_get(answer, "heartbeat_ms");
        if (json_is_integer(hb) && json_integer_value(hb) >= 50 &&
            json_integer_value(hb) <= 600000) {
            pthread_mutex_lock(&a->mu);
            a->cfg.heartbeat_ms = (int)json_integer_value(hb);
            pthread_mutex_unlock(&a->mu);
        }
        json_t *pw = json_object_get(answer, "poll_workers");
        atomic_store(&a->poll_workers,
                     json_is_integer(pw) && json_integer_value(pw) >= 1 &&
                             json_integer_value(pw) <= GPU_MAX
                         ? (int)json_integer_value(pw)
                         : 1);
        json_t *bhb = json_object_get(answer, "busy_heartbeat_ms");
        pthread_mutex_lock(&a->mu);
        a->cfg.busy_heartbeat_ms =
            json_is_integer(bhb) && json_integer_value(bhb) >= 20 &&
                    json_integer_value(bhb) <= 600000
                ? (int)json_integer_value(bhb)
                : 0;
        pthread_mutex_unlock(&a->mu);
        pthread_mutex_lock(&w->mu);
        w->registered = true;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        log_info(MOD, "worker %s registered (%s, %lld MB)", w->id, w->gpu.name,
                 (long long)w->gpu.vram_total_mb);
    } else {
        log_warn(MOD, "worker %s: register failed (%s %ld)", w->id, rc ? "unreachable" : "status",
                 status);
    }
    json_decref(answer);
}

/* listed_ns: when the heartbeat before the one it answers was built (see
 * take_inbox). */
static void handle_answer(struct worker *w, json_t *answer, int64_t listed_ns)
{
    /* The head's drain holds the worker idle but registered, until the
     * admin undoes it; only the agent's own stop makes it leave. */
    worker_set_head_drain(w, json_is_true(json_object_get(answer, "drain")));
    json_t *cancel = json_object_get(answer, "cancel");
    if (!json_is_array(cancel))
        return;
    size_t i;
    json_t *c;
    pthread_mutex_lock(&w->mu);
    json_array_foreach(cancel, i, c)
    {
        json_t *jid = json_object_get(c, "job_id");
        json_t *att = json_object_get(c, "attempt");
        if (w->ncancels >= WORKER_MAX_CANCELS || !json_is_integer(att))
            continue;
        struct job_ref *r = &w->cancels[w->ncancels];
        if (json_is_string(jid) && json_string_length(jid) < sizeof r->job_id)
            snprintf(r->job_id, sizeof r->job_id, "%s", json_string_value(jid));
        else if (json_is_integer(jid))
            snprintf(r->job_id, sizeof r->job_id, "%lld", (long long)json_integer_value(jid));
        else
            continue;
        r->attempt = json_integer_value(att);
        r->listed_ns = listed_ns;
        w->ncancels++;
    }
    pthread_mutex_unlock(&w->mu);
    worker_wake(w);
}

static void heartbeat(struct agent *a, struct worker *w, struct http_client *hc, int64_t now)
{
    pthread_mutex_lock(&w->mu);
    bool skip = w->deregistered || w->state == WS_DONE;
    bool registered = w->registered;
    pthread_mutex_unlock(&w->mu);
    if (skip)
        return;
    if (!registered) {
        do_register(a, w, hc);
        pthread_mutex_lock(&w->mu);
        registered = w->registered;
        pthread_mutex_unlock(&w->mu);
        if (!registered)
            return;
    }
    pthread_mutex_lock(&w->mu);
    json_t *body = monitor_heartbeat_body_locked(w, now);
    /* Cancels in this answer may be drawn from this listing or from the
     * head's events since the last answer: date them by the heartbeat
     * before this one, the earliest they can be about (0 at first). Under
     * mu, so ordered with adoptions. */
    int64_t listed_ns = w->hb_listed_ns;
    w->hb_listed_ns = clock_mono_ns();
    pthread_mutex_unlock(&w->mu);
    long status = 0;
    json_t *answer = NULL;
    int rc = http_json(hc, "/v1/agent/heartbeat", body, HB_TIMEOUT_MS, &status, &answer);
    if (rc == 0 && status == 200) {
        handle_answer(w, answer, listed_ns);
    } else if (rc == 0 && status == 404) {
        log_warn(MOD, "worker %s: head does not know us; registering again", w->id);
        pthread_mutex_lock(&w->mu);
        w->registered = false;
        bool gone = w->deregistered;
        pthread_mutex_unlock(&w->mu);
        if (!gone)
            do_register(a, w, hc);
    } else {
        log_warn(MOD, "worker %s: heartbeat failed (%s %ld)", w->id, rc ? "unreachable" : "status",
                 status);
    }
    json_decref(answer);
}

/* Some worker holds work (assigned or running). */
static bool any_busy(struct agent *a)
{
    bool busy = false;
    for (int i = 0; i < a->nworkers && !busy; i++) {
        struct worker *w = a->workers[i];
        pthread_mutex_lock(&w->mu);
        busy = w->held > 0;
        pthread_mutex_unlock(&w->mu);
    }
    return busy;
}

void *monitor_main(void *arg)
{
    struct agent *a = arg;
    struct http_client hc;
    http_client_init(&hc, a->head_url, a->token);
    int64_t last_hb = INT64_MIN / 2;
    pthread_mutex_lock(&a->mu);
    while (!a->stop) {
        bool kicked = a->kick;
        a->kick = false;
        int hb_ms = a->cfg.heartbeat_ms;
        int busy_ms = a->cfg.busy_heartbeat_ms;
        int tel_ms = a->cfg.telemetry_ms;
        pthread_mutex_unlock(&a->mu);
        if (busy_ms > 0 && busy_ms < hb_ms && any_busy(a))
            hb_ms = busy_ms;

        int64_t now = clock_mono_ns();
        sample(a, now);
        if (kicked || now >= last_hb + (int64_t)hb_ms * NS_PER_MS) {
            for (int i = 0; i < a->nworkers; i++)
                heartbeat(a, a->workers[i], &hc, now);
            last_hb = clock_mono_ns();
        }

        int64_t until = clock_mono_ns() + (int64_t)tel_ms * NS_PER_MS;
        int64_t next_hb = last_hb + (int64_t)hb_ms * NS_PER_MS;
        if (next_hb < until)
            until = next_hb;
        /* A worker that takes work shortens the beat: look again that soon. */
        if (busy_ms > 0 && clock_mono_ns() + (int64_t)busy_ms * NS_PER_MS < until)
            until = clock_mono_ns() + (int64_t)busy_ms * NS_PER_MS;
        int64_t wait_ns = until - clock_mono_ns();
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        if (wait_ns > 0) {
            ts.tv_sec += wait_ns / NS_PER_S;
            ts.tv_nsec += wait_ns % NS_PER_S;
            if (ts.tv_nsec >= NS_PER_S) {
                ts.tv_sec++;
                ts.tv_nsec -= NS_PER_S;
            }
        }
        pthread_mutex_lock(&a->mu);
        if (!a->kick && !a->stop && wait_ns > 0)
            pthread_cond_timedwait(&a->cv, &a->mu, &ts);
    }
    pthread_mutex_unlock(&a->mu);
    http_client_fini(&hc);
    return NULL;
}
