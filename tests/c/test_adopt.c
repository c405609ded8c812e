/* Handing a grant over: hilock_hold_export and hilock_client_adopt, for
 * every family whose holder is a token, in this process and in a forked
 * child; what is refused (reentrant and read-write locks, damaged text,
 * another key prefix, a grant that is gone) and that a refusal leaves the
 * lock as it was. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef hl_fixture fixture;

#define TEXT_MAX 8192

/* One family: a new handle on name, acquired. */
typedef struct family {
  const char *what;
  hilock_hold *(*make)(hilock_client *c, const char *name, int64_t ttl_ms);
  int has_ttl;
} family;

static hilock_hold *make_lease(hilock_client *c, const char *n, int64_t ttl) {
  hilock_lock *l = NULL;
  assert_hl_ok(hilock_lock_new_lease(c, n, strlen(n), ttl, &l),
               hilock_client_errmsg(c));
  return HILOCK_HOLD(l);
}
static hilock_hold *make_multi(hilock_client *c, const char *n, int64_t ttl) {
  char a[64], b[64];
  const char *names[2] = {a, b};
  snprintf(a, sizeof(a), "%s-a", n);
  snprintf(b, sizeof(b), "%s-b", n);
  return HILOCK_HOLD(hl_new_multi(c, names, 2, ttl));
}
static hilock_hold *make_seg(hilock_client *c, const char *n, int64_t ttl) {
  return HILOCK_HOLD(hl_new_seg(c, n, 4, ttl));
}
static hilock_hold *make_sem(hilock_client *c, const char *n, int64_t ttl) {
  return HILOCK_HOLD(hl_new_semaphore(c, n, 2, ttl));
}

static const family families[] = {
    {"lock", hl_make_lock, 1},      {"lease", make_lease, 1},
    {"simple", hl_make_simple, 0},  {"fair", hl_make_fair, 1},
    {"sequential", hl_make_seq, 1}, {"multi", make_multi, 1},
    {"segmented", make_seg, 1},     {"semaphore", make_sem, 1},
};
#define NFAMILIES (sizeof(families) / sizeof(families[0]))

static void export_ok(hilock_hold *h, char *text, size_t *len) {
  assert_hl_ok(hilock_hold_export(h, text, TEXT_MAX, len),
               hilock_hold_errmsg(h));
  assert_int_equal(strlen(text), *len);
  assert_memory_equal(text, "hilock2:", 8);
}

/* A new lock on name, acquired, its grant exported into text. */
static hilock_lock *exported_lock(hilock_client *c, const char *name,
                                  int64_t ttl_ms, char *text, size_t *len) {
  hilock_lock *l = hl_new_lock(c, name, ttl_ms);
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(l), 0), hilock_hold_errmsg(HILOCK_HOLD(l)));
  export_ok(HILOCK_HOLD(l), text, len);
  return l;
}

/* The grant that text names, adopted by c. */
static hilock_hold *adopt_ok(hilock_client *c, const char *text, size_t len) {
  hilock_hold *a = NULL;
  assert_hl_ok(hilock_client_adopt(c, text, len, &a),
               hilock_client_errmsg(c));
  return a;
}

/* A new lock on name, acquired and handed over to c itself: the adopted
 * hold; *l is the exporter. */
static hilock_hold *adopted_lock(hilock_client *c, const char *name,
                                 int64_t ttl_ms, hilock_lock **l) {
  char text[TEXT_MAX];
  size_t len;
  *l = exported_lock(c, name, ttl_ms, text, &len);
  return adopt_ok(c, text, len);
}

/* Another handle on the same lock is granted at once: nobody holds it. */
static void assert_free(const family *fm, hilock_client *c, const char *name) {
  hilock_hold *probe = fm->make(c, name, 2000);
  int locked = -1;
  assert_hl_ok(hilock_hold_try_acquire(probe), hilock_hold_errmsg(probe));
  assert_hl_ok(hilock_hold_release(probe), hilock_hold_errmsg(probe));
  assert_hl_ok(hilock_hold_locked(probe, &locked), hilock_hold_errmsg(probe));
  assert_int_equal(locked, 0);
  hilock_hold_free(probe);
}

static void every_family_hands_its_grant_over(void **state) {
  fixture *f = *state;
  for (size_t i = 0; i < NFAMILIES; i++) {
    const family *fm = &families[i];
    char name[64], text[TEXT_MAX];
    size_t len = 0;
    hilock_hold *h, *a;
    uint64_t fence;
    int owned = -1;

    print_message("family %s\n", fm->what);
    snprintf(name, sizeof(name), "adopt-%s", fm->what);
    h = fm->make(f->client, name, 5000);
    assert_hl_ok(hilock_hold_acquire(h, 0), hilock_hold_errmsg(h));
    fence = hilock_hold_fence(h);
    export_ok(h, text, &len);
    /* The exporter forgot the grant. */
    assert_int_equal(hilock_hold_validity_ms(h), 0);
    assert_false(hilock_hold_lost(h));
    assert_hl_rc(hilock_hold_release(h), HILOCK_ENOTOWNED,
                 hilock_hold_errmsg(h));

    a = adopt_ok(f->client, text, len);
    assert_non_null(a);
    assert_int_equal(hilock_hold_fence(a), fence);
    assert_true(hilock_hold_validity_ms(a) > 0);
    assert_hl_ok(hilock_hold_owned(a, &owned), hilock_hold_errmsg(a));
    assert_int_equal(owned, 1);
    if (fm->has_ttl) assert_hl_ok(hilock_hold_renew(a), hilock_hold_errmsg(a));
    /* The exporter can do nothing to the adopted grant. */
    assert_hl_rc(hilock_hold_release(h), HILOCK_ENOTOWNED,
                 hilock_hold_errmsg(h));
    assert_hl_ok(hilock_hold_owned(a, &owned), hilock_hold_errmsg(a));
    assert_int_equal(owned, 1);
    assert_hl_ok(hilock_hold_release(a), hilock_hold_errmsg(a));
    assert_false(hilock_hold_lost(a));
    assert_free(fm, f->client, name);
    /* The text is spent: the grant it names is gone. */
    hilock_hold_free(a);
    a = (hilock_hold *)(uintptr_t)1;
    assert_hl_rc(hilock_client_adopt(f->client, text, len, &a),
                 HILOCK_ENOTOWNED, hilock_client_errmsg(f->client));
    assert_null(a);
    hilock_hold_free(h);
  }
}

static void segmented_lock_hands_over_its_segment(void **state) {
  fixture *f = *state;
  hilock_segmented_lock *s = hl_new_seg(f->client, "adopt-seg2", 4, 5000);
  hilock_hold *a;
  char text[TEXT_MAX];
  size_t len, seg;
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(s), 0),
               hilock_hold_errmsg(HILOCK_HOLD(s)));
  seg = hilock_segmented_lock_segment(s);
  export_ok(HILOCK_HOLD(s), text, &len);
  a = adopt_ok(f->client, text, len);
  assert_int_equal(hilock_segmented_lock_segment((hilock_segmented_lock *)a),
                   seg);
  assert_int_equal(
      hilock_segmented_lock_segments((hilock_segmented_lock *)a), 4);
  assert_hl_ok(hilock_hold_release(a), hilock_hold_errmsg(a));
  hl_holds_free(a, HILOCK_HOLD(s));
}

/* ## A forked child adopts ------------------------------------------------ */

typedef struct handed {
  hilock_client *client;
  char text[TEXT_MAX];
  size_t len;
} handed;

static int child_adopts_and_releases(void *arg) {
  handed *hd = arg;
  hilock_hold *a = NULL;
  HL_CHILD_CHECK(hilock_client_adopt(hd->client, hd->text, hd->len, &a) ==
                 HILOCK_OK);
  HL_CHILD_CHECK(hilock_hold_validity_ms(a) > 0);
  HL_CHILD_CHECK(hilock_hold_release(a) == HILOCK_OK);
  hilock_hold_free(a);
  return 0;
}

static void forked_child_adopts_the_parents_grant(void **state) {
  fixture *f = *state;
  handed hd;
  hilock_lock *l = exported_lock(f->client, "adopt-fork", 5000, hd.text,
                                 &hd.len);
  int status;
  hd.client = f->client;
  status = hl_wait_child(hl_fork_run(child_adopts_and_releases, &hd), 5000);
  assert_int_equal(status, 0);
  assert_false(hl_redis_exists(f->redis, "hilock:{adopt-fork}:lock", 24));
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(l)), 0);
  assert_false(hilock_hold_lost(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
}

/* ## Refusals ----------------------------------------------------------- */

static void a_grant_gone_before_adoption_is_not_owned(void **state) {
  fixture *f = *state;
  hilock_hold *a = NULL;
  char text[TEXT_MAX];
  size_t len;
  hilock_lock *l = exported_lock(f->client, "adopt-gone", 5000, text, &len);
  int deleted = 0;
  assert_hl_ok(hilock_lock_force_release(l, &deleted),
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_true(deleted);
  assert_hl_rc(hilock_client_adopt(f->client, text, len, &a),
               HILOCK_ENOTOWNED, hilock_client_errmsg(f->client));
  assert_null(a);
  assert_substr(hilock_client_errmsg(f->client), "gone");
  /* Taken by another owner meanwhile: not ours either. */
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(l), 0), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_client_adopt(f->client, text, len, &a),
               HILOCK_ENOTOWNED, hilock_client_errmsg(f->client));
  assert_null(a);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
}

static void an_adopted_grant_deleted_later_is_reported_lost(void **state) {
  fixture *f = *state;
  hilock_lock *l;
  hilock_hold *a = adopted_lock(f->client, "adopt-later", 5000, &l);
  int owned = -1;
  hl_redis_ok(f->redis, "DEL hilock:{adopt-later}:lock");
  assert_hl_ok(hilock_hold_owned(a, &owned), hilock_hold_errmsg(a));
  assert_int_equal(owned, 0);
  assert_true(hilock_hold_lost(a));
  assert_int_equal(hilock_hold_validity_ms(a), 0);
  hl_holds_free(a, HILOCK_HOLD(l));
}

static void assert_refused(hilock_client *c, const char *text, size_t len) {
  hilock_hold *a = (hilock_hold *)(uintptr_t)1;
  assert_hl_rc(hilock_client_adopt(c, text, len, &a), HILOCK_EINVAL,
               hilock_client_errmsg(c));
  assert_null(a);
}

static void damaged_or_foreign_text_is_invalid(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "adopt-bad", 5000);
  hilock_client *other;
  hilock_options o = hl_test_options();
  char text[TEXT_MAX], copy[TEXT_MAX];
  size_t len, i;
  char *token;
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(l), 0), hilock_hold_errmsg(HILOCK_HOLD(l)));
  token = strdup(hilock_hold_token(HILOCK_HOLD(l)));
  /* A copy of the text is exported: then this handle has it no more. */
  {
    hilock_lock *m = hl_new_lock(f->client, "adopt-bad2", 5000);
    assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(m), 0),
                 hilock_hold_errmsg(HILOCK_HOLD(m)));
    export_ok(HILOCK_HOLD(m), text, &len);
    hilock_hold_free(HILOCK_HOLD(m));
  }
  assert_refused(f->client, NULL, 0);
  assert_refused(f->client, "", 0);
  assert_refused(f->client, "hilock2:", 8);
  assert_refused(f->client, "garbage", 7);
  assert_refused(f->client, "hilock3:AAAA", 12);
  assert_refused(f->client, "hilock1:AAAA", 12);
  /* Every truncation. */
  for (i = 0; i < len; i++) assert_refused(f->client, text, i);
  /* One character changed anywhere after the version. */
  for (i = 8; i < len; i++) {
    memcpy(copy, text, len + 1);
    copy[i] = copy[i] == 'A' ? 'B' : 'A';
    assert_refused(f->client, copy, len);
  }
  /* Padding or a character outside base64url. */
  memcpy(copy, text, len);
  memcpy(copy + len, "==", 3);
  assert_refused(f->client, copy, len + 2);
  memcpy(copy, text, len + 1);
  copy[len - 1] = '+';
  assert_refused(f->client, copy, len);
  /* A client with another key prefix: another deployment's grant. */
  o.key_prefix = "other:";
  other = hl_client(f->server.url, &o);
  assert_refused(other, text, len);
  assert_substr(hilock_client_errmsg(other), "prefix");
  hilock_client_free(other);
  /* None of it touched the held lock. */
  hl_assert_hold_value(f->redis, HILOCK_HOLD(l), token);
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(l)) > 0);
  /* The intact text still adopts. */
  {
    hilock_hold *a = NULL;
    assert_hl_ok(hilock_client_adopt(f->client, text, len, &a),
                 hilock_client_errmsg(f->client));
    assert_hl_ok(hilock_hold_release(a), hilock_hold_errmsg(a));
    hilock_hold_free(a);
  }
  free(token);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
}

static void a_small_buffer_changes_nothing(void **state) {
  fixture *f = *state;
  hilock_lock *l = hl_new_lock(f->client, "adopt-buf", 5000);
  char small[8], text[TEXT_MAX];
  size_t len = 0, need;
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(l), 0), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_hold_export(HILOCK_HOLD(l), NULL, 0, &len),
               HILOCK_EINVAL, hilock_hold_errmsg(HILOCK_HOLD(l)));
  need = len;
  assert_true(need > 8);
  assert_hl_rc(hilock_hold_export(HILOCK_HOLD(l), small, sizeof(small), &len),
               HILOCK_EINVAL, hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_hold_export(HILOCK_HOLD(l), text, need, &len),
               HILOCK_EINVAL, hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(l)) > 0);
  assert_hl_ok(hilock_hold_export(HILOCK_HOLD(l), text, need + 1, &len),
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_int_equal(len, need);
  /* Exported: nothing more to export. */
  assert_hl_rc(hilock_hold_export(HILOCK_HOLD(l), text, TEXT_MAX, &len),
               HILOCK_ENOTOWNED, hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_hold_export(NULL, text, TEXT_MAX, &len), HILOCK_EINVAL,
               "");
  hilock_hold_free(HILOCK_HOLD(l));
}

static void reentrant_and_read_write_locks_refuse(void **state) {
  fixture *f = *state;
  hilock_rlock *r = hl_new_rlock(f->client, "adopt-r", 5000);
  hilock_rwlock *w = hl_new_rwlock(f->client, "adopt-rw", 5000);
  char text[TEXT_MAX];
  size_t len;
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(r), 0), hilock_hold_errmsg(HILOCK_HOLD(r)));
  assert_hl_ok(hilock_rwlock_write_acquire(w, 0), hilock_hold_errmsg(HILOCK_HOLD(w)));
  assert_hl_rc(hilock_hold_export(HILOCK_HOLD(r), text, TEXT_MAX, &len),
               HILOCK_ENOTSUP, hilock_hold_errmsg(HILOCK_HOLD(r)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(r)), "thread id");
  assert_hl_rc(hilock_hold_export(HILOCK_HOLD(w), text, TEXT_MAX, &len),
               HILOCK_ENOTSUP, hilock_hold_errmsg(HILOCK_HOLD(w)));
  /* Still held. */
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(r)) > 0);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(r)), hilock_hold_errmsg(HILOCK_HOLD(r)));
  assert_hl_ok(hilock_rwlock_write_release(w), hilock_hold_errmsg(HILOCK_HOLD(w)));
  hl_holds_free(HILOCK_HOLD(r), HILOCK_HOLD(w));
}

static void an_adopted_grant_auto_renews(void **state) {
  fixture *f = *state;
  /* 500 ms: renewed every ~170 ms, so a renewal may be late by 300 ms on
   * a loaded machine and still keep it. */
  hilock_lock *l;
  hilock_hold *a = adopted_lock(f->client, "adopt-renew", 500, &l);
  int owned = 0;
  assert_hl_ok(hilock_hold_set_auto_renew(a, 1, 0, NULL, NULL),
               hilock_hold_errmsg(a));
  /* Four TTLs: held only if renewed. */
  hl_sleep_ms(2000);
  assert_hl_ok(hilock_hold_owned(a, &owned), hilock_hold_errmsg(a));
  assert_int_equal(owned, 1);
  assert_hl_ok(hilock_hold_release(a), hilock_hold_errmsg(a));
  hl_holds_free(a, HILOCK_HOLD(l));
}

HL_FIXTURE_MAIN("adopt",
      HL_TEST(every_family_hands_its_grant_over),
      HL_TEST(segmented_lock_hands_over_its_segment),
      HL_TEST(forked_child_adopts_the_parents_grant),
      HL_TEST(a_grant_gone_before_adoption_is_not_owned),
      HL_TEST(an_adopted_grant_deleted_later_is_reported_lost),
      HL_TEST(damaged_or_foreign_text_is_invalid),
      HL_TEST(a_small_buffer_changes_nothing),
      HL_TEST(reentrant_and_read_write_locks_refuse),
      HL_TEST(an_adopted_grant_auto_renews))
