/* The queue-style families (the fair lock and the sequential lock) for
 * their two suites: one table row per family, the helpers both suites use
 * on a lock's keys and waiters, and the tests in which the two families
 * differ only by that row. A suite's main sets hl_q_family, then lists
 * the shared tests with HL_Q_TEST next to its own. */
#ifndef HILOCK_QUEUED_UTIL_H
#define HILOCK_QUEUED_UTIL_H

#include "test_util.h"

typedef struct hl_queued {
  const hl_verbs *verbs;
  hl_new_fn new_hold; /* its constructor on the hold */
  int (*set_heartbeat)(hilock_hold *h, int64_t ms);
  int64_t (*heartbeat_ms)(const hilock_hold *h);
  int (*waiters)(hilock_hold *h, int64_t *count);
  uint64_t (*number)(const hilock_hold *h); /* ticket or sequence */
  /* Keys, formatted from a lock's name (names in these tests are plain
   * words): */
  const char *queue;           /* the queue (a sorted set) */
  const char *wake_pattern;    /* KEYS pattern of the wake lists */
  const char *counter;         /* where the numbers are drawn */
  const char *const *waiting;  /* those that exist only while one waits */
  const char *const *all;      /* those gone once nobody holds or waits */
  /* Sequential lock: the holder's entry stays in the queue; a number is
   * drawn at enqueue (readable while waiting); a waiter watches the entry
   * before it (the one that leaves tells its successor); the keys outlive
   * the holder's session (one of them: outliving); wake lists are named by
   * number (a format taking it). */
  int holder_queued;
  int numbered_at_enqueue;
  int watches_predecessor;
  const char *outliving;   /* NULL: none */
  const char *wake_of;     /* NULL: wake lists are not named by number */
  /* The holder's token as the server has it (malloc'd), or NULL. */
  char *(*holder)(redisContext *r, const char *name);
  /* What a grant has left on the server (ms): its key's PTTL, or its
   * session. */
  long long (*grant_left)(redisContext *r, const char *name,
                          const hilock_hold *h);
  /* What the only waiter's entry has left on the server's clock (ms):
   * its heartbeat deadline, or its session. */
  long long (*waiter_left)(redisContext *r, const char *name);
} hl_queued;

extern const hl_queued hl_fair_queued;
extern const hl_queued hl_seq_queued;

/* The family this program tests (set by its main). */
extern const hl_queued *hl_q_family;

/* A shared test, under the suite's name for it, on the shared fixture. */
#define HL_Q_TEST(test, body)                                               \
  {                                                                         \
    .name = #test, .test_func = body, .setup_func = hl_setup,               \
    .teardown_func = hl_teardown                                            \
  }

/* The shared tests that both suites name alike. */
#define HL_Q_TESTS_NAMED_ALIKE                                              \
  HL_Q_TEST(not_reentrant, hl_q_not_reentrant),                             \
      HL_Q_TEST(extend_and_renew_act_while_owned,                           \
                hl_q_extend_and_renew_act_while_owned),                     \
      HL_Q_TEST(interrupted_waiter_leaves_no_residue,                       \
                hl_q_interrupted_waiter_leaves_no_residue),                 \
      HL_Q_TEST(holder_crash_hands_over_when_its_ttl_runs_out,              \
                hl_q_holder_crash_hands_over_when_its_ttl_runs_out),        \
      HL_Q_TEST(damaged_keys_fail_closed, hl_q_damaged_keys_fail_closed),   \
      HL_Q_TEST(invalid_arguments_are_einval,                               \
                hl_q_invalid_arguments_are_einval)

/* ## Helpers (on hl_q_family) ------------------------------------------------ */

hilock_hold *hl_q_make(hilock_client *c, const char *name, int64_t ttl_ms);
/* ZCARD of the queue; wait (up to timeout_ms) until it is n. */
long long hl_q_queue_len(hl_fixture *f, const char *name);
void hl_q_wait_queue_len(hl_fixture *f, const char *name, long long n,
                         int64_t timeout_ms);
/* Wake lists of name. */
long long hl_q_wake_lists(hl_fixture *f, const char *name);
/* The holder's token as the server has it (malloc'd), or NULL. */
char *hl_q_holder(hl_fixture *f, const char *name);
/* The holder is h, by its token. */
void hl_q_assert_holder(hl_fixture *f, const char *name, hilock_hold *h);
/* Nothing a waiter leaves is there: the queue holds the holder's entry
 * alone (if held, where the holder stays queued), no wake list. */
void hl_q_assert_no_waiters(hl_fixture *f, const char *name, int held);
/* Nothing of the lock is left but its counters. */
void hl_q_assert_no_residue(hl_fixture *f, const char *name);
/* w waits with h (see hl_waiter); its number is the grant's ticket or
 * sequence; the waiters of a test count their grants in *grant_counter. */
hilock_hold *hl_q_waiter(hl_waiter *w, hilock_hold *h, int *grant_counter);
/* A contending process (see hl_fork_contender) on name: a handle with
 * ttl_ms and heartbeat window beat_ms, renewed if renew. */
pid_t hl_q_fork(hl_fixture *f, const char *name, int64_t ttl_ms,
                int64_t beat_ms, int renew, int64_t hold_ms);
/* Sequential lock: the session of entry id, less the server's time (ms),
 * -1 if it has none. */
long long hl_q_session_left(redisContext *r, const char *name,
                            const char *id);
/* holder acquires; w's acquire of 300 ms is HILOCK_BUSY after its wait and
 * leaves nothing of a waiter behind. */
void hl_q_busy_after_its_wait(hl_fixture *f, const char *name,
                              hilock_hold *holder, hilock_hold *w);
/* A handle not yet granted: its key, TTL and heartbeat, no number, fence
 * or token. */
void hl_q_assert_new_handle(hilock_hold *h, const char *key, int64_t ttl_ms,
                            int64_t heartbeat_ms);
/* b is refused while a holds the lock, and knows it is not the owner. */
void hl_q_assert_refused(hilock_hold *a, hilock_hold *b);

/* ## The shared tests ---------------------------------------------------------- */

void hl_q_not_reentrant(void **state);
void hl_q_extend_and_renew_act_while_owned(void **state);
void hl_q_grants_follow_queue_order(void **state);
void hl_q_release_wakes_the_next_waiter_only(void **state);
void hl_q_interrupted_waiter_leaves_no_residue(void **state);
void hl_q_timed_out_waiter_leaves_its_place_to_the_next(void **state);
void hl_q_live_waiter_keeps_its_place_however_long_it_waits(void **state);
void hl_q_holder_crash_hands_over_when_its_ttl_runs_out(void **state);
void hl_q_damaged_keys_fail_closed(void **state);
void hl_q_invalid_arguments_are_einval(void **state);

#endif /* HILOCK_QUEUED_UTIL_H */
