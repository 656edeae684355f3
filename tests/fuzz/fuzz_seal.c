/* fuzz_seal.c: a libFuzzer target for what a link reads from the wire
 * before trusting it (runtime/comm/seal.h): the peer's hello, sealed
 * frames, and broker boxes.
 *
 * The first input byte, sel, chooses; the rest, body, is the input:
 *   sel & 3 == 0: body is the peer's hello to fu_hs_finish, against a fixed
 *                 local end ("main" expecting "worker", fixed build and
 *                 epoch); listener when sel & 4.  The ephemeral secret key
 *                 must be wiped after, and a refusal must say why.
 *   sel & 3 == 1: body is a frame to fu_open_frame under fixed keys, the
 *                 receiver's counter sel >> 3 (so a frame can carry the due
 *                 one), AES-256-GCM when sel & 4 and the CPU has it.  A
 *                 refusal must say why and leave the counter alone.
 *   sel & 3 == 2: body is a box to fu_box_open under a fixed secret.
 *   sel & 3 == 3: body is sealed as a frame (counter sel >> 3) and as a box,
 *                 and each must open back to the same bytes, once only.
 * Every buffer is malloc'ed to its exact size, so that ASan sees any read
 * or write past it.  A violated expectation abort()s.
 *
 * Forged frames and boxes never open (that is the point), so the paths past
 * the tag are reached only from seeds sealed under these fixed keys: run
 * with FUSION_FUZZ_SEAL_SEEDS=DIR in the environment, the target writes such
 * seeds (good hellos, frames and boxes) into DIR and exits.  ctest does that
 * first (tests/fuzz/run_fuzz_seal.cmake, test fuzz_seal_30s).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "comm/seal.h"

#define ERR 512

/* Everything fixed: a given input does the same thing on every run (the
 * local ephemeral key aside, which only changes derived key bytes). */
static const uint8_t fixed_secret[FU_SECRET_BYTES] = "fuzz_seal: a fixed run secret..";
static const uint8_t fixed_key[32] = "fuzz_seal: a fixed session key.";
static const uint8_t box_ad[] = "fuzz_seal ad";
#define BOX_CONTEXT "fuzz"
#define BUILD       0x00f0e1d2c3b4a596ull
#define EPOCH       3

static const fu_link_auth local_auth = { fixed_secret, "main", BUILD, EPOCH };
static const fu_link_auth peer_auth = { fixed_secret, "worker", BUILD, EPOCH };

static void die(const char *what)
{
    fprintf(stderr, "fuzz_seal: %s\n", what);
    abort();
}

/* A receiver (or sender) under the fixed keys. */
static fu_seal fixed_seal(int aes, uint64_t count)
{
    fu_seal s;
    memset(&s, 0, sizeof s);
    memcpy(s.tx_key, fixed_key, 32);
    memcpy(s.rx_key, fixed_key, 32);
    s.tx_count = count;
    s.rx_count = count;
    s.aes = aes && crypto_aead_aes256gcm_is_available();
    return s;
}

/* The local end's half of the handshake, started once (a key pair per
 * input would cost more than the parsing under test). */
static fu_hs local_hs;

static void fuzz_hello(uint8_t sel, const uint8_t *body, size_t len)
{
    /* a copy per input: fu_hs_finish wipes its secret key */
    fu_hs hs = local_hs;
    fu_seal s;
    uint8_t transcript[32];
    char err[ERR] = "";
    (void)fu_hs_is_own(&hs, body, len);
    int rc = fu_hs_finish(&hs, &local_auth, "worker", body, len, sel & 4, &s, transcript, err, sizeof err);
    if (!sodium_is_zero(hs.sk, sizeof hs.sk))
        die("fu_hs_finish left the ephemeral secret key");
    if (rc != 0 && err[0] == '\0')
        die("fu_hs_finish refused a hello without saying why");
    if (rc == 0) {
        /* the keys must work: seal the confirmation */
        uint8_t frame[32 + FU_SEAL_OVERHEAD];
        memcpy(frame + FU_SEAL_PREFIX, transcript, 32);
        if (fu_seal_frame(&s, frame, 32) != 32 + FU_SEAL_OVERHEAD)
            die("fu_seal_frame returned a wrong length");
    }
}

static void fuzz_frame(uint8_t sel, const uint8_t *body, size_t len)
{
    fu_seal s = fixed_seal(sel & 4, sel >> 3);
    uint8_t *buf = malloc(len ? len : 1), *plain = NULL;
    if (!buf)
        return;
    if (len)
        memcpy(buf, body, len);
    size_t plain_len = 0;
    char err[ERR] = "";
    if (fu_open_frame(&s, buf, len, &plain, &plain_len, err, sizeof err) == 0) {
        if (plain != buf + FU_SEAL_PREFIX || plain_len + FU_SEAL_OVERHEAD != len ||
            s.rx_count != (uint64_t)(sel >> 3) + 1)
            die("fu_open_frame opened a frame but said something inconsistent");
    } else {
        if (err[0] == '\0')
            die("fu_open_frame refused a frame without saying why");
        if (s.rx_count != (uint64_t)(sel >> 3))
            die("fu_open_frame moved the counter on a refused frame");
    }
    free(buf);
}

static void fuzz_box(const uint8_t *body, size_t len)
{
    uint8_t *box = malloc(len ? len : 1), nonce[24];
    void *out = malloc(len > FU_BOX_OVERHEAD ? len - FU_BOX_OVERHEAD : 1);
    if (box && out) {
        if (len)
            memcpy(box, body, len);
        if (fu_box_open(fixed_secret, BOX_CONTEXT, box_ad, sizeof box_ad, box, len, out, nonce) == 0 &&
            memcmp(nonce, box, 24) != 0)
            die("fu_box_open opened a box but gave another nonce");
    }
    free(box);
    free(out);
}

static void round_trip(uint8_t sel, const uint8_t *body, size_t len)
{
    /* a frame */
    fu_seal tx = fixed_seal(sel & 4, sel >> 3), rx = tx;
    uint8_t *frame = malloc(len + FU_SEAL_OVERHEAD), *plain = NULL;
    size_t plain_len = 0;
    char err[ERR] = "";
    if (!frame)
        return;
    if (len)
        memcpy(frame + FU_SEAL_PREFIX, body, len);
    size_t n = fu_seal_frame(&tx, frame, len);
    if (n != len + FU_SEAL_OVERHEAD)
        die("fu_seal_frame returned a wrong length");
    uint8_t *copy = malloc(n);
    if (!copy) {
        free(frame);
        return;
    }
    memcpy(copy, frame, n);
    if (fu_open_frame(&rx, frame, n, &plain, &plain_len, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_seal: %s\n", err);
        die("a frame just sealed does not open");
    }
    if (plain_len != len || (len && memcmp(plain, body, len) != 0))
        die("a frame opens to other bytes than were sealed");
    if (fu_open_frame(&rx, copy, n, &plain, &plain_len, err, sizeof err) == 0)
        die("a frame opened twice");
    free(frame);
    free(copy);

    /* a box */
    uint8_t *box = malloc(len + FU_BOX_OVERHEAD), nonce[24], nonce_back[24];
    uint8_t *out = malloc(len ? len : 1);
    if (box && out) {
        fu_box_seal(fixed_secret, BOX_CONTEXT, box_ad, sizeof box_ad, body, len, box, nonce);
        if (fu_box_open(fixed_secret, BOX_CONTEXT, box_ad, sizeof box_ad, box, len + FU_BOX_OVERHEAD, out,
                        nonce_back) != 0)
            die("a box just sealed does not open");
        if ((len && memcmp(out, body, len) != 0) || memcmp(nonce, nonce_back, 24) != 0)
            die("a box opens to other bytes than were sealed");
    }
    free(box);
    free(out);
}

/* ---- seeds ------------------------------------------------------------------ */

static void write_seed(const char *dir, const char *name, uint8_t sel, const uint8_t *body, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fputc(sel, f) == EOF || (len && fwrite(body, 1, len, f) != len) || fclose(f) != 0) {
        fprintf(stderr, "fuzz_seal: cannot write the seed %s\n", path);
        exit(1);
    }
}

/* Good hellos (both roles), frames that open (both ciphers, a few
 * counters), a box that opens, and a few plain inputs to round-trip. */
static void write_seeds(const char *dir)
{
    fu_hs peer;
    fu_hs_start(&peer, &peer_auth, "main");
    write_seed(dir, "hello-listener", 0 | 4, peer.hello, FU_HS_BYTES);
    write_seed(dir, "hello-connector", 0, peer.hello, FU_HS_BYTES);

    static const char msg[] = "step 12 gradients, 1 KiB of them in a real run";
    for (int aes = 0; aes < 2; aes++) {
        for (uint64_t count = 0; count < 32; count += 9) {
            fu_seal s = fixed_seal(aes, count);
            uint8_t frame[sizeof msg + FU_SEAL_OVERHEAD];
            memcpy(frame + FU_SEAL_PREFIX, msg, sizeof msg);
            size_t n = fu_seal_frame(&s, frame, sizeof msg);
            char name[64];
            snprintf(name, sizeof name, "frame-%s-%llu", aes ? "aes" : "xchacha", (unsigned long long)count);
            write_seed(dir, name, (uint8_t)(1 | aes << 2 | count << 3), frame, n);
        }
    }
    uint8_t box[sizeof msg + FU_BOX_OVERHEAD];
    fu_box_seal(fixed_secret, BOX_CONTEXT, box_ad, sizeof box_ad, msg, sizeof msg, box, NULL);
    write_seed(dir, "box", 2, box, sizeof box);
    write_seed(dir, "round-trip-empty", 3, NULL, 0);
    write_seed(dir, "round-trip-text", 3 | 4 | 5 << 3, (const uint8_t *)msg, sizeof msg);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (fu_seal_init() != 0)
        die("libsodium does not start");
    const char *dir = getenv("FUSION_FUZZ_SEAL_SEEDS");
    if (dir && dir[0]) {
        write_seeds(dir);
        exit(0);
    }
    fu_hs_start(&local_hs, &local_auth, "worker");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t sel = data[0];
    size_t len = size - 1;
    /* an exact-size copy of the body, so ASan sees any read past its end */
    uint8_t *body = malloc(len ? len : 1);
    if (!body)
        return 0;
    if (len)
        memcpy(body, data + 1, len);
    switch (sel & 3) {
    case 0:
        fuzz_hello(sel, body, len);
        break;
    case 1:
        fuzz_frame(sel, body, len);
        break;
    case 2:
        fuzz_box(body, len);
        break;
    default:
        round_trip(sel, body, len);
        break;
    }
    free(body);
    return 0;
}
