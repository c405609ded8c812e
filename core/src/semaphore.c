/* The counting semaphore: a sorted set of permit ids scored by their expiry
 * on the server's clock, a stored limit, and a wake list. Mostly the
 * scripts in core/scripts/semaphore_*.lua; waiting, renewal and grant state
 * come from the shared layer (wait.c, renewal.c, hold.c). */
#include <inttypes.h>
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

struct hilock_semaphore {
  hilock__hold h; /* first: grant state (owner = permit id), last error */
  int64_t permits; /* the limit this handle stores if none is stored */
  char *key, *lkey, *wkey; /* permits set, limit, wake list */
  size_t keylen, lkeylen, wkeylen;
};

static int check_permits(hilock__err *e, const char *what, int64_t n,
                         int64_t min) {
  if (n < min || n > HILOCK_PERMITS_MAX)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "%s must be %" PRId64 "..%" PRId64 ", got %" PRId64,
                           what, min, HILOCK_PERMITS_MAX, n);
  return HILOCK_OK;
}

static int run_release(void *arg, hilock__err *e, redisReply **r);

static int semaphore_new(hilock_client *client, const char *name,
                         size_t namelen, int64_t permits, int64_t ttl_ms,
                         hilock_semaphore **out) {
  hilock_semaphore *s;
  int rc;

  hilock__count c = {"permits", permits, HILOCK_PERMITS_MAX};
  s = hilock__new_handle_with(client, name, namelen, 1, ttl_ms,
                              hilock__check_count, &c, sizeof(*s), &rc);
  if (s == NULL) return rc;
  s->permits = permits;
  if (hilock__family_keys(s, client, name, namelen, 3,
                          "permits", &s->key, &s->keylen,
                          "limit", &s->lkey, &s->lkeylen,
                          "pwake", &s->wkey, &s->wkeylen) != HILOCK_OK)
    return HILOCK_ENOMEM;
  hilock__hold_init_family(&s->h, client, s->key, s->keylen,
                           &hilock__script_semaphore_renew, ttl_ms, &family,
                           run_release, s);
  *out = s;
  return HILOCK_OK;
}

int hilock_semaphore_new(hilock_client *client, const char *name,
                         size_t namelen, int64_t permits, int64_t ttl_ms,
                         hilock_semaphore **out) {
  HILOCK__CLIENT_CALL(
      client, out, semaphore_new(client, name, namelen, permits, ttl_ms, out));
}

static void fam_free(void *arg) {
  hilock_semaphore *s = arg;
  if (s != NULL) hilock__family_free(&s->h, s, 3, s->key, s->lkey, s->wkey);
}

/* Keys of the scripts that change the set: permits, limit, wake list. */
static void three_keys(const hilock_semaphore *s, const char **keys,
                       size_t *lens) {
  keys[0] = s->key;
  lens[0] = s->keylen;
  keys[1] = s->lkey;
  lens[1] = s->lkeylen;
  keys[2] = s->wkey;
  lens[2] = s->wkeylen;
}


/* One grant attempt; *pttl gets the time until the first permit expires
 * when none is free. */
static int attempt(void *arg, int64_t *pttl) {
  hilock_semaphore *s = arg;
  hilock__hold *h = &s->h;
  const char *keys[3], *args[4];
  size_t keylens[3], arglens[4];
  char ttl[24], permits[24];
  /* Rung by a release: this attempt takes the wake-up (same round trip). */
  int nargs = hilock__attempt_woken() == 2 ? 4 : 3;
  hilock__attempt a;
  redisReply *r;
  int rc, ok;

  rc = hilock__attempt_begin(h, "this handle already holds a permit; release "
                                "it first (one handle holds one permit)");
  if (rc != HILOCK_OK) return rc;
  three_keys(s, keys, keylens);
  args[0] = h->owner;
  arglens[0] = h->ownerlen;
  args[1] = ttl;
  arglens[1] = hilock__i64(ttl, h->ttl_ms);
  args[2] = permits;
  arglens[2] = hilock__i64(permits, s->permits);
  args[3] = "woken";
  arglens[3] = 5;
  /* A late reply: this attempt's permit is given back behind it. */
  const char *uargs[2] = {h->owner, permits};
  size_t uarglens[2] = {h->ownerlen, arglens[2]};
  hilock__undo undo = {&hilock__script_semaphore_release, 3, 2, keys, keylens,
                       uargs, uarglens, h->ttl_ms, NULL};
  rc = hilock__attempt_run(h, &a, &undo, &hilock__script_semaphore_acquire, 3,
                           keys, keylens, nargs, args, arglens, &r);
  if (rc != HILOCK_OK) return rc;
  ok = hilock__int_reply(r, 2);
  return hilock__attempt_end(h, &a, r, ok ? r->element[0]->integer == 1 : -1,
                             0, ok ? r->element[1]->integer : 0, pttl,
                             hilock__family_release, s,
                             "semaphore acquire script");
}

static void acquire_spec(void *arg, hilock__acquire_spec *sp) {
  hilock_semaphore *s = arg;
  hilock__spec(sp, attempt, s, &s->wkey, &s->wkeylen);
}

/* semaphore_release.lua: give our permit back if it is still ours. */
static int run_release(void *arg, hilock__err *e, redisReply **r) {
  hilock_semaphore *s = arg;
  const char *keys[3], *args[2];
  size_t keylens[3], arglens[2];
  char permits[24];
  three_keys(s, keys, keylens);
  args[0] = s->h.owner;
  arglens[0] = s->h.ownerlen;
  args[1] = permits;
  arglens[1] = hilock__i64(permits, s->permits);
  return hilock__script_run(s->h.client, e, &hilock__script_semaphore_release,
                            3, keys, keylens, 2, args, arglens, r);
}

static int renew_fn(void *x) {
  hilock_semaphore *s = x;
  return hilock__hold_renew(&s->h, "the permit had expired");
}

/* The info script: {limit, live permits, stored, ms left on id (-1)}. */
static int info(hilock_semaphore *s, const char *id, size_t idlen,
                int64_t out[4]) {
  const char *keys[2], *args[2];
  size_t keylens[2], arglens[2];
  char permits[24];
  redisReply *r;
  int rc;

  keys[0] = s->key;
  keylens[0] = s->keylen;
  keys[1] = s->lkey;
  keylens[1] = s->lkeylen;
  args[0] = permits;
  arglens[0] = hilock__i64(permits, s->permits);
  args[1] = id;
  arglens[1] = idlen;
  rc = hilock__script_run(s->h.client, &s->h.err,
                          &hilock__script_semaphore_info, 2, keys, keylens, 2,
                          args, arglens, &r);
  if (rc != HILOCK_OK) return rc;
  if (!hilock__int_reply(r, 4)) {
    rc = hilock__set_err(&s->h.err, HILOCK_EPROTO,
                         "unexpected reply to the semaphore info script");
  } else {
    for (int i = 0; i < 4; i++) out[i] = r->element[i]->integer;
  }
  freeReplyObject(r);
  return rc;
}

static int fam_owned(void *arg, int *owned) {
  hilock_semaphore *s = arg;
  int64_t v[4];
  int rc;
  if (s == NULL || owned == NULL) return HILOCK_EINVAL;
  *owned = 0;
  if (!s->h.held || s->h.pid != hilock__pid()) return HILOCK_OK;
  rc = info(s, s->h.owner, s->h.ownerlen, v);
  if (rc != HILOCK_OK) return rc;
  if (v[3] > 0) *owned = 1;
  else hilock__hold_lost(&s->h);
  return HILOCK_OK;
}

int hilock_semaphore_available(hilock_semaphore *s, int64_t *available) {
  int64_t v[4];
  int rc;
  if (s == NULL || available == NULL) return HILOCK_EINVAL;
  *available = 0;
  rc = info(s, "", 0, v);
  if (rc == HILOCK_OK && v[0] > v[1]) *available = v[0] - v[1];
  return rc;
}

int hilock_semaphore_limit(hilock_semaphore *s, int64_t *limit,
                               int *stored) {
  int64_t v[4];
  int rc;
  if (s == NULL || limit == NULL) return HILOCK_EINVAL;
  *limit = 0;
  if (stored != NULL) *stored = 0;
  rc = info(s, "", 0, v);
  if (rc != HILOCK_OK) return rc;
  *limit = v[0];
  if (stored != NULL) *stored = v[2] != 0;
  return HILOCK_OK;
}

int hilock_semaphore_set_limit(hilock_semaphore *s, int64_t limit) {
  const char *keys[3], *args[1];
  size_t keylens[3], arglens[1];
  char buf[24];
  redisReply *r;
  int rc;

  if (s == NULL) return HILOCK_EINVAL;
  rc = check_permits(&s->h.err, "limit", limit, 0);
  if (rc != HILOCK_OK) return rc;
  three_keys(s, keys, keylens);
  args[0] = buf;
  arglens[0] = hilock__i64(buf, limit);
  rc = hilock__script_run(s->h.client, &s->h.err,
                          &hilock__script_semaphore_set_limit, 3, keys,
                          keylens, 1, args, arglens, &r);
  if (rc != HILOCK_OK) return rc;
  if (!hilock__int_reply(r, 2))
    rc = hilock__set_err(&s->h.err, HILOCK_EPROTO,
                         "unexpected reply to the semaphore set_limit script");
  freeReplyObject(r);
  return rc;
}

int64_t hilock_semaphore_permits(const hilock_semaphore *s) {
  return s == NULL ? 0 : s->permits;
}


/* Round trip: any permit is taken. */
static int fam_locked(void *arg, int *locked) {
  int64_t v[4];
  int rc = info(arg, "", 0, v);
  *locked = rc == HILOCK_OK && v[1] > 0;
  return rc;
}

/* Handing the permit over (adopt.c): the permit count goes with it. */
static void grant_fn(const void *x, hilock__grant *g) {
  const hilock_semaphore *s = x;
  g->family = HILOCK__GRANT_SEM;
  g->a = s->permits;
  g->one = hilock__key_name(s->h.rt, s->key, s->keylen, "permits", &g->onelen);
  g->n = 1;
  g->names = &g->one;
  g->namelens = &g->onelen;
}

int hilock__sem_adopt(hilock_client *c, const hilock__grant *g,
                      hilock__hold **out) {
  hilock_semaphore *s = NULL;
  int rc = g->kind != 0 || g->b != 0 || g->fence != 0
               ? hilock__set_err(hilock__client_err(c), HILOCK_EINVAL,
                                 "the exported grant is malformed")
               : semaphore_new(c, g->names[0], g->namelens[0], g->a, g->ttl_ms,
                               &s);
  if (rc != HILOCK_OK) return rc;
  *out = &s->h;
  return HILOCK_OK;
}

static const hilock__family family = {
    .name = "semaphore",
    .free = fam_free, .owned = fam_owned, .locked = fam_locked,
    .acquire_spec = acquire_spec,
    .notowned = "the permit had expired; nothing of anyone else's changed",
    .renew = renew_fn, .grant = grant_fn};
