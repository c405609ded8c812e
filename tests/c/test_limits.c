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

typedef struct later {
  int (*release)(void *h);
  void *h;
  int rc;
} later;

static void *release_later(void *arg) {
  later *l = arg;
  hl_sleep_ms(200);
  l->rc = l->release(l->h);
  return NULL;
}

static int lock_release(void *h) { return hilock_lock_release(h); }
static int redlock_release(void *h) { return hilock_redlock_release(h); }

static void a_lock_waits_past_any_clock_for_its_release(void **state) {
  hilock_client *c = hl_client(nodes[0].url, NULL);
  (void)state;
  for (size_t i = 0; i < sizeof(waits) / sizeof(*waits); i++) {
    hilock_lock *holder = hl_new_lock(c, "limits", 10000);
    hilock_lock *waiter = hl_new_lock(c, "limits", 10000);
    later l = {lock_release, holder, -1};
    pthread_t t;
    assert_hl_ok(hilock_lock_try_acquire(holder),
                 hilock_hold_errmsg(HILOCK_HOLD(holder)));
    assert_int_equal(pthread_create(&t, NULL, release_later, &l), 0);
    /* Granted once the holder lets go, not BUSY at once. */
    assert_hl_ok(hilock_lock_acquire(waiter, waits[i]),
                 hilock_hold_errmsg(HILOCK_HOLD(waiter)));
    pthread_join(t, NULL);
    assert_int_equal(l.rc, HILOCK_OK);
    assert_hl_ok(hilock_lock_release(waiter),
                 hilock_hold_errmsg(HILOCK_HOLD(waiter)));
    hilock_hold_free(HILOCK_HOLD(holder));
    hilock_hold_free(HILOCK_HOLD(waiter));
  }
  hilock_client_free(c);
}

static hilock_redlock *new_redlock(void) {
  const char *urls[N];
  hilock_redlock *rl = NULL;
  for (int i = 0; i < N; i++) urls[i] = nodes[i].url;
  assert_int_equal(
      hilock_redlock_new(urls, N, "limits", 6, 10000, NULL, &rl), HILOCK_OK);
  return rl;
}

static void a_redlock_waits_past_any_clock_for_its_release(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(waits) / sizeof(*waits); i++) {
    hilock_redlock *holder = new_redlock(), *waiter = new_redlock();
    later l = {redlock_release, holder, -1};
    pthread_t t;
    assert_hl_ok(hilock_redlock_try_acquire(holder),
                 hilock_hold_errmsg(HILOCK_HOLD(holder)));
    assert_int_equal(pthread_create(&t, NULL, release_later, &l), 0);
    assert_hl_ok(hilock_redlock_acquire(waiter, waits[i]),
                 hilock_hold_errmsg(HILOCK_HOLD(waiter)));
    pthread_join(t, NULL);
    assert_int_equal(l.rc, HILOCK_OK);
    assert_hl_ok(hilock_redlock_release(waiter),
                 hilock_hold_errmsg(HILOCK_HOLD(waiter)));
    hilock_hold_free(HILOCK_HOLD(holder));
    hilock_hold_free(HILOCK_HOLD(waiter));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_lock_waits_past_any_clock_for_its_release),
      cmocka_unit_test(a_redlock_waits_past_any_clock_for_its_release),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
