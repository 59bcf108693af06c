/*
 * The cuda device backend (shard/device_cuda.c) against a fake driver
 * (tests/fake_cuda.h), which this binary's run path loads as libcuda.so.1:
 * the backend's own calls as it makes them on a GPU host, where no GPU is.
 * A registration the driver refuses (READ_ONLY on a device without it,
 * the pool's arena) or a failed unregistration leaves the device usable:
 * later copies and waits succeed, byte-exact. A failed copy poisons the
 * device: every later copy and wait fails. Batched and strided copies
 * land where the driver API's parameters say. Closing the device, or an
 * engine whose staging and warm tier it registered, on the application's
 * thread undoes every registration and leaves that thread's own context
 * current (none, too).
 * What it is not: a test of a real driver (make test-gpu, on a GPU host).
 */
#include "tests/testutil.h"

#ifndef SEL_HAVE_CUDA_H
/* Built without cuda.h: there is no cuda backend to test. */
static void test_device_cuda_needs_cuda_h(void **state)
{
	(void)state;
	print_message("skipped: built without the CUDA toolkit's cuda.h\n");
	skip();
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_device_cuda_needs_cuda_h) };

	return cmocka_run_group_tests(tests, NULL, NULL);
}
#else

#include "common/base.h"
#include "common/log.h"
#include "shard/device.h"
#include "shard/engine.h"
#include "tests/fake_cuda.h"

#include <cuda.h>

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLANES 3u
#define ROWS 8u
#define ROW_BYTES 1000u
#define HOST_PITCH 12288u

struct fixture {
	struct shard_device *dev;
	struct fake_cuda_state *fake;
	CUresult (*set_current)(CUcontext context); /* the fake's, as the application calls it */
	CUresult (*get_current)(CUcontext *context);
};

/* A context of the application's own, not the device's primary one. */
#define APP_CONTEXT ((CUcontext)(uintptr_t)0x7777)

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char why[256] = "";
	void *lib;
	int ret;

	assert_non_null(f);
	*state = f;
	ret = shard_device_open_cuda(0, &f->dev, why, sizeof(why));
	if (ret) {
		print_message("no cuda device (%s)\n", why);
		return 0;
	}
	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	f->fake = lib ? dlsym(lib, "fake_cuda") : NULL;
	if (f->fake) {
		*(void **)&f->set_current = dlsym(lib, "cuCtxSetCurrent");
		*(void **)&f->get_current = dlsym(lib, "cuCtxGetCurrent");
	}
	if (lib)
		dlclose(lib);
	if (!f->fake)
		print_message("libcuda.so.1 is not the fake driver\n");
	else
		memset(f->fake, 0, sizeof(*f->fake));
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	if (f->dev)
		shard_device_close(f->dev);
	free(f);
	return 0;
}

/* The fixture's device on the fake driver; skips where there is none. */
static struct fixture *fake_device(void **state)
{
	struct fixture *f = *state;

	if (!f->dev || !f->fake)
		skip();
	return f;
}

/* Copies bytes of src into dst as one host-to-device entry, then waits; the result. */
static int copy_in(struct shard_device *dev, void *dst, const void *src, uint64_t bytes)
{
	struct shard_copy c = { .device_address = (uint64_t)(uintptr_t)dst, .host = (void *)src,
				.bytes = bytes };
	int ret = shard_device_copy(dev, SHARD_HOST_TO_DEVICE, &c, 1);

	return ret ? ret : shard_device_synchronize(dev);
}

/* The pool's arena refused READ_ONLY: that registration fails, the device's copies do not. */
static void test_device_cuda_refused_registration_leaves_device_usable(void **state)
{
	struct fixture *f = fake_device(state);
	static uint8_t arena[1u << 16], dst[4096];

	tu_fill(arena, sizeof(arena), 3);
	f->fake->refuse_read_only = true;
	assert_int_equal(shard_device_register_read_only(f->dev, arena, sizeof(arena)), -EIO);
	assert_int_equal(f->fake->registered, 0);
	memset(dst, 0, sizeof(dst));
	assert_int_equal(copy_in(f->dev, dst, arena, sizeof(dst)), 0);
	assert_memory_equal(dst, arena, sizeof(dst));
	/* accepted where the device has it */
	f->fake->refuse_read_only = false;
	assert_int_equal(shard_device_register_read_only(f->dev, arena, sizeof(arena)), 0);
	assert_int_equal(f->fake->registered, 1);
	f->dev->ops->unregister_host(f->dev, arena);
	assert_int_equal(f->fake->registered, 0);
}

/* A failed unregistration and a refused allocation are their calls' failures alone. */
static void test_device_cuda_failed_unregister_and_alloc_leave_device_usable(void **state)
{
	struct fixture *f = fake_device(state);
	static uint8_t host[8192], dst[8192];
	uint64_t address = 1;

	tu_fill(host, sizeof(host), 5);
	assert_int_equal(f->dev->ops->register_host(f->dev, host, sizeof(host)), 0);
	f->fake->refuse_unregister = true;
	f->dev->ops->unregister_host(f->dev, host);
	f->fake->refuse_alloc = true;
	assert_int_equal(shard_device_cuda_alloc(f->dev, 4096, &address), -EIO);
	assert_int_equal(address, 0);
	assert_int_equal(copy_in(f->dev, dst, host, sizeof(dst)), 0);
	assert_memory_equal(dst, host, sizeof(dst));
}

/* A copy the driver fails poisons the device: later copies and waits fail too. */
static void test_device_cuda_failed_copy_poisons(void **state)
{
	struct fixture *f = fake_device(state);
	static uint8_t host[4096], dst[4096];

	tu_fill(host, sizeof(host), 7);
	assert_int_equal(copy_in(f->dev, dst, host, sizeof(dst)), 0);
	f->fake->copy_fail_at = f->fake->copy_calls + 1;
	assert_int_equal(copy_in(f->dev, dst, host, sizeof(dst)), -EIO);
	assert_int_equal(shard_device_synchronize(f->dev), -EIO);
	assert_int_equal(copy_in(f->dev, dst, host, sizeof(dst)), -EIO);
	assert_int_equal(shard_device_mark(f->dev, 0), 0);
	assert_int_equal(shard_device_wait_mark(f->dev, 0), -EIO);
}

/* Many entries in one call (cuMemcpyBatchAsync) each land where they say, both ways. */
static void test_device_cuda_batched_copies_land(void **state)
{
	struct fixture *f = fake_device(state);
	static uint8_t host[64][512], device[64][512], back[64][512];
	struct shard_copy c[64];

	tu_fill(host, sizeof(host), 9);
	for (uint32_t i = 0; i < 64; i++)
		c[i] = (struct shard_copy){ .device_address = (uint64_t)(uintptr_t)device[63 - i],
					    .host = host[i], .bytes = 512 };
	assert_int_equal(shard_device_copy(f->dev, SHARD_HOST_TO_DEVICE, c, 64), 0);
	for (uint32_t i = 0; i < 64; i++)
		c[i].host = back[i];
	assert_int_equal(shard_device_copy(f->dev, SHARD_DEVICE_TO_HOST, c, 64), 0);
	assert_int_equal(shard_device_synchronize(f->dev), 0);
	for (uint32_t i = 0; i < 64; i++)
		assert_memory_equal(device[63 - i], host[i], 512);
	assert_memory_equal(back, host, sizeof(host));
	assert_true(f->fake->copy_calls < 64); /* batched, not a call an entry */
}

/*
 * A plane of a record in the arena (rows a host pitch apart) into device
 * pages (another pitch), and back: one cuMemcpy2DAsync a plane, byte-exact,
 * the bytes between rows untouched.
 */
static void test_device_cuda_strided_copies_land(void **state)
{
	struct fixture *f = fake_device(state);
	static uint8_t host[PLANES][ROWS][HOST_PITCH], device[PLANES][ROWS][ROW_BYTES + 24];
	static uint8_t back[PLANES][ROWS][HOST_PITCH];
	struct shard_copy_strided c[PLANES];
	int calls;

	tu_fill(host, sizeof(host), 11);
	memset(device, 0xee, sizeof(device));
	memset(back, 0, sizeof(back));
	for (uint32_t p = 0; p < PLANES; p++)
		c[p] = (struct shard_copy_strided){
			.device_address = (uint64_t)(uintptr_t)device[p],
			.device_pitch = ROW_BYTES + 24, .host = host[p], .host_pitch = HOST_PITCH,
			.bytes = ROW_BYTES, .rows = ROWS };
	calls = f->fake->copy_calls;
	assert_int_equal(shard_device_copy_strided(f->dev, SHARD_HOST_TO_DEVICE, c, PLANES), 0);
	assert_int_equal(f->fake->copy_calls - calls, PLANES);
	for (uint32_t p = 0; p < PLANES; p++)
		c[p].host = back[p];
	assert_int_equal(shard_device_copy_strided(f->dev, SHARD_DEVICE_TO_HOST, c, PLANES), 0);
	assert_int_equal(shard_device_synchronize(f->dev), 0);
	for (uint32_t p = 0; p < PLANES; p++) {
		for (uint32_t r = 0; r < ROWS; r++) {
			assert_memory_equal(device[p][r], host[p][r], ROW_BYTES);
			assert_memory_equal(back[p][r], host[p][r], ROW_BYTES);
			for (uint32_t b = ROW_BYTES; b < ROW_BYTES + 24; b++)
				assert_int_equal(device[p][r][b], 0xee);
		}
	}
}

/* The context current on this thread (the fake's: one for the process). */
static CUcontext current_context(struct fixture *f)
{
	CUcontext c = NULL;

	assert_int_equal(f->get_current(&c), CUDA_SUCCESS);
	return c;
}

/* The application's context, current when the device closes, is current after it. */
static void test_device_cuda_close_puts_back_the_callers_context(void **state)
{
	struct fixture *f = fake_device(state);
	struct shard_device_binding binding;

	assert_int_equal(f->set_current(APP_CONTEXT), CUDA_SUCCESS);
	assert_int_equal(shard_device_bind_for(f->dev, &binding), 0);
	assert_true(current_context(f) != APP_CONTEXT);
	shard_device_unbind(f->dev, &binding);
	assert_ptr_equal(current_context(f), APP_CONTEXT);
	shard_device_close(f->dev);
	f->dev = NULL;
	assert_ptr_equal(current_context(f), APP_CONTEXT);
}

struct closing {
	struct fixture *f;
	struct shard_engine *engine;
	CUcontext after; /* current on the closing thread after the close */
};

/* Closes the engine on a thread that never made a context current. */
static void *engine_close_thread(void *arg)
{
	struct closing *c = arg;

	shard_engine_close(c->engine);
	c->after = current_context(c->f);
	return NULL;
}

/*
 * An engine with staging and a warm tier registered, closed where no
 * context is current (a thread that never used CUDA): every registration
 * is undone, and still no context is current after it.
 */
static void test_device_cuda_engine_close_unregisters_on_any_thread(void **state)
{
	struct fixture *f = fake_device(state);
	static uint8_t planes[3][200 * 8192], row[2 * 60000];
	struct shard_planes p = { 0 };
	struct shard_engine *engine = NULL;
	struct rec_identity ns;
	struct rec_geometry g;
	struct rec_scan scan;
	struct rec_dir *dir;
	char *base = tu_make_temp_dir("cuda-engine");
	struct closing closing;
	pthread_t thread;
	char err[256];

	tu_geometry(&g, 64, 3, 8192, 60000, 1, 2);
	g.page_count = 200;
	tu_identities(NULL, &ns);
	dir = tu_dir_open(base, &g, true);
	assert_int_equal(rec_dir_scan(dir, &scan), 0);
	rec_scan_free(&scan);
	for (uint32_t i = 0; i < 3; i++)
		p.page_base[i] = (uintptr_t)planes[i];
	p.row_base = (uintptr_t)row;
	{
		struct shard_engine_options options = {
			.geometry = &g, .dir = dir, .device = f->dev, .planes = &p,
			.window_pages = 4, .jobs_max = 8, .register_pool = true,
			.checksum_threads = 1, .warm_bytes = 4u << 20 };

		if (shard_engine_open(&options, &engine, err, sizeof(err)) != 0)
			fail_msg("engine: %s", err);
	}
	assert_true(f->fake->registered >= 2); /* the staging and the warm tier */
	closing = (struct closing){ .f = f, .engine = engine };
	assert_int_equal(pthread_create(&thread, NULL, engine_close_thread, &closing), 0);
	pthread_join(thread, NULL);
	assert_int_equal(f->fake->registered, 0);
	assert_null(closing.after);
	rec_dir_close(dir);
	tu_remove_tree(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
			test_device_cuda_refused_registration_leaves_device_usable, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			test_device_cuda_failed_unregister_and_alloc_leave_device_usable, setup,
			teardown),
		cmocka_unit_test_setup_teardown(test_device_cuda_failed_copy_poisons, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_device_cuda_batched_copies_land, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_device_cuda_strided_copies_land, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_device_cuda_close_puts_back_the_callers_context,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_device_cuda_engine_close_unregisters_on_any_thread, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
