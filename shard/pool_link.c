/*
 * A rank's connection to a pool manager: see pool_link.h.
 */
#include "shard/pool_link.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "selene/selene.h"
#include "shard/config.h"
#include "shard/pool_share.h"
#include "shard/slab.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Slots a claim keeps posted: the I/O thread reads one while the device copies another. */
#define LINK_SLOTS 4u

/* A link's use of the manager's arena (same-host claims, DESIGN section 13). */
enum link_arena_state {
	LINK_ARENA_UNTRIED = 0, /* the first claim maps it and starts its registration */
	LINK_ARENA_REGISTERING, /* mapped, registering on a thread: claims stream */
	LINK_ARENA_ON,          /* mapped and registered: claims copy from it */
	LINK_ARENA_OFF,         /* another host, or refused: claims stream */
};

/*
 * How long the first claim waits for the arena's registration before it
 * streams: an arena of about 2.5 GiB registers within it (0.3 to 0.4 ms
 * a MiB on the H100 host), a larger one goes on registering while claims
 * stream.
 */
#define LINK_ARENA_WAIT_MS 1000u

/*
 * A peer rank's own connection lost (rank zero's session up): the first try
 * to open it again comes at once, later ones after this, doubling,
 */
#define LINK_BACKOFF_MIN_MS 100u
/* up to this, */
#define LINK_BACKOFF_MAX_MS 5000u
/* each waiting this long at most for the manager (on the link's connect thread). */
#define LINK_RECONNECT_MS 2000u

struct shard_pool_link {
	struct pool_client *client; /* NULL after a reconnect failed to open one */
	enum link_arena_state arena_state;
	const uint8_t *arena;             /* the client's mapping (valid until its close) */
	uint64_t arena_bytes;
	struct shard_device *arena_device; /* registered with; NULL when not */
	/*
	 * The registration's thread (link_arena_register_thread), started by
	 * the first claim: it writes register_* and then sets register_done,
	 * after which the transfer thread (or the close) joins it.
	 */
	pthread_t register_thread;
	atomic_bool register_done;
	struct shard_device *register_device;
	int register_result;
	uint64_t register_ns;
	struct pool_place *places;        /* a claim's, POOL_CHAIN_RECORDS_MAX (scratch) */
	struct rec_geometry geometry; /* this rank's */
	void *slots[LINK_SLOTS];
	size_t slot_bytes;
	struct pool_chain_entry *chain; /* a claim's, for the client (scratch) */
	/* an early claim's grant for shard_pool_share_granted (scratch, chain max each) */
	struct shard_pool_record *granted;
	uint64_t *stamps;
	struct shard_pool_place *granted_places;
	/* reconnects (a peer rank's link only; rank zero's is the session's) */
	const struct shard_pool_plan *plan; /* the opener's, valid until the close */
	char address[CLUSTER_JOB_POOL_ADDRESS_BYTES_MAX + 1];
	uint8_t instance_id[POOL_INSTANCE_ID_BYTES];
	bool reconnects;
	bool lost;            /* the loss was warned about; cleared by a reconnect */
	int lost_result;      /* the loss's failure, while lost */
	char lost_why[200];   /* why the connection was lost, while client is NULL */
	uint64_t retry_ns;    /* the next try, on CLOCK_MONOTONIC */
	uint32_t backoff_ms;
	/*
	 * A try runs on a thread of its own (link_connect_thread), so the
	 * transfer thread never waits for the manager: connecting says one
	 * was started and not yet joined; the thread writes new_* and then
	 * sets connect_done, after which the transfer thread joins it.
	 */
	bool connecting;
	pthread_t connect_thread;
	atomic_bool connect_done;
	int new_result;
	struct pool_client *new_client;
	char new_why[200];
};

static void link_connect_abandon(struct shard_pool_link *link);
static void link_arena_join(struct shard_pool_link *link);

/* Process-wide counts (shard_pool_link_counts). */
static _Atomic uint64_t count_arena_claims, count_arena_records, count_stream_claims,
	count_rdma_claims, count_stream_windows, count_arena_refusals, count_early_claims,
	count_records_early, count_records_redone, count_records_waited;

void shard_pool_link_counts(struct shard_pool_link_counts *out)
{
	*out = (struct shard_pool_link_counts){
		.arena_claims = atomic_load(&count_arena_claims),
		.arena_records = atomic_load(&count_arena_records),
		.stream_claims = atomic_load(&count_stream_claims),
		.rdma_claims = atomic_load(&count_rdma_claims),
		.stream_windows = atomic_load(&count_stream_windows),
		.arena_refusals = atomic_load(&count_arena_refusals),
		.early_claims = atomic_load(&count_early_claims),
		.records_early = atomic_load(&count_records_early),
		.records_redone = atomic_load(&count_records_redone),
		.records_waited = atomic_load(&count_records_waited),
	};
}

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

/*
 * The claim slots are checked against the memory budget
 * (shard_slab_memory_fits) before one is allocated: a link that cannot
 * hold them is refused, and its rank's refusal leaves the instance on its
 * local tiers.
 */
static int link_check_staging(struct shard_pool_link *link, char *why, size_t why_size)
{
	uint64_t staging = (uint64_t)LINK_SLOTS * link->slot_bytes, available;

	if (shard_slab_memory_fits(staging, &available))
		return 0;
	/* short: a peer's reason travels in a JOB_DONE (CLUSTER_JOB_REASON_BYTES_MAX) */
	return sel_fail(-ENOMEM, why, why_size, "rank %u: pool claim staging needs %" PRIu64
			" MiB (%u slots of %zu bytes), more than half of the %" PRIu64
			" MiB of memory available", link->geometry.rank, staging >> 20,
			LINK_SLOTS, link->slot_bytes, available >> 20);
}

/* Opens a client of plan's rank to address as a member of instance_id. */
static int link_client_open(const struct shard_pool_plan *plan, const char *address,
			    const uint8_t *instance_id, uint32_t deadline_ms,
			    struct pool_client **out, char *why, size_t why_size)
{
	const struct rec_geometry *g = &plan->geometry;
	struct pool_client_config cc = {
		.address = address, .secret = plan->secret, .rank = g->rank,
		.scope = { .world_size = plan->world_size, .namespace_id = plan->namespace_id,
			   .layout_digest = g->layout_digest, .page_tokens = g->page_tokens,
			   .plane_count = g->page_plane_count, .page_bytes = plan->page_bytes,
			   .row_bytes = plan->row_bytes },
		.geometry = g, .deadline_ms = deadline_ms };

	memcpy(cc.instance_id, instance_id, sizeof(cc.instance_id));
	return pool_client_open(&cc, out, why, why_size);
}

static void link_free_scratch(struct shard_pool_link *link)
{
	free(link->granted_places);
	free(link->stamps);
	free(link->granted);
	free(link->places);
	free(link->chain);
}

int shard_pool_link_open(const struct shard_pool_plan *plan, const char *address,
			 const uint8_t *instance_id, uint32_t deadline_ms,
			 struct shard_pool_link **out, char *why, size_t why_size)
{
	const struct rec_geometry *g = &plan->geometry;
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
	link->places = calloc(POOL_CHAIN_RECORDS_MAX, sizeof(*link->places));
	link->granted = calloc(POOL_CHAIN_RECORDS_MAX, sizeof(*link->granted));
	link->stamps = calloc(POOL_CHAIN_RECORDS_MAX, sizeof(*link->stamps));
	link->granted_places = calloc(POOL_CHAIN_RECORDS_MAX, sizeof(*link->granted_places));
	if (!link->chain || !link->places || !link->granted || !link->stamps ||
	    !link->granted_places) {
		ret = sel_fail(-ENOMEM, why, why_size, "out of memory");
		goto err_free_link;
	}
	if (strlen(address) >= sizeof(link->address)) {
		ret = sel_fail(-EINVAL, why, why_size, "pool address too long");
		goto err_free_link;
	}
	snprintf(link->address, sizeof(link->address), "%s", address);
	memcpy(link->instance_id, instance_id, sizeof(link->instance_id));
	link->plan = plan;
	link->reconnects = g->rank != 0;
	link->backoff_ms = LINK_BACKOFF_MIN_MS;
	ret = link_client_open(plan, address, instance_id, deadline_ms, &link->client, why,
			       why_size);
	if (ret)
		goto err_free_link;
	link->slot_bytes = pool_client_slot_bytes(link->client);
	ret = link_check_staging(link, why, why_size);
	if (ret)
		goto err_close_link;
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
	link_free_scratch(link);
	free(link);
	return ret;
}

void shard_pool_link_close(struct shard_pool_link *link)
{
	if (!link)
		return;
	SEL_FAILPOINT(SEL_FP_POOL_LINK_CLOSE);
	link_connect_abandon(link);
	link_arena_join(link);
	/*
	 * No transfer runs on the link now: the closing thread makes the
	 * device current for the unregistration, then puts back its own.
	 */
	if (link->arena_device) {
		struct shard_device_binding binding;

		if (shard_device_bind_for(link->arena_device, &binding) == 0) {
			link->arena_device->ops->unregister_host(link->arena_device,
								 (void *)link->arena);
			shard_device_unbind(link->arena_device, &binding);
		}
	}
	pool_client_close(link->client); /* unmaps the arena; NULL does nothing */
	for (uint32_t i = 0; i < LINK_SLOTS; i++)
		free(link->slots[i]);
	link_free_scratch(link);
	free(link);
}

void shard_pool_link_cut(struct shard_pool_link *link, const char *why)
{
	if (link && link->client)
		pool_client_cut(link->client, why);
}

void shard_pool_link_close_ctx(void *link)
{
	shard_pool_link_close(link);
}

struct pool_client *shard_pool_link_client(struct shard_pool_link *link)
{
	return link->client;
}

/*
 * Drops the lost client, on the transfer thread: its arena's registration
 * is undone (the device is current here) before the client unmaps it.
 */
static void link_drop_client(struct shard_pool_link *link)
{
	link_arena_join(link);
	if (link->arena_device)
		link->arena_device->ops->unregister_host(link->arena_device, (void *)link->arena);
	link->arena_device = NULL;
	link->arena = NULL;
	link->arena_bytes = 0;
	link->arena_state = LINK_ARENA_UNTRIED;
	pool_client_close(link->client);
	link->client = NULL;
}

/*
 * One reconnect try, on the link's connect thread (never the transfer
 * thread): a fresh handshake and ATTACH with the instance's id (R-POOL-18,
 * R-POOL-110), LINK_RECONNECT_MS at most.
 */
static void *link_connect_thread(void *arg)
{
	struct shard_pool_link *link = arg;

	link->new_result = link_client_open(link->plan, link->address, link->instance_id,
					    LINK_RECONNECT_MS, &link->new_client, link->new_why,
					    sizeof(link->new_why));
	if (!link->new_result && pool_client_slot_bytes(link->new_client) > link->slot_bytes) {
		/* another manager on the address, with larger windows */
		pool_client_close(link->new_client);
		link->new_client = NULL;
		link->new_result = sel_fail(SEL_EMISMATCH, link->new_why, sizeof(link->new_why),
					    "the manager's windows grew past this link's "
					    "claim slots");
	}
	if (link->new_result)
		link->new_client = NULL;
	atomic_store(&link->connect_done, true);
	return NULL;
}

/* The next try after the backoff, which doubles up to LINK_BACKOFF_MAX_MS. */
static void link_retry_later(struct shard_pool_link *link)
{
	link->retry_ns = sel_monotonic_ns() + (uint64_t)link->backoff_ms * 1000000ull;
	link->backoff_ms = link->backoff_ms * 2 > LINK_BACKOFF_MAX_MS ? LINK_BACKOFF_MAX_MS
								     : link->backoff_ms * 2;
}

/* Joins the finished try: 0 and the new client, or its failure with why. */
static int link_connect_finish(struct shard_pool_link *link, char *why, size_t why_size)
{
	pthread_join(link->connect_thread, NULL);
	link->connecting = false;
	if (link->new_result) {
		link_retry_later(link);
		sel_debug("pool: rank %u could not reconnect: %s", link->geometry.rank,
			  link->new_why);
		snprintf(why, why_size, "%s; reconnecting failed: %s", link->lost_why,
			 link->new_why);
		return link->new_result;
	}
	link->client = link->new_client;
	link->new_client = NULL;
	sel_info("pool: rank %u reconnected to the manager", link->geometry.rank);
	link->lost = false;
	link->retry_ns = 0;
	link->backoff_ms = LINK_BACKOFF_MIN_MS;
	return 0;
}

/* Waits for a try still running (the link's close): LINK_RECONNECT_MS at most. */
static void link_connect_abandon(struct shard_pool_link *link)
{
	if (!link->connecting)
		return;
	pthread_join(link->connect_thread, NULL);
	link->connecting = false;
	pool_client_close(link->new_client); /* NULL does nothing */
	link->new_client = NULL;
}

/*
 * Before each share, on the transfer thread, never waiting for the
 * manager: 0 when the connection is up. A peer rank's connection lost on
 * its own (rank zero's session up, so its puts and claims still come) is
 * opened again by a try on a thread of its own, started here once the
 * backoff passed: the first try at once, then from LINK_BACKOFF_MIN_MS
 * doubling to LINK_BACKOFF_MAX_MS, each waiting LINK_RECONNECT_MS at most
 * (R-POOL-18, R-POOL-110), warned about once per loss. The lost connection
 * is closed first, so the manager frees the rank's place before the new
 * ATTACH. Until a try succeeded, the loss's failure, with why: the share
 * fails at once as it always did, and the transfer thread goes on to its
 * next job (a restore from the local tiers does not wait for the manager).
 */
static int link_ready(struct shard_pool_link *link, char *why, size_t why_size)
{
	int ret;

	if (link->connecting) {
		if (atomic_load(&link->connect_done))
			return link_connect_finish(link, why, why_size);
		return sel_fail(link->lost_result, why, why_size, "%s; reconnecting",
				link->lost_why);
	}
	ret = link->client ? pool_client_status(link->client, why, why_size) : link->lost_result;
	if (!ret)
		return 0;
	if (!link->client)
		snprintf(why, why_size, "%s", link->lost_why);
	if (!link->reconnects)
		return ret;
	if (!link->lost) {
		link->lost = true;
		link->lost_result = ret;
		snprintf(link->lost_why, sizeof(link->lost_why), "%s", why);
		sel_warn("pool: rank %u lost its connection to the manager (%s); it reconnects",
			 link->geometry.rank, why);
	}
	if (sel_monotonic_ns() < link->retry_ns)
		return ret;
	if (link->client)
		link_drop_client(link);
	atomic_store(&link->connect_done, false);
	link->new_client = NULL;
	link->new_result = 0;
	link->new_why[0] = '\0';
	if (sel_thread_start(&link->connect_thread, link_connect_thread, link) != 0) {
		link_retry_later(link);
		return sel_fail(ret, why, why_size, "%s; no thread to reconnect", link->lost_why);
	}
	link->connecting = true;
	return sel_fail(ret, why, why_size, "%s; reconnecting", link->lost_why);
}

/* The failpoint pool.link_cut: ends the connection before a share, as a network fault. */
static void link_cut_point(struct shard_pool_link *link)
{
	if (SEL_FAILPOINT(SEL_FP_POOL_LINK_CUT) && link->client)
		pool_client_cut(link->client, "the connection was cut (failpoint pool.link_cut)");
}

static int link_put_share(void *ctx, uint64_t put_id, int fd, uint64_t length, char *why,
			  size_t why_size)
{
	struct shard_pool_link *link = ctx;
	int ret;

	link_cut_point(link);
	ret = link_ready(link, why, why_size);
	if (ret)
		return ret;
	ret = pool_put_share_fd(link->client, put_id, fd, length,
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

	atomic_fetch_add(&count_stream_windows, 1);
	return shard_pool_share_window(lc->share, w->chain_index,
				       (enum shard_pool_section)w->section, w->first, w->count,
				       w->data, w->bytes, lc->why, lc->why_size);
}

/*
 * Registers the mapped arena with the device, on a thread of its own (the
 * device made current on it): pinning a large arena takes seconds, which
 * no claim and no restore on the transfer thread waits for.
 */
static void *link_arena_register_thread(void *arg)
{
	struct shard_pool_link *link = arg;
	uint64_t start = sel_monotonic_ns();
	int ret = SEL_FAILPOINT(SEL_FP_POOL_ARENA_REGISTER);

	if (!ret)
		ret = shard_device_bind(link->register_device);
	if (!ret)
		ret = shard_device_register_read_only(link->register_device, link->arena,
						      link->arena_bytes);
	link->register_result = ret;
	link->register_ns = sel_monotonic_ns() - start;
	atomic_store(&link->register_done, true);
	return NULL;
}

/*
 * Joins a registration started (waiting for it: the close, a dropped
 * client, or one that said it is done) and applies its result: the arena
 * on, and rank zero's later grants bring its places (R-POOL-51); or off,
 * with one warning, and claims stream.
 */
static void link_arena_join(struct shard_pool_link *link)
{
	struct shard_device *device = link->register_device;

	if (link->arena_state != LINK_ARENA_REGISTERING)
		return;
	pthread_join(link->register_thread, NULL);
	if (link->register_result) {
		link->arena_state = LINK_ARENA_OFF;
		atomic_fetch_add(&count_arena_refusals, 1);
		sel_warn("pool: rank %u: the %s device refused to register the manager's arena "
			 "(%" PRIu64 " bytes): %s; claims stream", link->geometry.rank,
			 device->ops->name, link->arena_bytes, sel_strerror(link->register_result));
		return;
	}
	sel_info("pool: rank %u registered the manager's arena (%" PRIu64 " bytes) with the "
		 "%s device in %.1f ms", link->geometry.rank, link->arena_bytes,
		 device->ops->name, (double)link->register_ns / 1e6);
	link->arena_device = device;
	link->arena_state = LINK_ARENA_ON;
	pool_client_claim_local(link->client, true);
}

/*
 * On the first claim, on the transfer thread: maps the manager's arena
 * when this rank is on its host and registers it with the claim's device
 * once, logging what the registration cost. Another host: claims stream,
 * said at info level; a mapping or registration refused, or an arena that
 * with the claim staging does not fit the memory budget
 * (shard_slab_memory_fits, checked before anything is registered): claims
 * stream, with one warning naming the figures.
 */
static void link_arena_setup(struct shard_pool_link *link, struct shard_device *device)
{
	uint64_t start, staging, available;
	char why[200];
	int ret;

	link->arena_state = LINK_ARENA_OFF;
	ret = SEL_FAILPOINT(SEL_FP_POOL_ARENA_MAP);
	if (ret)
		snprintf(why, sizeof(why), "failpoint pool.arena_map: %s", sel_strerror(ret));
	else
		ret = pool_arena_map(link->client, &link->arena, &link->arena_bytes, why,
				     sizeof(why));
	if (ret == -ENOENT) {
		sel_info("pool: rank %u is not on the manager's host (%s): claims stream%s",
			 link->geometry.rank, why,
			 pool_client_rdma_active(link->client)
				 ? ", by RDMA WRITEs into this rank's lent slots" : "");
		return;
	}
	if (ret) {
		atomic_fetch_add(&count_arena_refusals, 1);
		sel_warn("pool: rank %u cannot map the manager's arena: %s; claims stream",
			 link->geometry.rank, why);
		return;
	}
	/* the budget first: registering pins the whole arena */
	staging = (uint64_t)LINK_SLOTS * link->slot_bytes;
	if (!shard_slab_memory_fits(link->arena_bytes + staging, &available)) {
		atomic_fetch_add(&count_arena_refusals, 1);
		sel_warn("pool: rank %u does not register the manager's arena: it and the "
			 "claim staging need %" PRIu64 " MiB (arena %" PRIu64 " MiB, staging %"
			 PRIu64 " MiB), more than half of the %" PRIu64 " MiB of memory "
			 "available to this process; claims stream", link->geometry.rank,
			 (link->arena_bytes + staging) >> 20, link->arena_bytes >> 20,
			 staging >> 20, available >> 20);
		return;
	}
	link->register_device = device;
	link->register_result = 0;
	atomic_store(&link->register_done, false);
	ret = sel_thread_start(&link->register_thread, link_arena_register_thread, link);
	if (ret) {
		atomic_fetch_add(&count_arena_refusals, 1);
		sel_warn("pool: rank %u has no thread to register the manager's arena (%s); "
			 "claims stream", link->geometry.rank, sel_strerror(ret));
		return;
	}
	link->arena_state = LINK_ARENA_REGISTERING;
	start = sel_monotonic_ns();
	while (!atomic_load(&link->register_done) &&
	       sel_monotonic_ns() - start < LINK_ARENA_WAIT_MS * 1000000ull)
		nanosleep(&(struct timespec){ 0, 200000 }, NULL);
	if (atomic_load(&link->register_done))
		link_arena_join(link); /* at once: claims use the arena from this one */
	else
		sel_info("pool: rank %u is still registering the manager's arena (%" PRIu64
			 " bytes) after %u ms; claims stream until it is done",
			 link->geometry.rank, link->arena_bytes, LINK_ARENA_WAIT_MS);
}

/*
 * Before each claim's share, on the transfer thread: whether it copies from
 * the arena on device. The first claim maps it and starts its
 * registration; a registration that finished since is joined here.
 */
static bool link_arena_usable(struct shard_pool_link *link, struct shard_device *device)
{
	if (link->arena_state == LINK_ARENA_UNTRIED)
		link_arena_setup(link, device);
	if (link->arena_state == LINK_ARENA_REGISTERING && atomic_load(&link->register_done))
		link_arena_join(link);
	return link->arena_state == LINK_ARENA_ON && link->arena_device == device;
}

/*
 * A same-host claim: the manager names where each record's share image
 * lies in its arena (R-POOL-34; on rank zero, the grant named them already,
 * R-POOL-51, and the pull asks nothing) and share copies it to the device
 * with batched copies, waited for once when the engine finishes the claim;
 * no CPU pass over the bytes. The manager verified every
 * share when it was put, only it writes the arena, and the session's claim
 * pins the chain until every rank is done: the headers are checked again
 * (shard_pool_share_place), the pages and row are not.
 */
static int link_claim_places(struct shard_pool_link *link, uint64_t claim_id,
			     uint32_t chain_count, uint32_t skip_pages,
			     struct shard_pool_share *share, int deadline_ms, char *why,
			     size_t why_size)
{
	int ret = pool_share_pull(link->client, claim_id, link->chain, chain_count, skip_pages,
				  true);

	if (ret)
		return ret;
	ret = pool_share_places(link->client, claim_id, link->places, chain_count, deadline_ms);
	for (uint32_t i = 0; !ret && i < chain_count; i++) {
		const struct pool_place *pl = &link->places[i];

		if (pl->offset > link->arena_bytes || pl->bytes > link->arena_bytes - pl->offset) {
			ret = sel_fail(SEL_EPROTO, why, why_size, "claim %" PRIu64 " record %u: "
				       "%" PRIu64 " bytes at %" PRIu64 " past the %" PRIu64
				       "-byte arena", claim_id, i, pl->bytes, pl->offset,
				       link->arena_bytes);
			break;
		}
		ret = shard_pool_share_place(share, i, link->arena + pl->offset, pl->bytes, why,
					     why_size);
		if (!ret)
			atomic_fetch_add(&count_arena_records, 1);
	}
	pool_share_end(link->client, claim_id);
	if (!ret)
		atomic_fetch_add(&count_arena_claims, 1);
	return ret;
}

/* A claim's share bytes on this rank, all ranks' deadline alike (SHARD_POOL_BYTES_PER_S). */
static uint64_t link_chain_bytes(const struct shard_pool_link *link,
				 const struct shard_pool_record *chain, uint32_t count)
{
	uint64_t bytes = 0;

	for (uint32_t i = 0; i < count; i++)
		bytes += rec_geometry_file_bytes(&link->geometry, chain[i].tail_page_count,
						 chain[i].row);
	return bytes;
}

static int link_claim_share(void *ctx, uint64_t claim_id, const struct shard_pool_record *chain,
			    uint32_t chain_count, uint32_t skip_pages,
			    struct shard_pool_share *share, char *why, size_t why_size)
{
	struct shard_pool_link *link = ctx;
	struct link_claim lc = { .share = share, .why = why, .why_size = why_size };
	uint64_t bytes = link_chain_bytes(link, chain, chain_count);
	int ret;

	SEL_ASSERT(chain_count >= 1 && chain_count <= POOL_CHAIN_RECORDS_MAX);
	link_cut_point(link);
	ret = link_ready(link, why, why_size);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < chain_count; i++)
		link->chain[i] = (struct pool_chain_entry){
			.key = chain[i].key, .first_page_index = chain[i].first_page_index,
			.tail_page_count = chain[i].tail_page_count, .row = chain[i].row };
	why[0] = '\0';
	if (link_arena_usable(link, share->device)) {
		ret = link_claim_places(link, claim_id, chain_count, skip_pages, share,
					shard_pool_link_deadline_ms(bytes), why, why_size);
		goto out;
	}
	atomic_fetch_add(&count_stream_claims, 1);
	/* the client pulls in RDMA mode while its slots are lent (R-POOL-93) */
	if (pool_client_rdma_active(link->client))
		atomic_fetch_add(&count_rdma_claims, 1);
	ret = pool_share_claim(link->client, claim_id, link->chain, chain_count, skip_pages,
			       link->slots, LINK_SLOTS, link->slot_bytes, link_window, &lc,
			       shard_pool_link_deadline_ms(bytes));
out:
	if (ret && !why[0] && pool_client_status(link->client, why, why_size) == 0)
		snprintf(why, why_size, "claim %llu: %s", (unsigned long long)claim_id,
			 sel_strerror(ret));
	return ret;
}

/*
 * The grant of an early claim (count records, their stamps and places in
 * link->chain and link->places) applied to share: each record copied
 * early is kept when its stamp and place are the grant's, else copied
 * again from its granted place; the outcome counted.
 */
static int link_claim_granted(struct shard_pool_link *link, struct shard_pool_early *early,
			      uint32_t count, struct shard_pool_share *share, char *why,
			      size_t why_size)
{
	int ret;

	for (uint32_t i = 0; i < count; i++) {
		const struct pool_chain_entry *g = &link->chain[i];

		link->granted[i] = (struct shard_pool_record){
			.key = g->key, .first_page_index = g->first_page_index,
			.tail_page_count = g->tail_page_count, .row = g->row };
		link->stamps[i] = g->stamp;
		link->granted_places[i] = (struct shard_pool_place){ link->places[i].offset,
								     link->places[i].bytes };
	}
	ret = shard_pool_share_granted(share, link->arena, link->arena_bytes, early,
				       link->granted, link->stamps, link->granted_places, count,
				       why, why_size);
	atomic_fetch_add(&count_records_early, share->records_early);
	atomic_fetch_add(&count_records_redone, share->records_redone);
	atomic_fetch_add(&count_records_waited, share->records_waited);
	return ret;
}

/*
 * The session rank's share of a same-host claim, begun before its grant
 * (R-POOL-22, R-POOL-51): the copies from the lookup's places are issued
 * while CLAIM_LOCAL travels, then the grant is waited for on this thread
 * through the client, by claim id (pool_claim_wait: the session's own
 * thread polls the same claim and neither takes it from the other), within
 * the claim's deadline; its stamps keep or redo each record (R-POOL-36).
 * A refused or failed grant fails the share: what was copied early is the
 * caller's to discard. The manager verified every image when it was put
 * and the grant pins them; the headers are checked again here.
 */
static int link_claim_early(void *ctx, uint64_t claim_id, struct shard_pool_early *early,
			    struct shard_pool_share *share, char *why, size_t why_size)
{
	struct shard_pool_link *link = ctx;
	struct pool_claim_grant grant;
	uint32_t count = 0;
	uint64_t bytes;
	int ret;

	SEL_ASSERT(share->chain && share->chain_count <= POOL_CHAIN_RECORDS_MAX);
	why[0] = '\0';
	link_cut_point(link);
	ret = link_ready(link, why, why_size);
	if (ret)
		return ret;
	if (!link_arena_usable(link, share->device))
		return sel_fail(-ENOTSUP, why, why_size, "claim %" PRIu64 ": rank %u copies "
				"nothing from the manager's arena", claim_id, link->geometry.rank);
	bytes = link_chain_bytes(link, share->chain, share->chain_count);
	atomic_fetch_add(&count_early_claims, 1);
	ret = shard_pool_share_early(share, link->arena, link->arena_bytes, early,
				     share->chain_count);
	if (ret)
		return sel_fail(ret, why, why_size, "claim %" PRIu64 ": the device refused the "
				"copies before the grant: %s", claim_id, sel_strerror(ret));
	ret = pool_claim_wait(link->client, claim_id, &grant, link->chain, link->places,
			      POOL_CHAIN_RECORDS_MAX, &count, shard_pool_link_deadline_ms(bytes));
	if (ret != 1) {
		if (pool_client_status(link->client, why, why_size) == 0)
			snprintf(why, why_size, "claim %" PRIu64 " got no grant: %s", claim_id,
				 ret == -ENOENT ? "refused, or ended" : sel_strerror(ret));
		return ret;
	}
	ret = link_claim_granted(link, early, count, share, why, why_size);
	if (!ret) {
		atomic_fetch_add(&count_arena_claims, 1);
		atomic_fetch_add(&count_arena_records, count);
	}
	return ret;
}

void shard_pool_link_conn(struct shard_pool_link *link, struct shard_pool_conn *conn)
{
	*conn = (struct shard_pool_conn){ .ctx = link, .put_share = link_put_share,
					  .claim_share = link_claim_share,
					  .claim_early = link_claim_early };
}
