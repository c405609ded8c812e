/* Test helpers: a local Redis Cluster of 3 masters and 3 replicas on
 * loopback, started once per test program. */
#ifndef HILOCK_CLUSTER_UTIL_H
#define HILOCK_CLUSTER_UTIL_H

#include "test_util.h"

#define HL_CLUSTER_NODES 6

typedef struct hl_cluster {
  hl_server node[HL_CLUSTER_NODES];
  char url[256]; /* redis+cluster://127.0.0.1:<p0>,127.0.0.1:<p1> */
} hl_cluster;

/* Start 6 cluster-enabled servers (cluster-node-timeout node_timeout_ms,
 * cluster-require-full-coverage no),
 * join them with redis-cli --cluster create --cluster-replicas 1 and wait
 * for cluster_state:ok on every node and every replica's link. Returns 0,
 * or -1 after printing why. */
int hl_cluster_start(hl_cluster *cl, int node_timeout_ms);
/* hl_cluster_start with every node requiring password (requirepass, and
 * masterauth so that replicas sync); NULL: no password. cl->url carries no
 * credentials; the functions below and hl_cluster_connect authenticate. */
int hl_cluster_start_auth(hl_cluster *cl, int node_timeout_ms,
                          const char *password);
void hl_cluster_destroy(hl_cluster *cl);
/* For a program whose tests share one cluster: cmocka group fixtures that
 * start hl_group_cluster (cluster-node-timeout 1 s) and destroy it. */
extern hl_cluster hl_group_cluster;
int hl_cluster_group_setup(void **state);
int hl_cluster_group_teardown(void **state);
/* Poll until every running node reports cluster_state:ok and agrees on
 * the owner of every slot in slots[0..n); 1 if it got there in time. */
int hl_cluster_wait_ok(hl_cluster *cl, int64_t timeout_ms);
/* Index of the node that masters slot, asked from a running node; -1 if
 * unknown. */
int hl_cluster_owner(hl_cluster *cl, int slot);
/* Index of a running replica of the master at index m, or -1. */
int hl_cluster_replica_of(hl_cluster *cl, int m);
/* Poll until every running node names node i as the master of slot; 1 if
 * it got there within timeout_ms. */
int hl_cluster_wait_owner(hl_cluster *cl, int slot, int i, int64_t timeout_ms);
/* A raw connection to node i (fails the test if it cannot connect). */
redisContext *hl_cluster_connect(hl_cluster *cl, int i);
/* Whether node i holds key (asked on a connection of its own). */
int hl_cluster_key_on(hl_cluster *cl, int i, const char *key, size_t len);
/* hl_errorstat of node i. */
long long hl_cluster_errorstat(hl_cluster *cl, int i, const char *field);
/* Node i's cluster node id (malloc'd). */
char *hl_cluster_node_id(hl_cluster *cl, int i);

#endif /* HILOCK_CLUSTER_UTIL_H */
