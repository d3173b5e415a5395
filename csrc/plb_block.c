/* plb_block.c - blocks with two spares, and the drains' output buffers built on
 * them (see plb_block_internal.h and plb_block.h). */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "plb_block.h"
#include "plb_block_internal.h"

struct plb_block *plb_block_new(uint64_t bytes)
{
	struct plb_block *blk;
	uint64_t len;

	if (bytes > SIZE_MAX - PLB_BLOCK_HUGE)
		return NULL;
	len = (bytes + PLB_BLOCK_HUGE - 1) & ~(PLB_BLOCK_HUGE - 1);
	/* A little under whole huge pages (no more than an eighth to spare): a mapping of its own. */
	if (bytes >= PLB_BLOCK_HUGE - PLB_BLOCK_HUGE / 8 && len - bytes <= len / 8) {
		uint8_t *map = mmap(NULL, len + PLB_BLOCK_HUGE, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (map != MAP_FAILED) {
			/* the huge-page-aligned len bytes inside; the rest unmapped */
			uint8_t *at = (uint8_t *)(((uintptr_t)map + PLB_BLOCK_HUGE - 1) &
						  ~(uintptr_t)(PLB_BLOCK_HUGE - 1));

			if (at > map)
				munmap(map, (size_t)(at - map));
			if (map + len + PLB_BLOCK_HUGE > at + len)
				munmap(at + len, (size_t)(map + len + PLB_BLOCK_HUGE - (at + len)));
			(void)madvise(at, len, MADV_HUGEPAGE); /* advice: refused or ignored is fine */
			blk = (struct plb_block *)at;
			blk->bytes = len;
			blk->mapped = len;
			return blk;
		}
	}
	if (posix_memalign((void **)&blk, PLB_BLOCK_ALIGN, bytes))
		return NULL;
	blk->bytes = bytes;
	blk->mapped = 0;
	return blk;
}

void plb_block_free(struct plb_block *blk)
{
	if (blk && blk->mapped)
		munmap(blk, blk->mapped);
	else
		free(blk);
}

/* Cut blk to its first bytes bytes (head included): malloc's shrink in place,
 * or the whole pages past them unmapped. Returns the block to use from now on
 * (blk itself, or where realloc moved it; blk unchanged when it cannot). */
static struct plb_block *block_shrink(struct plb_block *blk, uint64_t bytes)
{
	struct plb_block *smaller;

	if (bytes < sizeof(*blk) || bytes >= blk->bytes)
		return blk;
	if (blk->mapped) {
		uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
		uint64_t keep = (bytes + page - 1) & ~(page - 1);

		/* whole pages only; munmap may split a huge page, the rest stays mapped */
		if (keep < blk->mapped && !munmap((uint8_t *)blk + keep, (size_t)(blk->mapped - keep)))
			blk->mapped = blk->bytes = keep;
		return blk;
	}
	/* glibc shrinks in place (splits the chunk, no copy); a failed realloc leaves blk as it was */
	smaller = realloc(blk, (size_t)bytes);
	if (!smaller)
		return blk;
	smaller->bytes = bytes;
	return smaller;
}

void plb_block_put(struct plb_spare *spare, struct plb_block *blk)
{
	struct plb_block *old, *expect = blk;

	if (blk->bytes > PLB_BLOCK_SPARE_MAX) {
		plb_block_free(blk);
		return;
	}
	old = __atomic_exchange_n(&spare->large, blk, __ATOMIC_ACQ_REL);
	if (!old)
		return;
	/* old was larger: put it back unless another thread took or replaced blk meanwhile */
	if (old->bytes > blk->bytes &&
	    __atomic_compare_exchange_n(&spare->large, &expect, old, 0, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE))
		old = blk;
	/* the other one is the small spare; the small one before it goes */
	plb_block_free(__atomic_exchange_n(&spare->small, old, __ATOMIC_ACQ_REL));
}

static int fits(const struct plb_block *blk, uint64_t lo, uint64_t hi)
{
	return blk && blk->bytes >= lo && blk->bytes <= hi;
}

struct plb_block *plb_block_take(struct plb_spare *spare, uint64_t lo, uint64_t hi)
{
	struct plb_block *small = __atomic_exchange_n(&spare->small, NULL, __ATOMIC_ACQ_REL);
	struct plb_block *large, *blk = NULL;

	if (fits(small, lo, hi))
		return small;
	large = __atomic_exchange_n(&spare->large, NULL, __ATOMIC_ACQ_REL);
	if (fits(large, lo, hi)) {
		blk = large;
		large = NULL;
	}
	/* the others back, the larger first, so each returns to where it was */
	if (large)
		plb_block_put(spare, large);
	if (small)
		plb_block_put(spare, small);
	return blk;
}

void plb_block_spare_free(struct plb_spare *spare)
{
	plb_block_free(__atomic_exchange_n(&spare->large, NULL, __ATOMIC_ACQ_REL));
	plb_block_free(__atomic_exchange_n(&spare->small, NULL, __ATOMIC_ACQ_REL));
}

/* --- the drains' output buffers: a block, its data after a head of one cache line --- */

#define BUF_HEAD ((uint64_t)PLB_BLOCK_ALIGN)
_Static_assert(sizeof(struct plb_block) <= PLB_BLOCK_ALIGN, "a buffer's head is one cache line");

static struct plb_spare buf_spare;

static struct plb_block *buf_block(uint8_t *p)
{
	return (struct plb_block *)(p - BUF_HEAD);
}

uint8_t *plb_block_buf(uint64_t lo, uint64_t size, uint64_t *room)
{
	struct plb_block *blk;

	if (!size || lo > size || size > UINT64_MAX / 4) {
		errno = EINVAL;
		return NULL;
	}
	blk = plb_block_take(&buf_spare, BUF_HEAD + lo, BUF_HEAD + 2 * size);
	if (!blk && !(blk = plb_block_new(BUF_HEAD + size))) {
		errno = ENOMEM;
		return NULL;
	}
	*room = blk->bytes - BUF_HEAD;
	return (uint8_t *)blk + BUF_HEAD;
}

void plb_block_buf_free(uint8_t *p)
{
	if (p)
		plb_block_put(&buf_spare, buf_block(p));
}

uint8_t *plb_block_buf_shrink(uint8_t *p, uint64_t size)
{
	if (!p)
		return p;
	return (uint8_t *)block_shrink(buf_block(p), BUF_HEAD + (size ? size : 1)) + BUF_HEAD;
}
