/* The multi-key lock: every name of a set, or none, in one script. Mostly
 * core/scripts/multilock_*.lua; the keys per name are the expiring lock's
 * (lock.c), so the two interoperate. Waiting, renewal and grant state come
 * from the shared layer; renewal passes all lock keys to the renew script
 * (hold.xkeys). */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "family.h"
#include "holds.h"
#include "script.h"
#include "wait.h"
#include "scripts.h"

static const hilock__family family;

struct hilock_multi_lock {
  hilock__hold h; /* first: grant state and last error */
  size_t n;
  char **names; /* sorted, distinct */
  size_t *namelens;
  /* 4n keys: [0, n) lock keys, [n, 2n) wake lists, [2n, 3n) fence
   * counters, [3n, 4n) lock-delay markers, each in name order (the scripts
   * rely on this layout). */
  char **keys;
  size_t *keylens;
  /* With a lock delay (the hold's delay_ms): the 3n keys of the release
   * (lock keys, wake lists, markers) then the 2n of the renewal (lock
   * keys, markers; h.xkeys while delay_ms > 0); NULL while no delay was
   * set. */
  const char **dkeys;
  size_t *dkeylens;
  uint64_t *fences;
  unsigned char *missing;
  /* Waiting: the wake list of the name that blocked the last attempt. */
  const char *wkey;
  size_t wkeylen;
  size_t wait_idx;
};

/* A short, printable rendering of a name for messages. */
static void show(char *buf, size_t size, const char *name, size_t len) {
  size_t o = 0;
  for (size_t i = 0; i < len && o + 5 < size; i++) {
    unsigned char ch = (unsigned char)name[i];
    if (i >= 40) {
      memcpy(buf + o, "...", 3);
      o += 3;
      break;
    }
    buf[o++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
  }
  buf[o] = '\0';
}

static int cmp_name(const char *a, size_t al, const char *b, size_t bl) {
  int c = memcmp(a, b, al < bl ? al : bl);
  if (c != 0) return c;
  return al < bl ? -1 : al > bl;
}

static void free_parts(hilock_multi_lock *m) {
  if (m->keys != NULL)
    for (size_t i = 0; i < 4 * m->n; i++) free(m->keys[i]);
  free(m->dkeys);
  free(m->dkeylens);
  if (m->names != NULL)
    for (size_t i = 0; i < m->n; i++) free(m->names[i]);
  free(m->keys);
  free(m->keylens);
  free(m->names);
  free(m->namelens);
  free(m->fences);
  free(m->missing);
  free(m);
}

/* Check the arguments; sorted, distinct indexes into names go to *order
 * (malloc'd), their count to *count. Errors are recorded in e. */
static int check_names(hilock__err *e, const char *const *names,
                       const size_t *lens, size_t n, size_t **order,
                       size_t *count) {
  size_t *ix, k = 0;
  if (names == NULL)
    return hilock__set_err(e, HILOCK_EINVAL, "multi-key lock: names is NULL");
  if (n == 0)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "multi-key lock: the set of names is empty");
  if (n > HILOCK_MULTI_LOCK_MAX)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "multi-key lock: %zu names; the limit is %d", n,
                           HILOCK_MULTI_LOCK_MAX);
  for (size_t i = 0; i < n; i++) {
    hilock__err tmp;
    if (names[i] == NULL)
      return hilock__set_err(e, HILOCK_EINVAL,
                             "multi-key lock: name %zu of %zu is NULL", i, n);
    if (hilock__check_name(&tmp, names[i], lens[i]) != HILOCK_OK)
      return hilock__set_err(e, HILOCK_EINVAL, "multi-key lock: name %zu: %s",
                             i, tmp.msg);
  }
  ix = malloc(n * sizeof(*ix));
  if (ix == NULL) return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
  /* Insertion sort (n <= 1024), dropping duplicates. */
  for (size_t i = 0; i < n; i++) {
    size_t j = k;
    int dup = 0;
    while (j > 0) {
      int c = cmp_name(names[ix[j - 1]], lens[ix[j - 1]], names[i], lens[i]);
      if (c == 0) dup = 1;
      if (c <= 0) break;
      j--;
    }
    if (dup) continue;
    memmove(ix + j + 1, ix + j, (k - j) * sizeof(*ix));
    ix[j] = i;
    k++;
  }
  *order = ix;
  *count = k;
  return HILOCK_OK;
}

/* On a cluster every key must be in one slot: name the first two that are
 * not. */
static int check_slots(hilock__err *e, const hilock_multi_lock *m) {
  int s0 = hilock__key_slot(m->keys[0], m->keylens[0]);
  for (size_t i = 1; i < m->n; i++) {
    int s = hilock__key_slot(m->keys[i], m->keylens[i]);
    if (s != s0) {
      char a[48], b[48];
      show(a, sizeof(a), m->names[0], m->namelens[0]);
      show(b, sizeof(b), m->names[i], m->namelens[i]);
      return hilock__set_err(
          e, HILOCK_ECROSSSLOT,
          "names \"%s\" and \"%s\" are in different cluster slots (%d, %d); "
          "give the names a shared hash tag, e.g. \"{acct}:1\" and "
          "\"{acct}:2\"",
          a, b, s0, s);
    }
  }
  return HILOCK_OK;
}

static int run_release(void *arg, hilock__err *e, redisReply **r);

static int multilock_new_len(hilock_client *client, const char *const *names,
                             const size_t *namelens, size_t n, int64_t ttl_ms,
                             hilock_multi_lock **out) {
  hilock__err tmp;
  hilock_multi_lock *m;
  size_t *order = NULL, count = 0;
  int rc;

  if (client == NULL) return HILOCK_EINVAL;
  hilock__clear_err(&tmp);
  if (names != NULL && namelens == NULL)
    rc = hilock__set_err(&tmp, HILOCK_EINVAL,
                         "multi-key lock: name lengths are NULL");
  else
    rc = check_names(&tmp, names, namelens, n, &order, &count);
  if (rc == HILOCK_OK) rc = hilock__check_ttl(&tmp, ttl_ms);
  if (rc != HILOCK_OK) {
    free(order);
    hilock__set_err(hilock__client_err(client), rc, "%s", tmp.msg);
    return rc;
  }
  if (client->rt.closed) {
    free(order);
    return hilock__set_err(hilock__client_err(client), HILOCK_ECLOSED, "client is closed");
  }
  m = calloc(1, sizeof(*m));
  if (m == NULL) {
    free(order);
    return HILOCK_ENOMEM;
  }
  m->n = count;
  m->names = calloc(count, sizeof(*m->names));
  m->namelens = calloc(count, sizeof(*m->namelens));
  m->keys = calloc(4 * count, sizeof(*m->keys));
  m->keylens = calloc(4 * count, sizeof(*m->keylens));
  m->fences = calloc(count, sizeof(*m->fences));
  m->missing = calloc(count, 1);
  if (m->names == NULL || m->namelens == NULL || m->keys == NULL ||
      m->keylens == NULL || m->fences == NULL || m->missing == NULL)
    goto nomem;
  for (size_t i = 0; i < count; i++) {
    const char *name = names[order[i]];
    size_t len = namelens[order[i]];
    m->names[i] = malloc(len + 1);
    if (m->names[i] == NULL) goto nomem;
    memcpy(m->names[i], name, len);
    m->names[i][len] = '\0';
    m->namelens[i] = len;
    m->keys[i] = hilock__key(&client->rt, name, len, "lock", &m->keylens[i]);
    m->keys[count + i] = hilock__key(&client->rt, name, len, "wake", &m->keylens[count + i]);
    m->keys[2 * count + i] =
        hilock__key(&client->rt, name, len, "fence", &m->keylens[2 * count + i]);
    m->keys[3 * count + i] =
        hilock__key(&client->rt, name, len, "delay", &m->keylens[3 * count + i]);
    if (m->keys[i] == NULL || m->keys[count + i] == NULL ||
        m->keys[2 * count + i] == NULL || m->keys[3 * count + i] == NULL)
      goto nomem;
  }
  free(order);
  order = NULL;
  if (hilock__client_is_cluster(client) &&
      (rc = check_slots(&tmp, m)) != HILOCK_OK) {
    free_parts(m);
    return hilock__set_err(hilock__client_err(client), rc, "%s", tmp.msg);
  }
  m->wkey = m->keys[count];
  m->wkeylen = m->keylens[count];
  hilock__hold_init_family(&m->h, client, m->keys[0], m->keylens[0],
                           &hilock__script_multilock_extend, ttl_ms, &family,
                           run_release, m);
  m->h.xkeys = (const char *const *)(m->keys + 1);
  m->h.xkeylens = m->keylens + 1;
  m->h.nxkeys = (int)count - 1;
  *out = m;
  return HILOCK_OK;
nomem:
  free(order);
  free_parts(m);
  return hilock__set_err(hilock__client_err(client), HILOCK_ENOMEM, "out of memory");
}

int hilock_multi_lock_new_len(hilock_client *client, const char *const *names,
                             const size_t *namelens, size_t n, int64_t ttl_ms,
                             hilock_multi_lock **out) {
  HILOCK__CLIENT_CALL(
      client, out, multilock_new_len(client, names, namelens, n, ttl_ms, out));
}

int hilock_multi_lock_new(hilock_client *client, const char *const *names,
                         size_t n, int64_t ttl_ms, hilock_multi_lock **out) {
  size_t stack[16] = {0}, *lens = stack;
  int rc;
  if (out != NULL) *out = NULL;
  if (names == NULL || n == 0 || n > HILOCK_MULTI_LOCK_MAX)
    return hilock_multi_lock_new_len(client, names, stack, n, ttl_ms, out);
  if (n > 16 && (lens = malloc(n * sizeof(*lens))) == NULL)
    return HILOCK_ENOMEM;
  for (size_t i = 0; i < n; i++) lens[i] = names[i] ? strlen(names[i]) : 0;
  rc = hilock_multi_lock_new_len(client, names, lens, n, ttl_ms, out);
  if (lens != stack) free(lens);
  return rc;
}

static void fam_free(void *arg) {
  hilock_multi_lock *m = arg;
  if (m == NULL) return;
  hilock__hold_destroy(&m->h);
  free_parts(m);
}

/* A Redis CROSSSLOT reply: keep Redis's text and add the fix. */
static int crossslot_hint(hilock_multi_lock *m) {
  return hilock__set_err(&m->h.err, HILOCK_ECROSSSLOT,
                         "redis: CROSSSLOT: the names of this multi-key lock "
                         "are in different cluster slots; give the names a "
                         "shared hash tag, e.g. \"{acct}:1\" and \"{acct}:2\"");
}

static int run(hilock_multi_lock *m, const hilock__script *s, int nkeys,
               int nargs, const char **args, const size_t *arglens,
               redisReply **r) {
  int rc = hilock__script_run(m->h.client, &m->h.err, s, nkeys,
                              (const char **)m->keys, m->keylens, nargs, args,
                              arglens, r);
  return rc == HILOCK_ECROSSSLOT ? crossslot_hint(m) : rc;
}

/* Mark the keys listed in r->element[from..] (1-based indexes) missing;
 * returns how many, and the first in *first. */
static size_t mark_missing(hilock_multi_lock *m, const redisReply *r,
                           size_t from, size_t *first) {
  size_t k = 0;
  memset(m->missing, 0, m->n);
  for (size_t i = from; i < r->elements; i++) {
    long long ix = r->element[i]->integer;
    if (ix < 1 || (size_t)ix > m->n) continue;
    if (k++ == 0) *first = (size_t)ix - 1;
    m->missing[ix - 1] = 1;
  }
  return k;
}

static int release_fn(void *x);

/* One grant attempt; *pttl gets the blocking holder's remaining TTL. */
static int attempt(void *arg, int64_t *pttl) {
  hilock_multi_lock *m = arg;
  hilock__hold *h = &m->h;
  char ttl[24], woken[24], delay[24];
  const char *args[5] = {h->owner, ttl, woken, "woken", delay};
  size_t arglens[5];
  /* Rung by a release: the script takes the wake-up (ARGV[4]). */
  int nargs = hilock__attempt_woken() == 2 ? 4 : 3;
  /* The markers every grant checks; a lock delay: ARGV[5] (ARGV[4] other
   * than "woken" when not rung), and the undo deletes the markers with the
   * locks. */
  int delayed = m->h.delay_ms > 0;
  hilock__attempt a;
  redisReply *r;
  uint64_t top = 0;
  int rc, verdict = -1;

  rc = hilock__attempt_begin(h, "this handle already holds the names; "
                                "release them first (the lock is not "
                                "reentrant)");
  if (rc != HILOCK_OK) return rc;
  arglens[0] = HILOCK__TOKEN_LEN;
  arglens[1] = hilock__i64(ttl, h->ttl_ms);
  arglens[2] = hilock__i64(
      woken, hilock__attempt_woken() ? (int64_t)m->wait_idx + 1 : 0);
  arglens[3] = nargs == 4 ? 5 : 1; /* "w": not woken */
  arglens[4] = hilock__i64(delay, m->h.delay_ms);
  /* A late reply: this attempt's names are released behind it. */
  const char *uargs[2] = {h->owner, "delay"};
  size_t uarglens[2] = {HILOCK__TOKEN_LEN, 5};
  hilock__undo undo = {&hilock__script_multilock_release,
                       (int)((delayed ? 3 : 2) * m->n), delayed ? 2 : 1,
                       delayed ? (const char *const *)m->dkeys
                               : (const char *const *)m->keys,
                       delayed ? m->dkeylens : m->keylens, uargs, uarglens,
                       h->ttl_ms, NULL};
  if (delayed) nargs = 5;
  rc = hilock__attempt_run(h, &a, &undo, &hilock__script_multilock_acquire,
                           (int)(4 * m->n),
                           (const char **)m->keys, m->keylens, nargs, args,
                           arglens, &r);
  if (rc == HILOCK_ECROSSSLOT) return crossslot_hint(m);
  if (rc != HILOCK_OK) return rc;
  if (r->type == REDIS_REPLY_ARRAY && r->elements == m->n + 1 &&
      hilock__int_reply(r, 0) && r->element[0]->integer == 1) {
    verdict = 1;
    for (size_t i = 0; i < m->n && a.replicated; i++) {
      m->fences[i] = (uint64_t)r->element[i + 1]->integer;
      if (m->fences[i] > top) top = m->fences[i];
    }
    if (a.replicated) memset(m->missing, 0, m->n);
  } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
             hilock__int_reply(r, 0) && r->element[0]->integer == 0 &&
             r->element[2]->integer >= 1 &&
             (size_t)r->element[2]->integer <= m->n) {
    /* Busy: wait on the first name that is held. */
    verdict = 0;
    m->wait_idx = (size_t)r->element[2]->integer - 1;
    m->wkey = m->keys[m->n + m->wait_idx];
    m->wkeylen = m->keylens[m->n + m->wait_idx];
  }
  return hilock__attempt_end(h, &a, r, verdict, top,
                             verdict == 0 ? r->element[1]->integer : 0, pttl,
                             release_fn, m, "multi-key acquire script");
}

/* The wake list is the one of the name that blocked the last attempt. */
static void acquire_spec(void *arg, hilock__acquire_spec *sp) {
  hilock_multi_lock *m = arg;
  hilock__spec(sp, attempt, m, &m->wkey, &m->wkeylen);
}

static int run_release(void *arg, hilock__err *e, redisReply **r) {
  hilock_multi_lock *m = arg;
  const char *args[2] = {m->h.owner, "delay"};
  size_t arglens[2] = {m->h.ownerlen, 5};
  int rc;
  (void)e; /* run() reports into m->h.err, which is e */
  if (m->h.delay_ms <= 0)
    return run(m, &hilock__script_multilock_release, (int)(2 * m->n), 1, args,
               arglens, r);
  rc = hilock__script_run(m->h.client, &m->h.err,
                          &hilock__script_multilock_release, (int)(3 * m->n),
                          m->dkeys, m->dkeylens, 2, args, arglens, r);
  return rc == HILOCK_ECROSSSLOT ? crossslot_hint(m) : rc;
}

static int release_fn(void *x) {
  hilock_multi_lock *m = x;
  size_t first = 0, nmiss;
  redisReply *r;
  int rc;

  rc = hilock__hold_release(&m->h, run_release, m, &r);
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || !hilock__int_reply(r, 0)) {
    freeReplyObject(r);
    hilock__hold_ended(&m->h, 0);
    return hilock__set_err(&m->h.err, HILOCK_EPROTO,
                           "unexpected reply to the multi-key release script");
  }
  nmiss = mark_missing(m, r, 1, &first);
  freeReplyObject(r);
  hilock__hold_ended(&m->h, nmiss > 0);
  if (nmiss > 0) {
    char a[48];
    show(a, sizeof(a), m->names[first], m->namelens[first]);
    return hilock__set_err(&m->h.err, HILOCK_ENOTOWNED,
                           "release: %zu of %zu names not held by this holder "
                           "(expired or taken by another owner), first \"%s\"; "
                           "those were left alone, the other %zu released",
                           nmiss, m->n, a, m->n - nmiss);
  }
  return HILOCK_OK;
}

static int extend_fn(void *x, int64_t ms, int replace) {
  hilock_multi_lock *m = x;
  char buf[24];
  const char *args[3];
  size_t arglens[3];
  redisReply *r;
  int64_t start;
  int rc;

  rc = hilock__check_ms(&m->h.err, "extension", ms);
  if (rc == HILOCK_OK) rc = hilock__hold_check(&m->h, "extend");
  if (rc != HILOCK_OK) return rc;
  args[0] = m->h.owner;
  arglens[0] = m->h.ownerlen;
  args[1] = buf;
  arglens[1] = hilock__i64(buf, ms);
  args[2] = replace ? "set" : "add";
  arglens[2] = 3;
  start = hilock__now_us();
  if (m->h.delay_ms > 0) {
    rc = hilock__script_run(m->h.client, &m->h.err,
                            &hilock__script_multilock_extend_delay,
                            (int)(2 * m->n), m->dkeys + 3 * m->n,
                            m->dkeylens + 3 * m->n, 3, args, arglens, &r);
    if (rc == HILOCK_ECROSSSLOT) rc = crossslot_hint(m);
  } else {
    rc = run(m, &hilock__script_multilock_extend, (int)m->n, 3, args, arglens,
             &r);
  }
  if (rc == HILOCK_ENOREPLICAS &&
      hilock__extended_unacked(&rc, r, r->type == REDIS_REPLY_INTEGER &&
                                           r->integer > 0))
    return rc;
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_INTEGER) {
    rc = hilock__set_err(&m->h.err, HILOCK_EPROTO,
                         "unexpected reply to the multi-key extend script");
  } else if (r->integer <= 0) {
    size_t ix = (size_t)(-r->integer);
    char a[48] = "?";
    memset(m->missing, 0, m->n);
    if (ix >= 1 && ix <= m->n) {
      m->missing[ix - 1] = 1;
      show(a, sizeof(a), m->names[ix - 1], m->namelens[ix - 1]);
    }
    hilock__hold_lost(&m->h);
    rc = hilock__set_err(&m->h.err, HILOCK_ENOTOWNED,
                         "extend: \"%s\" expired or another owner holds it; "
                         "no key was extended",
                         a);
  } else {
    hilock__hold_extended(&m->h, start, r->integer);
  }
  freeReplyObject(r);
  return rc;
}

static int renew_fn(void *x) {
  hilock_multi_lock *m = x;
  return extend_fn(m, m->h.ttl_ms, 1);
}

/* The info script with token ("" asks only who holds). */
static int info(hilock_multi_lock *m, const char *token, size_t tokenlen,
                redisReply **r) {
  const char *args[1] = {token};
  size_t arglens[1] = {tokenlen};
  int rc = run(m, &hilock__script_multilock_info, (int)m->n, 1, args, arglens,
               r);
  if (rc != HILOCK_OK) return rc;
  if ((*r)->type != REDIS_REPLY_ARRAY || (*r)->elements < 1 ||
      !hilock__int_reply(*r, 0)) {
    freeReplyObject(*r);
    *r = NULL;
    return hilock__set_err(&m->h.err, HILOCK_EPROTO,
                           "unexpected reply to the multi-key info script");
  }
  return HILOCK_OK;
}

static int fam_owned(void *arg, int *owned) {
  hilock_multi_lock *m = arg;
  redisReply *r;
  size_t first = 0;
  int rc;
  if (m == NULL || owned == NULL) return HILOCK_EINVAL;
  *owned = 0;
  if (!m->h.held || m->h.pid != hilock__pid()) return HILOCK_OK;
  rc = info(m, m->h.owner, m->h.ownerlen, &r);
  if (rc != HILOCK_OK) return rc;
  if (mark_missing(m, r, 1, &first) == 0) *owned = 1;
  else hilock__hold_lost(&m->h);
  freeReplyObject(r);
  return HILOCK_OK;
}

static int fam_locked(void *arg, int *locked) {
  hilock_multi_lock *m = arg;
  redisReply *r;
  int rc;
  if (m == NULL || locked == NULL) return HILOCK_EINVAL;
  *locked = 0;
  rc = info(m, "", 0, &r);
  if (rc != HILOCK_OK) return rc;
  *locked = r->element[0]->integer > 0;
  freeReplyObject(r);
  return HILOCK_OK;
}

size_t hilock_multi_lock_count(const hilock_multi_lock *m) {
  return m == NULL ? 0 : m->n;
}

/* Name i (key = 0) or its lock key (key = 1), and its length; "" out of
 * range. */
static const char *name_or_key(const hilock_multi_lock *m, size_t i, int key,
                               size_t *len) {
  if (m == NULL || i >= m->n) {
    if (len) *len = 0;
    return "";
  }
  if (len) *len = key ? m->keylens[i] : m->namelens[i];
  return key ? m->keys[i] : m->names[i];
}

const char *hilock_multi_lock_name(const hilock_multi_lock *m, size_t i,
                                  size_t *len) {
  return name_or_key(m, i, 0, len);
}

uint64_t hilock_multi_lock_fence(const hilock_multi_lock *m, size_t i) {
  return m == NULL || i >= m->n ? 0 : m->fences[i];
}

int hilock_multi_lock_missing(const hilock_multi_lock *m, size_t i) {
  return m != NULL && i < m->n && m->missing[i];
}

const char *hilock_multi_lock_key(const hilock_multi_lock *m, size_t i,
                                 size_t *len) {
  return name_or_key(m, i, 1, len);
}

/* Handing the grant over (adopt.c): every name, with its fence. */
static void grant_fn(const void *x, hilock__grant *g) {
  const hilock_multi_lock *m = x;
  g->family = HILOCK__GRANT_MULTI;
  g->n = m->n;
  g->names = (const char *const *)m->names;
  g->namelens = m->namelens;
  g->fences = m->fences;
}

int hilock__multi_adopt(hilock_client *c, const hilock__grant *g,
                        hilock__hold **out) {
  hilock_multi_lock *m = NULL;
  size_t i;
  int rc = g->kind != 0 || g->a != 0 || g->b != 0
               ? hilock__set_err(hilock__client_err(c), HILOCK_EINVAL,
                                 "the exported grant is malformed")
               : multilock_new_len(c, g->names, g->namelens, g->n, g->ttl_ms,
                                   &m);
  if (rc != HILOCK_OK) return rc;
  /* The names come in the handle's order: any other is not an export. */
  for (i = 0; i < m->n; i++)
    if (m->n != g->n || m->namelens[i] != g->namelens[i] ||
        memcmp(m->names[i], g->names[i], g->namelens[i]) != 0)
      break;
  if (m->n != g->n || i < m->n) {
    fam_free(m);
    return hilock__set_err(hilock__client_err(c), HILOCK_EINVAL,
                           "the exported grant is malformed");
  }
  memcpy(m->fences, g->fences, m->n * sizeof(*m->fences));
  *out = &m->h;
  return HILOCK_OK;
}

static int set_delay_fn(void *x, int64_t delay_ms) {
  hilock_multi_lock *m = x;
  size_t n;
  int rc = hilock__hold_set_delay(&m->h, delay_ms, NULL, 0);
  if (rc != HILOCK_OK) return rc;
  n = m->n;
  if (delay_ms > 0 && m->dkeys == NULL) {
    m->dkeys = malloc(5 * n * sizeof(*m->dkeys));
    m->dkeylens = malloc(5 * n * sizeof(*m->dkeylens));
    if (m->dkeys == NULL || m->dkeylens == NULL) {
      free(m->dkeys);
      free(m->dkeylens);
      m->dkeys = NULL;
      m->dkeylens = NULL;
      m->h.delay_ms = 0;
      return hilock__set_err(&m->h.err, HILOCK_ENOMEM, "out of memory");
    }
    /* The release's: lock keys, wake lists, markers; the renewal's: lock
     * keys, markers (k: the index of each in keys). */
    for (size_t j = 0; j < 5 * n; j++) {
      static const size_t part[5] = {0, 1, 3, 0, 3};
      size_t k = part[j / n] * n + j % n;
      m->dkeys[j] = m->keys[k];
      m->dkeylens[j] = m->keylens[k];
    }
  }
  /* The renewal thread's batches run the renew script of the hold's kind
   * on rkey and h.xkeys: with a delay, the lock keys and the markers. */
  if (delay_ms > 0) {
    m->h.renew_script = &hilock__script_multilock_extend_delay;
    m->h.xkeys = m->dkeys + 3 * n + 1;
    m->h.xkeylens = m->dkeylens + 3 * n + 1;
    m->h.nxkeys = (int)(2 * n) - 1;
  } else {
    m->h.renew_script = &hilock__script_multilock_extend;
    m->h.xkeys = (const char *const *)(m->keys + 1);
    m->h.xkeylens = m->keylens + 1;
    m->h.nxkeys = (int)n - 1;
  }
  return HILOCK_OK;
}

static const hilock__family family = {
    .name = "multi-key lock",
    .free = fam_free, .owned = fam_owned, .locked = fam_locked,
    .acquire_spec = acquire_spec, .release = release_fn, .extend = extend_fn,
    .renew = renew_fn, .grant = grant_fn, .set_delay = set_delay_fn};
