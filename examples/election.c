/* Leader election: one leader at a time, with a value others can watch.
 *
 * Three candidates (threads, each with its own handle) campaign for
 * "scheduler" with their names as values; an observer thread prints every
 * change of leader. Each leader works a little, proclaims a new value, and
 * resigns; the next candidate leads with a higher fence.
 *
 *   election [url]         url defaults to $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 */
#include <inttypes.h>
#include <pthread.h>
#include <string.h>

#include "example.h"

#define NAME "scheduler"
#define CANDIDATES 3

static hilock_client *client;

static void *candidate(void *arg) {
  const char *me = arg;
  hilock_election *e = NULL;
  char moved[64];
  if (hilock_election_new(client, NAME, strlen(NAME), 5000, &e) != HILOCK_OK)
    return NULL;
  hilock_hold_set_auto_renew(HILOCK_HOLD(e), 1, 0, NULL, NULL);
  if (hilock_election_campaign(e, me, strlen(me), 10000) == HILOCK_OK) {
    printf("%s leads (fence %" PRIu64 ")\n", me,
           hilock_hold_fence(HILOCK_HOLD(e)));
    sleep_ms(50);
    snprintf(moved, sizeof(moved), "%s:9090", me);
    hilock_election_proclaim(e, moved, strlen(moved));
    sleep_ms(50);
    hilock_election_resign(e);
  } else {
    fprintf(stderr, "%s: %s\n", me, hilock_hold_errmsg(HILOCK_HOLD(e)));
  }
  hilock_hold_free(HILOCK_HOLD(e));
  return NULL;
}

static void *observer(void *arg) {
  hilock_election *e = NULL;
  uint64_t fence;
  size_t len;
  (void)arg;
  if (hilock_election_new(client, NAME, strlen(NAME), 5000, &e) != HILOCK_OK)
    return NULL;
  /* Until nothing changes for a second: every leader and value, in order. */
  while (hilock_election_observe(e, 1000, &fence) == HILOCK_OK) {
    const char *v = hilock_election_value(e, &len);
    printf("  observer: %.*s (fence %" PRIu64 ")\n", (int)len, v, fence);
  }
  hilock_hold_free(HILOCK_HOLD(e));
  return NULL;
}

int main(int argc, char **argv) {
  static const char *names[CANDIDATES] = {"host-a", "host-b", "host-c"};
  pthread_t obs, t[CANDIDATES];
  if (client_connect(redis_url(argc, argv), &client) != HILOCK_OK) {
    hilock_client_free(client);
    return 1;
  }
  pthread_create(&obs, NULL, observer, NULL);
  sleep_ms(100);
  for (int i = 0; i < CANDIDATES; i++)
    pthread_create(&t[i], NULL, candidate, (void *)names[i]);
  for (int i = 0; i < CANDIDATES; i++) pthread_join(t[i], NULL);
  pthread_join(obs, NULL);
  hilock_client_free(client);
  return 0;
}
