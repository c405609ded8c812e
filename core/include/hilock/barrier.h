/* hilock: barriers (Python's threading.Barrier, across processes) and
 * double barriers (Curator's DistributedDoubleBarrier), with liveness.
 *
 * A barrier of n parties releases its waiters together once n have
 * arrived, generation after generation. Each waiting party is a hold
 * whose lease the client's renewal thread pushes every ttl/3: a party
 * that dies, hangs or is cut off while others wait stops renewing, and the
 * others find its lease ended within about a TTL and end HILOCK_EBROKEN
 * (they never hang, and never pass as if it had arrived). A wait that
 * times out breaks the barrier too (as threading.Barrier's), and so does a
 * wait that ends with an error or an interrupt: every waiter of that
 * generation ends HILOCK_EBROKEN, and so does every later arrival until
 * hilock_barrier_reset. Waiters sleep until a message (the shared
 * waiting's subscriber) or the earliest lease end of another party, never
 * polling; without SUBSCRIBE permission they look every 500 ms.
 *
 * A double barrier of n parties: hilock_double_barrier_enter returns once
 * n have entered; hilock_double_barrier_leave once every one of them has
 * left. A party's lease is renewed from its enter until its leave: one
 * that dies inside breaks the round, and the others' leave (or enter)
 * ends HILOCK_EBROKEN instead of hanging. Rounds follow each other: the
 * next round's entries are taken once the last party of a round has left
 * (an enter made while a round's parties are inside waits for it). A
 * broken double barrier stays broken until hilock_double_barrier_reset.
 *
 * Keys (one cluster slot): hilock:{name}:barrier (a barrier's hash:
 * generation, parties, why it broke; its name is also the channel waiters
 * listen on) and hilock:{name}:arrived (the generation's parties, a zset
 * scored with the server time each lease ends); a double barrier's are
 * hilock:{name}:dbarrier and hilock:{name}:inside. They stay until
 * hilock_barrier_delete (hilock_double_barrier_delete); a deletion ends
 * the waiters HILOCK_EBROKEN.
 *
 * Parties: the first handle to arrive sets the count; an arrival by a
 * handle made with another count is refused with HILOCK_EINVAL (its
 * message names both).
 *
 * Threads: a handle stands for one party; use it from one thread at a
 * time (a thread per party, each with its own handle). Fork: a child's
 * handle is not waiting (the parent's wait is the parent's). */
#ifndef HILOCK_BARRIER_H
#define HILOCK_BARRIER_H

#include <stddef.h>
#include <stdint.h>

#include "hilock/client.h"
#include "hilock/export.h"
#include "hilock/hold.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hilock_barrier hilock_barrier;
typedef struct hilock_double_barrier hilock_double_barrier;

/* Largest party count. */
#define HILOCK_BARRIER_PARTIES_MAX 1000000

/* CONSTRUCTOR, as every family's (hold.h): a party of barrier name of
 * parties (1..HILOCK_BARRIER_PARTIES_MAX) whose lease lasts ttl_ms while
 * it waits unless renewed (the renewal thread renews it every ttl/3;
 * hilock_hold_set_auto_renew(..., 0, ...) turns that off). */
HILOCK_API int hilock_barrier_new(hilock_client *client, const char *name,
                                  size_t namelen, int64_t parties,
                                  int64_t ttl_ms, hilock_barrier **out);

/* Round trips: arrive and wait until parties have arrived in this
 * generation (HILOCK_WAIT_FOREVER: no limit). HILOCK_OK with *index the
 * arrival's index in its generation (0 for the first to arrive, parties-1
 * for the last, whose arrival released the others); HILOCK_EBROKEN if the
 * generation broke (a party's lease ran out, a wait gave up, an abort, a
 * reset or a deletion; the message says which) or the barrier was already
 * broken. A wait that runs out of wait_ms breaks the barrier for every
 * waiter and returns HILOCK_EBROKEN (as threading.Barrier raises
 * BrokenBarrierError); so does one that ends with HILOCK_EINTR (the
 * client's interrupt hook), HILOCK_ECLOSED or a connection error, which is
 * returned (the barrier then breaks by the give-up sent, or else when
 * this party's lease ends). The give-up is a round trip after wait_ms. */
HILOCK_API int hilock_barrier_wait(hilock_barrier *b, int64_t wait_ms,
                                   int64_t *index);

/* Round trip: break the current generation (threading.Barrier.abort):
 * its waiters, and every arrival until a reset, end HILOCK_EBROKEN. */
HILOCK_API int hilock_barrier_abort(hilock_barrier *b);

/* Round trip: start a new generation, empty and unbroken; the waiters of
 * the current one end HILOCK_EBROKEN (threading.Barrier.reset). */
HILOCK_API int hilock_barrier_reset(hilock_barrier *b);

/* Round trip: *broken = 1 if the barrier is broken (0 if not), and
 * *waiting the parties waiting in this generation (either may be NULL). */
HILOCK_API int hilock_barrier_state(hilock_barrier *b, int *broken,
                                    int64_t *waiting);

/* Round trip: delete the barrier's keys (its waiters end HILOCK_EBROKEN);
 * *deleted = 1 if there were any. */
HILOCK_API int hilock_barrier_delete(hilock_barrier *b, int *deleted);

/* CONSTRUCTOR: a party of double barrier name of parties
 * (1..HILOCK_BARRIER_PARTIES_MAX), its lease ttl_ms as for a barrier. */
HILOCK_API int hilock_double_barrier_new(hilock_client *client,
                                         const char *name, size_t namelen,
                                         int64_t parties, int64_t ttl_ms,
                                         hilock_double_barrier **out);

/* Round trips: enter and wait until parties have entered this round
 * (HILOCK_WAIT_FOREVER: no limit). HILOCK_OK inside (leave later);
 * HILOCK_BUSY if wait_ms ran out first: the entry is withdrawn (the others
 * keep waiting for parties; nothing breaks); HILOCK_EBROKEN if the round
 * broke or was broken. HILOCK_EINVAL if this handle is inside already. */
HILOCK_API int hilock_double_barrier_enter(hilock_double_barrier *db,
                                           int64_t wait_ms);

/* Round trips: leave, and wait until every party of the round has left
 * (HILOCK_WAIT_FOREVER: no limit). HILOCK_OK all left; HILOCK_BUSY if
 * wait_ms ran out first (this party has left; call again to wait on);
 * HILOCK_EBROKEN if a party's lease ran out inside (or a reset or
 * deletion came); HILOCK_ENOTOWNED if this handle did not enter. */
HILOCK_API int hilock_double_barrier_leave(hilock_double_barrier *db,
                                           int64_t wait_ms);

/* Round trip: break the current round, as a barrier's abort. */
static inline int hilock_double_barrier_abort(hilock_double_barrier *db) {
  return hilock_barrier_abort((hilock_barrier *)db);
}

/* Round trip: start the next round, empty and unbroken; parties waiting
 * in the current one end HILOCK_EBROKEN. */
static inline int hilock_double_barrier_reset(hilock_double_barrier *db) {
  return hilock_barrier_reset((hilock_barrier *)db);
}

/* Round trip: *broken = 1 if broken (0 if not), and *inside the parties
 * entered in the current round (either may be NULL). */
static inline int hilock_double_barrier_state(hilock_double_barrier *db,
                                              int *broken, int64_t *inside) {
  return hilock_barrier_state((hilock_barrier *)db, broken, inside);
}

/* Round trip: delete the double barrier's keys (waiters end
 * HILOCK_EBROKEN); *deleted = 1 if there were any. */
static inline int hilock_double_barrier_delete(hilock_double_barrier *db,
                                               int *deleted) {
  return hilock_barrier_delete((hilock_barrier *)db, deleted);
}

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_BARRIER_H */
