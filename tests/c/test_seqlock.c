/* The sequential lock against a real server, beyond the contract every
 * family keeps (test_contract.c): sequence order, sessions on server time,
 * the watch on the predecessor (one wake-up per removal, to the successor
 * only), dead and departing contenders.
 * Contenders are threads with their own handles, or forked processes (to
 * stop or kill them). Keys are checked with hiredis. */
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

static hilock_sequential_lock *make_seq(hilock_client *c, const char *name,
                                int64_t ttl) {
  hilock_sequential_lock *sl = NULL;
  assert_hl_ok(hilock_sequential_lock_new(c, name, strlen(name), ttl, &sl),
               hilock_client_errmsg(c));
  assert_non_null(sl);
  return sl;
}

/* Names in these tests are plain words, so keys can be formatted. */
static long long queue_len(fixture *f, const char *name) {
  return hl_redis_int(f->redis, "ZCARD hilock:{%s}:seq:queue", name);
}

static long long wake_lists(fixture *f, const char *name) {
  return hl_keys_count(f->redis, "hilock:{%s}:seq:wake:*", name);
}

/* No entry, session, grant or wake list is left for name. */
static void assert_no_residue(fixture *f, const char *name) {
  assert_int_equal(
      hl_redis_int(f->redis, "EXISTS hilock:{%s}:seq:queue", name), 0);
  assert_int_equal(
      hl_redis_int(f->redis, "EXISTS hilock:{%s}:seq:session", name), 0);
  assert_int_equal(
      hl_redis_int(f->redis, "EXISTS hilock:{%s}:seq:holder", name), 0);
  assert_int_equal(wake_lists(f, name), 0);
}

static void wait_queue_len(fixture *f, const char *name, long long n,
                           int64_t timeout_ms) {
  char key[128];
  snprintf(key, sizeof(key), "hilock:{%s}:seq:queue", name);
  assert_true(hl_wait_zcard(f->redis, key, n, timeout_ms));
}

/* The owner recorded in the grant, or NULL. */
static char *holder_owner(fixture *f, const char *name) {
  redisReply *r = hl_redis(f->redis, "HGET hilock:{%s}:seq:holder owner", name);
  char *v = r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
  freeReplyObject(r);
  return v;
}

static void assert_holder(fixture *f, const char *name,
                          const hilock_sequential_lock *sl) {
  char *v = holder_owner(f, name);
  assert_non_null(v);
  assert_string_equal(v, hilock_hold_token(HILOCK_HOLD(sl)));
  free(v);
}

static long long get_int(fixture *f, const char *key) {
  return hl_redis_get_int(f->redis, key);
}

/* Session expiry of an entry minus the server's time (ms), -1 if none. */
static long long session_left(fixture *f, const char *name, const char *id) {
  redisReply *r =
      hl_redis(f->redis, "ZSCORE hilock:{%s}:seq:session %s", name, id);
  long long left = -1;
  if (r->type == REDIS_REPLY_STRING)
    left = atoll(r->str) - hl_server_time_ms(f->redis);
  freeReplyObject(r);
  return left;
}

/* LLEN of the wake list of the entry with sequence seq (-1: no list). */
static long long wake_len(fixture *f, const char *name, long long seq) {
  if (!hl_redis_int(f->redis, "EXISTS hilock:{%s}:seq:wake:%020lld", name, seq))
    return -1;
  return hl_redis_int(f->redis, "LLEN hilock:{%s}:seq:wake:%020lld", name, seq);
}

/* ## Grants ------------------------------------------------------------------ */

static void try_acquire_busy_release_and_key_layout(void **state) {
  fixture *f = *state;
  hilock_sequential_lock *a = make_seq(f->client, "basic", 10000);
  hilock_sequential_lock *b = make_seq(f->client, "basic", 10000);
  size_t klen = 0;
  int locked = -1, owned = -1;
  int64_t n = -1;

  assert_string_equal(hilock_hold_key(HILOCK_HOLD(a), &klen), "hilock:{basic}:seq:queue");
  assert_int_equal(klen, 24);
  assert_int_equal(hilock_hold_ttl_ms(HILOCK_HOLD(a)), 10000);
  assert_int_equal(hilock_sequential_lock_heartbeat_ms(a), 5000);
  assert_int_equal(hilock_sequential_lock_sequence(a), 0);
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(a)), 0);
  assert_string_equal(hilock_hold_token(HILOCK_HOLD(a)), "");

  /* Every key of the lock, wake lists included, is in one cluster slot. */
  {
    static const char *const keys[] = {
        "hilock:{basic}:seq:queue",   "hilock:{basic}:seq:session",
        "hilock:{basic}:seq:holder",  "hilock:{basic}:seq:counter",
        "hilock:{basic}:fence",
        "hilock:{basic}:seq:wake:00000000000000000001"};
    int slot = hilock__key_slot(keys[0], strlen(keys[0]));
    for (size_t i = 1; i < sizeof(keys) / sizeof(keys[0]); i++)
      assert_int_equal(hilock__key_slot(keys[i], strlen(keys[i])), slot);
  }

  assert_hl_ok(hilock_sequential_lock_try_acquire(a), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_true(hilock_hold_held(HILOCK_HOLD(a)));
  assert_int_equal(strlen(hilock_hold_token(HILOCK_HOLD(a))), 32);
  assert_holder(f, "basic", a);
  /* A new name's first fence is the server's clock in microseconds. */
  assert_true(hilock_hold_fence(HILOCK_HOLD(a)) > 1000000000000000ULL);
  assert_int_equal(hilock_sequential_lock_sequence(a), 1);
  /* The holder is the lowest live entry; its session lasts ttl. */
  assert_int_equal(queue_len(f, "basic"), 1);
  assert_i64_between(session_left(f, "basic", hilock_hold_token(HILOCK_HOLD(a))), 9000,
                     10000);
  assert_i64_between(
      hl_redis_int(f->redis, "PTTL hilock:{basic}:seq:queue"), 9000, 11000);

  assert_hl_rc(hilock_sequential_lock_try_acquire(b), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_hl_rc(hilock_sequential_lock_acquire(b, 0), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_false(hilock_hold_held(HILOCK_HOLD(b)));
  assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(b), &locked), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_true(locked);
  assert_hl_ok(hilock_sequential_lock_waiters(b, &n), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_int_equal(n, 0);
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(b), &owned), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_false(owned);
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(a), &owned), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_true(owned);
  /* A refused try never draws a sequence number or leaves an entry. */
  assert_int_equal(queue_len(f, "basic"), 1);
  assert_int_equal(get_int(f, "hilock:{basic}:seq:counter"), 1);

  assert_hl_ok(hilock_sequential_lock_release(a), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_false(hilock_hold_held(HILOCK_HOLD(a)));
  assert_no_residue(f, "basic");
  assert_hl_rc(hilock_sequential_lock_release(a), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(b), &locked), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_false(locked);

  assert_hl_ok(hilock_sequential_lock_acquire(b, 1000), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(b)), hilock_hold_fence(HILOCK_HOLD(a)) + 1);
  assert_int_equal(hilock_sequential_lock_sequence(b), 2);
  assert_hl_ok(hilock_sequential_lock_release(b), hilock_hold_errmsg(HILOCK_HOLD(b)));
  /* Only the two counters remain: sequence and fence. */
  assert_int_equal(hl_redis_int(f->redis, "DBSIZE"), 2);
  assert_int_equal(get_int(f, "hilock:{basic}:seq:counter"), 2);
  hilock_hold_free(HILOCK_HOLD(a));
  hilock_hold_free(HILOCK_HOLD(b));
}

static void not_reentrant(void **state) {
  fixture *f = *state;
  hilock_sequential_lock *a = make_seq(f->client, "own", 5000);
  char token[33];
  uint64_t fence;

  assert_hl_ok(hilock_sequential_lock_acquire(a, 1000), hilock_hold_errmsg(HILOCK_HOLD(a)));
  memcpy(token, hilock_hold_token(HILOCK_HOLD(a)), 33);
  fence = hilock_hold_fence(HILOCK_HOLD(a));
  assert_hl_rc(hilock_sequential_lock_acquire(a, 200), HILOCK_EINVAL,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(a)), "not reentrant");
  assert_hl_rc(hilock_sequential_lock_try_acquire(a), HILOCK_EINVAL,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_string_equal(hilock_hold_token(HILOCK_HOLD(a)), token);
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(a)), fence);
  assert_int_equal(queue_len(f, "own"), 1);
  assert_holder(f, "own", a);
  assert_hl_ok(hilock_sequential_lock_release(a), hilock_hold_errmsg(HILOCK_HOLD(a)));
  hilock_hold_free(HILOCK_HOLD(a));
}

static void extend_and_renew_act_while_owned(void **state) {
  fixture *f = *state;
  hilock_sequential_lock *l = make_seq(f->client, "ext", 1000);
  char id[33];
  assert_hl_rc(hilock_sequential_lock_renew(l), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_sequential_lock_try_acquire(l), hilock_hold_errmsg(HILOCK_HOLD(l)));
  memcpy(id, hilock_hold_token(HILOCK_HOLD(l)), 33);
  assert_hl_ok(hilock_sequential_lock_extend(l, 5000, 1), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_i64_between(session_left(f, "ext", id), 4500, 5000);
  assert_i64_between(hilock_hold_validity_ms(HILOCK_HOLD(l)), 4500, 5000);
  /* The keys outlive the session. */
  assert_i64_between(hl_redis_int(f->redis, "PTTL hilock:{ext}:seq:holder"),
                     5000, 6000);
  assert_hl_ok(hilock_sequential_lock_extend(l, 2000, 0), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_i64_between(session_left(f, "ext", id), 6500, 7000);
  assert_hl_ok(hilock_sequential_lock_renew(l), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_i64_between(session_left(f, "ext", id), 800, 1000);
  /* Renewal (as the watchdog's) keeps every key at least as long as the
   * session. */
  assert_true(hl_redis_int(f->redis, "PTTL hilock:{ext}:seq:queue") >=
              session_left(f, "ext", id));
  assert_hl_rc(hilock_sequential_lock_extend(l, 0, 1), HILOCK_EINVAL,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_sequential_lock_release(l), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
}

/* ## Sequence order -------------------------------------------------------------- */

#define NWAITERS 5

static int seq_acquire(hilock_hold *h, int64_t wait_ms) {
  return hilock_sequential_lock_acquire((hilock_sequential_lock *)h, wait_ms);
}
static int seq_release(hilock_hold *h) {
  return hilock_sequential_lock_release((hilock_sequential_lock *)h);
}
static uint64_t seq_sequence(const hilock_hold *h) {
  return hilock_sequential_lock_sequence((const hilock_sequential_lock *)h);
}

static int grant_counter;

/* w waits with sl (see hl_waiter); its number is the grant's sequence. */
static hilock_sequential_lock *as_waiter(hl_waiter *w, hilock_sequential_lock *sl) {
  memset(w, 0, sizeof(*w));
  w->lock = HILOCK_HOLD(sl);
  w->acquire = seq_acquire;
  w->release = seq_release;
  w->number = seq_sequence;
  w->grant_counter = &grant_counter;
  return sl;
}

static void start_waiters(fixture *f, const char *name, hl_waiter *w,
                          pthread_t *t, int n, int64_t session_ms) {
  for (int i = 0; i < n; i++) {
    hilock_sequential_lock *sl = as_waiter(&w[i], make_seq(f->client, name, 10000));
    w[i].hold_ms = 5;
    if (session_ms)
      assert_hl_ok(hilock_sequential_lock_set_heartbeat(sl, session_ms),
                   hilock_hold_errmsg(w[i].lock));
    t[i] = hl_waiter_start(&w[i]);
    /* One at a time, so the sequence order is known. */
    wait_queue_len(f, name, i + 2, 5000);
  }
}

static void grant_order_is_sequence_order(void **state) {
  fixture *f = *state;
  hilock_sequential_lock *holder = make_seq(f->client, "order", 10000);
  hl_waiter w[NWAITERS];
  pthread_t t[NWAITERS];
  int64_t n = -1;

  grant_counter = 0;
  assert_hl_ok(hilock_sequential_lock_acquire(holder, 1000),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  start_waiters(f, "order", w, t, NWAITERS, 0);
  for (int i = 0; i < NWAITERS; i++)
    assert_int_equal(seq_sequence(w[i].lock), 2 + i);
  assert_hl_ok(hilock_sequential_lock_waiters(holder, &n),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  assert_int_equal(n, NWAITERS);
  assert_hl_ok(hilock_sequential_lock_release(holder), hilock_hold_errmsg(HILOCK_HOLD(holder)));
  for (int i = 0; i < NWAITERS; i++) pthread_join(t[i], NULL);

  for (int i = 0; i < NWAITERS; i++) {
    assert_hl_ok(w[i].rc, hilock_hold_errmsg(HILOCK_HOLD(w[i].lock)));
    assert_hl_ok(w[i].release_rc, hilock_hold_errmsg(HILOCK_HOLD(w[i].lock)));
    /* Grant order == sequence order; fences follow it. */
    assert_int_equal(w[i].grant_pos, i);
    assert_int_equal(w[i].number_granted, 2 + i);
    assert_int_equal(w[i].fence, hilock_hold_fence(HILOCK_HOLD(holder)) + 1 + i);
    hilock_hold_free(HILOCK_HOLD(w[i].lock));
  }
  assert_no_residue(f, "order");
  hilock_hold_free(HILOCK_HOLD(holder));
}

/* Each release pushes to the successor's own list and nowhere else: while
 * the others block, only the successor runs a script. */
static void release_wakes_the_successor_only(void **state) {
  fixture *f = *state;
  hilock_sequential_lock *holder = make_seq(f->client, "successor", 10000);
  hl_waiter w[NWAITERS];
  pthread_t t[NWAITERS];
  volatile int go[NWAITERS];
  long long before;

  grant_counter = 0;
  /* Sequence numbers 98..103: their decimal text changes length. */
  hl_redis_ok(f->redis, "SET hilock:{successor}:seq:counter 97");
  assert_hl_ok(hilock_sequential_lock_acquire(holder, 1000),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  assert_int_equal(hilock_sequential_lock_sequence(holder), 98);
  /* Sessions of 30 s (re-checks every 10 s): within this test only
   * wake-ups move waiters. */
  start_waiters(f, "successor", w, t, NWAITERS, 30000);
  for (int i = 0; i < NWAITERS; i++) {
    go[i] = 0;
    w[i].release_now = &go[i];
  }
  assert_true(hl_wait_waiters(f->redis, NWAITERS, 3000));
  before = hl_cmdstat_calls(f->redis, "evalsha");
  assert_hl_ok(hilock_sequential_lock_release(holder), hilock_hold_errmsg(HILOCK_HOLD(holder)));
  for (int i = 0; i < NWAITERS; i++) {
    int64_t deadline = hl_now_ms() + 3000;
    while (__atomic_load_n(&grant_counter, __ATOMIC_ACQUIRE) < i + 1 &&
           hl_now_ms() < deadline)
      hl_sleep_ms(1);
    hl_sleep_ms(30);
    assert_int_equal(__atomic_load_n(&grant_counter, __ATOMIC_ACQUIRE), i + 1);
    assert_int_equal(w[i].grant_pos, i);
    assert_int_equal(w[i].number_granted, 99 + i);
    /* Everyone behind still blocks, each on its own list, none pushed. */
    assert_int_equal(hl_waiters(f->redis), NWAITERS - 1 - i);
    for (int j = i + 1; j < NWAITERS; j++)
      assert_int_equal(wake_len(f, "successor", 99 + j), -1);
    /* One release per grant and one acquire per woken waiter. */
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
  assert_no_residue(f, "successor");
  hilock_hold_free(HILOCK_HOLD(holder));
}

/* ## Processes ---------------------------------------------------------------- */

typedef struct forked {
  const char *name;
  int64_t ttl_ms, session_ms;
} forked;

static int make_forked(hilock_client *c, void *arg, hilock_hold **h) {
  const forked *k = arg;
  hilock_sequential_lock *sl = NULL;
  int rc = hilock_sequential_lock_new(c, k->name, strlen(k->name), k->ttl_ms, &sl);
  *h = HILOCK_HOLD(sl);
  if (rc == HILOCK_OK) rc = hilock_sequential_lock_set_heartbeat(sl, k->session_ms);
  if (rc == HILOCK_OK) rc = hilock_hold_set_auto_renew(*h, 1, 0, NULL, NULL);
  return rc;
}

/* A forked contender (see hl_fork_contender): session window session_ms,
 * ttl ttl_ms (renewed). */
static pid_t fork_contender(fixture *f, const char *name, int64_t ttl_ms,
                            int64_t session_ms, int64_t hold_ms) {
  forked k = {name, ttl_ms, session_ms};
  return hl_fork_contender(f->server.url, make_forked, &k, seq_acquire,
                           seq_release, hold_ms);
}

static void sigkilled_holder_passes_the_turn_within_its_session(void **state) {
  fixture *f = *state;
  const int64_t ttl = 800; /* the holder's session, renewed while alive */
  hilock_sequential_lock *w = make_seq(f->client, "dead-holder", 10000);
  pid_t holder;
  int64_t t0, took;

  /* A counter at 1000: the dead holder drew 1001. */
  hl_redis_ok(f->redis, "SET hilock:{dead-holder}:fence 1000");
  holder = fork_contender(f, "dead-holder", ttl, 600, -1);
  wait_queue_len(f, "dead-holder", 1, 5000);
  while (hl_redis_int(f->redis, "EXISTS hilock:{dead-holder}:seq:holder") == 0)
    hl_sleep_ms(2);
  hl_sleep_ms(ttl); /* renewed at least once: it outlived its first ttl */
  assert_int_equal(queue_len(f, "dead-holder"), 1);
  assert_int_equal(kill(holder, SIGKILL), 0);
  assert_int_equal(hl_wait_child(holder, 30000), 128 + SIGKILL);
  t0 = hl_now_ms();
  /* Our session window is 5 s: it is the holder's session that bounds the
   * wait, not our own re-checks. */
  assert_hl_ok(hilock_sequential_lock_acquire(w, 5000), hilock_hold_errmsg(HILOCK_HOLD(w)));
  took = hl_now_ms() - t0;
  assert_i64_between(took, 50, ttl + 600);
  assert_int_equal(hilock_sequential_lock_sequence(w), 2);
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(w)), 1002);
  assert_hl_ok(hilock_sequential_lock_release(w), hilock_hold_errmsg(HILOCK_HOLD(w)));
  assert_no_residue(f, "dead-holder");
  hilock_hold_free(HILOCK_HOLD(w));
}

static void sigkilled_waiter_passes_the_turn_within_its_session(void **state) {
  fixture *f = *state;
  const int64_t window = 600; /* the dead waiter's session */
  hilock_sequential_lock *holder = make_seq(f->client, "dead-pred", 10000);
  hilock_sequential_lock *w = make_seq(f->client, "dead-pred", 10000);
  hl_waiter me;
  pthread_t t;
  pid_t pred;
  int64_t t0, took;

  hl_redis_ok(f->redis, "SET hilock:{dead-pred}:fence 1000");
  assert_hl_ok(hilock_sequential_lock_acquire(holder, 1000),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  pred = fork_contender(f, "dead-pred", 10000, window, 0);
  wait_queue_len(f, "dead-pred", 2, 5000);
  as_waiter(&me, w);
  assert_hl_ok(hilock_sequential_lock_set_heartbeat(w, 30000), hilock_hold_errmsg(HILOCK_HOLD(w)));
  t = hl_waiter_start(&me);
  wait_queue_len(f, "dead-pred", 3, 5000);
  assert_int_equal(kill(pred, SIGKILL), 0);
  assert_int_equal(hl_wait_child(pred, 30000), 128 + SIGKILL);
  t0 = hl_now_ms();
  /* The release pushes to the dead predecessor's list (nobody reads it);
   * we are woken when its session runs out, within its window, never by
   * our own re-check (10 s) or the holder's TTL (10 s). */
  assert_hl_ok(hilock_sequential_lock_release(holder), hilock_hold_errmsg(HILOCK_HOLD(holder)));
  pthread_join(t, NULL);
  took = hl_now_ms() - t0;
  assert_hl_ok(me.rc, hilock_hold_errmsg(HILOCK_HOLD(w)));
  assert_i64_between(took, 0, window + 700);
  assert_int_equal(me.number_granted, 3);
  assert_int_equal(me.fence, 1002); /* nothing was granted to the dead one */
  assert_no_residue(f, "dead-pred");
  hilock_hold_free(HILOCK_HOLD(holder));
  hilock_hold_free(HILOCK_HOLD(w));
}

/* ## Leaving ------------------------------------------------------------------- */

static void timed_out_waiter_leaves_no_residue_and_wakes_its_successor(
    void **state) {
  fixture *f = *state;
  hilock_sequential_lock *holder = make_seq(f->client, "timeout", 10000);
  hilock_sequential_lock *w = make_seq(f->client, "timeout", 10000);
  hl_waiter mid, last;
  pthread_t tm, tl;
  int64_t t0;

  assert_hl_ok(hilock_sequential_lock_acquire(holder, 1000),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  t0 = hl_now_ms();
  assert_hl_rc(hilock_sequential_lock_acquire(w, 300), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(w)));
  assert_i64_between(hl_now_ms() - t0, 290, 1000);
  assert_false(hilock_hold_held(HILOCK_HOLD(w)));
  assert_int_equal(queue_len(f, "timeout"), 1);
  assert_int_equal(wake_lists(f, "timeout"), 0);

  /* A waiter in the middle times out: its successor is told (one push to
   * its list) and now watches the holder. */
  as_waiter(&mid, w);
  mid.wait_ms = 400;
  assert_hl_ok(hilock_sequential_lock_set_heartbeat(
                   as_waiter(&last, make_seq(f->client, "timeout", 10000)),
                   30000),
               hilock_hold_errmsg(last.lock));
  tm = hl_waiter_start(&mid);
  wait_queue_len(f, "timeout", 2, 5000);
  tl = hl_waiter_start(&last);
  wait_queue_len(f, "timeout", 3, 5000);
  {
    long long before = hl_cmdstat_calls(f->redis, "evalsha");
    pthread_join(tm, NULL);
    assert_hl_rc(mid.rc, HILOCK_BUSY, hilock_hold_errmsg(HILOCK_HOLD(w)));
    hl_sleep_ms(50);
    /* Its last attempt at its deadline, its leave, then the successor's
     * re-check (woken by the leave), and no polling: one loaded run
     * counted one call more (not explained yet), so at most one more. */
    long long calls = hl_cmdstat_calls(f->redis, "evalsha") - before;
    assert_true(calls >= 3 && calls <= 4);
  }
  assert_int_equal(queue_len(f, "timeout"), 2);
  assert_hl_ok(hilock_sequential_lock_release(holder), hilock_hold_errmsg(HILOCK_HOLD(holder)));
  pthread_join(tl, NULL);
  assert_hl_ok(last.rc, hilock_hold_errmsg(HILOCK_HOLD(last.lock)));
  assert_int_equal(last.fence, hilock_hold_fence(HILOCK_HOLD(holder)) + 1);
  assert_no_residue(f, "timeout");
  hilock_hold_free(HILOCK_HOLD(last.lock));
  hilock_hold_free(HILOCK_HOLD(holder));
  hilock_hold_free(HILOCK_HOLD(w));
}

static void interrupted_waiter_leaves_no_residue(void **state) {
  fixture *f = *state;
  hilock_options o = hl_test_options();
  hilock_client *c = NULL;
  hilock_sequential_lock *holder = make_seq(f->client, "intr", 10000), *w;
  pthread_t t;
  int64_t t0;
  int interrupted = 0;

  o.interrupt = hl_flag_interrupt;
  o.interrupt_arg = &interrupted;
  assert_hl_ok(hilock_client_new(f->server.url, &o, &c),
               hilock_client_errmsg(c));
  w = make_seq(c, "intr", 10000);
  assert_hl_ok(hilock_sequential_lock_acquire(holder, 1000),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  t = hl_raise_flag_later(&interrupted, 200);
  t0 = hl_now_ms();
  assert_hl_rc(hilock_sequential_lock_acquire(w, 5000), HILOCK_EINTR,
               hilock_hold_errmsg(HILOCK_HOLD(w)));
  assert_i64_between(hl_now_ms() - t0, 150, 900);
  pthread_join(t, NULL);
  assert_int_equal(queue_len(f, "intr"), 1);
  assert_int_equal(wake_lists(f, "intr"), 0);
  assert_false(hilock_hold_held(HILOCK_HOLD(w)));
  assert_hl_ok(hilock_sequential_lock_release(holder), hilock_hold_errmsg(HILOCK_HOLD(holder)));
  assert_no_residue(f, "intr");
  hilock_hold_free(HILOCK_HOLD(w));
  hilock_client_free(c);
  hilock_hold_free(HILOCK_HOLD(holder));
}

/* ## Sessions ------------------------------------------------------------------ */

static void live_waiter_keeps_its_entry_however_long_it_waits(void **state) {
  fixture *f = *state;
  hilock_sequential_lock *holder = make_seq(f->client, "patient", 10000);
  hl_waiter w;
  pthread_t t;
  int64_t t0;
  char id[33];
  redisReply *r;

  assert_hl_ok(hilock_sequential_lock_set_heartbeat(
                   as_waiter(&w, make_seq(f->client, "patient", 10000)), 1000),
               hilock_hold_errmsg(w.lock));
  assert_hl_ok(hilock_sequential_lock_acquire(holder, 1000),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  t = hl_waiter_start(&w);
  wait_queue_len(f, "patient", 2, 5000);
  r = hl_redis(f->redis, "ZRANGE hilock:{patient}:seq:queue 1 1");
  assert_int_equal(r->elements, 1);
  snprintf(id, sizeof(id), "%s", r->element[0]->str);
  freeReplyObject(r);
  /* 2.5 windows: its session keeps moving ahead of the server clock. */
  for (int i = 0; i < 25; i++) {
    assert_i64_between(session_left(f, "patient", id), 1, 1000);
    assert_int_equal(queue_len(f, "patient"), 2);
    hl_sleep_ms(100);
  }
  assert_int_equal(seq_sequence(w.lock), 2);
  t0 = hl_now_ms();
  assert_hl_ok(hilock_sequential_lock_release(holder), hilock_hold_errmsg(HILOCK_HOLD(holder)));
  pthread_join(t, NULL);
  assert_hl_ok(w.rc, hilock_hold_errmsg(HILOCK_HOLD(w.lock)));
  assert_int_equal(w.number_granted, 2);
  assert_i64_between(hl_now_ms() - t0, 0, 500);
  assert_no_residue(f, "patient");
  hilock_hold_free(HILOCK_HOLD(w.lock));
  hilock_hold_free(HILOCK_HOLD(holder));
}

static void holder_crash_hands_over_when_its_ttl_runs_out(void **state) {
  fixture *f = *state;
  hilock_sequential_lock *dead = make_seq(f->client, "crash", 300);
  hilock_sequential_lock *w = make_seq(f->client, "crash", 5000);
  int64_t t0;

  assert_hl_ok(hilock_sequential_lock_try_acquire(dead), hilock_hold_errmsg(HILOCK_HOLD(dead)));
  hilock_hold_free(HILOCK_HOLD(dead)); /* never released */
  t0 = hl_now_ms();
  /* The wait ends at the holder's session, not a re-check (2 s here). */
  assert_hl_ok(hilock_sequential_lock_set_heartbeat(w, 6000), hilock_hold_errmsg(HILOCK_HOLD(w)));
  assert_hl_ok(hilock_sequential_lock_acquire(w, 5000), hilock_hold_errmsg(HILOCK_HOLD(w)));
  assert_i64_between(hl_now_ms() - t0, 200, 1200);
  assert_hl_ok(hilock_sequential_lock_release(w), hilock_hold_errmsg(HILOCK_HOLD(w)));
  assert_no_residue(f, "crash");
  hilock_hold_free(HILOCK_HOLD(w));
}

/* ## The script's own guarantees ------------------------------------------------ */

static redisReply *seq_script(fixture *f, const char *name, const char *op,
                              const char *id) {
  static const char *const roles[6] = {"seq:queue",   "seq:session",
                                       "seq:holder",  "seq:counter",
                                       "fence",       "seq:wake:"};
  const char *args[6] = {op, id, "5000", "1000", "0", ""};
  return hl_run_script(f->client, &hilock__script_seqlock, name, roles, 6,
                       args, 6);
}

static void resent_acquire_and_leave_after_a_lost_reply(void **state) {
  fixture *f = *state;
  redisReply *r;

  /* A grant, then the same call again (a resend after a broken
   * connection): the same grant and fence, no second one. */
  hl_redis_ok(f->redis, "SET hilock:{lost}:fence 1000");
  r = seq_script(f, "lost", "acquire", "me");
  assert_int_equal(r->element[0]->integer, 1);
  assert_int_equal(r->element[1]->integer, 1001);
  assert_int_equal(r->element[2]->integer, 1);
  freeReplyObject(r);
  r = seq_script(f, "lost", "acquire", "me");
  assert_int_equal(r->element[0]->integer, 1);
  assert_int_equal(r->element[1]->integer, 1001);
  assert_int_equal(r->element[2]->integer, 1);
  freeReplyObject(r);
  assert_int_equal(get_int(f, "hilock:{lost}:fence"), 1001);

  /* Two contenders enqueue; a resent enqueue keeps its sequence. */
  r = seq_script(f, "lost", "acquire", "next");
  assert_int_equal(r->element[0]->integer, 0);
  assert_i64_between(r->element[1]->integer, 4000, 5000); /* holder's session */
  assert_int_equal(r->element[2]->integer, 2);
  assert_int_equal(r->element[3]->integer, 1);
  freeReplyObject(r);
  r = seq_script(f, "lost", "acquire", "last");
  assert_int_equal(r->element[2]->integer, 3);
  assert_i64_between(r->element[1]->integer, 500, 1000); /* next's window */
  freeReplyObject(r);
  r = seq_script(f, "lost", "acquire", "next");
  assert_int_equal(r->element[2]->integer, 2);
  freeReplyObject(r);
  assert_int_equal(get_int(f, "hilock:{lost}:seq:counter"), 3);

  /* The caller that never saw its grant leaves: the grant is given back
   * and its successor, and only it, is woken. */
  r = seq_script(f, "lost", "leave", "me");
  assert_int_equal(r->element[0]->integer, 1);
  freeReplyObject(r);
  assert_null(holder_owner(f, "lost"));
  assert_int_equal(wake_len(f, "lost", 2), 1);
  assert_int_equal(wake_len(f, "lost", 3), -1);
  assert_i64_between(
      hl_redis_int(f->redis,
                   "PTTL hilock:{lost}:seq:wake:00000000000000000002"),
      1, 2000);
  r = seq_script(f, "lost", "acquire", "next");
  assert_int_equal(r->element[0]->integer, 1);
  assert_int_equal(r->element[1]->integer, 1002);
  assert_int_equal(r->element[2]->integer, 2);
  freeReplyObject(r);
  /* The grant consumed the wake-up. */
  assert_int_equal(wake_lists(f, "lost"), 0);
}

static void purge_of_a_dead_entry_wakes_its_successor_only(void **state) {
  fixture *f = *state;
  redisReply *r;
  long long now = hl_server_time_ms(f->redis);

  /* holder (1), ghost (2, dies in 200 ms), a (3), b (4). */
  freeReplyObject(seq_script(f, "purge", "acquire", "holder"));
  freeReplyObject(seq_script(f, "purge", "acquire", "ghost"));
  freeReplyObject(seq_script(f, "purge", "acquire", "a"));
  freeReplyObject(seq_script(f, "purge", "acquire", "b"));
  hl_redis_ok(f->redis, "ZADD hilock:{purge}:seq:session XX %lld ghost",
              now + 200);
  hl_sleep_ms(250);
  /* Any call purges it: its successor a is told, b and the holder not. */
  r = seq_script(f, "purge", "info", "");
  assert_int_equal(r->element[0]->integer, 1);
  assert_int_equal(r->element[1]->integer, 2);
  assert_int_equal(r->element[2]->integer, 1);
  freeReplyObject(r);
  assert_int_equal(wake_len(f, "purge", 3), 1);
  assert_int_equal(wake_lists(f, "purge"), 1);
  assert_int_equal(queue_len(f, "purge"), 3);
  /* a now watches the holder: its wait is bounded by the holder's session. */
  r = seq_script(f, "purge", "acquire", "a");
  assert_int_equal(r->element[0]->integer, 0);
  assert_i64_between(r->element[1]->integer, 3000, 5000);
  assert_int_equal(r->element[3]->integer, 1);
  freeReplyObject(r);
}

static void sequence_never_goes_back_when_the_counter_is_lost(void **state) {
  fixture *f = *state;
  redisReply *r;

  freeReplyObject(seq_script(f, "amnesia", "acquire", "holder"));
  freeReplyObject(seq_script(f, "amnesia", "acquire", "first"));
  freeReplyObject(seq_script(f, "amnesia", "acquire", "second"));
  hl_redis_ok(f->redis, "DEL hilock:{amnesia}:seq:counter");
  r = seq_script(f, "amnesia", "acquire", "newcomer");
  assert_int_equal(r->element[0]->integer, 0);
  assert_int_equal(r->element[2]->integer, 4);
  assert_int_equal(r->element[3]->integer, 3);
  freeReplyObject(r);
  assert_int_equal(get_int(f, "hilock:{amnesia}:seq:counter"), 4);
}

static void damaged_keys_fail_closed(void **state) {
  fixture *f = *state;
  hilock_sequential_lock *l = make_seq(f->client, "damaged", 5000);

  hl_redis_ok(f->redis, "SET hilock:{damaged}:seq:queue x");
  assert_hl_rc(hilock_sequential_lock_acquire(l, 100), HILOCK_EWRONGTYPE,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(l)), "WRONGTYPE");
  assert_false(hilock_hold_held(HILOCK_HOLD(l)));
  assert_null(holder_owner(f, "damaged"));

  hl_redis_ok(f->redis, "DEL hilock:{damaged}:seq:queue");
  hl_redis_ok(f->redis, "SET hilock:{damaged}:fence not-a-number");
  assert_hl_rc(hilock_sequential_lock_acquire(l, 100), HILOCK_ESCRIPT,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_false(hilock_hold_held(HILOCK_HOLD(l)));
  assert_null(holder_owner(f, "damaged"));
  /* The failed acquire removed its entry. */
  assert_no_residue(f, "damaged");
  hilock_hold_free(HILOCK_HOLD(l));
}

/* ## Arguments ----------------------------------------------------------------- */

/* Arguments of this family's own calls (NULL handles and negative waits:
 * test_contract.c; the hold's own arguments: test_hold.c). */
static void invalid_arguments_are_einval(void **state) {
  fixture *f = *state;
  hilock_sequential_lock *l = NULL;
  int64_t n;

  assert_int_equal(hilock_sequential_lock_new(NULL, "x", 1, 1000, &l), HILOCK_EINVAL);
  assert_int_equal(hilock_sequential_lock_new(f->client, "x", 1, 1000, NULL),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_sequential_lock_new(f->client, NULL, 1, 1000, &l),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_sequential_lock_new(f->client, "}x", 2, 1000, &l),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_sequential_lock_new(f->client, "x", 1, 0, &l),
                   HILOCK_EINVAL);
  assert_substr(hilock_client_errmsg(f->client), "ttl");
  assert_null(l);

  assert_int_equal(hilock_sequential_lock_waiters(NULL, &n), HILOCK_EINVAL);
  assert_int_equal(hilock_sequential_lock_set_heartbeat(NULL, 1000), HILOCK_EINVAL);
  assert_int_equal(hilock_sequential_lock_sequence(NULL), 0);
  assert_int_equal(hilock_sequential_lock_heartbeat_ms(NULL), 0);

  l = make_seq(f->client, "args", 50);
  assert_int_equal(hilock_sequential_lock_heartbeat_ms(l), 500);
  assert_hl_rc(hilock_sequential_lock_set_heartbeat(l, 499), HILOCK_EINVAL,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(l)), "heartbeat");
  assert_int_equal(hilock_sequential_lock_waiters(l, NULL), HILOCK_EINVAL);
  assert_hl_ok(hilock_sequential_lock_set_heartbeat(l, 2500), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_int_equal(hilock_sequential_lock_heartbeat_ms(l), 2500);
  assert_int_equal(queue_len(f, "args"), 0);
  hilock_hold_free(HILOCK_HOLD(l));
}

#define T(f) cmocka_unit_test_setup_teardown(f, hl_setup, hl_teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(try_acquire_busy_release_and_key_layout),
      T(not_reentrant),
      T(extend_and_renew_act_while_owned),
      T(grant_order_is_sequence_order),
      T(release_wakes_the_successor_only),
      T(sigkilled_holder_passes_the_turn_within_its_session),
      T(sigkilled_waiter_passes_the_turn_within_its_session),
      T(timed_out_waiter_leaves_no_residue_and_wakes_its_successor),
      T(interrupted_waiter_leaves_no_residue),
      T(live_waiter_keeps_its_entry_however_long_it_waits),
      T(holder_crash_hands_over_when_its_ttl_runs_out),
      T(resent_acquire_and_leave_after_a_lost_reply),
      T(purge_of_a_dead_entry_wakes_its_successor_only),
      T(sequence_never_goes_back_when_the_counter_is_lost),
      T(damaged_keys_fail_closed),
      T(invalid_arguments_are_einval),
  };
  return cmocka_run_group_tests_name("seqlock", tests, hl_group_setup,
                                     hl_group_teardown);
}
