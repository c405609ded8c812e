/* Status codes, per-handle messages, Redis error mapping, version. */
#include <stdio.h>
#include <string.h>

#include "base.h"

const char *hilock_strerror(int status) {
  switch (status) {
#define HILOCK_XX_TEXT(name, value, text) \
  case value:                             \
    return text;
    HILOCK_ERRNO_MAP(HILOCK_XX_TEXT)
#undef HILOCK_XX_TEXT
    default:
      return "unknown status";
  }
}

const char *hilock_err_name(int status) {
  switch (status) {
#define HILOCK_XX_NAME(name, value, text) \
  case value:                             \
    return #name;
    HILOCK_ERRNO_MAP(HILOCK_XX_NAME)
#undef HILOCK_XX_NAME
    default:
      return "UNKNOWN";
  }
}

unsigned hilock_version(void) { return HILOCK_VERSION_HEX; }
const char *hilock_version_string(void) { return HILOCK_VERSION_STRING; }

int hilock__vset_err(hilock__err *e, int code, const char *fmt, va_list ap) {
  if (e != NULL) {
    e->code = code;
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
  }
  return code;
}

int hilock__set_err(hilock__err *e, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  hilock__vset_err(e, code, fmt, ap);
  va_end(ap);
  return code;
}

void hilock__err_append(hilock__err *e, const char *fmt, ...) {
  size_t len = strlen(e->msg);
  va_list ap;
  if (len + 1 >= sizeof(e->msg)) return;
  va_start(ap, fmt);
  vsnprintf(e->msg + len, sizeof(e->msg) - len, fmt, ap);
  va_end(ap);
}

void hilock__clear_err(hilock__err *e) {
  e->code = HILOCK_OK;
  e->msg[0] = '\0';
}

/* ## Errors per thread -------------------------------------------------------
 * A client, a store, and a handle that threads share, keep the error of a
 * failed call in a slot of the calling thread, as errno: another thread's
 * failure never overwrites what this thread is reading, and no guard is
 * needed. (A shared handle's own slot, hilock__hold.err, is written under
 * its guard and copied here.) A thread keeps slots for the few objects it
 * used last; a slot names its object by address and serial, so an object
 * made at a freed one's address starts with no error. */

#define TL_SLOTS 4

typedef struct tl_slot {
  const void *obj;
  uint64_t serial;
  hilock__err err;
} tl_slot;

static __thread tl_slot tl_slots[TL_SLOTS];
static __thread unsigned tl_next;
static uint64_t serials;

uint64_t hilock__serial(void) {
  return __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED);
}

hilock__err *hilock__tl_err(const void *obj, uint64_t serial, int create) {
  tl_slot *s;
  for (int i = 0; i < TL_SLOTS; i++)
    if (tl_slots[i].obj == obj && tl_slots[i].serial == serial)
      return &tl_slots[i].err;
  if (!create) return NULL;
  s = &tl_slots[tl_next++ % TL_SLOTS];
  s->obj = obj;
  s->serial = serial;
  hilock__clear_err(&s->err);
  return &s->err;
}

const char *hilock__tl_msg(const void *obj, uint64_t serial) {
  const hilock__err *e = hilock__tl_err(obj, serial, 0);
  return e != NULL ? e->msg : "";
}

int hilock__tl_code(const void *obj, uint64_t serial) {
  const hilock__err *e = hilock__tl_err(obj, serial, 0);
  return e != NULL ? e->code : HILOCK_OK;
}

static int has_prefix(const char *text, size_t len, const char *prefix) {
  size_t n = strlen(prefix);
  return len >= n && memcmp(text, prefix, n) == 0 &&
         (len == n || text[n] == ' ');
}

int hilock__reply_error(hilock__err *e, const char *text, size_t len) {
  int code = HILOCK_EREDIS;
  if (has_prefix(text, len, "NOSCRIPT")) {
    code = HILOCK__NOSCRIPT;
  } else if (has_prefix(text, len, "WRONGTYPE")) {
    code = HILOCK_EWRONGTYPE;
  } else if (has_prefix(text, len, "CROSSSLOT")) {
    code = HILOCK_ECROSSSLOT;
  } else if (has_prefix(text, len, "NOPERM")) {
    code = HILOCK_ENOPERM;
  } else if (has_prefix(text, len, "WRONGPASS") ||
             has_prefix(text, len, "NOAUTH")) {
    code = HILOCK_EAUTH;
  } else if (len >= 4 && memcmp(text, "ERR ", 4) == 0 &&
             (memmem(text, len, "The user executing the script can't", 35) !=
                  NULL ||
              memmem(text, len, "ACL failure in script", 21) != NULL)) {
    /* An ACL refusal inside a script: a command, key or channel the user
     * lacks (Redis 7.0 words it the first way, Valkey 8 the second). */
    code = HILOCK_ENOPERM;
  } else if (len >= 4 && memcmp(text, "ERR ", 4) == 0 &&
             memmem(text, len, "max number of clients", 21) != NULL) {
    /* maxclients: the server took the connection only to refuse it. */
    code = HILOCK_EIO;
  } else if (len >= 4 && memcmp(text, "ERR ", 4) == 0 &&
             (memmem(text, len, "script", 6) != NULL ||
              memmem(text, len, "Script", 6) != NULL)) {
    code = HILOCK_ESCRIPT;
  }
  return hilock__set_err(e, code, "redis: %.*s",
                         (int)(len > 200 ? 200 : len), text);
}
