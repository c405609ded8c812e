/* The overselling demo: N processes sell from a stock of 100.
 *
 * The stock is a plain Redis key, and each sale is a non-atomic
 * read-modify-write (GET stock, check, SET stock-1). Without a lock the
 * sellers interleave and sell more than there is; with any hilock lock type
 * around the read-modify-write exactly 100 are sold. The semaphore row uses
 * one permit (a mutex), the read-write lock its write side, the multi-key
 * lock the stock's name and a ledger's. The segmented row splits the stock
 * over 5 segments (the lock's own stock, sold with hilock_segmented_lock_take under
 * each segment's lock), so up to 5 sellers work at once.
 *
 *   inventory [url [workers]]   url defaults to $HILOCK_URL, $REDIS_URL or
 *                               redis://127.0.0.1:6379/0; 8 workers */
#include <errno.h>
#include <hilock/hilock.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXAMPLE_WITH_HIREDIS
#include "example.h"

#define STOCK_KEY "demo:stock"
#define LOCK_NAME "demo:inventory"
#define STOCK 100
#define SEGMENTS 5

/* One lock type behind its constructor: the verbs (acquire, release) are
 * every type's, on its hold (hilock/hold.h), as are held, the last error
 * and free. The guards table below makes a type one line. */
typedef int (*make_fn)(hilock_client *c, hilock_hold **h);

/* The lock's name and its length, as the constructors take them. */
#define NAME LOCK_NAME, strlen(LOCK_NAME)
#define TTL_MS 10000

/* T_make: a new handle of the type into *h. call is the type's constructor
 * on the client c, writing the handle to x. */
#define MAKE(T, type, call)                        \
  static int T##_make(hilock_client *c, hilock_hold **h) { \
    type *x = NULL;                                        \
    int rc = call;                                         \
    *h = HILOCK_HOLD(x);                                   \
    return rc;                                             \
  }

/* The multi-key lock takes the stock's name and a ledger's together. */
static const char *const multi_names[2] = {LOCK_NAME, "demo:ledger"};

MAKE(lock, hilock_lock, hilock_lock_new(c, NAME, TTL_MS, &x))
MAKE(simple, hilock_lock, hilock_lock_new_simple(c, NAME, &x))
MAKE(lease, hilock_lock, hilock_lock_new_lease(c, NAME, TTL_MS, &x))
MAKE(rlock, hilock_rlock, hilock_rlock_new(c, NAME, TTL_MS, &x))
MAKE(rwlock, hilock_rwlock, hilock_rwlock_new(c, NAME, TTL_MS, &x))
MAKE(semaphore, hilock_semaphore,
     hilock_semaphore_new(c, NAME, 1, TTL_MS, &x)) /* one permit */
MAKE(multi, hilock_multi_lock,
     hilock_multi_lock_new(c, multi_names, 2, TTL_MS, &x))
MAKE(seq, hilock_sequential_lock, hilock_sequential_lock_new(c, NAME, TTL_MS, &x))
MAKE(fair, hilock_fair_lock, hilock_fair_lock_new(c, NAME, TTL_MS, &x))
MAKE(seg, hilock_segmented_lock, hilock_segmented_lock_new(c, NAME, SEGMENTS, TTL_MS, &x))

typedef struct guard {
  const char *label;
  make_fn make; /* NULL: no lock at all */
  int segmented; /* sells the lock's own stock with hilock_segmented_lock_take */
} guard;

static const guard guards[] = {
    {"none", NULL, 0},
    {"lock", lock_make, 0},
    {"simple_lock", simple_make, 0},
    {"lease", lease_make, 0},
    {"rlock", rlock_make, 0},
    {"rwlock", rwlock_make, 0},
    {"semaphore", semaphore_make, 0},
    {"multi_lock", multi_make, 0},
    {"sequential_lock", seq_make, 0},
    {"fair_lock", fair_make, 0},
    {"segmented", seg_make, 1},
};

/* ## The stock key, with plain hiredis ---------------------------------- */

static int get_stock(redisContext *r, long *stock) {
  redisReply *rep = redis_cmd(r, "GET %s", STOCK_KEY);
  if (rep == NULL) return -1;
  if (rep->type != REDIS_REPLY_STRING) {
    fprintf(stderr, "%s is missing\n", STOCK_KEY);
    freeReplyObject(rep);
    return -1;
  }
  *stock = strtol(rep->str, NULL, 10);
  freeReplyObject(rep);
  return 0;
}

static int set_stock(redisContext *r, long stock) {
  redisReply *rep = redis_cmd(r, "SET %s %ld", STOCK_KEY, stock);
  if (rep == NULL) return -1;
  freeReplyObject(rep);
  return 0;
}

/* ## Sellers ----------------------------------------------------------- */

/* Text for a failed call: the handle's message for an error. */
static const char *why(hilock_hold *h, int rc) {
  return rc < 0 && h != NULL ? hilock_hold_errmsg(h) : hilock_strerror(rc);
}

/* One seller process: wait for the start signal (EOF on start_fd), then sell
 * until the stock is gone. Returns the number sold, or -1 on error. */
static int sell(const char *url, const guard *g, int start_fd) {
  redisContext *r = redis_connect_url(url);
  hilock_client *c = NULL;
  hilock_hold *h = NULL;
  int rc = HILOCK_OK, sold = -1, n = 0;
  int64_t taken;
  long stock;
  char ch;

  if (r == NULL) return -1;
  if (g->make != NULL) {
    if (client_connect(url, &c) != HILOCK_OK) goto out;
    if ((rc = g->make(c, &h)) != HILOCK_OK) {
      fprintf(stderr, "%s: %s\n", g->label, hilock_client_errmsg(c));
      goto out;
    }
  }
  while (read(start_fd, &ch, 1) < 0 && errno == EINTR) {
  }
  for (;;) {
    if (h != NULL && (rc = hilock_hold_acquire(h, 30000)) == HILOCK_SOLDOUT) break;
    if (rc != HILOCK_OK) {
      fprintf(stderr, "acquire: %s\n",
              rc == HILOCK_BUSY ? "busy for 30 s" : why(h, rc));
      goto out;
    }
    if (g->segmented) {
      sleep_us(500); /* the same work, inside the segment */
      if ((rc = hilock_segmented_lock_take((hilock_segmented_lock *)h, 1, 0, &taken, NULL)) != HILOCK_OK) {
        fprintf(stderr, "take: %s\n", hilock_hold_errmsg(h));
        goto out;
      }
      n += (int)taken;
    } else {
      if (get_stock(r, &stock) != 0) goto out;
      if (stock <= 0) break;
      sleep_us(500); /* work between the read and the write */
      if (set_stock(r, stock - 1) != 0) goto out;
      n++;
    }
    if (h != NULL && (rc = hilock_hold_release(h)) != HILOCK_OK) {
      fprintf(stderr, "release: %s\n", why(h, rc));
      goto out;
    }
  }
  sold = n;
out: /* the loop can end holding the lock (stock ran out, or an error) */
  if (h != NULL && hilock_hold_held(h) && (rc = hilock_hold_release(h)) != HILOCK_OK) {
    fprintf(stderr, "release: %s\n", why(h, rc));
    sold = -1;
  }
  if (h != NULL) hilock_hold_free(h);
  hilock_client_free(c);
  redisFree(r);
  return sold;
}

/* The segmented lock's own stock: load it (load != 0) or read what is left. */
static int seg_stock(const char *url, int load, long *left) {
  hilock_client *c = NULL;
  hilock_segmented_lock *seg = NULL;
  int64_t n = 0;
  int rc = client_connect(url, &c);
  if (rc == HILOCK_OK)
    rc = hilock_segmented_lock_new(c, LOCK_NAME, strlen(LOCK_NAME), SEGMENTS, 10000,
                            &seg);
  if (rc == HILOCK_OK)
    rc = load ? hilock_segmented_lock_stock_init(seg, STOCK)
              : hilock_segmented_lock_stock(seg, HILOCK_SEGMENT_ALL, &n);
  if (rc != HILOCK_OK)
    fprintf(stderr, "segmented stock: %s\n",
            seg ? hilock_hold_errmsg(HILOCK_HOLD(seg)) : hilock_strerror(rc));
  if (left != NULL) *left = (long)n;
  hilock_hold_free(HILOCK_HOLD(seg));
  hilock_client_free(c);
  return rc == HILOCK_OK ? 0 : -1;
}

/* Run one round with the given guard; fills *sold, *left and *secs. */
static int run(redisContext *r, const char *url, const guard *g, int workers,
               long *sold, long *left, double *secs) {
  int start[2], res[2], spawned = 0, ok = 1, n, status;
  double t0;

  if (set_stock(r, STOCK) != 0) return -1;
  if (g->segmented && seg_stock(url, 1, NULL) != 0) return -1;
  if (pipe(start) != 0 || pipe(res) != 0) {
    perror("pipe");
    return -1;
  }
  fflush(stdout);
  for (; spawned < workers; spawned++) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      ok = 0;
      break;
    }
    if (pid == 0) {
      close(start[1]);
      close(res[0]);
      n = sell(url, g, start[0]);
      if (write(res[1], &n, sizeof(n)) != (ssize_t)sizeof(n)) _exit(1);
      _exit(n < 0);
    }
  }
  close(start[0]);
  close(res[1]);
  t0 = now_s();
  close(start[1]); /* go */
  *sold = 0;
  while (read(res[0], &n, sizeof(n)) == (ssize_t)sizeof(n)) {
    if (n < 0) ok = 0;
    else *sold += n;
  }
  close(res[0]);
  for (int i = 0; i < spawned; i++) {
    if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      ok = 0;
  }
  *secs = now_s() - t0;
  if (!ok) {
    fprintf(stderr, "%s: a seller failed\n", g->label);
    return -1;
  }
  if (g->segmented) return seg_stock(url, 0, left);
  return get_stock(r, left);
}

/* An operator's step before the demo: clear a lock left by an interrupted
 * earlier run (a simple lock would otherwise stay held). */
static int clear_stale_lock(const char *url) {
  hilock_client *c = NULL;
  hilock_lock *lk = NULL;
  int rc, deleted = 0;

  if ((rc = client_connect(url, &c)) != HILOCK_OK) {
    hilock_client_free(c);
    return -1;
  }
  if ((rc = hilock_lock_new_simple(c, NAME, &lk)) != HILOCK_OK)
    fprintf(stderr, "lock: %s\n", hilock_client_errmsg(c));
  else if ((rc = hilock_lock_force_release(lk, &deleted)) != HILOCK_OK)
    fprintf(stderr, "force_release: %s\n", hilock_hold_errmsg(HILOCK_HOLD(lk)));
  if (deleted) printf("cleared a stale %s lock\n", LOCK_NAME);
  hilock_hold_free(HILOCK_HOLD(lk));
  hilock_client_free(c);
  return rc == HILOCK_OK ? 0 : -1;
}

int main(int argc, char **argv) {
  const char *url = redis_url(argc, argv);
  int workers = argc > 2 ? atoi(argv[2]) : 8, status = 0;
  redisContext *r;

  if (workers < 1) {
    fprintf(stderr, "usage: %s [url [workers]]\n", argv[0]);
    return 2;
  }
  if (clear_stale_lock(url) != 0 || (r = redis_connect_url(url)) == NULL)
    return 1;
  printf("%d processes selling a stock of %d\n\n", workers, STOCK);
  printf("| %-15s | %5s | %8s | %10s | %7s |\n", "guard", "sold", "oversold",
         "stock left", "seconds");
  printf("|-----------------|-------|----------|------------|---------|\n");
  for (size_t i = 0; i < sizeof(guards) / sizeof(guards[0]); i++) {
    long sold, left;
    double secs;
    if (run(r, url, &guards[i], workers, &sold, &left, &secs) != 0) {
      status = 1;
      break;
    }
    printf("| %-15s | %5ld | %8ld | %10ld | %7.2f |\n", guards[i].label, sold,
           sold > STOCK ? sold - STOCK : 0, left, secs);
    if (guards[i].make != NULL && (sold != STOCK || left != 0)) status = 1;
  }
  printf("\nwith every lock type exactly %d sold: %s\n", STOCK,
         status == 0 ? "yes" : "NO");
  redisFree(r);
  return status;
}
