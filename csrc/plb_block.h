/* plb_block.h - output buffers that a drain writes and a batch takes over:
 * when the batch is freed its buffer is kept (two spares: the largest and the
 * last smaller one) for the next drain of about its size, so a reader that
 * makes one batch after another writes into the same memory call after call,
 * its pages present (page faults and the spares: plb_block_internal.h). The
 * OrderedReader's merge output.
 *
 * Threads: any thread may free a buffer (a finalizer); the spares are swapped
 * by atomic exchange, never locked.
 */
#ifndef PLB_BLOCK_H
#define PLB_BLOCK_H

#include <stdint.h>

/* Memory for a drain's output, uncleared, 64-byte aligned: a spare when it
 * holds between lo and 2 * size bytes (lo <= size), else new memory of size
 * bytes. *room is set to the bytes it holds (>= lo). NULL with errno ENOMEM
 * when out of memory, EINVAL for size 0 or lo > size. Free it with
 * plb_block_buf_free(). */
uint8_t *plb_block_buf(uint64_t lo, uint64_t size, uint64_t *room);

/* Release memory from plb_block_buf() / plb_block_buf_shrink(): kept as a
 * spare (up to 4 MiB: the larger of it and the large spare stays large, the
 * other becomes the small spare, the small one before it freed). NULL: no-op. */
void plb_block_buf_free(uint8_t *p);

/* Cut p (from plb_block_buf) to its first size bytes, in place where the
 * allocator can: a kept small batch must not pin a large buffer. Returns the
 * pointer that owns them from now on (p, or where the memory moved; p when it
 * cannot shrink). */
uint8_t *plb_block_buf_shrink(uint8_t *p, uint64_t size);

#endif
