/* The client against real servers: transports, db selection, AUTH and
 * ACLs, timeouts, reconnects, lifetime and argument checks. */
#include "test_util.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define PASSWORD "s3kr!t pass"

typedef struct fixture {
  hl_server server;    /* TCP and unix socket, no password */
  hl_server pw_server; /* --requirepass */
  redisContext *redis; /* direct connection to server, per test */
} fixture;

static fixture fx;

static int group_setup(void **state) {
  hl_server_opts opts = {.unix_socket = 1};
  hl_server_opts pw_opts = {.password = PASSWORD};
  *state = &fx;
  if (hl_server_start(&fx.server, &opts) != 0) return -1;
  if (hl_server_start(&fx.pw_server, &pw_opts) != 0) {
    hl_server_destroy(&fx.server);
    return -1;
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  hl_server_destroy(&fx.server);
  hl_server_destroy(&fx.pw_server);
  return 0;
}

static int setup(void **state) {
  fixture *f = *state;
  /* A failed reconnect test may have left the server down. */
  if (f->server.pid == 0 && hl_server_restart(&f->server) != 0) return -1;
  f->redis = hl_redis_connect(&f->server);
  hl_redis_ok(f->redis, "FLUSHALL");
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  if (f->redis != NULL) redisFree(f->redis);
  f->redis = NULL;
  return 0;
}

/* hilock_client_new must fail with expect and a message holding part. */
static void connect_fails(const char *url, int expect, const char *part) {
  hilock_options o = hl_test_options();
  hilock_client *c = NULL;
  assert_hl_rc(hilock_client_new(url, &o, &c), expect, hilock_client_errmsg(c));
  assert_substr(hilock_client_errmsg(c), part);
  hilock_client_free(c);
}

/* ## Transports and databases ---------------------------------------------- */

static void connect_and_ping(void **state) {
  fixture *f = *state;
  hilock_client *c = hl_client(f->server.url, NULL);
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  hilock_client_free(c);
}

static void unix_socket_connects_and_selects_db(void **state) {
  fixture *f = *state;
  char url[PATH_MAX + 32];
  hilock_client *c;
  hilock_lock *l;
  size_t klen;
  const char *key;

  snprintf(url, sizeof(url), "unix://%s?db=2", f->server.sock);
  c = hl_client(url, NULL);
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  l = hl_new_lock(c, "via-unix", 5000);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  key = hilock_hold_key(HILOCK_HOLD(l), &klen);
  assert_false(hl_redis_exists(f->redis, key, klen));
  hl_redis_ok(f->redis, "SELECT 2");
  assert_true(hl_redis_exists(f->redis, key, klen));
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_client_free(c);
}

#define K_(s) (s), strlen(s)

/* key_prefix: one client's keys start with its prefix, and two prefixes
 * hold one name at once; a bad prefix is refused at creation. */
static void key_prefix_starts_every_key(void **state) {
  fixture *f = *state;
  hilock_options o;
  hilock_client *a, *b, *bad = NULL;
  hilock_lock *la, *lb;
  size_t klen;
  const char *key;
  static const char *const refused[] = {"a{", "b}", "x123456789012345678901234567890"
                                        "1234567890123456789012345678901234"};

  hilock_options_init(&o);
  o.key_prefix = "app1:";
  a = hl_client(f->server.url, &o);
  o.key_prefix = NULL; /* the default, hilock: */
  b = hl_client(f->server.url, &o);
  la = hl_new_lock(a, "orders:42", 5000);
  lb = hl_new_lock(b, "orders:42", 5000);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(la)), hilock_hold_errmsg(HILOCK_HOLD(la)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(lb)), hilock_hold_errmsg(HILOCK_HOLD(lb)));
  key = hilock_hold_key(HILOCK_HOLD(la), &klen);
  assert_int_equal(klen, strlen("app1:{orders:42}:lock"));
  assert_memory_equal(key, "app1:{orders:42}:lock", klen);
  assert_true(hl_redis_exists(f->redis, K_("hilock:{orders:42}:lock")));
  hl_holds_free(HILOCK_HOLD(la), HILOCK_HOLD(lb));
  hilock_client_free(a);
  hilock_client_free(b);
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
    o.key_prefix = refused[i];
    assert_int_equal(hilock_client_new(f->server.url, &o, &bad), HILOCK_EINVAL);
    assert_substr(hilock_client_errmsg(bad), "key_prefix");
    hilock_client_free(bad);
    bad = NULL;
  }
}

static void lock_in_db3_is_invisible_in_db0(void **state) {
  fixture *f = *state;
  char url[128];
  hilock_client *c3, *c0;
  hilock_lock *l3, *l0;
  int locked = -1;
  size_t klen;
  const char *key;

  snprintf(url, sizeof(url), "%s/3", f->server.url);
  c3 = hl_client(url, NULL);
  snprintf(url, sizeof(url), "%s/0", f->server.url);
  c0 = hl_client(url, NULL);
  l3 = hl_new_lock(c3, "db-test", 5000);
  l0 = hl_new_lock(c0, "db-test", 5000);

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l3)), hilock_hold_errmsg(HILOCK_HOLD(l3)));
  assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(l0), &locked), hilock_hold_errmsg(HILOCK_HOLD(l0)));
  assert_false(locked);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l0)), hilock_hold_errmsg(HILOCK_HOLD(l0)));

  key = hilock_hold_key(HILOCK_HOLD(l3), &klen);
  hl_redis_ok(f->redis, "SELECT 3");
  assert_true(hl_redis_exists(f->redis, key, klen));
  assert_int_equal(hl_redis_int(f->redis, "DBSIZE"), 2); /* lock + fence */

  hl_holds_free(HILOCK_HOLD(l3), HILOCK_HOLD(l0));
  hilock_client_free(c3);
  hilock_client_free(c0);
}

/* ## Authentication and ACLs ----------------------------------------------- */

static void password_url_authenticates(void **state) {
  fixture *f = *state;
  char url[128];
  hilock_client *c;
  /* "s3kr!t pass", percent-escaped. */
  snprintf(url, sizeof(url), "redis://:s3kr%%21t%%20pass@127.0.0.1:%d/1",
           f->pw_server.port);
  c = hl_client(url, NULL);
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  hilock_client_free(c);

  snprintf(url, sizeof(url), "redis://default:s3kr%%21t%%20pass@127.0.0.1:%d",
           f->pw_server.port);
  c = hl_client(url, NULL);
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  hilock_client_free(c);
}

static void wrong_password_is_eauth_with_wrongpass_text(void **state) {
  fixture *f = *state;
  char url[128];
  snprintf(url, sizeof(url), "redis://:wrong@127.0.0.1:%d", f->pw_server.port);
  connect_fails(url, HILOCK_EAUTH, "WRONGPASS");
  snprintf(url, sizeof(url), "redis://nobody:wrong@127.0.0.1:%d",
           f->pw_server.port);
  connect_fails(url, HILOCK_EAUTH, "WRONGPASS");
}

static void missing_password_is_eauth_at_creation(void **state) {
  fixture *f = *state;
  /* The new client's first round trip (PING) meets NOAUTH. */
  connect_fails(f->pw_server.url, HILOCK_EAUTH, "NOAUTH");
}

static void acl_user_without_script_rights_gets_enoperm(void **state) {
  fixture *f = *state;
  char url[128];
  hilock_client *c;
  hilock_lock *l;
  int locked = 0;

  hl_redis_ok(f->redis, "ACL SETUSER limited reset on >pw +ping");
  snprintf(url, sizeof(url), "redis://limited:pw@127.0.0.1:%d", f->server.port);
  c = hl_client(url, NULL);
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  l = hl_new_lock(c, "acl", 1000);
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(l)), HILOCK_ENOPERM,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(l)), "NOPERM");
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(l)), "evalsha");
  assert_false(hilock_hold_held(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_hold_locked(HILOCK_HOLD(l), &locked), HILOCK_ENOPERM,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_rc(hilock_lock_force_release(l, NULL), HILOCK_ENOPERM,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_client_free(c);

  /* SELECT is refused while connecting. */
  snprintf(url, sizeof(url), "redis://limited:pw@127.0.0.1:%d/3",
           f->server.port);
  connect_fails(url, HILOCK_ENOPERM, "NOPERM");
  snprintf(url, sizeof(url), "redis://limited:bad@127.0.0.1:%d", f->server.port);
  connect_fails(url, HILOCK_EAUTH, "WRONGPASS");
  hl_redis_ok(f->redis, "ACL DELUSER limited");
}

/* Clients connected to the server now (CLIENT LIST lines). */
static int clients_now(redisContext *r) {
  redisReply *rep = redisCommand(r, "CLIENT LIST");
  int n = 0;
  assert_non_null(rep);
  assert_int_equal(rep->type, REDIS_REPLY_STRING);
  for (size_t i = 0; i < rep->len; i++) n += rep->str[i] == '\n';
  freeReplyObject(rep);
  return n;
}

static void connect_later_opens_nothing_until_the_first_call(void **state) {
  fixture *f = *state;
  hilock_options o = hl_test_options();
  hilock_client *c = NULL;
  hilock_lock *l;
  char url[128];
  int before = clients_now(f->redis);
  o.connect_later = 1;
  /* Made, with a lock, and nothing connected; the first call connects. */
  assert_hl_ok(hilock_client_new(f->server.url, &o, &c), hilock_client_errmsg(c));
  l = hl_new_lock(c, "later", 5000);
  assert_int_equal(clients_now(f->redis), before);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_int_equal(clients_now(f->redis), before + 1);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_client_free(c);

  /* What the connection meets comes from the first call: a closed port,
   * a wrong password. The URL is still checked at once. */
  snprintf(url, sizeof(url), "redis://127.0.0.1:%d", hl_free_port());
  c = NULL;
  assert_hl_ok(hilock_client_new(url, &o, &c), hilock_client_errmsg(c));
  l = hl_new_lock(c, "later", 5000);
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(l)), HILOCK_EIO, hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(l)), "connect to 127.0.0.1");
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_client_free(c);
  snprintf(url, sizeof(url), "redis://:wrong@127.0.0.1:%d", f->pw_server.port);
  c = NULL;
  assert_hl_ok(hilock_client_new(url, &o, &c), hilock_client_errmsg(c));
  assert_hl_rc(hilock_client_ping(c), HILOCK_EAUTH, hilock_client_errmsg(c));
  assert_substr(hilock_client_errmsg(c), "WRONGPASS");
  hilock_client_free(c);
  c = NULL;
  assert_int_equal(hilock_client_new("redis://127.0.0.1:notaport", &o, &c), HILOCK_EINVAL);
  hilock_client_free(c);
}

/* A host name is resolved on a thread of its own (waited for within the
 * connect timeout): "localhost" from /etc/hosts, from several threads at
 * once; a name nobody knows fails the call. */
static void *ping_localhost(void *arg) {
  hilock_client *c = NULL;
  char url[64];
  hilock_options o = hl_test_options();
  snprintf(url, sizeof(url), "redis://localhost:%d", *(int *)arg);
  if (hilock_client_new(url, &o, &c) != HILOCK_OK || hilock_client_ping(c) != HILOCK_OK) {
    hilock_client_free(c);
    return (void *)1;
  }
  hilock_client_free(c);
  return NULL;
}

static void host_names_resolve_off_the_calling_thread(void **state) {
  fixture *f = *state;
  hilock_options o = hl_test_options();
  hilock_client *c = NULL;
  pthread_t t[4];
  void *bad;
  int rc;
  for (int i = 0; i < 4; i++)
    assert_int_equal(pthread_create(&t[i], NULL, ping_localhost, &f->server.port), 0);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(pthread_join(t[i], &bad), 0);
    assert_null(bad);
  }
  /* Unknown (or, without a reachable name server, not resolved in time). */
  o.connect_timeout_ms = 500;
  rc = hilock_client_new("redis://no-such-host.invalid:6379", &o, &c);
  assert_true(rc == HILOCK_EIO || rc == HILOCK_ETIMEDOUT);
  assert_substr(hilock_client_errmsg(c), "connect to no-such-host.invalid:6379");
  hilock_client_free(c);
}

/* ## Failures, timeouts and reconnects ------------------------------------- */

static void closed_port_fails_fast_with_eio(void **state) {
  char url[64];
  int port = hl_free_port();
  hilock_options o = hl_test_options();
  hilock_client *c = NULL;
  int64_t t0 = hl_now_ms();
  (void)state;
  snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
  o.connect_timeout_ms = 5000;
  assert_hl_rc(hilock_client_new(url, &o, &c), HILOCK_EIO,
               hilock_client_errmsg(c));
  assert_substr(hilock_client_errmsg(c), "connect to 127.0.0.1");
  hilock_client_free(c);
  /* Refused at once, not at the 5 s connect timeout; 2 s leaves room for
   * a loaded machine. */
  assert_i64_between(hl_now_ms() - t0, 0, 2000);
}

static void command_timeout_gives_etimedout(void **state) {
  fixture *f = *state;
  hilock_options o = hl_test_options();
  hilock_client *c;
  hilock_lock *l;
  int64_t t0, dt;

  o.command_timeout_ms = 300;
  c = hl_client(f->server.url, &o);
  l = hl_new_lock(c, "paused", 5000);
  /* Postpone every client's commands for 5 s. */
  hl_redis_ok(f->redis, "CLIENT PAUSE 5000 ALL");

  t0 = hl_now_ms();
  assert_hl_rc(hilock_client_ping(c), HILOCK_ETIMEDOUT,
               hilock_client_errmsg(c));
  dt = hl_now_ms() - t0;
  /* The 300 ms timeout, not the 5 s pause; 2.5 s leaves room for a
   * loaded machine. */
  assert_i64_between(dt, 250, 2500);
  assert_substr(hilock_client_errmsg(c), "no reply in time");

  /* A timed-out acquire is not a grant. */
  t0 = hl_now_ms();
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(l)), HILOCK_ETIMEDOUT,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  /* Likewise. */
  assert_i64_between(hl_now_ms() - t0, 250, 2500);
  assert_false(hilock_hold_held(HILOCK_HOLD(l)));
  assert_string_equal(hilock_hold_token(HILOCK_HOLD(l)), "");

  /* Once the pause ends, the client works again (a paused server's PING
   * times out, and CLIENT UNPAUSE is paused too). */
  {
    int64_t end = hl_now_ms() + 15000;
    while (hilock_client_ping(c) != HILOCK_OK && hl_now_ms() < end) {
    }
  }
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_client_free(c);
}

static void reconnects_transparently_after_server_restart(void **state) {
  fixture *f = *state;
  hilock_options o = hl_test_options();
  hilock_client *c;
  hilock_lock *a, *b;

  o.reconnect_ms = 3000;
  c = hl_client(f->server.url, &o);
  a = hl_new_lock(c, "restart", 10000);
  b = hl_new_lock(c, "restart-2", 10000);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(a)), hilock_hold_errmsg(HILOCK_HOLD(a)));

  redisFree(f->redis);
  f->redis = NULL;
  assert_int_equal(hl_server_restart(&f->server), 0);

  /* The pooled connection is dead; the call replaces it and succeeds. */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  /* The server lost its data: a's grant is gone. */
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(a)), HILOCK_ENOTOWNED, hilock_hold_errmsg(HILOCK_HOLD(a)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(b)), hilock_hold_errmsg(HILOCK_HOLD(b)));

  f->redis = hl_redis_connect(&f->server);
  hl_holds_free(HILOCK_HOLD(a), HILOCK_HOLD(b));
  hilock_client_free(c);
}

static void server_down_fails_after_reconnect_budget(void **state) {
  fixture *f = *state;
  hilock_options o = hl_test_options();
  hilock_client *c;
  int64_t t0, dt;

  o.reconnect_ms = 300;
  o.command_timeout_ms = 10000;
  c = hl_client(f->server.url, &o);
  redisFree(f->redis);
  f->redis = NULL;
  hl_server_stop(&f->server);

  /* A broken pooled connection, then reconnect attempts for 300 ms. */
  t0 = hl_now_ms();
  assert_hl_rc(hilock_client_ping(c), HILOCK_EIO, hilock_client_errmsg(c));
  dt = hl_now_ms() - t0;
  /* The 300 ms budget, not the 10 s command timeout; 2.5 s leaves room for
   * a loaded machine. */
  assert_i64_between(dt, 250, 2500);

  /* No pooled connection left: the same budget applies to opening one. */
  t0 = hl_now_ms();
  assert_hl_rc(hilock_client_ping(c), HILOCK_EIO, hilock_client_errmsg(c));
  dt = hl_now_ms() - t0;
  assert_i64_between(dt, 250, 2500); /* likewise */
  assert_substr(hilock_client_errmsg(c), "127.0.0.1");

  assert_int_equal(hl_server_restart(&f->server), 0);
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  f->redis = hl_redis_connect(&f->server);
  hilock_client_free(c);
}

static void zero_reconnect_budget_still_makes_one_attempt(void **state) {
  fixture *f = *state;
  hilock_options o = hl_test_options();
  hilock_client *c;

  o.reconnect_ms = 0;
  o.max_idle = 0; /* every call opens a fresh connection */
  c = hl_client(f->server.url, &o);
  for (int i = 0; i < 3; i++)
    assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  hilock_client_free(c);
}

/* ## Lifetime -------------------------------------------------------------- */

static void lock_outliving_client_gets_eclosed(void **state) {
  fixture *f = *state;
  hilock_client *c = hl_client(f->server.url, NULL);
  hilock_lock *held = hl_new_lock(c, "orphan", 10000);
  hilock_lock *idle = hl_new_lock(c, "orphan", 10000);
  int flag = -1;
  size_t klen;
  const char *key;

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(held)), hilock_hold_errmsg(HILOCK_HOLD(held)));
  hilock_client_free(c);

  /* Closing reported the hold lost and released it. */
  assert_true(hilock_hold_lost(HILOCK_HOLD(held)));
  assert_int_equal(hilock_hold_validity_ms(HILOCK_HOLD(held)), 0);
  assert_false(hl_redis_exists(f->redis, "hilock:{orphan}:lock", 20));
  assert_hl_rc(hilock_hold_release(HILOCK_HOLD(held)), HILOCK_ECLOSED,
               hilock_hold_errmsg(HILOCK_HOLD(held)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(held)), "closed");
  assert_hl_rc(hilock_hold_extend(HILOCK_HOLD(held), 1000, 1), HILOCK_ECLOSED,
               hilock_hold_errmsg(HILOCK_HOLD(held)));
  assert_hl_rc(hilock_hold_renew(HILOCK_HOLD(held)), HILOCK_ECLOSED,
               hilock_hold_errmsg(HILOCK_HOLD(held)));
  assert_hl_rc(hilock_hold_owned(HILOCK_HOLD(held), &flag), HILOCK_ECLOSED,
               hilock_hold_errmsg(HILOCK_HOLD(held)));
  assert_hl_rc(hilock_lock_force_release(held, &flag), HILOCK_ECLOSED,
               hilock_hold_errmsg(HILOCK_HOLD(held)));
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(idle)), HILOCK_ECLOSED,
               hilock_hold_errmsg(HILOCK_HOLD(idle)));
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(idle), 100), HILOCK_ECLOSED,
               hilock_hold_errmsg(HILOCK_HOLD(idle)));
  assert_hl_rc(hilock_hold_locked(HILOCK_HOLD(idle), &flag), HILOCK_ECLOSED,
               hilock_hold_errmsg(HILOCK_HOLD(idle)));

  key = hilock_hold_key(HILOCK_HOLD(held), &klen);
  assert_false(hl_redis_exists(f->redis, key, klen));
  hl_holds_free(HILOCK_HOLD(held), HILOCK_HOLD(idle));
}

static void client_free_with_no_locks_is_clean(void **state) {
  fixture *f = *state;
  hilock_client *c = hl_client(f->server.url, NULL);
  hilock_lock *l = hl_new_lock(c, "short-lived", 1000);
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_client_free(c);
  hilock_client_free(NULL);
}

/* ## Threads --------------------------------------------------------------- */

#define NTHREADS 4
#define ROUNDS 40

typedef struct worker {
  hilock_client *client;
  atomic_int inside; /* holders between grant and release */
  atomic_int overlaps;
  atomic_int grants;
  atomic_int errors;
} worker;

static void *contend(void *arg) {
  worker *w = arg;
  hilock_lock *l = NULL;
  if (hilock_lock_new(w->client, "contended", 9, 10000, &l) != HILOCK_OK) {
    atomic_fetch_add(&w->errors, 1);
    return NULL;
  }
  for (int i = 0; i < ROUNDS; i++) {
    if (hilock_hold_acquire(HILOCK_HOLD(l), 5000) != HILOCK_OK) {
      atomic_fetch_add(&w->errors, 1);
      continue;
    }
    if (atomic_fetch_add(&w->inside, 1) != 0) atomic_fetch_add(&w->overlaps, 1);
    atomic_fetch_add(&w->grants, 1);
    sched_yield();
    atomic_fetch_sub(&w->inside, 1);
    if (hilock_hold_release(HILOCK_HOLD(l)) != HILOCK_OK) atomic_fetch_add(&w->errors, 1);
  }
  hilock_hold_free(HILOCK_HOLD(l));
  return NULL;
}

static void threads_sharing_a_client_exclude_each_other(void **state) {
  fixture *f = *state;
  worker w;
  pthread_t t[NTHREADS];

  char *fence;

  hilock_lock *first;
  uint64_t first_fence;

  memset(&w, 0, sizeof(w));
  w.client = hl_client(f->server.url, NULL);
  /* The first grant on a name draws its fence from the server's clock;
   * past a counter ahead of the clock, every later one is one more. */
  first = hl_new_lock(w.client, "contended", 10000);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(first)), hilock_hold_errmsg(HILOCK_HOLD(first)));
  assert_true(hilock_hold_fence(HILOCK_HOLD(first)) > 1000000000000000ULL);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(first)), hilock_hold_errmsg(HILOCK_HOLD(first)));
  hilock_hold_free(HILOCK_HOLD(first));
  hl_redis_ok(f->redis, "SET hilock:{contended}:fence %lld", HL_FENCE_AHEAD);
  first_fence = (uint64_t)HL_FENCE_AHEAD;
  for (int i = 0; i < NTHREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, contend, &w), 0);
  for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  assert_int_equal(atomic_load(&w.errors), 0);
  assert_int_equal(atomic_load(&w.overlaps), 0);
  assert_int_equal(atomic_load(&w.grants), NTHREADS * ROUNDS);
  fence = hl_redis_get(f->redis, "hilock:{contended}:fence", 24);
  assert_non_null(fence);
  assert_int_equal(strtoull(fence, NULL, 10), first_fence + NTHREADS * ROUNDS);
  free(fence);
  hilock_client_free(w.client);
}

/* ## Arguments ------------------------------------------------------------- */

static void null_arguments_are_einval(void **state) {
  fixture *f = *state;
  hilock_client *c = hl_client(f->server.url, NULL);
  hilock_lock *l = NULL;
  int flag = 0;
  size_t len = 99;

  hilock_options_init(NULL);
  assert_int_equal(hilock_client_new(f->server.url, NULL, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_client_ping(NULL), HILOCK_EINVAL);
  assert_non_null(hilock_client_errmsg(NULL));
  assert_int_equal(hilock_client_errcode(NULL), HILOCK_EINVAL);
  hilock_client_free(NULL);

  assert_int_equal(hilock_lock_new(NULL, "n", 1, 1000, &l), HILOCK_EINVAL);
  assert_null(l);
  assert_int_equal(hilock_lock_new_simple(NULL, "n", 1, &l), HILOCK_EINVAL);
  assert_int_equal(hilock_lock_new_lease(NULL, "n", 1, 1000, &l), HILOCK_EINVAL);
  assert_int_equal(hilock_lock_new(c, "n", 1, 1000, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_lock_new_simple(c, "n", 1, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_lock_new_lease(c, "n", 1, 1000, NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_lock_new(c, NULL, 1, 1000, &l), HILOCK_EINVAL);
  assert_null(l);

  assert_int_equal(hilock_hold_try_acquire(NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_acquire(NULL, 0), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_release(NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_extend(NULL, 1000, 1), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_renew(NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_owned(NULL, &flag), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_locked(NULL, &flag), HILOCK_EINVAL);
  assert_int_equal(hilock_lock_force_release(NULL, &flag), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_validity_ms(NULL), 0);
  assert_false(hilock_hold_held(NULL));
  assert_int_equal(hilock_hold_fence(NULL), 0);
  assert_string_equal(hilock_hold_token(NULL), "");
  assert_int_equal(hilock_hold_ttl_ms(NULL), 0);
  assert_string_equal(hilock_hold_key(NULL, &len), "");
  assert_int_equal(len, 0);
  assert_string_equal(hilock_hold_key(NULL, NULL), "");
  assert_non_null(hilock_hold_errmsg(NULL));
  assert_int_equal(hilock_hold_errcode(NULL), HILOCK_EINVAL);
  hilock_hold_free(NULL);

  /* Valid handle, NULL out-parameter. */
  l = hl_new_lock(c, "n", 1000);
  assert_int_equal(hilock_hold_owned(HILOCK_HOLD(l), NULL), HILOCK_EINVAL);
  assert_int_equal(hilock_hold_locked(HILOCK_HOLD(l), NULL), HILOCK_EINVAL);
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(l), -5), HILOCK_EINVAL,
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_lock_force_release(l, NULL), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_client_free(c);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

HL_SUITE_MAIN("client", group_setup, group_teardown,
      T(connect_and_ping),
      T(unix_socket_connects_and_selects_db),
      T(lock_in_db3_is_invisible_in_db0),
      T(key_prefix_starts_every_key),
      T(password_url_authenticates),
      T(wrong_password_is_eauth_with_wrongpass_text),
      T(missing_password_is_eauth_at_creation),
      T(connect_later_opens_nothing_until_the_first_call),
      T(host_names_resolve_off_the_calling_thread),
      T(acl_user_without_script_rights_gets_enoperm),
      T(closed_port_fails_fast_with_eio),
      T(command_timeout_gives_etimedout),
      T(reconnects_transparently_after_server_restart),
      T(server_down_fails_after_reconnect_budget),
      T(zero_reconnect_budget_still_makes_one_attempt),
      T(lock_outliving_client_gets_eclosed),
      T(client_free_with_no_locks_is_clean),
      T(threads_sharing_a_client_exclude_each_other),
      T(null_arguments_are_einval))
