/* A scalable endpoint through libfabric's own calls: 2 transmit and 4 receive contexts,
 * each with a CQ of its own; a peer names each receive context with fi_rx_addr, and each
 * message (untagged and tagged) completes on that context's CQ and no other.
 * Run by tests/libfabric.rs; prints "ok" at the end, exits 1 at the first failed check. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "check.h"

enum { TX = 2, RX = 4, BITS = 2 };

/* One entry of `cq`, waiting for it; the read's return otherwise. */
static ssize_t wait_one(struct fid_cq *cq, struct fi_cq_tagged_entry *e)
{
	for (long spin = 0; spin < 50000000; spin++) {
		ssize_t ret = fi_cq_read(cq, e, 1);
		if (ret != -FI_EAGAIN)
			return ret;
	}
	return -FI_EAGAIN;
}

int main(void)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	CHECK(hints);
	hints->fabric_attr->prov_name = strdup("uet");
	hints->caps = FI_MSG | FI_TAGGED | FI_NAMED_RX_CTX;
	hints->ep_attr->type = FI_EP_RDM;
	hints->ep_attr->tx_ctx_cnt = TX;
	hints->ep_attr->rx_ctx_cnt = RX;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), 0);
	fi_freeinfo(hints);
	CHECK(info->ep_attr->tx_ctx_cnt == TX && info->ep_attr->rx_ctx_cnt == RX);
	CHECK(info->domain_attr->max_ep_tx_ctx >= TX && info->domain_attr->max_ep_rx_ctx >= RX);
	CHECK(info->caps & FI_NAMED_RX_CTX);
	printf("contexts: %zu tx, %zu rx\n", info->ep_attr->tx_ctx_cnt, info->ep_attr->rx_ctx_cnt);

	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	CHECK_RET(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	CHECK_RET(fi_domain(fabric, info, &domain, NULL), 0);
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE, .count = 4, .rx_ctx_bits = BITS };
	CHECK_RET(fi_av_open(domain, &av_attr, &av, NULL), 0);

	struct fid_ep *sep;
	CHECK_RET(fi_scalable_ep(domain, info, &sep, NULL), 0);
	CHECK(sep->fid.fclass == FI_CLASS_SEP);
	CHECK_RET(fi_scalable_ep_bind(sep, &av->fid, 0), 0);

	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_UNSPEC };
	struct fid_ep *tx[TX], *rx[RX], *none = NULL;
	struct fid_cq *tx_cq[TX], *rx_cq[RX];
	for (int i = 0; i < TX; i++) {
		CHECK_RET(fi_tx_context(sep, i, NULL, &tx[i], &tx[i]), 0);
		CHECK(tx[i]->fid.fclass == FI_CLASS_TX_CTX);
		CHECK_RET(fi_cq_open(domain, &cq_attr, &tx_cq[i], NULL), 0);
		CHECK_RET(fi_ep_bind(tx[i], &tx_cq[i]->fid, FI_TRANSMIT), 0);
		CHECK_RET(fi_enable(tx[i]), 0);
	}
	for (int i = 0; i < RX; i++) {
		CHECK_RET(fi_rx_context(sep, i, NULL, &rx[i], &rx[i]), 0);
		CHECK(rx[i]->fid.fclass == FI_CLASS_RX_CTX);
		CHECK_RET(fi_cq_open(domain, &cq_attr, &rx_cq[i], NULL), 0);
		CHECK_RET(fi_ep_bind(rx[i], &rx_cq[i]->fid, FI_RECV), 0);
		CHECK_RET(fi_enable(rx[i]), 0);
	}
	CHECK_RET(fi_tx_context(sep, TX, NULL, &none, NULL), -FI_EINVAL);
	CHECK_RET(fi_rx_context(sep, RX, NULL, &none, NULL), -FI_EINVAL);
	CHECK_RET(fi_enable(sep), 0);
	printf("scalable endpoint: ok\n");

	/* The peer: an endpoint of one context. */
	info->ep_attr->tx_ctx_cnt = 1;
	info->ep_attr->rx_ctx_cnt = 1;
	struct fid_ep *peer;
	struct fid_cq *peer_cq;
	CHECK_RET(fi_endpoint(domain, info, &peer, NULL), 0);
	CHECK_RET(fi_cq_open(domain, &cq_attr, &peer_cq, NULL), 0);
	CHECK_RET(fi_ep_bind(peer, &av->fid, 0), 0);
	CHECK_RET(fi_ep_bind(peer, &peer_cq->fid, FI_TRANSMIT | FI_RECV), 0);
	CHECK_RET(fi_enable(peer), 0);

	uint8_t name[32];
	size_t len = sizeof(name);
	fi_addr_t sep_addr, peer_addr;
	CHECK_RET(fi_getname(&sep->fid, name, &len), 0);
	CHECK_RET(fi_av_insert(av, name, 1, &sep_addr, 0, NULL), 1);
	len = sizeof(name);
	CHECK_RET(fi_getname(&peer->fid, name, &len), 0);
	CHECK_RET(fi_av_insert(av, name, 1, &peer_addr, 0, NULL), 1);

	/* A receive and a tagged receive on each receive context, then a message of each to
	 * each context, named with fi_rx_addr, last context first. */
	char plain[RX][32], tagged[RX][32];
	for (int i = 0; i < RX; i++) {
		CHECK_RET(fi_recv(rx[i], plain[i], sizeof(plain[i]), NULL, FI_ADDR_UNSPEC, plain[i]), 0);
		CHECK_RET(fi_trecv(rx[i], tagged[i], sizeof(tagged[i]), NULL, FI_ADDR_UNSPEC,
				   0x50 + i, 0, tagged[i]),
			  0);
	}
	for (int i = RX - 1; i >= 0; i--) {
		char msg[32];
		snprintf(msg, sizeof(msg), "to context %d", i);
		CHECK_RET(fi_send(peer, msg, strlen(msg) + 1, NULL, fi_rx_addr(sep_addr, i, BITS), NULL),
			  0);
		snprintf(msg, sizeof(msg), "tagged to context %d", i);
		CHECK_RET(fi_tsend(peer, msg, strlen(msg) + 1, NULL, fi_rx_addr(sep_addr, i, BITS),
				   0x50 + i, NULL),
			  0);
	}
	struct fi_cq_tagged_entry e;
	for (int n = 0; n < 2 * RX; n++)
		CHECK_RET(wait_one(peer_cq, &e), 1);
	for (int i = 0; i < RX; i++) {
		int seen_plain = 0, seen_tagged = 0;
		for (int n = 0; n < 2; n++) {
			CHECK_RET(wait_one(rx_cq[i], &e), 1);
			if (e.flags & FI_TAGGED) {
				CHECK(e.op_context == tagged[i] && e.tag == (uint64_t)(0x50 + i));
				seen_tagged++;
			} else {
				CHECK(e.op_context == plain[i]);
				seen_plain++;
			}
		}
		CHECK(seen_plain == 1 && seen_tagged == 1);
		CHECK_RET(fi_cq_read(rx_cq[i], &e, 1), -FI_EAGAIN);
		char want[32];
		snprintf(want, sizeof(want), "to context %d", i);
		CHECK(strcmp(plain[i], want) == 0);
		snprintf(want, sizeof(want), "tagged to context %d", i);
		CHECK(strcmp(tagged[i], want) == 0);
	}
	printf("delivered per context: ok\n");

	/* Each transmit context sends to the peer; its completion is on its own CQ. */
	char back[TX][32];
	for (int t = 0; t < TX; t++)
		CHECK_RET(fi_recv(peer, back[t], sizeof(back[t]), NULL, FI_ADDR_UNSPEC, NULL), 0);
	for (int t = 0; t < TX; t++)
		CHECK_RET(fi_send(tx[t], "back", 5, NULL, peer_addr, &tx[t]), 0);
	for (int t = 0; t < TX; t++) {
		CHECK_RET(wait_one(tx_cq[t], &e), 1);
		CHECK(e.op_context == &tx[t] && (e.flags & FI_SEND));
		CHECK_RET(fi_cq_read(tx_cq[t], &e, 1), -FI_EAGAIN);
	}
	for (int t = 0; t < TX; t++)
		CHECK_RET(wait_one(peer_cq, &e), 1);
	/* A receive context does not send. */
	CHECK_RET(fi_send(rx[0], "x", 2, NULL, peer_addr, NULL), -FI_EOPNOTSUPP);
	printf("transmit contexts: ok\n");

	CHECK_RET(fi_close(&sep->fid), -FI_EBUSY);
	for (int i = 0; i < TX; i++)
		CHECK_RET(fi_close(&tx[i]->fid), 0);
	for (int i = 0; i < RX; i++)
		CHECK_RET(fi_close(&rx[i]->fid), 0);
	CHECK_RET(fi_close(&sep->fid), 0);
	CHECK_RET(fi_close(&peer->fid), 0);
	for (int i = 0; i < TX; i++)
		CHECK_RET(fi_close(&tx_cq[i]->fid), 0);
	for (int i = 0; i < RX; i++)
		CHECK_RET(fi_close(&rx_cq[i]->fid), 0);
	CHECK_RET(fi_close(&peer_cq->fid), 0);
	CHECK_RET(fi_close(&av->fid), 0);
	CHECK_RET(fi_close(&domain->fid), 0);
	CHECK_RET(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	printf("ok\n");
	return 0;
}
