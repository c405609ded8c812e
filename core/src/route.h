/* hilock internals, the dispatcher: the one way a request reaches a
 * server (route.c; client.c: pooled connections and their set-up;
 * cluster.c: the slot map; sentinel.c; call.c: the undo of an ambiguous
 * grant). Uses the base, net and runtime layers and script.h (it carries
 * scripts; hilock__command is declared there). The lock families reach it
 * through script.h; redlock.c (its nodes) and inspect.c (SCAN on a node)
 * include it. */
#ifndef HILOCK_ROUTE_H
#define HILOCK_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "base.h"
#include "net.h"
#include "runtime.h"
#include "script.h"

/* ## The dispatcher (route.c) ---------------------------------------------
 * hilock__dispatch: one request or a batch, each to its target, pipelined
 * per connection; it alone follows redirections and failovers (see
 * route.c). hilock__conn_batch is its one-connection layer. */

struct hilock__node;

/* One command; for a script, argv is EVALSHA sha numkeys keys... args...
 * The fields after eval are the dispatcher's: node is the target (NULL: by
 * the first key's slot; a keyless command: the one server, or any cluster
 * master); rc and acked are the outcome. */
typedef struct hilock__req {
  int argc;
  const char **argv;
  const size_t *lens;
  const struct hilock__script *script; /* NOSCRIPT: sent again as EVAL */
  redisReply *reply;            /* the reply (the caller frees it) */
  int eval; /* the server said NOSCRIPT: goes as EVAL with the source */
  struct hilock__node *node;    /* a given cluster node */
  int rc;          /* HILOCK_OK with reply, else the status (no reply) */
  long long acked; /* WAIT's count for the write that carried it, or -1 */
  struct hilock__node *ask; /* the dispatcher's: a one-shot ASK target */
  int hops, pending;        /* the dispatcher's */
} hilock__req;

/* q as EVALSHA of script s with keys and args, in argv/lens (room for
 * 3 + nkeys + nargs) and nk (the key count's text). */
void hilock__req_script(hilock__req *q, const struct hilock__script *s,
                        int nkeys, const char *const *keys,
                        const size_t *keylens, int nargs,
                        const char *const *args, const size_t *arglens,
                        char nk[24], const char **argv, size_t *lens);
/* For a front end that drives its connections itself (Redlock's parallel
 * rounds): append q's command on n (EVALSHA, or EVAL once q->eval), and
 * tell whether a reply r means "send it again as EVAL" (NOSCRIPT for a
 * script not yet sent as EVAL: sets q->eval and returns 1). */
int hilock__req_append(hilock__net *n, const hilock__req *q);
int hilock__req_noscript(hilock__req *q, const redisReply *r);

/* What goes out with the requests, in the same write:
 * [PING] [ASKING] requests... [WAIT opts.wait_replicas opts.wait_timeout_ms]
 * ASKING: a cluster's one-shot ASK redirection (set by the dispatcher).
 * PING: the request may wake waiters; their messages go out before its
 *       reply (see route.c).
 * WAIT: replica acknowledgement of the writes, into acked.
 * ROUTE_RESEND: safe to send again after a pooled connection broke (the
 *       request may have run).
 * BLOCKING: a blocking command (BLPOP): its reply may take until the
 *       send's reply_by_ms (not the command timeout).
 * ONCE: one connection attempt per node, no waiting for a cluster to
 *       recover or a migration to end (the watchdog: holds on other nodes
 *       must not wait; it tries again in its next round).
 * TRYAGAIN: a request answered TRYAGAIN ends with HILOCK__TRYAGAIN at
 *       once (its caller splits it) instead of waiting for the migration. */
#define HILOCK__SEND_ASKING 1u
#define HILOCK__SEND_PING 2u
#define HILOCK__SEND_WAIT 4u
#define HILOCK__ROUTE_RESEND 8u
#define HILOCK__SEND_BLOCKING 16u
#define HILOCK__SEND_ONCE 32u
#define HILOCK__SEND_TRYAGAIN 64u
#define HILOCK__TRYAGAIN (-901) /* a request's rc with HILOCK__SEND_TRYAGAIN */
/* A BLOCKING request's rc when the master moved (Sentinel): it is not
 * sent again (its caller's next attempt goes to the new master). */
#define HILOCK__FAILOVER (-902)

/* How a dispatch goes. Zero is the default for every field. */
typedef struct hilock__send {
  unsigned flags;
  /* Redirections, failovers, reconnects and resends end here (monotonic
   * ms; 0: opts.reconnect_ms, within the caller's deadline). */
  int64_t deadline_ms;
  /* Every reply wait ends here (0: the command timeout, within the
   * caller's deadline); with BLOCKING, the blocking command's own bound. */
  int64_t reply_by_ms;
  /* One server: a connection the caller keeps (the watchdog's): used,
   * opened here when NULL, freed and set NULL when it breaks or the
   * master moved. */
  struct hilock__conn **own;
  /* BLOCKING: the connection leaves the pool's count while it waits. */
  int outside;
  /* BLOCKING: ends the wait early when it returns non-zero. */
  int (*stop)(void *);
  void *stop_arg;
  /* Out, when a connection broke: whether it was fresh, and its status
   * (HILOCK_EINTR: stopped; HILOCK_ETIMEDOUT; HILOCK_EIO). */
  int broke_fresh, broke_status;
} hilock__send;

/* Send q[0..n) where each goes (see hilock__req) and read every reply: per
 * request, rc (HILOCK_OK: q[i].reply holds a reply that is not an error,
 * for the caller to free; else no reply, and an error reply's text and
 * status went to e if it was the first failure) and acked. Returns
 * HILOCK_OK, or the first failure's status (its message in e). */
int hilock__dispatch(hilock_client *c, hilock__err *e, hilock__send *s,
                     hilock__req *q, int n);
/* Send q[0..n) on k and read every reply into q[i].reply (a script's
 * NOSCRIPT is answered with EVAL on k first). 0: all read (*acked: WAIT's
 * reply, -1 if it failed); 1: all but WAIT's reply, which never came (k
 * must not be reused); -1: k broke or timed out first (k->owed replies
 * unread; q[i].reply NULL for those). Reply waits are bounded by the
 * command timeout and the caller's deadline. */
int hilock__conn_batch(hilock_client *c, hilock__conn *k, unsigned flags,
                       hilock__req *q, int n, long long *acked);
/* One request through hilock__dispatch with flags (HILOCK__SEND_PING,
 * HILOCK__SEND_WAIT, HILOCK__ROUTE_RESEND): error replies become status
 * codes (a script that EVAL could not load either: HILOCK_ESCRIPT); any
 * other reply is left in q->reply for the caller to freeReplyObject. */
int hilock__route(hilock_client *c, hilock__err *e, unsigned flags,
                  hilock__req *q, long long *acked);
/* A plain command through hilock__route: hilock__command (script.h). */

/* If rc (q's outcome) is a failure that may pass (a cluster state, a
 * server out of reach, no reply in time, a slot half migrated past the
 * call's time), leave q to the renewal thread for up to for_ms
 * (HILOCK__RUN_LATER). */
void hilock__send_later(hilock_client *c, const hilock__req *q, int rc,
                        int64_t for_ms);
/* Send each request of list again (the renewal thread): the list of those
 * to try again later; the rest are freed. */
hilock__later *hilock__later_run(hilock_client *c, hilock__later *list);

/* What an error reply means for where its request goes: a cluster's
 * MOVED (the map records the new owner and is read again), ASK (*ask: the
 * one-shot target), CLUSTERDOWN (the map is read again) or TRYAGAIN: 1;
 * else 0. from: the node that answered (an empty host in the reply means
 * its host). */
int hilock__cluster_redirected(hilock_client *c, struct hilock__node *from,
                               const char *text, size_t len,
                               struct hilock__node **ask);
/* 1 if r is an error that means the master moved (READONLY, LOADING,
 * MASTERDOWN) on a sentinel client: reconnect to the current master. */
int hilock__failover_reply(const hilock_client *c, const redisReply *r);

/* EXISTS key: *exists = 1 if it is there (HILOCK_EPROTO on an odd reply). */
int hilock__exists(hilock_client *c, hilock__err *e, const char *key,
                   size_t keylen, int *exists);

/* Connection pool: an idle connection (*fresh = 0) or a new one, waiting
 * for a place in the pool or a connection until deadline_ms. */
int hilock__pool_get_until(hilock_client *c, hilock__err *e,
                           int64_t deadline_ms, hilock__conn **out,
                           int *fresh);
/* Whether a connection of the pool is free now, or may be opened (always
 * 1 on a cluster, whose pools are per node). */
int hilock__pool_room(hilock_client *c);
void hilock__pool_put(hilock_client *c, hilock__conn *k);
/* From a pool (c->mu held): an idle connection (*k), or a place to open
 * one (*k = NULL, counted in *open), waiting while opts.max_connections
 * are open until deadline_ms (HILOCK_ETIMEDOUT) or the client closes
 * (HILOCK_ECLOSED). */
int hilock__pool_take(hilock_client *c, hilock__err *e, hilock__conn **idle,
                      int *nidle, int *open, int64_t deadline_ms,
                      hilock__conn **k);
/* Count k among *open (after hilock__pool_take gave it a place). */
void hilock__pool_counted(hilock_client *c, hilock__conn *k, int *open);
/* Take k out of its pool's count (a connection kept for a long wait). */
void hilock__pool_uncount(hilock__conn *k);
void hilock__conn_free(hilock__conn *k);
int hilock__connect(hilock_client *c, hilock__err *e, int64_t deadline_ms,
                    hilock__conn **out);
/* Open a connection to a (TLS if tls is not NULL) within timeout_ms: the
 * status, with why in e. */
int hilock__net_open(hilock__err *e, const hilock__addr *a,
                     const hilock__tls *tls, int64_t timeout_ms,
                     hilock__net **out);
/* The one set-up of a fresh connection (client, sentinel and Redlock
 * connections): AUTH [user] password when a password is given, SELECT db
 * when db is not 0; n requests in q. */
typedef struct hilock__hello {
  const char *argv[5];
  size_t lens[5];
  char db[24];
  hilock__req q[2];
  int n;
} hilock__hello;
void hilock__hello_init(hilock__hello *h, const char *user,
                        const char *password, int64_t db);
/* Run h's requests on ctx, in one write: HILOCK_OK, or why not in e (a
 * refused AUTH: HILOCK_EAUTH). */
int hilock__hello_run(hilock__err *e, hilock__net *ctx, hilock__hello *h);
/* One attempt to open, authenticate and select on one address. */
int hilock__connect_addr(hilock_client *c, hilock__err *e,
                         const hilock__addr *a, hilock__conn **out);
/* Detach every idle connection of every node (c->mu held); free the list
 * with hilock__conn_free_list after unlocking. */
hilock__conn *hilock__pool_detach(hilock_client *c);
void hilock__conn_free_list(hilock__conn *k);
/* Replica acknowledgement on one connection: append WAIT
 * opts.wait_replicas opts.wait_timeout_ms (1 if appended); read its reply
 * into *acked (the replicas that acknowledged, -1 for an error reply),
 * -1 if no reply came. */
int hilock__wait_append(const hilock_client *c, hilock__net *ctx);
int hilock__wait_read(hilock__net *ctx, long long *acked);
/* The same, and for a timeout: the armed undo is queued on k (see
 * hilock__undo_queue), so k->ctx may be NULL after it. */
int hilock__conn_timeout(hilock_client *c, hilock__err *e, hilock__conn *k,
                         const char *what, int saved_errno);
/* Status for a failed hiredis call on k (timeout vs broken). */
int hilock__conn_error(hilock_client *c, hilock__err *e, hilock__conn *k,
                       const char *what, int saved_errno);

/* ## Redis Cluster (cluster.c) --------------------------------------------
 * The map of the 16384 hash slots to their masters (CLUSTER SLOTS) and an
 * idle-connection pool per node. All fields are guarded by c->mu; nodes
 * are never freed before the client, so a connection may keep a pointer
 * to its node. */

typedef struct hilock__node {
  char *host;
  int port;
  int master;   /* serves slots in the current map */
  hilock__conn *idle;
  int nidle;
  int nopen; /* pooled connections open (idle or in use) */
} hilock__node;

#define HILOCK__SLOTS 16384

typedef struct hilock__cluster {
  hilock__node **nodes;
  int nnodes, cap;
  int16_t slot[HILOCK__SLOTS]; /* index into nodes, -1: no known owner */
  int refreshing;              /* a thread of refresh_pid reads the map */
  pid_t refresh_pid;
  int64_t refreshed_ms;        /* when the map was last read */
  unsigned rr;                 /* round robin for keyless commands */
} hilock__cluster;

/* The URL's seeds, and the slot map read from them now (read_now) or by
 * the first call that needs it (hilock__cluster_mapped). */
int hilock__cluster_init(hilock_client *c, hilock__err *e, int read_now);
/* Read the slot map if it was never read (a client made with
 * connect_later), retrying within the reconnect budget: HILOCK_OK once
 * there is one, else why not. */
int hilock__cluster_mapped(hilock_client *c, hilock__err *e);
void hilock__cluster_free(hilock_client *c);
/* The slot a command is routed by: its first key's (EVAL/EVALSHA/FCALL:
 * the first of KEYS; otherwise argv[1]), or -1 for keyless commands (PING,
 * SCRIPT, ...). */
int hilock__command_key_slot(int argc, const char **argv, const size_t *lens);
/* Close the idle connections of a node that just failed us. */
void hilock__cluster_drop_idle(hilock_client *c, hilock__node *node);
/* A pooled connection to the owner of slot (-1: any master), refreshing
 * the map and retrying until deadline_ms if the owner is unknown or
 * unreachable. */
int hilock__cluster_pool_get(hilock_client *c, hilock__err *e, int slot,
                             int64_t deadline_ms, hilock__conn **out,
                             int *fresh);
/* The current owner of slot, or NULL. */
hilock__node *hilock__cluster_owner(hilock_client *c, int slot);
/* An idle connection to node, or one new attempt to open one. */
int hilock__cluster_node_conn(hilock_client *c, hilock__err *e,
                              hilock__node *node, hilock__conn **out,
                              int *fresh);
/* Record that slot is served by host:port (MOVED; moved = 0: only find
 * or add the node, for ASK): the node, or NULL (out of memory). */
hilock__node *hilock__cluster_learn(hilock_client *c, int slot,
                                    const char *host, size_t hostlen,
                                    int port, int moved);
/* Read the slot map again unless another thread is at it or it was read
 * in the last few ms. avoid: a node that just failed, asked last. */
int hilock__cluster_refresh(hilock_client *c, hilock__err *e,
                            hilock__node *avoid);
/* PING every master. */
int hilock__cluster_ping(hilock_client *c, hilock__err *e);

/* ## Sentinel (sentinel.c) ------------------------------------------------
 * For redis+sentinel:// URLs every new connection dials the address the
 * sentinels give now, and checks that it answers ROLE as master. */

/* Ask the sentinels in turn for the master's address (*host malloc'd).
 * HILOCK_EIO if none knows it (retried by hilock__connect). */
int hilock__sentinel_master(hilock_client *c, hilock__err *e, char **host,
                            int *port);
/* ROLE on a fresh connection: HILOCK_OK if master, HILOCK_EIO if not. */
int hilock__sentinel_check_role(hilock_client *c, hilock__err *e,
                                hilock__net *ctx, const char *host, int port);
/* ## The undo of an ambiguous grant (call.c) -----------------------------
 * Armed by the grant script's caller (script.h); sent by the dispatcher. */

/* A reply timed out on k with `owed` replies unread: queue the armed undo
 * behind them on k and hand its socket to a reaper thread (k->ctx becomes
 * NULL). Returns 1 if the undo was sent, 0 if none was armed or it failed. */
int hilock__undo_queue(hilock_client *c, hilock__conn *k, int owed);

#endif /* HILOCK_ROUTE_H */
