/* hilock internals, the shared objects: the runtime (options, renewal
 * thread, statistics, fork handling; runtime.c, stats.c), the client with
 * its connection pool and the state of its shared waiting (client.c), and
 * the keys made with its prefix. Uses the base and net layers; the
 * dispatcher (route.h) and everything above it build on these structs. */
#ifndef HILOCK_RUNTIME_H
#define HILOCK_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "base.h"
#include "net.h"

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

struct hilock__renewal;

/* A request left for the renewal thread to send again (route.c: a waiter
 * leaving its line while the server could not take it); argv and lens
 * live in the same allocation. */
typedef struct hilock__later {
  struct hilock__later *next;
  pid_t pid;
  int64_t until_ms; /* given up after this */
  int argc;
  const struct hilock__script *script;
  const char **argv;
  size_t *lens;
} hilock__later;

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
  hilock__later *later;      /* requests to send again, when later_us */
  int64_t later_us;
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
/* Return expr (a constructor's work on client) run as such a call; a
 * NULL out or client is HILOCK_EINVAL, and *out is NULL until expr sets
 * it, so a constructor need check neither. */
#define HILOCK__CLIENT_CALL(client, out, expr)                 \
  do {                                                          \
    int rc_;                                                    \
    if ((out) == NULL) return HILOCK_EINVAL;                    \
    *(out) = NULL;                                              \
    if ((client) == NULL) return HILOCK_EINVAL;                 \
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

/* The shared waiting's lifetime (hub.c), as the client makes, closes and
 * forks it (its waits: wait.h). */
int hilock__hub_init(hilock__hub *h);
/* Stop the thread for good (the client closes). */
void hilock__hub_stop(hilock_client *c);
void hilock__hub_destroy(hilock__hub *h);
/* Fork (h->mu held): forget the parent's thread, waiters and socket. */
void hilock__hub_forget(hilock__hub *h);

/* ## The renewal thread and the grants it renews (renewal.c, hold.c) ----- */

void hilock__watchdog_stop(hilock__runtime *rt);
/* Stop the renewal thread and unlink every hold (the client closes). */
void hilock__watchdog_close(hilock__runtime *rt);
/* Fork: forget the parent's list of grants. */
void hilock__hold_forget_live(hilock__runtime *rt);
/* hilock_client_free: every grant of this process stops renewing and is
 * reported lost; each with a close_run is released, within a bounded time. */
void hilock__holds_close(hilock_client *c);
/* Fork: forget the parent's renewal thread and registrations. */
void hilock__watchdog_forget(hilock__runtime *rt);
/* Hand x to the renewal thread (started if need be), which sends it again
 * until it is answered or x->until_ms (x is freed then, or now if the
 * client is closed). */
void hilock__watchdog_later(hilock__runtime *rt, hilock__later *x);

/* ## Closing, and keys (call.c, util.c) ---------------------------------- */

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

#endif /* HILOCK_RUNTIME_H */
