/* hilock: the fair (FIFO) lock.
 *
 * An exclusive lock granted in the order it was requested. A blocking
 * acquire takes a ticket (a strictly increasing number per lock name) and
 * joins a queue, hilock:{name}:fair:queue; the lock goes to the waiter with
 * the lowest ticket, and a newcomer never barges past it, not even with
 * try_acquire while the lock is momentarily free. A release wakes the head
 * of the queue, and only it, through the head's own wake list.
 *
 * Waiters prove they are alive: each re-check (at least every third of the
 * heartbeat window) moves its deadline,
 * judged on the server's clock, to now + window. A waiter whose deadline
 * passes is dead and is skipped, so a crashed waiter delays the queue by at
 * most one window; a live waiter keeps its place however long it waits. A
 * waiter that times out or is interrupted leaves the queue before acquire
 * returns.
 *
 * Grants carry a fencing token (as hilock_lock) and are renewed by the
 * client's watchdog when auto-renewal is on. The lock is not reentrant.
 *
 * Verbs: those of every family, on the lock's hold (hilock/hold.h:
 * hilock_hold_acquire(HILOCK_HOLD(fl), wait_ms) and the others).
 * try_acquire does not queue: it is HILOCK_BUSY while anybody waits.
 * acquire queues; whatever it returns, no queue entry is left. release
 * wakes the head of the queue.
 *
 * Heartbeat window (hilock_hold_set_heartbeat, in ms,
 * HILOCK_FAIR_HEARTBEAT_MIN_MS .. HILOCK_TTL_MAX_MS): a waiter re-checks at
 * least every window/3 and is dropped once it has not for a whole window.
 * Default: the TTL, at most HILOCK_FAIR_HEARTBEAT_DEFAULT_MAX_MS. Applies
 * from the next re-check.
 *
 * Lock delay (hilock_hold_set_lock_delay, as for hilock_lock): after a
 * grant that ended without its holder's release, the head of the line is
 * granted no earlier than the delay after the grant's last TTL.
 *
 * Threads: a handle stands for one holder; use it from one thread at a
 * time. Fork: a grant belongs to the process that acquired it; in a forked
 * child release and extend return HILOCK_EFORKED and touch nothing. */
#ifndef HILOCK_FAIR_LOCK_H
#define HILOCK_FAIR_LOCK_H

#include <stdint.h>
#include <stddef.h>

#include "hilock/client.h"
#include "hilock/export.h"
#include "hilock/hold.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The heartbeat window defaults to the TTL, clamped to this range. The
 * minimum leaves room for the server's timer resolution: a blocked
 * command's timeout fires up to 1000/hz ms late (100 ms at the default
 * hz 10), and a waiter's re-check rides on such a timeout. */
#define HILOCK_FAIR_HEARTBEAT_MIN_MS ((int64_t)500)
#define HILOCK_FAIR_HEARTBEAT_DEFAULT_MAX_MS ((int64_t)5000)

typedef struct hilock_fair_lock hilock_fair_lock;

/* CONSTRUCTOR, as every family's (hold.h). */
HILOCK_API int hilock_fair_lock_new(hilock_client *client, const char *name,
                                    size_t namelen, int64_t ttl_ms,
                                    hilock_fair_lock **out);

/* Round trip: how many waiters are queued with a live heartbeat. (Whether
 * this handle's grant still holds it, or anyone does: hilock_hold_owned,
 * hilock_hold_locked.) */
HILOCK_API int hilock_fair_lock_waiters(hilock_fair_lock *fl, int64_t *count);

/* The ticket of the current or last grant: its place in the request order
 * (strictly increasing per lock name); 0 before the first grant. */
HILOCK_API uint64_t hilock_fair_lock_ticket(const hilock_fair_lock *fl);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_FAIR_LOCK_H */
