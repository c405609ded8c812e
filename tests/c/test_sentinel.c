/* Sentinel deployments and replica acknowledgement, against real
 * processes: a master, a replica and three sentinels on loopback
 * (down-after-milliseconds 1000), stopped by PID.
 *
 * - redis+sentinel:// URLs: parsing, resolution through the sentinels
 *   (skipping a dead one), ROLE verification.
 * - A lock held across kill -9 of the master: the client and its renewal
 *   follow the failover to the promoted replica.
 * - The failover double grant, reproduced without wait_replicas (the grant
 *   never reached the replica, which is then promoted) and detected with
 *   wait_replicas=1 (HILOCK_ENOREPLICAS, the grant given back).
 * - Unacknowledged renewals count as failed; every family gives back an
 *   unacknowledged grant. */
#include "test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

#define MASTER "mymaster"
#define NSENT 3
#define FAILOVER_TIMEOUT_MS 30000

typedef struct sentinel {
  pid_t pid;
  int port;
  char conf[256];
} sentinel;

typedef struct deploy {
  hl_server master, replica;
  char replicaof[3][24];
  const char *rextra[6];
  sentinel s[NSENT];
  int nsent;
  char url[512];
  redisContext *m, *r; /* raw connections to master and replica */
} deploy;

/* ## Processes ------------------------------------------------------------ */

static int ping_port(int port) {
  struct timeval tv = {0, 200000};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
  int ok = 0;
  if (c == NULL) return 0;
  if (!c->err) {
    redisReply *r;
    redisSetTimeout(c, tv);
    r = redisCommand(c, "PING");
    ok = r != NULL;
    if (r) freeReplyObject(r);
  }
  redisFree(c);
  return ok;
}

static redisContext *connect_port(int port) {
  struct timeval tv = {3, 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
  assert_non_null(c);
  if (c->err) fail_msg("connect to %d: %s", port, c->errstr);
  redisSetTimeout(c, tv);
  return c;
}

static void sentinel_kill(sentinel *s) {
  if (s->pid > 0) {
    kill(s->pid, SIGKILL);
    while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    s->pid = 0;
  }
}

/* Every sentinel knows the other two and the replica from its config, so
 * no discovery round is needed before a failover can start. */
static int sentinel_start(deploy *d, int i, const char *dir) {
  sentinel *s = &d->s[i];
  FILE *f;
  pid_t parent = getpid();
  snprintf(s->conf, sizeof(s->conf), "%s/sentinel%d.conf", dir, i);
  f = fopen(s->conf, "w");
  if (f == NULL) return -1;
  fprintf(f,
          "port %d\nbind 127.0.0.1\ndir %s\nlogfile %s/sentinel%d.log\n"
          "sentinel myid %040d\n"
          "sentinel monitor " MASTER " 127.0.0.1 %d 2\n"
          "sentinel down-after-milliseconds " MASTER " 1000\n"
          "sentinel failover-timeout " MASTER " 3000\n"
          "sentinel parallel-syncs " MASTER " 1\n"
          "sentinel known-replica " MASTER " 127.0.0.1 %d\n",
          s->port, dir, dir, i, i + 1, d->master.port, d->replica.port);
  for (int j = 0; j < NSENT; j++)
    if (j != i)
      fprintf(f, "sentinel known-sentinel " MASTER " 127.0.0.1 %d %040d\n",
              d->s[j].port, j + 1);
  fclose(f);
  fflush(NULL);
  s->pid = fork();
  if (s->pid < 0) return -1;
  if (s->pid == 0) {
    int fd;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    fd = open("/dev/null", O_RDWR);
    if (fd >= 0) {
      dup2(fd, STDIN_FILENO);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    execlp(hl_server_binary(), hl_server_binary(), s->conf, "--sentinel",
           (char *)NULL);
    _exit(127);
  }
  for (int64_t end = hl_now_ms() + 10000; hl_now_ms() < end;) {
    if (ping_port(s->port)) return 0;
    hl_sleep_ms(20);
  }
  return -1;
}

static int link_up(redisContext *replica) {
  redisReply *r = redisCommand(replica, "INFO replication");
  int up = r != NULL && r->type == REDIS_REPLY_STRING &&
           strstr(r->str, "master_link_status:up") != NULL;
  if (r) freeReplyObject(r);
  return up;
}

/* The sentinels are ready for a failover: each sees the quorum and a
 * replica with a working link. */
static int sentinel_ready(const sentinel *s) {
  redisContext *c = connect_port(s->port);
  redisReply *r = redisCommand(c, "SENTINEL ckquorum " MASTER);
  int ok = r && r->type == REDIS_REPLY_STATUS;
  if (r) freeReplyObject(r);
  r = ok ? redisCommand(c, "SENTINEL replicas " MASTER) : NULL;
  ok = 0;
  for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements;
       i++) {
    redisReply *rep = r->element[i];
    for (size_t j = 0; j + 1 < rep->elements; j += 2)
      if (strcmp(rep->element[j]->str, "master-link-status") == 0 &&
          strcmp(rep->element[j + 1]->str, "ok") == 0)
        ok = 1;
  }
  if (r) freeReplyObject(r);
  redisFree(c);
  return ok;
}

/* Master, replica (synced), and nsent sentinels (0: none). */
static void deploy_start(deploy *d, int nsent) {
  /* No 5 s diskless-sync delay before the replica's first sync. */
  static const char *const fast[] = {"--repl-diskless-sync-delay", "0", NULL};
  hl_server_opts mo = {.extra = fast};
  hl_server_opts ro = {0};
  memset(d, 0, sizeof(*d));
  assert_int_equal(hl_server_start(&d->master, &mo), 0);
  snprintf(d->replicaof[0], sizeof(d->replicaof[0]), "--replicaof");
  snprintf(d->replicaof[1], sizeof(d->replicaof[1]), "127.0.0.1");
  snprintf(d->replicaof[2], sizeof(d->replicaof[2]), "%d", d->master.port);
  d->rextra[0] = d->replicaof[0];
  d->rextra[1] = d->replicaof[1];
  d->rextra[2] = d->replicaof[2];
  d->rextra[3] = fast[0];
  d->rextra[4] = fast[1];
  d->rextra[5] = NULL;
  ro.extra = d->rextra;
  assert_int_equal(hl_server_start(&d->replica, &ro), 0);
  d->m = connect_port(d->master.port);
  d->r = connect_port(d->replica.port);
  for (int64_t end = hl_now_ms() + 10000; !link_up(d->r);) {
    if (hl_now_ms() > end) fail_msg("the replica did not sync");
    hl_sleep_ms(20);
  }
  /* The master must count the replica too (state=online), or the first
   * WAIT of a test can see 0 replicas on a busy machine. */
  for (int64_t end = hl_now_ms() + 10000;;) {
    redisReply *w = redisCommand(d->m, "WAIT 1 1000");
    int ok = w != NULL && w->type == REDIS_REPLY_INTEGER && w->integer >= 1;
    if (w) freeReplyObject(w);
    if (ok) break;
    if (hl_now_ms() > end) fail_msg("the master never counted the replica");
    hl_sleep_ms(20);
  }
  d->nsent = nsent;
  for (int i = 0; i < nsent; i++) d->s[i].port = hl_free_port();
  for (int i = 0; i < nsent; i++)
    if (sentinel_start(d, i, d->master.dir) != 0)
      fail_msg("sentinel %d did not start", i);
  for (int i = 0; i < nsent; i++)
    for (int64_t end = hl_now_ms() + 15000; !sentinel_ready(&d->s[i]);) {
      if (hl_now_ms() > end) fail_msg("sentinel %d is not ready", i);
      hl_sleep_ms(50);
    }
  int n = snprintf(d->url, sizeof(d->url), "redis+sentinel://");
  for (int i = 0; i < nsent; i++)
    n += snprintf(d->url + n, sizeof(d->url) - (size_t)n, "%s127.0.0.1:%d",
                  i ? "," : "", d->s[i].port);
  snprintf(d->url + n, sizeof(d->url) - (size_t)n, "/" MASTER);
}

static void deploy_stop(deploy *d) {
  for (int i = 0; i < d->nsent; i++) sentinel_kill(&d->s[i]);
  if (d->m) redisFree(d->m);
  if (d->r) redisFree(d->r);
  d->m = d->r = NULL;
  hl_server_destroy(&d->replica);
  hl_server_destroy(&d->master); /* holds the sentinels' files too */
}

/* Cut the replica off: the master drops its link and the replica cannot
 * sync again (it now sends a password the master does not expect), so
 * writes on the master stay unreplicated. */
static void break_replication(deploy *d) {
  hl_redis_ok(d->r, "CONFIG SET masterauth not-the-password");
  freeReplyObject(hl_redis(d->m, "CLIENT KILL TYPE replica"));
  for (int64_t end = hl_now_ms() + 5000; link_up(d->r);) {
    if (hl_now_ms() > end) fail_msg("the replica link stayed up");
    hl_sleep_ms(10);
  }
  /* The master must also have forgotten the replica (WAIT counts it). */
  for (int64_t end = hl_now_ms() + 5000;
       hl_info_field(d->m, "replication", "connected_slaves") != 0;) {
    if (hl_now_ms() > end) fail_msg("the master still lists the replica");
    hl_sleep_ms(10);
  }
}

/* Wait until the replica has key. WAIT on the test's own connection would
 * prove nothing (it wrote nothing), and just after its first sync a
 * replica may get the write stream only with its first ACK, up to a second
 * later: a master killed before then loses the write. */
static void wait_replicated(deploy *d, const char *key, size_t klen) {
  for (int64_t end = hl_now_ms() + 3000; !hl_redis_exists(d->r, key, klen);) {
    if (hl_now_ms() > end) fail_msg("the key did not reach the replica");
    hl_sleep_ms(5);
  }
}

/* Port the sentinels name as master (the first sentinel that answers). */
static int sentinel_master_port(deploy *d) {
  for (int i = 0; i < d->nsent; i++) {
    struct timeval tv = {0, 300000};
    redisContext *c;
    redisReply *r;
    int port = -1;
    if (d->s[i].pid <= 0) continue;
    c = redisConnectWithTimeout("127.0.0.1", d->s[i].port, tv);
    if (c == NULL || c->err) {
      if (c) redisFree(c);
      continue;
    }
    redisSetTimeout(c, tv);
    r = redisCommand(c, "SENTINEL get-master-addr-by-name " MASTER);
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
      port = atoi(r->element[1]->str);
    if (r) freeReplyObject(r);
    redisFree(c);
    if (port > 0) return port;
  }
  return -1;
}

/* On a connection of its own: the promotion kills normal clients. */
static int role_is_master(int port) {
  struct timeval tv = {0, 500000};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
  redisReply *r = NULL;
  int m = 0;
  if (c != NULL && !c->err) {
    redisSetTimeout(c, tv);
    r = redisCommand(c, "ROLE");
    m = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
        strcmp(r->element[0]->str, "master") == 0;
  }
  if (r) freeReplyObject(r);
  if (c) redisFree(c);
  return m;
}

/* kill -9 the master; wait until the sentinels name the replica and it
 * answers ROLE as master. Returns the time the failover took in ms. */
static int64_t kill_master_and_fail_over(deploy *d) {
  int64_t t0 = hl_now_ms();
  hl_server_stop(&d->master);
  redisFree(d->m);
  d->m = NULL;
  while (sentinel_master_port(d) != d->replica.port ||
         !role_is_master(d->replica.port)) {
    if (hl_now_ms() - t0 > FAILOVER_TIMEOUT_MS)
      fail_msg("no failover within %d ms", FAILOVER_TIMEOUT_MS);
    hl_sleep_ms(50);
  }
  redisFree(d->r);
  d->r = connect_port(d->replica.port);
  return hl_now_ms() - t0;
}

static hilock_client *client_for(const char *url, int wait_replicas) {
  hilock_options o = hl_test_options();
  o.reconnect_ms = 15000; /* room for a failover */
  o.wait_replicas = wait_replicas;
  o.wait_timeout_ms = 1000; /* room for a busy machine */
  return hl_client(url, &o);
}

/* A client on d's master whose grants wait for one replica's
 * acknowledgement, 1 s at most (every refused step waits this long). */
static hilock_client *replicated_client(const deploy *d) {
  hilock_options o = hl_test_options();
  o.wait_replicas = 1;
  o.wait_timeout_ms = 1000;
  return hl_client(d->master.url, &o);
}

static char *key_of(const char *name, const char *role, size_t *len) {
  size_t nl = strlen(name), rl = strlen(role);
  char *k = malloc(8 + nl + 2 + rl + 1);
  if (k != NULL) *len = (size_t)sprintf(k, "hilock:{%s}:%s", name, role);
  assert_non_null(k);
  return k;
}

/* ## URL parsing -------------------------------------------------------- */

static void sentinel_urls_parse(void **state) {
  hilock__err e;
  hilock__url u;
  (void)state;
  hilock__clear_err(&e);
  assert_hl_ok(hilock__url_parse("redis+sentinel://u:p%40ss@h1:26380,[::1],"
                                 "h3/my%20master/2?sentinel_password=sp&"
                                 "sentinel_user=su",
                                 &u, &e),
               e.msg);
  assert_true(u.sentinel);
  assert_host_ports(u.sentinels, u.nsentinels, "h1:26380", "::1:26379",
                    "h3:26379");
  assert_string_equal(u.master_name, "my master");
  assert_string_equal(u.user, "u");
  assert_string_equal(u.password, "p@ss");
  assert_string_equal(u.sentinel_password, "sp");
  assert_string_equal(u.sentinel_user, "su");
  assert_int_equal(u.db, 2);
  hilock__url_clear(&u);

  assert_hl_ok(hilock__url_parse("redis+sentinel://h/m?db=3", &u, &e), e.msg);
  assert_host_ports(u.sentinels, u.nsentinels, "h:26379");
  assert_int_equal(u.db, 3);
  assert_null(u.password);
  hilock__url_clear(&u);

  static const char *const bad[][2] = {
      {"redis+sentinel://h1:26379", "master name"},
      {"redis+sentinel://h1:26379/", "master name"},
      {"redis+sentinel:///m", "at least one sentinel"},
      {"redis+sentinel://h1,,h2/m", "empty sentinel host"},
      {"redis+sentinel://h1:0/m", "bad sentinel port"},
      {"redis+sentinel://h1:x/m", "bad sentinel port"},
      {"redis+sentinel://[::1/m", "unclosed"},
      {"redis+sentinel://h/m/x", "database"},
      {"redis+sentinel://h/m?nope=1", "unknown URL query"},
      {"redis://h?sentinel_password=x", "unknown URL query"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    hilock__clear_err(&e);
    int rc = hilock__url_parse(bad[i][0], &u, &e);
    if (rc != HILOCK_EINVAL)
      fail_msg("'%s' parsed (%s)", bad[i][0], hilock_err_name(rc));
    assert_substr(e.msg, bad[i][1]);
    assert_null(u.sentinels);
    assert_null(u.master_name);
  }
}

static void failover_replies_are_recognised(void **state) {
  hilock_client c;
  redisReply r;
  static const char *const yes[] = {
      "READONLY You can't write against a read only replica.",
      "LOADING Redis is loading the dataset in memory",
      "MASTERDOWN Link with MASTER is down",
      "ERR Error running script (call to f_x): @user_script:4: READONLY "
      "You can't write against a read only replica."};
  (void)state;
  memset(&c, 0, sizeof(c));
  memset(&r, 0, sizeof(r));
  r.type = REDIS_REPLY_ERROR;
  c.url.sentinel = 1;
  for (size_t i = 0; i < 4; i++) {
    r.str = (char *)yes[i];
    r.len = strlen(yes[i]);
    assert_true(hilock__failover_reply(&c, &r));
  }
  r.str = "WRONGTYPE Operation against a key";
  r.len = strlen(r.str);
  assert_false(hilock__failover_reply(&c, &r));
  /* A plain redis:// client reports READONLY as it is. */
  c.url.sentinel = 0;
  r.str = (char *)yes[0];
  r.len = strlen(yes[0]);
  assert_false(hilock__failover_reply(&c, &r));
}

/* ## Resolution --------------------------------------------------------- */

static void acquire_through_the_sentinels(void **state) {
  deploy d;
  char url[600];
  hilock_client *c = NULL;
  hilock_options o = hl_test_options();
  hilock__err e;
  size_t klen;
  char *key = key_of("via-sentinel", "lock", &klen);
  int dead = hl_free_port(), rc;
  (void)state;
  deploy_start(&d, NSENT);

  /* The first sentinel listed is down: the next ones answer. */
  snprintf(url, sizeof(url), "redis+sentinel://127.0.0.1:%d,%s", dead,
           d.url + strlen("redis+sentinel://"));
  c = client_for(url, 0);
  hilock_lock *l = hl_new_lock(c, "via-sentinel", 10000);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  /* The key is on the master, and replicated. */
  assert_true(hl_redis_exists(d.m, key, klen));
  wait_replicated(&d, key, klen);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_client_free(c);

  /* A master the sentinels do not know. */
  snprintf(url, sizeof(url), "redis+sentinel://127.0.0.1:%d/nosuchmaster",
           d.s[0].port);
  c = NULL;
  rc = hilock_client_new(url, &o, &c);
  assert_hl_rc(rc, HILOCK_EIO, hilock_client_errmsg(c));
  assert_substr(hilock_client_errmsg(c), "does not know master 'nosuchmaster'");
  hilock_client_free(c);

  /* No sentinel reachable at all. */
  snprintf(url, sizeof(url), "redis+sentinel://127.0.0.1:%d/" MASTER, dead);
  c = NULL;
  rc = hilock_client_new(url, &o, &c);
  assert_hl_rc(rc, HILOCK_EIO, hilock_client_errmsg(c));
  assert_substr(hilock_client_errmsg(c), "no sentinel (of 1)");
  hilock_client_free(c);

  /* ROLE check: the replica is refused as a master. */
  c = client_for(d.url, 0);
  hilock__clear_err(&e);
  {
    hilock__addr ra = {NULL, "127.0.0.1", d.replica.port};
    hilock__addr ma = {NULL, "127.0.0.1", d.master.port};
    hilock__net *rn = hilock__net_connect(&ra, NULL, 2000);
    hilock__net *mn = hilock__net_connect(&ma, NULL, 2000);
    assert_true(hilock__net_ready(rn) && hilock__net_ready(mn));
    hilock__net_set_timeout(rn, 2000);
    hilock__net_set_timeout(mn, 2000);
    rc = hilock__sentinel_check_role(c, &e, rn, "127.0.0.1", d.replica.port);
    assert_hl_rc(rc, HILOCK_EIO, e.msg);
    assert_substr(e.msg, "answers ROLE as 'slave'");
    assert_hl_ok(hilock__sentinel_check_role(c, &e, mn, "127.0.0.1",
                                             d.master.port),
                 e.msg);
    hilock__net_free(rn);
    hilock__net_free(mn);
  }
  hilock_client_free(c);
  free(key);
  deploy_stop(&d);
}

/* ## Failover ----------------------------------------------------------- */

static void lost_flag(void *arg) { __atomic_store_n((int *)arg, 1, __ATOMIC_SEQ_CST); }

static void client_follows_a_failover(void **state) {
  deploy d;
  int lost = 0, owned = 0;
  size_t klen;
  char *key = key_of("follow", "lock", &klen);
  (void)state;
  deploy_start(&d, NSENT);
  hilock_client *c = client_for(d.url, 0);
  /* The TTL must outlast the failover (~3 s; more on a busy host): until
   * the replica is promoted nothing can renew the key. */
  hilock_lock *l = hl_new_lock(c, "follow", 8000);
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(l), 1, 0, lost_flag, &lost), "renew");
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(l), 1000), hilock_hold_errmsg(HILOCK_HOLD(l)));
  uint64_t fence = hilock_hold_fence(HILOCK_HOLD(l));
  wait_replicated(&d, key, klen);

  int64_t t0 = hl_now_ms();
  int64_t took = kill_master_and_fail_over(&d);
  print_message("failover took %lld ms\n", (long long)took);

  /* Past the TTL counted from the kill: only renewals on the promoted
   * replica can have kept the key. */
  if (took > 7000) fail_msg("the failover took %lld ms, near the TTL", (long long)took);
  int64_t left = t0 + 8000 + 1000 - hl_now_ms();
  if (left > 0) hl_sleep_ms(left);
  assert_int_equal(__atomic_load_n(&lost, __ATOMIC_SEQ_CST), 0);
  assert_hl_ok(hilock_hold_owned(HILOCK_HOLD(l), &owned), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_true(owned);
  char *v = hl_redis_get(d.r, key, klen);
  assert_non_null(v);
  assert_string_equal(v, hilock_hold_token(HILOCK_HOLD(l)));
  free(v);
  assert_i64_between(hl_redis_pttl(d.r, key, klen), 1, 8000);

  /* Release and a new grant go to the new master; the fence moves on. */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_false(hl_redis_exists(d.r, key, klen));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_true(hilock_hold_fence(HILOCK_HOLD(l)) > fence);
  assert_true(hl_redis_exists(d.r, key, klen));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  /* A new client resolves the new master directly. */
  hilock_client *c2 = client_for(d.url, 0);
  assert_hl_ok(hilock_client_ping(c2), hilock_client_errmsg(c2));
  hilock_client_free(c2);
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_client_free(c);
  free(key);
  deploy_stop(&d);
}

/* Without wait_replicas: a grant the replica never saw is lost in the
 * failover, and a second client is granted the same lock (with the same
 * fencing token) while the first still holds it. */
static void failover_double_grant_without_wait(void **state) {
  deploy d;
  (void)state;
  deploy_start(&d, NSENT);
  hilock_client *a = client_for(d.url, 0);
  hilock_client *b = client_for(d.url, 0);
  hilock_lock *la = hl_new_lock(a, "double", 30000);
  hilock_lock *lb = hl_new_lock(b, "double", 30000);

  break_replication(&d);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(la)), hilock_hold_errmsg(HILOCK_HOLD(la)));
  kill_master_and_fail_over(&d);

  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(lb)), hilock_hold_errmsg(HILOCK_HOLD(lb)));
  /* Both believe they hold it: the double grant. */
  assert_true(hilock_hold_held(HILOCK_HOLD(la)));
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(la)) > 20000);
  assert_true(hilock_hold_held(HILOCK_HOLD(lb)));
  /* The fence counter was not replicated either, yet the fence did not go
   * back: the new master's missing counter starts at its clock. */
  assert_true(hilock_hold_fence(HILOCK_HOLD(lb)) > hilock_hold_fence(HILOCK_HOLD(la)));
  hl_holds_free(HILOCK_HOLD(la), HILOCK_HOLD(lb));
  hilock_client_free(a);
  hilock_client_free(b);
  deploy_stop(&d);
}

/* With wait_replicas=1 the same sequence is caught at the grant: the
 * acquire fails with HILOCK_ENOREPLICAS, gives the grant back, and after
 * the failover only one client holds the lock. */
static void wait_replicas_detects_the_lost_grant(void **state) {
  deploy d;
  size_t klen;
  char *key = key_of("detect", "lock", &klen);
  (void)state;
  deploy_start(&d, NSENT);
  hilock_client *a = client_for(d.url, 1);
  hilock_client *b = client_for(d.url, 0);
  hilock_lock *la = hl_new_lock(a, "detect", 30000);
  hilock_lock *lb = hl_new_lock(b, "detect", 30000);

  /* Control: with the replica in sync the grant is acknowledged. */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(la)), hilock_hold_errmsg(HILOCK_HOLD(la)));
  assert_true(hl_redis_exists(d.r, key, klen));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(la)), hilock_hold_errmsg(HILOCK_HOLD(la)));

  break_replication(&d);
  int64_t t0 = hl_now_ms();
  int rc = hilock_hold_try_acquire(HILOCK_HOLD(la));
  assert_hl_rc(rc, HILOCK_ENOREPLICAS, hilock_hold_errmsg(HILOCK_HOLD(la)));
  assert_i64_between(hl_now_ms() - t0, 950, 4000); /* WAIT's 1000 ms */
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(la)), "0 of 1 replicas acknowledged");
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(la)), "given back");
  assert_int_equal(hilock_hold_errcode(HILOCK_HOLD(la)), HILOCK_ENOREPLICAS);
  assert_false(hilock_hold_held(HILOCK_HOLD(la)));
  assert_false(hl_redis_exists(d.m, key, klen)); /* given back */
  /* A blocking acquire reports it too (it is not a "busy" to wait out). */
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(la), 2000), HILOCK_ENOREPLICAS,
               hilock_hold_errmsg(HILOCK_HOLD(la)));

  kill_master_and_fail_over(&d);
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(lb)), hilock_hold_errmsg(HILOCK_HOLD(lb)));
  assert_false(hilock_hold_held(HILOCK_HOLD(la))); /* one holder only */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(lb)), hilock_hold_errmsg(HILOCK_HOLD(lb)));
  hl_holds_free(HILOCK_HOLD(la), HILOCK_HOLD(lb));
  hilock_client_free(a);
  hilock_client_free(b);
  free(key);
  deploy_stop(&d);
}

/* ## Renewals and the other families (master + replica, no sentinels) ---- */

static void unacknowledged_renewals_lose_the_hold(void **state) {
  deploy d;
  int lost = 0;
  hilock_client *c;
  (void)state;
  deploy_start(&d, 0);
  c = replicated_client(&d);
  hilock_lock *l = hl_new_lock(c, "renew", 1500);
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(l), 1, 0, lost_flag, &lost), "renew");
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  /* Control: acknowledged renewals keep it past twice its TTL. */
  hl_sleep_ms(3200);
  assert_int_equal(__atomic_load_n(&lost, __ATOMIC_SEQ_CST), 0);
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(l)) > 0);
  assert_hl_ok(hilock_hold_renew(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));

  break_replication(&d);
  /* An explicit renewal is refused and does not extend the validity. */
  int64_t before = hilock_hold_validity_ms(HILOCK_HOLD(l));
  assert_hl_rc(hilock_hold_renew(HILOCK_HOLD(l)), HILOCK_ENOREPLICAS, hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(l)) <= before);
  /* The watchdog's renewals reach the master but are not acknowledged:
   * the hold is reported lost when its validity runs out. */
  int64_t t0 = hl_now_ms();
  while (!__atomic_load_n(&lost, __ATOMIC_SEQ_CST)) {
    if (hl_now_ms() - t0 > 4000) fail_msg("the hold was not reported lost");
    hl_sleep_ms(20);
  }
  /* When the 1.5 s validity runs out; the loop's 4 s tells it from a hold
   * renewed on (never lost). */
  assert_i64_between(hl_now_ms() - t0, 0, 4000);
  assert_true(hilock_hold_lost(HILOCK_HOLD(l)));
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_client_free(c);
  deploy_stop(&d);
}

static void every_family_gives_back_an_unacknowledged_grant(void **state) {
  deploy d;
  hilock_client *c;
  size_t klen;
  char *key;
  (void)state;
  deploy_start(&d, 0);
  c = replicated_client(&d);
  hilock_rlock *rl = NULL;
  hilock_semaphore *s = NULL;
  hilock_fair_lock *fl = NULL;
  assert_hl_ok(hilock_rlock_new(c, "fam-r", 5, 10000, &rl), "rlock");
  assert_hl_ok(hilock_semaphore_new(c, "fam-s", 5, 2, 10000, &s), "sem");
  assert_hl_ok(hilock_fair_lock_new(c, "fam-f", 5, 10000, &fl), "fair");
  /* Control: acknowledged grants hold. */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(s)), hilock_hold_errmsg(HILOCK_HOLD(s)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(fl)), hilock_hold_errmsg(HILOCK_HOLD(fl)));

  break_replication(&d);
  /* Re-entry of the reentrant lock: undone, the first entry stays. */
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(rl)), HILOCK_ENOREPLICAS,
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(rl)), "0 of 1 replicas");
  int64_t count = 0;
  assert_hl_ok(hilock_rlock_hold_count(rl, &count), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_int_equal(count, 1);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(rl)), hilock_hold_errmsg(HILOCK_HOLD(rl)));
  key = key_of("fam-r", "rlock", &klen);
  assert_false(hl_redis_exists(d.m, key, klen));
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(rl)), HILOCK_ENOREPLICAS,
               hilock_hold_errmsg(HILOCK_HOLD(rl)));
  assert_false(hl_redis_exists(d.m, key, klen));
  free(key);

  /* Semaphore: the second permit is given back. */
  hilock_semaphore *s2 = NULL;
  assert_hl_ok(hilock_semaphore_new(c, "fam-s", 5, 2, 10000, &s2), "sem");
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(s2)), HILOCK_ENOREPLICAS,
               hilock_hold_errmsg(HILOCK_HOLD(s2)));
  key = key_of("fam-s", "permits", &klen);
  assert_int_equal(hl_redis_int(d.m, "ZCARD %b", key, klen), 1);
  free(key);
  assert_hl_rc(hilock_hold_renew(HILOCK_HOLD(s)), HILOCK_ENOREPLICAS,
               hilock_hold_errmsg(HILOCK_HOLD(s)));
  hilock_hold_free(HILOCK_HOLD(s2));

  /* Fair lock: released, then a new grant is given back. */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(fl)), hilock_hold_errmsg(HILOCK_HOLD(fl)));
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(fl)), HILOCK_ENOREPLICAS,
               hilock_hold_errmsg(HILOCK_HOLD(fl)));
  key = key_of("fam-f", "fair", &klen);
  assert_false(hl_redis_exists(d.m, key, klen));
  free(key);
  assert_false(hilock_hold_held(HILOCK_HOLD(fl)));

  hl_holds_free(HILOCK_HOLD(rl), HILOCK_HOLD(s), HILOCK_HOLD(fl));
  hilock_client_free(c);
  deploy_stop(&d);
}

/* The read-write, multi-key, sequential and segmented locks confirm their
 * grants too: an unacknowledged grant or re-entry is given back (what was
 * held before stays), an unacknowledged extension does not count. */
static void coordination_types_give_back_unacknowledged_grants(void **state) {
  deploy d;
  hilock_client *c;
  const char *names[2] = {"fam-m:a", "fam-m:b"};
  int64_t n = 0, readers = -1;
  int writer = -1, locked = -1;
  size_t klen;
  char *key;
  (void)state;
  deploy_start(&d, 0);
  c = replicated_client(&d);
  hilock_rwlock *rw = NULL;
  hilock_multi_lock *m = NULL;
  hilock_sequential_lock *q = NULL;
  hilock_segmented_lock *g = NULL;
  assert_hl_ok(hilock_rwlock_new(c, "fam-rw", 6, 30000, &rw),
               hilock_client_errmsg(c));
  assert_hl_ok(hilock_multi_lock_new(c, names, 2, 30000, &m),
               hilock_client_errmsg(c));
  assert_hl_ok(hilock_sequential_lock_new(c, "fam-q", 5, 30000, &q),
               hilock_client_errmsg(c));
  assert_hl_ok(hilock_segmented_lock_new(c, "fam-g", 5, 2, 30000, &g),
               hilock_client_errmsg(c));
  assert_hl_ok(hilock_segmented_lock_stock_init(g, 10), hilock_hold_errmsg(HILOCK_HOLD(g)));
  /* Control: acknowledged grants hold. */
  assert_hl_ok(hilock_rwlock_write_try_acquire(rw), hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_hl_ok(hilock_hold_renew(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(q)), hilock_hold_errmsg(HILOCK_HOLD(q)));
  assert_hl_ok(hilock_hold_renew(HILOCK_HOLD(q)), hilock_hold_errmsg(HILOCK_HOLD(q)));
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(g)), hilock_hold_errmsg(HILOCK_HOLD(g)));
  int64_t taken = 0, left = 0;
  assert_hl_ok(hilock_segmented_lock_take(g, 1, 0, &taken, &left),
               hilock_hold_errmsg(HILOCK_HOLD(g)));
  assert_int_equal(taken, 1);

  break_replication(&d);
  /* Read-write lock: a write re-entry is undone, the first entry stays;
   * then a read grant is given back. */
  assert_hl_rc(hilock_rwlock_write_try_acquire(rw), HILOCK_ENOREPLICAS,
               hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(rw)), "0 of 1 replicas");
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(rw)), "given back");
  assert_hl_ok(hilock_rwlock_write_hold_count(rw, &n), hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_int_equal(n, 1);
  assert_hl_ok(hilock_rwlock_write_release(rw), hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_hl_rc(hilock_rwlock_read_try_acquire(rw), HILOCK_ENOREPLICAS,
               hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_hl_ok(hilock_rwlock_state(rw, &readers, &writer),
               hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_int_equal(readers, 0);
  assert_int_equal(writer, 0);
  assert_int_equal(hilock_rwlock_read_validity_ms(rw), 0);
  assert_hl_rc(hilock_rwlock_write_acquire(rw, 300), HILOCK_ENOREPLICAS,
               hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_hl_ok(hilock_rwlock_state(rw, &readers, &writer),
               hilock_hold_errmsg(HILOCK_HOLD(rw)));
  assert_int_equal(writer, 0);

  /* Multi-key lock: an extension does not count; a new grant of every
   * name is given back whole. */
  int64_t before = hilock_hold_validity_ms(HILOCK_HOLD(m));
  assert_hl_rc(hilock_hold_renew(HILOCK_HOLD(m)), HILOCK_ENOREPLICAS,
               hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_true(hilock_hold_validity_ms(HILOCK_HOLD(m)) <= before);
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(m)), hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(m), 300), HILOCK_ENOREPLICAS,
               hilock_hold_errmsg(HILOCK_HOLD(m)));
  assert_false(hilock_hold_held(HILOCK_HOLD(m)));
  for (int i = 0; i < 2; i++) {
    key = key_of(names[i], "lock", &klen);
    assert_false(hl_redis_exists(d.m, key, klen));
    free(key);
  }

  /* Sequential lock: likewise, and the entry leaves the queue. */
  assert_hl_rc(hilock_hold_renew(HILOCK_HOLD(q)), HILOCK_ENOREPLICAS,
               hilock_hold_errmsg(HILOCK_HOLD(q)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(q)), hilock_hold_errmsg(HILOCK_HOLD(q)));
  assert_hl_rc(hilock_hold_acquire(HILOCK_HOLD(q), 300), HILOCK_ENOREPLICAS,
               hilock_hold_errmsg(HILOCK_HOLD(q)));
  assert_false(hilock_hold_held(HILOCK_HOLD(q)));
  assert_hl_ok(hilock_hold_locked(HILOCK_HOLD(q), &locked), hilock_hold_errmsg(HILOCK_HOLD(q)));
  assert_int_equal(locked, 0);
  assert_hl_ok(hilock_sequential_lock_waiters(q, &n), hilock_hold_errmsg(HILOCK_HOLD(q)));
  assert_int_equal(n, 0);

  /* Segmented lock: an unconfirmed take is put back, a renewal does not
   * count, and a new grant is given back with its stock untouched. */
  assert_hl_ok(hilock_segmented_lock_stock(g, HILOCK_SEGMENT_ALL, &n), hilock_hold_errmsg(HILOCK_HOLD(g)));
  assert_int_equal(n, 9);
  assert_hl_rc(hilock_segmented_lock_take(g, 2, 0, &taken, &left), HILOCK_ENOREPLICAS,
               hilock_hold_errmsg(HILOCK_HOLD(g)));
  assert_substr(hilock_hold_errmsg(HILOCK_HOLD(g)), "put back");
  assert_int_equal(taken, 0);
  assert_hl_ok(hilock_segmented_lock_stock(g, HILOCK_SEGMENT_ALL, &n), hilock_hold_errmsg(HILOCK_HOLD(g)));
  assert_int_equal(n, 9);
  assert_hl_rc(hilock_hold_renew(HILOCK_HOLD(g)), HILOCK_ENOREPLICAS,
               hilock_hold_errmsg(HILOCK_HOLD(g)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(g)), hilock_hold_errmsg(HILOCK_HOLD(g)));
  assert_hl_rc(hilock_hold_try_acquire(HILOCK_HOLD(g)), HILOCK_ENOREPLICAS,
               hilock_hold_errmsg(HILOCK_HOLD(g)));
  assert_false(hilock_hold_held(HILOCK_HOLD(g)));
  for (int i = 0; i < 2; i++) {
    char role[16];
    snprintf(role, sizeof(role), "seg:%d", i);
    key = key_of("fam-g", role, &klen);
    assert_false(hl_redis_exists(d.m, key, klen));
    free(key);
  }
  assert_hl_ok(hilock_segmented_lock_stock(g, HILOCK_SEGMENT_ALL, &n), hilock_hold_errmsg(HILOCK_HOLD(g)));
  assert_int_equal(n, 9);

  hl_holds_free(HILOCK_HOLD(rw), HILOCK_HOLD(m), HILOCK_HOLD(q),
                HILOCK_HOLD(g));
  hilock_client_free(c);
  deploy_stop(&d);
}

static void wait_options_are_checked(void **state) {
  hilock_options o = hl_test_options();
  hilock_client *c = NULL;
  (void)state;
  o.wait_replicas = -1;
  assert_hl_rc(hilock_client_new("redis://127.0.0.1:1", &o, &c), HILOCK_EINVAL,
               hilock_client_errmsg(c));
  hilock_client_free(c);
  o.wait_replicas = 1;
  o.wait_timeout_ms = o.command_timeout_ms; /* the reply would time out */
  c = NULL;
  assert_hl_rc(hilock_client_new("redis://127.0.0.1:1", &o, &c), HILOCK_EINVAL,
               hilock_client_errmsg(c));
  assert_substr(hilock_client_errmsg(c), "wait_timeout_ms");
  hilock_client_free(c);
}

/* ## A real READONLY on a pooled connection ------------------------------
 * The sentinels' own failover cannot produce one: when they demote the old
 * master they send CLIENT KILL TYPE normal with its REPLICAOF, so a pooled
 * connection is closed, never answered READONLY. FAILOVER (Redis >= 6.2)
 * hands over to the replica and keeps the old master's clients connected;
 * the sentinels are re-pointed with SENTINEL REMOVE and MONITOR, as in a
 * switch-over done by an operator. */

/* Every sentinel forgets the master (port < 0), or watches the one on
 * port. */
static void sentinels_watch(deploy *d, int port) {
  for (int i = 0; i < d->nsent; i++) {
    redisContext *s = connect_port(d->s[i].port);
    if (port < 0)
      hl_redis_ok(s, "SENTINEL REMOVE " MASTER);
    else
      hl_redis_ok(s, "SENTINEL MONITOR " MASTER " 127.0.0.1 %d 2", port);
    redisFree(s);
  }
}

/* 1 if the server on c lists a client connected from local port lport. */
static int has_client_from(redisContext *c, int lport) {
  redisReply *rep = hl_redis(c, "CLIENT LIST TYPE normal");
  char want[40];
  int found;
  snprintf(want, sizeof(want), " addr=127.0.0.1:%d ", lport);
  found = rep->type == REDIS_REPLY_STRING && strstr(rep->str, want) != NULL;
  freeReplyObject(rep);
  return found;
}

static int local_port(const hilock__net *ctx) {
  struct sockaddr_in sa;
  socklen_t len = sizeof(sa);
  assert_int_equal(getsockname(ctx->fd, (struct sockaddr *)&sa, &len), 0);
  return ntohs(sa.sin_port);
}

static void a_pooled_connection_answered_READONLY_moves_to_the_new_master(
    void **state) {
  deploy d;
  size_t klen;
  char *key = key_of("readonly", "lock", &klen);
  int old_port, new_port, pooled;
  (void)state;
  deploy_start(&d, NSENT);
  old_port = d.master.port;
  new_port = d.replica.port;
  hilock_client *c = client_for(d.url, 0);
  hilock_lock *l = hl_new_lock(c, "readonly", 10000);
  /* A grant and its release leave one connection to the master pooled. */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_int_equal(c->nidle, 1);
  assert_int_equal(c->idle->ctx->port, old_port);
  pooled = local_port(c->idle->ctx);
  assert_true(has_client_from(d.m, pooled));
  assert_int_equal(hl_errorstat(d.m, "errorstat_READONLY"), 0);

  /* The sentinels stop watching (left alone, they would reconfigure the
   * servers themselves), the old master hands over and becomes a replica
   * with its clients connected, then the sentinels name the new master. */
  sentinels_watch(&d, -1);
  hl_redis_ok(d.m, "FAILOVER");
  for (int64_t end = hl_now_ms() + 10000;
       !role_is_master(new_port) || role_is_master(old_port);) {
    if (hl_now_ms() > end) fail_msg("FAILOVER did not complete");
    hl_sleep_ms(20);
  }
  sentinels_watch(&d, new_port);
  assert_int_equal(sentinel_master_port(&d), new_port);
  /* The pooled connection survived the demotion. */
  assert_int_equal(c->nidle, 1);
  assert_true(has_client_from(d.m, pooled));

  /* The grant is tried on the pooled connection, refused with READONLY,
   * and made on the master the sentinels name now. */
  assert_hl_ok(hilock_hold_try_acquire(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_true(hl_errorstat(d.m, "errorstat_READONLY") > 0);
  char *v = hl_redis_get(d.r, key, klen);
  assert_non_null(v);
  assert_string_equal(v, hilock_hold_token(HILOCK_HOLD(l)));
  free(v);
  assert_int_equal(c->nidle, 1);
  assert_int_equal(c->idle->ctx->port, new_port);
  assert_false(has_client_from(d.m, pooled)); /* closed by the client */
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_false(hl_redis_exists(d.r, key, klen));
  hilock_hold_free(HILOCK_HOLD(l));
  hilock_client_free(c);
  free(key);
  deploy_stop(&d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sentinel_urls_parse),
      cmocka_unit_test(failover_replies_are_recognised),
      cmocka_unit_test(wait_options_are_checked),
      cmocka_unit_test(acquire_through_the_sentinels),
      cmocka_unit_test(client_follows_a_failover),
      cmocka_unit_test(failover_double_grant_without_wait),
      cmocka_unit_test(wait_replicas_detects_the_lost_grant),
      cmocka_unit_test(unacknowledged_renewals_lose_the_hold),
      cmocka_unit_test(every_family_gives_back_an_unacknowledged_grant),
      cmocka_unit_test(coordination_types_give_back_unacknowledged_grants),
      cmocka_unit_test(
          a_pooled_connection_answered_READONLY_moves_to_the_new_master),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
