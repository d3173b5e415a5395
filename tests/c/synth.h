/* synth.h - synthetic kernel rings in ordinary memory, shared by the C drivers.
 *
 * - A perf ring (struct fake_ring, fr_*): a struct perf_event_mmap_page and a
 *   data area of a power-of-two size, with a producer that appends records
 *   {header, body, zero padding to 8} as perf_output_begin/_end do: it reads
 *   data_tail (acquire) to know the free space, writes the record, possibly
 *   wrapping the end of the ring, and publishes data_head with a release
 *   store (fr_publish). fr_sample() lays out a PERF_RECORD_SAMPLE for the
 *   ring's sample_type as perf_output_sample() does.
 * - A BPF ring buffer (struct synth, synth_*): the data area is a memfd mapped
 *   twice back to back (MAP_FIXED into a reserved region), as the kernel's
 *   vmap does, and consumer_pos / producer_pos live on their own pages. The
 *   producer reserves and commits like kernel/bpf/ringbuf.c: header
 *   {len | BUSY, pg_off}, release store of producer_pos, then an exchange on
 *   len (a full barrier) that clears BUSY and may set DISCARD; it wakes
 *   consumers (writes the eventfd standing in for the map's fd) only when the
 *   committed record sits at consumer_pos.
 *
 * Include it after the csrc/ files under test. Functions are static inline so
 * that a driver using only one of the two rings compiles without warnings.
 */
#ifndef PLB_TEST_SYNTH_H
#define PLB_TEST_SYNTH_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/perf_event.h>
#include <sys/eventfd.h>
#include <sys/mman.h>

#include "check.h"
#include "plb_ringbuf.h"

/* ---- a kernel-like perf ring producer ---- */

struct fake_ring {
	struct perf_event_mmap_page *page;
	uint8_t *data;
	uint64_t size;
	uint64_t head;         /* the producer's private head, published by fr_publish */
	uint64_t sample_type;  /* the layout fr_sample() writes (PERF_SAMPLE_RAW) */
	uint64_t lost_pending; /* for drivers that keep a lost count to report */
};

static inline void fr_init(struct fake_ring *f, uint64_t size, uint64_t start)
{
	memset(f, 0, sizeof(*f));
	f->page = calloc(1, sizeof(*f->page));
	f->data = malloc(size);
	CHECK(f->page && f->data);
	memset(f->data, 0xAA, size);
	f->size = size;
	f->page->data_size = size;
	f->page->data_head = start;
	f->page->data_tail = start;
	f->head = start;
	f->sample_type = PERF_SAMPLE_RAW;
}

static inline void fr_free(struct fake_ring *f)
{
	free(f->page);
	free(f->data);
}

static inline uint64_t fr_space(const struct fake_ring *f)
{
	/* The kernel reads data_tail before writing (perf_output_begin). */
	return f->size - (f->head - __atomic_load_n(&f->page->data_tail, __ATOMIC_ACQUIRE));
}

static inline void fr_put(struct fake_ring *f, uint64_t pos, const void *src, uint64_t len)
{
	uint64_t off = pos & (f->size - 1), first = f->size - off;

	if (first > len)
		first = len;
	memcpy(f->data + off, src, first);
	memcpy(f->data, (const uint8_t *)src + first, len - first);
}

static inline void fr_publish(struct fake_ring *f)
{
	/* Release: the record bytes are visible before the new head. */
	__atomic_store_n(&f->page->data_head, f->head, __ATOMIC_RELEASE);
}

/* Append one record {header, body, zero pad to 8}, the header's size field
 * as given (it may lie); 0 if it does not fit. Not published yet. */
static inline int fr_record(struct fake_ring *f, uint32_t type, uint16_t hsize,
			    const void *body, uint32_t body_len)
{
	struct perf_event_header h = { .type = type, .misc = 0, .size = hsize };
	uint64_t total = (sizeof(h) + body_len + 7) & ~7ull;
	static const uint8_t zero[8];

	if (fr_space(f) < total)
		return 0;
	fr_put(f, f->head, &h, sizeof(h));
	fr_put(f, f->head + sizeof(h), body, body_len);
	fr_put(f, f->head + sizeof(h) + body_len, zero, total - sizeof(h) - body_len);
	f->head += total;
	return 1;
}

/* A PERF_RECORD_SAMPLE as perf_output_sample() lays it out for f's
 * sample_type: the fixed 8-byte fields (TIME = ktime), u32 raw size, raw data
 * padded so the record is 8-aligned. raw_size_delta corrupts the raw size. */
static inline int fr_sample_x(struct fake_ring *f, uint64_t ktime, const void *raw,
			      uint32_t len, int32_t raw_size_delta)
{
	static const uint64_t order[] = { PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP,
					  PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
					  PERF_SAMPLE_ADDR, PERF_SAMPLE_ID,
					  PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_CPU,
					  PERF_SAMPLE_PERIOD };
	uint8_t body[70000]; /* per call: producer threads run it at once */
	uint32_t off = 0, raw_size, total, claimed;
	size_t k;

	for (k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
		if (!(f->sample_type & order[k]))
			continue;
		if (order[k] == PERF_SAMPLE_TIME)
			memcpy(body + off, &ktime, 8);
		else
			memset(body + off, 0x30 + (int)k, 8);
		off += 8;
	}
	total = (8 + off + 4 + len + 7) & ~7u;
	raw_size = total - 8 - off - 4;
	claimed = raw_size + (uint32_t)raw_size_delta;
	memcpy(body + off, &claimed, 4);
	memcpy(body + off + 4, raw, len);
	memset(body + off + 4 + len, 0, raw_size - len);
	return fr_record(f, PERF_RECORD_SAMPLE, (uint16_t)total, body, total - 8);
}

static inline int fr_sample(struct fake_ring *f, uint64_t ktime, const void *raw, uint32_t len)
{
	return fr_sample_x(f, ktime, raw, len, 0);
}

/* A PERF_RECORD_LOST {header, u64 id, u64 lost}. */
static inline int fr_lost(struct fake_ring *f, uint64_t lost)
{
	uint64_t body[2] = { 7, lost };

	return fr_record(f, PERF_RECORD_LOST, 24, body, sizeof(body));
}

/* ---- a kernel-like BPF ring buffer ---- */

struct synth {
	size_t size;
	int memfd;
	uint8_t *data;       /* 2 * size bytes, the second half aliasing the first */
	uint64_t *cons;      /* on its own page, like the kernel's consumer page */
	uint64_t *prod;      /* on its own page, like the kernel's producer page */
	uint64_t prod_local; /* the kernel's rb->producer_pos under its spinlock */
	struct plb_rb_view v;
	int wake_fd;         /* eventfd standing in for the map fd */
	int no_wakeup;       /* like BPF_RB_NO_WAKEUP on every commit */
	uint64_t wakes_sent;
};

/* size: a power of two and a multiple of the page size. */
static inline void synth_init(struct synth *s, size_t size)
{
	long page = sysconf(_SC_PAGESIZE);
	uint8_t *region, *pages;

	memset(s, 0, sizeof(*s));
	s->size = size;
	s->memfd = memfd_create("plb-test-ring", MFD_CLOEXEC);
	CHECK(s->memfd >= 0);
	CHECK(ftruncate(s->memfd, (off_t)size) == 0);
	region = mmap(NULL, 2 * size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(region != MAP_FAILED);
	CHECK(mmap(region, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		   s->memfd, 0) == region);
	CHECK(mmap(region + size, size, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_FIXED, s->memfd, 0) == region + size);
	s->data = region;
	pages = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(pages != MAP_FAILED);
	s->cons = (uint64_t *)(void *)pages;
	s->prod = (uint64_t *)(void *)(pages + page);
	s->v.consumer_pos = s->cons;
	s->v.producer_pos = s->prod;
	s->v.data = s->data;
	s->v.mask = size - 1;
	s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	CHECK(s->wake_fd >= 0);
}

static inline void synth_free(struct synth *s)
{
	long page = sysconf(_SC_PAGESIZE);

	munmap(s->data, 2 * s->size);
	munmap(s->cons, 2 * (size_t)page);
	close(s->memfd);
	close(s->wake_fd);
}

/* Put both positions at pos (an empty ring whose next record starts there). */
static inline void synth_set_pos(struct synth *s, uint64_t pos)
{
	*s->cons = *s->prod = s->prod_local = pos;
}

/* Wake consumers as the kernel does: the map fd becomes readable. */
static inline void synth_wake(struct synth *s)
{
	uint64_t one = 1;

	CHECK(write(s->wake_fd, &one, 8) == 8);
	s->wakes_sent++;
}

/* The kernel's __bpf_ringbuf_reserve, single producer: NULL when full. */
static inline void *synth_reserve(struct synth *s, uint32_t size)
{
	uint64_t cons, len = ((uint64_t)size + PLB_RB_HDR_SZ + 7) & ~(uint64_t)7;
	uint32_t *hdr;

	if (len > s->size)
		return NULL;
	cons = __atomic_load_n(s->cons, __ATOMIC_ACQUIRE);
	if (s->prod_local + len - cons > s->v.mask)
		return NULL;
	hdr = (uint32_t *)(void *)(s->data + (s->prod_local & s->v.mask));
	__atomic_store_n(&hdr[0], size | PLB_RB_BUSY_BIT, __ATOMIC_RELAXED);
	/* pg_off: pages from the kernel's struct bpf_ringbuf to the header;
	 * the consumer never reads it, any value is faithful enough. */
	hdr[1] = (uint32_t)(((s->prod_local & s->v.mask) >> 12) + 2);
	s->prod_local += len;
	__atomic_store_n(s->prod, s->prod_local, __ATOMIC_RELEASE);
	return hdr + 2;
}

/* The kernel's bpf_ringbuf_commit: xchg (full barrier), then a wakeup if the
 * record sits at consumer_pos, unless no_wakeup. Returns 1 when the kernel's
 * rule would wake consumers (whatever no_wakeup says). */
static inline int synth_commit(struct synth *s, void *sample, int discard)
{
	uint32_t *len = (uint32_t *)((uint8_t *)sample - PLB_RB_HDR_SZ);
	uint32_t nl = (*len & ~PLB_RB_BUSY_BIT) | (discard ? PLB_RB_DISCARD_BIT : 0);
	uint64_t rec_pos = (uint64_t)((uint8_t *)len - s->data);
	int wake;

	__atomic_exchange_n(len, nl, __ATOMIC_SEQ_CST); /* xchg: full barrier */
	wake = (__atomic_load_n(s->cons, __ATOMIC_ACQUIRE) & s->v.mask) == rec_pos;
	if (wake && !s->no_wakeup)
		synth_wake(s);
	return wake;
}

#endif
