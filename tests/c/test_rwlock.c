/* The read-write lock against a real server, beyond the contract every
 * family keeps (test_contract.c, both sides): sharing and exclusion,
 * reentrancy, writer preference, downgrade, the upgrade error, wake-ups,
 * expiry of crashed readers and dead waiting writers (real processes,
 * SIGKILL), and a history check of real readers and writers contending.
 *
 * An owner is a thread of one client, so tests that need several owners in
 * one thread use several clients. */
#include "test_util.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h" /* the client id, for owner ids */

#define NCLIENTS 4

typedef struct fixture {
  hl_server server;
  redisContext *redis;
  hilock_client *c[NCLIENTS];
} fixture;

static fixture fx;

static int group_setup(void **state) {
  *state = &fx;
  return hl_server_start(&fx.server, NULL);
}

static int group_teardown(void **state) {
  (void)state;
  hl_server_destroy(&fx.server);
  return 0;
}

static int setup(void **state) {
  fixture *f = *state;
  f->redis = hl_redis_connect(&f->server);
  hl_redis_ok(f->redis, "FLUSHALL");
  return hl_clients_new(f->c, NCLIENTS, f->server.url);
}

static void join_leftovers(void);

static int teardown(void **state) {
  fixture *f = *state;
  join_leftovers();
  hl_clients_free(f->c, NCLIENTS);
  redisFree(f->redis);
  f->redis = NULL;
  return 0;
}

#define E(rw) hilock_hold_errmsg(HILOCK_HOLD(rw))

static long long zcard(fixture *f, const char *name, const char *role) {
  return hl_redis_int(f->redis, "ZCARD hilock:{%s}:rw:%s", name, role);
}

static int exists(fixture *f, const char *name, const char *role) {
  return hl_redis_int(f->redis, "EXISTS hilock:{%s}:rw:%s", name, role) > 0;
}

/* A handle on name (TTL 10 s) on each of the first three clients. */
static void three_handles(fixture *f, const char *name, hilock_rwlock **a,
                          hilock_rwlock **b, hilock_rwlock **c) {
  *a = hl_new_rwlock(f->c[0], name, 10000);
  *b = hl_new_rwlock(f->c[1], name, 10000);
  *c = hl_new_rwlock(f->c[2], name, 10000);
}

static long long read_count(fixture *f, const char *name, hilock_client *c) {
  redisReply *r = hl_redis(f->redis, "HGET hilock:{%s}:rw:counts %s:%ld",
                           name, c->id, (long)gettid());
  long long n = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
  freeReplyObject(r);
  return n;
}

static int64_t state_readers(hilock_rwlock *rw, int *writer) {
  int64_t n = -1;
  assert_hl_ok(hilock_rwlock_state(rw, &n, writer), E(rw));
  return n;
}

/* Poll (from the test) until the lock has n waiting writers. */
static void wait_intents(fixture *f, const char *name, long long n) {
  int64_t deadline = hl_now_ms() + 3000;
  while (zcard(f, name, "intents") != n) {
    if (hl_now_ms() > deadline)
      fail_msg("no %lld waiting writer(s) on %s after 3 s", n, name);
    hl_sleep_ms(5);
  }
}

/* ## A holder on its own thread ------------------------------------------
 * Identity is per thread: a job acquires, holds hold_ms, and releases on
 * the same thread. */

typedef struct job {
  hilock_rwlock *rw;
  int write;
  int64_t wait_ms;
  int64_t hold_ms; /* < 0: keep the hold (and do not release) */
  int rc, release_rc;
  int64_t t_start, t_granted, t_released;
  uint64_t fence;
  pthread_t thread;
  int running; /* started and not joined yet */
} job;

/* Jobs live in static storage and teardown joins any left running, so a
 * failed assertion never leaves a thread writing into a dead stack frame
 * or using a freed client. */
#define MAX_JOBS 16
static job jobs[MAX_JOBS];

static void *run_job(void *arg) {
  job *j = arg;
  j->t_start = hl_now_ms();
  j->rc = j->write ? hilock_rwlock_write_acquire(j->rw, j->wait_ms)
                   : hilock_rwlock_read_acquire(j->rw, j->wait_ms);
  j->t_granted = hl_now_ms();
  j->fence = hilock_hold_fence(HILOCK_HOLD(j->rw));
  if (j->rc == HILOCK_OK && j->hold_ms >= 0) {
    hl_sleep_ms(j->hold_ms);
    j->t_released = hl_now_ms();
    j->release_rc = j->write ? hilock_rwlock_write_release(j->rw)
                             : hilock_rwlock_read_release(j->rw);
  }
  return NULL;
}

static job *start_job(hilock_rwlock *rw, int write, int64_t wait_ms,
                      int64_t hold_ms) {
  int i = 0;
  job *j;
  while (i < MAX_JOBS - 1 && jobs[i].running) i++;
  j = &jobs[i];
  assert_false(j->running);
  memset(j, 0, sizeof(*j));
  j->rw = rw;
  j->write = write;
  j->wait_ms = wait_ms;
  j->hold_ms = hold_ms;
  j->rc = -1000;
  assert_int_equal(pthread_create(&j->thread, NULL, run_job, j), 0);
  j->running = 1;
  return j;
}

static void join_job(job *j) {
  if (!j->running) return;
  pthread_join(j->thread, NULL);
  j->running = 0;
}

/* Readers or writers in a continuous stream (see
 * writer_gets_in_under_a_reader_stream and
 * reader_gets_in_under_a_writer_stream). */
typedef struct stream {
  hilock_rwlock *rw;
  int write, hold_ms; /* the side it takes, and for how long */
  volatile int stop;
  int grants, errors;
  pthread_t thread;
  int running;
} stream;

#define MAX_STREAMS 4
static stream streams[MAX_STREAMS];

static void stop_stream(stream *s) {
  if (!s->running) return;
  s->stop = 1;
  pthread_join(s->thread, NULL);
  s->running = 0;
}

static void join_leftovers(void) {
  for (int i = 0; i < MAX_JOBS; i++) join_job(&jobs[i]);
  for (int i = 0; i < MAX_STREAMS; i++) stop_stream(&streams[i]);
}

/* ## Sharing and exclusion ----------------------------------------------- */

static void readers_share_and_writer_excludes(void **state) {
  fixture *f = *state;
  hilock_rwlock *r1, *r2, *w;
  int writer = -1;

  three_handles(f, "doc", &r1, &r2, &w);
  assert_hl_ok(hilock_rwlock_read_try_acquire(r1), E(r1));
  assert_hl_ok(hilock_rwlock_read_try_acquire(r2), E(r2));
  assert_int_equal(zcard(f, "doc", "readers"), 2);
  assert_int_equal(state_readers(w, &writer), 2);
  assert_false(writer);
  assert_hl_rc(hilock_rwlock_write_try_acquire(w), HILOCK_BUSY, E(w));
  assert_false(exists(f, "doc", "writer"));
  /* A try records no intent: readers are not held back by it. */
  assert_false(exists(f, "doc", "intents"));

  assert_hl_ok(hilock_rwlock_read_release(r1), E(r1));
  assert_hl_rc(hilock_rwlock_write_try_acquire(w), HILOCK_BUSY, E(w));
  assert_hl_ok(hilock_rwlock_read_release(r2), E(r2));
  assert_false(exists(f, "doc", "readers"));
  assert_false(exists(f, "doc", "counts"));

  assert_hl_ok(hilock_rwlock_write_try_acquire(w), E(w));
  assert_true(hilock_hold_fence(HILOCK_HOLD(w)) > 1000000000000000ULL);
  assert_i64_between(hilock_hold_validity_ms(HILOCK_HOLD(w)), 9000, 10000);
  assert_int_equal(state_readers(r1, &writer), 0);
  assert_true(writer);
  assert_hl_rc(hilock_rwlock_read_try_acquire(r1), HILOCK_BUSY, E(r1));
  assert_hl_rc(hilock_rwlock_write_try_acquire(r2), HILOCK_BUSY, E(r2));
  assert_false(exists(f, "doc", "readers"));

  assert_hl_ok(hilock_rwlock_write_release(w), E(w));
  assert_false(exists(f, "doc", "writer"));
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(w)), 0);
  assert_hl_ok(hilock_rwlock_read_try_acquire(r1), E(r1));
  assert_hl_ok(hilock_rwlock_read_release(r1), E(r1));
  hl_holds_free(HILOCK_HOLD(r1), HILOCK_HOLD(r2), HILOCK_HOLD(w));
}

static void reads_reenter_and_count_down(void **state) {
  fixture *f = *state;
  hilock_rwlock *r = hl_new_rwlock(f->c[0], "re", 10000);
  hilock_rwlock *same = hl_new_rwlock(f->c[0], "re", 10000); /* same thread */
  int64_t n = -1;

  for (int i = 1; i <= 3; i++) {
    assert_hl_ok(hilock_rwlock_read_try_acquire(r), E(r));
    assert_int_equal(read_count(f, "re", f->c[0]), i);
  }
  assert_hl_ok(hilock_rwlock_read_hold_count(r, &n), E(r));
  assert_int_equal(n, 3);
  /* Another handle of the same client, on the same thread, is the same
   * owner: it re-enters too. */
  assert_hl_ok(hilock_rwlock_read_acquire(same, 0), E(same));
  assert_int_equal(read_count(f, "re", f->c[0]), 4);
  assert_int_equal(zcard(f, "re", "readers"), 1);
  assert_hl_ok(hilock_rwlock_read_release(same), E(same));
  assert_int_equal(state_readers(r, NULL), 1);

  for (int i = 2; i >= 0; i--) {
    assert_hl_ok(hilock_rwlock_read_release(r), E(r));
    assert_int_equal(read_count(f, "re", f->c[0]), i);
    assert_int_equal(zcard(f, "re", "readers"), i > 0 ? 1 : 0);
    assert_int_equal(hilock_rwlock_read_validity_ms(r) > 0, i > 0);
  }
  assert_false(exists(f, "re", "readers"));
  assert_false(exists(f, "re", "counts"));
  assert_hl_rc(hilock_rwlock_read_release(r), HILOCK_ENOTOWNED, E(r));
  assert_substr(E(r), "no read lock");
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(r)), HILOCK_ENOTOWNED);
  assert_hl_ok(hilock_rwlock_read_hold_count(r, &n), E(r));
  assert_int_equal(n, 0);
  hl_holds_free(HILOCK_HOLD(r), HILOCK_HOLD(same));
}

static void writes_reenter_with_the_grants_fence(void **state) {
  fixture *f = *state;
  hilock_rwlock *w = hl_new_rwlock(f->c[0], "wre", 10000);
  hilock_rwlock *other = hl_new_rwlock(f->c[1], "wre", 10000);
  int64_t n = -1;
  uint64_t first;

  assert_hl_ok(hilock_rwlock_write_try_acquire(w), E(w));
  first = hilock_hold_fence(HILOCK_HOLD(w));
  assert_hl_ok(hilock_rwlock_write_acquire(w, 1000), E(w));
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(w)), first);
  assert_hl_ok(hilock_rwlock_write_hold_count(w, &n), E(w));
  assert_int_equal(n, 2);
  assert_hl_rc(hilock_rwlock_write_release(other), HILOCK_ENOTOWNED,
               E(other));
  assert_hl_ok(hilock_rwlock_write_release(w), E(w));
  assert_true(exists(f, "wre", "writer"));
  assert_hl_rc(hilock_rwlock_write_try_acquire(other), HILOCK_BUSY, E(other));
  assert_hl_ok(hilock_rwlock_write_release(w), E(w));
  assert_false(exists(f, "wre", "writer"));
  assert_hl_rc(hilock_rwlock_write_release(w), HILOCK_ENOTOWNED, E(w));
  assert_substr(E(w), "does not hold the write");

  assert_hl_ok(hilock_rwlock_write_try_acquire(other), E(other));
  assert_true(hilock_hold_fence(HILOCK_HOLD(other)) > first);
  /* Fences are drawn from the name's counter shared with the other lock
   * types: strictly increasing per name. */
  {
    char *v = hl_redis_get(f->redis, "hilock:{wre}:fence", 18);
    assert_non_null(v);
    assert_int_equal(strtoull(v, NULL, 10),
                     hilock_hold_fence(HILOCK_HOLD(other)));
    free(v);
  }
  hl_holds_free(HILOCK_HOLD(w), HILOCK_HOLD(other));
}

/* Count the commands the server receives from clients (not from scripts)
 * while fn runs, using MONITOR. */
static int top_level_commands(fixture *f, void (*fn)(void *), void *arg,
                              char *first, size_t n) {
  redisContext *mon = hl_redis_connect(&f->server);
  redisReply *r = hl_redis(mon, "MONITOR");
  int count = 0;
  freeReplyObject(r);
  fn(arg);
  hl_redis_ok(f->redis, "ECHO end-of-measure");
  first[0] = '\0';
  for (;;) {
    void *v = NULL;
    if (redisGetReply(mon, &v) != REDIS_OK || v == NULL)
      fail_msg("MONITOR: %s", mon->errstr);
    r = v;
    if (r->type == REDIS_REPLY_STATUS && strstr(r->str, "end-of-measure")) {
      freeReplyObject(r);
      break;
    }
    if (r->type == REDIS_REPLY_STATUS && strstr(r->str, " lua] ") == NULL) {
      if (count == 0) snprintf(first, n, "%s", r->str);
      count++;
    }
    freeReplyObject(r);
  }
  redisFree(mon);
  return count;
}

static void try_read(void *arg) {
  hilock_rwlock *rw = arg;
  assert_hl_ok(hilock_rwlock_read_acquire(rw, 1000), E(rw));
}

static void read_acquire_is_one_round_trip(void **state) {
  fixture *f = *state;
  hilock_rwlock *other = hl_new_rwlock(f->c[1], "rt", 10000);
  hilock_rwlock *rw = hl_new_rwlock(f->c[0], "rt", 10000);
  char first[512];
  /* Load the script (a first EVALSHA is answered NOSCRIPT). */
  assert_hl_ok(hilock_rwlock_read_try_acquire(other), E(other));

  assert_int_equal(top_level_commands(f, try_read, rw, first, sizeof(first)),
                   1);
  assert_substr(first, "\"EVALSHA\"");
  /* With another reader holding, still one. */
  assert_hl_ok(hilock_rwlock_read_release(rw), E(rw));
  assert_int_equal(top_level_commands(f, try_read, rw, first, sizeof(first)),
                   1);
  assert_int_equal(zcard(f, "rt", "readers"), 2);
  hl_holds_free(HILOCK_HOLD(rw), HILOCK_HOLD(other));
}

/* ## Upgrade and downgrade ----------------------------------------------- */

static void upgrade_fails_at_once_with_edeadlk(void **state) {
  fixture *f = *state;
  hilock_rwlock *rw = hl_new_rwlock(f->c[0], "up", 10000);
  hilock_rwlock *same = hl_new_rwlock(f->c[0], "up", 10000);
  int64_t t0, n = -1;

  assert_hl_ok(hilock_rwlock_read_try_acquire(rw), E(rw));
  t0 = hl_now_ms();
  assert_hl_rc(hilock_rwlock_write_acquire(rw, 5000), HILOCK_EDEADLK, E(rw));
  /* At once, not after the 5 s wait (2 s of room for a loaded machine). */
  assert_i64_between(hl_now_ms() - t0, 0, 2000);
  assert_substr(E(rw), "upgrading from read to write would deadlock");
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(rw)), HILOCK_EDEADLK);
  assert_string_equal(hilock_err_name(HILOCK_EDEADLK), "EDEADLK");
  assert_hl_rc(hilock_rwlock_write_try_acquire(rw), HILOCK_EDEADLK, E(rw));
  assert_hl_rc(hilock_rwlock_write_acquire(same, HILOCK_WAIT_FOREVER),
               HILOCK_EDEADLK, E(same));
  /* Nothing changed: the read is held, no intent holds readers back. */
  assert_hl_ok(hilock_rwlock_read_hold_count(rw, &n), E(rw));
  assert_int_equal(n, 1);
  assert_false(exists(f, "up", "writer"));
  assert_false(exists(f, "up", "intents"));
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(rw)), 0);

  assert_hl_ok(hilock_rwlock_read_release(rw), E(rw));
  assert_hl_ok(hilock_rwlock_write_try_acquire(rw), E(rw));
  assert_hl_ok(hilock_rwlock_write_release(rw), E(rw));
  hl_holds_free(HILOCK_HOLD(rw), HILOCK_HOLD(same));
}

static void downgrade_leaves_no_gap_for_a_waiting_writer(void **state) {
  fixture *f = *state;
  hilock_rwlock *rw, *w2, *r3;
  int64_t t0, n = -1;
  int writer = -1;
  job *j;

  three_handles(f, "down", &rw, &w2, &r3);
  assert_hl_ok(hilock_rwlock_write_try_acquire(rw), E(rw));
  j = start_job(w2, 1, 5000, 0);
  wait_intents(f, "down", 1);

  /* The writer's own read is granted at once, despite the waiting writer. */
  t0 = hl_now_ms();
  assert_hl_ok(hilock_rwlock_read_acquire(rw, 5000), E(rw));
  /* Not after the 5 s wait (2 s of room for a loaded machine). */
  assert_i64_between(hl_now_ms() - t0, 0, 2000);
  assert_hl_ok(hilock_rwlock_write_release(rw), E(rw));
  assert_false(exists(f, "down", "writer"));
  /* Still read-held by us: the waiting writer did not get in, and its
   * intent still holds new readers back. */
  hl_sleep_ms(150);
  assert_int_equal(j->rc, -1000);
  assert_int_equal(state_readers(r3, &writer), 1);
  assert_false(writer);
  assert_hl_ok(hilock_rwlock_read_hold_count(rw, &n), E(rw));
  assert_int_equal(n, 1);
  assert_hl_rc(hilock_rwlock_read_try_acquire(r3), HILOCK_BUSY, E(r3));

  /* The last reader out wakes it (well before the 10 s TTL). */
  t0 = hl_now_ms();
  assert_hl_ok(hilock_rwlock_read_release(rw), E(rw));
  join_job(j);
  assert_hl_ok(j->rc, E(w2));
  assert_i64_between(j->t_granted - t0, 0, 3000); /* 3 s: a loaded machine */
  assert_true(j->fence > hilock_hold_fence(HILOCK_HOLD(rw)));
  assert_hl_ok(j->release_rc, E(w2));

  /* With no writer waiting, a downgrade lets other readers in. */
  assert_hl_ok(hilock_rwlock_write_try_acquire(rw), E(rw));
  assert_hl_ok(hilock_rwlock_read_try_acquire(rw), E(rw));
  assert_hl_rc(hilock_rwlock_read_try_acquire(r3), HILOCK_BUSY, E(r3));
  assert_hl_ok(hilock_rwlock_write_release(rw), E(rw));
  assert_hl_ok(hilock_rwlock_read_try_acquire(r3), E(r3));
  assert_int_equal(zcard(f, "down", "readers"), 2);
  assert_hl_ok(hilock_rwlock_read_release(r3), E(r3));
  assert_hl_ok(hilock_rwlock_read_release(rw), E(rw));
  hl_holds_free(HILOCK_HOLD(rw), HILOCK_HOLD(w2), HILOCK_HOLD(r3));
}

/* ## Writer preference and wake-ups --------------------------------------- */

static void waiting_writer_holds_new_readers_back(void **state) {
  fixture *f = *state;
  hilock_rwlock *r1, *w, *r3;
  job *wj, *rj;

  three_handles(f, "pref", &r1, &w, &r3);
  assert_hl_ok(hilock_rwlock_read_try_acquire(r1), E(r1));
  wj = start_job(w, 1, 5000, 100);
  wait_intents(f, "pref", 1);
  /* A holder re-enters (or it would wait for the writer that waits for
   * it); a new reader queues behind the writer. */
  assert_hl_ok(hilock_rwlock_read_try_acquire(r1), E(r1));
  assert_hl_rc(hilock_rwlock_read_try_acquire(r3), HILOCK_BUSY, E(r3));
  rj = start_job(r3, 0, 5000, 0);
  hl_sleep_ms(100);
  assert_int_equal(rj->rc, -1000);

  assert_hl_ok(hilock_rwlock_read_release(r1), E(r1));
  assert_hl_ok(hilock_rwlock_read_release(r1), E(r1));
  join_job(wj);
  join_job(rj);
  assert_hl_ok(wj->rc, E(w));
  assert_hl_ok(rj->rc, E(r3));
  /* The reader got in only after the writer was done, woken by its
   * release (not by a TTL). */
  assert_true(rj->t_granted >= wj->t_released);
  assert_i64_between(rj->t_granted - wj->t_released, 0, 500);
  assert_false(exists(f, "pref", "intents"));
  hl_holds_free(HILOCK_HOLD(r1), HILOCK_HOLD(w), HILOCK_HOLD(r3));
}

static void writer_that_gives_up_withdraws_and_wakes_readers(void **state) {
  fixture *f = *state;
  hilock_rwlock *r1, *w, *r3;
  job *wj, *rj;

  three_handles(f, "quit", &r1, &w, &r3);
  assert_hl_ok(hilock_rwlock_read_try_acquire(r1), E(r1));
  wj = start_job(w, 1, 400, -1);
  wait_intents(f, "quit", 1);
  rj = start_job(r3, 0, 5000, 0);
  join_job(wj);
  assert_hl_rc(wj->rc, HILOCK_BUSY, E(w));
  assert_i64_between(wj->t_granted - wj->t_start, 390, 1000);
  /* The intent is gone, and the reader it held back was woken at once
   * (its own bound was the intent's expiry, 10 s away). */
  join_job(rj);
  assert_hl_ok(rj->rc, E(r3));
  assert_i64_between(rj->t_granted - wj->t_granted, -50, 500);
  assert_false(exists(f, "quit", "intents"));
  assert_hl_ok(hilock_rwlock_read_release(r1), E(r1));
  hl_holds_free(HILOCK_HOLD(r1), HILOCK_HOLD(w), HILOCK_HOLD(r3));
}

static void write_release_wakes_every_waiting_reader(void **state) {
  fixture *f = *state;
  enum { N = 3 };
  hilock_rwlock *w = hl_new_rwlock(f->c[0], "wakeall", 10000);
  hilock_rwlock *r[N];
  job *j[N];
  int64_t t_release;

  assert_hl_ok(hilock_rwlock_write_try_acquire(w), E(w));
  for (int i = 0; i < N; i++) {
    r[i] = hl_new_rwlock(f->c[i + 1], "wakeall", 10000);
    j[i] = start_job(r[i], 0, 5000, 1000);
  }
  for (int64_t end = hl_now_ms() + 3000;
       zcard(f, "wakeall", "waiting") != N && hl_now_ms() < end;)
    hl_sleep_ms(5);
  assert_int_equal(zcard(f, "wakeall", "waiting"), N);
  for (int i = 0; i < N; i++) assert_int_equal(j[i]->rc, -1000);
  t_release = hl_now_ms();
  assert_hl_ok(hilock_rwlock_write_release(w), E(w));
  /* All are in at once (each holds 1 s): each admitted reader woke the
   * next. */
  for (int64_t end = hl_now_ms() + 3000;
       zcard(f, "wakeall", "readers") != N && hl_now_ms() < end;)
    hl_sleep_ms(1);
  assert_int_equal(zcard(f, "wakeall", "readers"), N);
  for (int i = 0; i < N; i++) {
    join_job(j[i]);
    assert_hl_ok(j[i]->rc, E(r[i]));
    /* Woken, not by the 10 s TTL or the 5 s wait. */
    assert_i64_between(j[i]->t_granted - t_release, 0, 2000);
    assert_hl_ok(j[i]->release_rc, E(r[i]));
    hilock_hold_free(HILOCK_HOLD(r[i]));
  }
  hilock_hold_free(HILOCK_HOLD(w));
}

static void last_reader_out_wakes_the_writer(void **state) {
  fixture *f = *state;
  hilock_rwlock *r1, *r2, *w;
  int64_t t_last;
  job *wj;

  three_handles(f, "lastout", &r1, &r2, &w);
  assert_hl_ok(hilock_rwlock_read_try_acquire(r1), E(r1));
  assert_hl_ok(hilock_rwlock_read_try_acquire(r2), E(r2));
  wj = start_job(w, 1, 5000, 0);
  wait_intents(f, "lastout", 1);
  assert_hl_ok(hilock_rwlock_read_release(r1), E(r1));
  hl_sleep_ms(150);
  assert_int_equal(wj->rc, -1000);
  t_last = hl_now_ms();
  assert_hl_ok(hilock_rwlock_read_release(r2), E(r2));
  join_job(wj);
  assert_hl_ok(wj->rc, E(w));
  /* Woken by the release: its own bound was 10/3 s (intent refresh); 2 s
   * leaves room for a loaded machine. */
  assert_i64_between(wj->t_granted - t_last, 0, 2000);
  hl_holds_free(HILOCK_HOLD(r1), HILOCK_HOLD(r2), HILOCK_HOLD(w));
}

/* A stream's thread: take its side, hold it, give it back, until stopped. */
static void *stream_main(void *arg) {
  stream *s = arg;
  while (!s->stop) {
    int rc = s->write ? hilock_rwlock_write_acquire(s->rw, 5000)
                      : hilock_rwlock_read_acquire(s->rw, 5000);
    if (rc != HILOCK_OK) {
      s->errors++;
      continue;
    }
    s->grants++;
    hl_sleep_ms(s->hold_ms);
    rc = s->write ? hilock_rwlock_write_release(s->rw)
                  : hilock_rwlock_read_release(s->rw);
    if (rc != HILOCK_OK) s->errors++;
  }
  return NULL;
}

static void start_stream(stream *s, hilock_rwlock *rw, int write, int hold_ms) {
  memset(s, 0, sizeof(*s));
  s->rw = rw;
  s->write = write;
  s->hold_ms = hold_ms;
  assert_int_equal(pthread_create(&s->thread, NULL, stream_main, s), 0);
  s->running = 1;
}

/* Readers in a continuous stream: every moment some reader holds. A writer
 * that only tries never gets in; a waiting writer's intent lets the
 * current readers drain and gets it promptly. */

static void writer_gets_in_under_a_reader_stream(void **state) {
  fixture *f = *state;
  enum { N = 3 };
  stream *s = streams;
  hilock_rwlock *w = hl_new_rwlock(f->c[N], "stream", 10000);
  int busy = 0, before[N];
  int64_t t0, waited;

  for (int i = 0; i < N; i++) {
    start_stream(&s[i], hl_new_rwlock(f->c[i], "stream", 10000), 0, 40);
    hl_sleep_ms(13); /* staggered: their holds overlap */
  }
  hl_sleep_ms(100);
  /* Without an intent (try only) the writer never finds it free. */
  for (int i = 0; i < 30; i++) {
    int rc = hilock_rwlock_write_try_acquire(w);
    assert_true(rc == HILOCK_BUSY || rc == HILOCK_OK);
    busy += rc == HILOCK_BUSY;
    if (rc == HILOCK_OK) hilock_rwlock_write_release(w);
    hl_sleep_ms(7);
  }
  assert_int_equal(busy, 30);
  for (int i = 0; i < N; i++) before[i] = s[i].grants;

  t0 = hl_now_ms();
  assert_hl_ok(hilock_rwlock_write_acquire(w, 5000), E(w));
  waited = hl_now_ms() - t0;
  print_message("      writer's wait under a stream of %d readers "
                "(40 ms holds): %" PRId64 " ms\n", N, waited);
  /* At most the longest read hold in progress, plus round trips. */
  assert_i64_between(waited, 0, 400);
  assert_int_equal(state_readers(w, NULL), 0);
  hl_sleep_ms(50);
  assert_int_equal(state_readers(w, NULL), 0);
  assert_hl_ok(hilock_rwlock_write_release(w), E(w));
  hl_sleep_ms(150);
  for (int i = 0; i < N; i++) {
    stop_stream(&s[i]);
    assert_int_equal(s[i].errors, 0);
    assert_true(s[i].grants > before[i]); /* readers resumed */
    hilock_hold_free(HILOCK_HOLD(s[i].rw));
  }
  hilock_hold_free(HILOCK_HOLD(w));
}

/* Writers in a continuous stream: one holds while the other waits, so
 * there is always a writer's intent. Under plain writer preference no
 * reader would ever get in; readers that wait are admitted as a batch at
 * the next write release. */
static void reader_gets_in_under_a_writer_stream(void **state) {
  fixture *f = *state;
  enum { N = 2 };
  stream *ws = streams;
  hilock_rwlock *r = hl_new_rwlock(f->c[N], "wstream", 10000);
  int64_t t0, waited, total = 0;

  for (int i = 0; i < N; i++)
    start_stream(&ws[i], hl_new_rwlock(f->c[i], "wstream", 10000), 1, 30);
  hl_sleep_ms(150);
  for (int round = 0; round < 5; round++) {
    t0 = hl_now_ms();
    if (hilock_rwlock_read_acquire(r, 3000) != HILOCK_OK) {
      for (int i = 0; i < N; i++) stop_stream(&ws[i]);
      fail_msg("round %d: the reader starved behind the writers", round);
    }
    waited = hl_now_ms() - t0;
    total += waited;
    assert_hl_ok(hilock_rwlock_read_release(r), E(r));
    hl_sleep_ms(20);
    /* At most the write in progress and one more, plus round trips. */
    if (waited > 400) {
      for (int i = 0; i < N; i++) stop_stream(&ws[i]);
      fail_msg("round %d: the reader waited %" PRId64 " ms", round, waited);
    }
  }
  {
    /* The stream ran: writes went on all along. (Which writer wins each
     * round is not promised: the plain read-write lock lets a releasing
     * writer take it straight back.) */
    int grants = 0;
    for (int i = 0; i < N; i++) {
      stop_stream(&ws[i]);
      assert_int_equal(ws[i].errors, 0);
      grants += ws[i].grants;
      hilock_hold_free(HILOCK_HOLD(ws[i].rw));
    }
    assert_true(grants >= 6);
  }
  print_message("      reader's mean wait under a stream of %d writers "
                "(30 ms holds): %" PRId64 " ms\n", N, total / 5);
  hilock_hold_free(HILOCK_HOLD(r));
}

/* ## Crashes: real processes killed with SIGKILL --------------------------- */

typedef struct rw_holder {
  const char *name;
  int64_t ttl;
  int as_writer, renew, wait_only;
  int fd; /* write end: 'w' when about to wait, 'h' once holding */
} rw_holder;

/* A child with its own client and rwlock: takes a hold (or, wait_only,
 * waits for one), says so on fd, and waits to be killed. */
static int hold_or_wait_until_killed(hilock_client *c, void *arg) {
  rw_holder *k = arg;
  hilock_rwlock *rw = NULL;
  int rc;
  if (hilock_rwlock_new(c, k->name, strlen(k->name), k->ttl, &rw) != HILOCK_OK)
    return 2;
  if (k->renew) {
    hilock_rwlock_read_set_auto_renew(rw, 1, 0, NULL, NULL);
    hilock_hold_set_auto_renew(HILOCK_HOLD(rw), 1, 0, NULL, NULL);
  }
  if (k->wait_only) {
    (void)!write(k->fd, "w", 1);
    rc = k->as_writer ? hilock_rwlock_write_acquire(rw, HILOCK_WAIT_FOREVER)
                      : hilock_rwlock_read_acquire(rw, HILOCK_WAIT_FOREVER);
    return rc == HILOCK_OK ? 3 : 4;
  }
  rc = k->as_writer ? hilock_rwlock_write_try_acquire(rw)
                    : hilock_rwlock_read_try_acquire(rw);
  if (rc != HILOCK_OK) return 5;
  (void)!write(k->fd, "h", 1);
  for (;;) pause();
}

/* Fork a child that makes its own client and rwlock, takes a hold (or
 * waits for one), and waits to be killed; returns once it has. */
static pid_t fork_holder(fixture *f, const char *name, int64_t ttl,
                         int as_writer, int renew, int wait_only) {
  rw_holder k = {name, ttl, as_writer, renew, wait_only, -1};
  hl_with_client w = {f->server.url, hold_or_wait_until_killed, &k};
  char b;
  return hl_fork_ready(hl_run_with_client, &w, &k.fd, &b, 1);
}

static void kill_child(pid_t pid) {
  int status;
  kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  assert_true(WIFSIGNALED(status));
}

static void crashed_reader_frees_its_share_within_ttl(void **state) {
  fixture *f = *state;
  hilock_rwlock *w = hl_new_rwlock(f->c[0], "crash", 10000);
  int64_t t_kill, waited;
  pid_t child = fork_holder(f, "crash", 600, 0, 1, 0);

  /* Renewed past its TTL while the process lives. */
  hl_sleep_ms(900);
  assert_hl_rc(hilock_rwlock_write_try_acquire(w), HILOCK_BUSY, E(w));
  assert_int_equal(zcard(f, "crash", "readers"), 1);
  kill_child(child);
  t_kill = hl_now_ms();
  assert_hl_ok(hilock_rwlock_write_acquire(w, 3000), E(w));
  waited = hl_now_ms() - t_kill;
  /* The share lapses at the reader's expiry: between 2/3 of a TTL (just
   * renewed) and a TTL after the kill; the writer sleeps exactly that. */
  assert_i64_between(waited, 250, 600 + 300);
  assert_int_equal(zcard(f, "crash", "readers"), 0);
  assert_false(exists(f, "crash", "counts"));
  hilock_hold_free(HILOCK_HOLD(w));
}

static void dead_waiting_writer_holds_readers_back_for_one_ttl(void **state) {
  fixture *f = *state;
  hilock_rwlock *r1 = hl_new_rwlock(f->c[0], "ghost", 10000);
  hilock_rwlock *r2 = hl_new_rwlock(f->c[1], "ghost", 10000);
  int64_t t_kill, waited;
  pid_t child;

  assert_hl_ok(hilock_rwlock_read_try_acquire(r1), E(r1));
  child = fork_holder(f, "ghost", 600, 1, 0, 1);
  wait_intents(f, "ghost", 1);
  /* The live waiter refreshes its intent: still there after its TTL. */
  hl_sleep_ms(900);
  assert_int_equal(zcard(f, "ghost", "intents"), 1);
  assert_hl_rc(hilock_rwlock_read_try_acquire(r2), HILOCK_BUSY, E(r2));
  kill_child(child);
  t_kill = hl_now_ms();
  assert_hl_ok(hilock_rwlock_read_acquire(r2, 3000), E(r2));
  waited = hl_now_ms() - t_kill;
  /* Refreshed every ttl/3 (200 ms), it lapses 400..600 ms after the kill. */
  assert_i64_between(waited, 250, 600 + 300);
  assert_int_equal(zcard(f, "ghost", "readers"), 2);
  hl_holds_free(HILOCK_HOLD(r1), HILOCK_HOLD(r2));
}

static void crashed_writer_frees_within_ttl(void **state) {
  fixture *f = *state;
  hilock_rwlock *r = hl_new_rwlock(f->c[0], "wcrash", 10000);
  int64_t t_kill;
  pid_t child = fork_holder(f, "wcrash", 500, 1, 1, 0);
  /* Renewed past its TTL while the process lives. */
  hl_sleep_ms(700);
  assert_hl_rc(hilock_rwlock_read_try_acquire(r), HILOCK_BUSY, E(r));
  kill_child(child);
  t_kill = hl_now_ms();
  assert_hl_ok(hilock_rwlock_read_acquire(r, 3000), E(r));
  /* The dead writer's 500 ms TTL, with room for a loaded machine. */
  assert_i64_between(hl_now_ms() - t_kill, 0, 500 + 1500);
  hilock_hold_free(HILOCK_HOLD(r));
}

static void reader_that_gives_up_withdraws(void **state) {
  fixture *f = *state;
  hilock_rwlock *w = hl_new_rwlock(f->c[0], "rquit", 10000);
  hilock_rwlock *r = hl_new_rwlock(f->c[1], "rquit", 10000);
  int64_t t0;
  assert_hl_ok(hilock_rwlock_write_try_acquire(w), E(w));
  /* A try records nothing. */
  assert_hl_rc(hilock_rwlock_read_try_acquire(r), HILOCK_BUSY, E(r));
  assert_false(exists(f, "rquit", "waiting"));
  t0 = hl_now_ms();
  assert_hl_rc(hilock_rwlock_read_acquire(r, 300), HILOCK_BUSY, E(r));
  /* Its 300 ms bound, not the writer's 10 s TTL; 1.7 s of room. */
  assert_i64_between(hl_now_ms() - t0, 290, 2000);
  /* Gone from the waiting readers: the release admits nobody. */
  assert_false(exists(f, "rquit", "waiting"));
  assert_hl_ok(hilock_rwlock_write_release(w), E(w));
  assert_false(exists(f, "rquit", "admitted"));
  hl_holds_free(HILOCK_HOLD(w), HILOCK_HOLD(r));
}

static void dead_waiting_reader_delays_the_next_writer_one_ttl(void **state) {
  fixture *f = *state;
  hilock_rwlock *w1 = hl_new_rwlock(f->c[0], "rghost", 10000);
  hilock_rwlock *w2 = hl_new_rwlock(f->c[1], "rghost", 10000);
  int64_t t_release;
  pid_t child;
  job *wj;

  assert_hl_ok(hilock_rwlock_write_try_acquire(w1), E(w1));
  child = fork_holder(f, "rghost", 600, 0, 0, 1);
  {
    int64_t deadline = hl_now_ms() + 3000;
    while (zcard(f, "rghost", "waiting") != 1 && hl_now_ms() < deadline)
      hl_sleep_ms(5);
  }
  assert_int_equal(zcard(f, "rghost", "waiting"), 1);
  hl_sleep_ms(900); /* the live waiter refreshes its place */
  assert_int_equal(zcard(f, "rghost", "waiting"), 1);
  wj = start_job(w2, 1, 5000, 0);
  wait_intents(f, "rghost", 1);
  kill_child(child);
  t_release = hl_now_ms();
  assert_hl_ok(hilock_rwlock_write_release(w1), E(w1));
  /* The dead reader was admitted ahead of w2, which waits for it until its
   * place lapses: 400..600 ms after the kill. */
  assert_int_equal(zcard(f, "rghost", "admitted"), 1);
  join_job(wj);
  assert_hl_ok(wj->rc, E(w2));
  assert_i64_between(wj->t_granted - t_release, 250, 600 + 1500);
  assert_false(exists(f, "rghost", "admitted"));
  hl_holds_free(HILOCK_HOLD(w1), HILOCK_HOLD(w2));
}

/* ## Renewal and loss ------------------------------------------------------ */

/* Renewal moves a reader's expiry to one TTL ahead, and the readers' key
 * with it: never further (renewal as such: test_contract.c). */
static void renewed_read_keeps_the_readers_key_at_one_ttl(void **state) {
  fixture *f = *state;
  hilock_rwlock *rw = hl_new_rwlock(f->c[0], "renew", 300);
  redisReply *r;

  assert_hl_ok(hilock_rwlock_read_set_auto_renew(rw, 1, 0, NULL, NULL), E(rw));
  assert_hl_ok(hilock_rwlock_read_try_acquire(rw), E(rw));
  hl_sleep_ms(1000);
  assert_i64_between(hilock_rwlock_read_validity_ms(rw), 1, 300);
  r = hl_redis(f->redis, "PTTL hilock:{renew}:rw:readers");
  assert_i64_between(r->integer, 1, 300);
  freeReplyObject(r);
  assert_hl_ok(hilock_rwlock_read_release(rw), E(rw));
  assert_false(exists(f, "renew", "readers"));
  hilock_hold_free(HILOCK_HOLD(rw));
}

/* The read and the write hold of one handle are each reported lost through
 * the same callback, and a read hold's loss ends with its release. */
static void lost_holds_are_reported(void **state) {
  fixture *f = *state;
  hilock_rwlock *rw = hl_new_rwlock(f->c[0], "gone", 300);
  atomic_int lost = 0;
  int64_t deadline;

  assert_hl_ok(hilock_rwlock_read_set_auto_renew(rw, 1, 0, hl_count_call,
                                                 &lost),
               E(rw));
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(rw), 1, 0, hl_count_call,
                                          &lost),
               E(rw));
  assert_hl_ok(hilock_rwlock_read_try_acquire(rw), E(rw));
  hl_redis_ok(f->redis, "DEL hilock:{gone}:rw:readers");
  deadline = hl_now_ms() + 2000;
  while (atomic_load(&lost) == 0 && hl_now_ms() < deadline)
    hl_sleep_ms(10);
  assert_int_equal(lost, 1);
  assert_true(hilock_rwlock_read_lost(rw));
  assert_int_equal(hilock_rwlock_read_validity_ms(rw), 0);
  assert_hl_rc(hilock_rwlock_read_release(rw), HILOCK_ENOTOWNED, E(rw));
  /* The failed release ends the grant; the loss stays reported until the
   * thread's next read grant. */
  assert_true(hilock_rwlock_read_lost(rw));

  assert_hl_ok(hilock_rwlock_write_try_acquire(rw), E(rw));
  hl_redis_ok(f->redis, "DEL hilock:{gone}:rw:writer");
  deadline = hl_now_ms() + 2000;
  while (atomic_load(&lost) == 1 && hl_now_ms() < deadline)
    hl_sleep_ms(10);
  assert_int_equal(lost, 2);
  assert_true(hilock_hold_lost(HILOCK_HOLD(rw)));
  assert_hl_rc(hilock_rwlock_write_release(rw), HILOCK_ENOTOWNED, E(rw));
  assert_true(hilock_hold_lost(HILOCK_HOLD(rw)));
  assert_hl_ok(hilock_rwlock_read_try_acquire(rw), E(rw));
  assert_false(hilock_rwlock_read_lost(rw));
  assert_hl_ok(hilock_rwlock_read_release(rw), E(rw));
  hilock_hold_free(HILOCK_HOLD(rw));
}

/* ## Threads and fork ------------------------------------------------------ */

static void threads_sharing_a_handle_are_separate_owners(void **state) {
  fixture *f = *state;
  hilock_rwlock *rw = hl_new_rwlock(f->c[0], "shared", 10000);
  job *j;

  assert_hl_ok(hilock_rwlock_write_try_acquire(rw), E(rw));
  /* Another thread, same handle: excluded, and cannot release it. */
  j = start_job(rw, 0, 0, 0);
  join_job(j);
  assert_hl_rc(j->rc, HILOCK_BUSY, E(rw));
  j = start_job(rw, 1, 100, 0);
  join_job(j);
  assert_hl_rc(j->rc, HILOCK_BUSY, E(rw));
  assert_true(exists(f, "shared", "writer"));
  assert_hl_ok(hilock_rwlock_write_release(rw), E(rw));

  /* Two threads read through one handle at once. */
  assert_hl_ok(hilock_rwlock_read_try_acquire(rw), E(rw));
  j = start_job(rw, 0, 0, 100);
  hl_sleep_ms(50);
  assert_int_equal(zcard(f, "shared", "readers"), 2);
  join_job(j);
  assert_hl_ok(j->rc, E(rw));
  assert_hl_ok(j->release_rc, E(rw));
  assert_int_equal(zcard(f, "shared", "readers"), 1);
  assert_true(hilock_rwlock_read_validity_ms(rw) > 0);
  assert_hl_ok(hilock_rwlock_read_release(rw), E(rw));
  hilock_hold_free(HILOCK_HOLD(rw));
}

static void forked_child_refuses_the_parents_holds(void **state) {
  fixture *f = *state;
  hilock_rwlock *rw = hl_new_rwlock(f->c[0], "fork", 10000);
  int status;
  pid_t pid;

  assert_hl_ok(hilock_rwlock_write_try_acquire(rw), E(rw));
  assert_hl_ok(hilock_rwlock_read_try_acquire(rw), E(rw));
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int code = 0;
    if (hilock_rwlock_read_release(rw) != HILOCK_EFORKED) code |= 1;
    if (hilock_rwlock_write_release(rw) != HILOCK_EFORKED) code |= 2;
    if (hilock_rwlock_read_validity_ms(rw) != 0) code |= 4;
    if (hilock_hold_validity_ms(HILOCK_HOLD(rw)) != 0) code |= 8;
    /* The child is another owner: the parent's write keeps it out. */
    if (hilock_rwlock_read_try_acquire(rw) != HILOCK_BUSY) code |= 16;
    _exit(code);
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_true(exists(f, "fork", "writer"));
  assert_int_equal(zcard(f, "fork", "readers"), 1);
  assert_hl_ok(hilock_rwlock_write_release(rw), E(rw));
  assert_hl_ok(hilock_rwlock_read_release(rw), E(rw));
  hilock_hold_free(HILOCK_HOLD(rw));
}

/* The parent's renewal thread sleeps on its condition variable when the
 * process forks; the child must still be able to free the client (the
 * inherited condition variable counts a waiter that does not exist in the
 * child). */
static void forked_child_frees_a_client_with_a_sleeping_watchdog(
    void **state) {
  fixture *f = *state;
  hilock_client *c = hl_client(f->server.url, NULL);
  hilock_rwlock *rw = hl_new_rwlock(c, "sleeper", 30000);

  assert_hl_ok(hilock_rwlock_read_set_auto_renew(rw, 1, 0, NULL, NULL), E(rw));
  assert_hl_ok(hilock_rwlock_read_try_acquire(rw), E(rw));
  hl_sleep_ms(50); /* the renewal thread is asleep until ttl/3 */
  /* A child that hangs is killed after 5 s, which fails the test. */
  assert_int_equal(hl_fork_free_client(c, HILOCK_HOLD(rw), 5000), 0);
  assert_hl_ok(hilock_rwlock_read_release(rw), E(rw));
  hilock_hold_free(HILOCK_HOLD(rw));
  hilock_client_free(c);
}

/* ## History of contending processes --------------------------------------- */

#define HIST_MAX 4096

/* A process of its own that reads or writes until until_ms, recording each
 * hold on the shared history's sequence. */
static void contender(fixture *f, hl_history *h, int write, int64_t until_ms) {
  hilock_client *c;
  hilock_rwlock *rw = NULL;
  unsigned seed = (unsigned)getpid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if ((c = hl_child_client(f->server.url)) == NULL ||
      hilock_rwlock_new(c, "hist", 4, 5000, &rw) != HILOCK_OK)
    _exit(2);
  while (hl_now_ms() < until_ms) {
    int64_t s, e;
    int rc = write ? hilock_rwlock_write_acquire(rw, 5000)
                   : hilock_rwlock_read_acquire(rw, 5000);
    if (rc != HILOCK_OK) _exit(3);
    s = hl_history_tick(h);
    hl_sleep_ms(write ? 2 : 3 + rand_r(&seed) % 5);
    e = hl_history_tick(h);
    rc = write ? hilock_rwlock_write_release(rw)
               : hilock_rwlock_read_release(rw);
    if (rc != HILOCK_OK) _exit(4);
    hl_history_add(h, !write, s, e);
    hl_sleep_ms(write ? 15 : rand_r(&seed) % 3);
  }
  hilock_hold_free(HILOCK_HOLD(rw));
  hilock_client_free(c);
  _exit(0);
}

static void contending_processes_readers_overlap_writers_exclude(
    void **state) {
  fixture *f = *state;
  enum { READERS = 3, WRITERS = 2 };
  hl_history *h = hl_history_new(HIST_MAX);
  pid_t pids[READERS + WRITERS];
  int64_t until = hl_now_ms() + 1500;
  int pairs, writes = 0, readers_seen = 0, n;

  fflush(NULL);
  for (int i = 0; i < READERS + WRITERS; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) contender(f, h, i >= READERS, until);
  }
  for (int i = 0; i < READERS + WRITERS; i++) {
    int status;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  n = hl_history_len(h);
  for (int i = 0; i < n; i++) {
    writes += !h->span[i].shared;
    readers_seen += h->span[i].shared;
  }
  print_message("      history: %d read and %d write windows\n",
                readers_seen, writes);
  assert_true(writes >= 10);
  assert_true(readers_seen >= 30);
  assert_int_equal(hl_history_check(h->span, (size_t)n, 0, &pairs), 0);
  /* Readers really shared it. */
  assert_true(pairs >= 5);
  hl_history_free(h);
}

/* ## Arguments and damaged keys -------------------------------------------- */

static void bad_arguments_are_einval(void **state) {
  fixture *f = *state;
  hilock_rwlock *rw = NULL;
  int64_t n;
  char sentinel;
  hilock_rwlock *out = (hilock_rwlock *)&sentinel;

  assert_int_equal(hilock_rwlock_new(NULL, "x", 1, 1000, &out), HILOCK_EINVAL);
  assert_null(out);
  assert_int_equal(hilock_rwlock_new(f->c[0], "x", 1, 1000, NULL),
                   HILOCK_EINVAL);
  hl_assert_bad_names_refused(f->c[0], hl_rwlock_new_hold);
  assert_int_equal(hilock_rwlock_new(f->c[0], "x", 1, 0, &out), HILOCK_EINVAL);
  assert_substr(hilock_client_errmsg(f->c[0]), "ttl");
  assert_null(out);

  assert_int_equal(hilock_rwlock_read_hold_count(NULL, &n), HILOCK_EINVAL);
  assert_int_equal(hilock_rwlock_state(NULL, &n, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_rwlock_read_validity_ms(NULL), 0);
  hilock_hold_free(NULL);

  rw = hl_new_rwlock(f->c[0], "args", 1000);
  assert_int_equal(hilock_rwlock_read_hold_count(rw, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_rwlock_read_acquire(rw, -5), HILOCK_EINVAL);
  assert_int_equal(hilock_rwlock_write_acquire(rw, -5), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_set_auto_renew(HILOCK_HOLD(rw), 1, -1, NULL, NULL),
                   HILOCK_EINVAL);
  assert_false(exists(f, "args", "intents"));
  assert_string_equal(hilock_rwlock_key(rw, 1, NULL), "hilock:{args}:rw:writer");
  assert_string_equal(hilock_rwlock_key(rw, 0, NULL),
                      "hilock:{args}:rw:readers");
  assert_int_equal(hilock_hold_ttl_ms(HILOCK_HOLD(rw)), 1000);
  hilock_hold_free(HILOCK_HOLD(rw));
}

static void wrong_type_keys_fail_closed(void **state) {
  fixture *f = *state;
  hilock_rwlock *rw = hl_new_rwlock(f->c[0], "wt", 5000);
  hl_redis_ok(f->redis, "SET hilock:{wt}:rw:writer oops");
  assert_hl_rc(hilock_rwlock_read_try_acquire(rw), HILOCK_EWRONGTYPE, E(rw));
  assert_hl_rc(hilock_rwlock_write_acquire(rw, 100), HILOCK_EWRONGTYPE, E(rw));
  assert_substr(E(rw), "WRONGTYPE");
  assert_int_equal(hilock_rwlock_read_validity_ms(rw), 0);
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(rw)), 0);
  assert_false(exists(f, "wt", "readers"));
  hl_redis_ok(f->redis, "FLUSHALL");
  hl_redis_ok(f->redis, "SET hilock:{wt}:fence not-a-number");
  assert_hl_rc(hilock_rwlock_write_try_acquire(rw), HILOCK_EWRONGTYPE, E(rw));
  assert_substr(E(rw), "hilock:{wt}:fence holds no integer");
  assert_false(exists(f, "wt", "writer"));
  hilock_hold_free(HILOCK_HOLD(rw));
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

HL_SUITE_MAIN("rwlock", group_setup, group_teardown,
      T(readers_share_and_writer_excludes),
      T(reads_reenter_and_count_down),
      T(writes_reenter_with_the_grants_fence),
      T(read_acquire_is_one_round_trip),
      T(upgrade_fails_at_once_with_edeadlk),
      T(downgrade_leaves_no_gap_for_a_waiting_writer),
      T(waiting_writer_holds_new_readers_back),
      T(writer_that_gives_up_withdraws_and_wakes_readers),
      T(write_release_wakes_every_waiting_reader),
      T(last_reader_out_wakes_the_writer),
      T(writer_gets_in_under_a_reader_stream),
      T(reader_gets_in_under_a_writer_stream),
      T(crashed_reader_frees_its_share_within_ttl),
      T(dead_waiting_writer_holds_readers_back_for_one_ttl),
      T(crashed_writer_frees_within_ttl),
      T(reader_that_gives_up_withdraws),
      T(dead_waiting_reader_delays_the_next_writer_one_ttl),
      T(renewed_read_keeps_the_readers_key_at_one_ttl),
      T(lost_holds_are_reported),
      T(threads_sharing_a_handle_are_separate_owners),
      T(forked_child_refuses_the_parents_holds),
      T(forked_child_frees_a_client_with_a_sleeping_watchdog),
      T(contending_processes_readers_overlap_writers_exclude),
      T(bad_arguments_are_einval),
      T(wrong_type_keys_fail_closed))
