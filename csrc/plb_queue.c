/* plb_queue.c - bounded record queue between the native reader thread and a
 * consumer running without the GIL (see plb_queue.h for the contract).
 *
 * One mutex and one condition variable: simple, and the producer never waits
 * on anything but that short critical section. Records live in a byte arena
 * addressed by ever-increasing 64-bit positions (never reused, so no ABA);
 * a slot ring remembers each record's arena position and length. A record
 * is stored contiguously: if it would run past the arena's end, the tail is
 * skipped and the record starts at the arena's beginning.
 *
 * pop_batch copies out in three steps: (1) under the lock, wait and pick the
 * records that fit; (2) without the lock, memcpy them - the producer only
 * writes arena bytes and slots that are free, and these stay live until (3);
 * (3) under the lock, free them. A consumer_busy flag keeps a second consumer
 * out of (1)-(3) while still honouring its timeout on the condvar.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "plb_queue.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct plb_slot {
	uint64_t apos; /* arena position of the first byte */
	uint32_t len;
};

/* A bounded ring of variable-length records: nslots records, acap bytes. */
struct plb_bring {
	struct plb_slot *slots;
	uint8_t *arena;
	uint64_t acap;
	uint32_t nslots;
	uint64_t s_head, s_tail; /* slot sequence numbers: live = [s_head, s_tail) */
	uint64_t a_head, a_tail; /* arena positions: live bytes = [a_head, a_tail) */
	uint64_t bytes;          /* payload bytes of the live records */
};

struct plb_queue {
	pthread_mutex_t mu;
	pthread_cond_t cond;  /* data arrived, queue closed, or consumer_busy cleared */
	struct plb_bring main;
	struct plb_bring side; /* dropped records; nslots == 0 when disabled */
	uint32_t waiters;      /* consumers blocked on cond */
	int consumer_busy;     /* a pop_batch is between its steps (1) and (3) */
	int closed;
	int was_full;          /* the last push was refused for lack of room */
	uint64_t pushed, popped, dropped, queue_full_count;
	uint64_t dropped_queued, dropped_popped, dropped_unhandled;
	uint64_t high_water;
	uint64_t max_pending, byte_cap;
};

static int plb_bring_init(struct plb_bring *r, uint32_t nslots, size_t acap)
{
	memset(r, 0, sizeof(*r));
	if (nslots == 0)
		return 0;
	r->slots = calloc(nslots, sizeof(*r->slots));
	r->arena = malloc(acap ? acap : 1);
	if (!r->slots || !r->arena) {
		free(r->slots);
		free(r->arena);
		memset(r, 0, sizeof(*r));
		return -ENOMEM;
	}
	r->nslots = nslots;
	r->acap = acap;
	return 0;
}

static void plb_bring_free(struct plb_bring *r)
{
	free(r->slots);
	free(r->arena);
	memset(r, 0, sizeof(*r));
}

static inline uint64_t plb_bring_count(const struct plb_bring *r)
{
	return r->s_tail - r->s_head;
}

/* Where a record of len bytes would start, or UINT64_MAX if it does not fit
 * now (count bound or byte bound). Caller holds the lock. */
static uint64_t plb_bring_fit(struct plb_bring *r, uint32_t len)
{
	uint64_t off, start;

	if (r->nslots == 0 || len > r->acap ||
	    plb_bring_count(r) >= r->nslots)
		return UINT64_MAX;
	if (plb_bring_count(r) == 0) {
		/* Empty: restart at the arena's beginning, so any record up to
		 * acap fits and no skipped tail is wasted. No one reads the
		 * arena now (a consumer between steps (1) and (3) holds live
		 * records, so the ring is not empty then). */
		r->a_head = r->a_tail = 0;
	}
	off = r->a_tail % r->acap;
	start = r->a_tail;
	if (off + len > r->acap)
		start += r->acap - off; /* skip the tail: records never wrap */
	if (start + len - r->a_head > r->acap)
		return UINT64_MAX;
	return start;
}

/* Store a record at the position plb_bring_fit returned. Lock held. */
static void plb_bring_put(struct plb_bring *r, uint64_t start,
			  const void *data, uint32_t len)
{
	struct plb_slot *s = &r->slots[r->s_tail % r->nslots];

	if (len)
		memcpy(r->arena + start % r->acap, data, len);
	s->apos = start;
	s->len = len;
	r->s_tail++;
	r->a_tail = start + len;
	r->bytes += len;
}

/* Choose the records (from the head) that fit in out_cap, writing their out
 * offsets; returns n, or -EMSGSIZE (with *need the head's length) when the
 * head alone does not fit. Lock held (or the records are ours, see step 2). */
static int plb_bring_layout(const struct plb_bring *r, size_t out_cap,
			    uint32_t *starts, uint32_t *lens, uint32_t max,
			    size_t *used_out)
{
	uint64_t cap = out_cap > UINT32_MAX ? UINT32_MAX : (uint64_t)out_cap;
	uint64_t avail = plb_bring_count(r), off = 0, used = 0;
	uint32_t n = 0;

	while (n < max && n < avail) {
		const struct plb_slot *s = &r->slots[(r->s_head + n) % r->nslots];

		if (off > cap || s->len > cap - off) {
			if (n == 0) {
				*used_out = s->len;
				return -EMSGSIZE;
			}
			break;
		}
		starts[n] = (uint32_t)off;
		lens[n] = s->len;
		used = off + s->len;
		off = (used + 7) & ~(uint64_t)7;
		n++;
	}
	*used_out = (size_t)used;
	return (int)n;
}

/* Copy the n head records laid out by plb_bring_layout into out. */
static void plb_bring_copy(const struct plb_bring *r, uint8_t *out,
			   const uint32_t *starts, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		const struct plb_slot *s = &r->slots[(r->s_head + i) % r->nslots];

		if (s->len)
			memcpy(out + starts[i], r->arena + s->apos % r->acap, s->len);
	}
}

/* Free the n head records. Lock held. */
static void plb_bring_release(struct plb_bring *r, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		const struct plb_slot *s = &r->slots[r->s_head % r->nslots];

		/* Everything up to this record's end is free now, including a
		 * skipped tail before it. */
		r->a_head = s->apos + s->len;
		r->bytes -= s->len;
		r->s_head++;
	}
}

/* Allocate a queue bounded by record count and payload bytes. */
struct plb_queue *plb_queue_create(uint32_t max_pending, size_t byte_cap,
				   uint32_t drop_cap, size_t drop_byte_cap)
{
	pthread_condattr_t ca;
	struct plb_queue *q;
	int err;

	/* Counts come back as int, and lengths as uint32_t. */
	if (max_pending == 0 || byte_cap == 0 || max_pending > (1U << 31) ||
	    drop_cap > (1U << 31) || (drop_cap && drop_byte_cap == 0)) {
		errno = EINVAL;
		return NULL;
	}
	q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	if (plb_bring_init(&q->main, max_pending, byte_cap) ||
	    plb_bring_init(&q->side, drop_cap, drop_byte_cap)) {
		plb_bring_free(&q->main);
		free(q);
		errno = ENOMEM;
		return NULL;
	}
	/* CLOCK_MONOTONIC: a wall-clock jump must not stretch a timeout. */
	err = pthread_condattr_init(&ca);
	if (!err) {
		err = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		if (!err)
			err = pthread_cond_init(&q->cond, &ca);
		pthread_condattr_destroy(&ca);
	}
	if (!err) {
		err = pthread_mutex_init(&q->mu, NULL);
		if (err)
			pthread_cond_destroy(&q->cond);
	}
	if (err) {
		plb_bring_free(&q->main);
		plb_bring_free(&q->side);
		free(q);
		errno = err;
		return NULL;
	}
	q->max_pending = max_pending;
	q->byte_cap = byte_cap;
	return q;
}

/* Free the queue and its memory (no concurrent calls allowed). */
int plb_queue_destroy(struct plb_queue *q)
{
	int busy;

	if (!q)
		return 0;
	pthread_mutex_lock(&q->mu);
	busy = q->waiters || q->consumer_busy;
	pthread_mutex_unlock(&q->mu);
	if (busy)
		return -EBUSY; /* a caller broke the contract: leak rather than free under it */
	pthread_cond_destroy(&q->cond);
	pthread_mutex_destroy(&q->mu);
	plb_bring_free(&q->main);
	plb_bring_free(&q->side);
	free(q);
	return 0;
}

/* Queue a copy of a record, or drop it when full; never blocks. */
int plb_queue_push(struct plb_queue *q, const void *data, uint32_t len)
{
	uint64_t start;

	pthread_mutex_lock(&q->mu);
	q->pushed++;
	if (q->closed) {
		/* Nobody will pop it; count it so the invariant stays exact. */
		q->dropped++;
		q->dropped_unhandled++;
		pthread_mutex_unlock(&q->mu);
		return 0;
	}
	start = plb_bring_fit(&q->main, len);
	if (start != UINT64_MAX) {
		plb_bring_put(&q->main, start, data, len);
		if (plb_bring_count(&q->main) > q->high_water)
			q->high_water = plb_bring_count(&q->main);
		q->was_full = 0;
		/* glibc's signal is cheap without waiters, but skip the call. */
		if (q->waiters)
			pthread_cond_signal(&q->cond);
		pthread_mutex_unlock(&q->mu);
		return 1;
	}

	q->dropped++;
	/* A record larger than the whole arena never fits: that is not the
	 * queue being full, so it does not start an overflow episode. */
	if (len <= q->main.acap && !q->was_full) {
		q->queue_full_count++;
		q->was_full = 1;
	}
	start = plb_bring_fit(&q->side, len);
	if (start != UINT64_MAX) {
		plb_bring_put(&q->side, start, data, len);
		q->dropped_queued++;
	} else {
		q->dropped_unhandled++;
	}
	pthread_mutex_unlock(&q->mu);
	return 0;
}

/* Deadline = now + ms on CLOCK_MONOTONIC. */
static void plb_deadline(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* Wait (bounded) for records and move a batch of them into caller memory. */
int plb_queue_pop_batch(struct plb_queue *q, uint8_t *out, size_t out_cap,
			uint32_t *starts, uint32_t *lens, uint32_t max,
			int timeout_ms, size_t *out_used)
{
	struct timespec deadline;
	int n, rc;

	if (!q || !out_used || (max && (!starts || !lens)) || (!out && out_cap))
		return -EINVAL;
	*out_used = 0;
	if (timeout_ms > 0)
		plb_deadline(&deadline, timeout_ms);

	pthread_mutex_lock(&q->mu);
	/* Step 1: wait until there is a record and no other consumer is
	 * mid-copy, or the queue is closed and drained, or time is up. */
	for (;;) {
		if (!q->consumer_busy && plb_bring_count(&q->main) > 0)
			break;
		if (q->closed && plb_bring_count(&q->main) == 0) {
			pthread_mutex_unlock(&q->mu);
			return -EPIPE;
		}
		if (timeout_ms == 0) {
			pthread_mutex_unlock(&q->mu);
			return 0;
		}
		q->waiters++;
		if (timeout_ms < 0)
			rc = pthread_cond_wait(&q->cond, &q->mu);
		else
			rc = pthread_cond_timedwait(&q->cond, &q->mu, &deadline);
		q->waiters--;
		if (rc == ETIMEDOUT) {
			/* Take what arrived right at the deadline, if anything. */
			if (!q->consumer_busy && plb_bring_count(&q->main) > 0)
				break;
			pthread_mutex_unlock(&q->mu);
			return 0;
		}
	}
	if (max == 0) {
		pthread_mutex_unlock(&q->mu);
		return 0;
	}
	n = plb_bring_layout(&q->main, out_cap, starts, lens, max, out_used);
	if (n <= 0) {
		pthread_mutex_unlock(&q->mu);
		return n; /* -EMSGSIZE: the record stays queued */
	}
	q->consumer_busy = 1;
	pthread_mutex_unlock(&q->mu);

	/* Step 2: the n head records cannot change under us: the producer only
	 * writes free slots and free arena bytes, and these are not freed
	 * before step 3. The mutex orders the producer's writes before us. */
	plb_bring_copy(&q->main, out, starts, (uint32_t)n);

	/* Step 3: free them, and let other consumers in. */
	pthread_mutex_lock(&q->mu);
	plb_bring_release(&q->main, (uint32_t)n);
	q->popped += (uint64_t)n;
	q->consumer_busy = 0;
	if (q->waiters)
		pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->mu);
	return n;
}

/* Move a batch of dropped records (for the drop handler) into caller memory. */
int plb_queue_pop_dropped_batch(struct plb_queue *q, uint8_t *out,
				size_t out_cap, uint32_t *starts,
				uint32_t *lens, uint32_t max, size_t *out_used)
{
	int n;

	if (!q || !out_used || (max && (!starts || !lens)) || (!out && out_cap))
		return -EINVAL;
	*out_used = 0;
	if (max == 0)
		return 0;
	/* Drops are the rare path: copy under the lock, keep it simple. */
	pthread_mutex_lock(&q->mu);
	if (q->side.nslots == 0) {
		pthread_mutex_unlock(&q->mu);
		return 0;
	}
	n = plb_bring_layout(&q->side, out_cap, starts, lens, max, out_used);
	if (n > 0) {
		plb_bring_copy(&q->side, out, starts, (uint32_t)n);
		plb_bring_release(&q->side, (uint32_t)n);
		q->dropped_popped += (uint64_t)n;
	}
	pthread_mutex_unlock(&q->mu);
	return n;
}

/* Close the queue and wake every waiting consumer. */
void plb_queue_close(struct plb_queue *q)
{
	pthread_mutex_lock(&q->mu);
	q->closed = 1;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->mu);
}

/* Snapshot the counters under the lock, so the invariants hold exactly. */
void plb_queue_stats(struct plb_queue *q, struct plb_queue_stats *out)
{
	pthread_mutex_lock(&q->mu);
	out->pushed = q->pushed;
	out->popped = q->popped;
	out->dropped = q->dropped;
	out->queue_full_count = q->queue_full_count;
	out->dropped_queued = q->dropped_queued;
	out->dropped_popped = q->dropped_popped;
	out->dropped_pending = plb_bring_count(&q->side);
	out->dropped_unhandled = q->dropped_unhandled;
	out->current_size = plb_bring_count(&q->main);
	out->current_bytes = q->main.bytes;
	out->high_water = q->high_water;
	out->max_pending = q->max_pending;
	out->byte_cap = q->byte_cap;
	out->closed = q->closed;
	pthread_mutex_unlock(&q->mu);
}
