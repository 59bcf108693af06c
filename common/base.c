/* Out-of-line parts of base.h: the assertion handler, hex, clocks. */
#include "common/base.h"

#include "common/failpoint.h"
#include "common/log.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void sel_assert_fail(const char *expr, const char *file, int line,
		     const char *func)
{
	fprintf(stderr, "selene: assertion failed: %s (%s:%d, %s)\n", expr,
		file, line, func);
	abort();
}

void sel_address_text(const struct sockaddr_storage *addr, char *out, size_t size)
{
	const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)addr;

	snprintf(out, size, "?");
	if (addr->ss_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)addr)->sin_addr, out,
			  (socklen_t)size);
	else if (addr->ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr))
		inet_ntop(AF_INET, &v6->sin6_addr.s6_addr[12], out, (socklen_t)size);
	else if (addr->ss_family == AF_INET6)
		inet_ntop(AF_INET6, &v6->sin6_addr, out, (socklen_t)size);
}

void sel_hex_encode(char *out, const uint8_t *bytes, size_t len)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < len; i++) {
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 15];
	}
	out[2 * len] = '\0';
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

bool sel_hex_decode(uint8_t *out, const char *hex, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		int hi = hex_value(hex[2 * i]);
		int lo = hi < 0 ? -1 : hex_value(hex[2 * i + 1]);

		if (lo < 0)
			return false;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return true;
}

static uint64_t clock_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t sel_monotonic_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

uint64_t sel_realtime_ns(void)
{
	return clock_ns(CLOCK_REALTIME);
}

int sel_thread_start(pthread_t *thread, void *(*main_fn)(void *), void *arg)
{
	int injected = SEL_FAILPOINT(SEL_FP_THREAD_START);

	if (injected < 0)
		return injected;
	return -pthread_create(thread, NULL, main_fn, arg);
}

void sel_thread_lower_priority(int nice_value, const char *thread_name)
{
	if (setpriority(PRIO_PROCESS, (id_t)gettid(), nice_value) != 0)
		sel_debug("%s thread: nice %d refused: %s", thread_name, nice_value,
			  strerror(errno));
}

void sel_thread_batch_priority(const char *thread_name)
{
	struct sched_param param = { 0 };

	if (sched_setscheduler(0, SCHED_BATCH, &param) != 0)
		sel_debug("%s thread: SCHED_BATCH refused: %s", thread_name, strerror(errno));
	sel_thread_lower_priority(10, thread_name);
}

int sel_fail(int err, char *msg, size_t msg_size, const char *fmt, ...)
{
	va_list ap;

	if (msg_size > 0) {
		va_start(ap, fmt);
		vsnprintf(msg, msg_size, fmt, ap);
		va_end(ap);
	}
	return err;
}

bool sel_reason_begin(struct sel_reason *r, char **err, size_t *err_size)
{
	bool no_buffer = !*err && *err_size > 0;

	r->text[0] = '\0';
	r->caller = NULL;
	r->caller_size = 0;
	if (!no_buffer && *err_size >= sizeof(r->text))
		return false; /* the caller's holds it all */
	if (!no_buffer) {
		r->caller = *err;
		r->caller_size = *err_size;
	}
	*err = r->text;
	*err_size = sizeof(r->text);
	return no_buffer;
}

int sel_reason_end(const struct sel_reason *r, int ret)
{
	if (ret && r->caller_size > 0)
		snprintf(r->caller, r->caller_size, "%s", r->text);
	return ret;
}

bool sel_env_count(const char *name, uint32_t max, uint32_t *out)
{
	const char *env = getenv(name);
	unsigned long n;
	char *end;

	if (!env || !*env)
		return false;
	errno = 0;
	n = strtoul(env, &end, 10);
	if (*end == '\0' && errno == 0 && env[0] >= '0' && env[0] <= '9' && n <= max) {
		*out = (uint32_t)n;
		return true;
	}
	sel_warn("%s=%s is not 0..%u; using the default", name, env, max);
	return false;
}

static uint32_t fork_generation; /* atomic */
static pthread_once_t fork_counter_once = PTHREAD_ONCE_INIT;

static void count_fork(void)
{
	__atomic_add_fetch(&fork_generation, 1, __ATOMIC_RELAXED);
}

static void install_fork_counter(void)
{
	pthread_atfork(NULL, NULL, count_fork);
}

uint32_t sel_fork_generation(void)
{
	pthread_once(&fork_counter_once, install_fork_counter);
	return __atomic_load_n(&fork_generation, __ATOMIC_RELAXED);
}
