/* The sequential lock (ZooKeeper's recipe): ephemeral sequential entries
 * with sessions on server time and a watch on the predecessor, all in
 * core/scripts/seqlock.lua. Waiting (on the entry's own wake list), renewal
 * (seqlock_renew.lua) and grant state come from the shared layer. */
#include <stdint.h>
#include <stdio.h>
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

/* The script's KEYS, in order (K_DELAY: the lock-delay marker, which
 * every grant checks, whatever its own delay). */
enum { K_QUEUE, K_SESSION, K_HOLDER, K_COUNTER, K_FENCE, K_WAKE, K_DELAY,
       NKEYS };
static const char *const roles[NKEYS] = {"seq:queue",   "seq:session",
                                         "seq:holder",  "seq:counter",
                                         "fence",       "seq:wake:",
                                         "delay"};

/* A wake list is named by its entry's sequence number in fixed-width
 * decimal, so the key keeps its length while acquire_loop waits on it. */
#define SEQ_DIGITS 20

struct hilock_sequential_lock {
  hilock__hold h; /* first: grant state and last error */
  char *keys[NKEYS];
  size_t keylens[NKEYS];
  char *wkey; /* this entry's wake list: the wake prefix + its sequence */
  /* wkeylen is fixed: prefix + SEQ_DIGITS */
  size_t wkeylen;
  char id[HILOCK__TOKEN_LEN + 1]; /* contender id of the acquire in progress */
  int queue;                      /* the acquire in progress may enqueue */
  int64_t seq;      /* sequence of the entry (atomic: read by other threads) */
  int64_t session_ms; /* a waiter's session window (atomic) */
  /* The renewal's KEYS[2..4]: queue, holder and, with a lock delay (the
   * hold's delay_ms), the marker. */
  const char *renew_xkeys[3];
  size_t renew_xkeylens[3];
};

static void seq_destroy(hilock_sequential_lock *sl) {
  for (int i = 0; i < NKEYS; i++) free(sl->keys[i]);
  free(sl->wkey);
  free(sl);
}

static int run_release(void *arg, hilock__err *e, redisReply **r);

static int seqlock_new(hilock_client *client, const char *name, size_t namelen,
                       int64_t ttl_ms, hilock_sequential_lock **out) {
  hilock_sequential_lock *sl;
  int rc;

  sl = hilock__new_handle(client, name, namelen, ttl_ms, sizeof(*sl), &rc);
  if (sl == NULL) return rc;
  if (hilock__keys(&client->rt, name, namelen, roles, NKEYS, sl->keys, sl->keylens) !=
          HILOCK_OK ||
      (sl->wkey = malloc(sl->keylens[K_WAKE] + SEQ_DIGITS + 1)) == NULL) {
    seq_destroy(sl);
    return HILOCK_ENOMEM;
  }
  memcpy(sl->wkey, sl->keys[K_WAKE], sl->keylens[K_WAKE] + 1);
  sl->wkeylen = sl->keylens[K_WAKE] + SEQ_DIGITS;
  sl->session_ms =
      hilock__beat_default(ttl_ms, HILOCK_SEQUENTIAL_LOCK_HEARTBEAT_MIN_MS,
                           HILOCK_SEQUENTIAL_LOCK_HEARTBEAT_DEFAULT_MAX_MS);
  /* The watchdog renews the holder's session entry. */
  hilock__hold_init_family(&sl->h, client, sl->keys[K_SESSION],
                           sl->keylens[K_SESSION],
                           &hilock__script_seqlock_renew, ttl_ms, &family,
                           run_release, sl);
  sl->renew_xkeys[0] = sl->keys[K_QUEUE];
  sl->renew_xkeylens[0] = sl->keylens[K_QUEUE];
  sl->renew_xkeys[1] = sl->keys[K_HOLDER];
  sl->renew_xkeylens[1] = sl->keylens[K_HOLDER];
  sl->renew_xkeys[2] = sl->keys[K_DELAY];
  sl->renew_xkeylens[2] = sl->keylens[K_DELAY];
  sl->h.xkeys = sl->renew_xkeys;
  sl->h.xkeylens = sl->renew_xkeylens;
  sl->h.nxkeys = 2;
  *out = sl;
  return HILOCK_OK;
}

int hilock_sequential_lock_new(hilock_client *client, const char *name, size_t namelen,
                       int64_t ttl_ms, hilock_sequential_lock **out) {
  HILOCK__CLIENT_CALL(client, out,
                      seqlock_new(client, name, namelen, ttl_ms, out));
}

static void fam_free(void *arg) {
  hilock_sequential_lock *sl = arg;
  if (sl == NULL) return;
  hilock__hold_destroy(&sl->h);
  seq_destroy(sl);
}

/* Run one op of the script for contender id; ms/mode only for extend. */
static int run(hilock_sequential_lock *sl, hilock__err *e, const char *op,
               const char *id, size_t idlen, int64_t ms, const char *mode,
               redisReply **out) {
  char ttl[24], win[24], msb[24], delay[24];
  const char *args[7] = {op, id, ttl, win, msb, mode ? mode : "", delay};
  size_t arglens[7];
  /* This handle's lock delay (ARGV[7]) if it has one: its grants set the
   * marker and its extensions push it. */
  int nargs = sl->h.delay_ms > 0 ? 7 : 6;
  arglens[0] = strlen(op);
  arglens[1] = idlen;
  arglens[2] = hilock__i64(ttl, sl->h.ttl_ms);
  arglens[3] =
      hilock__i64(win, __atomic_load_n(&sl->session_ms, __ATOMIC_RELAXED));
  arglens[4] = hilock__i64(msb, ms);
  arglens[5] = strlen(args[5]);
  arglens[6] = hilock__i64(delay, sl->h.delay_ms);
  /* Grants and extensions are confirmed by WAIT (wait_replicas); release
   * and leave may wake the next contender. */
  int how = strcmp(op, "acquire") == 0 || strcmp(op, "try") == 0 ||
                    strcmp(op, "extend") == 0
                ? HILOCK__RUN_GRANT
            : strcmp(op, "release") == 0 ? HILOCK__RUN_WAKES
            : strcmp(op, "leave") == 0 ? HILOCK__RUN_WAKES | HILOCK__RUN_LATER
                                       : 0;
  /* An attempt goes with its undo, the contender's leave (see fair.c's
   * run), which deletes the marker with a grant it gives back. */
  int attempt = strcmp(op, "acquire") == 0 || strcmp(op, "try") == 0;
  const char *uargs[6] = {"leave", id, ttl, win, msb, ""};
  size_t uarglens[6] = {5, arglens[1], arglens[2], arglens[3], arglens[4], 0};
  hilock__undo u = {&hilock__script_seqlock, NKEYS, 6,
                    (const char *const *)sl->keys, sl->keylens, uargs,
                    uarglens, sl->h.ttl_ms, NULL};
  const hilock__undo *outer = NULL;
  if (attempt) outer = hilock__undo_arm(&u);
  int rc = hilock__script_run_as(sl->h.client, e, &hilock__script_seqlock,
                                 how, NKEYS, (const char **)sl->keys,
                                 sl->keylens, nargs, args, arglens, out);
  if (attempt) hilock__undo_disarm(outer);
  return rc;
}

/* Point the wake key at the entry with sequence seq. */
static void set_seq(hilock_sequential_lock *sl, int64_t seq) {
  __atomic_store_n(&sl->seq, seq, __ATOMIC_RELAXED);
  snprintf(sl->wkey + sl->keylens[K_WAKE], SEQ_DIGITS + 1, "%020lld",
           (long long)seq);
}

/* One attempt: grant, or (enqueueing) create / re-check our entry. When
 * busy, *bound is how long to sleep before the next re-check: until the
 * predecessor's session would run out, at most a third of our window. */
static int attempt(void *arg, int64_t *bound) {
  hilock_sequential_lock *sl = arg;
  hilock__hold *h = &sl->h;
  redisReply *r;
  int64_t start = hilock__now_us();
  int rc;

  rc = run(sl, &h->err, sl->queue ? "acquire" : "try", sl->id,
           HILOCK__TOKEN_LEN, 0, NULL, &r);
  rc = hilock__queued_unacked(&h->err, rc, r);
  if (rc != HILOCK_OK) return rc;
  if (!hilock__int_reply(r, 3) || (r->element[0]->integer != 1 && r->elements < 4) ||
      (r->element[0]->integer == 1 && r->element[1]->integer <= 0)) {
    /* Fail closed: an unreadable reply is never a grant. */
    freeReplyObject(r);
    return hilock__set_err(&h->err, HILOCK_EPROTO,
                           "unexpected reply to the sequential lock script");
  }
  if (r->element[2]->integer > 0) set_seq(sl, r->element[2]->integer);
  if (r->element[0]->integer == 1) {
    memcpy(h->owner, sl->id, HILOCK__TOKEN_LEN + 1);
    h->ownerlen = HILOCK__TOKEN_LEN;
    rc = hilock__hold_granted(h, start, (uint64_t)r->element[1]->integer);
  } else {
    /* Until the predecessor's session ends; one ending within this
     * millisecond is re-checked in 1 ms, not a heartbeat slice later. */
    int64_t watch = r->element[1]->integer;
    *bound = hilock__beat_bound(
        __atomic_load_n(&sl->session_ms, __ATOMIC_RELAXED),
        watch < 1 ? 1 : watch);
    rc = HILOCK_BUSY;
  }
  freeReplyObject(r);
  return rc;
}

/* Start an acquire: refuse if this handle holds the lock, else draw a new
 * contender id (the owner token if granted). */
static int begin(void *arg, int queue) {
  hilock_sequential_lock *sl = arg;
  int rc = hilock__queue_begin(&sl->h, sl->id);
  if (rc != HILOCK_OK) return rc;
  set_seq(sl, 0);
  sl->queue = queue;
  return HILOCK_OK;
}

/* The acquire did not end in a grant: remove our entry and wake our
 * successor (and give back a grant whose reply was lost), keeping the
 * error that got us here. */
static void leave(void *arg) {
  hilock_sequential_lock *sl = arg;
  hilock__err e;
  redisReply *r;
  hilock__clear_err(&e);
  if (!hilock__undo_queued() && /* see fair.c's leave */
      run(sl, &e, "leave", sl->id, HILOCK__TOKEN_LEN, 0, NULL, &r) ==
          HILOCK_OK)
    freeReplyObject(r);
  if (sl->h.held) hilock__hold_drop(&sl->h);
}

static void acquire_spec(void *arg, hilock__acquire_spec *sp) {
  hilock_sequential_lock *sl = arg;
  hilock__spec_queue(sp, begin, attempt, leave, sl, &sl->wkey, &sl->wkeylen);
}

static int run_release(void *arg, hilock__err *e, redisReply **r) {
  hilock_sequential_lock *sl = arg;
  return run(sl, e, "release", sl->h.owner, sl->h.ownerlen, 0, NULL, r);
}

static int extend_fn(void *x, int64_t ms, int replace) {
  hilock_sequential_lock *sl = x;
  hilock__hold *h = &sl->h;
  redisReply *r;
  int64_t start;
  int rc;
  rc = hilock__check_ms(&h->err, "extension", ms);
  if (rc == HILOCK_OK) rc = hilock__hold_check(h, "extend");
  if (rc != HILOCK_OK) return rc;
  start = hilock__now_us();
  rc = run(sl, &h->err, "extend", h->owner, h->ownerlen, ms,
           replace ? "set" : "add", &r);
  if (rc == HILOCK_ENOREPLICAS &&
      hilock__extended_unacked(&rc, r, hilock__int_reply(r, 1) &&
                                           r->element[0]->integer > 0))
    return rc;
  if (rc != HILOCK_OK) return rc;
  if (!hilock__int_reply(r, 1)) {
    rc = hilock__set_err(&h->err, HILOCK_EPROTO, "unexpected reply to extend");
  } else if (r->element[0]->integer <= 0) {
    hilock__hold_lost(h);
    rc = hilock__set_err(&h->err, HILOCK_ENOTOWNED,
                         "extend: the session lapsed and the entry is gone");
  } else {
    hilock__hold_extended(h, start, r->element[0]->integer);
  }
  freeReplyObject(r);
  return rc;
}

static int renew_fn(void *x) {
  hilock_sequential_lock *sl = x;
  return extend_fn(sl, sl->h.ttl_ms, 1);
}

static int fam_owned(void *arg, int *owned) {
  hilock_sequential_lock *sl = arg;
  hilock__hold *h;
  redisReply *r;
  int rc;
  if (sl == NULL || owned == NULL) return HILOCK_EINVAL;
  h = &sl->h;
  *owned = 0;
  if (!h->held || h->pid != hilock__pid()) return HILOCK_OK;
  rc = run(sl, &h->err, "owned", h->owner, h->ownerlen, 0, NULL, &r);
  if (rc != HILOCK_OK) return rc;
  if (!hilock__int_reply(r, 1))
    rc = hilock__set_err(&h->err, HILOCK_EPROTO, "unexpected reply to owned");
  else if (r->element[0]->integer == 1)
    *owned = 1;
  else
    hilock__hold_lost(h);
  freeReplyObject(r);
  return rc;
}

/* info: {locked, waiters, holder's seq}. */
static int info(hilock_sequential_lock *sl, int64_t out[3]) {
  redisReply *r;
  int rc = run(sl, &sl->h.err, "info", "", 0, 0, NULL, &r);
  if (rc != HILOCK_OK) return rc;
  if (hilock__int_reply(r, 3)) {
    for (int i = 0; i < 3; i++) out[i] = r->element[i]->integer;
  } else {
    rc = hilock__set_err(&sl->h.err, HILOCK_EPROTO,
                         "unexpected reply to the sequential lock info");
  }
  freeReplyObject(r);
  return rc;
}

static int fam_locked(void *arg, int *locked) {
  hilock_sequential_lock *sl = arg;
  int64_t v[3];
  int rc;
  if (sl == NULL || locked == NULL) return HILOCK_EINVAL;
  *locked = 0;
  rc = info(sl, v);
  if (rc == HILOCK_OK) *locked = v[0] != 0;
  return rc;
}

int hilock_sequential_lock_waiters(hilock_sequential_lock *sl, int64_t *count) {
  int64_t v[3];
  int rc;
  if (sl == NULL || count == NULL) return HILOCK_EINVAL;
  *count = 0;
  rc = info(sl, v);
  if (rc == HILOCK_OK) *count = v[1];
  return rc;
}

uint64_t hilock_sequential_lock_sequence(const hilock_sequential_lock *sl) {
  return sl == NULL ? 0 : (uint64_t)__atomic_load_n(&sl->seq, __ATOMIC_RELAXED);
}

static int set_heartbeat_fn(void *x, int64_t window_ms) {
  hilock_sequential_lock *sl = x;
  if (sl == NULL) return HILOCK_EINVAL;
  if (window_ms < HILOCK_SEQUENTIAL_LOCK_HEARTBEAT_MIN_MS || window_ms > HILOCK_TTL_MAX_MS)
    return hilock__set_err(&sl->h.err, HILOCK_EINVAL,
                           "heartbeat window must be %lld..%lld ms, got %lld",
                           (long long)HILOCK_SEQUENTIAL_LOCK_HEARTBEAT_MIN_MS,
                           (long long)HILOCK_TTL_MAX_MS, (long long)window_ms);
  __atomic_store_n(&sl->session_ms, window_ms, __ATOMIC_RELAXED);
  return HILOCK_OK;
}

static int64_t heartbeat_ms_fn(const void *x) {
  const hilock_sequential_lock *sl = x;
  return sl == NULL ? 0 : __atomic_load_n(&sl->session_ms, __ATOMIC_RELAXED);
}


static int set_delay_fn(void *x, int64_t delay_ms) {
  hilock_sequential_lock *sl = x;
  int rc = hilock__hold_set_delay(&sl->h, delay_ms, NULL, 0);
  /* The renewal thread's batches push the marker along (KEYS[4] of
   * seqlock_renew.lua) while the handle has a delay. */
  if (rc == HILOCK_OK) sl->h.nxkeys = delay_ms > 0 ? 3 : 2;
  return rc;
}

/* The queue key (for operators). */
static const char *fam_key(const void *arg, size_t *len) {
  const hilock_sequential_lock *sl = arg;
  if (len) *len = sl->keylens[K_QUEUE];
  return sl->keys[K_QUEUE];
}

/* Handing the grant over (adopt.c): its entry's sequence goes with it. */
static void grant_fn(const void *x, hilock__grant *g) {
  const hilock_sequential_lock *sl = x;
  g->family = HILOCK__GRANT_SEQ;
  g->a = __atomic_load_n(&sl->seq, __ATOMIC_RELAXED);
  g->one = hilock__key_name(sl->h.rt, sl->keys[K_QUEUE], sl->keylens[K_QUEUE],
                            roles[K_QUEUE], &g->onelen);
  g->n = 1;
  g->names = &g->one;
  g->namelens = &g->onelen;
}

int hilock__seq_adopt(hilock_client *c, const hilock__grant *g,
                      hilock__hold **out) {
  hilock_sequential_lock *sl = NULL;
  int rc = g->kind != 0 || g->a <= 0 || g->b != 0
               ? hilock__set_err(hilock__client_err(c), HILOCK_EINVAL,
                                 "the exported grant is malformed")
               : seqlock_new(c, g->names[0], g->namelens[0], g->ttl_ms, &sl);
  if (rc != HILOCK_OK) return rc;
  set_seq(sl, g->a);
  memcpy(sl->id, g->owner, HILOCK__TOKEN_LEN);
  sl->id[HILOCK__TOKEN_LEN] = '\0';
  *out = &sl->h;
  return HILOCK_OK;
}

static const hilock__family family = {
    .name = "sequential lock",
    .free = fam_free, .owned = fam_owned, .locked = fam_locked, .key = fam_key,
    .acquire_spec = acquire_spec, .release_array = 1,
    .notowned = "the session lapsed and the entry is gone; nothing was "
                "removed",
    .extend = extend_fn,
    .renew = renew_fn, .grant = grant_fn, .set_delay = set_delay_fn,
    .set_heartbeat = set_heartbeat_fn, .heartbeat_ms = heartbeat_ms_fn};
