/* The overselling demo: N processes sell from a stock of 100.
 *
 * The stock is a plain Redis key, and each sale is a non-atomic
 * read-modify-write (GET stock, check, SET stock-1). Without a lock the
 * sellers interleave and sell more than there is; with any hilock lock type
 * around the read-modify-write exactly 100 are sold.
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

typedef struct guard {
  const char *label;
  int kind; /* a hilock_lock_kind, or -1 for no lock */
} guard;

static const guard guards[] = {{"none", -1},
                               {"lock", HILOCK_LOCK_EXPIRING},
                               {"simple_lock", HILOCK_LOCK_SIMPLE},
                               {"lease", HILOCK_LOCK_LEASE}};

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

/* One seller process: wait for the start signal (EOF on start_fd), then sell
 * until the stock is gone. Returns the number sold, or -1 on error. */
static int sell(const char *url, int kind, int start_fd) {
  redisContext *r = redis_connect_url(url);
  hilock_client *c = NULL;
  hilock_lock *lk = NULL;
  int rc, sold = -1, n = 0;
  long stock;
  char ch;

  if (r == NULL) return -1;
  if (kind >= 0) {
    if (client_connect(url, &c) != HILOCK_OK) goto out;
    if ((lk = new_lock(c, kind)) == NULL) goto out;
  }
  while (read(start_fd, &ch, 1) < 0 && errno == EINTR) {
  }
  for (;;) {
    if (lk != NULL && (rc = hilock_lock_acquire(lk, 30000)) != HILOCK_OK) {
      fprintf(stderr, "acquire: %s\n",
              rc == HILOCK_BUSY ? "busy for 30 s" : hilock_lock_errmsg(lk));
      goto out;
    }
    if (get_stock(r, &stock) != 0) goto out;
    if (stock <= 0) break;
    sleep_us(500); /* work between the read and the write */
    if (set_stock(r, stock - 1) != 0) goto out;
    n++;
    if (lk != NULL && (rc = hilock_lock_release(lk)) != HILOCK_OK) {
      fprintf(stderr, "release: %s\n", hilock_lock_errmsg(lk));
      goto out;
    }
  }
  sold = n;
out:
  if (lk != NULL && hilock_lock_held(lk) &&
      (rc = hilock_lock_release(lk)) != HILOCK_OK) {
    fprintf(stderr, "release: %s\n", hilock_lock_errmsg(lk));
    sold = -1;
  }
  hilock_lock_free(lk);
  hilock_client_free(c);
  redisFree(r);
  return sold;
}

/* Run one round with the given guard; fills *sold, *left and *secs. */
static int run(redisContext *r, const char *url, const guard *g, int workers,
               long *sold, long *left, double *secs) {
  int start[2], res[2], spawned = 0, ok = 1, n, status;
  double t0;

  if (set_stock(r, STOCK) != 0) return -1;
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
      n = sell(url, g->kind, start[0]);
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
    if (guards[i].kind >= 0 && (sold != STOCK || left != 0)) status = 1;
  }
  printf("\nwith every lock type exactly %d sold: %s\n", STOCK,
         status == 0 ? "yes" : "NO");
  redisFree(r);
  return status;
}
