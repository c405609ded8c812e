/* hilock: Redlock, one lock over N independent Redis masters.
 *
 * The same key (hilock:{name}:redlock) and the same random owner token are
 * set on every node at once: the requests go out together on non-blocking
 * connections, one per node, and the replies are collected with poll(2),
 * each node bounded by the node timeout (default min(50 ms, ttl/10)). The
 * lock is granted only if a majority (n/2 + 1) of the nodes took it and
 * time is left:
 *
 *   validity = ttl - elapsed - (ttl * 0.01 + 2 ms) > 0
 *
 * where elapsed runs from before the first request to the last reply of
 * the round (CLOCK_MONOTONIC). A failed attempt deletes its token from
 * every node, including those that failed or did not answer; a blocking
 * acquire retries after a random delay (up to the retry delay, default
 * 200 ms) within the caller's deadline.
 *
 * Release, extend, renewal and owned() go to all nodes and count only with
 * a majority. Extension counts only if the majority confirmed within the
 * current validity; the watchdog renews through a majority the same way and
 * reports a loss through the lost callback, as for the other locks.
 *
 * Fencing: every node keeps its own counter (hilock:{name}:fence) and the
 * acquire script draws from it on the nodes that grant (the larger of the
 * counter + 1 and the node's clock in microseconds, as every family does:
 * see docs/locks.md); the grant's fence is the largest value among them.
 * When those values differ (nearly always: the nodes' clocks), the largest is
 * written back to every node (a majority must confirm) before the grant is
 * returned, so that any later majority, which shares a node with this one,
 * counts past it. The fence is strictly increasing only under Redlock's own
 * assumptions (no node loses acknowledged writes: persistence with
 * appendfsync always, or restarts delayed by more than the TTL).
 *
 * Verbs: those of every family, on the lock's hold (hilock/hold.h:
 * hilock_hold_acquire(HILOCK_HOLD(rl), wait_ms) and the others), on a
 * majority. A grant is a majority in time; HILOCK_BUSY when others hold a
 * majority, HILOCK_ENOQUORUM when too few nodes answered. acquire retries
 * after a random delay, returns the last attempt's outcome or HILOCK_EINTR,
 * and retries attempts without a majority of answering nodes for at most
 * opts.reconnect_ms (as a broken connection is), then returns
 * HILOCK_ENOQUORUM even before wait_ms. release is an owner-checked delete
 * on every node: HILOCK_OK if a majority deleted it, HILOCK_ENOTOWNED if a
 * majority no longer had this holder's token (it expired); the grant is
 * forgotten in every case, and keys left on unreachable nodes lapse at
 * their TTL. extend and renew act on every node that still holds this
 * holder's token and count only if a majority confirms within the current
 * validity (the new validity is measured from before the request):
 * HILOCK_ENOTOWNED (and the hold marked lost) if a majority has lost it,
 * HILOCK_ENOQUORUM if too few nodes answered (the old validity stands).
 *
 * Errors: HILOCK_ENOQUORUM when fewer than a majority of the nodes could
 * take part (down, slow, refusing); the handle's message names each failed
 * node as "address: error". HILOCK_BUSY when a majority is held by others.
 *
 * Threads: a handle stands for one holder; use it from one thread at a
 * time. It owns its connections: one per node for the caller and, with
 * auto-renewal, one per node for the renewal thread.
 *
 * Fork: a grant belongs to the process that acquired it; in a forked child
 * release and extend return HILOCK_EFORKED and touch nothing. The child
 * reconnects for its own grants. */
#ifndef HILOCK_REDLOCK_H
#define HILOCK_REDLOCK_H

#include <stdint.h>
#include <stddef.h>

#include "hilock/client.h"
#include "hilock/export.h"
#include "hilock/hold.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most nodes one Redlock may span. */
#define HILOCK_REDLOCK_MAX_NODES 32

typedef struct hilock_redlock hilock_redlock;

/* CONSTRUCTOR. urls[0..n) name the nodes (the client's URL syntax: AUTH and
 * SELECT from each URL). ttl_ms in HILOCK_TTL_MIN_MS..HILOCK_TTL_MAX_MS. opts
 * may be NULL (connect_timeout_ms bounds the first connection round; the
 * interrupt hook ends waits). Connects to every node at once and fails with
 * HILOCK_ENOQUORUM if fewer than a majority answer, or HILOCK_EAUTH /
 * HILOCK_ENOPERM if a node refuses the credentials; a minority down is fine (it
 * is retried on every call). With opts->connect_later it connects to none:
 * the first call finds out. On failure *out may still be set: read
 * hilock_hold_errmsg(HILOCK_HOLD(rl)), then free it. */
HILOCK_API int hilock_redlock_new(const char *const *urls, size_t n,
                                  const char *name, size_t namelen,
                                  int64_t ttl_ms, const hilock_options *opts,
                                  hilock_redlock **out);

/* On the hold (HILOCK_HOLD(rl), hilock/hold.h): hilock_hold_owned asks
 * every node (owned if a majority holds this handle's token and the
 * validity has not run out); hilock_hold_validity_ms is ttl - elapsed -
 * drift from before the acquire or last extension was sent; the fence is
 * the one described above; the key is the same on every node. */

/* Number of nodes, and the majority needed (n/2 + 1). */
HILOCK_API size_t hilock_redlock_nodes(const hilock_redlock *rl);
HILOCK_API size_t hilock_redlock_quorum(const hilock_redlock *rl);
/* "host:port" or the socket path of node i; "" if out of range. */
HILOCK_API const char *hilock_redlock_node_addr(const hilock_redlock *rl,
                                                size_t i);

/* Per-node reply timeout of every round (1 ms .. ttl_ms - 1). */
HILOCK_API int hilock_redlock_set_node_timeout(hilock_redlock *rl,
                                               int64_t ms);
HILOCK_API int64_t hilock_redlock_node_timeout_ms(const hilock_redlock *rl);
/* Upper bound of the random delay between attempts (0 .. 60000 ms;
 * default 200). */
HILOCK_API int hilock_redlock_set_retry_delay(hilock_redlock *rl, int64_t ms);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_REDLOCK_H */
