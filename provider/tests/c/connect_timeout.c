/* fi_connect to a listener whose application never answers (it never reads its EQ): once
 * FI_UET_CONNECT_TIMEOUT milliseconds (argv[1], the value the test sets) have passed, and
 * not before (nor seconds after), the connecting endpoint's EQ holds an error entry, read with fi_eq_readerr:
 * the endpoint's fid, err FI_ETIMEDOUT. The endpoint is then left as a refused one is.
 * Run by tests/libfabric.rs; prints "ok" at the end, exits 1 at the first failed check, and
 * is killed by an alarm rather than hang. */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "check.h"

static long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
	alarm(60);
	CHECK(argc == 2);
	long timeout = atol(argv[1]);
	CHECK(timeout > 0);

	struct fi_info *info = uet_getinfo(uet_hints(FI_MSG, FI_EP_MSG));

	struct fid_fabric *fabric;
	struct fid_domain *domain;
	CHECK_RET(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	CHECK_RET(fi_domain(fabric, info, &domain, NULL), 0);
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_UNSPEC };
	struct fid_eq *eq_l, *eq_c;
	CHECK_RET(fi_eq_open(fabric, &eq_attr, &eq_l, NULL), 0);
	CHECK_RET(fi_eq_open(fabric, &eq_attr, &eq_c, NULL), 0);

	/* A listener whose application never reads its EQ. */
	struct fid_pep *pep;
	CHECK_RET(fi_passive_ep(fabric, info, &pep, NULL), 0);
	CHECK_RET(fi_pep_bind(pep, &eq_l->fid, 0), 0);
	CHECK_RET(fi_listen(pep), 0);
	uint8_t name[32];
	size_t len = sizeof(name);
	CHECK_RET(fi_getname(&pep->fid, name, &len), 0);

	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_UNSPEC };
	CHECK_RET(fi_cq_open(domain, &cq_attr, &cq, NULL), 0);
	CHECK_RET(fi_endpoint(domain, info, &ep, NULL), 0);
	CHECK_RET(fi_ep_bind(ep, &eq_c->fid, 0), 0);
	CHECK_RET(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	long started = now_ms();
	CHECK_RET(fi_connect(ep, name, "anyone?", 8), 0);

	/* Nothing before the deadline. */
	uint32_t event;
	struct fi_eq_cm_entry entry;
	usleep(timeout * 1000 / 2);
	if (now_ms() - started < timeout)
		CHECK_RET(fi_eq_read(eq_c, &event, &entry, sizeof(entry), 0), -FI_EAGAIN);

	/* Then the error. */
	CHECK_RET(fi_eq_sread(eq_c, &event, &entry, sizeof(entry), (int)timeout + 5000, 0),
		  -FI_EAVAIL);
	long after = now_ms() - started;
	struct fi_eq_err_entry err;
	memset(&err, 0, sizeof(err));
	CHECK_RET(fi_eq_readerr(eq_c, &err, 0), sizeof(err));
	CHECK(err.fid == &ep->fid);
	CHECK_RET(-err.err, -FI_ETIMEDOUT);
	/* At the deadline: not the default one (5 s) the variable should have replaced. */
	CHECK(after >= timeout && after < timeout + 3000);
	printf("timed out: %s\n", fi_strerror(err.err));
	printf("%s\n", fi_eq_strerror(eq_c, err.prov_errno, err.err_data, NULL, 0));

	/* Left as a refused endpoint is. */
	CHECK_RET(fi_connect(ep, name, NULL, 0), -FI_EOPBADSTATE);
	CHECK_RET(fi_send(ep, "x", 1, NULL, 0, NULL), -FI_ENOTCONN);
	CHECK_RET(fi_eq_read(eq_c, &event, &entry, sizeof(entry), 0), -FI_EAGAIN);

	CHECK_RET(fi_close(&ep->fid), 0);
	CHECK_RET(fi_close(&cq->fid), 0);
	CHECK_RET(fi_close(&pep->fid), 0);
	CHECK_RET(fi_close(&eq_c->fid), 0);
	CHECK_RET(fi_close(&eq_l->fid), 0);
	CHECK_RET(fi_close(&domain->fid), 0);
	CHECK_RET(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	printf("ok\n");
	return 0;
}
