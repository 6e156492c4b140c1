/* output.h: what the runtimes shipped with gpuq share to hand a picture to
 * the agent (docs/protocol-runtime.md): encoded into memory once, then either
 * inline on the protocol (small results) or a regular file directly inside
 * the run's output_dir. */
#ifndef GPUQ_RUNTIMES_OUTPUT_H
#define GPUQ_RUNTIMES_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#define RT_OUTPUT_ID_MAX 128

/* FNV-1a of a string (NULL hashes as ""): prompts and model names to seeds. */
uint64_t rt_hash_str(const char *s);

/* A byte buffer a runtime keeps from job to job, so that encoding a result
 * allocates nothing once it has grown to the largest picture. */
struct rt_bytes {
    unsigned char *p;
    size_t len, cap;
};

/* How hard rt_png_encode works. Each runtime picks what suits its pictures:
 * RT_PNG_STORED (zlib level 0, filter None: stored deflate blocks) for the
 * sim runtime's noise, where a real deflate saved about a quarter of the
 * bytes at 50x the instructions; RT_PNG_FAST (level 1, Sub filter on every
 * row) for the CUDA runtime's smooth colour bands, which a cheap deflate
 * shrinks well. libpng's own default (every filter tried on every row, at
 * level 6) costs more than drawing the picture. */
struct rt_png_how {
    int zlib_level; /* 0..9 */
    bool sub_filter; /* the Sub filter on every row, else None */
};
#define RT_PNG_STORED ((struct rt_png_how){.zlib_level = 0, .sub_filter = false})
#define RT_PNG_FAST ((struct rt_png_how){.zlib_level = 1, .sub_filter = true})

/* rt_png_encode encodes w×h 8-bit RGB pixels (rows of w*3 bytes, 1..16384
 * each way) as a PNG into out, replacing its contents, with libpng as `how`
 * says. One encoder for every runtime and both ways a result leaves
 * (inline on the protocol, or rt_write_bytes into a file). Returns 0, or -1
 * (out of memory, bad size or settings). */
int rt_png_encode(struct rt_bytes *out, int w, int h, const unsigned char *px,
                  struct rt_png_how how);

/* rt_write_bytes writes len bytes (an encoded PNG) as DIR/ID.png, ID made
 * filename-safe, through a hidden temporary file renamed into place so the
 * agent never reads half a file. path gets the final path, also on failure.
 * 0, or -1 with errno set. */
int rt_write_bytes(const char *dir, const char *id, const void *data, size_t len, char *path,
                   size_t size);

/* rt_inline_max: the largest result the agent takes inline on the protocol,
 * from $GPUQ_RESULT_INLINE_MAX (docs/protocol-runtime.md); 0 when the agent
 * did not offer it (an older agent): every result goes through a file. */
size_t rt_inline_max(void);

/* rt_emit_inline writes a result whose bytes follow its line:
 * {"type":"result","id":ID,"outputs":[{"bytes":LEN,"content_type":CT}],
 * "run_ms":RUN_MS}\n and LEN raw bytes, in one write to out's descriptor
 * after flushing what out holds. Only for len <= rt_inline_max().
 * 0, or -1 when stdout failed. */
int rt_emit_inline(FILE *out, const char *id, const char *content_type, int64_t run_ms,
                   const void *data, size_t len);

#endif
