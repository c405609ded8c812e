/* What the lock families share beyond the hold: the checks, start and end
 * of a constructor, the start of a queue family's acquire (the fair and
 * sequential locks; their waiting is hilock__spec_queue's, wait.c), and
 * the reading of an extension that replicas did not confirm. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "family.h"
#include "holds.h"
#include "script.h"
#include "wait.h"

int hilock__new_check(hilock_client *client, const char *name, size_t namelen,
                      int64_t ttl_ms) {
  return hilock__new_check_with(client, name, namelen, 1, ttl_ms, NULL, NULL);
}

int hilock__new_check_with(hilock_client *client, const char *name,
                           size_t namelen, int has_ttl, int64_t ttl_ms,
                           int (*check)(hilock__err *e, const void *arg),
                           const void *arg) {
  hilock__err tmp;
  int rc;
  if (client == NULL) return HILOCK_EINVAL;
  rc = hilock__check_name(&tmp, name, namelen);
  if (rc == HILOCK_OK && check != NULL) rc = check(&tmp, arg);
  if (rc == HILOCK_OK && has_ttl) rc = hilock__check_ttl(&tmp, ttl_ms);
  if (rc != HILOCK_OK) return hilock__set_err(hilock__client_err(client), rc, "%s", tmp.msg);
  if (client->rt.closed)
    return hilock__set_err(hilock__client_err(client), HILOCK_ECLOSED, "client is closed");
  return HILOCK_OK;
}

int hilock__check_count(hilock__err *e, const void *count) {
  const hilock__count *c = count;
  if (c->value < 1 || c->value > c->max)
    return hilock__set_err(e, HILOCK_EINVAL, "%s must be 1..%lld, got %lld",
                           c->what, (long long)c->max, (long long)c->value);
  return HILOCK_OK;
}

void *hilock__new_handle(hilock_client *client, const char *name,
                         size_t namelen, int64_t ttl_ms, size_t size,
                         int *rc) {
  return hilock__new_handle_with(client, name, namelen, 1, ttl_ms, NULL, NULL,
                                 size, rc);
}

void *hilock__new_handle_with(hilock_client *client, const char *name,
                              size_t namelen, int has_ttl, int64_t ttl_ms,
                              int (*check)(hilock__err *e, const void *arg),
                              const void *arg, size_t size, int *rc) {
  void *p;
  *rc = hilock__new_check_with(client, name, namelen, has_ttl, ttl_ms, check,
                               arg);
  if (*rc != HILOCK_OK) return NULL;
  p = calloc(1, size);
  if (p == NULL) *rc = HILOCK_ENOMEM;
  return p;
}

int hilock__family_keys(void *handle, hilock_client *client,
                        const char *name, size_t namelen, int n, ...) {
  va_list ap;
  int ok = 1;
  va_start(ap, n);
  for (int i = 0; i < n; i++) {
    const char *role = va_arg(ap, const char *);
    char **key = va_arg(ap, char **);
    size_t *keylen = va_arg(ap, size_t *);
    *key = ok ? hilock__key(&client->rt, name, namelen, role, keylen) : NULL;
    ok = ok && *key != NULL;
  }
  va_end(ap);
  if (ok) return HILOCK_OK;
  va_start(ap, n);
  for (int i = 0; i < n; i++) {
    char **key;
    (void)va_arg(ap, const char *);
    key = va_arg(ap, char **);
    (void)va_arg(ap, size_t *);
    free(*key);
  }
  va_end(ap);
  free(handle);
  return HILOCK_ENOMEM;
}

void hilock__family_free(hilock__hold *h, void *handle, int n, ...) {
  va_list ap;
  hilock__hold_destroy(h);
  va_start(ap, n);
  for (int i = 0; i < n; i++) free(va_arg(ap, void *));
  va_end(ap);
  free(handle);
}

void hilock__hold_init_family(hilock__hold *h, hilock_client *c,
                              const char *rkey, size_t rkeylen,
                              const hilock__script *renew_script,
                              int64_t ttl_ms, const hilock__family *fam,
                              hilock__run_fn close_run, void *handle) {
  hilock__hold_init(h, c, rkey, rkeylen, renew_script, ttl_ms);
  h->fam = fam;
  h->close_run = close_run; /* closing the client releases it */
  h->close_arg = handle;
}

int hilock__queue_begin(hilock__hold *h, char *id) {
  if (h->held && hilock__hold_validity_ms(h) > 0 && h->pid == hilock__pid())
    return hilock__set_err(&h->err, HILOCK_EINVAL,
                           "this handle already holds the lock; release it "
                           "first (the lock is not reentrant)");
  hilock__hold_lapse(h);
  hilock__hold_drop(h);
  return hilock__token(id, &h->err);
}

int hilock__extended_unacked(int *rc, redisReply *r, int done) {
  if (*rc != HILOCK_ENOREPLICAS) return 0;
  if (done) {
    freeReplyObject(r);
    return 1;
  }
  *rc = HILOCK_OK; /* not extended: the reply says why */
  return 0;
}

int hilock__hold_renew(hilock__hold *h, const char *notowned) {
  const char *keys[4], *args[2];
  size_t keylens[4], arglens[2];
  char ttl[24];
  redisReply *r;
  int64_t start;
  int rc = hilock__hold_check(h, "renew"), nkeys = 1;
  if (rc != HILOCK_OK) return rc;
  if (h->nxkeys > 3)
    return hilock__set_err(&h->err, HILOCK_EINVAL, "renew: too many keys");
  keys[0] = h->rkey;
  keylens[0] = h->rkeylen;
  for (int i = 0; i < h->nxkeys; i++, nkeys++) {
    keys[nkeys] = h->xkeys[i];
    keylens[nkeys] = h->xkeylens[i];
  }
  args[0] = h->owner;
  arglens[0] = h->ownerlen;
  args[1] = ttl;
  arglens[1] = hilock__i64(ttl, h->ttl_ms);
  start = hilock__now_us();
  rc = hilock__script_run(h->client, &h->err, h->renew_script, nkeys, keys,
                          keylens, 2, args, arglens, &r);
  if (hilock__extended_unacked(&rc, r, r != NULL &&
                                           r->type == REDIS_REPLY_INTEGER &&
                                           r->integer > 0))
    return rc;
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_INTEGER) {
    rc = hilock__set_err(&h->err, HILOCK_EPROTO, "unexpected reply to renew");
  } else if (r->integer <= 0) {
    hilock__hold_lost(h);
    rc = hilock__set_err(&h->err, HILOCK_ENOTOWNED, "renew: %s", notowned);
  } else {
    hilock__hold_extended(h, start, h->ttl_ms);
  }
  freeReplyObject(r);
  return rc;
}

/* ## The verbs of every family (hilock/hold.h) -------------------------------
 * Each runs the family's own through its table; a verb the family lacks is
 * HILOCK_ENOTSUP, its message naming the family and the verb. */

static int lacks(hilock__hold *h, const char *verb) {
  return hilock__set_err(hilock__hold_err(h), HILOCK_ENOTSUP,
                         "this %s has no %s", h->fam->name, verb);
}

int hilock_hold_acquire(hilock_hold *hh, int64_t wait_ms) {
  hilock__hold *h = (hilock__hold *)hh;
  int rc;
  if (h == NULL || h->fam == NULL) return HILOCK_EINVAL;
  if (h->fam->acquire == NULL && h->fam->acquire_spec == NULL)
    return lacks(h, "acquire");
  hilock__dl_expect(h, wait_ms); /* deadlock detection: its wait's hold */
  rc = h->fam->acquire != NULL ? h->fam->acquire(h, wait_ms)
                               : hilock__hold_acquire(h, wait_ms);
  hilock__dl_expect(NULL, 0);
  return rc;
}

int hilock_hold_try_acquire(hilock_hold *hh) {
  hilock__hold *h = (hilock__hold *)hh;
  hilock__acquire_spec s;
  int64_t pttl;
  if (h == NULL || h->fam == NULL) return HILOCK_EINVAL;
  if (h->fam->try_acquire != NULL) return h->fam->try_acquire(h);
  if (h->fam->acquire_spec != NULL) {
    memset(&s, 0, sizeof(s));
    h->fam->acquire_spec(h, &s);
    /* One attempt, counted as a try (a queue family's is an acquire that
     * does not wait: it joins and leaves the line). */
    if (s.begin == NULL && s.done == NULL)
      return hilock__stat_try(h->rt, s.attempt(s.arg, &pttl));
  }
  return hilock_hold_acquire(hh, 0);
}

int hilock__family_release(void *handle) {
  hilock__hold *h = handle;
  if (h->fam->release != NULL) return h->fam->release(h);
  if (h->fam->notowned == NULL || h->close_run == NULL)
    return lacks(h, "release");
  return hilock__hold_release_reply(h, h->close_run, h->close_arg,
                                    h->fam->release_array, h->fam->notowned);
}

int hilock_hold_release(hilock_hold *hh) {
  hilock__hold *h = (hilock__hold *)hh;
  if (h == NULL || h->fam == NULL) return HILOCK_EINVAL;
  return hilock__family_release(h);
}

int hilock_hold_extend(hilock_hold *hh, int64_t ms, int replace) {
  hilock__hold *h = (hilock__hold *)hh;
  if (h == NULL || h->fam == NULL) return HILOCK_EINVAL;
  if (h->fam->extend == NULL) return lacks(h, "extend");
  return h->fam->extend(h, ms, replace);
}

int hilock_hold_set_lock_delay(hilock_hold *hh, int64_t delay_ms) {
  hilock__hold *h = (hilock__hold *)hh;
  if (h == NULL || h->fam == NULL) return HILOCK_EINVAL;
  if (h->fam->set_delay == NULL) return lacks(h, "lock delay");
  return h->fam->set_delay(h, delay_ms);
}

int64_t hilock_hold_lock_delay_ms(const hilock_hold *hh) {
  const hilock__hold *h = (const hilock__hold *)hh;
  return h == NULL ? 0 : h->delay_ms;
}

int hilock_hold_set_heartbeat(hilock_hold *hh, int64_t window_ms) {
  hilock__hold *h = (hilock__hold *)hh;
  if (h == NULL || h->fam == NULL) return HILOCK_EINVAL;
  if (h->fam->set_heartbeat == NULL) return lacks(h, "heartbeat window");
  return h->fam->set_heartbeat(h, window_ms);
}

int64_t hilock_hold_heartbeat_ms(const hilock_hold *hh) {
  const hilock__hold *h = (const hilock__hold *)hh;
  if (h == NULL || h->fam == NULL || h->fam->heartbeat_ms == NULL) return 0;
  return h->fam->heartbeat_ms(h);
}

int hilock_hold_renew(hilock_hold *hh) {
  hilock__hold *h = (hilock__hold *)hh;
  if (h == NULL || h->fam == NULL) return HILOCK_EINVAL;
  if (h->fam->renew == NULL) return lacks(h, "renew");
  return h->fam->renew(h);
}
