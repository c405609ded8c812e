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
 *                result is bytes.
 *   names        (const char *name, size_t namelen) takes bytes.
 *
 * The few helpers below build option structs, read Python sequences or
 * route loss reports to Python; python/hilock/_hilock.pyi types it all. */
%module(package="hilock", threads="1") _hilock

%{
#define SWIG_PYTHON_STRICT_BYTE_CHAR
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include "hilock/hilock.h"
%}

%include "stdint.i"

/* Every lock family's handle type. */
#define HILOCK_HANDLES                                                      \
  hilock_lock *, hilock_rlock *, hilock_semaphore *, hilock_fair_lock *,    \
  hilock_rwlock *, hilock_multi_lock *, hilock_sequential_lock *, hilock_segmented_lock *, \
  hilock_redlock *, const hilock_lock *, const hilock_rlock *,              \
  const hilock_semaphore *, const hilock_fair_lock *, const hilock_rwlock *, \
  const hilock_multi_lock *, const hilock_sequential_lock *, const hilock_segmented_lock *, \
  const hilock_redlock *

%threadallow;
%nothreadallow _set_error_factory;
%nothreadallow py_multilock_new;
%nothreadallow py_redlock_new; /* releases the GIL itself around connecting */

%include "errors.i"

/* ## Handles ------------------------------------------------------------ */

/* A family handle where its hold is asked for. */
%define HILOCK_AS_HOLD(T)
  if (p == NULL && SWIG_IsOK(SWIG_ConvertPtr($input, &p, $descriptor(T *), 0))) {}
%enddef
%typemap(in) hilock_hold *, const hilock_hold * {
  void *p = NULL;
  HILOCK_AS_HOLD(hilock_lock)
  HILOCK_AS_HOLD(hilock_rlock)
  HILOCK_AS_HOLD(hilock_semaphore)
  HILOCK_AS_HOLD(hilock_fair_lock)
  HILOCK_AS_HOLD(hilock_rwlock)
  HILOCK_AS_HOLD(hilock_multi_lock)
  HILOCK_AS_HOLD(hilock_sequential_lock)
  HILOCK_AS_HOLD(hilock_segmented_lock)
  HILOCK_AS_HOLD(hilock_redlock)
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
    $result = SWIG_Python_AppendOutput($result, v);
  }
}
%enddef
HILOCK_OUT(int, PyLong_FromLong)
HILOCK_OUT(int64_t, PyLong_FromLongLong)
HILOCK_OUT(size_t, PyLong_FromSize_t)
HILOCK_OUT(uint64_t, PyLong_FromUnsignedLongLong)
%apply uint64_t *OUT { uint64_t *id };
%apply int *OUT { int *owned, int *locked, int *deleted, int *writer,
                  int *stored, int *n };
%apply int64_t *OUT { int64_t *count, int64_t *available, int64_t *readers,
                      int64_t *limit, int64_t *taken, int64_t *left,
                      int64_t *n };
%apply size_t *OUT { size_t *n };

%typemap(in, numinputs=0) size_t *len (size_t tmp = 0) { $1 = &tmp; }
%typemap(argout) size_t *len {
  Py_DECREF($result);
  $result = PyBytes_FromStringAndSize(result, (Py_ssize_t)*$1);
}

%apply (char *STRING, size_t LENGTH) { (const char *name, size_t namelen) };

/* size_t sentinels, which SWIG's preprocessor cannot evaluate. */
%constant size_t HILOCK_SEGMENT_ALL = HILOCK_SEGMENT_ALL;
%constant size_t HILOCK_SEGMENT_NONE = HILOCK_SEGMENT_NONE;

/* ## Helpers ------------------------------------------------------------- */

%{
/* The client's interrupt hook: runs pending signal handlers (Ctrl-C) about
 * every 100 ms of a wait. A raised exception stays set for the caller. */
static int py_check_signals(void *arg) {
  PyGILState_STATE g;
  int interrupted;
  (void)arg;
  g = PyGILState_Ensure();
  interrupted = PyErr_CheckSignals() != 0;
  PyGILState_Release(g);
  return interrupted;
}

/* Loss notifications reach Python through a pipe: the renewal thread writes
 * the lock's id (no GIL, no Python object), and a Python thread reads it
 * and calls the callbacks (python/hilock/_notify.py). */
static int py_lost_fd = -1;

static void py_lost_notify(void *arg) {
  int64_t id = (int64_t)(intptr_t)arg;
  int fd = py_lost_fd;
  if (fd < 0) return;
  while (write(fd, &id, sizeof(id)) < 0 && errno == EINTR) {
  }
}

/* Options shared by clients and Redlocks (NULL strings and -1 ints: the
 * defaults). */
static void py_options(hilock_options *o, int64_t connect_ms,
                       const char *ca_certs, const char *ca_path,
                       const char *certfile, const char *keyfile,
                       const char *password, int cert_reqs,
                       int check_hostname, const char *server_name) {
  hilock_options_init(o);
  o->connect_timeout_ms = connect_ms;
  o->interrupt = py_check_signals;
  o->ssl_ca_certs = ca_certs;
  o->ssl_ca_path = ca_path;
  o->ssl_certfile = certfile;
  o->ssl_keyfile = keyfile;
  o->ssl_password = password;
  if (cert_reqs >= 0) o->ssl_cert_reqs = cert_reqs;
  if (check_hostname >= 0) o->ssl_check_hostname = check_hostname;
  o->ssl_server_name = server_name;
}

static void py_ctor_failed(int rc, const char *msg) {
  py_ctor_rc = rc;
  snprintf(py_ctor_msg, sizeof(py_ctor_msg), "%s",
           msg != NULL && msg[0] ? msg : hilock_strerror(rc));
}

/* A Python sequence of bytes as copied C strings with their lengths (the
 * GIL held; nothing else may run meanwhile). 0, or -1 with the failure
 * recorded for the constructor (what names the items). */
typedef struct py_strs {
  char **p;
  size_t *len, n;
} py_strs;

static void py_strs_free(py_strs *v) {
  for (size_t i = 0; v->p != NULL && i < v->n; i++) free(v->p[i]);
  free(v->p);
  free(v->len);
}

static int py_strs_get(PyObject *obj, py_strs *v, const char *what) {
  PyObject *seq = PySequence_Fast(obj, "expected a sequence of bytes");
  memset(v, 0, sizeof(*v));
  if (seq == NULL) {
    PyErr_Clear();
    py_ctor_failed(HILOCK_EINVAL, "expected a sequence of bytes");
    return -1;
  }
  v->n = (size_t)PySequence_Fast_GET_SIZE(seq);
  v->p = calloc(v->n ? v->n : 1, sizeof(*v->p));
  v->len = calloc(v->n ? v->n : 1, sizeof(*v->len));
  for (size_t i = 0; v->p != NULL && v->len != NULL && i < v->n; i++) {
    PyObject *item = PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i);
    char *s, msg[64];
    Py_ssize_t len;
    if (!PyBytes_Check(item) || PyBytes_AsStringAndSize(item, &s, &len)) {
      PyErr_Clear();
      snprintf(msg, sizeof(msg), "%s %zu is not bytes", what, i);
      py_ctor_failed(HILOCK_EINVAL, msg);
      Py_DECREF(seq);
      py_strs_free(v);
      return -1;
    }
    v->p[i] = malloc((size_t)len + 1);
    if (v->p[i] == NULL) break;
    memcpy(v->p[i], s, (size_t)len + 1);
    v->len[i] = (size_t)len;
  }
  Py_DECREF(seq);
  for (size_t i = 0; v->p != NULL && v->len != NULL && i < v->n; i++)
    if (v->p[i] == NULL) goto nomem;
  if (v->p != NULL && v->len != NULL) return 0;
nomem:
  py_strs_free(v);
  py_ctor_failed(HILOCK_ENOMEM, NULL);
  return -1;
}
%}

%inline %{
static void _set_lost_fd(int fd) { py_lost_fd = fd; }

/* Threads in the shared waiting of every client of the process (tests). */
int hilock__waiting_all(void);
static int py_waiting_all(void) { return hilock__waiting_all(); }

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
                                    int shared_waiting, int max_connections,
                                    int wait_replicas, int64_t wait_timeout_ms,
                                    const char *ca_certs, const char *ca_path,
                                    const char *certfile, const char *keyfile,
                                    const char *password, int cert_reqs,
                                    int check_hostname,
                                    const char *server_name) {
  hilock_options o;
  hilock_client *c = NULL;
  int rc;
  py_options(&o, connect_ms, ca_certs, ca_path, certfile, keyfile, password,
             cert_reqs, check_hostname, server_name);
  o.command_timeout_ms = command_ms;
  o.reconnect_ms = reconnect_ms;
  o.shared_waiting = shared_waiting;
  o.max_connections = max_connections;
  o.wait_replicas = wait_replicas;
  if (wait_replicas > 0) o.wait_timeout_ms = wait_timeout_ms;
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
                                      const char *server_name) {
  hilock_redlock *rl = NULL;
  hilock_options o;
  py_strs u;
  int rc;
  if (py_strs_get(urls, &u, "node URL") != 0) return NULL;
  py_options(&o, connect_ms, ca_certs, ca_path, certfile, keyfile, password,
             cert_reqs, check_hostname, server_name);
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

/* Event loops (hilock/async.h): an operation's id is its result; the
 * data pointer is not for Python (the id finds the operation). */
%typemap(in, numinputs=0) void *data { $1 = NULL; }
%nothreadallow py_async_take;
%inline %{
/* The finished operations, as [(id, status), ...] (the GIL is held: this
 * makes Python objects; taking is a short critical section). */
static PyObject *py_async_take(hilock_async *a) {
  hilock_async_done d[64];
  size_t n;
  PyObject *list = PyList_New(0);
  if (list == NULL) return NULL;
  do {
    n = hilock_async_take(a, d, 64);
    for (size_t i = 0; i < n; i++) {
      PyObject *t = Py_BuildValue("(Ki)", (unsigned long long)d[i].id,
                                  d[i].status);
      if (t == NULL || PyList_Append(list, t) != 0) {
        Py_XDECREF(t);
        Py_DECREF(list);
        return NULL;
      }
      Py_DECREF(t);
    }
  } while (n == 64);
  return list;
}
%}

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
%ignore hilock_async_take;
%ignore hilock_async_done;

#define HILOCK_API
%include "hilock/errors.h"
%include "hilock/version.h"
%include "hilock/client.h"
%include "hilock/hold.h"
%include "hilock/lock.h"
%include "hilock/rlock.h"
%include "hilock/semaphore.h"
%include "hilock/fair_lock.h"
%include "hilock/rwlock.h"
%include "hilock/multi_lock.h"
%include "hilock/sequential_lock.h"
%include "hilock/redlock.h"
%include "hilock/segmented_lock.h"
%include "hilock/async.h"
