/*
 * Logging, one line per event: to the host's callback (sel_log_set_callback
 * in include/selene/store.h), or to stderr with a UTC timestamp, "selene",
 * the rank where known, and the level. The level comes
 * from SELENE_LOG (error, warn, info, debug; default info) read once; any
 * other value is reported by one warning and the default kept. Control
 * bytes in a message (a file name may hold any) are written as \xNN, to
 * either sink. Not for hot paths: callers log state changes, not per-page
 * events.
 */
#ifndef SELENE_COMMON_LOG_H
#define SELENE_COMMON_LOG_H

#include "selene/store.h" /* enum sel_log_level, sel_log_set_callback */

#include <stdint.h>

void sel_log(enum sel_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Overrides SELENE_LOG for this process (tests silence expected warnings). */
void sel_log_set_level(enum sel_log_level level);

/* The rank the default sink names on each line (a store or peer sets it). */
void sel_log_set_rank(uint32_t rank);

#define sel_error(...) sel_log(SEL_LOG_ERROR, __VA_ARGS__)
#define sel_warn(...) sel_log(SEL_LOG_WARN, __VA_ARGS__)
#define sel_info(...) sel_log(SEL_LOG_INFO, __VA_ARGS__)
#define sel_debug(...) sel_log(SEL_LOG_DEBUG, __VA_ARGS__)

#endif
