/* inputs.h: uploaded input files — an image for an upscale or img2img, a mask —
 * that jobs name in params.inputs (docs/api). An upload is stored durably in
 * the store (bytes and record in one commit) before its id is answered; a job
 * names uploads of its own tenant only; a job's submit links it to its inputs
 * in the same commit as the job; the sweep unlinks jobs past the result
 * retention and deletes uploads no job names once input_unused_s has passed. */
#ifndef GPUQ_HEAD_INPUTS_H
#define GPUQ_HEAD_INPUTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "head/head.h"

/* done(arg, rc, r): r is the stored upload's record (rc 0), or rc is the
 * store's error (GPUQ_EIO: nothing was stored). Runs on the committer thread. */
typedef void (*inputs_done_fn)(void *arg, int rc, const struct input_rec *r);

/* Stores len bytes of content_type for tenant_id under a new random id.
 * data must stay valid until done runs. */
void inputs_upload(struct head *h, int64_t tenant_id, const char *content_type,
                   const void *data, size_t len, inputs_done_fn done, void *arg);

/* 0 when every upload params_json names in params.inputs belongs to
 * tenant_id; else GPUQ_ENOENT (or GPUQ_EIO) with field ("params.inputs.NAME")
 * and msg set. */
int inputs_check(struct head *h, int64_t tenant_id, const char *params_json, char *field,
                 size_t fsize, char *msg, size_t msize);

/* Whether a params document may name uploads (cheap: no parse). */
bool inputs_named(const char *params_json);

/* On the committer thread, in the job's insert: links rec to the uploads its
 * params name (GPUQ_ENOENT if one is gone: the job is not stored). */
int inputs_link(struct store *s, const struct job_rec *rec);

/* An upload's record and bytes (*data malloc'd), for an agent. GPUQ_ENOENT if none. */
int inputs_read(struct head *h, const char *id, struct input_rec *r, void **data, size_t *len);

/* From the dispatcher's tick: starts a sweep when one is due and none runs. */
void inputs_tick(struct head *h);

#endif
