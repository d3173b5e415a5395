// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* memcpy_bw - the ceiling for any reader that copies records out of a ring:
 * one memcpy per record at this machine's memory bandwidth, measured in the
 * same run as the readers.
 *
 * usage: memcpy_bw SIZE EVENTS [min_time_ms=300]
 *
 * Lays EVENTS records out as a BPF ring buffer holds them (an 8-byte header,
 * then SIZE bytes, rounded up to 8) and copies each record's SIZE bytes into a
 * packed destination array, as a drain into a numpy structured array must.
 * Repeats until min_time_ms of copying has accumulated; each pass copies from
 * memory the previous pass did not touch last (the source is larger than the
 * caches for the event counts the suite uses), so the figure is bandwidth, not
 * cache speed. The figure is the FASTEST pass: a ceiling is what the machine
 * can do, and on a shared host another guest's traffic slows some passes by
 * 2-4x (an average over passes moved by up to 4x between repetitions; the
 * fastest pass by a few percent). Prints one JSON object with the same keys as
 * bench_c: produced/received are one pass's records, wall_s/cpu_s its times.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const char *arg(int argc, char **argv, const char *key, const char *dflt)
{
	size_t n = strlen(key);

	for (int i = 3; i < argc; i++)
		if (!strncmp(argv[i], key, n) && argv[i][n] == '=')
			return argv[i] + n + 1;
	return dflt;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s SIZE EVENTS [min_time_ms=300]\n", argv[0]);
		return 2;
	}
	size_t size = strtoull(argv[1], NULL, 0), events = strtoull(argv[2], NULL, 0);
	uint64_t min_time = strtoull(arg(argc, argv, "min_time_ms", "300"), NULL, 0) * 1000000ull;
	size_t stride = (8 + size + 7) & ~(size_t)7;
	unsigned char *src = malloc(stride * events), *dst = malloc(size * events);

	if (!size || !events || !src || !dst) {
		fprintf(stderr, "memcpy_bw: bad size/events or out of memory\n");
		return 1;
	}
	memset(src, 0x5a, stride * events);   /* fault every page in before timing */
	memset(dst, 0, size * events);
	uint64_t wall = 0, best = UINT64_MAX, best_cpu = 0, checksum = 0;
	int rounds = 0;
	while ((wall < min_time || rounds < 3) && rounds < 1000) {
		uint64_t t0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
		for (size_t i = 0; i < events; i++)
			memcpy(dst + i * size, src + i * stride + 8, size);
		uint64_t pass = now_ns(CLOCK_MONOTONIC) - t0, pass_cpu = now_ns(CLOCK_PROCESS_CPUTIME_ID) - c0;

		wall += pass;
		if (pass < best) {
			best = pass;
			best_cpu = pass_cpu;
		}
		/* read the destination so the copies cannot be optimised away */
		checksum += dst[(rounds * 7919u) % (size * events)];
		rounds++;
	}
	printf("{\"produced\": %llu, \"received\": %llu, \"wall_s\": %.9f, \"cpu_s\": %.9f, \"rounds\": %d, "
	       "\"gaps\": 0, \"seq_errors\": 0, \"p50_us\": null, \"p99_us\": null, \"producer_full\": 0, "
	       "\"bytes_per_s\": %.1f, \"checksum\": %llu}\n",
	       (unsigned long long)events, (unsigned long long)events, best / 1e9, best_cpu / 1e9, rounds,
	       best ? events * (double)size / (best / 1e9) : 0.0, (unsigned long long)checksum);
	free(src);
	free(dst);
	return 0;
}
