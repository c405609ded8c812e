/* Redlock: one lock over several independent Redis masters.
 *
 * The same key and token go to every node at once; the lock is granted
 * only when a majority took it in time. A second holder is refused, a
 * majority confirms every release and extension, and when too few nodes
 * answer the error names each of them.
 *
 *   redlock [url ...]      the nodes; default $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 (a single node) */
#include <hilock/hilock.h>
#include <inttypes.h>
#include <stdio.h>

#include "example.h"

int main(int argc, char **argv) {
  const char *one[1];
  const char *const *urls;
  size_t n;
  hilock_redlock *a = NULL, *b = NULL;
  int rc, status = 1;

  if (argc > 1) {
    urls = (const char *const *)(argv + 1);
    n = (size_t)(argc - 1);
  } else {
    one[0] = redis_url(argc, argv);
    urls = one;
    n = 1;
  }
  rc = hilock_redlock_new(urls, n, "report", 6, 10000 /* ttl ms */, NULL, &a);
  if (rc == HILOCK_OK)
    rc = hilock_redlock_new(urls, n, "report", 6, 10000, NULL, &b);
  if (rc != HILOCK_OK) {
    fprintf(stderr, "redlock: %s\n",
            hilock_hold_errmsg(HILOCK_HOLD(a && hilock_hold_errcode(HILOCK_HOLD(a)) ? a : b)));
    goto out;
  }
  printf("%zu nodes, a majority is %zu; each node has %" PRId64
         " ms to answer\n",
         hilock_redlock_nodes(a), hilock_redlock_quorum(a),
         hilock_redlock_node_timeout_ms(a));

  rc = hilock_hold_acquire(HILOCK_HOLD(a), 5000);
  if (rc != HILOCK_OK) {
    fprintf(stderr, "acquire: %s\n",
            rc < 0 ? hilock_hold_errmsg(HILOCK_HOLD(a)) : hilock_strerror(rc));
    goto out;
  }
  printf("a holds it: fence %" PRIu64 ", %" PRId64 " ms of validity left\n",
         hilock_hold_fence(HILOCK_HOLD(a)), hilock_hold_validity_ms(HILOCK_HOLD(a)));

  rc = hilock_hold_try_acquire(HILOCK_HOLD(b));
  printf("b tries too: %s (%s)\n", hilock_err_name(rc),
         hilock_hold_errmsg(HILOCK_HOLD(b)));

  /* Work that runs long asks for more time; it counts only if a majority
   * confirms before the current validity runs out. */
  rc = hilock_hold_extend(HILOCK_HOLD(a), 20000, 1);
  printf("a extends to 20 s: %s, validity %" PRId64 " ms\n",
         hilock_err_name(rc), hilock_hold_validity_ms(HILOCK_HOLD(a)));

  rc = hilock_hold_release(HILOCK_HOLD(a));
  printf("a releases: %s\n", hilock_err_name(rc));
  rc = hilock_hold_try_acquire(HILOCK_HOLD(b));
  printf("b tries again: %s, fence %" PRIu64 "\n", hilock_err_name(rc),
         hilock_hold_fence(HILOCK_HOLD(b)));
  if (rc == HILOCK_OK) rc = hilock_hold_release(HILOCK_HOLD(b));
  status = rc == HILOCK_OK ? 0 : 1;
out:
  hilock_hold_free(HILOCK_HOLD(a));
  hilock_hold_free(HILOCK_HOLD(b));
  return status;
}
