/* The slab pool: see slab.h. */
#include "shard/slab.h"

#include "common/base.h"
#include "common/limits.h"
#include "common/log.h"
#include "selene/selene.h"
#include "shard/device.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/*
 * Maps bytes at a 2 MiB boundary, advised for transparent huge pages before
 * it is populated, so the pages are huge from the start: O_DIRECT pins and
 * the copy engines' page walks then touch 512 times fewer pages. Populated
 * now (MADV_POPULATE_WRITE, or MAP_POPULATE where that is missing) so no
 * fault ever lands in a transfer.
 */
static int slab_map(struct shard_slab_pool *pool, uint64_t bytes)
{
	const uint64_t huge = 2ull << 20;
	uint64_t span = bytes + huge;
	uint8_t *raw, *base;

	raw = mmap(NULL, (size_t)span, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (raw == MAP_FAILED)
		return -errno;
	base = (uint8_t *)sel_align_up((uintptr_t)raw, huge);
	if (base > raw)
		munmap(raw, (size_t)(base - raw));
	if (raw + span > base + bytes)
		munmap(base + bytes, (size_t)(raw + span - (base + bytes)));
	madvise(base, (size_t)bytes, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
	if (madvise(base, (size_t)bytes, MADV_POPULATE_WRITE) == 0) {
		pool->base = base;
		return 0;
	}
#endif
	memset(base, 0, (size_t)bytes);
	pool->base = base;
	return 0;
}

int shard_slab_init(struct shard_slab_pool *pool, uint64_t slot_bytes,
		    uint32_t slot_count)
{
	uint64_t bytes;
	int ret;

	memset(pool, 0, sizeof(*pool));
	slot_bytes = sel_align_up(slot_bytes, SEL_BLOCK_BYTES);
	if (slot_bytes == 0 || slot_count == 0 ||
	    !sel_mul_u64(slot_bytes, slot_count, &bytes) || bytes > (1ull << 46))
		return -EINVAL;
	ret = slab_map(pool, bytes);
	if (ret)
		return ret;
	pool->free_slots = malloc(slot_count * sizeof(uint32_t));
	if (!pool->free_slots) {
		munmap(pool->base, (size_t)bytes);
		pool->base = NULL;
		return -ENOMEM;
	}
	pool->slot_bytes = slot_bytes;
	pool->slot_count = slot_count;
	/* Lowest index on top, so a fresh pool hands out slots in order. */
	for (uint32_t i = 0; i < slot_count; i++)
		pool->free_slots[i] = slot_count - 1 - i;
	pool->free_count = slot_count;
	pthread_mutex_init(&pool->lock, NULL);
	pool->group_slots = 1;
	pool->plane_count = 1;
	pool->plane_stride = slot_bytes;
	return 0;
}

uint32_t shard_slab_group_slots(const uint64_t *plane_bytes, uint32_t plane_count,
				uint32_t group_max)
{
	for (uint32_t p = 0; p < plane_count; p++)
		if (plane_bytes[p] != plane_bytes[0] ||
		    !sel_is_aligned(plane_bytes[p], SEL_BLOCK_BYTES))
			return 1;
	return group_max ? group_max : 1;
}

void shard_slab_layout(struct shard_slab_pool *pool, const uint64_t *plane_bytes,
		       uint32_t plane_count, uint32_t group_slots, uint32_t grouped_slots)
{
	uint64_t offset = 0;

	SEL_ASSERT(plane_count > 0 && plane_count <= REC_PAGE_PLANES_MAX && group_slots > 0 &&
		   grouped_slots % group_slots == 0 && grouped_slots <= pool->slot_count);
	SEL_ASSERT(group_slots == 1 ||
		   shard_slab_group_slots(plane_bytes, plane_count, group_slots) == group_slots);
	for (uint32_t p = 0; p < plane_count; p++) {
		pool->plane_offset[p] = offset;
		offset += sel_align_up(plane_bytes[p], SEL_BLOCK_BYTES);
	}
	SEL_ASSERT(offset == pool->slot_bytes);
	pool->plane_count = plane_count;
	pool->group_slots = group_slots;
	pool->grouped_slots = group_slots > 1 ? grouped_slots : 0;
	pool->plane_stride = group_slots > 1 ? plane_bytes[0] : pool->slot_bytes;
}

void shard_slab_scrub(struct shard_slab_pool *pool, uint32_t slot)
{
	if (slot >= pool->grouped_slots) {
		memset(shard_slab_page(pool, slot), 0, pool->slot_bytes);
		return;
	}
	for (uint32_t p = 0; p < pool->plane_count; p++)
		memset(shard_slab_plane(pool, slot, p), 0, pool->plane_stride);
}

void shard_slab_destroy(struct shard_slab_pool *pool)
{
	if (!pool->base)
		return;
	SEL_ASSERT(!pool->registered);
	munmap(pool->base, (size_t)(pool->slot_bytes * pool->slot_count));
	free(pool->free_slots);
	pthread_mutex_destroy(&pool->lock);
	memset(pool, 0, sizeof(*pool));
}

int shard_slab_reserve_intake(struct shard_slab_pool *pool, uint32_t count)
{
	int ret = 0;

	pthread_mutex_lock(&pool->lock);
	if (pool->free_count - pool->reserved_count < count)
		ret = SEL_EQUEUEFULL;
	else
		pool->reserved_count += count;
	pthread_mutex_unlock(&pool->lock);
	return ret;
}

static int slab_take(struct shard_slab_pool *pool, uint32_t count,
		     struct shard_slab_lease *lease, bool intake)
{
	uint32_t available;

	SEL_ASSERT(lease->count + count <= lease->capacity);
	pthread_mutex_lock(&pool->lock);
	available = pool->free_count - (intake ? 0 : pool->reserved_count);
	if (available < count) {
		pool->exhausted++;
		pthread_mutex_unlock(&pool->lock);
		return SEL_EQUEUEFULL;
	}
	for (uint32_t i = 0; i < count; i++)
		lease->slots[lease->count++] = pool->free_slots[--pool->free_count];
	if (intake) {
		/* Intake draws down its reservation first. */
		uint32_t from_reserve = count < pool->reserved_count ?
						count : pool->reserved_count;

		pool->reserved_count -= from_reserve;
	}
	pthread_mutex_unlock(&pool->lock);
	return 0;
}

int shard_slab_alloc(struct shard_slab_pool *pool, uint32_t count,
		     struct shard_slab_lease *lease)
{
	return slab_take(pool, count, lease, false);
}

int shard_slab_alloc_intake(struct shard_slab_pool *pool, uint32_t count,
			    struct shard_slab_lease *lease)
{
	return slab_take(pool, count, lease, true);
}

void shard_slab_release(struct shard_slab_pool *pool,
			struct shard_slab_lease *lease)
{
	pthread_mutex_lock(&pool->lock);
	/*
	 * Last first, so the lease's first slot is on top: the next request
	 * of its size takes its slots in the order it had them (the warm
	 * tier's runs of consecutive slots, shard/warm.h).
	 */
	for (uint32_t i = lease->count; i-- > 0;) {
		SEL_ASSERT(lease->slots[i] < pool->slot_count);
		SEL_ASSERT(pool->free_count < pool->slot_count);
		pool->free_slots[pool->free_count++] = lease->slots[i];
	}
	pthread_mutex_unlock(&pool->lock);
	lease->count = 0;
}

uint32_t shard_slab_slots_for(const struct shard_slab_pool *pool,
			      uint64_t bytes)
{
	return (uint32_t)((bytes + pool->slot_bytes - 1) / pool->slot_bytes);
}

int shard_slab_register(struct shard_slab_pool *pool, struct shard_device *dev)
{
	int ret;

	SEL_ASSERT(!pool->registered);
	ret = dev->ops->register_host(dev, pool->base,
				      pool->slot_bytes * pool->slot_count);
	if (ret == 0)
		pool->registered = dev;
	return ret;
}

void shard_slab_unregister(struct shard_slab_pool *pool)
{
	if (!pool->registered)
		return;
	pool->registered->ops->unregister_host(pool->registered, pool->base);
	pool->registered = NULL;
}

uint32_t shard_slab_free_count(struct shard_slab_pool *pool)
{
	uint32_t n;

	pthread_mutex_lock(&pool->lock);
	n = pool->free_count;
	pthread_mutex_unlock(&pool->lock);
	return n;
}

/*
 * Where a cgroup limit counts as none: v2 writes "max", v1 a page-rounded
 * LONG_MAX (9223372036854771712); anything this large is no limit.
 */
#define SLAB_CGROUP_UNLIMITED (1ull << 62)
/* A /proc/self/cgroup line, or a path under the cgroup mount. */
#define SLAB_CGROUP_PATH_BYTES 4096u

/* A file's first number ("max" reads as UINT64_MAX); false when unreadable. */
static bool slab_read_number(const char *path, uint64_t *out)
{
	char text[64], *end;
	unsigned long long v;
	FILE *f = fopen(path, "re");
	bool ok;

	if (!f)
		return false;
	ok = fgets(text, sizeof(text), f) != NULL;
	fclose(f);
	if (ok && strncmp(text, "max", 3) == 0) {
		*out = UINT64_MAX;
		return true;
	}
	if (!ok || text[0] < '0' || text[0] > '9')
		return false;
	errno = 0;
	v = strtoull(text, &end, 10);
	if (errno != 0 || (*end != '\n' && *end != '\0'))
		return false;
	*out = v;
	return true;
}

/*
 * The number after name (which ends in its separator: "MemAvailable:",
 * "inactive_file ") at the start of a line of path, times 1024 when the
 * line says kB. False when the file or the line is missing.
 */
static bool slab_read_field(const char *path, const char *name, uint64_t *out)
{
	size_t name_bytes = strlen(name);
	char line[256], *end;
	unsigned long long v;
	FILE *f = fopen(path, "re");
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		if (strncmp(line, name, name_bytes) != 0)
			continue;
		errno = 0;
		v = strtoull(line + name_bytes, &end, 10);
		if (errno != 0 || end == line + name_bytes)
			break;
		while (*end == ' ')
			end++;
		if (strncmp(end, "kB", 2) == 0) {
			if (v > UINT64_MAX / 1024)
				break;
			v *= 1024;
		}
		*out = v;
		found = true;
	}
	fclose(f);
	return found;
}

/*
 * The room left in the cgroup at dir (v1: the memory controller's files):
 * its limit less what it uses beyond its file cache, active and inactive
 * (the kernel reclaims it before it fails an allocation; a cgroup that read
 * back what it wrote sits near its limit with it). False when dir has no
 * limit file, or no limit.
 */
static bool slab_cgroup_room(const char *dir, bool v1, uint64_t *room)
{
	char path[SLAB_CGROUP_PATH_BYTES + 64];
	uint64_t limit, usage, inactive = 0, active = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, v1 ? "memory.limit_in_bytes" : "memory.max");
	if (!slab_read_number(path, &limit) || limit >= SLAB_CGROUP_UNLIMITED)
		return false;
	snprintf(path, sizeof(path), "%s/%s", dir,
		 v1 ? "memory.usage_in_bytes" : "memory.current");
	if (!slab_read_number(path, &usage))
		usage = 0;
	snprintf(path, sizeof(path), "%s/memory.stat", dir);
	if (!(v1 && slab_read_field(path, "total_inactive_file ", &inactive)) &&
	    !slab_read_field(path, "inactive_file ", &inactive))
		inactive = 0;
	if (!(v1 && slab_read_field(path, "total_active_file ", &active)) &&
	    !slab_read_field(path, "active_file ", &active))
		active = 0;
	usage -= inactive < usage ? inactive : usage;
	usage -= active < usage ? active : usage;
	*room = usage < limit ? limit - usage : 0;
	return true;
}

/*
 * This process's memory cgroups under cgroup_root, from /proc/self/cgroup's
 * text: the v2 line ("0::/path": cgroup_root/path) into v2_dir, the v1 line
 * whose controllers include memory (cgroup_root/memory/path) into v1_dir.
 * Both may be there (a hybrid host); an empty string where one is not.
 */
static void slab_cgroup_dirs(const char *self_cgroup_path, const char *cgroup_root,
			     char *v2_dir, char *v1_dir, size_t dir_size)
{
	char line[SLAB_CGROUP_PATH_BYTES];
	FILE *f = fopen(self_cgroup_path, "re");

	v2_dir[0] = v1_dir[0] = '\0';
	while (f && fgets(line, sizeof(line), f)) {
		char *controllers = strchr(line, ':'), *path, *token, *save = NULL;
		bool memory = false;

		if (!controllers)
			continue;
		*controllers++ = '\0';
		path = strchr(controllers, ':');
		if (!path || path[1] != '/')
			continue;
		*path++ = '\0';
		path[strcspn(path, "\n")] = '\0';
		if (strcmp(path, "/") == 0)
			path[0] = '\0'; /* the mount itself */
		if (strcmp(line, "0") == 0 && controllers[0] == '\0') {
			if ((size_t)snprintf(v2_dir, dir_size, "%s%s", cgroup_root, path) >= dir_size)
				v2_dir[0] = '\0';
			continue;
		}
		for (token = strtok_r(controllers, ",", &save); token && !memory;
		     token = strtok_r(NULL, ",", &save))
			memory = strcmp(token, "memory") == 0;
		if (memory && (size_t)snprintf(v1_dir, dir_size, "%s/memory%s", cgroup_root,
					       path) >= dir_size)
			v1_dir[0] = '\0';
	}
	if (f)
		fclose(f);
}

/*
 * The least room in the cgroup at dir and each of its ancestors down to
 * the first root_bytes of it (the mount, or the v1 controller's mount),
 * into *room when less than what it holds (found says it holds one). A
 * level whose files are missing (a cgroup namespace shows the container's
 * own cgroup at the mount, not at the host's path) is skipped.
 */
static void slab_cgroup_least_room(char *dir, size_t root_bytes, bool v1, uint64_t *room,
				   bool *found)
{
	if (dir[0] == '\0')
		return;
	for (;;) {
		uint64_t here;
		char *slash;

		if (slab_cgroup_room(dir, v1, &here) && (!*found || here < *room)) {
			*room = here;
			*found = true;
		}
		slash = strrchr(dir, '/');
		if (strlen(dir) <= root_bytes || !slash || (size_t)(slash - dir) < root_bytes)
			break;
		*slash = '\0';
	}
}

int shard_slab_memory_available_at(const char *meminfo_path, const char *self_cgroup_path,
				   const char *cgroup_root, uint64_t *bytes)
{
	char v2_dir[SLAB_CGROUP_PATH_BYTES], v1_dir[SLAB_CGROUP_PATH_BYTES];
	size_t root_bytes = strlen(cgroup_root);
	uint64_t available = 0, room = 0;
	bool known, limited = false;

	known = slab_read_field(meminfo_path, "MemAvailable:", &available);
	slab_cgroup_dirs(self_cgroup_path, cgroup_root, v2_dir, v1_dir, sizeof(v2_dir));
	slab_cgroup_least_room(v2_dir, root_bytes, false, &room, &limited);
	slab_cgroup_least_room(v1_dir, root_bytes + strlen("/memory"), true, &room, &limited);
	if (!known && !limited)
		return -ENOENT;
	if (limited && (!known || room < available))
		available = room;
	*bytes = available;
	return 0;
}

int shard_slab_memory_available(uint64_t *bytes)
{
	return shard_slab_memory_available_at("/proc/meminfo", "/proc/self/cgroup",
					      "/sys/fs/cgroup", bytes);
}

bool shard_slab_memory_fits(uint64_t bytes, uint64_t *available)
{
	*available = 0;
	if (shard_slab_memory_available(available) != 0) {
		*available = 0;
		return true;
	}
	return bytes <= *available / 2;
}
