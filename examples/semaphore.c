/* Counting semaphore: at most 3 report builders at once, anywhere.
 *
 * Five threads share one client; each takes a permit with a handle of its
 * own, works 300 ms and gives it back, so they run three at a time. Then a
 * holder "crashes" (its handle is freed without a release): its permit is
 * not leaked, as with an INCR/DECR counter, but lapses at its TTL. Last, an
 * operator raises the limit.
 *
 * The permits live in the sorted set hilock:{reports}:permits (permit id ->
 * expiry on the server's clock), the limit in hilock:{reports}:limit.
 *
 *   semaphore [url]        url defaults to $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "example.h"

#define NAME "reports"
#define WORKERS 5

static hilock_client *client;
static atomic_int inside, most_inside;

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg, now;
  hilock_semaphore *s = NULL;
  if (hilock_semaphore_new(client, NAME, strlen(NAME), 3, 2000, &s) !=
      HILOCK_OK)
    return NULL;
  hilock_hold_set_auto_renew(HILOCK_HOLD(s), 1, 0, NULL, NULL);
  if (hilock_hold_acquire(HILOCK_HOLD(s), 10000) == HILOCK_OK) {
    now = atomic_fetch_add(&inside, 1) + 1;
    if (now > atomic_load(&most_inside)) atomic_store(&most_inside, now);
    printf("worker %d: building (%d inside), permit %.8s...\n", id, now,
           hilock_hold_token(HILOCK_HOLD(s)));
    sleep_ms(300);
    atomic_fetch_sub(&inside, 1);
    hilock_hold_release(HILOCK_HOLD(s)); /* wakes one waiter */
  } else {
    fprintf(stderr, "worker %d: %s\n", id, hilock_hold_errmsg(HILOCK_HOLD(s)));
  }
  hilock_hold_free(HILOCK_HOLD(s));
  return NULL;
}

int main(int argc, char **argv) {
  const char *url = redis_url(argc, argv);
  hilock_semaphore *op = NULL, *crashed = NULL, *waiter = NULL;
  pthread_t t[WORKERS];
  int64_t free_now = 0, limit = 0, t0;
  int rc, status = 1;

  if (client_connect(url, &client) != HILOCK_OK) goto out;
  if (hilock_semaphore_new(client, NAME, strlen(NAME), 3, 2000, &op) !=
      HILOCK_OK) {
    fprintf(stderr, "semaphore: %s\n", hilock_client_errmsg(client));
    goto out;
  }
  /* The stored limit wins over any handle's permits: set it, so that a
   * rerun starts from 3 whatever an earlier run left. */
  hilock_semaphore_set_limit(op, 3);

  t0 = now_ms();
  for (int i = 0; i < WORKERS; i++)
    pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
  for (int i = 0; i < WORKERS; i++) pthread_join(t[i], NULL);
  printf("%d workers, at most %d inside at once, %" PRId64 " ms\n\n", WORKERS,
         atomic_load(&most_inside), now_ms() - t0);

  /* A holder that dies: its permit lapses at its TTL (1 s), not never. */
  hilock_semaphore_new(client, NAME, strlen(NAME), 3, 1000, &crashed);
  hilock_semaphore_new(client, NAME, strlen(NAME), 3, 1000, &waiter);
  hilock_semaphore_set_limit(op, 1);
  if (hilock_hold_try_acquire(HILOCK_HOLD(crashed)) != HILOCK_OK) goto out;
  hilock_hold_free(HILOCK_HOLD(crashed)); /* "crashes" without releasing */
  crashed = NULL;
  hilock_semaphore_available(op, &free_now);
  printf("limit 1, its holder crashed: %" PRId64 " free\n", free_now);
  t0 = now_ms();
  rc = hilock_hold_acquire(HILOCK_HOLD(waiter), 5000);
  printf("a waiter got the permit after %" PRId64 " ms (%s)\n\n",
         now_ms() - t0, hilock_strerror(rc));
  hilock_hold_release(HILOCK_HOLD(waiter));

  /* An operator changes the limit; holders keep their permits. */
  hilock_semaphore_set_limit(op, 5);
  hilock_semaphore_limit(op, &limit, NULL);
  hilock_semaphore_available(op, &free_now);
  printf("operator: limit now %" PRId64 ", %" PRId64 " free\n", limit,
         free_now);
  hilock_semaphore_set_limit(op, 3);
  status = 0;
out:
  hilock_hold_free(HILOCK_HOLD(crashed));
  hilock_hold_free(HILOCK_HOLD(waiter));
  hilock_hold_free(HILOCK_HOLD(op));
  hilock_client_free(client);
  return status;
}
