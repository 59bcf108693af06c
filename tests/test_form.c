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
#include "common/log.h"
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
#include <sys/socket.h>
#include <sys/stat.h>
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
};

static void *peer_main(void *arg)
{
	struct rank *r = arg;
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(r->port) };
	struct cluster_identity me = { .rank = r->g.rank, .world_size = WORLD,
				       .fingerprint = r->g.fingerprint,
				       .layout_digest = r->g.layout_digest,
				       .has_disk_store = true,
				       .disk_limit_bytes = 1000000 + r->g.rank };
	struct cluster_sequences seq = { 0 };
	struct timeval tv = { .tv_sec = 10 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		r->result = -errno;
		close(fd);
		return NULL;
	}
	r->result = peer_join_cluster(fd, r->secret, &me, r->dir, r->scan.records,
				      r->scan.record_count, &seq, &r->limit, r->why,
				      sizeof(r->why));
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
	    listen(fd, WORLD) != 0 || getsockname(fd, (struct sockaddr *)&addr, &len) != 0)
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
static int form(struct fixture *f, char *err, size_t err_size, uint64_t *limit)
{
	struct coord_peer peers[WORLD - 1];
	struct rank *zero = &f->ranks[0];
	uint16_t port = 0;
	int listener = listen_any(&port), ret;
	struct coord_form_options o = {
		.listen_fd = listener, .secret = zero->secret,
		.policy = { .world_size = WORLD, .layout_digest = zero->g.layout_digest,
			    .has_disk_store = true },
		.disk_limit_bytes = 5000000, .dir = zero->dir, .timeout_ms = 10000,
		.agreed = &f->agreed,
	};

	assert_true(listener >= 0);
	for (uint32_t r = 0; r < WORLD; r++)
		assert_int_equal(rec_dir_scan(f->ranks[r].dir, &f->ranks[r].scan), 0);
	o.records = zero->scan.records;
	o.record_count = zero->scan.record_count;
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

/* A peer with a wrong secret fails the formation; both sides say why. */
static void test_form_wrong_secret(void **state)
{
	struct fixture *f = *state;
	char err[512];
	uint64_t limit;

	f->ranks[2].secret[0] ^= 1;
	assert_int_equal(form(f, err, sizeof(err), &limit), -EACCES);
	assert_non_null(strstr(err, "launch secret"));
	assert_int_equal(f->ranks[2].result, -EACCES);
	assert_non_null(strstr(f->ranks[2].why, "launch secret"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_form_agreement_applied_everywhere, setup, teardown),
		cmocka_unit_test_setup_teardown(test_form_agreed_records_match_a_rescan, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_form_wrong_secret, setup, teardown),
	};

	return cmocka_run_group_tests_name("form", tests, NULL, NULL);
}
