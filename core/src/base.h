/* hilock internals, the base layer: errors, clocks, tokens, numbers and
 * names, and what one call carries per thread (its deadline, see call.c).
 * Uses only the C library, pthreads and the public API; every other layer
 * may use it. */
#ifndef HILOCK_BASE_H
#define HILOCK_BASE_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hilock/hilock.h"

/* ## Errors ------------------------------------------------------------- */

/* The one way an error is kept: a status and its message, in one slot per
 * object (docs/design.md, "Where an error is kept"). The message holds
 * the longest one made (Redlock naming each failed node); longer text is
 * cut, always NUL-terminated. */
#define HILOCK__ERR_MSG 1536

typedef struct hilock__err {
  int code;
  char msg[HILOCK__ERR_MSG];
} hilock__err;

/* Internal status: the server does not know a script's SHA1 yet. */
#define HILOCK__NOSCRIPT (-900)

/* Record code and a printf-style message in e (truncating); returns code. */
int hilock__set_err(hilock__err *e, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int hilock__vset_err(hilock__err *e, int code, const char *fmt, va_list ap);
/* Append printf-style text to e's message, as much as fits. */
void hilock__err_append(hilock__err *e, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void hilock__clear_err(hilock__err *e);
struct redisReply;
/* 1 if r is an array of at least n elements, every one an integer (the
 * shape of every family script's reply). */
int hilock__int_reply(const struct redisReply *r, size_t n);
/* A wait of more than this many ms (about 35,000 years) is a wait without
 * limit: a deadline computed from it would overflow. */
#define HILOCK__WAIT_CAP_MS ((int64_t)1 << 50)
/* A fresh serial number for an object whose errors are kept per thread. */
uint64_t hilock__serial(void);
/* The calling thread's error slot for obj (NULL if it has none and create
 * is 0). */
hilock__err *hilock__tl_err(const void *obj, uint64_t serial, int create);
/* The calling thread's last message and status on obj ("" and HILOCK_OK
 * when it has had no failure there). */
const char *hilock__tl_msg(const void *obj, uint64_t serial);
int hilock__tl_code(const void *obj, uint64_t serial);
/* Map a Redis error reply to a status, copying Redis's text into e. */
int hilock__reply_error(hilock__err *e, const char *text, size_t len);

/* ## Tokens, clocks, backoff -------------------------------------------- */

#define HILOCK__TOKEN_LEN 32

/* 128 bits from getrandom(2), hex-encoded into out[33]. */
int hilock__token(char out[HILOCK__TOKEN_LEN + 1], hilock__err *e);
/* CLOCK_MONOTONIC in ms and us. */
int64_t hilock__now_ms(void);
int64_t hilock__now_us(void);
/* This process's id, without a system call (reset in a forked child). */
pid_t hilock__pid(void);
/* Who calls, for the locks whose owner is the caller (reentrant,
 * read-write): the kernel thread id, or while an async operation runs on a
 * worker, the negative of the owner it was started for (a task of an event
 * loop), so that it never equals a thread's id. */
long hilock__caller(void);
void hilock__caller_set(long id); /* 0: the thread again */
/* A condition variable timed on CLOCK_MONOTONIC, and a wait of up to ms on
 * one (mu held; spurious wake-ups possible, as with every wait). */
int hilock__cond_init(pthread_cond_t *cv);
void hilock__cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu,
                          int64_t ms);
void hilock__sleep_ms(int64_t ms);
/* Uniform random in [lo, hi] (not for secrets). */
int64_t hilock__jitter(int64_t lo, int64_t hi);

/* ## Names and keys ------------------------------------------------------
 * Key layout: hilock:{<name>}:<role>. Every key of one lock shares the hash
 * tag {<name>}, so every script touches one cluster slot. The keys are made
 * with the runtime's prefix (runtime.h). */

int hilock__check_name(hilock__err *e, const char *name, size_t len);
/* The Redis Cluster hash slot (0..16383) of a key, honouring hash tags. */
int hilock__key_slot(const char *key, size_t len);
int hilock__check_ms(hilock__err *e, const char *what, int64_t ms);
/* A lock's TTL: HILOCK_TTL_MIN_MS..HILOCK_TTL_MAX_MS. */
int hilock__check_ttl(hilock__err *e, int64_t ms);
/* A malloc'd copy of n bytes of s, NUL-terminated; NULL on out of memory. */
char *hilock__dup(const char *s, size_t n);
/* Decimal text of v in buf (>= 24 bytes); returns length. */
size_t hilock__i64(char *buf, int64_t v);
/* How many decimal digits v has; its digits at buf (no NUL), returning
 * that many. */
size_t hilock__digits(uint64_t v);
size_t hilock__u64_text(char *buf, uint64_t v);

/* ## One call's context (call.c) ------------------------------------------
 * Per thread: the caller's deadline, which caps every reconnect budget,
 * connect timeout and reply wait below it. (The undo of an ambiguous grant
 * is in script.h and route.h, the closing client's leave to use its pool
 * in runtime.h.) */

/* Start a call bounded by deadline_ms (monotonic; INT64_MAX: none); returns
 * the outer bound, to give back to hilock__call_end. Bounds only shrink. */
int64_t hilock__call_begin(int64_t deadline_ms);
void hilock__call_end(int64_t outer);
int64_t hilock__call_deadline(void);
/* Lift the call's deadline for work that must not be cut short by it (giving
 * back a grant: bounded by the client's own timeouts); returns the outer
 * bound, to give back to hilock__call_end. */
int64_t hilock__call_lift(void);
/* now + ms, or the call's deadline if sooner. */
int64_t hilock__budget(int64_t ms);
/* deadline_ms, or the cut of a cancelled attempt (callstate.cut_ms) if
 * sooner: every wait of the call ends by then. */
int64_t hilock__call_cut(int64_t deadline_ms);
/* A wait of ms (<= 0: none) shortened to what is left of the call (>= 1). */
int64_t hilock__io_ms(int64_t ms);

/* ## What one call carries, per thread (and per fiber) -------------------
 * The state a public call keeps while it runs (call.c, net.c, wait.c): a
 * fiber that gives its thread back (fiber.c) takes it along and brings it
 * back when it resumes. */
typedef struct hilock__callstate {
  int64_t deadline_ms;              /* the caller's (INT64_MAX: none) */
  const struct hilock__undo *undo;  /* the undo of an ambiguous grant */
  const struct hilock_client *closer; /* the client closing here */
  void (*sent_fn)(void *);          /* hilock__net_on_sent */
  void *sent_arg;
  long caller;                      /* hilock__caller_set */
  int woken;                        /* hilock__attempt_woken */
  int stop_fd; /* >= 0: a wait that can be stopped also ends once it is
                  readable (an event loop's cancel) */
  /* An event loop's acquire: its attempt's waits end by *cut_ms (another
   * thread may move it: an attempt cancelled on the wire). NULL: none. */
  const int64_t *cut_ms;
  int undone; /* the armed undo was queued (hilock__undo_queued) */
  void *dl_hold; /* the hold a blocking acquire waits for (deadlock.c) */
} hilock__callstate;
#define HILOCK__CALLSTATE_INIT {INT64_MAX, NULL, NULL, NULL, NULL, 0, 0, -1, NULL, 0, NULL}
extern __thread hilock__callstate hilock__tl;

#endif /* HILOCK_BASE_H */
