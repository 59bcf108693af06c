/*
 * launch/metrics/http.h. One thread: poll() on the listening socket, a
 * stop pipe and up to METRICS_CONNECTIONS_MAX accepted connections, each
 * read (with its own deadline) until the end of its headers, then answered
 * and closed. A connection that says nothing delays no other: it is
 * closed at its deadline, or when the table is full and another arrives
 * (the oldest goes). The thread runs SCHED_BATCH at nice 10; renders are
 * rationed by a token bucket (a request past it gets 503 without one), and
 * accepts by a count per second past which the listener is not polled
 * until the next second.
 */
#include "launch/metrics/http.h"

#include "common/base.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define METRICS_PAGE_BYTES_MAX (1u << 20)
/* Connections read at once; past this the oldest is dropped. */
#define METRICS_CONNECTIONS_MAX 16u

/* An accepted connection whose request is still coming in. */
struct metrics_conn {
	int fd;                 /* -1: a free entry */
	uint64_t deadline_ns;
	size_t used;
	char request[LAUNCH_METRICS_REQUEST_BYTES_MAX];
};

struct launch_metrics_http {
	struct metrics_conn conns[METRICS_CONNECTIONS_MAX];
	int listen_fd;
	int stop_pipe[2];
	launch_metrics_render_fn render;
	void *ctx;
	char *page;
	size_t page_size;
	pthread_t thread;
	/* the render bucket as the time it is next full again (GCRA) */
	uint64_t render_full_ns;
	uint64_t window_start_ns;  /* the second the accepts are counted in */
	uint32_t window_accepts;
	uint64_t paused_until_ns;  /* 0, or when the listener is polled again */
	atomic_uint_least64_t rendered, refused, paused;
};

#define NS_PER_SECOND 1000000000ull
#define RENDER_INTERVAL_NS (NS_PER_SECOND / LAUNCH_METRICS_RENDERS_PER_SECOND_MAX)

static void send_all(int fd, const char *data, size_t len)
{
	while (len) {
		ssize_t n = send(fd, data, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return; /* the client went away: nothing to tell it */
		data += n;
		len -= (size_t)n;
	}
}

static void answer(int fd, const char *status, const char *type, const char *body,
		   size_t body_len)
{
	char head[256];
	int n = snprintf(head, sizeof(head), "HTTP/1.0 %s\r\nContent-Type: %s\r\n"
			 "Content-Length: %zu\r\n%sConnection: close\r\n\r\n", status, type,
			 body_len, strncmp(status, "503", 3) == 0 ? "Retry-After: 1\r\n" : "");

	send_all(fd, head, (size_t)n);
	send_all(fd, body, body_len);
}

static void answer_text(int fd, const char *status, const char *text)
{
	answer(fd, status, "text/plain; charset=utf-8", text, strlen(text));
}

/*
 * Reads what c's client has sent. Returns 1 once the blank line that ends
 * the headers is in, 0 while more may come, -1 when the client closed, the
 * read failed or the request is too long.
 */
static int read_more(struct metrics_conn *c)
{
	ssize_t n;

	if (c->used >= sizeof(c->request) - 1)
		return -1;
	do
		n = recv(c->fd, c->request + c->used, sizeof(c->request) - 1 - c->used,
			 MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (n <= 0)
		return -1;
	c->used += (size_t)n;
	c->request[c->used] = '\0';
	if (strstr(c->request, "\r\n\r\n") || strstr(c->request, "\n\n"))
		return 1;
	return c->used >= sizeof(c->request) - 1 ? -1 : 0;
}

/*
 * Takes a render from the bucket: true when one is left at now. The bucket
 * holds LAUNCH_METRICS_RENDERS_PER_SECOND_MAX renders and gains one every
 * RENDER_INTERVAL_NS.
 */
static bool take_render(struct launch_metrics_http *s, uint64_t now)
{
	const uint64_t burst_ns = (LAUNCH_METRICS_RENDERS_PER_SECOND_MAX - 1) *
				  RENDER_INTERVAL_NS;

	if (s->render_full_ns < now)
		s->render_full_ns = now;
	if (s->render_full_ns - now > burst_ns)
		return false;
	s->render_full_ns += RENDER_INTERVAL_NS;
	return true;
}

/* The server's own family after the page: what it refused. */
static int render_own(struct launch_metrics_http *s, char *buf, size_t size)
{
	int n = snprintf(buf, size,
			 "# HELP selene_metrics_http_refused_total Scrapes answered 503: more "
			 "than %u a second.\n"
			 "# TYPE selene_metrics_http_refused_total counter\n"
			 "selene_metrics_http_refused_total %llu\n",
			 LAUNCH_METRICS_RENDERS_PER_SECOND_MAX,
			 (unsigned long long)atomic_load(&s->refused));

	return n < 0 || (size_t)n >= size ? -ENOSPC : n;
}

/* The page, rendered into a buffer that grows until it fits. */
static int render_page(struct launch_metrics_http *s)
{
	for (;;) {
		int n = s->render(s->ctx, s->page, s->page_size), m;
		char *bigger;

		if (n >= 0 && (m = render_own(s, s->page + n, s->page_size - (size_t)n)) >= 0)
			return n + m;
		if (n >= 0)
			n = -ENOSPC;
		if (n != -ENOSPC || s->page_size >= METRICS_PAGE_BYTES_MAX)
			return n;
		bigger = realloc(s->page, s->page_size * 2);
		if (!bigger)
			return -ENOMEM;
		s->page = bigger;
		s->page_size *= 2;
	}
}

/* "METHOD /path HTTP/1.x" and the line's end: an upper-case method, an
 * absolute path without blanks or control characters. */
static bool parse_request_line(const char *line, char *method, size_t method_size,
			       char *path, size_t path_size)
{
	size_t m = 0, p = 0;

	while (line[m] >= 'A' && line[m] <= 'Z' && m < method_size - 1)
		m++;
	if (m == 0 || line[m] != ' ' || line[m + 1] != '/')
		return false;
	memcpy(method, line, m);
	method[m] = '\0';
	line += m + 1;
	while ((unsigned char)line[p] > ' ' && line[p] != 0x7f && p < path_size - 1)
		p++;
	if (line[p] != ' ')
		return false;
	memcpy(path, line, p);
	path[p] = '\0';
	line += p + 1;
	return (strncmp(line, "HTTP/1.0", 8) == 0 || strncmp(line, "HTTP/1.1", 8) == 0) &&
	       (line[8] == '\r' || line[8] == '\n');
}

/* Answers c's request (complete, or not: 400) and closes it. */
static void serve_one(struct launch_metrics_http *s, struct metrics_conn *c, bool complete)
{
	char method[16], path[256];
	int fd = c->fd, n;

	c->fd = -1;
	if (!complete ||
	    !parse_request_line(c->request, method, sizeof(method), path, sizeof(path))) {
		answer_text(fd, "400 Bad Request", "not an HTTP/1.x request\n");
	} else if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
		answer_text(fd, "405 Method Not Allowed", "only GET\n");
	} else if (strcmp(path, "/metrics") != 0 && strcmp(path, "/") != 0) {
		answer_text(fd, "404 Not Found", "only /metrics\n");
	} else if (!take_render(s, sel_monotonic_ns())) {
		atomic_fetch_add(&s->refused, 1);
		answer_text(fd, "503 Service Unavailable", "too many scrapes: try again\n");
	} else if ((n = render_page(s)) < 0) {
		answer_text(fd, "500 Internal Server Error", "the metrics could not be written\n");
	} else {
		atomic_fetch_add(&s->rendered, 1);
		answer(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", s->page,
		       strcmp(method, "HEAD") == 0 ? 0 : (size_t)n);
	}
	close(fd);
}

/* Takes a new connection into a free entry, dropping the oldest if none is. */
static void take_connection(struct launch_metrics_http *s, int fd)
{
	struct metrics_conn *slot = NULL;

	for (uint32_t i = 0; i < METRICS_CONNECTIONS_MAX && !slot; i++)
		if (s->conns[i].fd < 0)
			slot = &s->conns[i];
	if (!slot) {
		slot = &s->conns[0];
		for (uint32_t i = 1; i < METRICS_CONNECTIONS_MAX; i++)
			if (s->conns[i].deadline_ns < slot->deadline_ns)
				slot = &s->conns[i];
		serve_one(s, slot, false);
	}
	/* a client that never reads must not hold this thread, nor stop */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO,
		   &(struct timeval){ .tv_sec = LAUNCH_METRICS_REQUEST_TIMEOUT_MS / 1000,
				      .tv_usec = LAUNCH_METRICS_REQUEST_TIMEOUT_MS % 1000 * 1000 },
		   sizeof(struct timeval));
	slot->fd = fd;
	slot->used = 0;
	slot->request[0] = '\0';
	slot->deadline_ns = sel_monotonic_ns() + LAUNCH_METRICS_REQUEST_TIMEOUT_MS * 1000000ull;
}

/*
 * Counts an accept in the current second; the last one the second allows
 * leaves the listener alone until the second ends.
 */
static void count_accept(struct launch_metrics_http *s, uint64_t now)
{
	if (now - s->window_start_ns >= NS_PER_SECOND) {
		s->window_start_ns = now;
		s->window_accepts = 0;
	}
	if (++s->window_accepts >= LAUNCH_METRICS_CONNECTIONS_PER_SECOND_MAX) {
		s->paused_until_ns = s->window_start_ns + NS_PER_SECOND;
		atomic_fetch_add(&s->paused, 1);
	}
}

static void *serve(void *arg)
{
	struct launch_metrics_http *s = arg;

	/* below the model's threads, as every thread Selene starts */
	sel_thread_batch_priority("metrics");
	for (;;) {
		struct pollfd p[2 + METRICS_CONNECTIONS_MAX] = {
			{ .fd = s->listen_fd, .events = POLLIN },
			{ .fd = s->stop_pipe[0], .events = POLLIN } };
		struct metrics_conn *polled[METRICS_CONNECTIONS_MAX];
		uint64_t now = sel_monotonic_ns(), wake = UINT64_MAX;
		nfds_t n = 2;
		int fd, ready;

		if (s->paused_until_ns > now) {
			p[0].fd = -1; /* past the connection rate: not polled (revents 0) */
			wake = s->paused_until_ns;
		} else {
			s->paused_until_ns = 0;
		}
		/* Only the open ones: poll refuses more entries than RLIMIT_NOFILE. */
		for (uint32_t i = 0; i < METRICS_CONNECTIONS_MAX; i++) {
			if (s->conns[i].fd < 0)
				continue;
			polled[n - 2] = &s->conns[i];
			p[n++] = (struct pollfd){ .fd = s->conns[i].fd, .events = POLLIN };
			if (s->conns[i].deadline_ns < wake)
				wake = s->conns[i].deadline_ns;
		}
		ready = poll(p, n, wake == UINT64_MAX ? -1 :
				   wake <= now ? 0 : (int)((wake - now) / 1000000 + 1));
		if (ready < 0 && errno == EINVAL) {
			/* descriptors limited below the entries: back off, then the deadlines */
			nanosleep(&(struct timespec){ 0, 100000000 }, NULL);
		} else if (ready < 0 && errno != EINTR) {
			break;
		}
		if (ready > 0 && p[1].revents)
			break;
		now = sel_monotonic_ns();
		for (nfds_t i = 2; i < n; i++) {
			struct metrics_conn *c = polled[i - 2];
			int got = ready > 0 && p[i].revents ? read_more(c) : 0;

			if (got != 0 || now >= c->deadline_ns)
				serve_one(s, c, got == 1);
		}
		if (ready <= 0 || !(p[0].revents & POLLIN))
			continue;
		fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
			continue; /* a connection reset before accept */
		if (fd < 0) {
			/* no descriptors or memory now: back off (stop still heard) */
			if (poll(&p[1], 1, 100) > 0)
				break;
			continue;
		}
		count_accept(s, now);
		take_connection(s, fd);
	}
	for (uint32_t i = 0; i < METRICS_CONNECTIONS_MAX; i++)
		if (s->conns[i].fd >= 0)
			close(s->conns[i].fd);
	return NULL;
}

static int listen_on(const char *address, uint16_t port, uint16_t *port_out, char *err,
		     size_t err_size)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV }, *list, *a;
	char service[8];
	int fd = -1, ret, one = 1;

	if (!address)
		address = "127.0.0.1";
	snprintf(service, sizeof(service), "%u", port);
	ret = getaddrinfo(address, service, &hints, &list);
	if (ret) {
		snprintf(err, err_size, "--metrics-address %s: %s", address, gai_strerror(ret));
		return -EINVAL;
	}
	for (a = list; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		/* the backlog holds a second's connections while the listener rests */
		if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 &&
		    listen(fd, (int)LAUNCH_METRICS_CONNECTIONS_PER_SECOND_MAX * 2) == 0)
			break;
		ret = -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(list);
	if (fd < 0) {
		snprintf(err, err_size, "cannot listen on %s port %u: %s", address, port,
			 strerror(ret ? -ret : EINVAL));
		return ret ? ret : -EINVAL;
	}
	{
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);

		getsockname(fd, (struct sockaddr *)&ss, &len);
		*port_out = ntohs(ss.ss_family == AF_INET6 ?
				  ((struct sockaddr_in6 *)&ss)->sin6_port :
				  ((struct sockaddr_in *)&ss)->sin_port);
	}
	return fd;
}

int launch_metrics_http_start(const char *address, uint16_t port,
			      launch_metrics_render_fn render, void *ctx,
			      struct launch_metrics_http **out, uint16_t *port_out,
			      char *err, size_t err_size)
{
	struct launch_metrics_http *s = calloc(1, sizeof(*s));
	int ret;

	if (!s)
		return -ENOMEM;
	s->render = render;
	s->ctx = ctx;
	for (uint32_t i = 0; i < METRICS_CONNECTIONS_MAX; i++)
		s->conns[i].fd = -1;
	s->page_size = 16384;
	s->page = malloc(s->page_size);
	s->listen_fd = listen_on(address, port, port_out, err, err_size);
	if (s->listen_fd < 0) {
		ret = s->listen_fd;
		goto err_free;
	}
	if (!s->page || pipe2(s->stop_pipe, O_CLOEXEC) != 0) {
		ret = -ENOMEM;
		snprintf(err, err_size, "cannot start the metrics server: out of resources");
		goto err_close_listen;
	}
	ret = sel_thread_start(&s->thread, serve, s);
	if (ret) {
		snprintf(err, err_size, "cannot start the metrics thread: %s", strerror(-ret));
		goto err_close_pipe;
	}
	*out = s;
	return 0;

err_close_pipe:
	close(s->stop_pipe[0]);
	close(s->stop_pipe[1]);
err_close_listen:
	close(s->listen_fd);
err_free:
	free(s->page);
	free(s);
	return ret;
}

void launch_metrics_http_counts(struct launch_metrics_http *s,
				struct launch_metrics_http_counts *out)
{
	out->rendered = atomic_load(&s->rendered);
	out->refused = atomic_load(&s->refused);
	out->paused = atomic_load(&s->paused);
}

void launch_metrics_http_stop(struct launch_metrics_http *s)
{
	if (!s)
		return;
	while (write(s->stop_pipe[1], "x", 1) < 0 && errno == EINTR)
		;
	pthread_join(s->thread, NULL);
	close(s->stop_pipe[0]);
	close(s->stop_pipe[1]);
	close(s->listen_fd);
	free(s->page);
	free(s);
}
