/* A process that runs the uet provider forks a child that closes every object it inherited
 * and exits with exit(3), which runs libfabric's cleanup (and the provider's) in the child.
 * The parent's endpoints work on after the child is gone: the child's copies of the objects
 * leave the parent's NIC alone. Run by tests/libfabric.rs on a NIC served over vfio-user,
 * which parent and child reach through one socket; prints "ok" at the end, exits 1 at the
 * first failed check. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "check.h"

struct peer {
	struct fid_ep *ep;
	struct fid_cq *cq;
	fi_addr_t addr;
};

/* A message from p[0] to p[1]: both completions, and the bytes. */
static void exchange(struct peer *p, const char *text)
{
	char rbuf[64] = { 0 };
	int rctx = 1, sctx = 2;
	struct fi_cq_data_entry e;
	size_t len = strlen(text);
	CHECK_RET(fi_recv(p[1].ep, rbuf, sizeof(rbuf), NULL, FI_ADDR_UNSPEC, &rctx), 0);
	CHECK_RET(fi_send(p[0].ep, text, len, NULL, p[1].addr, &sctx), 0);
	CHECK_RET(fi_cq_sread(p[0].cq, &e, 1, NULL, 1000), 1);
	CHECK(e.op_context == &sctx);
	CHECK_RET(fi_cq_sread(p[1].cq, &e, 1, NULL, 1000), 1);
	CHECK(e.op_context == &rctx && e.len == len && memcmp(rbuf, text, len) == 0);
	printf("message: %s\n", rbuf);
}

/* Close every object, each once, and free the info. */
static void close_all(struct peer *p, struct fid_av *av, struct fid_domain *domain,
		      struct fid_fabric *fabric, struct fi_info *info)
{
	for (int i = 0; i < 2; i++) {
		CHECK_RET(fi_close(&p[i].ep->fid), 0);
		CHECK_RET(fi_close(&p[i].cq->fid), 0);
	}
	CHECK_RET(fi_close(&av->fid), 0);
	CHECK_RET(fi_close(&domain->fid), 0);
	CHECK_RET(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
}

int main(void)
{
	struct fi_info *info = uet_getinfo(uet_hints(FI_MSG, FI_EP_RDM));
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
		CHECK_RET(fi_ep_bind(p[i].ep, &av->fid, 0), 0);
		CHECK_RET(fi_ep_bind(p[i].ep, &p[i].cq->fid, FI_TRANSMIT | FI_RECV), 0);
		CHECK_RET(fi_enable(p[i].ep), 0);
		uint8_t name[64];
		size_t len = sizeof(name);
		CHECK_RET(fi_getname(&p[i].ep->fid, name, &len), 0);
		CHECK_RET(fi_av_insert(av, name, 1, &p[i].addr, 0, NULL), 1);
	}
	exchange(p, "before the fork");
	fflush(stdout);

	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		/* A child that tidies up what it inherited, as a library's cleanup would. */
		close_all(p, av, domain, fabric, info);
		exit(0);
	}
	int status = 0;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	printf("child closed its copies and exited\n");

	exchange(p, "after the child");
	char name[64];
	size_t len = sizeof(name);
	CHECK_RET(fi_av_lookup(av, p[1].addr, name, &len), 0);

	close_all(p, av, domain, fabric, info);
	printf("ok\n");
	return 0;
}
