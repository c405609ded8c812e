/* Sequential lock (ZooKeeper's recipe): numbered entries, watch the one
 * before you.
 *
 * Four workers line up for a busy resource one after another; each gets
 * the next sequence number at once and can print it while it waits. The
 * lock goes to the lowest live number, and each release wakes only the
 * next worker in line (its predecessor's release is the only thing it
 * watches). Then a holder process dies without releasing: the next in
 * line is let in when the dead holder's session (its TTL, 800 ms) runs
 * out, not later.
 *
 *   seqlock [url]          url defaults to $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 */
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "example.h"

#define WORKERS 4
#define NAME "resource"

typedef struct worker {
  int id;
  hilock_sequential_lock *lock; /* one handle per contender */
} worker;

static void *work(void *arg) {
  worker *w = arg;
  int rc = hilock_hold_acquire(HILOCK_HOLD(w->lock), 10000);
  if (rc != HILOCK_OK) {
    fprintf(stderr, "worker %d: %s\n", w->id, hilock_hold_errmsg(HILOCK_HOLD(w->lock)));
    return NULL;
  }
  printf("worker %d holds it (sequence %" PRIu64 ", fence %" PRIu64 ")\n",
         w->id, hilock_sequential_lock_sequence(w->lock),
         hilock_hold_fence(HILOCK_HOLD(w->lock)));
  sleep_ms(30);
  hilock_hold_release(HILOCK_HOLD(w->lock)); /* wakes the next in line, only it */
  return NULL;
}

/* A holder in another process that dies without releasing. */
static int crashing_holder(const char *url) {
  hilock_client *c = NULL;
  hilock_sequential_lock *sl = NULL;
  if (client_connect(url, &c) != HILOCK_OK ||
      hilock_sequential_lock_new(c, NAME, strlen(NAME), 800, &sl) != HILOCK_OK ||
      hilock_hold_acquire(HILOCK_HOLD(sl), 5000) != HILOCK_OK)
    _exit(1);
  printf("process %d holds it (sequence %" PRIu64 ") and crashes\n",
         (int)getpid(), hilock_sequential_lock_sequence(sl));
  fflush(stdout);
  _exit(0); /* no release: the entry lives until its session runs out */
}

int main(int argc, char **argv) {
  const char *url = redis_url(argc, argv);
  hilock_client *c = NULL;
  hilock_sequential_lock *busy = NULL, *next = NULL;
  worker w[WORKERS] = {{0}};
  pthread_t t[WORKERS];
  int started = 0, status = 1, rc;
  int64_t waiting = 0;
  double t0;
  pid_t pid;

  if (client_connect(url, &c) != HILOCK_OK) goto out;
  if (hilock_sequential_lock_new(c, NAME, strlen(NAME), 10000, &busy) != HILOCK_OK ||
      hilock_sequential_lock_new(c, NAME, strlen(NAME), 10000, &next) != HILOCK_OK) {
    fprintf(stderr, "sequential lock: %s\n", hilock_client_errmsg(c));
    goto out;
  }
  if (hilock_hold_acquire(HILOCK_HOLD(busy), 2000) != HILOCK_OK) {
    fprintf(stderr, "acquire: %s\n", hilock_hold_errmsg(HILOCK_HOLD(busy)));
    goto out;
  }
  printf("busy (sequence %" PRIu64 "); workers 0..%d line up\n",
         hilock_sequential_lock_sequence(busy), WORKERS - 1);
  for (int i = 0; i < WORKERS; i++) {
    w[i].id = i;
    if (hilock_sequential_lock_new(c, NAME, strlen(NAME), 10000, &w[i].lock) !=
        HILOCK_OK)
      goto join;
    if (pthread_create(&t[i], NULL, work, &w[i]) != 0) goto join;
    started++;
    while (hilock_sequential_lock_sequence(w[i].lock) == 0) sleep_ms(1);
    printf("worker %d waits with sequence %" PRIu64 "\n", i,
           hilock_sequential_lock_sequence(w[i].lock));
  }
  hilock_sequential_lock_waiters(busy, &waiting);
  printf("%" PRId64 " waiting\n", waiting);
  hilock_hold_release(HILOCK_HOLD(busy));
  for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
  started = 0;

  fflush(stdout);
  pid = fork();
  if (pid == 0) crashing_holder(url);
  if (pid < 0 || waitpid(pid, &rc, 0) != pid || rc != 0) {
    fprintf(stderr, "the crashing holder did not get the lock\n");
    goto out;
  }
  t0 = now_s();
  rc = hilock_hold_acquire(HILOCK_HOLD(next), 5000);
  if (rc != HILOCK_OK) {
    fprintf(stderr, "after the crash: %s\n", hilock_hold_errmsg(HILOCK_HOLD(next)));
    goto out;
  }
  printf("next in line got it %.2f s after the crash (sequence %" PRIu64
         ", fence %" PRIu64 ")\n",
         now_s() - t0, hilock_sequential_lock_sequence(next),
         hilock_hold_fence(HILOCK_HOLD(next)));
  hilock_hold_release(HILOCK_HOLD(next));
  status = 0;
join:
  for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < WORKERS; i++) hilock_hold_free(HILOCK_HOLD(w[i].lock));
out:
  hilock_hold_free(HILOCK_HOLD(busy));
  hilock_hold_free(HILOCK_HOLD(next));
  hilock_client_free(c);
  return status;
}
