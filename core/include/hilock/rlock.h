/* hilock: the reentrant lock.
 *
 * The owner is the calling thread of one client: client id (random, new in
 * a forked child) plus the kernel thread id. The same thread re-acquires
 * without blocking and must release as many times; any other thread or
 * process blocks. Hold counts live in a Redis hash, hilock:{name}:rlock
 * {owner -> count}, so re-entry refreshes the TTL and operators can see
 * who holds it how often. The final release deletes it and wakes a waiter.
 *
 * Verbs: hilock_hold_try_acquire, _acquire and _release (hilock/hold.h) on
 * HILOCK_HOLD(rl), per calling thread: acquire and try_acquire re-enter a
 * lock the thread holds; release leaves once, and the last leave frees the
 * lock and wakes a waiter. extend and renew are HILOCK_ENOTSUP (the
 * watchdog renews the hash while any thread holds it).
 *
 * Threads: one handle may be shared by threads; each thread is a separate
 * owner and the handle serialises its local state.
 *
 * Lock delay: hilock_hold_set_lock_delay(HILOCK_HOLD(rl), ms) before the
 * handle acquires (hilock_hold_lock_delay_ms reads it back; HILOCK_EINVAL
 * while held, HILOCK_ENOTSUP on a Redisson-compatible handle). A first
 * entry by the handle then sets hilock:{name}:delay with PX = TTL + delay;
 * re-entries, releases that leave levels and renewals keep it the delay
 * past the hash's TTL, and the final release (or the closing client's
 * drop) deletes it. While it outlives a grant that ended without its final
 * release (expired, holder lost or killed), no owner is granted the lock,
 * whatever its handle's delay: an acquire is HILOCK_BUSY and a waiter
 * sleeps the marker's remaining time. See lock.h. */
#ifndef HILOCK_RLOCK_H
#define HILOCK_RLOCK_H

#include <stdint.h>
#include <stddef.h>

#include "hilock/client.h"
#include "hilock/export.h"
#include "hilock/hold.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hilock_rlock hilock_rlock;

/* CONSTRUCTOR, as every family's (hold.h). */
HILOCK_API int hilock_rlock_new(hilock_client *client, const char *name,
                                size_t namelen, int64_t ttl_ms,
                                hilock_rlock **out);

/* Redisson's lock objects a reentrant lock handle can stand for
 * (docs/redisson.md; each is described at its constructor below). */
typedef enum hilock_redisson_kind {
  HILOCK_REDISSON_LOCK = 0,       /* RLock */
  HILOCK_REDISSON_FAIR_LOCK = 1,  /* RFairLock */
  HILOCK_REDISSON_READ_LOCK = 2,  /* RReadWriteLock's read side */
  HILOCK_REDISSON_WRITE_LOCK = 3  /* RReadWriteLock's write side */
} hilock_redisson_kind;

/* CONSTRUCTOR, Redisson compatibility: a handle on Redisson's object of
 * kind named name (HILOCK_EINVAL for another kind); the four below are
 * this for each kind. */
HILOCK_API int hilock_rlock_new_redisson_kind(hilock_client *client,
                                              const char *name,
                                              size_t namelen,
                                              hilock_redisson_kind kind,
                                              int64_t ttl_ms,
                                              hilock_rlock **out);

/* CONSTRUCTOR, Redisson compatibility (docs/redisson.md): the same lock as
 * Redisson's RLock named name, so Java services on Redisson (tested: 3.52.0)
 * and this handle exclude each other. The key is name as given (no prefix;
 * on a cluster the name carries its own hash tag), releases publish
 * Redisson's unlock message and waiters hear Redisson's; the hold has no
 * fence (hilock_hold_fence gives 0). ttl_ms is the lease (Redisson's
 * default: 30000, renewed every third). Every other hilock_rlock_* and
 * hilock_hold_* call works on it. */
static inline int hilock_rlock_new_redisson(hilock_client *client,
                                            const char *name, size_t namelen,
                                            int64_t ttl_ms,
                                            hilock_rlock **out) {
  return hilock_rlock_new_redisson_kind(client, name, namelen,
                                        HILOCK_REDISSON_LOCK, ttl_ms, out);
}

/* CONSTRUCTOR, Redisson compatibility: Redisson's RFairLock named name, as
 * a reentrant lock handle: waiters of both libraries are served in arrival
 * order; a waiter that died is passed over once its deadline (ttl_ms past
 * the holder's TTL for a hilock waiter; Redisson's wait time for a
 * Redisson one) passes; a hilock waiter whose wait runs out leaves the
 * queue. Waits, blocking and hilock_async ones, hear the release meant for
 * them on their own channel. */
static inline int hilock_rlock_new_redisson_fair(hilock_client *client,
                                                 const char *name,
                                                 size_t namelen,
                                                 int64_t ttl_ms,
                                                 hilock_rlock **out) {
  return hilock_rlock_new_redisson_kind(client, name, namelen,
                                        HILOCK_REDISSON_FAIR_LOCK, ttl_ms,
                                        out);
}

/* CONSTRUCTORS, Redisson compatibility: the read side and the write side of
 * Redisson's RReadWriteLock named name, each as a reentrant lock handle
 * (per thread, as above). Readers of both libraries share; a writer of
 * either excludes every other owner. A writer may also take the read side
 * (a downgrade); a reader asking for the write side waits for itself, as
 * in Redisson. hilock_rlock_hold_count counts the side's own holds. */
static inline int hilock_rlock_new_redisson_read(hilock_client *client,
                                                 const char *name,
                                                 size_t namelen,
                                                 int64_t ttl_ms,
                                                 hilock_rlock **out) {
  return hilock_rlock_new_redisson_kind(client, name, namelen,
                                        HILOCK_REDISSON_READ_LOCK, ttl_ms,
                                        out);
}
static inline int hilock_rlock_new_redisson_write(hilock_client *client,
                                                  const char *name,
                                                  size_t namelen,
                                                  int64_t ttl_ms,
                                                  hilock_rlock **out) {
  return hilock_rlock_new_redisson_kind(client, name, namelen,
                                        HILOCK_REDISSON_WRITE_LOCK, ttl_ms,
                                        out);
}

/* Round trip: the calling thread's hold count (0 if none). (Whether it
 * holds the lock, or anyone does: hilock_hold_owned, hilock_hold_locked.) */
HILOCK_API int hilock_rlock_hold_count(hilock_rlock *rl, int64_t *count);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_RLOCK_H */
