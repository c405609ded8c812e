/* Lock operations for an event loop (hilock/async.h).
 *
 * An operation is a small state machine. An acquire makes one attempt (a
 * round trip, on one of the worker threads); when the lock is held it joins
 * the client's shared waiting (hub.c) without a thread: the hub tells the
 * engine when a release rang it, and a timer covers the holder's TTL and
 * the caller's deadline, exactly the bounds hilock__acquire_loop_var keeps.
 * Then it runs the next attempt, and so on until it grants, fails or runs
 * out of time. A finished operation goes to the done queue, and the event
 * fd (an eventfd) is readable while that queue is not empty.
 *
 * Locks: a.mu guards the engine. The hub calls notify() with its own lock
 * held, so the engine never calls into the hub while holding a.mu. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "hilock/async.h"
#include "base.h"
#include "family.h"
#include "fiber.h"
#include "route.h"

#define WORKERS_DEFAULT 2
/* Waiting without the hub (a server that refuses SUBSCRIBE): look again
 * this often at most, within the holder's TTL. */
#define NO_HUB_RETRY_MS 100
#define CALL_SLACK_MS 1000
/* A cancelled acquire whose attempt is on the wire waits this long more for
 * the reply (one round trip, normally): then it leaves the attempt to the
 * undo of an ambiguous grant (call.c), and a stalled server holds it no
 * longer than that. */
#define CANCEL_GRACE_MS 100
/* Room for an owner after the spec's wait key (hilock__acquire_spec
 * wkey_for): a client id, a caller number, a suffix. */
#define OWNER_KEY_EXTRA 128
/* Once none of the runner's operations waits, its workers give the shared
 * waiting socket back to the hub's thread after this long. */
#define UNWANT_MS 50
/* A step that leaves its operation asleep or queued (not a status). */
#define GOING_ON 1000
/* At most this many operations run on the loop's thread at once (each on
 * a fiber with a stack of its own, and a pooled connection while on the
 * wire); more go to the workers. Two keep the uncontended path on the
 * loop's thread without adding to the connections a crowd of waiters
 * uses (the workers' and the shared waiting's). */
#define FIBERS_MAX 2

enum { OP_ACQUIRE, OP_RELEASE, OP_OWNED, OP_LOCKED, OP_EXTEND, OP_RENEW };
enum {
  ST_RUN,     /* queued for a worker */
  ST_BUSY,    /* a worker runs it */
  ST_WAIT,    /* asleep: the hub or the timer moves it on */
  ST_DONE     /* in the done queue */
};

typedef struct op {
  struct op *next;     /* in the run queue, or the done queue */
  struct op *all_next; /* every live operation */
  struct op **all_prev;
  hilock_async *a;
  uint64_t id;
  void *data;
  int kind, state, status;
  long caller; /* the owner, as hilock__caller sees it (0: the thread) */
  int64_t ms;  /* extend: by how much, and whether it replaces the TTL */
  int replace;
  int value;   /* owned, locked: the answer */
  hilock__hold *h;
  hilock__acquire_spec spec;
  int64_t deadline_ms; /* the caller's (INT64_MAX: none) */
  int64_t wake_ms;     /* asleep: try again by then */
  int notified;        /* the hub moved while asleep */
  int cancelled;
  int read;            /* a read-write lock's read side */
  int queue;           /* the caller would wait (a queue family queues) */
  int begun, ended;    /* the spec's begin ran; its end (leave) ran */
  int waited;          /* it slept at least once (statistics) */
  int64_t wait_start_us; /* when its first refused attempt began */
  int no_hub;          /* timer only: 1 the client cannot wait on the hub,
                          2 the lock has no wake list (Redlock) */
  hilock__hub_ticket *t;
  int direct;          /* handed to a worker to wait direct (pttl, tried_us:
                          its refused attempt's) */
  int64_t pttl, tried_us;
  int stopfd;          /* its direct wait's stop (a cancel writes it) */
  int64_t cut_ms;      /* its attempt's waits end by then (a cancel sets
                          it; INT64_MAX: none) */
  char errmsg[256];    /* the failure's message, read where it happened */
  char *wkey;          /* the wake list the ticket is on */
  size_t wkeylen;
} op;

struct hilock_async {
  hilock_client *c;
  /* Why the driving thread's last start or cancel was refused (not the
   * hold's error: an operation in flight may be writing that). */
  hilock__err err;
  pid_t pid;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* work for the workers (run queue, timers, stop) */
  pthread_cond_t quiet; /* the free waits on it for the last operation */
  int efd;
  int signalled; /* efd was written and not read since (a.mu) */
  int taking;    /* the driving thread runs fibers inside a take: one that
                    ends there is taken at once, without efd */
  /* The loop's thread runs operations on fibers (fiber.c) when the runner
   * has a client: epfd (the loop's fd) holds efd, tfd (a timer for their
   * waits' deadlines) and the sockets they wait on. The driving thread
   * alone touches these. */
  int epfd, tfd;
  hilock__fiber *susp[FIBERS_MAX]; /* the fibers (each suspended while
                                      the driving thread is not in one) */
  int nsusp;
  int64_t armed_ms;     /* tfd's expiry (INT64_MAX: disarmed) */
  op *direct_op;        /* the operation with the runner's place for a
                           direct wait (one at a time) */
  int stop;
  int reader;  /* a worker reads the client's shared waiting socket */
  int wanting; /* the runner told the hub its workers read (hub_want) */
  int64_t unwant_ms; /* none of ours waits: give the socket back by then */
  int nthreads;
  int idle;    /* workers asleep on cv */
  pthread_t threads[HILOCK_ASYNC_WORKERS_MAX];
  op *run, *run_tail;
  op *done, *done_tail;
  op *all;
  size_t live; /* started, not yet taken */
  uint64_t next_id;
};

/* ## Queues (a.mu held) ---------------------------------------------------- */

/* Append o to the queue head..tail. */
static void enqueue(op **head, op **tail, op *o) {
  o->next = NULL;
  if (*tail != NULL)
    (*tail)->next = o;
  else
    *head = o;
  *tail = o;
}

/* Work for the workers (a.mu held): wake the ones asleep, and end the
 * turn of the one reading the shared waiting socket. */
static void wake(hilock_async *a) {
  pthread_cond_broadcast(&a->cv);
  if (a->reader) hilock__hub_kick(a->c);
}

/* The runner whose worker this thread is while it reads the shared
 * waiting socket: it runs the run queue as soon as its turn ends. */
static __thread hilock_async *tl_turn;

enum { POKE_NONE, POKE_WORKER, POKE_READER };

/* Queue o for a worker (a.mu held), and say whom to wake once a.mu is
 * released (poke): an asleep worker, else the one reading the shared
 * waiting socket. Nobody when the caller is that reader (a release rang
 * one of ours in its turn): it runs the attempt itself next, and on a
 * small machine another thread woken now only costs the hand-over a CPU.
 * Woken under a.mu, a worker would only block on it. */
static int queue_run(hilock_async *a, op *o) {
  o->state = ST_RUN;
  enqueue(&a->run, &a->run_tail, o);
  if (tl_turn == a) return POKE_NONE;
  if (a->idle > 0) return POKE_WORKER;
  return a->reader ? POKE_READER : POKE_NONE;
}

static void poke(hilock_async *a, int how) {
  if (how == POKE_WORKER)
    pthread_cond_signal(&a->cv);
  else if (how == POKE_READER)
    hilock__hub_kick(a->c);
}

/* queue_run and poke at once (a.mu held). */
static void run_push(hilock_async *a, op *o) { poke(a, queue_run(a, o)); }

/* The same, by a worker that looks at the run queue next itself. */
static void run_own(hilock_async *a, op *o) {
  o->state = ST_RUN;
  enqueue(&a->run, &a->run_tail, o);
}

static op *run_pop(hilock_async *a) {
  op *o = a->run;
  if (o == NULL) return NULL;
  a->run = o->next;
  if (a->run == NULL) a->run_tail = NULL;
  o->next = NULL;
  return o;
}

/* Move o to the done queue (a.mu held); the caller makes the event fd
 * readable (signal_loop). */
static void finish(hilock_async *a, op *o, int status) {
  o->state = ST_DONE;
  o->status = status;
  /* On the worker that ran it: a shared handle's message is this
   * thread's. */
  if (status < 0)
    snprintf(o->errmsg, sizeof(o->errmsg), "%s",
             hilock_hold_errmsg((hilock_hold *)o->h));
  if (o->all_prev != NULL) {
    *o->all_prev = o->all_next;
    if (o->all_next != NULL) o->all_next->all_prev = o->all_prev;
    o->all_prev = NULL;
  }
  enqueue(&a->done, &a->done_tail, o);
  if (a->all == NULL) pthread_cond_broadcast(&a->quiet);
}

/* Make the event fd readable (a.mu held), once until a take reads it. The
 * write and the flag change together under a.mu: a take never sees one
 * without the other (it would leave the fd readable with nothing to take,
 * and the loop would spin until the flag came). */
static void signal_loop(hilock_async *a) {
  uint64_t one = 1;
  if (a->signalled) return;
  a->signalled = 1;
  (void)!write(a->efd, &one, sizeof(one));
}

/* The hub moved an asleep operation on (called with the hub's lock). */
static void notify(void *arg) {
  op *o = arg;
  hilock_async *a = o->a;
  int how = POKE_NONE;
  pthread_mutex_lock(&a->mu);
  o->notified = 1;
  if (o->state == ST_WAIT) how = queue_run(a, o);
  pthread_mutex_unlock(&a->mu);
  poke(a, how);
}

/* ## One step of an operation (a worker, a.mu not held) -------------------- */

/* Wake the loop early (see step_acquire). */
static void prewake(void *arg) {
  hilock_async *a = arg;
  pthread_mutex_lock(&a->mu);
  signal_loop(a);
  pthread_mutex_unlock(&a->mu);
}

/* Leave the hub, if on it. */
static void unwait(op *o, int woken) {
  if (o->t != NULL) hilock__hub_quit(o->a->c, o->t, woken);
  o->t = NULL;
}

/* Go to sleep until the hub rings, or bound_ms pass (tried_us: when the
 * attempt that was refused began). Returns 0, or a status to finish with. */
static int sleep_on(op *o, int64_t bound_ms, int64_t tried_us) {
  hilock_async *a = o->a;
  hilock__err e;
  int rc = HILOCK__HUB_OFF;
  if (o->spec.wkey == NULL) {
    o->no_hub = 2; /* waits by its own delay (Redlock): the bound as is */
  } else if (!o->no_hub) {
    const char *k = *o->spec.wkey;
    size_t len = *o->spec.wkeylen;
    size_t cap = o->spec.wkey_for != NULL ? len + OWNER_KEY_EXTRA : len + 1;
    /* The list may change between attempts (a multi-key lock waits on
     * the name that blocked it): keep a copy for the ticket's lifetime.
     * A key of the owner's own is made here, on the operation's step. */
    char *copy = malloc(cap);
    if (copy == NULL) return HILOCK_ENOMEM;
    if (o->spec.wkey_for != NULL) {
      len = o->spec.wkey_for(o->spec.arg, copy, cap);
      if (len >= cap) len = cap - 1;
    } else {
      memcpy(copy, k, len);
    }
    free(o->wkey);
    o->wkey = copy;
    o->wkeylen = len;
    hilock__clear_err(&e);
    pthread_mutex_lock(&a->mu);
    o->notified = 0;
    pthread_mutex_unlock(&a->mu);
    rc = hilock__hub_join(a->c, &e, o->wkey, o->wkeylen, o->spec.wake,
                          tried_us, notify, o, &o->t);
    if (rc != HILOCK_OK && rc != HILOCK__HUB_OFF) {
      *hilock__hold_err(o->h) = e;
      return rc;
    }
  }
  if (rc == HILOCK__HUB_OFF && o->no_hub != 2) {
    o->no_hub = 1;
    if (bound_ms > NO_HUB_RETRY_MS) bound_ms = NO_HUB_RETRY_MS;
  }
  pthread_mutex_lock(&a->mu);
  o->wake_ms = hilock__now_ms() + bound_ms;
  o->state = ST_WAIT;
  /* Rung while joining, or cancelled meanwhile: go on at once. */
  if (o->notified || o->cancelled) run_push(a, o);
  wake(a); /* a new timer */
  pthread_mutex_unlock(&a->mu);
  return 0;
}

/* The client's direct wait (a BLPOP on the wake list: the server hands a
 * release's wake-up to that socket) on a worker, one of the runner's at a
 * time, so that the wake-up and the attempt after it need neither the
 * loop's thread nor its interpreter. On the loop's thread (fiber): hand
 * the operation to the workers (GOING_ON). On a worker: wait, stopped by a
 * cancel through o->stopfd; HILOCK_OK (*woken says whether a wake-up
 * came), HILOCK__HUB_OFF (no place after all), or a status to end with. */
static int direct_sleep(op *o, hilock__fiber *fiber, int64_t bound_ms,
                        int64_t tried_us, int64_t pttl, int *woken) {
  hilock_async *a = o->a;
  hilock__err e;
  int rc, cancelled;
  pthread_mutex_lock(&a->mu);
  if (a->direct_op != NULL && a->direct_op != o) {
    pthread_mutex_unlock(&a->mu);
    return HILOCK__HUB_OFF;
  }
  a->direct_op = o;
  if (fiber != NULL) {
    o->direct = 1;
    o->pttl = pttl;
    o->tried_us = tried_us;
    run_push(a, o);
    pthread_mutex_unlock(&a->mu);
    return GOING_ON;
  }
  if (o->stopfd < 0) o->stopfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (o->cancelled || o->stopfd < 0) {
    pthread_mutex_unlock(&a->mu);
    return o->cancelled ? HILOCK_BUSY : HILOCK__HUB_OFF;
  }
  pthread_mutex_unlock(&a->mu);
  hilock__clear_err(&e);
  hilock__tl.stop_fd = o->stopfd;
  rc = hilock__wait_direct(a->c, &e, *o->spec.wkey, *o->spec.wkeylen,
                           bound_ms, o->spec.wake, woken);
  hilock__tl.stop_fd = -1;
  pthread_mutex_lock(&a->mu);
  cancelled = o->cancelled;
  pthread_mutex_unlock(&a->mu);
  if (cancelled) return HILOCK_BUSY; /* acquire_over reports the cancel */
  if (rc != HILOCK_OK && rc != HILOCK__HUB_OFF)
    *hilock__hold_err(o->h) = e;
  return rc;
}

/* Release what the operation's acquire got (its side, for a read-write
 * lock). */
static int release_of(op *o) {
  return o->read ? hilock_rwlock_read_release((hilock_rwlock *)o->h)
                 : hilock__family_release(o->h);
}

/* The acquire is over with status: a grant of a cancelled operation is
 * given back first, and one that did not grant leaves its queue (the
 * fair and sequential locks). */
static int acquire_over(op *o, int status) {
  int cancelled;
  int64_t outer = hilock__call_lift(); /* never left half done */
  pthread_mutex_lock(&o->a->mu);
  cancelled = o->cancelled;
  pthread_mutex_unlock(&o->a->mu);
  if (cancelled && status == HILOCK_OK) (void)release_of(o);
  if (cancelled)
    status = hilock__set_err(hilock__hold_err(o->h), HILOCK_ECANCELED,
                             "acquire cancelled");
  if (!o->ended) {
    o->ended = 1;
    /* A queue family that drew its place, or one that queues in its
     * attempt (Redisson's fair lock): leave on the way out. */
    if (o->begun || (o->spec.begin == NULL && o->spec.leave != NULL))
      status = hilock__spec_end(&o->spec, o->queue, status);
    else if (o->spec.done != NULL)
      status = o->spec.done(o->spec.arg, status);
    hilock__stat_acquire(o->h->rt, status, o->ms, o->wait_start_us,
                         o->waited);
  }
  hilock__call_end(outer);
  return status;
}

/* Returns a status to finish with, or GOING_ON (asleep or queued). */
static int step_acquire(op *o) {
  hilock_async *a = o->a;
  int64_t pttl = -1, tried_us, left, bound, outer;
  int woken = 0, rc, cancelled, timer;
  hilock__fiber *fiber = hilock__fiber_self();

  hilock__tl.undone = 0; /* this step's attempt says, not another op's */
  pthread_mutex_lock(&a->mu);
  cancelled = o->cancelled;
  timer = o->t == NULL || hilock__now_ms() >= o->wake_ms;
  pthread_mutex_unlock(&a->mu);
  if (cancelled) {
    unwait(o, 0);
    return acquire_over(o, HILOCK_BUSY);
  }
  if (!o->begun && o->spec.begin != NULL) {
    /* A queue family: draw a waiter id (and queue, if it would wait). */
    o->begun = 1;
    rc = o->spec.begin(o->spec.arg, o->queue);
    if (rc != HILOCK_OK) {
      o->begun = 0; /* nothing to leave */
      return acquire_over(o, rc);
    }
  }
  if (o->t != NULL) {
    int got = hilock__hub_check(a->c, o->t, o->spec.wake, &woken);
    if (got == HILOCK__HUB_LOOK) {
      hilock__err e;
      hilock__clear_err(&e);
      /* No wake list behind a Redisson channel: the look is a new
       * attempt. */
      rc = o->spec.wake & HILOCK__WAKE_CHANNEL
               ? 1
               : hilock__hub_pop(a->c, &e, o->wkey, o->wkeylen);
      if (rc < 0) {
        unwait(o, 0);
        *hilock__hold_err(o->h) = e;
        return acquire_over(o, rc); /* leaves a queue, frees a context */
      }
      if (rc > 0) {
        woken = 1;
        got = HILOCK__HUB_WOKEN;
      }
    }
    if (got == HILOCK__HUB_SLEEP && !timer) {
      /* Nothing for it yet: back to sleep, the timer unchanged. */
      pthread_mutex_lock(&a->mu);
      o->state = ST_WAIT;
      if (o->notified || o->cancelled) run_own(a, o);
      pthread_mutex_unlock(&a->mu);
      return GOING_ON;
    }
    /* Woken, told to try again, the hub went, or the timer ran out. */
    unwait(o, woken);
    pthread_mutex_lock(&a->mu);
    o->notified = 0;
    pthread_mutex_unlock(&a->mu);
  }
  /* Rung by a release: the grant is likely one round trip away. Once the
   * attempt is on the wire, wake the loop (it finds nothing to take yet),
   * so that it is awake, not in a long sleep, when the attempt finishes:
   * a thread asleep for milliseconds takes several times longer to wake
   * (measured on a 2-CPU VM: 11-15 us after 0.1-1 ms asleep, 45-50 us
   * after 10 ms, 120 us after 50 ms). Not before the send: the loop's
   * thread, woken, may take this worker's CPU. */
  for (int skip = o->direct;; skip = 0) {
    if (skip) {
      /* Handed over by the loop's thread to wait here: its attempt was
       * refused there. */
      o->direct = 0;
      pttl = o->pttl;
      tried_us = o->tried_us;
    } else {
      if (woken && fiber == NULL) hilock__net_on_sent(prewake, a);
      tried_us = hilock__now_us();
      outer = hilock__call_begin(o->deadline_ms == INT64_MAX
                                     ? INT64_MAX
                                     : o->deadline_ms + CALL_SLACK_MS);
      hilock__tl.cut_ms = &o->cut_ms;
      rc = hilock__acquire_step(&o->spec, woken, &pttl);
      hilock__tl.cut_ms = NULL;
      hilock__net_on_sent(NULL, NULL);
      hilock__call_end(outer);
      if (woken && o->wkey != NULL)
        hilock__hub_settle(a->c, o->wkey, o->wkeylen);
      else if (woken)
        hilock__hub_settle(a->c, *o->spec.wkey, *o->spec.wkeylen);
      if (rc != HILOCK_BUSY) return acquire_over(o, rc);
    }
    left = o->deadline_ms == INT64_MAX ? INT64_MAX
                                       : o->deadline_ms - hilock__now_ms();
    if (left <= 0) return acquire_over(o, HILOCK_BUSY);
    /* Sleep until woken, the holder's expiry, or the deadline. A holder
     * with no expiry (-1) is looked at again at least every 30 s. */
    bound = pttl >= 0 ? pttl + 1 : 30000;
    if (left < bound) bound = left;
    if (!o->waited) o->wait_start_us = tried_us;
    o->waited = 1;
    if (o->spec.wkey != NULL && a->nthreads > 1 &&
        hilock__direct_free(a->c, *o->spec.wkey, *o->spec.wkeylen,
                            o->spec.wake)) {
      rc = direct_sleep(o, fiber, bound, tried_us, pttl, &woken);
      if (rc == GOING_ON) return GOING_ON;
      if (rc != HILOCK__HUB_OFF) {
        if (rc != HILOCK_OK) return acquire_over(o, rc);
        continue; /* woken, or the bound passed: the next attempt */
      }
    }
    pthread_mutex_lock(&a->mu);
    if (a->direct_op == o) a->direct_op = NULL; /* for the next one */
    pthread_mutex_unlock(&a->mu);
    rc = sleep_on(o, bound, tried_us);
    return rc != 0 ? acquire_over(o, rc) : GOING_ON;
  }
}

/* One round trip of a call that is not an acquire. */
static int run_call(op *o) {
  hilock_hold *hold = (hilock_hold *)o->h;
  int64_t outer;
  int rc = HILOCK_ENOTSUP;
  switch (o->kind) {
  case OP_RELEASE:
    outer = hilock__call_lift(); /* a release always finishes */
    rc = release_of(o);
    hilock__call_end(outer);
    break;
  case OP_OWNED:
    rc = hilock_hold_owned(hold, &o->value);
    break;
  case OP_LOCKED:
    rc = hilock_hold_locked(hold, &o->value);
    break;
  case OP_EXTEND:
    rc = o->h->fam->extend(o->h, o->ms, o->replace);
    break;
  case OP_RENEW:
    rc = o->h->fam->renew(o->h);
    break;
  }
  return rc;
}

/* A step of o ended with status (a.mu held; released and taken again
 * around the calls it makes). */
static void step_over(hilock_async *a, op *o, int status) {
  /* GOING_ON: back to waiting; the op is no longer this thread's.
   * Another worker may already run it (rung while it joined, or its timer
   * due at once), or have finished it and the loop freed it. */
  if (status == GOING_ON) return;
  if (o->kind == OP_ACQUIRE && o->cancelled && status != HILOCK_ECANCELED) {
    /* Cancelled as the attempt ended: checked under the lock that
     * hilock_async_cancel takes, so no cancel comes after this. */
    pthread_mutex_unlock(&a->mu);
    status = acquire_over(o, status);
    pthread_mutex_lock(&a->mu);
  }
  free(o->wkey);
  o->wkey = NULL;
  if (a->direct_op == o) a->direct_op = NULL;
  if (o->stopfd >= 0) {
    close(o->stopfd);
    o->stopfd = -1;
  }
  finish(a, o, status);
  /* A fiber that ends inside a take is taken by that take. */
  if (!(hilock__fiber_self() != NULL && a->taking)) signal_loop(a);
}

/* ## Operations on the loop's thread (fibers; the driving thread only) ---- */

/* A fiber's operation, from its first step to its end or its sleep on the
 * hub (whose later steps run on a worker). */
static void fiber_main(void *arg) {
  op *o = arg;
  hilock_async *a = o->a;
  int status;
  hilock__caller_set(o->caller);
  status = o->kind == OP_ACQUIRE ? step_acquire(o) : run_call(o);
  pthread_mutex_lock(&a->mu);
  step_over(a, o, status);
  pthread_mutex_unlock(&a->mu);
}

static void arm(hilock_async *a, int64_t at_ms) {
  struct itimerspec t;
  memset(&t, 0, sizeof(t));
  if (at_ms != INT64_MAX) {
    /* CLOCK_MONOTONIC, as hilock__now_ms; 0 would disarm. */
    int64_t us = at_ms * 1000;
    if (us <= 0) us = 1;
    t.it_value.tv_sec = (time_t)(us / 1000000);
    t.it_value.tv_nsec = (long)(us % 1000000) * 1000;
  }
  (void)timerfd_settime(a->tfd, TFD_TIMER_ABSTIME, &t, NULL);
  a->armed_ms = at_ms;
}

/* Run f until it waits again or ends (revents: what its wait got). */
static void resume(hilock_async *a, hilock__fiber *f, int revents) {
  int fd;
  short events;
  int64_t deadline;
  if (hilock__fiber_resume(f, revents)) {
    hilock__fiber_free(f);
    return;
  }
  hilock__fiber_waits(f, &fd, &events, &deadline);
  if (fd >= 0) {
    struct epoll_event ev;
    memset(&ev, 0, sizeof(ev));
    /* One-shot, and left in epfd after it fired: the next wait on the
     * same socket re-arms it with a MOD (an ADD costs more: epfd is in the
     * loop's own epoll set). A closed socket leaves epfd by itself. */
    ev.events = (uint32_t)events | EPOLLONESHOT;
    ev.data.ptr = f;
    if (epoll_ctl(a->epfd, EPOLL_CTL_MOD, fd, &ev) != 0 &&
        (errno != ENOENT || epoll_ctl(a->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)) {
      /* Not watchable: let it look at the socket itself at once. */
      deadline = 0;
    }
  }
  a->susp[a->nsusp++] = f; /* run_here keeps them at most FIBERS_MAX */
  if (deadline < a->armed_ms) arm(a, deadline);
}

/* Take f off the suspended list, then resume (its socket's registration,
 * if it did not fire, off epfd). */
static void wake_fiber(hilock_async *a, int i, int revents) {
  hilock__fiber *f = a->susp[i];
  int fd;
  short events;
  int64_t deadline;
  a->susp[i] = a->susp[--a->nsusp];
  hilock__fiber_waits(f, &fd, &events, &deadline);
  if (fd >= 0 && revents == 0) (void)epoll_ctl(a->epfd, EPOLL_CTL_DEL, fd, NULL);
  resume(a, f, revents);
}

/* Resume every fiber whose socket is ready or whose time is up. */
static void run_fibers(hilock_async *a) {
  struct epoll_event ev[FIBERS_MAX + 2]; /* the fibers, efd, tfd */
  int n;
  if (a->epfd < 0) return;
  n = epoll_wait(a->epfd, ev, FIBERS_MAX + 2, 0);
  for (int i = 0; i < n; i++) {
    void *p = ev[i].data.ptr;
    if (p == &a->tfd) {
      uint64_t v;
      (void)!read(a->tfd, &v, sizeof(v));
      a->armed_ms = INT64_MAX; /* it fired: disarmed */
      continue;
    }
    if (p == &a->efd) continue; /* hilock_async_take reads it */
    for (int j = 0; j < a->nsusp; j++)
      if (a->susp[j] == p) {
        wake_fiber(a, j, (int)(ev[i].events & 0xffff));
        break;
      }
  }
  for (int again = 1; again;) {
    int64_t now = hilock__now_ms(), next = INT64_MAX;
    again = 0;
    for (int j = 0; j < a->nsusp; j++) {
      int fd;
      short events;
      int64_t deadline;
      hilock__fiber_waits(a->susp[j], &fd, &events, &deadline);
      if (deadline <= now) {
        wake_fiber(a, j, 0);
        again = 1; /* the list changed */
        break;
      }
      if (deadline < next) next = deadline;
    }
    /* Armed early is enough: a timer that fires with nothing due
     * leaves it disarmed, and the next pass arms it again if a fiber
     * waits. Never disarmed here (a syscall per operation). */
    if (!again && next < a->armed_ms) arm(a, next);
  }
}

/* Run o on a fiber of the loop's thread from its first step, if the runner
 * can (a.mu not held): 1 if it did. */
static int run_here(hilock_async *a, op *o) {
  hilock__fiber *f;
  int most = FIBERS_MAX, pool = a->c->rt.opts.max_connections;
  /* A fiber's connection comes back only while the loop turns: two of
   * the pool's are kept for others, so that a blocking call made on the
   * loop's thread itself (with the same client) finds one. */
  if (pool > 0 && pool - 2 < most) most = pool - 2;
  if (a->epfd < 0 || a->nsusp >= most || !hilock__pool_room(a->c))
    return 0;
  f = hilock__fiber_new(fiber_main, o);
  if (f == NULL) return 0;
  resume(a, f, 0);
  return 1;
}

static void *worker(void *arg) {
  hilock_async *a = arg;
  pthread_mutex_lock(&a->mu);
  for (;;) {
    op *o = run_pop(a);
    if (o != NULL) {
      int status;
      /* More queued: the next asleep worker takes the next one. */
      if (a->run != NULL && a->idle > 0) pthread_cond_signal(&a->cv);
      o->state = ST_BUSY;
      pthread_mutex_unlock(&a->mu);
      hilock__caller_set(o->caller);
      status = o->kind == OP_ACQUIRE ? step_acquire(o) : run_call(o);
      pthread_mutex_lock(&a->mu);
      step_over(a, o, status);
      hilock__caller_set(0);
      continue;
    }
    if (a->stop) break;
    {
      /* Sleep until there is work or the nearest timer is due. */
      int64_t now = hilock__now_ms(), next = now + 1000;
      int on_hub = 0;
      for (op *w = a->all; w != NULL; w = w->all_next)
        if (w->state == ST_WAIT) {
          on_hub += w->t != NULL;
          if (w->wake_ms <= now) {
            run_own(a, w);
          } else if (w->wake_ms < next) {
            next = w->wake_ms;
          }
        }
      if (on_hub > 0) a->unwant_ms = 0;
      if (a->run != NULL) continue;
      if (on_hub > 0 && !a->reader) {
        /* Sleep at the shared waiting socket itself, as a waiting thread
         * does: the release that rings one of ours wakes this thread,
         * which runs the attempt at once (no hand-over between threads).
         * The hub's locks are never taken while holding a->mu. */
        int want = !a->wanting, took;
        a->wanting = 1;
        a->reader = 1;
        pthread_mutex_unlock(&a->mu);
        if (want) hilock__hub_want(a->c, 1);
        tl_turn = a;
        took = hilock__hub_turn(a->c, next - now < 100 ? next - now : 100);
        tl_turn = NULL;
        pthread_mutex_lock(&a->mu);
        a->reader = 0;
        /* Rung in the turn: this worker runs the attempt; an asleep one
         * takes the next (woken as it is popped) or, if others of ours
         * still wait, the socket. */
        if (a->run != NULL && a->run->next == NULL && on_hub > 1 &&
            a->idle > 0)
          pthread_cond_signal(&a->cv);
        /* Another reads (a waiting thread, or the hub's thread before it
         * stands by): look again shortly. */
        if (!took && a->run == NULL) {
          a->idle++;
          hilock__cond_wait_ms(&a->cv, &a->mu, 5);
          a->idle--;
        }
        continue;
      }
      if (on_hub == 0 && a->wanting && a->unwant_ms == 0) {
        /* The last waiter's attempt went out: the hub's thread reads the
         * socket again, but not at once. Woken now, it would take a CPU
         * just as the loop wakes for the grant, and the next wait would
         * want the socket back. */
        a->unwant_ms = now + UNWANT_MS;
      }
      if (on_hub == 0 && a->wanting && a->unwant_ms > now &&
          a->unwant_ms < next)
        next = a->unwant_ms;
      if (on_hub == 0 && a->wanting && a->unwant_ms <= now) {
        a->wanting = 0;
        a->unwant_ms = 0;
        pthread_mutex_unlock(&a->mu);
        hilock__hub_want(a->c, 0);
        pthread_mutex_lock(&a->mu);
        continue;
      }
      a->idle++;
      hilock__cond_wait_ms(&a->cv, &a->mu, next - now);
      a->idle--;
    }
  }
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

/* ## The public calls -------------------------------------------------------- */

/* The loop's fd and the fibers' timer: 0, or -1 (out of descriptors). */
static int fibers_setup(hilock_async *a) {
  struct epoll_event ev;
  a->epfd = epoll_create1(EPOLL_CLOEXEC);
  a->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (a->epfd < 0 || a->tfd < 0) goto fail;
  memset(&ev, 0, sizeof(ev));
  ev.events = EPOLLIN;
  ev.data.ptr = &a->efd;
  if (epoll_ctl(a->epfd, EPOLL_CTL_ADD, a->efd, &ev) != 0) goto fail;
  ev.data.ptr = &a->tfd;
  if (epoll_ctl(a->epfd, EPOLL_CTL_ADD, a->tfd, &ev) != 0) goto fail;
  return 0;
fail:
  if (a->epfd >= 0) close(a->epfd);
  if (a->tfd >= 0) close(a->tfd);
  a->epfd = a->tfd = -1;
  return -1;
}

static void fibers_close(hilock_async *a) {
  if (a->epfd >= 0) close(a->epfd);
  if (a->tfd >= 0) close(a->tfd);
}

int hilock_async_new(hilock_client *c, int workers, hilock_async **out) {
  hilock_async *a;
  hilock__err scratch, *e = &scratch;
  if (out == NULL) return HILOCK_EINVAL;
  *out = NULL;
  if (workers < 0 || workers > HILOCK_ASYNC_WORKERS_MAX) return HILOCK_EINVAL;
  if (c != NULL) {
    e = hilock__client_err(c);
    if (hilock__client_enter(c, e) != HILOCK_OK) return HILOCK_ECLOSED;
  }
  a = calloc(1, sizeof(*a));
  if (a == NULL) goto nomem;
  a->c = c;
  a->pid = hilock__pid();
  a->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (a->efd < 0) goto nomem_free;
  if (pthread_mutex_init(&a->mu, NULL) != 0) goto nomem_fd;
  if (hilock__cond_init(&a->cv) != 0) {
    pthread_mutex_destroy(&a->mu);
    goto nomem_fd;
  }
  if (hilock__cond_init(&a->quiet) != 0) {
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    goto nomem_fd;
  }
  a->epfd = a->tfd = -1;
  a->armed_ms = INT64_MAX;
  if (c != NULL && fibers_setup(a) != 0) {
    pthread_cond_destroy(&a->quiet);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    goto nomem_fd;
  }
  if (workers == 0) workers = WORKERS_DEFAULT;
  for (int i = 0; i < workers; i++) {
    if (pthread_create(&a->threads[i], NULL, worker, a) != 0) break;
    a->nthreads++;
  }
  if (a->nthreads == 0) {
    fibers_close(a);
    pthread_cond_destroy(&a->quiet);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    goto nomem_fd;
  }
  /* The client's reference (taken by enter) is kept until the free. */
  *out = a;
  return HILOCK_OK;
nomem_fd:
  close(a->efd);
nomem_free:
  free(a);
nomem:
  if (c != NULL) hilock__client_leave(c);
  return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
}

int hilock_async_fd(const hilock_async *a) {
  return a == NULL ? -1 : a->epfd >= 0 ? a->epfd : a->efd;
}

size_t hilock_async_take(hilock_async *a, hilock_async_done *out, size_t max) {
  size_t n = 0;
  uint64_t v;
  if (a == NULL || out == NULL) return 0;
  if (a->pid == hilock__pid()) {
    a->taking = 1;
    run_fibers(a);
    a->taking = 0;
  }
  pthread_mutex_lock(&a->mu);
  while (n < max && a->done != NULL) {
    op *o = a->done;
    a->done = o->next;
    if (a->done == NULL) a->done_tail = NULL;
    out[n].id = o->id;
    out[n].data = o->data;
    out[n].status = o->status;
    out[n].value = o->value;
    memcpy(out[n].errmsg, o->errmsg, sizeof(out[n].errmsg));
    n++;
    a->live--;
    free(o);
  }
  /* Readable again only while some remain. */
  if (a->signalled) {
    a->signalled = 0;
    (void)!read(a->efd, &v, sizeof(v));
  }
  if (a->done != NULL) signal_loop(a);
  pthread_mutex_unlock(&a->mu);
  return n;
}

#define fail(a, code, ...) hilock__set_err(&(a)->err, (code), __VA_ARGS__)

/* 1 if an operation of hold (of that caller, for a lock owned by its
 * caller) is in flight (a.mu held). */
static int busy(const hilock_async *a, const hilock__hold *h, long caller) {
  for (const op *o = a->all; o != NULL; o = o->all_next)
    if (o->h == h && o->caller == caller) return 1;
  return 0;
}

/* wait_ms: an acquire's wait, or an extension's ms (with replace); read:
 * a read-write lock's read side. */
static int start(hilock_async *a, hilock_hold *hold, int kind, int read,
                 uint64_t owner, int64_t wait_ms, int replace, void *data,
                 uint64_t *id) {
  hilock__hold *h = (hilock__hold *)hold;
  op *o;
  int how;
  if (id != NULL) *id = 0;
  if (a == NULL || h == NULL) return HILOCK_EINVAL;
  if (a->pid != hilock__pid())
    return fail(a, HILOCK_EFORKED,
                           "this async runner belongs to the parent "
                           "process");
  if (h->client != NULL && h->client != a->c)
    return fail(a, HILOCK_EINVAL,
                           "the lock belongs to another client");
  if (h->fam == NULL || h->fam->acquire_spec == NULL ||
      (h->fam->release == NULL && h->fam->notowned == NULL))
    return fail(a, HILOCK_ENOTSUP,
                           "this lock type has no async operations yet");
  if (h->fam->by_caller && (owner == 0 || owner > HILOCK_ASYNC_OWNER_MAX))
    return fail(a, HILOCK_EINVAL,
                           "this lock is owned by its caller: give an owner "
                           "in 1..HILOCK_ASYNC_OWNER_MAX (a task's number)");
  if ((kind == OP_EXTEND && h->fam->extend == NULL) ||
      (kind == OP_RENEW && h->fam->renew == NULL))
    return fail(a, HILOCK_ENOTSUP,
                           "this lock type has no %s",
                           kind == OP_EXTEND ? "extend" : "renew");
  if (kind == OP_ACQUIRE && wait_ms < 0 && wait_ms != HILOCK_WAIT_FOREVER)
    return fail(a, HILOCK_EINVAL,
                           "wait must be >= 0 ms or HILOCK_WAIT_FOREVER");
  if (__atomic_load_n(&h->rt->closed, __ATOMIC_RELAXED))
    return fail(a, HILOCK_ECLOSED,
                           "client is closed");
  o = calloc(1, sizeof(*o));
  if (o == NULL)
    return fail(a, HILOCK_ENOMEM,
                           "out of memory");
  o->a = a;
  o->stopfd = -1;
  o->cut_ms = INT64_MAX;
  o->data = data;
  o->kind = kind;
  o->h = h;
  o->caller = h->fam->by_caller ? -(long)owner : 0;
  o->read = read;
  o->ms = wait_ms;
  o->replace = replace;
  if (kind == OP_ACQUIRE) {
    o->queue = wait_ms != 0;
    /* + 1: the clock reads whole milliseconds, and a wait must never end
     * before the caller's timeout. */
    o->deadline_ms = wait_ms < 0 || wait_ms > HILOCK__WAIT_CAP_MS ? INT64_MAX
                     : wait_ms == 0 ? hilock__now_ms()
                                    : hilock__now_ms() + wait_ms + 1;
  }
  pthread_mutex_lock(&a->mu);
  if (busy(a, h, o->caller) || a->stop) {
    pthread_mutex_unlock(&a->mu);
    free(o);
    return fail(a, HILOCK_EINVAL, "an operation on this lock is in flight");
  }
  /* The spec last: a read-write lock's holds the context of this one
   * acquire (freed when it ends). */
  if (kind == OP_ACQUIRE) {
    if (!read)
      h->fam->acquire_spec(h, &o->spec);
    else if (hilock__rwlock_spec((hilock_rwlock *)h, 1, &o->spec) != 0)
      o->spec.arg = NULL;
    if (o->spec.arg == NULL) {
      pthread_mutex_unlock(&a->mu);
      free(o);
      return fail(a, HILOCK_ENOMEM, "out of memory");
    }
  }
  o->id = ++a->next_id;
  o->all_next = a->all;
  if (a->all != NULL) a->all->all_prev = &o->all_next;
  o->all_prev = &a->all;
  a->all = o;
  a->live++;
  if (id != NULL) *id = o->id;
  hilock__clear_err(&a->err);
  if (a->epfd >= 0) {
    /* On the loop's thread, at once: the request is on the wire when
     * this returns, and no thread is woken for it. */
    o->state = ST_BUSY;
    pthread_mutex_unlock(&a->mu);
    if (run_here(a, o)) return HILOCK_OK;
    pthread_mutex_lock(&a->mu);
  }
  how = queue_run(a, o);
  pthread_mutex_unlock(&a->mu);
  poke(a, how);
  return HILOCK_OK;
}

int hilock_async_acquire(hilock_async *a, hilock_hold *hold, uint64_t owner,
                         int64_t wait_ms, void *data, uint64_t *id) {
  return start(a, hold, OP_ACQUIRE, 0, owner, wait_ms, 0, data, id);
}

int hilock_async_release(hilock_async *a, hilock_hold *hold, uint64_t owner,
                         void *data, uint64_t *id) {
  return start(a, hold, OP_RELEASE, 0, owner, 0, 0, data, id);
}

int hilock_async_read_acquire(hilock_async *a, hilock_rwlock *rw,
                              uint64_t owner, int64_t wait_ms, void *data,
                              uint64_t *id) {
  return start(a, HILOCK_HOLD(rw), OP_ACQUIRE, 1, owner, wait_ms, 0, data, id);
}

int hilock_async_read_release(hilock_async *a, hilock_rwlock *rw,
                              uint64_t owner, void *data, uint64_t *id) {
  return start(a, HILOCK_HOLD(rw), OP_RELEASE, 1, owner, 0, 0, data, id);
}

int hilock_async_owned(hilock_async *a, hilock_hold *hold, uint64_t owner,
                       void *data, uint64_t *id) {
  return start(a, hold, OP_OWNED, 0, owner, 0, 0, data, id);
}

int hilock_async_locked(hilock_async *a, hilock_hold *hold, uint64_t owner,
                        void *data, uint64_t *id) {
  return start(a, hold, OP_LOCKED, 0, owner, 0, 0, data, id);
}

int hilock_async_extend(hilock_async *a, hilock_hold *hold, uint64_t owner,
                        int64_t ms, int replace, void *data, uint64_t *id) {
  /* ms goes through the family's own checks when the call runs. */
  return start(a, hold, OP_EXTEND, 0, owner, ms, replace, data, id);
}

int hilock_async_renew(hilock_async *a, hilock_hold *hold, uint64_t owner,
                       void *data, uint64_t *id) {
  return start(a, hold, OP_RENEW, 0, owner, 0, 0, data, id);
}

const char *hilock_async_errmsg(const hilock_async *a) {
  return a == NULL ? "" : a->err.msg;
}

int hilock_async_errcode(const hilock_async *a) {
  return a == NULL ? HILOCK_EINVAL : a->err.code;
}

/* A cancelled acquire's attempt on the wire waits CANCEL_GRACE_MS more at
 * most (a.mu held; the driving thread): a worker looks at o->cut_ms every
 * 100 ms, and o's fiber, if suspended on this thread, is woken by then. */
static void cut(hilock_async *a, op *o) {
  int64_t at = hilock__now_ms() + CANCEL_GRACE_MS;
  if (o->kind != OP_ACQUIRE ||
      at >= __atomic_load_n(&o->cut_ms, __ATOMIC_ACQUIRE))
    return;
  __atomic_store_n(&o->cut_ms, at, __ATOMIC_RELEASE);
  if (a->pid != hilock__pid()) return; /* the parent's fibers */
  for (int i = 0; i < a->nsusp; i++)
    if (hilock__fiber_arg(a->susp[i]) == o) {
      hilock__fiber_cut(a->susp[i], at);
      if (at < a->armed_ms) arm(a, at);
    }
}

int hilock_async_cancel(hilock_async *a, uint64_t id) {
  int rc, how = POKE_NONE;
  if (a == NULL) return HILOCK_EINVAL;
  rc = fail(a, HILOCK_EINVAL, "no acquire of id %llu is in flight",
            (unsigned long long)id);
  pthread_mutex_lock(&a->mu);
  for (op *o = a->all; o != NULL; o = o->all_next)
    if (o->id == id && o->kind == OP_ACQUIRE) {
      o->cancelled = 1;
      /* Asleep: a worker withdraws it now; in a direct wait: the stop fd
       * ends it; queued or on the wire: it sees the flag when its step
       * ends, and an attempt waits no longer than the grace for its
       * reply. */
      cut(a, o);
      if (o->state == ST_WAIT) how = queue_run(a, o);
      if (o->stopfd >= 0) {
        uint64_t one = 1;
        (void)!write(o->stopfd, &one, sizeof(one));
      }
      hilock__clear_err(&a->err);
      rc = HILOCK_OK;
      break;
    }
  pthread_mutex_unlock(&a->mu);
  poke(a, how);
  return rc;
}

size_t hilock_async_pending(const hilock_async *a) {
  size_t n;
  if (a == NULL) return 0;
  pthread_mutex_lock((pthread_mutex_t *)&a->mu);
  n = a->live;
  pthread_mutex_unlock((pthread_mutex_t *)&a->mu);
  return n;
}

void hilock_async_free(hilock_async *a) {
  hilock_async_done d[32];
  if (a == NULL) return;
  if (a->pid != hilock__pid()) {
    /* A forked child: the workers were the parent's. Nothing of the
     * parent's is touched; the memory is left. */
    return;
  }
  /* Cancel every acquire, let the workers drain the run queue (a waiting
   * acquire is withdrawn, a release finishes), then stop them. */
  pthread_mutex_lock(&a->mu);
  for (op *o = a->all; o != NULL; o = o->all_next) {
    if (o->kind == OP_ACQUIRE) {
      o->cancelled = 1;
      cut(a, o);
    }
    if (o->stopfd >= 0) {
      uint64_t one = 1;
      (void)!write(o->stopfd, &one, sizeof(one));
    }
    if (o->state == ST_WAIT) run_push(a, o);
  }
  /* Operations on the loop's thread: this thread runs them to their end
   * (a direct wait stops; an attempt on the wire finishes). */
  while (a->nsusp > 0) {
    struct pollfd p = {a->epfd, POLLIN, 0};
    pthread_mutex_unlock(&a->mu);
    (void)poll(&p, 1, 10);
    run_fibers(a);
    pthread_mutex_lock(&a->mu);
  }
  while (a->all != NULL) hilock__cond_wait_ms(&a->quiet, &a->mu, 10);
  a->stop = 1;
  wake(a);
  pthread_mutex_unlock(&a->mu);
  for (int i = 0; i < a->nthreads; i++) pthread_join(a->threads[i], NULL);
  if (a->wanting) hilock__hub_want(a->c, 0);
  while (hilock_async_take(a, d, 32) > 0) {
  }
  pthread_cond_destroy(&a->quiet);
  pthread_cond_destroy(&a->cv);
  pthread_mutex_destroy(&a->mu);
  fibers_close(a);
  close(a->efd);
  if (a->c != NULL) hilock__client_leave(a->c);
  free(a);
}
