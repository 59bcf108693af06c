/*
 * selene bench pool: claims over TCP on loopback beside a raw TCP stream of
 * the same bytes in the same run (issue target: claims >= 0.8 of the raw
 * stream). A manager runs in this process on 127.0.0.1 with a fresh secret
 * (or --manager names a running one); one rank (world size 1) puts one
 * record of --pages pages, then claims it --rounds times. Each claim's
 * windows are read into a slot and verified by the client as R-POOL-33
 * asks (the header, then each page against its checksum entry and the row
 * against the row checksum), then copied to a destination, as a restore
 * copies them to the GPU. Between claims, the same number of bytes crosses a plain loopback
 * TCP connection in writes of the window size, read into a slot of that
 * size and copied to the same destination. Rounds alternate, so both sides
 * see the same machine.
 *
 * The rank is the client library (pool/client.h), as an instance's rank
 * uses it: pool_share_claim with 4 slots, the copy in its callback.
 *
 * Then, with the manager on this host, the same-host claim as a rank runs
 * it (shard/pool_link.c): the arena mapped read-only and registered with
 * --device once (its cost printed); before each claim a lookup (untimed)
 * whose ANSWER gives the places and stamps (R-POOL-22); the claim's copies
 * issued from those places at once, arena -> consecutive device page ids
 * and a state slot by shard/pool_share.c's copies (one strided copy per
 * plane of the run), while CLAIM_LOCAL travels; the grant's stamps and
 * places (R-POOL-36, R-POOL-51) keep them or have a record copied again
 * (the counts printed), waited for once. On the host device the copies
 * are memcpy done as issued, so the grant's "caller saw it" hop holds
 * them. The round trips a claim made and
 * where its time went (grant, copies issued, device sync, end) are
 * printed (the grant is polled without sleeping), and the grant's hops
 * (pool_claim_times; the manager's own where it runs in this process). Beside it one bulk
 * host-to-device copy of the same bytes (the pages' units and the row)
 * from registered host memory to device memory,
 * and the same bytes as one copy per plane (what a plane-major image
 * would copy). Rounds alternate; the first claim's device bytes are read
 * back and compared with the record. Then the same claims into page ids
 * in reverse order, where no two pages form a run (one copy per page
 * plane), alternating with the same bulk copies, their first compared as
 * well.
 *
 * Then what an instance gets: a store of one rank (the public API) on the
 * manager's host, its planes on --device as `selene run` allocates them,
 * attached to the manager, looks the record's tokens up (untimed; the
 * record's key is those tokens') and restores the pool hit with sel_fetch,
 * timed to its FETCHED event with sel_poll called without sleeping,
 * alternating with the bulk copy; its first fetch registers the arena and
 * is not timed, its second's device bytes are compared with the record,
 * and how many of its claims began rank zero's copies before the grant,
 * and what became of each record, is printed.
 */
#include "launch/bench/pool.h"
#include "launch/worker/run.h"

#include "common/base.h"
#include "common/log.h"
#include "pool/client.h"
#include "pool/manager.h"
#include "record/dir.h"
#include "record/file.h"
#include "record/format.h"
#include "record/geometry.h"
#include "record/key.h"
#include "selene/selene.h"
#include "shard/device.h"
#include "shard/pool_link.h"
#include "shard/pool_share.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BENCH_POOL_PLANES 4u
#define BENCH_POOL_UNIT_BYTES (64u << 10)
#define BENCH_POOL_ROW_BYTES (64u << 10)
#define BENCH_POOL_PAGE_TOKENS 16u
#define BENCH_POOL_SLOTS 4u
#define BENCH_POOL_WAIT_MS 60000

struct pool_bench {
	const char *scratch;
	const char *manager_address; /* NULL: a manager in this process */
	const char *secret_file;
	char secret_path[600]; /* the in-process manager's secret, written for the instance */
	const char *device_kind;
	uint32_t pages;
	uint32_t rounds;
	struct rec_geometry g;
	struct rec_identity model; /* an instance's model_identity too */
	struct rec_identity ns;
	struct rec_key key;
	char record_path[512];
	uint64_t image_bytes;  /* the record file */
	uint64_t claim_bytes;  /* what a claim's windows carry: its sections, no padding */
	struct rec_layout layout;
	uint8_t secret[POOL_SECRET_BYTES];
	struct pool_manager *manager;
	char address[300];
	struct pool_client *client;
	struct pool_chain_entry chain[POOL_CHAIN_RECORDS_MAX];
	size_t slot_bytes;
	uint8_t *slots[BENCH_POOL_SLOTS];
	uint8_t *destination; /* image_bytes: where claimed bytes are copied */
	double *claim_s, *raw_s;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, uint32_t n)
{
	qsort(v, n, sizeof(*v), compare_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int make_geometry(struct pool_bench *b)
{
	struct rec_plane planes[BENCH_POOL_PLANES];
	struct rec_geometry_spec spec = {
		.page_tokens = BENCH_POOL_PAGE_TOKENS,
		.page_plane_count = BENCH_POOL_PLANES,
		.page_planes = planes,
		.page_count = b->pages,
		.row_count = 1,
		.rank = 0,
		.world_size = 1,
	};
	char why[256];

	memset(planes, 0, sizeof(planes));
	for (uint32_t i = 0; i < BENCH_POOL_PLANES; i++) {
		/* launch/worker/planes.c's names: the instance's store has this layout */
		snprintf(planes[i].name, sizeof(planes[i].name), "plane.%03u", i);
		planes[i].unit_bytes = BENCH_POOL_UNIT_BYTES;
	}
	snprintf(spec.row_plane.name, sizeof(spec.row_plane.name), "state");
	spec.row_plane.unit_bytes = BENCH_POOL_ROW_BYTES;
	if (rec_geometry_init(&b->g, &spec, why, sizeof(why)) != 0) {
		fprintf(stderr, "selene bench pool: geometry: %s\n", why);
		return -EINVAL;
	}
	rec_model_identity_from_name(&b->model, "selene-bench-pool");
	rec_namespace_identity(&b->ns, &b->model, REC_STATE_ORDINARY);
	return 0;
}

/* The tokens of the record: b->pages pages of BENCH_POOL_PAGE_TOKENS; caller frees. */
static uint32_t *bench_pool_tokens(const struct pool_bench *b, uint64_t *count)
{
	uint32_t *tokens;

	*count = (uint64_t)b->pages * BENCH_POOL_PAGE_TOKENS;
	tokens = malloc(*count * sizeof(*tokens));
	for (uint64_t i = 0; tokens && i < *count; i++)
		tokens[i] = (uint32_t)(i * 2654435761u + 17u);
	return tokens;
}

/* The record's key and bucket: the tokens' under the bench's model identity. */
static int bench_pool_key(const struct pool_bench *b, struct rec_key *key,
			  struct rec_digest *bucket)
{
	struct rec_history h = { 0 };
	uint64_t count;
	uint32_t *tokens = bench_pool_tokens(b, &count);
	int ret = tokens ? rec_history_init(&h, &b->model, tokens, count) : -ENOMEM;

	if (!ret) {
		rec_history_key_at(&h, count, key);
		*bucket = *rec_history_bucket(&h, count);
	}
	rec_history_free(&h);
	free(tokens);
	return ret;
}

/* Writes the one record a claim moves, as a record file under the scratch. */
static int write_record(struct pool_bench *b)
{
	struct rec_dir_options options = {
		.base_path = b->scratch, .namespace_id = &b->ns, .geometry = &b->g,
		.no_direct = true, /* one small file, written once: the page cache is fine */
	};
	struct rec_dir *dir = NULL;
	struct rec_header h;
	struct rec_writer w;
	struct rec_digest bucket;
	char why[256], name[REC_FILE_NAME_BYTES];
	uint8_t *pages, *row;
	struct stat st;
	int ret;

	/*
	 * The key is the tokens' (bench_pool_tokens), which depend only on the
	 * page count, so a manager that kept the record (its disk tier, across
	 * a restart) is claimed from as it is, and an instance's lookup of the
	 * same tokens finds it.
	 */
	ret = bench_pool_key(b, &b->key, &bucket);
	if (ret)
		return ret;
	ret = rec_dir_open(&options, &dir, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "selene bench pool: %s\n", why);
		return ret;
	}
	pages = malloc((size_t)b->g.page_record_bytes * b->pages);
	row = calloc(1, b->g.row_record_bytes);
	ret = -ENOMEM;
	if (!pages || !row)
		goto out_free;
	for (size_t i = 0; i < (size_t)b->g.page_record_bytes * b->pages; i++)
		pages[i] = (uint8_t)(i * 131 + (i >> 12));
	ret = rec_header_init(&h, &b->g, &b->ns, &b->key, NULL, &bucket, 0, b->pages,
			      1700000000000000000ull);
	if (ret)
		goto out_free;
	ret = rec_writer_begin(&w, dir, &h);
	if (ret)
		goto out_free;
	ret = rec_writer_put_pages(&w, 0, b->pages, pages);
	if (!ret)
		ret = rec_writer_put_row(&w, row);
	if (ret) {
		rec_writer_abort(&w);
		goto out_free;
	}
	ret = rec_writer_commit(&w);
	if (ret)
		goto out_free;
	rec_file_name(name, &b->key);
	snprintf(b->record_path, sizeof(b->record_path), "%s/%s", rec_dir_path(dir), name);
	ret = stat(b->record_path, &st) == 0 ? 0 : -errno;
	b->image_bytes = (uint64_t)st.st_size;
out_free:
	free(pages);
	free(row);
	rec_dir_close(dir);
	return ret;
}

/* ---- The rank, through the client library ------------------------------ */

/* Waits for a poll function of the client to answer (1) or fail. */
#define POLL_UNTIL(expr)                                                              \
	({                                                                            \
		double until_ = now_s() + BENCH_POOL_WAIT_MS / 1000.0;                \
		int rc_;                                                              \
		while ((rc_ = (expr)) == 0 && now_s() < until_)                       \
			usleep(50);                                                   \
		rc_ == 0 ? -ETIMEDOUT : rc_;                                          \
	})

/*
 * The same without sleeping between polls (it yields): for the same-host
 * claim's grant, whose round trip is a fraction of a millisecond, where a
 * 50 us sleep would be a good part of what is measured.
 */
#define POLL_SPIN_UNTIL(expr)                                                         \
	({                                                                            \
		double until_ = now_s() + BENCH_POOL_WAIT_MS / 1000.0;                \
		int rc_;                                                              \
		while ((rc_ = (expr)) == 0 && now_s() < until_)                       \
			sched_yield();                                                \
		rc_ == 0 ? -ETIMEDOUT : rc_;                                          \
	})

static int rank_fail(struct pool_bench *b, int ret, const char *what)
{
	char why[256] = "";

	if (b->client)
		pool_client_status(b->client, why, sizeof(why));
	fprintf(stderr, "selene bench pool: %s: %s%s%s\n", what, sel_strerror(ret),
		why[0] ? ": " : "", why);
	return ret;
}

static int rank_open(struct pool_bench *b)
{
	uint64_t page_bytes = b->g.page_record_bytes, row_bytes = b->g.row_record_bytes;
	struct pool_client_config c = {
		.address = b->address,
		.secret = b->secret,
		.rank = 0,
		.scope = {
			.world_size = 1, .namespace_id = b->ns, .layout_digest = b->g.layout_digest,
			.page_tokens = b->g.page_tokens, .plane_count = b->g.page_plane_count,
			.page_bytes = &page_bytes, .row_bytes = &row_bytes,
		},
		.geometry = &b->g,
	};
	char why[256] = "";
	int ret;

	if (getrandom(c.instance_id, sizeof(c.instance_id), 0) != (ssize_t)sizeof(c.instance_id))
		return -EIO;
	c.instance_id[0] |= 1; /* never all zero (R-POOL-14) */
	ret = pool_client_open(&c, &b->client, why, sizeof(why));
	if (ret)
		fprintf(stderr, "selene bench pool: attaching to %s: %s: %s\n", b->address,
			sel_strerror(ret), why);
	return ret;
}

/* Puts the record: PUT_BEGIN, its one share, the commit (R-POOL-40 .. 43). */
static int put_record(struct pool_bench *b, const uint8_t *image)
{
	struct pool_put_spec spec = {
		.key = b->key, .first_page_index = 0, .tail_page_count = b->pages, .row = true,
		.share_bytes = &b->image_bytes,
	};
	uint64_t request = 0, put_id = 0;
	int ret;

	ret = pool_put_begin(b->client, &spec, &request);
	if (!ret)
		ret = POLL_UNTIL(pool_put_poll(b->client, request, &put_id));
	if (ret == -EEXIST)
		return 0; /* the manager holds it from an earlier run */
	if (ret != 1)
		return rank_fail(b, ret, "the put");
	ret = pool_put_window(b->client, put_id, 0, image, b->image_bytes, BENCH_POOL_WAIT_MS);
	if (!ret)
		ret = pool_put_share_wait(b->client, put_id, BENCH_POOL_WAIT_MS);
	if (!ret)
		ret = pool_put_commit(b->client, put_id, true);
	if (!ret)
		ret = POLL_UNTIL(pool_put_outcome(b->client, put_id));
	return ret == 1 ? 0 : rank_fail(b, ret, "the put");
}

struct copy_ctx {
	struct pool_bench *b;
	uint64_t copied;
};

/*
 * A claim's window, verified by the client (R-POOL-33), as a restore uses
 * it: copied out of its slot to where its bytes lie in the record image.
 */
static int copy_window(void *ctx, const struct pool_window *window)
{
	struct copy_ctx *c = ctx;
	const struct rec_layout *l = &c->b->layout;
	uint64_t at;

	switch (window->section) {
	case POOL_SECTION_HEADER: at = window->first; break;
	case POOL_SECTION_CHECKSUMS: at = l->checksum_offset + window->first; break;
	case POOL_SECTION_PAGES: at = l->page_offset + (uint64_t)window->first * l->page_stride; break;
	case POOL_SECTION_ROW: at = l->row_offset + window->first; break;
	default: return SEL_EPROTO;
	}
	if (at > c->b->image_bytes || window->bytes > c->b->image_bytes - at)
		return SEL_EPROTO;
	memcpy(c->b->destination + at, window->data, window->bytes);
	c->copied += window->bytes;
	return 0;
}

/* One claim of the record, start to last window copied; seconds in *s. */
static int claim_once(struct pool_bench *b, double *s)
{
	struct pool_chain_entry *chain = b->chain;
	struct pool_claim_grant grant;
	struct copy_ctx ctx = { .b = b };
	uint64_t claim_id = 0;
	uint32_t count = 0;
	double start = now_s();
	int ret, end;

	ret = pool_claim_begin(b->client, &b->key, &claim_id);
	if (ret)
		return rank_fail(b, ret, "a claim");
	ret = POLL_UNTIL(pool_claim_poll(b->client, claim_id, &grant, chain,
					 POOL_CHAIN_RECORDS_MAX, &count));
	if (ret != 1)
		return rank_fail(b, ret, "a claim");
	ret = pool_share_claim(b->client, claim_id, chain, count, 0, (void *const *)b->slots,
			       BENCH_POOL_SLOTS, b->slot_bytes, copy_window, &ctx,
			       BENCH_POOL_WAIT_MS);
	*s = now_s() - start;
	end = pool_claim_end(b->client, claim_id, ret);
	if (!ret)
		ret = end;
	if (ret)
		return rank_fail(b, ret, "a claim");
	if (ctx.copied != b->claim_bytes) {
		fprintf(stderr, "selene bench pool: a claim delivered %" PRIu64 " of %" PRIu64
				" bytes\n", ctx.copied, b->claim_bytes);
		return -EIO;
	}
	return 0;
}

/* ---- The raw stream ---------------------------------------------------- */

struct raw_sender {
	int fd;
	const uint8_t *data;
	uint64_t bytes;
	size_t chunk;
	int result;
};

static void *raw_send(void *arg)
{
	struct raw_sender *s = arg;
	uint64_t done = 0;

	while (done < s->bytes) {
		size_t n = s->bytes - done < s->chunk ? (size_t)(s->bytes - done) : s->chunk;
		ssize_t w = send(s->fd, s->data + done, n, MSG_NOSIGNAL);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			s->result = -errno;
			return NULL;
		}
		done += (uint64_t)w;
	}
	return NULL;
}

/* A loopback TCP connection: *a sends, *b receives. */
static int raw_pair(int *a, int *b)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);
	int one = 1, listener, ret = 0;

	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (listener < 0)
		return -errno;
	if (bind(listener, (struct sockaddr *)&addr, sizeof(addr)) || listen(listener, 1) ||
	    getsockname(listener, (struct sockaddr *)&addr, &len)) {
		ret = -errno;
		goto out_close_listener;
	}
	*a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*a < 0 || connect(*a, (struct sockaddr *)&addr, sizeof(addr))) {
		ret = -errno;
		goto out_close_listener;
	}
	*b = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
	if (*b < 0)
		ret = -errno;
	setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
out_close_listener:
	close(listener);
	return ret;
}

/*
 * The same bytes as a claim over a plain loopback connection: written in
 * window-sized sends from the record image, read into one slot of the
 * claim's slot size and copied to the destination; seconds in *s
 * (connection set-up excluded, as the claim's connection is open already).
 */
static int raw_once(struct pool_bench *b, const uint8_t *image, size_t window, double *s)
{
	struct raw_sender sender = { .data = image, .bytes = b->claim_bytes, .chunk = window };
	pthread_t thread;
	uint64_t done = 0;
	int rx = -1, ret;
	double start;

	ret = raw_pair(&sender.fd, &rx);
	if (ret)
		return ret;
	start = now_s();
	ret = -pthread_create(&thread, NULL, raw_send, &sender);
	if (ret)
		goto out_close;
	while (done < b->claim_bytes) {
		size_t want = b->claim_bytes - done < b->slot_bytes ?
				      (size_t)(b->claim_bytes - done) : b->slot_bytes;
		size_t got = 0;

		while (got < want) {
			ssize_t n = recv(rx, b->slots[0] + got, want - got, 0);

			if (n <= 0) {
				ret = n == 0 ? -ECONNRESET : -errno;
				break;
			}
			got += (size_t)n;
		}
		if (ret)
			break;
		memcpy(b->destination + done, b->slots[0], got);
		done += got;
	}
	*s = now_s() - start;
	if (ret)
		shutdown(rx, SHUT_RDWR);
	pthread_join(thread, NULL);
	if (!ret)
		ret = sender.result;
out_close:
	close(sender.fd);
	close(rx);
	return ret;
}

static uint8_t *read_image(const struct pool_bench *b)
{
	uint8_t *image = malloc(b->image_bytes);
	int fd = open(b->record_path, O_RDONLY | O_CLOEXEC);
	uint64_t done = 0;

	if (!image || fd < 0)
		goto err;
	while (done < b->image_bytes) {
		ssize_t n = pread(fd, image + done, b->image_bytes - done, (off_t)done);

		if (n <= 0)
			goto err;
		done += (uint64_t)n;
	}
	close(fd);
	return image;
err:
	if (fd >= 0)
		close(fd);
	free(image);
	return NULL;
}

/* The record's layout from its header, and the bytes a claim carries. */
static int image_layout(struct pool_bench *b, const uint8_t *image)
{
	struct rec_header h;
	char why[256] = "its sizes do not make a layout";
	int ret;

	ret = rec_header_decode(image, &h, why, sizeof(why));
	if (!ret)
		ret = rec_layout_from_header(&h, &b->layout);
	if (ret) {
		fprintf(stderr, "selene bench pool: the record's header: %s\n", why);
		return ret;
	}
	b->claim_bytes = REC_HEADER_BYTES + 8ull * b->pages + b->layout.page_stride * b->pages +
			 b->layout.row_length;
	return 0;
}

/* The claimed sections equal the record's: header, checksum entries, pages, row. */
static bool claim_matches(const struct pool_bench *b, const uint8_t *image)
{
	const struct rec_layout *l = &b->layout;
	const uint64_t ranges[4][2] = {
		{ 0, REC_HEADER_BYTES },
		{ l->checksum_offset, 8ull * b->pages },
		{ l->page_offset, l->page_stride * b->pages },
		{ l->row_offset, l->row_length },
	};

	for (int i = 0; i < 4; i++)
		if (memcmp(b->destination + ranges[i][0], image + ranges[i][0], ranges[i][1]) != 0)
			return false;
	return true;
}

static int run_rounds(struct pool_bench *b, const uint8_t *image)
{
	size_t window = pool_client_facts(b->client)->window_bytes;
	double claim_mid, raw_mid, gb = (double)b->claim_bytes / 1e9;
	int ret;

	for (uint32_t r = 0; r < b->rounds; r++) {
		memset(b->destination, 0, b->image_bytes);
		ret = claim_once(b, &b->claim_s[r]);
		if (ret)
			return ret;
		if (!claim_matches(b, image)) {
			fprintf(stderr, "selene bench pool: claim %u delivered wrong bytes\n", r);
			return -EIO;
		}
		ret = raw_once(b, image, window, &b->raw_s[r]);
		if (ret) {
			fprintf(stderr, "selene bench pool: raw stream %u failed: %s\n", r,
				sel_strerror(ret));
			return ret;
		}
	}
	claim_mid = median(b->claim_s, b->rounds);
	raw_mid = median(b->raw_s, b->rounds);
	printf("pool: %u claims of one record (%" PRIu64 " bytes in windows of %zu bytes: %u "
	       "pages of %" PRIu64 " bytes, its header, checksums and row) over TCP on "
	       "loopback, each verified and copied out\n",
	       b->rounds, b->claim_bytes, window, b->pages, b->g.page_record_bytes);
	printf("pool claim over TCP: p50 %.1f ms, %.2f GB/s\n", claim_mid * 1e3, gb / claim_mid);
	printf("raw TCP stream of the same bytes: p50 %.1f ms, %.2f GB/s\n", raw_mid * 1e3,
	       gb / raw_mid);
	printf("pool claim / raw TCP stream: %.2f (target >= 0.80)\n", raw_mid / claim_mid);
	return 0;
}

/* ---- The same-host claim ------------------------------------------------ */

/*
 * The hops of a same-host claim's grant (pool_claim_times, and the
 * manager's own times where it runs in this process; one clock).
 */
enum shm_hop {
	HOP_QUEUE,      /* the call -> its request queued */
	HOP_WRITE,      /* -> written to the socket (the I/O thread, or the caller) */
	HOP_TO_MANAGER, /* -> the manager's loop woke for it */
	HOP_READ_IN,    /* -> the manager read it (its frame's reads, tag checked) */
	HOP_MANAGER,    /* -> its answer queued (decode, find, pin, places) */
	HOP_TO_CLIENT,  /* -> the client's I/O thread woke for the answer */
	HOP_READ,       /* -> CLAIMED and its places read */
	HOP_TO_CALLER,  /* -> the caller's poll saw the grant */
	HOP_PLACES,     /* -> the places in the caller's hands (pull, places) */
	SHM_HOPS
};

static const char *const shm_hop_names[SHM_HOPS] = {
	"call -> queued", "-> written", "-> manager woke", "-> manager read it", "-> answer queued",
	"-> I/O thread woke", "-> grant read", "-> caller saw it", "-> places in hand",
};

struct shm_bench {
	struct pool_bench *b;
	struct shard_device *dev;
	bool cuda;
	struct shard_planes planes;      /* device memory of the claim's pages and row */
	uint64_t bulk_device;            /* payload bytes of device memory */
	uint8_t *bulk_host;              /* payload bytes, registered */
	bool bulk_registered;
	uint64_t payload;                /* what a claim copies: the pages' units, the row */
	uint32_t *page_ids;
	const uint8_t *arena;
	uint64_t arena_bytes;
	bool arena_registered;
	struct shard_pool_share share;
	bool share_ready;
	struct pool_place places[POOL_CHAIN_RECORDS_MAX];
	struct shard_pool_record records[POOL_CHAIN_RECORDS_MAX];
	/* the lookup's answer (R-POOL-22) and the grant's stamps and places */
	struct pool_chain_entry answer[POOL_CHAIN_RECORDS_MAX];
	struct shard_pool_early early[POOL_CHAIN_RECORDS_MAX];
	struct shard_pool_record granted[POOL_CHAIN_RECORDS_MAX];
	uint64_t stamps[POOL_CHAIN_RECORDS_MAX];
	struct shard_pool_place granted_places[POOL_CHAIN_RECORDS_MAX];
	uint64_t records_early, records_redone, records_waited; /* over every claim */
	double *claim_s, *copy_s, *bulk_s, *plane_s, *reverse_s;
	double *grant_s, *issue_s, *sync_s, *end_s; /* a claim's phases */
	double *hop_s[SHM_HOPS];                    /* its grant's hops */
	uint32_t by_caller;                         /* requests the caller wrote itself */
};

static int shm_alloc(struct shm_bench *m, uint64_t bytes, uint64_t *address)
{
	void *p;

	if (m->cuda)
		return shard_device_cuda_alloc(m->dev, bytes, address);
	p = calloc(1, bytes);
	*address = (uint64_t)(uintptr_t)p;
	return p ? 0 : -ENOMEM;
}

static void shm_free(struct shm_bench *m, uint64_t address)
{
	if (!address)
		return;
	if (m->cuda)
		shard_device_cuda_free(m->dev, address);
	else
		free((void *)(uintptr_t)address);
}

/* The device bytes of the claim equal the record's pages and row (page j at page_ids[j]). */
static int shm_check(struct shm_bench *m, const uint8_t *image)
{
	struct pool_bench *b = m->b;
	const struct rec_geometry *g = &b->g;
	uint32_t n = 0, count = b->pages * g->page_plane_count + 1;
	struct shard_copy *copies = calloc(count, sizeof(*copies));
	uint8_t *back = malloc(m->payload), *at = back;
	int ret = -ENOMEM;

	if (!copies || !back)
		goto out;
	for (uint32_t j = 0; j < b->pages; j++)
		for (uint32_t k = 0; k < g->page_plane_count; k++) {
			uint64_t unit = g->page_planes[k].unit_bytes;

			copies[n++] = (struct shard_copy){
				.device_address = m->planes.page_base[k] + unit * m->page_ids[j],
				.host = at, .bytes = unit };
			at += unit;
		}
	copies[n++] = (struct shard_copy){ .device_address = m->planes.row_base, .host = at,
					   .bytes = g->row_plane.unit_bytes };
	ret = shard_device_copy(m->dev, SHARD_DEVICE_TO_HOST, copies, n);
	ret = ret ? ret : shard_device_synchronize(m->dev);
	if (ret)
		goto out;
	at = back;
	for (uint32_t j = 0; j < b->pages && !ret; j++)
		for (uint32_t k = 0; k < g->page_plane_count && !ret; k++) {
			uint64_t unit = g->page_planes[k].unit_bytes;

			if (memcmp(at, image + b->layout.page_offset + b->layout.page_stride * j +
					       m->share.plane_offset[k], unit) != 0)
				ret = -EIO;
			at += unit;
		}
	if (!ret && memcmp(at, image + b->layout.row_offset, g->row_plane.unit_bytes) != 0)
		ret = -EIO;
out:
	free(copies);
	free(back);
	return ret;
}

/* Where one same-host claim's time went, in seconds. */
struct shm_split {
	double grant;  /* CLAIM_LOCAL sent -> its grant and places in hand */
	double issue;  /* -> every copy issued (headers checked, entries built) */
	double sync;   /* -> the device finished them (shard_pool_share_finish) */
	double end;    /* -> the share and the claim ended (CLAIM_END queued) */
	double hop[SHM_HOPS]; /* the grant's hops; -1 where unknown */
	bool by_caller;
};

static double ns_s(uint64_t ns)
{
	return (double)ns * 1e-9;
}

/* The grant's hops, from the client's times and the manager's (NULL: not in this process). */
static void shm_hops(struct shm_split *t, double start, double seen, double granted,
		     const struct pool_claim_times *c, const struct pool_manager_stats *m)
{
	for (uint32_t h = 0; h < SHM_HOPS; h++)
		t->hop[h] = -1;
	t->hop[HOP_QUEUE] = ns_s(c->queued_ns) - start;
	t->hop[HOP_WRITE] = ns_s(c->written_ns - c->queued_ns);
	if (m && m->claim_woken_ns >= c->written_ns && c->woken_ns >= m->claim_answered_ns) {
		t->hop[HOP_TO_MANAGER] = ns_s(m->claim_woken_ns - c->written_ns);
		t->hop[HOP_READ_IN] = ns_s(m->claim_read_ns - m->claim_woken_ns);
		t->hop[HOP_MANAGER] = ns_s(m->claim_answered_ns - m->claim_read_ns);
		t->hop[HOP_TO_CLIENT] = ns_s(c->woken_ns - m->claim_answered_ns);
	}
	t->hop[HOP_READ] = ns_s(c->answered_ns - c->woken_ns);
	t->hop[HOP_TO_CALLER] = seen - ns_s(c->answered_ns);
	t->hop[HOP_PLACES] = granted - seen;
	t->by_caller = c->by_caller;
}


/*
 * The lookup that precedes a same-host claim (untimed: an instance looks up
 * before it claims): the chain, with the session rank's places and the
 * images' stamps (R-POOL-22), into m->answer; its length in *count.
 */
static int shm_lookup(struct shm_bench *m, uint32_t *count)
{
	struct pool_bench *b = m->b;
	uint64_t ticket = 0;
	int ret = pool_lookup_begin(b->client, &b->key, 1, &ticket);

	if (!ret)
		ret = POLL_SPIN_UNTIL(pool_lookup_poll(b->client, ticket, m->answer,
						       POOL_CHAIN_RECORDS_MAX, count));
	if (ret != 1)
		return rank_fail(b, ret ? ret : -EIO, "a lookup");
	if (*count == 0)
		return rank_fail(b, -ENOENT, "a lookup");
	return 0;
}

/*
 * One same-host claim as rank zero's link makes it: after the lookup, its
 * copies from the answer's places are issued at once while CLAIM_LOCAL
 * travels; the grant brings the places and stamps (R-POOL-51, R-POOL-36),
 * a record whose stamp changed is copied again from its granted place
 * (shard_pool_share_granted), one wait, the end; its phases in *t.
 */
static int shm_claim_once(struct shm_bench *m, struct shm_split *t)
{
	struct pool_bench *b = m->b;
	struct pool_claim_grant grant;
	struct pool_claim_times times = { 0 };
	struct pool_manager_stats ms;
	uint64_t claim_id = 0, bytes = 0;
	uint32_t count = 0, answered = 0;
	char why[256] = "";
	double start, early, seen, granted, issued, synced;
	int ret, end;

	ret = shm_lookup(m, &answered);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < answered; i++) {
		m->records[i] = (struct shard_pool_record){
			.key = m->answer[i].key, .first_page_index = m->answer[i].first_page_index,
			.tail_page_count = m->answer[i].tail_page_count, .row = m->answer[i].row };
		m->early[i] = (struct shard_pool_early){ .offset = m->answer[i].place.offset,
							 .bytes = m->answer[i].place.bytes,
							 .stamp = m->answer[i].stamp };
	}
	start = now_s();
	ret = pool_claim_begin(b->client, &b->key, &claim_id);
	if (ret)
		return rank_fail(b, ret, "a same-host claim");
	ret = shard_pool_share_begin(&m->share, m->records, answered, 0, m->page_ids, b->pages, 0,
				     why, sizeof(why));
	if (!ret)
		ret = shard_pool_share_early(&m->share, m->arena, m->arena_bytes, m->early,
					     answered);
	early = now_s();
	if (!ret) {
		ret = POLL_SPIN_UNTIL(pool_claim_poll(b->client, claim_id, &grant, b->chain,
						      POOL_CHAIN_RECORDS_MAX, &count));
		ret = ret == 1 ? 0 : ret ? ret : -EIO;
	}
	seen = now_s();
	if (!ret)
		ret = pool_share_pull(b->client, claim_id, b->chain, count, 0, true);
	if (!ret)
		ret = pool_share_places(b->client, claim_id, m->places, count, BENCH_POOL_WAIT_MS);
	granted = now_s();
	pool_claim_times(b->client, claim_id, &times);
	if (b->manager)
		pool_manager_stats(b->manager, &ms);
	for (uint32_t i = 0; !ret && i < count; i++) {
		m->granted[i] = (struct shard_pool_record){
			.key = b->chain[i].key, .first_page_index = b->chain[i].first_page_index,
			.tail_page_count = b->chain[i].tail_page_count, .row = b->chain[i].row };
		m->stamps[i] = b->chain[i].stamp;
		m->granted_places[i] = (struct shard_pool_place){ m->places[i].offset,
								  m->places[i].bytes };
	}
	if (!ret && m->share.chain)
		ret = shard_pool_share_granted(&m->share, m->arena, m->arena_bytes, m->early,
					       m->granted, m->stamps, m->granted_places, count,
					       why, sizeof(why));
	issued = now_s();
	m->records_early += m->share.records_early;
	m->records_redone += m->share.records_redone;
	m->records_waited += m->share.records_waited;
	if (m->share.chain)
		ret = ret ? (shard_pool_share_finish(&m->share, &bytes, NULL, 0), ret) :
			    shard_pool_share_finish(&m->share, &bytes, why, sizeof(why));
	synced = now_s();
	pool_share_end(b->client, claim_id);
	end = pool_claim_end(b->client, claim_id, ret);
	*t = (struct shm_split){ .grant = granted - early,
				 .issue = (early - start) + (issued - granted),
				 .sync = synced - issued, .end = now_s() - synced };
	shm_hops(t, start, seen, granted, &times, b->manager ? &ms : NULL);
	if (!ret)
		ret = end;
	if (ret) {
		fprintf(stderr, "selene bench pool: a same-host claim: %s%s%s\n",
			sel_strerror(ret), why[0] ? ": " : "", why);
		return ret;
	}
	if (bytes != m->payload) {
		fprintf(stderr, "selene bench pool: a same-host claim copied %" PRIu64 " of %"
				PRIu64 " bytes\n", bytes, m->payload);
		return -EIO;
	}
	return 0;
}

/* One bulk host-to-device copy of the payload from registered memory; seconds in *s. */
static int shm_bulk_once(struct shm_bench *m, double *s)
{
	struct shard_copy c = { .device_address = m->bulk_device, .host = m->bulk_host,
				.bytes = m->payload };
	double start = now_s();
	int ret = shard_device_copy(m->dev, SHARD_HOST_TO_DEVICE, &c, 1);
	int drained = shard_device_synchronize(m->dev);

	*s = now_s() - start;
	return ret ? ret : drained;
}

/*
 * The same bytes as a plane-major arena would hold them: one copy per plane
 * of every page (pages * unit bytes each) and the row, from registered
 * memory; seconds in *s.
 */
static int shm_plane_once(struct shm_bench *m, double *s)
{
	const struct rec_geometry *g = &m->b->g;
	struct shard_copy c[BENCH_POOL_PLANES + 1];
	uint64_t at = 0;
	uint32_t n = 0;
	double start = now_s();
	int ret, drained;

	for (uint32_t k = 0; k < g->page_plane_count; k++) {
		uint64_t bytes = (uint64_t)g->page_planes[k].unit_bytes * m->b->pages;

		c[n++] = (struct shard_copy){ .device_address = m->bulk_device + at,
					      .host = m->bulk_host + at, .bytes = bytes };
		at += bytes;
	}
	c[n++] = (struct shard_copy){ .device_address = m->bulk_device + at,
				      .host = m->bulk_host + at, .bytes = m->payload - at };
	ret = shard_device_copy(m->dev, SHARD_HOST_TO_DEVICE, c, n);
	drained = shard_device_synchronize(m->dev);
	*s = now_s() - start;
	return ret ? ret : drained;
}

/* Frames a claim sent that wait for the manager's answer: its round trips. */
static uint64_t shm_requests(struct pool_client *c)
{
	return pool_client_frames_sent(c, POOL_MSG_CLAIM) +
	       pool_client_frames_sent(c, POOL_MSG_CLAIM_LOCAL) +
	       pool_client_frames_sent(c, POOL_MSG_CLAIM_PULL);
}

/* The grant's hops, p50 of each over the rounds that know it (-1: unknown). */
static void shm_hops_print(struct shm_bench *m)
{
	uint32_t rounds = m->b->rounds;

	printf("same-host grant by hop, p50 of each (us):");
	for (uint32_t h = 0; h < SHM_HOPS; h++) {
		uint32_t n = 0;

		for (uint32_t r = 0; r < rounds; r++)
			if (m->hop_s[h][r] >= 0)
				m->hop_s[h][n++] = m->hop_s[h][r];
		if (n)
			printf(" %s %.1f", shm_hop_names[h], median(m->hop_s[h], n) * 1e6);
		else if (h == HOP_TO_MANAGER)
			printf(" -> through the manager (another process) -");
	}
	printf("; the caller wrote %u of %u requests itself\n", m->by_caller, rounds);
}

/*
 * One round: a same-host claim into m->page_ids (its phases into *t, its
 * bytes checked against image in round 0; order names the ids' order in
 * a message), then the bulk and the per-plane copy of the same bytes into
 * round r's slots, alternating so the caches see the same traffic.
 * Returns 0, or the failure, said on stderr.
 */
static int shm_round(struct shm_bench *m, const uint8_t *image, uint32_t r, const char *order,
		     struct shm_split *t)
{
	int ret = shm_claim_once(m, t);

	if (!ret && r == 0 && shm_check(m, image) != 0) {
		fprintf(stderr, "selene bench pool: the same-host claim into page ids in %s "
				"order put wrong bytes on the device\n", order);
		return -EIO;
	}
	if (!ret)
		ret = shm_bulk_once(m, &m->bulk_s[r]);
	if (!ret)
		ret = shm_plane_once(m, &m->plane_s[r]);
	if (ret)
		fprintf(stderr, "selene bench pool: same-host round %u (page ids in %s order): %s\n",
			r, order, sel_strerror(ret));
	return ret;
}

static int shm_rounds(struct shm_bench *m, const uint8_t *image)
{
	struct pool_bench *b = m->b;
	double claim_mid, copy_mid, bulk_mid, plane_mid, reverse_mid, gb = (double)m->payload / 1e9;
	uint64_t asked = shm_requests(b->client), ended = pool_client_frames_sent(b->client,
										  POOL_MSG_CLAIM_END);
	struct shm_split t;
	int ret;

	for (uint32_t j = 0; j < b->pages; j++)
		m->page_ids[j] = j;
	for (uint32_t r = 0; r < b->rounds; r++) {
		ret = shm_round(m, image, r, "ascending", &t);
		if (ret)
			return ret;
		m->claim_s[r] = t.grant + t.issue + t.sync + t.end;
		m->copy_s[r] = t.issue + t.sync;
		m->grant_s[r] = t.grant;
		m->issue_s[r] = t.issue;
		m->sync_s[r] = t.sync;
		m->end_s[r] = t.end;
		for (uint32_t h = 0; h < SHM_HOPS; h++)
			m->hop_s[h][r] = t.hop[h];
		m->by_caller += t.by_caller;
	}
	claim_mid = median(m->claim_s, b->rounds);
	copy_mid = median(m->copy_s, b->rounds);
	bulk_mid = median(m->bulk_s, b->rounds);
	plane_mid = median(m->plane_s, b->rounds);
	printf("same-host claim (arena -> %s device, %" PRIu64 " bytes: %u pages of %u planes "
	       "into consecutive page ids, and the row): p50 %.2f ms, %.2f GB/s (copies alone "
	       "p50 %.2f ms, %.2f GB/s)\n", m->dev->ops->name, m->payload, b->pages,
	       b->g.page_plane_count, claim_mid * 1e3, gb / claim_mid, copy_mid * 1e3,
	       gb / copy_mid);
	printf("same-host claim: records copied before the grant and kept %" PRIu64 ", copied "
	       "again (stale) %" PRIu64 ", copied once granted %" PRIu64 "\n", m->records_early,
	       m->records_redone, m->records_waited);
	printf("same-host claim split, p50 of each phase: waiting for the grant and places "
	       "after the copies were issued %.3f ms, copies issued (from the answer's places, "
	       "then any again) %.3f ms, device sync %.3f ms, end %.3f ms\n",
	       median(m->grant_s, b->rounds) * 1e3, median(m->issue_s, b->rounds) * 1e3,
	       median(m->sync_s, b->rounds) * 1e3, median(m->end_s, b->rounds) * 1e3);
	shm_hops_print(m);
	printf("bulk host-to-device copy of the same bytes from registered memory: p50 "
	       "%.2f ms, %.2f GB/s\n", bulk_mid * 1e3, gb / bulk_mid);
	printf("one copy per plane of the same bytes (a plane-major image): p50 %.2f ms, "
	       "%.2f GB/s\n", plane_mid * 1e3, gb / plane_mid);
	printf("same-host claim / bulk copy: %.2f (target >= 0.80 on the GPU)\n",
	       bulk_mid / claim_mid);
	printf("same-host claim: %.1f round trips to the manager a claim, and %.1f ends sent "
	       "without waiting\n", (double)(shm_requests(b->client) - asked) / b->rounds,
	       (double)(pool_client_frames_sent(b->client, POOL_MSG_CLAIM_END) - ended) /
		       b->rounds);
	/* the worst case: no two pages to consecutive ids, one entry per page plane */
	for (uint32_t j = 0; j < b->pages; j++)
		m->page_ids[j] = b->pages - 1 - j;
	for (uint32_t r = 0; r < b->rounds; r++) {
		ret = shm_round(m, image, r, "reverse", &t);
		if (ret)
			return ret;
		m->reverse_s[r] = t.grant + t.issue + t.sync + t.end;
	}
	reverse_mid = median(m->reverse_s, b->rounds);
	bulk_mid = median(m->bulk_s, b->rounds);
	printf("same-host claim into page ids in reverse order (no run): p50 %.2f ms, %.2f "
	       "GB/s, %.2f of bulk (its rounds' bulk copies)\n", reverse_mid * 1e3, gb / reverse_mid,
	       bulk_mid / reverse_mid);
	return 0;
}

/* ---- An instance's same-host claim ------------------------------------- */

/*
 * The same record restored by an instance: a store of one rank
 * (selene/store.h) attached to the manager, its planes on --device as
 * `selene run` allocates them (launch/worker/planes.c), the record's
 * tokens looked up with a fresh history each round (untimed: one fetch
 * per answer), then sel_fetch of the pool hit timed to its FETCHED event,
 * the caller polling sel_poll without sleeping (an engine polls once per
 * step: this is the claim's floor, not an engine's). Its first fetch
 * registers the arena on rank zero's link and is not timed. Rounds
 * alternate with the bulk copy of the same bytes.
 */
struct inst_bench {
	struct launch_run_planes planes;
	sel_store *store;
	uint32_t *tokens;
	uint64_t token_count;
	uint32_t *page_ids;
	double *fetch_s, *bulk_s;
};

static int inst_open(struct shm_bench *m, struct inst_bench *ib)
{
	struct pool_bench *b = m->b;
	struct launch_run_plane_spec spec = { .count = BENCH_POOL_PLANES,
					      .unit_bytes = BENCH_POOL_UNIT_BYTES };
	struct sel_plane planes[BENCH_POOL_PLANES];
	struct sel_store_config c;
	struct sel_stats st = { 0 };
	char dir[700], err[512] = "";
	double until;
	int ret;

	ret = launch_run_planes_open(&ib->planes, 0, b->device_kind, 0, &spec, 1, b->pages,
				     BENCH_POOL_ROW_BYTES, 1, UINT64_MAX, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "selene bench pool: the instance's planes: %s\n", err);
		return ret;
	}
	for (uint32_t k = 0; k < BENCH_POOL_PLANES; k++)
		planes[k] = (struct sel_plane){ ib->planes.names[k], BENCH_POOL_UNIT_BYTES,
						ib->planes.page_base[k] };
	snprintf(dir, sizeof(dir), "%s/instance", b->scratch);
	c = (struct sel_store_config){
		.dir = dir, .page_tokens = BENCH_POOL_PAGE_TOKENS,
		.page_plane_count = BENCH_POOL_PLANES, .page_planes = planes,
		.row_plane = { "state", BENCH_POOL_ROW_BYTES, ib->planes.row_base },
		.page_count = b->pages, .row_count = 1,
		.device = launch_run_planes_device(&ib->planes), .disk_limit_bytes = 1ull << 30,
		.durable = false, .records_max = 1000, .pool = b->address,
		.pool_secret_file = b->secret_file,
	};
	memcpy(c.model_identity, b->model.bytes, sizeof(c.model_identity));
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return -errno;
	ret = sel_store_open(&c, &ib->store, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "selene bench pool: the instance's store: %s\n", err);
		return ret;
	}
	for (until = now_s() + 10; !st.pool_attached && now_s() < until; usleep(1000)) {
		struct sel_event ev;

		sel_poll(ib->store, &ev, 0);
		ret = sel_store_stats(ib->store, &st);
		if (ret)
			return ret;
	}
	if (!st.pool_attached) {
		fprintf(stderr, "selene bench pool: the instance did not attach to %s\n",
			b->address);
		return -ETIMEDOUT;
	}
	return 0;
}

/* Lookups of the tokens a fetch may try: an answer later than the grace period is a miss. */
#define BENCH_POOL_LOOKUP_TRIES 50

/*
 * The tokens' pool hit on a fresh history: 0 and *hit, or why not (said).
 * A lookup whose answer missed its grace period (2 ms on this host) is
 * tried again with another history, as an engine's next request would.
 */
static int inst_lookup(struct inst_bench *ib, sel_history **h, struct sel_hit *hit)
{
	struct sel_event ev;
	int ret = 0;

	for (uint32_t tries = 0; !ret && tries < BENCH_POOL_LOOKUP_TRIES; tries++) {
		sel_history_destroy(*h);
		*h = NULL;
		ret = sel_history_create(ib->store, ib->tokens, ib->token_count, h);
		while (!ret) {
			if (sel_lookup(ib->store, *h, 0, hit))
				return 0;
			if (!sel_lookup_pending(ib->store, *h))
				break;
			sel_poll(ib->store, &ev, 0);
		}
	}
	ret = ret ? ret : -ENOENT;
	fprintf(stderr, "selene bench pool: the instance found no pool hit in %u lookups: %s\n",
		BENCH_POOL_LOOKUP_TRIES, sel_strerror(ret));
	return ret;
}

/* One fetch of the pool hit into page ids 0 .. pages - 1 and slot 0; seconds in *s. */
static int inst_fetch_once(struct inst_bench *ib, uint32_t pages, uint64_t waiter, double *s)
{
	sel_history *h = NULL;
	struct sel_hit hit;
	struct sel_event ev = { .kind = SEL_EVENT_FETCH_FAILED, .error = -ETIMEDOUT };
	double start, until;
	bool joined;
	int ret = inst_lookup(ib, &h, &hit);

	if (!ret && hit.page_count != pages)
		ret = -EIO;
	start = now_s();
	if (!ret)
		ret = sel_fetch(ib->store, &hit, ib->page_ids, 0, waiter, &joined);
	for (until = start + BENCH_POOL_WAIT_MS / 1000.0; !ret && now_s() < until;) {
		if (sel_poll(ib->store, &ev, 1) == 1)
			break;
		sched_yield();
	}
	*s = now_s() - start;
	sel_history_destroy(h);
	if (!ret && ev.kind != SEL_EVENT_FETCHED)
		ret = ev.error ? ev.error : -EIO;
	if (ret)
		fprintf(stderr, "selene bench pool: the instance's fetch: %s %s\n",
			sel_strerror(ret), ev.why);
	return ret;
}

/* The instance's device bytes equal the record's pages and row (page j at id j). */
static int inst_check(struct shm_bench *m, struct inst_bench *ib, const uint8_t *image)
{
	struct pool_bench *b = m->b;
	uint64_t unit = BENCH_POOL_UNIT_BYTES > BENCH_POOL_ROW_BYTES ? BENCH_POOL_UNIT_BYTES
								    : BENCH_POOL_ROW_BYTES;
	uint8_t *back = malloc(unit);
	int ret = back ? 0 : -ENOMEM;

	for (uint32_t j = 0; !ret && j <= b->pages; j++)
		for (uint32_t k = 0; !ret && k < BENCH_POOL_PLANES; k++) {
			bool row = j == b->pages;
			uint64_t bytes = row ? BENCH_POOL_ROW_BYTES : BENCH_POOL_UNIT_BYTES;
			uint64_t at = row ? ib->planes.row_base :
					    ib->planes.page_base[k] + BENCH_POOL_UNIT_BYTES * j;
			const uint8_t *want = row ? image + b->layout.row_offset :
				image + b->layout.page_offset + b->layout.page_stride * j +
					m->share.plane_offset[k];
			struct shard_copy c = { .device_address = at, .host = back, .bytes = bytes };

			if (ib->planes.cuda) {
				ret = shard_device_copy(ib->planes.cuda, SHARD_DEVICE_TO_HOST, &c, 1);
				ret = ret ? ret : shard_device_synchronize(ib->planes.cuda);
			} else {
				memcpy(back, (const void *)(uintptr_t)at, bytes);
			}
			if (!ret && memcmp(back, want, bytes) != 0)
				ret = -EIO;
			if (row)
				break;
		}
	free(back);
	return ret;
}

static int inst_rounds(struct shm_bench *m, struct inst_bench *ib, const uint8_t *image)
{
	struct pool_bench *b = m->b;
	struct shard_pool_link_counts before, after;
	double gb = (double)m->payload / 1e9, fetch_mid, bulk_mid;
	int ret = inst_fetch_once(ib, b->pages, 1, &ib->fetch_s[0]); /* registers the arena */

	shard_pool_link_counts(&before);
	for (uint32_t r = 0; !ret && r < b->rounds; r++) {
		ret = inst_fetch_once(ib, b->pages, 2 + r, &ib->fetch_s[r]);
		if (!ret && r == 0 && inst_check(m, ib, image) != 0) {
			fprintf(stderr, "selene bench pool: the instance's fetch put wrong bytes "
					"on the device\n");
			ret = -EIO;
		}
		if (!ret)
			ret = shm_bulk_once(m, &ib->bulk_s[r]);
	}
	shard_pool_link_counts(&after);
	if (ret)
		return ret;
	fetch_mid = median(ib->fetch_s, b->rounds);
	bulk_mid = median(ib->bulk_s, b->rounds);
	printf("instance claim (a store of one rank on the manager's host, %s planes; sel_fetch "
	       "of a pool hit to its FETCHED event, polled without sleeping; %" PRIu64 " bytes): "
	       "p50 %.2f ms, %.2f GB/s\n", launch_run_planes_device(&ib->planes), m->payload,
	       fetch_mid * 1e3, gb / fetch_mid);
	printf("instance claim: %" PRIu64 " of %u claims began rank zero's copies before the "
	       "grant; records kept %" PRIu64 ", copied again %" PRIu64 ", copied once granted %"
	       PRIu64 "\n", after.early_claims - before.early_claims, b->rounds,
	       after.records_early - before.records_early,
	       after.records_redone - before.records_redone,
	       after.records_waited - before.records_waited);
	printf("bulk host-to-device copy of the same bytes (these rounds): p50 %.2f ms, %.2f "
	       "GB/s\n", bulk_mid * 1e3, gb / bulk_mid);
	printf("instance claim / bulk copy: %.2f (target >= 0.80 on the GPU)\n",
	       bulk_mid / fetch_mid);
	return 0;
}

/* The instance's line: a store on this host claims the record the bench put. */
static int inst_bench(struct shm_bench *m, const uint8_t *image)
{
	struct pool_bench *b = m->b;
	struct inst_bench ib = { 0 };
	int ret = -ENOMEM;

	ib.tokens = bench_pool_tokens(b, &ib.token_count);
	ib.page_ids = calloc(b->pages, sizeof(*ib.page_ids));
	ib.fetch_s = calloc(b->rounds, sizeof(double));
	ib.bulk_s = calloc(b->rounds, sizeof(double));
	if (ib.tokens && ib.page_ids && ib.fetch_s && ib.bulk_s) {
		for (uint32_t j = 0; j < b->pages; j++)
			ib.page_ids[j] = j;
		ret = inst_open(m, &ib);
	}
	if (!ret)
		ret = inst_rounds(m, &ib, image);
	if (ib.store && sel_store_close(ib.store, 60000) != 0 && !ret)
		ret = -EIO;
	if (ib.planes.plane_count)
		launch_run_planes_close(&ib.planes);
	/* the store's device work may have made its own context current here */
	if (shard_device_bind(m->dev) != 0 && !ret)
		ret = -EIO;
	free(ib.tokens);
	free(ib.page_ids);
	free(ib.fetch_s);
	free(ib.bulk_s);
	return ret;
}

/* The same-host claim line; a manager on another host skips it (said). */
static int shm_bench(struct pool_bench *b, const uint8_t *image)
{
	struct shm_bench m = { .b = b };
	const struct rec_geometry *g = &b->g;
	char why[256] = "";
	double start;
	int ret;

	ret = pool_arena_map(b->client, &m.arena, &m.arena_bytes, why, sizeof(why));
	if (ret == -ENOENT) {
		printf("same-host claim: skipped, the manager is not on this host (%s)\n", why);
		return 0;
	}
	if (ret) {
		fprintf(stderr, "selene bench pool: the manager's arena: %s\n", why);
		return ret;
	}
	ret = shard_device_open(b->device_kind, 0, &m.dev, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "selene bench pool: device %s: %s\n", b->device_kind, why);
		return ret;
	}
	m.cuda = shard_device_is_cuda(m.dev);
	ret = shard_device_bind(m.dev);
	if (ret)
		goto out_close_device;
	m.payload = g->row_plane.unit_bytes;
	for (uint32_t k = 0; k < g->page_plane_count; k++) {
		m.payload += (uint64_t)g->page_planes[k].unit_bytes * b->pages;
		if (!ret)
			ret = shm_alloc(&m, (uint64_t)g->page_planes[k].unit_bytes * b->pages,
					&m.planes.page_base[k]);
	}
	if (!ret)
		ret = shm_alloc(&m, g->row_plane.unit_bytes, &m.planes.row_base);
	if (!ret)
		ret = shm_alloc(&m, m.payload, &m.bulk_device);
	m.bulk_host = aligned_alloc(4096, sel_align_up(m.payload, 4096));
	m.page_ids = calloc(b->pages, sizeof(*m.page_ids));
	m.claim_s = calloc(b->rounds, sizeof(double));
	m.copy_s = calloc(b->rounds, sizeof(double));
	m.bulk_s = calloc(b->rounds, sizeof(double));
	m.plane_s = calloc(b->rounds, sizeof(double));
	m.reverse_s = calloc(b->rounds, sizeof(double));
	m.grant_s = calloc(b->rounds, sizeof(double));
	m.issue_s = calloc(b->rounds, sizeof(double));
	m.sync_s = calloc(b->rounds, sizeof(double));
	m.end_s = calloc(b->rounds, sizeof(double));
	for (uint32_t h = 0; h < SHM_HOPS; h++) {
		m.hop_s[h] = calloc(b->rounds, sizeof(double));
		if (!m.hop_s[h])
			ret = ret ? ret : -ENOMEM;
	}
	if (!ret && (!m.bulk_host || !m.page_ids || !m.claim_s || !m.copy_s || !m.bulk_s ||
		     !m.plane_s || !m.reverse_s || !m.grant_s || !m.issue_s || !m.sync_s ||
		     !m.end_s))
		ret = -ENOMEM;
	if (ret) {
		fprintf(stderr, "selene bench pool: device memory for the same-host claim: %s\n",
			sel_strerror(ret));
		goto out_free;
	}
	for (uint64_t i = 0; i < m.payload; i++)
		m.bulk_host[i] = image[b->layout.page_offset + i % (b->layout.page_stride * b->pages)];
	ret = m.dev->ops->register_host(m.dev, m.bulk_host, sel_align_up(m.payload, 4096));
	if (ret) {
		fprintf(stderr, "selene bench pool: registering the bulk copy's memory: %s\n",
			sel_strerror(ret));
		goto out_free;
	}
	m.bulk_registered = true;
	start = now_s();
	ret = shard_device_register_read_only(m.dev, m.arena, m.arena_bytes);
	if (ret) {
		fprintf(stderr, "selene bench pool: the %s device refused the arena: %s\n",
			m.dev->ops->name, sel_strerror(ret));
		goto out_free;
	}
	m.arena_registered = true;
	/* as shard/pool_link.c does once registered: grants bring the places (R-POOL-51) */
	pool_client_claim_local(b->client, true);
	printf("same-host claim: the manager's arena (%" PRIu64 " bytes) mapped read-only and "
	       "registered with the %s device in %.2f ms\n", m.arena_bytes, m.dev->ops->name,
	       (now_s() - start) * 1e3);
	ret = shard_pool_share_init(&m.share, g, &b->ns, &m.planes, m.dev);
	if (ret)
		goto out_free;
	m.share_ready = true;
	ret = shm_rounds(&m, image);
	if (!ret)
		ret = inst_bench(&m, image);
out_free:
	if (m.share_ready)
		shard_pool_share_destroy(&m.share);
	if (m.arena_registered)
		m.dev->ops->unregister_host(m.dev, (void *)m.arena);
	if (m.bulk_registered)
		m.dev->ops->unregister_host(m.dev, m.bulk_host);
	free(m.claim_s);
	free(m.copy_s);
	free(m.bulk_s);
	free(m.plane_s);
	free(m.reverse_s);
	free(m.grant_s);
	free(m.issue_s);
	free(m.sync_s);
	free(m.end_s);
	for (uint32_t h = 0; h < SHM_HOPS; h++)
		free(m.hop_s[h]);
	free(m.page_ids);
	free(m.bulk_host);
	shm_free(&m, m.bulk_device);
	shm_free(&m, m.planes.row_base);
	for (uint32_t k = 0; k < g->page_plane_count; k++)
		shm_free(&m, m.planes.page_base[k]);
out_close_device:
	shard_device_close(m.dev);
	return ret;
}

static int bench_pool_attached(struct pool_bench *b);

/* The in-process manager's secret as a file under the scratch, for the instance's store. */
static int write_secret(struct pool_bench *b)
{
	int fd, ret = 0;

	snprintf(b->secret_path, sizeof(b->secret_path), "%s/pool.secret", b->scratch);
	fd = open(b->secret_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, b->secret, sizeof(b->secret)) != (ssize_t)sizeof(b->secret))
		ret = -errno;
	if (fd >= 0)
		close(fd);
	if (ret)
		fprintf(stderr, "selene bench pool: writing %s: %s\n", b->secret_path,
			sel_strerror(ret));
	b->secret_file = b->secret_path;
	return ret;
}

static void *manager_thread(void *arg)
{
	pool_manager_run(arg);
	return NULL;
}

static int bench_pool_run(struct pool_bench *b)
{
	struct pool_manager_config mc = {
		.listen = "127.0.0.1:0",
		.name = "bench",
	};
	pthread_t thread;
	char why[256] = "";
	int ret;

	ret = make_geometry(b);
	if (!ret)
		ret = write_record(b);
	if (ret) {
		fprintf(stderr, "selene bench pool: writing the record: %s\n", sel_strerror(ret));
		return ret;
	}
	if (b->manager_address) {
		snprintf(b->address, sizeof(b->address), "%s", b->manager_address);
		ret = pool_secret_load(b->secret_file, b->secret, why, sizeof(why));
		if (ret) {
			fprintf(stderr, "selene bench pool: %s\n", why);
			return ret;
		}
		return bench_pool_attached(b);
	}
	if (getrandom(b->secret, sizeof(b->secret), 0) < 0)
		return -errno;
	ret = write_secret(b);
	if (ret)
		return ret;
	memcpy(mc.secret, b->secret, sizeof(mc.secret));
	mc.memory_bytes = sel_align_up(2 * b->image_bytes + (16u << 20), SEL_BLOCK_BYTES);
	ret = pool_manager_open(&mc, &b->manager, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "selene bench pool: manager: %s\n", why);
		return ret;
	}
	ret = -pthread_create(&thread, NULL, manager_thread, b->manager);
	if (ret)
		goto out_close_manager;
	snprintf(b->address, sizeof(b->address), "127.0.0.1:%u", pool_manager_port(b->manager));
	ret = bench_pool_attached(b);
	pool_manager_stop(b->manager);
	pthread_join(thread, NULL);
out_close_manager:
	pool_manager_close(b->manager);
	return ret;
}

/* Attached to the manager at b->address: the put, then the rounds. */
static int bench_pool_attached(struct pool_bench *b)
{
	uint8_t *image = NULL;
	int ret;

	ret = rank_open(b);
	if (ret)
		goto out_close_rank;
	b->slot_bytes = pool_client_slot_bytes(b->client);
	image = read_image(b);
	b->destination = malloc(b->image_bytes);
	b->claim_s = calloc(b->rounds, sizeof(double));
	b->raw_s = calloc(b->rounds, sizeof(double));
	ret = -ENOMEM;
	for (uint32_t i = 0; i < BENCH_POOL_SLOTS; i++)
		if (!(b->slots[i] = aligned_alloc(4096, sel_align_up(b->slot_bytes, 4096))))
			goto out_free;
	if (!image || !b->destination || !b->claim_s || !b->raw_s)
		goto out_free;
	ret = image_layout(b, image);
	if (ret)
		goto out_free;
	ret = put_record(b, image);
	if (ret)
		goto out_free;
	ret = run_rounds(b, image);
	if (!ret)
		ret = shm_bench(b, image);
out_free:
	for (uint32_t i = 0; i < BENCH_POOL_SLOTS; i++)
		free(b->slots[i]);
	free(b->claim_s);
	free(b->raw_s);
	free(b->destination);
	free(image);
out_close_rank:
	pool_client_close(b->client);
	return ret;
}

int bench_pool(const char *scratch, const struct bench_pool_options *o)
{
	struct pool_bench b = {
		.scratch = scratch,
		.pages = o->pages ? o->pages : 64,
		.rounds = o->rounds ? o->rounds : 12,
		.manager_address = o->manager,
		.secret_file = o->secret_file,
		.device_kind = o->device ? o->device : "auto",
	};

	return bench_pool_run(&b) ? 1 : 0;
}
