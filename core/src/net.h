/* hilock internals, the net layer: URLs (url.c), sockets and TLS (net.c,
 * tls.c). Uses the base layer and hiredis's reply reader only; knows
 * nothing of clients, pools or locks. */
#ifndef HILOCK_NET_H
#define HILOCK_NET_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "base.h"

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

#endif /* HILOCK_NET_H */
