/*
 * A minimal HTTP/1.x server for one page, /metrics (selene run
 * --metrics-port), written here rather than taken from a library: it
 * answers GET /metrics (and GET /) with what render writes, in the
 * Prometheus text format, 404 for any other path, 405 for any other method
 * and 400 for what is not a request line; up to 16 connections read at
 * once, each closed after its answer and each with a deadline for its
 * request, so clients that connect and say nothing delay no scrape and
 * never stop the server (past 16, the oldest is dropped). It is not a general web server: no
 * keep-alive, no TLS, no request bodies.
 */
#ifndef SELENE_LAUNCH_METRICS_HTTP_H
#define SELENE_LAUNCH_METRICS_HTTP_H

#include <stddef.h>
#include <stdint.h>

struct launch_metrics_http;

/* Writes the page into buf; returns its length, or a negative code
 * (-ENOSPC: the buffer is too small; the server doubles it up to 1 MiB). */
typedef int (*launch_metrics_render_fn)(void *ctx, char *buf, size_t size);

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

/* Stops serving and joins the thread: render is not called after it
 * returns. NULL is fine. */
void launch_metrics_http_stop(struct launch_metrics_http *server);

#endif
