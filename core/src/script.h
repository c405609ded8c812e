/* hilock internals, scripts as the lock families run them (script.c,
 * call.c, family.c): a script and its run through the dispatcher, a plain
 * command (route.c), WAIT's verdict, the resend marker and the undo of an
 * ambiguous grant. Uses the base layer only; what it runs on goes through
 * route.h in script.c. */
#ifndef HILOCK_SCRIPT_H
#define HILOCK_SCRIPT_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "base.h"

/* ## Scripts ------------------------------------------------------------ */

typedef struct hilock__script {
  const char *name;
  const char *src;
  size_t len;
  const char *sha; /* 40 hex chars */
  int once;        /* not safe to resend (the file says "-- @once") */
  int grant;       /* grants or renews a hold ("-- @grant"): followed by
                      WAIT when opts.wait_replicas > 0 */
  int wakes;       /* may wake waiters ("-- @wakes"): PING goes first */
} hilock__script;

/* ## The undo of an ambiguous grant (call.c) ----------------------------- */

/* The owner-checked release that undoes a grant script whose reply did not
 * come (KEYS and ARGV as the script takes them). */
typedef struct hilock__undo {
  const struct hilock__script *script;
  int nkeys, nargs;
  const char *const *keys;
  const size_t *keylens;
  const char *const *args;
  const size_t *arglens;
  int64_t wait_ms; /* how long the reaper waits for the replies (the TTL) */
  const struct hilock__undo *then; /* a second script queued after it */
} hilock__undo;
/* Arm u for the grant script this thread sends next; returns the outer
 * undo, to give back to hilock__undo_disarm. */
const hilock__undo *hilock__undo_arm(const hilock__undo *u);
void hilock__undo_disarm(const hilock__undo *outer);
/* 1 if the undo armed last on this thread went out behind its unanswered
 * script (the caller's own clean-up would only wait on the same server). An
 * event loop's step starts at 0, so a leave in a later step sends its own. */
int hilock__undo_queued(void);

/* Most keys + args of one script run (a multi-key lock's grant of
 * HILOCK_MULTI_LOCK_MAX = 1024 names passes 4 keys per name and 5 args). */
#define HILOCK__SCRIPT_ARGS_MAX 4200

/* EVALSHA the script; on NOSCRIPT, EVAL it (which also loads it). Keys only
 * through keys[], values only through args[]; at most
 * HILOCK__SCRIPT_ARGS_MAX in all (HILOCK_EINVAL beyond).
 * For a @grant script with opts.wait_replicas > 0, WAIT follows on the same
 * connection; if fewer replicas acknowledged, the result is
 * HILOCK_ENOREPLICAS with the script's reply STILL in *out (the caller
 * frees it, and undoes a grant or does not count a renewal). */
int hilock__script_run(hilock_client *c, hilock__err *e,
                       const hilock__script *s, int nkeys, const char **keys,
                       const size_t *keylens, int nargs, const char **args,
                       const size_t *arglens, redisReply **out);

/* A plain command through the dispatcher (hilock__route in route.c), resent
 * after a broken connection; the reply in *out. */
int hilock__command(hilock_client *c, hilock__err *e, int argc,
                    const char **argv, const size_t *lens, redisReply **out);

/* What a resendable release of the reentrant or read-write lock carries
 * besides its owner (core/scripts/lib/resend.lua): the call's nonce, the
 * owner's done marker key (<side key>:done:<owner>) and how long the marker
 * lives. The nonce is 128 bits from getrandom(2), as owner tokens are: the
 * owner id is shared by every handle of the name on the thread (and by
 * async operations' owners), so a per-hold counter would need state shared
 * between them; a random nonce is unique with none, across handles, forks
 * and processes. */
typedef struct hilock__resend {
  char nonce[HILOCK__TOKEN_LEN + 1];
  char keep[24];
  size_t keeplen;
  char *done; /* malloc'd (NULL for an acquire's, which needs no marker) */
  size_t donelen;
} hilock__resend;
/* Draw x's nonce; with key != NULL also its done marker key for owner and
 * its lifetime: the client's resend window (reconnect_ms and one
 * command_timeout_ms) and a second more. HILOCK_OK, or the error in e. */
int hilock__resend_init(hilock__resend *x, const hilock_client *c,
                        hilock__err *e, const char *key, size_t keylen,
                        const char *owner, size_t ownerlen);
void hilock__resend_free(hilock__resend *x);

/* The same for a script that serves several operations: how this call
 * runs, whatever the file says: HILOCK__RUN_GRANT as @grant (WAIT
 * follows), HILOCK__RUN_WAKES as @wakes (PING goes first). */
#define HILOCK__RUN_GRANT 1
#define HILOCK__RUN_WAKES 2
/* HILOCK__RUN_LATER: a failure that may pass (a slot half migrated past
 * the call's time, a server out of reach, no reply in time) leaves the
 * request to the renewal thread, which sends it again for up to a minute:
 * for a waiter leaving its line (scripts safe to run twice). */
#define HILOCK__RUN_LATER 4
int hilock__script_run_as(hilock_client *c, hilock__err *e,
                          const hilock__script *s, int how, int nkeys,
                          const char **keys, const size_t *keylens, int nargs,
                          const char **args, const size_t *arglens,
                          redisReply **out);
/* For a script that grants or queues a waiter ({1, ...} when granted: the
 * fair and sequential locks): rc from running it. On HILOCK_ENOREPLICAS a
 * grant stays an error, saying it is given back (r is freed: the caller's
 * leave gives it back); a queued reply goes on as HILOCK_OK, since only a
 * grant needs confirming. Other rc are returned as they are. */
int hilock__queued_unacked(hilock__err *e, int rc, redisReply *r);
/* A grant the replicas did not acknowledge was given back (undo_rc: the
 * result of giving it back): e gets the ENOREPLICAS message of unacked,
 * saying so; returns HILOCK_ENOREPLICAS. */
int hilock__grant_unacked(hilock__err *e, const hilock__err *unacked,
                          int undo_rc, const hilock__err *undo);

/* After an extend or renew script whose status *rc is HILOCK_ENOREPLICAS
 * (callers test that first, since r is valid only then) and whose reply r
 * says it extended (done): 1 if it was extended on the master only (r is
 * freed, the validity must not be extended, *rc is to be reported); else
 * 0, with *rc turned into HILOCK_OK: a refusal, which the reply tells
 * (family.c). */
int hilock__extended_unacked(int *rc, redisReply *r, int done);

#endif /* HILOCK_SCRIPT_H */
