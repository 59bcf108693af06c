/*
 * The disk store's policy: see store.h. Every decision is made here, on the
 * caller's thread; the jobs table of functions only moves bytes.
 */
#include "coordinator/store.h"

#include "common/base.h"
#include "common/log.h"
#include "record/format.h"
#include "selene/selene.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int coord_store_init(struct coord_store *s, const struct rec_geometry *geometry,
		     const struct rec_identity *model, enum rec_state_mode mode,
		     uint64_t limit_bytes, uint32_t records_max,
		     const struct coord_jobs *jobs)
{
	int ret;

	memset(s, 0, sizeof(*s));
	s->geometry = *geometry;
	s->model = *model;
	rec_namespace_identity(&s->namespace_id, model, mode);
	s->limit_bytes = limit_bytes;
	s->jobs_ops = *jobs;
	s->stats.disk_limit_bytes = limit_bytes;
	ret = coord_index_init(&s->index, records_max, geometry->page_tokens);
	if (ret)
		return ret;
	s->generation = calloc(records_max, sizeof(uint64_t));
	s->used_ns = calloc(records_max, sizeof(uint64_t));
	if (!s->generation || !s->used_ns) {
		free(s->generation);
		free(s->used_ns);
		s->generation = s->used_ns = NULL;
		coord_index_destroy(&s->index);
		return -ENOMEM;
	}
	coord_warm_init_off(&s->warm);
	return 0;
}

int coord_store_set_warm(struct coord_store *s, uint32_t slots_total, uint32_t row_slots,
			 uint64_t slot_bytes, uint8_t policy)
{
	int ret = coord_warm_init(&s->warm, s->index.nodes_max, slots_total, row_slots,
				  slot_bytes);

	if (!ret) {
		s->zero_ids = calloc(s->geometry.page_count ? s->geometry.page_count : 1,
				     sizeof(*s->zero_ids));
		if (!s->zero_ids) {
			coord_warm_destroy(&s->warm);
			ret = -ENOMEM;
		}
	}
	s->warm_policy = policy;
	s->stats.warm_slots_total = ret ? 0 : slots_total;
	return ret;
}

/* The GPU offers' tables (coord_store_gpu_exports), freed and forgotten. */
static void gpu_holds_free(struct coord_store *s)
{
	free(s->gpu_holds);
	free(s->gpu_hold_by_checkpoint);
	free(s->gpu_hold_by_key);
	s->gpu_holds = NULL;
	s->gpu_hold_by_checkpoint = NULL;
	s->gpu_hold_by_key = NULL;
}

void coord_store_destroy(struct coord_store *s)
{
	coord_index_destroy(&s->index);
	coord_warm_destroy(&s->warm);
	free(s->zero_ids);
	s->zero_ids = NULL;
	free(s->generation);
	free(s->used_ns);
	s->generation = s->used_ns = NULL;
	free(s->pool_state);
	s->pool_state = NULL;
	for (uint32_t i = 0; i < COORD_POOL_HITS_MAX; i++) {
		free(s->pool_hits[i].chain);
		s->pool_hits[i].chain = NULL;
	}
	free(s->pool_keys);
	free(s->pool_answer);
	s->pool_keys = NULL;
	s->pool_answer = NULL;
	free(s->pool_holds);
	free(s->pool_hold_keys);
	s->pool_holds = NULL;
	s->pool_hold_keys = NULL;
	free(s->held_keys);
	s->held_keys = NULL;
	s->held_key_count = 0;
	gpu_holds_free(s);
	s->gpu_hold_count = 0;
}

/* rec_key_compare for qsort and bsearch */
static int key_order(const void *a, const void *b)
{
	return rec_key_compare(a, b);
}

int coord_store_hold(struct coord_store *s, const struct rec_key *keys, size_t count)
{
	struct rec_key *copy;

	if (count == 0)
		return 0;
	copy = malloc(count * sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	memcpy(copy, keys, count * sizeof(*copy));
	qsort(copy, count, sizeof(*copy), key_order);
	free(s->held_keys);
	s->held_keys = copy;
	s->held_key_count = count;
	s->held_consumed_max = 0;
	for (size_t i = 0; i < count; i++)
		if (copy[i].consumed > s->held_consumed_max)
			s->held_consumed_max = copy[i].consumed;
	sel_info("%zu records held unread since startup (R-AGREE-2): records of fewer than "
		 "%llu tokens may be their parents and are not evicted until a start reads "
		 "them", count, (unsigned long long)s->held_consumed_max);
	return 0;
}

/*
 * Whether n may be the parent of a key held unread (R-AGREE-2): a parent
 * has fewer tokens than its child (R-REC-6), and a held key's parent may
 * be known to no rank, so every record of fewer tokens than the longest
 * held key counts. Unlinking one would orphan the held key at the next
 * start that reads it (R-DIR-5), as the agreement's rule 7 keeps such
 * parents at startup.
 */
static bool may_parent_held(const struct coord_store *s, const struct coord_node *n)
{
	return n->key.consumed < s->held_consumed_max;
}

static bool held_unread(struct coord_store *s, const struct rec_key *key)
{
	char name[REC_FILE_NAME_BYTES];

	if (!s->held_key_count ||
	    !bsearch(key, s->held_keys, s->held_key_count, sizeof(*key), key_order))
		return false;
	if (!s->held_warned) {
		s->held_warned = true;
		rec_file_name(name, key);
		sel_warn("%s is held unread on some rank since startup (R-AGREE-2): it and the "
			 "other %zu such records are not stored again until a start reads them "
			 "(publications answer Retry)", name, s->held_key_count - 1);
	}
	return true;
}

static int push_event(struct coord_store *s, enum sel_event_kind kind, uint64_t id,
		      int error, const char *why)
{
	struct sel_event *e;

	/*
	 * Bounded by construction: coord_store_poll takes a completion only
	 * with room for all its waiters' events and one slot kept for FATAL,
	 * which is pushed once.
	 */
	SEL_ASSERT(s->event_count < COORD_EVENTS_MAX);
	e = &s->events[(s->event_head + s->event_count++) % COORD_EVENTS_MAX];
	e->kind = kind;
	e->id = id;
	e->error = error;
	snprintf(e->why, sizeof(e->why), "%s", why ? why : "");
	e->checkpoint = 0;
	e->tokens = 0;
	return 0;
}

static struct coord_job *job_take(struct coord_store *s, uint32_t *id)
{
	for (uint32_t i = 0; i < COORD_JOBS_MAX; i++) {
		if (!s->jobs[i].in_use) {
			struct coord_job *job = &s->jobs[i];

			memset(job, 0, offsetof(struct coord_job, chain));
			job->in_use = true;
			job->submitted_ns = sel_monotonic_ns();
			job->parent = COORD_NONE;
			job->node = COORD_NONE;
			*id = i;
			s->stats.jobs_in_flight++;
			return job;
		}
	}
	return NULL;
}

static void job_release(struct coord_store *s, struct coord_job *job)
{
	job->in_use = false;
	s->stats.jobs_in_flight--;
}

uint32_t coord_store_jobs_in_flight(const struct coord_store *s)
{
	return (uint32_t)s->stats.jobs_in_flight;
}

int coord_store_job_reserve(struct coord_store *s, uint32_t *id)
{
	struct coord_job *job = job_take(s, id);

	if (!job)
		return -EBUSY;
	job->kind = COORD_JOB_NOOP;
	s->stats.jobs_in_flight--; /* not the store's: a drain does not wait for it */
	return 0;
}

void coord_store_job_unreserve(struct coord_store *s, uint32_t id)
{
	SEL_ASSERT(id < COORD_JOBS_MAX && s->jobs[id].in_use &&
		   s->jobs[id].kind == COORD_JOB_NOOP);
	s->jobs[id].in_use = false;
}

static uint32_t insert_node(struct coord_store *s, const struct coord_node_spec *spec,
			    int *err)
{
	uint32_t id;

	*err = coord_index_insert(&s->index, spec, &id);
	if (*err)
		return COORD_NONE;
	s->generation[id] = ++s->next_generation;
	s->used_ns[id] = sel_realtime_ns();
	if (s->pool_state)
		s->pool_state[id] = COORD_POOL_NONE;
	s->stats.records = s->index.node_count;
	return id;
}

/* A use of id: the most recently used, and young again for max-age. */
static void touch(struct coord_store *s, uint32_t id)
{
	coord_index_touch(&s->index, id);
	s->used_ns[id] = sel_realtime_ns();
}

static int compare_consumed(const void *a, const void *b)
{
	const struct rec_record_info *x = *(const struct rec_record_info *const *)a;
	const struct rec_record_info *y = *(const struct rec_record_info *const *)b;

	return x->key.consumed < y->key.consumed ? -1 : x->key.consumed > y->key.consumed;
}

int coord_store_load(struct coord_store *s, const struct rec_record_info *records,
		     size_t count)
{
	const struct rec_record_info **order = malloc((count ? count : 1) * sizeof(*order));
	int err = 0;

	if (!order)
		return -ENOMEM;
	/* Parents have smaller consumed counts (R-REC-6): insert them first. */
	for (size_t i = 0; i < count; i++)
		order[i] = &records[i];
	qsort(order, count, sizeof(*order), compare_consumed);
	for (size_t i = 0; i < count; i++) {
		const struct rec_record_info *r = order[i];
		struct coord_node_spec spec = {
			.key = r->key, .parent = r->parent.consumed ? &r->parent : NULL,
			.bucket = r->bucket, .first_page_index = r->first_page_index,
			.tail_page_count = r->tail_page_count, .bytes = r->file_bytes,
			.created_ns = r->created_ns, .state = COORD_READY,
			.row_present = r->row_present,
		};

		if (insert_node(s, &spec, &err) == COORD_NONE) {
			sel_warn("index: record at %" PRIu64 " tokens not loaded: %s",
				 r->key.consumed, sel_strerror(err));
			continue;
		}
		s->used_bytes += r->file_bytes;
	}
	/* The scan listed records oldest mtime first: that is the LRU order. */
	for (size_t i = 0; i < count; i++) {
		uint32_t id = coord_index_find(&s->index, &records[i].key);

		if (id != COORD_NONE) {
			coord_index_touch(&s->index, id);
			/* Its last use was its last write (seed 2.5). */
			s->used_ns[id] = records[i].mtime_ns;
		}
	}
	free(order);
	s->stats.scanned_records = count;
	s->stats.disk_bytes = s->used_bytes;
	return 0;
}

bool coord_store_lookup(struct coord_store *s, const struct rec_history *h,
			uint64_t resident, struct sel_hit *hit)
{
	struct coord_lookup *lk = &s->lookup;
	uint32_t endpoint;

	s->stats.lookups++;
	if (s->limit_bytes == 0 || !coord_index_lookup(&s->index, h, resident, lk))
		return false;
	endpoint = lk->chain[lk->chain_count - 1];
	*hit = (struct sel_hit){
		.consumed = lk->consumed, .page_count = lk->page_count,
		.skip_pages = lk->skip_pages, .resident = resident,
		.endpoint = endpoint, .generation = s->generation[endpoint],
	};
	s->stats.hits++;
	s->stats.reused_tokens += lk->consumed - resident;
	return true;
}

/*
 * Drops the queued HOLDS changes and starts a re-announce (R-POOL-71): a
 * reset, then every holdable record and offered GPU checkpoint.
 */
static void pool_holds_resync_start(struct coord_store *s)
{
	s->pool_holds_count = 0;
	s->pool_holds_resync = true;
	s->pool_holds_reset_sent = false;
	s->pool_holds_cursor = 0;
	s->gpu_holds_cursor = 0;
}

int coord_store_set_pool_lookups(struct coord_store *s, const struct coord_pool_ops *ops,
				 uint64_t grace_ns)
{
	bool allocated;

	/* What a failure leaves allocated goes with the store (coord_store_destroy). */
	if (!s->pool_keys)
		s->pool_keys = calloc(COORD_POOL_CANDIDATES_MAX, sizeof(*s->pool_keys));
	if (!s->pool_answer)
		s->pool_answer = calloc(POOL_CHAIN_RECORDS_MAX, sizeof(*s->pool_answer));
	allocated = s->pool_keys && s->pool_answer;
	for (uint32_t i = 0; i < COORD_POOL_HITS_MAX; i++) {
		if (!s->pool_hits[i].chain)
			s->pool_hits[i].chain = calloc(POOL_CHAIN_RECORDS_MAX,
						       sizeof(*s->pool_hits[i].chain));
		allocated = allocated && s->pool_hits[i].chain;
	}
	if (ops->hold && !s->pool_holds)
		s->pool_holds = calloc(COORD_POOL_HOLDS_QUEUE_MAX, sizeof(*s->pool_holds));
	if (ops->hold && !s->pool_hold_keys)
		s->pool_hold_keys = calloc(POOL_HOLDS_KEYS_MAX, sizeof(*s->pool_hold_keys));
	if (!allocated || (ops->hold && (!s->pool_holds || !s->pool_hold_keys)))
		return -ENOMEM;
	s->pool_ops = *ops;
	s->pool_grace_ns = grace_ns;
	/* R-POOL-71: a session (re)attached knows nothing of this instance */
	pool_holds_resync_start(s);
	s->pool_holds_resync = ops->hold != NULL;
	return 0;
}

static uint32_t gpu_hold_find_key(const struct coord_store *s, const struct rec_key *key);

/*
 * Queues key as held (add) or no longer (withdraw) for the session's next
 * HOLDS (R-POOL-71, R-POOL-77). A full queue gives way to a re-announce of
 * every record and offer.
 */
static void pool_hold_key(struct coord_store *s, const struct rec_key *key, bool add)
{
	uint32_t at;

	if (!s->pool_on || !s->pool_ops.hold || s->pool_holds_resync)
		return;
	if (s->pool_holds_count == COORD_POOL_HOLDS_QUEUE_MAX) {
		pool_holds_resync_start(s);
		return;
	}
	at = (s->pool_holds_head + s->pool_holds_count++) % COORD_POOL_HOLDS_QUEUE_MAX;
	s->pool_holds[at].key = *key;
	s->pool_holds[at].op = add ? COORD_POOL_HOLD_ADD : COORD_POOL_HOLD_WITHDRAW;
}

/*
 * Notes that node id (a committed record with its row) is held (add) or
 * no longer (withdraw).
 */
static void pool_hold_note(struct coord_store *s, uint32_t id, bool add)
{
	const struct rec_key *key = &coord_index_node(&s->index, id)->key;

	/* R-POOL-77: a key an offered GPU checkpoint holds stays announced */
	if (!add && gpu_hold_find_key(s, key) != COORD_NONE)
		return;
	pool_hold_key(s, key, add);
}

/* Whether node n is announced: committed, with its row (R-POOL-71). */
static bool pool_holdable(const struct coord_node *n)
{
	return n->in_use && n->state == COORD_READY && n->row_present;
}

/* The key node i announces in a re-announce, or NULL (pool_holds_sweep). */
static const struct rec_key *node_hold_key(const struct coord_store *s, uint32_t i)
{
	const struct coord_node *n = &s->index.nodes[i];

	return pool_holdable(n) ? &n->key : NULL;
}

/* The key offered GPU checkpoint slot i announces, or NULL (R-POOL-77). */
static const struct rec_key *gpu_hold_key(const struct coord_store *s, uint32_t i)
{
	return s->gpu_holds[i].used ? &s->gpu_holds[i].key : NULL;
}

/*
 * One re-announce pass over a table of end entries, from *cursor on: HOLDS
 * add frames of the keys key_at finds, while *frames is under
 * COORD_POOL_HOLDS_FRAMES_PER_POLL. Returns true once the pass reached end;
 * false while there is more, or when the session could not take a frame
 * (the same frame goes again at the next poll).
 */
static bool pool_holds_sweep(struct coord_store *s, uint32_t *cursor, uint32_t end,
			     const struct rec_key *(*key_at)(const struct coord_store *, uint32_t),
			     uint32_t *frames)
{
	while (*frames < COORD_POOL_HOLDS_FRAMES_PER_POLL && *cursor < end) {
		uint32_t n = 0, next = *cursor;

		for (; next < end && n < POOL_HOLDS_KEYS_MAX; next++) {
			const struct rec_key *key = key_at(s, next);

			if (key)
				s->pool_hold_keys[n++] = *key;
		}
		if (n && s->pool_ops.hold(s->pool_ops.ctx, COORD_POOL_HOLD_ADD, s->pool_hold_keys,
					  n) != 0)
			return false;
		*cursor = next;
		(*frames)++;
	}
	return *cursor >= end;
}

/*
 * Sends what changed since the last HOLDS, at most
 * COORD_POOL_HOLDS_FRAMES_PER_POLL frames: a re-announce first (reset,
 * then every holdable record from the cursor on), then the queue in order.
 * A frame the session cannot take now is sent again at the next poll.
 */
static void pool_holds_flush(struct coord_store *s)
{
	struct coord_index *ix = &s->index;
	uint32_t frames = 0;

	if (!s->pool_ops.hold)
		return;
	if (s->pool_holds_resync) {
		if (!s->pool_holds_reset_sent) {
			if (s->pool_ops.hold(s->pool_ops.ctx, COORD_POOL_HOLD_RESET, NULL, 0) != 0)
				return;
			s->pool_holds_reset_sent = true;
			frames++;
		}
		if (!pool_holds_sweep(s, &s->pool_holds_cursor, ix->nodes_max, node_hold_key,
				      &frames))
			return;
		/* then the GPU checkpoints the engine offered (R-POOL-77) */
		if (s->gpu_holds && !pool_holds_sweep(s, &s->gpu_holds_cursor, POOL_GPU_HOLDS_MAX,
						      gpu_hold_key, &frames))
			return;
		s->pool_holds_resync = false;
	}
	while (frames < COORD_POOL_HOLDS_FRAMES_PER_POLL && s->pool_holds_count) {
		uint8_t op = s->pool_holds[s->pool_holds_head].op;
		uint32_t n = 0;

		/* a run of one op, in queue order */
		while (n < s->pool_holds_count && n < POOL_HOLDS_KEYS_MAX &&
		       s->pool_holds[(s->pool_holds_head + n) % COORD_POOL_HOLDS_QUEUE_MAX].op == op) {
			s->pool_hold_keys[n] =
				s->pool_holds[(s->pool_holds_head + n) % COORD_POOL_HOLDS_QUEUE_MAX].key;
			n++;
		}
		if (s->pool_ops.hold(s->pool_ops.ctx, op, s->pool_hold_keys, n) != 0)
			return;
		s->pool_holds_head = (s->pool_holds_head + n) % COORD_POOL_HOLDS_QUEUE_MAX;
		s->pool_holds_count -= n;
		frames++;
	}
}

/*
 * Sends h's candidate keys longer than floor to the pool, longest first:
 * its whole length, then each page boundary (where engines publish), at
 * most COORD_POOL_CANDIDATES_MAX. Leaves the ticket NONE when there is no
 * candidate or no room for another ticket (a later lookup asks again).
 */
static void pool_ask(struct coord_store *s, const struct rec_history *h, uint64_t floor,
		     struct coord_pool_ticket *t)
{
	uint64_t pt = s->geometry.page_tokens, c = h->token_count;
	uint32_t count = 0, slot;

	for (slot = 0; slot < COORD_POOL_TICKETS_MAX && s->pool_tickets[slot].live; slot++)
		;
	if (slot == COORD_POOL_TICKETS_MAX)
		return;
	while (c > floor && count < COORD_POOL_CANDIDATES_MAX) {
		rec_history_key_at(h, c, &s->pool_keys[count++]);
		c = c % pt ? c - c % pt : c - pt;
	}
	if (count == 0 || s->pool_ops.lookup(s->pool_ops.ctx, s->pool_keys, count, &t->id) != 0)
		return;
	s->pool_tickets[slot].id = t->id;
	s->pool_tickets[slot].asked_ns = sel_monotonic_ns();
	s->pool_tickets[slot].live = true;
	t->slot = slot;
	t->state = COORD_TICKET_ASKED;
}

/* Lookups past their grace period stop waiting: the session forgets them. */
static void pool_reap_tickets(struct coord_store *s)
{
	uint64_t now;

	if (!s->pool_ops.lookup)
		return;
	now = sel_monotonic_ns();
	for (uint32_t i = 0; i < COORD_POOL_TICKETS_MAX; i++) {
		if (s->pool_tickets[i].live &&
		    now - s->pool_tickets[i].asked_ns > s->pool_grace_ns) {
			s->pool_ops.forget(s->pool_ops.ctx, s->pool_tickets[i].id);
			s->pool_tickets[i].live = false;
		}
	}
}

/*
 * The pool's chain (count records, root first, in s->pool_answer) as a hit
 * past resident, remembered for sel_fetch; false when it restores nothing
 * beyond floor or does not fit (a last record without its row, pages that
 * do not follow).
 */
static bool pool_hit(struct coord_store *s, uint32_t count, uint64_t resident, uint64_t floor,
		     struct sel_hit *hit)
{
	const struct coord_pool_record *chain = s->pool_answer;
	uint64_t pt = s->geometry.page_tokens, stop = 0, total = 0;
	uint32_t start = 0, slot;

	if (count == 0 || chain[count - 1].key.consumed <= floor || !chain[count - 1].row)
		return false;
	for (uint32_t i = 0; i < count; i++) {
		if (chain[i].key.consumed <= resident) {
			start = i + 1;
			stop = chain[i].key.consumed;
		}
	}
	if (chain[start].first_page_index != stop / pt)
		return false;
	for (uint32_t i = start; i < count; i++)
		total += chain[i].tail_page_count;
	if (total < resident / pt - stop / pt || total > UINT32_MAX)
		return false;
	slot = s->pool_hit_next++ % COORD_POOL_HITS_MAX;
	s->pool_hits[slot].generation = ++s->next_generation;
	s->pool_hits[slot].chain_count = count;
	s->pool_hits[slot].start = start;
	memcpy(s->pool_hits[slot].chain, chain, count * sizeof(*chain));
	*hit = (struct sel_hit){
		.consumed = chain[count - 1].key.consumed, .resident = resident,
		.skip_pages = (uint32_t)(resident / pt - stop / pt),
		.endpoint = COORD_POOL_HIT_BIT | slot,
		.generation = s->pool_hits[slot].generation,
	};
	hit->page_count = (uint32_t)total - hit->skip_pages;
	return true;
}

bool coord_store_lookup_pool(struct coord_store *s, const struct rec_history *h,
			     uint64_t resident, struct coord_pool_ticket *t, struct sel_hit *hit)
{
	bool local = coord_store_lookup(s, h, resident, hit);
	uint64_t floor = local ? hit->consumed : resident;
	struct sel_hit found;
	uint32_t count = 0;
	int ret;

	if (!s->pool_on || !s->pool_ops.lookup || s->stopped)
		return local;
	if (t->state == COORD_TICKET_NONE) {
		pool_ask(s, h, floor, t);
		return local;
	}
	if (t->state != COORD_TICKET_ASKED)
		return local;
	/* Reaped past its grace period, or its slot taken since: no longer waited for. */
	if (!s->pool_tickets[t->slot].live || s->pool_tickets[t->slot].id != t->id) {
		t->state = COORD_TICKET_DONE;
		return local;
	}
	ret = s->pool_ops.answer(s->pool_ops.ctx, t->id, s->pool_answer, POOL_CHAIN_RECORDS_MAX,
				 &count);
	if (ret == 0)
		return local;
	s->pool_tickets[t->slot].live = false;
	t->state = COORD_TICKET_DONE;
	if (ret < 0 || !pool_hit(s, count, resident, floor, &found))
		return local;
	/* Counted once: as the pool's hit, in place of the local one. */
	if (local)
		s->stats.reused_tokens -= hit->consumed - resident;
	else
		s->stats.hits++;
	s->stats.reused_tokens += found.consumed - resident;
	s->stats.pool_hits++;
	*hit = found;
	return true;
}

bool coord_store_lookup_pending(const struct coord_store *s, const struct coord_pool_ticket *t)
{
	return t->state == COORD_TICKET_ASKED && s->pool_on && t->slot < COORD_POOL_TICKETS_MAX &&
	       s->pool_tickets[t->slot].live && s->pool_tickets[t->slot].id == t->id &&
	       sel_monotonic_ns() - s->pool_tickets[t->slot].asked_ns <= s->pool_grace_ns;
}

int coord_store_touch(struct coord_store *s, const struct rec_history *h, uint64_t consumed)
{
	struct rec_key key;
	uint32_t id;

	if (consumed == 0 || consumed > h->token_count)
		return -EINVAL;
	rec_history_key_at(h, consumed, &key);
	id = coord_index_find(&s->index, &key);
	if (id == COORD_NONE || coord_index_node(&s->index, id)->state != COORD_READY)
		return SEL_ENOTFOUND;
	/* The record, then each ancestor: the root ends most recent, and
	 * every record of the chain is newer than anything untouched. */
	for (; id != COORD_NONE; id = coord_index_node(&s->index, id)->parent_id) {
		touch(s, id);
		coord_warm_touch(&s->warm, id);
	}
	return 0;
}

/*
 * A warm use of id: it, then each ancestor, becomes the most recently
 * used, so warm eviction takes a chain's newest records before the
 * prefix every one of them needs (a chain is warm only when all of it is).
 */
static void warm_touch_chain(struct coord_store *s, uint32_t id)
{
	for (; id != COORD_NONE; id = coord_index_node(&s->index, id)->parent_id)
		coord_warm_touch(&s->warm, id);
}

static void drop_bare_page_only(struct coord_store *s, uint32_t id);

/*
 * Node id's warm slots are given back (its warm copy goes with a job
 * submitted now); a dirty record goes unwritten with them, counted.
 */
static void warm_forget(struct coord_store *s, uint32_t id)
{
	if (coord_warm_dirty_state(&s->warm, id) != COORD_WARM_CLEAN) {
		coord_warm_set_clean(&s->warm, &s->index, id);
		s->stats.warm_dirty_dropped++;
	}
	coord_warm_forget(&s->warm, id);
}

/*
 * job, a background job just submitted, gives slots warm slots back on
 * each rank only when it runs there, while the count has them free from
 * now on. A fetch is taken before every queued background job, so until
 * job completes they are held for read-throughs (plan_read_through).
 */
static void warm_releasing_add(struct coord_store *s, struct coord_job *job, uint32_t slots)
{
	job->warm_releasing += slots;
	s->warm.slots_releasing += slots;
}

/* Submits an unlink (leaf) or a truncate (compaction) of victim. */
static int reclaim(struct coord_store *s, uint32_t victim, bool compact)
{
	struct coord_node *n = coord_index_node(&s->index, victim);
	struct coord_job *job;
	uint32_t id, held;
	int ret;

	job = job_take(s, &id);
	if (!job)
		return SEL_EQUEUEFULL;
	job->key = n->key;
	if (compact) {
		job->kind = COORD_JOB_TRUNCATE;
		job->bytes = s->geometry.row_record_bytes;
		ret = s->jobs_ops.truncate(s->jobs_ops.ctx, id, &n->key);
	} else {
		job->kind = COORD_JOB_UNLINK;
		job->bytes = n->bytes;
		ret = s->jobs_ops.unlink(s->jobs_ops.ctx, id, &n->key);
	}
	if (ret) {
		job_release(s, job);
		return ret;
	}
	/* Charged until the job finishes; no longer usable from now on. */
	s->reclaiming_bytes += job->bytes;
	if (pool_holdable(n))
		pool_hold_note(s, victim, false); /* its row or the whole record goes */
	/* Every rank gives the warm slots back when it runs the job. */
	held = coord_warm_slots_of(&s->warm, victim);
	if (compact) {
		coord_warm_drop_row(&s->warm, victim, n->tail_page_count);
		warm_releasing_add(s, job, held - coord_warm_slots_of(&s->warm, victim));
		n->row_present = false;
		n->bytes -= job->bytes;
		s->stats.truncations++;
	} else {
		uint32_t parent = n->parent_id;

		/* Before the node goes: a dirty one's ancestors are walked. */
		warm_forget(s, victim);
		warm_releasing_add(s, job, held);
		/* A condemned record is dropped, not evicted (drop_condemned). */
		if (n->state == COORD_CONDEMNED)
			s->condemned_count--;
		else if (!s->expiring)
			s->stats.evictions++;
		coord_index_remove(&s->index, victim);
		s->stats.records = s->index.node_count;
		s->stats.unlinks++;
		drop_bare_page_only(s, parent);
	}
	return 0;
}

static bool bare_page_only(const struct coord_store *s, const struct coord_node *n)
{
	return n->child_count == 0 && !n->row_present && n->pins == 0 &&
	       n->state == COORD_READY && !may_parent_held(s, n);
}

/*
 * A page-only record with no child and no pin can neither match a lookup
 * nor supply a chain: it goes (seed 2.3), wherever its last child or its
 * last pin has just left it (an eviction, a failed store, a publication
 * answered Retry, a rewrite undone). An unlink that cannot be submitted
 * now (the job table or an engine's queue is full) is left to
 * drop_bare_pending, so the record never stays charged for good.
 */
static void drop_bare_page_only(struct coord_store *s, uint32_t id)
{
	if (id != COORD_NONE && bare_page_only(s, coord_index_node(&s->index, id)) &&
	    reclaim(s, id, false) != 0)
		s->bare_pending = true;
}

/*
 * Unlinks the bare page-only records whose unlink was refused before.
 * Walks the whole index, so it runs only while one may be left and after a
 * poll took completions (what refused it then has room); a refusal leaves
 * the rest for the next such poll.
 */
static void drop_bare_pending(struct coord_store *s)
{
	struct coord_index *ix = &s->index;

	if (!s->bare_pending || s->stopped)
		return;
	for (uint32_t i = 0; i < ix->nodes_max; i++)
		if (ix->nodes[i].in_use && bare_page_only(s, &ix->nodes[i]) &&
		    reclaim(s, i, false) != 0)
			return;
	s->bare_pending = false;
}

static bool evictable(const struct coord_node *node, void *ctx)
{
	struct coord_store *s = ctx;
	uint32_t id = (uint32_t)(node - s->index.nodes);

	/*
	 * The disk store evicts any unpinned ready node (seed 2.3), but for a
	 * leaf that may be a held key's parent (compacting one unlinks
	 * nothing), a dirty record, whose only copy is warm, and a dirty
	 * record's ancestor (a page-only parent's row).
	 */
	if (node->child_count == 0 && may_parent_held(s, node))
		return false;
	return coord_warm_dirty_state(&s->warm, id) == COORD_WARM_CLEAN &&
	       coord_warm_dirty_below(&s->warm, id) == 0;
}

/* Whether a store found a disk full less than ns ago. */
static bool disk_full_within(const struct coord_store *s, uint64_t ns)
{
	return s->disk_full_ns && sel_monotonic_ns() - s->disk_full_ns < ns;
}

/*
 * The bytes the records may take now: the limit, or less for a while after
 * a store found a disk full (COORD_DISK_FULL_HOLD_NS).
 */
static uint64_t room_limit(const struct coord_store *s)
{
	if (disk_full_within(s, COORD_DISK_FULL_HOLD_NS) && s->disk_full_bytes < s->limit_bytes)
		return s->disk_full_bytes;
	return s->limit_bytes;
}

/*
 * A store failed on a full disk (on some rank) with the records holding
 * used_bytes without it: stores wait for the backoff, and for the hold
 * the records take no more than that (or than a lower figure found within
 * it), so older ones make room for new.
 */
static void note_disk_full(struct coord_store *s)
{
	bool holding = disk_full_within(s, COORD_DISK_FULL_HOLD_NS);

	if (!holding)
		sel_warn("a disk is full with %" PRIu64 " bytes of records held (limit %" PRIu64
			 "): for %u s, new records evict the least recently used to stay "
			 "within that", s->used_bytes, s->limit_bytes,
			 (unsigned)(COORD_DISK_FULL_HOLD_NS / 1000000000ull));
	if (!holding || s->used_bytes < s->disk_full_bytes)
		s->disk_full_bytes = s->used_bytes;
	s->disk_full_ns = sel_monotonic_ns();
}

/* Evicts until need fits beside what stays; false when it cannot. */
static bool make_room(struct coord_store *s, uint64_t need)
{
	uint64_t limit = room_limit(s);

	while (s->used_bytes - s->reclaiming_bytes + need > limit) {
		bool compact = false;
		uint32_t victim = coord_index_victim(&s->index, evictable, s, &compact);

		if (victim == COORD_NONE && limit < s->limit_bytes)
			/*
			 * Nothing of ours left to evict for a full disk: once the
			 * evictions are done, the store is tried within the limit.
			 */
			return s->reclaiming_bytes == 0 && s->used_bytes + need <= s->limit_bytes;
		if (victim == COORD_NONE || reclaim(s, victim, compact) != 0)
			return false;
	}
	/* Room is coming, but pending unlinks still hold it until they finish. */
	return s->used_bytes + need <= limit;
}

/*
 * Evicts leaves until the index has a free node for one more record (a
 * leaf leaves the index as its unlink is submitted); false when it cannot.
 * Compaction frees no node, so it is no use here.
 */
static bool make_node_room(struct coord_store *s)
{
	while (s->index.node_count >= s->index.nodes_max) {
		bool compact = false;
		uint32_t victim = coord_index_victim(&s->index, evictable, s, &compact);

		if (victim == COORD_NONE || compact || reclaim(s, victim, false) != 0)
			return false;
	}
	return true;
}

static void count_outcome(struct coord_store *s, enum sel_outcome outcome)
{
	switch (outcome) {
	case SEL_QUEUED: s->stats.published_queued++; break;
	case SEL_PRESENT: s->stats.published_present++; break;
	case SEL_RETRY: s->stats.published_retry++; break;
	case SEL_OVERSIZE: s->stats.published_oversize++; break;
	}
}

/* The parent a publication attaches to, or COORD_NONE for a root record. */
static int find_parent(struct coord_store *s, const struct rec_history *h,
		       const struct sel_publication *pub, uint32_t *parent,
		       struct rec_key *parent_key)
{
	*parent = COORD_NONE;
	if (pub->parent_consumed == 0)
		return 0;
	rec_history_key_at(h, pub->parent_consumed, parent_key);
	*parent = coord_index_find(&s->index, parent_key);
	/* A condemned parent is on its way out: absent as far as a child goes. */
	if (*parent != COORD_NONE &&
	    coord_index_node(&s->index, *parent)->state == COORD_CONDEMNED)
		*parent = COORD_NONE;
	if (*parent == COORD_NONE)
		return 0; /* absent: a root record holding its whole chain */
	/* A parent still being written may yet fail: come back when it is done. */
	return coord_index_node(&s->index, *parent)->state == COORD_READY ? 0 : SEL_RETRY;
}

/*
 * The fewest bytes a child of parent can share the disk with: its chain's
 * records, which every restore through it needs (seed 2.2). The parent
 * keeps its row while the child is written (it is pinned); an ancestor
 * above may yet be compacted to its pages.
 */
static uint64_t required_ancestor_bytes(struct coord_store *s, uint32_t parent,
					uint32_t *count)
{
	uint64_t bytes = 0;

	*count = 0;
	for (uint32_t id = parent; id != COORD_NONE;) {
		const struct coord_node *n = coord_index_node(&s->index, id);

		(*count)++;
		bytes += n->bytes;
		if (id != parent && n->row_present)
			bytes -= s->geometry.row_record_bytes;
		id = n->parent_id;
	}
	return bytes;
}

/*
 * Submits node id's write from its warm slots (a dirty record whose parent
 * is on disk): the file is written on every rank, the warm copy stays.
 * The record is pinned until the write completes. Returns 0 or why not.
 */
static int submit_warm_write(struct coord_store *s, uint32_t id)
{
	struct coord_node *n = coord_index_node(&s->index, id);
	struct rec_header header;
	struct shard_store_job store = { .header = &header, .page_ids = s->zero_ids,
					 .warm = SHARD_STORE_WARM_WRITE,
					 /* a rank that fails keeps its warm copy: no unlink */
					 .replaces = true };
	struct coord_job *job;
	uint32_t job_id;
	int err;

	err = rec_header_init(&header, &s->geometry, &s->namespace_id, &n->key,
			      n->parent.consumed ? &n->parent : NULL, &n->bucket,
			      n->first_page_index, n->tail_page_count, n->created_ns);
	if (err)
		return err;
	job = job_take(s, &job_id);
	if (!job)
		return SEL_EQUEUEFULL;
	job->kind = COORD_JOB_WARM_WRITE;
	job->node = id;
	job->key = n->key;
	job->bytes = 0; /* charged since its store */
	err = s->jobs_ops.store(s->jobs_ops.ctx, job_id, &store);
	if (err) {
		job_release(s, job);
		return err;
	}
	coord_index_pin(&s->index, id);
	coord_warm_set_writing(&s->warm, id);
	s->warm_writes_in_flight++;
	return 0;
}

/* Whether writes from warm may be submitted now (none failed just now). */
static bool warm_writes_allowed(const struct coord_store *s)
{
	return !s->stopped && s->warm_writes_in_flight < COORD_WARM_WRITES_MAX &&
	       (s->warm_write_retry_ns == 0 || sel_monotonic_ns() >= s->warm_write_retry_ns);
}

uint32_t coord_store_write_dirty(struct coord_store *s)
{
	struct coord_warm *w = &s->warm;
	uint32_t id, from = w->list.head;

	/* A write keeps its record listed: go on after it, not from the head. */
	while (w->dirty_records > s->warm_writes_in_flight && warm_writes_allowed(s) &&
	       (id = coord_warm_dirty_victim(w, &s->index, from)) != COORD_NONE) {
		from = w->links[id].next;
		if (submit_warm_write(s, id) != 0)
			break;
	}
	return w->dirty_records - s->warm_writes_in_flight;
}

/*
 * Starts the write of id's oldest dirty ancestor-or-self whose parent is
 * on disk (the first of the chain's files still to write), unless it is
 * being written already.
 */
static void write_dirty_chain(struct coord_store *s, uint32_t id)
{
	uint32_t first = COORD_NONE;

	for (; id != COORD_NONE && coord_warm_dirty_state(&s->warm, id) != COORD_WARM_CLEAN;
	     id = coord_index_node(&s->index, id)->parent_id)
		first = id;
	if (first != COORD_NONE && coord_warm_dirty_state(&s->warm, first) == COORD_WARM_DIRTY &&
	    warm_writes_allowed(s) && submit_warm_write(s, first) == 0)
		s->stats.warm_spills++;
}

enum warm_room {
	WARM_ROOM,  /* the slots are free: the store goes warm */
	WARM_COLD,  /* the warm tier cannot take it: through staging */
	WARM_RETRY, /* dirty records hold the slots: writes started, Retry */
};

/*
 * Drops node victim's warm copy on every rank (a warm drop job; its file
 * stays) and gives its slots back in the count. Returns 0, or why not.
 */
static int warm_drop_submit(struct coord_store *s, uint32_t victim)
{
	struct coord_job *job;
	uint32_t id;
	int ret;

	if (!(job = job_take(s, &id)))
		return SEL_EQUEUEFULL;
	job->kind = COORD_JOB_WARM_DROP;
	job->key = coord_index_node(&s->index, victim)->key;
	job->bytes = 0;
	ret = s->jobs_ops.warm_drop(s->jobs_ops.ctx, id, &job->key);
	if (ret) {
		job_release(s, job);
		return ret;
	}
	coord_warm_forget(&s->warm, victim);
	return 0;
}

/*
 * Frees warm slots for a store of need slots: the least recently used
 * warm records that are on disk and unpinned are dropped on every rank
 * (their files stay), until need slots are free. Where dirty records hold
 * what is missing, the least recently used of them are written (a spill)
 * and the store answers Retry, so their slots can go once on disk. Cold,
 * and the store goes through staging, when the warm tier cannot take it
 * otherwise: larger than the tier, too few records it may drop (stores in
 * flight hold the rest), or no job to drop one with.
 *
 * for_store: a store's room, which may start spills of dirty records and
 * answer Retry; a fetch's read-through (false) only drops clean records
 * and otherwise streams cold.
 */
static enum warm_room make_warm_room(struct coord_store *s, uint32_t need, bool for_store)
{
	struct coord_warm *w = &s->warm;

	if (!coord_warm_enabled(w) || !s->jobs_ops.warm_drop || need > w->slots_total)
		return WARM_COLD;
	/*
	 * Victims are taken in list order, each pass going on after the last
	 * (records it passed over stay unfit while it runs), so a store
	 * walks the list once, however many it drops.
	 */
	uint32_t from = w->list.head;

	while (w->slots_total - w->slots_used < need) {
		uint32_t victim = coord_warm_victim(w, &s->index, from);

		if (victim == COORD_NONE && w->dirty_records > 0 && for_store) {
			uint64_t coming = 0;

			/* Writes from warm already in flight free their slots first. */
			for (uint32_t j = 0; j < COORD_JOBS_MAX; j++)
				if (s->jobs[j].in_use && s->jobs[j].kind == COORD_JOB_WARM_WRITE)
					coming += w->slots[s->jobs[j].node];
			from = w->list.head;
			while (w->slots_total - w->slots_used + coming < need &&
			       warm_writes_allowed(s) &&
			       (victim = coord_warm_dirty_victim(w, &s->index, from)) != COORD_NONE &&
			       (from = w->links[victim].next, submit_warm_write(s, victim) == 0)) {
				coming += w->slots[victim];
				s->stats.warm_spills++;
			}
			s->stats.warm_retry_dirty++;
			return WARM_RETRY;
		}
		if (victim == COORD_NONE)
			return WARM_COLD;
		from = w->links[victim].next; /* before the drop unlists it */
		if (warm_drop_submit(s, victim) != 0)
			return WARM_COLD;
		w->evictions++;
	}
	return WARM_ROOM;
}

/* The warm slots record i of job's chain takes: its tail pages, the last one's row. */
static uint32_t read_slots(struct coord_store *s, const struct coord_job *job, uint32_t i)
{
	bool last = i + 1 == job->chain_count;

	return coord_index_node(&s->index, job->chain[i])->tail_page_count +
	       (last ? s->warm.row_slots : 0);
}

/*
 * The warm slots a fetch of job's chain, skipping skip pages, takes to
 * read its cold records through (docs/DESIGN.md section 6): each record
 * neither warm nor charged that it reads whole, its read_slots. Marks
 * them in job->read_charged.
 */
static uint64_t read_through_need(struct coord_store *s, struct coord_job *job, uint32_t skip)
{
	uint64_t before = 0, need = 0;

	memset(job->read_charged, 0, sizeof(job->read_charged));
	for (uint32_t i = 0; i < job->chain_count; i++) {
		const struct coord_node *n = coord_index_node(&s->index, job->chain[i]);
		bool last = i + 1 == job->chain_count;

		if (!coord_warm_charged(&s->warm, job->chain[i]) && before >= skip &&
		    (n->tail_page_count > 0 || last)) {
			need += read_slots(s, job, i);
			job->read_charged[i / 64] |= 1ull << (i % 64);
		}
		before += n->tail_page_count;
	}
	return need;
}

static bool read_charged(const struct coord_job *job, uint32_t i)
{
	return job->read_charged[i / 64] >> (i % 64) & 1;
}

/*
 * Whether a rewrite (publish_row) of a record of job's chain is in flight.
 * Each rank drops the record's warm copy as the rewrite begins there, on
 * the background lane, so a fetch may run before it on one rank (finding
 * the copy warm, reserving nothing) and after it on another: which ranks
 * hold the record once both ran is not known here.
 */
static bool chain_rewriting(const struct coord_store *s, const struct coord_job *job)
{
	for (uint32_t j = 0; j < COORD_JOBS_MAX; j++) {
		const struct coord_job *other = &s->jobs[j];

		if (!other->in_use || other->kind != COORD_JOB_STORE || !other->rewrite)
			continue;
		for (uint32_t i = 0; i < job->chain_count; i++)
			if (job->chain[i] == other->node)
				return true;
	}
	return false;
}

/*
 * Whether a fetch of job's chain (pinned, so its own warm records are no
 * victims) reads its cold records into warm slots: only where all of them
 * fit, making room by the warm LRU as a store does; a chain larger than
 * the tier, one that only pinned or writing records would make room for,
 * or one with a record whose rewrite is in flight, streams through
 * staging and stays cold.
 */
static bool plan_read_through(struct coord_store *s, struct coord_job *job, uint32_t skip)
{
	uint64_t need;

	if (!coord_warm_enabled(&s->warm) || job->warm || chain_rewriting(s, job))
		return false;
	/*
	 * The fetch runs on each rank before the background jobs queued there,
	 * so slots those jobs give back are no room for it yet.
	 */
	need = read_through_need(s, job, skip);
	if (need == 0 || need + s->warm.slots_releasing > s->warm.slots_total)
		return false;
	return make_warm_room(s, (uint32_t)need + s->warm.slots_releasing, false) == WARM_ROOM;
}

/* A read-through fetch was submitted: its records' slots are charged. */
static void read_through_charge(struct coord_store *s, const struct coord_job *job)
{
	for (uint32_t i = 0; i < job->chain_count; i++)
		if (read_charged(job, i))
			coord_warm_charge(&s->warm, job->chain[i], read_slots(s, job, i));
}

/*
 * A read-through fetch finished: on success its records are warm on every
 * rank (listed, most recent); on a failure, the ranks where it succeeded
 * hold them, so they are dropped on every rank (where no drop can be
 * sent, listed anyway: the count then holds more than some rank does,
 * never less).
 */
static void read_through_settle(struct coord_store *s, const struct coord_job *job,
				const struct shard_completion *c)
{
	struct coord_warm *w = &s->warm;

	for (uint32_t i = 0; i < job->chain_count; i++) {
		uint32_t id = job->chain[i];

		if (!read_charged(job, i) || !coord_warm_charged(w, id) || w->listed[id])
			continue;
		if (!c->result) {
			w->read_throughs++;
			w->read_through_bytes += (uint64_t)w->slots[id] * w->slot_bytes;
			coord_warm_ready(w, id);
		} else if (warm_drop_submit(s, id) != 0) {
			coord_warm_ready(w, id);
		}
	}
	if (c->result)
		w->read_failures++;
}

static int submit_store(struct coord_store *s, const struct rec_history *h,
			const struct sel_publication *pub, const struct rec_key *key,
			uint32_t parent, const struct rec_key *parent_key, uint64_t need)
{
	const struct rec_geometry *g = &s->geometry;
	uint32_t first = parent == COORD_NONE ? 0 :
			 (uint32_t)(parent_key->consumed / g->page_tokens);
	uint32_t tail = (uint32_t)(pub->consumed / g->page_tokens) - first, id;
	struct coord_node_spec spec = {
		.key = *key, .parent = parent == COORD_NONE ? NULL : parent_key,
		.bucket = *rec_history_bucket(h, pub->consumed), .first_page_index = first,
		.tail_page_count = tail, .bytes = need, .created_ns = sel_realtime_ns(),
		.state = COORD_WRITING, .row_present = true,
		/* key and parent_key are both h's: the link is genuine */
		.parent_proven = parent != COORD_NONE,
	};
	struct rec_header header;
	struct shard_store_job store = { .header = &header, .page_ids = pub->page_ids + first,
					 .state_slot = pub->state_slot };
	enum warm_room room;
	struct coord_job *job;
	int err;

	err = rec_header_init(&header, g, &s->namespace_id, key, spec.parent, &spec.bucket,
			      first, tail, spec.created_ns);
	if (err)
		return err;
	job = job_take(s, &id);
	if (!job)
		return SEL_RETRY;
	job->kind = COORD_JOB_STORE;
	job->checkpoint = pub->checkpoint;
	job->bytes = need;
	job->node = insert_node(s, &spec, &err);
	if (job->node == COORD_NONE) {
		job_release(s, job);
		return err == SEL_EQUEUEFULL ? SEL_RETRY : err;
	}
	job->parent = parent;
	if (parent != COORD_NONE)
		coord_index_pin(&s->index, parent);
	room = make_warm_room(s, tail + s->warm.row_slots, true);
	if (room == WARM_ROOM)
		/*
		 * Restorable once warm, its file written after. A parent that is
		 * not warm is on disk (clean), and keeps its file while this
		 * child is there: only leaves are unlinked.
		 */
		store.warm = SHARD_STORE_WARM_ONLY;
	/*
	 * A file reaches the disk only after its parent's (R-DIR-6 deletes a
	 * child whose parent's file is missing): a store that writes its file
	 * now waits for a dirty parent's write, started here.
	 */
	if (room == WARM_RETRY ||
	    (store.warm != SHARD_STORE_WARM_ONLY &&
	     coord_warm_dirty_state(&s->warm, parent) != COORD_WARM_CLEAN)) {
		if (room != WARM_RETRY)
			write_dirty_chain(s, parent);
		err = SEL_EQUEUEFULL;
	} else {
		err = s->jobs_ops.store(s->jobs_ops.ctx, id, &store);
	}
	if (err) {
		if (parent != COORD_NONE)
			coord_index_unpin(&s->index, parent);
		coord_index_remove(&s->index, job->node);
		s->stats.records = s->index.node_count;
		job_release(s, job);
		return err == SEL_EQUEUEFULL ? SEL_RETRY : err;
	}
	s->used_bytes += need;
	job->warm = store.warm != SHARD_STORE_COLD;
	job->warm_only = store.warm == SHARD_STORE_WARM_ONLY;
	if (job->warm)
		coord_warm_charge(&s->warm, job->node, tail + s->warm.row_slots);
	return 0;
}

static void condemn(struct coord_store *s, struct coord_node *n);
static void drop_condemned(struct coord_store *s);

/*
 * A READY record whose row was dropped (its only child
 * committed) can supply pages to a chain but cannot be restored at its own
 * endpoint, so it is not Present: its publication rewrites the record
 * whole, with the same parent and pages and the row, replacing the
 * page-only file on every rank (R-WRITE-4). The record stays usable for
 * its children meanwhile, pinned against eviction; a second publication
 * while that runs answers Retry. The new header keeps the record's
 * creation time: should the rewrite fail on some ranks, each rank holds the
 * old file or the new one, and only equal headers let the undo's truncate,
 * or the agreement at the next start, keep the record (R-AGREE-1).
 */
static int publish_row(struct coord_store *s, const struct sel_publication *pub,
		       uint32_t existing, enum sel_outcome *outcome)
{
	struct coord_node *n = coord_index_node(&s->index, existing);
	uint64_t need = rec_geometry_file_bytes(&s->geometry, n->tail_page_count, true);
	struct rec_header header;
	struct shard_store_job store = { .header = &header,
					 .page_ids = pub->page_ids + n->first_page_index,
					 .state_slot = pub->state_slot, .replaces = true };
	struct coord_job *job;
	uint32_t id;
	int err;

	*outcome = SEL_RETRY;
	for (uint32_t i = 0; i < COORD_JOBS_MAX; i++)
		if (s->jobs[i].in_use && s->jobs[i].rewrite && s->jobs[i].node == existing)
			return 0;
	/*
	 * The rewrite replaces the file its dirty descendants will name as
	 * their parent's: they are written first.
	 */
	if (coord_warm_dirty_below(&s->warm, existing) > 0) {
		coord_store_write_dirty(s);
		return 0;
	}
	err = rec_header_init(&header, &s->geometry, &s->namespace_id, &n->key,
			      n->parent.consumed ? &n->parent : NULL, &n->bucket,
			      n->first_page_index, n->tail_page_count, n->created_ns);
	if (err)
		return err;
	coord_index_pin(&s->index, existing); /* not a victim of its own room */
	if (need > s->limit_bytes) {
		*outcome = SEL_OVERSIZE;
	} else if (!disk_full_within(s, COORD_DISK_FULL_BACKOFF_NS) && make_room(s, need) &&
		   (job = job_take(s, &id)) != NULL) {
		job->kind = COORD_JOB_STORE;
		job->rewrite = true;
		job->checkpoint = pub->checkpoint;
		job->bytes = need;
		job->node = existing;
		err = s->jobs_ops.store(s->jobs_ops.ctx, id, &store);
		if (err == 0) {
			/* Every rank drops its warm copy as the store begins: cold now. */
			warm_releasing_add(s, job, coord_warm_slots_of(&s->warm, existing));
			warm_forget(s, existing);
			s->used_bytes += need;
			*outcome = SEL_QUEUED;
			return 0; /* the pin goes when the job completes */
		}
		job_release(s, job);
	}
	coord_index_unpin(&s->index, existing);
	drop_bare_page_only(s, existing); /* make_room took its last child */
	if (err && err != SEL_EQUEUEFULL)
		return err; /* the engine refused it: not a matter of time */
	return 0;
}

int coord_store_publish(struct coord_store *s, const struct rec_history *h,
			const struct sel_publication *pub, enum sel_outcome *outcome)
{
	const struct rec_geometry *g = &s->geometry;
	struct rec_key key, parent_key = { 0 };
	uint32_t existing, parent;
	uint64_t need;
	int ret;

	if (s->stopped)
		return SEL_ESTOPPED;
	if (pub->consumed == 0 || pub->consumed > h->token_count ||
	    pub->parent_consumed >= pub->consumed || !pub->page_ids ||
	    pub->state_slot >= g->row_count ||
	    pub->consumed / g->page_tokens > g->page_count)
		return -EINVAL;
	rec_history_key_at(h, pub->consumed, &key);
	existing = coord_index_find(&s->index, &key);
	if (s->limit_bytes == 0) {
		*outcome = SEL_OVERSIZE;
	} else if (existing == COORD_NONE && held_unread(s, &key)) {
		*outcome = SEL_RETRY;
	} else if (existing != COORD_NONE &&
		   coord_index_node(&s->index, existing)->state == COORD_READY &&
		   !coord_index_node(&s->index, existing)->row_present) {
		/* Present needs the row a restore at this endpoint reads. */
		ret = publish_row(s, pub, existing, outcome);
		if (ret)
			return ret;
	} else if (existing != COORD_NONE) {
		/*
		 * Dedupe: a committed copy is Present when a restore at this
		 * endpoint would succeed (section 5); one in flight, or on a
		 * chain not settled yet, retry later. A copy whose chain no
		 * restore can use (a parent link naming another history's
		 * record) is dropped, so the checkpoint is stored again.
		 */
		struct coord_node *n = coord_index_node(&s->index, existing);
		enum coord_chain chain = n->state == COORD_READY ?
			coord_index_chain(&s->index, h, existing, &s->lookup) : COORD_CHAIN_UNSETTLED;

		*outcome = chain == COORD_CHAIN_OK ? SEL_PRESENT : SEL_RETRY;
		if (chain == COORD_CHAIN_OK)
			touch(s, existing);
		if (chain == COORD_CHAIN_BROKEN) {
			char name[REC_FILE_NAME_BYTES];

			rec_file_name(name, &n->key);
			sel_warn("%s: its chain cannot be restored (a parent link that is not "
				 "this history's): dropped on every rank, to be stored again", name);
			condemn(s, n);
			drop_condemned(s);
		}
	} else if ((ret = find_parent(s, h, pub, &parent, &parent_key)) != 0) {
		*outcome = SEL_RETRY;
	} else {
		uint32_t first = parent == COORD_NONE ? 0 :
				 (uint32_t)(parent_key.consumed / g->page_tokens);
		uint64_t ancestor_bytes;
		uint32_t ancestors;

		need = rec_geometry_file_bytes(g, (uint32_t)(pub->consumed / g->page_tokens) - first,
					       true);
		if (parent != COORD_NONE)
			coord_index_pin(&s->index, parent); /* not a victim of its child */
		ancestor_bytes = required_ancestor_bytes(s, parent, &ancestors);
		/* Oversize: it cannot fit even beside its required ancestors. */
		if (need > s->limit_bytes || ancestor_bytes > s->limit_bytes - need ||
		    ancestors >= s->index.nodes_max)
			*outcome = SEL_OVERSIZE;
		else if (disk_full_within(s, COORD_DISK_FULL_BACKOFF_NS) || !make_room(s, need) ||
			 !make_node_room(s)) {
			*outcome = SEL_RETRY;
			/* Dirty records may hold the room: written, they can go. */
			if (s->warm.dirty_records > s->warm_writes_in_flight)
				coord_store_write_dirty(s);
		}
		else if ((ret = submit_store(s, h, pub, &key, parent, &parent_key, need)) == 0)
			*outcome = SEL_QUEUED;
		else if (ret == SEL_RETRY)
			*outcome = SEL_RETRY;
		if (parent != COORD_NONE)
			coord_index_unpin(&s->index, parent);
		if (*outcome != SEL_QUEUED)
			drop_bare_page_only(s, parent); /* make_room took its last child */
		if (ret && ret != SEL_RETRY)
			return ret; /* the engine refused it: not a matter of time */
	}
	count_outcome(s, *outcome);
	return 0;
}

/*
 * Re-derives a hit's chain (the caller may have polled since its lookup,
 * and polling can evict): every node above resident, READY, with the
 * endpoint's row. Returns the chain length, or 0 when the hit went stale.
 */
static uint32_t hit_chain(struct coord_store *s, const struct sel_hit *hit,
			  uint32_t *chain, uint32_t *skip, uint32_t *pages)
{
	uint32_t count = 0, id = hit->endpoint, total = 0;
	uint64_t stop = 0;

	if (id >= s->index.nodes_max || !s->index.nodes[id].in_use ||
	    s->generation[id] != hit->generation || !s->index.nodes[id].row_present)
		return 0;
	while (id != COORD_NONE) {
		struct coord_node *n = coord_index_node(&s->index, id);

		if (n->key.consumed <= hit->resident) {
			stop = n->key.consumed;
			break;
		}
		if (n->state != COORD_READY || count == COORD_CHAIN_MAX)
			return 0;
		chain[count++] = id;
		total += n->tail_page_count;
		id = n->parent_id;
	}
	for (uint32_t i = 0; i < count / 2; i++) {
		uint32_t t = chain[i];

		chain[i] = chain[count - 1 - i];
		chain[count - 1 - i] = t;
	}
	*skip = (uint32_t)(hit->resident / s->geometry.page_tokens -
			   stop / s->geometry.page_tokens);
	*pages = total - *skip;
	return *pages == hit->page_count && *skip == hit->skip_pages ? count : 0;
}

/* sel_fetch of a pool hit: a claim of its chain, restored on every rank. */
static int pool_fetch(struct coord_store *s, const struct sel_hit *hit, const uint32_t *page_ids,
		      uint32_t state_slot, uint64_t waiter)
{
	uint32_t slot = hit->endpoint & ~COORD_POOL_HIT_BIT, id;
	struct coord_pool_claim claim;
	struct coord_job *job;
	int ret;

	if (slot >= COORD_POOL_HITS_MAX || !s->pool_on || !s->jobs_ops.pool_claim ||
	    !s->pool_hits[slot].generation || s->pool_hits[slot].generation != hit->generation)
		return SEL_ENOTFOUND;
	if (state_slot >= s->geometry.row_count)
		return -EINVAL;
	claim = (struct coord_pool_claim){
		.key = s->pool_hits[slot].chain[s->pool_hits[slot].chain_count - 1].key,
		.chain = s->pool_hits[slot].chain + s->pool_hits[slot].start,
		.chain_count = s->pool_hits[slot].chain_count - s->pool_hits[slot].start,
		.answer = s->pool_hits[slot].chain, .answer_count = s->pool_hits[slot].chain_count,
		.skip_pages = hit->skip_pages, .page_ids = page_ids,
		.page_id_count = hit->page_count, .state_slot = state_slot,
	};
	job = job_take(s, &id);
	if (!job)
		return SEL_EQUEUEFULL;
	job->kind = COORD_JOB_POOL_CLAIM;
	job->skip_pages = hit->skip_pages;
	job->page_count = hit->page_count;
	job->waiters[job->waiter_count++] = waiter;
	ret = s->jobs_ops.pool_claim(s->jobs_ops.ctx, id, &claim);
	if (ret) {
		job_release(s, job);
		return ret;
	}
	/* One fetch per answer: a second would claim what this one holds. */
	s->pool_hits[slot].generation = 0;
	s->stats.fetches++;
	return 0;
}

static void complete_pool_claim(struct coord_store *s, struct coord_job *job,
				const struct shard_completion *c)
{
	if (c->result) {
		s->stats.fetch_failures++;
		s->stats.pool_claim_failures++;
	} else {
		s->stats.bytes_fetched += c->bytes;
		s->stats.pool_claims++;
		s->stats.pool_claim_bytes += c->bytes;
	}
	for (uint32_t w = 0; w < job->waiter_count; w++)
		push_event(s, c->result ? SEL_EVENT_FETCH_FAILED : SEL_EVENT_FETCHED,
			   job->waiters[w], c->result, c->why);
}

int coord_store_fetch(struct coord_store *s, const struct sel_hit *hit,
		      const uint32_t *page_ids, uint32_t state_slot, uint64_t waiter,
		      bool *joined)
{
	struct shard_chain_record *records = s->fetch_records;
	struct shard_fetch_job fetch = { .chain = records, .page_ids = page_ids,
					 .state_slot = state_slot };
	struct coord_job *job;
	uint32_t id, skip, pages;
	int ret;

	*joined = false;
	if (s->stopped)
		return SEL_ESTOPPED;
	if (hit->endpoint & COORD_POOL_HIT_BIT)
		return pool_fetch(s, hit, page_ids, state_slot, waiter);
	/* An inbound key already in flight gets another waiter. */
	for (uint32_t i = 0; i < COORD_JOBS_MAX; i++) {
		struct coord_job *j = &s->jobs[i];

		/*
		 * Equal hits only: the same endpoint, pages and skip, so the same
		 * chain; never a fetch whose owner cancelled: the owner frees
		 * the destination at its event, the one a joiner would read.
		 */
		if (j->in_use && j->kind == COORD_JOB_FETCH && !j->owner_cancelled &&
		    j->node == hit->endpoint &&
		    s->generation[hit->endpoint] == hit->generation &&
		    j->skip_pages == hit->skip_pages && j->page_count == hit->page_count) {
			if (j->waiter_count == COORD_WAITERS_MAX)
				return SEL_EQUEUEFULL;
			j->waiters[j->waiter_count++] = waiter;
			*joined = true;
			return 0;
		}
	}
	if (state_slot >= s->geometry.row_count)
		return -EINVAL;
	job = job_take(s, &id);
	if (!job)
		return SEL_EQUEUEFULL;
	job->chain_count = hit_chain(s, hit, job->chain, &skip, &pages);
	if (job->chain_count == 0) {
		job_release(s, job);
		return SEL_ENOTFOUND;
	}
	for (uint32_t i = 0; i < job->chain_count; i++) {
		struct coord_node *n = coord_index_node(&s->index, job->chain[i]);

		records[i] = (struct shard_chain_record){ n->key, n->first_page_index,
							  n->tail_page_count };
	}
	fetch.chain_count = job->chain_count;
	fetch.skip_pages = skip;
	job->warm = coord_warm_enabled(&s->warm);
	job->warm_partial = false;
	for (uint32_t i = 0; i < job->chain_count; i++) {
		bool held = coord_warm_holds(&s->warm, job->chain[i]);

		job->warm_partial = job->warm_partial || held;
		job->warm = job->warm && held;
	}
	job->warm_partial = job->warm_partial && !job->warm;
	job->kind = COORD_JOB_FETCH;
	job->node = hit->endpoint;
	job->skip_pages = skip;
	job->page_count = pages;
	job->waiters[job->waiter_count++] = waiter;
	/* A restore is a use: pinned against eviction (warm too), and most recent. */
	for (uint32_t i = 0; i < job->chain_count; i++)
		coord_index_pin(&s->index, job->chain[i]);
	job->read_through = plan_read_through(s, job, skip);
	fetch.read_through = job->read_through;
	ret = s->jobs_ops.fetch(s->jobs_ops.ctx, id, &fetch);
	if (ret) {
		for (uint32_t i = 0; i < job->chain_count; i++)
			coord_index_unpin(&s->index, job->chain[i]);
		job_release(s, job);
		return ret; /* SEL_EQUEUEFULL, or why the engine refused it */
	}
	if (job->read_through)
		read_through_charge(s, job);
	for (uint32_t i = 0; i < job->chain_count; i++)
		touch(s, job->chain[i]);
	warm_touch_chain(s, job->node);
	s->stats.fetches++;
	return 0;
}

int coord_store_cancel(struct coord_store *s, uint64_t waiter)
{
	for (uint32_t i = 0; i < COORD_JOBS_MAX; i++) {
		struct coord_job *j = &s->jobs[i];

		if (!j->in_use || (j->kind != COORD_JOB_FETCH && j->kind != COORD_JOB_POOL_CLAIM))
			continue;
		/* The owner's destination is being written: it keeps its event. */
		if (j->waiter_count > 0 && j->waiters[0] == waiter && !j->owner_cancelled) {
			j->owner_cancelled = true;
			return 0;
		}
		for (uint32_t w = 1; w < j->waiter_count; w++) {
			if (j->waiters[w] == waiter) {
				j->waiters[w] = j->waiters[--j->waiter_count];
				return 0;
			}
		}
	}
	return SEL_ENOTFOUND;
}

/*
 * Row drop (seed 2.3): a record's row goes once its only child, child,
 * commits, and with a warm tier once that child is on disk on every rank:
 * until then a kill or a restart would find the parent's row gone and the
 * child's file missing, and the parent's committed restore lost with it.
 * complete_warm_write calls again when the child's write lands.
 */
static void drop_parent_row(struct coord_store *s, uint32_t parent, uint32_t child)
{
	struct coord_node *p = coord_index_node(&s->index, parent);

	/*
	 * A non-root record only: a root keeps its row, the prefix other
	 * conversations restore from. A full job table skips it; the next
	 * eviction pass compacts instead.
	 */
	if (p->parent.consumed == 0 || p->child_count != 1 || !p->row_present ||
	    p->pins != 0 || p->state != COORD_READY)
		return;
	if (!coord_index_node(&s->index, child)->in_use ||
	    coord_index_node(&s->index, child)->parent_id != parent ||
	    coord_warm_dirty_state(&s->warm, child) != COORD_WARM_CLEAN)
		return; /* not its child any more, or not on disk yet */
	/* Its file is not written yet: the row goes once it is. */
	if (coord_warm_dirty_state(&s->warm, parent) != COORD_WARM_CLEAN) {
		coord_warm_want_row_drop(&s->warm, parent, child);
		return;
	}
	reclaim(s, parent, true);
}

static void condemn(struct coord_store *s, struct coord_node *n)
{
	if (n->state == COORD_READY) {
		n->state = COORD_CONDEMNED;
		s->condemned_count++;
	}
}

/*
 * A failed rewrite left each rank with the old page-only file or the new
 * whole one (R-WRITE-4), or none where the rename happened and a later
 * step failed (R-WRITE-5): a truncate of the row on every rank makes them
 * agree again without losing the committed record (complete_rewrite_undo);
 * where that cannot even be submitted, the record goes with its children.
 */
static void rewrite_undo(struct coord_store *s, const struct coord_job *failed)
{
	struct coord_node *n = coord_index_node(&s->index, failed->node);
	uint32_t id;
	struct coord_job *job = job_take(s, &id);

	if (job) {
		job->kind = COORD_JOB_TRUNCATE;
		job->rewrite = true;
		job->node = failed->node;
		job->key = n->key;
		job->bytes = 0;
		if (s->jobs_ops.truncate(s->jobs_ops.ctx, id, &n->key) == 0)
			return; /* the pin stays until it completes */
		job_release(s, job);
	}
	coord_index_unpin(&s->index, failed->node);
	condemn(s, n);
}

/* The truncate after a failed rewrite: page-only on every rank, or gone. */
static void complete_rewrite_undo(struct coord_store *s, struct coord_job *job,
				  const struct shard_completion *c)
{
	struct coord_node *n = coord_index_node(&s->index, job->node);

	coord_index_unpin(&s->index, job->node);
	if (c->result) { /* a rank lost its file, or cannot say: never serve it */
		sel_warn("a record whose row could not be put back is dropped: %s",
			 c->why[0] ? c->why : sel_strerror(c->result));
		condemn(s, n);
		return;
	}
	drop_bare_page_only(s, job->node); /* its last child left while pinned */
}

/*
 * A row put back (publish_row): the record is whole again, or, on failure,
 * page-only again on every rank (rewrite_undo); the checkpoint stays
 * committed for its children.
 */
static void complete_rewrite(struct coord_store *s, struct coord_job *job,
			     const struct shard_completion *c)
{
	struct coord_node *n = coord_index_node(&s->index, job->node);

	if (c->result) {
		s->used_bytes -= job->bytes;
		s->stats.store_failures++;
		if (c->result == -ENOSPC || c->result == -EDQUOT)
			note_disk_full(s);
		push_event(s, SEL_EVENT_STORE_FAILED, job->checkpoint, c->result, c->why);
		rewrite_undo(s, job);
		return;
	}
	coord_index_unpin(&s->index, job->node);
	s->used_bytes -= n->bytes; /* the page-only file it replaced */
	n->bytes = job->bytes;
	n->row_present = true;
	if (pool_holdable(n))
		pool_hold_note(s, job->node, true);
	touch(s, job->node);
	s->stats.stored++;
	s->stats.bytes_stored += c->bytes;
	push_event(s, SEL_EVENT_STORED, job->checkpoint, 0, NULL);
	if (coord_warm_enabled(&s->warm)) /* stored cold: on disk already */
		push_event(s, SEL_EVENT_ON_DISK, job->checkpoint, 0, NULL);
}

/*
 * A store that failed on some rank may have left its file on the ranks
 * where it succeeded (the fan-out's own cleanup can fail or not be sent):
 * an unlink of the key on every rank, charging nothing, makes sure. The
 * engines run it after the failed store and before any later store of
 * that key. Where it cannot be submitted, or the transport has stopped, a
 * file left on some ranks only is dropped by the next start's agreement.
 */
static void unlink_failed_store(struct coord_store *s, const struct rec_key *key,
				uint32_t warm_slots)
{
	char name[REC_FILE_NAME_BYTES];
	struct coord_job *job;
	uint32_t id;
	int ret = SEL_EQUEUEFULL;

	if (s->stopped)
		return; /* no job goes anywhere now: the next start's agreement drops it */
	job = job_take(s, &id);
	if (job) {
		job->kind = COORD_JOB_UNLINK;
		job->key = *key;
		job->bytes = 0;
		ret = s->jobs_ops.unlink(s->jobs_ops.ctx, id, key);
		if (ret == 0) {
			warm_releasing_add(s, job, warm_slots);
			return;
		}
		job_release(s, job);
	}
	/* The ranks where it succeeded hold its warm slots until the next start. */
	s->warm.slots_used += warm_slots;
	s->warm.slots_stranded += warm_slots;
	rec_file_name(name, key);
	sel_warn("a failed store's %s may remain on some rank: its unlink could not be "
		 "submitted (%s); the next start's agreement drops it", name, sel_strerror(ret));
}

static void complete_store(struct coord_store *s, struct coord_job *job,
			   const struct shard_completion *c)
{
	if (job->rewrite) {
		complete_rewrite(s, job, c);
		return;
	}
	if (job->parent != COORD_NONE)
		coord_index_unpin(&s->index, job->parent);
	if (c->result) {
		/* Each rank's slots went back with its failure, or go with the unlink. */
		uint32_t warm_slots = coord_warm_slots_of(&s->warm, job->node);

		coord_warm_forget(&s->warm, job->node);
		unlink_failed_store(s, &coord_index_node(&s->index, job->node)->key, warm_slots);
		coord_index_remove(&s->index, job->node);
		s->stats.records = s->index.node_count;
		s->used_bytes -= job->bytes;
		s->stats.store_failures++;
		drop_bare_page_only(s, job->parent); /* it was its last child */
		if (c->result == -ENOSPC || c->result == -EDQUOT)
			note_disk_full(s);
		push_event(s, SEL_EVENT_STORE_FAILED, job->checkpoint, c->result, c->why);
		return;
	}
	coord_index_node(&s->index, job->node)->state = COORD_READY;
	if (pool_holdable(coord_index_node(&s->index, job->node)))
		pool_hold_note(s, job->node, true);
	touch(s, job->node);
	coord_warm_ready(&s->warm, job->node);
	warm_touch_chain(s, job->parent);
	s->stats.stored++;
	s->stats.bytes_stored += c->bytes;
	push_event(s, SEL_EVENT_STORED, job->checkpoint, 0, NULL);
	/* Warm only: dirty until its write from warm completes on every rank. */
	if (job->warm_only)
		coord_warm_set_dirty(&s->warm, &s->index, job->node, job->checkpoint);
	else if (coord_warm_enabled(&s->warm)) /* without, STORED says it */
		push_event(s, SEL_EVENT_ON_DISK, job->checkpoint, 0, NULL);
	if (job->parent != COORD_NONE)
		drop_parent_row(s, job->parent, job->node);
}

/*
 * A write from warm completed: on disk on every rank (ON_DISK), or, where
 * some rank failed, still dirty, its slots kept, tried again after a
 * backoff (a rank whose file did commit keeps it: the next write replaces
 * it, and the next start's agreement drops a file that is not on every
 * rank).
 */
static void complete_warm_write(struct coord_store *s, struct coord_job *job,
				const struct shard_completion *c)
{
	struct coord_node *n = coord_index_node(&s->index, job->node);
	uint32_t row_drop_child;

	coord_index_unpin(&s->index, job->node);
	s->warm_writes_in_flight--;
	SEL_ASSERT(coord_warm_dirty_state(&s->warm, job->node) == COORD_WARM_WRITING);
	if (c->result) {
		char name[REC_FILE_NAME_BYTES];

		coord_warm_write_failed(&s->warm, job->node);
		s->stats.warm_write_failures++;
		s->warm_write_retry_ns = sel_monotonic_ns() + COORD_WARM_WRITE_BACKOFF_NS;
		if (c->result == -ENOSPC || c->result == -EDQUOT)
			note_disk_full(s);
		rec_file_name(name, &n->key);
		sel_warn("%s: its write from warm failed (%s); it stays warm, not on disk, "
			 "and is tried again", name, c->why[0] ? c->why : sel_strerror(c->result));
		return;
	}
	s->warm_write_retry_ns = 0;
	row_drop_child = coord_warm_row_drop_child(&s->warm, job->node);
	coord_warm_set_clean(&s->warm, &s->index, job->node);
	s->stats.warm_writes++;
	if (n->state == COORD_CONDEMNED) {
		drop_condemned(s); /* it goes: no restart finds it, so no ON_DISK */
		return;
	}
	push_event(s, SEL_EVENT_ON_DISK, s->warm.checkpoint[job->node], 0, NULL);
	/* The parent's row its commit left for this file, now on disk. */
	if (n->parent_id != COORD_NONE)
		drop_parent_row(s, n->parent_id, job->node);
	/* Its own row, which a child's commit left for this file. */
	if (row_drop_child != COORD_NONE)
		drop_parent_row(s, job->node, row_drop_child);
}

/*
 * Unlinks every condemned record nothing holds any more (no pin, no child),
 * leaves first; a record whose last child goes is tried at once. Records
 * that depend on a condemned one are condemned with it as they become
 * ready. Stops when the job table is full: the next completion sweeps
 * again. Walks the whole index, so it runs only while something is
 * condemned, and only after completions (the only time pins drop).
 */
static void drop_condemned(struct coord_store *s)
{
	struct coord_index *ix = &s->index;
	bool spread = true;

	while (s->condemned_count > 0 && spread) {
		spread = false;
		for (uint32_t i = 0; i < ix->nodes_max; i++) {
			struct coord_node *n = &ix->nodes[i];

			if (n->in_use && n->state == COORD_READY && n->parent_id != COORD_NONE &&
			    ix->nodes[n->parent_id].state == COORD_CONDEMNED) {
				n->state = COORD_CONDEMNED;
				s->condemned_count++;
				spread = true;
			}
		}
	}
	for (uint32_t i = 0; i < ix->nodes_max && s->condemned_count > 0; i++) {
		uint32_t id = i;

		while (id != COORD_NONE && ix->nodes[id].in_use &&
		       ix->nodes[id].state == COORD_CONDEMNED && ix->nodes[id].child_count == 0 &&
		       ix->nodes[id].pins == 0) {
			uint32_t parent = ix->nodes[id].parent_id;

			if (reclaim(s, id, false) != 0)
				return;
			id = parent;
		}
	}
}

/* The counter of the reason a fetch's failure condemns a record for, or NULL. */
static uint64_t *drop_counter(struct coord_store *s, int result)
{
	if (!rec_failure_condemns(result))
		return NULL; /* EIO and the like may pass: the record stays */
	if (result == SEL_ECHECKSUM)
		return &s->stats.records_dropped_checksum;
	/* -ENXIO: the name is no longer a regular file (record/io.h) */
	if (result == -ENOENT || result == -ENXIO)
		return &s->stats.records_dropped_missing;
	return &s->stats.records_dropped_header;
}

/*
 * A fetch that failed verification on some rank (R-READ-4):
 * condemns the record it names, and with it every record that depends on
 * it, so the next publication of that checkpoint stores it again instead
 * of answering Present over a bad copy. The engine puts the file name
 * first in every verification failure's reason (record/disk.c), and the
 * fan-out keeps it behind the rank. A reason that names no record of the
 * chain condemns nothing: a peer's engine refusing the job (SEL_EMISMATCH
 * for a job that does not fit it) says nothing about any file, and a good
 * record must never be deleted on ambiguous evidence.
 */
static void condemn_failed_record(struct coord_store *s, const struct coord_job *job,
				  const struct shard_completion *c)
{
	uint64_t *counter = drop_counter(s, c->result);
	char name[REC_FILE_NAME_BYTES];
	struct coord_node *n;
	uint32_t bad;

	if (!counter)
		return;
	bad = COORD_NONE;
	for (uint32_t i = 0; i < job->chain_count; i++) {
		rec_file_name(name, &coord_index_node(&s->index, job->chain[i])->key);
		if (strstr(c->why, name)) {
			bad = job->chain[i];
			break;
		}
	}
	if (bad == COORD_NONE) {
		sel_warn("a fetch failed (%s) naming no record of its chain: nothing dropped",
			 c->why[0] ? c->why : sel_strerror(c->result));
		return;
	}
	n = coord_index_node(&s->index, bad);
	if (n->state == COORD_CONDEMNED)
		return;
	rec_file_name(name, &n->key);
	sel_warn("%s failed verification (%s): dropped on every rank with what depends on it",
		 name, c->why[0] ? c->why : sel_strerror(c->result));
	n->state = COORD_CONDEMNED;
	s->condemned_count++;
	(*counter)++;
}

static void complete_fetch(struct coord_store *s, struct coord_job *job,
			   const struct shard_completion *c)
{
	for (uint32_t i = 0; i < job->chain_count; i++)
		coord_index_unpin(&s->index, job->chain[i]);
	if (c->result) {
		s->stats.fetch_failures++;
		condemn_failed_record(s, job, c);
	}

	else
		s->stats.bytes_fetched += c->bytes;
	if (!c->result && job->warm)
		s->warm.hits++;
	if (!c->result && job->warm_partial)
		s->warm.partial_hits++;
	if (job->read_through) {
		read_through_settle(s, job, c);
		/* Listed now: the most recent, as the fetch made its chain. */
		if (!c->result)
			warm_touch_chain(s, job->node);
	}
	for (uint32_t w = 0; w < job->waiter_count; w++)
		push_event(s, c->result ? SEL_EVENT_FETCH_FAILED : SEL_EVENT_FETCHED,
			   job->waiters[w], c->result, c->why);
}

/*
 * A row truncate (compaction) that failed saying the record file itself is
 * bad on some rank (missing, not a regular file, a header that fails:
 * rec_failure_condemns) condemns the record and what depends on it, as a
 * fetch's verification failure does (R-READ-4): the record stays in the
 * index for its chain, so left alone it would fail every restore through
 * it. The record is the job's key: a truncate names no other file.
 */
static void condemn_failed_truncate(struct coord_store *s, const struct coord_job *job,
				    const struct shard_completion *c)
{
	uint32_t id = coord_index_find(&s->index, &job->key);
	char name[REC_FILE_NAME_BYTES];
	struct coord_node *n;

	if (id == COORD_NONE || (n = coord_index_node(&s->index, id))->state != COORD_READY)
		return;
	rec_file_name(name, &job->key);
	sel_warn("truncate of %s failed (%s): dropped on every rank with what depends on it",
		 name, c->why[0] ? c->why : sel_strerror(c->result));
	condemn(s, n);
	(*drop_counter(s, c->result))++;
}

static void complete_reclaim(struct coord_store *s, struct coord_job *job,
			     const struct shard_completion *c)
{
	char name[REC_FILE_NAME_BYTES];

	if (job->rewrite) {
		complete_rewrite_undo(s, job, c);
		return;
	}
	s->reclaiming_bytes -= job->bytes;
	s->used_bytes -= job->bytes;
	if (job->kind == COORD_JOB_TRUNCATE && rec_failure_condemns(c->result)) {
		condemn_failed_truncate(s, job, c);
		return;
	}
	if (c->result == 0 || c->result == -ENOENT)
		return;
	/*
	 * It may or may not have happened. The index no longer holds those
	 * bytes, so neither does the budget: charging them for good would
	 * wedge the store once enough failures piled up. A file that is still
	 * there is found and charged again by the next startup scan.
	 */
	rec_file_name(name, &job->key);
	sel_warn("%s of %s failed: %s; its space is reconciled at the next start",
		 job->kind == COORD_JOB_UNLINK ? "unlink" : "truncate", name,
		 c->why[0] ? c->why : sel_strerror(c->result));
}

int coord_store_set_pool(struct coord_store *s, bool on)
{
	if (on && !s->jobs_ops.pool_put)
		return -ENOTSUP;
	if (on && !s->pool_state) {
		s->pool_state = calloc(s->index.nodes_max, sizeof(*s->pool_state));
		if (!s->pool_state)
			return -ENOMEM;
	}
	/* Puts in flight keep their PUTTING state (and pins) until they complete. */
	for (uint32_t i = 0; on && i < s->index.nodes_max; i++)
		if (s->pool_state[i] != COORD_POOL_PUTTING)
			s->pool_state[i] = COORD_POOL_NONE;
	s->pool_on = on;
	s->stats.pool_attached = on;
	/* the exports asked of a session that ended are forgotten (R-POOL-75) */
	for (uint32_t i = 0; i < COORD_POOL_EXPORTS_MAX; i++) {
		s->pool_exports[i].id = 0;
		s->pool_exports[i].gpu = COORD_GPU_EXPORT_NONE;
	}
	s->pool_holds_count = 0;
	return 0;
}

/*
 * Whether the records take more than the limit less the cascade's headroom,
 * not counting those already leaving: unlinks in flight, and puts in flight
 * of records dropped once accepted.
 */
static bool cascade_due(const struct coord_store *s)
{
	const struct coord_index *ix = &s->index;
	uint64_t keep = s->limit_bytes - s->limit_bytes / COORD_POOL_HEADROOM_DIVISOR;

	return s->used_bytes - s->reclaiming_bytes - s->pool_putting_bytes > keep ||
	       ix->node_count > ix->nodes_max - ix->nodes_max / COORD_POOL_HEADROOM_DIVISOR;
}

static int submit_pool_put(struct coord_store *s, uint32_t id, bool victim)
{
	struct coord_node *n = coord_index_node(&s->index, id);
	struct coord_pool_put put = {
		.key = n->key, .parent = n->parent, .first_page_index = n->first_page_index,
		.tail_page_count = n->tail_page_count, .row = n->row_present,
		.share_bytes = rec_geometry_file_bytes(&s->geometry, n->tail_page_count,
						       n->row_present),
	};
	struct coord_job *job;
	uint32_t job_id;
	int ret;

	job = job_take(s, &job_id);
	if (!job)
		return SEL_EQUEUEFULL;
	job->kind = COORD_JOB_POOL_PUT;
	job->node = id;
	/* An ancestor put first stays on disk: only the victim's bytes are leaving. */
	job->bytes = victim ? n->bytes : 0;
	ret = s->jobs_ops.pool_put(s->jobs_ops.ctx, job_id, &put);
	if (ret) {
		job_release(s, job);
		return ret;
	}
	/* Its files are read on every rank: neither evicted nor compacted meanwhile. */
	coord_index_pin(&s->index, id);
	s->pool_state[id] = COORD_POOL_PUTTING;
	s->pool_puts_in_flight++;
	s->pool_putting_bytes += job->bytes;
	return 0;
}

/*
 * What the cascade does for victim: COORD_NONE to drop it now (the pool
 * holds it, or cannot take it: its put or an ancestor's failed), victim's
 * own id or an ancestor's to put first (the root-most one the pool does not
 * hold), or *wait when an ancestor is being put or is not ready.
 */
static uint32_t cascade_next(struct coord_store *s, uint32_t victim, bool *wait)
{
	uint32_t next = victim;

	*wait = false;
	for (uint32_t id = victim; id != COORD_NONE;
	     id = coord_index_node(&s->index, id)->parent_id) {
		const struct coord_node *n = coord_index_node(&s->index, id);

		if (s->pool_state[id] == COORD_POOL_HELD)
			break;
		if (s->pool_state[id] == COORD_POOL_FAILED)
			return COORD_NONE;
		if (s->pool_state[id] == COORD_POOL_PUTTING || n->state != COORD_READY) {
			*wait = true;
			return COORD_NONE;
		}
		next = id;
	}
	return s->pool_state[victim] == COORD_POOL_HELD ? COORD_NONE : next;
}

void coord_store_cascade(struct coord_store *s)
{
	while (s->pool_on && !s->stopped && s->limit_bytes && cascade_due(s)) {
		bool compact = false, wait;
		uint32_t victim = coord_index_victim(&s->index, evictable, s, &compact);
		uint32_t next;

		if (victim == COORD_NONE)
			return;
		next = cascade_next(s, victim, &wait);
		if (wait)
			return;
		if (next == COORD_NONE) {
			/* In the pool, or refused: it leaves the disk as an eviction does. */
			if (reclaim(s, victim, compact) != 0)
				return;
			continue;
		}
		if (s->pool_puts_in_flight >= COORD_POOL_PUTS_MAX ||
		    submit_pool_put(s, next, next == victim) != 0)
			return;
	}
}

/* Answers export slot i and frees it. */
static void pool_export_end(struct coord_store *s, uint32_t i, int result)
{
	sel_debug("pool: export of %" PRIu64 " tokens ended: %s", s->pool_exports[i].key.consumed,
		  result ? sel_strerror(result) : "its chain is in the pool");
	s->pool_ops.export_end(s->pool_ops.ctx, s->pool_exports[i].id, result);
	s->pool_exports[i].id = 0;
	s->pool_exports[i].gpu = COORD_GPU_EXPORT_NONE;
}

static uint32_t gpu_hold_checkpoint_bucket(uint64_t checkpoint)
{
	return (uint32_t)((checkpoint * 0x9e3779b97f4a7c15ull) >> 32) &
	       (COORD_GPU_HOLD_BUCKETS - 1);
}

static uint32_t gpu_hold_key_bucket(const struct rec_key *key)
{
	/* the digest is BLAKE2b output already: its first bytes are uniform */
	uint64_t d = sel_get_le64(key->digest.bytes);

	return gpu_hold_checkpoint_bucket(d ^ key->consumed);
}

/* The offer of key (the first on its chain), or COORD_NONE; constant time. */
static uint32_t gpu_hold_find_key(const struct coord_store *s, const struct rec_key *key)
{
	if (!s->gpu_hold_by_key)
		return COORD_NONE;
	for (uint32_t i = s->gpu_hold_by_key[gpu_hold_key_bucket(key)]; i != COORD_NONE;
	     i = s->gpu_holds[i].key_next)
		if (rec_key_equal(&s->gpu_holds[i].key, key))
			return i;
	return COORD_NONE;
}

/* The offer of checkpoint, or COORD_NONE; constant time. */
static uint32_t gpu_hold_find(const struct coord_store *s, uint64_t checkpoint)
{
	if (!s->gpu_hold_by_checkpoint)
		return COORD_NONE;
	for (uint32_t i = s->gpu_hold_by_checkpoint[gpu_hold_checkpoint_bucket(checkpoint)];
	     i != COORD_NONE; i = s->gpu_holds[i].checkpoint_next)
		if (s->gpu_holds[i].checkpoint == checkpoint)
			return i;
	return COORD_NONE;
}

/* Every offer forgotten: the chains empty, every entry on the free list. */
static void gpu_holds_clear(struct coord_store *s)
{
	for (uint32_t b = 0; b < COORD_GPU_HOLD_BUCKETS; b++) {
		s->gpu_hold_by_checkpoint[b] = COORD_NONE;
		s->gpu_hold_by_key[b] = COORD_NONE;
	}
	for (uint32_t i = 0; i < POOL_GPU_HOLDS_MAX; i++) {
		s->gpu_holds[i].used = false;
		s->gpu_holds[i].checkpoint_next = i + 1 < POOL_GPU_HOLDS_MAX ? i + 1 : COORD_NONE;
	}
	s->gpu_hold_free = 0;
	s->gpu_hold_count = 0;
}

/* Takes a free entry onto both chains; the table must not be full. */
static uint32_t gpu_hold_link(struct coord_store *s, uint64_t checkpoint,
			      const struct rec_key *key)
{
	uint32_t i = s->gpu_hold_free, *head;
	struct coord_gpu_hold *g;

	SEL_ASSERT(i != COORD_NONE);
	g = &s->gpu_holds[i];
	s->gpu_hold_free = g->checkpoint_next;
	g->used = true;
	g->checkpoint = checkpoint;
	g->key = *key;
	head = &s->gpu_hold_by_checkpoint[gpu_hold_checkpoint_bucket(checkpoint)];
	g->checkpoint_prev = COORD_NONE;
	g->checkpoint_next = *head;
	if (*head != COORD_NONE)
		s->gpu_holds[*head].checkpoint_prev = i;
	*head = i;
	head = &s->gpu_hold_by_key[gpu_hold_key_bucket(key)];
	g->key_prev = COORD_NONE;
	g->key_next = *head;
	if (*head != COORD_NONE)
		s->gpu_holds[*head].key_prev = i;
	*head = i;
	s->gpu_hold_count++;
	return i;
}

/* Takes entry i off both chains onto the free list. */
static void gpu_hold_unlink(struct coord_store *s, uint32_t i)
{
	struct coord_gpu_hold *g = &s->gpu_holds[i];

	SEL_ASSERT(g->used);
	if (g->checkpoint_prev != COORD_NONE)
		s->gpu_holds[g->checkpoint_prev].checkpoint_next = g->checkpoint_next;
	else
		s->gpu_hold_by_checkpoint[gpu_hold_checkpoint_bucket(g->checkpoint)] =
			g->checkpoint_next;
	if (g->checkpoint_next != COORD_NONE)
		s->gpu_holds[g->checkpoint_next].checkpoint_prev = g->checkpoint_prev;
	if (g->key_prev != COORD_NONE)
		s->gpu_holds[g->key_prev].key_next = g->key_next;
	else
		s->gpu_hold_by_key[gpu_hold_key_bucket(&g->key)] = g->key_next;
	if (g->key_next != COORD_NONE)
		s->gpu_holds[g->key_next].key_prev = g->key_prev;
	g->used = false;
	g->checkpoint_next = s->gpu_hold_free;
	s->gpu_hold_free = i;
	s->gpu_hold_count--;
}

/* Whether the host tiers hold key with its row (announced as a record). */
static bool host_holds(struct coord_store *s, const struct rec_key *key)
{
	uint32_t id = coord_index_find(&s->index, key);

	return id != COORD_NONE && pool_holdable(coord_index_node(&s->index, id));
}

/* The share a GPU export of key would put on each rank (R-POOL-78). */
static uint64_t gpu_export_share_bytes(const struct coord_store *s, const struct rec_key *key)
{
	return rec_geometry_file_bytes(&s->geometry,
				       (uint32_t)(key->consumed / s->geometry.page_tokens), true);
}

/*
 * Export slot i's key is no host record: false when no offered GPU
 * checkpoint holds it (a refusal follows); else true, the engine asked
 * (SEL_EVENT_EXPORT_REQUESTED), or asked at a later poll when the event
 * ring is full now, or the export ended here when too large to build.
 */
static bool gpu_export_ask(struct coord_store *s, uint32_t i)
{
	uint32_t hold;
	struct sel_event *e;

	if (!s->gpu_holds_on || !s->jobs_ops.pool_export)
		return false;
	hold = gpu_hold_find_key(s, &s->pool_exports[i].key);
	if (hold == COORD_NONE)
		return false;
	if (gpu_export_share_bytes(s, &s->pool_exports[i].key) > POOL_GPU_EXPORT_SHARE_BYTES_MAX) {
		pool_export_end(s, i, SEL_ETOOBIG); /* R-POOL-79: before anything is pinned */
		return true;
	}
	/* one slot stays for FATAL; the request waits for the next poll */
	if (s->event_count + 1 >= COORD_EVENTS_MAX)
		return true;
	s->pool_exports[i].gpu = COORD_GPU_EXPORT_ASKED;
	s->pool_exports[i].export_id = ++s->next_export_id;
	s->pool_exports[i].checkpoint = s->gpu_holds[hold].checkpoint;
	s->pool_exports[i].bucket = s->gpu_holds[hold].bucket;
	push_event(s, SEL_EVENT_EXPORT_REQUESTED, s->pool_exports[i].export_id, 0,
		   "the pool asks for this GPU checkpoint");
	e = &s->events[(s->event_head + s->event_count - 1) % COORD_EVENTS_MAX];
	e->checkpoint = s->pool_exports[i].checkpoint;
	e->tokens = s->pool_exports[i].key.consumed;
	return true;
}

/* A GPU export waiting for the engine's answer, or for its job. */
static void gpu_export_drive(struct coord_store *s, uint32_t i, uint64_t now)
{
	/* R-POOL-79: an engine that never answers ends it at the deadline */
	if (s->pool_exports[i].gpu == COORD_GPU_EXPORT_ASKED &&
	    now - s->pool_exports[i].asked_ns > POOL_EXPORT_MS * 1000000ull) {
		sel_warn("pool: the engine did not answer the export of checkpoint %" PRIu64
			 " within %u ms", s->pool_exports[i].checkpoint,
			 POOL_EXPORT_MS);
		pool_export_end(s, i, -ETIMEDOUT);
	}
}

static uint32_t gpu_export_slot(const struct coord_store *s, uint64_t export_id,
				enum coord_gpu_export state)
{
	for (uint32_t i = 0; export_id && i < COORD_POOL_EXPORTS_MAX; i++)
		if (s->pool_exports[i].id && s->pool_exports[i].gpu == state &&
		    s->pool_exports[i].export_id == export_id)
			return i;
	return COORD_NONE;
}

int coord_store_gpu_exports(struct coord_store *s, bool on)
{
	if (on && !s->gpu_holds) {
		s->gpu_holds = calloc(POOL_GPU_HOLDS_MAX, sizeof(*s->gpu_holds));
		s->gpu_hold_by_checkpoint =
			malloc(COORD_GPU_HOLD_BUCKETS * sizeof(*s->gpu_hold_by_checkpoint));
		s->gpu_hold_by_key = malloc(COORD_GPU_HOLD_BUCKETS * sizeof(*s->gpu_hold_by_key));
		if (!s->gpu_holds || !s->gpu_hold_by_checkpoint || !s->gpu_hold_by_key) {
			gpu_holds_free(s);
			s->gpu_holds_on = false;
			return -ENOMEM;
		}
		gpu_holds_clear(s);
	}
	s->gpu_holds_on = on;
	return 0;
}

int coord_store_gpu_hold(struct coord_store *s, uint64_t checkpoint,
			 const struct rec_history *h, uint64_t consumed)
{
	struct rec_key key;
	uint32_t i;

	if (!s->gpu_holds_on)
		return -ENOTSUP;
	if (consumed == 0 || consumed > h->token_count || consumed < s->geometry.page_tokens)
		return -EINVAL;
	if (gpu_hold_find(s, checkpoint) != COORD_NONE)
		return -EEXIST;
	if (s->gpu_hold_count == POOL_GPU_HOLDS_MAX)
		return SEL_EQUEUEFULL;
	rec_history_key_at(h, consumed, &key);
	i = gpu_hold_link(s, checkpoint, &key);
	s->gpu_holds[i].bucket = *rec_history_bucket(h, consumed);
	/* R-POOL-77: announced as any held key (a second add changes nothing) */
	pool_hold_key(s, &s->gpu_holds[i].key, true);
	return 0;
}

int coord_store_gpu_evicted(struct coord_store *s, uint64_t checkpoint)
{
	uint32_t i;
	struct rec_key key;

	if (!s->gpu_holds_on)
		return -ENOTSUP;
	i = gpu_hold_find(s, checkpoint);
	if (i == COORD_NONE)
		return SEL_ENOTFOUND;
	key = s->gpu_holds[i].key;
	gpu_hold_unlink(s, i);
	/* withdrawn once neither the host tiers nor another offer hold it */
	if (!host_holds(s, &key) && gpu_hold_find_key(s, &key) == COORD_NONE)
		pool_hold_key(s, &key, false);
	return 0;
}

int coord_store_gpu_evictions_lost(struct coord_store *s)
{
	if (!s->gpu_holds_on)
		return -ENOTSUP;
	gpu_holds_clear(s);
	/* R-POOL-77: a reset, then the host records; the engine offers again */
	if (s->pool_on && s->pool_ops.hold)
		pool_holds_resync_start(s);
	return 0;
}

int coord_store_export_pinned(struct coord_store *s, uint64_t export_id,
			      const uint32_t *page_ids, uint32_t page_count,
			      uint32_t state_slot)
{
	const struct rec_geometry *g = &s->geometry;
	uint32_t i = gpu_export_slot(s, export_id, COORD_GPU_EXPORT_ASKED), job_id;
	struct rec_header header;
	struct coord_pool_put put;
	struct coord_job *job;
	int ret;

	if (i == COORD_NONE)
		return SEL_ENOTFOUND;
	put = (struct coord_pool_put){
		.key = s->pool_exports[i].key, .first_page_index = 0,
		.tail_page_count = (uint32_t)(s->pool_exports[i].key.consumed / g->page_tokens),
		.row = true, .share_bytes = gpu_export_share_bytes(s, &s->pool_exports[i].key),
	};
	ret = page_count != put.tail_page_count || state_slot >= g->row_count ? -EINVAL : 0;
	for (uint32_t p = 0; !ret && p < page_count; p++)
		if (page_ids[p] >= g->page_count)
			ret = -EINVAL;
	if (!ret && s->stopped)
		ret = SEL_ESTOPPED;
	if (!ret)
		ret = rec_header_init(&header, g, &s->namespace_id, &put.key, NULL,
				      &s->pool_exports[i].bucket, 0,
				      put.tail_page_count, sel_realtime_ns());
	job = ret ? NULL : job_take(s, &job_id);
	if (!ret && !job)
		ret = SEL_EQUEUEFULL;
	if (!ret) {
		job->kind = COORD_JOB_POOL_EXPORT;
		job->node = COORD_NONE;
		job->checkpoint = s->pool_exports[i].checkpoint;
		job->export_id = export_id;
		ret = s->jobs_ops.pool_export(s->jobs_ops.ctx, job_id, &put,
					      &(struct shard_pool_export_job){
						      .header = &header, .page_ids = page_ids,
						      .state_slot = state_slot });
		if (ret)
			job_release(s, job);
	}
	if (ret) {
		/* over at once: the engine unpins, and no event comes */
		sel_debug("pool: the export of %" PRIu64 " tokens from the GPU was not taken: %s",
			  put.key.consumed, sel_strerror(ret));
		pool_export_end(s, i, -ECANCELED);
		return ret;
	}
	s->pool_exports[i].gpu = COORD_GPU_EXPORT_PUTTING;
	return 0;
}

int coord_store_export_refuse(struct coord_store *s, uint64_t export_id, int reason)
{
	uint32_t i = gpu_export_slot(s, export_id, COORD_GPU_EXPORT_ASKED);

	if (i == COORD_NONE)
		return SEL_ENOTFOUND;
	if (reason != SEL_ENOTFOUND && reason != -ENOSPC)
		return -EINVAL;
	if (reason == SEL_ENOTFOUND) {
		/* R-POOL-79: the engine no longer holds it: its offer goes too */
		if (gpu_hold_find(s, s->pool_exports[i].checkpoint) != COORD_NONE)
			coord_store_gpu_evicted(s, s->pool_exports[i].checkpoint);
		pool_export_end(s, i, -ENOENT);
	} else {
		pool_export_end(s, i, -EBUSY);
	}
	return 0;
}

/* A GPU export's put ended on every rank: the engine may unpin (exactly once). */
static void complete_pool_export(struct coord_store *s, struct coord_job *job,
				 const struct shard_completion *c)
{
	int result = c->result == -EEXIST ? 0 : c->result;
	uint32_t i = gpu_export_slot(s, job->export_id, COORD_GPU_EXPORT_PUTTING);
	struct sel_event *e;

	push_event(s, SEL_EVENT_EXPORT_ENDED, job->export_id, result,
		   result ? (c->why[0] ? c->why : sel_strerror(result)) : "");
	e = &s->events[(s->event_head + s->event_count - 1) % COORD_EVENTS_MAX];
	e->checkpoint = job->checkpoint;
	if (result)
		s->stats.pool_put_failures++;
	else
		s->stats.pool_puts += c->result == 0;
	/* the manager's session may have ended meanwhile: then nobody waits */
	if (i != COORD_NONE)
		pool_export_end(s, i, result ? -ECANCELED : 0);
}

/*
 * The exports the manager asked of this instance (R-POOL-74): each is the
 * key's chain put as the cascade puts, the ancestors the pool does not
 * hold first, root side first, with the records staying where they are
 * (a put that is not the victim's drops nothing). Never waits: one step
 * per export and poll, within the cascade's puts in flight.
 */
static void pool_exports_drive(struct coord_store *s)
{
	uint64_t now = sel_monotonic_ns();

	if (!s->pool_ops.export_next)
		return;
	for (uint32_t i = 0; i < COORD_POOL_EXPORTS_MAX; i++) {
		uint32_t id;

		if (!s->pool_exports[i].id) {
			if (s->pool_ops.export_next(s->pool_ops.ctx, &s->pool_exports[i].id,
						    &s->pool_exports[i].key) != 1) {
				s->pool_exports[i].id = 0;
				continue;
			}
			s->pool_exports[i].asked_ns = now;
			s->pool_exports[i].gpu = COORD_GPU_EXPORT_NONE;
		}
		if (s->pool_exports[i].gpu != COORD_GPU_EXPORT_NONE) {
			gpu_export_drive(s, i, now);
			continue;
		}
		id = coord_index_find(&s->index, &s->pool_exports[i].key);
		if (id == COORD_NONE || !pool_holdable(coord_index_node(&s->index, id))) {
			/* R-POOL-78: not in the host tiers; an offered GPU checkpoint? */
			if (gpu_export_ask(s, i))
				continue;
			/* R-POOL-75: not held (any more), with its row: a refusal */
			pool_export_end(s, i, -ENOENT);
			continue;
		}
		if (now - s->pool_exports[i].asked_ns > POOL_EXPORT_MS * 1000000ull) {
			pool_export_end(s, i, -ETIMEDOUT);
			continue;
		}
		if (s->pool_state[id] == COORD_POOL_HELD) {
			pool_export_end(s, i, 0);
			continue;
		}
		{
			uint32_t next = COORD_NONE;
			bool wait = false, failed = false;

			for (uint32_t a = id; a != COORD_NONE;
			     a = coord_index_node(&s->index, a)->parent_id) {
				const struct coord_node *n = coord_index_node(&s->index, a);

				if (s->pool_state[a] == COORD_POOL_HELD)
					break;
				if (s->pool_state[a] == COORD_POOL_FAILED) {
					failed = true;
					break;
				}
				if (s->pool_state[a] == COORD_POOL_PUTTING || n->state != COORD_READY) {
					wait = true;
					break;
				}
				if (coord_warm_dirty_state(&s->warm, a) != COORD_WARM_CLEAN) {
					/* only warm so far: its file is written first */
					write_dirty_chain(s, a);
					wait = true;
					break;
				}
				next = a;
			}
			if (failed)
				pool_export_end(s, i, -ECANCELED);
			else if (!wait && next != COORD_NONE &&
				 s->pool_puts_in_flight < COORD_POOL_PUTS_MAX)
				submit_pool_put(s, next, false);
		}
	}
}

static void complete_pool_put(struct coord_store *s, struct coord_job *job,
			      const struct shard_completion *c)
{
	uint32_t id = job->node;

	coord_index_unpin(&s->index, id);
	s->pool_puts_in_flight--;
	s->pool_putting_bytes -= job->bytes;
	if (c->result == 0 || c->result == -EEXIST) {
		s->pool_state[id] = COORD_POOL_HELD;
		s->stats.pool_puts += c->result == 0;
	} else {
		s->pool_state[id] = COORD_POOL_FAILED;
		s->stats.pool_put_failures++;
		sel_debug("pool: the put of %" PRIu64 " tokens failed (%s): it is dropped as "
			  "without a pool", coord_index_node(&s->index, id)->key.consumed,
			  c->why[0] ? c->why : sel_strerror(c->result));
	}
	drop_bare_page_only(s, id);
}

int coord_store_noop(struct coord_store *s)
{
	struct coord_job *job;
	uint32_t id;
	int ret;

	if (!s->jobs_ops.noop)
		return -ENOTSUP;
	if (s->stopped)
		return SEL_ESTOPPED;
	job = job_take(s, &id);
	if (!job)
		return SEL_EQUEUEFULL;
	job->kind = COORD_JOB_NOOP;
	ret = s->jobs_ops.noop(s->jobs_ops.ctx, id);
	if (ret)
		job_release(s, job);
	return ret;
}

static void count_noop(struct coord_store *s, const struct shard_completion *c)
{
	s->noops_done++;
	if (c->result) {
		s->noops_failed++;
		sel_warn("a noop job failed: %s", c->why[0] ? c->why : sel_strerror(c->result));
	}
}

static void observe(struct sel_latency_histogram *h, uint64_t ns)
{
	static const double bounds[SEL_LATENCY_BUCKETS] = SEL_LATENCY_BOUNDS;
	double seconds = (double)ns / 1e9;
	uint32_t b = 0;

	while (b < SEL_LATENCY_BUCKETS && seconds > bounds[b])
		b++;
	h->counts[b]++;
	h->count++;
	h->sum_seconds += seconds;
}

/* A warm drop frees no disk; a rank that failed it has nothing to undo. */
static void complete_warm_drop(const struct shard_completion *c)
{
	if (c->result)
		sel_warn("a warm drop failed on some rank: %s",
			 c->why[0] ? c->why : sel_strerror(c->result));
}

static void warm_stats(struct coord_store *s)
{
	const struct coord_warm *w = &s->warm;

	s->stats.warm_records = w->records;
	s->stats.warm_bytes = w->listed_slots * w->slot_bytes;
	s->stats.warm_slots_used = w->slots_used;
	s->stats.warm_slots_total = w->slots_total;
	s->stats.warm_hits = w->hits;
	s->stats.warm_evictions = w->evictions;
	s->stats.warm_partial_hits = w->partial_hits;
	s->stats.warm_read_throughs = w->read_throughs;
	s->stats.warm_read_through_bytes = w->read_through_bytes;
	s->stats.warm_read_failures = w->read_failures;
	s->stats.warm_dirty_records = w->dirty_records;
	s->stats.warm_dirty_bytes = w->dirty_slots * w->slot_bytes;
}

/*
 * Max-age expiry (seed 2.5), at most once per min(a minute, the max age):
 * from the least recently used record, skipping records that are not
 * leaves, pinned, not READY, not on disk on every rank (dirty) or that
 * may be a held key's parent (may_parent_held), drops
 * the expired ones (not used for max_age_ns) from every tier on every
 * rank (an unlink: the warm copy goes with the file), at most
 * COORD_EXPIRE_SWEEP_MAX a sweep, stopping at the first fresh leaf.
 */
static void expire(struct coord_store *s)
{
	struct coord_index *ix = &s->index;
	uint64_t now = sel_monotonic_ns(), real, every;
	uint32_t dropped = 0, id, next;

	if (!s->max_age_ns || s->stopped)
		return;
	every = s->max_age_ns < COORD_EXPIRE_EVERY_NS ? s->max_age_ns : COORD_EXPIRE_EVERY_NS;
	if (s->last_sweep_ns && now - s->last_sweep_ns < every)
		return;
	s->last_sweep_ns = now;
	real = sel_realtime_ns();
	for (id = ix->lru.head; id != COORD_NONE && dropped < COORD_EXPIRE_SWEEP_MAX; id = next) {
		const struct coord_node *n = &ix->nodes[id];
		bool warm = coord_warm_holds(&s->warm, id);

		next = n->lru.next;
		if (n->child_count > 0 || n->pins > 0 || n->state != COORD_READY ||
		    coord_warm_dirty_state(&s->warm, id) != COORD_WARM_CLEAN ||
		    may_parent_held(s, n))
			continue;
		if (s->used_ns[id] + s->max_age_ns > real)
			break; /* the first fresh leaf: the rest are younger */
		s->expiring = true;
		if (reclaim(s, id, false) != 0) {
			s->expiring = false;
			break; /* no job for it now: the next sweep */
		}
		s->expiring = false;
		s->stats.expired++;
		s->stats.warm_expired += warm;
		dropped++;
		/* Its page-only parent may have gone with it: start over next time. */
		if (next != COORD_NONE && !ix->nodes[next].in_use)
			break;
	}
}

uint32_t coord_store_poll(struct coord_store *s, struct sel_event *events, uint32_t max)
{
	struct shard_completion done[16];
	uint32_t n, room, out = 0;
	char why[200];
	bool completed = false;

	if (!s->stopped && s->jobs_ops.stopped &&
	    s->jobs_ops.stopped(s->jobs_ops.ctx, why, sizeof(why))) {
		s->stopped = true;
		push_event(s, SEL_EVENT_FATAL, 0, SEL_ESTOPPED, why);
	}

	/*
	 * A completion makes at most COORD_WAITERS_MAX events: take only as
	 * many as the event ring can hold, less the one slot kept for the FATAL
	 * event above (a caller polling with max 0 lets the ring fill); the
	 * rest wait in the engine's queue (and their jobs keep their slots)
	 * until the caller drains events.
	 */
	/* Compared before subtracting: the FATAL event may take the kept slot. */
	while (s->event_count + 1 + COORD_WAITERS_MAX <= COORD_EVENTS_MAX &&
	       (room = COORD_EVENTS_MAX - 1 - s->event_count) >= COORD_WAITERS_MAX &&
	       (n = s->jobs_ops.poll(s->jobs_ops.ctx, done,
				     room / COORD_WAITERS_MAX < SEL_ARRAY_SIZE(done) ?
					     room / COORD_WAITERS_MAX :
					     SEL_ARRAY_SIZE(done))) > 0) {
		for (uint32_t i = 0; i < n; i++) {
			struct coord_job *job = &s->jobs[done[i].job_id];

			SEL_ASSERT(done[i].job_id < COORD_JOBS_MAX && job->in_use);
			/* Every rank ran it: the slots it gave back are free there. */
			s->warm.slots_releasing -= job->warm_releasing;
			if (job->kind == COORD_JOB_STORE)
				observe(&s->stats.store_latency, sel_monotonic_ns() - job->submitted_ns);
			if (job->kind == COORD_JOB_FETCH || job->kind == COORD_JOB_POOL_CLAIM)
				observe(&s->stats.fetch_latency, sel_monotonic_ns() - job->submitted_ns);
			if (job->kind == COORD_JOB_STORE)
				complete_store(s, job, &done[i]);
			else if (job->kind == COORD_JOB_FETCH)
				complete_fetch(s, job, &done[i]);
			else if (job->kind == COORD_JOB_NOOP)
				count_noop(s, &done[i]);
			else if (job->kind == COORD_JOB_WARM_DROP)
				complete_warm_drop(&done[i]);
			else if (job->kind == COORD_JOB_WARM_WRITE)
				complete_warm_write(s, job, &done[i]);
			else if (job->kind == COORD_JOB_POOL_PUT)
				complete_pool_put(s, job, &done[i]);
			else if (job->kind == COORD_JOB_POOL_CLAIM)
				complete_pool_claim(s, job, &done[i]);
			else if (job->kind == COORD_JOB_POOL_EXPORT)
				complete_pool_export(s, job, &done[i]);
			else
				complete_reclaim(s, job, &done[i]);
			job_release(s, job);
		}
		drop_condemned(s);
		completed = true;
	}
	if (completed) /* a job slot and a queue entry freed: a refused unlink may go now */
		drop_bare_pending(s);
	if (s->warm_policy == SEL_WARM_WRITE_THROUGH && s->warm.dirty_records > 0)
		coord_store_write_dirty(s);
	expire(s);
	if (s->pool_on) {
		pool_reap_tickets(s);
		pool_holds_flush(s);
		pool_exports_drive(s);
		coord_store_cascade(s);
	}
	s->stats.disk_bytes = s->used_bytes;
	warm_stats(s);
	while (out < max && s->event_count > 0) {
		events[out++] = s->events[s->event_head];
		s->event_head = (s->event_head + 1) % COORD_EVENTS_MAX;
		s->event_count--;
	}
	return out;
}
