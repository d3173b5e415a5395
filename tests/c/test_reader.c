/* test_reader.c - the native reader thread over a synthetic ring.
 *
 * The ring is tests/c/synth.h's (a memfd mapped twice back to back, as in
 * test_ringbuf.c), and its producer follows kernel/bpf/ringbuf.c, including
 * its wakeup rule:
 * after the commit's full barrier it wakes consumers (here: writes the
 * eventfd standing in for the map fd) only if the committed record sits at
 * consumer_pos. The reader's safety-net timeout is set far above the test's
 * run time, so a lost wakeup shows up as a timeout (and a stall).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "plb_ringbuf.c"
#include "plb_queue.c"
#include "plb_reader.c"

#include <dirent.h>
#include <linux/bpf.h>
#include <sched.h>
#include <stdio.h>
#include <sys/syscall.h>

#include "check.h"
#include "synth.h"

static uint32_t rsize(uint32_t seq)
{
	return 8 + seq * 2654435761u % 200;
}

static void fill(uint8_t *p, uint32_t seq, uint32_t size)
{
	memcpy(p, &seq, 4);
	for (uint32_t i = 4; i < size; i++)
		p[i] = (uint8_t)(seq + i);
}

static int rec_ok(const uint8_t *p, uint32_t size, uint32_t *seq)
{
	memcpy(seq, p, 4);
	if (size != rsize(*seq))
		return 0;
	for (uint32_t i = 4; i < size; i++)
		if (p[i] != (uint8_t)(*seq + i))
			return 0;
	return 1;
}

/* Reserve (waiting while the ring is full), fill, commit. */
static uint64_t produce(struct synth *s, uint32_t seq)
{
	uint64_t full = 0;
	void *p;

	while (!(p = synth_reserve(s, rsize(seq)))) {
		full++;
		sched_yield();
	}
	fill(p, seq, rsize(seq));
	synth_commit(s, p, 0);
	return full;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	CHECK(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own fd */
}

static uint8_t out[1 << 16];
static uint32_t starts[1024], lens[1024];

/* ---- tests ---- */

/* Some thread of this process other than the caller sleeps in epoll_wait
 * (the reader between passes), per /proc/self/task/TID/wchan. */
static int reader_in_epoll(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int found = 0;

	CHECK(d);
	while (!found && (e = readdir(d))) {
		char path[64], wchan[64] = "";
		FILE *f;

		if (e->d_name[0] == '.' || atoi(e->d_name) == (int)syscall(SYS_gettid))
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/wchan", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(wchan, sizeof(wchan), f))
			found = strstr(wchan, "epoll") != NULL;
		fclose(f);
	}
	closedir(d);
	return found;
}

/* Wait until r sleeps in a wait that outlasts the default safety-net timeout
 * (the one plb_reader_set_timeout() gave it, taken by the wait after the
 * call): in epoll_wait, and still there with no timeout counted 300 ms later.
 * A fixed sleep is not enough on a loaded machine: the thread may not have
 * finished its first pass yet, or still be in a wait with the old timeout. */
static void wait_long_sleep(struct plb_reader *r)
{
	struct plb_reader_stats st;
	uint64_t timeouts;

	for (int tries = 0; tries < 1000; tries++) {
		if (!reader_in_epoll()) {
			usleep(1000);
			continue;
		}
		plb_reader_stats(r, &st);
		timeouts = st.timeouts;
		usleep(300000); /* above PLB_READER_DEFAULT_TIMEOUT_MS */
		plb_reader_stats(r, &st);
		if (st.timeouts == timeouts && reader_in_epoll())
			return;
	}
	CHECK(!"the reader never slept in its long wait");
}

static void t_args_and_lifecycle(void)
{
	struct synth s;
	struct plb_queue *q;
	struct plb_reader *r;
	struct plb_reader_stats st;
	struct plb_rb_view bad;
	int fds;

	synth_init(&s, 4096);
	q = plb_queue_create(16, 4096, 0, 0);
	CHECK(plb_reader_start(NULL, s.v, s.wake_fd, q, 8) == -EINVAL);
	CHECK(plb_reader_start(&r, s.v, s.wake_fd, NULL, 8) == -EINVAL);
	bad = s.v;
	bad.mask = 4094;
	CHECK(plb_reader_start(&r, bad, s.wake_fd, q, 8) == -EINVAL);
	CHECK(plb_reader_start(&r, s.v, 1000000, q, 8) == -EBADF);
	plb_reader_destroy(NULL);

	fds = count_fds();
	for (int i = 0; i < 20; i++) {
		CHECK(plb_reader_start(&r, s.v, s.wake_fd, q, 8) == 0);
		if (i % 2)
			CHECK(plb_reader_stop(r) == 0);
		plb_reader_destroy(r); /* stops when needed */
	}
	CHECK(count_fds() == fds);

	/* Stop while blocked: prompt, although the timeout is far away. */
	CHECK(plb_reader_start(&r, s.v, s.wake_fd, q, 8) == 0);
	plb_reader_set_timeout(r, 30000);
	usleep(50000);
	plb_reader_stats(r, &st);
	CHECK(st.running == 1 && st.records_read == 0);
	/* No clock: a stop that did not wake it would return after the timeout, counted below. */
	CHECK(plb_reader_stop(r) == 0);
	CHECK(plb_reader_stop(r) == 0); /* idempotent */
	plb_reader_stats(r, &st);
	CHECK(st.running == 0 && st.timeouts == 0 && st.error == 0);
	plb_reader_destroy(r);
	CHECK(count_fds() == fds);
	plb_queue_destroy(q);
	synth_free(&s);
}

/* A busy head: the reader sleeps through it (no spinning) and wakes on its
 * commit; nothing behind it is taken early. */
static void t_busy_head(void)
{
	struct synth s;
	struct plb_queue *q;
	struct plb_reader *r;
	struct plb_reader_stats st;
	void *a, *b;
	size_t used;
	uint32_t seq;
	int n;

	synth_init(&s, 4096);
	q = plb_queue_create(16, 4096, 0, 0);
	CHECK(plb_reader_start(&r, s.v, s.wake_fd, q, 8) == 0);
	plb_reader_set_timeout(r, 30000);
	a = synth_reserve(&s, rsize(1));
	b = synth_reserve(&s, rsize(2));
	fill(b, 2, rsize(2));
	synth_commit(&s, b, 0); /* behind a busy head: no wakeup */
	synth_wake(&s);         /* a spurious one, as BPF_RB_FORCE_WAKEUP */
	usleep(100000);
	plb_reader_stats(r, &st);
	CHECK(st.records_read == 0 && st.busy_waits >= 1);
	CHECK(st.wakeups <= 2 && st.busy_waits <= 3); /* asleep, not spinning */
	CHECK(plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 16, 0, &used) == 0);
	fill(a, 1, rsize(1));
	synth_commit(&s, a, 0); /* at the head: wakes the reader */
	n = plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 16, 5000, &used);
	if (n == 1) { /* the reader may push them one at a time */
		int m = plb_queue_pop_batch(q, out + 512, sizeof(out) - 512,
					    starts + 1, lens + 1, 1, 5000, &used);
		CHECK(m == 1);
		starts[1] += 512;
		n = 2;
	}
	CHECK(n == 2);
	CHECK(rec_ok(out + starts[0], lens[0], &seq) && seq == 1);
	CHECK(rec_ok(out + starts[1], lens[1], &seq) && seq == 2);
	CHECK(plb_reader_stop(r) == 0);
	plb_reader_stats(r, &st);
	CHECK(st.records_read == 2 && st.timeouts == 0);
	CHECK(*s.cons == s.prod_local);
	plb_reader_destroy(r);
	plb_queue_destroy(q);
	synth_free(&s);
}

/* Nobody pops: the queue overflows, but the reader still drains the kernel
 * ring completely, counting the drops. */
static void t_queue_full_keeps_draining(void)
{
	struct synth s;
	struct plb_queue *q;
	struct plb_reader *r;
	struct plb_reader_stats st;
	struct plb_queue_stats qs;
	uint64_t full = 0;

	synth_init(&s, 16384);
	q = plb_queue_create(10, 1 << 20, 4, 4096);
	CHECK(plb_reader_start(&r, s.v, s.wake_fd, q, 16) == 0);
	plb_reader_set_timeout(r, 30000);
	for (uint32_t seq = 0; seq < 20000; seq++)
		full += produce(&s, seq);
	CHECK(plb_reader_stop(r) == 0);
	plb_reader_stats(r, &st);
	plb_queue_stats(q, &qs);
	CHECK(st.records_read == 20000 && qs.pushed == 20000);
	CHECK(qs.current_size == 10 && qs.dropped == 19990);
	CHECK(st.records_dropped == qs.dropped);
	CHECK(qs.dropped_pending == 4 && qs.dropped_unhandled == 19986);
	CHECK(qs.queue_full_count == 1);
	CHECK(st.timeouts == 0 && *s.cons == s.prod_local);
	/* The first 10 are queued, the next 4 in the side ring. */
	CHECK(plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 64, 0, NULL) == -EINVAL);
	{
		size_t used;
		uint32_t seq;
		int n = plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 64, 0, &used);

		CHECK(n == 10);
		for (int i = 0; i < n; i++)
			CHECK(rec_ok(out + starts[i], lens[i], &seq) && seq == (uint32_t)i);
		n = plb_queue_pop_dropped_batch(q, out, sizeof(out), starts, lens, 64, &used);
		CHECK(n == 4);
		for (int i = 0; i < n; i++)
			CHECK(rec_ok(out + starts[i], lens[i], &seq) && seq == 10 + (uint32_t)i);
	}
	printf("reader queue-full: ring-full waits %llu, batches %llu, wakeups %llu\n",
	       (unsigned long long)full, (unsigned long long)st.batches,
	       (unsigned long long)st.wakeups);
	plb_reader_destroy(r);
	plb_queue_destroy(q);
	synth_free(&s);
}

/* No wakeups at all (BPF_RB_NO_WAKEUP): the timeout polls; stop drains. */
static void t_no_wakeup(void)
{
	struct synth s;
	struct plb_queue *q;
	struct plb_reader *r;
	struct plb_reader_stats st;
	size_t used;
	double t0;
	int n;

	synth_init(&s, 16384);
	s.no_wakeup = 1;
	q = plb_queue_create(1000, 1 << 20, 0, 0);
	/* Timer-driven: the poll interval picks records up. */
	CHECK(plb_reader_start(&r, s.v, -1, q, 16) == 0);
	plb_reader_set_timeout(r, 5);
	/* The reader is asleep when the records come: its timer has fired once at least. */
	t0 = now_ms();
	do {
		usleep(1000);
		plb_reader_stats(r, &st);
	} while (st.timeouts == 0 && now_ms() - t0 < 30000);
	CHECK(st.timeouts >= 1 && st.records_read == 0);
	for (uint32_t seq = 0; seq < 30; seq++)
		produce(&s, seq);
	n = plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 64, 5000, &used);
	CHECK(n >= 1);
	CHECK(plb_reader_stop(r) == 0);
	plb_reader_stats(r, &st);
	CHECK(st.records_read == 30 && st.timeouts >= 1);
	plb_reader_destroy(r);

	/* With a wake fd that never fires and a long timeout, records wait in
	 * the ring; stop's final pass takes them. */
	CHECK(plb_reader_start(&r, s.v, s.wake_fd, q, 16) == 0);
	plb_reader_set_timeout(r, 30000);
	wait_long_sleep(r);
	for (uint32_t seq = 30; seq < 60; seq++)
		produce(&s, seq);
	usleep(20000);
	plb_reader_stats(r, &st);
	CHECK(st.records_read == 0);
	CHECK(plb_reader_stop(r) == 0);
	plb_reader_stats(r, &st);
	CHECK(st.records_read == 30 && *s.cons == s.prod_local);
	plb_reader_destroy(r);
	plb_queue_destroy(q);
	synth_free(&s);
}

static void t_corrupt(void)
{
	struct synth s;
	struct plb_queue *q;
	struct plb_reader *r;
	struct plb_reader_stats st;
	uint32_t *hdr;
	double t0;

	synth_init(&s, 4096);
	q = plb_queue_create(16, 4096, 0, 0);
	CHECK(plb_reader_start(&r, s.v, s.wake_fd, q, 8) == 0);
	plb_reader_set_timeout(r, 30000);
	produce(&s, 1); /* a good record first */
	hdr = (uint32_t *)(void *)(s.data + (s.prod_local & s.v.mask));
	hdr[0] = 8000; /* larger than the ring */
	s.prod_local += 16;
	__atomic_store_n(s.prod, s.prod_local, __ATOMIC_RELEASE);
	synth_wake(&s);
	t0 = now_ms();
	do {
		usleep(1000);
		plb_reader_stats(r, &st);
	} while (st.running && now_ms() - t0 < 30000); /* a generous deadline: the machine may be busy */
	CHECK(!st.running && st.corrupt == 1 && st.error == -EBADMSG);
	CHECK(st.records_read == 1);
	CHECK(plb_reader_stop(r) == -EBADMSG);
	CHECK(plb_reader_stop(r) == -EBADMSG);
	plb_reader_destroy(r);
	plb_queue_destroy(q);
	synth_free(&s);
}

/* The full flow: a producer at full speed (with discards and out-of-order
 * commits), a slow consumer forcing drops, a drop drainer; every record is
 * accounted for exactly. */
#define FN 300000U

struct flow {
	struct synth *s;
	struct plb_queue *q;
	uint8_t *seen;
	uint64_t ring_full, discards, got, dgot;
	int drain_stop;
};

static void *f_producer(void *arg)
{
	struct flow *f = arg;
	struct synth *s = f->s;
	uint32_t seq = 0;

	while (seq < FN) {
		void *a, *b;

		if (seq % 13 == 7) {
			while (!(a = synth_reserve(s, 40)))
				f->ring_full++, sched_yield();
			synth_commit(s, a, 1);
			f->discards++;
		}
		if (seq % 9 == 4 && seq + 1 < FN) {
			/* Two "CPUs": B commits before A. */
			while (!(a = synth_reserve(s, rsize(seq))))
				f->ring_full++, sched_yield();
			while (!(b = synth_reserve(s, rsize(seq + 1))))
				f->ring_full++, sched_yield();
			fill(b, seq + 1, rsize(seq + 1));
			synth_commit(s, b, 0);
			fill(a, seq, rsize(seq));
			synth_commit(s, a, 0);
			seq += 2;
		} else {
			f->ring_full += produce(s, seq);
			seq++;
		}
		if (seq % 20000 < 2)
			usleep(2000); /* idle gaps: the reader goes to sleep */
	}
	return NULL;
}

static void *f_consumer(void *arg)
{
	struct flow *f = arg;
	uint8_t *buf = malloc(1 << 16);
	uint32_t s[256], l[256], last = 0, seq;
	int have = 0, rounds = 0, n;
	size_t used;

	while ((n = plb_queue_pop_batch(f->q, buf, 1 << 16, s, l, 256, 10000,
					&used)) != -EPIPE) {
		CHECK(n > 0); /* never a 10 s timeout */
		for (int i = 0; i < n; i++) {
			CHECK(rec_ok(buf + s[i], l[i], &seq) && seq < FN);
			CHECK(!have || seq > last);
			CHECK(f->seen[seq] == 0);
			f->seen[seq] = 1;
			last = seq;
			have = 1;
		}
		f->got += (uint64_t)n;
		if (++rounds % 2 == 0)
			usleep(300); /* slow Python */
	}
	free(buf);
	return NULL;
}

static void *f_dropper(void *arg)
{
	struct flow *f = arg;
	uint8_t *buf = malloc(1 << 16);
	uint32_t s[256], l[256], last = 0, seq;
	int have = 0;
	size_t used;

	for (;;) {
		int stop = __atomic_load_n(&f->drain_stop, __ATOMIC_ACQUIRE);
		int n = plb_queue_pop_dropped_batch(f->q, buf, 1 << 16, s, l, 256, &used);

		CHECK(n >= 0);
		for (int i = 0; i < n; i++) {
			CHECK(rec_ok(buf + s[i], l[i], &seq) && seq < FN);
			CHECK(!have || seq > last);
			CHECK(__atomic_exchange_n(&f->seen[seq], 2, __ATOMIC_RELAXED) == 0);
			last = seq;
			have = 1;
		}
		f->dgot += (uint64_t)n;
		if (n == 0) {
			if (stop)
				break;
			usleep(1000);
		}
	}
	free(buf);
	return NULL;
}

static void t_flow(void)
{
	struct synth s;
	struct flow f;
	struct plb_reader *r;
	struct plb_reader_stats st;
	struct plb_queue_stats qs;
	pthread_t tp, tc, td;
	uint64_t missing = 0;
	double t0 = now_ms();

	synth_init(&s, 65536);
	/* Start near 2^32 so positions cross it. */
	*s.cons = *s.prod = s.prod_local = (1ULL << 32) - 65536 / 2;
	memset(&f, 0, sizeof(f));
	f.s = &s;
	f.seen = calloc(FN, 1);
	f.q = plb_queue_create(500, 256 * 1024, 256, 32 * 1024);
	CHECK(f.q && f.seen);
	CHECK(plb_reader_start(&r, s.v, s.wake_fd, f.q, 32) == 0);
	plb_reader_set_timeout(r, 20000); /* a lost wakeup would stall, visibly */

	CHECK(pthread_create(&tc, NULL, f_consumer, &f) == 0);
	CHECK(pthread_create(&td, NULL, f_dropper, &f) == 0);
	CHECK(pthread_create(&tp, NULL, f_producer, &f) == 0);
	pthread_join(tp, NULL);
	CHECK(plb_reader_stop(r) == 0);
	plb_queue_close(f.q);
	pthread_join(tc, NULL);
	__atomic_store_n(&f.drain_stop, 1, __ATOMIC_RELEASE);
	pthread_join(td, NULL);

	plb_reader_stats(r, &st);
	plb_queue_stats(f.q, &qs);
	CHECK(st.error == 0 && st.corrupt == 0);
	CHECK(st.timeouts == 0); /* no lost wakeup */
	CHECK(st.records_read == FN && st.discarded == f.discards);
	CHECK(*s.cons == s.prod_local);
	CHECK(qs.pushed == FN);
	CHECK(qs.pushed == qs.popped + qs.dropped + qs.current_size);
	CHECK(qs.current_size == 0 && qs.popped == f.got);
	CHECK(qs.dropped == st.records_dropped);
	CHECK(qs.dropped == qs.dropped_popped + qs.dropped_pending + qs.dropped_unhandled);
	CHECK(qs.dropped_pending == 0 && qs.dropped_popped == f.dgot);
	for (uint32_t i = 0; i < FN; i++)
		missing += f.seen[i] == 0;
	CHECK(missing == qs.dropped_unhandled);
	printf("reader flow: %u records in %.0f ms; popped %llu, dropped %llu "
	       "(%llu to the drop handler, %llu unhandled), %llu overflow episodes; "
	       "reader batches %llu, wakeups %llu (sent %llu), busy waits %llu, "
	       "ring-full waits %llu\n",
	       FN, now_ms() - t0, (unsigned long long)qs.popped,
	       (unsigned long long)qs.dropped, (unsigned long long)qs.dropped_popped,
	       (unsigned long long)qs.dropped_unhandled,
	       (unsigned long long)qs.queue_full_count,
	       (unsigned long long)st.batches, (unsigned long long)st.wakeups,
	       (unsigned long long)s.wakes_sent, (unsigned long long)st.busy_waits,
	       (unsigned long long)f.ring_full);
	plb_reader_destroy(r);
	plb_queue_destroy(f.q);
	free(f.seen);
	synth_free(&s);
}


/* ---- the real kernel, when bpf() is allowed (skipped otherwise) ---- */

static int sys_bpf(int cmd, union bpf_attr *a)
{
	return (int)syscall(__NR_bpf, cmd, a, sizeof(*a));
}

/* A socket filter that outputs {u64 skb->len} with bpf_ringbuf_output and
 * returns the helper's result, so each BPF_PROG_TEST_RUN says whether the
 * kernel accepted the record. Packet sizes encode the sequence number. */
static int k_load(int map_fd)
{
	struct bpf_insn prog[] = {
		{.code = BPF_LDX | BPF_MEM | BPF_W, .dst_reg = BPF_REG_0,
		 .src_reg = BPF_REG_1, .off = offsetof(struct __sk_buff, len)},
		{.code = BPF_STX | BPF_MEM | BPF_DW, .dst_reg = BPF_REG_10,
		 .src_reg = BPF_REG_0, .off = -8},
		{.code = BPF_LD | BPF_DW | BPF_IMM, .dst_reg = BPF_REG_1,
		 .src_reg = BPF_PSEUDO_MAP_FD, .imm = map_fd},
		{0},
		{.code = BPF_ALU64 | BPF_MOV | BPF_X, .dst_reg = BPF_REG_2,
		 .src_reg = BPF_REG_10},
		{.code = BPF_ALU64 | BPF_ADD | BPF_K, .dst_reg = BPF_REG_2, .imm = -8},
		{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_3, .imm = 8},
		{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_4, .imm = 0},
		{.code = BPF_JMP | BPF_CALL, .imm = BPF_FUNC_ringbuf_output},
		{.code = BPF_JMP | BPF_EXIT},
	};
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
	a.insns = (uint64_t)(uintptr_t)prog;
	a.insn_cnt = sizeof(prog) / sizeof(prog[0]);
	a.license = (uint64_t)(uintptr_t)"GPL";
	return sys_bpf(BPF_PROG_LOAD, &a);
}

static int k_trigger(int prog_fd, uint32_t size, int *retval)
{
	static uint8_t pkt[2048];
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.test.prog_fd = (uint32_t)prog_fd;
	a.test.data_in = (uint64_t)(uintptr_t)pkt;
	a.test.data_size_in = size;
	a.test.repeat = 1;
	if (sys_bpf(BPF_PROG_TEST_RUN, &a))
		return -errno;
	*retval = (int)a.test.retval;
	return 0;
}

#define KN 20000

static void t_kernel(void)
{
	const uint32_t size = 64 * 1024;
	struct plb_rb_mapping m;
	struct plb_queue *q;
	struct plb_reader *r;
	struct plb_reader_stats st;
	struct plb_queue_stats qs;
	union bpf_attr a;
	uint64_t base = 0, expect_at = 0;
	static uint8_t accepted[KN];
	uint32_t naccepted = 0, got = 0;
	int map_fd, prog_fd, retval, fds = count_fds();
	size_t used;
	void *w;

	memset(&a, 0, sizeof(a));
	a.map_type = BPF_MAP_TYPE_RINGBUF;
	a.max_entries = size;
	map_fd = sys_bpf(BPF_MAP_CREATE, &a);
	if (map_fd < 0) {
		printf("reader kernel: skipped (BPF_MAP_CREATE: %s)\n", strerror(errno));
		return;
	}
	prog_fd = k_load(map_fd);
	if (prog_fd < 0) {
		printf("reader kernel: skipped (BPF_PROG_LOAD: %s)\n", strerror(errno));
		close(map_fd);
		return;
	}
	CHECK(plb_rb_map(map_fd, size, &m) == 0);
	/* The kernel refuses what plb_rb_map must not do: a writable producer
	 * page, or a writable mapping larger than the consumer page. */
	w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, map_fd, 4096);
	CHECK(w == MAP_FAILED);
	w = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, map_fd, 0);
	CHECK(w == MAP_FAILED);
	CHECK(plb_rb_available(&m.view) == 0);

	/* Calibrate: what skb->len reads for the smallest packet. */
	CHECK(k_trigger(prog_fd, 64, &retval) == 0 && retval == 0);
	CHECK(plb_rb_read(&m.view, out, sizeof(out), starts, lens, 4, 1, &used) == 1);
	CHECK(lens[0] == 8);
	memcpy(&base, out, 8);

	q = plb_queue_create(KN, 1 << 20, 0, 0);
	CHECK(plb_reader_start(&r, m.view, map_fd, q, 64) == 0);
	plb_reader_set_timeout(r, 20000);
	for (uint32_t i = 0; i < KN; i++) {
		CHECK(k_trigger(prog_fd, 64 + i % 1000, &retval) == 0);
		accepted[i] = retval == 0; /* -EAGAIN: the kernel ring was full */
		naccepted += accepted[i];
	}
	CHECK(plb_reader_stop(r) == 0);
	plb_reader_stats(r, &st);
	plb_queue_stats(q, &qs);
	CHECK(st.records_read == naccepted && qs.pushed == naccepted && qs.dropped == 0);
	CHECK(st.timeouts == 0 && plb_rb_available(&m.view) == 0);
	/* Every accepted record, in trigger order. */
	for (;;) {
		int n = plb_queue_pop_batch(q, out, sizeof(out), starts, lens, 1024, 0, &used);

		CHECK(n >= 0);
		if (n == 0)
			break;
		for (int i = 0; i < n; i++) {
			uint64_t val;

			while (expect_at < KN && !accepted[expect_at])
				expect_at++;
			CHECK(expect_at < KN && lens[i] == 8);
			memcpy(&val, out + starts[i], 8);
			CHECK(val == base + expect_at % 1000);
			expect_at++;
			got++;
		}
	}
	CHECK(got == naccepted);
	printf("reader kernel: %u triggers, %u accepted by the kernel, all read in order; "
	       "batches %llu, wakeups %llu, busy waits %llu\n",
	       KN, naccepted, (unsigned long long)st.batches,
	       (unsigned long long)st.wakeups, (unsigned long long)st.busy_waits);
	plb_reader_destroy(r);
	plb_queue_destroy(q);
	plb_rb_unmap(&m);
	close(prog_fd);
	close(map_fd);
	CHECK(count_fds() == fds);
}

int main(void)
{
	t_args_and_lifecycle();
	t_busy_head();
	t_queue_full_keeps_draining();
	t_no_wakeup();
	t_corrupt();
	t_flow();
	t_kernel();
	printf("test_reader: ok\n");
	return 0;
}
