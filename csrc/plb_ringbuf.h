/* plb_ringbuf.h - walking a BPF ring buffer (BPF_MAP_TYPE_RINGBUF) in memory.
 *
 * Kernel layout (kernel/bpf/ringbuf.c, include/uapi/linux/bpf.h):
 *   page 0            consumer_pos, read-write for user space
 *   page 1            producer_pos, read-only
 *   page 2 ...        data_size bytes, mapped twice back to back (read-only),
 *                     so a record never wraps in the mapping.
 * Each record starts with an 8-byte header: u32 len (bit 31 BUSY, bit 30
 * DISCARD), u32 page offset; the record occupies round_up(len + 8, 8) bytes.
 *
 * The walker takes the memory as arguments, so tests drive it over synthetic
 * rings in ordinary memory exactly as the library drives it over the kernel's.
 */
#ifndef PLB_RINGBUF_H
#define PLB_RINGBUF_H

#include <stddef.h>
#include <stdint.h>

struct plb_rb_view {
	uint64_t *consumer_pos;        /* page 0 */
	const uint64_t *producer_pos;  /* page 1 */
	const uint8_t *data;           /* 2 * (mask + 1) bytes, double mapped */
	uint64_t mask;                 /* data_size - 1; data_size a power of two */
};

enum plb_rb_peek_result {
	PLB_RB_EMPTY = 0,   /* pos == producer_pos: nothing to read */
	PLB_RB_RECORD = 1,  /* a committed record: *data, *len valid */
	PLB_RB_BUSY = 2,    /* the head is still being written: stop here */
	PLB_RB_DISCARD = 3, /* a discarded record: skip it (advance to *next_pos) */
	PLB_RB_CORRUPT = -1 /* a length that cannot fit the ring */
};

/* Look at the record at consumer position pos without consuming it.
 * Acquire-loads producer_pos and the record header. */
int plb_rb_peek(const struct plb_rb_view *v, uint64_t pos, const void **data,
		uint32_t *len, uint64_t *next_pos);

/* Publish pos as the new consumer position (release store). */
void plb_rb_commit(struct plb_rb_view *v, uint64_t pos);

/* ---- additions: constants, batch read, mmap of the kernel's ring ---- */

/* Mirrored from include/uapi/linux/bpf.h (BPF_RINGBUF_BUSY_BIT,
 * BPF_RINGBUF_DISCARD_BIT, BPF_RINGBUF_HDR_SZ); the struct they describe is
 * struct bpf_ringbuf_hdr { u32 len; u32 pg_off; } in kernel/bpf/ringbuf.c. */
#define PLB_RB_BUSY_BIT    (1U << 31)
#define PLB_RB_DISCARD_BIT (1U << 30)
#define PLB_RB_HDR_SZ      8U

/* The consumer position we last published (we are its only writer). */
uint64_t plb_rb_consumer_pos(const struct plb_rb_view *v);

/* Bytes the producer has reserved beyond the consumer position: committed,
 * discarded and still-busy records, headers and padding included. */
uint64_t plb_rb_available(const struct plb_rb_view *v);

/* Copy up to max_records committed records, from the consumer position on,
 * into out: record i is out[starts[i] .. starts[i] + lens[i]), starts[i] a
 * multiple of 8 (relative to out), records in ring order, discarded records
 * skipped. Stops at an empty ring, a busy head, max_records, or a record that
 * does not fit in what is left of out_cap (offsets are 32-bit: out_cap is
 * clamped to UINT32_MAX). *out_used = starts[n-1] + lens[n-1] (0 if n == 0).
 * consume != 0: one release store of the consumer position after the batch,
 * just past the last record or discard walked; consume == 0: a peek, the
 * consumer position is left unchanged (so two peeks return the same data).
 * Returns n >= 0, or, only when no record was copied:
 *   -EBADMSG   the head is corrupt (see PLB_RB_CORRUPT); no record consumed;
 *   -EMSGSIZE  the head record alone is larger than out_cap: *out_used is set
 *              to its length so the caller can retry with a bigger buffer;
 *              it stays in the ring (discards before it may be consumed);
 *   -EINVAL    a NULL argument where one is needed.
 * A failure after n > 0 records returns n; the next call reports it. */
int plb_rb_read(struct plb_rb_view *v, uint8_t *out, size_t out_cap,
		uint32_t *starts, uint32_t *lens, uint32_t max_records,
		int consume, size_t *out_used);

/* The two mappings of a BPF_MAP_TYPE_RINGBUF map fd and the view over them. */
struct plb_rb_mapping {
	struct plb_rb_view view;
	void *consumer_page;   /* 1 page, PROT_READ|PROT_WRITE, file offset 0 */
	size_t consumer_len;
	void *producer_area;   /* producer page + 2 * data_size, PROT_READ, offset 1 page */
	size_t producer_len;
};

/* mmap a ring buffer map as the kernel allows (kernel/bpf/ringbuf.c
 * ringbuf_map_mmap_kern: only the consumer page may be writable).
 * data_size = the map's max_entries (a power of two, a multiple of the page
 * size). Fills *m; returns 0 or -errno (-EINVAL, -E2BIG, mmap's errno), and on
 * failure *m holds no mapping. The view is valid until plb_rb_unmap(m). */
int plb_rb_map(int map_fd, uint32_t data_size, struct plb_rb_mapping *m);

/* Unmap what plb_rb_map mapped and zero *m; safe to call twice. */
void plb_rb_unmap(struct plb_rb_mapping *m);

#endif
