/* Statistics and the log callback (hilock/stats.h): a scripted run with
 * exact counts, counters under eight threads (run under TSan too), the log
 * records of a loss, a renewal failure and a reconnect, a Redlock's own
 * counters, and NULL arguments. */
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define TTL_MS 10000

static hilock_stats stats_of(hilock_client *c) {
  hilock_stats s;
  memset(&s, 0xff, sizeof(s));
  assert_hl_ok(hilock_client_stats(c, &s, sizeof(s)), "stats");
  return s;
}

static uint64_t bucket_sum(const hilock_histogram *h) {
  uint64_t n = 0;
  for (size_t i = 0; i < HILOCK_STATS_BUCKETS; i++) n += h->buckets[i];
  return n;
}

/* Poll the client's counters until field (an offset into hilock_stats)
 * reaches at least want, for up to ms; returns the last value. */
static uint64_t await_stat(hilock_client *c, size_t field, uint64_t want,
                           int64_t ms) {
  uint64_t v = 0;
  for (int64_t waited = 0; waited <= ms; waited += 20) {
    hilock_stats s = stats_of(c);
    memcpy(&v, (const char *)&s + field, sizeof(v));
    if (v >= want) break;
    usleep(20000);
  }
  return v;
}

/* ## The log callback's records --------------------------------------- */

typedef struct log_rec {
  int level;
  char lock[64];
  char msg[256];
} log_rec;

typedef struct log_sink {
  pthread_mutex_t mu;
  log_rec rec[64];
  int n;
} log_sink;

static void sink_fn(void *arg, int level, const char *lock, size_t locklen,
                    const char *msg) {
  log_sink *s = arg;
  pthread_mutex_lock(&s->mu);
  if (s->n < 64) {
    log_rec *r = &s->rec[s->n++];
    r->level = level;
    snprintf(r->lock, sizeof(r->lock), "%.*s", (int)locklen,
             lock != NULL ? lock : "");
    snprintf(r->msg, sizeof(r->msg), "%s", msg);
  }
  pthread_mutex_unlock(&s->mu);
}

/* Records at level whose lock is name and message has part. */
static int sink_count(log_sink *s, int level, const char *name,
                      const char *part) {
  int n = 0;
  pthread_mutex_lock(&s->mu);
  for (int i = 0; i < s->n; i++)
    if (s->rec[i].level == level && strcmp(s->rec[i].lock, name) == 0 &&
        strstr(s->rec[i].msg, part) != NULL)
      n++;
  pthread_mutex_unlock(&s->mu);
  return n;
}

static int sink_await(log_sink *s, int level, const char *name,
                      const char *part, int64_t ms) {
  for (int64_t waited = 0; waited <= ms; waited += 20) {
    if (sink_count(s, level, name, part) > 0) return 1;
    usleep(20000);
  }
  return 0;
}

/* ## A scripted run ------------------------------------------------------ */

/* Another client holds what a waiter of this one waits for: 5 grants, 2
 * one-shot refusals, 1 timeout after a wait, 3 waits, 1 loss, 4 releases;
 * the wait and hold histograms count the waits and the releases. */
static void scripted_run_counts_exactly(void **state) {
  hl_fixture *f = *state;
  hilock_client *other = hl_client(f->server.url, NULL);
  hilock_lock *a1 = hl_new_lock(f->client, "st:one", TTL_MS);
  hilock_lock *a2 = hl_new_lock(f->client, "st:two", TTL_MS);
  hilock_lock *b2 = hl_new_lock(other, "st:two", 300);
  hilock_semaphore *as = hl_new_semaphore(f->client, "st:sem", 1, TTL_MS);
  hilock_semaphore *bs = hl_new_semaphore(other, "st:sem", 1, 300);
  hilock_lock *lost = hl_new_lock(f->client, "st:lost", 600);
  hilock_lock *al = hl_new_lock(f->client, "st:async", TTL_MS);
  hilock_async *run = NULL;
  hilock_async_done d;
  hilock_stats s;
  log_sink sink = {.n = 0};
  uint64_t id;

  pthread_mutex_init(&sink.mu, NULL);
  assert_hl_ok(hilock_client_set_log(f->client, sink_fn, &sink), "");
  s = stats_of(f->client);
  assert_int_equal(s.acquired, 0);
  assert_int_equal(s.hold.count, 0);

  /* 1 grant, released. */
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(a1), 0), "");
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a1)), "");
  /* Held by the other client: two one-shot refusals, then a wait that
   * runs out (the holder's TTL is renewed by hand meanwhile: no expiry). */
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(b2), 0), "");
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(a2)), HILOCK_BUSY, "");
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(a2), 0), HILOCK_BUSY, "");
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(b2), 1, 0, NULL, NULL),
               "");
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(a2), 400), HILOCK_BUSY, "");
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(b2), 0, 0, NULL, NULL),
               "");
  /* Two waits that end in grants when the other's TTL (300 ms) runs out. */
  assert_hl_ok(hilock_hold_renew(HILOCK_HOLD(b2)), "");
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(a2), 5000), "");
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a2)), "");
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(bs), 0), "");
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(as), 5000), "");
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(as)), "");
  /* One async grant, released. */
  assert_hl_ok(hilock_async_new(f->client, 1, &run), "");
  assert_hl_ok(hilock_async_acquire(run, HILOCK_HOLD(al), 0, 0, NULL, &id),
               hilock_async_errmsg(run));
  d = hl_async_next(run, 10000);
  assert_hl_ok(d.status, d.errmsg);
  assert_hl_ok(hilock_async_release(run, HILOCK_HOLD(al), 0, NULL, &id),
               hilock_async_errmsg(run));
  d = hl_async_next(run, 10000);
  assert_hl_ok(d.status, d.errmsg);
  hilock_async_free(run);
  /* One auto-renewed grant, renewed, then lost: its key is deleted. */
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(lost), 0), "");
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(lost), 1, 0, NULL, NULL),
               "");
  assert_true(await_stat(f->client, offsetof(hilock_stats, renewals), 1,
                         5000) >= 1);
  hl_redis_ok(f->redis, "DEL %s", "hilock:{st:lost}:lock");
  assert_int_equal(
      await_stat(f->client, offsetof(hilock_stats, lost), 1, 5000), 1);
  assert_true(hilock_hold_lost(HILOCK_HOLD(lost)));
  assert_true(sink_await(&sink, HILOCK_LOG_ERROR, "st:lost", "lost", 2000));
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(lost)), HILOCK_ENOTOWNED, "");

  s = stats_of(f->client);
  assert_int_equal(s.acquired, 5);
  assert_int_equal(s.busy, 2);
  assert_int_equal(s.timeouts, 1);
  assert_int_equal(s.waits, 3);
  assert_int_equal(s.errors, 0);
  assert_int_equal(s.lost, 1);
  assert_true(s.renewals >= 1);
  assert_int_equal(s.renewal_failures, 0);
  assert_int_equal(s.redirections, 0);
  assert_int_equal(s.wait.count, 3);
  assert_int_equal(bucket_sum(&s.wait), s.wait.count);
  assert_int_equal(s.hold.count, 4); /* the lost one is not a release */
  assert_int_equal(bucket_sum(&s.hold), s.hold.count);
  /* Every wait lasted about 300 ms or more: none in a bucket up to 200 ms,
   * and the sum is at least that. */
  for (size_t i = 0; hilock_stats_bucket_us(i) <= 200000; i++)
    assert_int_equal(s.wait.buckets[i], 0);
  assert_true(s.wait.sum_us >= 3 * 200000);
  assert_true(s.hold.sum_us > 0);
  /* The other client counted its own grants only. */
  assert_int_equal(stats_of(other).acquired, 2);

  assert_hl_ok(hilock_client_stats_reset(f->client), "");
  s = stats_of(f->client);
  assert_int_equal(s.acquired + s.busy + s.waits + s.lost + s.wait.count +
                       s.hold.count + s.wait.sum_us,
                   0);
  assert_hl_ok(hilock_client_set_log(f->client, NULL, NULL), "");
  hl_holds_free(HILOCK_HOLD(a1), HILOCK_HOLD(a2), HILOCK_HOLD(b2),
                HILOCK_HOLD(as), HILOCK_HOLD(bs), HILOCK_HOLD(lost),
                HILOCK_HOLD(al));
  hilock_client_free(other);
  pthread_mutex_destroy(&sink.mu);
}

/* A loss found by a call (owned, extend, release) is counted once and
 * logged on the calling thread. */
typedef struct thread_sink {
  log_sink sink;
  pthread_t caller;
  int other_thread;
} thread_sink;

static void thread_sink_fn(void *arg, int level, const char *lock,
                           size_t locklen, const char *msg) {
  thread_sink *t = arg;
  if (!pthread_equal(pthread_self(), t->caller)) t->other_thread++;
  sink_fn(&t->sink, level, lock, locklen, msg);
}

static void loss_found_by_a_call_is_counted_once(void **state) {
  hl_fixture *f = *state;
  hilock_lock *lk = hl_new_lock(f->client, "st:gone", TTL_MS);
  thread_sink t = {.sink = {.n = 0}, .other_thread = 0};
  int owned = 1;
  pthread_mutex_init(&t.sink.mu, NULL);
  t.caller = pthread_self();
  assert_hl_ok(hilock_client_set_log(f->client, thread_sink_fn, &t), "");
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(lk), 0), "");
  hl_redis_ok(f->redis, "DEL %s", "hilock:{st:gone}:lock");
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(lk), &owned), "");
  assert_int_equal(owned, 0);
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(lk), 1000, 0), HILOCK_ENOTOWNED, "");
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(lk)), HILOCK_ENOTOWNED, "");
  assert_int_equal(stats_of(f->client).lost, 1);
  assert_int_equal(stats_of(f->client).hold.count, 0);
  assert_int_equal(sink_count(&t.sink, HILOCK_LOG_ERROR, "st:gone", "lost"), 1);
  assert_int_equal(t.other_thread, 0);
  assert_hl_ok(hilock_client_set_log(f->client, NULL, NULL), "");
  hilock_hold_free(HILOCK_HOLD(lk));
  pthread_mutex_destroy(&t.sink.mu);
}

/* ## Eight threads on one client ------------------------------------------ */

#define THREADS 8
#define ROUNDS 150

typedef struct hammer {
  hilock_client *c;
  int ok, busy, bad;
} hammer;

static void *hammer_main(void *arg) {
  hammer *h = arg;
  hilock_lock *lk = NULL;
  hilock_rlock *rl = NULL;
  if (hilock_lock_new(h->c, "st:hot", 6, TTL_MS, &lk) != HILOCK_OK ||
      hilock_rlock_new(h->c, "st:hot-r", 8, TTL_MS, &rl) != HILOCK_OK) {
    h->bad++;
  } else {
    for (int i = 0; i < ROUNDS; i++) {
      int rc = (i & 1) ? hilock_hold_try_acquire(HILOCK_HOLD(lk))
                       : hilock_hold_try_acquire(HILOCK_HOLD(rl));
      if (rc == HILOCK_OK) {
        h->ok++;
        if (((i & 1) ? hilock_hold_release(HILOCK_HOLD(lk)) : hilock_hold_release(HILOCK_HOLD(rl))) !=
            HILOCK_OK)
          h->bad++;
      } else if (rc == HILOCK_BUSY) {
        h->busy++;
      } else {
        h->bad++;
      }
    }
  }
  hl_holds_free(HILOCK_HOLD(lk), HILOCK_HOLD(rl));
  return NULL;
}

static void counters_add_up_under_threads(void **state) {
  hl_fixture *f = *state;
  pthread_t t[THREADS];
  hammer h[THREADS];
  int ok = 0, busy = 0;
  hilock_stats s;
  for (int i = 0; i < THREADS; i++) {
    h[i] = (hammer){f->client, 0, 0, 0};
    assert_int_equal(pthread_create(&t[i], NULL, hammer_main, &h[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(h[i].bad, 0);
    ok += h[i].ok;
    busy += h[i].busy;
  }
  assert_int_equal(ok + busy, THREADS * ROUNDS);
  s = stats_of(f->client);
  assert_int_equal(s.acquired, (uint64_t)ok);
  assert_int_equal(s.busy, (uint64_t)busy);
  assert_int_equal(s.hold.count, (uint64_t)ok);
  assert_int_equal(bucket_sum(&s.hold), (uint64_t)ok);
  assert_int_equal(s.waits + s.timeouts + s.errors + s.lost, 0);
}

/* ## Log records of the renewal and the connection ------------------------ */

/* The server stops under an auto-renewed grant: the renewal fails (logged
 * as a warning, on the renewal thread) until it is lost; after a restart a
 * call replaces the broken connection (a reconnect, logged). */
static void renewal_failure_and_reconnect_are_logged(void **state) {
  hl_fixture *f = *state;
  hilock_lock *lk = hl_new_lock(f->client, "st:down", 600);
  log_sink sink = {.n = 0};
  hilock_stats s;
  pthread_mutex_init(&sink.mu, NULL);
  assert_hl_ok(hilock_client_set_log(f->client, sink_fn, &sink), "");
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(lk), 0), "");
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(lk), 1, 0, NULL, NULL),
               "");
  redisFree(f->redis);
  f->redis = NULL;
  hl_server_stop(&f->server);
  assert_true(await_stat(f->client, offsetof(hilock_stats, renewal_failures),
                         1, 5000) >= 1);
  assert_true(sink_await(&sink, HILOCK_LOG_WARNING, "st:down",
                         "renewal failed", 2000));
  assert_int_equal(
      await_stat(f->client, offsetof(hilock_stats, lost), 1, 5000), 1);
  assert_true(sink_await(&sink, HILOCK_LOG_ERROR, "st:down", "lost", 2000));
  assert_int_equal(hl_server_restart(&f->server), 0);
  f->redis = hl_redis_connect(&f->server);
  assert_hl_ok(hilock_client_ping(f->client), hilock_client_errmsg(f->client));
  s = stats_of(f->client);
  assert_true(s.reconnects >= 1);
  assert_true(sink_await(&sink, HILOCK_LOG_INFO, "", "reconnecting", 2000));
  assert_hl_ok(hilock_client_set_log(f->client, NULL, NULL), "");
  hilock_hold_free(HILOCK_HOLD(lk));
  pthread_mutex_destroy(&sink.mu);
}

/* ## Redlock: counters of its own ----------------------------------------- */

static void redlock_counts_on_its_handle(void **state) {
  hl_fixture *f = *state;
  const char *urls[1] = {f->server.url};
  hilock_redlock *r1 = NULL, *r2 = NULL;
  hilock_options o = hl_test_options();
  hilock_stats s;
  assert_hl_ok(hilock_redlock_new(urls, 1, "st:red", 6, TTL_MS, &o, &r1), "");
  assert_hl_ok(hilock_redlock_new(urls, 1, "st:red", 6, TTL_MS, &o, &r2), "");
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(r1), 0), "");
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(r2)), HILOCK_BUSY, "");
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(r2), 150), HILOCK_BUSY, "");
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(r1)), "");
  assert_hl_ok(hilock_redlock_stats(r1, &s, sizeof(s)), "");
  assert_int_equal(s.acquired, 1);
  assert_int_equal(s.hold.count, 1);
  assert_int_equal(s.busy + s.timeouts + s.waits, 0);
  assert_hl_ok(hilock_redlock_stats(r2, &s, sizeof(s)), "");
  assert_int_equal(s.acquired, 0);
  assert_int_equal(s.busy, 1);
  assert_int_equal(s.timeouts, 1);
  assert_int_equal(s.waits, 1);
  assert_int_equal(s.wait.count, 1);
  assert_hl_ok(hilock_redlock_stats_reset(r2), "");
  assert_hl_ok(hilock_redlock_stats(r2, &s, sizeof(s)), "");
  assert_int_equal(s.busy + s.timeouts + s.waits + s.wait.count, 0);
  assert_hl_ok(hilock_redlock_set_log(r2, sink_fn, NULL), "");
  assert_hl_ok(hilock_redlock_set_log(r2, NULL, NULL), "");
  /* The client's counters saw none of it. */
  assert_int_equal(stats_of(f->client).acquired, 0);
  hl_holds_free(HILOCK_HOLD(r1), HILOCK_HOLD(r2));
}

/* ## Arguments ------------------------------------------------------------- */

static void bad_arguments_are_einval(void **state) {
  hl_fixture *f = *state;
  hilock_stats s;
  size_t part = offsetof(hilock_stats, wait);
  assert_hl_rc(hilock_client_stats(NULL, &s, sizeof(s)), HILOCK_EINVAL, "");
  assert_hl_rc(hilock_client_stats(f->client, NULL, sizeof(s)), HILOCK_EINVAL,
               "");
  assert_hl_rc(hilock_client_stats(f->client, &s, 0), HILOCK_EINVAL, "");
  assert_hl_rc(hilock_client_stats_reset(NULL), HILOCK_EINVAL, "");
  assert_hl_rc(hilock_redlock_stats(NULL, &s, sizeof(s)), HILOCK_EINVAL, "");
  assert_hl_rc(hilock_redlock_stats_reset(NULL), HILOCK_EINVAL, "");
  assert_hl_rc(hilock_client_set_log(NULL, sink_fn, NULL), HILOCK_EINVAL, "");
  assert_hl_rc(hilock_redlock_set_log(NULL, sink_fn, NULL), HILOCK_EINVAL, "");
  /* An older, smaller struct: only its part is written. */
  memset(&s, 0xab, sizeof(s));
  assert_hl_ok(hilock_client_stats(f->client, &s, part), "");
  assert_int_equal(s.acquired, 0);
  assert_int_equal(s.wait.count, 0xababababababababULL);
  /* The bounds: 1-2-5 steps from 100 us, the last one open. */
  assert_int_equal(hilock_stats_bucket_us(0), 100);
  assert_int_equal(hilock_stats_bucket_us(3), 1000);
  assert_int_equal(hilock_stats_bucket_us(HILOCK_STATS_BUCKETS - 2),
                   100000000);
  assert_true(hilock_stats_bucket_us(HILOCK_STATS_BUCKETS - 1) == INT64_MAX);
  assert_true(hilock_stats_bucket_us(1000) == INT64_MAX);
  for (size_t i = 1; i < HILOCK_STATS_BUCKETS; i++)
    assert_true(hilock_stats_bucket_us(i) > hilock_stats_bucket_us(i - 1));
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, hl_setup, hl_teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(scripted_run_counts_exactly),
      T(counters_add_up_under_threads),
      T(loss_found_by_a_call_is_counted_once),
      T(redlock_counts_on_its_handle),
      T(bad_arguments_are_einval),
      T(renewal_failure_and_reconnect_are_logged),
  };
  return cmocka_run_group_tests_name("stats", tests, hl_group_setup,
                                     hl_group_teardown);
}
