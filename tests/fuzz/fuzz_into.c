/* fuzz_into.c - libFuzzer target: records straight into array rows
 * (plb_into_rb, plb_into_perf) over synthetic rings built from the input.
 *
 * The input chooses which ring (a BPF ring buffer mirrored in one malloc of
 * twice its size, 8 B - 2 KiB; or a perf ring, 8 B - 2 KiB, after a control
 * page), the starting position (near 0, 2^32 or 2^64), the row size, then a
 * sequence of steps: produce a record (the row size or any other length;
 * ring buffer: committed, discarded or left busy; perf: a sample or a lost
 * notice), commit the oldest busy record, or fill (any number of rows, in
 * one or several calls). A ring buffer fills either rows or, chosen by the
 * same first byte, two Arrow columns splitting each record (st->cols: the
 * read_arrow path), checked byte for byte the same way.
 *
 * A model keeps every record the producer wrote, in order. Checked, besides
 * ASan/UBSan on every access:
 *   - each fill writes exactly the next matching records, byte for byte,
 *     into the rows from st->n on, and never more than the rows left;
 *   - a record of another size stops the fill with PLB_INTO_ODD and is in
 *     st->odd whole (perf: its stored raw size); a lost notice stops it with
 *     PLB_INTO_LOST and its count;
 *   - the consumer position moves exactly past what was copied, handed back
 *     or skipped (discarded) -- never past a busy record or a record that
 *     found no row;
 *   - at the end, after committing every busy record, draining with room
 *     enough takes every record: rows + odd + lost + discarded = produced.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "plb_perfring.c"
#include "plb_ringbuf.c"
#include "plb_merge.c"
#include "plb_merge_runs.c"
#include "plb_block.c"
#include "plb_columns.c"
#include "plb_into.c"
#include "fuzz_common.h"

#define MAXREC 256
#define MAXLEN 300

enum { R_ROW, R_ODD, R_DISCARD, R_LOST };

struct rec {
	int kind;        /* what the fill must make of it */
	uint32_t len;    /* what the fill hands back for it (perf: the stored raw size) */
	uint32_t plen;   /* the program's bytes (the rest of a perf sample is zero) */
	uint32_t seq;
	uint64_t pos;    /* ring position of its header */
	uint64_t lost;   /* R_LOST: the count */
	int busy;        /* ring buffer: reserved, not committed yet */
};

struct model {
	int perf;
	uint64_t size, mask;
	uint8_t *mem;        /* perf: control page + data; ring buffer: 2 * size */
	uint8_t *data;
	uint64_t cons_pos, prod_pos; /* ring buffer positions */
	struct perf_event_mmap_page *page;
	struct plb_rb_view v;
	uint64_t head;       /* producer position (both kinds) */
	struct rec r[MAXREC];
	uint32_t nrec, next; /* records written; the next one a fill must meet */
	uint32_t rec_size;
	struct plb_column cols[2]; /* columns mode: bytes [0, split) and [split, rec_size) */
	uint32_t ncols, split;
};

/* Byte b of row k, in the rows or in the columns. */
static uint8_t row_byte(const struct model *m, const uint8_t *rows, uint64_t k, uint32_t b)
{
	if (!m->ncols)
		return rows[k * m->rec_size + b];
	if (b < m->split)
		return m->cols[0].values[k * m->split + b];
	return m->cols[1].values[k * (m->rec_size - m->split) + b - m->split];
}

static void put(struct model *m, uint64_t pos, const void *src, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++) {
		uint64_t off = (pos + i) & m->mask;

		m->data[off] = ((const uint8_t *)src)[i];
		if (!m->perf)
			m->data[off + m->size] = ((const uint8_t *)src)[i]; /* the mirror */
	}
}

static uint64_t tail_pos(const struct model *m)
{
	return m->perf ? __atomic_load_n(&m->page->data_tail, __ATOMIC_ACQUIRE) : m->cons_pos;
}

static void payload(uint8_t *p, uint32_t seq, uint32_t len)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = pat(seq, i);
}

/* Write one record; 0 if the ring has no room (nothing written). */
static int produce(struct model *m, uint32_t len, int how)
{
	uint8_t body[MAXLEN + 32];
	struct rec *r = &m->r[m->nrec];
	uint64_t total;

	if (m->nrec == MAXREC)
		return 0;
	memset(r, 0, sizeof(*r));
	r->seq = m->nrec;
	r->len = len;
	r->plen = len;
	r->pos = m->head;
	if (m->perf) {
		struct perf_event_header h = { .type = PERF_RECORD_SAMPLE };
		uint32_t raw;

		if (how == 1) { /* a lost notice */
			uint64_t b[2] = { 7, (uint64_t)len + 1 };

			total = 24;
			if (m->size - (m->head - tail_pos(m)) < total)
				return 0;
			h.type = PERF_RECORD_LOST;
			h.size = 24;
			put(m, m->head, &h, 8);
			put(m, m->head + 8, b, 16);
			r->kind = R_LOST;
			r->lost = b[1];
		} else {
			raw = plb_into_perf_raw_size(len); /* what the kernel stores */
			total = 8 + 4 + (uint64_t)raw;
			if (m->size - (m->head - tail_pos(m)) < total)
				return 0;
			h.size = (uint16_t)total;
			memset(body, 0, sizeof(body));
			memcpy(body, &raw, 4);
			payload(body + 4, r->seq, len);
			put(m, m->head, &h, 8);
			put(m, m->head + 8, body, 4 + raw);
			r->kind = raw == plb_into_perf_raw_size(m->rec_size) ? R_ROW : R_ODD;
			r->len = raw;
		}
		m->head += total;
		__atomic_store_n(&m->page->data_head, m->head, __ATOMIC_RELEASE);
	} else {
		uint32_t hdr[2];

		total = ((uint64_t)len + 8 + 7) & ~7ull;
		if (total > m->size || m->head + total - m->cons_pos > m->mask)
			return 0;
		hdr[0] = len | PLB_RB_BUSY_BIT;
		hdr[1] = 0;
		put(m, m->head, hdr, 8);
		payload(body, r->seq, len);
		put(m, m->head + 8, body, len);
		m->head += total;
		__atomic_store_n(&m->prod_pos, m->head, __ATOMIC_RELEASE);
		r->kind = how == 1 ? R_DISCARD : len == m->rec_size ? R_ROW : R_ODD;
		r->busy = 1;
		if (how != 2) { /* commit now (how 2: leave it busy) */
			hdr[0] = len | (how == 1 ? PLB_RB_DISCARD_BIT : 0);
			put(m, r->pos, hdr, 4);
			r->busy = 0;
		}
	}
	m->nrec++;
	return 1;
}

static void commit_oldest_busy(struct model *m)
{
	for (uint32_t i = m->next; i < m->nrec; i++) {
		if (m->r[i].busy) {
			uint32_t len = m->r[i].len | (m->r[i].kind == R_DISCARD ? PLB_RB_DISCARD_BIT : 0);

			put(m, m->r[i].pos, &len, 4);
			m->r[i].busy = 0;
			return;
		}
	}
}

/* One fill call, checked against the model. */
static void fill(struct model *m, struct plb_into *st, uint8_t *rows, uint32_t room)
{
	uint64_t n0, before = tail_pos(m);
	uint32_t i = m->next;
	int ret;

	st->out = m->ncols ? NULL : rows;
	st->rows = st->n + room;
	n0 = st->n;
	ret = m->perf ? plb_into_perf(m->mem, m->size, st) : plb_into_rb(&m->v, st);
	CHECK(ret >= 0 && (uint64_t)ret == st->n - n0 && st->n <= st->rows);
	/* walk the model the way the fill must have */
	for (uint64_t k = n0; k < st->n; k++) {
		while (i < m->nrec && m->r[i].kind == R_DISCARD && !m->r[i].busy)
			i++;
		CHECK(i < m->nrec && m->r[i].kind == R_ROW && !m->r[i].busy);
		for (uint32_t b = 0; b < m->rec_size; b++)
			CHECK(row_byte(m, rows, k, b) == (b < m->r[i].plen ? pat(m->r[i].seq, b) : 0));
		i++;
	}
	/* a full fill stops before looking further: discards after its last row stay */
	if (st->stop != PLB_INTO_FULL)
		while (i < m->nrec && m->r[i].kind == R_DISCARD && !m->r[i].busy)
			i++;
	if (st->stop == PLB_INTO_ODD) {
		CHECK(i < m->nrec && m->r[i].kind == R_ODD && !m->r[i].busy);
		CHECK(st->odd_len == m->r[i].len);
		for (uint32_t b = 0; b < st->odd_len; b++)
			CHECK(st->odd[b] == (b < m->r[i].plen ? pat(m->r[i].seq, b) : 0));
		i++;
	} else if (st->stop == PLB_INTO_LOST) {
		CHECK(m->perf && i < m->nrec && m->r[i].kind == R_LOST && st->lost == m->r[i].lost);
		i++;
	} else if (st->stop == PLB_INTO_FULL) {
		CHECK(st->n == st->rows);
	} else {
		CHECK(st->stop == PLB_INTO_EMPTY);
		/* empty: nothing readable is left, or a busy record is next */
		CHECK(i == m->nrec || m->r[i].busy);
	}
	/* the consumer position: exactly at record i (or the end) */
	CHECK(tail_pos(m) == (i < m->nrec ? m->r[i].pos : m->head));
	CHECK(tail_pos(m) - before <= m->size);
	m->next = i;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = { data, size };
	struct model m;
	struct plb_into st;
	struct plb_arrow_array arrow = { 0 };
	static uint8_t rows[64 * MAXLEN];
	uint64_t start;
	uint8_t first;
	unsigned k;

	memset(&m, 0, sizeof(m));
	memset(&st, 0, sizeof(st));
	first = fz_u8(&f);
	m.perf = first & 1;
	k = 3 + fz_u8(&f) % 9;          /* 8 B .. 2 KiB */
	m.size = 1ull << k;
	m.mask = m.size - 1;
	start = fz_pos(&f) & ~7ull;
	m.rec_size = 1 + fz_u16(&f) % MAXLEN;
	if (m.perf) {
		m.mem = calloc(1, 4096 + m.size);
		CHECK(m.mem);
		m.page = (struct perf_event_mmap_page *)(void *)m.mem;
		m.page->data_offset = 4096;
		m.page->data_size = m.size;
		m.page->data_head = m.page->data_tail = start;
		m.data = m.mem + 4096;
	} else {
		m.mem = calloc(1, 2 * m.size);
		CHECK(m.mem);
		m.data = m.mem;
		m.cons_pos = m.prod_pos = start;
		m.v.consumer_pos = &m.cons_pos;
		m.v.producer_pos = &m.prod_pos;
		m.v.data = m.data;
		m.v.mask = m.mask;
	}
	m.head = start;
	st.rec_size = m.rec_size;
	if (!m.perf && (first & 2)) { /* columns: one or two, as many rows as rows[] */
		m.split = m.rec_size > 1 ? m.rec_size / 2 : m.rec_size;
		m.ncols = m.split < m.rec_size ? 2 : 1;
		m.cols[0] = (struct plb_column){ .offset = 0, .size = m.split, .kind = PLB_COL_FIXED,
						 .count = 1 };
		m.cols[1] = (struct plb_column){ .offset = m.split, .size = m.rec_size - m.split,
						 .kind = PLB_COL_FIXED, .count = 1 };
		CHECK(plb_columns_arrow_alloc(64, m.rec_size, m.cols, m.ncols, &arrow) == 0);
		st.cols = m.cols;
		st.ncols = m.ncols;
	}

	while (fz_more(&f)) {
		uint8_t op = fz_u8(&f);

		switch (op % 4) {
		case 0:
		case 1: { /* produce: the row size, or another length */
			uint32_t len = (op & 8) ? fz_u16(&f) % MAXLEN : m.rec_size;
			uint32_t slack = (op >> 4) & 7; /* perf: shorter by up to 7 bytes */

			if (m.perf && !(op & 8))
				len = len > slack ? len - slack : len;
			produce(&m, len, (op >> 5) % 3);
			break;
		}
		case 2:
			commit_oldest_busy(&m);
			break;
		default: { /* fill into 0..63 rows, starting over at row 0 sometimes */
			uint32_t room = fz_u8(&f) % 64;

			if (op & 8 || st.n + room > 64)
				st.n = 0;
			if (st.n + room > 64)
				room = (uint32_t)(64 - st.n);
			fill(&m, &st, rows, room);
			break;
		}
		}
	}
	/* everything committed, room enough: every record is met exactly once */
	for (uint32_t i = 0; i < m.nrec; i++)
		commit_oldest_busy(&m);
	while (m.next < m.nrec) {
		uint32_t was = m.next;

		st.n = 0;
		fill(&m, &st, rows, 64);
		CHECK(m.next > was);
	}
	CHECK(tail_pos(&m) == m.head);
	if (arrow.release)
		arrow.release(&arrow);
	plb_into_release(&st);
	free(m.mem);
	return 0;
}
