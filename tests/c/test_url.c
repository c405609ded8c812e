/* URL parsing: the internal parser, and hilock_client_new against a real
 * server and unreachable ones. */
#include "test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

static hl_server server;

static int group_setup(void **state) {
  /* "-::1": also listen on IPv6 loopback where the host has it. */
  static const char *const extra[] = {"--bind", "127.0.0.1", "-::1", NULL};
  hl_server_opts opts = {.extra = extra};
  (void)state;
  return hl_server_start(&server, &opts);
}

static int group_teardown(void **state) {
  (void)state;
  hl_server_destroy(&server);
  return 0;
}

/* Parse url, expecting rc; on success the caller must hilock__url_clear. */
static hilock__url parse(const char *url, int expect, hilock__err *e) {
  hilock__url u;
  int rc;
  hilock__clear_err(e);
  rc = hilock__url_parse(url, &u, e);
  if (rc != expect)
    fail_msg("'%s': got %s (%s), expected %s", url ? url : "(null)",
             hilock_err_name(rc), e->msg, hilock_err_name(expect));
  assert_int_equal(e->code, expect);
  return u;
}

/* A failed parse leaves nothing allocated. */
static void expect_bad(const char *url, const char *msg_part) {
  hilock__err e;
  hilock__url u = parse(url, HILOCK_EINVAL, &e);
  assert_null(u.host);
  assert_null(u.path);
  assert_null(u.user);
  assert_null(u.password);
  if (msg_part != NULL) assert_substr(e.msg, msg_part);
}

static void parse_host_port_db(void **state) {
  hilock__err e;
  hilock__url u = parse("redis://example.com:6380/3", HILOCK_OK, &e);
  (void)state;
  assert_false(u.unix_socket);
  assert_host_port(u, "example.com", 6380);
  assert_int_equal(u.db, 3);
  assert_null(u.user);
  assert_null(u.password);
  assert_null(u.path);
  hilock__url_clear(&u);
}

static void parse_defaults_port_db_and_host(void **state) {
  hilock__err e;
  hilock__url u = parse("redis://cache.local", HILOCK_OK, &e);
  (void)state;
  assert_host_port(u, "cache.local", 6379);
  assert_int_equal(u.db, 0);
  hilock__url_clear(&u);

  u = parse("redis://", HILOCK_OK, &e);
  assert_host_port(u, "127.0.0.1", 6379);
  hilock__url_clear(&u);

  u = parse("redis://h/", HILOCK_OK, &e);
  assert_int_equal(u.db, 0);
  hilock__url_clear(&u);

  u = parse("redis://h:1/1000000", HILOCK_OK, &e);
  assert_int_equal(u.port, 1);
  assert_int_equal(u.db, 1000000);
  hilock__url_clear(&u);

  u = parse("redis://h:65535", HILOCK_OK, &e);
  assert_int_equal(u.port, 65535);
  hilock__url_clear(&u);
}

static void parse_user_and_password(void **state) {
  hilock__err e;
  hilock__url u = parse("redis://alice:s3cret@h:7000/2", HILOCK_OK, &e);
  (void)state;
  assert_string_equal(u.user, "alice");
  assert_string_equal(u.password, "s3cret");
  assert_host_port(u, "h", 7000);
  assert_int_equal(u.db, 2);
  hilock__url_clear(&u);
}

static void parse_password_only(void **state) {
  hilock__err e;
  hilock__url u = parse("redis://:s3cret@h", HILOCK_OK, &e);
  (void)state;
  assert_null(u.user);
  assert_string_equal(u.password, "s3cret");
  hilock__url_clear(&u);

  /* No colon: the whole userinfo is a password. */
  u = parse("redis://s3cret@h", HILOCK_OK, &e);
  assert_null(u.user);
  assert_string_equal(u.password, "s3cret");
  hilock__url_clear(&u);
}

static void parse_percent_escapes(void **state) {
  hilock__err e;
  hilock__url u = parse("redis://al%69ce:p%40ss%3Aw%2f0rd%25@h", HILOCK_OK, &e);
  (void)state;
  assert_string_equal(u.user, "alice");
  assert_string_equal(u.password, "p@ss:w/0rd%");
  assert_string_equal(u.host, "h");
  hilock__url_clear(&u);

  /* A raw '@' in the password: the last '@' ends the userinfo. */
  u = parse("redis://u:p@ss@h:5", HILOCK_OK, &e);
  assert_string_equal(u.user, "u");
  assert_string_equal(u.password, "p@ss");
  assert_host_port(u, "h", 5);
  hilock__url_clear(&u);
}

static void parse_rejects_bad_escapes(void **state) {
  (void)state;
  expect_bad("redis://u:%zz@h", "percent-escape");
  expect_bad("redis://u:ab%4@h", "percent-escape");
  expect_bad("redis://u:ab%@h", "percent-escape");
  expect_bad("redis://u:a%00b@h", "percent-escape");
  expect_bad("redis://%g1:p@h", "percent-escape");
  expect_bad("unix:///s.sock?password=%x1", "percent-escape");
}

static void parse_ipv6_host(void **state) {
  hilock__err e;
  hilock__url u = parse("redis://[::1]:7001/4", HILOCK_OK, &e);
  (void)state;
  assert_host_port(u, "::1", 7001);
  assert_int_equal(u.db, 4);
  hilock__url_clear(&u);

  u = parse("redis://:pw@[::1]", HILOCK_OK, &e);
  assert_host_port(u, "::1", 6379);
  assert_string_equal(u.password, "pw");
  hilock__url_clear(&u);

  expect_bad("redis://[::1", "unclosed");
  expect_bad("redis://[::1]x", "junk");
  expect_bad("redis://[::1]:", "bad port");
}

static void parse_unix_socket(void **state) {
  hilock__err e;
  hilock__url u = parse("unix:///var/run/redis.sock", HILOCK_OK, &e);
  (void)state;
  assert_true(u.unix_socket);
  assert_string_equal(u.path, "/var/run/redis.sock");
  assert_null(u.host);
  assert_int_equal(u.db, 0);
  hilock__url_clear(&u);

  u = parse("unix:///tmp/r.sock?db=7&password=p%20w&user=bob", HILOCK_OK, &e);
  assert_string_equal(u.path, "/tmp/r.sock");
  assert_int_equal(u.db, 7);
  assert_string_equal(u.password, "p w");
  assert_string_equal(u.user, "bob");
  hilock__url_clear(&u);

  u = parse("unix://bob:pw@/tmp/r.sock?db=1", HILOCK_OK, &e);
  assert_string_equal(u.user, "bob");
  assert_string_equal(u.password, "pw");
  assert_string_equal(u.path, "/tmp/r.sock");
  assert_int_equal(u.db, 1);
  hilock__url_clear(&u);
}

static void parse_rejects_bad_unix_urls(void **state) {
  (void)state;
  expect_bad("unix://", "absolute");
  expect_bad("unix://relative.sock", "absolute");
  expect_bad("unix:///s.sock?db=abc", "database");
  expect_bad("unix:///s.sock?db=", "database");
  expect_bad("unix:///s.sock?db=-1", "database");
  expect_bad("unix:///s.sock?db", "query parameter");
  expect_bad("unix:///s.sock?db=1&timeout=5", "unknown URL query parameter 'timeout'");
}

static void parse_rejects_bad_ports(void **state) {
  static const char *const bad[] = {
      "redis://h:0",     "redis://h:65536", "redis://h:abc",
      "redis://h:",      "redis://h:-1",    "redis://h:99999999999",
      "redis://h:80x/1", "redis://h: 80",   "redis://h:6379:1",
  };
  (void)state;
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    expect_bad(bad[i], "bad port");
}

static void parse_rejects_bad_db(void **state) {
  static const char *const bad[] = {
      "redis://h/abc",     "redis://h/-1",         "redis://h/1000001",
      "redis://h/1x",      "redis://h/9999999999", "redis://h/1/2",
      "redis://h/2?db=x",
  };
  (void)state;
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    expect_bad(bad[i], "database");
}

static void parse_query_parameters(void **state) {
  hilock__err e;
  hilock__url u = parse("redis://h/2?password=x%2By&user=u", HILOCK_OK, &e);
  (void)state;
  assert_int_equal(u.db, 2);
  assert_string_equal(u.password, "x+y");
  assert_string_equal(u.user, "u");
  hilock__url_clear(&u);

  /* The query overrides the userinfo. */
  u = parse("redis://a:b@h?password=c&db=9", HILOCK_OK, &e);
  assert_string_equal(u.user, "a");
  assert_string_equal(u.password, "c");
  assert_int_equal(u.db, 9);
  hilock__url_clear(&u);
}

static void parse_rejects_unknown_query_parameters(void **state) {
  (void)state;
  expect_bad("redis://h?foo=bar", "unknown URL query parameter 'foo'");
  expect_bad("redis://h/1?db=2&ssl=1", "unknown URL query parameter 'ssl'");
  expect_bad("redis://h?&", "query parameter");
}

static void parse_rejects_other_schemes(void **state) {
  (void)state;
  expect_bad("http://h:6379", "must start with");
  expect_bad("", "must start with");
  expect_bad("127.0.0.1:6379", "must start with");
}

static void parse_rediss_forms_and_their_options(void **state) {
  hilock__err e;
  hilock__url u;
  (void)state;
  u = parse("rediss://h:6380/2", HILOCK_OK, &e);
  assert_true(u.tls);
  assert_host_port(u, "h", 6380);
  assert_int_equal(u.db, 2);
  assert_int_equal(u.ssl_cert_reqs, -1);
  assert_int_equal(u.ssl_check_hostname, -1);
  hilock__url_clear(&u);
  u = parse("rediss+cluster://a:1,b:2?ssl_ca_certs=/x/ca%20file.pem"
            "&ssl_check_hostname=no&ssl_cert_reqs=optional",
            HILOCK_OK, &e);
  assert_true(u.tls && u.cluster);
  assert_int_equal(u.nseeds, 2);
  assert_string_equal(u.ssl_ca_certs, "/x/ca file.pem");
  assert_int_equal(u.ssl_check_hostname, 0);
  assert_int_equal(u.ssl_cert_reqs, HILOCK_SSL_CERT_OPTIONAL);
  hilock__url_clear(&u);
  u = parse("rediss+sentinel://s1,s2:5000/mymaster?ssl_certfile=/c.pem&"
            "ssl_keyfile=/k.pem&ssl_password=p%26w&ssl_server_name=redis.test"
            "&ssl_ca_path=/etc/ca&ssl_cert_reqs=none&ssl_check_hostname=TRUE",
            HILOCK_OK, &e);
  assert_true(u.tls && u.sentinel);
  assert_string_equal(u.master_name, "mymaster");
  assert_string_equal(u.ssl_certfile, "/c.pem");
  assert_string_equal(u.ssl_keyfile, "/k.pem");
  assert_string_equal(u.ssl_password, "p&w");
  assert_string_equal(u.ssl_server_name, "redis.test");
  assert_string_equal(u.ssl_ca_path, "/etc/ca");
  assert_int_equal(u.ssl_cert_reqs, HILOCK_SSL_CERT_NONE);
  assert_int_equal(u.ssl_check_hostname, 1);
  hilock__url_clear(&u);
  /* Each bad TLS parameter is its own error. */
  expect_bad("rediss://h?ssl_cert_reqs=sometimes", "ssl_cert_reqs must be");
  expect_bad("rediss://h?ssl_check_hostname=maybe", "ssl_check_hostname must");
  expect_bad("rediss://h?ssl_verify=yes", "unknown URL query parameter 'ssl_verify'");
  expect_bad("rediss://h?ssl_ca_certs=%zz", "bad percent-escape");
  expect_bad("redis://h?ssl_ca_certs=/ca.pem", "need a TLS URL");
  expect_bad("unix:///tmp/s?ssl_cert_reqs=none", "need a TLS URL");
  expect_bad("rediss+other://h", "URL must start with");
}

static void parse_null_url_is_einval(void **state) {
  hilock__err e;
  hilock__url u = parse(NULL, HILOCK_EINVAL, &e);
  (void)state;
  assert_null(u.host);
  assert_substr(e.msg, "NULL");
}

/* ## hilock_client_new ----------------------------------------------------- */

/* hilock_client_new(url) must return expect; returns the client (or NULL
 * when it failed: the error message is checked, then freed). */
static hilock_client *client_new(const char *url, int expect,
                                 const char *msg_part) {
  hilock_options o = hl_test_options();
  hilock_client *c = NULL;
  int rc = hilock_client_new(url, &o, &c);
  assert_hl_rc(rc, expect, hilock_client_errmsg(c));
  if (rc == HILOCK_OK) {
    assert_non_null(c);
    return c;
  }
  /* On failure the client is still handed out for its message. */
  assert_non_null(c);
  assert_int_equal(hilock_client_errcode(c), expect);
  if (msg_part != NULL) assert_substr(hilock_client_errmsg(c), msg_part);
  hilock_client_free(c);
  return NULL;
}

static void client_connects_with_plain_url(void **state) {
  hilock_client *c = client_new(server.url, HILOCK_OK, NULL);
  (void)state;
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  hilock_client_free(c);
}

static void client_connects_with_db_and_hostname(void **state) {
  char url[128];
  hilock_client *c;
  (void)state;
  snprintf(url, sizeof(url), "redis://127.0.0.1:%d/5", server.port);
  c = client_new(url, HILOCK_OK, NULL);
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  hilock_client_free(c);

  snprintf(url, sizeof(url), "redis://localhost:%d/0", server.port);
  c = client_new(url, HILOCK_OK, NULL);
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  hilock_client_free(c);
}

static int ipv6_loopback_reachable(int port) {
  struct sockaddr_in6 sa;
  int fd = socket(AF_INET6, SOCK_STREAM, 0), ok;
  if (fd < 0) return 0;
  memset(&sa, 0, sizeof(sa));
  sa.sin6_family = AF_INET6;
  sa.sin6_addr = in6addr_loopback;
  sa.sin6_port = htons((uint16_t)port);
  ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
  close(fd);
  return ok;
}

static void client_connects_to_ipv6_loopback(void **state) {
  char url[128];
  hilock_client *c;
  (void)state;
  if (!ipv6_loopback_reachable(server.port)) skip();
  snprintf(url, sizeof(url), "redis://[::1]:%d/1", server.port);
  c = client_new(url, HILOCK_OK, NULL);
  assert_hl_ok(hilock_client_ping(c), hilock_client_errmsg(c));
  hilock_client_free(c);
}

static void client_reports_closed_port_quickly(void **state) {
  char url[128], where[64];
  int port = hl_free_port();
  hilock_options o = hl_test_options();
  hilock_client *c = NULL;
  int64_t t0;
  (void)state;
  assert_true(port > 0);
  snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
  snprintf(where, sizeof(where), "127.0.0.1:%d", port);
  o.connect_timeout_ms = 5000;
  t0 = hl_now_ms();
  assert_hl_rc(hilock_client_new(url, &o, &c), HILOCK_EIO,
               hilock_client_errmsg(c));
  assert_substr(hilock_client_errmsg(c), where);
  hilock_client_free(c);
  /* Refused at once, not at the 5 s connect timeout; 2 s leaves room for
   * a loaded machine. */
  assert_i64_between(hl_now_ms() - t0, 0, 2000);
}

static void client_reports_missing_unix_socket(void **state) {
  char url[PATH_MAX + 32];
  (void)state;
  snprintf(url, sizeof(url), "unix://%s/absent.sock", server.dir);
  client_new(url, HILOCK_EIO, "absent.sock");
}

static void client_rejects_db_out_of_range_with_redis_text(void **state) {
  char url[128];
  (void)state;
  snprintf(url, sizeof(url), "redis://127.0.0.1:%d/100000", server.port);
  client_new(url, HILOCK_EREDIS, "DB index is out of range");
}

static void client_password_without_server_password_is_eauth(void **state) {
  char url[128];
  (void)state;
  snprintf(url, sizeof(url), "redis://:nope@127.0.0.1:%d", server.port);
  client_new(url, HILOCK_EAUTH, "AUTH");
}

static void client_rejects_bad_urls_before_connecting(void **state) {
  (void)state;
  client_new("redis://127.0.0.1:0", HILOCK_EINVAL, "bad port");
  client_new("redis://127.0.0.1:6379/x", HILOCK_EINVAL, "database");
  client_new("redis://127.0.0.1?nope=1", HILOCK_EINVAL, "nope");
  client_new("memcached://127.0.0.1", HILOCK_EINVAL, NULL);
}

static void client_tls_to_a_plain_port_fails_within_the_connect_timeout(
    void **state) {
  char url[128];
  hilock_options o = hl_test_options();
  hilock_client *c = NULL;
  int64_t t0 = hl_now_ms(), took;
  int rc;
  (void)state;
  o.connect_timeout_ms = 500;
  snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", server.port);
  rc = hilock_client_new(url, &o, &c);
  took = hl_now_ms() - t0;
  assert_hl_rc(rc, HILOCK_ETIMEDOUT, hilock_client_errmsg(c));
  assert_substr(hilock_client_errmsg(c), "TLS handshake");
  /* Bounded by the connect timeout (and some scheduling). */
  assert_true(took < 500 + 1500);
  hilock_client_free(c);
}

static void client_null_url_is_einval(void **state) {
  hilock_client *c = NULL;
  (void)state;
  assert_int_equal(hilock_client_new(NULL, NULL, &c), HILOCK_EINVAL);
  assert_non_null(c);
  assert_int_equal(hilock_client_errcode(c), HILOCK_EINVAL);
  hilock_client_free(c);
  assert_int_equal(hilock_client_new(server.url, NULL, NULL), HILOCK_EINVAL);
}

static void client_rejects_bad_options(void **state) {
  enum { N = 5 };
  hilock_options o[N];
  (void)state;
  for (int i = 0; i < N; i++) hilock_options_init(&o[i]);
  o[0].connect_timeout_ms = 0;
  o[1].reconnect_ms = -1;
  o[2].max_idle = -1;
  o[3].max_connections = -1;
  o[4].direct_waiters = -1;
  for (int i = 0; i < N; i++) {
    hilock_client *c = NULL;
    assert_int_equal(hilock_client_new(server.url, &o[i], &c), HILOCK_EINVAL);
    assert_substr(hilock_client_errmsg(c), "options");
    hilock_client_free(c);
  }
}

/* Schemes are case-insensitive (RFC 3986): every form hilock knows, in
 * any case. */
static void parse_accepts_schemes_in_any_case(void **state) {
  hilock__err e;
  hilock__url u;
  (void)state;
  u = parse("REDIS://h:6380/2", HILOCK_OK, &e);
  assert_false(u.tls);
  assert_host_port(u, "h", 6380);
  assert_int_equal(u.db, 2);
  hilock__url_clear(&u);
  u = parse("Rediss://h:6380", HILOCK_OK, &e);
  assert_true(u.tls);
  assert_host_port(u, "h", 6380);
  hilock__url_clear(&u);
  u = parse("REDISS+CLUSTER://a:1,b:2", HILOCK_OK, &e);
  assert_true(u.tls && u.cluster);
  assert_int_equal(u.nseeds, 2);
  hilock__url_clear(&u);
  u = parse("Redis+Cluster://a:1", HILOCK_OK, &e);
  assert_true(!u.tls && u.cluster);
  hilock__url_clear(&u);
  u = parse("rEdIs+SeNtInEl://s1,s2/m", HILOCK_OK, &e);
  assert_true(!u.tls && u.sentinel);
  assert_string_equal(u.master_name, "m");
  hilock__url_clear(&u);
  u = parse("REDISS+SENTINEL://s1/m", HILOCK_OK, &e);
  assert_true(u.tls && u.sentinel);
  hilock__url_clear(&u);
  u = parse("UNIX:///tmp/x.sock?db=1", HILOCK_OK, &e);
  assert_true(u.unix_socket);
  assert_string_equal(u.path, "/tmp/x.sock");
  hilock__url_clear(&u);
  expect_bad("REDISS+OTHER://h", "URL must start with");
}

/* A message that shows the URL shows no password. */
static void parse_errors_show_no_password(void **state) {
  static const struct {
    const char *url, *shown;
  } cases[] = {
      {"reddis://:TopSecret1@h/0", "got 'reddis://:***@h/0'"},
      {"reddis://me:TopSecret1@h/0", "got 'reddis://me:***@h/0'"},
      {"reddis://TopSecret1@h", "got 'reddis://***@h'"},
      {"reddis://:p@ss:TopSecret1@h", "got 'reddis://:***@h'"},
      {"redis+sentinal://:TopSecret1@s1,s2/m", "got 'redis+sentinal://:***@s1"},
      {"redis+clustr://h?password=TopSecret1", "?password=***"},
      {"redis+sentinal://s/m?db=1&sentinel_password=TopSecret1&x=1",
       "?db=1&sentinel_password=***&x=1"},
      {"rediss+x://h?ssl_password=TopSecret1", "?ssl_password=***"},
      {"REDIS:/:TopSecret1@h", "got 'REDIS:/:***@h'"},
      {"redis://h?passwordTopSecret1", "name=value expected"},
      {"unix:///s?db=1&TopSecret1", "name=value expected"},
  };
  (void)state;
  for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
    hilock__err e;
    (void)parse(cases[i].url, HILOCK_EINVAL, &e);
    assert_substr(e.msg, cases[i].shown);
    if (strstr(e.msg, "TopSecret1") != NULL)
      fail_msg("'%s': the message shows the password: %s", cases[i].url,
               e.msg);
  }
}

static void redact_masks_every_password(void **state) {
  static const struct {
    const char *url, *shown;
  } cases[] = {
      {"redis://:s3@h:1/0", "redis://:***@h:1/0"},
      {"redis://u:s3@h", "redis://u:***@h"},
      {"redis://u:@h", "redis://u:@h"}, /* no password: nothing to hide */
      {"redis://h:1/0", "redis://h:1/0"},
      {"unix://:s3@/tmp/s?db=2&password=s3",
       "unix://:***@/tmp/s?db=2&password=***"},
      {"rediss+sentinel://u:s3@a,b/m?sentinel_password=s3&sentinel_user=x",
       "rediss+sentinel://u:***@a,b/m?sentinel_password=***&sentinel_user=x"},
      {"rediss://h?ssl_password=s3&ssl_ca_certs=/ca",
       "rediss://h?ssl_password=***&ssl_ca_certs=/ca"},
      {"REDIS://U:s3@h?PASSWORD=s3", "REDIS://U:***@h?PASSWORD=***"},
      {":s3@h", ":***@h"},
      {"redis://:a/b@h/0", "redis://:***@h/0"}, /* an unescaped '/' */
      {"unix:///tmp/x.sock", "unix:///tmp/x.sock"},
      {"", ""},
  };
  char out[128], tiny[12];
  (void)state;
  for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
    hilock__url_redact(cases[i].url, out, sizeof(out));
    assert_string_equal(out, cases[i].shown);
  }
  /* Truncated to the buffer, never half a secret. */
  hilock__url_redact("redis://:s3cr3t@host", tiny, sizeof(tiny));
  assert_string_equal(tiny, "redis://:**");
  hilock__url_redact(NULL, out, sizeof(out));
  assert_string_equal(out, "");
}

/* A TLS option with a URL that is not a TLS one is an error naming it. */
static void client_refuses_tls_options_on_a_plain_url(void **state) {
  static const char *const names[] = {
      "ssl_ca_certs",    "ssl_ca_path",   "ssl_certfile",
      "ssl_keyfile",     "ssl_password",  "ssl_server_name",
      "ssl_cert_reqs",   "ssl_check_hostname"};
  const char *urls[] = {server.url, "unix:///tmp/none.sock",
                        "redis+cluster://127.0.0.1:1",
                        "redis+sentinel://127.0.0.1:1/m"};
  hilock_options o;
  hilock_client *c = NULL;
  (void)state;
  for (size_t i = 0; i < sizeof(urls) / sizeof(*urls); i++) {
    for (int which = 0; which < 8; which++) {
      hilock_options_init(&o);
      o.connect_later = 1;
      switch (which) {
        case 0: o.ssl_ca_certs = "/ca.pem"; break;
        case 1: o.ssl_ca_path = "/etc/ca"; break;
        case 2: o.ssl_certfile = "/c.pem"; break;
        case 3: o.ssl_keyfile = "/k.pem"; break;
        case 4: o.ssl_password = "pw"; break;
        case 5: o.ssl_server_name = "redis.test"; break;
        case 6: o.ssl_cert_reqs = HILOCK_SSL_CERT_NONE; break;
        default: o.ssl_check_hostname = 0; break;
      }
      c = NULL;
      assert_hl_rc(hilock_client_new(urls[i], &o, &c), HILOCK_EINVAL,
                   hilock_client_errmsg(c));
      assert_substr(hilock_client_errmsg(c), names[which]);
      assert_substr(hilock_client_errmsg(c), "use rediss://");
      hilock_client_free(c);
    }
  }
  /* The defaults are no TLS option. */
  hilock_options_init(&o);
  c = NULL;
  assert_hl_ok(hilock_client_new(server.url, &o, &c), hilock_client_errmsg(c));
  hilock_client_free(c);
}

HL_SUITE_MAIN("url", group_setup, group_teardown,
      cmocka_unit_test(parse_host_port_db),
      cmocka_unit_test(parse_defaults_port_db_and_host),
      cmocka_unit_test(parse_user_and_password),
      cmocka_unit_test(parse_password_only),
      cmocka_unit_test(parse_percent_escapes),
      cmocka_unit_test(parse_rejects_bad_escapes),
      cmocka_unit_test(parse_ipv6_host),
      cmocka_unit_test(parse_unix_socket),
      cmocka_unit_test(parse_rejects_bad_unix_urls),
      cmocka_unit_test(parse_rejects_bad_ports),
      cmocka_unit_test(parse_rejects_bad_db),
      cmocka_unit_test(parse_query_parameters),
      cmocka_unit_test(parse_rejects_unknown_query_parameters),
      cmocka_unit_test(parse_rejects_other_schemes),
      cmocka_unit_test(parse_rediss_forms_and_their_options),
      cmocka_unit_test(parse_null_url_is_einval),
      cmocka_unit_test(client_connects_with_plain_url),
      cmocka_unit_test(client_connects_with_db_and_hostname),
      cmocka_unit_test(client_connects_to_ipv6_loopback),
      cmocka_unit_test(client_reports_closed_port_quickly),
      cmocka_unit_test(client_reports_missing_unix_socket),
      cmocka_unit_test(client_rejects_db_out_of_range_with_redis_text),
      cmocka_unit_test(client_password_without_server_password_is_eauth),
      cmocka_unit_test(client_rejects_bad_urls_before_connecting),
      cmocka_unit_test(client_tls_to_a_plain_port_fails_within_the_connect_timeout),
      cmocka_unit_test(client_null_url_is_einval),
      cmocka_unit_test(client_rejects_bad_options),
      cmocka_unit_test(parse_accepts_schemes_in_any_case),
      cmocka_unit_test(parse_errors_show_no_password),
      cmocka_unit_test(redact_masks_every_password),
      cmocka_unit_test(client_refuses_tls_options_on_a_plain_url))
