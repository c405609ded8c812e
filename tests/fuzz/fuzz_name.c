/* libFuzzer target: lock names and the keys made of them
 * (hilock__check_name, hilock__key, hilock__key_slot). Checked: a name is
 * accepted exactly when it is 1..HILOCK_NAME_MAX bytes not beginning with
 * '}'; every key of an accepted name is hilock:{<name>}:<role> and all of
 * them share one cluster slot; hilock__key_slot agrees with Redis's own
 * definition (CRC16 of the hash tag, modulo 16384) on any bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static void check(int ok) {
  if (!ok) abort();
}

/* Redis's CRC16 (XMODEM), bit by bit: an independent reference. */
static unsigned crc16(const char *buf, size_t len) {
  unsigned crc = 0;
  for (size_t i = 0; i < len; i++) {
    crc ^= (unsigned)(unsigned char)buf[i] << 8;
    for (int b = 0; b < 8; b++)
      crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff
                           : (crc << 1) & 0xffff;
  }
  return crc;
}

/* keyHashSlot of Redis's cluster.c, written out again. */
static int ref_slot(const char *key, size_t len) {
  size_t s, e;
  for (s = 0; s < len; s++)
    if (key[s] == '{') break;
  if (s == len) return (int)(crc16(key, len) & 16383);
  for (e = s + 1; e < len; e++)
    if (key[e] == '}') break;
  if (e == len || e == s + 1) return (int)(crc16(key, len) & 16383);
  return (int)(crc16(key + s + 1, e - s - 1) & 16383);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const roles[] = {"lock", "fence", "wake", "queue",
                                      "readers", "writer", ""};
  /* The default key prefix (hilock__key reads only prefix and prefixlen
   * of a runtime). */
  static hilock__runtime rt = {.prefix = "hilock:", .prefixlen = 7};
  const char *name = (const char *)data;
  hilock__err e;
  int rc, slot = -1;

  check(hilock__key_slot(name, size) == ref_slot(name, size));
  hilock__clear_err(&e);
  rc = hilock__check_name(&e, name, size);
  check((rc == HILOCK_OK) ==
        (size >= 1 && size <= HILOCK_NAME_MAX && name[0] != '}'));
  if (rc != HILOCK_OK) {
    check(rc == HILOCK_EINVAL && e.code == rc && e.msg[0] != '\0');
    return 0;
  }
  for (size_t i = 0; i < sizeof(roles) / sizeof(*roles); i++) {
    size_t len = 0, rl = strlen(roles[i]);
    char *k = hilock__key(&rt, name, size, roles[i], &len);
    int s;
    if (k == NULL) return 0;
    check(len == 8 + size + 2 + rl && k[len] == '\0');
    check(memcmp(k, "hilock:{", 8) == 0 && memcmp(k + 8, name, size) == 0 &&
          memcmp(k + 8 + size, "}:", 2) == 0 &&
          memcmp(k + 10 + size, roles[i], rl) == 0);
    s = hilock__key_slot(k, len);
    check(s >= 0 && s <= 16383 && s == ref_slot(k, len));
    if (slot < 0) slot = s;
    check(s == slot);
    free(k);
  }
  return 0;
}
