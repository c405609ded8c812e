/* Redis Cluster: the slot map, a connection pool per node, and the slot
 * of a command's first key. The dispatcher (route.c) reads the
 * redirections and tells this file what they teach (hilock__cluster_learn).
 *
 * Every key of one lock carries the hash tag {name}, so each script touches
 * one slot and runs on that slot's master. The map is read with CLUSTER
 * SLOTS from any node that answers; it is read again after a MOVED, after a
 * connection to a node fails and while the cluster reports CLUSTERDOWN, all
 * within the client's reconnect budget (opts.reconnect_ms). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base.h"
#include "route.h"

#define REFRESH_MIN_MS 20  /* a map read this recently is not read again */
#define PAUSE_MIN_MS 10    /* first back-off while the cluster recovers */
#define PAUSE_MAX_MS 250

static int lock_client(hilock_client *c) { return pthread_mutex_lock(&c->rt.mu); }
static int unlock_client(hilock_client *c) {
  return pthread_mutex_unlock(&c->rt.mu);
}

/* With c->rt.mu held: the node at host:port, added if new; NULL if out of
 * memory. */
static hilock__node *node_at(hilock__cluster *cl, const char *host,
                             size_t hostlen, int port) {
  hilock__node *n;
  for (int i = 0; i < cl->nnodes; i++) {
    n = cl->nodes[i];
    if (n->port == port && strlen(n->host) == hostlen &&
        memcmp(n->host, host, hostlen) == 0)
      return n;
  }
  if (cl->nnodes == cl->cap) {
    int cap = cl->cap ? cl->cap * 2 : 8;
    hilock__node **grown = realloc(cl->nodes, sizeof(*grown) * (size_t)cap);
    if (grown == NULL) return NULL;
    cl->nodes = grown;
    cl->cap = cap;
  }
  n = calloc(1, sizeof(*n));
  if (n == NULL) return NULL;
  n->host = malloc(hostlen + 1);
  if (n->host == NULL) {
    free(n);
    return NULL;
  }
  memcpy(n->host, host, hostlen);
  n->host[hostlen] = '\0';
  n->port = port;
  cl->nodes[cl->nnodes++] = n;
  return n;
}

static int node_index(const hilock__cluster *cl, const hilock__node *n) {
  for (int i = 0; i < cl->nnodes; i++)
    if (cl->nodes[i] == n) return i;
  return -1;
}

/* ## Connections to nodes ------------------------------------------------ */

/* An idle connection should have nothing to read: if it has, the node
 * closed it (killed, restarted, failed over) and a command sent on it would
 * fail after it may have been written. */
static int idle_is_dead(const hilock__conn *k) {
  return hilock__net_idle_dead(k->ctx);
}

int hilock__cluster_node_conn(hilock_client *c, hilock__err *e,
                              hilock__node *node, hilock__conn **out,
                              int *fresh) {
  hilock__conn *k = NULL, *stale = NULL;
  hilock__addr a;
  int rc;
  int64_t deadline = hilock__budget(c->rt.opts.reconnect_ms);
again:
  lock_client(c);
  if (c->pid != hilock__pid()) {
    /* Forked: the pooled sockets are the parent's. */
    stale = hilock__pool_detach(c);
    c->pid = hilock__pid();
  }
  rc = hilock__pool_take(c, e, &node->idle, &node->nidle, &node->nopen,
                         deadline, &k);
  unlock_client(c);
  hilock__conn_free_list(stale);
  stale = NULL;
  if (rc != HILOCK_OK) return rc;
  if (k != NULL && idle_is_dead(k)) {
    hilock__conn_free(k);
    k = NULL;
    goto again;
  }
  if (k != NULL) {
    *out = k;
    *fresh = 0;
    return HILOCK_OK;
  }
  a.path = NULL;
  a.host = node->host;
  a.port = node->port;
  rc = hilock__connect_addr(c, e, &a, out);
  lock_client(c);
  if (rc == HILOCK_OK) {
    hilock__pool_counted(c, *out, &node->nopen);
  } else {
    node->nopen--;
    pthread_cond_signal(&c->pool_cv);
  }
  unlock_client(c);
  if (rc != HILOCK_OK) return rc;
  (*out)->node = node;
  *fresh = 1;
  return HILOCK_OK;
}

/* Close the idle connections of a node that just failed us: they are most
 * likely broken too. */
void hilock__cluster_drop_idle(hilock_client *c, hilock__node *node) {
  hilock__conn *list;
  lock_client(c);
  list = node->idle;
  node->idle = NULL;
  node->nidle = 0;
  unlock_client(c);
  hilock__conn_free_list(list);
}

hilock__node *hilock__cluster_owner(hilock_client *c, int slot) {
  hilock__node *n = NULL;
  if (c->cl == NULL || slot < 0 || slot >= HILOCK__SLOTS) return NULL;
  lock_client(c);
  if (c->cl->slot[slot] >= 0) n = c->cl->nodes[c->cl->slot[slot]];
  unlock_client(c);
  return n;
}

/* Any master, taking turns. */
static hilock__node *any_master(hilock_client *c) {
  hilock__cluster *cl = c->cl;
  hilock__node *n = NULL;
  lock_client(c);
  for (int i = 0; i < cl->nnodes && n == NULL; i++) {
    hilock__node *m = cl->nodes[(cl->rr + (unsigned)i) % (unsigned)cl->nnodes];
    if (m->master) n = m;
  }
  cl->rr++;
  unlock_client(c);
  return n;
}

/* ## The slot map --------------------------------------------------------- */

typedef struct range {
  int start, end;
  const char *host;
  size_t hostlen;
  int port;
} range;

/* One endpoint [host, port, ...] of a CLUSTER SLOTS entry; an empty host
 * means the node we asked. 0 if usable. */
static int endpoint(const redisReply *ep, const hilock__node *asked,
                    const char **host, size_t *hostlen, int *port) {
  if (ep->type != REDIS_REPLY_ARRAY || ep->elements < 2 ||
      ep->element[0]->type != REDIS_REPLY_STRING ||
      ep->element[1]->type != REDIS_REPLY_INTEGER)
    return -1;
  if (ep->element[1]->integer < 1 || ep->element[1]->integer > 65535)
    return -1;
  *port = (int)ep->element[1]->integer;
  if (ep->element[0]->len == 0) {
    *host = asked->host;
    *hostlen = strlen(asked->host);
  } else if (ep->element[0]->len == 1 && ep->element[0]->str[0] == '?') {
    return -1; /* endpoint unknown to the node we asked */
  } else {
    *host = ep->element[0]->str;
    *hostlen = ep->element[0]->len;
  }
  return 0;
}

/* Replace the map with a CLUSTER SLOTS reply from node asked. */
static int apply_slots(hilock_client *c, hilock__err *e, const redisReply *r,
                       const hilock__node *asked) {
  hilock__cluster *cl = c->cl;
  int16_t *map;
  int rc = HILOCK_OK;
  if (r->type != REDIS_REPLY_ARRAY)
    return hilock__set_err(e, HILOCK_EPROTO, "unexpected reply to CLUSTER SLOTS");
  map = malloc(sizeof(cl->slot));
  if (map == NULL) return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
  for (int i = 0; i < HILOCK__SLOTS; i++) map[i] = -1;
  lock_client(c);
  for (int i = 0; i < cl->nnodes; i++) cl->nodes[i]->master = 0;
  for (size_t i = 0; i < r->elements && rc == HILOCK_OK; i++) {
    const redisReply *s = r->element[i];
    range g;
    hilock__node *n;
    if (s->type != REDIS_REPLY_ARRAY || s->elements < 3 ||
        s->element[0]->type != REDIS_REPLY_INTEGER ||
        s->element[1]->type != REDIS_REPLY_INTEGER ||
        s->element[0]->integer < 0 || s->element[1]->integer >= HILOCK__SLOTS ||
        s->element[0]->integer > s->element[1]->integer) {
      rc = hilock__set_err(e, HILOCK_EPROTO, "unexpected CLUSTER SLOTS entry");
      break;
    }
    g.start = (int)s->element[0]->integer;
    g.end = (int)s->element[1]->integer;
    if (endpoint(s->element[2], asked, &g.host, &g.hostlen, &g.port) != 0)
      continue; /* no usable master address: the range stays unknown */
    n = node_at(cl, g.host, g.hostlen, g.port);
    if (n == NULL) {
      rc = hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
      break;
    }
    n->master = 1;
    int idx = node_index(cl, n);
    for (int slot = g.start; slot <= g.end; slot++) map[slot] = (int16_t)idx;
    /* Replicas join the list of nodes the map can be read from. */
    for (size_t j = 3; j < s->elements; j++) {
      const char *h;
      size_t hl;
      int p;
      if (endpoint(s->element[j], asked, &h, &hl, &p) == 0)
        (void)node_at(cl, h, hl, p);
    }
  }
  if (rc == HILOCK_OK) {
    memcpy(cl->slot, map, sizeof(cl->slot));
    cl->refreshed_ms = hilock__now_ms();
  } else {
    /* Keep the old map; restore who serves it. */
    for (int i = 0; i < HILOCK__SLOTS; i++)
      if (cl->slot[i] >= 0) cl->nodes[cl->slot[i]]->master = 1;
  }
  unlock_client(c);
  free(map);
  return rc;
}

/* A node's refusal (wrong password, no permission, not a cluster node)
 * tells more than a node that could not be reached: keep the first. */
static void keep_refusal(const hilock__err *e, int rc, hilock__err *refusal) {
  if (rc != HILOCK_OK && rc != HILOCK_EIO && rc != HILOCK_ETIMEDOUT &&
      refusal->code == HILOCK_OK)
    *refusal = *e;
}

/* Read the map from the first node that answers: masters first, then the
 * others, avoid last. */
static int read_map(hilock_client *c, hilock__err *e, hilock__node *avoid) {
  hilock__cluster *cl = c->cl;
  hilock__node **order;
  hilock__err refusal;
  int n = 0, rc = HILOCK_ECLUSTER;
  lock_client(c);
  order = malloc(sizeof(*order) * (size_t)(cl->nnodes ? cl->nnodes : 1));
  if (order != NULL) {
    for (int pass = 0; pass < 3; pass++)
      for (int i = 0; i < cl->nnodes; i++) {
        hilock__node *m = cl->nodes[i];
        int want = m == avoid ? 2 : m->master ? 0 : 1;
        if (want == pass) order[n++] = m;
      }
  }
  unlock_client(c);
  if (order == NULL) return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
  hilock__set_err(e, HILOCK_ECLUSTER, "no cluster node is known");
  hilock__clear_err(&refusal);
  for (int i = 0; i < n; i++) {
    static const char *const argv[2] = {"CLUSTER", "SLOTS"};
    static const size_t lens[2] = {7, 5};
    hilock__conn *k;
    redisReply *r;
    int fresh;
    rc = hilock__cluster_node_conn(c, e, order[i], &k, &fresh);
    if (rc == HILOCK_ECLOSED || rc == HILOCK_ENOMEM) break;
    if (rc != HILOCK_OK) {
      keep_refusal(e, rc, &refusal);
      continue;
    }
    r = hilock__net_command(k->ctx, 2, (const char **)argv, lens);
    if (r == NULL) {
      rc = hilock__conn_error(c, e, k, "CLUSTER SLOTS", errno);
      hilock__conn_free(k);
      continue;
    }
    hilock__pool_put(c, k);
    if (r->type == REDIS_REPLY_ERROR) {
      rc = hilock__reply_error(e, r->str, r->len);
      if (memmem(r->str, r->len, "cluster support disabled", 24) != NULL)
        rc = hilock__set_err(e, HILOCK_ECLUSTER,
                             "%s:%d is not a cluster node (cluster support "
                             "disabled): use a redis:// URL",
                             order[i]->host, order[i]->port);
      else if (rc == HILOCK__NOSCRIPT)
        rc = e->code = HILOCK_EREDIS;
    } else {
      rc = apply_slots(c, e, r, order[i]);
    }
    freeReplyObject(r);
    if (rc == HILOCK_OK) break;
    keep_refusal(e, rc, &refusal);
  }
  free(order);
  if ((rc == HILOCK_EIO || rc == HILOCK_ETIMEDOUT) &&
      refusal.code != HILOCK_OK) {
    *e = refusal;
    rc = refusal.code;
  }
  return rc;
}

int hilock__cluster_refresh(hilock_client *c, hilock__err *e,
                            hilock__node *avoid) {
  hilock__cluster *cl = c->cl;
  int rc;
  lock_client(c);
  if ((cl->refreshing && cl->refresh_pid == hilock__pid()) ||
      hilock__now_ms() - cl->refreshed_ms < REFRESH_MIN_MS) {
    /* Another thread is reading it, or it is fresh. */
    unlock_client(c);
    return HILOCK_OK;
  }
  cl->refreshing = 1;
  cl->refresh_pid = hilock__pid();
  unlock_client(c);
  rc = read_map(c, e, avoid);
  lock_client(c);
  cl->refreshing = 0;
  unlock_client(c);
  return rc;
}

int hilock__cluster_init(hilock_client *c, hilock__err *e, int read_now) {
  hilock__cluster *cl = calloc(1, sizeof(*cl));
  if (cl == NULL) return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
  for (int i = 0; i < HILOCK__SLOTS; i++) cl->slot[i] = -1;
  lock_client(c);
  c->cl = cl;
  for (int i = 0; i < c->url.nseeds; i++) {
    if (node_at(cl, c->url.seeds[i].host, strlen(c->url.seeds[i].host),
                c->url.seeds[i].port) == NULL) {
      unlock_client(c);
      return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
    }
  }
  unlock_client(c);
  return read_now ? read_map(c, e, NULL) : HILOCK_OK;
}

static int ever_mapped(hilock_client *c) {
  int mapped;
  lock_client(c);
  mapped = c->cl->refreshed_ms != 0;
  unlock_client(c);
  return mapped;
}

int hilock__cluster_mapped(hilock_client *c, hilock__err *e) {
  int64_t deadline = hilock__budget(c->rt.opts.reconnect_ms);
  int64_t pause = PAUSE_MIN_MS, theirs;
  int nodes;
  lock_client(c);
  nodes = c->cl->nnodes;
  unlock_client(c);
  /* Another thread's read dials each node once at most. */
  theirs = hilock__now_ms() + (int64_t)nodes * (c->rt.opts.connect_timeout_ms +
                                               c->rt.opts.command_timeout_ms);
  if (theirs > hilock__call_deadline()) theirs = hilock__call_deadline();
  while (!ever_mapped(c)) {
    int64_t left;
    int rc = hilock__cluster_refresh(c, e, NULL);
    if (ever_mapped(c)) break;
    if (rc == HILOCK_OK && hilock__now_ms() < theirs) {
      /* Another thread of ours is reading it: wait for its answer (a
       * first call of many threads at once), then read it again if that
       * read failed. */
      hilock__sleep_ms(2);
      continue;
    }
    if (rc == HILOCK_OK)
      rc = hilock__set_err(e, HILOCK_ECLUSTER,
                           "the cluster's slot map is not read yet");
    left = deadline - hilock__now_ms();
    if ((rc != HILOCK_EIO && rc != HILOCK_ETIMEDOUT && rc != HILOCK_ECLUSTER) ||
        left <= 0)
      return rc;
    hilock__sleep_ms(pause < left ? pause : left);
    pause = pause * 2 > PAUSE_MAX_MS ? PAUSE_MAX_MS : pause * 2;
  }
  return HILOCK_OK;
}

void hilock__cluster_free(hilock_client *c) {
  hilock__cluster *cl = c->cl;
  if (cl == NULL) return;
  for (int i = 0; i < cl->nnodes; i++) {
    hilock__conn_free_list(cl->nodes[i]->idle);
    free(cl->nodes[i]->host);
    free(cl->nodes[i]);
  }
  free(cl->nodes);
  free(cl);
  c->cl = NULL;
}

int hilock__cluster_pool_get(hilock_client *c, hilock__err *e, int slot,
                             int64_t deadline, hilock__conn **out,
                             int *fresh) {
  int64_t pause = PAUSE_MIN_MS;
  int rc = hilock__cluster_mapped(c, e);
  if (rc != HILOCK_OK) return rc;
  for (;;) {
    hilock__node *node = slot >= 0 ? hilock__cluster_owner(c, slot)
                                   : any_master(c);
    hilock__err ignored;
    int64_t left;
    if (node == NULL) {
      rc = slot >= 0 ? hilock__set_err(e, HILOCK_ECLUSTER,
                                       "no cluster node serves hash slot %d",
                                       slot)
                     : hilock__set_err(e, HILOCK_ECLUSTER,
                                       "no cluster master is known");
    } else {
      rc = hilock__cluster_node_conn(c, e, node, out, fresh);
      if (rc == HILOCK_OK) return rc;
      if (rc != HILOCK_EIO && rc != HILOCK_ETIMEDOUT) return rc;
    }
    left = deadline - hilock__now_ms();
    if (left <= 0) return rc;
    /* A master that cannot be reached may have failed over: read the map
     * again and try its successor, backing off while there is none. */
    hilock__cluster_refresh(c, &ignored, node);
    if (node == NULL || (slot >= 0 && hilock__cluster_owner(c, slot) == node)) {
      hilock__sleep_ms(pause < left ? pause : left);
      pause = pause * 2 > PAUSE_MAX_MS ? PAUSE_MAX_MS : pause * 2;
    }
  }
}

/* ## Routing --------------------------------------------------------------- */

static int name_is(const char *s, size_t n, const char *name) {
  return strlen(name) == n && strncasecmp(s, name, n) == 0;
}

int hilock__command_key_slot(int argc, const char **argv, const size_t *lens) {
  static const char *const keyless[] = {
      "PING",  "ECHO",     "SCRIPT",  "CLUSTER", "INFO",    "TIME",
      "AUTH",  "SELECT",   "HELLO",   "CLIENT",  "CONFIG",  "DBSIZE",
      "WAIT",  "ROLE",     "COMMAND", "ASKING",  "READONLY", "FUNCTION",
      "FLUSHALL", "FLUSHDB", "MULTI", "EXEC",    "DISCARD", NULL};
  if (argc < 2) return -1;
  if (name_is(argv[0], lens[0], "EVALSHA") || name_is(argv[0], lens[0], "EVAL") ||
      name_is(argv[0], lens[0], "EVALSHA_RO") ||
      name_is(argv[0], lens[0], "EVAL_RO") || name_is(argv[0], lens[0], "FCALL") ||
      name_is(argv[0], lens[0], "FCALL_RO")) {
    if (argc < 4 || lens[2] == 0 || argv[2][0] == '0') return -1;
    return hilock__key_slot(argv[3], lens[3]);
  }
  for (int i = 0; keyless[i] != NULL; i++)
    if (name_is(argv[0], lens[0], keyless[i])) return -1;
  return hilock__key_slot(argv[1], lens[1]);
}

hilock__node *hilock__cluster_learn(hilock_client *c, int slot,
                                    const char *host, size_t hostlen,
                                    int port, int moved) {
  hilock__node *n;
  hilock__err ignored;
  /* Read the whole map first (a failover moves many slots), then trust
   * the redirection for this slot over a possibly older map. */
  if (moved) hilock__cluster_refresh(c, &ignored, NULL);
  lock_client(c);
  n = node_at(c->cl, host, hostlen, port);
  if (n != NULL && moved) {
    c->cl->slot[slot] = (int16_t)node_index(c->cl, n);
    n->master = 1;
  }
  unlock_client(c);
  return n;
}

int hilock__cluster_ping(hilock_client *c, hilock__err *e) {
  int64_t deadline = hilock__budget(c->rt.opts.reconnect_ms);
  int64_t pause = PAUSE_MIN_MS;
  int mapped = hilock__cluster_mapped(c, e);
  if (mapped != HILOCK_OK) return mapped;
  for (;;) {
    static const char *argv[1] = {"PING"};
    static const size_t lens[1] = {4};
    hilock__req q[64];
    hilock__send s = {0};
    int n = 0, rc = HILOCK_OK;
    hilock__err ignored;
    lock_client(c);
    for (int i = 0; i < c->cl->nnodes && n < 64; i++)
      if (c->cl->nodes[i]->master) {
        memset(&q[n], 0, sizeof(q[n]));
        q[n].argc = 1;
        q[n].argv = argv;
        q[n].lens = lens;
        q[n++].node = c->cl->nodes[i];
      }
    unlock_client(c);
    if (n == 0)
      rc = hilock__set_err(e, HILOCK_ECLUSTER, "no cluster master is known");
    else
      rc = hilock__dispatch(c, e, &s, q, n);
    for (int i = 0; i < n; i++)
      if (q[i].reply != NULL) freeReplyObject(q[i].reply);
    if (rc == HILOCK__NOSCRIPT) rc = e->code = HILOCK_EREDIS;
    if (rc == HILOCK_OK || (rc != HILOCK_EIO && rc != HILOCK_ETIMEDOUT &&
                            rc != HILOCK_ECLUSTER))
      return rc;
    int64_t left = deadline - hilock__now_ms();
    if (left <= 0) return rc;
    /* The dispatcher read the map again after a node failed. */
    hilock__cluster_refresh(c, &ignored, NULL);
    hilock__sleep_ms(pause < left ? pause : left);
    pause = pause * 2 > PAUSE_MAX_MS ? PAUSE_MAX_MS : pause * 2;
  }
}
