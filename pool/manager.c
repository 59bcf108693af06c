/*
 * The pool manager: see manager.h. One thread, one epoll loop; every socket
 * is non-blocking and every connection's failure ends that connection only
 * (R-POOL-6). Each check cites its rule in pool/PROTOCOL.md.
 */
#include "pool/manager.h"

#include "cluster/protocol.h"
#include "common/base.h"
#include "common/failpoint.h"
#include "common/list.h"
#include "common/log.h"
#include "common/xxh.h"
#include "pool/rdma.h"
#include "record/format.h"
#include "record/geometry.h"
#include "selene/selene.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <time.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <unistd.h>

#define SCOPE_BUCKETS 4096u
/* Buckets of the put, claim and export hashes (by id, or by key: SCOPE_BUCKETS). */
#define ID_BUCKET_BITS 12u
#define ID_BUCKETS (1u << ID_BUCKET_BITS)
#define EXTENTS_MAX 65536u
/*
 * A session whose CLAIMED waits for loads from the disk tier hears a
 * HEARTBEAT this often, so its no-progress timeout (R-POOL-52, 3 s)
 * measures the manager, not the disk queue it waits behind.
 */
#define LOAD_BEAT_MS 1000u
/*
 * While an RDMA WRITE is in flight the loop polls its completions this
 * often, sleeping in epoll_pwait2 between (ppoll on the epoll set where
 * the kernel, before 5.11, has no epoll_pwait2; sockets still wake it at
 * once): a completion is seen at most this late, and the loop does not
 * spin.
 */
#define RDMA_POLL_US 100u
/* Answer bytes queued to a rank before the manager stops reading it (R-POOL-8). */
#define OUT_BACKLOG_BYTES_MAX (1u << 20)

enum conn_state { C_HELLO, C_PROOF, C_ATTACH, C_SERVING };

struct scope;
struct conn;

struct record {
	struct sel_chain hash; /* its scope's bucket */
	struct sel_link lru;
	struct sel_link age; /* committed, in created_ns order */
	struct scope *scope;
	struct record *parent;
	struct rec_key key;
	struct rec_key parent_key; /* while a disk scan links records */
	uint32_t first_page_index, tail_page_count;
	bool row, committed;
	bool on_disk; /* its shares are files in the scope's directory, not in the arena */
	bool loading; /* on disk, a load into the arena queued (its job pins it) */
	uint64_t disk_job; /* on disk, the spill writing its files (0: written) */
	uint32_t children, pins;
	uint64_t used_ns, created_ns;
	/*
	 * Its image's stamp (R-POOL-53): taken anew at every allocation of its
	 * shares in the arena (a put, a load from disk); meaningful while
	 * !on_disk
	 */
	uint64_t stamp;
	uint32_t world_size;
	struct pool_place shares[]; /* world_size */
};

/*
 * An instance's announcement that it holds key in its own tiers
 * (R-POOL-70 .. R-POOL-72): apart from the records, in its scope's holders
 * index and on its instance's list.
 */
struct hold {
	struct sel_chain hash; /* its scope's holders bucket */
	struct sel_link inst_link; /* its instance's holds */
	struct instance *inst;
	struct rec_key key;
};

/* An export asked of a holder (R-POOL-73 .. R-POOL-75). */
struct export {
	struct sel_link link; /* every live export */
	struct sel_chain id_hash, key_hash; /* its buckets */
	uint64_t id;
	struct scope *scope;
	struct instance *holder;
	struct rec_key key;
	uint64_t deadline_ns;
};

struct scope {
	struct scope *next;
	uint8_t id[POOL_SCOPE_BYTES];
	struct pool_attach parts; /* rank unused */
	struct sel_chain *buckets[SCOPE_BUCKETS]; /* records */
	struct sel_chain **hold_buckets; /* SCOPE_BUCKETS, made at the first hold */
	uint32_t holds;
	uint64_t records;
	uint32_t instances;
	int dir_fd; /* <dir>/<scope hex>, or -1 without a disk tier */
};

struct instance {
	struct instance *next;
	uint8_t id[POOL_INSTANCE_ID_BYTES];
	struct scope *scope;
	struct conn **ranks;
	uint32_t attached;
	uint32_t claims, puts;
	struct sel_list holds; /* what its session announced */
	uint32_t exports;   /* exports asked of it, live */
};

struct share_rx {
	uint64_t received;
	bool header_ok, verified;
	uint32_t pages_verified;
	struct rec_header h;
};

struct put {
	struct sel_link link; /* every open put */
	struct sel_chain id_hash, key_hash; /* its buckets */
	uint64_t id, request_id;
	struct instance *inst;
	struct record *rec;
	uint64_t deadline_ns;
	struct share_rx *rx; /* world_size */
};

struct claim {
	struct sel_link link; /* every live claim */
	struct sel_chain hash; /* its bucket, by instance and id */
	uint64_t id;
	struct instance *inst;
	uint32_t count;
	struct record **chain;
	uint64_t deadline_ns;
	/* CLAIMED waits for these loads from the disk tier (disk thread) */
	uint32_t loads_waiting;
	uint64_t beat_ns; /* the last HEARTBEAT the session heard while it waits */
	bool load_failed;
	bool local; /* CLAIM_LOCAL: the places follow CLAIMED */
};

/* The put, claim or export whose link (on the manager's list) is l, or NULL. */
static struct put *put_of(struct sel_link *l)
{
	return sel_list_entry(l, struct put, link);
}

static struct claim *claim_of(struct sel_link *l)
{
	return sel_list_entry(l, struct claim, link);
}

static struct export *export_of(struct sel_link *l)
{
	return sel_list_entry(l, struct export, link);
}

/* What the disk thread does (docs/DESIGN.md section 12). */
enum disk_op { DISK_SPILL, DISK_LOAD, DISK_UNLINK };

/*
 * One job of the disk thread. It names its record by scope and key, never
 * by pointer: the loop may drop a record whose spill runs, and finds it
 * again (with the same disk_job id) when the job is done.
 */
struct disk_job {
	struct disk_job *next;
	enum disk_op op;
	uint64_t id;
	struct scope *scope; /* scopes live until the manager closes */
	int dir_fd;          /* the scope's directory */
	struct rec_key key;
	uint32_t first_page_index, tail_page_count, world_size;
	bool row;
	uint8_t *base;        /* a spill's copy (owned), a load's destination (the arena) */
	uint64_t copy_bytes;  /* a spill's copy */
	int result;
	char why[200];
	struct pool_place shares[]; /* world_size: where each share lies in base */
};

/* The disk thread and its bounded queue: the loop submits, the thread runs in order. */
struct disk_thread {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct disk_job *todo_head, *todo_tail; /* in submission order */
	struct disk_job *done_head, *done_tail;
	uint32_t jobs;      /* queued, running, or done and not yet taken */
	uint64_t bytes;     /* the spill copies those jobs hold */
	uint64_t next_id;   /* the loop's */
	int done_fd;        /* eventfd the loop polls; -1 while not running */
	bool running, stop;
	bool refused;       /* a spill was refused since the loop last cleared it */
};

struct stream {
	uint64_t claim_id;
	bool rdma;          /* pulled in RDMA mode (R-POOL-93) */
	bool rdma_started;  /* a window of it was posted */
	bool rdma_produced; /* every window was posted; CLAIM_END waits for their completions */
	int rdma_result;    /* what that CLAIM_END says */
	uint32_t skip;
	uint32_t index;
	uint8_t section;
	uint64_t pos; /* bytes (header, checksums, row) or page index (pages) */
	uint64_t progress_ns;
};

/* A lent slot's state on the manager's side (R-POOL-94, R-POOL-95). */
enum rslot { RSLOT_FREE = 0, RSLOT_WRITING, RSLOT_RANK };

/* A posted RDMA WRITE: the window it carries, said once it completes. */
struct rdma_posted {
	struct pool_rdma_window win;
	struct record *pin;
	uint64_t wr_id;
};

/* One connection's RDMA (R-POOL-90 ..): the writer link and the rank's slots. */
struct conn_rdma {
	struct pool_rdma_link *link;
	bool lent; /* RDMA_LEND came and the link connected */
	uint32_t slot_count;
	uint64_t slot_bytes;
	uint8_t *slots; /* enum rslot, slot_count */
	struct rdma_posted posted[POOL_RDMA_WRITES_IN_FLIGHT_MAX]; /* a ring, in post order */
	uint32_t posted_head, posted_count;
	uint64_t next_wr;
};

struct conn {
	int fd;
	struct conn_rdma *rdma; /* NULL: no RDMA_OFFER was sent */
	enum conn_state state;
	bool keyed, closing;
	uint64_t deadline_ns, heard_ns;
	uint8_t cn[POOL_NONCE_BYTES], sn[POOL_NONCE_BYTES], kc[POOL_KEY_BYTES];
	struct pool_rx rx;
	uint8_t *body;
	uint64_t tx_seq;
	uint8_t *out;
	size_t out_used, out_sent, out_cap;
	/*
	 * A claim window's data is written from the arena, not copied into out:
	 * out holds its header and head up to out_split, then its tag and any
	 * later frames; the data goes between (conn_write). Its record is
	 * pinned until the last byte is written, so the bytes cannot move.
	 */
	const uint8_t *out_data; /* NULL: none */
	size_t out_data_length, out_data_sent, out_split;
	struct record *out_pin;
	struct instance *inst;
	uint32_t rank;
	struct stream streams[POOL_SHARES_LIVE_MAX];
	uint32_t stream_count;
	struct put *rx_put; /* the put the window being read belongs to */
	uint32_t events_set; /* EPOLLIN, EPOLLOUT: what epoll_fd watches for */
};

struct pool_manager {
	struct pool_manager_config config;
	char name[POOL_NAME_BYTES_MAX + 1];
	int listen_fd, stop_fd;
	int dir_fd; /* --dir, or -1 */
	uint16_t port;
	char arena_path[POOL_ARENA_PATH_BYTES_MAX + 1];
	uint8_t arena_id[POOL_ARENA_ID_BYTES];
	uint64_t arena_bytes; /* the file, header included */
	uint8_t *arena;
	struct pool_place *free_list; /* sorted by offset */
	uint32_t free_count;
	struct conn *conns[POOL_CONNECTIONS_MAX];
	uint32_t conn_count;
	struct scope *scopes;
	struct instance *instances;
	struct sel_list puts, claims, exports;
	/* the same, hashed: a frame finds its put, claim or export in O(1) */
	struct sel_chain *put_ids[ID_BUCKETS], *put_keys[SCOPE_BUCKETS];
	struct sel_chain *claim_ids[ID_BUCKETS];
	struct sel_chain *export_ids[ID_BUCKETS], *export_keys[SCOPE_BUCKETS];
	uint64_t next_put_id;
	uint64_t next_export_id;
	uint64_t next_stamp; /* R-POOL-53: never 0, never reused while the manager runs */
	struct sel_list lru; /* least recently used first */
	struct sel_list age; /* oldest first: max-age expiry */
	uint64_t expire_last_ns;            /* the last max-age sweep */
	/*
	 * When timers() walks the deadlines next: no later than the earliest
	 * one it saw (each a lower bound: a deadline may move later since),
	 * lowered by each one set since, and POOL_LOOP_TICK_MS at most.
	 */
	uint64_t timers_due_ns;
	bool draining;
	/* scratch of the loop's thread (one manager, one thread: no sharing) */
	struct record *chain_buf[POOL_CHAIN_RECORDS_MAX];
	struct pool_chain_entry entry_buf[POOL_CHAIN_RECORDS_MAX];
	struct pool_attach attach;
	uint8_t attach_body[POOL_ATTACH_FIXED_BYTES + POOL_ATTACH_RANK_BYTES * REC_WORLD_SIZE_MAX];
	uint8_t block[REC_HEADER_BYTES];
	/*
	 * The loop waits on epoll_fd: the listener, stop_fd, the disk
	 * thread's done_fd and every connection, each connection's event
	 * naming it (data.ptr), so a turn costs what is ready, not every
	 * connection.
	 */
	int epoll_fd;
	struct epoll_event events[3 + POOL_CONNECTIONS_MAX];
	struct pool_rdma_probe rdma_device;
	bool rdma_on; /* --rdma and a device: connections are offered RDMA claims */
	struct pool_rdma_memory *rdma_arena; /* the arena, registered once for every link */
	struct pool_rdma_fallback rdma_fallback;
	uint64_t log_second;  /* refusals logged in this second, at most 5 */
	uint32_t log_count;
	bool no_pwait2; /* epoll_pwait2 said ENOSYS: the loop's short waits use ppoll */
	struct disk_thread disk; /* with --dir */
	uint8_t *disk_body; /* POOL_CONTROL_BODY_BYTES_MAX: answers of claims that waited for loads */
	pthread_mutex_t stats_lock;
	struct pool_manager_stats stats;
};

/* ---- Arena allocator: first fit over a sorted free list ---- */

static int arena_alloc(struct pool_manager *m, uint64_t bytes, uint64_t *offset)
{
	bytes = sel_align_up(bytes, 4096);
	for (uint32_t i = 0; i < m->free_count; i++) {
		struct pool_place *e = &m->free_list[i];

		if (e->bytes < bytes)
			continue;
		*offset = e->offset;
		e->offset += bytes;
		e->bytes -= bytes;
		if (e->bytes == 0) {
			memmove(e, e + 1, (m->free_count - i - 1) * sizeof(*e));
			m->free_count--;
		}
		m->stats.arena_used_bytes += bytes;
		return 0;
	}
	return -ENOSPC;
}

static void arena_free(struct pool_manager *m, uint64_t offset, uint64_t bytes)
{
	uint32_t i = 0;

	bytes = sel_align_up(bytes, 4096);
	m->stats.arena_used_bytes -= bytes;
	while (i < m->free_count && m->free_list[i].offset < offset)
		i++;
	/* merge with the neighbour before, after, or both */
	if (i > 0 && m->free_list[i - 1].offset + m->free_list[i - 1].bytes == offset) {
		m->free_list[i - 1].bytes += bytes;
		if (i < m->free_count && offset + bytes == m->free_list[i].offset) {
			m->free_list[i - 1].bytes += m->free_list[i].bytes;
			memmove(&m->free_list[i], &m->free_list[i + 1],
				(m->free_count - i - 1) * sizeof(m->free_list[0]));
			m->free_count--;
		}
		return;
	}
	if (i < m->free_count && offset + bytes == m->free_list[i].offset) {
		m->free_list[i].offset = offset;
		m->free_list[i].bytes += bytes;
		return;
	}
	SEL_ASSERT(m->free_count < EXTENTS_MAX);
	memmove(&m->free_list[i + 1], &m->free_list[i],
		(m->free_count - i) * sizeof(m->free_list[0]));
	m->free_list[i] = (struct pool_place){ offset, bytes };
	m->free_count++;
}

/* ---- Records and scopes ---- */

static uint32_t key_bucket(const struct rec_key *k)
{
	return (uint32_t)(sel_get_le64(k->digest.bytes) ^ k->consumed) % SCOPE_BUCKETS;
}

static bool key_equal(const struct rec_key *a, const struct rec_key *b)
{
	return a->consumed == b->consumed &&
	       memcmp(a->digest.bytes, b->digest.bytes, REC_DIGEST_BYTES) == 0;
}

/* A 64-bit id's bucket of ID_BUCKETS (Fibonacci hashing: sequential ids spread). */
static uint32_t id_bucket(uint64_t id)
{
	return (uint32_t)((id * 0x9e3779b97f4a7c15ull) >> (64 - ID_BUCKET_BITS));
}

static struct record *record_find(struct scope *s, const struct rec_key *k)
{
	sel_chain_for_each(r, s->buckets[key_bucket(k)], struct record, hash)
		if (key_equal(&r->key, k))
			return r;
	return NULL;
}

/* The record whose lru (or age) link is l, or NULL. */
static struct record *lru_record(struct sel_link *l)
{
	return sel_list_entry(l, struct record, lru);
}

static struct record *age_record(struct sel_link *l)
{
	return sel_list_entry(l, struct record, age);
}

/*
 * The age list: committed records in the order their age counts from (a
 * commit, or the start that found it on disk), so in created_ns order.
 */
static void age_push(struct pool_manager *m, struct record *r)
{
	SEL_ASSERT(!m->age.tail || age_record(m->age.tail)->created_ns <= r->created_ns);
	sel_list_push_tail(&m->age, &r->age);
}

static void record_touch(struct pool_manager *m, struct record *r, uint64_t now)
{
	r->used_ns = now;
	sel_list_remove(&m->lru, &r->lru);
	sel_list_push_tail(&m->lru, &r->lru);
}

/* Frees an uncommitted record's shares, or drops a committed leaf. */
static void disk_unlink(struct pool_manager *m, struct record *r);

/* Every rank's share of r together: what it takes in the arena or on disk. */
static uint64_t record_bytes(const struct record *r)
{
	uint64_t bytes = 0;

	for (uint32_t i = 0; i < r->world_size; i++)
		bytes += r->shares[i].bytes;
	return bytes;
}

static void record_free(struct pool_manager *m, struct record *r)
{
	if (r->on_disk) {
		disk_unlink(m, r);
		m->stats.disk_used_bytes -= record_bytes(r);
	}
	for (uint32_t i = 0; i < r->world_size && !r->on_disk; i++)
		if (r->shares[i].bytes)
			arena_free(m, r->shares[i].offset, r->shares[i].bytes);
	if (r->committed) {
		SEL_ASSERT(r->children == 0 && r->pins == 0);
		sel_chain_remove(&r->scope->buckets[key_bucket(&r->key)], &r->hash);
		sel_list_remove(&m->lru, &r->lru);
		sel_list_remove(&m->age, &r->age);
		if (r->parent)
			r->parent->children--;
		r->scope->records--;
		m->stats.records--;
	}
	free(r);
}

/* ---- The disk tier: a share is its record file, as it is ---- */

static void share_name(char *out, size_t size, uint32_t rank, const struct rec_key *key,
		       bool tmp)
{
	char name[REC_FILE_NAME_BYTES];

	rec_file_name(name, key);
	snprintf(out, size, "%" PRIu32 "/%s%s", rank, name, tmp ? REC_TMP_SUFFIX : "");
}

static void disk_unlink_key(int dir_fd, const struct rec_key *key, uint32_t world_size)
{
	char path[96];

	for (uint32_t i = 0; i < world_size; i++) {
		share_name(path, sizeof(path), i, key, false);
		unlinkat(dir_fd, path, 0);
	}
}

static int write_all_at(int fd, const uint8_t *p, uint64_t n)
{
	uint64_t done = 0;

	while (done < n) {
		ssize_t k = pwrite(fd, p + done, n - done > (1u << 30) ? 1u << 30 : n - done,
				   (off_t)done);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		done += (uint64_t)k;
	}
	return 0;
}

/*
 * Makes what was written to fd (a share file, or a directory after a
 * rename or mkdir in it) durable, as record/ does for a durable store:
 * fdatasync for a file, fsync for a directory. Failpoint pool.disk_sync.
 */
static int disk_sync(int fd, bool directory)
{
	int ret = SEL_FAILPOINT(SEL_FP_POOL_DISK_SYNC);

	if (ret)
		return ret;
	if ((directory ? fsync(fd) : fdatasync(fd)) != 0)
		return -errno;
	return 0;
}

/* Syncs the directory name under dir_fd (a rank's, after a rename in it). */
static int disk_sync_dir_at(int dir_fd, const char *name)
{
	int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int ret;

	if (fd < 0)
		return -errno;
	ret = disk_sync(fd, true);
	close(fd);
	return ret;
}

/*
 * Writes every share of key (world_size of them, share i's bytes at base +
 * shares[i].offset) to its file under dir_fd in R-WRITE-1 .. -4's shape: a
 * temporary file, written and synced, renamed into place, and the rank's
 * directory synced, so a committed share file survives a crash of the
 * manager's host whole or not at all. A failure leaves none of the files.
 * On the disk thread, or on the loop where none runs (open, close).
 */
static int disk_shares_write(int dir_fd, const struct rec_key *key, uint32_t world_size,
			     const uint8_t *base, const struct pool_place *shares)
{
	char tmp[96], name[96], rank_dir[16];
	int ret = SEL_FAILPOINT(SEL_FP_POOL_DISK_IO);

	for (uint32_t i = 0; i < world_size && !ret; i++) {
		int fd;

		share_name(tmp, sizeof(tmp), i, key, true);
		share_name(name, sizeof(name), i, key, false);
		snprintf(rank_dir, sizeof(rank_dir), "%" PRIu32, i);
		fd = openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0) {
			ret = -errno;
			break;
		}
		ret = write_all_at(fd, base + shares[i].offset, shares[i].bytes);
		if (!ret)
			ret = disk_sync(fd, false);
		close(fd);
		if (!ret && renameat(dir_fd, tmp, dir_fd, name))
			ret = -errno;
		if (!ret)
			ret = disk_sync_dir_at(dir_fd, rank_dir);
		if (ret)
			unlinkat(dir_fd, tmp, 0);
	}
	if (ret)
		disk_unlink_key(dir_fd, key, world_size);
	return ret;
}

/* What a share image must be: its record's key, pages and row. */
struct share_expect {
	struct rec_key key;
	uint32_t first_page_index, tail_page_count;
	bool row;
};

/*
 * Verifies one share image: header (key, parent, pages, rank), length,
 * every page and the row (R-READ-1 .. R-READ-3).
 */
static int image_verify(const struct share_expect *x, uint32_t rank, const uint8_t *image,
			uint64_t length, char *why, size_t why_size)
{
	struct rec_header h;
	uint64_t seed;
	bool row;
	int ret = rec_header_decode(image, &h, why, why_size);

	if (!ret)
		ret = rec_header_check_length(&h, length, &row, why, why_size);
	if (ret)
		return ret;
	if (!key_equal(&h.key, &x->key) || h.first_rank != rank || h.rank_count != 1 ||
	    h.first_page_index != x->first_page_index ||
	    h.tail_page_count != x->tail_page_count || row != x->row)
		return sel_fail(SEL_EMISMATCH, why, why_size, "a share file of another record");
	seed = rec_checksum_seed(&h.key);
	for (uint32_t j = 0; j < h.tail_page_count; j++)
		if (rec_page_checksum(image + h.page_offset + (uint64_t)j * h.page_stride,
				      h.page_stride, seed, h.first_page_index + j) !=
		    sel_get_le64(image + h.checksum_offset + 8ull * j))
			return sel_fail(SEL_ECHECKSUM, why, why_size, "page %" PRIu32 " fails its "
					"checksum", j);
	if (row && rec_row_checksum(image + h.row_offset, h.row_length, seed) != h.row_checksum)
		return sel_fail(SEL_ECHECKSUM, why, why_size, "the row fails its checksum");
	return 0;
}

/*
 * Reads every share file of x->key under dir_fd into base + shares[i].offset
 * and verifies it (image_verify). Returns 0, or the failure with why naming
 * the share. On the disk thread, or on the loop where none runs.
 */
static int disk_shares_read(int dir_fd, const struct share_expect *x, uint32_t world_size,
			    uint8_t *base, const struct pool_place *shares, char *why,
			    size_t why_size)
{
	char name[96], detail[160] = "";
	int ret = SEL_FAILPOINT(SEL_FP_POOL_DISK_IO);

	if (ret)
		snprintf(detail, sizeof(detail), "failpoint pool.disk_io");
	for (uint32_t i = 0; i < world_size && !ret; i++) {
		uint8_t *dst = base + shares[i].offset;
		uint64_t done = 0;
		int fd;

		share_name(name, sizeof(name), i, &x->key, false);
		fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0) {
			ret = -errno;
			snprintf(detail, sizeof(detail), "share %" PRIu32 ": %s", i,
				 ret == -ENOENT ? "missing" : strerror(-ret));
			break;
		}
		while (done < shares[i].bytes) {
			ssize_t k = pread(fd, dst + done, shares[i].bytes - done, (off_t)done);

			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0) {
				ret = k < 0 ? -errno : -EIO;
				break;
			}
			done += (uint64_t)k;
		}
		close(fd);
		if (ret) {
			snprintf(detail, sizeof(detail), "share %" PRIu32 ": %s", i, strerror(-ret));
		} else {
			char v[128] = "";

			ret = image_verify(x, i, dst, shares[i].bytes, v, sizeof(v));
			if (ret)
				snprintf(detail, sizeof(detail), "share %" PRIu32 ": %s", i, v);
		}
	}
	if (ret)
		snprintf(why, why_size, "%s", detail);
	return ret;
}

static struct share_expect expect_of(const struct record *r)
{
	return (struct share_expect){ .key = r->key, .first_page_index = r->first_page_index,
				      .tail_page_count = r->tail_page_count, .row = r->row };
}

/* ---- The disk thread ---- */

static void *disk_thread_main(void *arg)
{
	struct disk_thread *d = arg;
	uint64_t one = 1;

	pthread_mutex_lock(&d->lock);
	for (;;) {
		struct disk_job *j;

		while (!d->todo_head && !d->stop)
			pthread_cond_wait(&d->wake, &d->lock);
		j = d->todo_head;
		if (!j)
			break; /* stopped, and every job ran */
		d->todo_head = j->next;
		if (!d->todo_head)
			d->todo_tail = NULL;
		pthread_mutex_unlock(&d->lock);
		if (j->op == DISK_SPILL) {
			j->result = disk_shares_write(j->dir_fd, &j->key, j->world_size,
						      j->base, j->shares);
			if (j->result)
				snprintf(j->why, sizeof(j->why), "%s", strerror(-j->result));
		} else if (j->op == DISK_LOAD) {
			struct share_expect x = { .key = j->key,
						  .first_page_index = j->first_page_index,
						  .tail_page_count = j->tail_page_count,
						  .row = j->row };

			j->result = disk_shares_read(j->dir_fd, &x, j->world_size, j->base,
						     j->shares, j->why, sizeof(j->why));
		} else {
			disk_unlink_key(j->dir_fd, &j->key, j->world_size);
		}
		pthread_mutex_lock(&d->lock);
		j->next = NULL;
		if (d->done_tail)
			d->done_tail->next = j;
		else
			d->done_head = j;
		d->done_tail = j;
		if (write(d->done_fd, &one, sizeof(one)) < 0) {
			/* the counter is saturated: the loop is woken already */
		}
	}
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

/* Starts the disk thread; false (the loop does the I/O itself) when it cannot. */
static bool disk_thread_start(struct pool_manager *m)
{
	struct disk_thread *d = &m->disk;

	struct epoll_event done = { .events = EPOLLIN, .data.ptr = &d->done_fd };

	d->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->done_fd < 0)
		return false;
	if (epoll_ctl(m->epoll_fd, EPOLL_CTL_ADD, d->done_fd, &done)) {
		close(d->done_fd);
		d->done_fd = -1;
		return false;
	}
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->wake, NULL);
	if (pthread_create(&d->thread, NULL, disk_thread_main, d) != 0) {
		pthread_cond_destroy(&d->wake);
		pthread_mutex_destroy(&d->lock);
		epoll_ctl(m->epoll_fd, EPOLL_CTL_DEL, d->done_fd, NULL);
		close(d->done_fd);
		d->done_fd = -1;
		return false;
	}
	d->running = true;
	return true;
}

/* Room in the queue for one more job holding bytes of copy. */
static bool disk_room(struct pool_manager *m, uint64_t bytes)
{
	struct disk_thread *d = &m->disk;
	bool room;

	pthread_mutex_lock(&d->lock);
	room = d->jobs < POOL_DISK_JOBS_MAX && d->bytes + bytes <= POOL_DISK_QUEUE_BYTES_MAX;
	pthread_mutex_unlock(&d->lock);
	return room;
}

/* A job for r's key and shares (their bytes; the places are the caller's to set). */
static struct disk_job *disk_job_new(struct pool_manager *m, enum disk_op op,
				     const struct record *r)
{
	struct disk_job *j = calloc(1, sizeof(*j) + r->world_size * sizeof(j->shares[0]));

	if (!j)
		return NULL;
	j->op = op;
	j->id = ++m->disk.next_id;
	j->scope = r->scope;
	j->dir_fd = r->scope->dir_fd;
	j->key = r->key;
	j->first_page_index = r->first_page_index;
	j->tail_page_count = r->tail_page_count;
	j->row = r->row;
	j->world_size = r->world_size;
	for (uint32_t i = 0; i < r->world_size; i++)
		j->shares[i].bytes = r->shares[i].bytes;
	return j;
}

static void disk_submit(struct pool_manager *m, struct disk_job *j)
{
	struct disk_thread *d = &m->disk;

	pthread_mutex_lock(&d->lock);
	if (d->todo_tail)
		d->todo_tail->next = j;
	else
		d->todo_head = j;
	d->todo_tail = j;
	d->jobs++;
	d->bytes += j->copy_bytes;
	m->stats.disk_queued = d->jobs;
	pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->lock);
}

/*
 * Deletes r's share files: queued behind the disk thread's jobs where it
 * runs (in order, so after a spill of the same key that is still
 * writing), here where it does not or its queue is full. A record whose
 * spill is still queued is always queued behind it, past the bound if
 * need be (at most one such deletion a spill, and spills are bounded):
 * deleted here, its files would be written after.
 */
static void disk_unlink(struct pool_manager *m, struct record *r)
{
	struct disk_job *j = NULL;

	if (m->disk.running && (r->disk_job || disk_room(m, 0)))
		j = disk_job_new(m, DISK_UNLINK, r);
	if (!j) {
		disk_unlink_key(r->scope->dir_fd, &r->key, r->world_size);
		return;
	}
	disk_submit(m, j);
}

static bool evict_one(struct pool_manager *m);

/* Reads r's files back into the arena, verified, on the loop; r must be pinned. */
static int disk_load(struct pool_manager *m, struct record *r)
{
	struct share_expect x = expect_of(r);
	char why[256] = "";
	uint32_t placed = 0;
	int ret = 0;

	SEL_ASSERT(r->on_disk && r->pins);
	for (; placed < r->world_size; placed++) {
		uint64_t at;

		while (arena_alloc(m, r->shares[placed].bytes, &at))
			if (!evict_one(m)) {
				ret = -ENOSPC;
				goto err_free;
			}
		r->shares[placed].offset = at;
	}
	r->stamp = m->next_stamp++;
	ret = disk_shares_read(r->scope->dir_fd, &x, r->world_size, m->arena, r->shares, why,
			       sizeof(why));
	if (ret) {
		sel_warn("pool: record %" PRIu64 " on disk: %s", r->key.consumed, why);
		goto err_free;
	}
	disk_unlink(m, r);
	r->on_disk = false;
	m->stats.disk_used_bytes -= record_bytes(r);
	m->stats.loaded++;
	return 0;
err_free:
	for (uint32_t i = 0; i < placed; i++)
		arena_free(m, r->shares[i].offset, r->shares[i].bytes);
	return ret;
}

/*
 * Queues the load of r (on disk, pinned by cl) for cl, whose CLAIMED waits
 * for it: the arena's room is taken now (evicting as a put does) and the
 * job pins r until it is done; a load already queued by another claim is
 * waited for instead. Returns 0, -ENOSPC (no room), or SEL_EQUEUEFULL (the
 * disk thread's queue is full).
 */
static int disk_load_begin(struct pool_manager *m, struct claim *cl, struct record *r)
{
	struct disk_job *j;
	uint32_t placed = 0;

	SEL_ASSERT(r->on_disk && r->pins);
	if (r->loading) {
		cl->loads_waiting++;
		return 0;
	}
	if (!disk_room(m, 0))
		return SEL_EQUEUEFULL;
	m->disk.refused = false;
	j = disk_job_new(m, DISK_LOAD, r);
	if (!j)
		return -ENOMEM;
	for (; placed < r->world_size; placed++) {
		uint64_t at;

		while (arena_alloc(m, r->shares[placed].bytes, &at))
			if (!evict_one(m)) {
				for (uint32_t i = 0; i < placed; i++)
					arena_free(m, r->shares[i].offset, r->shares[i].bytes);
				free(j);
				return m->disk.refused ? SEL_EQUEUEFULL : -ENOSPC;
			}
		r->shares[placed].offset = at;
		j->shares[placed].offset = at;
	}
	j->base = m->arena;
	r->stamp = m->next_stamp++;
	r->loading = true;
	r->pins++;
	cl->loads_waiting++;
	disk_submit(m, j);
	return 0;
}

/*
 * Moves r's shares to the disk thread: copied out of the arena (whose room
 * is free at once) and written there. False when the queue has no room
 * for the copy (counted): the caller's put or claim is refused rather than
 * wait for the disk.
 */
static bool disk_spill_begin(struct pool_manager *m, struct record *r)
{
	uint64_t bytes = record_bytes(r), at = 0;
	struct disk_job *j;

	if (!disk_room(m, bytes)) {
		m->stats.disk_queue_full++;
		m->disk.refused = true;
		return false;
	}
	j = disk_job_new(m, DISK_SPILL, r);
	if (j)
		j->base = malloc(bytes ? bytes : 1);
	if (!j || !j->base) {
		free(j);
		return false;
	}
	j->copy_bytes = bytes;
	for (uint32_t i = 0; i < r->world_size; i++) {
		memcpy(j->base + at, m->arena + r->shares[i].offset, r->shares[i].bytes);
		j->shares[i].offset = at;
		at += r->shares[i].bytes;
		arena_free(m, r->shares[i].offset, r->shares[i].bytes);
	}
	r->on_disk = true;
	r->disk_job = j->id;
	m->stats.disk_used_bytes += bytes;
	m->stats.spilled++;
	disk_submit(m, j);
	return true;
}

/*
 * Makes room in the arena: with a disk tier, moves the least recently used
 * unpinned record there; without one (or when its write fails), drops the
 * least recently used unpinned leaf. False when nothing can go.
 */
/*
 * Makes room for bytes more on the disk tier under its limit: deletes the
 * least recently used records there that no claim pins and no record
 * extends. False when that cannot make enough.
 */
static bool disk_make_room(struct pool_manager *m, uint64_t bytes)
{
	uint64_t limit = m->config.disk_limit_bytes;

	if (!limit)
		return true;
	if (bytes > limit)
		return false;
	while (m->stats.disk_used_bytes + bytes > limit) {
		struct record *r = lru_record(m->lru.head);

		while (r && (!r->on_disk || r->pins || r->children))
			r = lru_record(r->lru.next);
		if (!r)
			return false;
		record_free(m, r);
		m->stats.disk_evicted++;
	}
	return true;
}

static bool evict_one(struct pool_manager *m)
{
	for (struct record *r = lru_record(m->lru.head); m->dir_fd >= 0 && r;
	     r = lru_record(r->lru.next)) {
		int ret;

		if (r->pins || r->on_disk || r->scope->dir_fd < 0)
			continue;
		/* past the disk limit, and nothing on disk can go for it: dropped below */
		if (!disk_make_room(m, record_bytes(r)))
			break;
		if (m->disk.running)
			return disk_spill_begin(m, r);
		ret = disk_shares_write(r->scope->dir_fd, &r->key, r->world_size, m->arena,
					r->shares);
		if (ret) {
			sel_warn("pool: spilling record %" PRIu64 " to disk: %s", r->key.consumed,
				 strerror(-ret));
			break;
		}
		for (uint32_t i = 0; i < r->world_size; i++)
			arena_free(m, r->shares[i].offset, r->shares[i].bytes);
		r->on_disk = true;
		m->stats.disk_used_bytes += record_bytes(r);
		m->stats.spilled++;
		return true;
	}
	for (struct record *r = lru_record(m->lru.head); r; r = lru_record(r->lru.next)) {
		if (r->children || r->pins || r->on_disk)
			continue;
		record_free(m, r);
		m->stats.evicted++;
		return true;
	}
	return false;
}

/* A deadline set at at: the loop's timers() walk comes no later (timers). */
static void timer_at(struct pool_manager *m, uint64_t at)
{
	if (at < m->timers_due_ns)
		m->timers_due_ns = at;
}

/* ---- Output ---- */

static int out_reserve(struct conn *c, size_t more)
{
	size_t need = c->out_used + more;

	if (need <= c->out_cap)
		return 0;
	if (c->out_sent) {
		memmove(c->out, c->out + c->out_sent, c->out_used - c->out_sent);
		c->out_used -= c->out_sent;
		if (c->out_data)
			c->out_split -= c->out_sent;
		c->out_sent = 0;
		need = c->out_used + more;
		if (need <= c->out_cap)
			return 0;
	}
	{
		size_t cap = c->out_cap ? c->out_cap : 65536;
		uint8_t *p;

		while (cap < need)
			cap *= 2;
		p = realloc(c->out, cap);
		if (!p)
			return -ENOMEM;
		c->out = p;
		c->out_cap = cap;
	}
	return 0;
}

/* Anything left to write on c. */
static bool out_pending(const struct conn *c)
{
	return c->out_sent < c->out_used || c->out_data;
}

/* c's queued answers are past the bound: read nothing more from it until they drain. */
static bool out_backlogged(const struct conn *c)
{
	return c->out_used - c->out_sent > OUT_BACKLOG_BYTES_MAX;
}

/* Forgets what c has left to write (the connection ends) and its pin. */
static void out_drop(struct conn *c)
{
	c->out_used = c->out_sent = 0;
	if (c->out_pin)
		c->out_pin->pins--;
	c->out_pin = NULL;
	c->out_data = NULL;
}

/*
 * Queues one claim window whose data stays in r's arena bytes: its header
 * and head are copied, the data is written from where it lies (conn_write),
 * and r stays pinned until it is. Only on an empty output (streams_fill).
 */
static void send_window(struct conn *c, struct record *r, const uint8_t *head,
			uint32_t head_length, const uint8_t *data, uint32_t data_length)
{
	uint8_t header[CLUSTER_FRAME_HEADER_BYTES], tag[POOL_TAG_BYTES];

	SEL_ASSERT(c->keyed && !out_pending(c));
	if (c->closing)
		return;
	if (out_reserve(c, sizeof(header) + head_length + POOL_TAG_BYTES)) {
		c->closing = true;
		out_drop(c);
		return;
	}
	pool_frame_build(c->kc, POOL_TO_RANK, c->tx_seq++, POOL_MSG_CLAIM_WINDOW, head,
			 head_length, data, data_length, header, tag);
	c->out_used = c->out_sent = 0;
	memcpy(c->out, header, sizeof(header));
	memcpy(c->out + sizeof(header), head, head_length);
	c->out_split = sizeof(header) + head_length;
	memcpy(c->out + c->out_split, tag, POOL_TAG_BYTES);
	c->out_used = c->out_split + POOL_TAG_BYTES;
	c->out_data = data;
	c->out_data_length = data_length;
	c->out_data_sent = 0;
	c->out_pin = r;
	r->pins++;
}

/* Queues one frame; tagged once the connection is keyed (R-POOL-12). */
static void send_frame(struct conn *c, uint16_t type, const uint8_t *body, uint32_t body_length,
		       const uint8_t *data, uint32_t data_length)
{
	uint8_t header[CLUSTER_FRAME_HEADER_BYTES], tag[POOL_TAG_BYTES];
	size_t total = sizeof(header) + body_length + data_length + (c->keyed ? POOL_TAG_BYTES : 0);
	const uint8_t *key = c->keyed ? c->kc : NULL;

	if (c->closing)
		return;
	if (out_reserve(c, total)) {
		c->closing = true; /* no memory for a frame: this connection ends */
		out_drop(c);
		return;
	}
	pool_frame_build(key, POOL_TO_RANK, c->tx_seq++, type, body, body_length, data,
			 data_length, header, tag);
	memcpy(c->out + c->out_used, header, sizeof(header));
	c->out_used += sizeof(header);
	if (body_length)
		memcpy(c->out + c->out_used, body, body_length);
	c->out_used += body_length;
	if (data_length)
		memcpy(c->out + c->out_used, data, data_length);
	c->out_used += data_length;
	if (key) {
		memcpy(c->out + c->out_used, tag, POOL_TAG_BYTES);
		c->out_used += POOL_TAG_BYTES;
	}
}

/* Sends REFUSE and closes once it is written (R-POOL-9). */
static void refuse(struct pool_manager *m, struct conn *c, uint32_t reason, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void refuse(struct pool_manager *m, struct conn *c, uint32_t reason, const char *fmt, ...)
{
	struct pool_refuse r = { .reason = reason };
	uint8_t buf[POOL_REFUSE_FIXED_BYTES + CLUSTER_REFUSE_TEXT_BYTES_MAX];
	va_list ap;
	int n;

	va_start(ap, fmt);
	vsnprintf(r.text, sizeof(r.text), fmt, ap);
	va_end(ap);
	cluster_text_make_printable(r.text);
	{
		/* a storm of strangers costs a few lines a second (the counters keep all) */
		uint64_t second = sel_monotonic_ns() / 1000000000ull;

		if (second != m->log_second) {
			m->log_second = second;
			m->log_count = 0;
		}
		if (m->log_count++ < CLUSTER_JOIN_LOG_PER_SECOND)
			sel_warn("pool: refusing a connection (%s): %s",
				 pool_refuse_reason_name(reason), r.text);
	}
	n = pool_refuse_encode(&r, buf, sizeof(buf));
	SEL_ASSERT(n > 0);
	send_frame(c, POOL_MSG_REFUSE, buf, (uint32_t)n, NULL, 0);
	c->closing = true;
	m->stats.refused++;
	if (reason == POOL_REFUSE_AUTH)
		m->stats.auth_failures++;
}

/* ---- Puts ---- */

static void put_link(struct pool_manager *m, struct put *p)
{
	sel_list_push_head(&m->puts, &p->link);
	sel_chain_push(&m->put_ids[id_bucket(p->id)], &p->id_hash);
	sel_chain_push(&m->put_keys[key_bucket(&p->rec->key)], &p->key_hash);
	p->inst->puts++;
}

static void put_unlink(struct pool_manager *m, struct put *p)
{
	sel_list_remove(&m->puts, &p->link);
	/* buckets hold about one put each */
	sel_chain_remove(&m->put_ids[id_bucket(p->id)], &p->id_hash);
	sel_chain_remove(&m->put_keys[key_bucket(&p->rec->key)], &p->key_hash);
	p->inst->puts--;
}

static void send_put_end(struct conn *c, uint64_t put_id, int result, bool commit)
{
	struct pool_put_end e = { .put_id = put_id, .result = result, .commit = commit };
	uint8_t buf[POOL_PUT_END_BYTES];
	int n = pool_put_end_encode(&e, buf, sizeof(buf));

	SEL_ASSERT(n > 0);
	send_frame(c, POOL_MSG_PUT_END, buf, (uint32_t)n, NULL, 0);
}

/* Ends a put that will not commit: nothing of it is kept (R-POOL-43). */
static void put_fail(struct pool_manager *m, struct put *p, int result, const char *why)
{
	struct instance *in = p->inst;

	sel_info("pool: put %" PRIu64 " of key %" PRIu64 " failed: %s", p->id,
		 p->rec->key.consumed, why);
	for (uint32_t r = 0; r < p->rec->world_size; r++) {
		struct conn *c = in->ranks[r];

		if (c && c->rx_put == p) {
			/* the rest of its window is dropped, not written to freed bytes */
			c->rx_put = NULL;
			c->rx.data = NULL;
		}
		if (c && r != 0 && p->rx[r].received && !p->rx[r].verified)
			send_put_end(c, p->id, result, false);
	}
	if (in->ranks[0])
		send_put_end(in->ranks[0], p->id, result, false);
	put_unlink(m, p);
	if (p->rec->parent)
		p->rec->parent->pins--; /* pinned at PUT_BEGIN */
	record_free(m, p->rec);
	free(p->rx);
	free(p);
	m->stats.puts_failed++;
}

static void put_commit(struct pool_manager *m, struct put *p, uint64_t now)
{
	struct record *r = p->rec;
	struct scope *s = r->scope;
	uint32_t b = key_bucket(&r->key);

	r->committed = true;
	r->created_ns = r->used_ns = now;
	sel_chain_push(&s->buckets[b], &r->hash);
	if (r->parent)
		r->parent->children++;
	sel_list_push_tail(&m->lru, &r->lru);
	age_push(m, r);
	s->records++;
	m->stats.records++;
	m->stats.puts_committed++;
	if (p->inst->ranks[0])
		send_put_end(p->inst->ranks[0], p->id, 0, true);
	put_unlink(m, p);
	if (r->parent)
		r->parent->pins--;
	free(p->rx);
	free(p);
}

static struct put *put_find(struct pool_manager *m, uint64_t id)
{
	sel_chain_for_each(p, m->put_ids[id_bucket(id)], struct put, id_hash)
		if (p->id == id)
			return p;
	return NULL;
}

/* The open put of key in s, by any instance. */
static struct put *put_of_key(struct pool_manager *m, const struct scope *s,
			      const struct rec_key *k)
{
	sel_chain_for_each(p, m->put_keys[key_bucket(k)], struct put, key_hash)
		if (p->rec->scope == s && key_equal(&p->rec->key, k))
			return p;
	return NULL;
}

/* The image length of rank r's share of a record (R-REC-8, R-REC-10). */
static uint64_t share_length(const struct pool_attach *parts, uint32_t r, uint32_t pages,
			     bool row)
{
	uint64_t n = REC_HEADER_BYTES + sel_align_up(8ull * pages, 4096) +
		     (uint64_t)pages * parts->page_bytes[r];

	return row ? n + parts->row_bytes[r] : n;
}

/*
 * How long bytes take at POOL_TRANSFER_BYTES_PER_S, in ns (R-POOL-31,
 * R-POOL-40), without the overflow of bytes * 10^9 past 18.4 GB.
 */
static uint64_t transfer_ns(uint64_t bytes)
{
	return bytes / POOL_TRANSFER_BYTES_PER_S * 1000000000ull +
	       bytes % POOL_TRANSFER_BYTES_PER_S * 1000000000ull / POOL_TRANSFER_BYTES_PER_S;
}

static void on_put_begin(struct pool_manager *m, struct conn *c, const uint8_t *body,
			 uint32_t length, uint64_t now)
{
	struct instance *in = c->inst;
	struct scope *s = in->scope;
	struct pool_put_begin b;
	struct pool_put_ready ready = { 0 };
	struct record *parent = NULL, *r = NULL;
	struct put *p = NULL;
	uint8_t buf[POOL_PUT_READY_BYTES];
	char why[256];
	int n;

	if (pool_put_begin_decode(body, length, &b, why, sizeof(why))) {
		refuse(m, c, POOL_REFUSE_PROTOCOL, "%s", why);
		return;
	}
	ready.request_id = b.request_id;
	if (m->draining) {
		ready.result = -ESHUTDOWN;
		goto answer;
	}
	if (b.world_size != s->parts.world_size) {
		ready.result = -EINVAL;
		goto answer;
	}
	for (uint32_t i = 0; i < b.world_size; i++)
		if (pool_put_begin_share_bytes(&b, i) !=
		    share_length(&s->parts, i, b.tail_page_count, b.row)) {
			ready.result = -EINVAL;
			goto answer;
		}
	if (record_find(s, &b.key)) {
		ready.result = -EEXIST;
		goto answer;
	}
	if (put_of_key(m, s, &b.key)) {
		ready.result = -EEXIST; /* another instance is putting it now */
		goto answer;
	}
	if (b.parent.consumed) {
		parent = record_find(s, &b.parent);
		if (!parent) {
			ready.result = -ENOENT;
			goto answer;
		}
	}
	if (in->puts >= POOL_PUTS_MAX) {
		ready.result = SEL_EQUEUEFULL;
		goto answer;
	}
	{
		/* a record the whole arena cannot hold evicts nothing */
		uint64_t total = 0;

		for (uint32_t i = 0; i < b.world_size; i++)
			total += sel_align_up(pool_put_begin_share_bytes(&b, i), 4096);
		if (total > m->arena_bytes - POOL_ARENA_HEADER_BYTES) {
			ready.result = -ENOSPC;
			goto answer;
		}
	}
	r = calloc(1, sizeof(*r) + b.world_size * sizeof(r->shares[0]));
	p = calloc(1, sizeof(*p));
	if (p)
		p->rx = calloc(b.world_size, sizeof(p->rx[0]));
	if (!r || !p || !p->rx) {
		ready.result = -ENOMEM;
		goto answer;
	}
	r->scope = s;
	r->parent = parent;
	r->key = b.key;
	r->first_page_index = b.first_page_index;
	r->tail_page_count = b.tail_page_count;
	r->row = b.row;
	r->world_size = b.world_size;
	/* the parent must stay while the put is open: pin it */
	if (parent)
		parent->pins++;
	m->disk.refused = false;
	for (uint32_t i = 0; i < b.world_size; i++) {
		uint64_t bytes = pool_put_begin_share_bytes(&b, i);

		while (arena_alloc(m, bytes, &r->shares[i].offset))
			if (!evict_one(m)) {
				/* a spill the disk thread had no room for: backpressure */
				ready.result = m->disk.refused ? SEL_EQUEUEFULL : -ENOSPC;
				if (parent)
					parent->pins--;
				goto answer;
			}
		r->shares[i].bytes = bytes;
	}
	r->stamp = m->next_stamp++;
	p->id = m->next_put_id++;
	p->request_id = b.request_id;
	p->inst = in;
	p->rec = r;
	{
		uint64_t bytes = 0;

		for (uint32_t i = 0; i < b.world_size; i++)
			bytes += r->shares[i].bytes;
		p->deadline_ns = now + (uint64_t)m->config.claim_setup_ms * 1000000ull +
				 transfer_ns(bytes);
		timer_at(m, p->deadline_ns + 1);
	}
	put_link(m, p);
	ready.put_id = p->id;
	r = NULL;
	p = NULL;
answer:
	if (r)
		record_free(m, r);
	if (p) {
		free(p->rx);
		free(p);
	}
	n = pool_put_ready_encode(&ready, buf, sizeof(buf));
	SEL_ASSERT(n > 0);
	send_frame(c, POOL_MSG_PUT_READY, buf, (uint32_t)n, NULL, 0);
}

/* Checks a share's header against its put and scope (R-POOL-41, R-READ-1). */
static int share_header_check(struct put *p, uint32_t rank, const uint8_t *image, char *why,
			      size_t why_size)
{
	struct share_rx *x = &p->rx[rank];
	const struct pool_attach *parts = &p->rec->scope->parts;
	struct rec_digest fp;
	bool row;
	int ret = rec_header_decode(image, &x->h, why, why_size);

	if (ret)
		return ret;
	rec_shard_fingerprint(&fp, &parts->layout_digest, rank, parts->world_size);
	if (memcmp(x->h.namespace_id.bytes, parts->namespace_id.bytes, REC_IDENTITY_BYTES) ||
	    memcmp(x->h.fingerprint.bytes, fp.bytes, REC_DIGEST_BYTES) ||
	    !key_equal(&x->h.key, &p->rec->key) ||
	    (p->rec->parent ? !key_equal(&x->h.parent, &p->rec->parent->key)
			    : x->h.parent.consumed != 0) ||
	    x->h.first_page_index != p->rec->first_page_index ||
	    x->h.tail_page_count != p->rec->tail_page_count ||
	    x->h.page_tokens != parts->page_tokens || x->h.world_size != parts->world_size ||
	    x->h.rank_count != 1 || x->h.first_rank != rank ||
	    x->h.plane_count != parts->plane_count ||
	    x->h.page_stride != parts->page_bytes[rank] ||
	    x->h.row_length != parts->row_bytes[rank])
		return sel_fail(SEL_EMISMATCH, why, why_size,
				"rank %" PRIu32 "'s share header does not match its put or "
				"scope (R-POOL-41)", rank);
	ret = rec_header_check_length(&x->h, p->rec->shares[rank].bytes, &row, why, why_size);
	if (ret)
		return ret;
	if (row != p->rec->row)
		return sel_fail(SEL_EMISMATCH, why, why_size, "share row presence differs");
	x->header_ok = true;
	return 0;
}

/* Verifies what newly arrived of a share: header, whole pages, the row. */
static int share_verify(struct pool_manager *m, struct put *p, uint32_t rank, char *why,
			size_t why_size)
{
	struct share_rx *x = &p->rx[rank];
	const uint8_t *image = m->arena + p->rec->shares[rank].offset;
	uint64_t seed;

	if (!x->header_ok) {
		if (x->received < REC_HEADER_BYTES)
			return 0;
		int ret = share_header_check(p, rank, image, why, why_size);

		if (ret)
			return ret;
	}
	seed = rec_checksum_seed(&x->h.key);
	while (x->pages_verified < x->h.tail_page_count &&
	       x->received >= x->h.page_offset + (uint64_t)(x->pages_verified + 1) *
							 x->h.page_stride) {
		uint32_t j = x->pages_verified;
		uint64_t want = sel_get_le64(image + x->h.checksum_offset + 8ull * j);

		if (rec_page_checksum(image + x->h.page_offset + (uint64_t)j * x->h.page_stride,
				      x->h.page_stride, seed, x->h.first_page_index + j) != want)
			return sel_fail(SEL_ECHECKSUM, why, why_size,
					"rank %" PRIu32 "'s page %" PRIu32 " fails its checksum "
					"(R-POOL-41)", rank, j);
		x->pages_verified++;
	}
	if (x->received == p->rec->shares[rank].bytes) {
		if (p->rec->row && rec_row_checksum(image + x->h.row_offset, x->h.row_length, seed) !=
					   x->h.row_checksum)
			return sel_fail(SEL_ECHECKSUM, why, why_size,
					"rank %" PRIu32 "'s row fails its checksum (R-POOL-41)",
					rank);
		x->verified = true;
	}
	return 0;
}

static void on_put_window_head(struct pool_manager *m, struct conn *c)
{
	struct pool_put_window w;
	struct put *p;
	char why[256];

	c->rx_put = NULL;
	if (pool_put_window_decode(c->rx.body, c->rx.body_length, c->rx.data_length, &w, why,
				   sizeof(why))) {
		refuse(m, c, POOL_REFUSE_PROTOCOL, "%s", why);
		return;
	}
	if (w.put_id >= m->next_put_id) {
		refuse(m, c, POOL_REFUSE_PROTOCOL, "PUT_WINDOW of put %" PRIu64 " never opened "
		       "(R-POOL-41)", w.put_id);
		return;
	}
	p = put_find(m, w.put_id);
	if (!p || p->inst != c->inst)
		return; /* an ended put (or another instance's): drop the data */
	if (w.offset != p->rx[c->rank].received ||
	    w.offset + c->rx.data_length > p->rec->shares[c->rank].bytes) {
		put_fail(m, p, -EINVAL, "a window out of order or past the share");
		return;
	}
	c->rx.data = m->arena + p->rec->shares[c->rank].offset + w.offset;
	c->rx_put = p;
}

static void on_put_window(struct pool_manager *m, struct conn *c)
{
	struct put *p = c->rx_put;
	char why[256];
	int ret;

	c->rx_put = NULL;
	if (!p)
		return;
	p->rx[c->rank].received += c->rx.data_length;
	ret = share_verify(m, p, c->rank, why, sizeof(why));
	if (ret) {
		put_fail(m, p, ret, why);
		return;
	}
	if (p->rx[c->rank].verified)
		send_put_end(c, p->id, 0, false);
}

static void on_put_end(struct pool_manager *m, struct conn *c, const uint8_t *body,
		       uint32_t length, uint64_t now)
{
	struct pool_put_end e;
	struct put *p;
	char why[256];

	if (pool_put_end_decode(body, length, &e, why, sizeof(why))) {
		refuse(m, c, POOL_REFUSE_PROTOCOL, "%s", why);
		return;
	}
	p = put_find(m, e.put_id);
	if (!p || p->inst != c->inst)
		return; /* already ended: its outcome was sent */
	if (!e.commit) {
		put_fail(m, p, -ECANCELED, "abandoned by the instance");
		return;
	}
	for (uint32_t r = 0; r < p->rec->world_size; r++)
		if (!p->rx[r].verified) {
			put_fail(m, p, -EAGAIN, "commit before every share verified");
			return;
		}
	put_commit(m, p, now);
}

/* ---- Lookups and claims ---- */

/* Drops r and every record that extends it, where none is pinned. */
static void drop_tree(struct pool_manager *m, struct record *r)
{
	struct scope *s = r->scope;
	bool progress = true;

	/* one child at a time: dropping it may free others in the same bucket */
	while (r->children && progress) {
		struct record *child = NULL;
		uint32_t before = r->children;

		for (uint32_t b = 0; b < SCOPE_BUCKETS && !child; b++)
			sel_chain_for_each(q, s->buckets[b], struct record, hash)
				if (q->parent == r && !q->pins) {
					child = q;
					break;
				}
		if (child)
			drop_tree(m, child);
		progress = child && r->children < before;
	}
	if (!r->children && !r->pins)
		record_free(m, r);
}

/* The chain ending at r, root first, into out; its length. */
static uint32_t chain_of(struct record *r, struct record **out)
{
	uint32_t n = 0;

	for (struct record *q = r; q && n < POOL_CHAIN_RECORDS_MAX; q = q->parent)
		out[n++] = q;
	for (uint32_t i = 0; i < n / 2; i++) {
		struct record *t = out[i];

		out[i] = out[n - 1 - i];
		out[n - 1 - i] = t;
	}
	return n;
}

/*
 * A chain's entries: with rank's place and each image's stamp for an
 * ANSWER (R-POOL-22: 0 and no place for a record on the disk tier), with
 * the stamp alone for a CLAIMED (R-POOL-36: every record is in the arena).
 */
static void chain_entries(struct record **chain, uint32_t n, struct pool_chain_entry *out,
			  bool answer, uint32_t rank)
{
	for (uint32_t i = 0; i < n; i++) {
		const struct record *r = chain[i];

		SEL_ASSERT(answer || !r->on_disk);
		out[i] = (struct pool_chain_entry){ r->key, r->first_page_index,
						    r->tail_page_count,
						    i + 1 == n ? true : r->row,
						    .stamp = r->on_disk ? 0 : r->stamp };
		/* the file's offset, as CLAIM_PLACES gives it: past the arena header */
		if (answer && !r->on_disk)
			out[i].place = (struct pool_place){
				POOL_ARENA_HEADER_BYTES + r->shares[rank].offset,
				r->shares[rank].bytes };
	}
}


/* ---- Holders and exports (R-POOL-70 .. R-POOL-76) ---- */

static struct hold *hold_find(struct scope *s, const struct rec_key *k,
			      const struct instance *in)
{
	if (!s->hold_buckets)
		return NULL;
	sel_chain_for_each(h, s->hold_buckets[key_bucket(k)], struct hold, hash)
		if (key_equal(&h->key, k) && (!in || h->inst == in))
			return h;
	return NULL;
}

/* R-POOL-72: an add past the scope's bound is dropped, counted. */
static void hold_add(struct pool_manager *m, struct instance *in, const struct rec_key *k)
{
	struct scope *s = in->scope;
	struct hold *h;
	uint32_t b = key_bucket(k);

	if (hold_find(s, k, in))
		return;
	if (s->holds >= POOL_HOLDS_SCOPE_MAX) {
		m->stats.holds_dropped++;
		return;
	}
	if (!s->hold_buckets)
		s->hold_buckets = calloc(SCOPE_BUCKETS, sizeof(s->hold_buckets[0]));
	h = s->hold_buckets ? calloc(1, sizeof(*h)) : NULL;
	if (!h) {
		m->stats.holds_dropped++;
		return;
	}
	h->inst = in;
	h->key = *k;
	sel_chain_push(&s->hold_buckets[b], &h->hash);
	sel_list_push_head(&in->holds, &h->inst_link);
	s->holds++;
	m->stats.holds++;
}

static void hold_remove(struct pool_manager *m, struct hold *h)
{
	struct scope *s = h->inst->scope;

	sel_chain_remove(&s->hold_buckets[key_bucket(&h->key)], &h->hash);
	sel_list_remove(&h->inst->holds, &h->inst_link);
	s->holds--;
	m->stats.holds--;
	free(h);
}

static void holds_forget(struct pool_manager *m, struct instance *in)
{
	while (!sel_list_empty(&in->holds))
		hold_remove(m, sel_list_entry(in->holds.head, struct hold, inst_link));
}

static void on_holds(struct pool_manager *m, struct conn *c, const uint8_t *body,
		     uint32_t length)
{
	struct pool_holds_view v;
	char why[256];

	if (pool_holds_decode(body, length, &v, why, sizeof(why))) {
		refuse(m, c, POOL_REFUSE_PROTOCOL, "%s", why);
		return;
	}
	if (v.op == POOL_HOLDS_RESET) {
		holds_forget(m, c->inst);
		return;
	}
	for (uint32_t i = 0; i < v.key_count; i++) {
		struct rec_key k;
		struct hold *h;

		pool_holds_view_key(&v, i, &k);
		if (v.op == POOL_HOLDS_ADD)
			hold_add(m, c->inst, &k);
		else if ((h = hold_find(c->inst->scope, &k, c->inst)))
			hold_remove(m, h);
	}
}

static void export_link(struct pool_manager *m, struct export *x)
{
	sel_list_push_head(&m->exports, &x->link);
	sel_chain_push(&m->export_ids[id_bucket(x->id)], &x->id_hash);
	sel_chain_push(&m->export_keys[key_bucket(&x->key)], &x->key_hash);
	x->holder->exports++;
}

static void export_end(struct pool_manager *m, struct export *x)
{
	sel_list_remove(&m->exports, &x->link);
	sel_chain_remove(&m->export_ids[id_bucket(x->id)], &x->id_hash);
	sel_chain_remove(&m->export_keys[key_bucket(&x->key)], &x->key_hash);
	x->holder->exports--;
	free(x);
}

static struct export *export_of_key(struct pool_manager *m, const struct scope *s,
				    const struct rec_key *k)
{
	sel_chain_for_each(x, m->export_keys[key_bucket(k)], struct export, key_hash)
		if (x->scope == s && key_equal(&x->key, k))
			return x;
	return NULL;
}

/* The live export id asked of in, or NULL. */
static struct export *export_find(struct pool_manager *m, const struct instance *in, uint64_t id)
{
	sel_chain_for_each(x, m->export_ids[id_bucket(id)], struct export, id_hash)
		if (x->id == id && x->holder == in)
			return x;
	return NULL;
}

/*
 * R-POOL-73: among the LOOKUP's candidates longer than the answered chain
 * (indices below first_answered), the longest that another attached
 * instance of the scope announced; its holder (one with room) in *holder.
 * Read before the answer is encoded: the candidates are in the body the
 * answer overwrites.
 */
static bool export_pick(struct pool_manager *m, struct conn *c,
			const struct pool_lookup_view *v, uint32_t first_answered,
			struct rec_key *key, struct instance **holder)
{
	struct scope *s = c->inst->scope;
	bool found = false;

	*holder = NULL;
	if (!s->holds || m->draining)
		return false;
	for (uint32_t i = 0; i < first_answered && !found; i++) {
		pool_lookup_view_key(v, i, key);
		sel_chain_for_each(h, s->hold_buckets[key_bucket(key)], struct hold, hash)
			if (key_equal(&h->key, key) && h->inst != c->inst) {
				found = true;
				break;
			}
	}
	if (!found || export_of_key(m, s, key))
		return false;
	sel_chain_for_each(h, s->hold_buckets[key_bucket(key)], struct hold, hash)
		if (key_equal(&h->key, key) && h->inst != c->inst && h->inst->ranks[0] &&
		    h->inst->exports < POOL_EXPORTS_LIVE_MAX) {
			*holder = h->inst;
			break;
		}
	return *holder != NULL;
}

/* Asks holder's session to export key (R-POOL-74). */
static void export_ask(struct pool_manager *m, struct instance *holder, const struct rec_key *key,
		       uint64_t now)
{
	struct pool_export q = { .deadline_ms = m->config.export_ms, .key = *key };
	uint8_t buf[POOL_EXPORT_BYTES];
	struct export *x = calloc(1, sizeof(*x));
	int n;

	if (!x)
		return;
	*x = (struct export){ .id = m->next_export_id++, .scope = holder->scope,
			      .holder = holder, .key = *key,
			      .deadline_ns = now + m->config.export_ms * 1000000ull };
	export_link(m, x);
	timer_at(m, x->deadline_ns + 1);
	q.export_id = x->id;
	n = pool_export_encode(&q, buf, sizeof(buf));
	SEL_ASSERT(n > 0);
	send_frame(holder->ranks[0], POOL_MSG_EXPORT, buf, (uint32_t)n, NULL, 0);
	m->stats.exports_requested++;
	sel_debug("pool: export %" PRIu64 " of key %" PRIu64 " asked of a holder", x->id,
		  x->key.consumed);
}

/* R-POOL-75: the holder's answer; one it no longer may give is ignored. */
static void on_export_end(struct pool_manager *m, struct conn *c, const uint8_t *body,
			  uint32_t length)
{
	struct pool_export_end e;
	struct export *x;
	struct record *r;
	char why[256];

	if (pool_export_end_decode(body, length, &e, why, sizeof(why))) {
		refuse(m, c, POOL_REFUSE_PROTOCOL, "%s", why);
		return;
	}
	x = export_find(m, c->inst, e.export_id);
	if (!x)
		return;
	if (e.result == 0 && (r = record_find(x->scope, &x->key)) && r->committed) {
		m->stats.exports_completed++;
	} else if (e.result == -ENOENT) {
		struct hold *h = hold_find(x->scope, &x->key, x->holder);

		/* the holder does not hold it: forget its announcement */
		if (h)
			hold_remove(m, h);
		m->stats.exports_refused++;
	} else {
		m->stats.exports_failed++;
	}
	sel_debug("pool: export %" PRIu64 " of key %" PRIu64 " ended: %s", x->id,
		  x->key.consumed, e.result ? sel_strerror(e.result) : "held");
	export_end(m, x);
}

/* The session of in ended: its announcements and the exports asked of it go. */
static void holder_gone(struct pool_manager *m, struct instance *in)
{
	holds_forget(m, in);
	for (struct export *x = export_of(m->exports.head), *next; x; x = next) {
		next = export_of(x->link.next);
		if (x->holder == in) {
			m->stats.exports_failed++;
			export_end(m, x);
		}
	}
}

static void on_lookup(struct pool_manager *m, struct conn *c, const uint8_t *body,
		      uint32_t length, uint64_t now)
{
	struct pool_lookup_view v;
	struct instance *holder;
	struct rec_key export_key;
	uint32_t n = 0, i;
	bool export;
	char why[256];
	int len;

	if (pool_lookup_decode(body, length, &v, why, sizeof(why))) {
		refuse(m, c, POOL_REFUSE_PROTOCOL, "%s", why);
		return;
	}
	m->stats.lookups++;
	for (i = 0; i < v.key_count && !m->draining; i++) {
		struct rec_key k;
		struct record *r;

		pool_lookup_view_key(&v, i, &k);
		r = record_find(c->inst->scope, &k);
		if (!r || !r->row)
			continue;
		n = chain_of(r, m->chain_buf);
		if (m->chain_buf[0]->parent || n == POOL_CHAIN_RECORDS_MAX) {
			n = 0;
			continue;
		}
		for (uint32_t j = 0; j < n; j++)
			record_touch(m, m->chain_buf[j], now);
		m->stats.lookup_hits++;
		break;
	}
	export = export_pick(m, c, &v, i, &export_key, &holder);
	chain_entries(m->chain_buf, n, m->entry_buf, true, c->rank);
	len = pool_answer_encode(v.ticket, m->entry_buf, n, c->body, POOL_CONTROL_BODY_BYTES_MAX);
	SEL_ASSERT(len > 0);
	send_frame(c, POOL_MSG_ANSWER, c->body, (uint32_t)len, NULL, 0);
	/* after the answer: the asker never waits for an export (R-POOL-73) */
	if (export)
		export_ask(m, holder, &export_key, now);
}

/* A claim's bucket: its id is the instance's, so the instance is in the hash. */
static uint32_t claim_bucket(const struct instance *in, uint64_t id)
{
	return id_bucket(id ^ ((uint64_t)(uintptr_t)in * 0xff51afd7ed558ccdull));
}

static struct claim *claim_find(struct pool_manager *m, struct instance *in, uint64_t id)
{
	sel_chain_for_each(cl, m->claim_ids[claim_bucket(in, id)], struct claim, hash)
		if (cl->inst == in && cl->id == id)
			return cl;
	return NULL;
}

static void claim_link(struct pool_manager *m, struct claim *cl)
{
	sel_list_push_head(&m->claims, &cl->link);
	sel_chain_push(&m->claim_ids[claim_bucket(cl->inst, cl->id)], &cl->hash);
	cl->inst->claims++;
}

static void claim_end(struct pool_manager *m, struct claim *cl)
{
	sel_list_remove(&m->claims, &cl->link);
	sel_chain_remove(&m->claim_ids[claim_bucket(cl->inst, cl->id)], &cl->hash);
	for (uint32_t i = 0; i < cl->count; i++)
		cl->chain[i]->pins--;
	cl->inst->claims--;
	free(cl->chain);
	free(cl);
}

/* R-POOL-34: where each record of cl lies in the arena, the share of rank. */
static void send_claim_places_in(struct conn *c, const struct claim *cl, uint32_t rank,
				 uint8_t *body)
{
	struct pool_place places[POOL_CHAIN_RECORDS_MAX];
	int len;

	for (uint32_t i = 0; i < cl->count; i++)
		places[i] = (struct pool_place){
			POOL_ARENA_HEADER_BYTES + cl->chain[i]->shares[rank].offset,
			cl->chain[i]->shares[rank].bytes };
	len = pool_claim_places_encode(cl->id, places, cl->count, body,
				       POOL_CONTROL_BODY_BYTES_MAX);
	SEL_ASSERT(len > 0);
	send_frame(c, POOL_MSG_CLAIM_PLACES, body, (uint32_t)len, NULL, 0);
}

/* The same, encoded in c's body buffer: only while c's frame being read is the one answered. */
static void send_claim_places(struct conn *c, const struct claim *cl, uint32_t rank)
{
	send_claim_places_in(c, cl, rank, c->body);
}

/*
 * CLAIM (R-POOL-30) or, local, CLAIM_LOCAL (R-POOL-51): a granted local
 * claim's CLAIMED is followed at once by the session rank's places.
 */
static void on_claim(struct pool_manager *m, struct conn *c, const uint8_t *body,
		     uint32_t length, uint64_t now, bool local)
{
	struct pool_claim q;
	struct pool_claimed a = { 0 };
	struct claim *cl = NULL;
	struct record *r;
	uint64_t bytes = 0, read_ns = sel_monotonic_ns();
	uint32_t n = 0;
	char why[256];
	int len, fp;

	if (pool_claim_decode(body, length, &q, why, sizeof(why))) {
		refuse(m, c, POOL_REFUSE_PROTOCOL, "%s", why);
		return;
	}
	a.claim_id = q.claim_id;
	r = record_find(c->inst->scope, &q.key);
	if (m->draining)
		a.result = -ESHUTDOWN;
	else if (claim_find(m, c->inst, q.claim_id))
		a.result = -EEXIST;
	else if (c->inst->claims >= POOL_CLAIMS_MAX)
		a.result = SEL_EQUEUEFULL;
	else if ((fp = SEL_FAILPOINT(SEL_FP_POOL_CLAIM_REFUSE)) < 0)
		a.result = fp;
	else if (!r || !r->row || (n = chain_of(r, m->chain_buf), m->chain_buf[0]->parent))
		a.result = -ENOENT;
	else if (!(cl = calloc(1, sizeof(*cl))) || !(cl->chain = calloc(n, sizeof(*cl->chain))))
		a.result = -ENOMEM;
	if (a.result) {
		if (cl)
			free(cl);
		m->stats.claims_refused++;
		n = 0;
	} else {
		cl->id = q.claim_id;
		cl->inst = c->inst;
		cl->count = n;
		for (uint32_t i = 0; i < n; i++) {
			cl->chain[i] = m->chain_buf[i];
			m->chain_buf[i]->pins++;
			record_touch(m, m->chain_buf[i], now);
			for (uint32_t k = 0; k < m->chain_buf[i]->world_size; k++)
				bytes += m->chain_buf[i]->shares[k].bytes;
		}
		/*
		 * A chain partly on disk comes back into the arena, verified: on
		 * the disk thread, CLAIMED waiting for it (disk_done), or here
		 * where no disk thread runs.
		 */
		for (uint32_t i = 0; i < n && !a.result; i++)
			if (m->chain_buf[i]->on_disk)
				a.result = m->disk.running ? disk_load_begin(m, cl, m->chain_buf[i])
							   : disk_load(m, m->chain_buf[i]);
		if (a.result) {
			struct record *bad = NULL;

			for (uint32_t i = 0; i < n; i++) {
				m->chain_buf[i]->pins--;
				if (!bad && m->chain_buf[i]->on_disk)
					bad = m->chain_buf[i];
			}
			/* a load that failed here read a bad file; a queued one failed for room */
			if (a.result != -ENOSPC && !m->disk.running && bad) {
				m->stats.disk_failures++;
				drop_tree(m, bad);
			}
			a.result = a.result == -ENOSPC || a.result == SEL_EQUEUEFULL ? a.result
										     : -ENOENT;
			free(cl->chain);
			free(cl);
			m->stats.claims_refused++;
			n = 0;
			goto answer;
		}
		a.deadline_ms = m->config.claim_setup_ms +
				(uint32_t)(bytes * 1000 / POOL_TRANSFER_BYTES_PER_S);
		cl->deadline_ns = now + (uint64_t)a.deadline_ms * 1000000ull;
		timer_at(m, cl->deadline_ns + 1);
		claim_link(m, cl);
		if (cl->loads_waiting) {
			cl->local = local;
			cl->beat_ns = now;
			timer_at(m, now + LOAD_BEAT_MS * 1000000ull);
			return; /* CLAIMED once the loads are done (disk_done) */
		}
		m->stats.claims_granted++;
	}
answer:
	chain_entries(m->chain_buf, n, m->entry_buf, false, c->rank);
	len = pool_claimed_encode(&a, m->entry_buf, n, c->body, POOL_CONTROL_BODY_BYTES_MAX);
	SEL_ASSERT(len > 0);
	send_frame(c, POOL_MSG_CLAIMED, c->body, (uint32_t)len, NULL, 0);
	if (local && a.result == 0)
		send_claim_places(c, cl, c->rank);
	m->stats.claim_woken_ns = now;
	m->stats.claim_read_ns = read_ns;
	m->stats.claim_answered_ns = sel_monotonic_ns();
}

static bool rdma_usable(struct pool_manager *m, const struct conn *c);
static void rdma_offer(struct pool_manager *m, struct conn *c);

static void send_claim_end(struct conn *c, uint64_t id, int result)
{
	struct pool_claim_end e = { .claim_id = id, .result = result };
	uint8_t buf[POOL_CLAIM_END_BYTES];
	int n = pool_claim_end_encode(&e, buf, sizeof(buf));

	SEL_ASSERT(n > 0);
	send_frame(c, POOL_MSG_CLAIM_END, buf, (uint32_t)n, NULL, 0);
}

static void on_claim_pull(struct pool_manager *m, struct conn *c, const uint8_t *body,
			  uint32_t length, uint64_t now)
{
	struct pool_claim_pull q;
	struct claim *cl;
	char why[256];

	if (pool_claim_pull_decode(body, length, &q, why, sizeof(why))) {
		refuse(m, c, POOL_REFUSE_PROTOCOL, "%s", why);
		return;
	}
	cl = claim_find(m, c->inst, q.claim_id);
	if (!cl || cl->loads_waiting) { /* not granted yet: not live for a pull */
		send_claim_end(c, q.claim_id, -ENOENT);
		return;
	}
	if (q.mode == POOL_PULL_PLACES) {
		send_claim_places(c, cl, c->rank);
		return;
	}
	if (c->stream_count == POOL_SHARES_LIVE_MAX) {
		send_claim_end(c, q.claim_id, SEL_EQUEUEFULL);
		return;
	}
	c->streams[c->stream_count++] = (struct stream){ .claim_id = q.claim_id,
							 .skip = q.skip_pages,
							 .rdma = q.mode == POOL_PULL_RDMA &&
								 rdma_usable(m, c),
							 .progress_ns = now };
	timer_at(m, now + POOL_NO_PROGRESS_MS * 1000000ull + 1);
}

/*
 * Steps stream s to its next window (R-POOL-33): 1 with the window's head,
 * its data in the arena and its record; 0 when the stream is complete;
 * -ENOENT when the claim ended. Sends nothing.
 */
static int stream_step(struct pool_manager *m, struct conn *c, struct stream *s,
		       struct pool_claim_window *wout, const uint8_t **data, uint32_t *data_length,
		       struct record **rec)
{
	struct claim *cl = claim_find(m, c->inst, s->claim_id);
	const struct pool_attach *parts = &c->inst->scope->parts;

	if (!cl)
		return -ENOENT;
	for (;;) {
		struct record *r;
		struct pool_claim_window w = { .claim_id = cl->id };
		const uint8_t *image;
		uint64_t stride = parts->page_bytes[c->rank], len, ck_off, pg_off;
		uint32_t first_page;

		if (s->index >= cl->count)
			return 0;
		r = cl->chain[s->index];
		image = m->arena + r->shares[c->rank].offset;
		ck_off = REC_HEADER_BYTES;
		pg_off = ck_off + sel_align_up(8ull * r->tail_page_count, 4096);
		first_page = s->skip > r->first_page_index ? s->skip - r->first_page_index : 0;
		if (s->section == 0 && s->pos == 0 && s->index + 1 < cl->count &&
		    first_page >= r->tail_page_count) {
			s->index++; /* every page of this record is skipped */
			continue;
		}
		w.chain_index = s->index;
		w.section = s->section;
		if (s->section == POOL_SECTION_HEADER) {
			w.first = 0;
			w.count = REC_HEADER_BYTES;
			len = REC_HEADER_BYTES;
			*data = image;
			s->section = POOL_SECTION_CHECKSUMS;
			s->pos = 0;
			goto window;
		}
		if (s->section == POOL_SECTION_CHECKSUMS) {
			uint64_t total = 8ull * r->tail_page_count;

			if (s->pos >= total) {
				s->section = POOL_SECTION_PAGES;
				s->pos = first_page;
				continue;
			}
			len = total - s->pos;
			if (len > (m->config.window_bytes & ~7u))
				len = m->config.window_bytes & ~7u;
			w.first = (uint32_t)s->pos;
			w.count = (uint32_t)len;
			*data = image + ck_off + s->pos;
			s->pos += len;
			goto window;
		}
		if (s->section == POOL_SECTION_PAGES) {
			uint64_t per = m->config.window_bytes / stride, count;

			if (s->pos >= r->tail_page_count) {
				if (s->index + 1 == cl->count && r->row) {
					s->section = POOL_SECTION_ROW;
					s->pos = 0;
				} else {
					s->index++;
					s->section = POOL_SECTION_HEADER;
					s->pos = 0;
				}
				continue;
			}
			count = r->tail_page_count - s->pos;
			if (count > per)
				count = per;
			w.first = (uint32_t)s->pos;
			w.count = (uint32_t)count;
			len = count * stride;
			*data = image + pg_off + s->pos * stride;
			s->pos += count;
			goto window;
		}
		/* the row, one window (R-POOL-15 bounds it) */
		if (s->pos > 0) {
			s->index++;
			continue;
		}
		len = parts->row_bytes[c->rank];
		w.first = 0;
		w.count = (uint32_t)len;
		*data = image + pg_off + (uint64_t)r->tail_page_count * stride;
		s->pos = len;
window:
		*wout = w;
		*data_length = (uint32_t)len;
		*rec = r;
		return 1;
	}
}

/*
 * Queues the next window of stream s by TCP (R-POOL-33); false when the
 * stream is complete or ended (its CLAIM_END queued).
 */
static bool stream_next(struct pool_manager *m, struct conn *c, struct stream *s)
{
	uint8_t head[POOL_CLAIM_WINDOW_HEAD_BYTES];
	struct pool_claim_window w;
	const uint8_t *data;
	struct record *r;
	uint32_t len;
	int n, ret = stream_step(m, c, s, &w, &data, &len, &r);

	if (ret <= 0) {
		send_claim_end(c, s->claim_id, ret);
		return false;
	}
	n = pool_claim_window_encode(&w, len, head, sizeof(head));
	SEL_ASSERT(n > 0);
	send_window(c, r, head, (uint32_t)n, data, len);
	return true;
}

/* ---- RDMA claims (R-POOL-90 ..; pool/RDMA.md) ---- */

static bool rdma_usable(struct pool_manager *m, const struct conn *c)
{
	return c->rdma && c->rdma->lent && c->rdma->link &&
	       pool_rdma_fallback_allows(&m->rdma_fallback);
}

/* Forgets c's posted writes (unpinning their records) and closes its link. */
static void rdma_conn_drop(struct conn *c)
{
	struct conn_rdma *x = c->rdma;

	if (!x)
		return;
	for (uint32_t i = 0; i < x->posted_count; i++) {
		struct rdma_posted *p = &x->posted[(x->posted_head + i) %
						   POOL_RDMA_WRITES_IN_FLIGHT_MAX];

		p->pin->pins--;
		x->slots[p->win.slot] = RSLOT_FREE;
	}
	x->posted_count = 0;
	pool_rdma_link_close(x->link);
	x->link = NULL;
	x->lent = false;
}

static void rdma_conn_free(struct conn *c)
{
	if (!c->rdma)
		return;
	rdma_conn_drop(c);
	free(c->rdma->slots);
	free(c->rdma);
	c->rdma = NULL;
}

/*
 * R-POOL-97: an RDMA transfer failed on c. RDMA is off for the manager
 * (logged once), the claims whose windows were in flight end on this rank
 * (CLAIM_END -EIO: the rank discards them and the request recomputes),
 * and every later stream goes by TCP.
 */
static void rdma_fail(struct pool_manager *m, struct conn *c, const char *what)
{
	char reason[320];
	uint8_t byte;
	ssize_t n = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);

	if (c->closing || n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
				     errno != EINTR)) {
		/* the rank is gone (BYE, or its end closed): its queue pair went with
		 * it, which says nothing of RDMA; the connection ends (R-POOL-97) */
		rdma_conn_drop(c);
		c->closing = true;
		return;
	}
	snprintf(reason, sizeof(reason), "%s (rank %" PRIu32 ")", what, c->rank);
	pool_rdma_fallback_note(&m->rdma_fallback, reason);
	m->stats.rdma_failures++;
	rdma_conn_drop(c);
	for (uint32_t k = 0; k < c->stream_count; k++)
		if (c->streams[k].rdma && c->streams[k].rdma_started) {
			/* started by RDMA: its windows so far went nowhere the rank may keep */
			send_claim_end(c, c->streams[k].claim_id, -EIO);
			memmove(&c->streams[k], &c->streams[k + 1],
				(c->stream_count - k - 1) * sizeof(c->streams[0]));
			c->stream_count--;
			k--;
		}
}

/* Collects completed writes and says each one's window (RDMA_WINDOW), in order. */
static void rdma_poll(struct pool_manager *m, struct conn *c)
{
	struct conn_rdma *x = c->rdma;
	uint64_t done[POOL_RDMA_WRITES_IN_FLIGHT_MAX];
	int n;

	if (!x || !x->link || !x->posted_count)
		return;
	n = pool_rdma_link_poll(x->link, done, POOL_RDMA_WRITES_IN_FLIGHT_MAX, 0);
	if (n < 0) {
		char what[300];

		snprintf(what, sizeof(what), "an RDMA WRITE failed: %s",
			 pool_rdma_link_why(x->link));
		rdma_fail(m, c, what);
		return;
	}
	for (int i = 0; i < n; i++) {
		struct rdma_posted *p = &x->posted[x->posted_head];
		uint8_t body[POOL_RDMA_WINDOW_BYTES];
		int len;

		/* a reliable connection completes its writes in the order posted */
		if (!x->posted_count || done[i] != p->wr_id) {
			rdma_fail(m, c, "an RDMA completion out of order");
			return;
		}
		len = pool_rdma_window_encode(&p->win, body, sizeof(body));
		SEL_ASSERT(len > 0);
		send_frame(c, POOL_MSG_RDMA_WINDOW, body, (uint32_t)len, NULL, 0);
		x->slots[p->win.slot] = RSLOT_RANK;
		p->pin->pins--;
		x->posted_head = (x->posted_head + 1) % POOL_RDMA_WRITES_IN_FLIGHT_MAX;
		x->posted_count--;
		m->stats.rdma_windows++;
	}
}

/*
 * Posts the next windows of stream s into free lent slots (R-POOL-94);
 * false when the stream is over (its CLAIM_END queued: the caller takes it
 * off c), true while it goes on or when a failure took it off already.
 */
static bool rdma_stream_next(struct pool_manager *m, struct conn *c, struct stream *s,
			     uint64_t now)
{
	struct conn_rdma *x = c->rdma;

	SEL_ASSERT(x && x->link); /* rdma_fail ends the streams it started */
	while (!s->rdma_produced && x->posted_count < POOL_RDMA_WRITES_IN_FLIGHT_MAX) {
		struct pool_claim_window w;
		const uint8_t *data;
		struct record *r;
		struct rdma_posted *p;
		uint32_t len, slot = 0;
		int ret;

		while (slot < x->slot_count && x->slots[slot] != RSLOT_FREE)
			slot++;
		if (slot == x->slot_count)
			break; /* the rank holds every slot: wait for RDMA_FREE */
		ret = stream_step(m, c, s, &w, &data, &len, &r);
		if (ret <= 0) {
			s->rdma_produced = true;
			s->rdma_result = ret;
			break;
		}
		ret = pool_rdma_link_write(x->link, (uint64_t)(data - m->arena), slot, 0, len,
					   ++x->next_wr);
		if (ret) {
			char what[300];

			snprintf(what, sizeof(what), "posting an RDMA WRITE failed: %s",
				 ret == -EIO ? pool_rdma_link_why(x->link) : strerror(-ret));
			s->rdma_started = true; /* so that rdma_fail ends it */
			rdma_fail(m, c, what);
			return true; /* rdma_fail took the stream off c, or c ends */
		}
		p = &x->posted[(x->posted_head + x->posted_count) % POOL_RDMA_WRITES_IN_FLIGHT_MAX];
		p->win = (struct pool_rdma_window){ .w = w, .slot = slot, .data_length = len,
						    .data_xxh3 = XXH3_64bits(data, len) };
		p->pin = r;
		p->wr_id = x->next_wr;
		r->pins++;
		x->slots[slot] = RSLOT_WRITING;
		x->posted_count++;
		s->rdma_started = true;
		s->progress_ns = now;
	}
	if (s->rdma_produced && x->posted_count == 0) {
		send_claim_end(c, s->claim_id, s->rdma_result);
		return false;
	}
	return true;
}

/*
 * Fills an empty output with the next window of the oldest stream, or posts
 * its next RDMA WRITEs (R-POOL-93: RDMA while this connection may use it).
 */
static void streams_fill(struct pool_manager *m, struct conn *c, uint64_t now)
{
	rdma_poll(m, c);
	while (c->stream_count && !c->closing) {
		struct stream *s = &c->streams[0];

		if (s->rdma && !s->rdma_started && !rdma_usable(m, c))
			s->rdma = false; /* R-POOL-97: not started by RDMA, so by TCP whole */
		if (s->rdma) {
			if (rdma_stream_next(m, c, s, now))
				return;
			memmove(&c->streams[0], &c->streams[1], (c->stream_count - 1) * sizeof(*s));
			c->stream_count--;
			continue;
		}
		if (out_pending(c))
			return;
		if (stream_next(m, c, s)) {
			s->progress_ns = now;
			return;
		}
		memmove(&c->streams[0], &c->streams[1], (c->stream_count - 1) * sizeof(*s));
		c->stream_count--;
	}
}

static void on_claim_end(struct pool_manager *m, struct conn *c, const uint8_t *body,
			 uint32_t length)
{
	struct pool_claim_end e;
	struct claim *cl;
	char why[256];

	if (pool_claim_end_decode(body, length, &e, why, sizeof(why))) {
		refuse(m, c, POOL_REFUSE_PROTOCOL, "%s", why);
		return;
	}
	cl = claim_find(m, c->inst, e.claim_id);
	if (cl)
		claim_end(m, cl);
}

/* ---- Handshake and attach ---- */

static int send_welcome(struct pool_manager *m, struct conn *c)
{
	struct pool_welcome w = { .arena_generation = 1,
				  .arena_bytes = m->arena_bytes,
				  .window_bytes = m->config.window_bytes,
				  .claims_max = POOL_CLAIMS_MAX,
				  .puts_max = POOL_PUTS_MAX,
				  .claim_setup_ms = m->config.claim_setup_ms };
	uint8_t buf[POOL_WELCOME_FIXED_BYTES + POOL_NAME_BYTES_MAX + POOL_ARENA_PATH_BYTES_MAX];
	int n;

	memcpy(w.arena_id, m->arena_id, POOL_ARENA_ID_BYTES);
	snprintf(w.name, sizeof(w.name), "%s", m->name);
	snprintf(w.arena_path, sizeof(w.arena_path), "%s", m->arena_path);
	n = pool_welcome_encode(&w, buf, sizeof(buf));
	SEL_ASSERT(n > 0);
	pool_welcome_mac(m->config.secret, c->cn, c->sn, buf + POOL_MAC_BYTES,
			 (size_t)n - POOL_MAC_BYTES, buf);
	send_frame(c, POOL_MSG_WELCOME, buf, (uint32_t)n, NULL, 0);
	pool_connection_key(m->config.secret, c->cn, c->sn, c->kc);
	c->keyed = true;
	c->rx.key = c->kc;
	return 0;
}

/*
 * The disk tier's directory of a scope: <dir>/<scope hex>/ with one
 * directory per rank and the file "scope" holding the ATTACH body that
 * defines it (rank 0), so a restart can recompute and check the scope.
 */
static int scope_dir_open(struct pool_manager *m, struct scope *s, const uint8_t *body,
			  uint32_t length)
{
	char hex[2 * POOL_SCOPE_BYTES + 1], name[16];
	int fd, ret = 0;

	sel_hex_encode(hex, s->id, POOL_SCOPE_BYTES);
	if (mkdirat(m->dir_fd, hex, 0700) && errno != EEXIST)
		return -errno;
	fd = openat(m->dir_fd, hex, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	for (uint32_t i = 0; i < s->parts.world_size && !ret; i++) {
		snprintf(name, sizeof(name), "%" PRIu32, i);
		if (mkdirat(fd, name, 0700) && errno != EEXIST)
			ret = -errno;
	}
	if (!ret && body) {
		int f = openat(fd, "scope.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

		ret = f < 0 ? -errno : write_all_at(f, body, length);
		if (!ret)
			ret = disk_sync(f, false);
		if (f >= 0)
			close(f);
		if (!ret && renameat(fd, "scope.tmp", fd, "scope"))
			ret = -errno;
	}
	/* the rank directories and the scope file in it, and it in --dir */
	if (!ret && body)
		ret = disk_sync(fd, true);
	if (!ret && body)
		ret = disk_sync(m->dir_fd, true);
	if (ret) {
		close(fd);
		return ret;
	}
	s->dir_fd = fd;
	return 0;
}

static struct scope *scope_get(struct pool_manager *m, const uint8_t id[POOL_SCOPE_BYTES],
			       const struct pool_attach *a, const uint8_t *body, uint32_t length)
{
	struct scope *s;

	for (s = m->scopes; s; s = s->next)
		if (memcmp(s->id, id, POOL_SCOPE_BYTES) == 0)
			return s;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	memcpy(s->id, id, POOL_SCOPE_BYTES);
	s->parts = *a;
	s->dir_fd = -1;
	if (m->dir_fd >= 0) {
		int ret = scope_dir_open(m, s, body, length);

		if (ret)
			sel_warn("pool: the disk tier of a scope: %s; its records stay in memory",
				 strerror(-ret));
	}
	s->next = m->scopes;
	m->scopes = s;
	return s;
}

static void on_attach(struct pool_manager *m, struct conn *c, const uint8_t *body,
		      uint32_t length)
{
	struct pool_attach *ap = &m->attach;
	struct pool_attached reply = { 0 };
	struct instance *in;
	struct scope *s;
	uint8_t buf[POOL_ATTACHED_BYTES];
	char why[256];
	int n;

	if (pool_attach_decode(body, length, ap, why, sizeof(why))) {
		refuse(m, c, POOL_REFUSE_PROTOCOL, "%s", why);
		return;
	}
	/* R-POOL-15: whole pages and rows of 4 KiB multiples, each within a window */
	for (uint32_t i = 0; i < ap->world_size; i++)
		if (!ap->page_bytes[i] || !ap->row_bytes[i] || !sel_is_aligned(ap->page_bytes[i], 4096) ||
		    !sel_is_aligned(ap->row_bytes[i], 4096) ||
		    ap->page_bytes[i] > m->config.window_bytes ||
		    ap->row_bytes[i] > m->config.window_bytes) {
			refuse(m, c, POOL_REFUSE_SCOPE, "rank %" PRIu32 "'s page of %" PRIu64
			       " or row of %" PRIu64 " bytes cannot be pooled with windows of %"
			       PRIu32 " (R-POOL-15)", i, ap->page_bytes[i], ap->row_bytes[i],
			       m->config.window_bytes);
			return;
		}
	for (in = m->instances; in; in = in->next)
		if (memcmp(in->id, ap->instance_id, POOL_INSTANCE_ID_BYTES) == 0)
			break;
	pool_scope_of_attach(m->name, body, length, reply.scope);
	if (in && memcmp(in->scope->id, reply.scope, POOL_SCOPE_BYTES) != 0) {
		refuse(m, c, POOL_REFUSE_SCOPE, "rank %" PRIu32 "'s scope parts differ from its "
		       "instance's (R-POOL-14)", ap->rank);
		return;
	}
	if (in && in->ranks[ap->rank]) {
		refuse(m, c, POOL_REFUSE_WORLD, "rank %" PRIu32 " of this instance is attached "
		       "already (R-POOL-18)", ap->rank);
		return;
	}
	if (!in) {
		s = scope_get(m, reply.scope, ap, body, length);
		in = calloc(1, sizeof(*in));
		if (!s || !in || !(in->ranks = calloc(ap->world_size, sizeof(in->ranks[0])))) {
			free(in);
			c->closing = true;
			return;
		}
		memcpy(in->id, ap->instance_id, POOL_INSTANCE_ID_BYTES);
		in->scope = s;
		s->instances++;
		in->next = m->instances;
		m->instances = in;
	}
	in->ranks[ap->rank] = c;
	in->attached++;
	c->inst = in;
	c->rank = ap->rank;
	c->state = C_SERVING;
	timer_at(m, c->heard_ns + POOL_IDLE_MS * 1000000ull + 1);
	reply.scope_records = in->scope->records;
	n = pool_attached_encode(&reply, buf, sizeof(buf));
	SEL_ASSERT(n > 0);
	send_frame(c, POOL_MSG_ATTACHED, buf, (uint32_t)n, NULL, 0);
	sel_info("pool: rank %" PRIu32 " of an instance of %" PRIu32 " attached (scope holds %"
		 PRIu64 " records)", ap->rank, ap->world_size, reply.scope_records);
	rdma_offer(m, c);
}

/*
 * R-POOL-91: with --rdma, a device and RDMA not turned off, a connection
 * that attached is offered RDMA claims: a writer link over the arena, its
 * endpoint in RDMA_OFFER. Anything that fails leaves the connection on TCP.
 */
static void rdma_offer(struct pool_manager *m, struct conn *c)
{
	struct pool_rdma_endpoint e;
	uint8_t body[POOL_RDMA_ENDPOINT_BYTES_MAX];
	char why[256];
	int n;

	if (!m->rdma_on || !pool_rdma_fallback_allows(&m->rdma_fallback))
		return;
	c->rdma = calloc(1, sizeof(*c->rdma));
	if (!c->rdma)
		return;
	if (pool_rdma_link_open_on(m->rdma_arena, &c->rdma->link, why, sizeof(why))) {
		pool_rdma_fallback_note(&m->rdma_fallback, why);
		rdma_conn_free(c);
		return;
	}
	pool_rdma_link_endpoint(c->rdma->link, &e);
	n = pool_rdma_offer_encode(&e, body, sizeof(body));
	SEL_ASSERT(n > 0);
	send_frame(c, POOL_MSG_RDMA_OFFER, body, (uint32_t)n, NULL, 0);
}

/* R-POOL-92: the rank lends its slots; the writer connects to them. */
static void on_rdma_lend(struct pool_manager *m, struct conn *c, const uint8_t *body,
			 uint32_t length)
{
	struct pool_rdma_endpoint e;
	char why[256];

	if (!c->rdma || c->rdma->lent || c->rdma->slots) {
		refuse(m, c, POOL_REFUSE_PROTOCOL, "RDMA_LEND %s (R-POOL-92)",
		       c->rdma ? "sent twice" : "without an RDMA_OFFER");
		return;
	}
	if (pool_rdma_lend_decode(body, length, &e, why, sizeof(why))) {
		refuse(m, c, POOL_REFUSE_PROTOCOL, "%s", why);
		return;
	}
	if (e.slot_bytes < m->config.window_bytes) {
		refuse(m, c, POOL_REFUSE_PROTOCOL, "RDMA_LEND slots of %" PRIu64 " bytes hold no "
		       "window of %u (R-POOL-92)", e.slot_bytes, m->config.window_bytes);
		return;
	}
	c->rdma->slots = calloc(e.slot_count, 1);
	if (!c->rdma->slots) {
		rdma_conn_drop(c);
		return;
	}
	c->rdma->slot_count = e.slot_count;
	c->rdma->slot_bytes = e.slot_bytes;
	if (!c->rdma->link)
		return; /* RDMA went off since the offer: this connection claims by TCP */
	if (pool_rdma_link_connect(c->rdma->link, &e, why, sizeof(why))) {
		char what[300];

		snprintf(what, sizeof(what), "connecting to rank %" PRIu32 "'s slots: %s",
			 c->rank, why);
		pool_rdma_fallback_note(&m->rdma_fallback, what);
		m->stats.rdma_failures++;
		rdma_conn_drop(c);
		return;
	}
	c->rdma->lent = true;
	m->stats.rdma_connections++;
}

/* R-POOL-95: slots the rank copied out are free for the next windows. */
static void on_rdma_free(struct pool_manager *m, struct conn *c, const uint8_t *body,
			 uint32_t length, uint64_t now)
{
	const uint8_t *slots;
	uint32_t count;
	char why[256];

	if (pool_rdma_free_decode(body, length, &count, &slots, why, sizeof(why))) {
		refuse(m, c, POOL_REFUSE_PROTOCOL, "%s", why);
		return;
	}
	for (uint32_t i = 0; i < count; i++) {
		uint32_t k = sel_get_le32(slots + 4 * i);

		if (!c->rdma || !c->rdma->slots || k >= c->rdma->slot_count ||
		    c->rdma->slots[k] != RSLOT_RANK) {
			refuse(m, c, POOL_REFUSE_PROTOCOL, "RDMA_FREE of slot %" PRIu32 ", which "
			       "the rank does not hold (R-POOL-95)", k);
			return;
		}
		c->rdma->slots[k] = RSLOT_FREE;
	}
	for (uint32_t k = 0; k < c->stream_count; k++)
		c->streams[k].progress_ns = now;
}

/* ---- Connections ---- */

static void conn_detach(struct pool_manager *m, struct conn *c)
{
	struct instance *in = c->inst;

	if (!in)
		return;
	/* R-POOL-43: an open put of this instance fails when any of its ranks goes */
	for (struct put *p = put_of(m->puts.head), *next; p; p = next) {
		next = put_of(p->link.next);
		if (p->inst == in)
			put_fail(m, p, -ECONNRESET, "a rank's connection ended mid-put");
	}
	/* R-POOL-30: the session's end ends its claims; another rank's does not (R-POOL-110) */
	if (c->rank == 0)
		for (struct claim *cl = claim_of(m->claims.head), *next; cl; cl = next) {
			next = claim_of(cl->link.next);
			if (cl->inst == in)
				claim_end(m, cl);
		}
	/* R-POOL-71, R-POOL-75: and its announcements and exports */
	if (c->rank == 0)
		holder_gone(m, in);
	in->ranks[c->rank] = NULL;
	c->inst = NULL;
	if (--in->attached == 0) {
		struct instance **pp = &m->instances;

		for (struct claim *cl = claim_of(m->claims.head), *next; cl; cl = next) {
			next = claim_of(cl->link.next);
			if (cl->inst == in)
				claim_end(m, cl);
		}
		while (*pp != in)
			pp = &(*pp)->next;
		*pp = in->next;
		in->scope->instances--;
		free(in->ranks);
		free(in);
	}
}

static void conn_free(struct pool_manager *m, uint32_t index)
{
	struct conn *c = m->conns[index];

	out_drop(c); /* its window's pin */
	rdma_conn_free(c); /* its posted writes' pins, its queue pair */
	conn_detach(m, c);
	epoll_ctl(m->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c->body);
	free(c->out);
	free(c);
	m->conns[index] = m->conns[--m->conn_count];
}

/*
 * Says REFUSE on a connection the manager will not take (R-POOL-9), with
 * one non-blocking send: best effort, and never a wait.
 */
static void refuse_at_once(int fd, uint32_t reason)
{
	struct pool_refuse r = { .reason = reason };
	uint8_t frame[CLUSTER_FRAME_HEADER_BYTES + POOL_REFUSE_FIXED_BYTES + 64];
	uint8_t tag[POOL_TAG_BYTES];
	int n;

	snprintf(r.text, sizeof(r.text), "%s", reason == POOL_REFUSE_SHUTDOWN
						   ? "the manager is draining"
						   : "the manager holds all the connections it may");
	n = pool_refuse_encode(&r, frame + CLUSTER_FRAME_HEADER_BYTES,
			       sizeof(frame) - CLUSTER_FRAME_HEADER_BYTES);
	SEL_ASSERT(n > 0);
	pool_frame_build(NULL, POOL_TO_RANK, 0, POOL_MSG_REFUSE, frame + CLUSTER_FRAME_HEADER_BYTES,
			 (uint32_t)n, NULL, 0, frame, tag);
	if (send(fd, frame, CLUSTER_FRAME_HEADER_BYTES + (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) <
	    0) {
		/* best effort: the connection closes either way */
	}
}

static void accept_all(struct pool_manager *m, uint64_t now)
{
	for (;;) {
		int fd = accept4(m->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), one = 1;
		struct conn *c;

		if (fd < 0)
			return;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		m->stats.connections++;
		c = calloc(1, sizeof(*c));
		if (c)
			c->body = malloc(POOL_CONTROL_BODY_BYTES_MAX);
		if (m->conn_count == m->config.connections_max) {
			/* full: the oldest connection still in its handshake makes room */
			uint32_t oldest = UINT32_MAX;

			for (uint32_t i = 0; i < m->conn_count; i++)
				if (m->conns[i]->state != C_SERVING &&
				    (oldest == UINT32_MAX ||
				     m->conns[i]->deadline_ns < m->conns[oldest]->deadline_ns))
					oldest = i;
			if (oldest != UINT32_MAX) {
				m->stats.refused++;
				conn_free(m, oldest);
			}
		}
		if (c && c->body && m->conn_count < m->config.connections_max && !m->draining) {
			struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };

			if (epoll_ctl(m->epoll_fd, EPOLL_CTL_ADD, fd, &ev) == 0)
				c->events_set = EPOLLIN;
			else
				sel_warn("pool: epoll_ctl: %s; the connection is refused",
					 strerror(errno));
		}
		if (!c || !c->events_set) {
			if (c)
				free(c->body);
			free(c);
			m->stats.refused++;
			refuse_at_once(fd, m->draining ? POOL_REFUSE_SHUTDOWN : POOL_REFUSE_BUSY);
			close(fd);
			continue;
		}
		c->fd = fd;
		c->state = C_HELLO;
		c->deadline_ns = now + POOL_HANDSHAKE_MS * 1000000ull;
		c->heard_ns = now;
		timer_at(m, c->deadline_ns + 1);
		pool_rx_init(&c->rx, c->body, POOL_CONTROL_BODY_BYTES_MAX, POOL_TO_MANAGER);
		m->conns[m->conn_count++] = c;
	}
}

static void on_frame(struct pool_manager *m, struct conn *c, uint64_t now)
{
	uint16_t type = c->rx.header.type;
	const uint8_t *body = c->rx.body;
	uint32_t length = c->rx.body_length;
	char why[256];

	switch (c->state) {
	case C_HELLO:
		if (type != POOL_MSG_HELLO ||
		    pool_nonce_decode(type, body, length, c->cn, why, sizeof(why))) {
			refuse(m, c, POOL_REFUSE_PROTOCOL, "expected HELLO (R-POOL-10)");
			return;
		}
		if (cluster_nonce_fill(c->sn)) {
			c->closing = true;
			return;
		}
		send_frame(c, POOL_MSG_CHALLENGE, c->sn, POOL_NONCE_BYTES, NULL, 0);
		c->state = C_PROOF;
		return;
	case C_PROOF: {
		uint8_t got[POOL_MAC_BYTES], want[POOL_MAC_BYTES];

		if (type != POOL_MSG_PROOF || length != POOL_MAC_BYTES) {
			refuse(m, c, POOL_REFUSE_PROTOCOL, "expected PROOF (R-POOL-10)");
			return;
		}
		memcpy(got, body, POOL_MAC_BYTES);
		pool_proof_mac(m->config.secret, c->sn, c->cn, want);
		if (!cluster_mac_equal(got, want)) {
			refuse(m, c, POOL_REFUSE_AUTH, "the proof of the pool secret does not "
			       "verify (R-POOL-10)");
			return;
		}
		if (m->draining) {
			refuse(m, c, POOL_REFUSE_SHUTDOWN, "the manager is draining");
			return;
		}
		send_welcome(m, c);
		c->state = C_ATTACH;
		return;
	}
	case C_ATTACH:
		if (type != POOL_MSG_ATTACH) {
			refuse(m, c, POOL_REFUSE_PROTOCOL, "expected ATTACH (R-POOL-14)");
			return;
		}
		on_attach(m, c, body, length);
		return;
	case C_SERVING:
		break;
	}
	if (type == POOL_MSG_HEARTBEAT)
		return;
	if (type == POOL_MSG_BYE) {
		c->closing = true;
		return;
	}
	if (type == POOL_MSG_PUT_WINDOW) {
		on_put_window(m, c);
		return;
	}
	if (type == POOL_MSG_CLAIM_PULL) {
		on_claim_pull(m, c, body, length, now);
		return;
	}
	if (type == POOL_MSG_RDMA_LEND) {
		on_rdma_lend(m, c, body, length);
		return;
	}
	if (type == POOL_MSG_RDMA_FREE) {
		on_rdma_free(m, c, body, length, now);
		return;
	}
	if (c->rank != 0) {
		refuse(m, c, POOL_REFUSE_PROTOCOL, "%s on a connection that is not the "
		       "session (R-POOL-1)", cluster_grammar_msg_name(&pool_grammar, type));
		return;
	}
	switch (type) {
	case POOL_MSG_LOOKUP:
		on_lookup(m, c, body, length, now);
		return;
	case POOL_MSG_CLAIM:
	case POOL_MSG_CLAIM_LOCAL:
		on_claim(m, c, body, length, now, type == POOL_MSG_CLAIM_LOCAL);
		return;
	case POOL_MSG_CLAIM_END:
		on_claim_end(m, c, body, length);
		return;
	case POOL_MSG_PUT_BEGIN:
		on_put_begin(m, c, body, length, now);
		return;
	case POOL_MSG_PUT_END:
		on_put_end(m, c, body, length, now);
		return;
	case POOL_MSG_HOLDS:
		on_holds(m, c, body, length);
		return;
	case POOL_MSG_EXPORT_END:
		on_export_end(m, c, body, length);
		return;
	default:
		refuse(m, c, POOL_REFUSE_PROTOCOL, "%s out of place (R-POOL-6)",
		       cluster_grammar_msg_name(&pool_grammar, type));
	}
}

static void conn_read(struct pool_manager *m, struct conn *c, uint64_t now)
{
	char why[256];

	while (!c->closing && !out_backlogged(c)) {
		bool eof;
		int ret = pool_rx_feed(&c->rx, c->fd, &eof, why, sizeof(why));

		if (ret == POOL_RX_MORE && !eof)
			return;
		if (eof) {
			c->closing = true;
			out_drop(c);
			return;
		}
		if (ret < 0) {
			if (ret == -EACCES || ret == SEL_EPROTO || ret == SEL_ETOOBIG)
				refuse(m, c, ret == -EACCES ? POOL_REFUSE_AUTH : POOL_REFUSE_PROTOCOL,
				       "%s", why);
			else
				c->closing = true;
			return;
		}
		c->heard_ns = now;
		if (ret == POOL_RX_HEAD) {
			if (c->state != C_SERVING || c->rx.header.type != POOL_MSG_PUT_WINDOW) {
				refuse(m, c, POOL_REFUSE_PROTOCOL, "%s out of place (R-POOL-6)",
				       cluster_grammar_msg_name(&pool_grammar,
								c->rx.header.type));
				return;
			}
			on_put_window_head(m, c);
			continue;
		}
		on_frame(m, c, now);
	}
}

/*
 * Writes what is queued, a window's data from where it lies between its
 * head and the rest (send_window); 0, or -1 when the connection is to go.
 */
static int conn_write(struct conn *c, uint64_t now)
{
	while (out_pending(c)) {
		struct iovec iov[3];
		struct msghdr msg = { .msg_iov = iov };
		size_t split = c->out_data ? c->out_split : c->out_used, n0, n1;
		ssize_t n;

		if (c->out_sent < split)
			iov[msg.msg_iovlen++] = (struct iovec){ c->out + c->out_sent,
								split - c->out_sent };
		if (c->out_data)
			iov[msg.msg_iovlen++] = (struct iovec){
				(void *)(uintptr_t)(c->out_data + c->out_data_sent),
				c->out_data_length - c->out_data_sent };
		if (c->out_used > split)
			iov[msg.msg_iovlen++] = (struct iovec){ c->out + split,
								c->out_used - split };
		n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n <= 0)
			return -1;
		/* the bytes written, in the order of the pieces above */
		n0 = split - c->out_sent < (size_t)n ? split - c->out_sent : (size_t)n;
		c->out_sent += n0;
		n -= (ssize_t)n0;
		if (c->out_data) {
			n1 = c->out_data_length - c->out_data_sent < (size_t)n
				     ? c->out_data_length - c->out_data_sent : (size_t)n;
			c->out_data_sent += n1;
			n -= (ssize_t)n1;
			if (c->out_data_sent == c->out_data_length) {
				c->out_pin->pins--;
				c->out_pin = NULL;
				c->out_data = NULL;
			}
		}
		c->out_sent += (size_t)n;
		/* R-POOL-35: any byte the rank takes is progress of its streams */
		for (uint32_t k = 0; k < c->stream_count; k++)
			c->streams[k].progress_ns = now;
	}
	c->out_sent = c->out_used = 0;
	return 0;
}

/*
 * One turn of connection c: its frames read (when read), its streams'
 * windows queued, its output written. False when the write failed and c
 * is closing.
 */
static bool conn_turn(struct pool_manager *m, struct conn *c, uint64_t now, bool read)
{
	if (read)
		conn_read(m, c, now);
	if (c->state == C_SERVING)
		streams_fill(m, c, now);
	if (conn_write(c, now) < 0) {
		c->closing = true;
		out_drop(c);
		return false;
	}
	return true;
}

/*
 * A claim whose loads are all done is answered: CLAIMED with its chain
 * (its deadline counted from now) and, for CLAIM_LOCAL, the places; or
 * -ENOENT when a load failed, ending the claim. Encoded in the manager's
 * own buffer: the session's may hold a frame being read.
 */
static void claim_answer_loaded(struct pool_manager *m, struct claim *cl, uint64_t now)
{
	struct pool_claimed a = { .claim_id = cl->id };
	struct conn *c = cl->inst->ranks[0];
	uint64_t bytes = 0;
	uint32_t n = cl->count;
	int len;

	if (cl->load_failed || !c) {
		a.result = -ENOENT;
		n = 0;
		m->stats.claims_refused++;
	} else {
		for (uint32_t i = 0; i < cl->count; i++)
			bytes += record_bytes(cl->chain[i]);
		a.deadline_ms = m->config.claim_setup_ms +
				(uint32_t)(bytes * 1000 / POOL_TRANSFER_BYTES_PER_S);
		cl->deadline_ns = now + (uint64_t)a.deadline_ms * 1000000ull;
		timer_at(m, cl->deadline_ns + 1);
		m->stats.claims_granted++;
	}
	if (c) {
		chain_entries(cl->chain, n, m->entry_buf, false, c->rank);
		len = pool_claimed_encode(&a, m->entry_buf, n, m->disk_body,
					  POOL_CONTROL_BODY_BYTES_MAX);
		SEL_ASSERT(len > 0);
		send_frame(c, POOL_MSG_CLAIMED, m->disk_body, (uint32_t)len, NULL, 0);
		if (!a.result && cl->local)
			send_claim_places_in(c, cl, c->rank, m->disk_body);
	}
	if (a.result)
		claim_end(m, cl);
}

/*
 * A spill is done: a record whose files could not be written is dropped
 * (counted in spill_failures, and as evicted once it has gone). A pinned
 * one stays until the load that pins it fails (counted in disk_failures),
 * as does one that a pinned record extends.
 */
static void spill_done(struct pool_manager *m, const struct disk_job *j)
{
	struct record *r = record_find(j->scope, &j->key);

	/* dropped meanwhile, or another record of the key: its unlink is queued after */
	if (!r || r->disk_job != j->id)
		return;
	r->disk_job = 0;
	if (!j->result)
		return;
	sel_warn("pool: spilling record %" PRIu64 " to disk: %s", j->key.consumed, j->why);
	m->stats.spilled--;
	m->stats.spill_failures++;
	drop_tree(m, r); /* as without a disk tier */
	if (!record_find(j->scope, &j->key))
		m->stats.evicted++;
}

/*
 * A load is done: the record is in the arena (its files deleted), or its
 * room is free again and it is dropped with what extends it, once the
 * claims that waited for it are answered.
 */
static void load_done(struct pool_manager *m, const struct disk_job *j, uint64_t now)
{
	struct record *r = record_find(j->scope, &j->key);

	SEL_ASSERT(r && r->loading && r->pins); /* the job pinned it */
	r->pins--;
	r->loading = false;
	if (!j->result) {
		r->on_disk = false;
		disk_unlink(m, r);
		m->stats.disk_used_bytes -= record_bytes(r);
		m->stats.loaded++;
	} else {
		sel_warn("pool: record %" PRIu64 " on disk: %s", j->key.consumed, j->why);
		for (uint32_t i = 0; i < r->world_size; i++)
			arena_free(m, r->shares[i].offset, r->shares[i].bytes);
		m->stats.disk_failures++;
	}
	for (struct claim *cl = claim_of(m->claims.head), *next; cl; cl = next) {
		bool waits = false;

		next = claim_of(cl->link.next);
		for (uint32_t i = 0; cl->loads_waiting && i < cl->count && !waits; i++)
			waits = cl->chain[i] == r;
		if (!waits)
			continue;
		cl->load_failed |= j->result != 0;
		if (--cl->loads_waiting == 0)
			claim_answer_loaded(m, cl, now);
	}
	if (j->result)
		drop_tree(m, r);
}

/* Takes the disk thread's finished jobs (the loop, under the stats lock). */
static void disk_done(struct pool_manager *m, uint64_t now)
{
	struct disk_thread *d = &m->disk;
	struct disk_job *j, *next;
	uint64_t v;

	if (read(d->done_fd, &v, sizeof(v)) < 0) {
		/* nothing new: the list below says */
	}
	pthread_mutex_lock(&d->lock);
	j = d->done_head;
	d->done_head = d->done_tail = NULL;
	pthread_mutex_unlock(&d->lock);
	for (; j; j = next) {
		next = j->next;
		if (j->op == DISK_SPILL)
			spill_done(m, j);
		else if (j->op == DISK_LOAD)
			load_done(m, j, now);
		pthread_mutex_lock(&d->lock);
		d->jobs--;
		d->bytes -= j->copy_bytes;
		m->stats.disk_queued = d->jobs;
		pthread_mutex_unlock(&d->lock);
		if (j->op == DISK_SPILL)
			free(j->base);
		free(j);
	}
}

/*
 * Stops the disk thread once every queued job ran and takes their
 * results; later disk I/O runs on the calling thread (a closing manager
 * spills its arena there).
 */
static void disk_thread_stop(struct pool_manager *m)
{
	struct disk_thread *d = &m->disk;

	if (!d->running)
		return;
	pthread_mutex_lock(&d->lock);
	d->stop = true;
	pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->lock);
	pthread_join(d->thread, NULL);
	/*
	 * Not running before its results are taken: a load or failed spill
	 * taken here frees files, and those must go on this thread, not in
	 * a queue no thread runs any more.
	 */
	d->running = false;
	disk_done(m, sel_monotonic_ns());
	SEL_ASSERT(d->jobs == 0);
	pthread_cond_destroy(&d->wake);
	pthread_mutex_destroy(&d->lock);
	epoll_ctl(m->epoll_fd, EPOLL_CTL_DEL, d->done_fd, NULL);
	close(d->done_fd);
	d->done_fd = -1;
}

/*
 * Max-age expiry (docs/DESIGN.md section 12), at most once per
 * min(POOL_EXPIRE_EVERY_MS, the max age): a record's age counts from its
 * commit (or the start that found it on disk), not from its last use, so
 * the sweep walks the age list, oldest first, and stops at the first
 * record that has not expired (every later one is younger). It skips
 * records that are pinned or extended, drops expired leaves, each with the
 * ancestors it leaves expired leaves, at most POOL_EXPIRE_SWEEP_MAX a
 * sweep, and never starts over: a sweep examines the expired records ahead
 * of the first fresh one that it skips, those it drops, and one more.
 */
static uint64_t expire_every_ns(const struct pool_manager *m)
{
	uint64_t age_ns = m->config.max_age_ms * 1000000ull;

	return age_ns < POOL_EXPIRE_EVERY_MS * 1000000ull ? age_ns
							  : POOL_EXPIRE_EVERY_MS * 1000000ull;
}

static void expire(struct pool_manager *m, uint64_t now)
{
	uint64_t age_ns = m->config.max_age_ms * 1000000ull;
	uint32_t dropped = 0;

	if (!age_ns)
		return;
	if (m->expire_last_ns && now - m->expire_last_ns < expire_every_ns(m))
		return;
	m->expire_last_ns = now;
	m->stats.expire_sweeps++;
	for (struct record *r = age_record(m->age.head), *next;
	     r && dropped < POOL_EXPIRE_SWEEP_MAX; r = next) {
		next = age_record(r->age.next);
		m->stats.expire_examined++;
		if (now - r->created_ns <= age_ns)
			break; /* the first fresh record: the rest are younger */
		/* an expired leaf, then each parent it leaves an expired leaf */
		for (struct record *q = r, *parent; q && !q->children && !q->pins &&
						    now - q->created_ns > age_ns &&
						    dropped < POOL_EXPIRE_SWEEP_MAX;
		     q = parent) {
			parent = q->parent;
			if (q == next)
				next = age_record(q->age.next);
			if (q != r)
				m->stats.expire_examined++;
			record_free(m, q);
			m->stats.expired++;
			dropped++;
		}
	}
}

/*
 * Walks every deadline (handshakes, idle and stalled connections, puts,
 * claims and their load heartbeats, exports, the max-age sweep): called
 * by the loop only when timers_due_ns has come, which it sets to the
 * earliest deadline still ahead (POOL_LOOP_TICK_MS ahead at most), so a
 * busy loop does not walk every connection, put and claim per frame.
 */
static void timers(struct pool_manager *m, uint64_t now)
{
	uint64_t due = now + POOL_LOOP_TICK_MS * 1000000ull;

#define DUE_AT(at)                   \
	do {                         \
		uint64_t at_ = (at); \
		if (at_ < due)       \
			due = at_;   \
	} while (0)
	m->stats.timer_walks++;
	for (uint32_t i = 0; i < m->conn_count; i++) {
		struct conn *c = m->conns[i];

		if (c->state != C_SERVING && now > c->deadline_ns && !c->closing)
			refuse(m, c, POOL_REFUSE_DEADLINE, "the handshake took more than %u ms",
			       POOL_HANDSHAKE_MS);
		if (c->state == C_SERVING && now - c->heard_ns > POOL_IDLE_MS * 1000000ull)
			c->closing = true;
		for (uint32_t k = 0; k < c->stream_count; k++)
			if (now - c->streams[k].progress_ns > POOL_NO_PROGRESS_MS * 1000000ull) {
				/* R-POOL-35: the rank stopped reading; the stream stops */
				c->closing = true;
			}
		if (c->closing)
			continue;
		DUE_AT(c->state != C_SERVING ? c->deadline_ns + 1
					     : c->heard_ns + POOL_IDLE_MS * 1000000ull + 1);
		for (uint32_t k = 0; k < c->stream_count; k++)
			DUE_AT(c->streams[k].progress_ns + POOL_NO_PROGRESS_MS * 1000000ull + 1);
	}
	for (struct put *p = put_of(m->puts.head), *next; p; p = next) {
		next = put_of(p->link.next);
		if (now > p->deadline_ns)
			put_fail(m, p, -ETIMEDOUT, "its deadline passed");
		else
			DUE_AT(p->deadline_ns + 1);
	}
	for (struct claim *cl = claim_of(m->claims.head), *next; cl; cl = next) {
		next = claim_of(cl->link.next);
		if (now > cl->deadline_ns && cl->loads_waiting) {
			/* never granted: its loads did not finish in time (R-POOL-31) */
			cl->load_failed = true;
			cl->loads_waiting = 0;
			claim_answer_loaded(m, cl, now);
			continue;
		}
		if (now > cl->deadline_ns) {
			if (cl->inst->ranks[0])
				send_claim_end(cl->inst->ranks[0], cl->id, -ETIMEDOUT);
			claim_end(m, cl);
			continue;
		}
		DUE_AT(cl->deadline_ns + 1);
		if (!cl->loads_waiting || !cl->inst->ranks[0])
			continue;
		if (now - cl->beat_ns >= LOAD_BEAT_MS * 1000000ull) {
			uint8_t beat[POOL_HEARTBEAT_BYTES];

			cl->beat_ns = now;
			sel_put_le64(beat, now);
			send_frame(cl->inst->ranks[0], POOL_MSG_HEARTBEAT, beat, sizeof(beat), NULL,
				   0);
		}
		DUE_AT(cl->beat_ns + LOAD_BEAT_MS * 1000000ull);
	}
	for (struct export *x = export_of(m->exports.head), *next; x; x = next) {
		next = export_of(x->link.next);
		if (now > x->deadline_ns) {
			m->stats.exports_failed++;
			export_end(m, x);
		} else {
			DUE_AT(x->deadline_ns + 1);
		}
	}
	expire(m, now);
	if (m->config.max_age_ms)
		DUE_AT(m->expire_last_ns + expire_every_ns(m));
#undef DUE_AT
	m->timers_due_ns = due;
}

/* ---- The disk tier at start ---- */

static int cmp_consumed(const void *a, const void *b)
{
	const struct record *x = *(struct record *const *)a, *y = *(struct record *const *)b;

	return x->key.consumed < y->key.consumed ? -1 : x->key.consumed > y->key.consumed;
}

/* Reads the header of rank 0's file of key into r (parent, pages, row). */
static int disk_record_read(struct pool_manager *m, struct scope *s, struct record *r,
			    struct rec_key *parent)
{
	uint8_t *block = m->block;
	char name[96], why[256];
	struct rec_header h;
	bool row = false;

	for (uint32_t i = 0; i < r->world_size; i++) {
		struct stat st;

		share_name(name, sizeof(name), i, &r->key, false);
		if (fstatat(s->dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
			return -ENOENT;
		r->shares[i].bytes = (uint64_t)st.st_size;
		if (i == 0) {
			int fd = openat(s->dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
			ssize_t n = fd < 0 ? -1 : pread(fd, block, REC_HEADER_BYTES, 0);

			if (fd >= 0)
				close(fd);
			if (n != (ssize_t)REC_HEADER_BYTES || rec_header_decode(block, &h, why, sizeof(why)) ||
			    rec_header_check_length(&h, (uint64_t)st.st_size, &row, why, sizeof(why)) ||
			    h.world_size != r->world_size)
				return SEL_EBADHEADER;
			*parent = h.parent;
			r->first_page_index = h.first_page_index;
			r->tail_page_count = h.tail_page_count;
			r->row = row;
			r->created_ns = h.created_ns;
		}
	}
	return 0;
}

/* Indexes one scope directory's records; bad or orphaned ones are deleted. */
static void disk_scan_scope(struct pool_manager *m, struct scope *s)
{
	struct record **found = NULL;
	size_t count = 0, cap = 0;
	uint64_t now = sel_monotonic_ns();
	DIR *d;
	int fd = openat(s->dir_fd, "0", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	for (struct dirent *e; (e = readdir(d));) {
		struct rec_key key, parent;
		struct record *r;
		bool tmp;

		if (!rec_file_name_parse(e->d_name, &key, &tmp))
			continue;
		if (tmp) {
			unlinkat(fd, e->d_name, 0);
			continue;
		}
		r = calloc(1, sizeof(*r) + s->parts.world_size * sizeof(r->shares[0]));
		if (r && count == cap) {
			/* out of memory: the records found so far are loaded, the rest wait */
			size_t want = cap ? 2 * cap : 64;
			struct record **grown = realloc(found, want * sizeof(*found));

			if (grown) {
				found = grown;
				cap = want;
			}
		}
		if (!r || count == cap) {
			free(r);
			break;
		}
		r->scope = s;
		r->key = key;
		r->world_size = s->parts.world_size;
		r->on_disk = true;
		if (disk_record_read(m, s, r, &parent)) {
			disk_unlink(m, r); /* a share missing or unreadable: the record goes */
			free(r);
			continue;
		}
		r->parent_key = parent;
		found[count++] = r;
	}
	closedir(d);
	/* parents first, then each record links to its parent or goes */
	if (count) /* found is NULL when the directory holds no record */
		qsort(found, count, sizeof(*found), cmp_consumed);
	for (size_t i = 0; i < count; i++) {
		struct record *r = found[i];

		if (r->parent_key.consumed) {
			r->parent = record_find(s, &r->parent_key);
			if (!r->parent) {
				disk_unlink(m, r);
				free(r);
				continue;
			}
		}
		r->committed = true;
		m->stats.disk_used_bytes += record_bytes(r);
		r->created_ns = now; /* ages count from this start */
		r->used_ns = now;
		sel_chain_push(&s->buckets[key_bucket(&r->key)], &r->hash);
		if (r->parent)
			r->parent->children++;
		sel_list_push_tail(&m->lru, &r->lru);
		age_push(m, r);
		s->records++;
		m->stats.records++;
	}
	free(found);
}

/*
 * Finds the scopes of a previous start on the disk tier: each directory
 * whose "scope" file, under this manager's name, hashes to the
 * directory's name (R-POOL-16). Another name's scopes are left alone.
 */
static void disk_scan(struct pool_manager *m)
{
	struct pool_attach *a = &m->attach;
	uint8_t *body = m->attach_body;
	int fd = dup(m->dir_fd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	for (struct dirent *e; (e = readdir(d));) {
		char why[256];
		uint8_t id[POOL_SCOPE_BYTES];
		struct scope *s;
		ssize_t n;
		int f, sd;

		if (strlen(e->d_name) != 2 * POOL_SCOPE_BYTES ||
		    !sel_hex_decode(id, e->d_name, POOL_SCOPE_BYTES))
			continue;
		sd = openat(m->dir_fd, e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		f = sd < 0 ? -1 : openat(sd, "scope", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		n = f < 0 ? -1 : pread(f, body, sizeof(m->attach_body), 0);
		if (f >= 0)
			close(f);
		if (sd >= 0)
			close(sd);
		if (n < 0 || pool_attach_decode(body, (uint32_t)n, a, why, sizeof(why)))
			continue;
		{
			uint8_t computed[POOL_SCOPE_BYTES];

			pool_scope_of_attach(m->name, body, (uint32_t)n, computed);
			if (memcmp(computed, id, POOL_SCOPE_BYTES))
				continue; /* another pool name's, or not a scope */
		}
		s = scope_get(m, id, a, NULL, 0);
		if (s && s->dir_fd >= 0)
			disk_scan_scope(m, s);
	}
	closedir(d);
	/* a smaller --disk-limit than the last start's: the least recently found go */
	disk_make_room(m, 0);
	if (m->stats.records)
		sel_info("pool: the disk tier holds %" PRIu64 " records (%" PRIu64 " bytes)",
			 m->stats.records, m->stats.disk_used_bytes);
}

/* ---- The loop ---- */

/* Any RDMA WRITE posted and not yet completed: the loop polls for it. */
static bool rdma_in_flight(const struct pool_manager *m)
{
	for (uint32_t i = 0; i < m->conn_count; i++)
		if (m->conns[i]->rdma && m->conns[i]->rdma->posted_count)
			return true;
	return false;
}

/* stop_fd was written: the manager drains (R-POOL-45). */
static void stop_read(struct pool_manager *m, uint64_t now, uint64_t *drain_until)
{
	uint64_t v;

	if (read(m->stop_fd, &v, sizeof(v)) < 0) {
		/* nothing to drain: the flag below is what counts */
	}
	if (m->draining)
		return;
	sel_info("pool: draining (R-POOL-45)");
	m->draining = true;
	/* R-POOL-45: live claims and puts have until their deadlines */
	*drain_until = now;
	for (struct put *p = put_of(m->puts.head); p; p = put_of(p->link.next))
		if (p->deadline_ns > *drain_until)
			*drain_until = p->deadline_ns;
	for (struct claim *cl = claim_of(m->claims.head); cl; cl = claim_of(cl->link.next))
		if (cl->deadline_ns > *drain_until)
			*drain_until = cl->deadline_ns;
}

/*
 * Waits RDMA_POLL_US at most for the loop's events (a write in flight):
 * in epoll_pwait2, or where the kernel has none in ppoll on the epoll set
 * and then epoll_wait without waiting. Returns as epoll_wait.
 */
static int loop_wait_short(struct pool_manager *m, int max)
{
	struct timespec wait = { .tv_nsec = RDMA_POLL_US * 1000l };
	struct pollfd p = { .fd = m->epoll_fd, .events = POLLIN };
	int n;

	if (!m->no_pwait2) {
		n = epoll_pwait2(m->epoll_fd, m->events, max, &wait, NULL);
		if (n >= 0 || errno != ENOSYS)
			return n;
		m->no_pwait2 = true;
		sel_info("pool: no epoll_pwait2 in this kernel: RDMA completions are "
			 "waited for in ppoll");
	}
	n = ppoll(&p, 1, &wait, NULL);
	if (n <= 0)
		return n;
	return epoll_wait(m->epoll_fd, m->events, max, 0);
}

/* What c's connection is watched for: reads unless closing or backlogged, writes while any wait. */
static void conn_watch(struct pool_manager *m, struct conn *c)
{
	uint32_t want = (c->closing || out_backlogged(c) ? 0 : EPOLLIN) |
			(out_pending(c) ? EPOLLOUT : 0);
	struct epoll_event ev = { .events = want, .data.ptr = c };

	if (want == c->events_set)
		return;
	if (epoll_ctl(m->epoll_fd, EPOLL_CTL_MOD, c->fd, &ev)) {
		/* not watched as it should be: the connection ends (R-POOL-6) */
		sel_warn("pool: epoll_ctl: %s; a connection ends", strerror(errno));
		c->closing = true;
		out_drop(c);
		return;
	}
	c->events_set = want;
}

int pool_manager_run(struct pool_manager *m)
{
	uint64_t drain_until = 0;

	for (;;) {
		uint64_t now = sel_monotonic_ns();
		bool accepting = false;
		int n;

		pthread_mutex_lock(&m->stats_lock);
		if (now >= m->timers_due_ns)
			timers(m, now);
		for (uint32_t i = 0; i < m->conn_count; i++)
			if (m->conns[i]->state == C_SERVING)
				streams_fill(m, m->conns[i], now);
		pthread_mutex_unlock(&m->stats_lock);
		if (m->draining && (sel_list_empty(&m->puts) && sel_list_empty(&m->claims) ? true : now > drain_until)) {
			for (uint32_t i = 0; i < m->conn_count; i++)
				if (m->conns[i]->keyed) {
					send_frame(m->conns[i], POOL_MSG_BYE, NULL, 0, NULL, 0);
					conn_write(m->conns[i], now);
				}
			return 0;
		}
		for (uint32_t i = 0; i < m->conn_count; i++)
			conn_watch(m, m->conns[i]);
		if (rdma_in_flight(m)) /* a write in flight: its completion is polled every RDMA_POLL_US */
			n = loop_wait_short(m, (int)(3 + m->conn_count));
		else {
			/* until the next deadline is due, rounded up: never early, no spin */
			uint64_t t = sel_monotonic_ns();
			int wait_ms = m->timers_due_ns > t
					      ? (int)((m->timers_due_ns - t + 999999) / 1000000)
					      : 0;

			n = epoll_wait(m->epoll_fd, m->events, (int)(3 + m->conn_count), wait_ms);
		}
		if (n < 0 && errno != EINTR)
			return -errno;
		now = sel_monotonic_ns();
		pthread_mutex_lock(&m->stats_lock);
		/*
		 * The ready connections first, each named by its event: none is
		 * freed before the end of the turn, and accept_all (which may free
		 * one for room) runs after them. Those accepted now are served
		 * from the next turn.
		 */
		for (int k = 0; k < n; k++) {
			struct conn *c = m->events[k].data.ptr;
			uint32_t ev = m->events[k].events;

			if (c == (void *)&m->listen_fd) {
				accepting = true;
				continue;
			}
			if (c == (void *)&m->disk.done_fd) {
				disk_done(m, now);
				continue;
			}
			if (c == (void *)&m->stop_fd) {
				stop_read(m, now, &drain_until);
				continue;
			}
			if (!conn_turn(m, c, now, ev & (EPOLLIN | EPOLLHUP | EPOLLERR)))
				continue;
			/*
			 * Frames read ahead while its output was backlogged wait in
			 * its receiver, which epoll cannot see: taken now that the
			 * output drained.
			 */
			if (pool_rx_buffered(&c->rx) && !c->closing && !out_backlogged(c))
				conn_turn(m, c, now, true);
		}
		if (accepting)
			accept_all(m, now);
		for (uint32_t i = 0; i < m->conn_count;) {
			struct conn *c = m->conns[i];

			if (c->closing && !out_pending(c)) {
				conn_free(m, i);
				continue;
			}
			i++;
		}
		pthread_mutex_unlock(&m->stats_lock);
	}
}

void pool_manager_stop(struct pool_manager *m)
{
	uint64_t one = 1;

	if (write(m->stop_fd, &one, sizeof(one)) < 0) {
		/* the counter is saturated: a stop is pending already */
	}
}

void pool_manager_stats(struct pool_manager *m, struct pool_manager_stats *out)
{
	pthread_mutex_lock(&m->stats_lock);
	*out = m->stats;
	pthread_mutex_unlock(&m->stats_lock);
}

uint16_t pool_manager_port(const struct pool_manager *m)
{
	return m->port;
}

const char *pool_manager_arena_path(const struct pool_manager *m)
{
	return m->arena_path;
}

/* Splits "host:port", "[v6]:port" or ":port"; host "" binds every address. */
static int split_address(const char *text, char *host, size_t host_size, char *port,
			 size_t port_size)
{
	const char *colon = strrchr(text, ':');
	size_t host_len;

	if (!colon || !colon[1] || strlen(colon + 1) >= port_size)
		return -EINVAL;
	host_len = (size_t)(colon - text);
	if (host_len && text[0] == '[') {
		if (text[host_len - 1] != ']')
			return -EINVAL;
		text++;
		host_len -= 2;
	}
	if (host_len >= host_size)
		return -EINVAL;
	memcpy(host, text, host_len);
	host[host_len] = '\0';
	snprintf(port, port_size, "%s", colon + 1);
	return 0;
}

static int listen_on(struct pool_manager *m, const char *address, char *why, size_t why_size)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char host[256], port[16];
	int fd = -1, one = 1, ret;

	if (split_address(address, host, sizeof(host), port, sizeof(port)))
		return sel_fail(-EINVAL, why, why_size, "--listen %s: expected host:port", address);
	ret = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (ret)
		return sel_fail(-EINVAL, why, why_size, "--listen %s: %s", address,
				gai_strerror(ret));
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		ret = -errno;
		goto err_free;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 128) ||
	    getsockname(fd, (struct sockaddr *)&ss, &len)) {
		ret = -errno;
		goto err_close;
	}
	m->listen_fd = fd;
	m->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						 : ((struct sockaddr_in *)&ss)->sin_port);
	freeaddrinfo(res);
	return 0;
err_close:
	close(fd);
err_free:
	freeaddrinfo(res);
	return sel_fail(ret, why, why_size, "--listen %s: %s", address, strerror(-ret));
}

/*
 * Removes the arenas that managers of this name left behind when they were
 * killed (a kill -9 cannot unlink; each such file holds its size of memory
 * in /dev/shm until removed): every "<prefix><pid>-<n>" whose pid no longer
 * runs. A live pid, one this user may not signal, or a name of another
 * shape is left alone.
 */
static void arena_sweep_stale(const char *prefix)
{
	size_t len = strlen(prefix);
	struct dirent *e;
	DIR *d = opendir("/dev/shm");
	uint32_t removed = 0;

	if (!d)
		return;
	while ((e = readdir(d))) {
		const char *at = e->d_name + len;
		char *end;
		long pid;

		if (strncmp(e->d_name, prefix, len) != 0 || *at < '0' || *at > '9')
			continue;
		pid = strtol(at, &end, 10);
		if (*end != '-' || end[1] < '0' || end[1] > '9')
			continue;
		(void)strtoul(end + 1, &end, 10);
		if (*end || pid <= 0 || pid == (long)getpid())
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		if (unlinkat(dirfd(d), e->d_name, 0) == 0)
			removed++;
	}
	closedir(d);
	if (removed)
		sel_info("pool: removed %u arena%s of managers of this name that no longer run",
			 removed, removed == 1 ? "" : "s");
}

static int arena_create(struct pool_manager *m, char *why, size_t why_size)
{
	static atomic_uint counter;
	uint8_t header[POOL_ARENA_HEADER_BYTES];
	int fd, ret;

	snprintf(m->arena_path, sizeof(m->arena_path), "/dev/shm/selene-pool-%s-%d-%u", m->name,
		 (int)getpid(), atomic_fetch_add(&counter, 1));
	for (char *p = m->arena_path + 9; *p; p++)
		if (*p == '/')
			*p = '_';
	{
		/* the path's part before "<pid>-<n>": "selene-pool-<name>-" */
		char prefix[sizeof(m->arena_path)];
		const char *pid_at = strrchr(m->arena_path, '-');

		while (pid_at > m->arena_path && pid_at[-1] != '-')
			pid_at--;
		snprintf(prefix, sizeof(prefix), "%.*s", (int)(pid_at - (m->arena_path + 9)),
			 m->arena_path + 9);
		arena_sweep_stale(prefix);
	}
	{
		uint8_t nonce[CLUSTER_NONCE_BYTES];

		if (cluster_nonce_fill(nonce) && cluster_nonce_fill(nonce))
			return sel_fail(-EIO, why, why_size, "no random bytes for the arena id");
		memcpy(m->arena_id, nonce, POOL_ARENA_ID_BYTES);
	}
	m->arena_bytes = POOL_ARENA_HEADER_BYTES + sel_align_up(m->config.memory_bytes, 4096);
	fd = open(m->arena_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return sel_fail(-errno, why, why_size, "arena %s: %s", m->arena_path,
				strerror(errno));
	if (ftruncate(fd, (off_t)m->arena_bytes)) {
		ret = -errno;
		goto err_unlink;
	}
	m->arena = mmap(NULL, m->arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m->arena == MAP_FAILED) {
		m->arena = NULL;
		ret = -errno;
		goto err_unlink;
	}
	close(fd);
	pool_arena_header_encode(header, m->arena_id, 1, m->arena_bytes);
	memcpy(m->arena, header, sizeof(header));
	/* shares are placed past the header: offsets below count from there */
	m->arena += POOL_ARENA_HEADER_BYTES;
	m->free_list[0] = (struct pool_place){ 0, m->arena_bytes - POOL_ARENA_HEADER_BYTES };
	m->free_count = 1;
	return 0;
err_unlink:
	close(fd);
	unlink(m->arena_path);
	return sel_fail(ret, why, why_size, "arena %s of %" PRIu64 " bytes: %s", m->arena_path,
			m->arena_bytes, strerror(-ret));
}

int pool_manager_open(const struct pool_manager_config *config, struct pool_manager **out,
		      char *why, size_t why_size)
{
	struct pool_manager *m;
	size_t name_len = config->name ? strlen(config->name) : 0;
	int ret;

	if (name_len < 1 || name_len > POOL_NAME_BYTES_MAX)
		return sel_fail(-EINVAL, why, why_size, "--name must be 1 .. %u bytes",
				POOL_NAME_BYTES_MAX);
	for (size_t i = 0; i < name_len; i++)
		if (config->name[i] < 0x21 || config->name[i] > 0x7e)
			return sel_fail(-EINVAL, why, why_size,
					"--name must be printable ASCII without spaces");
	if (config->memory_bytes < (1u << 20))
		return sel_fail(-EINVAL, why, why_size, "--memory must be at least 1 MiB");
	if (config->window_bytes && (config->window_bytes < POOL_WINDOW_BYTES_MIN ||
				     config->window_bytes > POOL_WINDOW_BYTES_MAX ||
				     !sel_is_aligned(config->window_bytes, 4096)))
		return sel_fail(-EINVAL, why, why_size, "window bytes %u out of range",
				config->window_bytes);
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->free_list = calloc(EXTENTS_MAX, sizeof(m->free_list[0]));
	if (!m->free_list) {
		free(m);
		return -ENOMEM;
	}
	m->config = *config;
	m->disk.done_fd = -1;
	if (!m->config.window_bytes)
		m->config.window_bytes = POOL_WINDOW_BYTES_DEFAULT;
	if (!m->config.connections_max || m->config.connections_max > POOL_CONNECTIONS_MAX)
		m->config.connections_max = POOL_CONNECTIONS_MAX;
	if (!m->config.claim_setup_ms)
		m->config.claim_setup_ms = POOL_CLAIM_SETUP_MS;
	if (!m->config.export_ms || m->config.export_ms > POOL_EXPORT_MS)
		m->config.export_ms = POOL_EXPORT_MS;
	if (m->config.claim_setup_ms > POOL_CLAIM_SETUP_MS_MAX)
		m->config.claim_setup_ms = POOL_CLAIM_SETUP_MS_MAX;
	m->config.listen = NULL;
	m->config.name = NULL;
	memcpy(m->name, config->name, name_len + 1);
	m->listen_fd = -1;
	m->dir_fd = -1;
	m->next_put_id = 1;
	m->next_export_id = 1;
	m->next_stamp = 1;
	pthread_mutex_init(&m->stats_lock, NULL);
	pool_rdma_fallback_init(&m->rdma_fallback);
	if (config->rdma) {
		/* R-POOL-90: no device is the stream path, said once */
		pool_rdma_probe(config->rdma_device, &m->rdma_device);
		m->rdma_on = pool_rdma_fallback_probe(&m->rdma_fallback, &m->rdma_device);
	}
	m->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (m->stop_fd < 0) {
		ret = sel_fail(-errno, why, why_size, "eventfd: %s", strerror(errno));
		goto err_free;
	}
	ret = listen_on(m, config->listen ? config->listen : ":0", why, why_size);
	if (ret)
		goto err_close_stop;
	m->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (m->epoll_fd < 0) {
		ret = sel_fail(-errno, why, why_size, "epoll_create1: %s", strerror(errno));
		goto err_close_listen;
	}
	{
		struct epoll_event listener = { .events = EPOLLIN, .data.ptr = &m->listen_fd };
		struct epoll_event stopper = { .events = EPOLLIN, .data.ptr = &m->stop_fd };

		if (epoll_ctl(m->epoll_fd, EPOLL_CTL_ADD, m->listen_fd, &listener) ||
		    epoll_ctl(m->epoll_fd, EPOLL_CTL_ADD, m->stop_fd, &stopper)) {
			ret = sel_fail(-errno, why, why_size, "epoll_ctl: %s", strerror(errno));
			goto err_close_epoll;
		}
	}
	ret = arena_create(m, why, why_size);
	if (ret)
		goto err_close_epoll;
	if (m->rdma_on) {
		char reason[256];

		uint64_t memlock = pool_rdma_memlock_bytes();

		/* R-RDMA-4: the writer's memory, registered once for every connection;
		 * registration pins it, so RLIMIT_MEMLOCK must hold it (R-RDMA-3) */
		if (m->arena_bytes - POOL_ARENA_HEADER_BYTES > memlock) {
			snprintf(reason, sizeof(reason), "registering the arena's %" PRIu64
				 " bytes pins them; RLIMIT_MEMLOCK allows %" PRIu64 " (raise it: "
				 "ulimit -l, or LimitMEMLOCK= in a unit)",
				 m->arena_bytes - POOL_ARENA_HEADER_BYTES, memlock);
			pool_rdma_fallback_note(&m->rdma_fallback, reason);
			m->rdma_on = false;
		} else if (pool_rdma_memory_open(&m->rdma_device, POOL_RDMA_WRITER, m->arena,
						 m->arena_bytes - POOL_ARENA_HEADER_BYTES, NULL,
						 &m->rdma_arena, reason, sizeof(reason))) {
			pool_rdma_fallback_note(&m->rdma_fallback, reason);
			m->rdma_on = false;
		} else {
			sel_info("pool: RDMA claims through %s port %u (%s), the arena registered",
				 m->rdma_device.device_name, m->rdma_device.port_num,
				 m->rdma_device.ethernet ? "RoCE" : "InfiniBand");
		}
	}
	if (config->dir) {
		if (mkdir(config->dir, 0700) && errno != EEXIST) {
			ret = sel_fail(-errno, why, why_size, "--dir %s: %s", config->dir,
				       strerror(errno));
			goto err_close_arena;
		}
		m->dir_fd = open(config->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (m->dir_fd < 0) {
			ret = sel_fail(-errno, why, why_size, "--dir %s: %s", config->dir,
				       strerror(errno));
			goto err_close_arena;
		}
		disk_scan(m);
		m->disk_body = malloc(POOL_CONTROL_BODY_BYTES_MAX);
		if (!m->disk_body || !disk_thread_start(m))
			sel_warn("pool: no disk thread (out of memory or threads): the disk "
				 "tier's I/O runs on the loop's thread");
	}
	*out = m;
	return 0;
err_close_arena:
	pool_rdma_memory_close(m->rdma_arena);
	munmap(m->arena - POOL_ARENA_HEADER_BYTES, m->arena_bytes);
	unlink(m->arena_path);
err_close_epoll:
	close(m->epoll_fd);
err_close_listen:
	close(m->listen_fd);
err_close_stop:
	close(m->stop_fd);
err_free:
	pool_rdma_fallback_destroy(&m->rdma_fallback);
	free(m->free_list);
	free(m);
	return ret;
}

void pool_manager_close(struct pool_manager *m)
{
	if (!m)
		return;
	while (m->conn_count)
		conn_free(m, 0);
	while (!sel_list_empty(&m->puts))
		put_fail(m, put_of(m->puts.head), -ESHUTDOWN, "the manager closed");
	while (!sel_list_empty(&m->claims))
		claim_end(m, claim_of(m->claims.head));
	disk_thread_stop(m); /* its queue runs out first; the spills below run here */
	while (!sel_list_empty(&m->lru))
		if (!evict_one(m))
			break;
	/* records on disk stay there for the next start: drop only the index */
	while (!sel_list_empty(&m->lru)) {
		struct record *r = lru_record(m->lru.head);

		if (!r->on_disk)
			break; /* arena records were evicted above where they could be */
		r->on_disk = false; /* forget, do not unlink */
		for (uint32_t i = 0; i < r->world_size; i++)
			r->shares[i].bytes = 0;
		sel_list_remove(&m->lru, &r->lru);
		free(r);
	}
	for (struct scope *s = m->scopes, *next; s; s = next) {
		next = s->next;
		if (s->dir_fd >= 0)
			close(s->dir_fd);
		SEL_ASSERT(s->holds == 0); /* every session ended above */
		free(s->hold_buckets);
		free(s);
	}
	if (m->dir_fd >= 0)
		close(m->dir_fd);
	pool_rdma_memory_close(m->rdma_arena); /* after every connection's link */
	if (m->arena) {
		munmap(m->arena - POOL_ARENA_HEADER_BYTES, m->arena_bytes);
		unlink(m->arena_path);
	}
	close(m->epoll_fd);
	close(m->listen_fd);
	close(m->stop_fd);
	pthread_mutex_destroy(&m->stats_lock);
	pool_rdma_fallback_destroy(&m->rdma_fallback);
	free(m->disk_body);
	free(m->free_list);
	free(m);
}
