/* Fencing tokens: the protected storage rejects a holder whose lock expired.
 *
 * A lock alone can not stop a holder that paused (GC, swap, SIGSTOP) past
 * its TTL from writing after a new holder took over. Every grant carries a
 * fence that only grows; the storage remembers the highest fence it
 * accepted and refuses anything older.
 *
 *   fencing [url]          url defaults to $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 */
#include <hilock/hilock.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#include "example.h"

/* The protected resource: it checks the fence of every write. */
typedef struct storage {
  uint64_t highest; /* highest fence accepted so far */
  const char *value;
} storage;

static int storage_write(storage *s, uint64_t fence, const char *value) {
  if (fence < s->highest) {
    printf("  storage: fence %" PRIu64 " < %" PRIu64 ", write \"%s\" refused\n",
           fence, s->highest, value);
    return -1;
  }
  s->highest = fence;
  s->value = value;
  printf("  storage: fence %" PRIu64 " accepted, value \"%s\"\n", fence, value);
  return 0;
}

int main(int argc, char **argv) {
  const char *url = redis_url(argc, argv);
  hilock_client *c = NULL;
  hilock_lock *a = NULL, *b = NULL;
  storage st = {0, "(empty)"};
  uint64_t fence_a;
  int rc, status = 1;

  if (client_connect(url, &c) != HILOCK_OK) goto out;
  if (hilock_lock_new(c, "file", 4, 200, &a) != HILOCK_OK ||
      hilock_lock_new(c, "file", 4, 5000, &b) != HILOCK_OK) {
    fprintf(stderr, "lock: %s\n", hilock_client_errmsg(c));
    goto out;
  }

  if ((rc = hilock_hold_acquire(HILOCK_HOLD(a), 2000)) != HILOCK_OK) {
    report("a: acquire", a, rc);
    goto out;
  }
  fence_a = hilock_hold_fence(HILOCK_HOLD(a));
  printf("a holds the lock (ttl 200 ms), fence %" PRIu64 "\n", fence_a);
  if (storage_write(&st, fence_a, "a: part 1") != 0) goto out;

  printf("a pauses for 300 ms, past its TTL\n");
  sleep_ms(300);

  if ((rc = hilock_hold_acquire(HILOCK_HOLD(b), 2000)) != HILOCK_OK) {
    report("b: acquire", b, rc);
    goto out;
  }
  printf("b holds the lock, fence %" PRIu64 "\n", hilock_hold_fence(HILOCK_HOLD(b)));
  if (storage_write(&st, hilock_hold_fence(HILOCK_HOLD(b)), "b: all of it") != 0) goto out;

  printf("a wakes up and writes with its old fence %" PRIu64 "\n", fence_a);
  if (storage_write(&st, fence_a, "a: part 2") == 0) {
    fprintf(stderr, "the stale write was accepted\n");
    goto out;
  }
  rc = hilock_hold_release(HILOCK_HOLD(a));
  if (rc != HILOCK_ENOTOWNED) {
    report("a: release (expected ENOTOWNED)", a, rc);
    goto out;
  }
  printf("a: release refused (%s)\n", hilock_err_name(rc));
  if ((rc = hilock_hold_release(HILOCK_HOLD(b))) != HILOCK_OK) {
    report("b: release", b, rc);
    goto out;
  }
  printf("storage holds \"%s\" (highest fence %" PRIu64 ")\n", st.value,
         st.highest);
  status = 0;
out:
  hilock_hold_free(HILOCK_HOLD(a));
  hilock_hold_free(HILOCK_HOLD(b));
  hilock_client_free(c);
  return status;
}
