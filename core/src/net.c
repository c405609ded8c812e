/* The transport: hilock's own sockets below every path (see net.h).
 *
 * A connection is a non-blocking socket, an output buffer, a hiredis reply
 * reader and, for TLS, an OpenSSL session (tls.c). Blocking calls are
 * poll() loops bounded by the connection's timeout, so connect, command and
 * wait bounds hold whatever the server does. */
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "base.h"
#include "fiber.h"
#include "net.h"

/* The reader refuses replies larger than this (a hostile or broken server
 * must not make the client buffer without end), and arrays longer than
 * READ_MAX_ELEMENTS (hiredis 0.14 would allocate whatever *N asks for). */
#define READ_MAX_BYTES ((size_t)512 << 20)
#define READ_MAX_ELEMENTS 4000000
#define READ_CHUNK 16384
#define STOP_SLICE_MS 100 /* how often a wait with ->stop asks it */

int hilock__net_fail(hilock__net *n, int err, const char *fmt, ...) {
  va_list ap;
  n->err = err;
  va_start(ap, fmt);
  vsnprintf(n->errstr, sizeof(n->errstr), fmt, ap);
  va_end(ap);
  return -1;
}

/* ## The reader ----------------------------------------------------------- */

static redisReplyObjectFunctions capped_fns;
static void *(*default_array)(const redisReadTask *, int);
static pthread_once_t fns_once = PTHREAD_ONCE_INIT;
static redisReplyObjectFunctions *fns_base;

static void *capped_array(const redisReadTask *task, int elements) {
  if (elements < 0 || elements > READ_MAX_ELEMENTS) return NULL;
  return default_array(task, elements);
}

static void fns_init(void) {
  redisReader *r = redisReaderCreate();
  if (r == NULL) return;
  fns_base = r->fn;
  capped_fns = *r->fn;
  default_array = r->fn->createArray;
  capped_fns.createArray = capped_array;
  redisReaderFree(r);
}

static redisReader *reader_new(void) {
  redisReader *r;
  pthread_once(&fns_once, fns_init);
  if (fns_base == NULL) return NULL;
  r = redisReaderCreate();
  if (r != NULL) r->fn = &capped_fns;
  return r;
}

int hilock__net_reply(hilock__net *n, void **reply) {
  *reply = NULL;
  if (n->reader == NULL) return -1;
  if (redisReaderGetReply(n->reader, reply) != REDIS_OK) {
    /* A reader error is sticky: the stream is lost. */
    return hilock__net_fail(n, HILOCK__NET_EPROTO, "protocol error: %s",
                            n->reader->err == REDIS_ERR_OOM
                                ? "reply too large"
                                : n->reader->errstr);
  }
  if (*reply != NULL)
    n->inbytes = 0;
  else
    n->unread = 0;
  return 0;
}

int hilock__net_buffered(const hilock__net *n) { return n->unread; }

/* ## Sockets -------------------------------------------------------------- */

static void set_where(hilock__net *n, const hilock__addr *a) {
  if (a->path != NULL)
    snprintf(n->where, sizeof(n->where), "%s", a->path);
  else if (strchr(a->host, ':') != NULL)
    snprintf(n->where, sizeof(n->where), "[%s]:%d", a->host, a->port);
  else
    snprintf(n->where, sizeof(n->where), "%s:%d", a->host, a->port);
}

static int sock_connect(hilock__net *n, int family, const struct sockaddr *sa,
                        socklen_t len) {
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return hilock__net_fail(n, HILOCK__NET_EIO, "socket: %s", strerror(errno));
  if (family != AF_UNIX) {
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  if (connect(fd, sa, len) != 0 && errno != EINPROGRESS) {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  n->fd = fd;
  n->state = 1;
  return 0;
}

/* Start a connection to the one address sa: 0, or -1 with the failure
 * reported. */
static int connect_one(hilock__net *n, int family, const struct sockaddr *sa,
                       socklen_t len) {
  if (sock_connect(n, family, sa, len) == 0) return 0;
  if (n->err) return -1;
  return hilock__net_fail(n, HILOCK__NET_EIO, "connect to %s: %s", n->where,
                          strerror(errno));
}

/* ## Name resolution, bounded ------------------------------------------------ */

/* getaddrinfo may wait on DNS for seconds and takes no deadline, so it runs
 * on a thread of its own (detached: one that outlives its caller's
 * deadline frees what it got). The caller waits on an eventfd: a fiber
 * gives its event loop's thread back meanwhile, a thread polls it. */
typedef struct resolve_job {
  int refs; /* the caller's and the resolver's */
  int done; /* set (release) once rc, err and res are */
  int efd;
  int rc, err;
  struct addrinfo *res;
  char port[16];
  char host[];
} resolve_job;

static void job_unref(resolve_job *j) {
  if (__atomic_sub_fetch(&j->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  if (j->res != NULL) freeaddrinfo(j->res);
  close(j->efd);
  free(j);
}

/* getaddrinfo for TCP; flags: AI_NUMERICHOST (an address literal, which
 * needs no resolver) or 0. */
static int lookup(const char *host, const char *port, int flags,
                  struct addrinfo **res, int *err) {
  struct addrinfo hints;
  int rc;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  rc = getaddrinfo(host, port, &hints, res);
  *err = errno;
  return rc;
}

static void *resolver_main(void *arg) {
  resolve_job *j = arg;
  uint64_t one = 1;
  j->rc = lookup(j->host, j->port, 0, &j->res, &j->err);
  __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
  (void)!write(j->efd, &one, sizeof(one));
  job_unref(j);
  return NULL;
}

/* Start the resolution of host:port; NULL if no thread could be made. */
static resolve_job *resolve_start(const char *host, const char *port) {
  size_t len = strlen(host);
  resolve_job *j = calloc(1, sizeof(*j) + len + 1);
  pthread_attr_t attr;
  sigset_t all, old;
  pthread_t t;
  int rc;
  if (j == NULL) return NULL;
  j->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (j->efd < 0) {
    free(j);
    return NULL;
  }
  j->refs = 2;
  memcpy(j->host, host, len + 1);
  snprintf(j->port, sizeof(j->port), "%s", port);
  /* Signals are for the application's threads, not this one. */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  rc = pthread_create(&t, &attr, resolver_main, j);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    close(j->efd);
    free(j);
    return NULL;
  }
  return j;
}

int hilock__resolve(const char *host, const char *port, int64_t deadline_ms,
                    struct addrinfo **res, int *err) {
  resolve_job *j;
  int rc;
  *res = NULL;
  *err = 0;
  if (lookup(host, port, AI_NUMERICHOST, res, err) == 0) return 0;
  j = resolve_start(host, port);
  if (j == NULL) /* no thread to be had: resolve here, unbounded */
    return lookup(host, port, 0, res, err);
  while (!__atomic_load_n(&j->done, __ATOMIC_ACQUIRE)) {
    int64_t end = hilock__call_cut(deadline_ms);
    int64_t left = end == INT64_MAX ? -1 : end - hilock__now_ms();
    if (end != INT64_MAX && left <= 0) break;
    if (hilock__fiber_self() != NULL) {
      (void)hilock__fiber_wait(j->efd, POLLIN, end);
    } else {
      if (hilock__tl.cut_ms != NULL && (left < 0 || left > STOP_SLICE_MS))
        left = STOP_SLICE_MS;
      struct pollfd p = {j->efd, POLLIN, 0};
      (void)poll(&p, 1, left < 0 || left > INT32_MAX ? -1 : (int)left);
    }
  }
  if (!__atomic_load_n(&j->done, __ATOMIC_ACQUIRE)) {
    job_unref(j); /* the resolver frees it when it is done */
    return 1;
  }
  rc = j->rc;
  *err = j->err;
  *res = j->res;
  j->res = NULL;
  job_unref(j);
  return rc;
}

/* Start a TCP connection to the first address of host that takes it (an
 * immediate refusal tries the next; a pending one is waited for), resolving
 * a name until deadline_ms. */
static int tcp_start(hilock__net *n, const hilock__addr *a, int64_t deadline_ms) {
  struct addrinfo *res = NULL, *ai;
  struct sockaddr_in v4;
  struct sockaddr_in6 v6;
  char port[16];
  int rc, saved = 0, gai_errno;
  /* An address literal needs no resolver (which takes locks of its own: a
   * forked child of a threaded parent must not need them). */
  memset(&v4, 0, sizeof(v4));
  memset(&v6, 0, sizeof(v6));
  if (inet_pton(AF_INET, a->host, &v4.sin_addr) == 1) {
    v4.sin_family = AF_INET;
    v4.sin_port = htons((uint16_t)a->port);
    return connect_one(n, AF_INET, (struct sockaddr *)&v4, sizeof(v4));
  }
  if (inet_pton(AF_INET6, a->host, &v6.sin6_addr) == 1) {
    v6.sin6_family = AF_INET6;
    v6.sin6_port = htons((uint16_t)a->port);
    return connect_one(n, AF_INET6, (struct sockaddr *)&v6, sizeof(v6));
  }
  snprintf(port, sizeof(port), "%d", a->port);
  rc = hilock__resolve(a->host, port, deadline_ms, &res, &gai_errno);
  if (rc == 1)
    return hilock__net_fail(n, HILOCK__NET_ETIMEDOUT,
                            "connect to %s: resolving the name timed out",
                            n->where);
  if (rc != 0)
    return hilock__net_fail(n, HILOCK__NET_EIO, "connect to %s: %s", n->where,
                            rc == EAI_SYSTEM ? strerror(gai_errno)
                                             : gai_strerror(rc));
  for (ai = res; ai != NULL; ai = ai->ai_next) {
    if (sock_connect(n, ai->ai_family, ai->ai_addr, ai->ai_addrlen) == 0)
      break;
    if (n->err) break;
    saved = errno;
  }
  freeaddrinfo(res);
  if (n->fd >= 0) return 0;
  if (n->err) return -1;
  return hilock__net_fail(n, HILOCK__NET_EIO, "connect to %s: %s", n->where,
                          strerror(saved ? saved : ECONNREFUSED));
}

static int unix_start(hilock__net *n, const hilock__addr *a) {
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  if (strlen(a->path) >= sizeof(sa.sun_path))
    return hilock__net_fail(n, HILOCK__NET_EIO, "connect to %s: path too long",
                            n->where);
  memcpy(sa.sun_path, a->path, strlen(a->path));
  return connect_one(n, AF_UNIX, (struct sockaddr *)&sa, sizeof(sa));
}

hilock__net *hilock__net_start(const hilock__addr *a, const hilock__tls *tls,
                               int64_t deadline_ms) {
  hilock__net *n = calloc(1, sizeof(*n));
  if (n == NULL) return NULL;
  n->fd = -1;
  set_where(n, a);
  n->reader = reader_new();
  if (a->path == NULL) {
    n->host = strdup(a->host);
    n->port = a->port;
  }
  if (n->reader == NULL || (a->path == NULL && n->host == NULL)) {
    hilock__net_fail(n, HILOCK__NET_ENOMEM, "out of memory");
    return n;
  }
  if ((a->path != NULL ? unix_start(n, a) : tcp_start(n, a, deadline_ms)) != 0)
    return n;
  if (tls != NULL && hilock__tls_attach(n, tls, a->host) != 0) return n;
  return n;
}

int hilock__net_ready(const hilock__net *n) {
  return n->err == HILOCK__NET_OK && n->state == 0;
}

short hilock__net_events(const hilock__net *n) {
  if (n->state == 1) return POLLOUT;
  if (n->state == 2) return n->ssl_wants ? n->ssl_wants : POLLIN;
  /* A TLS write may wait for the socket to be readable (ssl_wants POLLIN):
   * then POLLOUT would only spin. */
  if (n->ssl != NULL && n->ssl_wants == POLLOUT) return POLLIN | POLLOUT;
  if (n->ssl != NULL && n->ssl_wants == POLLIN) return POLLIN;
  return (short)(POLLIN | (n->olen > 0 ? POLLOUT : 0));
}

/* TCP connected: the handshake, if any, comes next. */
static int connected(hilock__net *n) {
  int soerr = 0;
  socklen_t sl = sizeof(soerr);
  if (getsockopt(n->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0) soerr = errno;
  if (soerr == EINPROGRESS || soerr == EALREADY) return 0;
  if (soerr != 0)
    return hilock__net_fail(n, HILOCK__NET_EIO, "connect to %s: %s", n->where,
                            strerror(soerr));
  n->state = n->ssl != NULL ? 2 : 0;
  if (n->state == 2) return hilock__tls_handshake(n);
  /* Plain: blocking from now on, so a reply costs one recv. */
  {
    int fl = fcntl(n->fd, F_GETFL);
    if (fl >= 0 && fcntl(n->fd, F_SETFL, fl & ~O_NONBLOCK) == 0) {
      n->blocking = 1;
      n->rcvtimeo_ms = -1;
    }
  }
  return 0;
}

/* A plain TCP connection the server dropped before a byte came back: most
 * likely a TLS port (a TLS server drops a client that does not speak it).
 * Every path that reads or writes meets here, so each says so. */
static const char *tls_hint(const hilock__net *n) {
  return n->ssl == NULL && n->host != NULL && !n->heard
             ? " (a TLS port? use rediss://)"
             : "";
}

/* Write as much of the queue as the socket takes. */
static int write_some(hilock__net *n) {
  size_t off = 0;
  while (off < n->olen) {
    long w;
    if (n->ssl != NULL) {
      w = hilock__tls_write(n, n->obuf + off, n->olen - off);
      if (w < 0) return -1;
      if (w == 0) break;
    } else {
      w = (long)send(n->fd, n->obuf + off, n->olen - off,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        return hilock__net_fail(n, HILOCK__NET_EIO, "write to %s: %s%s",
                                n->where, strerror(errno), tls_hint(n));
      }
    }
    off += (size_t)w;
  }
  if (off > 0) {
    memmove(n->obuf, n->obuf + off, n->olen - off);
    n->olen -= off;
  }
  return 0;
}

static int feed(hilock__net *n, const char *buf, size_t len) {
  n->heard = 1;
  n->inbytes += len;
  if (n->inbytes > READ_MAX_BYTES)
    return hilock__net_fail(n, HILOCK__NET_EPROTO,
                            "protocol error: a reply from %s is larger than "
                            "%zu MB",
                            n->where, READ_MAX_BYTES >> 20);
  n->unread = 1;
  if (redisReaderFeed(n->reader, buf, len) != REDIS_OK)
    return hilock__net_fail(n, HILOCK__NET_ENOMEM, "out of memory");
  return 0;
}

/* One recv on a plain socket, fed to the reader: 1 if bytes came, 0 if
 * none (EAGAIN: nothing there without waiting, or SO_RCVTIMEO ran out), -1
 * on an error (the connection is failed). */
static int plain_recv(hilock__net *n, int flags) {
  char buf[READ_CHUNK];
  for (;;) {
    long r = (long)recv(n->fd, buf, sizeof(buf), flags);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (r < 0)
      return hilock__net_fail(n, HILOCK__NET_EIO, "read from %s: %s%s",
                              n->where, strerror(errno), tls_hint(n));
    if (r == 0)
      return hilock__net_fail(n, HILOCK__NET_EIO,
                              "connection to %s closed by the server%s",
                              n->where, tls_hint(n));
    return feed(n, buf, (size_t)r) != 0 ? -1 : 1;
  }
}

/* Read what has arrived. A plain socket is read once (poll reports the
 * rest); TLS is read until it wants more from the socket, since plaintext
 * buffered inside OpenSSL is invisible to poll. */
static int read_some(hilock__net *n) {
  char buf[READ_CHUNK];
  if (n->ssl == NULL) return plain_recv(n, MSG_DONTWAIT) < 0 ? -1 : 0;
  for (;;) {
    long r = hilock__tls_read(n, buf, sizeof(buf));
    if (r < 0) return -1;
    if (r == 0) return 0;
    if (feed(n, buf, (size_t)r) != 0) return -1;
  }
}

int hilock__net_handle(hilock__net *n, short revents) {
  if (n->err != HILOCK__NET_OK && n->err != HILOCK__NET_ETIMEDOUT) return -1;
  if (n->state == 1) {
    if (revents == 0) return 0;
    if (connected(n) != 0) return -1;
    if (n->state != 0) return 0;
  }
  if (n->state == 2) {
    if (hilock__tls_handshake(n) != 0) return -1;
    if (n->state != 0) return 0;
  }
  if (n->olen > 0 && write_some(n) != 0) return -1;
  if (n->ssl != NULL || (revents & (POLLIN | POLLERR | POLLHUP)))
    if (read_some(n) != 0) return -1;
  return 0;
}

/* Wait for the connection's events until deadline_ms (INT64_MAX: none) and
 * handle them. */
static int wait_io(hilock__net *n, int64_t deadline_ms, const char *what) {
  struct pollfd p;
  int64_t left;
  int rc;
  p.fd = n->fd;
  p.events = hilock__net_events(n);
  p.revents = 0;
  for (;;) {
    /* A cancel may bring the end closer while this waits: a fiber is woken
     * for it, a thread looks at it every slice. */
    int64_t end = hilock__call_cut(deadline_ms);
    int sliced = n->stop != NULL ||
                 (hilock__tl.cut_ms != NULL && hilock__fiber_self() == NULL);
    left = end == INT64_MAX ? -1 : end - hilock__now_ms();
    if (end != INT64_MAX && left <= 0)
      return hilock__net_fail(n, HILOCK__NET_ETIMEDOUT, "%s %s: timed out",
                              what, n->where);
    if (sliced && (left < 0 || left > STOP_SLICE_MS)) left = STOP_SLICE_MS;
    if (hilock__fiber_self() != NULL) {
      /* An event loop's operation: its loop waits. */
      p.revents = (short)hilock__fiber_wait(
          p.fd, p.events, left < 0 ? INT64_MAX : hilock__now_ms() + left);
      rc = p.revents != 0;
    } else if (n->stop != NULL && hilock__tl.stop_fd >= 0) {
      /* A wait its caller can stop: a readable stop fd ends it. */
      struct pollfd two[2] = {p, {hilock__tl.stop_fd, POLLIN, 0}};
      rc = poll(two, 2, left < 0 || left > INT32_MAX ? -1 : (int)left);
      if (rc > 0 && two[1].revents != 0)
        return hilock__net_fail(n, HILOCK__NET_ESTOPPED, "%s %s: stopped",
                                what, n->where);
      p.revents = two[0].revents;
    } else {
      rc = poll(&p, 1, left < 0 || left > INT32_MAX ? -1 : (int)left);
    }
    if (rc > 0) break;
    if (rc == 0 && n->stop != NULL && n->stop(n->stop_arg))
      return hilock__net_fail(n, HILOCK__NET_ESTOPPED, "%s %s: stopped",
                              what, n->where);
    if (rc < 0 && errno != EINTR)
      return hilock__net_fail(n, HILOCK__NET_EIO, "poll: %s", strerror(errno));
  }
  return hilock__net_handle(n, p.revents);
}

static int64_t deadline_of(int64_t ms) {
  return ms > 0 ? hilock__now_ms() + ms : INT64_MAX;
}

hilock__net *hilock__net_connect(const hilock__addr *a, const hilock__tls *tls,
                                 int64_t timeout_ms) {
  int64_t deadline = deadline_of(timeout_ms);
  hilock__net *n = hilock__net_start(a, tls, deadline);
  if (n == NULL) return NULL;
  while (n->err == HILOCK__NET_OK && n->state != 0)
    if (wait_io(n, deadline,
                n->state == 2 ? "TLS handshake (no answer; not a TLS port?) "
                                "with"
                              : "connect to") != 0)
      break;
  return n;
}

/* A RESP header, c then v then CRLF, at p; returns the end. */
static char *put_header(char *p, char c, size_t v) {
  *p++ = c;
  p += hilock__u64_text(p, v);
  *p++ = '\r';
  *p++ = '\n';
  return p;
}

int hilock__net_append(hilock__net *n, int argc, const char **argv,
                       const size_t *lens) {
  /* RESP written straight into the output buffer: an array of bulk
   * strings, as the server reads commands. */
  size_t need;
  char *p;
  if (argc < 0) return -1;
  need = 3 + hilock__digits((size_t)argc);
  for (int i = 0; i < argc; i++) {
    if (lens[i] > SIZE_MAX / 4 || need > SIZE_MAX / 4) return -1;
    need += 5 + hilock__digits(lens[i]) + lens[i];
  }
  if (n->olen + need > n->ocap) {
    size_t cap = n->ocap ? n->ocap : 256;
    char *grown;
    while (cap < n->olen + need) cap *= 2;
    grown = realloc(n->obuf, cap);
    if (grown == NULL) return -1;
    n->obuf = grown;
    n->ocap = cap;
  }
  p = put_header(n->obuf + n->olen, '*', (size_t)argc);
  for (int i = 0; i < argc; i++) {
    p = put_header(p, '$', lens[i]);
    if (lens[i] > 0) memcpy(p, argv[i], lens[i]);
    p += lens[i];
    *p++ = '\r';
    *p++ = '\n';
  }
  n->olen = (size_t)(p - n->obuf);
  return 0;
}

int hilock__net_flush(hilock__net *n) {
  int64_t deadline = deadline_of(n->timeout_ms);
  if (n->err != HILOCK__NET_OK) return -1;
  while (n->state != 0 || n->olen > 0) {
    if (n->state == 0 && write_some(n) != 0) return -1;
    if (n->state == 0 && n->olen == 0) break;
    if (wait_io(n, deadline, "write to") != 0) return -1;
  }
  return 0;
}

/* A plain blocking socket: recv until a whole reply is in, each recv
 * bounded by SO_RCVTIMEO (the connection's timeout). */
static int recv_reply(hilock__net *n, void **reply) {
  if (n->rcvtimeo_ms != n->timeout_ms) {
    int64_t ms = n->timeout_ms > 0 ? n->timeout_ms : 0;
    struct timeval tv;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
    if (setsockopt(n->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0)
      return hilock__net_fail(n, HILOCK__NET_EIO, "setsockopt: %s",
                              strerror(errno));
    n->rcvtimeo_ms = n->timeout_ms;
  }
  for (;;) {
    int got = plain_recv(n, 0);
    if (got < 0) return -1;
    if (got == 0)
      return hilock__net_fail(n, HILOCK__NET_ETIMEDOUT,
                              "no reply from %s: timed out", n->where);
    if (hilock__net_reply(n, reply) != 0) return -1;
    if (*reply != NULL) return 0;
  }
}

#define sent_fn hilock__tl.sent_fn
#define sent_arg hilock__tl.sent_arg

void hilock__net_on_sent(void (*fn)(void *), void *arg) {
  sent_fn = fn;
  sent_arg = arg;
}

int hilock__net_get_reply(hilock__net *n, void **reply) {
  int64_t deadline;
  *reply = NULL;
  if (n->err != HILOCK__NET_OK) return -1;
  if (hilock__net_reply(n, reply) != 0) return -1;
  if (*reply != NULL) return 0;
  /* Write at once: the socket almost always takes it all, which saves a
   * poll before the request leaves. */
  if (n->state == 0 && n->olen > 0 && write_some(n) != 0) return -1;
  if (sent_fn != NULL) {
    void (*fn)(void *) = sent_fn;
    sent_fn = NULL;
    fn(sent_arg);
  }
  /* Not an event loop's attempt: a cancel must be able to end its wait
   * (wait_io looks at the cut). */
  if (n->blocking && n->state == 0 && n->olen == 0 && n->stop == NULL &&
      hilock__fiber_self() == NULL && hilock__tl.cut_ms == NULL)
    return recv_reply(n, reply);
  deadline = deadline_of(n->timeout_ms);
  for (;;) {
    if (wait_io(n, deadline, "no reply from") != 0) return -1;
    if (hilock__net_reply(n, reply) != 0) return -1;
    if (*reply != NULL) return 0;
  }
}

redisReply *hilock__net_command(hilock__net *n, int argc, const char **argv,
                                const size_t *lens) {
  void *r = NULL;
  if (hilock__net_append(n, argc, argv, lens) != 0) {
    hilock__net_fail(n, HILOCK__NET_ENOMEM, "out of memory");
    return NULL;
  }
  if (hilock__net_get_reply(n, &r) != 0) return NULL;
  return r;
}

int hilock__net_idle_dead(hilock__net *n) {
  struct pollfd p;
  void *reply = NULL;
  p.fd = n->fd;
  p.events = POLLIN;
  p.revents = 0;
  if (n->err != HILOCK__NET_OK) return 1;
  if (poll(&p, 1, 0) == 0) return 0;
  /* A plain idle connection has nothing to say unless it is closing; a
   * TLS one may have received session tickets, which read as nothing. */
  if (n->ssl == NULL || hilock__net_handle(n, p.revents) != 0) return 1;
  if (hilock__net_reply(n, &reply) != 0 || reply != NULL) {
    if (reply != NULL) freeReplyObject(reply);
    return 1;
  }
  return 0;
}

void hilock__net_set_timeout(hilock__net *n, int64_t ms) {
  if (n != NULL) n->timeout_ms = ms;
}

void hilock__net_clear_timeout(hilock__net *n) {
  if (n->err == HILOCK__NET_ETIMEDOUT) {
    n->err = HILOCK__NET_OK;
    n->errstr[0] = '\0';
  }
}

void hilock__net_keepalive(hilock__net *n) {
  int one = 1;
  if (n->host == NULL) return;
  (void)setsockopt(n->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
#ifdef TCP_KEEPIDLE
  {
    int idle = 15, intvl = 5, cnt = 3;
    (void)setsockopt(n->fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    (void)setsockopt(n->fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    (void)setsockopt(n->fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
  }
#endif
}

int hilock__net_status(const hilock__net *n) {
  switch (n->err) {
    case HILOCK__NET_OK: return HILOCK_OK;
    case HILOCK__NET_ETIMEDOUT: return HILOCK_ETIMEDOUT;
    case HILOCK__NET_EPROTO: return HILOCK_EPROTO;
    case HILOCK__NET_ETLS: return HILOCK_ETLS;
    case HILOCK__NET_ECERT: return HILOCK_ECERT;
    case HILOCK__NET_ENOMEM: return HILOCK_ENOMEM;
    case HILOCK__NET_ESTOPPED: return HILOCK_EINTR;
    default: return HILOCK_EIO;
  }
}

void hilock__net_free(hilock__net *n) {
  if (n == NULL) return;
  hilock__tls_close(n);
  if (n->fd >= 0) close(n->fd);
  if (n->reader != NULL) redisReaderFree(n->reader);
  free(n->obuf);
  free(n->host);
  free(n);
}
