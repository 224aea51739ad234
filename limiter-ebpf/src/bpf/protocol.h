/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * Which client flights are requests, and which server segments answer them, by protocol.
 * A flight is the payload a side sends after the other spoke; on every protocol here a new
 * flight starts a new record or frame, so its first bytes are a header we can read.
 *
 *   plain    every client flight is a request; the first payload after it is its answer.
 *   TLS      handshake records, alerts and change_cipher_spec are neither. On TLS 1.2 the
 *            client's application records are requests and the server's answer them. On
 *            TLS 1.3 the client's first two application flights are not timed: the first is
 *            its Finished (often carrying the first request), and many servers (OpenSSL,
 *            GnuTLS) send session tickets unprompted in reply to it, encrypted like data, so
 *            the first server records after it may be tickets, not the answer.
 *   h2c      a client flight holding a HEADERS frame is a request on that stream; a HEADERS,
 *            DATA or RST_STREAM frame on that stream answers it. SETTINGS, PING and
 *            WINDOW_UPDATE frames, which either side sends unprompted, are neither. While a
 *            request is outstanding, requests on other streams are not timed.
 *   opaque   TLS whose client offers HTTP/2 (ALPN h2): once encrypted, HTTP/2's control
 *            frames cannot be told from requests and answers, so nothing is timed.
 *   HTTP/1   cleartext, as plain; an answer's status line gives its status code.
 *
 * The protocol is read from the client's first CLASSIFIED_SEGMENTS payload segments, so
 * that a TLS handshake after a cleartext preamble (PostgreSQL's SSLRequest, STARTTLS) is
 * seen too. Every read is bpf_skb_load_bytes at a runtime offset, checked by the helper: a
 * header beyond the segment is simply not found.
 */
#ifndef LIMITER_PROTOCOL_H
#define LIMITER_PROTOCOL_H

#include "limiter_abi.h"

/* What a client flight is. */
#define FLIGHT_NONE 0    /* not a request: starts nothing */
#define FLIGHT_REQUEST 1 /* a request, timed to its answer */
#define FLIGHT_UNTIMED 2 /* a request whose answer cannot be told from other bytes */

/* Client payload segments read for a protocol: SMTP's STARTTLS comes in the third. */
#define CLASSIFIED_SEGMENTS 4

#define TLS_CHANGE_CIPHER_SPEC 20
#define TLS_ALERT 21
#define TLS_HANDSHAKE 22
#define TLS_APPLICATION_DATA 23
#define TLS_CLIENT_HELLO 1
#define TLS_RECORD_HEADER 5
/* A TLS 1.3 record carrying only an alert: 2 bytes, the inner content type and a 16-byte
 * AEAD tag. The client's close_notify is a goodbye, not a request. */
#define TLS13_ALERT_RECORD 19
/* Records read in one segment: a flight opens with at most a change_cipher_spec before
 * the record that tells what it is. */
#define TLS_RECORDS_READ 4

#define TLS_EXT_ALPN 0x0010
/* ClientHello extensions read for ALPN; clients send 10 to 20. */
#define TLS_EXTENSIONS_READ 32
#define ALPN_NAMES_READ 8

#define H2_FRAME_HEADER 9
#define H2_PREFACE_BYTES 24
#define H2_DATA 0
#define H2_HEADERS 1
#define H2_RST_STREAM 3
#define H2_FRAMES_READ 8

/* The segment's payload from `off` (relative to the network header) for `len` bytes. */
struct payload {
	__u32 off;
	__u32 len;
};

static __always_inline int load(struct __sk_buff *skb, const struct payload *p, __u32 at,
				void *to, __u32 n)
{
	if (at + n > p->len)
		return -1;
	return bpf_skb_load_bytes(skb, p->off + at, to, n);
}

static __always_inline __u32 be16(const __u8 *b)
{
	return (__u32)b[0] << 8 | b[1];
}

/* 22, 3.x, then a handshake message of type ClientHello. */
static __always_inline int is_client_hello(const __u8 *b)
{
	return b[0] == TLS_HANDSHAKE && b[1] == 3 && b[2] <= 4 && b[5] == TLS_CLIENT_HELLO;
}

/* PostgreSQL's SSLRequest and GSSENCRequest: length 8, code 80877103 or 80877104. Their
 * one-byte answer is not the server's latency. */
static __always_inline int is_pg_encryption_request(const __u8 *b)
{
	return b[0] == 0 && b[1] == 0 && b[2] == 0 && b[3] == 8 && b[4] == 0x04 && b[5] == 0xd2 &&
	       b[6] == 0x16 && (b[7] == 0x2f || b[7] == 0x30);
}

/* An HTTP/1.x request line's method, by its first four bytes. */
static __always_inline int is_http1_request(const __u8 *b)
{
	__u32 m = (__u32)b[0] << 24 | (__u32)b[1] << 16 | (__u32)b[2] << 8 | b[3];

	switch (m) {
	case 0x47455420: /* "GET " */
	case 0x504f5354: /* "POST" */
	case 0x50555420: /* "PUT " */
	case 0x48454144: /* "HEAD" */
	case 0x44454c45: /* "DELE" */
	case 0x50415443: /* "PATC" */
	case 0x4f505449: /* "OPTI" */
	case 0x434f4e4e: /* "CONN" */
	case 0x54524143: /* "TRAC" */
		return 1;
	default:
		return 0;
	}
}

/* "PRI * HT": the HTTP/2 connection preface, sent first by a client with prior knowledge. */
static __always_inline int is_h2_preface(const __u8 *b)
{
	return b[0] == 'P' && b[1] == 'R' && b[2] == 'I' && b[3] == ' ' && b[4] == '*' &&
	       b[5] == ' ' && b[6] == 'H' && b[7] == 'T';
}

/*
 * Whether the ClientHello that starts this segment offers HTTP/2 by ALPN. Fixed fields,
 * then three variable-length ones (session id, cipher suites, compression methods), then
 * the extensions. A ClientHello whose ALPN is not within this segment (a large one split
 * over two) counts as offering it: a connection that is not timed is better than a
 * connection timed wrongly.
 */
static __always_inline int offers_h2(struct __sk_buff *skb, const struct payload *p)
{
	/* record header 5, handshake header 4, version 2, random 32 */
	__u32 at = TLS_RECORD_HEADER + 4 + 2 + 32, end;
	__u8 b[4];
	int i;

	if (load(skb, p, at, b, 1))
		return 1;
	at += 1 + b[0];
	if (load(skb, p, at, b, 2))
		return 1;
	at += 2 + be16(b);
	if (load(skb, p, at, b, 1))
		return 1;
	at += 1 + b[0];
	if (load(skb, p, at, b, 2))
		return 1;
	end = at + 2 + be16(b);
	at += 2;
	for (i = 0; i < TLS_EXTENSIONS_READ && at < end; i++) {
		if (load(skb, p, at, b, 4))
			return 1;
		if (be16(b) == TLS_EXT_ALPN)
			break;
		at += 4 + be16(b + 2);
	}
	if (at >= end)
		return 0; /* every extension read: no ALPN */
	if (i == TLS_EXTENSIONS_READ)
		return 1;
	/* The extension's header (4), the name list's length (2), then names: a length byte
	 * and the name. */
	end = at + 4 + be16(b + 2);
	at += 4 + 2;
	for (i = 0; i < ALPN_NAMES_READ && at < end; i++) {
		if (load(skb, p, at, b, 3))
			return 1;
		if (b[0] == 2 && b[1] == 'h' && b[2] == '2')
			return 1;
		at += 1 + b[0];
	}
	return i == ALPN_NAMES_READ;
}

/*
 * Reads the protocol off one of the client's first segments. Returns 1 when the segment is
 * a preamble and no request: a ClientHello, or PostgreSQL's SSLRequest. A ClientHello
 * after a cleartext exchange still awaiting its answer (MySQL's SSL request gets none)
 * leaves that exchange untimed.
 */
static __always_inline int classify(struct __sk_buff *skb, struct sock_state *ss,
				    const struct payload *p)
{
	__u8 b[8];

	ss->segments++;
	if (load(skb, p, 0, b, sizeof(b)))
		return 0;
	if (is_client_hello(b)) {
		ss->proto = offers_h2(skb, p) ? LIMITER_PROTO_OPAQUE : LIMITER_PROTO_TLS;
		ss->tls = LIMITER_TLS_HELLO;
		ss->phase = LIMITER_PHASE_IDLE;
		return 1;
	}
	if (is_h2_preface(b)) {
		ss->proto = LIMITER_PROTO_H2C;
		return 0;
	}
	if (is_http1_request(b))
		ss->proto = LIMITER_PROTO_HTTP1;
	return is_pg_encryption_request(b);
}

/* "HTTP/1.x NNN": the status code of an answer's status line, 0 if it starts otherwise. */
static __always_inline __u32 http_status(struct __sk_buff *skb, const struct payload *p)
{
	__u8 b[12];

	if (load(skb, p, 0, b, sizeof(b)) || b[0] != 'H' || b[1] != 'T' || b[2] != 'T' ||
	    b[3] != 'P' || b[4] != '/' || b[5] != '1' || b[6] != '.' || b[8] != ' ')
		return 0;
	if (b[9] < '1' || b[9] > '5' || b[10] < '0' || b[10] > '9' || b[11] < '0' || b[11] > '9')
		return 0;
	return (b[9] - '0') * 100 + (b[10] - '0') * 10 + (b[11] - '0');
}

/* A TLS client flight: the first record that is not a change_cipher_spec tells it. */
static __always_inline int tls_flight(struct __sk_buff *skb, struct sock_state *ss,
				      const struct payload *p)
{
	__u32 at = 0;
	__u8 h[TLS_RECORD_HEADER + 1];
	int i;

	for (i = 0; i < TLS_RECORDS_READ; i++) {
		if (load(skb, p, at, h, TLS_RECORD_HEADER))
			return FLIGHT_NONE;
		if (h[0] != TLS_CHANGE_CIPHER_SPEC)
			break;
		at += TLS_RECORD_HEADER + be16(h + 3);
	}
	if (h[0] == TLS_HANDSHAKE) {
		/* After the ClientHello (or a second one, after a HelloRetryRequest), a client
		 * handshake record in the clear is TLS 1.2's key exchange or Finished. */
		if (ss->tls == LIMITER_TLS_HELLO &&
		    (load(skb, p, at, h, sizeof(h)) || h[TLS_RECORD_HEADER] != TLS_CLIENT_HELLO))
			ss->tls = LIMITER_TLS_12_HANDSHAKE;
		return FLIGHT_NONE;
	}
	if (h[0] != TLS_APPLICATION_DATA)
		return FLIGHT_NONE; /* an alert: the client says goodbye */
	switch (ss->tls) {
	case LIMITER_TLS_HELLO:
		/* Encrypted before any cleartext handshake flight: TLS 1.3's Finished (or early
		 * data). Neither it nor the next flight is timed. */
		ss->tls = LIMITER_TLS_13;
		ss->untimed = 1;
		return FLIGHT_UNTIMED;
	case LIMITER_TLS_12_HANDSHAKE:
		ss->tls = LIMITER_TLS_12;
		return FLIGHT_REQUEST;
	case LIMITER_TLS_13:
		if (be16(h + 3) == TLS13_ALERT_RECORD)
			return FLIGHT_NONE;
		if (ss->untimed) {
			ss->untimed--;
			return FLIGHT_UNTIMED;
		}
		return FLIGHT_REQUEST;
	default:
		return FLIGHT_REQUEST;
	}
}

/* Whether a server segment on TLS holds an application record. */
static __always_inline int tls_answers(struct __sk_buff *skb, const struct payload *p)
{
	__u32 at = 0;
	__u8 h[TLS_RECORD_HEADER];
	int i;

	for (i = 0; i < TLS_RECORDS_READ; i++) {
		if (load(skb, p, at, h, sizeof(h)))
			return 0;
		if (h[0] == TLS_APPLICATION_DATA)
			return 1;
		at += TLS_RECORD_HEADER + be16(h + 3);
	}
	return 0;
}

/* The stream id of a frame header (31 bits, the top one reserved). */
static __always_inline __u32 h2_stream(const __u8 *f)
{
	return ((__u32)f[5] & 0x7f) << 24 | (__u32)f[6] << 16 | (__u32)f[7] << 8 | f[8];
}

static __always_inline __u32 h2_length(const __u8 *f)
{
	return (__u32)f[0] << 16 | (__u32)f[1] << 8 | f[2];
}

/* An h2c client flight: a request if it opens a stream (HEADERS), which is remembered. */
static __always_inline int h2_flight(struct __sk_buff *skb, struct sock_state *ss,
				     const struct payload *p)
{
	__u8 f[H2_FRAME_HEADER];
	__u32 at = 0;
	int i;

	if (load(skb, p, 0, f, 8))
		return FLIGHT_NONE;
	if (is_h2_preface(f))
		at = H2_PREFACE_BYTES;
	for (i = 0; i < H2_FRAMES_READ; i++) {
		if (load(skb, p, at, f, sizeof(f)))
			return FLIGHT_NONE;
		if (f[3] == H2_HEADERS) {
			ss->h2_stream = h2_stream(f);
			return FLIGHT_REQUEST;
		}
		at += H2_FRAME_HEADER + h2_length(f);
	}
	return FLIGHT_NONE;
}

/* Whether an h2c server segment answers the outstanding request's stream. */
static __always_inline int h2_answers(struct __sk_buff *skb, const struct sock_state *ss,
				      const struct payload *p)
{
	__u8 f[H2_FRAME_HEADER];
	__u32 at = 0;
	int i;

	for (i = 0; i < H2_FRAMES_READ; i++) {
		if (load(skb, p, at, f, sizeof(f)))
			return 0;
		if ((f[3] == H2_HEADERS || f[3] == H2_DATA || f[3] == H2_RST_STREAM) &&
		    h2_stream(f) == ss->h2_stream)
			return 1;
		at += H2_FRAME_HEADER + h2_length(f);
	}
	return 0;
}

/* What a client flight is, on the connection's protocol. */
static __always_inline int flight_kind(struct __sk_buff *skb, struct sock_state *ss,
				       const struct payload *p)
{
	switch (ss->proto) {
	case LIMITER_PROTO_TLS:
		return tls_flight(skb, ss, p);
	case LIMITER_PROTO_H2C:
		return h2_flight(skb, ss, p);
	case LIMITER_PROTO_OPAQUE:
		return FLIGHT_NONE;
	default:
		return FLIGHT_REQUEST;
	}
}

/* Whether a server segment answers the outstanding request. */
static __always_inline int answers(struct __sk_buff *skb, const struct sock_state *ss,
				   const struct payload *p)
{
	switch (ss->proto) {
	case LIMITER_PROTO_TLS:
		return tls_answers(skb, p);
	case LIMITER_PROTO_H2C:
		return h2_answers(skb, ss, p);
	default:
		return 1;
	}
}

#endif /* LIMITER_PROTOCOL_H */
