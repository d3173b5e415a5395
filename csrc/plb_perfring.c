/* plb_perfring.c - a pure cursor over one kernel perf ring (see plb_perfring.h). */
#include "plb_perfring.h"

#include <stdlib.h>
#include <string.h>

int plb_perfring_init(struct plb_perfring *r, struct perf_event_mmap_page *page,
		      uint8_t *data, uint64_t data_size)
{
	memset(r, 0, sizeof(*r));
	/* The kernel sizes the data area as 2^n pages; masking relies on it. */
	if (!page || !data || data_size < sizeof(struct perf_event_header) ||
	    (data_size & (data_size - 1)))
		return -EINVAL;
	r->page = page;
	r->data = data;
	r->size = data_size;
	r->mask = data_size - 1;
	/* data_tail is written only by the consumer, which we now are: a plain
	 * (relaxed) load sees the last value any previous consumer released. */
	r->tail = __atomic_load_n(&page->data_tail, __ATOMIC_RELAXED);
	r->committed = r->tail;
	/* Acquire pairs with the kernel's publication of data_head. */
	r->head = __atomic_load_n(&page->data_head, __ATOMIC_ACQUIRE);
	return 0;
}

void plb_perfring_release(struct plb_perfring *r)
{
	free(r->scratch);
	r->scratch = NULL;
	r->scratch_cap = 0;
}

uint64_t plb_perfring_refresh(struct plb_perfring *r)
{
	/* Acquire: every byte below the loaded head was written before the kernel
	 * stored it (perf_output_put_handle() orders data before data_head), so
	 * reading records below it after this load sees them complete. */
	r->head = __atomic_load_n(&r->page->data_head, __ATOMIC_ACQUIRE);
	return r->head - r->tail;
}

void plb_perfring_read(const struct plb_perfring *r, uint64_t pos, void *dst,
		       uint64_t len)
{
	uint64_t off = pos & r->mask;
	uint64_t first = r->size - off;

	/* Plain reads are fine: the caller only asks for bytes below a head it
	 * acquire-loaded and above a tail it has not yet released. */
	if (first >= len) {
		memcpy(dst, r->data + off, len);
		return;
	}
	memcpy(dst, r->data + off, first);
	memcpy((uint8_t *)dst + first, r->data, len - first);
}

int plb_perfring_peek_header(const struct plb_perfring *r, struct plb_perf_rec *rec)
{
	struct perf_event_header h;
	uint64_t avail = r->head - r->tail;
	uint64_t off;

	if (avail == 0)
		return PLB_PR_EMPTY;
	/* More pending than the ring holds, or less than a header: the positions
	 * are not the kernel's (it never overwrites unreleased data). */
	if (avail > r->size || avail < sizeof(h))
		return PLB_PR_CORRUPT;
	/* The header never wraps when the tail is 8-aligned, as the kernel keeps
	 * it; read it through the wrap-aware copy anyway, so a bad tail cannot
	 * make us read past the end. */
	plb_perfring_read(r, r->tail, &h, sizeof(h));
	if (h.size < sizeof(h) || (h.size & 7) || h.size > avail)
		return PLB_PR_CORRUPT;
	off = r->tail & r->mask;
	rec->pos = r->tail;
	rec->type = h.type;
	rec->misc = h.misc;
	rec->size = h.size;
	rec->bytes = off + h.size <= r->size ? r->data + off : NULL;
	rec->copied = 0;
	return PLB_PR_RECORD;
}

int plb_perfring_peek(struct plb_perfring *r, struct plb_perf_rec *rec)
{
	int ret = plb_perfring_peek_header(r, rec);

	if (ret != PLB_PR_RECORD || rec->bytes)
		return ret;
	/* The record wraps: copy it once into scratch memory (never map twice). */
	if (r->scratch_cap < rec->size) {
		uint32_t cap = r->scratch_cap ? r->scratch_cap : 256;
		uint8_t *p;

		while (cap < rec->size)
			cap *= 2;
		p = realloc(r->scratch, cap);
		if (!p)
			return -ENOMEM;
		r->scratch = p;
		r->scratch_cap = cap;
	}
	plb_perfring_read(r, rec->pos, r->scratch, rec->size);
	rec->bytes = r->scratch;
	rec->copied = 1;
	return PLB_PR_RECORD;
}

void plb_perfring_commit(struct plb_perfring *r)
{
	if (r->tail == r->committed)
		return;
	/* Release: all our reads of the records below tail happen before the
	 * kernel can observe the new tail and overwrite them (the smp_mb() the
	 * perf_event.h comment asks for; libbpf's ring_buffer_write_tail()). */
	__atomic_store_n(&r->page->data_tail, r->tail, __ATOMIC_RELEASE);
	r->committed = r->tail;
}
