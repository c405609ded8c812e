/* Links against an installed hilock and checks header and library agree. */
#include <hilock/hilock.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  hilock_client *c = NULL;
  int rc = hilock_client_new("rediss://127.0.0.1:1", NULL, &c);
  if (hilock_version() != HILOCK_VERSION_HEX ||
      strcmp(hilock_version_string(), HILOCK_VERSION_STRING) != 0) {
    fprintf(stderr, "header %s, library %s\n", HILOCK_VERSION_STRING,
            hilock_version_string());
    return 1;
  }
  if (rc != HILOCK_ENOTSUP) {
    fprintf(stderr, "expected ENOTSUP, got %s\n", hilock_err_name(rc));
    return 1;
  }
  hilock_client_free(c);
  printf("installed hilock %s links and runs\n", hilock_version_string());
  return 0;
}
