/* Handing a grant over: hilock_hold_export writes a hold's grant as text,
 * and hilock_client_adopt makes a handle that holds it, in another thread
 * or process, confirmed on the server in one round trip.
 *
 * The text is "hilock2:" and the base64url (no padding) of:
 *   u8 family, u8 kind, u64 ttl_ms, u64 fence, u64 a, u64 b, u64 delay_ms,
 *   u8 ownerlen, owner, u16 prefixlen, prefix, u16 n,
 *   n times (u16 namelen, name, u64 fence),
 *   u32 FNV-1a of all the bytes before it,
 * integers big-endian. Every length is checked against what remains and
 * against the limits of a name, a key prefix and a multi-key lock; the
 * checksum turns a changed byte into HILOCK_EINVAL, never another grant.
 * ("hilock1:", without delay_ms, is refused as an older layout.) */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "family.h"
#include "holds.h"
#include "runtime.h"

#include "hilock/client.h"
#include "hilock/multi_lock.h"

#define MAGIC "hilock2:"
#define MAGIC_LEN 8
#define FIXED 43 /* the bytes before the owner: 1 + 1 + 5 * 8 + 1 */

static uint32_t fnv1a(const unsigned char *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 16777619u;
  }
  return h;
}

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static size_t b64_len(size_t n) { return n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0); }

static void b64_encode(const unsigned char *p, size_t n, char *out) {
  size_t i = 0, o = 0;
  for (; i + 3 <= n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
    out[o++] = b64[v >> 18 & 63];
    out[o++] = b64[v >> 12 & 63];
    out[o++] = b64[v >> 6 & 63];
    out[o++] = b64[v & 63];
  }
  if (n - i == 1) {
    uint32_t v = (uint32_t)p[i] << 16;
    out[o++] = b64[v >> 18 & 63];
    out[o++] = b64[v >> 12 & 63];
  } else if (n - i == 2) {
    uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
    out[o++] = b64[v >> 18 & 63];
    out[o++] = b64[v >> 12 & 63];
    out[o++] = b64[v >> 6 & 63];
  }
  out[o] = '\0';
}

static int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

/* Canonical base64url only (no padding, no stray bits): -1 otherwise. */
static int b64_decode(const char *s, size_t n, unsigned char *out,
                      size_t *outlen) {
  size_t o = 0, i;
  uint32_t acc = 0;
  int bits = 0;
  if (n % 4 == 1) return -1;
  for (i = 0; i < n; i++) {
    int v = b64_value(s[i]);
    if (v < 0) return -1;
    acc = acc << 6 | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (unsigned char)(acc >> bits);
      acc &= (1u << bits) - 1;
    }
  }
  if (acc != 0) return -1;
  *outlen = o;
  return 0;
}

static unsigned char *put(unsigned char *p, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; i--) *p++ = (unsigned char)(v >> (8 * i));
  return p;
}

/* ## Reading ---------------------------------------------------------------- */

typedef struct reader {
  const unsigned char *p;
  size_t left;
  int bad;
} reader;

static uint64_t get(reader *r, int bytes) {
  uint64_t v = 0;
  if (r->bad || r->left < (size_t)bytes) {
    r->bad = 1;
    return 0;
  }
  for (int i = 0; i < bytes; i++) v = v << 8 | *r->p++;
  r->left -= (size_t)bytes;
  return v;
}

static const char *take(reader *r, size_t n) {
  const char *s = (const char *)r->p;
  if (r->bad || r->left < n) {
    r->bad = 1;
    return NULL;
  }
  r->p += n;
  r->left -= n;
  return s;
}

int hilock__grant_decode(const char *text, size_t len, hilock__grant *g,
                         void **mem, hilock__err *e) {
  unsigned char *raw;
  size_t rawlen = 0, n, i;
  const char **names;
  size_t *namelens;
  uint64_t *fences;
  reader r;

  memset(g, 0, sizeof(*g));
  *mem = NULL;
  if (text != NULL && len >= MAGIC_LEN && memcmp(text, "hilock1:", 8) == 0)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "adopt: a grant exported by an older hilock "
                           "(\"hilock1:\"); export it again with this one");
  if (text == NULL || len <= MAGIC_LEN || memcmp(text, MAGIC, MAGIC_LEN) != 0)
    return hilock__set_err(e, HILOCK_EINVAL,
                           "adopt: not an exported hilock grant (it must "
                           "start with \"" MAGIC "\")");
  /* Bounded by what a grant can hold: 1024 names of 1024 bytes. */
  if (len - MAGIC_LEN > 2 * 1024 * 1024)
    return hilock__set_err(e, HILOCK_EINVAL, "adopt: the text is too long");
  raw = malloc((len - MAGIC_LEN) / 4 * 3 + 3);
  if (raw == NULL) return HILOCK_ENOMEM;
  if (b64_decode(text + MAGIC_LEN, len - MAGIC_LEN, raw, &rawlen) != 0) {
    free(raw);
    return hilock__set_err(e, HILOCK_EINVAL,
                           "adopt: the exported grant is not valid base64url");
  }
  if (rawlen < FIXED + 4 ||
      fnv1a(raw, rawlen - 4) != (uint32_t)((uint32_t)raw[rawlen - 4] << 24 |
                                           (uint32_t)raw[rawlen - 3] << 16 |
                                           (uint32_t)raw[rawlen - 2] << 8 |
                                           raw[rawlen - 1])) {
    free(raw);
    return hilock__set_err(e, HILOCK_EINVAL,
                           "adopt: the exported grant is truncated or was "
                           "changed (its checksum does not match)");
  }
  r.p = raw;
  r.left = rawlen - 4;
  r.bad = 0;
  g->family = (int)get(&r, 1);
  g->kind = (int)get(&r, 1);
  g->ttl_ms = (int64_t)get(&r, 8);
  g->fence = get(&r, 8);
  g->a = (int64_t)get(&r, 8);
  g->b = (int64_t)get(&r, 8);
  g->delay_ms = (int64_t)get(&r, 8);
  g->ownerlen = (size_t)get(&r, 1);
  g->owner = take(&r, g->ownerlen);
  g->prefixlen = (size_t)get(&r, 2);
  g->prefix = take(&r, g->prefixlen);
  n = (size_t)get(&r, 2);
  if (r.bad || n < 1 || n > HILOCK_MULTI_LOCK_MAX ||
      (n > 1 && g->family != HILOCK__GRANT_MULTI)) {
    free(raw);
    return hilock__set_err(e, HILOCK_EINVAL,
                           "adopt: the exported grant is malformed");
  }
  /* One block: the raw bytes, then the name arrays. */
  *mem = raw;
  names = calloc(n, sizeof(*names));
  namelens = calloc(n, sizeof(*namelens));
  fences = calloc(n, sizeof(*fences));
  if (names == NULL || namelens == NULL || fences == NULL) {
    free(names);
    free(namelens);
    free(fences);
    free(raw);
    *mem = NULL;
    return HILOCK_ENOMEM;
  }
  for (i = 0; i < n && !r.bad; i++) {
    namelens[i] = (size_t)get(&r, 2);
    names[i] = take(&r, namelens[i]);
    fences[i] = get(&r, 8);
  }
  if (r.bad || r.left != 0 || g->family < HILOCK__GRANT_LOCK ||
      g->family > HILOCK__GRANT_SEM || g->ttl_ms < 0 ||
      g->ttl_ms > HILOCK_TTL_MAX_MS || g->delay_ms < 0 ||
      g->delay_ms > HILOCK_TTL_MAX_MS || g->ownerlen != HILOCK__TOKEN_LEN ||
      g->prefixlen < 1 || g->prefixlen > HILOCK_KEY_PREFIX_MAX) {
    free(names);
    free(namelens);
    free(fences);
    free(raw);
    *mem = NULL;
    return hilock__set_err(e, HILOCK_EINVAL,
                           "adopt: the exported grant is malformed");
  }
  for (i = 0; i < g->ownerlen; i++) {
    char c = g->owner[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      free(names);
      free(namelens);
      free(fences);
      free(raw);
      *mem = NULL;
      return hilock__set_err(e, HILOCK_EINVAL,
                             "adopt: the exported grant's owner token is "
                             "malformed");
    }
  }
  g->n = n;
  g->names = names;
  g->namelens = namelens;
  g->fences = fences;
  return HILOCK_OK; /* all freed by grant_free */
}

static void grant_free(hilock__grant *g, void *mem) {
  free((void *)g->names);
  free((void *)g->namelens);
  free((void *)g->fences);
  free(mem);
}

const char *hilock__key_name(const hilock__runtime *rt, const char *key,
                             size_t keylen, const char *role, size_t *len) {
  *len = keylen - rt->prefixlen - 1 - 2 - strlen(role);
  return key + rt->prefixlen + 1;
}

/* ## Export --------------------------------------------------------------- */

static char *encode(const hilock__grant *g, size_t *textlen) {
  size_t rawlen = FIXED + g->ownerlen + 2 + g->prefixlen + 2 + 4, i;
  unsigned char *raw, *p;
  char *text;
  for (i = 0; i < g->n; i++) rawlen += 2 + g->namelens[i] + 8;
  raw = malloc(rawlen);
  if (raw == NULL) return NULL;
  p = raw;
  p = put(p, (uint64_t)g->family, 1);
  p = put(p, (uint64_t)g->kind, 1);
  p = put(p, (uint64_t)g->ttl_ms, 8);
  p = put(p, g->fence, 8);
  p = put(p, (uint64_t)g->a, 8);
  p = put(p, (uint64_t)g->b, 8);
  p = put(p, (uint64_t)g->delay_ms, 8);
  p = put(p, g->ownerlen, 1);
  memcpy(p, g->owner, g->ownerlen);
  p += g->ownerlen;
  p = put(p, g->prefixlen, 2);
  memcpy(p, g->prefix, g->prefixlen);
  p += g->prefixlen;
  p = put(p, g->n, 2);
  for (i = 0; i < g->n; i++) {
    p = put(p, g->namelens[i], 2);
    memcpy(p, g->names[i], g->namelens[i]);
    p += g->namelens[i];
    p = put(p, g->fences != NULL ? g->fences[i] : 0, 8);
  }
  p = put(p, fnv1a(raw, rawlen - 4), 4);
  *textlen = MAGIC_LEN + b64_len(rawlen);
  text = malloc(*textlen + 1);
  if (text != NULL) {
    memcpy(text, MAGIC, MAGIC_LEN);
    b64_encode(raw, rawlen, text + MAGIC_LEN);
  }
  free(raw);
  return text;
}

int hilock_hold_export(hilock_hold *hh, char *buf, size_t size, size_t *len) {
  hilock__hold *h = (hilock__hold *)hh;
  hilock__grant g;
  char *text;
  size_t textlen = 0;
  int rc;
  if (len != NULL) *len = 0;
  if (h == NULL || h->fam == NULL || len == NULL) return HILOCK_EINVAL;
  if (h->fam->grant == NULL && h->fam->by_caller)
    return hilock__set_err(
        hilock__hold_err(h), HILOCK_ENOTSUP,
        "export: a %s's owner is its client id and thread id, not a token: "
        "its grant cannot be handed over (release it, and acquire it where "
        "it is needed)",
        h->fam->name);
  if (h->fam->grant == NULL)
    return hilock__set_err(hilock__hold_err(h), HILOCK_ENOTSUP,
                           "export: a %s's grant cannot be handed over",
                           h->fam->name);
  rc = hilock__hold_check(h, "export");
  if (rc != HILOCK_OK) return rc;
  if (hilock__hold_validity_ms(h) <= 0)
    return hilock__set_err(&h->err, HILOCK_ENOTOWNED,
                           "export: the grant was lost or lapsed");
  memset(&g, 0, sizeof(g));
  g.ttl_ms = h->ttl_ms;
  g.delay_ms = h->delay_ms;
  g.fence = h->fence;
  g.owner = h->owner;
  g.ownerlen = h->ownerlen;
  g.prefix = h->rt->prefix;
  g.prefixlen = h->rt->prefixlen;
  h->fam->grant(h, &g);
  text = encode(&g, &textlen);
  if (text == NULL) return HILOCK_ENOMEM;
  *len = textlen;
  if (buf == NULL || size <= textlen) {
    free(text);
    return hilock__set_err(&h->err, HILOCK_EINVAL,
                           "export: the buffer holds %zu bytes; the grant "
                           "needs %zu and a NUL",
                           buf == NULL ? (size_t)0 : size, textlen);
  }
  memcpy(buf, text, textlen + 1);
  free(text);
  /* Handed over: this handle forgets the grant (and stops renewing it). */
  hilock__hold_drop(h);
  return HILOCK_OK;
}

/* ## Adopt ---------------------------------------------------------------- */

static int adopt(hilock_client *c, const char *text, size_t len,
                 hilock_hold **out) {
  hilock__err *ce = hilock__client_err(c);
  hilock__grant g;
  hilock__hold *h = NULL;
  void *mem;
  int rc, owned;
  if (out != NULL) *out = NULL;
  if (c == NULL || out == NULL) return HILOCK_EINVAL;
  rc = hilock__grant_decode(text, len, &g, &mem, ce);
  if (rc != HILOCK_OK) return rc;
  if (g.prefixlen != c->rt.prefixlen ||
      memcmp(g.prefix, c->rt.prefix, g.prefixlen) != 0) {
    rc = hilock__set_err(ce, HILOCK_EINVAL,
                         "adopt: the grant belongs to a client with another "
                         "key prefix");
    grant_free(&g, mem);
    return rc;
  }
  switch (g.family) {
  case HILOCK__GRANT_LOCK: rc = hilock__lock_adopt(c, &g, &h); break;
  case HILOCK__GRANT_FAIR: rc = hilock__fair_adopt(c, &g, &h); break;
  case HILOCK__GRANT_SEQ: rc = hilock__seq_adopt(c, &g, &h); break;
  case HILOCK__GRANT_MULTI: rc = hilock__multi_adopt(c, &g, &h); break;
  case HILOCK__GRANT_SEG: rc = hilock__seg_adopt(c, &g, &h); break;
  default: rc = hilock__sem_adopt(c, &g, &h); break;
  }
  if (rc != HILOCK_OK) {
    /* The constructor's message is in the client's error. */
    if (rc == HILOCK_EINVAL && ce->msg[0] != '\0') {
      char why[sizeof(ce->msg)];
      memcpy(why, ce->msg, sizeof(why));
      hilock__set_err(ce, rc, "adopt: %.900s", why);
    }
    grant_free(&g, mem);
    return rc;
  }
  /* The exporter's lock delay goes with the grant: the adopter's renewals
   * push its marker, and its release clears it. */
  if (g.delay_ms > 0) {
    rc = h->fam->set_delay != NULL
             ? h->fam->set_delay(h, g.delay_ms)
             : hilock__set_err(&h->err, HILOCK_EINVAL,
                               "the exported grant is malformed (a lock "
                               "delay on a %s)", h->fam->name);
    if (rc != HILOCK_OK) {
      hilock__set_err(ce, rc, "adopt: %.900s", h->err.msg);
      hilock_hold_free((hilock_hold *)h);
      grant_free(&g, mem);
      return rc;
    }
  }
  memcpy(h->owner, g.owner, g.ownerlen);
  h->owner[g.ownerlen] = '\0';
  h->ownerlen = g.ownerlen;
  grant_free(&g, mem);
  hilock__hold_adopted(h, g.fence);
  /* One round trip: the family's renewal (a simple lock: its owner
   * check), whose reply sets the validity. */
  if (h->ttl_ms > 0) {
    rc = h->fam->renew(h);
  } else {
    rc = hilock_hold_owned((hilock_hold *)h, &owned);
    if (rc == HILOCK_OK && !owned)
      rc = hilock__set_err(&h->err, HILOCK_ENOTOWNED,
                           "another owner holds it or it was deleted");
  }
  if (rc != HILOCK_OK) {
    hilock__set_err(ce, rc, "adopt: %s%.900s",
                    rc == HILOCK_ENOTOWNED ? "the grant is gone: " : "",
                    h->err.msg);
    hilock_hold_free((hilock_hold *)h);
    return rc;
  }
  *out = (hilock_hold *)h;
  return HILOCK_OK;
}

int hilock_client_adopt(hilock_client *client, const char *text, size_t len,
                        hilock_hold **out) {
  HILOCK__CLIENT_CALL(client, out, adopt(client, text, len, out));
}

const char *hilock__hold_family(const hilock_hold *hh) {
  const hilock__hold *h = (const hilock__hold *)hh;
  return h != NULL && h->fam != NULL ? h->fam->name : "";
}

size_t hilock__hold_grant_name(const hilock_hold *hh, size_t i,
                               const char **name, size_t *len, int64_t *a) {
  const hilock__hold *h = (const hilock__hold *)hh;
  hilock__grant g;
  *name = "";
  *len = 0;
  *a = 0;
  if (h == NULL || h->fam == NULL || h->fam->grant == NULL) return 0;
  memset(&g, 0, sizeof(g));
  h->fam->grant(h, &g);
  if (i < g.n) {
    *name = g.names[i];
    *len = g.namelens[i];
  }
  *a = g.a;
  return g.n;
}
