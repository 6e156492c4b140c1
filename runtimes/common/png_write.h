/* png_write.h: the PNG writer of the runtimes shipped with gpuq. */
#ifndef GPUQ_RUNTIMES_PNG_WRITE_H
#define GPUQ_RUNTIMES_PNG_WRITE_H

/* Writes w×h 8-bit RGB pixels (rows of w*3 bytes) to path as a PNG, favouring
 * speed: compression level 1 and the Sub filter only (libpng's defaults try
 * every filter on every row at level 6, which costs more than drawing a small
 * picture). Returns 0, or -1 if the file cannot be written. */
int png_write_rgb(const char *path, int w, int h, const unsigned char *px);

#endif
