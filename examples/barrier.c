/* Barriers: parties released together, generation after generation.
 *
 * Three workers (threads, each with its own handle: a handle is one party)
 * meet at "stage" three times; each generation hands out the arrival
 * indexes 0, 1 and 2, and the last to arrive releases the others. Then
 * they run one round of a double barrier: nobody starts before all have
 * entered, nobody goes on before all have left. A party that died while
 * others wait would end their waits HILOCK_EBROKEN within its TTL.
 *
 *   barrier [url]          url defaults to $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 */
#include <inttypes.h>
#include <pthread.h>
#include <string.h>

#include "example.h"

#define PARTIES 3

static hilock_client *client;

static void *worker(void *arg) {
  long me = (long)arg;
  hilock_barrier *b = NULL;
  hilock_double_barrier *d = NULL;
  int64_t index;
  if (hilock_barrier_new(client, "stage", 5, PARTIES, 5000, &b) != HILOCK_OK ||
      hilock_double_barrier_new(client, "round", 5, PARTIES, 5000, &d) !=
          HILOCK_OK) {
    fprintf(stderr, "worker %ld: %s\n", me, hilock_client_errmsg(client));
    goto out;
  }
  for (int g = 0; g < 3; g++) {
    sleep_ms(20 * me); /* arrive in a different order each time */
    if (hilock_barrier_wait(b, 10000, &index) != HILOCK_OK) {
      fprintf(stderr, "worker %ld: %s\n", me, hilock_hold_errmsg(HILOCK_HOLD(b)));
      goto out;
    }
    printf("generation %d: worker %ld arrived as %" PRId64 "\n", g, me, index);
  }
  if (hilock_double_barrier_enter(d, 10000) == HILOCK_OK) {
    printf("worker %ld inside\n", me);
    sleep_ms(30 * me);
    if (hilock_double_barrier_leave(d, 10000) == HILOCK_OK)
      printf("worker %ld: all left\n", me);
  }
out:
  hilock_hold_free(HILOCK_HOLD(b));
  hilock_hold_free(HILOCK_HOLD(d));
  return NULL;
}

int main(int argc, char **argv) {
  pthread_t t[PARTIES];
  int deleted;
  hilock_barrier *b = NULL;
  if (client_connect(redis_url(argc, argv), &client) != HILOCK_OK) {
    hilock_client_free(client);
    return 1;
  }
  for (long i = 0; i < PARTIES; i++)
    pthread_create(&t[i], NULL, worker, (void *)i);
  for (int i = 0; i < PARTIES; i++) pthread_join(t[i], NULL);
  /* The barrier's keys stay until deleted. */
  if (hilock_barrier_new(client, "stage", 5, PARTIES, 5000, &b) == HILOCK_OK)
    hilock_barrier_delete(b, &deleted);
  hilock_hold_free(HILOCK_HOLD(b));
  hilock_client_free(client);
  return 0;
}
