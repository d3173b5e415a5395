/* plb_perfattr.h - what PerfReader and OrderedReader need beside libbpf's
 * perf_buffer: the perf event attributes perf_buffer__new cannot set, the raw
 * record callbacks for perf_buffer__new_raw, and the wait helpers for BPF ring
 * buffer sources of the ordered merge.
 *
 * struct perf_event_attr has bitfields (watermark, use_clockid), which CFFI
 * cannot lay out from a cdef, so it is built here and handed to Python as an
 * opaque pointer.
 */
#ifndef PLB_PERFATTR_H
#define PLB_PERFATTR_H

#include <stdint.h>
#include <time.h>
#include <linux/perf_event.h>
#include <bpf/libbpf.h>

/* A PERF_COUNT_SW_BPF_OUTPUT event as libbpf's perf_buffer__new opens it
 * (sample_period 1), with what perf_buffer__new cannot choose: sample_type
 * (PERF_SAMPLE_RAW, optionally | PERF_SAMPLE_TIME), the wakeup policy (every
 * wakeup_events samples, or -- when watermark_bytes > 0 -- once that many bytes
 * are pending) and, for clockid >= 0, the clock of PERF_SAMPLE_TIME
 * (use_clockid; the default is the kernel's local_clock(), which no user-space
 * clock reads). Returns NULL with errno ENOMEM; free with plb_perf_attr_free.
 * perf_buffer__new_raw only reads it during the call. */
struct perf_event_attr *plb_perf_attr_new(uint64_t sample_type, uint32_t wakeup_events,
					  uint32_t watermark_bytes, int clockid);
void plb_perf_attr_free(struct perf_event_attr *attr);

/* Open a sampling perf event for Program.attach_perf_event (the event a
 * perf_event BPF program runs on): (type, config) as in perf_event_open(2),
 * sampling every period_or_freq events, or period_or_freq times a second when
 * freq is non-zero, for pid (-1: every process) on cpu (-1: any CPU).
 * Returns the fd (close-on-exec, enabled) or -errno: -ENOENT / -EOPNOTSUPP
 * where the PMU lacks the event. The freq bit is a bitfield, which CFFI
 * cannot set from a cdef: hence C. */
int plb_perf_event_open(uint32_t type, uint64_t config, uint64_t period_or_freq, int freq,
			int pid, int cpu);

/* perf_buffer_event_fn that consumes nothing: for a perf_buffer whose rings
 * are read raw through perf_buffer__buffer() (the merge), where libbpf must
 * never read them itself. */
enum bpf_perf_event_ret plb_perf_event_ignore(void *ctx, int cpu,
					       struct perf_event_header *ev);

/* perf_buffer_event_fn for a PERF_SAMPLE_RAW-only event: copies each sample's
 * raw data into the struct plb_batch at ctx (tag = cpu) and notes each
 * PERF_RECORD_LOST as a lost entry, as plb_perfbuf_collect/_lost do for
 * perf_buffer__new. Other record types are skipped; a sample whose sizes do
 * not fit its record sets batch->err to -EBADMSG (once) and is skipped. */
enum bpf_perf_event_ret plb_perf_event_collect(void *ctx, int cpu,
						struct perf_event_header *ev);

/* Watch fd in the epoll set epfd edge-triggered (EPOLLIN | EPOLLET), tagged
 * with the fd. For BPF ring buffer fds, whose readiness is level ("data
 * pending"): the merge may hold pending data back, and a level-triggered
 * watch would then report it again on every wait, a busy loop. Returns 0 or
 * -errno. */
int plb_epoll_add_edge(int epfd, int fd);

/* A full memory barrier. A ring buffer producer wakes the consumer only when
 * consumer_pos equals its record's position (kernel/bpf/ringbuf.c), and it
 * reads consumer_pos after publishing the record's length with a full barrier
 * (xchg). Storing consumer_pos, then this fence, then re-reading the record
 * headers means that either we see the record or the producer sees our
 * position and wakes us: no wakeup is lost before an edge-triggered wait. */
void plb_full_fence(void);

#endif
