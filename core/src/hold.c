/* Holds: the grant state every lock family shares (owner, fence, validity,
 * the granting process, renewal, loss). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static int64_t drift_us(int64_t ttl_ms) { return ttl_ms * 10 + 2000; }

void hilock__hold_init(hilock__hold *h, hilock_client *c, const char *rkey,
                       size_t rkeylen, const hilock__script *renew_script,
                       int64_t ttl_ms) {
  memset(h, 0, sizeof(*h));
  hilock__client_ref(c);
  h->client = c;
  h->rkey = rkey;
  h->rkeylen = rkeylen;
  h->renew_script = renew_script;
  h->ttl_ms = ttl_ms;
}

void hilock__hold_destroy(hilock__hold *h) {
  hilock__renewal_cancel(h);
  hilock__client_unref(h->client);
  h->client = NULL;
}

int hilock__hold_check(hilock__hold *h, const char *verb) {
  if (h->held && h->pid != getpid())
    return hilock__set_err(&h->err, HILOCK_EFORKED,
                           "%s: the lock was acquired by process %d; a forked "
                           "child holds nothing",
                           verb, (int)h->pid);
  if (!h->held)
    return hilock__set_err(&h->err, HILOCK_ENOTOWNED,
                           "%s: this handle does not hold the lock", verb);
  return HILOCK_OK;
}

int hilock__hold_granted(hilock__hold *h, int64_t start_us, uint64_t fence) {
  pthread_mutex_lock(&h->client->wd.mu);
  if (!h->held || h->lost) h->since_us = start_us;
  h->held = 1;
  h->lost = 0;
  h->pid = getpid();
  h->fence = fence;
  h->valid_until_us =
      h->ttl_ms > 0 ? start_us + h->ttl_ms * 1000 - drift_us(h->ttl_ms) : 0;
  pthread_mutex_unlock(&h->client->wd.mu);
  if (h->auto_renew && h->ttl_ms > 0) return hilock__renewal_register(h);
  return HILOCK_OK;
}

void hilock__hold_drop(hilock__hold *h) {
  hilock__renewal_cancel(h);
  h->held = 0;
  h->owner[0] = '\0';
  h->ownerlen = 0;
}

void hilock__hold_lost(hilock__hold *h) {
  hilock__renewal_cancel(h);
  pthread_mutex_lock(&h->client->wd.mu);
  h->lost = 1;
  pthread_mutex_unlock(&h->client->wd.mu);
}

void hilock__hold_extended(hilock__hold *h, int64_t start_us, int64_t ttl_ms) {
  pthread_mutex_lock(&h->client->wd.mu);
  h->valid_until_us = start_us + ttl_ms * 1000 - drift_us(ttl_ms);
  pthread_mutex_unlock(&h->client->wd.mu);
}

int64_t hilock__hold_validity_ms(const hilock__hold *h) {
  int64_t until, left;
  int lost;
  if (!h->held) return 0;
  if (h->ttl_ms == 0) return h->lost ? 0 : INT64_MAX;
  pthread_mutex_lock(&h->client->wd.mu);
  until = h->valid_until_us;
  lost = h->lost;
  pthread_mutex_unlock(&h->client->wd.mu);
  if (lost) return 0;
  left = (until - hilock__now_us()) / 1000;
  return left > 0 ? left : 0;
}

int hilock__hold_is_lost(const hilock__hold *h) {
  int lost;
  pthread_mutex_lock(&h->client->wd.mu);
  lost = h->lost;
  pthread_mutex_unlock(&h->client->wd.mu);
  return lost;
}

int64_t hilock__hold_drift_us(int64_t ttl_ms) { return drift_us(ttl_ms); }
