/* hilock: looking at locks from outside, for operators.
 *
 * Every call here works on a lock name without knowing its type and
 * without a handle: hilock_client_inspect reads what is there in one round
 * trip (one script over every key the families use for the name; they
 * share the hash tag {name}, so this works on a Cluster too),
 * hilock_client_force_release takes a lock away from whoever holds it,
 * and hilock_client_list_locks walks the lock names present (SCAN, never
 * KEYS; on a Cluster, every master).
 *
 * Types. A plain, expiring, lease and simple lock share one layout and are
 * all reported as HILOCK_TYPE_LOCK ("lock"; a simple lock has ttl_ms -1);
 * so are the names of a multi-key lock, each on its own (inspecting "a" of
 * a multi-key lock over "a" and "b" reports a lock held by the multi-key
 * lock's token). One node of a Redlock keeps its own key:
 * HILOCK_TYPE_REDLOCK ("redlock"), that node's view. A name whose keys
 * hold Redis types no family writes (a user's key in hilock's namespace)
 * is HILOCK_TYPE_UNKNOWN ("unknown") and force release refuses it with
 * HILOCK_EWRONGTYPE. A leader election (hilock/election.h) is
 * HILOCK_TYPE_ELECTION ("election"): held while someone leads, its holder
 * the leader's token. A name with nothing but its fence counter (every
 * name once granted keeps it) is HILOCK_TYPE_NONE ("none"). */
#ifndef HILOCK_INSPECT_H
#define HILOCK_INSPECT_H

#include <stddef.h>
#include <stdint.h>

#include "hilock/client.h"
#include "hilock/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hilock_lock_type {
  HILOCK_TYPE_NONE = 0,
  HILOCK_TYPE_LOCK = 1,
  HILOCK_TYPE_RLOCK = 2,
  HILOCK_TYPE_SEMAPHORE = 3,
  HILOCK_TYPE_FAIR_LOCK = 4,
  HILOCK_TYPE_RWLOCK = 5,
  HILOCK_TYPE_SEQUENTIAL_LOCK = 6,
  HILOCK_TYPE_SEGMENTED_LOCK = 7,
  HILOCK_TYPE_REDLOCK = 8,
  HILOCK_TYPE_UNKNOWN = 9,
  HILOCK_TYPE_ELECTION = 10
} hilock_lock_type;

/* Longest holder token kept whole in hilock_lock_info (hilock's own are
 * at most 56 bytes). */
#define HILOCK_HOLDER_MAX 256

/* What one lock name holds now. Fields that do not apply are 0, or -1
 * where 0 is a real value (permits). */
typedef struct hilock_lock_info {
  hilock_lock_type type;
  const char *type_name; /* "none", "lock", "rlock", "semaphore",
                            "fair_lock", "rwlock", "sequential_lock",
                            "segmented_lock", "redlock", "unknown" */
  int held;              /* 1 if anyone holds it (a reader counts) */
  /* The holder's owner token, whole (NUL-terminated; "" when nobody or
   * several hold it: semaphore, segmented lock, several readers). A longer
   * foreign value is cut at HILOCK_HOLDER_MAX; holder_len is its length. */
  char holder[HILOCK_HOLDER_MAX + 1];
  size_t holder_len;
  /* The last grant's fencing token; for a name not held, the last one
   * handed out on it. 0: none (a semaphore has none; no grant yet). */
  uint64_t fence;
  /* The current hold's remaining time on the server: -1 held with no
   * expiry, -2 nothing held. For several holders, the longest. */
  int64_t ttl_ms;
  /* Reentrant holds of the holder (reentrant lock, a write hold); the
   * read holds of all readers; the permits or segments held (semaphore,
   * segmented lock); 1 for another lock held; 0 when not held. */
  int64_t hold_count;
  int64_t readers; /* read-write lock: live readers */
  int writer;      /* read-write lock: 1 if write-held */
  /* Semaphore: the stored limit (-1 if none is stored), permits live, and
   * free; segmented lock: segments known, held, and free. -1 elsewhere. */
  int64_t permits, permits_used, permits_free;
  /* Waiters registered on the server: fair lock and sequential lock, the
   * live waiters in line; read-write lock, the waiting writers and
   * readers. 0 for the other types, whose waiters register nowhere. */
  int64_t waiters;
  /* Lock delay (hilock_hold_set_lock_delay): the delay of the name's last grant
   * that had one (0: no delay marker), and the marker's remaining time (-2:
   * none): while held, how long no one else may be granted the name if the
   * holder were lost now; while not held, until the delay ends. A name with
   * nothing but the marker is HILOCK_TYPE_LOCK, not held. */
  int64_t delay_ms, delay_left_ms;
} hilock_lock_info;

/* Round trip: fill *info for the lock name (1..HILOCK_NAME_MAX bytes, not
 * beginning with '}'). A name with nothing there is HILOCK_OK with type
 * HILOCK_TYPE_NONE. Returns HILOCK_OK, HILOCK_EINVAL, HILOCK_ECLOSED or a
 * connection error; the message is on the client. */
HILOCK_API int hilock_client_inspect(hilock_client *client, const char *name,
                                     size_t namelen, hilock_lock_info *info);

/* Round trip: remove the lock state of name, whatever its type and
 * holder, and wake its waiters as a release does, so they try again at
 * once. Kept: the fence counters (fences keep increasing after it), the
 * fair lock's ticket and sequential lock's sequence counters, a
 * semaphore's stored limit and a segmented lock's stock. A fair or
 * sequential lock's line is dissolved: every waiter is woken and queues
 * anew (a fair waiter with its old ticket). The holder finds its lock lost
 * at its next renewal, extend or release (HILOCK_ENOTOWNED). *deleted = 1
 * if anything was removed (deleted may be NULL). HILOCK_EWRONGTYPE (nothing
 * changes) if a key of the name holds a type no family writes. */
HILOCK_API int hilock_client_force_release(hilock_client *client,
                                           const char *name, size_t namelen,
                                           int *deleted);

/* A walk over the lock names present. */
typedef struct hilock_scan hilock_scan;

/* Start a walk over the lock names matching pattern (a Redis glob over
 * the user-level name, not the key: *, ?, [abc], [^a-z], \ escapes;
 * "*" for all). Nothing is sent yet. The walk keeps a client reference;
 * free it with hilock_scan_free. HILOCK_EINVAL for a NULL or empty
 * pattern or one longer than 4 * HILOCK_NAME_MAX. */
HILOCK_API int hilock_client_list_locks(hilock_client *client,
                                        const char *pattern,
                                        size_t patternlen, hilock_scan **out);

/* Round trips: the next lock name (its state in *info, *found = 1), or
 * *found = 0 when the walk is over. Each name is reported once, however
 * many keys it has; names with nothing but a fence counter (type none)
 * are skipped. SCAN's guarantees hold: a name present for the whole walk
 * is reported; one created or removed meanwhile may or may not be. On
 * failure the walk may be resumed by calling again. */
HILOCK_API int hilock_scan_next(hilock_scan *scan, hilock_lock_info *info,
                                int *found);

/* The name the last hilock_scan_next reported (binary safe: *len bytes;
 * "" before the first). Valid until the next call on the walk. */
HILOCK_API const char *hilock_scan_name(const hilock_scan *scan, size_t *len);

/* The client the walk belongs to (its errors are on it). */
HILOCK_API hilock_client *hilock_scan_client(const hilock_scan *scan);

/* Free the walk; NULL is a no-op. A walk is used by one thread at a
 * time; it remembers every name it found (to report each once). */
HILOCK_API void hilock_scan_free(hilock_scan *scan);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_INSPECT_H */
