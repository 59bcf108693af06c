/*
 * The disk alone, no Selene in it: the floor under `selene bench restore`
 * (launch/bench/restore.c). A thread a rank reads the bytes one restore
 * reads, all ranks at once, restores back to back, through io_uring as the
 * disk thread would in that directory (O_DIRECT where it is taken; kernel
 * workers and 2 MiB requests where the disk thread uses them, as
 * rec_disk_default_io_workers_for says; 8 MiB requests otherwise), while a
 * writer thread a rank is idle, writes files of the same size on, each
 * preallocated as a record file is (loaded), or issues nothing new while a
 * read runs (yielding: what a store that yields at once would leave, the
 * writes already in flight still finishing; a writer reads that state
 * without the lock, so one request may go out as a read starts). A sample
 * is timed from its start to the last rank's last byte. Its loaded/idle
 * ratios are what the disk itself allows a restore under stores. One
 * difference stays: the reader and the writer each submit on their own
 * ring, so where kernel workers are used a rank has two pools of them, the
 * disk thread one.
 */
#ifndef SELENE_LAUNCH_BENCH_FLOOR_H
#define SELENE_LAUNCH_BENCH_FLOOR_H

#include <stdbool.h>
#include <stdint.h>

#define BENCH_FLOOR_RANKS_MAX 8u

enum bench_floor_phase {
	BENCH_FLOOR_IDLE,
	BENCH_FLOOR_LOADED,
	BENCH_FLOOR_YIELDING,
	BENCH_FLOOR_PHASES
};

struct bench_floor_result {
	double p50[BENCH_FLOOR_PHASES], p99[BENCH_FLOOR_PHASES]; /* microseconds */
	double write_gbps[BENCH_FLOOR_PHASES];                    /* a rank */
};

/* How the floor did its I/O there. */
struct bench_floor_io {
	int unavailable;  /* 0, or why io_uring could not be used (a negative errno) */
	bool direct;      /* O_DIRECT */
	uint32_t workers; /* kernel workers a ring (0: inline submissions) */
	uint32_t chunk_bytes;
};

/*
 * Measures the floor at world ranks (1 .. BENCH_FLOOR_RANKS_MAX) in
 * dir/floor, which it makes and removes (it touches nothing else): reads
 * of bytes (a multiple of the request size, at most 64 requests), samples
 * of them in each phase, ns a caller's array of samples entries for the
 * timings. Returns 0 with *out and *io filled; 0 with io->unavailable set
 * and nothing measured where io_uring cannot be used (a seccomp filter,
 * io_uring_disabled); or a negative errno, said on stderr.
 */
int bench_floor_measure(const char *dir, uint32_t world, uint64_t bytes, uint32_t samples,
			uint64_t *ns, struct bench_floor_result *out,
			struct bench_floor_io *io);

#endif
