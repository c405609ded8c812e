/* The fair (FIFO) lock against a real server, beyond the contract every
 * family keeps (test_contract.c): grant order, no barging, heartbeats on
 * server time, dead and departing waiters, head-only wake-ups. Waiters are
 * threads with their own handles, or forked processes (to stop or kill
 * them). Keys are checked with hiredis. The tests in which the fair and
 * the sequential lock differ only by their keys are in queued_util.c. */
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

/* ## Grants ------------------------------------------------------------------ */

static void try_acquire_busy_release_and_key_layout(void **state) {
  fixture *f = *state;
  hilock_fair_lock *a = hl_new_fair(f->client, "basic", 10000);
  hilock_fair_lock *b = hl_new_fair(f->client, "basic", 10000);
  uint64_t first;

  hl_q_assert_new_handle(HILOCK_HOLD(a), "hilock:{basic}:fair", 10000, 5000);

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_true(hilock_hold_held(HILOCK_HOLD(a)));
  assert_int_equal(strlen(hilock_hold_token(HILOCK_HOLD(a))), 32);
  hl_q_assert_holder(f, "basic", HILOCK_HOLD(a));
  assert_i64_between(hl_redis_pttl(f->redis, "hilock:{basic}:fair", 19), 5000,
                     10000);
  /* A new name's first fence is the server's clock in microseconds. */
  first = hilock_hold_fence(HILOCK_HOLD(a));
  assert_true(first > 1000000000000000ULL);
  assert_int_equal(hilock_fair_lock_ticket(a), 1);

  hl_q_assert_refused(HILOCK_HOLD(a), HILOCK_HOLD(b));
  /* A refused try or a zero wait never queues. */
  hl_q_assert_no_waiters(f, "basic", 0);

  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_false(hilock_hold_held(HILOCK_HOLD(a)));
  assert_null(hl_q_holder(f, "basic"));
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(a)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(a)));

  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(b), 1000), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_true(hilock_hold_fence(HILOCK_HOLD(b)) > first);
  assert_int_equal(hilock_fair_lock_ticket(b), 2);
  /* Holder, fence and ticket counters: nothing of the queue remains. */
  assert_int_equal(hl_redis_int(f->redis, "DBSIZE"), 3);
  assert_int_equal(hl_redis_get_int(f->redis, "hilock:{basic}:fair:ticket"), 2);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

/* ## Processes ---------------------------------------------------------------- */

/* A forked waiter (see hl_q_fork) with heartbeat window beat_ms. */
static pid_t fork_waiter(fixture *f, const char *name, int64_t beat_ms,
                         int64_t hold_ms) {
  return hl_q_fork(f, name, 10000, beat_ms, 0, hold_ms);
}

static void newcomer_never_barges_past_a_queued_waiter(void **state) {
  fixture *f = *state;
  hilock_fair_lock *holder = hl_new_fair(f->client, "barge", 10000);
  hilock_fair_lock *newcomer = hl_new_fair(f->client, "barge", 10000);
  int locked = -1;
  int64_t count = -1;
  pid_t child;

  /* Ahead of the clock, the counter counts the grants. */
  hl_redis_ok(f->redis, "SET hilock:{barge}:fence %lld", HL_FENCE_AHEAD);
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(holder), 1000),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  child = fork_waiter(f, "barge", 3000, 50);
  hl_q_wait_queue_len(f, "barge", 1, 5000);
  /* Freeze the queued waiter: its heartbeat is good for 3 s. */
  assert_int_equal(kill(child, SIGSTOP), 0);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(holder)),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));

  /* The lock is free, but reserved for the head of the queue. */
  assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(newcomer), &locked),
               hilock_hold_errmsg(HILOCK_HOLD(newcomer)));
  assert_false(locked);
  assert_hl_ok(hilock_fair_lock_waiters(newcomer, &count),
               hilock_hold_errmsg(HILOCK_HOLD(newcomer)));
  assert_int_equal(count, 1);
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(newcomer)), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(newcomer)));
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(newcomer), 300), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(newcomer)));
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(holder)), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  assert_null(hl_q_holder(f, "barge"));
  assert_int_equal(hl_q_queue_len(f, "barge"), 1); /* the newcomer left */

  /* Thawed, the head takes its turn; then the newcomer may have it. */
  assert_int_equal(kill(child, SIGCONT), 0);
  assert_int_equal(hl_wait_child(child, 30000), 0);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(newcomer)),
               hilock_hold_errmsg(HILOCK_HOLD(newcomer)));
  /* The holder's, the head's, then the newcomer's grant. */
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(newcomer)),
                   hilock_hold_fence(HILOCK_HOLD(holder)) + 2);
  hl_q_assert_no_waiters(f, "barge", 0);
  hl_holds_free(HILOCK_HOLD(holder), HILOCK_HOLD(newcomer));
}

static void sigkilled_head_is_skipped_within_the_heartbeat_window(
    void **state) {
  fixture *f = *state;
  const int64_t beat = 600; /* window; waiters re-check every 200 ms */
  hilock_fair_lock *holder = hl_new_fair(f->client, "dead-head", 10000);
  pid_t head, second;
  int64_t t0, took;
  char *v;

  /* Ahead of the clock, the counter counts the grants. */
  hl_redis_ok(f->redis, "SET hilock:{dead-head}:fence %lld", HL_FENCE_AHEAD);
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(holder), 1000),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  head = fork_waiter(f, "dead-head", beat, 0);
  hl_q_wait_queue_len(f, "dead-head", 1, 5000);
  second = fork_waiter(f, "dead-head", beat, 100);
  hl_q_wait_queue_len(f, "dead-head", 2, 5000);

  assert_int_equal(kill(head, SIGKILL), 0);
  assert_int_equal(hl_wait_child(head, 30000), 128 + SIGKILL);
  t0 = hl_now_ms();
  /* The release wakes the dead head; the lock stays reserved for it until
   * its heartbeat lapses, never for the holder's TTL of 10 s. */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(holder)),
               hilock_hold_errmsg(HILOCK_HOLD(holder)));
  while ((v = hl_q_holder(f, "dead-head")) == NULL) {
    if (hl_now_ms() - t0 > 5000) break;
    hl_sleep_ms(2);
  }
  took = hl_now_ms() - t0;
  assert_non_null(v);
  free(v);
  /* The heartbeat bound (0.8 s), not the 10 s TTL: 4 s leaves room for a
   * loaded machine. */
  assert_i64_between(took, 0, 4000);
  /* The dead waiter's entry, heartbeat and wake list went with it. */
  assert_int_equal(hl_q_queue_len(f, "dead-head"), 0);
  assert_int_equal(hl_q_wake_lists(f, "dead-head"), 0);
  assert_int_equal(hl_wait_child(second, 30000), 0);
  /* Granted to the holder and then the second waiter only. */
  assert_int_equal(hl_redis_get_int(f->redis, "hilock:{dead-head}:fence"),
                   (long long)hilock_hold_fence(HILOCK_HOLD(holder)) + 1);
  hl_q_assert_no_waiters(f, "dead-head", 0);
  hilock_hold_free(HILOCK_HOLD(holder));
}

/* ## Heartbeats ------------------------------------------------------------------ */

static void dead_entries_block_until_their_deadline_then_are_dropped(
    void **state) {
  fixture *f = *state;
  hilock_fair_lock *l = hl_new_fair(f->client, "ghost", 5000);
  long long now = hl_server_time_ms(f->redis);
  int64_t count = -1;

  /* A waiter that died 0.3 s before its deadline, with a wake-up pending,
   * and a damaged entry (queued, no heartbeat) ahead of it. */
  hl_redis_ok(f->redis, "ZADD hilock:{ghost}:fair:queue 1 broken 7 ghost");
  hl_redis_ok(f->redis, "ZADD hilock:{ghost}:fair:heartbeat %lld ghost",
              now + 300);
  hl_redis_ok(f->redis, "RPUSH hilock:{ghost}:wake:ghost 1");
  assert_hl_ok(hilock_fair_lock_waiters(l, &count), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_int_equal(count, 1);

  /* Until then it is the head: nobody barges past it. */
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(l)), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_int_equal(hl_redis_int(f->redis, "EXISTS hilock:{ghost}:fair:queue"),
                   1);
  /* The damaged entry is gone; the ghost is still waited for. */
  assert_int_equal(hl_q_queue_len(f, "ghost"), 1);
  hl_sleep_ms(350);
  assert_hl_ok(hilock_fair_lock_waiters(l, &count), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_int_equal(count, 0);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hl_q_assert_no_waiters(f, "ghost", 0);
  hilock_hold_free(HILOCK_HOLD(l));
}

/* ## The script's own guarantees ------------------------------------------------ */

/* A call of the lock's script. Replies (core/scripts/fair_lock.lua):
 * acquire {1, fence, ticket} granted, or {0, holder's pttl, ticket,
 * position}; leave {1 if it gave a grant back}. */
static redisReply *fair_script(fixture *f, const char *name, const char *op,
                               const char *id, int64_t ticket) {
  char own[96]; /* KEYS[7]: the caller's own wake list */
  const char *roles[7] = {"fair",        "fence", "fair:queue", "fair:heartbeat",
                          "fair:ticket", "wake:", own};
  char ticket_s[24];
  const char *args[5] = {op, id, "5000", "1000", ticket_s};
  snprintf(own, sizeof(own), "wake:%s", id);
  snprintf(ticket_s, sizeof(ticket_s), "%lld", (long long)ticket);
  return hl_run_script(f->client, &hilock__script_fair_lock, name, roles, 7,
                       args, 5);
}

static void resent_acquire_and_leave_after_a_lost_reply(void **state) {
  fixture *f = *state;
  redisReply *r;
  long long fence;

  /* A grant, then the same call again (a resend after a broken
   * connection): the same grant and fence, no second one. */
  r = fair_script(f, "lost", "acquire", "me", 0);
  fence = r->element[1]->integer;
  assert_reply_ints(r, 1);
  assert_reply_ints(fair_script(f, "lost", "acquire", "me", 1), 1, fence);
  assert_int_equal(hl_redis_get_int(f->redis, "hilock:{lost}:fence"), fence);

  /* Another waiter queues; the caller that never saw its grant leaves:
   * the grant is given back and only the head is woken. */
  assert_reply_ints(fair_script(f, "lost", "acquire", "next", 0), 0, HL_ANY,
                    HL_ANY, 0);
  assert_reply_ints(fair_script(f, "lost", "leave", "me", 0), 1);
  assert_null(hl_q_holder(f, "lost"));
  assert_int_equal(hl_redis_int(f->redis, "LLEN hilock:{lost}:wake:next"), 1);
  assert_i64_between(hl_redis_pttl(f->redis, "hilock:{lost}:wake:next", 23), 1,
                     2000);
  /* A re-sent queueing call keeps its ticket and place. */
  assert_reply_ints(fair_script(f, "lost", "acquire", "next", 0), 1, HL_ANY, 2);
  assert_int_equal(hl_q_wake_lists(f, "lost"), 0);
}

static void waiters_keep_their_place_when_the_queue_is_lost(void **state) {
  fixture *f = *state;

  /* Two waiters queued behind a holder; then the server loses everything
   * (a restart without persistence). */
  freeReplyObject(fair_script(f, "amnesia", "acquire", "holder", 0));
  freeReplyObject(fair_script(f, "amnesia", "acquire", "first", 0));
  freeReplyObject(fair_script(f, "amnesia", "acquire", "second", 0));
  hl_redis_ok(f->redis, "FLUSHALL");
  /* Newcomers arrive before the waiters' next re-check (the queue is
   * empty for the first)... */
  assert_reply_ints(fair_script(f, "amnesia", "acquire", "newcomer", 0), 1);
  assert_reply_ints(fair_script(f, "amnesia", "acquire", "late", 0), 0, HL_ANY,
                    2);
  /* ...the waiters come back with their tickets (so they may share their
   * place with a newcomer of that window), and every ticket drawn
   * afterwards comes after theirs. */
  assert_reply_ints(fair_script(f, "amnesia", "acquire", "second", 3), HL_ANY,
                    HL_ANY, HL_ANY, 1);
  assert_reply_ints(fair_script(f, "amnesia", "acquire", "first", 2), HL_ANY,
                    HL_ANY, 2);
  assert_reply_ints(fair_script(f, "amnesia", "acquire", "later", 0), HL_ANY,
                    HL_ANY, 4, 3);
}

#define T(f) cmocka_unit_test_setup_teardown(f, hl_setup, hl_teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(try_acquire_busy_release_and_key_layout),
      HL_Q_TESTS_NAMED_ALIKE,
      HL_Q_TEST(fifo_grant_order_follows_enqueue_order,
                hl_q_grants_follow_queue_order),
      T(newcomer_never_barges_past_a_queued_waiter),
      T(sigkilled_head_is_skipped_within_the_heartbeat_window),
      HL_Q_TEST(timed_out_waiter_leaves_no_residue,
                hl_q_timed_out_waiter_leaves_its_place_to_the_next),
      HL_Q_TEST(live_waiter_is_never_purged_however_long_it_waits,
                hl_q_live_waiter_keeps_its_place_however_long_it_waits),
      T(dead_entries_block_until_their_deadline_then_are_dropped),
      HL_Q_TEST(wake_ups_go_to_the_head_only,
                hl_q_release_wakes_the_next_waiter_only),
      T(resent_acquire_and_leave_after_a_lost_reply),
      T(waiters_keep_their_place_when_the_queue_is_lost),
  };
  hl_q_family = &hl_fair_queued;
  return cmocka_run_group_tests_name("fair", tests, hl_group_setup,
                                     hl_group_teardown);
}
