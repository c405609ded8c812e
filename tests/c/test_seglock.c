/* The segmented lock against a real server: segments granted from a random
 * start, empty segments skipped, stock moving only under the lock, sold
 * out, waking, dead holders, renewal, fork, damaged keys, and forked
 * processes selling stock under a per-segment history check. */
#include "test_util.h"

#include "internal.h"
#include "scripts.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef hl_fixture fixture;

#define SEG_OK(call, s) assert_hl_ok((call), hilock_hold_errmsg(HILOCK_HOLD(s)))
#define SEG_RC(call, rc, s) assert_hl_rc((call), (rc), hilock_hold_errmsg(HILOCK_HOLD(s)))

static int64_t stock_of(hilock_segmented_lock *s, size_t i) {
  int64_t n = -2;
  SEG_OK(hilock_segmented_lock_stock(s, i, &n), s);
  return n;
}

static size_t segments_held(hilock_segmented_lock *s) {
  size_t n = 99;
  SEG_OK(hilock_segmented_lock_segments_held(s, &n), s);
  return n;
}

/* Monotonic seconds, one clock for every process of the machine. */
static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ## Grants ---------------------------------------------------------------- */

static void grants_distinct_segments_then_busy(void **state) {
  fixture *f = *state;
  hilock_segmented_lock *s[5];
  int seen[4] = {0, 0, 0, 0};
  uint64_t last_fence = 0;

  for (int i = 0; i < 5; i++) s[i] = hl_new_seg(f->client, "inv", 4, 10000);
  assert_true(hilock_segmented_lock_segment(s[0]) == HILOCK_SEGMENT_NONE);
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(s[0])), 0);
  for (int i = 0; i < 4; i++) {
    int seg;
    char key[64], *v;
    SEG_OK(hilock_hold_try_acquire(HILOCK_HOLD(s[i])), s[i]);
    seg = hilock_segmented_lock_segment(s[i]);
    assert_in_range(seg, 0, 3);
    assert_int_equal(seen[seg], 0);
    seen[seg] = 1;
    assert_true(hilock_hold_fence(HILOCK_HOLD(s[i])) > last_fence);
    last_fence = hilock_hold_fence(HILOCK_HOLD(s[i]));
    assert_true(hilock_hold_held(HILOCK_HOLD(s[i])));
    /* The segment key holds the owner token with the TTL. */
    snprintf(key, sizeof(key), "hilock:{inv}:seg:%d", seg);
    v = hl_redis_get(f->redis, key, strlen(key));
    assert_non_null(v);
    assert_string_equal(v, hilock_hold_token(HILOCK_HOLD(s[i])));
    free(v);
    assert_i64_between(hl_redis_pttl(f->redis, key, strlen(key)), 9000, 10000);
    assert_i64_between(hilock_hold_validity_ms(HILOCK_HOLD(s[i])), 9000, 10000);
  }
  assert_int_equal(segments_held(s[4]), 4);
  SEG_RC(hilock_hold_try_acquire(HILOCK_HOLD(s[4])), HILOCK_BUSY, s[4]);
  SEG_RC(hilock_hold_acquire(HILOCK_HOLD(s[4]), 0), HILOCK_BUSY, s[4]);
  SEG_RC(hilock_hold_acquire(HILOCK_HOLD(s[4]), 150), HILOCK_BUSY, s[4]);
  assert_false(hilock_hold_held(HILOCK_HOLD(s[4])));
  assert_string_equal(hilock_hold_token(HILOCK_HOLD(s[4])), "");
  /* The fence hash records the latest grant of each segment. */
  assert_int_equal(hl_redis_int(f->redis, "HINCRBY hilock:{inv}:seg:fence n 0"),
                   (long long)last_fence);
  assert_true(last_fence > 1000000000000000ULL); /* from the server's clock */

  {
    int freed = hilock_segmented_lock_segment(s[2]);
    SEG_OK(hilock_hold_release(HILOCK_HOLD(s[2])), s[2]);
    assert_false(hilock_hold_held(HILOCK_HOLD(s[2])));
    assert_int_equal(segments_held(s[4]), 3);
    SEG_OK(hilock_hold_try_acquire(HILOCK_HOLD(s[4])), s[4]);
    assert_int_equal(hilock_segmented_lock_segment(s[4]), freed);
    assert_true(hilock_hold_fence(HILOCK_HOLD(s[4])) > last_fence);
  }
  for (int i = 0; i < 5; i++) {
    if (i != 2) SEG_OK(hilock_hold_release(HILOCK_HOLD(s[i])), s[i]);
    hilock_hold_free(HILOCK_HOLD(s[i]));
  }
  assert_int_equal(hl_redis_int(f->redis, "EXISTS hilock:{inv}:seg:0 "
                                          "hilock:{inv}:seg:1 hilock:{inv}:seg:2 "
                                          "hilock:{inv}:seg:3"),
                   0);
}

static void acquiring_twice_on_one_handle_is_einval(void **state) {
  fixture *f = *state;
  hilock_segmented_lock *s = hl_new_seg(f->client, "twice", 3, 10000);
  SEG_OK(hilock_hold_try_acquire(HILOCK_HOLD(s)), s);
  SEG_RC(hilock_hold_try_acquire(HILOCK_HOLD(s)), HILOCK_EINVAL, s);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(s)), "already holds");
  assert_int_equal(segments_held(s), 1);
  SEG_OK(hilock_hold_release(HILOCK_HOLD(s)), s);
  SEG_RC(hilock_hold_release(HILOCK_HOLD(s)), HILOCK_ENOTOWNED, s);
  hilock_hold_free(HILOCK_HOLD(s));
}

static void random_start_spreads_grants(void **state) {
  fixture *f = *state;
  hilock_segmented_lock *s = hl_new_seg(f->client, "spread", 8, 10000);
  int count[8] = {0};
  /* A fixed start would put all 400 grants on one segment; uniform
   * starts give each about 50. */
  for (int i = 0; i < 400; i++) {
    SEG_OK(hilock_hold_try_acquire(HILOCK_HOLD(s)), s);
    count[hilock_segmented_lock_segment(s)]++;
    SEG_OK(hilock_hold_release(HILOCK_HOLD(s)), s);
  }
  for (int i = 0; i < 8; i++) assert_in_range(count[i], 15, 100);
  hilock_hold_free(HILOCK_HOLD(s));
}

/* The acquire script run by hand (as a resend after a lost reply would run
 * it): {status, segment or pttl, fence}. */
static void run_acquire(fixture *f, const char *token, const char *start,
                        long long out[3]) {
  static const char *const roles[6] = {"seg:stock", "seg:fence", "seg:wake",
                                       "seg:0",     "seg:1",     "seg:2"};
  const char *args[4] = {token, "10000", start, "3"};
  redisReply *r = hl_run_script(f->client, &hilock__script_seglock_acquire,
                                "re", roles, 6, args, 4);
  for (size_t i = 0; i < 3; i++)
    out[i] = i < r->elements ? r->element[i]->integer : -99;
  freeReplyObject(r);
}

static void resent_acquire_finds_its_own_grant(void **state) {
  fixture *f = *state;
  long long first[3], again[3], other[3];
  run_acquire(f, "tokenA", "1", first);
  assert_int_equal(first[0], 1);
  assert_int_equal(first[1], 1); /* the random start, free */
  run_acquire(f, "tokenB", "1", other);
  assert_int_equal(other[0], 1);
  assert_int_equal(other[1], 2); /* the next free one */
  /* The same token again, from another start: the same segment and fence,
   * not a second segment. */
  run_acquire(f, "tokenA", "0", again);
  assert_int_equal(again[0], 1);
  assert_int_equal(again[1], first[1]);
  assert_int_equal(again[2], first[2]);
  assert_int_equal(hl_redis_int(f->redis, "EXISTS hilock:{re}:seg:0"), 0);
}

/* ## Stock ------------------------------------------------------------------ */

static void stock_init_splits_evenly(void **state) {
  fixture *f = *state;
  hilock_segmented_lock *s = hl_new_seg(f->client, "split", 3, 10000);
  hilock_segmented_lock *other = hl_new_seg(f->client, "split", 4, 10000);

  assert_int_equal(stock_of(s, HILOCK_SEGMENT_ALL), -1); /* nothing loaded */
  assert_int_equal(stock_of(s, 1), -1);
  SEG_OK(hilock_segmented_lock_stock_init(s, 10), s);
  assert_int_equal(stock_of(s, 0), 4);
  assert_int_equal(stock_of(s, 1), 3);
  assert_int_equal(stock_of(s, 2), 3);
  assert_int_equal(stock_of(s, HILOCK_SEGMENT_ALL), 10);
  {
    redisReply *r = hl_redis(f->redis, "HGET hilock:{split}:seg:stock segments");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "3");
    freeReplyObject(r);
  }
  /* No expiry: the stock is the data. */
  assert_int_equal(hl_redis_pttl(f->redis, "hilock:{split}:seg:stock", 24), -1);
  SEG_OK(hilock_segmented_lock_stock_set(s, 2, 7), s);
  assert_int_equal(stock_of(s, HILOCK_SEGMENT_ALL), 14);
  /* Re-loading replaces the stock. */
  SEG_OK(hilock_segmented_lock_stock_init(s, 2), s);
  assert_int_equal(stock_of(s, 0), 1);
  assert_int_equal(stock_of(s, 1), 1);
  assert_int_equal(stock_of(s, 2), 0);

  /* Another segment count on the same name is refused. */
  SEG_RC(hilock_hold_try_acquire(HILOCK_HOLD(other)), HILOCK_EINVAL, other);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(other)), "split into 3 segments");
  SEG_RC(hilock_segmented_lock_stock_set(other, 0, 1), HILOCK_EINVAL, other);
  assert_int_equal(segments_held(s), 0);
  hl_holds_free(HILOCK_HOLD(s), HILOCK_HOLD(other));
}

static void empty_segments_are_skipped(void **state) {
  fixture *f = *state;
  hilock_segmented_lock *a = hl_new_seg(f->client, "skip", 4, 10000);
  hilock_segmented_lock *b = hl_new_seg(f->client, "skip", 4, 10000);

  SEG_OK(hilock_segmented_lock_stock_init(a, 0), a);
  SEG_OK(hilock_segmented_lock_stock_set(a, 2, 5), a);
  for (int i = 0; i < 30; i++) {
    SEG_OK(hilock_hold_try_acquire(HILOCK_HOLD(a)), a);
    assert_int_equal(hilock_segmented_lock_segment(a), 2);
    /* The only non-empty segment is held: busy, not sold out, though
     * three segments are free. */
    SEG_RC(hilock_hold_try_acquire(HILOCK_HOLD(b)), HILOCK_BUSY, b);
    SEG_OK(hilock_hold_release(HILOCK_HOLD(a)), a);
  }
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

static void take_moves_stock_only_under_the_lock(void **state) {
  fixture *f = *state;
  hilock_segmented_lock *s = hl_new_seg(f->client, "take", 2, 10000);
  hilock_segmented_lock *t = hl_new_seg(f->client, "take", 2, 10000);
  int64_t taken = -1, left = -1;
  int seg;
  char key[64];

  SEG_OK(hilock_segmented_lock_stock_init(s, 10), s);
  /* Not held: nothing moves. */
  SEG_RC(hilock_segmented_lock_take(s, 1, 0, &taken, &left), HILOCK_ENOTOWNED, s);
  assert_int_equal(stock_of(s, HILOCK_SEGMENT_ALL), 10);

  SEG_OK(hilock_hold_try_acquire(HILOCK_HOLD(s)), s);
  seg = hilock_segmented_lock_segment(s);
  SEG_OK(hilock_segmented_lock_take(s, 2, 0, &taken, &left), s);
  assert_int_equal(taken, 2);
  assert_int_equal(left, 3);
  /* Not enough: all or nothing, unless partial. */
  SEG_OK(hilock_segmented_lock_take(s, 4, 0, &taken, &left), s);
  assert_int_equal(taken, 0);
  assert_int_equal(left, 3);
  SEG_OK(hilock_segmented_lock_take(s, 4, 1, &taken, &left), s);
  assert_int_equal(taken, 3);
  assert_int_equal(left, 0);
  SEG_OK(hilock_segmented_lock_take(s, 1, 1, &taken, &left), s);
  assert_int_equal(taken, 0);
  assert_int_equal(stock_of(s, seg), 0);
  assert_int_equal(stock_of(s, HILOCK_SEGMENT_ALL), 5);
  SEG_RC(hilock_segmented_lock_take(s, 0, 1, NULL, NULL), HILOCK_EINVAL, s);
  SEG_OK(hilock_hold_release(HILOCK_HOLD(s)), s);

  /* The emptied segment is skipped from now on. */
  for (int i = 0; i < 10; i++) {
    SEG_OK(hilock_hold_try_acquire(HILOCK_HOLD(t)), t);
    assert_int_equal(hilock_segmented_lock_segment(t), 1 - seg);
    SEG_OK(hilock_hold_release(HILOCK_HOLD(t)), t);
  }

  /* A holder whose segment was taken behind its back moves nothing and
   * learns it lost the hold. */
  SEG_OK(hilock_hold_try_acquire(HILOCK_HOLD(t)), t);
  snprintf(key, sizeof(key), "hilock:{take}:seg:%d", 1 - seg);
  hl_redis_ok(f->redis, "SET %s intruder", key);
  SEG_RC(hilock_segmented_lock_take(t, 1, 0, &taken, &left), HILOCK_ENOTOWNED, t);
  assert_true(hilock_hold_lost(HILOCK_HOLD(t)));
  assert_int_equal(stock_of(t, HILOCK_SEGMENT_ALL), 5);
  SEG_RC(hilock_hold_release(HILOCK_HOLD(t)), HILOCK_ENOTOWNED, t);

  /* A segment with no stock entry cannot sell. */
  hl_redis_ok(f->redis, "FLUSHALL");
  SEG_OK(hilock_hold_try_acquire(HILOCK_HOLD(t)), t);
  SEG_RC(hilock_segmented_lock_take(t, 1, 0, &taken, &left), HILOCK_EINVAL, t);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(t)), "no stock");
  SEG_OK(hilock_hold_release(HILOCK_HOLD(t)), t);
  hl_holds_free(HILOCK_HOLD(s), HILOCK_HOLD(t));
}

/* ## Sold out ---------------------------------------------------------------- */

static void sold_out_is_reported_not_waited_for(void **state) {
  fixture *f = *state;
  hilock_segmented_lock *s = hl_new_seg(f->client, "gone", 3, 10000);
  int64_t t0;

  SEG_OK(hilock_segmented_lock_stock_init(s, 0), s);
  SEG_RC(hilock_hold_try_acquire(HILOCK_HOLD(s)), HILOCK_SOLDOUT, s);
  t0 = hl_now_ms();
  SEG_RC(hilock_hold_acquire(HILOCK_HOLD(s), HILOCK_WAIT_FOREVER), HILOCK_SOLDOUT, s);
  /* At once, not a wait for ever (room for a loaded machine). */
  assert_true(hl_now_ms() - t0 < 2500);
  assert_false(hilock_hold_held(HILOCK_HOLD(s)));
  assert_int_equal(segments_held(s), 0);
  assert_string_equal(hilock_err_name(HILOCK_SOLDOUT), "SOLDOUT");
  /* Restocking one segment opens it again. */
  SEG_OK(hilock_segmented_lock_stock_set(s, 1, 1), s);
  SEG_OK(hilock_hold_try_acquire(HILOCK_HOLD(s)), s);
  assert_int_equal(hilock_segmented_lock_segment(s), 1);
  SEG_OK(hilock_hold_release(HILOCK_HOLD(s)), s);
  hilock_hold_free(HILOCK_HOLD(s));
}

static void blocked_waiters_all_learn_sold_out(void **state) {
  fixture *f = *state;
  /* A long TTL: without the wake-ups the waiters would sleep 30 s. */
  hilock_segmented_lock *h[2];
  hl_waiter w[3];
  int64_t released;

  for (int i = 0; i < 2; i++) h[i] = hl_new_seg(f->client, "last", 2, 30000);
  SEG_OK(hilock_segmented_lock_stock_init(h[0], 2), h[0]);
  for (int i = 0; i < 2; i++) SEG_OK(hilock_hold_try_acquire(HILOCK_HOLD(h[i])), h[i]);
  for (int i = 0; i < 3; i++)
    hl_waiter_run(&w[i], HILOCK_HOLD(hl_new_seg(f->client, "last", 2, 30000)),
                  &hl_seg_verbs, HILOCK_WAIT_FOREVER, 1);
  assert_true(hl_wait_waiters(f->redis, 3, 5000));
  for (int i = 0; i < 2; i++) {
    int64_t taken = 0;
    SEG_OK(hilock_segmented_lock_take(h[i], 1, 0, &taken, NULL), h[i]);
    assert_int_equal(taken, 1);
  }
  released = hl_now_ms();
  for (int i = 0; i < 2; i++) SEG_OK(hilock_hold_release(HILOCK_HOLD(h[i])), h[i]);
  for (int i = 0; i < 3; i++) {
    hl_waiter_join(&w[i]);
    assert_hl_rc(w[i].rc, HILOCK_SOLDOUT, hilock_hold_errmsg(w[i].lock));
    assert_true(w[i].t_end - released < 3000);
    hilock_hold_free(w[i].lock);
  }
  assert_int_equal(stock_of(h[0], HILOCK_SEGMENT_ALL), 0);
  for (int i = 0; i < 2; i++) hilock_hold_free(HILOCK_HOLD(h[i]));
}

/* ## Waiting ------------------------------------------------------------------ */

static void release_of_any_segment_wakes_a_waiter(void **state) {
  fixture *f = *state;
  hilock_segmented_lock *h[3], *ws;
  hl_waiter w;
  int64_t took;
  long long evalsha_before;

  for (int i = 0; i < 3; i++) h[i] = hl_new_seg(f->client, "wake", 3, 30000);
  for (int i = 0; i < 3; i++) SEG_OK(hilock_hold_try_acquire(HILOCK_HOLD(h[i])), h[i]);
  ws = hl_new_seg(f->client, "wake", 3, 30000);
  hl_waiter_run(&w, HILOCK_HOLD(ws), &hl_seg_verbs, HILOCK_WAIT_FOREVER, 1);
  assert_true(hl_wait_waiters(f->redis, 1, 5000));
  hl_redis_ok(f->redis, "CONFIG RESETSTAT");
  hl_sleep_ms(600);
  /* Asleep on the wake list, not polling. */
  evalsha_before = hl_cmdstat_calls(f->redis, "evalsha");
  assert_true(evalsha_before == 0);
  took = hl_release_and_join(&w, HILOCK_HOLD(h[1]), &hl_seg_verbs);
  SEG_OK(w.rc, ws);
  SEG_OK(w.release_rc, ws);
  /* Woken by the release, not the 30 s TTLs: 3 s leaves room for a loaded
   * machine. */
  assert_true(took < 3000);
  assert_int_equal(hilock_segmented_lock_segment(ws),
                   hilock_segmented_lock_segment(h[1]));
  SEG_OK(hilock_hold_release(HILOCK_HOLD(h[0])), h[0]);
  SEG_OK(hilock_hold_release(HILOCK_HOLD(h[2])), h[2]);
  for (int i = 0; i < 3; i++) hilock_hold_free(HILOCK_HOLD(h[i]));
  hilock_hold_free(HILOCK_HOLD(ws));
}

/* ## Dead holders ------------------------------------------------------------- */

typedef struct child_arg {
  const char *name;
  int k;
  int64_t ttl;
  int fd; /* reports the segment held */
} child_arg;

static int hold_and_hang(hilock_client *c, void *arg) {
  child_arg *a = arg;
  hilock_segmented_lock *s = NULL;
  char seg;
  if (hilock_segmented_lock_new(c, a->name, strlen(a->name), a->k, a->ttl, &s) !=
      HILOCK_OK)
    return 2;
  /* Renewed: only death frees the segment. */
  if (hilock_hold_set_auto_renew(HILOCK_HOLD(s), 1, 0, NULL, NULL) != HILOCK_OK) return 3;
  if (hilock_hold_acquire(HILOCK_HOLD(s), 5000) != HILOCK_OK) return 4;
  seg = (char)hilock_segmented_lock_segment(s);
  if (write(a->fd, &seg, 1) != 1) return 5;
  for (;;) pause();
}

static void killed_holders_segment_frees_within_ttl(void **state) {
  fixture *f = *state;
  hilock_segmented_lock *s = hl_new_seg(f->client, "dead", 1, 10000);
  child_arg a = {"dead", 1, 1000, -1};
  hl_with_client w = {f->server.url, hold_and_hang, &a};
  char seg = -1;
  pid_t pid;
  int64_t killed, waited;

  pid = hl_fork_ready(hl_run_with_client, &w, &a.fd, &seg, 1);
  assert_int_equal(seg, 0);
  /* Renewal keeps it held past its TTL while the holder lives. */
  hl_sleep_ms(1300);
  SEG_RC(hilock_hold_try_acquire(HILOCK_HOLD(s)), HILOCK_BUSY, s);
  kill(pid, SIGKILL);
  killed = hl_now_ms();
  assert_int_equal(hl_wait_child(pid, 5000), 128 + SIGKILL);
  SEG_OK(hilock_hold_acquire(HILOCK_HOLD(s), 5000), s);
  waited = hl_now_ms() - killed;
  /* Freed by its TTL: not before the last renewal lapses, and within one
   * TTL (plus room for a loaded machine). */
  assert_i64_between(waited, 200, 1000 + 700);
  SEG_OK(hilock_hold_release(HILOCK_HOLD(s)), s);
  hilock_hold_free(HILOCK_HOLD(s));
}

/* ## Renewal ------------------------------------------------------------------ */

static void watchdog_keeps_the_segment_past_its_ttl(void **state) {
  fixture *f = *state;
  hilock_segmented_lock *s = hl_new_seg(f->client, "renew", 4, 600);
  hilock_segmented_lock *o = hl_new_seg(f->client, "renew", 4, 600);
  int owned = 0;
  char key[64];

  SEG_OK(hilock_hold_set_auto_renew(HILOCK_HOLD(s), 1, 0, NULL, NULL), s);
  SEG_OK(hilock_segmented_lock_stock_init(s, 0), s);
  SEG_OK(hilock_segmented_lock_stock_set(s, 3, 1), s);
  SEG_OK(hilock_hold_try_acquire(HILOCK_HOLD(s)), s);
  assert_int_equal(hilock_segmented_lock_segment(s), 3);
  /* Two and a half TTLs: long enough that only renewal explains it, and a
   * TTL of 600 ms leaves a loaded machine room between renewals. */
  hl_sleep_ms(1500);
  SEG_OK(hilock_hold_owned(HILOCK_HOLD(s), &owned), s);
  assert_true(owned);
  assert_false(hilock_hold_lost(HILOCK_HOLD(s)));
  SEG_RC(hilock_hold_try_acquire(HILOCK_HOLD(o)), HILOCK_BUSY, o);
  snprintf(key, sizeof(key), "hilock:{renew}:seg:3");
  assert_i64_between(hl_redis_pttl(f->redis, key, strlen(key)), 1, 600);
  SEG_OK(hilock_hold_extend(HILOCK_HOLD(s), 5000, 1), s);
  assert_i64_between(hl_redis_pttl(f->redis, key, strlen(key)), 4000, 5000);
  SEG_OK(hilock_hold_renew(HILOCK_HOLD(s)), s);
  assert_i64_between(hl_redis_pttl(f->redis, key, strlen(key)), 1, 600);
  SEG_OK(hilock_hold_release(HILOCK_HOLD(s)), s);

  /* Without renewal the grant lapses at its TTL and owned() says so. */
  SEG_OK(hilock_hold_set_auto_renew(HILOCK_HOLD(s), 0, 0, NULL, NULL), s);
  SEG_OK(hilock_hold_try_acquire(HILOCK_HOLD(s)), s);
  hl_sleep_ms(900);
  SEG_OK(hilock_hold_owned(HILOCK_HOLD(s), &owned), s);
  assert_false(owned);
  assert_true(hilock_hold_lost(HILOCK_HOLD(s)));
  SEG_OK(hilock_hold_try_acquire(HILOCK_HOLD(o)), o);
  SEG_RC(hilock_hold_release(HILOCK_HOLD(s)), HILOCK_ENOTOWNED, s);
  SEG_OK(hilock_hold_release(HILOCK_HOLD(o)), o);
  hl_holds_free(HILOCK_HOLD(s), HILOCK_HOLD(o));
}

/* ## Fork ------------------------------------------------------------------------ */

static hilock_segmented_lock *fork_seg;

static int child_uses_parents_grant(void *arg) {
  int64_t taken = 0;
  (void)arg;
  if (hilock_segmented_lock_take(fork_seg, 1, 0, &taken, NULL) != HILOCK_EFORKED)
    return 1;
  if (hilock_hold_release(HILOCK_HOLD(fork_seg)) != HILOCK_EFORKED) return 2;
  if (hilock_hold_extend(HILOCK_HOLD(fork_seg), 1000, 1) != HILOCK_EFORKED) return 3;
  if (hilock_hold_held(HILOCK_HOLD(fork_seg))) return 4;
  return 0;
}

static void forked_child_holds_nothing(void **state) {
  fixture *f = *state;
  int owned = 0;
  pid_t pid;
  fork_seg = hl_new_seg(f->client, "fork", 2, 10000);
  SEG_OK(hilock_segmented_lock_stock_init(fork_seg, 4), fork_seg);
  SEG_OK(hilock_hold_try_acquire(HILOCK_HOLD(fork_seg)), fork_seg);
  pid = hl_fork_run(child_uses_parents_grant, NULL);
  assert_true(pid > 0);
  assert_int_equal(hl_wait_child(pid, 5000), 0);
  SEG_OK(hilock_hold_owned(HILOCK_HOLD(fork_seg), &owned), fork_seg);
  assert_true(owned);
  assert_int_equal(stock_of(fork_seg, HILOCK_SEGMENT_ALL), 4);
  SEG_OK(hilock_hold_release(HILOCK_HOLD(fork_seg)), fork_seg);
  hilock_hold_free(HILOCK_HOLD(fork_seg));
  fork_seg = NULL;
}

/* ## Processes selling stock --------------------------------------------------- */

#define SELLERS 8
#define SELL_SEGMENTS 4
#define SELL_STOCK 240

typedef struct seller_arg {
  const hl_server *server;
  int id;
} seller_arg;

/* Sell until sold out; every critical section goes to the list
 * "history" as "segment start end fence taken". */
static int seller(void *arg) {
  seller_arg *a = arg;
  redisContext *r = hl_redis_connect(a->server);
  hilock_client *c = hl_child_client(a->server->url);
  hilock_segmented_lock *s = NULL;
  unsigned seed = (unsigned)getpid();
  if (r == NULL || c == NULL) return 1;
  if (hilock_segmented_lock_new(c, "sale", 4, SELL_SEGMENTS, 10000, &s) != HILOCK_OK)
    return 2;
  for (;;) {
    int64_t want = 1 + rand_r(&seed) % 3, taken = 0, left = 0;
    double t0, t1;
    redisReply *rep;
    int rc = hilock_hold_acquire(HILOCK_HOLD(s), 10000);
    if (rc == HILOCK_SOLDOUT) break;
    if (rc != HILOCK_OK) return 3;
    t0 = mono();
    if (hilock_segmented_lock_take(s, want, 1, &taken, &left) != HILOCK_OK) return 4;
    if (taken < 1 || taken > want || left < 0) return 5;
    hl_sleep_ms(1 + rand_r(&seed) % 2);
    t1 = mono();
    if (hilock_hold_release(HILOCK_HOLD(s)) != HILOCK_OK) return 6;
    rep = redisCommand(r, "RPUSH history %d:%.9f:%.9f:%llu:%lld",
                       hilock_segmented_lock_segment(s), t0, t1,
                       (unsigned long long)hilock_hold_fence(HILOCK_HOLD(s)),
                       (long long)taken);
    if (rep == NULL) return 7;
    freeReplyObject(rep);
  }
  hilock_hold_free(HILOCK_HOLD(s));
  hilock_client_free(c);
  redisFree(r);
  return 0;
}

typedef struct sale {
  int seg;
  double start, end;
  unsigned long long fence;
  long long taken;
} sale;

static int by_segment_then_start(const void *x, const void *y) {
  const sale *a = x, *b = y;
  if (a->seg != b->seg) return a->seg - b->seg;
  return (a->start > b->start) - (a->start < b->start);
}

static void processes_never_share_a_segment_nor_oversell(void **state) {
  fixture *f = *state;
  hilock_segmented_lock *s = hl_new_seg(f->client, "sale", SELL_SEGMENTS, 10000);
  seller_arg args[SELLERS];
  pid_t pids[SELLERS];
  redisReply *r;
  sale *v;
  long long sold = 0;
  int per_seg[SELL_SEGMENTS] = {0};

  SEG_OK(hilock_segmented_lock_stock_init(s, SELL_STOCK), s);
  for (int i = 0; i < SELLERS; i++) {
    args[i].server = &f->server;
    args[i].id = i;
    pids[i] = hl_fork_run(seller, &args[i]);
    assert_true(pids[i] > 0);
  }
  for (int i = 0; i < SELLERS; i++)
    assert_int_equal(hl_wait_child(pids[i], 30000), 0);

  r = hl_redis(f->redis, "LRANGE history 0 -1");
  assert_int_equal(r->type, REDIS_REPLY_ARRAY);
  assert_true(r->elements >= SELL_STOCK / 3);
  v = calloc(r->elements, sizeof(*v));
  assert_non_null(v);
  for (size_t i = 0; i < r->elements; i++) {
    assert_int_equal(sscanf(r->element[i]->str, "%d:%lf:%lf:%llu:%lld",
                            &v[i].seg, &v[i].start, &v[i].end, &v[i].fence,
                            &v[i].taken),
                     5);
    assert_in_range(v[i].seg, 0, SELL_SEGMENTS - 1);
    sold += v[i].taken;
    per_seg[v[i].seg]++;
  }
  /* Never oversold, nothing lost: exactly the stock loaded. */
  assert_int_equal(sold, SELL_STOCK);
  assert_int_equal(stock_of(s, HILOCK_SEGMENT_ALL), 0);
  for (int i = 0; i < SELL_SEGMENTS; i++) {
    assert_true(per_seg[i] > 0);
    assert_int_equal(stock_of(s, i), 0);
  }
  /* Per segment, the critical sections never overlap and the fences
   * increase in grant order. */
  qsort(v, r->elements, sizeof(*v), by_segment_then_start);
  for (size_t i = 1; i < r->elements; i++) {
    if (v[i].seg != v[i - 1].seg) continue;
    if (v[i].start < v[i - 1].end)
      fail_msg("segment %d held twice: [%.6f, %.6f] and [%.6f, %.6f]",
               v[i].seg, v[i - 1].start, v[i - 1].end, v[i].start, v[i].end);
    assert_true(v[i].fence > v[i - 1].fence);
  }
  free(v);
  freeReplyObject(r);
  hilock_hold_free(HILOCK_HOLD(s));
}

/* ## Arguments, names, damaged keys ------------------------------------------- */

static void bad_arguments_are_einval(void **state) {
  fixture *f = *state;
  static const size_t bad_k[] = {0, HILOCK_SEGMENTS_MAX + 1, SIZE_MAX};
  hilock_segmented_lock *s = (hilock_segmented_lock *)f; /* must be reset to NULL */
  int64_t n;
  size_t z;

  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(hilock_segmented_lock_new(f->client, "a", 1, bad_k[i], 1000, &s),
                     HILOCK_EINVAL);
    assert_null(s);
    assert_substr(hilock_client_errmsg(f->client), "segments");
  }
  assert_int_equal(hilock_segmented_lock_new(f->client, "a", 1, 2, 0, &s),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_segmented_lock_new(f->client, "", 0, 2, 1000, &s),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_segmented_lock_new(f->client, "}a", 2, 2, 1000, &s),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_segmented_lock_new(NULL, "a", 1, 2, 1000, &s),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_segmented_lock_new(f->client, "a", 1, 2, 1000, NULL),
                   HILOCK_EINVAL);

  /* NULL handles never crash. */
  assert_int_equal(hilock_segmented_lock_take(NULL, 1, 0, &n, &n), HILOCK_EINVAL);
  assert_int_equal(hilock_segmented_lock_stock_init(NULL, 1), HILOCK_EINVAL);
  assert_int_equal(hilock_segmented_lock_stock_set(NULL, 0, 1), HILOCK_EINVAL);
  assert_int_equal(hilock_segmented_lock_stock(NULL, 0, &n), HILOCK_EINVAL);
  assert_int_equal(hilock_segmented_lock_segments_held(NULL, &z), HILOCK_EINVAL);
  assert_true(hilock_segmented_lock_segment(NULL) == HILOCK_SEGMENT_NONE);
  assert_string_equal(hilock_segmented_lock_key(NULL, 0, NULL), "");
  hilock_hold_free(NULL);

  s = hl_new_seg(f->client, "args", 3, 1000);
  SEG_RC(hilock_segmented_lock_stock_init(s, -1), HILOCK_EINVAL, s);
  SEG_RC(hilock_segmented_lock_stock_init(s, HILOCK_STOCK_MAX + 1), HILOCK_EINVAL, s);
  SEG_RC(hilock_segmented_lock_stock_set(s, 3, 1), HILOCK_EINVAL, s);
  SEG_RC(hilock_segmented_lock_stock_set(s, HILOCK_SEGMENT_ALL, 1), HILOCK_EINVAL, s);
  SEG_RC(hilock_segmented_lock_stock_set(s, 0, -1), HILOCK_EINVAL, s);
  SEG_RC(hilock_segmented_lock_stock(s, 3, &n), HILOCK_EINVAL, s);
  SEG_RC(hilock_segmented_lock_stock(s, -2, &n), HILOCK_EINVAL, s);
  SEG_RC(hilock_segmented_lock_stock(s, 0, NULL), HILOCK_EINVAL, s);
  SEG_RC(hilock_segmented_lock_segments_held(s, NULL), HILOCK_EINVAL, s);
  SEG_RC(hilock_hold_acquire(HILOCK_HOLD(s), -5), HILOCK_EINVAL, s);
  assert_int_equal(hilock_segmented_lock_segments(s), 3);
  assert_int_equal(hilock_hold_ttl_ms(HILOCK_HOLD(s)), 1000);
  hilock_hold_free(HILOCK_HOLD(s));
}

static void keys_follow_the_layout(void **state) {
  fixture *f = *state;
  hilock_segmented_lock *s = hl_new_seg(f->client, "lay{out", 3, 1000);
  size_t len = 0;
  const char *k = hilock_segmented_lock_key(s, 2, &len);
  assert_string_equal(k, "hilock:{lay{out}:seg:2");
  assert_int_equal(len, strlen(k));
  assert_string_equal(hilock_segmented_lock_key(s, HILOCK_SEGMENT_ALL, &len), "hilock:{lay{out}:seg:stock");
  assert_string_equal(hilock_segmented_lock_key(s, 3, &len), "");
  assert_int_equal(len, 0);
  /* One cluster slot for every key of the lock. */
  assert_int_equal(hilock__key_slot("hilock:{lay{out}:seg:0", 22),
                   hilock__key_slot("hilock:{lay{out}:seg:stock", 26));
  assert_int_equal(hilock__key_slot("hilock:{lay{out}:seg:2", 22),
                   hilock__key_slot("hilock:{lay{out}:seg:wake", 25));
  hilock_hold_free(HILOCK_HOLD(s));
}

/* A try on damaged keys fails, and s holds no segment. */
static void try_fails_closed(hilock_segmented_lock *s) {
  assert_true(hilock_hold_try_acquire(HILOCK_HOLD(s)) < 0);
  assert_false(hilock_hold_held(HILOCK_HOLD(s)));
  assert_int_equal(segments_held(s), 0);
}

static void damaged_keys_fail_closed(void **state) {
  fixture *f = *state;
  hilock_segmented_lock *s = hl_new_seg(f->client, "bad", 2, 1000);
  int rc;

  hl_redis_ok(f->redis, "HSET hilock:{bad}:seg:stock segments 2 0 abc 1 xyz");
  try_fails_closed(s);

  hl_redis_ok(f->redis, "DEL hilock:{bad}:seg:stock");
  hl_redis_ok(f->redis, "SET hilock:{bad}:seg:fence 7");
  try_fails_closed(s);

  hl_redis_ok(f->redis, "DEL hilock:{bad}:seg:fence");
  hl_redis_ok(f->redis, "SET hilock:{bad}:seg:stock 1");
  rc = hilock_hold_try_acquire(HILOCK_HOLD(s));
  assert_hl_rc(rc, HILOCK_EWRONGTYPE, hilock_hold_errmsg(HILOCK_HOLD(s)));
  assert_false(hilock_hold_held(HILOCK_HOLD(s)));
  hilock_hold_free(HILOCK_HOLD(s));
}

HL_FIXTURE_MAIN("seglock",
      HL_TEST(grants_distinct_segments_then_busy),
      HL_TEST(acquiring_twice_on_one_handle_is_einval),
      HL_TEST(random_start_spreads_grants),
      HL_TEST(resent_acquire_finds_its_own_grant),
      HL_TEST(stock_init_splits_evenly),
      HL_TEST(empty_segments_are_skipped),
      HL_TEST(take_moves_stock_only_under_the_lock),
      HL_TEST(sold_out_is_reported_not_waited_for),
      HL_TEST(blocked_waiters_all_learn_sold_out),
      HL_TEST(release_of_any_segment_wakes_a_waiter),
      HL_TEST(killed_holders_segment_frees_within_ttl),
      HL_TEST(watchdog_keeps_the_segment_past_its_ttl),
      HL_TEST(forked_child_holds_nothing),
      HL_TEST(processes_never_share_a_segment_nor_oversell),
      HL_TEST(bad_arguments_are_einval),
      HL_TEST(keys_follow_the_layout),
      HL_TEST(damaged_keys_fail_closed))
