/* Fair (FIFO) lock: first come, first served.
 *
 * Five workers queue for a printer one after another while it is busy.
 * They get it in the order they asked (their tickets), whatever the
 * scheduler does; a latecomer's try_acquire is refused even at the moment
 * the printer is free, because someone is already waiting for it.
 *
 *   fair [url]             url defaults to $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 */
#include <inttypes.h>
#include <pthread.h>

#include "example.h"

#define WORKERS 5

typedef struct worker {
  int id;
  hilock_fair_lock *lock; /* one handle per holder */
} worker;

static void *work(void *arg) {
  worker *w = arg;
  int rc = hilock_hold_acquire(HILOCK_HOLD(w->lock), 10000);
  if (rc != HILOCK_OK) {
    fprintf(stderr, "worker %d: %s\n", w->id, hilock_hold_errmsg(HILOCK_HOLD(w->lock)));
    return NULL;
  }
  printf("worker %d prints (ticket %" PRIu64 ", fence %" PRIu64 ")\n", w->id,
         hilock_fair_lock_ticket(w->lock), hilock_hold_fence(HILOCK_HOLD(w->lock)));
  sleep_ms(50);
  hilock_hold_release(HILOCK_HOLD(w->lock)); /* wakes the next in line, only it */
  return NULL;
}

int main(int argc, char **argv) {
  const char *url = redis_url(argc, argv);
  hilock_client *c = NULL;
  hilock_fair_lock *busy = NULL, *latecomer = NULL;
  worker w[WORKERS] = {{0}};
  pthread_t t[WORKERS];
  int started = 0, status = 1, rc;
  int64_t waiting = 0;

  if (client_connect(url, &c) != HILOCK_OK) goto out;
  if (hilock_fair_lock_new(c, "printer", 7, 10000, &busy) != HILOCK_OK ||
      hilock_fair_lock_new(c, "printer", 7, 10000, &latecomer) != HILOCK_OK) {
    fprintf(stderr, "fair lock: %s\n", hilock_client_errmsg(c));
    goto out;
  }
  if (hilock_hold_acquire(HILOCK_HOLD(busy), 2000) != HILOCK_OK) {
    fprintf(stderr, "acquire: %s\n", hilock_hold_errmsg(HILOCK_HOLD(busy)));
    goto out;
  }
  printf("the printer is busy; workers 0..%d queue in that order\n",
         WORKERS - 1);
  for (int i = 0; i < WORKERS; i++) {
    w[i].id = i;
    if (hilock_fair_lock_new(c, "printer", 7, 10000, &w[i].lock) != HILOCK_OK)
      goto join;
    if (pthread_create(&t[i], NULL, work, &w[i]) != 0) goto join;
    started++;
    sleep_ms(20); /* let worker i take its ticket before the next asks */
  }
  hilock_fair_lock_waiters(busy, &waiting);
  printf("%" PRId64 " waiting\n", waiting);

  hilock_hold_release(HILOCK_HOLD(busy));
  /* Free for a moment, but reserved for worker 0: no barging. */
  rc = hilock_hold_try_acquire(HILOCK_HOLD(latecomer));
  printf("latecomer's try right after the release: %s\n",
         rc == HILOCK_BUSY ? "refused (others are queued)" : hilock_strerror(rc));
  if (rc == HILOCK_OK) hilock_hold_release(HILOCK_HOLD(latecomer));
  status = 0;
join:
  for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < WORKERS; i++) hilock_hold_free(HILOCK_HOLD(w[i].lock));
out:
  hilock_hold_free(HILOCK_HOLD(busy));
  hilock_hold_free(HILOCK_HOLD(latecomer));
  hilock_client_free(c);
  return status;
}
