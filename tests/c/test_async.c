/* The completion interface (hilock/async.h) against a real server: an
 * event loop made of poll() on hilock_async_fd, as a user's loop would
 * drive it. Many waiting acquires share the client's few connections and
 * threads and are served one at a time; a wait ends at its timeout;
 * cancelling withdraws a wait and never leaves a grant behind; misuse is
 * refused with a specific status. */
#include "test_util.h"

#include <dirent.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef hl_fixture fixture;

#define N_WAITERS 200

static hilock_lock *make_lock(hilock_client *c, const char *name) {
  hilock_lock *lk = NULL;
  assert_hl_ok(hilock_lock_new(c, name, strlen(name), 30000, &lk),
               hilock_client_errmsg(c));
  return lk;
}

/* Whether the lock name's key exists on the server. */
static int lock_key_exists(fixture *f, const char *name) {
  char key[128];
  int n = snprintf(key, sizeof(key), "hilock:{%s}:lock", name);
  return hl_redis_exists(f->redis, key, (size_t)n);
}

/* The token in the lock name's key, compared with hold's. */
static int key_holds(fixture *f, const char *name, const hilock_hold *hold) {
  char key[128];
  int n = snprintf(key, sizeof(key), "hilock:{%s}:lock", name);
  char *v = hl_redis_get(f->redis, key, (size_t)n);
  int same = v != NULL && strcmp(v, hilock_hold_token(hold)) == 0;
  free(v);
  return same;
}

static hilock_async *make_async(hilock_client *c) {
  hilock_async *a = NULL;
  assert_hl_ok(hilock_async_new(c, 0, &a), hilock_client_errmsg(c));
  assert_non_null(a);
  assert_true(hilock_async_fd(a) >= 0);
  return a;
}

/* Operations that finished while the test's loop turned for another
 * reason (pump), each with its runner: next_done hands them out first. */
#define STASH_MAX 1024
static struct {
  hilock_async *a;
  hilock_async_done d;
} stash[STASH_MAX];
static size_t nstash;

/* The loop turns for ms (operations on the loop's thread go on only while
 * it does); what finishes is kept for next_done. */
static void pump(hilock_async *a, int64_t ms) {
  int64_t end = hl_now_ms() + ms;
  for (;;) {
    struct pollfd p = {hilock_async_fd(a), POLLIN, 0};
    int64_t left = end - hl_now_ms();
    hilock_async_done d;
    while (hilock_async_take(a, &d, 1) == 1) {
      assert_true(nstash < STASH_MAX);
      stash[nstash].a = a;
      stash[nstash++].d = d;
    }
    if (left <= 0) return;
    (void)poll(&p, 1, (int)left);
  }
}

/* The next finished operation of a, if one is there: 1, else 0. */
static int take_one(hilock_async *a, hilock_async_done *d) {
  for (size_t i = 0; i < nstash; i++)
    if (stash[i].a == a) {
      *d = stash[i].d;
      memmove(&stash[i], &stash[i + 1], (nstash - i - 1) * sizeof(stash[0]));
      nstash--;
      return 1;
    }
  return hilock_async_take(a, d, 1) == 1;
}

/* Wait (poll on the fd) for the next finished operation. */
static hilock_async_done next_done(hilock_async *a, int64_t timeout_ms) {
  hilock_async_done d;
  int64_t end = hl_now_ms() + timeout_ms;
  for (;;) {
    struct pollfd p = {hilock_async_fd(a), POLLIN, 0};
    int64_t left = end - hl_now_ms();
    if (take_one(a, &d)) return d;
    if (left <= 0) fail_msg("no operation finished within %lld ms",
                            (long long)timeout_ms);
    (void)poll(&p, 1, (int)left);
  }
}

/* Through runner a: an acquire of h without waiting, or a release of h,
 * started and finished with HILOCK_OK. */
static void async_acquire_ok(hilock_async *a, hilock_hold *h) {
  assert_hl_ok(hilock_async_acquire(a, h, 0, 0, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, "acquire");
}

static void async_release_ok(hilock_async *a, hilock_hold *h) {
  assert_hl_ok(hilock_async_release(a, h, 0, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, "release");
}

static int threads_now(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  assert_non_null(d);
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* 200 acquires wait on one held lock: a few connections and threads serve
 * them all, one grant at a time, each released before the next is
 * granted. */
static void many_waiters_share_connections_and_go_in_turn(void **state) {
  fixture *f = *state;
  hilock_client *holder_c = NULL;
  hilock_lock *holder, *lk[N_WAITERS];
  hilock_async *a;
  uint64_t ids[N_WAITERS], rel_ids[N_WAITERS] = {0};
  int threads_before, held = 0, granted = 0;
  long long clients;

  if (hl_blpop_mode()) skip(); /* shared waiting off: nothing to share */
  assert_hl_ok(hilock_client_new(f->server.url, NULL, &holder_c), "holder");
  holder = make_lock(holder_c, "crowd");
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(holder)), "holder's grant");
  threads_before = threads_now();
  a = make_async(f->client);
  for (int i = 0; i < N_WAITERS; i++) {
    lk[i] = make_lock(f->client, "crowd");
    assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(lk[i]), 0, 20000,
                                      (void *)(intptr_t)i, &ids[i]),
                 hilock_hold_errmsg(HILOCK_HOLD(lk[i])));
  }
  /* Every one tried once and sleeps on the one subscription (the first
   * may wait direct, in BLPOP, if its attempt came back before others of
   * the client slept on the subscription). */
  for (int64_t end = hl_now_ms() + 10000;
       !hl_wait_subscribed(f->redis, "hilock:{crowd}:wake", 1, 1) &&
       (hl_hub_mode() ||
        !hl_wait_subscribed(f->redis, "hilock:{crowd}:wake", 2, 1));)
    if (hl_now_ms() < end) pump(a, 10); else fail();
  for (int64_t end = hl_now_ms() + 10000;
       hl_cmdstat_calls(f->redis, "evalsha") < N_WAITERS + 1 &&
       hl_now_ms() < end;)
    pump(a, 10);
  assert_int_equal(hilock_async_pending(a), N_WAITERS);
  clients = hl_info_field(f->redis, "clients", "connected_clients");
  /* This test's raw connection, the holder's, the subscriber and the
   * client's pool (its bound: 6 by default), whoever runs the attempts
   * (the loop's thread or the workers): not one per waiter. */
  assert_true(clients <= 3 + 6);
  assert_true(threads_now() - threads_before <= 4);

  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(holder)), "holder's release");
  while (granted < N_WAITERS) {
    hilock_async_done d = next_done(a, 20000);
    int i = (int)(intptr_t)d.data;
    assert_true(i >= 0 && i < N_WAITERS);
    if (d.id == ids[i]) {
      /* An acquire: granted, and the key is this grant's, so the grant
       * before it was released on the server first. (Completions come
       * from the loop's thread and the workers, so a release's may be
       * taken after later grants: on a slow machine, valgrind's, several
       * later. The count of held grants says nothing about the lock.) */
      assert_hl_ok(d.status, hilock_hold_errmsg(HILOCK_HOLD(lk[i])));
      assert_true(key_holds(f, "crowd", HILOCK_HOLD(lk[i])));
      held++;
      granted++;
      assert_hl_ok(hilock_async_release(a, HILOCK_HOLD(lk[i]), 0, d.data,
                                        &rel_ids[i]),
                   "release");
    } else {
      assert_true(d.id == rel_ids[i]);
      assert_hl_ok(d.status, "release");
      held--;
    }
    assert_true(held >= 0);
  }
  while (held-- > 0) /* the releases still in flight */
    assert_hl_ok(next_done(a, 20000).status, "release");
  assert_int_equal(hilock_async_pending(a), 0);
  hilock_async_free(a);
  for (int i = 0; i < N_WAITERS; i++) hilock_hold_free(HILOCK_HOLD(lk[i]));
  hilock_hold_free(HILOCK_HOLD(holder));
  hilock_client_free(holder_c);
}

/* An acquire on a held lock ends with HILOCK_BUSY at its timeout, not
 * before; wait 0 makes one attempt. */
static void a_wait_ends_at_its_timeout(void **state) {
  fixture *f = *state;
  hilock_lock *holder = make_lock(f->client, "timeout");
  hilock_lock *w = make_lock(f->client, "timeout");
  hilock_async *a = make_async(f->client);
  hilock_async_done d;
  int64_t t0;
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(holder)), "holder");
  t0 = hl_now_ms();
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(w), 0, 300, NULL, NULL), "");
  d = next_done(a, 10000);
  assert_int_equal(d.status, HILOCK_BUSY);
  /* Not before its 300 ms (a lower bound: load only delays). */
  assert_true(hl_now_ms() - t0 >= 300);
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(w), 0, 0, NULL, NULL), "");
  assert_int_equal(next_done(a, 10000).status, HILOCK_BUSY);
  /* Freed: the next acquire is granted. */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(holder)), "release");
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(w), 0, 0, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, hilock_hold_errmsg(HILOCK_HOLD(w)));
  assert_true(hilock_hold_fence(HILOCK_HOLD(w)) > 0);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(w)), "release");
  hilock_async_free(a);
  hl_holds_free(HILOCK_HOLD(w), HILOCK_HOLD(holder));
}

/* The context switches of every thread of the process but the calling
 * one (its workers, the client's threads). */
static long long others_switches(void) {
  long long sum = 0;
  char path[320], line[128];
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  long self = (long)syscall(SYS_gettid);
  assert_non_null(d);
  while ((e = readdir(d)) != NULL) {
    FILE *fp;
    if (e->d_name[0] == '.' || atol(e->d_name) == self) continue;
    snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
    if ((fp = fopen(path, "r")) == NULL) continue; /* ended meanwhile */
    while (fgets(line, sizeof(line), fp) != NULL)
      if (strncmp(line, "voluntary_ctxt_switches:", 24) == 0 ||
          strncmp(line, "nonvoluntary_ctxt_switches:", 27) == 0)
        sum += atoll(strchr(line, ':') + 1);
    fclose(fp);
  }
  closedir(d);
  return sum;
}

/* An uncontended acquire and release run on the loop's own thread: 200 of
 * each wake no other thread of the process (a worker would be woken, and
 * switch, at least once per operation). */
static void uncontended_operations_run_on_the_loops_thread(void **state) {
  fixture *f = *state;
  hilock_lock *lk = make_lock(f->client, "here");
  hilock_async *a = make_async(f->client);
  long long before;
  /* Warm: the pool's connection and the script cache. */
  async_acquire_ok(a, HILOCK_HOLD(lk));
  async_release_ok(a, HILOCK_HOLD(lk));
  before = others_switches();
  for (int i = 0; i < 200; i++) {
    async_acquire_ok(a, HILOCK_HOLD(lk));
    assert_true(lock_key_exists(f, "here"));
    async_release_ok(a, HILOCK_HOLD(lk));
  }
  /* The client's own threads (renewal, shared waiting) may tick a few
   * times meanwhile; 400 operations handed to workers switch 400 times
   * at least. */
  assert_true(others_switches() - before < 100);
  assert_false(lock_key_exists(f, "here"));
  hilock_async_free(a);
  hilock_hold_free(HILOCK_HOLD(lk));
}

/* A client made with connect_later on a host name: its first operation
 * runs on the loop's thread, resolves the name (on a thread of its own,
 * the loop polling meanwhile), connects and is granted. */
static void the_first_operation_resolves_and_connects(void **state) {
  fixture *f = *state;
  hilock_options o = hl_test_options();
  hilock_client *c = NULL;
  hilock_async *a;
  hilock_lock *lk;
  char url[64];
  o.connect_later = 1;
  snprintf(url, sizeof(url), "redis://localhost:%d", f->server.port);
  assert_hl_ok(hilock_client_new(url, &o, &c), hilock_client_errmsg(c));
  lk = make_lock(c, "later");
  a = make_async(c);
  for (int i = 0; i < 3; i++) {
    async_acquire_ok(a, HILOCK_HOLD(lk));
    assert_true(key_holds(f, "later", HILOCK_HOLD(lk)));
    async_release_ok(a, HILOCK_HOLD(lk));
  }
  hilock_async_free(a);
  hilock_hold_free(HILOCK_HOLD(lk));
  hilock_client_free(c);
}

/* A release rings one waiter: the waiting acquire is granted right after
 * it, long before the holder's TTL. */
static void a_release_wakes_the_waiting_acquire(void **state) {
  fixture *f = *state;
  hilock_client *hc = NULL;
  hilock_lock *holder, *w = make_lock(f->client, "wake");
  hilock_async *a = make_async(f->client);
  hilock_async_done d;
  assert_hl_ok(hilock_client_new(f->server.url, NULL, &hc), "holder");
  holder = make_lock(hc, "wake");
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(holder)), "holder");
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(w), 0, HILOCK_WAIT_FOREVER,
                                    NULL, NULL),
               "");
  pump(a, 200);
  assert_int_equal(hilock_async_take(a, &d, 1), 0); /* still waiting */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(holder)), "release");
  d = next_done(a, 10000); /* the holder's TTL is 30 s */
  assert_hl_ok(d.status, hilock_hold_errmsg(HILOCK_HOLD(w)));
  assert_true(hilock_hold_held(HILOCK_HOLD(w)));
  async_release_ok(a, HILOCK_HOLD(w));
  assert_false(lock_key_exists(f, "wake"));
  hilock_async_free(a);
  hl_holds_free(HILOCK_HOLD(w), HILOCK_HOLD(holder));
  hilock_client_free(hc);
}

/* Whoever reads the shared waiting socket rings the right operation: two
 * runners of one client (one worker each) wait on four locks, which are
 * released in one burst (several rings in one turn at the socket, some for
 * the other runner); every acquire is granted. Then, just after the last
 * grant (the runners still hold the socket), a thread of the same client
 * waits on a fifth lock and is woken by its release. Every bound is far
 * below the holders' 30 s TTL: a missed ring fails the wait. */
static void rings_reach_every_runner_and_thread(void **state) {
  fixture *f = *state;
  hilock_client *hc = NULL;
  enum { N = 4 };
  const char *names[N] = {"ring:a", "ring:b", "ring:c", "ring:d"};
  hilock_lock *holders[N], *ws[N], *h5, *w5;
  hilock_async *r[2];
  hl_waiter tw;
  int granted = 0;
  assert_hl_ok(hilock_client_new(f->server.url, NULL, &hc), "holder");
  for (int i = 0; i < 2; i++)
    assert_hl_ok(hilock_async_new(f->client, 1, &r[i]), "runner");
  for (int i = 0; i < N; i++) {
    holders[i] = make_lock(hc, names[i]);
    ws[i] = make_lock(f->client, names[i]);
    assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(holders[i])), "holder");
    assert_hl_ok(hilock_async_acquire(r[i % 2], HILOCK_HOLD(ws[i]), 0, 20000,
                                      ws[i], NULL),
                 "");
  }
  while (hilock_client_waiting(f->client) < N) {
    pump(r[0], 2);
    pump(r[1], 2);
  }
  for (int i = 0; i < N; i++)
    assert_hl_ok(hilock_hold_release(HILOCK_HOLD(holders[i])), "release");
  while (granted < N) {
    hilock_async_done d;
    struct pollfd p[2] = {{hilock_async_fd(r[0]), POLLIN, 0},
                          {hilock_async_fd(r[1]), POLLIN, 0}};
    (void)poll(p, 2, 1000);
    for (int i = 0; i < 2; i++)
      while (take_one(r[i], &d)) {
        assert_hl_ok(d.status, d.errmsg); /* not HILOCK_BUSY */
        assert_true(hilock_hold_held((hilock_hold *)d.data));
        granted++;
      }
  }
  /* The runners read the socket a while after their last wait: a thread
   * that waits now is woken all the same. */
  h5 = make_lock(hc, "ring:e");
  w5 = make_lock(f->client, "ring:e");
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(h5)), "holder");
  hl_waiter_run(&tw, HILOCK_HOLD(w5), &hl_lock_verbs, 20000, 1);
  while (hilock_client_waiting(f->client) < 1) hl_sleep_ms(1);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(h5)), "release");
  hl_waiter_join(&tw);
  assert_hl_ok(tw.rc, "the thread's acquire");
  for (int i = 0; i < N; i++) {
    async_release_ok(r[i % 2], HILOCK_HOLD(ws[i]));
  }
  for (int i = 0; i < 2; i++) hilock_async_free(r[i]);
  for (int i = 0; i < N; i++) {
    hl_holds_free(HILOCK_HOLD(ws[i]), HILOCK_HOLD(holders[i]));
  }
  hl_holds_free(HILOCK_HOLD(w5), HILOCK_HOLD(h5));
  hilock_client_free(hc);
}

/* A release rings a waiting acquire: the fd may turn readable early (the
 * loop is woken while the attempt is on the wire), and a take then finds
 * nothing; but it never stays readable with nothing to take (a loop would
 * spin), and the acquire is granted. */
static void an_early_wake_up_finds_nothing_and_clears(void **state) {
  fixture *f = *state;
  hilock_client *hc = NULL;
  hilock_lock *holder, *w = make_lock(f->client, "early");
  hilock_async *a = make_async(f->client);
  hilock_async_done d;
  int empty = 0;
  assert_hl_ok(hilock_client_new(f->server.url, NULL, &hc), "holder");
  holder = make_lock(hc, "early");
  for (int round = 0; round < 5; round++) {
    assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(holder)), "holder");
    assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(w), 0, 20000, NULL,
                                      NULL),
                 "");
    while (hilock_client_waiting(f->client) < 1) pump(a, 1);
    assert_hl_ok(hilock_hold_release(HILOCK_HOLD(holder)), "release");
    for (;;) {
      struct pollfd p = {hilock_async_fd(a), POLLIN, 0};
      assert_int_equal(poll(&p, 1, 20000), 1);
      if (hilock_async_take(a, &d, 1) == 1) break;
      empty++;
      /* Each rung attempt wakes the loop early once. */
      assert_true(empty <= 3 * (round + 1));
    }
    assert_hl_ok(d.status, d.errmsg);
    async_release_ok(a, HILOCK_HOLD(w));
  }
  hilock_async_free(a);
  hl_holds_free(HILOCK_HOLD(w), HILOCK_HOLD(holder));
  hilock_client_free(hc);
}

/* Cancelling a waiting acquire ends it with HILOCK_ECANCELED, and it does
 * not take the lock when the holder lets go. */
static void cancel_withdraws_a_waiting_acquire(void **state) {
  fixture *f = *state;
  hilock_lock *holder = make_lock(f->client, "cancel");
  hilock_lock *w[20];
  uint64_t ids[20];
  hilock_async *a = make_async(f->client);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(holder)), "holder");
  for (int i = 0; i < 20; i++) {
    w[i] = make_lock(f->client, "cancel");
    assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(w[i]), 0,
                                      HILOCK_WAIT_FOREVER, NULL, &ids[i]),
                 "");
  }
  pump(a, 100);
  for (int i = 0; i < 20; i++) assert_hl_ok(hilock_async_cancel(a, ids[i]), "");
  for (int i = 0; i < 20; i++)
    assert_int_equal(next_done(a, 10000).status, HILOCK_ECANCELED);
  /* Finished: it cannot be cancelled again. */
  assert_int_equal(hilock_async_cancel(a, ids[0]), HILOCK_EINVAL);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(holder)), "release");
  pump(a, 100);
  assert_false(lock_key_exists(f, "cancel"));
  for (int i = 0; i < 20; i++) {
    assert_false(hilock_hold_held(HILOCK_HOLD(w[i])));
    hilock_hold_free(HILOCK_HOLD(w[i]));
  }
  hilock_async_free(a);
  hilock_hold_free(HILOCK_HOLD(holder));
}

/* Cancelling acquires whose attempts are on the wire of a paused server:
 * each ends shortly with HILOCK_ECANCELED, not when the server answers (the
 * command timeout is 30 s, the pause 3 s), whether the loop's thread or a
 * worker runs it; once the server runs the attempts, their undo follows:
 * nothing is held. */
static void cancel_ends_an_attempt_a_paused_server_holds(void **state) {
  fixture *f = *state;
  hilock_options o = hl_test_options();
  hilock_client *c;
  enum { N = 6 }; /* more than the loop's thread runs at once */
  hilock_lock *w[N];
  uint64_t ids[N];
  hilock_async *a;
  char name[32];
  int64_t paused;
  o.command_timeout_ms = 30000;
  c = hl_client(f->server.url, &o);
  a = make_async(c);
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  hl_redis_ok(f->redis, "CLIENT PAUSE 3000 WRITE");
  paused = hl_now_ms();
  for (int i = 0; i < N; i++) {
    snprintf(name, sizeof(name), "cut%d", i);
    w[i] = make_lock(c, name);
    assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(w[i]), 0,
                                      HILOCK_WAIT_FOREVER, NULL, &ids[i]),
                 "");
  }
  pump(a, 200);
  for (int i = 0; i < N; i++) assert_hl_ok(hilock_async_cancel(a, ids[i]), "");
  /* Within the pause: next_done fails the test past 1.5 s. */
  for (int i = 0; i < N; i++)
    assert_int_equal(next_done(a, 1500).status, HILOCK_ECANCELED);
  assert_true(hl_now_ms() - paused < 3000);
  for (int i = 0; i < N; i++) assert_false(hilock_hold_held(HILOCK_HOLD(w[i])));
  hl_sleep_ms(3000 - (hl_now_ms() - paused) + 300);
  for (int i = 0; i < N; i++) {
    snprintf(name, sizeof(name), "cut%d", i);
    assert_false(lock_key_exists(f, name));
    hilock_hold_free(HILOCK_HOLD(w[i]));
  }
  hilock_async_free(a);
  hilock_client_free(c);
}

/* A cancel that races the grant: either the acquire finished first (the
 * cancel is refused and the caller holds the lock) or it ends cancelled
 * and nothing is held. Never cancelled with the key left behind. */
static void a_cancelled_grant_is_given_back(void **state) {
  fixture *f = *state;
  hilock_lock *w = make_lock(f->client, "race");
  hilock_async *a = make_async(f->client);
  int cancelled = 0, granted = 0;
  for (int i = 0; i < 60; i++) {
    uint64_t id;
    hilock_async_done d;
    assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(w), 0, 1000, NULL, &id), "");
    if (i % 3 == 1) pump(a, 1);
    if (hilock_async_cancel(a, id) != HILOCK_OK) {
      d = next_done(a, 10000);
      assert_hl_ok(d.status, "");
    } else {
      d = next_done(a, 10000);
    }
    if (d.status == HILOCK_ECANCELED) {
      cancelled++;
      assert_false(lock_key_exists(f, "race"));
      assert_false(hilock_hold_held(HILOCK_HOLD(w)));
    } else {
      assert_hl_ok(d.status, hilock_hold_errmsg(HILOCK_HOLD(w)));
      granted++;
      assert_true(lock_key_exists(f, "race"));
      assert_hl_ok(hilock_hold_release(HILOCK_HOLD(w)), "release");
    }
  }
  assert_true(cancelled > 0);
  hilock_async_free(a);
  hilock_hold_free(HILOCK_HOLD(w));
  (void)granted;
}

/* The semaphore, the multi-key lock, the segmented lock and the
 * sequential lock run here too; a type not served yet says so. */
static void other_families(void **state) {
  fixture *f = *state;
  hilock_async *a = make_async(f->client);
  hilock_semaphore *s1 = NULL, *s2 = NULL, *s3 = NULL;
  hilock_multi_lock *m = NULL;
  hilock_segmented_lock *g = NULL;
  hilock_rlock *r = NULL;
  const char *names[2] = {"ma", "mb"};
  uint64_t id3;

  assert_hl_ok(hilock_semaphore_new(f->client, "sem", 3, 2, 30000, &s1), "");
  assert_hl_ok(hilock_semaphore_new(f->client, "sem", 3, 2, 30000, &s2), "");
  assert_hl_ok(hilock_semaphore_new(f->client, "sem", 3, 2, 30000, &s3), "");
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(s1), 0, 5000, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, "s1");
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(s2), 0, 5000, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, "s2");
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(s3), 0, 5000, NULL, &id3), "");
  pump(a, 100);
  assert_int_equal(hilock_async_pending(a), 1); /* both permits are out */
  assert_hl_ok(hilock_async_release(a, HILOCK_HOLD(s1), 0, NULL, NULL), "");
  for (int i = 0; i < 2; i++) {
    hilock_async_done d = next_done(a, 10000);
    assert_hl_ok(d.status, d.id == id3 ? "s3" : "release");
  }
  assert_true(hilock_hold_held(HILOCK_HOLD(s3)));

  assert_hl_ok(hilock_multi_lock_new(f->client, names, 2, 30000, &m), "");
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(m), 0, 5000, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_hl_ok(hilock_async_release(a, HILOCK_HOLD(m), 0, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, "multi release");

  assert_hl_ok(hilock_segmented_lock_new(f->client, "seg", 3, 4, 30000, &g), "");
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(g), 0, 5000, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, hilock_hold_errmsg(HILOCK_HOLD(g)));
  assert_true(hilock_segmented_lock_segment(g) < 4);
  assert_hl_ok(hilock_async_release(a, HILOCK_HOLD(g), 0, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, "seg release");

  {
    hilock_sequential_lock *q = NULL;
    assert_hl_ok(hilock_sequential_lock_new(f->client, "sq", 2, 30000, &q), "");
    assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(q), 0, 5000, NULL, NULL), "");
    assert_hl_ok(next_done(a, 10000).status, hilock_hold_errmsg(HILOCK_HOLD(q)));
    assert_hl_ok(hilock_async_release(a, HILOCK_HOLD(q), 0, NULL, NULL), "");
    assert_hl_ok(next_done(a, 10000).status, "sequential release");
    hilock_hold_free(HILOCK_HOLD(q));
  }

  /* The reentrant and read-write locks need an owner. */
  assert_hl_ok(hilock_rlock_new(f->client, "r", 1, 30000, &r), "");
  assert_int_equal(hilock_async_acquire(a, HILOCK_HOLD(r), 0, 0, NULL, NULL),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_async_acquire(a, HILOCK_HOLD(r),
                                        HILOCK_ASYNC_OWNER_MAX + 1, 0, NULL,
                                        NULL),
                   HILOCK_EINVAL);
  {
    hilock_rwlock *rw = NULL;
    assert_hl_ok(hilock_rwlock_new(f->client, "rw", 2, 30000, &rw), "");
    assert_int_equal(hilock_async_acquire(a, HILOCK_HOLD(rw), 0, 0, NULL, NULL),
                     HILOCK_EINVAL);
    assert_int_equal(hilock_async_read_acquire(a, rw, 0, 0, NULL, NULL),
                     HILOCK_EINVAL);
    hilock_hold_free(HILOCK_HOLD(rw));
  }
  hilock_async_free(a);
  hl_holds_free(HILOCK_HOLD(r), HILOCK_HOLD(g), HILOCK_HOLD(m), HILOCK_HOLD(s3),
                HILOCK_HOLD(s2), HILOCK_HOLD(s1));
}

/* The fair lock in an event loop: waiters are served in the order they
 * queued; 50 waiters cancelled leave the queue, so the one behind them is
 * served as soon as the holder lets go. */
static void fair_lock_serves_in_order_and_cancel_leaves_the_queue(
    void **state) {
  fixture *f = *state;
  enum { IN_LINE = 5, CANCELLED = 50 };
  hilock_fair_lock *holder = NULL, *w[IN_LINE], *gone[CANCELLED], *last = NULL;
  uint64_t ids[IN_LINE], gone_ids[CANCELLED];
  hilock_async *a = make_async(f->client);
  int64_t n = 0;

  assert_hl_ok(hilock_fair_lock_new(f->client, "fifo", 4, 30000, &holder), "");
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(holder)), "holder");
  for (int i = 0; i < IN_LINE; i++) {
    assert_hl_ok(hilock_fair_lock_new(f->client, "fifo", 4, 30000, &w[i]), "");
    assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(w[i]), 0, 20000,
                                      (void *)(intptr_t)i, &ids[i]),
                 "");
    /* Queued before the next one starts. */
    for (int64_t end = hl_now_ms() + 5000; n != i + 1 && hl_now_ms() < end;) {
      assert_hl_ok(hilock_fair_lock_waiters(holder, &n), "");
      if (n != i + 1) pump(a, 5);
    }
    assert_int_equal(n, i + 1);
  }
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(holder)), "release");
  for (int i = 0; i < IN_LINE; i++) {
    hilock_async_done d = next_done(a, 20000);
    assert_int_equal(d.id, ids[i]); /* in the order they queued */
    assert_hl_ok(d.status, hilock_hold_errmsg(HILOCK_HOLD(w[i])));
    assert_hl_ok(hilock_hold_release(HILOCK_HOLD(w[i])), "release");
  }

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(holder)), "holder again");
  for (int i = 0; i < CANCELLED; i++) {
    assert_hl_ok(hilock_fair_lock_new(f->client, "fifo", 4, 30000, &gone[i]),
                 "");
    assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(gone[i]), 0,
                                      HILOCK_WAIT_FOREVER, NULL, &gone_ids[i]),
                 "");
  }
  for (int64_t end = hl_now_ms() + 10000; n != CANCELLED && hl_now_ms() < end;) {
    assert_hl_ok(hilock_fair_lock_waiters(holder, &n), "");
    if (n != CANCELLED) pump(a, 10);
  }
  assert_int_equal(n, CANCELLED);
  for (int i = 0; i < CANCELLED; i++)
    assert_hl_ok(hilock_async_cancel(a, gone_ids[i]), "");
  for (int i = 0; i < CANCELLED; i++)
    assert_int_equal(next_done(a, 20000).status, HILOCK_ECANCELED);
  assert_hl_ok(hilock_fair_lock_waiters(holder, &n), "");
  assert_int_equal(n, 0); /* every cancelled waiter left the queue */
  assert_hl_ok(hilock_fair_lock_new(f->client, "fifo", 4, 30000, &last), "");
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(last), 0, 20000, NULL, NULL),
               "");
  pump(a, 100);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(holder)), "release");
  assert_hl_ok(next_done(a, 20000).status, hilock_hold_errmsg(HILOCK_HOLD(last)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(last)), "release");

  hilock_async_free(a);
  for (int i = 0; i < IN_LINE; i++) hilock_hold_free(HILOCK_HOLD(w[i]));
  for (int i = 0; i < CANCELLED; i++) hilock_hold_free(HILOCK_HOLD(gone[i]));
  hl_holds_free(HILOCK_HOLD(last), HILOCK_HOLD(holder));
}

/* The reentrant lock's owner is the number given (a task's): an owner
 * re-enters its own hold, another owner on the same handle waits, and the
 * blocking API's thread is a third owner. */
static void rlock_owners_are_the_numbers_given(void **state) {
  fixture *f = *state;
  hilock_rlock *r = NULL;
  hilock_async *a = make_async(f->client);
  uint64_t id2;
  hilock_async_done d;
  int64_t count = 0;

  assert_hl_ok(hilock_rlock_new(f->client, "own", 3, 30000, &r), "");
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(r), 1, 0, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, hilock_hold_errmsg(HILOCK_HOLD(r)));
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(r), 1, 0, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, "re-entry");
  /* Owner 2 waits; the thread (the blocking API) is not owner 1 either. */
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(r), 2, 20000, NULL, &id2),
               "");
  assert_int_equal(hilock_hold_try_acquire(HILOCK_HOLD(r)), HILOCK_BUSY);
  assert_hl_ok(hilock_rlock_hold_count(r, &count), "");
  assert_int_equal(count, 0); /* the calling thread holds nothing */
  pump(a, 100);
  assert_int_equal(hilock_async_pending(a), 1);
  /* Owner 1 leaves twice; then owner 2 is granted. */
  assert_hl_ok(hilock_async_release(a, HILOCK_HOLD(r), 1, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, "first release");
  pump(a, 100);
  assert_int_equal(hilock_async_pending(a), 1); /* still held once */
  assert_hl_ok(hilock_async_release(a, HILOCK_HOLD(r), 1, NULL, NULL), "");
  for (int i = 0; i < 2; i++) {
    d = next_done(a, 10000);
    assert_hl_ok(d.status, d.id == id2 ? "owner 2" : "second release");
  }
  /* Owner 1 holds nothing now. */
  assert_hl_ok(hilock_async_release(a, HILOCK_HOLD(r), 1, NULL, NULL), "");
  assert_int_equal(next_done(a, 10000).status, HILOCK_ENOTOWNED);
  assert_hl_ok(hilock_async_release(a, HILOCK_HOLD(r), 2, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, "owner 2 release");
  assert_false(hl_redis_exists(f->redis, "hilock:{own}:rlock", 18));
  hilock_async_free(a);
  hilock_hold_free(HILOCK_HOLD(r));
}

/* owned, locked, extend and renew as operations: the answers come back as
 * the finished operation's value, and the TTLs move as the blocking calls
 * move them. */
static void queries_and_extensions(void **state) {
  fixture *f = *state;
  hilock_lock *lk = make_lock(f->client, "ext"), *other = make_lock(f->client, "ext");
  hilock_semaphore *s = NULL;
  hilock_async *a = make_async(f->client);
  hilock_async_done d;
  char key[] = "hilock:{ext}:lock";

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(lk)), "");
  assert_hl_ok(hilock_async_owned(a, HILOCK_HOLD(lk), 0, NULL, NULL), "");
  d = next_done(a, 10000);
  assert_hl_ok(d.status, d.errmsg);
  assert_int_equal(d.value, 1);
  assert_hl_ok(hilock_async_owned(a, HILOCK_HOLD(other), 0, NULL, NULL), "");
  d = next_done(a, 10000);
  assert_hl_ok(d.status, d.errmsg);
  assert_int_equal(d.value, 0);
  assert_hl_ok(hilock_async_locked(a, HILOCK_HOLD(other), 0, NULL, NULL), "");
  d = next_done(a, 10000);
  assert_hl_ok(d.status, d.errmsg);
  assert_int_equal(d.value, 1);
  assert_hl_ok(hilock_async_extend(a, HILOCK_HOLD(lk), 0, 60000, 1, NULL, NULL),
               "");
  assert_hl_ok(next_done(a, 10000).status, "extend");
  assert_true(hl_redis_pttl(f->redis, key, strlen(key)) > 30000);
  assert_hl_ok(hilock_async_renew(a, HILOCK_HOLD(lk), 0, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, "renew");
  assert_true(hl_redis_pttl(f->redis, key, strlen(key)) <= 30000);
  /* Not the holder: the extension is refused with the family's status. */
  assert_hl_ok(hilock_async_extend(a, HILOCK_HOLD(other), 0, 60000, 1, NULL,
                                   NULL),
               "");
  assert_int_equal(next_done(a, 10000).status, HILOCK_ENOTOWNED);
  /* A semaphore has renew but no extend. */
  assert_hl_ok(hilock_semaphore_new(f->client, "ext", 3, 1, 30000, &s), "");
  assert_int_equal(hilock_async_extend(a, HILOCK_HOLD(s), 0, 1000, 0, NULL,
                                       NULL),
                   HILOCK_ENOTSUP);
  hilock_async_free(a);
  hl_holds_free(HILOCK_HOLD(s), HILOCK_HOLD(other), HILOCK_HOLD(lk));
}

/* The read-write lock with owners: two readers share it, a writer waits
 * for both, a reader that comes while the writer waits queues behind it;
 * a cancelled writer withdraws its intent, so readers get in again. */
static void rwlock_readers_share_and_a_writer_waits(void **state) {
  fixture *f = *state;
  hilock_rwlock *rw = NULL;
  hilock_async *a = make_async(f->client);
  uint64_t wid, rid, cid;
  hilock_async_done d;

  assert_hl_ok(hilock_rwlock_new(f->client, "arw", 3, 30000, &rw), "");
  assert_hl_ok(hilock_async_read_acquire(a, rw, 1, 0, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, "reader 1");
  assert_hl_ok(hilock_async_read_acquire(a, rw, 2, 0, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, "reader 2 shares it");
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(rw), 3, 20000, NULL, &wid),
               "");
  pump(a, 100);
  /* A new reader queues behind the waiting writer. */
  assert_hl_ok(hilock_async_read_acquire(a, rw, 4, 20000, NULL, &rid), "");
  pump(a, 100);
  assert_int_equal(hilock_async_pending(a), 2);
  assert_hl_ok(hilock_async_read_release(a, rw, 1, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, "reader 1 out");
  assert_hl_ok(hilock_async_read_release(a, rw, 2, NULL, NULL), "");
  for (int i = 0; i < 2; i++) {
    d = next_done(a, 10000);
    assert_hl_ok(d.status, d.id == wid ? "the writer" : "reader 2 out");
  }
  assert_int_equal(hilock_async_pending(a), 1); /* reader 4 still waits */
  assert_hl_ok(hilock_async_release(a, HILOCK_HOLD(rw), 3, NULL, NULL), "");
  for (int i = 0; i < 2; i++) {
    d = next_done(a, 10000);
    assert_hl_ok(d.status, d.id == rid ? "reader 4" : "writer out");
  }
  /* Reader 4 holds it; writer 5 waits and is cancelled: its intent goes,
   * and reader 6 gets in at once. */
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(rw), 5, HILOCK_WAIT_FOREVER,
                                    NULL, &cid),
               "");
  pump(a, 100);
  assert_hl_ok(hilock_async_cancel(a, cid), "");
  assert_int_equal(next_done(a, 10000).status, HILOCK_ECANCELED);
  assert_hl_ok(hilock_async_read_acquire(a, rw, 6, 0, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, "reader 6 after the withdrawal");
  assert_hl_ok(hilock_async_read_release(a, rw, 6, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, "");
  assert_hl_ok(hilock_async_read_release(a, rw, 4, NULL, NULL), "");
  assert_hl_ok(next_done(a, 10000).status, "");
  hilock_async_free(a);
  hilock_hold_free(HILOCK_HOLD(rw));
}

/* A forked child cannot use its parent's runner: a start is refused with
 * HILOCK_EFORKED, and freeing it in the child leaves the parent's threads
 * alone; the parent's runner keeps working. */
typedef struct fork_arg {
  hilock_async *a;
  hilock_lock *lk;
} fork_arg;

static int child_uses_the_parents_runner(void *arg) {
  fork_arg *x = arg;
  int rc = hilock_async_acquire(x->a, HILOCK_HOLD(x->lk), 0, 0, NULL, NULL);
  hilock_async_free(x->a);
  return rc == HILOCK_EFORKED ? 0 : 1;
}

static void a_forked_child_cannot_use_the_runner(void **state) {
  fixture *f = *state;
  fork_arg x = {make_async(f->client), make_lock(f->client, "forked")};
  pid_t pid = hl_fork_run(child_uses_the_parents_runner, &x);
  assert_int_equal(hl_wait_child(pid, 10000), 0);
  assert_hl_ok(hilock_async_acquire(x.a, HILOCK_HOLD(x.lk), 0, 0, NULL, NULL),
               "");
  assert_hl_ok(next_done(x.a, 10000).status, "the parent's acquire");
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(x.lk)), "");
  hilock_async_free(x.a);
  hilock_hold_free(HILOCK_HOLD(x.lk));
}

static void misuse_is_refused(void **state) {
  fixture *f = *state;
  hilock_client *other = NULL;
  hilock_lock *lk = make_lock(f->client, "misuse"), *foreign;
  hilock_lock *holder = make_lock(f->client, "misuse"), *more[3];
  hilock_async *a = NULL;
  hilock_async_done d;
  uint64_t id = 7;

  /* A runner without a client serves Redlock only: a client's lock is
   * refused there. */
  assert_hl_ok(hilock_async_new(NULL, 0, &a), "");
  assert_int_equal(hilock_async_acquire(a, HILOCK_HOLD(lk), 0, 0, NULL, NULL),
                   HILOCK_EINVAL);
  assert_non_null(strstr(hilock_async_errmsg(a), "another client"));
  assert_int_equal(hilock_async_errcode(a), HILOCK_EINVAL);
  assert_int_equal(hilock_async_errcode(NULL), HILOCK_EINVAL);
  hilock_async_free(a);
  a = NULL;
  assert_int_equal(hilock_async_new(f->client, 0, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_async_new(f->client, -1, &a), HILOCK_EINVAL);
  assert_int_equal(hilock_async_new(f->client, HILOCK_ASYNC_WORKERS_MAX + 1, &a),
                   HILOCK_EINVAL);
  assert_null(a);
  a = make_async(f->client);
  assert_int_equal(hilock_async_fd(NULL), -1);
  assert_int_equal(hilock_async_take(NULL, &d, 1), 0);
  assert_int_equal(hilock_async_take(a, NULL, 1), 0);
  assert_int_equal(hilock_async_pending(NULL), 0);
  assert_int_equal(hilock_async_acquire(NULL, HILOCK_HOLD(lk), 0, 0, NULL, &id),
                   HILOCK_EINVAL);
  assert_int_equal(id, 0);
  assert_int_equal(hilock_async_acquire(a, NULL, 0, 0, NULL, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_async_release(a, NULL, 0, NULL, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_async_acquire(a, HILOCK_HOLD(lk), 0, -5, NULL, NULL),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_async_cancel(NULL, 1), HILOCK_EINVAL);
  assert_int_equal(hilock_async_cancel(a, 12345), HILOCK_EINVAL);
  /* A lock of another client. */
  assert_hl_ok(hilock_client_new(f->server.url, NULL, &other), "other");
  foreign = make_lock(other, "misuse");
  assert_int_equal(hilock_async_acquire(a, HILOCK_HOLD(foreign), 0, 0, NULL, NULL),
                   HILOCK_EINVAL);
  /* One operation per lock at a time; the refusal's message is the
   * runner's (the operation in flight owns the hold's). */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(holder)), "holder");
  assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(lk), 0, 5000, NULL, &id), "");
  assert_string_equal(hilock_async_errmsg(a), "");
  assert_int_equal(hilock_async_errcode(a), HILOCK_OK);
  assert_int_equal(hilock_async_acquire(a, HILOCK_HOLD(lk), 0, 0, NULL, NULL),
                   HILOCK_EINVAL);
  assert_non_null(strstr(hilock_async_errmsg(a), "in flight"));
  assert_int_equal(hilock_async_release(a, HILOCK_HOLD(lk), 0, NULL, NULL),
                   HILOCK_EINVAL);
  /* Releasing what is not held finishes with the release's own status. */
  assert_hl_ok(hilock_async_cancel(a, id), "");
  assert_int_equal(next_done(a, 10000).status, HILOCK_ECANCELED);
  assert_hl_ok(hilock_async_release(a, HILOCK_HOLD(lk), 0, NULL, NULL), "");
  d = next_done(a, 10000);
  assert_int_equal(d.status, HILOCK_ENOTOWNED);
  assert_non_null(strstr(d.errmsg, "release")); /* the failure's own text */
  /* Freed with acquires still waiting: they are withdrawn. */
  for (int i = 0; i < 3; i++) {
    more[i] = make_lock(f->client, "misuse");
    assert_hl_ok(hilock_async_acquire(a, HILOCK_HOLD(more[i]), 0, 5000, NULL,
                                      NULL),
                 "");
  }
  pump(a, 50);
  hilock_async_free(a);
  hilock_async_free(NULL);
  for (int i = 0; i < 3; i++) {
    assert_false(hilock_hold_held(HILOCK_HOLD(more[i])));
    hilock_hold_free(HILOCK_HOLD(more[i]));
  }
  assert_true(key_holds(f, "misuse", HILOCK_HOLD(holder)));
  hl_holds_free(HILOCK_HOLD(foreign), HILOCK_HOLD(lk), HILOCK_HOLD(holder));
  hilock_client_free(other);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(
          many_waiters_share_connections_and_go_in_turn, hl_setup,
          hl_teardown),
      cmocka_unit_test_setup_teardown(
          uncontended_operations_run_on_the_loops_thread, hl_setup,
          hl_teardown),
      cmocka_unit_test_setup_teardown(a_wait_ends_at_its_timeout, hl_setup,
                                      hl_teardown),
      cmocka_unit_test_setup_teardown(the_first_operation_resolves_and_connects,
                                      hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(a_release_wakes_the_waiting_acquire,
                                      hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(rings_reach_every_runner_and_thread,
                                      hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(an_early_wake_up_finds_nothing_and_clears,
                                      hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(cancel_withdraws_a_waiting_acquire,
                                      hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(cancel_ends_an_attempt_a_paused_server_holds,
                                      hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(a_cancelled_grant_is_given_back,
                                      hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(other_families, hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(
          fair_lock_serves_in_order_and_cancel_leaves_the_queue, hl_setup,
          hl_teardown),
      cmocka_unit_test_setup_teardown(rlock_owners_are_the_numbers_given,
                                      hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(queries_and_extensions, hl_setup,
                                      hl_teardown),
      cmocka_unit_test_setup_teardown(rwlock_readers_share_and_a_writer_waits,
                                      hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(a_forked_child_cannot_use_the_runner,
                                      hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(misuse_is_refused, hl_setup,
                                      hl_teardown),
  };
  return cmocka_run_group_tests(tests, hl_group_setup, hl_group_teardown);
}
