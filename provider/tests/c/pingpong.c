/* One of two processes on two NICs of one simulated fabric (FI_UET_DEVICE names each its NIC's
 * vfio-user socket): they swap addresses through files, insert each other into their AVs, and
 * ping-pong messages addressed by fi_addr_t, each checked on arrival.
 *
 * usage: pingpong server|client <directory> <rounds>
 * Prints "ok" at the end; exits 1 at the first failed check. */

#include <inttypes.h>
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

#define ADDR_LEN 32

static void write_address(const char *dir, const char *role, const uint8_t *addr)
{
	char tmp[512], path[512];
	snprintf(tmp, sizeof(tmp), "%s/%s.addr.tmp", dir, role);
	snprintf(path, sizeof(path), "%s/%s.addr", dir, role);
	FILE *f = fopen(tmp, "wb");
	CHECK(f);
	CHECK(fwrite(addr, 1, ADDR_LEN, f) == ADDR_LEN);
	CHECK(fclose(f) == 0);
	CHECK(rename(tmp, path) == 0);
}

static void read_address(const char *dir, const char *role, uint8_t *addr)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s.addr", dir, role);
	for (int i = 0; i < 2000; i++) {
		FILE *f = fopen(path, "rb");
		if (f) {
			size_t n = fread(addr, 1, ADDR_LEN, f);
			fclose(f);
			CHECK(n == ADDR_LEN);
			return;
		}
		usleep(10000);
	}
	fprintf(stderr, "no %s after 20 s\n", path);
	exit(1);
}

static void wait_recv(struct fid_cq *cq, fi_addr_t *src, size_t *len)
{
	struct fi_cq_data_entry e;
	for (;;) {
		ssize_t ret = fi_cq_sreadfrom(cq, &e, 1, src, NULL, 20000);
		if (ret == 1 && (e.flags & FI_RECV)) {
			*len = e.len;
			return;
		}
		/* Send completions come on the same CQ. */
		if (ret == 1)
			continue;
		CHECK_RET(ret, 1);
	}
}

int main(int argc, char **argv)
{
	CHECK(argc == 4);
	int server = strcmp(argv[1], "server") == 0;
	const char *dir = argv[2];
	int rounds = atoi(argv[3]);

	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	CHECK(hints);
	hints->fabric_attr->prov_name = strdup("uet");
	hints->caps = FI_MSG | FI_SOURCE;
	hints->ep_attr->type = FI_EP_RDM;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), 0);
	fi_freeinfo(hints);
	printf("%s on %s\n", argv[1], info->domain_attr->name);

	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	CHECK_RET(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	CHECK_RET(fi_domain(fabric, info, &domain, NULL), 0);
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE, .count = 4 };
	CHECK_RET(fi_av_open(domain, &av_attr, &av, NULL), 0);
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_UNSPEC };
	CHECK_RET(fi_cq_open(domain, &cq_attr, &cq, NULL), 0);
	CHECK_RET(fi_endpoint(domain, info, &ep, NULL), 0);
	CHECK_RET(fi_ep_bind(ep, &av->fid, 0), 0);
	CHECK_RET(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	CHECK_RET(fi_enable(ep), 0);

	char in[64];
	CHECK_RET(fi_recv(ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, NULL), 0);
	uint8_t mine[ADDR_LEN], peer[ADDR_LEN];
	size_t len = sizeof(mine);
	CHECK_RET(fi_getname(&ep->fid, mine, &len), 0);
	write_address(dir, argv[1], mine);
	read_address(dir, server ? "client" : "server", peer);
	fi_addr_t peer_addr;
	CHECK_RET(fi_av_insert(av, peer, 1, &peer_addr, 0, NULL), 1);
	char text[128];
	size_t tlen = sizeof(text);
	fi_av_straddr(av, peer, text, &tlen);
	printf("peer %s at fi_addr %" PRIu64 "\n", text, peer_addr);
	/* The first ping waits until the server holds the client in its AV: a message from a
	 * peer the AV does not hold has no source to report (FI_ADDR_NOTAVAIL). */
	uint8_t ready[ADDR_LEN];
	if (server)
		write_address(dir, "ready", mine);
	else
		read_address(dir, "ready", ready);

	for (int i = 0; i < rounds; i++) {
		char out[64];
		fi_addr_t src;
		size_t n;
		if (server) {
			wait_recv(cq, &src, &n);
			int want_len = snprintf(out, sizeof(out), "ping %d", i);
			CHECK(n == (size_t)want_len && memcmp(in, out, n) == 0);
			CHECK(src == peer_addr);
			CHECK_RET(fi_recv(ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, NULL), 0);
			int m = snprintf(out, sizeof(out), "pong %d", i);
			CHECK_RET(fi_send(ep, out, m, NULL, peer_addr, NULL), 0);
		} else {
			int m = snprintf(out, sizeof(out), "ping %d", i);
			CHECK_RET(fi_send(ep, out, m, NULL, peer_addr, NULL), 0);
			wait_recv(cq, &src, &n);
			int want_len = snprintf(out, sizeof(out), "pong %d", i);
			CHECK(n == (size_t)want_len && memcmp(in, out, n) == 0);
			CHECK(src == peer_addr);
			CHECK_RET(fi_recv(ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, NULL), 0);
		}
	}
	printf("%d rounds\n", rounds);

	CHECK_RET(fi_close(&ep->fid), 0);
	CHECK_RET(fi_close(&cq->fid), 0);
	CHECK_RET(fi_close(&av->fid), 0);
	CHECK_RET(fi_close(&domain->fid), 0);
	CHECK_RET(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	printf("ok\n");
	return 0;
}
