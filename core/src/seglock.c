/* The segmented lock: K exclusive segment locks sharing one stock hash,
 * fence hash and wake list. Mostly core/scripts/seglock_*.lua; a segment's
 * key is an ordinary lock key (its owner token, with a TTL), so release,
 * renewal, extend and owned reuse the exclusive lock's scripts and the
 * shared hold layer (hold.c, wait.c, renewal.c). */
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

struct hilock_segmented_lock {
  hilock__hold h; /* first: grant state (rkey = the held segment's key) */
  int nseg;
  int segment; /* of the current or last grant; -1 before the first */
  char **segkey; /* nseg segment keys */
  size_t *segkeylen;
  char *skey, *fkey, *wkey; /* stock hash, fence hash, wake list */
  size_t skeylen, fkeylen, wkeylen;
  /* The acquire script's keys: stock, fence, wake, segments. */
  const char **akeys;
  size_t *akeylens;
};

static void seglock_destroy(hilock_segmented_lock *s) {
  if (s->segkey != NULL)
    for (int i = 0; i < s->nseg; i++) free(s->segkey[i]);
  free(s->segkey);
  free(s->segkeylen);
  free(s->skey);
  free(s->fkey);
  free(s->wkey);
  free(s->akeys);
  free(s->akeylens);
  free(s);
}

static int run_release(void *arg, hilock__err *e, redisReply **r);

static int seglock_new(hilock_client *client, const char *name, size_t namelen,
                       size_t segments, int64_t ttl_ms, hilock_segmented_lock **out) {
  hilock_segmented_lock *s;
  int rc;

  hilock__count c = {"segments", segments > INT64_MAX ? INT64_MAX
                                                     : (int64_t)segments,
                     HILOCK_SEGMENTS_MAX};
  s = hilock__new_handle_with(client, name, namelen, 1, ttl_ms,
                              hilock__check_count, &c, sizeof(*s), &rc);
  if (s == NULL) return rc;
  s->nseg = (int)segments; /* at most HILOCK_SEGMENTS_MAX */
  s->segment = -1;
  s->segkey = calloc(segments, sizeof(*s->segkey));
  s->segkeylen = calloc((size_t)segments, sizeof(*s->segkeylen));
  s->akeys = calloc((size_t)segments + 3, sizeof(*s->akeys));
  s->akeylens = calloc((size_t)segments + 3, sizeof(*s->akeylens));
  s->skey = hilock__key(&client->rt, name, namelen, "seg:stock", &s->skeylen);
  s->fkey = hilock__key(&client->rt, name, namelen, "seg:fence", &s->fkeylen);
  s->wkey = hilock__key(&client->rt, name, namelen, "seg:wake", &s->wkeylen);
  if (s->segkey == NULL || s->segkeylen == NULL || s->akeys == NULL ||
      s->akeylens == NULL || s->skey == NULL || s->fkey == NULL ||
      s->wkey == NULL) {
    seglock_destroy(s);
    return HILOCK_ENOMEM;
  }
  for (int i = 0; i < s->nseg; i++) {
    char role[24];
    snprintf(role, sizeof(role), "seg:%d", i);
    s->segkey[i] = hilock__key(&client->rt, name, namelen, role, &s->segkeylen[i]);
    if (s->segkey[i] == NULL) {
      seglock_destroy(s);
      return HILOCK_ENOMEM;
    }
    s->akeys[i + 3] = s->segkey[i];
    s->akeylens[i + 3] = s->segkeylen[i];
  }
  s->akeys[0] = s->skey;
  s->akeylens[0] = s->skeylen;
  s->akeys[1] = s->fkey;
  s->akeylens[1] = s->fkeylen;
  s->akeys[2] = s->wkey;
  s->akeylens[2] = s->wkeylen;
  /* The hold's renewal key is set to the granted segment's key at each
   * grant, while no renewal is registered (see attempt). */
  hilock__hold_init_family(&s->h, client, s->segkey[0], s->segkeylen[0],
                           &hilock__script_lock_extend, ttl_ms, &family,
                           run_release, s);
  *out = s;
  return HILOCK_OK;
}

int hilock_segmented_lock_new(hilock_client *client, const char *name, size_t namelen,
                       size_t segments, int64_t ttl_ms, hilock_segmented_lock **out) {
  HILOCK__CLIENT_CALL(
      client, out, seglock_new(client, name, namelen, segments, ttl_ms, out));
}

static void fam_free(void *arg) {
  hilock_segmented_lock *s = arg;
  if (s == NULL) return;
  hilock__hold_destroy(&s->h);
  seglock_destroy(s);
}

static int segcount_mismatch(hilock_segmented_lock *s, long long stored) {
  return hilock__set_err(&s->h.err, HILOCK_EINVAL,
                         "the stock of this lock is split into %lld segments; "
                         "this handle has %d",
                         stored, s->nseg);
}

static int release_fn(void *x);

/* One grant attempt; *pttl gets the shortest remaining TTL among the held
 * non-empty segments when busy. */
static int attempt(void *arg, int64_t *pttl) {
  hilock_segmented_lock *s = arg;
  hilock__hold *h = &s->h;
  char ttl[24], start_s[24], k[24], held[96];
  const char *args[5];
  size_t arglens[5];
  /* Rung by a release: the script takes the wake-up (ARGV[5]). */
  int nargs = hilock__attempt_woken() == 2 ? 5 : 4;
  hilock__attempt a;
  redisReply *r;
  uint64_t rnd = 0;
  int rc, verdict = -1;
  long long what;

  snprintf(held, sizeof(held),
           "this handle already holds segment %d; release it first (one "
           "handle holds one segment)",
           s->segment);
  rc = hilock__attempt_begin(h, held);
  if (rc != HILOCK_OK) return rc;
  /* The random start comes from the token's fresh random bits, so forked
   * workers never share a sequence. */
  for (int i = 0; i < 12; i++) {
    char c = h->owner[i];
    rnd = rnd * 16 + (uint64_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
  }
  args[0] = h->owner;
  arglens[0] = h->ownerlen;
  args[1] = ttl;
  arglens[1] = hilock__i64(ttl, h->ttl_ms);
  args[2] = start_s;
  arglens[2] = hilock__i64(start_s, (int64_t)(rnd % (uint64_t)s->nseg));
  args[3] = k;
  arglens[3] = hilock__i64(k, s->nseg);
  args[4] = "woken";
  arglens[4] = 5;
  /* A late reply: whichever segment this attempt was granted is dropped
   * behind it (the wake list and the segment keys follow the stock and
   * fence keys in akeys). */
  hilock__undo undo = {&hilock__script_seglock_drop, s->nseg + 1, 1,
                       (const char *const *)s->akeys + 2, s->akeylens + 2,
                       args, arglens, h->ttl_ms, NULL};
  rc = hilock__attempt_run(h, &a, &undo, &hilock__script_seglock_acquire,
                           s->nseg + 3, (const char **)s->akeys, s->akeylens,
                           nargs, args, arglens, &r);
  if (rc != HILOCK_OK) return rc;
  /* {1, segment, fence}, {0, pttl}, {2} sold out, {-1, stored count}. */
  what = hilock__int_reply(r, 1) ? r->element[0]->integer : -2;
  if (what == 1 && hilock__int_reply(r, 3) && r->element[1]->integer >= 0 &&
      r->element[1]->integer < s->nseg) {
    int i = (int)r->element[1]->integer;
    s->segment = i;
    h->rkey = s->segkey[i];
    h->rkeylen = s->segkeylen[i];
    verdict = 1;
  } else if (what == 0 && hilock__int_reply(r, 2)) {
    verdict = 0;
  } else if (what == 2 || (what == -1 && hilock__int_reply(r, 2))) {
    hilock__hold_drop(h);
    rc = what == 2 ? hilock__set_err(&h->err, HILOCK_SOLDOUT,
                                     "every segment is empty (sold out)")
                   : segcount_mismatch(s, r->element[1]->integer);
    freeReplyObject(r);
    return rc;
  }
  return hilock__attempt_end(
      h, &a, r, verdict,
      verdict == 1 ? (uint64_t)r->element[2]->integer : 0,
      verdict == 0 ? r->element[1]->integer : 0, pttl, release_fn, s,
      "seglock acquire script");
}

static void acquire_spec(void *arg, hilock__acquire_spec *sp) {
  hilock_segmented_lock *s = arg;
  hilock__spec(sp, attempt, s, &s->wkey, &s->wkeylen);
}

/* lock_release.lua on the held segment: delete it if it holds our token,
 * wake a waiter. */
static int run_release(void *arg, hilock__err *e, redisReply **r) {
  hilock_segmented_lock *s = arg;
  const char *keys[2] = {s->h.rkey, s->wkey};
  size_t keylens[2] = {s->h.rkeylen, s->wkeylen};
  const char *args[1] = {s->h.owner};
  size_t arglens[1] = {s->h.ownerlen};
  return hilock__script_run(s->h.client, e, &hilock__script_lock_release, 2,
                            keys, keylens, 1, args, arglens, r);
}

static int release_fn(void *x) {
  hilock_segmented_lock *s = x;
  char why[96];
  snprintf(why, sizeof(why),
           "segment %d expired or another owner holds it; nothing was "
           "deleted",
           s->segment);
  return hilock__hold_release_reply(&s->h, run_release, s, 0, why);
}

static int check_units(hilock__err *e, const char *what, int64_t n,
                       int64_t min) {
  if (n < min || n > HILOCK_STOCK_MAX)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "%s must be %" PRId64 "..%" PRId64 ", got %" PRId64,
                           what, min, HILOCK_STOCK_MAX, n);
  return HILOCK_OK;
}

/* Put back n units of a take too few replicas acknowledged; *left (may be
 * NULL) gets the stock after it. Returns HILOCK_ENOREPLICAS. */
static int take_back(hilock_segmented_lock *s, const hilock__err *unacked, int64_t n,
                     int64_t *left) {
  const char *keys[2] = {s->h.rkey, s->skey};
  size_t keylens[2] = {s->h.rkeylen, s->skeylen};
  char nbuf[24], ibuf[24];
  const char *args[4] = {s->h.owner, ibuf, nbuf, "back"};
  size_t arglens[4] = {s->h.ownerlen, hilock__i64(ibuf, s->segment),
                       hilock__i64(nbuf, n), 4};
  hilock__err e;
  redisReply *r = NULL;
  int rc;
  hilock__clear_err(&e);
  rc = hilock__script_run_as(s->h.client, &e, &hilock__script_seglock_take, 0,
                             2, keys, keylens, 4, args, arglens, &r);
  if (rc == HILOCK_OK && hilock__int_reply(r, 3) && r->element[0]->integer == 1) {
    if (left != NULL) *left = r->element[2]->integer;
    freeReplyObject(r);
    return hilock__set_err(&s->h.err, HILOCK_ENOREPLICAS,
                           "%.160s; the %" PRId64 " units were put back",
                           unacked->msg, n);
  }
  if (rc == HILOCK_OK)
    hilock__set_err(&e, HILOCK_ENOTOWNED,
                    "the segment was lost before they could be put back");
  if (r != NULL) freeReplyObject(r);
  return hilock__set_err(&s->h.err, HILOCK_ENOREPLICAS,
                         "%.120s; putting the %" PRId64
                         " units back failed too (they count as sold): %.80s",
                         unacked->msg, n, e.msg);
}

int hilock_segmented_lock_take(hilock_segmented_lock *s, int64_t n, int partial,
                        int64_t *taken, int64_t *left) {
  const char *keys[2], *args[4];
  size_t keylens[2], arglens[4];
  char nbuf[24], ibuf[24];
  redisReply *r;
  int rc;

  if (taken != NULL) *taken = 0;
  if (left != NULL) *left = 0;
  if (s == NULL) return HILOCK_EINVAL;
  rc = check_units(&s->h.err, "units to take", n, 1);
  if (rc == HILOCK_OK) rc = hilock__hold_check(&s->h, "take");
  if (rc != HILOCK_OK) return rc;
  keys[0] = s->h.rkey;
  keylens[0] = s->h.rkeylen;
  keys[1] = s->skey;
  keylens[1] = s->skeylen;
  args[0] = s->h.owner;
  arglens[0] = s->h.ownerlen;
  args[1] = ibuf;
  arglens[1] = hilock__i64(ibuf, s->segment);
  args[2] = nbuf;
  arglens[2] = hilock__i64(nbuf, n);
  args[3] = partial ? "1" : "0";
  arglens[3] = 1;
  /* Not resent after a broken connection: a lost reply may mean units were
   * taken (the caller sees the error and can read the stock). With
   * wait_replicas, WAIT confirms the take like a grant. */
  rc = hilock__script_run_as(s->h.client, &s->h.err,
                             &hilock__script_seglock_take, 1, 2, keys,
                             keylens, 4, args, arglens, &r);
  if (rc == HILOCK_ENOREPLICAS && hilock__int_reply(r, 3) &&
      r->element[0]->integer == 1 && r->element[1]->integer > 0) {
    /* Taken on the master only: a failover could sell the units again.
     * Put them back. */
    hilock__err unacked = s->h.err;
    int64_t back = r->element[1]->integer;
    freeReplyObject(r);
    return take_back(s, &unacked, back, left);
  }
  if (rc == HILOCK_ENOREPLICAS) rc = HILOCK_OK; /* nothing taken: see below */
  if (rc != HILOCK_OK) return rc;
  if (!hilock__int_reply(r, 1) ||
      (r->element[0]->integer == 1 && !hilock__int_reply(r, 3))) {
    rc = hilock__set_err(&s->h.err, HILOCK_EPROTO,
                         "unexpected reply to the seglock take script");
  } else if (r->element[0]->integer == 1) {
    if (taken != NULL) *taken = r->element[1]->integer;
    if (left != NULL) *left = r->element[2]->integer;
  } else if (r->element[0]->integer == -1) {
    hilock__hold_lost(&s->h);
    rc = hilock__set_err(&s->h.err, HILOCK_ENOTOWNED,
                         "take: segment %d expired or another owner holds "
                         "it; no stock moved",
                         s->segment);
  } else if (r->element[0]->integer == -2) {
    rc = hilock__set_err(&s->h.err, HILOCK_EINVAL,
                         "take: segment %d has no stock (load it with "
                         "stock_init or stock_set)",
                         s->segment);
  } else {
    rc = hilock__set_err(&s->h.err, HILOCK_EPROTO,
                         "unexpected reply to the seglock take script");
  }
  freeReplyObject(r);
  return rc;
}

static int stock_script(hilock_segmented_lock *s, const char *mode, int64_t units,
                        int segment) {
  const char *keys[2], *args[4];
  size_t keylens[2], arglens[4];
  char kbuf[24], ubuf[24], ibuf[24];
  redisReply *r;
  int rc;

  keys[0] = s->skey;
  keylens[0] = s->skeylen;
  keys[1] = s->wkey;
  keylens[1] = s->wkeylen;
  args[0] = kbuf;
  arglens[0] = hilock__i64(kbuf, s->nseg);
  args[1] = mode;
  arglens[1] = strlen(mode);
  args[2] = ubuf;
  arglens[2] = hilock__i64(ubuf, units);
  args[3] = ibuf;
  arglens[3] = hilock__i64(ibuf, segment);
  rc = hilock__script_run(s->h.client, &s->h.err,
                          &hilock__script_seglock_stock, 2, keys, keylens, 4,
                          args, arglens, &r);
  if (rc != HILOCK_OK) return rc;
  if (!hilock__int_reply(r, 2) ||
      (r->element[0]->integer != 1 && r->element[0]->integer != -1))
    rc = hilock__set_err(&s->h.err, HILOCK_EPROTO,
                         "unexpected reply to the seglock stock script");
  else if (r->element[0]->integer == -1)
    rc = segcount_mismatch(s, r->element[1]->integer);
  freeReplyObject(r);
  return rc;
}

int hilock_segmented_lock_stock_init(hilock_segmented_lock *s, int64_t total) {
  int rc;
  if (s == NULL) return HILOCK_EINVAL;
  rc = check_units(&s->h.err, "total stock", total, 0);
  if (rc != HILOCK_OK) return rc;
  return stock_script(s, "split", total, 0);
}

int hilock_segmented_lock_stock_set(hilock_segmented_lock *s, size_t segment, int64_t n) {
  int rc;
  if (s == NULL) return HILOCK_EINVAL;
  if (segment >= (size_t)s->nseg)
    return hilock__set_err(&s->h.err, HILOCK_EINVAL,
                           "segment must be 0..%d, got %zu", s->nseg - 1,
                           segment);
  rc = check_units(&s->h.err, "stock", n, 0);
  if (rc != HILOCK_OK) return rc;
  return stock_script(s, "set", n, (int)segment);
}

/* Decimal integer reply (a hash field) into *v; 0 if not one. */
static int parse_units(const redisReply *e, int64_t *v) {
  char *end;
  long long x;
  if (e->type != REDIS_REPLY_STRING || e->len == 0 || e->len > 20) return 0;
  x = strtoll(e->str, &end, 10);
  if (end != e->str + e->len) return 0;
  *v = x;
  return 1;
}

int hilock_segmented_lock_stock(hilock_segmented_lock *s, size_t index, int64_t *n) {
  const char **argv;
  size_t *lens;
  char (*fields)[24];
  redisReply *r;
  int rc, argc, tracked = 0, segment;
  int64_t sum = 0;

  if (n != NULL) *n = -1;
  if (s == NULL || n == NULL) return HILOCK_EINVAL;
  if (index != HILOCK_SEGMENT_ALL && index >= (size_t)s->nseg)
    return hilock__set_err(&s->h.err, HILOCK_EINVAL,
                           "segment must be 0..%d or HILOCK_SEGMENT_ALL, got "
                           "%zu",
                           s->nseg - 1, index);
  segment = index == HILOCK_SEGMENT_ALL ? -1 : (int)index;
  argc = segment == -1 ? s->nseg + 2 : 3;
  argv = calloc((size_t)argc, sizeof(*argv));
  lens = calloc((size_t)argc, sizeof(*lens));
  fields = calloc((size_t)argc, sizeof(*fields));
  if (argv == NULL || lens == NULL || fields == NULL) {
    free(argv);
    free(lens);
    free(fields);
    return hilock__set_err(&s->h.err, HILOCK_ENOMEM, "out of memory");
  }
  argv[0] = "HMGET";
  lens[0] = 5;
  argv[1] = s->skey;
  lens[1] = s->skeylen;
  for (int i = 2; i < argc; i++) {
    argv[i] = fields[i];
    lens[i] = hilock__i64(fields[i], segment == -1 ? i - 2 : segment);
  }
  rc = hilock__command(s->h.client, &s->h.err, argc, argv, lens, &r);
  free(argv);
  free(lens);
  free(fields);
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)(argc - 2)) {
    rc = HILOCK_EPROTO;
  } else {
    for (size_t i = 0; i < r->elements && rc == HILOCK_OK; i++) {
      int64_t v;
      if (r->element[i]->type == REDIS_REPLY_NIL) continue;
      if (!parse_units(r->element[i], &v)) {
        rc = HILOCK_EPROTO;
        break;
      }
      sum += v;
      tracked = 1;
    }
  }
  freeReplyObject(r);
  if (rc != HILOCK_OK)
    return hilock__set_err(&s->h.err, rc, "unexpected stock entry in %s",
                           s->skey);
  *n = tracked ? sum : -1;
  return HILOCK_OK;
}

int hilock_segmented_lock_segments_held(hilock_segmented_lock *s, size_t *n) {
  const char **argv;
  redisReply *r;
  int rc;

  if (n != NULL) *n = 0;
  if (s == NULL || n == NULL) return HILOCK_EINVAL;
  argv = calloc((size_t)s->nseg + 1, sizeof(*argv));
  if (argv == NULL)
    return hilock__set_err(&s->h.err, HILOCK_ENOMEM, "out of memory");
  argv[0] = "EXISTS";
  for (int i = 0; i < s->nseg; i++) argv[i + 1] = s->segkey[i];
  {
    size_t *lens = calloc((size_t)s->nseg + 1, sizeof(*lens));
    if (lens == NULL) {
      free(argv);
      return hilock__set_err(&s->h.err, HILOCK_ENOMEM, "out of memory");
    }
    lens[0] = 6;
    for (int i = 0; i < s->nseg; i++) lens[i + 1] = s->segkeylen[i];
    rc = hilock__command(s->h.client, &s->h.err, s->nseg + 1, argv, lens, &r);
    free(lens);
  }
  free(argv);
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_INTEGER)
    rc = hilock__set_err(&s->h.err, HILOCK_EPROTO,
                         "unexpected reply to EXISTS");
  else
    *n = (size_t)r->integer;
  freeReplyObject(r);
  return rc;
}


static int extend_fn(void *x, int64_t ms, int replace) {
  hilock_segmented_lock *s = x;
  return hilock__hold_extend(&s->h, ms, replace);
}

static int renew_fn(void *x) {
  hilock_segmented_lock *s = x;
  return hilock__hold_extend(&s->h, s->h.ttl_ms, 1);
}

size_t hilock_segmented_lock_segment(const hilock_segmented_lock *s) {
  return s == NULL || s->segment < 0 ? HILOCK_SEGMENT_NONE
                                     : (size_t)s->segment;
}

size_t hilock_segmented_lock_segments(const hilock_segmented_lock *s) {
  return s == NULL ? 0 : (size_t)s->nseg;
}

const char *hilock_segmented_lock_key(const hilock_segmented_lock *s, size_t i,
                                      size_t *len) {
  if (s == NULL || (i != HILOCK_SEGMENT_ALL && i >= (size_t)s->nseg)) {
    if (len) *len = 0;
    return "";
  }
  if (len) *len = i == HILOCK_SEGMENT_ALL ? s->skeylen : s->segkeylen[i];
  return i == HILOCK_SEGMENT_ALL ? s->skey : s->segkey[i];
}


/* Round trip: any segment is held. */
static int fam_locked(void *arg, int *locked) {
  size_t n = 0;
  int rc = hilock_segmented_lock_segments_held(arg, &n);
  *locked = rc == HILOCK_OK && n > 0;
  return rc;
}

/* Handing the grant over (adopt.c): the segment count and the held
 * segment go with it. */
static void grant_fn(const void *x, hilock__grant *g) {
  const hilock_segmented_lock *s = x;
  g->family = HILOCK__GRANT_SEG;
  g->a = s->nseg;
  g->b = s->segment;
  g->one = hilock__key_name(s->h.rt, s->skey, s->skeylen, "seg:stock",
                            &g->onelen);
  g->n = 1;
  g->names = &g->one;
  g->namelens = &g->onelen;
}

int hilock__seg_adopt(hilock_client *c, const hilock__grant *g,
                      hilock__hold **out) {
  hilock_segmented_lock *s = NULL;
  int rc = g->kind != 0 || g->a < 1 || g->a > HILOCK_SEGMENTS_MAX ||
                   g->b < 0 || g->b >= g->a
               ? hilock__set_err(hilock__client_err(c), HILOCK_EINVAL,
                                 "the exported grant is malformed")
               : seglock_new(c, g->names[0], g->namelens[0], (size_t)g->a,
                             g->ttl_ms, &s);
  if (rc != HILOCK_OK) return rc;
  s->segment = (int)g->b;
  s->h.rkey = s->segkey[s->segment];
  s->h.rkeylen = s->segkeylen[s->segment];
  *out = &s->h;
  return HILOCK_OK;
}

static const hilock__family family = {
    .name = "segmented lock",
    .free = fam_free, .locked = fam_locked, .acquire_spec = acquire_spec,
    .release = release_fn, .extend = extend_fn, .renew = renew_fn,
    .grant = grant_fn};
