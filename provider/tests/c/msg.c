/* Messages between two endpoints through the uet provider, each naming the other only by
 * the fi_addr_t of its AV: the NIC translates it on send and reports the source on receive.
 * Run by tests/libfabric.rs; prints "ok" at the end, exits 1 at the first failed check. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "check.h"

struct peer {
	struct fid_ep *ep;
	struct fid_cq *cq;
	fi_addr_t addr;
};

/* The next completion of `cq`, waiting up to a second. */
static void wait_one(struct fid_cq *cq, struct fi_cq_data_entry *entry, fi_addr_t *src)
{
	ssize_t ret = fi_cq_sreadfrom(cq, entry, 1, src, NULL, 1000);
	CHECK_RET(ret, 1);
}

int main(void)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	CHECK(hints);
	hints->fabric_attr->prov_name = strdup("uet");
	hints->caps = FI_MSG | FI_TAGGED | FI_SOURCE | FI_SHARED_AV;
	hints->ep_attr->type = FI_EP_RDM;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), 0);
	fi_freeinfo(hints);
	CHECK(info->caps & FI_MSG);
	CHECK(info->ep_attr->max_msg_size >= 4096);
	CHECK(info->tx_attr->inject_size > 0);
	printf("getinfo: max_msg_size %zu inject_size %zu\n", info->ep_attr->max_msg_size,
	       info->tx_attr->inject_size);

	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	CHECK_RET(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	CHECK_RET(fi_domain(fabric, info, &domain, NULL), 0);
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE, .count = 16 };
	CHECK_RET(fi_av_open(domain, &av_attr, &av, NULL), 0);

	struct peer p[2];
	for (int i = 0; i < 2; i++) {
		struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_UNSPEC };
		CHECK_RET(fi_cq_open(domain, &cq_attr, &p[i].cq, NULL), 0);
		CHECK_RET(fi_endpoint(domain, info, &p[i].ep, NULL), 0);
		if (i == 0) {
			/* Before fi_enable: no data calls, no address; enable needs an AV. */
			char c = 0;
			CHECK_RET(fi_send(p[0].ep, &c, 1, NULL, 0, NULL), -FI_EOPBADSTATE);
			CHECK_RET(fi_enable(p[0].ep), -FI_ENOAV);
			CHECK_RET(fi_ep_bind(p[0].ep, &p[0].cq->fid, 0), -FI_EBADFLAGS);
		}
		CHECK_RET(fi_ep_bind(p[i].ep, &av->fid, 0), 0);
		CHECK_RET(fi_ep_bind(p[i].ep, &p[i].cq->fid, FI_TRANSMIT | FI_RECV), 0);
		CHECK_RET(fi_enable(p[i].ep), 0);
		CHECK_RET(fi_ep_bind(p[i].ep, &av->fid, 0), -FI_EOPBADSTATE);
	}

	/* Each endpoint's address, into the AV. */
	uint8_t names[2][64];
	for (int i = 0; i < 2; i++) {
		size_t len = 4;
		CHECK_RET(fi_getname(&p[i].ep->fid, names[i], &len), -FI_ETOOSMALL);
		CHECK(len == 32);
		len = sizeof(names[i]);
		CHECK_RET(fi_getname(&p[i].ep->fid, names[i], &len), 0);
		CHECK_RET(fi_av_insert(av, names[i], 1, &p[i].addr, 0, NULL), 1);
	}
	char text[128];
	size_t tlen = sizeof(text);
	fi_av_straddr(av, names[1], text, &tlen);
	printf("endpoints: %" PRIu64 " and %" PRIu64 " (%s)\n", p[0].addr, p[1].addr, text);

	/* A message, its completions on both sides, its source. */
	char rbuf[64] = { 0 };
	int rctx = 1, sctx = 2;
	struct fi_cq_data_entry e;
	fi_addr_t src = 77;
	CHECK_RET(fi_cq_read(p[1].cq, &e, 1), -FI_EAGAIN);
	CHECK_RET(fi_recv(p[1].ep, rbuf, sizeof(rbuf), NULL, FI_ADDR_UNSPEC, &rctx), 0);
	CHECK_RET(fi_send(p[0].ep, "hello", 5, NULL, p[1].addr, &sctx), 0);
	wait_one(p[0].cq, &e, &src);
	CHECK(e.op_context == &sctx && (e.flags & FI_SEND) && (e.flags & FI_MSG));
	CHECK(src == FI_ADDR_NOTAVAIL);
	wait_one(p[1].cq, &e, &src);
	CHECK(e.op_context == &rctx && (e.flags & FI_RECV) && e.len == 5 && e.buf == rbuf);
	CHECK(memcmp(rbuf, "hello", 5) == 0);
	CHECK(src == p[0].addr);
	printf("message: %.5s from %" PRIu64 "\n", rbuf, src);

	/* Remote CQ data. */
	CHECK_RET(fi_recv(p[0].ep, rbuf, sizeof(rbuf), NULL, FI_ADDR_UNSPEC, &rctx), 0);
	CHECK_RET(fi_senddata(p[1].ep, "data", 4, NULL, 0x1234, p[0].addr, &sctx), 0);
	wait_one(p[0].cq, &e, &src);
	CHECK((e.flags & FI_RECV) && (e.flags & FI_REMOTE_CQ_DATA) && e.data == 0x1234);
	CHECK(src == p[1].addr);
	wait_one(p[1].cq, &e, NULL);
	CHECK(e.op_context == &sctx);

	/* Vectors: gathered on send, scattered on receive. */
	char a[3] = "abc", b[4] = "defg", r1[2], r2[8];
	struct iovec siov[2] = { { a, 3 }, { b, 4 } };
	struct iovec riov[2] = { { r1, 2 }, { r2, 8 } };
	CHECK_RET(fi_recvv(p[1].ep, riov, NULL, 2, FI_ADDR_UNSPEC, &rctx), 0);
	CHECK_RET(fi_sendv(p[0].ep, siov, NULL, 2, p[1].addr, &sctx), 0);
	wait_one(p[1].cq, &e, NULL);
	CHECK(e.len == 7 && memcmp(r1, "ab", 2) == 0 && memcmp(r2, "cdefg", 5) == 0);
	wait_one(p[0].cq, &e, NULL);

	/* A message longer than the receive buffer: FI_ETRUNC, olen the bytes dropped. */
	char small[4];
	CHECK_RET(fi_recv(p[1].ep, small, sizeof(small), NULL, FI_ADDR_UNSPEC, &rctx), 0);
	CHECK_RET(fi_send(p[0].ep, "0123456789", 10, NULL, p[1].addr, &sctx), 0);
	ssize_t ret;
	do {
		ret = fi_cq_read(p[1].cq, &e, 1);
	} while (ret == -FI_EAGAIN);
	CHECK_RET(ret, -FI_EAVAIL);
	struct fi_cq_err_entry err = { 0 };
	CHECK_RET(fi_cq_readerr(p[1].cq, &err, 0), 1);
	CHECK(err.err == FI_ETRUNC && err.olen == 6 && err.op_context == &rctx);
	CHECK(memcmp(small, "0123", 4) == 0);
	wait_one(p[0].cq, &e, NULL);

	/* Inject: the sender's buffer is free at once, and no completion is reported. */
	char ibuf[8] = "inject!";
	CHECK_RET(fi_recv(p[1].ep, rbuf, sizeof(rbuf), NULL, FI_ADDR_UNSPEC, &rctx), 0);
	CHECK_RET(fi_inject(p[0].ep, ibuf, 7, p[1].addr), 0);
	memset(ibuf, 0, sizeof(ibuf));
	wait_one(p[1].cq, &e, NULL);
	CHECK(e.len == 7 && memcmp(rbuf, "inject!", 7) == 0);
	CHECK_RET(fi_cq_read(p[0].cq, &e, 1), -FI_EAGAIN);

	/* Limits. */
	size_t big = info->ep_attr->max_msg_size + 1;
	char *huge = calloc(1, big);
	CHECK(huge);
	CHECK_RET(fi_send(p[0].ep, huge, big, NULL, p[1].addr, NULL), -FI_EMSGSIZE);
	CHECK_RET(fi_inject(p[0].ep, huge, info->tx_attr->inject_size + 1, p[1].addr), -FI_EMSGSIZE);
	free(huge);

	/* Tagged messages: matched by tag and ignore mask, in posting order; one that arrives
	 * before its receive waits on the NIC's unexpected list. */
	struct fi_cq_tagged_entry te;
	char t1[16] = { 0 }, t2[16] = { 0 }, t3[16] = { 0 };
	int c1 = 11, c2 = 12, c3 = 13;
	CHECK_RET(fi_trecv(p[1].ep, t1, sizeof(t1), NULL, FI_ADDR_UNSPEC, 0x100, 0, &c1), 0);
	CHECK_RET(fi_trecv(p[1].ep, t2, sizeof(t2), NULL, FI_ADDR_UNSPEC, 0x200, 0xff, &c2), 0);
	/* 0x2ab matches the second receive (its low byte ignored), 0x100 the first. */
	CHECK_RET(fi_tsend(p[0].ep, "second", 6, NULL, p[1].addr, 0x2ab, &sctx), 0);
	CHECK_RET(fi_tsenddata(p[0].ep, "first", 5, NULL, 7, p[1].addr, 0x100, &sctx), 0);
	/* Unexpected: sent before its receive is posted. */
	CHECK_RET(fi_tinject(p[0].ep, "early", 5, p[1].addr, 0x300), 0);
	CHECK_RET(fi_trecv(p[1].ep, t3, sizeof(t3), NULL, FI_ADDR_UNSPEC, 0x300, 0, &c3), 0);
	int seen = 0;
	while (seen < 3) {
		ssize_t r = fi_cq_sreadfrom(p[1].cq, &e, 1, &src, NULL, 1000);
		CHECK_RET(r, 1);
		CHECK(e.flags & FI_TAGGED && e.flags & FI_RECV && src == p[0].addr);
		if (e.op_context == &c1) {
			CHECK(e.len == 5 && memcmp(t1, "first", 5) == 0 && e.data == 7);
		} else if (e.op_context == &c2) {
			CHECK(e.len == 6 && memcmp(t2, "second", 6) == 0);
		} else {
			CHECK(e.op_context == &c3 && e.len == 5 && memcmp(t3, "early", 5) == 0);
		}
		seen++;
	}
	for (int i = 0; i < 2; i++) {
		wait_one(p[0].cq, &e, NULL);
		CHECK(e.flags & FI_TAGGED && e.flags & FI_SEND);
	}
	/* A tagged CQ entry reports the message's tag. */
	struct fi_cq_attr tcq_attr = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_UNSPEC };
	struct fid_cq *tcq;
	struct fid_ep *tep;
	CHECK_RET(fi_cq_open(domain, &tcq_attr, &tcq, NULL), 0);
	CHECK_RET(fi_endpoint(domain, info, &tep, NULL), 0);
	CHECK_RET(fi_ep_bind(tep, &av->fid, 0), 0);
	CHECK_RET(fi_ep_bind(tep, &tcq->fid, FI_TRANSMIT | FI_RECV), 0);
	CHECK_RET(fi_enable(tep), 0);
	uint8_t tname[64];
	size_t tnlen = sizeof(tname);
	fi_addr_t taddr;
	CHECK_RET(fi_getname(&tep->fid, tname, &tnlen), 0);
	CHECK_RET(fi_av_insert(av, tname, 1, &taddr, 0, NULL), 1);
	CHECK_RET(fi_trecv(tep, t1, sizeof(t1), NULL, FI_ADDR_UNSPEC, 0, ~0ULL, &c1), 0);
	CHECK_RET(fi_tsend(p[0].ep, "any", 3, NULL, taddr, 0xabcdef, &sctx), 0);
	CHECK_RET(fi_cq_sread(tcq, &te, 1, NULL, 1000), 1);
	CHECK(te.tag == 0xabcdef && te.len == 3 && te.op_context == &c1);
	wait_one(p[0].cq, &e, NULL);
	CHECK_RET(fi_close(&tep->fid), 0);
	CHECK_RET(fi_close(&tcq->fid), 0);
	printf("tagged: ok\n");

	/* An endpoint on a named AV: what another handle of the AV inserts, it sends to. */
	char name[64];
	snprintf(name, sizeof(name), "uet-provider-msg-%d", (int)getpid());
	struct fi_av_attr named_attr = { .type = FI_AV_TABLE, .count = 8, .name = name };
	struct fid_av *named, *named2;
	CHECK_RET(fi_av_open(domain, &named_attr, &named, NULL), 0);
	CHECK_RET(fi_av_open(domain, &named_attr, &named2, NULL), 0);
	struct fid_ep *nep;
	CHECK_RET(fi_endpoint(domain, info, &nep, NULL), 0);
	CHECK_RET(fi_ep_bind(nep, &named->fid, 0), 0);
	struct fi_cq_attr ncq_attr = { .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_UNSPEC };
	struct fid_cq *ncq;
	CHECK_RET(fi_cq_open(domain, &ncq_attr, &ncq, NULL), 0);
	CHECK_RET(fi_ep_bind(nep, &ncq->fid, FI_TRANSMIT | FI_RECV), 0);
	CHECK_RET(fi_enable(nep), 0);
	fi_addr_t via_named;
	CHECK_RET(fi_av_insert(named2, names[1], 1, &via_named, 0, NULL), 1);
	CHECK_RET(fi_recv(p[1].ep, rbuf, sizeof(rbuf), NULL, FI_ADDR_UNSPEC, &rctx), 0);
	CHECK_RET(fi_send(nep, "named", 5, NULL, via_named, &sctx), 0);
	wait_one(p[1].cq, &e, NULL);
	CHECK(e.len == 5 && memcmp(rbuf, "named", 5) == 0);
	wait_one(ncq, &e, NULL);
	CHECK(e.op_context == &sctx);
	CHECK_RET(fi_close(&named->fid), -FI_EBUSY);
	CHECK_RET(fi_close(&nep->fid), 0);
	CHECK_RET(fi_close(&ncq->fid), 0);
	CHECK_RET(fi_close(&named2->fid), 0);
	CHECK_RET(fi_close(&named->fid), 0);
	printf("named AV: ok\n");

	/* Many messages, in order, each checked. */
	for (int i = 0; i < 500; i++) {
		char out[32], in[32] = { 0 };
		int n = snprintf(out, sizeof(out), "message %d", i);
		CHECK_RET(fi_recv(p[1].ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, NULL), 0);
		CHECK_RET(fi_send(p[0].ep, out, n, NULL, p[1].addr, NULL), 0);
		wait_one(p[1].cq, &e, &src);
		CHECK(e.len == (size_t)n && memcmp(in, out, n) == 0 && src == p[0].addr);
		wait_one(p[0].cq, &e, NULL);
	}
	printf("500 messages: ok\n");

	/* A message of max_msg_size bytes (the NIC's largest), gathered from two iovecs. */
	size_t max = info->ep_attr->max_msg_size;
	uint8_t *out = malloc(max), *in = calloc(1, max);
	CHECK(out && in);
	for (size_t i = 0; i < max; i++)
		out[i] = (uint8_t)(i * 7 % 253);
	struct iovec halves[2] = { { out, max / 2 }, { out + max / 2, max - max / 2 } };
	CHECK_RET(fi_recv(p[1].ep, in, max, NULL, FI_ADDR_UNSPEC, &rctx), 0);
	CHECK_RET(fi_sendv(p[0].ep, halves, NULL, 2, p[1].addr, &sctx), 0);
	wait_one(p[1].cq, &e, NULL);
	CHECK(e.len == max && memcmp(in, out, max) == 0);
	wait_one(p[0].cq, &e, NULL);
	printf("largest message: %zu bytes ok\n", max);
	free(out);
	free(in);

	/* FI_MULTI_RECV: one buffer takes messages one after another; the completion after
	 * which less than FI_OPT_MIN_MULTI_RECV is left carries FI_MULTI_RECV. */
	CHECK(info->caps & FI_MULTI_RECV);
	size_t min_free = 128, got_min = 0, optlen = sizeof(got_min);
	CHECK_RET(fi_setopt(&p[1].ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min_free,
			    sizeof(min_free)), 0);
	CHECK_RET(fi_getopt(&p[1].ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got_min,
			    &optlen), 0);
	CHECK(got_min == 128 && optlen == sizeof(size_t));
	char mbuf[512] = { 0 };
	struct iovec miov = { mbuf, sizeof(mbuf) };
	struct fi_msg mmsg = { .msg_iov = &miov, .iov_count = 1, .addr = FI_ADDR_UNSPEC,
			       .context = &rctx };
	CHECK_RET(fi_recvmsg(p[1].ep, &mmsg, FI_MULTI_RECV), 0);
	const char *parts[3] = { "alpha", "bravo", "charlie" };
	for (int i = 0; i < 3; i++) {
		CHECK_RET(fi_send(p[0].ep, parts[i], strlen(parts[i]), NULL, p[1].addr, &sctx), 0);
		wait_one(p[0].cq, &e, NULL);
	}
	/* 64-byte aligned: at 0, 64, 128; after the third, 512 - 192 = 320 are left: held. */
	for (int i = 0; i < 3; i++) {
		wait_one(p[1].cq, &e, NULL);
		CHECK(e.op_context == &rctx && e.buf == mbuf + 64 * i);
		CHECK(e.len == strlen(parts[i]) && memcmp(e.buf, parts[i], e.len) == 0);
		CHECK(!(e.flags & FI_MULTI_RECV));
	}
	/* 200 more bytes: 64 left after them (below 128), the buffer is released. */
	char filler[200];
	memset(filler, 'f', sizeof(filler));
	CHECK_RET(fi_send(p[0].ep, filler, sizeof(filler), NULL, p[1].addr, &sctx), 0);
	wait_one(p[0].cq, &e, NULL);
	wait_one(p[1].cq, &e, NULL);
	CHECK(e.buf == mbuf + 192 && e.len == 200 && (e.flags & FI_MULTI_RECV));
	printf("multi-receive buffer: ok\n");

	/* Nothing closes under what uses it. */
	CHECK_RET(fi_close(&p[0].cq->fid), -FI_EBUSY);
	CHECK_RET(fi_close(&av->fid), -FI_EBUSY);
	CHECK_RET(fi_close(&domain->fid), -FI_EBUSY);
	for (int i = 0; i < 2; i++) {
		CHECK_RET(fi_close(&p[i].ep->fid), 0);
		CHECK_RET(fi_close(&p[i].cq->fid), 0);
	}
	CHECK_RET(fi_close(&av->fid), 0);
	CHECK_RET(fi_close(&domain->fid), 0);
	CHECK_RET(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	printf("ok\n");
	return 0;
}
