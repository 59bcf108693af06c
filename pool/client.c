/*
 * The pool client: see client.h. One I/O thread per client owns the socket
 * once the handshake is done: it writes queued frames in order and reads
 * every frame, filing answers under their ids for the polling calls and
 * reading claim windows straight into posted slots, verified against the
 * record's checksums (R-POOL-33) before they are handed over.
 */
#include "pool/client.h"

#include "cluster/join.h"
#include "cluster/resolve.h"
#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/xxh.h"
#include "pool/rdma.h"
#include "record/format.h"
#include "selene/selene.h"

#include <errno.h>
#include <stdarg.h>
#include <time.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

/* Bytes of control frames queued before a never-waiting call says full. */
#define OUT_QUEUE_BYTES_MAX (4u << 20)
/*
 * The send queue is allocated at open and never grows: frames' bytes in a
 * ring of OUT_QUEUE_BYTES_MAX plus this reserve, for the frames that are
 * not bounded by it (the I/O thread's heartbeat, BYE, EXPORT_END, RDMA_LEND
 * and RDMA_FREE, and put window heads, one per transfer thread waiting) and
 * for the end of the ring a frame that does not fit there leaves unused (at
 * most one control frame, POOL_CONTROL_BODY_BYTES_MAX).
 */
#define OUT_RING_RESERVE_BYTES (1u << 20)
#define OUT_RING_BYTES (OUT_QUEUE_BYTES_MAX + OUT_RING_RESERVE_BYTES)
_Static_assert(OUT_RING_RESERVE_BYTES >= 4 * (CLUSTER_FRAME_HEADER_BYTES +
					      POOL_CONTROL_BODY_BYTES_MAX),
	       "the reserve holds a wasted end and the unbounded frames");
/* Frames queued at once; the last OUT_ITEMS_RESERVE only for unbounded ones. */
#define OUT_ITEMS_MAX 16384u
#define OUT_ITEMS_RESERVE 1024u
#define SLOTS_PER_SHARE_MAX 64u
#define PUTS_TRACKED_MAX 1024u
/* EXPORTs received and not yet taken (pool_export_next); past it: refused busy. */
#define EXPORTS_QUEUED_MAX (4u * POOL_EXPORTS_LIVE_MAX)

/* One frame waiting to be written: its own bytes, then a caller's data. */
struct out_item {
	size_t offset;  /* its header and body in out_ring */
	size_t span;    /* ring bytes it holds: length, and the end it skipped */
	size_t length, sent;
	const uint8_t *data; /* a put window's data (caller-owned), or NULL */
	size_t data_length;
	uint8_t tag[POOL_TAG_BYTES];
	bool tagged;
	uint64_t claim_id; /* a claim's request: its written time is kept */
};

struct lookup {
	uint64_t ticket;
	bool answered;
	uint32_t count;
	struct pool_chain_entry *chain;
	uint64_t sent_ns;
};

struct claim_req {
	uint64_t id;
	uint64_t sent_ns; /* when CLAIM was queued (R-POOL-52) */
	bool local;    /* sent as CLAIM_LOCAL: a grant comes with places (R-POOL-51) */
	bool claimed;  /* CLAIMED came */
	bool answered; /* CLAIMED came, and a local grant's places */
	int result;
	struct pool_claim_grant grant;
	struct pool_chain_entry *chain;
	struct pool_place *places; /* a local grant's, grant.chain_count of them */
	struct pool_claim_times times; /* queued_ns is sent_ns */
};

struct slot {
	uint8_t *bytes;
	size_t size;
	void *ctx;
};

struct share {
	uint64_t claim_id;
	struct pool_chain_entry *chain;
	uint32_t chain_count;
	uint32_t skip;
	bool places_mode;
	bool rdma_mode; /* pulled in RDMA mode (R-POOL-93) */
	/* CLAIM_END came while windows of it wait for a posted slot: said after them */
	bool end_deferred;
	int end_deferred_result;
	struct slot posted[SLOTS_PER_SHARE_MAX];
	uint32_t posted_count;
	struct pool_window ready[SLOTS_PER_SHARE_MAX];
	uint32_t ready_count;
	struct pool_place *places;
	bool places_in;
	bool ended;
	int result;
	/* verification state of the record being read */
	struct rec_header h;
	bool header_ok;
	uint32_t header_index;
	uint8_t *checksums;
	uint64_t checksum_bytes;
};

struct put_req {
	uint64_t request_id;
	bool answered;
	int result;
	uint64_t put_id;
};

struct put_state {
	uint64_t put_id;
	int share_result; /* 1: pending */
	int outcome;      /* 1: pending */
};

struct pool_client {
	int fd, wake_fd;
	uint32_t rank;
	struct pool_facts facts;
	struct rec_geometry geometry;
	struct rec_identity namespace_id;
	uint8_t kc[POOL_KEY_BYTES];
	uint64_t tx_seq;
	struct pool_rx rx;
	uint8_t *body;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t changed;
	bool stop;
	int failure;
	char failure_why[256];
	/*
	 * The send queue, allocated at open: items in a ring of OUT_ITEMS_MAX
	 * from out_item_head, their bytes in out_ring from out_ring_head to
	 * out_ring_tail (out_ring_used of them). out_queued numbers frames as
	 * they are queued, out_written counts those written whole, so a caller
	 * waits for its frame by number.
	 */
	struct out_item *out_items;
	uint32_t out_item_head, out_item_count;
	uint8_t *out_ring;
	size_t out_ring_head, out_ring_tail, out_ring_used;
	uint64_t out_queued, out_written;
	size_t out_bytes;
	/* where a caller encodes a control body under the lock (body is the reader's) */
	uint8_t *scratch; /* POOL_CONTROL_BODY_BYTES_MAX */
	uint64_t next_id;
	uint32_t rtt_us;
	uint64_t last_sent_ns;
	struct lookup lookups[POOL_LOOKUPS_LIVE_MAX];
	struct claim_req claims[POOL_LOOKUPS_LIVE_MAX];
	struct share shares[POOL_SHARES_LIVE_MAX];
	struct put_req put_reqs[POOL_LOOKUPS_LIVE_MAX];
	struct put_state puts[PUTS_TRACKED_MAX];
	struct share *reading; /* the share the window being read belongs to */
	struct slot reading_slot;
	/*
	 * The I/O thread reads the socket (pool_rx_feed: into rx and the
	 * reading slot, and the frame's checksum) without the lock, so callers
	 * take delivered windows and post slots meanwhile. rx and the reading
	 * slot are the I/O thread's alone then; pool_share_end of the share
	 * being read waits for the read to end (rx_end_waits) before it hands
	 * the slot back.
	 */
	bool rx_unlocked;
	bool rx_end_waits;
	const uint8_t *arena;
	uint64_t arena_bytes;
	struct pool_export exports[EXPORTS_QUEUED_MAX]; /* a ring */
	uint32_t export_head, export_count;
	bool claim_local; /* claims ask for the session rank's places (R-POOL-51) */
	uint64_t last_rx_ns; /* when a byte last came from the manager (R-POOL-52) */
	uint64_t woken_ns;   /* when the I/O thread last began to read (woken, lock taken) */
	uint64_t sent[POOL_MSG_TYPE_LAST + 1]; /* frames sent, by type */
	/*
	 * RDMA claims (R-POOL-90 ..): the slots this rank lends (registered,
	 * rdma_slot_count of rdma_slot_bytes), which of them the manager wrote
	 * and the rank has not freed, and the windows in them that wait for a
	 * posted slot (a ring, in the order the manager said them).
	 */
	bool rdma_off;
	char rdma_device[POOL_RDMA_DEVICE_NAME_BYTES];
	uint32_t rdma_slots_want;
	uint64_t rdma_memory_bytes;
	struct pool_rdma_fallback rdma_fallback;
	struct pool_rdma_link *rdma_link;
	bool rdma_lent;
	uint8_t *rdma_slots;
	uint64_t rdma_slot_bytes, rdma_total_bytes;
	uint32_t rdma_slot_count;
	uint8_t *rdma_held;
	struct pool_rdma_window *rdma_waiting;
	uint32_t rdma_waiting_head, rdma_waiting_count;
};

int pool_secret_load(const char *path, uint8_t secret[POOL_SECRET_BYTES], char *why,
		     size_t why_size)
{
	return cluster_secret_load(path, "pool secret file", secret, why, why_size);
}

static void parts_to_attach(const struct pool_scope_parts *p, struct pool_attach *a)
{
	memset(a, 0, sizeof(*a));
	a->world_size = p->world_size;
	a->namespace_id = p->namespace_id;
	a->layout_digest = p->layout_digest;
	a->page_tokens = p->page_tokens;
	a->plane_count = p->plane_count;
	for (uint32_t i = 0; i < p->world_size && i < REC_WORLD_SIZE_MAX; i++) {
		a->page_bytes[i] = p->page_bytes[i];
		a->row_bytes[i] = p->row_bytes[i];
	}
	memset(a->instance_id, 1, sizeof(a->instance_id));
}

void pool_scope_compute(const char *pool_name, const struct pool_scope_parts *parts,
			uint8_t out[POOL_SCOPE_BYTES])
{
	static struct pool_attach a;
	static uint8_t buf[POOL_ATTACH_FIXED_BYTES + POOL_ATTACH_RANK_BYTES * REC_WORLD_SIZE_MAX];
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	int n;

	pthread_mutex_lock(&lock);
	parts_to_attach(parts, &a);
	n = pool_attach_encode(&a, buf, sizeof(buf));
	SEL_ASSERT(n > 0);
	pool_scope_of_attach(pool_name, buf, (uint32_t)n, out);
	pthread_mutex_unlock(&lock);
}

/* ---- Failure ---- */

static void fail_locked(struct pool_client *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fail_locked(struct pool_client *c, int err, const char *fmt, ...)
{
	va_list ap;

	if (c->failure)
		return;
	c->failure = err;
	va_start(ap, fmt);
	vsnprintf(c->failure_why, sizeof(c->failure_why), fmt, ap);
	va_end(ap);
	pthread_cond_broadcast(&c->changed);
}

/*
 * R-POOL-52: a rank waiting for the manager since since_ns (a grant, its
 * places, a window it has slots for) that heard nothing from it for
 * POOL_NO_PROGRESS_MS ends the connection. True when it did (lock held).
 */
static bool stalled_locked(struct pool_client *c, uint64_t since_ns, const char *waiting,
			   uint64_t claim_id)
{
	uint64_t last = c->last_rx_ns > since_ns ? c->last_rx_ns : since_ns;

	/* a read under way is this side's time (a slow copy, failpoint pool.rx_data) */
	if (c->failure || c->rx_unlocked ||
	    sel_monotonic_ns() - last <= POOL_NO_PROGRESS_MS * 1000000ull)
		return false;
	fail_locked(c, -ETIMEDOUT, "the manager sent nothing for %u ms while claim %" PRIu64
		    " waited for %s (no progress, R-POOL-52)", POOL_NO_PROGRESS_MS, claim_id,
		    waiting);
	return true;
}

int pool_client_status(const struct pool_client *cc, char *why, size_t why_size)
{
	struct pool_client *c = (struct pool_client *)cc;
	int ret;

	pthread_mutex_lock(&c->lock);
	ret = c->failure;
	if (ret && why && why_size)
		snprintf(why, why_size, "%s", c->failure_why);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

static void wake(struct pool_client *c);

void pool_client_cut(struct pool_client *c, const char *why)
{
	pthread_mutex_lock(&c->lock);
	fail_locked(c, -ECONNRESET, "%s", why);
	shutdown(c->fd, SHUT_RDWR);
	wake(c);
	pthread_mutex_unlock(&c->lock);
}

/* ---- Output ---- */

static void wake(struct pool_client *c)
{
	uint64_t one = 1;

	if (write(c->wake_fd, &one, sizeof(one)) < 0) {
		/* saturated: the thread is woken already */
	}
}

/*
 * Takes length contiguous bytes of the ring: their offset in *offset and
 * the ring bytes they hold (with an end skipped to fit) in *span. False
 * when the ring has no such room.
 */
static bool ring_take(struct pool_client *c, size_t length, size_t *offset, size_t *span)
{
	if (!c->out_ring_used)
		c->out_ring_head = c->out_ring_tail = 0;
	if (c->out_ring_used && c->out_ring_tail <= c->out_ring_head) {
		/* wrapped: the room is between tail and head */
		if (c->out_ring_head - c->out_ring_tail < length)
			return false;
		*offset = c->out_ring_tail;
		*span = length;
	} else if (OUT_RING_BYTES - c->out_ring_tail >= length) {
		*offset = c->out_ring_tail;
		*span = length;
	} else if (c->out_ring_head >= length) {
		/* the end is too short: skip it, start again at 0 */
		*offset = 0;
		*span = OUT_RING_BYTES - c->out_ring_tail + length;
	} else {
		return false;
	}
	c->out_ring_tail = *offset + length;
	c->out_ring_used += *span;
	return true;
}

/*
 * Queues a frame (lock held; never waits, allocates nothing): NULL when
 * the queue is full, which for a bounded frame is OUT_QUEUE_BYTES_MAX of
 * control frames or all but OUT_ITEMS_RESERVE items; an unbounded frame
 * may take the reserve. Its number is c->out_queued after the call; data
 * is borrowed until out_written reaches it.
 */
static struct out_item *queue_locked(struct pool_client *c, uint16_t type, const uint8_t *body,
				     uint32_t body_length, const uint8_t *data,
				     uint32_t data_length, bool bounded)
{
	size_t length = CLUSTER_FRAME_HEADER_BYTES + body_length, offset, span;
	struct out_item *it;

	if (bounded && (c->out_bytes + body_length > OUT_QUEUE_BYTES_MAX ||
			c->out_item_count >= OUT_ITEMS_MAX - OUT_ITEMS_RESERVE))
		return NULL;
	if (c->out_item_count == OUT_ITEMS_MAX || !ring_take(c, length, &offset, &span))
		return NULL;
	it = &c->out_items[(c->out_item_head + c->out_item_count++) % OUT_ITEMS_MAX];
	*it = (struct out_item){ .offset = offset, .span = span, .length = length, .data = data,
				 .data_length = data_length, .tagged = true };
	pool_frame_build(c->kc, POOL_TO_MANAGER, c->tx_seq++, type, body, body_length, data,
			 data_length, c->out_ring + offset, it->tag);
	c->sent[type]++;
	if (body_length)
		memcpy(c->out_ring + offset + CLUSTER_FRAME_HEADER_BYTES, body, body_length);
	c->out_queued++;
	c->out_bytes += it->length;
	return it;
}

/* The same, and the I/O thread woken to write it. */
static struct out_item *enqueue_locked(struct pool_client *c, uint16_t type, const uint8_t *body,
				       uint32_t body_length, const uint8_t *data,
				       uint32_t data_length, bool bounded)
{
	struct out_item *it = queue_locked(c, type, body, body_length, data, data_length, bounded);

	if (it)
		wake(c);
	return it;
}

static int flush_locked(struct pool_client *c, bool by_caller);

/*
 * Queues a control frame of a caller (claim_id: a claim's request, whose
 * written time is kept); SEL_EQUEUEFULL, or the failure. Where it is the
 * only frame queued, so the I/O thread holds no part of the queue, the
 * caller writes it itself: one non-blocking sendmsg under the lock, as
 * the I/O thread writes. The I/O thread is woken only where part of it
 * is left (or the write failed), so a request costs no eventfd write, no
 * wake-up of the I/O thread and no wait of that thread for this lock.
 */
static int send_control_as(struct pool_client *c, uint16_t type, const uint8_t *body,
			   int length, uint64_t claim_id)
{
	struct out_item *it;
	uint64_t written = c->out_written;
	int ret;

	SEL_ASSERT(length > 0);
	if (c->failure)
		return c->failure;
	it = queue_locked(c, type, body, (uint32_t)length, NULL, 0, true);
	if (!it)
		return SEL_EQUEUEFULL;
	it->claim_id = claim_id;
	if (c->out_item_count == 1 && !pthread_equal(pthread_self(), c->thread)) {
		ret = flush_locked(c, true);
		if (ret)
			fail_locked(c, ret, "writing to the manager: %s", strerror(-ret));
		else if (c->out_written != written)
			return 0;
	}
	wake(c);
	return 0;
}

static int send_control(struct pool_client *c, uint16_t type, const uint8_t *body, int length)
{
	return send_control_as(c, type, body, length, 0);
}

/* The oldest queued frame is written whole: its item and ring bytes go. */
static void dequeue_locked(struct pool_client *c)
{
	struct out_item *it = &c->out_items[c->out_item_head];

	c->out_ring_head = it->offset + it->length;
	c->out_ring_used -= it->span;
	c->out_bytes -= it->length;
	c->out_item_head = (c->out_item_head + 1) % OUT_ITEMS_MAX;
	c->out_item_count--;
	c->out_written++;
}

static struct claim_req *claim_find(struct pool_client *c, uint64_t id);

/* Writes what it can of the queue (the I/O thread, or a caller: send_control_as; lock held). */
static int flush_locked(struct pool_client *c, bool by_caller)
{
	while (c->out_item_count) {
		struct out_item *it = &c->out_items[c->out_item_head];
		struct iovec iov[3];
		int count = 0;
		size_t at = it->sent, total = it->length + it->data_length + POOL_TAG_BYTES;
		ssize_t n;

		if (at < it->length)
			iov[count++] = (struct iovec){ c->out_ring + it->offset + at, it->length - at };
		if (it->data_length && at < it->length + it->data_length) {
			size_t off = at > it->length ? at - it->length : 0;

			iov[count++] = (struct iovec){ (void *)(it->data + off), it->data_length - off };
		}
		{
			size_t tag_at = it->length + it->data_length;
			size_t off = at > tag_at ? at - tag_at : 0;

			iov[count++] = (struct iovec){ it->tag + off, POOL_TAG_BYTES - off };
		}
		{
			struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)count };
			int fp = SEL_FAILPOINT(SEL_FP_POOL_TX);

			if (fp < 0) {
				errno = -fp;
				n = -1;
			} else {
				n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
			}
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n <= 0)
			return -errno ? -errno : -EPIPE;
		it->sent += (size_t)n;
		c->last_sent_ns = sel_monotonic_ns();
		if (it->sent < total)
			continue;
		if (it->claim_id) {
			struct claim_req *q = claim_find(c, it->claim_id);

			if (q) {
				q->times.written_ns = c->last_sent_ns;
				q->times.by_caller = by_caller;
			}
		}
		dequeue_locked(c);
		/* a put window's caller waits for its frame's number */
		pthread_cond_broadcast(&c->changed);
	}
	return 0;
}

/* ---- Lookups, claims, puts: the tables ---- */

static struct lookup *lookup_find(struct pool_client *c, uint64_t ticket)
{
	for (uint32_t i = 0; i < POOL_LOOKUPS_LIVE_MAX; i++)
		if (c->lookups[i].ticket == ticket && ticket)
			return &c->lookups[i];
	return NULL;
}

static struct claim_req *claim_find(struct pool_client *c, uint64_t id)
{
	for (uint32_t i = 0; i < POOL_LOOKUPS_LIVE_MAX; i++)
		if (c->claims[i].id == id && id)
			return &c->claims[i];
	return NULL;
}

static struct share *share_find(struct pool_client *c, uint64_t id)
{
	for (uint32_t i = 0; i < POOL_SHARES_LIVE_MAX; i++)
		if (c->shares[i].claim_id == id && id)
			return &c->shares[i];
	return NULL;
}

static struct put_req *put_req_find(struct pool_client *c, uint64_t id)
{
	for (uint32_t i = 0; i < POOL_LOOKUPS_LIVE_MAX; i++)
		if (c->put_reqs[i].request_id == id && id)
			return &c->put_reqs[i];
	return NULL;
}

static struct put_state *put_state_get(struct pool_client *c, uint64_t put_id, bool create)
{
	struct put_state *free_one = NULL;

	for (uint32_t i = 0; i < PUTS_TRACKED_MAX; i++) {
		if (c->puts[i].put_id == put_id)
			return &c->puts[i];
		if (!c->puts[i].put_id && !free_one)
			free_one = &c->puts[i];
	}
	if (!create || !free_one)
		return NULL;
	*free_one = (struct put_state){ .put_id = put_id, .share_result = 1, .outcome = 1 };
	return free_one;
}

static void chain_copy(const struct pool_chain_view *v, struct pool_chain_entry **out)
{
	*out = v->count ? calloc(v->count, sizeof(**out)) : NULL;
	for (uint32_t i = 0; *out && i < v->count; i++)
		pool_chain_view_entry(v, i, &(*out)[i]);
}

/* ---- Reading (I/O thread, lock held) ---- */

static void share_end(struct share *s, int result)
{
	if (!s->ended) {
		s->ended = true;
		s->result = result;
	}
}

/* R-POOL-33: checks one window of s in slot data; 0 or the failure. */
static int window_verify(struct pool_client *c, struct share *s, const struct pool_claim_window *w,
			 const uint8_t *data, uint32_t length, char *why, size_t why_size)
{
	const struct pool_chain_entry *e;
	uint64_t seed;

	if (w->chain_index >= s->chain_count)
		return sel_fail(SEL_EPROTO, why, why_size, "window of record %" PRIu32 " in a "
				"chain of %" PRIu32 " (R-POOL-33)", w->chain_index, s->chain_count);
	e = &s->chain[w->chain_index];
	if (w->section == POOL_SECTION_HEADER) {
		struct rec_expect x = { .namespace_id = &c->namespace_id,
					.fingerprint = &c->geometry.fingerprint,
					.geometry = &c->geometry, .key = &e->key };
		int ret;

		if (w->first != 0 || length != REC_HEADER_BYTES)
			return sel_fail(SEL_EPROTO, why, why_size, "a header window of %" PRIu32
					" bytes (R-POOL-33)", length);
		ret = rec_header_decode(data, &s->h, why, why_size);
		if (!ret)
			ret = rec_header_check_expected(&s->h, &x, why, why_size);
		if (ret)
			return ret;
		if (s->h.first_page_index != e->first_page_index ||
		    s->h.tail_page_count != e->tail_page_count)
			return sel_fail(SEL_EMISMATCH, why, why_size, "record %" PRIu32 "'s header "
					"differs from its chain entry", w->chain_index);
		s->header_ok = true;
		s->header_index = w->chain_index;
		free(s->checksums);
		s->checksum_bytes = 8ull * s->h.tail_page_count;
		s->checksums = s->checksum_bytes ? malloc(s->checksum_bytes) : NULL;
		if (s->checksum_bytes && !s->checksums)
			return -ENOMEM;
		return 0;
	}
	if (!s->header_ok || s->header_index != w->chain_index)
		return sel_fail(SEL_EPROTO, why, why_size, "a window before its record's header "
				"(R-POOL-33)");
	seed = rec_checksum_seed(&s->h.key);
	if (w->section == POOL_SECTION_CHECKSUMS) {
		if ((uint64_t)w->first + length > s->checksum_bytes || w->first % 8 || length % 8)
			return sel_fail(SEL_EPROTO, why, why_size, "checksum window past the "
					"record's %" PRIu64 " bytes (R-POOL-33)", s->checksum_bytes);
		memcpy(s->checksums + w->first, data, length);
		return 0;
	}
	if (w->section == POOL_SECTION_PAGES) {
		if ((uint64_t)w->count * s->h.page_stride != length ||
		    (uint64_t)w->first + w->count > s->h.tail_page_count)
			return sel_fail(SEL_EPROTO, why, why_size, "page window of %" PRIu32
					" pages at %" PRIu32 " (R-POOL-33)", w->count, w->first);
		for (uint32_t k = 0; k < w->count; k++) {
			uint32_t j = w->first + k;

			if (rec_page_checksum(data + (uint64_t)k * s->h.page_stride, s->h.page_stride,
					      seed, s->h.first_page_index + j) !=
			    sel_get_le64(s->checksums + 8ull * j))
				return sel_fail(SEL_ECHECKSUM, why, why_size, "record %" PRIu32
						"'s page %" PRIu32 " fails its checksum (R-POOL-33)",
						w->chain_index, j);
		}
		return 0;
	}
	if (w->first != 0 || length != s->h.row_length ||
	    rec_row_checksum(data, length, seed) != s->h.row_checksum)
		return sel_fail(SEL_ECHECKSUM, why, why_size, "record %" PRIu32 "'s row fails its "
				"checksum (R-POOL-33)", w->chain_index);
	return 0;
}

/* A CLAIM_WINDOW's head is in: finds its slot, or waits for one (returns 1). */
static int on_window_head(struct pool_client *c)
{
	struct pool_claim_window w;
	struct share *s;
	char why[256];
	int ret = pool_claim_window_decode(c->rx.body, c->rx.body_length, c->rx.data_length, &w,
					   why, sizeof(why));

	if (ret) {
		fail_locked(c, ret, "%s", why);
		return ret;
	}
	s = share_find(c, w.claim_id);
	c->reading = NULL;
	if (!s || s->ended)
		return 0; /* dropped */
	if (!s->posted_count)
		return 1; /* wait for a slot */
	if (s->posted[0].size < c->rx.data_length) {
		share_end(s, SEL_ETOOBIG);
		pthread_cond_broadcast(&c->changed);
		return 0;
	}
	c->reading_slot = s->posted[0];
	memmove(&s->posted[0], &s->posted[1], (s->posted_count - 1) * sizeof(s->posted[0]));
	s->posted_count--;
	c->reading = s;
	c->rx.data = c->reading_slot.bytes;
	return 0;
}

static void on_window(struct pool_client *c)
{
	struct share *s = c->reading;
	struct pool_claim_window w;
	char why[256];
	int ret;

	c->reading = NULL;
	if (!s)
		return;
	pool_claim_window_decode(c->rx.body, c->rx.body_length, c->rx.data_length, &w, why,
				 sizeof(why));
	if (s->ended || s->claim_id != w.claim_id)
		return;
	ret = window_verify(c, s, &w, c->reading_slot.bytes, c->rx.data_length, why, sizeof(why));
	if (ret) {
		sel_warn("pool: claim %" PRIu64 ": %s", s->claim_id, why);
		share_end(s, ret);
		/* the slot goes back to the caller through pool_share_end */
		s->posted[s->posted_count++] = c->reading_slot;
		pthread_cond_broadcast(&c->changed);
		return;
	}
	s->ready[s->ready_count++] = (struct pool_window){
		.chain_index = w.chain_index, .section = (enum pool_section)w.section,
		.first = w.first, .count = w.count, .data = c->reading_slot.bytes,
		.bytes = c->rx.data_length, .slot_ctx = c->reading_slot.ctx };
	pthread_cond_broadcast(&c->changed);
}

/*
 * Copies v's places into out (v->count of them). R-POOL-34: every range lies
 * inside the arena WELCOME announced; one that does not (past its end, or
 * an offset and length whose sum wraps) keeps 0 bytes, so that the pull
 * it answers fails (SEL_EPROTO) instead of handing out a place no mapping
 * holds.
 */
static void places_copy(const struct pool_client *c, const struct pool_places_view *v,
			struct pool_place *out)
{
	for (uint32_t i = 0; i < v->count; i++) {
		pool_places_view_place(v, i, &out[i]);
		if (out[i].offset > c->facts.arena_bytes ||
		    out[i].bytes > c->facts.arena_bytes - out[i].offset)
			out[i].bytes = 0;
	}
}

/*
 * R-POOL-51: CLAIM_PLACES right after a local claim's CLAIMED belongs to
 * the grant. True when v was the grant's (*ret: 0, or SEL_EPROTO for places
 * that do not match the chain); false when it is for a rank's pull.
 */
static bool grant_places(struct pool_client *c, const struct pool_places_view *v, char *why,
			 size_t why_size, int *ret)
{
	struct claim_req *q = claim_find(c, v->claim_id);

	*ret = 0;
	if (!q || !q->local || !q->claimed || q->answered)
		return false;
	if (v->count != q->grant.chain_count) {
		*ret = sel_fail(SEL_EPROTO, why, why_size, "CLAIM_PLACES of claim %" PRIu64
				" names %u records of a chain of %u (R-POOL-51)", v->claim_id,
				v->count, q->grant.chain_count);
		return true;
	}
	q->places = calloc(v->count ? v->count : 1, sizeof(*q->places));
	if (q->places)
		places_copy(c, v, q->places);
	q->answered = true;
	q->times.answered_ns = sel_monotonic_ns();
	return true;
}

/* ---- RDMA claims (R-POOL-90 ..) ---- */

static bool rdma_active_locked(struct pool_client *c)
{
	return c->rdma_lent && pool_rdma_fallback_allows(&c->rdma_fallback);
}

static void rdma_release(struct pool_client *c)
{
	pool_rdma_link_close(c->rdma_link);
	c->rdma_link = NULL;
	c->rdma_lent = false;
	if (c->rdma_slots)
		munmap(c->rdma_slots, c->rdma_total_bytes);
	c->rdma_slots = NULL;
	free(c->rdma_held);
	c->rdma_held = NULL;
	free(c->rdma_waiting);
	c->rdma_waiting = NULL;
	c->rdma_waiting_count = 0;
}

/*
 * R-POOL-92: the manager offers RDMA claims. With a device here and a plan
 * that fits, this rank lends its slots (RDMA_LEND); otherwise it sends
 * nothing and says why once (R-POOL-97).
 */
static int on_rdma_offer(struct pool_client *c, const uint8_t *body, uint32_t length, char *why,
			 size_t why_size)
{
	struct pool_rdma_endpoint writer, mine;
	struct pool_rdma_probe probe;
	struct pool_rdma_plan plan;
	uint8_t buf[POOL_RDMA_ENDPOINT_BYTES_MAX];
	uint64_t slot_bytes, memlock, fits;
	uint32_t slots;
	char reason[256];
	int n, ret = pool_rdma_offer_decode(body, length, &writer, why, why_size);

	if (ret)
		return ret;
	if (c->rdma_slots || c->rdma_link)
		return sel_fail(SEL_EPROTO, why, why_size, "RDMA_OFFER twice (R-POOL-91)");
	if (c->rdma_off)
		return 0;
	pool_rdma_probe(c->rdma_device[0] ? c->rdma_device : NULL, &probe);
	if (!pool_rdma_fallback_probe(&c->rdma_fallback, &probe))
		return 0;
	slot_bytes = sel_align_up(pool_client_slot_bytes(c), 4096);
	memlock = pool_rdma_memlock_bytes();
	/* as many of the slots asked for as the budget and RLIMIT_MEMLOCK hold,
	 * at least one (the plan says why when not even that fits) */
	fits = (memlock < c->rdma_memory_bytes ? memlock : c->rdma_memory_bytes) / slot_bytes;
	slots = fits < c->rdma_slots_want ? (uint32_t)fits : c->rdma_slots_want;
	if (slots == 0)
		slots = 1;
	ret = pool_rdma_plan(&probe, slot_bytes, slots, c->rdma_memory_bytes, memlock, &plan,
			     reason, sizeof(reason));
	if (ret)
		goto err_note;
	c->rdma_slots = mmap(NULL, plan.total_bytes, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (c->rdma_slots == MAP_FAILED) {
		c->rdma_slots = NULL;
		snprintf(reason, sizeof(reason), "no memory for %" PRIu64 " bytes of slots",
			 plan.total_bytes);
		goto err_note;
	}
	c->rdma_total_bytes = plan.total_bytes;
	c->rdma_slot_bytes = plan.slot_bytes;
	c->rdma_slot_count = plan.slot_count;
	c->rdma_held = calloc(plan.slot_count, 1);
	c->rdma_waiting = calloc(plan.slot_count, sizeof(*c->rdma_waiting));
	if (!c->rdma_held || !c->rdma_waiting) {
		snprintf(reason, sizeof(reason), "no memory for the slot map");
		goto err_release;
	}
	ret = pool_rdma_link_open(&probe, POOL_RDMA_LENDER, c->rdma_slots, plan.total_bytes, &plan,
				  &c->rdma_link, reason, sizeof(reason));
	if (ret)
		goto err_release;
	ret = pool_rdma_link_connect(c->rdma_link, &writer, reason, sizeof(reason));
	if (ret)
		goto err_release;
	pool_rdma_link_endpoint(c->rdma_link, &mine);
	n = pool_rdma_lend_encode(&mine, buf, sizeof(buf));
	SEL_ASSERT(n > 0);
	if (!enqueue_locked(c, POOL_MSG_RDMA_LEND, buf, (uint32_t)n, NULL, 0, false)) {
		snprintf(reason, sizeof(reason), "the send queue is full for RDMA_LEND");
		goto err_release;
	}
	c->rdma_lent = true;
	return 0;
err_release:
	rdma_release(c);
err_note:
	pool_rdma_fallback_note(&c->rdma_fallback, reason);
	return 0;
}

static bool rdma_waiting_for(const struct pool_client *c, uint64_t claim_id)
{
	for (uint32_t i = 0; i < c->rdma_waiting_count; i++)
		if (c->rdma_waiting[(c->rdma_waiting_head + i) % c->rdma_slot_count].w.claim_id ==
		    claim_id)
			return true;
	return false;
}

/* R-POOL-95: the slot's bytes were copied out; the manager may write it again. */
static void rdma_slot_free(struct pool_client *c, uint32_t slot)
{
	uint8_t buf[POOL_RDMA_FREE_FIXED_BYTES + 4];
	int n = pool_rdma_free_encode(&slot, 1, buf, sizeof(buf));

	SEL_ASSERT(n > 0);
	c->rdma_held[slot] = 0;
	if (!enqueue_locked(c, POOL_MSG_RDMA_FREE, buf, (uint32_t)n, NULL, 0, false))
		fail_locked(c, SEL_EQUEUEFULL, "the send queue is full for RDMA_FREE");
}

/*
 * Hands waiting RDMA windows to their shares (I/O thread, lock held): each
 * is copied from its lent slot into the share's next posted slot, then
 * verified there (R-POOL-96: the window's xxh3, then R-POOL-33's checks),
 * so no byte the far end may still write is ever what the caller gets.
 */
static void rdma_drain(struct pool_client *c)
{
	while (c->rdma_waiting_count && !c->failure) {
		struct pool_rdma_window *x = &c->rdma_waiting[c->rdma_waiting_head];
		struct share *s = share_find(c, x->w.claim_id);
		const uint8_t *src = c->rdma_slots + (uint64_t)x->slot * c->rdma_slot_bytes;
		char why[256];
		int ret;

		if (s && !s->ended) {
			struct slot dst;

			if (!s->posted_count)
				return; /* waits for pool_share_post */
			dst = s->posted[0];
			memmove(&s->posted[0], &s->posted[1],
				(s->posted_count - 1) * sizeof(s->posted[0]));
			s->posted_count--;
			ret = 0;
			if (dst.size < x->data_length)
				ret = sel_fail(SEL_ETOOBIG, why, sizeof(why), "a posted slot of %zu "
					       "bytes holds no window of %" PRIu32, dst.size,
					       x->data_length);
			if (!ret) {
				memcpy(dst.bytes, src, x->data_length);
				if (XXH3_64bits(dst.bytes, x->data_length) != x->data_xxh3)
					ret = sel_fail(SEL_ECHECKSUM, why, sizeof(why), "the window "
						       "in lent slot %" PRIu32 " is not what the "
						       "manager wrote (R-POOL-96)", x->slot);
			}
			if (!ret)
				ret = window_verify(c, s, &x->w, dst.bytes, x->data_length, why,
						    sizeof(why));
			if (ret) {
				sel_warn("pool: claim %" PRIu64 ": %s", s->claim_id, why);
				share_end(s, ret);
				s->posted[s->posted_count++] = dst;
			} else {
				s->ready[s->ready_count++] = (struct pool_window){
					.chain_index = x->w.chain_index,
					.section = (enum pool_section)x->w.section,
					.first = x->w.first, .count = x->w.count, .data = dst.bytes,
					.bytes = x->data_length, .slot_ctx = dst.ctx };
			}
		}
		rdma_slot_free(c, x->slot);
		c->rdma_waiting_head = (c->rdma_waiting_head + 1) % c->rdma_slot_count;
		c->rdma_waiting_count--;
		if (s && s->end_deferred && !rdma_waiting_for(c, s->claim_id)) {
			s->end_deferred = false;
			share_end(s, s->end_deferred_result);
		}
		pthread_cond_broadcast(&c->changed);
	}
}

/* R-POOL-94: a window the manager wrote into a lent slot. */
static int on_rdma_window(struct pool_client *c, const uint8_t *body, uint32_t length, char *why,
			  size_t why_size)
{
	struct pool_rdma_window x;
	int ret = pool_rdma_window_decode(body, length, &x, why, why_size);

	if (ret)
		return ret;
	if (!c->rdma_lent)
		return sel_fail(SEL_EPROTO, why, why_size, "RDMA_WINDOW without lent slots "
				"(R-POOL-94)");
	if (x.slot >= c->rdma_slot_count || c->rdma_held[x.slot] ||
	    x.data_length > c->rdma_slot_bytes)
		return sel_fail(SEL_EPROTO, why, why_size, "RDMA_WINDOW of %" PRIu32 " bytes in "
				"slot %" PRIu32 ", which is not the manager's to write (R-POOL-94)",
				x.data_length, x.slot);
	c->rdma_held[x.slot] = 1;
	c->rdma_waiting[(c->rdma_waiting_head + c->rdma_waiting_count) % c->rdma_slot_count] = x;
	c->rdma_waiting_count++;
	rdma_drain(c);
	return 0;
}

static void on_frame(struct pool_client *c)
{
	const uint8_t *body = c->rx.body;
	uint32_t length = c->rx.body_length;
	char why[256];
	int ret = 0;

	switch (c->rx.header.type) {
	case POOL_MSG_ANSWER: {
		struct pool_chain_view v;
		uint64_t ticket;
		struct lookup *l;

		ret = pool_answer_decode(body, length, &ticket, &v, why, sizeof(why));
		if (ret)
			break;
		l = lookup_find(c, ticket);
		if (l) {
			uint64_t rtt = (sel_monotonic_ns() - l->sent_ns) / 1000;

			c->rtt_us = c->rtt_us ? (uint32_t)((7ull * c->rtt_us + rtt) / 8) : (uint32_t)rtt;
			chain_copy(&v, &l->chain);
			l->count = l->chain ? v.count : 0;
			l->answered = true;
		}
		break;
	}
	case POOL_MSG_CLAIMED: {
		struct pool_claimed cd;
		struct pool_chain_view v;
		struct claim_req *q;

		ret = pool_claimed_decode(body, length, &cd, &v, why, sizeof(why));
		if (ret)
			break;
		q = claim_find(c, cd.claim_id);
		if (q && !q->claimed) {
			q->result = cd.result;
			q->grant.deadline_ms = cd.deadline_ms;
			q->grant.deadline_ns = sel_monotonic_ns() + cd.deadline_ms * 1000000ull;
			q->grant.chain_count = v.count;
			chain_copy(&v, &q->chain);
			q->claimed = true;
			q->times.woken_ns = c->woken_ns;
			q->times.claimed_ns = sel_monotonic_ns();
			/* R-POOL-51: a local grant is whole with its places, the next frame */
			q->answered = !q->local || cd.result != 0;
			if (q->answered)
				q->times.answered_ns = q->times.claimed_ns;
		}
		break;
	}
	case POOL_MSG_CLAIM_END: {
		struct pool_claim_end e;
		struct share *s;

		ret = pool_claim_end_decode(body, length, &e, why, sizeof(why));
		if (ret)
			break;
		s = share_find(c, e.claim_id);
		if (s && s->rdma_mode && e.result == -EIO)
			pool_rdma_fallback_note(&c->rdma_fallback, "the manager's RDMA transfer of "
						"a claim failed (R-POOL-97)");
		if (s && !s->ended && rdma_waiting_for(c, s->claim_id)) {
			s->end_deferred = true;
			s->end_deferred_result = e.result;
		} else if (s) {
			share_end(s, e.result);
		}
		break;
	}
	case POOL_MSG_RDMA_OFFER:
		ret = on_rdma_offer(c, body, length, why, sizeof(why));
		break;
	case POOL_MSG_RDMA_WINDOW:
		ret = on_rdma_window(c, body, length, why, sizeof(why));
		break;
	case POOL_MSG_CLAIM_PLACES: {
		struct pool_places_view v;
		struct share *s;

		ret = pool_claim_places_decode(body, length, &v, why, sizeof(why));
		if (ret)
			break;
		if (grant_places(c, &v, why, sizeof(why), &ret) || ret)
			break;
		s = share_find(c, v.claim_id);
		if (s && s->places_mode && v.count == s->chain_count) {
			s->places = calloc(v.count ? v.count : 1, sizeof(*s->places));
			if (s->places)
				places_copy(c, &v, s->places);
			s->places_in = true;
		}
		break;
	}
	case POOL_MSG_PUT_READY: {
		struct pool_put_ready r;
		struct put_req *q;

		ret = pool_put_ready_decode(body, length, &r, why, sizeof(why));
		if (ret)
			break;
		q = put_req_find(c, r.request_id);
		if (q) {
			q->result = r.result;
			q->put_id = r.put_id;
			q->answered = true;
			if (!r.result)
				put_state_get(c, r.put_id, true);
		}
		break;
	}
	case POOL_MSG_PUT_END: {
		struct pool_put_end e;
		struct put_state *p;

		ret = pool_put_end_decode(body, length, &e, why, sizeof(why));
		if (ret)
			break;
		p = put_state_get(c, e.put_id, true);
		if (!p)
			break;
		/* R-POOL-42: on the session, result 0 without commit is its own share's */
		if (e.result == 0 && !e.commit) {
			p->share_result = 0;
		} else if (c->rank == 0) {
			p->outcome = e.result;
			if (p->share_result == 1)
				p->share_result = e.result;
		} else {
			p->share_result = e.result;
		}
		break;
	}
	case POOL_MSG_EXPORT: {
		struct pool_export x;

		ret = pool_export_decode(body, length, &x, why, sizeof(why));
		if (ret)
			break;
		if (c->rank != 0) {
			ret = sel_fail(SEL_EPROTO, why, sizeof(why), "EXPORT on a connection that "
				       "is not the session (R-POOL-74)");
			break;
		}
		if (c->export_count == EXPORTS_QUEUED_MAX) {
			/* R-POOL-75: answered at once, busy */
			struct pool_export_end e = { .export_id = x.export_id,
						     .result = SEL_EQUEUEFULL };
			uint8_t buf[POOL_EXPORT_END_BYTES];
			int n = pool_export_end_encode(&e, buf, sizeof(buf));

			SEL_ASSERT(n > 0);
			enqueue_locked(c, POOL_MSG_EXPORT_END, buf, (uint32_t)n, NULL, 0, false);
			break;
		}
		c->exports[(c->export_head + c->export_count++) % EXPORTS_QUEUED_MAX] = x;
		break;
	}
	case POOL_MSG_HEARTBEAT:
		break;
	case POOL_MSG_BYE:
		fail_locked(c, -ESHUTDOWN, "the manager said BYE");
		return;
	case POOL_MSG_REFUSE: {
		struct pool_refuse r;

		if (!pool_refuse_decode(body, length, &r, why, sizeof(why)))
			fail_locked(c, r.reason == POOL_REFUSE_SHUTDOWN ? -ESHUTDOWN : SEL_EPROTO,
				    "the manager refused (%s): %s", pool_refuse_reason_name(r.reason),
				    r.text);
		return;
	}
	default:
		ret = sel_fail(SEL_EPROTO, why, sizeof(why), "%s out of place (R-POOL-6)",
			       cluster_grammar_msg_name(&pool_grammar, c->rx.header.type));
	}
	if (ret)
		fail_locked(c, ret, "%s", why);
	pthread_cond_broadcast(&c->changed);
}

/* Reads what the socket has; true when it waits for a slot. */
static bool read_locked(struct pool_client *c)
{
	char why[256];

	for (;;) {
		bool eof;
		int ret;

		if (c->rx.head_given && !c->rx.data && c->reading == NULL && c->rx.data_length &&
		    c->rx.done == CLUSTER_FRAME_HEADER_BYTES + c->rx.body_length) {
			/* a head waiting for a slot */
			ret = on_window_head(c);
			if (ret == 1)
				return true;
		}
		uint64_t done_before = c->rx.done;

		c->rx_unlocked = true;
		pthread_mutex_unlock(&c->lock);
		ret = pool_rx_feed(&c->rx, c->fd, &eof, why, sizeof(why));
		pthread_mutex_lock(&c->lock);
		c->rx_unlocked = false;
		if (ret != POOL_RX_MORE || c->rx.done != done_before)
			c->last_rx_ns = sel_monotonic_ns();
		if (c->rx_end_waits) {
			c->rx_end_waits = false;
			pthread_cond_broadcast(&c->changed);
		}
		if (eof) {
			fail_locked(c, -ECONNRESET, "the manager closed the connection");
			return false;
		}
		if (ret == POOL_RX_MORE)
			return false;
		if (ret < 0) {
			fail_locked(c, ret, "%s", why);
			return false;
		}
		if (ret == POOL_RX_HEAD) {
			if (c->rx.header.type != POOL_MSG_CLAIM_WINDOW) {
				fail_locked(c, SEL_EPROTO, "%s out of place (R-POOL-6)",
					    cluster_grammar_msg_name(&pool_grammar,
								     c->rx.header.type));
				return false;
			}
			ret = on_window_head(c);
			if (ret == 1)
				return true;
			continue;
		}
		if (c->rx.header.type == POOL_MSG_CLAIM_WINDOW)
			on_window(c);
		else
			on_frame(c);
		if (c->failure)
			return false;
	}
}

static void *io_thread(void *arg)
{
	struct pool_client *c = arg;

	pthread_mutex_lock(&c->lock);
	while (!c->stop && !c->failure) {
		bool waiting_slot;
		struct pollfd p[2];
		int ret;

		rdma_drain(c);
		c->woken_ns = sel_monotonic_ns();
		waiting_slot = read_locked(c);
		if (c->failure)
			break;
		ret = flush_locked(c, false);
		if (ret) {
			fail_locked(c, ret, "writing to the manager: %s", strerror(-ret));
			break;
		}
		if (!c->out_item_count && sel_monotonic_ns() - c->last_sent_ns >
					    POOL_HEARTBEAT_MS * 1000000ull) {
			uint8_t hb[POOL_HEARTBEAT_BYTES];

			enqueue_locked(c, POOL_MSG_HEARTBEAT, hb,
				       (uint32_t)pool_heartbeat_encode(sel_monotonic_ns(), hb,
								       sizeof(hb)),
				       NULL, 0, false);
			continue;
		}
		p[0] = (struct pollfd){ .fd = c->fd,
					.events = (short)((waiting_slot ? 0 : POLLIN) |
							  (c->out_item_count ? POLLOUT : 0)) };
		p[1] = (struct pollfd){ .fd = c->wake_fd, .events = POLLIN };
		pthread_mutex_unlock(&c->lock);
		poll(p, 2, 1000);
		if (p[1].revents & POLLIN) {
			uint64_t v;

			if (read(c->wake_fd, &v, sizeof(v)) < 0) {
				/* nothing was pending */
			}
		}
		pthread_mutex_lock(&c->lock);
	}
	pthread_cond_broadcast(&c->changed);
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* ---- Open and close ---- */

static int split_address(const char *text, char *host, size_t host_size, char *port,
			 size_t port_size)
{
	const char *colon = strrchr(text, ':');
	size_t host_len;

	if (!colon || !colon[1] || strlen(colon + 1) >= port_size)
		return -EINVAL;
	host_len = (size_t)(colon - text);
	if (host_len && text[0] == '[') {
		if (host_len < 2 || text[host_len - 1] != ']')
			return -EINVAL;
		text++;
		host_len -= 2;
	}
	if (host_len == 0 || host_len >= host_size)
		return -EINVAL;
	memcpy(host, text, host_len);
	host[host_len] = '\0';
	snprintf(port, port_size, "%s", colon + 1);
	return 0;
}

static int connect_by(const char *address, uint64_t deadline, char *why, size_t why_size)
{
	struct addrinfo *res = NULL;
	char host[256], port[16];
	int fd = -1, ret;

	if (split_address(address, host, sizeof(host), port, sizeof(port)))
		return sel_fail(-EINVAL, why, why_size, "pool address %s is not host:port", address);
	ret = cluster_resolve(host, port, deadline, &res, why, why_size);
	if (ret)
		return ret;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		struct pollfd p;
		socklen_t len = sizeof(ret);
		uint64_t now = sel_monotonic_ns();

		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			continue;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS)
			goto next;
		p = (struct pollfd){ .fd = fd, .events = POLLOUT };
		if (now >= deadline || poll(&p, 1, (int)((deadline - now) / 1000000 + 1)) != 1)
			goto next;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &ret, &len) || ret)
			goto next;
		freeaddrinfo(res);
		return fd;
next:
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return sel_fail(-ECONNREFUSED, why, why_size, "pool manager %s does not answer",
			address);
}

static void set_timeouts(int fd, uint64_t deadline)
{
	uint64_t now = sel_monotonic_ns(), left = deadline > now ? deadline - now : 1000;
	struct timeval tv = { .tv_sec = (time_t)(left / 1000000000ull),
			      .tv_usec = (suseconds_t)(left % 1000000000ull / 1000) };

	if (!tv.tv_sec && !tv.tv_usec)
		tv.tv_usec = 1;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Reads one handshake frame of type want, or a REFUSE (its reason in why). */
static int expect_frame(struct pool_client *c, uint16_t want, char *why, size_t why_size)
{
	int ret = pool_rx_read_frame(&c->rx, c->fd, why, why_size);

	if (ret == 0)
		return sel_fail(-ECONNRESET, why, why_size, "the manager closed the connection");
	if (ret < 0)
		return ret;
	if (c->rx.header.type == POOL_MSG_REFUSE) {
		struct pool_refuse r;

		ret = pool_refuse_decode(c->rx.body, c->rx.body_length, &r, why, why_size);
		if (ret)
			return ret;
		ret = r.reason == POOL_REFUSE_AUTH	   ? -EACCES
		      : r.reason == POOL_REFUSE_SHUTDOWN ? -ESHUTDOWN
		      : r.reason == POOL_REFUSE_BUSY	   ? SEL_EQUEUEFULL
		      : r.reason == POOL_REFUSE_DEADLINE ? -ETIMEDOUT
		      : r.reason == POOL_REFUSE_PROTOCOL ? SEL_EPROTO
							 : SEL_EMISMATCH;
		return sel_fail(ret, why, why_size, "the pool manager refused (%s): %s",
				pool_refuse_reason_name(r.reason), r.text);
	}
	if (c->rx.header.type != want)
		return sel_fail(SEL_EPROTO, why, why_size, "expected %s, got %s (R-POOL-6)",
				cluster_grammar_msg_name(&pool_grammar, want),
				cluster_grammar_msg_name(&pool_grammar, c->rx.header.type));
	return 0;
}

static int handshake(struct pool_client *c, const struct pool_client_config *cfg, char *why,
		     size_t why_size)
{
	static __thread struct pool_attach a;
	uint8_t cn[POOL_NONCE_BYTES], sn[POOL_NONCE_BYTES], mac[POOL_MAC_BYTES];
	struct pool_welcome w;
	struct pool_attached at;
	int ret, n;

	ret = cluster_nonce_fill(cn);
	if (ret)
		return sel_fail(ret, why, why_size, "no nonce: %s", strerror(-ret));
	ret = pool_frame_write(c->fd, NULL, POOL_TO_MANAGER, &c->tx_seq, POOL_MSG_HELLO, cn,
			       POOL_NONCE_BYTES, NULL, 0);
	if (!ret)
		ret = expect_frame(c, POOL_MSG_CHALLENGE, why, why_size);
	if (!ret)
		ret = pool_nonce_decode(POOL_MSG_CHALLENGE, c->rx.body, c->rx.body_length, sn, why,
					why_size);
	if (ret)
		return ret;
	pool_proof_mac(cfg->secret, sn, cn, mac);
	ret = pool_frame_write(c->fd, NULL, POOL_TO_MANAGER, &c->tx_seq, POOL_MSG_PROOF, mac,
			       POOL_MAC_BYTES, NULL, 0);
	if (!ret)
		ret = expect_frame(c, POOL_MSG_WELCOME, why, why_size);
	if (!ret)
		ret = pool_welcome_decode(c->rx.body, c->rx.body_length, &w, why, why_size);
	if (ret)
		return ret;
	pool_welcome_mac(cfg->secret, cn, sn, c->rx.body + POOL_MAC_BYTES,
			 c->rx.body_length - POOL_MAC_BYTES, mac);
	if (!cluster_mac_equal(mac, w.mac))
		return sel_fail(-EACCES, why, why_size, "the pool manager did not prove the pool "
				"secret (R-POOL-10)");
	pool_connection_key(cfg->secret, cn, sn, c->kc);
	c->rx.key = c->kc;
	parts_to_attach(&cfg->scope, &a);
	a.rank = cfg->rank;
	memcpy(a.instance_id, cfg->instance_id, POOL_INSTANCE_ID_BYTES);
	n = pool_attach_encode(&a, c->body, POOL_CONTROL_BODY_BYTES_MAX);
	if (n < 0)
		return sel_fail(-EINVAL, why, why_size, "the scope parts are invalid (R-POOL-14)");
	ret = pool_frame_write(c->fd, c->kc, POOL_TO_MANAGER, &c->tx_seq, POOL_MSG_ATTACH, c->body,
			       (uint32_t)n, NULL, 0);
	if (!ret) {
		uint8_t scope[POOL_SCOPE_BYTES];

		pool_scope_of_attach(w.name, c->body, (uint32_t)n, scope);
		ret = expect_frame(c, POOL_MSG_ATTACHED, why, why_size);
		if (!ret)
			ret = pool_attached_decode(c->rx.body, c->rx.body_length, &at, why, why_size);
		if (!ret && memcmp(scope, at.scope, POOL_SCOPE_BYTES))
			ret = sel_fail(SEL_EMISMATCH, why, why_size, "the manager's scope is not "
				       "ours (R-POOL-17)");
	}
	if (ret)
		return ret;
	snprintf(c->facts.name, sizeof(c->facts.name), "%s", w.name);
	snprintf(c->facts.arena_path, sizeof(c->facts.arena_path), "%s", w.arena_path);
	memcpy(c->facts.arena_id, w.arena_id, POOL_ARENA_ID_BYTES);
	c->facts.arena_generation = w.arena_generation;
	c->facts.arena_bytes = w.arena_bytes;
	c->facts.window_bytes = w.window_bytes;
	c->facts.claims_max = w.claims_max;
	c->facts.puts_max = w.puts_max;
	c->facts.claim_setup_ms = w.claim_setup_ms;
	memcpy(c->facts.scope, at.scope, POOL_SCOPE_BYTES);
	c->facts.scope_records = at.scope_records;
	return 0;
}

int pool_client_open(const struct pool_client_config *cfg, struct pool_client **out,
		     char *why, size_t why_size)
{
	uint64_t deadline = sel_monotonic_ns() +
			    (uint64_t)(cfg->deadline_ms ? cfg->deadline_ms : POOL_HANDSHAKE_MS) *
				    1000000ull;
	struct pool_client *c;
	int ret, one = 1;

	if (!cfg->address || !cfg->secret || !cfg->geometry || cfg->rank >= cfg->scope.world_size ||
	    !cfg->scope.page_bytes || !cfg->scope.row_bytes)
		return sel_fail(-EINVAL, why, why_size, "pool client: incomplete configuration");
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->body = malloc(POOL_CONTROL_BODY_BYTES_MAX);
	/* the send queue, whole: nothing a frame is queued with allocates */
	c->out_items = calloc(OUT_ITEMS_MAX, sizeof(*c->out_items));
	c->out_ring = malloc(OUT_RING_BYTES);
	c->scratch = malloc(POOL_CONTROL_BODY_BYTES_MAX);
	if (!c->body || !c->out_items || !c->out_ring || !c->scratch) {
		ret = -ENOMEM;
		goto err_free;
	}
	c->rank = cfg->rank;
	c->geometry = *cfg->geometry;
	c->namespace_id = cfg->scope.namespace_id;
	c->next_id = 1;
	c->rdma_off = cfg->rdma_off;
	if (cfg->rdma_device)
		snprintf(c->rdma_device, sizeof(c->rdma_device), "%s", cfg->rdma_device);
	c->rdma_slots_want = cfg->rdma_slots ? cfg->rdma_slots : POOL_RDMA_CLIENT_SLOTS_DEFAULT;
	c->rdma_memory_bytes = cfg->rdma_memory_bytes ? cfg->rdma_memory_bytes
						      : POOL_RDMA_CLIENT_MEMORY_DEFAULT;
	pool_rdma_fallback_init(&c->rdma_fallback);
	pool_rx_init(&c->rx, c->body, POOL_CONTROL_BODY_BYTES_MAX, POOL_TO_RANK);
	c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->wake_fd < 0) {
		ret = sel_fail(-errno, why, why_size, "eventfd: %s", strerror(errno));
		goto err_free;
	}
	ret = c->fd = connect_by(cfg->address, deadline, why, why_size);
	if (ret < 0)
		goto err_close_wake;
	ret = fcntl(c->fd, F_SETFL, 0); /* blocking for the handshake, under timeouts */
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	set_timeouts(c->fd, deadline);
	ret = handshake(c, cfg, why, why_size);
	if (ret)
		goto err_close_fd;
	fcntl(c->fd, F_SETFL, O_NONBLOCK);
	c->last_sent_ns = sel_monotonic_ns();
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->changed, NULL);
	ret = -pthread_create(&c->thread, NULL, io_thread, c);
	if (ret) {
		sel_fail(ret, why, why_size, "pool client thread: %s", strerror(-ret));
		goto err_destroy;
	}
	*out = c;
	return 0;
err_destroy:
	pthread_cond_destroy(&c->changed);
	pthread_mutex_destroy(&c->lock);
err_close_fd:
	close(c->fd);
err_close_wake:
	close(c->wake_fd);
err_free:
	pool_rdma_fallback_destroy(&c->rdma_fallback);
	free(c->scratch);
	free(c->out_ring);
	free(c->out_items);
	free(c->body);
	free(c);
	return ret;
}

void pool_client_close(struct pool_client *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	if (!c->failure)
		enqueue_locked(c, POOL_MSG_BYE, NULL, 0, NULL, 0, false);
	pthread_mutex_unlock(&c->lock);
	/* give the BYE a moment to leave, never long */
	for (int i = 0; i < 50; i++) {
		bool empty;

		pthread_mutex_lock(&c->lock);
		empty = !c->out_item_count || c->failure;
		pthread_mutex_unlock(&c->lock);
		if (empty)
			break;
		usleep(1000);
	}
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	wake(c);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->thread, NULL);
	rdma_release(c); /* the queue pair first: no write lands after the slots go */
	pool_rdma_fallback_destroy(&c->rdma_fallback);
	free(c->out_items);
	free(c->out_ring);
	free(c->scratch);
	for (uint32_t i = 0; i < POOL_LOOKUPS_LIVE_MAX; i++) {
		free(c->lookups[i].chain);
		free(c->claims[i].chain);
		free(c->claims[i].places);
	}
	for (uint32_t i = 0; i < POOL_SHARES_LIVE_MAX; i++) {
		free(c->shares[i].chain);
		free(c->shares[i].places);
		free(c->shares[i].checksums);
	}
	if (c->arena)
		munmap((void *)c->arena, c->arena_bytes);
	shutdown(c->fd, SHUT_RDWR);
	close(c->fd);
	close(c->wake_fd);
	pthread_cond_destroy(&c->changed);
	pthread_mutex_destroy(&c->lock);
	free(c->body);
	free(c);
}

const struct pool_facts *pool_client_facts(const struct pool_client *c)
{
	return &c->facts;
}

uint32_t pool_client_rtt_us(const struct pool_client *cc)
{
	struct pool_client *c = (struct pool_client *)cc;
	uint32_t v;

	pthread_mutex_lock(&c->lock);
	v = c->rtt_us;
	pthread_mutex_unlock(&c->lock);
	return v;
}

bool pool_client_rdma_active(const struct pool_client *cc)
{
	struct pool_client *c = (struct pool_client *)cc;
	bool v;

	pthread_mutex_lock(&c->lock);
	v = rdma_active_locked(c);
	pthread_mutex_unlock(&c->lock);
	return v;
}

size_t pool_client_slot_bytes(const struct pool_client *c)
{
	size_t n = c->facts.window_bytes;

	if (c->geometry.page_record_bytes > n)
		n = c->geometry.page_record_bytes;
	if (c->geometry.row_record_bytes > n)
		n = c->geometry.row_record_bytes;
	return n < REC_HEADER_BYTES ? REC_HEADER_BYTES : n;
}

void pool_client_claim_local(struct pool_client *c, bool on)
{
	pthread_mutex_lock(&c->lock);
	c->claim_local = on;
	pthread_mutex_unlock(&c->lock);
}

uint64_t pool_client_frames_sent(const struct pool_client *cc, uint16_t type)
{
	struct pool_client *c = (struct pool_client *)cc;
	uint64_t n = 0;

	pthread_mutex_lock(&c->lock);
	if (type <= POOL_MSG_TYPE_LAST)
		n = c->sent[type];
	pthread_mutex_unlock(&c->lock);
	return n;
}

/* ---- Lookups ---- */

int pool_lookup_begin(struct pool_client *c, const struct rec_key *keys, uint32_t key_count,
		      uint64_t *ticket)
{
	struct lookup *l = NULL;
	int ret, n;

	if (c->rank != 0)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	for (uint32_t i = 0; i < POOL_LOOKUPS_LIVE_MAX && !l; i++)
		if (!c->lookups[i].ticket)
			l = &c->lookups[i];
	ret = c->failure ? c->failure : !l ? SEL_EQUEUEFULL : 0;
	if (ret)
		goto out_unlock;
	*l = (struct lookup){ .ticket = c->next_id++, .sent_ns = sel_monotonic_ns() };
	n = key_count <= POOL_LOOKUP_KEYS_MAX
		    ? pool_lookup_encode(l->ticket, keys, key_count, c->scratch,
					 POOL_CONTROL_BODY_BYTES_MAX)
		    : -EINVAL;
	if (n < 0) {
		l->ticket = 0;
		ret = -EINVAL;
		goto out_unlock;
	}
	ret = send_control(c, POOL_MSG_LOOKUP, c->scratch, n);
	if (ret)
		l->ticket = 0;
	else
		*ticket = l->ticket;
out_unlock:
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int pool_lookup_poll(struct pool_client *c, uint64_t ticket, struct pool_chain_entry *entries,
		     uint32_t entries_max, uint32_t *count)
{
	struct lookup *l;
	int ret = 0;

	pthread_mutex_lock(&c->lock);
	l = lookup_find(c, ticket);
	if (!l) {
		ret = -ENOENT;
	} else if (l->answered) {
		if (l->count > entries_max) {
			ret = -ENOSPC;
		} else {
			if (l->count) /* an empty answer has no chain */
				memcpy(entries, l->chain, l->count * sizeof(*entries));
			*count = l->count;
			free(l->chain);
			*l = (struct lookup){ 0 };
			ret = 1;
		}
	} else if (c->failure) {
		ret = c->failure;
		*l = (struct lookup){ 0 };
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

void pool_lookup_cancel(struct pool_client *c, uint64_t ticket)
{
	struct lookup *l;

	pthread_mutex_lock(&c->lock);
	l = lookup_find(c, ticket);
	if (l) {
		free(l->chain);
		/* an answer still to come finds no ticket and is dropped */
		*l = (struct lookup){ 0 };
	}
	pthread_mutex_unlock(&c->lock);
}

/* ---- Holders and exports: the session ---- */

int pool_holds_send(struct pool_client *c, enum pool_holds_op op, const struct rec_key *keys,
		    uint32_t key_count)
{
	int ret, n;

	if (c->rank != 0 || key_count > POOL_HOLDS_KEYS_MAX)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	n = pool_holds_encode(op, keys, key_count, c->scratch, POOL_CONTROL_BODY_BYTES_MAX);
	ret = n < 0 ? -EINVAL : send_control(c, POOL_MSG_HOLDS, c->scratch, n);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int pool_export_next(struct pool_client *c, struct pool_export *out)
{
	int ret = 0;

	pthread_mutex_lock(&c->lock);
	if (c->export_count) {
		*out = c->exports[c->export_head];
		c->export_head = (c->export_head + 1) % EXPORTS_QUEUED_MAX;
		c->export_count--;
		ret = 1;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int pool_export_end(struct pool_client *c, uint64_t export_id, int result)
{
	struct pool_export_end e = { .export_id = export_id, .result = result };
	uint8_t buf[POOL_EXPORT_END_BYTES];
	int ret, n = pool_export_end_encode(&e, buf, sizeof(buf));

	if (c->rank != 0 || n < 0)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	/* unbounded: one small frame per export the manager asked for */
	ret = c->failure ? c->failure
			 : enqueue_locked(c, POOL_MSG_EXPORT_END, buf, (uint32_t)n, NULL, 0, false)
				   ? 0 : SEL_EQUEUEFULL;
	pthread_mutex_unlock(&c->lock);
	return ret;
}

/* ---- Claims: the session ---- */

int pool_claim_begin(struct pool_client *c, const struct rec_key *key, uint64_t *claim_id)
{
	struct claim_req *q = NULL;
	struct pool_claim m = { .key = *key };
	uint8_t buf[POOL_CLAIM_BYTES];
	int ret;

	if (c->rank != 0)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	for (uint32_t i = 0; i < POOL_LOOKUPS_LIVE_MAX && !q; i++)
		if (!c->claims[i].id)
			q = &c->claims[i];
	ret = c->failure ? c->failure : !q ? SEL_EQUEUEFULL : 0;
	if (!ret) {
		uint64_t now = sel_monotonic_ns();

		m.claim_id = c->next_id++;
		/* filed first: the caller may write the frame itself, which files its time */
		*q = (struct claim_req){ .id = m.claim_id, .local = c->claim_local,
					 .sent_ns = now, .times.queued_ns = now };
		ret = pool_claim_encode(&m, buf, sizeof(buf));
		ret = ret < 0 ? -EINVAL
			      : send_control_as(c, c->claim_local ? POOL_MSG_CLAIM_LOCAL
								   : POOL_MSG_CLAIM,
						buf, ret, m.claim_id);
		if (ret)
			*q = (struct claim_req){ 0 };
		else
			*claim_id = m.claim_id;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int pool_claim_poll(struct pool_client *c, uint64_t claim_id, struct pool_claim_grant *grant,
		    struct pool_chain_entry *entries, uint32_t entries_max, uint32_t *count)
{
	struct claim_req *q;
	int ret = 0;

	pthread_mutex_lock(&c->lock);
	q = claim_find(c, claim_id);
	if (!q) {
		ret = -ENOENT;
	} else if (q->answered) {
		if (q->result) {
			ret = q->result;
			free(q->chain);
			free(q->places);
			*q = (struct claim_req){ 0 };
		} else if (q->grant.chain_count > entries_max) {
			ret = -ENOSPC;
		} else {
			*grant = q->grant;
			if (q->grant.chain_count)
				memcpy(entries, q->chain, q->grant.chain_count * sizeof(*entries));
			*count = q->grant.chain_count;
			ret = 1;
		}
	} else if (c->failure || stalled_locked(c, q->sent_ns, "its grant", claim_id)) {
		ret = c->failure;
		free(q->chain);
		*q = (struct claim_req){ 0 };
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int pool_claim_times(struct pool_client *c, uint64_t claim_id, struct pool_claim_times *out)
{
	struct claim_req *q;
	int ret = -ENOENT;

	pthread_mutex_lock(&c->lock);
	q = claim_find(c, claim_id);
	if (q) {
		*out = q->times;
		ret = 0;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int pool_claim_end(struct pool_client *c, uint64_t claim_id, int result)
{
	struct pool_claim_end e = { .claim_id = claim_id, .result = result };
	struct claim_req *q;
	uint8_t buf[POOL_CLAIM_END_BYTES];
	int ret = 0, n;

	pthread_mutex_lock(&c->lock);
	q = claim_find(c, claim_id);
	if (q) {
		free(q->chain);
		free(q->places);
		*q = (struct claim_req){ 0 };
		n = pool_claim_end_encode(&e, buf, sizeof(buf));
		ret = n < 0 ? -EINVAL : send_control(c, POOL_MSG_CLAIM_END, buf, n);
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

/* ---- Claims: a rank's share ---- */

int pool_share_pull(struct pool_client *c, uint64_t claim_id,
		    const struct pool_chain_entry *chain, uint32_t chain_count,
		    uint32_t skip_pages, bool places)
{
	struct pool_claim_pull p = { .claim_id = claim_id, .skip_pages = skip_pages,
				     .mode = places ? POOL_PULL_PLACES : POOL_PULL_STREAM };
	struct share *s = NULL;
	struct claim_req *q;
	uint8_t buf[POOL_CLAIM_PULL_BYTES];
	int ret, n;

	if (!chain_count || chain_count > POOL_CHAIN_RECORDS_MAX)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	q = places ? claim_find(c, claim_id) : NULL;
	if (q && (!q->places || q->grant.chain_count != chain_count))
		q = NULL;
	for (uint32_t i = 0; i < POOL_SHARES_LIVE_MAX && !s; i++)
		if (!c->shares[i].claim_id)
			s = &c->shares[i];
	ret = c->failure ? c->failure : !s ? SEL_EQUEUEFULL : share_find(c, claim_id) ? -EEXIST : 0;
	if (!ret) {
		memset(s, 0, sizeof(*s));
		s->chain = malloc(chain_count * sizeof(*chain));
		ret = s->chain ? 0 : -ENOMEM;
	}
	if (!ret) {
		memcpy(s->chain, chain, chain_count * sizeof(*chain));
		s->chain_count = chain_count;
		s->skip = skip_pages;
		s->places_mode = places;
		s->claim_id = claim_id;
		if (q) {
			/* R-POOL-51: the grant brought this rank's places; nothing to ask */
			s->places = malloc(chain_count * sizeof(*s->places));
			ret = s->places ? 0 : -ENOMEM;
			if (!ret)
				memcpy(s->places, q->places, chain_count * sizeof(*s->places));
			s->places_in = true;
		} else {
			/* R-POOL-93: a stream by RDMA while this connection lent its slots */
			if (!places && rdma_active_locked(c))
				p.mode = POOL_PULL_RDMA;
			s->rdma_mode = p.mode == POOL_PULL_RDMA;
			n = pool_claim_pull_encode(&p, buf, sizeof(buf));
			ret = n < 0 ? -EINVAL : send_control(c, POOL_MSG_CLAIM_PULL, buf, n);
		}
		if (ret) {
			free(s->places);
			free(s->chain);
			memset(s, 0, sizeof(*s));
		}
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int pool_share_post(struct pool_client *c, uint64_t claim_id, void *slot, size_t slot_bytes,
		    void *slot_ctx)
{
	struct share *s;
	int ret = 0;

	if (slot_bytes < pool_client_slot_bytes(c))
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	s = share_find(c, claim_id);
	if (!s)
		ret = -ENOENT;
	else if (s->posted_count + s->ready_count >= SLOTS_PER_SHARE_MAX)
		ret = SEL_EQUEUEFULL;
	else
		s->posted[s->posted_count++] = (struct slot){ slot, slot_bytes, slot_ctx };
	if (!ret)
		wake(c);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

static int wait_locked(struct pool_client *c, uint64_t deadline_ns)
{
	struct timespec ts;
	uint64_t now = sel_monotonic_ns(), left;

	if (deadline_ns == UINT64_MAX) {
		pthread_cond_wait(&c->changed, &c->lock);
		return 0;
	}
	if (now >= deadline_ns)
		return -ETIMEDOUT;
	left = deadline_ns - now;
	if (left > 100000000ull)
		left = 100000000ull; /* re-check at least every 100 ms */
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(left / 1000000000ull);
	ts.tv_nsec += (long)(left % 1000000000ull);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&c->changed, &c->lock, &ts);
	return 0;
}

static uint64_t deadline_of(int timeout_ms)
{
	return timeout_ms < 0 ? UINT64_MAX : sel_monotonic_ns() + (uint64_t)timeout_ms * 1000000ull;
}

/*
 * Waits a while (at most 100 ms, never past deadline_ns) for the manager on
 * claim_id's behalf, which it has waited for since since_ns: -ETIMEDOUT at
 * the deadline, the connection's failure when the manager stalled while
 * expected to send (R-POOL-52), else 0 (look again).
 */
static int wait_manager_locked(struct pool_client *c, uint64_t deadline_ns, uint64_t since_ns,
			       bool expected, const char *waiting, uint64_t claim_id)
{
	uint64_t step = sel_monotonic_ns() + 100000000ull;

	if (expected && stalled_locked(c, since_ns, waiting, claim_id))
		return c->failure;
	if (wait_locked(c, deadline_ns < step ? deadline_ns : step) &&
	    sel_monotonic_ns() >= deadline_ns)
		return -ETIMEDOUT;
	return 0;
}

int pool_share_next(struct pool_client *c, uint64_t claim_id, struct pool_window *out,
		    int timeout_ms)
{
	uint64_t deadline = deadline_of(timeout_ms), since = sel_monotonic_ns();
	struct share *s;
	int ret;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		s = share_find(c, claim_id);
		if (!s) {
			ret = -ENOENT;
			break;
		}
		if (s->ready_count) {
			*out = s->ready[0];
			memmove(&s->ready[0], &s->ready[1], (s->ready_count - 1) * sizeof(*out));
			s->ready_count--;
			out->last = s->ended && s->result == 0 && s->ready_count == 0;
			ret = 1;
			break;
		}
		if (s->ended) {
			ret = s->result;
			break;
		}
		if (c->failure) {
			ret = c->failure;
			break;
		}
		/* with no slot posted the I/O thread reads nothing: not the manager's stall */
		ret = wait_manager_locked(c, deadline, since, s->posted_count > 0,
					  "a window of its stream", claim_id);
		if (ret)
			break;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int pool_share_claim(struct pool_client *c, uint64_t claim_id,
		     const struct pool_chain_entry *chain, uint32_t chain_count,
		     uint32_t skip_pages, void *const *slots, uint32_t slot_count,
		     size_t slot_bytes, pool_window_fn fn, void *ctx, int deadline_ms)
{
	uint64_t deadline = deadline_of(deadline_ms);
	int ret = pool_share_pull(c, claim_id, chain, chain_count, skip_pages, false);

	for (uint32_t i = 0; !ret && i < slot_count; i++)
		ret = pool_share_post(c, claim_id, slots[i], slot_bytes, slots[i]);
	while (!ret) {
		struct pool_window w;
		uint64_t now = sel_monotonic_ns();
		int left = deadline == UINT64_MAX ? -1
			   : now >= deadline	  ? 0
						  : (int)((deadline - now) / 1000000);

		ret = pool_share_next(c, claim_id, &w, left);
		if (ret == 0)
			break;
		if (ret < 0)
			break;
		ret = fn(ctx, &w);
		if (!ret)
			ret = pool_share_post(c, claim_id, (void *)w.data, slot_bytes, w.slot_ctx);
	}
	pool_share_end(c, claim_id);
	return ret;
}

/*
 * 0, or SEL_EPROTO when one of count places lay past the arena (R-POOL-34:
 * the decoder left it empty).
 */
static int places_inside(const struct pool_place *places, uint32_t count)
{
	for (uint32_t i = 0; i < count; i++)
		if (!places[i].bytes)
			return SEL_EPROTO;
	return 0;
}

int pool_share_places(struct pool_client *c, uint64_t claim_id, struct pool_place *places,
		      uint32_t chain_count, int timeout_ms)
{
	uint64_t deadline = deadline_of(timeout_ms), since = sel_monotonic_ns();
	struct share *s;
	int ret;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		s = share_find(c, claim_id);
		if (!s || !s->places_mode) {
			ret = -ENOENT;
			break;
		}
		if (s->places_in) {
			ret = chain_count != s->chain_count || !s->places ? -EINVAL :
			      places_inside(s->places, chain_count);
			if (!ret)
				memcpy(places, s->places, chain_count * sizeof(*places));
			break;
		}
		if (s->ended) {
			ret = s->result ? s->result : -ENOENT;
			break;
		}
		if (c->failure) {
			ret = c->failure;
			break;
		}
		ret = wait_manager_locked(c, deadline, since, true, "its places", claim_id);
		if (ret)
			break;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

bool pool_claim_is_local(struct pool_client *c, uint64_t claim_id)
{
	struct claim_req *q;
	bool local;

	pthread_mutex_lock(&c->lock);
	q = claim_find(c, claim_id);
	local = q && q->local;
	pthread_mutex_unlock(&c->lock);
	return local;
}

/* A local grant's whole answer into the caller's arrays (lock held): 1 or a failure. */
static int claim_wait_copy(const struct claim_req *q, struct pool_claim_grant *grant,
			   struct pool_chain_entry *entries, struct pool_place *places,
			   uint32_t entries_max, uint32_t *count)
{
	uint32_t n = q->grant.chain_count;

	if (q->result)
		return q->result;
	if (!q->local)
		return -EINVAL; /* no places come with the grant (R-POOL-51) */
	if (n > entries_max)
		return -ENOSPC;
	if (!q->places)
		return -ENOMEM;
	if (places_inside(q->places, n))
		return SEL_EPROTO;
	*grant = q->grant;
	if (n) {
		memcpy(entries, q->chain, n * sizeof(*entries));
		memcpy(places, q->places, n * sizeof(*places));
	}
	*count = n;
	return 1;
}

int pool_claim_wait(struct pool_client *c, uint64_t claim_id, struct pool_claim_grant *grant,
		    struct pool_chain_entry *entries, struct pool_place *places,
		    uint32_t entries_max, uint32_t *count, int timeout_ms)
{
	uint64_t deadline = deadline_of(timeout_ms), since = sel_monotonic_ns();
	struct claim_req *q;
	int ret;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		q = claim_find(c, claim_id);
		if (!q) {
			ret = -ENOENT; /* ended, or its refusal was taken by pool_claim_poll */
			break;
		}
		if (q->answered) {
			ret = claim_wait_copy(q, grant, entries, places, entries_max, count);
			break;
		}
		if (c->failure) {
			ret = c->failure;
			break;
		}
		ret = wait_manager_locked(c, deadline, since, true, "its grant", claim_id);
		if (ret)
			break;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int pool_share_end(struct pool_client *c, uint64_t claim_id)
{
	struct share *s;
	int ret = 0;

	pthread_mutex_lock(&c->lock);
	/* a read into this share's slot is under way: it ends within one read */
	while (c->rx_unlocked && c->reading && c->reading->claim_id == claim_id) {
		c->rx_end_waits = true;
		pthread_cond_wait(&c->changed, &c->lock);
	}
	s = share_find(c, claim_id);
	if (!s) {
		ret = -ENOENT;
	} else {
		if (c->reading == s) {
			/* the window being read goes nowhere: its slot is the caller's again */
			c->reading = NULL;
			c->rx.data = NULL;
		}
		free(s->chain);
		free(s->places);
		free(s->checksums);
		memset(s, 0, sizeof(*s));
		wake(c); /* its waiting RDMA windows' slots go back (rdma_drain) */
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int pool_arena_map(struct pool_client *c, const uint8_t **base, uint64_t *bytes, char *why,
		   size_t why_size)
{
	uint8_t id[POOL_ARENA_ID_BYTES];
	uint64_t generation, size;
	const uint8_t *p;
	struct stat st;
	int fd, ret = 0;

	pthread_mutex_lock(&c->lock);
	if (c->arena)
		goto out;
	if (!c->facts.arena_bytes) {
		ret = sel_fail(-ENOENT, why, why_size, "the manager has no arena");
		goto out_unlock;
	}
	fd = open(c->facts.arena_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		ret = sel_fail(-ENOENT, why, why_size, "arena %s: %s (another host?)",
			       c->facts.arena_path, strerror(errno));
		goto out_unlock;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != c->facts.arena_bytes) {
		close(fd);
		ret = sel_fail(SEL_EMISMATCH, why, why_size, "%s is not the manager's arena",
			       c->facts.arena_path);
		goto out_unlock;
	}
	p = mmap(NULL, c->facts.arena_bytes, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		ret = sel_fail(-errno, why, why_size, "mapping %s: %s", c->facts.arena_path,
			       strerror(errno));
		goto out_unlock;
	}
	ret = pool_arena_header_decode(p, id, &generation, &size, why, why_size);
	if (!ret && (memcmp(id, c->facts.arena_id, POOL_ARENA_ID_BYTES) ||
		     generation != c->facts.arena_generation || size != c->facts.arena_bytes))
		ret = sel_fail(SEL_EMISMATCH, why, why_size, "%s is another arena (R-POOL-50)",
			       c->facts.arena_path);
	if (ret) {
		munmap((void *)p, c->facts.arena_bytes);
		goto out_unlock;
	}
	c->arena = p;
	c->arena_bytes = c->facts.arena_bytes;
out:
	*base = c->arena;
	*bytes = c->arena_bytes;
out_unlock:
	pthread_mutex_unlock(&c->lock);
	return ret;
}

/* ---- Puts ---- */

int pool_put_begin(struct pool_client *c, const struct pool_put_spec *spec,
		   uint64_t *request_id)
{
	struct pool_put_begin b = { .key = spec->key, .parent = spec->parent,
				    .first_page_index = spec->first_page_index,
				    .tail_page_count = spec->tail_page_count, .row = spec->row };
	struct put_req *q = NULL;
	int ret, n;

	if (c->rank != 0)
		return -EINVAL;
	b.world_size = c->geometry.world_size;
	pthread_mutex_lock(&c->lock);
	for (uint32_t i = 0; i < POOL_LOOKUPS_LIVE_MAX && !q; i++)
		if (!c->put_reqs[i].request_id)
			q = &c->put_reqs[i];
	ret = c->failure ? c->failure : !q ? SEL_EQUEUEFULL : 0;
	if (!ret) {
		b.request_id = c->next_id++;
		n = pool_put_begin_encode(&b, spec->share_bytes, c->scratch,
					  POOL_CONTROL_BODY_BYTES_MAX);
		ret = n < 0 ? -EINVAL : send_control(c, POOL_MSG_PUT_BEGIN, c->scratch, n);
	}
	if (!ret) {
		*q = (struct put_req){ .request_id = b.request_id };
		*request_id = b.request_id;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int pool_put_poll(struct pool_client *c, uint64_t request_id, uint64_t *put_id)
{
	struct put_req *q;
	int ret = 0;

	pthread_mutex_lock(&c->lock);
	q = put_req_find(c, request_id);
	if (!q) {
		ret = -ENOENT;
	} else if (q->answered) {
		ret = q->result ? q->result : 1;
		if (!q->result)
			*put_id = q->put_id;
		*q = (struct put_req){ 0 };
	} else if (c->failure) {
		ret = c->failure;
		*q = (struct put_req){ 0 };
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int pool_put_commit(struct pool_client *c, uint64_t put_id, bool commit)
{
	struct pool_put_end e = { .put_id = put_id, .commit = commit };
	uint8_t buf[POOL_PUT_END_BYTES];
	int ret, n;

	if (c->rank != 0)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	n = pool_put_end_encode(&e, buf, sizeof(buf));
	ret = n < 0 ? -EINVAL : send_control(c, POOL_MSG_PUT_END, buf, n);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int pool_put_outcome(struct pool_client *c, uint64_t put_id)
{
	struct put_state *p;
	int ret;

	pthread_mutex_lock(&c->lock);
	p = put_state_get(c, put_id, false);
	if (!p)
		ret = c->failure ? c->failure : -ENOENT;
	else if (p->outcome == 1)
		ret = c->failure ? c->failure : 0;
	else
		ret = p->outcome == 0 ? 1 : p->outcome;
	if (p && ret != 0)
		*p = (struct put_state){ 0 };
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int pool_put_window(struct pool_client *c, uint64_t put_id, uint64_t offset, const void *data,
		    size_t bytes, int timeout_ms)
{
	uint64_t deadline = deadline_of(timeout_ms);
	const uint8_t *p = data;
	int ret = 0;

	pthread_mutex_lock(&c->lock);
	while (bytes && !ret) {
		struct pool_put_window w = { .put_id = put_id, .offset = offset };
		uint8_t head[POOL_PUT_WINDOW_HEAD_BYTES];
		struct put_state *ps = put_state_get(c, put_id, false);
		uint32_t len = bytes > c->facts.window_bytes ? c->facts.window_bytes : (uint32_t)bytes;
		uint64_t number;

		if (c->failure) {
			ret = c->failure;
			break;
		}
		if (ps && ps->share_result != 1 && ps->share_result != 0) {
			ret = ps->share_result; /* the manager ended the put */
			break;
		}
		pool_put_window_encode(&w, head, sizeof(head));
		if (!enqueue_locked(c, POOL_MSG_PUT_WINDOW, head, sizeof(head), p, len, false)) {
			ret = SEL_EQUEUEFULL;
			break;
		}
		number = c->out_queued;
		while (c->out_written < number && !c->failure && !ret)
			ret = wait_locked(c, deadline);
		if (c->out_written < number) {
			/*
			 * The I/O thread still holds it and could read the caller's
			 * buffer after we return: the connection is poisoned instead,
			 * so it writes nothing more (it checks under this lock).
			 */
			if (!ret)
				ret = c->failure;
			fail_locked(c, ret, "a put window did not leave in time; the "
				    "connection is unusable");
			break;
		}
		p += len;
		offset += len;
		bytes -= len;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int pool_put_share_wait(struct pool_client *c, uint64_t put_id, int timeout_ms)
{
	uint64_t deadline = deadline_of(timeout_ms);
	int ret;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct put_state *p = put_state_get(c, put_id, true);

		if (p && p->share_result != 1) {
			ret = p->share_result;
			if (c->rank != 0 || p->outcome != 1)
				*p = (struct put_state){ 0 };
			break;
		}
		if (c->failure) {
			ret = c->failure;
			break;
		}
		if (wait_locked(c, deadline)) {
			ret = -ETIMEDOUT;
			break;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int pool_put_share_fd(struct pool_client *c, uint64_t put_id, int fd, uint64_t length,
		      int timeout_ms)
{
	uint64_t deadline = deadline_of(timeout_ms);
	size_t chunk = c->facts.window_bytes;
	uint8_t *buf = malloc(chunk);
	uint64_t off = 0;
	int ret = 0;

	if (!buf)
		return -ENOMEM;
	while (off < length && !ret) {
		size_t want = length - off > chunk ? chunk : (size_t)(length - off);
		ssize_t n = pread(fd, buf, want, (off_t)off);
		uint64_t now = sel_monotonic_ns();

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = n < 0 ? -errno : -EIO;
			break;
		}
		ret = pool_put_window(c, put_id, off, buf, (size_t)n,
				      deadline == UINT64_MAX ? -1
				      : now >= deadline	     ? 0
							     : (int)((deadline - now) / 1000000));
		off += (uint64_t)n;
	}
	free(buf);
	if (ret)
		return ret;
	{
		uint64_t now = sel_monotonic_ns();

		return pool_put_share_wait(c, put_id,
					   deadline == UINT64_MAX ? -1
					   : now >= deadline	  ? 0
								  : (int)((deadline - now) / 1000000));
	}
}
