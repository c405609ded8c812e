/* Auto-renewal against a real server: short locks kept alive while the
 * holder sleeps, cancellation on release and free, loss detection (stolen
 * key, unreachable or paused server), the max-hold bound, many holds on one
 * renewal thread, and reentrant locks. */
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

typedef hl_fixture fixture;

/* Room for a loaded machine in a bound on when a lapse or a loss shows: two
 * cores shared with other suites (or sanitizers) can stall a thread for a
 * second or more. A defect these bounds catch (a hold renewed on) would
 * never end at all. */
#define LOADED_MS 2000

static int teardown(void **state) {
  fixture *f = *state;
  hl_redis_ok(f->redis, "CLIENT UNPAUSE"); /* after a failed pause test */
  return hl_teardown(state);
}

static long long script_calls(fixture *f) {
  return hl_cmdstat_calls(f->redis, "evalsha") +
         hl_cmdstat_calls(f->redis, "eval");
}

/* ## The loss callback ------------------------------------------------------- */

typedef struct lost_rec {
  atomic_int calls;
  atomic_llong t_last; /* hl_now_ms of the latest call */
  atomic_int on_caller; /* ran on the test's own thread */
  pthread_t caller;
  int sleep_ms; /* stay inside the callback this long */
  atomic_int inside, finished;
} lost_rec;

static void lost_rec_init(lost_rec *r) {
  atomic_init(&r->calls, 0);
  atomic_init(&r->t_last, 0);
  atomic_init(&r->on_caller, 0);
  atomic_init(&r->inside, 0);
  atomic_init(&r->finished, 0);
  r->caller = pthread_self();
  r->sleep_ms = 0;
}

static void on_lost(void *arg) {
  lost_rec *r = arg;
  atomic_store(&r->t_last, hl_now_ms());
  atomic_fetch_add(&r->calls, 1);
  if (pthread_equal(pthread_self(), r->caller)) atomic_store(&r->on_caller, 1);
  if (r->sleep_ms > 0) {
    atomic_store(&r->inside, 1);
    hl_sleep_ms(r->sleep_ms);
    atomic_store(&r->finished, 1);
  }
}

/* l renewed automatically (its losses recorded in r) and acquired. */
static void acquire_renewed(hilock_lock *l, lost_rec *r) {
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(l), 1, 0, on_lost, r),
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(l), 0), hilock_hold_errmsg(HILOCK_HOLD(l)));
}

/* Wait up to timeout_ms for more than `seen` callbacks; returns the time of
 * the latest, or fails. */
static int64_t wait_lost_after(lost_rec *r, int seen, int64_t timeout_ms) {
  int64_t deadline = hl_now_ms() + timeout_ms;
  while (atomic_load(&r->calls) <= seen) {
    if (hl_now_ms() >= deadline) {
      print_error("the loss callback did not run within %lld ms\n",
                  (long long)timeout_ms);
      fail();
    }
    hl_sleep_ms(2);
  }
  return (int64_t)atomic_load(&r->t_last);
}

static int64_t wait_lost(lost_rec *r, int64_t timeout_ms) {
  return wait_lost_after(r, 0, timeout_ms);
}

/* ## Keeping a lock alive ---------------------------------------------------- */

static void renewal_keeps_a_short_lock_alive(void **state) {
  fixture *f = *state;
  /* 1.5 s: renewed every 500 ms, so a stall of a second leaves it alive,
   * while a hold the watchdog stopped renewing is gone within one TTL. */
  hilock_lock *l = hl_new_lock(f->client, "alive", 1500);
  lost_rec rec;
  long long prev = -1;
  int refreshed = 0, owned = 0;
  int64_t t0;

  lost_rec_init(&rec);
  acquire_renewed(l, &rec);
  t0 = hl_now_ms();
  /* The holder just sleeps, looking at the key every 50 ms for 3 TTLs. */
  while (hl_now_ms() - t0 < 4500) {
    long long pttl = hl_hold_pttl(f->redis, HILOCK_HOLD(l));
    int64_t v = hilock_hold_validity_ms(HILOCK_HOLD(l));
    assert_i64_between(pttl, 1, 1500);
    assert_i64_between(v, 1, 1500);
    if (prev >= 0 && pttl > prev + 20) refreshed++;
    prev = pttl;
    hl_sleep_ms(50);
  }
  /* Renewed about every 500 ms: about nine refreshes in 4.5 s. */
  assert_true(refreshed >= 4);
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(l), &owned), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_true(owned);
  hl_assert_holder(f->redis, HILOCK_HOLD(l));
  assert_false(hilock_hold_lost(HILOCK_HOLD(l)));
  assert_int_equal(atomic_load(&rec.calls), 0);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(l)));
  assert_int_equal(atomic_load(&rec.calls), 0);
  hilock_hold_free(HILOCK_HOLD(l));
}

static void renewal_applies_to_the_current_hold_and_can_be_stopped(
    void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "toggled", 300);
  hilock_lock *simple = NULL;
  int64_t t0;

  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(l), 0), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(l), 1, 0, NULL, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  hl_sleep_ms(600);
  assert_i64_between(hl_hold_pttl(f->redis, HILOCK_HOLD(l)), 1, 300);
  assert_true(hilock_hold_held(HILOCK_HOLD(l)));

  t0 = hl_now_ms();
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(l), 0, 0, NULL, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  while (hl_hold_exists(f->redis, HILOCK_HOLD(l))) {
    assert_i64_between(hl_now_ms() - t0, 0, 300 + LOADED_MS);
    hl_sleep_ms(10);
  }
  assert_false(hilock_hold_held(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(l)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(l)));

  assert_hl_rc(hilock_hold_set_auto_renew(HILOCK_HOLD(l), 1, -1, NULL, NULL), HILOCK_EINVAL,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_hold_set_auto_renew(NULL, 1, 0, NULL, NULL),
               HILOCK_EINVAL, "");
  assert_hl_ok(hilock_lock_new_simple(f->client, "toggled", 7, &simple),
               hilock_client_errmsg(f->client));
  assert_hl_rc(hilock_hold_set_auto_renew(HILOCK_HOLD(simple), 1, 0, NULL, NULL),
               HILOCK_ENOTSUP, hilock_hold_errmsg(HILOCK_HOLD(simple)));
  hl_holds_free(HILOCK_HOLD(simple), HILOCK_HOLD(l));
}

/* ## Cancellation ------------------------------------------------------------ */

static void release_cancels_renewal(void **state) {
  fixture *f = *state;
  hilock_lock *a = hl_new_lock(f->client, "cancelled", 300);
  hilock_lock *b = hl_new_lock(f->client, "cancelled", 1000);
  lost_rec rec;
  long long p1, p2;

  lost_rec_init(&rec);
  acquire_renewed(a, &rec);
  hl_sleep_ms(250); /* renewals under way */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(a)));

  /* A new holder with no renewal: its TTL runs down undisturbed, and no
   * script reaches the server any more. */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  hl_redis_ok(f->redis, "CONFIG RESETSTAT");
  p1 = hl_hold_pttl(f->redis, HILOCK_HOLD(b));
  hl_sleep_ms(500);
  p2 = hl_hold_pttl(f->redis, HILOCK_HOLD(b));
  assert_int_equal(script_calls(f), 0);
  assert_i64_between(p1 - p2, 450, 700);
  hl_assert_holder(f->redis, HILOCK_HOLD(b));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));

  hl_redis_ok(f->redis, "CONFIG RESETSTAT");
  hl_sleep_ms(300);
  assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(a)));
  assert_int_equal(script_calls(f), 0);
  assert_int_equal(atomic_load(&rec.calls), 0);
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

static void free_with_renewal_registered_is_clean(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "freed", 300);
  lost_rec rec;
  int64_t t0;

  lost_rec_init(&rec);
  acquire_renewed(l, &rec);
  hl_sleep_ms(150);
  assert_true(hl_hold_exists(f->redis, HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l)); /* not released: renewal stops, the key lapses */
  t0 = hl_now_ms();
  hl_redis_ok(f->redis, "CONFIG RESETSTAT");
  while (hl_redis_exists(f->redis, "hilock:{freed}:lock", 19)) {
    assert_i64_between(hl_now_ms() - t0, 0, 300 + LOADED_MS);
    hl_sleep_ms(10);
  }
  hl_sleep_ms(200);
  assert_int_equal(script_calls(f), 0);
  assert_int_equal(atomic_load(&rec.calls), 0);
}

/* ## Loss ---------------------------------------------------------------------- */

static void stolen_lock_is_reported_lost_once(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "stolen", 300);
  size_t klen;
  const char *key = hilock_hold_key(HILOCK_HOLD(l), &klen);
  lost_rec rec;
  int64_t t_steal, t_lost;
  int owned = 1;

  lost_rec_init(&rec);
  acquire_renewed(l, &rec);
  hl_sleep_ms(120);
  t_steal = hl_now_ms();
  hl_redis_ok(f->redis, "DEL %b", key, klen);
  hl_redis_ok(f->redis, "SET %b thief PX 5000", key, klen);

  t_lost = wait_lost(&rec, 2000);
  /* At the next renewal, with room for a loaded machine. */
  assert_i64_between(t_lost - t_steal, 0, 1500);
  assert_false(atomic_load(&rec.on_caller)); /* the renewal thread's call */
  assert_true(hilock_hold_lost(HILOCK_HOLD(l)));
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(l)), 0);
  assert_false(hilock_hold_held(HILOCK_HOLD(l)));

  /* Nothing more: no second call, no renewal traffic. */
  hl_redis_ok(f->redis, "CONFIG RESETSTAT");
  hl_sleep_ms(300);
  assert_int_equal(atomic_load(&rec.calls), 1);
  assert_int_equal(script_calls(f), 0);

  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(l), &owned), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_false(owned);
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(l)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  hl_assert_hold_value(f->redis, HILOCK_HOLD(l), "thief");
  assert_i64_between(hl_redis_pttl(f->redis, key, klen), 4000, 5000);
  assert_int_equal(atomic_load(&rec.calls), 1);
  hilock_hold_free(HILOCK_HOLD(l));
}

static void force_release_and_new_holder_is_detected(void **state) {
  fixture *f = *state;
  hilock_client *other = hl_client(f->server.url, NULL);
  hilock_lock *a = hl_new_lock(f->client, "taken", 300);
  hilock_lock *b = hl_new_lock(other, "taken", 5000);
  lost_rec rec;
  int64_t t_steal;
  int deleted = 0, owned = 0;

  lost_rec_init(&rec);
  acquire_renewed(a, &rec);
  hl_sleep_ms(50);
  t_steal = hl_now_ms();
  assert_hl_ok(hilock_lock_force_release(b, &deleted), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_true(deleted);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));

  assert_i64_between(wait_lost(&rec, 2000) - t_steal, 0, 1500);
  assert_true(hilock_hold_lost(HILOCK_HOLD(a)));
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(a)), 0);
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(a)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  /* The new holder's key is untouched: neither deleted nor cut to 300. */
  hl_assert_holder(f->redis, HILOCK_HOLD(b));
  assert_i64_between(hl_hold_pttl(f->redis, HILOCK_HOLD(b)), 4000, 5000);
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(b), &owned), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_true(owned);
  assert_int_equal(atomic_load(&rec.calls), 1);

  /* The next grant clears the loss and renews again. */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(a), 1000), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_false(hilock_hold_lost(HILOCK_HOLD(a)));
  hl_sleep_ms(500);
  assert_i64_between(hl_hold_pttl(f->redis, HILOCK_HOLD(a)), 1, 300);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(atomic_load(&rec.calls), 1);
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
  hilock_client_free(other);
}

static hl_server spare; /* static: tracked until destroyed */

static void stopped_server_makes_the_hold_lost(void **state) {
  hl_server *s = &spare;
  hilock_options o = hl_test_options();
  hilock_client *c;
  hilock_lock *l;
  lost_rec rec;
  int64_t t_grant, t_stop, t_lost;
  (void)state;

  assert_int_equal(hl_server_start(s, NULL), 0);
  o.reconnect_ms = 10000;
  c = hl_client(s->url, &o);
  l = hl_new_lock(c, "unreachable", 300);
  lost_rec_init(&rec);
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(l), 1, 0, on_lost, &rec),
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  t_grant = hl_now_ms();
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(l), 0), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hl_sleep_ms(150); /* one renewal went through */
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(l)) > 150);
  t_stop = hl_now_ms();
  hl_server_stop(s);

  /* No renewal can succeed: the local validity runs out about one TTL
   * after the last renewal, and the loss is reported. */
  while (hilock_hold_validity_ms(HILOCK_HOLD(l)) > 0) {
    assert_i64_between(hl_now_ms() - t_stop, 0, 300 + LOADED_MS);
    hl_sleep_ms(5);
  }
  t_lost = wait_lost(&rec, 3000);
  /* When the validity ends, not after the renewal's 10 s reconnect budget;
   * LOADED_MS of room. */
  assert_i64_between(t_lost - t_stop, 150, 300 + LOADED_MS);
  assert_true(t_lost - t_grant >= 300);
  assert_true(hilock_hold_lost(HILOCK_HOLD(l)));
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(l)), 0);
  hl_sleep_ms(200);
  assert_int_equal(atomic_load(&rec.calls), 1);
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_client_free(c);
  hl_server_destroy(s);
}

static void paused_server_makes_the_hold_lost(void **state) {
  fixture *f = *state;
  hilock_options o = hl_test_options();
  hilock_client *c;
  hilock_lock *l;
  lost_rec rec;
  int64_t t_pause, t_lost, t0;

  /* The command timeout (10 s) is far longer than the hold's validity:
   * the watchdog must not wait for it to report the loss. */
  o.command_timeout_ms = 10000;
  c = hl_client(f->server.url, &o);
  l = hl_new_lock(c, "paused", 300);
  lost_rec_init(&rec);
  acquire_renewed(l, &rec);
  hl_sleep_ms(50);
  t_pause = hl_now_ms();
  hl_redis_ok(f->redis, "CLIENT PAUSE 6000 WRITE");
  t_lost = wait_lost(&rec, 5900);
  hl_redis_ok(f->redis, "CLIENT UNPAUSE");
  /* The next renewal (<= 100 ms) hangs; the loss is reported when the
   * hold's validity (< 300 ms after the last renewal) ends, not after the
   * command timeout (10 s) or the end of the pause (6 s); LOADED_MS of
   * room. */
  assert_i64_between(t_lost - t_pause, 150, 300 + LOADED_MS);
  assert_true(hilock_hold_lost(HILOCK_HOLD(l)));
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(l)), 0);

  /* Nothing renewed it: once writes resume, the key is gone. */
  t0 = hl_now_ms();
  while (hl_hold_exists(f->redis, HILOCK_HOLD(l))) {
    /* Expired during the pause; one renewed would stay. */
    assert_i64_between(hl_now_ms() - t0, 0, LOADED_MS);
    hl_sleep_ms(10);
  }
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(l)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_int_equal(atomic_load(&rec.calls), 1);
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_client_free(c);
}

/* An extension to ms (replacing the TTL), made by a waiter thread
 * (hl_waiter) in place of its acquire. */
static int extend_call(hilock_hold *h, int64_t ms) {
  return hilock_hold_extend(HILOCK_HOLD((hilock_lock *)h), ms, 1);
}

/* An extension that shortens the TTL and a renewal of the watchdog in
 * flight at once: both wait behind CLIENT PAUSE, the server runs the
 * renewal first and the extension last (600 ms), and the two replies come
 * back together. Whichever the client records last, validity must never
 * promise more than the key has left; each round, until the key lapses. */
static void validity_never_outlasts_the_key_when_extend_races_renewal(
    void **state) {
  fixture *f = *state;
  for (int round = 0; round < 3; round++) {
    hilock_client *c = hl_client(f->server.url, NULL);
    hilock_lock *l = hl_new_lock(c, "race", 3000);
    hl_waiter a = {0};
    assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(l), 1, 0, NULL, NULL),
                 hilock_hold_errmsg(HILOCK_HOLD(l)));
    assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(l), 0), hilock_hold_errmsg(HILOCK_HOLD(l)));
    /* The watchdog renews at ttl/3 = 1000 ms: pause from 850 to 1350 ms,
     * so its renewal is queued at the server first, then the extension. */
    hl_sleep_ms(850);
    hl_redis_ok(f->redis, "CLIENT PAUSE 500 WRITE");
    hl_sleep_ms(300);
    a.lock = HILOCK_HOLD(l);
    a.acquire = extend_call;
    a.wait_ms = 600;
    hl_waiter_start(&a);
    hl_waiter_join(&a);
    assert_hl_ok(a.rc, hilock_hold_errmsg(HILOCK_HOLD(l)));
    for (int64_t end = hl_now_ms() + 700; hl_now_ms() < end;) {
      /* The key's TTL first: validity, read after it, can only be less. */
      long long left = hl_hold_pttl(f->redis, HILOCK_HOLD(l));
      int64_t v = hilock_hold_validity_ms(HILOCK_HOLD(l));
      if (v > 0 && v > left + 20)
        fail_msg("round %d: validity %lld ms but the key has %lld ms left",
                 round, (long long)v, left);
      hl_sleep_ms(10);
    }
    hilock_hold_free(HILOCK_HOLD(l));
    hilock_client_free(c);
  }
}

/* ## Max hold ------------------------------------------------------------------ */

static void max_hold_bounds_renewal(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "bounded", 300);
  lost_rec rec;
  int64_t t0, t_gone, t_lost;

  lost_rec_init(&rec);
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(l), 1, 600, on_lost, &rec),
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  t0 = hl_now_ms();
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(l), 0), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hl_sleep_ms(550 - (hl_now_ms() - t0));
  assert_true(hl_hold_exists(f->redis, HILOCK_HOLD(l))); /* renewed past its first TTL */
  assert_int_equal(atomic_load(&rec.calls), 0);
  while (hl_hold_exists(f->redis, HILOCK_HOLD(l))) {
    assert_i64_between(hl_now_ms() - t0, 0, 600 + 300 + 100 + LOADED_MS);
    hl_sleep_ms(5);
  }
  t_gone = hl_now_ms() - t0;
  /* Renewed until max hold, then left to lapse one TTL later (renewed on,
   * it would never go: the loop's bound). */
  assert_true(t_gone >= 600 + 300 - 20);
  /* Reported once its validity ends, not before; LOADED_MS of room. */
  t_lost = wait_lost(&rec, 300 + LOADED_MS) - t0;
  assert_i64_between(t_lost, 600 + 300 - 50, t_gone + 300 + LOADED_MS);
  assert_true(hilock_hold_lost(HILOCK_HOLD(l)));
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(l)), 0);
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(l)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  hl_sleep_ms(150);
  assert_int_equal(atomic_load(&rec.calls), 1);
  hilock_hold_free(HILOCK_HOLD(l));
}

/* ## Many holds --------------------------------------------------------------- */

#define NHOLDS 50

static void many_holds_are_all_kept_alive(void **state) {
  fixture *f = *state;
  hilock_lock *l[NHOLDS];
  lost_rec rec;
  long long scripts;

  lost_rec_init(&rec);
  for (int i = 0; i < NHOLDS; i++) {
    char name[32];
    snprintf(name, sizeof(name), "many-%d", i);
    if (i % 2)
      assert_hl_ok(hilock_lock_new_lease(f->client, name, strlen(name), 300, &l[i]),
                   hilock_client_errmsg(f->client));
    else
      l[i] = hl_new_lock(f->client, name, 300);
    acquire_renewed(l[i], &rec);
  }
  hl_redis_ok(f->redis, "CONFIG RESETSTAT");
  hl_sleep_ms(1000);
  for (int i = 0; i < NHOLDS; i++) {
    assert_i64_between(hl_hold_pttl(f->redis, HILOCK_HOLD(l[i])), 1, 300);
    hl_assert_holder(f->redis, HILOCK_HOLD(l[i]));
    assert_true(hilock_hold_validity_ms(HILOCK_HOLD(l[i])) > 0);
    assert_false(hilock_hold_lost(HILOCK_HOLD(l[i])));
  }
  /* About ten renewal rounds (every ttl/3), each one call that renews
   * every hold due in it, all on one connection besides the pooled one and
   * ours. */
  scripts = script_calls(f);
  assert_i64_between(scripts, 5, 25);
  assert_i64_between(hl_cmdstat_calls(f->redis, "evalsha"), 5, 25);
  assert_i64_between(hl_info_field(f->redis, "clients", "connected_clients"), 2,
                     4);
  assert_int_equal(atomic_load(&rec.calls), 0);
  for (int i = 0; i < NHOLDS; i++) {
    assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l[i])), hilock_hold_errmsg(HILOCK_HOLD(l[i])));
    assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(l[i])));
    hilock_hold_free(HILOCK_HOLD(l[i]));
  }
  assert_int_equal(atomic_load(&rec.calls), 0);
}

/* ## Callback lifetime --------------------------------------------------------- */

static void free_waits_for_a_running_callback(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "slow-callback", 300);
  size_t klen;
  const char *key = hilock_hold_key(HILOCK_HOLD(l), &klen);
  lost_rec rec;
  int64_t deadline;

  lost_rec_init(&rec);
  rec.sleep_ms = 1000;
  acquire_renewed(l, &rec);
  hl_redis_ok(f->redis, "DEL %b", key, klen);
  deadline = hl_now_ms() + 300 + LOADED_MS; /* the next renewal finds it */
  while (!atomic_load(&rec.inside)) {
    assert_true(hl_now_ms() < deadline);
    hl_sleep_ms(1);
  }
  assert_false(atomic_load(&rec.finished));
  hilock_hold_free(HILOCK_HOLD(l)); /* must wait for the callback to return */
  /* The callback sleeps 1 s: a free that did not wait would return long
   * before it finished. */
  assert_true(atomic_load(&rec.finished));
  assert_int_equal(atomic_load(&rec.calls), 1);
}

/* ## Reentrant locks --------------------------------------------------------- */

static void rlock_renewal_keeps_and_loses(void **state) {
  fixture *f = *state;
  hilock_rlock *rl = NULL;
  size_t klen;
  const char *key;
  lost_rec rec;
  int64_t t0, n = 0, t_del;
  int seen;

  lost_rec_init(&rec);
  /* 1.5 s, renewed every 500 ms: a stall of a second leaves it alive. */
  assert_hl_ok(hilock_rlock_new(f->client, "renewed", 7, 1500, &rl),
               hilock_client_errmsg(f->client));
  key = hilock_hold_key(HILOCK_HOLD(rl), &klen);
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(rl), 1, 0, on_lost, &rec),
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 0), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 0), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  t0 = hl_now_ms();
  while (hl_now_ms() - t0 < 3000) {
    assert_i64_between(hl_redis_pttl(f->redis, key, klen), 1, 1500);
    hl_sleep_ms(50);
  }
  assert_hl_ok(hilock_rlock_hold_count(rl, &n), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_int_equal(n, 2);
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(rl)) > 0);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  hl_sleep_ms(2000); /* still renewed while held once, past one TTL */
  assert_i64_between(hl_redis_pttl(f->redis, key, klen), 1, 1500);
  assert_int_equal(atomic_load(&rec.calls), 0);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_false(hl_redis_exists(f->redis, key, klen));
  assert_false(hilock_hold_lost(HILOCK_HOLD(rl)));
  hl_redis_ok(f->redis, "CONFIG RESETSTAT");
  hl_sleep_ms(700); /* room for a renewal (every 500 ms) left running */
  assert_int_equal(script_calls(f), 0);
  /* A renewal in flight during the final release may still report the
   * hold lost: only count calls from here on. */
  seen = atomic_load(&rec.calls);

  /* Lost: the hash disappears under the holder. */
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 0), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_false(hilock_hold_lost(HILOCK_HOLD(rl)));
  t_del = hl_now_ms();
  hl_redis_ok(f->redis, "DEL %b", key, klen);
  /* At the next renewal (<= 500 ms), not never; LOADED_MS of room. */
  assert_i64_between(
      wait_lost_after(&rec, seen, 500 + LOADED_MS + 500) - t_del, 0,
      500 + LOADED_MS);
  assert_true(hilock_hold_lost(HILOCK_HOLD(rl)));
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(rl)), 0);
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(rl)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  hl_sleep_ms(150);
  assert_int_equal(atomic_load(&rec.calls), seen + 1);
  assert_hl_rc(hilock_hold_set_auto_renew(HILOCK_HOLD(rl), 1, -5, NULL, NULL),
               HILOCK_EINVAL, hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_rc(hilock_hold_set_auto_renew(NULL, 1, 0, NULL, NULL),
               HILOCK_EINVAL, "");
  hilock_hold_free(HILOCK_HOLD(rl));
}

#define T(f) cmocka_unit_test_setup_teardown(f, hl_setup, teardown)

/* ## Batches ------------------------------------------------------------------- */

#define NBATCH 5000

/* 5000 held locks (ttl 3 s) cost a handful of script calls per renewal
 * period (ttl/3), not one per hold: one call renews up to 1024 holds. */
static void thousands_of_holds_renew_in_few_calls(void **state) {
  fixture *f = *state;
  hilock_lock **l = calloc(NBATCH, sizeof(*l));
  long long calls, renewed;
  assert_non_null(l);
  for (int i = 0; i < NBATCH; i++) {
    char name[32];
    snprintf(name, sizeof(name), "batch-%d", i);
    l[i] = hl_new_lock(f->client, name, 3000);
    assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(l[i]), 1, 0, NULL, NULL),
                 hilock_hold_errmsg(HILOCK_HOLD(l[i])));
    assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l[i])), hilock_hold_errmsg(HILOCK_HOLD(l[i])));
  }
  hl_redis_ok(f->redis, "CONFIG RESETSTAT");
  hl_sleep_ms(3000); /* three renewal periods */
  calls = script_calls(f);
  /* Every hold was renewed (each PEXPIRE is one renewal)... */
  renewed = hl_cmdstat_calls(f->redis, "pexpire");
  assert_true(renewed >= 2 * NBATCH);
  /* ...in at most 20 calls per period. */
  print_message("%d holds: %lld renewals in %lld script calls over 3 periods\n",
                NBATCH, renewed, calls);
  assert_i64_between(calls, 1, 3 * 20);
  for (int i = 0; i < NBATCH; i++) {
    assert_true(hilock_hold_validity_ms(HILOCK_HOLD(l[i])) > 0);
    assert_false(hilock_hold_lost(HILOCK_HOLD(l[i])));
  }
  for (int i = 0; i < NBATCH; i++) hilock_hold_free(HILOCK_HOLD(l[i]));
  free(l);
}

/* One call renews holds of every kind; holds in it that another owner took
 * (or whose key now holds another type) are reported lost, the rest stay
 * held. */
static void a_batch_reports_the_holds_taken_and_keeps_the_rest(void **state) {
  fixture *f = *state;
  enum { NB = 12 };
  hilock_lock *l[NB];
  hilock_rlock *rl = NULL;
  hilock_semaphore *sem = NULL;
  lost_rec rec;
  lost_rec_init(&rec);
  for (int i = 0; i < NB; i++) {
    char name[32];
    snprintf(name, sizeof(name), "mixed-%d", i);
    l[i] = hl_new_lock(f->client, name, 600);
    assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(l[i]), 1, 0, on_lost, &rec),
                 hilock_hold_errmsg(HILOCK_HOLD(l[i])));
    assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l[i])), hilock_hold_errmsg(HILOCK_HOLD(l[i])));
  }
  assert_hl_ok(hilock_rlock_new(f->client, "mixed-r", 7, 600, &rl),
               hilock_client_errmsg(f->client));
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(rl), 1, 0, NULL, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(hilock_semaphore_new(f->client, "mixed-s", 7, 2, 600, &sem),
               hilock_client_errmsg(f->client));
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(sem), 1, 0, NULL, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(sem)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(sem)), hilock_hold_errmsg(HILOCK_HOLD(sem)));
  /* Taken by others: one by another token, one turned into a list. */
  hl_redis_ok(f->redis, "SET hilock:{mixed-3}:lock thief PX 5000");
  hl_redis_ok(f->redis, "DEL hilock:{mixed-7}:lock");
  hl_redis_ok(f->redis, "RPUSH hilock:{mixed-7}:lock x");
  hl_sleep_ms(1000);
  assert_int_equal(atomic_load(&rec.calls), 2);
  for (int i = 0; i < NB; i++) {
    int taken = i == 3 || i == 7;
    assert_int_equal(hilock_hold_lost(HILOCK_HOLD(l[i])), taken);
    if (!taken) {
      assert_true(hilock_hold_validity_ms(HILOCK_HOLD(l[i])) > 0);
      hl_assert_holder(f->redis, HILOCK_HOLD(l[i]));
    }
  }
  assert_false(hilock_hold_lost(HILOCK_HOLD(rl)));
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(rl)) > 0);
  assert_false(hilock_hold_lost(HILOCK_HOLD(sem)));
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(sem)) > 0);
  for (int i = 0; i < NB; i++) hilock_hold_free(HILOCK_HOLD(l[i]));
  hl_holds_free(HILOCK_HOLD(rl), HILOCK_HOLD(sem));
}

HL_FIXTURE_MAIN("renewal",
      T(renewal_keeps_a_short_lock_alive),
      T(renewal_applies_to_the_current_hold_and_can_be_stopped),
      T(release_cancels_renewal),
      T(free_with_renewal_registered_is_clean),
      T(stolen_lock_is_reported_lost_once),
      T(force_release_and_new_holder_is_detected),
      T(stopped_server_makes_the_hold_lost),
      T(paused_server_makes_the_hold_lost),
      T(max_hold_bounds_renewal),
      T(many_holds_are_all_kept_alive),
      T(thousands_of_holds_renew_in_few_calls),
      T(a_batch_reports_the_holds_taken_and_keeps_the_rest),
      T(free_waits_for_a_running_callback),
      T(rlock_renewal_keeps_and_loses),
      T(validity_never_outlasts_the_key_when_extend_races_renewal))
