/* FI_WAIT_FD through libfabric's own calls: the descriptors fi_control(FI_GETWAIT) gives,
 * slept on in epoll after fi_trywait says so, wake for what the application waits for.
 * Run by tests/libfabric.rs; prints "ok" at the end, exits 1 at the first failed check, and
 * is killed by an alarm rather than hang. */

#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "check.h"

/* Whether `fd` polls readable within `ms`. */
static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* An epoll set of `fd`. */
static int epoll_of(int fd)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK(ep >= 0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0);
	return ep;
}

/* The application's sleep: fi_trywait, and when it says so, epoll_wait up to 5 s. Whether
 * it was woken by the descriptor (1), or told to read first (0). */
static int sleep_on(struct fid_fabric *fabric, struct fid *fid, int epfd)
{
	int ret = fi_trywait(fabric, &fid, 1);
	if (ret == -FI_EAGAIN)
		return 0;
	CHECK_RET(ret, 0);
	struct epoll_event ev;
	CHECK_RET(epoll_wait(epfd, &ev, 1, 5000), 1);
	return 1;
}

static struct fi_info *answer(enum fi_ep_type type)
{
	return uet_getinfo(uet_hints(FI_MSG, type));
}

/* How long a helper thread waits before it acts, so that the main thread is asleep in epoll
 * by then. */
#define LATER_US 100000

struct connector {
	struct fid_ep *ep;
	const uint8_t *name;
};

static void *connect_later(void *arg)
{
	struct connector *c = arg;
	usleep(LATER_US);
	CHECK_RET(fi_connect(c->ep, c->name, "knock", 6), 0);
	return NULL;
}

struct writer {
	struct fid_eq *eq;
	uint64_t data;
};

static void *write_later(void *arg)
{
	struct writer *w = arg;
	usleep(LATER_US);
	struct fi_eq_entry entry = { .data = w->data };
	CHECK_RET(fi_eq_write(w->eq, FI_NOTIFY, &entry, sizeof(entry), 0), sizeof(entry));
	return NULL;
}

/* A listener's FI_WAIT_FD queue: a connection request, and an event another thread writes,
 * wake the application in epoll; once they are read and fi_trywait returned 0, the
 * descriptor is not readable. */
static void eq_waits(void)
{
	struct fi_info *info = answer(FI_EP_MSG);
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	CHECK_RET(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	CHECK_RET(fi_domain(fabric, info, &domain, NULL), 0);

	struct fi_eq_attr fd_attr = { .wait_obj = FI_WAIT_FD, .flags = FI_WRITE };
	struct fi_eq_attr plain_attr = { .wait_obj = FI_WAIT_UNSPEC };
	struct fid_eq *eq, *eq_c;
	CHECK_RET(fi_eq_open(fabric, &fd_attr, &eq, NULL), 0);
	CHECK_RET(fi_eq_open(fabric, &plain_attr, &eq_c, NULL), 0);
	int fd = -1;
	enum fi_wait_obj obj;
	CHECK_RET(fi_control(&eq->fid, FI_GETWAIT, &fd), 0);
	CHECK_RET(fi_control(&eq->fid, FI_GETWAITOBJ, &obj), 0);
	CHECK(fd >= 0 && obj == FI_WAIT_FD);
	CHECK_RET(fi_control(&eq_c->fid, FI_GETWAIT, &fd), -FI_ENODATA);
	CHECK_RET(fi_control(&eq->fid, FI_GETWAIT, &fd), 0);
	int epfd = epoll_of(fd);

	struct fid_pep *pep;
	CHECK_RET(fi_passive_ep(fabric, info, &pep, NULL), 0);
	CHECK_RET(fi_pep_bind(pep, &eq->fid, 0), 0);
	CHECK_RET(fi_listen(pep), 0);
	uint8_t name[32];
	size_t len = sizeof(name);
	CHECK_RET(fi_getname(&pep->fid, name, &len), 0);

	/* Nothing to read: fi_trywait lets the application sleep, and nothing wakes it. */
	struct fid *fid = &eq->fid;
	CHECK_RET(fi_trywait(fabric, &fid, 1), 0);
	CHECK(!readable(fd, 0));
	struct epoll_event ev;
	CHECK_RET(epoll_wait(epfd, &ev, 1, 10), 0);

	/* A connection request. */
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_UNSPEC };
	CHECK_RET(fi_cq_open(domain, &cq_attr, &cq, NULL), 0);
	CHECK_RET(fi_endpoint(domain, info, &ep, NULL), 0);
	CHECK_RET(fi_ep_bind(ep, &eq_c->fid, 0), 0);
	CHECK_RET(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	CHECK_RET(fi_enable(ep), 0);
	/* Made by another thread while this one sleeps. */
	struct connector conn = { .ep = ep, .name = name };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, connect_later, &conn) == 0);
	CHECK_RET(sleep_on(fabric, fid, epfd), 1);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK_RET(fi_trywait(fabric, &fid, 1), -FI_EAGAIN);
	uint32_t event;
	struct {
		struct fi_eq_cm_entry entry;
		char data[64];
	} cm;
	CHECK(fi_eq_read(eq, &event, &cm, sizeof(cm), 0) >= (ssize_t)sizeof(cm.entry));
	CHECK(event == FI_CONNREQ && cm.entry.fid == &pep->fid && strcmp(cm.data, "knock") == 0);
	CHECK_RET(fi_reject(pep, cm.entry.info->handle, NULL, 0), 0);
	fi_freeinfo(cm.entry.info);
	CHECK_RET(fi_trywait(fabric, &fid, 1), 0);
	CHECK(!readable(fd, 0));
	printf("eq: connection request: ok\n");

	/* An event another thread writes. */
	for (int round = 0; round < 3; round++) {
		struct writer w = { .eq = eq, .data = 100 + round };
		pthread_t t;
		CHECK(pthread_create(&t, NULL, write_later, &w) == 0);
		int woke = 0;
		struct fi_eq_entry entry;
		for (;;) {
			if (sleep_on(fabric, fid, epfd))
				woke++;
			ssize_t n = fi_eq_read(eq, &event, &entry, sizeof(entry), 0);
			if (n == -FI_EAGAIN)
				continue;
			CHECK_RET(n, sizeof(entry));
			break;
		}
		CHECK(pthread_join(t, NULL) == 0);
		CHECK(woke == 1 && event == FI_NOTIFY && entry.data == 100 + (uint64_t)round);
		CHECK_RET(fi_trywait(fabric, &fid, 1), 0);
		CHECK(!readable(fd, 0));
	}
	printf("eq: fi_eq_write from another thread: ok\n");

	CHECK_RET(fi_close(&pep->fid), 0);
	CHECK_RET(fi_close(&ep->fid), 0);
	CHECK_RET(fi_close(&cq->fid), 0);
	CHECK_RET(fi_close(&eq->fid), 0);
	CHECK_RET(fi_close(&eq_c->fid), 0);
	close(epfd);
	CHECK_RET(fi_close(&domain->fid), 0);
	CHECK_RET(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
}

struct sender {
	struct fid_ep *ep;
	fi_addr_t to;
};

static void *send_later(void *arg)
{
	struct sender *s = arg;
	usleep(LATER_US);
	CHECK_RET(fi_send(s->ep, "counted", 8, NULL, s->to, NULL), 0);
	return NULL;
}

struct adder {
	struct fid_cntr *cntr;
	uint64_t value;
};

static void *add_later(void *arg)
{
	struct adder *a = arg;
	usleep(LATER_US);
	CHECK_RET(fi_cntr_add(a->cntr, a->value), 0);
	return NULL;
}

/* A counter of an endpoint's receives, FI_WAIT_FD: a completed receive, and fi_cntr_add from
 * another thread, wake the application in epoll, and fi_cntr_read then shows the count. */
static void cntr_waits(void)
{
	struct fi_info *info = answer(FI_EP_RDM);
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	CHECK_RET(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	CHECK_RET(fi_domain(fabric, info, &domain, NULL), 0);
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE, .count = 4 };
	CHECK_RET(fi_av_open(domain, &av_attr, &av, NULL), 0);
	struct fi_cntr_attr cntr_attr = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_FD };
	struct fid_cntr *rx;
	CHECK_RET(fi_cntr_open(domain, &cntr_attr, &rx, NULL), 0);
	int fd = -1;
	enum fi_wait_obj obj;
	CHECK_RET(fi_control(&rx->fid, FI_GETWAIT, &fd), 0);
	CHECK_RET(fi_control(&rx->fid, FI_GETWAITOBJ, &obj), 0);
	CHECK(fd >= 0 && obj == FI_WAIT_FD);
	int epfd = epoll_of(fd);

	struct fid_ep *ep[2];
	struct fid_cq *cq[2];
	fi_addr_t addr[2];
	for (int i = 0; i < 2; i++) {
		struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT,
					      .wait_obj = FI_WAIT_UNSPEC };
		CHECK_RET(fi_cq_open(domain, &cq_attr, &cq[i], NULL), 0);
		CHECK_RET(fi_endpoint(domain, info, &ep[i], NULL), 0);
		CHECK_RET(fi_ep_bind(ep[i], &av->fid, 0), 0);
		CHECK_RET(fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV), 0);
	}
	CHECK_RET(fi_ep_bind(ep[1], &rx->fid, FI_RECV), 0);
	for (int i = 0; i < 2; i++) {
		CHECK_RET(fi_enable(ep[i]), 0);
		uint8_t name[32];
		size_t len = sizeof(name);
		CHECK_RET(fi_getname(&ep[i]->fid, name, &len), 0);
		CHECK_RET(fi_av_insert(av, name, 1, &addr[i], 0, NULL), 1);
	}

	struct fid *fid = &rx->fid;
	CHECK_RET(fi_trywait(fabric, &fid, 1), 0);
	CHECK(!readable(fd, 0));
	struct epoll_event ev;
	CHECK_RET(epoll_wait(epfd, &ev, 1, 10), 0);

	/* Completed receives. */
	char rbuf[3][8];
	void *ctx;
	for (int n = 0; n < 3; n++) {
		CHECK_RET(fi_recv(ep[1], rbuf[n], sizeof(rbuf[n]), NULL, FI_ADDR_UNSPEC, NULL), 0);
		/* Sent by another thread while this one sleeps. */
		struct sender snd = { .ep = ep[0], .to = addr[1] };
		pthread_t t;
		CHECK(pthread_create(&t, NULL, send_later, &snd) == 0);
		int woke = 0;
		while (fi_cntr_read(rx) < (uint64_t)n + 1)
			woke += sleep_on(fabric, fid, epfd);
		CHECK(pthread_join(t, NULL) == 0);
		CHECK(woke == 1 && fi_cntr_read(rx) == (uint64_t)n + 1);
		while (fi_cq_read(cq[0], &ctx, 1) == -FI_EAGAIN)
			;
		CHECK_RET(fi_cq_read(cq[1], &ctx, 1), 1);
		/* Once the change is seen, the application may sleep, and nothing wakes it. */
		CHECK_RET(fi_trywait(fabric, &fid, 1), -FI_EAGAIN);
		CHECK_RET(fi_trywait(fabric, &fid, 1), 0);
		CHECK(!readable(fd, 0));
	}
	printf("cntr: completed receives: ok\n");

	/* fi_cntr_add from another thread. */
	struct adder a = { .cntr = rx, .value = 10 };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, add_later, &a) == 0);
	int woke = 0;
	while (fi_cntr_read(rx) < 13)
		woke += sleep_on(fabric, fid, epfd);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(woke == 1 && fi_cntr_read(rx) == 13);
	printf("cntr: fi_cntr_add from another thread: ok\n");

	for (int i = 0; i < 2; i++) {
		CHECK_RET(fi_close(&ep[i]->fid), 0);
		CHECK_RET(fi_close(&cq[i]->fid), 0);
	}
	CHECK_RET(fi_close(&rx->fid), 0);
	close(epfd);
	CHECK_RET(fi_close(&av->fid), 0);
	CHECK_RET(fi_close(&domain->fid), 0);
	CHECK_RET(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
}

int main(void)
{
	alarm(60);
	eq_waits();
	cntr_waits();
	printf("ok\n");
	return 0;
}
