/* fork() and the client: a child inherits the parent's handles but none of
 * its grants, sockets or renewal. Children report through exit codes (and
 * say why on stderr); the parent checks the keys with hiredis. */
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef hl_fixture fixture;

static atomic_int lost_calls;

/* Wait (bounded) for a child; 0 (and why, on stderr) if it failed or hung.
 * A test with threads of its own still running calls this rather than
 * assert_child_ok: a failed check leaves the test at once (longjmp), and
 * the fixture then frees the client those threads are still using. */
static int child_ok(pid_t pid, int64_t timeout_ms) {
  int status;
  if (pid <= 0) return 0; /* hl_fork_run said why */
  status = hl_wait_child(pid, timeout_ms);
  if (status != 0)
    print_error("child %d: %s (status %d)\n", (int)pid,
                status < 0 ? "did not finish in time" : "failed", status);
  return status == 0;
}

static void assert_child_ok(pid_t pid, int64_t timeout_ms) {
  if (!child_ok(pid, timeout_ms)) fail();
}

/* AddressSanitizer replaces malloc, and a runtime older than LLVM 18's
 * (GCC 12's libasan among them) does not hold its allocator's locks across
 * fork(): a child forked while another thread is inside malloc blocks for
 * good on the first malloc that needs the lock that thread held. The child
 * cannot avoid malloc (hiredis allocates for every command and reply), and
 * no fork handler of ours can take the sanitizer's locks. The two cases
 * that fork many times while other threads keep calling the client hit
 * that window within a few dozen runs, so they run only where fork() leaves
 * malloc usable: the plain build, or Clang 18 and later (other compilers'
 * runtimes are taken to be the older kind). */
#if defined(__SANITIZE_ADDRESS__)
#define ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN_BUILD 1
#endif
#endif
#if defined(ASAN_BUILD) && !(defined(__clang__) && __clang_major__ >= 18)
#define FORK_STOPS_MALLOC 1
#else
#define FORK_STOPS_MALLOC 0
#endif

static void skip_if_fork_stops_malloc(void) {
  if (FORK_STOPS_MALLOC) {
    print_message("skipped: this AddressSanitizer runtime leaves malloc "
                  "locked in a child forked while other threads allocate\n");
    skip();
  }
}

/* ## The parent's grant in the child -------------------------------------- */

typedef struct inherited {
  hilock_client *client;
  hilock_lock *parents;
  hilock_rlock *parents_r;
} inherited;

static int child_leaves_parents_grant_alone(void *arg) {
  inherited *in = arg;
  hilock_lock *own = NULL;
  int owned = -1;

  HL_CHILD_CHECK(hilock_hold_release(HILOCK_HOLD(in->parents)) == HILOCK_EFORKED);
  HL_CHILD_CHECK(strstr(hilock_hold_errmsg(HILOCK_HOLD(in->parents)), "forked") != NULL);
  HL_CHILD_CHECK(hilock_hold_extend(HILOCK_HOLD(in->parents), 60000, 1) == HILOCK_EFORKED);
  HL_CHILD_CHECK(hilock_hold_extend(HILOCK_HOLD(in->parents), 60000, 0) == HILOCK_EFORKED);
  HL_CHILD_CHECK(hilock_hold_renew(HILOCK_HOLD(in->parents)) == HILOCK_EFORKED);
  HL_CHILD_CHECK(hilock_hold_owned(HILOCK_HOLD(in->parents), &owned) == HILOCK_OK);
  HL_CHILD_CHECK(owned == 0);
  HL_CHILD_CHECK(hilock_hold_validity_ms(HILOCK_HOLD(in->parents)) == 0);
  HL_CHILD_CHECK(!hilock_hold_held(HILOCK_HOLD(in->parents)));
  HL_CHILD_CHECK(hilock_hold_release(HILOCK_HOLD(in->parents_r)) == HILOCK_EFORKED);
  HL_CHILD_CHECK(hilock_hold_validity_ms(HILOCK_HOLD(in->parents_r)) == 0);
  /* The child is another owner: the parent's locks are busy for it. */
  HL_CHILD_CHECK(hilock_hold_try_acquire(HILOCK_HOLD(in->parents)) == HILOCK_BUSY);
  HL_CHILD_CHECK(hilock_hold_acquire(HILOCK_HOLD(in->parents), 150) == HILOCK_BUSY);
  HL_CHILD_CHECK(hilock_hold_try_acquire(HILOCK_HOLD(in->parents_r)) == HILOCK_BUSY);

  /* A lock of its own, through the inherited client. */
  HL_CHILD_CHECK(hilock_client_ping(in->client) == HILOCK_OK);
  HL_CHILD_CHECK(hilock_lock_new(in->client, "childs-own", 10, 5000, &own) ==
              HILOCK_OK);
  HL_CHILD_CHECK(hilock_hold_try_acquire(HILOCK_HOLD(own)) == HILOCK_OK);
  HL_CHILD_CHECK(hilock_hold_owned(HILOCK_HOLD(own), &owned) == HILOCK_OK && owned == 1);
  HL_CHILD_CHECK(hilock_hold_extend(HILOCK_HOLD(own), 8000, 1) == HILOCK_OK);
  HL_CHILD_CHECK(hilock_hold_release(HILOCK_HOLD(own)) == HILOCK_OK);
  hilock_hold_free(HILOCK_HOLD(own));
  return 0;
}

static void child_cannot_touch_the_parents_grant(void **state) {
  fixture *f = *state;
  hilock_lock *p = hl_new_lock(f->client, "parents", 400);
  hilock_rlock *r = NULL;
  inherited in;
  char token[40];
  uint64_t fence;
  int owned = 0;
  int64_t n = 0;

  atomic_store(&lost_calls, 0);
  assert_hl_ok(hilock_rlock_new(f->client, "parents-r", 9, 5000, &r),
               hilock_client_errmsg(f->client));
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(p), 1, 0, hl_count_call,
                                          &lost_calls),
               hilock_hold_errmsg(HILOCK_HOLD(p)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(p), 0), hilock_hold_errmsg(HILOCK_HOLD(p)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(r), 0), hilock_hold_errmsg(HILOCK_HOLD(r)));
  snprintf(token, sizeof(token), "%s", hilock_hold_token(HILOCK_HOLD(p)));
  fence = hilock_hold_fence(HILOCK_HOLD(p));
  hl_sleep_ms(150); /* the renewal thread is running */

  in.client = f->client;
  in.parents = p;
  in.parents_r = r;
  assert_child_ok(hl_fork_run(child_leaves_parents_grant_alone, &in), 5000);

  /* The parent's grants are intact and still renewed. */
  assert_string_equal(hilock_hold_token(HILOCK_HOLD(p)), token);
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(p)), fence);
  hl_assert_holder(f->redis, HILOCK_HOLD(p));
  assert_false(hl_redis_exists(f->redis, "hilock:{childs-own}:lock", 24));
  hl_sleep_ms(500);
  hl_assert_holder(f->redis, HILOCK_HOLD(p));
  assert_i64_between(hl_redis_pttl(f->redis, "hilock:{parents}:lock", 21), 1,
                     400);
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(p), &owned), hilock_hold_errmsg(HILOCK_HOLD(p)));
  assert_true(owned);
  assert_hl_ok(hilock_rlock_hold_count(r, &n), hilock_hold_errmsg(HILOCK_HOLD(r)));
  assert_int_equal(n, 1);
  assert_int_equal(atomic_load(&lost_calls), 0);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(p)), hilock_hold_errmsg(HILOCK_HOLD(p)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(r)), hilock_hold_errmsg(HILOCK_HOLD(r)));
  assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(p)));
  hl_holds_free(HILOCK_HOLD(p), HILOCK_HOLD(r));
}

/* ## Renewal belongs to the parent ------------------------------------------- */

typedef struct renewing_child {
  hilock_client *client;
  int fd; /* write end: one byte once the child's own renewal runs */
} renewing_child;

static int child_renews_only_its_own(void *arg) {
  renewing_child *rc = arg;
  hilock_lock *own = NULL;
  int owned = 0;
  HL_CHILD_CHECK(hilock_lock_new(rc->client, "childs-renewed", 14, 300, &own) ==
              HILOCK_OK);
  HL_CHILD_CHECK(hilock_hold_set_auto_renew(HILOCK_HOLD(own), 1, 0, NULL, NULL) == HILOCK_OK);
  HL_CHILD_CHECK(hilock_hold_acquire(HILOCK_HOLD(own), 0) == HILOCK_OK);
  HL_CHILD_CHECK(write(rc->fd, "x", 1) == 1);
  hl_sleep_ms(1200); /* four TTLs: alive only through the child's renewal */
  HL_CHILD_CHECK(hilock_hold_owned(HILOCK_HOLD(own), &owned) == HILOCK_OK && owned == 1);
  HL_CHILD_CHECK(!hilock_hold_lost(HILOCK_HOLD(own)));
  HL_CHILD_CHECK(hilock_hold_release(HILOCK_HOLD(own)) == HILOCK_OK);
  hilock_hold_free(HILOCK_HOLD(own));
  return 0;
}

static void child_runs_no_renewal_of_the_parents_holds(void **state) {
  fixture *f = *state;
  hilock_lock *released = hl_new_lock(f->client, "released", 300);
  hilock_lock *lapsing = hl_new_lock(f->client, "lapsing", 300);
  renewing_child rc = {.client = f->client};
  char byte;
  pid_t pid;
  int64_t t0;

  atomic_store(&lost_calls, 0);
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(released), 1, 0, NULL, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(released)));
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(lapsing), 1, 0, hl_count_call,
                                          &lost_calls),
               hilock_hold_errmsg(HILOCK_HOLD(lapsing)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(released), 0),
               hilock_hold_errmsg(HILOCK_HOLD(released)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(lapsing), 0), hilock_hold_errmsg(HILOCK_HOLD(lapsing)));
  hl_sleep_ms(120);

  pid = hl_fork_ready(child_renews_only_its_own, &rc, &rc.fd, &byte, 1);

  /* The child now runs a renewal thread of its own. The parent lets go of
   * one hold and stops renewing the other: if the child renewed the
   * parent's holds, the second would stay alive. */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(released)), hilock_hold_errmsg(HILOCK_HOLD(released)));
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(lapsing), 0, 0, NULL, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(lapsing)));
  t0 = hl_now_ms();
  while (hl_hold_exists(f->redis, HILOCK_HOLD(lapsing))) {
    /* Room for a loaded machine: a hold the child renewed never lapses. */
    assert_i64_between(hl_now_ms() - t0, 0, 300 + 2000);
    hl_sleep_ms(10);
  }
  /* ... and both stay gone while the child lives on. */
  for (int i = 0; i < 8; i++) {
    assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(released)));
    assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(lapsing)));
    assert_true(hl_redis_exists(f->redis, "hilock:{childs-renewed}:lock", 28));
    hl_sleep_ms(100);
  }
  assert_child_ok(pid, 3000);
  assert_false(hl_redis_exists(f->redis, "hilock:{childs-renewed}:lock", 28));
  assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(released)));
  assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(lapsing)));
  hl_holds_free(HILOCK_HOLD(released), HILOCK_HOLD(lapsing));
}

/* ## One client, two processes ------------------------------------------------ */

typedef struct busy_child {
  hilock_client *client;
  int64_t run_ms;
} busy_child;

static int child_uses_the_client(void *arg) {
  busy_child *b = arg;
  hilock_lock *l = NULL;
  hilock_rlock *r = NULL;
  int64_t end = hl_now_ms() + b->run_ms;
  int rounds = 0;
  HL_CHILD_CHECK(hilock_lock_new(b->client, "child-side", 10, 5000, &l) ==
              HILOCK_OK);
  HL_CHILD_CHECK(hilock_rlock_new(b->client, "child-side-r", 12, 5000, &r) ==
              HILOCK_OK);
  while (hl_now_ms() < end) {
    int owned = 0;
    int64_t n = 0;
    HL_CHILD_CHECK(hilock_client_ping(b->client) == HILOCK_OK);
    HL_CHILD_CHECK(hilock_hold_try_acquire(HILOCK_HOLD(l)) == HILOCK_OK);
    HL_CHILD_CHECK(hilock_hold_owned(HILOCK_HOLD(l), &owned) == HILOCK_OK && owned == 1);
    HL_CHILD_CHECK(hilock_hold_release(HILOCK_HOLD(l)) == HILOCK_OK);
    HL_CHILD_CHECK(hilock_hold_acquire(HILOCK_HOLD(r), 0) == HILOCK_OK);
    HL_CHILD_CHECK(hilock_hold_acquire(HILOCK_HOLD(r), 0) == HILOCK_OK);
    HL_CHILD_CHECK(hilock_rlock_hold_count(r, &n) == HILOCK_OK && n == 2);
    HL_CHILD_CHECK(hilock_hold_release(HILOCK_HOLD(r)) == HILOCK_OK);
    HL_CHILD_CHECK(hilock_hold_release(HILOCK_HOLD(r)) == HILOCK_OK);
    rounds++;
  }
  HL_CHILD_CHECK(rounds >= 10);
  hl_holds_free(HILOCK_HOLD(l), HILOCK_HOLD(r));
  return 0;
}

typedef struct pinger {
  hilock_client *client;
  int errors;
  pthread_t thread;
} pinger;

static void *ping_a_while(void *arg) {
  pinger *p = arg;
  for (int i = 0; i < 30; i++)
    if (hilock_client_ping(p->client) != HILOCK_OK) p->errors++;
  return NULL;
}

static void parent_and_child_share_the_client_without_desync(void **state) {
  fixture *f = *state;
  hilock_lock *p = hl_new_lock(f->client, "shared", 300);
  hilock_lock *side = hl_new_lock(f->client, "parent-side", 5000);
  pinger pg[3];
  busy_child b;
  pid_t pid;
  int64_t end;
  int rounds = 0, owned = 0;

  atomic_store(&lost_calls, 0);
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(p), 1, 0, hl_count_call,
                                          &lost_calls),
               hilock_hold_errmsg(HILOCK_HOLD(p)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(p), 0), hilock_hold_errmsg(HILOCK_HOLD(p)));
  /* Fill the pool with idle connections for the child to inherit. */
  for (int i = 0; i < 3; i++) {
    pg[i].client = f->client;
    pg[i].errors = 0;
    assert_int_equal(pthread_create(&pg[i].thread, NULL, ping_a_while, &pg[i]),
                     0);
  }
  for (int i = 0; i < 3; i++) {
    pthread_join(pg[i].thread, NULL);
    assert_int_equal(pg[i].errors, 0);
  }

  b.client = f->client;
  b.run_ms = 600;
  pid = hl_fork_run(child_uses_the_client, &b);
  assert_true(pid > 0);
  /* Meanwhile the parent keeps using the same client. */
  end = hl_now_ms() + 600;
  while (hl_now_ms() < end) {
    assert_hl_ok(hilock_client_ping(f->client),
                 hilock_client_errmsg(f->client));
    assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(p), &owned), hilock_hold_errmsg(HILOCK_HOLD(p)));
    assert_true(owned);
    assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(side)), hilock_hold_errmsg(HILOCK_HOLD(side)));
    assert_hl_ok(hilock_hold_release(HILOCK_HOLD(side)), hilock_hold_errmsg(HILOCK_HOLD(side)));
    rounds++;
  }
  assert_true(rounds >= 10);
  assert_child_ok(pid, 3000);

  /* After the child is gone, every call still gets its own reply. */
  for (int i = 0; i < 20; i++) {
    assert_hl_ok(hilock_client_ping(f->client),
                 hilock_client_errmsg(f->client));
    assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(p), &owned), hilock_hold_errmsg(HILOCK_HOLD(p)));
    assert_true(owned);
  }
  hl_sleep_ms(400);
  hl_assert_holder(f->redis, HILOCK_HOLD(p));
  /* Stop renewing first: a renewal in flight would reset the TTL. */
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(p), 0, 0, NULL, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(p)));
  assert_hl_ok(hilock_hold_extend(HILOCK_HOLD(p), 5000, 1), hilock_hold_errmsg(HILOCK_HOLD(p)));
  assert_i64_between(hl_redis_pttl(f->redis, "hilock:{shared}:lock", 20),
                     4000, 5000);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(p)), hilock_hold_errmsg(HILOCK_HOLD(p)));
  assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(p)));
  assert_int_equal(atomic_load(&lost_calls), 0);
  hl_holds_free(HILOCK_HOLD(p), HILOCK_HOLD(side));
}

/* ## Fork in the middle of calls --------------------------------------------- */

typedef struct spinner {
  hilock_client *client;
  atomic_int stop;
  atomic_int rounds;
  int errors;
  pthread_t thread;
} spinner;

/* Keep the client's mutexes busy: pool checkouts, grants, renewal
 * registration and cancellation. */
static void *spin(void *arg) {
  spinner *s = arg;
  hilock_lock *l = NULL;
  if (hilock_lock_new(s->client, "spin", 4, 1000, &l) != HILOCK_OK ||
      hilock_hold_set_auto_renew(HILOCK_HOLD(l), 1, 0, NULL, NULL) != HILOCK_OK) {
    s->errors++;
    hilock_hold_free(HILOCK_HOLD(l));
    return NULL;
  }
  while (!atomic_load(&s->stop)) {
    if (hilock_client_ping(s->client) != HILOCK_OK) s->errors++;
    if (hilock_hold_try_acquire(HILOCK_HOLD(l)) != HILOCK_OK) s->errors++;
    if (hilock_hold_release(HILOCK_HOLD(l)) != HILOCK_OK) s->errors++;
    atomic_fetch_add(&s->rounds, 1);
  }
  hilock_hold_free(HILOCK_HOLD(l));
  return NULL;
}

typedef struct quick_child {
  hilock_client *client;
  int i;
} quick_child;

static int child_does_a_little(void *arg) {
  quick_child *q = arg;
  hilock_lock *l = NULL;
  char name[32];
  int n = snprintf(name, sizeof(name), "forked-%d", q->i);
  HL_CHILD_CHECK(hilock_client_ping(q->client) == HILOCK_OK);
  HL_CHILD_CHECK(hilock_lock_new(q->client, name, (size_t)n, 300, &l) ==
              HILOCK_OK);
  HL_CHILD_CHECK(hilock_hold_set_auto_renew(HILOCK_HOLD(l), 1, 0, NULL, NULL) == HILOCK_OK);
  HL_CHILD_CHECK(hilock_hold_acquire(HILOCK_HOLD(l), 1000) == HILOCK_OK);
  hl_sleep_ms(120); /* let the child's renewal thread run once */
  HL_CHILD_CHECK(hilock_hold_validity_ms(HILOCK_HOLD(l)) > 0);
  HL_CHILD_CHECK(hilock_hold_release(HILOCK_HOLD(l)) == HILOCK_OK);
  hilock_hold_free(HILOCK_HOLD(l));
  return 0;
}

#define NFORKS 12

static void fork_while_other_threads_are_inside_client_calls(void **state) {
  fixture *f = *state;
  hilock_lock *holder, *fast, *waiting;
  spinner s;
  hl_waiter b;
  int64_t took;
  int owned = 0, ok = 1;

  skip_if_fork_stops_malloc();
  holder = hl_new_lock(f->client, "held", 10000);
  fast = hl_new_lock(f->client, "fast-renewed", 300);
  atomic_store(&lost_calls, 0);
  /* A hold renewed every 100 ms keeps the renewal thread busy. */
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(fast), 1, 0, hl_count_call,
                                          &lost_calls),
               hilock_hold_errmsg(HILOCK_HOLD(fast)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(fast), 0), hilock_hold_errmsg(HILOCK_HOLD(fast)));
  /* One thread sits in a blocked acquire (its BLPOP socket is checked
   * out), another loops over client calls. */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(holder)), hilock_hold_errmsg(HILOCK_HOLD(holder)));
  waiting = hl_new_lock(f->client, "held", 10000);
  hl_waiter_run(&b, HILOCK_HOLD(waiting), &hl_lock_verbs, 15000, 0);
  assert_true(hl_wait_waiters(f->redis, 1, 3000));
  memset(&s, 0, sizeof(s));
  s.client = f->client;
  atomic_init(&s.stop, 0);
  atomic_init(&s.rounds, 0);
  assert_int_equal(pthread_create(&s.thread, NULL, spin, &s), 0);
  while (atomic_load(&s.rounds) < 5) hl_sleep_ms(1);

  for (int i = 0; i < NFORKS && ok; i++) {
    quick_child q = {f->client, i};
    /* Each child must finish on its own: no mutex left locked by a
     * thread that does not exist in it. */
    ok = child_ok(hl_fork_run(child_does_a_little, &q), 2000);
  }
  /* The threads stop before any check can fail (see child_ok): the
   * spinner, and the blocked waiter, which the release wakes. */
  atomic_store(&s.stop, 1);
  pthread_join(s.thread, NULL);
  if (!ok) {
    (void)hilock_hold_release(HILOCK_HOLD(holder));
    hl_waiter_join(&b);
    hl_holds_free(HILOCK_HOLD(waiting), HILOCK_HOLD(holder), HILOCK_HOLD(fast));
    fail();
  }
  assert_int_equal(s.errors, 0);
  assert_true(atomic_load(&s.rounds) > NFORKS);

  /* The parent's blocked waiter was not disturbed by the children closing
   * their copies of its socket: the release still wakes it. */
  assert_int_equal(hl_waiters(f->redis), 1);
  took = hl_release_and_join(&b, HILOCK_HOLD(holder), &hl_lock_verbs);
  assert_hl_ok(b.rc, hilock_hold_errmsg(HILOCK_HOLD(waiting)));
  /* Woken by the release, not the 10 s TTL: 2 s leaves room for a loaded
   * machine. */
  assert_i64_between(took, 0, 2000);
  hl_assert_holder(f->redis, HILOCK_HOLD(waiting));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(waiting)),
               hilock_hold_errmsg(HILOCK_HOLD(waiting)));
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(fast), &owned), hilock_hold_errmsg(HILOCK_HOLD(fast)));
  assert_true(owned);
  assert_int_equal(atomic_load(&lost_calls), 0);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(fast)), hilock_hold_errmsg(HILOCK_HOLD(fast)));
  hl_holds_free(HILOCK_HOLD(waiting), HILOCK_HOLD(holder), HILOCK_HOLD(fast));
}

/* ## Fork while threads share a handle ---------------------------------------- */

typedef struct rl_spinner {
  hilock_rlock *rl;
  atomic_int *stop;
  int errors;
  pthread_t thread;
} rl_spinner;

/* Each thread is an owner of the shared handle: grants, re-entries and
 * releases keep the handle's mutex busy. */
static void *spin_rlock(void *arg) {
  rl_spinner *s = arg;
  while (!atomic_load(s->stop)) {
    int rc = hilock_hold_try_acquire(HILOCK_HOLD(s->rl));
    if (rc == HILOCK_OK) {
      if (hilock_hold_try_acquire(HILOCK_HOLD(s->rl)) != HILOCK_OK) s->errors++;
      if (hilock_hold_release(HILOCK_HOLD(s->rl)) != HILOCK_OK) s->errors++;
      if (hilock_hold_release(HILOCK_HOLD(s->rl)) != HILOCK_OK) s->errors++;
    } else if (rc != HILOCK_BUSY) {
      s->errors++;
    }
  }
  return NULL;
}

static int child_uses_the_shared_rlock(void *arg) {
  hilock_rlock *rl = arg;
  int rc = hilock_hold_try_acquire(HILOCK_HOLD(rl));
  HL_CHILD_CHECK(rc == HILOCK_OK || rc == HILOCK_BUSY);
  if (rc == HILOCK_OK) HL_CHILD_CHECK(hilock_hold_release(HILOCK_HOLD(rl)) == HILOCK_OK);
  return 0;
}

#define NRFORKS 300

static void fork_while_threads_share_an_rlock_handle(void **state) {
  fixture *f = *state;
  hilock_rlock *rl = NULL;
  rl_spinner s[2];
  atomic_int stop;
  int ok = 1;

  skip_if_fork_stops_malloc();
  assert_hl_ok(hilock_rlock_new(f->client, "shared-r", 8, 5000, &rl),
               hilock_client_errmsg(f->client));
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(rl), 1, 0, NULL, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  atomic_init(&stop, 0);
  for (int i = 0; i < 2; i++) {
    s[i].rl = rl;
    s[i].stop = &stop;
    s[i].errors = 0;
    assert_int_equal(pthread_create(&s[i].thread, NULL, spin_rlock, &s[i]),
                     0);
  }
  /* A thread holding the handle's mutex at fork() time does not exist in
   * the child: the fork handlers must hold that mutex across fork(). */
  for (int i = 0; i < NRFORKS && ok; i++)
    ok = child_ok(hl_fork_run(child_uses_the_shared_rlock, rl), 3000);
  /* The spinners stop before any check can fail (see child_ok). */
  atomic_store(&stop, 1);
  for (int i = 0; i < 2; i++) pthread_join(s[i].thread, NULL);
  if (!ok) {
    hilock_hold_free(HILOCK_HOLD(rl));
    fail();
  }
  for (int i = 0; i < 2; i++) assert_int_equal(s[i].errors, 0);
  hilock_hold_free(HILOCK_HOLD(rl));
}

/* ## Fork during a loss callback ----------------------------------------------- */

typedef struct slow_lost {
  atomic_int inside, finished;
} slow_lost;

static void lost_slowly(void *arg) {
  slow_lost *s = arg;
  atomic_store(&s->inside, 1);
  hl_sleep_ms(400);
  atomic_store(&s->finished, 1);
}

static int child_drops_the_lost_handle(void *arg) {
  hilock_lock *l = arg;
  int owned = -1;
  /* The parent's renewal thread is inside this handle's callback; no such
   * thread exists here, so nothing may wait for it. */
  HL_CHILD_CHECK(hilock_hold_release(HILOCK_HOLD(l)) == HILOCK_EFORKED);
  HL_CHILD_CHECK(hilock_hold_owned(HILOCK_HOLD(l), &owned) == HILOCK_OK && owned == 0);
  HL_CHILD_CHECK(hilock_hold_set_auto_renew(HILOCK_HOLD(l), 0, 0, NULL, NULL) == HILOCK_OK);
  HL_CHILD_CHECK(hilock_hold_try_acquire(HILOCK_HOLD(l)) == HILOCK_OK); /* the key is gone */
  HL_CHILD_CHECK(hilock_hold_release(HILOCK_HOLD(l)) == HILOCK_OK);
  hilock_hold_free(HILOCK_HOLD(l));
  return 0;
}

static void fork_during_a_loss_callback(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "lost-at-fork", 300);
  slow_lost s;
  int64_t deadline;

  atomic_init(&s.inside, 0);
  atomic_init(&s.finished, 0);
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(l), 1, 0, lost_slowly, &s),
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(l), 0), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hl_redis_ok(f->redis, "DEL hilock:{lost-at-fork}:lock");
  /* The next renewal (<= 100 ms) finds it; 2 s of room for a loaded
   * machine. */
  deadline = hl_now_ms() + 100 + 2000;
  while (!atomic_load(&s.inside)) {
    assert_true(hl_now_ms() < deadline);
    hl_sleep_ms(1);
  }
  assert_child_ok(hl_fork_run(child_drops_the_lost_handle, l), 2000);
  assert_false(hl_redis_exists(f->redis, "hilock:{lost-at-fork}:lock", 26));

  /* In the parent the callback finishes, and free waits for it. */
  assert_true(hilock_hold_lost(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
  assert_true(atomic_load(&s.finished));
}

HL_FIXTURE_MAIN("fork",
      HL_TEST(child_cannot_touch_the_parents_grant),
      HL_TEST(child_runs_no_renewal_of_the_parents_holds),
      HL_TEST(parent_and_child_share_the_client_without_desync),
      HL_TEST(fork_while_other_threads_are_inside_client_calls),
      HL_TEST(fork_during_a_loss_callback),
      HL_TEST(fork_while_threads_share_an_rlock_handle))
