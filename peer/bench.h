/*
 * A peer's side of selene bench startup: where sel_peer_start spent its
 * time; not part of the public API (include/selene/).
 */
#ifndef SELENE_PEER_BENCH_H
#define SELENE_PEER_BENCH_H

#include "selene/store.h"

#include <stdint.h>

/* Measured with the monotonic clock during sel_peer_start. */
struct sel_bench_peer_startup {
	uint64_t start_ns; /* the whole sel_peer_start */
	uint64_t scan_ns;  /* this rank's directory scan */
	uint64_t join_ns;  /* join, summary, agreement applied and confirmed */
	uint64_t scan_headers_read; /* record files this rank's scan read */
	uint64_t scan_cache_hits;   /* record files its scan cache stood for (R-DIR-10) */
};

/* Copies the figures of peer's start into *out. */
void sel_bench_peer_startup(const sel_peer *peer, struct sel_bench_peer_startup *out);

#endif
