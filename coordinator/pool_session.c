/*
 * Rank zero's pool session over pool/client.h: see pool_session.h.
 */
#include "coordinator/pool_session.h"

#include "common/base.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int coord_pool_client_session_init(struct coord_pool_client_session *s,
				   struct pool_client *client, uint32_t world_size)
{
	SEL_ASSERT(world_size >= 1 && world_size <= REC_WORLD_SIZE_MAX);
	memset(s, 0, sizeof(*s));
	s->client = client;
	s->world_size = world_size;
	s->chain = calloc(POOL_CHAIN_RECORDS_MAX, sizeof(*s->chain));
	return s->chain ? 0 : -ENOMEM;
}

void coord_pool_client_session_destroy(struct coord_pool_client_session *s)
{
	free(s->chain);
	s->chain = NULL;
}

/* A chain the client answered, as the store's records. */
static void session_chain(const struct pool_chain_entry *in, uint32_t count,
			  struct coord_pool_record *out)
{
	for (uint32_t i = 0; i < count; i++)
		out[i] = (struct coord_pool_record){
			.key = in[i].key, .first_page_index = in[i].first_page_index,
			.tail_page_count = in[i].tail_page_count, .row = in[i].row,
			.place_offset = in[i].place.offset, .place_bytes = in[i].place.bytes,
			.stamp = in[i].stamp };
}

static int session_put_begin(void *ctx, const struct coord_pool_put *put, uint32_t world_size,
			     uint64_t *request)
{
	struct coord_pool_client_session *s = ctx;
	struct pool_put_spec spec = { .key = put->key, .parent = put->parent,
				      .first_page_index = put->first_page_index,
				      .tail_page_count = put->tail_page_count, .row = put->row,
				      .share_bytes = s->share_bytes };

	SEL_ASSERT(world_size == s->world_size);
	/* every rank's file has the same length (the join compared layouts) */
	for (uint32_t i = 0; i < world_size; i++)
		s->share_bytes[i] = put->share_bytes;
	return pool_put_begin(s->client, &spec, request);
}

static int session_put_ready(void *ctx, uint64_t request, uint64_t *put_id)
{
	struct coord_pool_client_session *s = ctx;

	return pool_put_poll(s->client, request, put_id);
}

static int session_put_commit(void *ctx, uint64_t put_id, bool commit)
{
	struct coord_pool_client_session *s = ctx;

	return pool_put_commit(s->client, put_id, commit);
}

static int session_put_outcome(void *ctx, uint64_t put_id)
{
	struct coord_pool_client_session *s = ctx;

	return pool_put_outcome(s->client, put_id);
}

static int session_claim_begin(void *ctx, const struct rec_key *key, uint64_t *claim_id)
{
	struct coord_pool_client_session *s = ctx;

	return pool_claim_begin(s->client, key, claim_id);
}

static bool session_claim_local(void *ctx, uint64_t claim_id)
{
	struct coord_pool_client_session *s = ctx;

	return pool_claim_is_local(s->client, claim_id);
}

static int session_claim_granted(void *ctx, uint64_t claim_id, struct coord_pool_record *chain,
				 uint32_t max, uint32_t *count)
{
	struct coord_pool_client_session *s = ctx;
	struct pool_claim_grant grant;
	int ret;

	ret = pool_claim_poll(s->client, claim_id, &grant, s->chain, POOL_CHAIN_RECORDS_MAX,
			      count);
	if (ret == 1 && *count > max) {
		pool_claim_end(s->client, claim_id, -ENOSPC);
		return -ENOSPC;
	}
	if (ret == 1)
		session_chain(s->chain, *count, chain);
	return ret;
}

static void session_claim_end(void *ctx, uint64_t claim_id, int result)
{
	struct coord_pool_client_session *s = ctx;

	pool_claim_end(s->client, claim_id, result);
}

static int session_lookup(void *ctx, const struct rec_key *keys, uint32_t count,
			  uint64_t *ticket)
{
	struct coord_pool_client_session *s = ctx;

	if (count > POOL_LOOKUP_KEYS_MAX)
		count = POOL_LOOKUP_KEYS_MAX; /* the longest candidates */
	return pool_lookup_begin(s->client, keys, count, ticket);
}

static int session_answer(void *ctx, uint64_t ticket, struct coord_pool_record *chain,
			  uint32_t max, uint32_t *count)
{
	struct coord_pool_client_session *s = ctx;
	int ret = pool_lookup_poll(s->client, ticket, s->chain, POOL_CHAIN_RECORDS_MAX, count);

	if (ret == 1 && *count > max)
		*count = 0; /* longer than the store restores: no hit */
	if (ret == 1)
		session_chain(s->chain, *count, chain);
	return ret;
}

static void session_forget(void *ctx, uint64_t ticket)
{
	struct coord_pool_client_session *s = ctx;

	pool_lookup_cancel(s->client, ticket);
}

_Static_assert((int)COORD_POOL_HOLD_ADD == (int)POOL_HOLDS_ADD &&
		       (int)COORD_POOL_HOLD_WITHDRAW == (int)POOL_HOLDS_WITHDRAW &&
		       (int)COORD_POOL_HOLD_RESET == (int)POOL_HOLDS_RESET,
	       "the store's hold ops are R-POOL-70's");

static int session_hold(void *ctx, uint8_t op, const struct rec_key *keys, uint32_t count)
{
	struct coord_pool_client_session *s = ctx;

	return pool_holds_send(s->client, (enum pool_holds_op)op, keys, count);
}

static int session_export_next(void *ctx, uint64_t *id, struct rec_key *key)
{
	struct coord_pool_client_session *s = ctx;
	struct pool_export x;
	int ret = pool_export_next(s->client, &x);

	if (ret == 1) {
		*id = x.export_id;
		*key = x.key;
	}
	return ret;
}

static void session_export_end(void *ctx, uint64_t id, int result)
{
	struct coord_pool_client_session *s = ctx;

	/* a lost connection ends the export on the manager's side too */
	pool_export_end(s->client, id, result);
}

void coord_pool_client_session_fill(struct coord_pool_client_session *s,
				    struct coord_pool_session *session,
				    struct coord_pool_ops *ops)
{
	*session = (struct coord_pool_session){
		.ctx = s, .put_begin = session_put_begin, .put_ready = session_put_ready,
		.put_commit = session_put_commit, .put_outcome = session_put_outcome,
		.claim_begin = session_claim_begin, .claim_local = session_claim_local,
		.claim_granted = session_claim_granted,
		.claim_end = session_claim_end };
	*ops = (struct coord_pool_ops){ .ctx = s, .lookup = session_lookup,
					.answer = session_answer, .forget = session_forget,
					.hold = session_hold, .export_next = session_export_next,
					.export_end = session_export_end };
}
