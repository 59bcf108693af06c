/* The coordinator's benchmarks, called by selene bench (cmd_bench.c). */
#ifndef SELENE_LAUNCH_BENCH_STORE_H
#define SELENE_LAUNCH_BENCH_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* p50 and p99 of samples in ns (sorted in place), in microseconds. */
void bench_percentiles(uint64_t *ns, size_t n, double *p50, double *p99);

/* Index lookups against index size and history length; 0 or an error. */
int bench_lookup(void);

/* Every public call's latency while stores keep the disk busy. */
int bench_api(const char *dir, double seconds);

/*
 * The multi-rank transport's cost per job: jobs store-then-fetch pairs and
 * jobs pipelined stores at 1, 2, 4 and 8 ranks (forked peers on loopback)
 * under dir; 0 or an error.
 */
int bench_fanout(const char *dir, uint32_t jobs);

/*
 * A restore's latency idle and while stores keep the disk busy, at ranks
 * ranks (forked peers on loopback) and at one, samples restores each, on
 * device ("host", "cuda" or "auto"), under dir, after warmup untimed passes
 * of samples restores under stores. First the disk alone the same way, no
 * Selene in it: raw reads of the same bytes idle, under raw writes, and with
 * the writes held back during each read. 0 or an error.
 */
int bench_restore(const char *dir, const char *device, uint32_t ranks, uint32_t samples,
		  uint32_t warmup);

/*
 * Startup at scale: makes records_per_rank records on each of world ranks
 * (forked peers on loopback) under dir, then restarts every rank rounds
 * times and prints the time to a store ready to serve, by phase. keep:
 * leave the records for a later run of the same shape; cold: drop their
 * pages from the page cache before each restart. 0 or an error.
 */
int bench_startup(const char *dir, uint32_t world, uint32_t records_per_rank,
		  uint32_t rounds, bool keep, bool cold);

#endif
