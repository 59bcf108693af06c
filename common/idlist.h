/*
 * An intrusive doubly linked list of elements named by id (an index into
 * the caller's array): each element carries a struct sel_idlink, found at
 * base + id * stride, so one list code serves links kept inside an array
 * of structs (the index's LRU in its nodes) and an array of links alone
 * (the warm tier's LRU, per node id). Ids, not pointers, so the links stay
 * valid wherever the array is and take 8 bytes an element. No allocation,
 * no locking: the caller owns the array and serializes its use.
 */
#ifndef SELENE_COMMON_IDLIST_H
#define SELENE_COMMON_IDLIST_H

#include <stddef.h>
#include <stdint.h>

#define SEL_IDLIST_NONE UINT32_MAX

struct sel_idlink {
	uint32_t prev, next; /* SEL_IDLIST_NONE at either end */
};

struct sel_idlist {
	uint32_t head, tail; /* SEL_IDLIST_NONE when empty */
	char *base;          /* element 0's link */
	size_t stride;       /* bytes from one element's link to the next's */
};

/* An empty list over the links at base, stride bytes apart (base may be NULL: no list). */
static inline void sel_idlist_init(struct sel_idlist *l, void *base, size_t stride)
{
	l->head = l->tail = SEL_IDLIST_NONE;
	l->base = base;
	l->stride = stride;
}

/* Element id's link. */
static inline struct sel_idlink *sel_idlist_link(const struct sel_idlist *l, uint32_t id)
{
	return (struct sel_idlink *)(l->base + (size_t)id * l->stride);
}

/* Takes id (on the list) off it. */
static inline void sel_idlist_remove(struct sel_idlist *l, uint32_t id)
{
	struct sel_idlink *n = sel_idlist_link(l, id);

	if (n->prev != SEL_IDLIST_NONE)
		sel_idlist_link(l, n->prev)->next = n->next;
	else
		l->head = n->next;
	if (n->next != SEL_IDLIST_NONE)
		sel_idlist_link(l, n->next)->prev = n->prev;
	else
		l->tail = n->prev;
	n->prev = n->next = SEL_IDLIST_NONE;
}

/* Puts id (not on the list) after element after, or first when after is SEL_IDLIST_NONE. */
static inline void sel_idlist_insert_after(struct sel_idlist *l, uint32_t after, uint32_t id)
{
	struct sel_idlink *n = sel_idlist_link(l, id);

	n->prev = after;
	n->next = after == SEL_IDLIST_NONE ? l->head : sel_idlist_link(l, after)->next;
	if (after == SEL_IDLIST_NONE)
		l->head = id;
	else
		sel_idlist_link(l, after)->next = id;
	if (n->next == SEL_IDLIST_NONE)
		l->tail = id;
	else
		sel_idlist_link(l, n->next)->prev = id;
}

/* Puts id (not on the list) last. */
static inline void sel_idlist_push_tail(struct sel_idlist *l, uint32_t id)
{
	sel_idlist_insert_after(l, l->tail, id);
}

/* The element after id, or SEL_IDLIST_NONE. */
static inline uint32_t sel_idlist_next(const struct sel_idlist *l, uint32_t id)
{
	return sel_idlist_link(l, id)->next;
}

/* The element before id, or SEL_IDLIST_NONE. */
static inline uint32_t sel_idlist_prev(const struct sel_idlist *l, uint32_t id)
{
	return sel_idlist_link(l, id)->prev;
}

#endif
