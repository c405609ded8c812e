/* Countdown latch with registered parties: the handle is a hold (hold.c)
 * whose grant is a party's lease in the parties zset (joining is its
 * acquire, a party's count down its release), renewed by the watchdog as
 * kind party_renew. Waiters sleep on the latch hash's channel (wait.c's
 * channel waits) until a message or the earliest party's lease end. Mostly
 * the scripts in core/scripts/latch_*.lua and lib/latch.lua. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "family.h"
#include "holds.h"
#include "script.h"
#include "wait.h"
#include "scripts.h"

#include "hilock/latch.h"

static const hilock__family family;

struct hilock_latch {
  hilock__hold h; /* first: a party's lease (join) and the last error */
  char *key, *pkey; /* latch hash (and channel), parties zset */
  size_t keylen, pkeylen;
  char count[24]; /* the count a latch that does not exist starts with */
  size_t countlen;
  int joined; /* the handle joined: its count down is its party's */
  int counted; /* and its party counted down */
};

static int run_abort(void *arg, hilock__err *e, redisReply **r);

static void fam_free(void *arg) {
  hilock_latch *l = arg;
  if (l != NULL) hilock__family_free(&l->h, l, 2, l->key, l->pkey);
}

static int latch_new(hilock_client *client, const char *name, size_t namelen,
                     int64_t count, int64_t ttl_ms, hilock_latch **out) {
  hilock_latch *l;
  int rc;
  hilock__count c = {"count", count, HILOCK_LATCH_COUNT_MAX};
  l = hilock__new_handle_with(client, name, namelen, 1, ttl_ms,
                              hilock__check_count, &c, sizeof(*l), &rc);
  if (l == NULL) return rc;
  if (hilock__family_keys(l, client, name, namelen, 2,
                          "latch", &l->key, &l->keylen,
                          "latch:parties", &l->pkey, &l->pkeylen) != HILOCK_OK)
    return HILOCK_ENOMEM;
  l->countlen = hilock__i64(l->count, count);
  hilock__hold_init_family(&l->h, client, l->pkey, l->pkeylen,
                           &hilock__script_party_renew, ttl_ms, &family,
                           run_abort, l);
  *out = l;
  return HILOCK_OK;
}

int hilock_latch_new(hilock_client *client, const char *name, size_t namelen,
                     int64_t count, int64_t ttl_ms, hilock_latch **out) {
  HILOCK__CLIENT_CALL(client, out,
                      latch_new(client, name, namelen, count, ttl_ms, out));
}

/* Run script s on the latch's two keys with the start count and args. */
static int run(hilock_latch *l, hilock__err *e, const hilock__script *s,
               int nargs, const char **args, size_t *arglens,
               redisReply **r) {
  const char *keys[2] = {l->key, l->pkey};
  size_t keylens[2] = {l->keylen, l->pkeylen};
  return hilock__script_run(l->h.client, e, s, 2, keys, keylens, nargs, args,
                            arglens, r);
}

/* A {code, value} reply: code in *code, and r's second element. */
static const redisReply *pair(const redisReply *r, long long *code) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER)
    return NULL;
  *code = r->element[0]->integer;
  if (*code == -1 && r->element[1]->type != REDIS_REPLY_STRING) return NULL;
  if (*code != -1 && r->element[1]->type != REDIS_REPLY_INTEGER) return NULL;
  return r->element[1];
}

static int broken(hilock__err *e, const char *verb, const redisReply *why) {
  return hilock__set_err(e, HILOCK_EBROKEN, "%s: the latch is broken: %.*s",
                         verb, (int)why->len, why->str);
}

/* latch_abort.lua: break the latch (a party gave up; a closing client's
 * party that did not count down). */
static int run_abort(void *arg, hilock__err *e, redisReply **r) {
  hilock_latch *l = arg;
  static const char why[] = "a party gave up (aborted) before it counted "
                            "down";
  const char *args[3] = {l->count, l->h.owner, why};
  size_t arglens[3] = {l->countlen, l->h.ownerlen, sizeof(why) - 1};
  return run(l, e, &hilock__script_latch_abort, 3, args, arglens, r);
}

/* ## Joining: the hold's acquire ----------------------------------------- */

/* latch_leave.lua: the party leaves without counting down (a join too few
 * replicas saw is given back). */
static int run_leave(void *arg, hilock__err *e, redisReply **r) {
  hilock_latch *l = arg;
  const char *args[1] = {l->h.owner};
  size_t arglens[1] = {l->h.ownerlen};
  return run(l, e, &hilock__script_latch_leave, 1, args, arglens, r);
}

static int leave(void *arg) {
  hilock_latch *l = arg;
  redisReply *r;
  int rc = hilock__hold_release(&l->h, run_leave, l, &r);
  if (rc != HILOCK_OK) return rc;
  freeReplyObject(r);
  hilock__hold_ended(&l->h, 0);
  return HILOCK_OK;
}

static int join(void *handle) {
  hilock_latch *l = handle;
  hilock__hold *h = &l->h;
  const char *keys[2] = {l->key, l->pkey};
  size_t keylens[2] = {l->keylen, l->pkeylen};
  char ttl[24];
  const char *args[3] = {l->count, h->owner, ttl};
  size_t arglens[3] = {l->countlen, HILOCK__TOKEN_LEN,
                       hilock__i64(ttl, h->ttl_ms)};
  /* A reply that comes too late: the party leaves behind it. */
  const char *uargs[1] = {h->owner};
  size_t uarglens[1] = {HILOCK__TOKEN_LEN};
  hilock__undo undo = {&hilock__script_latch_leave, 2, 1, keys, keylens,
                       uargs, uarglens, h->ttl_ms, NULL};
  hilock__attempt a;
  const redisReply *v;
  redisReply *r;
  long long code = 0;
  int64_t pttl;
  int rc;

  rc = hilock__attempt_begin(h, "this handle is a party of the latch "
                                "already; count down first");
  if (rc == HILOCK_OK)
    rc = hilock__attempt_run(h, &a, &undo, &hilock__script_latch_join, 2,
                             keys, keylens, 3, args, arglens, &r);
  if (rc != HILOCK_OK) return rc;
  v = pair(r, &code);
  if (v != NULL && code == -1) {
    rc = broken(&h->err, "join", v);
  } else if (v != NULL && code == 0) {
    rc = hilock__set_err(&h->err, HILOCK_EINVAL,
                         "join: the latch's count is 0 already (nothing is "
                         "left to count down)");
  } else {
    rc = hilock__attempt_end(h, &a, r, v != NULL && code == 1 ? 1 : -1, 0, 0,
                             &pttl, leave, l,
                             "latch's join script");
    if (rc == HILOCK_OK) l->joined = 1, l->counted = 0;
    return rc;
  }
  hilock__hold_drop(h);
  freeReplyObject(r);
  return rc;
}

static int join_wait(void *handle, int64_t wait_ms) {
  (void)wait_ms; /* joining does not wait */
  return join(handle);
}

/* ## Counting down ---------------------------------------------------------- */

/* Read a count down's reply (freed here); party: the handle's party's. */
static int counted(hilock_latch *l, redisReply *r, int party) {
  const redisReply *v;
  long long code = 0;
  int rc = HILOCK_OK;
  v = pair(r, &code);
  if (v == NULL)
    rc = hilock__set_err(&l->h.err, HILOCK_EPROTO,
                         "unexpected reply to the latch's count down script");
  else if (code == -1)
    rc = broken(&l->h.err, "count down", v);
  else if (code != 1)
    rc = hilock__set_err(&l->h.err, HILOCK_ENOTOWNED,
                         "count down: this party is no longer registered "
                         "(its lease was lost)");
  freeReplyObject(r);
  /* The party's lease ends with its count down (or with the latch). */
  if (party) hilock__hold_ended(&l->h, rc == HILOCK_ENOTOWNED);
  return rc;
}

static int run_party_count_down(void *arg, hilock__err *e, redisReply **r) {
  hilock_latch *l = arg;
  const char *args[2] = {l->count, l->h.owner};
  size_t arglens[2] = {l->countlen, l->h.ownerlen};
  return run(l, e, &hilock__script_latch_count_down, 2, args, arglens, r);
}

/* The hold's release: the party counts down. */
static int party_count_down(void *handle) {
  hilock_latch *l = handle;
  redisReply *r;
  int rc;
  if (!l->h.held && l->counted)
    return hilock__set_err(&l->h.err, HILOCK_ENOTOWNED,
                           "count down: this party counted down already (a "
                           "party counts once)");
  rc = hilock__hold_release(&l->h, run_party_count_down, l, &r);
  if (rc != HILOCK_OK) return rc;
  rc = counted(l, r, 1);
  if (rc == HILOCK_OK) l->counted = 1;
  return rc;
}

int hilock_latch_count_down(hilock_latch *l) {
  const char *args[2] = {NULL, ""};
  size_t arglens[2] = {0, 0};
  redisReply *r;
  int rc;
  if (l == NULL) return HILOCK_EINVAL;
  if (l->joined) return party_count_down(l);
  args[0] = l->count;
  arglens[0] = l->countlen;
  rc = run(l, &l->h.err, &hilock__script_latch_count_down, 2, args, arglens,
           &r);
  if (rc != HILOCK_OK) return rc;
  return counted(l, r, 0);
}

/* ## Reading and waiting ---------------------------------------------------- */

/* latch_state.lua: the count left in *left and the ms until the earliest
 * party's lease ends in *lease (-1: none); HILOCK_EBROKEN if broken. */
static int read_state(hilock_latch *l, const char *verb, int64_t *left,
                      int64_t *lease) {
  const char *args[1] = {l->count};
  size_t arglens[1] = {l->countlen};
  redisReply *r;
  int rc = run(l, &l->h.err, &hilock__script_latch_state, 1, args, arglens,
               &r);
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_STRING ||
      r->element[2]->type != REDIS_REPLY_INTEGER) {
    rc = hilock__set_err(&l->h.err, HILOCK_EPROTO,
                         "unexpected reply to the latch's state script");
  } else {
    *left = r->element[0]->integer;
    *lease = r->element[2]->integer;
    if (r->element[1]->len > 0) rc = broken(&l->h.err, verb, r->element[1]);
  }
  freeReplyObject(r);
  return rc;
}

int hilock_latch_count(hilock_latch *l, int64_t *count) {
  int64_t lease;
  if (count != NULL) *count = 0;
  if (l == NULL || count == NULL) return HILOCK_EINVAL;
  return read_state(l, "count", count, &lease);
}

int hilock_latch_wait(hilock_latch *l, int64_t wait_ms) {
  int64_t end, outer, tried, left = 0, lease = -1, bound, now;
  int rc, woken = 0;
  if (l == NULL) return HILOCK_EINVAL;
  if (wait_ms < 0 && wait_ms != HILOCK_WAIT_FOREVER)
    return hilock__set_err(&l->h.err, HILOCK_EINVAL,
                           "wait_ms must be >= 0 or HILOCK_WAIT_FOREVER");
  if (wait_ms > HILOCK__WAIT_CAP_MS) wait_ms = HILOCK_WAIT_FOREVER;
  end = wait_ms == HILOCK_WAIT_FOREVER ? INT64_MAX
                                       : hilock__now_ms() + wait_ms;
  /* The look after the end has its round trip (as an acquire's last
   * attempt): 250 ms past the end, not cut short by it. */
  outer = hilock__call_begin(end == INT64_MAX || wait_ms == 0 ? INT64_MAX
                                                              : end + 250);
  for (;;) {
    /* Read after listening: a message after this read rings the wait
     * below (a subscription made after tried makes it look again). */
    tried = hilock__now_us();
    rc = read_state(l, "wait", &left, &lease);
    if (rc != HILOCK_OK || left == 0) break;
    now = hilock__now_ms();
    if (end != INT64_MAX && now >= end) {
      rc = hilock__set_err(&l->h.err, HILOCK_BUSY,
                           "wait: the count is still %lld after %lld ms",
                           (long long)left, (long long)wait_ms);
      break;
    }
    bound = end == INT64_MAX ? INT64_MAX / 2 : end - now;
    /* Look again just after the earliest party's lease ends: a party that
     * did not renew it breaks the latch then (clock drift allowed, as for
     * a lock's validity). */
    if (lease >= 0 && lease + 5 + lease / 100 < bound)
      bound = lease + 5 + lease / 100;
    rc = hilock__wait_wake(l->h.client, &l->h.err, l->key, l->keylen, bound,
                           tried, HILOCK__WAKE_CHANNEL, &woken);
    if (rc != HILOCK_OK) break;
  }
  hilock__call_end(outer);
  return rc;
}

/* ## Breaking and deleting ------------------------------------------------- */

int hilock_latch_abort(hilock_latch *l) {
  redisReply *r;
  int party, rc;
  if (l == NULL) return HILOCK_EINVAL;
  party = l->joined && l->h.held && l->h.pid == hilock__pid();
  if (party) {
    rc = hilock__hold_release(&l->h, run_abort, l, &r);
    /* Not told: the party stops renewing anyway, so its lease ends and
     * breaks the latch within its TTL (a party that gave up is not kept). */
    if (rc != HILOCK_OK) hilock__hold_drop(&l->h);
  } else {
    const char *args[3] = {l->count, "", "the latch was aborted"};
    size_t arglens[3] = {l->countlen, 0, 21};
    rc = run(l, &l->h.err, &hilock__script_latch_abort, 3, args, arglens, &r);
  }
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_INTEGER)
    rc = hilock__set_err(&l->h.err, HILOCK_EPROTO,
                         "unexpected reply to the latch's abort script");
  freeReplyObject(r);
  if (party) hilock__hold_ended(&l->h, 0);
  return rc;
}

int hilock_latch_delete(hilock_latch *l) {
  redisReply *r;
  int rc;
  if (l == NULL) return HILOCK_EINVAL;
  rc = run(l, &l->h.err, &hilock__script_latch_delete, 0, NULL, NULL, &r);
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_INTEGER)
    rc = hilock__set_err(&l->h.err, HILOCK_EPROTO,
                         "unexpected reply to the latch's delete script");
  freeReplyObject(r);
  return rc;
}

/* ## The hold's other verbs ------------------------------------------------- */

/* Whether the party is still registered with a lease this process holds. */
static int owned_fn(void *x, int *owned) {
  hilock_latch *l = x;
  const char *argv[3] = {"ZSCORE", l->pkey, l->h.owner};
  size_t lens[3] = {6, l->pkeylen, l->h.ownerlen};
  redisReply *r;
  int rc;
  *owned = 0;
  if (!l->h.held || l->h.pid != hilock__pid() ||
      hilock__hold_validity_ms(&l->h) <= 0)
    return HILOCK_OK;
  rc = hilock__command(l->h.client, &l->h.err, 3, argv, lens, &r);
  if (rc != HILOCK_OK) return rc;
  if (r->type == REDIS_REPLY_STRING)
    *owned = 1;
  else if (r->type == REDIS_REPLY_NIL)
    hilock__hold_lost(&l->h);
  else
    rc = hilock__set_err(&l->h.err, HILOCK_EPROTO,
                         "unexpected reply to ZSCORE");
  freeReplyObject(r);
  return rc;
}

static int renew_fn(void *x) {
  hilock_latch *l = x;
  return hilock__hold_renew(&l->h, "the party's lease was lost (it lapsed "
                                   "or the latch was deleted)");
}

static const char *key_fn(const void *x, size_t *len) {
  const hilock_latch *l = x;
  if (len != NULL) *len = l->keylen;
  return l->key;
}

static const hilock__family family = {
    .name = "latch", .free = fam_free, .owned = owned_fn, .key = key_fn,
    .acquire = join_wait, .try_acquire = join, .release = party_count_down,
    .notowned = "the party's lease was lost; it did not count down",
    .renew = renew_fn};
