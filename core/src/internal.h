/* hilock internals: shared by the lock families, never installed. */
#ifndef HILOCK_INTERNAL_H
#define HILOCK_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "hilock/hilock.h"

/* ## Errors ------------------------------------------------------------- */

typedef struct hilock__err {
  int code;
  char msg[256];
} hilock__err;

/* Internal status: the server does not know a script's SHA1 yet. */
#define HILOCK__NOSCRIPT (-900)

/* Record code and a printf-style message in e (truncating); returns code. */
int hilock__set_err(hilock__err *e, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void hilock__clear_err(hilock__err *e);
/* Map a Redis error reply to a status, copying Redis's text into e. */
int hilock__reply_error(hilock__err *e, const char *text, size_t len);

/* ## URLs --------------------------------------------------------------- */

typedef struct hilock__url {
  int unix_socket;
  char *host; /* TCP host, brackets stripped */
  int port;
  char *path; /* unix socket path */
  char *user;
  char *password;
  int db;
} hilock__url;

int hilock__url_parse(const char *url, hilock__url *out, hilock__err *e);
void hilock__url_clear(hilock__url *u);

/* ## Client and its connection pool ------------------------------------- */

typedef struct hilock__conn {
  redisContext *ctx;
  struct hilock__conn *next;
} hilock__conn;

struct hilock_client {
  hilock__err err; /* last failed client-level call */
  pthread_mutex_t mu;
  int refs;   /* user reference + one per lock handle */
  int closed; /* hilock_client_free was called */
  pid_t pid;  /* process that owns the pooled connections */
  hilock_options opts;
  hilock__url url;
  hilock__conn *idle;
  int nidle;
};

void hilock__client_ref(hilock_client *c);
void hilock__client_unref(hilock_client *c);

/* Send one command on a pooled connection, replacing a broken connection
 * within opts.reconnect_ms and resending once. Error replies become status
 * codes (NOSCRIPT becomes HILOCK__NOSCRIPT); any other reply is returned in
 * *out for the caller to freeReplyObject. */
int hilock__command(hilock_client *c, hilock__err *e, int argc,
                    const char **argv, const size_t *lens, redisReply **out);

/* ## Scripts ------------------------------------------------------------ */

typedef struct hilock__script {
  const char *name;
  const char *src;
  size_t len;
  const char *sha; /* 40 hex chars */
} hilock__script;

/* EVALSHA the script; on NOSCRIPT, EVAL it (which also loads it). Keys only
 * through keys[], values only through args[]. */
int hilock__script_run(hilock_client *c, hilock__err *e,
                       const hilock__script *s, int nkeys, const char **keys,
                       const size_t *keylens, int nargs, const char **args,
                       const size_t *arglens, redisReply **out);

/* ## Tokens, clocks, backoff -------------------------------------------- */

#define HILOCK__TOKEN_LEN 32
/* 128 bits from getrandom(2), hex-encoded into out[33]. */
int hilock__token(char out[HILOCK__TOKEN_LEN + 1], hilock__err *e);
/* CLOCK_MONOTONIC in ms and us. */
int64_t hilock__now_ms(void);
int64_t hilock__now_us(void);
void hilock__sleep_ms(int64_t ms);
/* Uniform random in [lo, hi] (not for secrets). */
int64_t hilock__jitter(int64_t lo, int64_t hi);

/* ## Names and keys ------------------------------------------------------
 * Key layout: hilock:{<name>}:<role>. Every key of one lock shares the hash
 * tag {<name>}, so every script touches one cluster slot. */

int hilock__check_name(hilock__err *e, const char *name, size_t len);
int hilock__check_ms(hilock__err *e, const char *what, int64_t ms);
/* malloc'd key for name and role; NULL on out of memory. */
char *hilock__key(const char *name, size_t len, const char *role,
                  size_t *outlen);
/* Decimal text of v in buf (>= 24 bytes); returns length. */
size_t hilock__i64(char *buf, int64_t v);

#endif /* HILOCK_INTERNAL_H */
