/* Operator calls on lock names of any type (hilock/inspect.h): inspect,
 * force release, and the walk over the names present. The type-aware work
 * is in core/scripts/inspect.lua and force_release.lua, which get every key
 * the families use for a name (lib/lock_keys.lua lists them in the order
 * of roles[] below). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "route.h"
#include "scripts.h"

/* The roles of lib/lock_keys.lua, in its order, then its three prefixes. */
static const char *const roles[] = {
    "lock",        "fence",          "wake",        "redlock",
    "rlock",       "permits",        "limit",       "pwake",
    "fair",        "fair:queue",     "fair:heartbeat", "fair:ticket",
    "rw:writer",   "rw:readers",     "rw:counts",   "rw:intents",
    "rw:waiting",  "rw:admitted",    "rw:rwake",    "rw:wwake",
    "seq:queue",   "seq:session",    "seq:holder",  "seq:counter",
    "seg:stock",   "seg:fence",      "seg:wake",    "delay",
    "elect",       "ewake",          "latch",       "latch:parties",
    "seg:",        "wake:",          "seq:wake:"};
#define NROLES ((int)(sizeof(roles) / sizeof(roles[0])))

static const char *const type_names[] = {
    "none",   "lock",            "rlock",          "semaphore", "fair_lock",
    "rwlock", "sequential_lock", "segmented_lock", "redlock",   "unknown",
    "election", "latch"};

#define PATTERN_MAX (4 * HILOCK_NAME_MAX)

typedef struct name_keys {
  char *k[NROLES];
  size_t len[NROLES];
} name_keys;

static void keys_free(name_keys *nk) {
  for (int i = 0; i < NROLES; i++) free(nk->k[i]);
}

static int keys_make(const hilock_client *c, name_keys *nk, const char *name,
                     size_t len) {
  memset(nk, 0, sizeof(*nk));
  for (int i = 0; i < NROLES; i++) {
    nk->k[i] = hilock__key(&c->rt, name, len, roles[i], &nk->len[i]);
    if (nk->k[i] == NULL) {
      keys_free(nk);
      return HILOCK_ENOMEM;
    }
  }
  return HILOCK_OK;
}

/* Run one of the two scripts on name's keys. */
static int run_on_name(hilock_client *c, hilock__err *e,
                       const hilock__script *s, const char *name, size_t len,
                       redisReply **r) {
  name_keys nk;
  int rc = hilock__check_name(e, name, len);
  if (rc != HILOCK_OK) return rc;
  if (keys_make(c, &nk, name, len) != HILOCK_OK)
    return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
  rc = hilock__script_run(c, e, s, NROLES, (const char **)nk.k, nk.len, 0,
                          NULL, NULL, r);
  keys_free(&nk);
  return rc;
}

static int64_t int_at(const redisReply *r, size_t i) {
  return r->element[i]->type == REDIS_REPLY_INTEGER ? r->element[i]->integer
                                                    : 0;
}

static int is_str(const redisReply *x) {
  return x->type == REDIS_REPLY_STRING || x->type == REDIS_REPLY_STATUS;
}

/* inspect.lua's reply into *info. */
static int read_info(hilock__err *e, const redisReply *r,
                     hilock_lock_info *info) {
  const redisReply *ty, *ho;
  memset(info, 0, sizeof(*info));
  info->type_name = type_names[0];
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 12 ||
      !is_str(r->element[0]) || !is_str(r->element[2]))
    return hilock__set_err(e, HILOCK_EPROTO,
                           "unexpected reply to the inspect script");
  ty = r->element[0];
  for (int i = 0; i < (int)(sizeof(type_names) / sizeof(type_names[0])); i++)
    if (strlen(type_names[i]) == ty->len &&
        memcmp(type_names[i], ty->str, ty->len) == 0) {
      info->type = (hilock_lock_type)i;
      info->type_name = type_names[i];
    }
  ho = r->element[2];
  info->held = int_at(r, 1) != 0;
  info->holder_len = ho->len;
  memcpy(info->holder, ho->str,
         ho->len < HILOCK_HOLDER_MAX ? ho->len : HILOCK_HOLDER_MAX);
  info->holder[ho->len < HILOCK_HOLDER_MAX ? ho->len : HILOCK_HOLDER_MAX] = 0;
  info->fence = (uint64_t)int_at(r, 3);
  info->ttl_ms = int_at(r, 4);
  info->hold_count = int_at(r, 5);
  info->readers = int_at(r, 6);
  info->writer = int_at(r, 7) != 0;
  info->permits = int_at(r, 8);
  info->permits_used = int_at(r, 9);
  info->permits_free = int_at(r, 10);
  info->waiters = int_at(r, 11);
  info->delay_left_ms = -2;
  if (info->type != HILOCK_TYPE_UNKNOWN && r->elements >= 14) {
    info->delay_ms = int_at(r, 12);
    info->delay_left_ms = int_at(r, 13);
  }
  return HILOCK_OK;
}

static int inspect(hilock_client *c, hilock__err *e, const char *name,
                   size_t len, hilock_lock_info *info) {
  redisReply *r;
  int rc = run_on_name(c, e, &hilock__script_inspect, name, len, &r);
  if (rc != HILOCK_OK) return rc;
  rc = read_info(e, r, info);
  freeReplyObject(r);
  return rc;
}

int hilock_client_inspect(hilock_client *c, const char *name, size_t len,
                          hilock_lock_info *info) {
  int rc;
  if (c == NULL) return HILOCK_EINVAL;
  if (info == NULL)
    return hilock__set_err(hilock__client_err(c), HILOCK_EINVAL,
                           "inspect: info is NULL");
  memset(info, 0, sizeof(*info));
  info->type_name = type_names[0];
  rc = hilock__client_enter(c, hilock__client_err(c));
  if (rc != HILOCK_OK) return rc;
  rc = inspect(c, hilock__client_err(c), name, len, info);
  hilock__client_leave(c);
  return rc;
}

int hilock_client_force_release(hilock_client *c, const char *name,
                                size_t len, int *deleted) {
  hilock__err *e;
  redisReply *r;
  int rc;
  if (deleted != NULL) *deleted = 0;
  if (c == NULL) return HILOCK_EINVAL;
  e = hilock__client_err(c);
  rc = hilock__client_enter(c, e);
  if (rc != HILOCK_OK) return rc;
  rc = run_on_name(c, e, &hilock__script_force_release, name, len, &r);
  hilock__client_leave(c);
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER) {
    rc = hilock__set_err(e, HILOCK_EPROTO,
                         "unexpected reply to the force release script");
  } else if (r->element[0]->integer < 0) {
    const redisReply *k = r->element[1];
    const redisReply *t = r->elements > 2 ? r->element[2] : NULL;
    rc = hilock__set_err(
        e, HILOCK_EWRONGTYPE,
        "force release: %.*s holds a %.*s, which no hilock lock writes; "
        "nothing was changed",
        is_str(k) ? (int)(k->len > 120 ? 120 : k->len) : 0,
        is_str(k) ? k->str : "",
        t != NULL && is_str(t) ? (int)(t->len > 20 ? 20 : t->len) : 0,
        t != NULL && is_str(t) ? t->str : "");
  } else if (deleted != NULL) {
    *deleted = r->element[0]->integer > 0;
  }
  freeReplyObject(r);
  return rc;
}

/* ## The walk over names -------------------------------------------------- */

/* Redis's glob (stringmatchlen, case-sensitive): 1 if s matches p. */
static int glob(const char *p, size_t pl, const char *s, size_t sl) {
  while (pl > 0) {
    switch (p[0]) {
    case '*':
      while (pl > 1 && p[1] == '*') {
        p++;
        pl--;
      }
      if (pl == 1) return 1;
      for (;;) {
        if (glob(p + 1, pl - 1, s, sl)) return 1;
        if (sl == 0) return 0;
        s++;
        sl--;
      }
    case '?':
      if (sl == 0) return 0;
      s++;
      sl--;
      break;
    case '[': {
      int neg, match = 0;
      p++;
      pl--;
      neg = pl > 0 && p[0] == '^';
      if (neg) {
        p++;
        pl--;
      }
      for (;;) {
        if (pl == 0) {
          p--; /* an unclosed class: its last character closes it */
          pl++;
          break;
        }
        if (p[0] == ']') break;
        if (p[0] == '\\' && pl >= 2) {
          p++;
          pl--;
          if (sl > 0 && p[0] == s[0]) match = 1;
        } else if (pl >= 3 && p[1] == '-') {
          unsigned char lo = (unsigned char)p[0], hi = (unsigned char)p[2];
          unsigned char ch = sl > 0 ? (unsigned char)s[0] : 0;
          if (lo > hi) {
            unsigned char t = lo;
            lo = hi;
            hi = t;
          }
          p += 2;
          pl -= 2;
          if (sl > 0 && ch >= lo && ch <= hi) match = 1;
        } else if (sl > 0 && p[0] == s[0]) {
          match = 1;
        }
        p++;
        pl--;
      }
      if (neg) match = !match;
      if (!match || sl == 0) return 0;
      s++;
      sl--;
      break;
    }
    case '\\':
      if (pl >= 2) {
        p++;
        pl--;
      }
      /* fall through */
    default:
      if (sl == 0 || p[0] != s[0]) return 0;
      s++;
      sl--;
      break;
    }
    p++;
    pl--;
  }
  return sl == 0;
}

/* The lock name inside a key <prefix>{<name>}:<role>, or 0 if key is not
 * one of this client's locks. Roles never contain '}', so the name ends at
 * the last '}' of the key. */
static int name_of_key(const hilock__runtime *rt, const char *key, size_t len,
                       const char **name, size_t *nlen) {
  size_t hl = rt->prefixlen + 1, end;
  if (len < hl + 3 || memcmp(key, rt->prefix, rt->prefixlen) != 0 ||
      key[rt->prefixlen] != '{')
    return 0;
  for (end = len; end > hl; end--)
    if (key[end - 1] == '}') break;
  if (end <= hl + 1 || end >= len || key[end] != ':') return 0;
  *name = key + hl;
  *nlen = end - 1 - hl;
  return 1;
}

typedef struct seen_name {
  struct seen_name *next;
  size_t len;
  char name[];
} seen_name;

#define SEEN_BUCKETS 1024

struct hilock_scan {
  hilock_client *c;
  char *pat;
  size_t patlen;
  char *match; /* hilock:{<pattern>}:* */
  size_t matchlen;
  hilock__node **nodes; /* cluster: the masters when the walk began */
  int nnodes, inode;
  char cursor[32];
  int started; /* a SCAN was sent on the current node */
  int done;
  seen_name *seen[SEEN_BUCKETS]; /* every name found so far */
  seen_name **pending;           /* found, not yet reported */
  size_t npending, ipending, cappending;
  seen_name *cur; /* the name last reported */
};

static size_t hash_name(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return (size_t)(h % SEEN_BUCKETS);
}

/* Record a name found by SCAN, once. -1 out of memory. */
static int note_name(hilock_scan *sc, const char *name, size_t len) {
  size_t b = hash_name(name, len);
  seen_name *n;
  for (n = sc->seen[b]; n != NULL; n = n->next)
    if (n->len == len && memcmp(n->name, name, len) == 0) return 0;
  if (sc->npending == sc->cappending) {
    size_t cap = sc->cappending ? 2 * sc->cappending : 64;
    seen_name **p = realloc(sc->pending, cap * sizeof(*p));
    if (p == NULL) return -1;
    sc->pending = p;
    sc->cappending = cap;
  }
  n = malloc(sizeof(*n) + len + 1);
  if (n == NULL) return -1;
  n->len = len;
  memcpy(n->name, name, len);
  n->name[len] = 0;
  n->next = sc->seen[b];
  sc->seen[b] = n;
  sc->pending[sc->npending++] = n;
  return 0;
}

int hilock_client_list_locks(hilock_client *c, const char *pattern,
                             size_t patternlen, hilock_scan **out) {
  static const char tail[] = "}:*";
  hilock__err *e;
  hilock_scan *sc;
  size_t hl = 0;
  int rc;
  if (out == NULL) return HILOCK_EINVAL;
  *out = NULL;
  if (c == NULL) return HILOCK_EINVAL;
  e = hilock__client_err(c);
  if (pattern == NULL || patternlen == 0 || patternlen > PATTERN_MAX)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "list locks: the pattern must be 1..%d bytes "
                           "(\"*\" for every name)",
                           PATTERN_MAX);
  rc = hilock__client_enter(c, e);
  if (rc != HILOCK_OK) return rc;
  sc = calloc(1, sizeof(*sc));
  if (sc != NULL) {
    sc->pat = malloc(patternlen);
    /* The prefix matched as it is (its glob characters escaped), then
     * {<pattern>}:*. */
    sc->match = malloc(2 * c->rt.prefixlen + 1 + patternlen + sizeof(tail) - 1);
  }
  if (sc == NULL || sc->pat == NULL || sc->match == NULL) {
    if (sc != NULL) {
      free(sc->pat);
      free(sc->match);
      free(sc);
    }
    hilock__client_leave(c);
    return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
  }
  memcpy(sc->pat, pattern, patternlen);
  sc->patlen = patternlen;
  for (size_t i = 0; i < c->rt.prefixlen; i++) {
    if (strchr("*?[]\\", c->rt.prefix[i]) != NULL) sc->match[hl++] = '\\';
    sc->match[hl++] = c->rt.prefix[i];
  }
  sc->match[hl++] = '{';
  memcpy(sc->match + hl, pattern, patternlen);
  memcpy(sc->match + hl + patternlen, tail, sizeof(tail) - 1);
  sc->matchlen = hl + patternlen + sizeof(tail) - 1;
  strcpy(sc->cursor, "0");
  sc->c = c; /* keeps the reference hilock__client_enter took */
  if (c->cl != NULL) {
    if ((rc = hilock__cluster_mapped(c, e)) != HILOCK_OK) {
      hilock_scan_free(sc);
      return rc;
    }
    pthread_mutex_lock(&c->rt.mu);
    sc->nodes = calloc((size_t)c->cl->nnodes + 1, sizeof(*sc->nodes));
    for (int i = 0; sc->nodes != NULL && i < c->cl->nnodes; i++)
      if (c->cl->nodes[i]->master) sc->nodes[sc->nnodes++] = c->cl->nodes[i];
    pthread_mutex_unlock(&c->rt.mu);
    if (sc->nodes == NULL) {
      hilock_scan_free(sc);
      return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
    }
    if (sc->nnodes == 0) {
      hilock_scan_free(sc);
      return hilock__set_err(e, HILOCK_ECLUSTER, "no cluster master is known");
    }
  }
  *out = sc;
  return HILOCK_OK;
}

/* SCAN on one cluster node (nothing is routed by key: the node is given),
 * through the dispatcher. */
static int node_scan(hilock_client *c, hilock__err *e, hilock__node *node,
                     int argc, const char **argv, const size_t *lens,
                     redisReply **out) {
  hilock__req q = {.argc = argc, .argv = argv, .lens = lens, .node = node};
  hilock__send s = {0};
  int rc = hilock__dispatch(c, e, &s, &q, 1);
  if (rc == HILOCK__NOSCRIPT) rc = e->code = HILOCK_EREDIS;
  *out = q.reply;
  return rc;
}

/* One SCAN page: its names go to pending; the cursor moves on. */
static int scan_page(hilock_scan *sc, hilock__err *e) {
  const char *argv[6] = {"SCAN", sc->cursor, "MATCH", sc->match, "COUNT",
                         "1000"};
  size_t lens[6] = {4, strlen(sc->cursor), 5, sc->matchlen, 5, 4};
  redisReply *r, *keys;
  int rc;
  if (sc->c->cl != NULL)
    rc = node_scan(sc->c, e, sc->nodes[sc->inode], 6, argv, lens, &r);
  else
    rc = hilock__command(sc->c, e, 6, argv, lens, &r);
  if (rc != HILOCK_OK) return rc;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_STRING ||
      r->element[0]->len >= sizeof(sc->cursor) ||
      r->element[1]->type != REDIS_REPLY_ARRAY) {
    freeReplyObject(r);
    return hilock__set_err(e, HILOCK_EPROTO, "unexpected reply to SCAN");
  }
  keys = r->element[1];
  for (size_t i = 0; i < keys->elements; i++) {
    const char *name;
    size_t nlen;
    if (keys->element[i]->type != REDIS_REPLY_STRING) continue;
    if (!name_of_key(&sc->c->rt, keys->element[i]->str, keys->element[i]->len, &name,
                     &nlen) ||
        !glob(sc->pat, sc->patlen, name, nlen))
      continue;
    if (note_name(sc, name, nlen) != 0) {
      freeReplyObject(r);
      return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
    }
  }
  memcpy(sc->cursor, r->element[0]->str, r->element[0]->len);
  sc->cursor[r->element[0]->len] = 0;
  sc->started = 1;
  freeReplyObject(r);
  if (strcmp(sc->cursor, "0") == 0) {
    /* This server is walked; on a cluster, the next master. */
    sc->started = 0;
    if (sc->c->cl == NULL || ++sc->inode >= sc->nnodes) sc->done = 1;
  }
  return HILOCK_OK;
}

int hilock_scan_next(hilock_scan *sc, hilock_lock_info *info, int *found) {
  hilock__err *e;
  int rc = HILOCK_OK;
  if (found != NULL) *found = 0;
  if (sc == NULL || info == NULL || found == NULL) {
    if (sc != NULL)
      hilock__set_err(hilock__client_err(sc->c), HILOCK_EINVAL,
                      "scan next: info and found must not be NULL");
    return HILOCK_EINVAL;
  }
  memset(info, 0, sizeof(*info));
  info->type_name = type_names[0];
  e = hilock__client_err(sc->c);
  rc = hilock__client_enter(sc->c, e);
  if (rc != HILOCK_OK) return rc;
  for (;;) {
    if (sc->ipending < sc->npending) {
      seen_name *n = sc->pending[sc->ipending];
      rc = inspect(sc->c, e, n->name, n->len, info);
      if (rc != HILOCK_OK) break; /* the same name again next time */
      sc->ipending++;
      if (info->type == HILOCK_TYPE_NONE) continue;
      sc->cur = n;
      *found = 1;
      break;
    }
    sc->ipending = sc->npending = 0;
    if (sc->done) break;
    rc = scan_page(sc, e);
    if (rc != HILOCK_OK) break;
  }
  hilock__client_leave(sc->c);
  return rc;
}

const char *hilock_scan_name(const hilock_scan *sc, size_t *len) {
  if (sc == NULL || sc->cur == NULL) {
    if (len != NULL) *len = 0;
    return "";
  }
  if (len != NULL) *len = sc->cur->len;
  return sc->cur->name;
}

hilock_client *hilock_scan_client(const hilock_scan *sc) {
  return sc == NULL ? NULL : sc->c;
}

void hilock_scan_free(hilock_scan *sc) {
  if (sc == NULL) return;
  for (int b = 0; b < SEEN_BUCKETS; b++) {
    seen_name *n = sc->seen[b];
    while (n != NULL) {
      seen_name *next = n->next;
      free(n);
      n = next;
    }
  }
  free(sc->pending);
  free(sc->nodes);
  free(sc->pat);
  free(sc->match);
  hilock__client_leave(sc->c);
  free(sc);
}
