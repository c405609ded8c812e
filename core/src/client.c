/* The client: URL, connection pool, command execution with bounded
 * reconnect. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "fiber.h"
#include "route.h"

void hilock_options_init(hilock_options *opts) {
  if (opts == NULL) return;
  opts->connect_timeout_ms = 2000;
  opts->command_timeout_ms = 5000;
  opts->reconnect_ms = 3000;
  opts->max_idle = 8;
  opts->max_connections = 6;
  opts->interrupt = NULL;
  opts->interrupt_arg = NULL;
  opts->wait_replicas = 0;
  opts->wait_timeout_ms = 1000;
  opts->ssl_ca_certs = opts->ssl_ca_path = NULL;
  opts->ssl_certfile = opts->ssl_keyfile = opts->ssl_password = NULL;
  opts->ssl_cert_reqs = HILOCK_SSL_CERT_REQUIRED;
  opts->ssl_check_hostname = 1;
  opts->ssl_server_name = NULL;
  opts->shared_waiting = 1;
  opts->direct_waiters = 1;
  opts->key_prefix = NULL;
  opts->connect_later = 0;
  opts->detect_deadlocks = 0;
  opts->deadlock_timeout_ms = 1000;
}

int hilock_client_waiting(const hilock_client *c) {
  return c == NULL ? 0 : __atomic_load_n(&c->waiting, __ATOMIC_ACQUIRE);
}

/* The address of the server the single-server pool connects to: the URL's,
 * or where the sentinels say the master is now (*resolved, malloc'd, to be
 * freed by the caller). The one place that decides which address is the
 * master. */
static int master_addr(hilock_client *c, hilock__err *e, hilock__addr *a,
                       char **resolved) {
  *resolved = NULL;
  a->path = c->url.unix_socket ? c->url.path : NULL;
  a->host = c->url.host;
  a->port = c->url.port;
  if (c->url.sentinel) {
    int rc = hilock__sentinel_master(c, e, resolved, &a->port);
    if (rc != HILOCK_OK) return rc;
    a->path = NULL;
    a->host = *resolved;
  }
  return HILOCK_OK;
}

void hilock__hello_init(hilock__hello *h, const char *user,
                        const char *password, int64_t db) {
  int argc = 0;
  memset(h->q, 0, sizeof(h->q));
  h->n = 0;
  if (password != NULL) {
    h->q[h->n].argv = h->argv;
    h->q[h->n].lens = h->lens;
    h->argv[argc] = "AUTH";
    h->lens[argc++] = 4;
    if (user != NULL) {
      h->argv[argc] = user;
      h->lens[argc++] = strlen(user);
    }
    h->argv[argc] = password;
    h->lens[argc++] = strlen(password);
    h->q[h->n++].argc = argc;
  }
  if (db != 0) {
    h->q[h->n].argv = h->argv + argc;
    h->q[h->n].lens = h->lens + argc;
    h->argv[argc] = "SELECT";
    h->lens[argc++] = 6;
    h->argv[argc] = h->db;
    h->lens[argc++] = hilock__i64(h->db, db);
    h->q[h->n++].argc = 2;
  }
}

int hilock__hello_run(hilock__err *e, hilock__net *ctx, hilock__hello *h) {
  int rc = HILOCK_OK;
  for (int i = 0; i < h->n; i++)
    if (hilock__req_append(ctx, &h->q[i]) != 0)
      return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
  for (int i = 0; i < h->n; i++) {
    redisReply *r = NULL;
    const char *what = h->q[i].argv[0];
    if (hilock__net_get_reply(ctx, (void **)&r) != 0 || r == NULL)
      return hilock__set_err(e, hilock__net_status(ctx), "%s: %s", what,
                             ctx->errstr);
    if (r->type == REDIS_REPLY_ERROR && rc == HILOCK_OK) {
      rc = hilock__reply_error(e, r->str, r->len);
      if (rc == HILOCK__NOSCRIPT) rc = HILOCK_EREDIS;
      if (rc == HILOCK_EREDIS && what[0] == 'A') rc = HILOCK_EAUTH;
      e->code = rc;
    }
    freeReplyObject(r);
  }
  return rc;
}

/* Open a connection to a (TLS if tls is not NULL) within timeout_ms: the
 * status, with why in e. */
int hilock__net_open(hilock__err *e, const hilock__addr *a,
                     const hilock__tls *tls, int64_t timeout_ms,
                     hilock__net **out) {
  hilock__net *n = hilock__net_connect(a, tls, timeout_ms);
  int rc;
  *out = NULL;
  if (n == NULL) return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
  if (n->err != HILOCK__NET_OK) {
    rc = hilock__set_err(e, hilock__net_status(n), "%s", n->errstr);
    hilock__net_free(n);
    return rc;
  }
  *out = n;
  return HILOCK_OK;
}

/* Open, authenticate and select: one attempt. */
int hilock__connect_addr(hilock_client *c, hilock__err *e,
                         const hilock__addr *a, hilock__conn **out) {
  /* Every wait is also bounded by what is left of the caller's call. */
  hilock__net *ctx;
  hilock__hello hello;
  int rc = hilock__net_open(e, a, c->tls,
                            hilock__io_ms(c->rt.opts.connect_timeout_ms), &ctx);
  if (rc != HILOCK_OK) return rc;
  /* AUTH and SELECT wait within the call's bound too. */
  hilock__net_set_timeout(ctx, hilock__io_ms(c->rt.opts.command_timeout_ms));
  hilock__net_keepalive(ctx);
  hilock__hello_init(&hello, c->url.user, c->url.password, c->url.db);
  rc = hilock__hello_run(e, ctx, &hello);
  if (rc != HILOCK_OK) {
    hilock__net_free(ctx);
    return rc;
  }
  /* The pooled connection's own reply timeout (a call's bound is set per
   * command). */
  hilock__net_set_timeout(ctx, c->rt.opts.command_timeout_ms);
  *out = calloc(1, sizeof(hilock__conn));
  if (*out == NULL) {
    hilock__net_free(ctx);
    return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
  }
  (*out)->ctx = ctx;
  return HILOCK_OK;
}

static int connect_once(hilock_client *c, hilock__err *e, hilock__conn **out) {
  hilock__addr a;
  char *resolved;
  int rc = master_addr(c, e, &a, &resolved);
  if (rc == HILOCK_OK) rc = hilock__connect_addr(c, e, &a, out);
  if (rc == HILOCK_OK && resolved != NULL) {
    /* Never take a demoted master (now a replica) for the master. */
    rc = hilock__sentinel_check_role(c, e, (*out)->ctx, a.host, a.port);
    if (rc != HILOCK_OK) {
      hilock__conn_free(*out);
      *out = NULL;
    }
  }
  free(resolved);
  return rc;
}

/* Connect, retrying refused or failed attempts with backoff until the
 * monotonic deadline. Authentication and ACL errors are not retried. */
int hilock__connect(hilock_client *c, hilock__err *e, int64_t deadline,
                    hilock__conn **out) {
  int64_t pause = 20;
  if (c->cl != NULL) {
    int fresh;
    return hilock__cluster_pool_get(c, e, -1, deadline, out, &fresh);
  }
  for (;;) {
    int rc = connect_once(c, e, out);
    if (rc != HILOCK_EIO && rc != HILOCK_ETIMEDOUT) return rc;
    int64_t left = hilock__call_cut(deadline) - hilock__now_ms();
    if (left <= 0) return rc;
    hilock__sleep_ms(pause < left ? pause : left);
    pause = pause * 2 > 500 ? 500 : pause * 2;
  }
}

void hilock__conn_free(hilock__conn *k) {
  if (k == NULL) return;
  hilock__pool_uncount(k);
  hilock__net_free(k->ctx);
  free(k);
}

int hilock__pool_take(hilock_client *c, hilock__err *e, hilock__conn **idle,
                      int *nidle, int *open, int64_t deadline_ms,
                      hilock__conn **k) {
  *k = NULL;
  for (;;) {
    int64_t left;
    if (!hilock__client_usable(c))
      return hilock__set_err(e, HILOCK_ECLOSED, "client is closed");
    if (*idle != NULL) {
      *k = *idle;
      *idle = (*k)->next;
      (*k)->next = NULL;
      (*nidle)--;
      return HILOCK_OK;
    }
    if (c->rt.opts.max_connections <= 0 || *open < c->rt.opts.max_connections) {
      (*open)++;
      return HILOCK_OK;
    }
    left = hilock__call_cut(deadline_ms) - hilock__now_ms();
    if (left <= 0)
      return hilock__set_err(e, HILOCK_ETIMEDOUT,
                             "all %d connections of the pool stayed busy",
                             c->rt.opts.max_connections);
    if (left > 100) left = 100; /* and look at closed again */
    if (hilock__fiber_self() != NULL) {
      /* An event loop's operation: its loop's thread must not sleep here,
       * so it looks again shortly (rare: the runner starts operations on
       * its loop only while the pool has room). */
      pthread_mutex_unlock(&c->rt.mu);
      (void)hilock__fiber_wait(-1, 0,
                               hilock__now_ms() + (left < 2 ? left : 2));
      pthread_mutex_lock(&c->rt.mu);
      continue;
    }
    hilock__cond_wait_ms(&c->pool_cv, &c->rt.mu, left);
  }
}

void hilock__pool_counted(hilock_client *c, hilock__conn *k, int *open) {
  k->open = open;
  k->client = c;
  k->pid = hilock__pid();
}

void hilock__pool_uncount(hilock__conn *k) {
  hilock_client *c = k->client;
  if (k->open == NULL) return;
  /* A forked child does not count its parent's connections. */
  if (k->pid == hilock__pid()) {
    pthread_mutex_lock(&c->rt.mu);
    (*k->open)--;
    pthread_cond_signal(&c->pool_cv);
    pthread_mutex_unlock(&c->rt.mu);
  }
  k->open = NULL;
  k->client = NULL;
}

/* Detach and free every idle connection (after a broken one, or a fork).
 * Call with c->rt.mu held; frees after unlocking via the returned list. */
static hilock__conn *take_idle(hilock_client *c) {
  hilock__conn *list = c->idle;
  c->idle = NULL;
  c->nidle = 0;
  if (c->cl != NULL) {
    for (int i = 0; i < c->cl->nnodes; i++) {
      hilock__node *n = c->cl->nodes[i];
      while (n->idle != NULL) {
        hilock__conn *k = n->idle;
        n->idle = k->next;
        k->next = list;
        list = k;
      }
      n->nidle = 0;
    }
  }
  return list;
}

hilock__conn *hilock__pool_detach(hilock_client *c) { return take_idle(c); }

static void free_list(hilock__conn *k) {
  while (k != NULL) {
    hilock__conn *next = k->next;
    hilock__conn_free(k);
    k = next;
  }
}

void hilock__conn_free_list(hilock__conn *k) { free_list(k); }

int hilock__pool_get_until(hilock_client *c, hilock__err *e,
                           int64_t deadline, hilock__conn **out, int *fresh) {
  hilock__conn *k = NULL, *stale = NULL;
  int64_t place_by;
  int rc;
  if (c->cl != NULL)
    return hilock__cluster_pool_get(c, e, -1, deadline, out, fresh);
  pthread_mutex_lock(&c->rt.mu);
  if (c->pid != hilock__pid()) {
    /* Forked: the pooled sockets are the parent's. Close our copies (no
     * bytes are sent) and start afresh. */
    stale = take_idle(c);
    c->pid = hilock__pid();
  }
  /* A pool busy to its bound is no failure of the server: a call with a
   * deadline of its own (an acquire's timeout) waits for a place until
   * then, not only for the reconnect budget. */
  place_by = hilock__call_deadline();
  if (place_by == INT64_MAX || place_by < deadline) place_by = deadline;
  rc = hilock__pool_take(c, e, &c->idle, &c->nidle, &c->nopen, place_by, &k);
  pthread_mutex_unlock(&c->rt.mu);
  free_list(stale);
  if (rc != HILOCK_OK) return rc;
  if (k != NULL) {
    *out = k;
    *fresh = 0;
    return HILOCK_OK;
  }
  *fresh = 1;
  rc = hilock__connect(c, e, deadline, out);
  pthread_mutex_lock(&c->rt.mu);
  if (rc == HILOCK_OK) {
    hilock__pool_counted(c, *out, &c->nopen);
  } else {
    c->nopen--;
    pthread_cond_signal(&c->pool_cv);
  }
  pthread_mutex_unlock(&c->rt.mu);
  return rc;
}

int hilock__pool_room(hilock_client *c) {
  int room;
  if (c->cl != NULL || c->rt.opts.max_connections <= 0) return 1;
  pthread_mutex_lock(&c->rt.mu);
  room = c->nidle > 0 || c->nopen < c->rt.opts.max_connections;
  pthread_mutex_unlock(&c->rt.mu);
  return room;
}

void hilock__pool_put(hilock_client *c, hilock__conn *k) {
  hilock__conn **idle = k->node ? &k->node->idle : &c->idle;
  int *nidle = k->node ? &k->node->nidle : &c->nidle;
  int *open = k->node ? &k->node->nopen : &c->nopen;
  pthread_mutex_lock(&c->rt.mu);
  if (!c->rt.closed && c->pid == hilock__pid() && *nidle < c->rt.opts.max_idle &&
      (k->open != NULL || c->rt.opts.max_connections <= 0 ||
       *open < c->rt.opts.max_connections)) {
    /* One opened outside the pool (the first, a wait's own) joins it. */
    if (k->open == NULL) {
      (*open)++;
      hilock__pool_counted(c, k, open);
    }
    k->next = *idle;
    *idle = k;
    (*nidle)++;
    k = NULL;
    pthread_cond_signal(&c->pool_cv);
  }
  pthread_mutex_unlock(&c->rt.mu);
  hilock__conn_free(k);
}

int hilock__conn_error(hilock_client *c, hilock__err *e, hilock__conn *k,
                       const char *what, int saved_errno) {
  int rc = hilock__net_status(k->ctx);
  (void)c;
  (void)saved_errno;
  if (rc == HILOCK_OK) rc = HILOCK_EIO;
  return hilock__set_err(e, rc, "%s on %s: %s", what, k->ctx->where,
                         rc == HILOCK_ETIMEDOUT ? "no reply in time"
                                                : k->ctx->errstr);
}

int hilock__wait_append(const hilock_client *c, hilock__net *ctx) {
  char n[24], ms[24];
  const char *argv[3] = {"WAIT", n, ms};
  size_t lens[3] = {4, hilock__i64(n, c->rt.opts.wait_replicas),
                    hilock__i64(ms, c->rt.opts.wait_timeout_ms)};
  return hilock__net_append(ctx, 3, argv, lens) == 0;
}

int hilock__wait_read(hilock__net *ctx, long long *acked) {
  redisReply *r = NULL;
  *acked = -1;
  if (hilock__net_get_reply(ctx, (void **)&r) != 0 || r == NULL) return -1;
  if (r->type == REDIS_REPLY_INTEGER) *acked = r->integer;
  freeReplyObject(r);
  return 0;
}

int hilock__conn_timeout(hilock_client *c, hilock__err *e, hilock__conn *k,
                         const char *what, int saved_errno) {
  int rc = hilock__conn_error(c, e, k, what, saved_errno);
  if (rc != HILOCK_ETIMEDOUT) return rc;
  if (hilock__undo_queue(c, k, k->owed)) {
    hilock__err was = *e;
    hilock__set_err(e, rc,
                    "%.200s; the attempt is undone when the server answers",
                    was.msg);
  }
  return rc;
}

/* ## Fork (the runtime's handlers call these) */

pthread_mutex_t *hilock__client_fork_mutex(hilock_client *c) {
  return &c->hub.mu;
}

void hilock__client_after_fork(hilock_client *c) {
  if (hilock__token(c->id, NULL) != HILOCK_OK) c->id[0] ^= 1;
  hilock__hub_forget(&c->hub);
  c->direct = 0; /* those were the parent's threads */
  /* The parent's connections are not this process's to count. */
  c->nopen = 0;
  if (c->cl != NULL)
    for (int i = 0; i < c->cl->nnodes; i++) c->cl->nodes[i]->nopen = 0;
  hilock__cond_init(&c->pool_cv);
}

int hilock__exists(hilock_client *c, hilock__err *e, const char *key,
                   size_t keylen, int *exists) {
  const char *argv[2] = {"EXISTS", key};
  size_t lens[2] = {6, keylen};
  redisReply *r;
  int rc = hilock__command(c, e, 2, argv, lens, &r);
  if (rc != HILOCK_OK) return rc;
  if (r->type == REDIS_REPLY_INTEGER)
    *exists = r->integer > 0;
  else
    rc = hilock__set_err(e, HILOCK_EPROTO, "unexpected reply to EXISTS");
  freeReplyObject(r);
  return rc;
}

/* A connection that has sent nothing yet (no AUTH, no SELECT) proves the
 * server speaks Redis (and, with TLS, accepts us) with one PING, within
 * the connect timeout: a plain client on a TLS port, or a server that
 * refuses our certificate, fails here rather than at the first lock. */
static int first_round_trip(hilock_client *c, hilock__conn *k) {
  static const char *const argv[1] = {"PING"};
  static const size_t lens[1] = {4};
  redisReply *r;
  int rc = HILOCK_OK;
  hilock__net_set_timeout(k->ctx, c->rt.opts.connect_timeout_ms);
  r = hilock__net_command(k->ctx, 1, (const char **)argv, lens);
  hilock__net_set_timeout(k->ctx, c->rt.opts.command_timeout_ms);
  if (r == NULL) {
    /* (a plain connection closed before any reply says "a TLS port?") */
    rc = hilock__set_err(hilock__client_err(c), hilock__net_status(k->ctx), "%s",
                         k->ctx->errstr);
    return rc;
  }
  if (r->type == REDIS_REPLY_ERROR) {
    rc = hilock__reply_error(hilock__client_err(c), r->str, r->len);
    if (rc == HILOCK__NOSCRIPT) rc = hilock__client_err(c)->code = HILOCK_EREDIS;
  }
  freeReplyObject(r);
  return rc;
}

/* The first TLS option of o set to other than its default, or NULL: on a
 * URL that is not a TLS one, it would mean nothing, so it is refused
 * rather than ignored. */
static const char *tls_option_given(const hilock_options *o) {
  if (o->ssl_ca_certs != NULL) return "ssl_ca_certs";
  if (o->ssl_ca_path != NULL) return "ssl_ca_path";
  if (o->ssl_certfile != NULL) return "ssl_certfile";
  if (o->ssl_keyfile != NULL) return "ssl_keyfile";
  if (o->ssl_password != NULL) return "ssl_password";
  if (o->ssl_server_name != NULL) return "ssl_server_name";
  if (o->ssl_cert_reqs != HILOCK_SSL_CERT_REQUIRED) return "ssl_cert_reqs";
  if (o->ssl_check_hostname == 0) return "ssl_check_hostname";
  return NULL;
}

int hilock_client_new(const char *url, const hilock_options *opts,
                      hilock_client **out) {
  hilock_client *c;
  hilock__conn *k = NULL;
  int rc;

  if (out == NULL) return HILOCK_EINVAL;
  *out = NULL;
  c = calloc(1, sizeof(*c));
  if (c == NULL) return HILOCK_ENOMEM;
  if (hilock__runtime_init(&c->rt, c) != 0) {
    free(c);
    return HILOCK_ENOMEM;
  }
  if (hilock__hub_init(&c->hub) != 0) {
    hilock__runtime_destroy(&c->rt);
    free(c);
    return HILOCK_ENOMEM;
  }
  if (hilock__cond_init(&c->pool_cv) != 0) {
    hilock__hub_destroy(&c->hub);
    hilock__runtime_destroy(&c->rt);
    free(c);
    return HILOCK_ENOMEM;
  }
  c->pid = hilock__pid();
  c->serial = hilock__serial();
  *out = c;
  if (opts != NULL) {
    if (!hilock__options_ok(opts))
      return hilock__set_err(hilock__client_err(c), HILOCK_EINVAL,
                             "bad client options (timeouts must be >= 1 ms "
                             "to connect, >= 0 otherwise)");
    if (opts->wait_replicas < 0 ||
        (opts->wait_replicas > 0 &&
         (opts->wait_timeout_ms < 1 ||
          (opts->command_timeout_ms > 0 &&
           opts->wait_timeout_ms >= opts->command_timeout_ms))))
      return hilock__set_err(hilock__client_err(c), HILOCK_EINVAL,
                             "bad wait_replicas options (wait_replicas must "
                             "be >= 0; wait_timeout_ms >= 1 and below "
                             "command_timeout_ms)");
    c->rt.opts = *opts;
  }
  rc = hilock__runtime_prefix(&c->rt, hilock__client_err(c));
  if (rc == HILOCK_OK) rc = hilock__token(c->id, hilock__client_err(c));
  if (rc != HILOCK_OK) return rc;
  rc = hilock__url_parse(url, &c->url, hilock__client_err(c));
  if (rc == HILOCK_OK && !c->url.tls && tls_option_given(&c->rt.opts) != NULL)
    rc = hilock__set_err(hilock__client_err(c), HILOCK_EINVAL,
                         "%s is a TLS option, but the URL is not a TLS one: "
                         "use rediss:// (or rediss+cluster://, "
                         "rediss+sentinel://)",
                         tls_option_given(&c->rt.opts));
  if (rc == HILOCK_OK) rc = hilock__tls_for(&c->rt.opts, &c->url, &c->tls,
                                            hilock__client_err(c));
  /* The strings were the caller's: what they said is in c->tls now. */
  c->rt.opts.ssl_ca_certs = c->rt.opts.ssl_ca_path = c->rt.opts.ssl_certfile = NULL;
  c->rt.opts.ssl_keyfile = c->rt.opts.ssl_password = NULL;
  c->rt.opts.ssl_server_name = NULL;
  if (rc != HILOCK_OK) return rc;
  if (c->url.cluster)
    return hilock__cluster_init(c, hilock__client_err(c),
                                !c->rt.opts.connect_later);
  if (c->rt.opts.connect_later) return HILOCK_OK;
  rc = connect_once(c, hilock__client_err(c), &k);
  if (rc == HILOCK_OK && c->url.password == NULL && c->url.db == 0 &&
      !c->url.sentinel)
    rc = first_round_trip(c, k);
  if (rc != HILOCK_OK) {
    hilock__conn_free(k);
    return rc;
  }
  hilock__pool_put(c, k);
  return HILOCK_OK;
}

int hilock__client_is_cluster(const hilock_client *c) {
  return c != NULL && c->url.cluster;
}

int hilock_client_is_cluster(const hilock_client *c) {
  return hilock__client_is_cluster(c);
}

void hilock__client_ref(hilock_client *c) {
  pthread_mutex_lock(&c->rt.mu);
  c->rt.refs++;
  pthread_mutex_unlock(&c->rt.mu);
}

void hilock__client_unref(hilock_client *c) {
  int last;
  hilock__conn *idle;
  pthread_mutex_lock(&c->rt.mu);
  last = --c->rt.refs == 0;
  idle = last ? take_idle(c) : NULL;
  pthread_mutex_unlock(&c->rt.mu);
  if (!last) return;
  free_list(idle);
  hilock__watchdog_stop(&c->rt);
  hilock__cluster_free(c);
  hilock__url_clear(&c->url);
  hilock__tls_free(c->tls);
  hilock__hub_stop(c); /* never started, or stopped by hilock_client_free */
  hilock__hub_destroy(&c->hub);
  pthread_cond_destroy(&c->pool_cv);
  hilock__runtime_destroy(&c->rt);
  free(c);
}

void hilock_client_free(hilock_client *c) {
  hilock__conn *idle;
  if (c == NULL) return;
  pthread_mutex_lock(&c->rt.mu);
  __atomic_store_n(&c->rt.closed, 1, __ATOMIC_RELEASE); /* waiters poll it */
  pthread_mutex_unlock(&c->rt.mu);
  hilock__hub_stop(c);
  /* No hold outlives its client: renewal stops, each grant is reported
   * lost and released (best effort, bounded), before the pool goes. */
  hilock__holds_close(c);
  pthread_mutex_lock(&c->rt.mu);
  idle = take_idle(c);
  pthread_mutex_unlock(&c->rt.mu);
  free_list(idle);
  hilock__client_unref(c);
}

int hilock__client_enter(hilock_client *c, hilock__err *e) {
  int closed;
  pthread_mutex_lock(&c->rt.mu);
  closed = c->rt.closed;
  if (!closed) c->rt.refs++;
  pthread_mutex_unlock(&c->rt.mu);
  if (closed) return hilock__set_err(e, HILOCK_ECLOSED, "client is closed");
  return HILOCK_OK;
}

int hilock_client_ping(hilock_client *c) {
  const char *argv[1] = {"PING"};
  size_t lens[1] = {4};
  redisReply *r;
  int rc;
  if (c == NULL) return HILOCK_EINVAL;
  rc = hilock__client_enter(c, hilock__client_err(c));
  if (rc != HILOCK_OK) return rc;
  if (c->cl != NULL) {
    rc = hilock__cluster_ping(c, hilock__client_err(c));
  } else {
    rc = hilock__command(c, hilock__client_err(c), 1, argv, lens, &r);
    if (rc == HILOCK_OK) freeReplyObject(r);
  }
  hilock__client_leave(c);
  return rc;
}

hilock__err *hilock__client_err(hilock_client *c) {
  return hilock__tl_err(c, c->serial, 1);
}

const char *hilock_client_errmsg(const hilock_client *c) {
  return c != NULL ? hilock__tl_msg(c, c->serial) : "client is NULL";
}

int hilock_client_errcode(const hilock_client *c) {
  return c != NULL ? hilock__tl_code(c, c->serial) : HILOCK_EINVAL;
}
