/* Misuse and the defects a user found: closing a client while other
 * threads are inside calls, closing with locks held, one Redlock node
 * listed twice, caller timeouts that must bound the whole call, replies
 * that come too late, fence counters lost to FLUSHALL, a restart or an
 * eviction, TTLs too short to be valid, empty passwords and maxclients. */
#include "test_util.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

typedef hl_fixture fixture;

static int rounds(void) {
  const char *s = getenv("HILOCK_MISUSE_ROUNDS");
  return s != NULL && atoi(s) > 0 ? atoi(s) : 6;
}

static int teardown(void **state) {
  fixture *f = *state;
  hl_redis_ok(f->redis, "CLIENT UNPAUSE"); /* after a failed pause test */
  hl_redis_ok(f->redis, "CONFIG SET maxclients 10000");
  hl_redis_ok(f->redis, "CONFIG SET maxmemory 0");
  hl_redis_ok(f->redis, "CONFIG SET maxmemory-policy noeviction");
  return hl_teardown(state);
}

/* ## A concurrent close ------------------------------------------------------
 * One thread is inside a call (the server is held in DEBUG SLEEP so the call
 * waits for its reply) while another frees the client. The call completes
 * or fails with HILOCK_ECLOSED; nothing is freed under it (ASan, valgrind). */

enum { OP_PING, OP_ACQUIRE, OP_WAIT, OP_RELEASE, OP_RENEWAL, OP_COUNT };

typedef struct racer {
  hilock_client *client;
  hilock_lock *lock;
  int op;
  atomic_int started;
  atomic_long tid;
  int rc;
} racer;

/* Wait (up to 5 s) until thread tid sleeps in a system call that waits for
 * the network (poll, recvfrom, read): inside its call on the client, past
 * the point where the call takes its reference. Freeing the client before
 * that would be a call started after the free, which the API forbids. */
static void wait_inside(long tid) {
  char path[64], buf[64];
  snprintf(path, sizeof(path), "/proc/self/task/%ld/syscall", tid);
  for (int64_t end = hl_now_ms() + 5000; hl_now_ms() < end; hl_sleep_ms(1)) {
    FILE *fp = fopen(path, "r");
    long nr = -1;
    if (fp == NULL) return;
    if (fgets(buf, sizeof(buf), fp) != NULL) nr = atol(buf);
    fclose(fp);
    if (nr == SYS_poll || nr == SYS_ppoll || nr == SYS_recvfrom || nr == SYS_read)
      return;
  }
}

typedef struct sleeper {
  const hl_server *server;
  int ms;
} sleeper;

static void *server_sleep(void *arg) {
  sleeper *s = arg;
  redisContext *c = hl_redis_connect(s->server);
  redisReply *r = redisCommand(c, "DEBUG SLEEP %.3f", s->ms / 1000.0);
  if (r != NULL) freeReplyObject(r);
  redisFree(c);
  return NULL;
}

/* Put the server to sleep for s->ms from a thread of its own (join it),
 * and give it after_ms to fall asleep. */
static pthread_t put_to_sleep(sleeper *s, int64_t after_ms) {
  pthread_t st;
  assert_int_equal(pthread_create(&st, NULL, server_sleep, s), 0);
  hl_sleep_ms(after_ms);
  return st;
}

/* A client on server whose commands time out after timeout_ms. */
static hilock_client *client_timing_out(const hl_server *server,
                                        int64_t timeout_ms) {
  hilock_options o = hl_test_options();
  o.command_timeout_ms = timeout_ms;
  return hl_client(server->url, &o);
}

static void *race(void *arg) {
  racer *r = arg;
  atomic_store(&r->tid, (long)syscall(SYS_gettid));
  atomic_store(&r->started, 1);
  switch (r->op) {
    case OP_PING:
      r->rc = hilock_client_ping(r->client);
      break;
    case OP_ACQUIRE:
      r->rc = hilock_hold_try_acquire(HILOCK_HOLD(r->lock));
      break;
    case OP_WAIT: /* another handle holds it: this one waits */
      r->rc = hilock_hold_acquire(HILOCK_HOLD(r->lock), 5000);
      break;
    case OP_RELEASE:
      r->rc = hilock_hold_release(HILOCK_HOLD(r->lock));
      break;
    case OP_RENEWAL: /* the renewal thread is mid-batch */
      hl_sleep_ms(150);
      r->rc = HILOCK_OK;
      break;
  }
  return NULL;
}

static void concurrent_close_never_frees_under_a_call(void **state) {
  fixture *f = *state;
  for (int op = 0; op < OP_COUNT; op++) {
    for (int i = 0; i < rounds(); i++) {
      hilock_client *c = hl_client(f->server.url, NULL);
      char name[32];
      hilock_lock *l, *holder = NULL;
      snprintf(name, sizeof(name), "race-%d-%d", op, i);
      /* A lock handle keeps the client's memory alive: ping has none. */
      l = op == OP_PING ? NULL
                        : hl_new_lock(c, name, op == OP_RENEWAL ? 90 : 5000);
      racer r = {c, l, op, 0, 0, 0};
      sleeper s = {&f->server, 120};
      pthread_t t, st;
      if (op == OP_WAIT) {
        holder = hl_new_lock(c, name, 5000);
        assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(holder)),
                     hilock_hold_errmsg(HILOCK_HOLD(holder)));
      }
      if (op == OP_RELEASE || op == OP_RENEWAL)
        assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
      if (op == OP_RENEWAL)
        assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(l), 1, 0, NULL, NULL),
                     hilock_hold_errmsg(HILOCK_HOLD(l)));
      st = put_to_sleep(&s, 20); /* the server is asleep now */
      assert_int_equal(pthread_create(&t, NULL, race, &r), 0);
      while (!atomic_load(&r.started)) hl_sleep_ms(1);
      if (op != OP_RENEWAL) wait_inside(atomic_load(&r.tid));
      hl_sleep_ms(10 + 10 * (i % 4)); /* inside the call */
      hilock_client_free(c);
      pthread_join(t, NULL);
      pthread_join(st, NULL);
      if (r.rc != HILOCK_OK && r.rc != HILOCK_ECLOSED &&
          r.rc != HILOCK_BUSY)
        fail_msg("op %d round %d: %d (%s)", op, i, r.rc,
                 op == OP_PING ? "ping" : hilock_hold_errmsg(HILOCK_HOLD(l)));
      if (op == OP_RENEWAL) assert_true(hilock_hold_lost(HILOCK_HOLD(l)));
      hl_holds_free(HILOCK_HOLD(holder), HILOCK_HOLD(l));
    }
  }
}

/* ## Closing with locks held ------------------------------------------------ */

static atomic_int lost_calls;

static void close_stops_renewal_and_releases_holds(void **state) {
  fixture *f = *state;
  hilock_client *c = hl_client(f->server.url, NULL), *other;
  hilock_lock *l = hl_new_lock(c, "held", 1000), *next;
  hilock_semaphore *s = NULL;
  hilock_fair_lock *fl = NULL;
  hilock_rlock *rl = NULL;
  atomic_store(&lost_calls, 0);
  assert_hl_ok(hilock_semaphore_new(c, "sem", 3, 2, 1000, &s),
               hilock_client_errmsg(c));
  assert_hl_ok(hilock_fair_lock_new(c, "fair", 4, 1000, &fl),
               hilock_client_errmsg(c));
  assert_hl_ok(hilock_rlock_new(c, "re", 2, 1000, &rl),
               hilock_client_errmsg(c));
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(l), 1, 0, hl_count_call,
                                          &lost_calls),
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(s), 1, 0, hl_count_call,
                                          &lost_calls),
               hilock_hold_errmsg(HILOCK_HOLD(s)));
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(rl), 1, 0, hl_count_call,
                                          &lost_calls),
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(s)), hilock_hold_errmsg(HILOCK_HOLD(s)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(fl)), hilock_hold_errmsg(HILOCK_HOLD(fl)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));

  hilock_client_free(c);
  /* Every hold reports the loss; those renewed told their callbacks. */
  assert_true(hilock_hold_lost(HILOCK_HOLD(l)));
  assert_true(hilock_hold_lost(HILOCK_HOLD(s)));
  assert_true(hilock_hold_lost(HILOCK_HOLD(fl)));
  assert_true(hilock_hold_lost(HILOCK_HOLD(rl)));
  assert_int_equal(atomic_load(&lost_calls), 3);
  /* Released at once: the lock, the permit, the fair lock's holder, and
   * the reentrant lock with both its entries. */
  assert_false(hl_redis_exists(f->redis, "hilock:{held}:lock", 18));
  assert_int_equal(hl_redis_int(f->redis, "ZCARD hilock:{sem}:permits"), 0);
  assert_false(hl_redis_exists(f->redis, "hilock:{fair}:fair", 18));
  assert_false(hl_redis_exists(f->redis, "hilock:{re}:rlock", 17));
  assert_int_equal(hl_redis_int(f->redis, "LLEN hilock:{re}:wake"), 1);
  /* Another client takes the lock at once. */
  other = hl_client(f->server.url, NULL);
  next = hl_new_lock(other, "held", 1000);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(next)), hilock_hold_errmsg(HILOCK_HOLD(next)));
  /* The old handles say why they hold nothing. */
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(l)), HILOCK_ECLOSED, hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(l)), "client was closed");
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(s)), HILOCK_ECLOSED,
               hilock_hold_errmsg(HILOCK_HOLD(s)));
  hilock_hold_free(HILOCK_HOLD(next));
  hilock_client_free(other);
  hl_holds_free(HILOCK_HOLD(l), HILOCK_HOLD(s), HILOCK_HOLD(fl),
                HILOCK_HOLD(rl));
}

/* ## Redlock ------------------------------------------------------------------ */

static void redlock_refuses_a_repeated_node(void **state) {
  fixture *f = *state;
  char a[96], b[96], cc[96];
  const char *same[3] = {f->server.url, f->server.url, f->server.url};
  const char *spelled[3] = {a, b, cc};
  hilock_redlock *rl = NULL;
  snprintf(a, sizeof(a), "redis://localhost:%d", f->server.port);
  snprintf(b, sizeof(b), "redis://127.0.0.1:%d/0", f->server.port);
  snprintf(cc, sizeof(cc), "redis://127.0.0.1:%d", f->server.port);
  assert_int_equal(hilock_redlock_new(same, 3, "dup", 3, 5000, NULL, &rl),
                   HILOCK_EINVAL);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(rl)), "same server");
  hilock_hold_free(HILOCK_HOLD(rl));
  rl = NULL;
  assert_int_equal(hilock_redlock_new(spelled, 3, "dup", 3, 5000, NULL, &rl),
                   HILOCK_EINVAL);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(rl)), "nodes 0 and 1");
  hilock_hold_free(HILOCK_HOLD(rl));
  /* Other databases of one server are accepted: the URL names the
   * database, and only the same one twice is refused. */
  snprintf(b, sizeof(b), "redis://127.0.0.1:%d/1", f->server.port);
  snprintf(cc, sizeof(cc), "redis://127.0.0.1:%d/2", f->server.port);
  rl = NULL;
  assert_hl_ok(hilock_redlock_new(spelled, 3, "dbs", 3, 5000, NULL, &rl),
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  hilock_hold_free(HILOCK_HOLD(rl));
}

/* ## Timeouts bound the whole call ------------------------------------------- */

/* The server's pause for the paused-server tests: a timeout that waited it
 * out would take 5 s, the fix takes the 800 ms timeout and its 250 ms
 * slack; 3 s between them leaves room for a loaded machine. */
#define PAUSE_MS 5000
#define PAUSED_MAX_MS 3000

/* Scripts the server has run (EVALSHA and EVAL). */
static long long scripts_run(fixture *f) {
  return hl_cmdstat_calls(f->redis, "evalsha") +
         hl_cmdstat_calls(f->redis, "eval");
}

/* End the pause early, then wait until the server has run the attempt and
 * what the client queued behind it: n scripts since before. */
static void unpause_and_wait_scripts(fixture *f, long long before, int n) {
  int64_t end = hl_now_ms() + 10000;
  hl_redis_ok(f->redis, "CLIENT UNPAUSE");
  while (scripts_run(f) - before < n && hl_now_ms() < end) hl_sleep_ms(5);
  assert_true(scripts_run(f) - before >= n);
}

/* With the server's writes paused for PAUSE_MS, h's acquire with 800 ms to
 * wait (v's) ends in HILOCK_ETIMEDOUT after 800 ms and the 250 ms slack,
 * not the pause. The pause goes on; returns the scripts run before it (for
 * unpause_and_wait_scripts). */
static long long acquire_times_out_on_a_pause(fixture *f, hilock_hold *h,
                                              const hl_verbs *v) {
  long long before = scripts_run(f);
  int64_t t0, took;
  int rc;
  hl_redis_ok(f->redis, "CLIENT PAUSE %d WRITE", PAUSE_MS);
  t0 = hl_now_ms();
  rc = v->acquire(h, 800);
  took = hl_now_ms() - t0;
  assert_hl_rc(rc, HILOCK_ETIMEDOUT, hilock_hold_errmsg(h));
  assert_i64_between(took, 700, PAUSED_MAX_MS);
  return before;
}

static void timeout_bounds_reconnect_to_a_dead_server(void **state) {
  hl_server s;
  hilock_options o;
  hilock_client *c;
  hilock_lock *l;
  int64_t t0, took;
  int rc;
  (void)state;
  assert_int_equal(hl_server_start(&s, NULL), 0);
  hilock_options_init(&o);
  o.reconnect_ms = 10000;
  c = hl_client(s.url, &o);
  l = hl_new_lock(c, "down", 5000);
  hl_server_stop(&s);
  t0 = hl_now_ms();
  rc = hilock_hold_acquire(HILOCK_HOLD(l), 1000);
  took = hl_now_ms() - t0;
  assert_true(rc == HILOCK_EIO || rc == HILOCK_ETIMEDOUT);
  /* 1 s and the stated 250 ms slack, not the 10 s reconnect budget: 3 s
   * leaves room for a loaded machine. */
  assert_i64_between(took, 900, 3000);
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_client_free(c);
  hl_server_destroy(&s);
}

static void timeout_bounds_a_paused_server_and_undoes_the_attempt(
    void **state) {
  fixture *f = *state;
  hilock_client *c = hl_client(f->server.url, NULL);
  hilock_lock *l = hl_new_lock(c, "paused", 10000), *other;
  long long before;
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  before = acquire_times_out_on_a_pause(f, HILOCK_HOLD(l), &hl_lock_verbs);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(l)), "undone");
  assert_false(hilock_hold_held(HILOCK_HOLD(l)));
  /* Once unpaused the server runs the attempt, then its undo: free. */
  unpause_and_wait_scripts(f, before, 2);
  assert_false(hl_redis_exists(f->redis, "hilock:{paused}:lock", 20));
  other = hl_new_lock(c, "paused", 10000);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(other)), hilock_hold_errmsg(HILOCK_HOLD(other)));
  hl_holds_free(HILOCK_HOLD(other), HILOCK_HOLD(l));
  hilock_client_free(c);
}

/* The same for the queue locks (and Redisson's fair lock): the attempt
 * that times out takes its leave with it, queued behind it on its connection, instead of a leave
 * that would wait on the same paused server past the caller's timeout
 * (until the pause ended). Once the server runs both, nobody holds the
 * lock and nobody is queued. */
static void queue_locks_bound_a_paused_server_and_leave_behind_the_attempt(
    void **state) {
  fixture *f = *state;
  hilock_client *c = hl_client(f->server.url, NULL);
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  for (int kind = 0; kind < 2; kind++) {
    hilock_fair_lock *fl = kind == 0 ? hl_new_fair(c, "paused-q", 10000) : NULL;
    hilock_sequential_lock *sl = kind == 1 ? hl_new_seq(c, "paused-q", 10000) : NULL;
    hilock_hold *h = fl != NULL ? HILOCK_HOLD(fl) : HILOCK_HOLD(sl);
    int64_t waiters = -1;
    long long before;
    int rc;
    before = acquire_times_out_on_a_pause(
        f, h, fl != NULL ? &hl_fair_verbs : &hl_seq_verbs);
    assert_substr(hilock_hold_errmsg(h), "undone");
    assert_false(hilock_hold_held(h));
    unpause_and_wait_scripts(f, before, 2);
    assert_hl_ok(fl != NULL ? hilock_fair_lock_waiters(fl, &waiters)
                            : hilock_sequential_lock_waiters(sl, &waiters),
                 hilock_hold_errmsg(h));
    assert_int_equal(waiters, 0);
    rc = fl != NULL ? hilock_hold_try_acquire(HILOCK_HOLD(fl))
                    : hilock_hold_try_acquire(HILOCK_HOLD(sl));
    assert_hl_ok(rc, hilock_hold_errmsg(h));
    assert_hl_ok(fl != NULL ? hilock_hold_release(HILOCK_HOLD(fl))
                            : hilock_hold_release(HILOCK_HOLD(sl)),
                 hilock_hold_errmsg(h));
    hilock_hold_free(h);
  }
  {
    /* Redisson's fair lock: its withdraw goes out behind the release. */
    hilock_rlock *rl = NULL;
    long long before;
    assert_hl_ok(hilock_rlock_new_redisson_fair(c, "paused-r", 8, 10000, &rl),
                 hilock_client_errmsg(c));
    before = acquire_times_out_on_a_pause(f, HILOCK_HOLD(rl), &hl_rlock_verbs);
    unpause_and_wait_scripts(f, before, 2);
    assert_false(hl_redis_exists(f->redis, "paused-r", 8));
    assert_false(hl_redis_exists(f->redis, "redisson_lock_queue:{paused-r}", 30));
    assert_false(hl_redis_exists(f->redis, "redisson_lock_timeout:{paused-r}", 32));
    assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
    assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
    hilock_hold_free(HILOCK_HOLD(rl));
  }
  hilock_client_free(c);
}

/* ## An ambiguous reply never leaves a grant nobody owns --------------------- */

static void late_reply_grant_is_undone(void **state) {
  fixture *f = *state;
  for (int retry = 0; retry < 2; retry++) {
    hilock_client *c = client_timing_out(&f->server, 400);
    hilock_lock *l = hl_new_lock(c, retry ? "retry" : "gave-up", 10000);
    sleeper s = {&f->server, 1000};
    pthread_t st;
    int64_t t0;
    assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
    st = put_to_sleep(&s, 50);
    t0 = hl_now_ms();
    assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(l)), HILOCK_ETIMEDOUT,
                 hilock_hold_errmsg(HILOCK_HOLD(l)));
    assert_substr(hilock_hold_errmsg(HILOCK_HOLD(l)), "undone");
    pthread_join(st, NULL);
    if (retry) {
      /* The same handle's retry gets the lock as soon as the undo ran. */
      assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(l), 3000), hilock_hold_errmsg(HILOCK_HOLD(l)));
      assert_i64_between(hl_now_ms() - t0, 0, 3000);
      assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
    } else {
      /* The caller gave up: the grant is gone long before its TTL. */
      hl_sleep_ms(300);
      assert_false(hl_redis_exists(f->redis, "hilock:{gave-up}:lock", 21));
    }
    hilock_hold_free(HILOCK_HOLD(l));
    hilock_client_free(c);
  }
}

static void late_reply_undo_covers_semaphore_and_multilock(void **state) {
  fixture *f = *state;
  hilock_client *c = client_timing_out(&f->server, 300);
  hilock_semaphore *sem = NULL;
  hilock_multi_lock *m = NULL;
  const char *names[2] = {"{acct}:1", "{acct}:2"};
  sleeper s = {&f->server, 800};
  pthread_t st;
  long long fence;
  assert_hl_ok(hilock_semaphore_new(c, "late-sem", 8, 1, 10000, &sem),
               hilock_client_errmsg(c));
  assert_hl_ok(hilock_multi_lock_new(c, names, 2, 10000, &m),
               hilock_client_errmsg(c));
  /* Load the scripts (a NOSCRIPT reply would mean nothing ran). */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(sem)), hilock_hold_errmsg(HILOCK_HOLD(sem)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(sem)), hilock_hold_errmsg(HILOCK_HOLD(sem)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  /* Ahead of the clock, the counter counts the grants. */
  hl_redis_ok(f->redis, "SET hilock:{{acct}:1}:fence %lld", HL_FENCE_AHEAD);
  fence = hl_redis_int(f->redis, "INCRBY hilock:{{acct}:1}:fence 0");
  st = put_to_sleep(&s, 50);
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(sem)), HILOCK_ETIMEDOUT,
               hilock_hold_errmsg(HILOCK_HOLD(sem)));
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(m)), HILOCK_ETIMEDOUT,
               hilock_hold_errmsg(HILOCK_HOLD(m)));
  pthread_join(st, NULL);
  hl_sleep_ms(300);
  /* Both ran once the server woke, and both were undone right after. */
  assert_int_equal(hl_redis_int(f->redis, "ZCARD hilock:{late-sem}:permits"),
                   0);
  assert_false(hl_redis_exists(f->redis, "hilock:{{acct}:1}:lock", 22));
  assert_false(hl_redis_exists(f->redis, "hilock:{{acct}:2}:lock", 22));
  assert_int_equal(hl_redis_int(f->redis, "INCRBY hilock:{{acct}:1}:fence 0"),
                   fence + 1);
  hl_holds_free(HILOCK_HOLD(sem), HILOCK_HOLD(m));
  hilock_client_free(c);
}

/* The segmented lock's grant names its segment only in the reply: the undo
 * drops whichever segment holds the attempt's token. */
static void late_reply_undo_covers_the_segmented_lock(void **state) {
  fixture *f = *state;
  hilock_client *c = client_timing_out(&f->server, 300);
  hilock_segmented_lock *seg = NULL, *other = NULL;
  sleeper s = {&f->server, 800};
  pthread_t st;
  assert_hl_ok(hilock_segmented_lock_new(c, "late-seg", 8, 2, 10000, &seg),
               hilock_client_errmsg(c));
  /* Load the scripts (a NOSCRIPT reply would mean nothing ran). */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(seg)),
               hilock_hold_errmsg(HILOCK_HOLD(seg)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(seg)), hilock_hold_errmsg(HILOCK_HOLD(seg)));
  st = put_to_sleep(&s, 50);
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(seg)), HILOCK_ETIMEDOUT,
               hilock_hold_errmsg(HILOCK_HOLD(seg)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(seg)), "undone");
  pthread_join(st, NULL);
  hl_sleep_ms(300);
  /* The attempt ran once the server woke, and was undone right after. */
  assert_false(hl_redis_exists(f->redis, "hilock:{late-seg}:seg:0", 23));
  assert_false(hl_redis_exists(f->redis, "hilock:{late-seg}:seg:1", 23));
  /* Both segments are free for another holder. */
  assert_hl_ok(hilock_segmented_lock_new(c, "late-seg", 8, 2, 10000, &other),
               hilock_client_errmsg(c));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(other)),
               hilock_hold_errmsg(HILOCK_HOLD(other)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(seg)),
               hilock_hold_errmsg(HILOCK_HOLD(seg)));
  hl_holds_free(HILOCK_HOLD(other), HILOCK_HOLD(seg));
  hilock_client_free(c);
}

/* ## Fences never go back ---------------------------------------------------- */

static uint64_t grant_fence(hilock_client *c, const char *name) {
  hilock_lock *l = hl_new_lock(c, name, 5000);
  uint64_t fence;
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  fence = hilock_hold_fence(HILOCK_HOLD(l));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
  return fence;
}

static void fences_survive_flushall_restart_and_eviction(void **state) {
  fixture *f = *state;
  hl_server s;
  hilock_client *c;
  uint64_t a, b;
  char key[64];
  int evicted = 0;

  a = grant_fence(f->client, "flushed");
  b = grant_fence(f->client, "flushed");
  assert_true(b > a);
  hl_redis_ok(f->redis, "FLUSHALL");
  assert_true(grant_fence(f->client, "flushed") > b);

  /* A restart without persistence. */
  assert_int_equal(hl_server_start(&s, NULL), 0);
  c = hl_client(s.url, NULL);
  a = grant_fence(c, "restarted");
  hl_server_stop(&s);
  assert_int_equal(hl_server_restart(&s), 0);
  assert_true(grant_fence(c, "restarted") > a);
  hilock_client_free(c);
  hl_server_destroy(&s);

  /* An eviction of the counter (allkeys-lru under memory pressure). */
  a = grant_fence(f->client, "evicted");
  hl_redis_ok(f->redis, "CONFIG SET maxmemory-policy allkeys-lru");
  hl_redis_ok(f->redis, "CONFIG SET maxmemory %lld",
              hl_info_field(f->redis, "memory", "used_memory") + 2000000);
  for (int i = 0; i < 20000 && !evicted; i++) {
    static char value[4096];
    redisReply *r;
    memset(value, 'x', sizeof(value));
    snprintf(key, sizeof(key), "filler:%d", i);
    r = hl_redis(f->redis, "SET %s %b", key, value, sizeof(value));
    freeReplyObject(r);
    if (i % 100 == 0)
      evicted = !hl_redis_exists(f->redis, "hilock:{evicted}:fence", 22);
  }
  hl_redis_ok(f->redis, "CONFIG SET maxmemory 0");
  hl_redis_ok(f->redis, "CONFIG SET maxmemory-policy noeviction");
  assert_true(evicted);
  assert_true(grant_fence(f->client, "evicted") > a);
}

/* ## Small ones --------------------------------------------------------------- */

static void empty_password_sends_no_auth(void **state) {
  fixture *f = *state;
  char url[96];
  hilock_client *c = NULL;
  snprintf(url, sizeof(url), "redis://:@127.0.0.1:%d", f->server.port);
  assert_hl_ok(hilock_client_new(url, NULL, &c), hilock_client_errmsg(c));
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  assert_int_equal(hl_cmdstat_calls(f->redis, "auth"), 0);
  hilock_client_free(c);
}

static void maxclients_is_a_connection_error(void **state) {
  fixture *f = *state;
  hilock_client *c = NULL;
  long long n = hl_info_field(f->redis, "clients", "connected_clients");
  int rc;
  hl_redis_ok(f->redis, "CONFIG SET maxclients %lld", n);
  rc = hilock_client_new(f->server.url, NULL, &c);
  if (rc == HILOCK_OK) rc = hilock_client_ping(c);
  hl_redis_ok(f->redis, "CONFIG SET maxclients 10000");
  assert_hl_rc(rc, HILOCK_EIO, hilock_client_errmsg(c));
  assert_substr(hilock_client_errmsg(c), "max number of clients");
  hilock_client_free(c);
}

static void ttl_below_the_drift_allowance_is_einval(void **state) {
  fixture *f = *state;
  hilock_lock *l = NULL;
  assert_int_equal(hilock_lock_new(f->client, "t", 1, HILOCK_TTL_MIN_MS - 1,
                                   &l),
                   HILOCK_EINVAL);
  assert_substr(hilock_client_errmsg(f->client), "ttl must be 10..");
  assert_hl_ok(hilock_lock_new(f->client, "t", 1, HILOCK_TTL_MIN_MS, &l),
               hilock_client_errmsg(f->client));
  hilock_hold_free(HILOCK_HOLD(l));
}

static hl_fixture fx;

static int group_setup(void **state) {
  static const char *const extra[] = {"--enable-debug-command", "yes", NULL};
  hl_server_opts o = {0, NULL, extra, 0};
  *state = &fx;
  return hl_server_start(&fx.server, &o);
}

static int group_teardown(void **state) {
  (void)state;
  hl_server_destroy(&fx.server);
  return 0;
}

int main(void) {
#define T(fn) cmocka_unit_test_setup_teardown(fn, hl_setup, teardown)
  const struct CMUnitTest tests[] = {
      T(concurrent_close_never_frees_under_a_call),
      T(close_stops_renewal_and_releases_holds),
      T(redlock_refuses_a_repeated_node),
      T(timeout_bounds_reconnect_to_a_dead_server),
      T(timeout_bounds_a_paused_server_and_undoes_the_attempt),
      T(queue_locks_bound_a_paused_server_and_leave_behind_the_attempt),
      T(late_reply_grant_is_undone),
      T(late_reply_undo_covers_semaphore_and_multilock),
      T(late_reply_undo_covers_the_segmented_lock),
      T(fences_survive_flushall_restart_and_eviction),
      T(empty_password_sends_no_auth),
      T(maxclients_is_a_connection_error),
      T(ttl_below_the_drift_allowance_is_einval),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
