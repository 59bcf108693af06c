/*
 * The disk thread (docs/DESIGN.md section 6, seed 2.5): one thread per shard
 * engine that owns an io_uring ring and does all of a record directory's
 * file work: create, write pages and row from caller-owned slots, commit,
 * open and check a header, read pages and row into slots and verify them,
 * truncate, unlink. No synchronous step runs on the disk thread itself, so
 * none holds up the I/O it keeps in flight: those of requests that are not
 * urgent (create, commit with its syncs, abort, truncate, unlink) run on
 * background control threads (one; REC_DISK_CONTROL_THREADS_MAX with kernel
 * workers), those of urgent ones (a restore's open and close) on one
 * restore control thread, each queue taken in arrival order. An open's
 * header and checksum reads wait behind the reads queued on the device;
 * meanwhile the restore's other reads keep flowing, and stores stay held
 * back as while any urgent request is active. A requester therefore sends
 * a request that depends on an earlier one (a write after its create, a
 * commit after its writes, a read after its open) only after the earlier
 * one's reply, and steps of different files may run at once. Checksums are
 * computed and verified on this thread, unless a request says its
 * requester does it (requester_checksums).
 * Payload I/O goes through the ring with O_DIRECT where the directory allows
 * it, in requests of at most 8 MiB (2 MiB with kernel workers, io_workers);
 * where io_uring_queue_init fails it says so once and uses preadv/pwritev
 * on the same thread. It runs SCHED_BATCH
 * at nice 10. A request fails only after every I/O it started has drained,
 * so its buffers are free when the reply arrives.
 *
 * Requests and replies are caller-owned and preallocated; the threads
 * allocate nothing after start (the kernel makes its workers on demand).
 */
#ifndef SELENE_RECORD_DISK_H
#define SELENE_RECORD_DISK_H

#include "record/dir.h"
#include "record/file.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* Buffers in one request: a window of 64 pages, or a row's pieces. */
#define REC_DISK_BUFFERS_MAX 256u
/* Requests waiting for the disk thread, and replies waiting to be taken. */
#define REC_DISK_QUEUE_MAX 64u
/* I/O requests in flight on the ring at once (8 MiB each at most). */
#define REC_DISK_OPS_MAX 32u
/*
 * I/O requests of background requests (stores) in flight while a restore's
 * request is active: enough to keep writing, few enough that the restore's
 * reads do not queue behind a deep batch of writes on the device.
 */
#define REC_DISK_BACKGROUND_OPS_MAX 2u
/* Buffers one I/O request gathers. */
#define REC_DISK_IOV_MAX 64u
/*
 * With kernel workers (io_workers), I/O requests of at most 2 MiB, so a
 * window's reads spread over several workers (2 MiB measured best on the
 * H200 among 2, 4 and 8 MiB with tmpfs).
 */
#define REC_DISK_WORKER_CHUNK_BYTES (2u << 20)
/* A compile-time ceiling on io_workers. */
#define REC_DISK_IO_WORKERS_MAX 64u
/*
 * Control threads with kernel workers (one without): several stores'
 * creates, each preallocating its whole file (R-WRITE-1), run at once. On
 * the H200, 4 stores at once into /dev/shm measured 5.0 GB/s with one
 * control thread and 6.4 without the preallocation.
 */
#define REC_DISK_CONTROL_THREADS_MAX 4u

enum rec_disk_op {
	REC_DISK_CREATE,      /* file->header: begin writing (R-WRITE-1) */
	REC_DISK_WRITE_PAGES, /* stored pages [first, first + count) from buffers */
	REC_DISK_WRITE_ROW,   /* the row segment from buffers (pieces) */
	REC_DISK_COMMIT,      /* checksum segment, header, sync, rename */
	REC_DISK_ABORT,       /* abandon the record being written */
	REC_DISK_OPEN,        /* open key for reading; check it is as expected */
	REC_DISK_READ_PAGES,  /* stored pages into buffers, each verified */
	REC_DISK_READ_ROW,    /* the row segment into buffers, verified */
	REC_DISK_CLOSE,       /* close the record being read */
	REC_DISK_TRUNCATE,    /* drop key's row */
	REC_DISK_UNLINK,      /* remove key's file */
};

/* A record one requester writes or reads; init once, reuse per record. */
struct rec_disk_file {
	struct rec_header header; /* CREATE: the header to write */
	struct rec_writer writer;
	struct rec_reader reader;
	struct rec_file_buffers buffers;
	bool writing;
	bool reading;
};

struct rec_disk_replies;

struct rec_disk_request {
	enum rec_disk_op op;
	struct rec_disk_file *file;
	struct rec_key key;         /* OPEN, TRUNCATE, UNLINK */
	uint32_t expect_first_page; /* OPEN: what the index says */
	uint32_t expect_tail_pages;
	bool expect_row;
	uint32_t first;             /* pages: first stored index */
	uint32_t count;             /* pages: count (buffers[i] is page first + i) */
	uint32_t piece_count;       /* row: buffers holding the row in order */
	uint64_t piece_bytes;       /* row: bytes of each piece but the last */
	void *buffers[REC_DISK_BUFFERS_MAX];
	/*
	 * PAGES: how each buffer holds its page record (a warm slot's planes,
	 * shard/warm.h); zeroed: in one piece, page_stride bytes. A split
	 * page's segments are written from, or read into, in file order, and
	 * its checksum is streamed over them (rec_page_checksum_spread).
	 */
	struct rec_page_spread spread;
	struct rec_disk_replies *replies;
	uint64_t tag;               /* the requester's, untouched */
	/*
	 * A restore's request: its I/O and checksum work go before every other
	 * request's, and while one is active the others keep at most
	 * REC_DISK_BACKGROUND_OPS_MAX I/O requests in flight.
	 */
	bool urgent;
	/*
	 * PAGES requests whose page checksums the requester handles: for a
	 * write it filled page_checksums (R-REC-9) and the disk thread only
	 * notes them; for a read the disk thread does not verify, and the
	 * requester verifies every page (rec_reader_page_ok) before it uses a
	 * byte. The row is always the disk thread's.
	 */
	bool requester_checksums;
	uint64_t page_checksums[REC_DISK_BUFFERS_MAX];
	/* The reply: 0 or a negative code, and a reason for Selene's codes. */
	int result;
	char why[200];
	/* The disk thread's progress; the requester leaves these alone. */
	uint32_t next_buffer;
	uint64_t next_offset;       /* within buffers[next_buffer] */
	uint32_t ops_in_flight;
	uint32_t next_sum;          /* next buffer to checksum (or verify) */
	bool started;
};

/* Where replies arrive: a bounded queue one requester waits on. */
struct rec_disk_replies {
	pthread_mutex_t lock;
	pthread_cond_t ready;
	struct rec_disk_request *queue[REC_DISK_QUEUE_MAX];
	uint32_t head;
	uint32_t count;
	bool poked; /* rec_disk_replies_poke since the last wait it ended */
};

struct rec_disk;

struct rec_disk_options {
	struct rec_dir *dir;  /* not owned; outlives the disk thread */
	bool no_uring;        /* use the pread/pwrite path even where io_uring works */
	/*
	 * 0: the thread submits each I/O request inline, as the kernel runs
	 * it (asynchronous on a block device with O_DIRECT). N: every payload
	 * I/O request goes to the ring's kernel workers (IOSQE_ASYNC), at most
	 * N at once (per NUMA node, as io_uring bounds them), in requests of
	 * REC_DISK_WORKER_CHUNK_BYTES: on tmpfs or with buffered I/O each is a
	 * copy on a CPU, so N run in parallel. Where the kernel refuses the
	 * bound, the thread says so and submits inline
	 * (rec_disk_io_workers then says 0).
	 * Workers are threads of this process made from the disk thread, so
	 * they share its priority. Ignored on the pread/pwrite path.
	 */
	uint32_t io_workers;
};

/*
 * Starts the disk thread and its control threads. Returns 0, or a negative
 * errno with a message in err.
 */
int rec_disk_start(const struct rec_disk_options *options, struct rec_disk **out,
		   char *err, size_t err_size);

/* How long rec_disk_stop waits by default for the requests in hand. */
#define REC_DISK_STOP_TIMEOUT_MS 30000u

/*
 * Finishes every request already submitted, then stops the disk thread and
 * its control threads and frees the disk; returns 0 (NULL does nothing).
 * -ETIMEDOUT when any is still running timeout_ms later (I/O the kernel
 * never completes, a sync or an open that never returns): they are then
 * left as they are, with the disk allocated, and so must be every buffer
 * and file its requests name; a later call waits again, and frees the disk
 * once all have ended.
 */
int rec_disk_stop(struct rec_disk *disk, uint32_t timeout_ms);

/* Whether the ring is in use ("io_uring") or the fallback ("pread/pwrite"). */
const char *rec_disk_engine(const struct rec_disk *disk);

/* The kernel workers in use (0: inline submissions, or the fallback). */
uint32_t rec_disk_io_workers(const struct rec_disk *disk);

/*
 * io_workers for dir when nothing says otherwise: SELENE_IO_THREADS (0 to
 * REC_DISK_IO_WORKERS_MAX) when set and valid; else none where dir uses
 * O_DIRECT on a device, and half the online cores (1 to 8) where the
 * kernel's I/O is a CPU copy (memory-backed or buffered).
 */
uint32_t rec_disk_default_io_workers(const struct rec_dir *dir);

/* The same rule for a directory known by its two facts (a raw baseline's). */
uint32_t rec_disk_default_io_workers_for(bool memory_backed, bool direct);

/*
 * Hands req to the disk thread; it is the thread's until it appears on
 * req->replies. Never blocks: SEL_EQUEUEFULL when REC_DISK_QUEUE_MAX
 * requests are already the disk's (submitted and not yet replied, wherever
 * they wait), SEL_ESTOPPED once stopping.
 */
int rec_disk_submit(struct rec_disk *disk, struct rec_disk_request *req);

void rec_disk_replies_init(struct rec_disk_replies *replies);
void rec_disk_replies_destroy(struct rec_disk_replies *replies);

/* Waits for the next reply (the requester's own thread may block). */
struct rec_disk_request *rec_disk_wait(struct rec_disk_replies *replies);

/* The next reply already there, or NULL: never blocks (a poke stays). */
struct rec_disk_request *rec_disk_take(struct rec_disk_replies *replies);

/*
 * Waits for the next reply or a poke, whichever comes first: NULL for a
 * poke. A poke with no waiter is kept for the next such wait.
 */
struct rec_disk_request *rec_disk_wait_or_poke(struct rec_disk_replies *replies);

/* Ends a rec_disk_wait_or_poke on replies (any thread). */
void rec_disk_replies_poke(struct rec_disk_replies *replies);

/* Allocates file's buffers for records of up to max_pages stored pages. */
int rec_disk_file_init(struct rec_disk_file *file, uint32_t max_pages);
void rec_disk_file_destroy(struct rec_disk_file *file);

#endif
