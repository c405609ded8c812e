/* hilock internals: shared by the lock families, never installed. */
#ifndef HILOCK_INTERNAL_H
#define HILOCK_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "hilock/hilock.h"

/* ## Errors ------------------------------------------------------------- */

typedef struct hilock__err {
  int code;
  char msg[256];
} hilock__err;

/* Internal status: the server does not know a script's SHA1 yet. */
#define HILOCK__NOSCRIPT (-900)

/* Record code and a printf-style message in e (truncating); returns code. */
int hilock__set_err(hilock__err *e, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void hilock__clear_err(hilock__err *e);
/* 1 if r is an array of at least n elements, every one an integer (the
 * shape of every family script's reply). */
int hilock__int_reply(const struct redisReply *r, size_t n);
/* A wait of more than this many ms (about 35,000 years) is a wait without
 * limit: a deadline computed from it would overflow. */
#define HILOCK__WAIT_CAP_MS ((int64_t)1 << 50)
/* A fresh serial number for an object whose errors are kept per thread. */
uint64_t hilock__serial(void);
/* The calling thread's error slot for obj (NULL if it has none and create
 * is 0). */
hilock__err *hilock__tl_err(const void *obj, uint64_t serial, int create);
/* The calling thread's last message and status on obj ("" and HILOCK_OK
 * when it has had no failure there). */
const char *hilock__tl_msg(const void *obj, uint64_t serial);
int hilock__tl_code(const void *obj, uint64_t serial);
/* Map a Redis error reply to a status, copying Redis's text into e. */
int hilock__reply_error(hilock__err *e, const char *text, size_t len);

/* ## URLs --------------------------------------------------------------- */

/* One host:port of a URL's list: a cluster seed or a sentinel. */
typedef struct hilock__seed {
  char *host;
  int port;
} hilock__seed;

typedef struct hilock__url {
  int unix_socket;
  int cluster;          /* redis+cluster://: host/port is the first seed */
  hilock__seed *seeds;  /* cluster: every host:port of the URL */
  int nseeds;
  char *host; /* TCP host, brackets stripped */
  int port;
  char *path; /* unix socket path */
  char *user;
  char *password;
  int db;
  /* redis+sentinel://: the master is found through the sentinels. */
  int sentinel;
  char *master_name;
  hilock__seed *sentinels;
  int nsentinels;
  char *sentinel_user;
  char *sentinel_password;
  /* rediss: TLS to every server (and sentinel); ssl_* query parameters
   * (NULL / -1 when not given). */
  int tls;
  char *ssl_ca_certs, *ssl_ca_path, *ssl_certfile, *ssl_keyfile;
  char *ssl_password, *ssl_server_name;
  int ssl_cert_reqs, ssl_check_hostname;
} hilock__url;

int hilock__url_parse(const char *url, hilock__url *out, hilock__err *e);
void hilock__url_clear(hilock__url *u);
/* url for a message, in out[0..n) (truncated to fit): its passwords (the
 * userinfo's, password= and the like) shown as "***". */
void hilock__url_redact(const char *url, char *out, size_t n);
/* 1 if x and y name one server and database (see url.c); host names are
 * resolved and compared by address when resolve_names (each resolution
 * bounded by deadline_ms), else compared as written. */
int hilock__url_same_server(const hilock__url *x, const hilock__url *y,
                            int resolve_names, int64_t deadline_ms);

/* ## Transport (net.c, tls.c) ---------------------------------------------
 * hilock owns its sockets: TCP (IPv4, IPv6), unix sockets and TLS through
 * OpenSSL, always non-blocking (SOCK_NONBLOCK | SOCK_CLOEXEC, no SIGPIPE),
 * with every wait bounded by poll(). hiredis only formats commands and
 * parses replies (its reader, the same on 0.14 and 1.x). A connection is
 * used by one thread at a time. */

/* Failures of a connection; every one but ETIMEDOUT leaves it unusable. */
enum {
  HILOCK__NET_OK = 0,
  HILOCK__NET_EIO,       /* connect, read or write failed; closed by peer */
  HILOCK__NET_ETIMEDOUT, /* no reply (or connect) in time: still intact */
  HILOCK__NET_EPROTO,    /* the reply stream cannot be parsed */
  HILOCK__NET_ETLS,      /* TLS handshake or record failure */
  HILOCK__NET_ECERT,     /* the server's certificate was not accepted */
  HILOCK__NET_ENOMEM,
  HILOCK__NET_ESTOPPED   /* ->stop ended a wait (a reply is still owed) */
};

/* Where a connection goes: a unix socket path, or host and port. */
typedef struct hilock__addr {
  const char *path; /* non-NULL: unix socket */
  const char *host;
  int port;
} hilock__addr;

/* TLS settings as given (options, then URL query parameters). */
typedef struct hilock__tls_opts {
  const char *ca_certs, *ca_path, *certfile, *keyfile, *password;
  const char *server_name;
  int cert_reqs;      /* HILOCK_SSL_CERT_* */
  int check_hostname; /* 1: the certificate must name the host */
} hilock__tls_opts;

/* A TLS configuration made once (one SSL_CTX), shared read-only by every
 * connection made with it; connections keep their own reference. */
typedef struct hilock__tls hilock__tls;

int hilock__tls_new(const hilock__tls_opts *o, hilock__tls **out,
                    hilock__err *e);
void hilock__tls_free(hilock__tls *t);
/* The TLS configuration for u (NULL if u is not a TLS URL): u's ssl_*
 * query parameters, else o's options. */
int hilock__tls_for(const hilock_options *o, const hilock__url *u,
                    hilock__tls **out, hilock__err *e);

typedef struct hilock__net {
  int fd;
  int err;            /* HILOCK__NET_* */
  char errstr[200];
  int64_t timeout_ms; /* bound of each blocking wait; <= 0: none */
  /* A plain socket is blocking once connected (one recv waits for a
   * reply, no poll first); non-blocking I/O then passes MSG_DONTWAIT.
   * rcvtimeo_ms: the SO_RCVTIMEO in force (-1: not set yet). */
  int blocking;
  int64_t rcvtimeo_ms;
  int state;          /* 0 ready, 1 TCP connecting, 2 TLS handshake */
  redisReader *reader;
  size_t inbytes;     /* bytes fed since the last complete reply */
  int unread;         /* bytes fed since the reader last had no reply */
  int heard;          /* 1 once any byte came from the peer */
  char *obuf;         /* output not written yet */
  size_t olen, ocap;
  struct ssl_st *ssl; /* NULL: plain */
  short ssl_wants;    /* POLLIN/POLLOUT the last TLS call waits for */
  size_t ssl_retry;   /* length of an SSL_write to repeat, 0: none */
  char where[160];    /* host:port or path, for messages */
  char *host;         /* the host dialled (NULL for unix sockets) */
  int port;
  /* While set, a wait wakes at least every 100 ms and ends if stop(arg)
   * says so (a long blocking command: the caller's interrupt hook). */
  int (*stop)(void *arg);
  void *stop_arg;
} hilock__net;

/* Start connecting to a (non-blocking; tls NULL: plain). NULL only when out
 * of memory; a failure to start is in ->err. A host name is resolved on a
 * thread of its own, waited for until deadline_ms (INT64_MAX: no limit; a
 * fiber's event loop turns meanwhile). Drive it with
 * hilock__net_events/hilock__net_handle until hilock__net_ready. */
hilock__net *hilock__net_start(const hilock__addr *a, const hilock__tls *tls,
                               int64_t deadline_ms);
/* getaddrinfo(host, port) for TCP, on a thread of its own, waited for
 * until deadline_ms at most: its return code (0: *res is the caller's to
 * freeaddrinfo; *err: errno for EAI_SYSTEM), or 1 once the time ran out. */
struct addrinfo;
int hilock__resolve(const char *host, const char *port, int64_t deadline_ms,
                    struct addrinfo **res, int *err);
/* The same, waiting up to timeout_ms (<= 0: none) for it to be ready. */
hilock__net *hilock__net_connect(const hilock__addr *a, const hilock__tls *tls,
                                 int64_t timeout_ms);
int hilock__net_ready(const hilock__net *n);
/* The poll events the connection waits for now. */
short hilock__net_events(const hilock__net *n);
/* Progress after poll reported revents: finish connecting, write what is
 * queued, read what arrived into the reader. -1 if the connection failed
 * (->err), else 0. */
int hilock__net_handle(hilock__net *n, short revents);
/* Queue a command (binary-safe). -1 when out of memory. */
int hilock__net_append(hilock__net *n, int argc, const char **argv,
                       const size_t *lens);
/* A reply already read, or *reply = NULL; -1 on a protocol error. */
int hilock__net_reply(hilock__net *n, void **reply);
/* 1 if bytes came since the reader last had no whole reply. Handling a TLS
 * connection reads whatever has arrived (a write included), so a whole
 * reply may wait there with nothing more to come on the socket, which poll
 * would not report: take replies before polling. */
int hilock__net_buffered(const hilock__net *n);
/* Write what is queued and wait for the next reply, each wait bounded by
 * ->timeout_ms: 0 and *reply, or -1 (->err). */
int hilock__net_get_reply(hilock__net *n, void **reply);
/* Write out everything queued, bounded by ->timeout_ms. */
int hilock__net_flush(hilock__net *n);
/* Have the calling thread call fn(arg) once, when its next reply wait
 * (hilock__net_get_reply) has written its request and is about to wait
 * (NULL: none). The async runner wakes its loop then, while a rung
 * attempt is on the wire. */
void hilock__net_on_sent(void (*fn)(void *), void *arg);
/* Append + get_reply; NULL on failure (->err). */
redisReply *hilock__net_command(hilock__net *n, int argc, const char **argv,
                                const size_t *lens);
void hilock__net_set_timeout(hilock__net *n, int64_t ms);
/* 1 if an idle connection was closed by the server (or sent something no
 * command asked for). */
int hilock__net_idle_dead(hilock__net *n);
/* After a reply wait timed out: the connection is intact, clear the flag. */
void hilock__net_clear_timeout(hilock__net *n);
void hilock__net_keepalive(hilock__net *n);
/* HILOCK_ETIMEDOUT, HILOCK_EIO, HILOCK_EPROTO, HILOCK_ETLS, HILOCK_ECERT,
 * HILOCK_ENOMEM or HILOCK_EINTR (stopped) for ->err. */
int hilock__net_status(const hilock__net *n);
/* Close without a word to the peer (no TLS close_notify: safe in a forked
 * child). NULL is a no-op. */
void hilock__net_free(hilock__net *n);
/* Set ->err and ->errstr (printf-style); returns -1. */
int hilock__net_fail(hilock__net *n, int err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* TLS side of a connection (tls.c), called by net.c. */
int hilock__tls_attach(hilock__net *n, const hilock__tls *t, const char *host);
int hilock__tls_handshake(hilock__net *n);
/* Bytes moved, 0 when the call must wait (->ssl_wants), -1 on failure. */
long hilock__tls_write(hilock__net *n, const char *buf, size_t len);
long hilock__tls_read(hilock__net *n, char *buf, size_t len);
void hilock__tls_close(hilock__net *n);

/* ## Client and its connection pool ------------------------------------- */

struct hilock__node;

typedef struct hilock__conn {
  hilock__net *ctx;
  /* The pool whose bound counts it (opts.max_connections): its counter
   * and client, or NULL (a wait's own BLPOP connection, Redlock's). */
  int *open;
  struct hilock_client *client;
  pid_t pid;
  int owed; /* replies still owed when hilock__conn_send returned NULL */
  struct hilock__conn *next;
  struct hilock__node *node; /* cluster: the node it talks to, else NULL */
} hilock__conn;

#define HILOCK__TOKEN_LEN 32

struct hilock__renewal;

/* The client's renewal thread and the holds it renews (see renewal.c). */
typedef struct hilock__watchdog {
  pthread_mutex_t mu;
  pthread_cond_t wake; /* new work or stop: the thread re-plans */
  pthread_cond_t idle; /* a batch finished: cancellers may proceed */
  pthread_t thread;
  int running;
  int stop;
  /* When the sleeping thread will wake on its own (0: it is awake and will
   * look at the list again): a new hold due later needs no wake-up. */
  int64_t wake_at_us;
  int idle_ticks; /* looks in a row with no hold (see renewal.c) */
  struct hilock__renewal *head;
  hilock__conn *conn;
  struct hilock__hold *live; /* every grant of this process (see hold.c) */
} hilock__watchdog;

/* Shared waiting (hub.c): one subscriber connection per client, its
 * thread, and the wake lists some thread of the client waits on. */
typedef struct hilock__hub {
  pthread_mutex_t mu;
  pthread_cond_t idle; /* the thread's backoff and turns; its exit */
  pthread_t thread;
  int running, stop;
  int disabled; /* SUBSCRIBE or PUBLISH refused: waits block in BLPOP */
  int publish;  /* PUBLISH on a wake list: 0 unchecked, 1 allowed,
                 * 2 refused, 3 being checked (see hub.c) */
  int connected; /* has been connected once (later ones are reconnects) */
  int efd;      /* eventfd that wakes whoever reads the socket */
  int reading;  /* who reads the socket now: 0 none, 1 the thread, 2 a waiter */
  int sleepers; /* waiters asleep, ready to take a turn at the socket */
  int async_readers; /* async runners' idle workers that read it instead */
  int lingering; /* channels nobody waits on, still subscribed */
  int settle;    /* a channel to give up after the attempt */
  int due;       /* a channel is due to go (hilock__hub_flush sends it) */
  pid_t pid;
  struct hub_chan *chans;
  hilock__net *net; /* the subscriber connection */
} hilock__hub;

/* ## Statistics and log (stats.c) ----------------------------------------
 * Counted in the shared layer (hold.c, wait.c, async.c, renewal.c,
 * route.c, hub.c; the families' one-shot attempts) with relaxed atomic
 * increments; the log callback is called with no mutex of the runtime or
 * client held. */
enum {
  HILOCK__ST_ACQUIRED,
  HILOCK__ST_BUSY,
  HILOCK__ST_TIMEOUTS,
  HILOCK__ST_WAITS,
  HILOCK__ST_ERRORS,
  HILOCK__ST_LOST,
  HILOCK__ST_RENEWALS,
  HILOCK__ST_RENEWAL_FAILURES,
  HILOCK__ST_RECONNECTS,
  HILOCK__ST_REDIRECTIONS,
  HILOCK__ST_FAILOVERS,
  HILOCK__ST_N
};

typedef struct hilock__hist {
  _Atomic uint64_t sum_us;
  _Atomic uint64_t b[HILOCK_STATS_BUCKETS];
} hilock__hist;

typedef struct hilock__stats {
  _Atomic uint64_t n[HILOCK__ST_N];
  hilock__hist wait, hold;
} hilock__stats;

struct hilock__runtime;
/* Count one event of kind HILOCK__ST_*. */
void hilock__stat(struct hilock__runtime *rt, int kind);
/* A time into a histogram. */
void hilock__stat_time(hilock__hist *hist, int64_t us);
/* The end of one acquire call with status rc: wait_ms its wait (0: one
 * attempt), start_us when it began, waited: it slept at least once.
 * Counts busy, timeouts, errors, waits and the wait time; returns rc. */
int hilock__stat_acquire(struct hilock__runtime *rt, int rc, int64_t wait_ms,
                         int64_t start_us, int waited);
/* A one-shot attempt's status rc (a try_acquire): counted as an acquire
 * without waiting; returns rc. */
int hilock__stat_try(struct hilock__runtime *rt, int rc);
/* A record for the runtime's log callback, if it has one (lock: a key, of
 * which the name in its hash tag is reported; NULL: none). printf-style. */
void hilock__log(struct hilock__runtime *rt, int level, const char *lock,
                 size_t locklen, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* ## Runtime (runtime.c) -------------------------------------------------
 * What every front end shares besides its connections: its options
 * (timeouts, the interrupt hook), the renewal thread and the grants it
 * renews, the lock of handles that threads share, a lifetime (references,
 * closed), and fork handling: every runtime is in a registry; around fork()
 * its locks are taken (the child never inherits one mid-update), and in
 * the child the parent's renewal thread and grants are forgotten. A client
 * is a runtime with connections (its first member); Redlock, which drives
 * its own connections, owns a bare runtime. */
typedef struct hilock__runtime {
  /* refs and closed; in a client, its pool and cluster map too */
  pthread_mutex_t mu;
  /* Guards the state of lock handles that threads share (rlock, rwlock).
   * Held only briefly, never across a round trip; taken before mu and
   * wd.mu, and held across fork() like them. */
  pthread_mutex_t hmu;
  int refs;   /* a client: user reference + one per lock handle */
  int closed; /* hilock_client_free was called */
  hilock_options opts;
  hilock__watchdog wd;
  struct hilock_client *client; /* the client it is part of; NULL: bare */
  struct hilock__runtime *reg_prev, *reg_next; /* the fork registry */
  hilock__stats stats;
  hilock_log_fn log_fn; /* and log_arg: guarded by mu */
  void *log_arg;
  char prefix[HILOCK_KEY_PREFIX_MAX + 1]; /* of every key (key_prefix) */
  size_t prefixlen;
} hilock__runtime;

/* Initialise rt (options: the defaults) and enter it in the registry;
 * client: the client it is part of, or NULL. -1 out of memory. */
int hilock__runtime_init(hilock__runtime *rt, struct hilock_client *client);
/* Take opts.key_prefix (NULL or "": "hilock:") as rt's key prefix, and
 * forget the caller's pointer. HILOCK_EINVAL (in e) if it is too long or
 * holds a brace. */
int hilock__runtime_prefix(hilock__runtime *rt, hilock__err *e);
/* Stop its renewal thread, leave the registry, free what it owns. */
void hilock__runtime_destroy(hilock__runtime *rt);
/* 1 if options are valid (timeouts >= 0, connect >= 1 ms, ...). */
int hilock__options_ok(const hilock_options *o);
/* The child of a fork (rt->mu, hmu, wd.mu and the hub's mu held): the
 * client's own part (client.c). */
void hilock__client_after_fork(struct hilock_client *c);
/* The client's hub mutex, taken around fork() with the runtime's. */
pthread_mutex_t *hilock__client_fork_mutex(struct hilock_client *c);

struct hilock_client {
  hilock__runtime rt; /* first */
  uint64_t serial;    /* its failed calls' errors are kept per thread */
  pid_t pid;  /* process that owns the pooled connections */
  char id[HILOCK__TOKEN_LEN + 1]; /* random; new in a forked child */
  hilock__url url;
  hilock__tls *tls; /* rediss: the TLS configuration, else NULL */
  struct hilock__cluster *cl; /* cluster: slot map, nodes' pools (cluster.c) */
  int sentinel_next; /* sentinel to ask first (the last that answered) */
  hilock__conn *idle;
  int nidle;
  int nopen; /* pooled connections open (idle or in use) */
  pthread_cond_t pool_cv; /* a pooled connection closed or came back */
  hilock__hub hub;
  int waiting; /* threads asleep in a wait (atomic) */
  int direct;     /* threads in a direct wait (wait.c; atomic) */
  int direct_off; /* the server refused BLPOP: no direct waits (atomic) */
  int shaken; /* a pooled connection broke: a new one carries a request
                 once one answered (route.c; atomic) */
};

void hilock__client_ref(hilock_client *c);
/* A call on the client itself (not through a lock handle) holds a
 * reference while it runs, so a concurrent hilock_client_free never frees
 * memory under it: HILOCK_ECLOSED (in e) if the client is closed. */
int hilock__client_enter(hilock_client *c, hilock__err *e);
/* Where a failed client-level call (connecting, ping, a constructor)
 * records its error: the calling thread's slot for the client. */
hilock__err *hilock__client_err(hilock_client *c);
#define hilock__client_leave hilock__client_unref
/* Return expr (a constructor's work on client) run as such a call. */
#define HILOCK__CLIENT_CALL(client, out, expr)                 \
  do {                                                          \
    int rc_;                                                    \
    if ((client) == NULL || (out) == NULL) return (expr);       \
    rc_ = hilock__client_enter((client), hilock__client_err(client)); \
    if (rc_ != HILOCK_OK) {                                     \
      *(out) = NULL;                                            \
      return rc_;                                               \
    }                                                           \
    rc_ = (expr);                                               \
    hilock__client_leave(client);                               \
    return rc_;                                                 \
  } while (0)
/* 1 if c talks to a Redis Cluster (every script must stay in one slot). */
int hilock__client_is_cluster(const hilock_client *c);
void hilock__client_unref(hilock_client *c);
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
/* A plain command through hilock__route, resent after a broken connection;
 * the reply in *out. */
int hilock__command(hilock_client *c, hilock__err *e, int argc,
                    const char **argv, const size_t *lens, redisReply **out);

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

/* ## Waiting ------------------------------------------------------------- */

/* Shared waiting (hub.c). hilock__hub_wait sleeps until a release of the
 * wake list key rings and this thread pops a wake-up (*woken = 1), or
 * bound_ms passes; HILOCK__HUB_OFF if the client cannot wait that way (the
 * server refused SUBSCRIBE): the caller blocks in BLPOP instead. */
#define HILOCK__HUB_OFF 900
/* How a family's waiters are woken (the wake argument of the waits below):
 * HILOCK__WAKE_TAKES: the caller's next attempt takes a rung wake-up
 * itself (its script pops the wake list); HILOCK__WAKE_CHANNEL: the wake
 * key is a pub/sub channel with no list behind it (Redisson's): any
 * message on it lets every waiter of the client try again, a look at the
 * list means another attempt, and there is nothing to block on in BLPOP
 * (without the shared waiting the wait naps, hilock__redisson_nap). */
#define HILOCK__WAKE_TAKES 1
#define HILOCK__WAKE_CHANNEL 2
/* Whether any of c's waits (threads or async) is in the shared waiting on
 * key's channel. */
int hilock__hub_waited(hilock_client *c, const char *key, size_t keylen);
/* Count a thread into (d = 1) or out of (-1) c's waiting threads;
 * shared: it waits in the shared waiting (not in a BLPOP of its own). */
void hilock__waiting_add(hilock_client *c, int d, int shared);
/* Threads in the shared waiting of every client of the process. */
int hilock__waiting_all(void);
int hilock__hub_init(hilock__hub *h);
/* tried_us: when the caller's last attempt began (hilock__now_us; 0 if
 * unknown): a subscription confirmed before it needs no first look.
 * wake: HILOCK__WAKE_* flags. With WAKE_TAKES a rung waiter returns
 * *woken = 2 at once instead of popping first. */
int hilock__hub_wait(hilock_client *c, hilock__err *e, const char *key,
                     size_t keylen, int64_t bound_ms, int64_t tried_us,
                     int wake, int *woken);
/* A wait without a thread (async.c). hilock__hub_join registers on key's
 * channel and returns at once (HILOCK__HUB_OFF as above); notify(arg) is
 * then called, with the hub's lock held (it must only take locks of its
 * own), whenever the wait may have moved on, and hilock__hub_check says
 * where it is: asleep, woken (*woken as hilock__hub_wait's), to look at
 * the list (hilock__hub_pop, then check again: 1 popped a wake-up, as
 * woken 1), or to try again (the hub reconnected). hilock__hub_quit ends
 * it (woken: its attempt follows a wake-up). */
typedef struct hilock__hub_ticket hilock__hub_ticket;
#define HILOCK__HUB_SLEEP 0
#define HILOCK__HUB_WOKEN 1
#define HILOCK__HUB_LOOK 2
#define HILOCK__HUB_RETRY 3
int hilock__hub_join(hilock_client *c, hilock__err *e, const char *key,
                     size_t keylen, int wake, int64_t tried_us,
                     void (*notify)(void *), void *arg,
                     hilock__hub_ticket **out);
int hilock__hub_check(hilock_client *c, hilock__hub_ticket *t, int wake,
                      int *woken);
int hilock__hub_pop(hilock_client *c, hilock__err *e, const char *key,
                    size_t keylen);
/* An async runner's idle worker reads the socket itself, as a waiting
 * thread does, so a release that rings one of its waiters wakes the thread
 * that runs the attempt. hilock__hub_want(c, 1) before the turns (the
 * hub's thread then stands by), 0 after; hilock__hub_turn reads for up to
 * ms: 1 if it did, 0 if another reads (or the hub is down); kick ends a
 * turn early (new work for the worker). */
void hilock__hub_want(hilock_client *c, int want);
int hilock__hub_turn(hilock_client *c, int64_t ms);
void hilock__hub_kick(hilock_client *c);
void hilock__hub_quit(hilock_client *c, hilock__hub_ticket *t, int woken);
/* After an acquire whose last wait was woken: the wake list's channel, if
 * nobody waits on it, is due to go at the next turn at the socket (no I/O
 * and no wake-up on the path from wake-up to grant). */
void hilock__hub_settle(hilock_client *c, const char *key, size_t keylen);
/* Before a script that may wake waiters: send the UNSUBSCRIBE of a channel
 * that is due (one atomic load when none is), so that the release's own
 * wake-up does not come back to this process. */
void hilock__hub_flush(hilock_client *c);
/* Stop the thread for good (the client closes). */
void hilock__hub_stop(hilock_client *c);
void hilock__hub_destroy(hilock__hub *h);
/* Fork (h->mu held): forget the parent's thread, waiters and socket. */
void hilock__hub_forget(hilock__hub *h);

/* Sleep until a release of the lock's wake list wakes us (shared waiting,
 * or BLPOP) for up to bound_ms, checking the client's interrupt hook every
 * 100 ms. *woken = 1 if a releaser's wake-up arrived. tried_us: when the
 * last attempt began (see hilock__hub_wait). Returns HILOCK_OK,
 * HILOCK_EINTR or an error. */
int hilock__wait_wake(hilock_client *c, hilock__err *e, const char *key,
                      size_t keylen, int64_t bound_ms, int64_t tried_us,
                      int wake, int *woken);
/* Its first part: a direct wait (BLPOP on a pooled connection) when the
 * client has a place free for one; HILOCK__HUB_OFF when it has none (or
 * refuses BLPOP), else as hilock__wait_wake. */
int hilock__wait_direct(hilock_client *c, hilock__err *e, const char *key,
                        size_t keylen, int64_t bound_ms, int wake,
                        int *woken);
/* Whether hilock__wait_direct would find a place now (none is taken). */
int hilock__direct_free(hilock_client *c, const char *key, size_t keylen,
                        int wake);

/* Run attempt() until it grants (0), fails (< 0) or wait_ms passes
 * (HILOCK_BUSY). Between attempts, sleep on the wake list until a releaser
 * wakes us, bounded by the holder's remaining TTL as reported by attempt()
 * in *pttl (-1: no expiry) and the caller's deadline. An attempt may report
 * a shorter bound (the fair lock's heartbeat interval). */
int hilock__acquire_loop(hilock_client *c, hilock__err *e, const char *wkey,
                         size_t wkeylen, int64_t wait_ms,
                         int (*attempt)(void *arg, int64_t *pttl), void *arg);
/* The same for an attempt whose script can take a rung wake-up itself
 * (pops the wake list first, in the same round trip): during the attempt,
 * hilock__attempt_woken() is 2 when it must (a release rang this waiter),
 * and the script then grants only if the pop found a wake-up. */
int hilock__acquire_loop_taking(hilock_client *c, hilock__err *e,
                                const char *wkey, size_t wkeylen,
                                int64_t wait_ms,
                                int (*attempt)(void *arg, int64_t *pttl),
                                void *arg);
/* A family's acquire, as hilock__acquire_loop_var runs it: attempt(arg)
 * until it grants, sleeping on the wake list *wkey between attempts;
 * wake: HILOCK__WAKE_* flags. */
typedef struct hilock__acquire_spec {
  int (*attempt)(void *arg, int64_t *pttl);
  void *arg;
  const char *const *wkey;
  const size_t *wkeylen;
  int wake; /* HILOCK__WAKE_* flags */
  /* A family whose waiters queue (fair, sequential): begin (refuse a
   * second grant, draw a waiter id; queueing when the caller will wait)
   * comes first, and every end but a grant leaves the queue (a one-shot
   * try leaves only after an error). NULL for the others. */
  int (*begin)(void *arg, int queue);
  void (*leave)(void *arg);
  /* Called once when the acquire ends (NULL: nothing to do), with its
   * status; returns the status to report (Redlock reports a missing quorum
   * where the wait ran out). A family whose arg is the context of one
   * acquire frees it here. */
  int (*done)(void *arg, int status);
  /* An event loop's wait key when it depends on the owner (Redisson's fair
   * lock: a channel per waiter): written into buf (cap bytes) by the
   * operation's own step, its length returned. NULL: *wkey. */
  size_t (*wkey_for)(void *arg, char *buf, size_t cap);
} hilock__acquire_spec;
/* One attempt of s, as the loop makes it after a wait that ended with
 * woken (see hilock__attempt_woken). */
int hilock__acquire_step(const hilock__acquire_spec *s, int woken,
                         int64_t *pttl);
/* hilock__acquire_loop_var for s. */
int hilock__acquire(hilock_client *c, hilock__err *e,
                    const hilock__acquire_spec *s, int64_t wait_ms);
/* A spec whose attempt takes a rung wake-up itself (HILOCK__WAKE_TAKES). */
void hilock__spec(hilock__acquire_spec *s, int (*attempt)(void *, int64_t *),
                  void *arg, const void *wkey, const size_t *wkeylen);
/* A queue family's spec (wake 0; begin and leave). */
void hilock__spec_queue(hilock__acquire_spec *s,
                        int (*begin)(void *, int),
                        int (*attempt)(void *, int64_t *),
                        void (*leave)(void *), void *arg, const void *wkey,
                        const size_t *wkeylen);
/* The end of an acquire of s that made its begin (queue: it would wait)
 * with status: leave the queue unless it granted (a one-shot try only
 * after an error), then done; returns the status to report. */
int hilock__spec_end(const hilock__acquire_spec *s, int queue, int status);
/* Redlock's acquire as a spec, for async.c (its arg: one acquire's
 * context, freed by done). -1 when out of memory. */
int hilock__redlock_spec(struct hilock_redlock *rl, hilock__acquire_spec *s);
/* A read-write lock's side as a spec, for async.c: its arg is the context
 * of one acquire, freed by done. -1 when out of memory. */
int hilock__rwlock_spec(struct hilock_rwlock *rw, int read,
                        hilock__acquire_spec *s);
/* The blocking acquire of a hold whose family has a spec. */
int hilock__hold_acquire(struct hilock__hold *h, int64_t wait_ms);
/* The verbs a family writes alike, for its handle type (its hold h first,
 * its wake list in wkey, wkeylen) and the file's static attempt (and, for a
 * queue family, begin and leave), each defining type_verb:
 *   HILOCK__ACQUIRE_VERB       acquire: hilock__hold_acquire on the spec;
 *   HILOCK__TRY_ACQUIRE_AND_SPEC  try_acquire (one counted attempt) and the file's
 *                              static acquire_spec (hilock__spec);
 *   HILOCK__ATTEMPT_VERBS      both of these;
 *   HILOCK__QUEUE_VERBS        a queue family's acquire_spec
 *                              (hilock__spec_queue), try_acquire (an
 *                              acquire that does not wait) and acquire;
 *   HILOCK__HOLD_EXTEND_VERBS  extend and renew by hilock__hold_extend;
 *   HILOCK__RELEASE_VERB       release: the file's static run_release through
 *                              hilock__hold_release_reply (array, and the
 *                              message when it was not owned, as there). */
#define HILOCK__ACQUIRE_VERB(type)                                            \
  int type##_acquire(type *lk, int64_t wait_ms) {                             \
    return lk == NULL ? HILOCK_EINVAL : hilock__hold_acquire(&lk->h, wait_ms); \
  }
#define HILOCK__TRY_ACQUIRE_AND_SPEC(type)                                    \
  int type##_try_acquire(type *lk) {                                          \
    int64_t pttl;                                                             \
    if (lk == NULL) return HILOCK_EINVAL;                                     \
    return hilock__stat_try(lk->h.rt, attempt(lk, &pttl));                    \
  }                                                                           \
  static void acquire_spec(void *arg, hilock__acquire_spec *sp) {             \
    type *lk = arg;                                                           \
    hilock__spec(sp, attempt, lk, &lk->wkey, &lk->wkeylen);                   \
  }
#define HILOCK__ATTEMPT_VERBS(type)                                           \
  HILOCK__TRY_ACQUIRE_AND_SPEC(type)                                          \
  HILOCK__ACQUIRE_VERB(type)
#define HILOCK__QUEUE_VERBS(type)                                             \
  static void acquire_spec(void *arg, hilock__acquire_spec *sp) {             \
    type *lk = arg;                                                           \
    hilock__spec_queue(sp, begin, attempt, leave, lk, &lk->wkey,              \
                       &lk->wkeylen);                                         \
  }                                                                           \
  int type##_try_acquire(type *lk) {                                          \
    return lk == NULL ? HILOCK_EINVAL : hilock__hold_acquire(&lk->h, 0);      \
  }                                                                           \
  HILOCK__ACQUIRE_VERB(type)
/* The extend and renew entries of a family's table (hilock__family): static
 * extend_fn and renew_fn, calling type_extend and type_renew. */
#define HILOCK__EXTEND_ADAPTERS(type)                                         \
  static int extend_fn(void *x, int64_t ms, int replace) {                    \
    return type##_extend(x, ms, replace);                                     \
  }                                                                           \
  static int renew_fn(void *x) { return type##_renew(x); }
#define HILOCK__RELEASE_VERB(type, array, notowned)                           \
  int type##_release(type *lk) {                                              \
    if (lk == NULL) return HILOCK_EINVAL;                                     \
    return hilock__hold_release_reply(&lk->h, run_release, lk, array,         \
                                      notowned);                              \
  }
#define HILOCK__HOLD_EXTEND_VERBS(type)                                       \
  int type##_extend(type *lk, int64_t ms, int replace) {                      \
    if (lk == NULL) return HILOCK_EINVAL;                                     \
    return hilock__hold_extend(&lk->h, ms, replace);                          \
  }                                                                           \
  int type##_renew(type *lk) {                                                \
    if (lk == NULL) return HILOCK_EINVAL;                                     \
    return hilock__hold_extend(&lk->h, lk->h.ttl_ms, 1);                      \
  }
/* For the attempt in progress on this thread: 0 (first attempt, or no
 * wake-up), 1 (a wake-up was taken for it) or 2 (rung: it must take it). */
int hilock__attempt_woken(void);
/* The same for an attempt that chooses the wake list to sleep on (a
 * multi-key lock waits on the key that blocked it): *wkey and *wkeylen are
 * read after every attempt. wake: HILOCK__WAKE_* flags. */
int hilock__acquire_loop_var(hilock_client *c, hilock__err *e,
                             const char *const *wkey, const size_t *wkeylen,
                             int wake, int64_t wait_ms,
                             int (*attempt)(void *arg, int64_t *pttl),
                             void *arg);

/* Heartbeated waiters (fair lock, sequential lock): a waiter's liveness
 * window defaults to its lock's TTL clamped to min_ms..max_ms. A waiter
 * re-checks at least every window/3, and sooner when what it watches (the
 * holder's TTL, its predecessor's session: watch_ms > 0) runs out first;
 * hilock__beat_bound gives that sleep for hilock__acquire_loop. */
int64_t hilock__beat_default(int64_t ttl_ms, int64_t min_ms, int64_t max_ms);
int64_t hilock__beat_bound(int64_t beat_ms, int64_t watch_ms);
/* The start of a queue family's acquire on hold h: HILOCK_EINVAL if the
 * handle still holds its grant (these locks are not reentrant), else drop
 * the last grant and draw the acquire's waiter id (the owner token if it is
 * granted) into id. */
int hilock__queue_begin(struct hilock__hold *h, char *id);
/* After an extend or renew script whose status *rc is HILOCK_ENOREPLICAS
 * (callers test that first, since r is valid only then) and whose reply r
 * says it extended (done): 1 if it was extended on the master only (r is
 * freed, the validity must not be extended, *rc is to be reported); else
 * 0, with *rc turned into HILOCK_OK: a refusal, which the reply tells
 * (family.c). */
int hilock__extended_unacked(int *rc, redisReply *r, int done);

/* ## Holds and renewal ---------------------------------------------------- */

/* Renewal state of one hold; owned by the watchdog's mutex while
 * registered. */
typedef struct hilock__renewal {
  struct hilock__renewal *prev, *next;
  int registered;
  int in_batch;  /* the thread is renewing it outside the mutex */
  int renew;     /* renew on schedule (0 once max hold is reached) */
  int64_t next_due_us;
  int64_t max_until_us; /* 0: no limit */
} hilock__renewal;


/* ## One call's context (call.c) ------------------------------------------
 * Per thread: the caller's deadline, which caps every reconnect budget,
 * connect timeout and reply wait below it; the undo of an ambiguous grant;
 * and the closing client's leave to use its pool while it releases holds. */

/* Start a call bounded by deadline_ms (monotonic; INT64_MAX: none); returns
 * the outer bound, to give back to hilock__call_end. Bounds only shrink. */
int64_t hilock__call_begin(int64_t deadline_ms);
void hilock__call_end(int64_t outer);
int64_t hilock__call_deadline(void);
/* Lift the call's deadline for work that must not be cut short by it (giving
 * back a grant: bounded by the client's own timeouts); returns the outer
 * bound, to give back to hilock__call_end. */
int64_t hilock__call_lift(void);
/* now + ms, or the call's deadline if sooner. */
int64_t hilock__budget(int64_t ms);
/* deadline_ms, or the cut of a cancelled attempt (callstate.cut_ms) if
 * sooner: every wait of the call ends by then. */
int64_t hilock__call_cut(int64_t deadline_ms);
/* A wait of ms (<= 0: none) shortened to what is left of the call (>= 1). */
int64_t hilock__io_ms(int64_t ms);

/* The owner-checked release that undoes a grant script whose reply did not
 * come (KEYS and ARGV as the script takes them). */
typedef struct hilock__undo {
  const struct hilock__script *script;
  int nkeys, nargs;
  const char *const *keys;
  const size_t *keylens;
  const char *const *args;
  const size_t *arglens;
  int64_t wait_ms; /* how long the reaper waits for the replies (the TTL) */
  const struct hilock__undo *then; /* a second script queued after it */
} hilock__undo;
/* Arm u for the grant script this thread sends next; returns the outer
 * undo, to give back to hilock__undo_disarm. */
const hilock__undo *hilock__undo_arm(const hilock__undo *u);
void hilock__undo_disarm(const hilock__undo *outer);
/* 1 if the undo armed last on this thread went out behind its unanswered
 * script (the caller's own clean-up would only wait on the same server). An
 * event loop's step starts at 0, so a leave in a later step sends its own. */
int hilock__undo_queued(void);
/* A reply timed out on k with `owed` replies unread: queue the armed undo
 * behind them on k and hand its socket to a reaper thread (k->ctx becomes
 * NULL). Returns 1 if the undo was sent, 0 if none was armed or it failed. */
int hilock__undo_queue(hilock_client *c, hilock__conn *k, int owed);

/* The thread that closes c may still use its pool (to release its holds);
 * returns the previous closer of this thread. */
const hilock_client *hilock__closer_set(const hilock_client *c);
/* 1 if c is open, or closing on this thread. */
int hilock__client_usable(const hilock_client *c);
/* 1 if this thread is the one closing c. */
int hilock__closing_here(const hilock_client *c);
/* 1 if rt is open, or its client is closing on this thread (a bare
 * runtime is never closed). */
int hilock__runtime_usable(const hilock__runtime *rt);

/* ## Scripts ------------------------------------------------------------ */

typedef struct hilock__script {
  const char *name;
  const char *src;
  size_t len;
  const char *sha; /* 40 hex chars */
  int once;        /* not safe to resend (the file says "-- @once") */
  int grant;       /* grants or renews a hold ("-- @grant"): followed by
                      WAIT when opts.wait_replicas > 0 */
  int wakes;       /* may wake waiters ("-- @wakes"): PING goes first */
} hilock__script;

/* A reentrant lock's layout (rlock.c): hilock's own, or one of Redisson's
 * (redisson.c: RLock, either side of RReadWriteLock). keys returns the lock hash's name (NULL: no memory) and
 * gives the fence key and the wake list (or channel) as malloc'd strings;
 * the scripts keep rlock_*.lua's keys, arguments and replies. */
typedef struct hilock__rlock_layout {
  char *(*keys)(const hilock__runtime *rt, const char *name, size_t namelen,
                char **fkey,
                size_t *fkeylen, char **wkey, size_t *wkeylen,
                size_t *keylen);
  const hilock__script *acquire, *release, *drop, *renew;
  const char *suffix; /* appended to the owner id ("" or Redisson's ":write") */
  /* A queue (Redisson's fair lock): a waiter that gives up runs withdraw
   * (KEYS lock, wake; ARGV owner, ttl), and waits on wake:<owner>. */
  const hilock__script *withdraw;
  /* hilock's own scripts: safe to resend (rlock_*.lua; Redisson's are sent
   * once). Acquire takes the call's nonce as ARGV[3] ("woken" moves to
   * ARGV[4]); release the nonce and the done marker's lifetime as ARGV[3]
   * and ARGV[4], the owner's done marker as KEYS[3]. */
  int resend;
  /* The wake key is Redisson's pub/sub channel (HILOCK__WAKE_CHANNEL). */
  int channel;
} hilock__rlock_layout;
struct hilock_rlock;
int hilock__rlock_new_with(hilock_client *client, const char *name,
                           size_t namelen, int64_t ttl_ms,
                           const hilock__rlock_layout *lay,
                           struct hilock_rlock **out);
/* Without the shared waiting there is no list to block on behind such a
 * channel: sleep at most 500 ms of bound_ms (so a Redisson
 * release is noticed that soon), ending early when the client closes or
 * its interrupt hook fires. Returns HILOCK_OK (no wake-up) or the error. */
int hilock__redisson_nap(hilock_client *c, hilock__err *e, int64_t bound_ms);

/* Most keys + args of one script run (a multi-key lock of
 * HILOCK_MULTI_LOCK_MAX names passes 3 keys per name). */
#define HILOCK__SCRIPT_ARGS_MAX 4096

/* EVALSHA the script; on NOSCRIPT, EVAL it (which also loads it). Keys only
 * through keys[], values only through args[]; at most
 * HILOCK__SCRIPT_ARGS_MAX in all (HILOCK_EINVAL beyond).
 * For a @grant script with opts.wait_replicas > 0, WAIT follows on the same
 * connection; if fewer replicas acknowledged, the result is
 * HILOCK_ENOREPLICAS with the script's reply STILL in *out (the caller
 * frees it, and undoes a grant or does not count a renewal). */
int hilock__script_run(hilock_client *c, hilock__err *e,
                       const hilock__script *s, int nkeys, const char **keys,
                       const size_t *keylens, int nargs, const char **args,
                       const size_t *arglens, redisReply **out);

/* What a resendable release of the reentrant or read-write lock carries
 * besides its owner (core/scripts/lib/resend.lua): the call's nonce, the
 * owner's done marker key (<side key>:done:<owner>) and how long the marker
 * lives. The nonce is 128 bits from getrandom(2), as owner tokens are: the
 * owner id is shared by every handle of the name on the thread (and by
 * async operations' owners), so a per-hold counter would need state shared
 * between them; a random nonce is unique with none, across handles, forks
 * and processes. */
typedef struct hilock__resend {
  char nonce[HILOCK__TOKEN_LEN + 1];
  char keep[24];
  size_t keeplen;
  char *done; /* malloc'd (NULL for an acquire's, which needs no marker) */
  size_t donelen;
} hilock__resend;
/* Draw x's nonce; with key != NULL also its done marker key for owner and
 * its lifetime: the client's resend window (reconnect_ms and one
 * command_timeout_ms) and a second more. HILOCK_OK, or the error in e. */
int hilock__resend_init(hilock__resend *x, const hilock_client *c,
                        hilock__err *e, const char *key, size_t keylen,
                        const char *owner, size_t ownerlen);
void hilock__resend_free(hilock__resend *x);

/* The same for a script that serves several operations: how this call
 * runs, whatever the file says: HILOCK__RUN_GRANT as @grant (WAIT
 * follows), HILOCK__RUN_WAKES as @wakes (PING goes first). */
#define HILOCK__RUN_GRANT 1
#define HILOCK__RUN_WAKES 2
int hilock__script_run_as(hilock_client *c, hilock__err *e,
                          const hilock__script *s, int how, int nkeys,
                          const char **keys, const size_t *keylens, int nargs,
                          const char **args, const size_t *arglens,
                          redisReply **out);
/* For a script that grants or queues a waiter ({1, ...} when granted: the
 * fair and sequential locks): rc from running it. On HILOCK_ENOREPLICAS a
 * grant stays an error, saying it is given back (r is freed: the caller's
 * leave gives it back); a queued reply goes on as HILOCK_OK, since only a
 * grant needs confirming. Other rc are returned as they are. */
int hilock__queued_unacked(hilock__err *e, int rc, redisReply *r);
/* A grant the replicas did not acknowledge was given back (undo_rc: the
 * result of giving it back): e gets the ENOREPLICAS message of unacked,
 * saying so; returns HILOCK_ENOREPLICAS. */
int hilock__grant_unacked(hilock__err *e, const hilock__err *unacked,
                          int undo_rc, const hilock__err *undo);

/* ## Tokens, clocks, backoff -------------------------------------------- */

/* 128 bits from getrandom(2), hex-encoded into out[33]. */
int hilock__token(char out[HILOCK__TOKEN_LEN + 1], hilock__err *e);
/* CLOCK_MONOTONIC in ms and us. */
int64_t hilock__now_ms(void);
int64_t hilock__now_us(void);
/* This process's id, without a system call (reset in a forked child). */
pid_t hilock__pid(void);
/* Who calls, for the locks whose owner is the caller (reentrant,
 * read-write): the kernel thread id, or while an async operation runs on a
 * worker, the negative of the owner it was started for (a task of an event
 * loop), so that it never equals a thread's id. */
long hilock__caller(void);
void hilock__caller_set(long id); /* 0: the thread again */
/* A condition variable timed on CLOCK_MONOTONIC, and a wait of up to ms on
 * one (mu held; spurious wake-ups possible, as with every wait). */
int hilock__cond_init(pthread_cond_t *cv);
void hilock__cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu,
                          int64_t ms);
void hilock__sleep_ms(int64_t ms);
/* Uniform random in [lo, hi] (not for secrets). */
int64_t hilock__jitter(int64_t lo, int64_t hi);

/* ## What one call carries, per thread (and per fiber) -------------------
 * The state a public call keeps while it runs (call.c, net.c, wait.c): a
 * fiber that gives its thread back (fiber.c) takes it along and brings it
 * back when it resumes. */
typedef struct hilock__callstate {
  int64_t deadline_ms;              /* the caller's (INT64_MAX: none) */
  const struct hilock__undo *undo;  /* the undo of an ambiguous grant */
  const struct hilock_client *closer; /* the client closing here */
  void (*sent_fn)(void *);          /* hilock__net_on_sent */
  void *sent_arg;
  long caller;                      /* hilock__caller_set */
  int woken;                        /* hilock__attempt_woken */
  int stop_fd; /* >= 0: a wait that can be stopped also ends once it is
                  readable (an event loop's cancel) */
  /* An event loop's acquire: its attempt's waits end by *cut_ms (another
   * thread may move it: an attempt cancelled on the wire). NULL: none. */
  const int64_t *cut_ms;
  int undone; /* the armed undo was queued (hilock__undo_queued) */
} hilock__callstate;
#define HILOCK__CALLSTATE_INIT {INT64_MAX, NULL, NULL, NULL, NULL, 0, 0, -1, NULL, 0}
extern __thread hilock__callstate hilock__tl;

/* ## Fibers (fiber.c) ----------------------------------------------------
 * An operation of an event loop's runner (async.c) runs on the loop's own
 * thread, on a stack of its own. Where the blocking code would wait (a
 * socket in net.c, a pause, a pooled connection), it calls
 * hilock__fiber_wait instead, which gives the thread back to whoever
 * resumed the fiber; the runner resumes it when the socket is ready or the
 * time is up. Only the thread that made a fiber resumes it. */
typedef struct hilock__fiber hilock__fiber;
/* The fiber running on this thread, or NULL. */
hilock__fiber *hilock__fiber_self(void);
/* A fiber that will run fn(arg) when first resumed; NULL: out of memory. */
hilock__fiber *hilock__fiber_new(void (*fn)(void *), void *arg);
/* Run f until it waits or ends; revents: what its wait got (a poll
 * revents mask; 0 the time ran out). 1 if it ended (then free it), else
 * 0. */
int hilock__fiber_resume(hilock__fiber *f, int revents);
void hilock__fiber_free(hilock__fiber *f);
/* In a fiber: wait for events on fd (-1: none, a pause) until deadline_ms
 * (INT64_MAX: none). Returns the revents, 0 when the time ran out. */
int hilock__fiber_wait(int fd, short events, int64_t deadline_ms);
/* What f waits for (valid while it is suspended). */
void hilock__fiber_waits(const hilock__fiber *f, int *fd, short *events,
                         int64_t *deadline_ms);
/* The argument f runs with; bring f's wait to an end by deadline_ms (while
 * it is suspended: its resumer wakes it then, with no events). */
void *hilock__fiber_arg(const hilock__fiber *f);
void hilock__fiber_cut(hilock__fiber *f, int64_t deadline_ms);

/* ## Names and keys ------------------------------------------------------
 * Key layout: hilock:{<name>}:<role>. Every key of one lock shares the hash
 * tag {<name>}, so every script touches one cluster slot. */

int hilock__check_name(hilock__err *e, const char *name, size_t len);
/* The Redis Cluster hash slot (0..16383) of a key, honouring hash tags. */
int hilock__key_slot(const char *key, size_t len);
int hilock__check_ms(hilock__err *e, const char *what, int64_t ms);
/* A lock's TTL: HILOCK_TTL_MIN_MS..HILOCK_TTL_MAX_MS. */
int hilock__check_ttl(hilock__err *e, int64_t ms);
/* What every lock constructor checks first: a client, a valid name and
 * TTL, and that the client is open. Failures are recorded in the client's
 * error (HILOCK_EINVAL for a NULL client, without a message). */
int hilock__new_check(hilock_client *client, const char *name, size_t namelen,
                      int64_t ttl_ms);
/* The same with the family's own check of its other arguments (check(e,
 * arg): HILOCK_OK, or the error set in e; NULL: none), made after the
 * name's and before the TTL's; has_ttl = 0: no TTL to check (a simple
 * lock). */
int hilock__new_check_with(hilock_client *client, const char *name,
                           size_t namelen, int has_ttl, int64_t ttl_ms,
                           int (*check)(hilock__err *e, const void *arg),
                           const void *arg);
/* The start of a family's constructor: hilock__new_check, then a zeroed
 * handle of size bytes; NULL with *rc the error if either fails
 * (family.c). */
void *hilock__new_handle(hilock_client *client, const char *name,
                         size_t namelen, int64_t ttl_ms, size_t size,
                         int *rc);
/* A malloc'd copy of n bytes of s, NUL-terminated; NULL on out of memory. */
char *hilock__dup(const char *s, size_t n);
/* malloc'd key <prefix>{name}:role (the prefix is rt's); NULL on out of
 * memory. */
char *hilock__key(const hilock__runtime *rt, const char *name, size_t len,
                  const char *role, size_t *outlen);
/* keys[i] = hilock__key(rt, name, len, roles[i], &keylens[i]) for i < n:
 * HILOCK_OK, or HILOCK_ENOMEM with the keys made so far left for the
 * caller to free (the others NULL if keys came zeroed). */
int hilock__keys(const hilock__runtime *rt, const char *name, size_t len,
                 const char *const *roles, int n, char **keys,
                 size_t *keylens);
/* Decimal text of v in buf (>= 24 bytes); returns length. */
size_t hilock__i64(char *buf, int64_t v);
/* How many decimal digits v has; its digits at buf (no NUL), returning
 * that many. */
size_t hilock__digits(uint64_t v);
size_t hilock__u64_text(char *buf, uint64_t v);

/* Outcome of one renewal: the watchdog's own, or a hold's renew_fn. */
enum { HILOCK__RENEWED = 0, HILOCK__NOT_OWNED = 1, HILOCK__RENEW_FAILED = 2 };

/* ## Holds ---------------------------------------------------------------
 * One holder's grant, shared by every lock family: owner token, fencing
 * token, local validity, the process that got it, and its renewal. */

struct hilock__hold;

/* What the public base handle (hilock/hold.h) asks of a family. NULL
 * members take the shared behaviour. */
typedef struct hilock__family {
  void (*free)(void *handle);
  int (*owned)(void *handle, int *owned);
  int (*locked)(void *handle, int *locked);
  /* The key reported by hilock_hold_key (NULL: the hold's rkey). */
  const char *(*key)(const void *handle, size_t *len);
  /* The message, when a family keeps a longer one (Redlock's node list). */
  const char *(*errmsg)(const void *handle);
  /* How the family acquires and releases, for callers that drive the
   * waiting themselves (async.c); NULL: not served there. */
  void (*acquire_spec)(void *handle, struct hilock__acquire_spec *s);
  int (*release)(void *handle);
  int (*extend)(void *handle, int64_t ms, int replace); /* NULL: none */
  int (*renew)(void *handle);
  /* The owner is the caller (reentrant, read-write): an async operation
   * names its own (see hilock__caller). */
  int by_caller;
} hilock__family;

/* A family's script run on its handle (arg): the reply in *r. */
typedef int (*hilock__run_fn)(void *arg, hilock__err *e, redisReply **r);

typedef struct hilock__hold {
  hilock__err err; /* the handle's last error */
  const hilock__family *fam; /* set for a public handle's hold */
  /* Threads may share the handle (rlock, rwlock): this guards the hold's
   * grant fields, and its calls' errors are kept per thread (err is then
   * scratch for the shared layer; see hilock__hold_err). NULL: one thread
   * at a time. */
  pthread_mutex_t *guard;
  uint64_t serial;
  hilock_client *client; /* its connections (NULL: Redlock's own) */
  hilock__runtime *rt;   /* its renewal, options and lifetime */
  const char *rkey; /* the key renewal extends (owned by the family) */
  size_t rkeylen;
  const hilock__script *renew_script; /* KEYS[1] rkey, ARGV owner, ttl */
  /* More keys the renew script gets after rkey (KEYS[2..]), all renewed
   * together (a multi-key lock's names, a reader's count hash). NULL/0 if
   * none. */
  const char *const *xkeys;
  const size_t *xkeylens;
  int nxkeys;
  int64_t ttl_ms;   /* 0: no expiry */
  char owner[HILOCK__TOKEN_LEN + 32]; /* what the scripts compare: a random
                                         token, or client id + thread id */
  size_t ownerlen;
  int held;
  pid_t pid;         /* process that got the grant */
  uint64_t fence;
  /* Guarded by client->wd.mu while renewal is registered: */
  int64_t valid_until_us;
  /* When an extension and a renewal were last recorded: one that overlaps
   * the other may have run first on the server, so the validity after it
   * is the smaller of the two (never an overestimate). */
  int64_t ext_done_us, ren_done_us;
  int64_t since_us; /* start of the grant (not of a re-entry): max hold */
  int lost;
  /* The last grant ended lost (its release found it gone, or the client
   * was closed): reported lost until the next grant. */
  int gone;
  int close_lost; /* lost because the client was closed */
  int told;       /* lost_fn has run for this grant's loss */
  int closing;    /* the closing thread is releasing it: cancellers wait */
  struct hilock__hold *live_prev, *live_next; /* the client's grants */
  int live;
  /* The family's owner-checked release of the current grant (as for
   * hilock__hold_release), run when the client closes; NULL: the grant
   * lapses at its TTL. Reads only the keys and owner. */
  int (*close_run)(void *arg, hilock__err *e, redisReply **r);
  void *close_arg;
  hilock__renewal ren;
  /* Renewal settings */
  int auto_renew;
  int64_t max_hold_ms;
  void (*lost_fn)(void *arg);
  void *lost_arg;
  /* Optional: renew through the family's own connections instead of the
   * watchdog's pipelined renew_script (Redlock renews on a majority of its
   * nodes). Runs on the renewal thread, outside the watchdog's mutex, and
   * returns HILOCK__RENEWED, HILOCK__NOT_OWNED or HILOCK__RENEW_FAILED. */
  int (*renew_fn)(struct hilock__hold *h, void *arg);
  void *renew_arg;
} hilock__hold;

/* Initialise h for client c (takes a client reference). */
void hilock__hold_init(hilock__hold *h, hilock_client *c, const char *rkey,
                       size_t rkeylen, const hilock__script *renew_script,
                       int64_t ttl_ms);
/* The same for a front end with its own connections: runtime rt only
 * (h->client NULL; the hold renews through its renew_fn). */
void hilock__hold_init_rt(hilock__hold *h, hilock__runtime *rt,
                          const char *rkey, size_t rkeylen,
                          const hilock__script *renew_script, int64_t ttl_ms);
void hilock__hold_destroy(hilock__hold *h);
/* hilock__hold_init for a family's handle: its table fam, and the release
 * a closing client runs, close_run(handle) (family.c). */
void hilock__hold_init_family(hilock__hold *h, hilock_client *c,
                              const char *rkey, size_t rkeylen,
                              const hilock__script *renew_script,
                              int64_t ttl_ms, const hilock__family *fam,
                              hilock__run_fn close_run, void *handle);
/* Where a failed call on the handle records its error for the caller: the
 * hold's err, or for a handle threads share the calling thread's slot. */
hilock__err *hilock__hold_err(hilock__hold *h);
/* Before an operation on a grant: HILOCK_EFORKED in a forked child,
 * HILOCK_ENOTOWNED if there is no grant. */
int hilock__hold_check(hilock__hold *h, const char *verb);
/* Record a grant made at start_us with fence; registers renewal if asked.
 */
int hilock__hold_granted(hilock__hold *h, int64_t start_us, uint64_t fence);
/* Forget the grant (cancels renewal first). */
void hilock__hold_drop(hilock__hold *h);
/* Mark the grant lost (not owned any more) and cancel renewal. */
void hilock__hold_lost(hilock__hold *h);
/* Before a new grant: a grant of this process whose validity ran out
 * unrenewed is lost, reported as renewal reports one (once per grant). */
void hilock__hold_lapse(hilock__hold *h);
/* The release of the grant ran and it ends; gone: the server no longer
 * held it, a loss (reported once per grant) that hilock_hold_lost shows
 * until the next grant. */
void hilock__hold_ended(hilock__hold *h, int gone);
/* Run h's lost_fn, once per grant, whoever found the loss (the watchdog, a
 * call that met it, closing the client); never with rt->wd.mu held. */
void hilock__hold_tell_lost(hilock__hold *h);
/* A successful extension to ttl_ms measured from start_us. If a renewal
 * was recorded since start_us, the server may have run it after this
 * extension: the validity becomes the smaller of the two. */
void hilock__hold_extended(hilock__hold *h, int64_t start_us, int64_t ttl_ms);
int64_t hilock__hold_validity_ms(const hilock__hold *h);
int hilock__hold_is_lost(const hilock__hold *h);
/* What hilock_hold_lost says: the grant was found lost, or the last one's
 * release found it gone. */
int hilock__hold_reports_lost(const hilock__hold *h);
/* Clock-drift allowance for a TTL: 1% + 2 ms, in us. */
int64_t hilock__hold_drift_us(int64_t ttl_ms);

/* For families whose holder key (h->rkey) is a string holding the owner
 * token (lock, fair lock):
 * extend: set (replace) or add to the TTL while owned; HILOCK_ENOTOWNED
 *         (and the hold marked lost) if not.
 * owned:  GET rkey == owner; another value or none marks the hold lost.
 * Both act only on a grant of this process. */
int hilock__hold_extend(hilock__hold *h, int64_t ms, int replace);
int hilock__hold_owned(hilock__hold *h, int *owned);
/* The release every family shares: check the hold, stop its renewal and
 * run(arg, &h->err, out), the family's owner-checked release script. If it
 * could not run, renewal resumes (still ours as far as we know: the caller
 * may retry) and its status is returned; else *out holds the script's
 * reply and the caller ends the grant (hilock__hold_ended). */
int hilock__hold_release(hilock__hold *h,
                         int (*run)(void *arg, hilock__err *e, redisReply **r),
                         void *arg, redisReply **out);
/* Read and free a release reply and end the grant: 1 (an integer; with
 * array, an array's first element) released; another number is
 * HILOCK_ENOTOWNED ("release: " notowned), the grant lost; any other shape
 * HILOCK_EPROTO. */
int hilock__hold_released(hilock__hold *h, redisReply *r, int array,
                          const char *notowned);
/* The two above: run the family's release and read its reply. */
int hilock__hold_release_reply(hilock__hold *h,
                               int (*run)(void *arg, hilock__err *e,
                                          redisReply **r),
                               void *arg, int array, const char *notowned);
/* A grant (owner token already in h) that too few replicas acknowledged:
 * record it just long enough for the family's release(arg) to give it
 * back, then forget it. Returns HILOCK_ENOREPLICAS, h->err saying why and
 * whether the give-back worked. */
int hilock__hold_give_back(hilock__hold *h, const hilock__err *unacked,
                           int (*release)(void *arg), void *arg);
/* A grant attempt, as every family with one owner token per grant makes
 * it (lock, semaphore, multi-key and segmented locks):
 *   hilock__attempt_begin   refuse while this process holds a valid grant
 *                           (held_msg says so), forget a lapsed one, and
 *                           draw a fresh owner token into h->owner;
 *   hilock__attempt_run     send the grant script with undo armed (a reply
 *                           that comes too late is released behind it);
 *                           WAIT's verdict is kept in a, not returned;
 *   hilock__attempt_end     act on the reply's verdict: 1 granted (with its
 *                           fence; given back if too few replicas saw it),
 *                           0 busy (*pttl = busy_pttl), -1 unreadable
 *                           (HILOCK_EPROTO: never a grant). Frees r. */
typedef struct hilock__attempt {
  int64_t start;      /* when the request went out */
  int replicated;     /* WAIT saw enough replicas (1 without WAIT) */
  hilock__err unacked; /* why not, when it did not */
} hilock__attempt;
int hilock__attempt_begin(hilock__hold *h, const char *held_msg);
int hilock__attempt_run(hilock__hold *h, hilock__attempt *a,
                        const hilock__undo *undo, const hilock__script *s,
                        int nkeys, const char **keys, const size_t *keylens,
                        int nargs, const char **args, const size_t *arglens,
                        redisReply **r);
int hilock__attempt_end(hilock__hold *h, const hilock__attempt *a,
                        redisReply *r, int verdict, uint64_t fence,
                        int64_t busy_pttl, int64_t *pttl,
                        int (*release)(void *arg), void *arg,
                        const char *script);
/* Renewal settings for the hold; applied to a current grant at once. */
int hilock__hold_set_auto_renew(hilock__hold *h, int enable,
                                int64_t max_hold_ms, hilock_lost_fn on_lost,
                                void *arg);

/* Renewal thread (renewal.c). */
int hilock__renewal_register(hilock__hold *h);
void hilock__renewal_cancel(hilock__hold *h);
void hilock__watchdog_stop(hilock__runtime *rt);
/* Stop the renewal thread and unlink every hold (the client closes). */
void hilock__watchdog_close(hilock__runtime *rt);
/* Fork: forget the parent's list of grants. */
void hilock__hold_forget_live(hilock__runtime *rt);
/* A grant lost to hilock_client_free: drop it and return HILOCK_ECLOSED
 * ("verb: ..."), else HILOCK_OK. */
int hilock__hold_released_by_close(hilock__hold *h, const char *verb);
/* hilock_client_free: every grant of this process stops renewing and is
 * reported lost; each with a close_run is released, within a bounded time. */
void hilock__holds_close(hilock_client *c);
/* Fork: forget the parent's renewal thread and registrations. */
void hilock__watchdog_forget(hilock__runtime *rt);

#endif /* HILOCK_INTERNAL_H */
