/* A libfabric application that holds an AV and an endpoint open until told to finish (a line
 * on standard input), so that tests/libfabric.rs can inspect it live through the driver's
 * telemetry socket (UET_NIC_TELEMETRY=1), as uetctl does.
 * Prints "ready" once its AV holds its addresses and it has waited on its CQ once; "ok" at
 * the end. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>

#include "check.h"

int main(void)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	CHECK(hints);
	hints->fabric_attr->prov_name = strdup("uet");
	hints->caps = FI_MSG;
	hints->ep_attr->type = FI_EP_RDM;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), 0);
	fi_freeinfo(hints);

	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	CHECK_RET(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	CHECK_RET(fi_domain(fabric, info, &domain, NULL), 0);
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE, .count = 16 };
	CHECK_RET(fi_av_open(domain, &av_attr, &av, NULL), 0);
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_UNSPEC };
	CHECK_RET(fi_cq_open(domain, &cq_attr, &cq, NULL), 0);
	CHECK_RET(fi_endpoint(domain, info, &ep, NULL), 0);
	CHECK_RET(fi_ep_bind(ep, &av->fid, 0), 0);
	CHECK_RET(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	CHECK_RET(fi_enable(ep), 0);

	/* Three peers, then a symmetric range of four (one NIC entry). */
	fi_addr_t a;
	CHECK_RET(fi_av_insertsvc(av, "10.0.5.1", "1", &a, 0, NULL), 1);
	CHECK_RET(fi_av_insertsvc(av, "10.0.5.2", "1", &a, 0, NULL), 1);
	CHECK_RET(fi_av_insertsvc(av, "10.0.5.3", "1", &a, 0, NULL), 1);
	fi_addr_t sym[4];
	CHECK_RET(fi_av_insertsym(av, "10.0.6.1", 4, "2", 1, sym, 0, NULL), 4);
	/* A wait with nothing to complete: the endpoint's ring is armed on an MSI-X vector. */
	struct fi_cq_msg_entry entry;
	CHECK_RET(fi_cq_sread(cq, &entry, 1, NULL, 10), -FI_EAGAIN);
	printf("ready\n");
	fflush(stdout);

	char line[16];
	CHECK(fgets(line, sizeof(line), stdin) != NULL);

	CHECK_RET(fi_close(&ep->fid), 0);
	CHECK_RET(fi_close(&cq->fid), 0);
	CHECK_RET(fi_close(&av->fid), 0);
	CHECK_RET(fi_close(&domain->fid), 0);
	CHECK_RET(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	printf("ok\n");
	return 0;
}
