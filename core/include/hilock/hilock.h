/* hilock: Redis distributed locks. Umbrella header. */
#ifndef HILOCK_H
#define HILOCK_H

#include "hilock/version.h"
#include "hilock/errors.h"
#include "hilock/client.h"
#include "hilock/lock.h"
#include "hilock/rlock.h"
#include "hilock/semaphore.h"
#include "hilock/fair.h"
#include "hilock/rwlock.h"
#include "hilock/multilock.h"
#include "hilock/seqlock.h"
#include "hilock/redlock.h"
#include "hilock/seglock.h"

#endif /* HILOCK_H */
