/* The multi-key lock against a real server, beyond the contract every
 * family keeps (test_contract.c): all-or-nothing grants, per-name fences
 * shared with the single lock, exclusion of and by single locks,
 * owner-checked release that leaves a force-taken key alone, extend and
 * watchdog renewal of every key, waiting on the blocking name's wake list,
 * processes taking random overlapping sets (no overlap per name, no
 * deadlock), a SIGKILLed holder, argument checks and the cluster slot
 * check. */
#include "test_util.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "scripts.h"

typedef hl_fixture fixture;

static char *get_key(fixture *f, const char *name, const char *role) {
  char key[256];
  int n = snprintf(key, sizeof(key), "hilock:{%s}:%s", name, role);
  return hl_redis_get(f->redis, key, (size_t)n);
}

static int lock_exists(fixture *f, const char *name) {
  char key[256];
  int n = snprintf(key, sizeof(key), "hilock:{%s}:lock", name);
  return hl_redis_exists(f->redis, key, (size_t)n);
}

static long long lock_pttl(fixture *f, const char *name) {
  char key[256];
  int n = snprintf(key, sizeof(key), "hilock:{%s}:lock", name);
  return hl_redis_pttl(f->redis, key, (size_t)n);
}

static void assert_holds(fixture *f, const char *name, const char *token) {
  char *v = get_key(f, name, "lock");
  if (v == NULL || strcmp(v, token) != 0) {
    print_error("hilock:{%s}:lock = %s, expected %s\n", name,
                v ? v : "(none)", token);
    free(v);
    fail();
  }
  free(v);
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ## Grants ------------------------------------------------------------ */

static void grants_every_name_with_one_token_and_a_fence_per_name(
    void **state) {
  fixture *f = *state;
  const char *names[] = {"b", "a", "b", "c"};
  hilock_multi_lock *m = hl_new_multi(f->client, names, 4, 10000);
  const char *tok;
  size_t len;
  uint64_t fb, fc;

  /* De-duplicated and sorted. */
  assert_int_equal(hilock_multi_lock_count(m), 3);
  assert_string_equal(hilock_multi_lock_name(m, 0, &len), "a");
  assert_int_equal(len, 1);
  assert_string_equal(hilock_multi_lock_name(m, 1, NULL), "b");
  assert_string_equal(hilock_multi_lock_name(m, 2, NULL), "c");
  assert_string_equal(hilock_multi_lock_key(m, 1, &len), "hilock:{b}:lock");
  assert_int_equal(hilock_multi_lock_fence(m, 0), 0);

  /* "a" was granted before (as a single lock would be), its counter ahead
   * of the clock: the next fence is one more. */
  hl_redis_ok(f->redis, "SET hilock:{a}:fence %lld", HL_FENCE_AHEAD);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  tok = hilock_hold_token(HILOCK_HOLD(m));
  assert_int_equal(strlen(tok), 32);
  assert_holds(f, "a", tok);
  assert_holds(f, "b", tok);
  assert_holds(f, "c", tok);
  assert_i64_between(lock_pttl(f, "c"), 9000, 10000);
  assert_int_equal(hilock_multi_lock_fence(m, 0), HL_FENCE_AHEAD + 1);
  /* New names: their first fence is the server's clock in microseconds. */
  fb = hilock_multi_lock_fence(m, 1);
  fc = hilock_multi_lock_fence(m, 2);
  assert_true(fb > 1000000000000000ULL && fc > 1000000000000000ULL);
  assert_int_equal(hilock_multi_lock_fence(m, 3), 0); /* bad index */
  assert_true(hilock_hold_held(HILOCK_HOLD(m)));
  assert_i64_between(hilock_hold_validity_ms(HILOCK_HOLD(m)), 9000, 10000);

  /* Not reentrant. */
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(m)), HILOCK_EINVAL,
               hilock_hold_errmsg(HILOCK_HOLD(m)));

  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_false(lock_exists(f, "a") || lock_exists(f, "b") ||
               lock_exists(f, "c"));
  /* Each name's wake list got one wake-up. */
  assert_int_equal(hl_redis_int(f->redis, "LLEN hilock:{b}:wake"), 1);
  assert_int_equal(hilock_hold_held(HILOCK_HOLD(m)), 0);
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(m)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(m)));

  /* The next grant draws the next fence of every name. */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_int_equal(hilock_multi_lock_fence(m, 0), HL_FENCE_AHEAD + 2);
  assert_true(hilock_multi_lock_fence(m, 2) > fc);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  hilock_hold_free(HILOCK_HOLD(m));
}

static void one_held_name_means_nothing_is_taken(void **state) {
  fixture *f = *state;
  const char *names[] = {"x", "y", "z"};
  hilock_multi_lock *m = hl_new_multi(f->client, names, 3, 10000);
  hilock_lock *l = hl_new_lock(f->client, "y", 10000);
  int locked = 0;

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(m)), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(m)));
  /* Neither the free names nor their fence counters were touched. */
  assert_false(lock_exists(f, "x"));
  assert_false(lock_exists(f, "z"));
  assert_false(hl_redis_exists(f->redis, "hilock:{x}:fence", 16));
  assert_int_equal(hl_redis_int(f->redis, "INCRBY hilock:{y}:fence 0"),
                   (long long)hilock_hold_fence(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(m), &locked), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_true(locked);
  assert_int_equal(hilock_hold_held(HILOCK_HOLD(m)), 0);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(m), &locked), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_false(locked);
  hl_holds_free(HILOCK_HOLD(l), HILOCK_HOLD(m));
}

static void single_lock_and_multi_lock_exclude_each_other(void **state) {
  fixture *f = *state;
  const char *names[] = {"acct:1", "acct:2"};
  hilock_multi_lock *m = hl_new_multi(f->client, names, 2, 10000);
  hilock_lock *l = hl_new_lock(f->client, "acct:2", 10000);
  uint64_t first;

  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(m), 0), hilock_hold_errmsg(HILOCK_HOLD(m)));
  first = hilock_multi_lock_fence(m, 1);
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(l)), HILOCK_BUSY, hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  /* The single lock's fence continues the same counter. */
  assert_true(hilock_hold_fence(HILOCK_HOLD(l)) > first);
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(m)), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_false(lock_exists(f, "acct:1"));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_true(hilock_multi_lock_fence(m, 1) > hilock_hold_fence(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  hl_holds_free(HILOCK_HOLD(l), HILOCK_HOLD(m));
}

/* The acquire script, resent with the same token (a reply lost to a broken
 * connection), recognises its own grant and returns the same fences. */
static void resent_acquire_returns_the_same_grant(void **state) {
  fixture *f = *state;
  const hilock__script *s = &hilock__script_multilock_acquire;
  long long first[2];
  for (int round = 0; round < 2; round++) {
    redisReply *r = hl_redis(
        f->redis,
        "EVAL %s 8 hilock:{p}:lock hilock:{q}:lock hilock:{p}:wake "
        "hilock:{q}:wake hilock:{p}:fence hilock:{q}:fence "
        "hilock:{p}:delay hilock:{q}:delay tok 10000 0",
        s->src);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 3);
    assert_int_equal(r->element[0]->integer, 1);
    if (round == 0) {
      first[0] = r->element[1]->integer;
      first[1] = r->element[2]->integer;
    } else {
      assert_int_equal(r->element[1]->integer, first[0]);
      assert_int_equal(r->element[2]->integer, first[1]);
    }
    freeReplyObject(r);
  }
  assert_int_equal(hl_redis_int(f->redis, "INCRBY hilock:{q}:fence 0"),
                   first[1]);
}

/* Damaged keys fail closed: an error, and no lock key written. */
static void damaged_keys_fail_before_any_name_is_locked(void **state) {
  fixture *f = *state;
  const char *names[] = {"g1", "g2"};
  hilock_multi_lock *m = hl_new_multi(f->client, names, 2, 10000);

  hl_redis_ok(f->redis, "RPUSH hilock:{g2}:lock not-a-string");
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(m)), HILOCK_EWRONGTYPE,
               hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_false(lock_exists(f, "g1"));
  assert_false(hl_redis_exists(f->redis, "hilock:{g1}:fence", 17));
  hl_redis_ok(f->redis, "DEL hilock:{g2}:lock");

  /* A counter that is not a number: the script stops at its INCR, before
   * any lock key is set (g1's counter may have moved on: a gap). */
  hl_redis_ok(f->redis, "SET hilock:{g2}:fence not-a-number");
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(m)), HILOCK_EWRONGTYPE,
               hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_false(lock_exists(f, "g1"));
  assert_false(lock_exists(f, "g2"));
  assert_int_equal(hilock_hold_held(HILOCK_HOLD(m)), 0);
  hl_redis_ok(f->redis, "DEL hilock:{g2}:fence");
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  hilock_hold_free(HILOCK_HOLD(m));
}

/* ## Release, extend, renewal -------------------------------------------- */

static void release_leaves_a_force_taken_key_alone(void **state) {
  fixture *f = *state;
  const char *names[] = {"r1", "r2", "r3"};
  hilock_multi_lock *m = hl_new_multi(f->client, names, 3, 10000);

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  /* An operator (or an expiry and another owner) took r2. */
  hl_redis_ok(f->redis, "SET hilock:{r2}:lock someone-else PX 10000");
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(m)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(m)), "1 of 3");
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(m)), "\"r2\"");
  assert_false(hilock_multi_lock_missing(m, 0));
  assert_true(hilock_multi_lock_missing(m, 1));
  assert_false(hilock_multi_lock_missing(m, 2));
  assert_false(lock_exists(f, "r1"));
  assert_false(lock_exists(f, "r3"));
  {
    char *v = get_key(f, "r2", "lock");
    assert_string_equal(v, "someone-else");
    free(v);
  }
  assert_int_equal(hilock_hold_held(HILOCK_HOLD(m)), 0);
  hilock_hold_free(HILOCK_HOLD(m));
}

static void extend_refreshes_every_key_or_none(void **state) {
  fixture *f = *state;
  const char *names[] = {"e1", "e2"};
  hilock_multi_lock *m = hl_new_multi(f->client, names, 2, 2000);
  int owned = 0;

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_hl_ok(hilock_hold_extend(HILOCK_HOLD(m), 8000, 1), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_i64_between(lock_pttl(f, "e1"), 7000, 8000);
  assert_i64_between(lock_pttl(f, "e2"), 7000, 8000);
  assert_i64_between(hilock_hold_validity_ms(HILOCK_HOLD(m)), 7000, 8000);
  assert_hl_ok(hilock_hold_extend(HILOCK_HOLD(m), 5000, 0), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_i64_between(lock_pttl(f, "e2"), 12000, 13000);
  assert_hl_ok(hilock_hold_renew(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_i64_between(lock_pttl(f, "e1"), 1000, 2000);
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(m), &owned), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_true(owned);

  /* e2 lapses: extend changes nothing and reports the loss. */
  hl_redis_ok(f->redis, "DEL hilock:{e2}:lock");
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(m), 60000, 1), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(m)), "\"e2\"");
  assert_i64_between(lock_pttl(f, "e1"), 1, 2000);
  assert_true(hilock_multi_lock_missing(m, 1));
  assert_true(hilock_hold_lost(HILOCK_HOLD(m)));
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(m)), 0);
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(m), &owned), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_false(owned);
  hilock_hold_free(HILOCK_HOLD(m));
}

static atomic_int lost_calls;

static void watchdog_renews_every_key_and_reports_one_stolen(void **state) {
  fixture *f = *state;
  /* Five names: more keys than the watchdog's command fits on its stack. */
  const char *names[] = {"w1", "w2", "w3", "w4", "w5"};
  hilock_multi_lock *m = hl_new_multi(f->client, names, 5, 600);
  int64_t t0;

  atomic_store(&lost_calls, 0);
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(m), 1, 0, hl_count_call,
                                          &lost_calls),
               hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  hl_sleep_ms(1500); /* 2.5 TTLs: only renewal keeps the keys */
  for (int i = 0; i < 5; i++) assert_holds(f, names[i], hilock_hold_token(HILOCK_HOLD(m)));
  assert_i64_between(lock_pttl(f, "w3"), 1, 600);
  /* A flushed script cache: renewal reloads the script with EVAL. */
  hl_redis_ok(f->redis, "CONFIG RESETSTAT");
  hl_redis_ok(f->redis, "SCRIPT FLUSH");
  hl_sleep_ms(1000);
  for (int i = 0; i < 5; i++) assert_holds(f, names[i], hilock_hold_token(HILOCK_HOLD(m)));
  assert_true(hl_cmdstat_calls(f->redis, "eval") >= 1);
  assert_false(hilock_hold_lost(HILOCK_HOLD(m)));

  hl_redis_ok(f->redis, "SET hilock:{w3}:lock thief PX 10000");
  t0 = hl_now_ms();
  while (!hilock_hold_lost(HILOCK_HOLD(m)) && hl_now_ms() - t0 < 3000)
    hl_sleep_ms(10);
  assert_true(hilock_hold_lost(HILOCK_HOLD(m)));
  /* At the next renewal; 2.5 s leaves room for a loaded machine. */
  assert_i64_between(hl_now_ms() - t0, 0, 2500);
  while (atomic_load(&lost_calls) == 0 && hl_now_ms() - t0 < 3000)
    hl_sleep_ms(5);
  assert_int_equal(atomic_load(&lost_calls), 1);
  /* The other keys were not renewed any more: they lapse. */
  hl_sleep_ms(700);
  assert_false(lock_exists(f, "w1"));
  assert_false(lock_exists(f, "w5"));
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(m)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(m)));
  hilock_hold_free(HILOCK_HOLD(m));
}

/* ## Waiting ------------------------------------------------------------- */

static void release_of_the_blocking_name_wakes_the_waiter(void **state) {
  fixture *f = *state;
  const char *names[] = {"k1", "k2"};
  hilock_multi_lock *m = hl_new_multi(f->client, names, 2, 10000);
  hilock_lock *l = hl_new_lock(f->client, "k2", 10000);
  hl_waiter w;

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hl_waiter_run(&w, HILOCK_HOLD(m), &hl_multi_verbs, 8000, 0);
  assert_true(hl_wait_waiters(f->redis, 1, 3000));
  hl_sleep_ms(200);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hl_waiter_join(&w);
  assert_hl_ok(w.rc, hilock_hold_errmsg(HILOCK_HOLD(m)));
  /* Woken by the release, long before the holder's 10 s TTL. */
  assert_i64_between(w.t_end - w.t_start, 200, 3000);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  hl_holds_free(HILOCK_HOLD(l), HILOCK_HOLD(m));
}

static void wait_is_bounded_by_the_blocking_holders_ttl(void **state) {
  fixture *f = *state;
  const char *names[] = {"t1", "t2"};
  hilock_multi_lock *m = hl_new_multi(f->client, names, 2, 10000);
  hilock_lock *l = hl_new_lock(f->client, "t1", 700);
  int64_t t0;

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  t0 = hl_now_ms();
  /* The holder never releases: the waiter wakes when its TTL ends. */
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(m), 5000), hilock_hold_errmsg(HILOCK_HOLD(m)));
  /* At the 700 ms TTL, not the 5 s limit; 1.8 s of room for a loaded
   * machine. */
  assert_i64_between(hl_now_ms() - t0, 500, 2500);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  /* And a deadline shorter than the TTL is kept. */
  hl_redis_ok(f->redis, "SET hilock:{t2}:lock other PX 10000");
  t0 = hl_now_ms();
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(m), 300), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(m)));
  /* At the 300 ms deadline, not the 10 s TTL; 1.7 s of room. */
  assert_i64_between(hl_now_ms() - t0, 250, 2000);
  hl_holds_free(HILOCK_HOLD(l), HILOCK_HOLD(m));
}

/* A multi-key waiter woken on a name it cannot use (another of its names is
 * busy) hands the wake-up back, so a single-lock waiter of that name is not
 * left sleeping until the holder's TTL. */
static void a_useless_wake_up_is_handed_back(void **state) {
  fixture *f = *state;
  const char *names[] = {"h1", "h2"};
  hilock_client *c2 = hl_client(f->server.url, NULL);
  hilock_multi_lock *m = hl_new_multi(f->client, names, 2, 10000);
  hilock_lock *x = hl_new_lock(f->client, "h2", 10000); /* holds h2 */
  hilock_lock *y = hl_new_lock(c2, "h1", 10000);        /* takes h1 later */
  hilock_lock *l = hl_new_lock(c2, "h2", 10000);        /* waits for h2 */
  hl_waiter wm, wl;

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(x)), hilock_hold_errmsg(HILOCK_HOLD(x)));
  /* The multi-key waiter blocks first on h2's list, then the single one. */
  hl_waiter_run(&wm, HILOCK_HOLD(m), &hl_multi_verbs, 6000, 0);
  assert_true(hl_wait_waiters(f->redis, 1, 3000));
  hl_waiter_run(&wl, HILOCK_HOLD(l), &hl_lock_verbs, 6000, 0);
  assert_true(hl_wait_waiters(f->redis, 2, 3000));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(y)), hilock_hold_errmsg(HILOCK_HOLD(y)));
  /* One wake-up; Redis serves the longest-blocked client (the multi). */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(x)), hilock_hold_errmsg(HILOCK_HOLD(x)));
  hl_waiter_join(&wl);
  assert_hl_ok(wl.rc, hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_i64_between(wl.t_end - wl.t_start, 0, 3000); /* not the 10 s TTL bound */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(y)), hilock_hold_errmsg(HILOCK_HOLD(y)));
  hl_waiter_join(&wm);
  assert_hl_ok(wm.rc, hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  hl_holds_free(HILOCK_HOLD(x), HILOCK_HOLD(y), HILOCK_HOLD(l), HILOCK_HOLD(m));
  hilock_client_free(c2);
}

/* ## Processes ------------------------------------------------------------ */

#define NNAMES 5
#define NPROCS 4
#define ROUNDS 25

static const char *const pool[NNAMES] = {"n0", "n1", "n2", "n3", "n4"};

typedef struct proc_arg {
  const char *url;
  int seed;
  int nolock; /* control group: record without locking */
  const char *tag;
} proc_arg;

/* Random non-empty subsets of the pool, listed in random order (with a
 * duplicate now and then); each critical section is recorded per name as
 * "start end pid" (ns, CLOCK_MONOTONIC) in the list hist:<name>. */
static int child_random_sets(void *arg) {
  proc_arg *p = arg;
  hilock_client *c = hl_child_client(p->url);
  unsigned seed = (unsigned)p->seed;
  const char *url_port = strrchr(p->url, ':');
  redisContext *r = redisConnect("127.0.0.1", atoi(url_port + 1));
  HL_CHILD_CHECK(r != NULL && r->err == 0);
  HL_CHILD_CHECK(c != NULL);
  for (int round = 0; round < ROUNDS; round++) {
    const char *names[NNAMES + 1];
    size_t n = 0;
    hilock_multi_lock *m = NULL;
    int64_t start, end;
    int picked[NNAMES] = {0}, any = 0;
    for (int i = 0; i < NNAMES; i++)
      if (rand_r(&seed) % 2) picked[i] = any = 1;
    if (!any) picked[rand_r(&seed) % NNAMES] = 1;
    /* Random order (reverse or forward), sometimes a duplicate. */
    for (int i = 0; i < NNAMES; i++) {
      int k = (round % 2) ? NNAMES - 1 - i : i;
      if (picked[k]) names[n++] = pool[k];
    }
    if (rand_r(&seed) % 4 == 0) {
      names[n] = names[0];
      n++;
    }
    HL_CHILD_CHECK(hilock_multi_lock_new(c, names, n, 5000, &m) == HILOCK_OK);
    HL_CHILD_CHECK(p->nolock || hilock_hold_acquire(HILOCK_HOLD(m), 15000) == HILOCK_OK);
    start = now_ns();
    hl_sleep_ms(1 + rand_r(&seed) % 3);
    end = now_ns();
    HL_CHILD_CHECK(p->nolock || hilock_hold_release(HILOCK_HOLD(m)) == HILOCK_OK);
    for (size_t i = 0; i < hilock_multi_lock_count(m); i++) {
      redisReply *rr = redisCommand(
          r, "RPUSH %s:%s %lld:%lld:%d", p->tag,
          hilock_multi_lock_name(m, i, NULL),
          (long long)start, (long long)end, (int)getpid());
      HL_CHILD_CHECK(rr != NULL && rr->type == REDIS_REPLY_INTEGER);
      freeReplyObject(rr);
    }
    hilock_hold_free(HILOCK_HOLD(m));
  }
  hilock_client_free(c);
  redisFree(r);
  return 0;
}

/* The critical sections recorded for one name. */
static size_t load_spans(fixture *f, const char *tag, const char *name,
                         hl_span *out, size_t max) {
  redisReply *r = hl_redis(f->redis, "LRANGE %s:%s 0 -1", tag, name);
  size_t n = 0;
  for (size_t i = 0; i < r->elements && n < max; i++) {
    long long start, end;
    int pid;
    if (sscanf(r->element[i]->str, "%lld:%lld:%d", &start, &end, &pid) == 3)
      out[n++] = (hl_span){pid, 0, start, end};
  }
  freeReplyObject(r);
  return n;
}

/* Critical sections of one name that overlap another. */
static int overlaps(const hl_span *s, size_t n) {
  return hl_history_check(s, n, 1, NULL);
}

/* Run NPROCS children taking random sets; each records into <tag>:<name>. */
static void run_children(fixture *f, int nolock, const char *tag) {
  proc_arg args[NPROCS];
  pid_t pids[NPROCS];
  for (int i = 0; i < NPROCS; i++) {
    args[i].url = f->server.url;
    args[i].seed = 1000 + i * 7919 + (int)getpid();
    args[i].nolock = nolock;
    args[i].tag = tag;
    pids[i] = hl_fork_run(child_random_sets, &args[i]);
    assert_true(pids[i] > 0);
  }
  /* All finish: no deadlock (each acquire may wait at most 15 s). */
  for (int i = 0; i < NPROCS; i++) {
    int st = hl_wait_child(pids[i], 30000);
    if (st != 0) {
      print_error("child %d status %d\n", (int)pids[i], st);
      fail();
    }
  }
}

static void random_overlapping_sets_never_overlap_or_deadlock(void **state) {
  fixture *f = *state;
  hl_span *spans = calloc(NPROCS * ROUNDS + 8, sizeof(*spans));
  size_t total = 0;
  assert_non_null(spans);

  run_children(f, 0, "hist");
  for (int k = 0; k < NNAMES; k++) {
    size_t n = load_spans(f, "hist", pool[k], spans, NPROCS * ROUNDS + 8);
    int bad = overlaps(spans, n);
    if (bad) {
      print_error("name %s: %d overlapping critical sections of %zu\n",
                  pool[k], bad, n);
      fail();
    }
    total += n;
    /* Real contention: several processes held this name. */
    {
      int other = 0;
      for (size_t i = 1; i < n; i++)
        if (spans[i].pid != spans[0].pid) other = 1;
      assert_true(other);
    }
    assert_false(lock_exists(f, pool[k]));
  }
  /* Every round recorded each of its names; sets overlapped a lot. */
  assert_true(total >= NPROCS * ROUNDS);
  free(spans);
}

/* Control group: the same children without the lock overlap on some name,
 * so the check above can fail. */
static void without_the_lock_the_same_check_fails(void **state) {
  fixture *f = *state;
  hl_span *spans = calloc(NPROCS * ROUNDS + 8, sizeof(*spans));
  int bad = 0;
  assert_non_null(spans);
  run_children(f, 1, "nolock");
  for (int k = 0; k < NNAMES; k++) {
    size_t n = load_spans(f, "nolock", pool[k], spans, NPROCS * ROUNDS + 8);
    bad += overlaps(spans, n);
  }
  assert_true(bad > 0);
  free(spans);
}

/* For a child to hold until it is killed (hl_fork_holder): d1, d2 and
 * d3, renewed. */
static int take_d123_renewed(hilock_client *c, void *arg, hilock_hold **h) {
  hilock_multi_lock *m = NULL;
  const char *names[] = {"d1", "d2", "d3"};
  int rc = hilock_multi_lock_new(c, names, 3, 800, &m);
  (void)arg;
  *h = HILOCK_HOLD(m);
  if (rc == HILOCK_OK)
    rc = hilock_hold_set_auto_renew(HILOCK_HOLD(m), 1, 0, NULL, NULL);
  return rc == HILOCK_OK ? hilock_hold_acquire(HILOCK_HOLD(m), 0) : rc;
}

static void killed_holder_frees_every_name_within_its_ttl(void **state) {
  fixture *f = *state;
  const char *names[] = {"d3", "d1"};
  hilock_multi_lock *m = hl_new_multi(f->client, names, 2, 5000);
  hilock_lock *l = hl_new_lock(f->client, "d2", 5000);
  pid_t pid;
  int64_t t0;

  pid = hl_fork_holder(f->server.url, take_d123_renewed, NULL);
  hl_sleep_ms(1000); /* renewed past its TTL while alive */
  assert_true(lock_exists(f, "d1") && lock_exists(f, "d2") &&
              lock_exists(f, "d3"));
  kill(pid, SIGKILL);
  t0 = hl_now_ms();
  assert_int_equal(hl_wait_child(pid, 5000), 128 + SIGKILL);
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(m), 10000), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(l), 0), hilock_hold_errmsg(HILOCK_HOLD(l)));
  /* Within the child's 800 ms TTL, not at the 10 s limit; 2 s of room for
   * a loaded machine. */
  assert_i64_between(hl_now_ms() - t0, 0, 800 + 2000);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hl_holds_free(HILOCK_HOLD(l), HILOCK_HOLD(m));
}

/* ## Limits, bad input, cluster ------------------------------------------- */

static void bad_input_gives_specific_einval(void **state) {
  fixture *f = *state;
  hilock_multi_lock *m = (hilock_multi_lock *)&m;
  const char *ok[] = {"a", "b"};
  const char *with_null[] = {"a", NULL};
  const char *bad_name[] = {"a", "}x"};
  const char *empty_name[] = {"a", ""};
  const char **many = malloc((HILOCK_MULTI_LOCK_MAX + 1) * sizeof(*many));
  size_t lens[2] = {1, 0};
  char *buf = malloc((HILOCK_MULTI_LOCK_MAX + 1) * 8);
  hilock_client *c = f->client;

  assert_hl_rc(hilock_multi_lock_new(c, NULL, 2, 1000, &m), HILOCK_EINVAL, "");
  assert_null(m);
  assert_substr(hilock_client_errmsg(c), "names is NULL");
  assert_hl_rc(hilock_multi_lock_new(c, ok, 0, 1000, &m), HILOCK_EINVAL, "");
  assert_substr(hilock_client_errmsg(c), "empty");
  assert_hl_rc(hilock_multi_lock_new(c, with_null, 2, 1000, &m), HILOCK_EINVAL,
               "");
  assert_substr(hilock_client_errmsg(c), "name 1 of 2 is NULL");
  assert_hl_rc(hilock_multi_lock_new(c, bad_name, 2, 1000, &m), HILOCK_EINVAL,
               "");
  assert_substr(hilock_client_errmsg(c), "name 1: lock name may not begin");
  assert_hl_rc(hilock_multi_lock_new(c, empty_name, 2, 1000, &m),
               HILOCK_EINVAL, "");
  assert_substr(hilock_client_errmsg(c), "name 1: lock name is empty");
  assert_hl_rc(hilock_multi_lock_new_len(c, ok, NULL, 2, 1000, &m),
               HILOCK_EINVAL, "");
  assert_substr(hilock_client_errmsg(c), "lengths are NULL");
  assert_hl_rc(hilock_multi_lock_new_len(c, ok, lens, 2, 1000, &m),
               HILOCK_EINVAL, "");
  assert_substr(hilock_client_errmsg(c), "name 1: lock name is empty");
  assert_hl_rc(hilock_multi_lock_new(c, ok, 2, 0, &m), HILOCK_EINVAL, "");
  assert_substr(hilock_client_errmsg(c), "ttl must be");
  assert_hl_rc(hilock_multi_lock_new(NULL, ok, 2, 1000, &m), HILOCK_EINVAL, "");
  assert_hl_rc(hilock_multi_lock_new(c, ok, 2, 1000, NULL), HILOCK_EINVAL, "");

  /* The limit counts the names given, and the maximum works end to end. */
  for (int i = 0; i <= HILOCK_MULTI_LOCK_MAX; i++) {
    snprintf(buf + i * 8, 8, "m%d", i);
    many[i] = buf + i * 8;
  }
  assert_hl_rc(hilock_multi_lock_new(c, many, HILOCK_MULTI_LOCK_MAX + 1, 1000,
                                    &m),
               HILOCK_EINVAL, "");
  assert_substr(hilock_client_errmsg(c), "1025 names; the limit is 1024");
  assert_hl_ok(hilock_multi_lock_new(c, many, HILOCK_MULTI_LOCK_MAX, 5000, &m),
               hilock_client_errmsg(c));
  assert_int_equal(hilock_multi_lock_count(m), HILOCK_MULTI_LOCK_MAX);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_true(lock_exists(f, "m1023"));
  assert_hl_ok(hilock_hold_renew(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_false(lock_exists(f, "m0"));
  hilock_hold_free(HILOCK_HOLD(m));

  /* NULL handles. */
  assert_int_equal(hilock_multi_lock_count(NULL), 0);
  assert_int_equal(hilock_multi_lock_fence(NULL, 0), 0);
  hilock_hold_free(NULL);
  free(many);
  free(buf);
}

/* A unit-level check of the client-side slot test (a real cluster test
 * belongs to the cluster suite). */
static void cluster_client_refuses_names_in_different_slots(void **state) {
  fixture *f = *state;
  const char *spread[] = {"acct:1", "acct:2"};
  const char *tagged[] = {"{acct}:2", "{acct}:1"};
  hilock_multi_lock *m = NULL;

  /* "hilock:{{acct}:1}:lock" hashes on "{acct", like every such name. */
  assert_int_equal(hilock__key_slot("hilock:{{acct}:1}:lock", 22),
                   hilock__key_slot("{acct", 5));
  assert_int_equal(hilock__key_slot("hilock:{{acct}:1}:lock", 22),
                   hilock__key_slot("hilock:{{acct}:2}:fence", 23));
  assert_int_not_equal(hilock__key_slot("hilock:{acct:1}:lock", 20),
                       hilock__key_slot("hilock:{acct:2}:lock", 20));

  f->client->url.cluster = 1;
  assert_hl_rc(hilock_multi_lock_new(f->client, spread, 2, 1000, &m),
               HILOCK_ECROSSSLOT, hilock_client_errmsg(f->client));
  assert_null(m);
  assert_substr(hilock_client_errmsg(f->client), "\"acct:1\"");
  assert_substr(hilock_client_errmsg(f->client), "\"acct:2\"");
  assert_substr(hilock_client_errmsg(f->client), "shared hash tag");
  assert_hl_ok(hilock_multi_lock_new(f->client, tagged, 2, 1000, &m),
               hilock_client_errmsg(f->client));
  f->client->url.cluster = 0; /* the test server is not a cluster */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  hilock_hold_free(HILOCK_HOLD(m));
  /* Not a cluster: any names. */
  assert_hl_ok(hilock_multi_lock_new(f->client, spread, 2, 1000, &m),
               hilock_client_errmsg(f->client));
  hilock_hold_free(HILOCK_HOLD(m));
}

HL_FIXTURE_MAIN("multilock",
      HL_TEST(grants_every_name_with_one_token_and_a_fence_per_name),
      HL_TEST(one_held_name_means_nothing_is_taken),
      HL_TEST(single_lock_and_multi_lock_exclude_each_other),
      HL_TEST(resent_acquire_returns_the_same_grant),
      HL_TEST(damaged_keys_fail_before_any_name_is_locked),
      HL_TEST(release_leaves_a_force_taken_key_alone),
      HL_TEST(extend_refreshes_every_key_or_none),
      HL_TEST(watchdog_renews_every_key_and_reports_one_stolen),
      HL_TEST(release_of_the_blocking_name_wakes_the_waiter),
      HL_TEST(wait_is_bounded_by_the_blocking_holders_ttl),
      HL_TEST(a_useless_wake_up_is_handed_back),
      HL_TEST(random_overlapping_sets_never_overlap_or_deadlock),
      HL_TEST(without_the_lock_the_same_check_fails),
      HL_TEST(killed_holder_frees_every_name_within_its_ttl),
      HL_TEST(bad_input_gives_specific_einval),
      HL_TEST(cluster_client_refuses_names_in_different_slots))
