/*
 * touchref: the plain C reference for `headroom load`'s touch rate.
 *
 * Maps SIZE MiB of anonymous memory (no THP), writes every page, then for
 * SECONDS touches it (seq: page by page, wrapping; random: uniform pages
 * from the same wyrand generator headroom uses), writing one byte per touch
 * (+1, as headroom does for --content random), and prints pages/s.
 *
 * usage: touchref SIZE_MIB seq|random SECONDS
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline uint64_t wyrand(uint64_t *s) {
	*s += 0xa0761d6478bd642fULL;
	__uint128_t m = (__uint128_t)*s * (*s ^ 0xe7037ed1a0b428dbULL);
	return (uint64_t)(m >> 64) ^ (uint64_t)m;
}

int main(int argc, char **argv) {
	if (argc != 4) {
		fprintf(stderr, "usage: touchref SIZE_MIB seq|random SECONDS\n");
		return 2;
	}
	uint64_t size = strtoull(argv[1], 0, 10) << 20;
	int random = strcmp(argv[2], "random") == 0;
	double seconds = atof(argv[3]);
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t slots = size / page;
	unsigned char *base = mmap(0, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	madvise(base, size, MADV_NOHUGEPAGE);
	for (uint64_t i = 0; i < slots; i++)
		base[i * page] = (unsigned char)i;

	/* Check the clock every batch, as headroom does. */
	const uint64_t batch = 16384;
	uint64_t touched = 0, pos = 0, rng = 2;
	double start = now(), end = start + seconds, t;
	do {
		if (random) {
			for (uint64_t n = batch; n > 0; n--) {
				uint64_t slot = (uint64_t)(((__uint128_t)wyrand(&rng) * slots) >> 64);
				base[slot * page] += 1;
			}
		} else {
			for (uint64_t n = batch; n > 0; n--) {
				base[pos * page] += 1;
				if (++pos == slots)
					pos = 0;
			}
		}
		touched += batch;
		t = now();
	} while (t < end);
	printf("%.0f\n", touched / (t - start));
	return 0;
}
