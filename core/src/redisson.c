/* Redisson compatibility: hilock locks that read and write the keys,
 * fields, TTLs and unlock messages of Redisson's (Java) locks, so that
 * Java services and hilock exclude each other on the same name.
 *
 * RLock: the lock is the hash <name> itself (no prefix, no hash tag
 * added), field <owner> -> hold count, PEXPIRE = the lease; the owner is
 * hilock's (client id:thread id), Redisson's is (uuid:thread id), so the
 * two never collide. The final release publishes "0" on
 * redisson_lock__channel:{<name>} (redisson_lock__channel:<name> when the
 * name holds a '{', as Redisson names it), which Redisson's waiters hear;
 * hilock's waiters wait on that same channel (hub.c treats it as a
 * Redisson channel: every message lets its waiters try again, and sleeps
 * stay bounded by the holder's TTL). The hold keeps no fence: Redisson's
 * RLock has no token to share, so the grant's fence is 0 (None in
 * Python). Renewal is the rlock's (a third of the lease: with the default
 * 30 s lease, Redisson's watchdog rule).
 *
 * RFairLock: the RLock's hash, plus redisson_lock_queue:{<name>} (waiters
 * in arrival order) and redisson_lock_timeout:{<name>} (each waiter's
 * deadline, ms); a release publishes only to the first waiter, on
 * redisson_lock__channel:{<name>}:<its owner>, where each hilock waiter
 * listens. A hilock waiter moves its deadline on at every attempt (a
 * lease past the holder's TTL), so only dead waiters are passed over, and
 * leaves the queue when its wait runs out (as Redisson's acquireFailed).
 * Deadlines are on the server's clock where Redisson uses its client's.
 *
 * RReadWriteLock: one hash <name> {mode -> read|write, reader owner ->
 * count, owner:write -> count}, and a key per read hold that expires with
 * its lease (the hash lives as long as the longest); both sides publish on
 * redisson_rwlock:{<name>} (a read release 0, a write release 1). Each side
 * is a reentrant lock handle with that side's scripts. */
#include <stdlib.h>
#include <string.h>

#include "hilock/rlock.h"
#include "base.h"
#include "family.h"
#include "holds.h"
#include "script.h"
#include "wait.h"
#include "scripts.h"

#define NAP_MAX_MS 500 /* a wait without the shared waiting looks this often */
#define NAP_SLICE_MS 100

static const char lock_channel[] = "redisson_lock__channel";
static const char rwlock_channel[] = "redisson_rwlock";

int hilock__redisson_nap(hilock_client *c, hilock__err *e, int64_t bound_ms) {
  int64_t end = hilock__now_ms() + (bound_ms < NAP_MAX_MS ? bound_ms : NAP_MAX_MS);
  for (;;) {
    int64_t left = end - hilock__now_ms();
    if (__atomic_load_n(&c->rt.closed, __ATOMIC_RELAXED))
      return hilock__set_err(e, HILOCK_ECLOSED, "client closed while waiting");
    if (c->rt.opts.interrupt && c->rt.opts.interrupt(c->rt.opts.interrupt_arg))
      return hilock__set_err(e, HILOCK_EINTR, "wait interrupted");
    if (left <= 0) return HILOCK_OK;
    hilock__sleep_ms(left < NAP_SLICE_MS ? left : NAP_SLICE_MS);
  }
}

/* Redisson's prefixName: prefix:{name}, or prefix:name when the name
 * already holds a '{' (it then hashes on its own tag, as the lock does). */
static char *prefixed(const char *prefix, const char *name, size_t namelen,
                      size_t *outlen) {
  size_t pl = strlen(prefix);
  int tagged = memchr(name, '{', namelen) != NULL;
  size_t total = pl + 1 + namelen + (tagged ? 0 : 2);
  char *k = malloc(total + 1), *p = k;
  if (k == NULL) return NULL;
  memcpy(p, prefix, pl);
  p += pl;
  *p++ = ':';
  if (!tagged) *p++ = '{';
  memcpy(p, name, namelen);
  p += namelen;
  if (!tagged) *p++ = '}';
  *p = '\0';
  *outlen = total;
  return k;
}

/* The hash is the name as given; the channel is Redisson's. The fence key
 * is never read (the acquire script keeps no fence): it names the hash
 * again, so every key stays in the lock's slot. */
static char *keys_on(const char *channel, const char *name, size_t namelen,
                     char **fkey, size_t *fkeylen, char **wkey,
                     size_t *wkeylen, size_t *keylen) {
  *fkey = hilock__dup(name, namelen);
  *fkeylen = namelen;
  *wkey = prefixed(channel, name, namelen, wkeylen);
  *keylen = namelen;
  return hilock__dup(name, namelen);
}

static char *rlock_keys(const hilock__runtime *rt, const char *name,
                        size_t namelen, char **fkey,
                        size_t *fkeylen, char **wkey, size_t *wkeylen,
                        size_t *keylen) {
  (void)rt; /* Redisson's names: no prefix */
  return keys_on(lock_channel, name, namelen, fkey, fkeylen, wkey, wkeylen,
                 keylen);
}

/* RReadWriteLock: both sides share one hash and one channel. */
static char *rwlock_keys(const hilock__runtime *rt, const char *name,
                        size_t namelen, char **fkey,
                         size_t *fkeylen, char **wkey, size_t *wkeylen,
                         size_t *keylen) {
  (void)rt;
  return keys_on(rwlock_channel, name, namelen, fkey, fkeylen, wkey, wkeylen,
                 keylen);
}

static const hilock__rlock_layout rlock_layout = {
    rlock_keys, &hilock__script_redisson_rlock_acquire,
    &hilock__script_redisson_rlock_release,
    &hilock__script_redisson_rlock_drop, &hilock__script_rlock_renew, "",
    NULL, 0, 1};

/* RFairLock: the RLock's hash and channel prefix; the queue's keys are
 * derived from the name in the scripts (lib/redisson.lua). */
static const hilock__rlock_layout fair_layout = {
    rlock_keys, &hilock__script_redisson_fair_acquire,
    &hilock__script_redisson_fair_release,
    &hilock__script_redisson_fair_drop, &hilock__script_rlock_renew, "",
    &hilock__script_redisson_fair_withdraw, 0, 1};

/* The read side renews every hold key of its owner too (Redisson's
 * ReadLockTask); the write side's field is owner:write, renewed as an
 * RLock's. */
static const hilock__rlock_layout read_layout = {
    rwlock_keys, &hilock__script_redisson_read_acquire,
    &hilock__script_redisson_read_release,
    &hilock__script_redisson_read_drop, &hilock__script_redisson_read_renew,
    "", NULL, 0, 1};

static const hilock__rlock_layout write_layout = {
    rwlock_keys, &hilock__script_redisson_write_acquire,
    &hilock__script_redisson_write_release,
    &hilock__script_redisson_write_drop, &hilock__script_rlock_renew,
    ":write", NULL, 0, 1};

/* Every constructor: a reentrant lock handle on one of the layouts. */
static int make(hilock_client *client, const char *name, size_t namelen,
                int64_t ttl_ms, const hilock__rlock_layout *lay,
                hilock_rlock **out) {
  HILOCK__CLIENT_CALL(client, out,
                      hilock__rlock_new_with(client, name, namelen, ttl_ms,
                                             lay, out));
}

int hilock_rlock_new_redisson_kind(hilock_client *client, const char *name,
                                   size_t namelen, hilock_redisson_kind kind,
                                   int64_t ttl_ms, hilock_rlock **out) {
  static const hilock__rlock_layout *const layouts[] = {
      &rlock_layout, &fair_layout, &read_layout, &write_layout};
  if ((unsigned)kind >= sizeof(layouts) / sizeof(layouts[0])) {
    if (out != NULL) *out = NULL;
    if (client == NULL || out == NULL) return HILOCK_EINVAL;
    return hilock__set_err(hilock__client_err(client), HILOCK_EINVAL,
                           "Redisson kind must be HILOCK_REDISSON_LOCK, "
                           "_FAIR_LOCK, _READ_LOCK or _WRITE_LOCK, got %d",
                           (int)kind);
  }
  return make(client, name, namelen, ttl_ms, layouts[kind], out);
}
