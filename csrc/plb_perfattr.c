/* plb_perfattr.c - perf event attributes, raw perf record callbacks and ring
 * buffer wait helpers for PerfReader / OrderedReader (see plb_perfattr.h). */
#include "plb_perfattr.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "plb_batch.h"

/* The fields every event we open shares: the struct's own size, then what to count. */
static void attr_init(struct perf_event_attr *attr, uint32_t type, uint64_t config)
{
	memset(attr, 0, sizeof(*attr));
	attr->size = sizeof(*attr);
	attr->type = type;
	attr->config = config;
}

struct perf_event_attr *plb_perf_attr_new(uint64_t sample_type, uint32_t wakeup_events,
					  uint32_t watermark_bytes, int clockid)
{
	struct perf_event_attr *attr = calloc(1, sizeof(*attr));

	if (!attr) {
		errno = ENOMEM;
		return NULL;
	}
	/* What libbpf's perf_buffer__new sets (libbpf.c), for the BPF output
	 * event that bpf_perf_event_output() writes into. */
	attr_init(attr, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_BPF_OUTPUT);
	attr->sample_period = 1;
	attr->sample_type = sample_type;
	/* wakeup_events and wakeup_watermark share a union; the watermark bit
	 * says which one the kernel reads (kernel/events/ring_buffer.c). */
	if (watermark_bytes) {
		attr->watermark = 1;
		attr->wakeup_watermark = watermark_bytes;
	} else {
		attr->wakeup_events = wakeup_events ? wakeup_events : 1;
	}
	if (clockid >= 0) {
		attr->use_clockid = 1;
		attr->clockid = clockid;
	}
	return attr;
}

void plb_perf_attr_free(struct perf_event_attr *attr)
{
	free(attr);
}

int plb_perf_event_open(uint32_t type, uint64_t config, uint64_t period_or_freq, int freq,
			int pid, int cpu)
{
	struct perf_event_attr attr;
	long fd;

	attr_init(&attr, type, config);
	/* sample_period and sample_freq share a union; the freq bit says which
	 * one the kernel reads (kernel/events/core.c). */
	attr.sample_period = period_or_freq;
	attr.freq = freq ? 1 : 0;
	fd = syscall(__NR_perf_event_open, &attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
	return fd < 0 ? -errno : (int)fd;
}

enum bpf_perf_event_ret plb_perf_event_ignore(void *ctx, int cpu, struct perf_event_header *ev)
{
	(void)ctx;
	(void)cpu;
	(void)ev;
	return LIBBPF_PERF_EVENT_CONT;
}

enum bpf_perf_event_ret plb_perf_event_collect(void *ctx, int cpu, struct perf_event_header *ev)
{
	struct plb_batch *b = ctx;
	const uint8_t *rec = (const uint8_t *)ev;

	/* libbpf hands over each record whole and contiguous (it copies one
	 * that wraps the ring), and releases data_tail after we return. */
	if (ev->type == PERF_RECORD_SAMPLE) {
		/* {header; u32 size; char data[size]} for PERF_SAMPLE_RAW only. */
		uint32_t raw_size;

		if (ev->size < sizeof(*ev) + sizeof(raw_size))
			goto malformed;
		memcpy(&raw_size, rec + sizeof(*ev), sizeof(raw_size));
		if ((uint64_t)raw_size + sizeof(*ev) + sizeof(raw_size) > ev->size)
			goto malformed;
		plb_perfbuf_collect(b, cpu, (void *)(rec + sizeof(*ev) + sizeof(raw_size)), raw_size);
	} else if (ev->type == PERF_RECORD_LOST) {
		/* {header; u64 id; u64 lost; sample_id} */
		uint64_t lost;

		if (ev->size < sizeof(*ev) + 2 * sizeof(uint64_t))
			goto malformed;
		memcpy(&lost, rec + sizeof(*ev) + sizeof(uint64_t), sizeof(lost));
		plb_perfbuf_collect_lost(b, cpu, lost);
	}
	/* Other types (none for a BPF output event) are skipped. */
	return LIBBPF_PERF_EVENT_CONT;

malformed:
	if (!b->err)
		b->err = -EBADMSG;
	return LIBBPF_PERF_EVENT_CONT;
}

int plb_epoll_add_edge(int epfd, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u64 = (uint64_t)fd };

	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

void plb_full_fence(void)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}
