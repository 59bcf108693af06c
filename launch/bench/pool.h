/*
 * selene bench pool (launch/bench/pool.c): claims over TCP on loopback
 * beside a raw TCP stream of the same bytes, in one run.
 */
#ifndef SELENE_LAUNCH_BENCH_POOL_H
#define SELENE_LAUNCH_BENCH_POOL_H

#include <stdint.h>

struct bench_pool_options {
	uint32_t pages;  /* per record; 0: 64 */
	uint32_t rounds; /* claims; 0: 12 */
	/* A running manager ("host:port") and its secret file; NULL: one in
	 * this process with a fresh secret. */
	const char *manager;
	const char *secret_file;
	/* The device of the same-host claim line: "auto", "cuda" or "host"; NULL: "auto". */
	const char *device;
};

/*
 * Runs in scratch (a directory of its own): one record put to the manager
 * (kept when the manager holds it already: its key and bytes depend only
 * on the page count), then claimed o->rounds times, each beside a raw
 * stream of its bytes. Prints both and their ratio. Returns an exit
 * status: 0, or 1 when anything failed (said on stderr; a claim whose
 * bytes differ from the record's says "wrong bytes").
 */
int bench_pool(const char *scratch, const struct bench_pool_options *o);

#endif
