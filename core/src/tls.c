/* TLS through OpenSSL: one SSL_CTX per configuration, shared read-only by
 * its connections; one SSL per connection, non-blocking, on a BIO that
 * writes with MSG_NOSIGNAL (a peer that went away never raises SIGPIPE).
 *
 * Defaults follow redis-py: the server's certificate must chain to a
 * trusted CA (the system's store plus ssl_ca_certs / ssl_ca_path) and name
 * the host dialled (or ssl_server_name); SNI is sent for DNS names only,
 * and IP literals are checked against the certificate's IP addresses. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "base.h"
#include "net.h"

struct hilock__tls {
  SSL_CTX *ctx;
  char *server_name; /* checked and sent as SNI instead of the host */
  int check_name;    /* verify the peer's name (implies verification) */
};

/* ## A BIO on hilock's socket --------------------------------------------- */

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static int bio_fd(BIO *b) { return (int)(intptr_t)BIO_get_data(b); }

static int bio_write(BIO *b, const char *buf, int len) {
  ssize_t w;
  BIO_clear_retry_flags(b);
  do
    w = send(bio_fd(b), buf, (size_t)len, MSG_NOSIGNAL);
  while (w < 0 && errno == EINTR);
  if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    BIO_set_retry_write(b);
  return (int)w;
}

static int bio_read(BIO *b, char *buf, int len) {
  ssize_t r;
  BIO_clear_retry_flags(b);
  do
    r = recv(bio_fd(b), buf, (size_t)len, 0);
  while (r < 0 && errno == EINTR);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    BIO_set_retry_read(b);
  return (int)r;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
  (void)b;
  (void)num;
  (void)ptr;
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int bio_create(BIO *b) {
  BIO_set_init(b, 1);
  return 1;
}

static int bio_destroy(BIO *b) { return b != NULL; }

static void bio_init(void) {
  BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
                               "hilock socket");
  if (m == NULL) return;
  BIO_meth_set_write(m, bio_write);
  BIO_meth_set_read(m, bio_read);
  BIO_meth_set_ctrl(m, bio_ctrl);
  BIO_meth_set_create(m, bio_create);
  BIO_meth_set_destroy(m, bio_destroy);
  bio_method = m;
}

/* ## Configuration -------------------------------------------------------- */

/* OpenSSL's reason for the last failure on this thread (and clear it). */
static const char *ssl_reason(char *buf, size_t n) {
  unsigned long code = ERR_peek_last_error();
  const char *r = code ? ERR_reason_error_string(code) : NULL;
  if (r != NULL)
    snprintf(buf, n, "%s", r);
  else if (code != 0)
    ERR_error_string_n(code, buf, n);
  else
    snprintf(buf, n, "unknown reason");
  ERR_clear_error();
  return buf;
}

/* A readable file, or a specific error naming the option. */
static int readable(hilock__err *e, const char *what, const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return hilock__set_err(e, HILOCK_EINVAL, "%s '%.160s': %s", what, path,
                           strerror(errno));
  fclose(f);
  return HILOCK_OK;
}

static int tls_fail(hilock__tls *t, hilock__err *e, const char *fmt,
                    const char *arg) {
  char why[160];
  ssl_reason(why, sizeof(why));
  hilock__set_err(e, HILOCK_EINVAL, fmt, arg, why);
  hilock__tls_free(t);
  return HILOCK_EINVAL;
}

int hilock__tls_new(const hilock__tls_opts *o, hilock__tls **out,
                    hilock__err *e) {
  hilock__tls *t;
  *out = NULL;
  if (o->cert_reqs < HILOCK_SSL_CERT_REQUIRED ||
      o->cert_reqs > HILOCK_SSL_CERT_NONE)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "ssl_cert_reqs must be required, optional or none");
  if (o->keyfile != NULL && o->certfile == NULL)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "ssl_keyfile needs ssl_certfile (the certificate "
                           "it belongs to)");
  if (o->server_name != NULL && o->server_name[0] == '\0')
    return hilock__set_err(e, HILOCK_EINVAL, "ssl_server_name is empty");
  if ((o->ca_certs && readable(e, "ssl_ca_certs", o->ca_certs)) ||
      (o->certfile && readable(e, "ssl_certfile", o->certfile)) ||
      (o->keyfile && readable(e, "ssl_keyfile", o->keyfile)))
    return e->code;
  pthread_once(&bio_once, bio_init);
  t = calloc(1, sizeof(*t));
  if (t == NULL || bio_method == NULL) {
    free(t);
    return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
  }
  ERR_clear_error();
  t->ctx = SSL_CTX_new(TLS_client_method());
  if (t->ctx == NULL) return tls_fail(t, e, "TLS setup%s: %s", "");
  SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                               SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (o->cert_reqs == HILOCK_SSL_CERT_NONE) {
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_NONE, NULL);
  } else {
    /* "optional" is "required" for a client, as in Python's ssl. */
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    t->check_name = o->check_hostname;
  }
  /* The system's CAs, plus the caller's (a missing system store is no
   * error: the caller's may be all there is). */
  (void)SSL_CTX_set_default_verify_paths(t->ctx);
  ERR_clear_error();
  if ((o->ca_certs != NULL || o->ca_path != NULL) &&
      SSL_CTX_load_verify_locations(t->ctx, o->ca_certs, o->ca_path) != 1)
    return tls_fail(t, e, "ssl_ca_certs/ssl_ca_path '%.160s': %s",
                    o->ca_certs ? o->ca_certs : o->ca_path);
  if (o->certfile != NULL) {
    const char *key = o->keyfile ? o->keyfile : o->certfile;
    if (SSL_CTX_use_certificate_chain_file(t->ctx, o->certfile) != 1)
      return tls_fail(t, e, "ssl_certfile '%.160s': %s", o->certfile);
    SSL_CTX_set_default_passwd_cb_userdata(t->ctx, (void *)o->password);
    if (SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) != 1) {
      SSL_CTX_set_default_passwd_cb_userdata(t->ctx, NULL);
      if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH)
        return tls_fail(t, e, "ssl_keyfile '%.160s' does not match "
                              "ssl_certfile (%s)", key);
      return tls_fail(t, e, "ssl_keyfile '%.160s': %s", key);
    }
    SSL_CTX_set_default_passwd_cb_userdata(t->ctx, NULL);
    if (SSL_CTX_check_private_key(t->ctx) != 1)
      return tls_fail(t, e, "ssl_keyfile '%.160s' does not match ssl_certfile: %s",
                      key);
  }
  if (o->server_name != NULL) {
    t->server_name = strdup(o->server_name);
    if (t->server_name == NULL) {
      hilock__tls_free(t);
      return hilock__set_err(e, HILOCK_ENOMEM, "out of memory");
    }
  }
  *out = t;
  return HILOCK_OK;
}

void hilock__tls_free(hilock__tls *t) {
  if (t == NULL) return;
  SSL_CTX_free(t->ctx);
  free(t->server_name);
  free(t);
}

/* ## Connections ------------------------------------------------------------ */

static int is_ip(const char *name) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, name, buf) == 1 ||
         inet_pton(AF_INET6, name, buf) == 1;
}

int hilock__tls_attach(hilock__net *n, const hilock__tls *t, const char *host) {
  const char *name = t->server_name ? t->server_name : host;
  BIO *b;
  SSL *ssl;
  ERR_clear_error();
  ssl = SSL_new(t->ctx);
  b = ssl ? BIO_new(bio_method) : NULL;
  if (b == NULL) {
    SSL_free(ssl);
    ERR_clear_error();
    return hilock__net_fail(n, HILOCK__NET_ENOMEM, "out of memory");
  }
  BIO_set_data(b, (void *)(intptr_t)n->fd);
  SSL_set_bio(ssl, b, b);
  SSL_set_connect_state(ssl);
  n->ssl = ssl;
  if (name == NULL) return 0;
  /* SNI names a host, never an address. */
  if (!is_ip(name) && SSL_set_tlsext_host_name(ssl, name) != 1) {
    char why[160];
    return hilock__net_fail(n, HILOCK__NET_ETLS, "TLS server name '%.60s': %s",
                            name, ssl_reason(why, sizeof(why)));
  }
  if (t->check_name) {
    int ok;
    if (is_ip(name)) {
      ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1;
    } else {
      SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      ok = SSL_set1_host(ssl, name) == 1;
    }
    if (!ok) {
      char why[160];
      return hilock__net_fail(n, HILOCK__NET_ETLS,
                              "TLS name to check '%.60s': %s", name,
                              ssl_reason(why, sizeof(why)));
    }
  }
  return 0;
}

/* A failed TLS call: why, under ECERT for a certificate the client did not
 * accept, EIO for a connection that just closed, else ETLS. */
static int tls_failed(hilock__net *n, int ret, int err, const char *what) {
  char why[160];
  int saved = errno;
  if (err == SSL_ERROR_SSL) {
    long v = SSL_get_verify_result(n->ssl);
    unsigned long code = ERR_peek_last_error();
    if (v != X509_V_OK && n->state == 2) {
      ERR_clear_error();
      return hilock__net_fail(n, HILOCK__NET_ECERT,
                              "%s %s: the server's certificate was not "
                              "accepted: %s",
                              what, n->where, X509_verify_cert_error_string(v));
    }
#ifdef SSL_R_UNEXPECTED_EOF_WHILE_READING
    if (ERR_GET_REASON(code) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
      ERR_clear_error();
      return hilock__net_fail(n, HILOCK__NET_EIO,
                              "connection to %s closed by the server%s",
                              n->where,
                              n->state == 2 ? " during the TLS handshake" : "");
    }
#endif
    return hilock__net_fail(n, HILOCK__NET_ETLS, "%s %s: %s", what, n->where,
                            ssl_reason(why, sizeof(why)));
  }
  ERR_clear_error();
  if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && ret == 0))
    return hilock__net_fail(n, HILOCK__NET_EIO,
                            "connection to %s closed by the server%s", n->where,
                            n->state == 2 ? " during the TLS handshake" : "");
  return hilock__net_fail(n, HILOCK__NET_EIO, "%s %s: %s", what, n->where,
                          saved ? strerror(saved) : "connection lost");
}

int hilock__tls_handshake(hilock__net *n) {
  int r, err;
  ERR_clear_error();
  errno = 0;
  r = SSL_connect(n->ssl);
  if (r == 1) {
    n->state = 0;
    n->ssl_wants = 0;
    return 0;
  }
  err = SSL_get_error(n->ssl, r);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    n->ssl_wants = err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
    return 0;
  }
  return tls_failed(n, r, err, "TLS handshake with");
}

long hilock__tls_write(hilock__net *n, const char *buf, size_t len) {
  /* A write that had to wait is repeated with the same length (the bytes
   * are the same: the queue only grows at its end). */
  size_t want = n->ssl_retry ? n->ssl_retry : len;
  int r, err;
  if (want > len) want = len;
  if (want > INT_MAX) want = INT_MAX;
  ERR_clear_error();
  errno = 0;
  r = SSL_write(n->ssl, buf, (int)want);
  if (r > 0) {
    n->ssl_retry = 0;
    n->ssl_wants = 0;
    return r;
  }
  err = SSL_get_error(n->ssl, r);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    n->ssl_retry = want;
    n->ssl_wants = err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
    return 0;
  }
  return tls_failed(n, r, err, "TLS write to");
}

long hilock__tls_read(hilock__net *n, char *buf, size_t len) {
  int r, err;
  ERR_clear_error();
  errno = 0;
  r = SSL_read(n->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
  if (r > 0) return r;
  err = SSL_get_error(n->ssl, r);
  if (err == SSL_ERROR_WANT_READ) {
    if (n->ssl_wants == POLLOUT && n->olen == 0) n->ssl_wants = 0;
    return 0;
  }
  if (err == SSL_ERROR_WANT_WRITE) {
    n->ssl_wants = POLLOUT;
    return 0;
  }
  return tls_failed(n, r, err, "TLS read from");
}

void hilock__tls_close(hilock__net *n) {
  /* No close_notify: the socket may be a forked child's copy of the
   * parent's session, and a closing peer needs none. */
  if (n->ssl != NULL) SSL_free(n->ssl);
  n->ssl = NULL;
}

int hilock__tls_for(const hilock_options *o, const hilock__url *u,
                    hilock__tls **out, hilock__err *e) {
  hilock__tls_opts t;
  *out = NULL;
  if (!u->tls) return HILOCK_OK;
#define PICK(f) (u->f != NULL ? u->f : o->f)
  t.ca_certs = PICK(ssl_ca_certs);
  t.ca_path = PICK(ssl_ca_path);
  t.certfile = PICK(ssl_certfile);
  t.keyfile = PICK(ssl_keyfile);
  t.password = PICK(ssl_password);
  t.server_name = PICK(ssl_server_name);
#undef PICK
  t.cert_reqs = u->ssl_cert_reqs >= 0 ? u->ssl_cert_reqs : o->ssl_cert_reqs;
  t.check_hostname = u->ssl_check_hostname >= 0 ? u->ssl_check_hostname
                                                 : o->ssl_check_hostname != 0;
  return hilock__tls_new(&t, out, e);
}
