/* Reentrant lock: the holding thread may take it again; others wait.
 *
 * The Redis hash hilock:{account:7}:rlock maps "<client id>:<thread id>" to
 * the hold count, so an operator can see who holds it and how often.
 *
 *   rlock [url]            url defaults to $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 */
#include <hilock/hilock.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>

#include "example.h"

static hilock_rlock *account;

/* Another thread: refused while main holds it, then granted once main has
 * released every hold (a release wakes it; it does not poll). */
static void *auditor(void *arg) {
  int rc = hilock_hold_try_acquire(HILOCK_HOLD(account));
  (void)arg;
  printf("auditor: try while held -> %s\n", hilock_strerror(rc));
  rc = hilock_hold_acquire(HILOCK_HOLD(account), 5000);
  printf("auditor: after the final release -> %s, fence %" PRIu64 "\n",
         hilock_strerror(rc), hilock_hold_fence(HILOCK_HOLD(account)));
  if (rc == HILOCK_OK) hilock_hold_release(HILOCK_HOLD(account));
  return NULL;
}

/* Nested code paths that each take the lock, as with a Java ReentrantLock. */
static int transfer(int depth) {
  int64_t held = 0;
  int rc = hilock_hold_acquire(HILOCK_HOLD(account), 2000);
  if (rc != HILOCK_OK) {
    fprintf(stderr, "acquire: %s\n", hilock_hold_errmsg(HILOCK_HOLD(account)));
    return rc;
  }
  hilock_rlock_hold_count(account, &held);
  printf("depth %d: hold count %" PRId64 ", fence %" PRIu64 "\n", depth, held,
         hilock_hold_fence(HILOCK_HOLD(account)));
  if (depth < 3) rc = transfer(depth + 1);
  if (hilock_hold_release(HILOCK_HOLD(account)) != HILOCK_OK)
    fprintf(stderr, "release: %s\n", hilock_hold_errmsg(HILOCK_HOLD(account)));
  return rc;
}

int main(int argc, char **argv) {
  const char *url = redis_url(argc, argv);
  hilock_client *c = NULL;
  pthread_t t;
  int rc, status = 1;

  if (client_connect(url, &c) != HILOCK_OK) goto out;
  if (hilock_rlock_new(c, "account:7", 9, 10000, &account) != HILOCK_OK) {
    fprintf(stderr, "rlock: %s\n", hilock_client_errmsg(c));
    goto out;
  }
  if (hilock_hold_acquire(HILOCK_HOLD(account), 2000) != HILOCK_OK) goto out;
  if (pthread_create(&t, NULL, auditor, NULL) != 0) goto out;
  transfer(1);
  rc = hilock_hold_release(HILOCK_HOLD(account)); /* the outermost hold */
  printf("main: final release -> %s\n", hilock_strerror(rc));
  pthread_join(t, NULL);
  status = 0;
out:
  hilock_hold_free(HILOCK_HOLD(account));
  hilock_client_free(c);
  return status;
}
