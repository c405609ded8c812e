/* The script runner: EVALSHA through hilock__route (EVAL on NOSCRIPT);
 * for a granting script with wait_replicas, WAIT pipelined behind it; for
 * one that wakes waiters, PING before it. */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "route.h"
#include "script.h"
#include "wait.h"

#define MAX_ARGS 32 /* on the stack; more go on the heap */
#define LATER_MS 60000 /* HILOCK__RUN_LATER: sent again for this long */

int hilock__script_run(hilock_client *c, hilock__err *e,
                       const hilock__script *s, int nkeys, const char **keys,
                       const size_t *keylens, int nargs, const char **args,
                       const size_t *arglens, redisReply **out) {
  return hilock__script_run_as(
      c, e, s, (s->grant ? HILOCK__RUN_GRANT : 0) |
                   (s->wakes ? HILOCK__RUN_WAKES : 0),
      nkeys, keys, keylens, nargs, args, arglens, out);
}

int hilock__grant_unacked(hilock__err *e, const hilock__err *unacked,
                          int undo_rc, const hilock__err *undo) {
  /* e may be unacked or undo: format from copies. */
  hilock__err a = *unacked, u = *undo;
  if (undo_rc == HILOCK_OK)
    return hilock__set_err(e, HILOCK_ENOREPLICAS,
                           "%.180s; the grant was given back", a.msg);
  return hilock__set_err(e, HILOCK_ENOREPLICAS,
                         "%.120s; giving the grant back failed too (it lapses "
                         "at its TTL): %.80s",
                         a.msg, u.msg);
}

int hilock__queued_unacked(hilock__err *e, int rc, redisReply *r) {
  if (rc != HILOCK_ENOREPLICAS) return rc;
  if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
      r->element[0]->type == REDIS_REPLY_INTEGER &&
      r->element[0]->integer == 1) {
    hilock__err unacked = *e;
    freeReplyObject(r);
    return hilock__set_err(e, HILOCK_ENOREPLICAS,
                           "%.180s; the grant is given back", unacked.msg);
  }
  return HILOCK_OK; /* queued: the waiter re-checks anyway */
}

int hilock__script_run_as(hilock_client *c, hilock__err *e,
                          const hilock__script *s, int how, int nkeys,
                          const char **keys, const size_t *keylens, int nargs,
                          const char **args, const size_t *arglens,
                          redisReply **out) {
  const char *sargv[3 + MAX_ARGS], **argv = sargv;
  size_t slens[3 + MAX_ARGS], *lens = slens;
  char nk[24];
  int rc;
  /* A grant or renewal must reach wait_replicas replicas: WAIT follows on
   * the same connection, in the same round trip. */
  int wait = (how & HILOCK__RUN_GRANT) && c->rt.opts.wait_replicas > 0;
  unsigned flags = (wait ? HILOCK__SEND_WAIT : 0) |
                   (how & HILOCK__RUN_WAKES ? HILOCK__SEND_PING : 0) |
                   (s->once ? 0 : HILOCK__ROUTE_RESEND);
  long long acked = -1;
  hilock__req q;

  if (nkeys < 0 || nargs < 0 || nkeys > HILOCK__SCRIPT_ARGS_MAX - nargs)
    return hilock__set_err(e, HILOCK_EINVAL, "too many script arguments");
  if (nkeys + nargs > MAX_ARGS) {
    /* Many keys (a multi-key lock): argument arrays on the heap. */
    size_t n = 3 + (size_t)nkeys + (size_t)nargs;
    argv = malloc(n * sizeof(*argv));
    lens = malloc(n * sizeof(*lens));
    if (argv == NULL || lens == NULL) {
      free(argv);
      free(lens);
      return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
    }
  }
  hilock__req_script(&q, s, nkeys, keys, keylens, nargs, args, arglens, nk,
                     argv, lens);
  if (how & HILOCK__RUN_WAKES) hilock__hub_flush(c);
  rc = hilock__route(c, e, flags, &q, &acked);
  *out = q.reply;
  if (how & HILOCK__RUN_LATER) hilock__send_later(c, &q, rc, LATER_MS);
  if (argv != sargv) {
    free(argv);
    free(lens);
  }
  if (rc == HILOCK_OK && wait && acked < c->rt.opts.wait_replicas) {
    if (acked < 0)
      return hilock__set_err(e, HILOCK_ENOREPLICAS,
                             "%s: WAIT %d %lld failed: replication of the "
                             "write is unconfirmed",
                             s->name, c->rt.opts.wait_replicas,
                             (long long)c->rt.opts.wait_timeout_ms);
    return hilock__set_err(e, HILOCK_ENOREPLICAS,
                           "%s: %lld of %d replicas acknowledged the write "
                           "within %lld ms",
                           s->name, acked, c->rt.opts.wait_replicas,
                           (long long)c->rt.opts.wait_timeout_ms);
  }
  return rc;
}

int hilock__resend_init(hilock__resend *x, const hilock_client *c,
                        hilock__err *e, const char *key, size_t keylen,
                        const char *owner, size_t ownerlen) {
  static const char mid[] = ":done:";
  const int64_t cap = 86400000; /* a day: no sum overflows */
  int64_t rec = c->rt.opts.reconnect_ms, cmd = c->rt.opts.command_timeout_ms;
  int rc;
  memset(x, 0, sizeof(*x));
  rc = hilock__token(x->nonce, e);
  if (rc != HILOCK_OK || key == NULL) return rc;
  rec = rec < 0 ? 0 : rec > cap ? cap : rec;
  cmd = cmd < 0 ? 0 : cmd > cap ? cap : cmd;
  x->keeplen = hilock__i64(x->keep, rec + cmd + 1000);
  x->donelen = keylen + sizeof(mid) - 1 + ownerlen;
  x->done = malloc(x->donelen + 1);
  if (x->done == NULL) return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
  memcpy(x->done, key, keylen);
  memcpy(x->done + keylen, mid, sizeof(mid) - 1);
  memcpy(x->done + keylen + sizeof(mid) - 1, owner, ownerlen);
  x->done[x->donelen] = 0;
  return HILOCK_OK;
}

void hilock__resend_free(hilock__resend *x) {
  free(x->done);
  x->done = NULL;
}
