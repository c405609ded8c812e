/* The countdown latch on the C API (hilock/latch.h): counting down and
 * waiting, registered parties (their count down, their lease kept by the
 * renewal thread, a lapsed one breaking the latch, abort), delete, and the
 * arguments refused. Processes killed and stopped are in
 * tests/python/test_latch.py. */
#include "test_util.h"

#include <pthread.h>
#include <stdlib.h>

typedef hl_fixture fixture;

#define LKEY(n) "hilock:{" n "}:latch"
#define PKEY(n) "hilock:{" n "}:latch:parties"

static int64_t count_of(hilock_latch *l) {
  int64_t n = -1;
  assert_hl_ok(hilock_latch_count(l, &n), hilock_hold_errmsg(HILOCK_HOLD(l)));
  return n;
}

/* hilock_latch_wait on the hold, for a waiter thread (hl_waiter). */
static int latch_wait(hilock_hold *h, int64_t wait_ms) {
  return hilock_latch_wait((hilock_latch *)h, wait_ms);
}

/* A waiter on a new latch handle on name, for wait_ms (not started). */
static hl_waiter waiter(fixture *f, const char *name, int64_t count,
                        int64_t ttl_ms, int64_t wait_ms) {
  hl_waiter w = {0};
  w.lock = HILOCK_HOLD(hl_new_latch(f->client, name, count, ttl_ms));
  w.acquire = latch_wait;
  w.wait_ms = wait_ms;
  return w;
}

/* Start w's thread, and return once it listens on the latch's channel
 * (key). */
static void start_waiting(fixture *f, hl_waiter *w, const char *key) {
  hl_waiter_start(w);
  assert_true(hl_wait_subscribed(f->redis, key, 1, 10000));
}

static void count_down_and_wait(void **state) {
  fixture *f = *state;
  hilock_latch *a = hl_new_latch(f->client, "c", 3, 5000);
  hilock_latch *b = hl_new_latch(f->client, "c", 7, 5000);
  hl_waiter w = waiter(f, "c", 3, 5000, HILOCK_WAIT_FOREVER);

  assert_int_equal(count_of(a), 3);
  /* The first call made it: another handle's count changes nothing. */
  assert_int_equal(count_of(b), 3);
  assert_int_equal(hilock_latch_wait(a, 0), HILOCK_BUSY);
  assert_int_equal(hilock_latch_wait(a, 50), HILOCK_BUSY);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(a)), "the count is still 3");
  start_waiting(f, &w, LKEY("c"));
  assert_hl_ok(hilock_latch_count_down(a), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_latch_count_down(b), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_int_equal(count_of(a), 1);
  assert_int_equal(w.rc, -100); /* still waiting */
  assert_hl_ok(hilock_latch_count_down(a), hilock_hold_errmsg(HILOCK_HOLD(a)));
  hl_waiter_join(&w);
  assert_hl_ok(w.rc, hilock_hold_errmsg(w.lock));
  assert_int_equal(count_of(a), 0);
  /* Never below 0; the latch stays open, with no TTL. */
  assert_hl_ok(hilock_latch_count_down(a), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(count_of(b), 0);
  assert_hl_ok(hilock_latch_wait(b, 0), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_int_equal(hl_redis_pttl(f->redis, LKEY("c"), strlen(LKEY("c"))), -1);
  /* Deleted: the next call makes it afresh with its handle's count. */
  assert_hl_ok(hilock_latch_delete(a), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_false(hl_redis_exists(f->redis, LKEY("c"), strlen(LKEY("c"))));
  assert_int_equal(count_of(b), 7);
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b), w.lock);
}

static void a_party_counts_down_once(void **state) {
  fixture *f = *state;
  hilock_latch *p = hl_new_latch(f->client, "p", 2, 5000);
  hilock_latch *q = hl_new_latch(f->client, "p", 2, 5000);
  hilock_latch *r = hl_new_latch(f->client, "p", 2, 5000);
  int owned = 0;

  assert_hl_ok(hilock_latch_join(p), hilock_hold_errmsg(HILOCK_HOLD(p)));
  assert_int_equal(hilock_latch_join(p), HILOCK_EINVAL); /* a party already */
  assert_int_equal(hl_redis_int(f->redis, "ZCARD %s", PKEY("p")), 1);
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(p), &owned),
               hilock_hold_errmsg(HILOCK_HOLD(p)));
  assert_int_equal(owned, 1);
  /* The renewal pushes the lease as a lock's TTL. */
  assert_hl_ok(hilock_hold_renew(HILOCK_HOLD(p)), hilock_hold_errmsg(HILOCK_HOLD(p)));
  assert_int_equal(count_of(r), 2);
  /* Its count down takes one and ends its lease in the same step. */
  assert_hl_ok(hilock_latch_count_down(p), hilock_hold_errmsg(HILOCK_HOLD(p)));
  assert_int_equal(hl_redis_int(f->redis, "ZCARD %s", PKEY("p")), 0);
  assert_false(hilock_hold_lost(HILOCK_HOLD(p)));
  assert_int_equal(count_of(r), 1);
  /* A party counts once. */
  assert_int_equal(hilock_latch_count_down(p), HILOCK_ENOTOWNED);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(p)), "counted down already");
  assert_int_equal(hilock_hold_release(HILOCK_HOLD(p)), HILOCK_ENOTOWNED);
  assert_int_equal(count_of(r), 1);
  /* The hold's verbs: joining is its acquire, a count down its release. */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(q)), hilock_hold_errmsg(HILOCK_HOLD(q)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(q)), hilock_hold_errmsg(HILOCK_HOLD(q)));
  assert_int_equal(count_of(r), 0);
  assert_hl_ok(hilock_latch_wait(r, 0), hilock_hold_errmsg(HILOCK_HOLD(r)));
  /* Nothing left to join. */
  assert_int_equal(hilock_latch_join(r), HILOCK_EINVAL);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(r)), "count is 0 already");
  assert_int_equal(hl_redis_int(f->redis, "ZCARD %s", PKEY("p")), 0);
  hl_holds_free(HILOCK_HOLD(p), HILOCK_HOLD(q), HILOCK_HOLD(r));
}

static void a_lapsed_party_breaks_the_latch(void **state) {
  fixture *f = *state;
  hilock_latch *p = hl_new_latch(f->client, "b", 2, 300);
  hilock_latch *a = hl_new_latch(f->client, "b", 2, 300);
  /* 20 s: far beyond the 300 ms lease (a loaded machine), short of the
   * test's timeout, so a latch that never breaks fails here. */
  hl_waiter w = waiter(f, "b", 2, 300, 20000);
  int64_t n = -1;

  /* No renewal (the default on the C API): the party's lease ends 300 ms
   * after it joins, as a dead party's would. */
  assert_hl_ok(hilock_latch_join(p), hilock_hold_errmsg(HILOCK_HOLD(p)));
  start_waiting(f, &w, LKEY("b"));
  /* Nothing counts down or publishes: the waiter wakes at the lease's end
   * by itself and finds the latch broken. */
  hl_waiter_join(&w);
  assert_int_equal(w.rc, HILOCK_EBROKEN);
  assert_substr(hilock_hold_errmsg(w.lock), "lease ended");
  assert_int_equal(hilock_latch_count_down(a), HILOCK_EBROKEN);
  assert_int_equal(hilock_latch_count_down(p), HILOCK_EBROKEN);
  assert_int_equal(hilock_latch_join(a), HILOCK_EBROKEN);
  assert_int_equal(hilock_latch_wait(a, 0), HILOCK_EBROKEN);
  assert_int_equal(hilock_latch_count(a, &n), HILOCK_EBROKEN);
  assert_int_equal(n, 2);
  /* Deleted: the name starts afresh. */
  assert_hl_ok(hilock_latch_delete(a), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(count_of(a), 2);
  hl_holds_free(HILOCK_HOLD(p), HILOCK_HOLD(a), w.lock);
}

static void a_waiter_learns_of_a_party_that_joins_later(void **state) {
  fixture *f = *state;
  hilock_latch *p = hl_new_latch(f->client, "j", 1, 300);
  /* 20 s: far beyond the 300 ms lease, short of the test's timeout. */
  hl_waiter w = waiter(f, "j", 1, 300, 20000);

  /* The waiter looks first (no party yet) and sleeps; the party joins
   * after it and lapses unrenewed: the join's message makes the waiter
   * look again and learn the lease's end. */
  start_waiting(f, &w, LKEY("j"));
  assert_hl_ok(hilock_latch_join(p), hilock_hold_errmsg(HILOCK_HOLD(p)));
  hl_waiter_join(&w);
  assert_int_equal(w.rc, HILOCK_EBROKEN);
  /* Generous (a loaded machine): about 300 ms; a waiter that never heard
   * of the party would only find it at the end of its 20 s wait. */
  assert_true(w.t_end - w.t_start < 10000);
  hl_holds_free(HILOCK_HOLD(p), w.lock);
}

static void renewal_keeps_a_party(void **state) {
  fixture *f = *state;
  hilock_latch *p = hl_new_latch(f->client, "k", 1, 200);
  hilock_latch *a = hl_new_latch(f->client, "k", 1, 200);
  /* The renewal thread keeps the 200 ms lease for 5 TTLs: not broken. */
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(p), 1, 0, NULL, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(p)));
  assert_hl_ok(hilock_latch_join(p), hilock_hold_errmsg(HILOCK_HOLD(p)));
  assert_int_equal(hilock_latch_wait(a, 1000), HILOCK_BUSY);
  assert_int_equal(count_of(a), 1);
  assert_hl_ok(hilock_latch_count_down(p), hilock_hold_errmsg(HILOCK_HOLD(p)));
  assert_hl_ok(hilock_latch_wait(a, 0), hilock_hold_errmsg(HILOCK_HOLD(a)));
  hl_holds_free(HILOCK_HOLD(p), HILOCK_HOLD(a));
}

static void abort_breaks_it_at_once(void **state) {
  fixture *f = *state;
  hilock_latch *p = hl_new_latch(f->client, "a", 1, 60000);
  hilock_latch *z = hl_new_latch(f->client, "z", 1, 60000);
  hl_waiter w = waiter(f, "a", 1, 60000, HILOCK_WAIT_FOREVER);

  assert_hl_ok(hilock_latch_join(p), hilock_hold_errmsg(HILOCK_HOLD(p)));
  start_waiting(f, &w, LKEY("a"));
  assert_hl_ok(hilock_latch_abort(p), hilock_hold_errmsg(HILOCK_HOLD(p)));
  hl_waiter_join(&w);
  assert_int_equal(w.rc, HILOCK_EBROKEN);
  assert_substr(hilock_hold_errmsg(w.lock), "gave up");
  assert_int_equal(hl_redis_int(f->redis, "ZCARD %s", PKEY("a")), 0);
  /* A latch at 0 is done: an abort leaves it so. */
  assert_hl_ok(hilock_latch_count_down(z), hilock_hold_errmsg(HILOCK_HOLD(z)));
  assert_hl_ok(hilock_latch_abort(z), hilock_hold_errmsg(HILOCK_HOLD(z)));
  assert_hl_ok(hilock_latch_wait(z, 0), hilock_hold_errmsg(HILOCK_HOLD(z)));
  hl_holds_free(HILOCK_HOLD(p), HILOCK_HOLD(z), w.lock);
}

static void a_timed_out_wait_is_busy(void **state) {
  fixture *f = *state;
  hilock_latch *l = hl_new_latch(f->client, "t", 1, 5000);
  hl_waiter w = waiter(f, "t", 1, 5000, INT64_MAX);
  /* The look after the wait's end is not cut short by it (it was, now and
   * then: "no reply in time" instead of HILOCK_BUSY). */
  for (int i = 0; i < 100; i++)
    assert_hl_rc(hilock_latch_wait(l, 5 + i % 7), HILOCK_BUSY,
                 hilock_hold_errmsg(HILOCK_HOLD(l)));
  /* The longest wait is no wait at all (it overflowed the deadline). */
  start_waiting(f, &w, LKEY("t"));
  assert_hl_ok(hilock_latch_count_down(l), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hl_waiter_join(&w);
  assert_hl_ok(w.rc, hilock_hold_errmsg(w.lock));
  hl_holds_free(HILOCK_HOLD(l), w.lock);
}

static void bad_arguments_are_refused(void **state) {
  fixture *f = *state;
  hilock_latch *l;
  int64_t n = 7;
  hl_assert_counted_args_refused(f->client, hl_latch_new_hold,
                                 HILOCK_LATCH_COUNT_MAX, "count must be");
  assert_int_equal(hilock_latch_count_down(NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_latch_wait(NULL, 0), HILOCK_EINVAL);
  assert_int_equal(hilock_latch_count(NULL, &n), HILOCK_EINVAL);
  assert_int_equal(n, 0);
  assert_int_equal(hilock_latch_abort(NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_latch_delete(NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_latch_join(NULL), HILOCK_EINVAL);
  hilock_hold_free(NULL);
  l = hl_new_latch(f->client, "n", HILOCK_LATCH_COUNT_MAX, 1000);
  assert_int_equal(hilock_latch_count(l, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_latch_wait(l, -5), HILOCK_EINVAL);
  assert_int_equal(count_of(l), HILOCK_LATCH_COUNT_MAX);
  assert_int_equal(hilock_hold_extend(HILOCK_HOLD(l), 100, 0),
                   HILOCK_ENOTSUP);
  hilock_hold_free(HILOCK_HOLD(l));
  /* Keys of another type. */
  hl_redis_ok(f->redis, "SET %s x", LKEY("w"));
  l = hl_new_latch(f->client, "w", 1, 1000);
  assert_int_equal(hilock_latch_wait(l, 0), HILOCK_EWRONGTYPE);
  assert_int_equal(hilock_latch_count_down(l), HILOCK_EWRONGTYPE);
  assert_int_equal(hilock_latch_join(l), HILOCK_EWRONGTYPE);
  hl_redis_ok(f->redis, "DEL %s", LKEY("w"));
  hl_redis_ok(f->redis, "HSET %s count many", LKEY("w"));
  assert_int_equal(hilock_latch_wait(l, 0), HILOCK_EWRONGTYPE);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(l)), "holds no count");
  hl_redis_ok(f->redis, "DEL %s", LKEY("w"));
  hl_redis_ok(f->redis, "SET %s x", PKEY("w"));
  assert_int_equal(hilock_latch_count(l, &n), HILOCK_EWRONGTYPE);
  hilock_hold_free(HILOCK_HOLD(l));
}

HL_FIXTURE_MAIN("latch",
      HL_TEST(count_down_and_wait),
      HL_TEST(a_party_counts_down_once),
      HL_TEST(a_lapsed_party_breaks_the_latch),
      HL_TEST(a_waiter_learns_of_a_party_that_joins_later),
      HL_TEST(renewal_keeps_a_party),
      HL_TEST(abort_breaks_it_at_once),
      HL_TEST(a_timed_out_wait_is_busy),
      HL_TEST(bad_arguments_are_refused))
