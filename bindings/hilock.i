/* The private extension module hilock._hilock: the C API as it is, made
 * Pythonic by rules rather than lists.
 *
 *   the GIL      released around every C call; only the helpers that read
 *                or make Python objects keep it (%nothreadallow below).
 *   errors       a negative int or int64_t result raises the exception
 *                python/hilock/errors.py maps it to (errors.i).
 *   handles      a constructor's **out parameter is its result; every
 *                family handle is accepted where a hilock_hold * is
 *                expected (the C API's HILOCK_HOLD).
 *   out values   int and int64_t out-parameters are the result (a tuple
 *                when a call has several); a (const char *, size_t *len)
 *                result is bytes, a (char **value, size_t *len) one bytes
 *                or None.
 *   names        (const char *name, size_t namelen) takes bytes, and so
 *                do any (const char *X, size_t Xlen) pair and (value, len).
 *
 * The few helpers (here and in py_helpers.h) build option structs, read
 * Python sequences or route loss reports to Python;
 * python/hilock/_hilock.pyi types it all. */
%module(package="hilock", threads="1") _hilock

%{
#define SWIG_PYTHON_STRICT_BYTE_CHAR
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include "hilock/hilock.h"
/* SWIG 4.3 gave SWIG_Python_AppendOutput an is_void argument (0: a
 * result that is None is kept, as it is never None here). */
#if SWIG_VERSION >= 0x040300
#define HILOCK_APPEND_OUTPUT(r, v) SWIG_Python_AppendOutput((r), (v), 0)
#else
#define HILOCK_APPEND_OUTPUT(r, v) SWIG_Python_AppendOutput((r), (v))
#endif
%}

%include "stdint.i"

/* Every lock family's handle type. */
/* BEGIN generated families: handles */
#define HILOCK_HANDLES                                                     \
  hilock_lock *, hilock_rlock *, hilock_semaphore *, hilock_fair_lock *,   \
  hilock_rwlock *, hilock_multi_lock *, hilock_sequential_lock *,          \
  hilock_segmented_lock *, hilock_redlock *, hilock_election *,            \
  hilock_latch *, hilock_barrier *, hilock_double_barrier *,               \
  const hilock_lock *, const hilock_rlock *, const hilock_semaphore *,     \
  const hilock_fair_lock *, const hilock_rwlock *,                         \
  const hilock_multi_lock *, const hilock_sequential_lock *,               \
  const hilock_segmented_lock *, const hilock_redlock *,                   \
  const hilock_election *, const hilock_latch *, const hilock_barrier *,   \
  const hilock_double_barrier *
/* END generated families */

%threadallow;
%nothreadallow _set_error_factory;
%nothreadallow py_multilock_new;
%nothreadallow py_redlock_new; /* releases the GIL itself around connecting */
%nothreadallow py_inspect; /* these two release it around their round trips */
%nothreadallow py_scan_next;
%nothreadallow py_set_caller;
%nothreadallow py_set_stop;

%include "errors.i"

/* ## Handles ------------------------------------------------------------ */

/* A family handle where its hold is asked for. */
%define HILOCK_AS_HOLD(T)
  if (p == NULL && SWIG_IsOK(SWIG_ConvertPtr($input, &p, $descriptor(T *), 0))) {}
%enddef
%typemap(in) hilock_hold *, const hilock_hold * {
  void *p = NULL;
/* BEGIN generated families: as hold */
  HILOCK_AS_HOLD(hilock_lock)
  HILOCK_AS_HOLD(hilock_rlock)
  HILOCK_AS_HOLD(hilock_semaphore)
  HILOCK_AS_HOLD(hilock_fair_lock)
  HILOCK_AS_HOLD(hilock_rwlock)
  HILOCK_AS_HOLD(hilock_multi_lock)
  HILOCK_AS_HOLD(hilock_sequential_lock)
  HILOCK_AS_HOLD(hilock_segmented_lock)
  HILOCK_AS_HOLD(hilock_redlock)
  HILOCK_AS_HOLD(hilock_election)
  HILOCK_AS_HOLD(hilock_latch)
  HILOCK_AS_HOLD(hilock_barrier)
  HILOCK_AS_HOLD(hilock_double_barrier)
/* END generated families */
  if (p == NULL)
    SWIG_exception_fail(SWIG_TypeError, "in '$symname': expected a lock handle");
  $1 = ($1_ltype)p;
}

/* A constructor's handle. */
%typemap(in, numinputs=0) SWIGTYPE **out ($*1_ltype tmp = NULL) { $1 = &tmp; }
%typemap(argout) SWIGTYPE **out {
  Py_DECREF($result);
  $result = SWIG_NewPointerObj(*$1, $*1_descriptor, 0);
}

/* ## Out values ---------------------------------------------------------- */

%define HILOCK_OUT(T, FROM)
%typemap(in, numinputs=0) T *OUT (T tmp = 0) { $1 = &tmp; }
%typemap(argout) T *OUT {
  PyObject *v = FROM(*$1);
  if ($result == py_status) { /* the first replaces the status */
    Py_DECREF($result);
    $result = v;
    py_status = NULL;
  } else {
    $result = HILOCK_APPEND_OUTPUT($result, v);
  }
}
%enddef
HILOCK_OUT(int, PyLong_FromLong)
HILOCK_OUT(int64_t, PyLong_FromLongLong)
HILOCK_OUT(size_t, PyLong_FromSize_t)
HILOCK_OUT(uint64_t, PyLong_FromUnsignedLongLong)
%apply uint64_t *OUT { uint64_t *id };
%apply int *OUT { int *owned, int *locked, int *deleted, int *writer,
                  int *stored, int *n, int *found };
%apply int64_t *OUT { int64_t *count, int64_t *available, int64_t *readers,
                      int64_t *limit, int64_t *taken, int64_t *left,
                      int64_t *n };
%apply size_t *OUT { size_t *n };

%typemap(in, numinputs=0) size_t *len (size_t tmp = 0) { $1 = &tmp; }
%typemap(argout) size_t *len {
  Py_DECREF($result);
  $result = PyBytes_FromStringAndSize(result, (Py_ssize_t)*$1);
}

%apply (char *STRING, size_t LENGTH) { (const char *name, size_t namelen),
                                       (const char *key, size_t keylen),
                                       (const char *value, size_t len),
                                       (const char *pattern, size_t patternlen) };

/* A value that may be absent (the fenced store): bytes or None. */
%typemap(in, numinputs=0) (char **value, size_t *len) (char *v = NULL, size_t n = 0) {
  $1 = &v;
  $2 = &n;
}
%typemap(argout) (char **value, size_t *len) {
  Py_DECREF($result);
  if (*$1 != NULL) {
    $result = PyBytes_FromStringAndSize(*$1, (Py_ssize_t)*$2);
  } else {
    Py_INCREF(Py_None);
    $result = Py_None;
  }
}
%typemap(freearg) (char **value, size_t *len) { hilock_store_value_free(*$1); }
%apply int64_t *OUT { int64_t *result };
%apply uint64_t *OUT { uint64_t *fence };
%apply int *OUT { int *broken };
%apply int64_t *OUT { int64_t *index, int64_t *waiting, int64_t *inside };

/* size_t sentinels, which SWIG's preprocessor cannot evaluate. */
%constant size_t HILOCK_SEGMENT_ALL = HILOCK_SEGMENT_ALL;
%constant size_t HILOCK_SEGMENT_NONE = HILOCK_SEGMENT_NONE;

/* ## Helpers ------------------------------------------------------------- */

%{
#include "py_helpers.h"
%}

%inline %{
static void _set_lost_fd(int fd) { py_lost_fd = fd; }

/* Threads in the shared waiting of every client of the process (tests). */
int hilock__waiting_all(void);
static int py_waiting_all(void) { return hilock__waiting_all(); }

/* The owner of this thread's next calls on the locks owned by their caller
 * (reentrant, read-write): a greenlet's number under gevent or eventlet
 * (python/hilock/_green.py); 0: the thread again. */
void hilock__caller_set(long id);
static void py_set_caller(long id) { hilock__caller_set(id); }

/* This thread's waits end once stop is true (None: never). */
static void py_set_stop(PyObject *stop) {
  PyObject *old = py_stop;
  py_stop = stop == Py_None ? NULL : stop;
  Py_XINCREF(py_stop);
  Py_XDECREF(old);
}

/* Auto-renewal; a loss is reported as notify_id on the lost pipe (0: no
 * notification). */
static int py_set_auto_renew(hilock_hold *h, int enable, int64_t max_hold_ms,
                             int64_t notify_id) {
  return hilock_hold_set_auto_renew(h, enable, max_hold_ms,
                                    notify_id ? py_lost_notify : NULL,
                                    (void *)(intptr_t)notify_id);
}
static int py_rwlock_read_set_auto_renew(hilock_rwlock *rw, int enable,
                                         int64_t max_hold_ms,
                                         int64_t notify_id) {
  return hilock_rwlock_read_set_auto_renew(rw, enable, max_hold_ms,
                                           notify_id ? py_lost_notify : NULL,
                                           (void *)(intptr_t)notify_id);
}

/* wait_replicas > 0: WAIT after every grant and renewal. */
static hilock_client *py_client_new(const char *url, int64_t connect_ms,
                                    int64_t command_ms, int64_t reconnect_ms,
                                    int shared_waiting, int direct_waiters,
                                    int max_connections,
                                    int wait_replicas, int64_t wait_timeout_ms,
                                    const char *ca_certs, const char *ca_path,
                                    const char *certfile, const char *keyfile,
                                    const char *password, int cert_reqs,
                                    int check_hostname,
                                    const char *server_name,
                                    const char *key_prefix,
                                    int connect_later, int detect_deadlocks,
                                    int64_t deadlock_timeout_ms) {
  hilock_options o;
  hilock_client *c = NULL;
  int rc;
  py_options(&o, connect_ms, ca_certs, ca_path, certfile, keyfile, password,
             cert_reqs, check_hostname, server_name, key_prefix);
  o.command_timeout_ms = command_ms;
  o.reconnect_ms = reconnect_ms;
  o.shared_waiting = shared_waiting;
  o.direct_waiters = direct_waiters;
  o.max_connections = max_connections;
  o.wait_replicas = wait_replicas;
  if (wait_replicas > 0) o.wait_timeout_ms = wait_timeout_ms;
  o.connect_later = connect_later;
  o.detect_deadlocks = detect_deadlocks;
  o.deadlock_timeout_ms = deadlock_timeout_ms;
  rc = hilock_client_new(url, &o, &c);
  if (rc == HILOCK_OK) return c;
  py_ctor_failed(rc, c ? hilock_client_errmsg(c) : NULL);
  hilock_client_free(c);
  return NULL;
}

/* Redlock: urls is a sequence of bytes. The GIL is held while the list
 * is read, and released while the nodes are connected. */
static hilock_redlock *py_redlock_new(PyObject *urls, const char *name,
                                      size_t namelen, int64_t ttl_ms,
                                      int64_t connect_ms,
                                      int64_t node_timeout_ms,
                                      int64_t retry_delay_ms,
                                      const char *ca_certs, const char *ca_path,
                                      const char *certfile, const char *keyfile,
                                      const char *password, int cert_reqs,
                                      int check_hostname,
                                      const char *server_name,
                                      const char *key_prefix,
                                      int connect_later) {
  hilock_redlock *rl = NULL;
  hilock_options o;
  py_strs u;
  int rc;
  if (py_strs_get(urls, &u, "node URL") != 0) return NULL;
  py_options(&o, connect_ms, ca_certs, ca_path, certfile, keyfile, password,
             cert_reqs, check_hostname, server_name, key_prefix);
  o.connect_later = connect_later;
  Py_BEGIN_ALLOW_THREADS
  rc = hilock_redlock_new((const char *const *)u.p, u.n, name, namelen,
                          ttl_ms, &o, &rl);
  if (rc == HILOCK_OK && node_timeout_ms > 0)
    rc = hilock_redlock_set_node_timeout(rl, node_timeout_ms);
  if (rc == HILOCK_OK && retry_delay_ms >= 0)
    rc = hilock_redlock_set_retry_delay(rl, retry_delay_ms);
  Py_END_ALLOW_THREADS
  py_strs_free(&u);
  if (rc == HILOCK_OK) return rl;
  py_ctor_failed(rc, rl ? hilock_hold_errmsg(HILOCK_HOLD(rl)) : NULL);
  hilock_hold_free(HILOCK_HOLD(rl));
  return NULL;
}

/* names: a sequence of bytes (the GIL is held: this reads Python
 * objects; nothing is sent to Redis). */
static hilock_multi_lock *py_multilock_new(hilock_client *c, PyObject *names,
                                           int64_t ttl_ms) {
  hilock_multi_lock *m = NULL;
  py_strs v;
  int rc;
  if (py_strs_get(names, &v, "multi-key lock: name") != 0) return NULL;
  rc = hilock_multi_lock_new_len(c, (const char *const *)v.p, v.len, v.n,
                                 ttl_ms, &m);
  py_strs_free(&v);
  if (rc != HILOCK_OK) py_ctor_failed(rc, c ? hilock_client_errmsg(c) : NULL);
  return m;
}
%}

/* A fenced store (linger_ms 0 and max_value 0: the defaults). */
hilock_store *py_store_new(hilock_client *c, int64_t linger_ms, size_t max_value);

/* Statistics and log records (hilock/stats.h); log records go to the pipe
 * of python/hilock/_notify.py. */
%nothreadallow py_client_stats;
%nothreadallow py_redlock_stats;
%nothreadallow py_stats_bounds;
PyObject *py_client_stats(const hilock_client *c);
PyObject *py_redlock_stats(const hilock_redlock *rl);
PyObject *py_stats_bounds(void);
int py_client_log(hilock_client *c, int on);
int py_redlock_log(hilock_redlock *rl, int on);

/* Inspection (hilock/inspect.h): a lock's state as a tuple; the walk's
 * next (name, state) or None (py_helpers.h). */
PyObject *py_inspect(hilock_client *c, const char *name, size_t namelen);

/* Handing a grant over (hilock/hold.h, hilock/client.h): the grant as
 * bytes; adopting it gives (family name, handle of that family). */
%nothreadallow py_hold_export;
%nothreadallow py_client_adopt;
%apply (char *STRING, size_t LENGTH) { (const char *text, size_t textlen) };
PyObject *py_hold_export(hilock_hold *h);
PyObject *py_client_adopt(hilock_client *c, const char *text, size_t textlen);
PyObject *py_scan_next(hilock_scan *sc);

/* Event loops (hilock/async.h): an operation's id is its result; the
 * data pointer is not for Python (the id finds the operation). */
%typemap(in, numinputs=0) void *data { $1 = NULL; }
/* The loop's reader callback for runner a (py_helpers.h): it completes
 * the futures in futures (by operation id); state is a bytearray(2),
 * [closing, freed]. */
%nothreadallow py_async_drainer;
PyObject *py_async_drainer(hilock_async *a, PyObject *futures,
                           PyObject *late, PyObject *state);

/* Replaced by the helpers above, or not for Python. */
%ignore hilock_options;
%ignore hilock_options_init;
%ignore hilock_client_new;
%ignore hilock_redlock_new;
%ignore hilock_multi_lock_new;
%ignore hilock_multi_lock_new_len;
%ignore hilock_lost_fn;
%ignore hilock_hold_set_auto_renew;
%ignore hilock_rwlock_read_set_auto_renew;
%ignore hilock__waiting_all;
%ignore hilock__caller_set;
%ignore hilock_async_take;
%ignore hilock_async_done;
%ignore hilock_stats;
%ignore hilock_histogram;
%ignore hilock_log_fn;
%ignore hilock_client_stats;
%ignore hilock_redlock_stats;
%ignore hilock_client_set_log;
%ignore hilock_redlock_set_log;
%ignore hilock_store_options;
%ignore hilock_store_new;
%ignore hilock_store_value_free;
%ignore hilock_lock_info;
%ignore hilock_client_inspect;
%ignore hilock_scan_next;
%ignore hilock_scan_client;
%ignore hilock_hold_export;
%ignore hilock_client_adopt;

#define HILOCK_API
%include "hilock/errors.h"
%include "hilock/version.h"
%include "hilock/client.h"
%include "hilock/stats.h"
%include "hilock/hold.h"
/* BEGIN generated families: headers */
%include "hilock/lock.h"
%include "hilock/rlock.h"
%include "hilock/semaphore.h"
%include "hilock/fair_lock.h"
%include "hilock/rwlock.h"
%include "hilock/multi_lock.h"
%include "hilock/sequential_lock.h"
%include "hilock/segmented_lock.h"
%include "hilock/redlock.h"
%include "hilock/election.h"
%include "hilock/latch.h"
%include "hilock/barrier.h"
/* END generated families */
%include "hilock/async.h"
%include "hilock/store.h"
%include "hilock/inspect.h"
