/* Completion counters through libfabric's own calls: two endpoints whose CQs report only
 * what asks for a completion (FI_SELECTIVE_COMPLETION), each with a counter of its sends or
 * receives, which count every completion all the same.
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

#include "check.h"

int main(void)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	CHECK(hints);
	hints->fabric_attr->prov_name = strdup("uet");
	hints->caps = FI_MSG;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->cntr_cnt = 2;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), 0);
	fi_freeinfo(hints);
	CHECK(info->domain_attr->cntr_cnt >= 2);
	printf("cntr_cnt: %zu\n", info->domain_attr->cntr_cnt);

	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	CHECK_RET(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	CHECK_RET(fi_domain(fabric, info, &domain, NULL), 0);
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE, .count = 4 };
	CHECK_RET(fi_av_open(domain, &av_attr, &av, NULL), 0);

	struct fi_cntr_attr cntr_attr = { .events = FI_CNTR_EVENTS_COMP,
					  .wait_obj = FI_WAIT_UNSPEC };
	struct fid_cntr *tx, *rx;
	CHECK_RET(fi_cntr_open(domain, &cntr_attr, &tx, NULL), 0);
	CHECK_RET(fi_cntr_open(domain, &cntr_attr, &rx, NULL), 0);

	struct fid_ep *ep[2];
	struct fid_cq *cq[2];
	fi_addr_t addr[2];
	for (int i = 0; i < 2; i++) {
		struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT,
					      .wait_obj = FI_WAIT_UNSPEC };
		CHECK_RET(fi_cq_open(domain, &cq_attr, &cq[i], NULL), 0);
		CHECK_RET(fi_endpoint(domain, info, &ep[i], NULL), 0);
		CHECK_RET(fi_ep_bind(ep[i], &av->fid, 0), 0);
		CHECK_RET(fi_ep_bind(ep[i], &cq[i]->fid,
				     FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION),
			  0);
	}
	/* RMA counters are not served. */
	CHECK_RET(fi_ep_bind(ep[0], &tx->fid, FI_WRITE), -FI_EBADFLAGS);
	CHECK_RET(fi_ep_bind(ep[0], &tx->fid, FI_SEND), 0);
	CHECK_RET(fi_ep_bind(ep[1], &rx->fid, FI_RECV), 0);
	for (int i = 0; i < 2; i++) {
		CHECK_RET(fi_enable(ep[i]), 0);
		uint8_t name[32];
		size_t len = sizeof(name);
		CHECK_RET(fi_getname(&ep[i]->fid, name, &len), 0);
		CHECK_RET(fi_av_insert(av, name, 1, &addr[i], 0, NULL), 1);
	}
	CHECK_RET(fi_close(&tx->fid), -FI_EBUSY);

	/* Sends and receives that write no CQ entry, and an inject, counted. */
	enum { N = 8 };
	char rbuf[N + 1][8];
	for (int n = 0; n <= N; n++)
		CHECK_RET(fi_recv(ep[1], rbuf[n], sizeof(rbuf[n]), NULL, FI_ADDR_UNSPEC, NULL), 0);
	for (int n = 0; n < N; n++)
		CHECK_RET(fi_send(ep[0], "counted", 8, NULL, addr[1], NULL), 0);
	CHECK_RET(fi_inject(ep[0], "inject", 7, addr[1]), 0);
	CHECK_RET(fi_cntr_wait(tx, N + 1, 2000), 0);
	CHECK_RET(fi_cntr_wait(rx, N + 1, 2000), 0);
	CHECK(fi_cntr_read(tx) == N + 1 && fi_cntr_readerr(tx) == 0);
	CHECK(fi_cntr_read(rx) == N + 1 && fi_cntr_readerr(rx) == 0);
	CHECK(strcmp(rbuf[N], "inject") == 0);
	void *ctx;
	CHECK_RET(fi_cq_read(cq[0], &ctx, 1), -FI_EAGAIN);
	CHECK_RET(fi_cq_read(cq[1], &ctx, 1), -FI_EAGAIN);
	printf("counted: %" PRIu64 " sent, %" PRIu64 " received\n", fi_cntr_read(tx),
	       fi_cntr_read(rx));

	/* The application's own changes; a wait that times out. */
	CHECK_RET(fi_cntr_set(tx, 0), 0);
	CHECK_RET(fi_cntr_add(tx, 2), 0);
	CHECK_RET(fi_cntr_adderr(tx, 3), 0);
	CHECK(fi_cntr_read(tx) == 2 && fi_cntr_readerr(tx) == 3);
	CHECK_RET(fi_cntr_seterr(tx, 0), 0);
	CHECK(fi_cntr_readerr(tx) == 0);
	CHECK_RET(fi_cntr_wait(tx, 3, 20), -FI_ETIMEDOUT);
	printf("set, add, adderr, seterr, wait: ok\n");

	for (int i = 0; i < 2; i++) {
		CHECK_RET(fi_close(&ep[i]->fid), 0);
		CHECK_RET(fi_close(&cq[i]->fid), 0);
	}
	CHECK_RET(fi_close(&tx->fid), 0);
	CHECK_RET(fi_close(&rx->fid), 0);
	CHECK_RET(fi_close(&av->fid), 0);
	CHECK_RET(fi_close(&domain->fid), 0);
	CHECK_RET(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	printf("ok\n");
	return 0;
}
