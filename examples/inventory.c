/* The overselling demo: N processes sell from a stock of 100.
 *
 * The stock is a plain Redis key, and each sale is a non-atomic
 * read-modify-write (GET stock, check, SET stock-1). Without a lock the
 * sellers interleave and sell more than there is; with any hilock lock type
 * around the read-modify-write exactly 100 are sold. The semaphore row uses
 * one permit (a mutex). The segmented row splits the stock over 5 segments
 * (the lock's own stock, sold with hilock_seglock_take under each segment's
 * lock), so up to 5 sellers work at once.
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

enum family { NONE, LOCK, SEMAPHORE, FAIR, SEGMENTED };

typedef struct guard {
  const char *label;
  enum family family;
  int kind; /* a hilock_lock_kind for LOCK */
} guard;

static const guard guards[] = {{"none", NONE, 0},
                               {"lock", LOCK, HILOCK_LOCK_EXPIRING},
                               {"simple_lock", LOCK, HILOCK_LOCK_SIMPLE},
                               {"lease", LOCK, HILOCK_LOCK_LEASE},
                               {"semaphore", SEMAPHORE, 0},
                               {"fair_lock", FAIR, 0},
                               {"segmented", SEGMENTED, 0}};

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

static hilock_lock *new_lock(hilock_client *c, int kind) {
  hilock_lock *lk = NULL;
  size_t n = strlen(LOCK_NAME);
  int rc;
  if (kind == HILOCK_LOCK_SIMPLE)
    rc = hilock_simple_lock_new(c, LOCK_NAME, n, &lk);
  else if (kind == HILOCK_LOCK_LEASE)
    rc = hilock_lease_new(c, LOCK_NAME, n, 10000, &lk);
  else
    rc = hilock_lock_new(c, LOCK_NAME, n, 10000, &lk);
  if (rc != HILOCK_OK) fprintf(stderr, "lock: %s\n", hilock_client_errmsg(c));
  return lk;
}

/* One guard of any family, behind four verbs. */
typedef struct holder {
  enum family family;
  hilock_lock *lk;
  hilock_semaphore *sem;
  hilock_fair_lock *fair;
  hilock_seglock *seg;
} holder;

static int holder_new(hilock_client *c, const guard *g, holder *h) {
  size_t n = strlen(LOCK_NAME);
  int rc = HILOCK_OK;
  memset(h, 0, sizeof(*h));
  h->family = g->family;
  switch (g->family) {
    case NONE:
      return 0;
    case LOCK:
      return (h->lk = new_lock(c, g->kind)) != NULL ? 0 : -1;
    case SEMAPHORE:
      rc = hilock_semaphore_new(c, LOCK_NAME, n, 1, 10000, &h->sem);
      break;
    case FAIR:
      rc = hilock_fair_lock_new(c, LOCK_NAME, n, 10000, &h->fair);
      break;
    case SEGMENTED:
      rc = hilock_seglock_new(c, LOCK_NAME, n, SEGMENTS, 10000, &h->seg);
      break;
  }
  if (rc != HILOCK_OK)
    fprintf(stderr, "%s: %s\n", g->label, hilock_client_errmsg(c));
  return rc == HILOCK_OK ? 0 : -1;
}

static int holder_acquire(holder *h, int64_t wait_ms) {
  switch (h->family) {
    case LOCK: return hilock_lock_acquire(h->lk, wait_ms);
    case SEMAPHORE: return hilock_semaphore_acquire(h->sem, wait_ms);
    case FAIR: return hilock_fair_lock_acquire(h->fair, wait_ms);
    case SEGMENTED: return hilock_seglock_acquire(h->seg, wait_ms);
    default: return HILOCK_OK;
  }
}

static int holder_release(holder *h) {
  switch (h->family) {
    case LOCK: return hilock_lock_release(h->lk);
    case SEMAPHORE: return hilock_semaphore_release(h->sem);
    case FAIR: return hilock_fair_lock_release(h->fair);
    case SEGMENTED: return hilock_seglock_release(h->seg);
    default: return HILOCK_OK;
  }
}

static int holder_held(const holder *h) {
  switch (h->family) {
    case LOCK: return hilock_lock_held(h->lk);
    case SEMAPHORE: return hilock_semaphore_held(h->sem);
    case FAIR: return hilock_fair_lock_held(h->fair);
    case SEGMENTED: return hilock_seglock_held(h->seg);
    default: return 0;
  }
}

static const char *holder_errmsg(const holder *h, int rc) {
  if (rc >= 0) return hilock_strerror(rc);
  switch (h->family) {
    case LOCK: return hilock_lock_errmsg(h->lk);
    case SEMAPHORE: return hilock_semaphore_errmsg(h->sem);
    case FAIR: return hilock_fair_lock_errmsg(h->fair);
    case SEGMENTED: return hilock_seglock_errmsg(h->seg);
    default: return hilock_strerror(rc);
  }
}

static void holder_free(holder *h) {
  hilock_lock_free(h->lk);
  hilock_semaphore_free(h->sem);
  hilock_fair_lock_free(h->fair);
  hilock_seglock_free(h->seg);
}

/* One seller process: wait for the start signal (EOF on start_fd), then sell
 * until the stock is gone. Returns the number sold, or -1 on error. */
static int sell(const char *url, const guard *g, int start_fd) {
  redisContext *r = redis_connect_url(url);
  hilock_client *c = NULL;
  holder h;
  int rc, sold = -1, n = 0;
  int64_t taken;
  long stock;
  char ch;

  memset(&h, 0, sizeof(h));
  if (r == NULL) return -1;
  if (g->family != NONE) {
    if (client_connect(url, &c) != HILOCK_OK) goto out;
    if (holder_new(c, g, &h) != 0) goto out;
  }
  while (read(start_fd, &ch, 1) < 0 && errno == EINTR) {
  }
  for (;;) {
    if ((rc = holder_acquire(&h, 30000)) == HILOCK_SOLDOUT) break;
    if (rc != HILOCK_OK) {
      fprintf(stderr, "acquire: %s\n",
              rc == HILOCK_BUSY ? "busy for 30 s" : holder_errmsg(&h, rc));
      goto out;
    }
    if (g->family == SEGMENTED) {
      sleep_us(500); /* the same work, inside the segment */
      if ((rc = hilock_seglock_take(h.seg, 1, 0, &taken, NULL)) != HILOCK_OK) {
        fprintf(stderr, "take: %s\n", hilock_seglock_errmsg(h.seg));
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
    if ((rc = holder_release(&h)) != HILOCK_OK) {
      fprintf(stderr, "release: %s\n", holder_errmsg(&h, rc));
      goto out;
    }
  }
  sold = n;
out:
  if (holder_held(&h) && (rc = holder_release(&h)) != HILOCK_OK) {
    fprintf(stderr, "release: %s\n", holder_errmsg(&h, rc));
    sold = -1;
  }
  holder_free(&h);
  hilock_client_free(c);
  redisFree(r);
  return sold;
}

/* The segmented lock's own stock: load it (load != 0) or read what is left. */
static int seg_stock(const char *url, int load, long *left) {
  hilock_client *c = NULL;
  hilock_seglock *seg = NULL;
  int64_t n = 0;
  int rc = client_connect(url, &c);
  if (rc == HILOCK_OK)
    rc = hilock_seglock_new(c, LOCK_NAME, strlen(LOCK_NAME), SEGMENTS, 10000,
                            &seg);
  if (rc == HILOCK_OK)
    rc = load ? hilock_seglock_stock_init(seg, STOCK)
              : hilock_seglock_stock(seg, -1, &n);
  if (rc != HILOCK_OK)
    fprintf(stderr, "segmented stock: %s\n",
            seg ? hilock_seglock_errmsg(seg) : hilock_strerror(rc));
  if (left != NULL) *left = (long)n;
  hilock_seglock_free(seg);
  hilock_client_free(c);
  return rc == HILOCK_OK ? 0 : -1;
}

/* Run one round with the given guard; fills *sold, *left and *secs. */
static int run(redisContext *r, const char *url, const guard *g, int workers,
               long *sold, long *left, double *secs) {
  int start[2], res[2], spawned = 0, ok = 1, n, status;
  double t0;

  if (set_stock(r, STOCK) != 0) return -1;
  if (g->family == SEGMENTED && seg_stock(url, 1, NULL) != 0) return -1;
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
  if (g->family == SEGMENTED) return seg_stock(url, 0, left);
  return get_stock(r, left);
}

/* An operator's step before the demo: clear a lock left by an interrupted
 * earlier run (a simple lock would otherwise stay held). */
static int clear_stale_lock(const char *url) {
  hilock_client *c = NULL;
  hilock_lock *lk;
  int rc, deleted = 0;

  if ((rc = client_connect(url, &c)) != HILOCK_OK) {
    hilock_client_free(c);
    return -1;
  }
  if ((lk = new_lock(c, HILOCK_LOCK_SIMPLE)) != NULL &&
      (rc = hilock_lock_force_release(lk, &deleted)) != HILOCK_OK)
    fprintf(stderr, "force_release: %s\n", hilock_lock_errmsg(lk));
  if (deleted) printf("cleared a stale %s lock\n", LOCK_NAME);
  hilock_lock_free(lk);
  hilock_client_free(c);
  return lk != NULL && rc == HILOCK_OK ? 0 : -1;
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
  printf("| %-12s | %5s | %8s | %10s | %7s |\n", "guard", "sold", "oversold",
         "stock left", "seconds");
  printf("|--------------|-------|----------|------------|---------|\n");
  for (size_t i = 0; i < sizeof(guards) / sizeof(guards[0]); i++) {
    long sold, left;
    double secs;
    if (run(r, url, &guards[i], workers, &sold, &left, &secs) != 0) {
      status = 1;
      break;
    }
    printf("| %-12s | %5ld | %8ld | %10ld | %7.2f |\n", guards[i].label, sold,
           sold > STOCK ? sold - STOCK : 0, left, secs);
    if (guards[i].family != NONE && (sold != STOCK || left != 0)) status = 1;
  }
  printf("\nwith every lock type exactly %d sold: %s\n", STOCK,
         status == 0 ? "yes" : "NO");
  redisFree(r);
  return status;
}
