/* hilock internals, never installed. Each layer has a header of its own
 * (docs/design.md draws them), which the sources of core/src include; this
 * one includes them all, for the tests and the fuzz targets. */
#ifndef HILOCK_INTERNAL_H
#define HILOCK_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "hilock/hilock.h"

#include "base.h"
#include "net.h"
#include "fiber.h"
#include "runtime.h"
#include "route.h"
#include "script.h"
#include "wait.h"
#include "holds.h"
#include "family.h"

#endif /* HILOCK_INTERNAL_H */
