/* invite.h: a provider's invite to a run, and the frames a provider and
 * the broker seal with it (fusionc provide, tools/provide.c; the broker's
 * side, broker_provider.c).
 *
 * The invite file (OUT/invite.key, mode 0600, written by the broker; more
 * by `fusionc invite OUT`), four lines of text:
 *     fusion-invite 1
 *     broker tcp://HOST:PORT
 *     invite N
 *     token <64 hex digits>
 * token = crypto_kdf_derive_from_key(32 bytes, N, "fuinvite", run secret):
 * the broker derives it again from N, so it keeps no tokens, and one
 * invite does not give the run secret nor any other invite.  Revoking N
 * (broker.db's invites table) refuses every request under it.
 *
 * A provider's request, one nanomsg REQ message:
 *     "FPV1" | N (4 bytes, little-endian) | box("provider request", "<stamp> <text>")
 * under the token (comm/seal.h's fu_box; the stamp as broker_client.h's,
 * so a replay is refused); text is "<verb> <name> ..." and may carry bytes
 * after its first newline.  The reply is box("provider reply", text) with
 * the request's nonce bound in, or, when the request did not open (a wrong
 * token, a revoked or unknown invite), "FPV0 <why>" in clear: the broker
 * cannot seal to a key it does not share, and the why says nothing secret. */
#ifndef FUSION_BROKER_INVITE_H
#define FUSION_BROKER_INVITE_H
#include <stddef.h>
#include <stdint.h>

#define INVITE_HEADER  8 /* "FPV1" and the invite's number */
#define INVITE_REFUSAL "FPV0 "

typedef struct {
    char url[300]; /* the broker, tcp://HOST:PORT */
    uint32_t id;
    uint8_t token[32];
} invite;

/* Invite id's token, from the run secret (FU_SECRET_BYTES). */
void invite_token(const uint8_t *secret, uint32_t id, uint8_t token[32]);
/* The invite file at path, mode 0600, atomically.  0, or -1 with err. */
int invite_write(const char *path, const invite *v, char *err, size_t n);
/* The invite file at path (refused when others may read it, or a line is
 * not as above, naming the file and the line).  0, or -1 with err. */
int invite_read(const char *path, invite *v, char *err, size_t n);

/* A request frame of msg (len bytes) into out (len + INVITE_HEADER +
 * FU_BOX_OVERHEAD bytes), its nonce into nonce (24 bytes); its length. */
size_t invite_seal_request(const invite *v, const void *msg, size_t len, uint8_t *out, uint8_t *nonce);
/* 1 when frame is a provider's request (then its invite's number in *id). */
int invite_frame_id(const uint8_t *frame, size_t len, uint32_t *id);
/* The request's text into out (len - INVITE_HEADER - FU_BOX_OVERHEAD
 * bytes), its nonce into nonce.  0, or -1 when it does not open. */
int invite_open_request(const uint8_t *token, const uint8_t *frame, size_t len, void *out, uint8_t *nonce);
/* A reply of msg under token, bound to the request's nonce: out holds
 * len + FU_BOX_OVERHEAD bytes. */
void invite_seal_reply(const uint8_t *token, const uint8_t *nonce, const void *msg, size_t len, uint8_t *out);
/* The reply's text into out (len - FU_BOX_OVERHEAD bytes).  0, or -1. */
int invite_open_reply(const uint8_t *token, const uint8_t *nonce, const uint8_t *box, size_t len, void *out);

#endif
