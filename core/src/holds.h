/* hilock internals, the hold: one holder's grant as every lock family
 * keeps it (hold.c), its renewal (renewal.c) and the table a family gives
 * the public base handle (hilock/hold.h). Uses the base layer, the
 * runtime's structs and script.h. */
#ifndef HILOCK_HOLDS_H
#define HILOCK_HOLDS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "base.h"
#include "runtime.h"
#include "script.h"

/* Outcome of one renewal: the watchdog's own, or a hold's renew_fn. */
enum { HILOCK__RENEWED = 0, HILOCK__NOT_OWNED = 1, HILOCK__RENEW_FAILED = 2 };

/* ## Holds ---------------------------------------------------------------
 * One holder's grant, shared by every lock family: owner token, fencing
 * token, local validity, the process that got it, and its renewal. */

struct hilock__hold;
struct hilock__acquire_spec;
struct hilock__grant;

/* What the public base handle (hilock/hold.h) asks of a family. NULL
 * members take the shared behaviour. */
typedef struct hilock__family {
  const char *name; /* in messages: "a reentrant lock has no extend" */
  void (*free)(void *handle);
  int (*owned)(void *handle, int *owned);
  int (*locked)(void *handle, int *locked);
  /* The key reported by hilock_hold_key (NULL: the hold's rkey). */
  const char *(*key)(const void *handle, size_t *len);
  /* How the family acquires and releases, for callers that drive the
   * waiting themselves (async.c); NULL: not served there. */
  void (*acquire_spec)(void *handle, struct hilock__acquire_spec *s);
  /* The verbs, behind hilock_hold_acquire and the others (family.c), on a
   * handle that is not NULL. acquire NULL: hilock__hold_acquire (the
   * waiting of acquire_spec); try_acquire NULL: one counted attempt of
   * acquire_spec (a queue family's, or one with a done step: acquire with
   * wait 0); release NULL: the hold's release script (its close_run), its
   * reply read by hilock__hold_released with release_array and notowned;
   * extend or renew NULL: the family has none (HILOCK_ENOTSUP). async.c
   * runs release, extend and renew too. */
  int (*acquire)(void *handle, int64_t wait_ms);
  int (*try_acquire)(void *handle);
  int (*release)(void *handle);
  int release_array;
  const char *notowned;
  int (*extend)(void *handle, int64_t ms, int replace);
  int (*renew)(void *handle);
  /* Settings some families have (NULL: HILOCK_ENOTSUP, and 0 read):
   * the lock delay (its ms kept in the hold: hilock__hold_set_delay) and a
   * line's heartbeat window. */
  int (*set_delay)(void *handle, int64_t ms);
  int (*set_heartbeat)(void *handle, int64_t ms);
  int64_t (*heartbeat_ms)(const void *handle);
  /* The owner is the caller (reentrant, read-write): an async operation
   * names its own (see hilock__caller). */
  int by_caller;
  /* Handing the grant over (adopt.c): what the family's grant needs
   * besides its owner, fence and TTL, filled into g (its family code, and
   * pointers into the handle). NULL: its grants cannot be handed over. */
  void (*grant)(const void *handle, struct hilock__grant *g);
} hilock__family;

/* A family's release (the table's, or the shared one), on a handle that
 * begins with its hold: hilock_hold_release without the checks. */
int hilock__family_release(void *handle);

/* A family's script run on its handle (arg): the reply in *r. */
typedef int (*hilock__run_fn)(void *arg, hilock__err *e, redisReply **r);

typedef struct hilock__hold {
  hilock__err err; /* the handle's one error slot (Redlock's too) */
  const hilock__family *fam; /* set for a public handle's hold */
  /* Threads may share the handle (rlock, rwlock): this guards the hold's
   * grant fields, and its calls' errors are kept per thread (err is then
   * scratch for the shared layer; see hilock__hold_err). NULL: one thread
   * at a time. */
  pthread_mutex_t *guard;
  uint64_t serial;
  hilock_client *client; /* its connections (NULL: Redlock's own) */
  hilock__runtime *rt;   /* its renewal, options and lifetime */
  const char *rkey; /* the key renewal extends (owned by the family) */
  size_t rkeylen;
  const hilock__script *renew_script; /* KEYS[1] rkey, ARGV owner, ttl */
  /* More keys the renew script gets after rkey (KEYS[2..]), all renewed
   * together (a multi-key lock's names, a reader's count hash). NULL/0 if
   * none. */
  const char *const *xkeys;
  const size_t *xkeylens;
  int nxkeys;
  /* The lock delay (0: none) and, for a family with one marker, the
   * marker as the renewal's extra key (xkeys while delay_ms > 0). */
  int64_t delay_ms;
  const char *mark;
  size_t marklen;
  int64_t ttl_ms;   /* 0: no expiry */
  char owner[HILOCK__TOKEN_LEN + 32]; /* what the scripts compare: a random
                                         token, or client id + thread id */
  size_t ownerlen;
  int held;
  pid_t pid;         /* process that got the grant */
  uint64_t fence;
  /* Guarded by client->wd.mu while renewal is registered: */
  int64_t valid_until_us;
  /* When an extension and a renewal were last recorded: one that overlaps
   * the other may have run first on the server, so the validity after it
   * is the smaller of the two (never an overestimate). */
  int64_t ext_done_us, ren_done_us;
  int64_t since_us; /* start of the grant (not of a re-entry): max hold */
  int lost;
  /* The last grant ended lost (its release found it gone, or the client
   * was closed): reported lost until the next grant. */
  int gone;
  int close_lost; /* lost because the client was closed */
  int told;       /* lost_fn has run for this grant's loss */
  int closing;    /* the closing thread is releasing it: cancellers wait */
  struct hilock__hold *live_prev, *live_next; /* the client's grants */
  int live;
  /* The family's owner-checked release of the current grant (as for
   * hilock__hold_release), run when the client closes; NULL: the grant
   * lapses at its TTL. Reads only the keys and owner. */
  int (*close_run)(void *arg, hilock__err *e, redisReply **r);
  void *close_arg;
  hilock__renewal ren;
  /* Renewal settings */
  int auto_renew;
  int64_t max_hold_ms;
  void (*lost_fn)(void *arg);
  void *lost_arg;
  /* Optional: renew through the family's own connections instead of the
   * watchdog's pipelined renew_script (Redlock renews on a majority of its
   * nodes). Runs on the renewal thread, outside the watchdog's mutex, and
   * returns HILOCK__RENEWED, HILOCK__NOT_OWNED or HILOCK__RENEW_FAILED. */
  int (*renew_fn)(struct hilock__hold *h, void *arg);
  void *renew_arg;
  /* With deadlock detection: the caller the grant went to (its owner for
   * the detector, deadlock.c). */
  long dl_caller;
} hilock__hold;

/* Initialise h for client c (takes a client reference). */
void hilock__hold_init(hilock__hold *h, hilock_client *c, const char *rkey,
                       size_t rkeylen, const hilock__script *renew_script,
                       int64_t ttl_ms);
/* The same for a front end with its own connections: runtime rt only
 * (h->client NULL; the hold renews through its renew_fn). */
void hilock__hold_init_rt(hilock__hold *h, hilock__runtime *rt,
                          const char *rkey, size_t rkeylen,
                          const hilock__script *renew_script, int64_t ttl_ms);
void hilock__hold_destroy(hilock__hold *h);

/* Where a failed call on the handle records its error for the caller: the
 * hold's err, or for a handle threads share the calling thread's slot. */
hilock__err *hilock__hold_err(hilock__hold *h);
/* Before an operation on a grant: HILOCK_EFORKED in a forked child,
 * HILOCK_ENOTOWNED if there is no grant. */
int hilock__hold_check(hilock__hold *h, const char *verb);
/* Record a grant made at start_us with fence; registers renewal if asked.
 */
int hilock__hold_granted(hilock__hold *h, int64_t start_us, uint64_t fence);
/* A grant handed over to h (owner token already in h), with fence: held
 * by this process from now, valid for a TTL until its confirmation sets
 * the validity (adopt.c); registers renewal if asked. */
int hilock__hold_adopted(hilock__hold *h, uint64_t fence);
/* Forget the grant (cancels renewal first). */
void hilock__hold_drop(hilock__hold *h);
/* Mark the grant lost (not owned any more) and cancel renewal. */
void hilock__hold_lost(hilock__hold *h);
/* Before a new grant: a grant of this process whose validity ran out
 * unrenewed is lost, reported as renewal reports one (once per grant). */
void hilock__hold_lapse(hilock__hold *h);
/* The release of the grant ran and it ends; gone: the server no longer
 * held it, a loss (reported once per grant) that hilock_hold_lost shows
 * until the next grant. */
void hilock__hold_ended(hilock__hold *h, int gone);
/* Run h's lost_fn, once per grant, whoever found the loss (the watchdog, a
 * call that met it, closing the client); never with rt->wd.mu held. */
void hilock__hold_tell_lost(hilock__hold *h);
/* A successful extension to ttl_ms measured from start_us. If a renewal
 * was recorded since start_us, the server may have run it after this
 * extension: the validity becomes the smaller of the two. */
void hilock__hold_extended(hilock__hold *h, int64_t start_us, int64_t ttl_ms);
int64_t hilock__hold_validity_ms(const hilock__hold *h);
int hilock__hold_is_lost(const hilock__hold *h);
/* What hilock_hold_lost says: the grant was found lost, or the last one's
 * release found it gone. */
int hilock__hold_reports_lost(const hilock__hold *h);
/* Clock-drift allowance for a TTL: 1% + 2 ms, in us. */
int64_t hilock__hold_drift_us(int64_t ttl_ms);

/* For families whose holder key (h->rkey) is a string holding the owner
 * token (lock, fair lock):
 * extend: set (replace) or add to the TTL while owned; HILOCK_ENOTOWNED
 *         (and the hold marked lost) if not.
 * owned:  GET rkey == owner; another value or none marks the hold lost.
 * Both act only on a grant of this process. */
int hilock__hold_extend(hilock__hold *h, int64_t ms, int replace);
int hilock__hold_owned(hilock__hold *h, int *owned);
/* A family's set_delay: ms in 0..HILOCK_TTL_MAX_MS, set before a grant,
 * kept in h->delay_ms. With a marker key (mark not NULL), renewals and
 * extensions push it along while ms > 0 (h's xkeys). */
int hilock__hold_set_delay(hilock__hold *h, int64_t ms, const char *mark,
                           size_t marklen);
/* The release every family shares: check the hold, stop its renewal and
 * run(arg, &h->err, out), the family's owner-checked release script. If it
 * could not run, renewal resumes (still ours as far as we know: the caller
 * may retry) and its status is returned; else *out holds the script's
 * reply and the caller ends the grant (hilock__hold_ended). */
int hilock__hold_release(hilock__hold *h,
                         int (*run)(void *arg, hilock__err *e, redisReply **r),
                         void *arg, redisReply **out);
/* Read and free a release reply and end the grant: 1 (an integer; with
 * array, an array's first element) released; another number is
 * HILOCK_ENOTOWNED ("release: " notowned), the grant lost; any other shape
 * HILOCK_EPROTO. */
int hilock__hold_released(hilock__hold *h, redisReply *r, int array,
                          const char *notowned);
/* The two above: run the family's release and read its reply. */
int hilock__hold_release_reply(hilock__hold *h,
                               int (*run)(void *arg, hilock__err *e,
                                          redisReply **r),
                               void *arg, int array, const char *notowned);
/* A grant (owner token already in h) that too few replicas acknowledged:
 * record it just long enough for the family's release(arg) to give it
 * back, then forget it. Returns HILOCK_ENOREPLICAS, h->err saying why and
 * whether the give-back worked. */
int hilock__hold_give_back(hilock__hold *h, const hilock__err *unacked,
                           int (*release)(void *arg), void *arg);
/* A grant attempt, as every family with one owner token per grant makes
 * it (lock, semaphore, multi-key and segmented locks):
 *   hilock__attempt_begin   refuse while this process holds a valid grant
 *                           (held_msg says so), forget a lapsed one, and
 *                           draw a fresh owner token into h->owner;
 *   hilock__attempt_run     send the grant script with undo armed (a reply
 *                           that comes too late is released behind it);
 *                           WAIT's verdict is kept in a, not returned;
 *   hilock__attempt_end     act on the reply's verdict: 1 granted (with its
 *                           fence; given back if too few replicas saw it),
 *                           0 busy (*pttl = busy_pttl), -1 unreadable
 *                           (HILOCK_EPROTO: never a grant). Frees r. */
typedef struct hilock__attempt {
  int64_t start;      /* when the request went out */
  int replicated;     /* WAIT saw enough replicas (1 without WAIT) */
  hilock__err unacked; /* why not, when it did not */
} hilock__attempt;
int hilock__attempt_begin(hilock__hold *h, const char *held_msg);
int hilock__attempt_run(hilock__hold *h, hilock__attempt *a,
                        const hilock__undo *undo, const hilock__script *s,
                        int nkeys, const char **keys, const size_t *keylens,
                        int nargs, const char **args, const size_t *arglens,
                        redisReply **r);
int hilock__attempt_end(hilock__hold *h, const hilock__attempt *a,
                        redisReply *r, int verdict, uint64_t fence,
                        int64_t busy_pttl, int64_t *pttl,
                        int (*release)(void *arg), void *arg,
                        const char *script);
/* Renewal settings for the hold; applied to a current grant at once. */
int hilock__hold_set_auto_renew(hilock__hold *h, int enable,
                                int64_t max_hold_ms, hilock_lost_fn on_lost,
                                void *arg);

/* Renewal thread (renewal.c). */
int hilock__renewal_register(hilock__hold *h);
void hilock__renewal_cancel(hilock__hold *h);
/* A grant lost to hilock_client_free: drop it and return HILOCK_ECLOSED
 * ("verb: ..."), else HILOCK_OK. */
int hilock__hold_released_by_close(hilock__hold *h, const char *verb);

#endif /* HILOCK_HOLDS_H */
