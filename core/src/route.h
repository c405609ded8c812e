/* hilock internals, the dispatcher: the one way a request reaches a
 * server (route.c: pipelined batches, redirections, failovers, resends and
 * WAIT; client.c: pooled connections; cluster.c: the slot map; sentinel.c;
 * call.c: the undo of an ambiguous grant). Uses the base, net and runtime
 * layers and script.h (it carries scripts, and hilock__command is declared
 * there). The lock families reach it through script.h (redlock.c and
 * inspect.c still drive connections themselves). */
#ifndef HILOCK_ROUTE_H
#define HILOCK_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "base.h"
#include "net.h"
#include "runtime.h"
#include "script.h"

/* ## Routing (route.c) ---------------------------------------------------
 * Every command reaches its server through hilock__route (one request:
 * the server, or its slot's master, following redirections, failovers and
 * broken connections), built on hilock__conn_batch (requests pipelined on
 * one connection). */

/* One command; for a script, argv is EVALSHA sha numkeys keys... args... */
typedef struct hilock__req {
  int argc;
  const char **argv;
  const size_t *lens;
  const struct hilock__script *script; /* NOSCRIPT: sent again as EVAL */
  redisReply *reply;            /* the reply (the caller frees it) */
  int eval; /* the server said NOSCRIPT: goes as EVAL with the source */
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
 * ASKING: a cluster's one-shot ASK redirection (one request).
 * PING: the request may wake waiters; their messages go out before its
 *       reply (see route.c).
 * WAIT: replica acknowledgement of the writes, into *acked.
 * ROUTE_RESEND (hilock__route): safe to send again after a connection
 *       broke (the request may have run). */
#define HILOCK__SEND_ASKING 1u
#define HILOCK__SEND_PING 2u
#define HILOCK__SEND_WAIT 4u
#define HILOCK__ROUTE_RESEND 8u
/* A blocking command (BLPOP): its reply may take as long as the
 * connection's own timeout, which the caller set (not the command
 * timeout). */
#define HILOCK__SEND_BLOCKING 16u

/* Send q[0..n) on k and read every reply into q[i].reply (a script's
 * NOSCRIPT is answered with EVAL on k first). 0: all read (*acked: WAIT's
 * reply, -1 if it failed); 1: all but WAIT's reply, which never came (k
 * must not be reused); -1: k broke or timed out first (k->owed replies
 * unread; q[i].reply NULL for those). Reply waits are bounded by the
 * command timeout and the caller's deadline. */
int hilock__conn_batch(hilock_client *c, hilock__conn *k, unsigned flags,
                       hilock__req *q, int n, long long *acked);
/* Run q on the server that holds its first key (flags: HILOCK__SEND_PING,
 * HILOCK__SEND_WAIT, HILOCK__ROUTE_RESEND), within opts.reconnect_ms and
 * the caller's deadline. Error replies become status codes (a script that
 * EVAL could not load either: HILOCK_ESCRIPT); any other reply is left in
 * q->reply for the caller to freeReplyObject. */
int hilock__route(hilock_client *c, hilock__err *e, unsigned flags,
                  hilock__req *q, long long *acked);
/* A plain command through hilock__route: hilock__command (script.h). */

/* EXISTS key: *exists = 1 if it is there (HILOCK_EPROTO on an odd reply). */
int hilock__exists(hilock_client *c, hilock__err *e, const char *key,
                   size_t keylen, int *exists);

/* Connection pool, for callers that drive a connection themselves. */
int hilock__pool_get(hilock_client *c, hilock__err *e, hilock__conn **out,
                     int *fresh);
/* The same, waiting for a place in the pool or a connection until
 * deadline_ms. */
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
/* One attempt to open, authenticate and select on one address. */
int hilock__connect_addr(hilock_client *c, hilock__err *e,
                         const hilock__addr *a, hilock__conn **out);
/* A pooled connection to the server that holds key: the slot's owner on a
 * cluster, the one server otherwise. */
int hilock__pool_get_key(hilock_client *c, hilock__err *e, const char *key,
                         size_t keylen, hilock__conn **out, int *fresh);
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
 * A cluster client keeps a map of the 16384 hash slots to their masters
 * (read with CLUSTER SLOTS), an idle-connection pool per node, and routes
 * every command that carries keys by the slot of its first key. MOVED and
 * ASK are followed (ASKING before the retried command); the map is read
 * again after MOVED, after a connection to a node fails, and while
 * CLUSTERDOWN lasts, within opts.reconnect_ms. All fields are guarded by
 * c->mu; nodes are never freed before the client, so a connection may keep
 * a pointer to its node. */

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
/* A MOVED/ASK/CLUSTERDOWN/TRYAGAIN error reply seen on a connection to
 * from: record a MOVED owner and read the map again. Returns 1 if text was
 * such a reply. *ask (may be NULL) gets an ASK's target node. */
int hilock__cluster_redirected(hilock_client *c, hilock__node *from,
                               const char *text, size_t len,
                               hilock__node **ask);
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
/* 1 if r is an error that means the master moved (READONLY, LOADING,
 * MASTERDOWN) on a sentinel client: reconnect to the current master. */
int hilock__failover_reply(const hilock_client *c, const redisReply *r);

/* ## The undo of an ambiguous grant (call.c) -----------------------------
 * Armed by the grant script's caller (script.h); sent by the dispatcher. */

/* A reply timed out on k with `owed` replies unread: queue the armed undo
 * behind them on k and hand its socket to a reaper thread (k->ctx becomes
 * NULL). Returns 1 if the undo was sent, 0 if none was armed or it failed. */
int hilock__undo_queue(hilock_client *c, hilock__conn *k, int owed);

#endif /* HILOCK_ROUTE_H */
