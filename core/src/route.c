/* Routing: how the scripts and plain commands reach a server.
 *
 * Two layers. The script runner and plain commands use both; the
 * watchdog's batches (renewal.c) and the direct BLPOP wait (wait.c) use
 * hilock__conn_batch and follow redirects themselves, and inspect.c and
 * cluster.c send some commands on a node's connection directly:
 *
 * hilock__conn_batch  sends requests on one connection as one write,
 *                     [PING] [ASKING] requests... [WAIT n ms], reads every
 *                     reply, and answers a script's NOSCRIPT with EVAL of
 *                     its source on the same connection.
 * hilock__route       picks the connection for one request (the server, or
 *                     the master of its slot on a cluster) and follows what
 *                     the reply says: MOVED and ASK (the map is read
 *                     again), TRYAGAIN and CLUSTERDOWN (a pause within the
 *                     reconnect budget), a master that moved under a
 *                     Sentinel URL (a new connection to the new one), a
 *                     broken pooled connection (replaced; the request sent
 *                     again if it is safe to resend).
 *
 * Why PING first: Redis writes the replies of one event-loop turn to the
 * clients it queued last first. A release's reply is queued when its script
 * ends, after the PUBLISH that queued the waiter's message, so the releaser
 * hears back before the waiter does and takes a CPU first. A PING in the
 * same write queues the releaser before its script runs: the waiter's
 * message goes out first, as a BLPOP waiter's element would. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "route.h"
#include "script.h"

#define MAX_REDIRECTS 16 /* MOVED/ASK hops for one request */
#define PAUSE_MIN_MS 10  /* first back-off while a cluster recovers */
#define PAUSE_MAX_MS 250
#define FAILOVER_PAUSE_MS 50 /* before asking the sentinels again */

/* ## One connection --------------------------------------------------------- */

static int append(hilock__conn *k, int argc, const char **argv,
                  const size_t *lens) {
  if (hilock__net_append(k->ctx, argc, argv, lens) != 0) return -1;
  k->owed++;
  return 0;
}

/* Read one reply on k; NULL if k broke or timed out. */
static redisReply *take(hilock__conn *k) {
  void *r = NULL;
  if (hilock__net_get_reply(k->ctx, &r) != 0 || r == NULL) return NULL;
  k->owed--;
  return r;
}

static void discard(hilock__conn *k) {
  redisReply *r = take(k);
  if (r != NULL) freeReplyObject(r);
}

static int is_noscript(const redisReply *r) {
  return r != NULL && r->type == REDIS_REPLY_ERROR && r->len >= 8 &&
         memcmp(r->str, "NOSCRIPT", 8) == 0;
}

/* q goes again as EVAL in a batch's second round (the first set q->eval). */
static int resent(const hilock__req *q) {
  return q->script != NULL && q->eval && is_noscript(q->reply);
}

/* q's command with EVAL and the script's source in place of EVALSHA and
 * its SHA1 (copies of the arrays: malloc'd, free both). */
static int as_eval(const hilock__req *q, const char ***argv, size_t **lens) {
  *argv = malloc((size_t)q->argc * sizeof(**argv));
  *lens = malloc((size_t)q->argc * sizeof(**lens));
  if (*argv == NULL || *lens == NULL) {
    free(*argv);
    free(*lens);
    return -1;
  }
  memcpy(*argv, q->argv, (size_t)q->argc * sizeof(**argv));
  memcpy(*lens, q->lens, (size_t)q->argc * sizeof(**lens));
  (*argv)[0] = "EVAL";
  (*lens)[0] = 4;
  (*argv)[1] = q->script->src;
  (*lens)[1] = q->script->len;
  return 0;
}

void hilock__req_script(hilock__req *q, const hilock__script *s, int nkeys,
                        const char *const *keys, const size_t *keylens,
                        int nargs, const char *const *args,
                        const size_t *arglens, char nk[24], const char **argv,
                        size_t *lens) {
  int argc = 0;
  argv[argc] = "EVALSHA";
  lens[argc++] = 7;
  argv[argc] = s->sha;
  lens[argc++] = 40;
  argv[argc] = nk;
  lens[argc++] = hilock__i64(nk, nkeys);
  for (int i = 0; i < nkeys; i++, argc++) {
    argv[argc] = keys[i];
    lens[argc] = keylens[i];
  }
  for (int i = 0; i < nargs; i++, argc++) {
    argv[argc] = args[i];
    lens[argc] = arglens[i];
  }
  q->argc = argc;
  q->argv = argv;
  q->lens = lens;
  q->script = s;
  q->reply = NULL;
  q->eval = 0;
}

int hilock__req_append(hilock__net *n, const hilock__req *q) {
  const char **argv;
  size_t *lens;
  int rc;
  if (!q->eval) return hilock__net_append(n, q->argc, q->argv, q->lens);
  if (as_eval(q, &argv, &lens) != 0) return -1;
  rc = hilock__net_append(n, q->argc, argv, lens);
  free(argv);
  free(lens);
  return rc;
}

int hilock__req_noscript(hilock__req *q, const redisReply *r) {
  if (q->script == NULL || q->eval || !is_noscript(r)) return 0;
  q->eval = 1;
  return 1;
}

/* One write of the requests whose reply is still to get (all of them in
 * the first round; those answered NOSCRIPT, as EVAL, in the second). */
static int batch_round(hilock_client *c, hilock__conn *k, unsigned flags,
                       hilock__req *q, int n, int round, long long *acked) {
  static const char *const ask[1] = {"ASKING"}, *const ping[1] = {"PING"};
  static const size_t asklen[1] = {6}, pinglen[1] = {4};
  /* ASKING holds for the very next command only. */
  if ((flags & HILOCK__SEND_PING) &&
      append(k, 1, (const char **)ping, pinglen) != 0)
    return -1;
  if ((flags & HILOCK__SEND_ASKING) &&
      append(k, 1, (const char **)ask, asklen) != 0)
    return -1;
  for (int i = 0; i < n; i++) {
    if (round == 1 && !resent(&q[i])) continue;
    if (hilock__req_append(k->ctx, &q[i]) != 0) return -1;
    k->owed++;
  }
  if ((flags & HILOCK__SEND_WAIT) && !hilock__wait_append(c, k->ctx))
    return -1;
  if (flags & HILOCK__SEND_WAIT) k->owed++;
  if (flags & HILOCK__SEND_PING) discard(k);
  if (flags & HILOCK__SEND_ASKING) discard(k);
  for (int i = 0; i < n; i++) {
    redisReply *r;
    if (round == 1 && !resent(&q[i])) continue;
    r = take(k);
    if (r == NULL) return -1;
    if (q[i].reply != NULL) freeReplyObject(q[i].reply);
    q[i].reply = r;
  }
  if (flags & HILOCK__SEND_WAIT) {
    if (hilock__wait_read(k->ctx, acked) != 0) return 1;
    k->owed--;
  }
  return 0;
}

static int batch(hilock_client *c, hilock__conn *k, unsigned flags,
                 hilock__req *q, int n, long long *acked) {
  int rc, again = 0;
  k->owed = 0;
  for (int i = 0; i < n; i++) q[i].reply = NULL;
  rc = batch_round(c, k, flags, q, n, 0, acked);
  if (rc != 0) return rc;
  for (int i = 0; i < n; i++) again |= hilock__req_noscript(&q[i], q[i].reply);
  /* A flushed cache or a restarted server: EVAL sends the source (and
   * loads it, so the next EVALSHA hits); WAIT again behind it. */
  if (again) rc = batch_round(c, k, flags, q, n, 1, acked);
  return rc;
}

int hilock__conn_batch(hilock_client *c, hilock__conn *k, unsigned flags,
                       hilock__req *q, int n, long long *acked) {
  /* A caller's deadline shorter than the command timeout bounds these
   * reply waits; the connection gets its own timeout back after them. */
  int64_t io = hilock__io_ms(c->rt.opts.command_timeout_ms);
  int bounded = io != c->rt.opts.command_timeout_ms &&
                !(flags & HILOCK__SEND_BLOCKING),
      rc;
  if (acked != NULL) *acked = -1;
  if (bounded) hilock__net_set_timeout(k->ctx, io);
  rc = batch(c, k, flags, q, n, acked);
  if (bounded && k->ctx != NULL)
    hilock__net_set_timeout(k->ctx, c->rt.opts.command_timeout_ms);
  return rc;
}

/* ## Routing one request ------------------------------------------------------ */

/* A connection for the request: the one server's pool, or the pool of the
 * master of slot on a cluster. */
static int conn_for(hilock_client *c, hilock__err *e, int slot,
                    int64_t deadline, hilock__conn **k, int *fresh) {
  if (c->cl != NULL)
    return hilock__cluster_pool_get(c, e, slot, deadline, k, fresh);
  return hilock__pool_get_until(c, e, deadline, k, fresh);
}

/* A connection to node broke: its idle ones most likely did too. */
static void forget(hilock_client *c, hilock__node *node) {
  if (c->cl != NULL) {
    hilock__err ignored;
    hilock__cluster_drop_idle(c, node);
    hilock__cluster_refresh(c, &ignored, node);
    return;
  }
  __atomic_store_n(&c->shaken, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&c->rt.mu);
  hilock__conn *stale = hilock__pool_detach(c);
  pthread_mutex_unlock(&c->rt.mu);
  hilock__conn_free_list(stale);
}

/* Whether the fresh connection k answers a PING (any answer: an ACL
 * without PING too is a server up): HILOCK_OK, or why not (in e; k is
 * freed). */
static int answers(hilock_client *c, hilock__err *e, hilock__conn *k) {
  const char *argv[1] = {"PING"};
  size_t lens[1] = {4};
  hilock__req p = {1, argv, lens, NULL, NULL, 0};
  int sent = hilock__conn_batch(c, k, 0, &p, 1, NULL), rc = HILOCK_OK;
  if (p.reply != NULL) freeReplyObject(p.reply);
  if (sent == 0) return HILOCK_OK;
  rc = hilock__conn_timeout(c, e, k, "PING", errno);
  hilock__conn_free(k);
  return rc;
}

int hilock__route(hilock_client *c, hilock__err *e, unsigned flags,
                  hilock__req *q, long long *acked) {
  int64_t deadline = hilock__budget(c->rt.opts.reconnect_ms);
  int64_t pause = PAUSE_MIN_MS;
  int redirects = 0;
  int slot = c->cl != NULL ? hilock__command_key_slot(q->argc, q->argv, q->lens)
                           : -1;
  hilock__node *ask = NULL;
  hilock__err before = *e;
  int64_t look = PAUSE_MIN_MS;

  q->reply = NULL;
  for (;;) {
    hilock__conn *k;
    hilock__node *node, *to = NULL;
    redisReply *r;
    int fresh, rc, sent;
    if (ask != NULL) {
      rc = hilock__cluster_node_conn(c, e, ask, &k, &fresh);
      if ((rc == HILOCK_EIO || rc == HILOCK_ETIMEDOUT) &&
          hilock__now_ms() < deadline) {
        /* The importing node is unreachable: ask the slot's owner again
         * (it answers ASK, MOVED, or runs the request itself). */
        hilock__err ignored;
        hilock__cluster_refresh(c, &ignored, ask);
        ask = NULL;
        continue;
      }
    } else {
      rc = conn_for(c, e, slot, deadline, &k, &fresh);
    }
    if (rc != HILOCK_OK) return rc;
    if (fresh && c->cl == NULL &&
        __atomic_load_n(&c->shaken, __ATOMIC_RELAXED)) {
      /* A pooled connection broke (a restart, a failover): the server may
       * be going down, and a connection opened to it now can be accepted
       * and then reset, which would fail the request on it (a fresh
       * connection that breaks means the server is gone). So, as a broken
       * wait does (wait.c), a new connection carries the request once one
       * answered a PING; until then it looks again, pausing, within the
       * budget. */
      int64_t left;
      rc = answers(c, e, k);
      if (rc == HILOCK_OK) {
        __atomic_store_n(&c->shaken, 0, __ATOMIC_RELAXED);
      } else {
        left = deadline - hilock__now_ms();
        if (rc == HILOCK_ETIMEDOUT || left <= 0) return rc;
        hilock__sleep_ms(look < left ? look : left);
        look = look * 2 > PAUSE_MAX_MS ? PAUSE_MAX_MS : look * 2;
        continue;
      }
    }
    node = k->node;
    sent = hilock__conn_batch(
        c, k, flags | (ask != NULL ? HILOCK__SEND_ASKING : 0), q, 1, acked);
    ask = NULL;
    if (sent < 0) {
      /* A reply that timed out may still come: never resend (the armed
       * undo of an ambiguous grant goes out behind it). A broken pooled
       * connection (a restart, an idle timeout, a failover) is replaced and
       * the request sent once more if it is safe to resend; a fresh one
       * that broke on one server means the server is gone. */
      if (q->reply != NULL) freeReplyObject(q->reply);
      q->reply = NULL;
      rc = hilock__conn_timeout(c, e, k, q->argv[0], errno);
      hilock__conn_free(k);
      if (rc == HILOCK_ETIMEDOUT || !(flags & HILOCK__ROUTE_RESEND) ||
          (c->cl == NULL && fresh) || hilock__now_ms() >= deadline)
        return rc;
      forget(c, node);
      hilock__stat(&c->rt, HILOCK__ST_RECONNECTS);
      hilock__log(&c->rt, HILOCK_LOG_INFO, NULL, 0,
                  "connection broken (%s); reconnecting", e->msg);
      continue;
    }
    r = q->reply;
    if (r->type == REDIS_REPLY_ERROR && c->cl == NULL &&
        hilock__failover_reply(c, r) && hilock__now_ms() < deadline) {
      /* The master moved (Sentinel URL): the request did not run. Drop
       * the connections to the old one and ask the sentinels again. */
      hilock__reply_error(e, r->str, r->len);
      freeReplyObject(r);
      q->reply = NULL;
      hilock__conn_free(k);
      forget(c, NULL);
      hilock__stat(&c->rt, HILOCK__ST_FAILOVERS);
      hilock__log(&c->rt, HILOCK_LOG_INFO, NULL, 0,
                  "the master moved (%s); asking the sentinels again", e->msg);
      hilock__sleep_ms(FAILOVER_PAUSE_MS);
      continue;
    }
    if (sent > 0) hilock__conn_free(k); /* WAIT's reply is still owed */
    else hilock__pool_put(c, k);
    if (r->type == REDIS_REPLY_ERROR && c->cl != NULL &&
        hilock__cluster_redirected(c, node, r->str, r->len, &to)) {
      /* The request did not run: following or retrying it is safe. */
      int64_t left;
      int hop = r->str[0] == 'M' || r->str[0] == 'A'; /* MOVED, ASK */
      rc = hilock__set_err(e, HILOCK_ECLUSTER, "redis: %.*s",
                           (int)(r->len > 200 ? 200 : r->len), r->str);
      freeReplyObject(r);
      q->reply = NULL;
      if (hop) {
        hilock__stat(&c->rt, HILOCK__ST_REDIRECTIONS);
        if (++redirects > MAX_REDIRECTS)
          return hilock__set_err(e, HILOCK_ECLUSTER,
                                 "too many cluster redirections (%d) for "
                                 "hash slot %d",
                                 redirects - 1, slot);
        ask = to;
        continue;
      }
      /* CLUSTERDOWN, TRYAGAIN: wait within the budget (which bounds these;
       * the hop count catches redirection loops). */
      redirects = 0;
      left = deadline - hilock__now_ms();
      if (left <= 0) return rc;
      hilock__sleep_ms(pause < left ? pause : left);
      pause = pause * 2 > PAUSE_MAX_MS ? PAUSE_MAX_MS : pause * 2;
      continue;
    }
    *e = before; /* recovered (if it had to): no failure to report */
    if (r->type == REDIS_REPLY_ERROR) {
      rc = hilock__reply_error(e, r->str, r->len);
      if (rc == HILOCK__NOSCRIPT && q->script != NULL)
        rc = e->code = HILOCK_ESCRIPT; /* EVAL was refused too */
      freeReplyObject(r);
      q->reply = NULL;
      return rc;
    }
    return HILOCK_OK;
  }
}

int hilock__command(hilock_client *c, hilock__err *e, int argc,
                    const char **argv, const size_t *lens, redisReply **out) {
  hilock__req q = {argc, argv, lens, NULL, NULL, 0};
  int rc = hilock__route(c, e, HILOCK__ROUTE_RESEND, &q, NULL);
  *out = q.reply;
  return rc;
}
