/* The checks of the provider's C test programs: each failure names its file, line and
 * expression (and for a call, what it returned) and exits 1. */

#ifndef UET_PROVIDER_TEST_CHECK_H
#define UET_PROVIDER_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

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

#endif
