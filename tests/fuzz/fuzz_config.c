/* fuzz_config.c: libFuzzer harness for the configuration readers: the INI
 * reader itself (common/ini.c), gpuqd's settings applier (head/config.c
 * config_load, fed through a memory file) and gpuq-agent's
 * (agent/config.c agent_config_parse_string). The first byte picks which; the
 * rest is the file. Any bytes must give settings or an error with a reason;
 * settings that load keep the invariants docs/configuration.md and
 * docs/agent-config.md promise. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "agent/config.h"
#include "common/ini.h"
#include "head/config.h"

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* What the INI reader hands its callback: a trimmed non-empty key without
 * '=', a trimmed value without a line break, lines counted upward. */
struct ini_probe {
    int last_line;
    int stop_at; /* the callback refuses its stop_at-th key (0: never) */
    int keys;
};

static int probe_cb(void *arg, const char *section, const char *key, const char *value, int line,
                    char *err, size_t errlen)
{
    struct ini_probe *p = arg;
    CHECK(section && key && value);
    CHECK(strlen(section) < 128);
    CHECK(key[0] != '\0' && !is_blank(key[0]) && !is_blank(key[strlen(key) - 1]));
    CHECK(!strchr(key, '=') && !strchr(key, '\n') && !strchr(value, '\n'));
    CHECK(strlen(key) < 4096 && strlen(value) < 4096);
    CHECK(line > p->last_line);
    p->last_line = line;
    if (++p->keys == p->stop_at) {
        snprintf(err, errlen, "refused");
        return 1;
    }
    return 0;
}

static void fuzz_ini(const char *text, int stop_at)
{
    struct ini_probe p = {.stop_at = stop_at};
    char err[256] = "";
    int rc = ini_parse_string(text, "fuzz", probe_cb, &p, err, sizeof err);
    if (rc) {
        TERMINATED(err);
        CHECK(!strncmp(err, "fuzz:", 5));
    }
    if (stop_at && p.keys >= stop_at)
        CHECK(rc != 0 && strstr(err, "refused"));
}

static void fuzz_head(const uint8_t *data, size_t size)
{
    static struct head_config defaults, cfg;
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        config_defaults(&defaults);
        fd = memfd_create("gpuq-fuzz-config", 0);
        CHECK(fd >= 0);
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    CHECK(ftruncate(fd, 0) == 0);
    CHECK(pwrite(fd, data, size, 0) == (ssize_t)size);
    memcpy(&cfg, &defaults, sizeof cfg);
    char err[512] = "";
    int rc = config_load(&cfg, path, err, sizeof err);
    if (rc) {
        CHECK(err[0] != '\0');
        TERMINATED(err);
        return;
    }
    TERMINATED(cfg.listen);
    TERMINATED(cfg.data_dir);
    CHECK(cfg.max_connections > 0 && cfg.http_threads > 0 && cfg.connection_timeout_s > 0);
    CHECK(cfg.max_body_bytes > 0 && cfg.max_result_bytes > 0);
    CHECK(cfg.heartbeat_ms > 0 && cfg.ttl_ms > cfg.heartbeat_ms);
    CHECK(cfg.max_wait_s >= 0 && cfg.result_retention_h >= 0);
    CHECK(cfg.breaker.max_cooldown_ns >= cfg.breaker.cooldown_ns);
    CHECK(cfg.ncaps >= 0 && cfg.ncaps <= CONFIG_MAX_CAPS);
    CHECK(cfg.nmodels >= 0 && cfg.nmodels <= CONFIG_MAX_MODELS);
    for (int i = 0; i < cfg.ncaps; i++) {
        TERMINATED(cfg.caps[i].name);
        CHECK(cfg.caps[i].name[0] != '\0');
        CHECK(config_model(&cfg, cfg.caps[i].default_model) != NULL);
        CHECK(config_cap(&cfg, cfg.caps[i].name) != NULL);
    }
}

static void fuzz_agent(const char *text)
{
    static struct agent_config defaults, cfg;
    static int init;
    if (!init) {
        agent_config_defaults(&defaults, "/fuzz/gpuq-agent");
        init = 1;
    }
    memcpy(&cfg, &defaults, sizeof cfg);
    char err[512] = "";
    int rc = agent_config_parse_string(&cfg, text, err, sizeof err);
    if (rc) {
        CHECK(err[0] != '\0');
        TERMINATED(err);
        return;
    }
    TERMINATED(cfg.runtime);
    TERMINATED(cfg.host);
    TERMINATED(cfg.work_dir);
    CHECK(cfg.concurrency >= 1);
    CHECK(cfg.heartbeat_ms > 0 && cfg.telemetry_ms > 0 && cfg.poll_wait_s >= 0);
    CHECK(cfg.ping_interval_ms > 0 && cfg.ping_timeout_ms > 0);
    CHECK(cfg.restart_min_ms >= 0 && cfg.restart_max_ms >= cfg.restart_min_ms);
    CHECK(cfg.outbox_retry_min_ms >= 0 && cfg.outbox_retry_max_ms >= cfg.outbox_retry_min_ms);
    CHECK(cfg.max_line_bytes > 0 && cfg.max_output_bytes > 0 && cfg.vram_reserve_mb >= 0);
    CHECK(cfg.nmodels >= 1 && cfg.nmodels <= AGENT_MAX_MODELS);
    for (int i = 0; i < cfg.nmodels; i++) {
        const struct agent_model *m = &cfg.models[i];
        TERMINATED(m->name);
        CHECK(m->name[0] != '\0' && m->vram_mb > 0 && m->load_ms >= 0);
        CHECK(m->ncaps >= 0 && m->ncaps <= AGENT_MAX_CAPS);
        CHECK(agent_config_model(&cfg, m->name) != NULL);
    }
    for (int g = 0; g < GPU_MAX; g++) {
        CHECK(cfg.gpus[g].ncaps >= 0 && cfg.gpus[g].ncaps <= AGENT_MAX_CAPS);
        CHECK(cfg.gpus[g].npinned >= 0 && cfg.gpus[g].npinned <= AGENT_MAX_MODELS);
        CHECK(cfg.gpus[g].concurrency >= 0);
        for (int i = 0; i < cfg.gpus[g].npinned; i++)
            CHECK(agent_config_model(&cfg, cfg.gpus[g].pinned[i]) != NULL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int mode = data[0] % 4;
    data++;
    size--;
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    switch (mode) {
    case 0:
        fuzz_ini(text, 0);
        break;
    case 1:
        fuzz_ini(text, 1 + (int)(size % 3));
        break;
    case 2:
        fuzz_head(data, size);
        break;
    default:
        fuzz_agent(text);
        break;
    }
    free(text);
    return 0;
}
