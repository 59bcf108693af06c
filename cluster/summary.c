/* Startup summaries and agreements in chunks: see summary.h. */
#include "cluster/summary.h"

#include "common/base.h"
#include "common/limits.h"
#include "selene/selene.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Chunks small enough that the conversion buffers stay modest. */
#define CHUNK_RECORDS 4096u

_Static_assert(CHUNK_RECORDS <= CLUSTER_SUMMARY_CHUNK_RECORDS_MAX, "summary chunk");
_Static_assert(CHUNK_RECORDS <= CLUSTER_AGREEMENT_CHUNK_ENTRIES_MAX, "agreement chunk");

/* The next frame of a chunked message, past any HEARTBEAT (R-WIRE-17). */
static int recv_frame(int fd, struct cluster_sequences *seq, uint16_t want, uint8_t *buf,
		      uint32_t *length, char *why, size_t why_size)
{
	struct cluster_frame_header header;
	struct cluster_heartbeat beat;
	int ret;

	do {
		ret = cluster_frame_read(fd, buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX, &seq->recv,
					 &header, why, why_size);
		if (ret != 1 || header.type != CLUSTER_MSG_HEARTBEAT)
			break;
		ret = cluster_heartbeat_decode(buf, header.payload_length, &beat, why, why_size);
	} while (ret == 0);

	if (ret == 0) {
		snprintf(why, why_size, "the other side closed during the startup agreement");
		return -ECONNRESET;
	}
	if (ret != 1)
		return ret;
	if (header.type == CLUSTER_MSG_REFUSE) {
		/* R-WIRE-24: the other side failed at startup, and says why */
		struct cluster_refuse refuse;

		ret = cluster_refuse_decode(buf, header.payload_length, &refuse, why, why_size);
		if (ret)
			return ret;
		snprintf(why, why_size, "%s", refuse.text);
		return SEL_ESTOPPED;
	}
	if (header.type != want) {
		snprintf(why, why_size, "expected %s, got %s", cluster_msg_name(want),
			 cluster_msg_name(header.type));
		return SEL_EPROTO;
	}
	*length = header.payload_length;
	return 0;
}

/* Entry i of a summary: records first, then the keys held (R-WIRE-18). */
static struct cluster_summary_record summary_entry(const struct rec_record_info *records,
						   size_t count, const struct rec_key *held,
						   size_t i)
{
	const struct rec_record_info *r;

	if (i >= count)
		return (struct cluster_summary_record){ .key = held[i - count], .held = true };
	r = &records[i];
	return (struct cluster_summary_record){
		.key = r->key, .parent = r->parent, .bucket = r->bucket,
		.first_page_index = r->first_page_index, .tail_page_count = r->tail_page_count,
		.row_present = r->row_present, .header_digest = r->agreement,
	};
}

int cluster_summary_send(int fd, struct cluster_sequences *seq,
			 const struct rec_record_info *records, size_t count,
			 const struct rec_key *held, size_t held_count)
{
	struct cluster_summary_record *chunk = malloc(CHUNK_RECORDS * sizeof(*chunk));
	uint8_t *buf = malloc(CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	size_t done = 0, total = count + held_count;
	uint32_t index = 0;
	int ret = chunk && buf ? 0 : -ENOMEM;

	while (!ret) {
		uint32_t n = total - done < CHUNK_RECORDS ? (uint32_t)(total - done) : CHUNK_RECORDS;
		int length;

		for (uint32_t i = 0; i < n; i++)
			chunk[i] = summary_entry(records, count, held, done + i);
		length = cluster_summary_encode(buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX, index++,
						done + n == total, chunk, n);
		ret = length < 0 ? length :
				   cluster_frame_write(fd, &seq->send, CLUSTER_MSG_SUMMARY, buf,
						       (uint32_t)length);
		done += n;
		if (done == total)
			break;
	}
	free(chunk);
	free(buf);
	return ret;
}

/* Grows *array of *count elements of size bytes to room for more. */
static int grow(void **array, size_t count, size_t more, size_t size)
{
	void *grown = realloc(*array, (count + more + 1) * size);

	if (!grown)
		return -ENOMEM;
	*array = grown;
	return 0;
}

/* The held entries of a chunk (R-WIRE-18): each entry is a record or a held key. */
static uint32_t chunk_held_count(const struct cluster_summary_view *view)
{
	uint32_t held = 0;

	for (uint32_t i = 0; i < view->record_count; i++) {
		struct cluster_summary_record r;

		cluster_summary_view_record(view, i, &r);
		held += r.held;
	}
	return held;
}

int cluster_summary_recv(int fd, struct cluster_sequences *seq, struct cluster_summary *out,
			 char *why, size_t why_size)
{
	uint8_t *buf = malloc(CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	struct cluster_chunks chunks = { 0 };
	struct cluster_summary got = { 0 };
	int ret = buf ? 0 : -ENOMEM;

	while (!ret && !chunks.done) {
		struct cluster_summary_view view;
		uint32_t length, held = 0;

		ret = recv_frame(fd, seq, CLUSTER_MSG_SUMMARY, buf, &length, why, why_size);
		if (!ret)
			ret = cluster_summary_decode(buf, length, &view, why, why_size);
		if (!ret)
			ret = cluster_chunks_accept(&chunks, view.chunk_index, view.last,
						    view.record_count, REC_DIR_RECORDS_MAX, why,
						    why_size);
		/*
		 * Bounded: the total was just checked against REC_DIR_RECORDS_MAX.
		 * Each entry goes to one array: each grows by its own share.
		 */
		if (!ret)
			held = chunk_held_count(&view);
		if (!ret)
			ret = grow((void **)&got.records, got.record_count, view.record_count - held,
				   sizeof(*got.records));
		if (!ret)
			ret = grow((void **)&got.held, got.held_count, held, sizeof(*got.held));
		for (uint32_t i = 0; !ret && i < view.record_count; i++) {
			struct cluster_summary_record r;

			cluster_summary_view_record(&view, i, &r);
			if (r.held) {
				got.held[got.held_count++] = r.key;
				continue;
			}
			got.records[got.record_count++] = (struct rec_record_info){
				.key = r.key, .parent = r.parent, .bucket = r.bucket,
				.first_page_index = r.first_page_index,
				.tail_page_count = r.tail_page_count, .row_present = r.row_present,
				.agreement = r.header_digest,
			};
		}
	}
	free(buf);
	if (ret) {
		cluster_summary_free(&got);
		return ret;
	}
	*out = got;
	return 0;
}

void cluster_summary_free(struct cluster_summary *summary)
{
	free(summary->records);
	free(summary->held);
	memset(summary, 0, sizeof(*summary));
}

int cluster_agreement_send(int fd, struct cluster_sequences *seq,
			   const struct cluster_agreement_entry *entries, size_t count)
{
	uint8_t *buf = malloc(CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	size_t done = 0;
	uint32_t index = 0;
	int ret = buf ? 0 : -ENOMEM;

	do {
		uint32_t n = count - done < CHUNK_RECORDS ? (uint32_t)(count - done) : CHUNK_RECORDS;
		int length = ret ? ret :
				   cluster_agreement_encode(buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX,
							    index++, done + n == count,
							    entries + done, n);

		ret = length < 0 ? length :
				   cluster_frame_write(fd, &seq->send, CLUSTER_MSG_AGREEMENT, buf,
						       (uint32_t)length);
		done += n;
	} while (!ret && done < count);
	free(buf);
	return ret;
}

int cluster_agreement_recv(int fd, struct cluster_sequences *seq,
			   int (*apply)(void *ctx, const struct cluster_agreement_entry *e),
			   void *ctx, char *why, size_t why_size)
{
	uint8_t *buf = malloc(CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	struct cluster_chunks chunks = { 0 };
	int ret = buf ? 0 : -ENOMEM;

	while (!ret && !chunks.done) {
		struct cluster_agreement_view view;
		uint32_t length;

		ret = recv_frame(fd, seq, CLUSTER_MSG_AGREEMENT, buf, &length, why, why_size);
		if (!ret)
			ret = cluster_agreement_decode(buf, length, &view, why, why_size);
		if (!ret)
			ret = cluster_chunks_accept(&chunks, view.chunk_index, view.last,
						    view.entry_count, REC_DIR_RECORDS_MAX, why,
						    why_size);
		for (uint32_t i = 0; !ret && i < view.entry_count; i++) {
			struct cluster_agreement_entry e;

			cluster_agreement_view_entry(&view, i, &e);
			ret = apply(ctx, &e);
			if (ret)
				snprintf(why, why_size, "applying the agreement: %s",
					 sel_strerror(ret));
		}
	}
	free(buf);
	return ret;
}
