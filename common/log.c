/* Logging: see log.h. One write(2) per line so lines from threads never mix. */
#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const level_names[] = { "error", "warn", "info", "debug" };
static int log_level = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

/*
 * The host's sink: function and user pointer change together under
 * log_sink_lock, and a line takes both under it (a reader lock: lines from
 * many threads do not wait for each other).
 */
static pthread_rwlock_t log_sink_lock = PTHREAD_RWLOCK_INITIALIZER;
static sel_log_fn log_sink;
static void *log_sink_user;
static int64_t log_rank = -1;

void sel_log_set_callback(sel_log_fn fn, void *user)
{
	pthread_rwlock_wrlock(&log_sink_lock);
	log_sink = fn;
	log_sink_user = user;
	pthread_rwlock_unlock(&log_sink_lock);
}

void sel_log_set_rank(uint32_t rank)
{
	__atomic_store_n(&log_rank, (int64_t)rank, __ATOMIC_RELAXED);
}

/* "2026-12-01T22:40:01.123Z selene[rank 1]: " into out; its length. */
static int log_prefix(char *out, size_t size)
{
	struct timespec now;
	struct tm tm;
	int64_t rank = __atomic_load_n(&log_rank, __ATOMIC_RELAXED);
	size_t n;

	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	n = strftime(out, size, "%Y-%m-%dT%H:%M:%S", &tm);
	if (rank >= 0)
		return (int)n + snprintf(out + n, size - n, ".%03ldZ selene[rank %lld]: ",
					 now.tv_nsec / 1000000, (long long)rank);
	return (int)n + snprintf(out + n, size - n, ".%03ldZ selene: ", now.tv_nsec / 1000000);
}

/* msg with every control byte (a newline or an escape sequence in a file
 * name read from disk or the network) as \xNN into out: a name can neither
 * forge a log line nor drive a terminal. Returns the length. */
static size_t log_escape(char *out, size_t size, const char *msg)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;

	for (const unsigned char *p = (const unsigned char *)msg; *p && n + 5 < size; p++) {
		if (*p < 0x20 || *p == 0x7f) {
			out[n++] = '\\';
			out[n++] = 'x';
			out[n++] = hex[*p >> 4];
			out[n++] = hex[*p & 15];
		} else {
			out[n++] = (char)*p;
		}
	}
	out[n] = '\0';
	return n;
}

/* One line, msg escaped, to the host's sink or stderr. */
static void log_line(enum sel_log_level level, const char *msg)
{
	char line[1200];
	int n = 0, start;

	pthread_rwlock_rdlock(&log_sink_lock);
	if (!log_sink)
		n = log_prefix(line, sizeof(line) / 4);
	n += snprintf(line + n, sizeof(line) - (size_t)n, "%s: ", level_names[level]);
	start = n;
	n += (int)log_escape(line + n, sizeof(line) - (size_t)n - 1, msg);
	if (log_sink) {
		log_sink(level, line + start, log_sink_user);
	} else {
		line[n++] = '\n';
		if (write(STDERR_FILENO, line, (size_t)n) < 0)
			n = 0; /* nowhere left to say so */
	}
	pthread_rwlock_unlock(&log_sink_lock);
}

/* SELENE_LOG, once. A value that names no level is said (a warning, once)
 * and the default kept: a typo must not silence errors or stop a host. */
static void log_read_env(void)
{
	const char *env = getenv("SELENE_LOG");
	char msg[256];

	if (log_level >= 0)
		return;
	log_level = SEL_LOG_INFO;
	if (!env)
		return;
	for (int i = 0; i < 4; i++)
		if (strcmp(env, level_names[i]) == 0) {
			log_level = i;
			return;
		}
	snprintf(msg, sizeof(msg), "SELENE_LOG=%.100s is not a level (error, warn, info or "
		 "debug); using info", env);
	log_line(SEL_LOG_WARN, msg);
}

void sel_log_set_level(enum sel_log_level level)
{
	pthread_once(&log_once, log_read_env);
	__atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED);
}

void sel_log(enum sel_log_level level, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	pthread_once(&log_once, log_read_env);
	if ((int)level > __atomic_load_n(&log_level, __ATOMIC_RELAXED))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_line(level, msg);
}
