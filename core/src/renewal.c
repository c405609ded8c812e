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

#include "internal.h"
#include "scripts.h"

#define BATCH_MAX 2048
#define RETRY_US 200000 /* after a failed renewal */
#define MIN_WAIT_US 20000 /* shortest wait for a renewal's reply */
#define CONNECT_MAX_US 1000000 /* longest wait to reconnect */

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

#define CMD_STACK 8

/* The command running h's renew script: EVALSHA (or EVAL with the source),
 * KEYS rkey and the hold's extra keys, ARGV owner and ttl. The arrays are
 * sargv/slens (CMD_STACK long) unless the hold has more keys, then malloc'd
 * (the caller frees them if *argv != sargv). Returns argc, or -1. */
static int renew_cmd(const hilock__hold *h, int eval, char nk[24],
                     char ttl[24], const char **sargv, size_t *slens,
                     const char ***argv, size_t **lens) {
  int argc = 6 + h->nxkeys, i = 0;
  const char **a = sargv;
  size_t *l = slens;
  if (argc > CMD_STACK) {
    a = malloc((size_t)argc * sizeof(*a));
    l = malloc((size_t)argc * sizeof(*l));
    if (a == NULL || l == NULL) {
      free(a);
      free(l);
      return -1;
    }
  }
  a[i] = eval ? "EVAL" : "EVALSHA";
  l[i++] = eval ? 4 : 7;
  a[i] = eval ? h->renew_script->src : h->renew_script->sha;
  l[i++] = eval ? h->renew_script->len : 40;
  a[i] = nk;
  l[i++] = hilock__i64(nk, 1 + h->nxkeys);
  a[i] = h->rkey;
  l[i++] = h->rkeylen;
  for (int k = 0; k < h->nxkeys; k++, i++) {
    a[i] = h->xkeys[k];
    l[i] = h->xkeylens[k];
  }
  a[i] = h->owner;
  l[i++] = h->ownerlen;
  a[i] = ttl;
  l[i++] = hilock__i64(ttl, h->ttl_ms);
  *argv = a;
  *lens = l;
  return argc;
}

/* Free what renew_cmd allocated (nothing if it used the stack arrays). */
static void free_cmd(const char **argv, size_t *lens, const char **sargv) {
  if (argv != sargv) {
    free(argv);
    free(lens);
  }
}

/* Bound the wait for replies on ctx by until_us (at least MIN_WAIT_US from
 * now, at most the command timeout): a renewal that cannot answer before a
 * hold lapses is of no use. */
static void bound_wait(const hilock_client *c, hilock__net *ctx,
                       int64_t until_us) {
  int64_t wait_us = until_us - hilock__now_us();
  if (wait_us < MIN_WAIT_US) wait_us = MIN_WAIT_US;
  if (c->opts.command_timeout_ms > 0 &&
      wait_us > c->opts.command_timeout_ms * 1000)
    wait_us = c->opts.command_timeout_ms * 1000;
  hilock__net_set_timeout(ctx, (wait_us + 999) / 1000);
}

/* Give a pooled connection its usual command timeout back. */
static void restore_wait(const hilock_client *c, hilock__net *ctx) {
  hilock__net_set_timeout(ctx, c->opts.command_timeout_ms);
}

/* Renewals too few replicas acknowledged do not count: a failover could
 * lose them (the validity is not extended; retried, and lost when the
 * validity runs out). ix: the holds' indexes (NULL: 0..n-1). */
static void unconfirmed(hilock__hold **holds, const int *ix, int n,
                        int *res) {
  for (int i = 0; i < n; i++) {
    int x = ix != NULL ? ix[i] : i;
    if (res[x] == RENEWED && holds[x]->renew_script->grant) res[x] = FAILED;
  }
}

/* One hold renewed on node (with ASKING first for an ASK redirection),
 * with the EVAL fallback on NOSCRIPT. Bounded by one connection attempt and
 * the command timeout: the watchdog never spends a command's reconnect
 * budget on one node while holds on the others wait. */
static int renew_on(hilock_client *c, hilock__node *node, hilock__hold *h,
                    int asking, hilock__err *e, int64_t until_us, int wait) {
  hilock__conn *k;
  char nk[24], ttl[24];
  const char *sargv[CMD_STACK], **argv;
  size_t slens[CMD_STACK], *lens;
  int fresh, res = FAILED;
  if (hilock__cluster_node_conn(c, e, node, &k, &fresh) != HILOCK_OK)
    return FAILED;
  bound_wait(c, k->ctx, until_us);
  for (int attempt = 0; attempt < 2; attempt++) {
    redisReply *r = NULL;
    int argc = renew_cmd(h, attempt, nk, ttl, sargv, slens, &argv, &lens);
    if (argc < 0) break;
    long long acked = -1;
    int spoilt = 0;
    r = hilock__conn_send(c, k, asking, argc, argv, lens,
                          wait ? &acked : NULL, &spoilt);
    free_cmd(argv, lens, sargv);
    if (r == NULL) goto broken;
    if (spoilt) {
      freeReplyObject(r);
      goto broken;
    }
    if (wait && r->type == REDIS_REPLY_INTEGER && r->integer > 0 &&
        acked < c->opts.wait_replicas && h->renew_script->grant) {
      freeReplyObject(r); /* renewed on the master only: no count */
      break;
    }
    if (r->type == REDIS_REPLY_INTEGER) {
      res = r->integer > 0 ? RENEWED : NOT_OWNED;
    } else if (r->type == REDIS_REPLY_ERROR) {
      int code = hilock__reply_error(e, r->str, r->len);
      if (code == HILOCK_EWRONGTYPE) res = NOT_OWNED;
      if (code == HILOCK__NOSCRIPT && attempt == 0) { /* EVAL next */
        freeReplyObject(r);
        continue;
      }
      if (code != HILOCK_EWRONGTYPE)
        (void)hilock__cluster_redirected(c, node, r->str, r->len, NULL);
    }
    freeReplyObject(r);
    break;
  }
  restore_wait(c, k->ctx);
  hilock__pool_put(c, k);
  return res;
broken:
  hilock__conn_error(c, e, k, "EVALSHA", errno);
  hilock__conn_free(k);
  return FAILED;
}

/* Batches (below): one renew_batch.lua call renews many holds. */
#define CHUNK 1024
static int batch_cmd(hilock__hold *const *holds, int n, int eval,
                     const char ***argv, size_t **lens, char **nums);
static void free_batch(const char **argv, size_t *lens, char *nums);
static int batch_result(const redisReply *r, hilock__err *e);

/* A cluster: holds grouped by their slot's master, and on each master by
 * hash slot: one renew_batch.lua call per slot (every script must stay in
 * one slot), pipelined on a pooled connection to the master. The holds of
 * a call answered NOSCRIPT, MOVED or ASK are renewed on their own on the
 * right node; those whose master cannot be reached fail this round (the map
 * is read again) and are retried shortly, within their validity. */
static int slot_of(const hilock__hold *h) {
  return hilock__key_slot(h->rkey, h->rkeylen);
}

static int by_slot(const void *a, const void *b, void *holds) {
  int sa = slot_of(((hilock__hold **)holds)[*(const int *)a]);
  int sb = slot_of(((hilock__hold **)holds)[*(const int *)b]);
  return sa < sb ? -1 : sa > sb;
}

static void renew_batch_cluster(hilock_client *c, hilock__hold **holds, int n,
                                int *res, int64_t until_us, int wait) {
  hilock__node *owner[BATCH_MAX], *redo[BATCH_MAX];
  int done[BATCH_MAX], group[BATCH_MAX], asking[BATCH_MAX];
  int run[BATCH_MAX + 1]; /* a run: the group's holds of one slot */
  hilock__hold *sub[CHUNK];
  hilock__err e;
  int i, j, refresh = 0;
  hilock__node *failed = NULL;

  hilock__clear_err(&e);
  for (i = 0; i < n; i++) {
    res[i] = FAILED;
    done[i] = 0;
    redo[i] = NULL;
    asking[i] = 0;
    owner[i] = hilock__cluster_owner(c, slot_of(holds[i]));
    if (owner[i] == NULL) refresh = 1;
  }
  for (i = 0; i < n; i++) {
    hilock__conn *k;
    int ng = 0, nrun = 0, got, fresh, ok = 1;
    if (done[i] || owner[i] == NULL) continue;
    for (j = i; j < n; j++)
      if (!done[j] && owner[j] == owner[i]) {
        done[j] = 1;
        group[ng++] = j;
      }
    qsort_r(group, (size_t)ng, sizeof(group[0]), by_slot, holds);
    for (j = 0; j < ng; j++) /* runs of one slot, at most CHUNK long */
      if (j == 0 || slot_of(holds[group[j]]) != slot_of(holds[group[j - 1]]) ||
          j - run[nrun - 1] == CHUNK)
        run[nrun++] = j;
    run[nrun] = ng;
    if (hilock__cluster_node_conn(c, &e, owner[i], &k, &fresh) != HILOCK_OK) {
      refresh = 1;
      failed = owner[i];
      continue;
    }
    bound_wait(c, k->ctx, until_us);
    for (j = 0; j < nrun && ok; j++) {
      const char **argv;
      size_t *lens;
      char *nums;
      int cnt = run[j + 1] - run[j], argc;
      for (int x = 0; x < cnt; x++) sub[x] = holds[group[run[j] + x]];
      argc = batch_cmd(sub, cnt, 0, &argv, &lens, &nums);
      if (argc < 0) {
        static const char *ping[1] = {"PING"}; /* keeps replies paired */
        static const size_t pinglen[1] = {4};
        ok = hilock__net_append(k->ctx, 1, ping, pinglen) == 0;
      } else {
        ok = hilock__net_append(k->ctx, argc, argv, lens) == 0;
        free_batch(argv, lens, nums);
      }
    }
    /* wait_replicas: one WAIT behind the node's renewals covers them all. */
    if (ok && wait && !hilock__wait_append(c, k->ctx)) ok = 0;
    for (got = 0; ok && got < nrun; got++) {
      redisReply *r = NULL;
      int from = run[got], cnt = run[got + 1] - run[got];
      if (hilock__net_get_reply(k->ctx, (void **)&r) != 0 || r == NULL) break;
      if (r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)cnt) {
        for (int x = 0; x < cnt; x++)
          res[group[from + x]] = batch_result(r->element[x], &e);
      } else if (r->type == REDIS_REPLY_ERROR) {
        hilock__node *to = NULL, *dest = NULL;
        int code = hilock__reply_error(&e, r->str, r->len), ask = 0;
        if (code == HILOCK__NOSCRIPT) {
          dest = owner[i];
        } else if (hilock__cluster_redirected(c, owner[i], r->str, r->len,
                                              &to)) {
          /* MOVED: the map now names the new owner; ASK: one-shot. */
          dest = to != NULL ? to
                            : hilock__cluster_owner(
                                  c, slot_of(holds[group[from]]));
          ask = to != NULL;
          if (dest == owner[i] && !ask) dest = NULL;
        }
        for (int x = 0; x < cnt; x++) {
          redo[group[from + x]] = dest;
          asking[group[from + x]] = ask;
        }
      }
      freeReplyObject(r);
    }
    if (ok && got == nrun && wait) {
      long long acked;
      if (hilock__wait_read(k->ctx, &acked) != 0) got = -1; /* acked -1 */
      if (acked < c->opts.wait_replicas) unconfirmed(holds, group, ng, res);
    }
    if (ok && got == nrun) {
      restore_wait(c, k->ctx);
      hilock__pool_put(c, k);
    } else {
      hilock__conn_free(k); /* the node broke the connection */
      refresh = 1;
      failed = owner[i];
    }
  }
  for (i = 0; i < n; i++) {
    if (redo[i] == NULL) continue;
    res[i] = renew_on(c, redo[i], holds[i], asking[i], &e, until_us, wait);
  }
  if (refresh) hilock__cluster_refresh(c, &e, failed);
}

/* Renew holds[0..n) on the watchdog connection; results into res. The
 * wait for the server is bounded by until_us, the earliest end of validity
 * in the batch (at least MIN_WAIT_US from now): a renewal that cannot
 * answer before a hold lapses is of no use, and the loss must be reported
 * on time even when the server hangs. On one server every due hold goes in
 * renew_batch.lua calls of up to CHUNK holds, pipelined. */
static int renew_calls(hilock_client *c, hilock__net *ctx,
                       hilock__hold **holds, int n, int *res, int wait,
                       int *moved);

static void renew_pipeline(hilock_client *c, hilock__hold **holds, int n,
                           int *res, int64_t until_us) {
  hilock__watchdog *w = &c->wd;
  hilock__err e;
  int i, moved = 0;
  int64_t now_us = hilock__now_us(), wait_us = until_us - now_us;
  /* wait_replicas: one WAIT after the batch covers every renewal in it. */
  int wait = 0;

  if (c->opts.wait_replicas > 0)
    for (i = 0; i < n; i++) wait |= holds[i]->renew_script->grant;
  if (hilock__client_is_cluster(c)) {
    renew_batch_cluster(c, holds, n, res, until_us, wait);
    return;
  }
  if (wait_us < MIN_WAIT_US) wait_us = MIN_WAIT_US;
  if (wait_us > CONNECT_MAX_US) wait_us = CONNECT_MAX_US;
  for (i = 0; i < n; i++) res[i] = FAILED;
  if (w->conn == NULL &&
      hilock__connect(c, &e, (now_us + wait_us) / 1000, &w->conn) !=
          HILOCK_OK)
    return;
  bound_wait(c, w->conn->ctx, until_us);
  if (renew_calls(c, w->conn->ctx, holds, n, res, wait, &moved) != 0 ||
      moved) {
    /* Broken, or the master moved (sentinel URL): reconnect next time. */
    hilock__conn_free(w->conn);
    w->conn = NULL;
  }
}

/* ## Batches: one script call renews many holds ---------------------------
 * renew_batch.lua renews each hold as its own renew script does; a hold's
 * kind names that script. A call carries at most CHUNK holds, so one call
 * stays short on the server. */

static const hilock__script *const kinds[] = {
    &hilock__script_lock_extend,    &hilock__script_multilock_extend,
    &hilock__script_rlock_renew,    &hilock__script_rwlock_read_renew,
    &hilock__script_semaphore_renew, &hilock__script_seqlock_renew};

/* The kind of h's renew script in renew_batch.lua (1..), 0 if none. */
static int kind_of(const hilock__hold *h) {
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
    if (h->renew_script == kinds[i]) return (int)i + 1;
  return 0;
}

/* The command renewing holds[0..n) in one call (EVAL with the source if
 * eval, else EVALSHA). *argv, *lens and *nums are malloc'd (free with
 * free_batch). Returns argc, or -1 out of memory. */
static int batch_cmd(hilock__hold *const *holds, int n, int eval,
                     const char ***argv, size_t **lens, char **nums) {
  static const char *const kind_text[] = {"0", "1", "2", "3", "4", "5", "6"};
  const hilock__script *s = &hilock__script_renew_batch;
  int nkeys = 0, argc, i = 0;
  char *num;
  for (int h = 0; h < n; h++) nkeys += 1 + holds[h]->nxkeys;
  argc = 3 + nkeys + 4 * n;
  *argv = malloc((size_t)argc * sizeof(**argv));
  *lens = malloc((size_t)argc * sizeof(**lens));
  *nums = malloc((size_t)(2 * n + 1) * 24);
  if (*argv == NULL || *lens == NULL || *nums == NULL) {
    free(*argv);
    free(*lens);
    free(*nums);
    return -1;
  }
  num = *nums;
  (*argv)[i] = eval ? "EVAL" : "EVALSHA";
  (*lens)[i++] = eval ? 4 : 7;
  (*argv)[i] = eval ? s->src : s->sha;
  (*lens)[i++] = eval ? s->len : 40;
  (*argv)[i] = num;
  (*lens)[i++] = hilock__i64(num, nkeys);
  num += 24;
  for (int h = 0; h < n; h++) {
    (*argv)[i] = holds[h]->rkey;
    (*lens)[i++] = holds[h]->rkeylen;
    for (int k = 0; k < holds[h]->nxkeys; k++, i++) {
      (*argv)[i] = holds[h]->xkeys[k];
      (*lens)[i] = holds[h]->xkeylens[k];
    }
  }
  for (int h = 0; h < n; h++) {
    (*argv)[i] = kind_text[kind_of(holds[h])];
    (*lens)[i++] = 1;
    (*argv)[i] = num;
    (*lens)[i++] = hilock__i64(num, 1 + holds[h]->nxkeys);
    num += 24;
    (*argv)[i] = holds[h]->owner;
    (*lens)[i++] = holds[h]->ownerlen;
    (*argv)[i] = num;
    (*lens)[i++] = hilock__i64(num, holds[h]->ttl_ms);
    num += 24;
  }
  return argc;
}

static void free_batch(const char **argv, size_t *lens, char *nums) {
  free(argv);
  free(lens);
  free(nums);
}

/* One renewal result of a batch reply element. */
static int batch_result(const redisReply *r, hilock__err *e) {
  if (r->type == REDIS_REPLY_INTEGER) return r->integer > 0 ? RENEWED : NOT_OWNED;
  if (r->type == REDIS_REPLY_ERROR &&
      hilock__reply_error(e, r->str, r->len) == HILOCK_EWRONGTYPE)
    return NOT_OWNED;
  return FAILED;
}

/* Read a batch reply for n holds into res: *noscript = 1 if the server did
 * not know the script. 0, or -1 if no reply came (the connection broke). */
static int batch_read(hilock__net *ctx, int n, int *res, int *noscript,
                      int *moved, const hilock_client *c, hilock__err *e) {
  redisReply *r = NULL;
  *noscript = 0;
  if (hilock__net_get_reply(ctx, (void **)&r) != 0 || r == NULL) return -1;
  if (r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)n) {
    for (int i = 0; i < n; i++) res[i] = batch_result(r->element[i], e);
  } else if (r->type == REDIS_REPLY_ERROR) {
    *noscript = hilock__reply_error(e, r->str, r->len) == HILOCK__NOSCRIPT;
    *moved |= hilock__failover_reply(c, r);
  }
  freeReplyObject(r);
  return 0;
}

/* Renew holds[0..n) (every one of a batch kind) on ctx in calls of at
 * most CHUNK holds, pipelined, then WAIT behind them if wait; results into
 * res (FAILED where no answer came). Returns 0, or -1 if the connection
 * broke (its results FAILED). */
static int renew_calls(hilock_client *c, hilock__net *ctx,
                       hilock__hold **holds, int n, int *res, int wait,
                       int *moved) {
  hilock__err e;
  int calls = (n + CHUNK - 1) / CHUNK, redo = 0;
  long long acked = -1;
  for (int i = 0; i < n; i++) res[i] = FAILED;
  for (int eval = 0; eval < 2; eval++) {
    int sent = 0;
    for (int k = 0; k < calls; k++) {
      const char **argv;
      size_t *lens;
      char *nums;
      int from = k * CHUNK, cnt = n - from < CHUNK ? n - from : CHUNK, argc;
      if (eval && res[from] != -1) continue; /* only chunks that missed */
      argc = batch_cmd(holds + from, cnt, eval, &argv, &lens, &nums);
      if (argc < 0) {
        static const char *ping[1] = {"PING"}; /* keeps replies paired */
        static const size_t pinglen[1] = {4};
        if (hilock__net_append(ctx, 1, ping, pinglen) != 0)
          return -1;
      } else {
        int ok = hilock__net_append(ctx, argc, argv, lens) == 0;
        free_batch(argv, lens, nums);
        if (!ok) return -1;
      }
      sent++;
    }
    if (sent == 0) break;
    if (wait && !hilock__wait_append(c, ctx)) return -1;
    redo = 0;
    for (int k = 0; k < calls; k++) {
      int from = k * CHUNK, cnt = n - from < CHUNK ? n - from : CHUNK, ns;
      if (eval && res[from] != -1) continue;
      for (int i = from; i < from + cnt; i++) res[i] = FAILED;
      if (batch_read(ctx, cnt, res + from, &ns, moved, c, &e) != 0) {
        for (int i = 0; i < n; i++) res[i] = FAILED;
        return -1;
      }
      if (ns && !eval) { /* EVAL with the source, which also loads it */
        for (int i = from; i < from + cnt; i++) res[i] = -1;
        redo = 1;
      }
    }
    if (wait) {
      long long a;
      if (hilock__wait_read(ctx, &a) != 0) {
        for (int i = 0; i < n; i++) res[i] = FAILED;
        return -1;
      }
      /* A replica count covers every write of the connection so far. */
      acked = a;
      if (acked < c->opts.wait_replicas) unconfirmed(holds, NULL, n, res);
    }
    if (!redo) break;
  }
  for (int i = 0; i < n; i++)
    if (res[i] == -1) res[i] = FAILED;
  return 0;
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
    int64_t until = INT64_MAX; /* earliest validity end in the batch */
    int n = 0, nlost = 0, i, any_due = 0;
    hilock__renewal *r, *rn;

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
      w->wake_at_us = next;
      wait_until(w, next);
      w->wake_at_us = 0;
      continue;
    }
    pthread_mutex_unlock(&w->mu);
    start = hilock__now_us();
    if (n > 0) renew_batch(c, batch, n, res, until);
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
  if (!hilock__client_usable(c)) {
    /* Closed: its renewal thread is gone for good, and so is the hold. */
    h->lost = h->close_lost = 1;
    pthread_mutex_unlock(&w->mu);
    return hilock__set_err(&h->err, HILOCK_ECLOSED,
                           "client is closed: the hold is not renewed");
  }
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
  /* Wake the thread only if it sleeps past this hold's first renewal: a
   * hold released before then costs it nothing. */
  if (r->next_due_us < w->wake_at_us) pthread_cond_signal(&w->wake);
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
  if (h->pid != hilock__pid()) h->ren.in_batch = h->closing = 0;
  /* Wait out a renewal batch, and a closing client releasing this grant. */
  while ((h->ren.in_batch && !on_watchdog(w)) ||
         (h->closing && !hilock__client_usable(h->client) &&
          !hilock__closing_here(h->client)))
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

void hilock__watchdog_close(hilock_client *c) {
  hilock__watchdog *w = &c->wd;
  hilock__watchdog_stop(c);
  pthread_mutex_lock(&w->mu);
  while (w->head != NULL) unlink_renewal(w, w->head);
  pthread_mutex_unlock(&w->mu);
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
  hilock__hold_forget_live(c);
  w->running = 0;
  w->wake_at_us = 0;
  w->stop = 0;
  /* Not freed: the parent's renewal thread may have been changing this
   * connection's buffers (outside the mutex) at fork time. */
  w->conn = NULL;
}
