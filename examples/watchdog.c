/* Watchdog renewal with a loss signal.
 *
 * The client's renewal thread keeps a 600 ms lock alive while the holder
 * works for 2 s. Then an operator deletes it and someone else takes it: the
 * renewal thread notices, marks the hold lost and calls on_lost, and the
 * holder's release reports that it no longer owns the lock.
 *
 *   watchdog [url]         url defaults to $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 */
#include <hilock/hilock.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "example.h"

static atomic_int lost_signalled;

/* Runs on the renewal thread: keep it short; never free or release here. */
static void on_lost(void *arg) {
  (void)arg;
  atomic_store(&lost_signalled, 1);
}

int main(int argc, char **argv) {
  const char *url = redis_url(argc, argv);
  hilock_client *c = NULL;
  hilock_lock *job = NULL, *thief = NULL;
  int rc, owned = 0, status = 1;

  if (client_connect(url, &c) != HILOCK_OK) goto out;
  if (hilock_lock_new(c, "report:daily", 12, 600, &job) != HILOCK_OK ||
      hilock_lock_new(c, "report:daily", 12, 5000, &thief) != HILOCK_OK)
    goto out;
  hilock_hold_set_auto_renew(HILOCK_HOLD(job), 1, 0, on_lost, NULL);
  if ((rc = hilock_hold_acquire(HILOCK_HOLD(job), 1000)) != HILOCK_OK) {
    fprintf(stderr, "acquire: %s\n", hilock_hold_errmsg(HILOCK_HOLD(job)));
    goto out;
  }
  sleep(2); /* longer than three TTLs */
  hilock_hold_owned(HILOCK_HOLD(job), &owned);
  printf("after 2 s with a 600 ms TTL: owned=%d validity=%" PRId64 " ms\n",
         owned, hilock_hold_validity_ms(HILOCK_HOLD(job)));

  hilock_lock_force_release(thief, NULL); /* an operator steps in */
  hilock_hold_try_acquire(HILOCK_HOLD(thief));
  for (int i = 0; i < 40 && !atomic_load(&lost_signalled); i++) usleep(25000);
  printf("renewal noticed: lost=%d callback=%d\n", hilock_hold_lost(HILOCK_HOLD(job)),
         atomic_load(&lost_signalled));
  rc = hilock_hold_release(HILOCK_HOLD(job));
  printf("holder's release: %s\n", hilock_hold_errmsg(HILOCK_HOLD(job)));
  hilock_hold_release(HILOCK_HOLD(thief));
  status = rc == HILOCK_ENOTOWNED && atomic_load(&lost_signalled) ? 0 : 1;
out:
  hilock_hold_free(HILOCK_HOLD(job));
  hilock_hold_free(HILOCK_HOLD(thief));
  hilock_client_free(c);
  return status;
}
