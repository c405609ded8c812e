/* Lock cycle throughput: acquire + release on one uncontended lock.
 *
 *   bench_c floor|hilock|semaphore|fair|seglock|multi2|multi8|
 *           rwread|rwwrite [url] [duration]
 *
 * floor   the least a correct expiring lock can cost with hiredis: one
 *         SET key token NX PX 30000 and one EVALSHA of a compare-and-delete
 *         release script per cycle, on one connection
 * hilock  hilock_hold_try_acquire + hilock_hold_release on one expiring lock
 * semaphore  the same on a counting semaphore of 1 permit
 * fair    the same on a fair (FIFO) lock
 * seglock the same on a segmented lock of 8 segments (no stock loaded)
 * rwread, rwwrite  the read or the write side of a read-write lock
 * multiN  hilock_hold_try_acquire + release on a multi-key lock of N
 *         names (2 or 8)
 *
 * duration is seconds ("2", "0.5s", default 2) or a cycle count ("10000c").
 * A 0.25 s warm-up runs first. Prints one JSON object:
 *   {"mode": ..., "cycles": ..., "seconds": ..., "cycles_per_s": ...} */
#include <hilock/hilock.h>
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXAMPLE_WITH_HIREDIS
#include "example.h"

#define WARMUP_S 0.25

/* The same compare-and-delete as core/scripts/lock_release.lua. */
static const char release_lua[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  return 1\n"
    "end\n"
    "return 0\n";

/* ## floor: raw hiredis --------------------------------------------------- */

typedef struct floor_ctx {
  redisContext *r;
  char sha[41];
  uint64_t rng;
} floor_ctx;

static int floor_open(floor_ctx *f, const char *url) {
  redisReply *rep;
  f->rng = (uint64_t)(now_s() * 1e9) | 1;
  if ((f->r = redis_connect_url(url)) == NULL) return -1;
  rep = redis_cmd(f->r, "SCRIPT LOAD %s", release_lua);
  if (rep == NULL || rep->type != REDIS_REPLY_STRING || rep->len != 40) {
    if (rep != NULL) fprintf(stderr, "SCRIPT LOAD: unexpected reply\n");
    freeReplyObject(rep);
    return -1;
  }
  memcpy(f->sha, rep->str, 41);
  freeReplyObject(rep);
  return 0;
}

/* A fresh 32-hex-digit owner token, the size of hilock's. */
static void floor_token(floor_ctx *f, char out[33]) {
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    if (i % 16 == 0) {
      f->rng ^= f->rng << 13;
      f->rng ^= f->rng >> 7;
      f->rng ^= f->rng << 17;
    }
    out[i] = hex[(f->rng >> (4 * (i % 16))) & 15];
  }
  out[32] = '\0';
}

static int floor_cycle(void *arg) {
  floor_ctx *f = arg;
  char token[33];
  redisReply *rep;
  int ok;

  floor_token(f, token);
  rep = redis_cmd(f->r, "SET bench:floor %s NX PX 30000", token);
  ok = rep != NULL && rep->type == REDIS_REPLY_STATUS;
  freeReplyObject(rep);
  if (!ok) {
    fprintf(stderr, "SET NX: not granted\n");
    return -1;
  }
  rep = redis_cmd(f->r, "EVALSHA %s 1 bench:floor %s", f->sha, token);
  ok = rep != NULL && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
  freeReplyObject(rep);
  if (!ok) {
    fprintf(stderr, "release script: not released\n");
    return -1;
  }
  return 0;
}

/* ## hilock ------------------------------------------------------------- */

static int hilock_cycle(void *arg) {
  hilock_lock *lk = arg;
  int rc = hilock_hold_try_acquire(HILOCK_HOLD(lk));
  if (rc != HILOCK_OK) {
    fprintf(stderr, "try_acquire: %s\n",
            rc == HILOCK_BUSY ? "busy" : hilock_hold_errmsg(HILOCK_HOLD(lk)));
    return -1;
  }
  if ((rc = hilock_hold_release(HILOCK_HOLD(lk))) != HILOCK_OK) {
    fprintf(stderr, "release: %s\n", hilock_hold_errmsg(HILOCK_HOLD(lk)));
    return -1;
  }
  return 0;
}

/* The other families, through one pair of verbs. */
typedef struct family_ctx {
  int (*try_acquire)(void *);
  int (*release)(void *);
  void *handle; /* a family handle: it begins with its hold */
} family_ctx;

static int family_cycle(void *arg) {
  family_ctx *f = arg;
  int rc = f->try_acquire(f->handle);
  if (rc != HILOCK_OK) {
    fprintf(stderr, "try_acquire: %s\n",
            rc == HILOCK_BUSY ? "busy"
                              : hilock_hold_errmsg(f->handle));
    return -1;
  }
  if ((rc = f->release(f->handle)) != HILOCK_OK) {
    fprintf(stderr, "release: %s\n", hilock_hold_errmsg(f->handle));
    return -1;
  }
  return 0;
}

/* Adapters, so no function is called through a mismatched type: every
 * family's verbs are the hold's, the read side's are its own. */
static int hold_try_(void *h) { return hilock_hold_try_acquire(h); }
static int hold_rel_(void *h) { return hilock_hold_release(h); }
static int rw_read_try_(void *h) { return hilock_rwlock_read_try_acquire(h); }
static int rw_read_rel_(void *h) { return hilock_rwlock_read_release(h); }
static int rw_write_try_(void *h) { return hilock_rwlock_write_try_acquire(h); }
static int rw_write_rel_(void *h) { return hilock_rwlock_write_release(h); }

#define FAMILY(ctx, prefix, h)          \
  do {                                  \
    (ctx)->try_acquire = prefix##_try_; \
    (ctx)->release = prefix##_rel_;     \
    (ctx)->handle = (h);                \
  } while (0)

/* ## driver ------------------------------------------------------------- */

/* Run cycles until max_cycles (if > 0) or max_s have passed. */
static int run(int (*cycle)(void *), void *arg, long max_cycles, double max_s,
               long *cycles, double *secs) {
  double t0 = now_s(), t = t0;
  long n = 0;
  while (max_cycles > 0 ? n < max_cycles : t - t0 < max_s) {
    if (cycle(arg) != 0) return -1;
    n++;
    t = now_s();
  }
  *cycles = n;
  *secs = t - t0;
  return 0;
}

static int usage(const char *prog) {
  fprintf(stderr,
          "usage: %s floor|hilock|renew|semaphore|fair|seglock|multi2|multi8|rwread|"
          "rwwrite [url] "
          "[seconds | Nc]\n",
          prog);
  return 2;
}

int main(int argc, char **argv) {
  const char *mode, *url = EXAMPLE_DEFAULT_URL;
  long max_cycles = 0, cycles = 0;
  double max_s = 2.0, secs = 0, warm_s;
  int (*cycle)(void *);
  void *arg;
  floor_ctx f = {0};
  hilock_client *c = NULL;
  hilock_lock *lk = NULL;
  hilock_semaphore *sem = NULL;
  hilock_fair_lock *fair = NULL;
  hilock_segmented_lock *seg = NULL;
  hilock_multi_lock *ml = NULL;
  hilock_rwlock *rw = NULL;
  family_ctx fam = {0};
  int status = 1;

  if (argc < 2) return usage(argv[0]);
  mode = argv[1];
  if (argc > 2) url = argv[2];
  if (argc > 3) {
    char *end;
    double v = strtod(argv[3], &end);
    if (end == argv[3] || v <= 0) return usage(argv[0]);
    if (*end == 'c') max_cycles = (long)v;
    else if (*end == '\0' || *end == 's') max_s = v;
    else return usage(argv[0]);
  }

  if (strcmp(mode, "floor") == 0) {
    if (floor_open(&f, url) != 0) goto out;
    cycle = floor_cycle;
    arg = &f;
  } else if (strcmp(mode, "hilock") == 0 || strcmp(mode, "renew") == 0) {
    if (client_connect(url, &c) != HILOCK_OK) goto out;
    if (hilock_lock_new(c, "bench:c", 7, 30000, &lk) != HILOCK_OK) {
      fprintf(stderr, "lock: %s\n", hilock_client_errmsg(c));
      goto out;
    }
    /* renew: every hold is registered with the renewal thread (and
     * cancelled at release, long before its first renewal). */
    if (mode[0] == 'r' &&
        hilock_hold_set_auto_renew(HILOCK_HOLD(lk), 1, 0, NULL, NULL) != HILOCK_OK) {
      fprintf(stderr, "auto-renew: %s\n", hilock_hold_errmsg(HILOCK_HOLD(lk)));
      goto out;
    }
    cycle = hilock_cycle;
    arg = lk;
  } else if (strcmp(mode, "rwread") == 0 || strcmp(mode, "rwwrite") == 0) {
    int write = mode[2] == 'w';
    if (client_connect(url, &c) != HILOCK_OK) goto out;
    if (hilock_rwlock_new(c, "bench:rw", 8, 30000, &rw) != HILOCK_OK) {
      fprintf(stderr, "rwlock: %s\n", hilock_client_errmsg(c));
      goto out;
    }
    fam.try_acquire = write ? rw_write_try_ : rw_read_try_;
    fam.release = write ? rw_write_rel_ : rw_read_rel_;
    fam.handle = rw;
    cycle = family_cycle;
    arg = &fam;
  } else if (strcmp(mode, "multi2") == 0 || strcmp(mode, "multi8") == 0) {
    static const char *const names[8] = {"bench:m0", "bench:m1", "bench:m2",
                                         "bench:m3", "bench:m4", "bench:m5",
                                         "bench:m6", "bench:m7"};
    size_t n = mode[5] == '2' ? 2 : 8;
    if (client_connect(url, &c) != HILOCK_OK) goto out;
    if (hilock_multi_lock_new(c, names, n, 30000, &ml) != HILOCK_OK) {
      fprintf(stderr, "multilock: %s\n", hilock_client_errmsg(c));
      goto out;
    }
    FAMILY(&fam, hold, ml);
    cycle = family_cycle;
    arg = &fam;
  } else if (strcmp(mode, "semaphore") == 0 || strcmp(mode, "fair") == 0 ||
             strcmp(mode, "seglock") == 0) {
    int rc;
    if (client_connect(url, &c) != HILOCK_OK) goto out;
    if (mode[0] == 's' && mode[1] == 'e' && mode[2] == 'm') {
      rc = hilock_semaphore_new(c, "bench:sem", 9, 1, 30000, &sem);
      FAMILY(&fam, hold, sem);
    } else if (mode[0] == 'f') {
      rc = hilock_fair_lock_new(c, "bench:fair", 10, 30000, &fair);
      FAMILY(&fam, hold, fair);
    } else {
      rc = hilock_segmented_lock_new(c, "bench:seg", 9, 8, 30000, &seg);
      FAMILY(&fam, hold, seg);
    }
    if (rc != HILOCK_OK) {
      fprintf(stderr, "%s: %s\n", mode, hilock_client_errmsg(c));
      goto out;
    }
    cycle = family_cycle;
    arg = &fam;
  } else {
    return usage(argv[0]);
  }

  if (run(cycle, arg, 0, WARMUP_S, &cycles, &warm_s) != 0) goto out;
  if (run(cycle, arg, max_cycles, max_s, &cycles, &secs) != 0) goto out;
  printf("{\"mode\": \"%s\", \"cycles\": %ld, \"seconds\": %.6f, "
         "\"cycles_per_s\": %.1f}\n",
         mode, cycles, secs, secs > 0 ? (double)cycles / secs : 0.0);
  status = 0;
out:
  if (f.r != NULL) redisFree(f.r);
  hilock_hold_free(HILOCK_HOLD(lk));
  hilock_hold_free(HILOCK_HOLD(sem));
  hilock_hold_free(HILOCK_HOLD(fair));
  hilock_hold_free(HILOCK_HOLD(seg));
  hilock_hold_free(HILOCK_HOLD(ml));
  hilock_hold_free(HILOCK_HOLD(rw));
  hilock_client_free(c);
  return status;
}
