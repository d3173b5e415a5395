/* test_ringbuf.c - the BPF ring buffer walker over a synthetic ring.
 *
 * The ring (struct synth, tests/c/synth.h) imitates the kernel's layout
 * faithfully: the data area is a memfd mapped twice back to back, as the
 * kernel's vmap does, and consumer_pos / producer_pos live on their own
 * pages. Its producer reserves and commits like kernel/bpf/ringbuf.c:
 * header {len | BUSY, pg_off}, release-store of producer_pos, then an
 * exchange on len that clears BUSY (and may set DISCARD).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "plb_ringbuf.c"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "synth.h"

static uint8_t pat(uint64_t seq, uint32_t i)
{
	return (uint8_t)(seq * 131u + i * 7u + 1u);
}

static void fill(uint8_t *p, uint64_t seq, uint32_t size)
{
	for (uint32_t i = 0; i < size; i++)
		p[i] = pat(seq, i);
	if (size >= 8)
		memcpy(p, &seq, 8);
}

static int verify(const uint8_t *p, uint64_t seq, uint32_t size)
{
	uint64_t got;

	if (size >= 8) {
		memcpy(&got, p, 8);
		if (got != seq)
			return 0;
	}
	for (uint32_t i = size >= 8 ? 8 : 0; i < size; i++)
		if (p[i] != pat(seq, i))
			return 0;
	return 1;
}

static void produce(struct synth *s, uint64_t seq, uint32_t size, int discard)
{
	void *p = synth_reserve(s, size);

	CHECK(p);
	fill(p, seq, size);
	synth_commit(s, p, discard);
}

static uint64_t rec_size(uint32_t len)
{
	return ((uint64_t)len + 8 + 7) & ~(uint64_t)7;
}

#define OUT_CAP 65536
static uint8_t out[OUT_CAP];
static uint32_t starts[1024], lens[1024];

static void t_empty(void)
{
	struct synth s;
	const void *d;
	uint32_t len;
	uint64_t next = 123;
	size_t used = 99;

	synth_init(&s, 4096);
	CHECK(plb_rb_peek(&s.v, 0, &d, &len, &next) == PLB_RB_EMPTY);
	CHECK(next == 0);
	CHECK(plb_rb_available(&s.v) == 0);
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 16, 1, &used) == 0);
	CHECK(used == 0 && *s.cons == 0);
	/* Empty far from zero too. */
	synth_set_pos(&s, (1ULL << 40) + 8);
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 16, 1, &used) == 0);
	CHECK(*s.cons == (1ULL << 40) + 8);
	/* max_records == 0 reads nothing, even with data. */
	produce(&s, 1, 10, 0);
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, NULL, NULL, 0, 1, &used) == 0);
	CHECK(plb_rb_available(&s.v) == 24);
	synth_free(&s);
}

/* Every start position in the ring (so records cross the end at every
 * offset), payloads 0..300 bytes, and positions across 2^32. */
static void t_wrap(void)
{
	const uint64_t bases[] = {0, (1ULL << 32) - 2 * 4096, 7 * 4096};
	struct synth s;

	synth_init(&s, 4096);
	for (unsigned b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
		for (uint64_t k = 0; k < 4096 / 8; k++) {
			uint64_t start = bases[b] + k * 8;

			for (uint32_t sz = 0; sz <= 300; sz++) {
				const void *d;
				uint32_t len;
				uint64_t next;
				size_t used;

				synth_set_pos(&s, start);
				produce(&s, start + sz, sz, 0);
				CHECK(plb_rb_available(&s.v) == rec_size(sz));
				CHECK(plb_rb_peek(&s.v, start, &d, &len, &next) ==
				      PLB_RB_RECORD);
				CHECK(len == sz && next == start + rec_size(sz));
				CHECK(d == s.data + (start & s.v.mask) + 8);
				CHECK(verify(d, start + sz, sz));
				CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 8,
						  0, &used) == 1);
				CHECK(starts[0] == 0 && lens[0] == sz && used == sz);
				CHECK(verify(out, start + sz, sz));
				CHECK(*s.cons == start);
				CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 8,
						  1, &used) == 1);
				CHECK(*s.cons == s.prod_local);
				CHECK(plb_rb_available(&s.v) == 0);
			}
			/* Three records in one batch from this start. */
			synth_set_pos(&s, start);
			for (uint32_t i = 0; i < 3; i++)
				produce(&s, i, (uint32_t)(k % 61) + i * 9, 0);
			{
				size_t used;

				CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens,
						  8, 1, &used) == 3);
				for (uint32_t i = 0; i < 3; i++) {
					CHECK(starts[i] % 8 == 0);
					CHECK(lens[i] == (uint32_t)(k % 61) + i * 9);
					CHECK(verify(out + starts[i], i, lens[i]));
					if (i)
						CHECK(starts[i] >= starts[i - 1] + lens[i - 1]);
				}
				CHECK(used == starts[2] + lens[2]);
				CHECK(*s.cons == s.prod_local);
			}
			/* The largest record the kernel accepts: data size - 16
			 * payload (round_up(len + 8, 8) <= mask). */
			synth_set_pos(&s, start);
			produce(&s, 77, 4096 - 16, 0);
			{
				size_t used;

				CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens,
						  8, 1, &used) == 1);
				CHECK(lens[0] == 4096 - 16 && verify(out, 77, lens[0]));
			}
		}
	}
	synth_free(&s);
}

/* A busy head stops the walk; nothing behind it is read until it commits. */
static void t_busy(void)
{
	struct synth s;
	size_t used;
	void *a, *b, *c;

	synth_init(&s, 4096);
	synth_set_pos(&s, 4096 - 16); /* straddle the end too */
	a = synth_reserve(&s, 10);
	b = synth_reserve(&s, 20);
	fill(b, 2, 20);
	synth_commit(&s, b, 0);
	CHECK(plb_rb_peek(&s.v, *s.cons, NULL, NULL, NULL) == PLB_RB_BUSY);
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 16, 1, &used) == 0);
	CHECK(*s.cons == 4096 - 16);
	CHECK(plb_rb_available(&s.v) == rec_size(10) + rec_size(20));
	fill(a, 1, 10);
	CHECK(synth_commit(&s, a, 0) == 1); /* at the head: would wake */
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 16, 1, &used) == 2);
	CHECK(lens[0] == 10 && verify(out + starts[0], 1, 10));
	CHECK(lens[1] == 20 && verify(out + starts[1], 2, 20));
	CHECK(*s.cons == s.prod_local);

	/* Busy in the middle: A committed, B busy, C committed. */
	produce(&s, 3, 30, 0);
	b = synth_reserve(&s, 40);
	c = synth_reserve(&s, 50);
	fill(c, 5, 50);
	CHECK(synth_commit(&s, c, 0) == 0); /* not at the head: no wakeup */
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 16, 1, &used) == 1);
	CHECK(lens[0] == 30 && verify(out, 3, 30));
	CHECK(plb_rb_peek(&s.v, *s.cons, NULL, NULL, NULL) == PLB_RB_BUSY);
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 16, 0, &used) == 0);
	fill(b, 4, 40);
	CHECK(synth_commit(&s, b, 0) == 1);
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 16, 1, &used) == 2);
	CHECK(lens[0] == 40 && verify(out + starts[0], 4, 40));
	CHECK(lens[1] == 50 && verify(out + starts[1], 5, 50));
	CHECK(plb_rb_available(&s.v) == 0);
	synth_free(&s);
}

static void t_discard(void)
{
	struct synth s;
	const void *d;
	uint32_t len;
	uint64_t next;
	size_t used;

	synth_init(&s, 4096);
	synth_set_pos(&s, 4096 - 8);
	produce(&s, 1, 11, 0);
	produce(&s, 2, 22, 1);
	produce(&s, 3, 33, 0);
	CHECK(plb_rb_peek(&s.v, *s.cons + rec_size(11), &d, &len, &next) ==
	      PLB_RB_DISCARD);
	CHECK(len == 22 && next == *s.cons + rec_size(11) + rec_size(22));
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 16, 1, &used) == 2);
	CHECK(lens[0] == 11 && verify(out + starts[0], 1, 11));
	CHECK(lens[1] == 33 && verify(out + starts[1], 3, 33));
	CHECK(*s.cons == s.prod_local);

	/* Only discards: no record, but consuming moves past them. */
	produce(&s, 4, 44, 1);
	produce(&s, 5, 0, 1);
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 16, 0, &used) == 0);
	CHECK(*s.cons != s.prod_local);
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 16, 1, &used) == 0);
	CHECK(*s.cons == s.prod_local);
	synth_free(&s);
}

static void t_peek_and_consume(void)
{
	static uint8_t out2[OUT_CAP];
	uint32_t starts2[64], lens2[64];
	struct synth s;
	size_t used, used2;
	int n;

	synth_init(&s, 8192);
	synth_set_pos(&s, 8192 * 5 - 100 * 8);
	for (uint32_t i = 0; i < 40; i++)
		produce(&s, i, i * 13 % 97, i % 7 == 3);
	n = plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 64, 0, &used);
	CHECK(n == 40 - 6);
	CHECK(plb_rb_read(&s.v, out2, OUT_CAP, starts2, lens2, 64, 0, &used2) == n);
	CHECK(used == used2);
	CHECK(memcmp(starts, starts2, sizeof(uint32_t) * (size_t)n) == 0);
	CHECK(memcmp(lens, lens2, sizeof(uint32_t) * (size_t)n) == 0);
	for (int i = 0; i < n; i++) /* padding between records is not written */
		CHECK(memcmp(out + starts[i], out2 + starts[i], lens[i]) == 0);
	CHECK(*s.cons == 8192 * 5 - 100 * 8);
	for (int i = 0, seq = 0; i < n; i++, seq++) {
		if (seq % 7 == 3)
			seq++;
		CHECK(lens[i] == (uint32_t)(seq * 13 % 97));
		CHECK(verify(out + starts[i], (uint64_t)seq, lens[i]));
	}
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 64, 1, &used) == n);
	CHECK(*s.cons == s.prod_local);
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 64, 1, &used) == 0);
	synth_free(&s);
}

/* max_records, out_cap and the too-big head. */
static void t_limits(void)
{
	struct synth s;
	uint64_t c0;
	size_t used;

	synth_init(&s, 4096);
	for (uint32_t i = 0; i < 10; i++)
		produce(&s, i, 100, 0);
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 3, 1, &used) == 3);
	CHECK(*s.cons == 3 * rec_size(100));
	CHECK(starts[1] == 104 && starts[2] == 208 && used == 308);
	/* 250 bytes: 0..100, 104..204, the third would end at 308. */
	CHECK(plb_rb_read(&s.v, out, 250, starts, lens, 16, 1, &used) == 2);
	CHECK(verify(out + starts[1], 4, 100) && used == 204);
	/* 101 bytes: after the first, the next aligned offset (104) is already
	 * past the end. */
	CHECK(plb_rb_read(&s.v, out, 101, starts, lens, 16, 1, &used) == 1);
	CHECK(verify(out, 5, 100));
	/* Exactly the length fits. */
	CHECK(plb_rb_read(&s.v, out, 100, starts, lens, 16, 1, &used) == 1);
	CHECK(verify(out, 6, 100) && used == 100);
	/* The head alone is too big: an error, its size, nothing consumed. */
	c0 = *s.cons;
	CHECK(plb_rb_read(&s.v, out, 99, starts, lens, 16, 1, &used) == -EMSGSIZE);
	CHECK(used == 100 && *s.cons == c0);
	CHECK(plb_rb_read(&s.v, NULL, 0, starts, lens, 16, 1, &used) == -EMSGSIZE);
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 16, 1, &used) == 3);
	CHECK(verify(out + starts[2], 9, 100));
	/* A zero-length record fits in zero bytes. */
	produce(&s, 0, 0, 0);
	CHECK(plb_rb_read(&s.v, NULL, 0, starts, lens, 16, 1, &used) == 1);
	CHECK(lens[0] == 0 && used == 0);
	/* Bad arguments. */
	CHECK(plb_rb_read(NULL, out, OUT_CAP, starts, lens, 16, 1, &used) == -EINVAL);
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, NULL, lens, 16, 1, &used) == -EINVAL);
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 16, 1, NULL) == -EINVAL);
	CHECK(plb_rb_read(&s.v, NULL, 8, starts, lens, 16, 1, &used) == -EINVAL);
	synth_free(&s);
}

/* Headers and positions no kernel would produce. */
static void t_corrupt(void)
{
	struct synth s;
	uint32_t *hdr;
	size_t used;

	synth_init(&s, 4096);
	hdr = (uint32_t *)(void *)s.data;
	/* Length larger than the ring. */
	synth_set_pos(&s, 0);
	hdr[0] = 5000;
	*s.prod = 16;
	CHECK(plb_rb_peek(&s.v, 0, NULL, NULL, NULL) == PLB_RB_CORRUPT);
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 16, 1, &used) == -EBADMSG);
	CHECK(*s.cons == 0);
	/* ... also with DISCARD set, and the largest possible length. */
	hdr[0] = PLB_RB_DISCARD_BIT | (PLB_RB_DISCARD_BIT - 1);
	CHECK(plb_rb_peek(&s.v, 0, NULL, NULL, NULL) == PLB_RB_CORRUPT);
	/* A record running past producer_pos. */
	hdr[0] = 100;
	*s.prod = 16;
	CHECK(plb_rb_peek(&s.v, 0, NULL, NULL, NULL) == PLB_RB_CORRUPT);
	*s.prod = 104; /* the record needs round_up(100 + 8, 8) = 112 */
	CHECK(plb_rb_peek(&s.v, 0, NULL, NULL, NULL) == PLB_RB_CORRUPT);
	*s.prod = 108; /* unaligned producer position */
	CHECK(plb_rb_peek(&s.v, 0, NULL, NULL, NULL) == PLB_RB_CORRUPT);
	*s.prod = 112;
	CHECK(plb_rb_peek(&s.v, 0, NULL, NULL, NULL) == PLB_RB_RECORD);
	/* Producer more than a ring ahead; a position beyond the producer;
	 * an unaligned position. */
	*s.prod = 4096 + 8;
	CHECK(plb_rb_peek(&s.v, 0, NULL, NULL, NULL) == PLB_RB_CORRUPT);
	*s.prod = 112;
	CHECK(plb_rb_peek(&s.v, 120, NULL, NULL, NULL) == PLB_RB_CORRUPT);
	CHECK(plb_rb_peek(&s.v, 4, NULL, NULL, NULL) == PLB_RB_CORRUPT);
	/* A good record, then a corrupt one: the batch returns the good one,
	 * the next call reports the corruption and does not move. */
	synth_set_pos(&s, 64);
	produce(&s, 1, 24, 0);
	hdr = (uint32_t *)(void *)(s.data + 64 + rec_size(24));
	hdr[0] = 4096;
	*s.prod = 64 + rec_size(24) + 16;
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 16, 1, &used) == 1);
	CHECK(verify(out, 1, 24) && *s.cons == 64 + rec_size(24));
	CHECK(plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 16, 1, &used) == -EBADMSG);
	CHECK(*s.cons == 64 + rec_size(24));
	synth_free(&s);
}

static void t_map_args(void)
{
	struct plb_rb_mapping m;

	/* Validation only: mapping a real map needs the kernel (tested from
	 * Python). */
	CHECK(plb_rb_map(-1, 4096, &m) == -EBADF);
	CHECK(plb_rb_map(0, 0, &m) == -EINVAL);
	CHECK(plb_rb_map(0, 3 * 4096, &m) == -EINVAL);
	CHECK(plb_rb_map(0, 2048, &m) == -EINVAL);
	CHECK(plb_rb_map(0, 4096, NULL) == -EINVAL);
	CHECK(m.consumer_page == NULL && m.producer_area == NULL);
	plb_rb_unmap(&m);
	plb_rb_unmap(&m);
	plb_rb_unmap(NULL);
	/* A memfd is not a ring buffer map, but mmap accepts it: checks the
	 * mapping arithmetic and that unmap releases both. */
	{
		int fd = memfd_create("plb-fake-map", MFD_CLOEXEC);
		long page = sysconf(_SC_PAGESIZE);

		CHECK(fd >= 0 && ftruncate(fd, page + 2 * 16384) == 0);
		CHECK(plb_rb_map(fd, 16384, &m) == 0);
		CHECK(m.consumer_len == (size_t)page);
		CHECK(m.producer_len == (size_t)page + 2 * 16384);
		CHECK((const uint8_t *)m.view.data == (uint8_t *)m.producer_area + page);
		CHECK(m.view.mask == 16383);
		CHECK(plb_rb_available(&m.view) == 0);
		plb_rb_unmap(&m);
		CHECK(m.consumer_page == NULL);
		close(fd);
	}
}

/* A producer thread and a consumer walking concurrently. */
#define T_RING 65536
#define T_N 400000

static uint32_t t_size(uint64_t seq)
{
	return (uint32_t)(8 + seq * 7919 % 300);
}

static void *t_producer(void *arg)
{
	struct synth *s = arg;
	uint64_t seq = 0, spins = 0;

	while (seq < T_N) {
		void *a, *b;

		if (seq % 11 == 5) { /* a discarded reservation */
			while (!(a = synth_reserve(s, 17)))
				sched_yield(), spins++;
			synth_commit(s, a, 1);
		}
		if (seq % 5 == 2 && seq + 1 < T_N) {
			/* Two reservations committed in reverse order (two
			 * CPUs in the kernel): the consumer must wait for A. */
			while (!(a = synth_reserve(s, t_size(seq))))
				sched_yield(), spins++;
			while (!(b = synth_reserve(s, t_size(seq + 1))))
				sched_yield(), spins++;
			fill(b, seq + 1, t_size(seq + 1));
			synth_commit(s, b, 0);
			fill(a, seq, t_size(seq));
			synth_commit(s, a, 0);
			seq += 2;
			continue;
		}
		while (!(a = synth_reserve(s, t_size(seq))))
			sched_yield(), spins++;
		fill(a, seq, t_size(seq));
		synth_commit(s, a, 0);
		seq++;
	}
	return (void *)(uintptr_t)spins;
}

static void t_threaded(void)
{
	struct synth s;
	pthread_t th;
	uint64_t expect = 0, rounds = 0;
	void *spins;

	synth_init(&s, T_RING);
	synth_set_pos(&s, (1ULL << 32) - T_RING / 2);
	CHECK(pthread_create(&th, NULL, t_producer, &s) == 0);
	while (expect < T_N) {
		size_t used;
		int n;

		rounds++;
		if (rounds % 3 == 0) {
			/* Walk with peek/commit directly, as the merge core does. */
			uint64_t pos = plb_rb_consumer_pos(&s.v), next;
			const void *d;
			uint32_t len;
			int rc, k = 0;

			while (k < 50 &&
			       (rc = plb_rb_peek(&s.v, pos, &d, &len, &next)) !=
				       PLB_RB_EMPTY && rc != PLB_RB_BUSY) {
				CHECK(rc == PLB_RB_RECORD || rc == PLB_RB_DISCARD);
				if (rc == PLB_RB_RECORD) {
					CHECK(len == t_size(expect));
					CHECK(verify(d, expect, len));
					expect++;
					k++;
				}
				pos = next;
			}
			plb_rb_commit(&s.v, pos);
			if (k == 0)
				sched_yield();
			continue;
		}
		n = plb_rb_read(&s.v, out, OUT_CAP, starts, lens, 128, 1, &used);
		CHECK(n >= 0);
		for (int i = 0; i < n; i++) {
			CHECK(lens[i] == t_size(expect));
			CHECK(verify(out + starts[i], expect, lens[i]));
			expect++;
		}
		if (n == 0)
			sched_yield();
	}
	CHECK(pthread_join(th, &spins) == 0);
	CHECK(plb_rb_available(&s.v) == 0);
	printf("threaded: %d records, %llu consumer rounds, %llu producer full-waits\n",
	       T_N, (unsigned long long)rounds, (unsigned long long)(uintptr_t)spins);
	synth_free(&s);
}

int main(void)
{
	t_empty();
	t_wrap();
	t_busy();
	t_discard();
	t_peek_and_consume();
	t_limits();
	t_corrupt();
	t_map_args();
	t_threaded();
	printf("test_ringbuf: ok\n");
	return 0;
}
