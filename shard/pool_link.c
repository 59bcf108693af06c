/*
 * A rank's connection to a pool manager: see pool_link.h.
 */
#include "shard/pool_link.h"

#include "common/base.h"
#include "selene/selene.h"
#include "shard/config.h"
#include "shard/pool_share.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Slots a claim keeps posted: the I/O thread reads one while the device copies another. */
#define LINK_SLOTS 4u

struct shard_pool_link {
	struct pool_client *client;
	struct rec_geometry geometry; /* this rank's */
	void *slots[LINK_SLOTS];
	size_t slot_bytes;
	struct pool_chain_entry *chain; /* a claim's, for the client (scratch) */
};

int shard_pool_link_deadline_ms(uint64_t bytes)
{
	uint64_t ms = SHARD_POOL_SETUP_MS + bytes / (SHARD_POOL_BYTES_PER_S / 1000u);

	return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

int shard_pool_plan_init(struct shard_pool_plan *plan, const struct sel_store_config *store,
			 uint32_t rank, uint32_t world_size,
			 const struct rec_identity *namespace_id)
{
	struct rec_geometry *g = malloc(sizeof(*g));
	int ret = 0;

	SEL_ASSERT(world_size >= 1 && world_size <= REC_WORLD_SIZE_MAX && rank < world_size);
	memset(plan, 0, sizeof(*plan));
	plan->namespace_id = *namespace_id;
	plan->world_size = world_size;
	if (!g)
		ret = sel_fail(-ENOMEM, plan->why, sizeof(plan->why), "out of memory");
	for (uint32_t i = 0; i < world_size && !ret; i++) {
		ret = shard_config_geometry(store, i, world_size, g, plan->why, sizeof(plan->why));
		if (ret)
			break;
		plan->page_bytes[i] = g->page_record_bytes;
		plan->row_bytes[i] = g->row_record_bytes;
		if (!ret && i == rank)
			plan->geometry = *g;
	}
	free(g);
	if (!ret && !store->pool_secret_file)
		ret = sel_fail(-EINVAL, plan->why, sizeof(plan->why),
			       "rank %u has no pool_secret_file", rank);
	if (!ret)
		ret = pool_secret_load(store->pool_secret_file, plan->secret, plan->why,
				       sizeof(plan->why));
	plan->failure = ret;
	return ret;
}

void shard_pool_plan_destroy(struct shard_pool_plan *plan)
{
	explicit_bzero(plan->secret, sizeof(plan->secret));
}

int shard_pool_link_open(const struct shard_pool_plan *plan, const char *address,
			 const uint8_t *instance_id, uint32_t deadline_ms,
			 struct shard_pool_link **out, char *why, size_t why_size)
{
	const struct rec_geometry *g = &plan->geometry;
	struct pool_client_config cc = {
		.address = address, .secret = plan->secret, .rank = g->rank,
		.scope = { .world_size = plan->world_size, .namespace_id = plan->namespace_id,
			   .layout_digest = g->layout_digest, .page_tokens = g->page_tokens,
			   .plane_count = g->page_plane_count, .page_bytes = plan->page_bytes,
			   .row_bytes = plan->row_bytes },
		.geometry = g, .deadline_ms = deadline_ms };
	struct shard_pool_link *link;
	int ret;

	*out = NULL;
	if (plan->failure)
		return sel_fail(plan->failure, why, why_size, "%s", plan->why);
	link = calloc(1, sizeof(*link));
	if (!link)
		return sel_fail(-ENOMEM, why, why_size, "out of memory");
	link->geometry = *g;
	link->chain = calloc(POOL_CHAIN_RECORDS_MAX, sizeof(*link->chain));
	if (!link->chain) {
		ret = sel_fail(-ENOMEM, why, why_size, "out of memory");
		goto err_free_link;
	}
	memcpy(cc.instance_id, instance_id, sizeof(cc.instance_id));
	ret = pool_client_open(&cc, &link->client, why, why_size);
	if (ret)
		goto err_free_link;
	link->slot_bytes = pool_client_slot_bytes(link->client);
	for (uint32_t i = 0; i < LINK_SLOTS; i++) {
		link->slots[i] = malloc(link->slot_bytes);
		if (!link->slots[i]) {
			ret = sel_fail(-ENOMEM, why, why_size, "out of memory for claim slots");
			goto err_close_link;
		}
	}
	*out = link;
	return 0;
err_close_link:
	shard_pool_link_close(link);
	return ret;
err_free_link:
	free(link->chain);
	free(link);
	return ret;
}

void shard_pool_link_close(struct shard_pool_link *link)
{
	if (!link)
		return;
	pool_client_close(link->client);
	for (uint32_t i = 0; i < LINK_SLOTS; i++)
		free(link->slots[i]);
	free(link->chain);
	free(link);
}

struct pool_client *shard_pool_link_client(struct shard_pool_link *link)
{
	return link->client;
}

static int link_put_share(void *ctx, uint64_t put_id, int fd, uint64_t length, char *why,
			  size_t why_size)
{
	struct shard_pool_link *link = ctx;
	int ret = pool_put_share_fd(link->client, put_id, fd, length,
				    shard_pool_link_deadline_ms(length));

	if (ret && pool_client_status(link->client, why, why_size) == 0)
		snprintf(why, why_size, "the manager did not take the share: %s",
			 sel_strerror(ret));
	return ret;
}

struct link_claim {
	struct shard_pool_share *share;
	char *why;
	size_t why_size;
};

static int link_window(void *ctx, const struct pool_window *w)
{
	struct link_claim *lc = ctx;

	return shard_pool_share_window(lc->share, w->chain_index,
				       (enum shard_pool_section)w->section, w->first, w->count,
				       w->data, w->bytes, lc->why, lc->why_size);
}

static int link_claim_share(void *ctx, uint64_t claim_id, const struct shard_pool_record *chain,
			    uint32_t chain_count, uint32_t skip_pages,
			    struct shard_pool_share *share, char *why, size_t why_size)
{
	struct shard_pool_link *link = ctx;
	struct link_claim lc = { .share = share, .why = why, .why_size = why_size };
	uint64_t bytes = 0;
	int ret;

	SEL_ASSERT(chain_count >= 1 && chain_count <= POOL_CHAIN_RECORDS_MAX);
	for (uint32_t i = 0; i < chain_count; i++) {
		link->chain[i] = (struct pool_chain_entry){
			.key = chain[i].key, .first_page_index = chain[i].first_page_index,
			.tail_page_count = chain[i].tail_page_count, .row = chain[i].row };
		bytes += rec_geometry_file_bytes(&link->geometry, chain[i].tail_page_count,
						 chain[i].row);
	}
	why[0] = '\0';
	ret = pool_share_claim(link->client, claim_id, link->chain, chain_count, skip_pages,
			       link->slots, LINK_SLOTS, link->slot_bytes, link_window, &lc,
			       shard_pool_link_deadline_ms(bytes));
	if (ret && !why[0] && pool_client_status(link->client, why, why_size) == 0)
		snprintf(why, why_size, "claim %llu: %s", (unsigned long long)claim_id,
			 sel_strerror(ret));
	return ret;
}

void shard_pool_link_conn(struct shard_pool_link *link, struct shard_pool_conn *conn)
{
	*conn = (struct shard_pool_conn){ .ctx = link, .put_share = link_put_share,
					  .claim_share = link_claim_share };
}
