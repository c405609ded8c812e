/* hilock: the multi-key lock.
 *
 * One holder takes a whole set of names at once, or none of them: a
 * transfer between accounts "acct:1" and "acct:2" locks both. The names are
 * de-duplicated and sorted (bytewise), and one script checks every name and
 * takes them all or none, so there is never a partial hold and overlapping
 * sets cannot deadlock, whatever order callers list them in.
 *
 * Each name uses exactly the keys of the expiring lock of that name
 * (hilock:{name}:lock, :fence, :wake), holding the same kind of owner token,
 * so a multi-key lock on {a, b} excludes hilock_lock_new(c, "a", ...) and
 * vice versa. Every grant draws one fencing token per name, from the
 * counter a single lock of that name uses: a resource guarded by one name
 * checks that name's fence (hilock_multi_lock_fence(m, i)).
 *
 * Index i in the functions below is the position of a name in the sorted,
 * de-duplicated set (hilock_multi_lock_name), not in the caller's array.
 *
 * Verbs: those of every family, on the lock's hold (hilock/hold.h:
 * hilock_hold_acquire(HILOCK_HOLD(m), wait_ms) and the others), for the
 * whole set. A grant takes every name; HILOCK_BUSY if at least one is held
 * by someone else, and then nothing is taken. Release deletes every key
 * this holder still holds and wakes each name's waiter; a key that expired
 * or was taken by someone else is left alone and reported
 * (HILOCK_ENOTOWNED, hilock_multi_lock_missing), the rest are freed. Extend
 * and renewal refresh every key or none: only if this holder still holds
 * every key; otherwise nothing changes and the hold is marked lost.
 * hilock_hold_owned asks whether the grant still holds every key (a
 * missing key marks the hold lost); hilock_hold_fence is the highest of the
 * names' fences. A lock delay (hilock_hold_set_lock_delay, as for
 * hilock_lock) applies to every name.
 *
 * Waiting: a busy attempt reports the name that blocked it; the waiter
 * sleeps on that name's wake list, bounded by its holder's remaining TTL
 * and the caller's deadline. Not fair: a waiter for a large set can be
 * overtaken by waiters for its members.
 *
 * Redis Cluster: all keys must hash to one slot. On a cluster client,
 * names whose keys are in different slots fail at once with
 * HILOCK_ECROSSSLOT; give them a shared hash tag ("{acct}:1", "{acct}:2").
 *
 * Threads and fork: as hilock_lock (one thread at a time per handle; a
 * forked child holds nothing and gets HILOCK_EFORKED). */
#ifndef HILOCK_MULTI_LOCK_H
#define HILOCK_MULTI_LOCK_H

#include <stddef.h>
#include <stdint.h>

#include "hilock/client.h"
#include "hilock/export.h"
#include "hilock/hold.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most names in one multi-key lock (after de-duplication the set is at
 * most this large; more names given is HILOCK_EINVAL even if duplicated). */
#define HILOCK_MULTI_LOCK_MAX 1024

typedef struct hilock_multi_lock hilock_multi_lock;

/* CONSTRUCTORS; nothing is sent to Redis. names: n NUL-terminated names
 * (hilock_multi_lock_new) or n binary names with their lengths (_new_len), each
 * 1..HILOCK_NAME_MAX bytes, not beginning with '}'; 1 <= n <=
 * HILOCK_MULTI_LOCK_MAX. ttl_ms in HILOCK_TTL_MIN_MS..HILOCK_TTL_MAX_MS, for
 * every key. Returns HILOCK_OK, HILOCK_EINVAL (message in
 * hilock_client_errmsg), HILOCK_ECROSSSLOT (cluster client, names in different
 * slots), HILOCK_ENOMEM or HILOCK_ECLOSED. */
HILOCK_API int hilock_multi_lock_new(hilock_client *client,
                                    const char *const *names, size_t n,
                                    int64_t ttl_ms, hilock_multi_lock **out);
HILOCK_API int hilock_multi_lock_new_len(hilock_client *client,
                                        const char *const *names,
                                        const size_t *namelens, size_t n,
                                        int64_t ttl_ms,
                                        hilock_multi_lock **out);

/* Number of distinct names, and name i (sorted) with its length. */
HILOCK_API size_t hilock_multi_lock_count(const hilock_multi_lock *m);
HILOCK_API const char *hilock_multi_lock_name(const hilock_multi_lock *m,
                                             size_t i, size_t *len);
/* Fencing token of name i in the current or last grant (the counter a
 * single lock of that name uses); 0 before a grant or for a bad index. */
HILOCK_API uint64_t hilock_multi_lock_fence(const hilock_multi_lock *m,
                                           size_t i);
/* 1 if the last release, extend or owned found name i not held by this
 * holder (expired or taken), else 0. */
HILOCK_API int hilock_multi_lock_missing(const hilock_multi_lock *m, size_t i);
/* The lock key of name i (hilock:{name}:lock) and its length. */
HILOCK_API const char *hilock_multi_lock_key(const hilock_multi_lock *m,
                                            size_t i, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_MULTI_LOCK_H */
