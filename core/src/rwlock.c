/* The read-write lock: per-reader expiry in a sorted set on server time,
 * reentrant reads and writes per thread, writer preference through
 * expiring intents with waiting readers admitted as a batch at each write
 * release, downgrade, and an upgrade refused with HILOCK_EDEADLK.
 * Mostly core/scripts/rwlock_*.lua; waiting, renewal and grant state come
 * from the shared layer (wait.c, renewal.c, hold.c). */
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

/* One thread's read hold taken through a handle. Created by the thread's
 * first read grant, freed by its last release; only that thread unlinks
 * it. */
typedef struct rw_reader {
  hilock__hold h; /* owner: client id:thread id */
  long tid;
  int64_t count; /* the owner's hold count as of the last reply */
  char rel[HILOCK__TOKEN_LEN + 1]; /* see hilock_rwlock.wrel */
  struct rw_reader *next;
} rw_reader;

struct hilock_rwlock {
  hilock__hold w;     /* the write grant (one owner at a time) */
  int64_t wcount;     /* its owner's hold count as of the last reply */
  /* The nonce of the write grant owner's release whose outcome is unknown
   * (a broken connection or a timeout), "" if none: its next release is
   * that release's retry and goes with the same nonce. */
  char wrel[HILOCK__TOKEN_LEN + 1];
  /* The client's hmu: guards w, wcount, readers, read settings. The
   * handle's errors are kept per thread (hilock__hold_err(&w)). */
  pthread_mutex_t *mu;
  rw_reader *readers;
  /* Renewal settings for read holds, copied into each new one. */
  int r_auto_renew;
  int64_t r_max_hold_ms;
  hilock_lost_fn r_lost_fn;
  void *r_lost_arg;
  int64_t ttl_ms;
  /* Keys: writer hash, readers zset, read counts, waiting writers
   * (intents), waiting readers, admitted readers, fence, readers' wake
   * list, writers' wake list. */
  char *wkey, *rkey, *ckey, *ikey, *qkey, *akey, *fkey, *rwake, *wwake;
  size_t wkeylen, rkeylen, ckeylen, ikeylen, qkeylen, akeylen, fkeylen,
      rwakelen, wwakelen;
  /* The write side's lock-delay marker (the delay is w's): every grant,
   * read or write, checks it; a write grant with a delay sets it, write
   * renewals push it, the last write release deletes it. */
  char *dkey;
  size_t dkeylen;
  /* A read hold renews the counts hash with the readers zset. */
  const char *renew_xkeys[1];
  size_t renew_xkeylens[1];
};

#define OWNER_MAX (sizeof(((hilock__hold *)0)->owner))

static long this_tid(void) { return hilock__caller(); }
static int settle(hilock_rwlock *rw, int read);

/* This thread's owner id: client id, ':', kernel thread id. */
static size_t owner_of(const hilock_rwlock *rw, char *buf) {
  return (size_t)snprintf(buf, OWNER_MAX, "%s:%ld", rw->w.client->id,
                          this_tid());
}

/* Record the calling thread's last error on the handle (threads share it:
 * each reads its own, as errno). */
static int keep_err(hilock_rwlock *rw, const hilock__err *e) {
  *hilock__hold_err(&rw->w) = *e;
  return e->code;
}

static int set_err(hilock_rwlock *rw, int code, const char *msg) {
  return hilock__set_err(hilock__hold_err(&rw->w), code, "%s", msg);
}

/* The calling thread's read hold in this process; call with mu held. */
static rw_reader *find_reader(hilock_rwlock *rw) {
  long tid = this_tid();
  pid_t pid = hilock__pid();
  for (rw_reader *r = rw->readers; r != NULL; r = r->next)
    if (r->tid == tid && r->h.pid == pid) return r;
  return NULL;
}

/* A read hold granted in another process (we are a forked child); call
 * with mu held. */
static rw_reader *parents_reader(hilock_rwlock *rw) {
  pid_t pid = hilock__pid();
  for (rw_reader *r = rw->readers; r != NULL; r = r->next)
    if (r->h.held && r->h.pid != pid) return r;
  return NULL;
}

/* Unlink and free the calling thread's read hold (mu not held). */
static void remove_reader(hilock_rwlock *rw, rw_reader *rec) {
  pthread_mutex_lock(rw->mu);
  for (rw_reader **p = &rw->readers; *p != NULL; p = &(*p)->next) {
    if (*p == rec) {
      *p = rec->next;
      break;
    }
  }
  pthread_mutex_unlock(rw->mu);
  hilock__hold_drop(&rec->h); /* waits for an in-flight renewal */
  hilock__hold_destroy(&rec->h);
  free(rec);
}

static void free_keys(hilock_rwlock *rw) {
  free(rw->wkey);
  free(rw->rkey);
  free(rw->ckey);
  free(rw->ikey);
  free(rw->qkey);
  free(rw->akey);
  free(rw->fkey);
  free(rw->rwake);
  free(rw->wwake);
  free(rw->dkey);
}

static int rwlock_new(hilock_client *client, const char *name, size_t namelen,
                      int64_t ttl_ms, hilock_rwlock **out) {
  hilock_rwlock *rw;
  int rc;

  rw = hilock__new_handle(client, name, namelen, ttl_ms, sizeof(*rw), &rc);
  if (rw == NULL) return rc;
  rw->wkey = hilock__key(&client->rt, name, namelen, "rw:writer", &rw->wkeylen);
  rw->rkey = hilock__key(&client->rt, name, namelen, "rw:readers", &rw->rkeylen);
  rw->ckey = hilock__key(&client->rt, name, namelen, "rw:counts", &rw->ckeylen);
  rw->ikey = hilock__key(&client->rt, name, namelen, "rw:intents", &rw->ikeylen);
  rw->qkey = hilock__key(&client->rt, name, namelen, "rw:waiting", &rw->qkeylen);
  rw->akey = hilock__key(&client->rt, name, namelen, "rw:admitted", &rw->akeylen);
  rw->fkey = hilock__key(&client->rt, name, namelen, "fence", &rw->fkeylen);
  rw->rwake = hilock__key(&client->rt, name, namelen, "rw:rwake", &rw->rwakelen);
  rw->wwake = hilock__key(&client->rt, name, namelen, "rw:wwake", &rw->wwakelen);
  rw->dkey = hilock__key(&client->rt, name, namelen, "delay", &rw->dkeylen);
  if (rw->wkey == NULL || rw->rkey == NULL || rw->ckey == NULL ||
      rw->ikey == NULL || rw->qkey == NULL || rw->akey == NULL ||
      rw->fkey == NULL || rw->rwake == NULL ||
      rw->wwake == NULL || rw->dkey == NULL) {
    free_keys(rw);
    free(rw);
    return HILOCK_ENOMEM;
  }
  rw->ttl_ms = ttl_ms;
  rw->mu = &client->rt.hmu;
  rw->renew_xkeys[0] = rw->ckey;
  rw->renew_xkeylens[0] = rw->ckeylen;
  /* The write renewal is the reentrant lock's: HEXISTS owner, PEXPIRE. */
  hilock__hold_init(&rw->w, client, rw->wkey, rw->wkeylen,
                    &hilock__script_rlock_renew, ttl_ms);
  rw->w.fam = &family;
  rw->w.guard = rw->mu;
  *out = rw;
  return HILOCK_OK;
}

int hilock_rwlock_new(hilock_client *client, const char *name, size_t namelen,
                      int64_t ttl_ms, hilock_rwlock **out) {
  HILOCK__CLIENT_CALL(client, out,
                      rwlock_new(client, name, namelen, ttl_ms, out));
}

static void fam_free(void *arg) {
  hilock_rwlock *rw = arg;
  rw_reader *r;
  if (rw == NULL) return;
  r = rw->readers;
  rw->readers = NULL;
  while (r != NULL) {
    rw_reader *next = r->next;
    hilock__hold_destroy(&r->h);
    free(r);
    r = next;
  }
  hilock__hold_destroy(&rw->w);
  free_keys(rw);
  free(rw);
}

/* ## The release scripts, for an owner ------------------------------------ */

/* Run a release script of one side for owner (nkeys keys, then the owner's
 * done marker of that side, named after keys[mark], then tail unless it is
 * NULL); *r gets its integer reply. Safe to resend: the call carries a nonce (lib/resend.lua): nonce
 * if it is set (the retry of a release whose outcome is unknown), else a
 * new one, written to nonce unless it is NULL. */
static int run_release(hilock_rwlock *rw, hilock__err *e,
                       const hilock__script *s, int nkeys, const char **keys,
                       size_t *keylens, int mark, const char *tail,
                       size_t taillen, const char *owner, size_t ownerlen,
                       char *nonce, redisReply **r) {
  hilock__resend x;
  const char *args[3] = {owner, x.nonce, x.keep};
  size_t arglens[3] = {ownerlen, HILOCK__TOKEN_LEN, 0};
  int rc = hilock__resend_init(&x, rw->w.client, e, keys[mark],
                               keylens[mark], owner, ownerlen);
  if (rc != HILOCK_OK) {
    hilock__resend_free(&x);
    return rc;
  }
  if (nonce != NULL && nonce[0] != 0)
    memcpy(x.nonce, nonce, sizeof(x.nonce));
  else if (nonce != NULL)
    memcpy(nonce, x.nonce, sizeof(x.nonce));
  arglens[2] = x.keeplen;
  keys[nkeys] = x.done;
  keylens[nkeys] = x.donelen;
  if (tail != NULL) {
    keys[nkeys + 1] = tail;
    keylens[nkeys + 1] = taillen;
  }
  rc = hilock__script_run(rw->w.client, e, s, nkeys + (tail != NULL ? 2 : 1),
                          keys, keylens, 3, args, arglens, r);
  hilock__resend_free(&x);
  if (rc == HILOCK_OK && (*r)->type != REDIS_REPLY_INTEGER) {
    freeReplyObject(*r);
    *r = NULL;
    rc = hilock__set_err(e, HILOCK_EPROTO, "unexpected reply to %s", s->name);
  }
  return rc;
}

/* The KEYS of the read side's release script (6). */
static void read_release_keys(const hilock_rwlock *rw, const char **keys,
                              size_t *keylens) {
  const char *k[6] = {rw->rkey, rw->ckey, rw->wkey,
                      rw->ikey, rw->akey, rw->wwake};
  size_t l[6] = {rw->rkeylen, rw->ckeylen, rw->wkeylen,
                 rw->ikeylen, rw->akeylen, rw->wwakelen};
  memcpy(keys, k, sizeof(k));
  memcpy(keylens, l, sizeof(l));
}

/* The KEYS of the write side's release script (8). */
static void write_release_keys(const hilock_rwlock *rw, const char **keys,
                               size_t *keylens) {
  const char *k[8] = {rw->wkey, rw->rkey, rw->ckey,  rw->ikey,
                      rw->qkey, rw->akey, rw->rwake, rw->wwake};
  size_t l[8] = {rw->wkeylen, rw->rkeylen, rw->ckeylen,  rw->ikeylen,
                 rw->qkeylen, rw->akeylen, rw->rwakelen, rw->wwakelen};
  memcpy(keys, k, sizeof(k));
  memcpy(keylens, l, sizeof(l));
}

/* Leave one level of owner's read hold: the remaining count, or -1. */
static int run_read_release(hilock_rwlock *rw, hilock__err *e,
                            const char *owner, size_t ownerlen, char *nonce,
                            redisReply **r) {
  const char *keys[7];
  size_t keylens[7];
  read_release_keys(rw, keys, keylens);
  return run_release(rw, e, &hilock__script_rwlock_read_release, 6, keys,
                     keylens, 1, NULL, 0, owner, ownerlen, nonce, r);
}

/* Leave one level of owner's write hold: the remaining count, or -1. The
 * last deletes the lock-delay marker. */
static int run_write_release(hilock_rwlock *rw, hilock__err *e,
                             const char *owner, size_t ownerlen, char *nonce,
                             redisReply **r) {
  const char *keys[10];
  size_t keylens[10];
  write_release_keys(rw, keys, keylens);
  return run_release(rw, e, &hilock__script_rwlock_write_release, 8, keys,
                     keylens, 0, rw->dkey, rw->dkeylen, owner, ownerlen,
                     nonce, r);
}

/* ## Acquiring --------------------------------------------------------- */

typedef struct attempt_ctx {
  hilock_rwlock *rw;
  char owner[OWNER_MAX];
  size_t ownerlen;
  int wait;   /* the caller will wait: a refusal records it as waiting */
  int intent; /* an attempt recorded it as a waiting reader or writer */
  hilock__err e;
} attempt_ctx;

static void ctx_init(attempt_ctx *a, hilock_rwlock *rw, int wait) {
  memset(a, 0, sizeof(*a));
  a->rw = rw;
  a->ownerlen = owner_of(rw, a->owner);
  a->wait = wait;
  hilock__clear_err(&a->e);
}

/* A grant or re-entry too few replicas acknowledged: leave that level
 * again with the side's release script (a re-entry keeps the levels below
 * it, and the local record of them is unchanged), and say so in a->e.
 * Returns HILOCK_ENOREPLICAS. */
static int give_back(attempt_ctx *a, const hilock__err *unacked,
                     int (*release)(hilock_rwlock *, hilock__err *,
                                    const char *, size_t, char *,
                                    redisReply **)) {
  hilock__err ue;
  redisReply *r = NULL;
  int urc;
  int64_t outer = hilock__call_lift(); /* never left half done */
  hilock__clear_err(&ue);
  urc = release(a->rw, &ue, a->owner, a->ownerlen, NULL, &r);
  hilock__call_end(outer);
  if (r != NULL) freeReplyObject(r);
  return hilock__grant_unacked(&a->e, unacked, urc, &ue);
}

/* Record the calling thread's read grant (count: its hold count now). */
static int read_granted(attempt_ctx *a, int64_t start_us, int64_t count) {
  hilock_rwlock *rw = a->rw;
  rw_reader *rec;
  int rc = HILOCK_OK;

  pthread_mutex_lock(rw->mu);
  rec = find_reader(rw);
  if (rec == NULL) {
    rec = calloc(1, sizeof(*rec));
    if (rec == NULL) {
      pthread_mutex_unlock(rw->mu);
      return hilock__set_err(&a->e, HILOCK_ENOMEM,
                             "out of memory recording a read grant");
    }
    hilock__hold_init(&rec->h, rw->w.client, rw->rkey, rw->rkeylen,
                      &hilock__script_rwlock_read_renew, rw->ttl_ms);
    rec->h.xkeys = rw->renew_xkeys;
    rec->h.xkeylens = rw->renew_xkeylens;
    rec->h.nxkeys = 1;
    rec->tid = this_tid();
    rec->next = rw->readers;
    rw->readers = rec;
  }
  rec->h.auto_renew = rw->r_auto_renew;
  rec->h.max_hold_ms = rw->r_max_hold_ms;
  rec->h.lost_fn = rw->r_lost_fn;
  rec->h.lost_arg = rw->r_lost_arg;
  rec->count = count;
  if (rec->h.held && count > 1 && !hilock__hold_is_lost(&rec->h)) {
    /* Re-entry: the expiry moved to ttl after this grant. */
    hilock__hold_extended(&rec->h, start_us, rw->ttl_ms);
  } else {
    hilock__hold_lapse(&rec->h); /* the last grant lapsed unrenewed: lost */
    memcpy(rec->h.owner, a->owner, a->ownerlen + 1);
    rec->h.ownerlen = a->ownerlen;
    rc = hilock__hold_granted(&rec->h, start_us, 0);
    if (rc != HILOCK_OK) a->e = rec->h.err;
  }
  pthread_mutex_unlock(rw->mu);
  return rc;
}

/* A refusal recorded the caller as waiting, expiring one ttl later on
 * server time: come back well before that, even if the blocker holds
 * longer. */
static void waiting(attempt_ctx *a, int64_t *pttl) {
  int64_t refresh = a->rw->ttl_ms / 3 > 0 ? a->rw->ttl_ms / 3 : 1;
  a->intent = 1;
  if (*pttl < 0 || *pttl > refresh) *pttl = refresh;
}

/* Run a side's acquire script: its six keys, the side's wake list, which
 * goes with "woken" when a release rang this waiter (the script takes the
 * wake-up), and the lock-delay marker, which every attempt checks (a write
 * attempt, write, sets it if the handle has a delay: ARGV[6]). With too
 * few replicas acknowledging, *unacked says so and the reply still tells
 * whether it granted. If the reply does not come in time, the grant (or
 * re-entry) is ambiguous: the same socket then carries the side's release
 * for this owner (undo_s with its undo_nkeys keys, room for two more: the
 * done marker named after undo_keys[mark], and for a write the lock-delay
 * marker, which the last write release deletes), which leaves the one
 * level the attempt may have added and changes nothing if it added none.
 * Each carries a nonce of its own (the undo must not pass for a resend of
 * the acquire). */
static int run_attempt(attempt_ctx *a, const hilock__script *s,
                       const char **keys, const size_t *keylens,
                       const hilock__script *undo_s, int undo_nkeys,
                       const char **undo_keys, size_t *undo_keylens, int mark,
                       int write, hilock__err *unacked, redisReply **r) {
  hilock_rwlock *rw = a->rw;
  char ttl[24], delay[24];
  hilock__resend acq, und;
  const char *args[6] = {a->owner, ttl, a->wait ? "1" : "0", acq.nonce,
                         "woken", delay};
  size_t arglens[6] = {a->ownerlen, hilock__i64(ttl, rw->ttl_ms), 1,
                       HILOCK__TOKEN_LEN, 5, hilock__i64(delay, rw->w.delay_ms)};
  const char *uargs[4] = {a->owner, und.nonce, und.keep, acq.nonce};
  size_t uarglens[4] = {a->ownerlen, HILOCK__TOKEN_LEN, 0, HILOCK__TOKEN_LEN};
  int woken = hilock__attempt_woken() == 2;
  int nargs = write && rw->w.delay_ms > 0 ? 6 : 5, unkeys = undo_nkeys + 1;
  hilock__undo undo = {undo_s, 0, 4, undo_keys, undo_keylens,
                       uargs, uarglens, rw->ttl_ms, NULL};
  und.done = NULL;
  if (hilock__resend_init(&acq, rw->w.client, &a->e, NULL, 0, NULL, 0) !=
          HILOCK_OK ||
      hilock__resend_init(&und, rw->w.client, &a->e, undo_keys[mark],
                          undo_keylens[mark], a->owner,
                          a->ownerlen) != HILOCK_OK) {
    hilock__resend_free(&und);
    *r = NULL;
    return a->e.code;
  }
  uarglens[2] = und.keeplen;
  undo_keys[undo_nkeys] = und.done;
  undo_keylens[undo_nkeys] = und.donelen;
  if (write) {
    undo_keys[unkeys] = rw->dkey;
    undo_keylens[unkeys++] = rw->dkeylen;
  }
  undo.nkeys = unkeys;
  if (!woken) arglens[4] = 1; /* "w": not rung */
  /* A re-entry is undone too: the undo carries the attempt's nonce and
   * leaves a level only if the attempt ran (after a restart or a script
   * flush the attempt's EVALSHA fails without running, NOSCRIPT, while the
   * undo goes with its source: it then finds another last call and keeps
   * the level this thread holds). */
  const hilock__undo *outer = hilock__undo_arm(&undo);
  int rc = hilock__script_run(rw->w.client, &a->e, s, 8, keys, keylens,
                              nargs, args, arglens, r);
  hilock__undo_disarm(outer);
  *unacked = a->e;
  if (rc == HILOCK_EIO) {
    /* The connection broke with the attempt possibly run, and its resend
     * failed too: leave the level it may have added if it was this
     * owner's last call (the undo carries the attempt's nonce, so a
     * re-entry is safe too; best effort, the caller sees the error). */
    hilock__err ue;
    redisReply *ur = NULL;
    int64_t lift = hilock__call_lift(); /* never left half done */
    hilock__clear_err(&ue);
    (void)hilock__script_run(rw->w.client, &ue, undo_s, unkeys, undo_keys,
                             undo_keylens, 4, uargs, uarglens, &ur);
    if (ur != NULL) freeReplyObject(ur);
    hilock__call_end(lift);
  }
  hilock__resend_free(&und);
  return rc;
}

/* Before an attempt: the side's release whose outcome is unknown is
 * completed (see settle); its failure is the attempt's. */
static int settle_attempt(attempt_ctx *a, int read) {
  int rc = settle(a->rw, read);
  if (rc != HILOCK_OK) a->e = *hilock__hold_err(&a->rw->w);
  return rc;
}

/* One attempt of a side (read: the read side): the side's release whose
 * outcome is unknown is completed first, then its acquire script runs on
 * keys, with the side's release as the undo of an ambiguous grant. */
static int side_attempt(attempt_ctx *a, int read, const char **keys,
                        const size_t *keylens, hilock__err *unacked,
                        redisReply **r) {
  const char *ukeys[10];
  size_t ukeylens[10];
  int rc = settle_attempt(a, read);
  if (rc != HILOCK_OK) return rc;
  if (read)
    read_release_keys(a->rw, ukeys, ukeylens);
  else
    write_release_keys(a->rw, ukeys, ukeylens);
  return run_attempt(
      a, read ? &hilock__script_rwlock_read_acquire
              : &hilock__script_rwlock_write_acquire,
      keys, keylens,
      read ? &hilock__script_rwlock_read_release
           : &hilock__script_rwlock_write_release,
      read ? 6 : 8, ukeys, ukeylens, read, !read, unacked, r);
}

/* A waiter that stops waiting leaves its place with script s on keys (a
 * failure that may pass leaves it to the renewal thread; else it expires
 * one ttl after its last attempt). */
static void side_withdraw(attempt_ctx *a, const hilock__script *s, int nkeys,
                          const char **keys, const size_t *keylens) {
  const char *args[1] = {a->owner};
  size_t arglens[1] = {a->ownerlen};
  hilock__err e;
  redisReply *r = NULL;
  hilock__clear_err(&e);
  if (hilock__script_run_as(a->rw->w.client, &e, s,
                            HILOCK__RUN_WAKES | HILOCK__RUN_LATER, nkeys, keys,
                            keylens, 1, args, arglens, &r) == HILOCK_OK)
    freeReplyObject(r);
}

/* Refused: wait up to ms (the blocker's remaining time). */
static int refused(attempt_ctx *a, int64_t ms, int64_t *pttl) {
  *pttl = ms;
  if (a->wait) waiting(a, pttl);
  return HILOCK_BUSY;
}

static int read_attempt(void *arg, int64_t *pttl) {
  attempt_ctx *a = arg;
  hilock_rwlock *rw = a->rw;
  const char *keys[8] = {rw->rkey, rw->ckey, rw->wkey, rw->ikey,
                         rw->qkey, rw->akey, rw->rwake, rw->dkey};
  size_t keylens[8] = {rw->rkeylen, rw->ckeylen, rw->wkeylen, rw->ikeylen,
                       rw->qkeylen, rw->akeylen, rw->rwakelen, rw->dkeylen};
  int64_t start = hilock__now_us();
  hilock__err unacked;
  redisReply *r = NULL;
  int rc = side_attempt(a, 1, keys, keylens, &unacked, &r);
  if (rc != HILOCK_OK && rc != HILOCK_ENOREPLICAS) return rc;
  if (!hilock__int_reply(r, 2) || r->element[0]->integer < 0 ||
      r->element[0]->integer > 1) {
    /* Fail closed: an unreadable reply is never a grant. */
    rc = hilock__set_err(&a->e, HILOCK_EPROTO,
                         "unexpected reply to the rwlock read script");
  } else if (r->element[0]->integer == 1 && rc == HILOCK_ENOREPLICAS) {
    rc = give_back(a, &unacked, run_read_release);
  } else if (r->element[0]->integer == 1) {
    rc = read_granted(a, start, r->element[1]->integer);
  } else {
    rc = refused(a, r->element[1]->integer, pttl);
  }
  freeReplyObject(r);
  return rc;
}

/* A reader that stops waiting leaves the waiting and admitted readers. */
static void read_withdraw(attempt_ctx *a) {
  hilock_rwlock *rw = a->rw;
  const char *keys[6] = {rw->qkey, rw->akey, rw->rkey,
                         rw->wkey, rw->ikey, rw->wwake};
  size_t keylens[6] = {rw->qkeylen, rw->akeylen, rw->rkeylen,
                       rw->wkeylen, rw->ikeylen, rw->wwakelen};
  side_withdraw(a, &hilock__script_rwlock_read_withdraw, 6, keys, keylens);
}

/* Acquire one side: one attempt (once), or attempts and waits on the
 * side's wake list; a waiter that gives up withdraws its place. */
static int acquire_side(hilock_rwlock *rw, int64_t wait_ms, int once,
                        int (*attempt)(void *, int64_t *), const char *wake,
                        size_t wakelen, void (*give_up)(attempt_ctx *)) {
  attempt_ctx a;
  int64_t pttl, outer;
  int rc;
  ctx_init(&a, rw, !once && wait_ms != 0);
  /* The caller's timeout bounds giving up the place too. */
  outer = hilock__acquire_begin(once ? 0 : wait_ms);
  if (once)
    rc = hilock__stat_try(rw->w.rt, attempt(&a, &pttl));
  else
    rc = hilock__acquire_loop_taking(rw->w.client, &a.e, wake, wakelen,
                                     wait_ms, attempt, &a);
  if (rc != HILOCK_OK && a.intent) give_up(&a);
  hilock__call_end(outer);
  if (rc < 0) keep_err(rw, &a.e);
  return rc;
}

/* ## One side as an acquire spec (async.c) ------------------------------- */

static int write_attempt(void *arg, int64_t *pttl);
static void withdraw(attempt_ctx *a);

typedef struct spec_ctx {
  attempt_ctx a;
  hilock_rwlock *rw;
  int read;
} spec_ctx;

static int spec_begin(void *arg, int queue) {
  spec_ctx *x = arg;
  ctx_init(&x->a, x->rw, queue); /* the owner: hilock__caller */
  return HILOCK_OK;
}

static int spec_attempt(void *arg, int64_t *pttl) {
  spec_ctx *x = arg;
  return x->read ? read_attempt(&x->a, pttl) : write_attempt(&x->a, pttl);
}

static void spec_leave(void *arg) {
  spec_ctx *x = arg;
  if (x->a.intent) (x->read ? read_withdraw : withdraw)(&x->a);
}

static int spec_done(void *arg, int status) {
  spec_ctx *x = arg;
  if (status < 0 && x->a.e.code != HILOCK_OK) keep_err(x->rw, &x->a.e);
  free(x);
  return status;
}

int hilock__rwlock_spec(hilock_rwlock *rw, int read, hilock__acquire_spec *s) {
  spec_ctx *x = calloc(1, sizeof(*x));
  if (x == NULL) return -1;
  x->rw = rw;
  x->read = read;
  ctx_init(&x->a, rw, 0);
  if (read)
    hilock__spec_queue(s, spec_begin, spec_attempt, spec_leave, x, &rw->rwake,
                       &rw->rwakelen);
  else
    hilock__spec_queue(s, spec_begin, spec_attempt, spec_leave, x, &rw->wwake,
                       &rw->wwakelen);
  s->wake = HILOCK__WAKE_TAKES; /* both sides' scripts take a rung wake-up */
  s->done = spec_done;
  return 0;
}

static int read_acquire(hilock_rwlock *rw, int64_t wait_ms, int once) {
  return acquire_side(rw, wait_ms, once, read_attempt, rw->rwake,
                      rw->rwakelen, read_withdraw);
}

int hilock_rwlock_read_acquire(hilock_rwlock *rw, int64_t wait_ms) {
  if (rw == NULL) return HILOCK_EINVAL;
  return read_acquire(rw, wait_ms, 0);
}

/* Record the calling thread's write grant. */
static int write_granted(attempt_ctx *a, int64_t start_us, uint64_t fence,
                         int64_t count) {
  hilock_rwlock *rw = a->rw;
  hilock__hold *w = &rw->w;
  int rc = HILOCK_OK, same, stale;

  pthread_mutex_lock(rw->mu);
  same = w->held && w->ownerlen == a->ownerlen &&
         memcmp(w->owner, a->owner, a->ownerlen) == 0;
  stale = w->held && !same;
  pthread_mutex_unlock(rw->mu);
  /* A stale grant of another owner (it lapsed unreleased) may still be
   * registered: stop its renewal before its owner id is overwritten. */
  if (stale) hilock__renewal_cancel(w);
  pthread_mutex_lock(rw->mu);
  rw->wcount = count;
  if (!same) rw->wrel[0] = 0;
  if (same && count > 1 && !hilock__hold_is_lost(w)) {
    hilock__hold_extended(w, start_us, rw->ttl_ms);
  } else {
    hilock__hold_lapse(w); /* the last grant lapsed unrenewed: lost */
    memcpy(w->owner, a->owner, a->ownerlen + 1);
    w->ownerlen = a->ownerlen;
    rc = hilock__hold_granted(w, start_us, fence);
    if (rc != HILOCK_OK) a->e = w->err;
  }
  pthread_mutex_unlock(rw->mu);
  return rc;
}

static int write_attempt(void *arg, int64_t *pttl) {
  attempt_ctx *a = arg;
  hilock_rwlock *rw = a->rw;
  const char *keys[8] = {rw->wkey, rw->rkey, rw->ckey, rw->ikey,
                         rw->akey, rw->fkey, rw->wwake, rw->dkey};
  size_t keylens[8] = {rw->wkeylen, rw->rkeylen, rw->ckeylen, rw->ikeylen,
                       rw->akeylen, rw->fkeylen, rw->wwakelen, rw->dkeylen};
  int64_t start = hilock__now_us();
  hilock__err unacked;
  redisReply *r = NULL;
  int rc = side_attempt(a, 0, keys, keylens, &unacked, &r);
  if (rc != HILOCK_OK && rc != HILOCK_ENOREPLICAS) return rc;
  if (!hilock__int_reply(r, 2) ||
      (r->element[0]->integer == 1 && !hilock__int_reply(r, 3))) {
    rc = hilock__set_err(&a->e, HILOCK_EPROTO,
                         "unexpected reply to the rwlock write script");
  } else if (r->element[0]->integer == 1 && rc == HILOCK_ENOREPLICAS) {
    rc = give_back(a, &unacked, run_write_release);
  } else if (r->element[0]->integer == 1) {
    rc = write_granted(a, start, (uint64_t)r->element[1]->integer,
                       r->element[2]->integer);
  } else if (r->element[0]->integer == 0) {
    rc = refused(a, r->element[1]->integer, pttl);
  } else if (r->element[0]->integer == -1) {
    rc = hilock__set_err(&a->e, HILOCK_EDEADLK,
                         "write: the calling thread holds a read lock on this "
                         "rwlock; upgrading from read to write would deadlock "
                         "(release the read lock first)");
  } else {
    rc = hilock__set_err(&a->e, HILOCK_EPROTO,
                         "unexpected reply to the rwlock write script");
  }
  freeReplyObject(r);
  return rc;
}

/* A writer that stops waiting drops its intent. */
static void withdraw(attempt_ctx *a) {
  hilock_rwlock *rw = a->rw;
  const char *keys[7] = {rw->ikey, rw->wkey,  rw->rkey, rw->qkey,
                         rw->akey, rw->rwake, rw->wwake};
  size_t keylens[7] = {rw->ikeylen, rw->wkeylen,  rw->rkeylen, rw->qkeylen,
                       rw->akeylen, rw->rwakelen, rw->wwakelen};
  side_withdraw(a, &hilock__script_rwlock_write_withdraw, 7, keys, keylens);
}

static int write_acquire(hilock_rwlock *rw, int64_t wait_ms, int once) {
  return acquire_side(rw, wait_ms, once, write_attempt, rw->wwake,
                      rw->wwakelen, withdraw);
}

static int try_acquire_fn(void *x) { return write_acquire(x, 0, 1); }

static int acquire_fn(void *x, int64_t wait_ms) {
  return write_acquire(x, wait_ms, 0);
}

/* ## Releasing --------------------------------------------------------- */

/* A hold whose last release stopped its renewal but did not end it (the
 * script failed, or counted another hold) is still ours as far as we know:
 * renew it again, so the caller may retry. */
static void renew_again(hilock__hold *h, int last) {
  if (last && h->auto_renew && !hilock__hold_is_lost(h))
    hilock__renewal_register(h);
}

/* Run one side's release script (run) for owner on its hold h (NULL if the
 * calling thread has none). A last release (last: it ends h) stops renewal
 * first, so no renewal can run after it and report the hold lost. HILOCK_OK
 * with the reply in *r, or the failure, kept as the handle's error.
 * pending (NULL: none kept) keeps the nonce of the hold's release whose
 * outcome is unknown (a broken connection and its resend, or a timeout),
 * else "": with retry, this call is that release's retry and reuses it.
 * Call with rw->mu unlocked. */
static int release_side(hilock_rwlock *rw, hilock__hold *h, int last,
                        int (*run)(hilock_rwlock *, hilock__err *,
                                   const char *, size_t, char *,
                                   redisReply **),
                        const char *owner, size_t ownerlen, char *pending,
                        int retry, redisReply **r) {
  hilock__err e;
  char nonce[HILOCK__TOKEN_LEN + 1] = "";
  int rc;
  if (last) hilock__renewal_cancel(h);
  hilock__clear_err(&e);
  *r = NULL;
  if (pending != NULL && retry) {
    pthread_mutex_lock(rw->mu);
    memcpy(nonce, pending, sizeof(nonce));
    pthread_mutex_unlock(rw->mu);
  }
  rc = run(rw, &e, owner, ownerlen, nonce, r);
  if (pending != NULL) {
    pthread_mutex_lock(rw->mu);
    if (rc == HILOCK_EIO || rc == HILOCK_ETIMEDOUT)
      memcpy(pending, nonce, sizeof(nonce));
    else
      pending[0] = 0;
    pthread_mutex_unlock(rw->mu);
  }
  if (rc == HILOCK_OK) return rc;
  renew_again(h, last);
  if (*r != NULL) freeReplyObject(*r);
  return keep_err(rw, &e);
}

/* One read release call of the calling thread; with retry, the retry of
 * its release whose outcome is unknown, if there is one (else HILOCK_OK
 * at once). */
static int read_release_call(hilock_rwlock *rw, int retry) {
  char owner[OWNER_MAX];
  size_t ownerlen;
  redisReply *r = NULL;
  rw_reader *rec;
  int rc, last;

  ownerlen = owner_of(rw, owner);
  pthread_mutex_lock(rw->mu);
  rec = find_reader(rw);
  if (retry && (rec == NULL || rec->rel[0] == 0)) {
    pthread_mutex_unlock(rw->mu);
    return HILOCK_OK;
  }
  if (rec == NULL) {
    rw_reader *parent = parents_reader(rw);
    if (parent != NULL) {
      rc = hilock__hold_check(&parent->h, "release");
      *hilock__hold_err(&rw->w) = parent->h.err;
      pthread_mutex_unlock(rw->mu);
      return rc;
    }
  }
  last = rec != NULL && rec->count <= 1;
  pthread_mutex_unlock(rw->mu);
  rc = release_side(rw, rec != NULL ? &rec->h : NULL, last, run_read_release,
                    owner, ownerlen, rec != NULL ? rec->rel : NULL, retry,
                    &r);
  if (rc != HILOCK_OK) return rc;
  if (r->integer > 0) {
    if (rec != NULL) {
      pthread_mutex_lock(rw->mu);
      rec->count = r->integer;
      pthread_mutex_unlock(rw->mu);
      renew_again(&rec->h, last);
    }
  } else if (r->integer == 0) {
    if (rec != NULL) remove_reader(rw, rec);
  } else {
    /* The grant is gone: a loss, reported until the thread's next read
     * grant (its record stays, holding nothing). */
    if (rec != NULL) {
      pthread_mutex_lock(rw->mu);
      hilock__hold_ended(&rec->h, 1);
      pthread_mutex_unlock(rw->mu);
    }
    rc = set_err(rw, HILOCK_ENOTOWNED,
                   "read release: the calling thread holds no read lock (or "
                   "it expired); nothing changed");
  }
  freeReplyObject(r);
  return rc;
}

/* The same for the write side. */
static int write_release_call(hilock_rwlock *rw, int retry) {
  char owner[OWNER_MAX];
  size_t ownerlen;
  redisReply *r = NULL;
  int rc, mine, last;

  ownerlen = owner_of(rw, owner);
  pthread_mutex_lock(rw->mu);
  mine = rw->w.held && rw->w.ownerlen == ownerlen &&
         memcmp(rw->w.owner, owner, ownerlen) == 0;
  if (retry && (!mine || rw->wrel[0] == 0)) {
    pthread_mutex_unlock(rw->mu);
    return HILOCK_OK;
  }
  if (rw->w.held && rw->w.pid != hilock__pid()) {
    rc = hilock__hold_check(&rw->w, "release");
    *hilock__hold_err(&rw->w) = rw->w.err;
    pthread_mutex_unlock(rw->mu);
    return rc;
  }
  mine = rw->w.held && rw->w.ownerlen == ownerlen &&
         memcmp(rw->w.owner, owner, ownerlen) == 0;
  last = mine && rw->wcount <= 1;
  pthread_mutex_unlock(rw->mu);
  rc = release_side(rw, &rw->w, last, run_write_release, owner, ownerlen,
                    mine ? rw->wrel : NULL, retry, &r);
  if (rc != HILOCK_OK) return rc;
  if (r->integer > 0) {
    if (mine) {
      pthread_mutex_lock(rw->mu);
      rw->wcount = r->integer;
      pthread_mutex_unlock(rw->mu);
      renew_again(&rw->w, last);
    }
  } else if (r->integer == 0) {
    if (mine) hilock__hold_drop(&rw->w); /* waits for an in-flight renewal */
  } else {
    /* The grant is gone: the release that found out ends it, as every
     * family's does, and reports the loss if nothing did before. */
    if (mine) {
      pthread_mutex_lock(rw->mu);
      hilock__hold_ended(&rw->w, 1);
      pthread_mutex_unlock(rw->mu);
    }
    rc = set_err(rw, HILOCK_ENOTOWNED,
                 "write release: the calling thread does not hold the write "
                 "lock (or it expired); nothing changed");
  }
  freeReplyObject(r);
  return rc;
}

/* A side's release whose outcome is unknown (its connection broke, and its
 * resend too, or its reply timed out) is completed before the owner's next
 * call on that side: the retry goes with its nonce, so it counts once
 * whether or not the first one ran, and a nested release that failed is
 * not left behind when the outer level is released. HILOCK_OK (or the
 * hold turned out gone), or the error that keeps it unknown. */
static int settle(hilock_rwlock *rw, int read) {
  int rc = read ? read_release_call(rw, 1) : write_release_call(rw, 1);
  return rc == HILOCK_ENOTOWNED ? HILOCK_OK : rc;
}

int hilock_rwlock_read_release(hilock_rwlock *rw) {
  int rc;
  if (rw == NULL) return HILOCK_EINVAL;
  rc = settle(rw, 1);
  return rc != HILOCK_OK ? rc : read_release_call(rw, 0);
}

static int release_fn(void *x) {
  hilock_rwlock *rw = x;
  int rc = settle(rw, 0);
  return rc != HILOCK_OK ? rc : write_release_call(rw, 0);
}

/* ## Queries ------------------------------------------------------------ */

/* {live readers, my read count, writer held, my write count}. */
static int state(hilock_rwlock *rw, int64_t out[4]) {
  char owner[OWNER_MAX];
  const char *keys[3] = {rw->rkey, rw->ckey, rw->wkey};
  size_t keylens[3] = {rw->rkeylen, rw->ckeylen, rw->wkeylen};
  const char *args[1] = {owner};
  size_t arglens[1];
  hilock__err e;
  redisReply *r = NULL;
  int rc;

  arglens[0] = owner_of(rw, owner);
  hilock__clear_err(&e);
  rc = hilock__script_run(rw->w.client, &e, &hilock__script_rwlock_state, 3,
                          keys, keylens, 1, args, arglens, &r);
  if (rc != HILOCK_OK) return keep_err(rw, &e);
  if (!hilock__int_reply(r, 4)) {
    freeReplyObject(r);
    return set_err(rw, HILOCK_EPROTO,
                   "unexpected reply to the rwlock state script");
  }
  for (int i = 0; i < 4; i++) out[i] = r->element[i]->integer;
  freeReplyObject(r);
  return HILOCK_OK;
}

int hilock_rwlock_read_hold_count(hilock_rwlock *rw, int64_t *count) {
  int64_t s[4];
  int rc;
  if (rw == NULL || count == NULL) return HILOCK_EINVAL;
  *count = 0;
  rc = state(rw, s);
  if (rc == HILOCK_OK) *count = s[1];
  return rc;
}

int hilock_rwlock_write_hold_count(hilock_rwlock *rw, int64_t *count) {
  int64_t s[4];
  int rc;
  if (rw == NULL || count == NULL) return HILOCK_EINVAL;
  *count = 0;
  rc = state(rw, s);
  if (rc == HILOCK_OK) *count = s[3];
  return rc;
}

int hilock_rwlock_state(hilock_rwlock *rw, int64_t *readers, int *writer) {
  int64_t s[4];
  int rc;
  if (rw == NULL) return HILOCK_EINVAL;
  if (readers != NULL) *readers = 0;
  if (writer != NULL) *writer = 0;
  rc = state(rw, s);
  if (rc != HILOCK_OK) return rc;
  if (readers != NULL) *readers = s[0];
  if (writer != NULL) *writer = s[2] != 0;
  return HILOCK_OK;
}

/* ## Renewal and local state -------------------------------------------- */

int hilock_rwlock_read_set_auto_renew(hilock_rwlock *rw, int enable,
                                      int64_t max_hold_ms,
                                      hilock_lost_fn on_lost, void *arg) {
  int rc = HILOCK_OK;
  pid_t pid = hilock__pid();
  if (rw == NULL) return HILOCK_EINVAL;
  if (max_hold_ms < 0)
    return set_err(rw, HILOCK_EINVAL, "max hold must be >= 0 ms");
  pthread_mutex_lock(rw->mu);
  rw->r_auto_renew = enable != 0;
  rw->r_max_hold_ms = max_hold_ms;
  rw->r_lost_fn = on_lost;
  rw->r_lost_arg = arg;
  for (rw_reader *r = rw->readers; r != NULL; r = r->next) {
    if (r->h.pid != pid) continue;
    hilock__renewal_cancel(&r->h);
    r->h.auto_renew = enable != 0;
    r->h.max_hold_ms = max_hold_ms;
    r->h.lost_fn = on_lost;
    r->h.lost_arg = arg;
    if (enable && r->h.held && !hilock__hold_is_lost(&r->h) &&
        hilock__renewal_register(&r->h) != HILOCK_OK) {
      *hilock__hold_err(&rw->w) = r->h.err;
      rc = r->h.err.code;
    }
  }
  pthread_mutex_unlock(rw->mu);
  return rc;
}

int hilock_rwlock_read_lost(hilock_rwlock *rw) {
  rw_reader *rec;
  int lost;
  if (rw == NULL) return 0;
  pthread_mutex_lock(rw->mu);
  rec = find_reader(rw);
  lost = rec != NULL && hilock__hold_reports_lost(&rec->h);
  pthread_mutex_unlock(rw->mu);
  return lost;
}

int64_t hilock_rwlock_read_validity_ms(hilock_rwlock *rw) {
  rw_reader *rec;
  int64_t v = 0;
  if (rw == NULL) return 0;
  pthread_mutex_lock(rw->mu);
  rec = find_reader(rw);
  if (rec != NULL) v = hilock__hold_validity_ms(&rec->h);
  pthread_mutex_unlock(rw->mu);
  return v;
}

const char *hilock_rwlock_key(const hilock_rwlock *rw, int write,
                              size_t *len) {
  if (rw == NULL) {
    if (len) *len = 0;
    return "";
  }
  if (len) *len = write ? rw->wkeylen : rw->rkeylen;
  return write ? rw->wkey : rw->rkey;
}


/* Round trip: the calling thread holds the write side. */
static int fam_owned(void *arg, int *owned) {
  int64_t n = 0;
  int rc = hilock_rwlock_write_hold_count(arg, &n);
  *owned = rc == HILOCK_OK && n > 0;
  return rc;
}

/* Round trip: a reader or a writer holds it. */
static int fam_locked(void *arg, int *locked) {
  int64_t readers = 0;
  int writer = 0, rc = hilock_rwlock_state(arg, &readers, &writer);
  *locked = rc == HILOCK_OK && (readers > 0 || writer);
  return rc;
}

/* The write side (the hold) for async.c; NULL arg when out of memory is
 * caught there. */
static void write_spec(void *arg, hilock__acquire_spec *s) {
  if (hilock__rwlock_spec(arg, 0, s) != 0) s->arg = NULL;
}

/* Lock delay: a setting of the handle for its write grants (read holds
 * take none); write renewals (the write hold's) push the marker. */
static int set_delay_fn(void *x, int64_t delay_ms) {
  hilock_rwlock *rw = x;
  int rc;
  pthread_mutex_lock(rw->mu);
  rc = hilock__hold_set_delay(&rw->w, delay_ms, rw->dkey, rw->dkeylen);
  if (rc != HILOCK_OK) keep_err(rw, &rw->w.err);
  pthread_mutex_unlock(rw->mu);
  return rc;
}

static const hilock__family family = {
    .name = "read-write lock", .acquire = acquire_fn,
    .try_acquire = try_acquire_fn,
    .free = fam_free, .owned = fam_owned, .locked = fam_locked,
    .acquire_spec = write_spec, .release = release_fn,
    .set_delay = set_delay_fn, .by_caller = 1};
