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

static void log_read_env(void)
{
	const char *env = getenv("SELENE_LOG");

	if (log_level >= 0)
		return;
	log_level = SEL_LOG_INFO;
	if (!env)
		return;
	for (int i = 0; i < 4; i++)
		if (strcmp(env, level_names[i]) == 0)
			log_level = i;
}

void sel_log_set_level(enum sel_log_level level)
{
	pthread_once(&log_once, log_read_env);
	__atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED);
}

void sel_log(enum sel_log_level level, const char *fmt, ...)
{
	char line[1024];
	int n;
	va_list ap;

	pthread_once(&log_once, log_read_env);
	if ((int)level > __atomic_load_n(&log_level, __ATOMIC_RELAXED))
		return;
	n = snprintf(line, sizeof(line), "selene: %s: ", level_names[level]);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}
