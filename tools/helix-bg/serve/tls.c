/* tls.c — HTTPS for helix-bg serve: --ssl-cert / --ssl-key read and checked
 * before the server listens, so a bad file is named at start-up instead of
 * every handshake failing later.
 *
 * libmicrohttpd does the TLS itself (GnuTLS inside, MHD_USE_TLS with the PEM
 * text of both files in memory: MHD_OPTION_HTTPS_MEM_CERT / _KEY). Its own
 * start-up error says neither which file is wrong nor why, so where GnuTLS'
 * headers were found at build time (HX_HAVE_GNUTLS; the library is already in
 * the process through libmicrohttpd) each file is parsed here on its own and
 * then the pair is tried together: a certificate that is not one, a key that
 * is not one, and a key that belongs to another certificate each get their
 * own message. Without GnuTLS' headers only the PEM armour is checked and
 * libmicrohttpd's message is passed on (http.c). */
#include "serve.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <microhttpd.h>
#ifdef HX_HAVE_GNUTLS
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#endif

enum { TLS_MAX_FILE = 1 << 20 };   /* a PEM certificate chain or key is a few KiB; 1 MiB is plenty */

/* The whole file as a NUL-terminated string (*out malloc'ed, *n its length). */
static int read_pem(const char *flag, const char *path, char **out, size_t *n, hx_error *e) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(e->msg, sizeof e->msg, "%s %s: %s", flag, path, strerror(errno));
        return 1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode) || st.st_size > TLS_MAX_FILE) {
        snprintf(e->msg, sizeof e->msg, "%s %s: not a regular file of at most 1 MiB", flag, path);
        fclose(f);
        return 1;
    }
    char *p = malloc((size_t)st.st_size + 1);
    size_t got = p ? fread(p, 1, (size_t)st.st_size, f) : 0;
    int rerr = ferror(f);
    fclose(f);
    if (!p || rerr || got != (size_t)st.st_size) {
        snprintf(e->msg, sizeof e->msg, "%s %s: %s", flag, path, !p ? "out of memory" : "read error");
        free(p);
        return 1;
    }
    p[got] = 0;
    *out = p;
    *n = got;
    return 0;
}

/* Frees a buffer that held key material, wiping it first. */
static void free_secret(char *p, size_t n) {
    if (!p) return;
    volatile char *v = p;
    for (size_t i = 0; i < n; i++) v[i] = 0;
    free(p);
}

#ifdef HX_HAVE_GNUTLS
/* Parses each file alone, then the pair: which one is wrong, and why. */
static int check_gnutls(const srv_config *c, const char *cert, size_t cert_n, const char *key, size_t key_n,
                        hx_error *e) {
    gnutls_datum_t cd = {(unsigned char *)cert, (unsigned)cert_n}, kd = {(unsigned char *)key, (unsigned)key_n};
    gnutls_x509_crt_t *crts = NULL;
    unsigned n_crt = 0;
    int r = gnutls_x509_crt_list_import2(&crts, &n_crt, &cd, GNUTLS_X509_FMT_PEM, 0);
    if (r < 0 || n_crt == 0) {
        snprintf(e->msg, sizeof e->msg, "--ssl-cert %s: not a PEM certificate (%s)", c->ssl_cert,
                 r < 0 ? gnutls_strerror(r) : "none found");
        return 1;
    }
    for (unsigned i = 0; i < n_crt; i++) gnutls_x509_crt_deinit(crts[i]);
    gnutls_free(crts);
    gnutls_x509_privkey_t pk;
    if ((r = gnutls_x509_privkey_init(&pk)) < 0) {
        snprintf(e->msg, sizeof e->msg, "TLS: %s", gnutls_strerror(r));
        return 1;
    }
    r = gnutls_x509_privkey_import2(pk, &kd, GNUTLS_X509_FMT_PEM, NULL, 0);
    gnutls_x509_privkey_deinit(pk);
    if (r < 0) {
        snprintf(e->msg, sizeof e->msg, "--ssl-key %s: not an unencrypted PEM private key (%s)", c->ssl_key,
                 gnutls_strerror(r));
        return 1;
    }
    gnutls_certificate_credentials_t cred;
    if ((r = gnutls_certificate_allocate_credentials(&cred)) < 0) {
        snprintf(e->msg, sizeof e->msg, "TLS: %s", gnutls_strerror(r));
        return 1;
    }
    r = gnutls_certificate_set_x509_key_mem2(cred, &cd, &kd, GNUTLS_X509_FMT_PEM, NULL, 0);
    gnutls_certificate_free_credentials(cred);
    if (r < 0) {
        if (r == GNUTLS_E_CERTIFICATE_KEY_MISMATCH)
            snprintf(e->msg, sizeof e->msg, "--ssl-key %s is not the key of the certificate in --ssl-cert %s", c->ssl_key,
                     c->ssl_cert);
        else
            snprintf(e->msg, sizeof e->msg, "--ssl-cert %s with --ssl-key %s: %s", c->ssl_cert, c->ssl_key,
                     gnutls_strerror(r));
        return 1;
    }
    return 0;
}
#endif

int srv_tls_load(srv *s, hx_error *e) {
    const srv_config *c = &s->cfg;
    if (!c->ssl_cert) return 0;
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        snprintf(e->msg, sizeof e->msg, "--ssl-cert: this libmicrohttpd was built without TLS (MHD_FEATURE_TLS); "
                 "install one built with GnuTLS (Debian's is) or put a TLS proxy in front");
        return 1;
    }
    char *cert = NULL, *key = NULL;
    size_t cert_n = 0, key_n = 0;
    if (read_pem("--ssl-cert", c->ssl_cert, &cert, &cert_n, e)) return 1;
    if (read_pem("--ssl-key", c->ssl_key, &key, &key_n, e)) { free(cert); return 1; }
    int rc = 1;
    /* the armour first: catches swapped or empty files with a plain message */
    if (!strstr(cert, "-----BEGIN CERTIFICATE-----"))
        snprintf(e->msg, sizeof e->msg, "--ssl-cert %s: no PEM certificate in it (-----BEGIN CERTIFICATE-----)%s",
                 c->ssl_cert, strstr(cert, "PRIVATE KEY-----") ? "; it holds a private key: swapped with --ssl-key?" : "");
    else if (!strstr(key, "PRIVATE KEY-----"))
        snprintf(e->msg, sizeof e->msg, "--ssl-key %s: no PEM private key in it (-----BEGIN ... PRIVATE KEY-----)%s",
                 c->ssl_key, strstr(key, "-----BEGIN CERTIFICATE-----") ? "; it holds a certificate: swapped with --ssl-cert?" : "");
    else if (strstr(key, "ENCRYPTED PRIVATE KEY-----") || strstr(key, "Proc-Type: 4,ENCRYPTED"))
        snprintf(e->msg, sizeof e->msg, "--ssl-key %s: the key is encrypted; give an unencrypted one "
                 "(openssl pkey -in KEY -out PLAIN.pem)", c->ssl_key);
#ifdef HX_HAVE_GNUTLS
    else if (check_gnutls(c, cert, cert_n, key, key_n, e)) {}
#endif
    else rc = 0;
    if (rc) {
        free(cert);
        free_secret(key, key_n);
        return 1;
    }
    s->tls_cert = cert;
    s->tls_key = key;
    s->tls_key_n = key_n;
    return 0;
}

void srv_tls_free(srv *s) {
    free(s->tls_cert);
    free_secret(s->tls_key, s->tls_key_n);
    s->tls_cert = s->tls_key = NULL;
    s->tls_key_n = 0;
}
