/* Scalable endpoints set up in the order of libfabric's fabtests program scalable_ep
 * (functional/scalable_ep.c), two of them in one process on one NIC, a server and a client:
 *
 *   fi_scalable_ep; for each index: fi_tx_context, fi_cq_open, fi_rx_context, fi_cq_open;
 *   fi_scalable_ep_bind(av); for each transmit context: fi_ep_bind(FI_SEND), fi_enable;
 *   for each receive context: fi_ep_bind(FI_RECV), fi_enable [, fi_recv]; fi_enable(sep)
 *   [; fi_recv on each receive context].
 *
 * The server posts its receives right after each receive context's fi_enable, before
 * fi_enable(sep), as fabtests did up to 2017; the client posts them after fi_enable(sep), as
 * fabtests does since. Then fabtests' address exchange (init_av) and test (run_test): the
 * client sends to each of the server's receive contexts, named with fi_rx_addr, and each
 * message lands in the receive the server posted before fi_enable(sep); and back, the
 * server to each of the client's. Last, a receive context closed and opened again on its
 * index.
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

#define MAX_CTX 4
#define DATA 0x12345670
#define SIZE 64

struct side {
	const char *name;
	struct fid_av *av;
	struct fid_ep *sep, *tx_ep[MAX_CTX], *rx_ep[MAX_CTX];
	struct fid_cq *txcq[MAX_CTX], *rxcq[MAX_CTX];
	/* The receive each receive context gets in bind_ep_res, and the one receive context 0
	 * gets again in init_av. */
	char rx_buf[MAX_CTX][SIZE], again[SIZE];
	char tx_buf[SIZE];
	fi_addr_t remote, remote_rx[MAX_CTX];
};

static struct fi_info *fi;
static struct fid_domain *domain;
static int ctx_cnt = MAX_CTX, rx_ctx_bits;

/* fabtests' wait_for_comp: one entry, spinning on -FI_EAGAIN. */
static void wait_for_comp(struct fid_cq *cq)
{
	struct fi_cq_entry comp;
	ssize_t ret;
	long spin = 0;
	do {
		ret = fi_cq_read(cq, &comp, 1);
	} while (ret == -FI_EAGAIN && ++spin < 50000000);
	CHECK_RET(ret, 1);
}

/* fabtests' alloc_ep_res and bind_ep_res; `early`: the receives before fi_enable(sep). */
static void setup(struct side *s, int early)
{
	struct fi_av_attr av_attr = { .type = fi->domain_attr->av_type, .count = 4 };
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE };

	CHECK_RET(fi_scalable_ep(domain, fi, &s->sep, NULL), 0);
	av_attr.rx_ctx_bits = rx_ctx_bits;
	CHECK_RET(fi_av_open(domain, &av_attr, &s->av, NULL), 0);
	for (int i = 0; i < ctx_cnt; i++) {
		CHECK_RET(fi_tx_context(s->sep, i, NULL, &s->tx_ep[i], NULL), 0);
		CHECK_RET(fi_cq_open(domain, &cq_attr, &s->txcq[i], NULL), 0);
		CHECK_RET(fi_rx_context(s->sep, i, NULL, &s->rx_ep[i], NULL), 0);
		CHECK_RET(fi_cq_open(domain, &cq_attr, &s->rxcq[i], NULL), 0);
	}

	CHECK_RET(fi_scalable_ep_bind(s->sep, &s->av->fid, 0), 0);
	for (int i = 0; i < ctx_cnt; i++) {
		CHECK_RET(fi_ep_bind(s->tx_ep[i], &s->txcq[i]->fid, FI_SEND), 0);
		CHECK_RET(fi_enable(s->tx_ep[i]), 0);
	}
	for (int i = 0; i < ctx_cnt; i++) {
		CHECK_RET(fi_ep_bind(s->rx_ep[i], &s->rxcq[i]->fid, FI_RECV), 0);
		CHECK_RET(fi_enable(s->rx_ep[i]), 0);
		if (early)
			CHECK_RET(fi_recv(s->rx_ep[i], s->rx_buf[i], SIZE, NULL, 0, NULL), 0);
	}
	CHECK_RET(fi_enable(s->sep), 0);
	if (!early)
		for (int i = 0; i < ctx_cnt; i++)
			CHECK_RET(fi_recv(s->rx_ep[i], s->rx_buf[i], SIZE, NULL, 0, NULL), 0);
	printf("%s: set up, receives posted %s fi_enable(sep)\n", s->name,
	       early ? "before" : "after");
}

static void close_side(struct side *s)
{
	/* fabtests' free_res, then the scalable endpoint, then the AV. */
	for (int i = 0; i < ctx_cnt; i++)
		CHECK_RET(fi_close(&s->rx_ep[i]->fid), 0);
	for (int i = 0; i < ctx_cnt; i++)
		CHECK_RET(fi_close(&s->tx_ep[i]->fid), 0);
	for (int i = 0; i < ctx_cnt; i++)
		CHECK_RET(fi_close(&s->rxcq[i]->fid), 0);
	for (int i = 0; i < ctx_cnt; i++)
		CHECK_RET(fi_close(&s->txcq[i]->fid), 0);
	CHECK_RET(fi_close(&s->sep->fid), 0);
	CHECK_RET(fi_close(&s->av->fid), 0);
}

int main(void)
{
	struct fid_fabric *fabric;
	fi = uet_getinfo(uet_hints(FI_MSG | FI_NAMED_RX_CTX, FI_EP_RDM));

	/* init_fabric: as many contexts as the domain offers, up to MAX_CTX. */
	if (ctx_cnt > (int)fi->domain_attr->tx_ctx_cnt)
		ctx_cnt = fi->domain_attr->tx_ctx_cnt;
	if (ctx_cnt > (int)fi->domain_attr->rx_ctx_cnt)
		ctx_cnt = fi->domain_attr->rx_ctx_cnt;
	CHECK(ctx_cnt == MAX_CTX);
	fi->ep_attr->tx_ctx_cnt = ctx_cnt;
	fi->ep_attr->rx_ctx_cnt = ctx_cnt;
	while (ctx_cnt >> ++rx_ctx_bits)
		;
	CHECK_RET(fi_fabric(fi->fabric_attr, &fabric, NULL), 0);
	CHECK_RET(fi_domain(fabric, fi, &domain, NULL), 0);

	static struct side server = { .name = "server" }, client = { .name = "client" };
	setup(&server, 1);
	setup(&client, 0);

	/* init_av. The client knows the server's address (fabtests: from the command line),
	 * sends it its own on transmit context 0, and waits for the server's answer. */
	uint8_t name[64];
	size_t addrlen = sizeof(name);
	CHECK_RET(fi_getname(&server.sep->fid, name, &addrlen), 0);
	CHECK_RET(fi_av_insert(client.av, name, 1, &client.remote, 0, NULL), 1);
	addrlen = sizeof(client.tx_buf);
	CHECK_RET(fi_getname(&client.sep->fid, client.tx_buf, &addrlen), 0);
	CHECK_RET(fi_send(client.tx_ep[0], client.tx_buf, addrlen, NULL, client.remote, NULL), 0);
	/* The server: the client's address lands in receive context 0's first receive. */
	wait_for_comp(server.rxcq[0]);
	CHECK_RET(fi_av_insert(server.av, server.rx_buf[0], 1, &server.remote, 0, NULL), 1);
	CHECK_RET(fi_send(server.tx_ep[0], server.tx_buf, 1, NULL, server.remote, NULL), 0);
	wait_for_comp(client.rxcq[0]);
	struct side *both[] = { &server, &client };
	for (int k = 0; k < 2; k++) {
		struct side *s = both[k];
		for (int i = 0; i < ctx_cnt; i++)
			s->remote_rx[i] = fi_rx_addr(s->remote, i, rx_ctx_bits);
		CHECK_RET(fi_recv(s->rx_ep[0], s->again, SIZE, NULL, 0, NULL), 0);
		wait_for_comp(s->txcq[0]);
	}
	printf("addresses exchanged: ok\n");

	/* run_test: the client sends on each transmit context to the server's receive context
	 * of its index; then the server to the client's. */
	for (int k = 0; k < 2; k++) {
		struct side *from = both[k], *to = both[1 - k];
		for (int i = 0; i < ctx_cnt; i++) {
			uint32_t data = DATA + i + 0x100 * k;
			memcpy(from->tx_buf, &data, sizeof(data));
			CHECK_RET(fi_send(from->tx_ep[i], from->tx_buf, SIZE, NULL, from->remote_rx[i],
					  NULL),
				  0);
			wait_for_comp(from->txcq[i]);
		}
		for (int i = 0; i < ctx_cnt; i++) {
			uint32_t data = DATA + i + 0x100 * k, got;
			wait_for_comp(to->rxcq[i]);
			/* Receive context 0's first receive took the exchange's message. */
			memcpy(&got, i == 0 ? to->again : to->rx_buf[i], sizeof(got));
			if (got != data) {
				fprintf(stderr, "%s context %d: 0x%" PRIx32 ", expected 0x%" PRIx32 "\n",
					to->name, i, got, data);
				exit(1);
			}
			struct fi_cq_entry e;
			CHECK_RET(fi_cq_read(to->rxcq[i], &e, 1), -FI_EAGAIN);
		}
		printf("%s to every receive context of the %s: ok\n", from->name, to->name);
	}

	/* A receive context closed with a receive posted opens again on its index: the new
	 * context, with a CQ of its own, gets the next message for the index, and the old
	 * receive's buffer stays as it was. */
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE };
	char old_buf[SIZE], new_buf[SIZE];
	memset(old_buf, 0xaa, sizeof(old_buf));
	CHECK_RET(fi_recv(server.rx_ep[1], old_buf, SIZE, NULL, 0, NULL), 0);
	CHECK_RET(fi_close(&server.rx_ep[1]->fid), 0);
	CHECK_RET(fi_close(&server.rxcq[1]->fid), 0);
	CHECK_RET(fi_rx_context(server.sep, 1, NULL, &server.rx_ep[1], NULL), 0);
	CHECK_RET(fi_cq_open(domain, &cq_attr, &server.rxcq[1], NULL), 0);
	CHECK_RET(fi_ep_bind(server.rx_ep[1], &server.rxcq[1]->fid, FI_RECV), 0);
	CHECK_RET(fi_enable(server.rx_ep[1]), 0);
	CHECK_RET(fi_recv(server.rx_ep[1], new_buf, SIZE, NULL, 0, NULL), 0);
	strcpy(client.tx_buf, "to the reopened context");
	CHECK_RET(fi_send(client.tx_ep[1], client.tx_buf, SIZE, NULL, client.remote_rx[1], NULL), 0);
	wait_for_comp(client.txcq[1]);
	wait_for_comp(server.rxcq[1]);
	CHECK(strcmp(new_buf, "to the reopened context") == 0);
	for (size_t b = 0; b < sizeof(old_buf); b++)
		CHECK((unsigned char)old_buf[b] == 0xaa);
	printf("receive context opened again: ok\n");

	close_side(&client);
	close_side(&server);
	CHECK_RET(fi_close(&domain->fid), 0);
	CHECK_RET(fi_close(&fabric->fid), 0);
	fi_freeinfo(fi);
	printf("ok\n");
	return 0;
}
