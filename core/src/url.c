/* Connection URLs: redis://, rediss:// (TLS), unix://, and the cluster and
 * sentinel forms of both. */
#include <ctype.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "base.h"
#include "net.h"


static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = tolower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* Percent-decode s[0..n) into a new string; *bad = 1 on a bad escape or an
 * escaped NUL. */
static char *decode(const char *s, size_t n, int *bad) {
  char *d = malloc(n + 1), *p = d;
  if (d == NULL) return NULL;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '%') {
      int hi = i + 2 < n ? hexval((unsigned char)s[i + 1]) : -1;
      int lo = i + 2 < n ? hexval((unsigned char)s[i + 2]) : -1;
      if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
        *bad = 1;
        free(d);
        return NULL;
      }
      *p++ = (char)(hi * 16 + lo);
      i += 2;
    } else {
      *p++ = s[i];
    }
  }
  *p = '\0';
  return d;
}

static int parse_int(const char *s, size_t n, long lo, long hi, long *out) {
  long v = 0;
  if (n == 0 || n > 9) return -1;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

void hilock__url_clear(hilock__url *u) {
  for (int i = 0; i < u->nseeds; i++) free(u->seeds[i].host);
  free(u->seeds);
  for (int i = 0; i < u->nsentinels; i++) free(u->sentinels[i].host);
  free(u->sentinels);
  free(u->master_name);
  free(u->sentinel_user);
  free(u->sentinel_password);
  free(u->host);
  free(u->path);
  free(u->user);
  free(u->password);
  free(u->ssl_ca_certs);
  free(u->ssl_ca_path);
  free(u->ssl_certfile);
  free(u->ssl_keyfile);
  free(u->ssl_password);
  free(u->ssl_server_name);
  memset(u, 0, sizeof(*u));
}

#define BAD(...)                                             \
  do {                                                       \
    hilock__url_clear(out);                                  \
    return hilock__set_err(e, HILOCK_EINVAL, __VA_ARGS__);   \
  } while (0)
#define NOMEM()                                                   \
  do {                                                            \
    hilock__url_clear(out);                                       \
    return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");    \
  } while (0)

/* user:password@ in s[0..n): fills out->user/out->password. */
static int parse_userinfo(const char *s, size_t n, hilock__url *out,
                          hilock__err *e) {
  const char *colon = memchr(s, ':', n);
  int bad = 0;
  if (colon == NULL) {
    /* "redis://secret@host" is taken as a password, like redis-py. */
    out->password = decode(s, n, &bad);
  } else {
    size_t ul = (size_t)(colon - s);
    if (ul > 0) out->user = decode(s, ul, &bad);
    if (!bad) out->password = decode(colon + 1, n - ul - 1, &bad);
  }
  if (bad) BAD("bad percent-escape in URL user or password");
  if (out->password == NULL) NOMEM();
  return HILOCK_OK;
}

/* A yes/no query value, as redis-py reads them; -1 if neither. */
static int parse_bool(const char *v) {
  static const char *const yes[] = {"1", "true", "t", "yes", "y", "on"};
  static const char *const no[] = {"0", "false", "f", "no", "n", "off"};
  for (size_t i = 0; i < sizeof(yes) / sizeof(*yes); i++)
    if (strcasecmp(v, yes[i]) == 0) return 1;
  for (size_t i = 0; i < sizeof(no) / sizeof(*no); i++)
    if (strcasecmp(v, no[i]) == 0) return 0;
  return -1;
}

/* An ssl_* query parameter (redis-py's names). */
static int parse_ssl(const char *k, size_t kl, const char *v, size_t vl,
                     hilock__url *out, hilock__err *e) {
  static const struct {
    const char *name;
    size_t off;
  } strs[] = {
      {"ssl_ca_certs", offsetof(hilock__url, ssl_ca_certs)},
      {"ssl_ca_path", offsetof(hilock__url, ssl_ca_path)},
      {"ssl_certfile", offsetof(hilock__url, ssl_certfile)},
      {"ssl_keyfile", offsetof(hilock__url, ssl_keyfile)},
      {"ssl_password", offsetof(hilock__url, ssl_password)},
      {"ssl_server_name", offsetof(hilock__url, ssl_server_name)},
  };
  int bad = 0, rc = HILOCK_OK;
  char *val = decode(v, vl, &bad);
  if (bad) BAD("bad percent-escape in URL parameter '%.*s'", (int)kl, k);
  if (val == NULL) NOMEM();
  for (size_t i = 0; i < sizeof(strs) / sizeof(*strs); i++) {
    if (strlen(strs[i].name) == kl && memcmp(k, strs[i].name, kl) == 0) {
      char **slot = (char **)((char *)out + strs[i].off);
      free(*slot);
      *slot = val;
      return HILOCK_OK;
    }
  }
  if (kl == 13 && memcmp(k, "ssl_cert_reqs", 13) == 0) {
    if (strcasecmp(val, "required") == 0)
      out->ssl_cert_reqs = HILOCK_SSL_CERT_REQUIRED;
    else if (strcasecmp(val, "optional") == 0)
      out->ssl_cert_reqs = HILOCK_SSL_CERT_OPTIONAL;
    else if (strcasecmp(val, "none") == 0)
      out->ssl_cert_reqs = HILOCK_SSL_CERT_NONE;
    else
      rc = hilock__set_err(e, HILOCK_EINVAL,
                           "ssl_cert_reqs must be required, optional or none "
                           "(got '%.40s')",
                           val);
  } else if (kl == 18 && memcmp(k, "ssl_check_hostname", 18) == 0) {
    out->ssl_check_hostname = parse_bool(val);
    if (out->ssl_check_hostname < 0)
      rc = hilock__set_err(e, HILOCK_EINVAL,
                           "ssl_check_hostname must be true or false "
                           "(got '%.40s')",
                           val);
  } else {
    rc = hilock__set_err(e, HILOCK_EINVAL,
                         "unknown URL query parameter '%.*s'", (int)kl, k);
  }
  free(val);
  if (rc != HILOCK_OK) hilock__url_clear(out);
  return rc;
}

/* A text parameter's value v[0..vl), percent-decoded, into *field (in
 * place of what was there); name is the parameter's, for the error. */
static int take_text(char **field, const char *name, const char *v, size_t vl,
                     hilock__url *out, hilock__err *e) {
  int bad = 0;
  free(*field);
  *field = decode(v, vl, &bad);
  if (bad) BAD("bad percent-escape in URL %s", name);
  if (*field == NULL) NOMEM();
  return HILOCK_OK;
}

static int parse_query(const char *q, hilock__url *out, hilock__err *e) {
  while (*q != '\0') {
    const char *amp = strchr(q, '&');
    size_t n = amp ? (size_t)(amp - q) : strlen(q);
    const char *eq = memchr(q, '=', n);
    int rc = HILOCK_OK;
    /* (not shown: a "password" whose '=' was forgotten is a password) */
    if (eq == NULL) BAD("bad URL query parameter: name=value expected");
    size_t kl = (size_t)(eq - q), vl = n - kl - 1;
    if (kl == 2 && memcmp(q, "db", 2) == 0) {
      long db;
      if (parse_int(eq + 1, vl, 0, 1000000, &db) != 0)
        BAD("bad database number in URL");
      out->db = (int)db;
    } else if (kl == 8 && memcmp(q, "password", 8) == 0) {
      rc = take_text(&out->password, "password", eq + 1, vl, out, e);
    } else if (kl == 4 && memcmp(q, "user", 4) == 0) {
      rc = take_text(&out->user, "user", eq + 1, vl, out, e);
    } else if (out->sentinel && kl == 17 &&
               memcmp(q, "sentinel_password", 17) == 0) {
      rc = take_text(&out->sentinel_password, "sentinel_password", eq + 1, vl,
                     out, e);
    } else if (out->sentinel && kl == 13 &&
               memcmp(q, "sentinel_user", 13) == 0) {
      rc = take_text(&out->sentinel_user, "sentinel_user", eq + 1, vl, out, e);
    } else if (kl > 4 && memcmp(q, "ssl_", 4) == 0) {
      rc = parse_ssl(q, kl, eq + 1, vl, out, e);
    } else {
      BAD("unknown URL query parameter '%.*s'", (int)kl, q);
    }
    if (rc != HILOCK_OK) return rc;
    q += n;
    if (*q == '&') q++;
  }
  return HILOCK_OK;
}

/* host[:port] or [ipv6][:port] in [p, end): a malloc'd host (127.0.0.1 if
 * empty) and the port (left as is if absent). */
static int parse_hostport(const char *p, const char *end, char **host,
                          int *port, const char *kind, hilock__err *e) {
  const char *hs = p, *he;
  const char *portp = NULL;
  if (*p == '[') {
    const char *rb = memchr(p, ']', (size_t)(end - p));
    if (rb == NULL)
      return hilock__set_err(e, HILOCK_EINVAL, "unclosed '[' in URL %shost",
                             kind);
    hs = p + 1;
    he = rb;
    if (rb + 1 < end) {
      if (rb[1] != ':')
        return hilock__set_err(e, HILOCK_EINVAL,
                               "junk after ']' in URL %shost", kind);
      portp = rb + 2;
    }
  } else {
    const char *colon = memchr(p, ':', (size_t)(end - p));
    he = colon ? colon : end;
    if (colon) portp = colon + 1;
  }
  if (portp != NULL) {
    long v;
    if (parse_int(portp, (size_t)(end - portp), 1, 65535, &v) != 0)
      return hilock__set_err(e, HILOCK_EINVAL, "bad %sport in URL", kind);
    *port = (int)v;
  }
  *host = he == hs ? hilock__dup("127.0.0.1", 9) : hilock__dup(hs, (size_t)(he - hs));
  if (*host == NULL) return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
  return HILOCK_OK;
}

/* A node list's "userinfo@" prefix (up to the last '@' before end), if
 * any: parsed into out, and *p moved past it. */
static int take_userinfo(const char **p, const char *end, hilock__url *out,
                         hilock__err *e) {
  const char *at = NULL;
  int rc;
  for (const char *s = *p; s < end; s++)
    if (*s == '@') at = s;
  if (at == NULL) return HILOCK_OK;
  rc = parse_userinfo(*p, (size_t)(at - *p), out, e);
  if (rc == HILOCK_OK) *p = at + 1;
  return rc;
}

/* redis+cluster://[user:password@]host[:port][,host[:port]...][/0][?query]:
 * the seed nodes the slot map is first read from. */
static int parse_cluster(const char *p, hilock__url *out, hilock__err *e) {
  const char *end = p + strcspn(p, "/?");
  int rc;
  out->cluster = 1;
  rc = take_userinfo(&p, end, out, e);
  if (rc != HILOCK_OK) return rc;
  for (const char *s = p;; s++) {
    if (s == end || *s == ',') {
      hilock__seed *grown;
      if (s == p) BAD("empty host in redis+cluster:// URL");
      grown = realloc(out->seeds, sizeof(*grown) * (size_t)(out->nseeds + 1));
      if (grown == NULL) NOMEM();
      out->seeds = grown;
      grown[out->nseeds].host = NULL;
      grown[out->nseeds].port = 6379;
      rc = parse_hostport(p, s, &grown[out->nseeds].host,
                          &grown[out->nseeds].port, "", e);
      if (grown[out->nseeds].host != NULL) out->nseeds++;
      if (rc != HILOCK_OK) {
        hilock__url_clear(out);
        return rc;
      }
      if (s == end) break;
      p = s + 1;
    }
  }
  out->host = hilock__dup(out->seeds[0].host, strlen(out->seeds[0].host));
  if (out->host == NULL) NOMEM();
  out->port = out->seeds[0].port;
  if (*end == '/') {
    const char *ds = end + 1, *de = ds + strcspn(ds, "?");
    if (de > ds && !(de - ds == 1 && *ds == '0'))
      BAD("a Redis Cluster has only database 0");
    end = de;
  }
  if (*end == '?') {
    rc = parse_query(end + 1, out, e);
    if (rc != HILOCK_OK) return rc;
    if (out->db != 0) BAD("a Redis Cluster has only database 0");
  }
  return HILOCK_OK;
}

/* host[:port] or [v6][:port] in s[0..n) into one sentinel address (port
 * 26379 unless given; the host may not be empty). */
static int parse_addr(const char *s, size_t n, hilock__seed *a,
                      hilock__url *out, hilock__err *e) {
  int rc;
  if (n == 0 || *s == ':' || (n > 1 && s[0] == '[' && s[1] == ']'))
    BAD("empty sentinel host in URL");
  a->port = 26379;
  rc = parse_hostport(s, s + n, &a->host, &a->port, "sentinel ", e);
  if (rc != HILOCK_OK) hilock__url_clear(out);
  return rc;
}

/* redis+sentinel://[userinfo@]h[:p][,h[:p]...]/master[/db][?query] */
static int parse_sentinel(const char *p, hilock__url *out, hilock__err *e) {
  const char *end = p + strcspn(p, "/?");
  int rc;
  out->sentinel = 1;
  rc = take_userinfo(&p, end, out, e);
  if (rc != HILOCK_OK) return rc;
  if (p == end) BAD("redis+sentinel:// URL needs at least one sentinel");
  size_t count = 1;
  for (const char *s = p; s < end; s++) count += *s == ',';
  if (count > 64) BAD("too many sentinels in URL (at most 64)");
  out->sentinels = calloc(count, sizeof(hilock__seed));
  if (out->sentinels == NULL) NOMEM();
  while (p <= end) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *ae = comma ? comma : end;
    rc = parse_addr(p, (size_t)(ae - p), &out->sentinels[out->nsentinels],
                    out, e);
    if (rc != HILOCK_OK) return rc;
    out->nsentinels++;
    p = ae + 1;
  }
  p = end;
  if (*p != '/') BAD("redis+sentinel:// URL needs /<master name>");
  const char *ns = p + 1, *ne = ns + strcspn(ns, "/?");
  int bad = 0;
  if (ne == ns) BAD("redis+sentinel:// URL needs /<master name>");
  out->master_name = decode(ns, (size_t)(ne - ns), &bad);
  if (bad) BAD("bad percent-escape in URL master name");
  if (out->master_name == NULL) NOMEM();
  p = ne;
  if (*p == '/') {
    const char *ds = p + 1, *de = ds + strcspn(ds, "?");
    if (de > ds) {
      long db;
      if (parse_int(ds, (size_t)(de - ds), 0, 1000000, &db) != 0)
        BAD("bad database number in URL");
      out->db = (int)db;
    }
    p = de;
  }
  /* host/port name the master actually dialled (set on each resolution);
   * until then, the first sentinel (for messages). */
  out->host = hilock__dup(out->sentinels[0].host, strlen(out->sentinels[0].host));
  if (out->host == NULL) NOMEM();
  out->port = out->sentinels[0].port;
  if (*p == '?') return parse_query(p + 1, out, e);
  if (*p != '\0') BAD("junk after the master name in URL");
  return HILOCK_OK;
}

static int parse_server(const char *p, hilock__url *out, hilock__err *e);

/* 1 if s starts with the scheme (and "://") lit, in any case: schemes are
 * case-insensitive (RFC 3986). */
static int scheme_is(const char *s, const char *lit) {
  return strncasecmp(s, lit, strlen(lit)) == 0;
}

static int url_parse(const char *url, hilock__url *out, hilock__err *e) {
  memset(out, 0, sizeof(*out));
  out->port = 6379;
  out->ssl_cert_reqs = -1;
  out->ssl_check_hostname = -1;
  if (url == NULL) return hilock__set_err(e, HILOCK_EINVAL, "URL is NULL");
  if (scheme_is(url, "rediss") && (url[6] == ':' || url[6] == '+')) {
    /* The TLS forms: the same URL after "rediss". */
    static const char *const forms[] = {"://", "+cluster://", "+sentinel://"};
    const char *rest = url + 6;
    int known = 0;
    for (size_t i = 0; i < sizeof(forms) / sizeof(*forms); i++)
      known |= scheme_is(rest, forms[i]);
    if (known) {
      out->tls = 1;
      if (scheme_is(rest, "+cluster://"))
        return parse_cluster(rest + 11, out, e);
      if (scheme_is(rest, "+sentinel://"))
        return parse_sentinel(rest + 12, out, e);
      return parse_server(rest + 3, out, e);
    }
  }

  if (scheme_is(url, "unix://")) {
    const char *p = url + 7, *q = strchr(p, '?');
    size_t n = q ? (size_t)(q - p) : strlen(p);
    const char *at = memchr(p, '@', n);
    out->unix_socket = 1;
    if (at != NULL) {
      int rc = parse_userinfo(p, (size_t)(at - p), out, e);
      if (rc != HILOCK_OK) return rc;
      n -= (size_t)(at + 1 - p);
      p = at + 1;
    }
    if (n == 0 || p[0] != '/') BAD("unix:// URL needs an absolute socket path");
    out->path = hilock__dup(p, n);
    if (out->path == NULL) NOMEM();
    return q ? parse_query(q + 1, out, e) : HILOCK_OK;
  }

  if (scheme_is(url, "redis+cluster://"))
    return parse_cluster(url + 16, out, e);
  if (scheme_is(url, "redis+sentinel://"))
    return parse_sentinel(url + 17, out, e);
  if (!scheme_is(url, "redis://")) {
    char shown[64];
    hilock__url_redact(url, shown, sizeof(shown));
    BAD("URL must start with redis://, rediss://, redis+cluster://, "
        "redis+sentinel:// (or their rediss+ forms) or unix:// (got '%s')",
        shown);
  }
  return parse_server(url + 8, out, e);
}

/* redis[s]://[userinfo@]host[:port][/db][?query], after the scheme. */
static int parse_server(const char *p, hilock__url *out, hilock__err *e) {
  const char *end = p + strcspn(p, "/?");
  const char *at = NULL;
  for (const char *s = p; s < end; s++)
    if (*s == '@') at = s; /* last '@': passwords may hold one */
  if (at != NULL) {
    int rc = parse_userinfo(p, (size_t)(at - p), out, e);
    if (rc != HILOCK_OK) return rc;
    p = at + 1;
  }
  int rc = parse_hostport(p, end, &out->host, &out->port, "", e);
  if (rc != HILOCK_OK) {
    hilock__url_clear(out);
    return rc;
  }
  if (*end == '/') {
    const char *ds = end + 1, *de = ds + strcspn(ds, "?");
    if (de > ds) {
      long db;
      if (parse_int(ds, (size_t)(de - ds), 0, 1000000, &db) != 0)
        BAD("bad database number in URL");
      out->db = (int)db;
    }
    end = de;
  }
  if (*end == '?') return parse_query(end + 1, out, e);
  return HILOCK_OK;
}

/* An empty password is no password (as redis-py takes it): no AUTH is
 * sent, and a user without a password is dropped with it. */
static void no_empty_password(char **user, char **password) {
  if (*password != NULL && (*password)[0] == '\0') {
    free(*password);
    *password = NULL;
  }
  if (*password == NULL) {
    free(*user);
    *user = NULL;
  }
}

int hilock__url_parse(const char *url, hilock__url *out, hilock__err *e) {
  int rc = url_parse(url, out, e);
  if (rc != HILOCK_OK) return rc;
  if (!out->tls &&
      (out->ssl_ca_certs || out->ssl_ca_path || out->ssl_certfile ||
       out->ssl_keyfile || out->ssl_password || out->ssl_server_name ||
       out->ssl_cert_reqs >= 0 || out->ssl_check_hostname >= 0)) {
    hilock__url_clear(out);
    return hilock__set_err(e, HILOCK_EINVAL,
                           "ssl_* parameters need a TLS URL (rediss://, "
                           "rediss+cluster://, rediss+sentinel://)");
  }
  no_empty_password(&out->user, &out->password);
  no_empty_password(&out->sentinel_user, &out->sentinel_password);
  return HILOCK_OK;
}

/* ## Secrets in messages ---------------------------------------------------
 * A URL as messages may show it: the password of its userinfo and the value
 * of every query parameter whose name ends in "password" (password=,
 * sentinel_password=, ssl_password=) become "***", whatever the scheme (a
 * mistyped one included), as redis-py shows them. */

static void put(char *out, size_t n, size_t *len, const char *s, size_t k) {
  if (*len + 1 >= n) return;
  if (k > n - 1 - *len) k = n - 1 - *len;
  memcpy(out + *len, s, k);
  *len += k;
  out[*len] = '\0';
}

void hilock__url_redact(const char *url, char *out, size_t n) {
  const char *q, *at = NULL, *start = NULL;
  size_t len = 0;
  if (n == 0) return;
  out[0] = '\0';
  if (url == NULL) return;
  q = url + strcspn(url, "?");
  for (const char *s = url; s < q; s++)
    if (*s == '@') at = s; /* the last '@': a password may hold one */
  if (at != NULL) {
    /* The userinfo starts after the first "//" (or, the scheme mistyped,
     * the first '/'), else at the start. */
    for (const char *s = url; s < at && start == NULL; s++)
      if (*s == '/') start = s[1] == '/' && s + 1 < at ? s + 2 : s + 1;
    if (start == NULL) start = url;
    put(out, n, &len, url, (size_t)(start - url));
    const char *colon = memchr(start, ':', (size_t)(at - start));
    if (colon != NULL) {
      put(out, n, &len, start, (size_t)(colon + 1 - start));
      if (colon + 1 < at) put(out, n, &len, "***", 3);
    } else if (at > start) {
      put(out, n, &len, "***", 3); /* "secret@host": a password alone */
    }
    start = at;
  } else {
    start = url;
  }
  q = strchr(start, '?');
  put(out, n, &len, start, q != NULL ? (size_t)(q - start) : strlen(start));
  while (q != NULL && *q != '\0') {
    const char *p = q + 1, *amp = strchr(p, '&');
    size_t k = amp != NULL ? (size_t)(amp - p) : strlen(p);
    const char *eq = memchr(p, '=', k);
    put(out, n, &len, q, 1); /* '?' or '&' */
    if (eq != NULL && (size_t)(eq - p) >= 8 &&
        strncasecmp(eq - 8, "password", 8) == 0) {
      put(out, n, &len, p, (size_t)(eq + 1 - p));
      put(out, n, &len, "***", 3);
    } else {
      put(out, n, &len, p, k);
    }
    q = amp;
  }
}

/* ## Same server ----------------------------------------------------------
 * Two URLs name one server if their databases match and their unix socket
 * paths resolve to one file, or their ports match and their hosts resolve
 * to a shared address (localhost and 127.0.0.1; IPv4-mapped IPv6 counts as
 * IPv4). A host that does not resolve matches only its own spelling. */

typedef struct addr_set {
  unsigned char a[16][16];
  int n;
} addr_set;

static void resolve(const char *host, addr_set *out, int64_t deadline_ms) {
  struct addrinfo *res = NULL, *p;
  int err;
  out->n = 0;
  if (hilock__resolve(host, "0", deadline_ms, &res, &err) != 0) return;
  for (p = res; p != NULL && out->n < 16; p = p->ai_next) {
    unsigned char *a = out->a[out->n];
    memset(a, 0, 16);
    if (p->ai_family == AF_INET) {
      /* As ::ffff:a.b.c.d */
      a[10] = a[11] = 0xff;
      memcpy(a + 12, &((struct sockaddr_in *)p->ai_addr)->sin_addr, 4);
    } else if (p->ai_family == AF_INET6) {
      memcpy(a, &((struct sockaddr_in6 *)p->ai_addr)->sin6_addr, 16);
    } else {
      continue;
    }
    out->n++;
  }
  freeaddrinfo(res);
}

int hilock__url_same_server(const hilock__url *x, const hilock__url *y,
                            int resolve_names, int64_t deadline_ms) {
  if (x->db != y->db || x->unix_socket != y->unix_socket ||
      x->cluster || y->cluster || x->sentinel || y->sentinel)
    return 0;
  if (x->unix_socket) {
    char *rx = realpath(x->path, NULL), *ry = realpath(y->path, NULL);
    int same = rx != NULL && ry != NULL ? strcmp(rx, ry) == 0
                                        : strcmp(x->path, y->path) == 0;
    free(rx);
    free(ry);
    return same;
  }
  if (x->port != y->port) return 0;
  if (strcasecmp(x->host, y->host) == 0) return 1;
  if (!resolve_names) return 0;
  {
    addr_set *ax = malloc(sizeof(*ax)), *ay = malloc(sizeof(*ay));
    int same = 0;
    if (ax != NULL && ay != NULL) {
      resolve(x->host, ax, deadline_ms);
      resolve(y->host, ay, deadline_ms);
      for (int i = 0; i < ax->n && !same; i++)
        for (int j = 0; j < ay->n && !same; j++)
          same = memcmp(ax->a[i], ay->a[j], 16) == 0;
    }
    free(ax);
    free(ay);
    return same;
  }
}
