/* plb_reader.c - native thread draining a BPF ring buffer into a plb_queue.
 *
 * Waking without spinning. The kernel wakes ring buffer consumers from
 * bpf_ringbuf_commit only when the record just committed sits exactly at
 * consumer_pos (or with BPF_RB_FORCE_WAKEUP), after a full barrier (the xchg
 * on the header) and an acquire-load of consumer_pos (kernel/bpf/ringbuf.c).
 * libbpf registers the map fd level-triggered, so a busy record at the head
 * (reserved, not yet committed) keeps the fd readable and its poll loop spins
 * until the commit. We register wake_fd edge-triggered instead and close the
 * lost-wakeup window ourselves, Dekker style:
 *     we:       store consumer_pos; full fence; load producer_pos/header
 *     producer: store producer_pos/header;  full barrier; load consumer_pos
 * If our re-check sees no new committed record, the producer's commit sees
 * our consumer_pos, finds its record at the head, and wakes us. So we sleep
 * through a busy head and wake on its commit.
 *
 * The epoll timeout is only a safety net: producers that submit with
 * BPF_RB_NO_WAKEUP (throughput runs) never wake anyone, so the thread must
 * still look at the ring periodically; it also bounds how long a wakeup
 * that some other kernel version decides not to send can delay us.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "plb_reader.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define PLB_READER_DEFAULT_BATCH 64
#define PLB_EV_WAKE 0U
#define PLB_EV_STOP 1U

/* Drain outcomes besides plb_rb_peek's EMPTY / BUSY / CORRUPT. */
#define PLB_DRAIN_MORE 100 /* budget used up: look at the stop flag, go on */

struct plb_reader {
	struct plb_rb_view view;
	struct plb_queue *q;
	int wake_fd;
	int stop_fd;
	int epfd;
	uint32_t batch;
	pthread_t thread;
	pthread_mutex_t life_mu; /* serialises stop/destroy callers */
	int joined;
	int stop_rc;
	/* shared with the thread: __atomic accesses only */
	int stop_flag;
	int timeout_ms;
	int error;
	int running;
	uint64_t records_read, records_dropped, discarded, batches;
	uint64_t wakeups, timeouts, busy_waits, corrupt;
};

/* Counters have one writer (the thread); relaxed is enough, readers only
 * need each value untorn. */
static inline void plb_count(uint64_t *c, uint64_t n)
{
	__atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + n,
			 __ATOMIC_RELAXED);
}

/* Move committed records from *posp on into the queue, at most one ring's
 * worth of bytes and never at or past limit; commits the consumer position
 * every r->batch records and at the end. Returns PLB_RB_EMPTY (nothing more,
 * or limit reached), PLB_RB_BUSY, PLB_RB_CORRUPT or PLB_DRAIN_MORE. */
static int plb_reader_drain(struct plb_reader *r, uint64_t *posp, uint64_t limit)
{
	uint64_t pos = *posp, committed = pos, ring = r->view.mask + 1, next;
	uint32_t since_commit = 0, len;
	uint64_t found = 0, dropped = 0, discarded = 0;
	const void *data;
	int rc;

	for (;;) {
		if (pos >= limit) {
			rc = PLB_RB_EMPTY;
			break;
		}
		/* Bounded pass: a producer faster than us must not keep us
		 * from seeing a stop request. */
		if (pos - *posp >= ring) {
			rc = PLB_DRAIN_MORE;
			break;
		}
		rc = plb_rb_peek(&r->view, pos, &data, &len, &next);
		if (rc == PLB_RB_EMPTY || rc == PLB_RB_BUSY ||
		    rc == PLB_RB_CORRUPT)
			break;
		if (rc == PLB_RB_RECORD) {
			/* push copies the sample out of the ring before the
			 * release store below can hand its space back. */
			if (!plb_queue_push(r->q, data, len))
				dropped++;
			found++;
		} else {
			discarded++;
		}
		pos = next;
		/* Commit in batches: frees kernel ring space while a long
		 * backlog is still being copied, without a store per record. */
		if (++since_commit >= r->batch) {
			plb_rb_commit(&r->view, pos);
			committed = pos;
			since_commit = 0;
		}
	}
	if (pos != committed)
		plb_rb_commit(&r->view, pos);
	if (found) {
		plb_count(&r->records_read, found);
		plb_count(&r->batches, 1);
	}
	if (dropped)
		plb_count(&r->records_dropped, dropped);
	if (discarded)
		plb_count(&r->discarded, discarded);
	*posp = pos;
	return rc;
}

static void *plb_reader_main(void *arg)
{
	struct plb_reader *r = arg;
	struct epoll_event evs[2];
	uint64_t pos = plb_rb_consumer_pos(&r->view);
	int rc, n, err = 0;

	for (;;) {
		if (__atomic_load_n(&r->stop_flag, __ATOMIC_ACQUIRE)) {
			/* Final pass: take what the producer had published when
			 * stop was asked (acquire: as in plb_rb_peek), so every
			 * record submitted before stop is queued or counted. */
			uint64_t limit = __atomic_load_n(r->view.producer_pos,
							 __ATOMIC_ACQUIRE);
			rc = PLB_DRAIN_MORE;
			while (rc == PLB_DRAIN_MORE)
				rc = plb_reader_drain(r, &pos, limit);
			if (rc == PLB_RB_CORRUPT) {
				plb_count(&r->corrupt, 1);
				err = -EBADMSG;
			}
			break;
		}
		rc = plb_reader_drain(r, &pos, UINT64_MAX);
		if (rc == PLB_RB_CORRUPT) {
			/* Nothing after a corrupt header can be trusted; stop
			 * rather than spin on it. Python sees error/corrupt. */
			plb_count(&r->corrupt, 1);
			err = -EBADMSG;
			break;
		}
		if (rc == PLB_DRAIN_MORE)
			continue;

		/* Empty or busy head, consumer_pos stored. The full fence
		 * pairs with the kernel's barrier in bpf_ringbuf_commit (see
		 * the top of this file): re-check, or be woken. */
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		rc = plb_rb_peek(&r->view, pos, NULL, NULL, NULL);
		if (rc == PLB_RB_RECORD || rc == PLB_RB_DISCARD ||
		    rc == PLB_RB_CORRUPT)
			continue; /* arrived meanwhile: drain (or report) it */
		if (rc == PLB_RB_BUSY)
			plb_count(&r->busy_waits, 1);

		n = epoll_wait(r->epfd, evs, 2,
			       __atomic_load_n(&r->timeout_ms, __ATOMIC_RELAXED));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = -errno;
			break;
		}
		if (n == 0)
			plb_count(&r->timeouts, 1);
		for (int i = 0; i < n; i++)
			if (evs[i].data.u32 == PLB_EV_WAKE)
				plb_count(&r->wakeups, 1);
		/* The stop event is level-triggered and never read: once set,
		 * every wait returns at once and the flag check ends the loop. */
	}

	__atomic_store_n(&r->error, err, __ATOMIC_RELAXED);
	__atomic_store_n(&r->running, 0, __ATOMIC_RELEASE);
	return NULL;
}

/* Create the reader's eventfd, epoll set and thread. */
int plb_reader_start(struct plb_reader **out, struct plb_rb_view view,
		     int wake_fd, struct plb_queue *q, uint32_t batch_size)
{
	struct epoll_event ev;
	struct plb_reader *r;
	sigset_t all, old;
	int err;

	if (!out || !q || !view.consumer_pos || !view.producer_pos ||
	    !view.data || ((view.mask + 1) & view.mask))
		return -EINVAL;
	*out = NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->view = view;
	r->q = q;
	r->wake_fd = wake_fd;
	r->batch = batch_size ? batch_size : PLB_READER_DEFAULT_BATCH;
	r->timeout_ms = PLB_READER_DEFAULT_TIMEOUT_MS;
	r->stop_fd = r->epfd = -1;

	err = pthread_mutex_init(&r->life_mu, NULL);
	if (err) {
		free(r);
		return -err;
	}
	r->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->stop_fd < 0)
		goto fail_errno;
	r->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (r->epfd < 0)
		goto fail_errno;
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLIN;
	ev.data.u32 = PLB_EV_STOP;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->stop_fd, &ev) < 0)
		goto fail_errno;
	/* wake_fd < 0: no wake source, the thread polls every timeout. */
	if (wake_fd >= 0) {
		memset(&ev, 0, sizeof(ev));
		ev.events = EPOLLIN | EPOLLET;
		ev.data.u32 = PLB_EV_WAKE;
		if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, wake_fd, &ev) < 0)
			goto fail_errno;
	}

	/* The thread inherits a full signal mask: signals are for the
	 * interpreter's threads, and none should interrupt our epoll_wait. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r->running = 1;
	err = pthread_create(&r->thread, NULL, plb_reader_main, r);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		errno = err;
		goto fail_errno;
	}
	*out = r;
	return 0;

fail_errno:
	err = -errno;
	if (r->epfd >= 0)
		close(r->epfd);
	if (r->stop_fd >= 0)
		close(r->stop_fd);
	pthread_mutex_destroy(&r->life_mu);
	free(r);
	return err;
}

/* Set the safety-net timeout the thread's next epoll_wait uses. */
void plb_reader_set_timeout(struct plb_reader *r, int timeout_ms)
{
	/* 0 would turn the wait into a spin: the smallest wait is 1 ms. */
	if (timeout_ms < 0)
		timeout_ms = -1;
	else if (timeout_ms == 0)
		timeout_ms = 1;
	__atomic_store_n(&r->timeout_ms, timeout_ms, __ATOMIC_RELAXED);
}

/* Wake the thread through its eventfd and join it; idempotent. */
int plb_reader_stop(struct plb_reader *r)
{
	uint64_t one = 1;
	ssize_t w;

	pthread_mutex_lock(&r->life_mu);
	if (!r->joined) {
		/* Release: pairs with the thread's acquire of stop_flag. */
		__atomic_store_n(&r->stop_flag, 1, __ATOMIC_RELEASE);
		do
			w = write(r->stop_fd, &one, sizeof(one));
		while (w < 0 && errno == EINTR);
		/* EAGAIN would mean the counter is saturated: already woken. */
		pthread_join(r->thread, NULL);
		r->joined = 1;
		r->stop_rc = __atomic_load_n(&r->error, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&r->life_mu);
	return r->stop_rc;
}

/* Stop the thread if needed, close the fds, free the reader. */
void plb_reader_destroy(struct plb_reader *r)
{
	if (!r)
		return;
	plb_reader_stop(r);
	close(r->epfd);
	close(r->stop_fd);
	pthread_mutex_destroy(&r->life_mu);
	free(r);
}

/* Copy the counters (each read atomically). */
void plb_reader_stats(struct plb_reader *r, struct plb_reader_stats *out)
{
	out->records_read = __atomic_load_n(&r->records_read, __ATOMIC_RELAXED);
	out->records_dropped = __atomic_load_n(&r->records_dropped, __ATOMIC_RELAXED);
	out->discarded = __atomic_load_n(&r->discarded, __ATOMIC_RELAXED);
	out->batches = __atomic_load_n(&r->batches, __ATOMIC_RELAXED);
	out->wakeups = __atomic_load_n(&r->wakeups, __ATOMIC_RELAXED);
	out->timeouts = __atomic_load_n(&r->timeouts, __ATOMIC_RELAXED);
	out->busy_waits = __atomic_load_n(&r->busy_waits, __ATOMIC_RELAXED);
	out->corrupt = __atomic_load_n(&r->corrupt, __ATOMIC_RELAXED);
	out->error = __atomic_load_n(&r->error, __ATOMIC_RELAXED);
	out->running = __atomic_load_n(&r->running, __ATOMIC_ACQUIRE);
}
