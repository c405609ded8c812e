/* Leader election: the lead is a hold (hold.c), a campaign its acquire (the
 * standbys wait on a wake list as a lock's waiters do), a resignation its
 * release, and the watchdog renews it as a reentrant lock's hash (the
 * leader's token is a field: renew_rlock.lua). Observers wait on the
 * leadership hash's channel (wait.c's channel waits). Mostly the scripts
 * in core/scripts/election_*.lua. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "family.h"
#include "holds.h"
#include "script.h"
#include "wait.h"
#include "scripts.h"

#include "hilock/election.h"

static const hilock__family family;

struct hilock_election {
  hilock__hold h; /* first: the lead's grant state and last error */
  char *key, *fkey, *wkey; /* leadership hash (and channel), fence, wake */
  size_t keylen, fkeylen, wkeylen;
  char *value; /* what this handle's next grant writes */
  size_t valuelen;
  /* The leader last read (leader, observe): its fence (0: none) and value. */
  uint64_t seen_fence;
  char *seen;
  size_t seenlen;
};

static int run_release(void *arg, hilock__err *e, redisReply **r);

static void fam_free(void *arg) {
  hilock_election *el = arg;
  if (el != NULL)
    hilock__family_free(&el->h, el, 5, el->key, el->fkey, el->wkey, el->value,
                        el->seen);
}

static int election_new(hilock_client *client, const char *name,
                        size_t namelen, int64_t ttl_ms, hilock_election **out) {
  hilock_election *el;
  int rc;
  el = hilock__new_handle(client, name, namelen, ttl_ms, sizeof(*el), &rc);
  if (el == NULL) return rc;
  if (hilock__family_keys(el, client, name, namelen, 3,
                          "elect", &el->key, &el->keylen,
                          "fence", &el->fkey, &el->fkeylen,
                          "ewake", &el->wkey, &el->wkeylen) != HILOCK_OK)
    return HILOCK_ENOMEM;
  hilock__hold_init_family(&el->h, client, el->key, el->keylen,
                           &hilock__script_rlock_renew, ttl_ms, &family,
                           run_release, el);
  *out = el;
  return HILOCK_OK;
}

int hilock_election_new(hilock_client *client, const char *name,
                        size_t namelen, int64_t ttl_ms, hilock_election **out) {
  HILOCK__CLIENT_CALL(client, out,
                     election_new(client, name, namelen, ttl_ms, out));
}

/* A value the caller gives: len bytes, not NULL unless empty. */
static int check_value(hilock__err *e, const char *value, size_t len) {
  if (value == NULL && len > 0)
    return hilock__set_err(e, HILOCK_EINVAL, "value is NULL");
  if (len > HILOCK_ELECTION_VALUE_MAX)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "the value has %zu bytes; the limit is %d", len,
                           HILOCK_ELECTION_VALUE_MAX);
  return HILOCK_OK;
}

/* Keep a copy of value (len bytes) in *dst and *dstlen. */
static int keep_value(hilock__err *e, char **dst, size_t *dstlen,
                      const char *value, size_t len) {
  char *copy;
  int rc = check_value(e, value, len);
  if (rc != HILOCK_OK) return rc;
  copy = malloc(len + 1);
  if (copy == NULL) return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
  if (len > 0) memcpy(copy, value, len);
  copy[len] = '\0';
  free(*dst);
  *dst = copy;
  *dstlen = len;
  return HILOCK_OK;
}

/* One campaign attempt; *pttl gets the leader's remaining TTL when busy. */
static int attempt(void *arg, int64_t *pttl) {
  hilock_election *el = arg;
  hilock__hold *h = &el->h;
  const char *keys[3] = {el->key, el->fkey, el->wkey};
  size_t keylens[3] = {el->keylen, el->fkeylen, el->wkeylen};
  char ttl[24];
  const char *args[4] = {h->owner, ttl, "woken",
                         el->value != NULL ? el->value : ""};
  size_t arglens[4] = {HILOCK__TOKEN_LEN, hilock__i64(ttl, h->ttl_ms), 5,
                       el->valuelen};
  /* A reply that comes too late: this attempt's resignation follows it on
   * the same socket. */
  const char *ukeys[2] = {el->key, el->wkey};
  size_t ukeylens[2] = {el->keylen, el->wkeylen};
  hilock__undo undo = {&hilock__script_election_resign, 2, 1, ukeys, ukeylens,
                       args, arglens, h->ttl_ms, NULL};
  hilock__attempt a;
  redisReply *r;
  int rc, ok;

  if (hilock__attempt_woken() != 2) arglens[2] = 1; /* "w": not rung */
  rc = hilock__attempt_begin(h, "this handle already leads; resign first");
  if (rc == HILOCK_OK)
    rc = hilock__attempt_run(h, &a, &undo, &hilock__script_election_campaign,
                             3, keys, keylens, 4, args, arglens, &r);
  if (rc != HILOCK_OK) return rc;
  ok = hilock__int_reply(r, 2) && r->elements == 2;
  return hilock__attempt_end(h, &a, r, ok ? r->element[0]->integer == 1 : -1,
                             ok ? (uint64_t)r->element[1]->integer : 0,
                             ok ? r->element[1]->integer : 0, pttl,
                             hilock__family_release, el, "campaign script");
}

static void acquire_spec(void *arg, hilock__acquire_spec *sp) {
  hilock_election *el = arg;
  hilock__spec(sp, attempt, el, &el->wkey, &el->wkeylen);
}

int hilock_election_set_value(hilock_election *el, const char *value,
                              size_t len) {
  if (el == NULL) return HILOCK_EINVAL;
  return keep_value(&el->h.err, &el->value, &el->valuelen, value, len);
}

/* election_resign.lua: give the lead up if our token holds it. */
static int run_release(void *arg, hilock__err *e, redisReply **r) {
  hilock_election *el = arg;
  const char *keys[2] = {el->key, el->wkey};
  size_t keylens[2] = {el->keylen, el->wkeylen};
  const char *args[1] = {el->h.owner};
  size_t arglens[1] = {el->h.ownerlen};
  return hilock__script_run(el->h.client, e, &hilock__script_election_resign,
                            2, keys, keylens, 1, args, arglens, r);
}

int hilock_election_proclaim(hilock_election *el, const char *value,
                             size_t len) {
  const char *args[2];
  size_t arglens[2];
  redisReply *r;
  int rc;
  if (el == NULL) return HILOCK_EINVAL;
  rc = check_value(&el->h.err, value, len);
  if (rc == HILOCK_OK) rc = hilock__hold_check(&el->h, "proclaim");
  if (rc != HILOCK_OK) return rc;
  args[0] = el->h.owner;
  arglens[0] = el->h.ownerlen;
  args[1] = len > 0 ? value : "";
  arglens[1] = len;
  rc = hilock__script_run(el->h.client, &el->h.err,
                          &hilock__script_election_proclaim, 1,
                          (const char **)&el->key, &el->keylen, 2, args,
                          arglens, &r);
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_INTEGER) {
    rc = hilock__set_err(&el->h.err, HILOCK_EPROTO,
                         "unexpected reply to the proclaim script");
  } else if (r->integer != 1) {
    hilock__hold_lost(&el->h);
    rc = hilock__set_err(&el->h.err, HILOCK_ENOTOWNED,
                         "proclaim: the lead was lost (it lapsed or another "
                         "leads)");
  } else {
    rc = keep_value(&el->h.err, &el->value, &el->valuelen, value, len);
  }
  freeReplyObject(r);
  return rc;
}

/* Read the leader into *fence and *r's value element (r freed by the
 * caller). */
static int read_leader(hilock_election *el, uint64_t *fence,
                       redisReply **out) {
  redisReply *r;
  int rc = hilock__script_run(el->h.client, &el->h.err,
                              &hilock__script_election_leader, 1,
                              (const char **)&el->key, &el->keylen, 0, NULL,
                              NULL, &r);
  *out = NULL;
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[0]->integer < 0 ||
      r->element[1]->type != REDIS_REPLY_STRING) {
    freeReplyObject(r);
    return hilock__set_err(&el->h.err, HILOCK_EPROTO,
                           "unexpected reply to the leader script");
  }
  *fence = (uint64_t)r->element[0]->integer;
  *out = r;
  return HILOCK_OK;
}

/* Whether fence and v differ from the leader last seen. */
static int changed(const hilock_election *el, uint64_t fence,
                   const redisReply *v) {
  return fence != el->seen_fence || v->len != el->seenlen ||
         (v->len > 0 && memcmp(v->str, el->seen, v->len) != 0);
}

int hilock_election_leader(hilock_election *el, uint64_t *fence) {
  redisReply *r;
  int rc;
  if (fence != NULL) *fence = 0;
  if (el == NULL || fence == NULL) return HILOCK_EINVAL;
  rc = read_leader(el, fence, &r);
  if (rc != HILOCK_OK) return rc;
  rc = keep_value(&el->h.err, &el->seen, &el->seenlen, r->element[1]->str,
                  r->element[1]->len);
  if (rc == HILOCK_OK) el->seen_fence = *fence;
  freeReplyObject(r);
  return rc;
}

int hilock_election_observe(hilock_election *el, int64_t wait_ms,
                            uint64_t *fence) {
  int64_t end, outer, tried;
  redisReply *r = NULL;
  int rc, woken = 0;
  if (fence != NULL) *fence = 0;
  if (el == NULL || fence == NULL) return HILOCK_EINVAL;
  if (wait_ms < 0 && wait_ms != HILOCK_WAIT_FOREVER)
    return hilock__set_err(&el->h.err, HILOCK_EINVAL,
                           "wait_ms must be >= 0 or HILOCK_WAIT_FOREVER");
  end = wait_ms == HILOCK_WAIT_FOREVER ? INT64_MAX
                                       : hilock__now_ms() + wait_ms;
  outer = hilock__call_begin(end);
  for (;;) {
    /* Read after listening: a change after this read rings the wait
     * below (a subscription made after tried_us makes it look again). */
    tried = hilock__now_us();
    rc = read_leader(el, fence, &r);
    if (rc != HILOCK_OK) break;
    if (*fence != 0 && changed(el, *fence, r->element[1])) {
      rc = keep_value(&el->h.err, &el->seen, &el->seenlen,
                      r->element[1]->str, r->element[1]->len);
      if (rc == HILOCK_OK) el->seen_fence = *fence;
      break;
    }
    freeReplyObject(r);
    r = NULL;
    *fence = 0;
    if (end != INT64_MAX && hilock__now_ms() >= end) {
      rc = hilock__set_err(&el->h.err, HILOCK_BUSY,
                           "observe: no change of leader within %lld ms",
                           (long long)wait_ms);
      break;
    }
    rc = hilock__wait_wake(el->h.client, &el->h.err, el->key, el->keylen,
                           end == INT64_MAX ? INT64_MAX / 2
                                            : end - hilock__now_ms(),
                           tried, HILOCK__WAKE_CHANNEL, &woken);
    if (rc != HILOCK_OK) break;
  }
  if (r != NULL) freeReplyObject(r);
  hilock__call_end(outer);
  return rc;
}

const char *hilock_election_value(const hilock_election *el, size_t *len) {
  if (len != NULL) *len = el != NULL && el->seen != NULL ? el->seenlen : 0;
  return el != NULL && el->seen != NULL ? el->seen : "";
}

/* Whether this handle's grant still leads (HEXISTS: the token's field). */
static int owned_fn(void *x, int *owned) {
  hilock_election *el = x;
  const char *argv[3] = {"HEXISTS", el->key, el->h.owner};
  size_t lens[3] = {7, el->keylen, el->h.ownerlen};
  redisReply *r;
  int rc;
  *owned = 0;
  if (!el->h.held || el->h.pid != hilock__pid()) return HILOCK_OK;
  rc = hilock__command(el->h.client, &el->h.err, 3, argv, lens, &r);
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_INTEGER)
    rc = hilock__set_err(&el->h.err, HILOCK_EPROTO,
                         "unexpected reply to HEXISTS");
  else if (r->integer == 1)
    *owned = 1;
  else
    hilock__hold_lost(&el->h);
  freeReplyObject(r);
  return rc;
}

static int renew_fn(void *x) {
  hilock_election *el = x;
  return hilock__hold_renew(&el->h, "the lead was lost (it lapsed or "
                                    "another leads)");
}

static const hilock__family family = {
    .name = "election", .free = fam_free, .owned = owned_fn,
    .acquire_spec = acquire_spec,
    .notowned = "the lead was lost (it lapsed or another leads); nothing "
                "was deleted",
    .renew = renew_fn};
