/* The base handle: what every family's hold does is in the contract suite
 * (test_contract.c, one table of every lock type); here the hold's own
 * rules: NULL holds, a simple lock's missing TTL, the read-write lock's
 * error, and errors kept per thread for the client and the handles threads
 * share (run under TSan too). */
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define NAME "hold:test"
#define TTL_MS 10000

/* A simple lock has no TTL to renew; the error lands on its hold. */
static void simple_lock_refuses_renewal(void **state) {
  hl_fixture *f = *state;
  hilock_lock *lk = NULL;
  assert_hl_ok(hilock_lock_new_simple(f->client, NAME, strlen(NAME), &lk),
               hilock_client_errmsg(f->client));
  assert_int_equal(hilock_hold_ttl_ms(HILOCK_HOLD(lk)), 0);
  assert_hl_rc(hilock_hold_set_auto_renew(HILOCK_HOLD(lk), 1, 0, NULL, NULL),
               HILOCK_ENOTSUP, "");
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(lk)), HILOCK_ENOTSUP);
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(lk), 0, 0, NULL, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(lk)));
  assert_hl_rc(hilock_hold_set_auto_renew(HILOCK_HOLD(lk), 0, -1, NULL, NULL),
               HILOCK_EINVAL, "");
  hilock_hold_free(HILOCK_HOLD(lk));
}

/* The read-write lock keeps its error on the handle (both sides set it):
 * its hold reports that one, and the write side's renewal errors land
 * there too. */
static void rwlock_hold_reports_the_handles_error(void **state) {
  hl_fixture *f = *state;
  hilock_rwlock *rw = NULL;
  hilock_hold *h;
  rw = hl_new_rwlock(f->client, NAME, TTL_MS);
  h = HILOCK_HOLD(rw);
  assert_hl_rc(hilock_rwlock_read_release(rw), HILOCK_ENOTOWNED, "");
  assert_int_equal(hilock_hold_errcode(h), HILOCK_ENOTOWNED);
  assert_substr(hilock_hold_errmsg(h), "read");
  assert_hl_rc(hilock_hold_set_auto_renew(h, 1, -5, NULL, NULL), HILOCK_EINVAL,
               "");
  assert_int_equal(hilock_hold_errcode(h), HILOCK_EINVAL);
  hilock_hold_free(h);
}

static void null_holds_are_safe(void **state) {
  int b = 7;
  size_t len = 9;
  hilock_lock *lk = NULL;
  (void)state;
  assert_string_equal(hilock_hold_errmsg(NULL), "handle is NULL");
  assert_int_equal(hilock_hold_errcode(NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_fence(NULL), 0);
  assert_string_equal(hilock_hold_token(NULL), "");
  assert_string_equal(hilock_hold_key(NULL, &len), "");
  assert_int_equal(len, 0);
  assert_string_equal(hilock_hold_key(NULL, NULL), "");
  assert_int_equal(hilock_hold_ttl_ms(NULL), 0);
  assert_int_equal(hilock_hold_validity_ms(NULL), 0);
  assert_int_equal(hilock_hold_held(NULL), 0);
  assert_int_equal(hilock_hold_lost(NULL), 0);
  assert_int_equal(hilock_hold_set_auto_renew(NULL, 1, 0, NULL, NULL),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_hold_owned(NULL, &b), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_locked(NULL, &b), HILOCK_EINVAL);
  assert_int_equal(b, 7);
  hilock_hold_free(NULL);
  /* A NULL family handle through HILOCK_HOLD is a NULL hold. */
  assert_null(HILOCK_HOLD(lk));
  hilock_hold_free(HILOCK_HOLD(lk));
}

static void null_out_arguments_are_einval(void **state) {
  hl_fixture *f = *state;
  hilock_lock *lk = NULL;
  lk = hl_new_lock(f->client, NAME, TTL_MS);
  assert_int_equal(hilock_hold_owned(HILOCK_HOLD(lk), NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_locked(HILOCK_HOLD(lk), NULL), HILOCK_EINVAL);
  hilock_hold_free(HILOCK_HOLD(lk));
}

/* ## Threads sharing a reentrant lock -------------------------------------
 * One thread keeps failing (a release it does not hold) while another reads
 * the handle's last error: errors of a handle that threads share are kept
 * per thread, as errno, so the reader never sees the other thread's
 * failures and never reads a buffer being written (TSan reports a race if
 * the message is shared). */

typedef struct reader_arg {
  hilock_rlock *rl;
  atomic_int stop;
  int bad;
  int failer_code; /* the failing thread's last error, as it reads it */
} reader_arg;

static void *failer(void *p) {
  reader_arg *a = p;
  for (int i = 0; i < 2000; i++) (void)hilock_hold_release(HILOCK_HOLD(a->rl));
  a->failer_code = hilock_hold_errcode(HILOCK_HOLD(a->rl));
  atomic_store(&a->stop, 1);
  return NULL;
}

static void shared_handle_errors_are_read_safely(void **state) {
  hl_fixture *f = *state;
  reader_arg a = {0};
  pthread_t t;
  a.rl = hl_new_rlock(f->client, NAME, TTL_MS);
  assert_int_equal(pthread_create(&t, NULL, failer, &a), 0);
  while (!atomic_load(&a.stop)) {
    const char *m = hilock_hold_errmsg(HILOCK_HOLD(a.rl));
    int code = hilock_hold_errcode(HILOCK_HOLD(a.rl));
    if (code != 0 && code != HILOCK_ENOTOWNED) a.bad++;
    if (strlen(m) >= 256) a.bad++;
  }
  pthread_join(t, NULL);
  assert_int_equal(a.bad, 0);
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(a.rl)), HILOCK_OK);
  assert_string_equal(hilock_hold_errmsg(HILOCK_HOLD(a.rl)), "");
  assert_int_equal(a.failer_code, HILOCK_ENOTOWNED);
  /* This thread's own failure is its to read. */
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(a.rl)), HILOCK_ENOTOWNED, "");
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(a.rl)), HILOCK_ENOTOWNED);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(a.rl)), "does not hold");
  hilock_hold_free(HILOCK_HOLD(a.rl));
}

/* A constructor that fails in one thread leaves its error with that thread:
 * another thread using the same client reads its own (none). */
typedef struct ctor_arg {
  hilock_client *c;
  int rc, code;
  char msg[256];
} ctor_arg;

static void *bad_constructor(void *p) {
  ctor_arg *a = p;
  hilock_lock *lk = NULL;
  a->rc = hilock_lock_new(a->c, "", 0, TTL_MS, &lk);
  a->code = hilock_client_errcode(a->c);
  snprintf(a->msg, sizeof(a->msg), "%s", hilock_client_errmsg(a->c));
  return NULL;
}

static void client_errors_are_per_thread(void **state) {
  hl_fixture *f = *state;
  ctor_arg a = {f->client, 0, 0, ""};
  pthread_t t;
  hilock_lock *lk = NULL;
  assert_int_equal(pthread_create(&t, NULL, bad_constructor, &a), 0);
  pthread_join(t, NULL);
  assert_int_equal(a.rc, HILOCK_EINVAL);
  assert_int_equal(a.code, HILOCK_EINVAL);
  assert_true(a.msg[0] != '\0');
  assert_int_equal(hilock_client_errcode(f->client), HILOCK_OK);
  assert_string_equal(hilock_client_errmsg(f->client), "");
  /* The same failure in this thread is this thread's to read. */
  assert_int_equal(hilock_lock_new(f->client, "", 0, TTL_MS, &lk),
                   HILOCK_EINVAL);
  assert_null(lk);
  assert_int_equal(hilock_client_errcode(f->client), HILOCK_EINVAL);
  assert_string_equal(hilock_client_errmsg(f->client), a.msg);
}

/* One thread takes and gives back the reentrant lock while another reads
 * the handle's token: the reader gets a copy made under the handle's guard,
 * never the buffer a grant is rewriting (TSan reports a race otherwise). */
static void *cycler(void *p) {
  reader_arg *a = p;
  for (int i = 0; i < 200; i++)
    if (hilock_hold_acquire(HILOCK_HOLD(a->rl), 2000) != HILOCK_OK ||
        hilock_hold_release(HILOCK_HOLD(a->rl)) != HILOCK_OK)
      a->bad++;
  atomic_store(&a->stop, 1);
  return NULL;
}

static void shared_handle_tokens_are_read_safely(void **state) {
  hl_fixture *f = *state;
  reader_arg a = {0};
  pthread_t t;
  size_t reads = 0;
  a.rl = hl_new_rlock(f->client, NAME, TTL_MS);
  assert_int_equal(pthread_create(&t, NULL, cycler, &a), 0);
  while (!atomic_load(&a.stop)) {
    const char *tok = hilock_hold_token(HILOCK_HOLD(a.rl));
    if (strlen(tok) >= 64) a.bad++;
    reads++;
  }
  pthread_join(t, NULL);
  assert_int_equal(a.bad, 0);
  assert_true(reads > 0);
  hilock_hold_free(HILOCK_HOLD(a.rl));
}

/* Threads that share a reentrant lock handle fail on it at once: half of
 * them in the shared layer (a negative max hold to hilock_hold_set_auto_
 * renew), half in the family (a release without a grant). Each reads its
 * own last error, and nothing writes the handle's shared scratch error
 * outside its mutex (TSan reports a race otherwise). */
#define FAILERS 4

/* What each failing thread begins with: the flag that lets them all go at
 * once, and its count of results other than the one expected. */
typedef struct fail_start {
  atomic_int *go;
  int bad;
} fail_start;

/* Start FAILERS threads of fn, the i-th on the argument at args + i * size
 * (a struct that begins with a fail_start), let them go at once and join
 * them: none may count a bad result. */
static void run_failers(void *(*fn)(void *), void *args, size_t size) {
  char *base = args;
  pthread_t t[FAILERS];
  atomic_int go = 0;
  for (int i = 0; i < FAILERS; i++) {
    fail_start *fs = (fail_start *)(base + (size_t)i * size);
    fs->go = &go;
    fs->bad = 0;
    assert_int_equal(pthread_create(&t[i], NULL, fn, fs), 0);
  }
  atomic_store(&go, 1);
  for (int i = 0; i < FAILERS; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(((fail_start *)(base + (size_t)i * size))->bad, 0);
  }
}

/* Spin until the threads are let go. */
static void wait_go(const fail_start *fs) {
  while (!atomic_load(fs->go)) {
  }
}

/* Count a bad result in fs unless rc is want_rc and h's last error is rc,
 * its message saying want. */
static void check_failure(fail_start *fs, hilock_hold *h, int rc, int want_rc,
                          const char *want) {
  if (rc != want_rc || hilock_hold_errcode(h) != rc ||
      strstr(hilock_hold_errmsg(h), want) == NULL)
    fs->bad++;
}

typedef struct shared_fail_arg {
  fail_start f;
  hilock_rlock *rl;
  int which;
} shared_fail_arg;

static void *fail_on_shared(void *p) {
  shared_fail_arg *a = p;
  hilock_hold *h = HILOCK_HOLD(a->rl);
  wait_go(&a->f);
  for (int i = 0; i < 500; i++) {
    int rc = a->which ? hilock_hold_set_auto_renew(h, 1, -1, NULL, NULL)
                      : hilock_hold_release(HILOCK_HOLD(a->rl));
    const char *want = a->which ? "max hold" : "does not hold";
    check_failure(&a->f, h, rc, a->which ? HILOCK_EINVAL : HILOCK_ENOTOWNED,
                  want);
  }
  return NULL;
}

static void shared_handle_errors_are_written_per_thread(void **state) {
  hl_fixture *f = *state;
  hilock_rlock *rl = NULL;
  shared_fail_arg a[FAILERS];
  rl = hl_new_rlock(f->client, NAME, TTL_MS);
  for (int i = 0; i < FAILERS; i++) a[i] = (shared_fail_arg){{0}, rl, i % 2};
  run_failers(fail_on_shared, a, sizeof(a[0]));
  /* None of theirs is this thread's. */
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(rl)), HILOCK_OK);
  hilock_hold_free(HILOCK_HOLD(rl));
}

/* ## Every object threads share, failing from several threads ------------
 * Threads sharing a client fail on it at once, each with a TTL of its own:
 * each reads its own last failure (the value it passed), never another
 * thread's, and no message is written outside what guards it (TSan). */
typedef struct client_fail_arg {
  fail_start f;
  hilock_client *c;
  int64_t ttl;
} client_fail_arg;

static void *fail_on_client(void *p) {
  client_fail_arg *a = p;
  char want[48];
  snprintf(want, sizeof(want), "got %lld (", (long long)a->ttl);
  wait_go(&a->f);
  for (int i = 0; i < 300; i++) {
    hilock_lock *lk = NULL;
    int rc = hilock_lock_new(a->c, NAME, strlen(NAME), a->ttl, &lk);
    if (rc != HILOCK_EINVAL || lk != NULL ||
        hilock_client_errcode(a->c) != HILOCK_EINVAL ||
        strstr(hilock_client_errmsg(a->c), want) == NULL)
      a->f.bad++;
    /* A call that succeeds leaves the last failure's message alone. */
    if (i % 50 == 0 && (hilock_client_ping(a->c) != HILOCK_OK ||
                        strstr(hilock_client_errmsg(a->c), want) == NULL))
      a->f.bad++;
  }
  return NULL;
}

static void client_errors_from_threads_are_each_their_own(void **state) {
  hl_fixture *f = *state;
  client_fail_arg a[FAILERS];
  for (int i = 0; i < FAILERS; i++)
    a[i] = (client_fail_arg){{0}, f->client, -1000 - i};
  run_failers(fail_on_client, a, sizeof(a[0]));
  assert_int_equal(hilock_client_errcode(f->client), HILOCK_OK);
  assert_string_equal(hilock_client_errmsg(f->client), "");
}

/* Threads sharing a read-write lock handle fail on it at once, on both
 * sides and in the shared layer: each reads its own last error. */
static void *fail_on_rwlock(void *p) {
  shared_fail_arg *a = p;
  hilock_rwlock *rw = (hilock_rwlock *)a->rl;
  hilock_hold *h = HILOCK_HOLD(rw);
  wait_go(&a->f);
  for (int i = 0; i < 300; i++) {
    int rc, want_rc = HILOCK_ENOTOWNED;
    const char *want = "read";
    switch ((a->which + i) % 4) {
      case 0:
        rc = hilock_rwlock_read_release(rw);
        break;
      case 1:
        rc = hilock_rwlock_write_release(rw);
        want = "release";
        break;
      case 2:
        rc = hilock_hold_set_auto_renew(h, 1, -1, NULL, NULL);
        want_rc = HILOCK_EINVAL;
        want = "max hold";
        break;
      default:
        rc = hilock_rwlock_read_set_auto_renew(rw, 1, -1, NULL, NULL);
        want_rc = HILOCK_EINVAL;
        want = "max hold";
        break;
    }
    check_failure(&a->f, h, rc, want_rc, want);
  }
  return NULL;
}

static void shared_rwlock_errors_are_written_per_thread(void **state) {
  hl_fixture *f = *state;
  hilock_rwlock *rw = NULL;
  shared_fail_arg a[FAILERS];
  rw = hl_new_rwlock(f->client, NAME, TTL_MS);
  for (int i = 0; i < FAILERS; i++)
    a[i] = (shared_fail_arg){{0}, (hilock_rlock *)rw, i};
  run_failers(fail_on_rwlock, a, sizeof(a[0]));
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(rw)), HILOCK_OK);
  hilock_hold_free(HILOCK_HOLD(rw));
}

/* A Redlock is shared by its caller and the client's renewal thread: with
 * one node down, every renewal round fails on that node while the caller's
 * calls fail on the handle and read its message (TSan reports a race if
 * renewal wrote the handle's message). */
static void redlock_errors_against_renewal(void **state) {
  hl_fixture *f = *state;
  char u[3][64];
  const char *urls[3] = {u[0], u[1], u[2]};
  hilock_options o = hl_test_options();
  hilock_redlock *rl = NULL;
  hilock_hold *h;
  int renewals = 0, bad = 0;
  int64_t last, until;
  snprintf(u[0], sizeof(u[0]), "redis://127.0.0.1:%d/0", f->server.port);
  snprintf(u[1], sizeof(u[1]), "redis://127.0.0.1:%d/1", f->server.port);
  snprintf(u[2], sizeof(u[2]), "redis://127.0.0.1:%d/0", hl_free_port());
  o.connect_later = 1;
  /* 300 ms: renewed about every 100 ms, while its validity (300 ms less
   * the drift allowance) outlasts a slow round on a loaded machine. */
  assert_int_equal(hilock_redlock_new(urls, 3, NAME, strlen(NAME), 300, &o,
                                      &rl),
                   HILOCK_OK);
  h = HILOCK_HOLD(rl);
  assert_hl_ok(hilock_hold_set_auto_renew(h, 1, 0, NULL, NULL),
               hilock_hold_errmsg(h));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(rl)), hilock_hold_errmsg(h));
  last = hilock_hold_validity_ms(h);
  /* Until renewal has run a few times (a validity that grows back), at
   * most 20 s (a generous bound, only against a hang). */
  until = hl_now_ms() + 20000;
  while (renewals < 3 && hl_now_ms() < until) {
    int64_t v;
    int locked = 0;
    if (hilock_hold_extend(HILOCK_HOLD(rl), 0, 1) != HILOCK_EINVAL ||
        hilock_hold_errcode(h) != HILOCK_EINVAL ||
        strstr(hilock_hold_errmsg(h), "extension") == NULL)
      bad++;
    if (hilock_redlock_set_node_timeout(rl, 0) != HILOCK_EINVAL ||
        strstr(hilock_hold_errmsg(h), "node timeout") == NULL)
      bad++;
    /* A round on the caller's connections, failing on the down node. */
    if (hilock_hold_locked(h, &locked) != HILOCK_OK || !locked) bad++;
    v = hilock_hold_validity_ms(h);
    if (v > last) renewals++;
    last = v;
  }
  assert_int_equal(bad, 0);
  assert_true(renewals >= 3);
  assert_false(hilock_hold_lost(h));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(h));
  hilock_hold_free(h);
}

/* Redlock names every failed node in its one message: 32 nodes down make a
 * message far longer than a plain error's, kept whole up to 1535 bytes and
 * always NUL-terminated; its status agrees with it. */
static void redlock_message_names_every_failed_node(void **state) {
  char u[HILOCK_REDLOCK_MAX_NODES][80];
  const char *urls[HILOCK_REDLOCK_MAX_NODES];
  hilock_options o = hl_test_options();
  hilock_redlock *rl = NULL;
  const char *m;
  (void)state;
  for (int i = 0; i < HILOCK_REDLOCK_MAX_NODES; i++) {
    snprintf(u[i], sizeof(u[i]), "unix:///nonexistent/hilock-errslot-%d.sock",
             i);
    urls[i] = u[i];
  }
  o.connect_later = 1;
  assert_int_equal(hilock_redlock_new(urls, HILOCK_REDLOCK_MAX_NODES, NAME,
                                      strlen(NAME), TTL_MS, &o, &rl),
                   HILOCK_OK);
  assert_int_equal(hilock_hold_try_acquire(HILOCK_HOLD(rl)), HILOCK_ENOQUORUM);
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(rl)), HILOCK_ENOQUORUM);
  m = hilock_hold_errmsg(HILOCK_HOLD(rl));
  assert_substr(m, "failed on 32 of 32 nodes");
  assert_true(strlen(m) > 1000);
  assert_true(strlen(m) <= 1535);
  /* Every node that fits is named. */
  assert_substr(m, u[5] + strlen("unix://"));
  hilock_hold_free(HILOCK_HOLD(rl));
}

/* Threads sharing a reentrant and a read-write lock handle fail in the
 * family's attempt at once, on the server's refusal (their keys hold a
 * string): each reads its own EWRONGTYPE with Redis's text, written where
 * the handle's guard or the thread's own slot keeps it (TSan). */
typedef struct damaged_arg {
  fail_start f;
  hilock_rlock *rl;
  hilock_rwlock *rw;
} damaged_arg;

static void *fail_on_damaged(void *p) {
  damaged_arg *a = p;
  wait_go(&a->f);
  for (int i = 0; i < 100; i++) {
    hilock_hold *h = i % 3 == 0 ? HILOCK_HOLD(a->rl) : HILOCK_HOLD(a->rw);
    int rc = i % 3 == 0   ? hilock_hold_try_acquire(HILOCK_HOLD(a->rl))
             : i % 3 == 1 ? hilock_rwlock_read_try_acquire(a->rw)
                          : hilock_rwlock_write_try_acquire(a->rw);
    check_failure(&a->f, h, rc, HILOCK_EWRONGTYPE, "WRONGTYPE");
  }
  return NULL;
}

static void shared_handles_fail_on_damaged_keys_per_thread(void **state) {
  hl_fixture *f = *state;
  damaged_arg a[FAILERS];
  hilock_rlock *rl = NULL;
  hilock_rwlock *rw = NULL;
  rl = hl_new_rlock(f->client, NAME, TTL_MS);
  rw = hl_new_rwlock(f->client, NAME, TTL_MS);
  hl_redis_ok(f->redis, "SET hilock:{" NAME "}:rlock oops");
  hl_redis_ok(f->redis, "SET hilock:{" NAME "}:rw:writer oops");
  for (int i = 0; i < FAILERS; i++) a[i] = (damaged_arg){{0}, rl, rw};
  run_failers(fail_on_damaged, a, sizeof(a[0]));
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(rl)), HILOCK_OK);
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(rw)), HILOCK_OK);
  hl_holds_free(HILOCK_HOLD(rl), HILOCK_HOLD(rw));
}

HL_FIXTURE_MAIN("hold",
      HL_TEST(simple_lock_refuses_renewal),
      HL_TEST(rwlock_hold_reports_the_handles_error),
      HL_TEST(null_holds_are_safe),
      HL_TEST(null_out_arguments_are_einval),
      HL_TEST(shared_handle_errors_are_read_safely),
      HL_TEST(client_errors_are_per_thread),
      HL_TEST(shared_handle_tokens_are_read_safely),
      HL_TEST(shared_handle_errors_are_written_per_thread),
      HL_TEST(client_errors_from_threads_are_each_their_own),
      HL_TEST(shared_rwlock_errors_are_written_per_thread),
      HL_TEST(redlock_errors_against_renewal),
      HL_TEST(redlock_message_names_every_failed_node),
      HL_TEST(shared_handles_fail_on_damaged_keys_per_thread))
