/* plb_wait.c - the interruptible wait used by every blocking reader. */
#include <errno.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "plb_batch.h"
#include "plb_into.h"
#include "plb_wait.h"

/* The eventfd is tagged with u64 = -1 so it cannot be mistaken for a watched fd. */
#define PLB_WAKE_TAG UINT64_MAX

int plb_waiter_init(struct plb_waiter *w, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = PLB_WAKE_TAG };

	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (w->epfd < 0)
		return -errno;
	w->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->evfd < 0 || epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->evfd, &ev) < 0) {
		int err = -errno;

		plb_waiter_close(w);
		return err;
	}
	if (fd >= 0) {
		int err = plb_waiter_add(w, fd);

		if (err) {
			plb_waiter_close(w);
			return err;
		}
	}
	return 0;
}

int plb_waiter_add(struct plb_waiter *w, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = (uint64_t)fd };

	return epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

int plb_waiter_remove(struct plb_waiter *w, int fd)
{
	return epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, NULL) < 0 ? -errno : 0;
}

int plb_waiter_add_writable(struct plb_waiter *w, int fd)
{
	struct epoll_event ev = { .events = EPOLLOUT | EPOLLET, .data.u64 = (uint64_t)fd };

	return epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

int plb_waiter_wait(struct plb_waiter *w, int timeout_ms)
{
	struct epoll_event evs[8];
	int n, i, ready = 0;

	n = epoll_wait(w->epfd, evs, 8, timeout_ms);
	if (n < 0)
		return -errno;
	for (i = 0; i < n; i++) {
		/* The eventfd is never read, so once written it stays readable and
		 * every later wait reports the wake-up too. */
		if (evs[i].data.u64 == PLB_WAKE_TAG)
			return -ECANCELED;
		ready = 1;
	}
	return ready;
}

/* What a wait-and-drain returns once ready: PLB_DRAIN_CHECK after an error (the
 * drain's, failed, or the batch's), PLB_DRAIN_ONE for exactly one record that
 * is not a lost-sample notice, else the wait's result. */
static int plb_drain_result(const struct plb_batch *b, int failed, int ready)
{
	if (failed || b->err)
		return PLB_DRAIN_CHECK;
	if (b->n == 1 && b->lost[0] == 0)
		return PLB_DRAIN_ONE;
	return ready;
}

int plb_rb_wait_drain(struct plb_waiter *w, int timeout_ms, struct plb_rb_view **views, uint32_t n,
		      struct plb_batch *b, int max, int *drained)
{
	int ready, rc;
	uint32_t i;

	/* Reset before the wait: the caller takes whatever the batch holds after
	 * this call (even when its exception surfaces right after), so it must
	 * never hold an earlier call's records. */
	plb_batch_reset(b);
	*drained = 0;
	ready = timeout_ms == 0 ? 1 : plb_waiter_wait(w, timeout_ms);
	if (ready <= 0)
		return ready;
	/* Ring by ring, as ring_buffer__consume_n goes, until the batch is full. */
	for (i = 0; i < n && b->n < (uint32_t)max && !b->full && !b->err; i++) {
		rc = plb_batch_read_rb(b, views[i], i, (uint32_t)max);
		if (rc < 0) {
			*drained = rc;
			return PLB_DRAIN_CHECK;
		}
	}
	*drained = (int)b->n;
	/* One return value to test on the way back: the caller looks at *drained and
	 * the batch's error only when this says so. */
	return plb_drain_result(b, 0, ready);
}

int plb_pb_wait_drain(struct plb_waiter *w, int timeout_ms, struct perf_buffer *pb,
		      struct plb_batch *b, int *drained)
{
	int ready, err;

	plb_batch_reset(b); /* as in plb_rb_wait_drain: this call's records only */
	*drained = 0;
	ready = timeout_ms == 0 ? 1 : plb_waiter_wait(w, timeout_ms);
	if (ready <= 0)
		return ready;
	/* All rings, not only the ones epoll reported: perf_poll hands a ring's
	 * wake-up to a single poll and then forgets it, so the ready list says
	 * which wake-ups we were given, not which rings hold data. Reading every
	 * ring after any wake-up is what makes a wake-up taken elsewhere (or one
	 * that fired while a previous drain ran) harmless: its data is read here
	 * or by the drain its own pending wake-up triggers. */
	err = perf_buffer__consume(pb);
	*drained = err < 0 ? err : (int)b->n;
	return plb_drain_result(b, err < 0, ready);
}

int plb_rb_wait_call(struct plb_waiter *w, int timeout_ms, struct plb_rb_view **views, uint32_t n,
		     struct plb_batch *b, int max, int *drained, void *reader)
{
	int ret = plb_rb_wait_drain(w, timeout_ms, views, n, b, max, drained);

	if (ret != PLB_DRAIN_ONE)
		return ret;
	/* The record starts at offset 0 of the batch's buffer (plb_batch_append after the
	 * reset). The last thing this call does: once Python has the record, its callback may
	 * close the reader (freeing rb and the waiter), so nothing here is touched after it. */
	plb_py_one(reader, b->tag[0], b->buf, b->len[0]);
	return PLB_DRAIN_CALLED;
}

int plb_pb_wait_call(struct plb_waiter *w, int timeout_ms, struct perf_buffer *pb,
		     struct plb_batch *b, int *drained, void *reader)
{
	int ret = plb_pb_wait_drain(w, timeout_ms, pb, b, drained);

	if (ret != PLB_DRAIN_ONE)
		return ret;
	plb_py_one(reader, b->tag[0], b->buf, b->len[0]); /* last, as in plb_rb_wait_call */
	return PLB_DRAIN_CALLED;
}

/* One ring's fill for plb_wait_fill: ring i of rings, into st (plb_into_rb's results). */
typedef int (*plb_ring_fill)(void *rings, uint32_t i, struct plb_into *st);

static int plb_rb_fill(void *views, uint32_t i, struct plb_into *st)
{
	return plb_into_rb(((struct plb_rb_view **)views)[i], st);
}

static int plb_pb_fill(void *pb, uint32_t i, struct plb_into *st)
{
	void *base;
	size_t size;
	int err = perf_buffer__buffer(pb, (int)i, &base, &size);

	return err < 0 ? err : plb_into_perf(base, size, st);
}

/* plb_rb_wait_into and plb_pb_wait_into: the wait, then fill(rings, i, st)
 * for i from *ring on (see plb_wait.h). */
static int plb_wait_fill(struct plb_waiter *w, int timeout_ms, plb_ring_fill fill, void *rings,
			 uint32_t n, struct plb_into *st, uint32_t *ring, int *err)
{
	int ready = timeout_ms == 0 ? 1 : plb_waiter_wait(w, timeout_ms);
	uint32_t i;
	int rc;

	*err = 0;
	if (ready <= 0)
		return ready;
	for (i = *ring; i < n; i++) {
		st->stop = PLB_INTO_EMPTY;
		rc = fill(rings, i, st);
		if (rc < 0 && !st->n) {
			*err = rc;
			break;
		}
		if (st->stop != PLB_INTO_EMPTY)
			break;
	}
	*ring = i;
	/* One value to test on the way back from a wake-up: the caller reads *ring,
	 * *err and st->stop only when this says a ring stopped short. */
	return i < n && st->stop != PLB_INTO_FULL ? PLB_INTO_STOPPED : ready;
}

int plb_rb_wait_into(struct plb_waiter *w, int timeout_ms, struct plb_rb_view **views, uint32_t n,
		     struct plb_into *st, uint32_t *ring, int *err)
{
	return plb_wait_fill(w, timeout_ms, plb_rb_fill, views, n, st, ring, err);
}

int plb_pb_wait_into(struct plb_waiter *w, int timeout_ms, struct perf_buffer *pb, uint32_t n,
		     struct plb_into *st, uint32_t *ring, int *err)
{
	/* After any wake-up every ring is read, for the reason plb_pb_wait_drain gives. */
	return plb_wait_fill(w, timeout_ms, plb_pb_fill, pb, n, st, ring, err);
}

void plb_waiter_wake(struct plb_waiter *w)
{
	uint64_t one = 1;

	if (w->evfd >= 0 && write(w->evfd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is already non-zero, the wake-up stands. */
	}
}

void plb_waiter_close(struct plb_waiter *w)
{
	if (w->evfd >= 0)
		close(w->evfd);
	if (w->epfd >= 0)
		close(w->epfd);
	w->evfd = -1;
	w->epfd = -1;
}

int plb_fill_hole(void *addr, size_t len)
{
	/* MAP_FIXED_NOREPLACE would refuse if anything were mapped there: the
	 * caller passes only ranges the kernel left out of this process. */
	void *p = mmap(addr, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

	if (p == MAP_FAILED)
		return -errno;
	if (p != addr) { /* a kernel older than 4.17 ignores the flag */
		munmap(p, len);
		return -EEXIST;
	}
	return 0;
}
