/*
 * The pointer lists (common/list.h): a doubly linked list through links
 * inside separately allocated elements, two lists through one element,
 * push at either end, removal at the head, middle and tail, and the hash
 * bucket chain with its assertion that what it removes was on it.
 */
#include "tests/testutil.h"

#include "common/list.h"


struct elem {
	uint32_t value;
	struct sel_link by_age, by_use; /* two lists through one element */
	struct sel_chain hash;
};

static struct elem *age_elem(struct sel_link *l)
{
	return sel_list_entry(l, struct elem, by_age);
}

/* Values on l (through by_age) from head to tail, checking each link back; the count. */
static uint32_t list_walk(const struct sel_list *l, uint32_t *out)
{
	struct sel_link *prev = NULL;
	uint32_t n = 0;

	for (struct elem *e = age_elem(l->head); e; e = age_elem(e->by_age.next)) {
		assert_ptr_equal(e->by_age.prev, prev);
		out[n++] = e->value;
		prev = &e->by_age;
	}
	assert_ptr_equal(l->tail, prev);
	assert_int_equal(sel_list_empty(l), n == 0);
	return n;
}

/* Push last and first, remove head, middle and tail; a second list is untouched. */
static void test_list_push_and_remove(void **state)
{
	struct elem e[4] = { { .value = 0 }, { .value = 1 }, { .value = 2 }, { .value = 3 } };
	struct sel_list age, use;
	uint32_t got[4];

	(void)state;
	sel_list_init(&age);
	sel_list_init(&use);
	assert_null(age_elem(age.head));
	assert_int_equal(list_walk(&age, got), 0);
	sel_list_push_tail(&age, &e[2].by_age);
	sel_list_push_head(&age, &e[1].by_age);
	sel_list_push_head(&age, &e[0].by_age);
	sel_list_push_tail(&age, &e[3].by_age);
	for (uint32_t i = 0; i < 4; i++)
		sel_list_push_head(&use, &e[i].by_use);
	assert_int_equal(list_walk(&age, got), 4);
	for (uint32_t i = 0; i < 4; i++)
		assert_int_equal(got[i], i);
	sel_list_remove(&age, &e[1].by_age); /* middle */
	assert_null(e[1].by_age.prev);
	assert_null(e[1].by_age.next);
	sel_list_remove(&age, &e[0].by_age); /* head */
	sel_list_remove(&age, &e[3].by_age); /* tail */
	assert_int_equal(list_walk(&age, got), 1);
	assert_int_equal(got[0], 2);
	sel_list_remove(&age, &e[2].by_age);
	assert_int_equal(list_walk(&age, got), 0);
	/* the other list still runs 3, 2, 1, 0 */
	assert_ptr_equal(sel_list_entry(use.head, struct elem, by_use), &e[3]);
	assert_ptr_equal(sel_list_entry(use.tail, struct elem, by_use), &e[0]);
	sel_list_remove(&use, &e[3].by_use);
	assert_ptr_equal(sel_list_entry(use.head, struct elem, by_use), &e[2]);
	assert_null(e[2].by_use.prev);
}

/* A chain pushes first and removes from its head, middle and end. */
static void test_list_chain_push_and_remove(void **state)
{
	struct elem e[3] = { { .value = 0 }, { .value = 1 }, { .value = 2 } };
	struct sel_chain *bucket = NULL;

	(void)state;
	for (uint32_t i = 0; i < 3; i++)
		sel_chain_push(&bucket, &e[i].hash); /* 2, 1, 0 */
	assert_ptr_equal(sel_list_entry(bucket, struct elem, hash), &e[2]);
	sel_chain_remove(&bucket, &e[1].hash); /* middle */
	assert_ptr_equal(bucket->next, &e[0].hash);
	sel_chain_remove(&bucket, &e[0].hash); /* end */
	assert_null(bucket->next);
	sel_chain_remove(&bucket, &e[2].hash); /* head */
	assert_null(bucket);
}

/* The chain remove_absent() removes from (a child's copy of it). */
static struct sel_chain *absent_bucket;

/* Removes e, which is not on it, from the chain at absent_bucket. */
static void remove_absent(void *e)
{
	sel_chain_remove(&absent_bucket, &((struct elem *)e)->hash);
}

/* Removing an element that is not on the chain is a programmer error: SEL_ASSERT. */
static void test_list_chain_remove_absent_aborts(void **state)
{
	struct elem on = { .value = 0 }, off = { .value = 1 };

	(void)state;
	absent_bucket = NULL;
	sel_chain_push(&absent_bucket, &on.hash);
	tu_assert_aborts(remove_absent, &off);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_list_push_and_remove),
		cmocka_unit_test(test_list_chain_push_and_remove),
		cmocka_unit_test(test_list_chain_remove_absent_aborts),
	};

	return cmocka_run_group_tests_name("list", tests, NULL, NULL);
}
