/* The script runner: EVALSHA, falling back to EVAL on NOSCRIPT. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_ARGS 32 /* on the stack; more go on the heap */

int hilock__script_run(hilock_client *c, hilock__err *e,
                       const hilock__script *s, int nkeys, const char **keys,
                       const size_t *keylens, int nargs, const char **args,
                       const size_t *arglens, redisReply **out) {
  const char *sargv[3 + MAX_ARGS], **argv = sargv;
  size_t slens[3 + MAX_ARGS], *lens = slens;
  char nk[24];
  int argc = 0, rc;

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
  if (rc != HILOCK__NOSCRIPT) goto done;
  /* Flushed cache or a restarted server: EVAL sends the source and loads
   * it, so the next EVALSHA hits again. */
  argv[0] = "EVAL";
  lens[0] = 4;
  argv[1] = s->src;
  lens[1] = s->len;
  rc = hilock__command_ex(c, e, argc, argv, lens, out, !s->once);
  if (rc == HILOCK__NOSCRIPT) rc = e->code = HILOCK_ESCRIPT;
  if (rc == HILOCK_OK) *e = before; /* a recovered NOSCRIPT is no failure */
done:
  if (argv != sargv) {
    free(argv);
    free(lens);
  }
  return rc;
}
