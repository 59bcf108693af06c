/*
 * The CUDA backend, and the only file that knows the CUDA driver API:
 * libcuda.so.1 is loaded with dlopen, its functions looked up once into a
 * table (pthread_once), required and optional symbols kept apart, and a host
 * without the driver gets a clean "not available, because ...". Types come
 * from the toolkit's cuda.h; without it the backend says it was not built.
 */
#include "shard/device.h"

#include "common/base.h"
#include "common/log.h"
#include "selene/selene.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SEL_HAVE_CUDA_H

int shard_device_open_cuda(int ordinal, struct shard_device **out, char *why,
			   size_t why_size)
{
	(void)ordinal;
	*out = NULL;
	snprintf(why, why_size, "the cuda backend was not built (no cuda.h at build time)");
	return -ENOSYS;
}

bool shard_device_is_cuda(const struct shard_device *dev)
{
	(void)dev;
	return false;
}

int shard_device_cuda_alloc(struct shard_device *dev, uint64_t bytes,
			    uint64_t *address)
{
	(void)dev;
	(void)bytes;
	(void)address;
	return -ENOSYS;
}

void shard_device_cuda_free(struct shard_device *dev, uint64_t address)
{
	(void)dev;
	(void)address;
}

int shard_device_cuda_memcpy(struct shard_device *dev, enum shard_copy_direction dir,
			     uint64_t address, void *host, uint64_t bytes)
{
	(void)dev;
	(void)dir;
	(void)address;
	(void)host;
	(void)bytes;
	return -ENOSYS;
}

#else

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>

/* The driver functions Selene calls, by their exported (versioned) names. */
struct cuda_api {
	CUresult (*init)(unsigned int);
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*device_get_count)(int *);
	CUresult (*primary_ctx_retain)(CUcontext *, CUdevice);
	CUresult (*primary_ctx_release)(CUdevice);
	CUresult (*ctx_set_current)(CUcontext);
	CUresult (*ctx_get_current)(CUcontext *);
	CUresult (*ctx_get_stream_priority_range)(int *, int *);
	CUresult (*stream_create_with_priority)(CUstream *, unsigned int, int);
	CUresult (*stream_destroy)(CUstream);
	CUresult (*event_create)(CUevent *, unsigned int);
	CUresult (*event_destroy)(CUevent);
	CUresult (*event_record)(CUevent, CUstream);
	CUresult (*event_synchronize)(CUevent);
	CUresult (*mem_host_register)(void *, size_t, unsigned int);
	CUresult (*mem_host_unregister)(void *);
	CUresult (*memcpy_htod_async)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*memcpy_dtoh_async)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
	CUresult (*memcpy_htod)(CUdeviceptr, const void *, size_t);
	CUresult (*memcpy_dtoh)(void *, CUdeviceptr, size_t);
	CUresult (*get_error_string)(CUresult, const char **);
	CUresult (*memcpy_2d_async)(const CUDA_MEMCPY2D *, CUstream);
	/* optional: the CUDA 13 batched copy */
	CUresult (*memcpy_batch_async)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t,
				       CUmemcpyAttributes *, size_t *, size_t, CUstream);
};

static struct cuda_api api;
static char api_error[256];
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static const struct {
	const char *symbol;
	size_t offset;
	bool optional;
} api_symbols[] = {
#define REQUIRED(field, name) { name, offsetof(struct cuda_api, field), false }
#define OPTIONAL(field, name) { name, offsetof(struct cuda_api, field), true }
	REQUIRED(init, "cuInit"),
	REQUIRED(device_get, "cuDeviceGet"),
	REQUIRED(device_get_count, "cuDeviceGetCount"),
	REQUIRED(primary_ctx_retain, "cuDevicePrimaryCtxRetain"),
	REQUIRED(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2"),
	REQUIRED(ctx_set_current, "cuCtxSetCurrent"),
	REQUIRED(ctx_get_current, "cuCtxGetCurrent"),
	REQUIRED(ctx_get_stream_priority_range, "cuCtxGetStreamPriorityRange"),
	REQUIRED(stream_create_with_priority, "cuStreamCreateWithPriority"),
	REQUIRED(stream_destroy, "cuStreamDestroy_v2"),
	REQUIRED(event_create, "cuEventCreate"),
	REQUIRED(event_destroy, "cuEventDestroy_v2"),
	REQUIRED(event_record, "cuEventRecord"),
	REQUIRED(event_synchronize, "cuEventSynchronize"),
	REQUIRED(mem_host_register, "cuMemHostRegister_v2"),
	REQUIRED(mem_host_unregister, "cuMemHostUnregister"),
	REQUIRED(memcpy_htod_async, "cuMemcpyHtoDAsync_v2"),
	REQUIRED(memcpy_dtoh_async, "cuMemcpyDtoHAsync_v2"),
	REQUIRED(mem_alloc, "cuMemAlloc_v2"),
	REQUIRED(mem_free, "cuMemFree_v2"),
	REQUIRED(memcpy_htod, "cuMemcpyHtoD_v2"),
	REQUIRED(memcpy_dtoh, "cuMemcpyDtoH_v2"),
	REQUIRED(get_error_string, "cuGetErrorString"),
	REQUIRED(memcpy_2d_async, "cuMemcpy2DAsync_v2"),
	OPTIONAL(memcpy_batch_async, "cuMemcpyBatchAsync_v2"),
#undef REQUIRED
#undef OPTIONAL
};

static void api_load(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!lib) {
		snprintf(api_error, sizeof(api_error),
			 "libcuda.so.1 is not available: %s", dlerror());
		return;
	}
	for (size_t i = 0; i < SEL_ARRAY_SIZE(api_symbols); i++) {
		void *fn = dlsym(lib, api_symbols[i].symbol);

		if (!fn && !api_symbols[i].optional) {
			snprintf(api_error, sizeof(api_error),
				 "libcuda.so.1 lacks %s (driver too old?)",
				 api_symbols[i].symbol);
			memset(&api, 0, sizeof(api));
			return;
		}
		memcpy((uint8_t *)&api + api_symbols[i].offset, &fn, sizeof(fn));
	}
}

static const char *cuda_error_name(CUresult result)
{
	const char *text = NULL;

	if (api.get_error_string && api.get_error_string(result, &text) == CUDA_SUCCESS &&
	    text)
		return text;
	return "unknown CUDA error";
}

struct cuda_device {
	struct shard_device base;
	CUdevice device;
	CUcontext context;
	CUstream stream;
	CUevent event;
	CUevent marks[SHARD_DEVICE_MARKS];
	/* the device was poisoned already when the mark was recorded */
	bool mark_poisoned[SHARD_DEVICE_MARKS];
	int first_error; /* poisoned after a failed copy or event (CUresult) */
};

static struct cuda_device *to_cuda(struct shard_device *dev)
{
	return (struct cuda_device *)dev;
}

/*
 * A driver call that failed: logged, -EIO. It leaves the device usable: a
 * registration the driver refuses (no memory; READ_ONLY where the device
 * lacks it) or a failed free is that call's failure alone.
 */
static int cuda_call(CUresult result, const char *what)
{
	if (result == CUDA_SUCCESS)
		return 0;
	sel_error("cuda: %s failed: %s", what, cuda_error_name(result));
	return -EIO;
}

/*
 * A copy or stream event that failed also poisons the device: what its
 * stream ran can no longer be trusted, so every later copy and wait fails.
 */
static int cuda_check(struct cuda_device *cd, CUresult result, const char *what)
{
	if (result == CUDA_SUCCESS)
		return 0;
	if (!cd->first_error)
		cd->first_error = (int)result;
	return cuda_call(result, what);
}

static int cuda_bind(struct shard_device *dev)
{
	return cuda_call(api.ctx_set_current(to_cuda(dev)->context), "cuCtxSetCurrent");
}

static int cuda_bind_saving(struct shard_device *dev, void **previous)
{
	CUcontext current = NULL;
	int ret = cuda_call(api.ctx_get_current(&current), "cuCtxGetCurrent");

	*previous = current;
	return ret ? ret : cuda_bind(dev);
}

/* Puts back the context that was current before cuda_bind_saving (none, too). */
static void cuda_restore(struct shard_device *dev, void *previous)
{
	if ((CUcontext)previous != to_cuda(dev)->context)
		cuda_call(api.ctx_set_current((CUcontext)previous), "cuCtxSetCurrent");
}

static int cuda_register(struct shard_device *dev, void *ptr, uint64_t bytes)
{
	(void)dev;
	return cuda_call(api.mem_host_register(ptr, (size_t)bytes, CU_MEMHOSTREGISTER_PORTABLE),
			 "cuMemHostRegister");
}

/* A read-only mapping (the pool's arena) needs the READ_ONLY flag: the GPU only reads it. */
static int cuda_register_read_only(struct shard_device *dev, const void *ptr, uint64_t bytes)
{
	(void)dev;
	return cuda_call(api.mem_host_register((void *)ptr, (size_t)bytes,
					       CU_MEMHOSTREGISTER_PORTABLE |
					       CU_MEMHOSTREGISTER_READ_ONLY),
			 "cuMemHostRegister(READ_ONLY)");
}

static void cuda_unregister(struct shard_device *dev, void *ptr)
{
	(void)dev;
	cuda_call(api.mem_host_unregister(ptr), "cuMemHostUnregister");
}

static int cuda_copy_batch(struct cuda_device *cd, enum shard_copy_direction dir,
			   const struct shard_copy *copies, uint32_t count)
{
	CUdeviceptr dsts[SHARD_COPY_BATCH_ENTRIES_MAX], srcs[SHARD_COPY_BATCH_ENTRIES_MAX];
	size_t sizes[SHARD_COPY_BATCH_ENTRIES_MAX], attr_index = 0;
	CUmemcpyAttributes attr;

	memset(&attr, 0, sizeof(attr));
	attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
	for (uint32_t i = 0; i < count; i++) {
		CUdeviceptr host = (CUdeviceptr)(uintptr_t)copies[i].host;

		dsts[i] = dir == SHARD_DEVICE_TO_HOST ? host : copies[i].device_address;
		srcs[i] = dir == SHARD_DEVICE_TO_HOST ? copies[i].device_address : host;
		sizes[i] = (size_t)copies[i].bytes;
	}
	return cuda_check(cd, api.memcpy_batch_async(dsts, srcs, sizes, count, &attr,
						     &attr_index, 1, cd->stream),
			  "cuMemcpyBatchAsync");
}

static int cuda_copy(struct shard_device *dev, enum shard_copy_direction dir,
		     const struct shard_copy *copies, uint32_t count)
{
	struct cuda_device *cd = to_cuda(dev);

	SEL_ASSERT(count <= SHARD_COPY_BATCH_ENTRIES_MAX);
	if (cd->first_error)
		return -EIO;
	if (api.memcpy_batch_async)
		return cuda_copy_batch(cd, dir, copies, count);
	for (uint32_t i = 0; i < count; i++) {
		CUresult result = dir == SHARD_DEVICE_TO_HOST ?
			api.memcpy_dtoh_async(copies[i].host, copies[i].device_address,
					      (size_t)copies[i].bytes, cd->stream) :
			api.memcpy_htod_async(copies[i].device_address, copies[i].host,
					      (size_t)copies[i].bytes, cd->stream);

		if (cuda_check(cd, result, "cuMemcpyAsync"))
			return -EIO;
	}
	return 0;
}

/* Each entry one cuMemcpy2DAsync on the stream: the copy engine walks its rows. */
static int cuda_copy_strided(struct shard_device *dev, enum shard_copy_direction dir,
			     const struct shard_copy_strided *copies, uint32_t count)
{
	struct cuda_device *cd = to_cuda(dev);

	if (cd->first_error)
		return -EIO;
	for (uint32_t i = 0; i < count; i++) {
		const struct shard_copy_strided *c = &copies[i];
		CUDA_MEMCPY2D m;

		memset(&m, 0, sizeof(m));
		if (dir == SHARD_DEVICE_TO_HOST) {
			m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
			m.srcDevice = c->device_address;
			m.srcPitch = (size_t)c->device_pitch;
			m.dstMemoryType = CU_MEMORYTYPE_HOST;
			m.dstHost = c->host;
			m.dstPitch = (size_t)c->host_pitch;
		} else {
			m.srcMemoryType = CU_MEMORYTYPE_HOST;
			m.srcHost = c->host;
			m.srcPitch = (size_t)c->host_pitch;
			m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
			m.dstDevice = c->device_address;
			m.dstPitch = (size_t)c->device_pitch;
		}
		m.WidthInBytes = (size_t)c->bytes;
		m.Height = c->rows;
		if (cuda_check(cd, api.memcpy_2d_async(&m, cd->stream), "cuMemcpy2DAsync"))
			return -EIO;
	}
	return 0;
}

/* Records the event and sleeps on it (blocking sync), never spinning. */
static int cuda_synchronize(struct shard_device *dev)
{
	struct cuda_device *cd = to_cuda(dev);
	int ret = cuda_check(cd, api.event_record(cd->event, cd->stream),
			     "cuEventRecord");

	if (!ret)
		ret = cuda_check(cd, api.event_synchronize(cd->event),
				 "cuEventSynchronize");
	return cd->first_error ? -EIO : ret;
}

/*
 * Records the mark's event behind the copies issued so far. A device
 * poisoned before it fails its wait; one poisoned after it (a later
 * job's copy) does not: the copies it covers ran before.
 */
static int cuda_mark(struct shard_device *dev, uint32_t mark)
{
	struct cuda_device *cd = to_cuda(dev);

	SEL_ASSERT(mark < SHARD_DEVICE_MARKS);
	cd->mark_poisoned[mark] = cd->first_error != 0;
	return cuda_check(cd, api.event_record(cd->marks[mark], cd->stream), "cuEventRecord");
}

/* Sleeps on the mark's event (blocking sync), as cuda_synchronize does. */
static int cuda_wait_mark(struct shard_device *dev, uint32_t mark)
{
	struct cuda_device *cd = to_cuda(dev);
	int ret;

	SEL_ASSERT(mark < SHARD_DEVICE_MARKS);
	ret = cuda_check(cd, api.event_synchronize(cd->marks[mark]), "cuEventSynchronize");
	return cd->mark_poisoned[mark] ? -EIO : ret;
}

/*
 * On the closing (often the application's) thread: the device's context
 * is made current for its teardown, then what was current there before is
 * put back, unless it was this primary context, now perhaps released.
 */
static void cuda_close(struct shard_device *dev)
{
	struct cuda_device *cd = to_cuda(dev);
	void *previous = NULL;
	bool bound = cd->context && cuda_bind_saving(dev, &previous) == 0;
	for (uint32_t m = 0; m < SHARD_DEVICE_MARKS; m++)
		if (cd->marks[m])
			api.event_destroy(cd->marks[m]);
	if (cd->event)
		api.event_destroy(cd->event);
	if (cd->stream)
		api.stream_destroy(cd->stream);
	if (cd->context)
		api.primary_ctx_release(cd->device);
	if (bound)
		cuda_restore(dev, previous);
	free(cd);
}

static const struct shard_device_ops cuda_ops = {
	.name = "cuda",
	.bind = cuda_bind,
	.register_host = cuda_register,
	.unregister_host = cuda_unregister,
	.copy = cuda_copy,
	.synchronize = cuda_synchronize,
	.close = cuda_close,
	.register_read_only = cuda_register_read_only,
	.mark = cuda_mark,
	.wait_mark = cuda_wait_mark,
	.copy_strided = cuda_copy_strided,
	.bind_saving = cuda_bind_saving,
	.restore = cuda_restore,
};

bool shard_device_is_cuda(const struct shard_device *dev)
{
	return dev && dev->ops == &cuda_ops;
}

static int cuda_setup(struct cuda_device *cd, int ordinal, char *why,
		      size_t why_size)
{
	int count = 0, least, greatest;
	CUresult result;

	result = api.init(0);
	if (result == CUDA_SUCCESS)
		result = api.device_get_count(&count);
	if (result != CUDA_SUCCESS || count <= ordinal) {
		snprintf(why, why_size, "no CUDA device %d (%s, %d found)", ordinal,
			 result == CUDA_SUCCESS ? "none" : cuda_error_name(result), count);
		return -ENODEV;
	}
	result = api.device_get(&cd->device, ordinal);
	if (result == CUDA_SUCCESS)
		result = api.primary_ctx_retain(&cd->context, cd->device);
	if (result == CUDA_SUCCESS)
		result = api.ctx_set_current(cd->context);
	if (result == CUDA_SUCCESS)
		result = api.ctx_get_stream_priority_range(&least, &greatest);
	/* The lowest priority: the model's own streams always go first. */
	if (result == CUDA_SUCCESS)
		result = api.stream_create_with_priority(&cd->stream,
							 CU_STREAM_NON_BLOCKING, least);
	if (result == CUDA_SUCCESS)
		result = api.event_create(&cd->event, CU_EVENT_BLOCKING_SYNC |
							      CU_EVENT_DISABLE_TIMING);
	for (uint32_t m = 0; m < SHARD_DEVICE_MARKS && result == CUDA_SUCCESS; m++)
		result = api.event_create(&cd->marks[m], CU_EVENT_BLOCKING_SYNC |
							     CU_EVENT_DISABLE_TIMING);
	if (result != CUDA_SUCCESS) {
		snprintf(why, why_size, "CUDA setup on device %d failed: %s", ordinal,
			 cuda_error_name(result));
		return -EIO;
	}
	return 0;
}

int shard_device_open_cuda(int ordinal, struct shard_device **out, char *why,
			   size_t why_size)
{
	struct cuda_device *cd;
	int ret;

	*out = NULL;
	pthread_once(&api_once, api_load);
	if (!api.init) {
		snprintf(why, why_size, "%s", api_error);
		return -ENOSYS;
	}
	cd = calloc(1, sizeof(*cd));
	if (!cd)
		return -ENOMEM;
	cd->base.ops = &cuda_ops;
	ret = cuda_setup(cd, ordinal, why, why_size);
	if (ret) {
		cuda_close(&cd->base);
		return ret;
	}
	sel_info("cuda: device %d, %s copies", ordinal,
		 api.memcpy_batch_async ? "cuMemcpyBatchAsync" : "per-entry async");
	*out = &cd->base;
	return 0;
}

int shard_device_cuda_alloc(struct shard_device *dev, uint64_t bytes,
			    uint64_t *address)
{
	CUdeviceptr ptr;
	int ret = cuda_call(api.mem_alloc(&ptr, (size_t)bytes), "cuMemAlloc");

	(void)dev;
	*address = ret ? 0 : (uint64_t)ptr;
	return ret;
}

void shard_device_cuda_free(struct shard_device *dev, uint64_t address)
{
	(void)dev;
	cuda_call(api.mem_free((CUdeviceptr)address), "cuMemFree");
}

int shard_device_cuda_memcpy(struct shard_device *dev, enum shard_copy_direction dir,
			     uint64_t address, void *host, uint64_t bytes)
{
	CUresult result = dir == SHARD_DEVICE_TO_HOST ?
		api.memcpy_dtoh(host, (CUdeviceptr)address, (size_t)bytes) :
		api.memcpy_htod((CUdeviceptr)address, host, (size_t)bytes);

	return cuda_check(to_cuda(dev), result, "cuMemcpy");
}

#endif
