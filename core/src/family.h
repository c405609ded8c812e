/* hilock internals, what a lock family's file writes alike (family.c):
 * constructor checks, the reentrant lock's layouts, the specs async.c
 * runs and a grant handed over (adopt.c). family.c also runs the public verbs (hilock_hold_acquire and the
 * others) through each family's table (hilock__family, holds.h). Uses
 * holds.h, script.h and wait.h (and the layers below them). */
#ifndef HILOCK_FAMILY_H
#define HILOCK_FAMILY_H

#include <stddef.h>
#include <stdint.h>

#include "base.h"
#include "holds.h"
#include "runtime.h"
#include "script.h"
#include "wait.h"

/* ## A grant handed over (adopt.c) ------------------------------------------
 * What hilock_hold_export writes and hilock_client_adopt reads. */
enum {
  HILOCK__GRANT_LOCK = 1,
  HILOCK__GRANT_FAIR = 2,
  HILOCK__GRANT_SEQ = 3,
  HILOCK__GRANT_MULTI = 4,
  HILOCK__GRANT_SEG = 5,
  HILOCK__GRANT_SEM = 6
};
typedef struct hilock__grant {
  int family; /* HILOCK__GRANT_* */
  int kind;   /* a lock's kind (hilock_lock_kind) */
  int64_t ttl_ms;
  int64_t delay_ms; /* the exporter's lock delay (0: none) */
  uint64_t fence;
  /* The family's own: a fair lock's ticket; a sequential lock's sequence;
   * a segmented lock's segment count (a) and held segment (b); a
   * semaphore's permit count. */
  int64_t a, b;
  const char *owner;
  size_t ownerlen;
  const char *prefix; /* the key prefix of the exporting client */
  size_t prefixlen;
  size_t n; /* names (a multi-key lock's, in its order; else one) */
  const char *const *names;
  const size_t *namelens;
  const uint64_t *fences; /* a multi-key lock's, one per name; else NULL */
  /* Room for one name (a family with one). */
  const char *one;
  size_t onelen;
} hilock__grant;
/* The name in key, a key hilock__key made for role with rt's prefix; its
 * length in *len. */
const char *hilock__key_name(const hilock__runtime *rt, const char *key,
                             size_t keylen, const char *role, size_t *len);
/* The family's handle for grant g on client c, before it is confirmed:
 * its own state set from g; owner, fence and holding are set by adopt.c.
 * Each family with a grant hook has one. */
struct hilock__hold;
int hilock__lock_adopt(hilock_client *c, const hilock__grant *g,
                       struct hilock__hold **out);
int hilock__fair_adopt(hilock_client *c, const hilock__grant *g,
                       struct hilock__hold **out);
int hilock__seq_adopt(hilock_client *c, const hilock__grant *g,
                      struct hilock__hold **out);
int hilock__multi_adopt(hilock_client *c, const hilock__grant *g,
                        struct hilock__hold **out);
int hilock__seg_adopt(hilock_client *c, const hilock__grant *g,
                      struct hilock__hold **out);
int hilock__sem_adopt(hilock_client *c, const hilock__grant *g,
                      struct hilock__hold **out);
/* The family name of a hold ("" for none): for the Python binding. */
const char *hilock__hold_family(const hilock_hold *h);
/* Its i-th name (*name, *len), and the family's own a (see hilock__grant):
 * returns how many names it has (0: its grants cannot be handed over). */
size_t hilock__hold_grant_name(const hilock_hold *h, size_t i,
                               const char **name, size_t *len, int64_t *a);
/* Decode text (len bytes) into g; *mem (free it) holds what g points to.
 * HILOCK_EINVAL with e saying why if it is not a well-formed grant. */
int hilock__grant_decode(const char *text, size_t len, hilock__grant *g,
                         void **mem, hilock__err *e);

/* What every lock constructor checks first: a client, a valid name and
 * TTL, and that the client is open. Failures are recorded in the client's
 * error (HILOCK_EINVAL for a NULL client, without a message). */
int hilock__new_check(hilock_client *client, const char *name, size_t namelen,
                      int64_t ttl_ms);
/* The same with the family's own check of its other arguments (check(e,
 * arg): HILOCK_OK, or the error set in e; NULL: none), made after the
 * name's and before the TTL's; has_ttl = 0: no TTL to check (a simple
 * lock). */
int hilock__new_check_with(hilock_client *client, const char *name,
                           size_t namelen, int has_ttl, int64_t ttl_ms,
                           int (*check)(hilock__err *e, const void *arg),
                           const void *arg);
/* A count a constructor takes (parties, permits, segments): its name, its
 * value and the most it may be (the least is 1). */
typedef struct hilock__count {
  const char *what;
  int64_t value, max;
} hilock__count;
/* hilock__new_check_with's check of a hilock__count: HILOCK_EINVAL
 * "<what> must be 1..<max>, got <value>" unless 1 <= value <= max
 * (family.c). */
int hilock__check_count(hilock__err *e, const void *count);

/* The start of a family's constructor: hilock__new_check, then a zeroed
 * handle of size bytes; NULL with *rc the error if either fails; _with:
 * after hilock__new_check_with (family.c). */
void *hilock__new_handle(hilock_client *client, const char *name,
                         size_t namelen, int64_t ttl_ms, size_t size,
                         int *rc);
void *hilock__new_handle_with(hilock_client *client, const char *name,
                              size_t namelen, int has_ttl, int64_t ttl_ms,
                              int (*check)(hilock__err *e, const void *arg),
                              const void *arg, size_t size, int *rc);

/* A new handle's keys: for each of the n (const char *role, char **key,
 * size_t *keylen) triples that follow n, *key = <prefix>{name}:<role>.
 * All or none: HILOCK_ENOMEM frees the keys made and the handle (a fresh
 * one, from hilock__new_handle: nothing else to free yet) (family.c). */
int hilock__family_keys(void *handle, hilock_client *client,
                        const char *name, size_t namelen, int n, ...);
/* The end of a family's free: hilock__hold_destroy(h), free() each of the
 * n pointers that follow n (its keys and buffers; NULL ones too), then
 * free(handle) (family.c). */
void hilock__family_free(hilock__hold *h, void *handle, int n, ...);

/* hilock__hold_init for a family's handle: its table fam, and the release
 * a closing client runs, close_run(handle) (family.c). */
void hilock__hold_init_family(hilock__hold *h, hilock_client *c,
                              const char *rkey, size_t rkeylen,
                              const hilock__script *renew_script,
                              int64_t ttl_ms, const hilock__family *fam,
                              hilock__run_fn close_run, void *handle);

/* The start of a queue family's acquire on hold h: HILOCK_EINVAL if the
 * handle still holds its grant (these locks are not reentrant), else drop
 * the last grant and draw the acquire's waiter id (the owner token if it is
 * granted) into id. */
int hilock__queue_begin(struct hilock__hold *h, char *id);

/* Redlock's acquire as a spec, for async.c (its arg: one acquire's
 * context, freed by done). -1 when out of memory. */
int hilock__redlock_spec(struct hilock_redlock *rl, hilock__acquire_spec *s);
/* A read-write lock's side as a spec, for async.c: its arg is the context
 * of one acquire, freed by done. -1 when out of memory. */
int hilock__rwlock_spec(struct hilock_rwlock *rw, int read,
                        hilock__acquire_spec *s);

/* A reentrant lock's layout (rlock.c): hilock's own, or one of Redisson's
 * (redisson.c: RLock, either side of RReadWriteLock). keys returns the lock hash's name (NULL: no memory) and
 * gives the fence key and the wake list (or channel) as malloc'd strings;
 * the scripts keep rlock_*.lua's keys, arguments and replies. */
typedef struct hilock__rlock_layout {
  char *(*keys)(const hilock__runtime *rt, const char *name, size_t namelen,
                char **fkey,
                size_t *fkeylen, char **wkey, size_t *wkeylen,
                size_t *keylen);
  const hilock__script *acquire, *release, *drop, *renew;
  const char *suffix; /* appended to the owner id ("" or Redisson's ":write") */
  /* A queue (Redisson's fair lock): a waiter that gives up runs withdraw
   * (KEYS lock, wake; ARGV owner, ttl), and waits on wake:<owner>. */
  const hilock__script *withdraw;
  /* hilock's own scripts: safe to resend (rlock_*.lua; Redisson's are sent
   * once). Acquire takes the call's nonce as ARGV[3] ("woken" moves to
   * ARGV[4]); release the nonce and the done marker's lifetime as ARGV[3]
   * and ARGV[4], the owner's done marker as KEYS[3]. */
  int resend;
  /* The wake key is Redisson's pub/sub channel (HILOCK__WAKE_CHANNEL). */
  int channel;
} hilock__rlock_layout;
struct hilock_rlock;
int hilock__rlock_new_with(hilock_client *client, const char *name,
                           size_t namelen, int64_t ttl_ms,
                           const hilock__rlock_layout *lay,
                           struct hilock_rlock **out);

/* A renewal as the watchdog makes it, for a family's renew verb: the
 * hold's renew_script on rkey and its xkeys (at most 3) with the owner and
 * TTL; > 0 renewed (validity set), else HILOCK_ENOTOWNED ("renew: "
 * notowned) and the hold marked lost. */
int hilock__hold_renew(hilock__hold *h, const char *notowned);

#endif /* HILOCK_FAMILY_H */
