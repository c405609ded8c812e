/* Countdown latch: a coordinator waits until every worker has finished.
 *
 * Three workers (threads, each with its own handle) join the latch "batch"
 * as registered parties, work, and count down; the coordinator waits until
 * the count is 0. In a second round a worker goes away without counting
 * down (its lease is no longer renewed, as a crashed process's): the
 * coordinator's wait ends with HILOCK_EBROKEN within the party's TTL
 * instead of waiting forever.
 *
 *   latch [url]            url defaults to $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 */
#include <pthread.h>
#include <string.h>

#include "example.h"

#define WORKERS 3
#define TTL_MS 1000

static hilock_client *client;

typedef struct worker {
  const char *latch; /* the latch's name */
  int id;
  int crash; /* stop renewing without counting down */
} worker;

static void *work(void *arg) {
  worker *w = arg;
  hilock_latch *l = NULL;
  if (hilock_latch_new(client, w->latch, strlen(w->latch), WORKERS, TTL_MS,
                       &l) != HILOCK_OK)
    return NULL;
  hilock_hold_set_auto_renew(HILOCK_HOLD(l), 1, 0, NULL, NULL);
  if (hilock_latch_join(l) != HILOCK_OK) {
    fprintf(stderr, "worker %d: %s\n", w->id, hilock_hold_errmsg(HILOCK_HOLD(l)));
  } else if (w->crash) {
    /* Freed without counting down: its lease is no longer renewed. */
    printf("  worker %d crashes without counting down\n", w->id);
  } else {
    sleep_ms(100 * (w->id + 1));
    if (hilock_latch_count_down(l) == HILOCK_OK)
      printf("  worker %d counted down\n", w->id);
    else
      printf("  worker %d: %s\n", w->id, hilock_hold_errmsg(HILOCK_HOLD(l)));
  }
  hilock_hold_free(HILOCK_HOLD(l));
  return NULL;
}

static void round_of(const char *name, int crash) {
  hilock_latch *l = NULL;
  pthread_t t[WORKERS];
  worker w[WORKERS];
  int64_t start = now_ms();
  int rc;
  if (hilock_latch_new(client, name, strlen(name), WORKERS, TTL_MS, &l) !=
      HILOCK_OK)
    return;
  hilock_latch_delete(l); /* a fresh latch for the demo */
  for (int i = 0; i < WORKERS; i++) {
    w[i] = (worker){name, i, crash && i == 1};
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  rc = hilock_latch_wait(l, 30000);
  if (rc == HILOCK_OK)
    printf("%s: every worker finished (%lld ms)\n", name,
           (long long)(now_ms() - start));
  else
    printf("%s: %s (%lld ms)\n", name, hilock_hold_errmsg(HILOCK_HOLD(l)),
           (long long)(now_ms() - start));
  for (int i = 0; i < WORKERS; i++) pthread_join(t[i], NULL);
  hilock_latch_delete(l);
  hilock_hold_free(HILOCK_HOLD(l));
}

int main(int argc, char **argv) {
  if (client_connect(redis_url(argc, argv), &client) != HILOCK_OK) {
    hilock_client_free(client);
    return 1;
  }
  round_of("batch", 0);
  round_of("batch-crash", 1);
  hilock_client_free(client);
  return 0;
}
