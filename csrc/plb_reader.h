/* plb_reader.h - the native reader thread behind BackpressureConsumer: it
 * drains a BPF ring buffer into a plb_queue without ever touching Python, so
 * a slow Python callback makes the queue drop records (counted) instead of
 * letting the kernel ring fill up.
 *
 * The thread sleeps in epoll_wait on wake_fd (the ring buffer map's fd:
 * readable when the kernel wakes consumers) and on its own stop eventfd, with
 * a timeout as a safety net for producers that submit with BPF_RB_NO_WAKEUP.
 * It never spins: see plb_reader.c for how a busy head is waited out.
 *
 * Lifetime: the view's memory, wake_fd and the queue are borrowed; they must
 * stay valid until plb_reader_stop() has returned. The reader must be the
 * ring's only consumer while it runs (nobody else may move consumer_pos).
 */
#ifndef PLB_READER_H
#define PLB_READER_H

#include <stdint.h>

#include "plb_queue.h"
#include "plb_ringbuf.h"

struct plb_reader;

/* Counters, each read atomically (the set is not one snapshot while the
 * thread runs; after plb_reader_stop it is exact). */
struct plb_reader_stats {
	uint64_t records_read;    /* committed records taken from the ring and pushed */
	uint64_t records_dropped; /* of those, refused by the queue (it was full) */
	uint64_t discarded;       /* records the producer discarded, skipped */
	uint64_t batches;         /* drain passes that found at least one record */
	uint64_t wakeups;         /* epoll_wait returns that reported wake_fd */
	uint64_t timeouts;        /* epoll_wait returns on the safety-net timeout */
	uint64_t busy_waits;      /* waits that began with a busy record at the head */
	uint64_t corrupt;         /* corrupt heads seen (the thread stops at the first) */
	int error;                /* 0, or the -errno that ended the thread early */
	int running;              /* 1 while the thread loops */
};

/* Default safety-net timeout of the thread's epoll_wait, in milliseconds. */
#define PLB_READER_DEFAULT_TIMEOUT_MS 100

/* Start a thread draining view into q, committing the consumer position every
 * batch_size records (0 = 64). Registers wake_fd edge-triggered (EPOLLET) and
 * never reads from it. *out is set on success. Returns 0 or -errno. */
int plb_reader_start(struct plb_reader **out, struct plb_rb_view view,
		     int wake_fd, struct plb_queue *q, uint32_t batch_size);

/* Change the safety-net timeout (ms, >= 1; < 0: none) taken by the next wait. */
void plb_reader_set_timeout(struct plb_reader *r, int timeout_ms);

/* Stop the thread: wake it through its eventfd, let it drain what the
 * producer had published by then (up to a busy head), and join it.
 * Returns 0, or the -errno that ended the thread early (-EBADMSG: corrupt
 * ring). Idempotent: later calls return the same value. */
int plb_reader_stop(struct plb_reader *r);

/* Stop (if needed) and free the reader and its fds. NULL is a no-op. */
void plb_reader_destroy(struct plb_reader *r);

/* Fill *out with the counters. */
void plb_reader_stats(struct plb_reader *r, struct plb_reader_stats *out);

#endif
