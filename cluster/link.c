/*
 * Links: see link.h. The queue is one byte ring of entries (u16 type, u32
 * length, payload), filled by senders under a mutex and drained by the
 * writer thread, which holds the mutex only while it copies an entry out.
 *
 * A send that finds the socket idle and the queue empty writes its frame
 * itself, without blocking (MSG_DONTWAIT), which saves waking the writer
 * thread on every job and every answer. Whatever the socket does not take
 * at once goes to the front of the queue as a raw entry (the rest of a frame
 * already begun), for the writer. One thread writes to the socket at a time
 * (writing), and frame numbers are taken under the mutex in socket order.
 */
#include "cluster/link.h"

#include "cluster/protocol.h"
#include "common/base.h"
#include "common/failpoint.h"
#include "common/limits.h"
#include "common/log.h"
#include "selene/selene.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ENTRY_HEAD_BYTES 6u /* u16 type, u32 length */
#define ENTRY_RAW 0xffffu   /* the unsent rest of a frame a sender began */

/* The rest of a direct send waits in the queue and goes out of write_buf. */
_Static_assert(CLUSTER_FRAME_HEADER_BYTES + CLUSTER_DIRECT_PAYLOAD_BYTES_MAX <=
		       CLUSTER_FRAME_PAYLOAD_BYTES_MAX,
	       "a direct send's rest fits the writer's buffer");

struct cluster_link {
	int fd;
	struct cluster_link_options options;
	pthread_t reader, writer;
	bool reader_started, writer_started;
	pthread_mutex_t lock;
	pthread_cond_t queue_ready;  /* the writer waits for entries or stop */
	pthread_cond_t queue_drained;
	uint8_t *ring;               /* queue_bytes_max bytes */
	uint64_t ring_head, ring_used;
	bool stopping;
	bool writing;                /* a thread is writing to the socket */
	uint64_t send_sequence;      /* the next frame's number */
	uint64_t reserved;           /* ring bytes held for a direct send's rest */
	int direct_error;            /* a direct send failed: the writer reports it */
	uint8_t *direct_buf;         /* a direct send's frame, header and payload
					(CLUSTER_DIRECT_PAYLOAD_BYTES_MAX at most) */
	int dead;                    /* 0 alive, 1 dead (on_close ran) */
	uint8_t *read_buf;           /* one payload: CLUSTER_FRAME_PAYLOAD_BYTES_MAX */
	uint8_t *write_buf;          /* the entry being written */
	struct cluster_link_stats stats;
};

/* Marks the link dead and calls on_close exactly once. */
static void link_die(struct cluster_link *l, int reason, const char *why)
{
	bool first;

	pthread_mutex_lock(&l->lock);
	first = !l->dead;
	l->dead = 1;
	pthread_cond_broadcast(&l->queue_ready);
	pthread_cond_broadcast(&l->queue_drained);
	pthread_mutex_unlock(&l->lock);
	if (!first)
		return;
	/* Unblock the other thread's read or write. */
	shutdown(l->fd, SHUT_RDWR);
	if (l->options.on_close)
		l->options.on_close(l->options.ctx, reason, why);
}

static void ring_copy_out(struct cluster_link *l, uint64_t offset, uint8_t *dst,
			  uint64_t n)
{
	uint64_t size = l->options.queue_bytes_max;
	uint64_t at = offset % size, first = n < size - at ? n : size - at;

	memcpy(dst, l->ring + at, (size_t)first);
	memcpy(dst + first, l->ring, (size_t)(n - first));
}

static void ring_copy_in(struct cluster_link *l, uint64_t offset, const uint8_t *src,
			 uint64_t n)
{
	uint64_t size = l->options.queue_bytes_max;
	uint64_t at = offset % size, first = n < size - at ? n : size - at;

	memcpy(l->ring + at, src, (size_t)first);
	memcpy(l->ring, src + first, (size_t)(n - first));
}

/* Puts an entry at the back of the queue (lock held; room checked). */
static void queue_back(struct cluster_link *l, uint16_t type, const uint8_t *payload,
		       uint32_t length)
{
	uint8_t head[ENTRY_HEAD_BYTES];

	head[0] = (uint8_t)type;
	head[1] = (uint8_t)(type >> 8);
	sel_put_le32(head + 2, length);
	ring_copy_in(l, l->ring_head + l->ring_used, head, ENTRY_HEAD_BYTES);
	if (length)
		ring_copy_in(l, l->ring_head + l->ring_used + ENTRY_HEAD_BYTES, payload, length);
	l->ring_used += ENTRY_HEAD_BYTES + (uint64_t)length;
	l->stats.queued_bytes = l->ring_used;
}

/* Puts the rest of a begun frame at the front (lock held; room reserved). */
static void queue_front_raw(struct cluster_link *l, const uint8_t *bytes, uint32_t length)
{
	uint64_t size = l->options.queue_bytes_max, need = ENTRY_HEAD_BYTES + (uint64_t)length;
	uint8_t head[ENTRY_HEAD_BYTES];

	SEL_ASSERT(l->ring_used + need <= size);
	head[0] = (uint8_t)ENTRY_RAW;
	head[1] = (uint8_t)(ENTRY_RAW >> 8);
	sel_put_le32(head + 2, length);
	l->ring_head = (l->ring_head + size - need % size) % size;
	ring_copy_in(l, l->ring_head, head, ENTRY_HEAD_BYTES);
	ring_copy_in(l, l->ring_head + ENTRY_HEAD_BYTES, bytes, length);
	l->ring_used += need;
	l->stats.queued_bytes = l->ring_used;
}

/*
 * With the lock held, the socket idle, the queue empty and room for the
 * whole frame in it: writes the frame from this thread without blocking;
 * the rest, if any, is queued at the front for the writer. A failure is left
 * for the writer to report (it calls on_close, which a sender holding its
 * own locks must not).
 */
static void send_direct(struct cluster_link *l, uint16_t type, const uint8_t *payload,
			uint32_t length)
{
	uint64_t total = CLUSTER_FRAME_HEADER_BYTES + (uint64_t)length;
	uint64_t sequence = l->send_sequence++;
	ssize_t sent;
	int error = 0;

	l->writing = true;
	l->reserved = ENTRY_HEAD_BYTES + total;
	pthread_mutex_unlock(&l->lock);
	cluster_frame_header_encode(l->direct_buf, type, sequence, payload, length);
	if (length)
		memcpy(l->direct_buf + CLUSTER_FRAME_HEADER_BYTES, payload, length);
	sent = send(l->fd, l->direct_buf, (size_t)total, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		error = -errno;
	sent = sent < 0 ? 0 : sent;
	pthread_mutex_lock(&l->lock);
	l->writing = false;
	l->reserved = 0;
	if (error) {
		l->direct_error = error;
	} else if ((uint64_t)sent < total) {
		queue_front_raw(l, l->direct_buf + sent, (uint32_t)(total - (uint64_t)sent));
	} else {
		l->stats.frames_sent++;
		if (l->ring_used == 0)
			pthread_cond_broadcast(&l->queue_drained);
	}
	if (l->ring_used || l->direct_error)
		pthread_cond_signal(&l->queue_ready);
}

static int link_send(struct cluster_link *l, uint16_t type, const uint8_t *payload,
		     uint32_t length, bool direct_ok)
{
	uint64_t need = ENTRY_HEAD_BYTES + (uint64_t)length;

	SEL_ASSERT(length <= cluster_payload_bytes_max(type));
	pthread_mutex_lock(&l->lock);
	if (l->dead || l->stopping || l->direct_error) {
		pthread_mutex_unlock(&l->lock);
		return SEL_ESTOPPED;
	}
	if (l->ring_used + l->reserved + need > l->options.queue_bytes_max) {
		l->stats.queue_full++;
		pthread_mutex_unlock(&l->lock);
		return SEL_EQUEUEFULL;
	}
	/*
	 * Directly only for small frames, where the whole frame could wait in
	 * the queue (its rest goes there), and never with failpoints armed:
	 * cluster.send acts on the writer thread, outside the lock, as before.
	 */
	if (direct_ok && !l->writing && l->ring_used == 0 &&
	    length <= CLUSTER_DIRECT_PAYLOAD_BYTES_MAX &&
	    ENTRY_HEAD_BYTES + CLUSTER_FRAME_HEADER_BYTES + (uint64_t)length <=
		    l->options.queue_bytes_max &&
	    !__atomic_load_n(&sel_failpoints_armed, __ATOMIC_RELAXED)) {
		send_direct(l, type, payload, length);
	} else {
		queue_back(l, type, payload, length);
		pthread_cond_signal(&l->queue_ready);
	}
	pthread_mutex_unlock(&l->lock);
	return 0;
}

int cluster_link_send(struct cluster_link *l, uint16_t type, const uint8_t *payload,
		      uint32_t length)
{
	return link_send(l, type, payload, length, true);
}

int cluster_link_post(struct cluster_link *l, uint16_t type, const uint8_t *payload,
		      uint32_t length)
{
	return link_send(l, type, payload, length, false);
}

enum writer_turn {
	TURN_STOP,      /* stopping with nothing queued, or dead */
	TURN_ENTRY,     /* an entry copied out into write_buf */
	TURN_HEARTBEAT, /* the link was idle for the heartbeat interval */
	TURN_ERROR,     /* a direct send failed: report it */
};

static void heartbeat_deadline(struct cluster_link *l, struct timespec *until)
{
	clock_gettime(CLOCK_MONOTONIC, until);
	until->tv_sec += l->options.heartbeat_ms / 1000;
	until->tv_nsec += (long)(l->options.heartbeat_ms % 1000) * 1000000;
	if (until->tv_nsec >= 1000000000) {
		until->tv_sec++;
		until->tv_nsec -= 1000000000;
	}
}

/* Copies the front entry out and takes the socket (lock held). */
static void writer_take_entry(struct cluster_link *l, uint16_t *type, uint32_t *length,
			      uint64_t *sequence)
{
	uint8_t head[ENTRY_HEAD_BYTES];

	ring_copy_out(l, l->ring_head, head, ENTRY_HEAD_BYTES);
	*type = (uint16_t)(head[0] | head[1] << 8);
	*length = sel_get_le32(head + 2);
	ring_copy_out(l, l->ring_head + ENTRY_HEAD_BYTES, l->write_buf, *length);
	l->ring_head = (l->ring_head + ENTRY_HEAD_BYTES + *length) % l->options.queue_bytes_max;
	l->ring_used -= ENTRY_HEAD_BYTES + *length;
	l->stats.queued_bytes = l->ring_used;
	l->writing = true;
	if (*type != ENTRY_RAW)
		*sequence = l->send_sequence++;
}

/*
 * Waits until the socket is free and an entry is queued, the link has been
 * idle for the heartbeat interval, or it stops. Takes the socket for an
 * entry or a heartbeat.
 */
static enum writer_turn writer_take(struct cluster_link *l, uint16_t *type, uint32_t *length,
				    uint64_t *sequence, int *error)
{
	enum writer_turn turn;
	struct timespec until;
	bool idle = false; /* the heartbeat interval passed with nothing to send */

	pthread_mutex_lock(&l->lock);
	heartbeat_deadline(l, &until);
	for (;;) {
		if (l->dead) {
			turn = TURN_STOP;
			break;
		}
		if (l->direct_error) {
			*error = l->direct_error;
			turn = TURN_ERROR;
			break;
		}
		if (!l->writing && l->ring_used > 0) {
			writer_take_entry(l, type, length, sequence);
			turn = TURN_ENTRY;
			break;
		}
		if (l->stopping && !l->writing) {
			turn = TURN_STOP;
			break;
		}
		if (idle && !l->writing && !l->stopping) {
			l->writing = true;
			*sequence = l->send_sequence++;
			turn = TURN_HEARTBEAT;
			break;
		}
		if (idle)
			heartbeat_deadline(l, &until); /* someone is writing: not idle */
		idle = false;
		if (!l->options.heartbeat_ms || l->stopping)
			pthread_cond_wait(&l->queue_ready, &l->lock);
		else
			/* every state is checked again above before a heartbeat */
			idle = pthread_cond_timedwait(&l->queue_ready, &l->lock, &until) == ETIMEDOUT;
	}
	pthread_mutex_unlock(&l->lock);
	return turn;
}

/* The rest of a frame a sender began, as it is. */
static int write_raw(int fd, uint8_t *bytes, uint32_t length)
{
	struct iovec iov = { .iov_base = bytes, .iov_len = length };

	return cluster_write_all(fd, &iov, 1); /* R-WIRE-9 */
}

static void *writer_main(void *arg)
{
	struct cluster_link *l = arg;

	sel_thread_lower_priority(1, "link writer"); /* below the model (seed 2.12) */

	for (;;) {
		uint16_t type = 0;
		uint32_t length = 0;
		uint64_t sequence = 0;
		int ret = 0;
		enum writer_turn turn = writer_take(l, &type, &length, &sequence, &ret);
		char why[128];

		if (turn == TURN_STOP)
			break;
		if (turn == TURN_HEARTBEAT) {
			type = CLUSTER_MSG_HEARTBEAT;
			length = cluster_heartbeat_encode(
				&(struct cluster_heartbeat){ .monotonic_ns = sel_monotonic_ns() },
				l->write_buf, CLUSTER_HEARTBEAT_BYTES);
		}
		if (turn != TURN_ERROR)
			ret = type == ENTRY_RAW ? write_raw(l->fd, l->write_buf, length) :
				cluster_frame_write(l->fd, &sequence, type, l->write_buf, length);
		pthread_mutex_lock(&l->lock);
		l->writing = false;
		if (!ret && turn == TURN_HEARTBEAT)
			l->stats.heartbeats_sent++;
		else if (!ret)
			l->stats.frames_sent++;
		if (l->ring_used == 0)
			pthread_cond_broadcast(&l->queue_drained);
		pthread_mutex_unlock(&l->lock);
		if (ret) {
			snprintf(why, sizeof(why), "sending %s: %s",
				 turn == TURN_ERROR ? "a frame" : type == ENTRY_RAW ? "the rest of a frame" :
				 cluster_msg_name(type), sel_strerror(ret));
			link_die(l, ret, why);
			break;
		}
	}
	return NULL;
}

static void *reader_main(void *arg)
{
	struct cluster_link *l = arg;
	struct cluster_frame_header header;
	uint64_t sequence = l->options.recv_sequence;
	char why[256] = "";

	sel_thread_lower_priority(1, "link reader"); /* below the model (seed 2.12) */
	for (;;) {
		int ret = cluster_frame_read(l->fd, l->read_buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX,
					     &sequence, &header, why, sizeof(why));

		if (ret != 1) {
			if (ret == 0)
				snprintf(why, sizeof(why), "the peer closed the link");
			link_die(l, ret, why);
			break;
		}
		pthread_mutex_lock(&l->lock);
		l->stats.frames_received++;
		pthread_mutex_unlock(&l->lock);
		if (header.type != CLUSTER_MSG_HEARTBEAT && l->options.on_frame)
			l->options.on_frame(l->options.ctx, header.type, l->read_buf,
					    header.payload_length);
	}
	return NULL;
}

/* See link.h. */
void cluster_socket_keepalive(int fd, uint32_t silence_ms)
{
	int one = 1, idle = (int)(silence_ms / 1000 > 1 ? silence_ms / 3000 + 1 : 1);
	unsigned int user_timeout = silence_ms;

	/* Not TCP (a socketpair in tests): these fail harmlessly. */
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
}

/* TCP options where the socket is TCP; timeouts on any socket. */
static void link_socket_options(int fd, uint32_t silence_ms)
{
	struct timeval tv = { .tv_sec = silence_ms / 1000,
			      .tv_usec = (suseconds_t)(silence_ms % 1000) * 1000 };
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	cluster_socket_keepalive(fd, silence_ms);
	if (silence_ms) {
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
}

static void link_free(struct cluster_link *l)
{
	if (l->fd >= 0)
		close(l->fd);
	free(l->ring);
	free(l->read_buf);
	free(l->write_buf);
	free(l->direct_buf);
	pthread_cond_destroy(&l->queue_ready);
	pthread_cond_destroy(&l->queue_drained);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

int cluster_link_start(const struct cluster_link_options *options,
		       struct cluster_link **out)
{
	struct cluster_link *l = calloc(1, sizeof(*l));
	pthread_condattr_t attr;
	int ret;

	*out = NULL;
	if (!l) {
		close(options->fd);
		return -ENOMEM;
	}
	l->fd = options->fd;
	l->options = *options;
	pthread_mutex_init(&l->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&l->queue_ready, &attr);
	pthread_condattr_destroy(&attr);
	pthread_cond_init(&l->queue_drained, NULL);
	l->ring = malloc(options->queue_bytes_max ? options->queue_bytes_max : 1);
	l->read_buf = malloc(CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	/* a payload, or the rest of a small frame a sender began */
	l->write_buf = malloc(CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	l->direct_buf = malloc(CLUSTER_FRAME_HEADER_BYTES + CLUSTER_DIRECT_PAYLOAD_BYTES_MAX);
	l->send_sequence = options->send_sequence;
	if (!l->ring || !l->read_buf || !l->write_buf || !l->direct_buf ||
	    options->queue_bytes_max == 0) {
		link_free(l);
		return options->queue_bytes_max ? -ENOMEM : -EINVAL;
	}
	link_socket_options(l->fd, options->silence_timeout_ms);
	/* before the threads: their callbacks may already send on it */
	*out = l;
	ret = sel_thread_start(&l->reader, reader_main, l);
	l->reader_started = ret == 0;
	if (!ret)
		ret = sel_thread_start(&l->writer, writer_main, l);
	l->writer_started = ret == 0;
	if (ret) {
		cluster_link_close(l, 0); /* joins them first */
		*out = NULL;
		return ret;
	}
	return 0;
}

bool cluster_link_alive(struct cluster_link *l)
{
	bool alive;

	pthread_mutex_lock(&l->lock);
	alive = !l->dead && !l->direct_error;
	pthread_mutex_unlock(&l->lock);
	return alive;
}

void cluster_link_stats(struct cluster_link *l, struct cluster_link_stats *out)
{
	pthread_mutex_lock(&l->lock);
	*out = l->stats;
	pthread_mutex_unlock(&l->lock);
}

void cluster_link_close(struct cluster_link *l, uint32_t linger_ms)
{
	struct timespec until;
	int direct_error;

	if (!l)
		return;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += linger_ms / 1000 + 1;
	/* A lingering close ends with BYE: the other side tells it from a failure. */
	if (linger_ms > 0 && l->writer_started)
		link_send(l, CLUSTER_MSG_BYE, NULL, 0, false);
	pthread_mutex_lock(&l->lock);
	/* Let the writer send what is queued, for a while. */
	while (l->writer_started && !l->dead && !l->direct_error &&
	       (l->ring_used > 0 || l->writing) && linger_ms > 0 &&
	       pthread_cond_timedwait(&l->queue_drained, &l->lock, &until) == 0)
		;
	l->stopping = true;
	direct_error = l->direct_error;
	pthread_cond_broadcast(&l->queue_ready);
	pthread_mutex_unlock(&l->lock);
	/* a direct send's failure not yet reported is the reason, not the close */
	if (direct_error) {
		char why[128];

		snprintf(why, sizeof(why), "sending a frame: %s", sel_strerror(direct_error));
		link_die(l, direct_error, why);
	}
	link_die(l, SEL_ESTOPPED, "the link was closed");
	if (l->writer_started)
		pthread_join(l->writer, NULL);
	if (l->reader_started)
		pthread_join(l->reader, NULL);
	link_free(l);
}
