/* check.h - the assertion the C test drivers and fuzz targets share: unlike
 * assert(), it stays on in every build and names the failing expression. */
#ifndef PLB_TEST_CHECK_H
#define PLB_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__,  \
				__LINE__, #cond);                              \
			abort();                                               \
		}                                                              \
	} while (0)

#endif
