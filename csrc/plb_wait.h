/* plb_wait.h - an epoll wait that another thread can interrupt.
 *
 * The waiter owns an epoll set holding the fds to watch (for ring and perf
 * buffers the maps' / per-CPU perf events' own fds, not libbpf's epoll fd; and
 * never add foreign fds to libbpf's set: libbpf reads data.fd/u32 as a ring
 * index) and an eventfd. plb_waiter_wake() makes every
 * current and later wait return -ECANCELED, which is how close() from another
 * thread unblocks a reader.
 */
#ifndef PLB_WAIT_H
#define PLB_WAIT_H

#include <stddef.h>
#include <stdint.h>

struct perf_buffer;
struct plb_batch;
struct plb_rb_view;
struct plb_into;

/* plb_rb_wait_drain / plb_pb_wait_drain, besides the wait's own results:
 * PLB_DRAIN_CHECK: ready, but the drain stopped early (see *drained and the batch's err);
 * PLB_DRAIN_ONE: ready, and the drain took exactly one record, not a lost-sample notice, without
 * an error (the latency case: the caller reads that record alone, batch->start[0] == 0);
 * PLB_DRAIN_CALLED: as PLB_DRAIN_ONE, and the record was handed to Python from inside the call
 * (plb_rb_wait_call / plb_pb_wait_call). */
enum plb_wait_result { PLB_DRAIN_CHECK = 2, PLB_DRAIN_ONE = 3, PLB_DRAIN_CALLED = 4 };

struct plb_waiter {
	int epfd;
	int evfd;
};

/* Create a waiter watching fd for EPOLLIN; returns 0 or -errno. */
int plb_waiter_init(struct plb_waiter *w, int fd);
/* Watch one more fd (e.g. several perf ring fds); returns 0 or -errno. */
int plb_waiter_add(struct plb_waiter *w, int fd);
/* Stop watching fd (undoes plb_waiter_add); returns 0 or -errno. */
int plb_waiter_remove(struct plb_waiter *w, int fd);
/* Watch fd for room to write (EPOLLOUT), edge-triggered: a user ring buffer
 * reports EPOLLOUT while any byte is free, so a level watch would spin while
 * the free space is too small for the record; an edge comes with each drain.
 * Returns 0 or -errno. */
int plb_waiter_add_writable(struct plb_waiter *w, int fd);
/* Wait up to timeout_ms (-1: forever): 1 when a watched fd is ready, 0 on
 * timeout, -ECANCELED once woken, -EINTR on a signal, else -errno. */
int plb_waiter_wait(struct plb_waiter *w, int timeout_ms);
/* Wait, then drain BPF ring buffers into a batch, in one call: the latency
 * path of RingBuffer.poll/read_batch. timeout_ms != 0: wait as
 * plb_waiter_wait (the waiter watches the ring buffer maps' own fds);
 * timeout_ms == 0: no wait. The batch is reset first, whatever the wait
 * returns, so it holds this call's records only. When ready (or not
 * waiting), views[0], views[1], ... views[n - 1] in turn are read into it
 * (plb_batch_read_rb, tagged with their index) until the batch holds max
 * records, reaches its byte_limit or fails; *drained = the records taken, or
 * the -errno of a ring that failed (0 when nothing was drained). Returns what
 * the wait returned (1 ready, 0 timeout, -ECANCELED once woken, -EINTR on a
 * signal, else -errno), 1 without a wait, PLB_DRAIN_CHECK when a ring failed
 * or the batch has an error (records taken before it stay in the batch), or
 * PLB_DRAIN_ONE when it took one record and no error (so a wake-up with one
 * record ready reads no other field of the batch than that record's).
 * No Python in between: the caller crosses into C once per wake-up. */
int plb_rb_wait_drain(struct plb_waiter *w, int timeout_ms, struct plb_rb_view **views, uint32_t n,
		      struct plb_batch *b, int max, int *drained);
/* The same for a libbpf perf_buffer: the latency path of PerfBuffer and
 * PerfReader. The waiter should watch every CPU ring's perf event fd
 * (perf_buffer__buffer_fd), never libbpf's epoll fd: a perf event fd reports
 * each wake-up to one poll only (perf_poll exchanges the ring's poll state
 * with 0), so a wake-up taken by our set is gone for libbpf's and the other
 * way round. Whatever woke the wait, the drain is perf_buffer__consume(pb),
 * which reads EVERY ring: a ring whose wake-up went to another poll (or came
 * while we drained) is read all the same. The batch is reset first;
 * *drained = the batch's record count, or -errno when perf_buffer__consume
 * failed (records collected before the error stay in the batch); 0 when
 * nothing was drained. Returns as plb_rb_wait_drain (PLB_DRAIN_ONE: one
 * sample; a lost-sample notice alone is not one). */
int plb_pb_wait_drain(struct plb_waiter *w, int timeout_ms, struct perf_buffer *pb,
		      struct plb_batch *b, int *drained);

/* Defined by CFFI from Python (extern "Python+C": tools/gen_cdef.py SHIM_PYTHON_CALLBACKS;
 * pylibbpf/_batch.py), called with the GIL taken by CFFI. reader is the handle (ffi.new_handle)
 * the Python caller passed in; tag (ring index or CPU), data and len are the batch's one record
 * (data: batch->buf, valid until the batch's next reset). It returns nothing: Python keeps what
 * happened (the callback's result, an exception) on its side. */
void plb_py_one(void *reader, uint32_t tag, const void *data, uint32_t len);
/* plb_rb_wait_drain, then, when it would return PLB_DRAIN_ONE, plb_py_one(reader, ...) with
 * that record from inside this call, and PLB_DRAIN_CALLED. The latency path of RingBuffer.poll:
 * the callback runs on the wake-up's way in, and what Python does after a wake-up besides it
 * runs after it, not before (2-5% of the p50 latency: docs/performance.md).
 * Every other result is plb_rb_wait_drain's, with nothing called. */
int plb_rb_wait_call(struct plb_waiter *w, int timeout_ms, struct plb_rb_view **views, uint32_t n,
		     struct plb_batch *b, int max, int *drained, void *reader);
/* The same for a perf_buffer (plb_pb_wait_drain): PerfBuffer.poll's. */
int plb_pb_wait_call(struct plb_waiter *w, int timeout_ms, struct perf_buffer *pb,
		     struct plb_batch *b, int *drained, void *reader);

/* plb_rb_wait_into's / plb_pb_wait_into's result when a ring stopped short (an odd record, a
 * lost-samples notice, an error). */
enum plb_into_wait { PLB_INTO_STOPPED = 2 };

/* RingBuffer.read_into's wait and fill in one C call, as plb_rb_wait_drain is
 * read_batch's: after a wake-up no Python runs between the wait and the
 * copies. timeout_ms != 0: wait as plb_waiter_wait (the waiter watches the
 * rings' own fds); 0: no wait. When ready (or not waiting), fill from
 * views[*ring], views[*ring + 1], ... views[n - 1] in turn, each until it is
 * empty (plb_into_rb), and stop at a ring that stops early: the rows are full
 * (st->stop PLB_INTO_FULL), an odd record was taken (PLB_INTO_ODD), or the
 * ring failed while no row is filled (*err = its -errno; a failure after
 * rows is met again by the next call, as plb_into_rb's is). *ring is then
 * that ring, else n; *err is 0 unless a ring failed. Returns the wait's
 * result: 1 when ready or not waiting (the fill ran, and every ring is empty
 * or the rows are full), 0 on timeout, -ECANCELED once woken, -EINTR on a
 * signal, else -errno (no fill); or PLB_INTO_STOPPED when the fill ran and
 * stopped at *ring for an odd record or an error. */
int plb_rb_wait_into(struct plb_waiter *w, int timeout_ms, struct plb_rb_view **views, uint32_t n,
		     struct plb_into *st, uint32_t *ring, int *err);
/* The same for PerfBuffer.read_into: the rings are the perf_buffer's slots 0..n-1
 * (perf_buffer__buffer, plb_into_perf), every one read after any wake-up (the
 * waiter watches the rings' perf event fds, as for plb_pb_wait_drain). A ring
 * also stops short for a lost-samples notice (st->stop PLB_INTO_LOST, its
 * count in st->lost), and perf_buffer__buffer's failure is that ring's error. */
int plb_pb_wait_into(struct plb_waiter *w, int timeout_ms, struct perf_buffer *pb, uint32_t n,
		     struct plb_into *st, uint32_t *ring, int *err);

/* Wake every waiter, now and later; safe from any thread. */
void plb_waiter_wake(struct plb_waiter *w);
/* Close both fds; the waiter must no longer be waited on. */
void plb_waiter_close(struct plb_waiter *w);

/* Map zeroed private memory over [addr, addr + len) (page aligned), in place.
 * For a forked child: the kernel does not copy perf ring mappings into a child
 * (VM_DONTCOPY), so views of them taken before fork point at a hole; filling
 * it makes reading them give zeros instead of SIGSEGV. Returns 0 or -errno. */
int plb_fill_hole(void *addr, size_t len);

#endif
