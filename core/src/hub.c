/* Shared waiting: every thread of a client that waits for a lock sleeps on
 * a condition variable, and one subscriber connection per client (the
 * hub) hears the releases.
 *
 * A release pushes a wake-up onto the lock's wake list and PUBLISHes the
 * list's name with how many wake-ups it holds (lib/wake.lua). The hub
 * subscribes to the name of every list some thread of this client waits
 * on, and for a message of n rings up to n of that list's waiters (oldest
 * first). A rung waiter pops one wake-up (LPOP): the one that gets it goes
 * on to try the lock, the others sleep again, so one release still wakes
 * one waiter among all processes. When this process is the only one that
 * listens on the server ("<n> solo"), nobody else competes for the
 * wake-up: the rung waiter tries the lock at once, a round trip sooner
 * (the wake-up it left in the list costs the next arrival one early
 * retry). A caller whose attempt takes the wake-up itself (WAKE_TAKES: the
 * plain lock's script pops the list before it tries) is rung straight
 * into that attempt (solo or not), saving the round trip as well. The
 * waiter subscribes before it looks at the list, so no release between its
 * failed attempt and its sleep is missed; every sleep stays bounded by the holder's TTL and the caller's
 * deadline, so a lost message (pub/sub delivers at most once) costs at most
 * that. After the hub reconnects it rings every waiter once.
 *
 * Who reads the socket: a waiting thread, while it sleeps (one at a time,
 * h->reading = 2), so the release meant for it wakes it directly; when it
 * leaves, a sleeping waiter takes over; with none, the hub's thread reads
 * (h->reading = 1), and it alone connects and reconnects. A channel whose
 * last waiter's wait ran out stays subscribed LINGER_MS, so a retried wait
 * costs no SUBSCRIBE; one whose last waiter was woken is given up at the
 * next turn at the socket after that waiter's attempt (within a second),
 * so that a waiter of another process finds itself the only listener when
 * this process releases.
 *
 * On a cluster PUBLISH reaches every node, so one connection to any master
 * serves all slots. A server that refuses SUBSCRIBE (an ACL without
 * channel rights) turns the hub off for the client: waits block in BLPOP
 * on the list itself, one connection each, as before. So does one that
 * refuses this client's user PUBLISH on a wake list (checked once, by the
 * first waiter on a list, logged at ERROR): the releases of that user
 * could not ring anyone, and the shared waiting would sleep out every
 * holder's TTL. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base.h"
#include "route.h"
#include "wait.h"

#define SLICE_MS 100        /* how often a waiter checks interrupt and close */
#define CONFIRM_MAX_MS 2000 /* a subscription not confirmed by then: sleep on */
/* A channel nobody waits on stays subscribed this long (the next wait on
 * the lock starts at once, without a SUBSCRIBE round trip), and at most
 * this many do. */
#define LINGER_MS 2000
#define LINGER_MAX 256

typedef struct hub_waiter {
  struct hub_waiter *next;
  pthread_cond_t cv;
  /* A waiter without a thread (async.c): told, under h->mu, whenever a
   * sleeping thread would be signalled. */
  void (*notify)(void *arg);
  void *notify_arg;
  int rings; /* 1: look at (pop from) the list; 2: rung solo, try; 3: rung */
  int retry; /* the hub reconnected: try the lock again */
  int sleeping; /* asleep on cv, ready to take a turn at the socket */
} hub_waiter;

typedef struct hub_chan {
  struct hub_chan *next;
  char *name;
  size_t len;
  int refs;   /* waiters registered */
  int state;  /* 0 to subscribe, 1 sent, 2 confirmed */
  int64_t confirmed_us; /* when the confirmation was read */
  int64_t message_us;   /* when the last message was read */
  int64_t idle_ms;      /* refs 0: since when (it lingers, then goes) */
  int channel;          /* HILOCK__WAKE_CHANNEL: Redisson's, no list */
  hub_waiter *waiters; /* oldest first */
} hub_chan;

/* ## The hub's thread ----------------------------------------------------- */

static void kick(hilock__hub *h) {
  uint64_t one = 1;
  if (h->efd >= 0) (void)!write(h->efd, &one, sizeof(one));
}

static void signal_waiter(hub_waiter *w) {
  pthread_cond_signal(&w->cv);
  if (w->notify != NULL) w->notify(w->notify_arg);
}

static void ring_chan(hub_chan *ch, long long n, int solo) {
  for (hub_waiter *w = ch->waiters; w != NULL && n > 0; w = w->next) {
    if (w->rings > 0) continue;
    w->rings = solo ? 2 : 3;
    signal_waiter(w);
    n--;
  }
}

/* Every waiter tries the lock again (after a reconnect, or when the hub
 * stops): a release while nobody listened, or a server that lost the
 * holder's key (a restart, a failover), costs no more than this. */
static void ring_all(hilock__hub *h) {
  for (hub_chan *ch = h->chans; ch != NULL; ch = ch->next)
    for (hub_waiter *w = ch->waiters; w != NULL; w = w->next) {
      w->retry = 1;
      signal_waiter(w);
    }
}

static hub_chan *find(hilock__hub *h, const char *name, size_t len) {
  for (hub_chan *ch = h->chans; ch != NULL; ch = ch->next)
    if (ch->len == len && memcmp(ch->name, name, len) == 0) return ch;
  return NULL;
}

static int is(const redisReply *r, const char *s) {
  size_t n = strlen(s);
  return r->type == REDIS_REPLY_STRING && r->len == n &&
         memcmp(r->str, s, n) == 0;
}

/* One push from the server (h->mu held). -1: the server refused. */
static int on_push(hilock__hub *h, redisReply *r) {
  hub_chan *ch;
  if (r->type == REDIS_REPLY_ERROR) return -1;
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
      r->element[1]->type != REDIS_REPLY_STRING)
    return 0;
  ch = find(h, r->element[1]->str, r->element[1]->len);
  if (ch == NULL) return 0;
  if (is(r->element[0], "message")) {
    /* "<n>" or "<n> solo" (this process is the only one listening). */
    long long n = 1;
    int solo = 0;
    if (r->element[2]->type == REDIS_REPLY_STRING) {
      char *end = NULL;
      n = strtoll(r->element[2]->str, &end, 10);
      solo = end != NULL && end == r->element[2]->str + r->element[2]->len - 5 &&
             memcmp(end, " solo", 5) == 0;
    }
    ch->message_us = hilock__now_us();
    /* Redisson's unlock messages (0, 1) carry no count: all try again. */
    if (ch->channel) n = LLONG_MAX, solo = 1;
    ring_chan(ch, n > 0 ? n : 0, solo);
  } else if (is(r->element[0], "subscribe") && ch->state == 1) {
    ch->state = 2;
    ch->confirmed_us = hilock__now_us();
    for (hub_waiter *w = ch->waiters; w != NULL; w = w->next)
      signal_waiter(w);
  }
  return 0;
}

/* Queue SUBSCRIBE for new channels and UNSUBSCRIBE for abandoned ones
 * that lingered long enough, which are forgotten (h->mu held). */
static int queue_changes(hilock__hub *h, hilock__net *n) {
  hub_chan **p = &h->chans;
  int64_t now = h->lingering > 0 ? hilock__now_ms() : 0;
  while (*p != NULL) {
    hub_chan *ch = *p;
    const char *argv[2];
    size_t lens[2];
    argv[1] = ch->name;
    lens[1] = ch->len;
    if (ch->refs == 0 && ch->state == 2 && h->lingering <= LINGER_MAX &&
        now - ch->idle_ms < LINGER_MS) {
      p = &ch->next;
      continue;
    }
    if (ch->refs == 0) {
      h->lingering--;
      if (ch->state != 0) {
        argv[0] = "UNSUBSCRIBE";
        lens[0] = 11;
        if (hilock__net_append(n, 2, argv, lens) != 0) return -1;
      }
      *p = ch->next;
      free(ch->name);
      free(ch);
      continue;
    }
    if (ch->state == 0) {
      argv[0] = "SUBSCRIBE";
      lens[0] = 9;
      if (hilock__net_append(n, 2, argv, lens) != 0) return -1;
      ch->state = 1;
    }
    p = &ch->next;
  }
  return 0;
}

/* A subscriber connection: to the master (following Sentinel), or any
 * master of a cluster. */
static hilock__net *hub_connect(hilock_client *c) {
  hilock__conn *k = NULL;
  hilock__err e;
  hilock__net *n;
  const char *argv[1] = {"PING"};
  size_t lens[1] = {4};
  hilock__req q = {.argc = 1, .argv = argv, .lens = lens};
  int sent;
  if (hilock__connect(c, &e, hilock__now_ms() + c->rt.opts.reconnect_ms, &k) !=
      HILOCK_OK)
    return NULL;
  /* A server going down may still accept a connection and then reset it:
   * the waiters are told to try again (a reconnect rings them all) only
   * once the new connection answered, or their attempts would meet the
   * same reset. Any answer (an ACL without PING too) is a server up. */
  sent = hilock__conn_batch(c, k, 0, &q, 1, NULL);
  if (q.reply != NULL) freeReplyObject(q.reply);
  if (sent != 0) {
    hilock__conn_free(k);
    return NULL;
  }
  n = k->ctx;
  k->ctx = NULL;
  hilock__conn_free(k);
  hilock__net_set_timeout(n, c->rt.opts.command_timeout_ms > 0
                                 ? c->rt.opts.command_timeout_ms
                                 : 5000);
  return n;
}

/* One turn at the subscriber socket, by the thread that set h->reading
 * (h->mu held on entry and on return; released while it polls): send the
 * (un)subscriptions due, wait up to ms for the server or a kick, and ring
 * the waiters of what came. -1: the connection broke and was dropped. */
static int turn(hilock__hub *h, int64_t ms) {
  struct pollfd p[2];
  int rc;
  if (queue_changes(h, h->net) != 0) goto broken;
  pthread_mutex_unlock(&h->mu);
  rc = h->net->olen > 0 ? hilock__net_flush(h->net) : 0;
  p[0].fd = h->net->fd;
  p[0].events = hilock__net_events(h->net);
  p[0].revents = 0;
  p[1].fd = h->efd;
  p[1].events = POLLIN;
  p[1].revents = 0;
  /* A reply already read (TLS reads with every write) is taken now. */
  if (rc == 0 && hilock__net_buffered(h->net)) ms = 0;
  if (rc == 0 && poll(p, 2, (int)ms) < 0 && errno != EINTR) rc = -1;
  if (rc == 0 && p[1].revents) {
    uint64_t v;
    (void)!read(h->efd, &v, sizeof(v));
  }
  if (rc == 0 && p[0].revents && hilock__net_handle(h->net, p[0].revents) != 0)
    rc = -1;
  pthread_mutex_lock(&h->mu);
  if (rc != 0) goto broken;
  for (;;) {
    void *r = NULL;
    if (hilock__net_reply(h->net, &r) != 0) goto broken;
    if (r == NULL) break;
    if (on_push(h, r) != 0) {
      /* SUBSCRIBE refused (no channel rights): waits block in BLPOP. */
      freeReplyObject(r);
      h->disabled = 1;
      ring_all(h);
      break;
    }
    freeReplyObject(r);
  }
  return 0;
broken:
  hilock__net_free(h->net);
  h->net = NULL;
  return -1;
}

/* Nobody reads the socket (h->mu held): wake someone who will, a waiter
 * asleep, or else the hub's thread. */
static void hand_over(hilock__hub *h) {
  if (h->sleepers > 0)
    for (hub_chan *ch = h->chans; ch != NULL; ch = ch->next)
      for (hub_waiter *w = ch->waiters; w != NULL; w = w->next)
        if (w->sleeping) {
          pthread_cond_signal(&w->cv);
          return;
        }
  pthread_cond_broadcast(&h->idle);
}

/* The hub's thread connects (and reconnects), and reads the socket while
 * no waiter does: a waiting thread reads it itself, so the wake-up meant
 * for it costs no hand-over between threads. */
static void *hub_main(void *arg) {
  hilock_client *c = arg;
  hilock__hub *h = &c->hub;
  int64_t pause = 20;
  pthread_mutex_lock(&h->mu);
  while (!h->stop && !h->disabled) {
    if (h->net == NULL && !h->reading) {
      hilock__net *n;
      int again = h->connected;
      pthread_mutex_unlock(&h->mu);
      n = hub_connect(c);
      if (n != NULL && again) {
        hilock__stat(&c->rt, HILOCK__ST_RECONNECTS);
        hilock__log(&c->rt, HILOCK_LOG_INFO, NULL, 0,
                    "shared waiting: subscriber connection replaced");
      }
      pthread_mutex_lock(&h->mu);
      if (n == NULL) {
        /* Waiters sleep out their own bounds meanwhile. */
        hilock__cond_wait_ms(&h->idle, &h->mu, pause);
        pause = pause * 2 > 1000 ? 1000 : pause * 2;
        continue;
      }
      pause = 20;
      h->net = n;
      for (hub_chan *ch = h->chans; ch != NULL; ch = ch->next) ch->state = 0;
      if (h->connected) ring_all(h); /* a reconnect */
      h->connected = 1;
    }
    if (h->reading || h->sleepers > 0 || h->async_readers > 0) {
      /* A waiter reads, or one asleep (or an async worker) will: stand
       * by. */
      if (!h->reading && h->sleepers > 0) hand_over(h);
      hilock__cond_wait_ms(&h->idle, &h->mu, 1000);
      continue;
    }
    h->reading = 1;
    turn(h, 1000);
    h->reading = 0;
    if (h->sleepers > 0) hand_over(h); /* one came while we read */
  }
  while (h->reading) hilock__cond_wait_ms(&h->idle, &h->mu, 100);
  hilock__net_free(h->net);
  h->net = NULL;
  ring_all(h);
  h->running = 0;
  pthread_cond_broadcast(&h->idle);
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

/* ## Waiting ------------------------------------------------------------------ */

int hilock__hub_init(hilock__hub *h) {
  memset(h, 0, sizeof(*h));
  h->efd = -1;
  h->pid = hilock__pid();
  if (pthread_mutex_init(&h->mu, NULL) != 0) return -1;
  if (hilock__cond_init(&h->idle) != 0) {
    pthread_mutex_destroy(&h->mu);
    return -1;
  }
  return 0;
}

/* h->mu held. */
static int hub_start(hilock_client *c) {
  hilock__hub *h = &c->hub;
  if (h->running) return 0;
  if (h->efd < 0) {
    h->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (h->efd < 0) return -1;
  }
  if (pthread_create(&h->thread, NULL, hub_main, c) != 0) return -1;
  h->running = 1;
  return 0;
}

void hilock__hub_stop(hilock_client *c) {
  hilock__hub *h = &c->hub;
  int join;
  pthread_mutex_lock(&h->mu);
  join = h->running && h->pid == hilock__pid();
  h->stop = 1;
  kick(h);
  pthread_cond_broadcast(&h->idle);
  pthread_mutex_unlock(&h->mu);
  if (join) pthread_join(h->thread, NULL);
}

void hilock__hub_destroy(hilock__hub *h) {
  while (h->chans != NULL) {
    hub_chan *ch = h->chans;
    h->chans = ch->next;
    free(ch->name);
    free(ch);
  }
  if (h->efd >= 0) close(h->efd);
  h->efd = -1;
  pthread_cond_destroy(&h->idle);
  pthread_mutex_destroy(&h->mu);
}

void hilock__hub_forget(hilock__hub *h) {
  /* After fork (h->mu held by the fork handler): the thread and the
   * waiters were the parent's. Drop the subscriber without a word. */
  hub_chan *ch = h->chans;
  h->chans = NULL;
  while (ch != NULL) {
    hub_chan *next = ch->next;
    free(ch->name);
    free(ch);
    ch = next;
  }
  hilock__net_free(h->net);
  h->net = NULL;
  h->running = 0;
  h->stop = 0;
  h->reading = 0;
  h->sleepers = 0;
  h->async_readers = 0;
  h->lingering = 0;
  __atomic_store_n(&h->settle, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&h->due, 0, __ATOMIC_RELAXED);
  if (h->efd >= 0) close(h->efd);
  h->efd = -1;
  hilock__cond_init(&h->idle);
  h->pid = getpid();
}

/* Pop one wake-up: 1 if there was one, 0 if not, < 0 on error. */
int hilock__hub_pop(hilock_client *c, hilock__err *e, const char *key,
                    size_t keylen) {
  const char *argv[2] = {"LPOP", key};
  size_t lens[2] = {4, keylen};
  redisReply *r = NULL;
  int rc;
  rc = hilock__command(c, e, 2, argv, lens, &r);
  if (rc != HILOCK_OK) return rc;
  rc = r->type == REDIS_REPLY_STRING;
  freeReplyObject(r);
  return rc;
}


static void leave(hilock__hub *h, hub_chan *ch, hub_waiter *w, int woken) {
  hub_waiter **p = &ch->waiters;
  while (*p != NULL && *p != w) p = &(*p)->next;
  if (*p == w) *p = w->next;
  /* A wake-up this waiter was given and did not use goes to the next. */
  if (w->rings > 0) ring_chan(ch, 1, 0);
  if (--ch->refs == 0) {
    /* It lingers: the next wait on the lock needs no SUBSCRIBE. Woken, it
     * is due once the acquire is over (hilock__hub_settle): this process
     * then holds the lock, and a waiter of another should find itself the
     * only listener. */
    ch->idle_ms = hilock__now_ms();
    if (woken) __atomic_store_n(&h->settle, 1, __ATOMIC_RELAXED);
    if (++h->lingering > LINGER_MAX) kick(h);
  }
  /* Another waiter takes over the socket; with none left the thread reads
   * it again within a second (only a waiter needs it read at once). */
  if (!h->reading && h->sleepers > 0) hand_over(h);
}

/* Until woken, or ms pass (h->mu held): take a turn at the socket if
 * nobody reads it, else sleep (ready to take the next turn). */
static void rest(hilock__hub *h, hub_waiter *w, int64_t ms) {
  if (!h->reading && h->net != NULL && !h->stop && !h->disabled) {
    h->reading = 2;
    turn(h, ms);
    h->reading = 0;
    if (h->net == NULL || h->disabled || h->stop)
      pthread_cond_broadcast(&h->idle); /* the thread reconnects, or ends */
    return;
  }
  if (h->reading == 1) kick(h); /* the thread reads: it hands over to us */
  w->sleeping = 1;
  h->sleepers++;
  hilock__cond_wait_ms(&w->cv, &h->mu, ms);
  h->sleepers--;
  w->sleeping = 0;
}

/* Whether the server refuses this client's user PUBLISH on the channel of
 * wake list key: a release by that user (lib/wake.lua, where a refused
 * PUBLISH is ignored so that the release itself stands) could not ring the
 * shared waiting, whose waiters would sleep until the holder's TTL ran
 * out. Asked once per client, by the first waiter on a wake list, with a
 * message of 0 (it rings nobody); refused, the hub is turned off, loudly,
 * and the waits block in BLPOP on the list, which the release fills (an
 * async wait looks again every NO_HUB_RETRY_MS of async.c instead). */
static int publish_refused(hilock_client *c, const char *key, size_t keylen) {
  hilock__hub *h = &c->hub;
  const char *argv[3] = {"PUBLISH", key, "0"};
  size_t lens[3] = {7, keylen, 1};
  redisReply *r = NULL;
  hilock__err e;
  int s = __atomic_load_n(&h->publish, __ATOMIC_ACQUIRE), rc;
  if (s != 0)
    return s == 2;
  if (!__atomic_compare_exchange_n(&h->publish, &s, 3, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE))
    return s == 2;
  hilock__clear_err(&e);
  rc = hilock__command(c, &e, 3, argv, lens, &r);
  if (r != NULL) freeReplyObject(r);
  if (rc != HILOCK_ENOPERM) {
    /* Allowed, or not known (a broken connection): the next waiter asks. */
    __atomic_store_n(&h->publish, rc == HILOCK_OK ? 1 : 0, __ATOMIC_RELEASE);
    return 0;
  }
  __atomic_store_n(&h->publish, 2, __ATOMIC_RELEASE);
  hilock__log(&c->rt, HILOCK_LOG_ERROR, key, keylen,
              "PUBLISH refused on the wake lists' channels (%s): releases "
              "cannot ring waiters; shared waiting off, waits block in "
              "BLPOP (grant +publish and the channels)",
              e.msg);
  pthread_mutex_lock(&h->mu);
  h->disabled = 1;
  ring_all(h);
  kick(h);
  pthread_cond_broadcast(&h->idle);
  pthread_mutex_unlock(&h->mu);
  return 1;
}

/* Register w on key's channel (subscribing if new; wake: the waiter's
 * HILOCK__WAKE_* flags). HILOCK_OK with h->mu held, HILOCK__HUB_OFF or an
 * error without it. */
static int enter(hilock_client *c, hilock__err *e, const char *key,
                 size_t keylen, int wake, hub_chan **chp, hub_waiter *w) {
  hilock__hub *h = &c->hub;
  hub_chan *ch;
  if (__atomic_load_n(&c->rt.closed, __ATOMIC_RELAXED))
    return hilock__set_err(e, HILOCK_ECLOSED, "client closed while waiting");
  if (!c->rt.opts.shared_waiting) return HILOCK__HUB_OFF;
  if (!(wake & HILOCK__WAKE_CHANNEL) && publish_refused(c, key, keylen))
    return HILOCK__HUB_OFF;
  pthread_mutex_lock(&h->mu);
  if (h->disabled || h->stop || (!h->running && hub_start(c) != 0)) {
    pthread_mutex_unlock(&h->mu);
    return HILOCK__HUB_OFF;
  }
  ch = find(h, key, keylen);
  if (ch == NULL) {
    ch = calloc(1, sizeof(*ch));
    if (ch != NULL) ch->name = malloc(keylen ? keylen : 1);
    if (ch == NULL || ch->name == NULL) {
      if (ch) free(ch);
      pthread_mutex_unlock(&h->mu);
      return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
    }
    memcpy(ch->name, key, keylen);
    ch->len = keylen;
    ch->channel = (wake & HILOCK__WAKE_CHANNEL) != 0;
    ch->next = h->chans;
    h->chans = ch;
    kick(h);
  } else if (ch->refs == 0) {
    h->lingering--; /* waited on again */
  }
  {
    hub_waiter **p = &ch->waiters;
    while (*p != NULL) p = &(*p)->next;
    *p = w;
  }
  ch->refs++;
  *chp = ch;
  return HILOCK_OK;
}

/* Whether a waiter that joined after an attempt that began at tried_us
 * must look at the list once subscribed (h->mu held): a subscription
 * confirmed before that attempt needs no look when no message came since
 * (a release after the attempt rings; its message is read after the
 * waiter joined). */
static int must_look(const hub_chan *ch, int64_t tried_us) {
  return ch->state != 2 || tried_us <= 0 || ch->confirmed_us >= tried_us ||
         ch->message_us >= tried_us;
}

int hilock__hub_wait(hilock_client *c, hilock__err *e, const char *key,
                     size_t keylen, int64_t bound_ms, int64_t tried_us,
                     int wake, int *woken) {
  hilock__hub *h = &c->hub;
  hub_chan *ch;
  hub_waiter w;
  int rc = HILOCK_OK, counted = 0;
  int64_t deadline = hilock__now_ms() + bound_ms, confirm;
  if (deadline > hilock__call_deadline()) deadline = hilock__call_deadline();
  confirm = hilock__now_ms() + CONFIRM_MAX_MS;

  *woken = 0;
  memset(&w, 0, sizeof(w));
  rc = enter(c, e, key, keylen, wake, &ch, &w);
  if (rc != HILOCK_OK) return rc;
  hilock__cond_init(&w.cv);
  /* Subscribed first, then look at the list: a release in between is in
   * the list. A subscription confirmed before the caller's attempt began
   * needs no look when no message came since: a release after that attempt
   * rings (its message is read after this thread joined the channel). */
  while (ch->state != 2 && !h->disabled && hilock__now_ms() < confirm &&
         hilock__now_ms() < deadline) {
    pthread_mutex_unlock(&h->mu);
    if (c->rt.opts.interrupt && c->rt.opts.interrupt(c->rt.opts.interrupt_arg)) {
      rc = hilock__set_err(e, HILOCK_EINTR, "wait interrupted");
      pthread_mutex_lock(&h->mu);
      goto out;
    }
    pthread_mutex_lock(&h->mu);
    if (ch->state != 2) rest(h, &w, 20);
  }
  if (h->disabled) {
    rc = HILOCK__HUB_OFF;
    goto out;
  }
  if (must_look(ch, tried_us)) w.rings = 1; /* the first look */
  hilock__waiting_add(c, 1, 1);
  counted = 1;
  for (;;) {
    int64_t left;
    if (w.retry) break; /* no wake-up: the caller tries again */
    if (w.rings >= 2 && (wake & HILOCK__WAKE_TAKES)) {
      /* Rung: the caller's attempt takes the wake-up itself (solo or not:
       * then no wake-up is left behind in the list). */
      w.rings = 0;
      *woken = 2;
      break;
    }
    if (w.rings == 2) {
      /* The only process listening: no other waits on this wake-up. */
      w.rings = 0;
      *woken = 1;
      break;
    }
    if (w.rings > 0) {
      int got;
      w.rings = 0;
      pthread_mutex_unlock(&h->mu);
      /* No wake list behind a Redisson channel: the look is a new
       * attempt. */
      got = ch->channel ? 1 : hilock__hub_pop(c, e, key, keylen);
      pthread_mutex_lock(&h->mu);
      if (got < 0) {
        rc = got;
        break;
      }
      if (got > 0) {
        *woken = 1;
        break;
      }
      if (h->disabled) {
        rc = HILOCK__HUB_OFF;
        break;
      }
      continue;
    }
    if (__atomic_load_n(&c->rt.closed, __ATOMIC_RELAXED)) {
      rc = hilock__set_err(e, HILOCK_ECLOSED, "client closed while waiting");
      break;
    }
    left = deadline - hilock__now_ms();
    if (left <= 0) break; /* no wake-up in time: no error */
    rest(h, &w, left < SLICE_MS ? left : SLICE_MS);
    if (w.rings == 0 && !w.retry && c->rt.opts.interrupt) {
      int stop;
      pthread_mutex_unlock(&h->mu);
      stop = c->rt.opts.interrupt(c->rt.opts.interrupt_arg);
      pthread_mutex_lock(&h->mu);
      if (stop) {
        rc = hilock__set_err(e, HILOCK_EINTR, "wait interrupted");
        break;
      }
    }
  }
  if (rc == HILOCK_OK && !*woken && h->disabled) rc = HILOCK__HUB_OFF;
out:
  if (counted) hilock__waiting_add(c, -1, 1);
  leave(h, ch, &w, *woken);
  pthread_mutex_unlock(&h->mu);
  pthread_cond_destroy(&w.cv);
  return rc;
}

int hilock__hub_waited(hilock_client *c, const char *key, size_t keylen) {
  hilock__hub *h = &c->hub;
  hub_chan *ch;
  int any;
  pthread_mutex_lock(&h->mu);
  ch = find(h, key, keylen);
  any = ch != NULL && ch->waiters != NULL;
  pthread_mutex_unlock(&h->mu);
  return any;
}

/* ## Waiting without a thread (async.c) ----------------------------------- */

struct hilock__hub_ticket {
  hub_chan *ch;
  hub_waiter w;
  int64_t tried_us;
  int looked; /* the first look was decided */
};

int hilock__hub_join(hilock_client *c, hilock__err *e, const char *key,
                     size_t keylen, int wake, int64_t tried_us,
                     void (*notify)(void *), void *arg,
                     hilock__hub_ticket **out) {
  hilock__hub_ticket *t = calloc(1, sizeof(*t));
  int rc;
  *out = NULL;
  if (t == NULL) return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
  t->tried_us = tried_us;
  t->w.notify = notify;
  t->w.notify_arg = arg;
  rc = enter(c, e, key, keylen, wake, &t->ch, &t->w);
  if (rc != HILOCK_OK) {
    free(t);
    return rc;
  }
  hilock__cond_init(&t->w.cv);
  hilock__waiting_add(c, 1, 1);
  pthread_mutex_unlock(&c->hub.mu);
  *out = t;
  return HILOCK_OK;
}

int hilock__hub_check(hilock_client *c, hilock__hub_ticket *t, int wake,
                      int *woken) {
  hilock__hub *h = &c->hub;
  hub_waiter *w = &t->w;
  int rc = HILOCK__HUB_SLEEP;
  *woken = 0;
  pthread_mutex_lock(&h->mu);
  if (!t->looked && t->ch->state == 2) {
    t->looked = 1;
    if (w->rings == 0 && must_look(t->ch, t->tried_us)) w->rings = 1;
  }
  if (h->disabled || h->stop) {
    rc = HILOCK__HUB_OFF;
  } else if (w->retry) {
    w->retry = 0;
    rc = HILOCK__HUB_RETRY;
  } else if (w->rings >= 2 && (wake & HILOCK__WAKE_TAKES)) {
    w->rings = 0;
    *woken = 2;
    rc = HILOCK__HUB_WOKEN;
  } else if (w->rings == 2) {
    w->rings = 0;
    *woken = 1;
    rc = HILOCK__HUB_WOKEN;
  } else if (w->rings > 0) {
    w->rings = 0;
    rc = HILOCK__HUB_LOOK;
  }
  pthread_mutex_unlock(&h->mu);
  return rc;
}

void hilock__hub_want(hilock_client *c, int want) {
  hilock__hub *h = &c->hub;
  pthread_mutex_lock(&h->mu);
  h->async_readers += want ? 1 : -1;
  if (h->async_readers == 0)
    pthread_cond_broadcast(&h->idle); /* the thread reads again */
  else if (h->reading == 1)
    kick(h); /* the thread's turn ends; it stands by */
  pthread_mutex_unlock(&h->mu);
}

int hilock__hub_turn(hilock_client *c, int64_t ms) {
  hilock__hub *h = &c->hub;
  int took = 0;
  pthread_mutex_lock(&h->mu);
  if (h->running && !h->reading && h->net != NULL && !h->stop &&
      !h->disabled && h->pid == hilock__pid()) {
    h->reading = 2;
    turn(h, ms);
    h->reading = 0;
    took = 1;
    if (h->net == NULL || h->disabled || h->stop)
      pthread_cond_broadcast(&h->idle); /* the thread reconnects, or ends */
    else if (h->sleepers > 0)
      hand_over(h);
  }
  pthread_mutex_unlock(&h->mu);
  return took;
}

void hilock__hub_kick(hilock_client *c) { kick(&c->hub); }

void hilock__hub_quit(hilock_client *c, hilock__hub_ticket *t, int woken) {
  hilock__hub *h = &c->hub;
  if (t == NULL) return;
  pthread_mutex_lock(&h->mu);
  hilock__waiting_add(c, -1, 1);
  leave(h, t->ch, &t->w, woken);
  pthread_mutex_unlock(&h->mu);
  pthread_cond_destroy(&t->w.cv);
  free(t);
}

void hilock__hub_settle(hilock_client *c, const char *key, size_t keylen) {
  hilock__hub *h = &c->hub;
  hub_chan *ch;
  if (!__atomic_load_n(&h->settle, __ATOMIC_RELAXED)) return;
  pthread_mutex_lock(&h->mu);
  __atomic_store_n(&h->settle, 0, __ATOMIC_RELAXED);
  ch = find(h, key, keylen);
  /* Due now: it goes with this client's next release (hilock__hub_flush:
   * before the release's own wake-up could come back to this process), or
   * at the next turn at the socket (a waiter's within 100 ms, the thread's
   * within a second). No write and no wake-up here: on a small machine
   * either costs the caller a CPU on its way from the wake-up to the grant
   * (measured: 20-40 us of the hand-over). */
  if (ch != NULL && ch->refs == 0) {
    ch->idle_ms = 0;
    __atomic_store_n(&h->due, 1, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&h->mu);
}

void hilock__hub_flush(hilock_client *c) {
  hilock__hub *h = &c->hub;
  if (!__atomic_load_n(&h->due, __ATOMIC_RELAXED)) return;
  pthread_mutex_lock(&h->mu);
  __atomic_store_n(&h->due, 0, __ATOMIC_RELAXED);
  /* Nobody reads the socket: write the due UNSUBSCRIBE here, without
   * waiting (its confirmation is read with the next turn at the socket);
   * else the reader sends it at once. */
  if (h->reading != 0) {
    kick(h);
  } else if (h->net != NULL && !h->stop && !h->disabled &&
             h->pid == hilock__pid() &&
             (queue_changes(h, h->net) != 0 ||
              hilock__net_handle(h->net, POLLOUT) != 0)) {
    hilock__net_free(h->net);
    h->net = NULL;
    pthread_cond_broadcast(&h->idle); /* the thread reconnects */
  }
  pthread_mutex_unlock(&h->mu);
}
