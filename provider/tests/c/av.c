/* A libfabric application of the AV, run by tests/libfabric.rs through the system libfabric
 * with the uet provider loaded from FI_PROVIDER_PATH: every call goes through libfabric's
 * own inline wrappers and operation tables, as any application's would.
 *
 * Prints one line per step and "ok" at the end; exits 1 at the first check that fails. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_errno.h>

#include "check.h"

#define ADDR_LEN 32

static struct fi_info *getinfo(uint32_t addr_format, uint64_t caps)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	CHECK(hints);
	hints->fabric_attr->prov_name = strdup("uet");
	hints->addr_format = addr_format;
	hints->caps = caps;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->av_type = FI_AV_TABLE;
	int ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
	fi_freeinfo(hints);
	if (ret) {
		CHECK(!info);
		return NULL;
	}
	return info;
}

static void binary_av(void)
{
	struct fi_info *info = getinfo(FI_FORMAT_UNSPEC, FI_AV_USER_ID);
	CHECK(info);
	CHECK(!info->next);
	CHECK(strcmp(info->fabric_attr->prov_name, "uet") == 0);
	CHECK(strcmp(info->fabric_attr->name, "uet") == 0);
	CHECK(strcmp(info->domain_attr->name, "uet_10.0.0.1") == 0);
	CHECK(info->domain_attr->av_type == FI_AV_TABLE);
	CHECK(info->domain_attr->threading == FI_THREAD_SAFE);
	CHECK(info->ep_attr->type == FI_EP_RDM);
	CHECK(info->domain_attr->ep_cnt > 0);
	printf("getinfo: %s %s ep_cnt %zu\n", info->fabric_attr->prov_name,
	       info->domain_attr->name, info->domain_attr->ep_cnt);

	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	CHECK_RET(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	CHECK_RET(fi_domain(fabric, info, &domain, NULL), 0);

	struct fi_av_attr attr = { .type = FI_AV_TABLE, .count = 64 };
	int context = 42;
	CHECK_RET(fi_av_open(domain, &attr, &av, &context), 0);
	CHECK(av->fid.context == &context);
	CHECK(av->fid.fclass == FI_CLASS_AV);

	/* insertsvc: an IP address and a PIDonFEP; the lowest free index. */
	fi_addr_t a0 = 99, a1 = 99;
	CHECK_RET(fi_av_insertsvc(av, "10.0.0.2", "7", &a0, 0, NULL), 1);
	CHECK_RET(fi_av_insertsvc(av, "10.0.0.3", "9", &a1, 0, NULL), 1);
	CHECK(a0 == 0 && a1 == 1);

	/* lookup: the 32-byte address, addrlen in/out, truncation. */
	uint8_t addrs[3][ADDR_LEN];
	size_t len = ADDR_LEN;
	CHECK_RET(fi_av_lookup(av, a0, addrs[0], &len), 0);
	CHECK(len == ADDR_LEN);
	len = ADDR_LEN;
	CHECK_RET(fi_av_lookup(av, a1, addrs[1], &len), 0);
	uint8_t small[4] = { 0 };
	len = sizeof(small);
	CHECK_RET(fi_av_lookup(av, a1, small, &len), 0);
	CHECK(len == ADDR_LEN);
	CHECK(memcmp(small, addrs[1], sizeof(small)) == 0);
	len = 0;
	CHECK_RET(fi_av_lookup(av, a1, NULL, &len), 0);
	CHECK(len == ADDR_LEN);

	/* straddr: the string insertsvc would take back; len in/out, truncation. */
	char buf[128];
	len = sizeof(buf);
	CHECK(fi_av_straddr(av, addrs[0], buf, &len) == buf);
	CHECK(strstr(buf, "10.0.0.2") != NULL);
	CHECK(len == strlen(buf) + 1);
	printf("straddr: %s\n", buf);
	char tiny[8];
	size_t full = len;
	len = sizeof(tiny);
	CHECK(fi_av_straddr(av, addrs[0], tiny, &len) == tiny);
	CHECK(len == full);
	CHECK(tiny[sizeof(tiny) - 1] == '\0');

	/* insert: two good addresses and a malformed one, with FI_SYNC_ERR. */
	memset(addrs[2], 0, ADDR_LEN);
	fi_addr_t out[3];
	int status[3] = { -1, -1, -1 };
	CHECK_RET(fi_av_insert(av, addrs, 3, out, FI_SYNC_ERR, status), 2);
	CHECK(out[0] == 2 && out[1] == 3 && out[2] == FI_ADDR_NOTAVAIL);
	CHECK(status[0] == 0 && status[1] == 0 && status[2] != 0);
	printf("insert: %" PRIu64 " %" PRIu64 " notavail, status %d\n", out[0], out[1], status[2]);
	/* A NULL fi_addr array is allowed. */
	CHECK_RET(fi_av_insert(av, addrs, 1, NULL, 0, NULL), 1);
	/* FI_SYNC_ERR needs its status array. */
	CHECK_RET(fi_av_insert(av, addrs, 1, NULL, FI_SYNC_ERR, NULL), -FI_EINVAL);
	/* Unknown flags. */
	CHECK_RET(fi_av_insert(av, addrs, 1, NULL, 1ULL << 30, NULL), -FI_EBADFLAGS);

	/* insertsym: 4 nodes x 2 services, in the documented order, from index 5. */
	fi_addr_t sym[8];
	CHECK_RET(fi_av_insertsym(av, "10.0.1.1", 4, "1", 2, sym, 0, NULL), 8);
	for (int i = 0; i < 8; i++)
		CHECK(sym[i] == (fi_addr_t)(5 + i));
	len = ADDR_LEN;
	uint8_t member[ADDR_LEN];
	CHECK_RET(fi_av_lookup(av, sym[7], member, &len), 0);
	len = sizeof(buf);
	fi_av_straddr(av, member, buf, &len);
	CHECK(strstr(buf, "10.0.1.4") != NULL);
	printf("insertsym: last %s\n", buf);

	/* remove, double remove, lookup of a removed or never-inserted address. */
	CHECK_RET(fi_av_remove(av, &a1, 1, 0), 0);
	CHECK_RET(fi_av_remove(av, &a1, 1, 0), -FI_EINVAL);
	len = ADDR_LEN;
	CHECK_RET(fi_av_lookup(av, a1, member, &len), -FI_EINVAL);
	CHECK_RET(fi_av_lookup(av, 63, member, &len), -FI_EINVAL);
	CHECK_RET(fi_av_lookup(av, FI_ADDR_NOTAVAIL, member, &len), -FI_EINVAL);
	/* The freed index is the lowest unused one again. */
	fi_addr_t again;
	CHECK_RET(fi_av_insert(av, addrs[1], 1, &again, 0, NULL), 1);
	CHECK(again == a1);

	/* Attribute errors at open. */
	struct fid_av *bad;
	struct fi_av_attr type = { .type = 7, .count = 8 };
	CHECK_RET(fi_av_open(domain, &type, &bad, NULL), -FI_EINVAL);
	struct fi_av_attr bits = { .type = FI_AV_TABLE, .count = 8, .rx_ctx_bits = -1 };
	CHECK_RET(fi_av_open(domain, &bits, &bad, NULL), -FI_EINVAL);

	/* Closing in the wrong order is refused and loses nothing. */
	CHECK_RET(fi_close(&domain->fid), -FI_EBUSY);
	CHECK_RET(fi_close(&fabric->fid), -FI_EBUSY);
	len = ADDR_LEN;
	CHECK_RET(fi_av_lookup(av, a0, member, &len), 0);
	CHECK(memcmp(member, addrs[0], ADDR_LEN) == 0);

	CHECK_RET(fi_close(&av->fid), 0);
	CHECK_RET(fi_close(&domain->fid), 0);
	CHECK_RET(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	printf("binary AV: ok\n");
}

static void string_av(void)
{
	struct fi_info *info = getinfo(FI_ADDR_STR, 0);
	CHECK(info);
	CHECK(info->addr_format == FI_ADDR_STR);
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	CHECK_RET(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	CHECK_RET(fi_domain(fabric, info, &domain, NULL), 0);
	struct fi_av_attr attr = { .type = FI_AV_TABLE, .count = 16 };
	CHECK_RET(fi_av_open(domain, &attr, &av, NULL), 0);

	/* Take the string form of one address from insertsvc and straddr... */
	fi_addr_t a;
	CHECK_RET(fi_av_insertsvc(av, "10.0.0.5", "3", &a, 0, NULL), 1);
	char first[128];
	size_t len = sizeof(first);
	CHECK_RET(fi_av_lookup(av, a, first, &len), 0);
	CHECK(len == strlen(first) + 1);
	printf("string lookup: %s\n", first);

	/* ...and insert it back as an FI_ADDR_STR address, beside a malformed one. */
	const char *strs[2] = { first, "not an address" };
	fi_addr_t out[2];
	CHECK_RET(fi_av_insert(av, strs, 2, out, 0, NULL), 1);
	CHECK(out[0] == 1 && out[1] == FI_ADDR_NOTAVAIL);
	char back[128];
	len = sizeof(back);
	CHECK_RET(fi_av_lookup(av, out[0], back, &len), 0);
	CHECK(strcmp(first, back) == 0);

	CHECK_RET(fi_close(&av->fid), 0);
	CHECK_RET(fi_close(&domain->fid), 0);
	CHECK_RET(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	printf("string AV: ok\n");
}

static void node_and_service(void)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	CHECK(hints);
	hints->fabric_attr->prov_name = strdup("uet");

	/* A destination: its UET address in dest_addr. */
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), "10.0.0.2", "7", 0, hints, &info), 0);
	CHECK(info->dest_addrlen == ADDR_LEN && info->dest_addr && !info->src_addr);
	CHECK(info->domain_attr->mr_mode == 0);
	/* The same address given in the hints comes back; as a source it is not this NIC's. */
	uint8_t dest[ADDR_LEN];
	memcpy(dest, info->dest_addr, ADDR_LEN);
	fi_freeinfo(info);
	info = NULL;
	hints->dest_addr = malloc(ADDR_LEN);
	CHECK(hints->dest_addr);
	memcpy(hints->dest_addr, dest, ADDR_LEN);
	hints->dest_addrlen = ADDR_LEN;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), 0);
	CHECK(info->dest_addrlen == ADDR_LEN && memcmp(info->dest_addr, dest, ADDR_LEN) == 0);
	fi_freeinfo(info);
	info = NULL;
	hints->src_addr = hints->dest_addr;
	hints->src_addrlen = ADDR_LEN;
	hints->dest_addr = NULL;
	hints->dest_addrlen = 0;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), -FI_ENODATA);
	free(hints->src_addr);
	hints->src_addr = NULL;
	hints->src_addrlen = 0;
	hints->tx_attr->iov_limit = 1000;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), -FI_ENODATA);
	hints->tx_attr->iov_limit = 0;
	hints->rx_attr->caps = FI_RMA;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), -FI_ENODATA);
	hints->rx_attr->caps = 0;
	/* The domain's auth key is a JobID: 4 bytes, 24 bits. The answer carries it, and a
	 * domain and an AV open with it. */
	uint32_t job = 7;
	hints->domain_attr->auth_key = malloc(4);
	CHECK(hints->domain_attr->auth_key);
	memcpy(hints->domain_attr->auth_key, &job, 4);
	hints->domain_attr->auth_key_size = 4;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), 0);
	CHECK(info->domain_attr->auth_key_size == 4);
	CHECK(memcmp(info->domain_attr->auth_key, &job, 4) == 0);
	{
		struct fid_fabric *fabric;
		struct fid_domain *domain;
		struct fid_av *av;
		struct fi_av_attr attr = { .type = FI_AV_TABLE, .count = 4 };
		CHECK_RET(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
		CHECK_RET(fi_domain(fabric, info, &domain, NULL), 0);
		CHECK_RET(fi_av_open(domain, &attr, &av, NULL), 0);
		CHECK_RET(fi_close(&av->fid), 0);
		CHECK_RET(fi_close(&domain->fid), 0);
		CHECK_RET(fi_close(&fabric->fid), 0);
	}
	fi_freeinfo(info);
	info = NULL;
	job = 1u << 24;
	memcpy(hints->domain_attr->auth_key, &job, 4);
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), -FI_ENODATA);
	hints->domain_attr->auth_key_size = 3;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), -FI_ENODATA);
	free(hints->domain_attr->auth_key);
	hints->domain_attr->auth_key = NULL;
	hints->domain_attr->auth_key_size = 0;
	/* A source must be this NIC. */
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), "10.0.0.1", "7", FI_SOURCE, hints, &info), 0);
	CHECK(info->src_addrlen == ADDR_LEN && info->src_addr && !info->dest_addr);
	fi_freeinfo(info);
	info = NULL;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), "10.0.0.9", "7", FI_SOURCE, hints, &info),
		  -FI_ENODATA);
	/* A service is a PIDonFEP (the provider's -FI_EINVAL; libfabric reports that no provider
	 * answered). */
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), "10.0.0.2", "http", 0, hints, &info), -FI_ENODATA);
	/* Hints the provider cannot meet. */
	hints->ep_attr->type = FI_EP_SOCK_STREAM;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), -FI_ENODATA);
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->ep_cnt = 1000000;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), -FI_ENODATA);
	hints->domain_attr->ep_cnt = 0;
	hints->domain_attr->name = strdup("mlx5_0");
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), -FI_ENODATA);
	fi_freeinfo(hints);
	printf("node and service: ok\n");
}

/* A named AV, opened twice: what one handle inserts, the other finds at the same fi_addr_t;
 * FI_READ opens it read-only. */
static void named_av(void)
{
	struct fi_info *info = getinfo(FI_FORMAT_UNSPEC, FI_SHARED_AV);
	CHECK(info);
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *writer, *reader;
	CHECK_RET(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	CHECK_RET(fi_domain(fabric, info, &domain, NULL), 0);
	char name[64];
	snprintf(name, sizeof(name), "uet-provider-test-%d", (int)getpid());
	struct fi_av_attr attr = { .type = FI_AV_TABLE, .count = 32, .name = name };
	CHECK_RET(fi_av_open(domain, &attr, &writer, NULL), 0);
	CHECK(attr.map_addr == NULL);
	/* A map_addr given is left as it is; the fi_addr_t values are the same. */
	void *base = (void *)0x10000000;
	struct fi_av_attr ro = { .type = FI_AV_TABLE, .count = 32, .name = name, .map_addr = base,
				 .flags = FI_READ };
	CHECK_RET(fi_av_open(domain, &ro, &reader, NULL), 0);
	CHECK(ro.map_addr == base);

	fi_addr_t a;
	CHECK_RET(fi_av_insertsvc(writer, "10.0.2.1", "5", &a, 0, NULL), 1);
	uint8_t w[ADDR_LEN], r[ADDR_LEN];
	size_t len = ADDR_LEN;
	CHECK_RET(fi_av_lookup(writer, a, w, &len), 0);
	len = ADDR_LEN;
	CHECK_RET(fi_av_lookup(reader, a, r, &len), 0);
	CHECK(memcmp(w, r, ADDR_LEN) == 0);
	CHECK(fi_av_insertsvc(reader, "10.0.2.2", "5", &a, 0, NULL) < 0);
	CHECK(fi_av_remove(reader, &a, 1, 0) < 0);

	CHECK_RET(fi_close(&reader->fid), 0);
	CHECK_RET(fi_close(&writer->fid), 0);
	CHECK_RET(fi_close(&domain->fid), 0);
	CHECK_RET(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	printf("named AV: ok\n");
}

/* FI_EVENT: inserts complete on an event queue bound with fi_av_bind; one error entry per
 * failed address (its position in data), then FI_AV_COMPLETE with the success count. */
static void event_av(void)
{
	struct fi_info *info = getinfo(FI_FORMAT_UNSPEC, 0);
	CHECK(info);
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av, *plain;
	struct fid_eq *eq;
	CHECK_RET(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	CHECK_RET(fi_domain(fabric, info, &domain, NULL), 0);
	struct fi_eq_attr eq_attr = { .size = 16, .wait_obj = FI_WAIT_UNSPEC, .flags = FI_WRITE };
	CHECK_RET(fi_eq_open(fabric, &eq_attr, &eq, NULL), 0);
	struct fi_eq_attr pollfd_attr = { .wait_obj = FI_WAIT_POLLFD };
	struct fid_eq *bad_eq;
	CHECK_RET(fi_eq_open(fabric, &pollfd_attr, &bad_eq, NULL), -FI_ENOSYS);

	struct fi_av_attr attr = { .type = FI_AV_TABLE, .count = 16, .flags = FI_EVENT };
	CHECK_RET(fi_av_open(domain, &attr, &av, NULL), 0);
	/* Inserting before the bind, and FI_SYNC_ERR with FI_EVENT, are refused. */
	fi_addr_t a;
	CHECK_RET(fi_av_insertsvc(av, "10.0.3.1", "1", &a, 0, NULL), -FI_ENOEQ);
	CHECK_RET(fi_av_bind(av, &eq->fid, 0), 0);
	/* A bind to something that is not an EQ is refused. */
	struct fi_av_attr plain_attr = { .type = FI_AV_TABLE, .count = 4 };
	CHECK_RET(fi_av_open(domain, &plain_attr, &plain, NULL), 0);
	CHECK_RET(fi_av_bind(plain, &domain->fid, 0), -FI_EINVAL);
	CHECK_RET(fi_close(&plain->fid), 0);

	uint8_t addrs[3][ADDR_LEN];
	size_t len;
	fi_addr_t one;
	struct fid_av *helper;
	struct fi_av_attr helper_attr = { .type = FI_AV_TABLE, .count = 4 };
	CHECK_RET(fi_av_open(domain, &helper_attr, &helper, NULL), 0);
	CHECK_RET(fi_av_insertsvc(helper, "10.0.3.1", "1", &one, 0, NULL), 1);
	len = ADDR_LEN;
	CHECK_RET(fi_av_lookup(helper, one, addrs[0], &len), 0);
	CHECK_RET(fi_av_insertsvc(helper, "10.0.3.2", "1", &one, 0, NULL), 1);
	len = ADDR_LEN;
	CHECK_RET(fi_av_lookup(helper, one, addrs[2], &len), 0);
	CHECK_RET(fi_close(&helper->fid), 0);
	memset(addrs[1], 0, ADDR_LEN);

	int status[3];
	fi_addr_t out[3];
	CHECK_RET(fi_av_insert(av, addrs, 3, out, FI_SYNC_ERR | FI_EVENT, status), -FI_EBADFLAGS);
	int context = 7;
	CHECK_RET(fi_av_insert(av, addrs, 3, out, 0, &context), 0);

	uint32_t event;
	struct fi_eq_entry entry;
	/* The error comes first: read says so, readerr gives it. */
	ssize_t ret = fi_eq_sread(eq, &event, &entry, sizeof(entry), 2000, 0);
	CHECK_RET(ret, -FI_EAVAIL);
	char message[256] = { 0 };
	struct fi_eq_err_entry err = { .err_data = message, .err_data_size = sizeof(message) - 1 };
	CHECK_RET(fi_eq_readerr(eq, &err, 0), sizeof(err));
	CHECK(err.fid == &av->fid);
	CHECK(err.context == &context);
	CHECK(err.data == 1);
	CHECK(err.err > 0);
	CHECK(err.err_data == message && err.err_data_size > 0);
	printf("event error: %s (%s)\n", fi_strerror(err.err), message);
	CHECK(fi_eq_strerror(eq, err.prov_errno, err.err_data, NULL, 0) != NULL);
	/* A buffer too small for an entry leaves the event queued. */
	CHECK_RET(fi_eq_read(eq, &event, &entry, 4, 0), -FI_ETOOSMALL);
	CHECK_RET(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), sizeof(entry));
	CHECK(event == FI_AV_COMPLETE);
	CHECK(entry.fid == &av->fid);
	CHECK(entry.context == &context);
	CHECK(entry.data == 2);
	CHECK(out[0] == 0 && out[1] == FI_ADDR_NOTAVAIL && out[2] == 1);
	CHECK_RET(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), -FI_EAGAIN);
	CHECK_RET(fi_eq_sread(eq, &event, &entry, sizeof(entry), 10, 0), -FI_EAGAIN);

	/* An application's own event. */
	struct fi_eq_entry mine = { .fid = &eq->fid, .context = &context, .data = 99 };
	CHECK_RET(fi_eq_write(eq, FI_NOTIFY, &mine, sizeof(mine), 0), sizeof(mine));
	CHECK_RET(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), sizeof(entry));
	CHECK(event == FI_NOTIFY && entry.fid == &eq->fid && entry.data == 99);
	/* A connection event longer than any buffer can be (a negative length passed as a
	 * size_t) is refused, not read. */
	struct fi_eq_cm_entry cm = { .fid = &eq->fid };
	CHECK_RET(fi_eq_write(eq, FI_CONNECTED, &cm, SIZE_MAX, 0), -FI_EINVAL);
	CHECK_RET(fi_eq_write(eq, FI_CONNECTED, &cm, (size_t)-8, 0), -FI_EINVAL);
	CHECK_RET(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), -FI_EAGAIN);

	/* The queue stays while the AV is bound to it. */
	CHECK_RET(fi_close(&eq->fid), -FI_EBUSY);
	/* An FI_MORE insert still unsent when the AV closes fails then; its events, read after
	 * the close, name the AV as the application knew it (compared, not dereferenced). */
	const struct fid *closed = &av->fid;
	int last = 8;
	CHECK_RET(fi_av_insert(av, addrs, 1, out, FI_MORE, &last), 0);
	CHECK_RET(fi_close(&av->fid), 0);
	CHECK_RET(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), -FI_EAVAIL);
	CHECK_RET(fi_eq_readerr(eq, &err, 0), sizeof(err));
	CHECK(err.fid == closed && err.context == &last && err.err == FI_ECANCELED);
	CHECK_RET(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), sizeof(entry));
	CHECK(event == FI_AV_COMPLETE && entry.fid == closed && entry.data == 0);
	CHECK_RET(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), -FI_EAGAIN);
	CHECK_RET(fi_close(&eq->fid), 0);
	CHECK_RET(fi_close(&domain->fid), 0);
	CHECK_RET(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	printf("event AV: ok\n");
}

/* AV sets: a strided range, inserts, union/intersect/diff with fi_av_set(3)'s rules, the
 * collective address, and the AV kept open while a set of it is. */
static void av_sets(void)
{
	struct fi_info *info = getinfo(FI_FORMAT_UNSPEC, 0);
	CHECK(info);
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_av_set *a, *b, *bad;
	CHECK_RET(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	CHECK_RET(fi_domain(fabric, info, &domain, NULL), 0);
	struct fi_av_attr attr = { .type = FI_AV_TABLE, .count = 16 };
	CHECK_RET(fi_av_open(domain, &attr, &av, NULL), 0);
	fi_addr_t peers[6];
	CHECK_RET(fi_av_insertsym(av, "10.0.4.1", 6, "1", 1, peers, 0, NULL), 6);

	/* {0, 2, 4} */
	struct fi_av_set_attr range = {
		.count = 16, .start_addr = 0, .end_addr = 4, .stride = 2,
	};
	CHECK_RET(fi_av_set(av, &range, &a, NULL), 0);
	CHECK(a->fid.fclass == FI_CLASS_AV_SET);
	/* [4, 1, 2] */
	struct fi_av_set_attr empty = {
		.count = 16, .start_addr = FI_ADDR_NOTAVAIL, .end_addr = FI_ADDR_NOTAVAIL,
	};
	CHECK_RET(fi_av_set(av, &empty, &b, NULL), 0);
	CHECK_RET(fi_av_set_insert(b, 4), 0);
	CHECK_RET(fi_av_set_insert(b, 1), 0);
	CHECK_RET(fi_av_set_insert(b, 2), 0);
	CHECK_RET(fi_av_set_insert(b, 2), -FI_EINVAL);
	CHECK_RET(fi_av_set_insert(b, 9), -FI_EINVAL);

	/* a = {0, 2, 4, 1} */
	CHECK_RET(fi_av_set_union(a, b), 0);
	CHECK_RET(fi_av_set_insert(a, 1), -FI_EINVAL);
	/* a = {0} */
	CHECK_RET(fi_av_set_diff(a, b), 0);
	CHECK_RET(fi_av_set_remove(a, 2), -FI_EINVAL);
	CHECK_RET(fi_av_set_insert(a, 2), 0);
	/* b = {2} */
	CHECK_RET(fi_av_set_intersect(b, a), 0);
	CHECK_RET(fi_av_set_remove(b, 4), -FI_EINVAL);
	CHECK_RET(fi_av_set_remove(b, 2), 0);
	CHECK_RET(fi_av_set_insert(b, 3), 0);
	/* A set combined with itself. */
	CHECK_RET(fi_av_set_union(a, a), 0);
	CHECK_RET(fi_av_set_insert(a, 0), -FI_EINVAL);
	fi_addr_t coll;
	CHECK_RET(fi_av_set_addr(a, &coll), 0);
	CHECK(coll != FI_ADDR_NOTAVAIL);
	CHECK_RET(fi_av_set_diff(b, b), 0);
	CHECK_RET(fi_av_set_insert(b, 3), 0);

	/* Attribute errors. */
	struct fi_av_set_attr flags = { .count = 4, .start_addr = FI_ADDR_NOTAVAIL,
					.end_addr = FI_ADDR_NOTAVAIL, .flags = 1ULL << 30 };
	CHECK_RET(fi_av_set(av, &flags, &bad, NULL), -FI_EBADFLAGS);
	struct fi_av_set_attr backwards = { .count = 4, .start_addr = 3, .end_addr = 1,
					    .stride = 1 };
	CHECK_RET(fi_av_set(av, &backwards, &bad, NULL), -FI_EINVAL);
	CHECK_RET(fi_av_set_union(a, (struct fid_av_set *)av), -FI_EINVAL);

	/* The AV stays while its sets are open. */
	CHECK_RET(fi_close(&av->fid), -FI_EBUSY);
	CHECK_RET(fi_close(&a->fid), 0);
	CHECK_RET(fi_close(&b->fid), 0);
	CHECK_RET(fi_close(&av->fid), 0);
	CHECK_RET(fi_close(&domain->fid), 0);
	CHECK_RET(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	printf("AV sets: ok\n");
}

/* libfabric's utility providers do not layer an RDM of their own on the provider's datagram
 * or connected endpoints: every answer naming the uet fabric is the provider's own. */
static void no_layered_providers(void)
{
	struct fi_info *info = NULL;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, NULL, &info), 0);
	int ours = 0;
	for (struct fi_info *i = info; i; i = i->next) {
		if (strcmp(i->fabric_attr->name, "uet") != 0)
			continue;
		CHECK(strcmp(i->fabric_attr->prov_name, "uet") == 0);
		ours++;
	}
	CHECK(ours >= 2);
	fi_freeinfo(info);
	struct fi_info *hints = fi_allocinfo();
	CHECK(hints);
	hints->fabric_attr->prov_name = strdup("uet;ofi_rxd");
	info = NULL;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), -FI_ENODATA);
	CHECK(!info);
	fi_freeinfo(hints);
	printf("no layered providers: ok\n");
}

int main(void)
{
	/* Capabilities the provider does not serve are not offered. */
	CHECK(getinfo(FI_FORMAT_UNSPEC, FI_MSG | FI_RMA) == NULL);
	no_layered_providers();
	binary_av();
	string_av();
	node_and_service();
	named_av();
	event_av();
	av_sets();
	printf("ok\n");
	return 0;
}
