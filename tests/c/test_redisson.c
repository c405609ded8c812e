/* Redisson compatibility (core/src/redisson.c) against a real server: the
 * keys, fields and TTLs Redisson's RLock, RFairLock and RReadWriteLock use,
 * the unlock messages on Redisson's channels, a holder Redisson wrote, and
 * argument checks. (tests/python/test_interop.py runs the same locks
 * against Redisson itself.) */
#include "test_util.h"

typedef hl_fixture fixture;

typedef int (*ctor)(hilock_client *, const char *, size_t, int64_t,
                    hilock_rlock **);

static const ctor ctors[] = {
    hilock_rlock_new_redisson, hilock_rlock_new_redisson_fair,
    hilock_rlock_new_redisson_read, hilock_rlock_new_redisson_write};

static void null_and_bad_arguments_are_einval(void **state) {
  fixture *f = *state;
  for (size_t i = 0; i < sizeof(ctors) / sizeof(ctors[0]); i++) {
    hilock_rlock *rl = (hilock_rlock *)1;
    assert_int_equal(ctors[i](NULL, "n", 1, 1000, &rl), HILOCK_EINVAL);
    assert_null(rl);
    assert_int_equal(ctors[i](f->client, "n", 1, 1000, NULL), HILOCK_EINVAL);
    assert_int_equal(ctors[i](f->client, NULL, 1, 1000, &rl), HILOCK_EINVAL);
    assert_null(rl);
    assert_int_equal(ctors[i](f->client, "n", 0, 1000, &rl), HILOCK_EINVAL);
    assert_int_equal(ctors[i](f->client, "n", 1, 0, &rl), HILOCK_EINVAL);
    assert_null(rl);
  }
}

/* The single field of hash key and its value; fails unless there is one. */
static long long only_field(fixture *f, const char *key, char **field) {
  redisReply *r = hl_redis(f->redis, "HGETALL %s", key);
  long long n;
  assert_int_equal(r->type, REDIS_REPLY_ARRAY);
  assert_int_equal(r->elements, 2);
  *field = strdup(r->element[0]->str);
  n = atoll(r->element[1]->str);
  freeReplyObject(r);
  return n;
}

static void rlock_uses_the_name_as_given(void **state) {
  fixture *f = *state;
  hilock_rlock *rl = NULL;
  char *field = NULL;
  size_t klen;
  redisReply *r;
  assert_hl_ok(hilock_rlock_new_redisson(f->client, "orders:42", 9, 30000, &rl),
               hilock_client_errmsg(f->client));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 0), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_string_equal(hilock_hold_key(HILOCK_HOLD(rl), &klen), "orders:42");
  assert_int_equal(only_field(f, "orders:42", &field), 2);
  assert_non_null(strchr(field, ':'));
  free(field);
  assert_i64_between(hl_redis_int(f->redis, "PTTL orders:42"), 29000, 30000);
  /* Redisson's RLock keeps no fence, and nothing of hilock's own layout. */
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(rl)), 0);
  r = hl_redis(f->redis, "KEYS hilock:*");
  assert_int_equal(r->elements, 0);
  freeReplyObject(r);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_false(hl_redis_exists(f->redis, "orders:42", 9));
  hilock_hold_free(HILOCK_HOLD(rl));
}

/* A handle of ctor on key, which a Redisson owner holds (as Redisson's
 * acquire writes it): neither a try nor a short wait gets in. */
static hilock_rlock *behind_a_redisson_holder(fixture *f, ctor make,
                                              const char *key) {
  hilock_rlock *rl = NULL;
  freeReplyObject(hl_redis(f->redis, "HSET %s 1b3c-uuid:1 1", key));
  freeReplyObject(hl_redis(f->redis, "PEXPIRE %s 30000", key));
  assert_hl_ok(make(f->client, key, strlen(key), 30000, &rl),
               hilock_client_errmsg(f->client));
  assert_int_equal(hilock_hold_try_acquire(HILOCK_HOLD(rl)), HILOCK_BUSY);
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(rl), 100), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  return rl;
}

static void a_redisson_holder_excludes_and_is_not_released(void **state) {
  fixture *f = *state;
  hilock_rlock *rl = behind_a_redisson_holder(f, hilock_rlock_new_redisson, "java");
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(rl)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  {
    char *field = NULL;
    assert_int_equal(only_field(f, "java", &field), 1);
    assert_string_equal(field, "1b3c-uuid:1");
    free(field);
  }
  hilock_hold_free(HILOCK_HOLD(rl));
}

/* The next message on a subscribed connection: its channel and payload. */
static void expect_message(redisContext *sub, const char *channel,
                           const char *payload) {
  redisReply *r = NULL;
  assert_int_equal(redisGetReply(sub, (void **)&r), REDIS_OK);
  assert_int_equal(r->type, REDIS_REPLY_ARRAY);
  assert_string_equal(r->element[0]->str, "message");
  assert_string_equal(r->element[1]->str, channel);
  assert_string_equal(r->element[2]->str, payload);
  freeReplyObject(r);
}

static redisContext *subscriber(fixture *f, const char *channel) {
  struct timeval tv = {5, 0};
  redisContext *sub = redisConnectWithTimeout("127.0.0.1", f->server.port, tv);
  redisReply *r;
  assert_non_null(sub);
  assert_int_equal(sub->err, 0);
  assert_int_equal(redisSetTimeout(sub, tv), REDIS_OK);
  r = redisCommand(sub, "SUBSCRIBE %s", channel);
  assert_non_null(r);
  freeReplyObject(r);
  return sub;
}

static void releases_publish_redisson_unlock_messages(void **state) {
  fixture *f = *state;
  hilock_rlock *rl = NULL, *rd = NULL, *wr = NULL;
  /* A name with its own hash tag: the channel takes it as it is. */
  redisContext *lock_sub = subscriber(f, "redisson_lock__channel:a{x}b");
  redisContext *rw_sub = subscriber(f, "redisson_rwlock:{rw}");
  assert_hl_ok(hilock_rlock_new_redisson(f->client, "a{x}b", 5, 30000, &rl),
               hilock_client_errmsg(f->client));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  expect_message(lock_sub, "redisson_lock__channel:a{x}b", "0");
  /* Read-write: mode, per-hold keys, 0 for a read release, 1 for a write
   * release. */
  assert_hl_ok(hilock_rlock_new_redisson_read(f->client, "rw", 2, 30000, &rd),
               hilock_client_errmsg(f->client));
  assert_hl_ok(hilock_rlock_new_redisson_write(f->client, "rw", 2, 30000, &wr),
               hilock_client_errmsg(f->client));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(rd)), hilock_hold_errmsg(HILOCK_HOLD(rd)));
  {
    redisReply *r = hl_redis(f->redis, "HGET rw mode");
    assert_string_equal(r->str, "read");
    freeReplyObject(r);
    r = hl_redis(f->redis, "KEYS {rw}:*:rwlock_timeout:1");
    assert_int_equal(r->elements, 1);
    freeReplyObject(r);
  }
  assert_int_equal(hilock_hold_try_acquire(HILOCK_HOLD(wr)), HILOCK_BUSY);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rd)), hilock_hold_errmsg(HILOCK_HOLD(rd)));
  expect_message(rw_sub, "redisson_rwlock:{rw}", "0");
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(wr)), hilock_hold_errmsg(HILOCK_HOLD(wr)));
  {
    char *field = NULL;
    redisReply *r = hl_redis(f->redis, "HGET rw mode");
    assert_string_equal(r->str, "write");
    freeReplyObject(r);
    freeReplyObject(hl_redis(f->redis, "HDEL rw mode"));
    assert_int_equal(only_field(f, "rw", &field), 1);
    assert_string_equal(field + strlen(field) - 6, ":write");
    free(field);
    freeReplyObject(hl_redis(f->redis, "HSET rw mode write"));
  }
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(wr)), hilock_hold_errmsg(HILOCK_HOLD(wr)));
  expect_message(rw_sub, "redisson_rwlock:{rw}", "1");
  assert_false(hl_redis_exists(f->redis, "rw", 2));
  hl_holds_free(HILOCK_HOLD(rl), HILOCK_HOLD(rd), HILOCK_HOLD(wr));
  redisFree(lock_sub);
  redisFree(rw_sub);
}

static void fair_try_acquire_never_stays_queued(void **state) {
  fixture *f = *state;
  hilock_rlock *fl =
      behind_a_redisson_holder(f, hilock_rlock_new_redisson_fair, "fair");
  assert_int_equal(hl_redis_int(f->redis, "LLEN redisson_lock_queue:{fair}"), 0);
  assert_int_equal(hl_redis_int(f->redis, "ZCARD redisson_lock_timeout:{fair}"), 0);
  freeReplyObject(hl_redis(f->redis, "DEL fair"));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(fl)), hilock_hold_errmsg(HILOCK_HOLD(fl)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(fl)), hilock_hold_errmsg(HILOCK_HOLD(fl)));
  hilock_hold_free(HILOCK_HOLD(fl));
}

/* hilock_rlock_new_redisson_kind, under the four constructors: a kind that
 * is none of Redisson's is HILOCK_EINVAL with a message, and no handle. */
static void new_redisson_kind_checks_the_kind(void **state) {
  fixture *f = *state;
  hilock_rlock *rl = (hilock_rlock *)1;
  assert_hl_rc(hilock_rlock_new_redisson_kind(f->client, "n", 1,
                                              (hilock_redisson_kind)4, 1000,
                                              &rl),
               HILOCK_EINVAL, hilock_client_errmsg(f->client));
  assert_null(rl);
  assert_non_null(strstr(hilock_client_errmsg(f->client), "Redisson kind"));
  assert_hl_rc(hilock_rlock_new_redisson_kind(f->client, "n", 1,
                                              (hilock_redisson_kind)-1, 1000,
                                              &rl),
               HILOCK_EINVAL, hilock_client_errmsg(f->client));
  assert_int_equal(hilock_rlock_new_redisson_kind(NULL, "n", 1,
                                                  (hilock_redisson_kind)9,
                                                  1000, &rl),
                   HILOCK_EINVAL);
  assert_null(rl);
  assert_hl_ok(hilock_rlock_new_redisson_kind(f->client, "n", 1,
                                              HILOCK_REDISSON_WRITE_LOCK, 1000,
                                              &rl),
               hilock_client_errmsg(f->client));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_int_equal(hl_redis_int(f->redis, "HEXISTS n mode"), 1);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  hilock_hold_free(HILOCK_HOLD(rl));
}

HL_FIXTURE_MAIN("redisson",
      HL_TEST(null_and_bad_arguments_are_einval),
      HL_TEST(rlock_uses_the_name_as_given),
      HL_TEST(a_redisson_holder_excludes_and_is_not_released),
      HL_TEST(releases_publish_redisson_unlock_messages),
      HL_TEST(fair_try_acquire_never_stays_queued),
      HL_TEST(new_redisson_kind_checks_the_kind))
