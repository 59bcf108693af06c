/* The warm tier's policy on rank zero: see warm.h. */
#include "coordinator/warm.h"

#include "common/base.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void coord_warm_init_off(struct coord_warm *w)
{
	memset(w, 0, sizeof(*w));
	sel_idlist_init(&w->list, NULL, 0);
}

int coord_warm_init(struct coord_warm *w, uint32_t nodes_max, uint32_t slots_total,
		    uint32_t row_slots, uint64_t slot_bytes)
{
	coord_warm_init_off(w);
	w->slots = calloc(nodes_max, sizeof(*w->slots));
	w->links = calloc(nodes_max, sizeof(*w->links));
	w->listed = calloc(nodes_max, sizeof(*w->listed));
	w->dirty = calloc(nodes_max, sizeof(*w->dirty));
	w->dirty_below = calloc(nodes_max, sizeof(*w->dirty_below));
	w->checkpoint = calloc(nodes_max, sizeof(*w->checkpoint));
	w->row_drop_child = malloc((size_t)nodes_max * sizeof(*w->row_drop_child));
	if (!w->slots || !w->links || !w->listed || !w->dirty || !w->dirty_below ||
	    !w->checkpoint || !w->row_drop_child) {
		coord_warm_destroy(w);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < nodes_max; i++)
		w->row_drop_child[i] = COORD_NONE;
	sel_idlist_init(&w->list, w->links, sizeof(*w->links));
	w->nodes_max = nodes_max;
	w->slots_total = slots_total;
	w->row_slots = row_slots;
	w->slot_bytes = slot_bytes;
	return 0;
}

void coord_warm_destroy(struct coord_warm *w)
{
	free(w->slots);
	free(w->links);
	free(w->listed);
	free(w->dirty);
	free(w->dirty_below);
	free(w->checkpoint);
	free(w->row_drop_child);
	coord_warm_init_off(w);
}

bool coord_warm_holds(const struct coord_warm *w, uint32_t id)
{
	return w->slots_total && id < w->nodes_max && w->listed[id];
}

static void unlist(struct coord_warm *w, uint32_t id)
{
	if (!w->listed[id])
		return;
	sel_idlist_remove(&w->list, id);
	w->listed[id] = false;
	w->records--;
	w->listed_slots -= w->slots[id];
}

static void list_last(struct coord_warm *w, uint32_t id)
{
	sel_idlist_push_tail(&w->list, id);
	w->listed[id] = true;
	w->records++;
	w->listed_slots += w->slots[id];
}

void coord_warm_charge(struct coord_warm *w, uint32_t id, uint32_t slots)
{
	SEL_ASSERT(w->slots_total && w->slots[id] == 0 && !w->listed[id]);
	SEL_ASSERT(w->slots_used + slots <= w->slots_total);
	w->slots[id] = slots;
	w->slots_used += slots;
}

void coord_warm_ready(struct coord_warm *w, uint32_t id)
{
	if (w->slots_total && w->slots[id] && !w->listed[id])
		list_last(w, id);
}

/* Adds delta to dirty_below of every ancestor of id. */
static void mark_ancestors(struct coord_warm *w, const struct coord_index *ix, uint32_t id,
			   int delta)
{
	for (uint32_t a = ix->nodes[id].parent_id; a != COORD_NONE; a = ix->nodes[a].parent_id) {
		SEL_ASSERT(delta > 0 || w->dirty_below[a] > 0);
		w->dirty_below[a] += (uint32_t)delta;
	}
}

void coord_warm_set_dirty(struct coord_warm *w, const struct coord_index *ix, uint32_t id,
			  uint64_t checkpoint)
{
	SEL_ASSERT(w->slots_total && w->slots[id]);
	w->checkpoint[id] = checkpoint;
	if (w->dirty[id] != COORD_WARM_CLEAN)
		return;
	w->dirty[id] = COORD_WARM_DIRTY;
	w->dirty_records++;
	w->dirty_slots += w->slots[id];
	mark_ancestors(w, ix, id, 1);
}

void coord_warm_set_clean(struct coord_warm *w, const struct coord_index *ix, uint32_t id)
{
	if (!w->slots_total || id >= w->nodes_max || w->dirty[id] == COORD_WARM_CLEAN)
		return;
	w->dirty[id] = COORD_WARM_CLEAN;
	w->row_drop_child[id] = COORD_NONE;
	w->dirty_records--;
	w->dirty_slots -= w->slots[id];
	mark_ancestors(w, ix, id, -1);
}

void coord_warm_set_writing(struct coord_warm *w, uint32_t id)
{
	SEL_ASSERT(w->slots_total && id < w->nodes_max && w->dirty[id] == COORD_WARM_DIRTY);
	w->dirty[id] = COORD_WARM_WRITING;
}

void coord_warm_write_failed(struct coord_warm *w, uint32_t id)
{
	SEL_ASSERT(w->slots_total && id < w->nodes_max && w->dirty[id] == COORD_WARM_WRITING);
	w->dirty[id] = COORD_WARM_DIRTY;
}

void coord_warm_want_row_drop(struct coord_warm *w, uint32_t id, uint32_t child)
{
	SEL_ASSERT(w->slots_total && id < w->nodes_max && w->dirty[id] != COORD_WARM_CLEAN);
	w->row_drop_child[id] = child;
}

uint32_t coord_warm_dirty_victim(const struct coord_warm *w, const struct coord_index *ix,
				 uint32_t from)
{
	for (uint32_t id = from; id != COORD_NONE; id = w->links[id].next) {
		uint32_t parent = ix->nodes[id].parent_id;

		if (w->dirty[id] == COORD_WARM_DIRTY && ix->nodes[id].state == COORD_READY &&
		    (parent == COORD_NONE || w->dirty[parent] == COORD_WARM_CLEAN))
			return id;
	}
	return COORD_NONE;
}

void coord_warm_forget(struct coord_warm *w, uint32_t id)
{
	if (!w->slots_total || id >= w->nodes_max || !w->slots[id])
		return;
	/* A dirty record's slots go only with it (coord_warm_set_clean first). */
	SEL_ASSERT(w->dirty[id] == COORD_WARM_CLEAN);
	unlist(w, id);
	w->slots_used -= w->slots[id];
	w->slots[id] = 0;
}

void coord_warm_drop_row(struct coord_warm *w, uint32_t id, uint32_t tail_pages)
{
	if (!w->slots_total || w->slots[id] != tail_pages + w->row_slots)
		return; /* not warm, or its row is gone already */
	/* A record of no pages is nothing without its row (shard_warm_drop). */
	if (tail_pages == 0) {
		coord_warm_forget(w, id);
		return;
	}
	SEL_ASSERT(w->dirty[id] == COORD_WARM_CLEAN);
	if (w->listed[id])
		w->listed_slots -= w->row_slots;
	w->slots[id] -= w->row_slots;
	w->slots_used -= w->row_slots;
}

void coord_warm_touch(struct coord_warm *w, uint32_t id)
{
	if (!coord_warm_holds(w, id) || w->list.tail == id)
		return;
	unlist(w, id);
	list_last(w, id);
}

uint32_t coord_warm_victim(const struct coord_warm *w, const struct coord_index *ix,
			   uint32_t from)
{
	for (uint32_t id = from; id != COORD_NONE; id = w->links[id].next) {
		const struct coord_node *n = &ix->nodes[id];

		if (n->state == COORD_READY && n->pins == 0 && w->dirty[id] == COORD_WARM_CLEAN &&
		    w->dirty_below[id] == 0)
			return id;
	}
	return COORD_NONE;
}
