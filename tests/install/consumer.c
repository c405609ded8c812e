/* Links against an installed hilock and checks header and library agree. */
#include <hilock/hilock.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  hilock_client *c = NULL;
  /* TLS settings are read (through OpenSSL) before any connection: an
   * empty CA file is refused at once. */
  int rc = hilock_client_new("rediss://127.0.0.1:1?ssl_ca_certs=/dev/null",
                             NULL, &c);
  if (hilock_version() != HILOCK_VERSION_HEX ||
      strcmp(hilock_version_string(), HILOCK_VERSION_STRING) != 0) {
    fprintf(stderr, "header %s, library %s\n", HILOCK_VERSION_STRING,
            hilock_version_string());
    return 1;
  }
  if (rc != HILOCK_EINVAL || strstr(hilock_client_errmsg(c), "ssl_ca_certs") == NULL) {
    fprintf(stderr, "expected EINVAL for the CA file, got %s: %s\n",
            hilock_err_name(rc), hilock_client_errmsg(c));
    return 1;
  }
  hilock_client_free(c);
  {
    /* The base handle (hilock/hold.h) is installed and exported too. */
    hilock_lock *lk = NULL;
    if (hilock_hold_errcode(HILOCK_HOLD(lk)) != HILOCK_EINVAL) {
      fprintf(stderr, "hilock_hold_errcode(NULL) is not EINVAL\n");
      return 1;
    }
  }
  printf("installed hilock %s links and runs\n", hilock_version_string());
  return 0;
}
