/* The watchdog: one thread per client renews every registered hold at a
 * third of its TTL, pipelining all due renewals on its own connection.
 * A hold whose renewal finds it owned by someone else, or that cannot be
 * renewed before its validity runs out, is marked lost and its callback
 * fires. Registration happens before acquire returns; cancellation waits
 * for an in-flight batch, so no renewal outlives a release. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define BATCH_MAX 128
#define RETRY_US 200000 /* after a failed renewal */

#define HOLD_OF(r) \
  ((hilock__hold *)((char *)(r) - offsetof(hilock__hold, ren)))

enum { RENEWED, NOT_OWNED, FAILED };

static void unlink_renewal(hilock__watchdog *w, hilock__renewal *r) {
  if (r->prev) r->prev->next = r->next;
  else w->head = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
  r->registered = 0;
}

static int on_watchdog(const hilock__watchdog *w) {
  return w->running && pthread_equal(pthread_self(), w->thread);
}

/* Renew holds[0..n) on the watchdog connection; results into res. */
static void renew_batch(hilock_client *c, hilock__hold **holds, int n,
                        int *res) {
  hilock__watchdog *w = &c->wd;
  hilock__err e;
  int i, got = 0, moved = 0, evals = 0;
  /* wait_replicas: one WAIT after the batch covers every renewal in it. */
  int wait = 0;
  long long acked = -1;
  char wn[24], wms[24];
  const char *wargv[3] = {"WAIT", wn, wms};
  size_t wlens[3] = {4, hilock__i64(wn, c->opts.wait_replicas),
                     hilock__i64(wms, c->opts.wait_timeout_ms)};

  if (c->opts.wait_replicas > 0)
    for (i = 0; i < n; i++) wait |= holds[i]->renew_script->grant;
  for (i = 0; i < n; i++) res[i] = FAILED;
  if (w->conn == NULL &&
      hilock__connect(c, &e, hilock__now_ms() + 1000, &w->conn) != HILOCK_OK)
    return;
  for (i = 0; i < n; i++) {
    hilock__hold *h = holds[i];
    char ttl[24];
    const char *argv[5] = {"EVALSHA", h->renew_script->sha, "1", h->rkey,
                           h->owner};
    size_t lens[5] = {7, 40, 1, h->rkeylen, h->ownerlen};
    const char *argv6[6];
    size_t lens6[6];
    memcpy(argv6, argv, sizeof(argv));
    memcpy(lens6, lens, sizeof(lens));
    argv6[5] = ttl;
    lens6[5] = hilock__i64(ttl, h->ttl_ms);
    if (redisAppendCommandArgv(w->conn->ctx, 6, argv6, lens6) != REDIS_OK)
      goto broken;
  }
  if (wait &&
      redisAppendCommandArgv(w->conn->ctx, 3, wargv, wlens) != REDIS_OK)
    goto broken;
  for (got = 0; got < n; got++) {
    redisReply *r = NULL;
    if (redisGetReply(w->conn->ctx, (void **)&r) != REDIS_OK || r == NULL)
      goto broken;
    if (r->type == REDIS_REPLY_INTEGER) {
      res[got] = r->integer > 0 ? RENEWED : NOT_OWNED;
    } else if (r->type == REDIS_REPLY_ERROR) {
      int code = hilock__reply_error(&e, r->str, r->len);
      if (code == HILOCK_EWRONGTYPE) res[got] = NOT_OWNED;
      else if (code == HILOCK__NOSCRIPT) res[got] = -1; /* EVAL below */
      moved |= hilock__failover_reply(c, r);
    }
    freeReplyObject(r);
  }
  if (wait) {
    redisReply *r = NULL;
    if (redisGetReply(w->conn->ctx, (void **)&r) != REDIS_OK || r == NULL)
      goto broken_after;
    acked = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
  }
  for (i = 0; i < n; i++) {
    if (res[i] != -1) continue;
    evals++;
    hilock__hold *h = holds[i];
    char ttl[24];
    const char *argv[6] = {"EVAL", h->renew_script->src, "1", h->rkey,
                           h->owner, ttl};
    size_t lens[6] = {4, h->renew_script->len, 1, h->rkeylen, h->ownerlen,
                      hilock__i64(ttl, h->ttl_ms)};
    redisReply *r = redisCommandArgv(w->conn->ctx, 6, argv, lens);
    res[i] = FAILED;
    if (r == NULL) goto broken_after;
    if (r->type == REDIS_REPLY_INTEGER)
      res[i] = r->integer > 0 ? RENEWED : NOT_OWNED;
    freeReplyObject(r);
  }
  if (wait && evals > 0) {
    /* The EVALs came after the pipelined WAIT: confirm them too. */
    redisReply *r = redisCommandArgv(w->conn->ctx, 3, wargv, wlens);
    if (r == NULL) goto broken_after;
    if (r->type != REDIS_REPLY_INTEGER || r->integer < acked)
      acked = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
  }
  if (wait && acked < c->opts.wait_replicas) {
    /* Renewed on the master only: a failover could lose the renewal, so
     * it does not count (the validity is not extended; retried, and lost
     * when the validity runs out). */
    for (i = 0; i < n; i++)
      if (res[i] == RENEWED && holds[i]->renew_script->grant) res[i] = FAILED;
  }
  if (moved) {
    /* The master moved (sentinel URL): reconnect to the new one. */
    hilock__conn_free(w->conn);
    w->conn = NULL;
  }
  return;
broken_after:
  /* The connection broke after the renewals' replies: their WAIT is
   * unconfirmed, so none counts. */
  if (wait) got = 0;
broken:
  for (i = got; i < n; i++) res[i] = FAILED;
  hilock__conn_free(w->conn);
  w->conn = NULL;
}

static void wait_until(hilock__watchdog *w, int64_t until_us) {
  if (until_us == INT64_MAX) {
    pthread_cond_wait(&w->wake, &w->mu);
  } else {
    struct timespec ts;
    ts.tv_sec = (time_t)(until_us / 1000000);
    ts.tv_nsec = (long)(until_us % 1000000) * 1000;
    pthread_cond_timedwait(&w->wake, &w->mu, &ts);
  }
}

/* Mark a hold lost: unlink; it keeps in_batch while its callback runs. */
static void mark_lost(hilock__watchdog *w, hilock__hold *h) {
  unlink_renewal(w, &h->ren);
  h->lost = 1;
}

static void *watchdog_main(void *arg) {
  hilock_client *c = arg;
  hilock__watchdog *w = &c->wd;
  hilock__hold *batch[BATCH_MAX], *lost[BATCH_MAX];
  int res[BATCH_MAX];

  pthread_mutex_lock(&w->mu);
  while (!w->stop) {
    int64_t now = hilock__now_us(), next = INT64_MAX, start;
    int n = 0, nlost = 0, i;
    hilock__renewal *r, *rn;

    for (r = w->head; r != NULL; r = rn) {
      hilock__hold *h = HOLD_OF(r);
      rn = r->next;
      if (!r->renew) {
        /* Past its maximum hold: no renewal; lost when validity ends. */
        if (now >= h->valid_until_us) {
          if (nlost < BATCH_MAX) {
            mark_lost(w, h);
            r->in_batch = 1;
            lost[nlost++] = h;
          }
        } else if (h->valid_until_us < next) {
          next = h->valid_until_us;
        }
      } else if (r->next_due_us <= now && n < BATCH_MAX) {
        r->in_batch = 1;
        batch[n++] = h;
      } else if (r->next_due_us < next) {
        next = r->next_due_us;
      }
    }
    if (n == 0 && nlost == 0) {
      wait_until(w, next);
      continue;
    }
    pthread_mutex_unlock(&w->mu);
    start = hilock__now_us();
    if (n > 0) renew_batch(c, batch, n, res);
    pthread_mutex_lock(&w->mu);
    now = hilock__now_us();
    for (i = 0; i < n; i++) {
      hilock__hold *h = batch[i];
      r = &h->ren;
      r->in_batch = 0;
      if (!r->registered) continue;
      if (res[i] == RENEWED) {
        h->valid_until_us =
            start + h->ttl_ms * 1000 - hilock__hold_drift_us(h->ttl_ms);
        r->next_due_us = now + h->ttl_ms * 1000 / 3;
        if (r->max_until_us && now >= r->max_until_us) r->renew = 0;
      } else if (res[i] == NOT_OWNED || now >= h->valid_until_us) {
        if (nlost < BATCH_MAX) {
          mark_lost(w, h);
          r->in_batch = 1;
          lost[nlost++] = h;
        } else {
          r->next_due_us = now;
        }
      } else {
        int64_t retry = h->ttl_ms * 1000 / 3;
        r->next_due_us = now + (retry < RETRY_US ? retry : RETRY_US);
      }
    }
    pthread_cond_broadcast(&w->idle);
    if (nlost == 0) continue;
    pthread_mutex_unlock(&w->mu);
    /* Callbacks run outside the mutex; in_batch keeps each hold alive (a
     * canceller waits for it) until its callback has returned. */
    for (i = 0; i < nlost; i++)
      if (lost[i]->lost_fn) lost[i]->lost_fn(lost[i]->lost_arg);
    pthread_mutex_lock(&w->mu);
    for (i = 0; i < nlost; i++) lost[i]->ren.in_batch = 0;
    pthread_cond_broadcast(&w->idle);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

int hilock__renewal_register(hilock__hold *h) {
  hilock_client *c = h->client;
  hilock__watchdog *w = &c->wd;
  hilock__renewal *r = &h->ren;
  int64_t now = hilock__now_us();

  pthread_mutex_lock(&w->mu);
  if (!w->running) {
    w->stop = 0;
    if (pthread_create(&w->thread, NULL, watchdog_main, c) != 0) {
      pthread_mutex_unlock(&w->mu);
      return hilock__set_err(&h->err, HILOCK_ENOMEM,
                             "cannot start the renewal thread");
    }
    w->running = 1;
  }
  if (!r->registered) {
    r->prev = NULL;
    r->next = w->head;
    if (w->head) w->head->prev = r;
    w->head = r;
    r->registered = 1;
  }
  r->renew = 1;
  r->next_due_us = now + h->ttl_ms * 1000 / 3;
  r->max_until_us =
      h->max_hold_ms > 0 ? h->since_us + h->max_hold_ms * 1000 : 0;
  pthread_cond_signal(&w->wake);
  pthread_mutex_unlock(&w->mu);
  return HILOCK_OK;
}

void hilock__renewal_cancel(hilock__hold *h) {
  hilock__watchdog *w;
  if (h->client == NULL) return;
  w = &h->client->wd;
  pthread_mutex_lock(&w->mu);
  /* A forked child: a grant of the parent's may still be marked in a batch
   * (its loss callback ran at fork time), and no thread here will clear it. */
  if (h->pid != getpid()) h->ren.in_batch = 0;
  while (h->ren.in_batch && !on_watchdog(w))
    pthread_cond_wait(&w->idle, &w->mu);
  if (h->ren.registered) unlink_renewal(w, &h->ren);
  pthread_mutex_unlock(&w->mu);
}

void hilock__watchdog_stop(hilock_client *c) {
  hilock__watchdog *w = &c->wd;
  int running, self;
  pthread_mutex_lock(&w->mu);
  running = w->running;
  self = on_watchdog(w);
  w->stop = 1;
  pthread_cond_signal(&w->wake);
  pthread_mutex_unlock(&w->mu);
  if (running) {
    if (self) pthread_detach(w->thread);
    else pthread_join(w->thread, NULL);
  }
  w->running = 0;
  hilock__conn_free(w->conn);
  w->conn = NULL;
}

void hilock__watchdog_forget(hilock_client *c) {
  hilock__watchdog *w = &c->wd;
  hilock__renewal *r = w->head;
  while (r != NULL) {
    hilock__renewal *next = r->next;
    r->prev = r->next = NULL;
    r->registered = 0;
    r->in_batch = 0;
    r = next;
  }
  w->head = NULL;
  w->running = 0;
  w->stop = 0;
  /* Not freed: the parent's renewal thread may have been changing this
   * connection's buffers (outside the mutex) at fork time. */
  w->conn = NULL;
}
