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
%threadallow hilock_client_free;
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
%threadallow py_rwlock_new;
%threadallow hilock_rwlock_free;
%threadallow hilock_rwlock_read_acquire;
%threadallow hilock_rwlock_read_try_acquire;
%threadallow hilock_rwlock_read_release;
%threadallow hilock_rwlock_write_acquire;
%threadallow hilock_rwlock_write_try_acquire;
%threadallow hilock_rwlock_write_release;
%threadallow py_rwlock_read_hold_count;
%threadallow py_rwlock_write_hold_count;
%threadallow py_rwlock_locked;
%threadallow hilock_rwlock_read_set_auto_renew_py;
%threadallow hilock_rwlock_write_set_auto_renew_py;
%threadallow hilock_multilock_free;
%threadallow hilock_multilock_acquire;
%threadallow hilock_multilock_try_acquire;
%threadallow hilock_multilock_release;
%threadallow hilock_multilock_extend;
%threadallow hilock_multilock_renew;
%threadallow py_multilock_owned;
%threadallow py_multilock_locked;
%threadallow hilock_multilock_set_auto_renew_py;
%threadallow py_seqlock_new;
%threadallow hilock_seqlock_free;
%threadallow hilock_seqlock_acquire;
%threadallow hilock_seqlock_try_acquire;
%threadallow hilock_seqlock_release;
%threadallow hilock_seqlock_extend;
%threadallow hilock_seqlock_renew;
%threadallow py_seqlock_owned;
%threadallow py_seqlock_locked;
%threadallow py_seqlock_waiters;
%threadallow hilock_seqlock_set_auto_renew_py;
%threadallow py_redlock_new;
%threadallow hilock_redlock_free;
%threadallow hilock_redlock_acquire;
%threadallow hilock_redlock_try_acquire;
%threadallow hilock_redlock_release;
%threadallow hilock_redlock_extend;
%threadallow hilock_redlock_renew;
%threadallow py_redlock_owned;
%threadallow py_redlock_locked;
%threadallow hilock_redlock_set_auto_renew_py;
%threadallow py_seglock_new;
%threadallow hilock_seglock_free;
%threadallow hilock_seglock_acquire;
%threadallow hilock_seglock_try_acquire;
%threadallow hilock_seglock_release;
%threadallow hilock_seglock_extend;
%threadallow hilock_seglock_renew;
%threadallow hilock_seglock_stock_init;
%threadallow hilock_seglock_stock_set;
%threadallow py_seglock_take;
%threadallow py_seglock_stock;
%threadallow py_seglock_held_count;
%threadallow py_seglock_owned;
%threadallow hilock_seglock_set_auto_renew_py;

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
HILOCK_CHECKED_PTR(py_rwlock_new)
HILOCK_CHECKED(hilock_rwlock_read_acquire, hilock_rwlock_errmsg(arg1))
HILOCK_CHECKED(hilock_rwlock_read_try_acquire, hilock_rwlock_errmsg(arg1))
HILOCK_CHECKED(hilock_rwlock_read_release, hilock_rwlock_errmsg(arg1))
HILOCK_CHECKED(hilock_rwlock_write_acquire, hilock_rwlock_errmsg(arg1))
HILOCK_CHECKED(hilock_rwlock_write_try_acquire, hilock_rwlock_errmsg(arg1))
HILOCK_CHECKED(hilock_rwlock_write_release, hilock_rwlock_errmsg(arg1))
HILOCK_CHECKED(py_rwlock_read_hold_count, hilock_rwlock_errmsg(arg1))
HILOCK_CHECKED(py_rwlock_write_hold_count, hilock_rwlock_errmsg(arg1))
HILOCK_CHECKED(py_rwlock_locked, hilock_rwlock_errmsg(arg1))
HILOCK_CHECKED(hilock_rwlock_read_set_auto_renew_py, hilock_rwlock_errmsg(arg1))
HILOCK_CHECKED(hilock_rwlock_write_set_auto_renew_py, hilock_rwlock_errmsg(arg1))
HILOCK_CHECKED_PTR(py_multilock_new)
HILOCK_CHECKED(hilock_multilock_acquire, hilock_multilock_errmsg(arg1))
HILOCK_CHECKED(hilock_multilock_try_acquire, hilock_multilock_errmsg(arg1))
HILOCK_CHECKED(hilock_multilock_release, hilock_multilock_errmsg(arg1))
HILOCK_CHECKED(hilock_multilock_extend, hilock_multilock_errmsg(arg1))
HILOCK_CHECKED(hilock_multilock_renew, hilock_multilock_errmsg(arg1))
HILOCK_CHECKED(py_multilock_owned, hilock_multilock_errmsg(arg1))
HILOCK_CHECKED(py_multilock_locked, hilock_multilock_errmsg(arg1))
HILOCK_CHECKED(hilock_multilock_set_auto_renew_py, hilock_multilock_errmsg(arg1))
HILOCK_CHECKED_PTR(py_seqlock_new)
HILOCK_CHECKED(hilock_seqlock_acquire, hilock_seqlock_errmsg(arg1))
HILOCK_CHECKED(hilock_seqlock_try_acquire, hilock_seqlock_errmsg(arg1))
HILOCK_CHECKED(hilock_seqlock_release, hilock_seqlock_errmsg(arg1))
HILOCK_CHECKED(hilock_seqlock_extend, hilock_seqlock_errmsg(arg1))
HILOCK_CHECKED(hilock_seqlock_renew, hilock_seqlock_errmsg(arg1))
HILOCK_CHECKED(py_seqlock_owned, hilock_seqlock_errmsg(arg1))
HILOCK_CHECKED(py_seqlock_locked, hilock_seqlock_errmsg(arg1))
HILOCK_CHECKED(py_seqlock_waiters, hilock_seqlock_errmsg(arg1))
HILOCK_CHECKED(hilock_seqlock_set_session, hilock_seqlock_errmsg(arg1))
HILOCK_CHECKED(hilock_seqlock_set_auto_renew_py, hilock_seqlock_errmsg(arg1))
HILOCK_CHECKED_PTR(py_redlock_new)
HILOCK_CHECKED(hilock_redlock_acquire, hilock_redlock_errmsg(arg1))
HILOCK_CHECKED(hilock_redlock_try_acquire, hilock_redlock_errmsg(arg1))
HILOCK_CHECKED(hilock_redlock_release, hilock_redlock_errmsg(arg1))
HILOCK_CHECKED(hilock_redlock_extend, hilock_redlock_errmsg(arg1))
HILOCK_CHECKED(hilock_redlock_renew, hilock_redlock_errmsg(arg1))
HILOCK_CHECKED(py_redlock_owned, hilock_redlock_errmsg(arg1))
HILOCK_CHECKED(py_redlock_locked, hilock_redlock_errmsg(arg1))
HILOCK_CHECKED(hilock_redlock_set_node_timeout, hilock_redlock_errmsg(arg1))
HILOCK_CHECKED(hilock_redlock_set_retry_delay, hilock_redlock_errmsg(arg1))
HILOCK_CHECKED(hilock_redlock_set_auto_renew_py, hilock_redlock_errmsg(arg1))
/* Acquire returns HILOCK_OK, HILOCK_BUSY or HILOCK_SOLDOUT (>= 0), or
 * raises. */
HILOCK_CHECKED_PTR(py_seglock_new)
HILOCK_CHECKED(hilock_seglock_acquire, hilock_seglock_errmsg(arg1))
HILOCK_CHECKED(hilock_seglock_try_acquire, hilock_seglock_errmsg(arg1))
HILOCK_CHECKED(hilock_seglock_release, hilock_seglock_errmsg(arg1))
HILOCK_CHECKED(hilock_seglock_extend, hilock_seglock_errmsg(arg1))
HILOCK_CHECKED(hilock_seglock_renew, hilock_seglock_errmsg(arg1))
HILOCK_CHECKED(hilock_seglock_stock_init, hilock_seglock_errmsg(arg1))
HILOCK_CHECKED(hilock_seglock_stock_set, hilock_seglock_errmsg(arg1))
HILOCK_CHECKED(py_seglock_take, hilock_seglock_errmsg(arg1))
HILOCK_CHECKED(py_seglock_stock, hilock_seglock_errmsg(arg1))
HILOCK_CHECKED(py_seglock_held_count, hilock_seglock_errmsg(arg1))
HILOCK_CHECKED(py_seglock_owned, hilock_seglock_errmsg(arg1))
HILOCK_CHECKED(hilock_seglock_set_auto_renew_py, hilock_seglock_errmsg(arg1))

%{
#include <errno.h>
#include <unistd.h>

/* Status and message of the last failed constructor in this thread (the
 * GIL is released during the call, so this must be per thread). */
static _Thread_local int py_ctor_rc;
static _Thread_local char py_ctor_msg[1536]; /* Redlock lists its nodes */

/* The client's interrupt hook: runs pending signal handlers (Ctrl-C) about
 * every 100 ms of a wait. A raised exception stays set for the caller. */
/* Record a failed lock constructor for HILOCK_CHECKED_PTR. */
static void py_ctor_failed(hilock_client *c, int rc) {
  py_ctor_rc = rc;
  /* The client's message if the constructor recorded this failure there
   * (a bad name, a closed client, an unsupported setting). */
  snprintf(py_ctor_msg, sizeof(py_ctor_msg), "%s",
           c && hilock_client_errcode(c) == rc ? hilock_client_errmsg(c)
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

%ignore py_tls_options;
%inline %{

/* TLS options (NULL strings and -1 ints: the defaults). */
static void py_tls_options(hilock_options *o, const char *ca_certs,
                           const char *ca_path, const char *certfile,
                           const char *keyfile, const char *password,
                           int cert_reqs, int check_hostname,
                           const char *server_name) {
  o->ssl_ca_certs = ca_certs;
  o->ssl_ca_path = ca_path;
  o->ssl_certfile = certfile;
  o->ssl_keyfile = keyfile;
  o->ssl_password = password;
  if (cert_reqs >= 0) o->ssl_cert_reqs = cert_reqs;
  if (check_hostname >= 0) o->ssl_check_hostname = check_hostname;
  o->ssl_server_name = server_name;
}

/* Threads in the shared waiting of every client of the process (tests). */
int hilock__waiting_all(void);
static int py_waiting_all(void) { return hilock__waiting_all(); }

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
  hilock_options_init(&o);
  o.connect_timeout_ms = connect_ms;
  o.command_timeout_ms = command_ms;
  o.reconnect_ms = reconnect_ms;
  o.interrupt = py_check_signals;
  o.shared_waiting = shared_waiting;
  o.max_connections = max_connections;
  o.wait_replicas = wait_replicas;
  if (wait_replicas > 0) o.wait_timeout_ms = wait_timeout_ms;
  py_tls_options(&o, ca_certs, ca_path, certfile, keyfile, password, cert_reqs,
                 check_hostname, server_name);
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
static hilock_rwlock *py_rwlock_new(hilock_client *c, const char *name,
                                    size_t namelen, int64_t ttl_ms) {
  hilock_rwlock *l = NULL;
  int rc = hilock_rwlock_new(c, name, namelen, ttl_ms, &l);
  if (rc == HILOCK_OK) return l;
  py_ctor_failed(c, rc);
  return NULL;
}
static hilock_seqlock *py_seqlock_new(hilock_client *c, const char *name,
                                      size_t namelen, int64_t ttl_ms) {
  hilock_seqlock *l = NULL;
  int rc = hilock_seqlock_new(c, name, namelen, ttl_ms, &l);
  if (rc == HILOCK_OK) return l;
  py_ctor_failed(c, rc);
  return NULL;
}
/* The calling thread's hold counts: >= 0, or a status < 0. */
static int64_t py_rwlock_read_hold_count(hilock_rwlock *l) {
  int64_t n = 0;
  int rc = hilock_rwlock_read_hold_count(l, &n);
  return rc < 0 ? rc : n;
}
static int64_t py_rwlock_write_hold_count(hilock_rwlock *l) {
  int64_t n = 0;
  int rc = hilock_rwlock_write_hold_count(l, &n);
  return rc < 0 ? rc : n;
}
/* mode 0: held in any mode; 1: by readers; 2: by a writer. 0/1 or < 0. */
static int py_rwlock_locked(hilock_rwlock *l, int mode) {
  int64_t readers = 0;
  int writer = 0, rc = hilock_rwlock_state(l, &readers, &writer);
  if (rc < 0) return rc;
  if (mode == 1) return readers > 0;
  if (mode == 2) return writer;
  return readers > 0 || writer;
}
static PyObject *py_rwlock_key(hilock_rwlock *l, int write) {
  size_t n = 0;
  const char *k = hilock_rwlock_key(l, write, &n);
  return PyBytes_FromStringAndSize(k, (Py_ssize_t)n);
}
static int hilock_rwlock_read_set_auto_renew_py(hilock_rwlock *l, int enable,
                                                int64_t max_hold_ms,
                                                int64_t notify_id) {
  return hilock_rwlock_read_set_auto_renew(l, enable, max_hold_ms,
                                           notify_id ? py_lost_notify : NULL,
                                           (void *)(intptr_t)notify_id);
}
static int hilock_rwlock_write_set_auto_renew_py(hilock_rwlock *l,
                                                 int enable,
                                                 int64_t max_hold_ms,
                                                 int64_t notify_id) {
  return hilock_rwlock_write_set_auto_renew(l, enable, max_hold_ms,
                                            notify_id ? py_lost_notify : NULL,
                                            (void *)(intptr_t)notify_id);
}

/* names: a sequence of bytes (the GIL is held: this reads Python
 * objects; nothing is sent to Redis). */
static hilock_multilock *py_multilock_new(hilock_client *c, PyObject *names,
                                          int64_t ttl_ms) {
  hilock_multilock *m = NULL;
  PyObject *seq = PySequence_Fast(names, "names must be a sequence");
  const char **ptrs = NULL;
  size_t *lens = NULL, n;
  int rc = HILOCK_ENOMEM;
  if (seq == NULL) return NULL; /* TypeError set */
  n = (size_t)PySequence_Fast_GET_SIZE(seq);
  ptrs = malloc((n ? n : 1) * sizeof(*ptrs));
  lens = malloc((n ? n : 1) * sizeof(*lens));
  if (ptrs != NULL && lens != NULL) {
    rc = HILOCK_OK;
    for (size_t i = 0; i < n; i++) {
      PyObject *item = PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i);
      char *p;
      Py_ssize_t len;
      if (!PyBytes_Check(item) || PyBytes_AsStringAndSize(item, &p, &len)) {
        PyErr_Clear();
        py_ctor_rc = HILOCK_EINVAL;
        snprintf(py_ctor_msg, sizeof(py_ctor_msg),
                 "multi-key lock: name %zu is not bytes", i);
        rc = -1000;
        break;
      }
      ptrs[i] = p;
      lens[i] = (size_t)len;
    }
    if (rc == HILOCK_OK)
      rc = hilock_multilock_new_len(c, ptrs, lens, n, ttl_ms, &m);
  }
  free(ptrs);
  free(lens);
  Py_DECREF(seq);
  if (rc == HILOCK_OK) return m;
  if (rc != -1000) {
    py_ctor_rc = rc;
    snprintf(py_ctor_msg, sizeof(py_ctor_msg), "%s",
             c && hilock_client_errmsg(c)[0] ? hilock_client_errmsg(c)
                                             : hilock_strerror(rc));
  }
  return NULL;
}
static int py_multilock_owned(hilock_multilock *m) {
  int v = 0, rc = hilock_multilock_owned(m, &v);
  return rc < 0 ? rc : v;
}
static int py_multilock_locked(hilock_multilock *m) {
  int v = 0, rc = hilock_multilock_locked(m, &v);
  return rc < 0 ? rc : v;
}
static PyObject *py_multilock_name(hilock_multilock *m, size_t i) {
  size_t n = 0;
  const char *k = hilock_multilock_name(m, i, &n);
  return PyBytes_FromStringAndSize(k, (Py_ssize_t)n);
}
static PyObject *py_multilock_key(hilock_multilock *m, size_t i) {
  size_t n = 0;
  const char *k = hilock_multilock_key(m, i, &n);
  return PyBytes_FromStringAndSize(k, (Py_ssize_t)n);
}
static int hilock_multilock_set_auto_renew_py(hilock_multilock *m, int enable,
                                              int64_t max_hold_ms,
                                              int64_t notify_id) {
  return hilock_multilock_set_auto_renew(m, enable, max_hold_ms,
                                         notify_id ? py_lost_notify : NULL,
                                         (void *)(intptr_t)notify_id);
}
static int py_seqlock_owned(hilock_seqlock *l) {
  int v = 0, rc = hilock_seqlock_owned(l, &v);
  return rc < 0 ? rc : v;
}
static int py_seqlock_locked(hilock_seqlock *l) {
  int v = 0, rc = hilock_seqlock_locked(l, &v);
  return rc < 0 ? rc : v;
}
/* Count >= 0, or a status < 0. */
static int64_t py_seqlock_waiters(hilock_seqlock *l) {
  int64_t n = 0;
  int rc = hilock_seqlock_waiters(l, &n);
  return rc < 0 ? rc : n;
}
static PyObject *py_seqlock_key(hilock_seqlock *l) {
  size_t n = 0;
  const char *k = hilock_seqlock_key(l, &n);
  return PyBytes_FromStringAndSize(k, (Py_ssize_t)n);
}
static int hilock_seqlock_set_auto_renew_py(hilock_seqlock *l, int enable,
                                            int64_t max_hold_ms,
                                            int64_t notify_id) {
  return hilock_seqlock_set_auto_renew(l, enable, max_hold_ms,
                                       notify_id ? py_lost_notify : NULL,
                                       (void *)(intptr_t)notify_id);
}

/* Redlock: urls separated by newlines (a URL holds none). */
static hilock_redlock *py_redlock_new(const char *urls, const char *name,
                                      size_t namelen, int64_t ttl_ms,
                                      int64_t connect_ms,
                                      int64_t node_timeout_ms,
                                      int64_t retry_delay_ms,
                                      const char *ca_certs, const char *ca_path,
                                      const char *certfile, const char *keyfile,
                                      const char *password, int cert_reqs,
                                      int check_hostname,
                                      const char *server_name) {
  const char *list[HILOCK_REDLOCK_MAX_NODES + 1];
  char *copy = strdup(urls ? urls : ""), *p, *save = NULL;
  hilock_redlock *rl = NULL;
  hilock_options o;
  size_t n = 0;
  int rc;
  if (copy == NULL) {
    py_ctor_rc = HILOCK_ENOMEM;
    snprintf(py_ctor_msg, sizeof(py_ctor_msg), "out of memory");
    return NULL;
  }
  for (p = strtok_r(copy, "\n", &save); p != NULL && n <= HILOCK_REDLOCK_MAX_NODES;
       p = strtok_r(NULL, "\n", &save))
    list[n++] = p;
  hilock_options_init(&o);
  o.connect_timeout_ms = connect_ms;
  o.interrupt = py_check_signals;
  py_tls_options(&o, ca_certs, ca_path, certfile, keyfile, password, cert_reqs,
                 check_hostname, server_name);
  rc = hilock_redlock_new(list, n, name, namelen, ttl_ms, &o, &rl);
  if (rc == HILOCK_OK && node_timeout_ms > 0)
    rc = hilock_redlock_set_node_timeout(rl, node_timeout_ms);
  if (rc == HILOCK_OK && retry_delay_ms >= 0)
    rc = hilock_redlock_set_retry_delay(rl, retry_delay_ms);
  free(copy);
  if (rc == HILOCK_OK) return rl;
  py_ctor_rc = rc;
  snprintf(py_ctor_msg, sizeof(py_ctor_msg), "%s",
           rl ? hilock_redlock_errmsg(rl) : hilock_strerror(rc));
  hilock_redlock_free(rl);
  return NULL;
}
static int py_redlock_owned(hilock_redlock *rl) {
  int v = 0, rc = hilock_redlock_owned(rl, &v);
  return rc < 0 ? rc : v;
}
static int py_redlock_locked(hilock_redlock *rl) {
  int v = 0, rc = hilock_redlock_locked(rl, &v);
  return rc < 0 ? rc : v;
}
static PyObject *py_redlock_key(hilock_redlock *rl) {
  size_t n = 0;
  const char *k = hilock_redlock_key(rl, &n);
  return PyBytes_FromStringAndSize(k, (Py_ssize_t)n);
}
static int hilock_redlock_set_auto_renew_py(hilock_redlock *rl, int enable,
                                            int64_t max_hold_ms,
                                            int64_t notify_id) {
  return hilock_redlock_set_auto_renew(rl, enable, max_hold_ms,
                                       notify_id ? py_lost_notify : NULL,
                                       (void *)(intptr_t)notify_id);
}

static hilock_seglock *py_seglock_new(hilock_client *c, const char *name,
                                     size_t namelen, int segments,
                                     int64_t ttl_ms) {
  hilock_seglock *s = NULL;
  int rc = hilock_seglock_new(c, name, namelen, segments, ttl_ms, &s);
  if (rc == HILOCK_OK) return s;
  py_ctor_failed(c, rc);
  return NULL;
}
/* Units taken >= 0, or a status < 0. */
static int64_t py_seglock_take(hilock_seglock *s, int64_t n, int partial) {
  int64_t taken = 0;
  int rc = hilock_seglock_take(s, n, partial, &taken, NULL);
  return rc < 0 ? rc : taken;
}
/* Units >= 0, PY_SEGLOCK_UNTRACKED for no stock entry, or a status < 0. */
#define PY_SEGLOCK_UNTRACKED INT64_MAX
static int64_t py_seglock_stock(hilock_seglock *s, int segment) {
  int64_t n = 0;
  int rc = hilock_seglock_stock(s, segment, &n);
  if (rc < 0) return rc;
  return n < 0 ? PY_SEGLOCK_UNTRACKED : n;
}
static int py_seglock_held_count(hilock_seglock *s) {
  int n = 0, rc = hilock_seglock_held_count(s, &n);
  return rc < 0 ? rc : n;
}
static int py_seglock_owned(hilock_seglock *s) {
  int v = 0, rc = hilock_seglock_owned(s, &v);
  return rc < 0 ? rc : v;
}
static PyObject *py_seglock_key(hilock_seglock *s, int i) {
  size_t n = 0;
  const char *k = hilock_seglock_key(s, i, &n);
  return PyBytes_FromStringAndSize(k, (Py_ssize_t)n);
}
static int hilock_seglock_set_auto_renew_py(hilock_seglock *s, int enable,
                                            int64_t max_hold_ms,
                                            int64_t notify_id) {
  return hilock_seglock_set_auto_renew(s, enable, max_hold_ms,
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
%ignore hilock_rwlock_new;
%ignore hilock_rwlock_read_hold_count;
%ignore hilock_rwlock_write_hold_count;
%ignore hilock_rwlock_state;
%ignore hilock_rwlock_key;
%ignore hilock_rwlock_read_set_auto_renew;
%ignore hilock_rwlock_write_set_auto_renew;
%ignore hilock_multilock_new;
%ignore hilock_multilock_new_len;
%ignore hilock_multilock_owned;
%ignore hilock_multilock_locked;
%ignore hilock_multilock_name;
%ignore hilock_multilock_key;
%ignore hilock_multilock_set_auto_renew;
%ignore hilock_seqlock_new;
%ignore hilock_seqlock_owned;
%ignore hilock_seqlock_locked;
%ignore hilock_seqlock_waiters;
%ignore hilock_seqlock_key;
%ignore hilock_seqlock_set_auto_renew;
%ignore hilock_redlock_new;
%ignore hilock_redlock_owned;
%ignore hilock_redlock_locked;
%ignore hilock_redlock_key;
%ignore hilock_redlock_set_auto_renew;
%ignore hilock_seglock_new;
%ignore hilock_seglock_take;
%ignore hilock_seglock_stock;
%ignore hilock_seglock_held_count;
%ignore hilock_seglock_owned;
%ignore hilock_seglock_key;
%ignore hilock_seglock_set_auto_renew;
#define HILOCK_API
%include "hilock/errors.h"
%include "hilock/version.h"
%include "hilock/client.h"
%include "hilock/lock.h"
%include "hilock/rlock.h"
%include "hilock/semaphore.h"
%include "hilock/fair.h"
%include "hilock/rwlock.h"
%include "hilock/multilock.h"
%include "hilock/seqlock.h"
%include "hilock/redlock.h"
%include "hilock/seglock.h"
