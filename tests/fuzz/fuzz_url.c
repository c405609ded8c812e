/* libFuzzer target: connection URLs (hilock__url_parse, every form of
 * hilock_client_new's comment) and client options (hilock__options_ok).
 * Nothing connects. Checked: no crash, leak or undefined behaviour; a URL
 * that parses has a place to go (a host and a port in range, or a unix
 * socket path; its seed and sentinel lists are whole), and one that does
 * not leaves nothing behind and says why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static void check(int ok) {
  if (!ok) abort();
}

static void check_seeds(const hilock__seed *s, int n) {
  check(n >= 0 && (n == 0 || s != NULL));
  for (int i = 0; i < n; i++)
    check(s[i].host != NULL && s[i].port >= 1 && s[i].port <= 65535);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hilock__url u;
  hilock__err e;
  hilock_options o;
  char *url;
  int rc;

  /* The first bytes, when there are enough, also make an options struct. */
  if (size >= sizeof(o)) {
    memcpy(&o, data, sizeof(o));
    o.interrupt = NULL;
    o.ssl_ca_certs = o.ssl_ca_path = o.ssl_certfile = NULL;
    o.ssl_keyfile = o.ssl_password = o.ssl_server_name = NULL;
    rc = hilock__options_ok(&o);
    check(rc == 0 || (o.connect_timeout_ms >= 1 && o.command_timeout_ms >= 0));
  }

  url = malloc(size + 1);
  if (url == NULL) return 0;
  memcpy(url, data, size);
  url[size] = '\0';
  memset(&u, 0, sizeof(u));
  hilock__clear_err(&e);
  rc = hilock__url_parse(url, &u, &e);
  if (rc == HILOCK_OK) {
    if (u.unix_socket) {
      check(u.path != NULL);
    } else {
      check(u.host != NULL && u.port >= 1 && u.port <= 65535);
    }
    check(u.db >= 0);
    check_seeds(u.seeds, u.nseeds);
    check_seeds(u.sentinels, u.nsentinels);
    if (u.cluster) check(u.nseeds >= 1);
    if (u.sentinel) check(u.master_name != NULL && u.nsentinels >= 1);
    /* A URL names the same server as itself (no resolving: a host that
     * is not a literal address compares by name first). */
    if (!u.cluster && !u.sentinel && !u.unix_socket)
      check(hilock__url_same_server(&u, &u, 0, 0));
  } else {
    check(rc == HILOCK_EINVAL || rc == HILOCK_ENOMEM);
    check(e.code == rc && e.msg[0] != '\0');
    check(u.host == NULL && u.path == NULL && u.seeds == NULL &&
          u.sentinels == NULL && u.password == NULL);
  }
  hilock__url_clear(&u);
  free(url);
  return 0;
}
