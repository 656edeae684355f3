/* seal.h: the run secret, the links' handshake, and sealed frames, all on
 * libsodium (no cryptography of our own).
 *
 * The run secret: 32 random bytes made by each compile (OUT/run.key, and
 * run.key in every bundle), mode 0600, never printed.  A device program
 * with links or a broker refuses to start without it.
 *
 * Handshake (transport.c runs it on every link before anything else):
 * each end sends, in clear, a hello of FU_HS_BYTES:
 *
 *     offset size
 *      0      4   "FSH1"
 *      4      4   flags: bit 0 the sender can run AES-256-GCM (AES-NI)
 *      8     32   an ephemeral X25519 public key (crypto_kx), fresh per connection
 *     40     64   the sender's device name, NUL-padded
 *    104     64   the device name it expects at the other end
 *    168      8   the build id (the compile's), little-endian
 *    176      8   the run's epoch
 *
 * Both then hold the same two session keys of crypto_kx (the listener is
 * the "server"), and mix the run secret in: each direction's key is
 *     BLAKE2b-256(key = run secret, "fusion link " DIR || kx key || transcript)
 * where transcript = BLAKE2b-256(listener's hello || connector's hello).
 * So the keys are fresh per connection (forward secret: the ephemeral
 * keys are dropped), and only an end holding the run secret derives them;
 * every field of both hellos is bound in (build id, both names, epoch):
 * the first sealed frame of each side (a confirmation) opens only when
 * both agree on all of it.  Why this and not crypto_kx alone: kx with
 * ephemeral keys authenticates no one; the secret in the KDF is what
 * makes it a pre-shared-key handshake (as Noise's psk modes do).
 *
 * A sealed frame: [counter: 8 bytes LE][ciphertext][tag: 16 bytes], the
 * counter the AEAD's nonce (and its associated data; the transport also
 * leaves each frame's 64-byte header in clear, authenticated: what step
 * and tensor a frame carries is traffic analysis, which sealing does not
 * hide, and the payload goes from the tensor into the frame, and back,
 * in one pass): each direction
 * counts its frames from 0, so a frame that repeats, goes back, or skips
 * ahead does not open at the expected counter.  The AEAD is AES-256-GCM
 * when both ends have AES-NI (faster here), else XChaCha20-Poly1305.
 *
 * Broker messages (request/reply, no session): fu_box_seal/fu_box_open,
 * XChaCha20-Poly1305 with a random nonce under a key derived from the run
 * secret; what the box binds (a counter, the request's nonce) is up to the
 * caller (runtime/broker_client.c).
 */
#ifndef FUSION_SEAL_H
#define FUSION_SEAL_H

#include <stddef.h>
#include <stdint.h>

#define FU_SECRET_BYTES  32
#define FU_HS_BYTES      184
#define FU_SEAL_PREFIX   8  /* the counter, before the ciphertext */
#define FU_SEAL_TAG      16 /* after it */
#define FU_SEAL_OVERHEAD (FU_SEAL_PREFIX + FU_SEAL_TAG)
#define FU_BOX_OVERHEAD  (24 + 16)

/* 0 once libsodium is ready (safe to call from several threads). */
int fu_seal_init(void);

/* A new random secret. */
void fu_secret_new(uint8_t secret[FU_SECRET_BYTES]);
/* The secret file at path: 32 bytes, mode 0600 (refused when anyone but
 * its owner may read or write it).  0, or -1 with err naming the file. */
int fu_secret_load(const char *path, uint8_t secret[FU_SECRET_BYTES], char *err, size_t n);
/* Written to a temporary name with mode 0600, fsynced, renamed.  0, or -1. */
int fu_secret_write(const char *path, const uint8_t secret[FU_SECRET_BYTES], char *err, size_t n);

/* Who this end is, for the handshake. */
typedef struct {
    const uint8_t *secret; /* FU_SECRET_BYTES */
    const char *self;      /* this device's name */
    uint64_t build_id;
    int64_t epoch;
} fu_link_auth;

/* One connection's keys and counters. */
typedef struct {
    uint8_t tx_key[32], rx_key[32];
    uint64_t tx_count, rx_count;
    int aes; /* 1: AES-256-GCM, 0: XChaCha20-Poly1305 */
} fu_seal;

/* This end's half of a handshake in progress (its ephemeral keys). */
typedef struct {
    uint8_t pk[32], sk[32];
    uint8_t hello[FU_HS_BYTES];
} fu_hs;

/* A fresh ephemeral key pair and this end's hello (hs->hello). */
void fu_hs_start(fu_hs *hs, const fu_link_auth *a, const char *expect_peer);
/* Checks the peer's hello (peer, len bytes) and derives s.  listener: this
 * end bound the socket.  The peer's name must be expect_peer, its build id
 * and epoch ours, and it must expect us; else -1 with err saying which.
 * transcript (32 bytes) is what the confirmations carry.  The ephemeral
 * secret key is wiped. */
int fu_hs_finish(fu_hs *hs, const fu_link_auth *a, const char *expect_peer, const uint8_t *peer, size_t len,
                 int listener, fu_seal *s, uint8_t transcript[32], char *err, size_t n);
/* 1 when peer's hello carries this end's own ephemeral key (a TCP
 * self-connect). */
int fu_hs_is_own(const fu_hs *hs, const uint8_t *peer, size_t len);

/* Seals buf in place: buf holds FU_SEAL_PREFIX free bytes, then plain_len
 * bytes, then FU_SEAL_TAG free bytes; returns the sealed length
 * (plain_len + FU_SEAL_OVERHEAD). */
size_t fu_seal_frame(fu_seal *s, uint8_t *buf, size_t plain_len);
/* Opens a sealed frame in place: *plain points into buf, *plain_len set.
 * -1 with err (the counter it carried, the one expected) when it is
 * short, out of sequence or does not authenticate; nothing is advanced. */
int fu_open_frame(fu_seal *s, uint8_t *buf, size_t len, uint8_t **plain, size_t *plain_len, char *err, size_t n);

/* The same with the first clear_len bytes after the counter in clear but
 * authenticated (a frame's header: the transport reads it to know where
 * the payload goes), and the rest encrypted from src (NULL: in place):
 *     [counter][clear_len clear][secret_len ciphertext][tag]
 * One pass over the payload: sealing copies it into the frame, opening
 * leaves the plain bytes in place, header first (*plain). */
size_t fu_seal_frame_split(fu_seal *s, uint8_t *buf, size_t clear_len, const uint8_t *src, size_t secret_len);
int fu_open_frame_split(fu_seal *s, uint8_t *buf, size_t len, size_t clear_len, uint8_t **plain, size_t *plain_len,
                        char *err, size_t n);

/* A box: out (len + FU_BOX_OVERHEAD bytes) = nonce || AEAD(msg), under the
 * key BLAKE2b(secret, "fusion box " context), ad authenticated too.  The
 * nonce is written to nonce_out when not NULL (24 bytes). */
void fu_box_seal(const uint8_t *secret, const char *context, const uint8_t *ad, size_t ad_len, const void *msg,
                 size_t len, uint8_t *out, uint8_t *nonce_out);
/* out (len - FU_BOX_OVERHEAD bytes) from a box; -1 when it does not open. */
int fu_box_open(const uint8_t *secret, const char *context, const uint8_t *ad, size_t ad_len, const uint8_t *box,
                size_t len, void *out, uint8_t *nonce_out);

#endif
