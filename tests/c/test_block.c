/* test_block.c - blocks with two spares (csrc/plb_block.c): the drains' output
 * buffers come back to the next allocation of about their size, never to one
 * they are too small or far too large for; shrinking keeps the prefix and
 * gives the rest back (a mapping's tail pages unmapped); a block of about a
 * huge page is a mapping of its own; bad sizes fail with EINVAL. Every block
 * is written whole (ASan checks the bounds) and the spares are emptied at the
 * end, so ASan's leak check sees every block freed. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "../../csrc/plb_block.c"

static uint8_t *buf(uint64_t lo, uint64_t size, uint64_t *room)
{
	uint8_t *p = plb_block_buf(lo, size, room);

	CHECK(p && *room >= lo);
	CHECK((uintptr_t)p % PLB_BLOCK_ALIGN == 0);
	memset(p, 0x5a, *room); /* all of it is the caller's (ASan) */
	return p;
}

static void empty_spare(void)
{
	plb_block_spare_free(&buf_spare);
	CHECK(buf_spare.large == NULL && buf_spare.small == NULL);
}

static void test_spare(void)
{
	uint64_t room, room2;
	uint8_t *a, *b, *c, *big;

	a = buf(1000, 4000, &room);
	CHECK(room == 4000);
	plb_block_buf_free(a);
	CHECK(buf_spare.large == buf_block(a) && buf_spare.small == NULL);
	CHECK(buf(3000, 4000, &room2) == a && room2 == 4000); /* the same memory again */
	CHECK(buf_spare.large == NULL);
	plb_block_buf_free(a);
	CHECK(buf(2000, 2500, &room2) == a && room2 == 4000); /* up to twice the size: reused */
	plb_block_buf_free(a);
	b = buf(4001, 5000, &room2);                           /* it holds less than lo: new */
	CHECK(b != a && room2 == 5000 && buf_spare.large == buf_block(a));
	plb_block_buf_free(b);                                 /* the larger one is the large spare */
	CHECK(buf_spare.large == buf_block(b) && buf_spare.small == buf_block(a));
	CHECK(buf(3000, 4000, &room2) == a);                   /* the small one first, when it fits */
	CHECK(buf(4500, 5000, &room2) == b);                   /* then the large one */
	CHECK(buf_spare.large == NULL && buf_spare.small == NULL);
	plb_block_buf_free(a);
	plb_block_buf_free(b);                                 /* larger: a moves to small */
	CHECK(buf_spare.large == buf_block(b) && buf_spare.small == buf_block(a));
	c = buf(100, 1000, &room2);                            /* far smaller than both: new memory */
	CHECK(room2 == 1000 && buf_spare.large == buf_block(b) && buf_spare.small == buf_block(a));
	plb_block_buf_free(c);                                 /* the small spare now; a freed */
	CHECK(buf_spare.large == buf_block(b) && buf_spare.small == buf_block(c));
	big = buf(PLB_BLOCK_SPARE_MAX, PLB_BLOCK_SPARE_MAX, &room2); /* too large to keep */
	plb_block_buf_free(big);
	CHECK(buf_spare.large == buf_block(b) && buf_spare.small == buf_block(c));
	CHECK(buf(4500, 5000, &room2) == b);                   /* the small one did not fit: put back */
	CHECK(buf_spare.large == buf_block(c) && buf_spare.small == NULL); /* the largest parked */
	plb_block_buf_free(b);
	CHECK(buf_spare.large == buf_block(b) && buf_spare.small == buf_block(c));
	plb_block_buf_free(NULL);                              /* a no-op */
	empty_spare();
}

static void test_shrink(void)
{
	uint64_t room, room2;
	uint8_t *p, *q;

	p = buf(1 << 20, 1 << 20, &room);
	for (int i = 0; i < 100; i++)
		p[i] = (uint8_t)i;
	q = plb_block_buf_shrink(p, 100);
	CHECK(q && buf_block(q)->bytes == BUF_HEAD + 100);
	for (int i = 0; i < 100; i++)
		CHECK(q[i] == (uint8_t)i);
	plb_block_buf_free(q);
	CHECK(buf(50, 100, &room2) == q && room2 == 100); /* parked at its new size */
	CHECK(plb_block_buf_shrink(q, 1000) == q && buf_block(q)->bytes == BUF_HEAD + 100); /* no growing */
	plb_block_buf_free(plb_block_buf_shrink(q, 0));
	CHECK(plb_block_buf_shrink(NULL, 10) == NULL);
	empty_spare();
}

/* About a huge page: a mapping of its own, aligned to it; shrinking unmaps
 * the whole pages past what is kept (mincore: ENOMEM there), and the block
 * is parked at its new length. Just over a huge page (most of a second one
 * would be wasted) and small blocks come from malloc. */
static void test_mapped(void)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), room;
	unsigned char vec[1];
	struct plb_block *blk;
	uint8_t *p;

	p = buf(PLB_BLOCK_HUGE - BUF_HEAD, PLB_BLOCK_HUGE - BUF_HEAD, &room);
	blk = buf_block(p);
	CHECK(blk->mapped == PLB_BLOCK_HUGE && (uintptr_t)blk % PLB_BLOCK_HUGE == 0);
	p[0] = 7;
	p = plb_block_buf_shrink(p, 3 * page);
	CHECK(buf_block(p) == blk && blk->mapped == 4 * page && blk->bytes == 4 * page);
	CHECK(p[0] == 7);
	CHECK(mincore((uint8_t *)blk + 3 * page, page, vec) == 0);
	CHECK(mincore((uint8_t *)blk + 4 * page, page, vec) == -1 && errno == ENOMEM);
	plb_block_buf_free(p);
	CHECK(buf_spare.large == blk);
	empty_spare();
	CHECK(mincore(blk, page, vec) == -1 && errno == ENOMEM); /* unmapped when freed */

	p = buf(1, PLB_BLOCK_HUGE, &room); /* with its head, just over a huge page */
	CHECK(buf_block(p)->mapped == 0);
	plb_block_buf_free(p);
	empty_spare();
}

static void test_bad_sizes(void)
{
	uint64_t room = 77;

	errno = 0;
	CHECK(plb_block_buf(0, 0, &room) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(plb_block_buf(200, 100, &room) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(plb_block_buf(1, UINT64_MAX / 2, &room) == NULL && errno == EINVAL);
	CHECK(room == 77);
}

int main(void)
{
	test_spare();
	test_shrink();
	test_mapped();
	test_bad_sizes();
	printf("test_block: ok\n");
	return 0;
}
