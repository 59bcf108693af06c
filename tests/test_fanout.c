/*
 * Three ranks in one process over loopback TCP, end to end: the cluster
 * forms, rank zero's store policy drives jobs through the fan-out, every
 * peer agent executes them on its own engine and directory. A store lands
 * on every rank (same file names and lengths, each rank's own bytes); a
 * fetch restores every rank's pages byte-exact into other ids; a store
 * refused by one rank is unlinked from the others before it is reported;
 * a peer whose connection dies stops the transport with a fatal event; a
 * peer that answers jobs nobody sent, or floods rank zero with answers,
 * stops it too, saying so (a raw-frame peer).
 */
#include "tests/testutil.h"

#include "cluster/protocol.h"
#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "coordinator/cluster.h"
#include "coordinator/fanout.h"
#include "shard/pool_share.h"
#include "coordinator/store.h"
#include "peer/agent.h"
#include "peer/join.h"
#include "record/disk.h"
#include "selene/selene.h"
#include "shard/device.h"
#include "shard/engine.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define WORLD 3
#define UNIT 4096u
#define PAGES 64u
#define ROW 4096u

struct rank {
	uint32_t r;
	char *base;
	struct rec_geometry g;
	struct rec_identity ns;
	struct rec_dir *dir;
	struct shard_device *dev;
	struct shard_engine *engine;
	struct shard_planes planes;
	uint8_t *plane[2], *rows;
	uint16_t port;
	int fd;
	pthread_t thread;
	int result;
	char why[256];
	uint32_t rogue_answers; /* >0: after joining, send this many bogus JOB_DONEs */
	bool rogue_twice;       /* after joining, answer every job twice */
	bool verdict;           /* after joining, fail every fetch, late, by checksum */
};

static uint32_t rogue_answers; /* for the next setup's rank 2 */
static bool rogue_twice;        /* for the next setup's rank 2 */
static bool verdict;            /* for the next setup's rank 2 */
static bool durable_dirs;       /* for the next setup's ranks */

struct fixture {
	struct rank ranks[WORLD];
	uint8_t secret[CLUSTER_SECRET_BYTES];
	struct coord_fanout *fanout;
	struct coord_store *store;
	struct rec_history h;
};

static void rank_open(struct rank *k, uint32_t r)
{
	struct shard_engine_options o = { .geometry = &k->g, .planes = &k->planes,
					   .jobs_max = 64 };
	char err[256];

	k->r = r;
	k->base = tu_make_temp_dir("fanout");
	tu_geometry(&k->g, 64, 2, UNIT, ROW, r, WORLD);
	k->g.page_count = PAGES;
	tu_identities(NULL, &k->ns);
	k->dir = tu_dir_open(k->base, &k->g, durable_dirs);
	assert_int_equal(shard_device_open_host(&k->dev), 0);
	for (int p = 0; p < 2; p++) {
		k->plane[p] = tu_alloc((uint64_t)UNIT * PAGES);
		k->planes.page_base[p] = (uintptr_t)k->plane[p];
	}
	k->rows = tu_alloc((uint64_t)ROW * k->g.row_count);
	k->planes.row_base = (uintptr_t)k->rows;
	o.dir = k->dir;
	o.device = k->dev;
	if (shard_engine_open(&o, &k->engine, err, sizeof(err)) != 0)
		fail_msg("engine: %s", err);
}

static void rank_close(struct rank *k)
{
	shard_engine_close(k->engine);
	shard_device_close(k->dev);
	rec_dir_close(k->dir);
	tu_remove_tree(k->base);
	free(k->plane[0]);
	free(k->plane[1]);
	free(k->rows);
}

/* Page i of the conversation, as rank r's device holds it. */
static void fill_page(struct rank *k, uint32_t id, uint32_t index)
{
	for (int p = 0; p < 2; p++)
		tu_fill(k->plane[p] + (uint64_t)UNIT * id, UNIT, index * 8 + p + k->r * 1000);
}

static bool page_is(struct rank *k, uint32_t id, uint32_t index)
{
	uint8_t expect[UNIT];

	for (int p = 0; p < 2; p++) {
		tu_fill(expect, UNIT, index * 8 + p + k->r * 1000);
		if (memcmp(expect, k->plane[p] + (uint64_t)UNIT * id, UNIT) != 0)
			return false;
	}
	return true;
}

struct peer_arg {
	struct fixture *f;
	struct rank *k;
};

/* A peer that answers what nobody asked, as raw frames, then waits for the end. */
static void rogue_peer(struct rank *k, struct cluster_sequences *seq)
{
	uint8_t buf[256];

	for (uint32_t i = 0; i < k->rogue_answers; i++) {
		struct cluster_job_done done = { .job_id = 5 + i % 7, .bytes = 1 };
		int n = cluster_job_done_encode(&done, buf, sizeof(buf));

		if (n <= 0 || cluster_frame_write(k->fd, &seq->send, CLUSTER_MSG_JOB_DONE, buf,
						  (uint32_t)n) != 0)
			break;
	}
	while (read(k->fd, buf, sizeof(buf)) > 0)
		;
}

/*
 * A fake peer's loop: reads every JOB it is sent and writes the answer
 * answer fills in, as many times as it returns, until the link ends.
 */
static void serve_jobs(struct rank *k, struct cluster_sequences *seq,
		       int (*answer)(const struct cluster_job_view *v,
				     struct cluster_job_done *done))
{
	static uint8_t frame[CLUSTER_FRAME_PAYLOAD_BYTES_MAX];
	struct cluster_frame_header header;
	char why[200];

	while (cluster_frame_read(k->fd, frame, sizeof(frame), &seq->recv, &header, why,
				  sizeof(why)) == 1) {
		struct cluster_job_done done = { 0 };
		struct cluster_job_view v;
		uint8_t buf[512];
		int n, times;

		if (header.type != CLUSTER_MSG_JOB ||
		    cluster_job_decode(frame, header.payload_length, &v, why, sizeof(why)) != 0)
			continue;
		done.job_id = v.job_id;
		times = answer(&v, &done);
		n = cluster_job_done_encode(&done, buf, sizeof(buf));
		for (int i = 0; i < times && n > 0; i++)
			if (cluster_frame_write(k->fd, &seq->send, CLUSTER_MSG_JOB_DONE, buf,
						(uint32_t)n) != 0)
				return;
	}
}

/* Every job answered twice, at once, with success. */
static int answer_twice(const struct cluster_job_view *v, struct cluster_job_done *done)
{
	(void)v;
	(void)done;
	return 2;
}

/*
 * Stores, truncates and unlinks answered with success (writing nothing),
 * every fetch, 200 ms late, with a checksum failure naming the chain's
 * first record.
 */
static int answer_verdict(const struct cluster_job_view *v, struct cluster_job_done *done)
{
	if (v->kind == CLUSTER_JOB_FETCH) {
		struct cluster_chain_record r;
		char name[REC_FILE_NAME_BYTES];

		cluster_job_view_chain_record(v, 0, &r);
		rec_file_name(name, &r.key);
		done->result = SEL_ECHECKSUM;
		snprintf(done->reason, sizeof(done->reason), "%s: page 0 fails its checksum", name);
		usleep(200000);
	} else if (v->kind == CLUSTER_JOB_TRUNCATE) {
		char name[REC_FILE_NAME_BYTES];

		rec_file_name(name, &v->key);
		done->result = SEL_EBADHEADER;
		snprintf(done->reason, sizeof(done->reason), "%s: bad header", name);
		usleep(200000);
	}
	return 1;
}

static void *peer_main(void *arg)
{
	bool undrained;
	struct rank *k = arg;
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(k->port) };
	struct cluster_identity me = { .rank = k->r, .world_size = WORLD,
				       .fingerprint = k->g.fingerprint,
				       .layout_digest = k->g.layout_digest,
				       .has_disk_store = true, .disk_limit_bytes = 1ull << 30 };
	struct cluster_sequences seq = { 0 };
	struct timeval tv = { .tv_sec = 10 };
	struct rec_scan scan;
	uint64_t limit;
	uint8_t secret[CLUSTER_SECRET_BYTES];

	memset(secret, 0x33, sizeof(secret));
	k->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	setsockopt(k->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(k->fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
	    rec_dir_scan(k->dir, &scan) != 0) {
		k->result = -EIO;
		return NULL;
	}
	k->result = peer_join_cluster(k->fd, secret, &me, k->dir, &scan, &seq, &limit, k->why,
				      sizeof(k->why));
	rec_scan_free(&scan);
	if (k->result)
		return NULL;
	if (k->rogue_answers) {
		rogue_peer(k, &seq);
		return NULL;
	}
	if (k->rogue_twice || k->verdict) {
		serve_jobs(k, &seq, k->verdict ? answer_verdict : answer_twice);
		return NULL;
	}
	k->result = peer_agent_run(&(struct peer_agent_options){
		.fd = k->fd, .seq = seq, .engine = k->engine, .geometry = &k->g,
		.namespace_id = &k->ns, .heartbeat_ms = 100, .silence_timeout_ms = 5000 },
		&undrained, k->why, sizeof(k->why));
	assert_false(undrained); /* every test's jobs end */
	return NULL;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct coord_peer peers[WORLD - 1];
	struct rec_scan scan;
	struct coord_jobs jobs;
	struct rec_identity model;
	uint32_t tokens[2000];
	uint64_t limit;
	char err[256];
	uint16_t port;
	int listener;

	sel_log_set_level(SEL_LOG_ERROR);
	memset(f->secret, 0x33, sizeof(f->secret));
	for (uint32_t r = 0; r < WORLD; r++)
		rank_open(&f->ranks[r], r);
	listener = tu_listen_loopback(WORLD, &port);
	f->ranks[2].rogue_answers = rogue_answers;
	f->ranks[2].rogue_twice = rogue_twice;
	f->ranks[2].verdict = verdict;
	rogue_answers = 0;
	rogue_twice = false;
	verdict = false;
	durable_dirs = false;
	for (uint32_t r = 1; r < WORLD; r++) {
		f->ranks[r].port = port;
		assert_int_equal(pthread_create(&f->ranks[r].thread, NULL, peer_main,
						&f->ranks[r]), 0);
	}
	assert_int_equal(rec_dir_scan(f->ranks[0].dir, &scan), 0);
	if (coord_cluster_form(&(struct coord_form_options){
		    .listen_fd = listener, .secret = f->secret,
		    .policy = { .world_size = WORLD, .layout_digest = f->ranks[0].g.layout_digest,
				.has_disk_store = true },
		    .disk_limit_bytes = 1ull << 30, .dir = f->ranks[0].dir,
		    .records = scan.records, .record_count = scan.record_count,
		    .timeout_ms = 10000 }, peers, &limit, err, sizeof(err)) != 0)
		fail_msg("form: %s", err);
	rec_scan_free(&scan);
	close(listener);
	assert_int_equal(coord_fanout_open(&(struct coord_fanout_options){
		.local = f->ranks[0].engine, .peers = peers, .peer_count = WORLD - 1,
		.heartbeat_ms = 100, .silence_timeout_ms = 5000, .job_timeout_ms = 10000,
		.queue_bytes_max = 8u << 20 }, &f->fanout), 0);
	coord_fanout_jobs(f->fanout, &jobs);
	f->store = calloc(1, sizeof(*f->store));
	tu_identities(&model, NULL);
	assert_int_equal(coord_store_init(f->store, &f->ranks[0].g, &model, REC_STATE_ORDINARY,
					  limit, 1000, &jobs), 0);
	tu_tokens(tokens, 2000, 5150);
	assert_int_equal(rec_history_init(&f->h, &model, tokens, 2000), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	coord_fanout_close(f->fanout); /* the peers' links end: they stop */
	for (uint32_t r = 1; r < WORLD; r++)
		pthread_join(f->ranks[r].thread, NULL);
	coord_store_destroy(f->store);
	free(f->store);
	rec_history_free(&f->h);
	for (uint32_t r = 0; r < WORLD; r++)
		rank_close(&f->ranks[r]);
	sel_log_set_level(SEL_LOG_INFO);
	free(f);
	return 0;
}

static struct sel_event wait_event(struct fixture *f)
{
	struct sel_event ev = { .kind = SEL_EVENT_FATAL, .error = -ETIMEDOUT };

	for (int i = 0; i < 10000; i++) {
		if (coord_store_poll(f->store, &ev, 1) == 1)
			return ev;
		usleep(1000);
	}
	return ev;
}

static void publish(struct fixture *f, uint64_t checkpoint, uint64_t consumed)
{
	uint32_t ids[PAGES];
	struct sel_publication pub = { .checkpoint = checkpoint, .consumed = consumed,
				       .page_ids = ids, .state_slot = 1 };
	enum sel_outcome outcome;

	for (uint32_t i = 0; i < consumed / 64; i++) {
		ids[i] = i;
		for (uint32_t r = 0; r < WORLD; r++)
			fill_page(&f->ranks[r], i, i);
	}
	for (uint32_t r = 0; r < WORLD; r++)
		tu_fill(f->ranks[r].rows + ROW, ROW, consumed + r);
	assert_int_equal(coord_store_publish(f->store, &f->h, &pub, &outcome), 0);
	assert_int_equal(outcome, SEL_QUEUED);
}

/* Store on every rank, then fetch every rank's bytes into other ids. */
static void test_fanout_store_and_fetch(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev;
	struct sel_hit hit;
	uint32_t ids[PAGES];
	bool joined;

	publish(f, 7, 1000);
	ev = wait_event(f);
	if (ev.kind != SEL_EVENT_STORED)
		fail_msg("store: %d %s", ev.kind, ev.why);
	for (uint32_t r = 0; r < WORLD; r++) {
		struct rec_scan scan;

		assert_int_equal(rec_dir_scan(f->ranks[r].dir, &scan), 0);
		assert_int_equal(scan.record_count, 1);
		assert_int_equal(scan.records[0].key.consumed, 1000);
		rec_scan_free(&scan);
		memset(f->ranks[r].plane[0], 0xee, (uint64_t)UNIT * PAGES);
		memset(f->ranks[r].plane[1], 0xee, (uint64_t)UNIT * PAGES);
	}
	assert_true(coord_store_lookup(f->store, &f->h, 0, &hit));
	assert_int_equal(hit.page_count, 1000 / 64);
	for (uint32_t i = 0; i < hit.page_count; i++)
		ids[i] = 40 + i;
	assert_int_equal(coord_store_fetch(f->store, &hit, ids, 3, 99, &joined), 0);
	ev = wait_event(f);
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("fetch: %d %s", ev.kind, ev.why);
	for (uint32_t r = 0; r < WORLD; r++) {
		uint8_t expect[ROW];

		for (uint32_t i = 0; i < hit.page_count; i++)
			if (!page_is(&f->ranks[r], 40 + i, i))
				fail_msg("rank %u page %u differs", r, i);
		tu_fill(expect, ROW, 1000 + r);
		assert_memory_equal(f->ranks[r].rows + 3 * ROW, expect, ROW);
	}
}

/* One rank's pool in memory: a put keeps its share image; a claim streams it back. */
struct rank_pool {
	uint8_t *image;
	uint64_t length;
	uint64_t put_id;
	bool fail;            /* the connection fails (a manager killed mid-claim) */
	uint32_t early_claims; /* claims begun before their grant */
};

static int rank_put_share(void *ctx, uint64_t put_id, int fd, uint64_t length, char *why,
			  size_t why_size)
{
	struct rank_pool *rp = ctx;

	(void)why;
	(void)why_size;
	free(rp->image);
	rp->image = malloc(length);
	assert_int_equal(pread(fd, rp->image, length, 0), (ssize_t)length);
	rp->length = length;
	rp->put_id = put_id;
	return 0;
}

/* The whole record in one window of pages from skip, then its row. */
static int rank_claim_share(void *ctx, uint64_t claim_id, const struct shard_pool_record *chain,
			    uint32_t chain_count, uint32_t skip_pages,
			    struct shard_pool_share *share, char *why, size_t why_size)
{
	struct rank_pool *rp = ctx;
	struct rec_header h;
	int ret;

	(void)claim_id;
	if (rp->fail)
		return sel_fail(-ECONNRESET, why, why_size, "the manager went away");
	assert_int_equal(chain_count, 1);
	assert_int_equal(rec_header_decode(rp->image, &h, NULL, 0), 0);
	assert_true(rec_key_equal(&h.key, &chain[0].key));
	ret = shard_pool_share_window(share, 0, SHARD_POOL_SECTION_PAGES, skip_pages,
				      h.tail_page_count - skip_pages,
				      rp->image + h.page_offset + h.page_stride * skip_pages,
				      h.page_stride * (h.tail_page_count - skip_pages), why,
				      why_size);
	return ret ? ret : shard_pool_share_window(share, 0, SHARD_POOL_SECTION_ROW, 0,
						   (uint32_t)h.row_length,
						   rp->image + h.row_offset, h.row_length, why,
						   why_size);
}

/* Rank zero's share before the grant: the test's windows, as rank_claim_share. */
static int rank_claim_early(void *ctx, uint64_t claim_id, struct shard_pool_early *early,
			    struct shard_pool_share *share, char *why, size_t why_size)
{
	struct rank_pool *rp = ctx;

	assert_non_null(early);
	rp->early_claims++;
	return rank_claim_share(ctx, claim_id, share->chain, share->chain_count,
				share->skip_pages, share, why, why_size);
}

/* Polls the fan-out's own jobs table until job_id completes. */
static struct shard_completion wait_job(struct fixture *f, uint64_t job_id)
{
	struct shard_completion c = { .result = -ETIMEDOUT };
	struct coord_jobs jobs;

	coord_fanout_jobs(f->fanout, &jobs);
	for (int i = 0; i < 10000; i++) {
		if (jobs.poll(jobs.ctx, &c, 1) == 1) {
			assert_int_equal(c.job_id, job_id);
			return c;
		}
		usleep(1000);
	}
	fail_msg("job %llu never completed", (unsigned long long)job_id);
	return c;
}

/*
 * A pool put reaches every rank (rank zero's engine and a JOB to each
 * peer), each sending its own record file as its share; a pool claim
 * restores every rank's share byte-exact into other page ids; a claim
 * that fails on one rank fails the job, naming the rank; and a rank
 * without a pool connection answers -ENOTSUP.
 */
static void test_fanout_pool_share_jobs(void **state)
{
	struct fixture *f = *state;
	struct rank_pool pools[WORLD] = { 0 };
	struct shard_pool_record chain;
	struct shard_completion c;
	struct rec_key key;
	struct sel_event ev;
	uint32_t ids[PAGES];
	uint64_t share = rec_geometry_file_bytes(&f->ranks[0].g, 1000 / 64, true);

	publish(f, 7, 1000);
	ev = wait_event(f);
	assert_int_equal(ev.kind, SEL_EVENT_STORED);
	rec_history_key_at(&f->h, 1000, &key);
	/* no rank has a connection yet */
	assert_int_equal(coord_fanout_pool_put(f->fanout, 63, &key, 5, share), 0);
	c = wait_job(f, 63);
	assert_int_equal(c.result, -ENOTSUP);
	assert_non_null(strstr(c.why, "has no pool connection"));
	for (uint32_t r = 0; r < WORLD; r++)
		assert_int_equal(shard_engine_set_pool(f->ranks[r].engine, &(struct shard_pool_conn){
			.ctx = &pools[r], .put_share = rank_put_share,
			.claim_share = rank_claim_share }, &f->ranks[r].ns), 0);
	assert_int_equal(coord_fanout_pool_put(f->fanout, 63, &key, 5, share), 0);
	c = wait_job(f, 63);
	assert_int_equal(c.result, 0);
	for (uint32_t r = 0; r < WORLD; r++) {
		assert_int_equal(pools[r].length, share);
		assert_int_equal(pools[r].put_id, 5);
		memset(f->ranks[r].plane[0], 0xee, (uint64_t)UNIT * PAGES);
		memset(f->ranks[r].plane[1], 0xee, (uint64_t)UNIT * PAGES);
	}
	chain = (struct shard_pool_record){ key, 0, 1000 / 64, true };
	for (uint32_t i = 0; i < 1000 / 64 - 2; i++)
		ids[i] = 40 + i;
	assert_int_equal(coord_fanout_pool_claim(f->fanout, 62, &(struct shard_pool_claim_job){
		.claim_id = 9, .chain = &chain, .chain_count = 1, .skip_pages = 2,
		.page_ids = ids, .state_slot = 3 }, 1000 / 64 - 2), 0);
	c = wait_job(f, 62);
	assert_int_equal(c.result, 0);
	for (uint32_t r = 0; r < WORLD; r++) {
		uint8_t expect[ROW];

		for (uint32_t i = 0; i < 1000 / 64 - 2; i++)
			if (!page_is(&f->ranks[r], 40 + i, 2 + i))
				fail_msg("rank %u page %u differs", r, i);
		tu_fill(expect, ROW, 1000 + r);
		assert_memory_equal(f->ranks[r].rows + 3 * ROW, expect, ROW);
	}
	pools[2].fail = true;
	assert_int_equal(coord_fanout_pool_claim(f->fanout, 62, &(struct shard_pool_claim_job){
		.claim_id = 10, .chain = &chain, .chain_count = 1, .skip_pages = 2,
		.page_ids = ids, .state_slot = 3 }, 1000 / 64 - 2), 0);
	c = wait_job(f, 62);
	assert_int_equal(c.result, -ECONNRESET);
	assert_non_null(strstr(c.why, "rank 2: pool claim: the manager went away"));
	for (uint32_t r = 0; r < WORLD; r++) {
		shard_engine_set_pool(f->ranks[r].engine, NULL, NULL);
		free(pools[r].image);
	}
}

/*
 * A same-host claim begun early (R-POOL-22): rank zero's engine gets its
 * share at once, the peers' go at the grant (coord_fanout_pool_claim), and
 * the job completes once, with every rank's bytes in place; cancelled
 * instead (a refused claim), the peers get nothing and the job fails with
 * the refusal once rank zero's share ended, though rank zero succeeded.
 */
static void test_fanout_pool_claim_early(void **state)
{
	struct fixture *f = *state;
	struct rank_pool pools[WORLD] = { 0 };
	struct shard_pool_early early = { .stamp = 1 };
	struct shard_pool_record chain;
	struct shard_completion c;
	struct coord_jobs jobs;
	struct rec_key key;
	uint32_t ids[PAGES];
	uint64_t share = rec_geometry_file_bytes(&f->ranks[0].g, 1000 / 64, true);

	publish(f, 7, 1000);
	assert_int_equal(wait_event(f).kind, SEL_EVENT_STORED);
	rec_history_key_at(&f->h, 1000, &key);
	for (uint32_t r = 0; r < WORLD; r++)
		assert_int_equal(shard_engine_set_pool(f->ranks[r].engine, &(struct shard_pool_conn){
			.ctx = &pools[r], .put_share = rank_put_share,
			.claim_share = rank_claim_share, .claim_early = rank_claim_early },
			&f->ranks[r].ns), 0);
	assert_int_equal(coord_fanout_pool_put(f->fanout, 63, &key, 5, share), 0);
	assert_int_equal(wait_job(f, 63).result, 0);
	for (uint32_t r = 0; r < WORLD; r++) {
		memset(f->ranks[r].plane[0], 0xee, (uint64_t)UNIT * PAGES);
		memset(f->ranks[r].plane[1], 0xee, (uint64_t)UNIT * PAGES);
	}
	chain = (struct shard_pool_record){ key, 0, 1000 / 64, true };
	for (uint32_t i = 0; i < 1000 / 64 - 2; i++)
		ids[i] = 40 + i;
	assert_int_equal(coord_fanout_pool_claim_early(f->fanout, 62, &(struct shard_pool_claim_job){
		.claim_id = 9, .chain = &chain, .chain_count = 1, .skip_pages = 2,
		.page_ids = ids, .state_slot = 3, .early = &early }), 0);
	coord_fanout_jobs(f->fanout, &jobs);
	for (int i = 0; i < 20; i++) {
		assert_int_equal(jobs.poll(jobs.ctx, &c, 1), 0); /* the peers' shares are to come */
		usleep(1000);
	}
	assert_int_equal(coord_fanout_pool_claim(f->fanout, 62, &(struct shard_pool_claim_job){
		.claim_id = 9, .chain = &chain, .chain_count = 1, .skip_pages = 2,
		.page_ids = ids, .state_slot = 3 }, 1000 / 64 - 2), 0);
	c = wait_job(f, 62);
	assert_int_equal(c.result, 0);
	assert_int_equal(pools[0].early_claims, 1);
	for (uint32_t r = 0; r < WORLD; r++) {
		uint8_t expect[ROW];

		if (r > 0)
			assert_int_equal(pools[r].early_claims, 0);
		for (uint32_t i = 0; i < 1000 / 64 - 2; i++)
			if (!page_is(&f->ranks[r], 40 + i, 2 + i))
				fail_msg("rank %u page %u differs", r, i);
		tu_fill(expect, ROW, 1000 + r);
		assert_memory_equal(f->ranks[r].rows + 3 * ROW, expect, ROW);
	}

	/* refused after rank zero's share began */
	assert_int_equal(coord_fanout_pool_claim_early(f->fanout, 62, &(struct shard_pool_claim_job){
		.claim_id = 10, .chain = &chain, .chain_count = 1, .skip_pages = 2,
		.page_ids = ids, .state_slot = 3, .early = &early }), 0);
	coord_fanout_pool_claim_cancel(f->fanout, 62, -ENOENT, "the pool refused the claim");
	c = wait_job(f, 62);
	assert_int_equal(c.result, -ENOENT);
	assert_non_null(strstr(c.why, "refused"));
	assert_int_equal(pools[0].early_claims, 2);
	assert_int_equal(jobs.poll(jobs.ctx, &c, 1), 0); /* one completion only */
	for (uint32_t r = 0; r < WORLD; r++) {
		shard_engine_set_pool(f->ranks[r].engine, NULL, NULL);
		free(pools[r].image);
	}
}

/* A store one rank refuses is unlinked from the others, then reported. */
static void test_fanout_partial_store_cleaned_up(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev;
	struct rec_key key;

	/* a directory has that record's name on rank 2: its rename fails */
	rec_history_key_at(&f->h, 600, &key);
	{
		char *path = tu_record_path(f->ranks[2].dir, &key);

		assert_int_equal(mkdir(path, 0755), 0);
		free(path);
	}
	publish(f, 8, 600);
	ev = wait_event(f);
	assert_int_equal(ev.kind, SEL_EVENT_STORE_FAILED);
	assert_int_equal(ev.error, -EISDIR);
	assert_non_null(strstr(ev.why, "rank 2"));
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(tu_count_suffix(rec_dir_path(f->ranks[r].dir), ".ckpt"), 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->ranks[2].dir), ".ckpt"), 1);
}

/*
 * On three ranks: a fetch submitted while a store is being
 * written (each write held 30 ms by a sleep failpoint, so the store yields
 * to the fetch before its commit on every rank that sees the fetch in
 * time) restores byte-exact, and the store, refused by rank 2 at its
 * commit, is still all-or-nothing: reported once, unlinked from ranks 0
 * and 1.
 */
static void test_fanout_fetch_during_failing_store(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev;
	struct sel_hit hit;
	struct rec_key key;
	uint32_t ids[PAGES];
	uint64_t yields = 0;
	bool joined, fetched = false, failed = false;

	publish(f, 7, 1000);
	ev = wait_event(f);
	assert_int_equal(ev.kind, SEL_EVENT_STORED);
	rec_history_key_at(&f->h, 1500, &key);
	{
		char *path = tu_record_path(f->ranks[2].dir, &key);

		assert_int_equal(mkdir(path, 0755), 0);
		free(path);
	}
	assert_true(coord_store_lookup(f->store, &f->h, 0, &hit));
	assert_int_equal(hit.consumed, 1000);
	assert_int_equal(sel_failpoints_configure("record.before_write=sleep(30)"), 0);
	/* the destination only: the store reads ids 0.. meanwhile */
	for (uint32_t r = 0; r < WORLD; r++) {
		memset(f->ranks[r].plane[0] + UNIT * 40, 0xee, (uint64_t)UNIT * hit.page_count);
		memset(f->ranks[r].plane[1] + UNIT * 40, 0xee, (uint64_t)UNIT * hit.page_count);
	}
	publish(f, 8, 1500);
	for (uint32_t i = 0; i < hit.page_count; i++)
		ids[i] = 40 + i;
	assert_int_equal(coord_store_fetch(f->store, &hit, ids, 3, 99, &joined), 0);
	for (int n = 0; n < 2; n++) {
		ev = wait_event(f);
		if (ev.kind == SEL_EVENT_FETCHED && ev.id == 99) {
			fetched = true;
		} else if (ev.kind == SEL_EVENT_STORE_FAILED && ev.id == 8) {
			assert_int_equal(ev.error, -EISDIR);
			assert_non_null(strstr(ev.why, "rank 2"));
			failed = true;
		} else {
			fail_msg("event %d for %llu: %s", ev.kind, (unsigned long long)ev.id,
				 ev.why);
		}
	}
	sel_failpoints_configure(NULL);
	assert_true(fetched && failed);
	for (uint32_t r = 0; r < WORLD; r++) {
		struct shard_engine_stats stats;

		for (uint32_t i = 0; i < hit.page_count; i++)
			if (!page_is(&f->ranks[r], 40 + i, i))
				fail_msg("rank %u page %u differs", r, i);
		shard_engine_stats(f->ranks[r].engine, &stats);
		yields += stats.store_yields;
	}
	printf("stores yielded to the fetch on %llu of %u ranks\n",
	       (unsigned long long)yields, WORLD);
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(tu_count_suffix(rec_dir_path(f->ranks[r].dir), ".ckpt"), 1);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->ranks[2].dir), ".ckpt"), 2);
}

/* A peer whose connection dies with a job outstanding stops the transport. */
static void test_fanout_dead_peer_is_fatal(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev;
	enum sel_outcome outcome;
	uint32_t ids[PAGES] = { 0 };
	struct sel_publication pub = { .checkpoint = 9, .consumed = 300, .page_ids = ids };

	publish(f, 9, 1300);
	shutdown(f->ranks[1].fd, SHUT_RDWR);
	ev = wait_event(f);
	assert_int_equal(ev.kind, SEL_EVENT_FATAL);
	assert_non_null(strstr(ev.why, "rank 1"));
	assert_int_equal(coord_store_publish(f->store, &f->h, &pub, &outcome), SEL_ESTOPPED);
}

/* Noops go to every rank's engine and complete once all answered. */
static void test_fanout_noop(void **state)
{
	struct fixture *f = *state;
	struct shard_engine_stats before[WORLD], after;
	struct sel_event ev;
	uint32_t submitted = 0;

	for (uint32_t r = 0; r < WORLD; r++)
		shard_engine_stats(f->ranks[r].engine, &before[r]);
	for (int i = 0; i < 10000 && f->store->noops_done < 200; i++) {
		while (submitted < 200 && coord_store_noop(f->store) == 0)
			submitted++;
		/* a noop makes no event */
		assert_int_equal(coord_store_poll(f->store, &ev, 1), 0);
		usleep(100);
	}
	assert_int_equal(submitted, 200);
	assert_int_equal(f->store->noops_done, 200);
	assert_int_equal(f->store->noops_failed, 0);
	assert_int_equal(coord_store_jobs_in_flight(f->store), 0);
	for (uint32_t r = 0; r < WORLD; r++) {
		shard_engine_stats(f->ranks[r].engine, &after);
		assert_int_equal(after.jobs_done - before[r].jobs_done, 200);
		assert_int_equal(tu_count_suffix(rec_dir_path(f->ranks[r].dir), ".ckpt"), 0);
	}
}

/* Polls until no job is in flight (unlinks make no event). */
static void wait_quiet(struct fixture *f)
{
	struct sel_event ev;

	for (int i = 0; i < 10000 && coord_store_jobs_in_flight(f->store) > 0; i++) {
		assert_int_equal(coord_store_poll(f->store, &ev, 1), 0);
		usleep(1000);
	}
	assert_int_equal(coord_store_jobs_in_flight(f->store), 0);
}

/* Fetches the longest stored prefix, which must end at consumed, into ids 40... */
static struct sel_event fetch_longest(struct fixture *f, uint64_t consumed)
{
	struct sel_hit hit;
	uint32_t ids[PAGES];
	bool joined;

	assert_true(coord_store_lookup(f->store, &f->h, 0, &hit));
	assert_int_equal(hit.consumed, consumed);
	assert_int_equal(hit.page_count, consumed / 64);
	for (uint32_t i = 0; i < hit.page_count; i++)
		ids[i] = 40 + i;
	assert_int_equal(coord_store_fetch(f->store, &hit, ids, 3, 99, &joined), 0);
	return wait_event(f);
}

/*
 * R-READ-4: a record whose page fails its checksum on one rank: the
 * fetch fails with SEL_ECHECKSUM, the record and the record depending on it
 * leave the index and every rank's directory, the drop is counted, the
 * same checkpoint then stores again, and restores byte-exact.
 */
static void test_fanout_corrupt_record_dropped_and_stored_again(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev;
	struct rec_key key;
	char *path;

	publish(f, 7, 1000);
	ev = wait_event(f);
	assert_int_equal(ev.kind, SEL_EVENT_STORED);
	{
		uint32_t ids[PAGES];
		struct sel_publication pub = { .checkpoint = 8, .consumed = 1300,
					       .parent_consumed = 1000, .page_ids = ids,
					       .state_slot = 1 };
		enum sel_outcome outcome;

		for (uint32_t i = 0; i < 1300 / 64; i++)
			ids[i] = i;
		for (uint32_t r = 0; r < WORLD; r++)
			for (uint32_t i = 1000 / 64; i < 1300 / 64; i++)
				fill_page(&f->ranks[r], i, i);
		assert_int_equal(coord_store_publish(f->store, &f->h, &pub, &outcome), 0);
		assert_int_equal(outcome, SEL_QUEUED);
		ev = wait_event(f);
		assert_int_equal(ev.kind, SEL_EVENT_STORED);
	}
	/* 1000 is a root record (it keeps its row); 1300 depends on it */
	wait_quiet(f);
	rec_history_key_at(&f->h, 1000, &key);
	path = tu_record_path(f->ranks[1].dir, &key);
	tu_flip_bit(path, 2 * 4096 + 100); /* rank 1, page 0, plane 0 */
	free(path);

	ev = fetch_longest(f, 1300); /* the chain 1000, 1300 */
	assert_int_equal(ev.kind, SEL_EVENT_FETCH_FAILED);
	assert_int_equal(ev.error, SEL_ECHECKSUM);
	wait_quiet(f);
	assert_int_equal(f->store->stats.records_dropped_checksum, 1);
	assert_int_equal(f->store->index.node_count, 0);
	assert_int_equal(f->store->used_bytes, 0);
	for (uint32_t r = 0; r < WORLD; r++)
		assert_int_equal(tu_count_suffix(rec_dir_path(f->ranks[r].dir), ".ckpt"), 0);
	{
		struct sel_hit hit;

		assert_false(coord_store_lookup(f->store, &f->h, 0, &hit));
	}

	publish(f, 9, 1000); /* Queued, not Present */
	ev = wait_event(f);
	if (ev.kind != SEL_EVENT_STORED)
		fail_msg("store again: %d %s", ev.kind, ev.why);
	for (uint32_t r = 0; r < WORLD; r++) {
		memset(f->ranks[r].plane[0], 0xee, (uint64_t)UNIT * PAGES);
		memset(f->ranks[r].plane[1], 0xee, (uint64_t)UNIT * PAGES);
	}
	ev = fetch_longest(f, 1000);
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("fetch again: %d %s", ev.kind, ev.why);
	for (uint32_t r = 0; r < WORLD; r++) {
		uint8_t expect[ROW];

		for (uint32_t i = 0; i < 1000 / 64; i++)
			if (!page_is(&f->ranks[r], 40 + i, i))
				fail_msg("rank %u page %u differs", r, i);
		tu_fill(expect, ROW, 1000 + r);
		assert_memory_equal(f->ranks[r].rows + 3 * ROW, expect, ROW);
	}
}

/* Debris the startup scan must clear: a temporary file, a record whose
 * header fails, and an orphan (its parent is that record). */
static void make_debris(struct rank *k)
{
	struct tu_record root, orphan;
	char *path;
	FILE *file;

	tu_record_make(&root, &k->g, 41, 64 * 2, NULL, 2);
	tu_record_make(&orphan, &k->g, 41, 64 * 3, &root, 3);
	assert_int_equal(tu_record_write(k->dir, &root, 0), 0);
	assert_int_equal(tu_record_write(k->dir, &orphan, 0), 0);
	path = tu_record_path(k->dir, &root.key);
	file = fopen(path, "w");
	assert_non_null(file);
	fputs("not a header", file);
	fclose(file);
	strcpy(strrchr(path, '/') + 1, "a.ckpt.tmp");
	file = fopen(path, "w");
	assert_non_null(file);
	fclose(file);
	free(path);
	tu_record_free(&root);
	tu_record_free(&orphan);
}

/*
 * Everything a rank does to its records, through the cluster: a scan over
 * make_debris's debris, a chain of three stores (the middle one's row dropped), a fetch,
 * and a corrupt record dropped (unlinked on every rank). Leaves every
 * directory empty.
 */
static void every_step_workload(struct fixture *f)
{
	static const uint64_t chain[][2] = { { 300, 0 }, { 700, 300 }, { 900, 700 } };
	struct rec_scan scan;
	struct sel_event ev;
	struct rec_key key;
	char *path;

	assert_int_equal(rec_dir_scan(f->ranks[0].dir, &scan), 0);
	assert_int_equal(scan.record_count, 0);
	rec_scan_free(&scan);
	for (size_t i = 0; i < SEL_ARRAY_SIZE(chain); i++) {
		uint32_t ids[PAGES];
		struct sel_publication pub = { .checkpoint = i, .consumed = chain[i][0],
					       .parent_consumed = chain[i][1],
					       .page_ids = ids, .state_slot = 1 };
		enum sel_outcome outcome;

		for (uint32_t p = 0; p < PAGES; p++)
			ids[p] = p;
		assert_int_equal(coord_store_publish(f->store, &f->h, &pub, &outcome), 0);
		assert_int_equal(outcome, SEL_QUEUED);
		ev = wait_event(f);
		if (ev.kind != SEL_EVENT_STORED)
			fail_msg("store %zu: %d %s", i, ev.kind, ev.why);
	}
	wait_quiet(f); /* the middle record's row drop */
	ev = fetch_longest(f, 900);
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("fetch: %d %s", ev.kind, ev.why);
	rec_history_key_at(&f->h, 300, &key);
	path = tu_record_path(f->ranks[1].dir, &key);
	tu_flip_bit(path, 2 * 4096 + 100);
	free(path);
	ev = fetch_longest(f, 900);
	assert_int_equal(ev.kind, SEL_EVENT_FETCH_FAILED);
	wait_quiet(f);
	for (uint32_t r = 0; r < WORLD; r++)
		assert_int_equal(tu_count_suffix(rec_dir_path(f->ranks[r].dir), ".ckpt"), 0);
}

/*
 * What a start evaluates (thread.start, disk.io_workers): a disk with a
 * kernel worker started on rank zero's directory and stopped.
 */
static void start_a_disk(struct fixture *f)
{
	struct rec_disk_options options = { .dir = f->ranks[0].dir, .io_workers = 1 };
	struct rec_disk *disk;
	char err[256];

	if (rec_disk_start(&options, &disk, err, sizeof(err)) != 0)
		fail_msg("disk: %s", err);
	assert_int_equal(rec_disk_stop(disk, 30000), 0);
}

/*
 * Every failpoint `selene failpoints` lists is reached.
 * Each is armed alone (sleep(0): counted, harmless) under a workload that
 * should reach it, and a start of a disk; the test names every one that
 * never fired. The peer.* points are sel_peer_start's, which this test's
 * peers do not run: test_cluster fires them (test_cluster_peer_socket_fails,
 * test_cluster_peer_dup_fails), and test_resolve peer.resolve. So is
 * warm.register, met only with a warm tier, which this test's stores have
 * not: test_warm_api_register_refused fires it. The pool.* points are met
 * only on pool connections: test_pool fires them
 * (test_pool_share_end_mid_stream_returns_slots).
 */
static void test_fanout_every_failpoint_reached(void **state)
{
	struct fixture *f = *state;
	char missed[2048] = "";

	for (int i = 0; i < SEL_FAILPOINT_COUNT; i++) {
		const char *name = sel_failpoint_name((enum sel_failpoint)i);
		char config[96];

		if (strncmp(name, "peer.", 5) == 0 || strncmp(name, "pool.", 5) == 0 ||
		    strcmp(name, "warm.register") == 0)
			continue;

		snprintf(config, sizeof(config), "%s=sleep(0)", name);
		/* before arming: its writes are not the store's write path */
		make_debris(&f->ranks[0]);
		assert_int_equal(sel_failpoints_configure(config), 0);
		every_step_workload(f);
		start_a_disk(f);
		if (sel_failpoint_fired((enum sel_failpoint)i) == 0)
			snprintf(missed + strlen(missed), sizeof(missed) - strlen(missed), " %s",
				 name);
	}
	sel_failpoints_configure(NULL);
	if (missed[0])
		fail_msg("never fired:%s", missed);
}

/*
 * R-WRITE-4: an eviction whose unlink fails on one rank
 * leaves that rank's file behind; storing the key again replaces it there
 * (before, EEXIST there failed every later store of that key), and the
 * restore is byte-exact on every rank.
 */
static void test_fanout_store_again_after_failed_unlink(void **state)
{
	struct fixture *f = *state;
	uint32_t ids[PAGES] = { 0 };
	struct sel_publication other = { .checkpoint = 2, .consumed = 600, .page_ids = ids,
					  .state_slot = 1 };
	enum sel_outcome outcome;
	struct sel_event ev;
	uint64_t limit = f->store->limit_bytes;
	uint32_t left = 0;

	publish(f, 1, 1000);
	ev = wait_event(f);
	assert_int_equal(ev.kind, SEL_EVENT_STORED);
	/* room for one record: another one evicts 1000, whose unlink fails once */
	f->store->limit_bytes = f->store->used_bytes;
	assert_int_equal(sel_failpoints_configure("disk.unlink=1*return(EIO)"), 0);
	assert_int_equal(coord_store_publish(f->store, &f->h, &other, &outcome), 0);
	assert_int_equal(outcome, SEL_RETRY);
	wait_quiet(f);
	assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_UNLINK), 1);
	sel_failpoints_configure(NULL);
	for (uint32_t r = 0; r < WORLD; r++)
		left += (uint32_t)tu_count_suffix(rec_dir_path(f->ranks[r].dir), ".ckpt");
	assert_int_equal(left, 1);
	f->store->limit_bytes = limit;

	publish(f, 3, 1000);
	ev = wait_event(f);
	if (ev.kind != SEL_EVENT_STORED)
		fail_msg("store again: %d %s", ev.kind, ev.why);
	for (uint32_t r = 0; r < WORLD; r++) {
		assert_int_equal(tu_count_suffix(rec_dir_path(f->ranks[r].dir), ".ckpt"), 1);
		memset(f->ranks[r].plane[0], 0xee, (uint64_t)UNIT * PAGES);
		memset(f->ranks[r].plane[1], 0xee, (uint64_t)UNIT * PAGES);
	}
	ev = fetch_longest(f, 1000);
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("fetch: %d %s", ev.kind, ev.why);
	for (uint32_t r = 0; r < WORLD; r++)
		for (uint32_t i = 0; i < 1000 / 64; i++)
			if (!page_is(&f->ranks[r], 40 + i, i))
				fail_msg("rank %u page %u differs", r, i);
}

/* Publishes consumed over parent (filling every rank's pages and row). */
static enum sel_outcome publish_over(struct fixture *f, uint64_t checkpoint,
				     uint64_t consumed, uint64_t parent)
{
	uint32_t ids[PAGES];
	struct sel_publication pub = { .checkpoint = checkpoint, .consumed = consumed,
				       .parent_consumed = parent, .page_ids = ids,
				       .state_slot = 1 };
	enum sel_outcome outcome;

	for (uint32_t i = 0; i < consumed / 64; i++) {
		ids[i] = i;
		for (uint32_t r = 0; r < WORLD; r++)
			fill_page(&f->ranks[r], i, i);
	}
	for (uint32_t r = 0; r < WORLD; r++)
		tu_fill(f->ranks[r].rows + ROW, ROW, consumed + r);
	assert_int_equal(coord_store_publish(f->store, &f->h, &pub, &outcome), 0);
	return outcome;
}

/*
 * The same for a row truncate (700's, once 900 commits on 300 -> 700 ->
 * 900): EIO on ranks 0 and 1, then a bad header on rank 2; 700 and its
 * child are dropped, counted as a bad header, and 300 stays.
 */
static void test_fanout_bad_record_outranks_an_io_error_in_a_truncate(void **state)
{
	struct fixture *f = *state;
	static const uint64_t chain[][2] = { { 300, 0 }, { 700, 300 }, { 900, 700 } };
	struct sel_event ev;

	for (size_t i = 0; i < SEL_ARRAY_SIZE(chain); i++) {
		if (i == 2)
			assert_int_equal(sel_failpoints_configure("disk.truncate=return(EIO)"), 0);
		assert_int_equal(publish_over(f, i, chain[i][0], chain[i][1]), SEL_QUEUED);
		ev = wait_event(f);
		assert_int_equal(ev.kind, SEL_EVENT_STORED);
	}
	wait_quiet(f); /* 700's row drop, then its unlinks and 900's */
	sel_failpoints_configure(NULL);
	wait_quiet(f);
	assert_int_equal(f->store->stats.records_dropped_header, 1);
	assert_int_equal(f->store->index.node_count, 1);
}

/*
 * On every rank: the middle record of 300 -> 700 -> 900
 * loses its row when 900 commits; publishing 700 again rewrites it whole
 * (replacing the page-only file, R-WRITE-4), and it restores at its own
 * endpoint byte-exact, row included.
 */
static void test_fanout_row_put_back(void **state)
{
	struct fixture *f = *state;
	static const uint64_t chain[][2] = { { 300, 0 }, { 700, 300 }, { 900, 700 } };
	struct rec_history shorter;
	struct sel_event ev;
	struct sel_hit hit;
	uint32_t ids[PAGES];
	bool joined;

	for (size_t i = 0; i < SEL_ARRAY_SIZE(chain); i++) {
		assert_int_equal(publish_over(f, i, chain[i][0], chain[i][1]), SEL_QUEUED);
		ev = wait_event(f);
		assert_int_equal(ev.kind, SEL_EVENT_STORED);
	}
	wait_quiet(f); /* 700's row drop */
	assert_int_equal(rec_history_init(&shorter, &f->store->model, f->h.tokens, 700), 0);
	assert_false(coord_store_lookup(f->store, &shorter, 0, &hit) && hit.consumed == 700);
	assert_int_equal(publish_over(f, 4, 700, 300), SEL_QUEUED);
	ev = wait_event(f);
	if (ev.kind != SEL_EVENT_STORED)
		fail_msg("rewrite: %d %s", ev.kind, ev.why);
	for (uint32_t r = 0; r < WORLD; r++) {
		assert_int_equal(tu_count_suffix(rec_dir_path(f->ranks[r].dir), ".ckpt"), 3);
		memset(f->ranks[r].plane[0], 0xee, (uint64_t)UNIT * PAGES);
		memset(f->ranks[r].plane[1], 0xee, (uint64_t)UNIT * PAGES);
	}
	assert_int_equal(publish_over(f, 5, 700, 300), SEL_PRESENT);
	assert_true(coord_store_lookup(f->store, &shorter, 0, &hit));
	assert_int_equal(hit.consumed, 700);
	for (uint32_t i = 0; i < hit.page_count; i++)
		ids[i] = 40 + i;
	assert_int_equal(coord_store_fetch(f->store, &hit, ids, 3, 99, &joined), 0);
	ev = wait_event(f);
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("fetch: %d %s", ev.kind, ev.why);
	for (uint32_t r = 0; r < WORLD; r++) {
		uint8_t expect[ROW];

		for (uint32_t i = 0; i < 700 / 64; i++)
			if (!page_is(&f->ranks[r], 40 + i, i))
				fail_msg("rank %u page %u differs", r, i);
		tu_fill(expect, ROW, 700 + r);
		assert_memory_equal(f->ranks[r].rows + 3 * ROW, expect, ROW);
	}
	/* and the chain through it to 900 still restores */
	ev = fetch_longest(f, 900);
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("fetch 900: %d %s", ev.kind, ev.why);
	rec_history_free(&shorter);
}

static int setup_durable(void **state)
{
	durable_dirs = true;
	return setup(state);
}

static int setup_rogue_one(void **state)
{
	rogue_answers = 1;
	return setup(state);
}

static int setup_rogue_flood(void **state)
{
	rogue_answers = 5000;
	return setup(state);
}

static int setup_rogue_twice(void **state)
{
	rogue_twice = true;
	return setup(state);
}

static int setup_verdict(void **state)
{
	verdict = true;
	return setup(state);
}

/*
 * A fetch that fails on ranks 0 and 1 with EIO (a disk error: the record
 * may be good) and, later, on rank 2 by checksum (the record is bad): the
 * checksum failure is the job's, and the record is dropped (R-READ-4);
 * before, the first failure won and the bad record stayed.
 */
static void test_fanout_bad_record_outranks_an_io_error(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev;

	publish(f, 7, 1000);
	ev = wait_event(f);
	assert_int_equal(ev.kind, SEL_EVENT_STORED);
	assert_int_equal(sel_failpoints_configure("disk.read=return(EIO)"), 0);
	ev = fetch_longest(f, 1000);
	sel_failpoints_configure(NULL);
	assert_int_equal(ev.kind, SEL_EVENT_FETCH_FAILED);
	assert_int_equal(ev.error, SEL_ECHECKSUM);
	wait_quiet(f);
	assert_int_equal(f->store->stats.records_dropped_checksum, 1);
	assert_int_equal(f->store->index.node_count, 0);
}

/*
 * A rank that answers a job twice stops the transport before its second
 * answer counts for another rank's: the store is never reported stored
 * while ranks 0 and 1 are still writing (held back by a failpoint).
 */
static void test_fanout_answer_twice(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev;

	assert_int_equal(sel_failpoints_configure("record.before_write=sleep(300)"), 0);
	publish(f, 7, 1000);
	ev = wait_event(f);
	sel_failpoints_configure(NULL);
	assert_int_equal(ev.kind, SEL_EVENT_FATAL);
	if (!strstr(ev.why, "a rank answered a job twice"))
		fail_msg("%s", ev.why);
}

/* An answer to a job that is not in flight stops the transport, naming it. */
static void test_fanout_answer_to_no_job(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev = wait_event(f);

	assert_int_equal(ev.kind, SEL_EVENT_FATAL);
	if (!strstr(ev.why, "an answer to no job in flight"))
		fail_msg("%s", ev.why);
}

/* More answers than rank zero's ring holds (jobs x ranks x 2): the surplus
 * does not vanish; the transport stops with the reason. */
static void test_fanout_answer_flood(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev;

	usleep(300000); /* the flood arrives before anything polls */
	ev = wait_event(f);
	assert_int_equal(ev.kind, SEL_EVENT_FATAL);
	if (!strstr(ev.why, "more answers than jobs outstanding"))
		fail_msg("%s", ev.why);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_fanout_store_and_fetch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fanout_fetch_during_failing_store, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_fanout_partial_store_cleaned_up, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fanout_dead_peer_is_fatal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fanout_noop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fanout_pool_share_jobs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fanout_pool_claim_early, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fanout_corrupt_record_dropped_and_stored_again,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_fanout_every_failpoint_reached, setup_durable,
						teardown),
		cmocka_unit_test_setup_teardown(test_fanout_store_again_after_failed_unlink, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_fanout_row_put_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fanout_bad_record_outranks_an_io_error,
						setup_verdict, teardown),
		cmocka_unit_test_setup_teardown(
			test_fanout_bad_record_outranks_an_io_error_in_a_truncate, setup_verdict,
			teardown),
		cmocka_unit_test_setup_teardown(test_fanout_answer_to_no_job, setup_rogue_one,
						teardown),
		cmocka_unit_test_setup_teardown(test_fanout_answer_flood, setup_rogue_flood,
						teardown),
		cmocka_unit_test_setup_teardown(test_fanout_answer_twice, setup_rogue_twice,
						teardown),
	};

	return cmocka_run_group_tests_name("fanout", tests, NULL, NULL);
}
