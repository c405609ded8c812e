/* Command text: hilock__net_append's RESP against hiredis's own formatter,
 * byte for byte, and hilock__i64 against printf's decimal text. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "internal.h"

static void i64_is_printf_decimal(void **state) {
  static const int64_t edge[] = {0, 1, -1, 9, 10, -10, 99, 100, 1000000007,
                                 INT32_MAX, INT32_MIN, (int64_t)INT32_MAX + 1,
                                 INT64_MAX, INT64_MIN, INT64_MIN + 1};
  char got[24], want[24];
  uint64_t x = 0x9E3779B97F4A7C15u;
  (void)state;
  for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++) {
    snprintf(want, sizeof(want), "%" PRId64, edge[i]);
    assert_int_equal(hilock__i64(got, edge[i]), strlen(want));
    assert_string_equal(got, want);
  }
  for (int i = 0; i < 10000; i++) { /* xorshift: every magnitude */
    int64_t v;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = (int64_t)(x >> (x % 64));
    snprintf(want, sizeof(want), "%" PRId64, v);
    assert_int_equal(hilock__i64(got, v), strlen(want));
    assert_string_equal(got, want);
  }
}

/* n's output buffer after appending argv, compared with hiredis's text of
 * the same command appended to what was there. */
static void append_and_compare(hilock__net *n, int argc, const char **argv,
                               const size_t *lens) {
  char *cmd = NULL;
  size_t before = n->olen;
  char *old = malloc(before + 1);
  int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
  assert_non_null(old);
  assert_true(len >= 0);
  if (before > 0) memcpy(old, n->obuf, before); /* obuf: NULL at first */
  assert_int_equal(hilock__net_append(n, argc, argv, lens), 0);
  assert_int_equal(n->olen, before + (size_t)len);
  if (before > 0) assert_memory_equal(n->obuf, old, before);
  assert_memory_equal(n->obuf + before, cmd, (size_t)len);
  redisFreeCommand(cmd);
  free(old);
}

static void append_is_hiredis_resp(void **state) {
  hilock__net *n = calloc(1, sizeof(*n));
  const char *argv[120];
  size_t lens[120];
  char *big = malloc(1000001);
  static const char bin[] = {'a', '\r', '\n', '\0', '$', '*', 'z'};
  (void)state;
  assert_non_null(n);
  assert_non_null(big);
  memset(big, 'x', 1000001);
  append_and_compare(n, 0, argv, lens);
  argv[0] = "PING";
  lens[0] = 4;
  append_and_compare(n, 1, argv, lens);
  /* Lengths across digit counts, an empty argument, binary bytes. */
  argv[0] = "EVALSHA";
  lens[0] = 7;
  argv[1] = "";
  lens[1] = 0;
  argv[2] = bin;
  lens[2] = sizeof(bin);
  for (size_t k = 0; k < 9; k++) {
    static const size_t sizes[] = {1, 9, 10, 99, 100, 999, 1000, 65536,
                                   1000001};
    argv[3 + k] = big;
    lens[3 + k] = sizes[k];
  }
  append_and_compare(n, 12, argv, lens);
  /* Argument counts of one, two and three digits. */
  for (int argc = 9; argc <= 11; argc++) append_and_compare(n, argc, argv, lens);
  for (int i = 0; i < 120; i++) {
    argv[i] = bin;
    lens[i] = (size_t)i % sizeof(bin);
  }
  append_and_compare(n, 99, argv, lens);
  append_and_compare(n, 100, argv, lens);
  append_and_compare(n, 120, argv, lens);
  free(n->obuf);
  free(n);
  free(big);
}

static void append_refuses_impossible_sizes(void **state) {
  hilock__net *n = calloc(1, sizeof(*n));
  const char *argv[2] = {"SET", "k"};
  size_t lens[2] = {3, SIZE_MAX};
  (void)state;
  assert_non_null(n);
  assert_int_equal(hilock__net_append(n, 2, argv, lens), -1);
  assert_int_equal(hilock__net_append(n, -1, argv, lens), -1);
  assert_int_equal(n->olen, 0); /* nothing half-written */
  free(n->obuf);
  free(n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(i64_is_printf_decimal),
      cmocka_unit_test(append_is_hiredis_resp),
      cmocka_unit_test(append_refuses_impossible_sizes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
