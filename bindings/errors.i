/* Status codes to Python exceptions, in one place.
 *
 * python/hilock/errors.py registers a factory, error_for(code, message),
 * with _set_error_factory(); every checked call that fails goes through
 * hilock_py_raise, which runs with the GIL held (after $action). */
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
%}

%inline %{
static PyObject *_set_error_factory(PyObject *factory) {
  Py_XINCREF(factory);
  Py_XDECREF(hilock_py_error_factory);
  hilock_py_error_factory = factory;
  Py_RETURN_NONE;
}
%}

/* fn returns an integer: raise for a negative status. */
%define HILOCK_CHECKED(fn, errmsg_expr)
%exception fn {
  $action
  if (result < 0) {
    hilock_py_raise(result, errmsg_expr);
    SWIG_fail;
  }
}
%enddef

/* fn returns a handle: raise for NULL with the constructor's message. */
%define HILOCK_CHECKED_PTR(fn)
%exception fn {
  $action
  if (result == NULL) {
    hilock_py_raise(py_ctor_rc, py_ctor_msg);
    SWIG_fail;
  }
}
%enddef
