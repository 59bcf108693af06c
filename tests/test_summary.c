/*
 * The startup messages' chunking (cluster/summary.h) over a socketpair: a
 * SUMMARY of several chunks arrives whole; HEARTBEAT between chunks is
 * skipped (R-WIRE-17); any other message between them is a protocol error;
 * the keys a peer holds unread travel beside its records (R-WIRE-18).
 */
#include "tests/testutil.h"

#include "cluster/protocol.h"
#include "cluster/summary.h"
#include "common/base.h"
#include "selene/selene.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* Writes an encoded payload of n bytes (n > 0) as one frame of type. */
static void send_encoded(int fd, struct cluster_sequences *seq, uint16_t type,
			 const uint8_t *buf, int n)
{
	assert_true(n > 0);
	assert_int_equal(cluster_frame_write(fd, &seq->send, type, buf, (uint32_t)n), 0);
}

/* Writes an empty SUMMARY chunk, last or not. */
static void send_chunk(int fd, struct cluster_sequences *seq, uint32_t index, bool last)
{
	uint8_t buf[64];

	send_encoded(fd, seq, CLUSTER_MSG_SUMMARY, buf,
		     cluster_summary_encode(buf, sizeof(buf), index, last, NULL, 0));
}

static void send_heartbeat(int fd, struct cluster_sequences *seq)
{
	uint8_t buf[64];

	send_encoded(fd, seq, CLUSTER_MSG_HEARTBEAT, buf,
		     cluster_heartbeat_encode(&(struct cluster_heartbeat){ sel_monotonic_ns() },
					      buf, sizeof(buf)));
}

/* Chunks 0, 1 and 2 with HEARTBEATs before, between and after them. */
static void test_summary_heartbeats_between_chunks(void **state)
{
	struct cluster_sequences writer = { 0 }, reader = { 0 };
	struct cluster_summary got = { .record_count = 99 };
	char why[200] = "";
	int sv[2];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	send_heartbeat(sv[0], &writer);
	send_chunk(sv[0], &writer, 0, false);
	send_heartbeat(sv[0], &writer);
	send_heartbeat(sv[0], &writer);
	send_chunk(sv[0], &writer, 1, false);
	send_heartbeat(sv[0], &writer);
	send_chunk(sv[0], &writer, 2, true);
	if (cluster_summary_recv(sv[1], &reader, &got, why, sizeof(why)) != 0)
		fail_msg("%s", why);
	assert_int_equal(got.record_count, 0);
	assert_int_equal(got.held_count, 0);
	cluster_summary_free(&got);
	close(sv[0]);
	close(sv[1]);
}

/* Between chunks nothing but HEARTBEAT: BYE there is refused, named. */
static void test_summary_other_message_between_chunks(void **state)
{
	struct cluster_sequences writer = { 0 }, reader = { 0 };
	struct cluster_summary got = { 0 };
	char why[200] = "";
	int sv[2];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	send_chunk(sv[0], &writer, 0, false);
	assert_int_equal(cluster_frame_write(sv[0], &writer.send, CLUSTER_MSG_BYE, NULL, 0), 0);
	assert_int_equal(cluster_summary_recv(sv[1], &reader, &got, why, sizeof(why)),
			 SEL_EPROTO);
	assert_non_null(strstr(why, "expected SUMMARY, got BYE"));
	assert_null(got.records);
	cluster_summary_free(&got);
	close(sv[0]);
	close(sv[1]);
}

/*
 * R-WIRE-18: records and the keys a peer holds unread (R-DIR-7) arrive
 * apart, whole, over more than one chunk; a held key carries no header;
 * each array reserves room for its own entries, not for every entry.
 */
static void test_summary_held_keys_arrive(void **state)
{
	enum { RECORDS = 5000, HELD = 3000 }; /* past one 4096-entry chunk */
	struct cluster_sequences writer = { 0 }, reader = { 0 };
	struct rec_record_info *records = calloc(RECORDS, sizeof(*records));
	struct rec_key *held = calloc(HELD, sizeof(*held));
	struct cluster_summary got = { 0 };
	char why[200] = "";
	int sv[2], status = -1;
	pid_t child;

	(void)state;
	assert_non_null(records);
	assert_non_null(held);
	for (uint32_t i = 0; i < RECORDS; i++) {
		records[i].key.consumed = 100 + i;
		records[i].key.digest.bytes[0] = (uint8_t)i;
		records[i].tail_page_count = 1;
		records[i].row_present = i % 2;
		records[i].agreement.bytes[3] = (uint8_t)(i >> 8);
	}
	for (uint32_t i = 0; i < HELD; i++) {
		held[i].consumed = 1 + i;
		held[i].digest.bytes[5] = (uint8_t)i;
	}
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	/* the socket buffer holds less than the summary: send from a child */
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		close(sv[1]);
		_exit(cluster_summary_send(sv[0], &writer, records, RECORDS, held, HELD) ? 1 : 0);
	}
	close(sv[0]);
	if (cluster_summary_recv(sv[1], &reader, &got, why, sizeof(why)) != 0)
		fail_msg("%s", why);
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(got.record_count, RECORDS);
	assert_int_equal(got.held_count, HELD);
	for (uint32_t i = 0; i < RECORDS; i++) {
		assert_true(rec_key_equal(&got.records[i].key, &records[i].key));
		assert_int_equal(got.records[i].row_present, records[i].row_present);
		assert_true(rec_digest_equal(&got.records[i].agreement, &records[i].agreement));
	}
	for (uint32_t i = 0; i < HELD; i++)
		assert_true(rec_key_equal(&got.held[i], &held[i]));
	assert_true(malloc_usable_size(got.records) < (RECORDS + 64) * sizeof(*got.records));
	assert_true(malloc_usable_size(got.held) < (HELD + 64) * sizeof(*got.held));
	cluster_summary_free(&got);
	free(records);
	free(held);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_summary_heartbeats_between_chunks),
		cmocka_unit_test(test_summary_other_message_between_chunks),
		cmocka_unit_test(test_summary_held_keys_arrive),
	};

	return cmocka_run_group_tests_name("summary", tests, NULL, NULL);
}
