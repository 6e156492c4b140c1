/* wait.c: following a job to its end and downloading its result. */
#include "wait.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/render.h"
#include "common/alloc.h"
#include "common/buf.h"
#include "common/clock.h"

#define POLL_WAIT_S 30          /* the server allows up to 60 */
#define MAX_TRANSPORT_RETRIES 10 /* consecutive failures to reach the server */
#define RETRY_PAUSE_MS 500

static int is_terminal(const char *state)
{
    return strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
           strcmp(state, "cancelled") == 0 || strcmp(state, "dead") == 0 ||
           strcmp(state, "expired") == 0;
}

int wait_job(struct cli *c, const char *id, double timeout_s, json_t **final)
{
    *final = NULL;
    char *eid = client_escape(id);
    int64_t start = clock_mono_ns();
    char last[512] = "";
    int failures = 0;
    int poll_s = 0; /* the first request answers at once with the current job */
    int tty = isatty(STDERR_FILENO);
    int rc = CLI_OK;
    for (;;) {
        double left = timeout_s > 0 ? timeout_s - (double)(clock_mono_ns() - start) / 1e9 : 1e9;
        if (left <= 0) {
            if (tty)
                fputc('\n', stderr);
            fprintf(stderr, "gpuq %s: gave up waiting after %.0f s; job %s goes on (gpuq get %s)\n",
                    c->cmd, timeout_s, id, id);
            rc = WAIT_ETIMEOUT;
            break;
        }
        int w = poll_s;
        if (w > left)
            w = (int)left;
        char path[256];
        if (w > 0)
            snprintf(path, sizeof path, "/v1/jobs/%s?wait=%d", eid, w);
        else
            snprintf(path, sizeof path, "/v1/jobs/%s", eid);
        struct client_resp r;
        client_resp_init(&r);
        if (client_request(&c->http, c->cmd, "GET", path, NULL, w + 30L, &r) < 0) {
            client_resp_fini(&r);
            if (++failures > MAX_TRANSPORT_RETRIES) {
                fprintf(stderr, "gpuq %s: giving up; job %s may still run (gpuq get %s)\n",
                        c->cmd, id, id);
                rc = CLI_EUNREACHABLE;
                break;
            }
            struct timespec ts = {0, RETRY_PAUSE_MS * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        failures = 0;
        if (r.status != 200) {
            client_print_error(c->cmd, &r);
            client_resp_fini(&r);
            rc = CLI_EREFUSED;
            break;
        }
        json_t *job = client_json(c->cmd, &r);
        client_resp_fini(&r);
        if (!job) {
            rc = CLI_EREFUSED;
            break;
        }
        char line[512];
        render_progress(job, line, sizeof line);
        const char *state = json_string_value(json_object_get(job, "state"));
        if (tty) {
            /* One line redrawn in place, with a bar while it runs. */
            char bar[64];
            render_bar(job, bar, sizeof bar);
            fprintf(stderr, "\r\033[K%s%s", line, bar);
            if (state && is_terminal(state))
                fputc('\n', stderr);
            fflush(stderr);
        } else if (strcmp(line, last) != 0) {
            fprintf(stderr, "%s\n", line);
            snprintf(last, sizeof last, "%s", line);
        }
        if (state && is_terminal(state)) {
            *final = job;
            break;
        }
        json_decref(job);
        poll_s = POLL_WAIT_S;
    }
    free(eid);
    return rc;
}

int wait_outcome_code(const char *state)
{
    static const struct {
        const char *state;
        int code;
    } map[] = {{"succeeded", CLI_OK},
               {"failed", WAIT_EFAILED},
               {"dead", WAIT_EDEAD},
               {"expired", WAIT_EEXPIRED},
               {"cancelled", WAIT_ECANCELLED}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (state && strcmp(state, map[i].state) == 0)
            return map[i].code;
    return CLI_EREFUSED;
}

void wait_result_path(const char *id, const char *ct, const char *file, const char *dir,
                      char *out, size_t size)
{
    if (file) {
        snprintf(out, size, "%s", file);
        return;
    }
    char safe[128];
    size_t n = 0;
    for (const char *p = id; *p && n < sizeof safe - 1; p++)
        safe[n++] = (strchr("/\\", *p) || *p == '.') ? '_' : *p;
    safe[n] = '\0';
    if (dir && *dir)
        snprintf(out, size, "%s%s%s.%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", safe,
                 wait_result_ext(ct));
    else
        snprintf(out, size, "%s.%s", safe, wait_result_ext(ct));
}

const char *wait_result_ext(const char *ct)
{
    static const struct {
        const char *type, *ext;
    } map[] = {
        {"image/png", "png"},   {"image/jpeg", "jpg"},        {"image/webp", "webp"},
        {"image/gif", "gif"},   {"video/mp4", "mp4"},         {"video/webm", "webm"},
        {"audio/wav", "wav"},   {"audio/mpeg", "mp3"},        {"application/json", "json"},
        {"text/plain", "txt"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        size_t n = strlen(map[i].type);
        if (ct && strncmp(ct, map[i].type, n) == 0 && (ct[n] == '\0' || ct[n] == ';'))
            return map[i].ext;
    }
    return "bin";
}

int wait_download(struct cli *c, const char *id, const char *path)
{
    struct buf tmp;
    buf_init(&tmp);
    buf_printf(&tmp, "%s.part.%ld", path, (long)getpid());
    FILE *f = fopen(tmp.data, "wb");
    if (!f) {
        fprintf(stderr, "gpuq %s: cannot write %s: %m\n", c->cmd, tmp.data);
        buf_fini(&tmp);
        return CLI_EREFUSED;
    }
    char *eid = client_escape(id);
    char url[256];
    snprintf(url, sizeof url, "/v1/jobs/%s/result", eid);
    free(eid);
    struct client_resp r;
    client_resp_init(&r);
    int rc = client_download(&c->http, c->cmd, url, f, &r);
    int close_failed = fclose(f) != 0;
    if (rc < 0) {
        rc = CLI_EUNREACHABLE;
    } else if (r.status != 200) {
        client_print_error(c->cmd, &r);
        rc = CLI_EREFUSED;
    } else if (close_failed) {
        fprintf(stderr, "gpuq %s: writing %s failed\n", c->cmd, tmp.data);
        rc = CLI_EREFUSED;
    } else if (rename(tmp.data, path) != 0) {
        fprintf(stderr, "gpuq %s: cannot rename %s to %s: %m\n", c->cmd, tmp.data, path);
        rc = CLI_EREFUSED;
    } else {
        rc = CLI_OK;
    }
    if (rc != CLI_OK)
        unlink(tmp.data);
    client_resp_fini(&r);
    buf_fini(&tmp);
    return rc;
}
