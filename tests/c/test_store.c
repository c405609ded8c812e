/* The fenced store (hilock/store.h) against a real server: fences compared
 * on every access, records beside the data, refusals that change nothing,
 * the record's lifetime, bad input, threads and a restart with AOF. */
#include "test_util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hilock/store.h"

typedef hl_fixture fixture;

#define K(s) (s), strlen(s)

static hilock_store *new_store(hilock_client *c, int64_t linger_ms,
                               size_t max_value) {
  hilock_store_options o = {linger_ms, max_value};
  hilock_store *s = NULL;
  assert_hl_ok(hilock_store_new(c, &o, &s), hilock_client_errmsg(c));
  assert_non_null(s);
  return s;
}

static char *get(hilock_store *s, const char *key, uint64_t fence) {
  char *v = (char *)1;
  size_t n = 99;
  assert_hl_ok(hilock_store_get(s, K(key), fence, &v, &n),
               hilock_store_errmsg(s));
  if (v == NULL) assert_int_equal(n, 0);
  else assert_int_equal(strlen(v), n);
  return v;
}

/* The raw value of key, as another client sees it. */
static void assert_raw(redisContext *redis, const char *key, const char *want) {
  char *v = hl_redis_get(redis, key, strlen(key));
  assert_non_null(v);
  assert_string_equal(v, want);
  free(v);
}

static void reads_writes_and_counts_with_a_fence(void **state) {
  fixture *f = *state;
  hilock_store *s = new_store(f->client, 0, 0);
  int64_t n = 0;
  uint64_t fence = 1;
  int deleted = -1;
  char *v;

  assert_null(get(s, "stock", 100));
  assert_hl_ok(hilock_store_fence_of(s, K("stock"), &fence), "");
  assert_int_equal(fence, 100); /* a read touches the key */
  assert_hl_ok(hilock_store_set(s, K("stock"), 100, K("7"), 0), "");
  assert_hl_ok(hilock_store_incrby(s, K("stock"), 100, -2, 0, &n), "");
  assert_int_equal(n, 5);
  v = get(s, "stock", 101);
  assert_string_equal(v, "5");
  hilock_store_value_free(v);
  /* The raw key is a plain string beside hilock:fence:{stock}. */
  assert_raw(f->redis, "stock", "5");
  assert_raw(f->redis, "hilock:fence:{stock}", "101");
  assert_hl_ok(hilock_store_delete(s, K("stock"), 101, &deleted), "");
  assert_int_equal(deleted, 1);
  assert_hl_ok(hilock_store_delete(s, K("stock"), 101, &deleted), "");
  assert_int_equal(deleted, 0);
  assert_hl_ok(hilock_store_fence_of(s, K("stock"), &fence), "");
  assert_int_equal(fence, 101); /* the record outlives the data */
  assert_hl_ok(hilock_store_fence_of(s, K("never"), &fence), "");
  assert_int_equal(fence, 0);
  hilock_store_free(s);
}

static void a_lower_fence_is_refused_and_changes_nothing(void **state) {
  fixture *f = *state;
  hilock_store *s = new_store(f->client, 0, 0);
  char *v = (char *)1;
  size_t n = 9;
  int64_t r = 9;
  int deleted = 9;

  assert_hl_ok(hilock_store_set(s, K("k"), 50, K("new"), 0), "");
  assert_int_equal(hilock_store_get(s, K("k"), 49, &v, &n), HILOCK_ESTALE);
  assert_null(v);
  assert_int_equal(n, 0);
  assert_int_equal(hilock_store_errcode(s), HILOCK_ESTALE);
  assert_substr(hilock_store_errmsg(s), "fence 49 is stale: fence 50");
  assert_int_equal(hilock_store_set(s, K("k"), 1, K("old"), 0), HILOCK_ESTALE);
  assert_int_equal(hilock_store_incrby(s, K("k"), 49, 1, 0, &r), HILOCK_ESTALE);
  assert_int_equal(r, 0);
  assert_int_equal(hilock_store_delete(s, K("k"), 49, &deleted), HILOCK_ESTALE);
  assert_int_equal(deleted, 0);
  assert_raw(f->redis, "k", "new");
  assert_raw(f->redis, "hilock:fence:{k}", "50");
  /* The same fence again is its holder's next call. */
  assert_hl_ok(hilock_store_set(s, K("k"), 50, K("again"), 0), "");
  hilock_store_free(s);
}

static void records_share_the_slot_of_their_key(void **state) {
  fixture *f = *state;
  hilock_store *s = new_store(f->client, 0, 0);
  assert_hl_ok(hilock_store_set(s, K("order:{42}:state"), 3, K("paid"), 0), "");
  assert_true(hl_redis_exists(f->redis, K("hilock:fence:order:{42}:state")));
  assert_hl_ok(hilock_store_set(s, K("a{b"), 3, K("x"), 0), "");
  assert_true(hl_redis_exists(f->redis, K("hilock:fence:{a{b}")));
  hilock_store_free(s);
}

static void the_record_lives_as_long_as_the_data_and_the_linger(void **state) {
  fixture *f = *state;
  hilock_store *s = new_store(f->client, 60000, 0);
  hilock_store *forever = new_store(f->client, -1, 0);
  long long data, rec;
  int64_t n;

  assert_hl_ok(hilock_store_set(s, K("t"), 5, K("v"), 20000), "");
  data = hl_redis_pttl(f->redis, K("t"));
  rec = hl_redis_pttl(f->redis, K("hilock:fence:{t}"));
  assert_true(data > 0 && data <= 20000);
  assert_true(rec > 60000 && rec <= 80000);
  /* No expiry on the data: none on the record. */
  assert_hl_ok(hilock_store_set(s, K("t"), 5, K("v"), 0), "");
  assert_int_equal(hl_redis_pttl(f->redis, K("t")), -1);
  assert_int_equal(hl_redis_pttl(f->redis, K("hilock:fence:{t}")), -1);
  /* incrby without ttl keeps the data's expiry. */
  assert_hl_ok(hilock_store_set(s, K("c"), 5, K("1"), 30000), "");
  assert_hl_ok(hilock_store_incrby(s, K("c"), 5, 1, 0, &n), "");
  assert_true(hl_redis_pttl(f->redis, K("c")) > 0);
  /* Deleted data: the record lingers. */
  assert_hl_ok(hilock_store_delete(s, K("t"), 6, &(int){0}), "");
  rec = hl_redis_pttl(f->redis, K("hilock:fence:{t}"));
  assert_true(rec > 0 && rec <= 60000);
  assert_hl_ok(hilock_store_delete(forever, K("c"), 6, &(int){0}), "");
  assert_int_equal(hl_redis_pttl(f->redis, K("hilock:fence:{c}")), -1);
  hilock_store_free(s);
  hilock_store_free(forever);
}

static void bad_input_is_refused_with_a_specific_error(void **state) {
  fixture *f = *state;
  hilock_store_options big = {-2, 0}, huge = {0, HILOCK_STORE_VALUE_MAX + 1};
  hilock_store *s = new_store(f->client, 0, 16), *t = (hilock_store *)1;
  char *v = NULL, *long_key;
  size_t n;
  int64_t r;
  uint64_t fence;

  assert_int_equal(hilock_store_new(NULL, NULL, &t), HILOCK_EINVAL);
  assert_null(t);
  assert_int_equal(hilock_store_new(f->client, NULL, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_store_new(f->client, &big, &t), HILOCK_EINVAL);
  assert_substr(hilock_client_errmsg(f->client), "linger_ms");
  assert_int_equal(hilock_store_new(f->client, &huge, &t), HILOCK_EINVAL);
  assert_int_equal(hilock_store_get(NULL, K("k"), 1, &v, &n), HILOCK_EINVAL);
  assert_int_equal(hilock_store_get(s, K("k"), 1, NULL, &n), HILOCK_EINVAL);
  assert_int_equal(hilock_store_get(s, NULL, 1, 1, &v, &n), HILOCK_EINVAL);
  assert_substr(hilock_store_errmsg(s), "data key is NULL");
  assert_int_equal(hilock_store_get(s, "", 0, 1, &v, &n), HILOCK_EINVAL);
  assert_int_equal(hilock_store_get(s, K("k"), 0, &v, &n), HILOCK_EINVAL);
  assert_substr(hilock_store_errmsg(s), "fence must be");
  assert_int_equal(hilock_store_get(s, K("k"), HILOCK_STORE_FENCE_MAX + 1, &v, &n),
                   HILOCK_EINVAL);
  assert_int_equal(hilock_store_set(s, K("k"), 1, K("seventeen bytes!!"), 0),
                   HILOCK_EINVAL);
  assert_substr(hilock_store_errmsg(s), "limit is 16");
  assert_int_equal(hilock_store_set(s, K("k"), 1, NULL, 3, 0), HILOCK_EINVAL);
  assert_int_equal(hilock_store_set(s, K("k"), 1, K("v"), -5), HILOCK_EINVAL);
  assert_int_equal(hilock_store_incrby(s, K("k"), 1, 1, 0, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_store_delete(s, K("k"), 1, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_store_fence_of(s, K("k"), NULL), HILOCK_EINVAL);
  long_key = malloc(HILOCK_STORE_KEY_MAX + 1);
  memset(long_key, 'x', HILOCK_STORE_KEY_MAX + 1);
  assert_int_equal(hilock_store_get(s, long_key, HILOCK_STORE_KEY_MAX + 1, 1, &v, &n),
                   HILOCK_EINVAL);
  /* The largest key works, with its odd bytes. */
  long_key[0] = '\0';
  long_key[1] = '\n';
  assert_hl_ok(hilock_store_set(s, long_key, HILOCK_STORE_KEY_MAX, 1, K("v"), 0),
               hilock_store_errmsg(s));
  free(long_key);
  /* Wrong key types: the data key, and its record. */
  hl_redis_int(f->redis, "HSET h a 1");
  assert_int_equal(hilock_store_get(s, K("h"), 1, &v, &n), HILOCK_EWRONGTYPE);
  assert_int_equal(hl_redis_exists(f->redis, K("hilock:fence:{h}")), 0);
  hl_redis_ok(f->redis, "SET hilock:fence:{z} notanumber");
  assert_int_equal(hilock_store_set(s, K("z"), 1, K("v"), 0), HILOCK_EWRONGTYPE);
  assert_int_equal(hl_redis_exists(f->redis, K("z")), 0);
  hl_redis_ok(f->redis, "SET word abc");
  assert_int_equal(hilock_store_incrby(s, K("word"), 1, 1, 0, &r), HILOCK_EREDIS);
  assert_int_equal(hilock_store_fence_of(s, K("word"), &fence), HILOCK_OK);
  assert_int_equal(fence, 0); /* the failed increment touched nothing */
  assert_string_equal(hilock_store_errmsg(NULL), "store is NULL");
  hilock_store_free(NULL);
  hilock_store_free(s);
}

/* Threads sharing one store: each reads its own last error. */
typedef struct thread_arg {
  hilock_store *s;
  int stale;
  int ok;
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *a = p;
  char *v = NULL;
  size_t n;
  for (int i = 0; i < 200; i++) {
    int rc = hilock_store_get(a->s, K("shared"), a->stale ? 1 : 1000, &v, &n);
    hilock_store_value_free(v);
    v = NULL;
    if (a->stale && (rc != HILOCK_ESTALE ||
                     strstr(hilock_store_errmsg(a->s), "fence 1 is") == NULL))
      return NULL;
    if (!a->stale && (rc != HILOCK_OK || hilock_store_errcode(a->s) != HILOCK_OK))
      return NULL;
  }
  a->ok = 1;
  return NULL;
}

static void threads_share_a_store_and_read_their_own_error(void **state) {
  fixture *f = *state;
  hilock_store *s = new_store(f->client, 0, 0);
  pthread_t t[4];
  thread_arg a[4];
  assert_hl_ok(hilock_store_set(s, K("shared"), 1000, K("v"), 0), "");
  for (int i = 0; i < 4; i++) {
    a[i] = (thread_arg){s, i % 2, 0};
    assert_int_equal(pthread_create(&t[i], NULL, thread_main, &a[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    assert_true(a[i].ok);
  }
  hilock_store_free(s);
}

/* A store outlives a closed client safely: its calls say so. */
static void a_closed_client_fails_calls_with_eclosed(void **state) {
  fixture *f = *state;
  hilock_client *c = hl_client(f->server.url, NULL);
  hilock_store *s = new_store(c, 0, 0);
  int64_t n;
  hilock_client_free(c);
  assert_int_equal(hilock_store_incrby(s, K("k"), 1, 1, 0, &n), HILOCK_ECLOSED);
  hilock_store_free(s);
}

/* Fence records survive a restart with appendfsync always. */
static void records_survive_a_restart_with_aof(void **state) {
  static const char *const extra[] = {"--appendonly", "yes", "--appendfsync",
                                      "always", NULL};
  hl_server_opts o = {0};
  hl_server srv;
  hilock_client *c;
  hilock_store *s;
  char *v = NULL;
  size_t n;
  (void)state;
  o.extra = extra;
  assert_int_equal(hl_server_start(&srv, &o), 0);
  c = hl_client(srv.url, NULL);
  s = new_store(c, 0, 0);
  assert_hl_ok(hilock_store_set(s, K("stock"), 900, K("3"), 0), "");
  hilock_store_free(s);
  hilock_client_free(c);
  assert_int_equal(hl_server_restart(&srv), 0);
  c = hl_client(srv.url, NULL);
  s = new_store(c, 0, 0);
  assert_int_equal(hilock_store_get(s, K("stock"), 899, &v, &n), HILOCK_ESTALE);
  v = get(s, "stock", 900);
  assert_string_equal(v, "3");
  hilock_store_value_free(v);
  hilock_store_free(s);
  hilock_client_free(c);
  hl_server_destroy(&srv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(reads_writes_and_counts_with_a_fence, hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(a_lower_fence_is_refused_and_changes_nothing, hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(records_share_the_slot_of_their_key, hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(the_record_lives_as_long_as_the_data_and_the_linger, hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(bad_input_is_refused_with_a_specific_error, hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(threads_share_a_store_and_read_their_own_error, hl_setup, hl_teardown),
      cmocka_unit_test_setup_teardown(a_closed_client_fails_calls_with_eclosed, hl_setup, hl_teardown),
      cmocka_unit_test(records_survive_a_restart_with_aof),
  };
  return cmocka_run_group_tests_name("store", tests, hl_group_setup,
                                     hl_group_teardown);
}
