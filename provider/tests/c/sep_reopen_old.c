/* A scalable endpoint on a NIC without RECV_CANCEL (host interface older than 1.14): a
 * closed receive context's receive stays posted, so fi_rx_context of its index is
 * -FI_EOPBADSTATE, not -FI_EBUSY ("try again"), as retrying alone never opens it; once a
 * message has taken the old receive (its send a success, the buffer never written) the
 * index opens again. Run by tests/libfabric.rs on such a NIC; prints "ok" at the end, exits
 * 1 at the first failed check. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "check.h"

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
	struct fi_info *hints = uet_hints(FI_MSG, FI_EP_RDM);
	hints->ep_attr->tx_ctx_cnt = 1;
	hints->ep_attr->rx_ctx_cnt = 1;
	struct fi_info *info = uet_getinfo(hints);

	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	CHECK_RET(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	CHECK_RET(fi_domain(fabric, info, &domain, NULL), 0);
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE, .count = 4 };
	CHECK_RET(fi_av_open(domain, &av_attr, &av, NULL), 0);

	struct fid_ep *sep, *tx, *rx, *none = NULL;
	struct fid_cq *tx_cq, *rx_cq, *new_cq;
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_UNSPEC };
	CHECK_RET(fi_scalable_ep(domain, info, &sep, NULL), 0);
	CHECK_RET(fi_scalable_ep_bind(sep, &av->fid, 0), 0);
	CHECK_RET(fi_tx_context(sep, 0, NULL, &tx, NULL), 0);
	CHECK_RET(fi_rx_context(sep, 0, NULL, &rx, NULL), 0);
	CHECK_RET(fi_cq_open(domain, &cq_attr, &tx_cq, NULL), 0);
	CHECK_RET(fi_cq_open(domain, &cq_attr, &rx_cq, NULL), 0);
	CHECK_RET(fi_cq_open(domain, &cq_attr, &new_cq, NULL), 0);
	CHECK_RET(fi_ep_bind(tx, &tx_cq->fid, FI_TRANSMIT), 0);
	CHECK_RET(fi_ep_bind(rx, &rx_cq->fid, FI_RECV), 0);
	CHECK_RET(fi_enable(sep), 0);
	char name[64];
	size_t len = sizeof(name);
	CHECK_RET(fi_getname(&sep->fid, name, &len), 0);
	fi_addr_t me;
	CHECK_RET(fi_av_insert(av, name, 1, &me, 0, NULL), 1);
	/* Without RECV_CANCEL fi_cancel is refused, and the close cannot withdraw either. */
	char old[32];
	memset(old, 0xaa, sizeof(old));
	CHECK_RET(fi_recv(rx, old, sizeof(old), NULL, FI_ADDR_UNSPEC, &old), 0);
	CHECK_RET(fi_cancel(&rx->fid, &old), -FI_ENOSYS);
	CHECK_RET(fi_close(&rx->fid), 0);
	for (int i = 0; i < 3; i++)
		CHECK_RET(fi_rx_context(sep, 0, NULL, &none, NULL), -FI_EOPBADSTATE);
	CHECK(none == NULL);
	printf("closed index with a receive posted: -FI_EOPBADSTATE\n");

	/* A message takes the old receive: a success at the sender, discarded at the target. */
	struct fi_cq_tagged_entry e;
	CHECK_RET(fi_send(tx, "taken", 6, NULL, me, &tx), 0);
	CHECK_RET(wait_one(tx_cq, &e), 1);
	CHECK(e.op_context == &tx);
	CHECK_RET(fi_rx_context(sep, 0, NULL, &rx, NULL), 0);
	for (size_t i = 0; i < sizeof(old); i++)
		CHECK(old[i] == (char)0xaa);
	CHECK_RET(fi_ep_bind(rx, &new_cq->fid, FI_RECV), 0);
	CHECK_RET(fi_enable(rx), 0);
	char buf[32];
	CHECK_RET(fi_recv(rx, buf, sizeof(buf), NULL, FI_ADDR_UNSPEC, &buf), 0);
	CHECK_RET(fi_send(tx, "new", 4, NULL, me, &tx), 0);
	CHECK_RET(wait_one(tx_cq, &e), 1);
	CHECK_RET(wait_one(new_cq, &e), 1);
	CHECK(e.op_context == &buf && e.len == 4 && strcmp(buf, "new") == 0);
	CHECK_RET(fi_cq_read(rx_cq, &e, 1), -FI_EAGAIN);
	printf("opened again once a message took it: ok\n");

	CHECK_RET(fi_close(&tx->fid), 0);
	CHECK_RET(fi_close(&rx->fid), 0);
	CHECK_RET(fi_close(&sep->fid), 0);
	CHECK_RET(fi_close(&tx_cq->fid), 0);
	CHECK_RET(fi_close(&rx_cq->fid), 0);
	CHECK_RET(fi_close(&new_cq->fid), 0);
	CHECK_RET(fi_close(&av->fid), 0);
	CHECK_RET(fi_close(&domain->fid), 0);
	CHECK_RET(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	printf("ok\n");
	return 0;
}
