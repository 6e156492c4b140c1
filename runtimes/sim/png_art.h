/* png_art.h: the sim runtime's pictures — small, non-trivial PNGs drawn from a
 * seed (so outputs differ per prompt and seed), or one solid colour (the
 * corrupted-context fault that output QC must catch, R29). */
#ifndef GPUQ_SIM_PNG_ART_H
#define GPUQ_SIM_PNG_ART_H

#include <stdbool.h>
#include <stdint.h>

/* png_art_draw draws a w×h picture: rows of w*3 RGB bytes, malloc'd (the
 * caller frees), or NULL if w or h is out of 1..4096 or memory runs out. */
unsigned char *png_art_draw(int w, int h, uint64_t seed, bool solid);

#endif
