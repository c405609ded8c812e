/* Redlock over five private redis-servers, beyond the contract every family
 * keeps (test_contract.c runs it on one and three nodes): quorum, node
 * failures (down, slowed with DEBUG SLEEP), cleanup after a failed attempt,
 * the unsafety of a restart without persistence and its two mitigations,
 * fencing across diverged counters, extension, renewal through a
 * majority. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"


#define N 5
#define BASE_EXTRA 2 /* --enable-debug-command yes */
#define NAME "rl"
#define NAMELEN 2
#define KEY "hilock:{rl}:redlock"
#define FKEY "hilock:{rl}:fence"

static hl_server nodes[N];
static const char *urls[N];

static int group_setup(void **state) {
  (void)state;
  static const char *const extra[] = {"--enable-debug-command", "yes", NULL};
  hl_server_opts o = {.extra = extra};
  if (hl_servers_start(nodes, N, &o) != 0) return -1;
  for (int i = 0; i < N; i++) urls[i] = nodes[i].url;
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  hl_servers_destroy(nodes, N);
  return 0;
}

/* Every node running, without extra arguments, and empty. */
static int setup(void **state) {
  (void)state;
  for (int i = 0; i < N; i++) {
    if (nodes[i].nextra != BASE_EXTRA) {
      nodes[i].nextra = BASE_EXTRA;
      hl_server_stop(&nodes[i]);
    }
    if (nodes[i].pid == 0 && hl_server_restart(&nodes[i]) != 0) return -1;
    redisContext *c = hl_redis_connect(&nodes[i]);
    hl_redis_ok(c, "FLUSHALL");
    redisFree(c);
  }
  return 0;
}

static hilock_redlock *make(int64_t ttl_ms) {
  hilock_options o = hl_test_options();
  hilock_redlock *rl = NULL;
  int rc = hilock_redlock_new(urls, N, NAME, NAMELEN, ttl_ms, &o, &rl);
  assert_hl_ok(rc, hilock_hold_errmsg(HILOCK_HOLD(rl)));
  return rl;
}

/* A new Redlock of ttl_ms, taken (try_acquire). */
static hilock_redlock *taken(int64_t ttl_ms) {
  hilock_redlock *rl = make(ttl_ms);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  return rl;
}

/* GET of the lock key on node i (malloc'd, NULL if absent). */
static char *node_get(int i, const char *key) {
  redisContext *c = hl_redis_connect(&nodes[i]);
  char *v = hl_redis_get(c, key, strlen(key));
  redisFree(c);
  return v;
}

static int node_has_key(int i) {
  redisContext *c = hl_redis_connect(&nodes[i]);
  int e = hl_redis_exists(c, KEY, strlen(KEY));
  redisFree(c);
  return e;
}

static int nodes_with_key(void) {
  int n = 0;
  for (int i = 0; i < N; i++)
    if (nodes[i].pid > 0 && node_has_key(i)) n++;
  return n;
}

/* Until node i sleeps (DEBUG SLEEP sent). A sleeping server runs nothing,
 * so no command can show the sleep: a PING from another connection left
 * unanswered for 250 ms does (one answered ran before the sleep, and
 * another is sent). */
static void node_wait_asleep(int i) {
  for (int64_t end = hl_now_ms() + 10000;;) {
    redisContext *probe = hl_redis_connect(&nodes[i]);
    struct timeval ptv = {0, 250000};
    redisReply *r;
    redisSetTimeout(probe, ptv);
    r = redisCommand(probe, "PING");
    redisFree(probe);
    if (r == NULL) return; /* unanswered: asleep */
    freeReplyObject(r);
    assert_true(hl_now_ms() < end);
  }
}

/* DEBUG SLEEP on node i, without waiting for it: the returned connection
 * gets the reply when the sleep ends. */
static redisContext *node_sleep_send(int i, double seconds) {
  redisContext *c = hl_redis_connect(&nodes[i]);
  struct timeval tv = {(time_t)seconds + 5, 0}; /* the reply ends the sleep */
  int done = 0;
  char s[32];
  redisSetTimeout(c, tv);
  snprintf(s, sizeof(s), "%.3f", seconds);
  redisAppendCommand(c, "DEBUG SLEEP %s", s);
  while (!done) assert_int_equal(redisBufferWrite(c, &done), REDIS_OK);
  return c;
}

/* The same, returning once the node sleeps. */
static redisContext *node_sleep(int i, double seconds) {
  redisContext *c = node_sleep_send(i, seconds);
  node_wait_asleep(i);
  return c;
}

static void sleep_done(redisContext *c) {
  redisReply *r = NULL;
  assert_int_equal(redisGetReply(c, (void **)&r), REDIS_OK);
  assert_int_equal(r->type, REDIS_REPLY_STATUS); /* not "DEBUG not allowed" */
  freeReplyObject(r);
  redisFree(c);
}

/* ## Arguments ----------------------------------------------------------- */

static void test_invalid_arguments(void **state) {
  hilock_redlock *rl = NULL;
  const char *bad[2] = {"redis://127.0.0.1:1", "http://nope"};
  (void)state;
  assert_int_equal(hilock_redlock_new(urls, N, NAME, NAMELEN, 1000, NULL, NULL),
                   HILOCK_EINVAL);
  assert_hl_rc(hilock_redlock_new(urls, 0, NAME, NAMELEN, 1000, NULL, &rl),
               HILOCK_EINVAL, hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(rl)), "node URLs");
  hilock_hold_free(HILOCK_HOLD(rl));
  assert_hl_rc(hilock_redlock_new(NULL, 3, NAME, NAMELEN, 1000, NULL, &rl),
               HILOCK_EINVAL, hilock_hold_errmsg(HILOCK_HOLD(rl)));
  hilock_hold_free(HILOCK_HOLD(rl));
  assert_hl_rc(hilock_redlock_new(bad, 2, NAME, NAMELEN, 1000, NULL, &rl),
               HILOCK_EINVAL, hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(rl)), "node 1");
  hilock_hold_free(HILOCK_HOLD(rl));
  assert_hl_rc(hilock_redlock_new(urls, N, NAME, NAMELEN, 0, NULL, &rl),
               HILOCK_EINVAL, hilock_hold_errmsg(HILOCK_HOLD(rl)));
  hilock_hold_free(HILOCK_HOLD(rl));
  assert_hl_rc(hilock_redlock_new(urls, N, "", 0, 1000, NULL, &rl),
               HILOCK_EINVAL, hilock_hold_errmsg(HILOCK_HOLD(rl)));
  hilock_hold_free(HILOCK_HOLD(rl));

  assert_int_equal(hilock_redlock_set_node_timeout(NULL, 5), HILOCK_EINVAL);
  hilock_hold_free(NULL);

  rl = make(1000);
  assert_int_equal(hilock_redlock_nodes(rl), 5);
  assert_int_equal(hilock_redlock_quorum(rl), 3);
  assert_int_equal(hilock_redlock_node_timeout_ms(rl), 50);
  assert_int_equal(hilock_redlock_set_node_timeout(rl, 0), HILOCK_EINVAL);
  assert_int_equal(hilock_redlock_set_node_timeout(rl, 1000), HILOCK_EINVAL);
  assert_int_equal(hilock_redlock_set_retry_delay(rl, -1), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_release(HILOCK_HOLD(rl)), HILOCK_ENOTOWNED);
  assert_int_equal(hilock_hold_extend(HILOCK_HOLD(rl), 100, 0), HILOCK_ENOTOWNED);
  assert_int_equal(hilock_hold_acquire(HILOCK_HOLD(rl), -5), HILOCK_EINVAL);
  hilock_hold_free(HILOCK_HOLD(rl));
  /* A small TTL gives a node timeout of ttl/10. */
  rl = make(200);
  assert_int_equal(hilock_redlock_node_timeout_ms(rl), 20);
  hilock_hold_free(HILOCK_HOLD(rl));
}

static void test_auth_and_db_from_each_url(void **state) {
  char u0[128], u2[128], bad0[128];
  const char *good[N], *bad[N];
  hilock_redlock *rl = NULL;
  hilock_options o = hl_test_options();
  redisContext *c;
  (void)state;
  c = hl_redis_connect(&nodes[0]);
  hl_redis_ok(c, "CONFIG SET requirepass s3cret");
  redisFree(c);
  snprintf(u0, sizeof(u0), "redis://:s3cret@127.0.0.1:%d", nodes[0].port);
  snprintf(bad0, sizeof(bad0), "redis://:wrong@127.0.0.1:%d", nodes[0].port);
  snprintf(u2, sizeof(u2), "redis://127.0.0.1:%d/3", nodes[2].port);
  for (int i = 0; i < N; i++) good[i] = bad[i] = urls[i];
  good[0] = u0;
  good[2] = u2;
  bad[0] = bad0;
  assert_hl_ok(hilock_redlock_new(good, N, NAME, NAMELEN, 5000, &o, &rl),
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  /* Node 0 took it behind its password, node 2 in db 3. */
  c = hl_redis_connect(&nodes[0]);
  hl_redis_ok(c, "AUTH s3cret");
  assert_true(hl_redis_exists(c, KEY, strlen(KEY)));
  redisFree(c);
  c = hl_redis_connect(&nodes[2]);
  assert_false(hl_redis_exists(c, KEY, strlen(KEY)));
  hl_redis_ok(c, "SELECT 3");
  assert_true(hl_redis_exists(c, KEY, strlen(KEY)));
  redisFree(c);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  hilock_hold_free(HILOCK_HOLD(rl));
  rl = NULL;
  /* A refused password is a configuration error, not a minority down. */
  assert_hl_rc(hilock_redlock_new(bad, N, NAME, NAMELEN, 5000, &o, &rl),
               HILOCK_EAUTH, hilock_hold_errmsg(HILOCK_HOLD(rl)));
  {
    char want[64];
    snprintf(want, sizeof(want), "127.0.0.1:%d: redis: WRONGPASS",
             nodes[0].port);
    assert_substr(hilock_hold_errmsg(HILOCK_HOLD(rl)), want);
  }
  hilock_hold_free(HILOCK_HOLD(rl));
  hl_server_stop(&nodes[0]); /* the next setup restarts it without a password */
}

/* ## Grants ------------------------------------------------------------------- */

static void test_grant_sets_one_token_on_every_node(void **state) {
  hilock_redlock *a = make(10000), *b = make(10000);
  int64_t t0 = hl_now_ms(), validity;
  int owned = 0, locked = 0;
  (void)state;
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  /* The TTL less the drift allowance and, at most, the time the round
   * took (however long a loaded machine makes it), less 1 ms for the
   * rounding of the two clocks' milliseconds. */
  validity = hilock_hold_validity_ms(HILOCK_HOLD(a));
  assert_i64_between(validity, 10000 - 102 - (hl_now_ms() - t0) - 1, 10000 - 102);
  /* A new name's first fence is the servers' clock in microseconds. */
  assert_true(hilock_hold_fence(HILOCK_HOLD(a)) > 1000000000000000ULL);
  for (int i = 0; i < N; i++) {
    char *v = node_get(i, KEY);
    redisContext *c = hl_redis_connect(&nodes[i]);
    assert_non_null(v);
    assert_string_equal(v, hilock_hold_token(HILOCK_HOLD(a)));
    assert_i64_between(hl_redis_pttl(c, KEY, strlen(KEY)), 8000, 10000);
    redisFree(c);
    free(v);
  }
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(a), &owned), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_true(owned);
  assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(b), &locked), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_true(locked);
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(b)), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(b)), "held by another owner on 5 of 5");
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(a)), HILOCK_EINVAL,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(nodes_with_key(), 0);
  assert_false(hilock_hold_held(HILOCK_HOLD(a)));
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(a)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  /* Each node's new counter started at its own clock: larger, not +1. */
  assert_true(hilock_hold_fence(HILOCK_HOLD(b)) > hilock_hold_fence(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

static void test_flushed_scripts_are_sent_again_as_eval(void **state) {
  hilock_redlock *a = make(10000);
  (void)state;
  /* The connections are open (their SCRIPT LOADs are done); then every
   * node forgets its scripts: each answers NOSCRIPT once, and the round
   * sends EVAL with the source on that node. */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  for (int i = 0; i < N; i++) {
    redisContext *c = hl_redis_connect(&nodes[i]);
    hl_redis_ok(c, "SCRIPT FLUSH");
    hl_redis_ok(c, "CONFIG RESETSTAT");
    redisFree(c);
  }
  /* Granted once a majority answered (the rest are not waited for). */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_true(nodes_with_key() >= N / 2 + 1);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  /* Each node that ran a script of the cycle answered NOSCRIPT first,
   * then ran it as EVAL; a majority did (a node whose NOSCRIPT came after
   * its round was decided is not waited for, and gets no EVAL then). */
  int ran = 0;
  for (int i = 0; i < N; i++) {
    redisContext *c = hl_redis_connect(&nodes[i]);
    redisReply *r = redisCommand(c, "INFO commandstats");
    const char *ev, *sha, *fc;
    int evals, failed;
    assert_non_null(r);
    ev = strstr(r->str, "cmdstat_eval:calls=");
    sha = strstr(r->str, "cmdstat_evalsha:");
    fc = sha != NULL ? strstr(sha, "failed_calls=") : NULL;
    evals = ev != NULL ? atoi(ev + strlen("cmdstat_eval:calls=")) : 0;
    failed = fc != NULL ? atoi(fc + strlen("failed_calls=")) : 0;
    freeReplyObject(r);
    redisFree(c);
    assert_true(evals <= failed);
    if (evals >= 1) ran++;
  }
  assert_true(ran >= N / 2 + 1);
  for (int i = 0; i < 200 && nodes_with_key() != 0; i++) hl_sleep_ms(10);
  assert_int_equal(nodes_with_key(), 0);
  hilock_hold_free(HILOCK_HOLD(a));
}

static void test_blocked_acquire_waits_its_bound_then_gets_it(void **state) {
  hilock_redlock *a = make(10000), *b = make(10000);
  int64_t t0;
  (void)state;
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  t0 = hl_now_ms();
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(b), 400), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  /* Its 400 ms bound, not a's 10 s TTL; 1.5 s of room. */
  assert_i64_between(hl_now_ms() - t0, 400, 400 + 1500);
  /* No token of b's anywhere after its failed attempts. */
  for (int i = 0; i < N; i++) {
    char *v = node_get(i, KEY);
    assert_string_equal(v, hilock_hold_token(HILOCK_HOLD(a)));
    free(v);
  }
  /* A holder whose keys lapse: b gets it within the retry delay of that. */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(b), 2000), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

/* ## Node failures --------------------------------------------------------------- */

static void test_minority_down_still_acquires_and_releases(void **state) {
  hilock_redlock *a = make(10000);
  (void)state;
  hl_server_stop(&nodes[3]);
  hl_server_stop(&nodes[4]);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(nodes_with_key(), 3);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(nodes_with_key(), 0);
  /* Back up: the next grant uses them again. */
  assert_int_equal(hl_server_restart(&nodes[3]), 0);
  assert_int_equal(hl_server_restart(&nodes[4]), 0);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(nodes_with_key(), 5);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  hilock_hold_free(HILOCK_HOLD(a));
}

/* A grant stands on a majority without waiting for every node, so a node
 * may never have had it; if part of that majority then goes down, the
 * release still ends the grant everywhere it can reach, and that is a
 * majority: it succeeds. */
static void test_release_after_the_majority_changed_succeeds(void **state) {
  hilock_redlock *a = taken(10000);
  redisContext *c;
  (void)state;
  c = hl_redis_connect(&nodes[2]); /* node 2 never had it */
  hl_redis_ok(c, "DEL %s", KEY);
  redisFree(c);
  hl_server_stop(&nodes[3]);
  hl_server_stop(&nodes[4]);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(nodes_with_key(), 0);
  hilock_hold_free(HILOCK_HOLD(a));
}

static void test_minority_slowed_still_acquires_fast(void **state) {
  hilock_redlock *a = make(10000);
  redisContext *s3, *s4;
  int64_t t0, took;
  (void)state;
  s3 = node_sleep(3, 6.0);
  s4 = node_sleep(4, 6.0);
  t0 = hl_now_ms();
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  took = hl_now_ms() - t0;
  /* Bounded by the node timeout (50 ms), not by the 6 s sleep: 2.5 s tells
   * the two apart with room for a stalled, loaded machine. */
  assert_i64_between(took, 0, 2500);
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(a)) > 10000 - took - 200);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  /* The release does not wait for the sleeping nodes either (6 s). */
  assert_true(hl_now_ms() - t0 < 4000);
  sleep_done(s3);
  sleep_done(s4);
  /* The slow nodes ran the grant and then the release, in order, on the
   * same connection: nothing is left behind (a left key lives 10 s). */
  for (int64_t end = hl_now_ms() + 5000; nodes_with_key() && hl_now_ms() < end;)
    hl_sleep_ms(5);
  assert_int_equal(nodes_with_key(), 0);
  hilock_hold_free(HILOCK_HOLD(a));
}

static void test_majority_down_fails_in_time_and_leaves_no_lock(void **state) {
  hilock_options o = hl_test_options();
  hilock_redlock *a = NULL;
  int64_t t0;
  (void)state;
  o.reconnect_ms = 4000;
  assert_hl_ok(hilock_redlock_new(urls, N, NAME, NAMELEN, 10000, &o, &a),
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  for (int i = 0; i < 3; i++) hl_server_stop(&nodes[i]);
  t0 = hl_now_ms();
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(a)), HILOCK_ENOQUORUM,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  /* Refused at once, not retried through the 4 s reconnect budget; 2 s of
   * room for a loaded machine. */
  assert_i64_between(hl_now_ms() - t0, 0, 2000);
  /* The message names every failed node with its error. */
  for (int i = 0; i < 3; i++) {
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d: connect", nodes[i].port);
    assert_substr(hilock_hold_errmsg(HILOCK_HOLD(a)), addr);
  }
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(a)), "granted on 2");
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(a)), HILOCK_ENOQUORUM);
  assert_false(node_has_key(3));
  assert_false(node_has_key(4));
  t0 = hl_now_ms();
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(a), 500), HILOCK_ENOQUORUM,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  /* Tried until its 500 ms bound, not given up before it, and not kept on
   * to the 4 s reconnect budget; 1.5 s of room. */
  assert_i64_between(hl_now_ms() - t0, 500, 500 + 1500);
  assert_false(node_has_key(3));
  assert_false(node_has_key(4));
  assert_false(hilock_hold_held(HILOCK_HOLD(a)));
  /* Waiting forever: an outage ends the wait after the reconnect budget
   * (4 s here), not before it and not never; 2 s of room. */
  t0 = hl_now_ms();
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(a), HILOCK_WAIT_FOREVER),
               HILOCK_ENOQUORUM, hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_i64_between(hl_now_ms() - t0, 4000, 4000 + 2000);
  hilock_hold_free(HILOCK_HOLD(a));
}

static void test_constructor_needs_a_majority(void **state) {
  hilock_redlock *rl = NULL;
  hilock_options o = hl_test_options();
  (void)state;
  for (int i = 0; i < 3; i++) hl_server_stop(&nodes[i]);
  assert_hl_rc(hilock_redlock_new(urls, N, NAME, NAMELEN, 1000, &o, &rl),
               HILOCK_ENOQUORUM, hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(rl)), "2 of 5 nodes answered");
  hilock_hold_free(HILOCK_HOLD(rl));
}

static void test_slowed_majority_leaves_nothing_behind(void **state) {
  hilock_redlock *a = make(10000);
  redisContext *s[3];
  int64_t t0;
  (void)state;
  for (int i = 0; i < 3; i++) s[i] = node_sleep_send(i, 4.0);
  for (int i = 0; i < 3; i++) node_wait_asleep(i);
  t0 = hl_now_ms();
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(a)), HILOCK_ENOQUORUM,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  /* The node timeout (50 ms), not the 4 s sleep: 2 s leaves room for a
   * stalled, loaded machine. */
  assert_i64_between(hl_now_ms() - t0, 0, 2000);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(a)), "no reply within 50 ms");
  for (int i = 0; i < 3; i++) sleep_done(s[i]);
  /* The slow nodes set the token after all, then ran the release that
   * followed it on the same connection (a left key lives 10 s). */
  for (int64_t end = hl_now_ms() + 5000; nodes_with_key() && hl_now_ms() < end;)
    hl_sleep_ms(5);
  assert_int_equal(nodes_with_key(), 0);
  hilock_hold_free(HILOCK_HOLD(a));
}

static void test_majority_held_elsewhere_is_busy_and_cleaned(void **state) {
  hilock_redlock *a = make(10000);
  (void)state;
  for (int i = 0; i < 3; i++) {
    redisContext *c = hl_redis_connect(&nodes[i]);
    hl_redis_ok(c, "SET %s other PX 10000", KEY);
    redisFree(c);
  }
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(a)), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_false(node_has_key(3));
  assert_false(node_has_key(4));
  for (int i = 0; i < 3; i++) {
    char *v = node_get(i, KEY);
    assert_string_equal(v, "other");
    free(v);
  }
  hilock_hold_free(HILOCK_HOLD(a));
}

/* ## Restarts: the documented unsafety and its mitigations -------------------- */

/* a holds on nodes 0..2 (3 and 4 were down); 3 and 4 come back empty. */
static void hold_on_first_three(hilock_redlock *a) {
  hl_server_stop(&nodes[3]);
  hl_server_stop(&nodes[4]);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(hl_server_restart(&nodes[3]), 0);
  assert_int_equal(hl_server_restart(&nodes[4]), 0);
  assert_int_equal(nodes_with_key(), 3);
}

static void test_restart_without_persistence_grants_twice(void **state) {
  hilock_redlock *a = make(5000), *b = make(5000);
  (void)state;
  hold_on_first_three(a);
  /* Node 2 crashes and restarts at once, with no persistence. */
  assert_int_equal(hl_server_restart(&nodes[2]), 0);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  /* Both believe they hold the lock: the safety violation the Redlock
   * description warns about. */
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(a)) > 0);
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(b)) > 0);
  assert_true(hilock_hold_held(HILOCK_HOLD(a)) && hilock_hold_held(HILOCK_HOLD(b)));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

static void test_delayed_restart_prevents_the_second_grant(void **state) {
  hilock_redlock *a = make(1500), *b = make(1500);
  int tries = 0;
  (void)state;
  hold_on_first_three(a);
  hl_server_stop(&nodes[2]);
  /* Node 2 stays down for longer than the TTL. */
  while (hilock_hold_validity_ms(HILOCK_HOLD(a)) > 0) {
    int rc = hilock_hold_try_acquire(HILOCK_HOLD(b));
    assert_true(rc != HILOCK_OK);
    tries++;
    hl_sleep_ms(50);
  }
  assert_true(tries >= 5);
  hl_sleep_ms(200); /* the keys of a, with their TTL, are gone by now */
  assert_int_equal(hl_server_restart(&nodes[2]), 0);
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(b), 2000), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(a)), 0);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

static void test_aof_fsync_always_prevents_the_second_grant(void **state) {
  hilock_redlock *a, *b;
  char cmd[400];
  (void)state;
  /* Node 2 with appendfsync always. */
  hl_server_stop(&nodes[2]);
  nodes[2].extra[BASE_EXTRA] = "--appendonly";
  nodes[2].extra[BASE_EXTRA + 1] = "yes";
  nodes[2].extra[BASE_EXTRA + 2] = "--appendfsync";
  nodes[2].extra[BASE_EXTRA + 3] = "always";
  nodes[2].nextra = BASE_EXTRA + 4;
  assert_int_equal(hl_server_restart(&nodes[2]), 0);
  a = make(5000);
  b = make(5000);
  hold_on_first_three(a);
  assert_int_equal(hl_server_restart(&nodes[2]), 0); /* SIGKILL, restart */
  assert_true(node_has_key(2));
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(b)), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(a)) > 0);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
  hl_server_stop(&nodes[2]);
  nodes[2].nextra = BASE_EXTRA;
  snprintf(cmd, sizeof(cmd), "rm -rf '%s/appendonlydir'", nodes[2].dir);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(hl_server_restart(&nodes[2]), 0);
}

/* ## Fencing ------------------------------------------------------------------- */

static void test_fence_increases_across_diverged_counters(void **state) {
  hilock_redlock *a = make(10000), *b = make(10000);
  (void)state;
  for (int i = 0; i < 3; i++) {
    redisContext *c = hl_redis_connect(&nodes[i]);
    /* Ahead of the clocks: each grant adds one to its node's counter. */
    hl_redis_ok(c, "SET %s %lld", FKEY,
                HL_FENCE_AHEAD + (i == 0 ? 100 : 10 * i));
    redisFree(c);
  }
  /* The majority is nodes 0..2, whose counters disagree (ahead of the
   * clock by 100, 10, 20). */
  hl_server_stop(&nodes[3]);
  hl_server_stop(&nodes[4]);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(a)), HL_FENCE_AHEAD + 101);
  /* The largest was written back before the grant returned. */
  for (int i = 1; i < 3; i++) {
    char *v = node_get(i, FKEY);
    assert_non_null(v);
    assert_int_equal(strtoll(v, NULL, 10), HL_FENCE_AHEAD + 101);
    free(v);
  }
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  /* A majority without node 0 (and with two empty nodes, whose counters
   * start at their clocks) counts past it. */
  assert_int_equal(hl_server_restart(&nodes[3]), 0);
  assert_int_equal(hl_server_restart(&nodes[4]), 0);
  hl_server_stop(&nodes[0]);
  hl_server_stop(&nodes[1]);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_true(hilock_hold_fence(HILOCK_HOLD(b)) > HL_FENCE_AHEAD + 101);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

/* Agreeing counters need no write-back: the majority already holds them. */
static void test_fence_from_agreeing_counters_is_consecutive(void **state) {
  hilock_redlock *a = make(10000);
  (void)state;
  for (int i = 0; i < N; i++) { /* every node's counter agrees */
    redisContext *c = hl_redis_connect(&nodes[i]);
    hl_redis_ok(c, "SET %s %lld", FKEY, HL_FENCE_AHEAD); /* ahead of the clocks */
    redisFree(c);
  }
  for (uint64_t k = 1; k <= 5; k++) {
    assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
    assert_int_equal(hilock_hold_fence(HILOCK_HOLD(a)), HL_FENCE_AHEAD + k);
    assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  }
  hilock_hold_free(HILOCK_HOLD(a));
}

/* ## Extension and renewal ----------------------------------------------------- */

static void test_extend_counts_with_a_majority(void **state) {
  hilock_redlock *a = taken(2000);
  int owned = 1;
  (void)state;
  assert_hl_ok(hilock_hold_extend(HILOCK_HOLD(a), 6000, 1), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_i64_between(hilock_hold_validity_ms(HILOCK_HOLD(a)), 5000, 6000);
  assert_hl_ok(hilock_hold_extend(HILOCK_HOLD(a), 1000, 0), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_i64_between(hilock_hold_validity_ms(HILOCK_HOLD(a)), 6000, 7000);
  /* Two nodes lost it: still a majority. */
  for (int i = 0; i < 2; i++) {
    redisContext *c = hl_redis_connect(&nodes[i]);
    hl_redis_ok(c, "DEL %s", KEY);
    redisFree(c);
  }
  assert_hl_ok(hilock_hold_renew(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(a), &owned), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_true(owned);
  /* A third: the majority is gone. */
  {
    redisContext *c = hl_redis_connect(&nodes[2]);
    hl_redis_ok(c, "DEL %s", KEY);
    redisFree(c);
  }
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(a), 1000, 0), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_true(hilock_hold_lost(HILOCK_HOLD(a)));
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(a)), 0);
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(a), &owned), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_false(owned);
  hilock_hold_free(HILOCK_HOLD(a));
}

static void test_extend_without_a_majority_keeps_the_old_validity(void **state) {
  hilock_redlock *a = taken(3000);
  int64_t before;
  (void)state;
  for (int i = 0; i < 3; i++) hl_server_stop(&nodes[i]);
  before = hilock_hold_validity_ms(HILOCK_HOLD(a));
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(a), 20000, 1), HILOCK_ENOQUORUM,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(a)) <= before);
  assert_false(hilock_hold_lost(HILOCK_HOLD(a)));
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(a)), HILOCK_ENOQUORUM,
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(a)), "deleted on 2 of 5");
  hilock_hold_free(HILOCK_HOLD(a));
}

/* Nodes whose keys carry a TTL of 9e16 ms (about 2.9 million years:
 * set by hand here, by a hostile or broken node in practice): an extend
 * still succeeds, with the validity capped, and the microsecond arithmetic
 * of its timing check does not overflow (UBSan in the ASan build). */
static void test_extend_with_absurd_node_ttls_is_capped(void **state) {
  hilock_redlock *a = taken(2000);
  int64_t v;
  (void)state;
  for (int i = 0; i < N; i++) {
    redisContext *c = hl_redis_connect(&nodes[i]);
    assert_int_equal(hl_redis_int(c, "PEXPIRE %s 90000000000000000", KEY), 1);
    redisFree(c);
  }
  assert_hl_ok(hilock_hold_extend(HILOCK_HOLD(a), 1000, 0), hilock_hold_errmsg(HILOCK_HOLD(a)));
  v = hilock_hold_validity_ms(HILOCK_HOLD(a));
  assert_true(v > 2000);
  assert_true(v <= HILOCK_TTL_MAX_MS);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(nodes_with_key(), 0);
  hilock_hold_free(HILOCK_HOLD(a));
}

static atomic_int lost_calls;

/* The loss callback runs on the watchdog's thread just after the hold is
 * marked lost: wait (2 s at most) for it to have been called want times. */
static void wait_lost_calls(int want) {
  int64_t t0 = hl_now_ms();
  while (atomic_load(&lost_calls) < want && hl_now_ms() - t0 < 2000)
    hl_sleep_ms(5);
}

/* A new Redlock of ttl_ms, renewed automatically (for max_hold_ms, 0:
 * without end; its losses counted in lost_calls, reset here) and taken. */
static hilock_redlock *renewed(int64_t ttl_ms, int64_t max_hold_ms) {
  hilock_redlock *a = make(ttl_ms);
  lost_calls = 0;
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(a), 1, max_hold_ms,
                                          hl_count_call, &lost_calls),
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  return a;
}

/* Wait (3 s at most) until a is lost; the time it took from t0. */
static int64_t lost_after(hilock_redlock *a, int64_t t0) {
  while (!hilock_hold_lost(HILOCK_HOLD(a)) && hl_now_ms() - t0 < 3000) hl_sleep_ms(10);
  assert_true(hilock_hold_lost(HILOCK_HOLD(a)));
  return hl_now_ms() - t0;
}

static void test_watchdog_renews_through_a_majority(void **state) {
  hilock_redlock *a = renewed(600, 0);
  (void)state;
  hl_sleep_ms(1500); /* two and a half TTLs */
  assert_int_equal(nodes_with_key(), 5);
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(a)) > 0);
  /* A node down: the other four keep it alive. */
  hl_server_stop(&nodes[4]);
  hl_sleep_ms(900);
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(a)) > 0);
  assert_false(hilock_hold_lost(HILOCK_HOLD(a)));
  assert_int_equal(lost_calls, 0);
  /* Two more lose the key: no majority can confirm any more. */
  for (int i = 0; i < 2; i++) {
    redisContext *c = hl_redis_connect(&nodes[i]);
    hl_redis_ok(c, "DEL %s", KEY);
    redisFree(c);
  }
  /* Within the validity and a renewal, with room for a loaded machine. */
  assert_i64_between(lost_after(a, hl_now_ms()), 0, 600 + 300 + 1500);
  wait_lost_calls(1);
  assert_int_equal(lost_calls, 1);
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(a)), 0);
  assert_true(hilock_hold_release(HILOCK_HOLD(a)) != HILOCK_OK);
  hilock_hold_free(HILOCK_HOLD(a));
}

static void test_max_hold_stops_renewing(void **state) {
  hilock_redlock *a = renewed(400, 700);
  (void)state;
  /* max_hold and one TTL, with room for a loaded machine; a hold renewed on
   * would never be lost. */
  assert_i64_between(lost_after(a, hl_now_ms()), 700, 700 + 400 + 1500);
  wait_lost_calls(1);
  assert_int_equal(lost_calls, 1);
  hilock_hold_free(HILOCK_HOLD(a));
}

/* ## Event loops (hilock/async.h) --------------------------------------- */

/* A runner without a client serves Redlock: a grant on a majority; a
 * second handle waits by the retry delay and gets it when the first is
 * released; a cancelled wait leaves no key on any node; with a majority of
 * nodes down the wait ends with HILOCK_ENOQUORUM, as the blocking call's
 * does. */
static void test_async_runner_serves_redlock(void **state) {
  hilock_redlock *a1 = make(10000), *a2 = make(10000);
  hilock_async *a = NULL;
  hilock_async_done d;
  uint64_t id;
  (void)state;

  assert_hl_ok(hilock_async_new(NULL, 0, &a), "runner");
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(a1), 0, 0, NULL, NULL),
               hilock_async_errmsg(a));
  d = hl_async_next(a, 20000);
  assert_hl_ok(d.status, d.errmsg);
  assert_true(hilock_hold_fence(HILOCK_HOLD(a1)) > 0);
  /* The second waits; the release lets it in. */
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(a2), 0, 10000, NULL, &id),
               "");
  hl_sleep_ms(300);
  assert_int_equal(hilock_async_pending(a), 1);
  assert_hl_ok(hilock_async_release(a, HILOCK_HOLD(a1), 0, NULL, NULL), "");
  for (int i = 0; i < 2; i++) {
    d = hl_async_next(a, 20000);
    assert_hl_ok(d.status, d.errmsg);
  }
  assert_true(hilock_hold_held(HILOCK_HOLD(a2)));
  /* a1 waits for a2 and is cancelled: nothing of it on any node. */
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(a1), 0, HILOCK_WAIT_FOREVER,
                                    NULL, &id),
               "");
  hl_sleep_ms(200);
  assert_hl_ok(hilock_async_cancel(a, id), "");
  assert_int_equal(hl_async_next(a, 20000).status, HILOCK_ECANCELED);
  assert_hl_ok(hilock_async_release(a, HILOCK_HOLD(a2), 0, NULL, NULL), "");
  assert_hl_ok(hl_async_next(a, 20000).status, "release");
  for (int i = 0; i < N; i++) {
    char *v = node_get(i, KEY);
    assert_null(v);
  }
  /* A majority down: no quorum, reported as such when the wait ends. */
  for (int i = 0; i < 3; i++) hl_server_stop(&nodes[i]);
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(a1), 0, 500, NULL, NULL),
               "");
  d = hl_async_next(a, 20000);
  assert_int_equal(d.status, HILOCK_ENOQUORUM);
  assert_true(d.errmsg[0] != '\0');
  hilock_async_free(a);
  hl_holds_free(HILOCK_HOLD(a1), HILOCK_HOLD(a2));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_invalid_arguments, setup),
      cmocka_unit_test_setup(test_auth_and_db_from_each_url, setup),
      cmocka_unit_test_setup(test_grant_sets_one_token_on_every_node, setup),
      cmocka_unit_test_setup(test_flushed_scripts_are_sent_again_as_eval, setup),
      cmocka_unit_test_setup(test_blocked_acquire_waits_its_bound_then_gets_it,
                             setup),
      cmocka_unit_test_setup(test_minority_down_still_acquires_and_releases,
                             setup),
      cmocka_unit_test_setup(test_release_after_the_majority_changed_succeeds,
                             setup),
      cmocka_unit_test_setup(test_minority_slowed_still_acquires_fast, setup),
      cmocka_unit_test_setup(
          test_majority_down_fails_in_time_and_leaves_no_lock, setup),
      cmocka_unit_test_setup(test_constructor_needs_a_majority, setup),
      cmocka_unit_test_setup(test_slowed_majority_leaves_nothing_behind, setup),
      cmocka_unit_test_setup(test_majority_held_elsewhere_is_busy_and_cleaned,
                             setup),
      cmocka_unit_test_setup(test_restart_without_persistence_grants_twice,
                             setup),
      cmocka_unit_test_setup(test_delayed_restart_prevents_the_second_grant,
                             setup),
      cmocka_unit_test_setup(test_aof_fsync_always_prevents_the_second_grant,
                             setup),
      cmocka_unit_test_setup(test_fence_increases_across_diverged_counters,
                             setup),
      cmocka_unit_test_setup(test_fence_from_agreeing_counters_is_consecutive,
                             setup),
      cmocka_unit_test_setup(test_extend_counts_with_a_majority, setup),
      cmocka_unit_test_setup(test_extend_with_absurd_node_ttls_is_capped, setup),
      cmocka_unit_test_setup(
          test_extend_without_a_majority_keeps_the_old_validity, setup),
      cmocka_unit_test_setup(test_watchdog_renews_through_a_majority, setup),
      cmocka_unit_test_setup(test_max_hold_stops_renewing, setup),
      cmocka_unit_test_setup(test_async_runner_serves_redlock, setup),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
