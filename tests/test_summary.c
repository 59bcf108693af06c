/*
 * The startup messages' chunking (cluster/summary.h) over a socketpair: a
 * SUMMARY of several chunks arrives whole; HEARTBEAT between chunks is
 * skipped (R-WIRE-17); any other message between them is a protocol error.
 */
#include "tests/testutil.h"

#include "cluster/protocol.h"
#include "cluster/summary.h"
#include "common/base.h"
#include "selene/selene.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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
	struct rec_record_info *records = NULL;
	size_t count = 99;
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
	if (cluster_summary_recv(sv[1], &reader, &records, &count, why, sizeof(why)) != 0)
		fail_msg("%s", why);
	assert_int_equal(count, 0);
	free(records);
	close(sv[0]);
	close(sv[1]);
}

/* Between chunks nothing but HEARTBEAT: BYE there is refused, named. */
static void test_summary_other_message_between_chunks(void **state)
{
	struct cluster_sequences writer = { 0 }, reader = { 0 };
	struct rec_record_info *records = NULL;
	size_t count = 0;
	char why[200] = "";
	int sv[2];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	send_chunk(sv[0], &writer, 0, false);
	assert_int_equal(cluster_frame_write(sv[0], &writer.send, CLUSTER_MSG_BYE, NULL, 0), 0);
	assert_int_equal(cluster_summary_recv(sv[1], &reader, &records, &count, why, sizeof(why)),
			 SEL_EPROTO);
	assert_non_null(strstr(why, "expected SUMMARY, got BYE"));
	free(records);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_summary_heartbeats_between_chunks),
		cmocka_unit_test(test_summary_other_message_between_chunks),
	};

	return cmocka_run_group_tests_name("summary", tests, NULL, NULL);
}
