/*
 * Small helpers every layer uses: assertions that stay on in release builds,
 * little-endian encoding, alignment arithmetic. No state, no allocation.
 */
#ifndef SELENE_COMMON_BASE_H
#define SELENE_COMMON_BASE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "selene/selene.h"

/*
 * Programmer errors stop the process with file, line and expression. Kept in
 * release builds: a broken invariant in a storage engine must not go on to
 * write wrong bytes.
 */
#define SEL_ASSERT(expr) \
	((expr) ? (void)0 : sel_assert_fail(#expr, __FILE__, __LINE__, __func__))

_Noreturn void sel_assert_fail(const char *expr, const char *file, int line,
			       const char *func);

#define SEL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline uint32_t sel_get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline uint64_t sel_get_le64(const uint8_t *p)
{
	return (uint64_t)sel_get_le32(p) | (uint64_t)sel_get_le32(p + 4) << 32;
}

static inline void sel_put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline void sel_put_le64(uint8_t *p, uint64_t v)
{
	sel_put_le32(p, (uint32_t)v);
	sel_put_le32(p + 4, (uint32_t)(v >> 32));
}

/* Rounds v up to a multiple of align, a power of two. Caller checks overflow. */
static inline uint64_t sel_align_up(uint64_t v, uint64_t align)
{
	return (v + align - 1) & ~(align - 1);
}

static inline bool sel_is_aligned(uint64_t v, uint64_t align)
{
	return (v & (align - 1)) == 0;
}

/* a + b into *out; false on overflow. */
static inline bool sel_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_add_overflow(a, b, out);
}

/* a * b into *out; false on overflow. */
static inline bool sel_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_mul_overflow(a, b, out);
}

/* Whether err is one of Selene's own codes (SEL_E*) rather than an errno. */
static inline bool sel_is_selene_error(int err)
{
	return err >= SEL_ERROR_FIRST && err <= SEL_ERROR_LAST;
}

struct sockaddr_storage;

/*
 * The IP literal of addr into out (an IPv4-mapped IPv6 address as IPv4),
 * "?" for any other family; out holds INET6_ADDRSTRLEN chars.
 */
void sel_address_text(const struct sockaddr_storage *addr, char *out, size_t size);

/* Lowercase hex of len bytes into out, which holds 2 * len + 1 chars. */
void sel_hex_encode(char *out, const uint8_t *bytes, size_t len);

/* Parses exactly 2 * len hex digits; false on any other character. */
bool sel_hex_decode(uint8_t *out, const char *hex, size_t len);

/*
 * Lowers the calling thread below the model's threads (seed 2.12): nice
 * value nice_value on this thread only (its tid). A refusal is logged at
 * debug level and ignored: priority is a preference, not a requirement.
 */
void sel_thread_lower_priority(int nice_value, const char *thread_name);

/*
 * The background threads' priority (the disk thread, its control thread,
 * the checksum helpers): SCHED_BATCH at nice 10 on the calling thread, a
 * refusal logged at debug level as above.
 */
void sel_thread_batch_priority(const char *thread_name);

/*
 * A count from the environment variable name: true and *out when it is set
 * to a decimal number from 0 to max; false when unset or empty, and false
 * with one warning naming the variable and its range when malformed.
 */
bool sel_env_count(const char *name, uint32_t max, uint32_t *out);

/*
 * Starts a library thread: pthread_create with default attributes. Returns
 * 0, or a negative errno (pthread_create's, or what the failpoint
 * thread.start injects: every thread the library starts can be refused in a
 * test, as a host out of threads or memory refuses it).
 */
int sel_thread_start(pthread_t *thread, void *(*main_fn)(void *), void *arg);

/*
 * An error path's message: formats fmt into msg (when msg_size > 0) and
 * returns err, so a failure is one statement.
 */
int sel_fail(int err, char *msg, size_t msg_size, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * The reason of a call that also tells it to other ranks (sel_store_open,
 * sel_peer_start): where the caller's (err, err_size) is absent or smaller
 * than text, sel_reason_begin points them at text, so the other ranks hear
 * all of it; sel_reason_end gives the caller its share on failure and
 * returns ret. begin returns true when the caller gave a size without a
 * buffer (err NULL), which the call refuses.
 */
struct sel_reason {
	char text[256];
	char *caller;
	size_t caller_size;
};

bool sel_reason_begin(struct sel_reason *r, char **err, size_t *err_size);
int sel_reason_end(const struct sel_reason *r, int ret);

/*
 * A number that differs in a child of fork() (not of a raw clone, which runs
 * no atfork handlers) from its parent's: an atfork
 * handler, installed by the first call, counts the forks. A handle keeps
 * it when made and compares it on each call, without a system call (these
 * come on the model thread's every step), to refuse work in a child, which
 * has none of the handle's threads.
 */
uint32_t sel_fork_generation(void);

/* CLOCK_MONOTONIC and CLOCK_REALTIME in nanoseconds. */
uint64_t sel_monotonic_ns(void);
uint64_t sel_realtime_ns(void);

#endif
