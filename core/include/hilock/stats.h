/* hilock: statistics and the log callback of a client (or a Redlock).
 *
 * Counters. Every client counts what its locks do, in the layer every lock
 * type and the async API share: relaxed atomic increments, no lock on the
 * way of an acquire. A Redlock handle drives its own connections and
 * counts in its own runtime: read it with hilock_redlock_stats.
 *
 * Histograms. Wait and hold times go into HILOCK_STATS_BUCKETS fixed
 * buckets on a 1-2-5 log scale: bucket i counts the times t with
 * bound(i-1) < t <= bound(i), where bound(i) is hilock_stats_bucket_us(i):
 * 100 us, 200 us, 500 us, 1 ms, 2 ms, 5 ms ... 50 s, 100 s, and the last
 * bucket everything above 100 s. The buckets are not cumulative (a
 * Prometheus "le" bucket is the sum of the buckets up to it); count is the
 * sum of the buckets, sum_us the sum of the times observed.
 *
 * A snapshot reads each counter on its own: under load, counters may be
 * a few events apart from each other; each one is exact. */
#ifndef HILOCK_STATS_H
#define HILOCK_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "hilock/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hilock_client hilock_client;
typedef struct hilock_redlock hilock_redlock;

#define HILOCK_STATS_BUCKETS 20

typedef struct hilock_histogram {
  uint64_t count;  /* observations: the sum of buckets */
  uint64_t sum_us; /* their total, in microseconds */
  uint64_t buckets[HILOCK_STATS_BUCKETS]; /* see hilock_stats_bucket_us */
} hilock_histogram;

/* New members are only ever appended: a caller passes sizeof(hilock_stats)
 * as it was compiled, and a library that knows more fills only that. */
typedef struct hilock_stats {
  uint64_t acquired; /* grants (a reentrant lock's re-entry is one) */
  uint64_t busy;     /* one-shot acquires (try, or wait 0) refused: held */
  uint64_t timeouts; /* acquires that waited and ran out of time */
  uint64_t waits;    /* acquires that had to wait (whatever the outcome) */
  uint64_t errors;   /* acquires that ended in an error (status < 0) */
  uint64_t lost;     /* grants found lost (expired, taken, deleted) */
  uint64_t renewals; /* successful renewals (auto-renewal thread) */
  uint64_t renewal_failures; /* renewals that could not reach or confirm
                                the server (retried while valid) */
  uint64_t reconnects;   /* broken connections replaced */
  uint64_t redirections; /* cluster MOVED and ASK replies followed */
  uint64_t failovers;    /* requests (or renewal batches) that found the
                            master moved (Sentinel: READONLY...); threads
                            busy at the time may each see one failover */
  hilock_histogram wait; /* acquire call to its end, for acquires that
                            waited (their count is waits) */
  hilock_histogram hold; /* grant to release, for grants released */
} hilock_stats;

/* Fill out (size bytes of it: sizeof(hilock_stats)) with the client's
 * counters since it was made or last reset. HILOCK_EINVAL for NULL
 * arguments or a size smaller than the first member. */
HILOCK_API int hilock_client_stats(const hilock_client *client,
                                   hilock_stats *out, size_t size);
/* Set every counter of the client to zero (each on its own: events that
 * happen meanwhile may be counted or not). */
HILOCK_API int hilock_client_stats_reset(hilock_client *client);
/* The same for a Redlock handle, whose counters are its own. */
HILOCK_API int hilock_redlock_stats(const hilock_redlock *rl,
                                    hilock_stats *out, size_t size);
HILOCK_API int hilock_redlock_stats_reset(hilock_redlock *rl);
/* Upper bound of histogram bucket i in microseconds; INT64_MAX for the
 * last bucket (and for i out of range). */
HILOCK_API int64_t hilock_stats_bucket_us(size_t i);

/* Log levels (the values of Python's logging levels). */
enum {
  HILOCK_LOG_INFO = 20,    /* a connection replaced, a master change */
  HILOCK_LOG_WARNING = 30, /* a renewal failed (retried while valid) */
  HILOCK_LOG_ERROR = 40    /* a grant was lost */
};

/* A log record: level, the lock's name (NULL and 0 for events of the
 * connection: reconnects, failovers) and a message; both valid only
 * during the call.
 *
 * Threads: called on the thread that saw the event: the renewal thread for
 * a renewal failure and a loss it finds, the calling thread for a loss a
 * call finds (owned, extend, release), the thread whose request met a
 * broken connection or a failover, the shared waiting's thread for its own
 * reconnects. It is never called with a mutex of the client held, but it
 * may be called while a lock handle's own state is locked: it must return
 * quickly and must not call hilock functions (hand the record to another
 * thread if it needs to act on it). */
typedef void (*hilock_log_fn)(void *arg, int level, const char *lock,
                              size_t locklen, const char *msg);

/* Set (fn NULL: remove) the client's log callback. HILOCK_EINVAL for a
 * NULL client. A record being delivered as this is called may still go to
 * the previous callback. */
HILOCK_API int hilock_client_set_log(hilock_client *client, hilock_log_fn fn,
                                     void *arg);
HILOCK_API int hilock_redlock_set_log(hilock_redlock *rl, hilock_log_fn fn,
                                      void *arg);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_STATS_H */
