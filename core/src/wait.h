/* hilock internals, waiting: the shared waiting hub (hub.c), direct waits
 * and the acquire loops every family's acquire runs in (wait.c). Uses the
 * base layer and the runtime's structs; the families use it through the
 * acquire spec. */
#ifndef HILOCK_WAIT_H
#define HILOCK_WAIT_H

#include <stddef.h>
#include <stdint.h>

#include "base.h"
#include "runtime.h"

/* ## Waiting ------------------------------------------------------------- */

/* Shared waiting (hub.c). hilock__hub_wait sleeps until a release of the
 * wake list key rings and this thread pops a wake-up (*woken = 1), or
 * bound_ms passes; HILOCK__HUB_OFF if the client cannot wait that way (the
 * server refused SUBSCRIBE): the caller blocks in BLPOP instead. */
#define HILOCK__HUB_OFF 900
/* How a family's waiters are woken (the wake argument of the waits below):
 * HILOCK__WAKE_TAKES: the caller's next attempt takes a rung wake-up
 * itself (its script pops the wake list); HILOCK__WAKE_CHANNEL: the wake
 * key is a pub/sub channel with no list behind it (Redisson's): any
 * message on it lets every waiter of the client try again, a look at the
 * list means another attempt, and there is nothing to block on in BLPOP
 * (without the shared waiting the wait naps, hilock__redisson_nap). */
#define HILOCK__WAKE_TAKES 1
#define HILOCK__WAKE_CHANNEL 2
/* Whether any of c's waits (threads or async) is in the shared waiting on
 * key's channel. */
int hilock__hub_waited(hilock_client *c, const char *key, size_t keylen);
/* Count a thread into (d = 1) or out of (-1) c's waiting threads;
 * shared: it waits in the shared waiting (not in a BLPOP of its own). */
void hilock__waiting_add(hilock_client *c, int d, int shared);
/* Threads in the shared waiting of every client of the process. */
int hilock__waiting_all(void);
/* tried_us: when the caller's last attempt began (hilock__now_us; 0 if
 * unknown): a subscription confirmed before it needs no first look.
 * wake: HILOCK__WAKE_* flags. With WAKE_TAKES a rung waiter returns
 * *woken = 2 at once instead of popping first. */
int hilock__hub_wait(hilock_client *c, hilock__err *e, const char *key,
                     size_t keylen, int64_t bound_ms, int64_t tried_us,
                     int wake, int *woken);
/* A wait without a thread (async.c). hilock__hub_join registers on key's
 * channel and returns at once (HILOCK__HUB_OFF as above); notify(arg) is
 * then called, with the hub's lock held (it must only take locks of its
 * own), whenever the wait may have moved on, and hilock__hub_check says
 * where it is: asleep, woken (*woken as hilock__hub_wait's), to look at
 * the list (hilock__hub_pop, then check again: 1 popped a wake-up, as
 * woken 1), or to try again (the hub reconnected). hilock__hub_quit ends
 * it (woken: its attempt follows a wake-up). */
typedef struct hilock__hub_ticket hilock__hub_ticket;
#define HILOCK__HUB_SLEEP 0
#define HILOCK__HUB_WOKEN 1
#define HILOCK__HUB_LOOK 2
#define HILOCK__HUB_RETRY 3
int hilock__hub_join(hilock_client *c, hilock__err *e, const char *key,
                     size_t keylen, int wake, int64_t tried_us,
                     void (*notify)(void *), void *arg,
                     hilock__hub_ticket **out);
int hilock__hub_check(hilock_client *c, hilock__hub_ticket *t, int wake,
                      int *woken);
int hilock__hub_pop(hilock_client *c, hilock__err *e, const char *key,
                    size_t keylen);
/* An async runner's idle worker reads the socket itself, as a waiting
 * thread does, so a release that rings one of its waiters wakes the thread
 * that runs the attempt. hilock__hub_want(c, 1) before the turns (the
 * hub's thread then stands by), 0 after; hilock__hub_turn reads for up to
 * ms: 1 if it did, 0 if another reads (or the hub is down); kick ends a
 * turn early (new work for the worker). */
void hilock__hub_want(hilock_client *c, int want);
int hilock__hub_turn(hilock_client *c, int64_t ms);
void hilock__hub_kick(hilock_client *c);
void hilock__hub_quit(hilock_client *c, hilock__hub_ticket *t, int woken);
/* After an acquire whose last wait was woken: the wake list's channel, if
 * nobody waits on it, is due to go at the next turn at the socket (no I/O
 * and no wake-up on the path from wake-up to grant). */
void hilock__hub_settle(hilock_client *c, const char *key, size_t keylen);
/* Before a script that may wake waiters: send the UNSUBSCRIBE of a channel
 * that is due (one atomic load when none is), so that the release's own
 * wake-up does not come back to this process. */
void hilock__hub_flush(hilock_client *c);

/* Sleep until a release of the lock's wake list wakes us (shared waiting,
 * or BLPOP) for up to bound_ms, checking the client's interrupt hook every
 * 100 ms. *woken = 1 if a releaser's wake-up arrived. tried_us: when the
 * last attempt began (see hilock__hub_wait). Returns HILOCK_OK,
 * HILOCK_EINTR or an error. */
int hilock__wait_wake(hilock_client *c, hilock__err *e, const char *key,
                      size_t keylen, int64_t bound_ms, int64_t tried_us,
                      int wake, int *woken);
/* Its first part: a direct wait (BLPOP on a pooled connection) when the
 * client has a place free for one; HILOCK__HUB_OFF when it has none (or
 * refuses BLPOP), else as hilock__wait_wake. */
int hilock__wait_direct(hilock_client *c, hilock__err *e, const char *key,
                        size_t keylen, int64_t bound_ms, int wake,
                        int *woken);
/* Whether hilock__wait_direct would find a place now (none is taken). */
int hilock__direct_free(hilock_client *c, const char *key, size_t keylen,
                        int wake);

/* Run attempt() until it grants (0), fails (< 0) or wait_ms passes
 * (HILOCK_BUSY). Between attempts, sleep on the wake list until a releaser
 * wakes us, bounded by the holder's remaining TTL as reported by attempt()
 * in *pttl (-1: no expiry) and the caller's deadline. An attempt may report
 * a shorter bound (the fair lock's heartbeat interval). */
int hilock__acquire_loop(hilock_client *c, hilock__err *e, const char *wkey,
                         size_t wkeylen, int64_t wait_ms,
                         int (*attempt)(void *arg, int64_t *pttl), void *arg);
/* The same for an attempt whose script can take a rung wake-up itself
 * (pops the wake list first, in the same round trip): during the attempt,
 * hilock__attempt_woken() is 2 when it must (a release rang this waiter),
 * and the script then grants only if the pop found a wake-up. */
int hilock__acquire_loop_taking(hilock_client *c, hilock__err *e,
                                const char *wkey, size_t wkeylen,
                                int64_t wait_ms,
                                int (*attempt)(void *arg, int64_t *pttl),
                                void *arg);
/* An acquire's whole call (joining a line, the loop, leaving the line)
 * within the caller's timeout wait_ms: hilock__call_begin with its bound
 * (none for 0 or forever); give the result to hilock__call_end. */
int64_t hilock__acquire_begin(int64_t wait_ms);
/* A family's acquire, as hilock__acquire_loop_var runs it: attempt(arg)
 * until it grants, sleeping on the wake list *wkey between attempts;
 * wake: HILOCK__WAKE_* flags. */
typedef struct hilock__acquire_spec {
  int (*attempt)(void *arg, int64_t *pttl);
  void *arg;
  const char *const *wkey;
  const size_t *wkeylen;
  int wake; /* HILOCK__WAKE_* flags */
  /* A family whose waiters queue (fair, sequential): begin (refuse a
   * second grant, draw a waiter id; queueing when the caller will wait)
   * comes first, and every end but a grant leaves the queue (a one-shot
   * try leaves only after an error). NULL for the others. */
  int (*begin)(void *arg, int queue);
  void (*leave)(void *arg);
  /* Called once when the acquire ends (NULL: nothing to do), with its
   * status; returns the status to report (Redlock reports a missing quorum
   * where the wait ran out). A family whose arg is the context of one
   * acquire frees it here. */
  int (*done)(void *arg, int status);
  /* An event loop's wait key when it depends on the owner (Redisson's fair
   * lock: a channel per waiter): written into buf (cap bytes) by the
   * operation's own step, its length returned. NULL: *wkey. */
  size_t (*wkey_for)(void *arg, char *buf, size_t cap);
} hilock__acquire_spec;
/* One attempt of s, as the loop makes it after a wait that ended with
 * woken (see hilock__attempt_woken). */
int hilock__acquire_step(const hilock__acquire_spec *s, int woken,
                         int64_t *pttl);
/* hilock__acquire_loop_var for s. */
int hilock__acquire(hilock_client *c, hilock__err *e,
                    const hilock__acquire_spec *s, int64_t wait_ms);
/* A spec whose attempt takes a rung wake-up itself (HILOCK__WAKE_TAKES). */
void hilock__spec(hilock__acquire_spec *s, int (*attempt)(void *, int64_t *),
                  void *arg, const void *wkey, const size_t *wkeylen);
/* A queue family's spec (wake 0; begin and leave). */
void hilock__spec_queue(hilock__acquire_spec *s,
                        int (*begin)(void *, int),
                        int (*attempt)(void *, int64_t *),
                        void (*leave)(void *), void *arg, const void *wkey,
                        const size_t *wkeylen);
/* The end of an acquire of s that made its begin (queue: it would wait)
 * with status: leave the queue unless it granted (a one-shot try only
 * after an error), then done; returns the status to report. */
int hilock__spec_end(const hilock__acquire_spec *s, int queue, int status);

/* The blocking acquire of a hold whose family has a spec. */
int hilock__hold_acquire(struct hilock__hold *h, int64_t wait_ms);

/* For the attempt in progress on this thread: 0 (first attempt, or no
 * wake-up), 1 (a wake-up was taken for it) or 2 (rung: it must take it). */
int hilock__attempt_woken(void);
/* The same for an attempt that chooses the wake list to sleep on (a
 * multi-key lock waits on the key that blocked it): *wkey and *wkeylen are
 * read after every attempt. wake: HILOCK__WAKE_* flags. */
int hilock__acquire_loop_var(hilock_client *c, hilock__err *e,
                             const char *const *wkey, const size_t *wkeylen,
                             int wake, int64_t wait_ms,
                             int (*attempt)(void *arg, int64_t *pttl),
                             void *arg);

/* Deadlock detection (deadlock.c; hilock_options.detect_deadlocks): the
 * state of one blocking acquire. hilock__dl_begin at its first attempt (h:
 * the hold it acquires, NULL: the one hilock__dl_expect named; off unless the client detects and the
 * family's holder is readable); hilock__dl_bound shortens a sleep to the
 * next check; hilock__dl_check, after a busy attempt once the check is
 * due, records the wait and walks the graph: HILOCK_EDEADLK (e set,
 * naming the cycle) if this wait is the victim of a confirmed cycle, else
 * HILOCK_OK (its own failures are never the acquire's); hilock__dl_end
 * when the acquire ends deletes the wait's record. */
#define HILOCK__DL_OWNER 96
#define HILOCK__DL_REC 3072
typedef struct hilock__dl {
  int on, registered;
  struct hilock__hold *h;
  int64_t delay_ms, next_ms, start_wall_ms;
  uint64_t serial;
  char owner[HILOCK__DL_OWNER];
  size_t ownerlen;
  char rec[HILOCK__DL_REC];
  size_t reclen;
} hilock__dl;
void hilock__dl_begin(hilock_client *c, hilock__dl *d, struct hilock__hold *h);
/* The public blocking acquire of h (family.c) names the hold its loop is
 * for; hilock__dl_begin(c, d, NULL) takes it (and forgets it). */
void hilock__dl_expect(struct hilock__hold *h, int64_t wait_ms);
int64_t hilock__dl_bound(const hilock__dl *d, int64_t bound_ms);
int hilock__dl_check(hilock_client *c, hilock__err *e, hilock__dl *d);
void hilock__dl_end(hilock_client *c, hilock__dl *d);

/* Heartbeated waiters (fair lock, sequential lock): a waiter's liveness
 * window defaults to its lock's TTL clamped to min_ms..max_ms. A waiter
 * re-checks at least every window/3, and sooner when what it watches (the
 * holder's TTL, its predecessor's session: watch_ms > 0) runs out first;
 * hilock__beat_bound gives that sleep for hilock__acquire_loop. */
int64_t hilock__beat_default(int64_t ttl_ms, int64_t min_ms, int64_t max_ms);
int64_t hilock__beat_bound(int64_t beat_ms, int64_t watch_ms);

/* Without the shared waiting there is no list to block on behind a
 * Redisson channel (HILOCK__WAKE_CHANNEL): sleep at most 500 ms of
 * bound_ms (so a Redisson release is noticed that soon), ending early when
 * the client closes or its interrupt hook fires. Returns HILOCK_OK (no
 * wake-up) or the error (redisson.c). */
int hilock__redisson_nap(hilock_client *c, hilock__err *e, int64_t bound_ms);

#endif /* HILOCK_WAIT_H */
