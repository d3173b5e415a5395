// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* bench_c - the C ceiling: the same producer object, consumed with the pinned
 * libbpf's ring_buffer__consume / perf_buffer__consume, in one process; and
 * the ordered merge's C core (csrc/plb_merge.c) over the same perf rings.
 *
 * usage: bench_c OBJ ringbuf|perfbuf|perfmerge|perfmerge-fn drain|steady|latency SIZE EVENTS
 *                [min_time_ms=300] [perf_pages=4096] [perf_wakeup=4096] [rate=10000] [chunk=4096]
 *                [interleave=0] [warmup=0]
 *
 * perfmerge: the rings perfbuf opens, read through plb_merge (perf_buffer__buffer,
 *          never perf_buffer__consume) ordered by the event's u64 at offset 8,
 *          with OrderedReader's defaults (5 ms window, 16384 entries and 2 MiB
 *          per drain); each delivered event gets the same check as perfbuf's.
 * perfmerge-fn: the same merge read with plb_merge_consume: a C callback per
 *          event with a pointer into the ring, as perf_buffer__consume gives
 *          perfbuf's (no copy; 16384 entries per consume).
 * interleave=K (drain, perf): fill the CPUs' rings round-robin, K events per
 *          trigger, so timestamps interleave across rings; 0 fills one CPU's
 *          share after the other (each ring's timestamps above the previous
 *          ring's: the merge emits long runs from one ring).
 *
 * drain:   fill the ring(s) with EVENTS events, then time the consume; repeat
 *          until min_time_ms of consuming has accumulated. warmup=N: N rounds
 *          first, filled and consumed untimed (the suite's drain rows all warm
 *          up one round: benchmarks/harness.py, run_drain); "timed_events"
 *          counts the events of the timed rounds, "warmup_s" their time.
 * steady:  a forked child (pinned to the last CPU) produces EVENTS events in
 *          chunks while this process (pinned to CPU 0) polls; timed from the
 *          child's start (which it reports) to the last event consumed.
 * latency: the child produces one event per trigger at `rate` per second;
 *          this process records now - event.ts for each (CLOCK_MONOTONIC).
 * Prints one JSON object (producer_s: when the steady/latency producer finished, from
 * its start). Every event's sequence number is checked: each
 * stream (seq >> 48) must arrive as consecutive numbers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/epoll.h>

#include "plb_merge.h"

#define MAX_STREAMS 64
#define PRODUCE_BATCH_WAKEUP 1

struct event_head {
	uint64_t seq;
	uint64_t ts;
};

struct produce_args {
	uint64_t count, first_seq, size, flags;
};

static struct {
	uint64_t next[MAX_STREAMS];
	uint64_t received, gaps, seq_errors;
	uint64_t *lat;
	uint64_t nlat, cap_lat;
} st;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* The per-event work every consumer does: check the sequence, maybe record latency. */
static inline void on_event(const void *data)
{
	const struct event_head *e = data;
	uint64_t stream = (e->seq >> 48) % MAX_STREAMS, n = e->seq & ((1ull << 48) - 1);

	if (n != st.next[stream]) {
		if (n > st.next[stream])
			st.gaps += n - st.next[stream];
		else
			st.seq_errors++;
	}
	st.next[stream] = n + 1;
	st.received++;
	if (st.lat && st.nlat < st.cap_lat)
		st.lat[st.nlat++] = now_ns() - e->ts;
}

static int ring_cb(void *ctx, void *data, size_t size)
{
	(void)ctx;
	(void)size;
	on_event(data);
	return 0;
}

static void perf_cb(void *ctx, int cpu, void *data, __u32 size)
{
	(void)ctx;
	(void)cpu;
	(void)size;
	on_event(data);
}

/* perf_buffer__new_raw hands over whole records: a sample is header, u32 size, data. */
static enum bpf_perf_event_ret perf_raw_cb(void *ctx, int cpu, struct perf_event_header *hdr)
{
	(void)ctx;
	(void)cpu;
	if (hdr->type == PERF_RECORD_SAMPLE)
		on_event((char *)(hdr + 1) + sizeof(uint32_t));
	return LIBBPF_PERF_EVENT_CONT;
}

/* perfmerge: the merge over the perf buffer's rings and its output (as OrderedReader allocates it). */
#define MERGE_MAX 16384
#define MERGE_BUF (1u << 21)
#define MERGE_WINDOW_NS 5000000ull
static struct plb_merge *merge;
static struct plb_merge_out mout;

static int merge_open(struct perf_buffer *pb)
{
	size_t n = perf_buffer__buffer_cnt(pb);
	struct plb_merge_source *srcs = calloc(n, sizeof(*srcs));
	int err = !srcs;
	struct plb_merge_config cfg = {
		.ts_mode = PLB_TS_OFFSET, .ts_offset = offsetof(struct event_head, ts),
		.sample_type = PERF_SAMPLE_RAW, .window_ns = MERGE_WINDOW_NS,
	};

	for (size_t i = 0; i < n && !err; i++) {
		void *base;
		size_t sz;

		err = perf_buffer__buffer(pb, (int)i, &base, &sz) ||
		      plb_merge_source_perf(&srcs[i], base, sz);
	}
	if (err) {
		free(srcs);
		return -1;
	}
	merge = plb_merge_new(&cfg, srcs, (uint32_t)n);
	free(srcs);
	mout.buf = malloc(MERGE_BUF);
	mout.buf_size = MERGE_BUF;
	mout.ring = malloc(MERGE_MAX * sizeof(*mout.ring));
	mout.ts = malloc(MERGE_MAX * sizeof(*mout.ts));
	mout.flags = malloc(MERGE_MAX * sizeof(*mout.flags));
	mout.start = malloc(MERGE_MAX * sizeof(*mout.start));
	mout.len = malloc(MERGE_MAX * sizeof(*mout.len));
	return merge && mout.buf && mout.ring && mout.ts && mout.flags && mout.start && mout.len ? 0 : -1;
}

static int merge_fn(void *ctx, uint32_t ring, uint64_t ts, uint32_t flags, const void *data, uint32_t len)
{
	(void)ctx;
	(void)ring;
	(void)ts;
	(void)len;
	if (!(flags & PLB_MERGE_F_LOST))
		on_event(data);
	return 0;
}

/* Take everything the rule lets out now, through plb_merge_consume (perfmerge-fn) or
 * plb_merge_drain; returns the entries delivered or a negative error. */
static int merge_consume(int by_fn)
{
	int total = 0;

	for (;;) {
		int n = by_fn ? plb_merge_consume(merge, merge_fn, NULL, MERGE_MAX, 0)
			      : plb_merge_drain(merge, &mout, MERGE_MAX, 0);

		if (n < 0)
			return n;
		for (int i = 0; !by_fn && i < n; i++)
			if (!(mout.flags[i] & PLB_MERGE_F_LOST))
				on_event(mout.buf + mout.start[i]);
		total += n;
		if (plb_merge_next_deadline(merge) != 0)   /* 0: the output filled up, call again */
			return total;
	}
}

static struct bpf_object *obj;
static int prog_fd, is_perf, is_merge, merge_by_fn, ncpu;
static uint64_t size;

/* One trigger; returns the number of events emitted (fewer when the ring was full). */
static long trigger(uint64_t count, uint64_t first_seq, uint64_t flags, int cpu)
{
	struct produce_args args = { count, first_seq, size, flags };
	LIBBPF_OPTS(bpf_test_run_opts, opts, .ctx_in = &args, .ctx_size_in = sizeof(args));

	if (is_perf) {
		opts.flags = BPF_F_TEST_RUN_ON_CPU;
		opts.cpu = cpu;
	}
	if (bpf_prog_test_run_opts(prog_fd, &opts)) {
		fprintf(stderr, "bpf_prog_test_run_opts: %s\n", strerror(errno));
		exit(1);
	}
	return (long)opts.retval;
}

/* Emit `total` events as chunks, retrying what a full ring refused; perf streams are per CPU. */
static uint64_t stream_next[MAX_STREAMS];

static void produce(uint64_t total, uint64_t chunk, uint64_t flags, uint64_t period_ns)
{
	uint64_t done = 0, deadline = now_ns();
	int cpu = 0;

	while (done < total) {
		uint64_t count = total - done < chunk ? total - done : chunk;
		long got;

		if (period_ns) {
			struct timespec ts;

			deadline += period_ns;
			ts.tv_sec = deadline / 1000000000ull;
			ts.tv_nsec = deadline % 1000000000ull;
			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		}
		got = trigger(count, ((uint64_t)cpu << 48) | stream_next[cpu], flags, cpu);
		stream_next[cpu] += got;
		done += got;
		if ((uint64_t)got < count)
			usleep(50);   /* ring full: the consumer is behind */
		if (is_perf)
			cpu = (cpu + 1) % ncpu;
	}
}

static uint64_t failures(void)
{
	int fd = bpf_object__find_map_fd_by_name(obj, "failures");
	uint32_t key = is_perf;
	uint64_t val = 0;

	bpf_map_lookup_elem(fd, &key, &val);
	return val;
}

static int pct(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static const char *arg(int argc, char **argv, const char *key, const char *dflt)
{
	size_t n = strlen(key);

	for (int i = 6; i < argc; i++)
		if (!strncmp(argv[i], key, n) && argv[i][n] == '=')
			return argv[i] + n + 1;
	return dflt;
}

int main(int argc, char **argv)
{
	struct ring_buffer *rb = NULL;
	struct perf_buffer *pb = NULL;
	uint64_t events, produced = 0, rounds = 0, fail0, min_time_ns, t_last = 0, interleave;
	uint64_t warmup, warmed = 0, timed = 0;
	double wall = 0, cpu = 0, producer_s = -1, warmup_s = 0;
	uint64_t producer_times[2];   /* the steady or latency producer's start and end */
	const char *mode;
	int latency, drain;

	if (argc < 6) {
		fprintf(stderr, "usage: %s OBJ ringbuf|perfbuf drain|steady|latency SIZE EVENTS [key=value...]\n",
			argv[0]);
		return 2;
	}
	merge_by_fn = !strcmp(argv[2], "perfmerge-fn");
	is_merge = merge_by_fn || !strcmp(argv[2], "perfmerge");
	is_perf = is_merge || !strcmp(argv[2], "perfbuf");
	mode = argv[3];
	latency = !strcmp(mode, "latency");
	drain = !strcmp(mode, "drain");
	size = strtoull(argv[4], NULL, 0);
	events = strtoull(argv[5], NULL, 0);
	min_time_ns = strtoull(arg(argc, argv, "min_time_ms", "300"), NULL, 0) * 1000000ull;
	interleave = strtoull(arg(argc, argv, "interleave", "0"), NULL, 0);
	warmup = strtoull(arg(argc, argv, "warmup", "0"), NULL, 0);
	ncpu = libbpf_num_possible_cpus();
	if (ncpu > (int)sysconf(_SC_NPROCESSORS_ONLN))
		ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);

	obj = bpf_object__open_file(argv[1], NULL);
	if (!obj || bpf_object__load(obj)) {
		fprintf(stderr, "cannot load %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	prog_fd = bpf_program__fd(bpf_object__find_program_by_name(obj, is_perf ? "produce_perf" : "produce_ring"));
	if (is_perf) {
		int map_fd = bpf_object__find_map_fd_by_name(obj, "events");
		size_t pages = strtoull(arg(argc, argv, "perf_pages", "4096"), NULL, 0);

		if (latency) {
			pb = perf_buffer__new(map_fd, pages, perf_cb, NULL, NULL, NULL);
		} else {
			/* wakeup_events=1 (perf_buffer__new's default) caps the producer near 0.1-0.2 M ev/s here */
			struct perf_event_attr attr = {
				.type = PERF_TYPE_SOFTWARE, .config = PERF_COUNT_SW_BPF_OUTPUT,
				.sample_type = PERF_SAMPLE_RAW, .sample_period = 1,
				.wakeup_events = strtoul(arg(argc, argv, "perf_wakeup", "4096"), NULL, 0),
			};
			attr.size = sizeof(attr);
			pb = perf_buffer__new_raw(map_fd, pages, &attr, perf_raw_cb, NULL, NULL);
		}
		if (!pb) {
			fprintf(stderr, "perf_buffer__new: %s\n", strerror(errno));
			return 1;
		}
		if (is_merge && (latency || merge_open(pb))) {
			fprintf(stderr, "perfmerge: %s\n", latency ? "no latency mode" : strerror(errno));
			return 1;
		}
	} else {
		rb = ring_buffer__new(bpf_object__find_map_fd_by_name(obj, "rb"), ring_cb, NULL, NULL);
		if (!rb) {
			fprintf(stderr, "ring_buffer__new: %s\n", strerror(errno));
			return 1;
		}
	}
	if (latency) {
		st.cap_lat = events;
		st.lat = calloc(events, sizeof(*st.lat));
	}
	fail0 = failures();
	pin(0);

	if (drain) {
		uint64_t started = now_ns();   /* slow fills (interleave=1) end the rounds after 20 s */

		do {
			uint64_t t0, before = st.received, first = st.received;
			double c0;

			/* fill: each CPU's ring gets its share (perf), or the one ring gets all;
			 * interleave=K: round-robin over the CPUs, K events per trigger */
			uint64_t share = events / (is_perf ? ncpu : 1), step = interleave ? interleave : share;

			for (uint64_t done = 0; done < share; done += step) {
				uint64_t count = share - done < step ? share - done : step;

				for (int c = 0; c < (is_perf ? ncpu : 1); c++) {
					long got = trigger(count, ((uint64_t)c << 48) | stream_next[c],
							   PRODUCE_BATCH_WAKEUP, c);

					stream_next[c] += got;
					produced += got;
				}
			}
			if (is_merge) {   /* every event older than the window: time throughput, not the window */
				struct timespec pause = { 0, 2 * MERGE_WINDOW_NS };

				nanosleep(&pause, NULL);
			}
			t0 = now_ns();
			c0 = cpu_s();
			while (st.received < produced) {
				int n = is_merge ? merge_consume(merge_by_fn)
					: is_perf ? perf_buffer__consume(pb) : ring_buffer__consume(rb);

				if (n < 0 || st.received == before)
					break;
				before = st.received;
			}
			if (warmed < warmup && st.received >= produced) {   /* untimed */
				warmup_s += (now_ns() - t0) / 1e9;
				warmed++;
				continue;
			}
			wall += (now_ns() - t0) / 1e9;
			cpu += cpu_s() - c0;
			timed += st.received - first;
			rounds++;
		} while (wall * 1e9 < min_time_ns && rounds < 200 && now_ns() - started < 20000000000ull);
	} else {
		uint64_t rate = strtoull(arg(argc, argv, "rate", "10000"), NULL, 0);
		uint64_t chunk = strtoull(arg(argc, argv, "chunk", "4096"), NULL, 0);
		uint64_t t0 = now_ns(), idle_since = 0;
		double c0 = cpu_s();
		int done_pipe[2];
		pid_t child;

		if (pipe(done_pipe)) {
			perror("pipe");
			return 1;
		}
		child = fork();
		if (child == 0) {
			/* when done, tell the parent when it started and when it finished
			 * (CLOCK_MONOTONIC): the run is timed from the first, not from the
			 * fork (as the Python harness does, whose fork of a large process
			 * takes ~9 ms); did the consumer keep up, from the second */
			uint64_t times[2];

			close(done_pipe[0]);
			pin(ncpu - 1);
			times[0] = now_ns();
			if (latency)
				produce(events, 1, 0, 1000000000ull / rate);
			else
				produce(events, chunk, PRODUCE_BATCH_WAKEUP, 0);
			times[1] = now_ns();
			if (write(done_pipe[1], times, sizeof(times)) != sizeof(times))
				_exit(1);
			_exit(0);
		}
		close(done_pipe[1]);
		produced = events;
		while (st.received < produced) {
			uint64_t before = st.received;
			int n;

			if (is_merge) {
				/* wait on libbpf's epoll set without letting it consume, up to the
				 * merge's deadline (a held-back record wakes no fd) */
				struct epoll_event ev[64];
				int ms = plb_merge_poll_timeout_ms(merge);

				n = epoll_wait(perf_buffer__epoll_fd(pb), ev, 64, ms < 0 || ms > 10 ? 10 : ms);
				n = n < 0 ? -errno : merge_consume(merge_by_fn);
			} else {
				n = is_perf ? perf_buffer__poll(pb, 10) : ring_buffer__poll(rb, 10);
				if (n == 0)   /* a timer poll too: wakeups may be batched */
					n = is_perf ? perf_buffer__consume(pb) : ring_buffer__consume(rb);
			}
			if (n < 0 && n != -EINTR)
				break;
			if (st.received != before) {
				t_last = now_ns();
				idle_since = 0;
			} else if (!idle_since) {
				idle_since = now_ns();
			} else if (now_ns() - idle_since > 2000000000ull && waitpid(child, NULL, WNOHANG) == child) {
				child = 0;
				break;   /* the producer is done and nothing came for 2 s: the rest is missing */
			}
		}
		if (!t_last)
			t_last = now_ns();
		cpu = cpu_s() - c0;
		if (child > 0)
			waitpid(child, NULL, 0);
		if (read(done_pipe[0], producer_times, sizeof(producer_times)) == sizeof(producer_times)) {
			t0 = producer_times[0];   /* the producer's start */
			producer_s = (producer_times[1] - t0) / 1e9;
		}
		wall = t_last > t0 ? (t_last - t0) / 1e9 : 0;
		close(done_pipe[0]);
		rounds = 1;
	}

	printf("{\"received\": %llu, \"produced\": %llu, \"gaps\": %llu, \"seq_errors\": %llu, "
	       "\"wall_s\": %.9f, \"cpu_s\": %.6f, \"rounds\": %llu, \"producer_full\": %llu",
	       (unsigned long long)st.received, (unsigned long long)produced, (unsigned long long)st.gaps,
	       (unsigned long long)st.seq_errors, wall, cpu, (unsigned long long)rounds,
	       (unsigned long long)(failures() - fail0));
	if (producer_s >= 0)
		printf(", \"producer_s\": %.9f", producer_s);
	if (drain)
		printf(", \"timed_events\": %llu, \"warmup_s\": %.9f", (unsigned long long)timed, warmup_s);
	if (st.nlat) {
		qsort(st.lat, st.nlat, sizeof(*st.lat), pct);
		printf(", \"p50_us\": %.3f, \"p99_us\": %.3f", st.lat[st.nlat / 2] / 1e3,
		       st.lat[st.nlat * 99 / 100] / 1e3);
	}
	printf("}\n");
	ring_buffer__free(rb);
	plb_merge_free(merge);   /* before the rings it points into */
	perf_buffer__free(pb);
	bpf_object__close(obj);
	return 0;
}
