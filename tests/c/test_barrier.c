/* Barriers and double barriers on the C API (hilock/barrier.h): arrival
 * indexes generation after generation, a party whose lease ends (its
 * renewal off, as a dead party's) breaking the others' wait, a wait that
 * times out, abort, reset, delete, the double barrier's enter and leave,
 * and the arguments refused. Processes killed and stopped while others
 * wait are in tests/python/test_barrier.py. */
#include "test_util.h"

#include <pthread.h>
#include <stdlib.h>

typedef hl_fixture fixture;

#define BKEY(n) "hilock:{" n "}:barrier"
#define ZKEY(n) "hilock:{" n "}:arrived"

/* Parties waiting in the barrier's current generation. */
static int64_t waiting(hilock_barrier *b) {
  int broken = -1;
  int64_t n = -1;
  assert_hl_ok(hilock_barrier_state(b, &broken, &n),
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  return n;
}

static int broken(hilock_barrier *b) {
  int br = -1;
  assert_hl_ok(hilock_barrier_state(b, &br, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  return br;
}

typedef struct party {
  hilock_barrier *b;
  int64_t wait_ms;
  int rounds;
  int rc;
  int64_t index[8];
  char msg[256];
} party;

static void *party_run(void *arg) {
  party *p = arg;
  for (int i = 0; i < p->rounds; i++) {
    p->rc = hilock_barrier_wait(p->b, p->wait_ms, &p->index[i]);
    if (p->rc != HILOCK_OK) break;
  }
  snprintf(p->msg, sizeof(p->msg), "%s", hilock_hold_errmsg(HILOCK_HOLD(p->b)));
  return NULL;
}

/* Start a party's thread and wait until it is counted as waiting. */
static void start_waiter(pthread_t *t, party *p, hilock_barrier *probe,
                         int64_t n_before) {
  assert_int_equal(pthread_create(t, NULL, party_run, p), 0);
  for (int i = 0; i < 1000 && waiting(probe) <= n_before; i++) hl_sleep_ms(5);
  assert_true(waiting(probe) > n_before);
}

static void three_parties_get_every_index_each_generation(void **state) {
  fixture *f = *state;
  party p[3];
  pthread_t t[3];
  int seen[4][3] = {{0}};
  for (int i = 0; i < 3; i++) {
    memset(&p[i], 0, sizeof(p[i]));
    p[i].b = hl_new_barrier(f->client, "g", 3, 5000);
    p[i].wait_ms = 20000;
    p[i].rounds = 4;
    assert_int_equal(pthread_create(&t[i], NULL, party_run, &p[i]), 0);
  }
  for (int i = 0; i < 3; i++) {
    pthread_join(t[i], NULL);
    assert_hl_ok(p[i].rc, p[i].msg);
    for (int r = 0; r < 4; r++) {
      assert_in_range(p[i].index[r], 0, 2);
      seen[r][p[i].index[r]]++;
    }
  }
  /* Every generation handed out 0, 1 and 2 once each. */
  for (int r = 0; r < 4; r++)
    for (int k = 0; k < 3; k++) assert_int_equal(seen[r][k], 1);
  assert_int_equal(broken(p[0].b), 0);
  assert_int_equal(waiting(p[0].b), 0);
  for (int i = 0; i < 3; i++) hilock_hold_free(HILOCK_HOLD(p[i].b));
}

static void one_party_passes_at_once(void **state) {
  fixture *f = *state;
  hilock_barrier *b = hl_new_barrier(f->client, "one", 1, 5000);
  int64_t index = -5;
  assert_hl_ok(hilock_barrier_wait(b, 0, &index),
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_int_equal(index, 0);
  assert_hl_ok(hilock_barrier_wait(b, HILOCK_WAIT_FOREVER, &index),
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_int_equal(index, 0);
  hilock_hold_free(HILOCK_HOLD(b));
}

/* A party whose lease is not renewed (as one that died while waiting)
 * breaks the wait of the others within about its TTL; they neither hang
 * nor pass. */
static void a_lapsed_party_breaks_the_others(void **state) {
  fixture *f = *state;
  hilock_barrier *probe = hl_new_barrier(f->client, "dead", 3, 5000);
  party dead = {hl_new_barrier(f->client, "dead", 3, 300), 60000, 1, -100,
                {0}, ""};
  party live = {hl_new_barrier(f->client, "dead", 3, 5000), 60000, 1, -100,
                {0}, ""};
  pthread_t td, tl;
  int64_t index;
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(dead.b), 0, 0, NULL,
                                          NULL),
               hilock_hold_errmsg(HILOCK_HOLD(dead.b)));
  start_waiter(&tl, &live, probe, 0);
  start_waiter(&td, &dead, probe, 1);
  pthread_join(tl, NULL);
  pthread_join(td, NULL);
  assert_int_equal(live.rc, HILOCK_EBROKEN);
  assert_substr(live.msg, "lease ran out");
  assert_int_equal(dead.rc, HILOCK_EBROKEN);
  assert_int_equal(broken(probe), 1);
  /* Broken until reset: an arrival ends at once. */
  assert_int_equal(hilock_barrier_wait(probe, 60000, &index), HILOCK_EBROKEN);
  assert_hl_ok(hilock_barrier_reset(probe), hilock_hold_errmsg(HILOCK_HOLD(probe)));
  assert_int_equal(broken(probe), 0);
  hl_holds_free(HILOCK_HOLD(probe), HILOCK_HOLD(dead.b), HILOCK_HOLD(live.b));
}

static void a_timed_out_wait_breaks_the_barrier(void **state) {
  fixture *f = *state;
  hilock_barrier *probe = hl_new_barrier(f->client, "to", 3, 5000);
  hilock_barrier *b = hl_new_barrier(f->client, "to", 3, 5000);
  party other = {hl_new_barrier(f->client, "to", 3, 5000), 60000, 1, -100,
                 {0}, ""};
  pthread_t t;
  int64_t index = 7;
  start_waiter(&t, &other, probe, 0);
  assert_int_equal(hilock_barrier_wait(b, 100, &index), HILOCK_EBROKEN);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(b)), "timed out");
  assert_int_equal(index, -1);
  pthread_join(t, NULL);
  assert_int_equal(other.rc, HILOCK_EBROKEN);
  assert_substr(other.msg, "a wait timed out");
  assert_int_equal(broken(probe), 1);
  /* A reset makes it usable again. */
  assert_hl_ok(hilock_barrier_reset(probe), hilock_hold_errmsg(HILOCK_HOLD(probe)));
  assert_int_equal(broken(probe), 0);
  hl_holds_free(HILOCK_HOLD(probe), HILOCK_HOLD(b), HILOCK_HOLD(other.b));
}

static void reset_abort_and_delete_end_the_waiters_broken(void **state) {
  fixture *f = *state;
  hilock_barrier *probe = hl_new_barrier(f->client, "r", 2, 5000);
  party p = {hl_new_barrier(f->client, "r", 2, 5000), 60000, 1, -100, {0}, ""};
  pthread_t t;
  int64_t index;
  int deleted = 0;
  /* A reset before anyone arrived: nothing to do. */
  assert_hl_ok(hilock_barrier_reset(probe), hilock_hold_errmsg(HILOCK_HOLD(probe)));
  start_waiter(&t, &p, probe, 0);
  assert_hl_ok(hilock_barrier_reset(probe), hilock_hold_errmsg(HILOCK_HOLD(probe)));
  pthread_join(t, NULL);
  assert_int_equal(p.rc, HILOCK_EBROKEN);
  assert_substr(p.msg, "reset");
  /* The next generation works. */
  assert_int_equal(pthread_create(&t, NULL, party_run, &p), 0);
  assert_hl_ok(hilock_barrier_wait(probe, 20000, &index),
               hilock_hold_errmsg(HILOCK_HOLD(probe)));
  pthread_join(t, NULL);
  assert_hl_ok(p.rc, p.msg);
  assert_int_equal(index + p.index[0], 1);
  /* Abort. */
  start_waiter(&t, &p, probe, 0);
  assert_hl_ok(hilock_barrier_abort(probe), hilock_hold_errmsg(HILOCK_HOLD(probe)));
  pthread_join(t, NULL);
  assert_int_equal(p.rc, HILOCK_EBROKEN);
  assert_substr(p.msg, "aborted");
  assert_int_equal(broken(probe), 1);
  assert_hl_ok(hilock_barrier_reset(probe), hilock_hold_errmsg(HILOCK_HOLD(probe)));
  /* Delete. */
  start_waiter(&t, &p, probe, 0);
  assert_hl_ok(hilock_barrier_delete(probe, &deleted),
               hilock_hold_errmsg(HILOCK_HOLD(probe)));
  assert_int_equal(deleted, 1);
  pthread_join(t, NULL);
  assert_int_equal(p.rc, HILOCK_EBROKEN);
  assert_substr(p.msg, "deleted");
  assert_false(hl_redis_exists(f->redis, BKEY("r"), strlen(BKEY("r"))));
  hl_holds_free(HILOCK_HOLD(probe), HILOCK_HOLD(p.b));
}

static void another_party_count_is_refused(void **state) {
  fixture *f = *state;
  hilock_barrier *a = hl_new_barrier(f->client, "pc", 2, 5000);
  hilock_barrier *b = hl_new_barrier(f->client, "pc", 3, 5000);
  int64_t index;
  assert_int_equal(hilock_barrier_wait(a, 0, &index), HILOCK_EBROKEN);
  assert_hl_ok(hilock_barrier_reset(a), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(hilock_barrier_wait(b, 0, &index), HILOCK_EINVAL);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(b)),
                "the barrier has 2 parties; this handle was made with 3");
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

static void bad_arguments_are_refused(void **state) {
  fixture *f = *state;
  hilock_barrier *b;
  hilock_double_barrier *d;
  int64_t index = 3;
  int deleted = 5, br = 5;
  hl_assert_counted_args_refused(f->client, hl_barrier_new_hold,
                                 HILOCK_BARRIER_PARTIES_MAX, "parties must be");
  hl_assert_counted_args_refused(f->client, hl_double_barrier_new_hold,
                                 HILOCK_BARRIER_PARTIES_MAX, "parties must be");
  assert_int_equal(hilock_barrier_wait(NULL, 0, &index), HILOCK_EINVAL);
  assert_int_equal(index, -1);
  assert_int_equal(hilock_barrier_abort(NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_barrier_reset(NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_barrier_state(NULL, &br, &index), HILOCK_EINVAL);
  assert_int_equal(br, 0);
  assert_int_equal(hilock_barrier_delete(NULL, &deleted), HILOCK_EINVAL);
  assert_int_equal(deleted, 0);
  assert_int_equal(hilock_double_barrier_enter(NULL, 0), HILOCK_EINVAL);
  assert_int_equal(hilock_double_barrier_leave(NULL, 0), HILOCK_EINVAL);
  b = hl_new_barrier(f->client, "n", 2, 1000);
  d = hl_new_double_barrier(f->client, "n", 2, 1000);
  assert_int_equal(hilock_barrier_wait(b, 0, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_barrier_wait(b, -5, &index), HILOCK_EINVAL);
  assert_int_equal(hilock_double_barrier_enter(d, -5), HILOCK_EINVAL);
  /* Not entered: nothing to leave. */
  assert_int_equal(hilock_double_barrier_leave(d, 0), HILOCK_ENOTOWNED);
  /* The verbs of a lock are not a barrier's. */
  assert_int_equal(hilock_hold_acquire(HILOCK_HOLD(b), 0), HILOCK_ENOTSUP);
  assert_int_equal(hilock_hold_release(HILOCK_HOLD(d)), HILOCK_ENOTSUP);
  /* Keys of the name that hold something else: WRONGTYPE, no crash. */
  hl_redis_ok(f->redis, "SET %s x", BKEY("n"));
  assert_int_equal(hilock_barrier_wait(b, 0, &index), HILOCK_EWRONGTYPE);
  assert_int_equal(hilock_barrier_state(b, &br, NULL), HILOCK_EWRONGTYPE);
  assert_int_equal(hilock_barrier_reset(b), HILOCK_EWRONGTYPE);
  hl_redis_ok(f->redis, "DEL %s", BKEY("n"));
  hl_redis_ok(f->redis, "SET %s x", ZKEY("n"));
  assert_int_equal(hilock_barrier_wait(b, 0, &index), HILOCK_EWRONGTYPE);
  hl_redis_ok(f->redis, "SET hilock:{n}:inside x");
  assert_int_equal(hilock_double_barrier_enter(d, 0), HILOCK_EWRONGTYPE);
  hl_holds_free(HILOCK_HOLD(b), HILOCK_HOLD(d));
  hilock_hold_free(NULL);
}

typedef struct dparty {
  hilock_double_barrier *d;
  int64_t hold_ms; /* inside for this long */
  int enter_rc, leave_rc;
  int64_t entered_at, left_at, leave_called_at;
} dparty;

static void *dparty_run(void *arg) {
  dparty *p = arg;
  p->enter_rc = hilock_double_barrier_enter(p->d, 30000);
  p->entered_at = hl_now_ms();
  if (p->enter_rc != HILOCK_OK) return NULL;
  hl_sleep_ms(p->hold_ms);
  p->leave_called_at = hl_now_ms();
  p->leave_rc = hilock_double_barrier_leave(p->d, 30000);
  p->left_at = hl_now_ms();
  return NULL;
}

static void double_barrier_enters_and_leaves_together(void **state) {
  fixture *f = *state;
  dparty p[3];
  pthread_t t[3];
  int64_t last_enter_call = 0, last_leave_call = 0;
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 3; i++) {
      memset(&p[i], 0, sizeof(p[i]));
      p[i].d = hl_new_double_barrier(f->client, "d", 3, 5000);
      p[i].hold_ms = 50 * i;
      assert_int_equal(pthread_create(&t[i], NULL, dparty_run, &p[i]), 0);
      if (i < 2) hl_sleep_ms(100);
      last_enter_call = hl_now_ms();
    }
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 3; i++) {
      assert_hl_ok(p[i].enter_rc, hilock_hold_errmsg(HILOCK_HOLD(p[i].d)));
      assert_hl_ok(p[i].leave_rc, hilock_hold_errmsg(HILOCK_HOLD(p[i].d)));
      if (p[i].leave_called_at > last_leave_call)
        last_leave_call = p[i].leave_called_at;
    }
    /* Nobody passed enter before the last entered (started), nor leave
     * before the last one left (called leave). */
    for (int i = 0; i < 3; i++) {
      assert_true(p[i].entered_at >= last_enter_call);
      assert_true(p[i].left_at >= last_leave_call);
      hilock_hold_free(HILOCK_HOLD(p[i].d));
    }
  }
}

static void double_barrier_enter_times_out_and_withdraws(void **state) {
  fixture *f = *state;
  hilock_double_barrier *a = hl_new_double_barrier(f->client, "dt", 2, 5000);
  hilock_double_barrier *b = hl_new_double_barrier(f->client, "dt", 2, 5000);
  int br = -1;
  int64_t inside = -1;
  assert_int_equal(hilock_double_barrier_enter(a, 50), HILOCK_BUSY);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(a)), "withdrawn");
  assert_hl_ok(hilock_double_barrier_state(a, &br, &inside),
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(br, 0);
  assert_int_equal(inside, 0);
  assert_int_equal(hilock_double_barrier_leave(a, 0), HILOCK_ENOTOWNED);
  /* A lone party's leave does not wait; a party inside cannot enter. */
  hilock_hold_free(HILOCK_HOLD(a));
  a = hl_new_double_barrier(f->client, "dt", 1, 5000);
  hilock_hold_free(HILOCK_HOLD(b));
  b = hl_new_double_barrier(f->client, "dt1", 1, 5000);
  assert_hl_ok(hilock_double_barrier_enter(b, 0),
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_int_equal(hilock_double_barrier_enter(b, 0), HILOCK_EINVAL);
  assert_hl_ok(hilock_double_barrier_leave(b, 0),
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

/* A party inside whose lease is not renewed (as a dead one's) breaks the
 * others' leave instead of leaving them waiting for it. */
static void double_barrier_dead_party_inside_breaks_leave(void **state) {
  fixture *f = *state;
  dparty live = {hl_new_double_barrier(f->client, "dd", 2, 5000), 0, -100,
                 -100, 0, 0, 0};
  hilock_double_barrier *dead = hl_new_double_barrier(f->client, "dd", 2, 300);
  pthread_t t;
  int br = 0;
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(dead), 0, 0, NULL, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(dead)));
  assert_int_equal(pthread_create(&t, NULL, dparty_run, &live), 0);
  assert_hl_ok(hilock_double_barrier_enter(dead, 30000),
               hilock_hold_errmsg(HILOCK_HOLD(dead)));
  /* dead never leaves: live's leave ends broken once its lease ran out. */
  pthread_join(t, NULL);
  assert_hl_ok(live.enter_rc, hilock_hold_errmsg(HILOCK_HOLD(live.d)));
  assert_int_equal(live.leave_rc, HILOCK_EBROKEN);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(live.d)), "lease ran out");
  assert_hl_ok(hilock_double_barrier_state(dead, &br, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(dead)));
  assert_int_equal(br, 1);
  /* Broken until reset; then a round works again. */
  assert_int_equal(hilock_double_barrier_enter(live.d, 0), HILOCK_EBROKEN);
  assert_hl_ok(hilock_double_barrier_reset(dead),
               hilock_hold_errmsg(HILOCK_HOLD(dead)));
  hilock_hold_free(HILOCK_HOLD(dead));
  dead = hl_new_double_barrier(f->client, "dd", 2, 5000);
  hilock_hold_free(HILOCK_HOLD(live.d));
  memset(&live, 0, sizeof(live));
  live.d = hl_new_double_barrier(f->client, "dd", 2, 5000);
  assert_int_equal(pthread_create(&t, NULL, dparty_run, &live), 0);
  assert_hl_ok(hilock_double_barrier_enter(dead, 30000),
               hilock_hold_errmsg(HILOCK_HOLD(dead)));
  assert_hl_ok(hilock_double_barrier_leave(dead, 30000),
               hilock_hold_errmsg(HILOCK_HOLD(dead)));
  pthread_join(t, NULL);
  assert_hl_ok(live.leave_rc, hilock_hold_errmsg(HILOCK_HOLD(live.d)));
  hl_holds_free(HILOCK_HOLD(dead), HILOCK_HOLD(live.d));
}

/* A waiter whose arrival is gone from the server (a failover or restart
 * that lost the last writes) breaks the generation at its next look
 * rather than wait uncounted. */
static void a_lost_arrival_breaks_the_generation(void **state) {
  fixture *f = *state;
  hilock_barrier *probe = hl_new_barrier(f->client, "lost", 2, 5000);
  party p = {hl_new_barrier(f->client, "lost", 2, 5000), 60000, 1, -100, {0},
             ""};
  pthread_t t;
  start_waiter(&t, &p, probe, 0);
  hl_redis_ok(f->redis, "DEL %s", ZKEY("lost"));
  hl_redis_int(f->redis, "PUBLISH %s x", BKEY("lost")); /* any event */
  pthread_join(t, NULL);
  assert_int_equal(p.rc, HILOCK_EBROKEN);
  assert_substr(p.msg, "arrival was lost");
  hl_holds_free(HILOCK_HOLD(probe), HILOCK_HOLD(p.b));
}

/* A waiter that looks only after two resets (its generation g reset, and
 * g + 1 reset too: the state two resets leave, written as they write it)
 * ends broken: a generation it cannot account for never passes (it did,
 * when only the last broken generation was kept). */
static void a_waiter_that_missed_two_resets_ends_broken(void **state) {
  fixture *f = *state;
  hilock_barrier *probe = hl_new_barrier(f->client, "two", 2, 5000);
  party p = {hl_new_barrier(f->client, "two", 2, 5000), 60000, 1, -100, {0},
             ""};
  pthread_t t;
  start_waiter(&t, &p, probe, 0); /* generation 0 */
  hl_redis_ok(f->redis, "DEL %s", ZKEY("two"));
  hl_redis_int(f->redis, "HSET %s gen 2 bgen 1 bwhy x", BKEY("two"));
  hl_redis_int(f->redis, "PUBLISH %s reset", BKEY("two"));
  pthread_join(t, NULL);
  assert_int_equal(p.rc, HILOCK_EBROKEN);
  assert_substr(p.msg, "reset");
  hl_holds_free(HILOCK_HOLD(probe), HILOCK_HOLD(p.b));
}

/* A party whose wait times out while the server does not answer (CLIENT
 * PAUSE, past its 100 ms command timeout) keeps giving up until the
 * give-up lands: its arrival never counts for a later trip (it did when
 * the give-up was tried once: the next arrival tripped the generation
 * with it, an early release the fault campaign saw after restarts). */
static void a_give_up_that_fails_is_retried_until_it_lands(void **state) {
  fixture *f = *state;
  hilock_options o = hl_test_options();
  hilock_client *c;
  hilock_barrier *probe = hl_new_barrier(f->client, "ghost", 2, 5000);
  hilock_barrier *b = hl_new_barrier(f->client, "ghost", 2, 5000);
  party a = {NULL, 300, 1, -100, {0}, ""};
  pthread_t t;
  int64_t index = -1;
  o.command_timeout_ms = 100;
  c = hl_client(f->server.url, &o);
  a.b = hl_new_barrier(c, "ghost", 2, 5000);
  start_waiter(&t, &a, probe, 0); /* a arrived; its wait ends at 300 ms */
  /* The pause outlasts a's wait and its first give-ups. */
  hl_redis_ok(f->redis, "CLIENT PAUSE 800 ALL");
  pthread_join(t, NULL);
  assert_int_not_equal(a.rc, HILOCK_OK);
  /* a's give-up landed: b finds the generation broken (else b would trip
   * it with a's arrival). */
  assert_int_equal(hilock_barrier_wait(b, 5000, &index), HILOCK_EBROKEN);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(b)), "is broken: a ");
  hl_holds_free(HILOCK_HOLD(probe), HILOCK_HOLD(b), HILOCK_HOLD(a.b));
  hilock_client_free(c);
}

HL_FIXTURE_MAIN("barrier",
      HL_TEST(a_give_up_that_fails_is_retried_until_it_lands),
      HL_TEST(a_waiter_that_missed_two_resets_ends_broken),
      HL_TEST(a_lost_arrival_breaks_the_generation),
      HL_TEST(three_parties_get_every_index_each_generation),
      HL_TEST(one_party_passes_at_once),
      HL_TEST(a_lapsed_party_breaks_the_others),
      HL_TEST(a_timed_out_wait_breaks_the_barrier),
      HL_TEST(reset_abort_and_delete_end_the_waiters_broken),
      HL_TEST(another_party_count_is_refused),
      HL_TEST(bad_arguments_are_refused),
      HL_TEST(double_barrier_enters_and_leaves_together),
      HL_TEST(double_barrier_enter_times_out_and_withdraws),
      HL_TEST(double_barrier_dead_party_inside_breaks_leave))
