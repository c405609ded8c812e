/* Leader election on the C API (hilock/election.h): campaign, leader,
 * proclaim, observe and resign; the lead's renewal and loss; the
 * arguments refused. Processes contending and failing leaders are in
 * tests/python/test_election.py. */
#include "test_util.h"

#include <pthread.h>
#include <stdlib.h>

typedef hl_fixture fixture;

#define EKEY(n) "hilock:{" n "}:elect"

static hilock_election *new_election(hilock_client *c, const char *name,
                                     int64_t ttl_ms) {
  hilock_election *e = NULL;
  assert_hl_ok(hilock_election_new(c, name, strlen(name), ttl_ms, &e),
               hilock_client_errmsg(c));
  return e;
}

/* The leader as a reader sees it: its fence, and its value in buf. */
static uint64_t leader_of(hilock_election *r, char *buf, size_t cap) {
  uint64_t fence = 1;
  size_t len = 0;
  const char *v;
  assert_hl_ok(hilock_election_leader(r, &fence),
               hilock_hold_errmsg(HILOCK_HOLD(r)));
  v = hilock_election_value(r, &len);
  assert_true(len < cap);
  memcpy(buf, v, len);
  buf[len] = '\0';
  return fence;
}

static void campaign_leader_proclaim_resign(void **state) {
  fixture *f = *state;
  hilock_election *a = new_election(f->client, "e", 5000);
  hilock_election *b = new_election(f->client, "e", 5000);
  hilock_election *r = new_election(f->client, "e", 5000);
  char buf[64];
  uint64_t fence;

  assert_int_equal(leader_of(r, buf, sizeof(buf)), 0);
  assert_string_equal(buf, "");
  assert_hl_ok(hilock_election_campaign(a, "node-a", 6, 0),
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  fence = hilock_hold_fence(HILOCK_HOLD(a));
  assert_true(fence > 0);
  assert_int_equal(leader_of(r, buf, sizeof(buf)), fence);
  assert_string_equal(buf, "node-a");
  /* Another campaigner does not lead while a leads. */
  assert_int_equal(hilock_election_campaign(b, "node-b", 6, 0), HILOCK_BUSY);
  assert_int_equal(hilock_election_campaign(a, "again", 5, 0), HILOCK_EINVAL);
  /* Proclaim changes the value, not the lead or its fence. */
  assert_hl_ok(hilock_election_proclaim(a, "node-a2", 7),
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(leader_of(r, buf, sizeof(buf)), fence);
  assert_string_equal(buf, "node-a2");
  /* The lead renews as a lock does; a renewal pushes the hash's TTL. */
  assert_hl_ok(hilock_hold_renew(HILOCK_HOLD(a)),
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_true(hl_redis_pttl(f->redis, EKEY("e"), strlen(EKEY("e"))) > 4000);
  assert_int_equal(hilock_hold_extend(HILOCK_HOLD(a), 1000, 0),
                   HILOCK_ENOTSUP);
  assert_hl_ok(hilock_election_resign(a), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(leader_of(r, buf, sizeof(buf)), 0);
  assert_false(hl_redis_exists(f->redis, EKEY("e"), strlen(EKEY("e"))));
  /* The next leader's fence is higher. */
  assert_hl_ok(hilock_election_campaign(b, "node-b", 6, 0),
               hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_true(hilock_hold_fence(HILOCK_HOLD(b)) > fence);
  assert_hl_ok(hilock_election_resign(b), hilock_hold_errmsg(HILOCK_HOLD(b)));
  hilock_hold_free(HILOCK_HOLD(a));
  hilock_hold_free(HILOCK_HOLD(b));
  hilock_hold_free(HILOCK_HOLD(r));
}

typedef struct observed {
  hilock_election *r;
  int rc;
  uint64_t fence;
  char value[64];
} observed;

static void *observe_once(void *arg) {
  observed *o = arg;
  size_t len = 0;
  const char *v;
  o->rc = hilock_election_observe(o->r, 10000, &o->fence);
  v = hilock_election_value(o->r, &len);
  if (len < sizeof(o->value)) {
    memcpy(o->value, v, len);
    o->value[len] = '\0';
  }
  return NULL;
}

static void observe_waits_for_a_change(void **state) {
  fixture *f = *state;
  hilock_election *a = new_election(f->client, "o", 5000);
  observed o = {new_election(f->client, "o", 5000), -100, 0, ""};
  uint64_t fence = 0;
  pthread_t t;

  /* Nobody leads and nothing changes: BUSY after the wait. */
  assert_int_equal(hilock_election_observe(o.r, 50, &fence), HILOCK_BUSY);
  assert_int_equal(fence, 0);
  /* A waiting observer is woken by the campaign's message. */
  assert_int_equal(pthread_create(&t, NULL, observe_once, &o), 0);
  hl_sleep_ms(100);
  assert_hl_ok(hilock_election_campaign(a, "x", 1, 0),
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  pthread_join(t, NULL);
  assert_hl_ok(o.rc, hilock_hold_errmsg(HILOCK_HOLD(o.r)));
  assert_int_equal(o.fence, hilock_hold_fence(HILOCK_HOLD(a)));
  assert_string_equal(o.value, "x");
  /* Seen: no change, no return; a proclaim is one. */
  assert_int_equal(hilock_election_observe(o.r, 50, &fence), HILOCK_BUSY);
  assert_int_equal(pthread_create(&t, NULL, observe_once, &o), 0);
  hl_sleep_ms(100);
  assert_hl_ok(hilock_election_proclaim(a, "y", 1),
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  pthread_join(t, NULL);
  assert_hl_ok(o.rc, hilock_hold_errmsg(HILOCK_HOLD(o.r)));
  assert_string_equal(o.value, "y");
  /* A resignation without a successor is no leader to report. */
  assert_hl_ok(hilock_election_resign(a), hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(hilock_election_observe(o.r, 100, &fence), HILOCK_BUSY);
  hilock_hold_free(HILOCK_HOLD(a));
  hilock_hold_free(HILOCK_HOLD(o.r));
}

static void a_lost_lead_is_reported(void **state) {
  fixture *f = *state;
  hilock_election *a = new_election(f->client, "l", 5000);
  int owned = 1;
  assert_hl_ok(hilock_election_campaign(a, "", 0, 0),
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(a), &owned),
               hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_int_equal(owned, 1);
  hl_redis_ok(f->redis, "DEL %s", EKEY("l"));
  assert_int_equal(hilock_election_proclaim(a, "z", 1), HILOCK_ENOTOWNED);
  assert_true(hilock_hold_lost(HILOCK_HOLD(a)));
  assert_int_equal(hilock_hold_renew(HILOCK_HOLD(a)), HILOCK_ENOTOWNED);
  assert_int_equal(hilock_election_resign(a), HILOCK_ENOTOWNED);
  hilock_hold_free(HILOCK_HOLD(a));
}

static void bad_arguments_are_einval(void **state) {
  fixture *f = *state;
  hilock_election *e = NULL;
  char *big = malloc(HILOCK_ELECTION_VALUE_MAX + 1);
  uint64_t fence = 7;
  size_t len = 9;
  assert_non_null(big);
  memset(big, 'v', HILOCK_ELECTION_VALUE_MAX + 1);
  assert_int_equal(hilock_election_new(NULL, "n", 1, 1000, &e), HILOCK_EINVAL);
  assert_int_equal(hilock_election_new(f->client, "n", 1, 1000, NULL),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_election_new(f->client, "", 0, 1000, &e),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_election_new(f->client, "n", 1, 0, &e),
                   HILOCK_EINVAL);
  assert_null(e);
  assert_int_equal(hilock_election_set_value(NULL, "v", 1), HILOCK_EINVAL);
  assert_int_equal(hilock_election_proclaim(NULL, "v", 1), HILOCK_EINVAL);
  assert_int_equal(hilock_election_leader(NULL, &fence), HILOCK_EINVAL);
  assert_int_equal(fence, 0);
  assert_int_equal(hilock_election_observe(NULL, 0, &fence), HILOCK_EINVAL);
  assert_string_equal(hilock_election_value(NULL, &len), "");
  assert_int_equal(len, 0);
  e = new_election(f->client, "n", 1000);
  assert_int_equal(hilock_election_leader(e, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_election_observe(e, -5, &fence), HILOCK_EINVAL);
  assert_int_equal(hilock_election_set_value(e, NULL, 3), HILOCK_EINVAL);
  assert_int_equal(
      hilock_election_set_value(e, big, HILOCK_ELECTION_VALUE_MAX + 1),
      HILOCK_EINVAL);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(e)), "the limit is 65536");
  /* Not leading: nothing to proclaim. */
  assert_int_equal(hilock_election_proclaim(e, "v", 1), HILOCK_ENOTOWNED);
  /* The largest value leads and reads back whole. */
  assert_hl_ok(hilock_election_campaign(e, big, HILOCK_ELECTION_VALUE_MAX, 0),
               hilock_hold_errmsg(HILOCK_HOLD(e)));
  assert_hl_ok(hilock_election_leader(e, &fence),
               hilock_hold_errmsg(HILOCK_HOLD(e)));
  hilock_election_value(e, &len);
  assert_int_equal(len, HILOCK_ELECTION_VALUE_MAX);
  assert_hl_ok(hilock_election_resign(e), hilock_hold_errmsg(HILOCK_HOLD(e)));
  hilock_hold_free(HILOCK_HOLD(e));
  free(big);
}

HL_FIXTURE_MAIN("election",
      HL_TEST(campaign_leader_proclaim_resign),
      HL_TEST(observe_waits_for_a_change),
      HL_TEST(a_lost_lead_is_reported),
      HL_TEST(bad_arguments_are_einval))
