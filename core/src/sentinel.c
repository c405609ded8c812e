/* Sentinel deployments: the master's address comes from the sentinels
 * (SENTINEL get-master-addr-by-name, each sentinel in turn), and a fresh
 * connection to it is checked with ROLE before use, so a demoted master is
 * never taken for the current one. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "route.h"

/* Parse a decimal port; -1 if bad. */
static int port_of(const char *s, size_t n) {
  long v = 0;
  if (n == 0 || n > 5) return -1;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v >= 1 && v <= 65535 ? (int)v : -1;
}

/* Ask one sentinel. Returns HILOCK_OK with *host (malloc'd) and *port, or
 * an error with the reason in e. */
static int ask(hilock_client *c, hilock__err *e, const hilock__seed *a,
               char **host, int *port) {
  /* Sentinels answer at once; a silent one must not eat the budget. */
  int64_t ms = hilock__io_ms(c->rt.opts.connect_timeout_ms);
  hilock__net *ctx;
  redisReply *r;
  hilock__addr at;
  hilock__hello hello;
  int rc;

  at.path = NULL;
  at.host = a->host;
  at.port = a->port;
  rc = hilock__net_open(e, &at, c->tls, ms, &ctx);
  if (rc != HILOCK_OK) {
    hilock__err was = *e;
    return hilock__set_err(e, rc, "sentinel: %s", was.msg);
  }
  hilock__net_set_timeout(ctx, ms);
  hilock__hello_init(&hello, c->url.sentinel_user, c->url.sentinel_password,
                     0);
  rc = hilock__hello_run(e, ctx, &hello);
  if (rc != HILOCK_OK) {
    hilock__err was = *e;
    hilock__net_free(ctx);
    return hilock__set_err(e, rc, "sentinel %s:%d: %s", a->host, a->port,
                           was.msg);
  }
  {
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name",
                           c->url.master_name};
    size_t lens[3] = {8, 23, strlen(c->url.master_name)};
    r = hilock__net_command(ctx, 3, argv, lens);
  }
  if (r == NULL) {
    rc = hilock__set_err(e, hilock__net_status(ctx), "sentinel %s:%d: %s",
                         a->host, a->port, ctx->errstr);
  } else if (r->type == REDIS_REPLY_ERROR) {
    rc = hilock__reply_error(e, r->str, r->len);
    if (rc == HILOCK__NOSCRIPT || rc == HILOCK_EREDIS) rc = HILOCK_EIO;
    hilock__set_err(e, rc, "sentinel %s:%d: %.*s", a->host, a->port,
                    (int)(r->len > 160 ? 160 : r->len), r->str);
  } else if (r->type == REDIS_REPLY_NIL ||
             (r->type == REDIS_REPLY_ARRAY && r->elements == 0)) {
    rc = hilock__set_err(e, HILOCK_EIO,
                         "sentinel %s:%d does not know master '%s'", a->host,
                         a->port, c->url.master_name);
  } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
             r->element[0]->type != REDIS_REPLY_STRING ||
             r->element[1]->type != REDIS_REPLY_STRING ||
             (*port = port_of(r->element[1]->str, r->element[1]->len)) < 0) {
    rc = hilock__set_err(e, HILOCK_EPROTO,
                         "sentinel %s:%d: unexpected reply to SENTINEL "
                         "get-master-addr-by-name",
                         a->host, a->port);
  } else {
    *host = malloc(r->element[0]->len + 1);
    if (*host == NULL) {
      rc = hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
    } else {
      memcpy(*host, r->element[0]->str, r->element[0]->len);
      (*host)[r->element[0]->len] = '\0';
    }
  }
  if (r != NULL) freeReplyObject(r);
  hilock__net_free(ctx);
  return rc;
}

int hilock__sentinel_master(hilock_client *c, hilock__err *e, char **host,
                            int *port) {
  int n = c->url.nsentinels, same = 0, rc = HILOCK_EIO, code = 0;
  int first = __atomic_load_n(&c->sentinel_next, __ATOMIC_RELAXED);
  char last[200] = "no sentinel in the URL";

  *host = NULL;
  for (int i = 0; i < n; i++) {
    int idx = (first + i) % n;
    hilock__err one;
    hilock__clear_err(&one);
    rc = ask(c, &one, &c->url.sentinels[idx], host, port);
    if (rc == HILOCK_OK) {
      /* Start with the sentinel that answered next time. */
      __atomic_store_n(&c->sentinel_next, idx, __ATOMIC_RELAXED);
      return HILOCK_OK;
    }
    if (rc == HILOCK_ENOMEM) return hilock__set_err(e, rc, "%s", one.msg);
    if (i == 0) code = rc;
    if (rc == code) same++;
    snprintf(last, sizeof(last), "%.190s", one.msg);
  }
  /* Sentinels that cannot be reached or do not know the master yet are
   * retried by hilock__connect (EIO); wrong credentials or a certificate
   * refused everywhere are not. */
  if (same != n || (code != HILOCK_EAUTH && code != HILOCK_ECERT &&
                    code != HILOCK_ETLS))
    code = HILOCK_EIO;
  return hilock__set_err(e, code,
                         "no sentinel (of %d) gave the address of master "
                         "'%s'; last: %s",
                         n, c->url.master_name, last);
}

int hilock__sentinel_check_role(hilock_client *c, hilock__err *e,
                                hilock__net *ctx, const char *host,
                                int port) {
  const char *argv[1] = {"ROLE"};
  size_t lens[1] = {4};
  redisReply *r = hilock__net_command(ctx, 1, argv, lens);
  int rc = HILOCK_OK;
  if (r == NULL)
    return hilock__set_err(e, hilock__net_status(ctx), "ROLE on %s:%d: %s",
                           host, port, ctx->errstr);
  if (r->type == REDIS_REPLY_ERROR) {
    rc = hilock__reply_error(e, r->str, r->len);
    if (rc == HILOCK__NOSCRIPT) rc = HILOCK_EREDIS;
    e->code = rc;
  } else if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
             r->element[0]->type != REDIS_REPLY_STRING) {
    rc = hilock__set_err(e, HILOCK_EPROTO, "unexpected reply to ROLE");
  } else if (r->element[0]->len != 6 ||
             memcmp(r->element[0]->str, "master", 6) != 0) {
    /* A failover in progress: the sentinels still name a demoted master.
     * EIO, so hilock__connect asks again within its budget. */
    rc = hilock__set_err(e, HILOCK_EIO,
                         "%s:%d, named master '%s' by the sentinels, answers "
                         "ROLE as '%.*s'; asking the sentinels again",
                         host, port, c->url.master_name,
                         (int)r->element[0]->len, r->element[0]->str);
  }
  freeReplyObject(r);
  return rc;
}
