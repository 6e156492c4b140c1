/* inputs.h: a job's input files on the agent. The head's assignment names
 * uploads in params.inputs ({"NAME": "in_…"}); before the job is handed to
 * its worker, each is downloaded (worker-authenticated) into
 * <work_dir>/inputs/<worker>-<job>.<attempt>/NAME and params.inputs.NAME
 * becomes that file's absolute path, which is what the runtime reads
 * (docs/protocol-runtime.md). The directory goes when the job leaves the
 * worker (done, failed or cancelled). */
#ifndef GPUQ_AGENT_INPUTS_H
#define GPUQ_AGENT_INPUTS_H

#include <jansson.h>

#include "agent/http.h"

/* Largest input the agent downloads (the head's max_input_bytes is below it). */
#define AGENT_INPUT_MAX (1LL << 30)

/* Fetches the inputs of assignment a (a JSON object from the head) and
 * rewrites its params.inputs to local paths. On failure a gets
 * "input_error": {"class": "bad_input" (the upload is gone) or "internal",
 * "message": …}, and nothing is left on disk. */
void agent_inputs_fetch(struct http_client *hc, const char *work_dir, const char *worker_id,
                        json_t *a);

/* Removes the input directory of attempt rid ("<job>.<attempt>"), if any. */
void agent_inputs_cleanup(const char *work_dir, const char *worker_id, const char *rid);

/* At start: removes every input directory an earlier run left (its jobs are
 * the head's again). */
void agent_inputs_reset(const char *work_dir);

/* The error fetch left in a (class and message), or NULL/NULL. */
void agent_inputs_error(json_t *a, const char **cls, const char **message);

#endif
