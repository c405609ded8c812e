/* The script runner against a real server: embedded SHA1s, NOSCRIPT
 * recovery after SCRIPT FLUSH and after a restart, Lua errors. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>

#include "internal.h"
#include "scripts.h"

typedef hl_fixture fixture;

static const hilock__script *const all_scripts[] = {
    &hilock__script_lock_acquire,
    &hilock__script_lock_extend,
    &hilock__script_lock_release,
};

static int setup(void **state) {
  fixture *f = *state;
  if (f->server.pid == 0 && hl_server_restart(&f->server) != 0) return -1;
  f->redis = hl_redis_connect(&f->server);
  hl_redis_ok(f->redis, "FLUSHALL");
  hl_redis_ok(f->redis, "SCRIPT FLUSH");
  hl_redis_ok(f->redis, "CONFIG RESETSTAT");
  return hl_clients_new(&f->client, 1, f->server.url);
}

static int teardown(void **state) {
  fixture *f = *state;
  hl_clients_free(&f->client, 1);
  if (f->redis != NULL) redisFree(f->redis);
  f->redis = NULL;
  return 0;
}

/* Successful calls of a command, from INFO commandstats. */
static long calls_of(redisContext *c, const char *cmd) {
  char needle[64];
  const char *p;
  long calls = 0, failed = 0;
  redisReply *r = hl_redis(c, "INFO commandstats");
  assert_int_equal(r->type, REDIS_REPLY_STRING);
  snprintf(needle, sizeof(needle), "cmdstat_%s:", cmd);
  p = strstr(r->str, needle);
  if (p != NULL) {
    const char *q = strstr(p, "calls=");
    const char *fq = strstr(p, "failed_calls=");
    if (q != NULL) calls = strtol(q + 6, NULL, 10);
    if (fq != NULL) failed = strtol(fq + 13, NULL, 10);
  }
  freeReplyObject(r);
  return calls - failed;
}

static int script_loaded(redisContext *c, const hilock__script *s) {
  redisReply *r = hl_redis(c, "SCRIPT EXISTS %s", s->sha);
  int loaded;
  assert_int_equal(r->type, REDIS_REPLY_ARRAY);
  assert_int_equal(r->elements, 1);
  loaded = r->element[0]->integer == 1;
  freeReplyObject(r);
  return loaded;
}

static void embedded_sha1_matches_the_server(void **state) {
  fixture *f = *state;
  for (size_t i = 0; i < sizeof(all_scripts) / sizeof(all_scripts[0]); i++) {
    const hilock__script *s = all_scripts[i];
    redisReply *r = hl_redis(f->redis, "SCRIPT LOAD %b", s->src, s->len);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(strlen(s->sha), 40);
    if (strcmp(r->str, s->sha) != 0)
      fail_msg("%s: embedded sha %s, server says %s", s->name, s->sha, r->str);
    freeReplyObject(r);
  }
}

static void first_acquire_loads_the_script_then_evalsha_hits(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "loads", 10000);

  assert_false(script_loaded(f->redis, &hilock__script_lock_acquire));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_true(script_loaded(f->redis, &hilock__script_lock_acquire));
  assert_int_equal(calls_of(f->redis, "eval"), 1);

  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  /* One EVAL for each script's first use, EVALSHA hits afterwards. */
  assert_int_equal(calls_of(f->redis, "eval"), 2);
  assert_int_equal(calls_of(f->redis, "evalsha"), 1);
  hilock_hold_free(HILOCK_HOLD(l));
}

static void acquire_works_after_script_flush(void **state) {
  fixture *f = *state;
  hilock_lock *a = hl_new_lock(f->client, "flush-a", 10000);
  hilock_lock *b = hl_new_lock(f->client, "flush-b", 10000);
  hilock_lock *a2 = hl_new_lock(f->client, "flush-a", 10000);

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  hl_redis_ok(f->redis, "SCRIPT FLUSH");
  assert_false(script_loaded(f->redis, &hilock__script_lock_acquire));

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_true(hilock_hold_held(HILOCK_HOLD(b)));
  assert_true(hilock_hold_fence(HILOCK_HOLD(b)) > 1000000000000000ULL); /* a new name */
  assert_true(script_loaded(f->redis, &hilock__script_lock_acquire));
  /* The held lock is still seen as held through the reloaded script. */
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(a2)), HILOCK_BUSY, hilock_hold_errmsg(HILOCK_HOLD(a2)));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(a2), HILOCK_HOLD(b));
}

static void release_and_extend_work_after_script_flush(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "flush-rel", 10000);
  size_t klen;
  const char *key = hilock_hold_key(HILOCK_HOLD(l), &klen);

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hl_redis_ok(f->redis, "SCRIPT FLUSH");
  assert_hl_ok(hilock_hold_extend(HILOCK_HOLD(l), 30000, 1), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_i64_between(hl_redis_pttl(f->redis, key, klen), 20000, 30000);
  hl_redis_ok(f->redis, "SCRIPT FLUSH");
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_false(hl_redis_exists(f->redis, key, klen));
  hilock_hold_free(HILOCK_HOLD(l));
}

static void acquire_works_after_server_restart(void **state) {
  fixture *f = *state;
  hilock_lock *a = hl_new_lock(f->client, "restart", 10000);
  hilock_lock *b = hl_new_lock(f->client, "restart", 10000);

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));
  redisFree(f->redis);
  f->redis = NULL;
  assert_int_equal(hl_server_restart(&f->server), 0);

  /* New process: dead pooled connection and an empty script cache. */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_true(hilock_hold_held(HILOCK_HOLD(b)));
  f->redis = hl_redis_connect(&f->server);
  assert_true(script_loaded(f->redis, &hilock__script_lock_acquire));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

/* Run a throwaway script through the internal runner. */
static int run_script(fixture *f, const char *src, hilock__err *e) {
  hilock__script s = {"test", src, strlen(src),
                      "0000000000000000000000000000000000000000", 0, 0, 0};
  redisReply *r = NULL;
  int rc;
  hilock__clear_err(e);
  rc = hilock__script_run(f->client, e, &s, 0, NULL, NULL, 0, NULL, NULL, &r);
  if (r != NULL) freeReplyObject(r);
  return rc;
}

static void lua_errors_are_escript_with_redis_text(void **state) {
  fixture *f = *state;
  hilock__err e;
  assert_hl_rc(run_script(f, "error('boom')", &e), HILOCK_ESCRIPT, e.msg);
  assert_substr(e.msg, "boom");
  assert_hl_rc(run_script(f, "return (", &e), HILOCK_ESCRIPT, e.msg);
  assert_substr(e.msg, "Error compiling script");
  assert_hl_rc(run_script(f, "return redis.call('NOPE')", &e), HILOCK_ESCRIPT,
               e.msg);
  assert_substr(e.msg, "Unknown Redis command");
  /* The runner falls back to EVAL with the source, whatever the SHA. */
  assert_hl_ok(run_script(f, "return 7", &e), e.msg);
}

static void script_runner_rejects_too_many_arguments(void **state) {
  fixture *f = *state;
  enum { N = HILOCK__SCRIPT_ARGS_MAX + 1 };
  const char **args = malloc(N * sizeof(*args));
  size_t *lens = malloc(N * sizeof(*lens));
  hilock__script s = {"test", "return #ARGV", 12,
                      "0000000000000000000000000000000000000000", 0, 0, 0};
  hilock__err e;
  redisReply *r = NULL;
  assert_non_null(args);
  assert_non_null(lens);
  for (int i = 0; i < N; i++) {
    args[i] = "x";
    lens[i] = 1;
  }
  assert_int_equal(hilock__script_run(f->client, &e, &s, 0, NULL, NULL, N,
                                      args, lens, &r),
                   HILOCK_EINVAL);
  assert_null(r);
  assert_int_equal(hilock__script_run(f->client, &e, &s, -1, NULL, NULL, 0,
                                      NULL, NULL, &r),
                   HILOCK_EINVAL);
  /* More than fit on the stack (a multi-key lock) still run. */
  assert_hl_ok(hilock__script_run(f->client, &e, &s, 0, NULL, NULL, 40, args,
                                  lens, &r),
               e.msg);
  assert_int_equal(r->type, REDIS_REPLY_INTEGER);
  assert_int_equal(r->integer, 40);
  freeReplyObject(r);
  free(args);
  free(lens);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

HL_FIXTURE_MAIN("script",
      T(embedded_sha1_matches_the_server),
      T(first_acquire_loads_the_script_then_evalsha_hits),
      T(acquire_works_after_script_flush),
      T(release_and_extend_work_after_script_flush),
      T(acquire_works_after_server_restart),
      T(lua_errors_are_escript_with_redis_text),
      T(script_runner_rejects_too_many_arguments))
