/* hilock: version macros and runtime version query. */
#ifndef HILOCK_VERSION_H
#define HILOCK_VERSION_H

#include "hilock/export.h"

#define HILOCK_VERSION_MAJOR 0
#define HILOCK_VERSION_MINOR 1
#define HILOCK_VERSION_PATCH 0

#define HILOCK_STRINGIFY_(x) #x
#define HILOCK_STRINGIFY(x) HILOCK_STRINGIFY_(x)
#define HILOCK_VERSION_STRING                 \
  HILOCK_STRINGIFY(HILOCK_VERSION_MAJOR) "."  \
  HILOCK_STRINGIFY(HILOCK_VERSION_MINOR) "."  \
  HILOCK_STRINGIFY(HILOCK_VERSION_PATCH)
#define HILOCK_VERSION_HEX                    \
  ((HILOCK_VERSION_MAJOR << 16) | (HILOCK_VERSION_MINOR << 8) | HILOCK_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version as HILOCK_VERSION_HEX and as a string; compare with
 * the macros to check that header and library match. */
HILOCK_API unsigned hilock_version(void);
HILOCK_API const char *hilock_version_string(void);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_VERSION_H */
