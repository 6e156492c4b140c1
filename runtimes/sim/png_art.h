/* png_art.h: the sim runtime's pictures — small, non-trivial PNGs drawn from a
 * seed (so outputs differ per prompt and seed), or one solid colour (the
 * corrupted-context fault that output QC must catch, R29). */
#ifndef GPUQ_SIM_PNG_ART_H
#define GPUQ_SIM_PNG_ART_H

#include <stdbool.h>
#include <stdint.h>

/* png_art_write draws a w×h RGB picture into path (written to path.tmp, then
 * renamed). Returns 0 or -1 with errno-like failure logged by the caller. */
int png_art_write(const char *path, int w, int h, uint64_t seed, bool solid);

#endif
