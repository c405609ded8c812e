/* hilock: the fenced store.
 *
 * A lock's fence protects nothing until the storage checks it: a holder
 * that pauses past its TTL (a garbage-collection stop, a slow disk) wakes
 * up believing it still holds the lock, and its read-modify-write lands on
 * top of the next holder's. The store checks the fence on every access.
 *
 * Each call is one script on the data key's server. Beside the data key K
 * it keeps the highest fence that has touched K (read or write) in the
 * record key hilock:fence:{K} (hilock:fence:K when K carries a hash tag of
 * its own, so that both keys share K's cluster slot; the client's
 * key_prefix in place of hilock:), and refuses an
 * access with a lower fence: HILOCK_ESTALE, the data untouched. An access
 * with the same fence as the record is accepted (one holder makes many
 * calls), a higher one raises the record. Reads are fenced too: a stale
 * holder that writes after the next holder read, but before it wrote,
 * would otherwise still lose that holder's update.
 *
 * Fences of different lock names do not compare: guard one data key by one
 * lock name. A fence is any grant's hilock_hold_fence (every exclusive
 * type, and each name's fence of a multi-key lock), passed explicitly, so
 * a holder may hand it to a worker in another process. Fences are 1 ..
 * HILOCK_STORE_FENCE_MAX (the server's Lua compares numbers exactly up to
 * 2^53; hilock's fences stay far below).
 *
 * The data key holds a plain string (GET, SET, INCRBY: other clients can
 * read it). The record lives as long as the data key and then `linger_ms`
 * more (default one day; -1 keeps records forever), so a holder paused
 * past the data's expiry or deletion still finds its fence refused for
 * that long. A key K whose name has no hash tag but contains '}' cannot
 * have its record in its slot: on a cluster such keys are HILOCK_EINVAL.
 *
 * Threads: a store may be shared by threads; its calls keep no state but
 * the calling thread's last error (hilock_store_errmsg, as errno). Values
 * are at most max_value bytes (default HILOCK_STORE_VALUE_DEFAULT,
 * at most HILOCK_STORE_VALUE_MAX, Redis's own limit). */
#ifndef HILOCK_STORE_H
#define HILOCK_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "hilock/client.h"
#include "hilock/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hilock_store hilock_store;

#define HILOCK_STORE_FENCE_MAX ((uint64_t)1 << 53)
#define HILOCK_STORE_KEY_MAX 65536
#define HILOCK_STORE_VALUE_DEFAULT ((size_t)64 << 20)
#define HILOCK_STORE_VALUE_MAX ((size_t)512 << 20)
#define HILOCK_STORE_LINGER_DEFAULT ((int64_t)86400000)

typedef struct hilock_store_options {
  int64_t linger_ms; /* how long a record outlives its data; -1 forever,
                        0 the default (HILOCK_STORE_LINGER_DEFAULT) */
  size_t max_value;  /* largest value accepted; 0 the default */
} hilock_store_options;

/* CONSTRUCTOR. A store on client's server (a cluster: every key on its
 * slot's master). opts may be NULL (the defaults). Holds a reference to
 * the client. Returns HILOCK_OK, HILOCK_EINVAL, HILOCK_ENOMEM,
 * HILOCK_ECLOSED (message on the client). */
HILOCK_API int hilock_store_new(hilock_client *client,
                                const hilock_store_options *opts,
                                hilock_store **out);
/* DESTRUCTOR. NULL is a no-op. */
HILOCK_API void hilock_store_free(hilock_store *store);

/* The value of key for the holder of fence: *value is a malloc'd copy
 * (free it with hilock_store_value_free) of *len bytes, or NULL when the
 * key does not exist. Raises the record to fence. Returns HILOCK_OK,
 * HILOCK_ESTALE (a higher fence has touched key; *value NULL),
 * HILOCK_EINVAL, HILOCK_EWRONGTYPE (key or its record is not a string),
 * or a connection error. */
HILOCK_API int hilock_store_get(hilock_store *store, const char *key,
                                size_t keylen, uint64_t fence, char **value,
                                size_t *len);
HILOCK_API void hilock_store_value_free(char *value);

/* Set key to value (len bytes) for the holder of fence, expiring after
 * ttl_ms (0: no expiry, and any earlier expiry is removed, as SET does). */
HILOCK_API int hilock_store_set(hilock_store *store, const char *key,
                                size_t keylen, uint64_t fence,
                                const char *value, size_t len, int64_t ttl_ms);

/* Add by to the integer in key (a missing key counts as 0); *result gets
 * the new value. ttl_ms > 0 sets the key's expiry, 0 leaves it as it is.
 * HILOCK_EREDIS when key holds no integer (or it would overflow). */
HILOCK_API int hilock_store_incrby(hilock_store *store, const char *key,
                                   size_t keylen, uint64_t fence, int64_t by,
                                   int64_t ttl_ms, int64_t *result);

/* Delete key; *deleted is 1 if it existed. The record stays (linger_ms). */
HILOCK_API int hilock_store_delete(hilock_store *store, const char *key,
                                   size_t keylen, uint64_t fence,
                                   int *deleted);

/* The highest fence that has touched key (*fence 0 when none has, or its
 * record expired). Not fenced itself: it changes nothing. */
HILOCK_API int hilock_store_fence_of(hilock_store *store, const char *key,
                                     size_t keylen, uint64_t *fence);

/* The calling thread's last failure on this store (as errno): "" and
 * HILOCK_OK when none. Never NULL. */
HILOCK_API const char *hilock_store_errmsg(const hilock_store *store);
HILOCK_API int hilock_store_errcode(const hilock_store *store);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_STORE_H */
