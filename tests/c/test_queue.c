/* test_queue.c - the bounded record queue and its side ring of drops. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "plb_queue.c"

#include <stdio.h>
#include <unistd.h>

#include "check.h"

static uint8_t out[1 << 16];
static uint32_t starts[4096], lens[4096];

/* The invariants every snapshot must satisfy. */
static void check_inv(struct plb_queue *q, struct plb_queue_stats *st)
{
	struct plb_queue_stats tmp;

	if (!st)
		st = &tmp;
	plb_queue_stats(q, st);
	CHECK(st->pushed == st->popped + st->dropped + st->current_size);
	CHECK(st->dropped ==
	      st->dropped_popped + st->dropped_pending + st->dropped_unhandled);
	CHECK(st->dropped_queued == st->dropped_popped + st->dropped_pending);
	CHECK(st->current_size <= st->max_pending);
	CHECK(st->current_bytes <= st->byte_cap);
	CHECK(st->high_water <= st->max_pending);
	CHECK(st->queue_full_count <= st->dropped);
}

static void rec(uint8_t *p, uint32_t seq, uint32_t len)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)(seq * 31 + i);
	if (len >= 4)
		memcpy(p, &seq, 4);
}

static int rec_ok(const uint8_t *p, uint32_t seq, uint32_t len)
{
	uint32_t got;

	if (len >= 4) {
		memcpy(&got, p, 4);
		if (got != seq)
			return 0;
	}
	for (uint32_t i = len >= 4 ? 4 : 0; i < len; i++)
		if (p[i] != (uint8_t)(seq * 31 + i))
			return 0;
	return 1;
}

static int push_seq(struct plb_queue *q, uint32_t seq, uint32_t len)
{
	uint8_t buf[4096];

	rec(buf, seq, len);
	return plb_queue_push(q, buf, len);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void t_create(void)
{
	struct plb_queue *q;

	errno = 0;
	CHECK(!plb_queue_create(0, 100, 0, 0) && errno == EINVAL);
	CHECK(!plb_queue_create(10, 0, 0, 0) && errno == EINVAL);
	CHECK(!plb_queue_create(10, 100, 4, 0) && errno == EINVAL);
	CHECK(!plb_queue_create((1U << 31) + 1, 100, 0, 0) && errno == EINVAL);
	q = plb_queue_create(1, 1, 0, 0);
	CHECK(q);
	plb_queue_destroy(q);
	plb_queue_destroy(NULL);
}

static void t_basic(void)
{
	struct plb_queue *q = plb_queue_create(16, 4096, 4, 1024);
	struct plb_queue_stats st;
	size_t used;
	int n;

	CHECK(q);
	CHECK(plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 16, 0, &used) == 0);
	for (uint32_t i = 0; i < 10; i++)
		CHECK(push_seq(q, i, i * 5) == 1);
	check_inv(q, &st);
	CHECK(st.current_size == 10 && st.high_water == 10 && st.pushed == 10);
	n = plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 4, 0, &used);
	CHECK(n == 4);
	for (int i = 0; i < n; i++) {
		CHECK(starts[i] % 8 == 0 && lens[i] == (uint32_t)i * 5);
		CHECK(rec_ok(out + starts[i], (uint32_t)i, lens[i]));
	}
	CHECK(used == starts[3] + lens[3]);
	n = plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 16, -1, &used);
	CHECK(n == 6);
	for (int i = 0; i < n; i++)
		CHECK(rec_ok(out + starts[i], (uint32_t)i + 4, lens[i]));
	check_inv(q, &st);
	CHECK(st.popped == 10 && st.current_size == 0 && st.current_bytes == 0);
	CHECK(st.dropped == 0 && st.queue_full_count == 0);
	/* max == 0 takes nothing. */
	CHECK(push_seq(q, 99, 8) == 1);
	CHECK(plb_queue_pop_batch(q, out, sizeof(out), NULL, NULL, 0, 0, &used) == 0);
	CHECK(plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 1, 0, &used) == 1);
	/* Bad arguments. */
	CHECK(plb_queue_pop_batch(NULL, out, 8, starts, lens, 1, 0, &used) == -EINVAL);
	CHECK(plb_queue_pop_batch(q, out, 8, NULL, lens, 1, 0, &used) == -EINVAL);
	CHECK(plb_queue_pop_batch(q, out, 8, starts, lens, 1, 0, NULL) == -EINVAL);
	CHECK(plb_queue_pop_batch(q, NULL, 8, starts, lens, 1, 0, &used) == -EINVAL);
	CHECK(plb_queue_pop_dropped_batch(q, NULL, 8, starts, lens, 1, &used) == -EINVAL);
	plb_queue_destroy(q);
}

/* The count bound, the side ring, and overflow episodes. */
static void t_count_bound(void)
{
	struct plb_queue *q = plb_queue_create(4, 4096, 2, 4096);
	struct plb_queue_stats st;
	size_t used;
	int n;

	for (uint32_t i = 0; i < 7; i++)
		CHECK(push_seq(q, i, 16) == (i < 4));
	check_inv(q, &st);
	CHECK(st.current_size == 4 && st.dropped == 3 && st.queue_full_count == 1);
	CHECK(st.dropped_pending == 2 && st.dropped_unhandled == 1);
	CHECK(st.high_water == 4);
	/* The side ring keeps the first drops, in order. */
	n = plb_queue_pop_dropped_batch(q, out, sizeof(out), starts, lens, 8, &used);
	CHECK(n == 2 && rec_ok(out + starts[0], 4, 16) && rec_ok(out + starts[1], 5, 16));
	CHECK(plb_queue_pop_dropped_batch(q, out, sizeof(out), starts, lens, 8, &used) == 0);
	/* Room again: accepted; full again: a second episode. */
	CHECK(plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 1, 0, &used) == 1);
	CHECK(rec_ok(out, 0, 16));
	CHECK(push_seq(q, 7, 16) == 1);
	CHECK(push_seq(q, 8, 16) == 0);
	CHECK(push_seq(q, 9, 16) == 0);
	check_inv(q, &st);
	CHECK(st.queue_full_count == 2 && st.dropped == 5 && st.dropped_pending == 2);
	n = plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 16, 0, &used);
	CHECK(n == 4);
	for (int i = 0; i < 4; i++)
		CHECK(rec_ok(out + starts[i], (uint32_t)(i < 3 ? i + 1 : 7), 16));
	check_inv(q, &st);
	CHECK(st.pushed == 10 && st.popped == 5);
	plb_queue_destroy(q);

	/* No side ring: drops only counted. */
	q = plb_queue_create(1, 64, 0, 0);
	CHECK(push_seq(q, 0, 8) == 1 && push_seq(q, 1, 8) == 0);
	CHECK(plb_queue_pop_dropped_batch(q, out, sizeof(out), starts, lens, 8, &used) == 0);
	check_inv(q, &st);
	CHECK(st.dropped_unhandled == 1);
	plb_queue_destroy(q);
}

/* The byte bound, records larger than the arena, zero-length records. */
static void t_byte_bound(void)
{
	struct plb_queue *q = plb_queue_create(100, 100, 8, 64);
	struct plb_queue_stats st;
	size_t used;

	CHECK(push_seq(q, 0, 30) == 1);
	CHECK(push_seq(q, 1, 30) == 1);
	CHECK(push_seq(q, 2, 30) == 1);
	CHECK(push_seq(q, 3, 30) == 0); /* 120 > 100 */
	CHECK(push_seq(q, 4, 10) == 1); /* 100 exactly */
	CHECK(push_seq(q, 5, 0) == 1);  /* zero bytes always fit the byte bound */
	check_inv(q, &st);
	CHECK(st.current_bytes == 100 && st.current_size == 5 && st.queue_full_count == 1);
	/* Larger than the whole arena: dropped, not an overflow episode; too
	 * big for the side ring as well. */
	CHECK(plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 100, 0, &used) == 5);
	CHECK(rec_ok(out + starts[3], 4, 10) && lens[4] == 0);
	CHECK(push_seq(q, 6, 101) == 0);
	check_inv(q, &st);
	CHECK(st.queue_full_count == 1 && st.dropped == 2 && st.dropped_unhandled == 1);
	/* A whole-arena record fits an empty queue wherever the tail was. */
	CHECK(push_seq(q, 7, 7) == 1);
	CHECK(plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 1, 0, &used) == 1);
	CHECK(push_seq(q, 8, 100) == 1);
	CHECK(plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 1, 0, &used) == 1);
	CHECK(rec_ok(out, 8, 100));
	plb_queue_destroy(q);
}

/* pop's out_cap: partial batches and a head that does not fit. */
static void t_out_cap(void)
{
	struct plb_queue *q = plb_queue_create(16, 4096, 0, 0);
	size_t used;

	for (uint32_t i = 0; i < 4; i++)
		CHECK(push_seq(q, i, 100) == 1);
	CHECK(plb_queue_pop_batch(q, out, 250, starts, lens, 16, 0, &used) == 2);
	CHECK(starts[1] == 104 && used == 204);
	CHECK(plb_queue_pop_batch(q, out, 99, starts, lens, 16, 0, &used) == -EMSGSIZE);
	CHECK(used == 100);
	CHECK(plb_queue_pop_batch(q, out, 100, starts, lens, 16, 0, &used) == 1);
	CHECK(rec_ok(out, 2, 100));
	CHECK(plb_queue_pop_batch(q, out, 1000, starts, lens, 16, 0, &used) == 1);
	CHECK(rec_ok(out, 3, 100));
	check_inv(q, NULL);
	plb_queue_destroy(q);
}

/* Random pushes and pops over a small arena: every wrap position. */
static void t_random(void)
{
	struct plb_queue *q = plb_queue_create(37, 1000, 16, 300);
	uint32_t next_push = 0, next_pop = 0, next_drop = 0, unhandled = 0;
	uint32_t rng = 12345;
	struct plb_queue_stats st;
	size_t used;

	for (int it = 0; it < 200000; it++) {
		rng = rng * 1103515245u + 12345u;
		if ((rng >> 16) % 3 != 0) {
			uint32_t len = (rng >> 8) % 120;
			uint64_t before;

			plb_queue_stats(q, &st);
			before = st.dropped_unhandled;
			if (!push_seq(q, next_push, len)) {
				plb_queue_stats(q, &st);
				unhandled += (uint32_t)(st.dropped_unhandled - before);
			}
			next_push++;
		} else {
			int n = plb_queue_pop_batch(q, out, (rng >> 4) % 600, starts,
						    lens, (rng >> 20) % 9, 0, &used);

			CHECK(n >= 0 || n == -EMSGSIZE);
			for (int i = 0; i < n; i++) {
				uint32_t seq;

				if (lens[i] >= 4) {
					memcpy(&seq, out + starts[i], 4);
					CHECK(seq >= next_pop);
					next_pop = seq + 1;
				}
			}
			n = plb_queue_pop_dropped_batch(q, out, 4096, starts, lens, 3, &used);
			CHECK(n >= 0);
			for (int i = 0; i < n; i++) {
				uint32_t seq;

				if (lens[i] >= 4) {
					memcpy(&seq, out + starts[i], 4);
					CHECK(seq >= next_drop);
					next_drop = seq + 1;
					CHECK(rec_ok(out + starts[i], seq, lens[i]));
				}
			}
		}
		if (it % 97 == 0)
			check_inv(q, NULL);
	}
	check_inv(q, &st);
	CHECK(st.pushed == next_push && st.dropped_unhandled == unhandled);
	CHECK(st.popped > 1000 && st.dropped > 1000);
	plb_queue_destroy(q);
}

struct waiter {
	struct plb_queue *q;
	int timeout_ms;
	int rc;
	double ms;
};

static void *t_waiter(void *arg)
{
	static uint8_t wout[256];
	uint32_t ws[4], wl[4];
	struct waiter *w = arg;
	double t0 = now_ms();
	size_t used;

	w->rc = plb_queue_pop_batch(w->q, wout, sizeof(wout), ws, wl, 4,
				    w->timeout_ms, &used);
	w->ms = now_ms() - t0;
	return NULL;
}

/* Timeouts, wakeups by push, close waking blocked consumers, drain after close. */
static void t_blocking(void)
{
	struct plb_queue *q = plb_queue_create(8, 256, 0, 0);
	struct waiter w[3];
	pthread_t th[3];
	struct plb_queue_stats st;
	double t0;
	size_t used;

	t0 = now_ms();
	CHECK(plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 4, 50, &used) == 0);
	CHECK(now_ms() - t0 >= 45);

	/* A push wakes a waiter before its (long) timeout. */
	w[0] = (struct waiter){q, 60000, 99, 0};
	CHECK(pthread_create(&th[0], NULL, t_waiter, &w[0]) == 0);
	usleep(20000);
	CHECK(push_seq(q, 1, 8) == 1);
	pthread_join(th[0], NULL);
	CHECK(w[0].rc == 1 && w[0].ms < w[0].timeout_ms);

	/* Close wakes every blocked consumer (infinite and bounded waits). */
	w[0] = (struct waiter){q, -1, 99, 0};
	w[1] = (struct waiter){q, -1, 99, 0};
	w[2] = (struct waiter){q, 60000, 99, 0};
	for (int i = 0; i < 3; i++)
		CHECK(pthread_create(&th[i], NULL, t_waiter, &w[i]) == 0);
	usleep(30000);
	plb_queue_close(q);
	for (int i = 0; i < 3; i++) {
		pthread_join(th[i], NULL);
		CHECK(w[i].rc == -EPIPE); /* woken by close: a timeout would return 0 */
	}
	plb_queue_close(q); /* idempotent */
	/* After close: pushes are dropped (counted), pops say closed. */
	CHECK(push_seq(q, 2, 8) == 0);
	CHECK(plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 4, -1, &used) == -EPIPE);
	check_inv(q, &st);
	CHECK(st.closed && st.dropped == 1 && st.queue_full_count == 0);
	plb_queue_destroy(q);

	/* Closed with records left: they drain first, then -EPIPE. */
	q = plb_queue_create(8, 256, 0, 0);
	CHECK(push_seq(q, 1, 8) == 1 && push_seq(q, 2, 8) == 1);
	plb_queue_close(q);
	CHECK(plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 1, -1, &used) == 1);
	CHECK(rec_ok(out, 1, 8));
	CHECK(plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 4, 0, &used) == 1);
	CHECK(rec_ok(out, 2, 8));
	CHECK(plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 4, 0, &used) == -EPIPE);
	plb_queue_destroy(q);

	/* Destroy while a consumer waits inside: refused (-EBUSY), nothing freed;
	 * once it has left, destroy frees (ASan would see a use after free). */
	q = plb_queue_create(8, 256, 0, 0);
	w[0] = (struct waiter){q, -1, 99, 0};
	CHECK(pthread_create(&th[0], NULL, t_waiter, &w[0]) == 0);
	usleep(200000); /* the waiter is blocked in pop_batch by now */
	CHECK(plb_queue_destroy(q) == -EBUSY);
	plb_queue_close(q);
	pthread_join(th[0], NULL);
	CHECK(w[0].rc == -EPIPE);
	CHECK(plb_queue_destroy(q) == 0);
}

/* One producer, two consumers (one sleeping to force drops), one thread
 * draining the side ring; exact accounting at the end. */
#define TN 1000000U

struct tctx {
	struct plb_queue *q;
	uint8_t *seen; /* 1 main, 2 side */
	int slow;
	uint64_t got;
};

static void *t_consumer(void *arg)
{
	struct tctx *c = arg;
	uint8_t *buf = malloc(1 << 16);
	uint32_t *s = malloc(256 * sizeof(*s)), *l = malloc(256 * sizeof(*l));
	uint32_t last = 0;
	int have_last = 0;
	size_t used;
	int n, rounds = 0;

	while ((n = plb_queue_pop_batch(c->q, buf, 1 << 16, s, l, 256, 1000,
					&used)) != -EPIPE) {
		CHECK(n >= 0);
		for (int i = 0; i < n; i++) {
			uint32_t seq;

			CHECK(l[i] >= 4);
			memcpy(&seq, buf + s[i], 4);
			CHECK(seq < TN && rec_ok(buf + s[i], seq, l[i]));
			CHECK(__atomic_exchange_n(&c->seen[seq], 1, __ATOMIC_RELAXED) == 0);
			/* Batches come out in order; with two consumers, each
			 * one's view is still increasing. */
			CHECK(!have_last || seq > last);
			last = seq;
			have_last = 1;
		}
		c->got += (uint64_t)n;
		if (c->slow && ++rounds % 4 == 0)
			usleep(200);
	}
	free(buf);
	free(s);
	free(l);
	return NULL;
}

struct dctx {
	struct plb_queue *q;
	uint8_t *seen;
	int stop;
	uint64_t got;
};

static void *t_drop_drainer(void *arg)
{
	struct dctx *d = arg;
	uint8_t *buf = malloc(1 << 14);
	uint32_t s[64], l[64], last = 0;
	int have_last = 0;
	size_t used;

	for (;;) {
		int stop = __atomic_load_n(&d->stop, __ATOMIC_ACQUIRE);
		int n = plb_queue_pop_dropped_batch(d->q, buf, 1 << 14, s, l, 64, &used);

		CHECK(n >= 0);
		for (int i = 0; i < n; i++) {
			uint32_t seq;

			memcpy(&seq, buf + s[i], 4);
			CHECK(seq < TN && rec_ok(buf + s[i], seq, l[i]));
			CHECK(__atomic_exchange_n(&d->seen[seq], 2, __ATOMIC_RELAXED) == 0);
			CHECK(!have_last || seq > last);
			last = seq;
			have_last = 1;
		}
		d->got += (uint64_t)n;
		if (n == 0) {
			if (stop)
				break;
			usleep(500);
		}
	}
	free(buf);
	return NULL;
}

static void t_threaded(void)
{
	struct plb_queue *q = plb_queue_create(1000, 256 * 1024, 256, 16 * 1024);
	uint8_t *seen = calloc(TN, 1);
	struct tctx c[2] = {{q, seen, 1, 0}, {q, seen, 0, 0}};
	struct dctx d = {q, seen, 0, 0};
	pthread_t tc[2], td;
	struct plb_queue_stats st;
	uint64_t accepted = 0, missing = 0;

	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&tc[i], NULL, t_consumer, &c[i]) == 0);
	CHECK(pthread_create(&td, NULL, t_drop_drainer, &d) == 0);
	for (uint32_t seq = 0; seq < TN; seq++) {
		accepted += (uint64_t)push_seq(q, seq, 4 + seq % 200);
		if (seq % 50000 == 0)
			check_inv(q, NULL);
		if (seq % 5000 == 4999)
			usleep(300); /* let the consumers catch up now and then */
	}
	plb_queue_close(q);
	for (int i = 0; i < 2; i++)
		pthread_join(tc[i], NULL);
	__atomic_store_n(&d.stop, 1, __ATOMIC_RELEASE);
	pthread_join(td, NULL);

	check_inv(q, &st);
	CHECK(st.pushed == TN && st.current_size == 0 && st.dropped_pending == 0);
	CHECK(st.popped == accepted && c[0].got + c[1].got == accepted);
	CHECK(d.got == st.dropped_popped);
	for (uint32_t seq = 0; seq < TN; seq++)
		missing += seen[seq] == 0;
	CHECK(missing == st.dropped_unhandled);
	CHECK(st.high_water <= 1000);
	printf("queue threaded: %u pushed, %llu popped, %llu dropped (%llu handled, "
	       "%llu unhandled), %llu overflow episodes, high water %llu\n",
	       TN, (unsigned long long)st.popped, (unsigned long long)st.dropped,
	       (unsigned long long)st.dropped_popped,
	       (unsigned long long)st.dropped_unhandled,
	       (unsigned long long)st.queue_full_count,
	       (unsigned long long)st.high_water);
	free(seen);
	plb_queue_destroy(q);
}

int main(void)
{
	t_create();
	t_basic();
	t_count_bound();
	t_byte_bound();
	t_out_cap();
	t_random();
	t_blocking();
	t_threaded();
	printf("test_queue: ok\n");
	return 0;
}
