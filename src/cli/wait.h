/* wait.h: following a job to its end (gpuq submit --wait), printing each
 * change of state, phase or progress to stderr, and downloading its result. */
#ifndef GPUQ_CLI_WAIT_H
#define GPUQ_CLI_WAIT_H

#include <jansson.h>

#include "cli/cli.h"

/* wait_job follows job `id` with long-polls of GET /v1/jobs/{id}?wait= until
 * it is succeeded, failed or cancelled, or timeout_s (0: no limit) runs out.
 * On a terminal state *final is the job (caller frees) and CLI_OK is
 * returned; otherwise an exit code. */
int wait_job(struct cli *c, const char *id, double timeout_s, json_t **final);

/* wait_outcome_code: the exit code of `gpuq wait` for a terminal state —
 * 0 succeeded, 4 failed, 5 dead, 6 expired, 7 cancelled. */
#define WAIT_EFAILED 4
#define WAIT_EDEAD 5
#define WAIT_EEXPIRED 6
#define WAIT_ECANCELLED 7
#define WAIT_ETIMEOUT 8 /* --timeout ran out; the job goes on */
int wait_outcome_code(const char *state);

/* wait_download saves the result of job `id` to path (written to a temporary
 * file beside it, then renamed). Returns an exit code. */
int wait_download(struct cli *c, const char *id, const char *path);

/* wait_result_path: where job `id`'s result goes — file when given, else
 * DIR/ID.EXT (dir NULL: the current directory), EXT from the content type;
 * the id keeps only characters safe in a file name. */
void wait_result_path(const char *id, const char *content_type, const char *file,
                      const char *dir, char *out, size_t size);

/* wait_result_ext returns the file extension for a content type ("png"). */
const char *wait_result_ext(const char *content_type);

#endif
