/* What one public call carries down to the transport, per thread: the
 * caller's deadline (a timeout bounds the whole call: connect, reconnect
 * and replies included), the undo of an ambiguous grant (a reply that did
 * not come in time), and the closing client's own release of its holds.
 *
 * An ambiguous grant is resolved on the connection that carried it: the
 * family's owner-checked release is queued behind the unanswered script on
 * the same socket, so the server runs it right after the script if it ever
 * runs the script, and a reaper thread reads both replies before closing
 * the socket. The caller is told at once; nobody is left holding a grant
 * that nobody owns. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "base.h"
#include "route.h"
#include "script.h"

#define tl_deadline_ms hilock__tl.deadline_ms
#define tl_undo hilock__tl.undo
#define tl_closer hilock__tl.closer

int64_t hilock__call_deadline(void) { return tl_deadline_ms; }

int64_t hilock__call_begin(int64_t deadline_ms) {
  int64_t outer = tl_deadline_ms;
  if (deadline_ms < tl_deadline_ms) tl_deadline_ms = deadline_ms;
  return outer;
}

void hilock__call_end(int64_t outer) { tl_deadline_ms = outer; }

int64_t hilock__call_lift(void) {
  int64_t outer = tl_deadline_ms;
  tl_deadline_ms = INT64_MAX;
  return outer;
}

int64_t hilock__budget(int64_t ms) {
  int64_t d = hilock__now_ms() + ms;
  return d < tl_deadline_ms ? d : tl_deadline_ms;
}

int64_t hilock__call_cut(int64_t deadline_ms) {
  int64_t cut;
  if (hilock__tl.cut_ms == NULL) return deadline_ms;
  cut = __atomic_load_n(hilock__tl.cut_ms, __ATOMIC_ACQUIRE);
  return cut < deadline_ms ? cut : deadline_ms;
}

int64_t hilock__io_ms(int64_t ms) {
  int64_t left;
  if (tl_deadline_ms == INT64_MAX) return ms;
  left = tl_deadline_ms - hilock__now_ms();
  if (left < 1) left = 1;
  return ms <= 0 || left < ms ? left : ms;
}

const hilock__undo *hilock__undo_arm(const hilock__undo *u) {
  const hilock__undo *outer = tl_undo;
  tl_undo = u;
  hilock__tl.undone = 0;
  return outer;
}

int hilock__undo_queued(void) { return hilock__tl.undone; }

void hilock__undo_disarm(const hilock__undo *outer) { tl_undo = outer; }

const hilock_client *hilock__closer_set(const hilock_client *c) {
  const hilock_client *was = tl_closer;
  tl_closer = c;
  return was;
}

int hilock__closing_here(const hilock_client *c) { return tl_closer == c; }

int hilock__client_usable(const hilock_client *c) {
  return hilock__runtime_usable(&c->rt);
}

int hilock__runtime_usable(const hilock__runtime *rt) {
  return !__atomic_load_n(&rt->closed, __ATOMIC_ACQUIRE) ||
         (rt->client != NULL && tl_closer == rt->client);
}

/* ## The reaper ---------------------------------------------------------- */

typedef struct reap {
  hilock__net *ctx;
  int owed;
  int64_t wait_ms;
} reap;

static void *reap_main(void *arg) {
  reap *r = arg;
  hilock__net_set_timeout(r->ctx, r->wait_ms);
  for (int i = 0; i < r->owed; i++) {
    void *reply = NULL;
    if (hilock__net_get_reply(r->ctx, &reply) != 0) break;
    freeReplyObject(reply);
  }
  hilock__net_free(r->ctx);
  free(r);
  return NULL;
}

/* Queue u's script behind the unanswered ones on k (1 if written). */
static int undo_append(hilock__conn *k, const hilock__undo *u) {
  const char *sargv[3 + 16], **argv = sargv;
  size_t slens[3 + 16], *lens = slens;
  char nk[24];
  int argc = 0, ok;
  if (u->nkeys + u->nargs > 16) { /* a multi-key lock's many names */
    argv = malloc((size_t)(3 + u->nkeys + u->nargs) * sizeof(*argv));
    lens = malloc((size_t)(3 + u->nkeys + u->nargs) * sizeof(*lens));
    if (argv == NULL || lens == NULL) {
      free(argv);
      free(lens);
      return 0;
    }
  }
  /* EVAL with the source: a flushed script cache must not fail the undo. */
  argv[argc] = "EVAL";
  lens[argc++] = 4;
  argv[argc] = u->script->src;
  lens[argc++] = u->script->len;
  argv[argc] = nk;
  lens[argc++] = hilock__i64(nk, u->nkeys);
  for (int i = 0; i < u->nkeys; i++, argc++) {
    argv[argc] = u->keys[i];
    lens[argc] = u->keylens[i];
  }
  for (int i = 0; i < u->nargs; i++, argc++) {
    argv[argc] = u->args[i];
    lens[argc] = u->arglens[i];
  }
  ok = hilock__net_append(k->ctx, argc, argv, lens) == 0;
  if (argv != sargv) {
    free(argv);
    free(lens);
  }
  return ok;
}

int hilock__undo_queue(hilock_client *c, hilock__conn *k, int owed) {
  const hilock__undo *u = tl_undo;
  int n = 0, ok = 1;
  reap *r;
  pthread_t t;
  pthread_attr_t attr;

  if (u == NULL || owed < 1) return 0;
  /* A reply wait that timed out leaves the connection flagged, not
   * broken: the socket and the reader are intact. */
  hilock__net_clear_timeout(k->ctx);
  if (k->ctx->err != HILOCK__NET_OK) return 0;
  for (const hilock__undo *x = u; ok && x != NULL; x = x->then, n++)
    ok = undo_append(k, x);
  /* Write it now: the socket is still open and in order. */
  if (ok) ok = hilock__net_flush(k->ctx) == 0;
  if (!ok) return 0;
  r = malloc(sizeof(*r));
  hilock__tl.undone = 1; /* written: the server runs it in order anyway */
  if (r == NULL) return 1;
  r->ctx = k->ctx;
  r->owed = owed + n;
  r->wait_ms = u->wait_ms > 0 ? u->wait_ms : 30000;
  if (c->rt.opts.command_timeout_ms > 0) r->wait_ms += c->rt.opts.command_timeout_ms;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &attr, reap_main, r) != 0) {
    pthread_attr_destroy(&attr);
    free(r);
    return 1;
  }
  pthread_attr_destroy(&attr);
  k->ctx = NULL; /* the reaper owns the socket now */
  return 1;
}
