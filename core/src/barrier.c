/* Barriers and double barriers: a waiting party is a hold (hold.c) whose
 * key is the generation's zset of parties and whose owner token is its
 * member there; the watchdog renews its lease as a registered party's
 * (renew_party.lua). Waiters sleep on the barrier hash's channel (wait.c's
 * channel waits) until a message or the earliest lease end of another
 * party, when their check finds a lapsed lease and breaks the generation.
 * Mostly the scripts in core/scripts/barrier_*.lua. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "family.h"
#include "holds.h"
#include "script.h"
#include "wait.h"
#include "scripts.h"

#include "hilock/barrier.h"

static const hilock__family barrier_family, double_family;

struct hilock_barrier {
  hilock__hold h; /* first: the waiting party's lease and last error */
  char *key, *zkey; /* the hash (and channel), the parties' zset */
  size_t keylen, zkeylen;
  int64_t parties;
  int dbl;         /* a double barrier's */
  int inside;      /* a double barrier's party between enter and leave */
  int64_t gen;     /* the generation this party is in (a round's: odd) */
  char member[HILOCK__TOKEN_LEN + 1]; /* its id (the hold's owner token,
                                         kept after the hold is dropped) */
};

struct hilock_double_barrier {
  struct hilock_barrier b;
};

/* Reply codes of the scripts (lib/barrier.lua). */
enum { PASSED = 1, WAITING = 0, BROKEN = -1, INSIDE = -3, PARTIES = -4,
       WITHDRAWN = 2 };

static void fam_free(void *arg) {
  hilock_barrier *b = arg;
  if (b != NULL) hilock__family_free(&b->h, b, 2, b->key, b->zkey);
}

static int barrier_new(hilock_client *client, const char *name,
                       size_t namelen, int64_t parties, int64_t ttl_ms,
                       int dbl, hilock_barrier **out) {
  hilock_barrier *b;
  int rc;
  hilock__count c = {"parties", parties, HILOCK_BARRIER_PARTIES_MAX};
  b = hilock__new_handle_with(client, name, namelen, 1, ttl_ms,
                              hilock__check_count, &c,
                              dbl ? sizeof(hilock_double_barrier) : sizeof(*b),
                              &rc);
  if (b == NULL) return rc;
  if (hilock__family_keys(b, client, name, namelen, 2,
                          dbl ? "dbarrier" : "barrier", &b->key, &b->keylen,
                          dbl ? "inside" : "arrived", &b->zkey,
                          &b->zkeylen) != HILOCK_OK)
    return HILOCK_ENOMEM;
  b->parties = parties;
  b->dbl = dbl;
  hilock__hold_init_family(&b->h, client, b->zkey, b->zkeylen,
                           &hilock__script_party_renew, ttl_ms,
                           dbl ? &double_family : &barrier_family, NULL, b);
  b->h.auto_renew = 1; /* a waiting party lives as long as it renews */
  *out = b;
  return HILOCK_OK;
}

int hilock_barrier_new(hilock_client *client, const char *name,
                       size_t namelen, int64_t parties, int64_t ttl_ms,
                       hilock_barrier **out) {
  HILOCK__CLIENT_CALL(client, out, barrier_new(client, name, namelen, parties,
                                               ttl_ms, 0, out));
}

int hilock_double_barrier_new(hilock_client *client, const char *name,
                              size_t namelen, int64_t parties, int64_t ttl_ms,
                              hilock_double_barrier **out) {
  HILOCK__CLIENT_CALL(
      client, out,
      barrier_new(client, name, namelen, parties, ttl_ms, 1,
                  (hilock_barrier **)out));
}

/* A script's reply {code, a, b, why} (the last nwhy-th element a string);
 * HILOCK_EPROTO if it has another shape. */
static int reply_ok(const redisReply *r, size_t n) {
  size_t i;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != n) return 0;
  for (i = 0; i + 1 < n; i++)
    if (r->element[i]->type != REDIS_REPLY_INTEGER) return 0;
  return r->element[n - 1]->type == REDIS_REPLY_STRING;
}

/* Run barrier script s with the party's id and args (at most 3 more);
 * *r the reply of n elements (code, ..., why). */
static int run(hilock_barrier *b, const hilock__script *s, int nargs,
               const char **args, const size_t *arglens, size_t n,
               redisReply **r) {
  const char *keys[2] = {b->key, b->zkey};
  size_t keylens[2] = {b->keylen, b->zkeylen};
  int rc = hilock__script_run(b->h.client, &b->h.err, s, 2, keys, keylens,
                              nargs, args, arglens, r);
  if (rc != HILOCK_OK) return rc;
  if (n > 0 && !reply_ok(*r, n)) {
    freeReplyObject(*r);
    *r = NULL;
    return hilock__set_err(&b->h.err, HILOCK_EPROTO,
                           "unexpected reply to the %s script", s->name);
  }
  return HILOCK_OK;
}

/* The end of a generation for this party: code PASSED (HILOCK_OK) or
 * BROKEN (HILOCK_EBROKEN, why the message). */
static int outcome(hilock_barrier *b, long long code, const redisReply *why) {
  if (code == PASSED) return HILOCK_OK;
  return hilock__set_err(&b->h.err, HILOCK_EBROKEN,
                         "the %s is broken: %.*s",
                         b->dbl ? "double barrier" : "barrier",
                         (int)why->len, why->str);
}

/* One look at generation g for this party (inside: its arrival must be
 * there): *code PASSED, BROKEN (the error set) or WAITING with *ms to the
 * earliest lease end of another party (-1: none). */
static int look(hilock_barrier *b, int64_t g, int inside, long long *code,
                int64_t *ms) {
  char gs[24];
  const char *args[3] = {b->member, gs, inside ? "1" : "0"};
  size_t arglens[3] = {HILOCK__TOKEN_LEN, hilock__i64(gs, g), 1};
  redisReply *r;
  int rc = run(b, &hilock__script_barrier_check, 3, args, arglens, 3, &r);
  if (rc != HILOCK_OK) return rc;
  *code = r->element[0]->integer;
  *ms = r->element[1]->integer;
  rc = *code == WAITING ? HILOCK_OK : outcome(b, *code, r->element[2]);
  freeReplyObject(r);
  return rc;
}

/* Wait in generation g until it ends (HILOCK_OK passed, HILOCK_EBROKEN) or
 * end_ms (HILOCK_BUSY), sleeping on the hash's channel until a message or
 * the earliest lease end of another party; inside as look's. */
static int await_gen(hilock_barrier *b, int64_t g, int inside,
                     int64_t end_ms) {
  long long code;
  int64_t ms, bound, tried, now;
  int rc, woken = 0;
  for (;;) {
    /* Look after listening: a change after this look rings the wait. */
    tried = hilock__now_us();
    rc = look(b, g, inside, &code, &ms);
    if (rc != HILOCK_OK || code != WAITING) return rc;
    now = hilock__now_ms();
    if (end_ms != INT64_MAX && now >= end_ms) return HILOCK_BUSY;
    bound = end_ms == INT64_MAX ? INT64_MAX / 2 : end_ms - now;
    /* Just past the lease end, on the server's clock. */
    if (ms >= 0 && ms + 10 < bound) bound = ms + 10;
    rc = hilock__wait_wake(b->h.client, &b->h.err, b->key, b->keylen, bound,
                           tried, HILOCK__WAKE_CHANNEL, &woken);
    if (rc != HILOCK_OK) return rc;
  }
}

/* Give the wait of generation g up (why): the generation breaks unless it
 * passed already. HILOCK_OK if it had passed, HILOCK_EBROKEN, or an error
 * of the round trip. */
static int give_up(hilock_barrier *b, int64_t g, const char *why) {
  char gs[24];
  const char *args[3] = {b->member, gs, why};
  size_t arglens[3] = {HILOCK__TOKEN_LEN, hilock__i64(gs, g), strlen(why)};
  redisReply *r;
  int rc = run(b, &hilock__script_barrier_break, 3, args, arglens, 3, &r);
  if (rc != HILOCK_OK) return rc;
  rc = outcome(b, r->element[0]->integer, r->element[2]);
  freeReplyObject(r);
  return rc;
}

/* give_up until it reaches the server (a failure of the connection or of
 * the server: retried every 50 ms) or this party's lease has surely ended
 * on the server (then the others' next look finds it lapsed): a party that
 * stopped waiting is never counted as arrived by a later trip. g -2: an
 * arrival whose reply was lost (it may stand). */
static int give_up_surely(hilock_barrier *b, int64_t g, const char *why) {
  int64_t left = b->h.held ? hilock_hold_validity_ms(HILOCK_HOLD(b))
                           : b->h.ttl_ms;
  int64_t until = hilock__now_ms() + left + b->h.ttl_ms / 50 + 50;
  int rc;
  for (;;) {
    rc = give_up(b, g, why);
    if (rc != HILOCK_EIO && rc != HILOCK_ETIMEDOUT && rc != HILOCK_EREDIS &&
        rc != HILOCK_ECLUSTER)
      return rc;
    if (hilock__now_ms() >= until) return rc;
    hilock__sleep_ms(50);
  }
}

/* Arrive (mode "b") or enter ("e"): draw a party id, run the arrival.
 * *code as barrier_arrive.lua's, *g its generation, *n its index (or the
 * barrier's party count with PARTIES). */
static int arrive(hilock_barrier *b, const char *mode, long long *code,
                  int64_t *g, int64_t *n, int64_t *start) {
  char ttl[24], parties[24];
  const char *args[4] = {b->h.owner, ttl, parties, mode};
  size_t arglens[4];
  redisReply *r;
  int rc;
  hilock__hold_lapse(&b->h);
  hilock__hold_drop(&b->h);
  rc = hilock__token(b->h.owner, &b->h.err);
  if (rc != HILOCK_OK) return rc;
  b->h.ownerlen = HILOCK__TOKEN_LEN;
  memcpy(b->member, b->h.owner, sizeof(b->member));
  arglens[0] = b->h.ownerlen;
  arglens[1] = hilock__i64(ttl, b->h.ttl_ms);
  arglens[2] = hilock__i64(parties, b->parties);
  arglens[3] = 1;
  *start = hilock__now_us();
  rc = run(b, &hilock__script_barrier_arrive, 4, args, arglens, 4, &r);
  if (rc != HILOCK_OK) return rc;
  *code = r->element[0]->integer;
  *g = r->element[1]->integer;
  *n = r->element[2]->integer;
  if (*code == BROKEN) {
    rc = outcome(b, BROKEN, r->element[3]);
  } else if (*code == PARTIES) {
    rc = hilock__set_err(&b->h.err, HILOCK_EINVAL,
                         "the %s has %lld parties; this handle was made "
                         "with %lld",
                         b->dbl ? "double barrier" : "barrier", (long long)*n,
                         (long long)b->parties);
  } else if (*code != PASSED && *code != WAITING && *code != INSIDE) {
    rc = hilock__set_err(&b->h.err, HILOCK_EPROTO,
                         "unexpected reply to the arrive script");
  }
  freeReplyObject(r);
  return rc;
}

static int64_t deadline(int64_t wait_ms) {
  return wait_ms == HILOCK_WAIT_FOREVER ? INT64_MAX
                                        : hilock__now_ms() + wait_ms;
}

static int check_wait(hilock_barrier *b, int64_t wait_ms) {
  if (wait_ms < 0 && wait_ms != HILOCK_WAIT_FOREVER)
    return hilock__set_err(&b->h.err, HILOCK_EINVAL,
                           "wait_ms must be >= 0 or HILOCK_WAIT_FOREVER");
  if (!hilock__runtime_usable(b->h.rt))
    return hilock__set_err(&b->h.err, HILOCK_ECLOSED, "client is closed");
  return HILOCK_OK;
}

/* A party arrived in generation g at start: it waits as a hold, renewed. */
static int party_waits(hilock_barrier *b, int64_t start, int64_t g) {
  b->gen = g;
  return hilock__hold_granted(&b->h, start, 0);
}

int hilock_barrier_wait(hilock_barrier *b, int64_t wait_ms, int64_t *index) {
  int64_t end, outer, g = -2, n = 0, start;
  long long code = WAITING; /* until the arrival's reply says otherwise */
  int rc, ended;
  if (index != NULL) *index = -1;
  if (b == NULL || index == NULL || b->dbl) return HILOCK_EINVAL;
  rc = check_wait(b, wait_ms);
  if (rc != HILOCK_OK) return rc;
  end = deadline(wait_ms);
  outer = hilock__call_begin(end);
  rc = arrive(b, "b", &code, &g, &n, &start);
  if (rc == HILOCK_OK && code == WAITING) {
    rc = party_waits(b, start, g);
    if (rc == HILOCK_OK) rc = await_gen(b, g, 1, end);
  }
  hilock__call_end(outer);
  ended = rc == HILOCK_OK || rc == HILOCK_EBROKEN || rc == HILOCK_EINVAL ||
          rc == HILOCK_EWRONGTYPE || rc == HILOCK_EPROTO;
  if (code == WAITING && !ended) {
    /* Timed out, interrupted or failed (the arrival too, its reply lost:
     * g -2): the generation breaks for all (unless it passed meanwhile:
     * then this wait passed). */
    hilock__err keep = b->h.err;
    int grc = give_up_surely(b, g, rc == HILOCK_BUSY
                                       ? "a wait timed out"
                                       : "a party gave up its wait");
    if (grc == HILOCK_OK) {
      rc = HILOCK_OK;
    } else if (rc == HILOCK_BUSY) {
      rc = hilock__set_err(&b->h.err, HILOCK_EBROKEN,
                           "the wait timed out after %lld ms: the barrier "
                           "is broken",
                           (long long)wait_ms);
    } else {
      b->h.err = keep;
    }
  }
  hilock__hold_drop(&b->h);
  if (rc == HILOCK_OK) *index = n;
  return rc;
}

int hilock_barrier_abort(hilock_barrier *b) {
  int rc;
  if (b == NULL) return HILOCK_EINVAL;
  rc = give_up(b, -1, "the barrier was aborted");
  return rc == HILOCK_EBROKEN ? HILOCK_OK : rc;
}

int hilock_barrier_reset(hilock_barrier *b) {
  const char *mode = b != NULL && b->dbl ? "d" : "b";
  size_t len = 1;
  redisReply *r;
  int rc;
  if (b == NULL) return HILOCK_EINVAL;
  rc = run(b, &hilock__script_barrier_reset, 1, &mode, &len, 0, &r);
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_INTEGER)
    rc = hilock__set_err(&b->h.err, HILOCK_EPROTO,
                         "unexpected reply to the reset script");
  freeReplyObject(r);
  return rc;
}

int hilock_barrier_state(hilock_barrier *b, int *broken, int64_t *waiting) {
  redisReply *r;
  int rc;
  if (broken != NULL) *broken = 0;
  if (waiting != NULL) *waiting = 0;
  if (b == NULL) return HILOCK_EINVAL;
  rc = run(b, &hilock__script_barrier_state, 0, NULL, NULL, 0, &r);
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER) {
    rc = hilock__set_err(&b->h.err, HILOCK_EPROTO,
                         "unexpected reply to the state script");
  } else {
    if (broken != NULL) *broken = r->element[0]->integer != 0;
    if (waiting != NULL) *waiting = r->element[1]->integer;
  }
  freeReplyObject(r);
  return rc;
}

int hilock_barrier_delete(hilock_barrier *b, int *deleted) {
  redisReply *r;
  int rc;
  if (deleted != NULL) *deleted = 0;
  if (b == NULL) return HILOCK_EINVAL;
  rc = run(b, &hilock__script_barrier_delete, 0, NULL, NULL, 0, &r);
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_INTEGER)
    rc = hilock__set_err(&b->h.err, HILOCK_EPROTO,
                         "unexpected reply to the delete script");
  else if (deleted != NULL)
    *deleted = r->integer > 0;
  freeReplyObject(r);
  return rc;
}

/* The leave script for this party in generation g: *code as
 * barrier_leave.lua's, *ms as a look's. */
static int leave_run(hilock_barrier *b, int64_t g, long long *code,
                     int64_t *ms) {
  char gs[24];
  const char *args[2] = {b->member, gs};
  size_t arglens[2] = {HILOCK__TOKEN_LEN, hilock__i64(gs, g)};
  redisReply *r;
  int rc = run(b, &hilock__script_barrier_leave, 2, args, arglens, 3, &r);
  if (rc != HILOCK_OK) return rc;
  *code = r->element[0]->integer;
  *ms = r->element[1]->integer;
  rc = *code == WAITING || *code == WITHDRAWN
           ? HILOCK_OK
           : outcome(b, *code, r->element[2]);
  freeReplyObject(r);
  return rc;
}

int hilock_double_barrier_enter(hilock_double_barrier *db, int64_t wait_ms) {
  hilock_barrier *b = (hilock_barrier *)db;
  int64_t end, outer, g = 0, n = 0, start, ms;
  long long code = 0;
  int rc;
  if (b == NULL) return HILOCK_EINVAL;
  rc = check_wait(b, wait_ms);
  if (rc != HILOCK_OK) return rc;
  if (b->inside && b->h.held && b->h.pid == hilock__pid())
    return hilock__set_err(&b->h.err, HILOCK_EINVAL,
                           "this party is inside already; leave first");
  b->inside = 0;
  end = deadline(wait_ms);
  outer = hilock__call_begin(end);
  for (;;) {
    rc = arrive(b, "e", &code, &g, &n, &start);
    if (rc != HILOCK_OK || code != INSIDE) break;
    /* A round's parties are inside: wait until it ends, then enter. */
    rc = await_gen(b, g, 0, end);
    if (rc == HILOCK_EBROKEN) rc = HILOCK_OK; /* ended: a reset or deletion */
    if (rc != HILOCK_OK) break;
  }
  if (rc == HILOCK_OK && code == WAITING) {
    rc = party_waits(b, start, g);
    if (rc == HILOCK_OK) rc = await_gen(b, g, 1, end);
  } else if (rc == HILOCK_OK && code == PASSED) {
    rc = party_waits(b, start, g);
  }
  hilock__call_end(outer);
  if (code == WAITING && rc != HILOCK_OK && rc != HILOCK_EBROKEN) {
    /* Timed out, interrupted or failed: withdraw the entry, unless the
     * round began meanwhile (then this party is inside). */
    hilock__err keep = b->h.err;
    int lrc = leave_run(b, g, &code, &ms);
    if (lrc == HILOCK_OK && code == PASSED) rc = HILOCK_OK;
    else if (rc == HILOCK_BUSY)
      rc = hilock__set_err(&b->h.err, HILOCK_BUSY,
                           "enter: fewer than %lld parties entered within "
                           "%lld ms; the entry was withdrawn",
                           (long long)b->parties, (long long)wait_ms);
    else
      b->h.err = keep;
  }
  if (rc == HILOCK_BUSY && code == INSIDE)
    hilock__set_err(&b->h.err, HILOCK_BUSY,
                    "enter: the parties of a round were still inside after "
                    "%lld ms",
                    (long long)wait_ms);
  if (rc == HILOCK_OK && code != INSIDE) {
    b->inside = 1;
    b->gen = g + 1; /* the round's */
    return HILOCK_OK;
  }
  hilock__hold_drop(&b->h);
  return rc;
}

int hilock_double_barrier_leave(hilock_double_barrier *db, int64_t wait_ms) {
  hilock_barrier *b = (hilock_barrier *)db;
  int64_t end, outer, ms;
  long long code = 0;
  int rc;
  if (b == NULL) return HILOCK_EINVAL;
  if (wait_ms < 0 && wait_ms != HILOCK_WAIT_FOREVER)
    return hilock__set_err(&b->h.err, HILOCK_EINVAL,
                           "wait_ms must be >= 0 or HILOCK_WAIT_FOREVER");
  if (!b->inside || b->h.pid != hilock__pid())
    return hilock__set_err(&b->h.err, HILOCK_ENOTOWNED,
                           "leave: this party did not enter");
  if (!hilock__runtime_usable(b->h.rt))
    return hilock__set_err(&b->h.err, HILOCK_ECLOSED, "client is closed");
  end = deadline(wait_ms);
  outer = hilock__call_begin(end);
  /* Out of the round: its lease is not renewed any more (a leave called
   * again after HILOCK_BUSY finds it out already). */
  hilock__hold_drop(&b->h);
  rc = leave_run(b, b->gen, &code, &ms);
  if (rc == HILOCK_OK && code != PASSED) rc = await_gen(b, b->gen, 0, end);
  hilock__call_end(outer);
  if (rc == HILOCK_BUSY)
    return hilock__set_err(&b->h.err, HILOCK_BUSY,
                           "leave: parties still inside after %lld ms",
                           (long long)wait_ms);
  b->inside = 0;
  return rc;
}

/* Whether this party's lease is still live on the server. */
static int owned_fn(void *x, int *owned) {
  hilock_barrier *b = x;
  const char *argv[3] = {"ZSCORE", b->zkey, b->h.owner};
  size_t lens[3] = {6, b->zkeylen, b->h.ownerlen};
  redisReply *r;
  int rc;
  *owned = 0;
  if (!b->h.held || b->h.pid != hilock__pid()) return HILOCK_OK;
  rc = hilock__command(b->h.client, &b->h.err, 3, argv, lens, &r);
  if (rc != HILOCK_OK) return rc;
  *owned = r->type == REDIS_REPLY_STRING;
  freeReplyObject(r);
  return HILOCK_OK;
}

static int renew_fn(void *x) {
  hilock_barrier *b = x;
  return hilock__hold_renew(&b->h, "the party's lease ran out or its "
                                   "generation ended");
}

static const hilock__family barrier_family = {
    .name = "barrier", .free = fam_free, .owned = owned_fn,
    .renew = renew_fn};
static const hilock__family double_family = {
    .name = "double barrier", .free = fam_free, .owned = owned_fn,
    .renew = renew_fn};
