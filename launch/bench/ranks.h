/*
 * The benches' multi-rank scaffolding: rank zero in this process, every
 * other rank a forked peer (sel_peer_start) joining it on loopback. Used by
 * selene bench fanout, restore and startup; it neither configures a store
 * (the bench says how, through bench_ranks_peer) nor opens rank zero's.
 */
#ifndef SELENE_LAUNCH_BENCH_RANKS_H
#define SELENE_LAUNCH_BENCH_RANKS_H

#include "selene/store.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define BENCH_RANKS_MAX 64u       /* the largest world a bench forks (startup's) */
#define BENCH_RANKS_PLANES_MAX 2u /* page planes a bench's store has at most */

/* A peer's store configuration and the storage its pointers point into. */
struct bench_ranks_config {
	struct sel_store_config store;
	struct sel_plane planes[BENCH_RANKS_PLANES_MAX];
	char dir[600];
};

/*
 * What a bench's peers do, each in its forked child with arg the child's
 * copy of the bench's state. configure fills *c for rank; 0, or an error
 * with err filled. started (may be NULL) runs once the peer started,
 * stopped (may be NULL) after it stopped.
 */
struct bench_ranks_peer {
	int (*configure)(void *arg, uint32_t rank, struct bench_ranks_config *c, char *err,
			 size_t err_size);
	void (*started)(void *arg, uint32_t rank, sel_peer *peer);
	void (*stopped)(void *arg, uint32_t rank);
	void *arg;
};

struct bench_ranks {
	const char *name; /* the bench's, in messages: "selene bench <name>: ..." */
	uint32_t world;
	const struct bench_ranks_peer *peer;
	struct sel_cluster cluster; /* rank zero's; a peer's in its child */
	pid_t pids[BENCH_RANKS_MAX]; /* 0: not forked */
};

/*
 * Sets b up for world ranks (1 .. BENCH_RANKS_MAX) with these timeouts and a
 * secret of secret_fill bytes; forks nothing. name and peer are borrowed and
 * must outlive b.
 */
void bench_ranks_init(struct bench_ranks *b, const char *name, uint32_t world,
		      uint32_t join_timeout_ms, uint32_t silence_timeout_ms,
		      uint32_t job_timeout_ms, uint8_t secret_fill,
		      const struct bench_ranks_peer *peer);

/*
 * With more than one rank: listens on 127.0.0.1 (an ephemeral port, in
 * b->cluster) and forks ranks 1 .. world - 1, which never return. Call before
 * rank zero's store opens, then bench_ranks_stop whatever this returns. 0, or
 * an error (printed).
 */
int bench_ranks_start(struct bench_ranks *b);

/*
 * After rank zero's store closed: closes the listening socket and reaps the
 * peers, killing them first when ret (the bench's result so far) is an
 * error. Returns ret, or -EIO (printed) when ret was 0 and a peer failed.
 */
int bench_ranks_stop(struct bench_ranks *b, int ret);

#endif
