/*
 * Intrusive lists of elements named by pointer: the sibling of
 * common/idlist.h for elements that live apart (each allocated on its
 * own) rather than in one array. An element carries a struct sel_link
 * per doubly linked list it may be on, and a struct sel_chain per hash
 * bucket chain; sel_list_entry() turns a link back into its element.
 * Lists end in NULL at both sides (not a ring), so an empty list is all
 * zeroes. No allocation, no locking: the caller owns the elements and
 * serializes its use.
 */
#ifndef SELENE_COMMON_LIST_H
#define SELENE_COMMON_LIST_H

#include "common/base.h"

#include <stdbool.h>
#include <stddef.h>

struct sel_link {
	struct sel_link *prev, *next; /* NULL at either end */
};

struct sel_list {
	struct sel_link *head, *tail; /* NULL when empty */
};

/* One link of a singly linked hash bucket chain: the bucket is a struct sel_chain *. */
struct sel_chain {
	struct sel_chain *next; /* NULL at the end */
};

/* The element whose member link is at link, or NULL when link is NULL. */
#define sel_list_entry(link, type, member) \
	((type *)sel_list_base_((link), offsetof(type, member)))

static inline void *sel_list_base_(const void *link, size_t offset)
{
	return link ? (char *)link - offset : NULL;
}

/*
 * Walks the chain at bucket: pos, declared here as a type *, is each of
 * its elements in turn. The walk must not remove pos.
 */
#define sel_chain_for_each(pos, bucket, type, member)              \
	for (type *pos = sel_list_entry((bucket), type, member); pos; \
	     pos = sel_list_entry(pos->member.next, type, member))

/* An empty list. */
static inline void sel_list_init(struct sel_list *l)
{
	l->head = l->tail = NULL;
}

static inline bool sel_list_empty(const struct sel_list *l)
{
	return !l->head;
}

/* Puts n (not on a list) last. */
static inline void sel_list_push_tail(struct sel_list *l, struct sel_link *n)
{
	n->prev = l->tail;
	n->next = NULL;
	if (l->tail)
		l->tail->next = n;
	else
		l->head = n;
	l->tail = n;
}

/* Puts n (not on a list) first. */
static inline void sel_list_push_head(struct sel_list *l, struct sel_link *n)
{
	n->prev = NULL;
	n->next = l->head;
	if (l->head)
		l->head->prev = n;
	else
		l->tail = n;
	l->head = n;
}

/* Takes n (on l) off it, in O(1). */
static inline void sel_list_remove(struct sel_list *l, struct sel_link *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->tail = n->prev;
	n->prev = n->next = NULL;
}

/* Puts n (on no chain) first on the chain at *bucket. */
static inline void sel_chain_push(struct sel_chain **bucket, struct sel_chain *n)
{
	n->next = *bucket;
	*bucket = n;
}

/* Takes n off the chain at *bucket, where it must be; O(the chain's length). */
static inline void sel_chain_remove(struct sel_chain **bucket, struct sel_chain *n)
{
	struct sel_chain **pp = bucket;

	while (*pp != n) {
		SEL_ASSERT(*pp); /* n was on this chain */
		pp = &(*pp)->next;
	}
	*pp = n->next;
	n->next = NULL;
}

#endif
