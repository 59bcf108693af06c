/*
 * The trace parser (launch/worker/trace.h): a small recursive-descent JSON reader
 * for one line at a time, strict about what it keeps (the id, the spans,
 * the expectations) and able to skip any other value. It is not a general
 * JSON library: numbers it keeps are unsigned integers, and strings it
 * keeps are ids.
 */
#include "launch/worker/trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cursor {
	const char *at, *end;
	uint32_t line;
	char *err;
	size_t err_size;
};

static int fail(struct cursor *c, const char *fmt, ...)
{
	char what[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	snprintf(c->err, c->err_size, "line %u: %s", c->line, what);
	return -EINVAL;
}

static void skip_space(struct cursor *c)
{
	while (c->at < c->end && (*c->at == ' ' || *c->at == '\t' || *c->at == '\r'))
		c->at++;
}

/* Consumes ch after optional space; -EINVAL naming what was expected. */
static int expect_char(struct cursor *c, char ch, const char *where)
{
	skip_space(c);
	if (c->at >= c->end)
		return fail(c, "the line ends where '%c' was expected %s", ch, where);
	if (*c->at != ch)
		return fail(c, "'%c' expected %s, found '%c'", ch, where, *c->at);
	c->at++;
	return 0;
}

static bool peek(struct cursor *c, char ch)
{
	skip_space(c);
	return c->at < c->end && *c->at == ch;
}

static int hex_digit(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* Appends one byte to out, which holds at most max bytes. */
static int put_byte(struct cursor *c, char *out, size_t *n, size_t max, uint8_t byte)
{
	if (out) {
		if (*n >= max)
			return fail(c, "a string is longer than %zu bytes", max);
		out[*n] = (char)byte;
	}
	(*n)++;
	return 0;
}

/* Four hex digits at the cursor into *code; false (cursor kept) if not. */
static bool read_hex4(struct cursor *c, uint32_t *code)
{
	*code = 0;
	if (c->end - c->at < 4)
		return false;
	for (int i = 0; i < 4; i++) {
		int d = hex_digit(c->at[i]);

		if (d < 0)
			return false;
		*code = *code << 4 | (uint32_t)d;
	}
	c->at += 4;
	return true;
}

/* code (at most U+10FFFF, no surrogate) as 1 to 4 bytes of UTF-8. */
static int put_utf8(struct cursor *c, char *out, size_t *n, size_t max, uint32_t code)
{
	uint8_t bytes[4];
	size_t len;
	int ret = 0;

	if (code < 0x80) {
		bytes[0] = (uint8_t)code;
		len = 1;
	} else if (code < 0x800) {
		bytes[0] = (uint8_t)(0xc0 | code >> 6);
		bytes[1] = (uint8_t)(0x80 | (code & 0x3f));
		len = 2;
	} else if (code < 0x10000) {
		bytes[0] = (uint8_t)(0xe0 | code >> 12);
		bytes[1] = (uint8_t)(0x80 | ((code >> 6) & 0x3f));
		bytes[2] = (uint8_t)(0x80 | (code & 0x3f));
		len = 3;
	} else {
		bytes[0] = (uint8_t)(0xf0 | code >> 18);
		bytes[1] = (uint8_t)(0x80 | ((code >> 12) & 0x3f));
		bytes[2] = (uint8_t)(0x80 | ((code >> 6) & 0x3f));
		bytes[3] = (uint8_t)(0x80 | (code & 0x3f));
		len = 4;
	}
	for (size_t i = 0; !ret && i < len; i++)
		ret = put_byte(c, out, n, max, bytes[i]);
	return ret;
}

/*
 * \uXXXX as UTF-8, a surrogate pair (\ud83d\ude00, as Python's json.dumps
 * writes characters past U+FFFF) as one character. A string that is kept
 * (out) must be valid UTF-8 without U+0000, so a lone surrogate or U+0000
 * is refused there; a skipped string may hold them, as JSON allows.
 */
static int put_escape_u(struct cursor *c, char *out, size_t *n, size_t max)
{
	uint32_t code, low;

	if (!read_hex4(c, &code))
		return fail(c, "a \\u escape needs four hex digits");
	if (code >= 0xd800 && code <= 0xdbff && c->end - c->at >= 6 && c->at[0] == '\\' &&
	    c->at[1] == 'u') {
		const char *at = c->at;

		c->at += 2;
		if (read_hex4(c, &low) && low >= 0xdc00 && low <= 0xdfff)
			return put_utf8(c, out, n, max,
					0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00));
		c->at = at; /* not a pair: the next escape stands alone */
	}
	if (!out) {
		(*n)++;
		return 0;
	}
	if (code >= 0xd800 && code <= 0xdfff)
		return fail(c, "a \\u escape names a lone surrogate (U+%04X), which is "
			    "not a character", code);
	if (code == 0)
		return fail(c, "a string holds U+0000");
	return put_utf8(c, out, n, max, code);
}

/* A string into out (max bytes, terminated), or skipped when out is NULL. */
static int parse_string(struct cursor *c, char *out, size_t max)
{
	static const char plain[] = "\"\\/bfnrt", meant[] = "\"\\/\b\f\n\r\t";
	size_t n = 0;
	int ret = expect_char(c, '"', "to open a string");

	while (!ret) {
		if (c->at >= c->end)
			return fail(c, "a string is not closed");
		uint8_t ch = (uint8_t)*c->at++;

		if (ch == '"')
			break;
		if (ch < 0x20)
			return fail(c, "a string holds control character 0x%02x", ch);
		if (ch != '\\') {
			ret = put_byte(c, out, &n, max, ch);
			continue;
		}
		if (c->at >= c->end)
			return fail(c, "a string ends inside an escape");
		ch = (uint8_t)*c->at++;
		const char *which = ch ? strchr(plain, ch) : NULL;

		if (ch == 'u')
			ret = put_escape_u(c, out, &n, max);
		else if (which)
			ret = put_byte(c, out, &n, max, (uint8_t)meant[which - plain]);
		else
			return fail(c, "unknown escape '\\%c' in a string", ch);
	}
	if (!ret && out)
		out[n] = '\0';
	return ret;
}

/* An unsigned integer (no sign, fraction or exponent) that fits 64 bits. */
static int parse_u64(struct cursor *c, const char *what, uint64_t *out)
{
	uint64_t v = 0;
	const char *start;

	skip_space(c);
	start = c->at;
	if (c->at < c->end && *c->at == '-')
		return fail(c, "%s must not be negative", what);
	while (c->at < c->end && *c->at >= '0' && *c->at <= '9') {
		uint64_t d = (uint64_t)(*c->at - '0');

		if (v > (UINT64_MAX - d) / 10)
			return fail(c, "%s does not fit 64 bits", what);
		v = v * 10 + d;
		c->at++;
	}
	if (c->at == start)
		return fail(c, "%s must be an unsigned integer", what);
	if (c->at < c->end && (*c->at == '.' || *c->at == 'e' || *c->at == 'E'))
		return fail(c, "%s must be an integer", what);
	*out = v;
	return 0;
}

static int skip_value(struct cursor *c, uint32_t depth);

static bool is_digit(const struct cursor *c)
{
	return c->at < c->end && *c->at >= '0' && *c->at <= '9';
}

/* Digits; false when there is none. */
static bool skip_digits(struct cursor *c)
{
	const char *start = c->at;

	while (is_digit(c))
		c->at++;
	return c->at > start;
}

/* A JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int skip_number(struct cursor *c)
{
	if (c->at < c->end && *c->at == '-')
		c->at++;
	if (c->at < c->end && *c->at == '0')
		c->at++;
	else if (!skip_digits(c))
		return fail(c, "a number needs digits");
	if (c->at < c->end && *c->at == '.') {
		c->at++;
		if (!skip_digits(c))
			return fail(c, "a number needs digits after its '.'");
	}
	if (c->at < c->end && (*c->at == 'e' || *c->at == 'E')) {
		c->at++;
		if (c->at < c->end && (*c->at == '+' || *c->at == '-'))
			c->at++;
		if (!skip_digits(c))
			return fail(c, "a number needs digits in its exponent");
	}
	return 0;
}

static int parse_bool(struct cursor *c, const char *what, bool *out)
{
	skip_space(c);
	if (c->end - c->at >= 4 && memcmp(c->at, "true", 4) == 0) {
		c->at += 4;
		*out = true;
		return 0;
	}
	if (c->end - c->at >= 5 && memcmp(c->at, "false", 5) == 0) {
		c->at += 5;
		*out = false;
		return 0;
	}
	return fail(c, "%s must be true or false", what);
}

/* The rest of an array or object after its opening bracket. */
static int skip_members(struct cursor *c, uint32_t depth, char close, bool keyed)
{
	int ret = 0;

	if (peek(c, close)) {
		c->at++;
		return 0;
	}
	while (!ret) {
		if (keyed) {
			ret = parse_string(c, NULL, 0);
			if (!ret)
				ret = expect_char(c, ':', "after a key");
		}
		if (!ret)
			ret = skip_value(c, depth + 1);
		if (ret)
			break;
		if (!peek(c, ','))
			return expect_char(c, close, "to close a value");
		c->at++;
	}
	return ret;
}

/* Any JSON value, checked for form and dropped. */
static int skip_value(struct cursor *c, uint32_t depth)
{
	static const char *const words[] = { "true", "false", "null" };

	if (depth > TRACE_DEPTH_MAX)
		return fail(c, "values nest deeper than %u", TRACE_DEPTH_MAX);
	skip_space(c);
	if (c->at >= c->end)
		return fail(c, "the line ends where a value was expected");
	if (*c->at == '"')
		return parse_string(c, NULL, 0);
	if (*c->at == '[' || *c->at == '{') {
		bool keyed = *c->at++ == '{';

		return skip_members(c, depth, keyed ? '}' : ']', keyed);
	}
	for (size_t i = 0; i < 3; i++) {
		size_t len = strlen(words[i]);

		if ((size_t)(c->end - c->at) >= len && memcmp(c->at, words[i], len) == 0) {
			c->at += len;
			return 0;
		}
	}
	if (*c->at == '-' || (*c->at >= '0' && *c->at <= '9'))
		return skip_number(c);
	return fail(c, "unexpected '%c' where a value was expected", *c->at);
}

/* [[seed, count], ...] into r->spans. */
static int parse_spans(struct cursor *c, struct launch_trace_request *r)
{
	struct launch_trace_span *spans = NULL;
	int ret = expect_char(c, '[', "to open \"spans\"");

	if (!ret && peek(c, ']'))
		return fail(c, "\"spans\" is empty: a request needs at least one token");
	while (!ret) {
		struct launch_trace_span s;

		if (r->span_count == TRACE_SPANS_MAX)
			return fail(c, "more than %u spans", TRACE_SPANS_MAX);
		ret = expect_char(c, '[', "to open a span [seed, count]");
		if (!ret)
			ret = parse_u64(c, "a span's seed", &s.seed);
		if (!ret)
			ret = expect_char(c, ',', "between a span's seed and count");
		if (!ret)
			ret = parse_u64(c, "a span's count", &s.count);
		if (!ret)
			ret = expect_char(c, ']', "to close a span (two numbers)");
		if (ret)
			break;
		if (s.count == 0)
			return fail(c, "span %u has no tokens", r->span_count + 1);
		if (s.count > TRACE_TOKENS_MAX - r->token_count)
			return fail(c, "the prompt is longer than %llu tokens",
				    (unsigned long long)TRACE_TOKENS_MAX);
		spans = realloc(r->spans, (r->span_count + 1) * sizeof(*spans));
		if (!spans)
			return -ENOMEM;
		r->spans = spans;
		r->spans[r->span_count++] = s;
		r->token_count += s.count;
		if (!peek(c, ','))
			return expect_char(c, ']', "to close \"spans\"");
		c->at++;
	}
	return ret;
}

static int parse_expect(struct cursor *c, struct launch_trace_expect *e)
{
	int ret = expect_char(c, '{', "to open \"expect\"");

	if (!ret && peek(c, '}')) {
		c->at++;
		return 0;
	}
	while (!ret) {
		char key[32];

		ret = parse_string(c, key, sizeof(key) - 1);
		if (!ret)
			ret = expect_char(c, ':', "after a key");
		if (ret)
			break;
		if ((strcmp(key, "gpu_reused") == 0 && e->has_gpu_reused) ||
		    (strcmp(key, "host_reused") == 0 && e->has_host_reused) ||
		    (strcmp(key, "prefilled") == 0 && e->has_prefilled))
			return fail(c, "\"expect\" names \"%s\" twice", key);
		if (strcmp(key, "gpu_reused") == 0) {
			e->has_gpu_reused = true;
			ret = parse_u64(c, "\"gpu_reused\"", &e->gpu_reused);
		} else if (strcmp(key, "host_reused") == 0) {
			e->has_host_reused = true;
			ret = parse_u64(c, "\"host_reused\"", &e->host_reused);
		} else if (strcmp(key, "prefilled") == 0) {
			e->has_prefilled = true;
			ret = parse_u64(c, "\"prefilled\"", &e->prefilled);
		} else {
			return fail(c, "\"expect\" has no key \"%s\" (gpu_reused, host_reused, "
				    "prefilled)", key);
		}
		if (!ret && !peek(c, ','))
			return expect_char(c, '}', "to close \"expect\"");
		c->at++;
	}
	return ret;
}

/* The keys a request has named so far; each may appear once. */
struct seen {
	bool id, spans, expect, settle;
};

/* A key into key (size bytes); a longer one is none of ours: "" then. */
static int parse_key(struct cursor *c, char *key, size_t size)
{
	const char *start = c->at;
	char *err = c->err, scratch[8];
	size_t err_size = c->err_size;
	int ret;

	c->err = scratch; /* a long key is not an error: keep err clean */
	c->err_size = sizeof(scratch);
	ret = parse_string(c, key, size - 1);
	c->err = err;
	c->err_size = err_size;
	if (ret == 0)
		return 0;
	c->at = start;
	key[0] = '\0';
	return parse_string(c, NULL, 0);
}

static int parse_member(struct cursor *c, struct launch_trace_request *r, struct seen *seen)
{
	char key[64];
	int ret = parse_key(c, key, sizeof(key));

	if (!ret)
		ret = expect_char(c, ':', "after a key");
	if (ret)
		return ret;
	if (strcmp(key, "id") == 0) {
		if (seen->id)
			return fail(c, "\"id\" appears twice");
		seen->id = true;
		ret = parse_string(c, r->id, TRACE_ID_BYTES_MAX);
		if (!ret && r->id[0] == '\0')
			return fail(c, "\"id\" is empty");
		return ret;
	}
	if (strcmp(key, "spans") == 0) {
		if (seen->spans)
			return fail(c, "\"spans\" appears twice");
		seen->spans = true;
		return parse_spans(c, r);
	}
	if (strcmp(key, "expect") == 0) {
		if (seen->expect)
			return fail(c, "\"expect\" appears twice");
		seen->expect = true;
		return parse_expect(c, &r->expect);
	}
	if (strcmp(key, "settle") == 0) {
		if (seen->settle)
			return fail(c, "\"settle\" appears twice");
		seen->settle = true;
		return parse_bool(c, "\"settle\"", &r->settle);
	}
	if (strcmp(key, "note") == 0)
		return skip_value(c, 1); /* free-form: any JSON value */
	/* a misspelt key would silently drop what it meant ("expcet") */
	if (key[0] == '\0')
		return fail(c, "unknown key (longer than %zu bytes) in a request; a request "
			    "holds \"id\", \"spans\", \"expect\", \"settle\" and \"note\"",
			    sizeof(key) - 2);
	return fail(c, "unknown key \"%s\" in a request; a request holds \"id\", "
		    "\"spans\", \"expect\", \"settle\" and \"note\"", key);
}

/* One line: an object holding "id" and "spans". */
static int parse_request(struct cursor *c, struct launch_trace_request *r)
{
	struct seen seen = { 0 };
	int ret = expect_char(c, '{', "to open a request");

	r->line = c->line;
	if (!ret && peek(c, '}'))
		return fail(c, "a request needs \"id\" and \"spans\"");
	while (!ret) {
		ret = parse_member(c, r, &seen);
		if (ret)
			break;
		if (!peek(c, ',')) {
			ret = expect_char(c, '}', "to close the request");
			break;
		}
		c->at++;
	}
	if (!ret && !seen.id)
		return fail(c, "a request needs an \"id\"");
	if (!ret && !seen.spans)
		return fail(c, "request \"%s\" has no \"spans\"", r->id);
	skip_space(c);
	if (!ret && c->at < c->end)
		return fail(c, "text after the request's closing '}'");
	return ret;
}

void launch_trace_free(struct launch_trace *trace)
{
	for (uint32_t i = 0; i < trace->request_count; i++)
		free(trace->requests[i].spans);
	free(trace->requests);
	trace->requests = NULL;
	trace->request_count = 0;
}

static bool blank(const char *at, const char *end)
{
	for (; at < end; at++)
		if (*at != ' ' && *at != '\t' && *at != '\r')
			return false;
	return true;
}

/* Appends the request on [line, end); 0, or -EINVAL/-ENOMEM. */
static int add_line(struct launch_trace *t, struct cursor *c, size_t *capacity)
{
	struct launch_trace_request *r;

	if ((size_t)(c->end - c->at) > TRACE_LINE_BYTES_MAX)
		return fail(c, "longer than %u bytes", TRACE_LINE_BYTES_MAX);
	if (t->request_count == TRACE_REQUESTS_MAX)
		return fail(c, "a trace holds at most %u requests", TRACE_REQUESTS_MAX);
	if (t->request_count == *capacity) {
		size_t grown = *capacity ? *capacity * 2 : 16;
		struct launch_trace_request *more = realloc(t->requests, grown * sizeof(*more));

		if (!more)
			return -ENOMEM;
		t->requests = more;
		*capacity = grown;
	}
	r = &t->requests[t->request_count];
	memset(r, 0, sizeof(*r));
	int ret = parse_request(c, r);

	if (ret) {
		free(r->spans);
		return ret;
	}
	t->request_count++;
	return 0;
}

static int by_id_then_line(const void *a, const void *b)
{
	const struct launch_trace_request *x = *(const struct launch_trace_request *const *)a;
	const struct launch_trace_request *y = *(const struct launch_trace_request *const *)b;
	int order = strcmp(x->id, y->id);

	return order ? order : (x->line > y->line) - (x->line < y->line);
}

/*
 * Every id once: sorted, so a million requests cost n log n. Names the
 * earliest line whose id an earlier line already had.
 */
static int check_unique_ids(const struct launch_trace *t, char *err, size_t err_size)
{
	const struct launch_trace_request **sorted = malloc(t->request_count * sizeof(*sorted));
	const struct launch_trace_request *first = NULL, *again = NULL;

	if (!sorted)
		return -ENOMEM;
	for (uint32_t i = 0; i < t->request_count; i++)
		sorted[i] = &t->requests[i];
	qsort(sorted, t->request_count, sizeof(*sorted), by_id_then_line);
	for (uint32_t i = 1; i < t->request_count; i++) {
		if (strcmp(sorted[i - 1]->id, sorted[i]->id) != 0)
			continue;
		if (!again || sorted[i]->line < again->line) {
			uint32_t j = i - 1;

			while (j > 0 && strcmp(sorted[j - 1]->id, sorted[i]->id) == 0)
				j--;
			first = sorted[j];
			again = sorted[i];
		}
	}
	free(sorted);
	if (!again)
		return 0;
	snprintf(err, err_size, "line %u: id \"%s\" is also on line %u", again->line, again->id,
		 first->line);
	return -EINVAL;
}

int launch_trace_parse(const char *text, size_t size, struct launch_trace *out, char *err,
		       size_t err_size)
{
	struct launch_trace t = { 0 };
	const char *at = text, *end = text + size;
	size_t capacity = 0;
	uint32_t line = 0;
	int ret = 0;

	while (!ret && at < end) {
		const char *nl = memchr(at, '\n', (size_t)(end - at));
		struct cursor c = { at, nl ? nl : end, ++line, err, err_size };

		if (!blank(c.at, c.end))
			ret = add_line(&t, &c, &capacity);
		at = nl ? nl + 1 : end;
	}
	if (!ret && t.request_count == 0) {
		snprintf(err, err_size, "the trace holds no request");
		ret = -EINVAL;
	}
	if (!ret)
		ret = check_unique_ids(&t, err, err_size);
	if (ret == -ENOMEM)
		snprintf(err, err_size, "out of memory at line %u", line);
	if (ret)
		launch_trace_free(&t);
	*out = t;
	return ret;
}

int launch_trace_load(const char *path, struct launch_trace *out, char *err, size_t err_size)
{
	FILE *f = fopen(path, "rb");
	char *text = NULL, why[400];
	size_t size = 0, capacity = 0, n;
	int ret;

	memset(out, 0, sizeof(*out));
	if (!f) {
		ret = -errno;
		snprintf(err, err_size, "cannot open trace %s: %s", path, strerror(-ret));
		return ret;
	}
	do {
		if (size == capacity) {
			char *more = capacity >= (size_t)TRACE_REQUESTS_MAX * 4096 ? NULL :
				realloc(text, capacity = capacity ? capacity * 2 : 65536);

			if (!more) {
				free(text);
				fclose(f);
				snprintf(err, err_size, "trace %s is too large to read", path);
				return -ENOMEM;
			}
			text = more;
		}
		n = fread(text + size, 1, capacity - size, f);
		size += n;
	} while (n > 0);
	ret = ferror(f) ? -EIO : 0;
	fclose(f);
	if (ret)
		snprintf(err, err_size, "cannot read trace %s", path);
	else if ((ret = launch_trace_parse(text, size, out, why, sizeof(why))) != 0)
		snprintf(err, err_size, "trace %s: %s", path, why);
	free(text);
	return ret;
}
