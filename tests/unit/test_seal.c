/* test_seal.c: runtime/comm/seal.h, the links' security, end to end in one
 * process: both ends of a handshake, frames sealed by one end and opened
 * (or refused) by the other, the run secret file, and boxes.
 *
 * Every refusal is checked twice over: the call says -1 with a message that
 * names the cause, and the receiver's state did not move (the next genuine
 * frame still opens), since a link that advanced on a forged frame could
 * be desynchronised by anyone on the wire.
 */
#include "check.h"
#include "comm/seal.h"

#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define ERR   512
#define BUILD 0x0123456789abcdefull
#define EPOCH 7

/* ---- helpers --------------------------------------------------------------- */

/* One end of a link: who it is and whom it expects. */
typedef struct {
    fu_link_auth auth;
    const char *expect;
} end;

static end make_end(const uint8_t *secret, const char *self, const char *expect)
{
    end e = { { secret, self, BUILD, EPOCH }, expect };
    return e;
}

/* A finished handshake: each end's keys, transcript, result and message. */
typedef struct {
    fu_hs hs[2]; /* 0: the listener, 1: the connector */
    fu_seal s[2];
    uint8_t transcript[2][32];
    int rc[2];
    char err[2][ERR];
} link_pair;

/* Both ends start, then each finishes with the other's hello, as
 * transport.c does over a socket. */
static void handshake(link_pair *p, const end *listener, const end *connector)
{
    memset(p, 0, sizeof *p);
    fu_hs_start(&p->hs[0], &listener->auth, listener->expect);
    fu_hs_start(&p->hs[1], &connector->auth, connector->expect);
    p->rc[0] = fu_hs_finish(&p->hs[0], &listener->auth, listener->expect, p->hs[1].hello, FU_HS_BYTES, 1, &p->s[0],
                            p->transcript[0], p->err[0], ERR);
    p->rc[1] = fu_hs_finish(&p->hs[1], &connector->auth, connector->expect, p->hs[0].hello, FU_HS_BYTES, 0, &p->s[1],
                            p->transcript[1], p->err[1], ERR);
}

/* A good pair (listener "main", connector "worker1") under secret. */
static void good_pair(link_pair *p, const uint8_t *secret)
{
    end l = make_end(secret, "main", "worker1"), c = make_end(secret, "worker1", "main");
    handshake(p, &l, &c);
}

/* Seals len bytes of msg with s into frame (len + FU_SEAL_OVERHEAD bytes, the
 * layout fu_seal_frame wants); the sealed length. */
static size_t seal_msg(fu_seal *s, const void *msg, size_t len, uint8_t *frame)
{
    if (len)
        memcpy(frame + FU_SEAL_PREFIX, msg, len);
    return fu_seal_frame(s, frame, len);
}

/* Opens a copy of frame (the open is in place, and callers keep the
 * original to replay or alter it); the plain text into plain (when not
 * NULL), its length into *plain_len. */
static int open_copy(fu_seal *s, const uint8_t *frame, size_t len, uint8_t *plain, size_t *plain_len, char *err)
{
    uint8_t *buf = malloc(len ? len : 1), *p = NULL;
    size_t k = 0;
    if (len)
        memcpy(buf, frame, len);
    err[0] = '\0';
    int rc = fu_open_frame(s, buf, len, &p, &k, err, ERR);
    if (rc == 0) {
        if (p != buf + FU_SEAL_PREFIX)
            rc = -2; /* the plain text must be in place, after the counter */
        if (plain && k)
            memcpy(plain, p, k);
        if (plain_len)
            *plain_len = k;
    }
    free(buf);
    return rc;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void set_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Forces the cipher on both ends (the hello only says what each end can
 * run; the test wants both AEADs whatever this CPU prefers). */
static void force_cipher(link_pair *p, int aes)
{
    p->s[0].aes = aes;
    p->s[1].aes = aes;
}

static const char *cipher_name(int aes) { return aes ? "AES-256-GCM" : "XChaCha20-Poly1305"; }

/* ---- a good link ------------------------------------------------------------ */

static void test_round_trip(int aes)
{
    fprintf(stderr, "round trip, %s\n", cipher_name(aes));
    uint8_t secret[FU_SECRET_BYTES];
    fu_secret_new(secret);
    link_pair p;
    good_pair(&p, secret);
    CHECK_INT(0, p.rc[0]);
    CHECK_INT(0, p.rc[1]);
    CHECK(memcmp(p.transcript[0], p.transcript[1], 32) == 0);
    /* each end's sending key is the other's receiving key, and the two
     * directions differ (else a frame could be reflected back) */
    CHECK(memcmp(p.s[0].tx_key, p.s[1].rx_key, 32) == 0);
    CHECK(memcmp(p.s[0].rx_key, p.s[1].tx_key, 32) == 0);
    CHECK(memcmp(p.s[0].tx_key, p.s[0].rx_key, 32) != 0);
    CHECK_INT(0, p.s[0].tx_count + p.s[0].rx_count + p.s[1].tx_count + p.s[1].rx_count);
    /* the ephemeral secret keys are wiped (forward secrecy) */
    CHECK(sodium_is_zero(p.hs[0].sk, 32));
    CHECK(sodium_is_zero(p.hs[1].sk, 32));
    /* both ends offer AES exactly when this CPU has it */
    CHECK_INT(crypto_aead_aes256gcm_is_available() ? 1 : 0, p.s[0].aes);
    CHECK_INT(p.s[0].aes, p.s[1].aes);
    force_cipher(&p, aes);

    /* several frames each way, interleaved, of sizes from empty to 64 KiB */
    static const size_t sizes[] = { 0, 1, 15, 16, 17, 100, 4096, 65536 };
    enum { N = sizeof sizes / sizeof sizes[0] };
    uint8_t *msg = malloc(65536), *frame = malloc(65536 + FU_SEAL_OVERHEAD), *got = malloc(65536);
    char err[ERR];
    for (int i = 0; i < N; i++) {
        for (int dir = 0; dir < 2; dir++) {
            fu_seal *tx = &p.s[dir], *rx = &p.s[1 - dir];
            size_t len = sizes[i];
            randombytes_buf(msg, len);
            size_t sealed = seal_msg(tx, msg, len, frame);
            CHECK_INT(len + FU_SEAL_OVERHEAD, sealed);
            CHECK_INT(i, le64(frame)); /* the counter, in clear */
            CHECK_INT(i + 1, tx->tx_count);
            if (len >= 16) /* it is encrypted */
                CHECK(memcmp(frame + FU_SEAL_PREFIX, msg, len) != 0);
            size_t got_len = 12345;
            int rc = open_copy(rx, frame, sealed, got, &got_len, err);
            CHECK_INT(0, rc);
            if (rc != 0)
                fprintf(stderr, "  frame %d (%zu bytes, %s): %s\n", i, len,
                        dir ? "connector to listener" : "listener to connector", err);
            CHECK_INT(len, got_len);
            CHECK(len == 0 || memcmp(got, msg, len) == 0);
            CHECK_INT(i + 1, rx->rx_count);
        }
    }
    free(msg);
    free(frame);
    free(got);
}

/* ---- frames that must not open ---------------------------------------------- */

static void test_frame_refusals(int aes)
{
    fprintf(stderr, "frame refusals, %s\n", cipher_name(aes));
    uint8_t secret[FU_SECRET_BYTES], other[FU_SECRET_BYTES];
    fu_secret_new(secret);
    fu_secret_new(other);
    link_pair p;
    good_pair(&p, secret);
    CHECK_INT(0, p.rc[0] | p.rc[1]);
    force_cipher(&p, aes);
    fu_seal *L = &p.s[0], *C = &p.s[1];
    char err[ERR];
    uint8_t f0[64], f1[64], f2[64], got[64];
    size_t got_len;
    static const char m0[] = "step 0 gradients", m1[] = "step 1 gradients", m2[] = "step 2 gradients";

    /* a replay: the same bytes twice */
    size_t n0 = seal_msg(L, m0, sizeof m0, f0);
    CHECK_INT(0, open_copy(C, f0, n0, got, &got_len, err));
    CHECK_INT(-1, open_copy(C, f0, n0, got, &got_len, err));
    CHECK_CONTAINS(err, "replay");
    CHECK_INT(1, C->rx_count);

    /* out of order: frame 2 before frame 1 is refused, then both open in order */
    size_t n1 = seal_msg(L, m1, sizeof m1, f1);
    size_t n2 = seal_msg(L, m2, sizeof m2, f2);
    CHECK_INT(-1, open_copy(C, f2, n2, got, &got_len, err));
    CHECK_CONTAINS(err, "missing");
    CHECK_INT(1, C->rx_count);
    CHECK_INT(0, open_copy(C, f1, n1, got, &got_len, err));
    CHECK(got_len == sizeof m1 && memcmp(got, m1, sizeof m1) == 0);
    CHECK_INT(0, open_copy(C, f2, n2, got, &got_len, err));
    CHECK(got_len == sizeof m2 && memcmp(got, m2, sizeof m2) == 0);
    CHECK_INT(3, C->rx_count);
    /* and frame 1 again, now behind: a replay too */
    CHECK_INT(-1, open_copy(C, f1, n1, got, &got_len, err));
    CHECK_CONTAINS(err, "replay");

    /* every single-bit flip of a small frame (counter, ciphertext, tag) */
    uint8_t f3[8 + FU_SEAL_OVERHEAD], bad[8 + FU_SEAL_OVERHEAD];
    size_t n3 = seal_msg(L, "8 bytes!", 8, f3);
    CHECK_INT(8 + FU_SEAL_OVERHEAD, n3);
    int opened = 0;
    for (size_t bit = 0; bit < n3 * 8; bit++) {
        memcpy(bad, f3, n3);
        bad[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        opened += open_copy(C, bad, n3, NULL, NULL, err) == 0;
    }
    CHECK_INT(0, opened);
    CHECK_INT(3, C->rx_count);
    CHECK_INT(0, open_copy(C, f3, n3, got, &got_len, err));
    CHECK(got_len == 8 && memcmp(got, "8 bytes!", 8) == 0);
    CHECK_INT(4, C->rx_count);

    /* sealed under another secret (another run), at the expected counter,
     * so only the authentication can refuse it */
    link_pair q;
    good_pair(&q, other);
    CHECK_INT(0, q.rc[0] | q.rc[1]);
    force_cipher(&q, aes);
    q.s[0].tx_count = C->rx_count;
    uint8_t f4[64];
    size_t n4 = seal_msg(&q.s[0], m0, sizeof m0, f4);
    CHECK_INT(-1, open_copy(C, f4, n4, got, &got_len, err));
    CHECK_CONTAINS(err, "does not authenticate");
    /* the same secret but another connection (other ephemeral keys) */
    link_pair r;
    good_pair(&r, secret);
    force_cipher(&r, aes);
    r.s[0].tx_count = C->rx_count;
    n4 = seal_msg(&r.s[0], m0, sizeof m0, f4);
    CHECK_INT(-1, open_copy(C, f4, n4, got, &got_len, err));
    CHECK_CONTAINS(err, "does not authenticate");
    /* a frame reflected back at its sender, counter matching */
    C->tx_count = C->rx_count;
    n4 = seal_msg(C, m0, sizeof m0, f4);
    CHECK_INT(-1, open_copy(C, f4, n4, got, &got_len, err));
    CHECK_CONTAINS(err, "does not authenticate");
    CHECK_INT(4, C->rx_count);

    /* random bytes of 0..100 and 1000 bytes, as they come and with the due
     * counter put in front (so the tag, not the counter, refuses them) */
    uint8_t noise[1000];
    int noise_opened = 0, noise_silent = 0;
    for (size_t i = 0; i <= 101; i++) {
        size_t len = i <= 100 ? i : 1000;
        for (int with_counter = 0; with_counter < 2; with_counter++) {
            randombytes_buf(noise, len);
            if (with_counter && len >= 8)
                set_le64(noise, C->rx_count);
            err[0] = '\0';
            noise_opened += open_copy(C, noise, len, NULL, NULL, err) == 0;
            noise_silent += err[0] == '\0'; /* a refusal must say why */
        }
    }
    CHECK_INT(0, noise_opened);
    CHECK_INT(0, noise_silent);
    CHECK_INT(4, C->rx_count);

    /* shorter than counter + tag, even with the due counter */
    for (size_t len = 0; len < FU_SEAL_OVERHEAD; len++) {
        memset(noise, 0, sizeof noise);
        if (len >= 8)
            set_le64(noise, C->rx_count);
        CHECK_INT(-1, open_copy(C, noise, len, NULL, NULL, err));
        CHECK_CONTAINS(err, "shorter");
    }
    CHECK_INT(4, C->rx_count);

    /* after all that, the link still works: the next genuine frame opens */
    L->tx_count = 4;
    uint8_t f5[64];
    size_t n5 = seal_msg(L, m2, sizeof m2, f5);
    CHECK_INT(0, open_copy(C, f5, n5, got, &got_len, err));
    CHECK(got_len == sizeof m2 && memcmp(got, m2, sizeof m2) == 0);
    CHECK_INT(5, C->rx_count);
}

/* ---- handshakes that must fail ------------------------------------------------ */

/* The listener l finishes with hello (len bytes); its rc, err in err. */
static int finish_with(const end *l, const uint8_t *hello, size_t len, char *err)
{
    fu_hs hs;
    fu_seal s;
    uint8_t t[32];
    fu_hs_start(&hs, &l->auth, l->expect);
    err[0] = '\0';
    int rc = fu_hs_finish(&hs, &l->auth, l->expect, hello, len, 1, &s, t, err, ERR);
    if (!sodium_is_zero(hs.sk, 32))
        rc = -2; /* the ephemeral secret key must be wiped, refused or not */
    return rc;
}

/* The hello a connector c sends. */
static void hello_of(const end *c, uint8_t hello[FU_HS_BYTES])
{
    fu_hs hs;
    fu_hs_start(&hs, &c->auth, c->expect);
    memcpy(hello, hs.hello, FU_HS_BYTES);
}

static void test_handshake_refusals(void)
{
    fprintf(stderr, "handshake refusals\n");
    uint8_t secret[FU_SECRET_BYTES], other[FU_SECRET_BYTES];
    fu_secret_new(secret);
    fu_secret_new(other);
    end l = make_end(secret, "main", "worker1");
    uint8_t hello[FU_HS_BYTES + 1];
    char err[ERR];

    /* the hello's layout, as seal.h documents it */
    end c = make_end(secret, "worker1", "main");
    hello_of(&c, hello);
    CHECK(memcmp(hello, "FSH1", 4) == 0);
    CHECK_STR("worker1", (const char *)hello + 40);
    CHECK_STR("main", (const char *)hello + 104);
    CHECK(le64(hello + 168) == BUILD);
    CHECK_INT(EPOCH, (int64_t)le64(hello + 176));
    CHECK_INT(0, finish_with(&l, hello, FU_HS_BYTES, err));

    /* the peer is someone else */
    end c2 = make_end(secret, "worker2", "main");
    hello_of(&c2, hello);
    CHECK_INT(-1, finish_with(&l, hello, FU_HS_BYTES, err));
    CHECK_CONTAINS(err, "says it is 'worker2', not 'worker1'");

    /* the peer expects someone else at this end */
    end c3 = make_end(secret, "worker1", "worker9");
    hello_of(&c3, hello);
    CHECK_INT(-1, finish_with(&l, hello, FU_HS_BYTES, err));
    CHECK_CONTAINS(err, "expects 'worker9'");

    /* another compile */
    end c4 = make_end(secret, "worker1", "main");
    c4.auth.build_id = BUILD + 1;
    hello_of(&c4, hello);
    CHECK_INT(-1, finish_with(&l, hello, FU_HS_BYTES, err));
    CHECK_CONTAINS(err, "another compile");

    /* another epoch of the run */
    end c5 = make_end(secret, "worker1", "main");
    c5.auth.epoch = EPOCH + 1;
    hello_of(&c5, hello);
    CHECK_INT(-1, finish_with(&l, hello, FU_HS_BYTES, err));
    CHECK_CONTAINS(err, "epoch 8");

    /* not our handshake: wrong magic, one byte short or long, nothing */
    hello_of(&c, hello);
    hello[0] = 'X';
    CHECK_INT(-1, finish_with(&l, hello, FU_HS_BYTES, err));
    CHECK_CONTAINS(err, "not fusion's sealed handshake");
    hello_of(&c, hello);
    CHECK_INT(-1, finish_with(&l, hello, FU_HS_BYTES - 1, err));
    CHECK_CONTAINS(err, "not fusion's sealed handshake (183 bytes)");
    hello[FU_HS_BYTES] = 0;
    CHECK_INT(-1, finish_with(&l, hello, FU_HS_BYTES + 1, err));
    CHECK_CONTAINS(err, "not fusion's sealed handshake (185 bytes)");
    CHECK_INT(-1, finish_with(&l, hello, 0, err));
    CHECK_CONTAINS(err, "(0 bytes)");

    /* an ephemeral key of low order (all zero): no shared key comes of it */
    hello_of(&c, hello);
    memset(hello + 8, 0, 32);
    CHECK_INT(-1, finish_with(&l, hello, FU_HS_BYTES, err));
    CHECK_CONTAINS(err, "X25519");

    /* different secrets: nothing in the clear tells, both finish, the
     * transcripts agree, but neither end's confirmation opens at the other */
    end lo = make_end(secret, "main", "worker1"), co = make_end(other, "worker1", "main");
    link_pair p;
    handshake(&p, &lo, &co);
    CHECK_INT(0, p.rc[0]);
    CHECK_INT(0, p.rc[1]);
    CHECK(memcmp(p.transcript[0], p.transcript[1], 32) == 0);
    for (int dir = 0; dir < 2; dir++) {
        uint8_t frame[32 + FU_SEAL_OVERHEAD];
        size_t n = seal_msg(&p.s[dir], p.transcript[dir], 32, frame);
        CHECK_INT(-1, open_copy(&p.s[1 - dir], frame, n, NULL, NULL, err));
        CHECK_CONTAINS(err, "does not authenticate");
    }
    /* the same with one secret: the confirmations open, both ways */
    good_pair(&p, secret);
    for (int dir = 0; dir < 2; dir++) {
        uint8_t frame[32 + FU_SEAL_OVERHEAD], got[32];
        size_t n = seal_msg(&p.s[dir], p.transcript[dir], 32, frame), k = 0;
        CHECK_INT(0, open_copy(&p.s[1 - dir], frame, n, got, &k, err));
        CHECK(k == 32 && memcmp(got, p.transcript[1 - dir], 32) == 0);
    }

    /* a TCP self-connect: an end sees its own hello */
    CHECK_INT(1, fu_hs_is_own(&p.hs[0], p.hs[0].hello, FU_HS_BYTES));
    CHECK_INT(1, fu_hs_is_own(&p.hs[1], p.hs[1].hello, FU_HS_BYTES));
    CHECK_INT(0, fu_hs_is_own(&p.hs[0], p.hs[1].hello, FU_HS_BYTES));
    CHECK_INT(0, fu_hs_is_own(&p.hs[1], p.hs[0].hello, FU_HS_BYTES));
    CHECK_INT(0, fu_hs_is_own(&p.hs[0], p.hs[0].hello, FU_HS_BYTES - 1));
    CHECK_INT(0, fu_hs_is_own(&p.hs[0], p.hs[0].hello, 0));
}

/* ---- the secret file ---------------------------------------------------------- */

static int write_file(const char *path, const void *data, size_t len, mode_t mode)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(data, 1, len, f) == len;
    ok = fclose(f) == 0 && ok;
    return ok && chmod(path, mode) == 0 ? 0 : -1;
}

static void test_secret_file(void)
{
    fprintf(stderr, "secret files\n");
    char dir[] = "/tmp/test_seal.XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp under /tmp");
        return;
    }
    char path[256], tmp[300], bad[256], missing[256], err[ERR];
    snprintf(path, sizeof path, "%s/run.key", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    snprintf(bad, sizeof bad, "%s/short.key", dir);
    snprintf(missing, sizeof missing, "%s/no-such.key", dir);
    uint8_t secret[FU_SECRET_BYTES], back[FU_SECRET_BYTES];
    fu_secret_new(secret);
    CHECK(!sodium_is_zero(secret, sizeof secret));

    /* written 0600 (whatever the umask), and read back the same */
    mode_t old_umask = umask(0);
    CHECK_INT(0, fu_secret_write(path, secret, err, ERR));
    umask(old_umask);
    struct stat st;
    CHECK_INT(0, stat(path, &st));
    CHECK_INT(0600, st.st_mode & 0777);
    CHECK_INT(FU_SECRET_BYTES, st.st_size);
    CHECK(access(tmp, F_OK) != 0); /* no temporary left behind */
    memset(back, 0, sizeof back);
    CHECK_INT(0, fu_secret_load(path, back, err, ERR));
    CHECK(memcmp(secret, back, sizeof secret) == 0);

    /* written again over the old one: the new secret replaces it */
    uint8_t second[FU_SECRET_BYTES];
    fu_secret_new(second);
    CHECK_INT(0, fu_secret_write(path, second, err, ERR));
    CHECK_INT(0, fu_secret_load(path, back, err, ERR));
    CHECK(memcmp(second, back, sizeof second) == 0);

    /* readable by others: refused, however right its contents */
    CHECK_INT(0, chmod(path, 0644));
    CHECK_INT(-1, fu_secret_load(path, back, err, ERR));
    CHECK_CONTAINS(err, "mode 644");
    CHECK_CONTAINS(err, path);
    CHECK_INT(0, chmod(path, 0640));
    CHECK_INT(-1, fu_secret_load(path, back, err, ERR));
    CHECK_CONTAINS(err, "mode 640");
    CHECK_INT(0, chmod(path, 0400)); /* the owner alone, read-only: fine */
    CHECK_INT(0, fu_secret_load(path, back, err, ERR));
    CHECK_INT(0, chmod(path, 0600));

    /* 31 and 33 bytes */
    CHECK_INT(0, write_file(bad, secret, 31, 0600));
    CHECK_INT(-1, fu_secret_load(bad, back, err, ERR));
    CHECK_CONTAINS(err, "31 bytes");
    uint8_t longer[33] = { 0 };
    CHECK_INT(0, write_file(bad, longer, 33, 0600));
    CHECK_INT(-1, fu_secret_load(bad, back, err, ERR));
    CHECK_CONTAINS(err, "33 bytes");

    /* missing: the message names the path */
    CHECK_INT(-1, fu_secret_load(missing, back, err, ERR));
    CHECK_CONTAINS(err, missing);
    /* a directory is not a secret */
    CHECK_INT(-1, fu_secret_load(dir, back, err, ERR));
    CHECK_CONTAINS(err, "not a regular file");
    /* nowhere to write */
    char nowhere[300];
    snprintf(nowhere, sizeof nowhere, "%s/no-such-dir/run.key", dir);
    CHECK_INT(-1, fu_secret_write(nowhere, secret, err, ERR));
    CHECK_CONTAINS(err, "no-such-dir");

    unlink(path);
    unlink(bad);
    CHECK_INT(0, rmdir(dir)); /* nothing else was left in it */
}

/* ---- boxes ---------------------------------------------------------------------- */

static void test_boxes(void)
{
    fprintf(stderr, "boxes\n");
    uint8_t secret[FU_SECRET_BYTES], other[FU_SECRET_BYTES];
    fu_secret_new(secret);
    fu_secret_new(other);
    static const char msg[] = "{\"ask\":\"standby\",\"device\":\"worker1\"}";
    const uint8_t ad[] = { 1, 2, 3, 4, 5, 6, 7, 8 }, other_ad[] = { 1, 2, 3, 4, 5, 6, 7, 9 };
    enum { LEN = sizeof msg, BOX = LEN + FU_BOX_OVERHEAD };
    uint8_t box[BOX], box2[BOX], bad[BOX], nonce[24], nonce_back[24];
    char out[LEN];

    fu_box_seal(secret, "broker request", ad, sizeof ad, msg, LEN, box, nonce);
    CHECK(memcmp(box, nonce, 24) == 0);
    memset(out, 0, sizeof out);
    CHECK_INT(0, fu_box_open(secret, "broker request", ad, sizeof ad, box, BOX, out, nonce_back));
    CHECK(memcmp(out, msg, LEN) == 0);
    CHECK(memcmp(nonce, nonce_back, 24) == 0);
    /* a fresh nonce every time: the same message seals differently */
    fu_box_seal(secret, "broker request", ad, sizeof ad, msg, LEN, box2, NULL);
    CHECK(memcmp(box, box2, BOX) != 0);
    CHECK_INT(0, fu_box_open(secret, "broker request", ad, sizeof ad, box2, BOX, out, NULL));

    CHECK_INT(-1, fu_box_open(secret, "broker reply", ad, sizeof ad, box, BOX, out, NULL));
    CHECK_INT(-1, fu_box_open(secret, "broker request", other_ad, sizeof other_ad, box, BOX, out, NULL));
    CHECK_INT(-1, fu_box_open(secret, "broker request", ad, sizeof ad - 1, box, BOX, out, NULL));
    CHECK_INT(-1, fu_box_open(secret, "broker request", NULL, 0, box, BOX, out, NULL));
    CHECK_INT(-1, fu_box_open(other, "broker request", ad, sizeof ad, box, BOX, out, NULL));
    CHECK_INT(-1, fu_box_open(secret, "broker request", ad, sizeof ad, box, BOX - 1, out, NULL));
    for (size_t len = 0; len < FU_BOX_OVERHEAD; len++)
        CHECK_INT(-1, fu_box_open(secret, "broker request", ad, sizeof ad, box, len, out, NULL));
    int opened = 0;
    for (size_t bit = 0; bit < BOX * 8; bit++) {
        memcpy(bad, box, BOX);
        bad[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        opened += fu_box_open(secret, "broker request", ad, sizeof ad, bad, BOX, out, NULL) == 0;
    }
    CHECK_INT(0, opened);
    /* a refused box leaves nonce_out alone */
    memset(nonce_back, 0xee, sizeof nonce_back);
    CHECK_INT(-1, fu_box_open(other, "broker request", ad, sizeof ad, box, BOX, out, nonce_back));
    CHECK(nonce_back[0] == 0xee && nonce_back[23] == 0xee);

    /* an empty message is a box too */
    uint8_t empty[FU_BOX_OVERHEAD];
    fu_box_seal(secret, "ping", NULL, 0, "", 0, empty, NULL);
    CHECK_INT(0, fu_box_open(secret, "ping", NULL, 0, empty, sizeof empty, out, NULL));
    CHECK_INT(-1, fu_box_open(secret, "pong", NULL, 0, empty, sizeof empty, out, NULL));
}

int main(void)
{
    CHECK_INT(0, fu_seal_init());
    test_round_trip(0);
    test_frame_refusals(0);
    if (crypto_aead_aes256gcm_is_available()) {
        test_round_trip(1);
        test_frame_refusals(1);
    } else {
        fprintf(stderr, "no AES-NI here: AES-256-GCM not tested\n");
    }
    test_handshake_refusals();
    test_secret_file();
    test_boxes();
    CHECK_DONE();
}
