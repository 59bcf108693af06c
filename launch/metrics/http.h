/*
 * A minimal HTTP/1.x server for one page, /metrics (selene run
 * --metrics-port), written here rather than taken from a library: it
 * answers GET /metrics (and GET /) with what render writes, in the
 * Prometheus text format, 404 for any other path, 405 for any other method
 * and 400 for what is not a request line; up to 16 connections read at
 * once, each closed after its answer and each with a deadline for its
 * request, so clients that connect and say nothing delay no scrape and
 * never stop the server (past 16, the oldest is dropped). Its thread runs
 * below the model's (SCHED_BATCH at nice 10, as Selene's background threads)
 * and its work per second is bounded (the two rates below). It is not a
 * general web server: no keep-alive, no TLS, no request bodies.
 */
#ifndef SELENE_LAUNCH_METRICS_HTTP_H
#define SELENE_LAUNCH_METRICS_HTTP_H

#include <stddef.h>
#include <stdint.h>

struct launch_metrics_http;

/* Writes the page into buf; returns its length, or a negative code
 * (-ENOSPC: the buffer is too small; the server doubles it up to 1 MiB). */
typedef int (*launch_metrics_render_fn)(void *ctx, char *buf, size_t size);

/*
 * Pages rendered per second, as a token bucket of this many tokens filled
 * at this rate: a render reads the store's counters, so a scrape flood
 * must not take the CPU or the store from the model thread. A request
 * beyond it is answered 503 with Retry-After, without a render, and
 * counted (selene_metrics_http_refused_total).
 */
#define LAUNCH_METRICS_RENDERS_PER_SECOND_MAX 10u
/*
 * Connections accepted per second (each second from the first of its
 * connections): past this the listener is left alone until the next
 * second, so a connection flood costs this thread no more than this many
 * accepts, reads and short answers a second; the kernel's backlog holds or
 * refuses the rest. Counted (selene_metrics_http_paused_total).
 */
#define LAUNCH_METRICS_CONNECTIONS_PER_SECOND_MAX 200u
/* A request line and headers longer than this are refused (400). */
#define LAUNCH_METRICS_REQUEST_BYTES_MAX 8192u
/* How long a connection may take to send its request. */
#define LAUNCH_METRICS_REQUEST_TIMEOUT_MS 2000u

/*
 * Listens on address (an IPv4 or IPv6 literal, or a host name; NULL means
 * 127.0.0.1) and port (0: one the kernel picks; *port_out says which) and
 * serves from a thread of its own; render runs on that thread with ctx.
 * Returns 0, or a negative code with err.
 */
int launch_metrics_http_start(const char *address, uint16_t port,
			      launch_metrics_render_fn render, void *ctx,
			      struct launch_metrics_http **out, uint16_t *port_out,
			      char *err, size_t err_size);

/* What the server did so far (any thread may ask). */
struct launch_metrics_http_counts {
	uint64_t rendered;  /* pages rendered and answered 200 */
	uint64_t refused;   /* requests answered 503: past the render rate */
	uint64_t paused;    /* seconds the listener was left alone: past the connection rate */
};
void launch_metrics_http_counts(struct launch_metrics_http *server,
				struct launch_metrics_http_counts *out);

/* Stops serving and joins the thread: render is not called after it
 * returns. NULL is fine. */
void launch_metrics_http_stop(struct launch_metrics_http *server);

#endif
