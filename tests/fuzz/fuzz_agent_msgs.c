/* fuzz_agent_msgs.c: libFuzzer harness for the bodies an agent sends the head
 * (api/json.c: register, heartbeat, progress, fail, deregister — see
 * docs/protocol-worker.md) and the admin bodies (tenant, worker token). The
 * first byte picks the parser, the rest is the body. Any bytes must give a
 * record or a named 4xx error; a record that parses holds only values within
 * the bounds the protocol documents. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz.h"
#include "api/json.h"

static int is_name_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == '-';
}

static void check_worker_id(const char *id)
{
    CHECK(id[0] != '\0' && strlen(id) < SCHED_NAME_MAX);
    for (const char *p = id; *p; p++)
        CHECK(is_name_char(*p));
}

static void check_models(const struct worker_rec *w)
{
    CHECK(w->nmodels >= 0 && w->nmodels <= REG_MAX_MODELS);
    for (int i = 0; i < w->nmodels; i++) {
        const struct reg_model *m = &w->models[i];
        TERMINATED(m->name);
        CHECK(m->name[0] != '\0');
        CHECK(m->vram_mb >= 0 && m->vram_mb <= (1 << 22));
        CHECK(m->load_ms >= 0 && m->load_ms <= 3600000);
        CHECK(m->last_used_ms_ago >= 0);
        CHECK(m->cls == MODEL_UTILITY || m->cls == MODEL_GENERATION);
    }
}

static void check_register(const struct worker_rec *w)
{
    check_worker_id(w->id);
    TERMINATED(w->host);
    TERMINATED(w->incarnation);
    TERMINATED(w->gpu_name);
    TERMINATED(w->gpu_uuid);
    CHECK(w->gpu_index >= 0 && w->gpu_index <= 1024);
    CHECK(w->concurrency >= 1 && w->concurrency <= 64);
    CHECK(w->tel.vram_total_mb >= 0 && w->tel.vram_total_mb <= (1 << 22));
    CHECK(w->ncaps >= 1 && w->ncaps <= SCHED_MAX_CAPS);
    for (int i = 0; i < w->ncaps; i++) {
        TERMINATED(w->caps[i]);
        CHECK(w->caps[i][0] != '\0');
        for (const char *p = w->caps[i]; *p; p++)
            CHECK(is_name_char(*p));
    }
    CHECK(w->state == WORKER_WARMING);
    check_models(w);
    for (int i = 0; i < w->nmodels; i++)
        CHECK(!w->models[i].loaded || w->models[i].loaded == 1);
}

static void check_heartbeat(const struct worker_rec *w)
{
    check_worker_id(w->id);
    CHECK(w->state == WORKER_WARMING || w->state == WORKER_READY ||
          w->state == WORKER_DRAINING);
    const struct telemetry *t = &w->tel;
    CHECK(isfinite(t->temp_c) && t->temp_c >= -50 && t->temp_c <= 200);
    CHECK(t->vram_total_mb >= 0 && t->vram_total_mb <= (1 << 22));
    CHECK(t->vram_used_mb >= 0 && t->vram_used_mb <= (1 << 22));
    CHECK(t->vram_free_mb >= 0 && t->vram_free_mb <= (1 << 22));
    CHECK(isfinite(t->util_pct) && t->util_pct >= 0 && t->util_pct <= 100);
    CHECK(isfinite(t->power_w) && t->power_w >= 0 && t->power_w <= 100000);
    CHECK(t->sm_clock_mhz >= 0 && t->sm_clock_mhz <= 100000);
    TERMINATED(t->throttle);
    TERMINATED(t->health);
    check_models(w);
    for (int i = 0; i < w->nmodels; i++)
        CHECK(w->models[i].loaded);
    CHECK(w->nrunning >= 0 && w->nrunning <= REG_MAX_RUNNING);
    for (int i = 0; i < w->nrunning; i++)
        CHECK(w->running[i].attempt >= 1 && w->running[i].attempt <= 1000000);
    CHECK(w->cache_hits >= 0 && w->cache_misses >= 0);
}

static void check_msg(const struct agent_msg *m, int with_attempt)
{
    check_worker_id(m->worker_id);
    TERMINATED(m->message);
    TERMINATED(m->cls);
    if (with_attempt)
        CHECK(m->attempt >= 1 && m->attempt <= 1000000);
    else
        CHECK(m->attempt == 0);
}

static void check_error(const struct api_error *e)
{
    CHECK(e->code && e->code[0]);
    CHECK(e->message[0]);
    TERMINATED(e->field);
    TERMINATED(e->message);
    CHECK(e->status >= 400 && e->status <= 499);
    /* The error renders as JSON that parses back. */
    struct buf b;
    buf_init(&b);
    json_render_error(&b, e);
    json_error_t jerr;
    json_t *root = json_loadb(b.data, b.len, 0, &jerr);
    CHECK(root != NULL);
    json_decref(root);
    buf_fini(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    struct api_error err;
    memset(&err, 0, sizeof err);
    static struct worker_rec w;
    struct agent_msg m;
    char name[64];
    int rc;
    switch (data[0] % 7) {
    case 0:
        rc = json_parse_register(body, len, &w, &err);
        if (rc == 0)
            check_register(&w);
        break;
    case 1:
        rc = json_parse_heartbeat(body, len, &w, &err);
        if (rc == 0)
            check_heartbeat(&w);
        break;
    case 2:
        rc = json_parse_progress(body, len, &m, &err);
        if (rc == 0) {
            check_msg(&m, 1);
            CHECK(isfinite(m.progress) && m.progress >= 0 && m.progress <= 1);
            CHECK(m.phase == PHASE_LOADING || m.phase == PHASE_GENERATING);
        }
        break;
    case 3:
        rc = json_parse_fail(body, len, &m, &err);
        if (rc == 0) {
            static const char *const classes[] = {"oom", "cuda", "crash", "hang", "qc",
                                                  "bad_input", "internal", "cancelled"};
            int known = 0;
            check_msg(&m, 1);
            for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
                known |= !strcmp(m.cls, classes[i]);
            CHECK(known);
        }
        break;
    case 4:
        rc = json_parse_deregister(body, len, &m, &err);
        if (rc == 0)
            check_msg(&m, 0);
        break;
    case 5: {
        enum job_tier tier;
        rc = json_parse_tenant(body, len, name, sizeof name, &tier, &err);
        if (rc == 0) {
            TERMINATED(name);
            CHECK(tier == TIER_PAID || tier == TIER_FREE);
        }
        break;
    }
    default:
        rc = json_parse_token(body, len, name, sizeof name, &err);
        if (rc == 0) {
            TERMINATED(name);
            CHECK(name[0] != '\0');
        }
        break;
    }
    if (rc != 0)
        check_error(&err);
    return 0;
}
