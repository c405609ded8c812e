/* Lease: hold a resource for as long as you keep renewing it.
 *
 * Work in steps shorter than the lease and renew between them; check
 * hilock_hold_validity_ms(HILOCK_HOLD(no round trip)) before anything that must happen
 * under the lock. A lease that already lapsed can not be renewed.
 *
 *   lease_lock [url]       url defaults to $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 */
#include <hilock/hilock.h>
#include <inttypes.h>
#include <stdio.h>

#include "example.h"

int main(int argc, char **argv) {
  const char *url = redis_url(argc, argv);
  hilock_client *c = NULL;
  hilock_lock *leader = NULL, *late = NULL;
  int rc, owned, status = 1;

  if (client_connect(url, &c) != HILOCK_OK) goto out;
  if (hilock_lock_new_lease(c, "leader", 6, 1000, &leader) != HILOCK_OK ||
      hilock_lock_new_lease(c, "cleanup", 7, 100, &late) != HILOCK_OK) {
    fprintf(stderr, "lease: %s\n", hilock_client_errmsg(c));
    goto out;
  }

  if ((rc = hilock_hold_acquire(HILOCK_HOLD(leader), 2000)) != HILOCK_OK) {
    report("acquire leader", leader, rc);
    goto out;
  }
  printf("leader: fence %" PRIu64 ", lease %" PRId64 " ms, validity %" PRId64
         " ms\n", hilock_hold_fence(HILOCK_HOLD(leader)), hilock_hold_ttl_ms(HILOCK_HOLD(leader)),
         hilock_hold_validity_ms(HILOCK_HOLD(leader)));
  for (int step = 0; step < 3; step++) {
    sleep_ms(400); /* one step of work, shorter than the lease */
    if ((rc = hilock_hold_renew(HILOCK_HOLD(leader))) != HILOCK_OK) {
      report("renew", leader, rc);
      goto out;
    }
    if ((rc = hilock_hold_owned(HILOCK_HOLD(leader), &owned)) != HILOCK_OK) {
      report("owned", leader, rc);
      goto out;
    }
    printf("step %d: renewed, validity %" PRId64 " ms, owned=%d\n", step,
           hilock_hold_validity_ms(HILOCK_HOLD(leader)), owned);
  }
  if ((rc = hilock_hold_extend(HILOCK_HOLD(leader), 2000, 0)) != HILOCK_OK) {
    report("extend", leader, rc);
    goto out;
  }
  printf("extended by 2000 ms: validity %" PRId64 " ms\n",
         hilock_hold_validity_ms(HILOCK_HOLD(leader)));
  if ((rc = hilock_hold_release(HILOCK_HOLD(leader))) != HILOCK_OK) {
    report("release leader", leader, rc);
    goto out;
  }

  /* Renewing too late: the 100 ms lease lapsed while we slept. */
  if ((rc = hilock_hold_acquire(HILOCK_HOLD(late), 2000)) != HILOCK_OK) {
    report("acquire cleanup", late, rc);
    goto out;
  }
  sleep_ms(200);
  rc = hilock_hold_renew(HILOCK_HOLD(late));
  if (rc != HILOCK_ENOTOWNED) {
    report("late renew (expected ENOTOWNED)", late, rc);
    goto out;
  }
  printf("late renew refused (%s): %s\n", hilock_err_name(rc),
         hilock_hold_errmsg(HILOCK_HOLD(late)));
  status = 0;
out:
  hilock_hold_free(HILOCK_HOLD(leader));
  hilock_hold_free(HILOCK_HOLD(late));
  hilock_client_free(c);
  return status;
}
