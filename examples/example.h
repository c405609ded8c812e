/* Helpers shared by the C examples and the benchmarks in tests/bench.
 *
 * Always: the Redis URL from argv or the environment, a monotonic clock,
 * sleeps, and a hilock client connect that says why it failed.
 *
 * With EXAMPLE_WITH_HIREDIS defined before the include, also a raw hiredis
 * connection from a hilock URL and a checked command on it; the program then
 * has to link hiredis. */
#ifndef HILOCK_EXAMPLE_H
#define HILOCK_EXAMPLE_H

#include <errno.h>
#include <hilock/hilock.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define EXAMPLE_DEFAULT_URL "redis://127.0.0.1:6379/0"

/* argv[1] if given, else $HILOCK_URL, else $REDIS_URL (empty counts as
 * unset), else EXAMPLE_DEFAULT_URL. */
static inline const char *redis_url(int argc, char **argv) {
  const char *url = argc > 1 ? argv[1] : getenv("HILOCK_URL");
  if (url == NULL || *url == '\0') url = getenv("REDIS_URL");
  if (url == NULL || *url == '\0') url = EXAMPLE_DEFAULT_URL;
  return url;
}

/* ## Clock and sleeps (CLOCK_MONOTONIC) -------------------------------- */

static inline int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t now_ms(void) { return now_ns() / 1000000; }

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sleep the full time, resuming after a signal. */
static inline void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static inline void sleep_ms(long ms) { sleep_us(ms * 1000L); }

/* Sleep until now_ns() reaches t. */
static inline void sleep_until(int64_t t) {
  struct timespec ts = {(time_t)(t / 1000000000), (long)(t % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

/* ## hilock ------------------------------------------------------------- */

/* hilock_client_new with default options; on failure prints why. The
 * caller frees *c either way (it may be set even on failure). */
static inline int client_connect(const char *url, hilock_client **c) {
  int rc = hilock_client_new(url, NULL, c);
  if (rc != HILOCK_OK)
    fprintf(stderr, "connect %s: %s\n", url,
            *c ? hilock_client_errmsg(*c) : hilock_strerror(rc));
  return rc;
}

/* Print why a lock call did not give the expected result. */
static inline void report(const char *what, const hilock_lock *lk, int rc) {
  fprintf(stderr, "%s: %s\n", what,
          rc < 0 ? hilock_hold_errmsg(HILOCK_HOLD(lk)) : hilock_strerror(rc));
}

/* ## Plain hiredis ------------------------------------------------------- */

#ifdef EXAMPLE_WITH_HIREDIS
#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <string.h>

/* One command; NULL (after printing why) on a broken connection or an error
 * reply. */
static inline redisReply *redis_cmd(redisContext *r, const char *fmt, ...) {
  va_list ap;
  redisReply *rep;
  va_start(ap, fmt);
  rep = redisvCommand(r, fmt, ap);
  va_end(ap);
  if (rep == NULL) {
    fprintf(stderr, "redis: %s\n", r->errstr);
  } else if (rep->type == REDIS_REPLY_ERROR) {
    fprintf(stderr, "redis: %s\n", rep->str);
    freeReplyObject(rep);
    rep = NULL;
  }
  return rep;
}

/* A raw hiredis connection (2 s timeout) from the URL forms the library
 * takes, redis://[[user]:password@]host[:port][/db] and
 * unix:///path[?db=N&user=U&password=P], without percent-escapes: AUTH and
 * SELECT as the URL asks. NULL (after printing why) on failure. */
static inline redisContext *redis_connect_url(const char *url) {
  char buf[1024], *host = NULL, *path = NULL, *user = NULL, *pass = NULL, *q;
  struct timeval tv = {2, 0};
  int port = 6379, db = 0, ok = 1;
  redisContext *r;
  redisReply *rep;

  if (strlen(url) >= sizeof(buf)) {
    fprintf(stderr, "url too long\n");
    return NULL;
  }
  strcpy(buf, url);
  if (strncmp(buf, "unix://", 7) == 0) {
    path = buf + 7;
    if ((q = strchr(path, '?')) != NULL) {
      *q++ = '\0';
      for (char *kv = strtok(q, "&"); kv != NULL; kv = strtok(NULL, "&")) {
        if (strncmp(kv, "db=", 3) == 0) db = atoi(kv + 3);
        else if (strncmp(kv, "user=", 5) == 0) user = kv + 5;
        else if (strncmp(kv, "password=", 9) == 0) pass = kv + 9;
      }
    }
  } else if (strncmp(buf, "redis://", 8) == 0) {
    host = buf + 8;
    if ((q = strchr(host, '/')) != NULL) {
      *q++ = '\0';
      db = atoi(q);
    }
    if ((q = strrchr(host, '@')) != NULL) {
      *q = '\0';
      pass = strchr(host, ':');
      if (pass != NULL) {
        *pass++ = '\0';
        user = host;
      } else {
        pass = host;
      }
      host = q + 1;
    }
    q = host;
    if (*host == '[' && (q = strchr(host, ']')) != NULL) {
      *q++ = '\0';
      host++;
    }
    if ((q = strchr(q, ':')) != NULL) {
      *q++ = '\0';
      port = atoi(q);
    }
  } else {
    fprintf(stderr, "%s: expected redis:// or unix://\n", url);
    return NULL;
  }
  r = path ? redisConnectUnixWithTimeout(path, tv)
           : redisConnectWithTimeout(host, port, tv);
  if (r == NULL || r->err) {
    fprintf(stderr, "connect %s: %s\n", url, r ? r->errstr : "out of memory");
    redisFree(r);
    return NULL;
  }
  if (pass != NULL && *pass != '\0') {
    rep = user != NULL && *user != '\0' ? redis_cmd(r, "AUTH %s %s", user, pass)
                                        : redis_cmd(r, "AUTH %s", pass);
    ok = rep != NULL;
    freeReplyObject(rep);
  }
  if (ok && db != 0) {
    rep = redis_cmd(r, "SELECT %d", db);
    ok = rep != NULL;
    freeReplyObject(rep);
  }
  if (!ok) {
    redisFree(r);
    return NULL;
  }
  return r;
}
#endif /* EXAMPLE_WITH_HIREDIS */

#endif /* HILOCK_EXAMPLE_H */
