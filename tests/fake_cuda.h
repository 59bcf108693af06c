/*
 * A fake CUDA driver for the tests (tests/fake_cuda.c), built as
 * libcuda.so.1 into build/tests/fake-cuda/, which test_device_cuda's run
 * path puts ahead of any real driver: shard/device_cuda.c dlopens it as
 * it would the real one. Device memory is host memory (a CUdeviceptr is a
 * host address), copies are done when issued, and each call behaves as
 * the driver API documents the parts the backend relies on: a context is
 * current per thread, registration and copies need one, READ_ONLY
 * registration is refused where the device lacks it. Its state is fake_cuda, which a
 * test finds with dlsym on the same library.
 */
#ifndef SELENE_TESTS_FAKE_CUDA_H
#define SELENE_TESTS_FAKE_CUDA_H

#include <stdbool.h>
#include <stdint.h>

struct fake_cuda_state {
	bool refuse_read_only;   /* READ_ONLY registration: CUDA_ERROR_NOT_SUPPORTED */
	bool refuse_unregister;  /* cuMemHostUnregister: CUDA_ERROR_NOT_PERMITTED */
	bool refuse_alloc;       /* cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY */
	int copy_fail_at;        /* that async copy call fails (0: none), counted below */
	int copy_calls;          /* async copy calls: batch, 1D and 2D */
	int registered;          /* ranges registered and not unregistered */
	int syncs;               /* event synchronizations */
};

#endif
