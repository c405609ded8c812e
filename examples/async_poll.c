/* Acquire and release from an event loop (hilock/async.h).
 *
 * One thread runs a poll() loop. It starts 20 acquires of one lock at
 * once; they wait on the client's shared waiting connection, not on
 * threads of their own, and each one that is granted is released from the
 * loop, which lets the next in. The loop never blocks on the network: it
 * only waits on hilock_async_fd.
 *
 *   async_poll [url]       url defaults to $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 */
#include <hilock/hilock.h>
#include <inttypes.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "example.h"

#define NAME "report"
#define N 20

int main(int argc, char **argv) {
  const char *url = redis_url(argc, argv);
  hilock_client *c = NULL;
  hilock_async *a = NULL;
  hilock_lock *lk[N] = {NULL};
  int granted = 0, released = 0, status = 1;

  if (client_connect(url, &c) != HILOCK_OK) goto out;
  if (hilock_async_new(c, 0, &a) != HILOCK_OK) {
    fprintf(stderr, "async: %s\n", hilock_client_errmsg(c));
    goto out;
  }
  for (intptr_t i = 0; i < N; i++) {
    if (hilock_lock_new(c, NAME, strlen(NAME), 10000, &lk[i]) != HILOCK_OK) {
      fprintf(stderr, "lock: %s\n", hilock_client_errmsg(c));
      goto out;
    }
    /* data: which lock, to find it again when it finishes. */
    if (hilock_async_acquire(a, HILOCK_HOLD(lk[i]), 0, 30000, (void *)i, NULL) !=
        HILOCK_OK) {
      report("acquire", lk[i], -1);
      goto out;
    }
  }
  while (released < N) {
    struct pollfd p = {hilock_async_fd(a), POLLIN, 0};
    hilock_async_done d[8];
    size_t n;
    if (poll(&p, 1, 60000) <= 0) {
      fprintf(stderr, "nothing finished in a minute\n");
      goto out;
    }
    n = hilock_async_take(a, d, 8);
    for (size_t k = 0; k < n; k++) {
      hilock_lock *l = lk[(intptr_t)d[k].data];
      if (d[k].status != HILOCK_OK) {
        report(hilock_hold_held(HILOCK_HOLD(l)) ? "release" : "acquire", l,
               d[k].status);
        goto out;
      }
      if (hilock_hold_held(HILOCK_HOLD(l))) {
        /* Granted: the work would go here; then let the next one in. */
        printf("granted %2d: fence %" PRIu64 "\n", ++granted,
               hilock_hold_fence(HILOCK_HOLD(l)));
        if (hilock_async_release(a, HILOCK_HOLD(l), 0, d[k].data, NULL) !=
            HILOCK_OK) {
          report("release", l, -1);
          goto out;
        }
      } else {
        released++;
      }
    }
  }
  printf("%d acquires, one at a time, from one loop\n", granted);
  status = 0;
out:
  hilock_async_free(a);
  for (int i = 0; i < N; i++) hilock_hold_free(HILOCK_HOLD(lk[i]));
  hilock_client_free(c);
  return status;
}
