/* hilock: status codes.
 *
 * Every fallible call returns an int: HILOCK_OK (0), HILOCK_BUSY (1, the lock
 * is held by someone else: an ordinary outcome, not an error), HILOCK_SOLDOUT
 * (2, a segmented lock's stock is all gone: also an ordinary outcome) or one
 * of the negative codes below. Each handle also keeps a readable message for its last
 * error (hilock_client_errmsg, hilock_hold_errmsg), carrying Redis's own text
 * where there is one. */
#ifndef HILOCK_ERRORS_H
#define HILOCK_ERRORS_H

#include "hilock/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* XX(name, value, text) */
#define HILOCK_ERRNO_MAP(XX)                                                   \
  XX(OK, 0, "success")                                                         \
  XX(BUSY, 1, "lock is held by another owner")                                 \
  XX(SOLDOUT, 2, "every segment is empty (sold out)")                          \
  XX(EINVAL, -1, "invalid argument")                                           \
  XX(ENOMEM, -2, "out of memory")                                              \
  XX(EIO, -3, "connection error")                                              \
  XX(ETIMEDOUT, -4, "network operation timed out")                             \
  XX(EPROTO, -5, "unexpected reply from server")                               \
  XX(ESCRIPT, -6, "lua script error")                                          \
  XX(ENOTOWNED, -7, "lock is not owned by this holder")                        \
  XX(EAUTH, -8, "authentication failed")                                       \
  XX(ENOPERM, -9, "permission denied by ACL")                                  \
  XX(EWRONGTYPE, -10, "key holds a value of the wrong type")                   \
  XX(EREDIS, -11, "redis error reply")                                         \
  XX(ENOTSUP, -12, "operation not supported")                                  \
  XX(ECLOSED, -13, "client is closed")                                         \
  XX(EINTR, -14, "wait interrupted")                                           \
  XX(EFORKED, -15, "lock belongs to the parent process")                      \
  XX(EDEADLK, -16, "upgrade from read to write would deadlock")               \
  XX(ECROSSSLOT, -17, "keys of one lock are in different cluster slots")       \
  XX(ENOQUORUM, -18, "no majority of the Redlock nodes agreed")                \
  XX(ENOREPLICAS, -19, "replicas did not acknowledge the write in time")     \
  XX(ECLUSTER, -20, "cluster topology or routing failure")                  \
  XX(ETLS, -21, "TLS handshake or protocol failure")                         \
  XX(ECERT, -22, "server certificate not accepted")                         \
  XX(ECANCELED, -23, "operation cancelled")                                   \
  XX(ESTALE, -24, "a higher fence has touched the data (stale holder)")      \
  XX(EBROKEN, -25, "a party died or gave up: the latch or barrier is broken")

typedef enum hilock_status {
#define HILOCK_XX_ENUM(name, value, text) HILOCK_##name = value,
  HILOCK_ERRNO_MAP(HILOCK_XX_ENUM)
#undef HILOCK_XX_ENUM
  HILOCK_STATUS_END_ = -1000
} hilock_status;

/* Static text for a status code; never NULL ("unknown status" for others). */
HILOCK_API const char *hilock_strerror(int status);
/* The code's name without prefix, e.g. "ENOTOWNED"; never NULL. */
HILOCK_API const char *hilock_err_name(int status);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_ERRORS_H */
