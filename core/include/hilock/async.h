/* hilock: acquire and release without blocking the caller.
 *
 * A hilock_async runs lock operations for an event loop. The loop starts an
 * operation (hilock_async_acquire, hilock_async_release), watches one file
 * descriptor (hilock_async_fd) and, when it is readable, takes what has
 * finished (hilock_async_take): each finished operation comes back once,
 * with the id it was started with, its status and, if it failed, why.
 *
 * Nothing here holds a thread or a connection per waiting operation: an
 * acquire that finds the lock held sleeps on the client's shared waiting
 * connection (see docs/waiting.md), or the first one in its client's
 * direct wait, and is tried again when a release rings it, when the
 * holder's TTL runs out or when its wait ends.
 *
 * Round trips run on the loop's own thread without blocking it: a started
 * operation runs at once on a fiber (a small stack of its own) until its
 * request is written, and resumes when hilock_async_take finds its reply
 * on the socket; the fd is an epoll fd that turns readable for that. So
 * the operations of a runner move on only while its loop watches the fd
 * and takes. A few run this way at once (those beyond, and an acquire's
 * wait and the attempts a release rings, run on a small fixed pool of
 * threads), each round trip bounded by the client's command timeout: the
 * loop's thread never waits on the network. A blocking call of the same
 * client made on the loop's thread still finds a pooled connection (the
 * fibers leave two of the pool's to others), but it stalls the loop's
 * fibers while it runs.
 *
 * A minimal loop (see examples/async_poll.c):
 *
 *   hilock_async *a;
 *   hilock_async_new(client, 0, &a);
 *   hilock_async_acquire(a, HILOCK_HOLD(lk), 0, 5000, NULL, &id);
 *   for (;;) {
 *     struct pollfd p = {hilock_async_fd(a), POLLIN, 0};
 *     hilock_async_done d[16];
 *     poll(&p, 1, -1);
 *     for (size_t i = 0, n = hilock_async_take(a, d, 16); i < n; i++)
 *       ... d[i].id finished with d[i].status ...
 *   }
 *
 * Which locks: the lock (expiring, simple, lease), the reentrant and
 * read-write locks (owned by an owner number the caller gives, such as a
 * task's), the semaphore, the multi-key, segmented, fair and sequential
 * locks (an acquire of the last two that ends without a grant leaves the
 * queue), and Redlock (on any runner, its own client's or one without a
 * client).
 *
 * Cancel: hilock_async_cancel ends an acquire with HILOCK_ECANCELED. A
 * waiting acquire leaves its wait at once; one whose attempt is on the
 * wire waits at most 100 ms more for that attempt's reply, and a grant it
 * got is released before the cancellation is reported. An attempt still
 * unanswered then (a stalled server) is left to the undo of an ambiguous
 * grant: the owner-checked release is queued behind it on its connection,
 * so the server gives back what the attempt may grant right after running
 * it. Either way a cancelled acquire never leaves the lock held. A release
 * is not cancelled: it finishes.
 *
 * Threads: one thread drives a hilock_async (start, take, cancel, free);
 * its fd may be watched from any. The operations it runs itself run on
 * that thread, and only there: free it on that thread while some are
 * still running (hilock_async_pending says), since the free runs them to
 * their end. A hold has at most one operation in
 * flight (the reentrant and read-write locks: one per owner), and no other
 * call uses it meanwhile. Free the hilock_async before its client; freeing
 * it cancels what is still running (and waits for the attempts on the
 * wire). A forked child cannot use its parent's: its starts return
 * HILOCK_EFORKED, and its free leaves the parent's threads alone. */
#ifndef HILOCK_ASYNC_H
#define HILOCK_ASYNC_H

#include <stddef.h>
#include <stdint.h>

#include "hilock/client.h"
#include "hilock/export.h"
#include "hilock/hold.h"
#include "hilock/rwlock.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hilock_async hilock_async;

/* One finished operation. */
typedef struct hilock_async_done {
  uint64_t id;  /* as returned when it started */
  void *data;   /* as given when it started */
  int status;   /* what the blocking call would have returned */
  char errmsg[256]; /* why it failed (status < 0), else "" */
  int value;    /* hilock_async_owned / _locked: the answer (0 or 1) */
} hilock_async_done;

/* At most this many threads run the round trips (0 asks for the default,
 * 2). */
#define HILOCK_ASYNC_WORKERS_MAX 8

/* CONSTRUCTOR: operations on client's locks, with workers threads for the
 * round trips (0: the default). client NULL: a runner for Redlock handles
 * only (a Redlock drives its own connections; it waits between rounds by
 * its retry delay, not on a client's shared waiting). Returns HILOCK_OK,
 * HILOCK_EINVAL, HILOCK_ENOMEM or HILOCK_ECLOSED. */
HILOCK_API int hilock_async_new(hilock_client *client, int workers,
                                hilock_async **out);

/* Readable while finished operations wait to be taken, or while an
 * operation running on the loop's thread has something to go on with (its
 * reply came, its time is up). It may also turn readable a round trip
 * before an acquire that a release woke finishes (so that the loop is
 * awake, not in a long sleep, when it does). Call hilock_async_take each
 * time it is readable: it moves those operations on, and may return 0. */
HILOCK_API int hilock_async_fd(const hilock_async *a);

/* Move the operations running on the loop's thread on (see above), then
 * up to max finished operations into out; returns how many. */
HILOCK_API size_t hilock_async_take(hilock_async *a, hilock_async_done *out,
                                    size_t max);

/* Start acquiring hold (one attempt, then waits), for up to wait_ms
 * (HILOCK_WAIT_FOREVER: no limit; 0: one attempt). Finishes with what the
 * family's acquire returns: HILOCK_OK, HILOCK_BUSY when wait_ms passed,
 * an error, or HILOCK_ECANCELED. *id (may be NULL) names it.
 *
 * owner: who acquires, for the reentrant and read-write locks, whose owner
 * is the calling thread in the blocking API: here any number in 1..HILOCK_ASYNC_OWNER_MAX
 * the caller chooses (a task of an event loop), the same for its release;
 * an owner that acquires again re-enters. Other locks ignore it (pass 0).
 *
 * Returns HILOCK_OK once started, HILOCK_EINVAL (NULL, a bad wait_ms or
 * owner, a hold of another client, or one with an operation of the same
 * owner in flight), HILOCK_ENOTSUP (a lock type not served here),
 * HILOCK_ENOMEM or HILOCK_ECLOSED. */
HILOCK_API int hilock_async_acquire(hilock_async *a, hilock_hold *hold,
                                    uint64_t owner, int64_t wait_ms,
                                    void *data, uint64_t *id);

/* Start releasing hold (owner as above). Finishes with what the family's
 * release returns. Returns as hilock_async_acquire. */
HILOCK_API int hilock_async_release(hilock_async *a, hilock_hold *hold,
                                    uint64_t owner, void *data, uint64_t *id);

/* A read-write lock's read side (hilock_async_acquire and _release on
 * HILOCK_HOLD(rw) are its write side). owner as above: the reader. */
HILOCK_API int hilock_async_read_acquire(hilock_async *a, hilock_rwlock *rw,
                                         uint64_t owner, int64_t wait_ms,
                                         void *data, uint64_t *id);
HILOCK_API int hilock_async_read_release(hilock_async *a, hilock_rwlock *rw,
                                         uint64_t owner, void *data,
                                         uint64_t *id);

/* Round trips on a hold, as the blocking calls (hilock_hold_owned and
 * hilock_hold_locked, whose answer is the finished operation's value; the
 * family's extend and renew, HILOCK_ENOTSUP where it has none). owner as
 * above. Return as hilock_async_acquire. */
HILOCK_API int hilock_async_owned(hilock_async *a, hilock_hold *hold,
                                  uint64_t owner, void *data, uint64_t *id);
HILOCK_API int hilock_async_locked(hilock_async *a, hilock_hold *hold,
                                   uint64_t owner, void *data, uint64_t *id);
HILOCK_API int hilock_async_extend(hilock_async *a, hilock_hold *hold,
                                   uint64_t owner, int64_t ms, int replace,
                                   void *data, uint64_t *id);
HILOCK_API int hilock_async_renew(hilock_async *a, hilock_hold *hold,
                                  uint64_t owner, void *data, uint64_t *id);

/* The largest owner number. */
#define HILOCK_ASYNC_OWNER_MAX 2147483647u

/* Cancel the acquire id (see above). HILOCK_OK if it will finish with
 * HILOCK_ECANCELED, HILOCK_EINVAL if no acquire of that id is in flight
 * (it finished, or was a release). */
HILOCK_API int hilock_async_cancel(hilock_async *a, uint64_t id);

/* Why the last start or cancel on a was refused ("" if it was not);
 * the message of a finished operation is in its hilock_async_done. */
HILOCK_API const char *hilock_async_errmsg(const hilock_async *a);

/* The status of that refusal (HILOCK_OK if it was not); HILOCK_EINVAL for
 * a NULL runner. */
HILOCK_API int hilock_async_errcode(const hilock_async *a);

/* Operations in flight (started, not yet taken). */
HILOCK_API size_t hilock_async_pending(const hilock_async *a);

/* Cancel everything in flight, wait for attempts on the wire (as long as a
 * cancel waits for them), stop the threads and free. NULL is a no-op. */
HILOCK_API void hilock_async_free(hilock_async *a);

#ifdef __cplusplus
}
#endif

#endif /* HILOCK_ASYNC_H */
