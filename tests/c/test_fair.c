/* The fair (FIFO) lock against a real server, beyond the contract every
 * family keeps (test_contract.c): grant order, no barging, heartbeats on
 * server time, dead and departing waiters, head-only wake-ups. Waiters are
 * threads with their own handles, or forked processes (to stop or kill
 * them). Keys are checked with hiredis. */
#include "test_util.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "scripts.h"

typedef hl_fixture fixture;

static hilock_fair_lock *make_fair(hilock_client *c, const char *name,
                                   int64_t ttl) {
  hilock_fair_lock *fl = NULL;
  assert_hl_ok(hilock_fair_lock_new(c, name, strlen(name), ttl, &fl),
               hilock_client_errmsg(c));
  assert_non_null(fl);
  return fl;
}

/* Names in these tests are plain words, so keys can be formatted. */
static long long queue_len(fixture *f, const char *name) {
  return hl_redis_int(f->redis, "ZCARD hilock:{%s}:fair:queue", name);
}

static long long wake_lists(fixture *f, const char *name) {
  return hl_keys_count(f->redis, "hilock:{%s}:wake:*", name);
}

/* No queue entry, heartbeat or wake list is left for name. */
static void assert_no_waiter_residue(fixture *f, const char *name) {
  assert_int_equal(
      hl_redis_int(f->redis, "EXISTS hilock:{%s}:fair:queue", name), 0);
  assert_int_equal(
      hl_redis_int(f->redis, "EXISTS hilock:{%s}:fair:heartbeat", name), 0);
  assert_int_equal(wake_lists(f, name), 0);
}

static void wait_queue_len(fixture *f, const char *name, long long n,
                           int64_t timeout_ms) {
  char key[128];
  snprintf(key, sizeof(key), "hilock:{%s}:fair:queue", name);
  assert_true(hl_wait_zcard(f->redis, key, n, timeout_ms));
}

static char *holder_value(fixture *f, const char *name) {
  char key[128];
  int n = snprintf(key, sizeof(key), "hilock:{%s}:fair", name);
  return hl_redis_get(f->redis, key, (size_t)n);
}

static void assert_holder(fixture *f, const char *name,
                          const hilock_fair_lock *fl) {
  char *v = holder_value(f, name);
  assert_non_null(v);
  assert_string_equal(v, hilock_hold_token(HILOCK_HOLD(fl)));
  free(v);
}

static long long get_int(fixture *f, const char *key) {
  return hl_redis_get_int(f->redis, key);
}

/* ## Grants ------------------------------------------------------------------ */

static void try_acquire_busy_release_and_key_layout(void **state) {
  fixture *f = *state;
  hilock_fair_lock *a = make_fair(f->client, "basic", 10000);
  hilock_fair_lock *b = make_fair(f->client, "basic", 10000);
  size_t klen = 0;
  uint64_t first;
  int locked = -1, owned = -1;

  assert_string_equal(hilock_hold_key(HILOCK_HOLD(a), &klen), "hilock:{basic}:fair");
  assert_int_equal(klen, 19);
  assert_int_equal(hilock_hold_ttl_ms(HILOCK_HOLD(a)), 10000);
  assert_int_equal(hilock_fair_lock_heartbeat_ms(a), 5000);
  assert_int_equal(hilock_fair_lock_ticket(a), 0);
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(a)), 0);
  assert_string_equal(hilock_hold_token(HILOCK_HOLD(a)), "");

  assert_hl_ok(hilock_fair_lock_try_acquire(a), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_true(hilock_hold_held(HILOCK_HOLD(a)));
  assert_int_equal(strlen(hilock_hold_token(HILOCK_HOLD(a))), 32);
  assert_holder(f, "basic", a);
  assert_i64_between(hl_redis_pttl(f->redis, "hilock:{basic}:fair", 19), 5000,
                     10000);
  /* A new name's first fence is the server's clock in microseconds. */
  first = hilock_hold_fence(HILOCK_HOLD(a));
  assert_true(first > 1000000000000000ULL);
  assert_int_equal(hilock_fair_lock_ticket(a), 1);

  assert_hl_rc(hilock_fair_lock_try_acquire(b), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_hl_rc(hilock_fair_lock_acquire(b, 0), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_false(hilock_hold_held(HILOCK_HOLD(b)));
  assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(b), &locked), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_true(locked);
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(b), &owned), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_false(owned);
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(a), &owned), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_true(owned);
  /* A refused try or a zero wait never queues. */
  assert_no_waiter_residue(f, "basic");

  assert_hl_ok(hilock_fair_lock_release(a), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_false(hilock_hold_held(HILOCK_HOLD(a)));
  assert_null(holder_value(f, "basic"));
  assert_hl_rc(hilock_fair_lock_release(a), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(a)));

  assert_hl_ok(hilock_fair_lock_acquire(b, 1000), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(b)), first + 1);
  assert_int_equal(hilock_fair_lock_ticket(b), 2);
  /* Holder, fence and ticket counters: nothing of the queue remains. */
  assert_int_equal(hl_redis_int(f->redis, "DBSIZE"), 3);
  assert_int_equal(get_int(f, "hilock:{basic}:fair:ticket"), 2);
  assert_hl_ok(hilock_fair_lock_release(b), hilock_hold_errmsg(HILOCK_HOLD(b)));
  hilock_hold_free(HILOCK_HOLD(a));
  hilock_hold_free(HILOCK_HOLD(b));
}

static void not_reentrant(void **state) {
  fixture *f = *state;
  hilock_fair_lock *a = make_fair(f->client, "own", 5000);
  char token[33];
  uint64_t fence;

  assert_hl_ok(hilock_fair_lock_acquire(a, 1000), hilock_hold_errmsg(HILOCK_HOLD(a)));
  memcpy(token, hilock_hold_token(HILOCK_HOLD(a)), 33);
  fence = hilock_hold_fence(HILOCK_HOLD(a));
  assert_hl_rc(hilock_fair_lock_acquire(a, 200), HILOCK_EINVAL,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(a)), "not reentrant");
  assert_hl_rc(hilock_fair_lock_try_acquire(a), HILOCK_EINVAL,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_string_equal(hilock_hold_token(HILOCK_HOLD(a)), token);
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(a)), fence);
  assert_int_equal(queue_len(f, "own"), 0);
  assert_holder(f, "own", a);
  hilock_hold_free(HILOCK_HOLD(a));
}

static void extend_and_renew_act_while_owned(void **state) {
  fixture *f = *state;
  hilock_fair_lock *l = make_fair(f->client, "ext", 1000);
  assert_hl_rc(hilock_fair_lock_renew(l), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_fair_lock_try_acquire(l), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_fair_lock_extend(l, 5000, 1), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_i64_between(hl_redis_pttl(f->redis, "hilock:{ext}:fair", 17), 4500,
                     5000);
  assert_i64_between(hilock_hold_validity_ms(HILOCK_HOLD(l)), 4500, 5000);
  assert_hl_ok(hilock_fair_lock_extend(l, 2000, 0), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_i64_between(hl_redis_pttl(f->redis, "hilock:{ext}:fair", 17), 6500,
                     7000);
  assert_hl_ok(hilock_fair_lock_renew(l), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_i64_between(hl_redis_pttl(f->redis, "hilock:{ext}:fair", 17), 800,
                     1000);
  assert_hl_rc(hilock_fair_lock_extend(l, 0, 1), HILOCK_EINVAL,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_fair_lock_release(l), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
}

/* ## FIFO order ---------------------------------------------------------------- */

#define NWAITERS 5

static int fair_acquire(hilock_hold *h, int64_t wait_ms) {
  return hilock_fair_lock_acquire((hilock_fair_lock *)h, wait_ms);
}
static int fair_release(hilock_hold *h) {
  return hilock_fair_lock_release((hilock_fair_lock *)h);
}
static uint64_t fair_ticket(const hilock_hold *h) {
  return hilock_fair_lock_ticket((const hilock_fair_lock *)h);
}

static int grant_counter;

/* w waits with fl (see hl_waiter); its number is the grant's ticket. */
static hilock_fair_lock *as_waiter(hl_waiter *w, hilock_fair_lock *fl) {
  memset(w, 0, sizeof(*w));
  w->lock = HILOCK_HOLD(fl);
  w->acquire = fair_acquire;
  w->release = fair_release;
  w->number = fair_ticket;
  w->grant_counter = &grant_counter;
  return fl;
}

static void fifo_grant_order_follows_enqueue_order(void **state) {
  fixture *f = *state;
  hilock_fair_lock *holder = make_fair(f->client, "fifo", 10000);
  hl_waiter w[NWAITERS];
  pthread_t t[NWAITERS];

  grant_counter = 0;
  assert_hl_ok(hilock_fair_lock_acquire(holder, 1000),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  /* Enqueue one at a time, so the enqueue order is known. */
  for (int i = 0; i < NWAITERS; i++) {
    as_waiter(&w[i], make_fair(f->client, "fifo", 10000));
    w[i].hold_ms = 5;
    t[i] = hl_waiter_start(&w[i]);
    wait_queue_len(f, "fifo", i + 1, 5000);
  }
  assert_hl_ok(hilock_fair_lock_release(holder),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  for (int i = 0; i < NWAITERS; i++) pthread_join(t[i], NULL);

  for (int i = 0; i < NWAITERS; i++) {
    assert_hl_ok(w[i].rc, hilock_hold_errmsg(HILOCK_HOLD(w[i].lock)));
    assert_hl_ok(w[i].release_rc, hilock_hold_errmsg(HILOCK_HOLD(w[i].lock)));
    /* Grant order == enqueue order; tickets and fences follow it. */
    assert_int_equal(w[i].grant_pos, i);
    assert_int_equal(w[i].fence, hilock_hold_fence(HILOCK_HOLD(holder)) + 1 + i);
    assert_int_equal(w[i].number_granted,
                     hilock_fair_lock_ticket(holder) + 1 + i);
    hilock_hold_free(HILOCK_HOLD(w[i].lock));
  }
  assert_no_waiter_residue(f, "fifo");
  assert_null(holder_value(f, "fifo"));
  hilock_hold_free(HILOCK_HOLD(holder));
}

/* ## Processes ---------------------------------------------------------------- */

typedef struct forked {
  const char *name;
  int64_t beat_ms;
} forked;

static int make_forked(hilock_client *c, void *arg, hilock_hold **h) {
  const forked *w = arg;
  hilock_fair_lock *fl = NULL;
  int rc = hilock_fair_lock_new(c, w->name, strlen(w->name), 10000, &fl);
  *h = HILOCK_HOLD(fl);
  return rc == HILOCK_OK ? hilock_fair_lock_set_heartbeat(fl, w->beat_ms) : rc;
}

/* A forked waiter (see hl_fork_contender) with heartbeat window beat_ms. */
static pid_t fork_waiter(fixture *f, const char *name, int64_t beat_ms,
                         int64_t hold_ms) {
  forked w = {name, beat_ms};
  return hl_fork_contender(f->server.url, make_forked, &w, fair_acquire,
                           fair_release, hold_ms);
}

static void newcomer_never_barges_past_a_queued_waiter(void **state) {
  fixture *f = *state;
  hilock_fair_lock *holder = make_fair(f->client, "barge", 10000);
  hilock_fair_lock *newcomer = make_fair(f->client, "barge", 10000);
  int locked = -1;
  int64_t count = -1;
  pid_t child;

  assert_hl_ok(hilock_fair_lock_acquire(holder, 1000),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  child = fork_waiter(f, "barge", 3000, 50);
  wait_queue_len(f, "barge", 1, 5000);
  /* Freeze the queued waiter: its heartbeat is good for 3 s. */
  assert_int_equal(kill(child, SIGSTOP), 0);
  assert_hl_ok(hilock_fair_lock_release(holder),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));

  /* The lock is free, but reserved for the head of the queue. */
  assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(newcomer), &locked),
               hilock_hold_errmsg(HILOCK_HOLD(newcomer)));
  assert_false(locked);
  assert_hl_ok(hilock_fair_lock_waiters(newcomer, &count),
               hilock_hold_errmsg(HILOCK_HOLD(newcomer)));
  assert_int_equal(count, 1);
  assert_hl_rc(hilock_fair_lock_try_acquire(newcomer), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(newcomer)));
  assert_hl_rc(hilock_fair_lock_acquire(newcomer, 300), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(newcomer)));
  assert_hl_rc(hilock_fair_lock_try_acquire(holder), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  assert_null(holder_value(f, "barge"));
  assert_int_equal(queue_len(f, "barge"), 1); /* the newcomer left */

  /* Thawed, the head takes its turn; then the newcomer may have it. */
  assert_int_equal(kill(child, SIGCONT), 0);
  assert_int_equal(hl_wait_child(child, 30000), 0);
  assert_hl_ok(hilock_fair_lock_try_acquire(newcomer),
               hilock_hold_errmsg(HILOCK_HOLD(newcomer)));
  /* The holder's, the head's, then the newcomer's grant. */
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(newcomer)),
                   hilock_hold_fence(HILOCK_HOLD(holder)) + 2);
  assert_no_waiter_residue(f, "barge");
  hilock_hold_free(HILOCK_HOLD(holder));
  hilock_hold_free(HILOCK_HOLD(newcomer));
}

static void sigkilled_head_is_skipped_within_the_heartbeat_window(
    void **state) {
  fixture *f = *state;
  const int64_t beat = 600; /* window; waiters re-check every 200 ms */
  hilock_fair_lock *holder = make_fair(f->client, "dead-head", 10000);
  pid_t head, second;
  int64_t t0, took;
  char *v;

  assert_hl_ok(hilock_fair_lock_acquire(holder, 1000),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  head = fork_waiter(f, "dead-head", beat, 0);
  wait_queue_len(f, "dead-head", 1, 5000);
  second = fork_waiter(f, "dead-head", beat, 100);
  wait_queue_len(f, "dead-head", 2, 5000);

  assert_int_equal(kill(head, SIGKILL), 0);
  assert_int_equal(hl_wait_child(head, 30000), 128 + SIGKILL);
  t0 = hl_now_ms();
  /* The release wakes the dead head; the lock stays reserved for it until
   * its heartbeat lapses, never for the holder's TTL of 10 s. */
  assert_hl_ok(hilock_fair_lock_release(holder),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  while ((v = holder_value(f, "dead-head")) == NULL) {
    if (hl_now_ms() - t0 > 5000) break;
    hl_sleep_ms(2);
  }
  took = hl_now_ms() - t0;
  assert_non_null(v);
  free(v);
  assert_i64_between(took, 0, beat + beat / 3 + 700);
  /* The dead waiter's entry, heartbeat and wake list went with it. */
  assert_int_equal(queue_len(f, "dead-head"), 0);
  assert_int_equal(wake_lists(f, "dead-head"), 0);
  assert_int_equal(hl_wait_child(second, 30000), 0);
  /* Granted to the holder and then the second waiter only. */
  assert_int_equal(get_int(f, "hilock:{dead-head}:fence"),
                   (long long)hilock_hold_fence(HILOCK_HOLD(holder)) + 1);
  assert_no_waiter_residue(f, "dead-head");
  hilock_hold_free(HILOCK_HOLD(holder));
}

/* ## Leaving the queue ------------------------------------------------------------ */

static void timed_out_waiter_leaves_no_residue(void **state) {
  fixture *f = *state;
  hilock_fair_lock *holder = make_fair(f->client, "timeout", 10000);
  hilock_fair_lock *w = make_fair(f->client, "timeout", 10000);
  int64_t t0;

  assert_hl_ok(hilock_fair_lock_acquire(holder, 1000),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  t0 = hl_now_ms();
  assert_hl_rc(hilock_fair_lock_acquire(w, 300), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(w)));
  assert_i64_between(hl_now_ms() - t0, 290, 1000);
  assert_false(hilock_hold_held(HILOCK_HOLD(w)));
  assert_no_waiter_residue(f, "timeout");

  /* A head that times out leaves its place to the next waiter. */
  {
    hl_waiter head, next;
    pthread_t th, tn;
    as_waiter(&head, w);
    head.wait_ms = 400;
    as_waiter(&next, make_fair(f->client, "timeout", 10000));
    th = hl_waiter_start(&head);
    wait_queue_len(f, "timeout", 1, 5000);
    tn = hl_waiter_start(&next);
    wait_queue_len(f, "timeout", 2, 5000);
    pthread_join(th, NULL);
    assert_hl_rc(head.rc, HILOCK_BUSY, hilock_hold_errmsg(HILOCK_HOLD(w)));
    assert_int_equal(queue_len(f, "timeout"), 1);
    assert_hl_ok(hilock_fair_lock_release(holder),
                 hilock_hold_errmsg(HILOCK_HOLD(holder)));
    pthread_join(tn, NULL);
    assert_hl_ok(next.rc, hilock_hold_errmsg(HILOCK_HOLD(next.lock)));
    assert_true(next.fence == hilock_hold_fence(HILOCK_HOLD(holder)) + 1);
    hilock_hold_free(HILOCK_HOLD(next.lock));
  }
  assert_no_waiter_residue(f, "timeout");
  hilock_hold_free(HILOCK_HOLD(holder));
  hilock_hold_free(HILOCK_HOLD(w));
}

static void interrupted_waiter_leaves_no_residue(void **state) {
  fixture *f = *state;
  hilock_options o = hl_test_options();
  hilock_client *c = NULL;
  hilock_fair_lock *holder = make_fair(f->client, "intr", 10000), *w;
  pthread_t t;
  int64_t t0;
  int interrupted = 0;

  o.interrupt = hl_flag_interrupt;
  o.interrupt_arg = &interrupted;
  assert_hl_ok(hilock_client_new(f->server.url, &o, &c),
               hilock_client_errmsg(c));
  w = make_fair(c, "intr", 10000);
  assert_hl_ok(hilock_fair_lock_acquire(holder, 1000),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  t = hl_raise_flag_later(&interrupted, 200);
  t0 = hl_now_ms();
  assert_hl_rc(hilock_fair_lock_acquire(w, 5000), HILOCK_EINTR,
               hilock_hold_errmsg(HILOCK_HOLD(w)));
  assert_i64_between(hl_now_ms() - t0, 150, 900);
  pthread_join(t, NULL);
  assert_no_waiter_residue(f, "intr");
  assert_false(hilock_hold_held(HILOCK_HOLD(w)));
  hilock_hold_free(HILOCK_HOLD(w));
  hilock_client_free(c);
  hilock_hold_free(HILOCK_HOLD(holder));
}

/* ## Heartbeats ------------------------------------------------------------------ */

static void live_waiter_is_never_purged_however_long_it_waits(void **state) {
  fixture *f = *state;
  hilock_fair_lock *holder = make_fair(f->client, "patient", 10000);
  hl_waiter w;
  pthread_t t;
  int64_t t0;

  assert_hl_ok(hilock_fair_lock_set_heartbeat(
                   as_waiter(&w, make_fair(f->client, "patient", 10000)), 1000),
               hilock_hold_errmsg(w.lock));
  assert_hl_ok(hilock_fair_lock_acquire(holder, 1000),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  t = hl_waiter_start(&w);
  wait_queue_len(f, "patient", 1, 5000);
  /* 2.5 windows: its deadline keeps moving ahead of the server clock. */
  for (int i = 0; i < 25; i++) {
    redisReply *r = hl_redis(f->redis, "ZRANGE hilock:{patient}:fair:heartbeat "
                                       "0 -1 WITHSCORES");
    long long now = hl_server_time_ms(f->redis), deadline;
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    deadline = atoll(r->element[1]->str);
    freeReplyObject(r);
    assert_i64_between(deadline - now, 1, 1000);
    assert_int_equal(queue_len(f, "patient"), 1);
    hl_sleep_ms(100);
  }
  t0 = hl_now_ms();
  assert_hl_ok(hilock_fair_lock_release(holder),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  pthread_join(t, NULL);
  assert_hl_ok(w.rc, hilock_hold_errmsg(HILOCK_HOLD(w.lock)));
  assert_i64_between(hl_now_ms() - t0, 0, 500);
  assert_no_waiter_residue(f, "patient");
  hilock_hold_free(HILOCK_HOLD(w.lock));
  hilock_hold_free(HILOCK_HOLD(holder));
}

static void dead_entries_block_until_their_deadline_then_are_dropped(
    void **state) {
  fixture *f = *state;
  hilock_fair_lock *l = make_fair(f->client, "ghost", 5000);
  long long now = hl_server_time_ms(f->redis);
  int64_t count = -1;

  /* A waiter that died 0.3 s before its deadline, with a wake-up pending,
   * and a damaged entry (queued, no heartbeat) ahead of it. */
  hl_redis_ok(f->redis, "ZADD hilock:{ghost}:fair:queue 1 broken 7 ghost");
  hl_redis_ok(f->redis, "ZADD hilock:{ghost}:fair:heartbeat %lld ghost",
              now + 300);
  hl_redis_ok(f->redis, "RPUSH hilock:{ghost}:wake:ghost 1");
  assert_hl_ok(hilock_fair_lock_waiters(l, &count), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_int_equal(count, 1);

  /* Until then it is the head: nobody barges past it. */
  assert_hl_rc(hilock_fair_lock_try_acquire(l), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_int_equal(hl_redis_int(f->redis, "EXISTS hilock:{ghost}:fair:queue"),
                   1);
  /* The damaged entry is gone; the ghost is still waited for. */
  assert_int_equal(queue_len(f, "ghost"), 1);
  hl_sleep_ms(350);
  assert_hl_ok(hilock_fair_lock_waiters(l, &count), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_int_equal(count, 0);
  assert_hl_ok(hilock_fair_lock_try_acquire(l), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_no_waiter_residue(f, "ghost");
  hilock_hold_free(HILOCK_HOLD(l));
}

static void wake_ups_go_to_the_head_only(void **state) {
  fixture *f = *state;
  hilock_fair_lock *holder = make_fair(f->client, "head-only", 10000);
  hl_waiter w[NWAITERS];
  pthread_t t[NWAITERS];
  volatile int go[NWAITERS];
  long long before;

  grant_counter = 0;
  assert_hl_ok(hilock_fair_lock_acquire(holder, 1000),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  for (int i = 0; i < NWAITERS; i++) {
    go[i] = 0;
    /* Re-checks every 10 s: within this test only wake-ups move waiters. */
    assert_hl_ok(
        hilock_fair_lock_set_heartbeat(
            as_waiter(&w[i], make_fair(f->client, "head-only", 10000)), 30000),
        hilock_hold_errmsg(w[i].lock));
    w[i].release_now = &go[i];
    t[i] = hl_waiter_start(&w[i]);
    wait_queue_len(f, "head-only", i + 1, 5000);
  }
  hl_sleep_ms(50);
  assert_int_equal(hl_waiters(f->redis), NWAITERS);
  before = hl_cmdstat_calls(f->redis, "evalsha");
  assert_hl_ok(hilock_fair_lock_release(holder),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  for (int i = 0; i < NWAITERS; i++) {
    /* Waiter i, and no other, wakes and takes the lock. */
    int64_t deadline = hl_now_ms() + 3000;
    while (__atomic_load_n(&grant_counter, __ATOMIC_ACQUIRE) < i + 1 &&
           hl_now_ms() < deadline)
      hl_sleep_ms(1);
    hl_sleep_ms(30);
    assert_int_equal(__atomic_load_n(&grant_counter, __ATOMIC_ACQUIRE), i + 1);
    assert_int_equal(w[i].grant_pos, i);
    assert_int_equal(hl_waiters(f->redis), NWAITERS - 1 - i);
    assert_int_equal(queue_len(f, "head-only"), NWAITERS - 1 - i);
    /* Scripts run since the first release: one release per grant and one
     * acquire per woken waiter, nothing from the waiters behind. */
    assert_int_equal(hl_cmdstat_calls(f->redis, "evalsha") - before,
                     1 + 2 * i + 1);
    __atomic_store_n(&go[i], 1, __ATOMIC_RELEASE);
  }
  for (int i = 0; i < NWAITERS; i++) {
    pthread_join(t[i], NULL);
    assert_hl_ok(w[i].rc, hilock_hold_errmsg(HILOCK_HOLD(w[i].lock)));
    assert_hl_ok(w[i].release_rc, hilock_hold_errmsg(HILOCK_HOLD(w[i].lock)));
    hilock_hold_free(HILOCK_HOLD(w[i].lock));
  }
  assert_int_equal(hl_cmdstat_calls(f->redis, "evalsha") - before,
                   2 * NWAITERS + 1);
  assert_no_waiter_residue(f, "head-only");
  hilock_hold_free(HILOCK_HOLD(holder));
}

static void holder_crash_hands_over_when_its_ttl_runs_out(void **state) {
  fixture *f = *state;
  hilock_fair_lock *dead = make_fair(f->client, "crash", 300);
  hilock_fair_lock *w = make_fair(f->client, "crash", 5000);
  int64_t t0;

  assert_hl_ok(hilock_fair_lock_try_acquire(dead),
               hilock_hold_errmsg(HILOCK_HOLD(dead)));
  hilock_hold_free(HILOCK_HOLD(dead)); /* never released */
  t0 = hl_now_ms();
  /* The head sleeps until the holder's TTL, not a whole heartbeat slice
   * (2 s here). */
  assert_hl_ok(hilock_fair_lock_set_heartbeat(w, 6000),
               hilock_hold_errmsg(HILOCK_HOLD(w)));
  assert_hl_ok(hilock_fair_lock_acquire(w, 5000), hilock_hold_errmsg(HILOCK_HOLD(w)));
  assert_i64_between(hl_now_ms() - t0, 200, 1200);
  assert_no_waiter_residue(f, "crash");
  hilock_hold_free(HILOCK_HOLD(w));
}

/* ## The script's own guarantees ------------------------------------------------ */

static redisReply *fair_script(fixture *f, const char *name, const char *op,
                               const char *id, int64_t ticket) {
  static const char *const roles[6] = {"fair",           "fence",
                                       "fair:queue",     "fair:heartbeat",
                                       "fair:ticket",    "wake:"};
  char ticket_s[24];
  const char *args[5] = {op, id, "5000", "1000", ticket_s};
  snprintf(ticket_s, sizeof(ticket_s), "%lld", (long long)ticket);
  return hl_run_script(f->client, &hilock__script_fair_lock, name, roles, 6,
                       args, 5);
}

static void resent_acquire_and_leave_after_a_lost_reply(void **state) {
  fixture *f = *state;
  redisReply *r;
  long long fence;

  /* A grant, then the same call again (a resend after a broken
   * connection): the same grant and fence, no second one. */
  r = fair_script(f, "lost", "acquire", "me", 0);
  assert_int_equal(r->element[0]->integer, 1);
  fence = r->element[1]->integer;
  freeReplyObject(r);
  r = fair_script(f, "lost", "acquire", "me", 1);
  assert_int_equal(r->element[0]->integer, 1);
  assert_int_equal(r->element[1]->integer, fence);
  freeReplyObject(r);
  assert_int_equal(get_int(f, "hilock:{lost}:fence"), fence);

  /* Another waiter queues; the caller that never saw its grant leaves:
   * the grant is given back and only the head is woken. */
  r = fair_script(f, "lost", "acquire", "next", 0);
  assert_int_equal(r->element[0]->integer, 0);
  assert_int_equal(r->element[3]->integer, 0);
  freeReplyObject(r);
  r = fair_script(f, "lost", "leave", "me", 0);
  assert_int_equal(r->element[0]->integer, 1);
  freeReplyObject(r);
  assert_null(holder_value(f, "lost"));
  assert_int_equal(hl_redis_int(f->redis, "LLEN hilock:{lost}:wake:next"), 1);
  assert_i64_between(hl_redis_pttl(f->redis, "hilock:{lost}:wake:next", 23), 1,
                     2000);
  /* A re-sent queueing call keeps its ticket and place. */
  r = fair_script(f, "lost", "acquire", "next", 0);
  assert_int_equal(r->element[0]->integer, 1);
  assert_int_equal(r->element[2]->integer, 2);
  freeReplyObject(r);
  assert_int_equal(wake_lists(f, "lost"), 0);
}

static void waiters_keep_their_place_when_the_queue_is_lost(void **state) {
  fixture *f = *state;
  redisReply *r;

  /* Two waiters queued behind a holder; then the server loses everything
   * (a restart without persistence). */
  freeReplyObject(fair_script(f, "amnesia", "acquire", "holder", 0));
  freeReplyObject(fair_script(f, "amnesia", "acquire", "first", 0));
  freeReplyObject(fair_script(f, "amnesia", "acquire", "second", 0));
  hl_redis_ok(f->redis, "FLUSHALL");
  /* Newcomers arrive before the waiters' next re-check... */
  r = fair_script(f, "amnesia", "acquire", "newcomer", 0);
  assert_int_equal(r->element[0]->integer, 1); /* the queue was empty */
  freeReplyObject(r);
  r = fair_script(f, "amnesia", "acquire", "late", 0);
  assert_int_equal(r->element[0]->integer, 0);
  assert_int_equal(r->element[2]->integer, 2);
  freeReplyObject(r);
  /* ...the waiters come back with their tickets (so they may share their
   * place with a newcomer of that window), and every ticket drawn
   * afterwards comes after theirs. */
  r = fair_script(f, "amnesia", "acquire", "second", 3);
  assert_int_equal(r->element[3]->integer, 1);
  freeReplyObject(r);
  r = fair_script(f, "amnesia", "acquire", "first", 2);
  assert_int_equal(r->element[2]->integer, 2);
  freeReplyObject(r);
  r = fair_script(f, "amnesia", "acquire", "later", 0);
  assert_int_equal(r->element[2]->integer, 4);
  assert_int_equal(r->element[3]->integer, 3);
  freeReplyObject(r);
}

static void damaged_keys_fail_closed(void **state) {
  fixture *f = *state;
  hilock_fair_lock *l = make_fair(f->client, "damaged", 5000);

  hl_redis_ok(f->redis, "SET hilock:{damaged}:fair:queue x");
  assert_hl_rc(hilock_fair_lock_acquire(l, 100), HILOCK_EWRONGTYPE,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(l)), "WRONGTYPE");
  assert_false(hilock_hold_held(HILOCK_HOLD(l)));
  assert_null(holder_value(f, "damaged"));

  hl_redis_ok(f->redis, "DEL hilock:{damaged}:fair:queue");
  hl_redis_ok(f->redis, "SET hilock:{damaged}:fence not-a-number");
  assert_hl_rc(hilock_fair_lock_acquire(l, 100), HILOCK_ESCRIPT,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_null(holder_value(f, "damaged"));
  /* The failed acquire left the queue too. */
  assert_no_waiter_residue(f, "damaged");
  hilock_hold_free(HILOCK_HOLD(l));
}

/* ## Arguments ----------------------------------------------------------------- */

/* Arguments of this family's own calls (NULL handles and negative waits:
 * test_contract.c; the hold's own arguments: test_hold.c). */
static void invalid_arguments_are_einval(void **state) {
  fixture *f = *state;
  hilock_fair_lock *l = NULL;
  int64_t n;

  assert_int_equal(hilock_fair_lock_new(NULL, "x", 1, 1000, &l), HILOCK_EINVAL);
  assert_int_equal(hilock_fair_lock_new(f->client, "x", 1, 1000, NULL),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_fair_lock_new(f->client, NULL, 1, 1000, &l),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_fair_lock_new(f->client, "}x", 2, 1000, &l),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_fair_lock_new(f->client, "x", 1, 0, &l),
                   HILOCK_EINVAL);
  assert_substr(hilock_client_errmsg(f->client), "ttl");
  assert_null(l);

  assert_int_equal(hilock_fair_lock_waiters(NULL, &n), HILOCK_EINVAL);
  assert_int_equal(hilock_fair_lock_set_heartbeat(NULL, 1000), HILOCK_EINVAL);
  assert_int_equal(hilock_fair_lock_ticket(NULL), 0);

  l = make_fair(f->client, "args", 50);
  assert_int_equal(hilock_fair_lock_heartbeat_ms(l), 500);
  assert_hl_rc(hilock_fair_lock_set_heartbeat(l, 499), HILOCK_EINVAL,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(l)), "heartbeat");
  assert_int_equal(hilock_fair_lock_waiters(l, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_fair_lock_heartbeat_ms(l), 500);
  assert_hl_ok(hilock_fair_lock_set_heartbeat(l, 2500),
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_int_equal(hilock_fair_lock_heartbeat_ms(l), 2500);
  assert_int_equal(queue_len(f, "args"), 0);
  hilock_hold_free(HILOCK_HOLD(l));
}

#define T(f) cmocka_unit_test_setup_teardown(f, hl_setup, hl_teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(try_acquire_busy_release_and_key_layout),
      T(not_reentrant),
      T(extend_and_renew_act_while_owned),
      T(fifo_grant_order_follows_enqueue_order),
      T(newcomer_never_barges_past_a_queued_waiter),
      T(sigkilled_head_is_skipped_within_the_heartbeat_window),
      T(timed_out_waiter_leaves_no_residue),
      T(interrupted_waiter_leaves_no_residue),
      T(live_waiter_is_never_purged_however_long_it_waits),
      T(dead_entries_block_until_their_deadline_then_are_dropped),
      T(wake_ups_go_to_the_head_only),
      T(holder_crash_hands_over_when_its_ttl_runs_out),
      T(resent_acquire_and_leave_after_a_lost_reply),
      T(waiters_keep_their_place_when_the_queue_is_lost),
      T(damaged_keys_fail_closed),
      T(invalid_arguments_are_einval),
  };
  return cmocka_run_group_tests_name("fair", tests, hl_group_setup,
                                     hl_group_teardown);
}
