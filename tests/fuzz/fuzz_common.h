/* fuzz_common.h - shared by the fuzz targets.
 *
 * A target is one function, LLVMFuzzerTestOneInput(data, size), built two
 * ways: with libFuzzer (-fsanitize=fuzzer) to search for inputs, and with the
 * replay driver (replay.c) to run the committed corpus under ASan/UBSan.
 * Either way a failed CHECK aborts, which both report as a failure.
 *
 * struct fz turns the input into a stream of choices. Reading past its end
 * yields zeros instead of failing, so every byte string is a valid input and
 * a truncated input still runs (its last choices become the zero choice).
 */
#ifndef PLB_FUZZ_COMMON_H
#define PLB_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../c/check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fz {
	const uint8_t *p;
	size_t n;
};

static inline int fz_more(const struct fz *f)
{
	return f->n > 0;
}

static inline uint8_t fz_u8(struct fz *f)
{
	if (!f->n)
		return 0;
	f->n--;
	return *f->p++;
}

/* Little-endian, so a mutation of one byte changes the value predictably. */
static inline uint64_t fz_uN(struct fz *f, unsigned bytes)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < bytes; i++)
		v |= (uint64_t)fz_u8(f) << (8 * i);
	return v;
}

static inline uint16_t fz_u16(struct fz *f)
{
	return (uint16_t)fz_uN(f, 2);
}

static inline uint32_t fz_u32(struct fz *f)
{
	return (uint32_t)fz_uN(f, 4);
}

static inline uint64_t fz_u64(struct fz *f)
{
	return fz_uN(f, 8);
}

/* Copy up to len input bytes into dst, zero-filling what the input lacks. */
static inline void fz_bytes(struct fz *f, void *dst, size_t len)
{
	size_t k = len < f->n ? len : f->n;

	memcpy(dst, f->p, k);
	memset((uint8_t *)dst + k, 0, len - k);
	f->p += k;
	f->n -= k;
}

/* A 64-bit ring position, biased to where counters wrap: near 0, straddling
 * 2^32 (a 32-bit truncation anywhere would show), just below 2^64 (so the
 * positions themselves wrap while the test runs), or anywhere. */
static inline uint64_t fz_pos(struct fz *f)
{
	uint8_t sel = fz_u8(f);
	uint64_t d = fz_u16(f);

	switch (sel & 3) {
	case 0:
		return d;
	case 1:
		return (1ULL << 32) - 0x8000 + d;
	case 2:
		return 0 - 0x8000ULL + d; /* wraps to small values for d >= 0x8000 */
	default:
		return fz_u64(f);
	}
}

/* a + b, stuck at UINT64_MAX instead of wrapping (clocks never wrap). */
static inline uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* a - b, stuck at 0. */
static inline uint64_t sat_sub(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

/* The payload byte i of the record numbered seq: position-dependent, so a
 * record delivered from the wrong place, shifted, or torn shows. */
static inline uint8_t pat(uint32_t seq, uint32_t i)
{
	return (uint8_t)(seq * 167u + i * 13u + (i >> 8) + 1u);
}

#endif
