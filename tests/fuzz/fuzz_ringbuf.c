/* fuzz_ringbuf.c - libFuzzer target: the BPF ring buffer walker
 * (plb_rb_peek, plb_rb_read, plb_rb_commit) over a synthetic ring built from
 * the input.
 *
 * The input chooses the ring size (1 B to 4 pages), the starting consumer
 * position (biased to the 2^32 and 2^64 wraps), the records a kernel-like
 * producer writes (any length, committed, BUSY or DISCARD), optionally raw
 * garbage headers and inconsistent positions, then a sequence of reads
 * (random max_records, out_cap, consume), peeks, more production and late
 * commits of busy records.
 *
 * What is checked, besides ASan/UBSan on every access:
 *   - plb_rb_peek against the documented contract: EMPTY exactly at the
 *     producer position; a RECORD or DISCARD only at an 8-aligned position
 *     within [consumer, producer), whose 8-aligned footprint ends at or below
 *     the producer and inside the double mapping; BUSY only for a BUSY header;
 *     CORRUPT only for a position or length that cannot be a record;
 *   - plb_rb_read against a walk of plb_rb_peek following plb_ringbuf.h (same
 *     count, records, bytes, layout of starts/lens/out_used, error codes);
 *     some consuming reads go through RingBuffer's drain (plb_batch_read_rb)
 *     instead, checked against the same walk (uniform batches included);
 *   - the consumer position: unchanged by a peek; after a consuming read it
 *     moved forward by a multiple of 8 and never past the producer;
 *   - when the ring is exactly what the producer wrote ("exact"), every
 *     committed record is delivered once, in order, with its bytes; nothing
 *     is ever reported corrupt; and a final drain empties the ring.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "plb_batch.c"
#include "plb_ringbuf.c"
#include "fuzz_common.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- the ring's memory ----
 * Two layouts, both 2 * size readable bytes with data[i + size] == data[i]:
 *  - mirrored: one malloc of exactly 2 * size (sizes below a page), every
 *    write stored in both halves; ASan's redzones catch a read past an end;
 *  - double-mapped: a memfd mapped twice back to back, as the kernel's vmap
 *    does, between two PROT_NONE guard pages that fault on a read past either
 *    end. Made once per size and reused: an mmap per input would dominate. */

#define NMAPPED 3
static uint8_t *mapped[NMAPPED];

static uint8_t *mapped_get(unsigned k, size_t size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint8_t *region;
	int fd;

	if (mapped[k])
		return mapped[k];
	fd = memfd_create("plb-fuzz-ring", MFD_CLOEXEC);
	CHECK(fd >= 0);
	CHECK(ftruncate(fd, (off_t)size) == 0);
	/* guard | data | data again | guard */
	region = mmap(NULL, 2 * size + 2 * page, PROT_NONE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(region != MAP_FAILED);
	CHECK(mmap(region + page, size, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_FIXED, fd, 0) == region + page);
	CHECK(mmap(region + page + size, size, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_FIXED, fd, 0) == region + page + size);
	close(fd); /* the mappings keep the memory alive */
	mapped[k] = region + page;
	return mapped[k];
}

/* ---- the producer's model of the ring ---- */

enum { R_COMMITTED, R_BUSY, R_DISCARD };

struct rec {
	uint64_t pos; /* ring position of its header */
	uint32_t len;
	uint32_t seq; /* payload pattern */
	uint8_t state;
};

#define MAX_RECS 2048
#define MAX_BATCH 64

struct ring {
	uint8_t *data;
	uint64_t size, mask;
	int mirrored;
	uint64_t *cons, *prod; /* separate allocations, as on separate pages */
	struct plb_rb_view v;
	uint64_t wpos;         /* the producer's reserve position */
	int exact;             /* positions and headers are all the producer's */
	unsigned nrecs;
	unsigned next;         /* first record not consumed yet */
	uint32_t seq;
	struct rec recs[MAX_RECS]; /* last: not cleared per input */
};

static struct ring R;
static uint8_t tmp[1 << 16];

static uint64_t rec_size(uint32_t len)
{
	return ((uint64_t)len + PLB_RB_HDR_SZ + 7) & ~(uint64_t)7;
}

/* Store bytes at a ring position, wrapping, into both halves if mirrored
 * (a double mapping mirrors by itself). */
static void ring_put(struct ring *r, uint64_t pos, const void *src, size_t len)
{
	const uint8_t *s = src;

	for (size_t i = 0; i < len; i++) {
		uint64_t off = (pos + i) & r->mask;

		r->data[off] = s[i];
		if (r->mirrored)
			r->data[off + r->size] = s[i];
	}
}

static void put_hdr(struct ring *r, uint64_t pos, uint32_t len_bits)
{
	uint32_t hdr[2] = { len_bits, 0x5eed }; /* pg_off: never read by us */

	ring_put(r, pos, hdr, sizeof(hdr));
}

/* The kernel's reserve (+ commit unless busy), one producer. 0: refused. */
static int produce(struct ring *r, uint32_t len, int state)
{
	uint64_t sz = rec_size(len), cons = *r->cons;
	struct rec *rc;

	if (r->nrecs == MAX_RECS || len > sizeof(tmp))
		return 0;
	/* kernel/bpf/ringbuf.c __bpf_ringbuf_reserve: refused when
	 * new_prod_pos - cons_pos > mask. */
	if (r->wpos + sz - cons > r->mask)
		return 0;
	rc = &r->recs[r->nrecs++];
	rc->pos = r->wpos;
	rc->len = len;
	rc->seq = r->seq++;
	rc->state = (uint8_t)state;
	for (uint32_t i = 0; i < len; i++)
		tmp[i] = pat(rc->seq, i);
	ring_put(r, r->wpos + PLB_RB_HDR_SZ, tmp, len);
	put_hdr(r, r->wpos, len | (state == R_BUSY ? PLB_RB_BUSY_BIT : 0) |
				    (state == R_DISCARD ? PLB_RB_DISCARD_BIT : 0));
	r->wpos += sz;
	__atomic_store_n(r->prod, r->wpos, __ATOMIC_RELEASE);
	return 1;
}

/* The model's record whose header is at pos (records are in position order
 * from recs[0], so a binary search on the offset works across wraps). */
static struct rec *model_at(struct ring *r, uint64_t pos)
{
	unsigned lo = 0, hi = r->nrecs;
	uint64_t base = r->nrecs ? r->recs[0].pos : 0;

	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		uint64_t o = r->recs[mid].pos - base;

		if (o == pos - base)
			return &r->recs[mid];
		if (o < pos - base)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static int payload_ok(const uint8_t *p, const struct rec *rc)
{
	for (uint32_t i = 0; i < rc->len; i++)
		if (p[i] != pat(rc->seq, i))
			return 0;
	return 1;
}

/* ---- checks ---- */

/* plb_rb_peek at pos, checked against the contract (and the model, when the
 * ring is exact). Returns its result, with *len and *next for records. */
static int peek_checked(struct ring *r, uint64_t pos, uint32_t *len_out,
			uint64_t *next_out)
{
	const void *d = NULL;
	uint32_t len = 0xdeadbeef, raw, want;
	uint64_t next = 0x1234, prod = *r->prod, cons = *r->cons;
	int rc = plb_rb_peek(&r->v, pos, &d, &len, &next);

	if (pos == prod) {
		CHECK(rc == PLB_RB_EMPTY && next == pos);
		return rc;
	}
	CHECK(rc != PLB_RB_EMPTY);
	if ((pos & 7) || prod - pos > r->size) {
		CHECK(rc == PLB_RB_CORRUPT);
		return rc;
	}
	if (prod - pos < PLB_RB_HDR_SZ) {
		/* Less than a header reserved: no record can be there. (Only a
		 * ring of at least 8 bytes holds a header to look at.) */
		CHECK(!r->exact);
		CHECK(rc == PLB_RB_CORRUPT || (rc == PLB_RB_BUSY && r->size >= PLB_RB_HDR_SZ));
		return rc;
	}
	memcpy(&raw, r->data + (pos & r->mask), sizeof(raw));
	want = raw & ~(PLB_RB_BUSY_BIT | PLB_RB_DISCARD_BIT);
	if (raw & PLB_RB_BUSY_BIT) {
		CHECK(rc == PLB_RB_BUSY);
	} else if (rec_size(want) > prod - pos) {
		CHECK(rc == PLB_RB_CORRUPT);
	} else {
		CHECK(rc == ((raw & PLB_RB_DISCARD_BIT) ? PLB_RB_DISCARD : PLB_RB_RECORD));
		CHECK(len == want);
		CHECK(d == r->data + (pos & r->mask) + PLB_RB_HDR_SZ);
		CHECK(next - pos == rec_size(len)); /* 8-aligned, header included */
		CHECK(next - cons <= prod - cons);  /* ends inside [cons, prod] */
		CHECK((pos & r->mask) + (next - pos) <= 2 * r->size); /* mapped */
		*len_out = len;
		*next_out = next;
	}
	if (r->exact) {
		/* The walker only ever stands on the producer's boundaries. */
		struct rec *m = model_at(r, pos);

		CHECK(m);
		CHECK(rc == (m->state == R_BUSY      ? PLB_RB_BUSY
			     : m->state == R_DISCARD ? PLB_RB_DISCARD
						     : PLB_RB_RECORD));
		if (rc == PLB_RB_RECORD) {
			CHECK(len == m->len);
			CHECK(payload_ok(d, m));
		}
	}
	return rc;
}

/* What plb_rb_read must return, per plb_ringbuf.h, as a walk of peeks. */
struct expect {
	int rc;
	uint32_t n;
	uint64_t end;   /* the consumer position after a consuming read */
	size_t used;
	uint64_t pos[MAX_BATCH];
	uint32_t len[MAX_BATCH];
};

static void expect_read(struct ring *r, uint32_t max, uint64_t cap,
			struct expect *e)
{
	uint64_t pos = *r->cons, off = 0, used = 0, next = 0;
	uint32_t len = 0;
	int err = 0;

	if (cap > UINT32_MAX)
		cap = UINT32_MAX;
	e->n = 0;
	while (e->n < max) {
		int rc = peek_checked(r, pos, &len, &next);

		if (rc == PLB_RB_EMPTY || rc == PLB_RB_BUSY)
			break;
		if (rc == PLB_RB_CORRUPT) {
			if (e->n == 0)
				err = -EBADMSG;
			break;
		}
		if (rc == PLB_RB_DISCARD) {
			pos = next;
			continue;
		}
		if (off + len > cap) {
			if (e->n == 0) {
				err = -EMSGSIZE;
				used = len;
			}
			break;
		}
		e->pos[e->n] = pos;
		e->len[e->n] = len;
		e->n++;
		used = off + len;
		off = (used + 7) & ~(uint64_t)7;
		pos = next;
	}
	e->rc = err ? err : (int)e->n;
	e->end = pos;
	e->used = (size_t)used;
}

static size_t choose_cap(struct ring *r, struct fz *f)
{
	switch (fz_u8(f) & 3) {
	case 0:
		return 0;
	case 1:
		return fz_u8(f);
	case 2:
		return fz_u16(f) % (2 * r->size + 64);
	default:
		return 2 * r->size + 64; /* room for whatever the ring holds */
	}
}

/* RingBuffer's drain (plb_batch_read_rb) in place of a consuming plb_rb_read: the
 * same records as the walk of peeks expects with room for everything (a batch
 * grows), each read back as Python's Batch reads it (a uniform batch's entries
 * implicit), and the consumer position past everything walked. */
static void do_batch_read(struct ring *r, uint32_t max)
{
	struct plb_batch *b = plb_batch_new(1, 8);   /* tiny: grows during the walk */
	uint64_t cons0 = *r->cons, prod = *r->prod;
	struct expect e;
	int rc;

	CHECK(b);
	expect_read(r, max, UINT32_MAX, &e);
	rc = plb_batch_read_rb(b, &r->v, 3, max);
	if (e.rc < 0) {
		CHECK(rc == e.rc && b->n == 0);   /* -EBADMSG before any record */
	} else {
		CHECK(rc == (int)e.n && b->n == e.n && !b->err && !b->full);
	}
	for (uint32_t i = 0; i < b->n; i++) {
		uint32_t start = b->uniform && i ? b->start[0] + i * b->len[0] : b->start[i];
		uint32_t len = b->uniform && i ? b->len[0] : b->len[i];

		CHECK(len == e.len[i] && start % 8 == 0 && (uint64_t)start + len <= b->used);
		CHECK(b->uniform && i ? 1 : b->tag[i] == 3 && b->lost[i] == 0);
		CHECK(!len || !memcmp(b->buf + start, r->data + (e.pos[i] & r->mask) + PLB_RB_HDR_SZ, len));
	}
	CHECK(*r->cons == e.end && *r->cons - cons0 <= prod - cons0);   /* past the discards before a bad head too */
	if (r->exact) {
		CHECK(rc != -EBADMSG);
		while (r->next < r->nrecs && r->recs[r->next].pos - cons0 < *r->cons - cons0)
			r->next++;
	}
	plb_batch_free(b);
}

/* One plb_rb_read with the input's parameters, checked. */
static void do_read(struct ring *r, struct fz *f, int drain)
{
	uint8_t b = fz_u8(f);
	uint32_t max = drain ? MAX_BATCH : (b & 0x40) ? 1 + fz_u8(f) % MAX_BATCH : b % 4;
	int consume = drain || (b & 0x80);
	size_t cap = drain ? 2 * r->size + 64 : choose_cap(r, f), used = 12345;
	/* Exact sizes: writing one byte or entry too many is an ASan report. */
	uint8_t *out = cap ? malloc(cap) : NULL;
	uint32_t *starts = max ? malloc(max * sizeof(*starts)) : NULL;
	uint32_t *lens = max ? malloc(max * sizeof(*lens)) : NULL;
	uint64_t cons0 = *r->cons, prod = *r->prod, c1;
	struct expect e;
	int rc;

	if (!drain && (b & 0xa0) == 0xa0 && max) {
		/* Some consuming reads go through the batch drain instead. */
		free(out);
		free(starts);
		free(lens);
		do_batch_read(r, max);
		return;
	}
	CHECK((!cap || out) && (!max || (starts && lens)));
	expect_read(r, max, cap, &e);
	rc = plb_rb_read(&r->v, out, cap, starts, lens, max, consume, &used);
	CHECK(rc == e.rc);
	CHECK(used == e.used);
	for (uint32_t i = 0; rc > 0 && i < (uint32_t)rc; i++) {
		CHECK(starts[i] % 8 == 0);
		CHECK(lens[i] == e.len[i]);
		CHECK(i == 0 ? starts[0] == 0 : starts[i] >= starts[i - 1] + lens[i - 1]);
		CHECK((uint64_t)starts[i] + lens[i] <= cap);
		CHECK(e.pos[i] - cons0 < prod - cons0); /* within [cons, prod) */
		CHECK(!lens[i] || !memcmp(out + starts[i], r->data + (e.pos[i] & r->mask) +
							       PLB_RB_HDR_SZ, lens[i]));
	}
	if (rc > 0)
		CHECK(used == (size_t)starts[rc - 1] + lens[rc - 1]);
	if (r->exact)
		CHECK(rc != -EBADMSG);

	c1 = *r->cons;
	if (!consume) {
		CHECK(c1 == cons0); /* a peek: two peeks return the same data */
	} else {
		/* Past every record and discard walked (with an error: past
		 * the discards before the bad or too-big head only). */
		CHECK(c1 == e.end);
		CHECK(c1 - cons0 <= prod - cons0);
		CHECK((c1 - cons0) % 8 == 0);
	}
	/* The model: the records delivered are the next committed ones. */
	if (r->exact) {
		unsigned k = r->next;

		for (uint32_t i = 0; rc > 0 && i < (uint32_t)rc; i++) {
			while (k < r->nrecs && r->recs[k].state == R_DISCARD)
				k++;
			CHECK(k < r->nrecs);
			CHECK(r->recs[k].state == R_COMMITTED);
			CHECK(r->recs[k].pos == e.pos[i] && r->recs[k].len == lens[i]);
			/* out is NULL when out_cap is 0 (then every len is 0) */
			CHECK(!lens[i] || payload_ok(out + starts[i], &r->recs[k]));
			k++;
		}
		if (consume) {
			/* Consumed: everything below the new consumer position. */
			while (r->next < r->nrecs && r->recs[r->next].pos - cons0 < c1 - cons0) {
				CHECK(r->recs[r->next].state != R_BUSY);
				r->next++;
			}
		}
	}
	free(out);
	free(starts);
	free(lens);
}

/* Walk with peeks only, as far as records and discards go. */
static void do_walk(struct ring *r)
{
	uint64_t pos = *r->cons, next = 0;
	uint32_t len = 0;

	CHECK(plb_rb_consumer_pos(&r->v) == *r->cons);
	CHECK(plb_rb_available(&r->v) == *r->prod - *r->cons);
	for (int i = 0; i < 2 * MAX_BATCH; i++) {
		int rc = peek_checked(r, pos, &len, &next);

		if (rc != PLB_RB_RECORD && rc != PLB_RB_DISCARD)
			break;
		pos = next;
	}
}

/* Bad arguments are refused without touching the ring. */
static void do_einval(struct ring *r)
{
	uint8_t out[8];
	uint32_t s[1], l[1];
	size_t used;
	uint64_t cons0 = *r->cons;

	CHECK(plb_rb_read(NULL, out, sizeof(out), s, l, 1, 1, &used) == -EINVAL);
	CHECK(plb_rb_read(&r->v, out, sizeof(out), s, l, 1, 1, NULL) == -EINVAL);
	CHECK(plb_rb_read(&r->v, out, sizeof(out), NULL, l, 1, 1, &used) == -EINVAL);
	CHECK(plb_rb_read(&r->v, out, sizeof(out), s, NULL, 1, 1, &used) == -EINVAL);
	CHECK(plb_rb_read(&r->v, NULL, sizeof(out), s, l, 1, 1, &used) == -EINVAL);
	CHECK(*r->cons == cons0);
}

/* The producer finishes its oldest busy record: commit or discard. */
static void commit_busy(struct ring *r, int discard)
{
	for (unsigned k = r->next; k < r->nrecs; k++) {
		struct rec *rc = &r->recs[k];

		if (rc->state != R_BUSY)
			continue;
		rc->state = discard ? R_DISCARD : R_COMMITTED;
		put_hdr(r, rc->pos, rc->len | (discard ? PLB_RB_DISCARD_BIT : 0));
		return;
	}
}

/* One record (or a raw garbage header) from the input. */
static void produce_from(struct ring *r, struct fz *f)
{
	uint8_t o = fz_u8(f);
	uint32_t len = (o & 0x40) ? fz_u16(f) % r->size : fz_u8(f) % 40;

	if (((o >> 2) & 15) == 15) {
		/* A header the producer did not write: any length and bits. */
		uint64_t step = 8 * (1 + (uint64_t)fz_u8(f) % 8);

		if (r->wpos + step - *r->cons > r->size)
			return;
		put_hdr(r, r->wpos, fz_u32(f));
		r->wpos += step;
		__atomic_store_n(r->prod, r->wpos, __ATOMIC_RELEASE);
		r->exact = 0;
		return;
	}
	produce(r, len, (o & 3) == 2 ? R_BUSY : (o & 3) == 3 ? R_DISCARD : R_COMMITTED);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = { data, size };
	struct ring *r = &R;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint8_t sel = fz_u8(&f) % 15, flags = fz_u8(&f);
	uint64_t start;
	unsigned nrec, nops;

	memset(r, 0, offsetof(struct ring, recs));
	if (sel < 12) {
		/* 1 B .. 2 KiB: below 8 no record fits, but a view may say so */
		r->size = 1ULL << sel;
		r->mirrored = 1;
		r->data = malloc(2 * r->size);
	} else {
		r->size = (uint64_t)page << (sel - 12);
		r->data = mapped_get(sel - 12, r->size);
	}
	r->mask = r->size - 1;
	r->cons = malloc(sizeof(*r->cons));
	r->prod = malloc(sizeof(*r->prod));
	CHECK(r->data && r->cons && r->prod);
	/* Stale bytes: zeros, or the input's bytes (what a dishonest producer
	 * position would expose as headers). */
	if (flags & 1)
		fz_bytes(&f, r->data, r->size);
	else
		memset(r->data, 0, r->size);
	if (r->mirrored)
		memcpy(r->data + r->size, r->data, r->size);

	start = fz_pos(&f);
	if (!(flags & 4))
		start &= ~(uint64_t)7; /* the kernel's positions are 8-aligned */
	r->exact = !(flags & 4);
	*r->cons = *r->prod = r->wpos = start;
	r->v.consumer_pos = r->cons;
	r->v.producer_pos = r->prod;
	r->v.data = r->data;
	r->v.mask = r->mask;

	nrec = fz_u8(&f) % 48;
	for (unsigned i = 0; i < nrec; i++)
		produce_from(r, &f);
	if (flags & 2) {
		/* A producer position that is not the producer's. */
		*r->prod = (flags & 8) ? fz_pos(&f) : start + fz_u16(&f);
		if (*r->prod != r->wpos)
			r->exact = 0;
	}

	nops = 0;
	while (fz_more(&f) && nops++ < 128) {
		switch (fz_u8(&f) % 8) {
		case 0:
		case 1:
		case 2:
			do_read(r, &f, 0);
			break;
		case 3:
			do_walk(r);
			break;
		case 4:
			if (*r->prod == r->wpos) /* only an honest producer goes on */
				for (unsigned k = 1 + fz_u8(&f) % 4; k; k--)
					produce_from(r, &f);
			break;
		case 5:
			commit_busy(r, fz_u8(&f) & 1);
			break;
		case 6:
			do_einval(r);
			break;
		default:
			do_read(r, &f, 1);
			break;
		}
	}

	/* The end: the producer finishes every record; draining the ring must
	 * deliver every committed record once and leave it empty. */
	if (r->exact) {
		unsigned rounds = 0;

		for (unsigned k = r->next; k < r->nrecs; k++)
			if (r->recs[k].state == R_BUSY)
				commit_busy(r, 0);
		while (*r->cons != *r->prod) {
			CHECK(rounds++ <= r->nrecs);
			do_read(r, &f, 1);
		}
		CHECK(r->next == r->nrecs);
	} else {
		do_read(r, &f, 1);
	}

	if (r->mirrored)
		free(r->data);
	free(r->cons);
	free(r->prod);
	return 0;
}
