/* Status codes to Python exceptions, in one place.
 *
 * python/hilock/errors.py registers a factory, error_for(code, message),
 * with _set_error_factory(). The rule: an int or int64_t result below zero
 * is a failed call and raises; its message is the one the call left on the
 * handle (or client) it was given, recorded by the check typemaps below, or
 * the status's own text. A constructor helper that returns NULL raises with
 * the message it recorded for this thread. Every raise runs with the GIL
 * held (after the call). */
%{
static PyObject *hilock_py_error_factory = NULL;

static void hilock_py_raise(int code, const char *msg) {
  PyObject *text;
  if (PyErr_Occurred()) return; /* e.g. KeyboardInterrupt from a wait */
  text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
  PyObject *exc = NULL;
  if (text != NULL && hilock_py_error_factory != NULL)
    exc = PyObject_CallFunction(hilock_py_error_factory, "iO", code, text);
  if (exc != NULL) {
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  } else if (!PyErr_Occurred()) {
    PyErr_SetString(PyExc_RuntimeError, msg);
  }
  Py_XDECREF(text);
}

/* The handle or client the current call was given (this thread's): where
 * its failure's message is. */
static _Thread_local const void *py_src;
static _Thread_local int py_src_client; /* 0 a hold, 1 a client, 2 an async
                                          runner, 3 a fenced store */

static const char *py_src_msg(int code) {
  const void *src = py_src;
  py_src = NULL;
  if (src == NULL) return hilock_strerror(code);
  if (py_src_client == 2) /* an async runner: its start was refused */
    return hilock_async_errcode((const hilock_async *)src) == code
               ? hilock_async_errmsg((const hilock_async *)src)
               : hilock_strerror(code);
  if (py_src_client == 3)
    return hilock_store_errcode((const hilock_store *)src) == code
               ? hilock_store_errmsg((const hilock_store *)src)
               : hilock_strerror(code);
  if (py_src_client)
    return hilock_client_errcode((const hilock_client *)src) == code
               ? hilock_client_errmsg((const hilock_client *)src)
               : hilock_strerror(code);
  return hilock_hold_errcode((const hilock_hold *)src) == code
             ? hilock_hold_errmsg((const hilock_hold *)src)
             : hilock_strerror(code);
}

/* Status and message of the last failed constructor helper in this thread
 * (the GIL is released during the call, so this must be per thread). */
static _Thread_local int py_ctor_rc;
static _Thread_local char py_ctor_msg[1536]; /* Redlock lists its nodes */

/* The status object of the call in progress, which the first out-parameter
 * replaces (see hilock.i). */
static _Thread_local PyObject *py_status;
%}

%inline %{
static PyObject *_set_error_factory(PyObject *factory) {
  Py_XINCREF(factory);
  Py_XDECREF(hilock_py_error_factory);
  hilock_py_error_factory = factory;
  Py_RETURN_NONE;
}
%}

/* Where a call's failure is described. */
%typemap(check) hilock_client *, const hilock_client * {
  py_src = $1;
  py_src_client = 1;
}
%typemap(check) hilock_hold *, const hilock_hold *, HILOCK_HANDLES {
  if ($argnum == 1) { /* not an async start's hold (the runner is first) */
    py_src = $1;
    py_src_client = 0;
  }
}
%typemap(check) hilock_store *, const hilock_store * {
  py_src = $1;
  py_src_client = 3;
}
%typemap(check) hilock_async *, const hilock_async * {
  py_src = $1;
  py_src_client = 2;
}

/* A negative status raises. */
%typemap(out) int, int64_t {
  if ($1 < 0) {
    hilock_py_raise((int)$1, py_src_msg((int)$1));
    SWIG_fail;
  }
  py_src = NULL;
  $result = py_status = PyLong_FromLongLong((long long)$1);
}

/* A constructor helper's NULL raises with what it recorded. */
%typemap(out) hilock_client *, hilock_multi_lock *, hilock_redlock *,
    hilock_store * {
  if ($1 == NULL) {
    hilock_py_raise(py_ctor_rc, py_ctor_msg);
    SWIG_fail;
  }
  $result = SWIG_NewPointerObj($1, $1_descriptor, 0);
}
