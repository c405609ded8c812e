/* hilock: the read-write lock.
 *
 * Many readers or one writer. The owner of a hold is the calling thread of
 * one client (client id, new in a forked child, plus the kernel thread id),
 * as in the reentrant lock, and both sides are reentrant per thread:
 *
 *   read, read      the second read counts up (no wait, even while a writer
 *                   waits); release as many times.
 *   write, write    the same on the write side.
 *   write, read     a downgrade: the writer's own read is granted at once;
 *                   releasing the write then leaves the read held, with no
 *                   moment in which another writer could get in.
 *   read, write     an upgrade: refused at once with HILOCK_EDEADLK (it
 *                   could only wait for itself). Release the read first.
 *
 * Writer preference, without reader starvation: once a writer waits, new
 * readers queue behind it, so a stream of readers cannot starve a writer.
 * Readers that wait are admitted together at the next write release, ahead
 * of the writers still waiting, so a stream of writers cannot starve
 * readers either (phases alternate: a write, the readers that waited for
 * it, the next write). Waiting writers and readers are members of sorted
 * sets that expire one TTL after their last attempt on server time (a
 * waiter attempts again at least every ttl/3), so a writer that dies while
 * waiting holds readers back, and an admitted reader that dies keeps the
 * next writer out, for at most one TTL. A waiter that gives up withdraws.
 *
 * Expiry: each reader's hold expires on its own, ttl_ms after its grant or
 * last renewal (server time), so a crashed reader frees its share within
 * one TTL; the write hold is a hash with PX = TTL.
 *
 * Waiting: no polling. Readers sleep on the readers' wake list, writers on
 * the writers'. A write release pushes one wake-up per admitted reader, or,
 * with no reader waiting, wakes the next writer; the last reader out wakes
 * a waiting writer. Every sleep is bounded by the blocker's remaining TTL,
 * the waiter's own refresh time (ttl/3) and the caller's deadline.
 *
 * The write side carries a fencing token per grant (shared counter
 * hilock:{name}:fence, as the other lock types); reads carry none.
 *
 * Threads: one handle may be shared by threads; each thread is a separate
 * owner. An on_lost callback must not call into its rwlock handle. Fork:
 * holds taken in the parent refuse to act in a child (HILOCK_EFORKED).
 *
 * Lock delay: hilock_hold_set_lock_delay(HILOCK_HOLD(rw), ms) before the
 * handle acquires (hilock_hold_lock_delay_ms reads it back; HILOCK_EINVAL
 * while its write side is held) is a setting of the handle for its write
 * grants. A write grant sets hilock:{name}:delay with PX = TTL + delay,
 * write re-entries and renewals push it, the last write release deletes
 * it. After a write grant ends without its release (expired, writer lost
 * or killed) neither writers nor new readers are granted until the marker
 * expires, whatever their handle's delay (the lost writer may still be
 * writing): HILOCK_BUSY, and waiters sleep its remaining time (or their
 * ttl/3 refresh). Read holds take no delay: a reader's lapsed grant leaves
 * no marker. See lock.h. */
#ifndef HILOCK_RWLOCK_H
#define HILOCK_RWLOCK_H

#include <stdint.h>
#include <stddef.h>

#include "hilock/client.h"
#include "hilock/export.h"
#include "hilock/hold.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hilock_rwlock hilock_rwlock;

/* CONSTRUCTOR, as every family's (hold.h); ttl_ms applies to read and write
 * holds alike. */
HILOCK_API int hilock_rwlock_new(hilock_client *client, const char *name,
                                 size_t namelen, int64_t ttl_ms,
                                 hilock_rwlock **out);

/* ## Read side (shared) ----------------------------------------------------
 * The verbs of every family (hold.h), per calling thread, reentrant.
 * Acquire is HILOCK_BUSY while a writer holds or waits; with none, it is one
 * round trip. A waiter that gives up withdraws. */
HILOCK_API int hilock_rwlock_read_acquire(hilock_rwlock *rw, int64_t wait_ms);
static inline int hilock_rwlock_read_try_acquire(hilock_rwlock *rw) {
  return hilock_rwlock_read_acquire(rw, 0);
}
/* Leave once; the last reader out wakes a waiting writer. */
HILOCK_API int hilock_rwlock_read_release(hilock_rwlock *rw);
/* Round trip: the calling thread's read hold count (0 if none). */
HILOCK_API int hilock_rwlock_read_hold_count(hilock_rwlock *rw,
                                             int64_t *count);
/* As hilock_hold_set_auto_renew, for every read hold taken through this
 * handle (each thread's hold is renewed on its own). */
HILOCK_API int hilock_rwlock_read_set_auto_renew(hilock_rwlock *rw,
                                                 int enable,
                                                 int64_t max_hold_ms,
                                                 hilock_lost_fn on_lost,
                                                 void *arg);
/* The calling thread's read hold through this handle: lost, local
 * validity (0 if none). */
HILOCK_API int hilock_rwlock_read_lost(hilock_rwlock *rw);
HILOCK_API int64_t hilock_rwlock_read_validity_ms(hilock_rwlock *rw);

/* ## Write side (exclusive) ------------------------------------------------
 * The verbs of every family (hold.h), per calling thread, reentrant.
 * Acquire is HILOCK_EDEADLK if the calling thread holds a read (an upgrade).
 * A waiter that gives up withdraws its intent. */
static inline int hilock_rwlock_write_try_acquire(hilock_rwlock *rw) {
  return hilock_hold_try_acquire(HILOCK_HOLD(rw));
}
static inline int hilock_rwlock_write_acquire(hilock_rwlock *rw,
                                              int64_t wait_ms) {
  return hilock_hold_acquire(HILOCK_HOLD(rw), wait_ms);
}
/* Leave once; the last leave wakes the next writer, or the waiting readers. */
static inline int hilock_rwlock_write_release(hilock_rwlock *rw) {
  return hilock_hold_release(HILOCK_HOLD(rw));
}
/* Round trip: the calling thread's write hold count (0 if none). */
HILOCK_API int hilock_rwlock_write_hold_count(hilock_rwlock *rw,
                                              int64_t *count);

/* ## Both ----------------------------------------------------------------- */

/* Round trip: how many owners hold a live read (readers may be NULL), and
 * whether a writer holds it (writer may be NULL). */
HILOCK_API int hilock_rwlock_state(hilock_rwlock *rw, int64_t *readers,
                                   int *writer);
/* The Redis key of the write hold (write != 0) or of the readers' sorted
 * set (write == 0), and its length. */
HILOCK_API const char *hilock_rwlock_key(const hilock_rwlock *rw, int write,
                                         size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_RWLOCK_H */
