/* The queue-style families (the fair lock and the sequential lock): their
 * table rows, helpers and shared tests (see queued_util.h). */
#include "queued_util.h"

#include <stdio.h>
#include <stdlib.h>

const hl_queued *hl_q_family;

#define Q hl_q_family
#define E(h) hilock_hold_errmsg(h)

/* cmd (EXISTS, ZCARD, PTTL: an integer reply) on the key of the lock name
 * formatted by fmt. */
static long long key_int(redisContext *r, const char *cmd, const char *fmt,
                         const char *name) {
  char key[192];
  snprintf(key, sizeof(key), fmt, name);
  return hl_redis_int(r, "%s %s", cmd, key);
}

/* The calls of a family that hl_queued takes on the hold: its waiters and
 * number (its heartbeat is the hold's). */
#define QUEUED_CALLS(T, type, number_fn)                                    \
  static int T##_waiters(hilock_hold *h, int64_t *count) {                  \
    return type##_waiters((type *)h, count);                                \
  }                                                                         \
  static uint64_t T##_number(const hilock_hold *h) {                        \
    return number_fn((const type *)h);                                      \
  }

QUEUED_CALLS(fair, hilock_fair_lock, hilock_fair_lock_ticket)
QUEUED_CALLS(seq, hilock_sequential_lock, hilock_sequential_lock_sequence)

/* ## The fair lock ------------------------------------------------------------ */

static char *fair_holder(redisContext *r, const char *name) {
  char key[128];
  int n = snprintf(key, sizeof(key), "hilock:{%s}:fair", name);
  return hl_redis_get(r, key, (size_t)n);
}

static long long fair_grant_left(redisContext *r, const char *name,
                                 const hilock_hold *h) {
  (void)h;
  return key_int(r, "PTTL", "hilock:{%s}:fair", name);
}

/* The only waiter's heartbeat deadline, less the server's time. */
static long long fair_waiter_left(redisContext *r, const char *name) {
  redisReply *rep = hl_redis(r, "ZRANGE hilock:{%s}:fair:heartbeat 0 -1 "
                                "WITHSCORES", name);
  long long now = hl_server_time_ms(r), deadline;
  assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
  assert_int_equal(rep->elements, 2);
  deadline = atoll(rep->element[1]->str);
  freeReplyObject(rep);
  return deadline - now;
}

static const char *const fair_waiting[] = {
    "hilock:{%s}:fair:queue", "hilock:{%s}:fair:heartbeat", NULL};
static const char *const fair_all[] = {
    "hilock:{%s}:fair", "hilock:{%s}:fair:queue", "hilock:{%s}:fair:heartbeat",
    NULL};

/* A grant is the holder's key; a waiter has a queue entry and a heartbeat
 * (a deadline) of its own. */
const hl_queued hl_fair_queued = {
    &hl_fair_verbs, hl_fair_new_hold, hilock_hold_set_heartbeat, hilock_hold_heartbeat_ms,
    fair_waiters, fair_number, "hilock:{%s}:fair:queue", "hilock:{%s}:wake:*",
    "hilock:{%s}:fair:ticket", fair_waiting, fair_all,
    .holder = fair_holder, .grant_left = fair_grant_left,
    .waiter_left = fair_waiter_left};

/* ## The sequential lock ------------------------------------------------------- */

/* The owner recorded in the grant, or NULL. */
static char *seq_holder(redisContext *r, const char *name) {
  redisReply *rep = hl_redis(r, "HGET hilock:{%s}:seq:holder owner", name);
  char *v = rep->type == REDIS_REPLY_STRING ? strdup(rep->str) : NULL;
  freeReplyObject(rep);
  return v;
}

static long long seq_grant_left(redisContext *r, const char *name,
                                const hilock_hold *h) {
  return hl_q_session_left(r, name, hilock_hold_token(h));
}

/* The session of the entry after the holder's. */
static long long seq_waiter_left(redisContext *r, const char *name) {
  redisReply *rep = hl_redis(r, "ZRANGE hilock:{%s}:seq:queue 1 1", name);
  char id[33];
  assert_int_equal(rep->elements, 1);
  snprintf(id, sizeof(id), "%s", rep->element[0]->str);
  freeReplyObject(rep);
  return hl_q_session_left(r, name, id);
}

static const char *const seq_waiting[] = {NULL};
static const char *const seq_all[] = {
    "hilock:{%s}:seq:queue", "hilock:{%s}:seq:session",
    "hilock:{%s}:seq:holder", NULL};

/* Holder and waiters are entries of the queue, each with a session; a
 * waiter watches the entry before it. */
const hl_queued hl_seq_queued = {
    &hl_seq_verbs, hl_seq_new_hold, hilock_hold_set_heartbeat, hilock_hold_heartbeat_ms,
    seq_waiters, seq_number, "hilock:{%s}:seq:queue", "hilock:{%s}:seq:wake:*",
    "hilock:{%s}:seq:counter", seq_waiting, seq_all, 1, 1, 1,
    "hilock:{%s}:seq:holder", "hilock:{%s}:seq:wake:%020lld", seq_holder,
    seq_grant_left, seq_waiter_left};

long long hl_q_session_left(redisContext *r, const char *name,
                            const char *id) {
  redisReply *rep = hl_redis(r, "ZSCORE hilock:{%s}:seq:session %s", name, id);
  long long left = -1;
  if (rep->type == REDIS_REPLY_STRING)
    left = atoll(rep->str) - hl_server_time_ms(r);
  freeReplyObject(rep);
  return left;
}

/* ## Helpers ------------------------------------------------------------------- */

hilock_hold *hl_q_make(hilock_client *c, const char *name, int64_t ttl_ms) {
  hilock_hold *h = NULL;
  assert_hl_ok(Q->new_hold(c, name, strlen(name), ttl_ms, &h),
               hilock_client_errmsg(c));
  assert_non_null(h);
  return h;
}

long long hl_q_queue_len(hl_fixture *f, const char *name) {
  return key_int(f->redis, "ZCARD", Q->queue, name);
}

void hl_q_wait_queue_len(hl_fixture *f, const char *name, long long n,
                         int64_t timeout_ms) {
  char key[192];
  snprintf(key, sizeof(key), Q->queue, name);
  assert_true(hl_wait_zcard(f->redis, key, n, timeout_ms));
}

long long hl_q_wake_lists(hl_fixture *f, const char *name) {
  char pattern[192];
  snprintf(pattern, sizeof(pattern), Q->wake_pattern, name);
  return hl_keys_count(f->redis, "%s", pattern);
}

char *hl_q_holder(hl_fixture *f, const char *name) {
  return Q->holder(f->redis, name);
}

void hl_q_assert_holder(hl_fixture *f, const char *name, hilock_hold *h) {
  char *v = hl_q_holder(f, name);
  assert_non_null(v);
  assert_string_equal(v, hilock_hold_token(h));
  free(v);
}

void hl_q_assert_no_waiters(hl_fixture *f, const char *name, int held) {
  for (const char *const *k = Q->waiting; *k != NULL; k++)
    assert_int_equal(key_int(f->redis, "EXISTS", *k, name), 0);
  assert_int_equal(hl_q_queue_len(f, name), held ? Q->holder_queued : 0);
  assert_int_equal(hl_q_wake_lists(f, name), 0);
}

void hl_q_assert_no_residue(hl_fixture *f, const char *name) {
  for (const char *const *k = Q->all; *k != NULL; k++)
    assert_int_equal(key_int(f->redis, "EXISTS", *k, name), 0);
  assert_int_equal(hl_q_wake_lists(f, name), 0);
}

hilock_hold *hl_q_waiter(hl_waiter *w, hilock_hold *h, int *grant_counter) {
  memset(w, 0, sizeof(*w));
  w->lock = h;
  w->acquire = Q->verbs->acquire;
  w->release = Q->verbs->release;
  w->number = Q->number;
  w->grant_counter = grant_counter;
  return h;
}

typedef struct forked {
  const char *name;
  int64_t ttl_ms, beat_ms;
  int renew;
} forked;

static int make_forked(hilock_client *c, void *arg, hilock_hold **h) {
  const forked *k = arg;
  int rc = Q->new_hold(c, k->name, strlen(k->name), k->ttl_ms, h);
  if (rc == HILOCK_OK) rc = Q->set_heartbeat(*h, k->beat_ms);
  if (rc == HILOCK_OK && k->renew)
    rc = hilock_hold_set_auto_renew(*h, 1, 0, NULL, NULL);
  return rc;
}

pid_t hl_q_fork(hl_fixture *f, const char *name, int64_t ttl_ms,
                int64_t beat_ms, int renew, int64_t hold_ms) {
  forked k = {name, ttl_ms, beat_ms, renew};
  return hl_fork_contender(f->server.url, make_forked, &k, Q->verbs->acquire,
                           Q->verbs->release, hold_ms);
}

void hl_q_busy_after_its_wait(hl_fixture *f, const char *name,
                              hilock_hold *holder, hilock_hold *w) {
  int64_t t0;
  assert_hl_ok(Q->verbs->acquire(holder, 1000), E(holder));
  t0 = hl_now_ms();
  assert_hl_rc(Q->verbs->acquire(w, 300), HILOCK_BUSY, E(w));
  /* Bounded by the wait, not the holder; 2 s leaves room for a loaded
   * machine. */
  assert_i64_between(hl_now_ms() - t0, 290, 2000);
  assert_false(hilock_hold_held(w));
  hl_q_assert_no_waiters(f, name, 1);
}

void hl_q_assert_new_handle(hilock_hold *h, const char *key, int64_t ttl_ms,
                            int64_t heartbeat_ms) {
  size_t len = 0;
  assert_string_equal(hilock_hold_key(h, &len), key);
  assert_int_equal(len, strlen(key));
  assert_int_equal(hilock_hold_ttl_ms(h), ttl_ms);
  assert_int_equal(Q->heartbeat_ms(h), heartbeat_ms);
  assert_int_equal(Q->number(h), 0);
  assert_int_equal(hilock_hold_fence(h), 0);
  assert_string_equal(hilock_hold_token(h), "");
}

void hl_q_assert_refused(hilock_hold *a, hilock_hold *b) {
  int locked = -1, owned = -1;
  int64_t n = -1;
  assert_hl_rc(Q->verbs->try_acquire(b), HILOCK_BUSY, E(b));
  assert_hl_rc(Q->verbs->acquire(b, 0), HILOCK_BUSY, E(b));
  assert_false(hilock_hold_held(b));
  assert_hl_ok(hilock_hold_locked(b, &locked), E(b));
  assert_true(locked);
  assert_hl_ok(Q->waiters(b, &n), E(b));
  assert_int_equal(n, 0);
  assert_hl_ok(hilock_hold_owned(b, &owned), E(b));
  assert_false(owned);
  assert_hl_ok(hilock_hold_owned(a, &owned), E(a));
  assert_true(owned);
}

/* ## The shared tests ------------------------------------------------------------ */

void hl_q_not_reentrant(void **state) {
  hl_fixture *f = *state;
  hilock_hold *a = hl_q_make(f->client, "own", 5000);
  char token[33];
  uint64_t fence;

  assert_hl_ok(Q->verbs->acquire(a, 1000), E(a));
  memcpy(token, hilock_hold_token(a), 33);
  fence = hilock_hold_fence(a);
  assert_hl_rc(Q->verbs->acquire(a, 200), HILOCK_EINVAL, E(a));
  assert_substr(E(a), "not reentrant");
  assert_hl_rc(Q->verbs->try_acquire(a), HILOCK_EINVAL, E(a));
  assert_string_equal(hilock_hold_token(a), token);
  assert_int_equal(hilock_hold_fence(a), fence);
  /* Nothing was queued but the holder's own entry (if it has one). */
  assert_int_equal(hl_q_queue_len(f, "own"), Q->holder_queued);
  hl_q_assert_holder(f, "own", a);
  assert_hl_ok(Q->verbs->release(a), E(a));
  hilock_hold_free(a);
}

void hl_q_extend_and_renew_act_while_owned(void **state) {
  hl_fixture *f = *state;
  const hl_verbs *v = Q->verbs;
  hilock_hold *l = hl_q_make(f->client, "ext", 1000);

  assert_hl_rc(v->renew(l), HILOCK_ENOTOWNED, E(l));
  assert_hl_ok(v->try_acquire(l), E(l));
  assert_hl_ok(v->extend(l, 5000, 1), E(l));
  assert_i64_between(Q->grant_left(f->redis, "ext", l), 4500, 5000);
  assert_i64_between(hilock_hold_validity_ms(l), 4500, 5000);
  /* A session's keys outlive it. */
  if (Q->outliving != NULL)
    assert_i64_between(key_int(f->redis, "PTTL", Q->outliving, "ext"), 5000,
                       6000);
  assert_hl_ok(v->extend(l, 2000, 0), E(l));
  assert_i64_between(Q->grant_left(f->redis, "ext", l), 6500, 7000);
  assert_hl_ok(v->renew(l), E(l));
  assert_i64_between(Q->grant_left(f->redis, "ext", l), 800, 1000);
  /* Renewal (as the watchdog's) keeps every key at least as long as the
   * session. */
  if (Q->outliving != NULL)
    assert_true(key_int(f->redis, "PTTL", Q->queue, "ext") >=
                Q->grant_left(f->redis, "ext", l));
  assert_hl_rc(v->extend(l, 0, 1), HILOCK_EINVAL, E(l));
  assert_hl_ok(v->release(l), E(l));
  hilock_hold_free(l);
}

#define NWAITERS 5

/* n waiters on name, started one at a time so that their order in the
 * queue is known; each holds 5 ms once granted, until go[i] if go is set.
 * beat_ms: their heartbeat window (0: the default). */
static void start_waiters(hl_fixture *f, const char *name, hl_waiter *w,
                          int n, int64_t beat_ms, volatile int *go,
                          int *grants) {
  for (int i = 0; i < n; i++) {
    hilock_hold *h =
        hl_q_waiter(&w[i], hl_q_make(f->client, name, 10000), grants);
    w[i].hold_ms = 5;
    if (beat_ms) assert_hl_ok(Q->set_heartbeat(h, beat_ms), E(h));
    if (go != NULL) {
      go[i] = 0;
      w[i].release_now = &go[i];
    }
    hl_waiter_start(&w[i]);
    hl_q_wait_queue_len(f, name, i + 1 + Q->holder_queued, 5000);
  }
}

void hl_q_grants_follow_queue_order(void **state) {
  hl_fixture *f = *state;
  hilock_hold *holder = hl_q_make(f->client, "order", 10000);
  hl_waiter w[NWAITERS];
  int grants = 0;
  int64_t n = -1;

  assert_hl_ok(Q->verbs->acquire(holder, 1000), E(holder));
  /* A new name's first grant has number 1. */
  assert_int_equal(Q->number(holder), 1);
  start_waiters(f, "order", w, NWAITERS, 0, NULL, &grants);
  if (Q->numbered_at_enqueue)
    for (int i = 0; i < NWAITERS; i++) {
      /* Queued on the server; its thread may not have read the reply. */
      int64_t end = hl_now_ms() + 5000;
      while (Q->number(w[i].lock) == 0 && hl_now_ms() < end) hl_sleep_ms(1);
      assert_int_equal(Q->number(w[i].lock), 2 + i);
    }
  assert_hl_ok(Q->waiters(holder, &n), E(holder));
  assert_int_equal(n, NWAITERS);
  assert_hl_ok(Q->verbs->release(holder), E(holder));
  for (int i = 0; i < NWAITERS; i++) hl_waiter_join(&w[i]);

  for (int i = 0; i < NWAITERS; i++) {
    assert_hl_ok(w[i].rc, E(w[i].lock));
    assert_hl_ok(w[i].release_rc, E(w[i].lock));
    /* Grant order == queue order; numbers and fences follow it. */
    assert_int_equal(w[i].grant_pos, i);
    assert_int_equal(w[i].number_granted, 2 + i);
    assert_true(w[i].fence >
                (i ? w[i - 1].fence : hilock_hold_fence(holder)));
    hilock_hold_free(w[i].lock);
  }
  hl_q_assert_no_residue(f, "order");
  hilock_hold_free(holder);
}

/* Each release wakes the next waiter and nobody else: while the others
 * block, only the next one runs a script. */
void hl_q_release_wakes_the_next_waiter_only(void **state) {
  hl_fixture *f = *state;
  hilock_hold *holder = hl_q_make(f->client, "next", 10000);
  hl_waiter w[NWAITERS];
  volatile int go[NWAITERS];
  int grants = 0;
  char key[192];
  long long before;

  /* Numbers 98..103: their decimal text changes length (the sequential
   * lock names wake lists by them). */
  snprintf(key, sizeof(key), Q->counter, "next");
  hl_redis_ok(f->redis, "SET %s 97", key);
  assert_hl_ok(Q->verbs->acquire(holder, 1000), E(holder));
  assert_int_equal(Q->number(holder), 98);
  /* Heartbeats of 30 s (re-checks every 10 s): within this test only
   * wake-ups move waiters. */
  start_waiters(f, "next", w, NWAITERS, 30000, go, &grants);
  assert_true(hl_wait_waiters(f->redis, NWAITERS, 3000));
  hl_sleep_ms(50);
  assert_int_equal(hl_waiters(f->redis), NWAITERS);
  before = hl_cmdstat_calls(f->redis, "evalsha");
  assert_hl_ok(Q->verbs->release(holder), E(holder));
  for (int i = 0; i < NWAITERS; i++) {
    /* Waiter i, and no other, wakes and takes the lock. */
    int64_t deadline = hl_now_ms() + 3000;
    while (__atomic_load_n(&grants, __ATOMIC_ACQUIRE) < i + 1 &&
           hl_now_ms() < deadline)
      hl_sleep_ms(1);
    hl_sleep_ms(30);
    assert_int_equal(__atomic_load_n(&grants, __ATOMIC_ACQUIRE), i + 1);
    assert_int_equal(w[i].grant_pos, i);
    assert_int_equal(w[i].number_granted, 99 + i);
    /* Everyone behind still waits, each on its own list, none pushed. */
    assert_int_equal(hl_waiters(f->redis), NWAITERS - 1 - i);
    assert_int_equal(hl_q_queue_len(f, "next"),
                     NWAITERS - 1 - i + Q->holder_queued);
    for (int j = i + 1; Q->wake_of != NULL && j < NWAITERS; j++) {
      snprintf(key, sizeof(key), Q->wake_of, "next", 99LL + j);
      assert_int_equal(hl_redis_int(f->redis, "EXISTS %s", key), 0);
    }
    /* Scripts run since the first release: one release per grant and one
     * acquire per woken waiter, nothing from the waiters behind. */
    assert_int_equal(hl_cmdstat_calls(f->redis, "evalsha") - before,
                     1 + 2 * i + 1);
    __atomic_store_n(&go[i], 1, __ATOMIC_RELEASE);
  }
  for (int i = 0; i < NWAITERS; i++) {
    hl_waiter_join(&w[i]);
    assert_hl_ok(w[i].rc, E(w[i].lock));
    assert_hl_ok(w[i].release_rc, E(w[i].lock));
    hilock_hold_free(w[i].lock);
  }
  assert_int_equal(hl_cmdstat_calls(f->redis, "evalsha") - before,
                   2 * NWAITERS + 1);
  hl_q_assert_no_residue(f, "next");
  hilock_hold_free(holder);
}

void hl_q_interrupted_waiter_leaves_no_residue(void **state) {
  hl_fixture *f = *state;
  hilock_options o = hl_test_options();
  hilock_client *c;
  hilock_hold *holder = hl_q_make(f->client, "intr", 10000), *w;
  pthread_t t;
  int64_t t0;
  int interrupted = 0;

  o.interrupt = hl_flag_interrupt;
  o.interrupt_arg = &interrupted;
  c = hl_client(f->server.url, &o);
  w = hl_q_make(c, "intr", 10000);
  assert_hl_ok(Q->verbs->acquire(holder, 1000), E(holder));
  t = hl_raise_flag_later(&interrupted, 200);
  t0 = hl_now_ms();
  assert_hl_rc(Q->verbs->acquire(w, 5000), HILOCK_EINTR, E(w));
  /* Ended by the hook, not the 5 s limit; 2 s leaves room for a loaded
   * machine. */
  assert_i64_between(hl_now_ms() - t0, 150, 2000);
  pthread_join(t, NULL);
  hl_q_assert_no_waiters(f, "intr", 1);
  assert_false(hilock_hold_held(w));
  assert_hl_ok(Q->verbs->release(holder), E(holder));
  hl_q_assert_no_residue(f, "intr");
  hilock_hold_free(w);
  hilock_client_free(c);
  hilock_hold_free(holder);
}

/* A waiter that times out after its wait leaves nothing behind; one that
 * times out with a waiter behind it leaves its place to it. */
void hl_q_timed_out_waiter_leaves_its_place_to_the_next(void **state) {
  hl_fixture *f = *state;
  hilock_hold *holder = hl_q_make(f->client, "timeout", 10000);
  hilock_hold *w = hl_q_make(f->client, "timeout", 10000);
  hl_waiter first, next;
  int grants = 0;
  long long before;

  hl_q_busy_after_its_wait(f, "timeout", holder, w);

  hl_q_waiter(&first, w, &grants);
  first.wait_ms = 400;
  /* Re-checks every 10 s: within this test only wake-ups move it. */
  hl_q_waiter(&next, hl_q_make(f->client, "timeout", 10000), &grants);
  assert_hl_ok(Q->set_heartbeat(next.lock, 30000), E(next.lock));
  hl_waiter_start(&first);
  hl_q_wait_queue_len(f, "timeout", 1 + Q->holder_queued, 5000);
  hl_waiter_start(&next);
  hl_q_wait_queue_len(f, "timeout", 2 + Q->holder_queued, 5000);
  before = hl_cmdstat_calls(f->redis, "evalsha");
  hl_waiter_join(&first);
  assert_hl_rc(first.rc, HILOCK_BUSY, E(w));
  if (Q->watches_predecessor) {
    long long calls;
    hl_sleep_ms(50);
    /* Its successor is told (one push to its list) and now watches the
     * holder: the first waiter's last attempt at its deadline, its leave,
     * then the successor's re-check (woken by the leave), and no polling:
     * one loaded run counted one call more (not explained yet), so at
     * most one more. */
    calls = hl_cmdstat_calls(f->redis, "evalsha") - before;
    assert_true(calls >= 3 && calls <= 4);
  }
  assert_int_equal(hl_q_queue_len(f, "timeout"), 1 + Q->holder_queued);
  assert_hl_ok(Q->verbs->release(holder), E(holder));
  hl_waiter_join(&next);
  assert_hl_ok(next.rc, E(next.lock));
  assert_true(next.fence > hilock_hold_fence(holder));
  hl_q_assert_no_residue(f, "timeout");
  hilock_hold_free(next.lock);
  hl_holds_free(holder, w);
}

void hl_q_live_waiter_keeps_its_place_however_long_it_waits(void **state) {
  hl_fixture *f = *state;
  hilock_hold *holder = hl_q_make(f->client, "patient", 10000);
  hl_waiter w;
  int grants = 0;
  int64_t t0;

  assert_hl_ok(
      Q->set_heartbeat(
          hl_q_waiter(&w, hl_q_make(f->client, "patient", 10000), &grants),
          1000),
      E(w.lock));
  assert_hl_ok(Q->verbs->acquire(holder, 1000), E(holder));
  hl_waiter_start(&w);
  hl_q_wait_queue_len(f, "patient", 1 + Q->holder_queued, 5000);
  /* 2.5 windows: its deadline keeps moving ahead of the server clock. */
  for (int i = 0; i < 25; i++) {
    assert_i64_between(Q->waiter_left(f->redis, "patient"), 1, 1000);
    assert_int_equal(hl_q_queue_len(f, "patient"), 1 + Q->holder_queued);
    hl_sleep_ms(100);
  }
  if (Q->numbered_at_enqueue) assert_int_equal(Q->number(w.lock), 2);
  t0 = hl_now_ms();
  assert_hl_ok(Q->verbs->release(holder), E(holder));
  hl_waiter_join(&w);
  assert_hl_ok(w.rc, E(w.lock));
  assert_int_equal(w.number_granted, 2);
  /* Served, not dropped; 2 s leaves room for a loaded machine. */
  assert_i64_between(hl_now_ms() - t0, 0, 2000);
  hl_q_assert_no_residue(f, "patient");
  hilock_hold_free(w.lock);
  hilock_hold_free(holder);
}

void hl_q_holder_crash_hands_over_when_its_ttl_runs_out(void **state) {
  hl_fixture *f = *state;
  hilock_hold *dead = hl_q_make(f->client, "crash", 300);
  hilock_hold *w = hl_q_make(f->client, "crash", 5000);
  int64_t t0;

  assert_hl_ok(Q->verbs->try_acquire(dead), E(dead));
  hilock_hold_free(dead); /* never released */
  t0 = hl_now_ms();
  /* The wait ends when the holder's TTL runs out, not at a re-check (5 s
   * here, the wait's limit); 2.5 s leaves room for a loaded machine. */
  assert_hl_ok(Q->set_heartbeat(w, 15000), E(w));
  assert_hl_ok(Q->verbs->acquire(w, 5000), E(w));
  assert_i64_between(hl_now_ms() - t0, 200, 2500);
  hl_q_assert_no_waiters(f, "crash", 1);
  assert_hl_ok(Q->verbs->release(w), E(w));
  hl_q_assert_no_residue(f, "crash");
  hilock_hold_free(w);
}

void hl_q_damaged_keys_fail_closed(void **state) {
  hl_fixture *f = *state;
  hilock_hold *l = hl_q_make(f->client, "damaged", 5000);
  char queue[192];

  snprintf(queue, sizeof(queue), Q->queue, "damaged");
  hl_redis_ok(f->redis, "SET %s x", queue);
  assert_hl_rc(Q->verbs->acquire(l, 100), HILOCK_EWRONGTYPE, E(l));
  assert_substr(E(l), "WRONGTYPE");
  assert_false(hilock_hold_held(l));
  assert_null(hl_q_holder(f, "damaged"));

  hl_redis_ok(f->redis, "DEL %s", queue);
  hl_redis_ok(f->redis, "SET hilock:{damaged}:fence not-a-number");
  assert_hl_rc(Q->verbs->acquire(l, 100), HILOCK_EWRONGTYPE, E(l));
  assert_substr(E(l), "hilock:{damaged}:fence holds no integer");
  assert_false(hilock_hold_held(l));
  assert_null(hl_q_holder(f, "damaged"));
  /* The failed acquire left the queue too. */
  hl_q_assert_no_residue(f, "damaged");
  hilock_hold_free(l);
}

/* Arguments of this family's own calls (NULL handles and negative waits:
 * test_contract.c; the hold's own arguments: test_hold.c). */
void hl_q_invalid_arguments_are_einval(void **state) {
  hl_fixture *f = *state;
  hilock_hold *l = NULL;
  int64_t n;

  assert_int_equal(Q->new_hold(NULL, "x", 1, 1000, &l), HILOCK_EINVAL);
  assert_int_equal(Q->new_hold(f->client, "x", 1, 1000, NULL), HILOCK_EINVAL);
  hl_assert_bad_names_refused(f->client, Q->new_hold);
  assert_int_equal(Q->new_hold(f->client, "x", 1, 0, &l), HILOCK_EINVAL);
  assert_substr(hilock_client_errmsg(f->client), "ttl");
  assert_null(l);

  assert_int_equal(Q->waiters(NULL, &n), HILOCK_EINVAL);
  assert_int_equal(Q->set_heartbeat(NULL, 1000), HILOCK_EINVAL);
  assert_int_equal(Q->number(NULL), 0);
  assert_int_equal(Q->heartbeat_ms(NULL), 0);

  l = hl_q_make(f->client, "args", 50);
  assert_int_equal(Q->heartbeat_ms(l), 500);
  assert_hl_rc(Q->set_heartbeat(l, 499), HILOCK_EINVAL, E(l));
  assert_substr(E(l), "heartbeat");
  assert_int_equal(Q->waiters(l, NULL), HILOCK_EINVAL);
  assert_int_equal(Q->heartbeat_ms(l), 500);
  assert_hl_ok(Q->set_heartbeat(l, 2500), E(l));
  assert_int_equal(Q->heartbeat_ms(l), 2500);
  assert_int_equal(hl_q_queue_len(f, "args"), 0);
  hilock_hold_free(l);
}
