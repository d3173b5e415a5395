/* plb_ringwalk.h - the per-record step of the ring buffer walkers, inline (C only, not bound).
 *
 * plb_rb_peek (plb_ringbuf.c) and the walkers that copy records out
 * (plb_rb_read, plb_into_rb, plb_batch_read_rb) share this step. It is
 * inline because it runs once per record: as a call it cost the batch drain
 * ~15% (1.6 ns of ~11 per 32-byte record, csrc benchmarked over a synthetic
 * ring; docs/performance.md). The memory-ordering rules are
 * plb_ringbuf.c's.
 */
#ifndef PLB_RINGWALK_H
#define PLB_RINGWALK_H

#include <stdint.h>

#include "plb_ringbuf.h"

/* round_up(len + BPF_RINGBUF_HDR_SZ, 8): the kernel's record footprint
 * (kernel/bpf/ringbuf.c __bpf_ringbuf_reserve; libbpf's roundup_len). */
static inline uint64_t plb_rb_record_size(uint32_t len)
{
	return ((uint64_t)len + PLB_RB_HDR_SZ + 7) & ~(uint64_t)7;
}

/* plb_rb_peek with producer_pos already acquire-loaded as prod (pos != prod).
 * A prod loaded some time ago is fine: only records below it are looked at.
 * The walkers load producer_pos once per pass over what it published, not
 * once per record, and load it again when they catch up with it. */
static inline int plb_rb_peek_below(const struct plb_rb_view *v, uint64_t pos, uint64_t prod,
				    const void **data, uint32_t *len, uint64_t *next_pos)
{
	uint64_t ring = v->mask + 1, rec;
	const uint8_t *hdr;
	uint32_t raw, size;

	/* Records are 8-byte aligned, and the kernel never lets the producer
	 * run more than the ring's size ahead of the consumer (reserve fails
	 * when new_prod_pos - cons_pos > mask). A position that violates either
	 * (or lies beyond prod: the subtraction wraps) is not a ring we know.
	 * Nor is less than a header reserved: every record is at least 8 bytes,
	 * and with a ring smaller than that the header read below would run
	 * past the mapping. */
	if ((pos & 7) || prod - pos > ring || prod - pos < PLB_RB_HDR_SZ)
		return PLB_RB_CORRUPT;

	hdr = v->data + (pos & v->mask);
	/* Acquire pairs with the commit's xchg on len: with BUSY clear, the
	 * sample bytes written before the commit are visible. */
	raw = __atomic_load_n((const uint32_t *)(const void *)hdr, __ATOMIC_ACQUIRE);
	if (raw & PLB_RB_BUSY_BIT)
		return PLB_RB_BUSY; /* records after a busy head are not ours yet */

	size = raw & ~(PLB_RB_BUSY_BIT | PLB_RB_DISCARD_BIT);
	rec = plb_rb_record_size(size);
	/* The whole record was reserved before prod was published, so it must
	 * end at or below prod; a length that runs past prod (a fortiori past
	 * the ring) would make us read garbage or beyond the double mapping. */
	if (rec > prod - pos)
		return PLB_RB_CORRUPT;

	if (data)
		*data = hdr + PLB_RB_HDR_SZ;
	if (len)
		*len = size;
	if (next_pos)
		*next_pos = pos + rec;
	return (raw & PLB_RB_DISCARD_BIT) ? PLB_RB_DISCARD : PLB_RB_RECORD;
}

/* The walkers' step: the record at pos as plb_rb_peek reports it, with *prod
 * the producer position last acquire-loaded (load it once before the first
 * step). Loads it again only on reaching it, so a walk over many records
 * reads the producer's cache line once per pass, not once per record. */
static inline int plb_rb_step(const struct plb_rb_view *v, uint64_t pos, uint64_t *prod,
			      const void **data, uint32_t *len, uint64_t *next_pos)
{
	if (pos == *prod) {
		/* Acquire, as in plb_rb_peek: pairs with the producer's release. */
		*prod = __atomic_load_n(v->producer_pos, __ATOMIC_ACQUIRE);
		if (pos == *prod)
			return PLB_RB_EMPTY;
	}
	return plb_rb_peek_below(v, pos, *prod, data, len, next_pos);
}

/* Records up to this many bytes take plb_rb_expect's predicted step. Above
 * it the copy, not the walk, bounds a drain, and running ahead measured
 * slower (read_into's rows: 9.1 -> 11.0 ns a 256-byte record; 7.4 -> 7.9 at
 * 192; docs/performance.md). */
#define PLB_RB_EXPECT_MAX 128

/* The footprint plb_rb_expect predicts for records of size bytes, or
 * UINT64_MAX (never predicted) above PLB_RB_EXPECT_MAX. */
static inline uint64_t plb_rb_expect_step(uint32_t size)
{
	return size <= PLB_RB_EXPECT_MAX ? plb_rb_record_size(size) : UINT64_MAX;
}

/* The fast step of a walk over records of one size: the record at pos when
 * it is committed, not discarded and exactly size bytes long (footprint
 * step, from plb_rb_expect_step), wholly below prod: its data, the next
 * record then at pos + step. NULL for anything else (or step UINT64_MAX):
 * plb_rb_next_record then looks at pos, with every check and outcome.
 *
 * Why: plb_rb_next_record finds the next record at pos plus the length it
 * just loaded, so a walk is a chain of dependent loads, one miss after the
 * other (half of a drain's samples sat on that load). Here the next position
 * is pos + step, known before the load, which only decides a branch; the
 * CPU predicts it (equal records: always taken) and issues the headers of
 * the records ahead without waiting for this one's. 32-byte records into
 * columns: 3.5 -> 2.7 ns a record (docs/performance.md).
 *
 * pos and prod must come from a walk that plb_rb_step checked: prod loaded
 * there, pos reached from the position it checked by whole records. Then pos
 * is 8-byte aligned and prod - pos at most the ring's size, and prod - pos >=
 * step keeps the record below prod: plb_rb_peek_below's checks. The acquire
 * load is its load, paired the same way with the commit's xchg.
 *
 * Its callers (plb_into_rb, the batch's uniform run) write the two steps out,
 * this one and then plb_rb_next_record, rather than call one helper holding
 * both: such a helper, measured in C alone, left 32-byte records as fast but
 * made plb_into_rb's 1 KiB rows 25% slower (44 -> 56 ns a record; its
 * registers were allocated differently around the copy). */
static inline const void *plb_rb_expect(const struct plb_rb_view *v, uint64_t pos, uint64_t prod,
					uint32_t size, uint64_t step)
{
	const uint8_t *hdr;

	if (prod - pos < step)
		return NULL;
	hdr = v->data + (pos & v->mask);
	if (__atomic_load_n((const uint32_t *)(const void *)hdr, __ATOMIC_ACQUIRE) != size)
		return NULL; /* busy, discarded, or another length: the full step */
	return hdr + PLB_RB_HDR_SZ;
}

/* The next committed record from *pos on, for the walkers that copy records
 * out: discarded records are stepped over (*pos moved past each, counted in
 * *discarded when it is not NULL), so the result is PLB_RB_RECORD (data,
 * len, *next as plb_rb_peek gives them) or why the walk stops here:
 * PLB_RB_EMPTY, PLB_RB_BUSY or PLB_RB_CORRUPT. */
static inline int plb_rb_next_record(const struct plb_rb_view *v, uint64_t *pos, uint64_t *prod,
				     const void **data, uint32_t *len, uint64_t *next,
				     uint64_t *discarded)
{
	int rc;

	while ((rc = plb_rb_step(v, *pos, prod, data, len, next)) == PLB_RB_DISCARD) {
		*pos = *next; /* the kernel's bpf_ringbuf_discard: skip it, and consume it */
		if (discarded)
			(*discarded)++;
	}
	return rc;
}

#endif
