/* The script runner: EVALSHA, falling back to EVAL on NOSCRIPT. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_ARGS 32

int hilock__script_run(hilock_client *c, hilock__err *e,
                       const hilock__script *s, int nkeys, const char **keys,
                       const size_t *keylens, int nargs, const char **args,
                       const size_t *arglens, redisReply **out) {
  const char *argv[3 + MAX_ARGS];
  size_t lens[3 + MAX_ARGS];
  char nk[24];
  int argc = 0, rc;

  if (nkeys < 0 || nargs < 0 || nkeys + nargs > MAX_ARGS)
    return hilock__set_err(e, HILOCK_EINVAL, "too many script arguments");
  argv[argc] = "EVALSHA";
  lens[argc++] = 7;
  argv[argc] = s->sha;
  lens[argc++] = 40;
  argv[argc] = nk;
  lens[argc++] = hilock__i64(nk, nkeys);
  for (int i = 0; i < nkeys; i++, argc++) {
    argv[argc] = keys[i];
    lens[argc] = keylens[i];
  }
  for (int i = 0; i < nargs; i++, argc++) {
    argv[argc] = args[i];
    lens[argc] = arglens[i];
  }
  hilock__err before = *e;
  rc = hilock__command_ex(c, e, argc, argv, lens, out, !s->once);
  if (rc != HILOCK__NOSCRIPT) return rc;
  /* Flushed cache or a restarted server: EVAL sends the source and loads
   * it, so the next EVALSHA hits again. */
  argv[0] = "EVAL";
  lens[0] = 4;
  argv[1] = s->src;
  lens[1] = s->len;
  rc = hilock__command_ex(c, e, argc, argv, lens, out, !s->once);
  if (rc == HILOCK__NOSCRIPT) rc = e->code = HILOCK_ESCRIPT;
  if (rc == HILOCK_OK) *e = before; /* a recovered NOSCRIPT is no failure */
  return rc;
}
