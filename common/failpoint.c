/*
 * The failpoint registry: parsing a configuration, evaluating points. One
 * mutex guards the table; it is taken only while some point is configured,
 * so production paths pay one relaxed load.
 */
#include "common/failpoint.h"

#include "common/base.h"
#include "common/limits.h"
#include "common/log.h"
#include "selene/selene.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum fp_action { FP_OFF, FP_RETURN, FP_SHORT, FP_KILL, FP_ABORT, FP_SLEEP, FP_PRINT };

struct fp_term {
	enum fp_action action;
	int64_t argument; /* errno for return, milliseconds for sleep */
	uint64_t count;   /* evaluations this term covers; 0 means forever */
};

struct fp_state {
	struct fp_term terms[SEL_FAILPOINT_TERMS_MAX];
	unsigned term_count;
	unsigned term_index;
	uint64_t term_used;
	uint64_t evaluations;
	uint64_t fired;
};

static const char *const fp_names[] = {
#define FP_NAME(ident, name, doc) name,
	SEL_FAILPOINT_LIST(FP_NAME)
#undef FP_NAME
};

static const char *const fp_docs[] = {
#define FP_DOC(ident, name, doc) doc,
	SEL_FAILPOINT_LIST(FP_DOC)
#undef FP_DOC
};

bool sel_failpoints_armed;
static pthread_mutex_t fp_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fp_state fp_table[SEL_FAILPOINT_COUNT];

static const struct {
	const char *name;
	int value;
} fp_errnos[] = {
	{ "EIO", EIO },       { "ENOSPC", ENOSPC }, { "EDQUOT", EDQUOT },
	{ "EINTR", EINTR },   { "EAGAIN", EAGAIN }, { "EROFS", EROFS },
	{ "ENOMEM", ENOMEM }, { "EBADF", EBADF },   { "EINVAL", EINVAL },
	{ "EPERM", EPERM },   { "EACCES", EACCES }, { "ENOENT", ENOENT },
	{ "EPIPE", EPIPE },   { "ECONNRESET", ECONNRESET },
	{ "ETIMEDOUT", ETIMEDOUT }, { "EMFILE", EMFILE },
};

const char *sel_failpoint_name(enum sel_failpoint point)
{
	SEL_ASSERT(point < SEL_FAILPOINT_COUNT);
	return fp_names[point];
}

const char *sel_failpoint_doc(enum sel_failpoint point)
{
	SEL_ASSERT(point < SEL_FAILPOINT_COUNT);
	return fp_docs[point];
}

int sel_failpoint_lookup(const char *name)
{
	for (int i = 0; i < SEL_FAILPOINT_COUNT; i++)
		if (strcmp(fp_names[i], name) == 0)
			return i;
	return -1;
}

static bool parse_errno(const char *text, size_t len, int64_t *out)
{
	char *end;
	long value;
	char buf[32];

	if (len == 0 || len >= sizeof(buf))
		return false;
	memcpy(buf, text, len);
	buf[len] = '\0';
	for (size_t i = 0; i < SEL_ARRAY_SIZE(fp_errnos); i++) {
		if (strcmp(buf, fp_errnos[i].name) == 0) {
			*out = -fp_errnos[i].value;
			return true;
		}
	}
	/* digits, with a leading '-' at most: no blanks, no '+' (strtol takes them) */
	if (!(buf[0] >= '0' && buf[0] <= '9') && !(buf[0] == '-' && buf[1] >= '0' && buf[1] <= '9'))
		return false;
	value = strtol(buf, &end, 10);
	if (*end != '\0' || value == 0 || value < -4095 || value > 4095)
		return false;
	*out = value < 0 ? value : -value;
	return true;
}

static _Atomic(sel_failpoint_fatal_fn) fp_fatal;

void sel_failpoints_set_fatal(sel_failpoint_fatal_fn fn)
{
	fp_fatal = fn;
}

/*
 * kill and abort end the host process, through the host's own hook: a
 * program or test that installed one arms them deliberately with
 * SELENE_FAILPOINTS_ALLOW_FATAL=1, and nothing else reaches them.
 */
static bool fp_fatal_allowed(void)
{
	const char *allow = getenv("SELENE_FAILPOINTS_ALLOW_FATAL");

	return fp_fatal && allow && strcmp(allow, "1") == 0;
}

/* Parses one term, [COUNT*]action[(arg)], from text[0, len). */
static int parse_term(const char *text, size_t len, struct fp_term *term)
{
	const char *star = memchr(text, '*', len);
	const char *paren;
	size_t name_len, arg_len = 0;
	const char *arg = NULL;

	memset(term, 0, sizeof(*term));
	if (star) {
		char *end;
		unsigned long long count;

		if (text[0] < '0' || text[0] > '9')
			return -1;
		errno = 0;
		count = strtoull(text, &end, 10);
		if (end != star || count == 0 || errno == ERANGE)
			return -1;
		term->count = count;
		len -= (size_t)(star + 1 - text);
		text = star + 1;
	}
	paren = memchr(text, '(', len);
	name_len = paren ? (size_t)(paren - text) : len;
	if (paren) {
		if (text[len - 1] != ')')
			return -1;
		arg = paren + 1;
		arg_len = len - name_len - 2;
	}
#define IS(word) (name_len == strlen(word) && memcmp(text, word, name_len) == 0)
	if (IS("off") && !arg) {
		term->action = FP_OFF;
	} else if (IS("return")) {
		term->action = FP_RETURN;
		term->argument = -EIO;
		if (arg && !parse_errno(arg, arg_len, &term->argument))
			return -1;
	} else if (IS("short") && !arg) {
		term->action = FP_SHORT;
	} else if (IS("kill") && !arg) {
		term->action = FP_KILL;
	} else if (IS("abort") && !arg) {
		term->action = FP_ABORT;
	} else if (IS("print") && !arg) {
		term->action = FP_PRINT;
	} else if (IS("sleep") && arg) {
		char *end;
		char buf[16];

		if (arg_len == 0 || arg_len >= sizeof(buf))
			return -1;
		memcpy(buf, arg, arg_len);
		buf[arg_len] = '\0';
		if (!(buf[0] >= '0' && buf[0] <= '9'))
			return -1; /* digits only: strtoll takes blanks and signs */
		term->argument = strtoll(buf, &end, 10);
		if (*end != '\0' || term->argument < 0 || term->argument > 3600000)
			return -1;
		term->action = FP_SLEEP;
	} else {
		return -1;
	}
#undef IS
	return 0;
}

/* Parses "name=term->term" into table; says what is wrong in err. */
static int parse_entry(const char *entry, size_t len, struct fp_state *table, char *err,
		       size_t err_size)
{
	const char *eq = memchr(entry, '=', len);
	char name[64];
	struct fp_state state = { 0 };
	const char *cursor, *end = entry + len;
	int point;

	if (!eq || (size_t)(eq - entry) >= sizeof(name)) {
		snprintf(err, err_size, "'%.*s' is not NAME=ACTIONS", (int)len, entry);
		return SEL_EFAILPOINT;
	}
	memcpy(name, entry, (size_t)(eq - entry));
	name[eq - entry] = '\0';
	point = sel_failpoint_lookup(name);
	if (point < 0) {
		snprintf(err, err_size, "no failpoint named '%s' (see 'selene failpoints')",
			 name);
		return SEL_EFAILPOINT;
	}
	for (cursor = eq + 1; cursor < end;) {
		const char *arrow = strstr(cursor, "->");
		size_t term_len = (arrow && arrow < end) ? (size_t)(arrow - cursor) :
							   (size_t)(end - cursor);

		if (state.term_count == SEL_FAILPOINT_TERMS_MAX) {
			snprintf(err, err_size, "more than %u terms for '%s'",
				 SEL_FAILPOINT_TERMS_MAX, name);
			return SEL_EFAILPOINT;
		}
		if (term_len == 0 || parse_term(cursor, term_len, &state.terms[state.term_count])) {
			snprintf(err, err_size, "bad action '%.*s' for '%s'", (int)term_len,
				 cursor, name);
			return SEL_EFAILPOINT;
		}
		if ((state.terms[state.term_count].action == FP_KILL ||
		     state.terms[state.term_count].action == FP_ABORT) &&
		    !fp_fatal_allowed()) {
			snprintf(err, err_size, "'%.*s' for '%s' ends the process: set "
				 "SELENE_FAILPOINTS_ALLOW_FATAL=1 to arm it", (int)term_len,
				 cursor, name);
			return SEL_EFAILPOINT;
		}
		state.term_count++;
		cursor += term_len;
		if (cursor < end) {
			cursor += 2;
			if (cursor >= end) {
				snprintf(err, err_size, "'%s' ends with '->'", name);
				return SEL_EFAILPOINT;
			}
		}
	}
	if (state.term_count == 0) {
		snprintf(err, err_size, "'%s' has no action", name);
		return SEL_EFAILPOINT;
	}
	table[point] = state;
	return 0;
}

static int fp_configure(const char *config, char *err_text, size_t err_size)
{
	static struct fp_state parsed[SEL_FAILPOINT_COUNT];
	bool armed = false;
	int err = 0;

	pthread_mutex_lock(&fp_lock);
	memset(parsed, 0, sizeof(parsed));
	for (const char *cursor = config; cursor && *cursor;) {
		const char *semi = strchr(cursor, ';');
		size_t len = semi ? (size_t)(semi - cursor) : strlen(cursor);

		if (len > 0) {
			err = parse_entry(cursor, len, parsed, err_text, err_size);
			if (err)
				goto out_unlock;
			armed = true;
		}
		cursor += len + (semi ? 1 : 0);
	}
	memcpy(fp_table, parsed, sizeof(fp_table));
	__atomic_store_n(&sel_failpoints_armed, armed, __ATOMIC_RELAXED);
out_unlock:
	pthread_mutex_unlock(&fp_lock);
	return err;
}

/* Picks the term for this evaluation and advances the state. */
static const struct fp_term *fp_next_term(struct fp_state *state)
{
	while (state->term_index < state->term_count) {
		struct fp_term *term = &state->terms[state->term_index];

		if (term->count == 0)
			return term;
		if (state->term_used < term->count) {
			state->term_used++;
			return term;
		}
		state->term_index++;
		state->term_used = 0;
	}
	return NULL;
}

int sel_failpoint_eval(enum sel_failpoint point)
{
	struct fp_state *state = &fp_table[point];
	struct fp_term term = { .action = FP_OFF };
	const struct fp_term *chosen;

	SEL_ASSERT(point < SEL_FAILPOINT_COUNT);
	pthread_mutex_lock(&fp_lock);
	state->evaluations++;
	chosen = fp_next_term(state);
	if (chosen)
		term = *chosen;
	if (term.action != FP_OFF)
		state->fired++;
	pthread_mutex_unlock(&fp_lock);

	switch (term.action) {
	case FP_OFF:
		return 0;
	case FP_RETURN:
		return (int)term.argument;
	case FP_SHORT:
		return SEL_FAILPOINT_SHORT;
	case FP_KILL:
	case FP_ABORT: {
		sel_failpoint_fatal_fn fatal = fp_fatal;

		sel_info("failpoint %s: %s", fp_names[point],
			 term.action == FP_KILL ? "kill" : "abort");
		if (fatal)
			fatal(term.action == FP_ABORT);
		return -EIO; /* the hook was removed after configure: fail the step */
	}
	case FP_SLEEP: {
		struct timespec ts = { .tv_sec = term.argument / 1000,
				       .tv_nsec = term.argument % 1000 * 1000000 };
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
		return 0;
	}
	case FP_PRINT:
		sel_info("failpoint %s reached", fp_names[point]);
		return 0;
	}
	return 0;
}

uint64_t sel_failpoint_evaluations(enum sel_failpoint point)
{
	uint64_t n;

	SEL_ASSERT(point < SEL_FAILPOINT_COUNT);
	pthread_mutex_lock(&fp_lock);
	n = fp_table[point].evaluations;
	pthread_mutex_unlock(&fp_lock);
	return n;
}

uint64_t sel_failpoint_fired(enum sel_failpoint point)
{
	uint64_t n;

	SEL_ASSERT(point < SEL_FAILPOINT_COUNT);
	pthread_mutex_lock(&fp_lock);
	n = fp_table[point].fired;
	pthread_mutex_unlock(&fp_lock);
	return n;
}

int sel_failpoints_configure(const char *config)
{
	char why[256];
	int err = fp_configure(config, why, sizeof(why));

	if (err)
		sel_error("failpoints: %s", why);
	return err;
}

/*
 * SELENE_FAILPOINTS is read once, by the first store or peer opened (or the
 * selene program's main), never by a library constructor: a typo in the
 * environment must not take the host process down before main. Every later
 * call answers what the first found.
 */
static pthread_once_t fp_env_once = PTHREAD_ONCE_INIT;
static int fp_env_result;
static char fp_env_why[256];

static void fp_read_env(void)
{
	const char *env = getenv("SELENE_FAILPOINTS");
	char why[200];

	if (!env || !*env)
		return;
	fp_env_result = fp_configure(env, why, sizeof(why));
	if (fp_env_result)
		snprintf(fp_env_why, sizeof(fp_env_why), "SELENE_FAILPOINTS is malformed: %s",
			 why);
}

int sel_failpoints_from_env(char *err, size_t err_size)
{
	pthread_once(&fp_env_once, fp_read_env);
	if (fp_env_result && err_size)
		snprintf(err, err_size, "%s", fp_env_why);
	return fp_env_result;
}
