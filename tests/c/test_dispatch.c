/* The dispatcher while a hash slot migrates: every lock type waited on in
 * BLPOP and renewed by the watchdog while its slot moves from one master
 * to another as redis-cli --cluster reshard moves it (SETSLOT IMPORTING
 * and MIGRATING, the keys MIGRATEd one at a time: the ASK phase, with a
 * script over keys on both sides answered TRYAGAIN; then SETSLOT NODE on
 * every master: the MOVED phase). One local cluster of 3 masters and 3
 * replicas for the whole program; each test moves slots of its own.
 * tests/python/test_redirects.py covers the same ground from Python, with
 * contenders, the shared waiting, inspection and Sentinel. */
#include "cluster_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static hl_cluster *const cl = &hl_group_cluster;

static hilock_client *new_client(int64_t reconnect_ms) {
  hilock_options o = hl_test_options();
  o.reconnect_ms = reconnect_ms;
  return hl_client(cl->url, &o);
}

static int name_slot(const char *name) {
  return hilock__key_slot(name, strlen(name));
}

/* A name (buf) with prefix in a slot no earlier test of this program
 * moved. */
static void fresh_name(const char *prefix, char *buf, size_t n) {
  static int used[HILOCK__SLOTS];
  static int seq;
  for (;;) {
    snprintf(buf, n, "%s%d", prefix, ++seq);
    if (!used[name_slot(buf)]) break;
  }
  used[name_slot(buf)] = 1;
}

/* ## The migration -------------------------------------------------------- */

typedef struct migration {
  int slot, src, dst, nm;
  int m[HL_CLUSTER_NODES]; /* the masters */
  char *id[HL_CLUSTER_NODES];
  redisContext *r[HL_CLUSTER_NODES];
} migration;

static void mig_open(migration *g, const char *name) {
  memset(g, 0, sizeof(*g));
  g->slot = name_slot(name);
  g->src = hl_cluster_owner(cl, g->slot);
  g->dst = -1;
  assert_true(g->src >= 0);
  for (int i = 0; i < HL_CLUSTER_NODES; i++) {
    redisContext *r = hl_cluster_connect(cl, i);
    redisReply *rep = hl_redis(r, "ROLE");
    int master = rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 &&
                 strcmp(rep->element[0]->str, "master") == 0;
    freeReplyObject(rep);
    if (!master) {
      redisFree(r);
      continue;
    }
    g->m[g->nm] = i;
    g->r[i] = r;
    g->id[i] = hl_cluster_node_id(cl, i);
    if (i != g->src && g->dst < 0) g->dst = i;
    g->nm++;
  }
  assert_int_equal(g->nm, 3);
  assert_true(g->dst >= 0);
}

static void mig_close(migration *g) {
  for (int i = 0; i < HL_CLUSTER_NODES; i++) {
    if (g->r[i] != NULL) redisFree(g->r[i]);
    free(g->id[i]);
  }
}

static void mig_begin(migration *g) {
  hl_redis_ok(g->r[g->dst], "CLUSTER SETSLOT %d IMPORTING %s", g->slot,
              g->id[g->src]);
  hl_redis_ok(g->r[g->src], "CLUSTER SETSLOT %d MIGRATING %s", g->slot,
              g->id[g->dst]);
}

/* Keys of the slot still on the source. */
static long long mig_left(migration *g) {
  return hl_redis_int(g->r[g->src], "CLUSTER COUNTKEYSINSLOT %d", g->slot);
}

/* MIGRATE up to max keys of the slot to the destination, one at a time
 * (max < 0: all); returns how many moved. */
static int mig_move(migration *g, int max) {
  int moved = 0;
  while (max < 0 || moved < max) {
    redisReply *keys =
        hl_redis(g->r[g->src], "CLUSTER GETKEYSINSLOT %d 1", g->slot);
    assert_int_equal(keys->type, REDIS_REPLY_ARRAY);
    if (keys->elements == 0) {
      freeReplyObject(keys);
      break;
    }
    hl_redis_ok(g->r[g->src], "MIGRATE 127.0.0.1 %d %b 0 5000",
                cl->node[g->dst].port, keys->element[0]->str,
                keys->element[0]->len);
    freeReplyObject(keys);
    moved++;
  }
  return moved;
}

/* Every key left, then SETSLOT NODE on the destination, the source and the
 * other master (a node that learns it lost a slot deletes the keys it still
 * has there), and wait until every node names the destination. */
static void mig_finish(migration *g) {
  mig_move(g, -1);
  hl_redis_ok(g->r[g->dst], "CLUSTER SETSLOT %d NODE %s", g->slot,
              g->id[g->dst]);
  hl_redis_ok(g->r[g->src], "CLUSTER SETSLOT %d NODE %s", g->slot,
              g->id[g->dst]);
  for (int k = 0; k < g->nm; k++)
    if (g->m[k] != g->src && g->m[k] != g->dst)
      hl_redis_ok(g->r[g->m[k]], "CLUSTER SETSLOT %d NODE %s", g->slot,
                  g->id[g->dst]);
  assert_true(hl_cluster_wait_owner(cl, g->slot, g->dst, 10000));
}

/* TRYAGAIN replies the two masters sent so far. */
static long long mig_tryagains(migration *g) {
  return hl_errorstat(g->r[g->src], "errorstat_TRYAGAIN") +
         hl_errorstat(g->r[g->dst], "errorstat_TRYAGAIN");
}

/* ## Lock types -------------------------------------------------------------- */

static hilock_hold *mk_sem(hilock_client *c, const char *n, int64_t ttl) {
  return HILOCK_HOLD(hl_new_semaphore(c, n, 1, ttl));
}
static hilock_hold *mk_seg(hilock_client *c, const char *n, int64_t ttl) {
  return HILOCK_HOLD(hl_new_seg(c, n, 1, ttl));
}
/* Two names in the slot of n: the hash tag of hilock:{n}b}:lock is n. */
static hilock_hold *mk_multi(hilock_client *c, const char *n, int64_t ttl) {
  char second[96];
  const char *names[2] = {n, second};
  snprintf(second, sizeof(second), "%s}b", n);
  return HILOCK_HOLD(hl_new_multi(c, names, 2, ttl));
}

typedef struct family {
  const char *what;
  hl_hold_maker *make;
  const hl_verbs *own;    /* the side under test: it waits, or renews */
  const hl_verbs *holder; /* the side that holds while it waits */
  int renews;
} family;

static const family families[] = {
    {"lock", hl_make_lock, &hl_lock_verbs, &hl_lock_verbs, 1},
    {"simple lock", hl_make_simple, &hl_simple_verbs, &hl_simple_verbs, 0},
    {"reentrant lock", hl_make_rlock, &hl_rlock_verbs, &hl_rlock_verbs, 1},
    {"read side", hl_make_rwlock, &hl_read_verbs, &hl_write_verbs, 1},
    {"write side", hl_make_rwlock, &hl_write_verbs, &hl_read_verbs, 1},
    {"semaphore", mk_sem, &hl_sem_verbs, &hl_sem_verbs, 1},
    {"fair lock", hl_make_fair, &hl_fair_verbs, &hl_fair_verbs, 1},
    {"sequential lock", hl_make_seq, &hl_seq_verbs, &hl_seq_verbs, 1},
    {"segmented lock", mk_seg, &hl_seg_verbs, &hl_seg_verbs, 1},
    {"multi-key lock", mk_multi, &hl_multi_verbs, &hl_multi_verbs, 1},
};
#define NFAMILIES (sizeof(families) / sizeof(families[0]))

static int set_auto_renew(const family *f, hilock_hold *h, atomic_int *lost) {
  if (f->own->set_auto_renew != NULL)
    return f->own->set_auto_renew(h, 1, 0, hl_count_call, lost);
  return hilock_hold_set_auto_renew(h, 1, 0, hl_count_call, lost);
}

static int own_lost(const family *f, hilock_hold *h) {
  return f->own->lost != NULL ? f->own->lost(h) : hilock_hold_lost(h);
}

static int own_owned(const family *f, hilock_hold *h, int *owned) {
  return f->own->owned != NULL ? f->own->owned(h, owned)
                               : hilock_hold_owned(h, owned);
}

static uint64_t stat_of(hilock_client *c, int failures) {
  hilock_stats s;
  assert_int_equal(hilock_client_stats(c, &s, sizeof(s)), HILOCK_OK);
  return s.renewals + (failures ? s.renewal_failures : 0);
}

/* Poll until the client counted at least want renewals (with failures:
 * renewal rounds, failed or not), 10 s at most. */
static void wait_renewals(hilock_client *c, uint64_t want, int failures) {
  int64_t end = hl_now_ms() + 10000;
  while (stat_of(c, failures) < want) {
    if (hl_now_ms() > end) fail_msg("no renewal within 10 s");
    hl_sleep_ms(10);
  }
}

/* Poll until the client has n threads waiting for a lock, 10 s at most. */
static void wait_waiting(hilock_client *c, int n) {
  int64_t end = hl_now_ms() + 10000;
  while (hilock_client_waiting(c) != n) {
    if (hl_now_ms() > end) fail_msg("the waiter did not wait within 10 s");
    hl_sleep_ms(5);
  }
}

/* A holder of its own client holding a fresh name (prefix), and a second
 * handle h on it of another client, with the name's slot opened for a
 * migration. */
typedef struct held {
  hilock_client *hc, *c;
  hilock_hold *holder, *h;
  migration g;
  char name[64];
} held;

static void held_open(held *s, const family *f, const char *prefix,
                      int64_t h_ttl_ms) {
  s->hc = new_client(15000);
  s->c = new_client(15000);
  fresh_name(prefix, s->name, sizeof(s->name));
  print_message("  %s: %s\n", f->what, s->name);
  s->holder = f->make(s->hc, s->name, 30000);
  s->h = f->make(s->c, s->name, h_ttl_ms);
  assert_hl_ok(f->holder->try_acquire(s->holder),
               hilock_hold_errmsg(s->holder));
  mig_open(&s->g, s->name);
}

static void held_close(held *s) {
  hilock_hold_free(s->holder);
  hilock_hold_free(s->h);
  mig_close(&s->g);
  hilock_client_free(s->hc);
  hilock_client_free(s->c);
}

/* ## A direct BLPOP wait across the migration --------------------------------- */

/* For each type: a holder holds; a waiter of another client blocks in
 * BLPOP on the slot's master (the lone waiter of a client waits direct);
 * the slot migrates key by key and is handed over; the holder releases
 * on the new master. The waiter is granted, woken by the release. */
static void a_direct_waiter_rides_a_slot_migration(void **state) {
  (void)state;
  for (size_t i = 0; i < NFAMILIES; i++) {
    const family *f = &families[i];
    held s;
    hl_waiter w;
    int64_t took;
    held_open(&s, f, "dw-", 30000);
    hl_waiter_run(&w, s.h, f->own, 20000, 1);
    wait_waiting(s.c, 1);
    if (!hl_hub_mode())
      assert_true(hl_wait_info_field(s.g.r[s.g.src], "clients",
                                     "blocked_clients", 1, 10000));
    mig_begin(&s.g);
    assert_true(mig_move(&s.g, -1) > 0);
    mig_finish(&s.g);
    took = hl_release_and_join(&w, s.holder, f->holder);
    assert_hl_ok(w.rc, hilock_hold_errmsg(s.h));
    assert_hl_ok(w.release_rc, hilock_hold_errmsg(s.h));
    /* Woken by the release, not by the holder's 30 s TTL or the 20 s
     * wait: 10 s leaves room for a stalled, loaded machine. */
    assert_i64_between(took, 0, 10000);
    held_close(&s);
  }
}

/* ## The watchdog across the migration ------------------------------------------ */

/* A hold of every renewing type, all under one hash tag (one batch script
 * renews them on the slot's master), TTL 1.2 s renewed every 0.4 s, while
 * the slot migrates: a renewal round with the keys split (answered
 * TRYAGAIN for the holds whose keys are split; retried within validity),
 * two with every key on the importing node (ASK), two after the hand-over
 * (MOVED). None is reported lost; all are still owned. */
static void the_watchdog_renews_every_type_through_a_slot_migration(
    void **state) {
  hilock_client *c = new_client(15000);
  hilock_hold *h[NFAMILIES];
  atomic_int lost = 0;
  int n = 0;
  char base[32];
  migration g;
  uint64_t r;
  (void)state;
  fresh_name("wd-", base, sizeof(base));
  for (size_t i = 0; i < NFAMILIES; i++) {
    char name[64];
    if (!families[i].renews) continue;
    snprintf(name, sizeof(name), "%s}%zu", base, i);
    h[n] = families[i].make(c, name, 1200);
    assert_hl_ok(set_auto_renew(&families[i], h[n], &lost),
                 hilock_hold_errmsg(h[n]));
    assert_hl_ok(families[i].own->try_acquire(h[n]), hilock_hold_errmsg(h[n]));
    n++;
  }
  mig_open(&g, base);
  mig_begin(&g);
  assert_int_equal(mig_move(&g, 1), 1);
  assert_true(mig_left(&g) > 0);
  r = stat_of(c, 1);
  wait_renewals(c, r + 1, 1);
  assert_true(mig_move(&g, -1) > 0);
  r = stat_of(c, 0);
  wait_renewals(c, r + 2 * (uint64_t)n, 0);
  mig_finish(&g);
  r = stat_of(c, 0);
  wait_renewals(c, r + 2 * (uint64_t)n, 0);
  assert_int_equal(atomic_load(&lost), 0);
  n = 0;
  for (size_t i = 0; i < NFAMILIES; i++) {
    int owned = 0;
    if (!families[i].renews) continue;
    assert_false(own_lost(&families[i], h[n]));
    assert_hl_ok(own_owned(&families[i], h[n], &owned),
                 hilock_hold_errmsg(h[n]));
    assert_true(owned);
    assert_hl_ok(families[i].own->release(h[n]), hilock_hold_errmsg(h[n]));
    hilock_hold_free(h[n]);
    n++;
  }
  mig_close(&g);
  hilock_client_free(c);
}

/* ## TRYAGAIN within the caller's time ------------------------------------------ */

static const family *family_named(const char *what) {
  for (size_t i = 0; i < NFAMILIES; i++)
    if (strcmp(families[i].what, what) == 0) return &families[i];
  fail_msg("no family %s", what);
  return NULL;
}

/* A slot left half-moved (every key on the importing node, not handed
 * over) longer than the client's reconnect budget (0.5 s): an acquire with
 * 20 s to wait keeps retrying TRYAGAIN and is granted once the slot is
 * handed over, instead of failing on a state the caller's time covers. */
static void an_ASK_phase_longer_than_the_reconnect_budget_is_waited_out(
    void **state) {
  static const char *const which[] = {"lock", "multi-key lock", "fair lock"};
  (void)state;
  for (size_t i = 0; i < sizeof(which) / sizeof(which[0]); i++) {
    const family *f = family_named(which[i]);
    hilock_client *c = new_client(500);
    hilock_hold *h;
    hl_waiter w;
    migration g;
    char name[64];
    long long before;
    int64_t end;
    fresh_name("lp-", name, sizeof(name));
    print_message("  %s: %s\n", f->what, name);
    h = f->make(c, name, 10000);
    /* A grant and a release leave the name's counters behind. */
    assert_hl_ok(f->own->try_acquire(h), hilock_hold_errmsg(h));
    assert_hl_ok(f->own->release(h), hilock_hold_errmsg(h));
    mig_open(&g, name);
    mig_begin(&g);
    assert_true(mig_move(&g, -1) > 0);
    before = mig_tryagains(&g);
    hl_waiter_run(&w, h, f->own, 20000, 1);
    /* 12 TRYAGAIN replies: over 1.5 s of the router's back-off (10 ms
     * doubling to 250 ms), three times the reconnect budget. */
    end = hl_now_ms() + 20000;
    while (mig_tryagains(&g) < before + 12 && hl_waiter_done_at(&w) == 0 &&
           hl_now_ms() < end)
      hl_sleep_ms(10);
    mig_finish(&g);
    hl_waiter_join(&w);
    assert_hl_ok(w.rc, hilock_hold_errmsg(h));
    hilock_hold_free(h);
    mig_close(&g);
    hilock_client_free(c);
  }
}

/* With the slot's keys split between two masters, an acquire with 1 s to
 * wait (reconnect budget 15 s) ends when its time does and reports
 * HILOCK_BUSY (not acquired in time), not the cluster's TRYAGAIN. */
static void an_acquire_whose_time_ends_with_keys_split_is_BUSY(void **state) {
  static const char *const which[] = {"lock", "multi-key lock", "semaphore",
                                      "fair lock"};
  (void)state;
  for (size_t i = 0; i < sizeof(which) / sizeof(which[0]); i++) {
    const family *f = family_named(which[i]);
    held s;
    int64_t t0, took;
    int rc;
    held_open(&s, f, "sp-", 10000);
    mig_begin(&s.g);
    assert_int_equal(mig_move(&s.g, 1), 1);
    assert_true(mig_left(&s.g) > 0);
    t0 = hl_now_ms();
    rc = f->own->acquire(s.h, 1000);
    took = hl_now_ms() - t0;
    mig_finish(&s.g);
    assert_hl_ok(f->holder->release(s.holder), hilock_hold_errmsg(s.holder));
    if (rc != HILOCK_BUSY)
      fail_msg("%s: acquire gave %d (%s) after %lld ms, not HILOCK_BUSY",
               f->what, rc, hilock_hold_errmsg(s.h), (long long)took);
    /* Bounded by the 1 s wait, not the 15 s budget: 5 s leaves room for
     * a stalled, loaded machine. */
    assert_i64_between(took, 900, 6000);
    held_close(&s);
  }
}

/* ## A failover during a direct wait ------------------------------------------- */

/* A direct waiter blocked in BLPOP on a held lock's slot master; the
 * master's replica takes over (CLUSTER FAILOVER: the old master, still
 * running, turns replica and unblocks its blocked clients with an
 * UNBLOCKED error); the holder releases on the new master. The waiter
 * gets the lock, woken, with no error. */
static void a_direct_waiter_rides_a_manual_failover(void **state) {
  hilock_client *hc = new_client(15000), *wc = new_client(15000);
  hilock_lock *holder, *waiting;
  redisContext *m, *rep;
  hl_waiter w;
  char name[64], key[96];
  int master, replica;
  int64_t took, end;
  (void)state;
  assert_true(hl_cluster_wait_ok(cl, 20000));
  fresh_name("fo-", name, sizeof(name));
  snprintf(key, sizeof(key), "hilock:{%s}:lock", name);
  master = hl_cluster_owner(cl, name_slot(name));
  replica = hl_cluster_replica_of(cl, master);
  assert_true(master >= 0 && replica >= 0);
  holder = hl_new_lock(hc, name, 30000);
  waiting = hl_new_lock(wc, name, 30000);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(holder)), hilock_hold_errmsg(HILOCK_HOLD(holder)));
  rep = hl_cluster_connect(cl, replica);
  hl_redis_ok(rep, "READONLY");
  end = hl_now_ms() + 5000;
  while (!hl_redis_exists(rep, key, strlen(key))) {
    if (hl_now_ms() > end) fail_msg("the grant did not reach the replica");
    hl_sleep_ms(5);
  }
  hl_waiter_run(&w, HILOCK_HOLD(waiting), &hl_lock_verbs, 20000, 1);
  wait_waiting(wc, 1);
  m = hl_cluster_connect(cl, master);
  if (!hl_hub_mode())
    assert_true(hl_wait_info_field(m, "clients", "blocked_clients", 1, 10000));
  hl_redis_ok(rep, "CLUSTER FAILOVER");
  assert_true(hl_cluster_wait_owner(cl, name_slot(name), replica, 20000));
  took = hl_release_and_join(&w, HILOCK_HOLD(holder), &hl_lock_verbs);
  assert_hl_ok(w.rc, hilock_hold_errmsg(HILOCK_HOLD(waiting)));
  /* Woken by the release, not by the 30 s TTL or the 20 s wait: 10 s
   * leaves room for a stalled, loaded machine. */
  assert_i64_between(took, 0, 10000);
  redisFree(m);
  redisFree(rep);
  hl_holds_free(HILOCK_HOLD(holder), HILOCK_HOLD(waiting));
  hilock_client_free(hc);
  hilock_client_free(wc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_direct_waiter_rides_a_slot_migration),
      cmocka_unit_test(the_watchdog_renews_every_type_through_a_slot_migration),
      cmocka_unit_test(
          an_ASK_phase_longer_than_the_reconnect_budget_is_waited_out),
      cmocka_unit_test(an_acquire_whose_time_ends_with_keys_split_is_BUSY),
      cmocka_unit_test(a_direct_waiter_rides_a_manual_failover),
  };
  return cmocka_run_group_tests(tests, hl_cluster_group_setup,
                                hl_cluster_group_teardown);
}
