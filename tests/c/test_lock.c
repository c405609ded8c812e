/* The exclusive lock family (simple, expiring, lease) against a real
 * server: what is its own beyond the contract every family keeps
 * (test_contract.c). Keys are checked directly with hiredis. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>

typedef hl_fixture fixture;

static const hilock_lock_kind all_kinds[] = {
    HILOCK_LOCK_SIMPLE, HILOCK_LOCK_EXPIRING, HILOCK_LOCK_LEASE};
static const hilock_lock_kind ttl_kinds[] = {HILOCK_LOCK_EXPIRING,
                                             HILOCK_LOCK_LEASE};
#define NKINDS(a) (sizeof(a) / sizeof(a[0]))

/* A handle of the given kind; ttl is ignored for a simple lock. */
static hilock_lock *make_lock_n(hilock_client *c, hilock_lock_kind kind,
                                const char *name, size_t len, int64_t ttl) {
  hilock_lock *l = NULL;
  int rc;
  switch (kind) {
    case HILOCK_LOCK_SIMPLE:
      rc = hilock_lock_new_simple(c, name, len, &l);
      break;
    case HILOCK_LOCK_LEASE:
      rc = hilock_lock_new_lease(c, name, len, ttl, &l);
      break;
    default:
      rc = hilock_lock_new(c, name, len, ttl, &l);
      break;
  }
  assert_hl_ok(rc, hilock_client_errmsg(c));
  assert_non_null(l);
  assert_int_equal(hilock_lock_kind_of(l), kind);
  return l;
}

static hilock_lock *make_lock(hilock_client *c, hilock_lock_kind kind,
                              const char *name, int64_t ttl) {
  return make_lock_n(c, kind, name, strlen(name), ttl);
}

static long long fence_counter(fixture *f, const char *name, size_t len) {
  char key[HILOCK_NAME_MAX + 32];
  char *v;
  long long n;
  memcpy(key, "hilock:{", 8);
  memcpy(key + 8, name, len);
  memcpy(key + 8 + len, "}:fence", 7);
  v = hl_redis_get(f->redis, key, 8 + len + 7);
  if (v == NULL) return 0;
  n = atoll(v);
  free(v);
  return n;
}

/* ## Fencing tokens -------------------------------------------------------- */

static void fencing_tokens_increase_across_holders_and_handles(void **state) {
  fixture *f = *state;
  hilock_lock *h[3];
  uint64_t last = 0, first = 0;

  h[0] = make_lock(f->client, HILOCK_LOCK_EXPIRING, "fenced", 5000);
  h[1] = make_lock(f->client, HILOCK_LOCK_LEASE, "fenced", 5000);
  h[2] = make_lock(f->client, HILOCK_LOCK_SIMPLE, "fenced", 0);
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(h[0])), 0);
  /* The first grant draws from the server's clock; then the counter is put
   * ahead of any clock, where each grant adds exactly one. */
  for (int round = 0; round < 12; round++) {
    hilock_lock *l = h[round % 3], *other = h[(round + 1) % 3];
    assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
    assert_true(hilock_hold_fence(HILOCK_HOLD(l)) > last);
    last = hilock_hold_fence(HILOCK_HOLD(l));
    if (round == 0) {
      assert_true(last > 1000000000000000ULL); /* from the server's clock */
      hl_redis_ok(f->redis, "SET hilock:{fenced}:fence %lld", HL_FENCE_AHEAD);
      last = first = (uint64_t)HL_FENCE_AHEAD;
    }
    /* A refused attempt draws no token. */
    assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(other)), HILOCK_BUSY,
                 hilock_hold_errmsg(HILOCK_HOLD(other)));
    assert_int_equal(fence_counter(f, "fenced", 6), (long long)last);
    assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  }
  /* One more per grant past a counter ahead of the clock. */
  assert_int_equal(last, first + 11);
  for (int i = 0; i < 3; i++) hilock_hold_free(HILOCK_HOLD(h[i]));
}

/* ## Waiting --------------------------------------------------------------- */

static void acquire_gives_busy_after_wait_ms_when_held(void **state) {
  fixture *f = *state;
  hilock_lock *a = make_lock(f->client, HILOCK_LOCK_EXPIRING, "waited", 10000);
  hilock_lock *b = make_lock(f->client, HILOCK_LOCK_EXPIRING, "waited", 10000);
  int64_t t0;

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  t0 = hl_now_ms();
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(b), 300), HILOCK_BUSY, hilock_hold_errmsg(HILOCK_HOLD(b)));
  /* Bounded by the wait, not the holder's 10 s TTL; 2 s leaves room for a
   * stalled, loaded machine. */
  assert_i64_between(hl_now_ms() - t0, 290, 2000);

  t0 = hl_now_ms();
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(b), 0), HILOCK_BUSY, hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_i64_between(hl_now_ms() - t0, 0, 2000); /* one try, no wait */
  assert_false(hilock_hold_held(HILOCK_HOLD(b)));
  hl_assert_holder(f->redis, HILOCK_HOLD(a));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

static void acquire_succeeds_once_holder_ttl_lapses(void **state) {
  fixture *f = *state;
  hilock_lock *a = make_lock(f->client, HILOCK_LOCK_EXPIRING, "lapsing", 250);
  hilock_lock *b = make_lock(f->client, HILOCK_LOCK_LEASE, "lapsing", 5000);
  int64_t t0;

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  t0 = hl_now_ms();
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(b), 10000), hilock_hold_errmsg(HILOCK_HOLD(b)));
  /* When a's 250 ms TTL ends, not at the 10 s limit; 2 s of room for a
   * loaded machine. */
  assert_i64_between(hl_now_ms() - t0, 150, 250 + 2000);
  hl_assert_holder(f->redis, HILOCK_HOLD(b));

  /* Waiting forever ends the same way. */
  assert_hl_ok(hilock_hold_extend(HILOCK_HOLD(b), 200, 1), hilock_hold_errmsg(HILOCK_HOLD(b)));
  t0 = hl_now_ms();
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(a), HILOCK_WAIT_FOREVER),
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  /* When b's 200 ms TTL ends, not never; 2 s of room. */
  assert_i64_between(hl_now_ms() - t0, 100, 200 + 2000);
  hl_assert_holder(f->redis, HILOCK_HOLD(a));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

/* ## Simple locks ---------------------------------------------------------- */

static void simple_lock_outlives_freed_holder_until_force_release(
    void **state) {
  fixture *f = *state;
  hilock_lock *a = make_lock(f->client, HILOCK_LOCK_SIMPLE, "stuck", 0);
  hilock_lock *b = make_lock(f->client, HILOCK_LOCK_SIMPLE, "stuck", 0);
  int deleted = -1, locked = -1;

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  hilock_hold_free(HILOCK_HOLD(a)); /* the holder "dies" */
  hl_sleep_ms(100);
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(b), 100), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(b), &locked), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_true(locked);
  assert_int_equal(hl_hold_pttl(f->redis, HILOCK_HOLD(b)), -1);

  assert_hl_ok(hilock_lock_force_release(b, &deleted), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_true(deleted);
  assert_hl_ok(hilock_lock_force_release(b, &deleted), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_false(deleted);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  hl_assert_holder(f->redis, HILOCK_HOLD(b));

  /* force_release also ends the caller's own grant. */
  assert_hl_ok(hilock_lock_force_release(b, NULL), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_false(hilock_hold_held(HILOCK_HOLD(b)));
  assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(b), &locked), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_false(locked);
  hilock_hold_free(HILOCK_HOLD(b));
}

static void simple_lock_extend_is_enotsup(void **state) {
  fixture *f = *state;
  hilock_lock *l = make_lock(f->client, HILOCK_LOCK_SIMPLE, "no-ttl", 0);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(l), 1000, 1), HILOCK_ENOTSUP,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(l), 1000, 0), HILOCK_ENOTSUP,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_hold_renew(HILOCK_HOLD(l)), HILOCK_ENOTSUP, hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_true(hilock_hold_held(HILOCK_HOLD(l)));
  assert_int_equal(hl_hold_pttl(f->redis, HILOCK_HOLD(l)), -1);
  assert_int_equal(hilock_hold_ttl_ms(HILOCK_HOLD(l)), 0);
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(l)), INT64_MAX);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(l)), 0);
  hilock_hold_free(HILOCK_HOLD(l));
}

/* ## Extend and renew ------------------------------------------------------ */

static void extend_replace_and_add_change_pttl(void **state) {
  fixture *f = *state;
  for (size_t i = 0; i < NKINDS(ttl_kinds); i++) {
    hilock_lock *l = make_lock(f->client, ttl_kinds[i], "ext", 1000);
    assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
    assert_i64_between(hl_hold_pttl(f->redis, HILOCK_HOLD(l)), 500, 1000);

    assert_hl_ok(hilock_hold_extend(HILOCK_HOLD(l), 5000, 1), hilock_hold_errmsg(HILOCK_HOLD(l)));
    assert_i64_between(hl_hold_pttl(f->redis, HILOCK_HOLD(l)), 4500, 5000);
    assert_i64_between(hilock_hold_validity_ms(HILOCK_HOLD(l)), 4500, 5000);

    assert_hl_ok(hilock_hold_extend(HILOCK_HOLD(l), 2000, 0), hilock_hold_errmsg(HILOCK_HOLD(l)));
    assert_i64_between(hl_hold_pttl(f->redis, HILOCK_HOLD(l)), 6500, 7000);
    assert_i64_between(hilock_hold_validity_ms(HILOCK_HOLD(l)), 6500, 7000);

    /* Replace can also shorten. */
    assert_hl_ok(hilock_hold_extend(HILOCK_HOLD(l), 300, 1), hilock_hold_errmsg(HILOCK_HOLD(l)));
    assert_i64_between(hl_hold_pttl(f->redis, HILOCK_HOLD(l)), 1, 300);
    assert_i64_between(hilock_hold_validity_ms(HILOCK_HOLD(l)), 1, 300);
    hl_assert_holder(f->redis, HILOCK_HOLD(l));
    assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
    hilock_hold_free(HILOCK_HOLD(l));
  }
}

static void renew_resets_pttl_to_ttl(void **state) {
  fixture *f = *state;
  hilock_lock *l = make_lock(f->client, HILOCK_LOCK_LEASE, "renewed", 1000);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hl_sleep_ms(300);
  assert_i64_between(hl_hold_pttl(f->redis, HILOCK_HOLD(l)), 1, 750);
  assert_hl_ok(hilock_hold_renew(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_i64_between(hl_hold_pttl(f->redis, HILOCK_HOLD(l)), 850, 1000);
  assert_i64_between(hilock_hold_validity_ms(HILOCK_HOLD(l)), 850, 1000);
  hl_assert_holder(f->redis, HILOCK_HOLD(l));
  hilock_hold_free(HILOCK_HOLD(l));
}

static void extend_on_expired_lock_is_enotowned_without_recreating(
    void **state) {
  fixture *f = *state;
  for (size_t i = 0; i < NKINDS(ttl_kinds); i++) {
    hilock_lock *l = make_lock(f->client, ttl_kinds[i], "expired", 100);
    size_t klen;
    const char *key = hilock_hold_key(HILOCK_HOLD(l), &klen);

    assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
    hl_sleep_ms(150);
    assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(l), 5000, 1), HILOCK_ENOTOWNED,
                 hilock_hold_errmsg(HILOCK_HOLD(l)));
    assert_false(hl_redis_exists(f->redis, key, klen));
    assert_false(hilock_hold_held(HILOCK_HOLD(l)));
    assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(l), 5000, 0), HILOCK_ENOTOWNED,
                 hilock_hold_errmsg(HILOCK_HOLD(l)));
    assert_hl_rc(hilock_hold_renew(HILOCK_HOLD(l)), HILOCK_ENOTOWNED, hilock_hold_errmsg(HILOCK_HOLD(l)));
    assert_false(hl_redis_exists(f->redis, key, klen));
    hilock_hold_free(HILOCK_HOLD(l));
  }
}

static void extend_of_someone_elses_lock_leaves_it_alone(void **state) {
  fixture *f = *state;
  hilock_lock *a = make_lock(f->client, HILOCK_LOCK_LEASE, "theirs", 100);
  hilock_lock *b = make_lock(f->client, HILOCK_LOCK_LEASE, "theirs", 2000);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  hl_sleep_ms(150);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(a), 60000, 1), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_i64_between(hl_hold_pttl(f->redis, HILOCK_HOLD(b)), 1000, 2000);
  hl_assert_holder(f->redis, HILOCK_HOLD(b));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

static void extend_rejects_bad_durations(void **state) {
  fixture *f = *state;
  hilock_lock *l = make_lock(f->client, HILOCK_LOCK_EXPIRING, "bad-ms", 1000);
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(l), 1000, 1), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(l), 0, 1), HILOCK_EINVAL,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(l), -5, 0), HILOCK_EINVAL,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(l), HILOCK_TTL_MAX_MS + 1, 1), HILOCK_EINVAL,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_true(hilock_hold_held(HILOCK_HOLD(l)));
  assert_i64_between(hl_hold_pttl(f->redis, HILOCK_HOLD(l)), 1, 1000);
  hilock_hold_free(HILOCK_HOLD(l));
}

/* ## Local state: validity, held, owned, locked, token --------------------- */

static void validity_decreases_and_stays_below_ttl(void **state) {
  fixture *f = *state;
  hilock_lock *l = make_lock(f->client, HILOCK_LOCK_EXPIRING, "valid", 2000);
  int64_t v1, v2, t0, t1;

  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(l)), 0);
  t0 = hl_now_ms();
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  t1 = hl_now_ms();
  v1 = hilock_hold_validity_ms(HILOCK_HOLD(l));
  /* Less the drift allowance (1% of 2000 ms + 2 ms) and at most the time
   * the grant took, however long a loaded machine made it. */
  assert_i64_between(v1, 2000 - 22 - (t1 - t0) - 1, 2000 - 22);
  hl_sleep_ms(100);
  v2 = hilock_hold_validity_ms(HILOCK_HOLD(l));
  assert_true(v2 < v1);
  /* Down by the time that passed between the two reads. */
  assert_i64_between(v2, v1 - (hl_now_ms() - t1) - 1, v1 - 90);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(l)), 0);
  hilock_hold_free(HILOCK_HOLD(l));

  l = make_lock(f->client, HILOCK_LOCK_LEASE, "valid-short", 60);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_i64_between(hilock_hold_validity_ms(HILOCK_HOLD(l)), 0, 60);
  hl_sleep_ms(80);
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(l)), 0);
  assert_false(hilock_hold_held(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
}

static void owned_and_locked_report_the_server_state(void **state) {
  fixture *f = *state;
  for (size_t i = 0; i < NKINDS(all_kinds); i++) {
    hilock_lock_kind k = all_kinds[i];
    hilock_lock *a = make_lock(f->client, k, "owner", 5000);
    hilock_lock *b = make_lock(f->client, k, "owner", 5000);
    int owned = -1, locked = -1;

    assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(a), &locked), hilock_hold_errmsg(HILOCK_HOLD(a)));
    assert_false(locked);
    assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(a), &owned), hilock_hold_errmsg(HILOCK_HOLD(a)));
    assert_false(owned);

    assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
    assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(a), &owned), hilock_hold_errmsg(HILOCK_HOLD(a)));
    assert_true(owned);
    assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(b), &owned), hilock_hold_errmsg(HILOCK_HOLD(b)));
    assert_false(owned);
    assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(b), &locked), hilock_hold_errmsg(HILOCK_HOLD(b)));
    assert_true(locked);

    /* An operator deletes it behind a's back. */
    assert_hl_ok(hilock_lock_force_release(b, NULL), hilock_hold_errmsg(HILOCK_HOLD(b)));
    assert_true(hilock_hold_held(HILOCK_HOLD(a))); /* a has not looked yet */
    assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(a), &owned), hilock_hold_errmsg(HILOCK_HOLD(a)));
    assert_false(owned);
    assert_false(hilock_hold_held(HILOCK_HOLD(a)));
    assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(a), &locked), hilock_hold_errmsg(HILOCK_HOLD(a)));
    assert_false(locked);
    hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
  }
}

static void token_is_32_hex_chars_and_fresh_per_grant(void **state) {
  fixture *f = *state;
  hilock_lock *a = make_lock(f->client, HILOCK_LOCK_EXPIRING, "tok", 5000);
  hilock_lock *b = make_lock(f->client, HILOCK_LOCK_EXPIRING, "tok-b", 5000);
  char first[33];

  assert_string_equal(hilock_hold_token(HILOCK_HOLD(a)), "");
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(strlen(hilock_hold_token(HILOCK_HOLD(a))), 32);
  assert_true(hl_is_lower_hex(hilock_hold_token(HILOCK_HOLD(a)), 32));
  memcpy(first, hilock_hold_token(HILOCK_HOLD(a)), 33);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_string_equal(hilock_hold_token(HILOCK_HOLD(a)), "");

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_true(hl_is_lower_hex(hilock_hold_token(HILOCK_HOLD(a)), 32));
  assert_string_not_equal(hilock_hold_token(HILOCK_HOLD(a)), first);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_string_not_equal(hilock_hold_token(HILOCK_HOLD(a)), hilock_hold_token(HILOCK_HOLD(b)));
  hl_assert_holder(f->redis, HILOCK_HOLD(a));
  hl_assert_holder(f->redis, HILOCK_HOLD(b));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

static void acquiring_twice_on_one_handle_is_einval(void **state) {
  fixture *f = *state;
  for (size_t i = 0; i < NKINDS(all_kinds); i++) {
    hilock_lock *l = make_lock(f->client, all_kinds[i], "twice", 5000);
    char token[33];
    uint64_t fence;

    assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
    memcpy(token, hilock_hold_token(HILOCK_HOLD(l)), 33);
    fence = hilock_hold_fence(HILOCK_HOLD(l));
    assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(l)), HILOCK_EINVAL,
                 hilock_hold_errmsg(HILOCK_HOLD(l)));
    assert_substr(hilock_hold_errmsg(HILOCK_HOLD(l)), "reentrant");
    assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(l), 200), HILOCK_EINVAL,
                 hilock_hold_errmsg(HILOCK_HOLD(l)));
    /* The grant is untouched. */
    assert_true(hilock_hold_held(HILOCK_HOLD(l)));
    assert_string_equal(hilock_hold_token(HILOCK_HOLD(l)), token);
    assert_int_equal(hilock_hold_fence(HILOCK_HOLD(l)), fence);
    hl_assert_holder(f->redis, HILOCK_HOLD(l));
    assert_int_equal(fence_counter(f, "twice", 5), (long long)fence);
    assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
    hilock_hold_free(HILOCK_HOLD(l));
  }
}

static void handle_whose_grant_lapsed_may_acquire_again(void **state) {
  fixture *f = *state;
  hilock_lock *l = make_lock(f->client, HILOCK_LOCK_EXPIRING, "relapse", 80);
  uint64_t fence;
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  fence = hilock_hold_fence(HILOCK_HOLD(l));
  hl_sleep_ms(120);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_true(hilock_hold_fence(HILOCK_HOLD(l)) > fence);
  hilock_hold_free(HILOCK_HOLD(l));
}

/* ## Names, keys, TTLs ----------------------------------------------------- */

static void invalid_names_are_einval(void **state) {
  fixture *f = *state;
  hl_assert_bad_names_refused(f->client, hl_lock_new_hold);
  hl_assert_bad_names_refused(f->client, hl_simple_new_hold);
  hl_assert_bad_names_refused(f->client, hl_lease_new_hold);
}

static void name_of_1024_bytes_works(void **state) {
  fixture *f = *state;
  char big[HILOCK_NAME_MAX];
  hilock_lock *l;
  size_t klen;

  memset(big, 'n', sizeof(big));
  l = make_lock_n(f->client, HILOCK_LOCK_EXPIRING, big, sizeof(big), 5000);
  hilock_hold_key(HILOCK_HOLD(l), &klen);
  assert_int_equal(klen, strlen("hilock:{}:lock") + HILOCK_NAME_MAX);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hl_assert_holder(f->redis, HILOCK_HOLD(l));
  assert_int_equal(fence_counter(f, big, sizeof(big)),
                   (long long)hilock_hold_fence(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
}

typedef struct name_case {
  const char *name;
  size_t len;
} name_case;

static void unusual_names_work_and_keys_follow_the_layout(void **state) {
  fixture *f = *state;
  static const name_case names[] = {
      {"a\0b", 3},
      {"a\0c", 3},
      {"a", 1},
      {"\0", 1},
      {"x{y}z", 5},
      {"tail}", 5},
      {"{", 1},
      {"with space", 10},
      /* UTF-8: letters with diacritics, a space, a padlock emoji */
      {"\xc3\xbcn\xc3\xaf" "c\xc3\xb8" "d\xc3\xa9 \xf0\x9f\x94\x92", 16},
  };
  hilock_lock *l[sizeof(names) / sizeof(names[0])];

  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    const name_case *n = &names[i];
    char want[64];
    size_t klen, wlen = 0;
    const char *key;

    l[i] = make_lock_n(f->client, HILOCK_LOCK_EXPIRING, n->name, n->len, 5000);
    memcpy(want, "hilock:{", 8);
    wlen = 8;
    memcpy(want + wlen, n->name, n->len);
    wlen += n->len;
    memcpy(want + wlen, "}:lock", 6);
    wlen += 6;
    key = hilock_hold_key(HILOCK_HOLD(l[i]), &klen);
    assert_int_equal(klen, wlen);
    assert_memory_equal(key, want, wlen);

    /* Names differing only after a NUL byte are different locks. */
    assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l[i])), hilock_hold_errmsg(HILOCK_HOLD(l[i])));
    hl_assert_holder(f->redis, HILOCK_HOLD(l[i]));
    assert_int_equal(fence_counter(f, n->name, n->len),
                     (long long)hilock_hold_fence(HILOCK_HOLD(l[i])));
  }
  /* Lock and fence key of each, nothing else. */
  assert_int_equal(hl_redis_int(f->redis, "DBSIZE"),
                   2 * (long long)(sizeof(names) / sizeof(names[0])));
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l[i])), hilock_hold_errmsg(HILOCK_HOLD(l[i])));
    hilock_hold_free(HILOCK_HOLD(l[i]));
  }
}

static void ttl_out_of_range_is_einval(void **state) {
  fixture *f = *state;
  static const int64_t bad[] = {0, -1, -1000, 1, HILOCK_TTL_MIN_MS - 1,
                                HILOCK_TTL_MAX_MS + 1, INT64_MAX};
  hilock_lock *l = NULL;
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    assert_int_equal(hilock_lock_new(f->client, "t", 1, bad[i], &l),
                     HILOCK_EINVAL);
    assert_null(l);
    assert_substr(hilock_client_errmsg(f->client), "ttl");
    assert_int_equal(hilock_lock_new_lease(f->client, "t", 1, bad[i], &l),
                     HILOCK_EINVAL);
    assert_null(l);
  }
}

static void ttl_limits_are_accepted(void **state) {
  fixture *f = *state;
  hilock_lock *l = make_lock(f->client, HILOCK_LOCK_EXPIRING, "max",
                             HILOCK_TTL_MAX_MS);
  hilock_lock *s;
  assert_int_equal(hilock_hold_ttl_ms(HILOCK_HOLD(l)), HILOCK_TTL_MAX_MS);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_i64_between(hl_hold_pttl(f->redis, HILOCK_HOLD(l)), HILOCK_TTL_MAX_MS - 5000,
                     HILOCK_TTL_MAX_MS);
  hilock_hold_free(HILOCK_HOLD(l));

  l = make_lock(f->client, HILOCK_LOCK_LEASE, "min", HILOCK_TTL_MIN_MS);
  assert_int_equal(hilock_hold_ttl_ms(HILOCK_HOLD(l)), HILOCK_TTL_MIN_MS);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));

  /* A simple lock has no TTL, whatever the constructor saw. */
  s = make_lock(f->client, HILOCK_LOCK_SIMPLE, "simple", 0);
  assert_int_equal(hilock_hold_ttl_ms(HILOCK_HOLD(s)), 0);
  hilock_hold_free(HILOCK_HOLD(s));
}

/* ## Damaged keys ---------------------------------------------------------- */

static void wrong_type_lock_key_is_ewrongtype_and_writes_nothing(
    void **state) {
  fixture *f = *state;
  for (size_t i = 0; i < NKINDS(all_kinds); i++) {
    hilock_lock *l = make_lock(f->client, all_kinds[i], "w", 5000);
    int flag = -1;

    hl_redis_ok(f->redis, "FLUSHALL");
    hl_redis_ok(f->redis, "HSET hilock:{w}:lock field value");
    assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(l)), HILOCK_EWRONGTYPE,
                 hilock_hold_errmsg(HILOCK_HOLD(l)));
    assert_substr(hilock_hold_errmsg(HILOCK_HOLD(l)), "WRONGTYPE");
    assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(l)), HILOCK_EWRONGTYPE);
    assert_false(hilock_hold_held(HILOCK_HOLD(l)));
    assert_string_equal(hilock_hold_token(HILOCK_HOLD(l)), "");
    assert_int_equal(hilock_hold_fence(HILOCK_HOLD(l)), 0);
    assert_false(hl_redis_exists(f->redis, "hilock:{w}:fence", 16));
    assert_int_equal(hl_redis_int(f->redis, "HLEN hilock:{w}:lock"), 1);

    assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(l), 100), HILOCK_EWRONGTYPE,
                 hilock_hold_errmsg(HILOCK_HOLD(l)));
    assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(l), &flag), hilock_hold_errmsg(HILOCK_HOLD(l)));
    assert_true(flag);
    hilock_hold_free(HILOCK_HOLD(l));
  }
}

static void damaged_fence_key_fails_before_writing_the_lock(void **state) {
  fixture *f = *state;
  hilock_lock *l = make_lock(f->client, HILOCK_LOCK_EXPIRING, "f", 5000);

  hl_redis_ok(f->redis, "HSET hilock:{f}:fence field value");
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(l)), HILOCK_EWRONGTYPE,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_false(hl_redis_exists(f->redis, "hilock:{f}:lock", 15));

  hl_redis_ok(f->redis, "SET hilock:{f}:fence not-a-number");
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(l)), HILOCK_EWRONGTYPE,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(l)),
                "hilock:{f}:fence holds no integer");
  assert_false(hl_redis_exists(f->redis, "hilock:{f}:lock", 15));
  assert_false(hilock_hold_held(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
}

static void wrong_type_after_grant_keeps_the_grant_for_retry(void **state) {
  fixture *f = *state;
  hilock_lock *l = make_lock(f->client, HILOCK_LOCK_LEASE, "swap", 5000);
  int owned = -1;

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hl_redis_ok(f->redis, "DEL hilock:{swap}:lock");
  hl_redis_ok(f->redis, "HSET hilock:{swap}:lock field value");
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(l)), HILOCK_EWRONGTYPE,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_true(hilock_hold_held(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(l), 1000, 1), HILOCK_EWRONGTYPE,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_hold_owned(HILOCK_HOLD(l), &owned), HILOCK_EWRONGTYPE,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_int_equal(hl_redis_int(f->redis, "HLEN hilock:{swap}:lock"), 1);
  hilock_hold_free(HILOCK_HOLD(l));
}

/* ## Accessors ------------------------------------------------------------- */

static void accessors_describe_the_handle(void **state) {
  fixture *f = *state;
  hilock_lock *l = make_lock(f->client, HILOCK_LOCK_LEASE, "acc", 1234);
  size_t len = 0;
  assert_int_equal(hilock_lock_kind_of(l), HILOCK_LOCK_LEASE);
  assert_int_equal(hilock_hold_ttl_ms(HILOCK_HOLD(l)), 1234);
  assert_string_equal(hilock_hold_key(HILOCK_HOLD(l), &len), "hilock:{acc}:lock");
  assert_int_equal(len, 17);
  assert_string_equal(hilock_hold_key(HILOCK_HOLD(l), NULL), "hilock:{acc}:lock");
  assert_false(hilock_hold_held(HILOCK_HOLD(l)));
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(l)), 0);
  assert_string_equal(hilock_hold_errmsg(HILOCK_HOLD(l)), "");
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(l)), HILOCK_OK);
  hilock_hold_free(HILOCK_HOLD(l));
}

/* hilock_lock_new_kind, under the named constructors: a kind that is
 * none of the four, or a simple lock given a TTL, is HILOCK_EINVAL with a
 * message on the client, and no handle. */
static void new_kind_checks_the_kind_and_a_simple_locks_ttl(void **state) {
  fixture *f = *state;
  hilock_lock *l = (hilock_lock *)1;
  assert_hl_rc(hilock_lock_new_kind(f->client, "k", 1, (hilock_lock_kind)4,
                                    1000, &l),
               HILOCK_EINVAL, hilock_client_errmsg(f->client));
  assert_null(l);
  assert_non_null(strstr(hilock_client_errmsg(f->client), "kind"));
  assert_hl_rc(hilock_lock_new_kind(f->client, "k", 1, (hilock_lock_kind)-1,
                                    1000, &l),
               HILOCK_EINVAL, hilock_client_errmsg(f->client));
  assert_hl_rc(hilock_lock_new_kind(f->client, "k", 1, HILOCK_LOCK_SIMPLE,
                                    1000, &l),
               HILOCK_EINVAL, hilock_client_errmsg(f->client));
  assert_non_null(strstr(hilock_client_errmsg(f->client), "no TTL"));
  assert_null(l);
  assert_hl_rc(hilock_lock_new_kind(f->client, "k", 1, HILOCK_LOCK_LEASE, 5,
                                    &l),
               HILOCK_EINVAL, hilock_client_errmsg(f->client));
  assert_int_equal(hilock_lock_new_kind(NULL, "k", 1, HILOCK_LOCK_LEASE, 1000,
                                        &l),
                   HILOCK_EINVAL);
  assert_null(l);
  assert_hl_ok(hilock_lock_new_kind(f->client, "k", 1, HILOCK_LOCK_SIMPLE, 0,
                                    &l),
               hilock_client_errmsg(f->client));
  assert_int_equal(hilock_lock_kind_of(l), HILOCK_LOCK_SIMPLE);
  assert_int_equal(hilock_hold_ttl_ms(HILOCK_HOLD(l)), 0);
  hilock_hold_free(HILOCK_HOLD(l));
  assert_hl_ok(hilock_lock_new_kind(f->client, "k", 1, HILOCK_LOCK_LEASE, 1000,
                                    &l),
               hilock_client_errmsg(f->client));
  assert_int_equal(hilock_lock_kind_of(l), HILOCK_LOCK_LEASE);
  assert_int_equal(hilock_hold_ttl_ms(HILOCK_HOLD(l)), 1000);
  hilock_hold_free(HILOCK_HOLD(l));
}

/* redis-py's layout: the key is the bare name holding the token (the
 * caller's, once set), with its PX expiry or none (ttl 0); no fence; the
 * owner check of release; the caller's token only on this kind. */
static void redis_py_layout_is_the_bare_name_holding_the_token(void **state) {
  fixture *f = *state;
  hilock_lock *l = NULL, *plain = NULL, *forever = NULL;
  char *v;
  assert_hl_ok(hilock_lock_new_kind(f->client, "py:1", 4, HILOCK_LOCK_REDIS_PY,
                                    5000, &l),
               hilock_client_errmsg(f->client));
  assert_hl_ok(hilock_lock_set_token(l, "caller", 6),
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(l), 0),
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  v = hl_redis_get(f->redis, "py:1", 4);
  assert_string_equal(v, "caller");
  free(v);
  assert_i64_between(hl_redis_pttl(f->redis, "py:1", 4), 1, 5000);
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(l)), 0);
  assert_false(hl_redis_exists(f->redis, "hilock:{py:1}:fence", 19));
  /* The token is the owner: a value written over it is someone else's. */
  hl_redis_ok(f->redis, "SET py:1 other");
  assert_int_equal(hilock_hold_release(HILOCK_HOLD(l)), HILOCK_ENOTOWNED);
  v = hl_redis_get(f->redis, "py:1", 4);
  assert_string_equal(v, "other");
  free(v);
  hl_redis_ok(f->redis, "DEL py:1");
  /* Too long, NUL inside, or another kind: refused. */
  assert_int_equal(hilock_lock_set_token(l, "a\0b", 3), HILOCK_EINVAL);
  {
    char big[65];
    memset(big, 'x', sizeof(big));
    assert_int_equal(hilock_lock_set_token(l, big, sizeof(big)),
                     HILOCK_EINVAL);
  }
  assert_hl_ok(hilock_lock_new(f->client, "py:2", 4, 5000, &plain), "new");
  assert_int_equal(hilock_lock_set_token(plain, "t", 1), HILOCK_EINVAL);
  assert_int_equal(hilock_lock_set_token(NULL, "t", 1), HILOCK_EINVAL);
  /* No room for a lock delay's marker in redis-py's layout. */
  assert_int_equal(hilock_hold_set_lock_delay(HILOCK_HOLD(l), 1000),
                   HILOCK_ENOTSUP);
  /* ttl 0: no expiry (redis-py's timeout=None); nothing to extend. */
  assert_hl_ok(hilock_lock_new_kind(f->client, "py:3", 4, HILOCK_LOCK_REDIS_PY,
                                    0, &forever),
               hilock_client_errmsg(f->client));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(forever), 0), "acquire");
  assert_int_equal(hl_redis_pttl(f->redis, "py:3", 4), -1);
  assert_int_equal(hilock_hold_extend(HILOCK_HOLD(forever), 1000, 0),
                   HILOCK_ENOTSUP);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(forever)), "release");
  assert_false(hl_redis_exists(f->redis, "py:3", 4));
  hilock_hold_free(HILOCK_HOLD(forever));
  hilock_hold_free(HILOCK_HOLD(plain));
  hilock_hold_free(HILOCK_HOLD(l));
}

HL_FIXTURE_MAIN("lock",
      HL_TEST(fencing_tokens_increase_across_holders_and_handles),
      HL_TEST(acquire_gives_busy_after_wait_ms_when_held),
      HL_TEST(acquire_succeeds_once_holder_ttl_lapses),
      HL_TEST(simple_lock_outlives_freed_holder_until_force_release),
      HL_TEST(simple_lock_extend_is_enotsup),
      HL_TEST(extend_replace_and_add_change_pttl),
      HL_TEST(renew_resets_pttl_to_ttl),
      HL_TEST(extend_on_expired_lock_is_enotowned_without_recreating),
      HL_TEST(extend_of_someone_elses_lock_leaves_it_alone),
      HL_TEST(extend_rejects_bad_durations),
      HL_TEST(validity_decreases_and_stays_below_ttl),
      HL_TEST(owned_and_locked_report_the_server_state),
      HL_TEST(token_is_32_hex_chars_and_fresh_per_grant),
      HL_TEST(acquiring_twice_on_one_handle_is_einval),
      HL_TEST(handle_whose_grant_lapsed_may_acquire_again),
      HL_TEST(invalid_names_are_einval),
      HL_TEST(name_of_1024_bytes_works),
      HL_TEST(unusual_names_work_and_keys_follow_the_layout),
      HL_TEST(ttl_out_of_range_is_einval),
      HL_TEST(ttl_limits_are_accepted),
      HL_TEST(wrong_type_lock_key_is_ewrongtype_and_writes_nothing),
      HL_TEST(damaged_fence_key_fails_before_writing_the_lock),
      HL_TEST(wrong_type_after_grant_keeps_the_grant_for_retry),
      HL_TEST(accessors_describe_the_handle),
      HL_TEST(new_kind_checks_the_kind_and_a_simple_locks_ttl),
      HL_TEST(redis_py_layout_is_the_bare_name_holding_the_token))
