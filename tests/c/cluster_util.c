/* A local Redis Cluster for the test suites (see cluster_util.h). */
#include "cluster_util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static int run_redis_cli_create(hl_cluster *cl) {
  char addr[HL_CLUSTER_NODES][32], log[PATH_MAX];
  char *argv[11 + HL_CLUSTER_NODES];
  int argc = 0, status;
  pid_t pid;
  int64_t deadline;

  argv[argc++] = "redis-cli";
  if (cl->node[0].password != NULL) {
    argv[argc++] = "-a";
    argv[argc++] = (char *)cl->node[0].password;
    argv[argc++] = "--no-auth-warning";
  }
  argv[argc++] = "--cluster";
  argv[argc++] = "create";
  for (int i = 0; i < HL_CLUSTER_NODES; i++) {
    snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", cl->node[i].port);
    argv[argc++] = addr[i];
  }
  argv[argc++] = "--cluster-replicas";
  argv[argc++] = "1";
  argv[argc++] = "--cluster-yes";
  argv[argc] = NULL;
  snprintf(log, sizeof(log), "%s/create.log", cl->node[0].dir);
  fflush(NULL);
  pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    execvp("redis-cli", argv);
    _exit(127);
  }
  deadline = hl_now_ms() + 30000;
  for (;;) {
    pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid) break;
    if (got < 0 && errno != EINTR) return -1;
    if (hl_now_ms() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      print_error("redis-cli --cluster create did not finish\n");
      return -1;
    }
    hl_sleep_ms(20);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    print_error("redis-cli --cluster create failed (see %s)\n", log);
    return -1;
  }
  return 0;
}

static redisContext *try_connect(const hl_server *s) {
  struct timeval tv = {0, 500000};
  redisContext *c;
  if (s->pid <= 0) return NULL;
  c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
  if (c == NULL) return NULL;
  if (c->err) {
    redisFree(c);
    return NULL;
  }
  redisSetTimeout(c, tv);
  if (s->password != NULL) {
    redisReply *r = redisCommand(c, "AUTH %s", s->password);
    int ok = r != NULL && r->type != REDIS_REPLY_ERROR;
    if (r != NULL) freeReplyObject(r);
    if (!ok) {
      redisFree(c);
      return NULL;
    }
  }
  return c;
}

/* One command on node s over a connection of its own: the reply, or NULL
 * if the node cannot be reached or did not answer. */
static redisReply *node_command(const hl_server *s, const char *cmd) {
  redisContext *c = try_connect(s);
  redisReply *r;
  if (c == NULL) return NULL;
  r = redisCommand(c, cmd);
  redisFree(c);
  return r;
}

/* The port that masters slot according to node s, or -1. */
static int owner_port_from(const hl_server *s, int slot) {
  redisReply *r = node_command(s, "CLUSTER SLOTS");
  int port = -1;
  if (r != NULL && r->type == REDIS_REPLY_ARRAY) {
    for (size_t i = 0; i < r->elements; i++) {
      redisReply *e = r->element[i];
      if (e->type == REDIS_REPLY_ARRAY && e->elements >= 3 &&
          e->element[0]->integer <= slot && slot <= e->element[1]->integer &&
          e->element[2]->type == REDIS_REPLY_ARRAY &&
          e->element[2]->elements >= 2)
        port = (int)e->element[2]->element[1]->integer;
    }
  }
  if (r != NULL) freeReplyObject(r);
  return port;
}

/* 1 if node s lists a replica for every slot range. */
static int sees_replicas(const hl_server *s) {
  redisReply *r = node_command(s, "CLUSTER SLOTS");
  int ok = 0;
  if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
    ok = 1;
    for (size_t i = 0; i < r->elements; i++)
      if (r->element[i]->type != REDIS_REPLY_ARRAY ||
          r->element[i]->elements < 4)
        ok = 0;
  }
  if (r != NULL) freeReplyObject(r);
  return ok;
}

static int node_ok(const hl_server *s) {
  redisReply *r = node_command(s, "CLUSTER INFO");
  int ok = 0;
  if (r != NULL && r->type == REDIS_REPLY_STRING)
    ok = strstr(r->str, "cluster_state:ok") != NULL &&
         strstr(r->str, "cluster_slots_ok:16384") != NULL;
  if (r != NULL) freeReplyObject(r);
  if (ok) {
    /* A replica counts once its link to the master is up. */
    r = node_command(s, "INFO replication");
    if (r != NULL && r->type == REDIS_REPLY_STRING &&
        strstr(r->str, "role:slave") != NULL)
      ok = strstr(r->str, "master_link_status:up") != NULL;
    if (r != NULL) freeReplyObject(r);
  }
  return ok;
}

int hl_cluster_wait_ok(hl_cluster *cl, int64_t timeout_ms) {
  static const int probe[] = {0, 5000, 5461, 5462, 10922, 10923, 16383};
  int64_t deadline = hl_now_ms() + timeout_ms;
  while (hl_now_ms() < deadline) {
    int ok = 1;
    for (int i = 0; i < HL_CLUSTER_NODES && ok; i++)
      if (cl->node[i].pid > 0 && !node_ok(&cl->node[i])) ok = 0;
    for (size_t p = 0; ok && p < sizeof(probe) / sizeof(probe[0]); p++) {
      int port = -2;
      for (int i = 0; i < HL_CLUSTER_NODES && ok; i++) {
        int got;
        if (cl->node[i].pid <= 0) continue;
        got = owner_port_from(&cl->node[i], probe[p]);
        if (got < 0 || (port != -2 && got != port)) ok = 0;
        port = got;
      }
    }
    if (ok) return 1;
    hl_sleep_ms(50);
  }
  return 0;
}

int hl_cluster_start(hl_cluster *cl, int node_timeout_ms) {
  return hl_cluster_start_auth(cl, node_timeout_ms, NULL);
}

hl_cluster hl_group_cluster;

int hl_cluster_group_setup(void **state) {
  (void)state;
  return hl_cluster_start(&hl_group_cluster, 1000);
}

int hl_cluster_group_teardown(void **state) {
  (void)state;
  hl_cluster_destroy(&hl_group_cluster);
  return 0;
}

int hl_cluster_start_auth(hl_cluster *cl, int node_timeout_ms,
                          const char *password) {
  static char timeout[16];
  /* The servers keep these pointers (for restarts): the strings are
   * static, the array is copied. */
  const char *extra[] = {"--cluster-enabled", "yes",
                         "--cluster-config-file", "nodes.conf",
                         "--cluster-node-timeout", timeout,
                         "--cluster-replica-validity-factor", "0",
                         /* Healthy masters keep serving while one
                          * fails over (the default refuses every
                          * command with CLUSTERDOWN meanwhile; the
                          * Python suite runs with the default). */
                         "--cluster-require-full-coverage", "no",
                         /* Replicas sync at once, not after 5 s,
                          * and CLUSTER SLOTS lists a replica only
                          * once its offset moved: the master's
                          * pings move it each second, not each
                          * 10 s. */
                         "--repl-diskless-sync-delay", "0",
                         "--repl-ping-replica-period", "1",
                         NULL, NULL, NULL};
  size_t nx = sizeof(extra) / sizeof(extra[0]) - 3;
  hl_server_opts opts = {.extra = extra, .port_max = 55535,
                         .password = password};
  memset(cl, 0, sizeof(*cl));
  snprintf(timeout, sizeof(timeout), "%d", node_timeout_ms);
  if (password != NULL) {
    /* Replicas authenticate to their masters with the same password. */
    extra[nx++] = "--masterauth";
    extra[nx] = password;
  }
  for (int i = 0; i < HL_CLUSTER_NODES; i++)
    if (hl_server_start(&cl->node[i], &opts) != 0) return -1;
  if (run_redis_cli_create(cl) != 0) return -1;
  if (!hl_cluster_wait_ok(cl, 20000)) {
    print_error("the cluster did not reach cluster_state:ok\n");
    return -1;
  }
  /* Every node knows every master's replica (failover needs it). */
  for (int64_t until = hl_now_ms() + 20000;;) {
    int ok = 1;
    for (int i = 0; i < HL_CLUSTER_NODES && ok; i++)
      ok = sees_replicas(&cl->node[i]);
    if (ok) break;
    if (hl_now_ms() > until) {
      print_error("the cluster's replicas did not show up\n");
      return -1;
    }
    hl_sleep_ms(50);
  }
  snprintf(cl->url, sizeof(cl->url),
           "redis+cluster://127.0.0.1:%d,127.0.0.1:%d", cl->node[0].port,
           cl->node[1].port);
  return 0;
}

void hl_cluster_destroy(hl_cluster *cl) {
  for (int i = 0; i < HL_CLUSTER_NODES; i++) hl_server_destroy(&cl->node[i]);
}

int hl_cluster_owner(hl_cluster *cl, int slot) {
  for (int i = 0; i < HL_CLUSTER_NODES; i++) {
    int port;
    if (cl->node[i].pid <= 0) continue;
    port = owner_port_from(&cl->node[i], slot);
    if (port < 0) continue;
    for (int j = 0; j < HL_CLUSTER_NODES; j++)
      if (cl->node[j].port == port) return j;
    return -1;
  }
  return -1;
}

int hl_cluster_replica_of(hl_cluster *cl, int m) {
  for (int i = 0; i < HL_CLUSTER_NODES; i++) {
    redisContext *c;
    redisReply *r;
    int match = 0;
    if (i == m || (c = try_connect(&cl->node[i])) == NULL) continue;
    r = redisCommand(c, "INFO replication");
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
      char want[32];
      snprintf(want, sizeof(want), "master_port:%d\r", cl->node[m].port);
      match = strstr(r->str, "role:slave") != NULL && strstr(r->str, want);
    }
    if (r != NULL) freeReplyObject(r);
    redisFree(c);
    if (match) return i;
  }
  return -1;
}

redisContext *hl_cluster_connect(hl_cluster *cl, int i) {
  return hl_redis_connect(&cl->node[i]);
}

int hl_cluster_wait_owner(hl_cluster *cl, int slot, int i, int64_t timeout_ms) {
  int64_t deadline = hl_now_ms() + timeout_ms;
  for (;;) {
    int ok = 1;
    for (int j = 0; j < HL_CLUSTER_NODES && ok; j++)
      if (cl->node[j].pid > 0 &&
          owner_port_from(&cl->node[j], slot) != cl->node[i].port)
        ok = 0;
    if (ok) return 1;
    if (hl_now_ms() > deadline) return 0;
    hl_sleep_ms(20);
  }
}

int hl_cluster_key_on(hl_cluster *cl, int i, const char *key, size_t len) {
  redisContext *r = hl_cluster_connect(cl, i);
  int v = hl_redis_exists(r, key, len);
  redisFree(r);
  return v;
}

long long hl_cluster_errorstat(hl_cluster *cl, int i, const char *field) {
  redisContext *r = hl_cluster_connect(cl, i);
  long long v = hl_errorstat(r, field);
  redisFree(r);
  return v;
}

char *hl_cluster_node_id(hl_cluster *cl, int i) {
  redisContext *r = hl_cluster_connect(cl, i);
  redisReply *rep = hl_redis(r, "CLUSTER MYID");
  char *id;
  assert_int_equal(rep->type, REDIS_REPLY_STRING);
  id = strdup(rep->str);
  freeReplyObject(rep);
  redisFree(r);
  return id;
}
