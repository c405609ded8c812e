/* hilock: a countdown latch with registered parties (Java's
 * CountDownLatch, Redisson's RCountDownLatch, with liveness).
 *
 * A latch starts at a count; hilock_latch_count_down takes one off (never
 * below 0) and hilock_latch_wait returns once the count is 0. The first
 * call on a latch that does not exist makes it with the handle's count; a
 * handle with another count later does not change it (as Redisson's
 * trySetCount). The latch stays (no TTL) until hilock_latch_delete.
 *
 * Parties: a handle may join the latch (hilock_latch_join) as a registered
 * party, whose lease the client's renewal thread keeps (ttl_ms, renewed
 * every ttl/3 as a lock's). If a party's lease ends before it counts down
 * (it died, hung or was cut off), the latch is broken: every waiter gets
 * HILOCK_EBROKEN within about the party's TTL instead of waiting forever.
 * A party that gives up breaks it at once (hilock_latch_abort). A joined
 * handle's hilock_latch_count_down counts down as the party and ends its
 * lease in the same step; once it has counted down, another count down on
 * the handle is HILOCK_ENOTOWNED (a party counts once). A latch at 0 is
 * never broken.
 *
 * The handle is a hold (hilock/hold.h): joining is its acquire, a party's
 * count down its release; hilock_hold_free(HILOCK_HOLD(l)) frees it (it
 * sends nothing: a party that has not counted down breaks the latch when
 * its lease ends), hilock_hold_errmsg reads its last error, hilock_hold_set_auto_renew and
 * hilock_hold_on_lost work on the party's lease. Closing the client while
 * a party has not counted down breaks the latch.
 *
 * Waiting sleeps until a message on the latch's channel (the count reached
 * 0, the latch broke or was deleted, a party joined) or the earliest
 * party's lease end, never polling (without the shared waiting's
 * subscriber: a look every 500 ms).
 *
 * Keys: hilock:{name}:latch, a hash {count: n, broken: reason} (its name
 * is also the pub/sub channel), and hilock:{name}:latch:parties, a zset of
 * the registered parties scored with the server time (ms) their lease
 * ends.
 *
 * Threads: use a handle from one thread at a time (one handle per party).
 * Fork: a party's lease is its process's (hilock/lock.h). */
#ifndef HILOCK_LATCH_H
#define HILOCK_LATCH_H

#include <stddef.h>
#include <stdint.h>

#include "hilock/client.h"
#include "hilock/export.h"
#include "hilock/hold.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hilock_latch hilock_latch;

/* Largest count a latch starts with. */
#define HILOCK_LATCH_COUNT_MAX ((int64_t)1 << 50)

/* CONSTRUCTOR: a handle on latch name that makes it with count
 * (1..HILOCK_LATCH_COUNT_MAX) if it does not exist; a party that joins
 * through it keeps a lease of ttl_ms (renewed by the client's renewal
 * thread). Nothing is sent to Redis. */
HILOCK_API int hilock_latch_new(hilock_client *client, const char *name,
                                size_t namelen, int64_t count, int64_t ttl_ms,
                                hilock_latch **out);

/* Take one off the count (never below 0); at 0 the waiters return. On a
 * joined handle, as its party (which leaves the parties: its lease ends
 * with it); HILOCK_ENOTOWNED if that party counted down already or its
 * lease was lost. HILOCK_EBROKEN (the reason in the error message) if the
 * latch is broken. Sent once: a connection lost during the call is an
 * error, and the count may or may not have been taken. */
HILOCK_API int hilock_latch_count_down(hilock_latch *l);

/* Wait until the count is 0: HILOCK_OK, HILOCK_BUSY if it is not 0 within
 * wait_ms (0: one look; HILOCK_WAIT_FOREVER: no limit), HILOCK_EBROKEN if
 * the latch is or becomes broken (a party's lease ended before it counted
 * down, or a party gave up). Ends early with HILOCK_EINTR (the client's
 * interrupt hook) or HILOCK_ECLOSED. The look at the end of wait_ms has
 * its round trip (at most 250 ms more), as an acquire's last attempt. */
HILOCK_API int hilock_latch_wait(hilock_latch *l, int64_t wait_ms);

/* The count left in *count, in one round trip; HILOCK_EBROKEN (with the
 * count still in *count) if the latch is broken. */
HILOCK_API int hilock_latch_count(hilock_latch *l, int64_t *count);

/* Register this handle as a party (its acquire: hilock_hold_try_acquire):
 * HILOCK_OK joined, its lease renewed until it counts down. HILOCK_EBROKEN
 * if the latch is broken; HILOCK_EINVAL if its count is 0 already (the
 * message says so: nothing is left to count down) or the handle is a live
 * party already. */
static inline int hilock_latch_join(hilock_latch *l) {
  return hilock_hold_try_acquire(HILOCK_HOLD(l));
}

/* Break the latch (a party gives up): every waiter returns HILOCK_EBROKEN
 * at once, and so do later calls, until hilock_latch_delete. A joined
 * handle's party leaves the parties; if the call fails (Redis unreachable)
 * the party's renewal stops all the same, so its lease ends and breaks the
 * latch within its TTL. A latch at 0 stays done (nothing broken). */
HILOCK_API int hilock_latch_abort(hilock_latch *l);

/* Delete the latch's keys (count, broken mark, parties): the name starts
 * afresh, made by the next call with its handle's count. Waiters are told
 * and look again (making it anew). */
HILOCK_API int hilock_latch_delete(hilock_latch *l);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_LATCH_H */
