/* Arguments at the edge of their type: a wait of INT64_MAX ms (or any wait
 * past HILOCK__WAIT_CAP_MS) is a wait without limit, not a deadline that
 * overflows into the past (an immediate HILOCK_BUSY). Checked on a held
 * lock that another thread releases, for a lock and for a Redlock. */
#include "test_util.h"

#include <pthread.h>
#include <stdint.h>

#include "internal.h"

#define N 3

static hl_server nodes[N];

static int group_setup(void **state) {
  (void)state;
  return hl_servers_start(nodes, N, NULL);
}

static int group_teardown(void **state) {
  (void)state;
  hl_servers_destroy(nodes, N);
  return 0;
}

/* The waits tried: past the cap, and past what a count of us can hold. */
static const int64_t waits[] = {INT64_MAX, HILOCK__WAIT_CAP_MS + 1,
                                INT64_MAX / 1000 + 1};

/* A handle's calls, so that one test body serves both kinds. */
typedef struct kind {
  void *(*make)(hilock_client *c);
  int (*try_acquire)(void *h);
  int (*acquire)(void *h, int64_t wait_ms);
  int (*release)(void *h);
} kind;

typedef struct later {
  const kind *k;
  void *h;
  int rc;
} later;

static void *release_later(void *arg) {
  later *l = arg;
  hl_sleep_ms(200);
  l->rc = l->k->release(l->h);
  return NULL;
}

/* For each wait: one handle holds, another thread releases it after a
 * while, and a second handle's wait is granted then, not BUSY at once. */
static void waits_past_any_clock(const kind *k, hilock_client *c) {
  for (size_t i = 0; i < sizeof(waits) / sizeof(*waits); i++) {
    void *holder = k->make(c), *waiter = k->make(c);
    later l = {k, holder, -1};
    pthread_t t;
    assert_hl_ok(k->try_acquire(holder), hilock_hold_errmsg(holder));
    assert_int_equal(pthread_create(&t, NULL, release_later, &l), 0);
    assert_hl_ok(k->acquire(waiter, waits[i]), hilock_hold_errmsg(waiter));
    pthread_join(t, NULL);
    assert_int_equal(l.rc, HILOCK_OK);
    assert_hl_ok(k->release(waiter), hilock_hold_errmsg(waiter));
    hl_holds_free(holder, waiter);
  }
}

static void *lock_make(hilock_client *c) { return hl_new_lock(c, "limits", 10000); }
static int lock_try(void *h) { return hilock_hold_try_acquire(h); }
static int lock_acquire(void *h, int64_t ms) { return hilock_hold_acquire(h, ms); }
static int lock_release(void *h) { return hilock_hold_release(h); }

static void *redlock_make(hilock_client *c) {
  const char *urls[N];
  hilock_redlock *rl = NULL;
  (void)c;
  for (int i = 0; i < N; i++) urls[i] = nodes[i].url;
  assert_int_equal(
      hilock_redlock_new(urls, N, "limits", 6, 10000, NULL, &rl), HILOCK_OK);
  return rl;
}
static int redlock_try(void *h) { return hilock_hold_try_acquire(h); }
static int redlock_acquire(void *h, int64_t ms) {
  return hilock_hold_acquire(h, ms);
}
static int redlock_release(void *h) { return hilock_hold_release(h); }

static void a_lock_waits_past_any_clock_for_its_release(void **state) {
  static const kind k = {lock_make, lock_try, lock_acquire, lock_release};
  hilock_client *c = hl_client(nodes[0].url, NULL);
  (void)state;
  waits_past_any_clock(&k, c);
  hilock_client_free(c);
}

static void a_redlock_waits_past_any_clock_for_its_release(void **state) {
  static const kind k = {redlock_make, redlock_try, redlock_acquire,
                         redlock_release};
  (void)state;
  waits_past_any_clock(&k, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_lock_waits_past_any_clock_for_its_release),
      cmocka_unit_test(a_redlock_waits_past_any_clock_for_its_release),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
