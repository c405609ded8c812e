/* hilock: the base handle every lock shares.
 *
 * Every lock handle (hilock_lock, hilock_rlock, hilock_semaphore,
 * hilock_fair_lock, hilock_rwlock, hilock_multi_lock, hilock_sequential_lock,
 * hilock_segmented_lock, hilock_redlock, hilock_election) begins with a
 * hilock_hold: its current grant (fence, owner token, local validity,
 * loss), its settings (TTL, auto-renewal) and the message of its last
 * failed call. HILOCK_HOLD(lk)
 * gives a family handle's hold (in C11 the macro checks the type; in C++
 * and older C it is a cast), and the functions here work on every family:
 *
 *   hilock_lock *lk;
 *   ...
 *   if (hilock_hold_acquire(HILOCK_HOLD(lk), 5000) == HILOCK_OK)
 *     printf("fence %llu\n",
 *            (unsigned long long)hilock_hold_fence(HILOCK_HOLD(lk)));
 *   else
 *     fprintf(stderr, "%s\n", hilock_hold_errmsg(HILOCK_HOLD(lk)));
 *
 * Naming: hilock_<object>_<verb>. The verbs every family shares
 * (try_acquire, acquire, release, extend, renew) are declared once, at the
 * end of this header, as hilock_hold_<verb>, with their contract; each runs
 * the family's own, and a verb the family lacks returns HILOCK_ENOTSUP
 * (the reentrant and read-write locks have no extend or renew, the
 * semaphore no extend). Each family's header declares its constructor and
 * what is its own, and says which of these verbs it has and what they do
 * for it; as libuv's uv_close serves every handle, one set of verbs serves
 * every family (the read-write lock's read side has calls of its own). A
 * call that asks the server says "Round trip" in its comment; every other
 * read is local (here: all but hilock_hold_owned,
 * hilock_hold_locked and the verbs).
 *
 * A read-write lock's hold is its write side: read-side state has its own
 * calls in rwlock.h. A Redlock's hold is the grant on a majority of its
 * nodes.
 *
 * Threads: a handle is used by one thread at a time, except the reentrant
 * and read-write locks, whose handles threads may share: their holds are
 * guarded, and their errors are kept per thread, as errno (each thread
 * reads the error of its own last failed call on the handle).
 *
 * Fork: a grant belongs to the process that acquired it; in a forked child
 * the hold reads as not held (validity 0) and the family's release, extend
 * and renew return HILOCK_EFORKED without touching the server. */
#ifndef HILOCK_HOLD_H
#define HILOCK_HOLD_H

#include <stddef.h>
#include <stdint.h>

#include "hilock/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Names are binary safe (pointer + length, NUL bytes allowed), 1 to
 * HILOCK_NAME_MAX bytes, and may not begin with '}' (see the key layout). */
#define HILOCK_NAME_MAX 1024
/* Largest TTL accepted, in ms (about 34 years). */
#define HILOCK_TTL_MAX_MS ((int64_t)1 << 40)
/* Smallest TTL accepted, in ms: a grant's validity is its TTL less a
 * clock-drift allowance of 1% + 2 ms, so a shorter TTL would be lost on
 * arrival. */
#define HILOCK_TTL_MIN_MS ((int64_t)10)
/* Wait forever in an acquire. */
#define HILOCK_WAIT_FOREVER ((int64_t)-1)

typedef struct hilock_hold hilock_hold;

/* Called on the client's renewal thread when a hold is found lost. It must
 * return quickly and must not call into the handle it reports: freeing or
 * releasing it waits for a running callback to return. */
typedef void (*hilock_lost_fn)(void *arg);

/* Message and status of the handle's last failed call (for a handle threads
 * share: the calling thread's); "" and HILOCK_OK if none. Never NULL. */
HILOCK_API const char *hilock_hold_errmsg(const hilock_hold *h);
HILOCK_API int hilock_hold_errcode(const hilock_hold *h);

/* Fencing token of the current or last grant: strictly increasing per lock
 * name; 0 before the first grant, and for a semaphore (permits carry no
 * fence). A multi-key lock's is the highest of its names' fences (each
 * name's own: hilock_multi_lock_fence). */
HILOCK_API uint64_t hilock_hold_fence(const hilock_hold *h);

/* What the server compares to tell this holder from others: 32 random hex
 * characters, fresh for every grant (a semaphore's permit id), or for the
 * reentrant and read-write locks "client id:thread id" (a copy for the
 * calling thread, valid until its next call of this). "" before the first
 * grant. */
HILOCK_API const char *hilock_hold_token(const hilock_hold *h);

/* The Redis key that holds the grant (for operators), and its length: the
 * lock's key; a segmented lock's current or last segment; a multi-key
 * lock's first name; a read-write lock's writer hash. */
HILOCK_API const char *hilock_hold_key(const hilock_hold *h, size_t *len);

/* The TTL given to the constructor, in ms (0: a simple lock, no expiry). */
HILOCK_API int64_t hilock_hold_ttl_ms(const hilock_hold *h);

/* Local, no round trip: ms of validity left for the current grant, measured
 * from before the acquire (or last renewal or extension) was sent, less a
 * clock-drift allowance (1% of the TTL + 2 ms). 0 if not held, lost or
 * lapsed, or in a forked child; INT64_MAX for a held simple lock. */
HILOCK_API int64_t hilock_hold_validity_ms(const hilock_hold *h);

/* 1 if this handle believes it holds the grant (validity left > 0). */
static inline int hilock_hold_held(const hilock_hold *h) {
  return hilock_hold_validity_ms(h) > 0;
}

/* 1 if the current grant was found lost (renewal failed, or owned or an
 * extension found another owner), or the last one's release found it gone
 * (it lapsed, or another owner holds it); cleared by the next grant. */
HILOCK_API int hilock_hold_lost(const hilock_hold *h);

/* Auto-renewal: while held, the client's renewal thread resets the TTL
 * every ttl/3 (batched with every other hold on the same server or slot),
 * registered before acquire returns and cancelled before release. If
 * renewal finds the grant owned by someone else, or cannot renew it before
 * its validity runs out, the hold is marked lost and on_lost(arg) runs.
 * max_hold_ms > 0 stops renewing that long after the grant (it then lapses
 * at its TTL and is reported lost). Applies to the current grant too.
 * on_lost runs once per lost grant, whoever finds the loss: on the renewal
 * thread, or, when a call finds it (owned, extend, a release that finds
 * the grant gone, the next acquire after an unrenewed grant lapsed), in
 * that call before it returns, where it must not call into this lock.
 * enable = 0 with on_lost set asks for that callback without renewal.
 * HILOCK_ENOTSUP for a simple lock (no TTL) with enable; HILOCK_EINVAL for
 * max_hold_ms < 0. */
HILOCK_API int hilock_hold_set_auto_renew(hilock_hold *h, int enable,
                                          int64_t max_hold_ms,
                                          hilock_lost_fn on_lost, void *arg);

/* Round trip: *owned = 1 if this handle's grant still holds the lock on the
 * server (for the reentrant lock: the calling thread's). A grant found
 * gone is marked lost. */
HILOCK_API int hilock_hold_owned(hilock_hold *h, int *owned);

/* Round trip: *locked = 1 if anyone holds the lock (a semaphore: any permit
 * is taken; a read-write lock: a reader or a writer). */
HILOCK_API int hilock_hold_locked(hilock_hold *h, int *locked);

/* Hand the grant over: write it into buf as text (NUL-terminated; its
 * length, without the NUL, in *len) that hilock_client_adopt turns into a
 * handle holding it, in another thread or process. The text names the lock
 * and its family (with the TTL, and what the family's release needs: a
 * multi-key lock's names, a segmented lock's segment count and segment, a
 * semaphore's permit count, a fair lock's ticket, a sequential lock's
 * sequence) and carries the owner token and fence: it is a capability
 * (whoever has it can release the lock) and a secret, to pass over a
 * trusted channel and never log. Local, no round trip. On success this
 * handle stops renewing and forgets the grant, as after a release: it
 * reads as not held, and releasing it is HILOCK_ENOTOWNED. HILOCK_EINVAL
 * (nothing changes, *len says the length needed) if buf is NULL or size is
 * not more than the text; HILOCK_ENOTOWNED if there is no grant (or it was
 * lost or lapsed); HILOCK_EFORKED in a forked child; HILOCK_ENOTSUP for a
 * reentrant or read-write lock (their owner is "client id:thread id", not
 * a token: release it and acquire it where it is needed) and a Redlock. */
HILOCK_API int hilock_hold_export(hilock_hold *h, char *buf, size_t size,
                                  size_t *len);

/* Destructor of any handle: stops its renewal and frees it; does not
 * release a grant (it lapses at its TTL). NULL is a no-op. */
HILOCK_API void hilock_hold_free(hilock_hold *h);

/* The hold of a family handle. */
/* BEGIN generated families: handles */
struct hilock_lock;
struct hilock_rlock;
struct hilock_semaphore;
struct hilock_fair_lock;
struct hilock_rwlock;
struct hilock_multi_lock;
struct hilock_sequential_lock;
struct hilock_segmented_lock;
struct hilock_redlock;
struct hilock_election;
#if !defined(__cplusplus) && defined(__STDC_VERSION__) && \
    __STDC_VERSION__ >= 201112L
#define HILOCK_HOLD(lk)                                                    \
  _Generic((lk),                                                           \
      struct hilock_hold *: (hilock_hold *)(lk),                           \
      struct hilock_lock *: (hilock_hold *)(lk),                           \
      struct hilock_rlock *: (hilock_hold *)(lk),                          \
      struct hilock_semaphore *: (hilock_hold *)(lk),                      \
      struct hilock_fair_lock *: (hilock_hold *)(lk),                      \
      struct hilock_rwlock *: (hilock_hold *)(lk),                         \
      struct hilock_multi_lock *: (hilock_hold *)(lk),                     \
      struct hilock_sequential_lock *: (hilock_hold *)(lk),                \
      struct hilock_segmented_lock *: (hilock_hold *)(lk),                 \
      struct hilock_redlock *: (hilock_hold *)(lk),                        \
      struct hilock_election *: (hilock_hold *)(lk),                       \
      const struct hilock_hold *: (const hilock_hold *)(lk),               \
      const struct hilock_lock *: (const hilock_hold *)(lk),               \
      const struct hilock_rlock *: (const hilock_hold *)(lk),              \
      const struct hilock_semaphore *: (const hilock_hold *)(lk),          \
      const struct hilock_fair_lock *: (const hilock_hold *)(lk),          \
      const struct hilock_rwlock *: (const hilock_hold *)(lk),             \
      const struct hilock_multi_lock *: (const hilock_hold *)(lk),         \
      const struct hilock_sequential_lock *: (const hilock_hold *)(lk),    \
      const struct hilock_segmented_lock *: (const hilock_hold *)(lk),     \
      const struct hilock_redlock *: (const hilock_hold *)(lk),            \
      const struct hilock_election *: (const hilock_hold *)(lk))
#else
#define HILOCK_HOLD(lk) ((hilock_hold *)(lk))
#endif
/* END generated families */

/* ## The verbs of every family -----------------------------------------------
 * Declared here once, for every family's handle (HILOCK_HOLD(lk)); each
 * family's header says which it has and only what differs or comes in
 * addition. Every verb returns HILOCK_EINVAL for a NULL handle,
 * and HILOCK_ENOTSUP, with a message naming the family and the verb, where
 * the family lacks it: extend and renew on a reentrant or read-write lock,
 * extend on a semaphore (its renew remains), and both on a simple lock (no
 * TTL). A read-write lock's verbs are its write side's (the read side's are
 * in rwlock.h).
 *
 * Constructor (each family's own): makes a handle for the named lock;
 * nothing is sent to Redis. ttl_ms in HILOCK_TTL_MIN_MS..HILOCK_TTL_MAX_MS.
 * Returns HILOCK_OK, HILOCK_EINVAL, HILOCK_ENOMEM or HILOCK_ECLOSED. */

/* One attempt. HILOCK_OK: granted (see hilock_hold_fence); HILOCK_BUSY:
 * held by someone else. HILOCK_EINVAL if this handle already holds it (a
 * reentrant lock re-enters instead). */
HILOCK_API int hilock_hold_try_acquire(hilock_hold *h);

/* Attempt until granted or wait_ms has passed (0: one attempt, as
 * try_acquire; HILOCK_WAIT_FOREVER: no limit). Returns HILOCK_OK,
 * HILOCK_BUSY (not granted in time), or an error. */
HILOCK_API int hilock_hold_acquire(hilock_hold *h, int64_t wait_ms);

/* Owner-checked, in one script. HILOCK_ENOTOWNED if the grant lapsed or
 * belongs to someone else (nothing is deleted then). */
HILOCK_API int hilock_hold_release(hilock_hold *h);

/* Set the remaining TTL to ms (replace != 0) or add ms to it (replace ==
 * 0), only while still owned; never re-creates an expired key.
 * HILOCK_ENOTOWNED if not owned. */
HILOCK_API int hilock_hold_extend(hilock_hold *h, int64_t ms, int replace);

/* extend(ttl_ms, replace = 1); a semaphore's moves its permit's expiry. */
HILOCK_API int hilock_hold_renew(hilock_hold *h);

/* Settings some families have; HILOCK_ENOTSUP (naming the family) where a
 * family has none, and 0 read. The lock delay (lock.h: the lock, the lease,
 * the multi-key, the fair, the sequential and the reentrant lock, and the
 * read-write lock's write grants) and a line's heartbeat window (the fair
 * and the sequential lock); each family's header says what they mean for
 * it (and may wrap them for its handle). */
HILOCK_API int hilock_hold_set_lock_delay(hilock_hold *h, int64_t delay_ms);
HILOCK_API int64_t hilock_hold_lock_delay_ms(const hilock_hold *h);
HILOCK_API int hilock_hold_set_heartbeat(hilock_hold *h, int64_t window_ms);
HILOCK_API int64_t hilock_hold_heartbeat_ms(const hilock_hold *h);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_HOLD_H */
