/* Multi-key lock: a transfer locks both accounts at once, or neither.
 *
 * Two transfers in opposite directions (acct:1 -> acct:2 and acct:2 ->
 * acct:1) run in two threads. Taking the two single locks one after the
 * other, in caller order, can deadlock; the multi-key lock sorts the names
 * and takes them in one script, so it cannot. A single lock on one of the
 * accounts (an auditor) is excluded too, and each account's fencing token
 * comes from that account's own counter.
 *
 *   multilock [url]        url defaults to $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 */
#include <hilock/hilock.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>

#include "example.h"

static hilock_client *client;

typedef struct transfer {
  const char *from, *to;
  int status;
} transfer;

static void *run_transfer(void *arg) {
  transfer *t = arg;
  const char *names[2] = {t->from, t->to};
  hilock_multi_lock *m = NULL;
  int rc;

  t->status = 1;
  if (hilock_multi_lock_new(client, names, 2, 10000, &m) != HILOCK_OK) {
    fprintf(stderr, "multilock: %s\n", hilock_client_errmsg(client));
    return NULL;
  }
  for (int i = 0; i < 3; i++) {
    rc = hilock_hold_acquire(HILOCK_HOLD(m), 5000);
    if (rc != HILOCK_OK) {
      fprintf(stderr, "acquire: %s\n", hilock_hold_errmsg(HILOCK_HOLD(m)));
      break;
    }
    /* Index i is the sorted order: acct:1 then acct:2. */
    printf("%s -> %s: both held, fences %s=%" PRIu64 " %s=%" PRIu64 "\n",
           t->from, t->to, hilock_multi_lock_name(m, 0, NULL),
           hilock_multi_lock_fence(m, 0), hilock_multi_lock_name(m, 1, NULL),
           hilock_multi_lock_fence(m, 1));
    sleep_ms(20); /* debit one, credit the other */
    if (hilock_hold_release(HILOCK_HOLD(m)) != HILOCK_OK)
      fprintf(stderr, "release: %s\n", hilock_hold_errmsg(HILOCK_HOLD(m)));
  }
  t->status = 0;
  hilock_hold_free(HILOCK_HOLD(m));
  return NULL;
}

int main(int argc, char **argv) {
  const char *url = redis_url(argc, argv);
  transfer a = {"acct:1", "acct:2", 1}, b = {"acct:2", "acct:1", 1};
  hilock_lock *auditor = NULL;
  hilock_multi_lock *both = NULL;
  const char *names[2] = {"acct:2", "acct:1"};
  pthread_t ta, tb;
  int status = 1, rc;

  if (client_connect(url, &client) != HILOCK_OK) goto out;
  if (pthread_create(&ta, NULL, run_transfer, &a) != 0) goto out;
  if (pthread_create(&tb, NULL, run_transfer, &b) != 0) goto out;
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);

  /* An auditor holds acct:2 with a single lock: the set is refused whole. */
  if (hilock_lock_new(client, "acct:2", 6, 5000, &auditor) != HILOCK_OK ||
      hilock_multi_lock_new(client, names, 2, 5000, &both) != HILOCK_OK)
    goto out;
  if (hilock_hold_acquire(HILOCK_HOLD(auditor), 1000) != HILOCK_OK) goto out;
  rc = hilock_hold_try_acquire(HILOCK_HOLD(both));
  printf("auditor holds acct:2; transfer try -> %s\n", hilock_strerror(rc));
  hilock_hold_release(HILOCK_HOLD(auditor));
  rc = hilock_hold_acquire(HILOCK_HOLD(both), 1000);
  printf("auditor done; transfer -> %s\n", hilock_strerror(rc));
  if (rc == HILOCK_OK) hilock_hold_release(HILOCK_HOLD(both));
  status = a.status || b.status;
out:
  hilock_hold_free(HILOCK_HOLD(both));
  hilock_hold_free(HILOCK_HOLD(auditor));
  hilock_client_free(client);
  return status;
}
