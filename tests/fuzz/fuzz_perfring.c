/* fuzz_perfring.c - libFuzzer target: the perf ring cursor (plb_perfring_*)
 * alone, over a synthetic struct perf_event_mmap_page + data area.
 *
 * The input chooses the ring size (8 B .. 4 KiB), data_tail/data_head (biased
 * to the 2^32 and 2^64 wraps; aligned and honest, or anything), the records a
 * kernel-like producer writes (sizes up to the whole ring, so they wrap at
 * every offset; published in batches, sometimes late), raw garbage headers,
 * and the cursor calls in any order: refresh, peek_header, peek, advance,
 * skip_to_head, commit and reads of any span.
 *
 * What is checked, besides ASan/UBSan on every access:
 *   - peek_header/peek against the contract in plb_perfring.h: EMPTY exactly
 *     when tail == cached head; CORRUPT exactly for pending bytes that cannot
 *     hold a header, more than the ring, or a size that is < 8, not a multiple
 *     of 8 or beyond the cached head; otherwise RECORD with the header's
 *     fields, bytes pointing into the ring exactly when the record does not
 *     wrap, and (peek) a contiguous copy with the ring's bytes otherwise;
 *   - refresh, pending and commit keep head, tail, committed and data_tail
 *     consistent; plb_perfring_read copies the ring's bytes, wrapping;
 *   - with an honest producer, every published record is seen in order with
 *     its bytes, and a final walk empties the ring.
 */
#include "plb_perfring.c"
#include "fuzz_common.h"

#define MAX_RECS 1024

struct prec {
	uint64_t pos;
	uint32_t type, seq;
	uint16_t misc, size;
};

struct harness {
	struct plb_perfring r;
	struct perf_event_mmap_page *page;
	uint8_t *data;
	uint64_t size, mask;
	uint64_t wpos;          /* producer position, published or not */
	int honest_pos;         /* the positions are the producer's: it may write */
	int exact;              /* ...and every record is in recs[] */
	unsigned nrecs;
	unsigned npub;          /* recs[0, npub) published (below data_head) */
	unsigned ncached;       /* recs[0, ncached) below the cursor's cached head */
	unsigned cur;           /* recs[cur] is at the cursor's tail */
	uint32_t seq;
	struct prec recs[MAX_RECS]; /* last: not cleared per input */
};

static struct harness H;
static uint8_t buf[1 << 13];

/* The ring's bytes from pos, wrapping, as the reference copy. */
static void ring_get(uint64_t pos, uint8_t *dst, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		dst[i] = H.data[(pos + i) & H.mask];
}

static void ring_put(uint64_t pos, const uint8_t *src, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		H.data[(pos + i) & H.mask] = src[i];
}

static void publish(void)
{
	__atomic_store_n(&H.page->data_head, H.wpos, __ATOMIC_RELEASE);
	H.npub = H.nrecs;
}

/* One record where the kernel would write it (room below data_tail), or a
 * garbage header. */
static void produce(struct fz *f)
{
	uint8_t b = fz_u8(f);
	uint64_t size = (b & 0x80) ? 8 * (1 + (uint64_t)fz_u16(f) % (H.size / 8))
				   : 8 * (1 + (uint64_t)(b & 15));
	uint64_t tail = __atomic_load_n(&H.page->data_tail, __ATOMIC_ACQUIRE);
	struct perf_event_header h;
	struct prec *p;

	if (size > 0xfff8 || H.size - (H.wpos - tail) < size || H.nrecs == MAX_RECS)
		return;
	if ((b & 0x70) == 0x70) {
		fz_bytes(f, &h, sizeof(h)); /* any header at all */
		ring_put(H.wpos, (const uint8_t *)&h, sizeof(h));
		H.wpos += size;
		H.exact = 0;
		return;
	}
	p = &H.recs[H.nrecs++];
	p->pos = H.wpos;
	p->type = fz_u8(f);
	p->misc = fz_u8(f);
	p->size = (uint16_t)size;
	p->seq = H.seq++;
	h.type = p->type;
	h.misc = p->misc;
	h.size = p->size;
	memcpy(buf, &h, sizeof(h));
	for (uint64_t i = sizeof(h); i < size; i++)
		buf[i] = pat(p->seq, (uint32_t)i);
	ring_put(H.wpos, buf, size);
	H.wpos += size;
}

/* peek_header (or peek) at the cursor, checked. Returns its result. */
static int check_peek(int full, struct plb_perf_rec *rec)
{
	struct plb_perfring *r = &H.r;
	uint64_t avail = r->head - r->tail, off = r->tail & H.mask;
	struct perf_event_header h;
	int rc;

	memset(rec, 0xee, sizeof(*rec));
	rc = full ? plb_perfring_peek(r, rec) : plb_perfring_peek_header(r, rec);
	CHECK(rc != -ENOMEM);
	if (avail == 0) {
		CHECK(rc == PLB_PR_EMPTY);
		CHECK(!H.exact || H.cur == H.ncached);
		return rc;
	}
	if (avail > H.size || avail < sizeof(h)) {
		CHECK(rc == PLB_PR_CORRUPT);
		CHECK(!H.exact);
		return rc;
	}
	ring_get(r->tail, (uint8_t *)&h, sizeof(h));
	if (h.size < sizeof(h) || (h.size & 7) || h.size > avail) {
		CHECK(rc == PLB_PR_CORRUPT);
		CHECK(!H.exact);
		return rc;
	}
	CHECK(rc == PLB_PR_RECORD);
	CHECK(rec->pos == r->tail && rec->type == h.type && rec->misc == h.misc &&
	      rec->size == h.size);
	if (off + h.size <= H.size) {
		CHECK(rec->bytes == H.data + off && !rec->copied);
	} else if (!full) {
		CHECK(rec->bytes == NULL && !rec->copied);
	} else {
		/* A wrapping record, copied once into the cursor's scratch. */
		CHECK(rec->copied && rec->bytes == r->scratch && r->scratch_cap >= h.size);
	}
	if (rec->bytes) {
		ring_get(r->tail, buf, h.size);
		CHECK(!memcmp(rec->bytes, buf, h.size));
	}
	if (H.exact) {
		const struct prec *p = &H.recs[H.cur];

		CHECK(H.cur < H.ncached);
		CHECK(p->pos == rec->pos && p->type == rec->type && p->misc == rec->misc &&
		      p->size == rec->size);
		for (uint32_t i = sizeof(h); rec->bytes && i < p->size; i++)
			CHECK(rec->bytes[i] == pat(p->seq, i));
	}
	return rc;
}

static void advance(const struct plb_perf_rec *rec)
{
	plb_perfring_advance(&H.r, rec);
	CHECK(H.r.tail == rec->pos + rec->size);
	if (H.exact)
		H.cur++;
}

static void refresh(void)
{
	uint64_t pend = plb_perfring_refresh(&H.r);

	CHECK(H.r.head == H.page->data_head);
	CHECK(pend == H.r.head - H.r.tail && pend == plb_perfring_pending(&H.r));
	H.ncached = H.npub;
}

static void commit(void)
{
	plb_perfring_commit(&H.r);
	CHECK(H.page->data_tail == H.r.tail && H.r.committed == H.r.tail);
}

/* plb_perfring_read of any span no longer than the ring. */
static void read_span(struct fz *f)
{
	uint8_t b = fz_u8(f);
	uint64_t pos = (b & 1) ? fz_u64(f) : H.r.tail + fz_u16(f) % (H.size + 1);
	uint64_t len = fz_u16(f) % (H.size + 1);
	uint8_t *dst = malloc(len ? len : 1); /* exact: an overrun is a report */

	CHECK(dst);
	plb_perfring_read(&H.r, pos, dst, len);
	ring_get(pos, buf, len);
	CHECK(!memcmp(dst, buf, len));
	free(dst);
}

/* Bad arguments to init are refused. */
static void check_init_args(void)
{
	struct plb_perfring r;
	struct perf_event_mmap_page page;
	uint8_t d[16];

	memset(&page, 0, sizeof(page));
	CHECK(plb_perfring_init(&r, NULL, d, 16) == -EINVAL);
	CHECK(plb_perfring_init(&r, &page, NULL, 16) == -EINVAL);
	CHECK(plb_perfring_init(&r, &page, d, 12) == -EINVAL);
	CHECK(plb_perfring_init(&r, &page, d, 4) == -EINVAL);
	CHECK(plb_perfring_init(&r, &page, d, 0) == -EINVAL);
	CHECK(plb_perfring_init(&r, &page, d, 16) == 0);
	plb_perfring_release(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = { data, size };
	uint8_t b = fz_u8(&f);
	uint64_t tail = fz_pos(&f);
	struct plb_perf_rec rec;
	unsigned nops = 0;

	memset(&H, 0, offsetof(struct harness, recs));
	H.size = 8ull << (b % 10);
	H.mask = H.size - 1;
	H.exact = H.honest_pos = !(b & 0x10);
	H.page = calloc(1, sizeof(*H.page));
	H.data = malloc(H.size);
	CHECK(H.page && H.data);
	if (H.exact) {
		tail &= ~(uint64_t)7;
		memset(H.data, 0, H.size);
		H.page->data_head = tail;
	} else {
		fz_bytes(&f, H.data, H.size);
		H.page->data_head = (b & 0x20) ? fz_pos(&f) : tail + fz_u16(&f);
	}
	H.page->data_tail = tail;
	H.wpos = tail;
	if (b & 0x40)
		check_init_args();

	CHECK(plb_perfring_init(&H.r, H.page, H.data, H.size) == 0);
	CHECK(H.r.tail == tail && H.r.committed == tail &&
	      H.r.head == H.page->data_head && H.r.mask == H.mask);

	while (fz_more(&f) && nops++ < 256) {
		switch (fz_u8(&f) % 9) {
		case 0:
			if (H.honest_pos) {
				for (unsigned k = 1 + fz_u8(&f) % 4; k; k--)
					produce(&f);
				if (fz_u8(&f) & 3) /* sometimes held back: a stale head */
					publish();
			}
			break;
		case 1:
			refresh();
			break;
		case 2:
		case 3:
			if (check_peek(0, &rec) == PLB_PR_RECORD && (fz_u8(&f) & 1))
				advance(&rec);
			break;
		case 4:
		case 5:
			if (check_peek(1, &rec) == PLB_PR_RECORD && (fz_u8(&f) & 3))
				advance(&rec);
			break;
		case 6:
			plb_perfring_skip_to_head(&H.r);
			CHECK(H.r.tail == H.r.head && plb_perfring_pending(&H.r) == 0);
			H.cur = H.ncached;
			break;
		case 7:
			commit();
			break;
		default:
			read_span(&f);
			break;
		}
	}

	/* The end: with an honest producer, a walk sees the rest and empties
	 * the ring. */
	if (H.exact) {
		publish();
		refresh();
		while (check_peek(1, &rec) == PLB_PR_RECORD)
			advance(&rec);
		commit();
		CHECK(H.cur == H.nrecs);
		CHECK(H.page->data_tail == H.page->data_head);
	}
	plb_perfring_release(&H.r);
	plb_perfring_release(&H.r); /* idempotent */
	CHECK(H.r.scratch == NULL && H.r.scratch_cap == 0);
	free(H.page);
	free(H.data);
	return 0;
}
