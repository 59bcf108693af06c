/*
 * Fixtures shared by the pool instance tests (test_pool_attach,
 * test_pool_export, test_pool_gpu_export): a pool manager run as a child
 * process (so a test can kill or stop it), optionally with its counters
 * copied to shared memory; and instances of two ranks on loopback, rank
 * zero in the test's process through the public store API and rank one a
 * child through sel_peer_start, their device planes in shared memory so the
 * test checks every rank's bytes. Test code only: it asserts with CMocka.
 */
#ifndef SELENE_TESTS_POOL_FIXTURE_H
#define SELENE_TESTS_POOL_FIXTURE_H

#include "tests/testutil.h"

#include "pool/manager.h"
#include "selene/store.h"
#include "shard/pool_link.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The two-rank instances' geometry. */
#define PF_WORLD 2u
#define PF_UNIT 4096u
#define PF_PAGES 64u
#define PF_ROWS 4u
#define PF_ROW 8192u
#define PF_TOKENS 2000u
#define PF_PAGE_TOKENS 64u
#define PF_INSTANCES 3u

/* The manager child's counters, copied every millisecond. */
struct pf_manager_view {
	pthread_mutex_t lock; /* process-shared */
	struct pool_manager_stats stats;
};

struct pf_manager {
	pid_t pid;                   /* the child; 0: none */
	uint16_t port;
	char address[64];            /* "127.0.0.1:port", the stores' pool */
	struct pf_manager_view *view; /* NULL: counters not copied */
};

/* Maps m->view in shared memory (before the manager starts). */
void pf_manager_view_open(struct pf_manager *m);

/* Unmaps m->view (nothing when NULL). */
void pf_manager_view_close(struct pf_manager *m);

/*
 * Starts the manager child listening on 127.0.0.1:port (0: any), named
 * name, with an arena of memory_bytes; with m->view set its counters are
 * copied there. False when it could not listen there (the port taken).
 */
bool pf_manager_try_start(struct pf_manager *m, uint16_t port, const char *name,
			  uint64_t memory_bytes);

/* pf_manager_try_start on any port, asserting it started. */
void pf_manager_start(struct pf_manager *m, const char *name, uint64_t memory_bytes);

/*
 * A manager on a port below the ephemeral range (32768 up), so that no
 * connection of another test on this host takes it as its local port
 * while the test restarts a manager there: the port it listens on.
 */
uint16_t pf_manager_start_fixed(struct pf_manager *m, const char *name, uint64_t memory_bytes);

/* Kills and reaps the manager child (nothing when none runs). */
void pf_manager_kill(struct pf_manager *m);

/* The manager's counters as last copied (m->view must be set). */
struct pool_manager_stats pf_manager_stats(struct pf_manager *m);

/* Writes a 32-byte secret of byte at path (mode 0600). */
void pf_write_secret(const char *path, uint8_t byte);

struct pf_rank_memory {
	uint8_t planes[2][PF_PAGES * PF_UNIT];
	uint8_t rows[PF_ROWS * PF_ROW];
	char why[256];
	struct shard_pool_link_counts counts; /* a peer's, when it stopped */
};

struct pf_instance {
	uint32_t index;          /* its rank memory: index * PF_WORLD + rank */
	char dir[400];           /* its ranks' directories below */
	struct sel_cluster cluster;
	int listen_fd;
	pid_t peer;
	sel_store *store;
	sel_history *h;
};

/* What differs between the instances of a test. */
struct pf_variant {
	uint32_t row_bytes;       /* PF_ROW, or another layout */
	uint64_t disk_limit;
	bool wrong_secret_peer;   /* rank one proves another secret */
	const char *peer_failpoints; /* armed in rank one's process only */
};

struct pf_fixture {
	char *base;
	struct pf_rank_memory *mem; /* shared with the children */
	struct pf_manager manager;
	char secret[512], wrong_secret[512];
	uint32_t tokens[PF_TOKENS];
	struct pf_instance inst[PF_INSTANCES];
};

/*
 * A CMocka setup: a fixture under a temporary directory tagged tag, its
 * rank memory shared, both secrets written, the manager's counters copied
 * when with_view. *state owns it until pf_teardown.
 */
int pf_setup(void **state, const char *tag, bool with_view);

/* A CMocka teardown: kills what still runs, frees all pf_setup made. */
int pf_teardown(void **state);

/* Opens instance i: its peer a child, rank zero here; the history of f->tokens. */
void pf_instance_open(struct pf_fixture *f, uint32_t i, const struct pf_variant *v);

/* Closes instance i's store and asserts its peer exited cleanly. */
void pf_instance_close(struct pf_fixture *f, uint32_t i);

/* The byte rank's page of plane is filled from. */
uint8_t pf_page_seed_byte(uint32_t rank, uint32_t page, int plane);

/* Instance i's device: page p of rank r holds its pattern; rows 555 + r. */
void pf_fill(struct pf_fixture *f, uint32_t i);

/* Instance i's pages from id first on and row slot hold the hit's bytes, every rank. */
void pf_check_restored(struct pf_fixture *f, uint32_t i, const struct sel_hit *hit,
		       uint32_t first, uint32_t slot);

/* Replaces instance i's history with a fresh one of f->tokens. */
void pf_history_renew(struct pf_fixture *f, uint32_t i);

/*
 * Looks f->tokens up on instance i with a fresh history, asking again
 * (polling between) while the pool's answer may still come: true with
 * *hit on a hit, false when the lookup settled without one.
 */
bool pf_lookup_fresh(struct pf_fixture *f, uint32_t i, struct sel_hit *hit);

/* Overwrites every rank's device planes and rows of instance i with 0xee. */
void pf_wipe(struct pf_fixture *f, uint32_t i);

/*
 * Asks instance i to fetch hit into its pages from id first on and row
 * slot, for waiter; asserts the fetch was taken.
 */
void pf_fetch(struct pf_fixture *f, uint32_t i, const struct sel_hit *hit, uint32_t first,
	      uint32_t slot, uint64_t waiter);

/*
 * pf_fetch, then waits up to ms for FETCHED (failing with what and the
 * event otherwise) and checks every rank's restored bytes.
 */
void pf_fetch_restores(struct pf_fixture *f, uint32_t i, const struct sel_hit *hit,
		       uint32_t first, uint32_t slot, uint64_t waiter, uint32_t ms,
		       const char *what);

/* The next event of s within ms; STORE_FAILED with -ETIMEDOUT when none came. */
struct sel_event pf_next_event(sel_store *s, uint32_t ms);

/*
 * Publishes checkpoints of 5 pages each up to pages_total pages of
 * instance i; each stored. With retry, a RETRY outcome (the cascade's puts
 * hold the records that would make room) is polled and published again;
 * without, every publish must be queued at once.
 */
void pf_publish_chain(struct pf_fixture *f, uint32_t i, uint32_t pages_total, bool retry);

#endif
