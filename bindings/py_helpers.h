/* C helpers of the Python wrapper (included by hilock.i after errors.i,
 * whose per-thread error state they use): the interrupt hook, the pipe
 * that carries loss reports, option structs and reading Python sequences
 * of bytes. Not SWIG rules; the wrapped helpers are in hilock.i. */
#ifndef HILOCK_PY_HELPERS_H
#define HILOCK_PY_HELPERS_H

/* This thread's wait ends (HILOCK_EINTR) once this object is true: a pool
 * thread waiting for a greenlet that is gone (python/hilock/_green.py). */
static __thread PyObject *py_stop;

/* The client's interrupt hook: runs pending signal handlers (Ctrl-C) about
 * every 100 ms of a wait. A raised exception stays set for the caller. */
static int py_check_signals(void *arg) {
  PyGILState_STATE g;
  int interrupted;
  (void)arg;
  g = PyGILState_Ensure();
  interrupted = PyErr_CheckSignals() != 0;
  if (!interrupted && py_stop != NULL) interrupted = PyObject_IsTrue(py_stop) == 1;
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

/* Log records (hilock/stats.h) take the same pipe: the marker -1, then
 * the level, the lengths of the lock's name and of the message, and both,
 * in one write of at most PIPE_BUF bytes (so records never interleave, and
 * a full pipe drops a record whole). No GIL, no Python object: the reader
 * thread of python/hilock/_notify.py hands them to logging. */
#define PY_LOG_NAME_MAX 1024
#define PY_LOG_HEAD 20 /* int64 marker, int32 level, uint32 x 2: "=qiII" */

static void py_log(void *arg, int level, const char *lock, size_t locklen,
                   const char *msg) {
  char buf[PY_LOG_HEAD + PY_LOG_NAME_MAX + 256];
  int64_t marker = -1;
  int32_t lv = level;
  uint32_t namelen, msglen;
  size_t mlen = strlen(msg);
  int fd = py_lost_fd;
  (void)arg;
  if (fd < 0) return;
  if (locklen > PY_LOG_NAME_MAX) locklen = PY_LOG_NAME_MAX;
  if (mlen > 255) mlen = 255;
  namelen = (uint32_t)locklen;
  msglen = (uint32_t)mlen;
  memcpy(buf, &marker, 8);
  memcpy(buf + 8, &lv, 4);
  memcpy(buf + 12, &namelen, 4);
  memcpy(buf + 16, &msglen, 4);
  if (locklen > 0) memcpy(buf + PY_LOG_HEAD, lock, locklen);
  memcpy(buf + PY_LOG_HEAD + locklen, msg, mlen);
  while (write(fd, buf, PY_LOG_HEAD + locklen + mlen) < 0 && errno == EINTR) {
  }
}

/* Counters as (counters..., (wait count, sum_us, [buckets]), (hold ...))
 * for python/hilock/_stats.py (the GIL held: this makes Python objects). */
static PyObject *py_hist(const hilock_histogram *h) {
  PyObject *b = PyList_New(HILOCK_STATS_BUCKETS), *t;
  if (b == NULL) return NULL;
  for (Py_ssize_t i = 0; i < HILOCK_STATS_BUCKETS; i++) {
    PyObject *v = PyLong_FromUnsignedLongLong(h->buckets[i]);
    if (v == NULL) {
      Py_DECREF(b);
      return NULL;
    }
    PyList_SET_ITEM(b, i, v);
  }
  t = Py_BuildValue("(KKN)", (unsigned long long)h->count,
                    (unsigned long long)h->sum_us, b);
  return t;
}

static PyObject *py_stats_tuple(int rc, const hilock_stats *s) {
  PyObject *wait, *hold;
  if (rc != HILOCK_OK) {
    PyErr_SetString(PyExc_ValueError, "no statistics for a NULL handle");
    return NULL;
  }
  wait = py_hist(&s->wait);
  hold = wait != NULL ? py_hist(&s->hold) : NULL;
  if (hold == NULL) {
    Py_XDECREF(wait);
    return NULL;
  }
  return Py_BuildValue(
      "(KKKKKKKKKKKNN)", (unsigned long long)s->acquired,
      (unsigned long long)s->busy, (unsigned long long)s->timeouts,
      (unsigned long long)s->waits, (unsigned long long)s->errors,
      (unsigned long long)s->lost, (unsigned long long)s->renewals,
      (unsigned long long)s->renewal_failures,
      (unsigned long long)s->reconnects, (unsigned long long)s->redirections,
      (unsigned long long)s->failovers, wait, hold);
}

/* Options shared by clients and Redlocks (NULL strings and -1 ints: the
 * defaults). */
static void py_options(hilock_options *o, int64_t connect_ms,
                       const char *ca_certs, const char *ca_path,
                       const char *certfile, const char *keyfile,
                       const char *password, int cert_reqs,
                       int check_hostname, const char *server_name,
                       const char *key_prefix) {
  hilock_options_init(o);
  o->key_prefix = key_prefix;
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

/* A fenced store (linger_ms 0 and max_value 0: the defaults). */
static hilock_store *py_store_new(hilock_client *c, int64_t linger_ms,
                                  size_t max_value) {
  hilock_store_options o = {linger_ms, max_value};
  hilock_store *s = NULL;
  int rc = hilock_store_new(c, &o, &s);
  if (rc != HILOCK_OK) py_ctor_failed(rc, c ? hilock_client_errmsg(c) : NULL);
  return s;
}

/* Inspection (hilock/inspect.h): a lock's state as a tuple (type name,
 * held, holder, fence, ttl_ms, hold count, readers, writer, permits,
 * permits used, permits free, waiters, lock delay ms, delay left ms); the GIL is released around the
 * round trip and held while the tuple is made. */
static PyObject *py_info(const hilock_lock_info *i) {
  size_t hl = i->holder_len < HILOCK_HOLDER_MAX ? i->holder_len : HILOCK_HOLDER_MAX;
  return Py_BuildValue("(siy#KLLLiLLLLLL)", i->type_name, i->held, i->holder,
                       (Py_ssize_t)hl, (unsigned long long)i->fence,
                       (long long)i->ttl_ms, (long long)i->hold_count,
                       (long long)i->readers, i->writer, (long long)i->permits,
                       (long long)i->permits_used, (long long)i->permits_free,
                       (long long)i->waiters, (long long)i->delay_ms,
                       (long long)i->delay_left_ms);
}

/* Raise the error of a failed client call (the client's message, or rc's
 * when there is no client); returns NULL. */
static PyObject *py_client_raise(hilock_client *c, int rc) {
  hilock_py_raise(rc, c != NULL ? hilock_client_errmsg(c) : hilock_strerror(rc));
  return NULL;
}

static PyObject *py_inspect(hilock_client *c, const char *name,
                            size_t namelen) {
  hilock_lock_info i;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = hilock_client_inspect(c, name, namelen, &i);
  Py_END_ALLOW_THREADS
  if (rc != HILOCK_OK) return py_client_raise(c, rc);
  return py_info(&i);
}

/* The walk's next (name, state), or None when it is over. */
static PyObject *py_scan_next(hilock_scan *sc) {
  hilock_lock_info i;
  int rc, found = 0;
  PyObject *info, *out;
  const char *name;
  size_t len;
  Py_BEGIN_ALLOW_THREADS
  rc = hilock_scan_next(sc, &i, &found);
  Py_END_ALLOW_THREADS
  if (rc != HILOCK_OK) return py_client_raise(hilock_scan_client(sc), rc);
  if (!found) Py_RETURN_NONE;
  info = py_info(&i);
  if (info == NULL) return NULL;
  name = hilock_scan_name(sc, &len);
  out = Py_BuildValue("(y#N)", name, (Py_ssize_t)len, info);
  return out;
}

/* What one py_async_complete takes at most. */
enum { PY_TAKE_MAX = 64 };

/* Take finished operations and complete their futures (py_drain, the
 * loop's reader callback): each id's future is popped from futures and gets
 * (status, message, value) as its result; a cancelled one's result goes to
 * late under its id (its task takes it from there); closing: the future is
 * put back (close() tells it). Up to PY_TAKE_MAX at a time, with the GIL
 * held; futures and late are dicts (py_async_drainer checked them once).
 * Returns how many were taken (the callback calls again while a full batch
 * came), or -1 with an exception set. */
static long py_async_complete(hilock_async *a, PyObject *futures,
                              PyObject *late, int closing) {
  /* The futures' methods, by interned name: no format string to parse and
   * no name to make on every call. */
  static PyObject *s_done, *s_cancelled, *s_set_result;
  hilock_async_done d[PY_TAKE_MAX];
  size_t n;
  if (s_set_result == NULL) {
    s_done = PyUnicode_InternFromString("done");
    s_cancelled = PyUnicode_InternFromString("cancelled");
    s_set_result = s_done != NULL && s_cancelled != NULL
                       ? PyUnicode_InternFromString("set_result")
                       : NULL;
    if (s_set_result == NULL) return -1;
  }
  n = hilock_async_take(a, d, PY_TAKE_MAX);
  for (size_t i = 0; i < n; i++) {
    PyObject *key = PyLong_FromUnsignedLongLong((unsigned long long)d[i].id);
    PyObject *fut, *res = NULL, *r = NULL;
    int failed = key == NULL;
    fut = key != NULL ? PyDict_GetItemWithError(futures, key) : NULL;
    if (fut != NULL) {
      Py_INCREF(fut);
      if (closing) {
        Py_CLEAR(fut); /* stays in futures */
      } else if (PyDict_DelItem(futures, key) != 0) {
        failed = 1;
      }
    } else if (PyErr_Occurred()) {
      failed = 1;
    }
    if (fut != NULL && !failed) {
      PyObject *msg = PyUnicode_DecodeUTF8(d[i].errmsg, strlen(d[i].errmsg),
                                           "replace");
      res = msg != NULL ? Py_BuildValue("(iNi)", d[i].status, msg, d[i].value)
                        : NULL;
      /* Not done yet: the result is its own. Done: a cancelled one's task
       * takes the result from late; one that has a result keeps it. */
      r = res != NULL ? PyObject_CallMethodObjArgs(fut, s_done, NULL) : NULL;
      if (r == NULL) {
        failed = 1;
      } else if (!PyObject_IsTrue(r)) {
        PyObject *set = PyObject_CallMethodObjArgs(fut, s_set_result, res, NULL);
        failed = set == NULL;
        Py_XDECREF(set);
      } else {
        Py_DECREF(r);
        r = PyObject_CallMethodObjArgs(fut, s_cancelled, NULL);
        if (r == NULL)
          failed = 1;
        else if (PyObject_IsTrue(r))
          failed = PyDict_SetItem(late, key, res) != 0;
      }
    }
    Py_XDECREF(r);
    Py_XDECREF(res);
    Py_XDECREF(fut);
    Py_XDECREF(key);
    if (failed) {
      /* The rest are lost to their futures only if Python itself fails
       * (out of memory); say so rather than go on. */
      if (!PyErr_Occurred()) PyErr_NoMemory();
      return -1;
    }
  }
  return (long)n;
}

/* The loop's reader callback for one runner, in C: no Python frame and no
 * argument to convert on each wake-up. It holds (runner, futures, late,
 * state); state is a bytearray whose byte 0 says the runner is closing
 * (py_async_complete's closing) and byte 1 that the runner is freed (the
 * callback then does nothing: a loop may call it once more). */
enum { PY_DRAIN_CLOSING, PY_DRAIN_FREED, PY_DRAIN_STATE_LEN };

static PyObject *py_drain(PyObject *self, PyObject *unused) {
  PyObject *futures = PyTuple_GET_ITEM(self, 1);
  PyObject *late = PyTuple_GET_ITEM(self, 2);
  PyObject *state = PyTuple_GET_ITEM(self, 3);
  (void)unused;
  for (;;) {
    /* Read again on each pass: completing a future runs no Python code,
     * but nothing here relies on that. */
    const char *st = PyByteArray_AS_STRING(state);
    hilock_async *a;
    long n;
    if (st[PY_DRAIN_FREED]) Py_RETURN_NONE;
    a = (hilock_async *)PyCapsule_GetPointer(PyTuple_GET_ITEM(self, 0), NULL);
    if (a == NULL) return NULL;
    n = py_async_complete(a, futures, late, st[PY_DRAIN_CLOSING] != 0);
    if (n < 0) return NULL;
    if (n < PY_TAKE_MAX) Py_RETURN_NONE; /* all taken */
  }
}

static PyMethodDef py_drain_def = {"drain", py_drain, METH_NOARGS,
                                   "Complete the runner's finished operations."};

static PyObject *py_async_drainer(hilock_async *a, PyObject *futures,
                                  PyObject *late, PyObject *state) {
  PyObject *cap, *self, *fn;
  if (a == NULL) {
    PyErr_SetString(PyExc_ValueError, "no runner");
    return NULL;
  }
  if (!PyDict_Check(futures) || !PyDict_Check(late) ||
      !PyByteArray_Check(state) ||
      PyByteArray_GET_SIZE(state) != PY_DRAIN_STATE_LEN) {
    PyErr_SetString(PyExc_TypeError,
                    "futures and late must be dicts, state a bytearray(2)");
    return NULL;
  }
  cap = PyCapsule_New(a, NULL, NULL);
  self = cap != NULL ? PyTuple_Pack(4, cap, futures, late, state) : NULL;
  fn = self != NULL ? PyCFunction_New(&py_drain_def, self) : NULL;
  Py_XDECREF(self);
  Py_XDECREF(cap);
  return fn;
}

/* Statistics (hilock/stats.h) and the log callback's switch. */
static PyObject *py_client_stats(const hilock_client *c) {
  hilock_stats s;
  return py_stats_tuple(hilock_client_stats(c, &s, sizeof(s)), &s);
}
static PyObject *py_redlock_stats(const hilock_redlock *rl) {
  hilock_stats s;
  return py_stats_tuple(hilock_redlock_stats(rl, &s, sizeof(s)), &s);
}
/* The buckets' upper bounds in us (the last one, open, left out). */
static PyObject *py_stats_bounds(void) {
  PyObject *list = PyList_New(0);
  for (size_t i = 0; list != NULL && i + 1 < HILOCK_STATS_BUCKETS; i++) {
    PyObject *v = PyLong_FromLongLong(hilock_stats_bucket_us(i));
    if (v == NULL || PyList_Append(list, v) != 0) Py_CLEAR(list);
    Py_XDECREF(v);
  }
  return list;
}
/* Log records go to the pipe of python/hilock/_notify.py. */
static int py_client_log(hilock_client *c, int on) {
  return hilock_client_set_log(c, on ? py_log : NULL, NULL);
}
static int py_redlock_log(hilock_redlock *rl, int on) {
  return hilock_redlock_set_log(rl, on ? py_log : NULL, NULL);
}

/* ## Handing a grant over (hilock_hold_export, hilock_client_adopt) ------- */

/* The grant of h as bytes; the handle forgets it. */
static PyObject *py_hold_export(hilock_hold *h) {
  char stack[512], *buf = stack;
  size_t len = 0;
  int rc = hilock_hold_export(h, NULL, 0, &len);
  PyObject *out;
  if (rc == HILOCK_EINVAL && len > 0) {
    if (len + 1 > sizeof(stack) && (buf = malloc(len + 1)) == NULL)
      return PyErr_NoMemory();
    rc = hilock_hold_export(h, buf, len + 1, &len);
  }
  if (rc != HILOCK_OK) {
    hilock_py_raise(rc, h != NULL && hilock_hold_errcode(h) == rc
                            ? hilock_hold_errmsg(h)
                            : hilock_strerror(rc));
    if (buf != stack) free(buf);
    return NULL;
  }
  out = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
  if (buf != stack) free(buf);
  return out;
}

/* The family name of a hold (hold.c). */
const char *hilock__hold_family(const hilock_hold *h);
static const char *py_hold_family(const hilock_hold *h) {
  return hilock__hold_family(h);
}
size_t hilock__hold_grant_name(const hilock_hold *h, size_t i,
                               const char **name, size_t *len, int64_t *a);

/* Adopt the grant in text: (family, handle, names, a), the handle typed as
 * its family's; family is the hold's family name ("lock", "fair lock",
 * ...), names a list of bytes, a the family's number (a segmented lock's
 * segment count, a semaphore's permits). */
static PyObject *py_client_adopt(hilock_client *c, const char *text,
                                 size_t textlen) {
  hilock_hold *h = NULL;
  swig_type_info *t;
  const char *fam;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = hilock_client_adopt(c, text, textlen, &h);
  Py_END_ALLOW_THREADS
  if (rc != HILOCK_OK) return py_client_raise(c, rc);
  fam = py_hold_family(h);
  t = strcmp(fam, "lock") == 0              ? SWIGTYPE_p_hilock_lock
      : strcmp(fam, "fair lock") == 0       ? SWIGTYPE_p_hilock_fair_lock
      : strcmp(fam, "sequential lock") == 0 ? SWIGTYPE_p_hilock_sequential_lock
      : strcmp(fam, "multi-key lock") == 0  ? SWIGTYPE_p_hilock_multi_lock
      : strcmp(fam, "segmented lock") == 0  ? SWIGTYPE_p_hilock_segmented_lock
                                            : SWIGTYPE_p_hilock_semaphore;
  {
    const char *name;
    size_t nlen, n;
    int64_t a;
    PyObject *names, *handle = SWIG_NewPointerObj(h, t, 0);
    n = hilock__hold_grant_name(h, 0, &name, &nlen, &a);
    names = PyList_New(0);
    if (handle == NULL || names == NULL) {
      Py_XDECREF(handle);
      Py_XDECREF(names);
      hilock_hold_free(h);
      return NULL;
    }
    for (size_t i = 0; i < n; i++) {
      PyObject *b;
      hilock__hold_grant_name(h, i, &name, &nlen, &a);
      b = PyBytes_FromStringAndSize(name, (Py_ssize_t)nlen);
      if (b == NULL || PyList_Append(names, b) != 0) {
        Py_XDECREF(b);
        Py_DECREF(names);
        Py_DECREF(handle);
        hilock_hold_free(h);
        return NULL;
      }
      Py_DECREF(b);
    }
    return Py_BuildValue("(sNNL)", fam, handle, names, (long long)a);
  }
}

#endif /* HILOCK_PY_HELPERS_H */
