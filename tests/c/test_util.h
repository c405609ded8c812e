/* Test helpers: a private redis-server per test program, direct hiredis
 * access for checking keys, clocks, and status-code assertions. */
#ifndef HILOCK_TEST_UTIL_H
#define HILOCK_TEST_UTIL_H

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

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

#define assert_substr(haystack, needle)                                     \
  do {                                                                      \
    const char *hl_h_ = (haystack), *hl_n_ = (needle);                      \
    if (hl_h_ == NULL || strstr(hl_h_, hl_n_) == NULL) {                    \
      print_error("%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__,      \
                  __LINE__, hl_h_ ? hl_h_ : "(null)", hl_n_);               \
      fail();                                                               \
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

/* ## Clocks ---------------------------------------------------------------- */

int64_t hl_now_ms(void);
void hl_sleep_ms(int64_t ms);

/* Client options with short timeouts suited to tests; with
 * HILOCK_TEST_WAIT=blpop in the environment, waits block in BLPOP (one
 * connection per waiter) instead of the shared waiting. */
hilock_options hl_test_options(void);
/* 1 if this run waits in BLPOP (HILOCK_TEST_WAIT=blpop). */
int hl_blpop_mode(void);
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

#endif /* HILOCK_TEST_UTIL_H */
