/* Test helpers: private redis-server processes, direct Redis access. */
#include "test_util.h"

#include "internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif

#define READY_TIMEOUT_MS 10000
#define MAX_LIVE 16

/* Servers still running, killed at exit if a test never reached its
 * teardown (the child also dies with us through PR_SET_PDEATHSIG). */
static hl_server *live[MAX_LIVE];
static int atexit_registered;

static void kill_live_servers(void) {
  for (int i = 0; i < MAX_LIVE; i++) {
    if (live[i] != NULL && live[i]->pid > 0) {
      kill(live[i]->pid, SIGKILL);
      waitpid(live[i]->pid, NULL, 0);
      live[i]->pid = 0;
    }
    live[i] = NULL;
  }
}

static void track(hl_server *s) {
  if (!atexit_registered) {
    atexit(kill_live_servers);
    atexit_registered = 1;
  }
  for (int i = 0; i < MAX_LIVE; i++)
    if (live[i] == s) return;
  for (int i = 0; i < MAX_LIVE; i++) {
    if (live[i] == NULL) {
      live[i] = s;
      return;
    }
  }
}

static void untrack(hl_server *s) {
  for (int i = 0; i < MAX_LIVE; i++)
    if (live[i] == s) live[i] = NULL;
}

int64_t hl_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void hl_sleep_ms(int64_t ms) {
  struct timespec ts;
  if (ms <= 0) return;
  ts.tv_sec = (time_t)(ms / 1000);
  ts.tv_nsec = (long)(ms % 1000) * 1000000L;
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int hl_blpop_mode(void) {
  const char *m = getenv("HILOCK_TEST_WAIT");
  return m != NULL && strcmp(m, "blpop") == 0;
}

const char *hl_wake_cmd(void) { return hl_hub_mode() ? "lpop" : "blpop"; }

int hl_hub_mode(void) {
  const char *m = getenv("HILOCK_TEST_WAIT");
  return m != NULL && strcmp(m, "hub") == 0;
}

/* Threads in the shared waiting, and those blocked in BLPOP on the server
 * (a direct wait, or every wait in blpop mode). */
long long hl_waiters(redisContext *c) {
  long long blocked = hl_info_field(c, "clients", "blocked_clients");
  if (hl_blpop_mode()) return blocked;
  return hilock__waiting_all() + blocked;
}

int hl_wait_waiters(redisContext *c, long long n, int64_t timeout_ms) {
  int64_t end = hl_now_ms() + timeout_ms;
  for (;;) {
    if (hl_waiters(c) == n) return 1;
    if (hl_now_ms() > end) return 0;
    hl_sleep_ms(5);
  }
}

int hl_wait_subscribed(redisContext *c, const char *channel, long long n,
                       int64_t timeout_ms) {
  int64_t end = hl_now_ms() + timeout_ms;
  if (hl_blpop_mode())
    return hl_wait_info_field(c, "clients", "blocked_clients", n, timeout_ms);
  for (;;) {
    redisReply *r = hl_redis(c, "PUBSUB NUMSUB %s", channel);
    long long got = -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_INTEGER)
      got = r->element[1]->integer;
    freeReplyObject(r);
    /* Subscribed, or blocked in BLPOP (a direct wait). */
    if (got >= 0 && !hl_hub_mode())
      got += hl_info_field(c, "clients", "blocked_clients");
    if (got == n) return 1;
    if (hl_now_ms() > end) return 0;
    hl_sleep_ms(5);
  }
}

hilock_options hl_test_options(void) {
  hilock_options o;
  hilock_options_init(&o);
  o.shared_waiting = !hl_blpop_mode();
  if (hl_hub_mode()) o.direct_waiters = 0;
  o.connect_timeout_ms = 1000;
  o.command_timeout_ms = 3000;
  o.reconnect_ms = 1000;
  o.max_idle = 4;
  return o;
}

const char *hl_server_binary(void) {
  const char *b = getenv("HILOCK_REDIS_SERVER");
  return b != NULL && b[0] != '\0' ? b : "redis-server";
}

int hl_free_port(void) {
  struct sockaddr_in sa;
  socklen_t len = sizeof(sa);
  int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
  if (fd < 0) return -1;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = 0;
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
      getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
    port = ntohs(sa.sin_port);
  close(fd);
  return port;
}

static void print_log(const hl_server *s) {
  char path[PATH_MAX + 16], line[512];
  FILE *f;
  snprintf(path, sizeof(path), "%s/redis.log", s->dir);
  f = fopen(path, "r");
  if (f == NULL) return;
  while (fgets(line, sizeof(line), f) != NULL) fprintf(stderr, "  | %s", line);
  fclose(f);
}

/* Child side of the fork: die with the parent, log to a file, exec. */
static void exec_server(const hl_server *s, char **argv, pid_t parent) {
  char log[PATH_MAX + 16];
  int fd;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(126);
  snprintf(log, sizeof(log), "%s/redis.log", s->dir);
  fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (fd >= 0) {
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  fd = open("/dev/null", O_RDONLY);
  if (fd >= 0) {
    dup2(fd, STDIN_FILENO);
    close(fd);
  }
  execvp(argv[0], argv);
  _exit(127);
}

/* 1 once the server answers PING (any reply, even NOAUTH, but not LOADING:
 * a server that restarts with its AOF answers LOADING until it has read
 * it). */
static int answers_ping(const hl_server *s) {
  struct timeval tv = {0, 200000};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
  redisReply *r;
  int ok = 0;
  if (c == NULL) return 0;
  if (!c->err) {
    redisSetTimeout(c, tv);
    r = redisCommand(c, "PING");
    ok = r != NULL && !(r->type == REDIS_REPLY_ERROR &&
                        strncmp(r->str, "LOADING", 7) == 0);
    if (r != NULL) freeReplyObject(r);
  }
  redisFree(c);
  return ok;
}

static int spawn(hl_server *s) {
  char port[16], *argv[32 + HL_SERVER_MAX_ARGS];
  int argc = 0;
  pid_t parent = getpid();
  int64_t deadline;

  snprintf(port, sizeof(port), "%d", s->port);
  argv[argc++] = (char *)hl_server_binary();
  argv[argc++] = "--port";
  argv[argc++] = port;
  argv[argc++] = "--bind";
  argv[argc++] = "127.0.0.1";
  argv[argc++] = "--save";
  argv[argc++] = "";
  argv[argc++] = "--appendonly";
  argv[argc++] = "no";
  argv[argc++] = "--dir";
  argv[argc++] = s->dir;
  argv[argc++] = "--daemonize";
  argv[argc++] = "no";
  if (s->sock[0] != '\0') {
    argv[argc++] = "--unixsocket";
    argv[argc++] = s->sock;
    argv[argc++] = "--unixsocketperm";
    argv[argc++] = "700";
  }
  if (s->password != NULL) {
    argv[argc++] = "--requirepass";
    argv[argc++] = (char *)s->password;
  }
  for (int i = 0; i < s->nextra; i++) argv[argc++] = (char *)s->extra[i];
  argv[argc] = NULL;

  fflush(NULL);
  s->pid = fork();
  if (s->pid < 0) {
    s->pid = 0;
    print_error("fork: %s\n", strerror(errno));
    return -1;
  }
  if (s->pid == 0) exec_server(s, argv, parent);
  track(s);

  deadline = hl_now_ms() + READY_TIMEOUT_MS;
  while (hl_now_ms() < deadline) {
    int status;
    if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
      s->pid = 0;
      print_error("redis-server on port %d exited early (status %d):\n",
                  s->port, status);
      print_log(s);
      return -1;
    }
    if (answers_ping(s)) return 0;
    hl_sleep_ms(10);
  }
  print_error("redis-server on port %d did not answer PING in time\n",
              s->port);
  print_log(s);
  hl_server_stop(s);
  return -1;
}

int hl_server_start(hl_server *s, const hl_server_opts *opts) {
  const char *tmp = getenv("TMPDIR");
  memset(s, 0, sizeof(*s));
  /* Unix socket paths are limited to 107 bytes: keep the directory short. */
  if (tmp == NULL || strlen(tmp) > 64) tmp = "/tmp";
  snprintf(s->dir, sizeof(s->dir), "%s/hilock-test-XXXXXX", tmp);
  if (mkdtemp(s->dir) == NULL) {
    print_error("mkdtemp %s: %s\n", s->dir, strerror(errno));
    return -1;
  }
  if (opts != NULL) {
    if (opts->unix_socket) snprintf(s->sock, sizeof(s->sock), "%s/r.sock", s->dir);
    s->password = opts->password;
    for (int i = 0; opts->extra && opts->extra[i]; i++) {
      if (s->nextra == HL_SERVER_MAX_ARGS) {
        print_error("too many extra redis-server arguments\n");
        return -1;
      }
      s->extra[s->nextra++] = opts->extra[i];
    }
  }
  /* Another process may grab the port between probe and bind: retry. */
  for (int attempt = 0, draws = 0; attempt < 5; attempt++) {
    s->port = hl_free_port();
    if (s->port < 0) {
      print_error("no free loopback port: %s\n", strerror(errno));
      return -1;
    }
    if (opts != NULL && opts->port_max > 0 && s->port > opts->port_max &&
        ++draws < 1000) {
      attempt--; /* e.g. a cluster node's bus port (port + 10000) */
      continue;
    }
    snprintf(s->url, sizeof(s->url), "redis://127.0.0.1:%d", s->port);
    if (spawn(s) == 0) return 0;
  }
  return -1;
}

void hl_server_stop(hl_server *s) {
  if (s->pid > 0) {
    kill(s->pid, SIGKILL);
    while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    s->pid = 0;
  }
  untrack(s);
}

int hl_server_restart(hl_server *s) {
  hl_server_stop(s);
  /* A killed server leaves its unix socket file behind. */
  if (s->sock[0] != '\0') unlink(s->sock);
  return spawn(s);
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *ent;
  char path[PATH_MAX + 300];
  if (d == NULL) return;
  while ((ent = readdir(d)) != NULL) {
    if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
      continue;
    snprintf(path, sizeof(path), "%s/%s", dir, ent->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

void hl_server_destroy(hl_server *s) {
  hl_server_stop(s);
  if (s->dir[0] != '\0') remove_dir(s->dir);
  s->dir[0] = '\0';
}

int hl_servers_start(hl_server *s, int n, const hl_server_opts *opts) {
  for (int i = 0; i < n; i++) {
    if (hl_server_start(&s[i], opts) != 0) {
      hl_servers_destroy(s, i);
      return -1;
    }
  }
  return 0;
}

void hl_servers_destroy(hl_server *s, int n) {
  for (int i = 0; i < n; i++) hl_server_destroy(&s[i]);
}

redisContext *hl_redis_connect(const hl_server *s) {
  struct timeval tv = {2, 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
  assert_non_null(c);
  if (c->err) {
    print_error("connect to 127.0.0.1:%d: %s\n", s->port, c->errstr);
    redisFree(c);
    fail();
  }
  redisSetTimeout(c, tv);
  if (s->password != NULL) hl_redis_ok(c, "AUTH %s", s->password);
  return c;
}

static redisReply *vcommand(redisContext *c, const char *fmt, va_list ap) {
  redisReply *r = redisvCommand(c, fmt, ap);
  if (r == NULL) {
    print_error("redis command '%s': %s\n", fmt, c->errstr);
    fail();
  }
  return r;
}

redisReply *hl_redis(redisContext *c, const char *fmt, ...) {
  va_list ap;
  redisReply *r;
  va_start(ap, fmt);
  r = vcommand(c, fmt, ap);
  va_end(ap);
  return r;
}

long long hl_redis_int(redisContext *c, const char *fmt, ...) {
  va_list ap;
  redisReply *r;
  long long v;
  va_start(ap, fmt);
  r = vcommand(c, fmt, ap);
  va_end(ap);
  if (r->type != REDIS_REPLY_INTEGER) {
    print_error("redis command '%s': reply type %d (%s), not an integer\n",
                fmt, r->type, r->str ? r->str : "");
    freeReplyObject(r);
    fail();
  }
  v = r->integer;
  freeReplyObject(r);
  return v;
}

void hl_redis_ok(redisContext *c, const char *fmt, ...) {
  va_list ap;
  redisReply *r;
  va_start(ap, fmt);
  r = vcommand(c, fmt, ap);
  va_end(ap);
  if (r->type == REDIS_REPLY_ERROR) {
    print_error("redis command '%s' failed: %s\n", fmt, r->str);
    freeReplyObject(r);
    fail();
  }
  freeReplyObject(r);
}

char *hl_redis_get(redisContext *c, const char *key, size_t keylen) {
  redisReply *r = hl_redis(c, "GET %b", key, keylen);
  char *v = NULL;
  if (r->type == REDIS_REPLY_STRING) {
    v = malloc(r->len + 1);
    assert_non_null(v);
    memcpy(v, r->str, r->len);
    v[r->len] = '\0';
  } else if (r->type != REDIS_REPLY_NIL) {
    print_error("GET: reply type %d (%s)\n", r->type, r->str ? r->str : "");
    freeReplyObject(r);
    fail();
  }
  freeReplyObject(r);
  return v;
}

long long hl_redis_pttl(redisContext *c, const char *key, size_t keylen) {
  return hl_redis_int(c, "PTTL %b", key, keylen);
}

int hl_redis_exists(redisContext *c, const char *key, size_t keylen) {
  return hl_redis_int(c, "EXISTS %b", key, keylen) > 0;
}

char *hl_hold_value(redisContext *c, const hilock_hold *h) {
  size_t len;
  const char *key = hilock_hold_key(h, &len);
  return hl_redis_get(c, key, len);
}

long long hl_hold_pttl(redisContext *c, const hilock_hold *h) {
  size_t len;
  const char *key = hilock_hold_key(h, &len);
  return hl_redis_pttl(c, key, len);
}

int hl_hold_exists(redisContext *c, const hilock_hold *h) {
  size_t len;
  const char *key = hilock_hold_key(h, &len);
  return hl_redis_exists(c, key, len);
}

void hl_assert_hold_value(redisContext *c, const hilock_hold *h,
                          const char *want) {
  char *v = hl_hold_value(c, h);
  assert_non_null(v);
  assert_string_equal(v, want);
  free(v);
}

void hl_assert_holder(redisContext *c, const hilock_hold *h) {
  hl_assert_hold_value(c, h, hilock_hold_token(h));
}

/* ## Clients and handles -------------------------------------------------- */

hilock_client *hl_client(const char *url, const hilock_options *o) {
  hilock_options def = hl_test_options();
  hilock_client *c = NULL;
  int rc = hilock_client_new(url, o ? o : &def, &c);
  assert_hl_ok(rc, hilock_client_errmsg(c));
  return c;
}

/* The handle a constructor made, once its rc is known: fails the test
 * (with the client's message) unless it succeeded. */
static void *made(hilock_client *c, int rc, void *h) {
  assert_hl_ok(rc, hilock_client_errmsg(c));
  assert_non_null(h);
  return h;
}

/* The constructors of a named lock with a TTL. */
#define HL_NEW_TTL(fn, type, ctor)                                         \
  type *fn(hilock_client *c, const char *name, int64_t ttl_ms) {          \
    type *x = NULL;                                                        \
    int rc = ctor(c, name, strlen(name), ttl_ms, &x);                      \
    return made(c, rc, x);                                                 \
  }

HL_NEW_TTL(hl_new_lock, hilock_lock, hilock_lock_new)
HL_NEW_TTL(hl_new_rlock, hilock_rlock, hilock_rlock_new)
HL_NEW_TTL(hl_new_rwlock, hilock_rwlock, hilock_rwlock_new)
HL_NEW_TTL(hl_new_fair, hilock_fair_lock, hilock_fair_lock_new)
HL_NEW_TTL(hl_new_seq, hilock_sequential_lock, hilock_sequential_lock_new)

hilock_lock *hl_new_simple(hilock_client *c, const char *name) {
  hilock_lock *x = NULL;
  int rc = hilock_lock_new_simple(c, name, strlen(name), &x);
  return made(c, rc, x);
}

/* The constructors of a named family with a number (permits, count,
 * parties) and a TTL. */
#define HL_NEW_N_TTL(fn, type, ctor)                                       \
  type *fn(hilock_client *c, const char *name, int64_t n, int64_t ttl_ms) { \
    type *x = NULL;                                                         \
    int rc = ctor(c, name, strlen(name), n, ttl_ms, &x);                    \
    return made(c, rc, x);                                                  \
  }
HL_NEW_N_TTL(hl_new_semaphore, hilock_semaphore, hilock_semaphore_new)
HL_NEW_N_TTL(hl_new_latch, hilock_latch, hilock_latch_new)
HL_NEW_N_TTL(hl_new_barrier, hilock_barrier, hilock_barrier_new)
HL_NEW_N_TTL(hl_new_double_barrier, hilock_double_barrier,
             hilock_double_barrier_new)

hilock_segmented_lock *hl_new_seg(hilock_client *c, const char *name,
                                  size_t segments, int64_t ttl_ms) {
  hilock_segmented_lock *x = NULL;
  int rc = hilock_segmented_lock_new(c, name, strlen(name), segments, ttl_ms,
                                     &x);
  return made(c, rc, x);
}

hilock_multi_lock *hl_new_multi(hilock_client *c, const char *const *names,
                                size_t n, int64_t ttl_ms) {
  hilock_multi_lock *x = NULL;
  int rc = hilock_multi_lock_new(c, names, n, ttl_ms, &x);
  return made(c, rc, x);
}

/* A constructor on the hold (hl_new_fn) of one family. */
#define HL_NEW_HOLD(fn, type, ctor_call)                                    \
  int fn(hilock_client *c, const char *name, size_t len, int64_t ttl_ms,    \
         hilock_hold **out) {                                               \
    type *x = out != NULL ? (type *)*out : NULL;                            \
    int rc = ctor_call;                                                     \
    if (out != NULL) *out = (hilock_hold *)x;                               \
    return rc;                                                              \
  }

#define X_OUT (out != NULL ? &x : NULL)
HL_NEW_HOLD(hl_lock_new_hold, hilock_lock,
            hilock_lock_new(c, name, len, ttl_ms, X_OUT))
HL_NEW_HOLD(hl_lease_new_hold, hilock_lock,
            hilock_lock_new_lease(c, name, len, ttl_ms, X_OUT))
HL_NEW_HOLD(hl_simple_new_hold, hilock_lock,
            ((void)ttl_ms, hilock_lock_new_simple(c, name, len, X_OUT)))
HL_NEW_HOLD(hl_rlock_new_hold, hilock_rlock,
            hilock_rlock_new(c, name, len, ttl_ms, X_OUT))
HL_NEW_HOLD(hl_rwlock_new_hold, hilock_rwlock,
            hilock_rwlock_new(c, name, len, ttl_ms, X_OUT))
HL_NEW_HOLD(hl_fair_new_hold, hilock_fair_lock,
            hilock_fair_lock_new(c, name, len, ttl_ms, X_OUT))
HL_NEW_HOLD(hl_seq_new_hold, hilock_sequential_lock,
            hilock_sequential_lock_new(c, name, len, ttl_ms, X_OUT))
#undef X_OUT

#define HL_MAKE(fn, new_call)                                               \
  hilock_hold *fn(hilock_client *c, const char *name, int64_t ttl_ms) {     \
    return HILOCK_HOLD(new_call);                                           \
  }
HL_MAKE(hl_make_lock, hl_new_lock(c, name, ttl_ms))
HL_MAKE(hl_make_simple, ((void)ttl_ms, hl_new_simple(c, name)))
HL_MAKE(hl_make_rlock, hl_new_rlock(c, name, ttl_ms))
HL_MAKE(hl_make_rwlock, hl_new_rwlock(c, name, ttl_ms))
HL_MAKE(hl_make_fair, hl_new_fair(c, name, ttl_ms))
HL_MAKE(hl_make_seq, hl_new_seq(c, name, ttl_ms))
#undef HL_MAKE

void hl_assert_bad_names_refused(hilock_client *c, hl_new_fn new_fn) {
  static char big[HILOCK_NAME_MAX + 1];
  char sentinel, too_long[16];
  const struct {
    const char *name;
    size_t len;
    const char *why; /* in the client's message */
  } bad[] = {{NULL, 3, "NULL"},
             {"", 0, "empty"},
             {big, sizeof(big), too_long},
             {"}x", 2, "'}'"},
             {"}", 1, "'}'"}};
  memset(big, 'n', sizeof(big));
  snprintf(too_long, sizeof(too_long), "%d", HILOCK_NAME_MAX + 1);
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    hilock_hold *h = (hilock_hold *)&sentinel; /* must be reset to NULL */
    assert_int_equal(new_fn(c, bad[i].name, bad[i].len, 1000, &h),
                     HILOCK_EINVAL);
    assert_int_equal(hilock_client_errcode(c), HILOCK_EINVAL);
    assert_substr(hilock_client_errmsg(c), bad[i].why);
    assert_null(h);
  }
}

/* A counted constructor on the hold (hl_new_counted_fn). */
#define HL_NEW_COUNTED(fn, type, ctor)                                      \
  int fn(hilock_client *c, const char *name, size_t len, int64_t n,         \
         int64_t ttl_ms, hilock_hold **out) {                               \
    type *x = out != NULL ? (type *)*out : NULL;                            \
    int rc = ctor(c, name, len, n, ttl_ms, out != NULL ? &x : NULL);        \
    if (out != NULL) *out = (hilock_hold *)x;                               \
    return rc;                                                              \
  }
HL_NEW_COUNTED(hl_latch_new_hold, hilock_latch, hilock_latch_new)
HL_NEW_COUNTED(hl_barrier_new_hold, hilock_barrier, hilock_barrier_new)
HL_NEW_COUNTED(hl_double_barrier_new_hold, hilock_double_barrier,
               hilock_double_barrier_new)

void hl_assert_counted_args_refused(hilock_client *c, hl_new_counted_fn *new_fn,
                                    int64_t n_max, const char *n_why) {
  static char big[HILOCK_NAME_MAX + 1];
  const struct {
    hilock_client *c;
    const char *name;
    size_t len;
    int64_t n, ttl_ms;
  } bad[] = {{NULL, "n", 1, 2, 1000},      {c, "", 0, 2, 1000},
             {c, NULL, 1, 2, 1000},        {c, big, sizeof(big), 2, 1000},
             {c, "n", 1, 0, 1000},         {c, "n", 1, -3, 1000},
             {c, "n", 1, n_max + 1, 1000}, {c, "n", 1, 2, 0},
             {c, "n", 1, 2, -1}};
  memset(big, 'n', sizeof(big));
  assert_int_equal(new_fn(c, "n", 1, 2, 1000, NULL), HILOCK_EINVAL);
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    hilock_hold *h = NULL;
    assert_int_equal(new_fn(bad[i].c, bad[i].name, bad[i].len, bad[i].n,
                            bad[i].ttl_ms, &h),
                     HILOCK_EINVAL);
    if (bad[i].n == 0) assert_substr(hilock_client_errmsg(c), n_why);
    assert_null(h);
  }
}

void hl_holds_free_n(hilock_hold *const *h, size_t n) {
  for (size_t i = 0; i < n; i++) hilock_hold_free(h[i]);
}

void hl_count_call(void *counter) {
  atomic_fetch_add((atomic_int *)counter, 1);
}

int hl_is_lower_hex(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
      return 0;
  return s[n] == '\0';
}

/* ## The verbs of each family, on the hold -------------------------------- */

#define VERBS(T, type, try_fn, acquire_fn, release_fn)                     \
  static int T##_try(hilock_hold *h) { return try_fn((type *)h); }         \
  static int T##_acquire(hilock_hold *h, int64_t wait_ms) {                \
    return acquire_fn((type *)h, wait_ms);                                 \
  }                                                                        \
  static int T##_release(hilock_hold *h) { return release_fn((type *)h); }

VERBS(write, hilock_rwlock, hilock_rwlock_write_try_acquire,
      hilock_rwlock_write_acquire, hilock_rwlock_write_release)
VERBS(read, hilock_rwlock, hilock_rwlock_read_try_acquire,
      hilock_rwlock_read_acquire, hilock_rwlock_read_release)

/* The read side's own state: the hold is the write side's. */
static int read_set_auto_renew(hilock_hold *h, int on, int64_t max_hold_ms,
                               hilock_lost_fn fn, void *arg) {
  return hilock_rwlock_read_set_auto_renew((hilock_rwlock *)h, on,
                                           max_hold_ms, fn, arg);
}
static int read_owned(hilock_hold *h, int *owned) {
  int64_t n = 0;
  int rc = hilock_rwlock_read_hold_count((hilock_rwlock *)h, &n);
  *owned = n > 0;
  return rc;
}
static int read_lost(hilock_hold *h) {
  return hilock_rwlock_read_lost((hilock_rwlock *)h);
}
static int64_t read_validity_ms(hilock_hold *h) {
  return hilock_rwlock_read_validity_ms((hilock_rwlock *)h);
}

#define SIDE(T) .try_acquire = T##_try, .acquire = T##_acquire, \
                .release = T##_release
/* The other families' verbs are the hold's (a verb a family lacks is left
 * out: the suites check it is HILOCK_ENOTSUP). */
#define HOLD .try_acquire = hilock_hold_try_acquire, \
             .acquire = hilock_hold_acquire, .release = hilock_hold_release
#define TTL .extend = hilock_hold_extend, .renew = hilock_hold_renew

const hl_verbs hl_lock_verbs = {HOLD, TTL};
/* No TTL: extend and renew are HILOCK_ENOTSUP (test_lock). */
const hl_verbs hl_simple_verbs = {HOLD};
const hl_verbs hl_rlock_verbs = {HOLD};
const hl_verbs hl_write_verbs = {SIDE(write)};
const hl_verbs hl_read_verbs = {SIDE(read),
                                .set_auto_renew = read_set_auto_renew,
                                .owned = read_owned,
                                .lost = read_lost,
                                .validity_ms = read_validity_ms};
const hl_verbs hl_sem_verbs = {HOLD, .renew = hilock_hold_renew};
const hl_verbs hl_fair_verbs = {HOLD, TTL};
const hl_verbs hl_multi_verbs = {HOLD, TTL};
const hl_verbs hl_seq_verbs = {HOLD, TTL};
const hl_verbs hl_seg_verbs = {HOLD, TTL};
const hl_verbs hl_redlock_verbs = {HOLD, TTL};

/* ## Server statistics ----------------------------------------------------- */

long long hl_info_field(redisContext *c, const char *section,
                        const char *field) {
  redisReply *r = hl_redis(c, "INFO %s", section);
  size_t flen = strlen(field);
  long long v = -1;
  const char *p;
  if (r->type != REDIS_REPLY_STRING) {
    print_error("INFO %s: reply type %d\n", section, r->type);
    freeReplyObject(r);
    fail();
  }
  for (p = r->str; p != NULL && *p != '\0';) {
    if (strncmp(p, field, flen) == 0 && p[flen] == ':') {
      v = strtoll(p + flen + 1, NULL, 10);
      break;
    }
    p = strchr(p, '\n');
    if (p != NULL) p++;
  }
  freeReplyObject(r);
  return v;
}

int hl_wait_info_field(redisContext *c, const char *section, const char *field,
                       long long value, int64_t timeout_ms) {
  int64_t deadline = hl_now_ms() + timeout_ms;
  for (;;) {
    if (hl_info_field(c, section, field) == value) return 1;
    if (hl_now_ms() >= deadline) return 0;
    hl_sleep_ms(5);
  }
}

long long hl_cmdstat_calls(redisContext *c, const char *cmd) {
  char field[64];
  redisReply *r = hl_redis(c, "INFO commandstats");
  long long v = 0;
  const char *p;
  snprintf(field, sizeof(field), "cmdstat_%s:calls=", cmd);
  if (r->type == REDIS_REPLY_STRING) {
    p = strstr(r->str, field);
    if (p != NULL) v = strtoll(p + strlen(field), NULL, 10);
  }
  freeReplyObject(r);
  return v;
}

/* ## Child processes ------------------------------------------------------- */

pid_t hl_fork_run(int (*fn)(void *arg), void *arg) {
  pid_t pid;
  fflush(NULL);
  pid = fork();
  if (pid == 0) {
    /* Never outlive a test program that failed before reaping us. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#ifdef VALGRIND_CLO_CHANGE
    /* The child leaves with _exit, holding the parent's heap: leak checks
     * mean nothing here (memory errors are still reported). */
    VALGRIND_CLO_CHANGE("--leak-check=no");
#endif
    _exit(fn(arg) & 0xff);
  }
  if (pid < 0) print_error("fork: %s\n", strerror(errno));
  return pid;
}

int hl_wait_child(pid_t pid, int64_t timeout_ms) {
  int64_t deadline = hl_now_ms() + timeout_ms;
  int status;
  for (;;) {
    pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid) break;
    if (got < 0 && errno != EINTR) return -1;
    if (hl_now_ms() >= deadline) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return -1;
    }
    hl_sleep_ms(2);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

pid_t hl_fork_ready(int (*fn)(void *arg), void *arg, int *fd, void *buf,
                    size_t len) {
  struct pollfd pf;
  int p[2];
  pid_t pid;
  assert_int_equal(pipe(p), 0);
  *fd = p[1];
  pid = hl_fork_run(fn, arg);
  close(p[1]);
  if (pid < 0) close(p[0]);
  assert_true(pid > 0);
  pf.fd = p[0];
  pf.events = POLLIN;
  if (poll(&pf, 1, 5000) != 1 || read(p[0], buf, len) != (ssize_t)len) {
    close(p[0]);
    print_error("child %d never reported (status %d)\n", (int)pid,
                hl_wait_child(pid, 0));
    fail();
  }
  close(p[0]);
  return pid;
}

hilock_client *hl_child_client(const char *url) {
  hilock_options o = hl_test_options();
  hilock_client *c = NULL;
  if (hilock_client_new(url, &o, &c) == HILOCK_OK) return c;
  fprintf(stderr, "child %d: client: %s\n", (int)getpid(),
          hilock_client_errmsg(c));
  hilock_client_free(c);
  return NULL;
}

int hl_run_with_client(void *with_client) {
  const hl_with_client *w = with_client;
  hilock_client *c = hl_child_client(w->url);
  if (c == NULL) return 2;
  return w->fn(c, w->arg);
}

typedef struct freed {
  hilock_client *c;
  hilock_hold *h;
} freed;

static int free_client(void *arg) {
  freed *f = arg;
  hilock_hold_free(f->h);
  hilock_client_free(f->c);
  return 0;
}

int hl_fork_free_client(hilock_client *c, hilock_hold *h, int64_t timeout_ms) {
  freed f = {c, h};
  pid_t pid = hl_fork_run(free_client, &f);
  assert_true(pid > 0);
  return hl_wait_child(pid, timeout_ms);
}

static hl_fixture hl_fx;

int hl_group_setup(void **state) {
  *state = &hl_fx;
  return hl_server_start(&hl_fx.server, NULL);
}

int hl_group_teardown(void **state) {
  (void)state;
  hl_server_destroy(&hl_fx.server);
  return 0;
}

int hl_clients_new(hilock_client **c, int n, const char *url) {
  hilock_options o = hl_test_options();
  for (int i = 0; i < n; i++) {
    if (hilock_client_new(url, &o, &c[i]) != HILOCK_OK) {
      print_error("client: %s\n", hilock_client_errmsg(c[i]));
      return -1;
    }
  }
  return 0;
}

void hl_clients_free(hilock_client **c, int n) {
  for (int i = 0; i < n; i++) {
    hilock_client_free(c[i]);
    c[i] = NULL;
  }
}

int hl_setup(void **state) {
  hl_fixture *f = *state;
  f->redis = hl_redis_connect(&f->server);
  hl_redis_ok(f->redis, "FLUSHALL");
  return hl_clients_new(&f->client, 1, f->server.url);
}

int hl_teardown(void **state) {
  hl_fixture *f = *state;
  hl_clients_free(&f->client, 1);
  redisFree(f->redis);
  f->redis = NULL;
  return 0;
}

long long hl_errorstat(redisContext *c, const char *field) {
  redisReply *rep = hl_redis(c, "INFO errorstats");
  char want[64];
  const char *p;
  long long v = 0;
  snprintf(want, sizeof(want), "%s:count=", field);
  if (rep->type == REDIS_REPLY_STRING && (p = strstr(rep->str, want)) != NULL)
    v = strtoll(p + strlen(want), NULL, 10);
  freeReplyObject(rep);
  return v;
}

/* ## Histories of contending processes -------------------------------------- */

typedef struct endpoint {
  int64_t at;
  int start;  /* 1: a span begins, 0: it ends */
  int shared;
} endpoint;

/* By position; at one position ends come first (spans are half-open). */
static int by_position(const void *a, const void *b) {
  const endpoint *x = a, *y = b;
  if (x->at != y->at) return x->at < y->at ? -1 : 1;
  return x->start - y->start;
}

int hl_history_check(const hl_span *s, size_t n, int limit,
                     int *shared_pairs) {
  endpoint *e = calloc(2 * n + 1, sizeof(*e));
  size_t m = 0;
  int bad = 0, pairs = 0, inside = 0, exclusive = 0;
  assert_non_null(e);
  for (size_t i = 0; i < n; i++) {
    if (s[i].end <= s[i].start) continue;
    e[m++] = (endpoint){s[i].start, 1, s[i].shared};
    e[m++] = (endpoint){s[i].end, 0, s[i].shared};
  }
  qsort(e, m, sizeof(*e), by_position);
  for (size_t i = 0; i < m; i++) {
    if (!e[i].start) {
      inside--;
      if (!e[i].shared) exclusive--;
      continue;
    }
    if ((!e[i].shared && inside > 0) || exclusive > 0 ||
        (limit > 0 && inside >= limit))
      bad++;
    if (e[i].shared) pairs += inside - exclusive;
    inside++;
    if (!e[i].shared) exclusive++;
  }
  free(e);
  if (shared_pairs != NULL) *shared_pairs = pairs;
  return bad;
}

hl_history *hl_history_new(int max) {
  size_t size = sizeof(hl_history) + (size_t)max * sizeof(hl_span);
  hl_history *h = mmap(NULL, size, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (h == MAP_FAILED) {
    print_error("mmap of a history: %s\n", strerror(errno));
    fail();
  }
  h->seq = 0;
  h->n = 0;
  h->max = max;
  return h;
}

void hl_history_free(hl_history *h) {
  if (h != NULL)
    munmap(h, sizeof(hl_history) + (size_t)h->max * sizeof(hl_span));
}

int64_t hl_history_tick(hl_history *h) {
  return __atomic_add_fetch(&h->seq, 1, __ATOMIC_SEQ_CST);
}

void hl_history_add(hl_history *h, int shared, int64_t start, int64_t end) {
  int i = __atomic_fetch_add(&h->n, 1, __ATOMIC_SEQ_CST);
  if (i < h->max) h->span[i] = (hl_span){(int)getpid(), shared, start, end};
}

int hl_history_len(const hl_history *h) {
  int n = __atomic_load_n(&h->n, __ATOMIC_SEQ_CST);
  return n < h->max ? n : h->max;
}

/* ## Queue-style locks (fair, sequential) ------------------------------------ */

long long hl_redis_get_int(redisContext *c, const char *key) {
  char *v = hl_redis_get(c, key, strlen(key));
  long long n = v ? atoll(v) : 0;
  free(v);
  return n;
}

long long hl_server_time_ms(redisContext *c) {
  redisReply *r = hl_redis(c, "TIME");
  long long ms;
  assert_int_equal(r->type, REDIS_REPLY_ARRAY);
  ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
  freeReplyObject(r);
  return ms;
}

long long hl_keys_count(redisContext *c, const char *fmt, ...) {
  char pattern[512];
  va_list ap;
  redisReply *r;
  long long n;
  va_start(ap, fmt);
  vsnprintf(pattern, sizeof(pattern), fmt, ap);
  va_end(ap);
  r = hl_redis(c, "KEYS %s", pattern);
  n = r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;
  freeReplyObject(r);
  return n;
}

int hl_wait_zcard(redisContext *c, const char *key, long long n,
                  int64_t timeout_ms) {
  int64_t deadline = hl_now_ms() + timeout_ms;
  long long got;
  while ((got = hl_redis_int(c, "ZCARD %s", key)) != n) {
    if (hl_now_ms() > deadline) {
      print_error("%s never reached %lld entries (now %lld)\n", key, n, got);
      return 0;
    }
    hl_sleep_ms(2);
  }
  return 1;
}

redisReply *hl_run_script(hilock_client *c, const void *script,
                          const char *name, const char *const *roles,
                          int nkeys, const char *const *args, int nargs) {
  char keys[8][128];
  const char *kp[8], *ap[8];
  size_t kl[8], al[8];
  hilock__err e;
  redisReply *r = NULL;
  assert_true(nkeys <= 8 && nargs <= 8);
  for (int i = 0; i < nkeys; i++) {
    kl[i] = (size_t)snprintf(keys[i], sizeof(keys[i]), "hilock:{%s}:%s", name,
                             roles[i]);
    kp[i] = keys[i];
  }
  for (int i = 0; i < nargs; i++) {
    ap[i] = args[i];
    al[i] = strlen(args[i]);
  }
  hilock__clear_err(&e);
  assert_hl_ok(hilock__script_run(c, &e, script, nkeys, kp, kl, nargs, ap, al,
                                  &r),
               e.msg);
  assert_non_null(r);
  assert_int_equal(r->type, REDIS_REPLY_ARRAY);
  return r;
}

void hl_assert_reply_ints(redisReply *r, const long long *want, size_t n,
                          const char *file, int line) {
  int bad = r->type != REDIS_REPLY_ARRAY || r->elements < n;
  for (size_t i = 0; !bad && i < n; i++)
    bad = want[i] != HL_ANY && (r->element[i]->type != REDIS_REPLY_INTEGER ||
                                r->element[i]->integer != want[i]);
  if (bad) {
    print_error("%s:%d: reply of %zu elements, expected:", file, line,
                r->type == REDIS_REPLY_ARRAY ? r->elements : 0);
    for (size_t i = 0; i < n; i++)
      if (want[i] == HL_ANY)
        print_error(" _");
      else
        print_error(" %lld", want[i]);
    print_error("\n  got:");
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
      print_error(" %lld", r->element[i]->type == REDIS_REPLY_INTEGER
                               ? r->element[i]->integer
                               : -1LL);
    print_error("\n");
    freeReplyObject(r);
    fail();
  }
  freeReplyObject(r);
}

int hl_flag_interrupt(void *arg) {
  return __atomic_load_n((int *)arg, __ATOMIC_ACQUIRE);
}

typedef struct raise_arg {
  int *flag;
  int64_t delay_ms;
} raise_arg;

static void *raise_flag(void *arg) {
  raise_arg a = *(raise_arg *)arg;
  free(arg);
  hl_sleep_ms(a.delay_ms);
  __atomic_store_n(a.flag, 1, __ATOMIC_RELEASE);
  return NULL;
}

pthread_t hl_raise_flag_later(int *flag, int64_t delay_ms) {
  raise_arg *a = malloc(sizeof(*a));
  pthread_t t;
  assert_non_null(a);
  a->flag = flag;
  a->delay_ms = delay_ms;
  assert_int_equal(pthread_create(&t, NULL, raise_flag, a), 0);
  return t;
}

static void *waiter_main(void *arg) {
  hl_waiter *w = arg;
  w->t_start = hl_now_ms();
  w->rc = w->acquire(w->lock, w->wait_ms ? w->wait_ms : 20000);
  __atomic_store_n(&w->t_end, hl_now_ms(), __ATOMIC_RELEASE);
  if (w->rc != HILOCK_OK) return NULL;
  if (w->grant_counter != NULL)
    w->grant_pos = __atomic_fetch_add(w->grant_counter, 1, __ATOMIC_ACQ_REL);
  w->fence = hilock_hold_fence(w->lock);
  w->number_granted = w->number != NULL ? w->number(w->lock) : 0;
  if (w->release_now != NULL)
    while (!__atomic_load_n(w->release_now, __ATOMIC_ACQUIRE)) hl_sleep_ms(1);
  hl_sleep_ms(w->hold_ms);
  if (w->release != NULL) w->release_rc = w->release(w->lock);
  return NULL;
}

pthread_t hl_waiter_start(hl_waiter *w) {
  w->rc = w->release_rc = -100;
  /* Set here too, so the test may read it as soon as this returns. */
  w->t_start = hl_now_ms();
  w->t_end = 0;
  assert_int_equal(pthread_create(&w->thread, NULL, waiter_main, w), 0);
  return w->thread;
}

void hl_waiter_join(hl_waiter *w) { pthread_join(w->thread, NULL); }

void hl_waiter_run(hl_waiter *w, hilock_hold *h, const hl_verbs *v,
                   int64_t wait_ms, int release) {
  memset(w, 0, sizeof(*w));
  w->lock = h;
  w->acquire = v->acquire;
  w->release = release ? v->release : NULL;
  w->wait_ms = wait_ms;
  hl_waiter_start(w);
}

int64_t hl_release_and_join(hl_waiter *w, hilock_hold *holder,
                            const hl_verbs *v) {
  int64_t released = hl_now_ms();
  assert_hl_ok(v->release(holder), hilock_hold_errmsg(holder));
  hl_waiter_join(w);
  return w->t_end - released;
}

int64_t hl_waiter_done_at(hl_waiter *w) {
  return __atomic_load_n(&w->t_end, __ATOMIC_ACQUIRE);
}

hilock_async_done hl_async_next(hilock_async *a, int64_t timeout_ms) {
  hilock_async_done d;
  for (int64_t end = hl_now_ms() + timeout_ms; hl_now_ms() < end;) {
    struct pollfd p = {hilock_async_fd(a), POLLIN, 0};
    if (hilock_async_take(a, &d, 1) == 1) return d;
    (void)poll(&p, 1, 100);
  }
  fail_msg("no operation finished in %lld ms", (long long)timeout_ms);
  return d;
}

typedef struct holder {
  hl_make_fn take;
  void *arg;
  int fd; /* write end: a byte once it holds */
} holder;

static int hold_until_killed(hilock_client *c, void *p) {
  holder *k = p;
  hilock_hold *h = NULL;
  int rc = k->take(c, k->arg, &h);
  if (rc != HILOCK_OK) {
    fprintf(stderr, "holder %d: %s: %s\n", (int)getpid(), hilock_err_name(rc),
            h ? hilock_hold_errmsg(h) : "");
    return 2;
  }
  if (write(k->fd, "h", 1) != 1) return 3;
  for (;;) pause();
}

pid_t hl_fork_holder(const char *url, hl_make_fn take, void *arg) {
  holder k = {take, arg, -1};
  hl_with_client w = {url, hold_until_killed, &k};
  char byte;
  return hl_fork_ready(hl_run_with_client, &w, &k.fd, &byte, 1);
}

typedef struct contender {
  hl_make_fn make;
  void *arg;
  int (*acquire)(hilock_hold *h, int64_t wait_ms);
  int (*release)(hilock_hold *h);
  int64_t hold_ms;
} contender;

static int contend(hilock_client *c, void *p) {
  const contender *k = p;
  hilock_hold *h = NULL;
  int rc = k->make(c, k->arg, &h);
  if (rc == HILOCK_OK) rc = k->acquire(h, 20000);
  if (rc == HILOCK_OK) {
    if (k->hold_ms < 0)
      for (;;) hl_sleep_ms(1000);
    hl_sleep_ms(k->hold_ms);
    rc = k->release(h);
  }
  if (rc != HILOCK_OK)
    fprintf(stderr, "contender %d: %s: %s\n", (int)getpid(),
            hilock_err_name(rc), h ? hilock_hold_errmsg(h) : "");
  return rc == HILOCK_OK ? 0 : rc == HILOCK_BUSY ? 1 : 2;
}

pid_t hl_fork_contender(const char *url, hl_make_fn make, void *arg,
                        int (*acquire)(hilock_hold *h, int64_t wait_ms),
                        int (*release)(hilock_hold *h), int64_t hold_ms) {
  contender k = {make, arg, acquire, release, hold_ms};
  hl_with_client w = {url, contend, &k};
  pid_t pid = hl_fork_run(hl_run_with_client, &w); /* the child's copy */
  assert_true(pid > 0);
  return pid;
}
