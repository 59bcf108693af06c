/*
 * Helpers shared by the CMocka test binaries: temporary directories,
 * geometries, deterministic payloads, writing a record in one call, and a
 * loopback listener and reaping for tests that fork or thread ranks.
 * Test code only; it asserts with CMocka and aborts on setup failures.
 */
#ifndef SELENE_TESTS_TESTUTIL_H
#define SELENE_TESTS_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <cmocka.h>

#include "record/dir.h"
#include "record/file.h"
#include "record/format.h"
#include "record/geometry.h"
#include "record/key.h"
#include "shard/device.h"

/* Makes a fresh directory under $TMPDIR (or /tmp); caller frees the path. */
char *tu_make_temp_dir(const char *tag);

/* Lets failpoints kill (SIGKILL) and abort this process: a test that means it. */
void tu_failpoints_may_kill(void);

/* rm -rf path, then frees it. */
void tu_remove_tree(char *path);

/*
 * A TCP listener on 127.0.0.1 at a port the kernel picks, with backlog;
 * returns its descriptor (close-on-exec), *port its port (host order).
 */
int tu_listen_loopback(int backlog, uint16_t *port);

/*
 * Waits for the forked child *pid (nothing when it is 0 or less), then
 * zeroes *pid; returns its exit status, or minus the signal that ended it.
 */
int tu_reap(pid_t *pid);

/*
 * Runs fn(arg) in a forked child (its stderr to /dev/null: the message is
 * expected) and asserts that the child died of SIGABRT, as SEL_ASSERT
 * ends a process.
 */
void tu_assert_aborts(void (*fn)(void *arg), void *arg);

/*
 * A geometry of plane_count page planes of unit_bytes each (names
 * "plane.NNN"), a row of row_bytes, page_tokens per page, 64 pages, 8 rows.
 */
void tu_geometry(struct rec_geometry *g, uint32_t page_tokens,
		 uint32_t plane_count, uint64_t unit_bytes, uint64_t row_bytes,
		 uint32_t rank, uint32_t world_size);

/* The model identity "test-model" and its ordinary namespace. */
void tu_identities(struct rec_identity *model, struct rec_identity *namespace_id);

/* 4 KiB-aligned, zeroed memory; aborts when out of memory. */
void *tu_alloc(size_t len);

/* Fills len bytes with a pattern that depends on seed and position. */
void tu_fill(void *buf, size_t len, uint64_t seed);

/* Deterministic tokens: token i of a sequence drawn from seed. */
void tu_tokens(uint32_t *out, size_t count, uint64_t seed);

/* A record to write: pages [first, key / pt) after parent (NULL: root). */
struct tu_record {
	struct rec_key key;
	struct rec_key parent;
	bool has_parent;
	uint32_t first_page_index;
	uint32_t tail_page_count;
	uint8_t *pages; /* tail_page_count * stride bytes, owned */
	uint8_t *row;   /* row_length bytes, owned */
	uint64_t stride;
	uint64_t row_length;
};

/*
 * Makes the key for consumed tokens of the token sequence seeded by
 * history_seed, with pages and a row filled from payload_seed.
 */
void tu_record_make(struct tu_record *rec, const struct rec_geometry *g,
		    uint64_t history_seed, uint64_t consumed,
		    const struct tu_record *parent, uint64_t payload_seed);
void tu_record_free(struct tu_record *rec);

/* Fills a header for rec in dir's geometry and namespace. */
void tu_record_header(struct rec_header *h, struct rec_dir *dir,
		      const struct tu_record *rec);

/* Writes rec with the page windows given (0 means all at once). */
int tu_record_write(struct rec_dir *dir, const struct tu_record *rec,
		    uint32_t window_pages);

/* Opens a record directory for g in base; asserts success. */
struct rec_dir *tu_dir_open(const char *base, const struct rec_geometry *g,
			    bool durable);

/* The same, choosing buffered I/O even where O_DIRECT works. */
struct rec_dir *tu_dir_open_buffered(const char *base,
				     const struct rec_geometry *g);

/* Asserts that two scan entries (record/dir.h) agree field by field. */
void tu_assert_info_equal(const struct rec_record_info *a, const struct rec_record_info *b);

/* Path of rec's file in dir; caller frees. */
char *tu_record_path(struct rec_dir *dir, const struct rec_key *key);

/* Flips one bit of the file at offset. */
void tu_flip_bit(const char *path, uint64_t offset);

/* Number of directory entries whose name ends with suffix. */
int tu_count_suffix(const char *dir_path, const char *suffix);

/* CPU seconds, user and system, of getrusage(who): RUSAGE_SELF or RUSAGE_THREAD. */
double tu_cpu_seconds(int who);

/*
 * Checks a metrics exposition with tests/metrics_check.py (the Prometheus
 * parser and the format's grouping rules), requiring each family named in
 * required (space-separated). Returns 0 valid, 77 when the parser is not
 * installed (the caller skips, saying so); fails the test otherwise.
 */
int tu_check_metrics(const char *text, const char *required);

/*
 * A test device whose copies run only when it is synchronized, in order, as
 * a GPU stream's do (host addresses on both sides), or when a mark
 * recorded behind them is waited for (those before the mark run; later
 * ones stay queued). The wait (synchronize or mark) numbered
 * fail_synchronize_at (1..; 0: none) fails with -EIO and runs none of the
 * copies it waits for, as a failed stream; the copy call numbered gate_at
 * (1..; 0: none) waits until the test sets gate_at to 0 again,
 * gate_blocked saying it waits. Used by one transfer thread; the test
 * reads and sets the knobs between jobs, the gate with atomics.
 */
struct tu_deferred_device {
	struct shard_device base;
	enum shard_copy_direction directions[4096];
	struct shard_copy queued[4096];
	uint32_t batch_of[4096]; /* each queued copy's copy call (copy_calls then) */
	uint32_t queued_count;
	uint32_t queued_batches; /* copy calls whose copies are still queued */
	uint64_t consumed;       /* copies run or dropped so far */
	uint64_t marks[SHARD_DEVICE_MARKS]; /* consumed + queued_count when recorded */
	uint32_t mark_calls;     /* marks recorded */
	uint32_t mark_waits;     /* waits for a mark */
	uint32_t synchronize_calls; /* waits: synchronize and mark waits */
	uint32_t fail_synchronize_at;
	uint32_t copy_calls;
	uint32_t gate_at;
	uint32_t gate_blocked;
};

void tu_deferred_device_init(struct tu_deferred_device *d);

/* Waits (60 s at most) until a copy call waits at the gate. */
void tu_deferred_gate_wait(struct tu_deferred_device *d);

/* No-op bind, register, unregister and close, for test devices. */
int tu_device_bind(struct shard_device *dev);
int tu_device_register(struct shard_device *dev, void *ptr, uint64_t bytes);
void tu_device_unregister(struct shard_device *dev, void *ptr);
void tu_device_close(struct shard_device *dev);
/* A mark and its wait for test devices whose copies finish as they are issued. */
int tu_device_mark_none(struct shard_device *dev, uint32_t mark);

/*
 * Copy entries dev was given since tu_count_copy_entries, each direction's
 * (one device at a time: dev's ops are replaced by counting ones that
 * copy as its own do, so call it while no engine uses dev; the counts may
 * be reset to 0 between jobs).
 */
extern uint64_t tu_entries_to_host, tu_entries_to_device;
void tu_count_copy_entries(struct shard_device *dev);


/*
 * A seeded run of a randomized test (tests/test_store_ranks.c,
 * tests/test_pool_random.c): its generator, its step, and its last events,
 * printed with a failure, or by tu_seeded_catch_aborts when the code under
 * test aborts, with the variables that replay the seed.
 */
#define TU_SEEDED_LINES 256u
#define TU_SEEDED_LINE_BYTES 200u

struct tu_seeded {
	const char *test;      /* the test binary's name */
	const char *seed_env;  /* SEED=n replays seed n */
	const char *trace_env; /* set: every event to stderr as it happens */
	uint64_t seed, rng, step;
	bool trace_all;
	uint32_t next;         /* events traced so far */
	char lines[TU_SEEDED_LINES][TU_SEEDED_LINE_BYTES];
};

/* Starts s at seed, step 0, no event; trace_all when trace_env is set. */
void tu_seeded_init(struct tu_seeded *s, const char *test, const char *seed_env,
		    const char *trace_env, uint64_t seed);
uint64_t tu_seeded_rand(struct tu_seeded *s);
/* A number below n (n > 0). */
uint32_t tu_seeded_below(struct tu_seeded *s, uint32_t n);
/* Notes an event, prefixed with the step. */
void tu_seeded_trace(struct tu_seeded *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void tu_seeded_vtrace(struct tu_seeded *s, const char *fmt, va_list ap);
/* Prints the last events to stderr, unless they went there as they came. */
void tu_seeded_dump(const struct tu_seeded *s);
/* From now on an abort first dumps s and names its seed (NULL: not). */
void tu_seeded_catch_aborts(struct tu_seeded *s);

#endif
