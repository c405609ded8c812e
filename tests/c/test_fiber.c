/* Fibers (fiber.c): what a switch keeps for each side. On x86-64 the
 * switch is our own; these hold for it and for swapcontext alike. */
#include <fenv.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"

/* Two fibers take turns, each counting in locals, callee-saved registers
 * and a frame it recursed into; every value must come back as it was. */
typedef struct {
  int id;
  int steps;
  uint64_t sum;
} turn_arg;

static uint64_t deep(turn_arg *t, int depth, uint64_t acc) {
  volatile char pad[512]; /* a real frame on the fiber's stack */
  pad[0] = (char)depth;
  if (depth > 0) return deep(t, depth - 1, acc * 31 + (uint64_t)pad[0]);
  for (int i = 0; i < t->steps; i++) {
    register uint64_t keep = acc + (uint64_t)i * (uint64_t)t->id;
    double d = (double)i * 0.5 + t->id;
    (void)hilock__fiber_wait(-1, 0, INT64_MAX);
    acc = keep + (uint64_t)(d * 2.0);
  }
  return acc;
}

static void turn_main(void *arg) {
  turn_arg *t = arg;
  t->sum = deep(t, 40, (uint64_t)t->id);
}

static uint64_t expected(turn_arg t) {
  uint64_t acc = (uint64_t)t.id;
  for (int depth = 40; depth > 0; depth--) acc = acc * 31 + (uint64_t)(char)depth;
  for (int i = 0; i < t.steps; i++)
    acc = acc + (uint64_t)i * (uint64_t)t.id + (uint64_t)(((double)i * 0.5 + t.id) * 2.0);
  return acc;
}

static void fibers_taking_turns_keep_their_own_state(void **state) {
  turn_arg a = {1, 50, 0}, b = {7, 80, 0};
  hilock__fiber *fa = hilock__fiber_new(turn_main, &a);
  hilock__fiber *fb = hilock__fiber_new(turn_main, &b);
  int ea = 0, eb = 0, rounds = 0;
  (void)state;
  assert_non_null(fa);
  assert_non_null(fb);
  assert_null(hilock__fiber_self());
  while (!ea || !eb) {
    if (!ea) ea = hilock__fiber_resume(fa, 0);
    if (!eb) eb = hilock__fiber_resume(fb, 0);
    assert_null(hilock__fiber_self()); /* back on the thread's own stack */
    rounds++;
  }
  assert_int_equal(rounds, 81);
  assert_true(a.sum == expected(a));
  assert_true(b.sum == expected(b));
  hilock__fiber_free(fa);
  hilock__fiber_free(fb);
}

/* The per-call state (hilock__tl) goes with the fiber. */
static void callstate_main(void *arg) {
  int *seen = arg;
  hilock__tl.stop_fd = 42;
  (void)hilock__fiber_wait(-1, 0, INT64_MAX);
  *seen = hilock__tl.stop_fd;
}

static void the_per_call_state_goes_with_the_fiber(void **state) {
  int seen = 0;
  hilock__fiber *f = hilock__fiber_new(callstate_main, &seen);
  (void)state;
  assert_non_null(f);
  hilock__tl.stop_fd = -1;
  assert_int_equal(hilock__fiber_resume(f, 0), 0);
  assert_int_equal(hilock__tl.stop_fd, -1);
  hilock__tl.stop_fd = 5;
  assert_int_equal(hilock__fiber_resume(f, 0), 1);
  assert_int_equal(seen, 42);
  assert_int_equal(hilock__tl.stop_fd, 5);
  hilock__tl.stop_fd = -1;
  hilock__fiber_free(f);
}

/* The floating-point control words are each side's own, as swapcontext
 * keeps them: a fiber's rounding mode does not leak into the loop's
 * thread, nor the thread's into the fiber. */
static void rounding_main(void *arg) {
  int *seen = arg;
  fesetround(FE_UPWARD);
  (void)hilock__fiber_wait(-1, 0, INT64_MAX);
  *seen = fegetround();
}

static void each_side_keeps_its_floating_point_mode(void **state) {
  int seen = 0;
  hilock__fiber *f = hilock__fiber_new(rounding_main, &seen);
  (void)state;
  assert_non_null(f);
  assert_int_equal(fegetround(), FE_TONEAREST);
  assert_int_equal(hilock__fiber_resume(f, 0), 0);
  assert_int_equal(fegetround(), FE_TONEAREST);
  fesetround(FE_TOWARDZERO);
  assert_int_equal(hilock__fiber_resume(f, 0), 1);
  assert_int_equal(seen, FE_UPWARD);
  assert_int_equal(fegetround(), FE_TOWARDZERO);
  fesetround(FE_TONEAREST);
  hilock__fiber_free(f);
}

/* What a fiber's wait asks is what its resumer reads; the resume's
 * revents is what the wait returns. An ended fiber's stack is kept and
 * runs the next function. */
static void wait_main(void *arg) {
  int *got = arg;
  *got = hilock__fiber_wait(9, POLLIN, 1234);
}

static void spare_main(void *arg) { *(int *)arg = 77; }

static void waits_are_read_and_ended_fibers_are_reused(void **state) {
  int got = -1, fd = 0, spare = 0;
  short events = 0;
  int64_t deadline = 0;
  hilock__fiber *f = hilock__fiber_new(wait_main, &got), *g;
  (void)state;
  assert_non_null(f);
  assert_int_equal(hilock__fiber_resume(f, 0), 0);
  hilock__fiber_waits(f, &fd, &events, &deadline);
  assert_int_equal(fd, 9);
  assert_int_equal(events, POLLIN);
  assert_true(deadline == 1234);
  hilock__fiber_cut(f, 1000);
  hilock__fiber_waits(f, &fd, &events, &deadline);
  assert_true(deadline == 1000);
  assert_ptr_equal(hilock__fiber_arg(f), &got);
  assert_int_equal(hilock__fiber_resume(f, POLLIN | POLLHUP), 1);
  assert_int_equal(got, POLLIN | POLLHUP);
  hilock__fiber_free(f); /* kept as a spare */
  g = hilock__fiber_new(spare_main, &spare);
  assert_ptr_equal(g, f);
  assert_int_equal(hilock__fiber_resume(g, 0), 1);
  assert_int_equal(spare, 77);
  hilock__fiber_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fibers_taking_turns_keep_their_own_state),
      cmocka_unit_test(the_per_call_state_goes_with_the_fiber),
      cmocka_unit_test(each_side_keeps_its_floating_point_mode),
      cmocka_unit_test(waits_are_read_and_ended_fibers_are_reused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
