/* plb_ringbuf.c - walking a BPF ring buffer (BPF_MAP_TYPE_RINGBUF) in memory.
 *
 * The protocol mirrors the kernel's producer (kernel/bpf/ringbuf.c):
 *   reserve: under a spinlock, write the header {len | BUSY, pg_off} at
 *            producer_pos, then smp_store_release(producer_pos, pos + size);
 *   commit:  xchg(hdr->len, len without BUSY [| DISCARD]) - a full barrier
 *            that orders the sample's bytes before the cleared BUSY bit.
 * So the consumer's side of each pairing is:
 *   - acquire-load producer_pos: every header below it is then visible
 *     (at least with BUSY set);
 *   - acquire-load the header's len: once BUSY is clear, the sample bytes the
 *     producer wrote before its commit are visible;
 *   - release-store consumer_pos: our reads of the records below it happen
 *     before the producer (which acquire-loads consumer_pos in reserve) can
 *     reuse that space.
 * The data area is mapped twice back to back, so a record that starts near
 * the end of the ring is contiguous in memory: no wrap handling is needed.
 *
 * No global state: everything lives in the view the caller passes in.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "plb_ringbuf.h"
#include "plb_ringwalk.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Look at the record at consumer position pos without consuming it. */
int plb_rb_peek(const struct plb_rb_view *v, uint64_t pos, const void **data,
		uint32_t *len, uint64_t *next_pos)
{
	/* Acquire pairs with the kernel's smp_store_release(producer_pos) in
	 * reserve: the headers of all records below prod are visible now. */
	uint64_t prod = __atomic_load_n(v->producer_pos, __ATOMIC_ACQUIRE);

	if (next_pos)
		*next_pos = pos;
	if (prod == pos)
		return PLB_RB_EMPTY;
	return plb_rb_peek_below(v, pos, prod, data, len, next_pos);
}

/* Publish pos as the new consumer position, freeing the space below it. */
void plb_rb_commit(struct plb_rb_view *v, uint64_t pos)
{
	/* Release pairs with the kernel's smp_load_acquire(consumer_pos) in
	 * reserve: our reads of the records below pos complete before the
	 * producer may overwrite them. */
	__atomic_store_n(v->consumer_pos, pos, __ATOMIC_RELEASE);
}

/* The consumer position we last published (we are its only writer). */
uint64_t plb_rb_consumer_pos(const struct plb_rb_view *v)
{
	/* Only we store it, so relaxed would do; acquire keeps one rule for
	 * every ring access and costs nothing on x86. */
	return __atomic_load_n(v->consumer_pos, __ATOMIC_ACQUIRE);
}

/* Bytes pending between the consumer and the producer position. */
uint64_t plb_rb_available(const struct plb_rb_view *v)
{
	uint64_t cons = __atomic_load_n(v->consumer_pos, __ATOMIC_ACQUIRE);
	/* Acquire, as in plb_rb_peek: pairs with the producer's release. */
	uint64_t prod = __atomic_load_n(v->producer_pos, __ATOMIC_ACQUIRE);

	return prod - cons;
}

/* Copy a batch of committed records into caller memory (see the header). */
int plb_rb_read(struct plb_rb_view *v, uint8_t *out, size_t out_cap,
		uint32_t *starts, uint32_t *lens, uint32_t max_records,
		int consume, size_t *out_used)
{
	uint64_t cap, off = 0, used = 0, start, pos, next, prod;
	uint32_t n = 0, len;
	const void *data;
	int err = 0, rc;

	if (!v || !out_used || (max_records && (!starts || !lens)) ||
	    (!out && out_cap))
		return -EINVAL;
	*out_used = 0;
	cap = out_cap > UINT32_MAX ? UINT32_MAX : (uint64_t)out_cap;
	start = prod = pos = plb_rb_consumer_pos(v);

	while (n < max_records) {
		rc = plb_rb_next_record(v, &pos, &prod, &data, &len, &next, NULL);
		if (rc != PLB_RB_RECORD) {
			if (rc == PLB_RB_CORRUPT && n == 0)
				err = -EBADMSG;
			break;
		}
		if (off > cap || len > cap - off) {
			if (n == 0) {
				err = -EMSGSIZE;
				used = len; /* tell the caller the size it needs */
			}
			break;
		}
		if (len) /* out may be NULL with out_cap 0 */
			memcpy(out + off, data, len);
		starts[n] = (uint32_t)off;
		lens[n] = len;
		n++;
		used = off + len;
		off = (used + 7) & ~(uint64_t)7;
		pos = next;
	}

	/* One release store for the whole batch: fewer writes to the shared
	 * consumer cache line, and the memcpy's above are ordered before it. */
	if (consume && pos != start)
		plb_rb_commit(v, pos);
	*out_used = (size_t)used;
	return err ? err : (int)n;
}

/* mmap a ring buffer map fd: consumer page RW, producer page + data RO. */
int plb_rb_map(int map_fd, uint32_t data_size, struct plb_rb_mapping *m)
{
	long page = sysconf(_SC_PAGESIZE);
	uint64_t prod_len;
	void *cons, *prod;
	int err;

	if (!m)
		return -EINVAL;
	memset(m, 0, sizeof(*m));
	if (page <= 0)
		return -EINVAL;
	if (map_fd < 0)
		return -EBADF;
	/* The kernel creates ring buffers only with a page-aligned power-of-two
	 * max_entries (kernel/bpf/ringbuf.c ringbuf_map_alloc); mask = size - 1
	 * depends on it. */
	if (data_size == 0 || (data_size & (data_size - 1)) ||
	    data_size % (uint64_t)page)
		return -EINVAL;
	prod_len = (uint64_t)page + 2 * (uint64_t)data_size;
	if (prod_len != (uint64_t)(size_t)prod_len)
		return -E2BIG; /* 32-bit user space: cannot map twice the ring */

	/* ringbuf_map_mmap_kern allows a writable mapping only of exactly the
	 * consumer page at file offset 0. */
	cons = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED,
		    map_fd, 0);
	if (cons == MAP_FAILED)
		return -errno;
	/* Producer page then the data pages, which the kernel's vmap already
	 * holds twice back to back (bpf_ringbuf_area_alloc), so mapping
	 * 2 * data_size gives the wrap-free view. Read-only: the kernel clears
	 * VM_MAYWRITE on it. */
	prod = mmap(NULL, (size_t)prod_len, PROT_READ, MAP_SHARED, map_fd,
		    (off_t)page);
	if (prod == MAP_FAILED) {
		err = -errno;
		munmap(cons, (size_t)page);
		return err;
	}

	m->consumer_page = cons;
	m->consumer_len = (size_t)page;
	m->producer_area = prod;
	m->producer_len = (size_t)prod_len;
	m->view.consumer_pos = cons;
	m->view.producer_pos = prod;
	m->view.data = (const uint8_t *)prod + page;
	m->view.mask = (uint64_t)data_size - 1;
	return 0;
}

/* Unmap what plb_rb_map mapped; idempotent. */
void plb_rb_unmap(struct plb_rb_mapping *m)
{
	if (!m)
		return;
	if (m->producer_area)
		munmap(m->producer_area, m->producer_len);
	if (m->consumer_page)
		munmap(m->consumer_page, m->consumer_len);
	memset(m, 0, sizeof(*m));
}
