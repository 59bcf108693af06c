/* The join handshake: see join.h. */
#include "cluster/join.h"

#include "common/base.h"
#include "record/geometry.h"
#include "selene/selene.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Encodes and sends one message; the encoder's result is its length. */
static int send_msg(int fd, struct cluster_sequences *seq, uint16_t type,
		    const uint8_t *payload, int length)
{
	if (length < 0)
		return length;
	return cluster_frame_write(fd, &seq->send, type, payload, (uint32_t)length);
}

/* Reads the next frame, which must be of type want (or a REFUSE). */
static int recv_msg(int fd, struct cluster_sequences *seq, uint16_t want,
		    uint8_t *buf, size_t buf_size, uint32_t *length, char *why,
		    size_t why_size)
{
	struct cluster_frame_header header;
	struct cluster_refuse refuse;
	int ret = cluster_frame_read(fd, buf, buf_size, &seq->recv, &header, why, why_size);

	if (ret == 0)
		return sel_fail(-ECONNRESET, why, why_size,
				 "the other side closed during the join");
	if (ret != 1)
		return ret;
	*length = header.payload_length;
	if (header.type == CLUSTER_MSG_REFUSE && want != CLUSTER_MSG_REFUSE) {
		ret = cluster_refuse_decode(buf, header.payload_length, &refuse, why, why_size);
		if (ret)
			return ret;
		return sel_fail(refuse.reason == CLUSTER_REFUSE_AUTH ||
						 refuse.reason == CLUSTER_REFUSE_ADDRESS ?
					 -EACCES : SEL_EMISMATCH,
				 why, why_size, "refused by the other side: %s", refuse.text);
	}
	if (header.type != want)
		return sel_fail(SEL_EPROTO, why, why_size, "expected %s, got %s",
				 cluster_msg_name(want), cluster_msg_name(header.type));
	return 0;
}

/* The peer's first half: HELLO, CHALLENGE, PROOF. Fills hello and challenge. */
static int peer_prove(int fd, const uint8_t secret[CLUSTER_SECRET_BYTES],
		      const struct cluster_identity *me, struct cluster_sequences *seq,
		      struct cluster_hello *hello, struct cluster_challenge *challenge,
		      char *why, size_t why_size)
{
	struct cluster_proof proof;
	uint8_t buf[512];
	uint32_t length;
	int ret;

	*hello = (struct cluster_hello){
		.rank = me->rank, .world_size = me->world_size,
		.fingerprint = me->fingerprint, .layout_digest = me->layout_digest,
		.has_disk_store = me->has_disk_store,
		.disk_limit_bytes = me->has_disk_store ? me->disk_limit_bytes : 0,
		.marked = me->has_disk_store && me->marked,
		.warm_bytes = me->has_disk_store ? me->warm_bytes : 0,
		.warm_policy = me->has_disk_store && me->warm_bytes ? me->warm_policy : 0,
	};
	ret = cluster_nonce_fill(hello->client_nonce);
	if (!ret)
		ret = send_msg(fd, seq, CLUSTER_MSG_HELLO, buf,
			       cluster_hello_encode(hello, buf, sizeof(buf)));
	if (!ret)
		ret = recv_msg(fd, seq, CLUSTER_MSG_CHALLENGE, buf, sizeof(buf), &length, why,
			       why_size);
	if (!ret)
		ret = cluster_challenge_decode(buf, length, challenge, why, why_size);
	if (ret)
		return ret;
	cluster_join_mac(secret, challenge->server_nonce, hello->client_nonce, me->rank,
			 &me->fingerprint, proof.mac);
	return send_msg(fd, seq, CLUSTER_MSG_PROOF, buf,
			cluster_proof_encode(&proof, buf, sizeof(buf)));
}

int cluster_join_peer(int fd, const uint8_t secret[CLUSTER_SECRET_BYTES],
		      const struct cluster_identity *me, struct cluster_sequences *seq,
		      uint64_t *agreed_disk_limit, char *why, size_t why_size)
{
	struct cluster_hello hello;
	struct cluster_challenge challenge;
	struct cluster_welcome welcome;
	uint8_t buf[512], expected[CLUSTER_MAC_BYTES];
	uint32_t length;
	int ret;

	ret = peer_prove(fd, secret, me, seq, &hello, &challenge, why, why_size);
	if (!ret)
		ret = recv_msg(fd, seq, CLUSTER_MSG_WELCOME, buf, sizeof(buf), &length, why,
			       why_size);
	if (!ret)
		ret = cluster_welcome_decode(buf, length, &welcome, why, why_size);
	if (ret)
		return ret;
	/* Rank zero proves it holds the secret too: a stranger learns nothing. */
	cluster_welcome_mac(secret, hello.client_nonce, challenge.server_nonce, me->rank,
			    expected);
	if (!cluster_mac_equal(expected, welcome.mac))
		return sel_fail(-EACCES, why, why_size,
				 "rank zero did not prove it holds the launch secret");
	*agreed_disk_limit = welcome.disk_limit_bytes;
	return 0;
}

int cluster_join_peer_fail(int fd, const uint8_t secret[CLUSTER_SECRET_BYTES],
			   const struct cluster_identity *me, struct cluster_sequences *seq,
			   const char *failure, char *why, size_t why_size)
{
	struct cluster_hello hello;
	struct cluster_challenge challenge;
	int ret = peer_prove(fd, secret, me, seq, &hello, &challenge, why, why_size);

	return ret ? ret : cluster_join_refuse(fd, seq, CLUSTER_REFUSE_SHUTDOWN, failure);
}

int cluster_join_refuse(int fd, struct cluster_sequences *seq, uint32_t reason,
			const char *text)
{
	struct cluster_refuse refuse = { .reason = reason };
	uint8_t buf[512];

	/* Printable ASCII only (R-WIRE-13): anything else becomes '?'. */
	snprintf(refuse.text, sizeof(refuse.text), "%s", text);
	cluster_text_make_printable(refuse.text);
	return send_msg(fd, seq, CLUSTER_MSG_REFUSE, buf,
			cluster_refuse_encode(&refuse, buf, sizeof(buf)));
}

/* Refuses on both sides: sends REFUSE, returns err with the same text. */
static int accept_refuse(int fd, struct cluster_sequences *seq, int err, uint32_t reason,
			 char *why, size_t why_size, const char *fmt, ...)
	__attribute__((format(printf, 7, 8)));

static int accept_refuse(int fd, struct cluster_sequences *seq, int err, uint32_t reason,
			 char *why, size_t why_size, const char *fmt, ...)
{
	char text[CLUSTER_REFUSE_TEXT_BYTES_MAX + 1];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	cluster_join_refuse(fd, seq, reason, text);
	return sel_fail(err, why, why_size, "%s", text);
}

/* The policy checks of an authenticated HELLO, each refused with its own reason. */
int cluster_join_check(int fd, const struct cluster_join_policy *policy,
		       struct cluster_joiner *j, char *why, size_t why_size)
{
	const struct cluster_hello *h = &j->hello;
	struct sockaddr_storage addr;
	socklen_t addr_len = sizeof(addr);
	struct rec_digest expected;

	if (h->world_size != policy->world_size || h->rank >= policy->world_size)
		return accept_refuse(fd, &j->seq, SEL_EMISMATCH, CLUSTER_REFUSE_WORLD, why,
				     why_size, "rank %u of a world of %u, but the world has %u ranks",
				     h->rank, h->world_size, policy->world_size);
	if (!rec_digest_equal(&h->layout_digest, &policy->layout_digest))
		return accept_refuse(fd, &j->seq, SEL_EMISMATCH, CLUSTER_REFUSE_LAYOUT, why,
				     why_size, "rank %u has a different cache geometry "
				     "(layout digest)", h->rank);
	rec_shard_fingerprint(&expected, &policy->layout_digest, h->rank, h->world_size);
	if (!rec_digest_equal(&h->fingerprint, &expected))
		return accept_refuse(fd, &j->seq, SEL_EMISMATCH, CLUSTER_REFUSE_FINGERPRINT, why,
				     why_size, "rank %u's shard fingerprint is not its rank's",
				     h->rank);
	if (h->has_disk_store != policy->has_disk_store)
		return accept_refuse(fd, &j->seq, SEL_EMISMATCH, CLUSTER_REFUSE_DISK_STORE, why,
				     why_size, "rank %u %s and rank zero %s: every rank has "
				     "a disk store, or none", h->rank,
				     h->has_disk_store ? "has a disk store" :
				     "has no disk store (disk limit 0)",
				     policy->has_disk_store ? "has one" : "has none");
	/* Rank zero decides for every rank's slots: they are the same (R-WIRE-15). */
	if (h->warm_bytes != policy->warm_bytes)
		return accept_refuse(fd, &j->seq, SEL_EMISMATCH, CLUSTER_REFUSE_WARM, why,
				     why_size, "rank %u has a warm tier of %" PRIu64 " bytes and "
				     "rank zero one of %" PRIu64 ": every rank's is the same",
				     h->rank, h->warm_bytes, policy->warm_bytes);
	/* Rank zero decides when files are written; every rank is told the same. */
	if (h->warm_bytes && h->warm_policy != policy->warm_policy)
		return accept_refuse(fd, &j->seq, SEL_EMISMATCH, CLUSTER_REFUSE_WARM, why,
				     why_size, "rank %u has the warm policy %s and rank zero "
				     "%s: every rank's warm tier is the same",
				     h->rank, h->warm_policy ? "write-behind" : "write-through",
				     policy->warm_policy ? "write-behind" : "write-through");
	if (policy->address_allowed &&
	    (getpeername(fd, (struct sockaddr *)&addr, &addr_len) != 0 ||
	     !policy->address_allowed(policy->ctx, h->rank, (struct sockaddr *)&addr,
				      addr_len)))
		return accept_refuse(fd, &j->seq, -EACCES, CLUSTER_REFUSE_ADDRESS, why, why_size,
				     "rank %u connected from an address it did not announce",
				     h->rank);
	return 0;
}

int cluster_join_challenge(int fd, const uint8_t *payload, uint32_t length,
			   uint32_t world_size, struct cluster_joiner *j, char *why,
			   size_t why_size)
{
	struct cluster_challenge challenge;
	uint8_t buf[64];
	int ret = cluster_hello_decode(payload, length, &j->hello, why, why_size);

	if (ret) {
		char reason[200];

		snprintf(reason, sizeof(reason), "%s", why);
		return accept_refuse(fd, &j->seq, ret, CLUSTER_REFUSE_PROTOCOL, why, why_size,
				     "malformed HELLO: %s", reason);
	}
	/* The MAC binds the rank: one outside the world cannot even be proved. */
	if (j->hello.rank == 0 || j->hello.rank >= world_size)
		return accept_refuse(fd, &j->seq, SEL_EMISMATCH, CLUSTER_REFUSE_WORLD, why,
				     why_size, "rank %u of a world of %u, but the world has %u ranks",
				     j->hello.rank, j->hello.world_size, world_size);
	ret = cluster_nonce_fill(challenge.server_nonce);
	if (ret)
		return sel_fail(ret, why, why_size, "no random nonce: %s", sel_strerror(ret));
	memcpy(j->server_nonce, challenge.server_nonce, CLUSTER_NONCE_BYTES);
	ret = send_msg(fd, &j->seq, CLUSTER_MSG_CHALLENGE, buf,
		       cluster_challenge_encode(&challenge, buf, sizeof(buf)));
	return ret ? sel_fail(ret, why, why_size, "sending CHALLENGE: %s", sel_strerror(ret)) :
		     0;
}

int cluster_join_verify(int fd, const uint8_t secret[CLUSTER_SECRET_BYTES],
			struct cluster_joiner *j, const uint8_t *payload, uint32_t length,
			char *why, size_t why_size)
{
	uint8_t expected[CLUSTER_MAC_BYTES];
	struct cluster_proof proof;
	int ret = cluster_proof_decode(payload, length, &proof, why, why_size);

	if (ret)
		return ret;
	cluster_join_mac(secret, j->server_nonce, j->hello.client_nonce, j->hello.rank,
			 &j->hello.fingerprint, expected);
	if (!cluster_mac_equal(expected, proof.mac))
		return accept_refuse(fd, &j->seq, -EACCES, CLUSTER_REFUSE_AUTH, why, why_size,
				     "rank %u did not prove it holds the launch secret",
				     j->hello.rank);
	return 0;
}

int cluster_join_accept(int fd, const uint8_t secret[CLUSTER_SECRET_BYTES],
			const struct cluster_join_policy *policy,
			struct cluster_joiner *out, char *why, size_t why_size)
{
	uint8_t buf[512];
	uint32_t length;
	int ret;

	memset(out, 0, sizeof(*out));
	ret = recv_msg(fd, &out->seq, CLUSTER_MSG_HELLO, buf, sizeof(buf), &length, why,
		       why_size);
	if (!ret)
		ret = cluster_join_challenge(fd, buf, length, policy->world_size, out, why,
					     why_size);
	if (!ret)
		ret = recv_msg(fd, &out->seq, CLUSTER_MSG_PROOF, buf, sizeof(buf), &length, why,
			       why_size);
	if (!ret)
		ret = cluster_join_verify(fd, secret, out, buf, length, why, why_size);
	if (!ret)
		ret = cluster_join_check(fd, policy, out, why, why_size);
	return ret;
}

int cluster_join_welcome(int fd, const uint8_t secret[CLUSTER_SECRET_BYTES],
			 struct cluster_joiner *j, uint64_t agreed_disk_limit)
{
	struct cluster_welcome welcome = { .disk_limit_bytes = agreed_disk_limit };
	uint8_t buf[128];

	cluster_welcome_mac(secret, j->hello.client_nonce, j->server_nonce, j->hello.rank,
			    welcome.mac);
	return send_msg(fd, &j->seq, CLUSTER_MSG_WELCOME, buf,
			cluster_welcome_encode(&welcome, buf, sizeof(buf)));
}

int cluster_frame_in_read(int fd, struct cluster_frame_in *in, uint64_t *next_sequence,
			  char *why, size_t why_size)
{
	uint32_t need = CLUSTER_FRAME_HEADER_BYTES;
	int ret;

	for (;;) {
		ssize_t n;

		if (in->used >= CLUSTER_FRAME_HEADER_BYTES) {
			/* R-WIRE-2 .. R-WIRE-6 on the header alone, before any payload */
			ret = cluster_frame_header_decode(in->bytes, &in->header, why, why_size);
			if (ret)
				return ret;
			if (in->header.payload_length > sizeof(in->bytes) - CLUSTER_FRAME_HEADER_BYTES)
				return sel_fail(SEL_ETOOBIG, why, why_size, "a %s of %u bytes during "
						 "the join", cluster_msg_name(in->header.type),
						 in->header.payload_length);
			need = CLUSTER_FRAME_HEADER_BYTES + in->header.payload_length;
		}
		if (in->used == need)
			break;
		n = recv(fd, in->bytes + in->used, need - in->used, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n < 0)
			return sel_fail(-errno, why, why_size, "%s", strerror(errno));
		if (n == 0)
			return in->used == 0 ?
				       sel_fail(-ECONNRESET, why, why_size, "closed without a word") :
				       sel_fail(SEL_EPROTO, why, why_size, "closed inside a frame "
						 "(R-WIRE-9), after %u bytes", in->used);
		in->used += (uint32_t)n;
	}
	ret = cluster_frame_payload_check(&in->header, in->bytes + CLUSTER_FRAME_HEADER_BYTES,
					  why, why_size);
	if (ret)
		return ret;
	if (in->header.sequence != *next_sequence)
		return sel_fail(SEL_EPROTO, why, why_size, "frame number %llu, expected %llu "
				 "(R-WIRE-8)", (unsigned long long)in->header.sequence,
				 (unsigned long long)*next_sequence);
	++*next_sequence;
	return 1;
}

int cluster_secret_load(const char *path, const char *what,
			uint8_t secret[CLUSTER_SECRET_BYTES], char *why, size_t why_size)
{
	uint8_t extra;
	/* never blocks: a FIFO would wait for a writer forever */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	ssize_t n;

	if (fd < 0)
		return sel_fail(-EINVAL, why, why_size, "%s %s: %s", what, path, strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return sel_fail(-EINVAL, why, why_size, "%s %s is not a regular file", what,
				path);
	}
	/* as ssh with a private key: a secret others can read or change is no secret */
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		close(fd);
		return sel_fail(-EINVAL, why, why_size,
				"%s: permissions %04o for %s are too open (group or others "
				"may use it); chmod 600 %s", what,
				(unsigned)(st.st_mode & 07777), path, path);
	}
	n = read(fd, secret, CLUSTER_SECRET_BYTES);
	if (n == CLUSTER_SECRET_BYTES && read(fd, &extra, 1) != 0)
		n = -2;
	close(fd);
	if (n != CLUSTER_SECRET_BYTES)
		return sel_fail(-EINVAL, why, why_size, "%s %s must hold exactly 32 bytes", what,
				path);
	return 0;
}
