/* Simple lock (SET if absent, no expiry).
 *
 * A holder that dies without releasing keeps the lock held for good: an
 * operator must clear it with hilock_lock_force_release. Prefer an expiring
 * lock (hilock_lock_new) unless that is what you want.
 *
 *   simple_lock [url]      url defaults to $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 */
#include <hilock/hilock.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "example.h"

#define NAME "nightly-job"

int main(int argc, char **argv) {
  const char *url = redis_url(argc, argv), *key;
  hilock_client *c = NULL;
  hilock_lock *job = NULL, *dead = NULL, *waiter = NULL, *op = NULL;
  size_t keylen;
  int rc, deleted, status = 1;

  if (client_connect(url, &c) != HILOCK_OK) goto out;
  if (hilock_lock_new_simple(c, NAME, strlen(NAME), &job) != HILOCK_OK ||
      hilock_lock_new_simple(c, NAME, strlen(NAME), &dead) != HILOCK_OK ||
      hilock_lock_new_simple(c, NAME, strlen(NAME), &waiter) != HILOCK_OK ||
      hilock_lock_new_simple(c, NAME, strlen(NAME), &op) != HILOCK_OK) {
    fprintf(stderr, "lock: %s\n", hilock_client_errmsg(c));
    goto out;
  }

  /* The usual pattern: try once, do the work, release. */
  rc = hilock_hold_try_acquire(HILOCK_HOLD(job));
  if (rc == HILOCK_OK) {
    printf("running the job, fence %" PRIu64 "\n", hilock_hold_fence(HILOCK_HOLD(job)));
    if ((rc = hilock_hold_release(HILOCK_HOLD(job))) != HILOCK_OK) {
      report("release", job, rc);
      goto out;
    }
  } else if (rc == HILOCK_BUSY) {
    printf("another process runs the job\n");
  } else {
    report("try_acquire", job, rc);
    goto out;
  }

  /* A holder that dies: its handle goes away, the lock stays. */
  if ((rc = hilock_hold_try_acquire(HILOCK_HOLD(dead))) != HILOCK_OK) {
    report("try_acquire", dead, rc);
    goto out;
  }
  hilock_hold_free(HILOCK_HOLD(dead));
  dead = NULL;
  rc = hilock_hold_acquire(HILOCK_HOLD(waiter), 200);
  if (rc != HILOCK_BUSY) {
    report("acquire (expected busy)", waiter, rc);
    goto out;
  }
  printf("acquire while a dead holder keeps it: busy after 200 ms\n");

  /* The operator clears it. */
  key = hilock_hold_key(HILOCK_HOLD(op), &keylen);
  if ((rc = hilock_lock_force_release(op, &deleted)) != HILOCK_OK) {
    report("force_release", op, rc);
    goto out;
  }
  printf("operator force_release of %.*s: deleted=%d\n", (int)keylen, key,
         deleted);

  if ((rc = hilock_hold_acquire(HILOCK_HOLD(waiter), 200)) != HILOCK_OK) {
    report("acquire", waiter, rc);
    goto out;
  }
  printf("acquire now: granted, fence %" PRIu64 "\n",
         hilock_hold_fence(HILOCK_HOLD(waiter)));
  if ((rc = hilock_hold_release(HILOCK_HOLD(waiter))) != HILOCK_OK) {
    report("release", waiter, rc);
    goto out;
  }
  status = 0;
out:
  hilock_hold_free(HILOCK_HOLD(job));
  hilock_hold_free(HILOCK_HOLD(dead));
  hilock_hold_free(HILOCK_HOLD(waiter));
  hilock_hold_free(HILOCK_HOLD(op));
  hilock_client_free(c);
  return status;
}
