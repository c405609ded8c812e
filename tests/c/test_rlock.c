/* The reentrant lock against a real server: re-entry by the owning thread,
 * blocking of other threads and processes, hold counts in the Redis hash,
 * TTL refresh, fencing, and argument checks. */
#include "test_util.h"

#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef hl_fixture fixture;

static long gettid_(void) { return (long)syscall(SYS_gettid); }

/* The hash's single owner field and its count; fails unless there is
 * exactly one (besides it, only the owner's '<owner>:op' field, the nonce
 * of its last call). *owner is malloc'd. */
static long long only_owner(fixture *f, const hilock_rlock *rl, char **owner) {
  size_t klen;
  const char *key = hilock_hold_key(HILOCK_HOLD(rl), &klen);
  redisReply *r = hl_redis(f->redis, "HGETALL %b", key, klen);
  long long n = 0;
  int owners = 0, ops = 0;
  *owner = NULL;
  for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements;
       i += 2) {
    const redisReply *k = r->element[i];
    if (k->len > 3 && strcmp(k->str + k->len - 3, ":op") == 0) {
      ops++;
      continue;
    }
    owners++;
    free(*owner);
    *owner = strdup(k->str);
    n = atoll(r->element[i + 1]->str);
  }
  if (r->type != REDIS_REPLY_ARRAY || owners != 1 || ops != 1) {
    print_error("HGETALL: type %d, %zu elements (expected one owner and "
                "its op field)\n",
                r->type, r->elements);
    freeReplyObject(r);
    fail();
  }
  freeReplyObject(r);
  return n;
}

/* The owner field written for thread tid: 32 hex chars, ':', the tid. */
static void assert_owner_is(const char *owner, long tid) {
  char want[32];
  assert_int_equal(strlen(owner) > 33, 1);
  for (int i = 0; i < 32; i++) assert_true(isxdigit((unsigned char)owner[i]));
  snprintf(want, sizeof(want), ":%ld", tid);
  assert_string_equal(owner + 32, want);
}

static long long hash_count(fixture *f, const hilock_rlock *rl) {
  char *owner;
  long long n = only_owner(f, rl, &owner);
  free(owner);
  return n;
}

static int64_t count_of(hilock_rlock *rl) {
  int64_t n = -1;
  assert_hl_ok(hilock_rlock_hold_count(rl, &n), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  return n;
}

/* ## Re-entry ------------------------------------------------------------------ */

static void same_thread_reenters_without_blocking(void **state) {
  fixture *f = *state;
  hilock_rlock *rl = hl_new_rlock(f->client, "reenter", 10000);
  char *owner;
  int owned = 0, locked = 0;
  int64_t t0;

  t0 = hl_now_ms();
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 5000), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), HILOCK_WAIT_FOREVER),
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  /* Re-entries never wait (a wait would last 5 s, or for ever); 2 s leaves
   * room for a stalled, loaded machine. */
  assert_i64_between(hl_now_ms() - t0, 0, 2000);

  assert_int_equal(only_owner(f, rl, &owner), 3);
  assert_owner_is(owner, gettid_());
  free(owner);
  assert_int_equal(count_of(rl), 3);
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(rl), &owned), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_true(owned);
  assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(rl), &locked), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_true(locked);
  assert_i64_between(hilock_hold_validity_ms(HILOCK_HOLD(rl)), 9000, 10000);

  for (int left = 2; left >= 0; left--) {
    assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
    assert_int_equal(count_of(rl), left);
    if (left > 0) assert_int_equal(hash_count(f, rl), left);
  }
  assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(rl)));
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(rl), &owned), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_false(owned);
  assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(rl), &locked), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_false(locked);
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(rl)), 0);
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(rl)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(rl)), HILOCK_ENOTOWNED);
  hilock_hold_free(HILOCK_HOLD(rl));
}

/* ## Other threads ------------------------------------------------------------ */

typedef struct other {
  hilock_rlock *rl;
  int no_try; /* the lock is free: skip the first, busy attempt */
  int try_rc, rc, release_rc, owned;
  int64_t count, t_end;
  long tid;
  uint64_t fence;
  atomic_int done;
  pthread_t thread;
} other;

/* Another thread: one try (expected busy), then a blocking acquire; once
 * granted, note the hold count and fence and leave. */
static void *other_waits(void *arg) {
  other *o = arg;
  o->tid = gettid_();
  o->try_rc = o->no_try ? HILOCK_BUSY : hilock_hold_try_acquire(HILOCK_HOLD(o->rl));
  o->rc = hilock_hold_acquire(HILOCK_HOLD(o->rl), 5000);
  o->t_end = hl_now_ms();
  o->release_rc = -100;
  if (o->rc == HILOCK_OK) {
    o->fence = hilock_hold_fence(HILOCK_HOLD(o->rl));
    if (hilock_rlock_hold_count(o->rl, &o->count) != HILOCK_OK) o->count = -1;
    o->release_rc = hilock_hold_release(HILOCK_HOLD(o->rl));
  }
  atomic_store(&o->done, 1);
  return NULL;
}

/* Start o on rl (see other_waits); no_try: the lock is free. */
static void start_other(other *o, hilock_rlock *rl, int no_try) {
  memset(o, 0, sizeof(*o));
  o->rl = rl;
  o->no_try = no_try;
  assert_int_equal(pthread_create(&o->thread, NULL, other_waits, o), 0);
}

/* A new handle on name that this thread entered twice (a hold count of
 * 2). */
static hilock_rlock *entered_twice(hilock_client *c, const char *name,
                                   int64_t ttl_ms) {
  hilock_rlock *rl = hl_new_rlock(c, name, ttl_ms);
  for (int i = 0; i < 2; i++)
    assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 0),
                 hilock_hold_errmsg(HILOCK_HOLD(rl)));
  return rl;
}

static void other_thread_blocks_until_the_final_release(void **state) {
  fixture *f = *state;
  hilock_rlock *rl = entered_twice(f->client, "blocking", 10000);
  other o;
  int64_t t_rel;

  start_other(&o, rl, 0); /* the same handle: threads are separate owners */
  assert_true(hl_wait_waiters(f->redis, 1,
                                 3000));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  hl_sleep_ms(200);
  assert_int_equal(atomic_load(&o.done), 0); /* still held once */
  assert_int_equal(hash_count(f, rl), 1);

  t_rel = hl_now_ms();
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  pthread_join(o.thread, NULL);
  assert_hl_rc(o.try_rc, HILOCK_BUSY, hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(o.rc, hilock_hold_errmsg(HILOCK_HOLD(rl)));
  /* Woken, not by the 10 s TTL or the 5 s wait (room for a loaded machine). */
  assert_i64_between(o.t_end - t_rel, 0, 2000);
  assert_int_equal(o.count, 1);
  assert_hl_ok(o.release_rc, hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(rl)));
  hilock_hold_free(HILOCK_HOLD(rl));
}

typedef struct stranger {
  hilock_rlock *rl;
  int release_rc, owned_rc, owned, locked;
  int errcode; /* the thread's own last error on the handle */
  int64_t count;
} stranger;

static void *stranger_releases(void *arg) {
  stranger *s = arg;
  s->release_rc = hilock_hold_release(HILOCK_HOLD(s->rl));
  s->errcode = hilock_hold_errcode(HILOCK_HOLD(s->rl));
  if (hilock_rlock_hold_count(s->rl, &s->count) != HILOCK_OK) s->count = -1;
  s->owned_rc = hilock_hold_owned(HILOCK_HOLD(s->rl), &s->owned);
  if (hilock_hold_locked(HILOCK_HOLD(s->rl), &s->locked) != HILOCK_OK) s->locked = -1;
  return NULL;
}

static void release_from_a_non_holding_thread_changes_nothing(void **state) {
  fixture *f = *state;
  hilock_client *c2 = hl_client(f->server.url, NULL);
  hilock_rlock *rl = entered_twice(f->client, "strangers", 10000);
  hilock_rlock *other_client = hl_new_rlock(c2, "strangers", 10000);
  hilock_rlock *handles[2] = {rl, other_client};
  char *before, *after;
  uint64_t fence;

  fence = hilock_hold_fence(HILOCK_HOLD(rl));
  assert_int_equal(only_owner(f, rl, &before), 2);

  /* A thread of the same handle, and one of another client's handle. */
  for (int i = 0; i < 2; i++) {
    stranger s;
    pthread_t t;
    memset(&s, 0, sizeof(s));
    s.rl = handles[i];
    assert_int_equal(pthread_create(&t, NULL, stranger_releases, &s), 0);
    pthread_join(t, NULL);
    assert_hl_rc(s.release_rc, HILOCK_ENOTOWNED, hilock_hold_errmsg(HILOCK_HOLD(s.rl)));
    /* Errors are per thread: the stranger saw its own; this thread, which
     * made no failed call on the handle, sees none. */
    assert_int_equal(s.errcode, HILOCK_ENOTOWNED);
    assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(s.rl)), HILOCK_OK);
    assert_int_equal(s.count, 0);
    assert_hl_ok(s.owned_rc, hilock_hold_errmsg(HILOCK_HOLD(s.rl)));
    assert_false(s.owned);
    assert_int_equal(s.locked, 1);
    assert_int_equal(only_owner(f, rl, &after), 2);
    assert_string_equal(after, before);
    free(after);
  }
  /* From this thread too, on the other client's handle. */
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(other_client)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(other_client)));
  assert_int_equal(hash_count(f, rl), 2);

  /* The holder's grant is untouched: still valid, same fence, and it
   * leaves normally. */
  assert_false(hilock_hold_lost(HILOCK_HOLD(rl)));
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(rl)) > 0);
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(rl)), fence);
  assert_int_equal(count_of(rl), 2);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(rl)));
  free(before);
  hl_holds_free(HILOCK_HOLD(rl), HILOCK_HOLD(other_client));
  hilock_client_free(c2);
}

#define NSHARERS 4
#define SHARE_ROUNDS 15

typedef struct sharer {
  hilock_rlock *rl;
  atomic_int *inside;
  atomic_int *overlaps;
  atomic_int *errors;
} sharer;

static void *share_rounds(void *arg) {
  sharer *s = arg;
  for (int i = 0; i < SHARE_ROUNDS; i++) {
    int64_t n = 0;
    if (hilock_hold_acquire(HILOCK_HOLD(s->rl), 5000) != HILOCK_OK) {
      atomic_fetch_add(s->errors, 1);
      continue;
    }
    if (atomic_fetch_add(s->inside, 1) != 0) atomic_fetch_add(s->overlaps, 1);
    if (hilock_hold_acquire(HILOCK_HOLD(s->rl), 0) != HILOCK_OK ||
        hilock_rlock_hold_count(s->rl, &n) != HILOCK_OK || n != 2)
      atomic_fetch_add(s->errors, 1);
    atomic_fetch_sub(s->inside, 1);
    if (hilock_hold_release(HILOCK_HOLD(s->rl)) != HILOCK_OK ||
        hilock_hold_release(HILOCK_HOLD(s->rl)) != HILOCK_OK)
      atomic_fetch_add(s->errors, 1);
  }
  return NULL;
}

static void threads_sharing_a_handle_exclude_each_other(void **state) {
  fixture *f = *state;
  hilock_rlock *rl = hl_new_rlock(f->client, "shared-handle", 10000);
  atomic_int inside, overlaps, errors;
  sharer s[NSHARERS];
  pthread_t t[NSHARERS];

  /* A counter ahead of the clock: every grant adds exactly one. */
  hl_redis_ok(f->redis, "SET hilock:{shared-handle}:fence %lld",
              HL_FENCE_AHEAD);
  atomic_init(&inside, 0);
  atomic_init(&overlaps, 0);
  atomic_init(&errors, 0);
  for (int i = 0; i < NSHARERS; i++) {
    s[i].rl = rl;
    s[i].inside = &inside;
    s[i].overlaps = &overlaps;
    s[i].errors = &errors;
    assert_int_equal(pthread_create(&t[i], NULL, share_rounds, &s[i]), 0);
  }
  for (int i = 0; i < NSHARERS; i++) pthread_join(t[i], NULL);
  assert_int_equal(atomic_load(&errors), 0);
  assert_int_equal(atomic_load(&overlaps), 0);
  assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(rl)));
  /* One fence per grant; re-entries draw none. */
  assert_int_equal(hl_redis_int(f->redis, "INCRBY hilock:{shared-handle}:fence 0"),
                   HL_FENCE_AHEAD + NSHARERS * SHARE_ROUNDS);
  hilock_hold_free(HILOCK_HOLD(rl));
}

/* ## Other processes ----------------------------------------------------------- */

typedef struct proc_arg {
  const char *url;
  hilock_rlock *inherited;
  int fd; /* write end: one byte when about to wait */
} proc_arg;

static int child_contends(void *arg) {
  proc_arg *p = arg;
  hilock_client *c;
  hilock_rlock *rl = NULL;
  int64_t t0, n = 0;
  int rc;

  /* The parent's handle, inherited: its grant is not the child's. */
  HL_CHILD_CHECK(hilock_hold_release(HILOCK_HOLD(p->inherited)) == HILOCK_EFORKED);
  HL_CHILD_CHECK(hilock_hold_try_acquire(HILOCK_HOLD(p->inherited)) == HILOCK_BUSY);
  HL_CHILD_CHECK(hilock_rlock_hold_count(p->inherited, &n) == HILOCK_OK &&
              n == 0);

  HL_CHILD_CHECK((c = hl_child_client(p->url)) != NULL);
  HL_CHILD_CHECK(hilock_rlock_new(c, "process", 7, 10000, &rl) == HILOCK_OK);
  HL_CHILD_CHECK(hilock_hold_try_acquire(HILOCK_HOLD(rl)) == HILOCK_BUSY);
  t0 = hl_now_ms();
  HL_CHILD_CHECK(hilock_hold_acquire(HILOCK_HOLD(rl), 200) == HILOCK_BUSY);
  HL_CHILD_CHECK(hl_now_ms() - t0 >= 190);
  HL_CHILD_CHECK(write(p->fd, "x", 1) == 1);
  t0 = hl_now_ms();
  rc = hilock_hold_acquire(HILOCK_HOLD(rl), 5000);
  HL_CHILD_CHECK(rc == HILOCK_OK);
  HL_CHILD_CHECK(hl_now_ms() - t0 < 3000); /* woken, not the 10 s TTL */
  HL_CHILD_CHECK(hilock_rlock_hold_count(rl, &n) == HILOCK_OK && n == 1);
  HL_CHILD_CHECK(hilock_hold_release(HILOCK_HOLD(rl)) == HILOCK_OK);
  hilock_hold_free(HILOCK_HOLD(rl));
  hilock_client_free(c);
  return 0;
}

static void another_process_blocks(void **state) {
  fixture *f = *state;
  hilock_rlock *rl = hl_new_rlock(f->client, "process", 10000);
  proc_arg p = {.url = f->server.url, .inherited = rl};
  int status;
  char byte;
  pid_t pid;

  hl_redis_ok(f->redis, "SET hilock:{process}:fence %lld", HL_FENCE_AHEAD);
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 0), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  pid = hl_fork_ready(child_contends, &p, &p.fd, &byte, 1);
  assert_true(hl_wait_subscribed(f->redis, "hilock:{process}:wake", 1, 3000));
  assert_int_equal(hash_count(f, rl), 1); /* still only ours */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  status = hl_wait_child(pid, 5000);
  if (status != 0) {
    print_error("child status %d\n", status);
    fail();
  }
  assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(rl)));
  assert_int_equal(hl_redis_int(f->redis, "INCRBY hilock:{process}:fence 0"),
                   HL_FENCE_AHEAD + 2);
  hilock_hold_free(HILOCK_HOLD(rl));
}

/* ## TTL and fencing ------------------------------------------------------------ */

static void reentry_refreshes_the_ttl(void **state) {
  fixture *f = *state;
  hilock_rlock *rl = hl_new_rlock(f->client, "refresh", 1000);

  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 0), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  hl_sleep_ms(400);
  assert_i64_between(hl_hold_pttl(f->redis, HILOCK_HOLD(rl)), 1, 650);
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 0), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_i64_between(hl_hold_pttl(f->redis, HILOCK_HOLD(rl)), 900, 1000);
  assert_i64_between(hilock_hold_validity_ms(HILOCK_HOLD(rl)), 900, 1000);
  hl_sleep_ms(300);
  /* Leaving once (not the last time) refreshes it too. */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_i64_between(hl_hold_pttl(f->redis, HILOCK_HOLD(rl)), 900, 1000);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(rl)));
  hilock_hold_free(HILOCK_HOLD(rl));
}

static void lapsed_hold_lets_another_owner_in(void **state) {
  fixture *f = *state;
  hilock_rlock *rl = entered_twice(f->client, "lapsed", 300);
  other o;
  int64_t t0;

  t0 = hl_now_ms();
  start_other(&o, rl, 0);
  pthread_join(o.thread, NULL);
  /* Never released: the other thread gets in when the TTL runs out. */
  assert_hl_ok(o.rc, hilock_hold_errmsg(HILOCK_HOLD(rl)));
  /* Not at the end of the 5 s wait (room for a loaded machine). */
  assert_i64_between(o.t_end - t0, 250, 300 + 2000);
  assert_int_equal(o.count, 1);
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(rl)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  hilock_hold_free(HILOCK_HOLD(rl));
}

static void fence_is_kept_on_reentry_and_grows_for_the_next_owner(
    void **state) {
  fixture *f = *state;
  hilock_rlock *rl = hl_new_rlock(f->client, "fenced", 10000);
  hilock_rlock *rl2 = hl_new_rlock(f->client, "fenced", 10000);
  uint64_t f1;
  other o;

  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(rl)), 0);
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 0), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  f1 = hilock_hold_fence(HILOCK_HOLD(rl));
  assert_true(f1 > 0);
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 0), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(rl)), f1);
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 0), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(rl)), f1);
  for (int i = 0; i < 3; i++)
    assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(rl)), f1); /* the last grant's */

  /* The next owner, another thread. */
  start_other(&o, rl, 1);
  pthread_join(o.thread, NULL);
  assert_hl_ok(o.rc, hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(o.release_rc, hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_int_equal(o.count, 1);
  assert_true(o.fence > f1);

  /* And the owner after it, through another handle of this thread. */
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl2), 0), hilock_hold_errmsg(HILOCK_HOLD(rl2)));
  assert_true(hilock_hold_fence(HILOCK_HOLD(rl2)) > o.fence);
  assert_int_equal(hl_redis_int(f->redis, "INCRBY hilock:{fenced}:fence 0"),
                   (long long)hilock_hold_fence(HILOCK_HOLD(rl2)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl2)), hilock_hold_errmsg(HILOCK_HOLD(rl2)));
  hl_holds_free(HILOCK_HOLD(rl), HILOCK_HOLD(rl2));
}

static void final_release_deletes_the_hash_and_leaves_one_wake_up(
    void **state) {
  fixture *f = *state;
  hilock_rlock *rl = entered_twice(f->client, "final", 10000);

  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_true(hl_hold_exists(f->redis, HILOCK_HOLD(rl)));
  assert_int_equal(hl_redis_int(f->redis, "EXISTS hilock:{final}:wake"), 0);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(rl)));
  assert_int_equal(hl_redis_int(f->redis, "LLEN hilock:{final}:wake"), 1);
  assert_i64_between(hl_redis_int(f->redis, "PTTL hilock:{final}:wake"), 1,
                     5000);
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(rl)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_int_equal(hl_redis_int(f->redis, "LLEN hilock:{final}:wake"), 1);
  hilock_hold_free(HILOCK_HOLD(rl));
}

/* ## Validation ------------------------------------------------------------------ */

static void names_and_ttls_are_validated(void **state) {
  fixture *f = *state;
  char big[HILOCK_NAME_MAX];
  char sentinel;
  hilock_rlock *rl = (hilock_rlock *)&sentinel; /* must be reset to NULL */
  const char bin[] = {'a', '\0', 'b'};
  const char *key;
  size_t klen;

  hl_assert_bad_names_refused(f->client, hl_rlock_new_hold);
  memset(big, 'r', sizeof(big));
  assert_int_equal(hilock_rlock_new(f->client, "ttl", 3, 0, &rl),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_rlock_new(f->client, "ttl", 3, -1, &rl),
                   HILOCK_EINVAL);
  assert_int_equal(
      hilock_rlock_new(f->client, "ttl", 3, HILOCK_TTL_MAX_MS + 1, &rl),
      HILOCK_EINVAL);
  assert_int_equal(hilock_client_errcode(f->client), HILOCK_EINVAL);
  assert_null(rl);

  /* Limits are accepted. */
  rl = NULL;
  assert_hl_ok(hilock_rlock_new(f->client, big, HILOCK_NAME_MAX,
                                HILOCK_TTL_MAX_MS, &rl),
               hilock_client_errmsg(f->client));
  assert_int_equal(hilock_hold_ttl_ms(HILOCK_HOLD(rl)), HILOCK_TTL_MAX_MS);
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 0), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_true(hl_hold_pttl(f->redis, HILOCK_HOLD(rl)) > 1000000000LL);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  hilock_hold_free(HILOCK_HOLD(rl));
  rl = hl_new_rlock(f->client, "shortest", HILOCK_TTL_MIN_MS);
  assert_int_equal(hilock_hold_ttl_ms(HILOCK_HOLD(rl)), HILOCK_TTL_MIN_MS);
  hilock_hold_free(HILOCK_HOLD(rl));
  assert_int_equal(hilock_rlock_new(f->client, "too-short", 9,
                                    HILOCK_TTL_MIN_MS - 1, &rl),
                   HILOCK_EINVAL);
  assert_substr(hilock_client_errmsg(f->client), "ttl must be");

  /* Binary names keep their bytes in the key. */
  assert_hl_ok(hilock_rlock_new(f->client, bin, sizeof(bin), 5000, &rl),
               hilock_client_errmsg(f->client));
  key = hilock_hold_key(HILOCK_HOLD(rl), &klen);
  assert_int_equal(klen, 18);
  assert_memory_equal(key, "hilock:{a\0b}:rlock", 18);
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 0), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_true(hl_redis_exists(f->redis, "hilock:{a\0b}:rlock", 18));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  hilock_hold_free(HILOCK_HOLD(rl));
}

static void null_arguments_are_einval(void **state) {
  fixture *f = *state;
  hilock_rlock *rl = NULL;
  int64_t n = 0;

  assert_int_equal(hilock_rlock_new(NULL, "n", 1, 1000, &rl), HILOCK_EINVAL);
  assert_null(rl);
  assert_int_equal(hilock_rlock_new(f->client, "n", 1, 1000, NULL),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_rlock_hold_count(NULL, &n), HILOCK_EINVAL);
  hilock_hold_free(NULL);

  /* A valid handle with NULL out-parameters or a bad wait. */
  rl = hl_new_rlock(f->client, "n", 1000);
  assert_int_equal(hilock_rlock_hold_count(rl, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_owned(HILOCK_HOLD(rl), NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_locked(HILOCK_HOLD(rl), NULL), HILOCK_EINVAL);
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(rl), -5), HILOCK_EINVAL,
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_false(hl_hold_exists(f->redis, HILOCK_HOLD(rl)));
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(rl)), HILOCK_EINVAL);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(rl)), "wait");
  hilock_hold_free(HILOCK_HOLD(rl));
}

static void rlock_outliving_its_client_gets_eclosed(void **state) {
  fixture *f = *state;
  hilock_client *c = hl_client(f->server.url, NULL);
  hilock_rlock *rl = hl_new_rlock(c, "orphan-r", 5000);
  int64_t n = 0;

  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(rl), 0), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  hilock_client_free(c);
  /* Closing released it and reported it lost. */
  assert_true(hilock_hold_lost(HILOCK_HOLD(rl)));
  assert_false(hl_redis_exists(f->redis, "hilock:{orphan-r}:rlock", 23));
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(rl), 0), HILOCK_ECLOSED,
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(rl)), HILOCK_ECLOSED,
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_rc(hilock_rlock_hold_count(rl, &n), HILOCK_ECLOSED,
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(rl)), HILOCK_ECLOSED);
  hilock_hold_free(HILOCK_HOLD(rl)); /* the client's last reference */
}

HL_FIXTURE_MAIN("rlock",
      HL_TEST(same_thread_reenters_without_blocking),
      HL_TEST(other_thread_blocks_until_the_final_release),
      HL_TEST(release_from_a_non_holding_thread_changes_nothing),
      HL_TEST(threads_sharing_a_handle_exclude_each_other),
      HL_TEST(another_process_blocks),
      HL_TEST(reentry_refreshes_the_ttl),
      HL_TEST(lapsed_hold_lets_another_owner_in),
      HL_TEST(fence_is_kept_on_reentry_and_grows_for_the_next_owner),
      HL_TEST(final_release_deletes_the_hash_and_leaves_one_wake_up),
      HL_TEST(names_and_ttls_are_validated),
      HL_TEST(null_arguments_are_einval),
      HL_TEST(rlock_outliving_its_client_gets_eclosed))
