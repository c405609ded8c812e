/* hilock: the counting semaphore.
 *
 * At most `limit` holders at any instant, across every process. Each
 * permit has an id of its own (128 random bits, fresh for every grant) and
 * its own expiry on the server's clock, kept in the sorted set
 * hilock:{name}:permits {permit id -> expiry in ms}. A holder that dies
 * frees its permit when its TTL runs out: no permit is ever leaked, unlike
 * an INCR/DECR counter. Every script purges expired permits first, so the
 * count of live permits is always judged with Redis's own TIME.
 *
 * The limit lives in hilock:{name}:limit. The first acquire stores the
 * handle's `permits` if no limit is stored yet; after that the stored limit
 * wins over any handle's `permits`, until an operator changes it with
 * hilock_semaphore_set_limit (or deletes the key).
 *
 * Verbs: hilock_hold_try_acquire, _acquire, _release and _renew
 * (hilock/hold.h) on HILOCK_HOLD(sem), for one permit: HILOCK_BUSY when
 * none is free; a grant is named by hilock_hold_token (permits carry no
 * fence). release gives the permit back and wakes one waiter. renew moves
 * the permit's expiry to now + ttl (server clock), only while it is live;
 * an expired permit is never revived (HILOCK_ENOTOWNED). extend is
 * HILOCK_ENOTSUP.
 *
 * A handle stands for one holder of one permit: to hold two permits, use
 * two handles (they may share the client). Use a handle from one thread at
 * a time.
 *
 * Waiting: a blocked acquire sleeps on the semaphore's wake list; a release
 * wakes one waiter, and a raised limit as many as there are new free
 * permits. Every sleep is bounded by the time until the first held permit
 * expires and by the caller's deadline.
 *
 * Renewal: as for locks, hilock_hold_set_auto_renew keeps a permit
 * alive through the client's watchdog (its expiry moves to now + ttl every
 * ttl/3); a permit that cannot be renewed is reported lost.
 *
 * Fork: a permit belongs to the process that acquired it; in a forked child
 * release and renew return HILOCK_EFORKED and touch nothing. */
#ifndef HILOCK_SEMAPHORE_H
#define HILOCK_SEMAPHORE_H

#include <stdint.h>
#include <stddef.h>

#include "hilock/client.h"
#include "hilock/export.h"
#include "hilock/hold.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest limit (and constructor permit count) accepted. */
#define HILOCK_PERMITS_MAX ((int64_t)1 << 31)

typedef struct hilock_semaphore hilock_semaphore;

/* CONSTRUCTOR, as every family's (hold.h; EINVAL's message is in
 * hilock_client_errmsg). permits in 1..HILOCK_PERMITS_MAX is the limit this
 * handle stores if none is stored yet; ttl_ms is each grant's lifetime
 * unless renewed. */
HILOCK_API int hilock_semaphore_new(hilock_client *client, const char *name,
                                    size_t namelen, int64_t permits,
                                    int64_t ttl_ms, hilock_semaphore **out);

/* Round trip: free permits now, max(0, limit - live permits). */
HILOCK_API int hilock_semaphore_available(hilock_semaphore *sem,
                                          int64_t *available);

/* Round trip: the limit in force, i.e. the stored one, or this handle's
 * permits if none is stored yet. stored (may be NULL) = 1 if stored. */
HILOCK_API int hilock_semaphore_limit(hilock_semaphore *sem,
                                          int64_t *limit, int *stored);

/* Operator: store a new limit, 0..HILOCK_PERMITS_MAX (0 closes the
 * semaphore to new holders). Holders keep their permits: a lower limit
 * takes effect as they release; a higher one wakes waiters at once. */
HILOCK_API int hilock_semaphore_set_limit(hilock_semaphore *sem,
                                          int64_t limit);

/* The constructor's permits and ttl_ms. */
HILOCK_API int64_t hilock_semaphore_permits(const hilock_semaphore *sem);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_SEMAPHORE_H */
