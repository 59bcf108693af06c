/*
 * Entry points into a sel_store for Selene's own benchmarks (selene bench
 * fanout); not part of the public API (include/selene/).
 */
#ifndef SELENE_COORDINATOR_BENCH_H
#define SELENE_COORDINATOR_BENCH_H

#include "selene/store.h"

#include <stdint.h>

/*
 * Submits a job that moves no bytes and touches no file to every rank's
 * shard engine (coord_store_noop). It completes when every rank answered;
 * sel_poll takes its completion and it shows in sel_bench_noops; until
 * then it counts in jobs_in_flight (sel_stats) like any job. Returns 0,
 * SEL_EQUEUEFULL, SEL_ESTOPPED, or an error of the engine's or the
 * fan-out's (-ENOTSUP where the job table has no noop).
 */
int sel_bench_noop(sel_store *store);

/* Noops answered by every rank so far, and how many of those failed. */
void sel_bench_noops(sel_store *store, uint64_t *done, uint64_t *failed);

/*
 * Where sel_store_open spent its time (selene bench startup), measured on
 * rank zero with the monotonic clock. A phase that did not run (one rank,
 * no disk store) is 0.
 */
struct sel_bench_startup {
	uint64_t open_ns;      /* the whole sel_store_open */
	uint64_t scan_ns;      /* rank zero's directory scan */
	uint64_t join_ns;      /* accepting and authenticating every peer */
	uint64_t summary_ns;   /* receiving every peer's summary (waits for its scan) */
	uint64_t agreement_ns; /* deciding the agreement */
	uint64_t apply_ns;     /* every rank applies its share and confirms it */
	uint64_t index_ns;     /* building the index from the agreed records */
	uint64_t scan_headers_read; /* record files rank zero's scan read */
	uint64_t scan_cache_hits;   /* record files its scan cache stood for (R-DIR-10) */
};

/* Copies the figures of store's open into *out. */
void sel_bench_startup(sel_store *store, struct sel_bench_startup *out);

#endif
