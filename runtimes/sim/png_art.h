/* png_art.h: the sim runtime's pictures — small, non-trivial PNGs drawn from a
 * seed (so outputs differ per prompt and seed), or one solid colour (the
 * corrupted-context fault that output QC must catch, R29). */
#ifndef GPUQ_SIM_PNG_ART_H
#define GPUQ_SIM_PNG_ART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The drawing's buffers, kept from picture to picture (a zero-duration job
 * should not pay for malloc and fresh pages each time). Zero-initialise. */
struct png_art {
    unsigned char *px; /* the last picture: rows of w*3 RGB bytes */
    size_t px_cap;
    double *colw, *roww, *ring; /* per-column, per-row and ring-wave tables */
    size_t colw_cap, roww_cap, ring_cap;
};

/* png_art_draw draws a w×h picture into a->px, or returns NULL if w or h is
 * out of 1..4096 or memory runs out. The pixels stay valid until the next
 * call; the same arguments always give the same pixels. */
unsigned char *png_art_draw(struct png_art *a, int w, int h, uint64_t seed, bool solid);
void png_art_free(struct png_art *a);

#endif
