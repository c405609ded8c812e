/* hilock: the sequential lock (ZooKeeper-style).
 *
 * The lock recipe of ZooKeeper, emulated on Redis: every contender creates
 * an "ephemeral sequential node", an entry with the next sequence number of
 * the lock (INCR of hilock:{name}:seq:counter) that lives only while its
 * session does. The live entry with the lowest sequence holds the lock.
 * Every other contender watches its predecessor only, the live entry just
 * below its own: it sleeps on its own wake list, hilock:{name}:seq:wake:<seq>,
 * and whatever removes the predecessor (a release, a waiter leaving, the
 * purge of a dead session) pushes to that list and to no other. A release
 * therefore wakes exactly one process.
 *
 * Sessions are judged on the server's clock: the holder's entry lasts ttl
 * after the grant or its last renewal; a waiter's lasts one session window
 * (hilock_hold_set_heartbeat) after its last re-check, and a waiter
 * re-checks at least every third of the window. A waiter also wakes when its
 * predecessor's session would run out, so a crashed predecessor passes the
 * turn within its session TTL even if no one else runs a script. A waiter
 * that times out, is interrupted or fails removes its entry and wakes its
 * successor before acquire returns.
 *
 * Grants carry a fencing token (the fence counter shared with the other
 * exclusive families) and are renewed by the client's watchdog when
 * auto-renewal is on. The lock is not reentrant.
 *
 * Verbs: those of every family, on the lock's hold (hilock/hold.h:
 * hilock_hold_acquire(HILOCK_HOLD(sl), wait_ms) and the others).
 * try_acquire is HILOCK_BUSY, leaving no entry, while any live contender
 * exists. acquire creates an entry with the next sequence number and waits
 * until it is the lowest live one; on BUSY or an error the entry is removed
 * and the successor woken. release removes the holder's entry and wakes its
 * successor only. extend and renew act on the holder's session.
 *
 * Session window (hilock_hold_set_heartbeat, in ms,
 * HILOCK_SEQUENTIAL_LOCK_HEARTBEAT_MIN_MS .. HILOCK_TTL_MAX_MS): a waiter
 * re-checks at least every window/3 and its entry is purged once it has not
 * for a whole window. Default: the TTL, at most
 * HILOCK_SEQUENTIAL_LOCK_HEARTBEAT_DEFAULT_MAX_MS. Applies from the next
 * re-check.
 *
 * Lock delay (hilock_hold_set_lock_delay before acquiring): a grant of a
 * handle with a delay sets the marker hilock:{name}:delay to the session's
 * TTL plus the delay, renewals and extensions push it along, and the
 * holder's release deletes it. When a grant ends without its release (the
 * session ran out: the holder was killed, stalled or cut off), no entry is
 * granted until the marker expires, whatever that entry's own delay: the
 * head of the line keeps its place and sleeps the marker's remaining time
 * (bounded by its own re-checks), then is granted; a release frees the lock
 * at once, and so does hilock_client_force_release. An adopted grant
 * (hilock_client_adopt) carries the exporter's delay: its renewals push the
 * marker, its release deletes it.
 *
 * Threads: a handle stands for one contender; use it from one thread at a
 * time. Fork: a grant belongs to the process that acquired it; in a forked
 * child release and extend return HILOCK_EFORKED and touch nothing. */
#ifndef HILOCK_SEQUENTIAL_LOCK_H
#define HILOCK_SEQUENTIAL_LOCK_H

#include <stddef.h>
#include <stdint.h>

#include "hilock/client.h"
#include "hilock/export.h"
#include "hilock/hold.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A waiter's session window defaults to the TTL clamped to this range (the
 * minimum leaves room for the server's blocked-timeout resolution). */
#define HILOCK_SEQUENTIAL_LOCK_HEARTBEAT_MIN_MS ((int64_t)500)
#define HILOCK_SEQUENTIAL_LOCK_HEARTBEAT_DEFAULT_MAX_MS ((int64_t)5000)

typedef struct hilock_sequential_lock hilock_sequential_lock;

/* CONSTRUCTOR, as every family's (hold.h). */
HILOCK_API int hilock_sequential_lock_new(hilock_client *client, const char *name,
                                  size_t namelen, int64_t ttl_ms,
                                  hilock_sequential_lock **out);

/* Round trip: how many live contenders wait behind the holder. (Whether
 * this handle's grant still holds, or anyone does: hilock_hold_owned,
 * hilock_hold_locked.) */
HILOCK_API int hilock_sequential_lock_waiters(hilock_sequential_lock *sl, int64_t *count);

/* The sequence number of the entry: the one of the acquire in progress once
 * it is enqueued (readable from another thread), then of the current or
 * last grant; 0 before any. Strictly increasing per lock name. */
HILOCK_API uint64_t hilock_sequential_lock_sequence(const hilock_sequential_lock *sl);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_SEQUENTIAL_LOCK_H */
