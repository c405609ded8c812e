/* The fenced store (hilock/store.h): core/scripts/store.lua does the work;
 * this file checks arguments, names the record key and reads replies. */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "hilock/store.h"
#include "base.h"
#include "family.h"
#include "holds.h"
#include "script.h"
#include "wait.h"
#include "scripts.h"

struct hilock_store {
  hilock_client *client; /* a reference */
  uint64_t serial;       /* for the per-thread error */
  int64_t linger_ms;     /* -1: records never expire */
  size_t max_value;
};

static const char record_role[] = "fence:";

static hilock__err *err(const hilock_store *s) {
  return hilock__tl_err(s, s->serial, 1);
}

int hilock_store_new(hilock_client *client, const hilock_store_options *opts,
                     hilock_store **out) {
  hilock_store_options o = {0, 0};
  hilock_store *s;
  int rc;
  if (out == NULL) return HILOCK_EINVAL;
  *out = NULL;
  if (client == NULL) return HILOCK_EINVAL;
  if (opts != NULL) o = *opts;
  rc = hilock__client_enter(client, hilock__client_err(client));
  if (rc != HILOCK_OK) return rc;
  if (o.linger_ms == 0) o.linger_ms = HILOCK_STORE_LINGER_DEFAULT;
  if (o.max_value == 0) o.max_value = HILOCK_STORE_VALUE_DEFAULT;
  if (o.linger_ms < -1 || o.linger_ms > HILOCK_TTL_MAX_MS) {
    rc = hilock__set_err(hilock__client_err(client), HILOCK_EINVAL,
                         "linger_ms must be -1 (forever) or 1..%" PRId64
                         ", got %" PRId64, HILOCK_TTL_MAX_MS, o.linger_ms);
  } else if (o.max_value > HILOCK_STORE_VALUE_MAX) {
    rc = hilock__set_err(hilock__client_err(client), HILOCK_EINVAL,
                         "max_value may be at most %zu bytes, got %zu",
                         HILOCK_STORE_VALUE_MAX, o.max_value);
  } else if ((s = calloc(1, sizeof(*s))) == NULL) {
    rc = HILOCK_ENOMEM;
  } else {
    hilock__client_ref(client);
    s->client = client;
    s->serial = hilock__serial();
    s->linger_ms = o.linger_ms;
    s->max_value = o.max_value;
    *out = s;
  }
  hilock__client_leave(client);
  return rc;
}

void hilock_store_free(hilock_store *s) {
  if (s == NULL) return;
  hilock__client_unref(s->client);
  free(s);
}

void hilock_store_value_free(char *value) { free(value); }

const char *hilock_store_errmsg(const hilock_store *s) {
  return s != NULL ? hilock__tl_msg(s, s->serial) : "store is NULL";
}

int hilock_store_errcode(const hilock_store *s) {
  return s != NULL ? hilock__tl_code(s, s->serial) : HILOCK_EINVAL;
}

/* 1 if key has a hash tag of its own (a non-empty {...}). */
static int has_tag(const char *key, size_t len) {
  const char *open = memchr(key, '{', len), *close;
  if (open == NULL) return 0;
  close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
  return close != NULL && close > open + 1;
}

/* The record key of key: hilock:fence:K when K has a hash tag, else
 * hilock:fence:{K}; both hash like K. malloc'd into *rec. */
static int record_key(hilock_store *s, const char *key, size_t len,
                      char **rec, size_t *reclen) {
  const hilock__runtime *rt = &s->client->rt;
  size_t rl = sizeof(record_role) - 1;
  int tagged = has_tag(key, len) || memchr(key, '}', len) != NULL;
  char *r = malloc(rt->prefixlen + rl + len + 3), *p;
  if (r == NULL) return HILOCK_ENOMEM;
  memcpy(r, rt->prefix, rt->prefixlen);
  memcpy(r + rt->prefixlen, record_role, rl);
  p = r + rt->prefixlen + rl;
  if (!tagged) *p++ = '{';
  memcpy(p, key, len);
  p += len;
  if (!tagged) *p++ = '}';
  *reclen = (size_t)(p - r);
  if (hilock__client_is_cluster(s->client) &&
      hilock__key_slot(r, *reclen) != hilock__key_slot(key, len)) {
    free(r);
    return hilock__set_err(err(s), HILOCK_EINVAL,
                           "a data key with '}' but no hash tag cannot have "
                           "its fence record in its cluster slot; give it a "
                           "hash tag ({...})");
  }
  *rec = r;
  return HILOCK_OK;
}

static int check(hilock_store *s, const char *key, size_t len, int fenced,
                 uint64_t fence) {
  if (key == NULL)
    return hilock__set_err(err(s), HILOCK_EINVAL, "data key is NULL");
  if (len == 0)
    return hilock__set_err(err(s), HILOCK_EINVAL, "data key is empty");
  if (len > HILOCK_STORE_KEY_MAX)
    return hilock__set_err(err(s), HILOCK_EINVAL,
                           "data key is %zu bytes; the limit is %d", len,
                           HILOCK_STORE_KEY_MAX);
  if (fenced && (fence == 0 || fence > HILOCK_STORE_FENCE_MAX))
    return hilock__set_err(err(s), HILOCK_EINVAL,
                           "fence must be 1..2^53 (a grant's fence), got "
                           "%" PRIu64, fence);
  return HILOCK_OK;
}

/* Run op on key; *out the script's reply {1, result} when done. A refusal
 * is HILOCK_ESTALE with the record's fence in the message. */
static int run(hilock_store *s, const char *op, const char *key, size_t len,
               uint64_t fence, const char *arg, size_t arglen, int64_t ttl_ms,
               redisReply **out) {
  const char *keys[2], *args[5];
  size_t keylens[2], arglens[5];
  char fbuf[24], tbuf[24], lbuf[24];
  char *rec = NULL;
  redisReply *r = NULL;
  int rc;

  *out = NULL;
  rc = check(s, key, len, strcmp(op, "fence") != 0, fence);
  if (rc != HILOCK_OK) return rc;
  rc = hilock__client_enter(s->client, err(s));
  if (rc != HILOCK_OK) return rc;
  rc = record_key(s, key, len, &rec, &keylens[1]);
  if (rc == HILOCK_OK) {
    keys[0] = key;
    keylens[0] = len;
    keys[1] = rec;
    args[0] = op;
    arglens[0] = strlen(op);
    arglens[1] = (size_t)snprintf(fbuf, sizeof(fbuf), "%" PRIu64, fence);
    args[1] = fbuf;
    args[2] = arg != NULL ? arg : "";
    arglens[2] = arg != NULL ? arglen : 0;
    arglens[3] = hilock__i64(tbuf, ttl_ms);
    args[3] = tbuf;
    arglens[4] = hilock__i64(lbuf, s->linger_ms);
    args[4] = lbuf;
    rc = hilock__script_run(s->client, err(s), &hilock__script_store, 2, keys,
                            keylens, 5, args, arglens, &r);
  }
  free(rec);
  hilock__client_leave(s->client);
  if (rc != HILOCK_OK) {
    if (r != NULL) freeReplyObject(r);
    return rc;
  }
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER) {
    freeReplyObject(r);
    return hilock__set_err(err(s), HILOCK_EPROTO,
                           "unexpected reply to the store script");
  }
  if (r->element[0]->integer == 0) {
    long long last = r->element[1]->type == REDIS_REPLY_INTEGER
                         ? r->element[1]->integer : 0;
    freeReplyObject(r);
    return hilock__set_err(err(s), HILOCK_ESTALE,
                           "fence %" PRIu64 " is stale: fence %lld has "
                           "touched this key since; nothing was changed",
                           fence, last);
  }
  *out = r;
  return HILOCK_OK;
}

int hilock_store_get(hilock_store *s, const char *key, size_t keylen,
                     uint64_t fence, char **value, size_t *len) {
  redisReply *r, *v;
  int rc;
  if (value != NULL) *value = NULL;
  if (len != NULL) *len = 0;
  if (s == NULL || value == NULL || len == NULL) return HILOCK_EINVAL;
  rc = run(s, "get", key, keylen, fence, NULL, 0, 0, &r);
  if (rc != HILOCK_OK) return rc;
  v = r->element[1];
  if (v->type == REDIS_REPLY_STRING) {
    *value = malloc(v->len + 1);
    if (*value == NULL) {
      rc = HILOCK_ENOMEM;
    } else {
      memcpy(*value, v->str, v->len);
      (*value)[v->len] = '\0';
      *len = v->len;
    }
  } else if (v->type != REDIS_REPLY_NIL) {
    rc = hilock__set_err(err(s), HILOCK_EPROTO,
                         "unexpected value in the store script's reply");
  }
  freeReplyObject(r);
  return rc;
}

static int check_ttl(hilock_store *s, int64_t ttl_ms) {
  if (ttl_ms == 0) return HILOCK_OK;
  return hilock__check_ms(err(s), "ttl_ms", ttl_ms);
}

int hilock_store_set(hilock_store *s, const char *key, size_t keylen,
                     uint64_t fence, const char *value, size_t len,
                     int64_t ttl_ms) {
  redisReply *r;
  int rc;
  if (s == NULL) return HILOCK_EINVAL;
  if (value == NULL && len > 0)
    return hilock__set_err(err(s), HILOCK_EINVAL, "value is NULL");
  if (len > s->max_value)
    return hilock__set_err(err(s), HILOCK_EINVAL,
                           "value is %zu bytes; this store's limit is %zu",
                           len, s->max_value);
  rc = check_ttl(s, ttl_ms);
  if (rc == HILOCK_OK)
    rc = run(s, "set", key, keylen, fence, value, len, ttl_ms, &r);
  if (rc == HILOCK_OK) freeReplyObject(r);
  return rc;
}

int hilock_store_incrby(hilock_store *s, const char *key, size_t keylen,
                        uint64_t fence, int64_t by, int64_t ttl_ms,
                        int64_t *result) {
  char buf[24];
  redisReply *r;
  int rc;
  if (result != NULL) *result = 0;
  if (s == NULL || result == NULL) return HILOCK_EINVAL;
  rc = check_ttl(s, ttl_ms);
  if (rc == HILOCK_OK)
    rc = run(s, "incrby", key, keylen, fence, buf, hilock__i64(buf, by),
             ttl_ms, &r);
  if (rc != HILOCK_OK) return rc;
  if (r->element[1]->type == REDIS_REPLY_INTEGER)
    *result = r->element[1]->integer;
  else
    rc = hilock__set_err(err(s), HILOCK_EPROTO,
                         "unexpected value in the store script's reply");
  freeReplyObject(r);
  return rc;
}

int hilock_store_delete(hilock_store *s, const char *key, size_t keylen,
                        uint64_t fence, int *deleted) {
  redisReply *r;
  int rc;
  if (deleted != NULL) *deleted = 0;
  if (s == NULL || deleted == NULL) return HILOCK_EINVAL;
  rc = run(s, "del", key, keylen, fence, NULL, 0, 0, &r);
  if (rc != HILOCK_OK) return rc;
  *deleted = r->element[1]->type == REDIS_REPLY_INTEGER &&
             r->element[1]->integer > 0;
  freeReplyObject(r);
  return HILOCK_OK;
}

int hilock_store_fence_of(hilock_store *s, const char *key, size_t keylen,
                          uint64_t *fence) {
  redisReply *r;
  int rc;
  if (fence != NULL) *fence = 0;
  if (s == NULL || fence == NULL) return HILOCK_EINVAL;
  rc = run(s, "fence", key, keylen, 0, NULL, 0, 0, &r);
  if (rc != HILOCK_OK) return rc;
  if (r->element[1]->type == REDIS_REPLY_INTEGER && r->element[1]->integer > 0)
    *fence = (uint64_t)r->element[1]->integer;
  freeReplyObject(r);
  return HILOCK_OK;
}
