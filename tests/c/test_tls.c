/* TLS from C: redis-servers with a TLS port (certificates made by the
 * openssl command in the group setup) and a plain port the test inspects
 * with hiredis. Verification is on by default; each way it fails has its
 * own status and OpenSSL's reason. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>

static struct {
  char dir[64];
  hl_server srv;  /* TLS port tls_port, clients not asked for certificates */
  hl_server mtls; /* TLS port mtls_port, client certificates required */
  int tls_port, mtls_port;
  char tls_args[4][16];
  redisContext *redis;
} g;

static char *pki(const char *name) {
  static char buf[8][256];
  static int next;
  char *p = buf[next++ % 8];
  snprintf(p, 256, "%s/%s", g.dir, name);
  return p;
}

static int sh(const char *fmt, ...) {
  char cmd[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof(cmd), fmt, ap);
  va_end(ap);
  return system(cmd);
}

/* A CA, a server certificate for localhost / 127.0.0.1 and a client
 * certificate, all signed by the CA (EC P-256). */
static int make_pki(void) {
  const char *ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  snprintf(g.dir, sizeof(g.dir), "/tmp/hilock-pki-XXXXXX");
  if (mkdtemp(g.dir) == NULL) return -1;
  if (sh("cd %s && openssl req -x509 -new %s -keyout ca.key -out ca.crt "
         "-days 3650 -subj '/CN=hilock test CA' 2>/dev/null",
         g.dir, ec) != 0)
    return -1;
  for (int i = 0; i < 2; i++) {
    const char *name = i == 0 ? "server" : "client";
    if (sh("cd %s && printf '%s' > %s.ext && "
           "openssl req -new %s -keyout %s.key -out %s.csr -subj '/CN=%s' "
           "2>/dev/null && openssl x509 -req -in %s.csr -CA ca.crt -CAkey "
           "ca.key -CAcreateserial -out %s.crt -days 365 -extfile %s.ext "
           "2>/dev/null",
           g.dir,
           i == 0 ? "subjectAltName=DNS:localhost,IP:127.0.0.1\\n"
                    "extendedKeyUsage=serverAuth\\n"
                  : "extendedKeyUsage=clientAuth\\n",
           name, ec, name, name, i == 0 ? "localhost" : "hilock client", name,
           name, name) != 0)
      return -1;
  }
  return 0;
}

static int start_tls_server(hl_server *s, int *port, const char *auth) {
  static char portbuf[2][16];
  static int next;
  char *pb = portbuf[next++ % 2];
  const char *extra[] = {"--tls-port",      pb,
                         "--tls-cert-file", pki("server.crt"),
                         "--tls-key-file",  pki("server.key"),
                         "--tls-ca-cert-file", pki("ca.crt"),
                         "--tls-auth-clients", auth,
                         NULL};
  hl_server_opts o = {0};
  *port = hl_free_port();
  snprintf(pb, 16, "%d", *port);
  o.extra = extra;
  return hl_server_start(s, &o);
}

static int group_setup(void **state) {
  (void)state;
  if (make_pki() != 0) {
    print_error("could not make certificates with the openssl command\n");
    return -1;
  }
  if (start_tls_server(&g.srv, &g.tls_port, "no") != 0) return -1;
  if (start_tls_server(&g.mtls, &g.mtls_port, "yes") != 0) return -1;
  g.redis = hl_redis_connect(&g.srv);
  return g.redis == NULL ? -1 : 0;
}

static int group_teardown(void **state) {
  (void)state;
  if (g.redis) redisFree(g.redis);
  hl_server_destroy(&g.srv);
  hl_server_destroy(&g.mtls);
  sh("rm -rf %s", g.dir);
  return 0;
}

static int tls_client(const char *host, int port, hilock_options *o,
                      hilock_client **c) {
  char url[256];
  snprintf(url, sizeof(url), "rediss://%s:%d", host, port);
  *c = NULL;
  return hilock_client_new(url, o, c);
}

static hilock_options with_ca(void) {
  hilock_options o = hl_test_options();
  o.ssl_ca_certs = pki("ca.crt");
  return o;
}

/* A client on 127.0.0.1:port with o is refused with rc, and says msg
 * (NULL: not checked). */
static void refused(int port, hilock_options *o, int rc, const char *msg) {
  hilock_client *c;
  assert_hl_rc(tls_client("127.0.0.1", port, o, &c), rc,
               hilock_client_errmsg(c));
  if (msg != NULL) assert_substr(hilock_client_errmsg(c), msg);
  hilock_client_free(c);
}

/* A client on host:port with o connects (and answers a PING if ping). */
static void accepted(const char *host, int port, hilock_options *o,
                     int ping) {
  hilock_client *c;
  assert_hl_ok(tls_client(host, port, o, &c), hilock_client_errmsg(c));
  if (ping) assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  hilock_client_free(c);
}

static void a_trusted_ca_connects_and_a_lock_works(void **state) {
  hilock_options o = with_ca();
  hilock_client *c;
  hilock_lock *l = NULL;
  (void)state;
  assert_hl_ok(tls_client("127.0.0.1", g.tls_port, &o, &c),
               hilock_client_errmsg(c));
  assert_hl_ok(hilock_lock_new(c, "tls", 3, 1000, &l), hilock_client_errmsg(c));
  assert_hl_ok(hilock_hold_set_auto_renew(HILOCK_HOLD(l), 1, 0, NULL, NULL),
               hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_hl_ok(hilock_hold_acquire(HILOCK_HOLD(l), 1000), hilock_hold_errmsg(HILOCK_HOLD(l)));
  /* The grant is on the server, seen through its plain port. */
  char *v = hl_redis_get(g.redis, "hilock:{tls}:lock", 17);
  assert_non_null(v);
  assert_string_equal(v, hilock_hold_token(HILOCK_HOLD(l)));
  free(v);
  /* Auto-renewal runs over TLS on the watchdog's own connection. */
  hl_sleep_ms(1600);
  assert_false(hilock_hold_lost(HILOCK_HOLD(l)));
  assert_true(hl_redis_exists(g.redis, "hilock:{tls}:lock", 17));
  assert_hl_ok(hilock_hold_release(HILOCK_HOLD(l)), hilock_hold_errmsg(HILOCK_HOLD(l)));
  assert_false(hl_redis_exists(g.redis, "hilock:{tls}:lock", 17));
  hilock_hold_free(HILOCK_HOLD(l));
  /* The DNS name in the certificate matches too. */
  hilock_client_free(c);
  accepted("localhost", g.tls_port, &o, 1);
}

static void an_untrusted_ca_is_ecert(void **state) {
  hilock_options o = hl_test_options();
  (void)state;
  refused(g.tls_port, &o, HILOCK_ECERT, "not accepted");
  /* Verification off: the caller's choice. */
  o.ssl_cert_reqs = HILOCK_SSL_CERT_NONE;
  accepted("127.0.0.1", g.tls_port, &o, 0);
}

static void a_name_mismatch_is_ecert_unless_the_check_is_off(void **state) {
  hilock_options o = with_ca();
  (void)state;
  o.ssl_server_name = "other.example";
  refused(g.tls_port, &o, HILOCK_ECERT, "mismatch");
  o.ssl_check_hostname = 0;
  accepted("127.0.0.1", g.tls_port, &o, 0);
}

static void mutual_tls_needs_a_client_certificate(void **state) {
  hilock_options o = with_ca();
  hilock_client *c;
  int rc;
  (void)state;
  rc = tls_client("127.0.0.1", g.mtls_port, &o, &c);
  assert_true(rc == HILOCK_ETLS || rc == HILOCK_EIO);
  hilock_client_free(c);
  o.ssl_certfile = pki("client.crt");
  o.ssl_keyfile = pki("client.key");
  accepted("127.0.0.1", g.mtls_port, &o, 1);
}

static void bad_files_are_einval_at_creation(void **state) {
  hilock_options o = with_ca();
  (void)state;
  o.ssl_ca_certs = "/nonexistent/ca.pem";
  refused(g.tls_port, &o, HILOCK_EINVAL, "No such file");
  o = with_ca();
  o.ssl_certfile = pki("client.crt");
  o.ssl_keyfile = pki("ca.key"); /* not the certificate's key */
  refused(g.tls_port, &o, HILOCK_EINVAL, "does not match");
  o = with_ca();
  o.ssl_cert_reqs = 7;
  refused(g.tls_port, &o, HILOCK_EINVAL, NULL);
}

static void a_plain_client_on_the_tls_port_fails_at_creation(void **state) {
  char url[128];
  hilock_options o = hl_test_options();
  hilock_client *c = NULL;
  (void)state;
  snprintf(url, sizeof(url), "redis://127.0.0.1:%d", g.tls_port);
  assert_hl_rc(hilock_client_new(url, &o, &c), HILOCK_EIO,
               hilock_client_errmsg(c));
  assert_substr(hilock_client_errmsg(c), "rediss://");
  hilock_client_free(c);
}

/* A plain client on the TLS port hears the hint on every path, not only
 * the constructor's: the first call of a client made with connect_later,
 * the AUTH of a client with a password, and a reconnect. */
static void a_plain_client_on_the_tls_port_is_told_on_every_path(
    void **state) {
  static const char *const forms[] = {"redis://127.0.0.1:%d",
                                      "redis://:pw@127.0.0.1:%d/3"};
  (void)state;
  for (size_t i = 0; i < sizeof(forms) / sizeof(*forms); i++) {
    char url[128];
    hilock_options o = hl_test_options();
    hilock_client *c = NULL;
    snprintf(url, sizeof(url), forms[i], g.tls_port);
    o.connect_later = 1;
    o.reconnect_ms = 0;
    assert_hl_ok(hilock_client_new(url, &o, &c), hilock_client_errmsg(c));
    for (int call = 0; call < 2; call++) { /* the first, then once more */
      assert_hl_rc(hilock_client_ping(c), HILOCK_EIO, hilock_client_errmsg(c));
      assert_substr(hilock_client_errmsg(c), "(a TLS port? use rediss://)");
    }
    hilock_client_free(c);
    /* The constructor's own connection says it once. */
    o.connect_later = 0;
    c = NULL;
    assert_hl_rc(hilock_client_new(url, &o, &c), HILOCK_EIO,
                 hilock_client_errmsg(c));
    assert_non_null(strstr(hilock_client_errmsg(c), "rediss://"));
    assert_null(strstr(strstr(hilock_client_errmsg(c), "rediss://") + 1,
                       "rediss://"));
    hilock_client_free(c);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_trusted_ca_connects_and_a_lock_works),
      cmocka_unit_test(an_untrusted_ca_is_ecert),
      cmocka_unit_test(a_name_mismatch_is_ecert_unless_the_check_is_off),
      cmocka_unit_test(mutual_tls_needs_a_client_certificate),
      cmocka_unit_test(bad_files_are_einval_at_creation),
      cmocka_unit_test(a_plain_client_on_the_tls_port_fails_at_creation),
      cmocka_unit_test(a_plain_client_on_the_tls_port_is_told_on_every_path),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
