/* hilock: Redis distributed locks. Umbrella header.
 *
 * Names. A lock type is hilock_ and the name of its Python factory
 * (hilock_lock, hilock_rlock, hilock_semaphore, hilock_fair_lock,
 * hilock_rwlock, hilock_multi_lock, hilock_sequential_lock,
 * hilock_segmented_lock, hilock_redlock); its constructor is
 * hilock_<type>_new, a variant's hilock_<type>_new_<variant>
 * (hilock_lock_new_simple, hilock_lock_new_lease); every other call is
 * hilock_<type>_<verb or noun>, and what every type shares is
 * hilock_hold_* on its hold (hilock/hold.h). The fenced store, which
 * checks a grant's fence on every access to the data it guards, is
 * hilock_store_* (hilock/store.h). A call that asks the server
 * returns a status and writes its answers through out-parameters
 * (hilock_hold_owned(h, &owned)); a local read returns its value
 * (hilock_hold_fence(h)). Counts and indices are size_t.
 *
 * Statuses: HILOCK_OK (0), HILOCK_BUSY and HILOCK_SOLDOUT (ordinary
 * outcomes, > 0), or a negative error (hilock/errors.h); the message of a
 * failure is on the handle or client it concerned. */
#ifndef HILOCK_H
#define HILOCK_H

#include "hilock/version.h"
#include "hilock/errors.h"
#include "hilock/client.h"
#include "hilock/stats.h"
#include "hilock/hold.h"
/* BEGIN generated families: headers */
#include "hilock/lock.h"
#include "hilock/rlock.h"
#include "hilock/semaphore.h"
#include "hilock/fair_lock.h"
#include "hilock/rwlock.h"
#include "hilock/multi_lock.h"
#include "hilock/sequential_lock.h"
#include "hilock/segmented_lock.h"
#include "hilock/redlock.h"
#include "hilock/election.h"
#include "hilock/latch.h"
#include "hilock/barrier.h"
/* END generated families */
#include "hilock/async.h"
#include "hilock/store.h"
#include "hilock/inspect.h"

#endif /* HILOCK_H */
