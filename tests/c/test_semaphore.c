/* The counting semaphore against a real server, beyond the contract every
 * family keeps (test_contract.c): permits with their own server-clock
 * expiry, the stored limit, waking, renewal, dead holders, fork, damaged
 * keys. Keys are checked directly with hiredis. */
#include "test_util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

typedef hl_fixture fixture;

#define SEM_OK(call, s) assert_hl_ok((call), hilock_hold_errmsg(HILOCK_HOLD(s)))
#define SEM_RC(call, rc, s) \
  assert_hl_rc((call), (rc), hilock_hold_errmsg(HILOCK_HOLD(s)))

static int64_t available(hilock_semaphore *s) {
  int64_t n = -1;
  SEM_OK(hilock_semaphore_available(s, &n), s);
  return n;
}

static int owned(hilock_semaphore *s) {
  int o = -1;
  SEM_OK(hilock_hold_owned(HILOCK_HOLD(s), &o), s);
  return o;
}

/* The server's clock in ms (TIME). */
static long long server_now_ms(fixture *f) {
  redisReply *r = hl_redis(f->redis, "TIME");
  long long ms;
  assert_int_equal(r->type, REDIS_REPLY_ARRAY);
  ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
  freeReplyObject(r);
  return ms;
}

/* The stored expiry of a permit (ms, server clock), or -1 if absent. */
static long long permit_score(fixture *f, const char *name, const char *id) {
  redisReply *r = hl_redis(f->redis, "ZSCORE hilock:{%s}:permits %s", name, id);
  long long v = -1;
  if (r->type == REDIS_REPLY_STRING) v = atoll(r->str);
  freeReplyObject(r);
  return v;
}

static long long zcard(fixture *f, const char *name) {
  return hl_redis_int(f->redis, "ZCARD hilock:{%s}:permits", name);
}

static long long wake_len(fixture *f, const char *name) {
  return hl_redis_int(f->redis, "LLEN hilock:{%s}:pwake", name);
}

/* ## Permits --------------------------------------------------------------- */

static void grants_up_to_the_limit_then_busy(void **state) {
  fixture *f = *state;
  hilock_semaphore *s[4];
  long long now;

  for (int i = 0; i < 4; i++) s[i] = hl_new_semaphore(f->client, "pool", 3, 10000);
  assert_int_equal(available(s[0]), 3);
  for (int i = 0; i < 3; i++) {
    SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(s[i])), s[i]);
    assert_true(hilock_hold_held(HILOCK_HOLD(s[i])));
    assert_int_equal(available(s[3]), 2 - i);
  }
  SEM_RC(hilock_hold_try_acquire(HILOCK_HOLD(s[3])), HILOCK_BUSY, s[3]);
  assert_false(hilock_hold_held(HILOCK_HOLD(s[3])));
  assert_string_equal(hilock_hold_token(HILOCK_HOLD(s[3])), "");
  SEM_RC(hilock_hold_acquire(HILOCK_HOLD(s[3]), 0), HILOCK_BUSY, s[3]);

  /* One entry per holder, scored by its expiry on the server's clock. */
  assert_int_equal(zcard(f, "pool"), 3);
  now = server_now_ms(f);
  for (int i = 0; i < 3; i++)
    assert_i64_between(permit_score(f, "pool", hilock_hold_token(HILOCK_HOLD(s[i]))),
                       now + 9000, now + 10000);
  assert_i64_between(hl_redis_pttl(f->redis, "hilock:{pool}:permits", 21),
                     9000, 10000);
  {
    char *lim = hl_redis_get(f->redis, "hilock:{pool}:limit", 19);
    assert_non_null(lim);
    assert_string_equal(lim, "3");
    free(lim);
  }
  SEM_OK(hilock_hold_release(HILOCK_HOLD(s[1])), s[1]);
  assert_false(hilock_hold_held(HILOCK_HOLD(s[1])));
  assert_int_equal(zcard(f, "pool"), 2);
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(s[3])), s[3]);
  for (int i = 0; i < 4; i++) {
    if (i != 1) SEM_OK(hilock_hold_release(HILOCK_HOLD(s[i])), s[i]);
    hilock_hold_free(HILOCK_HOLD(s[i]));
  }
  /* The set goes with its last permit; the limit stays. */
  assert_false(hl_redis_exists(f->redis, "hilock:{pool}:permits", 21));
  assert_true(hl_redis_exists(f->redis, "hilock:{pool}:limit", 19));
}

static void permit_ids_are_fresh_per_grant(void **state) {
  fixture *f = *state;
  hilock_semaphore *a = hl_new_semaphore(f->client, "ids", 2, 5000);
  hilock_semaphore *b = hl_new_semaphore(f->client, "ids", 2, 5000);
  char first[33];

  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(a)), a);
  assert_true(hl_is_lower_hex(hilock_hold_token(HILOCK_HOLD(a)), 32));
  memcpy(first, hilock_hold_token(HILOCK_HOLD(a)), 33);
  SEM_OK(hilock_hold_release(HILOCK_HOLD(a)), a);
  assert_string_equal(hilock_hold_token(HILOCK_HOLD(a)), "");
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(a)), a);
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(b)), b);
  assert_string_not_equal(hilock_hold_token(HILOCK_HOLD(a)), first);
  assert_string_not_equal(hilock_hold_token(HILOCK_HOLD(a)),
                          hilock_hold_token(HILOCK_HOLD(b)));
  assert_true(permit_score(f, "ids", hilock_hold_token(HILOCK_HOLD(a))) > 0);
  assert_int_equal(permit_score(f, "ids", first), -1);
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

static void acquiring_twice_on_one_handle_is_einval(void **state) {
  fixture *f = *state;
  hilock_semaphore *s = hl_new_semaphore(f->client, "twice", 5, 5000);
  char id[33];
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(s)), s);
  memcpy(id, hilock_hold_token(HILOCK_HOLD(s)), 33);
  SEM_RC(hilock_hold_try_acquire(HILOCK_HOLD(s)), HILOCK_EINVAL, s);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(s)), "one handle holds one permit");
  SEM_RC(hilock_hold_acquire(HILOCK_HOLD(s), 100), HILOCK_EINVAL, s);
  assert_string_equal(hilock_hold_token(HILOCK_HOLD(s)), id);
  assert_int_equal(zcard(f, "twice"), 1);
  assert_true(owned(s));
  SEM_OK(hilock_hold_release(HILOCK_HOLD(s)), s);
  hilock_hold_free(HILOCK_HOLD(s));
}

/* ## Release --------------------------------------------------------------- */

static void release_of_unknown_or_expired_permit_changes_nothing(void **state) {
  fixture *f = *state;
  hilock_semaphore *never = hl_new_semaphore(f->client, "rel", 2, 5000);
  hilock_semaphore *old = hl_new_semaphore(f->client, "rel", 2, 100);
  hilock_semaphore *other = hl_new_semaphore(f->client, "rel", 2, 5000);
  long long score;

  SEM_RC(hilock_hold_release(HILOCK_HOLD(never)), HILOCK_ENOTOWNED, never);
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(other)), other);
  score = permit_score(f, "rel", hilock_hold_token(HILOCK_HOLD(other)));
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(old)), old);
  hl_sleep_ms(150);
  assert_false(hilock_hold_held(HILOCK_HOLD(old)));
  assert_false(owned(old));
  SEM_RC(hilock_hold_release(HILOCK_HOLD(old)), HILOCK_ENOTOWNED, old);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(old)), "expired");
  SEM_RC(hilock_hold_release(HILOCK_HOLD(old)), HILOCK_ENOTOWNED, old);
  /* The live permit is untouched, and no wake-up was invented. */
  assert_int_equal(zcard(f, "rel"), 1);
  assert_int_equal(permit_score(f, "rel", hilock_hold_token(HILOCK_HOLD(other))),
                   score);
  assert_true(owned(other));
  assert_int_equal(available(never), 1);
  assert_true(wake_len(f, "rel") <= 1);
  SEM_OK(hilock_hold_release(HILOCK_HOLD(other)), other);
  SEM_RC(hilock_hold_release(HILOCK_HOLD(other)), HILOCK_ENOTOWNED, other);
  hl_holds_free(HILOCK_HOLD(never), HILOCK_HOLD(old), HILOCK_HOLD(other));
}

/* ## Waiting --------------------------------------------------------------- */

static void each_release_wakes_one_waiter(void **state) {
  fixture *f = *state;
  hilock_semaphore *h[2], *ws[2];
  hl_waiter w[2];
  int64_t t0;
  int first, second;

  for (int i = 0; i < 2; i++) {
    h[i] = hl_new_semaphore(f->client, "wake", 2, 10000);
    SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(h[i])), h[i]);
    ws[i] = hl_new_semaphore(f->client, "wake", 2, 10000);
  }
  for (int i = 0; i < 2; i++)
    hl_waiter_run(&w[i], HILOCK_HOLD(ws[i]), &hl_sem_verbs, 8000, 0);
  assert_true(hl_wait_waiters(f->redis, 2, 5000)); /* both are asleep */
  assert_int_equal(hl_waiter_done_at(&w[0]) + hl_waiter_done_at(&w[1]), 0);

  t0 = hl_now_ms();
  SEM_OK(hilock_hold_release(HILOCK_HOLD(h[0])), h[0]);
  /* One of them gets the permit soon; the other keeps waiting (the
   * holders' TTL is 10 s, so it is not woken by expiry). */
  while (hl_waiter_done_at(&w[0]) == 0 && hl_waiter_done_at(&w[1]) == 0 && hl_now_ms() - t0 < 3000)
    hl_sleep_ms(5);
  first = hl_waiter_done_at(&w[0]) != 0 ? 0 : 1;
  second = 1 - first;
  assert_true(hl_waiter_done_at(&w[first]) != 0);
  /* Woken by the release, not by the 8 s limit or the 10 s TTL; 3 s leaves
   * room for a loaded machine. */
  assert_i64_between(hl_waiter_done_at(&w[first]) - t0, 0, 3000);
  hl_sleep_ms(400);
  assert_int_equal(hl_waiter_done_at(&w[second]), 0);
  assert_hl_ok(w[first].rc, hilock_hold_errmsg(HILOCK_HOLD(ws[first])));

  t0 = hl_now_ms();
  SEM_OK(hilock_hold_release(HILOCK_HOLD(h[1])), h[1]);
  hl_waiter_join(&w[0]);
  hl_waiter_join(&w[1]);
  assert_hl_ok(w[second].rc, hilock_hold_errmsg(HILOCK_HOLD(ws[second])));
  assert_i64_between(hl_waiter_done_at(&w[second]) - t0, 0, 3000); /* likewise */
  assert_int_equal(zcard(f, "wake"), 2);
  for (int i = 0; i < 2; i++) {
    hilock_hold_free(HILOCK_HOLD(h[i]));
    SEM_OK(hilock_hold_release(HILOCK_HOLD(ws[i])), ws[i]);
    hilock_hold_free(HILOCK_HOLD(ws[i]));
  }
}

static void acquire_gives_busy_after_wait_ms(void **state) {
  fixture *f = *state;
  hilock_semaphore *a = hl_new_semaphore(f->client, "full", 1, 10000);
  hilock_semaphore *b = hl_new_semaphore(f->client, "full", 1, 10000);
  int64_t t0;
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(a)), a);
  t0 = hl_now_ms();
  SEM_RC(hilock_hold_acquire(HILOCK_HOLD(b), 300), HILOCK_BUSY, b);
  /* Bounded by the wait, not the 10 s TTL (room for a loaded machine). */
  assert_i64_between(hl_now_ms() - t0, 290, 2000);
  SEM_RC(hilock_hold_acquire(HILOCK_HOLD(b), -5), HILOCK_EINVAL, b);
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

/* A waiter sleeps until the first permit expires, not in a polling loop:
 * over a 1.2 s wait on permits that live 10 s it runs the acquire script
 * once and blocks in one BLPOP. */
static void waiting_does_not_poll(void **state) {
  fixture *f = *state;
  hilock_semaphore *a = hl_new_semaphore(f->client, "quiet", 1, 10000);
  hilock_semaphore *b = hl_new_semaphore(f->client, "quiet", 1, 10000);
  long long evals, blpops;

  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(a)), a);
  SEM_RC(hilock_hold_try_acquire(HILOCK_HOLD(b)), HILOCK_BUSY, b); /* loads script */
  hl_redis_ok(f->redis, "CONFIG RESETSTAT");
  SEM_RC(hilock_hold_acquire(HILOCK_HOLD(b), 1200), HILOCK_BUSY, b);
  evals = hl_cmdstat_calls(f->redis, "evalsha");
  /* Wake-ups taken off the list: BLPOPs, or the shared waiting's LPOPs. */
  blpops = hl_cmdstat_calls(f->redis, hl_wake_cmd());
  assert_i64_between(evals, 1, 2);
  assert_i64_between(blpops, 1, 2);
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
}

static void waiter_wakes_when_the_first_permit_expires(void **state) {
  fixture *f = *state;
  hilock_semaphore *shortp = hl_new_semaphore(f->client, "expiry", 2, 400);
  hilock_semaphore *longp = hl_new_semaphore(f->client, "expiry", 2, 10000);
  hilock_semaphore *w = hl_new_semaphore(f->client, "expiry", 2, 10000);
  int64_t t0;

  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(longp)), longp);
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(shortp)), shortp);
  t0 = hl_now_ms();
  /* Nobody releases: the short permit's expiry bounds the sleep. */
  SEM_OK(hilock_hold_acquire(HILOCK_HOLD(w), 5000), w);
  /* Not at the end of the 5 s wait (room for a loaded machine). */
  assert_i64_between(hl_now_ms() - t0, 300, 3000);
  assert_true(owned(longp));
  assert_false(owned(shortp));
  assert_int_equal(zcard(f, "expiry"), 2);
  hl_holds_free(HILOCK_HOLD(shortp), HILOCK_HOLD(longp), HILOCK_HOLD(w));
}

/* ## Dead holders ------------------------------------------------------------ */

typedef struct dying_holder {
  const char *name;
  int64_t ttl;
  int fd; /* write end: when the permit was granted (hl_now_ms), or -1 */
} dying_holder;

static int take_a_permit_and_die(hilock_client *c, void *arg) {
  dying_holder *d = arg;
  hilock_semaphore *s = NULL;
  int64_t t;
  int rc = hilock_semaphore_new(c, d->name, strlen(d->name), 1, d->ttl, &s);
  if (rc == HILOCK_OK) rc = hilock_hold_try_acquire(HILOCK_HOLD(s));
  t = rc == HILOCK_OK ? hl_now_ms() : -1;
  if (write(d->fd, &t, sizeof(t)) != sizeof(t)) return 2;
  return 0; /* dies holding the permit: nothing released */
}

/* A child process takes a permit and exits without releasing it. */
static pid_t holder_that_dies(fixture *f, const char *name, int64_t ttl,
                              int64_t *granted_at) {
  dying_holder d = {name, ttl, -1};
  hl_with_client w = {f->server.url, take_a_permit_and_die, &d};
  int64_t t = 0;
  pid_t pid = hl_fork_ready(hl_run_with_client, &w, &d.fd, &t, sizeof(t));
  assert_true(t > 0);
  assert_int_equal(hl_wait_child(pid, 5000), 0);
  *granted_at = t;
  return pid;
}

static void dead_holders_permit_lapses_at_its_ttl(void **state) {
  fixture *f = *state;
  hilock_semaphore *w = hl_new_semaphore(f->client, "dead", 1, 5000);
  int64_t granted, got;

  holder_that_dies(f, "dead", 600, &granted);
  /* The holder is gone, but its permit is not leaked, nor freed early. */
  assert_int_equal(available(w), 0);
  SEM_RC(hilock_hold_try_acquire(HILOCK_HOLD(w)), HILOCK_BUSY, w);
  SEM_OK(hilock_hold_acquire(HILOCK_HOLD(w), 5000), w);
  got = hl_now_ms();
  /* At its 600 ms TTL, not early and not at the 5 s limit; 2 s of room
   * for a loaded machine. */
  assert_i64_between(got - granted, 550, 600 + 2000);
  assert_int_equal(zcard(f, "dead"), 1);
  assert_true(owned(w));
  SEM_OK(hilock_hold_release(HILOCK_HOLD(w)), w);
  assert_int_equal(available(w), 1);
  hilock_hold_free(HILOCK_HOLD(w));
}

/* ## The limit ----------------------------------------------------------------- */

static void stored_limit_wins_over_constructor_permits(void **state) {
  fixture *f = *state;
  hilock_semaphore *two = hl_new_semaphore(f->client, "cfg", 2, 10000);
  hilock_semaphore *five[3];
  int64_t limit = -1;
  int stored = -1;

  for (int i = 0; i < 3; i++) five[i] = hl_new_semaphore(f->client, "cfg", 5, 10000);
  /* Before first use nothing is stored: each handle sees its own. */
  SEM_OK(hilock_semaphore_limit(five[0], &limit, &stored), five[0]);
  assert_int_equal(limit, 5);
  assert_false(stored);
  assert_int_equal(available(two), 2);
  assert_false(hl_redis_exists(f->redis, "hilock:{cfg}:limit", 18));

  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(two)), two);
  SEM_OK(hilock_semaphore_limit(five[0], &limit, &stored), five[0]);
  assert_int_equal(limit, 2);
  assert_true(stored);
  assert_int_equal(hilock_semaphore_permits(five[0]), 5);
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(five[0])), five[0]);
  SEM_RC(hilock_hold_try_acquire(HILOCK_HOLD(five[1])), HILOCK_BUSY, five[1]);

  /* Until an operator changes it. */
  SEM_OK(hilock_semaphore_set_limit(five[2], 3), five[2]);
  SEM_OK(hilock_semaphore_limit(two, &limit, NULL), two);
  assert_int_equal(limit, 3);
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(five[1])), five[1]);
  SEM_RC(hilock_hold_try_acquire(HILOCK_HOLD(five[2])), HILOCK_BUSY, five[2]);
  assert_int_equal(available(two), 0);

  /* Deleting the key hands the choice back to the next acquirer. */
  SEM_OK(hilock_hold_release(HILOCK_HOLD(two)), two);
  hl_redis_ok(f->redis, "DEL hilock:{cfg}:limit");
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(five[2])), five[2]);
  SEM_OK(hilock_semaphore_limit(two, &limit, &stored), two);
  assert_int_equal(limit, 5);
  assert_true(stored);
  hilock_hold_free(HILOCK_HOLD(two));
  for (int i = 0; i < 3; i++) hilock_hold_free(HILOCK_HOLD(five[i]));
}

static void raising_the_limit_wakes_waiters_at_once(void **state) {
  fixture *f = *state;
  hilock_semaphore *holder = hl_new_semaphore(f->client, "raise", 1, 10000);
  hilock_semaphore *ws[3];
  hl_waiter w[3];
  int64_t t0;

  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(holder)), holder);
  for (int i = 0; i < 3; i++) {
    ws[i] = hl_new_semaphore(f->client, "raise", 1, 10000);
    hl_waiter_run(&w[i], HILOCK_HOLD(ws[i]), &hl_sem_verbs, 8000, 0);
  }
  assert_true(hl_wait_waiters(f->redis, 3, 5000));
  t0 = hl_now_ms();
  SEM_OK(hilock_semaphore_set_limit(holder, 4), holder);
  for (int i = 0; i < 3; i++) {
    hl_waiter_join(&w[i]);
    assert_hl_ok(w[i].rc, hilock_hold_errmsg(HILOCK_HOLD(ws[i])));
    /* Woken, not by the 10 s TTL or the 8 s wait. */
    assert_i64_between(w[i].t_end - t0, 0, 3000);
  }
  assert_int_equal(zcard(f, "raise"), 4);
  /* Every wake-up was used: none is left without a free permit. */
  assert_int_equal(wake_len(f, "raise"), 0);
  hilock_hold_free(HILOCK_HOLD(holder));
  for (int i = 0; i < 3; i++) hilock_hold_free(HILOCK_HOLD(ws[i]));
}

static void lowering_the_limit_revokes_nothing(void **state) {
  fixture *f = *state;
  hilock_semaphore *h[3];
  hilock_semaphore *late = hl_new_semaphore(f->client, "lower", 3, 10000);

  for (int i = 0; i < 3; i++) {
    h[i] = hl_new_semaphore(f->client, "lower", 3, 10000);
    SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(h[i])), h[i]);
  }
  SEM_OK(hilock_semaphore_set_limit(late, 1), late);
  for (int i = 0; i < 3; i++) assert_true(owned(h[i]));
  SEM_OK(hilock_hold_release(HILOCK_HOLD(h[0])), h[0]);
  SEM_OK(hilock_hold_release(HILOCK_HOLD(h[1])), h[1]);
  assert_int_equal(available(late), 0);
  SEM_RC(hilock_hold_try_acquire(HILOCK_HOLD(late)), HILOCK_BUSY, late);
  SEM_OK(hilock_hold_release(HILOCK_HOLD(h[2])), h[2]);
  assert_int_equal(available(late), 1);
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(late)), late);

  /* A limit of 0 closes the semaphore to new holders. */
  SEM_OK(hilock_semaphore_set_limit(late, 0), late);
  assert_true(owned(late));
  SEM_OK(hilock_hold_release(HILOCK_HOLD(late)), late);
  assert_int_equal(available(late), 0);
  SEM_RC(hilock_hold_try_acquire(HILOCK_HOLD(h[0])), HILOCK_BUSY, h[0]);
  SEM_RC(hilock_semaphore_set_limit(late, -1), HILOCK_EINVAL, late);
  SEM_RC(hilock_semaphore_set_limit(late, HILOCK_PERMITS_MAX + 1),
         HILOCK_EINVAL, late);
  SEM_OK(hilock_semaphore_set_limit(late, HILOCK_PERMITS_MAX), late);
  assert_int_equal(available(late), HILOCK_PERMITS_MAX);
  for (int i = 0; i < 3; i++) hilock_hold_free(HILOCK_HOLD(h[i]));
  hilock_hold_free(HILOCK_HOLD(late));
}

/* Wake-ups never outnumber free permits, so a waiter is not woken for
 * nothing by leftovers of releases nobody waited for. */
static void wake_list_is_backed_by_free_permits(void **state) {
  fixture *f = *state;
  hilock_semaphore *h[4];
  for (int i = 0; i < 4; i++) h[i] = hl_new_semaphore(f->client, "backed", 4, 10000);
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 4; i++) SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(h[i])), h[i]);
    assert_int_equal(wake_len(f, "backed"), 0);
    for (int i = 0; i < 4; i++) {
      SEM_OK(hilock_hold_release(HILOCK_HOLD(h[i])), h[i]);
      assert_i64_between(wake_len(f, "backed"), 0, i + 1);
    }
  }
  for (int i = 0; i < 3; i++) SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(h[i])), h[i]);
  assert_i64_between(wake_len(f, "backed"), 0, 1);
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(h[3])), h[3]);
  assert_int_equal(wake_len(f, "backed"), 0);
  assert_i64_between(hl_redis_pttl(f->redis, "hilock:{backed}:pwake", 21), -2,
                     5000);
  for (int i = 0; i < 4; i++) hilock_hold_free(HILOCK_HOLD(h[i]));
}

/* ## Renewal ------------------------------------------------------------------- */

static void renew_moves_expiry_and_never_revives(void **state) {
  fixture *f = *state;
  hilock_semaphore *s = hl_new_semaphore(f->client, "renew", 2, 1000);
  long long before, after;
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(s)), s);
  before = permit_score(f, "renew", hilock_hold_token(HILOCK_HOLD(s)));
  hl_sleep_ms(300);
  SEM_OK(hilock_hold_renew(HILOCK_HOLD(s)), s);
  after = permit_score(f, "renew", hilock_hold_token(HILOCK_HOLD(s)));
  assert_i64_between(after - before, 250, 800);
  assert_i64_between(hilock_hold_validity_ms(HILOCK_HOLD(s)), 900, 1000);
  assert_i64_between(hl_redis_pttl(f->redis, "hilock:{renew}:permits", 22),
                     800, 1000);
  hl_sleep_ms(1100);
  SEM_RC(hilock_hold_renew(HILOCK_HOLD(s)), HILOCK_ENOTOWNED, s);
  assert_true(hilock_hold_lost(HILOCK_HOLD(s)));
  assert_false(hl_redis_exists(f->redis, "hilock:{renew}:permits", 22));
  hilock_hold_free(HILOCK_HOLD(s));
}

static int lost_calls;

static void count_lost(void *arg) {
  (void)arg;
  __atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
}

static void max_hold_lets_the_permit_lapse(void **state) {
  fixture *f = *state;
  hilock_semaphore *s = hl_new_semaphore(f->client, "capped", 1, 300);
  hilock_semaphore *w = hl_new_semaphore(f->client, "capped", 1, 300);
  int64_t t0;
  lost_calls = 0;
  SEM_OK(hilock_hold_set_auto_renew(HILOCK_HOLD(s), 1, 400, count_lost, NULL), s);
  t0 = hl_now_ms();
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(s)), s);
  SEM_OK(hilock_hold_acquire(HILOCK_HOLD(w), 3000), w);
  /* Renewed up to 400 ms, then lapsed within one TTL (room for a loaded
   * machine; a permit renewed on would never lapse). */
  assert_i64_between(hl_now_ms() - t0, 400, 2500);
  hl_sleep_ms(50);
  assert_true(hilock_hold_lost(HILOCK_HOLD(s)));
  assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
  hl_holds_free(HILOCK_HOLD(s), HILOCK_HOLD(w));
}

/* ## Threads: never more than the limit inside --------------------------- */

#define NTHREADS 8
#define ROUNDS 25

static int inside, max_inside, failures;

static void *contender(void *arg) {
  hilock_semaphore *s = arg;
  for (int i = 0; i < ROUNDS; i++) {
    int now;
    if (hilock_hold_acquire(HILOCK_HOLD(s), 10000) != HILOCK_OK) {
      __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
      return NULL;
    }
    now = __atomic_add_fetch(&inside, 1, __ATOMIC_SEQ_CST);
    for (int m = __atomic_load_n(&max_inside, __ATOMIC_SEQ_CST); now > m;
         m = __atomic_load_n(&max_inside, __ATOMIC_SEQ_CST))
      if (__atomic_compare_exchange_n(&max_inside, &m, now, 0,
                                      __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        break;
    hl_sleep_ms(2);
    __atomic_sub_fetch(&inside, 1, __ATOMIC_SEQ_CST);
    if (hilock_hold_release(HILOCK_HOLD(s)) != HILOCK_OK)
      __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
  }
  return NULL;
}

static void threads_never_exceed_the_limit(void **state) {
  fixture *f = *state;
  hilock_semaphore *s[NTHREADS];
  pthread_t t[NTHREADS];
  inside = max_inside = failures = 0;
  for (int i = 0; i < NTHREADS; i++) {
    s[i] = hl_new_semaphore(f->client, "threads", 3, 10000);
    assert_int_equal(pthread_create(&t[i], NULL, contender, s[i]), 0);
  }
  for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  assert_int_equal(failures, 0);
  assert_int_equal(max_inside, 3); /* at the limit, never past it */
  assert_int_equal(zcard(f, "threads"), 0);
  for (int i = 0; i < NTHREADS; i++) hilock_hold_free(HILOCK_HOLD(s[i]));
}

/* ## Fork ------------------------------------------------------------------------ */

static void forked_child_holds_nothing(void **state) {
  fixture *f = *state;
  hilock_semaphore *s = hl_new_semaphore(f->client, "forked", 2, 5000);
  pid_t pid;
  int status = -1;
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(s)), s);
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int o = -1, ok;
    ok = hilock_hold_release(HILOCK_HOLD(s)) == HILOCK_EFORKED &&
         hilock_hold_renew(HILOCK_HOLD(s)) == HILOCK_EFORKED &&
         hilock_hold_owned(HILOCK_HOLD(s), &o) == HILOCK_OK && o == 0 &&
         hilock_hold_validity_ms(HILOCK_HOLD(s)) == 0;
    /* The child may take a permit of its own. */
    ok = ok && hilock_hold_try_acquire(HILOCK_HOLD(s)) == HILOCK_OK &&
         hilock_hold_release(HILOCK_HOLD(s)) == HILOCK_OK;
    _exit(ok ? 0 : 1);
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_true(owned(s));
  assert_int_equal(zcard(f, "forked"), 1);
  SEM_OK(hilock_hold_release(HILOCK_HOLD(s)), s);
  hilock_hold_free(HILOCK_HOLD(s));
}

/* A child may drop the last reference to a client whose watchdog was
 * running in the parent at fork time (the watchdog thread was waiting on
 * the client's condition variables): freeing must not wait for threads that
 * do not exist in the child. */
static void child_frees_a_client_whose_watchdog_ran_in_the_parent(
    void **state) {
  fixture *f = *state;
  hilock_client *c = hl_client(f->server.url, NULL);
  hilock_semaphore *s = hl_new_semaphore(c, "fork-free", 1, 3000);

  SEM_OK(hilock_hold_set_auto_renew(HILOCK_HOLD(s), 1, 0, NULL, NULL), s);
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(s)), s);
  hl_sleep_ms(50); /* the watchdog now sleeps on its condition variable */
  /* The child's copy of the client is the last reference there: freeing
   * it destroys the client, and must not hang. */
  assert_int_equal(hl_fork_free_client(c, HILOCK_HOLD(s), 3000), 0);
  assert_true(owned(s)); /* the parent's permit is untouched */
  SEM_OK(hilock_hold_release(HILOCK_HOLD(s)), s);
  hilock_hold_free(HILOCK_HOLD(s));
  hilock_client_free(c);
}

/* ## Arguments, names, damaged keys ------------------------------------------------ */

static void bad_arguments_are_einval(void **state) {
  fixture *f = *state;
  static const int64_t bad_permits[] = {0, -1, HILOCK_PERMITS_MAX + 1};
  hilock_semaphore *s = (hilock_semaphore *)f; /* must be reset to NULL */
  int64_t n;

  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(hilock_semaphore_new(f->client, "a", 1, bad_permits[i],
                                          1000, &s),
                     HILOCK_EINVAL);
    assert_null(s);
    assert_substr(hilock_client_errmsg(f->client), "permits");
  }
  assert_int_equal(hilock_semaphore_new(f->client, "a", 1, 1, 0, &s),
                   HILOCK_EINVAL);
  assert_substr(hilock_client_errmsg(f->client), "ttl");
  assert_int_equal(hilock_semaphore_new(f->client, "}a", 2, 1, 1000, &s),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_semaphore_new(f->client, NULL, 1, 1, 1000, &s),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_semaphore_new(NULL, "a", 1, 1, 1000, &s),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_semaphore_new(f->client, "a", 1, 1, 1000, NULL),
                   HILOCK_EINVAL);

  assert_int_equal(hilock_semaphore_available(NULL, &n), HILOCK_EINVAL);
  assert_int_equal(hilock_semaphore_limit(NULL, &n, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_semaphore_set_limit(NULL, 1), HILOCK_EINVAL);
  hilock_hold_free(NULL);

  s = hl_new_semaphore(f->client, "a", 1, 1000);
  assert_int_equal(hilock_hold_owned(HILOCK_HOLD(s), NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_semaphore_available(s, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_semaphore_limit(s, NULL, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_set_auto_renew(HILOCK_HOLD(s), 1, -1, NULL, NULL),
                   HILOCK_EINVAL);
  SEM_RC(hilock_hold_renew(HILOCK_HOLD(s)), HILOCK_ENOTOWNED, s);
  hilock_hold_free(HILOCK_HOLD(s));
}

static void keys_follow_the_layout(void **state) {
  fixture *f = *state;
  static const char name[] = "a\0b}{";
  hilock_semaphore *s = NULL;
  size_t len = 0;
  assert_hl_ok(hilock_semaphore_new(f->client, name, sizeof(name) - 1, 2, 5000,
                                    &s),
               hilock_client_errmsg(f->client));
  assert_memory_equal(hilock_hold_key(HILOCK_HOLD(s), &len), "hilock:{a\0b}{}:permits",
                      len);
  assert_int_equal(len, strlen("hilock:{}:permits") + sizeof(name) - 1);
  assert_int_equal(hilock_semaphore_permits(s), 2);
  assert_int_equal(hilock_hold_ttl_ms(HILOCK_HOLD(s)), 5000);
  assert_string_equal(hilock_hold_errmsg(HILOCK_HOLD(s)), "");
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(s)), s);
  SEM_OK(hilock_hold_release(HILOCK_HOLD(s)), s);
  /* Limit and wake list under the same hash tag; the set went with its
   * last permit. */
  assert_true(hl_redis_exists(f->redis, "hilock:{a\0b}{}:limit", 20));
  assert_true(hl_redis_exists(f->redis, "hilock:{a\0b}{}:pwake", 20));
  assert_int_equal(hl_redis_int(f->redis, "DBSIZE"), 2);
  hilock_hold_free(HILOCK_HOLD(s));
}

static void damaged_keys_fail_closed(void **state) {
  fixture *f = *state;
  hilock_semaphore *s = hl_new_semaphore(f->client, "dmg", 2, 5000);
  int64_t n;

  /* The permits key of another type: nothing is written. */
  hl_redis_ok(f->redis, "SET hilock:{dmg}:permits x");
  SEM_RC(hilock_hold_try_acquire(HILOCK_HOLD(s)), HILOCK_EWRONGTYPE, s);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(s)), "WRONGTYPE");
  assert_false(hilock_hold_held(HILOCK_HOLD(s)));
  assert_false(hl_redis_exists(f->redis, "hilock:{dmg}:limit", 18));
  SEM_RC(hilock_hold_acquire(HILOCK_HOLD(s), 200), HILOCK_EWRONGTYPE, s);
  SEM_RC(hilock_semaphore_available(s, &n), HILOCK_EWRONGTYPE, s);
  hl_redis_ok(f->redis, "DEL hilock:{dmg}:permits");

  /* A limit that is not a count: no grant, but a held permit still goes
   * back. */
  SEM_OK(hilock_hold_try_acquire(HILOCK_HOLD(s)), s);
  hl_redis_ok(f->redis, "SET hilock:{dmg}:limit lots");
  {
    hilock_semaphore *o = hl_new_semaphore(f->client, "dmg", 2, 5000);
    SEM_RC(hilock_hold_try_acquire(HILOCK_HOLD(o)), HILOCK_EWRONGTYPE, o);
    assert_substr(hilock_hold_errmsg(HILOCK_HOLD(o)), "no permit count");
    assert_false(hilock_hold_held(HILOCK_HOLD(o)));
    SEM_RC(hilock_semaphore_limit(o, &n, NULL), HILOCK_EWRONGTYPE, o);
    hilock_hold_free(HILOCK_HOLD(o));
  }
  SEM_OK(hilock_hold_release(HILOCK_HOLD(s)), s);
  assert_int_equal(zcard(f, "dmg"), 0);
  hl_redis_ok(f->redis, "SET hilock:{dmg}:limit -1");
  SEM_RC(hilock_hold_try_acquire(HILOCK_HOLD(s)), HILOCK_EWRONGTYPE, s);
  hl_redis_ok(f->redis, "SET hilock:{dmg}:limit 1.5");
  SEM_RC(hilock_hold_try_acquire(HILOCK_HOLD(s)), HILOCK_EWRONGTYPE, s);
  hilock_hold_free(HILOCK_HOLD(s));
}

static void closed_client_is_eclosed(void **state) {
  fixture *f = *state;
  hilock_options o = hl_test_options();
  hilock_client *c = NULL;
  hilock_semaphore *s = NULL;
  assert_hl_ok(hilock_client_new(f->server.url, &o, &c), hilock_client_errmsg(c));
  s = hl_new_semaphore(c, "closed", 1, 1000);
  hilock_client_free(c);
  SEM_RC(hilock_hold_try_acquire(HILOCK_HOLD(s)), HILOCK_ECLOSED, s);
  hilock_hold_free(HILOCK_HOLD(s));
}

HL_FIXTURE_MAIN("semaphore",
      HL_TEST(grants_up_to_the_limit_then_busy),
      HL_TEST(permit_ids_are_fresh_per_grant),
      HL_TEST(acquiring_twice_on_one_handle_is_einval),
      HL_TEST(release_of_unknown_or_expired_permit_changes_nothing),
      HL_TEST(each_release_wakes_one_waiter),
      HL_TEST(acquire_gives_busy_after_wait_ms),
      HL_TEST(waiting_does_not_poll),
      HL_TEST(waiter_wakes_when_the_first_permit_expires),
      HL_TEST(dead_holders_permit_lapses_at_its_ttl),
      HL_TEST(stored_limit_wins_over_constructor_permits),
      HL_TEST(raising_the_limit_wakes_waiters_at_once),
      HL_TEST(lowering_the_limit_revokes_nothing),
      HL_TEST(wake_list_is_backed_by_free_permits),
      HL_TEST(renew_moves_expiry_and_never_revives),
      HL_TEST(max_hold_lets_the_permit_lapse),
      HL_TEST(threads_never_exceed_the_limit),
      HL_TEST(forked_child_holds_nothing),
      HL_TEST(child_frees_a_client_whose_watchdog_ran_in_the_parent),
      HL_TEST(bad_arguments_are_einval),
      HL_TEST(keys_follow_the_layout),
      HL_TEST(damaged_keys_fail_closed),
      HL_TEST(closed_client_is_eclosed))
