/* qc.h: output quality check (R29) — an image whose pixel variance is below a
 * threshold (a solid colour: what a corrupted CUDA context produces) fails. */
#ifndef GPUQ_AGENT_QC_H
#define GPUQ_AGENT_QC_H

#include <stddef.h>

/* qc_png_variance decodes a PNG from memory with libpng and gives the
 * variance of its pixels' luminance (0..255 scale). 0, or GPUQ_EINVAL when
 * it is not a PNG libpng decodes (truncated, a CRC or zlib check failing, a
 * header that does not match the data) or it is larger than 64 megapixels. */
int qc_png_variance(const void *data, size_t len, double *variance);

#endif
