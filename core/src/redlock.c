/* Redlock: one lock over N independent masters. Each operation is a round:
 * the same script goes to every node at once on non-blocking connections,
 * replies are collected with poll(2) until every node answered or the node
 * timeout passed, and the outcome counts only with a majority. The per-node
 * scripts are the lock family's (lock_acquire.lua, lock_extend.lua) plus
 * redlock_release.lua and redlock_fence.lua. Grant state and renewal come
 * from the shared layer (hold.c, renewal.c through the hold's renew_fn). */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base.h"
#include "family.h"
#include "net.h"
#include "route.h"
#include "scripts.h"

static const hilock__family family;

#define NODE_MAX HILOCK_REDLOCK_MAX_NODES
#define ROUND_ARGS 12
#define RETRY_DELAY_DEFAULT_MS 200
#define RETRY_DELAY_MAX_MS 60000
#define NODE_TIMEOUT_DEFAULT_MS 50
#define STALE_MAX 32 /* late replies a slow node may owe */

typedef struct rl_node {
  hilock__url url;
  hilock__tls *tls; /* rediss: the node's TLS configuration */
  char addr[200]; /* host:port or socket path, for messages */
} rl_node;

/* One connection to one node, and the outcome of the current round on it. */
typedef struct rl_conn {
  hilock__net *ctx;
  pid_t pid;      /* process that opened it */
  int connecting; /* non-blocking connect not yet complete */
  int wpending;   /* output buffered but not yet written */
  int expect;     /* replies still to come */
  int skip;       /* of which the first are setup replies (AUTH, SELECT) */
  int stale;      /* of the rest, replies of earlier rounds to discard */
  hilock__req q;  /* this round's command on this node (its NOSCRIPT state) */
  int fresh;      /* opened in this round */
  int resent;     /* reconnected and resent in this round */
  int rc;         /* HILOCK_OK, or this node's failure in the round */
  int64_t deadline; /* the round's end (a host name's resolution too) */
  redisReply *reply;
  char err[240];
} rl_conn;

struct hilock_redlock {
  hilock__hold h; /* first: grant state and last error */
  hilock__runtime rt; /* options, renewal thread, fork handling */
  int n, quorum;
  rl_node node[NODE_MAX];
  rl_conn conn[NODE_MAX];  /* the caller's connections */
  rl_conn rconn[NODE_MAX]; /* the renewal thread's connections */
  char *key, *fkey;
  size_t keylen, fkeylen;
  int64_t node_timeout_ms;
  int64_t retry_delay_ms;
};

/* ## Messages ------------------------------------------------------------ */

/* Copy src into dst[size], truncating. */
static void copy_text(char *dst, size_t size, const char *src) {
  size_t n = strlen(src);
  if (n >= size) n = size - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* printf-style checking of the error setters' messages below. */
#if defined(__GNUC__)
#define RL_PRINTF __attribute__((format(printf, 3, 4)))
#else
#define RL_PRINTF
#endif

/* Record the failure in the handle's one error slot (its hold's). */
static RL_PRINTF int fail(hilock_redlock *rl, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  hilock__vset_err(&rl->h.err, code, fmt, ap);
  va_end(ap);
  return code;
}

/* fail, then "; addr: error" for every node that failed the round (as many
 * as fit). */
static RL_PRINTF int fail_nodes(hilock_redlock *rl, int code, const char *fmt,
                                ...) {
  va_list ap;
  va_start(ap, fmt);
  hilock__vset_err(&rl->h.err, code, fmt, ap);
  va_end(ap);
  for (int i = 0; i < rl->n; i++)
    if (rl->conn[i].rc < 0)
      hilock__err_append(&rl->h.err, "; %s: %s", rl->node[i].addr,
                         rl->conn[i].err);
  return code;
}

/* HILOCK_ENOQUORUM for what: how many nodes answered, and each node's
 * error. */
static int no_quorum(hilock_redlock *rl, const char *what, int answered) {
  return fail_nodes(rl, HILOCK_ENOQUORUM,
                    "%s: %d of %d nodes answered, %d needed", what, answered,
                    rl->n, rl->quorum);
}

/* Record the first failure of a node in this round. */
static RL_PRINTF void node_fail(rl_conn *k, int code, const char *fmt, ...) {
  va_list ap;
  if (k->rc < 0) return;
  k->rc = code;
  va_start(ap, fmt);
  vsnprintf(k->err, sizeof(k->err), fmt, ap);
  va_end(ap);
  if (k->reply != NULL) {
    freeReplyObject(k->reply);
    k->reply = NULL;
  }
}

/* ## Connections ---------------------------------------------------------- */

/* Forget the connection. free_ctx = 0 leaks it instead (a forked child's
 * copy that another thread of the parent may have been using). */
static void conn_drop(rl_conn *k, int free_ctx) {
  if (k->ctx != NULL && free_ctx) hilock__net_free(k->ctx);
  k->ctx = NULL;
  k->connecting = k->wpending = k->expect = k->skip = k->stale = 0;
}

static void conns_clear(rl_conn *set, int n) {
  for (int i = 0; i < n; i++) {
    if (set[i].reply != NULL) freeReplyObject(set[i].reply);
    set[i].reply = NULL;
  }
}

static const hilock__script *const preload[] = {
    &hilock__script_lock_acquire, &hilock__script_lock_extend,
    &hilock__script_redlock_release, &hilock__script_redlock_fence};

/* Queue a SCRIPT LOAD of every script the rounds send, as setup replies
 * (skipped). -1 out of memory. */
static int load_scripts(rl_conn *k) {
  for (size_t j = 0; j < sizeof(preload) / sizeof(preload[0]); j++) {
    const char *argv[3] = {"SCRIPT", "LOAD", preload[j]->src};
    size_t lens[3] = {6, 4, preload[j]->len};
    if (hilock__net_append(k->ctx, 3, argv, lens) != 0) return -1;
    k->expect++;
    k->skip++;
  }
  return 0;
}

/* Open a non-blocking connection to node i if there is none, queueing its
 * AUTH, SELECT and SCRIPT LOADs. Nothing is written yet. */
static int conn_open(hilock_redlock *rl, int i, rl_conn *k, int leak_forked) {
  const hilock__url *u = &rl->node[i].url;
  hilock__net *ctx;
  hilock__addr a;
  hilock__hello hello;
  if (k->ctx != NULL && k->pid != hilock__pid()) conn_drop(k, !leak_forked);
  if (k->ctx != NULL && k->ctx->err) conn_drop(k, 1);
  if (k->ctx != NULL) return HILOCK_OK;
  a.path = u->unix_socket ? u->path : NULL;
  a.host = u->host;
  a.port = u->port;
  ctx = hilock__net_start(&a, rl->node[i].tls, k->deadline);
  if (ctx == NULL) {
    node_fail(k, HILOCK_ENOMEM, "out of memory");
    return k->rc;
  }
  if (ctx->err) {
    node_fail(k, hilock__net_status(ctx), "%s", ctx->errstr);
    hilock__net_free(ctx);
    return k->rc;
  }
  k->ctx = ctx;
  k->pid = hilock__pid();
  k->fresh = 1;
  k->connecting = !hilock__net_ready(ctx);
  k->expect = k->skip = k->stale = 0;
  hilock__hello_init(&hello, u->user, u->password, u->db);
  for (int j = 0; j < hello.n; j++) {
    if (hilock__req_append(ctx, &hello.q[j]) != 0) goto nomem;
    k->expect++;
    k->skip++;
  }
  /* Load the scripts with the connection, so that EVALSHA finds them even
   * on a node that restarted and whose reply a round no longer waits for. */
  if (load_scripts(k) != 0) goto nomem;
  return HILOCK_OK;
nomem:
  conn_drop(k, 1);
  node_fail(k, HILOCK_ENOMEM, "out of memory");
  return k->rc;
}

/* A reply of the round arrived on k. */
static void on_reply(rl_conn *k, redisReply *r) {
  hilock__err e;
  k->expect--;
  if (r->type == REDIS_REPLY_ERROR) {
    int code = hilock__reply_error(&e, r->str, r->len);
    if (k->skip == 0 && k->stale > 0) {
      k->stale--; /* a late reply of an earlier round */
    } else if (k->skip > 0) {
      /* AUTH or SELECT refused: the command behind it fails too. */
      if (code == HILOCK__NOSCRIPT) code = HILOCK_EREDIS;
      k->skip--;
      node_fail(k, code, "%s", e.msg);
    } else if (k->rc >= 0 && hilock__req_noscript(&k->q, r)) {
      /* Flushed cache or restarted node: load every script again (a later
       * round this one does not wait for, a release, must find its own)
       * and EVAL this one with its source. */
      if (load_scripts(k) == 0 && hilock__req_append(k->ctx, &k->q) == 0) {
        k->expect++;
        k->wpending = 1;
      } else {
        node_fail(k, HILOCK_ENOMEM, "out of memory");
      }
    } else {
      if (code == HILOCK__NOSCRIPT) code = HILOCK_ESCRIPT;
      node_fail(k, code, "%s", e.msg);
    }
    freeReplyObject(r);
    return;
  }
  if (k->skip > 0) {
    k->skip--;
    freeReplyObject(r);
    return;
  }
  if (k->stale > 0) {
    k->stale--;
    freeReplyObject(r);
    return;
  }
  if (k->rc >= 0 && k->reply == NULL)
    k->reply = r;
  else
    freeReplyObject(r);
}

/* Take the replies k's reader holds. */
static void take_replies(rl_conn *k) {
  while (k->ctx != NULL && k->expect > 0) {
    void *r = NULL;
    if (hilock__net_reply(k->ctx, &r) != 0) {
      node_fail(k, HILOCK_EPROTO, "reply: %s", k->ctx->errstr);
      conn_drop(k, 1);
      return;
    }
    if (r == NULL) return;
    on_reply(k, r);
  }
}

/* Queue k->q on node i's connection (opening one if needed). */
static void send_cmd(hilock_redlock *rl, int i, rl_conn *k, int leak_forked) {
  if (conn_open(rl, i, k, leak_forked) != HILOCK_OK) return;
  if (hilock__req_append(k->ctx, &k->q) != 0) {
    conn_drop(k, 1);
    node_fail(k, HILOCK_ENOMEM, "out of memory");
    return;
  }
  k->expect++;
  k->wpending = 1;
  if (!k->connecting) {
    /* Write at once: the socket almost always takes it, which saves a
     * poll before the request leaves. */
    if (hilock__net_handle(k->ctx, POLLOUT) == 0 && k->ctx->olen == 0)
      k->wpending = 0;
  }
}

/* A connection broke. One that was reused from an earlier round (the node
 * restarted, or closed it while idle) is replaced and the command sent once
 * more: every script is safe to resend. Returns 1 if resent. */
static int resend(hilock_redlock *rl, int i, rl_conn *k, int leak_forked) {
  if (k->fresh || k->resent || k->rc < 0) return 0;
  conn_drop(k, 1);
  k->resent = 1;
  send_cmd(rl, i, k, leak_forked);
  return 1;
}

/* Send q (a request as hilock__route takes it: a script's NOSCRIPT is
 * answered with EVAL) to every node at once and collect the replies until
 * each node answered or timeout_ms passed. Per node afterwards: set[i].rc
 * (HILOCK_OK with set[i].reply, or the node's failure with set[i].err). */
typedef struct rl_goal {
  int need; /* stop once this many nodes gave a counting reply (0: never) */
  int (*counts)(const redisReply *r, uint64_t arg);
  uint64_t arg;
} rl_goal;

static int goal_met(const rl_goal *g, const rl_conn *set, int n) {
  int got = 0;
  if (g == NULL || g->need <= 0) return 0;
  for (int i = 0; i < n; i++)
    if (set[i].rc >= 0 && set[i].reply != NULL &&
        g->counts(set[i].reply, g->arg))
      got++;
  return got >= g->need;
}

static void round_run(hilock_redlock *rl, rl_conn *set, int leak_forked,
                      const hilock__req *q, int64_t timeout_ms,
                      const rl_goal *goal) {
  struct pollfd pfd[NODE_MAX];
  int idx[NODE_MAX];
  int64_t deadline = hilock__now_ms() + timeout_ms;
  int n = rl->n, met = 0;

  for (int i = 0; i < n; i++) {
    rl_conn *k = &set[i];
    k->rc = HILOCK_OK;
    k->err[0] = '\0';
    k->fresh = k->resent = 0;
    k->deadline = deadline;
    k->q = *q;
    if (k->reply != NULL) freeReplyObject(k->reply);
    k->reply = NULL;
    send_cmd(rl, i, k, leak_forked);
  }

  for (;;) {
    int nfds = 0, ready;
    int64_t left;
    for (int i = 0; i < n; i++) {
      rl_conn *k = &set[i];
      /* A TLS connection reads whatever has arrived each time it is
       * handled (a write included), so a whole reply may wait in its
       * reader with nothing more to come on the socket: poll would not
       * report it. */
      if (k->ctx != NULL && k->expect > 0) take_replies(k);
      if (k->ctx == NULL || (k->expect == 0 && !k->wpending)) continue;
      pfd[nfds].fd = k->ctx->fd;
      pfd[nfds].events = hilock__net_events(k->ctx);
      pfd[nfds].revents = 0;
      idx[nfds++] = i;
    }
    if (nfds == 0) break;
    /* Decided: a majority answered as hoped. The rest are not waited for;
     * their replies are discarded by the next round. */
    if (goal_met(goal, set, n)) {
      met = 1;
      break;
    }
    left = deadline - hilock__now_ms();
    if (left <= 0) break;
    ready = poll(pfd, (nfds_t)nfds, (int)(left > 1000 ? 1000 : left));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    for (int j = 0; j < nfds; j++) {
      rl_conn *k = &set[idx[j]];
      short ev = pfd[j].revents;
      if (ev == 0) continue;
      if (hilock__net_handle(k->ctx, ev) != 0) {
        /* Connecting (or the TLS handshake) failed: nothing was sent. A
         * reused connection that broke is replaced and the command sent
         * once more. */
        if (!k->connecting &&
            resend(rl, idx[j], k, leak_forked))
          continue;
        node_fail(k, hilock__net_status(k->ctx), "%s", k->ctx->errstr);
        conn_drop(k, 1);
        continue;
      }
      k->connecting = !hilock__net_ready(k->ctx);
      k->wpending = k->ctx->olen > 0;
      take_replies(k);
    }
  }
  /* A slow node keeps its connection: what was sent still runs there, in
   * order, so the next round's command (a release after a failed acquire)
   * runs after it. Its late replies are discarded. A connection still
   * connecting has sent nothing and is dropped, as is one far behind. */
  for (int i = 0; i < n; i++) {
    rl_conn *k = &set[i];
    if (k->ctx == NULL || (k->expect == 0 && !k->wpending)) continue;
    if (k->connecting) {
      if (!met)
        node_fail(k, HILOCK_ETIMEDOUT, "connect: no answer within %lld ms",
                  (long long)timeout_ms);
      conn_drop(k, 1);
      continue;
    }
    /* met: the node is pending (rc OK, no reply), not failed. */
    if (!met)
      node_fail(k, HILOCK_ETIMEDOUT, "no reply within %lld ms",
                (long long)timeout_ms);
    k->stale = k->expect - k->skip;
    if (k->stale > STALE_MAX) conn_drop(k, 1);
  }
}

static void script_round(hilock_redlock *rl, rl_conn *set, int leak_forked,
                         const hilock__script *s, int nkeys,
                         const char **keys, const size_t *keylens, int nargs,
                         const char **args, const size_t *arglens,
                         const rl_goal *goal) {
  const char *argv[ROUND_ARGS + 3]; /* at most ROUND_ARGS keys and args */
  size_t lens[ROUND_ARGS + 3];
  char nk[24];
  hilock__req q;
  hilock__req_script(&q, s, nkeys, keys, keylens, nargs, args, arglens, nk,
                     argv, lens);
  round_run(rl, set, leak_forked, &q, rl->node_timeout_ms, goal);
}

static int is_grant(const redisReply *r, uint64_t arg) {
  (void)arg;
  return r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
         r->element[0]->type == REDIS_REPLY_INTEGER &&
         r->element[1]->type == REDIS_REPLY_INTEGER &&
         r->element[0]->integer == 1;
}

/* An integer reply >= arg. */
static int int_at_least(const redisReply *r, uint64_t arg) {
  return r->type == REDIS_REPLY_INTEGER && r->integer >= (long long)arg;
}

/* An integer reply of a node, or mark the node failed. */
static int reply_int(rl_conn *k, long long *v) {
  if (k->rc < 0 || k->reply == NULL) return 0; /* failed, or not waited for */
  if (k->reply->type != REDIS_REPLY_INTEGER) {
    node_fail(k, HILOCK_EPROTO, "unexpected reply");
    return 0;
  }
  *v = k->reply->integer;
  return 1;
}

static int renew_fn(hilock__hold *h, void *arg);

/* ## Construction ---------------------------------------------------------- */

static int64_t default_node_timeout(int64_t ttl_ms) {
  int64_t t = ttl_ms / 10;
  if (t > NODE_TIMEOUT_DEFAULT_MS) t = NODE_TIMEOUT_DEFAULT_MS;
  return t < 1 ? 1 : t;
}

/* Every node at once answers PING (a minority may be down): HILOCK_OK, or
 * the constructor's failure (a node refused the credentials or TLS; fewer
 * than a majority answered), set on rl. */
static int nodes_answer(hilock_redlock *rl) {
  const char *argv[1] = {"PING"};
  size_t lens[1] = {4};
  hilock__req q = {.argc = 1, .argv = argv, .lens = lens};
  int ok = 0, refused = 0;
  round_run(rl, rl->conn, 0, &q, rl->rt.opts.connect_timeout_ms, NULL);
  for (int i = 0; i < rl->n; i++) {
    if (rl->conn[i].rc == HILOCK_OK) ok++;
    else if (rl->conn[i].rc == HILOCK_EAUTH ||
             rl->conn[i].rc == HILOCK_ENOPERM ||
             rl->conn[i].rc == HILOCK_ECERT || rl->conn[i].rc == HILOCK_ETLS)
      refused = rl->conn[i].rc;
  }
  conns_clear(rl->conn, rl->n);
  if (refused)
    return fail_nodes(rl, refused, "redlock: %s",
                      refused == HILOCK_ECERT || refused == HILOCK_ETLS
                          ? "TLS failed on a node"
                          : "a node refused the credentials");
  if (ok < rl->quorum) return no_quorum(rl, "redlock", ok);
  return HILOCK_OK;
}

int hilock_redlock_new(const char *const *urls, size_t n, const char *name,
                       size_t namelen, int64_t ttl_ms,
                       const hilock_options *opts, hilock_redlock **out) {
  hilock_redlock *rl;
  hilock_options tls_opts;
  hilock__err tmp;
  int rc;

  if (out == NULL) return HILOCK_EINVAL;
  *out = NULL;
  rl = calloc(1, sizeof(*rl));
  if (rl == NULL) return HILOCK_ENOMEM;
  if (hilock__runtime_init(&rl->rt, NULL) != 0) {
    free(rl);
    return HILOCK_ENOMEM;
  }
  /* The hold is live from here on, so hilock_hold_free always works. */
  hilock__hold_init_rt(&rl->h, &rl->rt, NULL, 0, &hilock__script_lock_extend,
                       ttl_ms > 0 ? ttl_ms : 1);
  rl->h.fam = &family;
  *out = rl;
  rc = HILOCK_OK;
  if (opts != NULL && !hilock__options_ok(opts))
    rc = hilock__set_err(&tmp, HILOCK_EINVAL,
                         "bad client options (timeouts must be >= 1 ms to "
                         "connect, >= 0 otherwise)");
  else if (opts != NULL)
    rl->rt.opts = *opts;
  if (rc == HILOCK_OK) rc = hilock__runtime_prefix(&rl->rt, &tmp);
  /* TLS options are read here, into each node's configuration: the
   * strings stay the caller's. */
  tls_opts = rl->rt.opts;
  rl->rt.opts.ssl_ca_certs = rl->rt.opts.ssl_ca_path = NULL;
  rl->rt.opts.ssl_certfile = rl->rt.opts.ssl_keyfile = NULL;
  rl->rt.opts.ssl_password = rl->rt.opts.ssl_server_name = NULL;
  if (rc != HILOCK_OK) return fail(rl, rc, "%s", tmp.msg);
  if (urls == NULL || n == 0 || n > NODE_MAX)
    return fail(rl, HILOCK_EINVAL, "a Redlock needs 1 to %d node URLs",
                NODE_MAX);
  rc = hilock__check_name(&tmp, name, namelen);
  if (rc == HILOCK_OK) rc = hilock__check_ttl(&tmp, ttl_ms);
  if (rc != HILOCK_OK) return fail(rl, rc, "%s", tmp.msg);
  rl->n = (int)n;
  rl->quorum = (int)n / 2 + 1;
  for (size_t i = 0; i < n; i++) {
    rl_node *nd = &rl->node[i];
    if (urls[i] == NULL)
      return fail(rl, HILOCK_EINVAL, "node %zu: URL is NULL", i);
    rc = hilock__url_parse(urls[i], &nd->url, &tmp);
    if (rc == HILOCK_OK) {
      rc = hilock__tls_for(&tls_opts, &nd->url, &nd->tls, &tmp);
      if (rc != HILOCK_OK) hilock__url_clear(&nd->url);
    }
    if (rc != HILOCK_OK) {
      rl->n = (int)i; /* parsed so far, for free */
      return fail(rl, rc, "node %zu: %s", i, tmp.msg);
    }
    for (size_t j = 0; j < i; j++)
      if (hilock__url_same_server(
              &rl->node[j].url, &nd->url, !rl->rt.opts.connect_later,
              hilock__now_ms() + rl->rt.opts.connect_timeout_ms)) {
        rl->n = (int)i + 1;
        return fail(rl, HILOCK_EINVAL,
                    "nodes %zu and %zu name the same server and database: a "
                    "Redlock needs independent masters",
                    j, i);
      }
    if (nd->url.unix_socket)
      copy_text(nd->addr, sizeof(nd->addr), nd->url.path);
    else if (strchr(nd->url.host, ':') != NULL)
      snprintf(nd->addr, sizeof(nd->addr), "[%s]:%d", nd->url.host,
               nd->url.port);
    else
      snprintf(nd->addr, sizeof(nd->addr), "%s:%d", nd->url.host,
               nd->url.port);
  }
  rl->key = hilock__key(&rl->rt, name, namelen, "redlock", &rl->keylen);
  rl->fkey = hilock__key(&rl->rt, name, namelen, "fence", &rl->fkeylen);
  if (rl->key == NULL || rl->fkey == NULL)
    return fail(rl, HILOCK_ENOMEM, "out of memory");
  rl->h.rkey = rl->key;
  rl->h.rkeylen = rl->keylen;
  rl->h.ttl_ms = ttl_ms;
  rl->h.renew_fn = renew_fn;
  rl->h.renew_arg = rl;
  rl->node_timeout_ms = default_node_timeout(ttl_ms);
  rl->retry_delay_ms = RETRY_DELAY_DEFAULT_MS;

  /* With connect_later, the first call finds out. */
  if (!rl->rt.opts.connect_later && (rc = nodes_answer(rl)) != HILOCK_OK)
    return rc;
  hilock__clear_err(&rl->h.err);
  return HILOCK_OK;
}

static void fam_free(void *arg) {
  hilock_redlock *rl = arg;
  if (rl == NULL) return;
  hilock__hold_destroy(&rl->h);
  for (int i = 0; i < NODE_MAX; i++) {
    /* A forked child's copies may be mid-use by the parent's threads. */
    conn_drop(&rl->conn[i], rl->conn[i].pid == hilock__pid());
    conn_drop(&rl->rconn[i], rl->rconn[i].pid == hilock__pid());
    conns_clear(&rl->conn[i], 1);
    conns_clear(&rl->rconn[i], 1);
    hilock__url_clear(&rl->node[i].url);
    hilock__tls_free(rl->node[i].tls);
  }
  hilock__runtime_destroy(&rl->rt);
  free(rl->key);
  free(rl->fkey);
  free(rl);
}

/* ## Acquire ------------------------------------------------------------ */

static void release_round(hilock_redlock *rl, uint64_t fence) {
  const char *keys[2] = {rl->key, rl->fkey};
  size_t keylens[2] = {rl->keylen, rl->fkeylen};
  char fbuf[24];
  const char *args[2] = {rl->h.owner, fbuf};
  size_t arglens[2] = {rl->h.ownerlen, hilock__i64(fbuf, (int64_t)fence)};
  rl_goal goal = {fence ? rl->quorum : 0, int_at_least, 1};
  script_round(rl, rl->conn, 0, &hilock__script_redlock_release, 2, keys,
               keylens, 2, args, arglens, &goal);
}

/* Write fence to every node's counter; 1 if a majority confirmed. */
static int fence_round(hilock_redlock *rl, uint64_t fence) {
  const char *keys[1] = {rl->fkey};
  size_t keylens[1] = {rl->fkeylen};
  char fbuf[24];
  const char *args[1] = {fbuf};
  size_t arglens[1] = {hilock__i64(fbuf, (int64_t)fence)};
  int ok = 0;
  rl_goal goal = {rl->quorum, int_at_least, fence};
  script_round(rl, rl->conn, 0, &hilock__script_redlock_fence, 1, keys,
               keylens, 1, args, arglens, &goal);
  for (int i = 0; i < rl->n; i++) {
    long long v;
    if (reply_int(&rl->conn[i], &v) && v >= (long long)fence) ok++;
  }
  return ok >= rl->quorum;
}

/* One attempt: HILOCK_OK, HILOCK_BUSY, HILOCK_ENOQUORUM, HILOCK_ETIMEDOUT
 * (granted, but too late), or an error. */
static int attempt(hilock_redlock *rl) {
  hilock__hold *h = &rl->h;
  const char *keys[2] = {rl->key, rl->fkey};
  size_t keylens[2] = {rl->keylen, rl->fkeylen};
  char ttl[24];
  const char *args[2];
  size_t arglens[2];
  int granted = 0, busy = 0, failed = 0, rc;
  uint64_t fmax = 0, fmin = UINT64_MAX;
  int64_t start, drift = hilock__hold_drift_us(h->ttl_ms);
  rl_goal goal = {rl->quorum, is_grant, 0};

  if (h->held && h->pid == hilock__pid() && hilock__hold_validity_ms(h) > 0)
    return fail(rl, HILOCK_EINVAL,
                "this handle already holds the lock; release it first (the "
                "lock is not reentrant)");
  hilock__hold_lapse(h);
  hilock__hold_drop(h);
  rc = hilock__token(h->owner, &h->err);
  if (rc != HILOCK_OK) return rc;
  h->ownerlen = HILOCK__TOKEN_LEN;
  args[0] = h->owner;
  arglens[0] = HILOCK__TOKEN_LEN;
  args[1] = ttl;
  arglens[1] = hilock__i64(ttl, h->ttl_ms);

  start = hilock__now_us();
  script_round(rl, rl->conn, 0, &hilock__script_lock_acquire, 2, keys,
               keylens, 2, args, arglens, &goal);
  for (int i = 0; i < rl->n; i++) {
    rl_conn *k = &rl->conn[i];
    redisReply *r = k->reply;
    if (k->rc < 0) {
      failed++;
    } else if (r == NULL) {
      continue; /* not waited for: a majority had granted already */
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
               r->element[0]->type != REDIS_REPLY_INTEGER ||
               r->element[1]->type != REDIS_REPLY_INTEGER) {
      /* Fail closed: an unreadable reply is never a grant. */
      node_fail(k, HILOCK_EPROTO, "unexpected reply to the acquire script");
      failed++;
    } else if (r->element[0]->integer == 1) {
      uint64_t f = (uint64_t)r->element[1]->integer;
      granted++;
      if (f > fmax) fmax = f;
      if (f < fmin) fmin = f;
    } else {
      busy++;
    }
  }

  if (granted >= rl->quorum &&
      hilock__now_us() - start < h->ttl_ms * 1000 - drift) {
    /* The majority's counters disagree (a node was down or restarted):
     * store the largest on a majority first, so the next grant counts
     * past it. */
    if (fmin != fmax && !fence_round(rl, fmax)) {
      rc = fail_nodes(rl, HILOCK_ENOQUORUM,
                      "acquire: granted on %d of %d nodes, but fewer than %d "
                      "stored the fence %llu",
                      granted, rl->n, rl->quorum, (unsigned long long)fmax);
    } else if (hilock__now_us() - start >= h->ttl_ms * 1000 - drift) {
      rc = fail(rl, HILOCK_ETIMEDOUT,
                "acquire: the majority answered after the validity ran out");
    } else {
      conns_clear(rl->conn, rl->n);
      rc = hilock__hold_granted(h, start, fmax);
      if (rc != HILOCK_OK) {
        release_round(rl, 0);
        conns_clear(rl->conn, rl->n);
        hilock__hold_drop(h);
      }
      return rc;
    }
  } else if (granted >= rl->quorum) {
    rc = fail(rl, HILOCK_ETIMEDOUT,
              "acquire: granted on %d of %d nodes after the validity (ttl "
              "%lld ms less drift) ran out",
              granted, rl->n, (long long)h->ttl_ms);
  } else if (busy > rl->n - rl->quorum) {
    rc = fail(rl, HILOCK_BUSY,
              "acquire: held by another owner on %d of %d nodes", busy,
              rl->n);
  } else {
    rc = fail_nodes(rl, HILOCK_ENOQUORUM,
                    "acquire: granted on %d, held elsewhere on %d, failed on "
                    "%d of %d nodes; %d needed",
                    granted, busy, failed, rl->n, rl->quorum);
  }
  /* Not granted: take the token off every node, including those that
   * failed or were slow (they may have set it after all). */
  if (granted > 0 || failed > 0) release_round(rl, 0);
  conns_clear(rl->conn, rl->n);
  hilock__hold_drop(h);
  return rc;
}

static int try_acquire_fn(void *x) {
  hilock_redlock *rl = x;
  return hilock__stat_try(&rl->rt, attempt(rl));
}

/* Sleep ms, asking the interrupt hook about every 100 ms. */
static int pause_ms(hilock_redlock *rl, int64_t ms) {
  const hilock_options *o = &rl->rt.opts;
  int64_t until = hilock__now_ms() + ms;
  for (;;) {
    int64_t left = until - hilock__now_ms();
    if (o->interrupt != NULL && o->interrupt(o->interrupt_arg))
      return fail(rl, HILOCK_EINTR, "acquire: interrupted");
    if (left <= 0) return HILOCK_OK;
    hilock__sleep_ms(left > 100 ? 100 : left);
  }
}

/* ## Acquire as a spec (async.c) ------------------------------------------ */

typedef struct spec_ctx {
  hilock_redlock *rl;
  int64_t noquorum_since;
  int last; /* the last round's own result */
} spec_ctx;

/* One round, with acquire_fn's rules: a refusal, a round
 * granted too late and a missing quorum (within the reconnect budget) are
 * tried again after the retry delay, which goes out as the bound. */
static int spec_attempt(void *arg, int64_t *bound) {
  spec_ctx *x = arg;
  hilock_redlock *rl = x->rl;
  int rc = attempt(rl);
  x->last = rc;
  if (rc != HILOCK_BUSY && rc != HILOCK_ENOQUORUM && rc != HILOCK_ETIMEDOUT)
    return rc;
  if (rc != HILOCK_ENOQUORUM)
    x->noquorum_since = 0;
  else if (x->noquorum_since == 0)
    x->noquorum_since = hilock__now_ms();
  else if (hilock__now_ms() - x->noquorum_since >= rl->rt.opts.reconnect_ms)
    return rc;
  *bound = hilock__jitter(rl->retry_delay_ms > 0 ? 1 : 0, rl->retry_delay_ms) - 1;
  if (*bound < 0) *bound = 0;
  return HILOCK_BUSY;
}

/* The wait ran out after a round without a quorum: that is the answer. */
static int spec_done(void *arg, int status) {
  spec_ctx *x = arg;
  if (status == HILOCK_BUSY && x->last == HILOCK_ENOQUORUM)
    status = HILOCK_ENOQUORUM;
  free(x);
  return status;
}

int hilock__redlock_spec(hilock_redlock *rl, hilock__acquire_spec *s) {
  spec_ctx *x = calloc(1, sizeof(*x));
  if (x == NULL) return -1;
  x->rl = rl;
  memset(s, 0, sizeof(*s));
  s->attempt = spec_attempt;
  s->arg = x;
  s->done = spec_done; /* no wake list: it waits by its retry delay */
  return 0;
}

static void acquire_spec(void *arg, hilock__acquire_spec *s) {
  if (hilock__redlock_spec(arg, s) != 0) s->arg = NULL;
}

/* The blocking acquire; *waited_us: when it first paused (0: never). */
static int acquire_wait(hilock_redlock *rl, int64_t wait_ms,
                        int64_t *waited_us) {
  int64_t deadline, noquorum_since = 0;
  if (wait_ms < 0 && wait_ms != HILOCK_WAIT_FOREVER)
    return fail(rl, HILOCK_EINVAL, "wait must be >= 0 ms or forever");
  /* In us, so that the wait is never cut short by ms rounding. */
  deadline = wait_ms < 0 || wait_ms > HILOCK__WAIT_CAP_MS
                 ? INT64_MAX
                 : hilock__now_us() + wait_ms * 1000;
  for (;;) {
    int rc = attempt(rl), prc;
    int64_t left, delay;
    if (rc != HILOCK_BUSY && rc != HILOCK_ENOQUORUM && rc != HILOCK_ETIMEDOUT)
      return rc;
    /* Too few nodes answering is retried for the client's reconnect budget
     * at most, as a broken connection is: a lasting outage is an error,
     * not a wait. */
    if (rc != HILOCK_ENOQUORUM) {
      noquorum_since = 0;
    } else if (noquorum_since == 0) {
      noquorum_since = hilock__now_ms();
    } else if (hilock__now_ms() - noquorum_since >=
               rl->rt.opts.reconnect_ms) {
      return rc;
    }
    left = deadline == INT64_MAX
               ? INT64_MAX
               : (deadline - hilock__now_us() + 999) / 1000;
    if (left <= 0) return rc == HILOCK_ETIMEDOUT ? HILOCK_BUSY : rc;
    delay = hilock__jitter(rl->retry_delay_ms > 0 ? 1 : 0, rl->retry_delay_ms);
    if (delay > left) delay = left;
    if (*waited_us == 0) *waited_us = hilock__now_us();
    prc = pause_ms(rl, delay);
    if (prc != HILOCK_OK) return prc;
  }
}

static int acquire_fn(void *x, int64_t wait_ms) {
  hilock_redlock *rl = x;
  int64_t waited_us = 0;
  int rc;
  rc = acquire_wait(rl, wait_ms, &waited_us);
  return hilock__stat_acquire(&rl->rt, rc, wait_ms, waited_us, waited_us != 0);
}

/* ## Release, extend, renew ----------------------------------------------- */

static int release_fn(void *x) {
  hilock_redlock *rl = x;
  int deleted = 0, gone = 0, failed = 0, lost, rc;
  rc = hilock__hold_check(&rl->h, "release");
  if (rc != HILOCK_OK) return rc;
  hilock__renewal_cancel(&rl->h);
  release_round(rl, rl->h.fence);
  for (int i = 0; i < rl->n; i++) {
    long long v;
    if (reply_int(&rl->conn[i], &v)) {
      if (v == 1) deleted++;
      else gone++;
    } else {
      failed++;
    }
  }
  lost = hilock__hold_is_lost(&rl->h);
  if (deleted >= rl->quorum) {
    rc = HILOCK_OK;
  } else if (gone > rl->n - rl->quorum) {
    /* Not ours on more nodes than a grant can spare: it had lapsed. */
    rc = fail(rl, HILOCK_ENOTOWNED,
              "release: the lock expired or another owner holds it on %d of "
              "%d nodes; deleted on %d",
              gone, rl->n, deleted);
  } else if (!lost && deleted > 0 && deleted + gone >= rl->quorum) {
    /* A live grant, and a majority answered with none of them holding our
     * token any more: the grant was on a majority that included nodes now
     * unreachable, and some that answered never had it (a grant does not
     * wait for every node). What is left is on a minority, until its TTL. */
    rc = HILOCK_OK;
  } else {
    rc = fail_nodes(rl, HILOCK_ENOQUORUM,
                    "release: deleted on %d of %d nodes, %d needed; the rest "
                    "lapse at their TTL",
                    deleted, rl->n, rl->quorum);
  }
  hilock__hold_ended(&rl->h, rc == HILOCK_ENOTOWNED);
  conns_clear(rl->conn, rl->n);
  return rc;
}

/* Run the extend script on every node of set; *ttls gets the confirmed
 * TTLs (descending), returns how many confirmed; *gone how many no longer
 * hold the token. */
static int extend_round(hilock_redlock *rl, rl_conn *set, int leak_forked,
                        int64_t ms, int replace, int64_t *ttls, int *gone) {
  const char *keys[1] = {rl->key};
  size_t keylens[1] = {rl->keylen};
  char buf[24];
  const char *args[3] = {rl->h.owner, buf, replace ? "set" : "add"};
  size_t arglens[3] = {rl->h.ownerlen, hilock__i64(buf, ms), 3};
  int ok = 0;
  *gone = 0;
  rl_goal goal = {rl->quorum, int_at_least, 1};
  script_round(rl, set, leak_forked, &hilock__script_lock_extend, 1, keys,
               keylens, 3, args, arglens, &goal);
  for (int i = 0; i < rl->n; i++) {
    long long v;
    if (!reply_int(&set[i], &v)) continue;
    /* A node's TTL past the longest a hold may have (a broken or hostile
     * node) counts as that: the timing checks work in microseconds. */
    if (v > HILOCK_TTL_MAX_MS) v = HILOCK_TTL_MAX_MS;
    if (v > 0) {
      int j = ok++;
      /* insertion sort, largest first */
      while (j > 0 && ttls[j - 1] < v) {
        ttls[j] = ttls[j - 1];
        j--;
      }
      ttls[j] = v;
    } else {
      (*gone)++;
    }
  }
  return ok;
}

static int extend_fn(void *x, int64_t ms, int replace) {
  hilock_redlock *rl = x;
  int64_t ttls[NODE_MAX], start, t;
  int ok, gone, rc;
  rc = hilock__check_ms(&rl->h.err, "extension", ms);
  if (rc == HILOCK_OK) rc = hilock__hold_check(&rl->h, "extend");
  if (rc != HILOCK_OK) return rc;
  start = hilock__now_us();
  ok = extend_round(rl, rl->conn, 0, ms, replace, ttls, &gone);
  if (ok >= rl->quorum) {
    /* Every node of some majority has at least the quorum-th largest TTL. */
    t = ttls[rl->quorum - 1];
    if (hilock__hold_validity_ms(&rl->h) <= 0) {
      hilock__hold_lost(&rl->h);
      rc = fail(rl, HILOCK_ENOTOWNED,
                "extend: the majority confirmed after the validity ran out");
    } else if (hilock__now_us() - start >=
               t * 1000 - hilock__hold_drift_us(t)) {
      rc = fail(rl, HILOCK_ETIMEDOUT,
                "extend: the majority confirmed too late to count");
    } else {
      hilock__hold_extended(&rl->h, start, t);
      rc = HILOCK_OK;
    }
  } else if (gone > rl->n - rl->quorum) {
    hilock__hold_lost(&rl->h);
    rc = fail(rl, HILOCK_ENOTOWNED,
              "extend: the lock expired or another owner holds it on %d of "
              "%d nodes",
              gone, rl->n);
  } else {
    rc = fail_nodes(rl, HILOCK_ENOQUORUM,
                    "extend: confirmed on %d of %d nodes, %d needed; the "
                    "validity is unchanged",
                    ok, rl->n, rl->quorum);
  }
  conns_clear(rl->conn, rl->n);
  return rc;
}

static int renew_fn2(void *x) {
  hilock_redlock *rl = x;
  return extend_fn(rl, rl->h.ttl_ms, 1);
}

/* The renewal thread's renew_fn: reset the TTL on every node through the
 * renewal connections. Touches neither the caller's connections nor the
 * handle's message. */
static int renew_fn(hilock__hold *h, void *arg) {
  hilock_redlock *rl = arg;
  int64_t ttls[NODE_MAX], start = hilock__now_us();
  int gone, ok;
  ok = extend_round(rl, rl->rconn, 1, h->ttl_ms, 1, ttls, &gone);
  conns_clear(rl->rconn, rl->n);
  if (ok >= rl->quorum &&
      hilock__now_us() - start < h->ttl_ms * 1000 -
                                     hilock__hold_drift_us(h->ttl_ms))
    return HILOCK__RENEWED;
  if (gone > rl->n - rl->quorum) return HILOCK__NOT_OWNED;
  return HILOCK__RENEW_FAILED;
}

/* ## Queries ------------------------------------------------------------ */

/* cmd on the key, on every node, on the caller's connections. */
static void key_round(hilock_redlock *rl, const char *cmd) {
  const char *argv[2] = {cmd, rl->key};
  size_t lens[2] = {strlen(cmd), rl->keylen};
  hilock__req q = {.argc = 2, .argv = argv, .lens = lens};
  round_run(rl, rl->conn, 0, &q, rl->node_timeout_ms, NULL);
}

static int fam_owned(void *arg, int *owned) {
  hilock_redlock *rl = arg;
  int mine = 0, other = 0;
  int rc = HILOCK_OK;
  if (rl == NULL || owned == NULL) return HILOCK_EINVAL;
  *owned = 0;
  if (!rl->h.held || rl->h.pid != hilock__pid()) return HILOCK_OK;
  key_round(rl, "GET");
  for (int i = 0; i < rl->n; i++) {
    rl_conn *k = &rl->conn[i];
    if (k->rc < 0 || k->reply == NULL) continue;
    if (k->reply->type == REDIS_REPLY_STRING &&
        k->reply->len == rl->h.ownerlen &&
        memcmp(k->reply->str, rl->h.owner, rl->h.ownerlen) == 0)
      mine++;
    else if (k->reply->type == REDIS_REPLY_STRING ||
             k->reply->type == REDIS_REPLY_NIL)
      other++;
    else
      node_fail(k, HILOCK_EPROTO, "unexpected reply to GET");
  }
  if (mine >= rl->quorum) {
    *owned = hilock__hold_validity_ms(&rl->h) > 0;
  } else if (other > rl->n - rl->quorum) {
    hilock__hold_lost(&rl->h);
  } else {
    rc = no_quorum(rl, "owned", mine + other);
  }
  conns_clear(rl->conn, rl->n);
  return rc;
}

static int fam_locked(void *arg, int *locked) {
  hilock_redlock *rl = arg;
  int yes = 0, no = 0, rc = HILOCK_OK;
  if (rl == NULL || locked == NULL) return HILOCK_EINVAL;
  *locked = 0;
  key_round(rl, "EXISTS");
  for (int i = 0; i < rl->n; i++) {
    long long v;
    if (!reply_int(&rl->conn[i], &v)) continue;
    if (v > 0) yes++;
    else no++;
  }
  if (yes >= rl->quorum) {
    *locked = 1;
  } else if (no > rl->n - rl->quorum) {
    *locked = 0;
  } else {
    rc = no_quorum(rl, "locked", yes + no);
  }
  conns_clear(rl->conn, rl->n);
  return rc;
}

int hilock_redlock_set_node_timeout(hilock_redlock *rl, int64_t ms) {
  if (rl == NULL) return HILOCK_EINVAL;
  if (ms < 1 || ms >= rl->h.ttl_ms)
    return fail(rl, HILOCK_EINVAL,
                "node timeout must be 1 ms .. ttl - 1 (%lld ms)",
                (long long)rl->h.ttl_ms - 1);
  rl->node_timeout_ms = ms;
  return HILOCK_OK;
}

int64_t hilock_redlock_node_timeout_ms(const hilock_redlock *rl) {
  return rl == NULL ? 0 : rl->node_timeout_ms;
}

int hilock_redlock_set_retry_delay(hilock_redlock *rl, int64_t ms) {
  if (rl == NULL) return HILOCK_EINVAL;
  if (ms < 0 || ms > RETRY_DELAY_MAX_MS)
    return fail(rl, HILOCK_EINVAL, "retry delay must be 0 .. %d ms",
                RETRY_DELAY_MAX_MS);
  rl->retry_delay_ms = ms;
  return HILOCK_OK;
}

size_t hilock_redlock_nodes(const hilock_redlock *rl) {
  return rl == NULL ? 0 : (size_t)rl->n;
}

size_t hilock_redlock_quorum(const hilock_redlock *rl) {
  return rl == NULL ? 0 : (size_t)rl->quorum;
}

const char *hilock_redlock_node_addr(const hilock_redlock *rl, size_t i) {
  if (rl == NULL || i >= (size_t)rl->n) return "";
  return rl->node[i].addr;
}


static const char *fam_key(const void *arg, size_t *len) {
  const hilock_redlock *rl = arg;
  if (len) *len = rl->key != NULL ? rl->keylen : 0;
  return rl->key != NULL ? rl->key : "";
}

static const hilock__family family = {
    .name = "Redlock", .acquire = acquire_fn, .try_acquire = try_acquire_fn,
    .free = fam_free, .owned = fam_owned, .locked = fam_locked, .key = fam_key,
    .acquire_spec = acquire_spec,
    .release = release_fn, .extend = extend_fn, .renew = renew_fn2};
