/* Hash slots against values from the Redis Cluster specification. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"

static int slot(const char *k) { return hilock__key_slot(k, strlen(k)); }

static void slots_match_the_specification(void **state) {
  (void)state;
  assert_int_equal(slot("123456789"), 0x31C3); /* CRC16 check value */
  assert_int_equal(slot("somekey"), 11058);
  assert_int_equal(slot("foo{hash_tag}"), 2515);
  assert_int_equal(slot("{hash_tag}"), 2515);
}

static void hash_tag_rules(void **state) {
  (void)state;
  /* Only the first {...} counts; an empty {} is no tag; an open { alone
   * is no tag. */
  assert_int_equal(slot("a{x}b{y}"), slot("x"));
  assert_int_not_equal(slot("{}{x}"), slot("x"));
  assert_int_not_equal(slot("{x"), slot("x"));
  /* The length bounds the key: bytes after it are not read. */
  assert_int_equal(hilock__key_slot("somekeyZZZ", 7), 11058);
  /* Every key of one lock shares its name's slot. */
  assert_int_equal(slot("hilock:{orders:42}:lock"), slot("orders:42"));
  assert_int_equal(slot("hilock:{orders:42}:wake"), slot("orders:42"));
  /* Names that carry their own hash tag share a slot across names. */
  assert_int_equal(slot("hilock:{{acct}:1}:lock"),
                   slot("hilock:{{acct}:2}:lock"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(slots_match_the_specification),
      cmocka_unit_test(hash_tag_rules),
  };
  return cmocka_run_group_tests_name("slot", tests, NULL, NULL);
}
