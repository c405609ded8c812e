/* Owner tokens, monotonic clocks and timed waits, backoff jitter, names and
 * keys. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "fiber.h"
#include "runtime.h"

int hilock__token(char out[HILOCK__TOKEN_LEN + 1], hilock__err *e) {
  static const char hex[] = "0123456789abcdef";
  unsigned char raw[HILOCK__TOKEN_LEN / 2];
  size_t got = 0;
  while (got < sizeof(raw)) {
    ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return hilock__set_err(e, HILOCK_EIO, "getrandom: %s", strerror(errno));
    }
    got += (size_t)n;
  }
  for (size_t i = 0; i < sizeof(raw); i++) {
    out[2 * i] = hex[raw[i] >> 4];
    out[2 * i + 1] = hex[raw[i] & 15];
  }
  out[HILOCK__TOKEN_LEN] = '\0';
  return HILOCK_OK;
}

int64_t hilock__now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t hilock__now_ms(void) { return hilock__now_us() / 1000; }

static void nap_ms(int64_t ms) {
  struct timespec ts;
  ts.tv_sec = (time_t)(ms / 1000);
  ts.tv_nsec = (long)(ms % 1000) * 1000000L;
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void hilock__sleep_ms(int64_t ms) {
  int64_t end;
  if (ms <= 0) return;
  end = hilock__now_ms() + ms;
  if (hilock__fiber_self() != NULL) { /* an event loop's: its loop waits */
    (void)hilock__fiber_wait(-1, 0, hilock__call_cut(end));
    return;
  }
  if (hilock__tl.cut_ms == NULL) {
    nap_ms(ms);
    return;
  }
  /* An event loop's attempt on a worker: a cancel may end the pause. */
  while ((ms = hilock__call_cut(end) - hilock__now_ms()) > 0)
    nap_ms(ms < 100 ? ms : 100);
}

int64_t hilock__jitter(int64_t lo, int64_t hi) {
  static _Thread_local uint64_t state;
  if (state == 0) {
    state = (uint64_t)hilock__now_us() ^ ((uint64_t)(uintptr_t)&state << 16);
    if (state == 0) state = 0x9e3779b97f4a7c15ULL;
  }
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  if (hi <= lo) return lo;
  return lo + (int64_t)(state % (uint64_t)(hi - lo + 1));
}

int hilock__check_name(hilock__err *e, const char *name, size_t len) {
  if (name == NULL)
    return hilock__set_err(e, HILOCK_EINVAL, "lock name is NULL");
  if (len == 0) return hilock__set_err(e, HILOCK_EINVAL, "lock name is empty");
  if (len > HILOCK_NAME_MAX)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "lock name is %zu bytes; the limit is %d", len,
                           HILOCK_NAME_MAX);
  if (name[0] == '}')
    return hilock__set_err(e, HILOCK_EINVAL,
                           "lock name may not begin with '}' (it would break "
                           "the key's cluster hash tag)");
  return HILOCK_OK;
}

int hilock__check_ms(hilock__err *e, const char *what, int64_t ms) {
  if (ms < 1 || ms > HILOCK_TTL_MAX_MS)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "%s must be 1..%" PRId64 " ms, got %" PRId64, what,
                           HILOCK_TTL_MAX_MS, ms);
  return HILOCK_OK;
}

int hilock__check_ttl(hilock__err *e, int64_t ms) {
  if (ms < HILOCK_TTL_MIN_MS || ms > HILOCK_TTL_MAX_MS)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "ttl must be %" PRId64 "..%" PRId64
                           " ms, got %" PRId64
                           " (the validity is the TTL less a drift allowance "
                           "of 1%% + 2 ms)",
                           HILOCK_TTL_MIN_MS, HILOCK_TTL_MAX_MS, ms);
  return HILOCK_OK;
}

char *hilock__dup(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d == NULL) return NULL;
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

char *hilock__key(const hilock__runtime *rt, const char *name, size_t len,
                  const char *role, size_t *outlen) {
  size_t pl = rt->prefixlen, rl = strlen(role);
  size_t total = pl + 1 + len + 2 + rl;
  char *k = malloc(total + 1);
  if (k == NULL) return NULL;
  memcpy(k, rt->prefix, pl);
  k[pl] = '{';
  memcpy(k + pl + 1, name, len);
  memcpy(k + pl + 1 + len, "}:", 2);
  memcpy(k + pl + 1 + len + 2, role, rl);
  k[total] = '\0';
  *outlen = total;
  return k;
}

int hilock__keys(const hilock__runtime *rt, const char *name, size_t len,
                 const char *const *roles, int n, char **keys,
                 size_t *keylens) {
  for (int i = 0; i < n; i++) {
    keys[i] = hilock__key(rt, name, len, roles[i], &keylens[i]);
    if (keys[i] == NULL) return HILOCK_ENOMEM;
  }
  return HILOCK_OK;
}

size_t hilock__digits(uint64_t v) {
  size_t d = 1;
  while (v >= 10) {
    v /= 10;
    d++;
  }
  return d;
}

size_t hilock__u64_text(char *buf, uint64_t v) {
  /* Not snprintf: this is on every command's path. */
  size_t n = hilock__digits(v);
  for (char *q = buf + n; q > buf; v /= 10) *--q = (char)('0' + v % 10);
  return n;
}

size_t hilock__i64(char *buf, int64_t v) {
  size_t len = 0;
  if (v < 0) buf[len++] = '-';
  len += hilock__u64_text(buf + len,
                          v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
  buf[len] = '\0';
  return len;
}

int hilock__cond_init(pthread_cond_t *cv) {
  pthread_condattr_t ca;
  int rc;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  rc = pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
  return rc;
}

void hilock__cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu,
                          int64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += (time_t)(ms / 1000);
  ts.tv_nsec += (long)(ms % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000;
  }
  pthread_cond_timedwait(cv, mu, &ts);
}

/* getpid() is a system call on every glibc since 2.25; hot paths compare
 * owners' pids on every call. The cache is cleared in a forked child (by a
 * fork handler installed before the first value is kept). */
static pid_t cached_pid;
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;

static void pid_forked(void) {
  __atomic_store_n(&cached_pid, 0, __ATOMIC_RELAXED);
}

static void pid_install(void) { pthread_atfork(NULL, NULL, pid_forked); }

__thread hilock__callstate hilock__tl = HILOCK__CALLSTATE_INIT;

#define tl_caller hilock__tl.caller

long hilock__caller(void) {
  return tl_caller != 0 ? tl_caller : (long)syscall(SYS_gettid);
}

void hilock__caller_set(long id) { tl_caller = id; }

pid_t hilock__pid(void) {
  pid_t p = __atomic_load_n(&cached_pid, __ATOMIC_RELAXED);
  if (p == 0) {
    pthread_once(&pid_once, pid_install);
    p = getpid();
    __atomic_store_n(&cached_pid, p, __ATOMIC_RELAXED);
  }
  return p;
}

int hilock__int_reply(const redisReply *r, size_t n) {
  if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < n) return 0;
  for (size_t i = 0; i < r->elements; i++)
    if (r->element[i]->type != REDIS_REPLY_INTEGER) return 0;
  return 1;
}
