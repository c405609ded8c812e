/* A reply lost to a broken connection after the server ran the script: the
 * reentrant and read-write locks' acquire and release are resent once on a
 * fresh connection and count once. Against a real server; the test links
 * with -Wl,--wrap= for hilock__net_append and hilock__net_get_reply: once
 * armed for a script, the reply to its next call is read from the server
 * (so the script ran) and then reported as a connection reset. */
#include "test_util.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "scripts.h"

typedef hl_fixture fixture;

/* ## The reply-swallowing transport ---------------------------------------- */

int __real_hilock__net_append(hilock__net *c, int argc, const char **argv,
                              const size_t *lens);
int __real_hilock__net_get_reply(hilock__net *c, void **reply);
int __wrap_hilock__net_append(hilock__net *c, int argc, const char **argv,
                              const size_t *lens);
int __wrap_hilock__net_get_reply(hilock__net *c, void **reply);

static const hilock__script *_Atomic target; /* swallow its next reply */
static atomic_int pending;                     /* its call was written */
static atomic_int left;                        /* replies still to swallow */
static atomic_int swallowed;                   /* replies swallowed */

static int is_target(int argc, const char **argv, const size_t *lens) {
  const hilock__script *s = atomic_load(&target);
  if (s == NULL || argc < 2) return 0;
  if (lens[0] == 7 && memcmp(argv[0], "EVALSHA", 7) == 0)
    return lens[1] == 40 && memcmp(argv[1], s->sha, 40) == 0;
  if (lens[0] == 4 && memcmp(argv[0], "EVAL", 4) == 0)
    return lens[1] == s->len && memcmp(argv[1], s->src, s->len) == 0;
  return 0;
}

int __wrap_hilock__net_append(hilock__net *c, int argc, const char **argv,
                              const size_t *lens) {
  if (is_target(argc, argv, lens)) atomic_store(&pending, 1);
  return __real_hilock__net_append(c, argc, argv, lens);
}

int __wrap_hilock__net_get_reply(hilock__net *c, void **reply) {
  int rc = __real_hilock__net_get_reply(c, reply);
  redisReply *r = rc == 0 ? *reply : NULL;
  /* PING's PONG and NOSCRIPT come before the script's own reply. */
  if (r == NULL || !atomic_load(&pending) ||
      (r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0) ||
      r->type == REDIS_REPLY_ERROR)
    return rc;
  atomic_store(&pending, 0);
  if (atomic_fetch_sub(&left, 1) <= 1) atomic_store(&target, NULL);
  atomic_fetch_add(&swallowed, 1);
  freeReplyObject(r);
  *reply = NULL;
  errno = ECONNRESET;
  return -1;
}

/* The next n calls of s lose their reply after the server ran them. */
static void lose_next_replies(const hilock__script *s, int n) {
  atomic_store(&pending, 0);
  atomic_store(&left, n);
  atomic_store(&target, s);
}

static void lose_next_reply(const hilock__script *s) { lose_next_replies(s, 1); }

/* The reply of the armed script was swallowed (so the call was resent). */
static void assert_swallowed(int n) {
  assert_null(atomic_load(&target));
  assert_int_equal(atomic_load(&swallowed), n);
}

/* ## Reading the server's state --------------------------------------------- */

/* Hash key's owner fields (neither 'fence' nor '<owner>:op'): their count,
 * the last one's value in *count; *ops gets the number of ':op' fields. */
static int owners_of(fixture *f, const char *key, long long *count,
                     int *ops) {
  redisReply *r = hl_redis(f->redis, "HGETALL %s", key);
  int owners = 0;
  *count = 0;
  *ops = 0;
  assert_int_equal(r->type, REDIS_REPLY_ARRAY);
  for (size_t i = 0; i + 1 < r->elements; i += 2) {
    const redisReply *k = r->element[i];
    if (strcmp(k->str, "fence") == 0) continue;
    if (k->len > 3 && strcmp(k->str + k->len - 3, ":op") == 0) {
      (*ops)++;
      continue;
    }
    owners++;
    *count = atoll(r->element[i + 1]->str);
  }
  freeReplyObject(r);
  return owners;
}

/* Exactly one owner in hash key, holding n levels, with its op field. */
static void assert_levels(fixture *f, const char *key, long long n) {
  long long count;
  int ops;
  assert_int_equal(owners_of(f, key, &count, &ops), 1);
  assert_int_equal(count, n);
  assert_int_equal(ops, 1);
}

/* One call (acquire with no wait, or release) of v on h whose reply is
 * lost once: it succeeds through its resend, the n-th reply swallowed,
 * and leaves levels holds in hash key (0: the key is gone). */
static void lost_once(fixture *f, hilock_hold *h, const hl_verbs *v,
                      int acquire, const hilock__script *s, int n,
                      const char *key, long long levels) {
  lose_next_reply(s);
  assert_hl_ok(acquire ? v->acquire(h, 0) : v->release(h),
               hilock_hold_errmsg(h));
  assert_swallowed(n);
  if (levels > 0)
    assert_levels(f, key, levels);
  else
    assert_false(hl_redis_exists(f->redis, key, strlen(key)));
}

/* Pool a connection, so that the next call's break is resent (a fresh
 * connection that breaks means the server is gone). */
static void warm(hilock_rlock *rl) {
  int64_t n;
  assert_hl_ok(hilock_rlock_hold_count(rl, &n),
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
}

/* ## Reentrant lock and the write side ------------------------------------ */

/* h (of v, its scripts, on lock name whose holds live in hash key and whose
 * fences in fkey): two acquires and two releases, each reply lost once,
 * count once each; the fence is drawn once; the op field is no holder for
 * inspection; a real "not owner" stays one, and the next grant draws the
 * next fence. */
static void lost_replies_count_once(fixture *f, hilock_hold *h,
                                    const hl_verbs *v,
                                    const hilock__script *acquire,
                                    const hilock__script *release,
                                    const char *name, const char *key,
                                    const char *fkey) {
  hilock_lock_info info;
  int base = atomic_load(&swallowed);
  uint64_t fence;

  /* Ahead of the clock, the counter counts the grants. */
  hl_redis_ok(f->redis, "SET %s %lld", fkey, HL_FENCE_AHEAD);
  lost_once(f, h, v, 1, acquire, base + 1, key, 1);
  fence = hilock_hold_fence(h);
  assert_int_equal(fence, HL_FENCE_AHEAD + 1);
  assert_int_equal(fence, hl_redis_get_int(f->redis, fkey));
  assert_hl_ok(hilock_client_inspect(f->client, name, strlen(name), &info),
               hilock_client_errmsg(f->client));
  assert_int_equal(info.hold_count, 1);
  assert_int_equal(info.fence, fence);
  assert_non_null(strchr(info.holder, ':'));
  assert_null(strstr(info.holder, ":op"));

  lost_once(f, h, v, 1, acquire, base + 2, key, 2);
  assert_int_equal(hilock_hold_fence(h), fence);
  lost_once(f, h, v, 0, release, base + 3, key, 1);
  /* The last release deleted the hash: its resend still reports success. */
  lost_once(f, h, v, 0, release, base + 4, key, 0);
  assert_false(hilock_hold_held(h));

  assert_hl_rc(v->release(h), HILOCK_ENOTOWNED, hilock_hold_errmsg(h));
  assert_hl_ok(v->acquire(h, 0), hilock_hold_errmsg(h));
  assert_int_equal(hilock_hold_fence(h), fence + 1);
  assert_levels(f, key, 1);
  assert_hl_ok(v->release(h), hilock_hold_errmsg(h));
  assert_false(hl_redis_exists(f->redis, key, strlen(key)));
}

static void rlock_lost_replies_count_once(void **state) {
  fixture *f = *state;
  hilock_rlock *rl = hl_new_rlock(f->client, "rs", 10000);
  warm(rl);
  lost_replies_count_once(f, HILOCK_HOLD(rl), &hl_rlock_verbs,
                          &hilock__script_rlock_acquire,
                          &hilock__script_rlock_release, "rs",
                          "hilock:{rs}:rlock", "hilock:{rs}:fence");
  hilock_hold_free(HILOCK_HOLD(rl));
}

/* ## Read-write lock ------------------------------------------------------ */

static void rwlock_lost_write_replies_count_once(void **state) {
  fixture *f = *state;
  hilock_rwlock *rw = hl_new_rwlock(f->client, "rw", 10000);
  int64_t n;
  assert_hl_ok(hilock_rwlock_write_hold_count(rw, &n), /* pools one */
               hilock_hold_errmsg(HILOCK_HOLD(rw)));
  lost_replies_count_once(f, HILOCK_HOLD(rw), &hl_write_verbs,
                          &hilock__script_rwlock_write_acquire,
                          &hilock__script_rwlock_write_release, "rw",
                          "hilock:{rw}:rw:writer", "hilock:{rw}:fence");
  hilock_hold_free(HILOCK_HOLD(rw));
}

static void rwlock_lost_read_replies_count_once(void **state) {
  fixture *f = *state;
  const char *counts = "hilock:{rd}:rw:counts";
  const char *readers = "hilock:{rd}:rw:readers";
  hilock_rwlock *rw = hl_new_rwlock(f->client, "rd", 10000);
  hilock_lock_info info;
  int base = atomic_load(&swallowed);
  int64_t n;

  assert_hl_ok(hilock_rwlock_read_hold_count(rw, &n),
               hilock_hold_errmsg(HILOCK_HOLD(rw)));
  lost_once(f, HILOCK_HOLD(rw), &hl_read_verbs, 1,
            &hilock__script_rwlock_read_acquire, base + 1, counts, 1);
  assert_int_equal(hl_redis_int(f->redis, "ZCARD %s", readers), 1);
  assert_hl_ok(hilock_client_inspect(f->client, "rd", 2, &info),
               hilock_client_errmsg(f->client));
  assert_int_equal(info.readers, 1);
  assert_int_equal(info.hold_count, 1);

  lost_once(f, HILOCK_HOLD(rw), &hl_read_verbs, 1,
            &hilock__script_rwlock_read_acquire, base + 2, counts, 2);
  assert_hl_ok(hilock_rwlock_read_hold_count(rw, &n),
               hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_int_equal(n, 2);

  lost_once(f, HILOCK_HOLD(rw), &hl_read_verbs, 0,
            &hilock__script_rwlock_read_release, base + 3, counts, 1);

  lose_next_reply(&hilock__script_rwlock_read_release);
  assert_hl_ok(hilock_rwlock_read_release(rw),
               hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_swallowed(base + 4);
  /* No level and no op field left: both keys are gone. */
  assert_false(hl_redis_exists(f->redis, counts, strlen(counts)));
  assert_false(hl_redis_exists(f->redis, readers, strlen(readers)));

  assert_hl_rc(hilock_rwlock_read_release(rw), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(rw)));
  /* A writer gets in: no read level was left behind. */
  assert_hl_ok(hilock_rwlock_write_try_acquire(rw),
               hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_hl_ok(hilock_rwlock_write_release(rw),
               hilock_hold_errmsg(HILOCK_HOLD(rw)));
  hilock_hold_free(HILOCK_HOLD(rw));
}

/* A reader whose hold lapsed is purged with its op field. */
static void lapsed_reader_leaves_no_op_field(void **state) {
  fixture *f = *state;
  hilock_rwlock *a = hl_new_rwlock(f->client, "lapse", 300);
  hilock_client *c2 = hl_client(f->server.url, NULL);
  hilock_rwlock *b = hl_new_rwlock(c2, "lapse", 10000);
  long long count;
  int ops;

  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(a), 0, 0, NULL, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_rwlock_read_set_auto_renew(a, 0, 0, NULL, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_rwlock_read_acquire(a, 0),
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_rwlock_read_acquire(b, 0),
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  hl_sleep_ms(400);
  /* b's release purges a's lapsed hold: one owner, one op field left. */
  assert_hl_ok(hilock_rwlock_read_acquire(b, 0),
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_int_equal(owners_of(f, "hilock:{lapse}:rw:counts", &count, &ops), 1);
  assert_int_equal(count, 2);
  assert_int_equal(ops, 1);
  assert_hl_ok(hilock_rwlock_read_release(b), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_hl_ok(hilock_rwlock_read_release(b), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_false(hl_redis_exists(f->redis, "hilock:{lapse}:rw:counts", 24));
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
  hilock_client_free(c2);
}

/* ## Both the call and its resend lost ------------------------------------ */

/* The acquire fails (EIO); the level it added is given back, a re-entry's
 * too. A nested release fails: it is completed, once, before the outer
 * release, which then frees the lock. */
static void rlock_call_and_resend_lost(void **state) {
  fixture *f = *state;
  const char *key = "hilock:{rs2}:rlock";
  hilock_rlock *rl = hl_new_rlock(f->client, "rs2", 10000);
  int base = atomic_load(&swallowed);

  warm(rl);
  lose_next_replies(&hilock__script_rlock_acquire, 2);
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(rl), 0), HILOCK_EIO,
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_swallowed(base + 2);
  assert_false(hl_redis_exists(f->redis, key, strlen(key))); /* undone */
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 0), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(rl)),
                   hl_redis_get_int(f->redis, "hilock:{rs2}:fence"));
  lose_next_replies(&hilock__script_rlock_acquire, 2);
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(rl), 0), HILOCK_EIO,
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_swallowed(base + 4);
  assert_levels(f, key, 1); /* the re-entry was given back */
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 0), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_levels(f, key, 2);

  lose_next_replies(&hilock__script_rlock_release, 2);
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(rl)), HILOCK_EIO,
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_swallowed(base + 6);
  assert_levels(f, key, 1); /* it ran */
  /* The outer release: the failed one is completed first, with its nonce
   * (it counts once), then this one leaves the last level. */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_false(hl_redis_exists(f->redis, key, strlen(key)));
  assert_false(hilock_hold_held(HILOCK_HOLD(rl)));
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(rl)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  hilock_hold_free(HILOCK_HOLD(rl));
}

/* One side of a read-write lock (v, its scripts, the key its holds live
 * in): an acquire whose call and resend are both lost fails and leaves no
 * hold; a nested release that fails is completed before the outer one. */
static void side_call_and_resend_lost(fixture *f, hilock_rwlock *rw,
                                      const hl_verbs *v,
                                      const hilock__script *acquire,
                                      const hilock__script *release,
                                      const char *key) {
  hilock_hold *h = HILOCK_HOLD(rw);
  lose_next_replies(acquire, 2);
  assert_hl_rc(v->acquire(h, 0), HILOCK_EIO, hilock_hold_errmsg(h));
  assert_false(hl_redis_exists(f->redis, key, strlen(key)));
  assert_hl_ok(v->acquire(h, 0), hilock_hold_errmsg(h));
  assert_hl_ok(v->acquire(h, 0), hilock_hold_errmsg(h));
  lose_next_replies(release, 2);
  assert_hl_rc(v->release(h), HILOCK_EIO, hilock_hold_errmsg(h));
  assert_levels(f, key, 1);
  assert_hl_ok(v->release(h), hilock_hold_errmsg(h));
  assert_false(hl_redis_exists(f->redis, key, strlen(key)));
}

static void rwlock_call_and_resend_lost(void **state) {
  fixture *f = *state;
  hilock_rwlock *rw = hl_new_rwlock(f->client, "rw2", 10000);
  int base = atomic_load(&swallowed);
  int64_t n;

  assert_hl_ok(hilock_rwlock_write_hold_count(rw, &n),
               hilock_hold_errmsg(HILOCK_HOLD(rw)));
  side_call_and_resend_lost(f, rw, &hl_write_verbs,
                            &hilock__script_rwlock_write_acquire,
                            &hilock__script_rwlock_write_release,
                            "hilock:{rw2}:rw:writer");
  assert_swallowed(base + 4);
  side_call_and_resend_lost(f, rw, &hl_read_verbs,
                            &hilock__script_rwlock_read_acquire,
                            &hilock__script_rwlock_read_release,
                            "hilock:{rw2}:rw:counts");
  assert_hl_rc(hilock_rwlock_read_release(rw), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_swallowed(base + 8);
  hilock_hold_free(HILOCK_HOLD(rw));
}

HL_FIXTURE_MAIN("resend",
      HL_TEST(rlock_lost_replies_count_once),
      HL_TEST(rwlock_lost_write_replies_count_once),
      HL_TEST(rwlock_lost_read_replies_count_once),
      HL_TEST(lapsed_reader_leaves_no_op_field),
      HL_TEST(rlock_call_and_resend_lost),
      HL_TEST(rwlock_call_and_resend_lost))
