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
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "holds.h"
#include "route.h"
#include "scripts.h"

#define BATCH_MAX 2048
#define RETRY_US 200000 /* after a failed renewal */
#define MIN_WAIT_US 20000 /* shortest wait for a renewal's reply */
#define CONNECT_MAX_US 1000000 /* longest wait to reconnect */
#define IDLE_TICK_US 1000000   /* with no holds, the thread looks this often */
#define IDLE_TICKS 60          /* for at most this many looks in a row */
#define LATER_US 200000        /* between tries of the requests left to it */

#define HOLD_OF(r) \
  ((hilock__hold *)((char *)(r) - offsetof(hilock__hold, ren)))

enum {
  RENEWED = HILOCK__RENEWED,
  NOT_OWNED = HILOCK__NOT_OWNED,
  FAILED = HILOCK__RENEW_FAILED
};

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

/* One renewal's outcome from its call's result (an integer, or an
 * error: a damaged key means this grant is gone). */
static int renew_result(const redisReply *r) {
  hilock__err e;
  if (r->type == REDIS_REPLY_INTEGER) return r->integer > 0 ? RENEWED : NOT_OWNED;
  if (r->type == REDIS_REPLY_ERROR &&
      hilock__reply_error(&e, r->str, r->len) == HILOCK_EWRONGTYPE)
    return NOT_OWNED;
  return FAILED;
}

/* ## Batches: one script call renews many holds ---------------------------
 * renew_batch.lua renews each hold as its own renew script does; a hold's
 * kind names that script. A call carries at most CHUNK holds, so one call
 * stays short on the server. */
#define CHUNK 1024

static const hilock__script *const kinds[] = {
    &hilock__script_lock_extend,    &hilock__script_multilock_extend,
    &hilock__script_rlock_renew,    &hilock__script_rwlock_read_renew,
    &hilock__script_semaphore_renew, &hilock__script_seqlock_renew,
    &hilock__script_redisson_read_renew, &hilock__script_multilock_extend_delay,
    &hilock__script_party_renew};

/* The kind of h's renew script in renew_batch.lua (1..), 0 if none. */
static int kind_of(const hilock__hold *h) {
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
    if (h->renew_script == kinds[i]) return (int)i + 1;
  return 0;
}

/* The request renewing holds[0..n) in one call; q->argv, q->lens and *nums
 * are malloc'd (free with free_call). Returns 0, or -1 out of memory. */
static int batch_req(hilock__hold *const *holds, int n, hilock__req *q,
                     char **nums) {
  static const char *const kind_text[] = {"0", "1", "2", "3", "4",
                                          "5", "6", "7", "8", "9"};
  const hilock__script *s = &hilock__script_renew_batch;
  const char **argv;
  size_t *lens;
  int nkeys = 0, argc, i = 3;
  char *num;
  for (int h = 0; h < n; h++) nkeys += 1 + holds[h]->nxkeys;
  argc = 3 + nkeys + 4 * n;
  argv = malloc((size_t)argc * sizeof(*argv));
  lens = malloc((size_t)argc * sizeof(*lens));
  *nums = malloc((size_t)(2 * n + 1) * 24);
  if (argv == NULL || lens == NULL || *nums == NULL) {
    free(argv);
    free(lens);
    free(*nums);
    *nums = NULL;
    return -1;
  }
  /* Keys and args in place behind the 3-word EVALSHA head, which
   * hilock__req_script then writes in front of them (nums[0]: the key
   * count's text). */
  num = *nums + 24;
  for (int h = 0; h < n; h++) {
    argv[i] = holds[h]->rkey;
    lens[i++] = holds[h]->rkeylen;
    for (int k = 0; k < holds[h]->nxkeys; k++, i++) {
      argv[i] = holds[h]->xkeys[k];
      lens[i] = holds[h]->xkeylens[k];
    }
  }
  for (int h = 0; h < n; h++) {
    argv[i] = kind_text[kind_of(holds[h])];
    lens[i++] = 1;
    argv[i] = num;
    lens[i++] = hilock__i64(num, 1 + holds[h]->nxkeys);
    num += 24;
    argv[i] = holds[h]->owner;
    lens[i++] = holds[h]->ownerlen;
    argv[i] = num;
    lens[i++] = hilock__i64(num, holds[h]->ttl_ms);
    num += 24;
  }
  hilock__req_script(q, s, nkeys, argv + 3, lens + 3, 4 * n,
                     argv + 3 + nkeys, lens + 3 + nkeys, *nums, argv, lens);
  return 0;
}

/* A cluster's calls keep to one hash slot each (every script must): holds
 * by slot, the order of their calls. */
static int slot_of(const hilock__hold *h) {
  return hilock__key_slot(h->rkey, h->rkeylen);
}

typedef struct slot_ix {
  int slot, ix;
} slot_ix;

static int by_slot(const void *a, const void *b) {
  const slot_ix *x = a, *y = b;
  if (x->slot != y->slot) return x->slot < y->slot ? -1 : 1;
  return x->ix < y->ix ? -1 : x->ix > y->ix;
}

/* Send the calls renewing the runs of holds[order[run[j]..run[j + 1])],
 * j < ncalls, through the dispatcher (one write per connection, WAIT behind
 * them if wait), results into res[order[...]]. With split, a call of
 * several holds answered TRYAGAIN (a slot half migrated) is sent again as
 * one call per hold. */
static void renew_calls(hilock_client *c, hilock__hold **holds,
                        const int *order, const int *run, int ncalls,
                        int *res, int64_t until_us, int wait, int split) {
  hilock__watchdog *w = &c->rt.wd;
  hilock__req *q = calloc((size_t)ncalls, sizeof(*q));
  char **nums = calloc((size_t)ncalls, sizeof(*nums));
  hilock__send s = {0};
  hilock__err e;
  int64_t now_us = hilock__now_us(), wait_us = until_us - now_us;
  int nq = 0, *at = calloc((size_t)ncalls, sizeof(*at)), *redo = NULL,
      *each = NULL, nredo = 0;
  if (q == NULL || nums == NULL || at == NULL) goto out;
  for (int j = 0; j < ncalls; j++) {
    int from = run[j], cnt = run[j + 1] - run[j];
    hilock__hold *gh[CHUNK];
    for (int i = 0; i < cnt; i++) gh[i] = holds[order[from + i]];
    /* Out of memory: that call's holds fail this round (retried soon). */
    if (batch_req(gh, cnt, &q[nq], &nums[nq]) == 0) at[nq++] = j;
  }
  if (wait_us < MIN_WAIT_US) wait_us = MIN_WAIT_US;
  /* The wait for the server is bounded by the earliest end of validity in
   * the batch; reconnecting (a broken connection, a master that moved) by
   * that too, and by CONNECT_MAX_US. One connection attempt per cluster
   * node: holds on the others must not wait. */
  s.flags = (wait ? HILOCK__SEND_WAIT : 0) | HILOCK__SEND_ONCE |
            HILOCK__SEND_TRYAGAIN;
  s.reply_by_ms = (now_us + wait_us) / 1000;
  s.deadline_ms =
      (now_us + (wait_us < CONNECT_MAX_US ? wait_us : CONNECT_MAX_US)) / 1000;
  if (!hilock__client_is_cluster(c)) s.own = &w->conn;
  hilock__clear_err(&e);
  (void)hilock__dispatch(c, &e, &s, q, nq);
  if (s.broke_status != HILOCK_OK && s.own != NULL) {
    hilock__stat(&c->rt, HILOCK__ST_RECONNECTS);
    hilock__log(&c->rt, HILOCK_LOG_INFO, NULL, 0,
                "renewal: connection broken; reconnecting");
  }
  for (int x = 0; x < nq; x++) {
    int j = at[x], from = run[j], cnt = run[j + 1] - run[j];
    redisReply *r = q[x].reply;
    if (q[x].rc == HILOCK_OK && r->type == REDIS_REPLY_ARRAY &&
        r->elements == (size_t)cnt) {
      for (int i = 0; i < cnt; i++) {
        int h = order[from + i];
        res[h] = renew_result(r->element[i]);
        /* Renewals too few replicas acknowledged do not count: a failover
         * could lose them (retried, and lost when the validity runs out). */
        if (res[h] == RENEWED && wait && q[x].acked < c->rt.opts.wait_replicas &&
            holds[h]->renew_script->grant)
          res[h] = FAILED;
      }
    } else if (q[x].rc == HILOCK_EWRONGTYPE && cnt == 1) {
      res[order[from]] = NOT_OWNED;
    } else if ((q[x].rc == HILOCK__TRYAGAIN || q[x].rc == HILOCK_EWRONGTYPE) &&
               cnt > 1 && split) {
      /* A slot half migrated, or one damaged key among the call's: each
       * hold on its own. */
      if (redo == NULL) redo = malloc((size_t)run[ncalls] * sizeof(*redo));
      for (int i = 0; redo != NULL && i < cnt; i++)
        redo[nredo++] = order[from + i];
    }
    if (r != NULL) freeReplyObject(r);
    free((void *)q[x].argv);
    free((void *)q[x].lens);
    free(nums[x]);
  }
  if (nredo > 0 && (each = malloc((size_t)(nredo + 1) * sizeof(int))) != NULL) {
    for (int i = 0; i <= nredo; i++) each[i] = i;
    renew_calls(c, holds, redo, each, nredo, res, until_us, wait, 0);
  }
out:
  free(each);
  free(redo);
  free(q);
  free(nums);
  free(at);
}

/* Renew holds[0..n) (results into res, FAILED unless renewed or found not
 * owned): renew_batch.lua calls of up to CHUNK holds (on a cluster, of one
 * hash slot each), pipelined through the dispatcher. The wait for the
 * server is bounded by until_us, the earliest end of validity in the batch
 * (at least MIN_WAIT_US from now): a renewal that cannot answer before a
 * hold lapses is of no use, and the loss must be reported on time even
 * when the server hangs. */
static void renew_pipeline(hilock_client *c, hilock__hold **holds, int n,
                           int *res, int64_t until_us) {
  slot_ix g[BATCH_MAX];
  int order[BATCH_MAX], run[BATCH_MAX + 1], ncalls = 0, wait = 0;
  int cluster = hilock__client_is_cluster(c);
  /* wait_replicas: one WAIT after the calls on a connection covers every
   * renewal in them. */
  if (c->rt.opts.wait_replicas > 0)
    for (int i = 0; i < n; i++) wait |= holds[i]->renew_script->grant;
  for (int i = 0; i < n; i++) {
    res[i] = FAILED;
    g[i].slot = cluster ? slot_of(holds[i]) : 0;
    g[i].ix = i;
  }
  if (cluster) qsort(g, (size_t)n, sizeof(g[0]), by_slot);
  for (int i = 0; i < n; i++) {
    order[i] = g[i].ix;
    if (i == 0 || g[i].slot != g[i - 1].slot || i - run[ncalls - 1] == CHUNK)
      run[ncalls++] = i;
  }
  run[ncalls] = n;
  renew_calls(c, holds, order, run, ncalls, res, until_us, wait, 1);
}

/* Holds with their own renew_fn renew themselves; the rest share one
 * pipeline on the watchdog connection. */
static void renew_batch(hilock_client *c, hilock__hold **all, int nall,
                        int *resall, int64_t until_us) {
  hilock__hold *holds[BATCH_MAX];
  int map[BATCH_MAX], res[BATCH_MAX], n = 0, i;
  for (i = 0; i < nall; i++) {
    if (all[i]->renew_fn != NULL) {
      resall[i] = all[i]->renew_fn(all[i], all[i]->renew_arg);
    } else {
      map[n] = i;
      holds[n++] = all[i];
    }
  }
  if (n == 0) return;
  if (c == NULL) { /* a bare runtime's holds all renew themselves */
    for (i = 0; i < n; i++) resall[map[i]] = FAILED;
    return;
  }
  renew_pipeline(c, holds, n, res, until_us);
  for (i = 0; i < n; i++) resall[map[i]] = res[i];
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
  if (!h->lost) hilock__stat(h->rt, HILOCK__ST_LOST);
  h->lost = 1;
}

/* Count a batch's outcomes and log its failures (w->mu not held; every
 * hold of the batch is kept alive by its in_batch). */
static void batch_counted(hilock__runtime *rt, hilock__hold **batch,
                          const int *res, int n) {
  for (int i = 0; i < n; i++) {
    if (res[i] == RENEWED) {
      hilock__stat(rt, HILOCK__ST_RENEWALS);
    } else if (res[i] == FAILED) {
      hilock__stat(rt, HILOCK__ST_RENEWAL_FAILURES);
      hilock__log(rt, HILOCK_LOG_WARNING, batch[i]->rkey, batch[i]->rkeylen,
                  "renewal failed (retried while the lock is valid)");
    }
  }
}

static void *watchdog_main(void *arg) {
  hilock__runtime *rt = arg;
  hilock__watchdog *w = &rt->wd;
  hilock__hold *batch[BATCH_MAX], *lost[BATCH_MAX];
  int res[BATCH_MAX];

  pthread_mutex_lock(&w->mu);
  while (!w->stop) {
    int64_t now = hilock__now_us(), next = INT64_MAX, start;
    int64_t until = INT64_MAX; /* earliest validity end in the batch */
    int n = 0, nlost = 0, i, any_due = 0;
    hilock__renewal *r, *rn;

    if (w->later != NULL && w->later_us <= now && rt->client != NULL) {
      /* Requests left to this thread (a waiter's leave): one try each. */
      hilock__later *list = w->later, *keep, *x;
      w->later = NULL;
      pthread_mutex_unlock(&w->mu);
      keep = hilock__later_run(rt->client, list);
      pthread_mutex_lock(&w->mu);
      for (x = keep; x != NULL && x->next != NULL; x = x->next) {
      }
      if (x != NULL) {
        x->next = w->later;
        w->later = keep;
      }
      w->later_us = hilock__now_us() + LATER_US;
      continue;
    }
    if (w->later != NULL) next = w->later_us;

    /* Holds due within a sixth of their TTL join a batch only when some
     * hold is due now: renewing them a little early lets one call carry
     * the holds that fall due together, and a batch that runs long does
     * not leave a trickle of small batches behind it. */
    for (r = w->head; r != NULL && !any_due; r = r->next)
      any_due = r->renew && r->next_due_us <= now;
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
      } else if (any_due && r->next_due_us <= now + h->ttl_ms * 1000 / 6 &&
                 n < BATCH_MAX) {
        r->in_batch = 1;
        batch[n++] = h;
        if (h->valid_until_us < until) until = h->valid_until_us;
      } else if (r->next_due_us < next) {
        next = r->next_due_us;
      }
    }
    if (n == 0 && nlost == 0) {
      /* No hold at all: look again within a second anyway, for a while
       * (IDLE_TICKS). A hold registered meanwhile whose first renewal is
       * due later needs no wake-up of this thread then: no signal, and no
       * thread to schedule, on the way of every acquire that follows a
       * release. */
      if (w->head != NULL) {
        w->idle_ticks = 0;
      } else if (next == INT64_MAX && w->idle_ticks < IDLE_TICKS) {
        w->idle_ticks++;
        next = now + IDLE_TICK_US;
      }
      w->wake_at_us = next;
      wait_until(w, next);
      w->wake_at_us = 0;
      continue;
    }
    pthread_mutex_unlock(&w->mu);
    start = hilock__now_us();
    if (n > 0) renew_batch(rt->client, batch, n, res, until);
    batch_counted(rt, batch, res, n);
    pthread_mutex_lock(&w->mu);
    now = hilock__now_us();
    for (i = 0; i < n; i++) {
      hilock__hold *h = batch[i];
      r = &h->ren;
      r->in_batch = 0;
      if (!r->registered) continue;
      if (res[i] == RENEWED) {
        int64_t until =
            start + h->ttl_ms * 1000 - hilock__hold_drift_us(h->ttl_ms);
        /* An extension recorded since the renewal started may have run
         * after it on the server: keep the smaller validity. */
        if (h->ext_done_us <= start || until < h->valid_until_us)
          h->valid_until_us = until;
        h->ren_done_us = now;
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
    for (i = 0; i < nlost; i++) {
      hilock__log(rt, HILOCK_LOG_ERROR, lost[i]->rkey, lost[i]->rkeylen,
                  "lock lost: the renewal found it gone or taken, or could "
                  "not renew it before its validity ended");
      hilock__hold_tell_lost(lost[i]);
    }
    pthread_mutex_lock(&w->mu);
    for (i = 0; i < nlost; i++) lost[i]->ren.in_batch = 0;
    pthread_cond_broadcast(&w->idle);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

int hilock__renewal_register(hilock__hold *h) {
  hilock__runtime *rt = h->rt;
  hilock__watchdog *w = &rt->wd;
  hilock__renewal *r = &h->ren;
  int64_t now = hilock__now_us();

  pthread_mutex_lock(&w->mu);
  if (!hilock__runtime_usable(rt)) {
    /* Closed: its renewal thread is gone for good, and so is the hold. */
    h->lost = h->close_lost = 1;
    pthread_mutex_unlock(&w->mu);
    return hilock__set_err(&h->err, HILOCK_ECLOSED,
                           "client is closed: the hold is not renewed");
  }
  if (!w->running) {
    w->stop = 0;
    if (pthread_create(&w->thread, NULL, watchdog_main, rt) != 0) {
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
  /* Wake the thread only if it sleeps past this hold's first renewal: a
   * hold released before then costs it nothing. */
  if (r->next_due_us < w->wake_at_us) pthread_cond_signal(&w->wake);
  pthread_mutex_unlock(&w->mu);
  return HILOCK_OK;
}

void hilock__renewal_cancel(hilock__hold *h) {
  hilock__watchdog *w;
  if (h->rt == NULL) return;
  w = &h->rt->wd;
  pthread_mutex_lock(&w->mu);
  /* A forked child: a grant of the parent's may still be marked in a batch
   * (its loss callback ran at fork time), and no thread here will clear it. */
  if (h->pid != hilock__pid()) h->ren.in_batch = h->closing = 0;
  /* Wait out a renewal batch, and a closing client releasing this grant. */
  while ((h->ren.in_batch && !on_watchdog(w)) ||
         (h->closing && !hilock__runtime_usable(h->rt) &&
          !hilock__closing_here(h->client)))
    pthread_cond_wait(&w->idle, &w->mu);
  if (h->ren.registered) unlink_renewal(w, &h->ren);
  pthread_mutex_unlock(&w->mu);
}

void hilock__watchdog_stop(hilock__runtime *rt) {
  hilock__watchdog *w = &rt->wd;
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

static void free_later(hilock__later *x) {
  while (x != NULL) {
    hilock__later *next = x->next;
    free(x);
    x = next;
  }
}

void hilock__watchdog_close(hilock__runtime *rt) {
  hilock__watchdog *w = &rt->wd;
  hilock__watchdog_stop(rt);
  pthread_mutex_lock(&w->mu);
  while (w->head != NULL) unlink_renewal(w, w->head);
  free_later(w->later);
  w->later = NULL;
  pthread_mutex_unlock(&w->mu);
}

void hilock__watchdog_later(hilock__runtime *rt, hilock__later *x) {
  hilock__watchdog *w = &rt->wd;
  int64_t due = hilock__now_us() + LATER_US;
  pthread_mutex_lock(&w->mu);
  if (!hilock__runtime_usable(rt)) goto drop;
  if (!w->running) {
    w->stop = 0;
    if (pthread_create(&w->thread, NULL, watchdog_main, rt) != 0) goto drop;
    w->running = 1;
  }
  if (w->later == NULL || due < w->later_us) w->later_us = due;
  x->next = w->later;
  w->later = x;
  /* A thread asleep past the first try is woken (0: it is awake). */
  if (w->wake_at_us != 0 && w->later_us < w->wake_at_us)
    pthread_cond_signal(&w->wake);
  pthread_mutex_unlock(&w->mu);
  return;
drop:
  pthread_mutex_unlock(&w->mu);
  free(x);
}

void hilock__watchdog_forget(hilock__runtime *rt) {
  hilock__watchdog *w = &rt->wd;
  hilock__renewal *r = w->head;
  while (r != NULL) {
    hilock__renewal *next = r->next;
    r->prev = r->next = NULL;
    r->registered = 0;
    r->in_batch = 0;
    r = next;
  }
  w->head = NULL;
  /* The child's copy of the parent's requests: the parent sends them. */
  free_later(w->later);
  w->later = NULL;
  hilock__hold_forget_live(rt);
  w->running = 0;
  w->wake_at_us = 0;
  w->idle_ticks = 0;
  w->stop = 0;
  /* Not freed: the parent's renewal thread may have been changing this
   * connection's buffers (outside the mutex) at fork time. */
  w->conn = NULL;
}
