/* Waiting without polling: the releasing script pushes one wake-up onto the
 * lock's wake list (and rings it, see hub.c), so one waiter wakes per
 * release. A blocked acquirer sleeps in the client's shared waiting
 * (hub.c), or, when that is off or refused, in BLPOP on the list over a
 * connection of its own. Wake-ups grant nothing: the woken waiter runs the
 * acquire script again. Every sleep is bounded by the holder's remaining
 * TTL and the caller's deadline, so a crashed holder or a lost wake-up
 * costs at most one TTL. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "holds.h"
#include "route.h"
#include "wait.h"

/* A caller's timeout bounds the whole acquire: connecting, reconnecting,
 * each attempt's reply and each wait. One round trip may overrun it by at
 * most this much (an attempt started just before the deadline). */
#define CALL_SLACK_MS 250

static int blpop_wait(hilock_client *c, hilock__err *e, const char *key,
                      size_t keylen, int64_t bound_ms, int outside, int *woken);

static int waiting_all; /* every client's threads in the shared waiting */

void hilock__waiting_add(hilock_client *c, int d, int shared) {
  __atomic_add_fetch(&c->waiting, d, __ATOMIC_ACQ_REL);
  if (shared) __atomic_add_fetch(&waiting_all, d, __ATOMIC_ACQ_REL);
}

int hilock__waiting_all(void) {
  return __atomic_load_n(&waiting_all, __ATOMIC_ACQUIRE);
}

/* A place among the client's direct waits, if one is free (after
 * hilock__direct_free). */
static int direct_claim(hilock_client *c) {
  int n = __atomic_load_n(&c->direct, __ATOMIC_ACQUIRE);
  while (n < c->rt.opts.direct_waiters)
    if (__atomic_compare_exchange_n(&c->direct, &n, n + 1, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      return 1;
  return 0;
}

/* A direct wait: BLPOP on the wake list, on a connection of its own, as
 * with shared_waiting off; the server hands the release's wake-up to this
 * thread itself. A server that refuses BLPOP (an ACL without it) turns
 * direct waits off for the client: the wait goes on in the shared
 * waiting. */
static int direct_wait(hilock_client *c, hilock__err *e, const char *key,
                       size_t keylen, int64_t end_ms, int *woken) {
  int64_t left = end_ms - hilock__now_ms();
  int rc;
  hilock__waiting_add(c, 1, 0);
  rc = blpop_wait(c, e, key, keylen, left < 1 ? 1 : left, 0, woken);
  hilock__waiting_add(c, -1, 0);
  __atomic_sub_fetch(&c->direct, 1, __ATOMIC_ACQ_REL);
  if (rc == HILOCK_ENOPERM) {
    __atomic_store_n(&c->direct_off, 1, __ATOMIC_RELEASE);
    hilock__log(&c->rt, HILOCK_LOG_INFO, NULL, 0,
                "BLPOP refused: waits share the subscriber connection");
    return HILOCK__HUB_OFF;
  }
  return rc;
}

int hilock__direct_free(hilock_client *c, const char *key, size_t keylen,
                        int wake) {
  const hilock_options *o = &c->rt.opts;
  /* Direct when a place is free and no waiter of this client on the same
   * lock is in the shared waiting (it is ahead: a release rings it, and it
   * comes back to a free place), else shared. The wait's connection counts
   * in the pool, which keeps one for commands; a pool busy to its bound
   * leaves the wait to the shared waiting. */
  return o->shared_waiting && o->direct_waiters > 0 &&
         !__atomic_load_n(&c->direct_off, __ATOMIC_ACQUIRE) &&
         !(wake & HILOCK__WAKE_CHANNEL) &&
         __atomic_load_n(&c->direct, __ATOMIC_ACQUIRE) < o->direct_waiters &&
         (o->max_connections <= 0 || o->max_connections > o->direct_waiters) &&
         !hilock__hub_waited(c, key, keylen) && hilock__pool_room(c);
}

int hilock__wait_direct(hilock_client *c, hilock__err *e, const char *key,
                        size_t keylen, int64_t bound_ms, int wake,
                        int *woken) {
  *woken = 0;
  if (bound_ms < 1) bound_ms = 1;
  if (hilock__direct_free(c, key, keylen, wake) && direct_claim(c))
    return direct_wait(c, e, key, keylen, hilock__now_ms() + bound_ms, woken);
  return HILOCK__HUB_OFF;
}

int hilock__wait_wake(hilock_client *c, hilock__err *e, const char *key,
                      size_t keylen, int64_t bound_ms, int64_t tried_us,
                      int wake, int *woken) {
  int rc;
  int64_t end;
  if (bound_ms < 1) bound_ms = 1;
  end = hilock__now_ms() + bound_ms;
  rc = hilock__wait_direct(c, e, key, keylen, bound_ms, wake, woken);
  if (rc != HILOCK__HUB_OFF) return rc;
  if (end - hilock__now_ms() < bound_ms)
    bound_ms = end - hilock__now_ms() < 1 ? 1 : end - hilock__now_ms();
  rc = hilock__hub_wait(c, e, key, keylen, bound_ms, tried_us, wake, woken);
  if (rc != HILOCK__HUB_OFF) return rc;
  if (wake & HILOCK__WAKE_CHANNEL)
    return hilock__redisson_nap(c, e, bound_ms);
  hilock__waiting_add(c, 1, 0);
  rc = blpop_wait(c, e, key, keylen, bound_ms, 1, woken);
  hilock__waiting_add(c, -1, 0);
  return rc;
}

/* Ends a BLPOP early: the client closes, or the interrupt hook fires. */
static int wait_stop(void *arg) {
  hilock_client *c = arg;
  return __atomic_load_n(&c->rt.closed, __ATOMIC_RELAXED) ||
         (c->rt.opts.interrupt && c->rt.opts.interrupt(c->rt.opts.interrupt_arg));
}

/* A wait's connection broke (a restart, a failover, an idle kill): the
 * server may be going down, and a connection opened to it now may be
 * accepted and then reset, which would fail the next attempt. So look until
 * a fresh connection answers PING (through the client's routing: Sentinel
 * is asked again after a failover), pausing 20 ms and more between looks,
 * until end_ms (the wait's bound) at the latest. HILOCK_OK: no wake-up;
 * HILOCK_EINTR or HILOCK_ECLOSED. */
static int back_up(hilock_client *c, hilock__err *e, int64_t end_ms) {
  const char *argv[1] = {"PING"};
  size_t lens[1] = {4};
  int64_t pause = 20;
  for (;;) {
    hilock__err ignored;
    redisReply *r = NULL;
    int64_t left;
    int rc;
    if (wait_stop(c))
      return __atomic_load_n(&c->rt.closed, __ATOMIC_RELAXED)
                 ? hilock__set_err(e, HILOCK_ECLOSED,
                                   "client closed while waiting")
                 : hilock__set_err(e, HILOCK_EINTR, "wait interrupted");
    hilock__clear_err(&ignored);
    rc = hilock__command(c, &ignored, 1, argv, lens, &r);
    if (r != NULL) freeReplyObject(r);
    /* Any answer (an ACL without PING too) is a server up. */
    if (rc != HILOCK_EIO && rc != HILOCK_ETIMEDOUT) return HILOCK_OK;
    left = end_ms - hilock__now_ms();
    if (left <= 0) return HILOCK_OK;
    hilock__sleep_ms(pause < left ? pause : left);
    pause = pause * 2 > 500 ? 500 : pause * 2;
  }
}

/* The wait on a connection of its own: BLPOP on the wake list, sent with
 * hilock__conn_batch, with the client's interrupt hook asked every 100 ms.
 * outside: the connection is held outside the pool's bound (so any number
 * of waiters never starve the commands, a release among them); else it
 * counts in the pool (a direct wait: direct_claim keeps a place for the
 * commands). */
static int blpop_wait(hilock_client *c, hilock__err *e, const char *key,
                      size_t keylen, int64_t bound_ms, int outside, int *woken) {
  char secs[32];
  const char *argv[3] = {"BLPOP", key, secs};
  size_t lens[3] = {5, keylen, 0};
  hilock__req q = {.argc = 3, .argv = argv, .lens = lens};
  hilock__send s = {0};
  hilock__err before = *e;
  int64_t slack, own;
  int rc;

  /* BLPOP takes fractional seconds (Redis >= 6); 0 would mean forever. */
  lens[2] = (size_t)snprintf(secs, sizeof(secs), "%" PRId64 ".%03" PRId64,
                             bound_ms / 1000, bound_ms % 1000);
  /* The reply may take the wait's bound, and the server that long again
   * to answer; the caller's deadline ends it sooner (no wake-up). On a
   * cluster the list lives on its slot's master (the hash tag puts it next
   * to the lock); the dispatcher follows the slot (MOVED, ASK) and a master
   * that moved (Sentinel) within the wait's bound. */
  slack = c->rt.opts.command_timeout_ms > 0 ? c->rt.opts.command_timeout_ms : 5000;
  own = hilock__now_ms() + bound_ms + slack;
  s.flags = HILOCK__SEND_BLOCKING;
  /* A BLPOP sent again (a cluster recovering) goes within the slack, and
   * keeps its bound: its reply may take one more slack. */
  s.deadline_ms = hilock__now_ms() + (bound_ms < slack ? bound_ms : slack);
  s.reply_by_ms = hilock__call_cut(own + slack);
  if (hilock__call_deadline() < s.reply_by_ms)
    s.reply_by_ms = hilock__call_deadline();
  s.outside = outside;
  s.stop = wait_stop;
  s.stop_arg = c;
  rc = hilock__dispatch(c, e, &s, &q, 1);
  if (rc == HILOCK_OK) {
    if (q.reply->type == REDIS_REPLY_ARRAY) *woken = 1;
    else if (q.reply->type != REDIS_REPLY_NIL)
      rc = hilock__set_err(e, HILOCK_EPROTO, "unexpected reply to BLPOP");
    freeReplyObject(q.reply);
    return rc;
  }
  if (s.broke_status == HILOCK_OK) {
    /* An error reply. The master moved (the next attempt goes to the new
     * one), a slot still moving or a cluster still recovering: no wake-up;
     * the next attempt routes afresh. */
    if (rc == HILOCK__FAILOVER || rc == HILOCK_ECLUSTER) {
      *e = before;
      return HILOCK_OK;
    }
    return rc == HILOCK__NOSCRIPT ? (e->code = HILOCK_EREDIS) : rc;
  }
  /* The connection broke or timed out: the BLPOP may still be pending on
   * its socket, which went (the server unblocks the client; nothing is
   * popped). */
  if (s.broke_status == HILOCK_EINTR)
    return __atomic_load_n(&c->rt.closed, __ATOMIC_RELAXED)
               ? hilock__set_err(e, HILOCK_ECLOSED,
                                 "client closed while waiting")
               : hilock__set_err(e, HILOCK_EINTR, "wait interrupted");
  if (s.broke_status == HILOCK_ETIMEDOUT) {
    /* The caller's time is up: no wake-up came, which is no error; else
     * the server did not answer a bounded BLPOP. */
    if (s.reply_by_ms < own + slack) {
      *e = before;
      return HILOCK_OK;
    }
    return hilock__set_err(e, HILOCK_ETIMEDOUT,
                           "BLPOP: no reply %" PRId64 " ms past its timeout",
                           slack);
  }
  /* A cluster node went away under the wait (killed, failed over): no
   * wake-up; the next attempt finds the slot's new master within the
   * reconnect budget, or reports why it cannot (the dispatcher read the
   * map again). */
  if (c->cl != NULL) {
    *e = before;
    return HILOCK_OK;
  }
  /* A broken pooled connection is not the lock's business: report "no
   * wake-up", once the server answers again (below), and let the next
   * attempt go. */
  if (s.broke_fresh) return rc;
  *e = before;
  return back_up(c, e, s.reply_by_ms < own + slack ? s.reply_by_ms : own - slack);
}

/* Whether a wake-up ended this thread's last sleep, for the attempt in
 * progress (see hilock__attempt_woken). */
#define tl_woken hilock__tl.woken

int hilock__attempt_woken(void) { return tl_woken; }

int hilock__acquire_step(const hilock__acquire_spec *s, int woken,
                         int64_t *pttl) {
  int rc;
  tl_woken = woken;
  rc = s->attempt(s->arg, pttl);
  tl_woken = 0;
  return rc;
}

int hilock__spec_end(const hilock__acquire_spec *s, int queue, int status) {
  if (s->leave != NULL && status != HILOCK_OK && (queue || status < 0))
    s->leave(s->arg);
  return s->done != NULL ? s->done(s->arg, status) : status;
}

int64_t hilock__acquire_begin(int64_t wait_ms) {
  return hilock__call_begin(wait_ms > 0 && wait_ms <= HILOCK__WAIT_CAP_MS
                                ? hilock__now_ms() + wait_ms + 1 + CALL_SLACK_MS
                                : INT64_MAX);
}

int hilock__acquire(hilock_client *c, hilock__err *e,
                    const hilock__acquire_spec *s, int64_t wait_ms) {
  int64_t bound, outer;
  int rc;
  if (s->begin == NULL)
    return hilock__acquire_loop_var(c, e, s->wkey, s->wkeylen, s->wake,
                                    wait_ms, s->attempt, s->arg);
  if (wait_ms < 0 && wait_ms != HILOCK_WAIT_FOREVER)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "wait must be >= 0 ms or HILOCK_WAIT_FOREVER");
  /* The caller's timeout bounds joining the line and leaving it too (a
   * slot half migrated answers both TRYAGAIN for as long as it lasts). */
  outer = hilock__acquire_begin(wait_ms);
  rc = s->begin(s->arg, wait_ms != 0);
  if (rc == HILOCK_OK) {
    if (wait_ms == 0)
      rc = hilock__stat_try(&c->rt, s->attempt(s->arg, &bound));
    else
      rc = hilock__acquire_loop_var(c, e, s->wkey, s->wkeylen, s->wake,
                                    wait_ms, s->attempt, s->arg);
    rc = hilock__spec_end(s, wait_ms != 0, rc);
  }
  hilock__call_end(outer);
  return rc;
}

void hilock__spec(hilock__acquire_spec *s, int (*attempt)(void *, int64_t *),
                  void *arg, const void *wkey, const size_t *wkeylen) {
  s->attempt = attempt;
  s->arg = arg;
  s->wkey = (const char *const *)wkey; /* a char * or const char * field */
  s->wkeylen = wkeylen;
  s->wake = HILOCK__WAKE_TAKES;
  s->begin = NULL;
  s->leave = NULL;
  s->done = NULL;
  s->wkey_for = NULL;
}

void hilock__spec_queue(hilock__acquire_spec *s,
                        int (*begin)(void *, int),
                        int (*attempt)(void *, int64_t *),
                        void (*leave)(void *), void *arg, const void *wkey,
                        const size_t *wkeylen) {
  hilock__spec(s, attempt, arg, wkey, wkeylen);
  s->wake = 0;
  s->begin = begin;
  s->leave = leave;
}

int hilock__hold_acquire(hilock__hold *h, int64_t wait_ms) {
  hilock__acquire_spec s;
  h->fam->acquire_spec(h, &s);
  return hilock__acquire(h->client, &h->err, &s, wait_ms);
}

int hilock__acquire_loop(hilock_client *c, hilock__err *e, const char *wkey,
                         size_t wkeylen, int64_t wait_ms,
                         int (*attempt)(void *arg, int64_t *pttl), void *arg) {
  return hilock__acquire_loop_var(c, e, &wkey, &wkeylen, 0, wait_ms, attempt,
                                  arg);
}

int hilock__acquire_loop_taking(hilock_client *c, hilock__err *e,
                                const char *wkey, size_t wkeylen,
                                int64_t wait_ms,
                                int (*attempt)(void *arg, int64_t *pttl),
                                void *arg) {
  return hilock__acquire_loop_var(c, e, &wkey, &wkeylen, HILOCK__WAKE_TAKES,
                                  wait_ms, attempt,
                                  arg);
}

int hilock__acquire_loop_var(hilock_client *c, hilock__err *e,
                             const char *const *wkey, const size_t *wkeylen,
                             int wake, int64_t wait_ms,
                             int (*attempt)(void *arg, int64_t *pttl),
                             void *arg) {
  int64_t deadline, outer, start_us = 0;
  int woken = 0, waited = 0, rc;
  hilock__dl dl;
  if (wait_ms < 0 && wait_ms != HILOCK_WAIT_FOREVER)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "wait must be >= 0 ms or HILOCK_WAIT_FOREVER");
  if (wait_ms > HILOCK__WAIT_CAP_MS) wait_ms = HILOCK_WAIT_FOREVER;
  hilock__dl_begin(c, &dl, NULL);
  if (wait_ms == 0) dl.on = 0;
  /* + 1: the clock reads whole milliseconds, and a wait must never end
   * before the caller's timeout. */
  deadline = wait_ms < 0    ? INT64_MAX
             : wait_ms == 0 ? hilock__now_ms()
                            : hilock__now_ms() + wait_ms + 1;
  /* wait_ms 0 asks for one attempt, bounded by the client's own timeouts. */
  outer = hilock__call_begin(wait_ms > 0 ? deadline + CALL_SLACK_MS
                                         : INT64_MAX);
  for (;;) {
    int64_t pttl = -1, left, bound, tried_us = hilock__now_us();
    tl_woken = woken;
    rc = attempt(arg, &pttl);
    tl_woken = 0;
    if (rc != HILOCK_BUSY) break;
    left = deadline == INT64_MAX ? INT64_MAX : deadline - hilock__now_ms();
    if (left <= 0) break;
    /* Sleep until woken, the holder's expiry, or our deadline. A holder
     * with no expiry (-1) is re-checked at least every 30 s. */
    bound = pttl >= 0 ? pttl + 1 : 30000;
    if (left < bound) bound = left;
    if (dl.on) {
      if (hilock__now_ms() >= dl.next_ms) {
        rc = hilock__dl_check(c, e, &dl);
        if (rc != HILOCK_OK) break;
      }
      bound = hilock__dl_bound(&dl, bound);
    }
    if (!waited) start_us = tried_us; /* the wait time: from the first try */
    waited = 1;
    rc = hilock__wait_wake(c, e, *wkey, *wkeylen, bound, tried_us, wake,
                           &woken);
    if (rc != HILOCK_OK) break;
  }
  if (woken) hilock__hub_settle(c, *wkey, *wkeylen);
  hilock__call_end(outer);
  if (dl.registered) hilock__dl_end(c, &dl);
  return hilock__stat_acquire(&c->rt, rc, wait_ms, start_us, waited);
}

int64_t hilock__beat_default(int64_t ttl_ms, int64_t min_ms, int64_t max_ms) {
  if (ttl_ms < min_ms) return min_ms;
  if (ttl_ms > max_ms) return max_ms;
  return ttl_ms;
}

int64_t hilock__beat_bound(int64_t beat_ms, int64_t watch_ms) {
  int64_t every = beat_ms / 3;
  if (every < 1) every = 1;
  return watch_ms > 0 && watch_ms < every ? watch_ms : every;
}
