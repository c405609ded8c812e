/* Error paths behind a scripted transport: the test links with
 * -Wl,--wrap= for hilock__net_command, hilock__net_append,
 * hilock__net_get_reply and hilock__net_connect, so every command hilock
 * sends (alone, or pipelined) gets the next queued reply (or failure)
 * instead of reaching a server (PING is answered PONG), and every
 * connection is a dead-end socketpair. */
#include "test_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "scripts.h"

#define MAX_STEPS 16
#define MAX_SENT 16
#define MAX_ARGV 12

typedef enum step_kind { STEP_REPLY, STEP_IO_ERROR, STEP_TIMEOUT } step_kind;

typedef struct step {
  step_kind kind;
  redisReply *reply;
} step;

typedef struct sent_cmd {
  int argc;
  char *argv[MAX_ARGV];
  size_t lens[MAX_ARGV];
} sent_cmd;

static struct fake {
  step steps[MAX_STEPS];
  int nsteps, next;
  sent_cmd sent[MAX_SENT];
  int nsent;
  int unexpected;     /* commands with no queued step */
  int connects;       /* connection attempts */
  int refuse_connect; /* attempts still to refuse */
  int pending[32];    /* pipelined commands awaiting a reply: 1 for PING */
  int npending;
} fake;

/* ## The scripted transport ------------------------------------------------ */

redisReply *__wrap_hilock__net_command(hilock__net *c, int argc,
                                       const char **argv,
                                       const size_t *argvlen);
hilock__net *__wrap_hilock__net_connect(const hilock__addr *a,
                                        const hilock__tls *tls,
                                        int64_t timeout_ms);
int __wrap_hilock__net_append(hilock__net *c, int argc, const char **argv,
                              const size_t *lens);
int __wrap_hilock__net_get_reply(hilock__net *c, void **reply);

static void record(int argc, const char **argv, const size_t *lens) {
  sent_cmd *s;
  if (fake.nsent == MAX_SENT) return;
  s = &fake.sent[fake.nsent++];
  s->argc = argc;
  for (int i = 0; i < argc && i < MAX_ARGV; i++) {
    s->argv[i] = malloc(lens[i] + 1);
    memcpy(s->argv[i], argv[i], lens[i]);
    s->argv[i][lens[i]] = '\0';
    s->lens[i] = lens[i];
  }
}

static void *fail_io(hilock__net *c, const char *why, int err) {
  c->err = err;
  snprintf(c->errstr, sizeof(c->errstr), "%s", why);
  return NULL;
}

static redisReply *reply_new(int type);

static int is_ping(int argc, const char **argv, const size_t *lens) {
  return argc == 1 && lens[0] == 4 && memcmp(argv[0], "PING", 4) == 0;
}

static redisReply *pong(void) {
  redisReply *r = reply_new(REDIS_REPLY_STATUS);
  r->str = strdup("PONG");
  r->len = 4;
  return r;
}

/* The reply to a command that was recorded: the next step. */
static redisReply *next_step(hilock__net *c) {
  step st;
  if (fake.next == fake.nsteps) {
    fake.unexpected++;
    return fail_io(c, "no scripted reply", HILOCK__NET_EIO);
  }
  st = fake.steps[fake.next++];
  switch (st.kind) {
    case STEP_IO_ERROR:
      return fail_io(c, "Connection reset by peer", HILOCK__NET_EIO);
    case STEP_TIMEOUT:
      return fail_io(c, "timed out", HILOCK__NET_ETIMEDOUT);
    default:
      return st.reply;
  }
}

redisReply *__wrap_hilock__net_command(hilock__net *c, int argc,
                                       const char **argv,
                                       const size_t *argvlen) {
  if (is_ping(argc, argv, argvlen)) return pong();
  record(argc, argv, argvlen);
  return next_step(c);
}

int __wrap_hilock__net_append(hilock__net *c, int argc, const char **argv,
                              const size_t *lens) {
  int ping = is_ping(argc, argv, lens);
  (void)c;
  if (fake.npending == (int)(sizeof(fake.pending) / sizeof(fake.pending[0])))
    return -1;
  if (!ping) record(argc, argv, lens);
  fake.pending[fake.npending++] = ping;
  return 0;
}

int __wrap_hilock__net_get_reply(hilock__net *c, void **reply) {
  int ping;
  *reply = NULL;
  if (c->err != HILOCK__NET_OK) return -1;
  if (fake.npending == 0) {
    fake.unexpected++;
    fail_io(c, "no command to answer", HILOCK__NET_EIO);
    return -1;
  }
  ping = fake.pending[0];
  memmove(fake.pending, fake.pending + 1,
          (size_t)--fake.npending * sizeof(fake.pending[0]));
  *reply = ping ? pong() : next_step(c);
  if (*reply == NULL && c->err == HILOCK__NET_ETIMEDOUT) {
    /* No reply in time: it is still owed, and comes late. */
    memmove(fake.pending + 1, fake.pending,
            (size_t)fake.npending++ * sizeof(fake.pending[0]));
    fake.pending[0] = 0;
  }
  return *reply != NULL ? 0 : -1;
}

hilock__net *__wrap_hilock__net_connect(const hilock__addr *a,
                                        const hilock__tls *tls,
                                        int64_t timeout_ms) {
  int sv[2];
  hilock__net *c;
  (void)a;
  (void)tls;
  (void)timeout_ms;
  fake.connects++;
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return NULL;
  close(sv[1]); /* nothing is ever written to or read from it */
  c = calloc(1, sizeof(*c));
  c->fd = sv[0];
  c->reader = redisReaderCreate();
  snprintf(c->where, sizeof(c->where), "%s", a->path ? a->path : a->host);
  if (fake.refuse_connect > 0) {
    fake.refuse_connect--;
    fail_io(c, "Connection refused", HILOCK__NET_EIO);
  }
  return c;
}

/* ## Replies --------------------------------------------------------------- */

static redisReply *reply_new(int type) {
  redisReply *r = calloc(1, sizeof(*r));
  assert_non_null(r);
  r->type = type;
  return r;
}

static redisReply *r_int(long long v) {
  redisReply *r = reply_new(REDIS_REPLY_INTEGER);
  r->integer = v;
  return r;
}

static redisReply *r_text(int type, const char *s) {
  redisReply *r = reply_new(type);
  r->len = strlen(s);
  r->str = malloc(r->len + 1);
  assert_non_null(r->str);
  memcpy(r->str, s, r->len + 1);
  return r;
}

static redisReply *r_str(const char *s) { return r_text(REDIS_REPLY_STRING, s); }
static redisReply *r_status(const char *s) {
  return r_text(REDIS_REPLY_STATUS, s);
}
static redisReply *r_err(const char *s) { return r_text(REDIS_REPLY_ERROR, s); }
static redisReply *r_nil(void) { return reply_new(REDIS_REPLY_NIL); }

/* An array of n elements, given as redisReply pointers. */
static redisReply *r_arr(size_t n, ...) {
  redisReply *r = reply_new(REDIS_REPLY_ARRAY);
  va_list ap;
  r->elements = n;
  if (n > 0) {
    r->element = calloc(n, sizeof(redisReply *));
    assert_non_null(r->element);
  }
  va_start(ap, n);
  for (size_t i = 0; i < n; i++) r->element[i] = va_arg(ap, redisReply *);
  va_end(ap);
  return r;
}

static redisReply *r_grant(long long fence) {
  return r_arr(2, r_int(1), r_int(fence));
}

static void queue_step(step_kind kind, redisReply *r) {
  assert_true(fake.nsteps < MAX_STEPS);
  fake.steps[fake.nsteps].kind = kind;
  fake.steps[fake.nsteps].reply = r;
  fake.nsteps++;
}

static void queue_reply(redisReply *r) { queue_step(STEP_REPLY, r); }
static void queue_io_error(void) { queue_step(STEP_IO_ERROR, NULL); }
static void queue_timeout(void) { queue_step(STEP_TIMEOUT, NULL); }

static void fake_reset(void) {
  for (int i = fake.next; i < fake.nsteps; i++)
    freeReplyObject(fake.steps[i].reply);
  for (int i = 0; i < fake.nsent; i++)
    for (int j = 0; j < fake.sent[i].argc && j < MAX_ARGV; j++)
      free(fake.sent[i].argv[j]);
  memset(&fake, 0, sizeof(fake));
}

/* Every queued step was used and nothing else was sent. */
static void assert_script_done(void) {
  if (fake.unexpected != 0 || fake.next != fake.nsteps)
    fail_msg("transport: %d unexpected commands, %d of %d steps used",
             fake.unexpected, fake.next, fake.nsteps);
}

static void assert_sent(int i, const char *cmd) {
  assert_true(i < fake.nsent);
  assert_string_equal(fake.sent[i].argv[0], cmd);
}

/* ## Fixture --------------------------------------------------------------- */

typedef struct fixture {
  hilock_client *client;
  hilock_lock *lock;
} fixture;

static fixture fx;

static int setup(void **state) {
  hilock_options o = hl_test_options();
  o.reconnect_ms = 100;
  fake_reset();
  *state = &fx;
  if (hilock_client_new("unix:///fake/redis.sock", &o, &fx.client) !=
      HILOCK_OK) {
    print_error("client: %s\n", hilock_client_errmsg(fx.client));
    return -1;
  }
  if (hilock_lock_new_lease(fx.client, "fake", 4, 5000, &fx.lock) != HILOCK_OK)
    return -1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  hilock_hold_free(HILOCK_HOLD(fx.lock));
  hilock_client_free(fx.client);
  fx.lock = NULL;
  fx.client = NULL;
  fake_reset();
  return 0;
}

static void grant(fixture *f, long long fence) {
  queue_reply(r_grant(fence));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(f->lock)), hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
}

static void assert_not_granted(const hilock_lock *l, uint64_t fence) {
  assert_false(hilock_hold_held(HILOCK_HOLD(l)));
  assert_string_equal(hilock_hold_token(HILOCK_HOLD(l)), "");
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(l)), 0);
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(l)), fence);
}

/* ## Acquire --------------------------------------------------------------- */

static void acquire_sends_keys_token_and_ttl(void **state) {
  fixture *f = *state;
  grant(f, 7);
  assert_int_equal(fake.nsent, 1);
  assert_sent(0, "EVALSHA");
  assert_string_equal(fake.sent[0].argv[1], hilock__script_lock_acquire.sha);
  /* Keys: the lock, its fence counter, its wake list and the lock-delay
   * marker every grant checks; args: token, TTL, "w" (not woken). */
  assert_int_equal(fake.sent[0].argc, 10);
  assert_string_equal(fake.sent[0].argv[2], "4");
  assert_string_equal(fake.sent[0].argv[3], "hilock:{fake}:lock");
  assert_string_equal(fake.sent[0].argv[4], "hilock:{fake}:fence");
  assert_string_equal(fake.sent[0].argv[5], "hilock:{fake}:wake");
  assert_string_equal(fake.sent[0].argv[6], "hilock:{fake}:delay");
  assert_string_equal(fake.sent[0].argv[7], hilock_hold_token(HILOCK_HOLD(f->lock)));
  assert_string_equal(fake.sent[0].argv[8], "5000");
  assert_string_equal(fake.sent[0].argv[9], "w");
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(f->lock)), 7);
  assert_true(hilock_hold_held(HILOCK_HOLD(f->lock)));
  assert_script_done();
}

static void large_fence_is_read_whole(void **state) {
  fixture *f = *state;
  grant(f, 4611686018427387904LL);
  assert_true(hilock_hold_fence(HILOCK_HOLD(f->lock)) == 4611686018427387904ULL);
  assert_script_done();
}

static void busy_reply_is_busy(void **state) {
  fixture *f = *state;
  queue_reply(r_arr(2, r_int(0), r_int(1234)));
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(f->lock)), HILOCK_BUSY,
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  assert_not_granted(f->lock, 0);
  assert_script_done();
}

static void malformed_acquire_replies_are_eproto_and_never_a_grant(
    void **state) {
  fixture *f = *state;
  redisReply *bad[] = {
      r_int(1),
      r_str("OK"),
      r_status("OK"),
      r_nil(),
      r_arr(0),
      r_arr(1, r_int(1)),
      r_arr(3, r_int(1), r_int(5), r_int(0)),
      r_arr(2, r_str("1"), r_int(5)),
      r_arr(2, r_int(1), r_str("5")),
      r_arr(2, r_int(1), r_nil()),
      r_arr(2, r_arr(0), r_int(5)),
      r_arr(2, r_status("1"), r_int(5)),
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    int before = fake.nsent;
    queue_reply(bad[i]);
    assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(f->lock)), HILOCK_EPROTO,
                 hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
    assert_substr(hilock_hold_errmsg(HILOCK_HOLD(f->lock)), "unexpected reply");
    assert_not_granted(f->lock, 0);
    assert_int_equal(fake.nsent, before + 1);
  }
  /* Waiting does not turn them into a grant either. */
  queue_reply(r_arr(1, r_int(1)));
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(f->lock), 1000), HILOCK_EPROTO,
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  assert_not_granted(f->lock, 0);
  assert_script_done();
}

static void null_reply_on_pooled_connection_is_resent_once(void **state) {
  fixture *f = *state;
  int connects = fake.connects;
  queue_io_error();
  queue_reply(r_grant(3));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(f->lock)), hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  assert_int_equal(fake.nsent, 2);
  assert_int_equal(fake.connects, connects + 1);
  /* The resend carries the same owner token: the script recognises it. */
  assert_int_equal(fake.sent[0].argc, fake.sent[1].argc);
  for (int i = 0; i < fake.sent[0].argc; i++)
    assert_string_equal(fake.sent[0].argv[i], fake.sent[1].argv[i]);
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(f->lock)), 3);
  assert_script_done();
}

static void null_reply_twice_is_eio_and_not_a_grant(void **state) {
  fixture *f = *state;
  queue_io_error();
  queue_io_error();
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(f->lock)), HILOCK_EIO,
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(f->lock)), "Connection reset by peer");
  assert_not_granted(f->lock, 0);
  assert_int_equal(fake.nsent, 2);
  assert_script_done();
}

static void timed_out_command_is_never_resent(void **state) {
  fixture *f = *state;
  int connects = fake.connects;
  queue_timeout();
  queue_reply(r_grant(1)); /* its reply comes late: a grant */
  queue_reply(r_int(1));   /* which the undo gives back */
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(f->lock)), HILOCK_ETIMEDOUT,
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  assert_not_granted(f->lock, 0);
  /* Not resent; the owner-checked release went out behind it on the same
   * connection, whose late replies a reaper reads. */
  for (int i = 0; i < 500 && __atomic_load_n(&fake.next, __ATOMIC_ACQUIRE) <
                                 fake.nsteps;
       i++)
    hl_sleep_ms(10);
  assert_int_equal(fake.nsent, 2);
  assert_string_equal(fake.sent[0].argv[0], "EVALSHA");
  assert_string_equal(fake.sent[1].argv[0], "EVAL");
  assert_string_equal(fake.sent[1].argv[1], hilock__script_lock_release.src);
  assert_int_equal(fake.connects, connects);
  assert_script_done();
}

static void refused_reconnects_end_in_eio_within_budget(void **state) {
  fixture *f = *state;
  int64_t t0;
  queue_io_error();
  fake.refuse_connect = 1000;
  t0 = hl_now_ms();
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(f->lock)), HILOCK_EIO,
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  /* The 100 ms reconnect budget (setup), not the 3 s command timeout nor
   * the 1000 refusals queued; 2 s leaves room for a loaded machine. */
  assert_i64_between(hl_now_ms() - t0, 90, 2000);
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(f->lock)), "Connection refused");
  assert_true(fake.connects >= 3);
  assert_int_equal(fake.nsent, 1);
  assert_not_granted(f->lock, 0);
  assert_script_done();
}

/* ## Scripts --------------------------------------------------------------- */

static void noscript_falls_back_to_eval_with_the_source(void **state) {
  fixture *f = *state;
  queue_reply(r_err("NOSCRIPT No matching script. Please use EVAL."));
  queue_reply(r_grant(1));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(f->lock)), hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  assert_int_equal(fake.nsent, 2);
  assert_sent(0, "EVALSHA");
  assert_sent(1, "EVAL");
  assert_int_equal(fake.sent[1].lens[1], hilock__script_lock_acquire.len);
  assert_memory_equal(fake.sent[1].argv[1], hilock__script_lock_acquire.src,
                      hilock__script_lock_acquire.len);
  for (int i = 2; i < fake.sent[0].argc; i++)
    assert_string_equal(fake.sent[0].argv[i], fake.sent[1].argv[i]);
  assert_script_done();
}

static void noscript_after_eval_is_escript(void **state) {
  fixture *f = *state;
  queue_reply(r_err("NOSCRIPT No matching script. Please use EVAL."));
  queue_reply(r_err("NOSCRIPT No matching script. Please use EVAL."));
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(f->lock)), HILOCK_ESCRIPT,
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(f->lock)), HILOCK_ESCRIPT);
  assert_not_granted(f->lock, 0);
  assert_script_done();
}

static void error_replies_keep_redis_text(void **state) {
  fixture *f = *state;
  static const struct {
    const char *text;
    int code;
  } cases[] = {
      {"OOM command not allowed when used memory > 'maxmemory'.",
       HILOCK_EREDIS},
      {"READONLY You can't write against a read only replica.",
       HILOCK_EREDIS},
      {"NOPERM this user has no permissions to run the 'evalsha' command",
       HILOCK_ENOPERM},
      {"WRONGTYPE Operation against a key holding the wrong kind of value",
       HILOCK_EWRONGTYPE},
      {"NOAUTH Authentication required.", HILOCK_EAUTH},
      {"BUSY Redis is busy running a script.", HILOCK_EREDIS},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    queue_reply(r_err(cases[i].text));
    assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(f->lock)), cases[i].code,
                 hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
    assert_substr(hilock_hold_errmsg(HILOCK_HOLD(f->lock)), cases[i].text);
    assert_not_granted(f->lock, 0);
  }
  assert_script_done();
}

/* ## Release, extend, owned ------------------------------------------------ */

static void release_by_non_holder_sends_nothing(void **state) {
  fixture *f = *state;
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(f->lock)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(f->lock), 100, 1), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  assert_int_equal(fake.nsent, 0);
  assert_script_done();
}

static void malformed_release_reply_is_eproto(void **state) {
  fixture *f = *state;
  grant(f, 1);
  queue_reply(r_str("1"));
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(f->lock)), HILOCK_EPROTO,
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  assert_sent(1, "EVALSHA");
  assert_string_equal(fake.sent[1].argv[1], hilock__script_lock_release.sha);

  grant(f, 2);
  queue_reply(r_arr(1, r_int(1)));
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(f->lock)), HILOCK_EPROTO,
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));

  grant(f, 3);
  queue_reply(r_int(0));
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(f->lock)), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  assert_false(hilock_hold_held(HILOCK_HOLD(f->lock)));
  assert_script_done();
}

static void failed_release_keeps_the_grant_for_retry(void **state) {
  fixture *f = *state;
  char token[33];
  grant(f, 1);
  memcpy(token, hilock_hold_token(HILOCK_HOLD(f->lock)), 33);
  queue_io_error();
  queue_io_error();
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(f->lock)), HILOCK_EIO,
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  assert_true(hilock_hold_held(HILOCK_HOLD(f->lock)));
  assert_string_equal(hilock_hold_token(HILOCK_HOLD(f->lock)), token);

  queue_reply(r_int(1));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(f->lock)), hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  assert_string_equal(fake.sent[fake.nsent - 1].argv[5], token); /* after 2 keys */
  assert_false(hilock_hold_held(HILOCK_HOLD(f->lock)));
  assert_script_done();
}

static void malformed_extend_reply_is_eproto(void **state) {
  fixture *f = *state;
  grant(f, 1);
  queue_reply(r_arr(2, r_int(1), r_int(2)));
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(f->lock), 1000, 1), HILOCK_EPROTO,
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  queue_reply(r_str("1000"));
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(f->lock), 1000, 0), HILOCK_EPROTO,
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  assert_sent(2, "EVALSHA");
  assert_string_equal(fake.sent[2].argv[1], hilock__script_lock_extend.sha);
  assert_string_equal(fake.sent[2].argv[6], "add");
  assert_string_equal(fake.sent[1].argv[6], "set");

  queue_reply(r_int(0));
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(f->lock), 1000, 1), HILOCK_ENOTOWNED,
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  /* The hold is lost, not forgotten: release still asks the server. */
  assert_true(hilock_hold_lost(HILOCK_HOLD(f->lock)));
  assert_false(hilock_hold_held(HILOCK_HOLD(f->lock)));
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(f->lock)), 0);
  assert_int_equal(hilock_hold_fence(HILOCK_HOLD(f->lock)), 1);
  assert_script_done();
}

/* A server that reports a TTL past any hilock sets (1.5e16 ms, whose
 * microseconds overflow int64) extends the validity to HILOCK_TTL_MAX_MS at
 * most: never to a wrapped one. Found by tests/fuzz/fuzz_reply. */
static void absurd_ttl_in_extend_reply_is_capped(void **state) {
  fixture *f = *state;
  int64_t v;
  grant(f, 1);
  queue_reply(r_int(15001795712210000LL));
  assert_hl_ok(hilock_hold_extend(HILOCK_HOLD(f->lock), 1000, 0),
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  v = hilock_hold_validity_ms(HILOCK_HOLD(f->lock));
  assert_true(v > 5000);
  assert_true(v <= HILOCK_TTL_MAX_MS);
  assert_script_done();
}

static void owned_with_unexpected_reply_is_eproto(void **state) {
  fixture *f = *state;
  int owned = -1;
  grant(f, 1);
  queue_reply(r_int(1));
  assert_hl_rc(hilock_hold_owned(HILOCK_HOLD(f->lock), &owned), HILOCK_EPROTO,
               hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  assert_false(owned);

  /* Someone else's token: not owned, and the handle lets go. */
  queue_reply(r_str("0123456789abcdef0123456789abcdef"));
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(f->lock), &owned), hilock_hold_errmsg(HILOCK_HOLD(f->lock)));
  assert_false(owned);
  assert_false(hilock_hold_held(HILOCK_HOLD(f->lock)));
  assert_script_done();
}

/* ## Connection setup ------------------------------------------------------ */

static void connect_sends_auth_and_select(void **state) {
  hilock_client *c = NULL;
  (void)state;
  fake_reset();
  queue_reply(r_status("OK"));
  queue_reply(r_status("OK"));
  assert_hl_ok(hilock_client_new("unix:///x.sock?user=u&password=p%20w&db=3",
                                 NULL, &c),
               hilock_client_errmsg(c));
  assert_int_equal(fake.nsent, 2);
  assert_sent(0, "AUTH");
  assert_int_equal(fake.sent[0].argc, 3);
  assert_string_equal(fake.sent[0].argv[1], "u");
  assert_string_equal(fake.sent[0].argv[2], "p w");
  assert_sent(1, "SELECT");
  assert_string_equal(fake.sent[1].argv[1], "3");
  hilock_client_free(c);
  assert_script_done();
}

static void auth_failures_while_connecting(void **state) {
  hilock_client *c = NULL;
  (void)state;
  fake_reset();
  queue_io_error();
  assert_hl_rc(hilock_client_new("unix:///x.sock?password=pw", NULL, &c),
               HILOCK_EIO, hilock_client_errmsg(c));
  assert_substr(hilock_client_errmsg(c), "AUTH");
  hilock_client_free(c);

  queue_reply(r_err("ERR some other AUTH problem"));
  assert_hl_rc(hilock_client_new("unix:///x.sock?password=pw", NULL, &c),
               HILOCK_EAUTH, hilock_client_errmsg(c));
  assert_substr(hilock_client_errmsg(c), "some other AUTH problem");
  hilock_client_free(c);

  queue_reply(r_err("NOSCRIPT odd"));
  assert_hl_rc(hilock_client_new("unix:///x.sock?db=2", NULL, &c),
               HILOCK_EREDIS, hilock_client_errmsg(c));
  hilock_client_free(c);
  assert_script_done();
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

HL_SUITE_MAIN("lock_fake", NULL, NULL,
      T(acquire_sends_keys_token_and_ttl),
      T(large_fence_is_read_whole),
      T(busy_reply_is_busy),
      T(malformed_acquire_replies_are_eproto_and_never_a_grant),
      T(null_reply_on_pooled_connection_is_resent_once),
      T(null_reply_twice_is_eio_and_not_a_grant),
      T(timed_out_command_is_never_resent),
      T(refused_reconnects_end_in_eio_within_budget),
      T(noscript_falls_back_to_eval_with_the_source),
      T(noscript_after_eval_is_escript),
      T(error_replies_keep_redis_text),
      T(release_by_non_holder_sends_nothing),
      T(malformed_release_reply_is_eproto),
      T(failed_release_keeps_the_grant_for_retry),
      T(malformed_extend_reply_is_eproto),
      T(absurd_ttl_in_extend_reply_is_capped),
      T(owned_with_unexpected_reply_is_eproto),
      T(connect_sends_auth_and_select),
      T(auth_failures_while_connecting))
