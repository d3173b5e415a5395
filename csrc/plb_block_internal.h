/* plb_block_internal.h - blocks of memory made by one side and freed by
 * another, each kind with one spare kept for its next allocation (C only;
 * the Python-facing buffers built on them are in plb_block.h).
 *
 * A drain that hands its output to a consumer (a RecordBatch's columns, an
 * ordered batch's records) allocates a new block per call and the consumer
 * frees the old one, usually just before the next call. malloc alone did not
 * give that memory back: in a new process the first several large blocks
 * each came as fresh pages (a page fault every 4 KiB: 1.8 us each on this
 * guest, ~0.8 ms for 2 MiB), as smaller allocations took over the freed ones.
 * The spare keeps two released blocks for the next allocations of about their
 * sizes: the largest released lately, and the last one released that was
 * smaller than it. Memory already present, and often still in cache. Two,
 * because a drain's sizes come in two kinds: full drains, and the one a
 * round ends with, cut short by the ring (read_arrow's last call of a round
 * at 32 B: 650 KiB beside 2 MiB blocks). With one pointer the short block was
 * freed whenever the large one was parked, and malloc gave the next one fresh
 * pages (163 faults, ~8% of such a round) until its heap settled.
 *
 * Each of the two is a pointer swapped by atomic exchange: a block may be
 * released on any thread (a finalizer), and a fork meanwhile cannot leave a
 * lock held. A race may free a block that could have been kept, never lose or
 * share one. The blocks of a new process after fork() are the parent's, copied
 * on write like the rest of its memory.
 *
 * A block of a little under a whole number of huge pages (2 MiB on x86-64) is
 * a mapping of its own, aligned to and advised for transparent huge pages:
 * its first touch is one page fault instead of 512 (0.8-1.6 ms in 4 KiB pages
 * against ~0.11 ms as one huge page here). Where huge pages are off the advice
 * is ignored and the mapping is ordinary pages.
 */
#ifndef PLB_BLOCK_INTERNAL_H
#define PLB_BLOCK_INTERNAL_H

#include <stdint.h>

/* The head of every block (a user's own head embeds it first). */
struct plb_block {
	uint64_t bytes;  /* the block's size, head included */
	uint64_t mapped; /* a mapping of its own (plb_block_new): its length; else 0 (malloc) */
};

#define PLB_BLOCK_ALIGN 64                  /* cache line; Arrow's buffer alignment */
#define PLB_BLOCK_HUGE ((uint64_t)2 << 20)  /* the transparent huge page of x86-64 */
#define PLB_BLOCK_SPARE_MAX ((uint64_t)4 << 20) /* larger blocks are never kept */

/* A block of bytes bytes (head included, bytes >= sizeof(struct plb_block)),
 * PLB_BLOCK_ALIGN-aligned, uncleared; NULL when out of memory. */
struct plb_block *plb_block_new(uint64_t bytes);

/* Free a block (NULL: no-op). */
void plb_block_free(struct plb_block *blk);

/* One kind of block's spare: the largest released lately, and the last
 * released block that was smaller than it. Static storage, zeroed: empty. */
struct plb_spare {
	struct plb_block *large;
	struct plb_block *small;
};

/* Park a released block in spare, or free it: of it and the large spare the
 * larger stays large and the other becomes the small spare (freeing the small
 * one before it); a block above PLB_BLOCK_SPARE_MAX is freed. */
void plb_block_put(struct plb_spare *spare, struct plb_block *blk);

/* A spare block whose size is within [lo, hi], the small one first (it is
 * then no longer a spare), else NULL (the spares stay). */
struct plb_block *plb_block_take(struct plb_spare *spare, uint64_t lo, uint64_t hi);

/* Free both spare blocks (tests; a process keeps its spares until exit). */
void plb_block_spare_free(struct plb_spare *spare);

#endif
