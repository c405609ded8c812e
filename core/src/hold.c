/* Holds: the grant state every lock family shares (owner, fence, validity,
 * the granting process, renewal, loss). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "holds.h"
#include "route.h"
#include "scripts.h"

static int64_t drift_us(int64_t ttl_ms) { return ttl_ms * 10 + 2000; }

/* ## The client's list of grants (guarded by wd.mu) ----------------------
 * Every grant of this process is on its client's list from hold_granted to
 * hold_drop, so that closing the client reaches each of them. */

static void live_link(hilock__watchdog *w, hilock__hold *h) {
  if (h->live) return;
  h->live_prev = NULL;
  h->live_next = w->live;
  if (w->live) w->live->live_prev = h;
  w->live = h;
  h->live = 1;
}

static void live_unlink(hilock__watchdog *w, hilock__hold *h) {
  if (!h->live) return;
  if (h->live_prev) h->live_prev->live_next = h->live_next;
  else w->live = h->live_next;
  if (h->live_next) h->live_next->live_prev = h->live_prev;
  h->live_prev = h->live_next = NULL;
  h->live = 0;
}

/* How long closing a client may spend releasing its holds, in all: the
 * client's connect and command timeouts, at most 2 s. */
static int64_t close_deadline(const hilock__runtime *rt) {
  int64_t budget = rt->opts.connect_timeout_ms +
                   (rt->opts.command_timeout_ms > 0 ? rt->opts.command_timeout_ms
                                                    : 1000);
  return hilock__now_ms() + (budget > 2000 ? 2000 : budget);
}

/* Run the family's release of h's grant on the closing thread, by
 * deadline_ms. */
static int close_release(hilock__hold *h, hilock__err *e,
                         int64_t deadline_ms) {
  hilock_client *c = h->client;
  int64_t outer;
  const hilock_client *was;
  redisReply *r = NULL;
  int rc;
  if (h->close_run == NULL) return HILOCK_ENOTSUP;
  if (hilock__now_ms() >= deadline_ms) return HILOCK_ETIMEDOUT;
  outer = hilock__call_begin(deadline_ms);
  was = hilock__closer_set(c);
  rc = h->close_run(h->close_arg, e, &r);
  hilock__closer_set(was);
  hilock__call_end(outer);
  if (r != NULL) freeReplyObject(r);
  return rc;
}

void hilock__holds_close(hilock_client *c) {
  hilock__watchdog *w = &c->rt.wd;
  hilock__hold **all = NULL, *h;
  int n = 0, cap = 0, i;
  pid_t me = hilock__pid();
  int64_t deadline;

  pthread_mutex_lock(&w->mu);
  for (h = w->live; h != NULL; h = h->live_next) cap++;
  if (cap > 0) all = malloc((size_t)cap * sizeof(*all));
  for (h = w->live; h != NULL; h = h->live_next) {
    if (h->pid != me || h->lost || !h->held) continue;
    h->lost = 1;
    h->close_lost = 1;
    if (all != NULL) {
      h->closing = 1; /* cancellers (release, free) wait for us */
      all[n++] = h;
    }
  }
  pthread_mutex_unlock(&w->mu);
  /* No renewal after this: the thread is joined, every hold unlinked. */
  hilock__watchdog_close(&c->rt);
  deadline = close_deadline(&c->rt);
  /* This thread may act on these holds (a loss callback may release one). */
  hilock__closer_set(c);
  for (i = 0; i < n; i++) {
    hilock__err e;
    hilock__clear_err(&e);
    /* Best effort and bounded: past the deadline the rest lapse at TTL. */
    (void)close_release(all[i], &e, deadline);
    if (all[i]->auto_renew) hilock__hold_tell_lost(all[i]);
  }
  hilock__closer_set(NULL);
  pthread_mutex_lock(&w->mu);
  for (i = 0; i < n; i++) all[i]->closing = 0;
  pthread_cond_broadcast(&w->idle);
  pthread_mutex_unlock(&w->mu);
  free(all);
}

void hilock__hold_init_rt(hilock__hold *h, hilock__runtime *rt,
                          const char *rkey, size_t rkeylen,
                          const hilock__script *renew_script,
                          int64_t ttl_ms) {
  memset(h, 0, sizeof(*h));
  h->serial = hilock__serial();
  h->rt = rt;
  h->rkey = rkey;
  h->rkeylen = rkeylen;
  h->renew_script = renew_script;
  h->ttl_ms = ttl_ms;
}

void hilock__hold_init(hilock__hold *h, hilock_client *c, const char *rkey,
                       size_t rkeylen, const hilock__script *renew_script,
                       int64_t ttl_ms) {
  hilock__hold_init_rt(h, &c->rt, rkey, rkeylen, renew_script, ttl_ms);
  hilock__client_ref(c);
  h->client = c;
}

void hilock__hold_destroy(hilock__hold *h) {
  hilock__renewal_cancel(h);
  if (h->live) {
    pthread_mutex_lock(&h->rt->wd.mu);
    live_unlink(&h->rt->wd, h);
    pthread_mutex_unlock(&h->rt->wd.mu);
  }
  if (h->client != NULL) hilock__client_unref(h->client);
  h->client = NULL;
  h->rt = NULL;
}

int hilock__hold_check(hilock__hold *h, const char *verb) {
  if (!hilock__runtime_usable(h->rt))
    return hilock__set_err(&h->err, HILOCK_ECLOSED, "%s: client is closed",
                           verb);
  if (h->held && h->pid != hilock__pid())
    return hilock__set_err(&h->err, HILOCK_EFORKED,
                           "%s: the lock was acquired by process %d; a forked "
                           "child holds nothing",
                           verb, (int)h->pid);
  if (!h->held)
    return hilock__set_err(&h->err, HILOCK_ENOTOWNED,
                           "%s: this handle does not hold the lock", verb);
  return HILOCK_OK;
}

int hilock__hold_granted(hilock__hold *h, int64_t start_us, uint64_t fence) {
  hilock__runtime *rt = h->rt;
  int closed;
  hilock__stat(rt, HILOCK__ST_ACQUIRED);
  pthread_mutex_lock(&rt->wd.mu);
  if (!h->held || h->lost) h->since_us = start_us;
  h->held = 1;
  h->lost = 0;
  h->gone = 0;
  h->close_lost = 0;
  h->told = 0;
  h->pid = hilock__pid();
  h->fence = fence;
  if (rt->opts.detect_deadlocks) h->dl_caller = hilock__caller();
  h->valid_until_us =
      h->ttl_ms > 0 ? start_us + h->ttl_ms * 1000 - drift_us(h->ttl_ms) : 0;
  closed = !hilock__runtime_usable(rt);
  if (!closed) live_link(&rt->wd, h);
  pthread_mutex_unlock(&rt->wd.mu);
  if (closed) {
    /* The client was closed while this grant was on its way: nobody may
     * keep it. Give it back if the family can, else it lapses at TTL. */
    hilock__err e;
    int rc = close_release(h, &e, close_deadline(rt));
    if (rc == HILOCK_OK) {
      hilock__hold_drop(h);
      return hilock__set_err(&h->err, HILOCK_ECLOSED,
                             "client closed during the call; the grant was "
                             "given back");
    }
    pthread_mutex_lock(&rt->wd.mu);
    h->lost = h->close_lost = 1;
    pthread_mutex_unlock(&rt->wd.mu);
    return hilock__set_err(&h->err, HILOCK_ECLOSED,
                           "client closed during the call; the grant is not "
                           "renewed and lapses at its TTL");
  }
  if (h->auto_renew && h->ttl_ms > 0) return hilock__renewal_register(h);
  return HILOCK_OK;
}

int hilock__hold_adopted(hilock__hold *h, uint64_t fence) {
  hilock__runtime *rt = h->rt;
  int64_t start = hilock__now_us();
  pthread_mutex_lock(&rt->wd.mu);
  h->since_us = start;
  h->held = 1;
  h->lost = h->gone = h->close_lost = h->told = 0;
  h->pid = hilock__pid();
  h->fence = fence;
  if (rt->opts.detect_deadlocks) h->dl_caller = hilock__caller();
  h->valid_until_us =
      h->ttl_ms > 0 ? start + h->ttl_ms * 1000 - drift_us(h->ttl_ms) : 0;
  live_link(&rt->wd, h);
  pthread_mutex_unlock(&rt->wd.mu);
  if (h->auto_renew && h->ttl_ms > 0) return hilock__renewal_register(h);
  return HILOCK_OK;
}

void hilock__hold_drop(hilock__hold *h) {
  int lost = 1;
  hilock__renewal_cancel(h);
  if (h->live || h->held) {
    pthread_mutex_lock(&h->rt->wd.mu);
    if (h->live) live_unlink(&h->rt->wd, h);
    lost = h->lost;
    pthread_mutex_unlock(&h->rt->wd.mu);
  }
  /* A grant that ends here, not lost: its hold time. */
  if (h->held && !lost && h->since_us > 0)
    hilock__stat_time(&h->rt->stats.hold, hilock__now_us() - h->since_us);
  h->since_us = 0;
  h->held = 0;
  h->owner[0] = '\0';
  h->ownerlen = 0;
}

void hilock__hold_forget_live(hilock__runtime *rt) {
  hilock__hold *h = rt->wd.live;
  while (h != NULL) {
    hilock__hold *next = h->live_next;
    h->live_prev = h->live_next = NULL;
    h->live = 0;
    h = next;
  }
  rt->wd.live = NULL;
}

void hilock__hold_lost(hilock__hold *h) {
  int found;
  hilock__renewal_cancel(h);
  pthread_mutex_lock(&h->rt->wd.mu);
  found = h->held && !h->lost;
  h->lost = 1;
  pthread_mutex_unlock(&h->rt->wd.mu);
  if (found) {
    hilock__stat(h->rt, HILOCK__ST_LOST);
    hilock__log(h->rt, HILOCK_LOG_ERROR, h->rkey, h->rkeylen,
                "lock lost: the server no longer holds it for this owner");
    hilock__hold_tell_lost(h);
  }
}

void hilock__hold_tell_lost(hilock__hold *h) {
  void (*fn)(void *arg);
  void *arg;
  pthread_mutex_lock(&h->rt->wd.mu);
  fn = h->told ? NULL : h->lost_fn;
  arg = h->lost_arg;
  if (fn != NULL) h->told = 1;
  pthread_mutex_unlock(&h->rt->wd.mu);
  if (fn != NULL) fn(arg);
}

void hilock__hold_lapse(hilock__hold *h) {
  int lapsed;
  if (!h->held || h->ttl_ms == 0 || h->pid != hilock__pid()) return;
  pthread_mutex_lock(&h->rt->wd.mu);
  lapsed = !h->lost && h->valid_until_us <= hilock__now_us();
  pthread_mutex_unlock(&h->rt->wd.mu);
  if (lapsed) hilock__hold_lost(h);
}

void hilock__hold_ended(hilock__hold *h, int gone) {
  if (gone) {
    hilock__hold_lost(h); /* counted once: not again if already reported */
    pthread_mutex_lock(&h->rt->wd.mu);
    h->gone = 1;
    pthread_mutex_unlock(&h->rt->wd.mu);
  }
  hilock__hold_drop(h);
}

void hilock__hold_extended(hilock__hold *h, int64_t start_us, int64_t ttl_ms) {
  int64_t until;
  /* The TTL the server reported: no more than hilock ever sets, whatever
   * it says (its microseconds must not overflow). */
  if (ttl_ms > HILOCK_TTL_MAX_MS) ttl_ms = HILOCK_TTL_MAX_MS;
  until = start_us + ttl_ms * 1000 - drift_us(ttl_ms);
  pthread_mutex_lock(&h->rt->wd.mu);
  if (h->ren_done_us > start_us && h->valid_until_us < until)
    until = h->valid_until_us; /* a renewal overlapped: either came last */
  h->valid_until_us = until;
  h->ext_done_us = hilock__now_us();
  pthread_mutex_unlock(&h->rt->wd.mu);
}

int64_t hilock__hold_validity_ms(const hilock__hold *h) {
  int64_t until, left;
  int lost;
  if (!h->held) return 0;
  if (h->ttl_ms == 0) return h->lost ? 0 : INT64_MAX;
  pthread_mutex_lock(&h->rt->wd.mu);
  until = h->valid_until_us;
  lost = h->lost;
  pthread_mutex_unlock(&h->rt->wd.mu);
  if (lost) return 0;
  left = (until - hilock__now_us()) / 1000;
  return left > 0 ? left : 0;
}

int hilock__hold_is_lost(const hilock__hold *h) {
  int lost;
  pthread_mutex_lock(&h->rt->wd.mu);
  lost = h->lost;
  pthread_mutex_unlock(&h->rt->wd.mu);
  return lost;
}

int hilock__hold_reports_lost(const hilock__hold *h) {
  int lost;
  pthread_mutex_lock(&h->rt->wd.mu);
  lost = h->gone || (h->held && h->lost);
  pthread_mutex_unlock(&h->rt->wd.mu);
  return lost;
}

int64_t hilock__hold_drift_us(int64_t ttl_ms) { return drift_us(ttl_ms); }

/* ## Holds on a string key holding the owner token (lock, fair lock) ------ */

int hilock__hold_extend(hilock__hold *h, int64_t ms, int replace) {
  const char *keys[2], *args[3];
  size_t keylens[2], arglens[3];
  int nkeys = 1;
  char buf[24];
  redisReply *r;
  int64_t start;
  int rc = hilock__check_ms(&h->err, "extension", ms);
  if (rc == HILOCK_OK) rc = hilock__hold_check(h, "extend");
  if (rc != HILOCK_OK) return rc;
  keys[0] = h->rkey;
  keylens[0] = h->rkeylen;
  if (h->nxkeys == 1) { /* a lock's delay marker, pushed along */
    keys[nkeys] = h->xkeys[0];
    keylens[nkeys++] = h->xkeylens[0];
  }
  args[0] = h->owner;
  arglens[0] = h->ownerlen;
  args[1] = buf;
  arglens[1] = hilock__i64(buf, ms);
  args[2] = replace ? "set" : "add";
  arglens[2] = 3;
  start = hilock__now_us();
  rc = hilock__script_run(h->client, &h->err, &hilock__script_lock_extend,
                          nkeys, keys, keylens, 3, args, arglens, &r);
  if (rc == HILOCK_ENOREPLICAS && r != NULL &&
      r->type == REDIS_REPLY_INTEGER && r->integer > 0) {
    /* Extended on the master only: the validity is not extended. */
    freeReplyObject(r);
    return rc;
  }
  if (rc == HILOCK_ENOREPLICAS) rc = HILOCK_OK; /* not owned: see below */
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_INTEGER) {
    rc = hilock__set_err(&h->err, HILOCK_EPROTO, "unexpected reply to extend");
  } else if (r->integer <= 0) {
    hilock__hold_lost(h);
    rc = hilock__set_err(&h->err, HILOCK_ENOTOWNED,
                         "extend: the lock expired or another owner holds it");
  } else {
    hilock__hold_extended(h, start, r->integer);
  }
  freeReplyObject(r);
  return rc;
}

int hilock__hold_set_delay(hilock__hold *h, int64_t ms, const char *mark,
                           size_t marklen) {
  if (ms < 0 || ms > HILOCK_TTL_MAX_MS)
    return hilock__set_err(&h->err, HILOCK_EINVAL,
                           "lock delay must be 0..%lld ms, got %lld",
                           (long long)HILOCK_TTL_MAX_MS, (long long)ms);
  if (h->held)
    return hilock__set_err(&h->err, HILOCK_EINVAL,
                           "set the lock delay before acquiring, not while "
                           "the handle holds the lock");
  h->delay_ms = ms;
  if (mark != NULL) {
    h->mark = mark;
    h->marklen = marklen;
    h->xkeys = ms > 0 ? &h->mark : NULL;
    h->xkeylens = ms > 0 ? &h->marklen : NULL;
    h->nxkeys = ms > 0 ? 1 : 0;
  }
  return HILOCK_OK;
}

int hilock__hold_owned(hilock__hold *h, int *owned) {
  const char *argv[2] = {"GET", h->rkey};
  size_t lens[2] = {3, h->rkeylen};
  redisReply *r;
  int rc;
  *owned = 0;
  if (!hilock__client_usable(h->client))
    return hilock__set_err(&h->err, HILOCK_ECLOSED, "owned: client is closed");
  if (!h->held || h->pid != hilock__pid()) return HILOCK_OK;
  rc = hilock__command(h->client, &h->err, 2, argv, lens, &r);
  if (rc != HILOCK_OK) return rc;
  if (r->type == REDIS_REPLY_STRING && r->len == h->ownerlen &&
      memcmp(r->str, h->owner, h->ownerlen) == 0)
    *owned = 1;
  else if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL)
    hilock__hold_lost(h);
  else
    rc = hilock__set_err(&h->err, HILOCK_EPROTO, "unexpected reply to GET");
  freeReplyObject(r);
  return rc;
}

int hilock__hold_set_auto_renew(hilock__hold *h, int enable,
                                int64_t max_hold_ms, hilock_lost_fn on_lost,
                                void *arg) {
  int rc = HILOCK_OK;
  /* Errors go where the caller reads them: threads sharing the handle may
   * fail here at once, and the shared scratch is written under the mutex
   * only. */
  if (max_hold_ms < 0)
    return hilock__set_err(hilock__hold_err(h), HILOCK_EINVAL,
                           "max hold must be >= 0 ms");
  hilock__renewal_cancel(h);
  /* The client's handle mutex: threads sharing a handle (rlock) may be
   * granting or releasing at the same time. */
  pthread_mutex_lock(&h->rt->hmu);
  h->auto_renew = enable != 0;
  h->max_hold_ms = max_hold_ms;
  h->lost_fn = on_lost;
  h->lost_arg = arg;
  if (enable && h->held && h->pid == hilock__pid() && !hilock__hold_is_lost(h))
    rc = hilock__renewal_register(h);
  if (rc < 0 && h->guard != NULL) *hilock__hold_err(h) = h->err;
  pthread_mutex_unlock(&h->rt->hmu);
  return rc;
}

int hilock__hold_give_back(hilock__hold *h, const hilock__err *unacked,
                           int (*release)(void *arg), void *arg) {
  hilock__err why = *unacked;
  int rc, gone;
  int64_t outer = hilock__call_lift(); /* never left half done */
  pthread_mutex_lock(&h->rt->wd.mu);
  gone = h->gone;
  h->held = 1;
  h->lost = 1; /* never a grant to the caller: nor a loss if it was gone */
  pthread_mutex_unlock(&h->rt->wd.mu);
  h->pid = hilock__pid();
  rc = release(arg);
  hilock__call_end(outer);
  hilock__hold_drop(h);
  pthread_mutex_lock(&h->rt->wd.mu);
  h->gone = gone;
  pthread_mutex_unlock(&h->rt->wd.mu);
  return hilock__grant_unacked(&h->err, &why, rc, &h->err);
}

int hilock__hold_released_by_close(hilock__hold *h, const char *verb) {
  int closed;
  pthread_mutex_lock(&h->rt->wd.mu);
  closed = h->close_lost && h->held;
  pthread_mutex_unlock(&h->rt->wd.mu);
  if (!closed) return HILOCK_OK;
  hilock__hold_ended(h, 1);
  return hilock__set_err(&h->err, HILOCK_ECLOSED,
                         "%s: the client was closed while the lock was held; "
                         "closing released it (or it lapses at its TTL)",
                         verb);
}

int hilock__hold_release(hilock__hold *h,
                         int (*run)(void *arg, hilock__err *e, redisReply **r),
                         void *arg, redisReply **out) {
  int rc = hilock__hold_released_by_close(h, "release");
  *out = NULL;
  if (rc == HILOCK_OK) rc = hilock__hold_check(h, "release");
  if (rc != HILOCK_OK) return rc;
  /* No renewal may run after the release and report the hold lost. */
  hilock__renewal_cancel(h);
  rc = run(arg, &h->err, out);
  if (rc != HILOCK_OK) {
    /* Still ours as far as we know: keep renewing so the caller may retry. */
    if (h->auto_renew && h->ttl_ms > 0 && !hilock__hold_is_lost(h))
      hilock__renewal_register(h);
    return rc;
  }
  return HILOCK_OK;
}

int hilock__hold_release_reply(hilock__hold *h,
                               int (*run)(void *arg, hilock__err *e,
                                          redisReply **r),
                               void *arg, int array, const char *notowned) {
  redisReply *r;
  int rc = hilock__hold_release(h, run, arg, &r);
  if (rc != HILOCK_OK) return rc;
  return hilock__hold_released(h, r, array, notowned);
}

int hilock__hold_released(hilock__hold *h, redisReply *r, int array,
                          const char *notowned) {
  const redisReply *v = r;
  int rc = HILOCK_OK;
  if (array)
    v = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 ? r->element[0] : NULL;
  if (v == NULL || v->type != REDIS_REPLY_INTEGER)
    rc = hilock__set_err(&h->err, HILOCK_EPROTO, "unexpected reply to release");
  else if (v->integer != 1)
    rc = hilock__set_err(&h->err, HILOCK_ENOTOWNED, "release: %s", notowned);
  hilock__hold_ended(h, rc == HILOCK_ENOTOWNED);
  freeReplyObject(r);
  return rc;
}

/* ## A grant attempt ------------------------------------------------------ */

int hilock__attempt_begin(hilock__hold *h, const char *held_msg) {
  int rc;
  if (h->held && hilock__hold_validity_ms(h) > 0 && h->pid == hilock__pid())
    return hilock__set_err(&h->err, HILOCK_EINVAL, "%s", held_msg);
  hilock__hold_lapse(h);
  hilock__hold_drop(h);
  rc = hilock__token(h->owner, &h->err);
  if (rc != HILOCK_OK) return rc;
  h->ownerlen = HILOCK__TOKEN_LEN;
  return HILOCK_OK;
}

int hilock__attempt_run(hilock__hold *h, hilock__attempt *a,
                        const hilock__undo *undo, const hilock__script *s,
                        int nkeys, const char **keys, const size_t *keylens,
                        int nargs, const char **args, const size_t *arglens,
                        redisReply **r) {
  const hilock__undo *outer = undo != NULL ? hilock__undo_arm(undo) : NULL;
  int rc;
  a->start = hilock__now_us();
  rc = hilock__script_run(h->client, &h->err, s, nkeys, keys, keylens, nargs,
                          args, arglens, r);
  if (undo != NULL) hilock__undo_disarm(outer);
  a->replicated = rc != HILOCK_ENOREPLICAS;
  if (!a->replicated) a->unacked = h->err; /* read only then (1.5 KB) */
  if (!a->replicated) rc = HILOCK_OK; /* the reply says whether it granted */
  if (rc != HILOCK_OK) hilock__hold_drop(h);
  return rc;
}

int hilock__attempt_end(hilock__hold *h, const hilock__attempt *a,
                        redisReply *r, int verdict, uint64_t fence,
                        int64_t busy_pttl, int64_t *pttl,
                        int (*release)(void *arg), void *arg,
                        const char *script) {
  int rc;
  if (verdict == 1 && !a->replicated) {
    /* Granted on the master, but too few replicas saw it: a failover now
     * could grant it again. Give it back. */
    rc = hilock__hold_give_back(h, &a->unacked, release, arg);
  } else if (verdict == 1) {
    rc = hilock__hold_granted(h, a->start, fence);
  } else if (verdict == 0) {
    *pttl = busy_pttl;
    hilock__hold_drop(h);
    rc = HILOCK_BUSY;
  } else {
    /* Fail closed: an unreadable reply is never a grant. */
    hilock__hold_drop(h);
    rc = hilock__set_err(&h->err, HILOCK_EPROTO, "unexpected reply to the %s",
                         script);
  }
  freeReplyObject(r);
  return rc;
}

/* ## The public base handle (hilock/hold.h) ------------------------------- */

/* Every family handle begins with its hold. */
static hilock__hold *hold_of(hilock_hold *h) { return (hilock__hold *)h; }
static const hilock__hold *chold_of(const hilock_hold *h) {
  return (const hilock__hold *)h;
}

static void guard(const hilock__hold *h) {
  if (h->guard != NULL) pthread_mutex_lock(h->guard);
}
static void unguard(const hilock__hold *h) {
  if (h->guard != NULL) pthread_mutex_unlock(h->guard);
}

hilock__err *hilock__hold_err(hilock__hold *h) {
  return h->guard != NULL ? hilock__tl_err(h, h->serial, 1) : &h->err;
}

/* The error this thread's last failed call on the handle left (NULL: none). */
static const hilock__err *last_err(const hilock__hold *h) {
  return h->guard != NULL ? hilock__tl_err(h, h->serial, 0) : &h->err;
}

/* A failure the shared layer recorded in h->err, where the caller reads it
 * (copied under the guard, under which threads sharing it write h->err). */
static int keep(hilock__hold *h, int rc) {
  if (rc < 0 && h->guard != NULL) {
    guard(h);
    *hilock__hold_err(h) = h->err;
    unguard(h);
  }
  return rc;
}

const char *hilock_hold_errmsg(const hilock_hold *hh) {
  const hilock__hold *h = chold_of(hh);
  const hilock__err *e;
  if (h == NULL) return "handle is NULL";
  e = last_err(h);
  return e != NULL ? e->msg : "";
}

int hilock_hold_errcode(const hilock_hold *hh) {
  const hilock__hold *h = chold_of(hh);
  const hilock__err *e;
  if (h == NULL) return HILOCK_EINVAL;
  e = last_err(h);
  return e != NULL ? e->code : HILOCK_OK;
}

uint64_t hilock_hold_fence(const hilock_hold *hh) {
  const hilock__hold *h = chold_of(hh);
  uint64_t fence;
  if (h == NULL) return 0;
  guard(h);
  fence = h->fence;
  unguard(h);
  return fence;
}

const char *hilock_hold_token(const hilock_hold *hh) {
  static __thread char copy[sizeof(((hilock__hold *)0)->owner)];
  const hilock__hold *h = chold_of(hh);
  if (h == NULL) return "";
  if (h->guard == NULL) return h->owner;
  /* Shared by threads: another's grant may rewrite it; a copy for the
   * caller (valid until its next call of this). */
  guard(h);
  memcpy(copy, h->owner, sizeof(copy));
  unguard(h);
  copy[sizeof(copy) - 1] = '\0';
  return copy;
}

const char *hilock_hold_key(const hilock_hold *hh, size_t *len) {
  const hilock__hold *h = chold_of(hh);
  if (h == NULL) {
    if (len) *len = 0;
    return "";
  }
  if (h->fam != NULL && h->fam->key != NULL) return h->fam->key(h, len);
  if (len) *len = h->rkeylen;
  return h->rkey;
}

int64_t hilock_hold_ttl_ms(const hilock_hold *hh) {
  const hilock__hold *h = chold_of(hh);
  return h == NULL ? 0 : h->ttl_ms;
}

int64_t hilock_hold_validity_ms(const hilock_hold *hh) {
  const hilock__hold *h = chold_of(hh);
  int64_t left;
  if (h == NULL) return 0;
  guard(h);
  left = h->pid == hilock__pid() ? hilock__hold_validity_ms(h) : 0;
  unguard(h);
  return left;
}

int hilock_hold_lost(const hilock_hold *hh) {
  const hilock__hold *h = chold_of(hh);
  int lost;
  if (h == NULL) return 0;
  guard(h);
  lost = hilock__hold_reports_lost(h);
  unguard(h);
  return lost;
}

int hilock_hold_set_auto_renew(hilock_hold *hh, int enable,
                               int64_t max_hold_ms, hilock_lost_fn on_lost,
                               void *arg) {
  hilock__hold *h = hold_of(hh);
  if (h == NULL) return HILOCK_EINVAL;
  if (h->ttl_ms == 0 && enable)
    return hilock__set_err(hilock__hold_err(h), HILOCK_ENOTSUP,
                           "a simple lock has no TTL to renew");
  /* Takes the client's handle mutex itself (the guard of shared handles),
   * and records its error where the caller reads it. */
  return hilock__hold_set_auto_renew(h, enable, max_hold_ms, on_lost, arg);
}

int hilock_hold_owned(hilock_hold *hh, int *owned) {
  hilock__hold *h = hold_of(hh);
  if (h == NULL || owned == NULL) return HILOCK_EINVAL;
  if (h->fam != NULL && h->fam->owned != NULL) return h->fam->owned(h, owned);
  return keep(h, hilock__hold_owned(h, owned));
}

int hilock_hold_locked(hilock_hold *hh, int *locked) {
  hilock__hold *h = hold_of(hh);
  hilock__err e;
  int rc;
  if (h == NULL || locked == NULL) return HILOCK_EINVAL;
  if (h->fam != NULL && h->fam->locked != NULL)
    return h->fam->locked(h, locked);
  /* The error goes where the caller reads it (per thread on a shared
   * handle), not through the hold's own err. */
  rc = hilock__exists(h->client, &e, h->rkey, h->rkeylen, locked);
  if (rc < 0) *hilock__hold_err(h) = e;
  return rc;
}

void hilock_hold_free(hilock_hold *hh) {
  hilock__hold *h = hold_of(hh);
  if (h == NULL || h->fam == NULL || h->fam->free == NULL) return;
  h->fam->free(h);
}
