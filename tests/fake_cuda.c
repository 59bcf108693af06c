/* A fake CUDA driver: see fake_cuda.h. */
#include "tests/fake_cuda.h"

#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_CONTEXT ((CUcontext)(uintptr_t)0x1000)

struct fake_cuda_state fake_cuda;
/*
 * The context current on each thread, in a pthread key: a thread-local
 * variable of a library loaded by dlopen is one LeakSanitizer cannot scan.
 */
static pthread_key_t current_key;
static pthread_once_t current_once = PTHREAD_ONCE_INIT;

static void current_key_make(void)
{
	if (pthread_key_create(&current_key, NULL))
		abort();
}

static CUcontext current_get(void)
{
	pthread_once(&current_once, current_key_make);
	return pthread_getspecific(current_key);
}
static uintptr_t next_handle = 0x2000;

#define EXPORT __attribute__((visibility("default")))

EXPORT CUresult cuInit(unsigned int flags)
{
	(void)flags;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count)
{
	*count = 1;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	if (ordinal != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*device = 0;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device)
{
	(void)device;
	*context = FAKE_CONTEXT;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device)
{
	(void)device;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext context)
{
	pthread_once(&current_once, current_key_make);
	return pthread_setspecific(current_key, context) ? CUDA_ERROR_OUT_OF_MEMORY
							 : CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *context)
{
	*context = current_get();
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
	*least = 0;
	*greatest = -5;
	return CUDA_SUCCESS;
}

static CUresult in_context(void)
{
	return current_get() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

EXPORT CUresult cuStreamCreateWithPriority(CUstream *stream, unsigned int flags, int priority)
{
	(void)flags;
	(void)priority;
	*stream = (CUstream)next_handle++;
	return in_context();
}

EXPORT CUresult cuStreamDestroy_v2(CUstream stream)
{
	(void)stream;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventCreate(CUevent *event, unsigned int flags)
{
	(void)flags;
	*event = (CUevent)next_handle++;
	return in_context();
}

EXPORT CUresult cuEventDestroy_v2(CUevent event)
{
	(void)event;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(CUevent event, CUstream stream)
{
	(void)event;
	(void)stream;
	return in_context();
}

EXPORT CUresult cuEventSynchronize(CUevent event)
{
	(void)event;
	fake_cuda.syncs++;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags)
{
	(void)p;
	(void)bytes;
	if (!current_get())
		return CUDA_ERROR_INVALID_CONTEXT;
	if ((flags & CU_MEMHOSTREGISTER_READ_ONLY) && fake_cuda.refuse_read_only)
		return CUDA_ERROR_NOT_SUPPORTED;
	fake_cuda.registered++;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemHostUnregister(void *p)
{
	(void)p;
	if (!current_get())
		return CUDA_ERROR_INVALID_CONTEXT;
	if (fake_cuda.refuse_unregister)
		return CUDA_ERROR_NOT_PERMITTED;
	fake_cuda.registered--;
	return CUDA_SUCCESS;
}

/* One async copy call counted; CUDA_ERROR_ILLEGAL_ADDRESS at copy_fail_at. */
static CUresult copy_call(void)
{
	if (!current_get())
		return CUDA_ERROR_INVALID_CONTEXT;
	fake_cuda.copy_calls++;
	return fake_cuda.copy_calls == fake_cuda.copy_fail_at ? CUDA_ERROR_ILLEGAL_ADDRESS
							      : CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes,
				     CUstream stream)
{
	CUresult r = copy_call();

	(void)stream;
	if (r == CUDA_SUCCESS)
		memcpy((void *)(uintptr_t)dst, src, bytes);
	return r;
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, CUstream stream)
{
	CUresult r = copy_call();

	(void)stream;
	if (r == CUDA_SUCCESS)
		memcpy(dst, (const void *)(uintptr_t)src, bytes);
	return r;
}

EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
				      size_t count, CUmemcpyAttributes *attrs,
				      size_t *attr_indices, size_t attr_count, CUstream stream)
{
	CUresult r = copy_call();

	(void)stream;
	if (r != CUDA_SUCCESS)
		return r;
	if (!count || !attrs || !attr_indices || attr_count != 1 || attr_indices[0] != 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++)
		memcpy((void *)(uintptr_t)dsts[i], (const void *)(uintptr_t)srcs[i], sizes[i]);
	return CUDA_SUCCESS;
}

/* As documented: each pitch at least the width, host or device on either side. */
EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *m, CUstream stream)
{
	CUresult r = copy_call();
	const char *src;
	char *dst;

	(void)stream;
	if (r != CUDA_SUCCESS)
		return r;
	if (m->srcPitch < m->WidthInBytes || m->dstPitch < m->WidthInBytes ||
	    m->srcXInBytes || m->srcY || m->dstXInBytes || m->dstY)
		return CUDA_ERROR_INVALID_VALUE;
	src = m->srcMemoryType == CU_MEMORYTYPE_HOST ? m->srcHost
						     : (const void *)(uintptr_t)m->srcDevice;
	dst = m->dstMemoryType == CU_MEMORYTYPE_HOST ? m->dstHost
						     : (void *)(uintptr_t)m->dstDevice;
	for (size_t row = 0; row < m->Height; row++)
		memcpy(dst + row * m->dstPitch, src + row * m->srcPitch, m->WidthInBytes);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes)
{
	void *q;

	if (fake_cuda.refuse_alloc)
		return CUDA_ERROR_OUT_OF_MEMORY;
	q = malloc(bytes);
	if (!q)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = (CUdeviceptr)(uintptr_t)q;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
	free((void *)(uintptr_t)p);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes)
{
	memcpy((void *)(uintptr_t)dst, src, bytes);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes)
{
	memcpy(dst, (const void *)(uintptr_t)src, bytes);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult result, const char **text)
{
	static char buf[32];

	snprintf(buf, sizeof(buf), "fake CUresult %d", (int)result);
	*text = buf;
	return CUDA_SUCCESS;
}
