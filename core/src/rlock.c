/* The reentrant lock: a Redis hash {owner -> hold count}; the owner is the
 * calling thread of a client. Mostly core/scripts/rlock_*.lua. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base.h"
#include "family.h"
#include "holds.h"
#include "script.h"
#include "wait.h"
#include "scripts.h"

static const hilock__family family;

struct hilock_rlock {
  hilock__hold h; /* the current grant (one owner at a time) */
  pthread_mutex_t *mu; /* the client's hmu: serialises h between threads sharing the handle */
  char *key, *fkey, *wkey;
  size_t keylen, fkeylen, wkeylen;
  const hilock__rlock_layout *lay; /* hilock's keys and scripts, or Redisson's */
  /* The lock-delay marker (hilock's own layout only, else NULL): every
   * grant checks it, a first entry with a delay (the hold's) sets it, the
   * last release deletes it. */
  char *dkey;
  size_t dkeylen;
  /* The nonce of the grant owner's release whose outcome is unknown (a
   * broken connection or a timeout), "" if none: its next release is that
   * release's retry and goes with the same nonce (own layout). */
  char rel[HILOCK__TOKEN_LEN + 1];
};

/* The caller's owner id: client id, ':', kernel thread id (or an async
 * operation's owner, see hilock__caller). */
static size_t owner_of(const hilock_rlock *rl, char *buf, size_t n) {
  return (size_t)snprintf(buf, n, "%s:%ld%s", rl->h.client->id,
                          hilock__caller(), rl->lay->suffix);
}

/* Whether the handle's grant belongs to this owner (call with rl->mu). */
static int is_mine(const hilock_rlock *rl, const char *owner, size_t len) {
  return rl->h.held && rl->h.ownerlen == len &&
         memcmp(rl->h.owner, owner, len) == 0;
}

/* Record e as the calling thread's last error on the handle (threads may
 * share it: each reads its own, as errno). */
static int keep_err(hilock_rlock *rl, const hilock__err *e) {
  *hilock__hold_err(&rl->h) = *e;
  return e->code;
}

static int drop_all(void *arg, hilock__err *e, redisReply **r);
static int settle(hilock_rlock *rl);

/* hilock's own layout: <prefix>{name}:rlock, :fence and :wake. */
static char *own_keys(const hilock__runtime *rt, const char *name,
                      size_t namelen, char **fkey, size_t *fkeylen,
                      char **wkey, size_t *wkeylen, size_t *keylen) {
  *fkey = hilock__key(rt, name, namelen, "fence", fkeylen);
  *wkey = hilock__key(rt, name, namelen, "wake", wkeylen);
  return hilock__key(rt, name, namelen, "rlock", keylen);
}

static const hilock__rlock_layout own_layout = {
    own_keys, &hilock__script_rlock_acquire, &hilock__script_rlock_release,
    &hilock__script_rlock_drop, &hilock__script_rlock_renew, "", NULL, 1, 0};

int hilock__rlock_new_with(hilock_client *client, const char *name,
                           size_t namelen, int64_t ttl_ms,
                           const hilock__rlock_layout *lay, hilock_rlock **out) {
  hilock_rlock *rl;
  int rc;

  rl = hilock__new_handle(client, name, namelen, ttl_ms, sizeof(*rl), &rc);
  if (rl == NULL) return rc;
  rl->lay = lay;
  rl->key = lay->keys(&client->rt, name, namelen, &rl->fkey, &rl->fkeylen, &rl->wkey,
                      &rl->wkeylen, &rl->keylen);
  if (lay == &own_layout)
    rl->dkey = hilock__key(&client->rt, name, namelen, "delay", &rl->dkeylen);
  if (rl->key == NULL || rl->fkey == NULL || rl->wkey == NULL ||
      (lay == &own_layout && rl->dkey == NULL)) {
    free(rl->key);
    free(rl->fkey);
    free(rl->wkey);
    free(rl->dkey);
    free(rl);
    return HILOCK_ENOMEM;
  }
  rl->mu = &client->rt.hmu;
  hilock__hold_init(&rl->h, client, rl->key, rl->keylen,
                    lay->renew, ttl_ms);
  rl->h.fam = &family;
  rl->h.guard = rl->mu;
  rl->h.close_run = drop_all; /* closing the client releases it */
  rl->h.close_arg = rl;
  *out = rl;
  return HILOCK_OK;
}

int hilock_rlock_new(hilock_client *client, const char *name, size_t namelen,
                     int64_t ttl_ms, hilock_rlock **out) {
  HILOCK__CLIENT_CALL(client, out,
                      hilock__rlock_new_with(client, name, namelen, ttl_ms,
                                             &own_layout, out));
}

static void fam_free(void *arg) {
  hilock_rlock *rl = arg;
  if (rl != NULL)
    hilock__family_free(&rl->h, rl, 4, rl->key, rl->fkey, rl->wkey, rl->dkey);
}

static int attempt(void *arg, int64_t *pttl) {
  hilock_rlock *rl = arg;
  char owner[sizeof(rl->h.owner)], ttl[24], delay[24];
  size_t ownerlen = owner_of(rl, owner, sizeof(owner));
  const char *keys[4] = {rl->key, rl->fkey, rl->wkey, rl->dkey};
  size_t keylens[4] = {rl->keylen, rl->fkeylen, rl->wkeylen, rl->dkeylen};
  const char *args[5] = {owner, ttl, "woken", "woken", delay};
  size_t arglens[5] = {ownerlen, hilock__i64(ttl, rl->h.ttl_ms), 5, 5,
                       hilock__i64(delay, rl->h.delay_ms)};
  /* Rung by a release: this attempt takes the wake-up (same round trip). */
  int woken = hilock__attempt_woken() == 2;
  int n = woken ? 3 : 2, nargs = n;
  hilock__err e;
  redisReply *r = NULL;
  int64_t start = hilock__now_us();
  int rc;
  /* Own scripts: the acquire's nonce (ARGV[3]), and the undo's own nonce
   * and done marker (a release with the acquire's nonce would be taken
   * for a resend of it); the undo leaves a level only if the acquire was
   * the owner's last call (its nonce in ARGV[5]). */
  hilock__resend acq, und;
  const char *uargs[5] = {owner, ttl, und.nonce, und.keep, acq.nonce};
  size_t uarglens[5] = {ownerlen, arglens[1], HILOCK__TOKEN_LEN, 0,
                        HILOCK__TOKEN_LEN};
  hilock__clear_err(&e);
  und.done = NULL;
  rc = settle(rl);
  if (rc != HILOCK_OK) return rc;
  if (rl->lay->resend) {
    if (hilock__resend_init(&acq, rl->h.client, &e, NULL, 0, NULL, 0) !=
            HILOCK_OK ||
        hilock__resend_init(&und, rl->h.client, &e, rl->key, rl->keylen,
                            owner, ownerlen) != HILOCK_OK) {
      hilock__resend_free(&und);
      return keep_err(rl, &e);
    }
    args[2] = acq.nonce;
    arglens[2] = HILOCK__TOKEN_LEN;
    nargs = woken ? 4 : 3;
    uarglens[3] = und.keeplen;
  }
  if (rl->dkey != NULL) {
    /* Every attempt checks the lock-delay marker (KEYS[4]), whatever its
     * own delay; one with a delay sets it at a first entry (ARGV[5]). */
    if (!woken) arglens[3] = 1; /* "w": not rung */
    n = 4;
    nargs = rl->h.delay_ms > 0 ? 5 : 4;
  }

  /* A reply that does not come in time leaves a grant ambiguous: the same
   * socket then carries this owner's release, which gives back the level
   * the attempt may have added and changes nothing if it added none (else
   * the owner's next acquire re-enters a level nobody counts, and its last
   * release leaves the lock held). With hilock's own scripts the undo
   * carries the attempt's nonce and leaves a level only if the attempt ran
   * (it is the owner's last call), so a re-entry is undone too. Redisson's
   * scripts have no nonce: not for a re-entry there, since had the attempt
   * failed without running (NOSCRIPT after a restart or a script flush;
   * the undo goes with its source), the undo would leave the level this
   * thread holds. */
  const char *ukeys[4] = {rl->key, rl->wkey, und.done, rl->dkey};
  size_t ukeylens[4] = {rl->keylen, rl->wkeylen, und.donelen, rl->dkeylen};
  int un = rl->dkey != NULL ? 4 : rl->lay->resend ? 3 : 2,
      uargn = rl->lay->resend ? 5 : 2;
  hilock__undo u = {rl->lay->release, un, uargn, ukeys, ukeylens, uargs,
                    uarglens, rl->h.ttl_ms, NULL};
  /* A queued layout (Redisson's fair lock): the waiter's withdraw goes out
   * behind the release, so that withdraw() need not wait on the same
   * server (see there). */
  const char *wkeys[2] = {rl->key, rl->wkey}, *wargs[2] = {owner, ttl};
  size_t wkeylens[2] = {rl->keylen, rl->wkeylen},
         warglens[2] = {ownerlen, arglens[1]};
  hilock__undo w = {rl->lay->withdraw, 2, 2, wkeys, wkeylens, wargs, warglens,
                    rl->h.ttl_ms, NULL};
  if (rl->lay->withdraw != NULL) u.then = &w;
  int reentry = 0;
  const hilock__undo *armed;
  if (!rl->lay->resend) { /* the undo's nonce settles a re-entry otherwise */
    pthread_mutex_lock(rl->mu);
    reentry = rl->h.held && rl->h.ownerlen == ownerlen &&
              memcmp(rl->h.owner, owner, ownerlen) == 0;
    pthread_mutex_unlock(rl->mu);
  }
  armed = hilock__undo_arm(reentry ? NULL : &u);
  rc = hilock__script_run(rl->h.client, &e, rl->lay->acquire, n,
                          keys, keylens, nargs, args, arglens, &r);
  hilock__undo_disarm(armed);
  int replicated = rc != HILOCK_ENOREPLICAS, undo = 0;
  if (!replicated) rc = HILOCK_OK; /* the reply says whether it granted */
  pthread_mutex_lock(rl->mu);
  if (rc != HILOCK_OK) {
    *hilock__hold_err(&rl->h) = e;
    /* The connection broke with the attempt possibly run, and its resend
     * failed too: leave the level it may have added, if it was this
     * owner's last call (a re-entry included: the check is the nonce). */
    undo = rc == HILOCK_EIO && rl->lay->resend ? 2 : 0;
  } else if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
             r->element[0]->type != REDIS_REPLY_INTEGER ||
             r->element[1]->type != REDIS_REPLY_INTEGER) {
    rc = hilock__set_err(hilock__hold_err(&rl->h), HILOCK_EPROTO,
                         "unexpected reply to the rlock acquire script");
  } else if (r->element[0]->integer == 1 && !replicated) {
    undo = 1; /* too few replicas saw this (re-)entry: leave it again */
    rc = HILOCK_ENOREPLICAS;
  } else if (r->element[0]->integer == 1) {
    /* A grant before this one that lapsed unrenewed was lost. */
    hilock__hold_lapse(&rl->h);
    if (!is_mine(rl, owner, ownerlen)) rl->rel[0] = 0;
    memcpy(rl->h.owner, owner, ownerlen + 1);
    rl->h.ownerlen = ownerlen;
    rc = hilock__hold_granted(&rl->h, start, (uint64_t)r->element[1]->integer);
    if (rc != HILOCK_OK) *hilock__hold_err(&rl->h) = rl->h.err;
  } else {
    *pttl = r->element[1]->integer;
    rc = HILOCK_BUSY;
  }
  pthread_mutex_unlock(rl->mu);
  if (r != NULL) freeReplyObject(r);
  if (undo) {
    hilock__err ue;
    int urc;
    int64_t outer = hilock__call_lift(); /* never left half done */
    hilock__clear_err(&ue);
    r = NULL;
    urc = hilock__script_run(rl->h.client, &ue, rl->lay->release,
                             un, ukeys, ukeylens, uargn, uargs, uarglens, &r);
    hilock__call_end(outer);
    if (r != NULL) freeReplyObject(r);
    if (undo == 1) {
      pthread_mutex_lock(rl->mu);
      rc = hilock__grant_unacked(hilock__hold_err(&rl->h), &e, urc, &ue);
      pthread_mutex_unlock(rl->mu);
    }
  }
  if (rl->lay->resend) hilock__resend_free(&und);
  return rc;
}

/* A queued layout's waiter that did not get the lock leaves the queue. */
static void withdraw(hilock_rlock *rl, int rc) {
  char owner[sizeof(rl->h.owner)], ttl[24];
  const char *keys[2] = {rl->key, rl->wkey}, *args[2] = {owner, ttl};
  size_t keylens[2] = {rl->keylen, rl->wkeylen}, arglens[2];
  hilock__err e;
  redisReply *r = NULL;
  int64_t outer;
  /* Already queued behind the last attempt, whose reply did not come in
   * time: one here would wait on the same server past the caller's
   * timeout. */
  if (rl->lay->withdraw == NULL || rc == HILOCK_OK || hilock__undo_queued())
    return;
  arglens[0] = owner_of(rl, owner, sizeof(owner));
  arglens[1] = hilock__i64(ttl, rl->h.ttl_ms);
  outer = hilock__call_lift(); /* never left half done */
  (void)hilock__script_run(rl->h.client, &e, rl->lay->withdraw, 2, keys,
                           keylens, 2, args, arglens, &r);
  hilock__call_end(outer);
  if (r != NULL) freeReplyObject(r);
}

static int try_acquire_fn(void *x) {
  hilock_rlock *rl = x;
  int64_t pttl;
  int rc;
  rc = attempt(rl, &pttl);
  withdraw(rl, rc);
  return hilock__stat_try(rl->h.rt, rc);
}

/* An event loop's acquire of a queued layout that ends without the lock
 * (cancelled, timed out, failed) leaves the queue, as a blocking one does. */
static void leave_queue(void *arg) { withdraw(arg, HILOCK_BUSY); }

/* A queued layout's waiter hears the release on a channel of its own (the
 * wait key and the owner), as acquire_fn's blocking waiters do. */
static size_t owner_wkey(void *arg, char *buf, size_t cap) {
  hilock_rlock *rl = arg;
  char owner[sizeof(rl->h.owner)];
  owner_of(rl, owner, sizeof(owner));
  return (size_t)snprintf(buf, cap, "%s:%s", rl->wkey, owner);
}

/* For async operations: the owner is the operation's (hilock__caller). */
static void acquire_spec(void *arg, hilock__acquire_spec *s) {
  hilock_rlock *rl = arg;
  hilock__spec(s, attempt, rl, &rl->wkey, &rl->wkeylen);
  if (rl->lay->channel) s->wake |= HILOCK__WAKE_CHANNEL;
  if (rl->lay->withdraw != NULL) {
    s->leave = leave_queue;
    s->wkey_for = owner_wkey;
  }
}

static int acquire_fn(void *x, int64_t wait_ms) {
  hilock_rlock *rl = x;
  hilock__err e;
  char *wkey;
  size_t wkeylen = 0;
  int rc;
  hilock__clear_err(&e);
  wkey = rl->wkey;
  wkeylen = rl->wkeylen;
  if (rl->lay->withdraw != NULL) {
    /* Each waiter of a queue is woken on a channel of its own. */
    char owner[sizeof(rl->h.owner)];
    size_t ownerlen = owner_of(rl, owner, sizeof(owner));
    wkey = malloc(rl->wkeylen + ownerlen + 2);
    if (wkey == NULL) return HILOCK_ENOMEM;
    wkeylen = (size_t)sprintf(wkey, "%s:%s", rl->wkey, owner);
  }
  rc = hilock__acquire_loop_var(
      rl->h.client, &e, (const char *const *)&wkey, &wkeylen,
      HILOCK__WAKE_TAKES | (rl->lay->channel ? HILOCK__WAKE_CHANNEL : 0),
      wait_ms, attempt, rl);
  if (wkey != rl->wkey) free(wkey);
  withdraw(rl, rc);
  if (rc < 0 && e.code != HILOCK_OK) keep_err(rl, &e);
  return rc;
}

/* rlock_drop.lua: the grant's owner leaves every re-entry at once (the
 * client is closing; the owner's thread is not the caller). */
static int drop_all(void *arg, hilock__err *e, redisReply **r) {
  hilock_rlock *rl = arg;
  const char *keys[3] = {rl->key, rl->wkey, rl->dkey};
  size_t keylens[3] = {rl->keylen, rl->wkeylen, rl->dkeylen};
  const char *args[1] = {rl->h.owner};
  size_t arglens[1] = {rl->h.ownerlen};
  return hilock__script_run(rl->h.client, e, rl->lay->drop,
                            rl->dkey != NULL ? 3 : 2, keys, keylens, 1, args,
                            arglens, r);
}

/* One release call of the calling thread; with settle, the retry of the
 * grant owner's release whose outcome is unknown (its nonce kept in
 * rl->rel), if there is one (else HILOCK_OK at once). */
static int release_call(hilock_rlock *rl, int retry) {
  char owner[sizeof(rl->h.owner)], ttl[24];
  size_t ownerlen;
  const char *keys[4], *args[4];
  size_t keylens[4], arglens[4];
  hilock__err e;
  redisReply *r = NULL;
  hilock__resend x;
  int rc, mine, nk = 2, na = 2;

  if (rl == NULL) return HILOCK_EINVAL;
  ownerlen = owner_of(rl, owner, sizeof(owner));
  if (retry) {
    pthread_mutex_lock(rl->mu);
    mine = rl->lay->resend && is_mine(rl, owner, ownerlen) && rl->rel[0] != 0;
    pthread_mutex_unlock(rl->mu);
    if (!mine) return HILOCK_OK;
  }
  pthread_mutex_lock(rl->mu);
  if (rl->h.held && rl->h.pid != hilock__pid()) {
    rc = hilock__hold_check(&rl->h, "release");
    keep_err(rl, &rl->h.err); /* the scratch is read under the mutex too */
    pthread_mutex_unlock(rl->mu);
    return rc;
  }
  pthread_mutex_unlock(rl->mu);
  x.done = NULL;
  hilock__clear_err(&e);
  if (rl->lay->resend &&
      hilock__resend_init(&x, rl->h.client, &e, rl->key, rl->keylen, owner,
                          ownerlen) != HILOCK_OK) {
    hilock__resend_free(&x);
    return keep_err(rl, &e);
  }
  pthread_mutex_lock(rl->mu);
  mine = is_mine(rl, owner, ownerlen);
  if (retry && !(mine && rl->rel[0] != 0)) { /* settled meanwhile */
    pthread_mutex_unlock(rl->mu);
    hilock__resend_free(&x);
    return HILOCK_OK;
  }
  if (retry) memcpy(x.nonce, rl->rel, sizeof(x.nonce));
  pthread_mutex_unlock(rl->mu);
  /* As for exclusive locks: no renewal may run between the final release
   * and forgetting the grant (it would report a false loss). */
  if (mine) hilock__renewal_cancel(&rl->h);
  keys[0] = rl->key;
  keylens[0] = rl->keylen;
  keys[1] = rl->wkey;
  keylens[1] = rl->wkeylen;
  args[0] = owner;
  arglens[0] = ownerlen;
  args[1] = ttl;
  arglens[1] = hilock__i64(ttl, rl->h.ttl_ms);
  if (rl->lay->resend) {
    keys[2] = x.done;
    keylens[2] = x.donelen;
    args[2] = x.nonce;
    arglens[2] = HILOCK__TOKEN_LEN;
    args[3] = x.keep;
    arglens[3] = x.keeplen;
    nk = 3;
    na = 4;
  }
  if (rl->dkey != NULL) { /* the last release deletes a delay marker */
    keys[3] = rl->dkey;
    keylens[3] = rl->dkeylen;
    nk = 4;
  }
  rc = hilock__script_run(rl->h.client, &e, rl->lay->release, nk,
                          keys, keylens, na, args, arglens, &r);
  hilock__resend_free(&x);
  pthread_mutex_lock(rl->mu);
  /* Re-check under the mutex: another thread may have been granted since. */
  mine = mine && is_mine(rl, owner, ownerlen);
  if (mine && rl->lay->resend) {
    if (rc == HILOCK_EIO || rc == HILOCK_ETIMEDOUT)
      memcpy(rl->rel, x.nonce, sizeof(rl->rel));
    else
      rl->rel[0] = 0;
  }
  if (rc != HILOCK_OK) {
    *hilock__hold_err(&rl->h) = e;
  } else if (r->type != REDIS_REPLY_INTEGER) {
    rc = hilock__set_err(hilock__hold_err(&rl->h), HILOCK_EPROTO,
                         "unexpected reply to the rlock release script");
  } else if (r->integer < 0) {
    rc = hilock__set_err(hilock__hold_err(&rl->h), HILOCK_ENOTOWNED,
                         "release: the calling thread does not hold this "
                         "lock (or it expired); nothing changed");
    /* The grant is gone: the release that found out ends it, as every
     * family's does. */
    if (mine) hilock__hold_ended(&rl->h, 1);
    mine = 0;
  } else if (r->integer == 0 && mine) {
    hilock__hold_drop(&rl->h);
    mine = 0;
  }
  /* Still held (count > 0, or the outcome is unknown): renew again. */
  if (mine && rl->h.auto_renew && !hilock__hold_is_lost(&rl->h))
    hilock__renewal_register(&rl->h);
  pthread_mutex_unlock(rl->mu);
  if (r != NULL) freeReplyObject(r);
  return rc;
}

/* A release whose outcome is unknown (its connection broke, and its resend
 * too, or its reply timed out) is completed before the owner's next call
 * on the handle: the retry goes with its nonce, so it counts once whether
 * or not the first one ran; a nested release that failed is then not
 * left behind when the outer level is released. HILOCK_OK (or the hold
 * turned out gone), or the error that keeps it unknown. */
static int settle(hilock_rlock *rl) {
  int rc = release_call(rl, 1);
  return rc == HILOCK_ENOTOWNED ? HILOCK_OK : rc;
}

static int release_fn(void *x) {
  hilock_rlock *rl = x;
  int rc = settle(rl);
  return rc != HILOCK_OK ? rc : release_call(rl, 0);
}

int hilock_rlock_hold_count(hilock_rlock *rl, int64_t *count) {
  char owner[sizeof(rl->h.owner)];
  const char *argv[3];
  size_t lens[3];
  hilock__err e;
  redisReply *r;
  int rc;

  if (rl == NULL || count == NULL) return HILOCK_EINVAL;
  *count = 0;
  argv[0] = "HGET";
  lens[0] = 4;
  argv[1] = rl->key;
  lens[1] = rl->keylen;
  argv[2] = owner;
  lens[2] = owner_of(rl, owner, sizeof(owner));
  rc = hilock__command(rl->h.client, &e, 3, argv, lens, &r);
  if (rc != HILOCK_OK) return keep_err(rl, &e);
  if (r->type == REDIS_REPLY_STRING) *count = strtoll(r->str, NULL, 10);
  freeReplyObject(r);
  return HILOCK_OK;
}

static int fam_owned(void *arg, int *owned) {
  hilock_rlock *rl = arg;
  int64_t n = 0;
  int rc;
  if (rl == NULL || owned == NULL) return HILOCK_EINVAL;
  rc = hilock_rlock_hold_count(rl, &n);
  *owned = rc == HILOCK_OK && n > 0;
  return rc;
}


/* Lock delay: hilock's own layout; the hold's renewals push the marker. */
static int set_delay_fn(void *x, int64_t delay_ms) {
  hilock_rlock *rl = x;
  int rc;
  pthread_mutex_lock(rl->mu);
  if (rl->dkey == NULL)
    rc = hilock__set_err(&rl->h.err, HILOCK_ENOTSUP,
                         "a Redisson-compatible lock has no lock delay");
  else
    rc = hilock__hold_set_delay(&rl->h, delay_ms, rl->dkey, rl->dkeylen);
  if (rc != HILOCK_OK) keep_err(rl, &rl->h.err);
  pthread_mutex_unlock(rl->mu);
  return rc;
}

static const hilock__family family = {
    .name = "reentrant lock", .acquire = acquire_fn,
    .try_acquire = try_acquire_fn, .free = fam_free, .owned = fam_owned,
    .acquire_spec = acquire_spec, .release = release_fn,
    .set_delay = set_delay_fn, .by_caller = 1};
