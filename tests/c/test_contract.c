/* The contract every lock family keeps, run over one table of families: a
 * family joins the suite with one row. Each test loops over the table and
 * prints the family before checking it, so a failure names it.
 *
 *   1. try_acquire grants a free lock, is HILOCK_BUSY for another holder,
 *      and grants again after the release;
 *   2. a bounded acquire against a holder is HILOCK_BUSY and leaves no
 *      grant behind; a waiter is granted when the holder releases;
 *   3. a release by a non-holder fails and changes nothing for the holder;
 *   4. a grant lapses at its TTL: another holder gets in, and the stale
 *      holder's release (and extend) fail without touching the new grant;
 *   5. auto-renewal keeps a short-TTL grant for several TTLs, and stops
 *      with the release;
 *   6. a grant taken away on the server is reported lost (flag and
 *      callback), renewal does not bring it back, and the next grant
 *      clears the flag;
 *   7. a forked child cannot release, extend or renew the parent's grant,
 *      and contends for the lock as another owner;
 *   8. consecutive grants carry strictly increasing fences (0 where the
 *      family has none);
 *   9. real processes contending never exceed the family's holders, and
 *      every one of them gets its turns (checked on a shared history);
 *  10. every verb refuses a NULL handle, and a negative wait, with
 *      HILOCK_EINVAL.
 *
 * Items 4 to 6 apply to families with a TTL (not the simple lock).
 *
 * An owner of the reentrant and read-write locks is a thread of one client,
 * so every handle of a test is made on its own client. */
#include "test_util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define NAME "contract"
#define NAME2 "contract:2"
#define NCLIENTS 4 /* the largest row's holders + one contender */
#define NNODES 3   /* Redlock's private servers */
#define LONG_TTL_MS 10000
#define SHORT_TTL_MS 200 /* expiry */
#define RENEW_TTL_MS 250 /* renewal and loss */
#define NPROCS 8
#define ROUNDS 5

typedef struct fixture {
  hl_server server;
  hl_server nodes[NNODES];
  redisContext *redis;
  redisContext *node[NNODES];
  hilock_client *c[NCLIENTS];
} fixture;

static fixture fx;
static const char *node_urls[NNODES];

/* A side of a lock: its verbs (test_util.h). */
typedef hl_verbs side;

/* ## Constructors ------------------------------------------------------------
 * One handle on the lock NAME (and NAME2 for the multi-key lock) with the
 * given TTL. The Redlock rows ignore the client: they own connections to
 * their nodes. */

typedef int (*make_fn)(hilock_client *c, int64_t ttl_ms, hilock_hold **h);

#define MAKE(T, type, call)                                             \
  static int T##_make(hilock_client *c, int64_t ttl_ms, hilock_hold **h) { \
    type *x = NULL;                                                     \
    int rc = call;                                                      \
    *h = (hilock_hold *)x;                                              \
    return rc;                                                          \
  }

static const char *const multi_names[2] = {NAME, NAME2};

MAKE(simple, hilock_lock,
     ((void)ttl_ms, hilock_lock_new_simple(c, NAME, strlen(NAME), &x)))
MAKE(lock, hilock_lock, hilock_lock_new(c, NAME, strlen(NAME), ttl_ms, &x))
MAKE(lease, hilock_lock, hilock_lock_new_lease(c, NAME, strlen(NAME), ttl_ms, &x))
MAKE(rlock, hilock_rlock, hilock_rlock_new(c, NAME, strlen(NAME), ttl_ms, &x))
MAKE(rwlock, hilock_rwlock,
     hilock_rwlock_new(c, NAME, strlen(NAME), ttl_ms, &x))
MAKE(sem1, hilock_semaphore,
     hilock_semaphore_new(c, NAME, strlen(NAME), 1, ttl_ms, &x))
MAKE(sem3, hilock_semaphore,
     hilock_semaphore_new(c, NAME, strlen(NAME), 3, ttl_ms, &x))
MAKE(fair, hilock_fair_lock,
     hilock_fair_lock_new(c, NAME, strlen(NAME), ttl_ms, &x))
MAKE(multi, hilock_multi_lock,
     hilock_multi_lock_new(c, multi_names, 2, ttl_ms, &x))
MAKE(seq, hilock_sequential_lock, hilock_sequential_lock_new(c, NAME, strlen(NAME), ttl_ms, &x))
MAKE(seg1, hilock_segmented_lock,
     hilock_segmented_lock_new(c, NAME, strlen(NAME), 1, ttl_ms, &x))
MAKE(seg3, hilock_segmented_lock,
     hilock_segmented_lock_new(c, NAME, strlen(NAME), 3, ttl_ms, &x))
MAKE(election, hilock_election,
     hilock_election_new(c, NAME, strlen(NAME), ttl_ms, &x))

/* A family with no typed wrappers of its own: the hold's verbs. */
static const side hold_verbs = {.try_acquire = hilock_hold_try_acquire,
                                .acquire = hilock_hold_acquire,
                                .release = hilock_hold_release,
                                .renew = hilock_hold_renew};

static int redlock_make_n(size_t n, int64_t ttl_ms, hilock_hold **h) {
  hilock_options o = hl_test_options();
  hilock_redlock *x = NULL;
  int rc = hilock_redlock_new(node_urls, n, NAME, strlen(NAME), ttl_ms, &o, &x);
  /* Contenders retry within 50 ms rather than 200, to keep the suite
   * short. */
  if (rc == HILOCK_OK) rc = hilock_redlock_set_retry_delay(x, 50);
  if (rc != HILOCK_OK) {
    print_error("redlock: %s\n", hilock_hold_errmsg(HILOCK_HOLD(x)));
    hilock_hold_free(HILOCK_HOLD(x));
    x = NULL;
  }
  *h = (hilock_hold *)x;
  return rc;
}
static int redlock1_make(hilock_client *c, int64_t ttl_ms, hilock_hold **h) {
  (void)c;
  return redlock_make_n(1, ttl_ms, h);
}
static int redlock3_make(hilock_client *c, int64_t ttl_ms, hilock_hold **h) {
  (void)c;
  return redlock_make_n(3, ttl_ms, h);
}

/* ## Taking a grant away on the server (as the family's own suite does) ---- */

typedef void (*take_away_fn)(fixture *f, hilock_hold *h);

static void take_hold_key(fixture *f, hilock_hold *h) {
  size_t len;
  const char *key = hilock_hold_key(h, &len);
  hl_redis_ok(f->redis, "DEL %b", key, len);
}
static void take_every_name(fixture *f, hilock_hold *h) {
  hilock_multi_lock *m = (hilock_multi_lock *)h;
  for (size_t i = 0; i < hilock_multi_lock_count(m); i++) {
    size_t len;
    const char *key = hilock_multi_lock_key(m, i, &len);
    hl_redis_ok(f->redis, "DEL %b", key, len);
  }
}
static void take_readers(fixture *f, hilock_hold *h) {
  size_t len;
  const char *key = hilock_rwlock_key((hilock_rwlock *)h, 0, &len);
  hl_redis_ok(f->redis, "DEL %b", key, len);
}
static void take_session(fixture *f, hilock_hold *h) {
  (void)h;
  hl_redis_ok(f->redis, "DEL hilock:{%s}:seq:session", NAME);
}
static void take_on_every_node(fixture *f, hilock_hold *h) {
  size_t len;
  const char *key = hilock_hold_key(h, &len);
  for (size_t i = 0; i < hilock_redlock_nodes((hilock_redlock *)h); i++)
    hl_redis_ok(f->node[i], "DEL %b", key, len);
}

/* ## The table ---------------------------------------------------------------- */

enum { UNFENCED = 0, FENCED = 1 };
enum { NO_TTL = 0, TTL = 1 };

typedef struct family {
  const char *what;
  make_fn make;
  const side *own;   /* the verbs under test */
  const side *rival; /* a contender's: own, or the writer against readers */
  int holders;       /* own grants at once: 1, N permits, 0 any (shared) */
  int fenced;        /* FENCED: strictly increasing; UNFENCED: always 0 */
  int expires;       /* TTL: items 4-6 apply; NO_TTL: they do not */
  int not_owned;     /* a release without a grant */
  const char *stale; /* in the stale holder's release message, or NULL */
  take_away_fn take_away;
} family;

static const family families[] = {
    /* what, constructor, own verbs, contender's verbs, holders, fences,
     * expiry, release without a grant, stale release's message, loss */
    {"simple lock", simple_make, &hl_simple_verbs, &hl_simple_verbs, 1, FENCED,
     NO_TTL, HILOCK_ENOTOWNED, NULL, NULL},
    {"expiring lock", lock_make, &hl_lock_verbs, &hl_lock_verbs, 1, FENCED, TTL,
     HILOCK_ENOTOWNED, "nothing was deleted", take_hold_key},
    {"lease", lease_make, &hl_lock_verbs, &hl_lock_verbs, 1, FENCED, TTL,
     HILOCK_ENOTOWNED, "nothing was deleted", take_hold_key},
    {"reentrant lock", rlock_make, &hl_rlock_verbs, &hl_rlock_verbs, 1, FENCED, TTL,
     HILOCK_ENOTOWNED, NULL, take_hold_key},
    {"read-write lock, write side", rwlock_make, &hl_write_verbs, &hl_write_verbs, 1,
     FENCED, TTL, HILOCK_ENOTOWNED, NULL, take_hold_key},
    {"read-write lock, read side", rwlock_make, &hl_read_verbs, &hl_write_verbs, 0,
     UNFENCED, TTL, HILOCK_ENOTOWNED, NULL, take_readers},
    {"semaphore, 1 permit", sem1_make, &hl_sem_verbs, &hl_sem_verbs, 1, UNFENCED, TTL,
     HILOCK_ENOTOWNED, "expired", take_hold_key},
    {"semaphore, 3 permits", sem3_make, &hl_sem_verbs, &hl_sem_verbs, 3, UNFENCED, TTL,
     HILOCK_ENOTOWNED, "expired", take_hold_key},
    {"fair lock", fair_make, &hl_fair_verbs, &hl_fair_verbs, 1, FENCED, TTL,
     HILOCK_ENOTOWNED, "nothing was deleted", take_hold_key},
    {"multi-key lock", multi_make, &hl_multi_verbs, &hl_multi_verbs, 1, FENCED, TTL,
     HILOCK_ENOTOWNED, NULL, take_every_name},
    {"sequential lock", seq_make, &hl_seq_verbs, &hl_seq_verbs, 1, FENCED, TTL,
     HILOCK_ENOTOWNED, "nothing was removed", take_session},
    {"segmented lock, 1 segment", seg1_make, &hl_seg_verbs, &hl_seg_verbs, 1, FENCED,
     TTL, HILOCK_ENOTOWNED, NULL, take_hold_key},
    {"segmented lock, 3 segments", seg3_make, &hl_seg_verbs, &hl_seg_verbs, 3, FENCED,
     TTL, HILOCK_ENOTOWNED, NULL, take_hold_key},
    {"election", election_make, &hold_verbs, &hold_verbs, 1, FENCED, TTL,
     HILOCK_ENOTOWNED, "nothing was deleted", take_hold_key},
    {"redlock, 1 node", redlock1_make, &hl_redlock_verbs, &hl_redlock_verbs, 1,
     FENCED, TTL, HILOCK_ENOTOWNED, NULL, take_on_every_node},
    {"redlock, 3 nodes", redlock3_make, &hl_redlock_verbs, &hl_redlock_verbs, 1,
     FENCED, TTL, HILOCK_ENOTOWNED, NULL, take_on_every_node},
};
#define NFAMILIES (sizeof(families) / sizeof(families[0]))

/* Own grants that keep the rival out. */
static int fill(const family *fam) {
  return fam->holders > 0 ? fam->holders : 1;
}

/* ## Fixture -------------------------------------------------------------------- */

static int group_setup(void **state) {
  *state = &fx;
  if (hl_server_start(&fx.server, NULL) != 0) return -1;
  if (hl_servers_start(fx.nodes, NNODES, NULL) != 0) {
    hl_server_destroy(&fx.server);
    return -1;
  }
  for (int i = 0; i < NNODES; i++) node_urls[i] = fx.nodes[i].url;
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  hl_servers_destroy(fx.nodes, NNODES);
  hl_server_destroy(&fx.server);
  return 0;
}

static void flush_all(fixture *f) {
  hl_redis_ok(f->redis, "FLUSHALL");
  for (int i = 0; i < NNODES; i++) hl_redis_ok(f->node[i], "FLUSHALL");
}

static int setup(void **state) {
  fixture *f = *state;
  f->redis = hl_redis_connect(&f->server);
  for (int i = 0; i < NNODES; i++) f->node[i] = hl_redis_connect(&f->nodes[i]);
  flush_all(f);
  return hl_clients_new(f->c, NCLIENTS, f->server.url);
}

static int teardown(void **state) {
  fixture *f = *state;
  hl_clients_free(f->c, NCLIENTS);
  for (int i = 0; i < NNODES; i++) {
    redisFree(f->node[i]);
    f->node[i] = NULL;
  }
  redisFree(f->redis);
  f->redis = NULL;
  return 0;
}

/* ## Helpers ------------------------------------------------------------------- */

#define E(h) hilock_hold_errmsg(h)

/* Start a family's test: its name in the output, empty servers. */
static void begin(fixture *f, const family *fam) {
  print_message("  %s\n", fam->what);
  flush_all(f);
}

/* Handle i (on client i, so each is an owner of its own). */
static hilock_hold *make(fixture *f, const family *fam, int i,
                         int64_t ttl_ms) {
  hilock_hold *h = NULL;
  assert_hl_ok(fam->make(f->c[i], ttl_ms, &h), hilock_client_errmsg(f->c[i]));
  assert_non_null(h);
  return h;
}

static int owned(const side *s, hilock_hold *h) {
  int b = -1;
  if (s->owned != NULL)
    assert_hl_ok(s->owned(h, &b), E(h));
  else
    assert_hl_ok(hilock_hold_owned(h, &b), E(h));
  return b;
}

static int lost(const side *s, hilock_hold *h) {
  return s->lost != NULL ? s->lost(h) : hilock_hold_lost(h);
}

static int64_t validity(const side *s, hilock_hold *h) {
  return s->validity_ms != NULL ? s->validity_ms(h)
                                : hilock_hold_validity_ms(h);
}

static int set_auto_renew(const side *s, hilock_hold *h, hilock_lost_fn fn,
                          void *arg) {
  return s->set_auto_renew != NULL ? s->set_auto_renew(h, 1, 0, fn, arg)
                                   : hilock_hold_set_auto_renew(h, 1, 0, fn,
                                                                arg);
}

static int locked(hilock_hold *h) {
  int b = -1;
  assert_hl_ok(hilock_hold_locked(h, &b), E(h));
  return b;
}

/* The own side's grants that fill the lock: handles 0..fill-1. */
static void take_all(fixture *f, const family *fam, hilock_hold **a,
                     int64_t ttl_ms) {
  for (int i = 0; i < fill(fam); i++) {
    a[i] = make(f, fam, i, ttl_ms);
    assert_hl_ok(fam->own->try_acquire(a[i]), E(a[i]));
  }
}

static void release_all(const family *fam, hilock_hold **a, int from) {
  for (int i = from; i < fill(fam); i++)
    assert_hl_ok(fam->own->release(a[i]), E(a[i]));
}

static void free_all(const family *fam, hilock_hold **a) {
  for (int i = 0; i < fill(fam); i++) hilock_hold_free(a[i]);
}

static atomic_int lost_calls;

/* ## 1. try_acquire, busy, release ------------------------------------------ */

static void try_acquire_is_busy_for_others_until_released(void **state) {
  fixture *f = *state;
  for (size_t k = 0; k < NFAMILIES; k++) {
    const family *fam = &families[k];
    hilock_hold *a[NCLIENTS], *r;
    begin(f, fam);
    take_all(f, fam, a, LONG_TTL_MS);
    for (int i = 0; i < fill(fam); i++) {
      assert_true(validity(fam->own, a[i]) > 0);
      assert_int_equal(owned(fam->own, a[i]), 1);
    }
    /* What the hold tells of a grant, in every family (a read-write lock's
     * hold is its write side: a read grant leaves its token empty). */
    {
      size_t len = 0;
      assert_true(hilock_hold_key(a[0], &len)[0] != '\0' && len > 0);
      assert_true((hilock_hold_token(a[0])[0] != '\0') ==
                  (fam->own != &hl_read_verbs));
      assert_int_equal(hilock_hold_ttl_ms(a[0]),
                       fam->expires == TTL ? LONG_TTL_MS : 0);
    }
    r = make(f, fam, NCLIENTS - 1, LONG_TTL_MS);
    assert_hl_rc(fam->rival->try_acquire(r), HILOCK_BUSY, E(r));
    assert_int_equal(validity(fam->rival, r), 0);
    assert_int_equal(owned(fam->rival, r), 0);
    assert_string_equal(hilock_hold_token(r), "");

    assert_hl_ok(fam->own->release(a[0]), E(a[0]));
    assert_int_equal(validity(fam->own, a[0]), 0);
    assert_int_equal(owned(fam->own, a[0]), 0);
    assert_hl_ok(fam->rival->try_acquire(r), E(r));
    assert_int_equal(owned(fam->rival, r), 1);
    assert_hl_ok(fam->rival->release(r), E(r));
    release_all(fam, a, 1);
    assert_int_equal(locked(r), 0);
    free_all(fam, a);
    hilock_hold_free(r);
  }
}

/* ## 2. Waiting ---------------------------------------------------------------- */

typedef struct waiter {
  const side *s;
  hilock_hold *h;
  int started;
  int rc, release_rc;
  uint64_t fence;
} waiter;

/* Acquire, note the fence, and release on the same thread (an owner of
 * the reentrant and read-write locks is a thread). */
static void *wait_then_release(void *arg) {
  waiter *w = arg;
  __atomic_store_n(&w->started, 1, __ATOMIC_RELEASE);
  w->rc = w->s->acquire(w->h, 10000);
  if (w->rc == HILOCK_OK) {
    w->fence = hilock_hold_fence(w->h);
    w->release_rc = w->s->release(w->h);
  }
  return NULL;
}

static void acquire_waits_for_the_holder_and_leaves_nothing_on_busy(
    void **state) {
  fixture *f = *state;
  for (size_t k = 0; k < NFAMILIES; k++) {
    const family *fam = &families[k];
    hilock_hold *a[NCLIENTS], *r;
    waiter w;
    pthread_t t;
    int64_t deadline;
    begin(f, fam);
    take_all(f, fam, a, LONG_TTL_MS);
    r = make(f, fam, NCLIENTS - 1, LONG_TTL_MS);

    /* Busy after the wait, and no grant, queue entry or intent is left:
     * once the holders are gone the lock is free for anyone at once. */
    assert_hl_rc(fam->rival->acquire(r, 200), HILOCK_BUSY, E(r));
    assert_int_equal(validity(fam->rival, r), 0);
    assert_int_equal(owned(fam->rival, r), 0);
    release_all(fam, a, 0);
    assert_int_equal(locked(r), 0);
    assert_hl_ok(fam->own->try_acquire(a[0]), E(a[0]));
    assert_hl_ok(fam->own->release(a[0]), E(a[0]));

    /* A waiter is granted when a holder releases. */
    for (int i = 0; i < fill(fam); i++)
      assert_hl_ok(fam->own->try_acquire(a[i]), E(a[i]));
    memset(&w, 0, sizeof(w));
    w.s = fam->rival;
    w.h = r;
    w.rc = w.release_rc = -1000;
    assert_int_equal(pthread_create(&t, NULL, wait_then_release, &w), 0);
    deadline = hl_now_ms() + 5000;
    while (!__atomic_load_n(&w.started, __ATOMIC_ACQUIRE) &&
           hl_now_ms() < deadline)
      hl_sleep_ms(1);
    hl_sleep_ms(100); /* most likely asleep in its wait by now */
    assert_hl_ok(fam->own->release(a[0]), E(a[0]));
    pthread_join(t, NULL);
    assert_hl_ok(w.rc, E(r));
    assert_hl_ok(w.release_rc, E(r));
    if (fam->fenced) assert_true(w.fence > hilock_hold_fence(a[0]));
    release_all(fam, a, 1);
    assert_int_equal(locked(r), 0);
    free_all(fam, a);
    hilock_hold_free(r);
  }
}

/* ## 3. Release by a non-holder ---------------------------------------------- */

static void release_by_a_non_holder_changes_nothing(void **state) {
  fixture *f = *state;
  for (size_t k = 0; k < NFAMILIES; k++) {
    const family *fam = &families[k];
    hilock_hold *a[NCLIENTS], *never, *loser;
    uint64_t fence;
    char token[64];
    begin(f, fam);
    take_all(f, fam, a, LONG_TTL_MS);
    fence = hilock_hold_fence(a[0]);
    snprintf(token, sizeof(token), "%s", hilock_hold_token(a[0]));
    /* One that never tried, and one that tried and was refused. */
    never = make(f, fam, NCLIENTS - 1, LONG_TTL_MS);
    loser = make(f, fam, NCLIENTS - 1, LONG_TTL_MS);
    assert_hl_rc(fam->own->release(never), fam->not_owned, E(never));
    assert_int_equal(hilock_hold_errcode(never), fam->not_owned);
    assert_true(E(never)[0] != '\0');
    assert_hl_rc(fam->rival->try_acquire(loser), HILOCK_BUSY, E(loser));
    assert_hl_rc(fam->own->release(loser), fam->not_owned, E(loser));

    /* The holder's grant is untouched. */
    assert_int_equal(owned(fam->own, a[0]), 1);
    assert_false(lost(fam->own, a[0]));
    assert_true(validity(fam->own, a[0]) > 0);
    assert_int_equal(hilock_hold_fence(a[0]), fence);
    assert_string_equal(hilock_hold_token(a[0]), token);
    assert_hl_rc(fam->rival->try_acquire(loser), HILOCK_BUSY, E(loser));
    release_all(fam, a, 0);
    assert_int_equal(locked(loser), 0);
    free_all(fam, a);
    hl_holds_free(never, loser);
  }
}

/* ## 4. Expiry ------------------------------------------------------------------ */

static void lapsed_grant_lets_another_in_and_stale_release_spares_it(
    void **state) {
  fixture *f = *state;
  for (size_t k = 0; k < NFAMILIES; k++) {
    const family *fam = &families[k];
    const side *own = fam->own;
    hilock_hold *a[NCLIENTS], *r;
    int64_t deadline;
    if (!fam->expires) continue;
    begin(f, fam);
    take_all(f, fam, a, SHORT_TTL_MS);
    r = make(f, fam, NCLIENTS - 1, LONG_TTL_MS);

    /* Nobody releases: the contender gets in when the grants lapse. */
    assert_hl_ok(fam->rival->acquire(r, 5000), E(r));
    for (int i = 0; i < fill(fam); i++) {
      /* With several permits the others lapse a little later; the local
       * estimate ends before the server's expiry. */
      deadline = hl_now_ms() + 2000;
      while ((validity(own, a[i]) > 0 || owned(own, a[i])) &&
             hl_now_ms() < deadline)
        hl_sleep_ms(5);
      assert_int_equal(validity(own, a[i]), 0);
      assert_int_equal(owned(own, a[i]), 0);
    }
    if (fam->fenced)
      assert_true(hilock_hold_fence(r) > hilock_hold_fence(a[0]));

    /* The stale holders' release and extend report not-owned and leave
     * the new grant alone. */
    for (int i = 0; i < fill(fam); i++) {
      assert_hl_rc(own->release(a[i]), fam->not_owned, E(a[i]));
      if (fam->stale != NULL) assert_substr(E(a[i]), fam->stale);
      if (own->extend != NULL)
        assert_hl_rc(own->extend(a[i], 3 * LONG_TTL_MS, 1), HILOCK_ENOTOWNED,
                     E(a[i]));
      if (own->renew != NULL)
        assert_hl_rc(own->renew(a[i]), HILOCK_ENOTOWNED, E(a[i]));
    }
    assert_int_equal(owned(fam->rival, r), 1);
    assert_i64_between(validity(fam->rival, r), LONG_TTL_MS / 2, LONG_TTL_MS);
    assert_hl_ok(fam->rival->release(r), E(r));
    free_all(fam, a);
    hilock_hold_free(r);
  }
}

/* ## 5. Renewal ----------------------------------------------------------------- */

static void auto_renewal_keeps_a_short_grant(void **state) {
  fixture *f = *state;
  for (size_t k = 0; k < NFAMILIES; k++) {
    const family *fam = &families[k];
    hilock_hold *a[NCLIENTS], *r;
    if (!fam->expires) continue;
    begin(f, fam);
    lost_calls = 0;
    for (int i = 0; i < fill(fam); i++) {
      a[i] = make(f, fam, i, RENEW_TTL_MS);
      assert_hl_ok(set_auto_renew(fam->own, a[i], hl_count_call, &lost_calls),
                   E(a[i]));
      assert_hl_ok(fam->own->try_acquire(a[i]), E(a[i]));
    }
    r = make(f, fam, NCLIENTS - 1, LONG_TTL_MS);
    hl_sleep_ms(4 * RENEW_TTL_MS); /* the time under test, not a bound */
    for (int i = 0; i < fill(fam); i++) {
      assert_int_equal(owned(fam->own, a[i]), 1);
      assert_false(lost(fam->own, a[i]));
      assert_true(validity(fam->own, a[i]) > 0);
    }
    assert_hl_rc(fam->rival->try_acquire(r), HILOCK_BUSY, E(r));
    release_all(fam, a, 0);
    /* No renewal outlives the release to report it lost. */
    hl_sleep_ms(RENEW_TTL_MS);
    assert_int_equal(atomic_load(&lost_calls), 0);
    free_all(fam, a);
    hilock_hold_free(r);
  }
}

/* ## 6. Loss -------------------------------------------------------------------- */

static void grant_taken_away_is_reported_lost(void **state) {
  fixture *f = *state;
  for (size_t k = 0; k < NFAMILIES; k++) {
    const family *fam = &families[k];
    hilock_hold *a;
    int64_t deadline;
    if (!fam->expires) continue;
    begin(f, fam);
    lost_calls = 0;
    a = make(f, fam, 0, RENEW_TTL_MS);
    assert_hl_ok(set_auto_renew(fam->own, a, hl_count_call, &lost_calls), E(a));
    assert_hl_ok(fam->own->try_acquire(a), E(a));
    fam->take_away(f, a);
    deadline = hl_now_ms() + 3000;
    while ((!lost(fam->own, a) ||
            atomic_load(&lost_calls) == 0) &&
           hl_now_ms() < deadline)
      hl_sleep_ms(5);
    assert_true(lost(fam->own, a));
    assert_int_equal(atomic_load(&lost_calls), 1);
    assert_int_equal(validity(fam->own, a), 0);
    assert_int_equal(owned(fam->own, a), 0);
    assert_int_equal(locked(a), 0); /* renewal did not re-create it */
    assert_hl_rc(fam->own->release(a), fam->not_owned, E(a));
    /* The release that found the grant gone ends it, in every family, and
     * the loss is still reported. */
    assert_true(lost(fam->own, a));
    assert_int_equal(validity(fam->own, a), 0);
    /* The next grant is clean. */
    assert_hl_ok(fam->own->try_acquire(a), E(a));
    assert_false(lost(fam->own, a));
    assert_int_equal(owned(fam->own, a), 1);
    assert_hl_ok(fam->own->release(a), E(a));
    assert_int_equal(atomic_load(&lost_calls), 1);
    hilock_hold_free(a);
  }
}

/* ## 4b. A lapsed grant is a loss, and the handle acquires again ----------------- */

/* The counters where handle h of client 0 counts: (lost, hold count). */
static void counts(fixture *f, const family *fam, hilock_hold *h,
                   uint64_t *lost_n, uint64_t *holds) {
  hilock_stats st;
  if (fam->make == redlock1_make || fam->make == redlock3_make)
    assert_hl_ok(hilock_redlock_stats((hilock_redlock *)h, &st, sizeof(st)),
                 E(h));
  else
    assert_hl_ok(hilock_client_stats(f->c[0], &st, sizeof(st)),
                 hilock_client_errmsg(f->c[0]));
  *lost_n = st.lost;
  *holds = st.hold.count;
}

/* a's grant (not renewed) lapses: the rival r gets the lock and gives it
 * back. */
static void lapse(const family *fam, hilock_hold *a, hilock_hold *r) {
  assert_hl_ok(fam->own->try_acquire(a), E(a));
  assert_hl_ok(fam->rival->acquire(r, 5000), E(r));
  assert_hl_ok(fam->rival->release(r), E(r));
}

static void count_told(void *arg) {
  __atomic_add_fetch((int *)arg, 1, __ATOMIC_SEQ_CST);
}

static void lapsed_grant_is_a_loss_and_the_handle_acquires_again(
    void **state) {
  fixture *f = *state;
  for (size_t k = 0; k < NFAMILIES; k++) {
    const family *fam = &families[k];
    const side *own = fam->own;
    hilock_hold *a, *r;
    uint64_t lost0, holds0, n, holds;
    int told = 0;
    if (!fam->expires || fam->holders > 1) continue;
    begin(f, fam);
    a = make(f, fam, 0, SHORT_TTL_MS);
    r = make(f, fam, NCLIENTS - 1, LONG_TTL_MS);
    /* The loss callback without renewal: run once per lost grant, in the
     * call that found the loss. */
    assert_hl_ok(own->set_auto_renew != NULL
                     ? own->set_auto_renew(a, 0, 0, count_told, &told)
                     : hilock_hold_set_auto_renew(a, 0, 0, count_told, &told),
                 E(a));
    counts(f, fam, a, &lost0, &holds0);

    /* The same handle is granted again at once; the lapse was a loss,
     * counted once and never as a hold. */
    lapse(fam, a, r);
    assert_hl_ok(own->acquire(a, 5000), E(a));
    counts(f, fam, a, &n, &holds);
    assert_int_equal(n, lost0 + 1);
    assert_int_equal(holds, holds0);
    assert_int_equal(__atomic_load_n(&told, __ATOMIC_SEQ_CST), 1);
    assert_false(lost(own, a));
    assert_int_equal(owned(own, a), 1);
    assert_hl_ok(own->release(a), E(a));

    /* A release after the lapse reports not-owned, counts the loss once,
     * and leaves it reported until the next grant. */
    lapse(fam, a, r);
    for (int i = 0; i < 2; i++) {
      assert_hl_rc(own->release(a), fam->not_owned, E(a));
      assert_true(lost(own, a));
      counts(f, fam, a, &n, &holds);
      assert_int_equal(n, lost0 + 2);
      assert_int_equal(holds, holds0 + 1);
      assert_int_equal(__atomic_load_n(&told, __ATOMIC_SEQ_CST), 2);
    }
    assert_hl_ok(own->try_acquire(a), E(a));
    assert_false(lost(own, a));
    assert_hl_ok(own->release(a), E(a));
    counts(f, fam, a, &n, &holds);
    assert_int_equal(n, lost0 + 2);
    assert_int_equal(holds, holds0 + 2);
    hl_holds_free(a, r);
  }
}

/* ## 7. Fork ---------------------------------------------------------------------- */

typedef struct fork_arg {
  const family *fam;
  hilock_hold *h;
} fork_arg;

/* In the child: every verb on the parent's grant is refused untouched,
 * the handle holds nothing, and it contends as another owner. */
static int child_uses_the_parents_grant(void *arg) {
  fork_arg *p = arg;
  const side *s = p->fam->own;
  int bad = 0, b = -1;
  if (s->renew != NULL && s->renew(p->h) != HILOCK_EFORKED) bad |= 1;
  if (s->extend != NULL &&
      s->extend(p->h, HILOCK_TTL_MIN_MS, 1) != HILOCK_EFORKED)
    bad |= 2;
  if (s->release(p->h) != HILOCK_EFORKED) bad |= 4;
  if (validity(s, p->h) != 0) bad |= 8;
  if (hilock_hold_held(p->h)) bad |= 16;
  if ((s->owned != NULL ? s->owned(p->h, &b) : hilock_hold_owned(p->h, &b)) !=
          HILOCK_OK ||
      b != 0)
    bad |= 32;
  if (fill(p->fam) == 1 && p->fam->rival->try_acquire(p->h) != HILOCK_BUSY)
    bad |= 64;
  return bad;
}

static void forked_child_cannot_touch_the_parents_grant(void **state) {
  fixture *f = *state;
  for (size_t k = 0; k < NFAMILIES; k++) {
    const family *fam = &families[k];
    hilock_hold *a, *r;
    fork_arg p;
    pid_t pid;
    int status;
    begin(f, fam);
    a = make(f, fam, 0, LONG_TTL_MS);
    r = make(f, fam, NCLIENTS - 1, LONG_TTL_MS);
    assert_hl_ok(fam->own->try_acquire(a), E(a));
    p.fam = fam;
    p.h = a;
    pid = hl_fork_run(child_uses_the_parents_grant, &p);
    assert_true(pid > 0);
    status = hl_wait_child(pid, 10000);
    if (status != 0) fail_msg("%s: child status %d", fam->what, status);
    /* The parent still holds it, with its full TTL. */
    assert_int_equal(owned(fam->own, a), 1);
    assert_true(validity(fam->own, a) > 0);
    if (fill(fam) == 1)
      assert_hl_rc(fam->rival->try_acquire(r), HILOCK_BUSY, E(r));
    assert_hl_ok(fam->own->release(a), E(a));
    assert_int_equal(locked(r), 0);
    hl_holds_free(a, r);
  }
}

/* ## 8. Fences --------------------------------------------------------------------- */

static void consecutive_grants_carry_increasing_fences(void **state) {
  fixture *f = *state;
  for (size_t k = 0; k < NFAMILIES; k++) {
    const family *fam = &families[k];
    hilock_hold *h[NCLIENTS];
    uint64_t last = 0;
    begin(f, fam);
    for (int i = 0; i < NCLIENTS; i++) {
      h[i] = make(f, fam, i, LONG_TTL_MS);
      assert_int_equal(hilock_hold_fence(h[i]), 0);
    }
    for (int round = 0; round < 2 * NCLIENTS; round++) {
      hilock_hold *x = h[round % NCLIENTS];
      /* One attempt either way: try_acquire, or acquire with no wait. */
      assert_hl_ok(round % 2 ? fam->own->acquire(x, 0)
                             : fam->own->try_acquire(x),
                   E(x));
      if (fam->fenced) {
        assert_true(hilock_hold_fence(x) > last);
        last = hilock_hold_fence(x);
      } else {
        assert_int_equal(hilock_hold_fence(x), 0);
      }
      assert_hl_ok(fam->own->release(x), E(x));
      /* The last grant's fence stays readable. */
      if (fam->fenced) assert_int_equal(hilock_hold_fence(x), last);
    }
    for (int i = 0; i < NCLIENTS; i++) hilock_hold_free(h[i]);
  }
}

/* ## 9. Exclusion between processes ----------------------------------------------- */

static void checker_reports_overlaps(void **state) {
  /* Two exclusive holders overlap: 10..20 begins inside 0..100. */
  static const hl_span two[] = {
      {1, 1, 0, 100}, {2, 1, 10, 20}, {3, 1, 100, 200}};
  /* Three permits: three at once are fine, the fourth is not. */
  static const hl_span four[] = {
      {1, 1, 0, 100}, {2, 1, 10, 90}, {3, 1, 20, 80}, {4, 1, 30, 40}};
  /* Readers and writers: a writer overlaps nothing. */
  static const hl_span rw_good[] = {
      {1, 1, 0, 100}, {2, 1, 50, 150}, {3, 0, 150, 200}, {1, 1, 200, 300}};
  static const hl_span rw_bad[] = {
      {1, 1, 0, 100}, {2, 0, 90, 120}, {3, 0, 130, 140}, {4, 0, 135, 136}};
  /* Touching spans and an empty one overlap nothing. */
  static const hl_span touching[] = {
      {1, 1, 0, 100}, {2, 1, 100, 100}, {3, 1, 100, 200}};
  int pairs = -1;
  (void)state;
  assert_int_equal(hl_history_check(two, 3, 1, NULL), 1);
  assert_int_equal(hl_history_check(two, 3, 2, NULL), 0);
  assert_int_equal(hl_history_check(four, 4, 3, NULL), 1);
  assert_int_equal(hl_history_check(four, 3, 3, NULL), 0);
  assert_int_equal(hl_history_check(rw_good, 4, 0, &pairs), 0);
  assert_int_equal(pairs, 1);
  assert_int_equal(hl_history_check(rw_bad, 4, 0, &pairs), 2);
  assert_int_equal(pairs, 0);
  assert_int_equal(hl_history_check(touching, 3, 1, NULL), 0);
}

typedef struct contender_arg {
  const family *fam;
  hl_history *h;
} contender_arg;

/* A process with its own client (hl_run_with_client): ROUNDS times
 * acquire, hold briefly, release, recording the span on the history's
 * sequence. */
static int contend(hilock_client *c, void *arg) {
  contender_arg *p = arg;
  hilock_hold *h = NULL;
  int rc = p->fam->make(c, LONG_TTL_MS, &h);
  for (int i = 0; rc == HILOCK_OK && i < ROUNDS; i++) {
    int64_t start, end;
    rc = p->fam->own->acquire(h, 20000);
    if (rc != HILOCK_OK) break;
    start = hl_history_tick(p->h);
    hl_sleep_ms(1);
    end = hl_history_tick(p->h);
    rc = p->fam->own->release(h);
    hl_history_add(p->h, 1, start, end);
  }
  if (rc != HILOCK_OK)
    fprintf(stderr, "contender %d (%s): %s: %s\n", (int)getpid(),
            p->fam->what, hilock_err_name(rc),
            h ? E(h) : hilock_client_errmsg(c));
  hilock_hold_free(h);
  return rc == HILOCK_OK ? 0 : 1;
}

static void contending_processes_never_exceed_the_holders(void **state) {
  fixture *f = *state;
  for (size_t k = 0; k < NFAMILIES; k++) {
    const family *fam = &families[k];
    hl_history *h;
    contender_arg p;
    hl_with_client w = {f->server.url, contend, &p};
    pid_t pids[NPROCS];
    int n, bad;
    if (fam->holders == 0) continue; /* shared: see the family's suite */
    begin(f, fam);
    h = hl_history_new(NPROCS * ROUNDS);
    p.fam = fam;
    p.h = h;
    for (int i = 0; i < NPROCS; i++) {
      pids[i] = hl_fork_run(hl_run_with_client, &w);
      assert_true(pids[i] > 0);
    }
    for (int i = 0; i < NPROCS; i++) {
      int st = hl_wait_child(pids[i], 40000);
      if (st != 0) fail_msg("%s: contender status %d", fam->what, st);
    }
    n = hl_history_len(h);
    assert_int_equal(n, NPROCS * ROUNDS);
    bad = hl_history_check(h->span, (size_t)n, fam->holders, NULL);
    if (bad != 0)
      fail_msg("%s: %d grants began past %d holders", fam->what, bad,
               fam->holders);
    /* Every process had all its turns. */
    for (int i = 0; i < NPROCS; i++) {
      int turns = 0;
      for (int j = 0; j < n; j++) turns += h->span[j].pid == pids[i];
      assert_int_equal(turns, ROUNDS);
    }
    hl_history_free(h);
  }
}

/* ## 10. Bad arguments -------------------------------------------------------- */

static void null_handles_and_negative_waits_are_einval(void **state) {
  fixture *f = *state;
  for (size_t k = 0; k < NFAMILIES; k++) {
    const family *fam = &families[k];
    const side *sides[2] = {fam->own, fam->rival};
    hilock_hold *h;
    int b = -1;
    begin(f, fam);
    h = make(f, fam, 0, LONG_TTL_MS);
    for (int i = 0; i < 2; i++) {
      const side *s = sides[i];
      assert_int_equal(s->try_acquire(NULL), HILOCK_EINVAL);
      assert_int_equal(s->acquire(NULL, 10), HILOCK_EINVAL);
      assert_int_equal(s->release(NULL), HILOCK_EINVAL);
      if (s->extend != NULL)
        assert_int_equal(s->extend(NULL, 1000, 1), HILOCK_EINVAL);
      if (s->renew != NULL) assert_int_equal(s->renew(NULL), HILOCK_EINVAL);
      if (s->owned != NULL) assert_int_equal(s->owned(NULL, &b), HILOCK_EINVAL);
      if (s->set_auto_renew != NULL)
        assert_int_equal(s->set_auto_renew(NULL, 1, 0, NULL, NULL),
                         HILOCK_EINVAL);
      /* A negative wait other than HILOCK_WAIT_FOREVER takes nothing. */
      assert_hl_rc(s->acquire(h, -5), HILOCK_EINVAL, E(h));
      assert_int_equal(hilock_hold_errcode(h), HILOCK_EINVAL);
      assert_int_equal(validity(s, h), 0);
    }
    assert_int_equal(locked(h), 0);
    hilock_hold_free(h);
  }
}

/* ## 11. The verbs on the hold ------------------------------------------------
 * hilock_hold_try_acquire, _acquire, _release, _extend and _renew on every
 * family's hold do what the family's typed verbs do (the read-write lock's
 * hold is its write side: the read side's row is the write side's). A verb
 * the family lacks is HILOCK_ENOTSUP from both, with a message naming the
 * family and the verb, and leaves the grant as it was. */

/* "semaphore" of "semaphore, 1 permit": the family's name in messages. */
static void family_name(const family *fam, char *buf, size_t cap) {
  size_t n = strcspn(fam->what, ",");
  snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), fam->what);
}

/* Call a verb the family lacks: HILOCK_ENOTSUP naming it, grant intact. */
static void lacks(const family *fam, hilock_hold *h, int rc,
                  const char *verb) {
  char name[64];
  family_name(fam, name, sizeof(name));
  assert_hl_rc(rc, HILOCK_ENOTSUP, E(h));
  assert_int_equal(hilock_hold_errcode(h), HILOCK_ENOTSUP);
  if (strstr(E(h), name) == NULL || strstr(E(h), verb) == NULL)
    fail_msg("%s: \"%s\" names neither \"%s\" nor \"%s\"", fam->what, E(h),
             name, verb);
  assert_int_equal(owned(fam->own, h), 1);
  assert_true(hilock_hold_validity_ms(h) > 0);
}

static void every_verb_runs_on_the_hold_and_a_missing_one_is_enotsup(
    void **state) {
  fixture *f = *state;
  for (size_t k = 0; k < NFAMILIES; k++) {
    const family *fam = &families[k];
    hilock_hold *a[NCLIENTS], *h, *r;
    if (fam->own == &hl_read_verbs) continue; /* the hold is the write side */
    begin(f, fam);
    for (int i = 1; i < fill(fam); i++) {
      a[i] = make(f, fam, i, LONG_TTL_MS);
      assert_hl_ok(fam->own->try_acquire(a[i]), E(a[i]));
    }
    h = a[0] = make(f, fam, 0, LONG_TTL_MS);
    r = make(f, fam, NCLIENTS - 1, LONG_TTL_MS);

    /* A grant through the hold; the rival is busy either way. */
    assert_hl_ok(hilock_hold_try_acquire(h), E(h));
    assert_int_equal(owned(fam->own, h), 1);
    assert_hl_rc(hilock_hold_try_acquire(r), HILOCK_BUSY, E(r));
    assert_hl_rc(fam->rival->try_acquire(r), HILOCK_BUSY, E(r));
    assert_hl_rc(hilock_hold_acquire(r, 0), HILOCK_BUSY, E(r));
    assert_hl_rc(fam->rival->acquire(r, 0), HILOCK_BUSY, E(r));
    assert_hl_rc(hilock_hold_acquire(r, -5), HILOCK_EINVAL, E(r));

    /* extend: moves the validity past the TTL, or is not there at all. */
    if (fam->own->extend != NULL && fam->expires == TTL) {
      assert_hl_ok(hilock_hold_extend(h, 2 * LONG_TTL_MS, 1), E(h));
      assert_true(hilock_hold_validity_ms(h) > LONG_TTL_MS);
      assert_hl_ok(fam->own->extend(h, 1000, 0), E(h));
      assert_true(hilock_hold_validity_ms(h) > 2 * LONG_TTL_MS);
      assert_hl_rc(hilock_hold_extend(h, -1, 1), HILOCK_EINVAL, E(h));
    } else {
      lacks(fam, h, hilock_hold_extend(h, 2 * LONG_TTL_MS, 1), "extend");
      if (fam->own->extend != NULL)
        lacks(fam, h, fam->own->extend(h, 2 * LONG_TTL_MS, 1), "extend");
    }
    /* renew: back to the TTL, or not there. */
    if (fam->own->renew != NULL && fam->expires == TTL) {
      assert_hl_ok(hilock_hold_renew(h), E(h));
      assert_true(hilock_hold_validity_ms(h) <= LONG_TTL_MS);
      assert_true(hilock_hold_validity_ms(h) > 0);
      assert_hl_ok(fam->own->renew(h), E(h));
    } else {
      lacks(fam, h, hilock_hold_renew(h), "renew");
      if (fam->own->renew != NULL)
        lacks(fam, h, fam->own->renew(h), "renew");
    }

    /* release through the hold: the rival gets in; a second release finds
     * no grant, through the hold as through the typed verb. */
    assert_hl_ok(hilock_hold_release(h), E(h));
    assert_int_equal(owned(fam->own, h), 0);
    assert_hl_rc(hilock_hold_release(h), fam->not_owned, E(h));
    assert_hl_rc(fam->own->release(h), fam->not_owned, E(h));
    assert_hl_ok(hilock_hold_acquire(r, 0), E(r));
    assert_hl_rc(hilock_hold_try_acquire(h), HILOCK_BUSY, E(h));
    assert_hl_ok(fam->rival->release(r), E(r));
    assert_hl_ok(hilock_hold_acquire(h, 1000), E(h));
    assert_hl_ok(fam->own->release(h), E(h));
    release_all(fam, a, 1);
    assert_int_equal(locked(r), 0);
    free_all(fam, a);
    hilock_hold_free(r);
  }
  assert_int_equal(hilock_hold_try_acquire(NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_acquire(NULL, 0), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_release(NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_extend(NULL, 1000, 1), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_renew(NULL), HILOCK_EINVAL);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

HL_SUITE_MAIN("contract", group_setup, group_teardown,
      T(try_acquire_is_busy_for_others_until_released),
      T(acquire_waits_for_the_holder_and_leaves_nothing_on_busy),
      T(release_by_a_non_holder_changes_nothing),
      T(lapsed_grant_lets_another_in_and_stale_release_spares_it),
      T(auto_renewal_keeps_a_short_grant),
      T(grant_taken_away_is_reported_lost),
      T(forked_child_cannot_touch_the_parents_grant),
      T(consecutive_grants_carry_increasing_fences),
      cmocka_unit_test(checker_reports_overlaps),
      T(contending_processes_never_exceed_the_holders),
      T(null_handles_and_negative_waits_are_einval),
      T(lapsed_grant_is_a_loss_and_the_handle_acquires_again),
      T(every_verb_runs_on_the_hold_and_a_missing_one_is_enotsup))
