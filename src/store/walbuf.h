/* walbuf.h: a SQLite VFS that gathers the writes to a WAL file and hands
 * them to the file together when SQLite syncs it.
 *
 * SQLite writes each WAL frame as two writes (its 24-byte header, then the
 * page), so a commit of 7 pages costs 14 write calls before its fsync; on
 * the 2-core project machine those were about a tenth of the committer's
 * CPU a job (bench/README.md, "Fewer wake-ups a job, and one write a
 * commit"). Through this VFS the frames of a commit go to the file just
 * before its sync, in one write for up to WALBUF_CHUNK bytes.
 *
 * Only the WAL file is buffered; every other file, and every other call,
 * goes straight to the VFS underneath. The buffer is written to the file
 * before anything that could look at the file's bytes (a read, a size, a
 * truncation, a sync, a memory map, the close), and whenever a write does
 * not follow the buffered bytes or would overflow WALBUF_BYTES.
 *
 * Only for a writer whose every commit syncs the WAL (synchronous=FULL or
 * EXTRA): SQLite shows a commit's frames to other connections after the
 * commit's sync, so by then they are in the file. With synchronous=NORMAL a
 * commit does not sync, and another connection could read frames still in
 * the buffer. A write that fails when the buffer goes to the file fails the
 * call that caused it (for a commit, its sync, with the write's error:
 * SQLITE_FULL or SQLITE_IOERR_WRITE), and the buffer is dropped: SQLite then
 * abandons the transaction as it would after a failed write. */
#ifndef GPUQ_STORE_WALBUF_H
#define GPUQ_STORE_WALBUF_H

/* The most bytes one WAL file holds back (about 250 frames of 4 KiB), and
 * the most it hands the file in one write (a commit of up to 15 frames of
 * 4 KiB goes in one). */
#define WALBUF_BYTES (1 << 20)
#define WALBUF_CHUNK (64 << 10)

/* walbuf_register makes a VFS named `name` over the registered VFS `under`
 * (NULL: the default one), without making it the default. Returns 0, or a
 * SQLite error code (SQLITE_ERROR when `under` is not registered). Calling
 * it again with a name already registered returns 0 and changes nothing. */
int walbuf_register(const char *name, const char *under);

#endif
