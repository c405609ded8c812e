/* Expiring lock (SET NX PX): the grant lapses after its TTL unless released.
 *
 * A holder that outlives its TTL loses the lock to the next one, and learns
 * it on release: HILOCK_ENOTOWNED, and nothing of the new holder's is
 * deleted.
 *
 *   expiring_lock [url]    url defaults to $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 */
#include <hilock/hilock.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "example.h"

int main(int argc, char **argv) {
  const char *url = redis_url(argc, argv);
  hilock_client *c = NULL;
  hilock_lock *order = NULL, *slow = NULL, *other = NULL;
  int rc, owned, status = 1;

  if (client_connect(url, &c) != HILOCK_OK) goto out;
  if (hilock_lock_new(c, "orders:42", 9, 5000, &order) != HILOCK_OK ||
      hilock_lock_new(c, "report", 6, 200, &slow) != HILOCK_OK ||
      hilock_lock_new(c, "report", 6, 5000, &other) != HILOCK_OK) {
    fprintf(stderr, "lock: %s\n", hilock_client_errmsg(c));
    goto out;
  }

  /* The usual pattern: wait up to 2 s for the lock, work, release. */
  if ((rc = hilock_hold_acquire(HILOCK_HOLD(order), 2000)) != HILOCK_OK) {
    report("acquire orders:42", order, rc);
    goto out;
  }
  printf("holding orders:42: fence=%" PRIu64 " validity=%" PRId64 " ms\n",
         hilock_hold_fence(HILOCK_HOLD(order)), hilock_hold_validity_ms(HILOCK_HOLD(order)));
  if ((rc = hilock_hold_release(HILOCK_HOLD(order))) != HILOCK_OK) {
    report("release orders:42", order, rc);
    goto out;
  }

  /* A holder that outlives its 200 ms TTL. */
  if ((rc = hilock_hold_try_acquire(HILOCK_HOLD(slow))) != HILOCK_OK) {
    report("try_acquire report", slow, rc);
    goto out;
  }
  sleep_ms(300);
  printf("after 300 ms the slow holder's validity is %" PRId64 " ms\n",
         hilock_hold_validity_ms(HILOCK_HOLD(slow)));
  if ((rc = hilock_hold_try_acquire(HILOCK_HOLD(other))) != HILOCK_OK) {
    report("try_acquire report (other)", other, rc);
    goto out;
  }
  printf("another holder got it after expiry: fence %" PRIu64 "\n",
         hilock_hold_fence(HILOCK_HOLD(other)));
  rc = hilock_hold_release(HILOCK_HOLD(slow));
  if (rc != HILOCK_ENOTOWNED) {
    report("stale release (expected ENOTOWNED)", slow, rc);
    goto out;
  }
  printf("stale release refused (%s): %s\n", hilock_err_name(rc),
         hilock_hold_errmsg(HILOCK_HOLD(slow)));
  if ((rc = hilock_hold_owned(HILOCK_HOLD(other), &owned)) != HILOCK_OK) {
    report("owned", other, rc);
    goto out;
  }
  printf("the new holder still owns it: %s\n", owned ? "yes" : "no");
  if ((rc = hilock_hold_release(HILOCK_HOLD(other))) != HILOCK_OK) {
    report("release report", other, rc);
    goto out;
  }
  status = owned ? 0 : 1;
out:
  hilock_hold_free(HILOCK_HOLD(order));
  hilock_hold_free(HILOCK_HOLD(slow));
  hilock_hold_free(HILOCK_HOLD(other));
  hilock_client_free(c);
  return status;
}
