/* render.h: human-readable output of the API's objects: a job, tables of
 * jobs, tenants and workers, and the one-line progress of a job being waited
 * for. Tolerant of missing fields (prints "-"), since the server may add or
 * omit optional ones. */
#ifndef GPUQ_CLI_RENDER_H
#define GPUQ_CLI_RENDER_H

#include <jansson.h>
#include <stdio.h>

/* render_str returns obj[key] as a string ("17" for the number 17) in buf,
 * or "-" when absent or null. */
const char *render_str(const json_t *obj, const char *key, char *buf, size_t len);

/* render_num gives obj[key] as a number; 0 when present, GPUQ_ENOENT if not. */
int render_num(const json_t *obj, const char *key, double *out);

void render_job(FILE *f, const json_t *job);
void render_jobs_table(FILE *f, const json_t *jobs);
void render_tenants_table(FILE *f, const json_t *tenants);
void render_workers_table(FILE *f, const json_t *workers);

/* render_progress writes "job ID: STATE[ (PHASE)][ N%]" and, while queued,
 * the estimated start, into out. */
void render_progress(const json_t *job, char *out, size_t len);

/* render_bar: " [#####.....] 50%" for a running job with progress, else "". */
void render_bar(const json_t *job, char *out, size_t len);

#endif
