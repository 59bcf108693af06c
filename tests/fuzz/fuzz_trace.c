/*
 * libFuzzer target for the reference worker's trace parser (launch/worker/trace.c):
 * any bytes as a trace. A trace it accepts must keep the bounds trace.h
 * names (ids, spans, tokens, requests) and sum every request's spans to its
 * token count; a trace it refuses must say why and leave nothing to free.
 * Build with `make fuzz-build`, run with `make fuzz` or `make torture`.
 */
#include "launch/worker/trace.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_request(const struct launch_trace_request *q)
{
	uint64_t tokens = 0;

	if (q->id[0] == '\0' || strlen(q->id) > TRACE_ID_BYTES_MAX)
		__builtin_trap();
	if (q->span_count == 0 || q->span_count > TRACE_SPANS_MAX || !q->spans)
		__builtin_trap();
	for (uint32_t i = 0; i < q->span_count; i++)
		tokens += q->spans[i].count;
	if (tokens != q->token_count || tokens > TRACE_TOKENS_MAX || q->line == 0)
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct launch_trace trace;
	char err[256];
	int ret = launch_trace_parse((const char *)data, size, &trace, err, sizeof(err));

	if (ret != 0) {
		if (err[0] == '\0' || trace.request_count != 0 || trace.requests)
			__builtin_trap();
		return 0;
	}
	if (trace.request_count > TRACE_REQUESTS_MAX)
		__builtin_trap();
	for (uint32_t i = 0; i < trace.request_count; i++)
		check_request(&trace.requests[i]);
	launch_trace_free(&trace);
	return 0;
}
