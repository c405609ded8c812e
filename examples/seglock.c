/* Segmented lock: a flash sale of 100 units split over 5 segments.
 *
 * Eight buyer threads sell at once, each holding one segment (any free one
 * that still has stock, tried from a random start) and taking 1-3 units
 * from it under the lock. A segment that reaches 0 is skipped; once all are
 * empty, acquire returns HILOCK_SOLDOUT and the buyers stop. Exactly 100
 * units are sold.
 *
 *   seglock [url]          url defaults to $HILOCK_URL, $REDIS_URL or
 *                          redis://127.0.0.1:6379/0 */
#include <hilock/hilock.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example.h"

#define NAME "flash:sku-10111"
#define SEGMENTS 5
#define STOCK 100
#define BUYERS 8

typedef struct buyer {
  int id;
  hilock_segmented_lock *seg; /* one handle per holder */
  int64_t units;
  int orders[SEGMENTS];
  int failed;
} buyer;

static void *buy(void *arg) {
  buyer *b = arg;
  unsigned seed = (unsigned)b->id * 7919u + 1;
  for (;;) {
    int64_t taken = 0;
    int rc = hilock_hold_acquire(HILOCK_HOLD(b->seg), 10000);
    if (rc == HILOCK_SOLDOUT) return NULL;
    if (rc != HILOCK_OK) {
      fprintf(stderr, "buyer %d: %s\n", b->id,
              rc < 0 ? hilock_hold_errmsg(HILOCK_HOLD(b->seg)) : hilock_strerror(rc));
      b->failed = 1;
      return NULL;
    }
    rc = hilock_segmented_lock_take(b->seg, 1 + rand_r(&seed) % 3, 1, &taken, NULL);
    sleep_ms(2); /* the order's work, inside the segment */
    if (rc != HILOCK_OK) {
      fprintf(stderr, "take: %s\n", hilock_hold_errmsg(HILOCK_HOLD(b->seg)));
      b->failed = 1;
    }
    b->units += taken;
    b->orders[hilock_segmented_lock_segment(b->seg)]++;
    if (hilock_hold_release(HILOCK_HOLD(b->seg)) != HILOCK_OK) {
      fprintf(stderr, "release: %s\n", hilock_hold_errmsg(HILOCK_HOLD(b->seg)));
      b->failed = 1;
    }
    if (b->failed) return NULL;
  }
}

static int stock_of(hilock_segmented_lock *s, int i) {
  int64_t n = -1;
  if (hilock_segmented_lock_stock(s, i, &n) != HILOCK_OK)
    fprintf(stderr, "stock: %s\n", hilock_hold_errmsg(HILOCK_HOLD(s)));
  return (int)n;
}

int main(int argc, char **argv) {
  const char *url = redis_url(argc, argv);
  hilock_client *c = NULL;
  hilock_segmented_lock *sale = NULL;
  buyer b[BUYERS];
  pthread_t t[BUYERS];
  int started = 0, status = 1, orders[SEGMENTS] = {0};
  int64_t sold = 0, taken = 0;
  double t0;

  memset(b, 0, sizeof(b));
  if (client_connect(url, &c) != HILOCK_OK) goto out;
  if (hilock_segmented_lock_new(c, NAME, strlen(NAME), SEGMENTS, 10000, &sale) !=
      HILOCK_OK) {
    fprintf(stderr, "seglock: %s\n", hilock_client_errmsg(c));
    goto out;
  }
  if (hilock_segmented_lock_stock_init(sale, STOCK) != HILOCK_OK) {
    fprintf(stderr, "stock_init: %s\n", hilock_hold_errmsg(HILOCK_HOLD(sale)));
    goto out;
  }
  printf("stock per segment:");
  for (int i = 0; i < SEGMENTS; i++) printf(" %d", stock_of(sale, i));
  printf("\n");

  t0 = now_s();
  for (int i = 0; i < BUYERS; i++) {
    b[i].id = i;
    if (hilock_segmented_lock_new(c, NAME, strlen(NAME), SEGMENTS, 10000,
                           &b[i].seg) != HILOCK_OK ||
        pthread_create(&t[i], NULL, buy, &b[i]) != 0)
      goto join;
    started++;
  }
  status = 0;
join:
  for (int i = 0; i < started; i++) {
    pthread_join(t[i], NULL);
    if (b[i].failed) status = 1;
    sold += b[i].units;
    for (int j = 0; j < SEGMENTS; j++) orders[j] += b[i].orders[j];
  }
  if (status != 0 || started < BUYERS) goto out;
  printf("sold %" PRId64 " of %d in %.2f s; left: %d\n", sold, STOCK,
         now_s() - t0, stock_of(sale, -1));
  printf("orders per segment:");
  for (int j = 0; j < SEGMENTS; j++) printf(" %d", orders[j]);
  printf("\n");
  if (sold != STOCK) status = 1;

  /* Restock one segment: the empty ones are skipped. */
  hilock_segmented_lock_stock_set(sale, 3, 2);
  if (hilock_hold_acquire(HILOCK_HOLD(sale), 1000) == HILOCK_OK) {
    hilock_segmented_lock_take(sale, 5, 1, &taken, NULL);
    printf("after restocking segment 3: granted segment %zu (fence %" PRIu64
           "), took %" PRId64 "\n",
           hilock_segmented_lock_segment(sale), hilock_hold_fence(HILOCK_HOLD(sale)), taken);
    hilock_hold_release(HILOCK_HOLD(sale));
  }
  printf("next acquire: %s\n",
         hilock_err_name(hilock_hold_acquire(HILOCK_HOLD(sale), 1000)));
out:
  for (int i = 0; i < BUYERS; i++) hilock_hold_free(HILOCK_HOLD(b[i].seg));
  hilock_hold_free(HILOCK_HOLD(sale));
  hilock_client_free(c);
  return status;
}
