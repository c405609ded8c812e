/* hilock: leader election (etcd's Election, Curator's LeaderLatch).
 *
 * One leader at a time per name, with a value (an address, an id) that
 * anyone can read and watch. The lead is a hold like a lock's: a campaign
 * is its acquire (a standby sleeps until the leader resigns, or at most
 * until the leader's TTL runs out: no polling), a resignation its release,
 * and the client's renewal thread keeps it while the leader lives; a leader
 * that dies, hangs or is cut off loses it within its TTL, and a standby
 * leads next. Every lead carries a fence drawn as a lock's (strictly
 * increasing across leaders, above every fence handed out before a
 * failover, see hilock/hold.h): a resource that refuses older fences
 * refuses a deposed leader's writes.
 *
 * Keys: hilock:{name}:elect, a hash {<leader's owner token>: value,
 * fence: n} with PX = ttl (its name is also the pub/sub channel observers
 * hear changes on), :fence (the name's counter, shared with the other
 * families) and :ewake (the standbys' wake list).
 *
 * Observing: hilock_election_observe waits until the leader or its value
 * differs from the last one this handle read, woken by a message the
 * campaign, proclaim and resign scripts publish (the shared waiting's
 * subscriber connection; without it, a look every 500 ms). Changes faster
 * than the reader may be coalesced; the last one is never missed, since
 * the handle reads the leader after it listens. A lead that lapses without
 * a successor is not reported (as etcd's Observe): the next leader is.
 *
 * Threads: a handle stands for one campaigner or observer; use it from one
 * thread at a time. Fork: as a lock's (hilock/lock.h). */
#ifndef HILOCK_ELECTION_H
#define HILOCK_ELECTION_H

#include <stddef.h>
#include <stdint.h>

#include "hilock/client.h"
#include "hilock/export.h"
#include "hilock/hold.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hilock_election hilock_election;

/* Largest value a leader proclaims, in bytes. */
#define HILOCK_ELECTION_VALUE_MAX 65536

/* CONSTRUCTOR, as every family's (hold.h): a handle on election name whose
 * lead lasts ttl_ms unless renewed (auto-renewal: hilock_hold_set_auto_renew
 * before campaigning, as for a lock). */
HILOCK_API int hilock_election_new(hilock_client *client, const char *name,
                                   size_t namelen, int64_t ttl_ms,
                                   hilock_election **out);

/* The value (len bytes, 0..HILOCK_ELECTION_VALUE_MAX, binary safe) this
 * handle's next campaign writes; kept until changed (none yet: empty). */
HILOCK_API int hilock_election_set_value(hilock_election *e,
                                         const char *value, size_t len);

/* Campaign with value until this handle leads or wait_ms passes
 * (HILOCK_WAIT_FOREVER: no limit; 0: one attempt): HILOCK_OK leading (its
 * fence: hilock_hold_fence), HILOCK_BUSY another leads, or an error. A
 * campaign is the hold's acquire with the value set: hilock_hold_acquire
 * and hilock_hold_try_acquire (and the async runner's acquire) campaign
 * with the value last set. */
static inline int hilock_election_campaign(hilock_election *e,
                                           const char *value, size_t len,
                                           int64_t wait_ms) {
  int rc = hilock_election_set_value(e, value, len);
  return rc != HILOCK_OK ? rc : hilock_hold_acquire(HILOCK_HOLD(e), wait_ms);
}

/* While leading: change the value observers see, keeping the lead and its
 * fence. HILOCK_ENOTOWNED (the lead marked lost) if it was lost. */
HILOCK_API int hilock_election_proclaim(hilock_election *e, const char *value,
                                        size_t len);

/* Give up the lead (hilock_hold_release): the next standby is woken and
 * observers hear of it. */
static inline int hilock_election_resign(hilock_election *e) {
  return hilock_hold_release(HILOCK_HOLD(e));
}

/* The current leader in one round trip: *fence its fence, 0 when nobody
 * leads; its value is then read with hilock_election_value. */
HILOCK_API int hilock_election_leader(hilock_election *e, uint64_t *fence);

/* Wait until the leader differs from the last one this handle read
 * (leader or observe; none read yet: any leader), by its fence or its
 * value, then read it as hilock_election_leader does. HILOCK_BUSY if
 * nothing changed within wait_ms (HILOCK_WAIT_FOREVER: no limit). Ends
 * early with HILOCK_EINTR (the client's interrupt hook) or HILOCK_ECLOSED. */
HILOCK_API int hilock_election_observe(hilock_election *e, int64_t wait_ms,
                                       uint64_t *fence);

/* The value of the leader last read by hilock_election_leader or
 * hilock_election_observe (len bytes, not NUL-terminated; "" with none),
 * valid until the next call on the handle. */
HILOCK_API const char *hilock_election_value(const hilock_election *e,
                                             size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_ELECTION_H */
