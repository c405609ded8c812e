/* The exclusive lock family: simple, expiring and lease locks. Mostly the
 * scripts in core/scripts/lock_*.lua; waiting, renewal and grant state come
 * from the shared layer (wait.c, renewal.c, hold.c).
 *
 * redis-py's layout (HILOCK_LOCK_REDIS_PY): the lock of redis-py's
 * redis.lock.Lock, so that Python services on redis-py and hilock exclude
 * each other on one name. The key is the name as given (no prefix, no hash
 * tag added), holding the owner token with its PX expiry; release is
 * redis-py's compare-and-delete, extend adds to or replaces the PTTL as
 * redis-py's does (lock_extend.lua reads only the key). There is no fence
 * (the layout has no room: 0, None in Python) and no lock delay. hilock's
 * releases publish on hilock:redis-py:{<name>} (hilock:redis-py:<name>
 * when the name holds a '{': the channel hashes to the key's slot), where
 * hilock's waiters listen; redis-py's releases publish nothing, so a
 * waiter sleeps at most REDIS_PY_NAP_MS (or the holder's PTTL, if less)
 * between attempts. */
#include <pthread.h>
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
  /* The lock-delay marker (hilock_hold_set_lock_delay; the delay is the
   * hold's): every grant checks it, a grant with a delay sets it. */
  char *dkey;
  size_t dkeylen;
  /* redis-py's layout: the caller's token for the grants to come
   * (hilock_lock_set_token; none: a random one per grant), under wmu: a
   * thread may set it while another's acquire reads it. */
  pthread_mutex_t wmu;
  char want[sizeof(((hilock__hold *)0)->owner)];
  size_t wantlen;
};

/* A hilock waiter on a redis-py lock looks again at least this often: a
 * release by redis-py publishes nothing (redis-py's own sleep is 100 ms). */
#define REDIS_PY_NAP_MS 100
static const char redis_py_channel[] = "hilock:redis-py:";

/* redis-py's layout: the key is the name; the wake channel hashes to the
 * name's slot (the name's own hash tag, else {name}); the fence and delay
 * keys are never read (they name the key again). */
static int redis_py_keys(hilock_lock *l, const char *name, size_t namelen) {
  size_t pl = sizeof(redis_py_channel) - 1;
  int tagged = memchr(name, '{', namelen) != NULL;
  char *w = malloc(pl + namelen + 3), *p = w;
  l->key = hilock__dup(name, namelen);
  l->fkey = hilock__dup(name, namelen);
  l->dkey = hilock__dup(name, namelen);
  if (w == NULL || l->key == NULL || l->fkey == NULL || l->dkey == NULL) {
    free(w);
    free(l->key);
    free(l->fkey);
    free(l->dkey);
    return HILOCK_ENOMEM;
  }
  memcpy(p, redis_py_channel, pl);
  p += pl;
  if (!tagged) *p++ = '{';
  memcpy(p, name, namelen);
  p += namelen;
  if (!tagged) *p++ = '}';
  *p = '\0';
  l->wkey = w;
  l->wkeylen = (size_t)(p - w);
  l->keylen = l->fkeylen = l->dkeylen = namelen;
  return HILOCK_OK;
}

static int run_release(void *arg, hilock__err *e, redisReply **r);

/* A constructor's kind and TTL: a simple lock takes none (0). */
typedef struct kind_ttl {
  hilock_lock_kind kind;
  int64_t ttl_ms;
} kind_ttl;

static int check_kind(hilock__err *e, const void *arg) {
  const kind_ttl *k = arg;
  if (k->kind != HILOCK_LOCK_SIMPLE && k->kind != HILOCK_LOCK_EXPIRING &&
      k->kind != HILOCK_LOCK_LEASE && k->kind != HILOCK_LOCK_REDIS_PY)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "lock kind must be HILOCK_LOCK_SIMPLE, "
                           "HILOCK_LOCK_EXPIRING, HILOCK_LOCK_LEASE or "
                           "HILOCK_LOCK_REDIS_PY, got %d",
                           (int)k->kind);
  if (k->kind == HILOCK_LOCK_REDIS_PY && k->ttl_ms < 0)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "ttl must be 0 (no expiry) or > 0, got %lld",
                           (long long)k->ttl_ms);
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

  /* redis-py's layout takes 0: a lock without expiry, as its timeout=None. */
  l = hilock__new_handle_with(client, name, namelen,
                              kind != HILOCK_LOCK_SIMPLE &&
                                  !(kind == HILOCK_LOCK_REDIS_PY && ttl_ms == 0),
                              ttl_ms, check_kind, &k, sizeof(*l), &rc);
  if (l == NULL) return rc;
  l->kind = kind;
  if (kind == HILOCK_LOCK_REDIS_PY) {
    if (redis_py_keys(l, name, namelen) != HILOCK_OK) {
      free(l);
      return HILOCK_ENOMEM;
    }
  } else if (hilock__family_keys(l, client, name, namelen, 4,
                                 "lock", &l->key, &l->keylen,
                                 "fence", &l->fkey, &l->fkeylen,
                                 "wake", &l->wkey, &l->wkeylen,
                                 "delay", &l->dkey, &l->dkeylen) != HILOCK_OK) {
    return HILOCK_ENOMEM;
  }
  pthread_mutex_init(&l->wmu, NULL);
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
  if (l != NULL) {
    pthread_mutex_destroy(&l->wmu);
    hilock__family_free(&l->h, l, 4, l->key, l->fkey, l->wkey, l->dkey);
  }
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
                       hilock__i64(delay, h->delay_ms)};
  /* Rung by a release, this attempt takes the wake-up in its round trip
   * (ARGV[3] "woken"; "w": not rung). Every attempt checks the delay
   * marker, whatever its own delay; one with a delay sets it (ARGV[4]). */
  int nargs = h->delay_ms > 0 ? 4 : 3;
  /* If the reply does not come in time, the grant is ambiguous: the same
   * socket then carries this attempt's owner-checked release. */
  const char *ukeys[3] = {l->key, l->wkey, l->dkey};
  size_t ukeylens[3] = {l->keylen, l->wkeylen, l->dkeylen};
  hilock__undo undo = {&hilock__script_lock_release,
                       h->delay_ms > 0 ? 3 : 2, 1, ukeys, ukeylens,
                       args, arglens, h->ttl_ms, NULL};
  hilock__attempt a;
  redisReply *r;
  int rc, ok;

  int py = l->kind == HILOCK_LOCK_REDIS_PY;
  int64_t busy;

  if (py) {
    /* redis-py's layout: its scripts read the key and the channel only. */
    keys[1] = l->wkey;
    keylens[1] = l->wkeylen;
    undo.script = &hilock__script_redispy_release;
    undo.nkeys = 2;
    ukeys[1] = l->wkey;
    ukeylens[1] = l->wkeylen;
    nargs = 2;
  }
  if (hilock__attempt_woken() != 2) arglens[2] = 1; /* "w" */
  rc = hilock__attempt_begin(h, "this handle already holds the lock; release "
                                "it first (the lock is not reentrant)");
  if (rc == HILOCK_OK && py) { /* the caller's token, if one is set */
    pthread_mutex_lock(&l->wmu);
    if (l->wantlen > 0) {
      memcpy(h->owner, l->want, l->wantlen);
      h->owner[l->wantlen] = '\0';
      h->ownerlen = l->wantlen;
      arglens[0] = l->wantlen;
    }
    pthread_mutex_unlock(&l->wmu);
  }
  if (rc == HILOCK_OK)
    rc = hilock__attempt_run(h, &a, &undo,
                             py ? &hilock__script_redispy_acquire
                                : &hilock__script_lock_acquire,
                             py ? 1 : 4, keys, keylens, nargs, args, arglens,
                             &r);
  if (rc != HILOCK_OK) return rc;
  ok = hilock__int_reply(r, 2) && r->elements == 2;
  busy = ok ? r->element[1]->integer : 0;
  /* A redis-py holder's release publishes nothing, and one may hold
   * without expiry (PTTL -1): look again at least every REDIS_PY_NAP_MS. */
  if (py && (busy < 0 || busy > REDIS_PY_NAP_MS)) busy = REDIS_PY_NAP_MS;
  return hilock__attempt_end(h, &a, r, ok ? r->element[0]->integer == 1 : -1,
                             ok ? (uint64_t)r->element[1]->integer : 0,
                             busy, pttl, hilock__family_release,
                             l, "acquire script");
}

static void acquire_spec(void *arg, hilock__acquire_spec *sp) {
  hilock_lock *l = arg;
  hilock__spec(sp, attempt, l, &l->wkey, &l->wkeylen);
  if (l->kind == HILOCK_LOCK_REDIS_PY) sp->wake |= HILOCK__WAKE_CHANNEL;
}

/* lock_release.lua: delete the key if it holds our token, wake a waiter. */
static int run_release(void *arg, hilock__err *e, redisReply **r) {
  hilock_lock *l = arg;
  const char *keys[3] = {l->key, l->wkey, l->dkey};
  size_t keylens[3] = {l->keylen, l->wkeylen, l->dkeylen};
  const char *args[1] = {l->h.owner};
  size_t arglens[1] = {l->h.ownerlen};
  if (l->kind == HILOCK_LOCK_REDIS_PY)
    return hilock__script_run(l->h.client, e, &hilock__script_redispy_release,
                              2, keys, keylens, 1, args, arglens, r);
  return hilock__script_run(l->h.client, e, &hilock__script_lock_release,
                            l->h.delay_ms > 0 ? 3 : 2, keys, keylens, 1, args,
                            arglens, r);
}

static int extend_fn(void *x, int64_t ms, int replace) {
  hilock_lock *l = x;
  if (l->kind == HILOCK_LOCK_SIMPLE ||
      (l->kind == HILOCK_LOCK_REDIS_PY && l->h.ttl_ms == 0))
    return hilock__set_err(&l->h.err, HILOCK_ENOTSUP,
                           "a simple lock has no TTL to extend");
  return hilock__hold_extend(&l->h, ms, replace);
}

static int renew_fn(void *x) {
  hilock_lock *l = x;
  if (l->kind == HILOCK_LOCK_SIMPLE ||
      (l->kind == HILOCK_LOCK_REDIS_PY && l->h.ttl_ms == 0))
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
  rc = l->kind == HILOCK_LOCK_REDIS_PY
           ? hilock__script_run(l->h.client, &l->h.err,
                                &hilock__script_redispy_force, 2, keys,
                                keylens, 0, NULL, NULL, &r)
           : hilock__script_run(l->h.client, &l->h.err,
                                &hilock__script_lock_force, 3, keys, keylens,
                                0, NULL, NULL, &r);
  if (rc != HILOCK_OK) return rc;
  if (deleted != NULL)
    *deleted = r->type == REDIS_REPLY_INTEGER && r->integer > 0;
  freeReplyObject(r);
  if (l->h.pid == hilock__pid()) hilock__hold_drop(&l->h);
  return HILOCK_OK;
}

static int set_delay_fn(void *x, int64_t delay_ms) {
  hilock_lock *l = x;
  if (delay_ms > 0 && l->kind == HILOCK_LOCK_SIMPLE)
    return hilock__set_err(&l->h.err, HILOCK_EINVAL,
                           "a simple lock never lapses, so it takes no lock "
                           "delay");
  if (delay_ms > 0 && l->kind == HILOCK_LOCK_REDIS_PY)
    return hilock__set_err(&l->h.err, HILOCK_ENOTSUP,
                           "redis-py's layout has no room for a lock delay");
  return hilock__hold_set_delay(&l->h, delay_ms, l->dkey, l->dkeylen);
}

int hilock_lock_set_token(hilock_lock *l, const char *value, size_t len) {
  if (l == NULL) return HILOCK_EINVAL;
  if (l->kind != HILOCK_LOCK_REDIS_PY)
    return hilock__set_err(&l->h.err, HILOCK_EINVAL,
                           "only a lock in redis-py's layout takes the "
                           "caller's token");
  if (len > 0 && (value == NULL || len >= sizeof(l->want) ||
                  memchr(value, '\0', len) != NULL))
    return hilock__set_err(&l->h.err, HILOCK_EINVAL,
                           "a token is 1..%d bytes without NUL, got %zu",
                           (int)sizeof(l->want) - 1, len);
  pthread_mutex_lock(&l->wmu);
  if (len > 0) memcpy(l->want, value, len);
  l->wantlen = len;
  pthread_mutex_unlock(&l->wmu);
  return HILOCK_OK;
}

hilock_lock_kind hilock_lock_kind_of(const hilock_lock *l) {
  return l == NULL ? HILOCK_LOCK_SIMPLE : l->kind;
}

/* Handing the grant over (adopt.c). */
static void grant_fn(const void *x, hilock__grant *g) {
  const hilock_lock *l = x;
  g->family = HILOCK__GRANT_LOCK;
  g->kind = (int)l->kind;
  if (l->kind == HILOCK_LOCK_REDIS_PY) { /* the key is the name */
    g->one = hilock__dup(l->key, l->keylen);
    g->onelen = l->keylen;
  } else {
    g->one = hilock__key_name(l->h.rt, l->key, l->keylen, "lock", &g->onelen);
  }
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
    .renew = renew_fn, .grant = grant_fn, .set_delay = set_delay_fn};
