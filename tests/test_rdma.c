/*
 * RDMA for pool claims (pool/rdma.h): the device probe, the registration
 * plan's arithmetic and refusals, the endpoint codec against bad input, the
 * fallback rule, and, where a verbs device exists (rxe or hardware), RDMA
 * WRITEs between two queue pairs of one device.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "pool/rdma.h"
#include "pool/rdma_verbs.h"
#include "tests/fake_verbs.h"
#include "selene/store.h"
#include "selene/selene.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A device as a ConnectX-class RoCE port reports it, for the plan's arithmetic. */
static void fake_device(struct pool_rdma_probe *d, uint64_t max_mr_bytes,
			uint32_t max_mr_count)
{
	memset(d, 0, sizeof(*d));
	d->available = true;
	snprintf(d->device_name, sizeof(d->device_name), "fake0");
	d->port_num = 1;
	d->ethernet = true;
	d->mtu_bytes = 4096;
	d->gid[10] = 0xff;
	d->gid[11] = 0xff;
	d->gid[15] = 1;
	d->max_mr_bytes = max_mr_bytes;
	d->max_mr_count = max_mr_count;
	d->max_message_bytes = 1u << 31;
}

/* R-RDMA-1, R-RDMA-2: the probe never fails; without a device it says why in one line. */
static void test_rdma_probe_says_why(void **state)
{
	struct pool_rdma_probe p;

	(void)state;
	assert_int_equal(pool_rdma_probe(NULL, &p), 0);
	if (p.available) {
		assert_string_equal(p.why, "");
		assert_true(p.port_num >= 1);
		assert_true(p.mtu_bytes >= 256 && p.mtu_bytes <= 4096);
		assert_true(p.max_mr_bytes > 0);
	} else {
		assert_true(strlen(p.why) > 10);
		assert_null(strchr(p.why, '\n'));
		print_message("probe: %s\n", p.why);
	}
	assert_int_equal(pool_rdma_probe("no-such-device", &p), 0);
	assert_false(p.available);
	assert_true(strlen(p.why) > 10);
}

/* R-RDMA-3: slots that fit one region make one region of them all. */
static void test_rdma_plan_fits_one_region(void **state)
{
	struct pool_rdma_probe d;
	struct pool_rdma_plan plan;
	char why[256] = "";

	(void)state;
	fake_device(&d, 1ull << 40, 1u << 20);
	assert_int_equal(pool_rdma_plan(&d, 64u << 20, 8, 1ull << 30, UINT64_MAX, &plan,
					why, sizeof(why)),
			 0);
	assert_int_equal(plan.total_bytes, 512ull << 20);
	assert_int_equal(plan.region_count, 1);
	assert_int_equal(plan.slots_per_region, 8);
	/* Exactly the budget and exactly the memlock limit still fit. */
	assert_int_equal(pool_rdma_plan(&d, 4096, 4096, 4096ull * 4096, 4096ull * 4096,
					&plan, why, sizeof(why)),
			 0);
	assert_int_equal(plan.total_bytes, 16ull << 20);
}

/* R-RDMA-4: a device whose largest region is smaller than the slots splits them over whole-slot regions. */
static void test_rdma_plan_splits_regions(void **state)
{
	struct pool_rdma_probe d;
	struct pool_rdma_plan plan;
	char why[256] = "";

	(void)state;
	fake_device(&d, (256u << 20) + 4096, 64);
	assert_int_equal(pool_rdma_plan(&d, 64u << 20, 10, 1ull << 40, UINT64_MAX, &plan,
					why, sizeof(why)),
			 0);
	assert_int_equal(plan.slots_per_region, 4);
	assert_int_equal(plan.region_count, 3); /* 4 + 4 + 2 */
	assert_int_equal(plan.total_bytes, 640ull << 20);
}

/* R-RDMA-3: every limit refuses with its own reason and registers nothing. */
static void test_rdma_plan_refusals(void **state)
{
	struct pool_rdma_probe d, none;
	struct pool_rdma_plan plan;
	char why[256];

	(void)state;
	fake_device(&d, 1ull << 30, 4);

	why[0] = '\0';
	assert_int_equal(pool_rdma_plan(&d, 0, 1, 1ull << 40, UINT64_MAX, &plan, why,
					sizeof(why)),
			 -EINVAL);
	assert_non_null(strstr(why, "multiple of 4096"));
	assert_int_equal(pool_rdma_plan(&d, 4097, 1, 1ull << 40, UINT64_MAX, &plan, why,
					sizeof(why)),
			 -EINVAL);
	assert_int_equal(pool_rdma_plan(&d, 2ull << 30, 1, 1ull << 40, UINT64_MAX, &plan,
					why, sizeof(why)),
			 -EINVAL);
	assert_non_null(strstr(why, "past the maximum"));
	assert_int_equal(pool_rdma_plan(&d, 4096, 0, 1ull << 40, UINT64_MAX, &plan, why,
					sizeof(why)),
			 -EINVAL);
	assert_int_equal(pool_rdma_plan(&d, 4096, POOL_RDMA_SLOTS_MAX + 1, 1ull << 40,
					UINT64_MAX, &plan, why, sizeof(why)),
			 -EINVAL);
	assert_non_null(strstr(why, "slot count"));

	/* The memory budget: one byte short. */
	assert_int_equal(pool_rdma_plan(&d, 1u << 20, 16, (16u << 20) - 1, UINT64_MAX, &plan,
					why, sizeof(why)),
			 SEL_ETOOBIG);
	assert_non_null(strstr(why, "need 16777216 bytes; the memory budget is 16777215"));
	/* RLIMIT_MEMLOCK: registration pins what it registers. */
	assert_int_equal(pool_rdma_plan(&d, 1u << 20, 16, 1ull << 40, 8u << 20, &plan, why,
					sizeof(why)),
			 SEL_ETOOBIG);
	assert_non_null(strstr(why, "RLIMIT_MEMLOCK allows 8388608"));
	/* One slot past the device's largest region, or its largest message. */
	fake_device(&d, 1u << 20, 4);
	assert_int_equal(pool_rdma_plan(&d, 2u << 20, 1, 1ull << 40, UINT64_MAX, &plan, why,
					sizeof(why)),
			 SEL_ETOOBIG);
	assert_non_null(strstr(why, "largest memory region"));
	fake_device(&d, 1ull << 30, 4);
	d.max_message_bytes = 1u << 20;
	assert_int_equal(pool_rdma_plan(&d, 2u << 20, 1, 1ull << 40, UINT64_MAX, &plan, why,
					sizeof(why)),
			 SEL_ETOOBIG);
	assert_non_null(strstr(why, "largest message"));
	/* More regions than the device holds, and more than the wire carries. */
	fake_device(&d, 4u << 20, 4);
	assert_int_equal(pool_rdma_plan(&d, 1u << 20, 17, 1ull << 40, UINT64_MAX, &plan, why,
					sizeof(why)),
			 SEL_ETOOBIG);
	assert_non_null(strstr(why, "need 5 memory regions"));
	fake_device(&d, 1u << 20, 1u << 20);
	assert_int_equal(pool_rdma_plan(&d, 1u << 20, POOL_RDMA_REGIONS_MAX + 1, 1ull << 40,
					UINT64_MAX, &plan, why, sizeof(why)),
			 SEL_ETOOBIG);
	assert_int_equal(plan.total_bytes, 0); /* nothing planned on a refusal */

	/* No device: the probe's reason. */
	memset(&none, 0, sizeof(none));
	snprintf(none.why, sizeof(none.why), "no verbs device");
	assert_int_equal(pool_rdma_plan(&none, 4096, 1, 1ull << 40, UINT64_MAX, &plan, why,
					sizeof(why)),
			 -ENODEV);
	assert_non_null(strstr(why, "no verbs device"));
}

/* RLIMIT_MEMLOCK reads back as a number of bytes or unlimited. */
static void test_rdma_memlock_reads(void **state)
{
	(void)state;
	assert_true(pool_rdma_memlock_bytes() > 0);
}

static void lender_endpoint(struct pool_rdma_endpoint *e)
{
	memset(e, 0, sizeof(*e));
	e->qp_num = 0x123456;
	e->psn = 0xabcdef;
	e->lid = 0;
	e->ethernet = true;
	e->mtu_bytes = 1024;
	for (int i = 0; i < 16; i++)
		e->gid[i] = (uint8_t)(0xf0 + i);
	e->slot_bytes = 1u << 20;
	e->slot_count = 10;
	e->region_count = 3;
	e->regions[0] = (struct pool_rdma_region){ 0x7f0000000000ull, 4u << 20, 0x1111 };
	e->regions[1] = (struct pool_rdma_region){ 0x7f1000000000ull, 4u << 20, 0x2222 };
	e->regions[2] = (struct pool_rdma_region){ 0x7f2000000000ull, 2u << 20, 0x3333 };
}

static void assert_endpoint_equal(const struct pool_rdma_endpoint *a,
				  const struct pool_rdma_endpoint *b)
{
	assert_int_equal(a->qp_num, b->qp_num);
	assert_int_equal(a->psn, b->psn);
	assert_int_equal(a->lid, b->lid);
	assert_int_equal(a->ethernet, b->ethernet);
	assert_int_equal(a->mtu_bytes, b->mtu_bytes);
	assert_memory_equal(a->gid, b->gid, 16);
	assert_int_equal(a->slot_bytes, b->slot_bytes);
	assert_int_equal(a->slot_count, b->slot_count);
	assert_int_equal(a->region_count, b->region_count);
	for (uint32_t i = 0; i < a->region_count; i++) {
		assert_int_equal(a->regions[i].address, b->regions[i].address);
		assert_int_equal(a->regions[i].bytes, b->regions[i].bytes);
		assert_int_equal(a->regions[i].rkey, b->regions[i].rkey);
	}
}

/* R-RDMA-5: a lender's and a writer's endpoints encode and decode to themselves. */
static void test_rdma_endpoint_round_trip(void **state)
{
	struct pool_rdma_endpoint e, back;
	uint8_t buf[POOL_RDMA_ENDPOINT_BYTES_MAX];
	char why[256] = "";
	int len;

	(void)state;
	lender_endpoint(&e);
	len = pool_rdma_endpoint_encode(&e, buf, sizeof(buf));
	assert_int_equal(len, 56 + 3 * 24);
	assert_int_equal(pool_rdma_endpoint_decode(buf, (size_t)len, &back, why, sizeof(why)), 0);
	assert_endpoint_equal(&e, &back);

	memset(&e, 0, sizeof(e));
	e.qp_num = 7;
	e.psn = 0;
	e.lid = 0x1234;
	e.mtu_bytes = 4096; /* InfiniBand: a LID, no GID needed */
	len = pool_rdma_endpoint_encode(&e, buf, sizeof(buf));
	assert_int_equal(len, 56);
	assert_int_equal(pool_rdma_endpoint_decode(buf, (size_t)len, &back, why, sizeof(why)), 0);
	assert_endpoint_equal(&e, &back);

	/* The largest endpoint fills POOL_RDMA_ENDPOINT_BYTES_MAX exactly. */
	lender_endpoint(&e);
	e.slot_count = POOL_RDMA_REGIONS_MAX;
	e.region_count = POOL_RDMA_REGIONS_MAX;
	for (uint32_t i = 0; i < POOL_RDMA_REGIONS_MAX; i++)
		e.regions[i] = (struct pool_rdma_region){ (uint64_t)i << 32, 1u << 20, i };
	len = pool_rdma_endpoint_encode(&e, buf, sizeof(buf));
	assert_int_equal(len, POOL_RDMA_ENDPOINT_BYTES_MAX);
	assert_int_equal(pool_rdma_endpoint_decode(buf, (size_t)len, &back, why, sizeof(why)), 0);
	assert_endpoint_equal(&e, &back);
}

/* Decodes buf after edit; expects SEL_EPROTO with a reason containing what. */
static void expect_rejected(const uint8_t *good, size_t len, size_t offset, uint8_t value,
			    const char *what)
{
	uint8_t buf[POOL_RDMA_ENDPOINT_BYTES_MAX + 1];
	struct pool_rdma_endpoint e;
	char why[256] = "";

	memcpy(buf, good, len);
	buf[offset] = value;
	assert_int_equal(pool_rdma_endpoint_decode(buf, len, &e, why, sizeof(why)), SEL_EPROTO);
	if (!strstr(why, what))
		fail_msg("byte %zu = 0x%02x: \"%s\" lacks \"%s\"", offset, value, why, what);
}

/* R-RDMA-6: truncated, padded and malformed endpoints are refused with the broken rule. */
static void test_rdma_endpoint_rejects_bad_input(void **state)
{
	struct pool_rdma_endpoint e, back;
	uint8_t good[POOL_RDMA_ENDPOINT_BYTES_MAX + 1];
	char why[256];
	size_t len;

	(void)state;
	lender_endpoint(&e);
	len = (size_t)pool_rdma_endpoint_encode(&e, good, sizeof(good));

	/* Every truncation, and one byte too many. */
	for (size_t cut = 0; cut < len; cut++)
		assert_int_equal(pool_rdma_endpoint_decode(good, cut, &back, why, sizeof(why)),
				 SEL_EPROTO);
	good[len] = 0;
	assert_int_equal(pool_rdma_endpoint_decode(good, len + 1, &back, why, sizeof(why)),
			 SEL_EPROTO);

	expect_rejected(good, len, 0, 'X', "magic");
	expect_rejected(good, len, 4, 2, "version");
	expect_rejected(good, len, 6, 0x03, "reserved");
	expect_rejected(good, len, 7, 0x80, "reserved");
	expect_rejected(good, len, 52, 1, "reserved");
	expect_rejected(good, len, 56 + 20, 1, "region 0 has reserved");
	expect_rejected(good, len, 11, 0x01, "queue pair number");  /* qp_num past 24 bits */
	expect_rejected(good, len, 15, 0x01, "sequence number");
	expect_rejected(good, len, 18, 0x2c, "MTU");                  /* 1024 -> 1068 */
	expect_rejected(good, len, 48, 4, "does not hold 4 regions"); /* count vs length */
	expect_rejected(good, len, 48, 0xff, "regions");
	expect_rejected(good, len, 20, 11, "do not hold exactly");   /* slot count 11 */
	expect_rejected(good, len, 24, 0x01, "multiple of 4096");    /* slot bytes + 1 */
	expect_rejected(good, len, 56 + 8, 0x01, "whole number of slots");
	memset(good + 56, 0xff, 8); /* region 0 at 2^64 - 1 */
	expect_rejected(good, len, 56, 0xff, "wraps");
	sel_put_le64(good + 56, e.regions[0].address);
	expect_rejected(good, len, 6, 0, "no LID");                  /* IB without a LID */
	for (size_t i = 0; i < 16; i++)
		good[32 + i] = 0;
	expect_rejected(good, len, 32, 0, "no GID");
	lender_endpoint(&e);
	len = (size_t)pool_rdma_endpoint_encode(&e, good, sizeof(good));

	/* A writer's endpoint lends nothing: a slot size alone is refused. */
	memset(&e, 0, sizeof(e));
	e.qp_num = 9;
	e.lid = 3;
	e.mtu_bytes = 2048;
	len = (size_t)pool_rdma_endpoint_encode(&e, good, sizeof(good));
	expect_rejected(good, len, 25, 0x10, "lends no slots");

	/* encode refuses what decode would refuse. */
	e.mtu_bytes = 1000;
	assert_int_equal(pool_rdma_endpoint_encode(&e, good, sizeof(good)), -EINVAL);
}

struct log_count {
	int warnings;
	char first[512];
};

static void count_line(enum sel_log_level level, const char *message, void *user)
{
	struct log_count *lc = user;

	if (level == SEL_LOG_WARN && strstr(message, "RDMA is off")) {
		if (lc->warnings++ == 0)
			snprintf(lc->first, sizeof(lc->first), "%s", message);
	}
}

/* R-RDMA-9: the first reason turns RDMA off and is logged once; later ones are counted only. */
static void test_rdma_fallback_logs_once(void **state)
{
	struct pool_rdma_fallback fb;
	struct log_count lc = { 0 };

	(void)state;
	sel_log_set_callback(count_line, &lc);
	pool_rdma_fallback_init(&fb);
	assert_true(pool_rdma_fallback_allows(&fb));
	assert_true(pool_rdma_fallback_note(&fb, "an RDMA WRITE failed: remote access error"));
	assert_false(pool_rdma_fallback_allows(&fb));
	for (int i = 0; i < 5; i++)
		assert_false(pool_rdma_fallback_note(&fb, "another failure"));
	sel_log_set_callback(NULL, NULL);
	assert_int_equal(lc.warnings, 1);
	assert_non_null(strstr(lc.first, "claims use the TCP stream"));
	assert_non_null(strstr(lc.first, "remote access error"));
	assert_string_equal(fb.reason, "an RDMA WRITE failed: remote access error");
	assert_int_equal(fb.reasons_count, 6);
	pool_rdma_fallback_destroy(&fb);
}

/* R-RDMA-1, R-RDMA-9: without a device, the probe's reason turns RDMA off once, and a link cannot open. */
static void test_rdma_fallback_without_device(void **state)
{
	struct pool_rdma_fallback fb;
	struct pool_rdma_probe p;
	struct pool_rdma_link *link = (struct pool_rdma_link *)&p;
	struct log_count lc = { 0 };
	char why[256] = "";
	uint8_t memory[4096];

	(void)state;
	assert_int_equal(pool_rdma_probe("no-such-device", &p), 0);
	sel_log_set_callback(count_line, &lc);
	pool_rdma_fallback_init(&fb);
	assert_false(pool_rdma_fallback_probe(&fb, &p));
	assert_false(pool_rdma_fallback_probe(&fb, &p));
	sel_log_set_callback(NULL, NULL);
	assert_int_equal(lc.warnings, 1);
	assert_non_null(strstr(lc.first, p.why));
	pool_rdma_fallback_destroy(&fb);

	assert_int_equal(pool_rdma_link_open(&p, POOL_RDMA_WRITER, memory, sizeof(memory),
					     NULL, &link, why, sizeof(why)),
			 -ENODEV);
	assert_null(link);
	assert_true(strlen(why) > 10);
	pool_rdma_link_close(NULL);
}

/* Opens a lender of slot_count 64 KiB slots and a writer of bytes on one device, connected. */
static void open_pair(const struct pool_rdma_probe *p, uint8_t *slots, uint8_t *source,
		      uint64_t bytes, struct pool_rdma_link **lender,
		      struct pool_rdma_link **writer)
{
	struct pool_rdma_plan plan;
	struct pool_rdma_endpoint le, we, got;
	uint8_t wire[POOL_RDMA_ENDPOINT_BYTES_MAX];
	char why[256] = "";
	int len;

	assert_int_equal(pool_rdma_plan(p, 64u << 10, 8, 1ull << 30, pool_rdma_memlock_bytes(),
					&plan, why, sizeof(why)),
			 0);
	if (pool_rdma_link_open(p, POOL_RDMA_LENDER, slots, plan.total_bytes, &plan, lender,
				why, sizeof(why)) != 0)
		fail_msg("lender: %s", why);
	if (pool_rdma_link_open(p, POOL_RDMA_WRITER, source, bytes, NULL, writer, why,
				sizeof(why)) != 0)
		fail_msg("writer: %s", why);
	/* Each end's endpoint crosses as bytes, as the pool protocol carries it. */
	pool_rdma_link_endpoint(*lender, &le);
	pool_rdma_link_endpoint(*writer, &we);
	len = pool_rdma_endpoint_encode(&le, wire, sizeof(wire));
	assert_true(len > 0);
	assert_int_equal(pool_rdma_endpoint_decode(wire, (size_t)len, &got, why, sizeof(why)), 0);
	if (pool_rdma_link_connect(*writer, &got, why, sizeof(why)) != 0)
		fail_msg("writer connect: %s", why);
	len = pool_rdma_endpoint_encode(&we, wire, sizeof(wire));
	assert_int_equal(pool_rdma_endpoint_decode(wire, (size_t)len, &got, why, sizeof(why)), 0);
	if (pool_rdma_link_connect(*lender, &got, why, sizeof(why)) != 0)
		fail_msg("lender connect: %s", why);
}

/*
 * RDMA WRITEs land byte-exact in the named slots; writes outside a slot or
 * the source are refused; a write to a far end that is gone fails its
 * completion, poisons the link and turns the fallback off once.
 */
static void loopback_writes(const struct pool_rdma_probe *p)
{
	struct pool_rdma_link *lender = NULL, *writer = NULL;
	struct pool_rdma_fallback fb;
	uint64_t done[8];
	uint8_t *slots, *source;
	uint32_t completed = 0;
	bool failed = false;
	struct log_count lc = { 0 };

	slots = tu_alloc(8u << 16);
	source = tu_alloc(1u << 20);
	tu_fill(source, 1u << 20, 77);
	open_pair(p, slots, source, 1u << 20, &lender, &writer);
	/* Slot 3 whole, and 4 KiB at offset 8 KiB of slot 7. */
	assert_int_equal(pool_rdma_link_write(writer, 4096, 3, 0, 64u << 10, 1), 0);
	assert_int_equal(pool_rdma_link_write(writer, 512u << 10, 7, 8192, 4096, 2), 0);
	assert_int_equal(pool_rdma_link_write(writer, 0, 8, 0, 4096, 3), -EINVAL);
	assert_int_equal(pool_rdma_link_write(writer, 0, 7, 61440, 8192, 3), -EINVAL);
	assert_int_equal(pool_rdma_link_write(writer, (1u << 20) - 4096, 0, 0, 8192, 3), -EINVAL);
	assert_int_equal(pool_rdma_link_write(writer, 0, 0, 0, 0, 3), -EINVAL);
	while (completed < 2) {
		int n = pool_rdma_link_poll(writer, done + completed, 8 - completed, 1000);

		assert_true(n > 0);
		completed += (uint32_t)n;
	}
	assert_int_equal(pool_rdma_link_in_flight(writer), 0);
	assert_memory_equal(slots + 3 * (64u << 10), source + 4096, 64u << 10);
	assert_memory_equal(slots + 7 * (64u << 10) + 8192, source + (512u << 10), 4096);
	assert_string_equal(pool_rdma_link_why(writer), "");
	pool_rdma_link_close(writer);
	pool_rdma_link_close(lender);

	/* The far end gone (its queue pair and regions destroyed): the write's
	 * completion fails, the link is poisoned, RDMA goes off. */
	open_pair(p, slots, source, 1u << 20, &lender, &writer);
	pool_rdma_link_close(lender);
	sel_log_set_callback(count_line, &lc);
	pool_rdma_fallback_init(&fb);
	assert_int_equal(pool_rdma_link_write(writer, 0, 0, 0, 4096, 9), 0);
	for (int i = 0; i < 50 && !failed; i++) {
		int n = pool_rdma_link_poll(writer, done, 8, 200);

		if (n < 0) {
			assert_int_equal(n, -EIO);
			pool_rdma_fallback_note(&fb, pool_rdma_link_why(writer));
			failed = true;
		}
	}
	sel_log_set_callback(NULL, NULL);
	assert_true(failed);
	assert_int_equal(lc.warnings, 1);
	assert_false(pool_rdma_fallback_allows(&fb));
	assert_non_null(strstr(fb.reason, "an RDMA WRITE failed"));
	assert_int_equal(pool_rdma_link_write(writer, 0, 0, 0, 4096, 10), SEL_ESTOPPED);
	assert_int_equal(pool_rdma_link_poll(writer, done, 8, 0), SEL_ESTOPPED);
	pool_rdma_fallback_destroy(&fb);
	pool_rdma_link_close(writer);
	free(slots);
	free(source);
}

/* R-RDMA-7, R-RDMA-8, R-RDMA-9 on a real verbs device (rxe counts), where one exists. */
static void test_rdma_loopback_write(void **state)
{
	struct pool_rdma_probe p;

	(void)state;
	assert_int_equal(pool_rdma_probe(NULL, &p), 0);
	if (!p.available) {
		print_message("skipped: %s\n", p.why);
		skip();
	}
	loopback_writes(&p);
}

#ifdef SEL_HAVE_VERBS_H
static int fake_setup(void **state)
{
	(void)state;
	fake_verbs_install();
	return 0;
}

static int fake_teardown(void **state)
{
	(void)state;
	assert_int_equal(fake_verbs_remove(), 0); /* every object made was freed */
	return 0;
}

/* R-RDMA-2 on the fake: the active port (not the first), its MTU, and on RoCE the IPv4-mapped GID. */
static void test_rdma_fake_probe(void **state)
{
	struct pool_rdma_probe p;

	(void)state;
	assert_int_equal(pool_rdma_probe(NULL, &p), 0);
	assert_true(p.available);
	assert_string_equal(p.device_name, "fake_rxe0");
	assert_int_equal(p.port_num, 2);
	assert_true(p.ethernet);
	assert_int_equal(p.mtu_bytes, 1024);
	assert_int_equal(p.gid_index, 2);
	assert_int_equal(p.gid[12], 10);
	assert_int_equal(p.max_mr_bytes, 1ull << 40);
	assert_int_equal(p.max_message_bytes, 1u << 30);
	assert_int_equal(fake.live, 0); /* the probe closed what it opened */

	fake.ethernet = false; /* InfiniBand: the LID routes */
	assert_int_equal(pool_rdma_probe("fake_rxe0", &p), 0);
	assert_true(p.available);
	assert_false(p.ethernet);
	assert_int_equal(p.lid, 0x17);
	assert_int_equal(pool_rdma_probe("mlx5_0", &p), 0);
	assert_false(p.available);
	assert_non_null(strstr(p.why, "mlx5_0"));
}

/* R-RDMA-7 .. R-RDMA-9 on the fake, over RoCE and over InfiniBand. */
static void test_rdma_fake_loopback_write(void **state)
{
	struct pool_rdma_probe p;

	(void)state;
	assert_int_equal(pool_rdma_probe(NULL, &p), 0);
	loopback_writes(&p);
	assert_int_equal(fake.live, 0);
	fake.ethernet = false;
	assert_int_equal(pool_rdma_probe(NULL, &p), 0);
	loopback_writes(&p);
}

/* R-RDMA-4 on the fake: slots over three regions; each write reaches its slot through its region's rkey. */
static void test_rdma_fake_regions(void **state)
{
	struct pool_rdma_probe p;
	struct pool_rdma_plan plan;
	struct pool_rdma_link *lender = NULL, *writer = NULL;
	struct pool_rdma_endpoint le, we;
	uint8_t *slots = tu_alloc(10u << 16), *source = tu_alloc(10u << 16);
	uint64_t done[10];
	uint32_t completed = 0;
	char why[256] = "";

	(void)state;
	fake.max_mr_size = 4u << 16; /* 4 slots of 64 KiB a region */
	assert_int_equal(pool_rdma_probe(NULL, &p), 0);
	assert_int_equal(pool_rdma_plan(&p, 64u << 10, 10, 1ull << 30, UINT64_MAX, &plan, why,
					sizeof(why)),
			 0);
	assert_int_equal(plan.region_count, 3);
	assert_int_equal(pool_rdma_link_open(&p, POOL_RDMA_LENDER, slots, plan.total_bytes, &plan,
					     &lender, why, sizeof(why)),
			 0);
	assert_int_equal(pool_rdma_link_open(&p, POOL_RDMA_WRITER, source, 10u << 16, NULL, &writer,
					     why, sizeof(why)),
			 0);
	pool_rdma_link_endpoint(lender, &le);
	pool_rdma_link_endpoint(writer, &we);
	assert_int_equal(le.region_count, 3);
	assert_int_equal(le.regions[2].bytes, 2u << 16);
	assert_int_not_equal(le.regions[0].rkey, le.regions[1].rkey);
	assert_int_equal(pool_rdma_link_connect(writer, &le, why, sizeof(why)), 0);
	assert_int_equal(pool_rdma_link_connect(lender, &we, why, sizeof(why)), 0);
	tu_fill(source, 10u << 16, 3);
	/* The writer's 640 KiB are three regions too; sources at odd offsets
	 * cross them (two scatter entries). */
	for (uint32_t slot = 0; slot < 10; slot++)
		assert_int_equal(pool_rdma_link_write(writer, ((uint64_t)(9 - slot) << 16) -
								      (slot % 2 ? 4096 : 0),
						      slot, 0, 64u << 10, slot),
				 slot == 9 ? -EINVAL : 0);
	assert_int_equal(pool_rdma_link_write(writer, 9u << 16, 9, 0, 64u << 10, 9), 0);
	while (completed < 10) {
		int n = pool_rdma_link_poll(writer, done + completed, 10 - completed, 100);

		assert_true(n > 0);
		completed += (uint32_t)n;
	}
	for (uint32_t slot = 0; slot < 9; slot++)
		assert_memory_equal(slots + ((uint64_t)slot << 16),
				    source + ((uint64_t)(9 - slot) << 16) - (slot % 2 ? 4096 : 0),
				    64u << 10);
	assert_memory_equal(slots + (9u << 16), source + (9u << 16), 64u << 10);
	pool_rdma_link_close(writer);
	pool_rdma_link_close(lender);
	free(slots);
	free(source);
}

/* R-RDMA-8 on the fake: 64 writes in flight, the 65th refused until polled. */
static void test_rdma_fake_queue_full(void **state)
{
	struct pool_rdma_probe p;
	struct pool_rdma_link *lender = NULL, *writer = NULL;
	uint8_t *slots = tu_alloc(8u << 16), *source = tu_alloc(1u << 20);
	uint64_t done[POOL_RDMA_WRITES_IN_FLIGHT_MAX];
	uint32_t completed = 0;

	(void)state;
	assert_int_equal(pool_rdma_probe(NULL, &p), 0);
	open_pair(&p, slots, source, 1u << 20, &lender, &writer);
	for (uint32_t i = 0; i < POOL_RDMA_WRITES_IN_FLIGHT_MAX; i++)
		assert_int_equal(pool_rdma_link_write(writer, 0, i % 8, 0, 4096, i), 0);
	assert_int_equal(pool_rdma_link_write(writer, 0, 0, 0, 4096, 99), SEL_EQUEUEFULL);
	while (completed < POOL_RDMA_WRITES_IN_FLIGHT_MAX) {
		int n = pool_rdma_link_poll(writer, done + completed,
					    POOL_RDMA_WRITES_IN_FLIGHT_MAX - completed, 100);

		assert_true(n > 0);
		completed += (uint32_t)n;
	}
	for (uint32_t i = 0; i < POOL_RDMA_WRITES_IN_FLIGHT_MAX; i++)
		assert_int_equal(done[i], i);
	assert_int_equal(pool_rdma_link_write(writer, 0, 0, 0, 4096, 99), 0);
	assert_int_equal(pool_rdma_link_poll(writer, done, 1, 100), 1);
	pool_rdma_link_close(writer);
	pool_rdma_link_close(lender);
	free(slots);
	free(source);
}

/* R-RDMA-7, R-RDMA-9 on the fake: a bad rkey fails remotely; mismatched ends never connect. */
static void test_rdma_fake_refusals(void **state)
{
	struct pool_rdma_probe p;
	struct pool_rdma_plan plan;
	struct pool_rdma_link *lender = NULL, *writer = NULL, *other = NULL, *refused = NULL;
	struct pool_rdma_endpoint le, we;
	uint8_t *slots = tu_alloc(8u << 16), *source = tu_alloc(1u << 20);
	struct pool_rdma_fallback fb;
	struct log_count lc = { 0 };
	uint64_t done[4];
	char why[256] = "";
	int n = 0;

	(void)state;
	assert_int_equal(pool_rdma_probe(NULL, &p), 0);
	assert_int_equal(pool_rdma_plan(&p, 64u << 10, 8, 1ull << 30, UINT64_MAX, &plan, why,
					sizeof(why)),
			 0);
	assert_int_equal(pool_rdma_link_open(&p, POOL_RDMA_LENDER, slots, plan.total_bytes, &plan,
					     &lender, why, sizeof(why)),
			 0);
	assert_int_equal(pool_rdma_link_open(&p, POOL_RDMA_WRITER, source, 1u << 20, NULL, &writer,
					     why, sizeof(why)),
			 0);
	assert_int_equal(pool_rdma_link_open(&p, POOL_RDMA_WRITER, source, 1u << 20, NULL, &other,
					     why, sizeof(why)),
			 0);
	/* A lender's memory must be its plan's. */
	assert_int_equal(pool_rdma_link_open(&p, POOL_RDMA_LENDER, slots, 4096, &plan, &refused,
					     why, sizeof(why)),
			 -EINVAL);
	assert_null(refused);
	pool_rdma_link_endpoint(lender, &le);
	pool_rdma_link_endpoint(writer, &we);
	/* A writer connects only to a lender, and the link layers must match. */
	assert_int_equal(pool_rdma_link_connect(writer, &we, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "a writer must connect to a lender"));
	we.ethernet = false;
	we.lid = 5;
	assert_int_equal(pool_rdma_link_connect(lender, &we, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "link layers differ"));
	pool_rdma_link_endpoint(writer, &we);
	/* Writes before connecting are refused. */
	assert_int_equal(pool_rdma_link_write(writer, 0, 0, 0, 4096, 1), SEL_ESTOPPED);
	/* A wrong rkey: the far end refuses the write. */
	le.regions[0].rkey ^= 0x40;
	assert_int_equal(pool_rdma_link_connect(writer, &le, why, sizeof(why)), 0);
	assert_int_equal(pool_rdma_link_connect(lender, &we, why, sizeof(why)), 0);
	assert_int_equal(pool_rdma_link_connect(lender, &we, why, sizeof(why)), SEL_ESTOPPED);
	assert_int_equal(pool_rdma_link_write(writer, 0, 1, 0, 4096, 1), 0);
	n = pool_rdma_link_poll(writer, done, 4, 100);
	assert_int_equal(n, -EIO);
	assert_non_null(strstr(pool_rdma_link_why(writer), "remote access error"));
	sel_log_set_callback(count_line, &lc);
	pool_rdma_fallback_init(&fb);
	pool_rdma_fallback_note(&fb, pool_rdma_link_why(writer));
	pool_rdma_fallback_note(&fb, "a second failure");
	sel_log_set_callback(NULL, NULL);
	assert_int_equal(lc.warnings, 1);
	assert_non_null(strstr(lc.first, "remote access error"));
	pool_rdma_fallback_destroy(&fb);
	pool_rdma_link_close(other);
	pool_rdma_link_close(writer);
	pool_rdma_link_close(lender);
	free(slots);
	free(source);
}

/* On the fake, each step of opening a link fails in turn: every one is undone and said. */
static void test_rdma_fake_open_unwinds(void **state)
{
	struct pool_rdma_probe p;
	struct pool_rdma_plan plan;
	uint8_t *slots = tu_alloc(8u << 16);
	int failures = 0;

	(void)state;
	fake.max_mr_size = 4u << 16; /* two regions: the second registration fails too */
	assert_int_equal(pool_rdma_probe(NULL, &p), 0);
	assert_int_equal(pool_rdma_plan(&p, 64u << 10, 8, 1ull << 30, UINT64_MAX, &plan, NULL, 0), 0);
	assert_int_equal(plan.region_count, 2);
	for (int at = 1;; at++) {
		struct pool_rdma_link *link = NULL;
		char why[256] = "";
		int rc;

		fake.acquisitions = 0;
		fake.fail_at = at;
		rc = pool_rdma_link_open(&p, POOL_RDMA_LENDER, slots, plan.total_bytes, &plan,
					 &link, why, sizeof(why));
		if (rc == 0) {
			assert_true(fake.acquisitions < at); /* no step left to fail */
			pool_rdma_link_close(link);
			break;
		}
		failures++;
		assert_null(link);
		assert_true(strlen(why) > 5);
		assert_int_equal(fake.live, 0);
	}
	fake.fail_at = 0;
	/* open, pd, two regions, cq, qp, INIT */
	assert_int_equal(failures, 7);
	free(slots);
}

/* R-RDMA-4 on the fake: one writer memory, registered once, serves two links to two lenders; each write lands in its own lender's slot. */
static void test_rdma_fake_shared_memory(void **state)
{
	struct pool_rdma_probe p;
	struct pool_rdma_plan plan;
	struct pool_rdma_memory *mem = NULL;
	struct pool_rdma_link *writers[2] = { NULL, NULL }, *lenders[2] = { NULL, NULL };
	struct pool_rdma_endpoint le, we;
	uint8_t *slots[2] = { tu_alloc(2u << 16), tu_alloc(2u << 16) };
	uint8_t *source = tu_alloc(1u << 20);
	uint64_t done[2];
	char why[256] = "";

	(void)state;
	tu_fill(source, 1u << 20, 5);
	assert_int_equal(pool_rdma_probe(NULL, &p), 0);
	assert_int_equal(pool_rdma_plan(&p, 64u << 10, 2, 1ull << 30, UINT64_MAX, &plan, why,
					sizeof(why)),
			 0);
	assert_int_equal(pool_rdma_memory_open(&p, POOL_RDMA_WRITER, source, 1u << 20, NULL, &mem,
					       why, sizeof(why)),
			 0);
	assert_int_equal(fake.live, 3); /* a context, a domain, one region */
	for (int i = 0; i < 2; i++) {
		assert_int_equal(pool_rdma_link_open_on(mem, &writers[i], why, sizeof(why)), 0);
		assert_int_equal(pool_rdma_link_open(&p, POOL_RDMA_LENDER, slots[i],
						     plan.total_bytes, &plan, &lenders[i], why,
						     sizeof(why)),
				 0);
		pool_rdma_link_endpoint(lenders[i], &le);
		pool_rdma_link_endpoint(writers[i], &we);
		assert_int_equal(pool_rdma_link_connect(writers[i], &le, why, sizeof(why)), 0);
		assert_int_equal(pool_rdma_link_connect(lenders[i], &we, why, sizeof(why)), 0);
	}
	/* the writers add a completion queue and a queue pair each, no region */
	assert_int_equal(fake.live, 3 + 2 * 2 + 2 * 5);
	assert_int_equal(pool_rdma_link_write(writers[0], 4096, 1, 0, 8192, 1), 0);
	assert_int_equal(pool_rdma_link_write(writers[1], 65536, 0, 4096, 8192, 2), 0);
	for (int i = 0; i < 2; i++) {
		int n = 0;

		for (int tries = 0; tries < 100 && n == 0; tries++)
			n = pool_rdma_link_poll(writers[i], done, 2, 10);
		assert_int_equal(n, 1);
		assert_int_equal(done[0], (uint64_t)i + 1);
	}
	assert_memory_equal(slots[0] + (64u << 10), source + 4096, 8192);
	assert_memory_equal(slots[1] + 4096, source + 65536, 8192);
	for (int i = 0; i < 2; i++) {
		pool_rdma_link_close(writers[i]);
		pool_rdma_link_close(lenders[i]);
	}
	assert_int_equal(fake.live, 3); /* the memory outlives its links */
	pool_rdma_memory_close(mem);
	pool_rdma_memory_close(NULL);
	for (int i = 0; i < 2; i++)
		free(slots[i]);
	free(source);
}
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rdma_probe_says_why),
		cmocka_unit_test(test_rdma_plan_fits_one_region),
		cmocka_unit_test(test_rdma_plan_splits_regions),
		cmocka_unit_test(test_rdma_plan_refusals),
		cmocka_unit_test(test_rdma_memlock_reads),
		cmocka_unit_test(test_rdma_endpoint_round_trip),
		cmocka_unit_test(test_rdma_endpoint_rejects_bad_input),
		cmocka_unit_test(test_rdma_fallback_logs_once),
		cmocka_unit_test(test_rdma_fallback_without_device),
		cmocka_unit_test(test_rdma_loopback_write),
#ifdef SEL_HAVE_VERBS_H
		cmocka_unit_test_setup_teardown(test_rdma_fake_probe, fake_setup, fake_teardown),
		cmocka_unit_test_setup_teardown(test_rdma_fake_loopback_write, fake_setup,
						fake_teardown),
		cmocka_unit_test_setup_teardown(test_rdma_fake_regions, fake_setup, fake_teardown),
		cmocka_unit_test_setup_teardown(test_rdma_fake_shared_memory, fake_setup,
						fake_teardown),
		cmocka_unit_test_setup_teardown(test_rdma_fake_queue_full, fake_setup, fake_teardown),
		cmocka_unit_test_setup_teardown(test_rdma_fake_refusals, fake_setup, fake_teardown),
		cmocka_unit_test_setup_teardown(test_rdma_fake_open_unwinds, fake_setup,
						fake_teardown),
#endif
	};

	return cmocka_run_group_tests_name("rdma", tests, NULL, NULL);
}
