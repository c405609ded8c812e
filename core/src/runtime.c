/* The runtime every front end shares (see runtime.h): options, the
 * renewal thread, the lock of shared handles, a lifetime, and fork
 * handling.
 *
 * Fork: every live runtime is in a registry. Around fork() the handlers
 * take all their mutexes (so the child never inherits one mid-update), and
 * in the child they drop the parent's renewal thread state; a client also
 * draws a new id and forgets its subscriber (client.c). Pooled sockets are
 * dropped lazily by the PID check in hilock__pool_get_until. */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "runtime.h"

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static hilock__runtime *registry;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void before_fork(void) {
  pthread_mutex_lock(&registry_mu);
  for (hilock__runtime *rt = registry; rt != NULL; rt = rt->reg_next) {
    pthread_mutex_lock(&rt->hmu);
    pthread_mutex_lock(&rt->mu);
    pthread_mutex_lock(&rt->wd.mu);
    if (rt->client != NULL)
      pthread_mutex_lock(hilock__client_fork_mutex(rt->client));
  }
}

static void unlock_all(hilock__runtime *rt) {
  if (rt->client != NULL)
    pthread_mutex_unlock(hilock__client_fork_mutex(rt->client));
  pthread_mutex_unlock(&rt->wd.mu);
  pthread_mutex_unlock(&rt->mu);
  pthread_mutex_unlock(&rt->hmu);
}

static void after_fork_parent(void) {
  for (hilock__runtime *rt = registry; rt != NULL; rt = rt->reg_next)
    unlock_all(rt);
  pthread_mutex_unlock(&registry_mu);
}

/* The watchdog's condition variables: wake times out on CLOCK_MONOTONIC. */
static int watchdog_conds_init(hilock__watchdog *w) {
  if (hilock__cond_init(&w->wake) != 0) return -1;
  if (pthread_cond_init(&w->idle, NULL) != 0) {
    pthread_cond_destroy(&w->wake);
    return -1;
  }
  return 0;
}

static void after_fork_child(void) {
  for (hilock__runtime *rt = registry; rt != NULL; rt = rt->reg_next) {
    hilock__watchdog_forget(rt);
    /* The parent's threads that waited on these (its watchdog, cancellers)
     * do not exist here, yet the condition variables still count them:
     * destroying them would wait forever. Start them afresh. */
    watchdog_conds_init(&rt->wd);
    if (rt->client != NULL) hilock__client_after_fork(rt->client);
    unlock_all(rt);
  }
  pthread_mutex_unlock(&registry_mu);
}

static void install_atfork(void) {
  /* The pid cache's handler first: child handlers run in the order they
   * were installed, so ours below already see the child's pid. */
  (void)hilock__pid();
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

int hilock__options_ok(const hilock_options *o) {
  return o->connect_timeout_ms >= 1 && o->command_timeout_ms >= 0 &&
         o->reconnect_ms >= 0 && o->max_idle >= 0 && o->max_connections >= 0 &&
         o->direct_waiters >= 0 &&
         (!o->detect_deadlocks || (o->deadlock_timeout_ms >= 1 &&
                                   o->deadlock_timeout_ms <= 86400000));
}

int hilock__runtime_prefix(hilock__runtime *rt, hilock__err *e) {
  const char *p = rt->opts.key_prefix;
  size_t n = p != NULL ? strlen(p) : 0;
  rt->opts.key_prefix = NULL; /* the caller's string */
  if (n == 0) return HILOCK_OK;
  if (n > HILOCK_KEY_PREFIX_MAX)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "key_prefix is %zu bytes; the limit is %d", n,
                           HILOCK_KEY_PREFIX_MAX);
  if (strpbrk(p, "{}") != NULL)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "key_prefix may not hold '{' or '}' (the lock "
                           "name after it is the keys' hash tag)");
  memcpy(rt->prefix, p, n + 1);
  rt->prefixlen = n;
  return HILOCK_OK;
}

int hilock__runtime_init(hilock__runtime *rt, hilock_client *client) {
  memset(rt, 0, sizeof(*rt));
  if (pthread_mutex_init(&rt->mu, NULL) != 0) return -1;
  if (pthread_mutex_init(&rt->hmu, NULL) != 0) goto no_hmu;
  if (pthread_mutex_init(&rt->wd.mu, NULL) != 0) goto no_wd;
  if (watchdog_conds_init(&rt->wd) != 0) goto no_conds;
  hilock_options_init(&rt->opts);
  memcpy(rt->prefix, "hilock:", 8);
  rt->prefixlen = 7;
  rt->refs = 1;
  rt->client = client;
  pthread_once(&atfork_once, install_atfork);
  pthread_mutex_lock(&registry_mu);
  rt->reg_prev = NULL;
  rt->reg_next = registry;
  if (registry) registry->reg_prev = rt;
  registry = rt;
  pthread_mutex_unlock(&registry_mu);
  return 0;
no_conds:
  pthread_mutex_destroy(&rt->wd.mu);
no_wd:
  pthread_mutex_destroy(&rt->hmu);
no_hmu:
  pthread_mutex_destroy(&rt->mu);
  return -1;
}

void hilock__runtime_destroy(hilock__runtime *rt) {
  hilock__watchdog_stop(rt);
  pthread_mutex_lock(&registry_mu);
  if (rt->reg_prev) rt->reg_prev->reg_next = rt->reg_next;
  else registry = rt->reg_next;
  if (rt->reg_next) rt->reg_next->reg_prev = rt->reg_prev;
  pthread_mutex_unlock(&registry_mu);
  pthread_cond_destroy(&rt->wd.idle);
  pthread_cond_destroy(&rt->wd.wake);
  pthread_mutex_destroy(&rt->wd.mu);
  pthread_mutex_destroy(&rt->hmu);
  pthread_mutex_destroy(&rt->mu);
}
