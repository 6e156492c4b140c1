/* output.h: what the runtimes shipped with gpuq share to hand a picture to
 * the agent (docs/protocol-runtime.md: a regular file directly inside the
 * run's output_dir). */
#ifndef GPUQ_RUNTIMES_OUTPUT_H
#define GPUQ_RUNTIMES_OUTPUT_H

#include <stddef.h>
#include <stdint.h>

#define RT_OUTPUT_ID_MAX 128

/* FNV-1a of a string (NULL hashes as ""): prompts and model names to seeds. */
uint64_t rt_hash_str(const char *s);

/* Writes w×h 8-bit RGB pixels (rows of w*3 bytes) as DIR/ID.png, ID made
 * filename-safe, through a hidden temporary file renamed into place so the
 * agent never reads half a file. The PNG favours speed (compression level 1,
 * Sub filter only). path gets the final path, also on failure. Returns 0, or
 * -1 with errno set. */
int rt_write_png(const char *dir, const char *id, int w, int h, const unsigned char *px,
                 char *path, size_t size);

#endif
