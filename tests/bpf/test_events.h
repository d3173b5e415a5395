/* Shared by the test BPF programs and (by value) the Python tests. */
#ifndef TEST_EVENTS_H
#define TEST_EVENTS_H

/* ctx_in of ringbuf.bpf.c:emit */
struct emit_args {
	__u32 count;         /* records to write */
	__u32 flags;         /* BPF_RB_NO_WAKEUP / BPF_RB_FORCE_WAKEUP / 0 */
	__u64 first_seq;
	__u64 value;
	__u32 discard_every; /* discard every Nth record (0: never) */
	__u32 target;        /* 0: rb, 1: rb2 */
};

struct rb_event {
	__u64 seq;
	__u64 value;
	__u32 ring;
	__u32 pad;
};

struct perf_sample {
	__u64 seq;
	__u64 value;
	__u32 cpu;
	__u32 pad;
};

#endif
