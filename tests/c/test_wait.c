/* Waiting for a lock against a real server: wake-ups on release, expiry,
 * deletion and a killed holder; no polling; one waiter per release;
 * fractional waits; interruption and client shutdown. Waiters run in real
 * threads (and holders in forked processes); what the server saw is read
 * from INFO. */
#include "test_util.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef hl_fixture fixture;

/* Room for a loaded machine in a bound on when a wait ends: two cores
 * shared with other suites (or sanitizers) can stall a thread for a second
 * or more. Each bound stays well under what the defect it catches would
 * cost: a holder's 10 s TTL, a waiter's 5 or 8 s limit. */
#define LOADED_MS 2000

/* Wait until n threads are asleep waiting (blocked in BLPOP on the server
 * in BLPOP mode). */
static void wait_blocked(fixture *f, long long n) {
  if (!hl_wait_waiters(f->redis, n, 3000)) {
    print_error("%lld waiters, expected %lld\n", hl_waiters(f->redis), n);
    fail();
  }
}

/* Commands that took a wake-up off a list: BLPOPs, or the shared waiting's
 * LPOPs (one when a wait starts, one per ring). */
static long long wake_calls(fixture *f) {
  return hl_cmdstat_calls(f->redis, hl_wake_cmd());
}

/* The holder a releases (through v): w, waiting on b, is granted and
 * releases, woken by the release (within LOADED_MS of it). */
static void release_wakes(hl_waiter *w, hilock_hold *a, hilock_hold *b,
                          const hl_verbs *v) {
  assert_i64_between(hl_release_and_join(w, a, v), 0, LOADED_MS);
  assert_hl_ok(w->rc, hilock_hold_errmsg(b));
  assert_hl_ok(w->release_rc, hilock_hold_errmsg(b));
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* ## Wake-ups ---------------------------------------------------------------- */

#define ROUNDS 5

static void waiter_wakes_promptly_on_release(void **state) {
  fixture *f = *state;
  int64_t lat[ROUNDS];

  for (int i = 0; i < ROUNDS; i++) {
    char name[32];
    hilock_lock *a, *b;
    hl_waiter w;

    snprintf(name, sizeof(name), "prompt-%d", i);
    a = hl_new_lock(f->client, name, 10000);
    b = hl_new_lock(f->client, name, 10000);
    assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
    hl_waiter_run(&w, HILOCK_HOLD(b), &hl_lock_verbs, 8000, 0);
    wait_blocked(f, 1);
    lat[i] = hl_release_and_join(&w, HILOCK_HOLD(a), &hl_lock_verbs);
    assert_hl_ok(w.rc, hilock_hold_errmsg(HILOCK_HOLD(b)));
    hl_assert_holder(f->redis, HILOCK_HOLD(b));
    /* Far below the holder's 10 s TTL, whatever the load. */
    assert_i64_between(lat[i], 0, LOADED_MS);
    assert_hl_ok(hilock_hold_release(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
    hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
  }
  qsort(lat, ROUNDS, sizeof(lat[0]), cmp_i64);
  /* A figure, not a bound: how fast is for the benchmarks. */
  print_message("median wake-up after a release: %lld ms\n",
                (long long)lat[ROUNDS / 2]);
}

static void waiter_wakes_when_holder_key_expires(void **state) {
  fixture *f = *state;
  hilock_lock *a = hl_new_lock(f->client, "expires", 400);
  hilock_lock *b = hl_new_lock(f->client, "expires", 10000);
  int64_t t0 = hl_now_ms(), took;

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(b), 5000), hilock_hold_errmsg(HILOCK_HOLD(b)));
  took = hl_now_ms() - t0;
  /* Not before the key expires, and about when it does: no release, no
   * wake-up, so the wait was bounded by the TTL the waiter was told. */
  assert_i64_between(took, 390, 400 + LOADED_MS);
  hl_assert_holder(f->redis, HILOCK_HOLD(b));
  assert_true(hilock_hold_fence(HILOCK_HOLD(b)) > hilock_hold_fence(HILOCK_HOLD(a)));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

static void waiter_wakes_by_ttl_after_plain_del(void **state) {
  fixture *f = *state;
  hilock_lock *a = hl_new_lock(f->client, "deleted", 1000);
  hilock_lock *b = hl_new_lock(f->client, "deleted", 10000);
  size_t klen;
  const char *key = hilock_hold_key(HILOCK_HOLD(a), &klen);
  hl_waiter w;
  int64_t t0, t_del;

  t0 = hl_now_ms();
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  hl_waiter_run(&w, HILOCK_HOLD(b), &hl_lock_verbs, 5000, 0);
  wait_blocked(f, 1);
  hl_sleep_ms(200 - (hl_now_ms() - t0));
  t_del = hl_now_ms();
  assert_int_equal(hl_redis_int(f->redis, "DEL %b", key, klen), 1);
  hl_waiter_join(&w);
  assert_hl_ok(w.rc, hilock_hold_errmsg(HILOCK_HOLD(b)));
  /* Nobody pushed a wake-up: the waiter retried when the TTL it was told
   * (1000 ms from the grant) ran out, not later. */
  assert_true(w.t_end >= t_del);
  assert_i64_between(w.t_end - t0, 150, 1000 + LOADED_MS);
  hl_assert_holder(f->redis, HILOCK_HOLD(b));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

/* For a child to hold until it is killed (hl_fork_holder): the lock
 * "killed". */
static int take_killed(hilock_client *c, void *arg, hilock_hold **h) {
  hilock_lock *l = NULL;
  int rc = hilock_lock_new(c, "killed", 6, 2500, &l);
  (void)arg;
  *h = HILOCK_HOLD(l);
  return rc == HILOCK_OK ? hilock_hold_try_acquire(HILOCK_HOLD(l)) : rc;
}

static void waiter_wakes_by_ttl_when_holder_is_killed(void **state) {
  fixture *f = *state;
  hilock_lock *b = hl_new_lock(f->client, "killed", 10000);
  hl_waiter w;
  pid_t pid;
  long long pttl;
  int64_t t0;

  pid = hl_fork_holder(f->server.url, take_killed, NULL);
  t0 = hl_now_ms();
  pttl = hl_redis_pttl(f->redis, "hilock:{killed}:lock", 20);
  /* 2.5 s: still held when the parent looks, even on a loaded machine. */
  assert_i64_between(pttl, 1, 2500);
  hl_waiter_run(&w, HILOCK_HOLD(b), &hl_lock_verbs, 10000, 0);
  wait_blocked(f, 1);
  assert_int_equal(kill(pid, SIGKILL), 0);
  assert_int_equal(hl_wait_child(pid, 3000), 128 + SIGKILL);
  hl_waiter_join(&w);
  assert_hl_ok(w.rc, hilock_hold_errmsg(HILOCK_HOLD(b)));
  /* The dead holder never released: the waiter got in when its TTL ran
   * out, not sooner and not much later. */
  assert_i64_between(w.t_end - t0, pttl - 20, pttl + LOADED_MS);
  hl_assert_holder(f->redis, HILOCK_HOLD(b));
  hilock_hold_free(HILOCK_HOLD(b));
}

/* ## No polling -------------------------------------------------------------- */

static void waiting_does_not_poll_the_server(void **state) {
  fixture *f = *state;
  hilock_lock *a = hl_new_lock(f->client, "quiet", 10000);
  hilock_lock *b = hl_new_lock(f->client, "quiet", 10000);
  long long scripts, blpops;
  hl_waiter w;

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  hl_redis_ok(f->redis, "CONFIG RESETSTAT");
  hl_waiter_run(&w, HILOCK_HOLD(b), &hl_lock_verbs, 2000, 0);
  wait_blocked(f, 1);
  hl_sleep_ms(1500 - (hl_now_ms() - w.t_start));

  /* 1.5 s into the wait: one attempt and one BLPOP, still blocked. A
   * poller would show many of each. */
  scripts = hl_cmdstat_calls(f->redis, "evalsha") +
            hl_cmdstat_calls(f->redis, "eval");
  blpops = wake_calls(f);
  assert_i64_between(scripts, 1, 2);
  assert_i64_between(blpops, 0, 2);
  assert_int_equal(hl_waiters(f->redis), 1);
  assert_int_equal(hl_waiter_done_at(&w), 0);

  hl_waiter_join(&w);
  assert_hl_rc(w.rc, HILOCK_BUSY, hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_i64_between(w.t_end - w.t_start, 1990, 2000 + LOADED_MS);
  assert_i64_between(hl_cmdstat_calls(f->redis, "evalsha"), 2, 3);
  assert_i64_between(wake_calls(f), 1, 2);
  hl_assert_holder(f->redis, HILOCK_HOLD(a));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

/* ## One release, one waiter ----------------------------------------------- */

#define NWAITERS 4

typedef struct relay {
  hilock_lock *lock;
  atomic_int *granted;
  atomic_int *go;
  int rc, release_rc;
  int64_t t_granted;
  pthread_t thread;
} relay;

/* Acquire; once granted, hold until told to go, then release. */
static void *relay_main(void *arg) {
  relay *r = arg;
  int64_t deadline;
  r->release_rc = -100;
  r->rc = hilock_hold_acquire(HILOCK_HOLD(r->lock), 8000);
  if (r->rc != HILOCK_OK) return NULL;
  r->t_granted = hl_now_ms();
  atomic_fetch_add(r->granted, 1);
  deadline = hl_now_ms() + 8000;
  while (!atomic_load(r->go) && hl_now_ms() < deadline) hl_sleep_ms(1);
  r->release_rc = hilock_hold_release(HILOCK_HOLD(r->lock));
  return NULL;
}

static void one_release_wakes_one_waiter(void **state) {
  fixture *f = *state;
  hilock_client *own[2];
  hilock_lock *holder = hl_new_lock(f->client, "relay", 10000);
  relay r[NWAITERS];
  atomic_int granted, go;
  long long scripts;
  int64_t t_go;

  atomic_init(&granted, 0);
  atomic_init(&go, 0);
  own[0] = hl_client(f->server.url, NULL);
  own[1] = hl_client(f->server.url, NULL);
  hl_redis_ok(f->redis, "SET hilock:{relay}:fence %lld", HL_FENCE_AHEAD);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(holder)), hilock_hold_errmsg(HILOCK_HOLD(holder)));
  for (int i = 0; i < NWAITERS; i++) {
    /* Two waiters share the fixture's client, two have clients of their
     * own. */
    memset(&r[i], 0, sizeof(r[i]));
    r[i].lock = hl_new_lock(i < 2 ? f->client : own[i - 2], "relay", 10000);
    r[i].granted = &granted;
    r[i].go = &go;
    assert_int_equal(pthread_create(&r[i].thread, NULL, relay_main, &r[i]),
                     0);
  }
  wait_blocked(f, NWAITERS);

  hl_redis_ok(f->redis, "CONFIG RESETSTAT");
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(holder)), hilock_hold_errmsg(HILOCK_HOLD(holder)));
  hl_sleep_ms(300);
  /* One wake-up, one grant (one SET). BLPOP: one waiter ran the acquire
   * script, the other three never woke. Shared: each of the 3 clients rang
   * one waiter, whose attempt pops the wake-up first (one got it; the
   * others went no further; one that ran before the grant, while the lock
   * was still free, looks again 1 ms later: one more attempt and one more
   * look at the list each, at most). */
  assert_int_equal(atomic_load(&granted), 1);
  assert_int_equal(hl_waiters(f->redis),
                   NWAITERS - 1);
  /* A grant reads its fence counter once (INCRBY by 0) and sets it and
   * the lock: one INCRBY, two SETs. */
  assert_int_equal(hl_cmdstat_calls(f->redis, "incrby"), 1);
  assert_int_equal(hl_cmdstat_calls(f->redis, "set"), 2);
  scripts = hl_cmdstat_calls(f->redis, "evalsha") +
            hl_cmdstat_calls(f->redis, "eval");
  assert_i64_between(scripts - 1 /* the release */, 1,
                     hl_blpop_mode() ? 2 : 3 + 2);
  /* No waiter went back to sleep (Redis counts a BLPOP when it blocks or
   * when it is served, depending on the version). */
  assert_i64_between(wake_calls(f), 0, hl_blpop_mode() ? 1 : 3 + 2);

  /* Each release hands over to the next waiter, promptly. */
  t_go = hl_now_ms();
  atomic_store(&go, 1);
  for (int i = 0; i < NWAITERS; i++) pthread_join(r[i].thread, NULL);
  /* A lost wake-up would leave its waiter to the 8 s limit; 2 s leaves
   * room for a loaded machine. */
  assert_i64_between(hl_now_ms() - t_go, 0, 2000);
  for (int i = 0; i < NWAITERS; i++) {
    assert_hl_ok(r[i].rc, hilock_hold_errmsg(HILOCK_HOLD(r[i].lock)));
    assert_hl_ok(r[i].release_rc, hilock_hold_errmsg(HILOCK_HOLD(r[i].lock)));
    hilock_hold_free(HILOCK_HOLD(r[i].lock));
  }
  assert_int_equal(atomic_load(&granted), NWAITERS);
  assert_false(hl_redis_exists(f->redis, "hilock:{relay}:lock", 19));
  assert_int_equal(hl_redis_int(f->redis, "INCRBY hilock:{relay}:fence 0"),
                   HL_FENCE_AHEAD + 1 + NWAITERS);
  hilock_hold_free(HILOCK_HOLD(holder));
  hilock_client_free(own[0]);
  hilock_client_free(own[1]);
}

/* ## Deadlines ---------------------------------------------------------------- */

/* How long an acquire of the held b for wait_ms took. One that ends past
 * hi is run again, up to three times (a stall of a loaded machine); a wait
 * rounded up to the next whole second misses every time. */
static int64_t busy_wait_took(hilock_lock *b, int64_t wait_ms, int64_t hi) {
  int64_t took = 0;
  for (int i = 0; i < 3; i++) {
    int64_t t0 = hl_now_ms();
    assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(b), wait_ms), HILOCK_BUSY,
                 hilock_hold_errmsg(HILOCK_HOLD(b)));
    took = hl_now_ms() - t0;
    if (took <= hi) break;
  }
  return took;
}

static void fractional_waits_are_honoured(void **state) {
  fixture *f = *state;
  hilock_lock *a = hl_new_lock(f->client, "fraction", 10000);
  hilock_lock *b = hl_new_lock(f->client, "fraction", 10000);

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  /* A wait rounded to whole seconds would end at 0 (or never), 1 or 2 s:
   * each lower bound is the wait itself, each upper bound stays clear of
   * the next whole second. */
  assert_i64_between(busy_wait_took(b, 150, 800), 149, 800);
  assert_i64_between(busy_wait_took(b, 1250, 1800), 1249, 1800);
  assert_i64_between(busy_wait_took(b, 1, 800), 0, 800);
  assert_false(hilock_hold_held(HILOCK_HOLD(b)));
  hl_assert_holder(f->redis, HILOCK_HOLD(a));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

/* ## Interruption and shutdown ---------------------------------------------- */

typedef struct hook_state {
  atomic_int stop;
  atomic_int calls;
} hook_state;

static int interrupt_hook(void *arg) {
  hook_state *h = arg;
  atomic_fetch_add(&h->calls, 1);
  return atomic_load(&h->stop);
}

static void interrupt_hook_ends_wait_with_eintr(void **state) {
  fixture *f = *state;
  hilock_options o = hl_test_options();
  hook_state hs;
  hilock_client *c;
  hilock_lock *a = hl_new_lock(f->client, "interrupted", 10000), *b;
  hl_waiter w;
  int64_t t_set;

  atomic_init(&hs.stop, 0);
  atomic_init(&hs.calls, 0);
  o.interrupt = interrupt_hook;
  o.interrupt_arg = &hs;
  c = hl_client(f->server.url, &o);
  b = hl_new_lock(c, "interrupted", 10000);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));

  hl_waiter_run(&w, HILOCK_HOLD(b), &hl_lock_verbs, 8000, 0);
  wait_blocked(f, 1);
  hl_sleep_ms(250);
  assert_int_equal(hl_waiter_done_at(&w), 0);
  assert_true(atomic_load(&hs.calls) >= 1); /* polled while waiting */
  t_set = hl_now_ms();
  atomic_store(&hs.stop, 1);
  hl_waiter_join(&w);
  assert_hl_rc(w.rc, HILOCK_EINTR, hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(b)), "interrupt");
  assert_i64_between(w.t_end - t_set, 0, LOADED_MS);
  assert_false(hilock_hold_held(HILOCK_HOLD(b)));
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(b)), 0);
  hl_assert_holder(f->redis, HILOCK_HOLD(a));

  /* The abandoned BLPOP is gone from the server, so it cannot swallow the
   * next wake-up: the release's element stays for the next waiter. */
  wait_blocked(f, 0);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(hl_redis_int(f->redis, "LLEN hilock:{interrupted}:wake"),
                   1);

  /* Cleared, the hook lets the handle wait and win again. */
  atomic_store(&hs.stop, 0);
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(b), 1000), hilock_hold_errmsg(HILOCK_HOLD(b)));
  hl_assert_holder(f->redis, HILOCK_HOLD(b));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
  hilock_client_free(c);
}

static void client_free_ends_blocked_wait_with_eclosed(void **state) {
  fixture *f = *state;
  hilock_client *c = hl_client(f->server.url, NULL);
  hilock_lock *a = hl_new_lock(f->client, "closing", 10000);
  hilock_lock *b = hl_new_lock(c, "closing", 10000);
  hl_waiter w;
  int64_t t_free;

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  hl_waiter_run(&w, HILOCK_HOLD(b), &hl_lock_verbs, 8000, 0);
  wait_blocked(f, 1);
  t_free = hl_now_ms();
  hilock_client_free(c); /* from this thread, while b waits in another */
  hl_waiter_join(&w);
  assert_hl_rc(w.rc, HILOCK_ECLOSED, hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_i64_between(w.t_end - t_free, 0, LOADED_MS);
  assert_false(hilock_hold_held(HILOCK_HOLD(b)));
  wait_blocked(f, 0);
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(b)), HILOCK_ECLOSED,
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  hilock_hold_free(HILOCK_HOLD(b)); /* the client's last reference */
  hl_assert_holder(f->redis, HILOCK_HOLD(a));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  hilock_hold_free(HILOCK_HOLD(a));
}

/* ## Other families ----------------------------------------------------------- */

static void simple_lock_waiter_wakes_on_release(void **state) {
  fixture *f = *state;
  hilock_lock *a = hl_new_simple(f->client, "simple");
  hilock_lock *b = hl_new_simple(f->client, "simple");
  hl_waiter w;

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  hl_waiter_run(&w, HILOCK_HOLD(b), &hl_lock_verbs, 8000, 1);
  wait_blocked(f, 1);
  /* The holder has no TTL to bound the wait: only the wake-up helps. */
  release_wakes(&w, HILOCK_HOLD(a), HILOCK_HOLD(b), &hl_lock_verbs);
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

static void rlock_waiter_wakes_on_final_release(void **state) {
  fixture *f = *state;
  hilock_rlock *a = hl_new_rlock(f->client, "reentrant", 10000);
  hilock_rlock *b = hl_new_rlock(f->client, "reentrant", 10000);
  hl_waiter w;

  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(a), 0), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(a), 0), hilock_hold_errmsg(HILOCK_HOLD(a)));
  hl_waiter_run(&w, HILOCK_HOLD(b), &hl_rlock_verbs, 8000, 1);
  wait_blocked(f, 1);

  /* Leaving once of twice frees nothing and wakes nobody. */
  hl_redis_ok(f->redis, "CONFIG RESETSTAT");
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  hl_sleep_ms(200);
  assert_int_equal(hl_waiter_done_at(&w), 0);
  assert_int_equal(wake_calls(f), 0);
  assert_int_equal(hl_waiters(f->redis), 1);

  release_wakes(&w, HILOCK_HOLD(a), HILOCK_HOLD(b), &hl_rlock_verbs);
  assert_false(hl_redis_exists(f->redis, "hilock:{reentrant}:rlock", 24));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

/* ## Direct waits ------------------------------------------------------------ */

/* Until the server shows b clients blocked (in BLPOP) and the shared
 * waiting holds s threads. */
static void wait_split(fixture *f, long long b, long long s) {
  int64_t end = hl_now_ms() + 3000;
  long long nb, ns;
  for (;;) {
    nb = hl_info_field(f->redis, "clients", "blocked_clients");
    ns = hl_waiters(f->redis) - nb; /* in the shared waiting */
    if ((nb == b && ns == s) || hl_now_ms() > end) break;
    hl_sleep_ms(5);
  }
  if (nb != b || ns != s) {
    print_error("%lld blocked and %lld in the shared waiting, expected "
                "%lld and %lld\n", nb, ns, b, s);
    fail();
  }
}

/* a holds (taken here), b waits (seen as blocked BLPOPs and threads in the
 * shared waiting), a releases: b is granted promptly, and releases. */
static void handed_over(fixture *f, hilock_lock *a, hilock_lock *b,
                        long long blocked, long long shared) {
  hl_waiter w;
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  hl_waiter_run(&w, HILOCK_HOLD(b), &hl_lock_verbs, 8000, 1);
  wait_split(f, blocked, shared);
  release_wakes(&w, HILOCK_HOLD(a), HILOCK_HOLD(b), &hl_lock_verbs);
}

/* A client's first waiter on a lock blocks in BLPOP on a connection of its
 * own; the next joins the shared waiting. The release that wakes the first
 * rings the second too, whose attempt finds no wake-up: it comes back to
 * the free place, in BLPOP, and is granted next. */
static void a_lone_waiter_waits_direct_the_next_shares(void **state) {
  fixture *f = *state;
  hilock_lock *a, *b, *c;
  hl_waiter wb, wc;

  if (hl_blpop_mode() || hl_hub_mode()) skip(); /* no direct waits */
  a = hl_new_lock(f->client, "direct", 10000);
  b = hl_new_lock(f->client, "direct", 10000);
  c = hl_new_lock(f->client, "direct", 10000);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  hl_waiter_run(&wb, HILOCK_HOLD(b), &hl_lock_verbs, 8000, 0);
  wait_split(f, 1, 0);
  hl_waiter_run(&wc, HILOCK_HOLD(c), &hl_lock_verbs, 8000, 0);
  wait_split(f, 1, 1);
  assert_i64_between(hl_release_and_join(&wb, HILOCK_HOLD(a), &hl_lock_verbs),
                     0, LOADED_MS);
  assert_hl_ok(wb.rc, hilock_hold_errmsg(HILOCK_HOLD(b)));
  /* c came back to the free place: BLPOP, not the shared waiting. */
  wait_split(f, 1, 0);
  assert_int_equal(hl_waiter_done_at(&wc), 0);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  hl_waiter_join(&wc);
  assert_hl_ok(wc.rc, hilock_hold_errmsg(HILOCK_HOLD(c)));
  hl_assert_holder(f->redis, HILOCK_HOLD(c));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b), HILOCK_HOLD(c));
}

/* A user the server refuses BLPOP: the wait goes on in the shared waiting
 * (a release still wakes it), and the client's later waits go there at
 * once. */
static void without_blpop_rights_waits_share_the_subscriber(void **state) {
  fixture *f = *state;
  char url[128];
  hilock_options o = hl_test_options();
  hilock_client *nb;
  hilock_lock *a, *b;

  if (hl_blpop_mode() || hl_hub_mode()) skip(); /* no direct waits */
  a = hl_new_lock(f->client, "refused", 10000);
  hl_redis_ok(f->redis, "ACL SETUSER noblpop on >pw ~* &* +@all -blpop");
  snprintf(url, sizeof(url), "redis://noblpop:pw@127.0.0.1:%d", f->server.port);
  assert_hl_ok(hilock_client_new(url, &o, &nb), "client");
  b = hl_new_lock(nb, "refused", 10000);
  for (int round = 0; round < 2; round++) handed_over(f, a, b, 0, 1);
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
  hilock_client_free(nb);
  hl_redis_ok(f->redis, "ACL DELUSER noblpop");
}

/* A key prefix that starts like Redisson's names ("redisson_") changes
 * nothing: whether a wake key is Redisson's channel is the lock type's to
 * say, not the name's. A lone waiter waits direct, and is woken. */
static void a_prefix_like_redissons_is_still_a_wake_list(void **state) {
  fixture *f = *state;
  hilock_options o = hl_test_options();
  hilock_client *rc;
  hilock_lock *a, *b;

  if (hl_blpop_mode() || hl_hub_mode()) skip(); /* no direct waits */
  o.key_prefix = "redisson_t:";
  assert_hl_ok(hilock_client_new(f->server.url, &o, &rc), "client");
  a = hl_new_lock(rc, "named", 10000);
  b = hl_new_lock(rc, "named", 10000);
  handed_over(f, a, b, 1, 0);
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
  hilock_client_free(rc);
}

HL_FIXTURE_MAIN("wait",
      HL_TEST(waiter_wakes_promptly_on_release),
      HL_TEST(waiter_wakes_when_holder_key_expires),
      HL_TEST(waiter_wakes_by_ttl_after_plain_del),
      HL_TEST(waiter_wakes_by_ttl_when_holder_is_killed),
      HL_TEST(waiting_does_not_poll_the_server),
      HL_TEST(one_release_wakes_one_waiter),
      HL_TEST(fractional_waits_are_honoured),
      HL_TEST(interrupt_hook_ends_wait_with_eintr),
      HL_TEST(client_free_ends_blocked_wait_with_eclosed),
      HL_TEST(simple_lock_waiter_wakes_on_release),
      HL_TEST(rlock_waiter_wakes_on_final_release),
      HL_TEST(a_lone_waiter_waits_direct_the_next_shares),
      HL_TEST(without_blpop_rights_waits_share_the_subscriber),
      HL_TEST(a_prefix_like_redissons_is_still_a_wake_list))
