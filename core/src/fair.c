/* The fair (FIFO) lock: a ticket queue with heartbeats judged on server
 * time, all in core/scripts/fair_lock.lua. Waiting (on the waiter's own
 * wake list), renewal and grant state come from the shared layer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "family.h"
#include "holds.h"
#include "script.h"
#include "wait.h"
#include "scripts.h"

static const hilock__family family;

/* The script's KEYS, in order. */
enum { K_HOLDER, K_FENCE, K_QUEUE, K_BEATS, K_TICKETS, K_WAKE, NKEYS };
static const char *const roles[NKEYS] = {
    "fair", "fence", "fair:queue", "fair:heartbeat", "fair:ticket", "wake:"};

struct hilock_fair_lock {
  hilock__hold h; /* first: grant state and last error */
  char *keys[NKEYS];
  size_t keylens[NKEYS];
  char *wkey; /* this waiter's wake list: the wake prefix + waiter id */
  size_t wkeylen;
  char waiter[HILOCK__TOKEN_LEN + 1]; /* id of the acquire in progress */
  int queue;                          /* the acquire in progress may queue */
  int64_t ticket;       /* the acquire in progress's ticket (0: none) */
  uint64_t last_ticket; /* of the current or last grant */
  int64_t beat_ms;      /* heartbeat window; read by a waiting thread */
  /* The lock-delay marker, KEYS[8] (the delay is the hold's). */
  char *dkey;
  size_t dkeylen;
};

static void fair_destroy(hilock_fair_lock *fl) {
  for (int i = 0; i < NKEYS; i++) free(fl->keys[i]);
  free(fl->wkey);
  free(fl->dkey);
  free(fl);
}

static int run_release(void *arg, hilock__err *e, redisReply **r);

static int fair_lock_new(hilock_client *client, const char *name,
                         size_t namelen, int64_t ttl_ms,
                         hilock_fair_lock **out) {
  hilock_fair_lock *fl;
  int rc;

  fl = hilock__new_handle(client, name, namelen, ttl_ms, sizeof(*fl), &rc);
  if (fl == NULL) return rc;
  if (hilock__keys(&client->rt, name, namelen, roles, NKEYS, fl->keys, fl->keylens) !=
          HILOCK_OK ||
      (fl->wkey = malloc(fl->keylens[K_WAKE] + HILOCK__TOKEN_LEN + 1)) ==
          NULL ||
      (fl->dkey = hilock__key(&client->rt, name, namelen, "delay",
                              &fl->dkeylen)) == NULL) {
    fair_destroy(fl);
    return HILOCK_ENOMEM;
  }
  fl->wkeylen = fl->keylens[K_WAKE] + HILOCK__TOKEN_LEN;
  memcpy(fl->wkey, fl->keys[K_WAKE], fl->keylens[K_WAKE]);
  fl->wkey[fl->wkeylen] = '\0';
  fl->beat_ms = hilock__beat_default(ttl_ms, HILOCK_FAIR_HEARTBEAT_MIN_MS,
                                     HILOCK_FAIR_HEARTBEAT_DEFAULT_MAX_MS);
  /* Renewal and extend use the lock family's script: the holder key is a
   * string holding the owner token, as there. */
  hilock__hold_init_family(&fl->h, client, fl->keys[K_HOLDER],
                           fl->keylens[K_HOLDER],
                           &hilock__script_lock_extend, ttl_ms, &family,
                           run_release, fl);
  *out = fl;
  return HILOCK_OK;
}

int hilock_fair_lock_new(hilock_client *client, const char *name,
                         size_t namelen, int64_t ttl_ms,
                         hilock_fair_lock **out) {
  HILOCK__CLIENT_CALL(client, out,
                      fair_lock_new(client, name, namelen, ttl_ms, out));
}

static void fam_free(void *arg) {
  hilock_fair_lock *fl = arg;
  if (fl == NULL) return;
  hilock__hold_destroy(&fl->h);
  fair_destroy(fl);
}

/* Run one op of the script for waiter id. An attempt (acquire, try) goes
 * with its undo, the waiter's leave: if its reply does not come in time,
 * the leave is queued behind it on the same connection, so the server gives
 * back what the attempt may grant right after running it (and leave()
 * sends none of its own). */
static int run(hilock_fair_lock *fl, hilock__err *e, const char *op,
               const char *id, size_t idlen, redisReply **out) {
  char ttl[24], beat[24], ticket[24], delay[24];
  const char *args[6] = {op, id, ttl, beat, ticket, delay};
  size_t arglens[6];
  /* The lock-delay marker (KEYS[8]) every grant checks, and this handle's
   * delay (ARGV[6]) if it has one. */
  int nkeys = NKEYS + 2;
  int nargs = fl->h.delay_ms > 0 ? 6 : 5;
  arglens[0] = strlen(op);
  arglens[1] = idlen;
  arglens[2] = hilock__i64(ttl, fl->h.ttl_ms);
  arglens[3] = hilock__i64(beat, __atomic_load_n(&fl->beat_ms, __ATOMIC_RELAXED));
  arglens[4] = hilock__i64(ticket, fl->ticket);
  arglens[5] = hilock__i64(delay, fl->h.delay_ms);
  /* Only acquire and try grant: WAIT follows those (wait_replicas).
   * Release and leave may wake the next in line. */
  int how = op[0] == 'a' || op[0] == 't' ? HILOCK__RUN_GRANT
            : op[0] == 'r'                 ? HILOCK__RUN_WAKES
            : op[0] == 'l' ? HILOCK__RUN_WAKES | HILOCK__RUN_LATER
                           : 0;
  /* KEYS[7]: the caller's own wake list, so the script builds no key
   * from ARGV. */
  const char *keys[NKEYS + 2];
  size_t keylens[NKEYS + 2];
  char own[HILOCK_KEY_PREFIX_MAX + HILOCK_NAME_MAX + 64];
  if (fl->keylens[K_WAKE] + idlen > sizeof(own))
    return hilock__set_err(e, HILOCK_EINVAL, "waiter id too long");
  memcpy(own, fl->keys[K_WAKE], fl->keylens[K_WAKE]);
  memcpy(own + fl->keylens[K_WAKE], id, idlen);
  for (int i = 0; i < NKEYS; i++) {
    keys[i] = fl->keys[i];
    keylens[i] = fl->keylens[i];
  }
  keys[NKEYS] = own;
  keylens[NKEYS] = fl->keylens[K_WAKE] + idlen;
  keys[NKEYS + 1] = fl->dkey;
  keylens[NKEYS + 1] = fl->dkeylen;
  const char *uargs[6] = {"leave", id, ttl, beat, ticket, delay};
  size_t uarglens[6] = {5, arglens[1], arglens[2], arglens[3], arglens[4],
                        arglens[5]};
  hilock__undo u = {&hilock__script_fair_lock, nkeys, nargs, keys, keylens,
                    uargs, uarglens, fl->h.ttl_ms, NULL};
  const hilock__undo *outer = NULL;
  if (how == HILOCK__RUN_GRANT) outer = hilock__undo_arm(&u);
  int rc = hilock__script_run_as(fl->h.client, e, &hilock__script_fair_lock,
                                 how, nkeys, keys, keylens, nargs, args,
                                 arglens, out);
  if (how == HILOCK__RUN_GRANT) hilock__undo_disarm(outer);
  return rc;
}

/* One attempt: grant, or (queueing) refresh our place and heartbeat. When
 * busy, *bound is how long to sleep before the next re-check: a third of
 * the heartbeat window, or less when we are the head and the holder's TTL
 * runs out sooner. */
static int attempt(void *arg, int64_t *bound) {
  hilock_fair_lock *fl = arg;
  hilock__hold *h = &fl->h;
  redisReply *r;
  int64_t start = hilock__now_us();
  int rc;

  rc = run(fl, &h->err, fl->queue ? "acquire" : "try", fl->waiter,
           HILOCK__TOKEN_LEN, &r);
  rc = hilock__queued_unacked(&h->err, rc, r);
  if (rc != HILOCK_OK) return rc;
  if (!hilock__int_reply(r, 3)) {
    /* Fail closed: an unreadable reply is never a grant. */
    freeReplyObject(r);
    return hilock__set_err(&h->err, HILOCK_EPROTO,
                           "unexpected reply to the fair lock script");
  }
  if (r->element[2]->integer > 0) fl->ticket = r->element[2]->integer;
  if (r->element[0]->integer == 1) {
    memcpy(h->owner, fl->waiter, HILOCK__TOKEN_LEN + 1);
    h->ownerlen = HILOCK__TOKEN_LEN;
    fl->last_ticket = (uint64_t)fl->ticket;
    rc = hilock__hold_granted(h, start, (uint64_t)r->element[1]->integer);
  } else {
    int64_t pttl = r->element[1]->integer;
    int head = r->elements > 3 && r->element[3]->integer == 0;
    /* The head watches the holder's TTL; one that ends within this
     * millisecond (PTTL 0) is re-checked in 1 ms, not a heartbeat slice
     * later. -1: no expiry, nothing to watch. */
    int64_t watch = !head || pttl == -1 ? 0 : pttl < 1 ? 1 : pttl;
    *bound = hilock__beat_bound(__atomic_load_n(&fl->beat_ms, __ATOMIC_RELAXED),
                                watch);
    rc = HILOCK_BUSY;
  }
  freeReplyObject(r);
  return rc;
}

/* Start an acquire: refuse if this handle holds the lock, else draw a new
 * waiter id (the owner token if granted). */
static int begin(void *arg, int queue) {
  hilock_fair_lock *fl = arg;
  int rc = hilock__queue_begin(&fl->h, fl->waiter);
  if (rc != HILOCK_OK) return rc;
  memcpy(fl->wkey + fl->keylens[K_WAKE], fl->waiter, HILOCK__TOKEN_LEN);
  fl->ticket = 0;
  fl->queue = queue;
  return HILOCK_OK;
}

/* The acquire did not end in a grant: leave the queue (and give back a
 * grant whose reply was lost), keeping the error that got us here. */
static void leave(void *arg) {
  hilock_fair_lock *fl = arg;
  hilock__err e;
  redisReply *r;
  hilock__clear_err(&e);
  /* Already queued behind the last attempt, unanswered: one here would
   * wait on the same server past the caller's timeout. */
  if (!hilock__undo_queued() &&
      run(fl, &e, "leave", fl->waiter, HILOCK__TOKEN_LEN, &r) == HILOCK_OK)
    freeReplyObject(r);
  if (fl->h.held) hilock__hold_drop(&fl->h);
}

static void acquire_spec(void *arg, hilock__acquire_spec *sp) {
  hilock_fair_lock *fl = arg;
  hilock__spec_queue(sp, begin, attempt, leave, fl, &fl->wkey, &fl->wkeylen);
}

static int run_release(void *arg, hilock__err *e, redisReply **r) {
  hilock_fair_lock *fl = arg;
  return run(fl, e, "release", fl->h.owner, fl->h.ownerlen, r);
}

static int extend_fn(void *x, int64_t ms, int replace) {
  hilock_fair_lock *fl = x;
  return hilock__hold_extend(&fl->h, ms, replace);
}

static int renew_fn(void *x) {
  hilock_fair_lock *fl = x;
  return hilock__hold_extend(&fl->h, fl->h.ttl_ms, 1);
}



int hilock_fair_lock_waiters(hilock_fair_lock *fl, int64_t *count) {
  redisReply *r;
  int rc;
  if (fl == NULL || count == NULL) return HILOCK_EINVAL;
  *count = 0;
  rc = run(fl, &fl->h.err, "count", "", 0, &r);
  if (rc != HILOCK_OK) return rc;
  if (hilock__int_reply(r, 1))
    *count = r->element[0]->integer;
  else
    rc = hilock__set_err(&fl->h.err, HILOCK_EPROTO,
                         "unexpected reply to the waiter count");
  freeReplyObject(r);
  return rc;
}

static int set_heartbeat_fn(void *x, int64_t window_ms) {
  hilock_fair_lock *fl = x;
  if (fl == NULL) return HILOCK_EINVAL;
  if (window_ms < HILOCK_FAIR_HEARTBEAT_MIN_MS || window_ms > HILOCK_TTL_MAX_MS)
    return hilock__set_err(&fl->h.err, HILOCK_EINVAL,
                           "heartbeat window must be %lld..%lld ms, got %lld",
                           (long long)HILOCK_FAIR_HEARTBEAT_MIN_MS,
                           (long long)HILOCK_TTL_MAX_MS, (long long)window_ms);
  __atomic_store_n(&fl->beat_ms, window_ms, __ATOMIC_RELAXED);
  return HILOCK_OK;
}

static int64_t heartbeat_ms_fn(const void *x) {
  const hilock_fair_lock *fl = x;
  return fl == NULL ? 0 : __atomic_load_n(&fl->beat_ms, __ATOMIC_RELAXED);
}

static int set_delay_fn(void *x, int64_t delay_ms) {
  hilock_fair_lock *fl = x;
  /* Renewals and extensions (lock_extend.lua) push the marker along. */
  return hilock__hold_set_delay(&fl->h, delay_ms, fl->dkey, fl->dkeylen);
}

uint64_t hilock_fair_lock_ticket(const hilock_fair_lock *fl) {
  return fl == NULL ? 0 : fl->last_ticket;
}

/* Handing the grant over (adopt.c): its ticket goes with it. */
static void grant_fn(const void *x, hilock__grant *g) {
  const hilock_fair_lock *fl = x;
  g->family = HILOCK__GRANT_FAIR;
  g->a = (int64_t)fl->last_ticket;
  g->one = hilock__key_name(fl->h.rt, fl->keys[K_HOLDER],
                            fl->keylens[K_HOLDER], roles[K_HOLDER], &g->onelen);
  g->n = 1;
  g->names = &g->one;
  g->namelens = &g->onelen;
}

int hilock__fair_adopt(hilock_client *c, const hilock__grant *g,
                       hilock__hold **out) {
  hilock_fair_lock *fl = NULL;
  int rc = g->kind != 0 || g->a < 0 || g->b != 0
               ? hilock__set_err(hilock__client_err(c), HILOCK_EINVAL,
                                 "the exported grant is malformed")
               : fair_lock_new(c, g->names[0], g->namelens[0], g->ttl_ms, &fl);
  if (rc != HILOCK_OK) return rc;
  fl->ticket = g->a;
  fl->last_ticket = (uint64_t)g->a;
  memcpy(fl->waiter, g->owner, HILOCK__TOKEN_LEN);
  fl->waiter[HILOCK__TOKEN_LEN] = '\0';
  memcpy(fl->wkey + fl->keylens[K_WAKE], fl->waiter, HILOCK__TOKEN_LEN);
  *out = &fl->h;
  return HILOCK_OK;
}

static const hilock__family family = {
    .name = "fair lock", .free = fam_free, .acquire_spec = acquire_spec,
    .release_array = 1,
    .notowned = "the lock expired or another owner holds it; nothing was "
                "deleted",
    .extend = extend_fn, .renew = renew_fn, .grant = grant_fn,
    .set_delay = set_delay_fn,
    .set_heartbeat = set_heartbeat_fn, .heartbeat_ms = heartbeat_ms_fn};
