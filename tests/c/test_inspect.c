/* Operator calls on lock names of any type (hilock/inspect.h) against real
 * servers: inspect of every type free, held, reentered, read- and
 * write-held, with permits used and waiters in line; force release of
 * every type (waiters woken, the old holder finds its lock lost, fences go
 * on increasing); the walk over names with patterns, on one server and on
 * a Cluster; bad input. */
#include "cluster_util.h"
#include "test_util.h"

#include "internal.h" /* hilock__key_slot */

typedef hl_fixture fixture;

#define C_OK(call, c) assert_hl_ok((call), hilock_client_errmsg(c))
#define C_RC(call, rc, c) assert_hl_rc((call), (rc), hilock_client_errmsg(c))
#define H_OK(call, h) assert_hl_ok((call), hilock_hold_errmsg(h))

static hilock_lock_info look(hilock_client *c, const char *name) {
  hilock_lock_info info;
  C_OK(hilock_client_inspect(c, name, strlen(name), &info), c);
  return info;
}

static void assert_type(const hilock_lock_info *i, hilock_lock_type t,
                        const char *tname) {
  assert_int_equal(i->type, t);
  assert_string_equal(i->type_name, tname);
}

/* i shows h's grant: held, its token and its fence. */
static void assert_held_by(const hilock_lock_info *i, hilock_hold *h) {
  assert_true(i->held);
  assert_string_equal(i->holder, hilock_hold_token(h));
  assert_int_equal(i->fence, hilock_hold_fence(h));
}

/* Permits (or segments): total, used, free. */
static void assert_permits(const hilock_lock_info *i, int64_t total,
                           int64_t used, int64_t free_) {
  assert_int_equal(i->permits, total);
  assert_int_equal(i->permits_used, used);
  assert_int_equal(i->permits_free, free_);
}

/* ## Inspect --------------------------------------------------------------- */

static void nothing_there_is_type_none(void **state) {
  fixture *f = *state;
  hilock_lock_info i = look(f->client, "nobody");
  assert_type(&i, HILOCK_TYPE_NONE, "none");
  assert_false(i.held);
  assert_string_equal(i.holder, "");
  assert_int_equal(i.fence, 0);
  assert_int_equal(i.ttl_ms, -2);
  assert_int_equal(i.waiters, 0);
}

static void lock_free_held_and_released(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "job", 5000);
  hilock_lock *s = hl_new_simple(f->client, "forever");
  hilock_lock_info i;
  uint64_t fence;

  H_OK(hilock_hold_try_acquire(HILOCK_HOLD(l)), HILOCK_HOLD(l));
  fence = hilock_hold_fence(HILOCK_HOLD(l));
  i = look(f->client, "job");
  assert_type(&i, HILOCK_TYPE_LOCK, "lock");
  assert_held_by(&i, HILOCK_HOLD(l));
  assert_int_equal(i.holder_len, 32);
  assert_i64_between(i.ttl_ms, 5000 / 2, 5000); /* set, less the time since */
  assert_int_equal(i.hold_count, 1);
  assert_int_equal(i.permits, -1);
  assert_int_equal(i.permits_used, -1);

  H_OK(hilock_hold_release(HILOCK_HOLD(l)), HILOCK_HOLD(l));
  i = look(f->client, "job");
  /* Released: only the fence counter is left, which still tells the last
   * fence handed out. */
  assert_type(&i, HILOCK_TYPE_NONE, "none");
  assert_false(i.held);
  assert_int_equal(i.fence, fence);
  assert_int_equal(i.ttl_ms, -2);

  H_OK(hilock_hold_try_acquire(HILOCK_HOLD(s)), HILOCK_HOLD(s));
  i = look(f->client, "forever");
  assert_type(&i, HILOCK_TYPE_LOCK, "lock");
  assert_int_equal(i.ttl_ms, -1);
  H_OK(hilock_hold_release(HILOCK_HOLD(s)), HILOCK_HOLD(s));
  hl_holds_free(HILOCK_HOLD(l), HILOCK_HOLD(s));
}

static void rlock_reentered(void **state) {
  fixture *f = *state;
  hilock_rlock *r = hl_new_rlock(f->client, "re", 8000);
  hilock_lock_info i;
  for (int k = 0; k < 3; k++) H_OK(hilock_hold_try_acquire(HILOCK_HOLD(r)), HILOCK_HOLD(r));
  i = look(f->client, "re");
  assert_type(&i, HILOCK_TYPE_RLOCK, "rlock");
  assert_held_by(&i, HILOCK_HOLD(r));
  assert_int_equal(i.hold_count, 3);
  assert_i64_between(i.ttl_ms, 8000 / 2, 8000); /* set, less the time since */
  for (int k = 0; k < 3; k++) H_OK(hilock_hold_release(HILOCK_HOLD(r)), HILOCK_HOLD(r));
  assert_int_equal(look(f->client, "re").type, HILOCK_TYPE_NONE);
  hilock_hold_free(HILOCK_HOLD(r));
}

static void semaphore_permits_partly_used(void **state) {
  fixture *f = *state;
  hilock_semaphore *s[2];
  hilock_lock_info i;
  for (int k = 0; k < 2; k++) {
    s[k] = hl_new_semaphore(f->client, "pool", 5, 6000);
    H_OK(hilock_hold_try_acquire(HILOCK_HOLD(s[k])), HILOCK_HOLD(s[k]));
  }
  i = look(f->client, "pool");
  assert_type(&i, HILOCK_TYPE_SEMAPHORE, "semaphore");
  assert_true(i.held);
  assert_permits(&i, 5, 2, 3);
  assert_int_equal(i.hold_count, 2);
  assert_int_equal(i.fence, 0); /* a semaphore hands out no fences */
  assert_string_equal(i.holder, "");
  assert_i64_between(i.ttl_ms, 6000 / 2, 6000); /* set, less the time since */
  for (int k = 0; k < 2; k++) {
    H_OK(hilock_hold_release(HILOCK_HOLD(s[k])), HILOCK_HOLD(s[k]));
    hilock_hold_free(HILOCK_HOLD(s[k]));
  }
  /* The stored limit stays: an idle semaphore. */
  i = look(f->client, "pool");
  assert_type(&i, HILOCK_TYPE_SEMAPHORE, "semaphore");
  assert_false(i.held);
  assert_permits(&i, 5, 0, 5);
  assert_int_equal(i.ttl_ms, -2);
}

static void rwlock_read_and_write_held(void **state) {
  fixture *f = *state;
  hilock_rwlock *rw = hl_new_rwlock(f->client, "doc", 7000);
  hilock_lock_info i;
  H_OK(hilock_rwlock_read_try_acquire(rw), HILOCK_HOLD(rw));
  H_OK(hilock_rwlock_read_try_acquire(rw), HILOCK_HOLD(rw));
  i = look(f->client, "doc");
  assert_type(&i, HILOCK_TYPE_RWLOCK, "rwlock");
  assert_true(i.held);
  assert_int_equal(i.readers, 1);
  assert_false(i.writer);
  assert_int_equal(i.hold_count, 2);
  assert_i64_between(i.ttl_ms, 7000 / 2, 7000); /* set, less the time since */
  H_OK(hilock_rwlock_read_release(rw), HILOCK_HOLD(rw));
  H_OK(hilock_rwlock_read_release(rw), HILOCK_HOLD(rw));

  H_OK(hilock_rwlock_write_try_acquire(rw), HILOCK_HOLD(rw));
  i = look(f->client, "doc");
  assert_true(i.held);
  assert_true(i.writer);
  assert_int_equal(i.readers, 0);
  assert_int_equal(i.hold_count, 1);
  assert_string_equal(i.holder, hilock_hold_token(HILOCK_HOLD(rw)));
  assert_int_equal(i.fence, hilock_hold_fence(HILOCK_HOLD(rw)));
  H_OK(hilock_rwlock_write_release(rw), HILOCK_HOLD(rw));
  hilock_hold_free(HILOCK_HOLD(rw));
}

/* A waiter of h's family blocked in another thread (its own client). */
typedef struct bg {
  hilock_client *c;
  hilock_hold *h;
  hl_waiter w;
} bg;

static void waiters_in_line(void **state) {
  fixture *f = *state;
  hilock_client *c2 = hl_client(f->server.url, NULL);
  hilock_fair_lock *fh = hl_new_fair(f->client, "fifo", 20000);
  hilock_fair_lock *fw = hl_new_fair(c2, "fifo", 20000);
  hilock_sequential_lock *sh = hl_new_seq(f->client, "zk", 20000);
  hilock_sequential_lock *sw = hl_new_seq(c2, "zk", 20000);
  hl_waiter w[2];
  hilock_lock_info i;
  int64_t t0;

  H_OK(hilock_hold_try_acquire(HILOCK_HOLD(fh)), HILOCK_HOLD(fh));
  H_OK(hilock_hold_try_acquire(HILOCK_HOLD(sh)), HILOCK_HOLD(sh));
  hl_waiter_run(&w[0], HILOCK_HOLD(fw), &hl_fair_verbs, 15000, 1);
  hl_waiter_run(&w[1], HILOCK_HOLD(sw), &hl_seq_verbs, 15000, 1);
  /* Wait (bounded) for both to be in line. */
  t0 = hl_now_ms();
  do {
    hl_sleep_ms(20);
    i = look(f->client, "zk");
  } while ((look(f->client, "fifo").waiters != 1 || i.waiters != 1) &&
           hl_now_ms() - t0 < 5000);
  i = look(f->client, "fifo");
  assert_type(&i, HILOCK_TYPE_FAIR_LOCK, "fair_lock");
  assert_held_by(&i, HILOCK_HOLD(fh));
  assert_int_equal(i.waiters, 1);
  i = look(f->client, "zk");
  assert_type(&i, HILOCK_TYPE_SEQUENTIAL_LOCK, "sequential_lock");
  assert_held_by(&i, HILOCK_HOLD(sh));
  assert_int_equal(i.waiters, 1);
  assert_i64_between(i.ttl_ms, 20000 / 2, 20000); /* set, less the time since */

  H_OK(hilock_hold_release(HILOCK_HOLD(fh)), HILOCK_HOLD(fh));
  H_OK(hilock_hold_release(HILOCK_HOLD(sh)), HILOCK_HOLD(sh));
  hl_waiter_join(&w[0]);
  hl_waiter_join(&w[1]);
  assert_hl_ok(w[0].rc, "fair waiter");
  assert_hl_ok(w[1].rc, "sequential waiter");
  hl_holds_free(HILOCK_HOLD(fh), HILOCK_HOLD(fw), HILOCK_HOLD(sh),
                HILOCK_HOLD(sw));
  hilock_client_free(c2);
}

static void segmented_and_multi_and_redlock(void **state) {
  fixture *f = *state;
  hilock_segmented_lock *g = hl_new_seg(f->client, "stock", 4, 9000);
  const char *names[2] = {"a", "b"};
  hilock_multi_lock *m = hl_new_multi(f->client, names, 2, 9000);
  const char *urls[1] = {f->server.url};
  hilock_options o = hl_test_options();
  hilock_redlock *rl = NULL;
  hilock_lock_info i;

  H_OK(hilock_segmented_lock_stock_init(g, 100), HILOCK_HOLD(g));
  H_OK(hilock_hold_try_acquire(HILOCK_HOLD(g)), HILOCK_HOLD(g));
  i = look(f->client, "stock");
  assert_type(&i, HILOCK_TYPE_SEGMENTED_LOCK, "segmented_lock");
  assert_true(i.held);
  assert_permits(&i, 4, 1, 3);
  assert_int_equal(i.fence, hilock_hold_fence(HILOCK_HOLD(g)));
  assert_i64_between(i.ttl_ms, 9000 / 2, 9000); /* set, less the time since */

  /* A multi-key lock is a plain lock per name. */
  H_OK(hilock_hold_try_acquire(HILOCK_HOLD(m)), HILOCK_HOLD(m));
  i = look(f->client, "b");
  assert_type(&i, HILOCK_TYPE_LOCK, "lock");
  assert_string_equal(i.holder, hilock_hold_token(HILOCK_HOLD(m)));

  assert_hl_ok(hilock_redlock_new(urls, 1, "rl", 2, 9000, &o, &rl), "redlock");
  H_OK(hilock_hold_try_acquire(HILOCK_HOLD(rl)), HILOCK_HOLD(rl));
  i = look(f->client, "rl");
  assert_type(&i, HILOCK_TYPE_REDLOCK, "redlock");
  assert_true(i.held);
  assert_string_equal(i.holder, hilock_hold_token(HILOCK_HOLD(rl)));
  H_OK(hilock_hold_release(HILOCK_HOLD(rl)), HILOCK_HOLD(rl));
  H_OK(hilock_hold_release(HILOCK_HOLD(m)), HILOCK_HOLD(m));
  H_OK(hilock_hold_release(HILOCK_HOLD(g)), HILOCK_HOLD(g));
  hl_holds_free(HILOCK_HOLD(rl), HILOCK_HOLD(m), HILOCK_HOLD(g));
}

/* ## Force release ----------------------------------------------------------
 * One row per type: a holder (60 s TTL) and a waiter in another thread
 * with its own client, waiting up to 30 s. After the forced release the
 * waiter is granted long before either would run out, the holder's lock is
 * lost, and a fence drawn after it is higher than the holder's. */

typedef struct force_row {
  const char *what;
  hilock_hold *(*make)(hilock_client *c, const char *name);
  const hl_verbs *hv, *wv; /* holder's, waiter's */
  int fenced;
} force_row;

#define MAKER(fn, expr) \
  static hilock_hold *fn(hilock_client *c, const char *name) { return HILOCK_HOLD(expr); }
MAKER(mk_lock, hl_new_lock(c, name, 60000))
MAKER(mk_simple, hl_new_simple(c, name))
MAKER(mk_rlock, hl_new_rlock(c, name, 60000))
MAKER(mk_rw, hl_new_rwlock(c, name, 60000))
MAKER(mk_sem, hl_new_semaphore(c, name, 1, 60000))
MAKER(mk_fair, hl_new_fair(c, name, 60000))
MAKER(mk_seq, hl_new_seq(c, name, 60000))
MAKER(mk_seg, hl_new_seg(c, name, 1, 60000))
MAKER(mk_multi, hl_new_multi(c, &name, 1, 60000))

static const force_row force_rows[] = {
    {"lock", mk_lock, &hl_lock_verbs, &hl_lock_verbs, 1},
    {"simple", mk_simple, &hl_simple_verbs, &hl_simple_verbs, 1},
    {"rlock", mk_rlock, &hl_rlock_verbs, &hl_rlock_verbs, 1},
    {"write", mk_rw, &hl_write_verbs, &hl_write_verbs, 1},
    {"read-after-write", mk_rw, &hl_write_verbs, &hl_read_verbs, 0},
    {"write-after-read", mk_rw, &hl_read_verbs, &hl_write_verbs, 0},
    {"semaphore", mk_sem, &hl_sem_verbs, &hl_sem_verbs, 0},
    {"fair", mk_fair, &hl_fair_verbs, &hl_fair_verbs, 1},
    {"sequential", mk_seq, &hl_seq_verbs, &hl_seq_verbs, 1},
    {"segmented", mk_seg, &hl_seg_verbs, &hl_seg_verbs, 1},
    {"multi", mk_multi, &hl_multi_verbs, &hl_multi_verbs, 1},
};

static void force_release_wakes_waiter_and_holder_loses(void **state) {
  fixture *f = *state;
  hilock_client *c2 = hl_client(f->server.url, NULL);
  for (size_t r = 0; r < sizeof(force_rows) / sizeof(force_rows[0]); r++) {
    const force_row *row = &force_rows[r];
    char name[64];
    hilock_hold *h, *w;
    hl_waiter wt;
    hilock_lock_info i;
    int deleted = -1, owned = -1;
    int64_t t0;
    snprintf(name, sizeof(name), "force-%s", row->what);
    h = row->make(f->client, name);
    w = row->make(c2, name);
    H_OK(row->hv->try_acquire(h), h);
    hl_waiter_run(&wt, w, row->wv, 30000, 1); /* releases in its thread */
    assert_true(hl_wait_waiters(f->redis, 1, 5000)); /* the waiter sleeps */
    assert_int_equal(hl_waiter_done_at(&wt), 0);

    t0 = hl_now_ms();
    C_OK(hilock_client_force_release(f->client, name, strlen(name), &deleted),
         f->client);
    assert_int_equal(deleted, 1);
    hl_waiter_join(&wt);
    if (wt.rc != HILOCK_OK)
      print_error("row %s: waiter rc %d: %s\n", row->what, wt.rc,
                  hilock_hold_errmsg(w));
    assert_hl_ok(wt.rc, row->what);
    /* Woken, not timed out: well within its 30 s wait. */
    assert_i64_between(hl_waiter_done_at(&wt) - t0, 0, 10000);
    if (row->fenced)
      assert_true(hilock_hold_fence(w) > hilock_hold_fence(h));
    assert_hl_ok(wt.release_rc, row->what);
    i = look(f->client, name);
    assert_false(i.held);

    /* The old holder finds it lost. */
    assert_hl_ok(row->hv->owned != NULL ? row->hv->owned(h, &owned)
                                        : hilock_hold_owned(h, &owned),
                 row->what);
    assert_int_equal(owned, 0);
    assert_hl_rc(row->hv->release(h), HILOCK_ENOTOWNED, hilock_hold_errmsg(h));
    hl_holds_free(h, w);
  }
  hilock_client_free(c2);
}

static void forced_holder_renewal_reports_loss(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "renewed", 600);
  int deleted = 0;
  int64_t t0;
  H_OK(hilock_hold_set_auto_renew(HILOCK_HOLD(l), 1, 0, NULL, NULL),
       HILOCK_HOLD(l));
  H_OK(hilock_hold_try_acquire(HILOCK_HOLD(l)), HILOCK_HOLD(l));
  C_OK(hilock_client_force_release(f->client, "renewed", 7, &deleted),
       f->client);
  assert_int_equal(deleted, 1);
  /* The next renewal (every ttl/3) finds it gone. */
  t0 = hl_now_ms();
  while (!hilock_hold_lost(HILOCK_HOLD(l)) && hl_now_ms() - t0 < 5000)
    hl_sleep_ms(20);
  assert_true(hilock_hold_lost(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
}

static void fences_keep_increasing_after_force(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "mono", 5000);
  hilock_rwlock *rw = hl_new_rwlock(f->client, "mono-rw", 5000);
  uint64_t last = 0, lastw = 0;
  int deleted;
  for (int k = 0; k < 5; k++) {
    H_OK(hilock_hold_try_acquire(HILOCK_HOLD(l)), HILOCK_HOLD(l));
    assert_true(hilock_hold_fence(HILOCK_HOLD(l)) > last);
    last = hilock_hold_fence(HILOCK_HOLD(l));
    C_OK(hilock_client_force_release(f->client, "mono", 4, &deleted), f->client);
    assert_int_equal(deleted, 1);
    assert_int_equal(look(f->client, "mono").fence, last);
    /* The handle learns of the loss at its release, which frees it. */
    assert_hl_rc(hilock_hold_release(HILOCK_HOLD(l)), HILOCK_ENOTOWNED,
                 hilock_hold_errmsg(HILOCK_HOLD(l)));
    H_OK(hilock_rwlock_write_try_acquire(rw), HILOCK_HOLD(rw));
    assert_true(hilock_hold_fence(HILOCK_HOLD(rw)) > lastw);
    lastw = hilock_hold_fence(HILOCK_HOLD(rw));
    C_OK(hilock_client_force_release(f->client, "mono-rw", 7, &deleted),
         f->client);
    assert_hl_rc(hilock_rwlock_write_release(rw), HILOCK_ENOTOWNED,
                 hilock_hold_errmsg(HILOCK_HOLD(rw)));
  }
  /* Nothing left to remove. */
  C_OK(hilock_client_force_release(f->client, "mono", 4, &deleted), f->client);
  assert_int_equal(deleted, 0);
  C_OK(hilock_client_force_release(f->client, "nothing", 7, NULL), f->client);
  hl_holds_free(HILOCK_HOLD(l), HILOCK_HOLD(rw));
}

/* ## Listing --------------------------------------------------------------- */

/* Every name the walk reports for pattern, as "name=type" lines sorted. */
static char *walk(hilock_client *c, const char *pattern, int *count) {
  hilock_scan *sc = NULL;
  hilock_lock_info info;
  char *out = calloc(1, 1);
  char *lines[64];
  int n = 0, found;
  size_t total = 1;
  C_OK(hilock_client_list_locks(c, pattern, strlen(pattern), &sc), c);
  for (;;) {
    size_t len;
    const char *name;
    C_OK(hilock_scan_next(sc, &info, &found), c);
    if (!found) break;
    name = hilock_scan_name(sc, &len);
    assert_true(n < 64);
    lines[n] = malloc(len + strlen(info.type_name) + 3);
    memcpy(lines[n], name, len);
    sprintf(lines[n] + len, "=%s", info.type_name);
    n++;
  }
  hilock_scan_free(sc);
  for (int a = 0; a < n; a++)
    for (int b = a + 1; b < n; b++)
      if (strcmp(lines[a], lines[b]) > 0) {
        char *t = lines[a];
        lines[a] = lines[b];
        lines[b] = t;
      }
  for (int a = 0; a < n; a++) {
    total += strlen(lines[a]) + 1;
    out = realloc(out, total);
    strcat(out, lines[a]);
    strcat(out, " ");
    free(lines[a]);
  }
  *count = n;
  return out;
}

static void list_with_patterns(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "orders:1", 9000);
  hilock_rwlock *rw = hl_new_rwlock(f->client, "orders:2", 9000);
  hilock_semaphore *s = hl_new_semaphore(f->client, "pool", 3, 9000);
  hilock_lock *odd = hl_new_lock(f->client, "a}:b", 9000);
  hilock_lock *gone = hl_new_lock(f->client, "orders:3", 9000);
  int n;
  char *got;

  H_OK(hilock_hold_try_acquire(HILOCK_HOLD(l)), HILOCK_HOLD(l));
  H_OK(hilock_rwlock_write_try_acquire(rw), HILOCK_HOLD(rw));
  H_OK(hilock_hold_try_acquire(HILOCK_HOLD(s)), HILOCK_HOLD(s));
  H_OK(hilock_hold_try_acquire(HILOCK_HOLD(odd)), HILOCK_HOLD(odd));
  H_OK(hilock_hold_try_acquire(HILOCK_HOLD(gone)), HILOCK_HOLD(gone));
  H_OK(hilock_hold_release(HILOCK_HOLD(gone)), HILOCK_HOLD(gone)); /* fence key only */
  hl_redis_ok(f->redis, "SET notours x");
  hl_redis_ok(f->redis, "SET hilock:{x} y"); /* no role: not a lock key */

  got = walk(f->client, "*", &n);
  assert_string_equal(got, "a}:b=lock orders:1=lock orders:2=rwlock pool=semaphore ");
  free(got);
  got = walk(f->client, "orders:*", &n);
  assert_string_equal(got, "orders:1=lock orders:2=rwlock ");
  free(got);
  got = walk(f->client, "orders:[^1]", &n);
  assert_string_equal(got, "orders:2=rwlock ");
  free(got);
  /* The pattern is over names: "a" does not match the name "a}:b". */
  got = walk(f->client, "a", &n);
  assert_int_equal(n, 0);
  free(got);
  got = walk(f->client, "a?:b", &n);
  assert_string_equal(got, "a}:b=lock ");
  free(got);
  hl_holds_free(HILOCK_HOLD(l), HILOCK_HOLD(rw), HILOCK_HOLD(s),
                HILOCK_HOLD(odd), HILOCK_HOLD(gone));
}

static void list_many_names_each_once(void **state) {
  fixture *f = *state;
  hilock_scan *sc = NULL;
  hilock_lock_info info;
  int found, n = 0;
  /* 300 rwlocks with several keys each, reported once each. */
  for (int k = 0; k < 300; k++) {
    hl_redis_ok(f->redis, "HSET hilock:{many%d}:rw:writer t 1", k);
    hl_redis_int(f->redis, "ZADD hilock:{many%d}:rw:intents 9999999999999 t", k);
    hl_redis_ok(f->redis, "SET hilock:{many%d}:fence 7", k);
  }
  C_OK(hilock_client_list_locks(f->client, "many*", 5, &sc), f->client);
  for (;;) {
    C_OK(hilock_scan_next(sc, &info, &found), f->client);
    if (!found) break;
    assert_int_equal(info.type, HILOCK_TYPE_RWLOCK);
    assert_true(info.writer);
    assert_int_equal(info.waiters, 1);
    n++;
  }
  assert_int_equal(n, 300);
  hilock_scan_free(sc);
}

/* ## Bad input ------------------------------------------------------------- */

static void bad_input_is_einval(void **state) {
  fixture *f = *state;
  hilock_lock_info info;
  hilock_scan *sc = (hilock_scan *)&info;
  char *huge = malloc(HILOCK_NAME_MAX + 2);
  int deleted = 7, found = 7;
  memset(huge, 'x', HILOCK_NAME_MAX + 1);
  huge[HILOCK_NAME_MAX + 1] = 0;

  assert_int_equal(hilock_client_inspect(NULL, "a", 1, &info), HILOCK_EINVAL);
  C_RC(hilock_client_inspect(f->client, "a", 1, NULL), HILOCK_EINVAL, f->client);
  C_RC(hilock_client_inspect(f->client, NULL, 1, &info), HILOCK_EINVAL, f->client);
  C_RC(hilock_client_inspect(f->client, "a", 0, &info), HILOCK_EINVAL, f->client);
  assert_substr(hilock_client_errmsg(f->client), "empty");
  C_RC(hilock_client_inspect(f->client, huge, HILOCK_NAME_MAX + 1, &info),
       HILOCK_EINVAL, f->client);
  C_RC(hilock_client_inspect(f->client, "}x", 2, &info), HILOCK_EINVAL, f->client);
  /* A binary name with NUL bytes is a name like any other. */
  C_OK(hilock_client_inspect(f->client, "a\0b", 3, &info), f->client);
  assert_int_equal(info.type, HILOCK_TYPE_NONE);
  /* The longest name works. */
  C_OK(hilock_client_inspect(f->client, huge, HILOCK_NAME_MAX, &info), f->client);

  assert_int_equal(hilock_client_force_release(NULL, "a", 1, &deleted),
                   HILOCK_EINVAL);
  assert_int_equal(deleted, 0);
  C_RC(hilock_client_force_release(f->client, NULL, 0, NULL), HILOCK_EINVAL,
       f->client);
  C_RC(hilock_client_force_release(f->client, huge, HILOCK_NAME_MAX + 1, NULL),
       HILOCK_EINVAL, f->client);

  assert_int_equal(hilock_client_list_locks(NULL, "*", 1, &sc), HILOCK_EINVAL);
  assert_null(sc);
  assert_int_equal(hilock_client_list_locks(f->client, "*", 1, NULL),
                   HILOCK_EINVAL);
  C_RC(hilock_client_list_locks(f->client, NULL, 1, &sc), HILOCK_EINVAL, f->client);
  C_RC(hilock_client_list_locks(f->client, "", 0, &sc), HILOCK_EINVAL, f->client);
  assert_int_equal(hilock_scan_next(NULL, &info, &found), HILOCK_EINVAL);
  assert_int_equal(found, 0);
  assert_null(hilock_scan_client(NULL));
  hilock_scan_free(NULL);
  {
    size_t len = 9;
    assert_string_equal(hilock_scan_name(NULL, &len), "");
    assert_int_equal(len, 0);
  }
  free(huge);
}

static void foreign_keys_are_unknown(void **state) {
  fixture *f = *state;
  hilock_lock_info i;
  int deleted = 5;
  hilock_scan *sc = NULL;
  int found;
  /* A string where the reentrant lock keeps a hash. */
  hl_redis_ok(f->redis, "SET hilock:{mine}:rlock hello");
  i = look(f->client, "mine");
  assert_type(&i, HILOCK_TYPE_UNKNOWN, "unknown");
  assert_false(i.held);
  C_RC(hilock_client_force_release(f->client, "mine", 4, &deleted),
       HILOCK_EWRONGTYPE, f->client);
  assert_int_equal(deleted, 0);
  assert_substr(hilock_client_errmsg(f->client), "hilock:{mine}:rlock");
  assert_true(hl_redis_exists(f->redis, "hilock:{mine}:rlock", 19));
  /* A hash where a segment's holder token belongs. */
  hl_redis_int(f->redis, "HSET hilock:{segx}:seg:fence n 5 0 5");
  hl_redis_int(f->redis, "HSET hilock:{segx}:seg:0 a b");
  assert_int_equal(look(f->client, "segx").type, HILOCK_TYPE_UNKNOWN);
  C_RC(hilock_client_force_release(f->client, "segx", 4, NULL),
       HILOCK_EWRONGTYPE, f->client);
  assert_true(hl_redis_exists(f->redis, "hilock:{segx}:seg:0", 19));
  /* A foreign holder value and a damaged fence counter are shown as they
   * are, not fatal. */
  hl_redis_ok(f->redis, "SET hilock:{odd}:lock %s", "a-very-foreign-value");
  hl_redis_ok(f->redis, "SET hilock:{odd}:fence notanumber");
  i = look(f->client, "odd");
  assert_type(&i, HILOCK_TYPE_LOCK, "lock");
  assert_string_equal(i.holder, "a-very-foreign-value");
  assert_int_equal(i.fence, 0);
  /* The walk reports the unknown name too. */
  C_OK(hilock_client_list_locks(f->client, "mine", 4, &sc), f->client);
  C_OK(hilock_scan_next(sc, &i, &found), f->client);
  assert_true(found);
  assert_int_equal(i.type, HILOCK_TYPE_UNKNOWN);
  hilock_scan_free(sc);
}

static void closed_client_is_eclosed(void **state) {
  fixture *f = *state;
  hilock_scan *sc = NULL;
  hilock_lock_info info;
  int found;
  C_OK(hilock_client_list_locks(f->client, "*", 1, &sc), f->client);
  hilock_client_free(f->client);
  assert_int_equal(hilock_scan_next(sc, &info, &found), HILOCK_ECLOSED);
  hilock_scan_free(sc); /* the last reference goes here */
  f->client = hl_client(f->server.url, NULL);
}

/* ## Cluster --------------------------------------------------------------- */

static hl_cluster *const cl = &hl_group_cluster;

static void cluster_inspect_force_and_list(void **state) {
  hilock_client *c = hl_client(cl->url, NULL);
  hilock_lock *l[40];
  hilock_rwlock *rw = hl_new_rwlock(c, "cl-rw", 9000);
  hilock_fair_lock *fl = hl_new_fair(c, "cl-fair", 9000);
  hilock_lock_info i;
  int n, deleted = 0, nodes = 0, on[HL_CLUSTER_NODES] = {0};
  char *got;
  (void)state;
  /* Names spread over the three masters. */
  for (int k = 0; k < 40; k++) {
    char name[16];
    snprintf(name, sizeof(name), "cl-%02d", k);
    l[k] = hl_new_lock(c, name, 9000);
    H_OK(hilock_hold_try_acquire(HILOCK_HOLD(l[k])), HILOCK_HOLD(l[k]));
  }
  H_OK(hilock_rwlock_read_try_acquire(rw), HILOCK_HOLD(rw));
  H_OK(hilock_hold_try_acquire(HILOCK_HOLD(fl)), HILOCK_HOLD(fl));
  /* The names are on more than one master, so the walk must visit each. */
  for (int k = 0; k < 40; k++) {
    char key[32];
    int len = snprintf(key, sizeof(key), "hilock:{cl-%02d}:lock", k);
    int owner = hl_cluster_owner(cl, hilock__key_slot(key, (size_t)len));
    assert_true(owner >= 0 && owner < HL_CLUSTER_NODES);
    on[owner] = 1;
  }
  for (int m = 0; m < HL_CLUSTER_NODES; m++) nodes += on[m];
  assert_true(nodes >= 2);
  i = look(c, "cl-rw");
  assert_type(&i, HILOCK_TYPE_RWLOCK, "rwlock");
  assert_int_equal(i.readers, 1);
  i = look(c, "cl-fair");
  assert_type(&i, HILOCK_TYPE_FAIR_LOCK, "fair_lock");
  assert_true(i.held);

  got = walk(c, "cl-*", &n);
  assert_int_equal(n, 42);
  assert_non_null(strstr(got, "cl-00=lock cl-01=lock"));
  assert_non_null(strstr(got, "cl-fair=fair_lock cl-rw=rwlock "));
  free(got);
  got = walk(c, "cl-1?", &n);
  assert_int_equal(n, 10);
  free(got);

  C_OK(hilock_client_force_release(c, "cl-rw", 5, &deleted), c);
  assert_int_equal(deleted, 1);
  C_OK(hilock_client_force_release(c, "cl-fair", 7, &deleted), c);
  assert_int_equal(deleted, 1);
  got = walk(c, "cl-[fr]*", &n);
  assert_int_equal(n, 0);
  free(got);
  for (int k = 0; k < 40; k++) hilock_hold_free(HILOCK_HOLD(l[k]));
  hl_holds_free(HILOCK_HOLD(rw), HILOCK_HOLD(fl));
  hilock_client_free(c);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, hl_setup, hl_teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(nothing_there_is_type_none),
      T(lock_free_held_and_released),
      T(rlock_reentered),
      T(semaphore_permits_partly_used),
      T(rwlock_read_and_write_held),
      T(waiters_in_line),
      T(segmented_and_multi_and_redlock),
      T(force_release_wakes_waiter_and_holder_loses),
      T(forced_holder_renewal_reports_loss),
      T(fences_keep_increasing_after_force),
      T(list_with_patterns),
      T(list_many_names_each_once),
      T(bad_input_is_einval),
      T(foreign_keys_are_unknown),
      T(closed_client_is_eclosed),
  };
  const struct CMUnitTest cluster_tests[] = {
      cmocka_unit_test(cluster_inspect_force_and_list),
  };
  int rc = cmocka_run_group_tests_name("inspect", tests, hl_group_setup,
                                       hl_group_teardown);
  rc |= cmocka_run_group_tests_name("inspect on a cluster", cluster_tests,
                                    hl_cluster_group_setup,
                                    hl_cluster_group_teardown);
  return rc;
}
