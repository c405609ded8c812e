/* delayproxy: a TCP relay that holds every byte for a fixed time, so that a
 * benchmark on loopback sees a network's round-trip time.
 *
 *   delayproxy DELAY_US [LISTEN_PORT=]HOST:PORT ...
 *
 * Each upstream HOST:PORT (IPv4, numeric) gets a listening port on
 * 127.0.0.1 (LISTEN_PORT, or any free port if it is 0 or left out). Once all
 * of them listen, their port numbers are printed on one line of stdout, in
 * the order given. Each connection accepted opens one to its upstream, and
 * what is read on either side is written to the other DELAY_US microseconds
 * later, in order; an end of file is passed on after the same delay. A
 * request and its reply therefore take 2 * DELAY_US longer. The connect
 * itself is not delayed.
 *
 * One thread and epoll. The delay is the same for every chunk, so the chunks
 * of all connections come due in the order they were read, and one FIFO is
 * the whole timer queue: epoll_pwait2 sleeps until its head is due (a
 * nanosecond timeout, with the timer slack set to 1 ns), which costs no
 * syscall beyond the wait itself. At most MAX_QUEUED bytes wait in each
 * direction of a connection; above that the proxy stops reading from that
 * side until the queue has drained to half. SIGTERM or SIGINT ends it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_QUEUED (1u << 20) /* bytes (with chunk headers) per direction */
#define MAX_CONNS 256
#define READ_MAX 65536

enum kind { K_LISTENER, K_DIR, K_SIGNAL };

struct dir;
struct chunk {
  struct chunk *next;  /* next in the same direction */
  struct chunk *tnext; /* next on the timeline */
  struct dir *d;
  uint64_t due_ns;
  size_t len, off; /* len 0: end of file */
  bool due;        /* off the timeline: may be written */
  char data[];
};

struct conn;
struct dir { /* what is read from one socket and written to the other */
  enum kind kind; /* K_DIR: the epoll tag of the socket this direction reads */
  struct conn *c;
  int from, to;
  struct chunk *head, *tail;
  size_t queued;
  bool reading; /* wants EPOLLIN on from */
  bool blocked; /* a due chunk waits for EPOLLOUT on to */
  bool eof_out; /* end of file passed on */
};

struct conn {
  struct dir d[2];    /* d[0]: client to upstream, d[1]: upstream to client */
  uint32_t events[2]; /* registered for d[i].from; 0: not registered */
  int refs;           /* chunks still on the timeline */
  bool dead;
  struct conn *next_dead;
};

struct listener {
  enum kind kind;
  int fd;
  struct sockaddr_in up;
};

static int ep;
static uint64_t delay_ns;
static struct chunk *tl_head, *tl_tail; /* the timeline, earliest first */
static struct conn *graveyard;          /* closed, freed once refs is 0 */
static int nconns;
static enum kind signal_tag = K_SIGNAL;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Register socket i of c for what its two directions want now. A socket
 * that wants nothing leaves epoll, so that a hang-up cannot wake us in a
 * loop. */
static void watch(struct conn *c, int i) {
  uint32_t ev = (c->d[i].reading ? EPOLLIN : 0) | (c->d[1 - i].blocked ? EPOLLOUT : 0);
  if (ev == c->events[i]) return;
  struct epoll_event e = {.events = ev, .data.ptr = &c->d[i]};
  int op = ev == 0 ? EPOLL_CTL_DEL : c->events[i] == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  epoll_ctl(ep, op, c->d[i].from, &e);
  c->events[i] = ev;
}

static void kill_conn(struct conn *c) {
  if (c->dead) return;
  c->dead = true;
  for (int i = 0; i < 2; i++) {
    close(c->d[i].from);
    /* Chunks already due are off the timeline; the rest are freed by the
     * timer as they come due. */
    struct chunk *k = c->d[i].head;
    while (k && k->due) {
      struct chunk *next = k->next;
      free(k);
      k = next;
    }
    c->d[i].head = c->d[i].tail = NULL;
  }
  c->next_dead = graveyard;
  graveyard = c;
  nconns--;
}

/* Write the due chunks at the head of d, in order, until the socket is full. */
static void flush(struct dir *d) {
  struct conn *c = d->c;
  int i = (int)(d - c->d);
  bool blocked = false;
  while (d->head && d->head->due) {
    struct chunk *k = d->head;
    if (k->len == 0) {
      shutdown(d->to, SHUT_WR);
      d->eof_out = true;
    } else {
      ssize_t n = send(d->to, k->data + k->off, k->len - k->off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        blocked = true;
        break;
      }
      if (n < 0) {
        kill_conn(c);
        return;
      }
      k->off += (size_t)n;
      if (k->off < k->len) {
        blocked = true;
        break;
      }
    }
    d->head = k->next;
    if (!d->head) d->tail = NULL;
    d->queued -= sizeof *k + k->len;
    free(k);
  }
  d->blocked = blocked;
  if (d->eof_out && c->d[1 - i].eof_out) {
    kill_conn(c);
    return;
  }
  if (!d->reading && !d->eof_out && d->queued <= MAX_QUEUED / 2 &&
      !(d->tail && d->tail->len == 0))
    d->reading = true; /* resume after backpressure, not after end of file */
  watch(c, i);
  watch(c, 1 - i);
}

static void enqueue(struct dir *d, const char *buf, size_t len) {
  struct chunk *k = malloc(sizeof *k + len);
  if (!k) {
    kill_conn(d->c);
    return;
  }
  memcpy(k->data, buf, len);
  k->next = k->tnext = NULL;
  k->d = d;
  k->due_ns = now_ns() + delay_ns;
  k->len = len;
  k->off = 0;
  k->due = false;
  if (d->tail) d->tail->next = k;
  else d->head = k;
  d->tail = k;
  d->queued += sizeof *k + len;
  d->c->refs++;
  if (tl_tail) tl_tail->tnext = k;
  else tl_head = k;
  tl_tail = k;
}

static void pull(struct dir *d) {
  static char buf[READ_MAX];
  ssize_t n = recv(d->from, buf, sizeof buf, 0);
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) kill_conn(d->c);
    return;
  }
  if (n == 0) d->reading = false;
  enqueue(d, buf, (size_t)n);
  if (d->c->dead) return;
  if (d->queued > MAX_QUEUED) d->reading = false;
  watch(d->c, (int)(d - d->c->d));
}

/* Pass on every chunk that is due by now. */
static void on_time(uint64_t now) {
  while (tl_head && tl_head->due_ns <= now) {
    struct chunk *k = tl_head;
    tl_head = k->tnext;
    if (!tl_head) tl_tail = NULL;
    struct conn *c = k->d->c;
    c->refs--;
    if (c->dead) {
      free(k);
      continue;
    }
    k->due = true;
    if (k == k->d->head) flush(k->d); /* else an earlier chunk waits for room */
  }
}

static void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void accept_all(struct listener *l) {
  for (;;) {
    int cfd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (cfd < 0) return;
    if (nconns >= MAX_CONNS) {
      close(cfd);
      continue;
    }
    /* Blocking connect: the upstream is meant to be on this host. */
    int ufd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (ufd < 0 || connect(ufd, (struct sockaddr *)&l->up, sizeof l->up) < 0) {
      perror("delayproxy: upstream connect");
      if (ufd >= 0) close(ufd);
      close(cfd);
      continue;
    }
    fcntl(ufd, F_SETFL, fcntl(ufd, F_GETFL) | O_NONBLOCK);
    set_nodelay(cfd);
    set_nodelay(ufd);
    struct conn *c = calloc(1, sizeof *c);
    if (!c) {
      close(cfd);
      close(ufd);
      continue;
    }
    int fds[2] = {cfd, ufd};
    for (int i = 0; i < 2; i++) {
      c->d[i] = (struct dir){.kind = K_DIR, .c = c, .from = fds[i], .to = fds[1 - i],
                             .reading = true};
    }
    watch(c, 0);
    watch(c, 1);
    nconns++;
  }
}

static int listen_on(const char *spec, struct listener *l) {
  unsigned lport = 0, uport;
  char host[64];
  const char *eq = strchr(spec, '=');
  if (eq && sscanf(spec, "%u=", &lport) != 1) return -1;
  const char *hp = eq ? eq + 1 : spec;
  const char *colon = strrchr(hp, ':');
  if (!colon || (size_t)(colon - hp) >= sizeof host || sscanf(colon + 1, "%u", &uport) != 1 ||
      uport == 0 || uport > 65535 || lport > 65535)
    return -1;
  memcpy(host, hp, (size_t)(colon - hp));
  host[colon - hp] = '\0';
  l->kind = K_LISTENER;
  l->up = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)uport)};
  if (inet_pton(AF_INET, host, &l->up.sin_addr) != 1) return -1;

  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)lport),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  int one = 1;
  l->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (l->fd < 0 || setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      bind(l->fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(l->fd, 128) < 0 ||
      getsockname(l->fd, (struct sockaddr *)&a, &alen) < 0) {
    perror("delayproxy: listen");
    exit(1);
  }
  struct epoll_event e = {.events = EPOLLIN, .data.ptr = l};
  epoll_ctl(ep, EPOLL_CTL_ADD, l->fd, &e);
  return ntohs(a.sin_port);
}

int main(int argc, char **argv) {
  char *end;
  long long us = argc >= 3 ? strtoll(argv[1], &end, 10) : -1;
  if (argc < 3 || *end || us < 0 || us > 10000000) {
    fprintf(stderr, "usage: %s DELAY_US [LISTEN_PORT=]HOST:PORT ...\n", argv[0]);
    return 2;
  }
  delay_ns = (uint64_t)us * 1000u;
  prctl(PR_SET_TIMERSLACK, 1UL); /* wake on time, not up to 50 us late */

  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigprocmask(SIG_BLOCK, &sigs, NULL);
  ep = epoll_create1(EPOLL_CLOEXEC);
  int sfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
  if (ep < 0 || sfd < 0) {
    perror("delayproxy");
    return 1;
  }
  struct epoll_event e = {.events = EPOLLIN, .data.ptr = &signal_tag};
  epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &e);

  int nl = argc - 2;
  struct listener *ls = calloc((size_t)nl, sizeof *ls);
  if (!ls) return 1;
  for (int i = 0; i < nl; i++) {
    int port = listen_on(argv[i + 2], &ls[i]);
    if (port < 0) {
      fprintf(stderr, "delayproxy: bad upstream '%s' (want [LISTEN_PORT=]A.B.C.D:PORT)\n",
              argv[i + 2]);
      return 2;
    }
    printf("%s%d", i ? " " : "", port);
  }
  printf("\n");
  fflush(stdout);

  for (bool running = true; running;) {
    struct epoll_event evs[64];
    struct timespec wait, *timeout = NULL; /* none: nothing queued */
    if (tl_head) {
      uint64_t now = now_ns(), left = tl_head->due_ns > now ? tl_head->due_ns - now : 0;
      wait.tv_sec = (time_t)(left / 1000000000u);
      wait.tv_nsec = (long)(left % 1000000000u);
      timeout = &wait;
    }
    int n = epoll_pwait2(ep, evs, 64, timeout, NULL);
    if (n < 0 && errno != EINTR) {
      perror("delayproxy: epoll_pwait2");
      return 1;
    }
    for (int j = 0; j < n; j++) {
      enum kind *tag = evs[j].data.ptr;
      if (*tag == K_SIGNAL) {
        running = false;
      } else if (*tag == K_LISTENER) {
        accept_all((struct listener *)tag);
      } else {
        struct dir *d = (struct dir *)tag;
        struct conn *c = d->c;
        int i = (int)(d - c->d);
        uint32_t ev = evs[j].events;
        if (!c->dead && c->d[1 - i].blocked && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
          flush(&c->d[1 - i]); /* socket i is writable for the other direction */
        if (!c->dead && d->reading && (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))) pull(d);
      }
    }
    on_time(now_ns());
    /* Free closed connections only between batches: a later event of the
     * same batch may still name them. */
    for (struct conn **p = &graveyard; *p;) {
      struct conn *c = *p;
      if (c->refs == 0) {
        *p = c->next_dead;
        free(c);
      } else {
        p = &c->next_dead;
      }
    }
  }
  return 0;
}
