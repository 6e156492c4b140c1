/* inputs.c: downloading a job's input files and removing them (see inputs.h). */
#include "agent/inputs.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"

#define MOD "agent"
#define INPUT_TIMEOUT_MS 120000

static void dir_of(const char *work_dir, const char *worker_id, const char *rid, char *out,
                   size_t size)
{
    snprintf(out, size, "%.3000s/inputs/%.200s-%.100s", work_dir, worker_id, rid);
}

void agent_inputs_cleanup(const char *work_dir, const char *worker_id, const char *rid)
{
    char dir[PATH_MAX];
    dir_of(work_dir, worker_id, rid, dir, sizeof dir);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[PATH_MAX + 256];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

void agent_inputs_reset(const char *work_dir)
{
    char base[PATH_MAX];
    snprintf(base, sizeof base, "%.3000s/inputs", work_dir);
    DIR *d = opendir(base);
    if (!d)
        return;
    struct dirent *e;
    int removed = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        const char *dash = strrchr(e->d_name, '-');
        if (!dash)
            continue;
        char worker[256];
        snprintf(worker, sizeof worker, "%.*s", (int)(dash - e->d_name), e->d_name);
        agent_inputs_cleanup(work_dir, worker, dash + 1);
        removed++;
    }
    closedir(d);
    if (removed)
        log_info(MOD, "removed the inputs of %d job(s) an earlier run left", removed);
}

/* Names as the head admits them: 1..32 of a-z 0-9 . _ -, first a-z or 0-9. */
static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 32 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' ||
              *p == '-'))
            return 0;
    return 1;
}

static int id_ok(const char *s)
{
    if (strncmp(s, "in_", 3) != 0 || strlen(s) != 35)
        return 0;
    for (const char *p = s + 3; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

static void set_error(json_t *a, const char *cls, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_error(json_t *a, const char *cls, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_object_set_new(a, "input_error", json_pack("{s:s, s:s}", "class", cls, "message", msg));
}

/* Downloads one upload into path; 0, or sets a's error. */
static int fetch_one(struct http_client *hc, const char *name, const char *id, const char *path,
                     json_t *a)
{
    FILE *f = fopen(path, "wbx");
    if (!f) {
        set_error(a, "internal", "input %s: cannot create its file: %s", name, strerror(errno));
        return -1;
    }
    char url[128];
    snprintf(url, sizeof url, "/v1/agent/inputs/%s", id);
    long status = 0;
    int rc = http_download(hc, url, f, AGENT_INPUT_MAX, INPUT_TIMEOUT_MS, &status);
    if (fclose(f) != 0 && !rc)
        rc = -1;
    if (rc || status != 200) {
        unlink(path);
        if (!rc && status == 404)
            set_error(a, "bad_input", "input %s: upload %s is gone from the head", name, id);
        else
            set_error(a, "internal", "input %s: download of %s failed", name, id);
        return -1;
    }
    return 0;
}

void agent_inputs_fetch(struct http_client *hc, const char *work_dir, const char *worker_id,
                        json_t *a)
{
    json_t *params = json_object_get(a, "params");
    json_t *in = json_object_get(params, "inputs");
    if (!json_is_object(in) || json_object_size(in) == 0)
        return;
    json_t *att = json_object_get(a, "attempt");
    json_t *jid = json_object_get(a, "job_id");
    char rid[128];
    if (json_is_integer(jid))
        snprintf(rid, sizeof rid, "%lld.%lld", (long long)json_integer_value(jid),
                 (long long)json_integer_value(att));
    else
        snprintf(rid, sizeof rid, "%.60s.%lld", json_string_value(jid) ? json_string_value(jid)
                                                                       : "x",
                 (long long)json_integer_value(att));
    if (strchr(rid, '/')) {
        set_error(a, "internal", "inputs: bad job id %s", rid);
        return;
    }
    char base[PATH_MAX], dir[PATH_MAX];
    snprintf(base, sizeof base, "%.3000s/inputs", work_dir);
    if (mkdir(base, 0700) != 0 && errno != EEXIST) {
        set_error(a, "internal", "inputs: cannot create %.300s: %s", base, strerror(errno));
        return;
    }
    dir_of(work_dir, worker_id, rid, dir, sizeof dir);
    agent_inputs_cleanup(work_dir, worker_id, rid); /* a retried download starts clean */
    char real[PATH_MAX];
    if (mkdir(dir, 0700) != 0 || !realpath(dir, real)) {
        set_error(a, "internal", "inputs: cannot create %.300s: %s", dir, strerror(errno));
        return;
    }
    json_t *paths = json_object();
    const char *name;
    json_t *v;
    int rc = 0;
    json_object_foreach(in, name, v) {
        const char *id = json_string_value(v);
        if (!name_ok(name) || !id || !id_ok(id)) {
            set_error(a, "bad_input", "input %.40s: not a valid name and upload id", name);
            rc = -1;
            break;
        }
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/%s", real, name);
        if ((rc = fetch_one(hc, name, id, path, a)) != 0)
            break;
        json_object_set_new(paths, name, json_string(path));
    }
    if (rc) {
        json_decref(paths);
        agent_inputs_cleanup(work_dir, worker_id, rid);
        return;
    }
    /* A copy of params: the assignment's own object may be shared. */
    json_t *np = json_copy(params);
    json_object_set_new(np, "inputs", paths);
    json_object_set_new(a, "params", np);
}

void agent_inputs_error(json_t *a, const char **cls, const char **message)
{
    json_t *e = json_object_get(a, "input_error");
    *cls = json_string_value(json_object_get(e, "class"));
    *message = json_string_value(json_object_get(e, "message"));
}
