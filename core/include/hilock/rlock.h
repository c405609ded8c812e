/* hilock: the reentrant lock.
 *
 * The owner is the calling thread of one client: client id (random, new in
 * a forked child) plus the kernel thread id. The same thread re-acquires
 * without blocking and must release as many times; any other thread or
 * process blocks. Hold counts live in a Redis hash, hilock:{name}:rlock
 * {owner -> count}, so re-entry refreshes the TTL and operators can see
 * who holds it how often. The final release deletes it and wakes a waiter.
 *
 * Threads: one handle may be shared by threads; each thread is a separate
 * owner and the handle serialises its local state. */
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

/* The verbs of every family (hold.h), per calling thread: acquire and
 * try_acquire re-enter a lock the thread holds; release leaves once, and the
 * last leave frees the lock and wakes a waiter. */
HILOCK_API int hilock_rlock_try_acquire(hilock_rlock *rl);
HILOCK_API int hilock_rlock_acquire(hilock_rlock *rl, int64_t wait_ms);
HILOCK_API int hilock_rlock_release(hilock_rlock *rl);

/* Round trip: the calling thread's hold count (0 if none). (Whether it
 * holds the lock, or anyone does: hilock_hold_owned, hilock_hold_locked.) */
HILOCK_API int hilock_rlock_hold_count(hilock_rlock *rl, int64_t *count);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_RLOCK_H */
