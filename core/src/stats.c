/* Statistics and the log callback (hilock/stats.h). The counters live in
 * the runtime, so a client counts for every lock made on it and a Redlock
 * handle, which owns a bare runtime, for itself. Increments are relaxed
 * atomics: nothing orders on them, and a snapshot is read counter by
 * counter. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "holds.h"

/* Upper bounds (us) of the histogram buckets but the last: 1-2-5 steps
 * from 100 us to 100 s. */
static const int64_t bounds_us[HILOCK_STATS_BUCKETS - 1] = {
    100,      200,      500,      1000,     2000,     5000,     10000,
    20000,    50000,    100000,   200000,   500000,   1000000,  2000000,
    5000000,  10000000, 20000000, 50000000, 100000000};

int64_t hilock_stats_bucket_us(size_t i) {
  return i < HILOCK_STATS_BUCKETS - 1 ? bounds_us[i] : INT64_MAX;
}

void hilock__stat(hilock__runtime *rt, int kind) {
  atomic_fetch_add_explicit(&rt->stats.n[kind], 1, memory_order_relaxed);
}

void hilock__stat_time(hilock__hist *hist, int64_t us) {
  size_t i = 0;
  if (us < 0) us = 0;
  while (i < HILOCK_STATS_BUCKETS - 1 && us > bounds_us[i]) i++;
  atomic_fetch_add_explicit(&hist->b[i], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&hist->sum_us, (uint64_t)us, memory_order_relaxed);
}

int hilock__stat_acquire(hilock__runtime *rt, int rc, int64_t wait_ms,
                         int64_t start_us, int waited) {
  if (rt == NULL) return rc;
  if (rc == HILOCK_BUSY)
    hilock__stat(rt, waited || wait_ms != 0 ? HILOCK__ST_TIMEOUTS
                                            : HILOCK__ST_BUSY);
  else if (rc < 0)
    hilock__stat(rt, HILOCK__ST_ERRORS);
  if (waited) {
    hilock__stat(rt, HILOCK__ST_WAITS);
    hilock__stat_time(&rt->stats.wait, hilock__now_us() - start_us);
  }
  return rc;
}

int hilock__stat_try(hilock__runtime *rt, int rc) {
  return hilock__stat_acquire(rt, rc, 0, 0, 0);
}

/* The name in key's hash tag (hilock:{name}:role), else the key. */
static void name_of(const char *key, size_t len, const char **name,
                    size_t *namelen) {
  const char *open = key != NULL ? memchr(key, '{', len) : NULL;
  const char *close = NULL;
  if (open != NULL)
    close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
  if (close != NULL) {
    *name = open + 1;
    *namelen = (size_t)(close - open - 1);
  } else {
    *name = key;
    *namelen = key != NULL ? len : 0;
  }
}

void hilock__log(hilock__runtime *rt, int level, const char *lock,
                 size_t locklen, const char *fmt, ...) {
  hilock_log_fn fn;
  void *arg;
  char msg[256];
  const char *name;
  size_t namelen;
  va_list ap;
  if (rt == NULL) return;
  pthread_mutex_lock(&rt->mu);
  fn = rt->log_fn;
  arg = rt->log_arg;
  pthread_mutex_unlock(&rt->mu);
  if (fn == NULL) return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  name_of(lock, locklen, &name, &namelen);
  fn(arg, level, name, namelen, msg);
}

/* ## Public calls ---------------------------------------------------------- */

static void hist_read(const hilock__hist *h, hilock_histogram *out) {
  out->count = 0;
  for (size_t i = 0; i < HILOCK_STATS_BUCKETS; i++) {
    out->buckets[i] = atomic_load_explicit(&h->b[i], memory_order_relaxed);
    out->count += out->buckets[i];
  }
  out->sum_us = atomic_load_explicit(&h->sum_us, memory_order_relaxed);
}

_Static_assert(offsetof(hilock_stats, failovers) ==
                   (HILOCK__ST_N - 1) * sizeof(uint64_t),
               "hilock_stats' counters follow HILOCK__ST_*");

static int stats_read(const hilock__runtime *rt, hilock_stats *out,
                      size_t size) {
  hilock_stats s;
  uint64_t *v = &s.acquired;
  if (rt == NULL || out == NULL || size < sizeof(uint64_t))
    return HILOCK_EINVAL;
  memset(&s, 0, sizeof(s));
  /* The counters are the struct's first members, in HILOCK__ST_* order. */
  for (int i = 0; i < HILOCK__ST_N; i++)
    v[i] = atomic_load_explicit(&rt->stats.n[i], memory_order_relaxed);
  hist_read(&rt->stats.wait, &s.wait);
  hist_read(&rt->stats.hold, &s.hold);
  memcpy(out, &s, size < sizeof(s) ? size : sizeof(s));
  return HILOCK_OK;
}

static void hist_reset(hilock__hist *h) {
  for (size_t i = 0; i < HILOCK_STATS_BUCKETS; i++)
    atomic_store_explicit(&h->b[i], 0, memory_order_relaxed);
  atomic_store_explicit(&h->sum_us, 0, memory_order_relaxed);
}

static int stats_reset(hilock__runtime *rt) {
  if (rt == NULL) return HILOCK_EINVAL;
  for (int i = 0; i < HILOCK__ST_N; i++)
    atomic_store_explicit(&rt->stats.n[i], 0, memory_order_relaxed);
  hist_reset(&rt->stats.wait);
  hist_reset(&rt->stats.hold);
  return HILOCK_OK;
}

static int set_log(hilock__runtime *rt, hilock_log_fn fn, void *arg) {
  if (rt == NULL) return HILOCK_EINVAL;
  pthread_mutex_lock(&rt->mu);
  rt->log_fn = fn;
  rt->log_arg = fn != NULL ? arg : NULL;
  pthread_mutex_unlock(&rt->mu);
  return HILOCK_OK;
}

/* A client is a runtime first; a Redlock handle begins with its hold,
 * whose runtime is the handle's own. */
static const hilock__runtime *client_rt(const hilock_client *c) {
  return c != NULL ? &c->rt : NULL;
}

static hilock__runtime *redlock_rt(const hilock_redlock *rl) {
  return rl != NULL ? ((const hilock__hold *)(const void *)rl)->rt : NULL;
}

int hilock_client_stats(const hilock_client *c, hilock_stats *out,
                        size_t size) {
  return stats_read(client_rt(c), out, size);
}

int hilock_client_stats_reset(hilock_client *c) {
  return stats_reset(c != NULL ? &c->rt : NULL);
}

int hilock_redlock_stats(const hilock_redlock *rl, hilock_stats *out,
                         size_t size) {
  return stats_read(redlock_rt(rl), out, size);
}

int hilock_redlock_stats_reset(hilock_redlock *rl) {
  return stats_reset(redlock_rt(rl));
}

int hilock_client_set_log(hilock_client *c, hilock_log_fn fn, void *arg) {
  return set_log(c != NULL ? &c->rt : NULL, fn, arg);
}

int hilock_redlock_set_log(hilock_redlock *rl, hilock_log_fn fn, void *arg) {
  return set_log(redlock_rt(rl), fn, arg);
}
