/* Lock delay on the C API (hilock_hold_set_lock_delay,
 * hilock_hold_set_lock_delay): the marker's lifetime through grant,
 * renewal, extension and release, a lapsed grant's delay, the inspect
 * fields, and the arguments refused. The timing against killed holder
 * processes is in tests/python/test_lock_delay.py. */
#include "test_util.h"

#include <stdlib.h>

typedef hl_fixture fixture;

#define DKEY(n) "hilock:{" n "}:delay"
#define LKEY(n) "hilock:{" n "}:lock"

static long long pttl(fixture *f, const char *key) {
  return hl_redis_pttl(f->redis, key, strlen(key));
}

static int exists(fixture *f, const char *key) {
  return hl_redis_exists(f->redis, key, strlen(key));
}

/* Wait until the lapsing grant's key is gone from the server. */
static void wait_gone(fixture *f, const char *key) {
  while (exists(f, key)) hl_sleep_ms(5);
}

/* Inspect of a name whose grant lapsed under a delay of delay_ms, checked
 * to be not held, with the delay shown and part of it left. */
static hilock_lock_info lapsed_info(fixture *f, const char *name,
                                    int64_t delay_ms) {
  hilock_lock_info info;
  assert_hl_ok(hilock_client_inspect(f->client, name, strlen(name), &info),
               hilock_client_errmsg(f->client));
  assert_int_equal(info.held, 0);
  assert_int_equal(info.delay_ms, delay_ms);
  assert_true(info.delay_left_ms > 0 && info.delay_left_ms <= delay_ms + 20);
  return info;
}

static void marker_follows_grant_renewal_extension_and_release(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "d", 2000);
  assert_int_equal(hilock_hold_lock_delay_ms(HILOCK_HOLD(l)), 0);
  assert_hl_ok(hilock_hold_set_lock_delay(HILOCK_HOLD(l), 10000), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_int_equal(hilock_hold_lock_delay_ms(HILOCK_HOLD(l)), 10000);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_true(pttl(f, DKEY("d")) > 11000 && pttl(f, DKEY("d")) <= 12000);
  /* Set while held: refused, the delay stays. */
  assert_int_equal(hilock_hold_set_lock_delay(HILOCK_HOLD(l), 0), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_lock_delay_ms(HILOCK_HOLD(l)), 10000);
  assert_hl_ok(hilock_hold_extend(HILOCK_HOLD(l), 30000, 1), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_true(pttl(f, DKEY("d")) > 39000); /* 30 s + the delay */
  assert_hl_ok(hilock_hold_renew(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_true(pttl(f, DKEY("d")) > 11000 && pttl(f, DKEY("d")) <= 12000);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_false(exists(f, DKEY("d")));
  hilock_hold_free(HILOCK_HOLD(l));
}

static void lapsed_grant_keeps_the_name_for_the_delay(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "d", 20);
  hilock_lock *next = hl_new_lock(f->client, "d", 5000);
  assert_hl_ok(hilock_hold_set_lock_delay(HILOCK_HOLD(l), 20000), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_set_lock_delay(HILOCK_HOLD(next), 20000), hilock_hold_errmsg(HILOCK_HOLD(next)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  wait_gone(f, LKEY("d"));
  assert_int_equal(hilock_hold_try_acquire(HILOCK_HOLD(next)), HILOCK_BUSY);
  assert_int_equal(lapsed_info(f, "d", 20000).type, HILOCK_TYPE_LOCK);
  /* A handle without a delay of its own waits the delay out too: the name
   * is granted to no one. */
  hilock_lock *plain = hl_new_lock(f->client, "d", 5000);
  assert_int_equal(hilock_hold_try_acquire(HILOCK_HOLD(plain)), HILOCK_BUSY);
  /* The handle's force release ends the delay, for every handle. */
  assert_hl_ok(hilock_lock_force_release(next, NULL), hilock_hold_errmsg(HILOCK_HOLD(next)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(plain)), hilock_hold_errmsg(HILOCK_HOLD(plain)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(plain)), hilock_hold_errmsg(HILOCK_HOLD(plain)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(next)), hilock_hold_errmsg(HILOCK_HOLD(next)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(next)), hilock_hold_errmsg(HILOCK_HOLD(next)));
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_hold_free(HILOCK_HOLD(next));
  hilock_hold_free(HILOCK_HOLD(plain));
}

static void no_delay_writes_no_marker_and_inspect_shows_none(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "d", 5000);
  hilock_lock_info info;
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_renew(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_false(exists(f, DKEY("d")));
  assert_hl_ok(hilock_client_inspect(f->client, "d", 1, &info),
               hilock_client_errmsg(f->client));
  assert_int_equal(info.delay_ms, 0);
  assert_int_equal(info.delay_left_ms, -2);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
}

static void bad_delays_are_einval(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "d", 5000);
  hilock_lock *s = hl_new_simple(f->client, "s");
  const char *names[2] = {"{m}a", "{m}b"};
  hilock_multi_lock *m = hl_new_multi(f->client, names, 2, 5000);
  assert_int_equal(hilock_hold_set_lock_delay(NULL, 1), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_set_lock_delay(HILOCK_HOLD(l), -1), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_set_lock_delay(HILOCK_HOLD(l), HILOCK_TTL_MAX_MS + 1), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_set_lock_delay(HILOCK_HOLD(s), 1000), HILOCK_EINVAL);
  assert_hl_ok(hilock_hold_set_lock_delay(HILOCK_HOLD(s), 0), hilock_hold_errmsg(HILOCK_HOLD(s)));
  assert_int_equal(hilock_hold_set_lock_delay(NULL, 1), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_set_lock_delay(HILOCK_HOLD(m), -1), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_lock_delay_ms(NULL), 0);
  assert_int_equal(hilock_hold_lock_delay_ms(NULL), 0);
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_hold_free(HILOCK_HOLD(s));
  hilock_hold_free(HILOCK_HOLD(m));
}

static void multi_key_markers_follow_grant_extension_and_release(void **state) {
  fixture *f = *state;
  const char *names[2] = {"{m}a", "{m}b"};
  hilock_multi_lock *m = hl_new_multi(f->client, names, 2, 2000);
  hilock_lock *l = hl_new_lock(f->client, "{m}b", 5000);
  assert_hl_ok(hilock_hold_set_lock_delay(HILOCK_HOLD(m), 10000), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_hl_ok(hilock_hold_set_lock_delay(HILOCK_HOLD(l), 10000), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_true(pttl(f, DKEY("{m}a")) > 11000 && pttl(f, DKEY("{m}b")) > 11000);
  assert_hl_ok(hilock_hold_extend(HILOCK_HOLD(m), 30000, 1), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_true(pttl(f, DKEY("{m}a")) > 39000 && pttl(f, DKEY("{m}b")) > 39000);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_false(exists(f, DKEY("{m}a")));
  assert_false(exists(f, DKEY("{m}b")));
  /* Released: the lock of either name is granted at once. */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(m));
  hilock_hold_free(HILOCK_HOLD(l));
}

/* ## Reentrant lock and read-write lock (the write side) ----------------- */

#define RKEY(n) "hilock:{" n "}:rlock"
#define WKEY(n) "hilock:{" n "}:rw:writer"
#define RDKEY(n) "hilock:{" n "}:rw:readers"

static int set_delay(void *handle, int64_t ms) {
  return hilock_hold_set_lock_delay((hilock_hold *)handle, ms);
}

/* A grant of TTL 1 s and delay 10 s, made at t0 and renewed by the renewal
 * thread (every 1/3 s), held past its first TTL: its key is there and the
 * marker, pushed along, has more than the delay left (less if not). */
static void assert_marker_pushed(fixture *f, int64_t t0, const char *key,
                                 const char *dkey) {
  while (hl_now_ms() < t0 + 1500) hl_sleep_ms(20);
  assert_true(exists(f, key));
  assert_true(pttl(f, dkey) > 10000);
}

static void rlock_marker_follows_first_entry_renewal_and_final_release(
    void **state) {
  fixture *f = *state;
  hilock_rlock *rl = hl_new_rlock(f->client, "r", 1000);
  hilock_client *c2 = hl_client(f->server.url, NULL);
  hilock_rlock *other = hl_new_rlock(c2, "r", 5000);
  int64_t t0;
  assert_int_equal(hilock_hold_lock_delay_ms(HILOCK_HOLD(rl)), 0);
  assert_hl_ok(set_delay(rl, 10000), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_int_equal(hilock_hold_lock_delay_ms(HILOCK_HOLD(rl)), 10000);
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(rl), 1, 0, NULL, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  t0 = hl_now_ms();
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_true(pttl(f, DKEY("r")) > 10000 && pttl(f, DKEY("r")) <= 11000);
  /* Set while held: refused, the delay stays. */
  assert_int_equal(set_delay(rl, 0), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_lock_delay_ms(HILOCK_HOLD(rl)), 10000);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_marker_pushed(f, t0, RKEY("r"), DKEY("r"));
  /* One release of two: still held, the marker stays. */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_true(pttl(f, DKEY("r")) > 10000);
  assert_int_equal(hilock_hold_try_acquire(HILOCK_HOLD(other)), HILOCK_BUSY);
  /* The final release frees the name at once. */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_false(exists(f, DKEY("r")));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(other)), hilock_hold_errmsg(HILOCK_HOLD(other)));
  assert_false(exists(f, DKEY("r")));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(other)), hilock_hold_errmsg(HILOCK_HOLD(other)));
  hilock_hold_free(HILOCK_HOLD(rl));
  hilock_hold_free(HILOCK_HOLD(other));
  hilock_client_free(c2);
}

static void rlock_lapsed_grant_keeps_the_name_for_the_delay(void **state) {
  fixture *f = *state;
  hilock_rlock *rl = hl_new_rlock(f->client, "r", 20);
  hilock_client *c2 = hl_client(f->server.url, NULL);
  hilock_rlock *plain = hl_new_rlock(c2, "r", 5000);
  hilock_rlock *redisson = NULL;
  assert_hl_ok(set_delay(rl, 20000), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  wait_gone(f, RKEY("r"));
  /* Another owner without a delay of its own: refused. */
  assert_int_equal(hilock_hold_try_acquire(HILOCK_HOLD(plain)), HILOCK_BUSY);
  (void)lapsed_info(f, "r", 20000);
  /* An operator's forced release ends the delay. */
  assert_hl_ok(hilock_client_force_release(f->client, "r", 1, NULL),
               hilock_client_errmsg(f->client));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(plain)), hilock_hold_errmsg(HILOCK_HOLD(plain)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(plain)), hilock_hold_errmsg(HILOCK_HOLD(plain)));
  /* A Redisson-compatible lock has none. */
  assert_hl_ok(hilock_rlock_new_redisson(f->client, "r", 1, 5000, &redisson),
               hilock_client_errmsg(f->client));
  assert_int_equal(set_delay(redisson, 1000), HILOCK_ENOTSUP);
  assert_int_equal(set_delay(rl, -1), HILOCK_EINVAL);
  hilock_hold_free(HILOCK_HOLD(redisson));
  hilock_hold_free(HILOCK_HOLD(rl));
  hilock_hold_free(HILOCK_HOLD(plain));
  hilock_client_free(c2);
}

static void rwlock_write_marker_follows_grant_renewal_and_release(
    void **state) {
  fixture *f = *state;
  hilock_rwlock *rw = hl_new_rwlock(f->client, "w", 1000);
  hilock_client *c2 = hl_client(f->server.url, NULL);
  hilock_rwlock *other = hl_new_rwlock(c2, "w", 5000);
  int64_t t0;
  assert_hl_ok(set_delay(rw, 10000), hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_int_equal(hilock_hold_lock_delay_ms(HILOCK_HOLD(rw)), 10000);
  /* A read hold takes no delay: no marker. */
  assert_hl_ok(hilock_rwlock_read_try_acquire(rw), hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_false(exists(f, DKEY("w")));
  assert_hl_ok(hilock_rwlock_read_release(rw), hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(rw), 1, 0, NULL, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(rw)));
  t0 = hl_now_ms();
  assert_hl_ok(hilock_rwlock_write_try_acquire(rw), hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_true(pttl(f, DKEY("w")) > 10000 && pttl(f, DKEY("w")) <= 11000);
  assert_int_equal(set_delay(rw, 0), HILOCK_EINVAL);
  assert_hl_ok(hilock_rwlock_write_try_acquire(rw), hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_marker_pushed(f, t0, WKEY("w"), DKEY("w"));
  assert_hl_ok(hilock_rwlock_write_release(rw), hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_true(pttl(f, DKEY("w")) > 10000);
  assert_hl_ok(hilock_rwlock_write_release(rw), hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_false(exists(f, DKEY("w")));
  /* Released: the next writer and reader are granted at once. */
  assert_hl_ok(hilock_rwlock_write_try_acquire(other), hilock_hold_errmsg(HILOCK_HOLD(other)));
  assert_hl_ok(hilock_rwlock_write_release(other), hilock_hold_errmsg(HILOCK_HOLD(other)));
  assert_hl_ok(hilock_rwlock_read_try_acquire(other), hilock_hold_errmsg(HILOCK_HOLD(other)));
  assert_hl_ok(hilock_rwlock_read_release(other), hilock_hold_errmsg(HILOCK_HOLD(other)));
  hilock_hold_free(HILOCK_HOLD(rw));
  hilock_hold_free(HILOCK_HOLD(other));
  hilock_client_free(c2);
}

static void rwlock_lapsed_write_keeps_writers_and_readers_out(void **state) {
  fixture *f = *state;
  hilock_rwlock *rw = hl_new_rwlock(f->client, "w", 20);
  hilock_client *c2 = hl_client(f->server.url, NULL);
  hilock_rwlock *plain = hl_new_rwlock(c2, "w", 5000);
  assert_hl_ok(set_delay(rw, 20000), hilock_hold_errmsg(HILOCK_HOLD(rw)));
  /* A lapsed read grant leaves no marker. */
  assert_hl_ok(hilock_rwlock_read_try_acquire(rw), hilock_hold_errmsg(HILOCK_HOLD(rw)));
  wait_gone(f, RDKEY("w"));
  assert_false(exists(f, DKEY("w")));
  assert_hl_ok(hilock_rwlock_write_try_acquire(plain), hilock_hold_errmsg(HILOCK_HOLD(plain)));
  assert_hl_ok(hilock_rwlock_write_release(plain), hilock_hold_errmsg(HILOCK_HOLD(plain)));
  /* A lapsed write grant: neither a writer nor a reader without a delay
   * of its own is granted. */
  assert_hl_ok(hilock_rwlock_write_try_acquire(rw), hilock_hold_errmsg(HILOCK_HOLD(rw)));
  wait_gone(f, WKEY("w"));
  assert_int_equal(hilock_rwlock_write_try_acquire(plain), HILOCK_BUSY);
  assert_int_equal(hilock_rwlock_read_try_acquire(plain), HILOCK_BUSY);
  assert_true(pttl(f, DKEY("w")) > 0);
  assert_hl_ok(hilock_client_force_release(f->client, "w", 1, NULL),
               hilock_client_errmsg(f->client));
  assert_hl_ok(hilock_rwlock_read_try_acquire(plain), hilock_hold_errmsg(HILOCK_HOLD(plain)));
  assert_hl_ok(hilock_rwlock_read_release(plain), hilock_hold_errmsg(HILOCK_HOLD(plain)));
  hilock_hold_free(HILOCK_HOLD(rw));
  hilock_hold_free(HILOCK_HOLD(plain));
  hilock_client_free(c2);
}

/* ## Sequential lock --------------------------------------------------- */

#define SEQ_HOLDER "hilock:{q}:seq:holder"

static void sequential_marker_follows_grant_renewal_extension_and_release(
    void **state) {
  fixture *f = *state;
  hilock_sequential_lock *sl = hl_new_seq(f->client, "q", 2000);
  hilock_sequential_lock *next = hl_new_seq(f->client, "q", 5000);
  hilock_hold *h = HILOCK_HOLD(sl);
  assert_int_equal(hilock_hold_lock_delay_ms(h), 0);
  assert_hl_ok(hilock_hold_set_lock_delay(h, 10000), hilock_hold_errmsg(h));
  assert_int_equal(hilock_hold_lock_delay_ms(h), 10000);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(sl)), hilock_hold_errmsg(h));
  assert_true(pttl(f, DKEY("q")) > 11000 && pttl(f, DKEY("q")) <= 12000);
  /* Set while held: refused, the delay stays. */
  assert_int_equal(hilock_hold_set_lock_delay(h, 0), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_lock_delay_ms(h), 10000);
  assert_hl_ok(hilock_hold_extend(HILOCK_HOLD(sl), 30000, 1), hilock_hold_errmsg(h));
  assert_true(pttl(f, DKEY("q")) > 39000); /* 30 s + the delay */
  assert_hl_ok(hilock_hold_renew(HILOCK_HOLD(sl)), hilock_hold_errmsg(h));
  assert_true(pttl(f, DKEY("q")) > 11000 && pttl(f, DKEY("q")) <= 12000);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(sl)), hilock_hold_errmsg(h));
  assert_false(exists(f, DKEY("q")));
  /* Released: granted at once, to a handle without a delay. */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(next)),
               hilock_hold_errmsg(HILOCK_HOLD(next)));
  assert_false(exists(f, DKEY("q")));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(next)),
               hilock_hold_errmsg(HILOCK_HOLD(next)));
  hilock_hold_free(h);
  hilock_hold_free(HILOCK_HOLD(next));
}

static void sequential_watchdog_pushes_the_marker(void **state) {
  fixture *f = *state;
  hilock_sequential_lock *sl = hl_new_seq(f->client, "q", 1500);
  hilock_hold *h = HILOCK_HOLD(sl);
  int owned = 0;
  assert_hl_ok(hilock_hold_set_lock_delay(h, 10000), hilock_hold_errmsg(h));
  assert_hl_ok(hilock_hold_set_auto_renew(h, 1, 0, NULL, NULL), hilock_hold_errmsg(h));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(sl)), hilock_hold_errmsg(h));
  /* Past the session's TTL and then some: without the renewal thread's
   * pushes the marker would have under 10 s left (11.5 s from the grant,
   * 2 s ago). */
  hl_sleep_ms(2000);
  assert_hl_ok(hilock_hold_owned(h, &owned), hilock_hold_errmsg(h));
  assert_int_equal(owned, 1);
  assert_true(pttl(f, DKEY("q")) > 10000);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(sl)), hilock_hold_errmsg(h));
  assert_false(exists(f, DKEY("q")));
  hilock_hold_free(h);
}

static void sequential_lapsed_grant_keeps_the_line_for_the_delay(void **state) {
  fixture *f = *state;
  hilock_sequential_lock *l = hl_new_seq(f->client, "q", 20);
  hilock_sequential_lock *plain = hl_new_seq(f->client, "q", 5000);
  int owned = 1, deleted = 0;
  assert_hl_ok(hilock_hold_set_lock_delay(HILOCK_HOLD(l), 20000),
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  while (owned) {
    hl_sleep_ms(5);
    assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(l), &owned),
                 hilock_hold_errmsg(HILOCK_HOLD(l)));
  }
  assert_false(exists(f, SEQ_HOLDER));
  /* No holder, and a handle without a delay of its own is refused, try or
   * wait (far shorter than the delay), and leaves no entry behind. */
  assert_int_equal(hilock_hold_try_acquire(HILOCK_HOLD(plain)), HILOCK_BUSY);
  assert_int_equal(hilock_hold_acquire(HILOCK_HOLD(plain), 300), HILOCK_BUSY);
  assert_int_equal(hl_redis_int(f->redis, "ZCARD hilock:{q}:seq:queue"), 0);
  (void)lapsed_info(f, "q", 20000);
  /* The operator's forced release ends the delay. */
  assert_hl_ok(hilock_client_force_release(f->client, "q", 1, &deleted),
               hilock_client_errmsg(f->client));
  assert_false(exists(f, DKEY("q")));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(plain)),
               hilock_hold_errmsg(HILOCK_HOLD(plain)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(plain)),
               hilock_hold_errmsg(HILOCK_HOLD(plain)));
  assert_int_equal(hilock_hold_set_lock_delay(HILOCK_HOLD(plain), -1), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_lock_delay_ms(HILOCK_HOLD(plain)), 0);
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_hold_free(HILOCK_HOLD(plain));
}

HL_FIXTURE_MAIN("lock_delay",
      HL_TEST(marker_follows_grant_renewal_extension_and_release),
      HL_TEST(lapsed_grant_keeps_the_name_for_the_delay),
      HL_TEST(no_delay_writes_no_marker_and_inspect_shows_none),
      HL_TEST(bad_delays_are_einval),
      HL_TEST(multi_key_markers_follow_grant_extension_and_release),
      HL_TEST(rlock_marker_follows_first_entry_renewal_and_final_release),
      HL_TEST(rlock_lapsed_grant_keeps_the_name_for_the_delay),
      HL_TEST(rwlock_write_marker_follows_grant_renewal_and_release),
      HL_TEST(rwlock_lapsed_write_keeps_writers_and_readers_out),
      HL_TEST(sequential_marker_follows_grant_renewal_extension_and_release),
      HL_TEST(sequential_watchdog_pushes_the_marker),
      HL_TEST(sequential_lapsed_grant_keeps_the_line_for_the_delay))
