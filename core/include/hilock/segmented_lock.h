/* hilock: the segmented lock, for hot inventory.
 *
 * One resource split into K segments, each with its own exclusive lock and
 * its own share of the stock, so up to K holders work at once instead of
 * one. An acquire takes any free segment that still has stock: one script
 * reads every segment and grants the first free, non-empty one from a
 * random start (one round trip). Segments whose stock is 0 are empty and
 * are skipped; when every segment is empty the acquire returns
 * HILOCK_SOLDOUT (an ordinary outcome, not an error and not a timeout), so
 * callers stop instead of waiting.
 *
 * Keys (one hash tag, so every script stays in one cluster slot; the
 * "seg:" roles keep them apart from other lock types of the same name):
 *   hilock:{name}:seg:<i>      string, the owner token of segment i's
 *                              holder, with the TTL (i = 0..K-1)
 *   hilock:{name}:seg:stock    hash {"<i>" -> units left in segment i,
 *                              "segments" -> K}; no expiry (it is the data)
 *   hilock:{name}:seg:fence    hash {"n" -> last fencing token,
 *                              "<i>" -> fence of segment i's latest grant}
 *   hilock:{name}:seg:wake     the wake list every waiter sleeps on
 *
 * Stock moves only under the lock: hilock_segmented_lock_take checks the holder's
 * token and decrements the held segment in one script, so no segment is
 * ever sold below 0 and the units sold add up to the stock loaded. A
 * segment with no stock entry (no hilock_segmented_lock_stock_init or _set) counts
 * as non-empty: without stock, the type is a plain K-way lock.
 *
 * Waiting: when every non-empty segment is held, a blocked acquire sleeps
 * on the shared wake list; the release of any segment wakes one waiter,
 * and every sleep is bounded by the shortest remaining TTL among the held
 * segments and by the caller's deadline. A waiter that finds the stock sold
 * out passes the wake-up on, so every waiter learns it promptly.
 *
 * Verbs: those of every family, on the lock's hold (hilock/hold.h:
 * hilock_hold_acquire(HILOCK_HOLD(seg), wait_ms) and the others), for one
 * segment (see hilock_segmented_lock_segment): try_acquire is one round
 * trip, HILOCK_BUSY when every non-empty segment is held; both acquires end
 * with HILOCK_SOLDOUT when every segment is empty. release wakes one
 * waiter; extend and renew act on the held segment's TTL.
 *
 * Each grant carries a fencing token, strictly increasing per lock name
 * (across all segments, so also within each segment). Grants are renewed
 * by the client's watchdog when auto-renewal is on, as for hilock_lock.
 *
 * Threads: a handle stands for one holder of one segment; use it from one
 * thread at a time. Fork: a grant belongs to the process that acquired it;
 * in a forked child release, take and extend return HILOCK_EFORKED and
 * touch nothing. */
#ifndef HILOCK_SEGMENTED_LOCK_H
#define HILOCK_SEGMENTED_LOCK_H

#include <stdint.h>
#include <stddef.h>

#include "hilock/client.h"
#include "hilock/export.h"
#include "hilock/hold.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest number of segments accepted. */
#define HILOCK_SEGMENTS_MAX 1024
/* Largest stock per segment, and per hilock_segmented_lock_stock_init total
 * (exact in the server's Lua numbers). */
#define HILOCK_STOCK_MAX ((int64_t)1 << 50)
/* A segment index that names no one segment: every segment (the stock's
 * sum, the stock hash's key), or no grant yet. */
#define HILOCK_SEGMENT_ALL ((size_t)-1)
#define HILOCK_SEGMENT_NONE HILOCK_SEGMENT_ALL

typedef struct hilock_segmented_lock hilock_segmented_lock;

/* CONSTRUCTOR, as every family's (hold.h; EINVAL's message is in
 * hilock_client_errmsg). segments in 1..HILOCK_SEGMENTS_MAX; every handle
 * on one name must use the same segment count (the stock records it, and a
 * mismatch is HILOCK_EINVAL at acquire). */
HILOCK_API int hilock_segmented_lock_new(hilock_client *client, const char *name,
                                  size_t namelen, size_t segments,
                                  int64_t ttl_ms, hilock_segmented_lock **out);

/* Take n >= 1 units from the held segment's stock, in one script that
 * checks this handle still holds the segment. If the segment has fewer
 * than n: with partial != 0 take what is left, else take nothing.
 * *taken (may be NULL) gets the units taken (0..n), *left (may be NULL)
 * the units left in the segment. A segment whose stock reaches 0 is empty
 * from then on. HILOCK_ENOTOWNED (and the hold marked lost) if the segment
 * is no longer held by this handle; HILOCK_EINVAL if it has no stock.
 * On a client with wait_replicas the take is confirmed with WAIT like a
 * grant: an unacknowledged take is put back and HILOCK_ENOREPLICAS
 * returned with *taken = 0. */
HILOCK_API int hilock_segmented_lock_take(hilock_segmented_lock *seg, int64_t n,
                                   int partial, int64_t *taken,
                                   int64_t *left);

/* Operator: load total units split evenly over the segments (segment i
 * gets total / K, plus one for i < total % K), replacing any stock, and
 * record the segment count. total in 0..HILOCK_STOCK_MAX. Wakes a waiter.
 * Meant for set-up: a holder's units move under it. */
HILOCK_API int hilock_segmented_lock_stock_init(hilock_segmented_lock *seg, int64_t total);

/* Operator: set one segment's stock to n in 0..HILOCK_STOCK_MAX (0 marks
 * it empty). HILOCK_EINVAL if the stored segment count differs. */
HILOCK_API int hilock_segmented_lock_stock_set(hilock_segmented_lock *seg, size_t segment,
                                        int64_t n);

/* Round trip: units left in segment (0..K-1), or the sum over all
 * segments for HILOCK_SEGMENT_ALL. *n = -1 for a segment with no stock
 * entry (or, for the sum, when no segment has one). */
HILOCK_API int hilock_segmented_lock_stock(hilock_segmented_lock *seg, size_t segment,
                                    int64_t *n);

/* Round trip: how many segments are held now, by anyone (this handle's own
 * grant: hilock_hold_held). */
HILOCK_API int hilock_segmented_lock_segments_held(hilock_segmented_lock *seg,
                                                   size_t *n);

/* The segment of the current or last grant (0..K-1), or HILOCK_SEGMENT_NONE
 * before the first grant. */
HILOCK_API size_t hilock_segmented_lock_segment(const hilock_segmented_lock *seg);

/* The number of segments, K. */
HILOCK_API size_t hilock_segmented_lock_segments(const hilock_segmented_lock *seg);

/* The Redis key of segment i's lock (i = 0..K-1), or of the stock hash
 * (HILOCK_SEGMENT_ALL), and its length; "" for an index out of range. */
HILOCK_API const char *hilock_segmented_lock_key(const hilock_segmented_lock *seg, size_t i,
                                          size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_SEGMENTED_LOCK_H */
