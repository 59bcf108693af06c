/* Logging: see log.h. One write(2) per line so lines from threads never mix. */
#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const level_names[] = { "error", "warn", "info", "debug" };
static int log_level = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

/*
 * Writes one line: the prefix, then msg with every control byte (a newline
 * or an escape sequence in a file name read from disk or the network) as
 * \xNN, so a name can neither forge a log line nor drive the terminal.
 */
static void log_emit(enum sel_log_level level, const char *msg)
{
	static const char hex[] = "0123456789abcdef";
	char line[1200];
	size_t n = (size_t)snprintf(line, sizeof(line), "selene: %s: ", level_names[level]);

	for (const unsigned char *p = (const unsigned char *)msg; *p && n < sizeof(line) - 5; p++) {
		if (*p < 0x20 || *p == 0x7f) {
			line[n++] = '\\';
			line[n++] = 'x';
			line[n++] = hex[*p >> 4];
			line[n++] = hex[*p & 15];
		} else {
			line[n++] = (char)*p;
		}
	}
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0)
		return;
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
	log_emit(SEL_LOG_WARN, msg);
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
	log_emit(level, msg);
}
