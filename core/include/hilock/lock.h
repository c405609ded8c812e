/* hilock: the exclusive lock family (simple, expiring, lease).
 *
 * All three share one handle type and one set of verbs:
 *   simple    SET-if-absent with no expiry. A holder that dies keeps it held
 *             until an operator calls hilock_lock_force_release: deadlock risk.
 *   expiring  SET NX PX: the key expires after ttl_ms unless released.
 *   lease     an expiring lock meant to be renewed (hilock_hold_extend).
 *
 * Every grant carries a fencing token: a strictly increasing 64-bit number per
 * lock name, drawn by INCR in the same script as the grant. Pass it to the
 * protected resource and let it reject any token lower than one it has seen.
 *
 * Verbs: those of every family, on the lock's hold (hilock/hold.h):
 * hilock_hold_try_acquire(HILOCK_HOLD(lock)), hilock_hold_acquire,
 * _release, _extend and _renew; extend and renew are HILOCK_ENOTSUP for a
 * simple lock. Release, extend and owned are checked against the holder's
 * owner token (128 random bits, fresh for every grant), so a stale holder
 * can never release or extend someone else's lock.
 *
 * Lock delay (Chubby's, Consul's; hilock_hold_set_lock_delay): when a grant
 * ends without its holder's release (the TTL ran out, the holder was lost
 * or killed, an operator's force release), the name is granted to no one
 * for the delay after that; a release frees it at once. Each grant and
 * renewal writes the marker key hilock:{name}:delay with a TTL of the
 * lock's TTL plus the delay, the release deletes it, and an acquire refuses
 * while only the marker is there (a waiter sleeps its remaining TTL). Every
 * acquire honours the marker, whether its own handle has a delay or not. A
 * simple lock takes none (HILOCK_EINVAL).
 *
 * Names are binary safe (pointer + length, NUL bytes allowed), 1 to
 * HILOCK_NAME_MAX bytes, and may not begin with '}' (see the key layout).
 *
 * Waiting: a blocked acquire sleeps on the lock's wake list until the
 * holder's release wakes it (one waiter per release), bounded by the
 * holder's remaining TTL and the caller's deadline.
 *
 * Threads: a lock handle stands for one holder; use it from one thread at a
 * time. Many handles, in many threads, may share one client.
 *
 * Fork: a grant belongs to the process that acquired it; in a forked child
 * release, extend and renew return HILOCK_EFORKED and touch nothing. */
#ifndef HILOCK_LOCK_H
#define HILOCK_LOCK_H

#include <stdint.h>
#include <stddef.h>

#include "hilock/client.h"
#include "hilock/export.h"
#include "hilock/hold.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What every lock shares (fence, token, validity, loss, auto-renewal,
 * owned, locked, errors, free) is on its hold: HILOCK_HOLD(lock), see
 * hilock/hold.h. */
typedef struct hilock_lock hilock_lock;

typedef enum hilock_lock_kind {
  HILOCK_LOCK_SIMPLE = 0,
  HILOCK_LOCK_EXPIRING = 1,
  HILOCK_LOCK_LEASE = 2,
  /* redis-py's layout (docs/migration.md): the same lock as redis-py's
   * redis.lock.Lock named name, so Python services on redis-py and this
   * handle exclude each other. The key is name as given (no prefix),
   * holding the owner token with its PX expiry; no fence (0), no lock
   * delay; a release by redis-py is noticed by hilock's waiters within
   * 100 ms (a release by hilock at once). Expires and renews as an
   * expiring lock; ttl_ms 0 is a lock without expiry (redis-py's
   * timeout=None). */
  HILOCK_LOCK_REDIS_PY = 3
} hilock_lock_kind;

/* CONSTRUCTOR, as every family's (hold.h), for a lock of kind; a simple
 * lock takes no TTL (ttl_ms 0, else HILOCK_EINVAL), as does a kind that is
 * none of the three. */
HILOCK_API int hilock_lock_new_kind(hilock_client *client, const char *name,
                                    size_t namelen, hilock_lock_kind kind,
                                    int64_t ttl_ms, hilock_lock **out);
/* The same for each kind: an expiring lock, a simple one, a lease. */
static inline int hilock_lock_new(hilock_client *client, const char *name,
                                  size_t namelen, int64_t ttl_ms,
                                  hilock_lock **out) {
  return hilock_lock_new_kind(client, name, namelen, HILOCK_LOCK_EXPIRING,
                              ttl_ms, out);
}
static inline int hilock_lock_new_simple(hilock_client *client,
                                         const char *name, size_t namelen,
                                         hilock_lock **out) {
  return hilock_lock_new_kind(client, name, namelen, HILOCK_LOCK_SIMPLE, 0,
                              out);
}
static inline int hilock_lock_new_lease(hilock_client *client,
                                        const char *name, size_t namelen,
                                        int64_t ttl_ms, hilock_lock **out) {
  return hilock_lock_new_kind(client, name, namelen, HILOCK_LOCK_LEASE,
                              ttl_ms, out);
}

/* Operator tool: delete the lock whatever its owner (for a simple lock whose
 * holder died). *deleted = 1 if a lock was there; deleted may be NULL. */
HILOCK_API int hilock_lock_force_release(hilock_lock *lock, int *deleted);

/* redis-py's layout only (else HILOCK_EINVAL): the grants to come write
 * the caller's token (1..63 bytes, no NUL; redis-py's acquire(token=)) in
 * place of a random one; len 0 goes back to random ones. Two handles given
 * one token are one owner, as in redis-py (a grant finding its own token
 * in the key is granted). Safe while another thread's acquire of the
 * handle runs: its next attempt writes the new token. */
HILOCK_API int hilock_lock_set_token(hilock_lock *lock, const char *value,
                                     size_t len);

/* The lock's kind. */
HILOCK_API hilock_lock_kind hilock_lock_kind_of(const hilock_lock *lock);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_LOCK_H */
