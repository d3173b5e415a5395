/* plb_perfring.h - a pure cursor over one kernel perf ring in memory.
 *
 * A perf ring (one per CPU of a BPF_MAP_TYPE_PERF_EVENT_ARRAY, as libbpf's
 * perf_buffer__buffer() hands it out) is a struct perf_event_mmap_page followed
 * by data_size bytes of records, data_size a power of two
 * (include/uapi/linux/perf_event.h). The kernel appends records at data_head;
 * user space consumes at data_tail. The contract, from the comment above
 * data_head in that header and from libbpf's ring_buffer_read_head() /
 * ring_buffer_write_tail() (tools/include/linux/ring_buffer.h):
 *   - load data_head with acquire semantics: every record below it is then
 *     completely written (the kernel publishes data_head last, in
 *     perf_output_put_handle());
 *   - store data_tail with release semantics, after the last read of the
 *     records it frees: from then on the kernel may overwrite them.
 * Every record starts with an 8-byte struct perf_event_header {u32 type;
 * u16 misc; u16 size} and has a size that is a multiple of 8
 * (perf_prepare_header() warns otherwise), so a header never wraps around the
 * end of the ring but the rest of a record can. The ring is never mapped twice
 * to avoid that (the kernel forbids overlapping mappings, CVE-2025-38563): a
 * wrapping record is copied, either by plb_perfring_peek() into the cursor's
 * scratch buffer or by plb_perfring_read() into the caller's memory.
 *
 * The cursor takes the memory as arguments, so tests drive it over synthetic
 * rings in ordinary memory exactly as the library drives it over the kernel's.
 * It is single-consumer: one thread owns a cursor; never let libbpf's
 * perf_buffer__poll/consume read the same ring.
 *
 * Memory lifetime: a record's bytes stay valid (in the ring) until data_tail
 * is released past them by plb_perfring_commit(). advance() only moves the
 * local tail, so commits may be batched, but whatever points into the ring for
 * an advanced record must be delivered or copied before the next commit. A
 * pointer into the scratch buffer stays valid until the next plb_perfring_peek()
 * or plb_perfring_release().
 */
#ifndef PLB_PERFRING_H
#define PLB_PERFRING_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/perf_event.h>

struct plb_perfring {
	struct perf_event_mmap_page *page; /* the kernel's control page */
	uint8_t *data;                     /* page + data_offset */
	uint64_t size;                     /* data_size: a power of two */
	uint64_t mask;                     /* size - 1 */
	uint64_t head;                     /* data_head as last acquire-loaded */
	uint64_t tail;                     /* local read position (next record) */
	uint64_t committed;                /* last value released to data_tail */
	uint8_t *scratch;                  /* copy of the last wrapping record */
	uint32_t scratch_cap;
};

/* One record at the cursor, as plb_perfring_peek*() describes it. */
struct plb_perf_rec {
	uint64_t pos;         /* ring position (unmasked) of its header */
	uint32_t type;        /* PERF_RECORD_* */
	uint16_t misc;
	uint16_t size;        /* the whole record, header included */
	const uint8_t *bytes; /* the whole record, contiguous (see peek/peek_header) */
	int copied;           /* bytes points into the cursor's scratch buffer */
};

/* Return values of the peek functions (negative: -errno style). */
enum plb_perfring_result {
	PLB_PR_EMPTY = 0,    /* tail == cached head: nothing to read (refresh?) */
	PLB_PR_RECORD = 1,   /* *rec describes the record at the tail */
	PLB_PR_CORRUPT = -EBADMSG /* a size that cannot be a record: the rest
				     up to head cannot be walked (skip_to_head) */
};

/* Bind a cursor to a ring; reads the current data_tail (ours to own from now)
 * and data_head. Returns 0, or -EINVAL (NULL memory, size not a power of two). */
int plb_perfring_init(struct plb_perfring *r, struct perf_event_mmap_page *page,
		      uint8_t *data, uint64_t data_size);

/* Free the scratch buffer (the ring memory is the caller's). */
void plb_perfring_release(struct plb_perfring *r);

/* Acquire-load data_head into the cursor; returns the bytes pending after the
 * local tail. */
uint64_t plb_perfring_refresh(struct plb_perfring *r);

/* Bytes between the local tail and the cached head (no memory access). */
static inline uint64_t plb_perfring_pending(const struct plb_perfring *r)
{
	return r->head - r->tail;
}

/* Describe the record at the local tail without copying: rec->bytes points into
 * the ring when the record is contiguous there, else is NULL (use
 * plb_perfring_read() on rec->pos). PLB_PR_EMPTY, PLB_PR_RECORD or
 * PLB_PR_CORRUPT (size < 8, not a multiple of 8, or beyond the cached head). */
int plb_perfring_peek_header(const struct plb_perfring *r, struct plb_perf_rec *rec);

/* As peek_header, but rec->bytes is always the whole record, contiguous: in the
 * ring, or (wrapping) a copy in the cursor's scratch buffer (rec->copied = 1).
 * May also return -ENOMEM (scratch allocation). */
int plb_perfring_peek(struct plb_perfring *r, struct plb_perf_rec *rec);

/* Copy len bytes starting at ring position pos (unmasked) to dst, in two pieces
 * when they wrap; len <= size. Reads only memory below a loaded head. */
void plb_perfring_read(const struct plb_perfring *r, uint64_t pos, void *dst,
		       uint64_t len);

/* Move the local tail past a record returned by peek (no store to the ring). */
static inline void plb_perfring_advance(struct plb_perfring *r,
					const struct plb_perf_rec *rec)
{
	r->tail = rec->pos + rec->size;
}

/* Give up on everything pending: local tail = cached head (after corruption). */
static inline void plb_perfring_skip_to_head(struct plb_perfring *r)
{
	r->tail = r->head;
}

/* Release-store the local tail to data_tail, handing the consumed space back to
 * the kernel. Everything read from advanced records must be done before this. */
void plb_perfring_commit(struct plb_perfring *r);

#endif
