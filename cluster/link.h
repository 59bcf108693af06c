/*
 * A link (docs/DESIGN.md section 7): one connected socket between rank zero and
 * a peer, with a reader thread that delivers frames to a callback and a
 * writer thread that sends from a bounded queue. Where the socket is idle
 * and nothing is queued, the sender writes its frame itself, without
 * blocking, and queues only what the socket did not take (one wake-up less
 * per frame). Sending never blocks: a full queue fails the frame at once
 * (SEL_EQUEUEFULL), so a peer that stops reading cannot stall the caller.
 * An idle writer sends heartbeats;
 * a link that hears nothing for its silence timeout, or whose send stalls
 * that long, dies (TCP alone takes minutes to notice a silent peer). A
 * dead link says so once, through on_close, and refuses every later send
 * (SEL_ESTOPPED). Everything is allocated at start.
 */
#ifndef SELENE_CLUSTER_LINK_H
#define SELENE_CLUSTER_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cluster_link;

struct cluster_link_options {
	int fd;                       /* connected; owned by the link from start */
	uint64_t queue_bytes_max;     /* the writer queue (frames and their sizes) */
	uint32_t heartbeat_ms;        /* idle time before a heartbeat; 0: none */
	uint32_t silence_timeout_ms;  /* nothing heard, or a send stalled: dead */
	uint64_t send_sequence;       /* the next frame numbers, after a handshake */
	uint64_t recv_sequence;
	/*
	 * Called on the reader thread for every frame but heartbeats; payload
	 * is valid during the call only.
	 */
	void (*on_frame)(void *ctx, uint16_t type, const uint8_t *payload,
			 uint32_t length);
	/*
	 * Called once, on the thread that found the link dead: reason is 0 (the
	 * peer closed between frames), -ETIMEDOUT, SEL_EPROTO, another
	 * negative errno, or SEL_ESTOPPED (closed by cluster_link_close).
	 */
	void (*on_close)(void *ctx, int reason, const char *why);
	void *ctx;
};

struct cluster_link_stats {
	uint64_t frames_sent;
	uint64_t frames_received;
	uint64_t heartbeats_sent;
	uint64_t queue_full;      /* sends refused for lack of queue space */
	uint64_t queued_bytes;    /* in the queue now */
};

/*
 * Keepalive on a TCP socket from the silence timeout: probes after about a
 * third of it idle, every third, and TCP_USER_TIMEOUT at it, so a peer whose
 * host is gone (no reset, no end of file) fails a blocked read or write
 * with ETIMEDOUT. A socket that is not TCP is left as it is.
 */
void cluster_socket_keepalive(int fd, uint32_t silence_ms);

/*
 * Sets TCP_NODELAY, keepalive and TCP_USER_TIMEOUT where the socket is
 * TCP, socket send and receive timeouts, and starts the threads. Returns 0
 * and *out, or a negative errno (the fd is closed on failure). *out is set
 * before the threads start, so on_frame may already send on it.
 */
int cluster_link_start(const struct cluster_link_options *options,
		       struct cluster_link **out);

/*
 * Sends one frame (payload copied; length within the type's bounds): when
 * the socket is idle and nothing is queued, the calling thread writes it
 * without blocking, else (and for what the socket did not take) it is
 * queued for the writer thread. Returns 0, SEL_EQUEUEFULL when the queue
 * has no room, or SEL_ESTOPPED when the link is dead or closing. Never
 * blocks on the network; a write that fails kills the link later, through
 * on_close on the writer thread.
 */
int cluster_link_send(struct cluster_link *link, uint16_t type,
		      const uint8_t *payload, uint32_t length);

/*
 * As cluster_link_send, but always through the writer thread: the caller
 * does no socket I/O. For one frame fanned out to many links, where the
 * writers then send in parallel.
 */
int cluster_link_post(struct cluster_link *link, uint16_t type,
		      const uint8_t *payload, uint32_t length);

/* Whether the link is still up. */
bool cluster_link_alive(struct cluster_link *link);

void cluster_link_stats(struct cluster_link *link, struct cluster_link_stats *out);

/*
 * Stops the link: with linger_ms > 0, queues BYE (R-WIRE-23) and sends what
 * is queued, BYE last, for up to linger_ms (then BYE is not guaranteed);
 * with 0, sends no BYE, so the other side sees a failure. Then shuts the
 * socket down, joins the threads and frees it.
 * on_close runs (with SEL_ESTOPPED) if the link was still alive. NULL is
 * fine.
 */
void cluster_link_close(struct cluster_link *link, uint32_t linger_ms);

#endif
