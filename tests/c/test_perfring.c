/* test_perfring.c - the perf ring cursor over synthetic rings in ordinary
 * memory: a producer (tests/c/synth.h) that writes records like the kernel
 * (8-aligned sizes, release store of data_head, acquire load of data_tail),
 * wrap-around at every position, corrupt sizes, batched commits and a threaded producer/consumer.
 * Unity build: includes the code under test. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, for synth.h */
#endif
#include "../../csrc/plb_perfring.c"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "synth.h"

static uint8_t pattern(uint64_t seed, uint32_t i)
{
	return (uint8_t)(seed * 131 + i * 7 + 1);
}

/* A record of exactly size bytes whose body is pattern(seed, i). */
static int fr_pattern(struct fake_ring *f, uint16_t size, uint64_t seed)
{
	uint8_t body[65536];
	uint32_t i;

	for (i = 0; i + sizeof(struct perf_event_header) < size; i++)
		body[i] = pattern(seed, i);
	return fr_record(f, PERF_RECORD_SAMPLE, size, body,
			size - sizeof(struct perf_event_header));
}

static void check_pattern(const uint8_t *rec, uint16_t size, uint64_t seed)
{
	uint32_t i;

	for (i = 0; i + sizeof(struct perf_event_header) < size; i++)
		CHECK(rec[sizeof(struct perf_event_header) + i] == pattern(seed, i));
}

/* ---- tests ---- */

static void test_init(void)
{
	struct fake_ring f;
	struct plb_perfring r;

	fr_init(&f, 256, 0);
	CHECK(plb_perfring_init(&r, f.page, f.data, 100) == -EINVAL);
	CHECK(plb_perfring_init(&r, f.page, f.data, 4) == -EINVAL);
	CHECK(plb_perfring_init(&r, NULL, f.data, 256) == -EINVAL);
	CHECK(plb_perfring_init(&r, f.page, f.data, 256) == 0);
	CHECK(r.mask == 255);
	plb_perfring_release(&r);
	fr_free(&f);
}

static void test_basic(void)
{
	struct fake_ring f;
	struct plb_perfring r;
	struct plb_perf_rec rec;
	int i;

	fr_init(&f, 1024, 4096);
	CHECK(plb_perfring_init(&r, f.page, f.data, f.size) == 0);
	CHECK(r.tail == 4096 && r.committed == 4096);
	CHECK(plb_perfring_peek(&r, &rec) == PLB_PR_EMPTY);

	CHECK(fr_pattern(&f, 16, 1));
	CHECK(fr_pattern(&f, 40, 2));
	CHECK(fr_pattern(&f, 8, 3)); /* header only */
	/* Not yet published: invisible. */
	CHECK(plb_perfring_refresh(&r) == 0);
	CHECK(plb_perfring_peek(&r, &rec) == PLB_PR_EMPTY);
	fr_publish(&f);
	CHECK(plb_perfring_refresh(&r) == 64);

	for (i = 0; i < 3; i++) {
		static const uint16_t sizes[3] = { 16, 40, 8 };

		CHECK(plb_perfring_peek(&r, &rec) == PLB_PR_RECORD);
		CHECK(rec.type == PERF_RECORD_SAMPLE && rec.size == sizes[i]);
		CHECK(!rec.copied && rec.bytes == f.data + ((rec.pos) & 1023));
		check_pattern(rec.bytes, rec.size, (uint64_t)i + 1);
		plb_perfring_advance(&r, &rec);
		/* Batched: data_tail moves only on commit. */
		CHECK(f.page->data_tail == 4096);
	}
	CHECK(plb_perfring_peek(&r, &rec) == PLB_PR_EMPTY);
	plb_perfring_commit(&r);
	CHECK(f.page->data_tail == 4096 + 64);
	CHECK(r.committed == 4096 + 64);
	plb_perfring_release(&r);
	fr_free(&f);
}

/* Records of every size starting at every 8-aligned position of a small ring,
 * with positions close to 2^64 so the u64 arithmetic wraps as well. */
static void test_wrap_every_offset(void)
{
	const uint64_t size = 256;
	uint64_t base = (uint64_t)0 - 2 * size, start;
	uint16_t rsize;
	int wrapped = 0, cases = 0;

	for (start = base; start != base + 3 * size; start += 8) {
		for (rsize = 8; rsize <= size; rsize += 8) {
			struct fake_ring f;
			struct plb_perfring r;
			struct plb_perf_rec rec, hdr;
			uint8_t copy[256];
			uint64_t off = start & (size - 1);
			int wraps = off + rsize > size;

			fr_init(&f, size, start);
			CHECK(plb_perfring_init(&r, f.page, f.data, size) == 0);
			CHECK(fr_pattern(&f, rsize, start ^ rsize));
			fr_publish(&f);
			CHECK(plb_perfring_refresh(&r) == rsize);

			CHECK(plb_perfring_peek_header(&r, &hdr) == PLB_PR_RECORD);
			CHECK(hdr.pos == start && hdr.size == rsize);
			CHECK((hdr.bytes == NULL) == wraps);

			CHECK(plb_perfring_peek(&r, &rec) == PLB_PR_RECORD);
			CHECK(rec.copied == wraps);
			CHECK(rec.size == rsize && rec.type == PERF_RECORD_SAMPLE);
			check_pattern(rec.bytes, rsize, start ^ rsize);

			plb_perfring_read(&r, rec.pos, copy, rsize);
			CHECK(memcmp(copy, rec.bytes, rsize) == 0);

			plb_perfring_advance(&r, &rec);
			plb_perfring_commit(&r);
			CHECK(f.page->data_tail == start + rsize);
			CHECK(plb_perfring_peek(&r, &rec) == PLB_PR_EMPTY);
			wrapped += wraps;
			cases++;
			plb_perfring_release(&r);
			fr_free(&f);
		}
	}
	CHECK(wrapped > 0 && cases > wrapped);
}

/* Several records in a row crossing the end of the ring, batch-committed. */
static void test_wrap_sequence(void)
{
	struct fake_ring f;
	struct plb_perfring r;
	struct plb_perf_rec rec;
	uint64_t seed;
	int round;

	fr_init(&f, 128, 40);
	CHECK(plb_perfring_init(&r, f.page, f.data, 128) == 0);
	for (round = 0, seed = 0; round < 200; round++) {
		uint64_t first = seed;
		int n = 0;

		/* Fill with 24- and 32-byte records while they fit. */
		while (fr_pattern(&f, (uint16_t)(seed & 1 ? 24 : 32), seed))
			seed++, n++;
		fr_publish(&f);
		plb_perfring_refresh(&r);
		while (plb_perfring_peek(&r, &rec) == PLB_PR_RECORD) {
			CHECK(rec.size == (first & 1 ? 24 : 32));
			check_pattern(rec.bytes, rec.size, first);
			first++;
			plb_perfring_advance(&r, &rec);
			n--;
		}
		CHECK(n == 0 && first == seed);
		plb_perfring_commit(&r);
		CHECK(f.page->data_tail == f.head);
	}
	plb_perfring_release(&r);
	fr_free(&f);
}

static void test_corrupt(void)
{
	static const uint16_t bad[] = { 0, 4, 12, 20, 200 };
	size_t k;

	for (k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		struct fake_ring f;
		struct plb_perfring r;
		struct plb_perf_rec rec;
		struct perf_event_header h = { .type = PERF_RECORD_SAMPLE, .size = bad[k] };
		uint8_t body[24] = { 0 };

		fr_init(&f, 256, 0);
		CHECK(plb_perfring_init(&r, f.page, f.data, 256) == 0);
		/* 32 bytes published, the header claims bad[k]. */
		fr_put(&f, 0, &h, sizeof(h));
		fr_put(&f, 8, body, sizeof(body));
		f.head = 32;
		fr_publish(&f);
		plb_perfring_refresh(&r);
		CHECK(plb_perfring_peek(&r, &rec) == PLB_PR_CORRUPT);
		CHECK(plb_perfring_peek_header(&r, &rec) == PLB_PR_CORRUPT);
		plb_perfring_skip_to_head(&r);
		plb_perfring_commit(&r);
		CHECK(f.page->data_tail == 32);
		CHECK(plb_perfring_peek(&r, &rec) == PLB_PR_EMPTY);
		/* The ring is usable again after the resync. */
		CHECK(fr_pattern(&f, 16, 9));
		fr_publish(&f);
		plb_perfring_refresh(&r);
		CHECK(plb_perfring_peek(&r, &rec) == PLB_PR_RECORD && rec.size == 16);
		plb_perfring_release(&r);
		fr_free(&f);
	}

	/* A head more than a ring ahead of the tail is not the kernel's. */
	{
		struct fake_ring f;
		struct plb_perfring r;
		struct plb_perf_rec rec;

		fr_init(&f, 256, 0);
		CHECK(plb_perfring_init(&r, f.page, f.data, 256) == 0);
		f.head = 1024;
		fr_publish(&f);
		plb_perfring_refresh(&r);
		CHECK(plb_perfring_peek_header(&r, &rec) == PLB_PR_CORRUPT);
		plb_perfring_release(&r);
		fr_free(&f);
	}
}

/* ---- one producer thread, one consumer, release/acquire only ---- */

#define SPSC_N 200000

struct spsc {
	struct fake_ring f;
	int done;
};

static void *spsc_producer(void *arg)
{
	struct spsc *s = arg;
	uint64_t seq;

	for (seq = 0; seq < SPSC_N; seq++) {
		/* 16..136 bytes: every alignment of the end gets crossed. */
		uint16_t size = (uint16_t)(16 + 8 * (seq % 16));
		uint8_t body[256];
		uint32_t i;

		memcpy(body, &seq, sizeof(seq));
		for (i = sizeof(seq); i + 8 < size; i++)
			body[i] = pattern(seq, i);
		while (!fr_record(&s->f, PERF_RECORD_SAMPLE, size, body, size - 8))
			sched_yield(); /* full: wait for the consumer's data_tail */
		if (seq % 3 == 0)
			fr_publish(&s->f);
	}
	fr_publish(&s->f);
	__atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void test_threaded(void)
{
	struct spsc s;
	struct plb_perfring r;
	struct plb_perf_rec rec;
	pthread_t t;
	uint64_t next = 0, batch = 0;

	memset(&s, 0, sizeof(s));
	fr_init(&s.f, 1024, (uint64_t)0 - 4096);
	CHECK(plb_perfring_init(&r, s.f.page, s.f.data, 1024) == 0);
	CHECK(pthread_create(&t, NULL, spsc_producer, &s) == 0);
	while (next < SPSC_N) {
		int done = __atomic_load_n(&s.done, __ATOMIC_ACQUIRE);

		plb_perfring_refresh(&r);
		while (plb_perfring_peek(&r, &rec) == PLB_PR_RECORD) {
			uint64_t seq;
			uint32_t i;

			memcpy(&seq, rec.bytes + 8, sizeof(seq));
			CHECK(seq == next);
			CHECK(rec.size == 16 + 8 * (seq % 16));
			for (i = sizeof(seq); i + 8 < rec.size; i++)
				CHECK(rec.bytes[8 + i] == pattern(seq, i));
			plb_perfring_advance(&r, &rec);
			next++;
			/* Batch commits; nothing read from a record survives it. */
			if (++batch % 5 == 0)
				plb_perfring_commit(&r);
		}
		plb_perfring_commit(&r);
		if (done && plb_perfring_refresh(&r) == 0)
			break;
		sched_yield();
	}
	CHECK(next == SPSC_N);
	pthread_join(t, NULL);
	plb_perfring_release(&r);
	fr_free(&s.f);
}

int main(void)
{
	test_init();
	test_basic();
	test_wrap_every_offset();
	test_wrap_sequence();
	test_corrupt();
	test_threaded();
	printf("test_perfring: ok\n");
	return 0;
}
