/* libFuzzer target: hostile replies through the whole connection layer.
 *
 * The binary links with -Wl,--wrap=hilock__net_connect: every connection
 * hilock opens (whatever the URL, a cluster node or a sentinel says) goes
 * to a unix socket served by a thread of this process. That server reads
 * hilock's requests and answers each whole one with the next RESP value of
 * the fuzz input; when the input has no whole value left it sends what
 * remains and closes the connection (so nothing waits for a timeout).
 * hilock's reader (net.c), its script runner and routing (script.c,
 * route.c, call.c, cluster MOVED/ASK, sentinel discovery) and each family's
 * reply checks see whatever the input says.
 *
 * Input: byte 0 picks the scenario, byte 1 the client's settings
 * (SCENARIO_* and FLAG_* below), the rest is the reply stream. New
 * scenarios go last, so that the seeds keep theirs.
 *
 * Recording seeds: with HILOCK_FUZZ_RECORD=<port of a redis-server> and
 * HILOCK_FUZZ_RECORD_OUT=<file>, the server passes each request to that
 * redis-server instead and writes the two header bytes and the replies it
 * got to the file: an input replaying a real conversation (run.sh seeds). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "hilock/hilock.h"
#include "internal.h"

enum {
  SCENARIO_PING,
  SCENARIO_LOCK,
  SCENARIO_SEMAPHORE,
  SCENARIO_FAIR,
  SCENARIO_RWLOCK,
  SCENARIO_RLOCK,
  SCENARIO_STORE,
  SCENARIO_CLUSTER, /* redis+cluster://, then the lock's calls */
  SCENARIO_SENTINEL, /* redis+sentinel://, then the lock's calls */
  SCENARIO_MULTI,
  SCENARIO_SEQUENTIAL,
  SCENARIO_SEGMENTED,
  SCENARIO_COUNT
};
#define FLAG_WAIT 1     /* wait_replicas 1: WAIT follows each grant */
#define FLAG_AUTH 2     /* a password: AUTH on every connection */
#define FLAG_DB 4       /* database 1: SELECT on every connection */
#define FLAG_WAITING 8  /* acquire with a wait of 1 ms (BLPOP) */

#define MAX_CONNS 32
#define MAX_DEPTH 16

/* ## RESP framing ---------------------------------------------------------- */

/* Length of the whole RESP value at b[0..n), or 0 if there is none (cut
 * short, or not RESP): requests and replies alike. */
static size_t resp_len(const char *b, size_t n, int depth) {
  const char *nl;
  size_t line;
  long long v = 0;
  int neg = 0;
  if (n == 0 || depth > MAX_DEPTH) return 0;
  nl = memmem(b, n, "\r\n", 2);
  if (nl == NULL) return 0;
  line = (size_t)(nl - b) + 2;
  switch (b[0]) {
    case '+': case '-': case ':': return line;
    case '$': case '*': break;
    default: return 0;
  }
  {
    const char *p = b + 1;
    if (p < nl && *p == '-') {
      neg = 1;
      p++;
    }
    if (p == nl || nl - p > 12) return 0;
    for (; p < nl; p++) {
      if (*p < '0' || *p > '9') return 0;
      v = v * 10 + (*p - '0');
    }
  }
  if (neg) return line; /* a null */
  if (b[0] == '$') return (size_t)v + 2 <= n - line ? line + (size_t)v + 2 : 0;
  {
    size_t at = line;
    if ((size_t)v > n) return 0;
    for (long long i = 0; i < v; i++) {
      size_t one = resp_len(b + at, n - at, depth + 1);
      if (one == 0) return 0;
      at += one;
    }
    return at;
  }
}

/* ## The scripted server ------------------------------------------------- */

typedef struct sconn {
  int fd;
  int up; /* recording: the connection to the real server */
  char *in;
  size_t inlen, incap;
} sconn;

static struct {
  char path[108];
  int lfd;
  int wake[2];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int reset; /* asked: drop every connection; cleared when done */
  sconn conns[MAX_CONNS];
  int nconns;
  const char *stream; /* the replies left */
  size_t left;
  int record_port;
  int trace; /* HILOCK_FUZZ_TRACE: print each request's words to stderr */
  char *cap; /* recording: the replies */
  size_t caplen, capcap;
} srv = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* realloc, or the end of the run (the server's own buffers). */
static char *grow(char *p, size_t n) {
  char *q = realloc(p, n);
  if (q == NULL) abort();
  return q;
}

static void put_all(int fd, const char *b, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    if (w <= 0) return;
    b += w;
    n -= (size_t)w;
  }
}

static void drop(int i) {
  close(srv.conns[i].fd);
  if (srv.conns[i].up >= 0) close(srv.conns[i].up);
  free(srv.conns[i].in);
  srv.conns[i] = srv.conns[--srv.nconns];
}

static int upstream(void) {
  struct sockaddr_in a;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)srv.record_port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

/* Recording: the real server's reply to one request. */
static void relay(sconn *c, const char *req, size_t len) {
  char *buf = NULL;
  size_t n = 0, cap = 0, whole = 0;
  put_all(c->up, req, len);
  while (whole == 0) {
    ssize_t got;
    if (cap - n < 4096) {
      cap = cap ? cap * 2 : 8192;
      buf = grow(buf, cap);
    }
    got = recv(c->up, buf + n, cap - n, 0);
    if (got <= 0) break;
    n += (size_t)got;
    whole = resp_len(buf, n, 0);
  }
  if (whole > 0) {
    if (srv.caplen + whole > srv.capcap) {
      srv.capcap = (srv.caplen + whole) * 2;
      srv.cap = grow(srv.cap, srv.capcap);
    }
    memcpy(srv.cap + srv.caplen, buf, whole);
    srv.caplen += whole;
    put_all(c->fd, buf, whole);
  }
  free(buf);
}

static void trace(const char *req, size_t len) {
  /* A request is an array of bulk strings: its printable bytes, line
   * breaks as spaces. */
  for (size_t i = 0; i < len; i++) {
    char ch = req[i] == '\r' || req[i] == '\n' ? ' ' : req[i];
    fputc(ch >= 32 && ch < 127 ? ch : '.', stderr);
  }
  fputc('\n', stderr);
}

/* Answer every whole request of connection i; 0 if it was closed. */
static int serve(int i) {
  sconn *c = &srv.conns[i];
  size_t at = 0, len;
  int open = 1;
  while (open && (len = resp_len(c->in + at, c->inlen - at, 0)) > 0) {
    if (srv.trace) trace(c->in + at, len);
    if (srv.record_port > 0) {
      relay(c, c->in + at, len);
    } else {
      size_t one;
      pthread_mutex_lock(&srv.mu);
      one = resp_len(srv.stream, srv.left, 0);
      if (one == 0) {
        /* No whole reply left: the rest, then the end of the stream. */
        put_all(c->fd, srv.stream, srv.left);
        srv.stream += srv.left;
        srv.left = 0;
        open = 0;
      } else {
        put_all(c->fd, srv.stream, one);
        srv.stream += one;
        srv.left -= one;
      }
      pthread_mutex_unlock(&srv.mu);
    }
    at += len;
  }
  memmove(c->in, c->in + at, c->inlen - at);
  c->inlen -= at;
  if (!open) drop(i);
  return open;
}

static void *server_main(void *arg) {
  (void)arg;
  for (;;) {
    struct pollfd p[MAX_CONNS + 2];
    int n = srv.nconns;
    p[0].fd = srv.wake[0];
    p[1].fd = srv.lfd;
    p[0].events = p[1].events = POLLIN;
    for (int i = 0; i < n; i++) {
      p[i + 2].fd = srv.conns[i].fd;
      p[i + 2].events = POLLIN;
    }
    if (poll(p, (nfds_t)n + 2, -1) < 0) continue;
    if (p[0].revents & POLLIN) {
      char b[64];
      (void)!read(srv.wake[0], b, sizeof(b));
      pthread_mutex_lock(&srv.mu);
      if (srv.reset) {
        int fd;
        while (srv.nconns > 0) drop(srv.nconns - 1);
        while ((fd = accept4(srv.lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0)
          close(fd);
        srv.reset = 0;
        pthread_cond_broadcast(&srv.cv);
      }
      pthread_mutex_unlock(&srv.mu);
      continue; /* the connections changed */
    }
    /* Connections in reverse: drop() moves the last one into place. */
    for (int i = n - 1; i >= 0; i--) {
      sconn *c = &srv.conns[i];
      ssize_t got;
      if (!(p[i + 2].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (c->incap - c->inlen < 4096) {
        c->in = grow(c->in, c->incap + 8192);
        c->incap += 8192;
      }
      got = recv(c->fd, c->in + c->inlen, c->incap - c->inlen, 0);
      if (got <= 0) {
        drop(i);
        continue;
      }
      c->inlen += (size_t)got;
      serve(i);
    }
    if (p[1].revents & POLLIN) {
      int fd = accept4(srv.lfd, NULL, NULL, SOCK_CLOEXEC);
      if (fd < 0) continue;
      pthread_mutex_lock(&srv.mu);
      if (srv.nconns == MAX_CONNS ||
          (srv.record_port == 0 && srv.left == 0)) {
        close(fd); /* the stream has ended: so has every new connection */
      } else {
        sconn *c = &srv.conns[srv.nconns++];
        memset(c, 0, sizeof(*c));
        c->fd = fd;
        c->up = srv.record_port > 0 ? upstream() : -1;
      }
      pthread_mutex_unlock(&srv.mu);
    }
  }
  return NULL;
}

static void server_start(void) {
  struct sockaddr_un a;
  pthread_t t;
  const char *rec = getenv("HILOCK_FUZZ_RECORD");
  if (rec != NULL) srv.record_port = atoi(rec);
  srv.trace = getenv("HILOCK_FUZZ_TRACE") != NULL;
  snprintf(srv.path, sizeof(srv.path), "/tmp/hilock-fuzz-%d.sock", (int)getpid());
  unlink(srv.path);
  memset(&a, 0, sizeof(a));
  a.sun_family = AF_UNIX;
  memcpy(a.sun_path, srv.path, strlen(srv.path) + 1);
  srv.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (srv.lfd < 0 || bind(srv.lfd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
      listen(srv.lfd, 64) != 0 || pipe(srv.wake) != 0 ||
      pthread_create(&t, NULL, server_main, NULL) != 0)
    abort();
  pthread_detach(t);
}

static void server_cleanup(void) { unlink(srv.path); }

/* Drop every connection, so the next input starts on fresh ones. */
static void server_reset(void) {
  pthread_mutex_lock(&srv.mu);
  srv.reset = 1;
  (void)!write(srv.wake[1], "r", 1);
  while (srv.reset) pthread_cond_wait(&srv.cv, &srv.mu);
  srv.stream = NULL;
  srv.left = 0;
  pthread_mutex_unlock(&srv.mu);
}

/* Every connection hilock makes, to whatever address, reaches the server. */
hilock__net *__real_hilock__net_connect(const hilock__addr *a,
                                        const hilock__tls *tls,
                                        int64_t timeout_ms);
hilock__net *__wrap_hilock__net_connect(const hilock__addr *a,
                                        const hilock__tls *tls,
                                        int64_t timeout_ms);
hilock__net *__wrap_hilock__net_connect(const hilock__addr *a,
                                        const hilock__tls *tls,
                                        int64_t timeout_ms) {
  hilock__addr here = {srv.path, NULL, 0};
  (void)a;
  (void)tls;
  return __real_hilock__net_connect(&here, NULL, timeout_ms);
}

/* ## The scenarios ------------------------------------------------------- */

static const char NAME[] = "fz";

static void lock_calls(hilock_client *c, int waiting) {
  hilock_lock *l = NULL;
  int owned;
  if (hilock_lock_new(c, NAME, 2, 10000, &l) != HILOCK_OK) return;
  if ((waiting ? hilock_hold_acquire(HILOCK_HOLD(l), 1) : hilock_hold_try_acquire(HILOCK_HOLD(l))) ==
      HILOCK_OK) {
    (void)hilock_hold_extend(HILOCK_HOLD(l), 5000, 0);
    (void)hilock_hold_owned(HILOCK_HOLD(l), &owned);
    (void)hilock_hold_renew(HILOCK_HOLD(l));
    (void)hilock_hold_release(HILOCK_HOLD(l));
  }
  hilock_hold_free(HILOCK_HOLD(l));
}

/* The two families with a line of waiters: a grant, its extension and
 * release, and the length of the line. */
static void queue_calls(hilock_client *c, int fair, int waiting) {
  hilock_fair_lock *f = NULL;
  hilock_sequential_lock *q = NULL;
  hilock_hold *h;
  int64_t n;
  if ((fair ? hilock_fair_lock_new(c, NAME, 2, 10000, &f)
            : hilock_sequential_lock_new(c, NAME, 2, 10000, &q)) != HILOCK_OK)
    return;
  h = fair ? HILOCK_HOLD(f) : HILOCK_HOLD(q);
  if ((waiting ? hilock_hold_acquire(h, 1) : hilock_hold_try_acquire(h)) ==
      HILOCK_OK) {
    (void)hilock_hold_extend(h, 5000, 1);
    (void)hilock_hold_release(h);
  }
  (void)(fair ? hilock_fair_lock_waiters(f, &n)
              : hilock_sequential_lock_waiters(q, &n));
  hilock_hold_free(h);
}

static void run(int scenario, int flags, hilock_client *c) {
  int waiting = (flags & FLAG_WAITING) != 0;
  switch (scenario) {
    case SCENARIO_PING:
      (void)hilock_client_ping(c);
      break;
    case SCENARIO_LOCK:
    case SCENARIO_CLUSTER:
    case SCENARIO_SENTINEL:
      lock_calls(c, waiting);
      break;
    case SCENARIO_SEMAPHORE: {
      hilock_semaphore *s = NULL;
      int64_t n;
      if (hilock_semaphore_new(c, NAME, 2, 3, 10000, &s) != HILOCK_OK) break;
      if ((waiting ? hilock_hold_acquire(HILOCK_HOLD(s), 1)
                   : hilock_hold_try_acquire(HILOCK_HOLD(s))) == HILOCK_OK) {
        (void)hilock_hold_renew(HILOCK_HOLD(s));
        (void)hilock_hold_release(HILOCK_HOLD(s));
      }
      (void)hilock_semaphore_available(s, &n);
      hilock_hold_free(HILOCK_HOLD(s));
      break;
    }
    case SCENARIO_FAIR:
    case SCENARIO_SEQUENTIAL:
      queue_calls(c, scenario == SCENARIO_FAIR, waiting);
      break;
    case SCENARIO_RWLOCK: {
      hilock_rwlock *rw = NULL;
      int64_t readers;
      int writer;
      if (hilock_rwlock_new(c, NAME, 2, 10000, &rw) != HILOCK_OK) break;
      if ((waiting ? hilock_rwlock_read_acquire(rw, 1)
                   : hilock_rwlock_read_try_acquire(rw)) == HILOCK_OK)
        (void)hilock_rwlock_read_release(rw);
      if ((waiting ? hilock_rwlock_write_acquire(rw, 1)
                   : hilock_rwlock_write_try_acquire(rw)) == HILOCK_OK)
        (void)hilock_rwlock_write_release(rw);
      (void)hilock_rwlock_state(rw, &readers, &writer);
      hilock_hold_free(HILOCK_HOLD(rw));
      break;
    }
    case SCENARIO_RLOCK: {
      hilock_rlock *r = NULL;
      int64_t count;
      if (hilock_rlock_new(c, NAME, 2, 10000, &r) != HILOCK_OK) break;
      if ((waiting ? hilock_hold_acquire(HILOCK_HOLD(r), 1) : hilock_hold_try_acquire(HILOCK_HOLD(r))) ==
          HILOCK_OK) {
        if (hilock_hold_try_acquire(HILOCK_HOLD(r)) == HILOCK_OK)
          (void)hilock_hold_release(HILOCK_HOLD(r));
        (void)hilock_rlock_hold_count(r, &count);
        (void)hilock_hold_release(HILOCK_HOLD(r));
      }
      hilock_hold_free(HILOCK_HOLD(r));
      break;
    }
    case SCENARIO_MULTI: {
      static const char *const names[2] = {"fz", "fy"};
      hilock_multi_lock *m = NULL;
      if (hilock_multi_lock_new(c, names, 2, 10000, &m) != HILOCK_OK) break;
      if ((waiting ? hilock_hold_acquire(HILOCK_HOLD(m), 1)
                   : hilock_hold_try_acquire(HILOCK_HOLD(m))) == HILOCK_OK) {
        (void)hilock_hold_extend(HILOCK_HOLD(m), 5000, 0);
        (void)hilock_hold_release(HILOCK_HOLD(m));
      }
      hilock_hold_free(HILOCK_HOLD(m));
      break;
    }
    case SCENARIO_SEGMENTED: {
      hilock_segmented_lock *g = NULL;
      int64_t taken, left;
      if (hilock_segmented_lock_new(c, NAME, 2, 3, 10000, &g) != HILOCK_OK) break;
      (void)hilock_segmented_lock_stock_init(g, 10);
      if ((waiting ? hilock_hold_acquire(HILOCK_HOLD(g), 1)
                   : hilock_hold_try_acquire(HILOCK_HOLD(g))) == HILOCK_OK) {
        (void)hilock_segmented_lock_take(g, 2, 1, &taken, &left);
        (void)hilock_hold_release(HILOCK_HOLD(g));
      }
      (void)hilock_segmented_lock_stock(g, HILOCK_SEGMENT_ALL, &left);
      hilock_hold_free(HILOCK_HOLD(g));
      break;
    }
    case SCENARIO_STORE: {
      hilock_store *s = NULL;
      char *v = NULL;
      size_t len;
      int64_t n;
      uint64_t fence;
      int deleted;
      if (hilock_store_new(c, NULL, &s) != HILOCK_OK) break;
      (void)hilock_store_set(s, "k", 1, 7, "v", 1, 0);
      if (hilock_store_get(s, "k", 1, 7, &v, &len) == HILOCK_OK)
        hilock_store_value_free(v);
      (void)hilock_store_incrby(s, "n", 1, 7, 2, 0, &n);
      (void)hilock_store_fence_of(s, "k", 1, &fence);
      (void)hilock_store_delete(s, "k", 1, 8, &deleted);
      hilock_store_free(s);
      break;
    }
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  signal(SIGPIPE, SIG_IGN);
  server_start();
  atexit(server_cleanup);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const urls[SCENARIO_COUNT][2] = {
      [SCENARIO_CLUSTER] = {"redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
                            "redis+cluster://:pw@127.0.0.1:7000"},
      [SCENARIO_SENTINEL] = {"redis+sentinel://127.0.0.1:26379/mymaster",
                             "redis+sentinel://:pw@127.0.0.1:26379/mymaster/1"},
  };
  hilock_options o;
  hilock_client *c = NULL;
  const char *url;
  char plain[64];
  int scenario, flags;

  if (size < 2) return 0;
  scenario = data[0] % SCENARIO_COUNT;
  flags = data[1];
  hilock_options_init(&o);
  /* Bounds that the server never lets run out (it answers or closes),
   * kept short in case it ever does. */
  o.connect_timeout_ms = 500;
  o.command_timeout_ms = 500;
  o.reconnect_ms = 0;
  o.shared_waiting = 0;
  o.max_idle = 2;
  o.max_connections = 4;
  if (flags & FLAG_WAIT) {
    o.wait_replicas = 1;
    o.wait_timeout_ms = 10;
  }
  url = urls[scenario][(flags & FLAG_AUTH) != 0];
  if (url == NULL) {
    snprintf(plain, sizeof(plain), "redis://%s127.0.0.1:6379%s",
             flags & FLAG_AUTH ? ":pw@" : "", flags & FLAG_DB ? "/1" : "");
    url = plain;
  }

  pthread_mutex_lock(&srv.mu);
  srv.stream = (const char *)data + 2;
  srv.left = size - 2;
  srv.caplen = 0;
  pthread_mutex_unlock(&srv.mu);

  if (hilock_client_new(url, &o, &c) == HILOCK_OK) run(scenario, flags, c);
  hilock_client_free(c);
  server_reset();

  if (srv.record_port > 0 && getenv("HILOCK_FUZZ_RECORD_OUT") != NULL) {
    FILE *f = fopen(getenv("HILOCK_FUZZ_RECORD_OUT"), "wb");
    if (f != NULL) {
      fwrite(data, 1, 2, f);
      fwrite(srv.cap, 1, srv.caplen, f);
      fclose(f);
    }
  }
  return 0;
}
