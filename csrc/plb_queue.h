/* plb_queue.h - a bounded queue of variable-length records between the native
 * reader thread (the one producer) and a consumer that calls in with the GIL
 * released, plus a small side ring that keeps dropped records for a Python
 * drop_handler.
 *
 * Bounds: at most max_pending records AND at most byte_cap payload bytes
 * (records are stored contiguously in a byte arena; the tail left unused when
 * a record would wrap counts against byte_cap until the records before it are
 * popped). Memory is allocated once, at create: nothing grows afterwards.
 * push never blocks: a record that does not fit is dropped (counted, and kept
 * in the side ring if that has room). pop_batch blocks on a condition variable
 * up to a timeout.
 *
 * Return codes are 0/positive counts or negative errno values:
 *   -EPIPE    the queue is closed and empty (pop_batch);
 *   -EMSGSIZE the head record alone is larger than out_cap: *out_used holds
 *             its length; the record stays queued;
 *   -EINVAL   bad arguments.
 *
 * Threads: any number of threads may push, pop, read stats and close; records
 * come out in push order. pop_batch calls are serialised among themselves (so
 * the copy-out can run outside the main lock), and so are pop_dropped_batch
 * calls. destroy must not race with any other call.
 */
#ifndef PLB_QUEUE_H
#define PLB_QUEUE_H

#include <stddef.h>
#include <stdint.h>

struct plb_queue;

/* A consistent snapshot (taken under the queue's lock). Always:
 *   pushed  == popped + dropped + current_size
 *   dropped == dropped_popped + dropped_pending + dropped_unhandled */
struct plb_queue_stats {
	uint64_t pushed;            /* push calls: every record offered */
	uint64_t popped;            /* records handed out by pop_batch */
	uint64_t dropped;           /* records refused by the main queue (full, too big, closed) */
	uint64_t queue_full_count;  /* times the queue went from accepting to refusing because
				       it was full: one per overflow episode, not per record */
	uint64_t dropped_queued;    /* dropped records the side ring accepted */
	uint64_t dropped_popped;    /* dropped records handed out by pop_dropped_batch */
	uint64_t dropped_pending;   /* dropped records waiting in the side ring now */
	uint64_t dropped_unhandled; /* dropped records that were only counted (side ring full) */
	uint64_t current_size;      /* records in the main queue now */
	uint64_t current_bytes;     /* payload bytes in the main queue now */
	uint64_t high_water;        /* largest current_size ever */
	uint64_t max_pending;       /* the count bound given to create */
	uint64_t byte_cap;          /* the byte bound given to create */
	int closed;                 /* plb_queue_close was called */
};

/* Allocate a queue holding at most max_pending records and byte_cap payload
 * bytes, with a side ring for dropped records of drop_cap records and
 * drop_byte_cap bytes (drop_cap == 0: no side ring, drops are only counted).
 * Returns NULL with errno set (EINVAL: max_pending or byte_cap is 0, or a
 * bound exceeds 2^31; ENOMEM). */
struct plb_queue *plb_queue_create(uint32_t max_pending, size_t byte_cap,
				   uint32_t drop_cap, size_t drop_byte_cap);

/* Free the queue; no other call may be running or follow. NULL is a no-op.
 * A consumer still inside pop_batch (waiting, or between its steps) makes it
 * refuse and return -EBUSY, freeing nothing: a leak, never a use after free.
 * Returns 0 otherwise. */
int plb_queue_destroy(struct plb_queue *q);

/* Queue a copy of data[0..len) without ever blocking: returns 1 if queued,
 * 0 if dropped (queue full, len > byte_cap, or queue closed). */
int plb_queue_push(struct plb_queue *q, const void *data, uint32_t len);

/* Move up to max records into out (same layout as plb_rb_read: record i is
 * out[starts[i] .. starts[i] + lens[i]), starts 8-byte aligned, *out_used the
 * end of the last one). Waits for the first record up to timeout_ms
 * (< 0: no limit, 0: do not wait). Returns the count, 0 on timeout, -EPIPE
 * once closed and empty, -EMSGSIZE or -EINVAL (see above). */
int plb_queue_pop_batch(struct plb_queue *q, uint8_t *out, size_t out_cap,
			uint32_t *starts, uint32_t *lens, uint32_t max,
			int timeout_ms, size_t *out_used);

/* Like plb_queue_pop_batch on the side ring of dropped records, never
 * waiting: returns the count (0 if none), -EMSGSIZE or -EINVAL. */
int plb_queue_pop_dropped_batch(struct plb_queue *q, uint8_t *out,
				size_t out_cap, uint32_t *starts,
				uint32_t *lens, uint32_t max, size_t *out_used);

/* Mark the queue closed and wake every waiting consumer: they drain what is
 * left, then get -EPIPE. Later pushes are dropped (counted). Idempotent. */
void plb_queue_close(struct plb_queue *q);

/* Fill *out with a consistent snapshot of the counters. */
void plb_queue_stats(struct plb_queue *q, struct plb_queue_stats *out);

#endif
