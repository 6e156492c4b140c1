/* qc.h: output quality check (R29) — an image whose pixel variance is below a
 * threshold (a solid colour: what a corrupted CUDA context produces) fails. */
#ifndef GPUQ_AGENT_QC_H
#define GPUQ_AGENT_QC_H

#include <stddef.h>

/* qc_png_variance decodes a PNG from memory and gives the variance of its
 * pixels' luminance (0..255 scale). 0, or GPUQ_EINVAL when it is not a PNG we
 * can decode (or larger than 64 megapixels). */
int qc_png_variance(const void *data, size_t len, double *variance);

/* The direct decode alone: 0, or GPUQ_EAGAIN for an input it leaves to
 * libpng (another format, or anything it finds wrong). For the tests: the
 * images runtimes write must take this path. */
int qc_png_variance_direct(const void *data, size_t len, double *variance);

/* The same through libpng's simplified reader alone: the check before the
 * direct decode, kept as the path for other formats and as the tests'
 * reference. */
int qc_png_variance_reference(const void *data, size_t len, double *variance);

#endif
