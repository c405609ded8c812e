/* A lock through Redis Sentinel, with replica acknowledgement.
 *
 *   sentinel [URL [REPLICAS [ROUNDS]]]
 *
 * URL: redis+sentinel://host:26379[,host:port...]/mymaster (or any hilock
 * URL; default from $HILOCK_URL / $REDIS_URL). REPLICAS (default 1): every
 * grant and renewal must reach that many replicas (WAIT), else it is given
 * back and reported as HILOCK_ENOREPLICAS. ROUNDS (default 5): lock cycles,
 * one a second; kill the master meanwhile and watch the client follow the
 * failover.
 *
 * Against a server with no replica every round reports HILOCK_ENOREPLICAS:
 * the lock would not survive a failover, so it is never claimed. */
#include <stdio.h>
#include <stdlib.h>

#include "example.h"

int main(int argc, char **argv) {
  const char *url = redis_url(argc, argv);
  int replicas = argc > 2 ? atoi(argv[2]) : 1;
  int rounds = argc > 3 ? atoi(argv[3]) : 5;
  hilock_options opts;
  hilock_client *c = NULL;
  hilock_lock *lk = NULL;
  int rc, granted = 0;

  hilock_options_init(&opts);
  opts.wait_replicas = replicas;
  opts.wait_timeout_ms = 500;
  opts.reconnect_ms = 15000; /* long enough for a failover */
  rc = hilock_client_new(url, &opts, &c);
  if (rc != HILOCK_OK) {
    fprintf(stderr, "connect %s: %s\n", url,
            c ? hilock_client_errmsg(c) : hilock_strerror(rc));
    hilock_client_free(c);
    return 1;
  }
  rc = hilock_lock_new(c, "sentinel:demo", 13, 5000, &lk);
  if (rc != HILOCK_OK) {
    fprintf(stderr, "lock: %s\n", hilock_strerror(rc));
    hilock_client_free(c);
    return 1;
  }
  hilock_hold_set_auto_renew(HILOCK_HOLD(lk), 1, 0, NULL, NULL);
  for (int i = 1; i <= rounds; i++) {
    rc = hilock_hold_acquire(HILOCK_HOLD(lk), 2000);
    if (rc == HILOCK_OK) {
      granted++;
      printf("round %d: granted, fence %llu (acknowledged by %d replica%s)\n",
             i, (unsigned long long)hilock_hold_fence(HILOCK_HOLD(lk)), replicas,
             replicas == 1 ? "" : "s");
      sleep_ms(300); /* the critical section */
      rc = hilock_hold_release(HILOCK_HOLD(lk));
      if (rc != HILOCK_OK) report("release", lk, rc);
    } else if (rc == HILOCK_ENOREPLICAS) {
      /* Not a grant: a failover now could hand the lock to someone else. */
      printf("round %d: not replicated, not held: %s\n", i,
             hilock_hold_errmsg(HILOCK_HOLD(lk)));
    } else {
      report("acquire", lk, rc);
    }
    sleep_ms(700);
  }
  printf("%d of %d rounds held the lock\n", granted, rounds);
  hilock_hold_free(HILOCK_HOLD(lk));
  hilock_client_free(c);
  return 0;
}
