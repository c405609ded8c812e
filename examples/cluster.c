/* Locks on a Redis Cluster: the same calls as on one server, with a
 * redis+cluster:// URL. Each lock's keys share the hash tag {name}, so each
 * lock lives on the master of its slot; the client routes every call there,
 * follows MOVED/ASK, and finds a promoted replica after a failover within
 * its reconnect budget.
 *
 *   ./cluster redis+cluster://127.0.0.1:7000,127.0.0.1:7001
 *
 * Also runs against a plain redis:// URL (everything is then on one server). */
#include "example.h"

#include <string.h>

int main(int argc, char **argv) {
  const char *url = redis_url(argc, argv);
  static const char *const names[] = {"orders:1", "orders:2", "orders:3",
                                      "invoices:7", "reports", "inventory"};
  enum { N = sizeof(names) / sizeof(names[0]) };
  hilock_lock *locks[N] = {0};
  hilock_options o;
  hilock_client *c = NULL;
  int rc, failed = 0;

  hilock_options_init(&o);
  o.reconnect_ms = 20000; /* longer than a failover (node timeout + election) */
  rc = hilock_client_new(url, &o, &c);
  if (rc != HILOCK_OK) {
    fprintf(stderr, "connect %s: %s (%s)\n", url,
            c ? hilock_client_errmsg(c) : hilock_strerror(rc),
            hilock_err_name(rc));
    hilock_client_free(c);
    return 1;
  }
  printf("%s: %s\n", url,
         hilock_client_is_cluster(c) ? "a Redis Cluster" : "one server");
  if (hilock_client_ping(c) != HILOCK_OK) {
    fprintf(stderr, "ping: %s\n", hilock_client_errmsg(c));
    failed = 1;
  }

  /* Hold six locks at once; on a cluster they spread over the masters. */
  for (int i = 0; i < N && !failed; i++) {
    size_t klen;
    rc = hilock_lock_new(c, names[i], strlen(names[i]), 10000, &locks[i]);
    if (rc == HILOCK_OK) rc = hilock_hold_acquire(HILOCK_HOLD(locks[i]), 5000);
    if (rc != HILOCK_OK) {
      report(names[i], locks[i], rc);
      failed = 1;
      break;
    }
    printf("  holding %-12s key %-26s fence %llu\n", names[i],
           hilock_hold_key(HILOCK_HOLD(locks[i]), &klen),
           (unsigned long long)hilock_hold_fence(HILOCK_HOLD(locks[i])));
  }
  for (int i = 0; i < N; i++) {
    if (locks[i] != NULL && hilock_hold_held(HILOCK_HOLD(locks[i])) &&
        (rc = hilock_hold_release(HILOCK_HOLD(locks[i]))) != HILOCK_OK) {
      report("release", locks[i], rc);
      failed = 1;
    }
    hilock_hold_free(HILOCK_HOLD(locks[i]));
  }
  hilock_client_free(c);
  if (!failed) printf("all released\n");
  return failed;
}
