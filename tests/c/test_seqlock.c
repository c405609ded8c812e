/* The sequential lock against a real server, beyond the contract every
 * family keeps (test_contract.c): sequence order, sessions on server time,
 * the watch on the predecessor (one wake-up per removal, to the successor
 * only), dead and departing contenders.
 * Contenders are threads with their own handles, or forked processes (to
 * stop or kill them). Keys are checked with hiredis. The tests in which the
 * fair and the sequential lock differ only by their keys are in
 * queued_util.c. */
#include "queued_util.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "scripts.h"

typedef hl_fixture fixture;

/* LLEN of the wake list of the entry with sequence seq (-1: no list). */
static long long wake_len(fixture *f, const char *name, long long seq) {
  if (!hl_redis_int(f->redis, "EXISTS hilock:{%s}:seq:wake:%020lld", name, seq))
    return -1;
  return hl_redis_int(f->redis, "LLEN hilock:{%s}:seq:wake:%020lld", name, seq);
}

/* ## Grants ------------------------------------------------------------------ */

static void try_acquire_busy_release_and_key_layout(void **state) {
  fixture *f = *state;
  hilock_sequential_lock *a = hl_new_seq(f->client, "basic", 10000);
  hilock_sequential_lock *b = hl_new_seq(f->client, "basic", 10000);
  int locked = -1;

  hl_q_assert_new_handle(HILOCK_HOLD(a), "hilock:{basic}:seq:queue", 10000,
                         5000);

  /* Every key of the lock, wake lists included, is in one cluster slot. */
  {
    static const char *const keys[] = {
        "hilock:{basic}:seq:queue",   "hilock:{basic}:seq:session",
        "hilock:{basic}:seq:holder",  "hilock:{basic}:seq:counter",
        "hilock:{basic}:fence",
        "hilock:{basic}:seq:wake:00000000000000000001"};
    int slot = hilock__key_slot(keys[0], strlen(keys[0]));
    for (size_t i = 1; i < sizeof(keys) / sizeof(keys[0]); i++)
      assert_int_equal(hilock__key_slot(keys[i], strlen(keys[i])), slot);
  }

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_true(hilock_hold_held(HILOCK_HOLD(a)));
  assert_int_equal(strlen(hilock_hold_token(HILOCK_HOLD(a))), 32);
  hl_q_assert_holder(f, "basic", HILOCK_HOLD(a));
  /* A new name's first fence is the server's clock in microseconds. */
  assert_true(hilock_hold_fence(HILOCK_HOLD(a)) > 1000000000000000ULL);
  assert_int_equal(hilock_sequential_lock_sequence(a), 1);
  /* The holder is the lowest live entry; its session lasts ttl. */
  assert_int_equal(hl_q_queue_len(f, "basic"), 1);
  assert_i64_between(
      hl_q_session_left(f->redis, "basic", hilock_hold_token(HILOCK_HOLD(a))),
      9000, 10000);
  assert_i64_between(
      hl_redis_int(f->redis, "PTTL hilock:{basic}:seq:queue"), 9000, 11000);

  hl_q_assert_refused(HILOCK_HOLD(a), HILOCK_HOLD(b));
  /* A refused try never draws a sequence number or leaves an entry. */
  assert_int_equal(hl_q_queue_len(f, "basic"), 1);
  assert_int_equal(hl_redis_get_int(f->redis, "hilock:{basic}:seq:counter"), 1);

  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_false(hilock_hold_held(HILOCK_HOLD(a)));
  hl_q_assert_no_residue(f, "basic");
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(a)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(b), &locked), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_false(locked);

  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(b), 1000), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_true(hilock_hold_fence(HILOCK_HOLD(b)) > hilock_hold_fence(HILOCK_HOLD(a)));
  assert_int_equal(hilock_sequential_lock_sequence(b), 2);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  /* Only the two counters remain: sequence and fence. */
  assert_int_equal(hl_redis_int(f->redis, "DBSIZE"), 2);
  assert_int_equal(hl_redis_get_int(f->redis, "hilock:{basic}:seq:counter"), 2);
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

/* ## Processes ---------------------------------------------------------------- */

static void sigkilled_holder_passes_the_turn_within_its_session(void **state) {
  fixture *f = *state;
  const int64_t ttl = 800; /* the holder's session, renewed while alive */
  hilock_sequential_lock *w = hl_new_seq(f->client, "dead-holder", 10000);
  pid_t holder;
  int64_t t0, took;

  /* A counter ahead of the clock: the dead holder drew one more. */
  hl_redis_ok(f->redis, "SET hilock:{dead-holder}:fence %lld", HL_FENCE_AHEAD);
  holder = hl_q_fork(f, "dead-holder", ttl, 600, 1, -1);
  hl_q_wait_queue_len(f, "dead-holder", 1, 5000);
  while (hl_redis_int(f->redis, "EXISTS hilock:{dead-holder}:seq:holder") == 0)
    hl_sleep_ms(2);
  hl_sleep_ms(ttl); /* renewed at least once: it outlived its first ttl */
  assert_int_equal(hl_q_queue_len(f, "dead-holder"), 1);
  assert_int_equal(kill(holder, SIGKILL), 0);
  assert_int_equal(hl_wait_child(holder, 30000), 128 + SIGKILL);
  /* Our session window is 30 s (a re-check every 10 s): it is the holder's
   * session that bounds the wait, not our own re-checks. */
  assert_hl_ok(hilock_hold_set_heartbeat(HILOCK_HOLD(w), 30000),
               hilock_hold_errmsg(HILOCK_HOLD(w)));
  t0 = hl_now_ms();
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(w), 5000), hilock_hold_errmsg(HILOCK_HOLD(w)));
  took = hl_now_ms() - t0;
  /* Room for a loaded machine, well under the 5 s wait. */
  assert_i64_between(took, 50, ttl + 2000);
  assert_int_equal(hilock_sequential_lock_sequence(w), 2);
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(w)), HL_FENCE_AHEAD + 2);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(w)), hilock_hold_errmsg(HILOCK_HOLD(w)));
  hl_q_assert_no_residue(f, "dead-holder");
  hilock_hold_free(HILOCK_HOLD(w));
}

static void sigkilled_waiter_passes_the_turn_within_its_session(void **state) {
  fixture *f = *state;
  const int64_t window = 600; /* the dead waiter's session */
  hilock_sequential_lock *holder = hl_new_seq(f->client, "dead-pred", 10000);
  hilock_sequential_lock *w = hl_new_seq(f->client, "dead-pred", 10000);
  hl_waiter me;
  int grants = 0;
  pid_t pred;
  int64_t t0, took;

  hl_redis_ok(f->redis, "SET hilock:{dead-pred}:fence %lld", HL_FENCE_AHEAD);
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(holder), 1000),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  pred = hl_q_fork(f, "dead-pred", 10000, window, 1, 0);
  hl_q_wait_queue_len(f, "dead-pred", 2, 5000);
  hl_q_waiter(&me, HILOCK_HOLD(w), &grants);
  assert_hl_ok(hilock_hold_set_heartbeat(HILOCK_HOLD(w), 30000),
               hilock_hold_errmsg(HILOCK_HOLD(w)));
  hl_waiter_start(&me);
  hl_q_wait_queue_len(f, "dead-pred", 3, 5000);
  assert_int_equal(kill(pred, SIGKILL), 0);
  assert_int_equal(hl_wait_child(pred, 30000), 128 + SIGKILL);
  t0 = hl_now_ms();
  /* The release pushes to the dead predecessor's list (nobody reads it);
   * we are woken when its session runs out, within its window, never by
   * our own re-check (10 s) or the holder's TTL (10 s). */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(holder)), hilock_hold_errmsg(HILOCK_HOLD(holder)));
  hl_waiter_join(&me);
  took = hl_now_ms() - t0;
  assert_hl_ok(me.rc, hilock_hold_errmsg(HILOCK_HOLD(w)));
  /* Room for a loaded machine, well under the 10 s re-check. */
  assert_i64_between(took, 0, window + 2000);
  assert_int_equal(me.number_granted, 3);
  /* Nothing was granted to the dead one. */
  assert_int_equal(me.fence, HL_FENCE_AHEAD + 2);
  hl_q_assert_no_residue(f, "dead-pred");
  hl_holds_free(HILOCK_HOLD(holder), HILOCK_HOLD(w));
}

/* ## The script's own guarantees ------------------------------------------------ */

/* A call of the lock's script. Replies (core/scripts/seqlock.lua): acquire
 * {1, fence, seq} granted, or {0, ms left on the predecessor's session,
 * seq, live entries ahead}; leave {1 if it gave a grant back}; info
 * {locked, waiters, holder's seq}. */
static redisReply *seq_script(fixture *f, const char *name, const char *op,
                              const char *id) {
  static const char *const roles[6] = {"seq:queue",   "seq:session",
                                       "seq:holder",  "seq:counter",
                                       "fence",       "seq:wake:"};
  const char *args[6] = {op, id, "5000", "1000", "0", ""};
  return hl_run_script(f->client, &hilock__script_seqlock, name, roles, 6,
                       args, 6);
}

static void resent_acquire_and_leave_after_a_lost_reply(void **state) {
  fixture *f = *state;
  redisReply *r;

  /* A grant, then the same call again (a resend after a broken
   * connection): the same grant and fence, no second one. */
  hl_redis_ok(f->redis, "SET hilock:{lost}:fence %lld", HL_FENCE_AHEAD);
  assert_reply_ints(seq_script(f, "lost", "acquire", "me"), 1,
                    HL_FENCE_AHEAD + 1, 1);
  assert_reply_ints(seq_script(f, "lost", "acquire", "me"), 1,
                    HL_FENCE_AHEAD + 1, 1);
  assert_int_equal(hl_redis_get_int(f->redis, "hilock:{lost}:fence"),
                   HL_FENCE_AHEAD + 1);

  /* Two contenders enqueue; a resent enqueue keeps its sequence. */
  r = seq_script(f, "lost", "acquire", "next");
  assert_i64_between(r->element[1]->integer, 4000, 5000); /* holder's session */
  assert_reply_ints(r, 0, HL_ANY, 2, 1);
  r = seq_script(f, "lost", "acquire", "last");
  assert_i64_between(r->element[1]->integer, 500, 1000); /* next's window */
  assert_reply_ints(r, HL_ANY, HL_ANY, 3);
  assert_reply_ints(seq_script(f, "lost", "acquire", "next"), HL_ANY, HL_ANY,
                    2);
  assert_int_equal(hl_redis_get_int(f->redis, "hilock:{lost}:seq:counter"), 3);

  /* The caller that never saw its grant leaves: the grant is given back
   * and its successor, and only it, is woken. */
  assert_reply_ints(seq_script(f, "lost", "leave", "me"), 1);
  assert_null(hl_q_holder(f, "lost"));
  assert_int_equal(wake_len(f, "lost", 2), 1);
  assert_int_equal(wake_len(f, "lost", 3), -1);
  assert_i64_between(
      hl_redis_int(f->redis,
                   "PTTL hilock:{lost}:seq:wake:00000000000000000002"),
      1, 2000);
  assert_reply_ints(seq_script(f, "lost", "acquire", "next"), 1,
                    HL_FENCE_AHEAD + 2, 2);
  /* The grant consumed the wake-up. */
  assert_int_equal(hl_q_wake_lists(f, "lost"), 0);
}

static void purge_of_a_dead_entry_wakes_its_successor_only(void **state) {
  fixture *f = *state;
  redisReply *r;
  long long now = hl_server_time_ms(f->redis);

  /* holder (1), ghost (2, dies in 200 ms), a (3), b (4). */
  freeReplyObject(seq_script(f, "purge", "acquire", "holder"));
  freeReplyObject(seq_script(f, "purge", "acquire", "ghost"));
  freeReplyObject(seq_script(f, "purge", "acquire", "a"));
  freeReplyObject(seq_script(f, "purge", "acquire", "b"));
  hl_redis_ok(f->redis, "ZADD hilock:{purge}:seq:session XX %lld ghost",
              now + 200);
  hl_sleep_ms(250);
  /* Any call purges it: its successor a is told, b and the holder not. */
  assert_reply_ints(seq_script(f, "purge", "info", ""), 1, 2, 1);
  assert_int_equal(wake_len(f, "purge", 3), 1);
  assert_int_equal(hl_q_wake_lists(f, "purge"), 1);
  assert_int_equal(hl_q_queue_len(f, "purge"), 3);
  /* a now watches the holder: its wait is bounded by the holder's session. */
  r = seq_script(f, "purge", "acquire", "a");
  assert_i64_between(r->element[1]->integer, 3000, 5000);
  assert_reply_ints(r, 0, HL_ANY, HL_ANY, 1);
}

static void sequence_never_goes_back_when_the_counter_is_lost(void **state) {
  fixture *f = *state;

  freeReplyObject(seq_script(f, "amnesia", "acquire", "holder"));
  freeReplyObject(seq_script(f, "amnesia", "acquire", "first"));
  freeReplyObject(seq_script(f, "amnesia", "acquire", "second"));
  hl_redis_ok(f->redis, "DEL hilock:{amnesia}:seq:counter");
  assert_reply_ints(seq_script(f, "amnesia", "acquire", "newcomer"), 0, HL_ANY,
                    4, 3);
  assert_int_equal(hl_redis_get_int(f->redis, "hilock:{amnesia}:seq:counter"), 4);
}

#define T(f) cmocka_unit_test_setup_teardown(f, hl_setup, hl_teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(try_acquire_busy_release_and_key_layout),
      HL_Q_TESTS_NAMED_ALIKE,
      HL_Q_TEST(grant_order_is_sequence_order, hl_q_grants_follow_queue_order),
      HL_Q_TEST(release_wakes_the_successor_only,
                hl_q_release_wakes_the_next_waiter_only),
      T(sigkilled_holder_passes_the_turn_within_its_session),
      T(sigkilled_waiter_passes_the_turn_within_its_session),
      HL_Q_TEST(timed_out_waiter_leaves_no_residue_and_wakes_its_successor,
                hl_q_timed_out_waiter_leaves_its_place_to_the_next),
      HL_Q_TEST(live_waiter_keeps_its_entry_however_long_it_waits,
                hl_q_live_waiter_keeps_its_place_however_long_it_waits),
      T(resent_acquire_and_leave_after_a_lost_reply),
      T(purge_of_a_dead_entry_wakes_its_successor_only),
      T(sequence_never_goes_back_when_the_counter_is_lost),
  };
  hl_q_family = &hl_seq_queued;
  return cmocka_run_group_tests_name("seqlock", tests, hl_group_setup,
                                     hl_group_teardown);
}
