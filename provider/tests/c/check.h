/* The checks of the provider's C test programs: each failure names its file, line and
 * expression (and for a call, what it returned) and exits 1. And the hints and fi_getinfo
 * call every program starts with. */

#ifndef UET_PROVIDER_TEST_CHECK_H
#define UET_PROVIDER_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#define CHECK(cond)                                                                 \
	do {                                                                            \
		if (!(cond)) {                                                              \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			exit(1);                                                                \
		}                                                                           \
	} while (0)

#define CHECK_RET(call, want)                                                       \
	do {                                                                            \
		long got_ = (long)(call);                                                   \
		if (got_ != (long)(want)) {                                                 \
			fprintf(stderr, "%s:%d: %s returned %ld (%s), expected %ld\n", __FILE__,  \
				__LINE__, #call, got_, fi_strerror((int)-got_), (long)(want));     \
			exit(1);                                                                \
		}                                                                           \
	} while (0)

/* Hints naming the uet provider, with `caps` and endpoint type `type`; the caller may set
 * more before passing them to uet_getinfo. */
static inline struct fi_info *uet_hints(uint64_t caps, enum fi_ep_type type)
{
	struct fi_info *hints = fi_allocinfo();
	CHECK(hints);
	hints->fabric_attr->prov_name = strdup("uet");
	hints->caps = caps;
	hints->ep_attr->type = type;
	return hints;
}

/* The provider's answer to `hints` (which it frees), at API version 1.17. */
static inline struct fi_info *uet_getinfo(struct fi_info *hints)
{
	struct fi_info *info = NULL;
	CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), 0);
	fi_freeinfo(hints);
	return info;
}

#endif
