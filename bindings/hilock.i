/* The private extension module hilock._hilock.
 *
 * A thin layer over the C API: the GIL is released around every call that
 * may touch the network or wait, and every failing status becomes a Python
 * exception in one place (hilock_py_raise), whose class comes from the
 * table in python/hilock/errors.py. */
%module(package="hilock", threads="1") _hilock

%{
#define SWIG_PYTHON_STRICT_BYTE_CHAR
#include <stdio.h>
#include "hilock/hilock.h"
%}

%include "stdint.i"

/* Keep the GIL by default; release it only where the call can block. */
%nothreadallow;
%threadallow py_client_new;
%threadallow py_client_new_wait;
%threadallow hilock_client_ping;
%threadallow hilock_lock_acquire;
%threadallow hilock_lock_try_acquire;
%threadallow hilock_lock_renew;
%threadallow hilock_lock_release;
%threadallow hilock_lock_extend;
%threadallow py_lock_owned;
%threadallow py_lock_locked;
%threadallow py_lock_force_release;
%threadallow hilock_lock_free;
%threadallow hilock_lock_set_auto_renew_py;
%threadallow py_rlock_new;
%threadallow hilock_rlock_free;
%threadallow hilock_rlock_acquire;
%threadallow hilock_rlock_try_acquire;
%threadallow hilock_rlock_release;
%threadallow py_rlock_hold_count;
%threadallow py_rlock_locked;
%threadallow hilock_rlock_set_auto_renew_py;
%threadallow py_semaphore_new;
%threadallow hilock_semaphore_free;
%threadallow hilock_semaphore_acquire;
%threadallow hilock_semaphore_try_acquire;
%threadallow hilock_semaphore_release;
%threadallow hilock_semaphore_renew;
%threadallow hilock_semaphore_set_limit;
%threadallow py_semaphore_owned;
%threadallow py_semaphore_available;
%threadallow py_semaphore_get_limit;
%threadallow hilock_semaphore_set_auto_renew_py;
%threadallow py_fair_lock_new;
%threadallow hilock_fair_lock_free;
%threadallow hilock_fair_lock_acquire;
%threadallow hilock_fair_lock_try_acquire;
%threadallow hilock_fair_lock_release;
%threadallow hilock_fair_lock_extend;
%threadallow hilock_fair_lock_renew;
%threadallow py_fair_lock_owned;
%threadallow py_fair_lock_locked;
%threadallow py_fair_lock_waiters;
%threadallow hilock_fair_lock_set_auto_renew_py;

%include "errors.i"

/* (name, namelen): binary-safe bytes. */
%apply (char *STRING, size_t LENGTH) { (const char *name, size_t namelen) };

HILOCK_CHECKED_PTR(py_client_new)
HILOCK_CHECKED_PTR(py_client_new_wait)
HILOCK_CHECKED_PTR(py_lock_new)
HILOCK_CHECKED(hilock_client_ping, hilock_client_errmsg(arg1))
HILOCK_CHECKED(hilock_lock_acquire, hilock_lock_errmsg(arg1))
HILOCK_CHECKED(hilock_lock_try_acquire, hilock_lock_errmsg(arg1))
HILOCK_CHECKED(hilock_lock_renew, hilock_lock_errmsg(arg1))
HILOCK_CHECKED(hilock_lock_release, hilock_lock_errmsg(arg1))
HILOCK_CHECKED(hilock_lock_extend, hilock_lock_errmsg(arg1))
HILOCK_CHECKED(py_lock_owned, hilock_lock_errmsg(arg1))
HILOCK_CHECKED(py_lock_locked, hilock_lock_errmsg(arg1))
HILOCK_CHECKED(py_lock_force_release, hilock_lock_errmsg(arg1))
HILOCK_CHECKED(hilock_lock_set_auto_renew_py, hilock_lock_errmsg(arg1))
HILOCK_CHECKED_PTR(py_rlock_new)
HILOCK_CHECKED(hilock_rlock_acquire, hilock_rlock_errmsg(arg1))
HILOCK_CHECKED(hilock_rlock_try_acquire, hilock_rlock_errmsg(arg1))
HILOCK_CHECKED(hilock_rlock_release, hilock_rlock_errmsg(arg1))
HILOCK_CHECKED(py_rlock_hold_count, hilock_rlock_errmsg(arg1))
HILOCK_CHECKED(py_rlock_locked, hilock_rlock_errmsg(arg1))
HILOCK_CHECKED(hilock_rlock_set_auto_renew_py, hilock_rlock_errmsg(arg1))
HILOCK_CHECKED_PTR(py_semaphore_new)
HILOCK_CHECKED(hilock_semaphore_acquire, hilock_semaphore_errmsg(arg1))
HILOCK_CHECKED(hilock_semaphore_try_acquire, hilock_semaphore_errmsg(arg1))
HILOCK_CHECKED(hilock_semaphore_release, hilock_semaphore_errmsg(arg1))
HILOCK_CHECKED(hilock_semaphore_renew, hilock_semaphore_errmsg(arg1))
HILOCK_CHECKED(hilock_semaphore_set_limit, hilock_semaphore_errmsg(arg1))
HILOCK_CHECKED(py_semaphore_owned, hilock_semaphore_errmsg(arg1))
HILOCK_CHECKED(py_semaphore_available, hilock_semaphore_errmsg(arg1))
HILOCK_CHECKED(py_semaphore_get_limit, hilock_semaphore_errmsg(arg1))
HILOCK_CHECKED(hilock_semaphore_set_auto_renew_py, hilock_semaphore_errmsg(arg1))
HILOCK_CHECKED_PTR(py_fair_lock_new)
HILOCK_CHECKED(hilock_fair_lock_acquire, hilock_fair_lock_errmsg(arg1))
HILOCK_CHECKED(hilock_fair_lock_try_acquire, hilock_fair_lock_errmsg(arg1))
HILOCK_CHECKED(hilock_fair_lock_release, hilock_fair_lock_errmsg(arg1))
HILOCK_CHECKED(hilock_fair_lock_extend, hilock_fair_lock_errmsg(arg1))
HILOCK_CHECKED(hilock_fair_lock_renew, hilock_fair_lock_errmsg(arg1))
HILOCK_CHECKED(py_fair_lock_owned, hilock_fair_lock_errmsg(arg1))
HILOCK_CHECKED(py_fair_lock_locked, hilock_fair_lock_errmsg(arg1))
HILOCK_CHECKED(py_fair_lock_waiters, hilock_fair_lock_errmsg(arg1))
HILOCK_CHECKED(hilock_fair_lock_set_heartbeat, hilock_fair_lock_errmsg(arg1))
HILOCK_CHECKED(hilock_fair_lock_set_auto_renew_py, hilock_fair_lock_errmsg(arg1))

%{
#include <errno.h>
#include <unistd.h>

/* Status and message of the last failed constructor in this thread (the
 * GIL is released during the call, so this must be per thread). */
static _Thread_local int py_ctor_rc;
static _Thread_local char py_ctor_msg[256];

/* The client's interrupt hook: runs pending signal handlers (Ctrl-C) about
 * every 100 ms of a wait. A raised exception stays set for the caller. */
/* Record a failed lock constructor for HILOCK_CHECKED_PTR. */
static void py_ctor_failed(hilock_client *c, int rc) {
  py_ctor_rc = rc;
  snprintf(py_ctor_msg, sizeof(py_ctor_msg), "%s",
           c && rc == HILOCK_EINVAL ? hilock_client_errmsg(c)
                                    : hilock_strerror(rc));
}

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
%}

%inline %{

static hilock_client *py_client_new(const char *url, int64_t connect_ms,
                                    int64_t command_ms, int64_t reconnect_ms) {
  hilock_options o;
  hilock_client *c = NULL;
  int rc;
  hilock_options_init(&o);
  o.connect_timeout_ms = connect_ms;
  o.command_timeout_ms = command_ms;
  o.reconnect_ms = reconnect_ms;
  o.interrupt = py_check_signals;
  rc = hilock_client_new(url, &o, &c);
  if (rc == HILOCK_OK) return c;
  py_ctor_rc = rc;
  snprintf(py_ctor_msg, sizeof(py_ctor_msg), "%s",
           c ? hilock_client_errmsg(c) : hilock_strerror(rc));
  hilock_client_free(c);
  return NULL;
}

/* py_client_new with replica acknowledgement (wait_replicas > 0: WAIT after
 * every grant and renewal). */
static hilock_client *py_client_new_wait(const char *url, int64_t connect_ms,
                                         int64_t command_ms,
                                         int64_t reconnect_ms,
                                         int wait_replicas,
                                         int64_t wait_timeout_ms) {
  hilock_options o;
  hilock_client *c = NULL;
  int rc;
  hilock_options_init(&o);
  o.connect_timeout_ms = connect_ms;
  o.command_timeout_ms = command_ms;
  o.reconnect_ms = reconnect_ms;
  o.interrupt = py_check_signals;
  o.wait_replicas = wait_replicas;
  o.wait_timeout_ms = wait_timeout_ms;
  rc = hilock_client_new(url, &o, &c);
  if (rc == HILOCK_OK) return c;
  py_ctor_rc = rc;
  snprintf(py_ctor_msg, sizeof(py_ctor_msg), "%s",
           c ? hilock_client_errmsg(c) : hilock_strerror(rc));
  hilock_client_free(c);
  return NULL;
}

static hilock_lock *py_lock_new(hilock_client *c, int kind, const char *name,
                                size_t namelen, int64_t ttl_ms) {
  hilock_lock *l = NULL;
  int rc;
  switch (kind) {
    case HILOCK_LOCK_SIMPLE:
      rc = hilock_simple_lock_new(c, name, namelen, &l);
      break;
    case HILOCK_LOCK_LEASE:
      rc = hilock_lease_new(c, name, namelen, ttl_ms, &l);
      break;
    default:
      rc = hilock_lock_new(c, name, namelen, ttl_ms, &l);
  }
  if (rc == HILOCK_OK) return l;
  py_ctor_failed(c, rc);
  return NULL;
}

/* Queries return a status < 0 or the answer (0 or 1). */
static int py_lock_owned(hilock_lock *l) {
  int v = 0, rc = hilock_lock_owned(l, &v);
  return rc < 0 ? rc : v;
}
static int py_lock_locked(hilock_lock *l) {
  int v = 0, rc = hilock_lock_locked(l, &v);
  return rc < 0 ? rc : v;
}
static int py_lock_force_release(hilock_lock *l) {
  int v = 0, rc = hilock_lock_force_release(l, &v);
  return rc < 0 ? rc : v;
}
static PyObject *py_lock_key(hilock_lock *l) {
  size_t n = 0;
  const char *k = hilock_lock_key(l, &n);
  return PyBytes_FromStringAndSize(k, (Py_ssize_t)n);
}
static void _set_lost_fd(int fd) { py_lost_fd = fd; }

/* Auto-renewal; a loss is reported as notify_id on the lost pipe (0: no
 * notification). */
static int hilock_lock_set_auto_renew_py(hilock_lock *l, int enable,
                                         int64_t max_hold_ms,
                                         int64_t notify_id) {
  return hilock_lock_set_auto_renew(l, enable, max_hold_ms,
                                    notify_id ? py_lost_notify : NULL,
                                    (void *)(intptr_t)notify_id);
}
static int hilock_rlock_set_auto_renew_py(hilock_rlock *l, int enable,
                                          int64_t max_hold_ms,
                                          int64_t notify_id) {
  return hilock_rlock_set_auto_renew(l, enable, max_hold_ms,
                                     notify_id ? py_lost_notify : NULL,
                                     (void *)(intptr_t)notify_id);
}

static hilock_rlock *py_rlock_new(hilock_client *c, const char *name,
                                  size_t namelen, int64_t ttl_ms) {
  hilock_rlock *l = NULL;
  int rc = hilock_rlock_new(c, name, namelen, ttl_ms, &l);
  if (rc == HILOCK_OK) return l;
  py_ctor_failed(c, rc);
  return NULL;
}
/* Count >= 0, or a status < 0. */
static int64_t py_rlock_hold_count(hilock_rlock *l) {
  int64_t n = 0;
  int rc = hilock_rlock_hold_count(l, &n);
  return rc < 0 ? rc : n;
}
static int py_rlock_locked(hilock_rlock *l) {
  int v = 0, rc = hilock_rlock_locked(l, &v);
  return rc < 0 ? rc : v;
}
static PyObject *py_rlock_key(hilock_rlock *l) {
  size_t n = 0;
  const char *k = hilock_rlock_key(l, &n);
  return PyBytes_FromStringAndSize(k, (Py_ssize_t)n);
}

static hilock_semaphore *py_semaphore_new(hilock_client *c, const char *name,
                                          size_t namelen, int64_t permits,
                                          int64_t ttl_ms) {
  hilock_semaphore *s = NULL;
  int rc = hilock_semaphore_new(c, name, namelen, permits, ttl_ms, &s);
  if (rc == HILOCK_OK) return s;
  py_ctor_failed(c, rc);
  return NULL;
}
static hilock_fair_lock *py_fair_lock_new(hilock_client *c, const char *name,
                                          size_t namelen, int64_t ttl_ms) {
  hilock_fair_lock *l = NULL;
  int rc = hilock_fair_lock_new(c, name, namelen, ttl_ms, &l);
  if (rc == HILOCK_OK) return l;
  py_ctor_failed(c, rc);
  return NULL;
}
static int hilock_semaphore_set_auto_renew_py(hilock_semaphore *s, int enable,
                                              int64_t max_hold_ms,
                                              int64_t notify_id) {
  return hilock_semaphore_set_auto_renew(s, enable, max_hold_ms,
                                         notify_id ? py_lost_notify : NULL,
                                         (void *)(intptr_t)notify_id);
}
/* Answers >= 0, or a status < 0. */
static int py_semaphore_owned(hilock_semaphore *s) {
  int v = 0, rc = hilock_semaphore_owned(s, &v);
  return rc < 0 ? rc : v;
}
static int64_t py_semaphore_available(hilock_semaphore *s) {
  int64_t n = 0;
  int rc = hilock_semaphore_available(s, &n);
  return rc < 0 ? rc : n;
}
static int64_t py_semaphore_get_limit(hilock_semaphore *s) {
  int64_t n = 0;
  int rc = hilock_semaphore_get_limit(s, &n, NULL);
  return rc < 0 ? rc : n;
}
static PyObject *py_semaphore_key(hilock_semaphore *s) {
  size_t n = 0;
  const char *k = hilock_semaphore_key(s, &n);
  return PyBytes_FromStringAndSize(k, (Py_ssize_t)n);
}
static int py_fair_lock_owned(hilock_fair_lock *l) {
  int v = 0, rc = hilock_fair_lock_owned(l, &v);
  return rc < 0 ? rc : v;
}
static int py_fair_lock_locked(hilock_fair_lock *l) {
  int v = 0, rc = hilock_fair_lock_locked(l, &v);
  return rc < 0 ? rc : v;
}
/* Count >= 0, or a status < 0. */
static int64_t py_fair_lock_waiters(hilock_fair_lock *l) {
  int64_t n = 0;
  int rc = hilock_fair_lock_waiters(l, &n);
  return rc < 0 ? rc : n;
}
static PyObject *py_fair_lock_key(hilock_fair_lock *l) {
  size_t n = 0;
  const char *k = hilock_fair_lock_key(l, &n);
  return PyBytes_FromStringAndSize(k, (Py_ssize_t)n);
}
static int hilock_fair_lock_set_auto_renew_py(hilock_fair_lock *l, int enable,
                                              int64_t max_hold_ms,
                                              int64_t notify_id) {
  return hilock_fair_lock_set_auto_renew(l, enable, max_hold_ms,
                                         notify_id ? py_lost_notify : NULL,
                                         (void *)(intptr_t)notify_id);
}

static PyObject *py_lock_errmsg(hilock_lock *l) {
  const char *m = hilock_lock_errmsg(l);
  return PyUnicode_DecodeUTF8(m, (Py_ssize_t)strlen(m), "replace");
}
%}

%ignore hilock_options_init;
%ignore hilock_client_new;
%ignore hilock_lock_new;
%ignore hilock_simple_lock_new;
%ignore hilock_lease_new;
%ignore hilock_lock_owned;
%ignore hilock_lock_locked;
%ignore hilock_lock_force_release;
%ignore hilock_lock_key;
%ignore hilock_lock_errmsg;
%ignore hilock_options;
%ignore hilock_lock_set_auto_renew;
%ignore hilock_rlock_set_auto_renew;
%ignore hilock_rlock_new;
%ignore hilock_rlock_hold_count;
%ignore hilock_rlock_owned;
%ignore hilock_rlock_locked;
%ignore hilock_rlock_key;
%ignore hilock_lost_fn;
%ignore hilock_semaphore_new;
%ignore hilock_semaphore_owned;
%ignore hilock_semaphore_available;
%ignore hilock_semaphore_get_limit;
%ignore hilock_semaphore_set_auto_renew;
%ignore hilock_semaphore_key;
%ignore hilock_fair_lock_new;
%ignore hilock_fair_lock_owned;
%ignore hilock_fair_lock_locked;
%ignore hilock_fair_lock_waiters;
%ignore hilock_fair_lock_key;
%ignore hilock_fair_lock_set_auto_renew;
#define HILOCK_API
%include "hilock/errors.h"
%include "hilock/version.h"
%include "hilock/client.h"
%include "hilock/lock.h"
%include "hilock/rlock.h"
%include "hilock/semaphore.h"
%include "hilock/fair.h"
