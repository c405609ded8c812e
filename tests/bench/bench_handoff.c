/* Lock handoff and contention: the C side of tests/bench/handoff.py.
 *
 *   bench_handoff ping    [url] [count]              (default 2000)
 *   bench_handoff handoff [url] [samples]            (default 250)
 *   bench_handoff contend [url] [workers] [seconds]  (default 8, 4)
 *   bench_handoff wake    blpop|pubsub [url] [samples]  (default 250)
 *
 * ping     round trips of a hiredis PING on one connection (url without
 *          password: redis://host[:port][/db])
 * handoff  fork()s a holder and a waiter, each with its own client. Per
 *          sample the holder acquires, tells the waiter, which answers and
 *          calls hilock_hold_acquire; the holder sleeps 5-20 ms (so the
 *          waiter is blocked) and releases. The handoff is the time from
 *          the holder's release returning to the waiter's acquire
 *          returning, both on CLOCK_MONOTONIC.
 * contend  fork()s workers that loop { acquire; spin 1 ms; release } on one
 *          lock for the same window of seconds.
 * wake     the floor under a hand-over, with raw hiredis and no lock: the
 *          same two processes and timing as handoff, but the holder sends
 *          PING plus a script that RPUSHes to a list (blpop) or PUBLISHes
 *          on a channel (pubsub), and the waiter, blocked in BLPOP on that
 *          list or reading its SUBSCRIBE connection, then makes one more
 *          script round trip (as a woken waiter's attempt does): on the
 *          same connection after BLPOP, on a second one after a message.
 *          What each wake-up mechanism costs on this machine and server.
 *
 * HILOCK_BENCH_WAITING=blpop: every waiter blocks in BLPOP on a connection
 * of its own (shared_waiting = 0); =shared: every waiter waits in the
 * client's shared waiting (direct_waiters = 0). By default the lone waiter
 * waits direct (BLPOP), as a client's first waiter does.
 *
 * Warm-up rounds are dropped. Prints one JSON object on stdout; handoff
 * also reports the shortest time the waiter spent in acquire (min_wait_us),
 * which shows that every waiter was really blocked. */
#include <hilock/hilock.h>
#include <hiredis/hiredis.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "example.h"

#define WARMUP 10
#define WAIT_MS 30000 /* a waiter gives up (and fails the run) after this */
#define TTL_MS 10000
#define MAX_WORKERS 64

static int put_byte(int fd, char b) {
  ssize_t n;
  while ((n = write(fd, &b, 1)) < 0 && errno == EINTR) {
  }
  return n == 1 ? 0 : -1;
}

/* -1 on EOF (the other side exited) or error. */
static int get_byte(int fd) {
  unsigned char b;
  ssize_t n;
  while ((n = read(fd, &b, 1)) < 0 && errno == EINTR) {
  }
  return n == 1 ? b : -1;
}

/* Anonymous memory shared with forked children. */
static void *shared(size_t size) {
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  memset(p, 0, size);
  return p;
}

/* The lock under test: the plain lock, or with HILOCK_BENCH_KIND=semaphore
 * a semaphore of one permit (the same hand-over through another family's
 * scripts). */
typedef struct bench_lock {
  hilock_lock *lock;
  hilock_semaphore *sem;
} bench_lock;

static hilock_hold *hold_of(const bench_lock *lk) {
  return lk->sem != NULL ? HILOCK_HOLD(lk->sem) : HILOCK_HOLD(lk->lock);
}

static int open_lock(const char *url, const char *name, hilock_client **c,
                     bench_lock *lk) {
  const char *waiting = getenv("HILOCK_BENCH_WAITING");
  const char *kind = getenv("HILOCK_BENCH_KIND");
  hilock_options o;
  int rc;
  hilock_options_init(&o);
  o.shared_waiting = !(waiting != NULL && strcmp(waiting, "blpop") == 0);
  if (waiting != NULL && strcmp(waiting, "shared") == 0) o.direct_waiters = 0;
  lk->lock = NULL;
  lk->sem = NULL;
  if (hilock_client_new(url, &o, c) != HILOCK_OK) {
    fprintf(stderr, "connect %s: %s\n", url,
            *c ? hilock_client_errmsg(*c) : "out of memory");
    return -1;
  }
  if (kind != NULL && strcmp(kind, "semaphore") == 0)
    rc = hilock_semaphore_new(*c, name, strlen(name), 1, TTL_MS, &lk->sem);
  else
    rc = hilock_lock_new(*c, name, strlen(name), TTL_MS, &lk->lock);
  if (rc != HILOCK_OK) {
    fprintf(stderr, "lock: %s\n", hilock_client_errmsg(*c));
    return -1;
  }
  return 0;
}

static void close_lock(bench_lock *lk) {
  hilock_hold_free(lk->sem != NULL ? HILOCK_HOLD(lk->sem) : HILOCK_HOLD(lk->lock));
}

static int acquire(bench_lock *lk) {
  int rc = lk->sem != NULL ? hilock_hold_acquire(HILOCK_HOLD(lk->sem), WAIT_MS)
                           : hilock_hold_acquire(HILOCK_HOLD(lk->lock), WAIT_MS);
  if (rc == HILOCK_OK) return 0;
  fprintf(stderr, "acquire: %s\n",
          rc == HILOCK_BUSY ? "not granted in time" : hilock_hold_errmsg(hold_of(lk)));
  return -1;
}

static int release(bench_lock *lk) {
  int rc = lk->sem != NULL ? hilock_hold_release(HILOCK_HOLD(lk->sem))
                           : hilock_hold_release(HILOCK_HOLD(lk->lock));
  if (rc == HILOCK_OK) return 0;
  fprintf(stderr, "release: %s\n", hilock_hold_errmsg(hold_of(lk)));
  return -1;
}

/* Wait for every child; 0 if all exited with status 0. */
static int reap(const pid_t *pids, int n) {
  int failed = 0;
  for (int i = 0; i < n; i++) {
    int st;
    if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
      failed = 1;
  }
  return failed ? -1 : 0;
}

/* ## ping --------------------------------------------------------------- */

/* A raw hiredis connection to redis://host[:port][/db] (no password, the
 * database not selected: the benches use 0). NULL after a message. */
static redisContext *raw_connect(const char *url) {
  char host[256] = "127.0.0.1";
  int port = 6379, db = 0;
  struct timeval tv = {2, 0};
  redisContext *r;
  if (strncmp(url, "redis://", 8) != 0 || strchr(url, '@') != NULL ||
      sscanf(url + 8, "%255[^:/]:%d/%d", host, &port, &db) < 1) {
    fprintf(stderr, "expected redis://host[:port][/db], no password\n");
    return NULL;
  }
  r = redisConnectWithTimeout(host, port, tv);
  if (r == NULL || r->err) {
    fprintf(stderr, "connect %s: %s\n", url, r ? r->errstr : "out of memory");
    redisFree(r);
    return NULL;
  }
  return r;
}

static int mode_ping(const char *url, long count) {
  int status = 1;
  redisContext *r = raw_connect(url);
  double *us;

  if (r == NULL) return 1;
  if ((us = malloc(sizeof(*us) * (size_t)count)) == NULL) goto out;
  for (long i = -200; i < count; i++) { /* 200 warm-up round trips */
    int64_t t0 = now_ns();
    redisReply *rep = redisCommand(r, "PING");
    int64_t t1 = now_ns();
    if (rep == NULL || rep->type != REDIS_REPLY_STATUS) {
      fprintf(stderr, "PING: %s\n", rep ? "unexpected reply" : r->errstr);
      freeReplyObject(rep);
      goto out;
    }
    freeReplyObject(rep);
    if (i >= 0) us[i] = (double)(t1 - t0) / 1e3;
  }
  printf("{\"mode\": \"ping\", \"us\": [");
  for (long i = 0; i < count; i++) printf("%s%.2f", i ? ", " : "", us[i]);
  printf("]}\n");
  status = 0;
out:
  free(us);
  redisFree(r);
  return status;
}

/* ## handoff ------------------------------------------------------------ */

static int holder(const char *url, long n, int64_t *t0, int to_w, int from_w) {
  hilock_client *c = NULL;
  bench_lock lk = {NULL, NULL};
  int status = 1;

  srand((unsigned)getpid());
  if (open_lock(url, "handoff:c", &c, &lk) != 0) goto out;
  for (long i = 0; i < n; i++) {
    if (acquire(&lk) != 0 || put_byte(to_w, 'H') != 0 || get_byte(from_w) != 'S')
      goto out;
    sleep_until(now_ns() + 5000000 + (int64_t)(rand() % 15001) * 1000);
    if (release(&lk) != 0) goto out;
    t0[i] = now_ns();
    if (get_byte(from_w) != 'R') goto out;
  }
  status = 0;
out:
  close_lock(&lk);
  hilock_client_free(c);
  return status;
}

/* t1: when acquire returned; waited: how long it blocked. */
static int waiter(const char *url, long n, int64_t *t1, int64_t *waited, int to_h,
                  int from_h) {
  hilock_client *c = NULL;
  bench_lock lk = {NULL, NULL};
  int status = 1;

  if (open_lock(url, "handoff:c", &c, &lk) != 0) goto out;
  for (long i = 0; i < n; i++) {
    int64_t t;
    if (get_byte(from_h) != 'H' || put_byte(to_h, 'S') != 0) goto out;
    t = now_ns();
    if (acquire(&lk) != 0) goto out;
    t1[i] = now_ns();
    waited[i] = t1[i] - t;
    if (release(&lk) != 0 || put_byte(to_h, 'R') != 0) goto out;
  }
  status = 0;
out:
  close_lock(&lk);
  hilock_client_free(c);
  return status;
}

/* ## wake: the floor ----------------------------------------------------- */

#define WAKE_LIST "bench:wake:list"
#define WAKE_CHAN "bench:wake:chan"

/* One reply, checked and freed: 0 unless an error or none. */
static int raw_reply(redisContext *r, redisReply *rep) {
  int bad = rep == NULL || rep->type == REDIS_REPLY_ERROR;
  if (bad) fprintf(stderr, "wake: %s\n", rep ? rep->str : r->errstr);
  freeReplyObject(rep);
  return bad ? -1 : 0;
}

static int raw_holder(const char *url, const char *kind, long n, int64_t *t0,
                      int to_w, int from_w) {
  redisContext *r = raw_connect(url);
  int pub = strcmp(kind, "pubsub") == 0, status = 1;
  if (r == NULL) return 1;
  srand((unsigned)getpid());
  for (long i = 0; i < n; i++) {
    void *a = NULL, *b = NULL;
    if (put_byte(to_w, 'H') != 0 || get_byte(from_w) != 'S') goto out;
    sleep_until(now_ns() + 5000000 + (int64_t)(rand() % 15001) * 1000);
    redisAppendCommand(r, "PING"); /* as a release does: the waiter first */
    if (pub)
      redisAppendCommand(r, "EVAL %s 0 %s",
                         "return redis.call('PUBLISH', ARGV[1], '1')", WAKE_CHAN);
    else
      redisAppendCommand(r, "EVAL %s 1 %s",
                         "return redis.call('RPUSH', KEYS[1], '1')", WAKE_LIST);
    if (redisGetReply(r, &a) != REDIS_OK || raw_reply(r, a) != 0 ||
        redisGetReply(r, &b) != REDIS_OK || raw_reply(r, b) != 0)
      goto out;
    t0[i] = now_ns();
    if (get_byte(from_w) != 'R') goto out;
  }
  status = 0;
out:
  redisFree(r);
  return status;
}

static int raw_waiter(const char *url, const char *kind, long n, int64_t *t1,
                      int64_t *waited, int to_h, int from_h) {
  redisContext *r = raw_connect(url), *other = raw_connect(url);
  int pub = strcmp(kind, "pubsub") == 0, status = 1;
  const char *attempt = "return redis.call('LLEN', KEYS[1])";
  if (r == NULL || other == NULL) goto out;
  if (pub && raw_reply(r, redisCommand(r, "SUBSCRIBE %s", WAKE_CHAN)) != 0) goto out;
  if (!pub && raw_reply(r, redisCommand(r, "DEL %s", WAKE_LIST)) != 0) goto out;
  for (long i = 0; i < n; i++) {
    int64_t t;
    void *m = NULL;
    if (get_byte(from_h) != 'H' || put_byte(to_h, 'S') != 0) goto out;
    t = now_ns();
    if (pub) {
      if (redisGetReply(r, &m) != REDIS_OK || raw_reply(r, m) != 0 ||
          raw_reply(other, redisCommand(other, "EVAL %s 1 %s", attempt, WAKE_LIST)) != 0)
        goto out;
    } else if (raw_reply(r, redisCommand(r, "BLPOP %s 0", WAKE_LIST)) != 0 ||
               raw_reply(r, redisCommand(r, "EVAL %s 1 %s", attempt, WAKE_LIST)) != 0) {
      goto out;
    }
    t1[i] = now_ns();
    waited[i] = t1[i] - t;
    if (put_byte(to_h, 'R') != 0) goto out;
  }
  status = 0;
out:
  if (r != NULL) redisFree(r);
  if (other != NULL) redisFree(other);
  return status;
}

/* kind: NULL for hilock's lock, else the wake floor's "blpop" or "pubsub". */
static int mode_handoff(const char *url, long samples, const char *kind) {
  long n = samples + WARMUP;
  int64_t *t0 = shared(sizeof(int64_t) * (size_t)n), *t1, *waited, min_wait = INT64_MAX;
  int h2w[2], w2h[2];
  pid_t pids[2];

  t1 = shared(sizeof(int64_t) * (size_t)n);
  waited = shared(sizeof(int64_t) * (size_t)n);
  if (pipe(h2w) != 0 || pipe(w2h) != 0) {
    perror("pipe");
    return 1;
  }
  fflush(stdout);
  if ((pids[0] = fork()) == 0) {
    close(h2w[0]);
    close(w2h[1]);
    _exit(kind ? raw_holder(url, kind, n, t0, h2w[1], w2h[0])
               : holder(url, n, t0, h2w[1], w2h[0]));
  }
  if (pids[0] < 0) {
    perror("fork");
    return 1;
  }
  if ((pids[1] = fork()) == 0) {
    close(h2w[1]);
    close(w2h[0]);
    _exit(kind ? raw_waiter(url, kind, n, t1, waited, w2h[1], h2w[0])
               : waiter(url, n, t1, waited, w2h[1], h2w[0]));
  }
  /* Only the children keep the pipes: one exiting ends the other's read. */
  close(h2w[0]);
  close(h2w[1]);
  close(w2h[0]);
  close(w2h[1]);
  if (pids[1] < 0) perror("fork");
  if (reap(pids, pids[1] < 0 ? 1 : 2) != 0 || pids[1] < 0) {
    fprintf(stderr, "handoff: a child failed\n");
    return 1;
  }
  printf("{\"mode\": \"%s\", \"us\": [", kind ? kind : "handoff");
  for (long i = WARMUP; i < n; i++)
    printf("%s%.2f", i > WARMUP ? ", " : "", (double)(t1[i] - t0[i]) / 1e3);
  for (long i = WARMUP; i < n; i++)
    if (waited[i] < min_wait) min_wait = waited[i];
  printf("], \"min_wait_us\": %.2f}\n", (double)min_wait / 1e3);
  return 0;
}

/* ## contend ------------------------------------------------------------ */

typedef struct window {
  int64_t start, end;
  long counts[MAX_WORKERS];
} window;

static int worker(const char *url, window *w, int id, int ready, int go) {
  hilock_client *c = NULL;
  bench_lock lk = {NULL, NULL};
  long n = 0;
  int status = 1;

  if (open_lock(url, "contend:c", &c, &lk) != 0 || put_byte(ready, 'R') != 0 ||
      get_byte(go) != 'G')
    goto out;
  sleep_until(w->start);
  for (;;) {
    int64_t t;
    if (acquire(&lk) != 0) goto out;
    t = now_ns();
    if (t >= w->end) break;
    n++;
    while (now_ns() < t + 1000000) {
    }
    if (release(&lk) != 0) goto out;
  }
  if (release(&lk) != 0) goto out;
  w->counts[id] = n;
  status = 0;
out:
  close_lock(&lk);
  hilock_client_free(c);
  return status;
}

static int mode_contend(const char *url, int workers, double seconds) {
  window *w = shared(sizeof(window));
  pid_t pids[MAX_WORKERS];
  int ready[2], go[2], started = 0, ok = 1;

  if (pipe(ready) != 0 || pipe(go) != 0) {
    perror("pipe");
    return 1;
  }
  fflush(stdout);
  for (; started < workers; started++) {
    if ((pids[started] = fork()) == 0) {
      close(ready[0]);
      close(go[1]);
      _exit(worker(url, w, started, ready[1], go[0]));
    }
    if (pids[started] < 0) {
      perror("fork");
      ok = 0;
      break;
    }
  }
  close(ready[1]);
  close(go[0]);
  for (int i = 0; ok && i < started; i++) ok = get_byte(ready[0]) == 'R';
  /* Every worker is connected: start them together. */
  w->start = now_ns() + 50000000;
  w->end = w->start + (int64_t)(seconds * 1e9);
  for (int i = 0; ok && i < started; i++) ok = put_byte(go[1], 'G') == 0;
  close(go[1]); /* a worker still waiting for 'G' then exits */
  close(ready[0]);
  if (reap(pids, started) != 0 || !ok) {
    fprintf(stderr, "contend: a worker failed\n");
    return 1;
  }
  printf("{\"mode\": \"contend\", \"seconds\": %.3f, \"counts\": [", seconds);
  for (int i = 0; i < workers; i++) printf("%s%ld", i ? ", " : "", w->counts[i]);
  printf("]}\n");
  return 0;
}

/* ## main --------------------------------------------------------------- */

static int usage(const char *prog) {
  fprintf(stderr,
          "usage: %s ping [url] [count]\n"
          "       %s handoff [url] [samples]\n"
          "       %s contend [url] [workers] [seconds]\n"
          "       %s wake blpop|pubsub [url] [samples]\n",
          prog, prog, prog, prog);
  return 2;
}

int main(int argc, char **argv) {
  const char *url = argc > 2 ? argv[2] : EXAMPLE_DEFAULT_URL;
  if (argc < 2) return usage(argv[0]);
  if (strcmp(argv[1], "ping") == 0) {
    long count = argc > 3 ? atol(argv[3]) : 2000;
    return count > 0 ? mode_ping(url, count) : usage(argv[0]);
  }
  if (strcmp(argv[1], "handoff") == 0) {
    long samples = argc > 3 ? atol(argv[3]) : 250;
    return samples > 0 ? mode_handoff(url, samples, NULL) : usage(argv[0]);
  }
  if (strcmp(argv[1], "wake") == 0 && argc > 2 &&
      (strcmp(argv[2], "blpop") == 0 || strcmp(argv[2], "pubsub") == 0)) {
    long samples = argc > 4 ? atol(argv[4]) : 250;
    url = argc > 3 ? argv[3] : EXAMPLE_DEFAULT_URL;
    return samples > 0 ? mode_handoff(url, samples, argv[2]) : usage(argv[0]);
  }
  if (strcmp(argv[1], "contend") == 0) {
    int workers = argc > 3 ? atoi(argv[3]) : 8;
    double seconds = argc > 4 ? atof(argv[4]) : 4.0;
    if (workers < 1 || workers > MAX_WORKERS || seconds <= 0) return usage(argv[0]);
    return mode_contend(url, workers, seconds);
  }
  return usage(argv[0]);
}
