/* Read-write lock: many readers at once, or one writer.
 *
 * Three reader threads share the lock; a writer that arrives meanwhile
 * holds new readers back (writer preference), gets the lock once the
 * current readers are done, and then downgrades to a read without letting
 * anyone in between. A reader asking for the write side gets HILOCK_EDEADLK
 * at once instead of waiting for itself.
 *
 * Each thread is its own owner (client id + thread id), so one handle can
 * be shared by all of them.
 *
 *   rwlock [url]           url defaults to $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 */
#include <inttypes.h>
#include <pthread.h>

#include "example.h"

static hilock_rwlock *catalog;

static void *reader(void *arg) {
  long id = (long)arg;
  int64_t readers = 0;
  int rc = hilock_rwlock_read_acquire(catalog, 5000);
  if (rc != HILOCK_OK) {
    fprintf(stderr, "reader %ld: %s\n", id, hilock_hold_errmsg(HILOCK_HOLD(catalog)));
    return NULL;
  }
  hilock_rwlock_state(catalog, &readers, NULL);
  printf("reader %ld: reading, %" PRId64 " reader(s) inside\n", id, readers);
  sleep_ms(200);
  hilock_rwlock_read_release(catalog);
  return NULL;
}

static void *writer(void *arg) {
  int64_t readers = 0;
  int rc;
  (void)arg;
  rc = hilock_rwlock_write_acquire(catalog, 5000);
  if (rc != HILOCK_OK) {
    fprintf(stderr, "writer: %s\n", hilock_hold_errmsg(HILOCK_HOLD(catalog)));
    return NULL;
  }
  printf("writer: writing with fence %" PRIu64 "\n", hilock_hold_fence(HILOCK_HOLD(catalog)));
  sleep_ms(100);
  /* Downgrade: take the read side, then let go of the write side. */
  hilock_rwlock_read_acquire(catalog, 0);
  hilock_rwlock_write_release(catalog);
  hilock_rwlock_state(catalog, &readers, NULL);
  printf("writer: downgraded, %" PRId64 " reader(s) inside now\n", readers);
  sleep_ms(100);
  hilock_rwlock_read_release(catalog);
  return NULL;
}

int main(int argc, char **argv) {
  const char *url = redis_url(argc, argv);
  hilock_client *c = NULL;
  pthread_t t[5];
  int rc, status = 1;

  if (client_connect(url, &c) != HILOCK_OK) goto out;
  if (hilock_rwlock_new(c, "catalog", 7, 10000, &catalog) != HILOCK_OK) {
    fprintf(stderr, "rwlock: %s\n", hilock_client_errmsg(c));
    goto out;
  }
  /* Renew read and write holds while they are held. */
  hilock_rwlock_read_set_auto_renew(catalog, 1, 0, NULL, NULL);
  hilock_hold_set_auto_renew(HILOCK_HOLD(catalog), 1, 0, NULL, NULL);

  for (long i = 0; i < 3; i++) pthread_create(&t[i], NULL, reader, (void *)i);
  sleep_ms(50);
  pthread_create(&t[3], NULL, writer, NULL);
  sleep_ms(50);
  /* Arrives after the writer: queues behind it, then joins its downgrade. */
  pthread_create(&t[4], NULL, reader, (void *)3L);
  for (int i = 0; i < 5; i++) pthread_join(t[i], NULL);

  /* An upgrade could only wait for itself: refused at once. */
  if (hilock_rwlock_read_acquire(catalog, 1000) == HILOCK_OK) {
    rc = hilock_rwlock_write_acquire(catalog, 5000);
    printf("main: write while reading -> %s (%s)\n", hilock_err_name(rc),
           hilock_strerror(rc));
    hilock_rwlock_read_release(catalog);
  }
  status = 0;
out:
  hilock_hold_free(HILOCK_HOLD(catalog));
  hilock_client_free(c);
  return status;
}
