/*
 * Forming a cluster at startup (coordinator/cluster.h, peer/join.h) with
 * three ranks in one process over loopback TCP: every rank joins, sends
 * its summary, applies the agreement and confirms; afterwards every rank
 * holds the same record file names and lengths, and rank zero is handed
 * the agreed records a rescan would find. A peer with a wrong secret
 * fails the formation, named on both sides.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/limits.h"
#include "common/log.h"
#include "cluster/summary.h"
#include "coordinator/cluster.h"
#include "peer/join.h"
#include "record/file.h"
#include "selene/selene.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define WORLD 3

struct rank {
	char *base;
	struct rec_geometry g;
	struct rec_dir *dir;
	struct rec_scan scan;
	uint8_t secret[CLUSTER_SECRET_BYTES];
	uint16_t port;
	uint64_t limit;
	int result;
	char why[256];
	pthread_t thread;
	uint32_t delay_ms; /* before connecting */
	bool trickle;      /* joins, then sends its SUMMARY a byte at a time */
	bool bye_for_agreed; /* answers the agreement with BYE */
	bool close_for_agreed; /* takes the agreement and closes its link */
};

static int apply_nothing(void *ctx, const struct cluster_agreement_entry *e)
{
	(void)ctx;
	(void)e;
	return 0;
}

/*
 * Joins as r, takes the agreement, and answers it with BYE, or closes its
 * link (close_for_agreed); result is 0 only once it got that far.
 */
static void confirm_wrongly(struct rank *r, int fd, const struct cluster_identity *me)
{
	struct cluster_sequences seq = { 0 };
	uint64_t limit;

	r->result = -EINPROGRESS;
	if (cluster_join_peer(fd, r->secret, me, &seq, &limit, r->why, sizeof(r->why)) != 0 ||
	    cluster_summary_send(fd, &seq, NULL, 0, NULL, 0) != 0 ||
	    cluster_agreement_recv(fd, &seq, apply_nothing, NULL, r->why, sizeof(r->why)) != 0)
		return;
	r->result = r->close_for_agreed ? 0 :
		    cluster_frame_write(fd, &seq.send, CLUSTER_MSG_BYE, NULL, 0);
}

/* Joins as r, then sends its (empty) SUMMARY one byte every 200 ms. */
static void trickle_summary(struct rank *r, int fd, const struct cluster_identity *me)
{
	struct cluster_sequences seq = { 0 };
	uint8_t payload[64], frame[128];
	uint64_t limit;
	int len;

	if (cluster_join_peer(fd, r->secret, me, &seq, &limit, r->why, sizeof(r->why)) != 0)
		return;
	len = cluster_summary_encode(payload, sizeof(payload), 0, true, NULL, 0);
	assert_true(len > 0);
	cluster_frame_header_encode(frame, CLUSTER_MSG_SUMMARY, seq.send, payload, (uint32_t)len);
	memcpy(frame + CLUSTER_FRAME_HEADER_BYTES, payload, (size_t)len);
	for (int i = 0; i < CLUSTER_FRAME_HEADER_BYTES + len; i++) {
		usleep(200000);
		if (send(fd, frame + i, 1, MSG_NOSIGNAL) != 1)
			return;
	}
}

static void *peer_main(void *arg)
{
	struct rank *r = arg;
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(r->port) };
	struct cluster_identity me = { .rank = r->g.rank, .world_size = WORLD,
				       .fingerprint = r->g.fingerprint,
				       .layout_digest = r->g.layout_digest,
				       .has_disk_store = true,
				       .disk_limit_bytes = 1000000 + r->g.rank,
				       .marked = rec_dir_scan_marked(r->dir, &r->scan) };
	struct cluster_sequences seq = { 0 };
	struct timeval tv = { .tv_sec = 10 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	usleep(r->delay_ms * 1000);
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		r->result = -errno;
		close(fd);
		return NULL;
	}
	if (r->trickle)
		trickle_summary(r, fd, &me);
	else if (r->bye_for_agreed || r->close_for_agreed)
		confirm_wrongly(r, fd, &me);
	else
		r->result = peer_join_cluster(fd, r->secret, &me, r->dir, &r->scan, &seq,
					      &r->limit, r->why, sizeof(r->why));
	close(fd);
	return NULL;
}

static int listen_any(uint16_t *port)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
	    listen(fd, 128) != 0 || getsockname(fd, (struct sockaddr *)&addr, &len) != 0)
		return -1;
	*port = ntohs(addr.sin_port);
	return fd;
}

/* Sorted "name length" lines of a rank's directory. */
static void listing(struct rank *r, char *out, size_t size)
{
	struct dirent **names;
	int n = scandir(rec_dir_path(r->dir), &names, NULL, alphasort);
	size_t used = 0;

	out[0] = '\0';
	for (int i = 0; i < n; i++) {
		char path[1024];
		struct stat st;

		snprintf(path, sizeof(path), "%s/%s", rec_dir_path(r->dir), names[i]->d_name);
		if (names[i]->d_name[0] != '.' && stat(path, &st) == 0)
			used += (size_t)snprintf(out + used, size - used, "%s %lld\n",
						 names[i]->d_name, (long long)st.st_size);
		free(names[i]);
	}
	free(names);
}

struct fixture {
	uint16_t *storm_port; /* told the join port before the peers start */
	bool accept_empty_ranks;
	struct rank ranks[WORLD];
	struct rec_scan agreed; /* rank zero's agreed records, from the formation */
	struct tu_record a, b, c, d, e;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	for (uint32_t r = 0; r < WORLD; r++) {
		f->ranks[r].base = tu_make_temp_dir("form");
		tu_geometry(&f->ranks[r].g, 64, 2, 4096, 4096, r, WORLD);
		f->ranks[r].dir = tu_dir_open(f->ranks[r].base, &f->ranks[r].g, false);
		memset(f->ranks[r].secret, 0x42, CLUSTER_SECRET_BYTES);
	}
	/* The same conversations on every rank (keys do not depend on rank). */
	tu_record_make(&f->a, &f->ranks[0].g, 1, 128, NULL, 1);
	tu_record_make(&f->b, &f->ranks[0].g, 1, 192, &f->a, 2);
	tu_record_make(&f->c, &f->ranks[0].g, 2, 130, NULL, 3);
	tu_record_make(&f->d, &f->ranks[0].g, 3, 128, NULL, 4);
	tu_record_make(&f->e, &f->ranks[0].g, 3, 256, &f->d, 5);
	sel_log_set_level(SEL_LOG_WARN);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	for (uint32_t r = 0; r < WORLD; r++) {
		rec_scan_free(&f->ranks[r].scan);
		rec_dir_close(f->ranks[r].dir);
		tu_remove_tree(f->ranks[r].base);
	}
	rec_scan_free(&f->agreed);
	tu_record_free(&f->a);
	tu_record_free(&f->b);
	tu_record_free(&f->c);
	tu_record_free(&f->d);
	tu_record_free(&f->e);
	sel_log_set_level(SEL_LOG_INFO);
	free(f);
	return 0;
}

/* Runs rank zero's formation with the peers in threads. */
static int form_within(struct fixture *f, char *err, size_t err_size, uint64_t *limit,
		       uint32_t timeout_ms, void (*started)(void *), void *ctx)
{
	struct coord_peer peers[WORLD - 1];
	struct rank *zero = &f->ranks[0];
	uint16_t port = 0;
	int listener = listen_any(&port), ret;
	struct coord_form_options o = {
		.listen_fd = listener, .secret = zero->secret,
		.policy = { .world_size = WORLD, .layout_digest = zero->g.layout_digest,
			    .has_disk_store = true },
		.disk_limit_bytes = 5000000, .dir = zero->dir, .timeout_ms = timeout_ms,
		.agreed = &f->agreed,
	};

	assert_true(listener >= 0);
	rec_scan_free(&f->agreed); /* a test may form more than once */
	for (uint32_t r = 0; r < WORLD; r++)
		assert_int_equal(rec_dir_scan(f->ranks[r].dir, &f->ranks[r].scan), 0);
	o.records = zero->scan.records;
	o.record_count = zero->scan.record_count;
	o.held = zero->scan.held;
	o.held_count = zero->scan.held_count;
	o.marked = rec_dir_scan_marked(zero->dir, &zero->scan);
	o.accept_empty_ranks = f->accept_empty_ranks;
	if (f->storm_port)
		*f->storm_port = port;
	if (started)
		started(ctx);
	for (uint32_t r = 1; r < WORLD; r++) {
		f->ranks[r].port = port;
		assert_int_equal(pthread_create(&f->ranks[r].thread, NULL, peer_main,
						&f->ranks[r]), 0);
	}
	ret = coord_cluster_form(&o, peers, limit, err, err_size);
	if (ret == 0)
		for (uint32_t i = 0; i < WORLD - 1; i++)
			close(peers[i].fd);
	for (uint32_t r = 1; r < WORLD; r++)
		pthread_join(f->ranks[r].thread, NULL);
	close(listener);
	return ret;
}

static int form(struct fixture *f, char *err, size_t err_size, uint64_t *limit)
{
	return form_within(f, err, err_size, limit, 10000, NULL, NULL);
}

/*
 * A rank that joined but sends its summary a byte at a time cannot keep
 * the formation past its deadline (each read's own timeout restarts with
 * every byte): it fails at about the deadline, saying why.
 */
static void test_form_deadline_holds_against_a_trickle(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";
	uint64_t limit, t0 = sel_monotonic_ns(), took_ms;

	f->ranks[1].trickle = true;
	assert_int_not_equal(form_within(f, err, sizeof(err), &limit, 1000, NULL, NULL), 0);
	took_ms = (sel_monotonic_ns() - t0) / 1000000;
	if (!strstr(err, "did not form within 1000 ms"))
		fail_msg("%s", err);
	if (took_ms > 4000)
		fail_msg("the formation took %llu ms past a 1000 ms deadline",
			 (unsigned long long)took_ms);
}

/*
 * A rank that answers the agreement with another message than AGREED fails
 * the formation, and the message names what it sent and what was expected
 * (it printed a stale or uninitialised reason).
 */
static void test_form_confirm_names_the_wrong_message(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";
	uint64_t limit;

	f->ranks[1].bye_for_agreed = true;
	assert_int_equal(form(f, err, sizeof(err), &limit), SEL_EPROTO);
	if (!strstr(err, "rank 1 did not confirm the agreement: it sent BYE, "
		    "expected AGREED"))
		fail_msg("%s", err);
	assert_int_equal(f->ranks[1].result, 0);
}

/*
 * A rank that takes the agreement and closes its link (killed while it
 * applied it) fails the formation, saying so; before, the end of file read
 * an AGREED that never came, and the formation could succeed without it.
 */
static void test_form_confirm_refuses_a_closed_link(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";
	uint64_t limit;

	f->ranks[1].close_for_agreed = true;
	assert_int_equal(form(f, err, sizeof(err), &limit), -ECONNRESET);
	if (!strstr(err, "rank 1 did not confirm the agreement: it closed its link"))
		fail_msg("%s", err);
	assert_int_equal(f->ranks[1].result, 0);
}

/* A missing file, a missing row: afterwards every rank holds the same files. */
static void test_form_agreement_applied_everywhere(void **state)
{
	struct fixture *f = *state;
	char err[512], first[4096], other[4096];
	uint64_t limit = 0;

	for (uint32_t r = 0; r < WORLD; r++) {
		assert_int_equal(tu_record_write(f->ranks[r].dir, &f->a, 0), 0);
		assert_int_equal(tu_record_write(f->ranks[r].dir, &f->b, 0), 0);
		if (r != 2) /* c is missing on rank 2 */
			assert_int_equal(tu_record_write(f->ranks[r].dir, &f->c, 0), 0);
		assert_int_equal(tu_record_write(f->ranks[r].dir, &f->d, 0), 0);
		assert_int_equal(tu_record_write(f->ranks[r].dir, &f->e, 0), 0);
	}
	assert_int_equal(rec_truncate_row(f->ranks[1].dir, &f->d.key), 0); /* d's row on 1 */
	if (form(f, err, sizeof(err), &limit) != 0)
		fail_msg("form: %s (rank 1: %s; rank 2: %s)", err, f->ranks[1].why,
			 f->ranks[2].why);
	for (uint32_t r = 1; r < WORLD; r++)
		if (f->ranks[r].result != 0)
			fail_msg("rank %u: %s", r, f->ranks[r].why);
	assert_int_equal(limit, 1000001); /* the smallest */
	assert_int_equal(f->ranks[1].limit, 1000001);
	listing(&f->ranks[0], first, sizeof(first));
	for (uint32_t r = 1; r < WORLD; r++) {
		listing(&f->ranks[r], other, sizeof(other));
		assert_string_equal(first, other);
	}
	assert_null(strstr(first, "0000000000000082-")); /* c (130 tokens) is gone */
	for (uint32_t r = 0; r < WORLD; r++) {
		struct rec_scan scan;
		int page_only = 0;

		assert_int_equal(rec_dir_scan(f->ranks[r].dir, &scan), 0);
		assert_int_equal(scan.record_count, 4);
		for (size_t i = 0; i < scan.record_count; i++)
			page_only += !scan.records[i].row_present;
		assert_int_equal(page_only, 1); /* d, everywhere */
		rec_scan_free(&scan);
	}
}

static const struct rec_record_info *find_info(const struct rec_scan *scan,
					       const struct rec_key *key)
{
	for (size_t i = 0; i < scan->record_count; i++)
		if (rec_key_equal(&scan->records[i].key, key))
			return &scan->records[i];
	return NULL;
}

/*
 * The agreed records the formation hands rank zero are what a rescan of its
 * directory finds afterwards (keys, rows, lengths, headers), oldest first,
 * so the index needs no second scan.
 */
static void test_form_agreed_records_match_a_rescan(void **state)
{
	struct fixture *f = *state;
	char err[512];
	struct rec_scan rescan;
	uint64_t limit = 0;

	for (uint32_t r = 0; r < WORLD; r++) {
		assert_int_equal(tu_record_write(f->ranks[r].dir, &f->a, 0), 0);
		assert_int_equal(tu_record_write(f->ranks[r].dir, &f->b, 0), 0);
		if (r != 1) /* c is missing on rank 1 */
			assert_int_equal(tu_record_write(f->ranks[r].dir, &f->c, 0), 0);
		assert_int_equal(tu_record_write(f->ranks[r].dir, &f->d, 0), 0);
		assert_int_equal(tu_record_write(f->ranks[r].dir, &f->e, 0), 0);
	}
	assert_int_equal(rec_truncate_row(f->ranks[2].dir, &f->e.key), 0); /* e: page-only */
	assert_int_equal(rec_truncate_row(f->ranks[2].dir, &f->a.key), 0); /* a: b keeps it */
	if (form(f, err, sizeof(err), &limit) != 0)
		fail_msg("form: %s (rank 1: %s; rank 2: %s)", err, f->ranks[1].why,
			 f->ranks[2].why);
	assert_int_equal(rec_dir_scan(f->ranks[0].dir, &rescan), 0);
	/* a (page-only, with child b), b and d; c is on two ranks, e childless. */
	assert_int_equal(f->agreed.record_count, 3);
	assert_int_equal(rescan.record_count, f->agreed.record_count);
	assert_int_equal(rescan.bytes, f->agreed.bytes);
	for (size_t i = 0; i < f->agreed.record_count; i++) {
		const struct rec_record_info *x = &f->agreed.records[i];
		const struct rec_record_info *y = find_info(&rescan, &x->key);

		assert_non_null(y);
		assert_int_equal(x->row_present, y->row_present);
		assert_int_equal(x->file_bytes, y->file_bytes);
		assert_true(rec_key_equal(&x->parent, &y->parent));
		assert_true(rec_digest_equal(&x->agreement, &y->agreement));
		if (i > 0)
			assert_true(f->agreed.records[i - 1].mtime_ns <= x->mtime_ns);
	}
	assert_false(find_info(&f->agreed, &f->a.key)->row_present);
	assert_true(find_info(&f->agreed, &f->b.key)->row_present);
	rec_scan_free(&rescan);
}

/*
 * A peer with a wrong secret is refused (it says why), but to rank zero it
 * is a stranger: the formation waits for the real rank 2 and times out,
 * naming the missing rank and the last refusal.
 */
static void test_form_wrong_secret(void **state)
{
	struct fixture *f = *state;
	char err[512];
	uint64_t limit;

	f->ranks[2].secret[0] ^= 1;
	assert_int_equal(form_within(f, err, sizeof(err), &limit, 1500, NULL, NULL),
			 -ETIMEDOUT);
	assert_non_null(strstr(err, "rank 2 is missing"));
	assert_non_null(strstr(err, "launch secret"));
	assert_int_equal(f->ranks[2].result, -EACCES);
	assert_non_null(strstr(f->ranks[2].why, "launch secret"));
	/* rank 1 had joined: it is told why the formation failed */
	assert_int_not_equal(f->ranks[1].result, 0);
	assert_non_null(strstr(f->ranks[1].why, "rank 2 is missing"));
}

/* Every rank holds a and b, and the cluster marker from a first formation. */
static void form_marked_cluster(struct fixture *f)
{
	char err[512];
	uint64_t limit;

	for (uint32_t r = 0; r < WORLD; r++) {
		assert_int_equal(tu_record_write(f->ranks[r].dir, &f->a, 0), 0);
		assert_int_equal(tu_record_write(f->ranks[r].dir, &f->b, 0), 0);
		assert_false(rec_dir_marked(f->ranks[r].dir));
	}
	if (form(f, err, sizeof(err), &limit) != 0)
		fail_msg("form: %s", err);
	for (uint32_t r = 0; r < WORLD; r++) {
		assert_true(rec_dir_marked(f->ranks[r].dir));
		rec_scan_free(&f->ranks[r].scan);
	}
}

/* Rank 2's directory as a missing mount leaves it: empty and unmarked. */
static void empty_rank_two(struct fixture *f)
{
	char path[1024];

	assert_int_equal(rec_unlink(f->ranks[2].dir, &f->a.key), 0);
	assert_int_equal(rec_unlink(f->ranks[2].dir, &f->b.key), 0);
	snprintf(path, sizeof(path), "%s/%s", rec_dir_path(f->ranks[2].dir),
		 REC_CLUSTER_MARKER_NAME);
	assert_int_equal(unlink(path), 0);
}

/*
 * Issue 10 item 2: a rank whose directory is empty and unmarked while the
 * others hold records refuses to form, naming the rank and the counts, on
 * rank zero and the peers; nothing is deleted anywhere.
 */
static void test_form_refuses_empty_rank(void **state)
{
	struct fixture *f = *state;
	char err[512];
	uint64_t limit;

	form_marked_cluster(f);
	empty_rank_two(f);
	assert_int_equal(form(f, err, sizeof(err), &limit), SEL_EMISMATCH);
	assert_non_null(strstr(err, "rank 2's record directory is empty (0 records) while "
				    "rank 0 holds 2"));
	assert_non_null(strstr(err, "Forming would delete 4 records and truncate 0 rows "
				    "(rank 0: 2 deleted, 0 rows truncated; rank 1: 2 deleted"));
	assert_non_null(strstr(err, "rank 2: 0 records (unmarked)"));
	assert_non_null(strstr(err, "SELENE_ACCEPT_EMPTY_RANKS=1"));
	for (uint32_t r = 1; r < WORLD; r++) {
		assert_int_not_equal(f->ranks[r].result, 0);
		assert_non_null(strstr(f->ranks[r].why, "rank 2's record directory is empty"));
	}
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(tu_count_suffix(rec_dir_path(f->ranks[r].dir), ".ckpt"), 2);
}

/*
 * A copy made with `cp -a old/<star> new/` leaves the dot-file marker
 * behind: rank 2's directory is unmarked but holds exactly what the others
 * hold. The agreement would delete nothing, so the cluster forms, nothing
 * is deleted and rank 2 is marked again; before, every rank refused
 * ("Forming would delete every rank's records"). Missing one record there,
 * it is refused, naming what forming would delete on which rank.
 */
static void test_form_unmarked_copy_forms(void **state)
{
	struct fixture *f = *state;
	char err[512], path[1024];
	uint64_t limit;

	form_marked_cluster(f);
	snprintf(path, sizeof(path), "%s/%s", rec_dir_path(f->ranks[2].dir),
		 REC_CLUSTER_MARKER_NAME);
	assert_int_equal(unlink(path), 0);
	if (form(f, err, sizeof(err), &limit) != 0)
		fail_msg("form: %s", err);
	for (uint32_t r = 0; r < WORLD; r++) {
		if (f->ranks[r].result != 0)
			fail_msg("rank %u: %s", r, f->ranks[r].why);
		assert_int_equal(tu_count_suffix(rec_dir_path(f->ranks[r].dir), ".ckpt"), 2);
		assert_true(rec_dir_marked(f->ranks[r].dir));
		rec_scan_free(&f->ranks[r].scan);
	}
	assert_int_equal(f->agreed.record_count, 2);
	/* the copy lacks b: forming would delete b on ranks 0 and 1 */
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rec_unlink(f->ranks[2].dir, &f->b.key), 0);
	assert_int_equal(form(f, err, sizeof(err), &limit), SEL_EMISMATCH);
	assert_non_null(strstr(err, "rank 2's record directory is unmarked (1 records)"));
	assert_non_null(strstr(err, "Forming would delete 2 records and truncate 0 rows "
				    "(rank 0: 1 deleted, 0 rows truncated; rank 1: 1 deleted"));
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(tu_count_suffix(rec_dir_path(f->ranks[r].dir), ".ckpt"), 2);
}

/*
 * Never delete what could not be read, across ranks (R-AGREE-2, R-WIRE-18):
 * whichever rank's read fails at startup, and whichever of its two files,
 * no rank deletes anything, what that rank could not read is not agreed,
 * and a clean formation after it agrees both records again. Before, the
 * record left every other rank.
 */
static void test_form_unreadable_on_one_rank_deletes_nowhere(void **state)
{
	struct fixture *f = *state;
	char err[512], config[64];
	uint64_t limit;

	bool hit[WORLD] = { false };

	form_marked_cluster(f);
	for (int skip = 0; skip < 6 * (int)WORLD; skip++) {
		uint64_t unreadable = 0;

		/* the ranks scan in turn, a few reads a file: read skip + 1 fails */
		if (skip)
			snprintf(config, sizeof(config), "disk.read=%d*off->1*return(EIO)", skip);
		else
			snprintf(config, sizeof(config), "disk.read=1*return(EIO)");
		assert_int_equal(sel_failpoints_configure(config), 0);
		if (form(f, err, sizeof(err), &limit) != 0)
			fail_msg("form: %s", err);
		sel_failpoints_configure(NULL);
		for (uint32_t r = 0; r < WORLD; r++) {
			unreadable += f->ranks[r].scan.unreadable_skipped;
			hit[r] = hit[r] || f->ranks[r].scan.unreadable_skipped > 0;
		}
		assert_true(unreadable <= 1);
		assert_true(f->agreed.record_count == 2 - unreadable ||
			    (unreadable && f->agreed.record_count == 0));
		for (uint32_t r = 0; r < WORLD; r++) {
			if (f->ranks[r].result != 0)
				fail_msg("rank %u: %s", r, f->ranks[r].why);
			assert_int_equal(tu_count_suffix(rec_dir_path(f->ranks[r].dir), ".ckpt"),
					 2);
			rec_scan_free(&f->ranks[r].scan);
		}
		if (form(f, err, sizeof(err), &limit) != 0)
			fail_msg("form: %s", err);
		assert_int_equal(f->agreed.record_count, 2);
		for (uint32_t r = 0; r < WORLD; r++)
			rec_scan_free(&f->ranks[r].scan);
	}
	for (uint32_t r = 0; r < WORLD; r++)
		assert_true(hit[r]);
}

/* The same, accepted explicitly: the cluster forms and the records go everywhere. */
static void test_form_accepts_empty_rank_when_asked(void **state)
{
	struct fixture *f = *state;
	char err[512];
	uint64_t limit;

	form_marked_cluster(f);
	empty_rank_two(f);
	f->accept_empty_ranks = true;
	if (form(f, err, sizeof(err), &limit) != 0)
		fail_msg("form: %s", err);
	for (uint32_t r = 0; r < WORLD; r++) {
		assert_int_equal(f->ranks[r].result, 0);
		assert_int_equal(tu_count_suffix(rec_dir_path(f->ranks[r].dir), ".ckpt"), 0);
		assert_true(rec_dir_marked(f->ranks[r].dir));
	}
}

/*
 * Rank 2 was killed after a formation marked its directory and before its
 * first record landed: marked, empty, while the others hold records. It
 * forms (the marker shows the directory was set up here, not a missing
 * mount) and the agreement keeps what every rank holds, nothing; before,
 * every restart refused to form over an "empty" rank, for good.
 */
static void test_form_marked_empty_rank_forms(void **state)
{
	struct fixture *f = *state;
	char err[512];
	uint64_t limit;

	form_marked_cluster(f);
	assert_int_equal(rec_unlink(f->ranks[2].dir, &f->a.key), 0);
	assert_int_equal(rec_unlink(f->ranks[2].dir, &f->b.key), 0);
	assert_true(rec_dir_marked(f->ranks[2].dir));
	if (form(f, err, sizeof(err), &limit) != 0)
		fail_msg("form: %s", err);
	for (uint32_t r = 0; r < WORLD; r++) {
		if (f->ranks[r].result != 0)
			fail_msg("rank %u: %s", r, f->ranks[r].why);
		assert_int_equal(tu_count_suffix(rec_dir_path(f->ranks[r].dir), ".ckpt"), 0);
		assert_true(rec_dir_marked(f->ranks[r].dir));
	}
}

/* The attackers of the join storm, each a thread looping until told to stop. */
struct storm {
	uint16_t port;
	uint8_t secret[CLUSTER_SECRET_BYTES];
	struct rec_geometry g;
	volatile bool stop;
	pthread_t threads[5];
	uint64_t tries[5];
	int idle[100];
};

static int storm_connect(uint16_t port)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct timeval tv = { .tv_sec = 1 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* connect, close: a port scan */
static void *storm_scan(void *arg)
{
	struct storm *s = arg;

	while (!s->stop) {
		int fd = storm_connect(s->port);

		if (fd >= 0)
			close(fd);
		s->tries[0]++;
		usleep(500);
	}
	return NULL;
}

/* idle connections that never speak, more than rank zero holds at once */
static void *storm_idle(void *arg)
{
	struct storm *s = arg;

	for (uint32_t i = 0; i < SEL_ARRAY_SIZE(s->idle) && !s->stop; i++) {
		s->idle[i] = storm_connect(s->port);
		s->tries[1]++;
		usleep(2000);
	}
	return NULL;
}

/* random bytes, then close */
static void *storm_garbage(void *arg)
{
	struct storm *s = arg;
	uint8_t junk[300];

	while (!s->stop) {
		int fd = storm_connect(s->port);

		tu_fill(junk, sizeof(junk), s->tries[2]);
		if (fd >= 0) {
			if (send(fd, junk, sizeof(junk), MSG_NOSIGNAL) < 0)
				(void)0; /* dropped already: fine */
			close(fd);
		}
		s->tries[2]++;
		usleep(1000);
	}
	return NULL;
}

/* a well-formed HELLO for rank 1, then a PROOF under the wrong secret */
static void *storm_bad_mac(void *arg)
{
	struct storm *s = arg;
	struct rec_geometry g1;

	tu_geometry(&g1, 64, 2, 4096, 4096, 1, WORLD);
	while (!s->stop) {
		struct cluster_identity me = { .rank = 1, .world_size = WORLD,
					       .fingerprint = g1.fingerprint,
					       .layout_digest = g1.layout_digest,
					       .has_disk_store = true, .disk_limit_bytes = 1 };
		struct cluster_sequences seq = { 0 };
		uint64_t limit;
		char why[256];
		int fd = storm_connect(s->port);

		if (fd >= 0) {
			cluster_join_peer(fd, s->secret, &me, &seq, &limit, why, sizeof(why));
			close(fd);
		}
		s->tries[3]++;
		usleep(1000);
	}
	return NULL;
}

/* the first half of a HELLO frame, then silence until dropped */
static void *storm_truncated(void *arg)
{
	struct storm *s = arg;
	uint8_t frame[CLUSTER_FRAME_HEADER_BYTES] = { 0 };

	cluster_frame_header_encode(frame, CLUSTER_MSG_HELLO, 0, frame, 0 + CLUSTER_HELLO_BYTES);
	while (!s->stop) {
		int fd = storm_connect(s->port);
		char byte;

		if (fd >= 0) {
			if (send(fd, frame, sizeof(frame) / 2, MSG_NOSIGNAL) > 0)
				(void)!recv(fd, &byte, 1, 0); /* until dropped, or 1 s */
			close(fd);
		}
		s->tries[4]++;
	}
	return NULL;
}

static void storm_start(void *arg)
{
	static void *(*const attackers[])(void *) = { storm_scan, storm_idle, storm_garbage,
						      storm_bad_mac, storm_truncated };
	struct storm *s = arg;

	for (size_t i = 0; i < SEL_ARRAY_SIZE(attackers); i++)
		assert_int_equal(pthread_create(&s->threads[i], NULL, attackers[i], s), 0);
}

/*
 * Issue 10 item 1: formation completes while scans, idle connections (more
 * than the pending maximum), garbage, truncated HELLOs and wrong MACs hit
 * the join port; each costs rank zero a log line, never the formation.
 */
static void test_form_survives_join_storm(void **state)
{
	struct fixture *f = *state;
	struct storm *s = calloc(1, sizeof(*s));
	char err[512], first[4096], other[4096];
	uint64_t limit = 0;
	int ret;

	for (uint32_t r = 0; r < WORLD; r++)
		assert_int_equal(tu_record_write(f->ranks[r].dir, &f->a, 0), 0);
	memset(s->secret, 0x13, sizeof(s->secret)); /* not the launch secret */
	for (size_t i = 0; i < SEL_ARRAY_SIZE(s->idle); i++)
		s->idle[i] = -1;
	/* the storm needs the port: form_within binds it, storm_start learns it */
	f->storm_port = &s->port;
	for (uint32_t r = 1; r < WORLD; r++)
		f->ranks[r].delay_ms = 600; /* the storm is on before the real peers come */
	ret = form_within(f, err, sizeof(err), &limit, 20000, storm_start, s);
	s->stop = true;
	for (size_t i = 0; i < SEL_ARRAY_SIZE(s->threads); i++)
		pthread_join(s->threads[i], NULL);
	for (size_t i = 0; i < SEL_ARRAY_SIZE(s->idle); i++)
		if (s->idle[i] >= 0)
			close(s->idle[i]);
	if (ret != 0)
		fail_msg("form under the storm: %s (rank 1: %s; rank 2: %s)", err,
			 f->ranks[1].why, f->ranks[2].why);
	for (uint32_t r = 1; r < WORLD; r++)
		if (f->ranks[r].result != 0)
			fail_msg("rank %u: %s", r, f->ranks[r].why);
	print_message("storm: %llu scans, %llu idle, %llu garbage, %llu bad MACs, "
		      "%llu truncated\n", (unsigned long long)s->tries[0],
		      (unsigned long long)s->tries[1], (unsigned long long)s->tries[2],
		      (unsigned long long)s->tries[3], (unsigned long long)s->tries[4]);
	for (size_t i = 0; i < SEL_ARRAY_SIZE(s->tries); i++)
		assert_true(s->tries[i] > 0);
	assert_true(s->tries[1] > CLUSTER_JOIN_PENDING_MAX); /* more idle than it holds */
	listing(&f->ranks[0], first, sizeof(first));
	for (uint32_t r = 1; r < WORLD; r++) {
		listing(&f->ranks[r], other, sizeof(other));
		assert_string_equal(first, other);
	}
	assert_non_null(strstr(first, ".ckpt"));
	free(s);
}

/*
 * A rank that cannot write its cluster marker (a directory holds the
 * marker's temporary name) still forms, with a warning; its directory stays
 * unmarked. The next start forms too, since that directory holds what the
 * others hold (nothing would be deleted); once the marker can be written,
 * it is.
 */
static void test_form_marker_write_fails(void **state)
{
	struct fixture *f = *state;
	char err[512], *blocker;
	uint64_t limit;

	blocker = malloc(strlen(rec_dir_path(f->ranks[1].dir)) + 64);
	sprintf(blocker, "%s/%s.tmp", rec_dir_path(f->ranks[1].dir), REC_CLUSTER_MARKER_NAME);
	assert_int_equal(mkdir(blocker, 0755), 0);
	for (uint32_t r = 0; r < WORLD; r++) {
		assert_int_equal(tu_record_write(f->ranks[r].dir, &f->a, 0), 0);
		assert_int_equal(tu_record_write(f->ranks[r].dir, &f->b, 0), 0);
	}
	if (form(f, err, sizeof(err), &limit) != 0)
		fail_msg("form: %s", err);
	assert_true(rec_dir_marked(f->ranks[0].dir));
	assert_false(rec_dir_marked(f->ranks[1].dir));
	assert_true(rec_dir_marked(f->ranks[2].dir));
	for (uint32_t r = 0; r < WORLD; r++)
		rec_scan_free(&f->ranks[r].scan);
	if (form(f, err, sizeof(err), &limit) != 0)
		fail_msg("form: %s", err);
	assert_false(rec_dir_marked(f->ranks[1].dir));
	for (uint32_t r = 0; r < WORLD; r++) {
		assert_int_equal(tu_count_suffix(rec_dir_path(f->ranks[r].dir), ".ckpt"), 2);
		rec_scan_free(&f->ranks[r].scan);
	}
	rmdir(blocker);
	free(blocker);
	if (form(f, err, sizeof(err), &limit) != 0)
		fail_msg("form: %s", err);
	assert_true(rec_dir_marked(f->ranks[1].dir));
}

/* Out of descriptors: a child process holds a connection open on the port. */
struct starved {
	uint16_t port;
	pid_t child;
	struct rlimit saved;
};

static void starve_descriptors(void *arg)
{
	struct starved *st = arg;
	int lowest;

	st->child = fork();
	assert_true(st->child >= 0);
	if (st->child == 0) {
		int fd = storm_connect(st->port);

		(void)fd;
		sleep(3);
		_exit(0);
	}
	usleep(200 * 1000); /* the child's connection waits on the listener */
	/* The lowest free descriptor is past the limit: accept gets EMFILE. */
	lowest = dup(0);
	assert_true(lowest >= 0);
	close(lowest);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &st->saved), 0);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &(struct rlimit){ (rlim_t)lowest,
								    st->saved.rlim_max }), 0);
}

/*
 * A listener rank zero cannot accept from for want of descriptors, with no
 * handshake of its own to give up, does not spin the join until its
 * deadline: it retries every CLUSTER_JOIN_ACCEPT_RETRY_MS. The formation
 * times out as it should, having used a small part of its 2 s on the CPU.
 */
static void test_form_out_of_descriptors_does_not_spin(void **state)
{
	struct fixture *f = *state;
	struct starved st = { 0 };
	char err[512];
	uint64_t limit;
	double cpu;
	int ret;

	f->storm_port = &st.port;
	cpu = tu_cpu_seconds(RUSAGE_THREAD);
	ret = form_within(f, err, sizeof(err), &limit, 2000, starve_descriptors, &st);
	cpu = tu_cpu_seconds(RUSAGE_THREAD) - cpu;
	setrlimit(RLIMIT_NOFILE, &st.saved);
	waitpid(st.child, NULL, 0);
	assert_int_equal(ret, -ETIMEDOUT);
	printf("rank zero's CPU time over the 2 s join: %.3f s\n", cpu);
	assert_true(cpu < 0.5);
}

struct notice_run {
	int listen_fd;
	char why[64];
};

static void *notice_main(void *arg)
{
	struct notice_run *n = arg;

	coord_cluster_notify_failure(n->listen_fd, WORLD, NULL, n->why);
	return NULL;
}

/*
 * Rank zero's failure notice while 64 idle connections (as many as its
 * table holds) sit on the port: a full table gives up its oldest, so a
 * peer that connects after them still hears why rank zero stopped.
 */
static void test_form_failure_notice_survives_idle_connections(void **state)
{
	struct fixture *f = *state;
	struct notice_run n = { .why = "the disk caught fire" };
	struct rank *one = &f->ranks[1];
	int idle[CLUSTER_JOIN_PENDING_MAX];
	pthread_t notice;

	n.listen_fd = listen_any(&one->port);
	assert_true(n.listen_fd >= 0);
	assert_int_equal(rec_dir_scan(one->dir, &one->scan), 0);
	assert_int_equal(pthread_create(&notice, NULL, notice_main, &n), 0);
	for (uint32_t i = 0; i < CLUSTER_JOIN_PENDING_MAX; i++) {
		idle[i] = storm_connect(one->port);
		assert_true(idle[i] >= 0);
	}
	usleep(200 * 1000); /* every idle connection is in the notice's table */
	peer_main(one);
	assert_int_not_equal(one->result, 0);
	if (!strstr(one->why, "the disk caught fire"))
		fail_msg("rank 1 was told: %s (%d)", one->why, one->result);
	pthread_join(notice, NULL);
	for (uint32_t i = 0; i < CLUSTER_JOIN_PENDING_MAX; i++)
		close(idle[i]);
	close(n.listen_fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_form_agreement_applied_everywhere, setup, teardown),
		cmocka_unit_test_setup_teardown(test_form_agreed_records_match_a_rescan, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_form_wrong_secret, setup, teardown),
		cmocka_unit_test_setup_teardown(test_form_confirm_names_the_wrong_message, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_form_confirm_refuses_a_closed_link, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_form_deadline_holds_against_a_trickle, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_form_survives_join_storm, setup, teardown),
		cmocka_unit_test_setup_teardown(test_form_out_of_descriptors_does_not_spin, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_form_marker_write_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_form_failure_notice_survives_idle_connections,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_form_refuses_empty_rank, setup, teardown),
		cmocka_unit_test_setup_teardown(test_form_unmarked_copy_forms, setup, teardown),
		cmocka_unit_test_setup_teardown(test_form_unreadable_on_one_rank_deletes_nowhere,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_form_marked_empty_rank_forms, setup, teardown),
		cmocka_unit_test_setup_teardown(test_form_accepts_empty_rank_when_asked, setup,
						teardown),
	};

	return cmocka_run_group_tests_name("form", tests, NULL, NULL);
}
