/* hilock: the exclusive lock family (simple, expiring, lease).
 *
 * All three share one handle type and one set of verbs:
 *   simple    SET-if-absent with no expiry. A holder that dies keeps it held
 *             until an operator calls hilock_lock_force_release: deadlock risk.
 *   expiring  SET NX PX: the key expires after ttl_ms unless released.
 *   lease     an expiring lock meant to be renewed (hilock_lock_extend).
 *
 * Every grant carries a fencing token: a strictly increasing 64-bit number per
 * lock name, drawn by INCR in the same script as the grant. Pass it to the
 * protected resource and let it reject any token lower than one it has seen.
 *
 * Release, extend and owned are checked against the holder's owner token
 * (128 random bits, fresh for every grant), so a stale holder can never
 * release or extend someone else's lock.
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

#ifdef __cplusplus
extern "C" {
#endif

#define HILOCK_NAME_MAX 1024
/* Largest TTL accepted, in ms (about 34 years). */
#define HILOCK_TTL_MAX_MS ((int64_t)1 << 40)
/* Smallest TTL accepted, in ms: a grant's validity is its TTL less a
 * clock-drift allowance of 1% + 2 ms, so a shorter TTL would be lost on
 * arrival. */
#define HILOCK_TTL_MIN_MS ((int64_t)10)
/* Wait forever in hilock_lock_acquire. */
#define HILOCK_WAIT_FOREVER ((int64_t)-1)

typedef struct hilock_lock hilock_lock;

typedef enum hilock_lock_kind {
  HILOCK_LOCK_SIMPLE = 0,
  HILOCK_LOCK_EXPIRING = 1,
  HILOCK_LOCK_LEASE = 2
} hilock_lock_kind;

/* CONSTRUCTORS. Make a handle for the named lock; nothing is sent to Redis.
 * ttl_ms must be in HILOCK_TTL_MIN_MS..HILOCK_TTL_MAX_MS. Returns HILOCK_OK,
 * HILOCK_EINVAL, HILOCK_ENOMEM or HILOCK_ECLOSED. */
HILOCK_API int hilock_lock_new(hilock_client *client, const char *name,
                               size_t namelen, int64_t ttl_ms,
                               hilock_lock **out);
HILOCK_API int hilock_simple_lock_new(hilock_client *client, const char *name,
                                      size_t namelen, hilock_lock **out);
HILOCK_API int hilock_lease_new(hilock_client *client, const char *name,
                                size_t namelen, int64_t ttl_ms,
                                hilock_lock **out);

/* DESTRUCTOR. Does not release a held lock (an expiring one lapses by TTL).
 * NULL is a no-op. */
HILOCK_API void hilock_lock_free(hilock_lock *lock);

/* One attempt. HILOCK_OK: granted (see hilock_lock_fence); HILOCK_BUSY: held
 * by someone else. HILOCK_EINVAL if this handle already holds it. */
HILOCK_API int hilock_lock_try_acquire(hilock_lock *lock);

/* Attempt until granted or wait_ms has passed (0: one attempt;
 * HILOCK_WAIT_FOREVER: no limit). Returns HILOCK_OK or HILOCK_BUSY (not
 * granted in time), or an error. */
HILOCK_API int hilock_lock_acquire(hilock_lock *lock, int64_t wait_ms);

/* Owner-checked release in one script. HILOCK_ENOTOWNED if the lock expired
 * or belongs to someone else (nothing is deleted then). */
HILOCK_API int hilock_lock_release(hilock_lock *lock);

/* Set the remaining TTL to ms (replace != 0) or add ms to it (replace == 0),
 * only while still owned; never re-creates an expired key. HILOCK_ENOTOWNED
 * if not owned; HILOCK_ENOTSUP for a simple lock. */
HILOCK_API int hilock_lock_extend(hilock_lock *lock, int64_t ms, int replace);

/* Reset the TTL to the lock's ttl_ms (extend(ttl_ms, replace=1)). */
HILOCK_API int hilock_lock_renew(hilock_lock *lock);

/* Round trip: *owned = 1 if this handle's grant still holds the key. */
HILOCK_API int hilock_lock_owned(hilock_lock *lock, int *owned);

/* Round trip: *locked = 1 if anyone holds the lock. */
HILOCK_API int hilock_lock_locked(hilock_lock *lock, int *locked);

/* Operator tool: delete the lock whatever its owner (for a simple lock whose
 * holder died). *deleted = 1 if a lock was there; deleted may be NULL. */
HILOCK_API int hilock_lock_force_release(hilock_lock *lock, int *deleted);

/* Local, no round trip: ms of validity left for the current grant, measured
 * from before the acquire (or last extend) was sent, less a clock-drift
 * allowance (1% of the TTL + 2 ms). 0 if not held or lapsed; INT64_MAX for a
 * held simple lock. */
HILOCK_API int64_t hilock_lock_validity_ms(const hilock_lock *lock);

/* Whether this handle believes it holds the lock (no round trip). */
HILOCK_API int hilock_lock_held(const hilock_lock *lock);

/* Fencing token of the current or last grant; 0 before the first grant. */
HILOCK_API uint64_t hilock_lock_fence(const hilock_lock *lock);

/* Owner token (32 hex chars) of the current grant, or "" if none. */
HILOCK_API const char *hilock_lock_token(const hilock_lock *lock);

HILOCK_API hilock_lock_kind hilock_lock_get_kind(const hilock_lock *lock);
HILOCK_API int64_t hilock_lock_ttl_ms(const hilock_lock *lock);

/* The Redis key that holds the lock (for operators), and its length. */
HILOCK_API const char *hilock_lock_key(const hilock_lock *lock, size_t *len);

/* Called on the client's renewal thread when a hold is found lost. It must
 * return quickly and must not free or release the lock (hilock_lock_free
 * waits for a running callback to return). */
typedef void (*hilock_lost_fn)(void *arg);

/* Auto-renewal (expiring and lease locks): while held, the client's
 * renewal thread resets the TTL every ttl/3, registered before acquire
 * returns and cancelled before release. If renewal finds the lock owned by
 * someone else, or cannot renew it before its validity runs out, the hold
 * is marked lost (hilock_lock_lost) and on_lost(arg) runs. max_hold_ms > 0
 * stops renewing that long after the grant (the lock then lapses at its
 * TTL and is reported lost). Applies to the current hold too.
 * HILOCK_ENOTSUP for a simple lock. */
HILOCK_API int hilock_lock_set_auto_renew(hilock_lock *lock, int enable,
                                          int64_t max_hold_ms,
                                          hilock_lost_fn on_lost, void *arg);

/* 1 if the current hold was found lost (renewal failed, or owned() or
 * extend() found another owner); cleared by the next grant. */
HILOCK_API int hilock_lock_lost(const hilock_lock *lock);

/* Message and code of this handle's last failed call; never NULL. */
HILOCK_API const char *hilock_lock_errmsg(const hilock_lock *lock);
HILOCK_API int hilock_lock_errcode(const hilock_lock *lock);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_LOCK_H */
