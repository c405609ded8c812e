/* Deadlock detection across processes (hilock_options.detect_deadlocks),
 * after PostgreSQL's rule: a waiter that has waited deadlock_timeout_ms
 * looks for a cycle. Only waiters write anything: a grant costs nothing.
 *
 * A wait that has lasted the delay records, with a lease of a few delays,
 *   <prefix>{<owner>}:dlw  = "<start wall ms>:<serial>\n<s|h>\n<holder key>\n<name>\n"
 *                             and " <token>" for each grant it holds
 * (the owner: client id and caller, a thread or an async operation), and
 * for each grant its owner holds (its lock families whose holder key holds
 * the owner token: the lock and the fair lock)
 *   <prefix>{<token>}:dl   = <owner>
 * Each key has a hash tag of its own: on a cluster every read of the walk
 * goes to its own slot's master, one round trip each.
 *
 * The walk: the holder token of the name the waiter waits for (GET of the
 * holder key) and that token's owner (dl), or the owner a holder hash
 * names (HKEYS: the reentrant lock, a writer), what the owner waits for (dlw),
 * and again, until it comes back to the waiter (a cycle), or ends (a
 * holder that does not wait, a record gone, an unreadable reply) or
 * reaches its depth. A cycle found is walked a second time: only the same
 * hops (the same grant tokens and the same waits, each wait record naming
 * its wait by start and serial) count. Between the two walks every owner
 * of the cycle was inside the same wait (its record is deleted before its
 * acquire returns), holding the same grant (a token names one grant) of a
 * lock the next owner waits for, and the last lock is held by the waiter
 * itself, which is not releasing anything: the cycle held at that moment,
 * and none of its owners can leave it but by giving up. A holder that
 * releases during a walk changes a token or a wait the second walk reads.
 *
 * The victim is the youngest wait of the cycle (latest start, then the
 * greater serial, then the greater owner): every member's walk reads the
 * same records, so all agree, and only the victim fails (itself); the
 * others keep waiting and get their locks when it backs off. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base.h"
#include "holds.h"
#include "script.h"
#include "wait.h"
#include "scripts.h"

#define DL_DEPTH 16
#define DL_TOKENS 32
#define DL_REC HILOCK__DL_REC

typedef struct dl_hop {
  char token[HILOCK__TOKEN_LEN + 32]; /* the holder token read */
  char owner[HILOCK__DL_OWNER];       /* its owner */
  char rec[DL_REC];                   /* what that owner waits for */
} dl_hop;

static uint64_t dl_serial; /* waits of this process (atomic) */

/* How a family's holder is read: 's', its holder key is a string holding
 * the owner token (the lock, the fair lock); 'h', a hash whose fields are
 * the owners themselves besides "fence" and "<owner>:op" (the reentrant
 * lock); 'w', a read-write lock's writer hash, else its live readers
 * (deadlock_holders.lua); 0: not served. */
static int dl_family(const hilock__hold *h) {
  if (h->fam == NULL || h->rkey == NULL) return 0;
  if (strcmp(h->fam->name, "lock") == 0 ||
      strcmp(h->fam->name, "fair lock") == 0)
    return 's';
  if (strcmp(h->fam->name, "reentrant lock") == 0) return 'h';
  if (strcmp(h->fam->name, "read-write lock") == 0) return 'w';
  return 0;
}

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static size_t owner_of(const hilock_client *c, long caller, char *out) {
  int n = snprintf(out, HILOCK__DL_OWNER, "%s:%ld", c->id, caller);
  return n < 0 ? 0 : (size_t)n;
}

/* The hold the caller's next acquire loop is for, read when the loop
 * begins (its deadlock detection); in the call's state, which a fiber
 * takes along when it gives its thread back. */
#define tl_dl_hold hilock__tl.dl_hold

void hilock__dl_expect(hilock__hold *h, int64_t wait_ms) {
  tl_dl_hold = h != NULL && h->client != NULL &&
                       h->client->rt.opts.detect_deadlocks && wait_ms != 0
                   ? h
                   : NULL;
}

void hilock__dl_begin(hilock_client *c, hilock__dl *d, hilock__hold *h) {
  h = h != NULL ? h : (hilock__hold *)tl_dl_hold;
  tl_dl_hold = NULL;
  /* Off (the usual case), only the flags the loop reads are set. */
  d->on = d->registered = 0;
  if (h == NULL || !c->rt.opts.detect_deadlocks || !dl_family(h)) return;
  d->reclen = 0;
  d->on = 1;
  d->h = h;
  d->delay_ms = c->rt.opts.deadlock_timeout_ms;
  d->next_ms = hilock__now_ms() + d->delay_ms;
  d->ownerlen = owner_of(c, hilock__caller(), d->owner);
  d->start_wall_ms = wall_ms();
  d->serial = __atomic_add_fetch(&dl_serial, 1, __ATOMIC_RELAXED);
}

int64_t hilock__dl_bound(const hilock__dl *d, int64_t bound_ms) {
  int64_t left;
  if (!d->on) return bound_ms;
  left = d->next_ms - hilock__now_ms();
  if (left < 1) left = 1;
  return left < bound_ms ? left : bound_ms;
}

/* One plain command on key (argv[1]); its string reply copied into out
 * (cap bytes): 1, or 0 for anything else (nil, an error: the walk ends). */
static int dl_run(hilock_client *c, int argc, const char **argv,
                  const size_t *lens, char *out, size_t cap) {
  hilock__err e;
  redisReply *r = NULL;
  int ok = 0;
  hilock__clear_err(&e);
  if (hilock__command(c, &e, argc, argv, lens, &r) == HILOCK_OK &&
      r != NULL && out != NULL &&
      (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
      r->len < cap) {
    memcpy(out, r->str, r->len);
    out[r->len] = '\0';
    ok = 1;
  } else if (r != NULL && out == NULL) {
    ok = r->type != REDIS_REPLY_ERROR;
  }
  if (r != NULL) freeReplyObject(r);
  return ok;
}

static int dl_get(hilock_client *c, const char *key, size_t keylen, char *out,
                  size_t cap) {
  const char *argv[2] = {"GET", key};
  size_t lens[2] = {3, keylen};
  return dl_run(c, 2, argv, lens, out, cap);
}

/* GET <prefix>{name}:role. */
static int dl_get_named(hilock_client *c, const char *name, const char *role,
                        char *out, size_t cap) {
  size_t keylen;
  char *key = hilock__key(&c->rt, name, strlen(name), role, &keylen);
  int ok = key != NULL && dl_get(c, key, keylen, out, cap);
  free(key);
  return ok;
}

static int dl_set_named(hilock_client *c, const char *name, size_t namelen,
                        const char *role, const char *val, size_t vallen,
                        int64_t lease_ms) {
  char px[24];
  size_t keylen;
  char *key = hilock__key(&c->rt, name, namelen, role, &keylen);
  const char *argv[5] = {"SET", key, val, "PX", px};
  size_t lens[5] = {3, keylen, vallen, 2, hilock__i64(px, lease_ms)};
  int ok = key != NULL && dl_run(c, 5, argv, lens, NULL, 0);
  free(key);
  return ok;
}

/* The name in a holder key <prefix>{name}:role. */
static size_t dl_name(const hilock_client *c, const char *key, size_t keylen,
                      const char **name) {
  const char *end = NULL;
  size_t start = c->rt.prefixlen + 1;
  for (size_t i = keylen; i-- > start;)
    if (key[i] == '}') {
      end = key + i;
      break;
    }
  if (keylen <= start || end == NULL) {
    *name = key;
    return keylen;
  }
  *name = key + start;
  return (size_t)(end - *name);
}

/* Record this wait and the owner's grants, for a lease of a few checks.
 * The record ends with the grants' tokens, so that a walk believes a
 * token's owner (dl, which may be left from a grant since handed over)
 * only while the owner's current wait still names the token. */
static void dl_register(hilock_client *c, hilock__dl *d) {
  char tokens[DL_TOKENS][HILOCK__TOKEN_LEN + 32];
  size_t toklens[DL_TOKENS];
  int64_t lease = d->delay_ms * 2 + 2000;
  const hilock__hold *h = d->h;
  const char *name;
  size_t namelen = dl_name(c, h->rkey, h->rkeylen, &name);
  long caller = hilock__caller();
  int n = 0, len;
  /* The owner's grants: this client's, granted to this caller. */
  pthread_mutex_lock(&c->rt.wd.mu);
  for (hilock__hold *g = c->rt.wd.live; g != NULL && n < DL_TOKENS;
       g = g->live_next)
    if (g->held && g->client == c && g->dl_caller == caller &&
        dl_family(g) == 's' &&
        g->pid == hilock__pid() && g->ownerlen < sizeof(tokens[0])) {
      memcpy(tokens[n], g->owner, g->ownerlen);
      toklens[n++] = g->ownerlen;
    }
  pthread_mutex_unlock(&c->rt.wd.mu);
  len = snprintf(d->rec, sizeof(d->rec),
                 "%" PRId64 ":%" PRIu64 "\n%c\n%.*s\n%.*s\n",
                 d->start_wall_ms, d->serial, dl_family(h), (int)h->rkeylen,
                 h->rkey, (int)namelen, name);
  for (int i = 0; i < n && len > 0 && (size_t)len < sizeof(d->rec); i++)
    len += snprintf(d->rec + len, sizeof(d->rec) - (size_t)len, " %.*s",
                    (int)toklens[i], tokens[i]);
  d->reclen = len < 0 || (size_t)len >= sizeof(d->rec) ? 0 : (size_t)len;
  if (d->reclen == 0) {
    d->on = 0; /* a name too long to record: no detection for it */
    return;
  }
  for (int i = 0; i < n; i++)
    dl_set_named(c, tokens[i], toklens[i], "dl", d->owner, d->ownerlen, lease);
  if (dl_set_named(c, d->owner, d->ownerlen, "dlw", d->rec, d->reclen, lease))
    d->registered = 1;
}

/* Whether a wait record's grants line names token. */
static int dl_rec_holds(const char *rec, const char *token) {
  const char *p = rec;
  size_t tl = strlen(token);
  for (int i = 0; i < 4 && p != NULL; i++) {
    p = strchr(p, '\n');
    if (p != NULL) p++;
  }
  while (p != NULL && *p == ' ') {
    const char *end = strchr(p + 1, ' ');
    size_t l = end != NULL ? (size_t)(end - p - 1) : strlen(p + 1);
    if (l == tl && memcmp(p + 1, token, tl) == 0) return 1;
    p = end;
  }
  return 0;
}

/* Walk from d's wait: the number of hops of a cycle back to d's owner
 * (hops[0..n-1]), or 0. */
/* The one owner field of a holder hash (HKEYS key) into out: 1, or 0 for
 * none, more than one, or anything unreadable. */
static int dl_hash_owner(hilock_client *c, const char *key, size_t keylen,
                         char *out, size_t cap) {
  const char *argv[2] = {"HKEYS", key};
  size_t lens[2] = {5, keylen};
  hilock__err e;
  redisReply *r = NULL;
  int found = 0;
  hilock__clear_err(&e);
  if (hilock__command(c, &e, 2, argv, lens, &r) == HILOCK_OK && r != NULL &&
      r->type == REDIS_REPLY_ARRAY) {
    for (size_t i = 0; i < r->elements; i++) {
      const redisReply *f = r->element[i];
      if (f->type != REDIS_REPLY_STRING) {
        found = 2;
        break;
      }
      if ((f->len == 5 && memcmp(f->str, "fence", 5) == 0) ||
          (f->len >= 3 && memcmp(f->str + f->len - 3, ":op", 3) == 0))
        continue;
      if (found++ || f->len >= cap) {
        found = 2;
        break;
      }
      memcpy(out, f->str, f->len);
      out[f->len] = '\0';
    }
  }
  if (r != NULL) freeReplyObject(r);
  return found == 1;
}

/* The owners of a read-write lock (deadlock_holders.lua), sorted (both
 * walks try them in one order): their number, at most DL_FAN. */
#define DL_FAN 8
static int dl_rw_owners(hilock_client *c, const char *wkey, size_t wkeylen,
                        const char *name, size_t namelen,
                        char owners[DL_FAN][HILOCK__DL_OWNER]) {
  const char *keys[2];
  size_t keylens[2];
  hilock__err e;
  redisReply *r = NULL;
  int n = 0;
  char *rkey = hilock__key(&c->rt, name, namelen, "rw:readers", &keylens[1]);
  if (rkey == NULL) return 0;
  keys[0] = wkey;
  keylens[0] = wkeylen;
  keys[1] = rkey;
  hilock__clear_err(&e);
  if (hilock__script_run(c, &e, &hilock__script_deadlock_holders, 2, keys,
                         keylens, 0, NULL, NULL, &r) == HILOCK_OK &&
      r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements <= DL_FAN) {
    for (size_t i = 0; i < r->elements; i++) {
      const redisReply *f = r->element[i];
      if (f->type != REDIS_REPLY_STRING || f->len >= HILOCK__DL_OWNER) {
        n = 0;
        break;
      }
      memcpy(owners[n], f->str, f->len);
      owners[n++][f->len] = '\0';
    }
  }
  if (r != NULL) freeReplyObject(r);
  free(rkey);
  qsort(owners, (size_t)n, sizeof(owners[0]),
        (int (*)(const void *, const void *))strcmp);
  return n;
}

/* A record's type, holder key and name. */
static int dl_rec_parse(const char *rec, int *type, const char **key,
                        size_t *keylen, const char **name, size_t *namelen) {
  const char *p = strchr(rec, '\n'), *nl;
  if (p == NULL || (p[1] != 's' && p[1] != 'h' && p[1] != 'w') || p[2] != '\n')
    return 0;
  *type = p[1];
  *key = p + 3;
  nl = strchr(*key, '\n');
  if (nl == NULL) return 0;
  *keylen = (size_t)(nl - *key);
  *name = nl + 1;
  nl = strchr(*name, '\n');
  if (nl == NULL) return 0;
  *namelen = (size_t)(nl - *name);
  return 1;
}

/* Walk on from hop n, the wait for (type, key, name): the number of hops
 * of a cycle back to d's owner, or 0. A read-write lock's readers are
 * tried in turn (depth first); *budget bounds the owners looked at. */
static int dl_walk_from(hilock_client *c, const hilock__dl *d, dl_hop *hops,
                        int n, int type, const char *key, size_t keylen,
                        const char *name, size_t namelen, int *budget) {
  char owners[DL_FAN][HILOCK__DL_OWNER];
  char token[HILOCK__TOKEN_LEN + 32];
  int k = 1;
  if (n >= DL_DEPTH) return 0;
  snprintf(token, sizeof(token), "%s", "-");
  if (type == 'h') {
    if (!dl_hash_owner(c, key, keylen, owners[0], sizeof(owners[0]))) return 0;
  } else if (type == 'w') {
    k = dl_rw_owners(c, key, keylen, name, namelen, owners);
  } else if (!dl_get(c, key, keylen, token, sizeof(token)) ||
             !dl_get_named(c, token, "dl", owners[0], sizeof(owners[0]))) {
    return 0;
  }
  for (int i = 0; i < k && (*budget)-- > 0; i++) {
    dl_hop *p = &hops[n];
    int ntype, r;
    const char *nkey, *nname;
    size_t nkeylen, nnamelen;
    memcpy(p->token, token, sizeof(token));
    memcpy(p->owner, owners[i], sizeof(p->owner));
    if (strcmp(p->owner, d->owner) == 0) {
      p->rec[0] = '\0';
      if (type != 's' || dl_rec_holds(d->rec, p->token)) return n + 1;
      continue;
    }
    if (!dl_get_named(c, p->owner, "dlw", p->rec, sizeof(p->rec)) ||
        (type == 's' && !dl_rec_holds(p->rec, p->token)) ||
        !dl_rec_parse(p->rec, &ntype, &nkey, &nkeylen, &nname, &nnamelen))
      continue;
    r = dl_walk_from(c, d, hops, n + 1, ntype, nkey, nkeylen, nname, nnamelen,
                     budget);
    if (r > 0) return r;
  }
  return 0;
}

static int dl_walk(hilock_client *c, const hilock__dl *d, dl_hop *hops) {
  int type, budget = 4 * DL_DEPTH;
  const char *key, *name;
  size_t keylen, namelen;
  if (!dl_rec_parse(d->rec, &type, &key, &keylen, &name, &namelen)) return 0;
  return dl_walk_from(c, d, hops, 0, type, key, keylen, name, namelen,
                      &budget);
}

/* Whether wait record a is younger than b (owners oa, ob break a tie). */
static int dl_younger(const char *a, const char *oa, const char *b,
                      const char *ob) {
  int64_t sa = 0, sb = 0;
  uint64_t na = 0, nb = 0;
  sscanf(a, "%" SCNd64 ":%" SCNu64, &sa, &na);
  sscanf(b, "%" SCNd64 ":%" SCNu64, &sb, &nb);
  if (sa != sb) return sa > sb;
  if (na != nb) return na > nb;
  return strcmp(oa, ob) > 0;
}

/* The name line of a record. */
static const char *dl_rec_name(const char *rec, int *len) {
  const char *p = strchr(rec, '\n'), *end;
  p = p != NULL ? strchr(p + 1, '\n') : NULL;
  p = p != NULL ? strchr(p + 1, '\n') : NULL;
  end = p != NULL ? strchr(p + 1, '\n') : NULL;
  if (end == NULL) {
    *len = 0;
    return "";
  }
  *len = (int)(end - p - 1);
  return p + 1;
}

int hilock__dl_check(hilock_client *c, hilock__err *e, hilock__dl *d) {
  dl_hop *first, *second;
  int n, m, victim = 1;
  if (!d->on) return HILOCK_OK;
  d->next_ms = hilock__now_ms() + (d->delay_ms / 2 > 0 ? d->delay_ms / 2 : 1);
  dl_register(c, d);
  if (!d->registered) return HILOCK_OK;
  first = calloc(2 * DL_DEPTH, sizeof(*first));
  if (first == NULL) return HILOCK_OK;
  second = first + DL_DEPTH;
  n = dl_walk(c, d, first);
  /* Confirm: the same hops again, read after the first walk ended. */
  m = n > 0 ? dl_walk(c, d, second) : 0;
  if (n == 0 || m != n || memcmp(first, second, sizeof(*first) * (size_t)n)) {
    free(first);
    return HILOCK_OK;
  }
  for (int i = 0; i + 1 < n && victim; i++)
    if (dl_younger(first[i].rec, first[i].owner, d->rec, d->owner))
      victim = 0;
  if (victim) {
    char names[HILOCK__ERR_MSG];
    size_t off = 0;
    int len;
    const char *name = dl_rec_name(d->rec, &len);
    off += (size_t)snprintf(names, sizeof(names), "%.*s", len, name);
    for (int i = 0; i + 1 < n && off < sizeof(names); i++) {
      name = dl_rec_name(first[i].rec, &len);
      off += (size_t)snprintf(names + off, sizeof(names) - off, " -> %.*s",
                              len, name);
    }
    if (off < sizeof(names)) {
      name = dl_rec_name(d->rec, &len);
      snprintf(names + off, sizeof(names) - off, " -> %.*s", len, name);
    }
    hilock__set_err(e, HILOCK_EDEADLK,
                    "deadlock: this wait closes the cycle %s (%d owners); "
                    "it is the youngest wait, so it gives up",
                    names, n);
  }
  free(first);
  return victim ? HILOCK_EDEADLK : HILOCK_OK;
}

void hilock__dl_end(hilock_client *c, hilock__dl *d) {
  size_t keylen;
  char *key;
  if (!d->registered) return;
  key = hilock__key(&c->rt, d->owner, d->ownerlen, "dlw", &keylen);
  if (key != NULL) {
    /* Only this wait's record: a later wait of the owner writes its own. */
    const char *argv[2] = {"DEL", key};
    size_t lens[2] = {3, keylen};
    dl_run(c, 2, argv, lens, NULL, 0);
  }
  free(key);
  d->registered = 0;
}
