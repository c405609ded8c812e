/* Deadlock detection (hilock_options.detect_deadlocks) against a real
 * server: rings of waits between threads and between forked processes have
 * exactly one HILOCK_EDEADLK, naming the cycle, and the others get their
 * locks; a wait with detection off writes nothing; bad options are
 * refused. */
#include "test_util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef hl_fixture fixture;

#define DELAY_MS 200

static hilock_options dl_options(void) {
  hilock_options o = hl_test_options();
  o.detect_deadlocks = 1;
  o.deadlock_timeout_ms = DELAY_MS;
  return o;
}

/* One member of a ring: holds first, then waits for second. */
typedef struct member {
  const char *url;
  const char *first, *second;
  pthread_barrier_t *all_hold;
  int rc;
  char msg[512];
} member;

static void *member_run(void *arg) {
  member *m = arg;
  hilock_options o = dl_options();
  hilock_client *c = hl_client(m->url, &o);
  hilock_lock *a = hl_new_lock(c, m->first, 60000);
  hilock_lock *b = hl_new_lock(c, m->second, 60000);
  m->rc = hilock_hold_acquire(HILOCK_HOLD(a), 30000);
  pthread_barrier_wait(m->all_hold);
  if (m->rc == HILOCK_OK) {
    m->rc = hilock_hold_acquire(HILOCK_HOLD(b), 30000);
    snprintf(m->msg, sizeof(m->msg), "%s", hilock_hold_errmsg(HILOCK_HOLD(b)));
    if (m->rc == HILOCK_OK) hilock_hold_release(HILOCK_HOLD(b));
    hilock_hold_release(HILOCK_HOLD(a));
  }
  hilock_hold_free(HILOCK_HOLD(a));
  hilock_hold_free(HILOCK_HOLD(b));
  hilock_client_free(c);
  return NULL;
}

static void ring_of_threads_has_one_victim(void **state) {
  fixture *f = *state;
  const char *names[3] = {"dl-a", "dl-b", "dl-c"};
  member m[3];
  pthread_t t[3];
  pthread_barrier_t all;
  int victims = 0;
  pthread_barrier_init(&all, NULL, 3);
  for (int i = 0; i < 3; i++) {
    memset(&m[i], 0, sizeof(m[i]));
    m[i].url = f->server.url;
    m[i].first = names[i];
    m[i].second = names[(i + 1) % 3];
    m[i].all_hold = &all;
    assert_int_equal(pthread_create(&t[i], NULL, member_run, &m[i]), 0);
  }
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&all);
  for (int i = 0; i < 3; i++) {
    if (m[i].rc == HILOCK_EDEADLK) {
      victims++;
      assert_substr(m[i].msg, "dl-a");
      assert_substr(m[i].msg, "dl-b");
      assert_substr(m[i].msg, "dl-c");
      assert_substr(m[i].msg, "(3 owners)");
    } else {
      assert_hl_ok(m[i].rc, m[i].msg);
    }
  }
  assert_int_equal(victims, 1);
  /* The waits' records went with them. */
  assert_int_equal(hl_redis_int(f->redis, "EVAL %s 0",
                                "return #redis.call('KEYS', '*:dlw')"),
                   0);
}

/* Forked processes in a ring of n: each holds L<i>, tells the parent, waits
 * for its go, then waits for L<i+1>; it exits with its acquire's status
 * (0 OK, 1 HILOCK_EDEADLK, 2 other). */
static void ring_of_processes(fixture *f, int n) {
  char names[5][16];
  int held[2], go[2], victims = 0;
  pid_t pids[5];
  assert_true(n <= 5);
  assert_int_equal(pipe(held), 0);
  assert_int_equal(pipe(go), 0);
  for (int i = 0; i < n; i++) snprintf(names[i], sizeof(names[i]), "dl-p%d", i);
  for (int i = 0; i < n; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) {
      hilock_options o = dl_options();
      hilock_client *c = hl_client(f->server.url, &o);
      hilock_lock *a = hl_new_lock(c, names[i], 60000);
      hilock_lock *b = hl_new_lock(c, names[(i + 1) % n], 60000);
      char byte = 'h';
      int rc = hilock_hold_acquire(HILOCK_HOLD(a), 30000);
      if (rc != HILOCK_OK || write(held[1], &byte, 1) != 1 ||
          read(go[0], &byte, 1) != 1)
        _exit(3);
      rc = hilock_hold_acquire(HILOCK_HOLD(b), 30000);
      if (rc == HILOCK_OK) hilock_hold_release(HILOCK_HOLD(b));
      if (rc == HILOCK_EDEADLK)
        fprintf(stderr, "victim %d: %s\n", i, hilock_hold_errmsg(HILOCK_HOLD(b)));
      hilock_hold_release(HILOCK_HOLD(a));
      hilock_hold_free(HILOCK_HOLD(a));
      hilock_hold_free(HILOCK_HOLD(b));
      hilock_client_free(c);
      _exit(rc == HILOCK_OK ? 0 : rc == HILOCK_EDEADLK ? 1 : 2);
    }
  }
  for (int i = 0; i < n; i++) {
    char byte;
    assert_int_equal(read(held[0], &byte, 1), 1);
  }
  for (int i = 0; i < n; i++) assert_int_equal(write(go[1], "g", 1), 1);
  for (int i = 0; i < n; i++) {
    int st;
    assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
    assert_true(WIFEXITED(st));
    assert_true(WEXITSTATUS(st) <= 1);
    victims += WEXITSTATUS(st);
  }
  close(held[0]);
  close(held[1]);
  close(go[0]);
  close(go[1]);
  assert_int_equal(victims, 1);
}

static void ring_of_two_processes_has_one_victim(void **state) {
  ring_of_processes(*state, 2);
}

static void ring_of_five_processes_has_one_victim(void **state) {
  ring_of_processes(*state, 5);
}

static void detection_off_writes_nothing(void **state) {
  fixture *f = *state;
  hilock_lock *a = hl_new_lock(f->client, "dl-off", 60000);
  hilock_lock *b = hl_new_lock(f->client, "dl-off", 60000);
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(a), 0),
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  /* A wait longer than any delay, on a client without detection. */
  assert_int_equal(hilock_hold_acquire(HILOCK_HOLD(b), 600), HILOCK_BUSY);
  assert_int_equal(hl_redis_int(f->redis, "EVAL %s 0",
                                "return #redis.call('KEYS', '*:dl*')"),
                   0);
  hilock_hold_release(HILOCK_HOLD(a));
  hilock_hold_free(HILOCK_HOLD(a));
  hilock_hold_free(HILOCK_HOLD(b));
}

static void bad_options_are_einval(void **state) {
  fixture *f = *state;
  hilock_options o = dl_options();
  hilock_client *c = NULL;
  o.deadlock_timeout_ms = 0;
  assert_int_equal(hilock_client_new(f->server.url, &o, &c), HILOCK_EINVAL);
  hilock_client_free(c);
  c = NULL;
  o.deadlock_timeout_ms = -5;
  assert_int_equal(hilock_client_new(f->server.url, &o, &c), HILOCK_EINVAL);
  hilock_client_free(c);
  /* Off, the delay is not looked at. */
  c = NULL;
  o.detect_deadlocks = 0;
  assert_hl_ok(hilock_client_new(f->server.url, &o, &c),
               hilock_client_errmsg(c));
  hilock_client_free(c);
}

HL_FIXTURE_MAIN("deadlock",
      HL_TEST(ring_of_threads_has_one_victim),
      HL_TEST(ring_of_two_processes_has_one_victim),
      HL_TEST(ring_of_five_processes_has_one_victim),
      HL_TEST(detection_off_writes_nothing),
      HL_TEST(bad_options_are_einval))
