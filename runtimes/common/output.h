/* output.h: what the runtimes shipped with gpuq share to hand a picture to
 * the agent (docs/protocol-runtime.md: a regular file directly inside the
 * run's output_dir). */
#ifndef GPUQ_RUNTIMES_OUTPUT_H
#define GPUQ_RUNTIMES_OUTPUT_H

#include <stddef.h>
#include <stdio.h>
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

/* A byte buffer a runtime keeps from job to job, so that encoding a result
 * allocates nothing once it has grown to the largest picture. */
struct rt_bytes {
    unsigned char *p;
    size_t len, cap;
};

/* rt_png_stored encodes w×h 8-bit RGB pixels as a PNG into out (replacing its
 * contents) with libpng: filter None and zlib level 0, i.e. stored
 * (uncompressed) deflate blocks, which is also any decoder's cheapest to
 * read. For the sim runtime's noisy pictures a real deflate saved about a
 * quarter of the bytes at 50x the instructions. Returns 0, or -1 (out of
 * memory, bad size). */
int rt_png_stored(struct rt_bytes *out, int w, int h, const unsigned char *px);

/* rt_write_bytes writes len bytes as DIR/ID.png like rt_write_png (hidden
 * temporary file renamed into place). 0, or -1 with errno set. */
int rt_write_bytes(const char *dir, const char *id, const void *data, size_t len, char *path,
                   size_t size);

/* rt_inline_max: the largest result the agent takes inline on the protocol,
 * from $GPUQ_RESULT_INLINE_MAX (docs/protocol-runtime.md); 0 when the agent
 * did not offer it (an older agent): every result goes through a file. */
size_t rt_inline_max(void);

/* rt_emit_inline writes a result whose bytes follow its line, then flushes:
 * {"type":"result","id":ID,"outputs":[{"bytes":LEN,"content_type":CT}],
 * "run_ms":RUN_MS}\n and LEN raw bytes. Only for len <= rt_inline_max().
 * 0, or -1 when stdout failed. */
int rt_emit_inline(FILE *out, const char *id, const char *content_type, int64_t run_ms,
                   const void *data, size_t len);

#endif
