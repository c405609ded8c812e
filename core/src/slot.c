/* Redis Cluster hash slots: CRC16 (XMODEM) of the key's hash tag, mod
 * 16384, as the cluster specification defines it. */
#include "base.h"

static uint16_t crc16(const char *buf, size_t len) {
  uint16_t crc = 0;
  for (size_t i = 0; i < len; i++) {
    crc ^= (uint16_t)((unsigned char)buf[i] << 8);
    for (int b = 0; b < 8; b++)
      crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021)
                           : (uint16_t)(crc << 1);
  }
  return crc;
}

int hilock__key_slot(const char *key, size_t len) {
  size_t s, e;
  for (s = 0; s < len; s++)
    if (key[s] == '{') break;
  if (s < len) {
    for (e = s + 1; e < len; e++)
      if (key[e] == '}') break;
    /* Only a non-empty {...} is a hash tag. */
    if (e < len && e != s + 1) return crc16(key + s + 1, e - s - 1) & 16383;
  }
  return crc16(key, len) & 16383;
}
