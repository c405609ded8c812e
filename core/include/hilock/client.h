/* hilock: the client, a thread-safe pool of connections to one Redis server.
 *
 * Threads: a hilock_client may be shared by any number of threads. Every call
 * checks a connection out of the client's pool (under the client's mutex),
 * uses it alone, and returns it, so threads never interleave on one
 * connection and never wait for each other's round trips. The client is
 * reference counted: each lock handle and each running call keeps it alive,
 * so hilock_client_free may be called while locks still exist (they then
 * fail with HILOCK_ECLOSED) and while other threads are inside calls (those
 * complete or fail with HILOCK_ECLOSED; nothing is freed under them). A
 * call must not start after hilock_client_free has returned.
 *
 * Renewal: the first lock held with auto-renewal starts one background
 * thread per client that renews every renewable hold of the client at a
 * third of its TTL (pipelined in one batch): on one server (directly or
 * through Sentinel) on a connection of its own, on a cluster on the pool's
 * connections to each master, one batch per hash slot.
 *
 * Fork: after fork() the child's client keeps nothing of the parent's: it
 * never uses the parent's sockets, runs no renewal, and has a new client id;
 * locks granted to the parent refuse to act in the child (HILOCK_EFORKED).
 *
 * Timing: all client-side time is measured on CLOCK_MONOTONIC. */
#ifndef HILOCK_CLIENT_H
#define HILOCK_CLIENT_H

#include <stdint.h>
#include <stddef.h>

#include "hilock/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hilock_client hilock_client;

typedef struct hilock_options {
  int64_t connect_timeout_ms; /* per connection attempt; default 2000 */
  int64_t command_timeout_ms; /* per reply wait; default 5000; 0 = none */
  int64_t reconnect_ms;       /* time budget to replace a broken connection
                                 before a command fails; default 3000 */
  int max_idle;               /* idle connections kept in the pool; default 8 */
  /* Connections the pool opens for commands, per server (per node on a
   * cluster): a thread that finds them all busy waits for one, within its
   * call's bounds. Default 6; 0 = no limit. The shared waiting's
   * subscriber and the renewal thread's connection come on top: 8 in all
   * by default, whatever the number of threads. */
  int max_connections;
  /* Called about every 100 ms while a call waits for a lock (from the
   * waiting thread); a nonzero return ends the wait with HILOCK_EINTR.
   * NULL: waits are not interruptible. Language bindings use it to deliver
   * signals (Ctrl-C). */
  int (*interrupt)(void *arg);
  void *interrupt_arg;
  /* Replica acknowledgement: when > 0, every script that grants or renews
   * a hold (of every lock type), and a segmented lock's take, is followed
   * on the same connection (pipelined) by WAIT wait_replicas
   * wait_timeout_ms. A grant or take fewer replicas acknowledged is undone
   * and reported as HILOCK_ENOREPLICAS; such a renewal counts as a failed
   * renewal. On a cluster, WAIT runs on the master of the lock's slot.
   * Default 0 (off). wait_timeout_ms: default 1000; must
   * be below command_timeout_ms when that is set. */
  int wait_replicas;
  int64_t wait_timeout_ms;
  /* TLS, for rediss:// URLs (redis-py's names; each may also be given as a
   * URL query parameter of the same name, which takes precedence; with
   * another URL, one set is HILOCK_EINVAL). The strings are copied by
   * hilock_client_new. */
  const char *ssl_ca_certs;    /* PEM file of CAs to trust besides the
                                  system's store; default NULL */
  const char *ssl_ca_path;     /* directory of hashed CA certificates */
  const char *ssl_certfile;    /* client certificate chain (mutual TLS) */
  const char *ssl_keyfile;     /* its private key (default: ssl_certfile) */
  const char *ssl_password;    /* passphrase of an encrypted key */
  int ssl_cert_reqs;           /* HILOCK_SSL_CERT_REQUIRED (default),
                                  _OPTIONAL (the same for a client) or
                                  _NONE (no verification at all) */
  int ssl_check_hostname;      /* 1 (default): the certificate must name
                                  the host dialled; ignored with _NONE */
  /* Name to check the certificate against and send as SNI instead of the
   * host dialled: Sentinel and Cluster hand out IP addresses, so either
   * the certificates carry those IPs, or every server's certificate
   * carries this name. Default NULL. */
  const char *ssl_server_name;
  /* 1 (default): threads waiting for a lock sleep in the client and one
   * subscriber connection per client hears the releases (see
   * docs/waiting.md); 0: each waiting thread blocks in BLPOP on a
   * connection of its own. */
  int shared_waiting;
  /* With shared_waiting: how many of the client's waiting threads block in
   * BLPOP on the wake list, on a connection of their own, before the rest
   * share the subscriber connection (default 1; 0: all share it). A lone
   * waiter is woken by the server itself, a pub/sub message's scheduling
   * cost less (docs/waiting.md); while another thread of the client waits
   * on the same lock in the shared waiting, a new one joins it there. */
  int direct_waiters;
  /* The start of every key and channel name this client's locks use:
   * "hilock:" by default (NULL or ""). 1..HILOCK_KEY_PREFIX_MAX bytes,
   * without '{' or '}' (the lock name after it is the hash tag). Tenants
   * sharing a server each take their own, and an ACL user per tenant
   * restricted to ~<prefix>* and &<prefix>* keeps them apart
   * (docs/security.md). Copied by hilock_client_new. */
  const char *key_prefix;
  /* 1: hilock_client_new only checks the URL and the options and opens no
   * connection (on a cluster, the slot map is read later too): the first
   * call that needs the server connects, and reports an unreachable server
   * or a wrong password. For an event loop's thread, which never waits on
   * the network (hilock/async.h). Default 0: connect before returning. */
  int connect_later;
  /* 1: deadlock detection across processes (docs/contention.md). A
   * blocking acquire (hilock_hold_acquire) of a lock, fair lock, reentrant
   * lock or a read-write lock's write side that has waited
   * deadlock_timeout_ms records in Redis, with a lease, that its owner
   * (this thread of this client; an async operation's owner) waits for
   * the lock, and which grants that owner holds, then follows the graph:
   * the lock's holder, what that holder waits for, and so on. A walk that
   * comes back to the waiter twice over the same waits and grants is a
   * deadlock; the youngest wait of the cycle fails with HILOCK_EDEADLK, its
   * message naming the cycle's locks in order, and the others keep
   * waiting. The check runs again every deadlock_timeout_ms / 2 while the
   * wait lasts. Default 0 (off: nothing is written); deadlock_timeout_ms:
   * default 1000, at least 1. */
  int detect_deadlocks;
  int64_t deadlock_timeout_ms;
} hilock_options;

#define HILOCK_KEY_PREFIX_MAX 64

enum {
  HILOCK_SSL_CERT_REQUIRED = 0,
  HILOCK_SSL_CERT_OPTIONAL = 1,
  HILOCK_SSL_CERT_NONE = 2
};

/* Fill *opts with the defaults above. */
HILOCK_API void hilock_options_init(hilock_options *opts);

/* CONSTRUCTOR. Connect to the server named by url (an empty password is no
 * password: no AUTH is sent):
 *   redis://[[user]:password@]host[:port][/db]      (host may be [ipv6])
 *   unix:///path/to.sock[?db=N&user=U&password=P]
 *   redis+cluster://[[user]:password@]host[:port][,host[:port]...]
 *       a Redis Cluster: the hosts are seeds the slot map is read from;
 *       every command goes to the master of its key's hash slot (database
 *       0 only; same user/password/query options as redis://).
 *   redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/master
 *       [/db][?db=N&sentinel_user=U&sentinel_password=P]
 *     the master named "master" as the sentinels report it (port defaults
 *     to 26379; user/password are the master's); every new connection
 *     asks the sentinels, checks ROLE, and follows a failover.
 * rediss://, rediss+cluster:// and rediss+sentinel:// are the same over
 * TLS (to every node and every sentinel), configured by the ssl_* options
 * or query parameters (?ssl_ca_certs=/path/ca.pem&ssl_cert_reqs=none...).
 * An ssl_* option set to other than its default with a URL that is not a
 * TLS one is HILOCK_EINVAL (naming it), never ignored. Schemes match in
 * any case (REDIS:// is redis://). Error messages show a URL with its
 * passwords as "***".
 * Percent-escapes are decoded in user, password and query values. An
 * unknown query parameter is HILOCK_EINVAL. opts may be NULL.
 * One connection is opened (and authenticated, and SELECTs db) before this
 * returns, so a wrong password or unreachable host is reported here (not
 * with opts->connect_later).
 * On failure *out may still be set: read hilock_client_errmsg, then free it.
 * Returns HILOCK_OK, HILOCK_EINVAL (also: unreadable certificate files,
 * a key that does not match its certificate), HILOCK_EIO,
 * HILOCK_ETIMEDOUT, HILOCK_ETLS (handshake refused, not TLS),
 * HILOCK_ECERT (the server's certificate: unknown CA, name mismatch,
 * expired), HILOCK_EAUTH, HILOCK_ENOPERM, HILOCK_EREDIS. */
HILOCK_API int hilock_client_new(const char *url, const hilock_options *opts,
                                 hilock_client **out);

/* DESTRUCTOR. Close the client and drop the caller's reference; NULL is a
 * no-op. Every hold of the client stops renewing and is reported lost
 * (hilock_*_lost, loss callbacks of auto-renewed holds), and is released
 * with its owner-checked script, best effort, within about 2 s in all
 * (read-write holds lapse at their TTL). The memory goes when
 * the last lock handle and the last running call are done. */
HILOCK_API void hilock_client_free(hilock_client *client);

/* Threads of this client waiting for a lock now: asleep until a release,
 * the holder's TTL or their own timeout. */
HILOCK_API int hilock_client_waiting(const hilock_client *client);

/* 1 if the client talks to a Redis Cluster (a redis+cluster:// URL). */
HILOCK_API int hilock_client_is_cluster(const hilock_client *client);

/* Round trip PING on a pooled connection (on a cluster: every master). */
HILOCK_API int hilock_client_ping(hilock_client *client);

/* The message of the calling thread's last failed call on the client
 * (connecting, ping, a lock constructor): kept per thread, as errno, so
 * threads sharing the client read their own. "" if this thread has had no
 * failure on it (a thread remembers its last few clients and shared
 * handles). Valid until this thread's next call on the client; never NULL. */
HILOCK_API const char *hilock_client_errmsg(const hilock_client *client);

/* Status code of the calling thread's last failed call on the client
 * (HILOCK_OK if none). */
HILOCK_API int hilock_client_errcode(const hilock_client *client);

struct hilock_hold;

/* Round trip: take over a grant another handle handed over with
 * hilock_hold_export (text, len bytes, in this or another thread or
 * process): *out is a new handle of the exported family (free it with
 * hilock_hold_free; cast it to the family's type, e.g.
 * (hilock_lock *)hold), holding the grant with the same owner token and
 * fence. The grant is confirmed by the family's renewal (a simple lock: its
 * owner check) in one round trip, which sets the handle's validity; the
 * handle then extends, renews, releases and auto-renews
 * (hilock_hold_set_auto_renew) like any. The client must use the key
 * prefix of the exporting one. Returns HILOCK_EINVAL for text that is not
 * an unchanged export (malformed, truncated, edited, another version or
 * key prefix; nothing is sent), HILOCK_ENOTOWNED if the grant is gone (it
 * lapsed, was released or force-released), or a connection error; *out is
 * NULL on failure, and nothing on the server changes (a failure other
 * than HILOCK_ENOTOWNED leaves the grant as it was: the text can be
 * adopted again). The message is in hilock_client_errmsg. */
HILOCK_API int hilock_client_adopt(hilock_client *client, const char *text,
                                   size_t len, struct hilock_hold **out);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_CLIENT_H */
