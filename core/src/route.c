/* The dispatcher: the one way a request reaches a server.
 *
 * hilock__conn_batch  sends requests on one connection as one write,
 *                     [PING] [ASKING] requests... [WAIT n ms], reads every
 *                     reply, and answers a script's NOSCRIPT with EVAL of
 *                     its source on the same connection.
 * hilock__dispatch    takes one request or a batch, groups the requests by
 *                     the connection they go to (the one server, a caller's
 *                     own connection, or on a cluster the master of each
 *                     request's slot, or a given node), sends each group
 *                     with hilock__conn_batch, and follows what each reply
 *                     says: MOVED and ASK (the map is read again; one hop
 *                     limit), TRYAGAIN and CLUSTERDOWN (a pause within the
 *                     budget), a master that moved under a Sentinel URL (a
 *                     new connection to the new one), a broken pooled
 *                     connection (replaced; the requests sent again if it is
 *                     safe to resend). Every caller comes through here: the
 *                     script runner and plain commands (hilock__route), the
 *                     watchdog's batches, the BLPOP waits, inspection's
 *                     SCAN and the cluster's PINGs. The subscriber
 *                     connection of the shared waiting (hub.c) and
 *                     Redlock's node rounds keep connections of their own
 *                     and use hilock__conn_batch and hilock__req_append.
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
  q->node = NULL;
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
                       hilock__req *const *q, int n, int round,
                       long long *acked) {
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
    if (round == 1 && !resent(q[i])) continue;
    if (hilock__req_append(k->ctx, q[i]) != 0) return -1;
    k->owed++;
  }
  if ((flags & HILOCK__SEND_WAIT) && !hilock__wait_append(c, k->ctx))
    return -1;
  if (flags & HILOCK__SEND_WAIT) k->owed++;
  if (flags & HILOCK__SEND_PING) discard(k);
  if (flags & HILOCK__SEND_ASKING) discard(k);
  for (int i = 0; i < n; i++) {
    redisReply *r;
    if (round == 1 && !resent(q[i])) continue;
    r = take(k);
    if (r == NULL) return -1;
    if (q[i]->reply != NULL) freeReplyObject(q[i]->reply);
    q[i]->reply = r;
  }
  if (flags & HILOCK__SEND_WAIT) {
    if (hilock__wait_read(k->ctx, acked) != 0) return 1;
    k->owed--;
  }
  return 0;
}

/* hilock__conn_batch on an array of requests' addresses. */
static int batch(hilock_client *c, hilock__conn *k, unsigned flags,
                 hilock__req *const *q, int n, long long *acked) {
  /* A caller's deadline shorter than the command timeout bounds these
   * reply waits; the connection gets its own timeout back after them. */
  int64_t io = hilock__io_ms(c->rt.opts.command_timeout_ms);
  int bounded = io != c->rt.opts.command_timeout_ms &&
                !(flags & HILOCK__SEND_BLOCKING),
      rc, again = 0;
  if (acked != NULL) *acked = -1;
  if (bounded) hilock__net_set_timeout(k->ctx, io);
  k->owed = 0;
  for (int i = 0; i < n; i++) q[i]->reply = NULL;
  rc = batch_round(c, k, flags, q, n, 0, acked);
  if (rc == 0) {
    for (int i = 0; i < n; i++)
      again |= hilock__req_noscript(q[i], q[i]->reply);
    /* A flushed cache or a restarted server: EVAL sends the source (and
     * loads it, so the next EVALSHA hits); WAIT again behind it. */
    if (again) rc = batch_round(c, k, flags, q, n, 1, acked);
  }
  if (bounded && k->ctx != NULL)
    hilock__net_set_timeout(k->ctx, c->rt.opts.command_timeout_ms);
  return rc;
}

int hilock__conn_batch(hilock_client *c, hilock__conn *k, unsigned flags,
                       hilock__req *q, int n, long long *acked) {
  hilock__req *one[8] = {NULL}, **p = one;
  int rc;
  if (n > 8 && (p = malloc((size_t)n * sizeof(*p))) == NULL) return -1;
  for (int i = 0; i < n; i++) p[i] = &q[i];
  rc = batch(c, k, flags, p, n, acked);
  if (p != one) free(p);
  return rc;
}

/* ## What a reply says about where its request goes ------------------------- */

static int has_prefix(const char *s, size_t n, const char *p) {
  size_t pl = strlen(p);
  return n >= pl && memcmp(s, p, pl) == 0;
}

int hilock__cluster_redirected(hilock_client *c, hilock__node *from,
                               const char *text, size_t len,
                               hilock__node **ask) {
  int moved = has_prefix(text, len, "MOVED ");
  if (ask != NULL) *ask = NULL;
  if (moved || has_prefix(text, len, "ASK ")) {
    /* "MOVED <slot> <host>:<port>"; the host may be empty (the same host)
     * or an IPv6 address (split at the last ':'). */
    const char *p = text + (moved ? 6 : 4), *end = text + len, *sp, *colon;
    long slot = 0, port = 0;
    hilock__node *n;
    /* Digits past a bound stop adding: an absurd number stays absurd
     * (never wraps into range) and is refused below. */
    for (sp = p; sp < end && *sp >= '0' && *sp <= '9'; sp++)
      if (slot < HILOCK__SLOTS) slot = slot * 10 + (*sp - '0');
    if (sp == p || sp >= end || *sp != ' ' || slot >= HILOCK__SLOTS) return 1;
    sp++;
    for (colon = end; colon > sp && colon[-1] != ':'; colon--) {
    }
    if (colon == sp) return 1;
    for (const char *q = colon; q < end && *q >= '0' && *q <= '9'; q++)
      if (port <= 65535) port = port * 10 + (*q - '0');
    if (port < 1 || port > 65535) return 1;
    const char *host = sp;
    size_t hostlen = (size_t)(colon - 1 - sp);
    if (hostlen >= 2 && host[0] == '[') {
      host++;
      hostlen -= 2;
    }
    if (hostlen == 0 && from != NULL) {
      host = from->host;
      hostlen = strlen(from->host);
    }
    n = hilock__cluster_learn(c, (int)slot, host, hostlen, (int)port, moved);
    if (!moved && ask != NULL) *ask = n;
    return 1;
  }
  if (has_prefix(text, len, "CLUSTERDOWN") ||
      has_prefix(text, len, "UNBLOCKED")) {
    /* UNBLOCKED: a master turned replica (a failover) ended a BLPOP. */
    hilock__err ignored;
    hilock__cluster_refresh(c, &ignored, NULL);
    return 1;
  }
  return has_prefix(text, len, "TRYAGAIN");
}

int hilock__failover_reply(const hilock_client *c, const redisReply *r) {
  if (!c->url.sentinel || r == NULL || r->type != REDIS_REPLY_ERROR ||
      r->str == NULL)
    return 0;
  /* READONLY: we talk to a demoted master; LOADING: a restarted master is
   * reading its data; MASTERDOWN: a replica lost its master; UNBLOCKED: a
   * master turned replica ended a blocked BLPOP. Inside a script, Redis
   * keeps the code after "ERR ... script: ", so look for it anywhere in
   * the text. */
  return strncmp(r->str, "READONLY", 8) == 0 ||
         strncmp(r->str, "UNBLOCKED", 9) == 0 ||
         strncmp(r->str, "LOADING", 7) == 0 ||
         strncmp(r->str, "MASTERDOWN", 10) == 0 ||
         strstr(r->str, "READONLY You can't write") != NULL;
}

/* ## The dispatcher ------------------------------------------------------------ */

/* One dispatch's state. */
typedef struct trip {
  hilock_client *c;
  hilock__send *s;
  hilock__err *e, tmp;
  int64_t deadline;
  int failed;      /* the first failure's status, 0 if none yet */
  int pause;       /* a request waits for a recovering cluster */
  int64_t pause_until;
  /* A slot half migrated (TRYAGAIN) is waited out until the caller's
   * deadline when the caller has one (an acquire), and then ends as
   * HILOCK_BUSY: not granted in time; else as other pauses. */
  int64_t resharding;
  int reshard_busy;
  int moved;       /* the master moved (Sentinel) */
} trip;

/* q ends with rc (its message in t->tmp, copied to the caller's e if it is
 * the first failure). */
static void finish(trip *t, hilock__req *q, int rc) {
  q->pending = 0;
  q->rc = rc;
  if (rc == HILOCK_OK || t->failed != 0) return;
  t->failed = rc;
  *t->e = t->tmp;
  t->e->code = rc;
}

/* The node q goes to now on a cluster (NULL: not known yet). */
static hilock__node *target(hilock_client *c, const hilock__req *q) {
  int slot;
  if (q->ask != NULL) return q->ask;
  if (q->node != NULL) return q->node;
  slot = hilock__command_key_slot(q->argc, q->argv, q->lens);
  return slot >= 0 ? hilock__cluster_owner(c, slot) : NULL;
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
  hilock__req p = {.argc = 1, .argv = argv, .lens = lens};
  int sent = hilock__conn_batch(c, k, 0, &p, 1, NULL), rc = HILOCK_OK;
  if (p.reply != NULL) freeReplyObject(p.reply);
  if (sent == 0) return HILOCK_OK;
  rc = hilock__conn_timeout(c, e, k, "PING", errno);
  hilock__conn_free(k);
  return rc;
}

/* A connection for the group led by q (to node on a cluster; NULL: by q's
 * slot, or any master): HILOCK_OK with *k, AGAIN to look again
 * (an unreachable ASK target, a shaken server not answering yet), or why
 * not (in t->tmp). */
#define AGAIN (-903)
static int conn_for(trip *t, hilock__req *q, hilock__node *node,
                    hilock__conn **k, int *fresh, int64_t *look) {
  hilock_client *c = t->c;
  const hilock__send *s = t->s;
  int rc;
  if (c->cl != NULL && q->ask != NULL) {
    rc = hilock__cluster_node_conn(c, &t->tmp, q->ask, k, fresh);
    if ((rc == HILOCK_EIO || rc == HILOCK_ETIMEDOUT) &&
        hilock__now_ms() < t->deadline) {
      /* The importing node is unreachable: ask the slot's owner again
       * (it answers ASK, MOVED, or runs the request itself). */
      hilock__cluster_refresh(c, &t->tmp, q->ask);
      q->ask = NULL;
      return AGAIN;
    }
    return rc;
  }
  if (c->cl != NULL) {
    if (node == NULL && q->node == NULL && (s->flags & HILOCK__SEND_ONCE)) {
      /* No known owner, and no time to look for one now. */
      hilock__cluster_refresh(c, &t->tmp, NULL);
      return hilock__set_err(&t->tmp, HILOCK_ECLUSTER,
                             "no cluster node is known to serve hash slot %d",
                             hilock__command_key_slot(q->argc, q->argv,
                                                      q->lens));
    }
    if (node != NULL && (q->node != NULL || (s->flags & HILOCK__SEND_ONCE))) {
      rc = hilock__cluster_node_conn(c, &t->tmp, node, k, fresh);
      if (rc == HILOCK_EIO || rc == HILOCK_ETIMEDOUT) forget(c, node);
      return rc;
    }
    return hilock__cluster_pool_get(
        c, &t->tmp, hilock__command_key_slot(q->argc, q->argv, q->lens),
        t->deadline, k, fresh);
  }
  if (s->own != NULL) {
    *fresh = *s->own == NULL;
    if (*fresh) {
      rc = hilock__connect(c, &t->tmp, t->deadline, s->own);
      if (rc != HILOCK_OK) return rc;
    }
    *k = *s->own;
    return HILOCK_OK;
  }
  rc = hilock__pool_get_until(c, &t->tmp, t->deadline, k, fresh);
  if (rc != HILOCK_OK || !*fresh ||
      !__atomic_load_n(&c->shaken, __ATOMIC_RELAXED))
    return rc;
  /* A pooled connection broke (a restart, a failover): the server may be
   * going down, and a connection opened to it now can be accepted and then
   * reset, which would fail the request on it (a fresh connection that
   * breaks means the server is gone). So, as a broken wait does (wait.c), a
   * new connection carries the request once one answered a PING; until
   * then it looks again, pausing, within the budget. */
  rc = answers(c, &t->tmp, *k);
  if (rc == HILOCK_OK) {
    __atomic_store_n(&c->shaken, 0, __ATOMIC_RELAXED);
  } else {
    int64_t left = t->deadline - hilock__now_ms();
    if (rc == HILOCK_ETIMEDOUT || left <= 0) return rc;
    hilock__sleep_ms(*look < left ? *look : left);
    *look = *look * 2 > PAUSE_MAX_MS ? PAUSE_MAX_MS : *look * 2;
    return AGAIN;
  }
  return HILOCK_OK;
}

/* Bound k's reply waits by the send's reply_by_ms, and its stop hook. */
static void arm(const trip *t, hilock__conn *k) {
  const hilock__send *s = t->s;
  int64_t ms, cmd = t->c->rt.opts.command_timeout_ms;
  if (s->reply_by_ms > 0) {
    ms = s->reply_by_ms - hilock__now_ms();
    if (ms < 1) ms = 1;
    if (!(s->flags & HILOCK__SEND_BLOCKING) && cmd > 0 && ms > cmd) ms = cmd;
    hilock__net_set_timeout(k->ctx, ms);
  }
  k->ctx->stop = s->stop;
  k->ctx->stop_arg = s->stop_arg;
}

static void disarm(const trip *t, hilock__conn *k) {
  if (k->ctx == NULL) return;
  k->ctx->stop = NULL;
  k->ctx->stop_arg = NULL;
  if (t->s->reply_by_ms > 0)
    hilock__net_set_timeout(k->ctx, t->c->rt.opts.command_timeout_ms);
}

/* Give k back: to the caller that keeps it, to the pool, or away (broken,
 * or a WAIT reply still owed: gone != 0). */
static void give_back(trip *t, hilock__conn *k, int gone) {
  if (t->s->own != NULL && t->c->cl == NULL) {
    if (gone) {
      hilock__conn_free(k);
      *t->s->own = NULL;
    }
    return;
  }
  if (gone) hilock__conn_free(k);
  else hilock__pool_put(t->c, k);
}

/* What q's reply, from node, means: it ends q, or q stays pending (a
 * redirection to follow, a cluster or master to wait for). */
static void settle(trip *t, hilock__req *q, hilock__node *node,
                   long long acked) {
  hilock_client *c = t->c;
  redisReply *r = q->reply;
  hilock__node *to = NULL;
  int rc;
  q->acked = acked;
  if (r->type != REDIS_REPLY_ERROR) {
    finish(t, q, HILOCK_OK);
    return;
  }
  q->reply = NULL;
  if (c->cl == NULL && hilock__failover_reply(c, r) &&
      hilock__now_ms() < t->deadline) {
    /* The master moved (Sentinel URL): the request did not run. */
    hilock__reply_error(&t->tmp, r->str, r->len);
    freeReplyObject(r);
    t->moved = 1;
    if (t->s->flags & HILOCK__SEND_BLOCKING) finish(t, q, HILOCK__FAILOVER);
    return;
  }
  if (c->cl != NULL &&
      hilock__cluster_redirected(c, node, r->str, r->len, &to)) {
    /* The request did not run: following or retrying it is safe. */
    int hop = r->str[0] == 'M' || r->str[0] == 'A'; /* MOVED, ASK */
    int tryagain = has_prefix(r->str, r->len, "TRYAGAIN");
    int64_t until;
    int slot = hilock__command_key_slot(q->argc, q->argv, q->lens);
    rc = hilock__set_err(&t->tmp, HILOCK_ECLUSTER, "redis: %.*s",
                         (int)(r->len > 200 ? 200 : r->len), r->str);
    freeReplyObject(r);
    if (hop) {
      hilock__stat(&c->rt, HILOCK__ST_REDIRECTIONS);
      q->ask = to;
      if (++q->hops > MAX_REDIRECTS)
        finish(t, q,
               hilock__set_err(&t->tmp, HILOCK_ECLUSTER,
                               "too many cluster redirections (%d) for "
                               "hash slot %d",
                               q->hops - 1, slot));
      return;
    }
    /* CLUSTERDOWN, TRYAGAIN: wait within the budget (which bounds these;
     * the hop count catches redirection loops). */
    q->hops = 0;
    until = tryagain ? t->resharding : t->deadline;
    if (tryagain && (t->s->flags & HILOCK__SEND_TRYAGAIN)) {
      finish(t, q, HILOCK__TRYAGAIN);
    } else if (t->s->flags & HILOCK__SEND_ONCE) {
      finish(t, q, rc); /* no time to wait: tried again next round */
    } else if (hilock__now_ms() < until) {
      t->pause = 1;
      if (until > t->pause_until) t->pause_until = until;
    } else if (tryagain && t->reshard_busy) {
      finish(t, q,
             hilock__set_err(&t->tmp, HILOCK_BUSY,
                             "hash slot %d was still being migrated "
                             "(TRYAGAIN) when the time ran out",
                             slot));
    } else {
      finish(t, q, rc);
    }
    return;
  }
  if (c->cl == NULL && (has_prefix(r->str, r->len, "MOVED ") ||
                        has_prefix(r->str, r->len, "ASK ") ||
                        has_prefix(r->str, r->len, "CLUSTERDOWN") ||
                        has_prefix(r->str, r->len, "TRYAGAIN"))) {
    /* A cluster node answering a client that does not route by slot. */
    finish(t, q,
           hilock__set_err(&t->tmp, HILOCK_ECLUSTER,
                           "redis: %.*s (a Redis Cluster node: connect with "
                           "a redis+cluster:// URL)",
                           (int)(r->len > 160 ? 160 : r->len), r->str));
    freeReplyObject(r);
    return;
  }
  rc = hilock__reply_error(&t->tmp, r->str, r->len);
  if (rc == HILOCK__NOSCRIPT && q->script != NULL)
    rc = HILOCK_ESCRIPT; /* EVAL was refused too */
  freeReplyObject(r);
  finish(t, q, rc);
}

/* Send the group g[0..n) on one connection and settle every reply. */
static void send_group(trip *t, hilock__req **g, int n, hilock__node *node,
                       int64_t *look) {
  hilock_client *c = t->c;
  hilock__send *s = t->s;
  hilock__conn *k;
  long long acked = -1;
  unsigned flags = s->flags & (HILOCK__SEND_PING | HILOCK__SEND_WAIT |
                               HILOCK__SEND_BLOCKING);
  int fresh = 0, sent, rc;
  rc = conn_for(t, g[0], node, &k, &fresh, look);
  if (rc == AGAIN) return;
  if (rc != HILOCK_OK) {
    for (int i = 0; i < n; i++) finish(t, g[i], rc);
    return;
  }
  if (s->outside) hilock__pool_uncount(k);
  node = k->node;
  if (g[0]->ask != NULL) flags |= HILOCK__SEND_ASKING;
  g[0]->ask = NULL;
  arm(t, k);
  sent = batch(c, k, flags, g, n, &acked);
  disarm(t, k);
  if (sent < 0) {
    /* A reply that timed out may still come: never resend (the armed undo
     * of an ambiguous grant goes out behind it). A broken pooled connection
     * (a restart, an idle timeout, a failover) is replaced and the requests
     * sent once more if that is safe; a fresh one that broke on one server
     * means the server is gone. */
    s->broke_fresh = fresh;
    s->broke_status = k->ctx != NULL ? hilock__net_status(k->ctx) : HILOCK_EIO;
    for (int i = 0; i < n; i++)
      if (g[i]->reply != NULL) {
        freeReplyObject(g[i]->reply);
        g[i]->reply = NULL;
      }
    rc = hilock__conn_timeout(c, &t->tmp, k, g[0]->argv[0], errno);
    give_back(t, k, 1);
    if (rc == HILOCK_ETIMEDOUT || rc == HILOCK_EINTR ||
        !(s->flags & HILOCK__ROUTE_RESEND) || (c->cl == NULL && fresh) ||
        s->own != NULL || hilock__now_ms() >= t->deadline) {
      for (int i = 0; i < n; i++) finish(t, g[i], rc);
      if (c->cl != NULL) forget(c, node);
      return;
    }
    forget(c, node);
    hilock__stat(&c->rt, HILOCK__ST_RECONNECTS);
    hilock__log(&c->rt, HILOCK_LOG_INFO, NULL, 0,
                "connection broken (%s); reconnecting", t->tmp.msg);
    return;
  }
  for (int i = 0; i < n; i++) settle(t, g[i], node, sent == 0 ? acked : -1);
  /* sent > 0: WAIT's reply is still owed; a moved master's connection goes
   * with it. */
  give_back(t, k, sent > 0 || (t->moved && c->cl == NULL));
}

int hilock__dispatch(hilock_client *c, hilock__err *e, hilock__send *s,
                     hilock__req *q, int n) {
  trip t;
  hilock__req *one[1] = {NULL}, **g = one;
  int64_t pause = PAUSE_MIN_MS, look = PAUSE_MIN_MS;
  t.c = c;
  t.s = s;
  t.e = e;
  t.deadline = hilock__budget(c->rt.opts.reconnect_ms);
  if (s->deadline_ms > 0) {
    /* The caller's own bound, within its call's deadline. */
    t.deadline = hilock__call_cut(s->deadline_ms);
    if (hilock__call_deadline() < t.deadline) t.deadline = hilock__call_deadline();
  }
  t.resharding = t.deadline;
  t.reshard_busy = s->deadline_ms == 0 && hilock__call_deadline() != INT64_MAX;
  if (t.reshard_busy) t.resharding = hilock__call_cut(hilock__call_deadline());
  t.failed = 0;
  hilock__clear_err(&t.tmp);
  s->broke_fresh = 0;
  s->broke_status = HILOCK_OK;
  for (int i = 0; i < n; i++) {
    q[i].reply = NULL;
    q[i].ask = NULL;
    q[i].rc = HILOCK_OK;
    q[i].acked = -1;
    q[i].hops = 0;
    q[i].pending = 1;
  }
  if (n > 1 && (g = malloc((size_t)n * sizeof(*g))) == NULL) {
    hilock__set_err(&t.tmp, HILOCK_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) finish(&t, &q[i], HILOCK_ENOMEM);
    return t.failed;
  }
  if (c->cl != NULL) {
    int rc = hilock__cluster_mapped(c, &t.tmp);
    if (rc != HILOCK_OK)
      for (int i = 0; i < n; i++) finish(&t, &q[i], rc);
  }
  for (;;) {
    int lead = -1, ng = 0;
    hilock__node *node = NULL;
    t.pause = t.moved = 0;
    t.pause_until = 0;
    for (int i = 0; i < n && lead < 0; i++)
      if (q[i].pending) lead = i;
    if (lead < 0) break;
    /* The group: the pending requests that go where the first goes (on a
     * cluster, one node; an ASK goes alone, with ASKING before it). */
    if (c->cl != NULL) node = target(c, &q[lead]);
    g[ng++] = &q[lead];
    if (q[lead].ask == NULL && (c->cl == NULL || node != NULL))
      for (int i = lead + 1; i < n; i++)
        if (q[i].pending && q[i].ask == NULL &&
            (c->cl == NULL || target(c, &q[i]) == node))
          g[ng++] = &q[i];
    send_group(&t, g, ng, node, &look);
    if (t.moved) {
      /* Drop the connections to the old master and ask the sentinels
       * again. */
      forget(c, NULL);
      hilock__stat(&c->rt, HILOCK__ST_FAILOVERS);
      hilock__log(&c->rt, HILOCK_LOG_INFO, NULL, 0,
                  "the master moved (%s); asking the sentinels again",
                  t.tmp.msg);
      hilock__sleep_ms(FAILOVER_PAUSE_MS);
    } else if (t.pause) {
      int64_t left = t.pause_until - hilock__now_ms();
      if (left > 0) hilock__sleep_ms(pause < left ? pause : left);
      pause = pause * 2 > PAUSE_MAX_MS ? PAUSE_MAX_MS : pause * 2;
    }
  }
  if (g != one) free(g);
  return t.failed;
}

/* ## Requests sent again later -------------------------------------------- */

/* A failure that may pass: worth sending again later. */
static int may_pass(int rc) {
  return rc == HILOCK_ECLUSTER || rc == HILOCK_EIO || rc == HILOCK_ETIMEDOUT ||
         rc == HILOCK_BUSY;
}

void hilock__send_later(hilock_client *c, const hilock__req *q, int rc,
                        int64_t for_ms) {
  size_t size = sizeof(hilock__later) +
                (size_t)q->argc * (sizeof(char *) + sizeof(size_t));
  hilock__later *x;
  char *text;
  if (!may_pass(rc)) return;
  for (int i = 0; i < q->argc; i++) size += q->lens[i];
  if ((x = malloc(size)) == NULL) return; /* it lapses on its own */
  x->next = NULL;
  x->pid = hilock__pid();
  x->until_ms = hilock__now_ms() + for_ms;
  x->argc = q->argc;
  x->script = q->script;
  x->lens = (size_t *)(x + 1);
  x->argv = (const char **)(x->lens + q->argc);
  text = (char *)(x->argv + q->argc);
  for (int i = 0; i < q->argc; i++) {
    memcpy(text, q->argv[i], q->lens[i]);
    x->argv[i] = text;
    x->lens[i] = q->lens[i];
    text += q->lens[i];
  }
  hilock__watchdog_later(&c->rt, x);
}

hilock__later *hilock__later_run(hilock_client *c, hilock__later *list) {
  hilock__later *keep = NULL;
  while (list != NULL) {
    hilock__later *x = list;
    hilock__req q = {.argc = x->argc, .argv = x->argv, .lens = x->lens,
                     .script = x->script};
    hilock__send s = {0};
    hilock__err e;
    int rc = HILOCK_ECLOSED;
    list = x->next;
    if (x->pid == hilock__pid() && hilock__now_ms() < x->until_ms &&
        hilock__client_usable(c)) {
      s.flags = HILOCK__ROUTE_RESEND;
      s.deadline_ms = hilock__now_ms() + 1000;
      hilock__clear_err(&e);
      rc = hilock__dispatch(c, &e, &s, &q, 1);
      if (q.reply != NULL) freeReplyObject(q.reply);
    }
    if (may_pass(rc)) {
      x->next = keep;
      keep = x;
    } else {
      free(x);
    }
  }
  return keep;
}

int hilock__route(hilock_client *c, hilock__err *e, unsigned flags,
                  hilock__req *q, long long *acked) {
  hilock__send s = {0};
  int rc;
  s.flags = flags;
  rc = hilock__dispatch(c, e, &s, q, 1);
  if (acked != NULL) *acked = q->acked;
  return rc;
}

int hilock__command(hilock_client *c, hilock__err *e, int argc,
                    const char **argv, const size_t *lens, redisReply **out) {
  hilock__req q = {.argc = argc, .argv = argv, .lens = lens};
  int rc = hilock__route(c, e, HILOCK__ROUTE_RESEND, &q, NULL);
  *out = q.reply;
  return rc;
}
