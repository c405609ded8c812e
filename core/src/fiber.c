/* Fibers: an event loop's operation runs on the loop's own thread.
 *
 * A fiber is a stack of its own and a saved context (ucontext). The code it
 * runs is the blocking code every other caller runs; the places where that
 * code would wait (net.c's socket waits, a pause, a pooled connection) ask
 * hilock__fiber_self() and, inside a fiber, call hilock__fiber_wait, which
 * switches back to whoever resumed the fiber (async.c's runner, on the
 * loop's thread). The runner watches what the fiber waits for and resumes
 * it. The per-call state of hilock__tl goes with the fiber.
 *
 * Stacks are mapped with a guard page below them, and a few are kept per
 * thread for the next fibers. Under AddressSanitizer and ThreadSanitizer
 * every switch is announced to the sanitizer.
 *
 * On x86-64 a switch is a few instructions of our own (the registers a
 * call keeps, and the floating-point control words): the C library's
 * swapcontext also saves and restores the signal mask, a system call each
 * way, four per operation. The fibers never change the signal mask, so
 * there is nothing for it to keep. Other machines use swapcontext. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "base.h"
#include "fiber.h"

#if defined(__SANITIZE_ADDRESS__)
#include <dlfcn.h>
#include <sanitizer/common_interface_defs.h>
#define FIBER_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define FIBER_TSAN 1
#endif

/* Enough for the deepest path (a reconnect with TLS and Sentinel under a
 * family's call); touched pages only are backed. */
#define STACK_BYTES (256 * 1024)
#define SPARES_MAX 8

#if defined(__x86_64__) && !defined(HILOCK_FIBER_UCONTEXT)
#define FIBER_ASM 1
/* Saves the callee-saved registers on the current stack, stores its
 * pointer in *from, and goes on with the stack at to (where a switch, or
 * prepare(), left it). */
void hilock__fiber_switch(void **from, void *to);
__asm__(".text\n"
        ".p2align 4\n"
        ".globl hilock__fiber_switch\n"
        ".hidden hilock__fiber_switch\n"
        ".type hilock__fiber_switch, @function\n"
        "hilock__fiber_switch:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $8, %rsp\n"
        "  stmxcsr (%rsp)\n"
        "  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n"
        "  fldcw 4(%rsp)\n"
        "  addq $8, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size hilock__fiber_switch, .-hilock__fiber_switch\n");
typedef void *fiber_ctx; /* the saved stack pointer */
#else
typedef ucontext_t fiber_ctx;
#endif

struct hilock__fiber {
  fiber_ctx ctx, back;
  void *map;      /* the mapping: a guard page, then the stack */
  size_t maplen;
  void (*fn)(void *);
  void *arg;
  int ended;
  /* Its wait, while suspended. */
  int fd, revents;
  short events;
  int64_t deadline_ms;
  hilock__callstate tls; /* its per-call state while suspended */
  hilock__fiber *spare_next;
#ifdef FIBER_ASAN
  void *fake;                 /* its fake stack while switched out */
  const void *back_bottom;    /* the resumer's stack */
  size_t back_size;
#endif
#ifdef FIBER_TSAN
  void *tsan, *tsan_back;
#endif
};

#if defined(FIBER_ASAN) && !defined(FIBER_ASM)
/* AddressSanitizer's own swapcontext only warns that it cannot follow the
 * switch; the switches here are announced to it (start/finish_switch_fiber
 * above and below), so the C library's is called directly. */
typedef int (*swap_fn)(ucontext_t *, const ucontext_t *);
static int swap(ucontext_t *from, const ucontext_t *to) {
  static swap_fn libc_swap;
  swap_fn fn = __atomic_load_n(&libc_swap, __ATOMIC_ACQUIRE);
  if (fn == NULL) {
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    fn = libc != NULL ? (swap_fn)dlsym(libc, "swapcontext") : NULL;
    if (fn == NULL) fn = swapcontext;
    __atomic_store_n(&libc_swap, fn, __ATOMIC_RELEASE);
  }
  return fn(from, to);
}
#elif !defined(FIBER_ASM)
#define swap swapcontext
#endif
#ifdef FIBER_ASM
#define swap(from, to) hilock__fiber_switch((from), *(to))
#endif

static __thread hilock__fiber *tl_fiber;
static __thread hilock__fiber *tl_spares;
static __thread int tl_nspares;

hilock__fiber *hilock__fiber_self(void) { return tl_fiber; }

static char *stack_base(const hilock__fiber *f) {
  return (char *)f->map + sysconf(_SC_PAGESIZE);
}

/* Switch from the fiber back to its resumer. */
static void to_resumer(hilock__fiber *f, int last) {
#ifdef FIBER_TSAN
  __tsan_switch_to_fiber(f->tsan_back, 0);
#endif
#ifdef FIBER_ASAN
  if (last) f->fake = NULL; /* its fake stack goes with it */
  __sanitizer_start_switch_fiber(last ? NULL : &f->fake, f->back_bottom,
                                 f->back_size);
#else
  (void)last;
#endif
  swap(&f->ctx, &f->back);
#ifdef FIBER_ASAN
  __sanitizer_finish_switch_fiber(f->fake, &f->back_bottom, &f->back_size);
#endif
}

static void trampoline(void) {
  hilock__fiber *f = tl_fiber;
#ifdef FIBER_ASAN
  __sanitizer_finish_switch_fiber(NULL, &f->back_bottom, &f->back_size);
#endif
  for (;;) {
    f->fn(f->arg);
    f->ended = 1;
    to_resumer(f, 1);
    /* Made again from the spares: run the new fn. */
    f = tl_fiber;
  }
}

static int prepare(hilock__fiber *f) {
#ifdef FIBER_ASM
  /* The frame a switch pops: the control words, six registers (zero),
   * then trampoline as the return address, and below the top a zero
   * return address of its own (it never returns): it starts with the
   * stack aligned as after a call. */
  uint64_t *top = (uint64_t *)(stack_base(f) + STACK_BYTES);
  uint64_t *sp = top - 9;
  memset(sp, 0, 9 * sizeof(*sp));
  sp[0] = 0x1F80 | ((uint64_t)0x037F << 32); /* MXCSR, x87 control word */
  sp[7] = (uint64_t)(uintptr_t)trampoline;
  f->ctx = sp;
  return 0;
#else
  if (getcontext(&f->ctx) != 0) return -1;
  f->ctx.uc_stack.ss_sp = stack_base(f);
  f->ctx.uc_stack.ss_size = STACK_BYTES;
  f->ctx.uc_link = NULL;
  makecontext(&f->ctx, trampoline, 0);
  return 0;
#endif
}

hilock__fiber *hilock__fiber_new(void (*fn)(void *), void *arg) {
  hilock__fiber *f = tl_spares;
  int fresh = f == NULL;
  if (f != NULL) {
    tl_spares = f->spare_next;
    tl_nspares--;
  } else {
    /* A guard page, the stack, then the fiber itself (in the mapping:
     * a thread's spares are not heap blocks left at its exit). */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = page + STACK_BYTES + (sizeof(*f) + page - 1) / page * page;
    void *map = mmap(NULL, len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (map == MAP_FAILED) return NULL;
    (void)mprotect(map, page, PROT_NONE); /* the guard page */
    f = (hilock__fiber *)((char *)map + page + STACK_BYTES);
    memset(f, 0, sizeof(*f));
    f->map = map;
    f->maplen = len;
#ifdef FIBER_TSAN
    f->tsan = __tsan_create_fiber(0);
#endif
  }
  f->fn = fn;
  f->arg = arg;
  f->ended = 0;
  f->fd = -1;
  f->spare_next = NULL;
  f->tls = (hilock__callstate)HILOCK__CALLSTATE_INIT;
  /* A spare's context is where its trampoline left it (its loop goes on
   * with the new fn); a fresh one starts the trampoline. */
  if (fresh && prepare(f) != 0) {
    hilock__fiber_free(f);
    return NULL;
  }
  return f;
}

int hilock__fiber_resume(hilock__fiber *f, int revents) {
  hilock__fiber *outer = tl_fiber;
  hilock__callstate saved = hilock__tl;
#ifdef FIBER_ASAN
  void *fake = NULL;
#endif
  f->revents = revents;
  hilock__tl = f->tls;
  tl_fiber = f;
#ifdef FIBER_TSAN
  f->tsan_back = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(f->tsan, 0);
#endif
#ifdef FIBER_ASAN
  __sanitizer_start_switch_fiber(&fake, stack_base(f), STACK_BYTES);
#endif
  swap(&f->back, &f->ctx);
#ifdef FIBER_ASAN
  __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
  tl_fiber = outer;
  f->tls = hilock__tl;
  hilock__tl = saved;
  return f->ended;
}

void hilock__fiber_free(hilock__fiber *f) {
  if (f == NULL) return;
  /* Ended fibers (their trampoline waits for the next fn) are kept. */
  if (f->ended && tl_nspares < SPARES_MAX) {
    f->spare_next = tl_spares;
    tl_spares = f;
    tl_nspares++;
    return;
  }
#ifdef FIBER_TSAN
  __tsan_destroy_fiber(f->tsan);
#endif
  munmap(f->map, f->maplen); /* f with it */
}

int hilock__fiber_wait(int fd, short events, int64_t deadline_ms) {
  hilock__fiber *f = tl_fiber;
  f->fd = fd;
  f->events = events;
  f->deadline_ms = deadline_ms;
  to_resumer(f, 0);
  f->fd = -1;
  return f->revents;
}

void *hilock__fiber_arg(const hilock__fiber *f) { return f->arg; }

void hilock__fiber_cut(hilock__fiber *f, int64_t deadline_ms) {
  if (deadline_ms < f->deadline_ms) f->deadline_ms = deadline_ms;
}

void hilock__fiber_waits(const hilock__fiber *f, int *fd, short *events,
                         int64_t *deadline_ms) {
  *fd = f->fd;
  *events = f->events;
  *deadline_ms = f->deadline_ms;
}
