/* The exclusive lock family: simple, expiring and lease locks. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "scripts.h"

struct hilock_lock {
  hilock__err err;
  hilock_client *client;
  hilock_lock_kind kind;
  int64_t ttl_ms; /* 0 for a simple lock */
  char *key;
  size_t keylen;
  char *fkey;
  size_t fkeylen;
  char token[HILOCK__TOKEN_LEN + 1]; /* current grant, "" if none */
  int held;
  uint64_t fence;
  int64_t valid_until_us; /* monotonic; for TTL kinds */
};

static int64_t drift_us(int64_t ttl_ms) { return (ttl_ms * 10) + 2000; }

static int lock_new(hilock_client *client, const char *name, size_t namelen,
                    hilock_lock_kind kind, int64_t ttl_ms, hilock_lock **out) {
  hilock__err tmp;
  hilock_lock *l;
  int rc;

  if (out == NULL) return HILOCK_EINVAL;
  *out = NULL;
  if (client == NULL) return HILOCK_EINVAL;
  rc = hilock__check_name(&tmp, name, namelen);
  if (rc == HILOCK_OK && kind != HILOCK_LOCK_SIMPLE)
    rc = hilock__check_ms(&tmp, "ttl", ttl_ms);
  if (rc != HILOCK_OK) {
    hilock__set_err(&client->err, rc, "%s", tmp.msg);
    return rc;
  }
  l = calloc(1, sizeof(*l));
  if (l == NULL) return HILOCK_ENOMEM;
  l->kind = kind;
  l->ttl_ms = kind == HILOCK_LOCK_SIMPLE ? 0 : ttl_ms;
  l->key = hilock__key(name, namelen, "lock", &l->keylen);
  l->fkey = hilock__key(name, namelen, "fence", &l->fkeylen);
  if (l->key == NULL || l->fkey == NULL) {
    free(l->key);
    free(l->fkey);
    free(l);
    return HILOCK_ENOMEM;
  }
  hilock__client_ref(client);
  l->client = client;
  *out = l;
  return HILOCK_OK;
}

int hilock_lock_new(hilock_client *client, const char *name, size_t namelen,
                    int64_t ttl_ms, hilock_lock **out) {
  return lock_new(client, name, namelen, HILOCK_LOCK_EXPIRING, ttl_ms, out);
}

int hilock_simple_lock_new(hilock_client *client, const char *name,
                           size_t namelen, hilock_lock **out) {
  return lock_new(client, name, namelen, HILOCK_LOCK_SIMPLE, 0, out);
}

int hilock_lease_new(hilock_client *client, const char *name, size_t namelen,
                     int64_t ttl_ms, hilock_lock **out) {
  return lock_new(client, name, namelen, HILOCK_LOCK_LEASE, ttl_ms, out);
}

void hilock_lock_free(hilock_lock *l) {
  if (l == NULL) return;
  hilock__client_unref(l->client);
  free(l->key);
  free(l->fkey);
  free(l);
}

static void drop_grant(hilock_lock *l) {
  l->held = 0;
  l->token[0] = '\0';
}

/* Set validity from the moment before the request went out. */
static void set_validity(hilock_lock *l, int64_t start_us, int64_t ttl_ms) {
  l->valid_until_us = start_us + ttl_ms * 1000 - drift_us(ttl_ms);
}

int64_t hilock_lock_validity_ms(const hilock_lock *l) {
  int64_t left;
  if (l == NULL || !l->held) return 0;
  if (l->kind == HILOCK_LOCK_SIMPLE) return INT64_MAX;
  left = (l->valid_until_us - hilock__now_us()) / 1000;
  return left > 0 ? left : 0;
}

/* One grant attempt; *pttl gets the holder's remaining TTL when busy. */
static int try_once(hilock_lock *l, int64_t *pttl) {
  const char *keys[2] = {l->key, l->fkey};
  size_t keylens[2] = {l->keylen, l->fkeylen};
  char ttl[24];
  const char *args[2] = {l->token, ttl};
  size_t arglens[2] = {HILOCK__TOKEN_LEN, hilock__i64(ttl, l->ttl_ms)};
  redisReply *r;
  int64_t start;
  int rc;

  if (l->held && hilock_lock_validity_ms(l) > 0)
    return hilock__set_err(&l->err, HILOCK_EINVAL,
                           "this handle already holds the lock; release it "
                           "first (the lock is not reentrant)");
  drop_grant(l);
  rc = hilock__token(l->token, &l->err);
  if (rc != HILOCK_OK) return rc;
  start = hilock__now_us();
  rc = hilock__script_run(l->client, &l->err, &hilock__script_lock_acquire, 2,
                          keys, keylens, 2, args, arglens, &r);
  if (rc != HILOCK_OK) {
    drop_grant(l);
    return rc;
  }
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER) {
    /* Fail closed: an unreadable reply is never a grant. */
    freeReplyObject(r);
    drop_grant(l);
    return hilock__set_err(&l->err, HILOCK_EPROTO,
                           "unexpected reply to the acquire script");
  }
  if (r->element[0]->integer == 1) {
    l->held = 1;
    l->fence = (uint64_t)r->element[1]->integer;
    if (l->ttl_ms > 0) set_validity(l, start, l->ttl_ms);
    rc = HILOCK_OK;
  } else {
    *pttl = r->element[1]->integer;
    drop_grant(l);
    rc = HILOCK_BUSY;
  }
  freeReplyObject(r);
  return rc;
}

int hilock_lock_try_acquire(hilock_lock *l) {
  int64_t pttl;
  if (l == NULL) return HILOCK_EINVAL;
  return try_once(l, &pttl);
}

int hilock_lock_acquire(hilock_lock *l, int64_t wait_ms) {
  int64_t deadline, backoff = 2;
  if (l == NULL) return HILOCK_EINVAL;
  if (wait_ms < 0 && wait_ms != HILOCK_WAIT_FOREVER)
    return hilock__set_err(&l->err, HILOCK_EINVAL,
                           "wait must be >= 0 ms or HILOCK_WAIT_FOREVER");
  deadline = wait_ms < 0 ? INT64_MAX : hilock__now_ms() + wait_ms;
  for (;;) {
    int64_t pttl = -1, left, pause;
    int rc = try_once(l, &pttl);
    if (rc != HILOCK_BUSY) return rc;
    left = deadline == INT64_MAX ? INT64_MAX : deadline - hilock__now_ms();
    if (left <= 0) return HILOCK_BUSY;
    /* Randomized exponential backoff, never past the holder's expiry or the
     * caller's deadline. */
    pause = hilock__jitter(backoff / 2 + 1, backoff);
    if (pttl > 0 && pttl < pause) pause = pttl;
    if (left < pause) pause = left;
    hilock__sleep_ms(pause);
    backoff = backoff * 2 > 64 ? 64 : backoff * 2;
  }
}

int hilock_lock_release(hilock_lock *l) {
  const char *keys[1], *args[1];
  size_t keylens[1], arglens[1];
  redisReply *r;
  int rc;

  if (l == NULL) return HILOCK_EINVAL;
  if (!l->held)
    return hilock__set_err(&l->err, HILOCK_ENOTOWNED,
                           "release: this handle does not hold the lock");
  keys[0] = l->key;
  keylens[0] = l->keylen;
  args[0] = l->token;
  arglens[0] = HILOCK__TOKEN_LEN;
  rc = hilock__script_run(l->client, &l->err, &hilock__script_lock_release, 1,
                          keys, keylens, 1, args, arglens, &r);
  if (rc != HILOCK_OK) return rc; /* keep the grant: the caller may retry */
  drop_grant(l);
  if (r->type != REDIS_REPLY_INTEGER) rc = HILOCK_EPROTO;
  else if (r->integer != 1) rc = HILOCK_ENOTOWNED;
  freeReplyObject(r);
  if (rc == HILOCK_EPROTO)
    return hilock__set_err(&l->err, rc, "unexpected reply to release");
  if (rc == HILOCK_ENOTOWNED)
    return hilock__set_err(&l->err, rc,
                           "release: the lock expired or another owner holds "
                           "it; nothing was deleted");
  return HILOCK_OK;
}

int hilock_lock_extend(hilock_lock *l, int64_t ms, int replace) {
  const char *keys[1], *args[3];
  size_t keylens[1], arglens[3];
  char buf[24];
  redisReply *r;
  int64_t start;
  int rc;

  if (l == NULL) return HILOCK_EINVAL;
  if (l->kind == HILOCK_LOCK_SIMPLE)
    return hilock__set_err(&l->err, HILOCK_ENOTSUP,
                           "a simple lock has no TTL to extend");
  rc = hilock__check_ms(&l->err, "extension", ms);
  if (rc != HILOCK_OK) return rc;
  if (!l->held)
    return hilock__set_err(&l->err, HILOCK_ENOTOWNED,
                           "extend: this handle does not hold the lock");
  keys[0] = l->key;
  keylens[0] = l->keylen;
  args[0] = l->token;
  arglens[0] = HILOCK__TOKEN_LEN;
  args[1] = buf;
  arglens[1] = hilock__i64(buf, ms);
  args[2] = replace ? "set" : "add";
  arglens[2] = 3;
  start = hilock__now_us();
  rc = hilock__script_run(l->client, &l->err, &hilock__script_lock_extend, 1,
                          keys, keylens, 3, args, arglens, &r);
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_INTEGER) {
    rc = hilock__set_err(&l->err, HILOCK_EPROTO, "unexpected reply to extend");
  } else if (r->integer <= 0) {
    drop_grant(l);
    rc = hilock__set_err(&l->err, HILOCK_ENOTOWNED,
                         "extend: the lock expired or another owner holds it");
  } else {
    set_validity(l, start, r->integer);
  }
  freeReplyObject(r);
  return rc;
}

int hilock_lock_renew(hilock_lock *l) {
  if (l == NULL) return HILOCK_EINVAL;
  return hilock_lock_extend(l, l->ttl_ms, 1);
}

/* Run a one-key command (GET, EXISTS, DEL) on the lock key. */
static int key_command(hilock_lock *l, const char *cmd, redisReply **r) {
  const char *argv[2] = {cmd, l->key};
  size_t lens[2] = {strlen(cmd), l->keylen};
  return hilock__command(l->client, &l->err, 2, argv, lens, r);
}

int hilock_lock_owned(hilock_lock *l, int *owned) {
  redisReply *r;
  int rc;
  if (l == NULL || owned == NULL) return HILOCK_EINVAL;
  *owned = 0;
  if (!l->held) return HILOCK_OK;
  rc = key_command(l, "GET", &r);
  if (rc != HILOCK_OK) return rc;
  if (r->type == REDIS_REPLY_STRING && r->len == HILOCK__TOKEN_LEN &&
      memcmp(r->str, l->token, HILOCK__TOKEN_LEN) == 0)
    *owned = 1;
  else if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL)
    drop_grant(l);
  else
    rc = hilock__set_err(&l->err, HILOCK_EPROTO, "unexpected reply to GET");
  freeReplyObject(r);
  return rc;
}

int hilock_lock_locked(hilock_lock *l, int *locked) {
  redisReply *r;
  int rc;
  if (l == NULL || locked == NULL) return HILOCK_EINVAL;
  rc = key_command(l, "EXISTS", &r);
  if (rc != HILOCK_OK) return rc;
  *locked = r->type == REDIS_REPLY_INTEGER && r->integer > 0;
  freeReplyObject(r);
  return HILOCK_OK;
}

int hilock_lock_force_release(hilock_lock *l, int *deleted) {
  redisReply *r;
  int rc;
  if (l == NULL) return HILOCK_EINVAL;
  rc = key_command(l, "DEL", &r);
  if (rc != HILOCK_OK) return rc;
  if (deleted != NULL)
    *deleted = r->type == REDIS_REPLY_INTEGER && r->integer > 0;
  freeReplyObject(r);
  drop_grant(l);
  return HILOCK_OK;
}

int hilock_lock_held(const hilock_lock *l) {
  return l != NULL && l->held && hilock_lock_validity_ms(l) > 0;
}

uint64_t hilock_lock_fence(const hilock_lock *l) {
  return l == NULL ? 0 : l->fence;
}

const char *hilock_lock_token(const hilock_lock *l) {
  return l == NULL ? "" : l->token;
}

hilock_lock_kind hilock_lock_get_kind(const hilock_lock *l) {
  return l == NULL ? HILOCK_LOCK_SIMPLE : l->kind;
}

int64_t hilock_lock_ttl_ms(const hilock_lock *l) {
  return l == NULL ? 0 : l->ttl_ms;
}

const char *hilock_lock_key(const hilock_lock *l, size_t *len) {
  if (l == NULL) {
    if (len) *len = 0;
    return "";
  }
  if (len) *len = l->keylen;
  return l->key;
}

const char *hilock_lock_errmsg(const hilock_lock *l) {
  return l == NULL ? "lock is NULL" : l->err.msg;
}

int hilock_lock_errcode(const hilock_lock *l) {
  return l == NULL ? HILOCK_EINVAL : l->err.code;
}
