/* The coordinator's benchmarks, called by selene bench (cmd_bench.c). */
#ifndef SELENE_LAUNCH_BENCH_STORE_H
#define SELENE_LAUNCH_BENCH_STORE_H

/* Index lookups against index size and history length; 0 or an error. */
int bench_lookup(void);

/* Every public call's latency while stores keep the disk busy. */
int bench_api(const char *dir, double seconds);

#endif
