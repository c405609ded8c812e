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
%threadallow hilock_client_ping;
%threadallow hilock_lock_acquire;
%threadallow hilock_lock_try_acquire;
%threadallow hilock_lock_renew;
%threadallow hilock_lock_release;
%threadallow hilock_lock_extend;
%threadallow py_lock_owned;
%threadallow py_lock_locked;
%threadallow py_lock_force_release;

%include "errors.i"

/* (name, namelen): binary-safe bytes. */
%apply (char *STRING, size_t LENGTH) { (const char *name, size_t namelen) };

HILOCK_CHECKED_PTR(py_client_new)
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

%{
/* Status and message of the last failed constructor in this thread (the
 * GIL is released during the call, so this must be per thread). */
static _Thread_local int py_ctor_rc;
static _Thread_local char py_ctor_msg[256];
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
  py_ctor_rc = rc;
  snprintf(py_ctor_msg, sizeof(py_ctor_msg), "%s",
           c && rc == HILOCK_EINVAL ? hilock_client_errmsg(c)
                                    : hilock_strerror(rc));
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
#define HILOCK_API
%include "hilock/errors.h"
%include "hilock/version.h"
%include "hilock/client.h"
%include "hilock/lock.h"
