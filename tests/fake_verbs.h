/*
 * A fake verbs device for the tests (tests/fake_verbs.c): libibverbs'
 * table replaced (pool/rdma_verbs.h) by functions that keep queue pairs,
 * memory regions and completion queues in memory and carry out an RDMA
 * WRITE as the hardware would check it. Its state is `fake`; every call
 * takes one lock, so a manager's and its clients' threads share it.
 */
#ifndef SELENE_TESTS_FAKE_VERBS_H
#define SELENE_TESTS_FAKE_VERBS_H

#ifdef SEL_HAVE_VERBS_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

#define FAKE_OBJECTS_MAX 64
#define FAKE_CQ_DEPTH 256

struct fake_mr;
struct fake_qp;

struct fake_verbs_state {
	struct ibv_device device;
	struct ibv_device *list[2];
	bool ethernet;
	uint64_t max_mr_size;
	int live;          /* contexts, protection domains, regions, queues alive */
	int acquisitions;  /* calls that make something, counted */
	int fail_at;       /* that acquisition fails (0: none) */
	struct fake_mr *mrs[FAKE_OBJECTS_MAX];
	struct fake_qp *qps[FAKE_OBJECTS_MAX];
	uint32_t next_key;
	int writes;        /* RDMA WRITEs carried out, counted */
	int write_fail_at; /* that write half lands and completes with an error (0: none) */
	int corrupt_at;    /* that write lands with its first byte flipped, and succeeds (0: none) */
	int posts;         /* posts, counted */
	int post_fail_at;  /* that post fails at once (0: none) */
	uint32_t completion_delay_ms; /* a write's completion is polled this long after its post */
	uint64_t polls;    /* completion queue polls, counted */
};

extern struct fake_verbs_state fake;

/* Resets the fake to one RoCE device, fake_rxe0, and puts it in place of libibverbs. */
void fake_verbs_install(void);

/* Puts libibverbs back; returns the objects still alive (0: every one was freed). */
int fake_verbs_remove(void);

/* Under the fake's lock, for tests whose manager and clients run: */
void fake_verbs_fail_write_at(int n); /* fake.write_fail_at */
void fake_verbs_corrupt_at(int n);    /* fake.corrupt_at */
void fake_verbs_post_fail_at(int n);  /* fake.post_fail_at */
int fake_verbs_writes(void);          /* fake.writes */
void fake_verbs_delay_completions(uint32_t ms); /* fake.completion_delay_ms */
uint64_t fake_verbs_polls(void);      /* fake.polls */
int fake_verbs_live(void);            /* fake.live */

#endif

#endif
