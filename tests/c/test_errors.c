/* Status codes, their names and texts, and the Redis error-reply mapping. */
#include "test_util.h"

#include <limits.h>

#include "internal.h"

typedef struct code_row {
  int code;
  const char *name;
  const char *text;
} code_row;

static const code_row all_codes[] = {
#define ROW(name, value, text) {value, #name, text},
    HILOCK_ERRNO_MAP(ROW)
#undef ROW
};
#define NCODES (sizeof(all_codes) / sizeof(all_codes[0]))

static void strerror_gives_the_map_text_for_every_code(void **state) {
  (void)state;
  /* Every status has a row; codes are distinct (checked below). */
  assert_true(NCODES >= 19);
  for (size_t i = 0; i < NCODES; i++)
    assert_string_equal(hilock_strerror(all_codes[i].code), all_codes[i].text);
}

static void err_name_gives_the_map_name_for_every_code(void **state) {
  (void)state;
  for (size_t i = 0; i < NCODES; i++)
    assert_string_equal(hilock_err_name(all_codes[i].code),
                        all_codes[i].name);
  assert_string_equal(hilock_err_name(HILOCK_ENOTOWNED), "ENOTOWNED");
  assert_string_equal(hilock_err_name(HILOCK_OK), "OK");
}

static void codes_names_and_texts_are_distinct(void **state) {
  (void)state;
  for (size_t i = 0; i < NCODES; i++) {
    for (size_t j = i + 1; j < NCODES; j++) {
      assert_int_not_equal(all_codes[i].code, all_codes[j].code);
      assert_string_not_equal(all_codes[i].name, all_codes[j].name);
      assert_string_not_equal(all_codes[i].text, all_codes[j].text);
    }
  }
}

static void ok_is_zero_busy_is_one_errors_are_negative(void **state) {
  (void)state;
  assert_int_equal(HILOCK_OK, 0);
  assert_int_equal(HILOCK_BUSY, 1);
  assert_int_equal(HILOCK_SOLDOUT, 2);
  for (size_t i = 0; i < NCODES; i++)
    if (all_codes[i].code != HILOCK_OK && all_codes[i].code != HILOCK_BUSY &&
        all_codes[i].code != HILOCK_SOLDOUT)
      assert_true(all_codes[i].code < 0);
}

static void unknown_codes_give_fixed_text(void **state) {
  const int unknown[] = {3, -99, 100, -900, INT_MIN, INT_MAX};
  (void)state;
  for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
    assert_string_equal(hilock_strerror(unknown[i]), "unknown status");
    assert_string_equal(hilock_err_name(unknown[i]), "UNKNOWN");
  }
}

static void version_matches_header(void **state) {
  (void)state;
  assert_int_equal(hilock_version(), HILOCK_VERSION_HEX);
  assert_string_equal(hilock_version_string(), HILOCK_VERSION_STRING);
}

typedef struct reply_row {
  const char *text;
  int code;
} reply_row;

static const reply_row replies[] = {
    {"WRONGTYPE Operation against a key holding the wrong kind of value",
     HILOCK_EWRONGTYPE},
    {"NOPERM this user has no permissions to run the 'evalsha' command",
     HILOCK_ENOPERM},
    {"NOPERM", HILOCK_ENOPERM},
    {"ERR The user executing the script can't run this command or subcommand "
     "script: ba2bbbe6, on @user_script:231.",
     HILOCK_ENOPERM},
    {"ERR ACL failure in script: User less has no permissions to run the "
     "'zadd' command script: 71abc016, on @user_script:240.",
     HILOCK_ENOPERM},
    {"WRONGPASS invalid username-password pair or user is disabled.",
     HILOCK_EAUTH},
    {"NOAUTH Authentication required.", HILOCK_EAUTH},
    {"OOM command not allowed when used memory > 'maxmemory'.",
     HILOCK_EREDIS},
    {"READONLY You can't write against a read only replica.", HILOCK_EREDIS},
    {"NOSCRIPT No matching script. Please use EVAL.", HILOCK__NOSCRIPT},
    {"ERR Error running script (call to f_0123): @user_script:1: boom",
     HILOCK_ESCRIPT},
    {"ERR unknown command 'FOO', with args beginning with: ", HILOCK_EREDIS},
    {"WRONGTYPEX is not the WRONGTYPE prefix", HILOCK_EREDIS},
    {"NOPERMISSION is not the NOPERM prefix", HILOCK_EREDIS},
    {"LOADING Redis is loading the dataset in memory", HILOCK_EREDIS},
    {"CROSSSLOT Keys in request don't hash to the same slot",
     HILOCK_ECROSSSLOT},
    {"", HILOCK_EREDIS},
};

static void reply_error_maps_prefixes_and_keeps_redis_text(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(replies) / sizeof(replies[0]); i++) {
    hilock__err e;
    char want[300];
    int rc = hilock__reply_error(&e, replies[i].text, strlen(replies[i].text));
    if (rc != replies[i].code)
      fail_msg("'%s': got %d, expected %d", replies[i].text, rc,
               replies[i].code);
    assert_int_equal(e.code, replies[i].code);
    snprintf(want, sizeof(want), "redis: %s", replies[i].text);
    assert_string_equal(e.msg, want);
  }
}

static void reply_error_reads_only_len_bytes(void **state) {
  static const char text[] = "NOAUTH Authentication required.GARBAGE";
  hilock__err e;
  (void)state;
  assert_int_equal(hilock__reply_error(&e, text, strlen(text) - 7),
                   HILOCK_EAUTH);
  assert_string_equal(e.msg, "redis: NOAUTH Authentication required.");
  /* A prefix cut off by len is not a match. */
  assert_int_equal(hilock__reply_error(&e, "WRONGTYPE x", 5), HILOCK_EREDIS);
  assert_string_equal(e.msg, "redis: WRONG");
}

static void reply_error_truncates_long_text(void **state) {
  char text[1000];
  hilock__err e;
  (void)state;
  memset(text, 'x', sizeof(text));
  memcpy(text, "OOM ", 4);
  assert_int_equal(hilock__reply_error(&e, text, sizeof(text)),
                   HILOCK_EREDIS);
  assert_int_equal(strlen(e.msg), strlen("redis: ") + 200);
  assert_memory_equal(e.msg, "redis: OOM xxx", 14);
}

static void set_err_records_and_truncates(void **state) {
  char big[HILOCK__ERR_MSG + 64];
  hilock__err e;
  (void)state;
  assert_int_equal(hilock__set_err(&e, HILOCK_EIO, "x=%d", 42), HILOCK_EIO);
  assert_int_equal(e.code, HILOCK_EIO);
  assert_string_equal(e.msg, "x=42");
  memset(big, 'y', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  hilock__set_err(&e, HILOCK_EPROTO, "%s", big);
  assert_int_equal(strlen(e.msg), sizeof(e.msg) - 1);
  assert_int_equal(hilock__set_err(NULL, HILOCK_EINVAL, "ignored"),
                   HILOCK_EINVAL);
  hilock__clear_err(&e);
  assert_int_equal(e.code, HILOCK_OK);
  assert_string_equal(e.msg, "");
}

/* Appending to a message (Redlock's failed nodes) stops cleanly at the
 * slot's end: the text is cut, NUL-terminated, and a full slot takes no
 * more. */
static void err_append_truncates_cleanly(void **state) {
  hilock__err e;
  (void)state;
  hilock__set_err(&e, HILOCK_ENOQUORUM, "head");
  hilock__err_append(&e, "; %s", "node");
  assert_string_equal(e.msg, "head; node");
  for (int i = 0; i < 400; i++) hilock__err_append(&e, "; n%d", i);
  assert_int_equal(strlen(e.msg), sizeof(e.msg) - 1);
  assert_int_equal(e.code, HILOCK_ENOQUORUM);
  hilock__err_append(&e, "more");
  assert_int_equal(strlen(e.msg), sizeof(e.msg) - 1);
  assert_memory_equal(e.msg, "head; node; n0; n1", 18);
}

HL_SUITE_MAIN("errors", NULL, NULL,
      cmocka_unit_test(strerror_gives_the_map_text_for_every_code),
      cmocka_unit_test(err_name_gives_the_map_name_for_every_code),
      cmocka_unit_test(codes_names_and_texts_are_distinct),
      cmocka_unit_test(ok_is_zero_busy_is_one_errors_are_negative),
      cmocka_unit_test(unknown_codes_give_fixed_text),
      cmocka_unit_test(version_matches_header),
      cmocka_unit_test(reply_error_maps_prefixes_and_keeps_redis_text),
      cmocka_unit_test(reply_error_reads_only_len_bytes),
      cmocka_unit_test(reply_error_truncates_long_text),
      cmocka_unit_test(set_err_records_and_truncates),
      cmocka_unit_test(err_append_truncates_cleanly))
