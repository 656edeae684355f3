/* seal.c: see seal.h. */
#define _GNU_SOURCE
#include "comm/seal.h"
#include "le_bytes.h"
#include "../rt_error.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../../ir/folders.h" /* FU_PATH_BYTES */

static int init_rc = -1;
static void init_once(void) { init_rc = sodium_init() < 0 ? -1 : 0; }

int fu_seal_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_once);
    return init_rc;
}

void fu_secret_new(uint8_t secret[FU_SECRET_BYTES])
{
    fu_seal_init();
    randombytes_buf(secret, FU_SECRET_BYTES);
}

int fu_secret_load(const char *path, uint8_t secret[FU_SECRET_BYTES], char *err, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rt_error(err, n, "%s: cannot read the run secret: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    int rc = -1;
    if (fstat(fd, &st) != 0) {
        rt_error(err, n, "%s: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rt_error(err, n, "%s: the run secret is not a regular file", path);
    } else if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        rt_error(err, n, "%s: the run secret is readable or writable by others (mode %03o): refused; chmod 600 it",
                 path, (unsigned)(st.st_mode & 0777));
    } else if (st.st_size != FU_SECRET_BYTES) {
        rt_error(err, n, "%s: the run secret has %lld bytes, not %d", path, (long long)st.st_size, FU_SECRET_BYTES);
    } else if (read(fd, secret, FU_SECRET_BYTES) != FU_SECRET_BYTES) {
        rt_error(err, n, "%s: cannot read the run secret", path);
    } else {
        rc = 0;
    }
    close(fd);
    return rc;
}

int fu_secret_write(const char *path, const uint8_t secret[FU_SECRET_BYTES], char *err, size_t n)
{
    char tmp[FU_PATH_BYTES + 104];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        rt_error(err, n, "%s: %s", tmp, strerror(errno));
        return -1;
    }
    int ok = fchmod(fd, 0600) == 0 && write(fd, secret, FU_SECRET_BYTES) == FU_SECRET_BYTES && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        rt_error(err, n, "%s: cannot write the run secret: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* ---- handshake ----------------------------------------------------------- */

enum { HS_MAGIC = 0, HS_FLAGS = 4, HS_PK = 8, HS_SELF = 40, HS_PEER = 104, HS_BUILD = 168, HS_EPOCH = 176 };

void fu_hs_start(fu_hs *hs, const fu_link_auth *a, const char *expect_peer)
{
    fu_seal_init();
    crypto_kx_keypair(hs->pk, hs->sk);
    memset(hs->hello, 0, sizeof hs->hello);
    memcpy(hs->hello + HS_MAGIC, "FSH1", 4);
    hs->hello[HS_FLAGS] = (uint8_t)(crypto_aead_aes256gcm_is_available() ? 1 : 0);
    memcpy(hs->hello + HS_PK, hs->pk, 32);
    strncpy((char *)hs->hello + HS_SELF, a->self, 63);
    strncpy((char *)hs->hello + HS_PEER, expect_peer, 63);
    put64(hs->hello + HS_BUILD, a->build_id);
    put64(hs->hello + HS_EPOCH, (uint64_t)a->epoch);
}

int fu_hs_is_own(const fu_hs *hs, const uint8_t *peer, size_t len)
{
    return len == FU_HS_BYTES && memcmp(peer + HS_PK, hs->pk, 32) == 0;
}

/* BLAKE2b-256(key = secret, label || kx || transcript) */
static void direction_key(uint8_t out[32], const uint8_t *secret, const char *label, const uint8_t kx[32],
                          const uint8_t transcript[32])
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, secret, FU_SECRET_BYTES, 32);
    crypto_generichash_update(&st, (const uint8_t *)label, strlen(label));
    crypto_generichash_update(&st, kx, 32);
    crypto_generichash_update(&st, transcript, 32);
    crypto_generichash_final(&st, out, 32);
}

int fu_hs_finish(fu_hs *hs, const fu_link_auth *a, const char *expect_peer, const uint8_t *peer, size_t len,
                 int listener, fu_seal *s, uint8_t transcript[32], char *err, size_t n)
{
    int rc = -1;
    char name[65] = "", expects[65] = "";
    if (len != FU_HS_BYTES || memcmp(peer + HS_MAGIC, "FSH1", 4) != 0) {
        rt_error(err, n, "its hello is not fusion's sealed handshake (%zu bytes): an unsealed or foreign program", len);
        goto out;
    }
    memcpy(name, peer + HS_SELF, 64);
    memcpy(expects, peer + HS_PEER, 64);
    if (strcmp(name, expect_peer) != 0) {
        rt_error(err, n, "the peer says it is '%s', not '%s'", name, expect_peer);
        goto out;
    }
    if (strcmp(expects, a->self) != 0) {
        rt_error(err, n, "the peer expects '%s' at this end, not '%s'", expects, a->self);
        goto out;
    }
    if (get64(peer + HS_BUILD) != a->build_id) {
        rt_error(err, n, "the peer runs another compile (build %016" PRIx64 ", this program is build %016" PRIx64 ")",
                 get64(peer + HS_BUILD), a->build_id);
        goto out;
    }
    if ((int64_t)get64(peer + HS_EPOCH) != a->epoch) {
        rt_error(err, n, "the peer is of the run's epoch %" PRId64 ", this device of epoch %" PRId64,
                 (int64_t)get64(peer + HS_EPOCH), a->epoch);
        goto out;
    }
    uint8_t rx[32], tx[32];
    const uint8_t *ppk = peer + HS_PK;
    if ((listener ? crypto_kx_server_session_keys(rx, tx, hs->pk, hs->sk, ppk)
                  : crypto_kx_client_session_keys(rx, tx, hs->pk, hs->sk, ppk)) != 0) {
        rt_error(err, n, "the peer's ephemeral key is not a valid X25519 key");
        goto out;
    }
    crypto_generichash_state st; /* listener's hello first */
    crypto_generichash_init(&st, NULL, 0, 32);
    crypto_generichash_update(&st, listener ? hs->hello : peer, FU_HS_BYTES);
    crypto_generichash_update(&st, listener ? peer : hs->hello, FU_HS_BYTES);
    crypto_generichash_final(&st, transcript, 32);
    memset(s, 0, sizeof *s);
    /* kx's client tx = server rx: name each key by its direction */
    direction_key(s->tx_key, a->secret, listener ? "fusion link s2c" : "fusion link c2s", tx, transcript);
    direction_key(s->rx_key, a->secret, listener ? "fusion link c2s" : "fusion link s2c", rx, transcript);
    s->aes = (hs->hello[HS_FLAGS] & 1) && (peer[HS_FLAGS] & 1);
    sodium_memzero(rx, sizeof rx);
    sodium_memzero(tx, sizeof tx);
    rc = 0;
out:
    sodium_memzero(hs->sk, sizeof hs->sk);
    return rc;
}

/* ---- frames ---------------------------------------------------------------- */

size_t fu_seal_frame_split(fu_seal *s, uint8_t *buf, size_t clear_len, const uint8_t *src, size_t secret_len)
{
    uint8_t nonce[24] = { 0 };
    put64(buf, s->tx_count);
    memcpy(nonce, buf, 8);
    uint8_t *text = buf + FU_SEAL_PREFIX + clear_len, *tag = text + secret_len;
    const uint8_t *from = src ? src : text;
    size_t ad_len = FU_SEAL_PREFIX + clear_len; /* the counter and the clear bytes */
    if (s->aes)
        crypto_aead_aes256gcm_encrypt_detached(text, tag, NULL, from, secret_len, buf, ad_len, NULL, nonce, s->tx_key);
    else
        crypto_aead_xchacha20poly1305_ietf_encrypt_detached(text, tag, NULL, from, secret_len, buf, ad_len, NULL, nonce,
                                                            s->tx_key);
    s->tx_count++;
    return clear_len + secret_len + FU_SEAL_OVERHEAD;
}

size_t fu_seal_frame(fu_seal *s, uint8_t *buf, size_t plain_len)
{
    return fu_seal_frame_split(s, buf, 0, NULL, plain_len);
}

int fu_open_frame_split(fu_seal *s, uint8_t *buf, size_t len, size_t clear_len, uint8_t **plain, size_t *plain_len,
                        char *err, size_t n)
{
    if (len < FU_SEAL_OVERHEAD + clear_len) {
        rt_error(err, n, "a %zu-byte frame, shorter than a sealed frame's %zu bytes of counter, header and tag", len,
                 FU_SEAL_OVERHEAD + clear_len);
        return -1;
    }
    uint64_t count = get64(buf);
    if (count != s->rx_count) {
        rt_error(err, n, "frame number %" PRIu64 " where %" PRIu64 " was due (%s)", count, s->rx_count,
                 count < s->rx_count ? "a repeat or a replay" : "frames missing, or forged");
        return -1;
    }
    uint8_t nonce[24] = { 0 };
    memcpy(nonce, buf, 8);
    size_t k = len - FU_SEAL_OVERHEAD - clear_len, ad_len = FU_SEAL_PREFIX + clear_len;
    uint8_t *text = buf + ad_len, *tag = text + k;
    int rc = s->aes ? crypto_aead_aes256gcm_decrypt_detached(text, NULL, text, k, tag, buf, ad_len, nonce, s->rx_key)
                    : crypto_aead_xchacha20poly1305_ietf_decrypt_detached(text, NULL, text, k, tag, buf, ad_len, nonce,
                                                                          s->rx_key);
    if (rc != 0) {
        rt_error(err, n,
                 "frame %" PRIu64 " does not authenticate (altered, or sealed under another key: another "
                 "run's secret or connection)",
                 count);
        return -1;
    }
    s->rx_count++;
    *plain = buf + FU_SEAL_PREFIX;
    *plain_len = len - FU_SEAL_OVERHEAD;
    return 0;
}

int fu_open_frame(fu_seal *s, uint8_t *buf, size_t len, uint8_t **plain, size_t *plain_len, char *err, size_t n)
{
    return fu_open_frame_split(s, buf, len, 0, plain, plain_len, err, n);
}

/* ---- boxes ----------------------------------------------------------------- */

static void box_key(uint8_t key[32], const uint8_t *secret, const char *context)
{
    char label[128];
    snprintf(label, sizeof label, "fusion box %s", context);
    crypto_generichash(key, 32, (const uint8_t *)label, strlen(label), secret, FU_SECRET_BYTES);
}

void fu_box_seal(const uint8_t *secret, const char *context, const uint8_t *ad, size_t ad_len, const void *msg,
                 size_t len, uint8_t *out, uint8_t *nonce_out)
{
    uint8_t key[32];
    fu_seal_init();
    box_key(key, secret, context);
    randombytes_buf(out, 24);
    if (nonce_out)
        memcpy(nonce_out, out, 24);
    crypto_aead_xchacha20poly1305_ietf_encrypt(out + 24, NULL, msg, len, ad, ad_len, NULL, out, key);
    sodium_memzero(key, sizeof key);
}

int fu_box_open(const uint8_t *secret, const char *context, const uint8_t *ad, size_t ad_len, const uint8_t *box,
                size_t len, void *out, uint8_t *nonce_out)
{
    if (len < FU_BOX_OVERHEAD)
        return -1;
    uint8_t key[32];
    fu_seal_init();
    box_key(key, secret, context);
    int rc = crypto_aead_xchacha20poly1305_ietf_decrypt(out, NULL, NULL, box + 24, len - 24, ad, ad_len, box, key);
    sodium_memzero(key, sizeof key);
    if (rc == 0 && nonce_out)
        memcpy(nonce_out, box, 24);
    return rc == 0 ? 0 : -1;
}
