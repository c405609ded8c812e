/* Test helpers: a private redis-server per test program, direct hiredis
 * access for checking keys, clocks, and status-code assertions. */
#ifndef HILOCK_TEST_UTIL_H
#define HILOCK_TEST_UTIL_H

#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "hilock/hilock.h"

/* ## Status assertions ---------------------------------------------------
 * On failure they print both codes by name, the status text and the
 * handle's last message (evaluated only on failure). */

#define assert_hl_rc(rc, expected, handle_errmsg)                          \
  do {                                                                     \
    int hl_rc_ = (rc);                                                     \
    int hl_exp_ = (expected);                                              \
    if (hl_rc_ != hl_exp_) {                                               \
      print_error("%s:%d: expected HILOCK_%s, got HILOCK_%s (%d: %s): %s\n", \
                  __FILE__, __LINE__, hilock_err_name(hl_exp_),            \
                  hilock_err_name(hl_rc_), hl_rc_, hilock_strerror(hl_rc_), \
                  (const char *)(handle_errmsg));                          \
      fail();                                                              \
    }                                                                      \
  } while (0)

#define assert_hl_ok(rc, handle_errmsg) \
  assert_hl_rc((rc), HILOCK_OK, (handle_errmsg))

/* Signed range check (cmocka's assert_in_range is unsigned). */
#define assert_i64_between(value, lo, hi)                                   \
  do {                                                                      \
    int64_t hl_v_ = (int64_t)(value);                                       \
    int64_t hl_lo_ = (int64_t)(lo), hl_hi_ = (int64_t)(hi);                 \
    if (hl_v_ < hl_lo_ || hl_v_ > hl_hi_) {                                 \
      print_error("%s:%d: %s = %lld, expected %lld..%lld\n", __FILE__,      \
                  __LINE__, #value, (long long)hl_v_, (long long)hl_lo_,    \
                  (long long)hl_hi_);                                       \
      fail();                                                               \
    }                                                                       \
  } while (0)

/* A parsed host and port (a cluster seed, a sentinel). */
#define assert_host_port(endpoint, want_host, want_port)                   \
  do {                                                                      \
    assert_string_equal((endpoint).host, (want_host));                      \
    assert_int_equal((endpoint).port, (want_port));                         \
  } while (0)

/* A parsed list of hosts and ports (a cluster's seeds, the sentinels) of
 * count entries: exactly those given as "host:port" (the port after the
 * last ':', so "::1:7001" is host ::1). */
#define assert_host_ports(list, count, ...)                                 \
  do {                                                                      \
    const char *hl_want_[] = {__VA_ARGS__};                                 \
    size_t hl_n_ = sizeof(hl_want_) / sizeof(hl_want_[0]);                  \
    assert_int_equal((count), hl_n_);                                       \
    for (size_t hl_i_ = 0; hl_i_ < hl_n_; hl_i_++) {                        \
      const char *hl_w_ = hl_want_[hl_i_], *hl_c_ = strrchr(hl_w_, ':');    \
      assert_non_null(hl_c_);                                               \
      assert_int_equal(strlen((list)[hl_i_].host), (size_t)(hl_c_ - hl_w_)); \
      assert_memory_equal((list)[hl_i_].host, hl_w_, hl_c_ - hl_w_);        \
      assert_int_equal((list)[hl_i_].port, atoi(hl_c_ + 1));                \
    }                                                                       \
  } while (0)

#define assert_substr(haystack, needle)                                     \
  do {                                                                      \
    const char *hl_h_ = (haystack), *hl_n_ = (needle);                      \
    if (hl_h_ == NULL || strstr(hl_h_, hl_n_) == NULL) {                    \
      print_error("%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__,      \
                  __LINE__, hl_h_ ? hl_h_ : "(null)", hl_n_);               \
      fail();                                                               \
    }                                                                       \
  } while (0)

/* In a forked child (which must not fail into cmocka): report a failed
 * check on stderr and return a nonzero status from the child's function. */
#define HL_CHILD_CHECK(cond)                                                \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "child %d: %s:%d: check failed: %s\n", (int)getpid(), \
              __FILE__, __LINE__, #cond);                                   \
      return 1 + __LINE__ % 200;                                            \
    }                                                                       \
  } while (0)

/* ## A private redis-server ----------------------------------------------- */

#define HL_SERVER_MAX_ARGS 16

typedef struct hl_server {
  pid_t pid;              /* 0 when not running */
  int port;
  char dir[192];          /* private mkdtemp directory */
  char sock[256];         /* unix socket path, "" unless requested */
  char url[64];           /* redis://127.0.0.1:<port> */
  const char *password;   /* requirepass, or NULL */
  const char *extra[HL_SERVER_MAX_ARGS];
  int nextra;
} hl_server;

typedef struct hl_server_opts {
  int unix_socket;          /* also listen on <dir>/r.sock */
  const char *password;     /* --requirepass */
  const char *const *extra; /* more arguments, NULL-terminated; may be NULL */
  int port_max;             /* 0: any free port; else at most this one */
} hl_server_opts;

/* Start a server on a free loopback port and wait until it answers PING.
 * opts may be NULL. Returns 0, or -1 after printing why. */
int hl_server_start(hl_server *s, const hl_server_opts *opts);
/* SIGKILL and reap the server; the directory and port are kept. */
void hl_server_stop(hl_server *s);
/* Start again on the same port and directory (after hl_server_stop). */
int hl_server_restart(hl_server *s);
/* Stop the server and remove its directory. */
void hl_server_destroy(hl_server *s);
/* n servers (a Redlock's nodes), each on its own port and directory; on
 * failure the ones already started are destroyed and -1 is returned. */
int hl_servers_start(hl_server *s, int n, const hl_server_opts *opts);
void hl_servers_destroy(hl_server *s, int n);

/* A free TCP port on 127.0.0.1 (bound, read back, closed), or -1. */
int hl_free_port(void);
/* The server binary: $HILOCK_REDIS_SERVER (such as valkey-server), else
 * redis-server (looked up on PATH). */
const char *hl_server_binary(void);

/* ## Direct Redis access (hiredis, authenticated when needed) ------------- */

redisContext *hl_redis_connect(const hl_server *s);
/* Run a command (hiredis format); fails the test on a NULL reply. */
redisReply *hl_redis(redisContext *c, const char *fmt, ...);
/* Run a command that must return an integer. */
long long hl_redis_int(redisContext *c, const char *fmt, ...);
/* Run a command that must not return an error. */
void hl_redis_ok(redisContext *c, const char *fmt, ...);
/* GET of a binary key: malloc'd value (NUL-terminated), or NULL if absent. */
char *hl_redis_get(redisContext *c, const char *key, size_t keylen);
/* PTTL of a binary key. */
long long hl_redis_pttl(redisContext *c, const char *key, size_t keylen);
/* EXISTS of a binary key. */
int hl_redis_exists(redisContext *c, const char *key, size_t keylen);

/* The key of a hold (hilock_hold_key), read directly: its value (malloc'd,
 * NULL if absent), PTTL and EXISTS. */
char *hl_hold_value(redisContext *c, const hilock_hold *h);
long long hl_hold_pttl(redisContext *c, const hilock_hold *h);
int hl_hold_exists(redisContext *c, const hilock_hold *h);
/* The hold's key has the value want; has the hold's token (a lock's
 * holder). */
void hl_assert_hold_value(redisContext *c, const hilock_hold *h,
                          const char *want);
void hl_assert_holder(redisContext *c, const hilock_hold *h);

/* ## Clients and handles ------------------------------------------------------
 * Each fails the test (with the client's message) unless it succeeds. */

/* A client on url with o (NULL: hl_test_options()). */
hilock_client *hl_client(const char *url, const hilock_options *o);
hilock_lock *hl_new_lock(hilock_client *c, const char *name, int64_t ttl_ms);
hilock_lock *hl_new_simple(hilock_client *c, const char *name);
hilock_rlock *hl_new_rlock(hilock_client *c, const char *name, int64_t ttl_ms);
hilock_rwlock *hl_new_rwlock(hilock_client *c, const char *name,
                             int64_t ttl_ms);
hilock_semaphore *hl_new_semaphore(hilock_client *c, const char *name,
                                   int64_t permits, int64_t ttl_ms);
hilock_latch *hl_new_latch(hilock_client *c, const char *name, int64_t count,
                           int64_t ttl_ms);
hilock_barrier *hl_new_barrier(hilock_client *c, const char *name,
                               int64_t parties, int64_t ttl_ms);
hilock_double_barrier *hl_new_double_barrier(hilock_client *c, const char *name,
                                             int64_t parties, int64_t ttl_ms);
hilock_fair_lock *hl_new_fair(hilock_client *c, const char *name,
                              int64_t ttl_ms);
hilock_sequential_lock *hl_new_seq(hilock_client *c, const char *name,
                                   int64_t ttl_ms);
hilock_segmented_lock *hl_new_seg(hilock_client *c, const char *name,
                                  size_t segments, int64_t ttl_ms);
hilock_multi_lock *hl_new_multi(hilock_client *c, const char *const *names,
                                size_t n, int64_t ttl_ms);

/* A named family's constructor on the hold: hilock_<family>_new(c, name,
 * len, ttl_ms, out) with *out passed in and out (NULL: none), so that a
 * test can see whether a refusal reset it. The simple lock has no TTL and
 * ignores ttl_ms. */
typedef int hl_new_hold_fn(hilock_client *c, const char *name, size_t len,
                           int64_t ttl_ms, hilock_hold **out);
typedef hl_new_hold_fn *hl_new_fn;
hl_new_hold_fn hl_lock_new_hold, hl_lease_new_hold, hl_simple_new_hold,
    hl_rlock_new_hold, hl_rwlock_new_hold, hl_fair_new_hold, hl_seq_new_hold;
/* The constructor refuses a bad name with HILOCK_EINVAL, says why in the
 * client's message and resets *out to NULL: a NULL name, an empty one,
 * one of HILOCK_NAME_MAX + 1 bytes, one that begins with '}'. */
void hl_assert_bad_names_refused(hilock_client *c, hl_new_fn new_fn);

/* A counted family's constructor on the hold: hilock_<family>_new(c, name,
 * len, n, ttl_ms, out), n its count (latch) or its parties (barriers). */
typedef int hl_new_counted_fn(hilock_client *c, const char *name, size_t len,
                              int64_t n, int64_t ttl_ms, hilock_hold **out);
hl_new_counted_fn hl_latch_new_hold, hl_barrier_new_hold,
    hl_double_barrier_new_hold;
/* The constructor refuses with HILOCK_EINVAL, and leaves *out NULL: no
 * client, no out, a NULL, empty or HILOCK_NAME_MAX + 1 byte name, n of 0
 * (n_why in the client's message), -3 or n_max + 1, ttl_ms of 0 or -1. */
void hl_assert_counted_args_refused(hilock_client *c, hl_new_counted_fn *new_fn,
                                    int64_t n_max, const char *n_why);

/* The hl_new_* above on the hold, for tables over families: a new handle
 * on name, made or the test fails. The simple lock ignores ttl_ms. */
typedef hilock_hold *hl_hold_maker(hilock_client *c, const char *name,
                                   int64_t ttl_ms);
hl_hold_maker hl_make_lock, hl_make_simple, hl_make_rlock, hl_make_rwlock,
    hl_make_fair, hl_make_seq;

/* hilock_hold_free of each hold given, in order (NULL is fine):
 * hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b)). */
#define hl_holds_free(...)                                                  \
  hl_holds_free_n((hilock_hold *const[]){__VA_ARGS__},                      \
                  sizeof((hilock_hold *const[]){__VA_ARGS__}) /             \
                      sizeof(hilock_hold *))
void hl_holds_free_n(hilock_hold *const *h, size_t n);

/* A loss callback (hilock_lost_fn) that counts its calls in the atomic_int
 * at counter. */
void hl_count_call(void *counter);

/* 1 if s is n lower-case hex digits and ends there. */
int hl_is_lower_hex(const char *s, size_t n);

/* ## The verbs of each family, on the hold ----------------------------------
 * A family's own calls wrapped to take the hold, so that one test can run
 * over several families. extend and renew are NULL where a table leaves
 * them out; the last four are NULL where the hold's own calls apply (all
 * but the read side of the read-write lock). */

typedef struct hl_verbs {
  int (*try_acquire)(hilock_hold *h);
  int (*acquire)(hilock_hold *h, int64_t wait_ms);
  int (*release)(hilock_hold *h);
  int (*extend)(hilock_hold *h, int64_t ms, int replace); /* NULL: none */
  int (*renew)(hilock_hold *h);                           /* NULL: none */
  int (*set_auto_renew)(hilock_hold *h, int on, int64_t max_hold_ms,
                        hilock_lost_fn fn, void *arg);
  int (*owned)(hilock_hold *h, int *owned);
  int (*lost)(hilock_hold *h);
  int64_t (*validity_ms)(hilock_hold *h);
} hl_verbs;

extern const hl_verbs hl_lock_verbs;   /* expiring lock and lease */
extern const hl_verbs hl_simple_verbs; /* no TTL: no extend or renew */
extern const hl_verbs hl_rlock_verbs;
extern const hl_verbs hl_write_verbs;  /* the read-write lock's two sides */
extern const hl_verbs hl_read_verbs;
extern const hl_verbs hl_sem_verbs;
extern const hl_verbs hl_fair_verbs;
extern const hl_verbs hl_multi_verbs;
extern const hl_verbs hl_seq_verbs;
extern const hl_verbs hl_seg_verbs;
extern const hl_verbs hl_redlock_verbs;

/* ## Clocks ---------------------------------------------------------------- */

int64_t hl_now_ms(void);
void hl_sleep_ms(int64_t ms);

/* Client options with short timeouts suited to tests; with
 * HILOCK_TEST_WAIT=blpop in the environment, waits block in BLPOP (one
 * connection per waiter) instead of the shared waiting. */
hilock_options hl_test_options(void);
/* 1 if this run waits in BLPOP (HILOCK_TEST_WAIT=blpop). */
int hl_blpop_mode(void);
/* HILOCK_TEST_WAIT=hub: no direct waits (every waiter in the shared waiting). */
int hl_hub_mode(void);
/* The command that takes a lone waiter's wake-up off the list: BLPOP (a
 * direct wait, or blpop mode), or LPOP in the shared waiting (hub mode). */
const char *hl_wake_cmd(void);
/* Threads of this process asleep in a wait for a lock now: blocked
 * clients on the server in BLPOP mode, the clients' own count otherwise. */
long long hl_waiters(redisContext *c);
/* Wait until n clients subscribe to channel (a wake list's name: some
 * thread of theirs waits on it, in another process too), or in BLPOP mode
 * until n clients are blocked; 1 if it got there, 0 otherwise. */
int hl_wait_subscribed(redisContext *c, const char *channel, long long n,
                       int64_t timeout_ms);
/* Wait until hl_waiters is n (1) or timeout_ms passes (0). */
int hl_wait_waiters(redisContext *c, long long n, int64_t timeout_ms);

/* ## Server statistics ------------------------------------------------------ */

/* A numeric field of INFO <section> ("blocked_clients" in "clients"), or -1
 * if the field is missing. */
long long hl_info_field(redisContext *c, const char *section,
                        const char *field);
/* count= of an INFO errorstats line (e.g. "errorstat_MOVED"), 0 if
 * absent. */
long long hl_errorstat(redisContext *c, const char *field);
/* Poll INFO until field == value or timeout_ms passes; returns 1 if it got
 * there, 0 otherwise. */
int hl_wait_info_field(redisContext *c, const char *section, const char *field,
                       long long value, int64_t timeout_ms);
/* Calls of one command since the last CONFIG RESETSTAT, from INFO
 * commandstats (cmd in lower case, e.g. "evalsha"); 0 if never called. */
long long hl_cmdstat_calls(redisContext *c, const char *cmd);

/* ## Child processes --------------------------------------------------------
 * A forked child must leave with _exit (never exit or return into cmocka:
 * the atexit handlers would kill the parent's servers). */

/* Fork after flushing stdio; in the child runs fn(arg) and _exits with its
 * return value (0..255). Returns the child's pid, or -1. */
pid_t hl_fork_run(int (*fn)(void *arg), void *arg);
/* Wait up to timeout_ms for the child: its exit status (0..255), or -1 if
 * it did not finish in time (it is then killed and reaped), or 128 + signal
 * if a signal ended it. */
int hl_wait_child(pid_t pid, int64_t timeout_ms);
/* hl_fork_run for a child that reports when it is ready: *fd (a field of
 * arg) is set to a pipe's write end before the fork, and the child writes
 * len bytes to it. Reads them into buf, waiting up to 5 s; fails the test
 * (with the child's status) if they do not come. */
pid_t hl_fork_ready(int (*fn)(void *arg), void *arg, int *fd, void *buf,
                    size_t len);
/* In a child: a client of its own on url (hl_test_options()), or NULL
 * after saying why on stderr. */
hilock_client *hl_child_client(const char *url);
/* A child's work with a client of its own, made in the child on url:
 * hl_run_with_client(w) returns w->fn(c, w->arg), or 2 (after saying why)
 * if there is no client. The client is left to the child's exit: freeing
 * it would release what the child still holds. Give it to hl_fork_run or
 * hl_fork_ready with a hl_with_client. */
typedef struct hl_with_client {
  const char *url;
  int (*fn)(hilock_client *c, void *arg);
  void *arg;
} hl_with_client;
int hl_run_with_client(void *with_client);
/* Fork a child that frees h and then c (its copies: the last reference to
 * the client there) and exits; the child's status (see hl_wait_child), so
 * 0 unless it failed or hung past timeout_ms. */
int hl_fork_free_client(hilock_client *c, hilock_hold *h, int64_t timeout_ms);


/* ## Histories of contending processes -------------------------------------
 * A holder records its critical section as a span [start, end): start is
 * taken after its grant, end before its release, both from one ordered
 * scale (the shared history's global sequence, hl_history_tick, or one
 * clock). Two spans then overlap exactly when their holders were inside at
 * once. */

typedef struct hl_span {
  int pid;
  int shared;          /* 1: may overlap other shared spans (a read) */
  int64_t start, end;  /* [start, end); an empty span overlaps nothing */
} hl_span;

/* The spans that began where they could not: while `limit` spans were
 * already inside (limit <= 0: no bound on shared spans), an exclusive span
 * (shared == 0) while any other was inside, or a shared one inside an
 * exclusive one. Returns their number (0: the history keeps the rule);
 * *shared_pairs (may be NULL) gets the number of overlapping pairs of
 * shared spans. */
int hl_history_check(const hl_span *s, size_t n, int limit, int *shared_pairs);

/* A history in shared memory (MAP_SHARED), written by forked processes. */
typedef struct hl_history {
  int64_t seq; /* the last sequence number drawn */
  int n;       /* spans added (those past max are dropped) */
  int max;
  hl_span span[];
} hl_history;

/* Room for max spans; fails the test if the mapping fails. */
hl_history *hl_history_new(int max);
void hl_history_free(hl_history *h);
/* The next number of the global sequence (atomic, any process). */
int64_t hl_history_tick(hl_history *h);
/* Record the calling process's span (atomic, any process). */
void hl_history_add(hl_history *h, int shared, int64_t start, int64_t end);
/* Spans recorded: min(n, max). */
int hl_history_len(const hl_history *h);

/* ## Queue-style locks (fair, sequential) ------------------------------------ */

/* An integer string key (a counter), 0 if absent. */
long long hl_redis_get_int(redisContext *c, const char *key);
/* The server's clock (TIME) in ms. */
long long hl_server_time_ms(redisContext *c);
/* Keys matching a pattern (KEYS, hiredis format). */
long long hl_keys_count(redisContext *c, const char *fmt, ...);
/* Wait until ZCARD of key is n: 1 if it got there within timeout_ms, else
 * 0 (after printing the last count). */
int hl_wait_zcard(redisContext *c, const char *key, long long n,
                  int64_t timeout_ms);
/* Run a script of the library (a const hilock__script *, see internal.h)
 * on the keys hilock:{name}:<role> for each of nkeys roles, with nargs
 * string arguments; fails the test unless it returns an array. */
redisReply *hl_run_script(hilock_client *c, const void *script,
                          const char *name, const char *const *roles,
                          int nkeys, const char *const *args, int nargs);

/* A script's reply checked against the integers it must hold, element by
 * element (HL_ANY: one not checked), then freed:
 * assert_reply_ints(r, 1, HL_ANY, 2) checks elements 0 and 2. */
#define HL_ANY LLONG_MIN
#define assert_reply_ints(reply, ...)                                       \
  hl_assert_reply_ints((reply), (const long long[]){__VA_ARGS__},          \
                       sizeof((const long long[]){__VA_ARGS__}) /          \
                           sizeof(long long),                               \
                       __FILE__, __LINE__)
void hl_assert_reply_ints(redisReply *r, const long long *want, size_t n,
                          const char *file, int line);

/* ## Waiters, interrupts and contenders -------------------------------------- */

/* An interrupt hook (hilock_options.interrupt) that returns *(int *)arg,
 * and a thread that sets *flag after delay_ms (join it). */
int hl_flag_interrupt(void *arg);
pthread_t hl_raise_flag_later(int *flag, int64_t delay_ms);

/* A waiter thread: acquire with a wait (0: 20 s), or any one call of that
 * shape. Once granted it notes its place among the grants (when
 * grant_counter is set), its fence and number (ticket or sequence, when
 * number is set), stays until *release_now (if set), holds hold_ms and
 * releases (when release is set: else it keeps the grant). t_start and
 * t_end (hl_now_ms) bracket the acquire. */
typedef struct hl_waiter {
  hilock_hold *lock;
  int (*acquire)(hilock_hold *h, int64_t wait_ms);
  int (*release)(hilock_hold *h);           /* NULL: keep the grant */
  uint64_t (*number)(const hilock_hold *h); /* NULL: none */
  int64_t wait_ms;
  int64_t hold_ms;
  volatile int *release_now;
  int *grant_counter; /* shared by the waiters of one test, or NULL */
  int rc, release_rc; /* -100 until set */
  uint64_t fence, number_granted;
  int grant_pos;
  int64_t t_start, t_end;
  pthread_t thread;
} hl_waiter;

/* Start w on a new thread (fails the test if it cannot); returns the
 * thread (also in w->thread). */
pthread_t hl_waiter_start(hl_waiter *w);
void hl_waiter_join(hl_waiter *w);
/* Clear w and start it: acquire h with v's acquire and wait_ms, then keep
 * the grant or (release != 0) release it with v's release. */
void hl_waiter_run(hl_waiter *w, hilock_hold *h, const hl_verbs *v,
                   int64_t wait_ms, int release);
/* Release holder with v's release (which must succeed) while w waits, and
 * join w: how long after the release w's acquire returned (ms). */
int64_t hl_release_and_join(hl_waiter *w, hilock_hold *holder,
                            const hl_verbs *v);
/* When the acquire returned (its t_end), or 0 while it has not. */
int64_t hl_waiter_done_at(hl_waiter *w);

/* The next finished operation of runner a (hilock/async.h), polling its fd;
 * fails the test when none finishes within timeout_ms. */
hilock_async_done hl_async_next(hilock_async *a, int64_t timeout_ms);

/* A contending process with its own client on url: make(c, arg, &h) builds
 * its handle (and sets it up), then it acquires (waiting up to 20 s), holds
 * hold_ms (until it is killed if hold_ms < 0) and releases. It exits 0 if
 * granted and released, 1 on HILOCK_BUSY, 2 on an error (printed). */
typedef int (*hl_make_fn)(hilock_client *c, void *arg, hilock_hold **h);
pid_t hl_fork_contender(const char *url, hl_make_fn make, void *arg,
                        int (*acquire)(hilock_hold *h, int64_t wait_ms),
                        int (*release)(hilock_hold *h), int64_t hold_ms);
/* A process with its own client on url in which take(c, arg, &h) builds a
 * hold and takes it; it then says so and holds until it is killed. Returns
 * once it holds (fails the test if it does not). */
pid_t hl_fork_holder(const char *url, hl_make_fn take, void *arg);

/* n clients on url (hl_test_options()), for a setup: 0, or -1 after
 * printing why. hl_clients_free frees them and sets them to NULL. */
int hl_clients_new(hilock_client **c, int n, const char *url);
void hl_clients_free(hilock_client **c, int n);

/* The fixture most suites share: one private server per test binary, and a
 * fresh raw connection (after FLUSHALL) and hilock client per test. */
typedef struct hl_fixture {
  hl_server server;
  redisContext *redis;
  hilock_client *client;
} hl_fixture;

int hl_group_setup(void **state);
int hl_group_teardown(void **state);
int hl_setup(void **state);
int hl_teardown(void **state);

/* One test of a suite on that fixture. */
/* A fence counter ahead of every server's clock (the year 2223, still
 * exact in a Lua double): a grant draws max(last + 1, clock), so from here
 * each grant adds exactly one and a test counts grants by the counter. */
#define HL_FENCE_AHEAD 8000000000000000LL

#define HL_TEST(f) cmocka_unit_test_setup_teardown(f, hl_setup, hl_teardown)

/* The main() of a suite: runs the tests listed after the group's name and
 * its group setup and teardown as one group. HL_FIXTURE_MAIN: a group on
 * the shared fixture (hl_group_setup, hl_group_teardown), its tests
 * HL_TEST(f), .... */
#define HL_SUITE_MAIN(name, group_setup, group_teardown, ...)              \
  int main(void) {                                                        \
    const struct CMUnitTest tests[] = {__VA_ARGS__};                      \
    return cmocka_run_group_tests_name(name, tests, group_setup,         \
                                       group_teardown);                   \
  }
#define HL_FIXTURE_MAIN(name, ...) \
  HL_SUITE_MAIN(name, hl_group_setup, hl_group_teardown, __VA_ARGS__)

#endif /* HILOCK_TEST_UTIL_H */
