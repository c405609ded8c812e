/* The exclusive lock family: simple, expiring and lease locks. Mostly the
 * scripts in core/scripts/lock_*.lua; waiting, renewal and grant state come
 * from the shared layer (wait.c, renewal.c, hold.c). */
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

struct hilock_lock {
  hilock__hold h; /* first: grant state and last error */
  hilock_lock_kind kind;
  char *key, *fkey, *wkey; /* lock, fence counter, wake list */
  size_t keylen, fkeylen, wkeylen;
  /* Lock delay (hilock_lock_set_delay): 0, or the ms after a lost grant in
   * which the name is granted to no one; dkey is the marker key, the
   * renewal's extra key (h.xkeys) while delay_ms > 0. */
  int64_t delay_ms;
  char *dkey;
  size_t dkeylen;
  const char *renew_xkeys[1];
  size_t renew_xkeylens[1];
};

static int run_release(void *arg, hilock__err *e, redisReply **r);

/* A constructor's kind and TTL: a simple lock takes none (0). */
typedef struct kind_ttl {
  hilock_lock_kind kind;
  int64_t ttl_ms;
} kind_ttl;

static int check_kind(hilock__err *e, const void *arg) {
  const kind_ttl *k = arg;
  if (k->kind != HILOCK_LOCK_SIMPLE && k->kind != HILOCK_LOCK_EXPIRING &&
      k->kind != HILOCK_LOCK_LEASE)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "lock kind must be HILOCK_LOCK_SIMPLE, "
                           "HILOCK_LOCK_EXPIRING or HILOCK_LOCK_LEASE, got %d",
                           (int)k->kind);
  if (k->kind == HILOCK_LOCK_SIMPLE && k->ttl_ms != 0)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "a simple lock takes no TTL (ttl_ms 0), got %lld",
                           (long long)k->ttl_ms);
  return HILOCK_OK;
}

static int lock_new(hilock_client *client, const char *name, size_t namelen,
                    hilock_lock_kind kind, int64_t ttl_ms, hilock_lock **out) {
  kind_ttl k = {kind, ttl_ms};
  hilock_lock *l;
  int rc;

  if (out == NULL) return HILOCK_EINVAL;
  *out = NULL;
  rc = hilock__new_check_with(client, name, namelen,
                              kind != HILOCK_LOCK_SIMPLE, ttl_ms, check_kind,
                              &k);
  if (rc != HILOCK_OK) return rc;
  l = calloc(1, sizeof(*l));
  if (l == NULL) return HILOCK_ENOMEM;
  l->kind = kind;
  l->key = hilock__key(&client->rt, name, namelen, "lock", &l->keylen);
  l->fkey = hilock__key(&client->rt, name, namelen, "fence", &l->fkeylen);
  l->wkey = hilock__key(&client->rt, name, namelen, "wake", &l->wkeylen);
  l->dkey = hilock__key(&client->rt, name, namelen, "delay", &l->dkeylen);
  if (l->key == NULL || l->fkey == NULL || l->wkey == NULL ||
      l->dkey == NULL) {
    free(l->key);
    free(l->fkey);
    free(l->wkey);
    free(l->dkey);
    free(l);
    return HILOCK_ENOMEM;
  }
  hilock__hold_init_family(&l->h, client, l->key, l->keylen,
                           &hilock__script_lock_extend,
                           kind == HILOCK_LOCK_SIMPLE ? 0 : ttl_ms, &family,
                           run_release, l);
  *out = l;
  return HILOCK_OK;
}

int hilock_lock_new_kind(hilock_client *client, const char *name,
                         size_t namelen, hilock_lock_kind kind, int64_t ttl_ms,
                         hilock_lock **out) {
  HILOCK__CLIENT_CALL(client, out,
                     lock_new(client, name, namelen, kind, ttl_ms, out));
}

static void fam_free(void *arg) {
  hilock_lock *l = arg;
  if (l == NULL) return;
  hilock__hold_destroy(&l->h);
  free(l->key);
  free(l->fkey);
  free(l->wkey);
  free(l->dkey);
  free(l);
}


/* One grant attempt; *pttl gets the holder's remaining TTL when busy. */
static int attempt(void *arg, int64_t *pttl) {
  hilock_lock *l = arg;
  hilock__hold *h = &l->h;
  const char *keys[4] = {l->key, l->fkey, l->wkey, l->dkey};
  size_t keylens[4] = {l->keylen, l->fkeylen, l->wkeylen, l->dkeylen};
  char ttl[24], delay[24];
  const char *args[4] = {h->owner, ttl, "woken", delay};
  size_t arglens[4] = {HILOCK__TOKEN_LEN, hilock__i64(ttl, h->ttl_ms), 5,
                       hilock__i64(delay, l->delay_ms)};
  /* Rung by a release: this attempt takes the wake-up (same round trip). */
  int n = hilock__attempt_woken() == 2 ? 3 : 2;
  /* If the reply does not come in time, the grant is ambiguous: the same
   * socket then carries this attempt's owner-checked release. */
  const char *ukeys[3] = {l->key, l->wkey, l->dkey};
  size_t ukeylens[3] = {l->keylen, l->wkeylen, l->dkeylen};
  hilock__undo undo = {&hilock__script_lock_release, 2, 1, ukeys, ukeylens,
                       args, arglens, h->ttl_ms, NULL};
  hilock__attempt a;
  redisReply *r;
  int rc, ok;

  /* A lock delay: the wake list and the marker are always passed (ARGV[3]
   * other than "woken" when not rung), and the release clears the marker. */
  if (l->delay_ms > 0) {
    if (n == 2) arglens[2] = 1; /* "w": not woken */
    n = 4;
    undo.nkeys = 3;
  }
  rc = hilock__attempt_begin(h, "this handle already holds the lock; release "
                                "it first (the lock is not reentrant)");
  if (rc == HILOCK_OK)
    rc = hilock__attempt_run(h, &a, &undo, &hilock__script_lock_acquire, n,
                             keys, keylens, n, args, arglens, &r);
  if (rc != HILOCK_OK) return rc;
  ok = r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
       r->element[0]->type == REDIS_REPLY_INTEGER &&
       r->element[1]->type == REDIS_REPLY_INTEGER;
  return hilock__attempt_end(h, &a, r, ok ? r->element[0]->integer == 1 : -1,
                             ok ? (uint64_t)r->element[1]->integer : 0,
                             ok ? r->element[1]->integer : 0, pttl, hilock__family_release,
                             l, "acquire script");
}

static void acquire_spec(void *arg, hilock__acquire_spec *sp) {
  hilock_lock *l = arg;
  hilock__spec(sp, attempt, l, &l->wkey, &l->wkeylen);
}

/* lock_release.lua: delete the key if it holds our token, wake a waiter. */
static int run_release(void *arg, hilock__err *e, redisReply **r) {
  hilock_lock *l = arg;
  const char *keys[3] = {l->key, l->wkey, l->dkey};
  size_t keylens[3] = {l->keylen, l->wkeylen, l->dkeylen};
  const char *args[1] = {l->h.owner};
  size_t arglens[1] = {l->h.ownerlen};
  return hilock__script_run(l->h.client, e, &hilock__script_lock_release,
                            l->delay_ms > 0 ? 3 : 2, keys, keylens, 1, args,
                            arglens, r);
}

static int extend_fn(void *x, int64_t ms, int replace) {
  hilock_lock *l = x;
  if (l->kind == HILOCK_LOCK_SIMPLE)
    return hilock__set_err(&l->h.err, HILOCK_ENOTSUP,
                           "a simple lock has no TTL to extend");
  return hilock__hold_extend(&l->h, ms, replace);
}

static int renew_fn(void *x) {
  hilock_lock *l = x;
  if (l->kind == HILOCK_LOCK_SIMPLE)
    return hilock__set_err(&l->h.err, HILOCK_ENOTSUP,
                           "a simple lock has no TTL to renew");
  return extend_fn(l, l->h.ttl_ms, 1);
}



int hilock_lock_force_release(hilock_lock *l, int *deleted) {
  const char *keys[3];
  size_t keylens[3];
  redisReply *r;
  int rc;
  if (l == NULL) return HILOCK_EINVAL;
  keys[2] = l->dkey;
  keylens[2] = l->dkeylen;
  keys[0] = l->key;
  keylens[0] = l->keylen;
  keys[1] = l->wkey;
  keylens[1] = l->wkeylen;
  rc = hilock__script_run(l->h.client, &l->h.err, &hilock__script_lock_force,
                          3, keys, keylens, 0, NULL, NULL, &r);
  if (rc != HILOCK_OK) return rc;
  if (deleted != NULL)
    *deleted = r->type == REDIS_REPLY_INTEGER && r->integer > 0;
  freeReplyObject(r);
  if (l->h.pid == hilock__pid()) hilock__hold_drop(&l->h);
  return HILOCK_OK;
}

static int set_delay_fn(void *x, int64_t delay_ms) {
  hilock_lock *l = x;
  if (l == NULL) return HILOCK_EINVAL;
  if (delay_ms < 0 || delay_ms > HILOCK_TTL_MAX_MS)
    return hilock__set_err(&l->h.err, HILOCK_EINVAL,
                           "lock delay must be 0..%lld ms, got %lld",
                           (long long)HILOCK_TTL_MAX_MS, (long long)delay_ms);
  if (delay_ms > 0 && l->kind == HILOCK_LOCK_SIMPLE)
    return hilock__set_err(&l->h.err, HILOCK_EINVAL,
                           "a simple lock never lapses, so it takes no lock "
                           "delay");
  if (l->h.held)
    return hilock__set_err(&l->h.err, HILOCK_EINVAL,
                           "set the lock delay before acquiring, not while "
                           "the handle holds the lock");
  l->delay_ms = delay_ms;
  /* Renewals and extensions push the marker's TTL along with the lock's. */
  l->renew_xkeys[0] = l->dkey;
  l->renew_xkeylens[0] = l->dkeylen;
  l->h.xkeys = delay_ms > 0 ? l->renew_xkeys : NULL;
  l->h.xkeylens = delay_ms > 0 ? l->renew_xkeylens : NULL;
  l->h.nxkeys = delay_ms > 0 ? 1 : 0;
  return HILOCK_OK;
}

static int64_t delay_ms_fn(const void *x) {
  const hilock_lock *l = x;
  return l == NULL ? 0 : l->delay_ms;
}

hilock_lock_kind hilock_lock_kind_of(const hilock_lock *l) {
  return l == NULL ? HILOCK_LOCK_SIMPLE : l->kind;
}

/* Handing the grant over (adopt.c). */
static void grant_fn(const void *x, hilock__grant *g) {
  const hilock_lock *l = x;
  g->family = HILOCK__GRANT_LOCK;
  g->kind = (int)l->kind;
  g->one = hilock__key_name(l->h.rt, l->key, l->keylen, "lock", &g->onelen);
  g->n = 1;
  g->names = &g->one;
  g->namelens = &g->onelen;
}

int hilock__lock_adopt(hilock_client *c, const hilock__grant *g,
                       hilock__hold **out) {
  hilock_lock *l = NULL;
  int rc = g->a != 0 || g->b != 0
               ? hilock__set_err(hilock__client_err(c), HILOCK_EINVAL,
                                 "the exported grant is malformed")
               : lock_new(c, g->names[0], g->namelens[0],
                          (hilock_lock_kind)g->kind, g->ttl_ms, &l);
  if (rc == HILOCK_OK) *out = &l->h;
  return rc;
}

static const hilock__family family = {
    .name = "lock", .free = fam_free, .acquire_spec = acquire_spec,
    .notowned = "the lock expired or another owner holds it; nothing was "
                "deleted",
    .extend = extend_fn,
    .renew = renew_fn, .grant = grant_fn, .set_delay = set_delay_fn,
    .delay_ms = delay_ms_fn};
